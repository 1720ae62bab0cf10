//! `quarry pipeline run` over the CMake + Ninja superproject in `tests/fixtures/pipeline/`:
//! three stages (foundation → compiler → math-libs per family) whose targets compile real C
//! code, the compiler stage's executable generating math-libs' kernels from bootstrapped
//! artifacts. From scratch everything builds; a second run reuses everything; an edit to one
//! stage's sources (a git checkout of the fixture) rebuilds that stage and its dependents
//! only; deleting one family's artifact rebuilds only the stage that made it.

use std::path::Path;
use std::time::Duration;

use quarry_tests::{assert_success, quarry_bin, run, workspace_root};

/// `git -C dir ARGS…`, which must succeed.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=Quarry Tests", "-c", "user.email=tests@quarry.invalid", "-c", "commit.gpgsign=false"])
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A copy of the pipeline fixture at `dir`, committed to a git repository of its own.
pub(crate) fn fixture_checkout(dir: &Path) {
    copy_dir(&workspace_root().join("tests/fixtures/pipeline"), dir);
    git(dir, &["init", "-q"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "the pipeline fixture"]);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

async fn pipeline(build_root: &Path) -> serde_json::Value {
    pipeline_in(&workspace_root().join("tests/fixtures/pipeline"), build_root).await
}

async fn pipeline_in(fixture: &Path, build_root: &Path) -> serde_json::Value {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["pipeline", "run", "--json", "--families", "famA,famB", "--run-id", "77", "--platform", "linux"])
        .arg("--topology")
        .arg(fixture.join("BUILD_TOPOLOGY.toml"))
        .arg("--source-dir")
        .arg(fixture)
        .arg("--build-root")
        .arg(build_root)
        .env_remove("THEROCK_LOCAL_STAGING_DIR")
        .env_remove("GITHUB_SHA")
        .env_remove("GITHUB_STEP_SUMMARY")
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

/// The stamp sees sources: editing the compiler stage's source rebuilds it and math-libs (whose
/// inbound compiler changed), not foundation; with no further edit everything is reused; an
/// edit to the superproject's build system (shared by every stage) rebuilds everything.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_edit_rebuilds_its_stage_and_dependents_only() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, root) = (tmp.path().join("src"), tmp.path().join("build"));
    fixture_checkout(&src);
    let all = |status: &str| {
        ["foundation", "compiler", "math-libs[famA]", "math-libs[famB]"].map(|s| format!("{s} {status}")).to_vec()
    };
    assert_eq!(statuses(&pipeline_in(&src, &root).await), all("built"));
    assert_eq!(statuses(&pipeline_in(&src, &root).await), all("reused"), "no edit");

    let clang = src.join("compiler/clang.c");
    let text = std::fs::read_to_string(&clang).unwrap();
    std::fs::write(&clang, text.replace("\"kernel for %s, checksum", "\"kernel for %s (v2), checksum")).unwrap();
    assert_eq!(
        statuses(&pipeline_in(&src, &root).await),
        ["foundation reused", "compiler built", "math-libs[famA] built", "math-libs[famB] built"],
        "an uncommitted edit to the compiler's sources"
    );
    let kernel = std::fs::read_to_string(root.join("math-libs-famA/math-libs/BLAS/stage/lib/rocblas/famA.co")).unwrap();
    assert!(kernel.starts_with("kernel for famA (v2), checksum "), "math-libs used the new compiler: {kernel}");
    assert_eq!(statuses(&pipeline_in(&src, &root).await), all("reused"), "no further edit");

    std::fs::write(src.join("blas/blas.c"), std::fs::read_to_string(src.join("blas/blas.c")).unwrap() + "\n").unwrap();
    assert_eq!(
        statuses(&pipeline_in(&src, &root).await),
        ["foundation reused", "compiler reused", "math-libs[famA] built", "math-libs[famB] built"],
        "an edit to math-libs' sources"
    );
    let cmake = src.join("CMakeLists.txt");
    std::fs::write(&cmake, std::fs::read_to_string(&cmake).unwrap() + "# a build system edit\n").unwrap();
    assert_eq!(statuses(&pipeline_in(&src, &root).await), all("built"), "the superproject's files are every stage's");

    // The run's manifest names the checkout's commit (no GITHUB_SHA: a developer's run).
    let head = git(&src, &["rev-parse", "HEAD"]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("staging/77-linux/.run-manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["commit"], head.as_str(), "{manifest}");
    assert_eq!((manifest["run_id"].as_str(), manifest["platform"].as_str()), (Some("77"), Some("linux")));
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

/// Bad input exits 2 with a message naming the problem, before anything is written.
#[tokio::test(flavor = "multi_thread")]
async fn unknown_families_stages_and_cyclic_topologies_exit_2_and_write_nothing() {
    let fixture = workspace_root().join("tests/fixtures/pipeline");
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("build");
    let quarry = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(args).current_dir(tmp.path()).env_remove("THEROCK_LOCAL_STAGING_DIR");
        cmd
    };
    let topology = fixture.join("BUILD_TOPOLOGY.toml");
    let (topology, fixture_dir, build_root) =
        (topology.to_str().unwrap(), fixture.to_str().unwrap(), root.to_str().unwrap());

    // An unknown family: named, the fixture's own families listed, nothing built.
    let mut cmd = quarry(&["pipeline", "run", "--families", "famA,famQ", "--topology", topology]);
    cmd.args(["--source-dir", fixture_dir, "--build-root", build_root]);
    let out = run(cmd, Duration::from_secs(60)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("unknown GPU family famQ; known families: all, famA, famB, famC"), "{stderr}");
    assert!(!root.exists(), "nothing written for bad input");

    // Without a project table, TheRock's families apply, with a spelling hint.
    let mut cmd = quarry(&["stage", "build", "--topology", topology, "--stage", "math-libs"]);
    cmd.args(["--amdgpu-families", "gfx94x-dcgpu", "--build-dir", build_root, "--local-staging-dir", build_root]);
    let out = run(cmd, Duration::from_secs(60)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("gfx94x-dcgpu (did you mean gfx94X-dcgpu?)"), "{stderr}");
    assert!(!root.exists());

    // An unknown stage: named, the topology's stages listed.
    let staging = tmp.path().join("staging");
    let staging = staging.to_str().unwrap();
    for args in [
        &[
            "stage",
            "build",
            "--topology",
            topology,
            "--stage",
            "nope",
            "--build-dir",
            build_root,
            "--local-staging-dir",
            staging,
        ][..],
        &["stage", "configure", "--topology", topology, "--stage", "nope"][..],
        &[
            "artifacts",
            "fetch",
            "--topology",
            topology,
            "--stage",
            "nope",
            "--run-id",
            "1",
            "--output-dir",
            build_root,
            "--local-staging-dir",
            staging,
        ][..],
    ] {
        let cmd = quarry(args);
        let out = run(cmd, Duration::from_secs(60)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("unknown build stage \"nope\" (the topology has: foundation, compiler, math-libs)"),
            "{args:?}: {stderr}"
        );
        assert!(!root.exists(), "{args:?} wrote nothing");
    }

    // A per-arch stage without families.
    let mut cmd =
        quarry(&["stage", "build", "--topology", topology, "--stage", "math-libs", "--build-dir", build_root]);
    cmd.args(["--source-dir", fixture_dir]);
    let out = run(cmd, Duration::from_secs(60)).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is per-arch"));

    // A cycle in the topology.
    let text = std::fs::read_to_string(fixture.join("BUILD_TOPOLOGY.toml")).unwrap();
    let cyclic = tmp.path().join("cyclic.toml");
    // base → math → compiler → base.
    let patched =
        text.replacen("[artifact_groups.base]", "[artifact_groups.base]\nartifact_group_deps = [\"math\"]", 1);
    std::fs::write(&cyclic, patched).unwrap();
    let mut cmd = quarry(&["pipeline", "run", "--families", "famA", "--topology", cyclic.to_str().unwrap()]);
    cmd.args(["--source-dir", fixture_dir, "--build-root", build_root]);
    let out = run(cmd, Duration::from_secs(60)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("artifact_groups: dependency cycle"), "{stderr}");
    assert!(!root.exists());
}
