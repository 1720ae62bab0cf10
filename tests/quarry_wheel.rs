//! Quarry installs with pip: `scripts/build-wheel` packs the built `quarry` binary as a wheel,
//! real pip installs it into a fresh virtualenv, and `quarry` runs from the virtualenv's `bin/`;
//! pip uninstalls it again by its `RECORD`.

use std::time::Duration;

use quarry_tests::{assert_success, quarry_bin, run, venv, workspace_root};

#[tokio::test(flavor = "multi_thread")]
async fn the_built_wheel_installs_with_pip_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let dist = tmp.path().join("dist");
    let mut build = tokio::process::Command::new("bash");
    build.arg(workspace_root().join("scripts/build-wheel")).arg(quarry_bin()).arg(&dist);
    let out = run(build, Duration::from_secs(60)).await;
    assert_success(&out, "scripts/build-wheel");
    let version = env!("CARGO_PKG_VERSION");
    let wheels: Vec<_> = std::fs::read_dir(&dist).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    let wheel = wheels[0].clone();
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    let arch = std::env::consts::ARCH;
    assert_eq!(name, format!("quarry-{version}-py3-none-linux_{arch}.whl"), "tagged for the binary's platform");

    // A fresh virtualenv, made by the test virtualenv's Python (with its bundled pip).
    let fresh = tmp.path().join("venv");
    let mut make = tokio::process::Command::new(venv().join("bin/python"));
    make.args(["-m", "venv"]).arg(&fresh);
    assert_success(&run(make, Duration::from_secs(60)).await, "python -m venv");
    let pip = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(fresh.join("bin/pip"));
        cmd.args(args).args(["--disable-pip-version-check", "--no-input"]).env("PIP_CONFIG_FILE", "/dev/null");
        cmd
    };
    let mut install = pip(&["install", "--no-index", "--no-cache-dir"]);
    install.arg(&wheel);
    assert_success(&run(install, Duration::from_secs(120)).await, "pip install quarry wheel");

    let quarry = fresh.join("bin/quarry");
    let mut cmd = tokio::process::Command::new(&quarry);
    cmd.arg("--version");
    let out = run(cmd, Duration::from_secs(30)).await;
    assert_success(&out, "quarry --version from the virtualenv");
    assert_eq!(String::from_utf8_lossy(&out.stdout), format!("quarry {version}\n"));

    // A real command: the CMake arguments of a stage, as `configure_stage.py` prints them.
    let data = workspace_root().join("topology/data");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("configure-from-therock.json")).unwrap()).unwrap();
    let mut cmd = tokio::process::Command::new(&quarry);
    cmd.args(["stage", "configure", "--topology"])
        .arg(data.join("BUILD_TOPOLOGY.toml"))
        .args(["--stage", "math-libs"])
        .args(quarry_tests::CONFIGURE_WINDOWS_FAMILIES);
    let out = run(cmd, Duration::from_secs(30)).await;
    assert_success(&out, "quarry stage configure from the virtualenv");
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected["math-libs|windows|families"].as_str().unwrap());

    let out = run(pip(&["show", "--files", "quarry"]), Duration::from_secs(30)).await;
    assert_success(&out, "pip show quarry");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains(&format!("Version: {version}")) && shown.contains("bin/quarry"), "{shown}");
    let uninstall = pip(&["uninstall", "-y", "quarry"]);
    assert_success(&run(uninstall, Duration::from_secs(60)).await, "pip uninstall quarry");
    assert!(!quarry.exists(), "pip uninstall removes the binary it installed");
}
