//! Real installs: a Debian bookworm chroot made by debootstrap installs from signed Quarry apt
//! repos (`signed-by`) over loopback — the dpkg-deb-built fixtures (and runs one), then the
//! kpack family `quarry package deb` built from a TheRock artifact tree.
//!
//! The chroot is built once into `target/debootstrap-bookworm/` (about a minute, from
//! `QUARRY_DEBIAN_MIRROR` or deb.debian.org) and reused; the test removes what it installed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quarry_index::{IndexConfig, Signer};
use quarry_tests::native::{DEB_ROOT, artifact, build_fixtures, files_in, test_key, text, upload_files};
use quarry_tests::{TestServer, assert_success, quarry_bin, run, workspace_root};

/// The cached chroot, made on first use. Needs root (debootstrap, chroot).
async fn chroot_dir() -> PathBuf {
    let dir = workspace_root().join("target/debootstrap-bookworm");
    let done = dir.join(".quarry-complete");
    if done.exists() {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mirror = std::env::var("QUARRY_DEBIAN_MIRROR").unwrap_or_else(|_| "http://deb.debian.org/debian".into());
    let mut cmd = tokio::process::Command::new("debootstrap");
    cmd.args(["--variant=minbase", "bookworm"]).arg(&dir).arg(&mirror);
    let out = run(cmd, Duration::from_secs(900)).await;
    assert_success(&out, "debootstrap (needs root and the Debian mirror)");
    std::fs::write(&done, "").unwrap();
    dir
}

async fn in_chroot(root: &Path, args: &[&str]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new("chroot");
    cmd.arg(root).args(args).env("DEBIAN_FRONTEND", "noninteractive").env("LC_ALL", "C");
    run(cmd, Duration::from_secs(300)).await
}

/// A signed server holding every .deb in `debs`.
async fn signed_repo(debs: &Path) -> (TestServer, String) {
    let (secret, public) = test_key("ed25519");
    let config =
        IndexConfig { signer: Some(Arc::new(Signer::from_armored(&secret).unwrap())), ..IndexConfig::default() };
    let server = TestServer::start_with_config(config).await;
    upload_files(&server, &format!("{DEB_ROOT}pool/main/"), files_in(debs)).await;
    (server, public)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_debootstrap_chroot_installs_from_signed_repos() {
    // One chroot, so the two installs run one after the other.
    let root = chroot_dir().await;
    fixtures_install(&root).await;
    packaged_install(&root).await;
}

/// Make the chroot's apt use only `server`'s repo, pinned to `public`.
fn point_at(root: &Path, server: &TestServer, public: &str) {
    std::fs::create_dir_all(root.join("etc/apt/keyrings")).unwrap();
    std::fs::write(root.join("etc/apt/keyrings/quarry.asc"), public).unwrap();
    let source = format!("deb [signed-by=/etc/apt/keyrings/quarry.asc] {}{DEB_ROOT} stable main\n", server.url);
    std::fs::write(root.join("etc/apt/quarry-test.list"), source).unwrap();
}

/// apt-get in the chroot with only the test's sources list (the chroot's own Debian sources
/// are left out).
async fn chroot_apt(root: &Path, verb: &str, rest: &[&str]) -> std::process::Output {
    let mut args = vec![
        "apt-get",
        "-oDir::Etc::SourceList=/etc/apt/quarry-test.list",
        "-oDir::Etc::SourceParts=/dev/null",
        "-oAcquire::Retries=0",
        verb,
    ];
    args.extend_from_slice(rest);
    in_chroot(root, &args).await
}

async fn fixtures_install(root: &Path) {
    let root = root.to_path_buf();
    let tmp = tempfile::tempdir().unwrap();
    build_fixtures(tmp.path(), None).await;
    let (server, public) = signed_repo(&tmp.path().join("deb")).await;

    point_at(&root, &server, &public);
    let apt = |verb: &'static str, rest: &'static [&'static str]| chroot_apt(&root, verb, rest);
    let update = apt("update", &[]).await;
    assert_success(&update, "apt-get update in the chroot");
    assert!(!text(&update).contains("W: "), "{}", text(&update));
    let install = apt("install", &["-y", "--no-install-recommends", "quarry-hello"]).await;
    let log = text(&install);
    let hello = in_chroot(&root, &["quarry-hello"]).await;
    let status = in_chroot(
        &root,
        &["dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n", "quarry-hello", "libquarry-hello"],
    )
    .await;
    // Leave the cached chroot as it was before asserting anything.
    let _ = apt("purge", &["-y", "quarry-hello", "libquarry-hello"]).await;
    let _ = std::fs::remove_file(root.join("etc/apt/quarry-test.list"));
    server.stop().await;

    assert_success(&install, "apt-get install in the chroot");
    assert!(log.contains("Setting up libquarry-hello (1.0-1)"), "the dependency came from our Packages:\n{log}");
    assert_success(&hello, "quarry-hello");
    assert_eq!(String::from_utf8_lossy(&hello.stdout).trim(), "hello from quarry");
    let status = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(status.contains("quarry-hello 1.0-1 install ok installed"), "{status}");
    assert!(status.contains("libquarry-hello 1.0-1 install ok installed"), "{status}");
}

/// `quarry package deb` over a TheRock tree, then `apt-get install amdrocm-fft` in the chroot:
/// the unversioned package pulls the meta, the host and both device packages, and the runtime
/// and sysdeps packages the host depends on.
async fn packaged_install(root: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    let artifacts = tmp.path().join("artifacts");
    let lib = [
        ("lib/librocfft.so.0.1", "rocfft"),
        ("lib/librocfft.so.0", "->librocfft.so.0.1"),
        ("lib/librocfft.so", "->librocfft.so.0"),
    ];
    artifact(&artifacts, "fft_lib_generic", "math-libs/rocFFT/stage", &lib);
    for gfx in ["gfx1100", "gfx942"] {
        artifact(
            &artifacts,
            &format!("fft_lib_{gfx}"),
            "math-libs/rocFFT/stage",
            &[(&format!("lib/rocfft/{gfx}.kpack"), gfx)],
        );
    }
    artifact(&artifacts, "core-hip_lib_generic", "core/clr/stage", &[("lib/libamdhip64.so.7", "hip")]);
    artifact(&artifacts, "sysdeps_lib_generic", "third-party/sysdeps/stage", &[("lib/rocm_sysdeps/libz.so.1", "z")]);
    let debs = tmp.path().join("debs");
    let mut package = tokio::process::Command::new(quarry_bin());
    package
        .args(["package", "deb", "--artifacts-dir"])
        .arg(&artifacts)
        .arg("--dest-dir")
        .arg(&debs)
        .args(["--rocm-version", "7.1.0", "--version-suffix", "12345", "--enable-kpack", "--target", "gfx1100,gfx942"])
        .args(["--pkg-names", "amdrocm-fft", "amdrocm-runtime", "amdrocm-sysdeps"]);
    assert_success(&run(package, Duration::from_secs(300)).await, "quarry package deb");
    let (server, public) = signed_repo(&debs).await;
    point_at(root, &server, &public);
    let update = chroot_apt(root, "update", &[]).await;
    let install = chroot_apt(root, "install", &["-y", "--no-install-recommends", "amdrocm-fft"]).await;
    let lib = root.join("opt/rocm/core-7.1/lib");
    let link = std::fs::read_link(lib.join("librocfft.so")).ok();
    let kpacks = ["gfx1100", "gfx942"].map(|g| std::fs::read_to_string(lib.join(format!("rocfft/{g}.kpack"))).ok());
    let hip = lib.join("libamdhip64.so.7").exists();
    let verify = in_chroot(root, &["dpkg", "--verify", "amdrocm-fft-host7.1", "amdrocm-fft7.1-gfx942"]).await;
    let installed = [
        "amdrocm-fft",
        "amdrocm-fft7.1",
        "amdrocm-fft-host7.1",
        "amdrocm-fft7.1-gfx1100",
        "amdrocm-fft7.1-gfx942",
        "amdrocm-runtime7.1",
        "amdrocm-sysdeps7.1",
    ];
    let mut purge = vec!["-y"];
    purge.extend(installed);
    let _ = chroot_apt(root, "purge", &purge).await;
    let _ = std::fs::remove_file(root.join("etc/apt/quarry-test.list"));
    server.stop().await;

    assert_success(&update, "apt-get update in the chroot");
    assert_success(&install, "apt-get install amdrocm-fft in the chroot");
    let log = text(&install);
    for package in installed {
        assert!(log.contains(&format!("Setting up {package} (7.1.0-12345)")), "{package} not installed:\n{log}");
    }
    assert_eq!(link.as_deref(), Some(Path::new("librocfft.so.0")));
    assert_eq!(kpacks, [Some("gfx1100".to_owned()), Some("gfx942".to_owned())]);
    assert!(hip, "the runtime package's files");
    assert_success(&verify, "dpkg --verify in the chroot");
}
