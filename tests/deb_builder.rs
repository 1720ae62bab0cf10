//! The .deb builder judged by dpkg itself: `dpkg-deb --info/--contents` read what
//! `quarry-builder` wrote (owners root:root, modes, the symlink chain), `dpkg --root` installs
//! it into an empty root, and `dpkg --verify` finds every file matching its md5sums.

use std::path::Path;

use quarry_builder::{Compression, DebControl, Item, build_deb};
use quarry_tests::assert_success;
use quarry_tests::native::{dpkg_root, run_tool};

fn tree(dir: &Path) -> Vec<(String, Item)> {
    std::fs::write(dir.join("tool"), "#!/bin/sh\necho 'hello from a built package'\n").unwrap();
    std::fs::write(dir.join("lib"), vec![0x5au8; 300_000]).unwrap();
    std::fs::write(dir.join("doc"), "docs\n").unwrap();
    vec![
        ("usr/bin/quarry-built".into(), Item::File { source: dir.join("tool"), mode: 0o755 }),
        ("opt/rocm/core-7.1/lib/libdemo.so.1.0".into(), Item::File { source: dir.join("lib"), mode: 0o644 }),
        ("opt/rocm/core-7.1/lib/libdemo.so.1".into(), Item::Symlink { target: "libdemo.so.1.0".into() }),
        ("opt/rocm/core-7.1/lib/libdemo.so".into(), Item::Symlink { target: "libdemo.so.1".into() }),
        ("usr/share/doc/quarry-built/README".into(), Item::File { source: dir.join("doc"), mode: 0o644 }),
        // Longer than a tar header's 100-byte name and link fields.
        (
            format!("opt/rocm/core-7.1/share/{}/data.bin", "d".repeat(120)),
            Item::File { source: dir.join("doc"), mode: 0o644 },
        ),
        (
            format!("opt/rocm/core-7.1/share/link-{}", "l".repeat(100)),
            Item::Symlink { target: format!("{}/data.bin", "d".repeat(120)) },
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn dpkg_reads_installs_and_verifies_what_the_builder_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let control = DebControl::default()
        .field("Package", "quarry-built")
        .field("Version", "7.1.0~dev20260820-12345")
        .field("Architecture", "amd64")
        .field("Maintainer", "Quarry Tests <tests@example.invalid>")
        .field("Section", "devel")
        .field("Priority", "optional")
        .field("Description", "a package quarry-builder wrote\n Checked by dpkg.");
    for compression in [Compression::Xz { level: 6 }, Compression::Zstd { level: 3 }, Compression::Gzip { level: 9 }] {
        let report = build_deb(&control, tree(&src), &out, compression, 1_795_000_000).unwrap();
        let deb = report.path.to_str().unwrap().to_owned();

        let info = run_tool("dpkg-deb", &["--info", &deb]).await;
        assert_success(&info, "dpkg-deb --info");
        let info = String::from_utf8_lossy(&info.stdout).to_string();
        assert!(info.contains(" Package: quarry-built") && info.contains(" Installed-Size: 310"), "{info}");

        let contents = run_tool("dpkg-deb", &["--contents", &deb]).await;
        assert_success(&contents, "dpkg-deb --contents");
        let contents = String::from_utf8_lossy(&contents.stdout).to_string();
        for line in contents.lines() {
            assert!(line.contains(" root/root "), "owner: {line}");
            assert!(line.contains("2026-11-18"), "mtime from the epoch: {line}");
        }
        assert!(contents.contains("-rwxr-xr-x root/root") && contents.contains("./usr/bin/quarry-built"), "{contents}");
        assert!(contents.contains("./opt/rocm/core-7.1/lib/libdemo.so -> libdemo.so.1"), "{contents}");
        assert!(contents.contains(&format!("/{}/data.bin", "d".repeat(120))), "{contents}");

        // Install into an empty dpkg root, run nothing, verify every file against md5sums.
        let root = tmp.path().join(format!("root-{}", report.size));
        let root_arg = dpkg_root(&root);
        let install = run_tool("dpkg", &[&root_arg, "--force-script-chrootless", "--force-not-root", "-i", &deb]).await;
        assert_success(&install, "dpkg --root -i");
        assert_eq!(
            std::fs::read_link(root.join("opt/rocm/core-7.1/lib/libdemo.so")).unwrap(),
            Path::new("libdemo.so.1")
        );
        assert_eq!(std::fs::read(root.join("opt/rocm/core-7.1/lib/libdemo.so.1.0")).unwrap().len(), 300_000);
        let long_link = root.join(format!("opt/rocm/core-7.1/share/link-{}", "l".repeat(100)));
        assert_eq!(std::fs::read(long_link).unwrap(), b"docs\n", "the long symlink resolves");
        let verify = run_tool("dpkg", &[&root_arg, "--verify", "quarry-built"]).await;
        assert_success(&verify, "dpkg --verify");
        assert_eq!(String::from_utf8_lossy(&verify.stdout), "", "dpkg --verify found differences");
        // A tampered file is caught by the md5sums we wrote.
        std::fs::write(root.join("usr/share/doc/quarry-built/README"), "changed\n").unwrap();
        let verify = run_tool("dpkg", &[&root_arg, "--verify", "quarry-built"]).await;
        assert!(String::from_utf8_lossy(&verify.stdout).contains("README"), "tampering went unnoticed");
        std::fs::remove_file(&report.path).unwrap();
    }
}
