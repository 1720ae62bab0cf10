//! `quarry pipeline run` over the CMake + Ninja superproject in `tests/fixtures/pipeline/`:
//! three stages (foundation → compiler → math-libs per family) whose targets compile real C
//! code, the compiler stage's executable generating math-libs' kernels from bootstrapped
//! artifacts. From scratch everything builds; a second run reuses everything; deleting one
//! family's artifact rebuilds only the stage that made it.

use std::path::Path;
use std::time::Duration;

use quarry_tests::{assert_success, quarry_bin, run, workspace_root};

async fn pipeline(build_root: &Path) -> serde_json::Value {
    let fixture = workspace_root().join("tests/fixtures/pipeline");
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["pipeline", "run", "--json", "--families", "famA,famB", "--run-id", "77", "--platform", "linux"])
        .arg("--topology")
        .arg(fixture.join("BUILD_TOPOLOGY.toml"))
        .arg("--source-dir")
        .arg(&fixture)
        .arg("--build-root")
        .arg(build_root)
        .env_remove("THEROCK_LOCAL_STAGING_DIR")
        .env("SOURCE_DATE_EPOCH", "1795000000");
    let out = run(cmd, Duration::from_secs(600)).await;
    assert_success(&out, "quarry pipeline run");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn statuses(summary: &serde_json::Value) -> Vec<String> {
    summary["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let family = s["family"].as_str().map(|f| format!("[{f}]")).unwrap_or_default();
            format!("{}{family} {}", s["stage"].as_str().unwrap(), s["status"].as_str().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn pipeline_builds_reuses_and_rebuilds_only_what_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("build");
    let first = pipeline(&root).await;
    assert_eq!(
        statuses(&first),
        ["foundation built", "compiler built", "math-libs[famA] built", "math-libs[famB] built"]
    );
    let staged = root.join("staging/77-linux");
    for file in ["sysdeps_lib_generic", "amd-llvm_lib_generic", "blas_lib_famA", "blas_lib_famB"] {
        assert!(staged.join(format!("{file}.tar.zst")).is_file(), "{file} staged");
        assert!(staged.join(format!("{file}.tar.zst.sha256sum")).is_file(), "{file} sidecar");
    }
    // math-libs ran the compiler stage's executable, which loaded the foundation stage's library.
    let kernel = std::fs::read_to_string(root.join("math-libs-famB/math-libs/BLAS/stage/lib/rocblas/famB.co")).unwrap();
    assert!(kernel.starts_with("kernel for famB, checksum "), "{kernel}");
    assert!(root.join("math-libs-famB/compiler/amd-llvm/stage.prebuilt").is_file(), "bootstrapped inbound");
    assert!(
        !root.join("math-libs-famB/artifacts/amd-llvm_lib_generic").exists(),
        "prebuilt artifacts are not re-pushed"
    );

    let second = pipeline(&root).await;
    assert_eq!(
        statuses(&second),
        ["foundation reused", "compiler reused", "math-libs[famA] reused", "math-libs[famB] reused"]
    );

    std::fs::remove_file(staged.join("blas_lib_famA.tar.zst")).unwrap();
    let third = pipeline(&root).await;
    assert_eq!(
        statuses(&third),
        ["foundation reused", "compiler reused", "math-libs[famA] built", "math-libs[famB] reused"]
    );
    assert!(staged.join("blas_lib_famA.tar.zst").is_file());
}
