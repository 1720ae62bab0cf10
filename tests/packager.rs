//! `quarry package deb|rpm` over a synthetic TheRock artifact tree (generic + two GPU targets,
//! lib/dev/doc components, a symlinked `.so` chain): the expected kpack package set with the
//! dependency lines of spec §7, read back by dpkg-deb and rpm, installed by `dpkg --root` and
//! verified; the same input builds byte-identical packages; a hostile manifest fails cleanly.

use std::path::Path;
use std::time::Duration;

use quarry_tests::native::{RPM_ROOT, artifact, dnf, dpkg_root, files_in, text, upload_files};
use quarry_tests::{TestServer, assert_success, quarry_bin, run};

fn tree(root: &Path) {
    let lib = [
        ("lib/librocfft.so.0.1", "rocfft host code"),
        ("lib/librocfft.so.0", "->librocfft.so.0.1"),
        ("lib/librocfft.so", "->librocfft.so.0"),
    ];
    artifact(root, "fft_lib_generic", "math-libs/rocFFT/stage", &lib);
    artifact(root, "fft_doc_generic", "math-libs/rocFFT/stage", &[("share/doc/rocfft/README", "docs")]);
    artifact(root, "fft_dev_generic", "math-libs/rocFFT/stage", &[("include/rocfft/rocfft.h", "/* header */")]);
    for gfx in ["gfx1100", "gfx942"] {
        let code = format!("{gfx} kernels");
        artifact(
            root,
            &format!("fft_lib_{gfx}"),
            "math-libs/rocFFT/stage",
            &[(&format!("lib/rocfft/{gfx}.kpack"), &code)],
        );
    }
    // core-hip carries the runtime package's files; core-runtime would also make amdrocm-base
    // present, whose Debian dependencies (python3) an empty root does not have.
    artifact(root, "core-hip_lib_generic", "core/clr/stage", &[("lib/libamdhip64.so.7", "runtime")]);
    artifact(root, "sysdeps_lib_generic", "third-party/sysdeps/stage", &[("lib/rocm_sysdeps/libz.so.1", "zlib")]);
}

async fn package(kind: &str, artifacts: &Path, dest: &Path, extra: &[&str]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["package", kind, "--json", "--artifacts-dir"])
        .arg(artifacts)
        .arg("--dest-dir")
        .arg(dest)
        .args(["--rocm-version", "7.1.0", "--version-suffix", "daily", "--target", "gfx1100,gfx942", "--enable-kpack"])
        .args(extra)
        .env("SOURCE_DATE_EPOCH", "1795000000");
    run(cmd, Duration::from_secs(300)).await
}

async fn field(deb: &Path, name: &str) -> String {
    let mut cmd = tokio::process::Command::new("dpkg-deb");
    cmd.args(["--field"]).arg(deb).arg(name);
    String::from_utf8_lossy(&run(cmd, Duration::from_secs(60)).await.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn kpack_debs_and_rpms_from_a_therock_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let artifacts = tmp.path().join("artifacts");
    tree(&artifacts);
    let names = ["--pkg-names", "amdrocm-fft", "amdrocm-fft-devel", "amdrocm-runtime", "amdrocm-sysdeps"];

    let debs = tmp.path().join("debs");
    let out = package("deb", &artifacts, &debs, &names).await;
    assert_success(&out, "quarry package deb");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut built: Vec<&str> =
        summary["built"].as_array().unwrap().iter().map(|b| b["file"].as_str().unwrap()).collect();
    built.sort_unstable();
    assert_eq!(
        built,
        [
            "amdrocm-fft-dev7.1_7.1.0-daily_amd64.deb",
            "amdrocm-fft-host7.1_7.1.0-daily_amd64.deb",
            "amdrocm-fft7.1-gfx1100_7.1.0-daily_amd64.deb",
            "amdrocm-fft7.1-gfx942_7.1.0-daily_amd64.deb",
            "amdrocm-fft7.1_7.1.0-daily_amd64.deb",
            "amdrocm-fft_7.1.0-daily_amd64.deb",
            "amdrocm-fft-dev_7.1.0-daily_amd64.deb",
            "amdrocm-runtime7.1_7.1.0-daily_amd64.deb",
            "amdrocm-runtime_7.1.0-daily_amd64.deb",
            "amdrocm-sysdeps7.1_7.1.0-daily_amd64.deb",
            "amdrocm-sysdeps_7.1.0-daily_amd64.deb",
        ]
        .iter()
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect::<Vec<_>>()
    );
    assert_eq!(summary["targets"], serde_json::json!(["gfx1100", "gfx942"]));
    let deb = |name: &str| debs.join(name);
    assert_eq!(
        field(&deb("amdrocm-fft-host7.1_7.1.0-daily_amd64.deb"), "Depends").await,
        "libc6, amdrocm-runtime7.1, amdrocm-sysdeps7.1"
    );
    assert_eq!(field(&deb("amdrocm-fft7.1-gfx942_7.1.0-daily_amd64.deb"), "Depends").await, "amdrocm-fft-host7.1");
    assert_eq!(
        field(&deb("amdrocm-fft7.1_7.1.0-daily_amd64.deb"), "Depends").await,
        // dpkg parses TheRock's `name( = v)` pins and prints them normalized.
        "amdrocm-fft-host7.1 (= 7.1.0-daily), amdrocm-fft7.1-gfx1100 (= 7.1.0-daily), amdrocm-fft7.1-gfx942 (= 7.1.0-daily)"
    );
    assert_eq!(field(&deb("amdrocm-fft_7.1.0-daily_amd64.deb"), "Depends").await, "amdrocm-fft7.1");
    assert_eq!(field(&deb("amdrocm-fft-dev7.1_7.1.0-daily_amd64.deb"), "Depends").await, "libc6, amdrocm-fft7.1");

    // Installed into an empty dpkg root: files under the prefix, the .so chain intact, md5sums right.
    let root = tmp.path().join("root");
    let root_arg = dpkg_root(&root);
    let mut install = tokio::process::Command::new("dpkg");
    install.args([&root_arg, "--force-depends", "--force-not-root", "--force-script-chrootless", "-i"]);
    for name in ["amdrocm-fft-host7.1", "amdrocm-fft7.1-gfx1100", "amdrocm-fft7.1-gfx942"] {
        install.arg(deb(&format!("{name}_7.1.0-daily_amd64.deb")));
    }
    assert_success(&run(install, Duration::from_secs(120)).await, "dpkg --root -i");
    let lib = root.join("opt/rocm/core-7.1/lib");
    assert_eq!(std::fs::read_to_string(lib.join("librocfft.so")).unwrap(), "rocfft host code");
    assert_eq!(std::fs::read_link(lib.join("librocfft.so")).unwrap(), Path::new("librocfft.so.0"));
    assert_eq!(std::fs::read_to_string(lib.join("rocfft/gfx942.kpack")).unwrap(), "gfx942 kernels");
    let mut verify = tokio::process::Command::new("dpkg");
    verify.args([&root_arg, "--verify"]);
    let verified = run(verify, Duration::from_secs(60)).await;
    assert_success(&verified, "dpkg --verify");
    assert_eq!(String::from_utf8_lossy(&verified.stdout), "");

    // lintian finds no errors (the /opt/rocm layout is overridden in the package itself).
    let mut lintian = tokio::process::Command::new("lintian");
    lintian.args(["--allow-root", "--fail-on", "error"]);
    lintian.args(files_in(&debs));
    let lint = run(lintian, Duration::from_secs(300)).await;
    let findings = text(&lint);
    assert!(lint.status.success() && !findings.lines().any(|l| l.starts_with("E: ")), "lintian errors:\n{findings}");
    assert!(findings.contains("empty-binary-package"), "lintian looked at the meta packages:\n{findings}");

    // Same input, same bytes.
    let again = tmp.path().join("debs-again");
    assert_success(&package("deb", &artifacts, &again, &names).await, "second build");
    for path in files_in(&debs) {
        let name = path.file_name().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(again.join(name)).unwrap(), "{name:?}");
    }

    // rpm: -devel kept, pins as `name = version-release`, payload readable by rpm.
    let rpms = tmp.path().join("rpms");
    assert_success(&package("rpm", &artifacts, &rpms, &names).await, "quarry package rpm");
    let meta = rpms.join("amdrocm-fft7.1-7.1.0-daily.x86_64.rpm");
    let mut requires = tokio::process::Command::new("rpm");
    requires.args(["-qp", "--requires"]).arg(&meta);
    let requires = run(requires, Duration::from_secs(60)).await;
    assert_success(&requires, "rpm -qp --requires");
    let requires = String::from_utf8_lossy(&requires.stdout).to_string();
    for line in [
        "amdrocm-fft-host7.1 = 7.1.0-daily",
        "amdrocm-fft7.1-gfx1100 = 7.1.0-daily",
        "amdrocm-fft7.1-gfx942 = 7.1.0-daily",
    ] {
        assert!(requires.lines().any(|l| l == line), "{line} in {requires}");
    }
    assert!(rpms.join("amdrocm-fft-devel7.1-7.1.0-daily.x86_64.rpm").exists());
    let mut list = tokio::process::Command::new("rpm");
    list.args(["-qlvp"]).arg(rpms.join("amdrocm-fft-host7.1-7.1.0-daily.x86_64.rpm"));
    let list = String::from_utf8_lossy(&run(list, Duration::from_secs(60)).await.stdout).to_string();
    assert!(list.contains("/opt/rocm/core-7.1/lib/librocfft.so -> librocfft.so.0"), "{list}");

    // rpmlint finds no errors beyond the layout choices tests/fixtures/native/quarry.rpmlintrc names.
    let mut rpmlint = tokio::process::Command::new("rpmlint");
    rpmlint.arg("-r").arg(quarry_tests::workspace_root().join("tests/fixtures/native/quarry.rpmlintrc"));
    for rpm in files_in(&rpms) {
        rpmlint.arg(rpm);
    }
    let lint = run(rpmlint, Duration::from_secs(300)).await;
    assert!(lint.status.success() && text(&lint).contains(" 0 errors"), "rpmlint errors:\n{}", text(&lint));

    // dnf installs the unversioned package from a Quarry repo and gets the whole family.
    let server = TestServer::start().await;
    upload_files(&server, RPM_ROOT, files_in(&rpms)).await;
    let dnf_root = tmp.path().join("dnfroot");
    let out = dnf(&format!("{}{RPM_ROOT}", server.url), &dnf_root, &[], &["install", "amdrocm-fft"]).await;
    assert_success(&out, "dnf install amdrocm-fft");
    for package in [
        "amdrocm-fft-host7.1",
        "amdrocm-fft7.1-gfx1100",
        "amdrocm-fft7.1-gfx942",
        "amdrocm-runtime7.1",
        "amdrocm-sysdeps7.1",
    ] {
        assert!(text(&out).contains(package), "{package} not installed: {}", text(&out));
    }
    let lib = dnf_root.join("opt/rocm/core-7.1/lib");
    assert_eq!(std::fs::read_to_string(lib.join("rocfft/gfx1100.kpack")).unwrap(), "gfx1100 kernels");
    assert_eq!(std::fs::read_link(lib.join("librocfft.so")).unwrap(), Path::new("librocfft.so.0"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_artifacts_fail_with_a_clear_error_and_write_nothing_outside() {
    let tmp = tempfile::tempdir().unwrap();
    let artifacts = tmp.path().join("artifacts");
    tree(&artifacts);
    // A manifest line that climbs out of the artifact, and a link out of the package.
    std::fs::write(artifacts.join("fft_doc_generic/artifact_manifest.txt"), "math-libs/rocFFT/../../../../etc\n")
        .unwrap();
    std::os::unix::fs::symlink("/etc/shadow", artifacts.join("fft_lib_gfx942/math-libs/rocFFT/stage/lib/evil"))
        .unwrap();
    let dest = tmp.path().join("out");
    let out = package("deb", &artifacts, &dest, &["--pkg-names", "amdrocm-fft"]).await;
    assert!(!out.status.success(), "hostile input built");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed = summary["failed"].to_string();
    assert!(failed.contains("leaves the artifact"), "{failed}");
    assert!(failed.contains("points outside the package"), "{failed}");
    // Only packages (and their logs) in the destination, no temporary files anywhere else.
    for entry in std::fs::read_dir(&dest).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(name.ends_with(".deb") || name == "logs", "left behind: {name}");
    }
    let mut cycle = tokio::process::Command::new(quarry_bin());
    let json = tmp.path().join("cycle.json");
    std::fs::write(
        &json,
        r#"[{"Package":"meta-a","Metapackage":"True","DEBDepends":["meta-b"],"Architecture":"amd64","BuildArch":"x86_64"},
            {"Package":"meta-b","Metapackage":"True","DEBDepends":["meta-a"],"Architecture":"amd64","BuildArch":"x86_64"}]"#,
    )
    .unwrap();
    cycle
        .args(["package", "deb", "--artifacts-dir"])
        .arg(&artifacts)
        .arg("--dest-dir")
        .arg(&dest)
        .args(["--rocm-version", "7.1.0", "--package-json"])
        .arg(&json);
    let out = run(cycle, Duration::from_secs(60)).await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("meta-a -> meta-b -> meta-a"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Single-arch (no kpack) with the asan variant: per-target packages named `…-asan…`, installed
/// under `/opt/rocm/core-asan-7.1`, judged by dpkg and lintian; the rpms signed with
/// `--sign-key` and verified by `rpm -K`; dnf installs the unversioned asan package.
#[tokio::test(flavor = "multi_thread")]
async fn single_arch_asan_debs_and_signed_rpms() {
    let tmp = tempfile::tempdir().unwrap();
    let artifacts = tmp.path().join("artifacts");
    // A single-arch build: the per-target artifact holds host code and kernels together.
    let fft = [
        ("lib/librocfft.so.0.1", "rocfft host code"),
        ("lib/librocfft.so.0", "->librocfft.so.0.1"),
        ("lib/librocfft.so", "->librocfft.so.0"),
        ("lib/rocfft/gfx942.kpack", "gfx942 kernels"),
    ];
    artifact(&artifacts, "fft_lib_gfx942", "math-libs/rocFFT/stage", &fft);
    artifact(&artifacts, "core-hip_lib_generic", "core/clr/stage", &[("lib/libamdhip64.so.7", "runtime")]);
    artifact(&artifacts, "sysdeps_lib_generic", "third-party/sysdeps/stage", &[("lib/rocm_sysdeps/libz.so.1", "zlib")]);
    let single = |kind: &'static str, dest: std::path::PathBuf, extra: Vec<String>| {
        let artifacts = artifacts.clone();
        async move {
            let mut cmd = tokio::process::Command::new(quarry_bin());
            cmd.args(["package", kind, "--json", "--artifacts-dir"])
                .arg(&artifacts)
                .arg("--dest-dir")
                .arg(&dest)
                .args(["--rocm-version", "7.1.0", "--version-suffix", "7", "--target", "gfx942"])
                .args(["--build-variant", "asan", "--pkg-names", "amdrocm-fft", "amdrocm-runtime", "amdrocm-sysdeps"])
                .args(extra)
                .env("SOURCE_DATE_EPOCH", "1795000000");
            run(cmd, Duration::from_secs(300)).await
        }
    };
    let debs = tmp.path().join("debs");
    let out = single("deb", debs.clone(), Vec::new()).await;
    assert_success(&out, "quarry package deb --build-variant asan");
    let mut built: Vec<String> =
        files_in(&debs).iter().map(|p| p.file_name().unwrap().to_string_lossy().into()).collect();
    built.sort();
    assert_eq!(
        built,
        [
            "amdrocm-fft-asan-gfx942_7.1.0-7_amd64.deb",
            "amdrocm-fft-asan7.1-gfx942_7.1.0-7_amd64.deb",
            "amdrocm-runtime-asan7.1_7.1.0-7_amd64.deb",
            "amdrocm-runtime-asan_7.1.0-7_amd64.deb",
            "amdrocm-sysdeps-asan7.1_7.1.0-7_amd64.deb",
            "amdrocm-sysdeps-asan_7.1.0-7_amd64.deb",
        ]
    );
    let fft = debs.join("amdrocm-fft-asan7.1-gfx942_7.1.0-7_amd64.deb");
    assert_eq!(field(&fft, "Depends").await, "libc6, amdrocm-runtime-asan7.1, amdrocm-sysdeps-asan7.1");
    let root = tmp.path().join("root");
    let root_arg = dpkg_root(&root);
    let mut install = tokio::process::Command::new("dpkg");
    install.args([&root_arg, "--force-depends", "--force-not-root", "--force-script-chrootless", "-i"]).arg(&fft);
    assert_success(&run(install, Duration::from_secs(120)).await, "dpkg --root -i");
    let lib = root.join("opt/rocm/core-asan-7.1/lib");
    assert_eq!(std::fs::read_to_string(lib.join("librocfft.so.0.1")).unwrap(), "rocfft host code");
    assert_eq!(std::fs::read_to_string(lib.join("rocfft/gfx942.kpack")).unwrap(), "gfx942 kernels");
    assert_eq!(std::fs::read_link(lib.join("librocfft.so")).unwrap(), Path::new("librocfft.so.0"));
    let mut verify = tokio::process::Command::new("dpkg");
    verify.args([&root_arg, "--verify"]);
    let verified = run(verify, Duration::from_secs(60)).await;
    assert_success(&verified, "dpkg --verify");
    let mut lintian = tokio::process::Command::new("lintian");
    lintian.args(["--allow-root", "--fail-on", "error"]).args(files_in(&debs));
    let lint = run(lintian, Duration::from_secs(300)).await;
    assert!(lint.status.success(), "lintian errors:\n{}", text(&lint));

    let (secret, public) = quarry_tests::native::test_key("rsa3072");
    let key = tmp.path().join("signing.asc");
    std::fs::write(&key, secret).unwrap();
    let rpms = tmp.path().join("rpms");
    let out = single("rpm", rpms.clone(), vec!["--sign-key".into(), key.display().to_string()]).await;
    assert_success(&out, "quarry package rpm --build-variant asan --sign-key");
    let db = tmp.path().join("rpmdb");
    std::fs::create_dir_all(&db).unwrap();
    let db = format!("--dbpath={}", db.display());
    let public_file = tmp.path().join("signing.pub.asc");
    std::fs::write(&public_file, public).unwrap();
    let mut import = tokio::process::Command::new("rpm");
    import.args([&db, "--import"]).arg(&public_file);
    assert_success(&run(import, Duration::from_secs(60)).await, "rpm --import");
    for rpm in files_in(&rpms) {
        let mut check = tokio::process::Command::new("rpm");
        check.args([&db, "-Kv"]).arg(&rpm);
        let check = run(check, Duration::from_secs(60)).await;
        assert_success(&check, "rpm -K");
        assert!(text(&check).contains("Signature, key ID"), "{}", text(&check));
    }
    let server = TestServer::start().await;
    upload_files(&server, RPM_ROOT, files_in(&rpms)).await;
    let dnf_root = tmp.path().join("dnfroot");
    let out = dnf(&format!("{}{RPM_ROOT}", server.url), &dnf_root, &[], &["install", "amdrocm-fft-asan-gfx942"]).await;
    assert_success(&out, "dnf install amdrocm-fft-asan-gfx942");
    assert!(dnf_root.join("opt/rocm/core-asan-7.1/lib/rocfft/gfx942.kpack").is_file());
    server.stop().await;
}
