//! `quarry.exe ci matrix` and `quarry.exe stage build` under Wine.
//!
//! `ci matrix`: the same inputs (events, Linux and Windows families, test labels, a changed-files
//! list, the built-in matrix and topology given as Windows paths) give the same JSON on stdout
//! and the same `$GITHUB_OUTPUT` as the Linux binary. Not run under Wine: the `git diff` a
//! `pull_request`/`push` event makes without `--changed-files` (Wine has no Windows `git`; the
//! Linux suite covers it), so those events get their changed files as a list, as CI can too.
//!
//! `stage build`: what Wine cannot run is the build itself. Wine has no Windows CMake, Ninja
//! or compiler; it can start the Linux `cmake` for a Windows process (a `cmake.exe` link to it
//! on `WINEPATH` runs), but gives the Windows side no process handle for a Unix program, so
//! waiting on it fails ("Invalid handle", os error 6), and that `cmake` cannot open the
//! `Z:/…` paths it is handed. The nearest thing that runs: the Linux binary builds the
//! fixture's `foundation` stage for `--platform windows` for real (cmake, ninja, cc) and
//! pushes its artifacts; `quarry.exe stage build --stage compiler` (Windows paths, the
//! platform left to its Windows default) then fetches those artifacts into its build directory,
//! compared file by file, and stops at the configure step naming the missing `cmake`.

use std::time::Duration;

use quarry_tests::{assert_success, quarry_bin, run, workspace_root};

use super::{Wine, files, text, win};

/// The matrix inputs of one case, as flags (the same for both binaries).
fn matrix_args(event: &str, changed: &str, topology: &str, repo: &str) -> Vec<String> {
    let mut args: Vec<String> = ["ci", "matrix", "--json", "--runner-pick", "first", "--event-name", event]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    args.extend(["--run-id", "9001", "--ref-name", "main", "--topology", topology, "--repo", repo].map(String::from));
    match event {
        "pull_request" => {
            args.extend(["--changed-files", changed, "--submodule-paths", changed].map(String::from));
            args.extend(
                ["--windows-amdgpu-families", "gfx1151", "--windows-test-labels", "test:rocblas"].map(String::from),
            );
        }
        "workflow_dispatch" => {
            args.extend(["--linux-amdgpu-families", "gfx94x,gfx110x"].map(String::from));
            args.extend(["--windows-amdgpu-families", "gfx110x,gfx120x"].map(String::from));
        }
        _ => {}
    }
    args
}

#[tokio::test(flavor = "multi_thread")]
async fn ci_matrix_matches_the_linux_binary() {
    let Some(wine) = Wine::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let changed = tmp.path().join("changed.txt");
    std::fs::write(&changed, "math-libs/BLAS/CMakeLists.txt\nbuild_tools/x.py\n").unwrap();
    let topology = workspace_root().join("topology/data/BUILD_TOPOLOGY.toml");
    let mut compared = 0;
    for event in ["pull_request", "workflow_dispatch", "schedule"] {
        let dir = tmp.path().join(event);
        std::fs::create_dir_all(&dir).unwrap();
        let linux_args = matrix_args(event, &changed.display().to_string(), &topology.display().to_string(), "/");
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(&linux_args).env("GITHUB_OUTPUT", dir.join("linux-output"));
        clear_github(&mut cmd);
        let linux = run(cmd, Duration::from_secs(60)).await;
        assert_success(&linux, &format!("quarry ci matrix ({event})"));

        let windows_args = matrix_args(event, &win(&changed, false), &win(&topology, false), "Z:\\");
        let mut cmd = wine.quarry();
        cmd.args(&windows_args).env("GITHUB_OUTPUT", win(&dir.join("windows-output"), false));
        clear_github(&mut cmd);
        let windows = run(cmd, Duration::from_secs(60)).await;
        assert_success(&windows, &format!("quarry.exe ci matrix ({event})"));
        assert_eq!(text(&windows.stdout), text(&linux.stdout), "{event}: the JSON differs");
        let output = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        assert_eq!(output("windows-output"), output("linux-output"), "{event}: GITHUB_OUTPUT differs");
        let json: serde_json::Value = serde_json::from_slice(&windows.stdout).unwrap();
        if event != "schedule" {
            assert!(json["windows_build_config"].is_object(), "{event}: a Windows build: {json}");
        }
        compared += 1;
    }
    assert_eq!(compared, 3);
}

fn clear_github(cmd: &mut tokio::process::Command) {
    for var in ["GITHUB_EVENT_PATH", "GITHUB_STEP_SUMMARY", "GITHUB_EVENT_NAME", "GITHUB_RUN_ID", "GITHUB_REF_NAME"] {
        cmd.env_remove(var);
    }
    for var in ["LINUX_AMDGPU_FAMILIES", "WINDOWS_AMDGPU_FAMILIES", "LINUX_TEST_LABELS", "WINDOWS_TEST_LABELS"] {
        cmd.env_remove(var);
    }
    for var in ["BUILD_VARIANT", "RELEASE_TYPE", "PREBUILT_STAGES", "BASELINE_RUN_ID", "EXTERNAL_REPO"] {
        cmd.env_remove(var);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stage_build_fetches_its_inputs_and_names_the_missing_cmake() {
    let Some(wine) = Wine::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (src, store) = (tmp.path().join("src"), tmp.path().join("store"));
    crate::pipeline::fixture_checkout(&src);
    let topology = src.join("BUILD_TOPOLOGY.toml");

    // The foundation stage built for real (Linux host, Windows run) and pushed.
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["stage", "build", "--stage", "foundation", "--run-id", "600", "--platform", "windows", "--topology"])
        .arg(&topology)
        .arg("--source-dir")
        .arg(&src)
        .arg("--build-dir")
        .arg(tmp.path().join("build-foundation"))
        .arg("--local-staging-dir")
        .arg(&store)
        .env("SOURCE_DATE_EPOCH", "1795000000")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("THEROCK_LOCAL_STAGING_DIR");
    assert_success(&run(cmd, Duration::from_secs(300)).await, "quarry stage build --stage foundation");
    assert!(store.join("600-windows").is_dir(), "pushed into the Windows run");

    let build = tmp.path().join("build-compiler");
    let mut cmd = wine.quarry();
    cmd.args(["stage", "build", "--stage", "compiler", "--run-id", "600", "--topology", &win(&topology, false)])
        .args(["--source-dir", &win(&src, false), "--build-dir", &win(&build, true)])
        .args(["--local-staging-dir", &win(&store, false)])
        .env("SOURCE_DATE_EPOCH", "1795000000")
        .env_remove("GITHUB_STEP_SUMMARY");
    let out = run(cmd, Duration::from_secs(120)).await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "no cmake under Wine, yet the build succeeded: {stderr}");
    assert!(stderr.contains("running cmake (is it installed?)"), "{stderr}");
    let fetched = files(&build.join("third-party/sysdeps/stage"));
    let pushed = files(&tmp.path().join("build-foundation/artifacts/sysdeps_lib_generic/third-party/sysdeps/stage"));
    assert!(!fetched.is_empty(), "nothing fetched: {stderr}");
    assert_eq!(fetched, pushed, "the foundation stage's output, fetched by quarry.exe into its build directory");
    assert!(build.join("third-party/sysdeps/stage.prebuilt").is_file(), "marked prebuilt, as TheRock's bootstrap");
}
