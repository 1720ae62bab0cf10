//! `quarry ci matrix` against TheRock's own `configure_multi_arch_ci.py`: every scenario in
//! `tests/fixtures/ci_matrix/scenarios.json` was run through TheRock's tool (`generate.py`, the
//! commit in the README there) into `cases.json`. Here each runs through the library and through
//! the `quarry` binary, driven by the same environment variables and event payload a workflow
//! gives it, and the `$GITHUB_OUTPUT` text must be byte-identical (errors: same message, exit 2).

use std::path::PathBuf;
use std::time::Duration;

use quarry_ci::{FirstPicker, GitContext, Inputs, Matrix};
use quarry_tests::{quarry_bin, run, workspace_root};
use serde_json::Value;

struct Case {
    name: String,
    inputs: Inputs,
    git: GitContext,
    /// `key=value` lines, or the error message.
    expected: Result<String, String>,
}

fn fixture(name: &str) -> PathBuf {
    workspace_root().join("tests/fixtures/ci_matrix").join(name)
}

/// The `$GITHUB_OUTPUT` variables in the order TheRock's tool writes them.
const KEYS: [&str; 6] = [
    "enable_build_jobs",
    "linux_build_config",
    "windows_build_config",
    "test_type",
    "linux_test_labels",
    "windows_test_labels",
];

fn cases() -> Vec<Case> {
    let scenarios: Vec<Value> = serde_json::from_slice(&std::fs::read(fixture("scenarios.json")).unwrap()).unwrap();
    let raw = std::fs::read_to_string(fixture("cases.json")).unwrap();
    // serde_json's map sorts keys: check the file's own order once, then rebuild it from KEYS.
    let first = raw.find("\"outputs\"").expect("a case with outputs");
    let positions: Vec<usize> = KEYS.iter().map(|k| first + raw[first..].find(&format!("\"{k}\"")).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "cases.json lists the outputs in KEYS order");
    let cases: Vec<Value> = serde_json::from_str(&raw).unwrap();
    assert_eq!(scenarios.len(), cases.len());
    assert!(scenarios.len() >= 40, "the fixture covers many scenarios");
    scenarios
        .into_iter()
        .zip(cases)
        .map(|(s, c)| {
            assert_eq!(s["name"], c["name"]);
            let expected = match c.get("error") {
                Some(e) => Err(e.as_str().unwrap().to_owned()),
                None => {
                    let outputs = c["outputs"].as_object().unwrap();
                    assert_eq!(outputs.len(), KEYS.len());
                    Ok(KEYS.iter().map(|k| format!("{k}={}\n", outputs[*k].as_str().unwrap())).collect())
                }
            };
            Case {
                name: s["name"].as_str().unwrap().to_owned(),
                inputs: serde_json::from_value(s["inputs"].clone()).unwrap(),
                git: serde_json::from_value(s["git"].clone()).unwrap(),
                expected,
            }
        })
        .collect()
}

fn stages() -> Vec<String> {
    let text = std::fs::read_to_string(workspace_root().join("topology/data/BUILD_TOPOLOGY.toml")).unwrap();
    quarry_topology::Topology::parse(&text).unwrap().stage_file_order
}

#[test]
fn library_matches_therocks_tool_on_every_scenario() {
    let matrix = Matrix::builtin();
    let stages = stages();
    assert_eq!(stages[..3], ["compiler-runtime", "wsl-rocdxg", "runtime-tests"], "file order, not name order");
    let mut failures = Vec::new();
    for case in cases() {
        let got = quarry_ci::configure(&matrix, &case.inputs, &case.git, &stages, &mut FirstPicker)
            .map(|o| o.github_output().into_iter().map(|(k, v)| format!("{k}={v}\n")).collect::<String>())
            .map_err(|e| e.to_string());
        if got != case.expected {
            failures.push(format!("{}:\n  expected {:?}\n  got      {:?}", case.name, case.expected, got));
        }
    }
    assert!(failures.is_empty(), "{} scenario(s) differ:\n{}", failures.len(), failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn binary_reads_the_workflow_environment_and_writes_the_same_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (n, case) in cases().into_iter().enumerate() {
        let i = &case.inputs;
        let dir = tmp.path().join(n.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        // The event payload a workflow run gets.
        let event = match i.event_name.as_str() {
            "pull_request" => serde_json::json!({"pull_request": {"labels":
                i.pr_labels.iter().map(|l| serde_json::json!({"name": l, "color": "ededed"})).collect::<Vec<_>>()}}),
            "push" => serde_json::json!({"before": i.base_ref.clone().unwrap_or_else(|| "0".repeat(40))}),
            _ => serde_json::json!({"inputs": {}}),
        };
        if !i.pr_labels.is_empty() && i.event_name != "pull_request" {
            continue; // labels only come from a pull_request payload
        }
        std::fs::write(dir.join("event.json"), event.to_string()).unwrap();
        let pr_tests: Vec<&String> = i.pr_labels.iter().filter(|l| l.starts_with("test:")).collect();
        let own =
            |labels: &[String]| labels.iter().filter(|l| !pr_tests.contains(l)).cloned().collect::<Vec<_>>().join(",");
        let output = dir.join("github_output");
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["ci", "matrix", "--runner-pick", "first", "--repo"])
            .arg(&dir)
            .arg("--topology")
            .arg(workspace_root().join("topology/data/BUILD_TOPOLOGY.toml"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap())
            .env("GITHUB_OUTPUT", &output)
            .env("GITHUB_STEP_SUMMARY", dir.join("summary.md"))
            .env("GITHUB_EVENT_NAME", &i.event_name)
            .env("GITHUB_EVENT_PATH", dir.join("event.json"))
            .env("GITHUB_RUN_ID", &i.run_id)
            .env("GITHUB_REF_NAME", &i.commit_ref)
            .env("BUILD_VARIANT", &i.build_variant)
            .env("RELEASE_TYPE", &i.release_type)
            .env("BUILD_PYTHON_PACKAGES", i.build_python_packages.to_string())
            .env("BUILD_PYTORCH", i.build_pytorch.to_string())
            .env("BUILD_JAX", i.build_jax.to_string())
            .env("PYTHON_VERSION", i.python_versions.first().cloned().unwrap_or_default())
            .env("LINUX_AMDGPU_FAMILIES", i.linux_amdgpu_families.join(","))
            .env("WINDOWS_AMDGPU_FAMILIES", i.windows_amdgpu_families.join(","))
            .env("LINUX_TEST_LABELS", own(&i.linux_test_labels))
            .env("WINDOWS_TEST_LABELS", own(&i.windows_test_labels))
            .env("PREBUILT_STAGES", &i.prebuilt_stages)
            .env("BASELINE_RUN_ID", &i.baseline_run_id)
            .env("THEROCK_REPOSITORY", &i.baseline_repository)
            .env("EXTERNAL_REPO", &i.external_repo);
        let git_events = matches!(i.event_name.as_str(), "pull_request" | "push") && i.external_repo.is_empty();
        if git_events {
            match &case.git.changed_files {
                Some(files) => {
                    std::fs::write(dir.join("changed"), files.join("\n")).unwrap();
                    let subs = case.git.submodule_paths.clone().unwrap_or_default();
                    std::fs::write(dir.join("submodules"), subs.join("\n")).unwrap();
                    cmd.arg("--changed-files").arg(dir.join("changed"));
                    cmd.arg("--submodule-paths").arg(dir.join("submodules"));
                }
                // Only a push that created the branch has no diff.
                None if i.event_name == "push" && i.base_ref.is_none() => {}
                None => continue,
            }
        }
        let out = run(cmd, Duration::from_secs(60)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        match &case.expected {
            Ok(expected) => {
                assert!(out.status.success(), "{}: {stderr}", case.name);
                let got = std::fs::read_to_string(&output).unwrap();
                assert_eq!(&got, expected, "{}: GITHUB_OUTPUT differs", case.name);
                let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
                assert!(summary.starts_with("## Multi-arch CI configuration"), "{}", case.name);
            }
            Err(message) => {
                assert_eq!(out.status.code(), Some(2), "{}: bad input exits 2: {stderr}", case.name);
                assert!(stderr.contains(message.as_str()), "{}: {stderr}", case.name);
                assert!(!output.exists() || std::fs::read_to_string(&output).unwrap().is_empty());
            }
        }
        checked += 1;
    }
    assert!(checked >= 60, "only {checked} scenarios went through the binary");
}

#[tokio::test(flavor = "multi_thread")]
async fn json_on_stdout_and_git_diff_for_path_filters() {
    // A real checkout: a docs-only commit skips CI, a source change runs it.
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@localhost", "-c", "commit.gpgsign=false"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("CMakeLists.txt"), "project(x)\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-qm", "one"]);
    std::fs::create_dir_all(repo.join("docs")).unwrap();
    std::fs::write(repo.join("docs/guide.md"), "# guide\n").unwrap();
    git(&["add", "."]);
    git(&["commit", "-qm", "docs"]);
    let matrix = |event: &str| {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["ci", "matrix", "--json", "--event-name", event, "--run-id", "5", "--repo"])
            .arg(repo)
            .env_remove("GITHUB_OUTPUT")
            .env_remove("GITHUB_EVENT_PATH")
            .env_remove("GITHUB_STEP_SUMMARY");
        cmd
    };
    let out = run(matrix("pull_request"), Duration::from_secs(60)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["enable_build_jobs"], false, "docs-only diff skips CI: {v}");

    std::fs::write(repo.join("CMakeLists.txt"), "project(y)\n").unwrap();
    git(&["commit", "-qam", "code"]);
    let out = run(matrix("pull_request"), Duration::from_secs(60)).await;
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["enable_build_jobs"], true, "{v}");
    assert_eq!(v["linux_build_config"]["dist_amdgpu_families"], "gfx94X-dcgpu;gfx110X-all;gfx1151;gfx120X-all");
    assert_eq!(v["test_type"], "quick");

    // A matrix file of the project's own: one family, checked on load.
    let own = repo.join("matrix.toml");
    let builtin = std::fs::read_to_string(workspace_root().join("ci/data/ci_matrix.toml")).unwrap();
    let cut = builtin.find("[[family]]\nkey = \"gfx110x\"").unwrap();
    std::fs::write(&own, &builtin[..cut]).unwrap();
    let mut cmd = matrix("schedule");
    cmd.arg("--matrix-file").arg(&own);
    let v: Value = serde_json::from_slice(&run(cmd, Duration::from_secs(60)).await.stdout).unwrap();
    assert_eq!(v["linux_build_config"]["dist_amdgpu_families"], "gfx94X-dcgpu");
    assert_eq!(v["windows_build_config"], Value::Null);
    std::fs::write(&own, builtin.replace("trigger = \"nightly\"", "trigger = \"weekly\"")).unwrap();
    let mut cmd = matrix("schedule");
    cmd.arg("--matrix-file").arg(&own);
    let out = run(cmd, Duration::from_secs(60)).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("weekly"), "{}", String::from_utf8_lossy(&out.stderr));
}
