//! Build summaries: `quarry stage build` of the pipeline fixture's stages times every step
//! (setup, fetch, configure, build, push) into `timings.json` beside its build log in the run's
//! logs, appends a Markdown table to `$GITHUB_STEP_SUMMARY` (parsed here by markdown-it-py, the
//! CommonMark parser with GitHub's tables), and the run page, rendered by headless Chromium,
//! shows the timing table across stages and families and links each stage's logs.

use std::path::Path;
use std::time::Duration;

use quarry_tests::{assert_success, quarry_bin, run, venv, workspace_root};

use crate::browse::{by_id, chromium, hrefs, links_resolve, serve};
use crate::pipeline::fixture_checkout;

const STEPS: [&str; 5] = ["setup", "fetch", "configure", "build", "push"];

async fn stage_build(src: &Path, tmp: &Path, stage: &str, families: &str) -> serde_json::Value {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["stage", "build", "--stage", stage, "--amdgpu-families", families, "--run-id", "500"])
        .args(["--platform", "linux", "--topology"])
        .arg(src.join("BUILD_TOPOLOGY.toml"))
        .arg("--source-dir")
        .arg(src)
        .arg("--build-dir")
        .arg(tmp.join(format!("build-{stage}")))
        .arg("--local-staging-dir")
        .arg(tmp.join("store"))
        .env("GITHUB_STEP_SUMMARY", tmp.join("summary.md"))
        .env("SOURCE_DATE_EPOCH", "1795000000")
        .env_remove("GITHUB_SHA")
        .env_remove("THEROCK_LOCAL_STAGING_DIR");
    let out = run(cmd, Duration::from_secs(300)).await;
    assert_success(&out, &format!("quarry stage build --stage {stage}"));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Every step of a built stage, each with a positive duration.
fn assert_timed(report: &serde_json::Value, what: &str) {
    let steps = report["steps"].as_object().unwrap_or_else(|| panic!("{what}: no steps in {report}"));
    let mut names: Vec<&str> = steps.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut expected = STEPS.to_vec();
    expected.sort_unstable();
    assert_eq!(names, expected, "{what}: {report}");
    for (step, seconds) in steps {
        assert!(seconds.as_f64().unwrap() > 0.0, "{what}: {step} took {seconds}");
    }
    assert!(report["seconds"].as_f64().unwrap() > 0.0);
}

/// The Markdown's tables as markdown-it-py parses them (CommonMark with GitHub's tables):
/// tables of rows of cell texts.
async fn markdown_tables(markdown: &Path) -> Vec<Vec<Vec<String>>> {
    let script = r#"
import json, sys
from markdown_it import MarkdownIt
tokens = MarkdownIt("commonmark").enable("table").parse(open(sys.argv[1], encoding="utf-8").read())
tables, row = [], None
for t in tokens:
    if t.type == "table_open": tables.append([])
    elif t.type == "tr_open": row = []
    elif t.type == "inline" and row is not None: row.append(t.content)
    elif t.type == "tr_close": tables[-1].append(row); row = None
print(json.dumps(tables))
"#;
    let mut cmd = tokio::process::Command::new(venv().join("bin/python"));
    cmd.arg("-c").arg(script).arg(markdown);
    let out = run(cmd, Duration::from_secs(60)).await;
    assert_success(&out, "markdown-it-py");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn stage_builds_time_their_steps_and_the_summary_and_run_page_show_them() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, store) = (tmp.path().join("src"), tmp.path().join("store"));
    fixture_checkout(&src);
    let builds =
        [("foundation", "", "foundation"), ("compiler", "", "compiler"), ("math-libs", "famA", "math-libs_famA")];
    for (stage, families, group) in builds {
        let report = stage_build(&src, tmp.path(), stage, families).await;
        assert_timed(&report, stage);
        let logs = store.join("500-linux/logs").join(group);
        let stored: serde_json::Value =
            serde_json::from_slice(&std::fs::read(logs.join("timings.json")).unwrap()).unwrap();
        assert_eq!(stored, report, "the run keeps the timings {stage} printed");
        let log = std::fs::read_to_string(logs.join("build.log")).unwrap();
        assert!(log.contains("Build files have been written to"), "{stage}'s build log: {log}");
    }

    // The step summary: one table per build, a column per step, positive seconds.
    let tables = markdown_tables(&tmp.path().join("summary.md")).await;
    assert_eq!(tables.len(), 3, "{tables:?}");
    for (table, (stage, families, _)) in tables.iter().zip(builds) {
        let header = ["Stage", "Family", "Status", "Setup (s)", "Fetch (s)", "Configure (s)", "Build (s)", "Push (s)"];
        assert_eq!(table[0][..8], header, "{table:?}");
        assert_eq!(table[0][8], "Total (s)");
        assert_eq!(table.len(), 2, "a header and one build: {table:?}");
        let row = &table[1];
        let family = if families.is_empty() { "-" } else { families };
        assert_eq!(row[..3], [stage, family, "built"], "{row:?}");
        for cell in &row[3..] {
            assert!(cell.parse::<f64>().is_ok_and(|s| s > 0.0), "{stage}: {cell:?} is a positive duration");
        }
    }

    // The run page: the timing table across stages and families, each stage's logs linked.
    let topology = src.join("BUILD_TOPOLOGY.toml");
    let config = format!("store = \"{}\"\ntopology = \"{}\"\n", store.display(), topology.display());
    let served = serve(tmp.path(), &config, &[], &[]).await;
    let shots = workspace_root().join("target/test-artifacts/build-summary");
    std::fs::create_dir_all(&shots).unwrap();
    let dom = chromium(&format!("{}500-linux/", served.url), &shots.join("run.png")).await;
    let table = by_id(&dom, "timings");
    for (stage, families, group) in builds {
        let family = if families.is_empty() { "-" } else { families };
        let at = dom.find(&format!("<tr data-stage=\"{stage}\" data-family=\"{family}\">")).unwrap_or_else(|| {
            panic!("a timings row for {stage}: {table}");
        });
        let row = &dom[at..at + dom[at..].find("</tr>").unwrap()];
        let numbers = row.matches("<td class=\"num\">").count();
        assert_eq!(numbers, STEPS.len() + 1, "a cell per step and the total: {row}");
        let log = format!("/500-linux/logs/{group}/build.log");
        assert!(row.contains(&format!("href=\"{log}\"")), "the row links {log}: {row}");
        let section = format!("<p class=\"stage-logs\" data-stage=\"{stage}\">");
        let at = dom.find(&section).unwrap_or_else(|| panic!("{stage}'s section links its logs"));
        let logs = &dom[at..at + dom[at..].find("</p>").unwrap()];
        assert!(logs.contains(&format!("href=\"{log}\"")), "{logs}");
        assert!(
            !logs.contains(".quarry-listing") && !logs.contains("index.html"),
            "listing outputs are no logs: {logs}"
        );
    }
    assert!(hrefs(&dom).iter().any(|h| h.ends_with("/logs/compiler/timings.json")));
    assert!(links_resolve(&served.url, &dom).await >= 6, "every link on the run page answers");
}
