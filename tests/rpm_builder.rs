//! The .rpm builder judged by rpm and dnf: `rpm -qip`/`-qlvp` read what `quarry-builder`
//! wrote, `rpm -K` checks its digests, and dnf installs a package and the dependency it pins
//! from a repository Quarry indexed.

use std::path::Path;

use quarry_builder::{Item, RpmCompression, RpmSpec, build_rpm, build_rpm_threads};
use quarry_tests::native::{RPM_ROOT, dnf, run_tool, test_key, text, upload_files};
use quarry_tests::{TestServer, assert_success};

fn spec(name: &str, requires: &[&str]) -> RpmSpec {
    RpmSpec {
        name: name.into(),
        version: "7.1.0~dev20260820".into(),
        release: "12345".into(),
        arch: "x86_64".into(),
        license: "MIT".into(),
        summary: format!("{name}, built by quarry-builder"),
        description: "Checked by rpm and dnf.".into(),
        url: "https://example.invalid/quarry".into(),
        vendor: "Quarry Tests".into(),
        group: "Development/Libraries".into(),
        requires: requires.iter().map(|r| (*r).to_owned()).collect(),
        ..RpmSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rpm_reads_and_dnf_installs_what_the_builder_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(src.join("lib"), vec![0x42u8; 200_000]).unwrap();
    std::fs::write(src.join("conf"), "key=value\n").unwrap();
    let lib_items = vec![
        ("opt/rocm/core-7.1/lib".to_owned(), Item::Dir { mode: 0o755 }),
        ("opt/rocm/core-7.1/lib/libdemo.so.1.0".to_owned(), Item::File { source: src.join("lib"), mode: 0o755 }),
        ("opt/rocm/core-7.1/lib/libdemo.so.1".to_owned(), Item::Symlink { target: "libdemo.so.1.0".into() }),
        ("opt/rocm/core-7.1/lib/libdemo.so".to_owned(), Item::Symlink { target: "libdemo.so.1".into() }),
    ];
    let (ed25519, ed25519_pub) = test_key("ed25519");
    let (rsa, rsa_pub) = test_key("rsa3072");
    let lib = build_rpm(
        &spec("quarry-demo-lib7.1", &[]),
        lib_items.clone(),
        &out,
        RpmCompression::default(),
        1_795_000_000,
        Some(&ed25519),
    )
    .unwrap();
    let app_items =
        vec![("opt/rocm/core-7.1/etc/demo.conf".to_owned(), Item::File { source: src.join("conf"), mode: 0o644 })];
    let app = build_rpm(
        &spec("quarry-demo7.1", &["quarry-demo-lib7.1 = 7.1.0~dev20260820-12345"]),
        app_items,
        &out,
        RpmCompression::Gzip { level: 9 },
        1_795_000_000,
        Some(&rsa),
    )
    .unwrap();

    let lib_path = lib.path.to_str().unwrap();
    let info = run_tool("rpm", &["-qip", lib_path]).await;
    assert_success(&info, "rpm -qip");
    let info = String::from_utf8_lossy(&info.stdout).to_string();
    assert!(info.contains("Name        : quarry-demo-lib7.1") && info.contains("Release     : 12345"), "{info}");
    let list = run_tool("rpm", &["-qlvp", lib_path]).await;
    assert_success(&list, "rpm -qlvp");
    let list = String::from_utf8_lossy(&list.stdout).to_string();
    assert!(list.contains("/opt/rocm/core-7.1/lib/libdemo.so -> libdemo.so.1"), "{list}");
    for line in list.lines() {
        assert!(line.contains(" root     root "), "owner: {line}");
    }
    for rpm in [lib_path, app.path.to_str().unwrap()] {
        let check = run_tool("rpm", &["-K", "--nosignature", rpm]).await;
        assert_success(&check, "rpm -K --nosignature");
        assert!(text(&check).contains("digests OK"), "{}", text(&check));
    }
    // Signed: rpm -K fails without the keys (NOKEY), passes with both imported into an
    // rpmdb of our own.
    let db = tmp.path().join("rpmdb");
    std::fs::create_dir_all(&db).unwrap();
    let db = format!("--dbpath={}", db.display());
    for rpm in [lib_path, app.path.to_str().unwrap()] {
        let check = run_tool("rpm", &[&db, "-K", rpm]).await;
        assert!(!check.status.success(), "no key imported yet: {}", text(&check));
    }
    for public in [&ed25519_pub, &rsa_pub] {
        let file = tmp.path().join("key.asc");
        std::fs::write(&file, public).unwrap();
        assert_success(&run_tool("rpm", &[&db, "--import", file.to_str().unwrap()]).await, "rpm --import");
    }
    for rpm in [lib_path, app.path.to_str().unwrap()] {
        let check = run_tool("rpm", &[&db, "-Kv", rpm]).await;
        assert_success(&check, "rpm -K with the keys");
        let out = text(&check);
        assert!(out.contains("Header V4") && out.contains("Signature, key ID") && out.contains(": OK"), "{out}");
    }

    // Four compression threads, the same signed bytes.
    let again = tmp.path().join("again");
    std::fs::create_dir_all(&again).unwrap();
    let spec = spec("quarry-demo-lib7.1", &[]);
    let threaded =
        build_rpm_threads(&spec, lib_items, &again, RpmCompression::default(), 1_795_000_000, Some(&ed25519), 4)
            .unwrap();
    assert!(std::fs::read(&threaded.path).unwrap() == std::fs::read(&lib.path).unwrap(), "same bytes on 4 threads");

    // Indexed by Quarry, installed by dnf with the pinned dependency.
    let server = TestServer::start().await;
    upload_files(&server, RPM_ROOT, [lib.path.clone(), app.path.clone()]).await;
    let root = tmp.path().join("root");
    let out = dnf(&format!("{}{RPM_ROOT}", server.url), &root, &[], &["install", "quarry-demo7.1"]).await;
    assert_success(&out, "dnf install");
    assert!(text(&out).contains("quarry-demo-lib7.1"), "the pinned dependency came along: {}", text(&out));
    assert_eq!(std::fs::read(root.join("opt/rocm/core-7.1/etc/demo.conf")).unwrap(), b"key=value\n");
    assert_eq!(std::fs::read_link(root.join("opt/rocm/core-7.1/lib/libdemo.so")).unwrap(), Path::new("libdemo.so.1"));
    assert_eq!(std::fs::read(root.join("opt/rocm/core-7.1/lib/libdemo.so")).unwrap().len(), 200_000);
    server.stop().await;
}
