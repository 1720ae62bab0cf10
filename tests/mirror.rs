//! `quarry mirror` end to end: a local `quarry serve` is the upstream (never a public host); the
//! chosen projects land in a `python-deps/` root with the upstream's hashes, PEP 658 metadata
//! and upload-times, pip and uv install from it, a second mirror writes nothing, a file whose
//! bytes do not match the upstream's hash is refused with nothing stored, and one origin per
//! project holds (`--compose-with`, `quarry check-origins`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use quarry_tests::{
    ROOT, TestServer, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run, uv_pip,
};

const DEPS: &str = "python-deps/";
const CHANNEL: &str = "v2/gfx94X-dcgpu/";

async fn quarry(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args);
    run(cmd, Duration::from_secs(120)).await
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file under `dir` with its modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, SystemTime> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, SystemTime>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.map(Result::unwrap) {
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), out);
            } else {
                out.insert(entry.path(), entry.metadata().unwrap().modified().unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

async fn simple_json(server: &TestServer, path: &str) -> serde_json::Value {
    let response = server
        .client
        .get(format!("{}{path}", server.url))
        .header("Accept", "application/vnd.pypi.simple.v1+json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "GET {path}");
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

/// The upstream: foo 1.0 and 2.0 and bar 1.0 (bar needs foo) in a run's pip root.
async fn upstream() -> TestServer {
    let server = TestServer::start().await;
    for spec in
        [WheelSpec::new("foo", "1.0"), WheelSpec::new("foo", "2.0"), WheelSpec::new("bar", "1.0").requires("foo")]
    {
        server.upload(&spec).await;
    }
    server
}

fn mirror_args<'a>(store: &'a str, to: &'a str, upstream: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["mirror", "--store", store, "--to", to, "--upstream", upstream];
    args.extend_from_slice(extra);
    args
}

#[tokio::test]
async fn mirrored_projects_keep_upstream_hashes_metadata_and_times_and_install() {
    let up = upstream().await;
    let upstream_url = format!("{}{ROOT}simple/", up.url);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().display().to_string();
    let reqs = dir.path().join("requirements.txt");
    std::fs::write(&reqs, "# the base index\nbar==1.0\n").unwrap();
    let reqs = reqs.display().to_string();
    let args = mirror_args(&store, DEPS, &upstream_url, &["--project", "foo==1.0", "-r", &reqs]);
    let first = quarry(&args).await;
    assert_success(&first, "quarry mirror");
    let text = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(text.contains("mirrored  foo-1.0-py3-none-any.whl"), "{text}");
    assert!(!dir.path().join(format!("{DEPS}foo-2.0-py3-none-any.whl")).exists(), "only the version asked for");

    // Idempotent: a second identical mirror writes nothing.
    let before = snapshot(dir.path());
    let second = quarry(&args).await;
    assert_success(&second, "quarry mirror (again)");
    assert!(String::from_utf8_lossy(&second.stdout).contains("present   foo-1.0"), "{}", stderr(&second));
    assert_eq!(snapshot(dir.path()), before, "the second mirror changed the store");

    let served = TestServer::start_in_store(dir).await;
    for project in ["foo", "bar"] {
        let theirs = simple_json(&up, &format!("{ROOT}simple/{project}/")).await;
        // The stored PEP 691 page (negotiation of `python-deps/` comes with the configured layout).
        let ours = simple_json(&served, &format!("{DEPS}simple/{project}/index.json")).await;
        let want: Vec<&serde_json::Value> = theirs["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["filename"].as_str().unwrap().contains("-1.0-"))
            .collect();
        let got = ours["files"].as_array().unwrap();
        assert_eq!(got.len(), 1, "{ours}");
        for field in ["filename", "hashes", "upload-time", "core-metadata", "size"] {
            assert_eq!(got[0][field], want[0][field], "{project}: {field} differs from the upstream's");
        }
    }

    // The mirror as an upstream in turn: `python-deps/` pages are served as stored HTML (no
    // negotiation there), so this reads PEP 503 anchors and keeps the same hashes and times.
    let html_upstream = format!("{}{DEPS}simple/", served.url);
    let third = tempfile::tempdir().unwrap();
    let third_store = third.path().display().to_string();
    let chained = quarry(&mirror_args(&third_store, DEPS, &html_upstream, &["--project", "foo==1.0"])).await;
    assert_success(&chained, "quarry mirror from an HTML-only upstream");
    let read_page = |dir: &Path| -> serde_json::Value {
        let page = std::fs::read(dir.join(format!("{DEPS}simple/foo/index.json"))).unwrap();
        serde_json::from_slice(&page).unwrap()
    };
    assert_eq!(read_page(third.path())["files"], read_page(&served.store_dir())["files"]);

    let url = format!("{}{DEPS}simple/", served.url);
    let target = tempfile::tempdir().unwrap();
    let out = pip_install(&["--index-url", &url, "bar==1.0"], target.path()).await;
    assert_success(&out, "pip install from the mirror");
    assert_eq!(installed(target.path()), ["bar-1.0.dist-info", "foo-1.0.dist-info"]);
    let target = tempfile::tempdir().unwrap();
    let out = uv_pip("install", &["--index-url", &url, "bar==1.0"], Some(target.path())).await;
    assert_success(&out, "uv pip install from the mirror");
    assert_eq!(installed(target.path()), ["bar-1.0.dist-info", "foo-1.0.dist-info"]);
    served.stop().await;
    up.stop().await;
}

#[tokio::test]
async fn a_file_that_does_not_match_the_upstream_hash_is_refused_and_not_stored() {
    let up = upstream().await;
    // The upstream's file changes behind its index: its page still gives the old sha256.
    plant(&up.store_dir(), &format!("{ROOT}foo-2.0-py3-none-any.whl"), &WheelSpec::new("foo", "2.1").build());
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().display().to_string();
    let upstream_url = format!("{}{ROOT}simple/", up.url);
    let out =
        quarry(&mirror_args(&store, DEPS, &upstream_url, &["--project", "foo==2.0", "--project", "nope==1"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(report.contains("FAILED    foo-2.0-py3-none-any.whl: the downloaded bytes: sha256"), "{report}");
    assert!(report.contains("but the upstream says"), "{report}");
    assert!(report.contains("FAILED    nope==1: GET "), "an unknown project is named: {report}");
    assert!(!dir.path().join(format!("{DEPS}foo-2.0-py3-none-any.whl")).exists(), "a mismatching file was stored");
    up.stop().await;
}

#[tokio::test]
async fn one_origin_per_project_is_enforced() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().display().to_string();
    let upstream_url = format!("{}{ROOT}simple/", up.url);
    // The channel supplies foo.
    assert_success(&quarry(&mirror_args(&store, CHANNEL, &upstream_url, &["--project", "foo==2.0"])).await, "channel");
    let composed = ["--compose-with", CHANNEL];
    let refused =
        quarry(&mirror_args(&store, DEPS, &upstream_url, &[&composed[..], &["--project", "foo==1.0"]].concat())).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains(&format!("foo is supplied by both {CHANNEL} and {DEPS}")),
        "{}",
        stderr(&refused)
    );
    assert!(!dir.path().join(DEPS).exists(), "a refused mirror stored something");
    // bar is fine beside the channel.
    let ok =
        quarry(&mirror_args(&store, DEPS, &upstream_url, &[&composed[..], &["--project", "bar==1.0"]].concat())).await;
    assert_success(&ok, "mirror bar beside the channel");
    assert_success(&quarry(&["check-origins", "--store", &store, CHANNEL, DEPS]).await, "check-origins");
    // Without --compose-with nothing stops foo; check-origins then names both roots.
    assert_success(&quarry(&mirror_args(&store, DEPS, &upstream_url, &["--project", "foo==1.0"])).await, "mirror");
    let check = quarry(&["check-origins", "--store", &store, CHANNEL, DEPS, "--json"]).await;
    assert_eq!(check.status.code(), Some(1), "{}", stderr(&check));
    let conflicts: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(conflicts, serde_json::json!([{"project": "foo", "first": CHANNEL, "second": DEPS}]));
    up.stop().await;
}

#[tokio::test]
async fn bad_mirror_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().display().to_string();
    for (extra, says) in [
        (vec![], "nothing to mirror"),
        (vec!["--project", "foo>=1"], "expected NAME==VERSION"),
        (vec!["--project", "foo==1", "--python-version", "three"], "not a Python version"),
    ] {
        let out = quarry(&mirror_args(&store, DEPS, "http://127.0.0.1:9/simple/", &extra)).await;
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{extra:?}: {}", stderr(&out));
    }
}
