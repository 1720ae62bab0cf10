//! The `quarry` binary as a user runs it: `quarry serve` on a local store, `quarry upload`
//! with a progress bar and `--json`, `quarry index`, and pip installing from the printed URL.

use std::process::Stdio;
use std::time::Duration;

use quarry_tests::{WheelSpec, assert_success, installed, pip_install, quarry_bin, run};
use tokio::io::{AsyncBufReadExt, BufReader};

struct Served {
    child: tokio::process::Child,
    url: String,
}

async fn serve(store: &std::path::Path, token_file: &std::path::Path) -> Served {
    let mut child = tokio::process::Command::new(quarry_bin())
        .args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(store)
        .arg("--token-file")
        .arg(token_file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start quarry serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("quarry serve printed its URL in time")
        .expect("read stdout")
        .expect("a URL line");
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with('/'), "{url}");
    Served { child, url }
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_upload_index_and_install() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let token_file = tmp.path().join("token");
    let mut served = serve(&store, &token_file).await;
    let token = std::fs::read_to_string(&token_file).expect("serve wrote a token file");
    assert!(token.trim().len() >= 32, "a random token: {token:?}");

    let client = reqwest::Client::new();
    let health = client.get(format!("{}healthz", served.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);

    let wheels = tmp.path().join("dist");
    std::fs::create_dir_all(&wheels).unwrap();
    let files: Vec<_> = [WheelSpec::new("cli-demo", "1.0"), WheelSpec::new("cli-demo", "1.1")]
        .iter()
        .map(|s| s.write_to(&wheels))
        .collect();
    let to = format!("{}4242-linux/python/", served.url);
    let mut upload = tokio::process::Command::new(quarry_bin());
    upload.args(["upload", "--json", "--to", &to, "--token-file"]).arg(&token_file).args(&files);
    let out = run(upload, Duration::from_secs(60)).await;
    assert_success(&out, "quarry upload");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let find_links = summary["find_links_url"].as_str().expect("find_links_url").to_owned();
    assert_eq!(find_links, format!("{to}index.html"));
    assert_eq!(summary["files"].as_array().map(Vec::len), Some(2));

    // Uploading again is a no-op; without a token it is refused.
    let mut again = tokio::process::Command::new(quarry_bin());
    again.args(["upload", "--to", &to, "--token-file"]).arg(&token_file).arg(&files[0]);
    let out = run(again, Duration::from_secs(60)).await;
    assert_success(&out, "re-upload");
    assert!(String::from_utf8_lossy(&out.stdout).contains("exists"), "{}", String::from_utf8_lossy(&out.stdout));
    let mut anonymous = tokio::process::Command::new(quarry_bin());
    anonymous.args(["upload", "--to", &to]).arg(&files[0]).env_remove("QUARRY_TOKEN");
    let out = run(anonymous, Duration::from_secs(60)).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no upload token"));

    let target = tmp.path().join("site");
    let out = pip_install(&["--no-index", "--find-links", &find_links, "cli-demo"], &target).await;
    assert_success(&out, "pip install from the printed find-links URL");
    assert_eq!(installed(&target), ["cli_demo-1.1.dist-info"]);

    // Stop the server (SIGTERM) and reindex offline: nothing to do, and --json says so.
    let pid = served.child.id().expect("pid");
    let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let status =
        tokio::time::timeout(Duration::from_secs(20), served.child.wait()).await.expect("serve stops on SIGTERM");
    assert!(status.is_ok());
    let mut index = tokio::process::Command::new(quarry_bin());
    index.args(["index", "--json"]).arg(&store);
    let out = run(index, Duration::from_secs(60)).await;
    assert_success(&out, "quarry index");
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports[0]["root"], "4242-linux/python/");
    assert_eq!(reports[0]["committed"], false);

    // A file copied in by hand: `--check` reports it missing from the pages and fails…
    WheelSpec::new("cli-demo", "2.0").write_to(&store.join("4242-linux/python"));
    let check = |store: &std::path::Path| {
        let mut c = tokio::process::Command::new(quarry_bin());
        c.args(["index", "--check"]).arg(store);
        c
    };
    let out = run(check(&store), Duration::from_secs(60)).await;
    assert!(!out.status.success(), "--check passed with an unindexed file");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("cli_demo-2.0-py3-none-any.whl is in the listing but not in the committed state"),
        "{stdout}"
    );
    // …and the next `quarry index` picks it up.
    let mut index = tokio::process::Command::new(quarry_bin());
    index.arg("index").arg(&store);
    let out = run(index, Duration::from_secs(60)).await;
    assert_success(&out, "quarry index");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next(),
        Some("4242-linux/python/: 1 added, 0 removed, 0 rejected, 4 written, 0 deleted")
    );
    let out = run(check(&store), Duration::from_secs(60)).await;
    assert_success(&out, "quarry index --check");
    assert!(String::from_utf8_lossy(&out.stdout).contains("4242-linux/python/: 3 files, 3 pages, 0 problems"));
}
