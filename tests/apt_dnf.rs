//! Real apt-get and dnf against the apt and dnf repositories Quarry publishes as packages are
//! uploaded to the in-process server (the `quarry serve` code): signed repos with dependencies
//! resolved from our metadata, the same answers as dpkg-scanpackages and createrepo_c give for
//! the same pool, 32 concurrent uploads, and broken packages left out with a reason.

use std::path::Path;
use std::sync::Arc;

use quarry_index::{IndexConfig, Signer};
use quarry_tests::native::{
    Apt, DEB_ROOT, REPOQUERY_FORMAT, RPM_ROOT, build_fixtures, dnf, files_in, sorted_stanzas, test_key, text,
    upload_files,
};
use quarry_tests::{TestServer, assert_success, plant, quarry_bin, run, sha256_hex};

fn signed(kind: &str) -> IndexConfig {
    let (secret, _) = test_key(kind);
    IndexConfig { signer: Some(Arc::new(Signer::from_armored(&secret).unwrap())), ..IndexConfig::default() }
}

/// Upload every fixture through the server: debs into the apt root's pool, rpms into the dnf root.
async fn upload_all(server: &TestServer, fixtures: &Path) {
    upload_files(server, &format!("{DEB_ROOT}pool/main/"), files_in(&fixtures.join("deb"))).await;
    upload_files(server, RPM_ROOT, files_in(&fixtures.join("rpm"))).await;
}

async fn signed_repos_install(kind: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let server = TestServer::start_with_config(signed(kind)).await;
    upload_all(&server, &fixtures).await;

    // apt, pinned to the key Quarry publishes next to the repo.
    let (status, key) = server.get_text(&format!("{DEB_ROOT}quarry-archive-key.asc")).await;
    assert_eq!(status, 200);
    assert_eq!(key.trim(), test_key(kind).1.trim().lines().collect::<Vec<_>>().join("\n").trim(), "published key");
    let key_path = tmp.path().join("quarry.asc");
    std::fs::write(&key_path, &key).unwrap();
    let url = format!("{}{DEB_ROOT}", server.url);
    let apt = Apt::new(&tmp.path().join("apt"), &format!("deb [signed-by={}] {url} stable main", key_path.display()));
    let update = apt.update().await;
    assert!(update.contains("InRelease"), "apt fetched InRelease:\n{update}");
    let fetched: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert!(fetched.iter().any(|p| p.contains("/by-hash/SHA256/")), "apt used by-hash: {fetched:?}");

    let policy = text(&apt.cache(&["policy", "quarry-hello"]).await);
    assert!(policy.contains("Candidate: 1.0-1"), "{policy}");
    assert!(policy.contains("1.0~rc1-1"), "both versions listed:\n{policy}");
    // Dependencies resolve from our Packages: the library, and TheRock's meta → host + devices.
    let plan = apt.get(&["install", "-s", "quarry-hello", "amdrocm-fft"]).await;
    assert_success(&plan, "apt-get install -s");
    let plan = text(&plan);
    for package in [
        "libquarry-hello (1.0-1",
        "quarry-hello (1.0-1",
        "amdrocm-fft-host7.1 (7.1.0~dev20260820-12345",
        "amdrocm-fft7.1-gfx1100 (7.1.0~dev20260820-12345",
        "amdrocm-fft7.1-gfx942 (7.1.0~dev20260820-12345",
        "amdrocm-fft7.1 (7.1.0~dev20260820-12345",
    ] {
        assert!(plan.contains(&format!("Inst {package}")), "apt would not install {package}:\n{plan}");
    }
    let downloads = tmp.path().join("downloads");
    std::fs::create_dir_all(&downloads).unwrap();
    assert_success(&apt.get_in(&downloads, &["download", "quarry-hello"]).await, "apt-get download");
    let got = std::fs::read(downloads.join("quarry-hello_1.0-1_amd64.deb")).unwrap();
    assert_eq!(
        sha256_hex(&got),
        sha256_hex(&std::fs::read(fixtures.join("deb/quarry-hello_1.0-1_amd64.deb")).unwrap())
    );

    // A client pinned to another key refuses the repo.
    let other = if kind == "ed25519" { "rsa3072" } else { "ed25519" };
    let wrong_key = tmp.path().join("other.asc");
    std::fs::write(&wrong_key, test_key(other).1).unwrap();
    let stranger =
        Apt::new(&tmp.path().join("apt-wrong"), &format!("deb [signed-by={}] {url} stable main", wrong_key.display()));
    let refused = text(&stranger.get(&["update"]).await);
    assert!(refused.contains("NO_PUBKEY") || refused.contains("not signed"), "wrong key accepted:\n{refused}");

    // dnf with repo_gpgcheck=1 against the key Quarry publishes in repodata/.
    let repo = format!("{}{RPM_ROOT}", server.url);
    let gpg = ["r.repo_gpgcheck=1".to_owned(), format!("r.gpgkey={repo}repodata/repomd.xml.key")];
    let root = tmp.path().join("dnfroot");
    let out = dnf(&repo, &root, &gpg, &["install", "quarry-hello", "amdrocm-fft"]).await;
    assert_success(&out, "dnf install");
    for file in [
        "usr/bin/quarry-hello",
        "etc/quarry-hello.conf",
        "usr/lib64/libquarry-hello.so.1",
        "opt/rocm/core-7.1/lib/libfft.so.1",
        "opt/rocm/core-7.1/lib/fft/gfx1100.kpack",
        "opt/rocm/core-7.1/lib/fft/gfx942.kpack",
    ] {
        assert!(root.join(file).exists(), "dnf did not install /{file}:\n{}", text(&out));
    }
    let versions = dnf(&repo, &root, &gpg, &["repoquery", "--qf", "%{version}-%{release}", "quarry-hello"]).await;
    assert_success(&versions, "dnf repoquery");
    let versions = String::from_utf8_lossy(&versions.stdout).to_string();
    assert!(versions.contains("1.0-1") && versions.contains("1.0~rc1-1"), "{versions}");

    // A repomd.xml changed behind the signature is refused.
    let repomd = server.store_dir().join(format!("{RPM_ROOT}repodata/repomd.xml"));
    let original = std::fs::read_to_string(&repomd).unwrap();
    std::fs::write(&repomd, original.replace("<revision>", "<revision>1")).unwrap();
    let tampered = dnf(&repo, &tmp.path().join("dnfroot2"), &gpg, &["makecache"]).await;
    assert!(!tampered.status.success(), "dnf accepted a tampered repomd.xml:\n{}", text(&tampered));
    std::fs::write(&repomd, original).unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn ed25519_signed_repos_install_with_apt_and_dnf() {
    signed_repos_install("ed25519").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rsa3072_signed_repos_install_with_apt_and_dnf() {
    signed_repos_install("rsa3072").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn metadata_matches_dpkg_scanpackages_and_createrepo_c() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let server = TestServer::start().await;
    upload_all(&server, &fixtures).await;

    // The reference repos, made by the reference tools over the same files.
    let reference = tmp.path().join("reference");
    let pool = reference.join("deb/pool/main");
    std::fs::create_dir_all(&pool).unwrap();
    for f in files_in(&fixtures.join("deb")) {
        std::fs::copy(&f, pool.join(f.file_name().unwrap())).unwrap();
    }
    let mut scan = tokio::process::Command::new("dpkg-scanpackages");
    scan.args(["--multiversion", "pool/main", "/dev/null"]).current_dir(reference.join("deb"));
    let scanned = run(scan, std::time::Duration::from_secs(120)).await;
    assert_success(&scanned, "dpkg-scanpackages");
    std::fs::write(reference.join("deb/Packages"), &scanned.stdout).unwrap();
    let rpms = reference.join("rpm");
    std::fs::create_dir_all(&rpms).unwrap();
    for f in files_in(&fixtures.join("rpm")) {
        std::fs::copy(&f, rpms.join(f.file_name().unwrap())).unwrap();
    }
    let mut createrepo = tokio::process::Command::new("createrepo_c");
    createrepo.arg("--quiet").arg(&rpms);
    assert_success(&run(createrepo, std::time::Duration::from_secs(120)).await, "createrepo_c");

    // apt's view of both.
    let ours =
        Apt::new(&tmp.path().join("apt-ours"), &format!("deb [trusted=yes] {}{DEB_ROOT} stable main", server.url));
    ours.update().await;
    let theirs =
        Apt::new(&tmp.path().join("apt-theirs"), &format!("deb [trusted=yes] file://{}/deb ./", reference.display()));
    theirs.update().await;
    let dump = |out: std::process::Output| {
        assert_success(&out, "apt-cache dumpavail");
        sorted_stanzas(&String::from_utf8_lossy(&out.stdout))
    };
    // dumpavail prints each package's candidate; `show` every version of every package.
    let (a, b) = (dump(ours.cache(&["dumpavail"]).await), dump(theirs.cache(&["dumpavail"]).await));
    assert_eq!(a.len(), 7, "{a:#?}");
    assert_eq!(a, b, "apt-cache dumpavail differs from dpkg-scanpackages'");
    let names = ours.cache(&["pkgnames"]).await;
    let names: Vec<String> = String::from_utf8_lossy(&names.stdout).lines().map(str::to_owned).collect();
    let mut show = vec!["show"];
    show.extend(names.iter().map(String::as_str));
    let (a, b) = (dump(ours.cache(&show).await), dump(theirs.cache(&show).await));
    assert_eq!(a.len(), 8, "{a:#?}");
    assert_eq!(a, b, "apt-cache show differs from dpkg-scanpackages'");

    // dnf's view of both.
    let query = |url: String, root: &'static str| {
        let root = tmp.path().join(root);
        async move {
            let out = dnf(&url, &root, &[], &["repoquery", "--qf", REPOQUERY_FORMAT]).await;
            assert_success(&out, "dnf repoquery");
            let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect();
            lines.sort();
            lines
        }
    };
    let ours = query(format!("{}{RPM_ROOT}", server.url), "q1").await;
    let theirs = query(format!("file://{}/", rpms.display()), "q2").await;
    assert!(ours.iter().filter(|l| l.contains("|x86_64|")).count() >= 8, "{ours:?}");
    assert_eq!(ours, theirs, "dnf repoquery differs from createrepo_c's");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn thirty_two_concurrent_uploads_all_land_in_both_repos() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, Some(32)).await;
    let server = Arc::new(TestServer::start().await);
    let mut uploads = Vec::new();
    for (dir, prefix) in [("deb", format!("{DEB_ROOT}pool/main/")), ("rpm", RPM_ROOT.to_owned())] {
        for file in files_in(&fixtures.join(dir)) {
            let server = server.clone();
            let key = format!("{prefix}{}", file.file_name().unwrap().to_str().unwrap());
            uploads.push(tokio::spawn(async move {
                let (status, body) = server.upload_bytes(&key, std::fs::read(&file).unwrap()).await;
                assert_eq!(status, 201, "{key}: {body}");
            }));
        }
    }
    assert_eq!(uploads.len(), 64);
    for upload in uploads {
        upload.await.unwrap();
    }
    let apt = Apt::new(&tmp.path().join("apt"), &format!("deb [trusted=yes] {}{DEB_ROOT} stable main", server.url));
    apt.update().await;
    let names = apt.cache(&["pkgnames", "quarry-many-"]).await;
    assert_success(&names, "apt-cache pkgnames");
    assert_eq!(String::from_utf8_lossy(&names.stdout).lines().count(), 32);
    let out =
        dnf(&format!("{}{RPM_ROOT}", server.url), &tmp.path().join("root"), &[], &["repoquery", "--qf", "%{name}"])
            .await;
    assert_success(&out, "dnf repoquery");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("quarry-many-")).count(), 32);
    let (_, packages) = server.get_text(&format!("{DEB_ROOT}dists/stable/main/binary-amd64/Packages")).await;
    assert_eq!(packages.matches("\nPackage: ").count() + usize::from(packages.starts_with("Package: ")), 32);
    // Audited from Release and repomd.xml down: every index matches its checksum, every package
    // it names exists, every uploaded package is named.
    let store = quarry_store::LocalStore::open(server.store_dir()).unwrap();
    for root in [DEB_ROOT, RPM_ROOT] {
        let report = quarry_index::check(
            &store,
            &quarry_index::RepoRoot::new(root, &Default::default()).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        assert!(report.is_clean() && report.files == 32, "{report}");
    }
}

/// Write a file straight into the store, the way an out-of-band upload (aws s3 cp) lands.
#[tokio::test(flavor = "multi_thread")]
async fn broken_packages_are_left_out_with_a_reason_and_the_repos_stay_valid() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let store = tmp.path().join("store");
    for f in files_in(&fixtures.join("deb")) {
        plant(
            &store,
            &format!("{DEB_ROOT}pool/main/{}", f.file_name().unwrap().to_str().unwrap()),
            &std::fs::read(&f).unwrap(),
        );
    }
    for f in files_in(&fixtures.join("rpm")) {
        plant(&store, &format!("{RPM_ROOT}{}", f.file_name().unwrap().to_str().unwrap()), &std::fs::read(&f).unwrap());
    }
    let deb = std::fs::read(fixtures.join("deb/quarry-hello_1.0-1_amd64.deb")).unwrap();
    let rpm = std::fs::read(fixtures.join("rpm/quarry-hello-1.0-1.x86_64.rpm")).unwrap();
    // Cut inside the data member; only the control member and ar headers survive.
    plant(&store, &format!("{DEB_ROOT}pool/main/truncated_1.0_amd64.deb"), &deb[..deb.len() - 100]);
    // An ar archive with debian-binary and data but no control member.
    let mut no_control = b"!<arch>\n".to_vec();
    for (name, data) in [("debian-binary", &b"2.0\n"[..]), ("data.tar", &[0u8; 1024][..])] {
        no_control.extend_from_slice(
            format!("{name:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`\n", 0, 0, 0, 100644, data.len()).as_bytes(),
        );
        no_control.extend_from_slice(data);
    }
    plant(&store, &format!("{DEB_ROOT}pool/main/nocontrol_1.0_amd64.deb"), &no_control);
    plant(&store, &format!("{RPM_ROOT}garbage-1.0-1.x86_64.rpm"), b"this is not an rpm at all, just text");
    // Flip one byte inside the main header's data: the header digest no longer matches.
    let mut corrupt = rpm.clone();
    let at = corrupt.len().min(5000) - 200;
    corrupt[at] ^= 0x55;
    plant(&store, &format!("{RPM_ROOT}corrupt-1.0-1.x86_64.rpm"), &corrupt);

    let mut index = tokio::process::Command::new(quarry_bin());
    index.args(["index", "--json"]).arg(&store);
    let out = run(index, std::time::Duration::from_secs(120)).await;
    assert_success(&out, "quarry index");
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rejected = |root: &str| -> serde_json::Map<String, serde_json::Value> {
        let report = reports.as_array().unwrap().iter().find(|r| r["root"] == root).expect("root indexed");
        report["rejected"].as_object().unwrap().clone()
    };
    let debs = rejected(DEB_ROOT);
    let rpms = rejected(RPM_ROOT);
    let reason = |map: &serde_json::Map<String, serde_json::Value>, key: &str| map[key].as_str().unwrap().to_owned();
    assert!(reason(&debs, "pool/main/truncated_1.0_amd64.deb").contains("truncated"), "{debs:?}");
    assert!(reason(&debs, "pool/main/nocontrol_1.0_amd64.deb").contains("no control member"), "{debs:?}");
    assert!(reason(&rpms, "garbage-1.0-1.x86_64.rpm").contains("not an RPM"), "{rpms:?}");
    assert!(reason(&rpms, "corrupt-1.0-1.x86_64.rpm").contains("corrupt header"), "{rpms:?}");
    assert_eq!((debs.len(), rpms.len()), (2, 2));
    let mut check = tokio::process::Command::new(quarry_bin());
    check.args(["index", "--check"]).arg(&store);
    let out = run(check, std::time::Duration::from_secs(120)).await;
    assert_success(&out, "quarry index --check");

    // The repos hold every good package and nothing else; apt and dnf are happy with them.
    let server = TestServer::start_in_store(relocate(tmp.path(), &store)).await;
    let apt = Apt::new(&tmp.path().join("apt"), &format!("deb [trusted=yes] {}{DEB_ROOT} stable main", server.url));
    apt.update().await;
    let names = String::from_utf8_lossy(&apt.cache(&["pkgnames"]).await.stdout).to_string();
    assert!(!names.contains("truncated") && !names.contains("nocontrol") && names.contains("quarry-hello"), "{names}");
    let out = dnf(&format!("{}{RPM_ROOT}", server.url), &tmp.path().join("root"), &[], &["makecache"]).await;
    assert_success(&out, "dnf makecache");
    let out = dnf(
        &format!("{}{RPM_ROOT}", server.url),
        &tmp.path().join("root"),
        &[],
        &["repoquery", "--qf", "%{name}-%{evr}"],
    )
    .await;
    let names = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(names.lines().count(), 8, "{names}");

    // Uploaded through the server, a broken package is refused with the reason and not kept.
    let (status, body) = server.upload_bytes(&format!("{RPM_ROOT}again-1.0-1.x86_64.rpm"), b"garbage".to_vec()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not an RPM"), "{body}");
    assert!(!server.store_dir().join(format!("{RPM_ROOT}again-1.0-1.x86_64.rpm")).exists());
    let (status, body) =
        server.upload_bytes(&format!("{DEB_ROOT}pool/main/cut_1.0_amd64.deb"), deb[..deb.len() / 2].to_vec()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("truncated"), "{body}");
    server.stop().await;
}

/// Move the store directory into a fresh TempDir the server can own.
pub(crate) fn relocate(parent: &Path, store: &Path) -> tempfile::TempDir {
    let dir = tempfile::TempDir::new_in(parent).unwrap();
    std::fs::remove_dir(dir.path()).unwrap();
    std::fs::rename(store, dir.path()).unwrap();
    dir
}
