//! `quarry artifacts push | fetch | info` the way stage jobs run them: push each stage's
//! produced artifacts through a local staging directory and through s3s-fs (SigV4 checked),
//! fetch a later stage's inbound artifacts for one GPU family (bootstrap, plain, flatten) and
//! compare the trees byte for byte; a corrupted archive fails its sidecar check and a hostile
//! one is refused, with nothing written outside the output directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use quarry_tests::native::{artifact, raw_tar_zst};
use quarry_tests::s3::{S3Server, s3_client};
use quarry_tests::{assert_success, quarry_bin, run};

/// Three stages: foundation (sysdeps) → compiler (amd-llvm) → math-libs (blas, per arch).
pub(crate) const TOPOLOGY: &str = r#"
[metadata]
version = "2.0"

[build_stages.foundation]
artifact_groups = ["base"]

[build_stages.compiler]
artifact_groups = ["compiler"]

[build_stages.math-libs]
artifact_groups = ["math"]
type = "per-arch"

[artifact_groups.base]

[artifact_groups.compiler]
artifact_group_deps = ["base"]

[artifact_groups.math]
type = "per-arch"
artifact_group_deps = ["compiler"]

[artifacts.sysdeps]
artifact_group = "base"

[artifacts.amd-llvm]
artifact_group = "compiler"
artifact_deps = ["sysdeps"]

[artifacts.blas]
artifact_group = "math"
type = "target-specific"
artifact_deps = ["amd-llvm"]
"#;

/// Stage outputs under `build/artifacts/`: lib and dev of one project sharing a root, a
/// symlink chain, an executable, per-target blas.
fn build_tree(build: &Path) {
    let artifacts = build.join("artifacts");
    let zlib = [("lib/libz.so.1.3", "zlib"), ("lib/libz.so.1", "->libz.so.1.3"), ("lib/libz.so", "->libz.so.1")];
    artifact(&artifacts, "sysdeps_lib_generic", "third-party/sysdeps/stage", &zlib);
    artifact(&artifacts, "sysdeps_dev_generic", "third-party/sysdeps/stage", &[("include/zlib.h", "/* zlib */")]);
    artifact(&artifacts, "amd-llvm_lib_generic", "compiler/amd-llvm/stage", &[("lib/llvm/bin/clang", "#!/bin/sh\n")]);
    let clang = artifacts.join("amd-llvm_lib_generic/compiler/amd-llvm/stage/lib/llvm/bin/clang");
    std::fs::set_permissions(&clang, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for gfx in ["gfx942", "gfx1100"] {
        let files = [(format!("lib/rocblas/library/{gfx}.co"), format!("{gfx} kernels"))];
        let files: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        artifact(&artifacts, &format!("blas_lib_{gfx}"), "math-libs/BLAS/stage", &files);
    }
}

/// Every path under `dir` with its kind and content (links as their targets), sorted.
fn snapshot(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for path in paths {
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.push(format!("{rel} -> {}", std::fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                walk(base, &path, out);
            } else {
                let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
                out.push(format!("{rel} {mode:o} {}", String::from_utf8_lossy(&std::fs::read(&path).unwrap())));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

struct Runner {
    topology: PathBuf,
    backend: Vec<String>,
    env: Vec<(String, String)>,
}

impl Runner {
    async fn quarry(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.arg("artifacts")
            .args(args)
            .arg("--topology")
            .arg(&self.topology)
            .args(&self.backend)
            .args(["--run-id", "42", "--platform", "linux"])
            .env("SOURCE_DATE_EPOCH", "1795000000")
            .env_remove("THEROCK_LOCAL_STAGING_DIR")
            .env_remove("GITHUB_REPOSITORY")
            .env_remove("RELEASE_TYPE");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        run(cmd, Duration::from_secs(300)).await
    }

    async fn push_all(&self, build: &Path) {
        for (stage, compression) in [("foundation", "zstd"), ("compiler", "zstd"), ("math-libs", "xz")] {
            let out = self
                .quarry(&[
                    "push",
                    "--stage",
                    stage,
                    "--build-dir",
                    build.to_str().unwrap(),
                    "--compression-type",
                    compression,
                ])
                .await;
            assert_success(&out, &format!("push --stage {stage}"));
        }
    }

    /// Fetches math-libs' inbound artifacts three ways and checks each against the sources.
    async fn fetch_and_compare(&self, build: &Path, out: &Path) {
        let sources = build.join("artifacts");
        let boot = out.join("boot");
        std::fs::create_dir_all(boot.join("compiler/amd-llvm/stage/stale")).unwrap();
        let fetched = self
            .quarry(&[
                "fetch",
                "--stage",
                "math-libs",
                "--amdgpu-families",
                "gfx942",
                "--bootstrap",
                "--json",
                "--output-dir",
                boot.to_str().unwrap(),
            ])
            .await;
        assert_success(&fetched, "fetch --bootstrap");
        let summary: serde_json::Value = serde_json::from_slice(&fetched.stdout).unwrap();
        let files: Vec<&str> =
            summary["fetched"].as_array().unwrap().iter().map(|f| f["file"].as_str().unwrap()).collect();
        assert_eq!(
            files,
            ["amd-llvm_lib_generic.tar.zst", "sysdeps_dev_generic.tar.zst", "sysdeps_lib_generic.tar.zst"]
        );
        assert!(!boot.join("compiler/amd-llvm/stage/stale").exists(), "bootstrap wiped the root first");
        assert!(
            boot.join("compiler/amd-llvm/stage.prebuilt").is_file()
                && boot.join("third-party/sysdeps/stage.prebuilt").is_file()
        );
        let mut merged = snapshot(&sources.join("sysdeps_lib_generic/third-party/sysdeps/stage"));
        merged.extend(snapshot(&sources.join("sysdeps_dev_generic/third-party/sysdeps/stage")));
        merged.sort();
        assert_eq!(snapshot(&boot.join("third-party/sysdeps/stage")), merged, "lib and dev share a root; both land");
        assert_eq!(
            snapshot(&boot.join("compiler/amd-llvm/stage")),
            snapshot(&sources.join("amd-llvm_lib_generic/compiler/amd-llvm/stage"))
        );
        assert!(!boot.join(".download_cache").exists());

        // Plain: every artifact of the run for gfx1100 only, as artifact directories.
        let plain = out.join("plain");
        let fetched =
            self.quarry(&["fetch", "--amdgpu-targets", "gfx1100", "--output-dir", plain.to_str().unwrap()]).await;
        assert_success(&fetched, "fetch plain");
        for dir in ["sysdeps_lib_generic", "sysdeps_dev_generic", "amd-llvm_lib_generic", "blas_lib_gfx1100"] {
            assert_eq!(snapshot(&plain.join("artifacts").join(dir)), snapshot(&sources.join(dir)), "{dir}");
        }
        assert!(!plain.join("artifacts/blas_lib_gfx942").exists());

        // Flatten, without dev components.
        let flat = out.join("flat");
        let fetched = self
            .quarry(&[
                "fetch",
                "--generic-only",
                "--exclude-components",
                "dev",
                "--flatten",
                "--output-dir",
                flat.to_str().unwrap(),
            ])
            .await;
        assert_success(&fetched, "fetch --flatten");
        assert!(flat.join("lib/libz.so.1.3").is_file() && flat.join("lib/llvm/bin/clang").is_file());
        assert!(!flat.join("include/zlib.h").exists() && !flat.join("lib/rocblas").exists());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn push_and_fetch_through_a_local_staging_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let topology = tmp.path().join("BUILD_TOPOLOGY.toml");
    std::fs::write(&topology, TOPOLOGY).unwrap();
    let build = tmp.path().join("build");
    build_tree(&build);
    let staging = tmp.path().join("staging");
    let runner = Runner {
        topology: topology.clone(),
        backend: vec!["--local-staging-dir".into(), staging.display().to_string()],
        env: Vec::new(),
    };

    let info = runner.quarry(&["info", "--stage", "math-libs"]).await;
    assert_success(&info, "artifacts info");
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("fetches: amd-llvm sysdeps"),
        "{}",
        String::from_utf8_lossy(&info.stdout)
    );

    let out = runner.quarry(&["push", "--stage", "foundation", "--build-dir", build.to_str().unwrap()]).await;
    assert_success(&out, "push --stage foundation");
    let mut staged: Vec<String> = std::fs::read_dir(staging.join("42-linux"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    staged.sort();
    assert_eq!(
        staged,
        [
            "sysdeps_dev_generic.tar.zst",
            "sysdeps_dev_generic.tar.zst.sha256sum",
            "sysdeps_lib_generic.tar.zst",
            "sysdeps_lib_generic.tar.zst.sha256sum"
        ],
        "only what the stage produces"
    );
    // The same input archives to the same bytes; pushing again is fine.
    let first = std::fs::read(staging.join("42-linux/sysdeps_lib_generic.tar.zst")).unwrap();
    runner.push_all(&build).await;
    assert_eq!(std::fs::read(staging.join("42-linux/sysdeps_lib_generic.tar.zst")).unwrap(), first);
    assert!(staging.join("42-linux/blas_lib_gfx942.tar.xz").is_file());
    runner.fetch_and_compare(&build, &tmp.path().join("out")).await;

    // copy: a later run takes the early stages of run 42 (archives and sidecars, same bytes).
    let mut copy = tokio::process::Command::new(quarry_bin());
    copy.args(["artifacts", "copy", "--topology"]).arg(&topology).arg("--local-staging-dir").arg(&staging).args([
        "--run-id",
        "43",
        "--platform",
        "linux",
        "--source-run-id",
        "42",
        "--stage",
        "foundation,compiler",
    ]);
    assert_success(&run(copy, Duration::from_secs(120)).await, "artifacts copy");
    let mut copied: Vec<String> = std::fs::read_dir(staging.join("43-linux"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    copied.sort();
    assert_eq!(
        copied,
        [
            "amd-llvm_lib_generic.tar.zst",
            "amd-llvm_lib_generic.tar.zst.sha256sum",
            "sysdeps_dev_generic.tar.zst",
            "sysdeps_dev_generic.tar.zst.sha256sum",
            "sysdeps_lib_generic.tar.zst",
            "sysdeps_lib_generic.tar.zst.sha256sum"
        ]
    );
    assert_eq!(std::fs::read(staging.join("43-linux/sysdeps_lib_generic.tar.zst")).unwrap(), first);

    // A corrupted archive fails its sidecar check (after retries) and the fetch says which.
    let llvm = staging.join("42-linux/amd-llvm_lib_generic.tar.zst");
    let mut bytes = std::fs::read(&llvm).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&llvm, bytes).unwrap();
    let broken = tmp.path().join("broken");
    let out = runner
        .quarry(&["fetch", "--stage", "math-libs", "--bootstrap", "--output-dir", broken.to_str().unwrap()])
        .await;
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("amd-llvm_lib_generic.tar.zst") && text.contains("does not match its sidecar"), "{text}");
    assert!(
        !broken.join("compiler").exists() && !broken.join("third-party").exists(),
        "nothing unpacked on a shortfall"
    );

    // A hostile archive with a matching sidecar: refused by the extractor, nothing outside.
    let hostile = raw_tar_zst(&[
        ("artifact_manifest.txt", b"compiler/amd-llvm/stage\n"),
        ("compiler/amd-llvm/stage/../../../../escaped", b"x"),
    ]);
    std::fs::write(&llvm, &hostile).unwrap();
    std::fs::write(
        staging.join("42-linux/amd-llvm_lib_generic.tar.zst.sha256sum"),
        format!("{}\n", quarry_tests::sha256_hex(&hostile)),
    )
    .unwrap();
    let victim = tmp.path().join("victim/deep/out");
    let out = runner
        .quarry(&["fetch", "--stage", "math-libs", "--bootstrap", "--output-dir", victim.to_str().unwrap()])
        .await;
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("amd-llvm_lib_generic.tar.zst") && text.contains("`..`"), "{text}");
    assert!(!tmp.path().join("escaped").exists() && !tmp.path().join("victim/escaped").exists());

    // Bad flags are refused before anything moves.
    let out = runner.quarry(&["fetch", "--exclude-artifacts", "nope", "--output-dir", broken.to_str().unwrap()]).await;
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("\"nope\" is not an artifact"));
    let out = runner.quarry(&["fetch", "--exclude-components", "bin", "--output-dir", broken.to_str().unwrap()]).await;
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("\"bin\" is not one of"));
}

#[tokio::test(flavor = "multi_thread")]
async fn push_and_fetch_through_s3() {
    let server = S3Server::start_s3s_fs().await;
    s3_client(&server).create_bucket().bucket("therock-ci-artifacts").send().await.expect("create bucket");
    let tmp = tempfile::tempdir().unwrap();
    let topology = tmp.path().join("BUILD_TOPOLOGY.toml");
    std::fs::write(&topology, TOPOLOGY).unwrap();
    let build = tmp.path().join("build");
    build_tree(&build);
    let runner = Runner {
        topology,
        backend: vec!["--store".into(), "s3://therock-ci-artifacts".into()],
        env: server.client_env(),
    };
    runner.push_all(&build).await;
    let listed =
        s3_client(&server).list_objects_v2().bucket("therock-ci-artifacts").prefix("42-linux/").send().await.unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert!(
        keys.contains(&"42-linux/blas_lib_gfx1100.tar.xz")
            && keys.contains(&"42-linux/blas_lib_gfx1100.tar.xz.sha256sum"),
        "{keys:?}"
    );
    runner.fetch_and_compare(&build, &tmp.path().join("out")).await;
    server.stop().await;
}

/// `--platform windows`: the run's own `{run}-windows/` prefix, and an artifact the topology
/// disables on Windows is not reported missing there (it is on Linux).
#[tokio::test(flavor = "multi_thread")]
async fn windows_runs_have_their_own_prefix_and_skip_linux_only_artifacts() {
    let tmp = tempfile::tempdir().unwrap();
    let topology = tmp.path().join("BUILD_TOPOLOGY.toml");
    let text = TOPOLOGY
        .replace(
            "[artifacts.amd-llvm]",
            "[artifacts.sysdeps-mesa]\nartifact_group = \"base\"\ndisable_platforms = [\"windows\"]\n\n[artifacts.amd-llvm]",
        )
        .replace("artifact_deps = [\"sysdeps\"]", "artifact_deps = [\"sysdeps\", \"sysdeps-mesa\"]");
    std::fs::write(&topology, text).unwrap();
    let build = tmp.path().join("build");
    build_tree(&build);
    let staging = tmp.path().join("staging");
    let quarry = |platform: &str, args: &[&str]| {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.arg("artifacts")
            .args(args)
            .arg("--topology")
            .arg(&topology)
            .arg("--local-staging-dir")
            .arg(&staging)
            .args(["--run-id", "42", "--platform", platform])
            .env_remove("THEROCK_LOCAL_STAGING_DIR")
            .env_remove("THEROCK_PLATFORM");
        cmd
    };
    for platform in ["windows", "linux"] {
        for stage in ["foundation", "compiler"] {
            let out = run(
                quarry(platform, &["push", "--stage", stage, "--build-dir", build.to_str().unwrap()]),
                Duration::from_secs(120),
            )
            .await;
            assert_success(&out, &format!("{platform} push {stage}"));
        }
        assert!(staging.join(format!("42-{platform}/sysdeps_lib_generic.tar.zst")).is_file());
        let out_dir = tmp.path().join(format!("out-{platform}"));
        let args = [
            "fetch",
            "--stage",
            "math-libs",
            "--json",
            "--amdgpu-families",
            "gfx942",
            "--output-dir",
            out_dir.to_str().unwrap(),
        ];
        let out = run(quarry(platform, &args), Duration::from_secs(120)).await;
        assert_success(&out, &format!("{platform} fetch"));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let missing: Vec<&str> = report["not_in_run"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        if platform == "windows" {
            assert!(missing.is_empty(), "windows does not build sysdeps-mesa: {report}");
        } else {
            assert_eq!(missing, ["sysdeps-mesa"], "{report}");
        }
    }
    // A platform that is neither is refused by the flag parser.
    let out = run(quarry("macos", &["info", "--stage", "foundation"]), Duration::from_secs(60)).await;
    assert_eq!(out.status.code(), Some(2));
}
