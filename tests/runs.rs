//! Finding runs by commit: `quarry runs init` (and the run's first push or stage build) writes
//! its manifest from the CI environment; `quarry runs find --commit` prints the runs that
//! built a commit, newest first, and fails clearly for a commit no run built; the run list page
//! filters by `?commit=`.

use std::path::Path;
use std::time::Duration;

use quarry_tests::{assert_success, quarry_bin, run};

use crate::browse::serve;

const A: &str = "1111111aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const B: &str = "2222222bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

async fn quarry(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args);
    for name in ["GITHUB_SHA", "GITHUB_REF_NAME", "GITHUB_WORKFLOW", "GITHUB_REPOSITORY", "THEROCK_LOCAL_STAGING_DIR"] {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().copied());
    run(cmd, Duration::from_secs(60)).await
}

async fn init(store: &Path, run_id: &str, platform: &str, sha: &str, branch: &str) -> serde_json::Value {
    let store = store.to_str().unwrap();
    let env = [("GITHUB_SHA", sha), ("GITHUB_REF_NAME", branch), ("GITHUB_WORKFLOW", "CI")];
    let out = quarry(&["run", "init", "--run-id", run_id, "--platform", platform, "--store", store], &env).await;
    assert_success(&out, "quarry run init");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_find_the_runs_that_built_a_commit_newest_first() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let manifest = init(&store, "100", "linux", A, "main").await;
    assert_eq!((manifest["commit"].as_str(), manifest["branch"].as_str()), (Some(A), Some("main")));
    init(&store, "101", "linux", B, "main").await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    init(&store, "102", "windows", A, "release").await;
    init(&store, "103", "linux", &A.to_uppercase(), "main").await;
    let again = init(&store, "100", "linux", B, "other").await;
    assert_eq!(again, manifest, "a run's first manifest stays");

    let s = store.to_str().unwrap();
    let out = quarry(&["runs", "find", "--commit", A, "--store", s], &[]).await;
    assert_success(&out, "quarry runs find");
    assert_eq!(stdout(&out), "103\n102\n100\n", "newest first");
    let out =
        quarry(&["runs", "find", "--commit", &A[..9], "--store", s, "--platform", "linux", "--latest"], &[]).await;
    assert_success(&out, "quarry runs find --latest");
    assert_eq!(stdout(&out), "103\n", "an abbreviated sha, one platform, the newest run");
    let out = quarry(&["runs", "find", "--commit", B, "--store", s, "--json"], &[]).await;
    assert_success(&out, "quarry runs find --json");
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(found.as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found[0]["run"], "101-linux");
    assert_eq!(found[0]["manifest"]["commit"], B);

    let unknown = "3333333ccccccccccccccccccccccccccccccccc";
    let out = quarry(&["runs", "find", "--commit", unknown, "--store", s], &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout(&out).is_empty());
    assert!(stderr.contains(&format!("built commit {unknown}")), "{stderr}");
    let out = quarry(&["runs", "find", "--commit", "not-a-sha", "--store", s], &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("\"not-a-sha\" is not a commit"), "{stderr}");

    // The run list page filters by commit.
    let served = serve(tmp.path(), &format!("store = \"{}\"\n", store.display()), &[], &[]).await;
    let client = reqwest::Client::new();
    let page = |query: String| {
        let client = client.clone();
        let url = format!("{}{query}", served.url);
        async move {
            let response = client.get(&url).send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    let rows = |html: &str| -> Vec<String> {
        html.match_indices("data-run=\"")
            .map(|(i, m)| html[i + m.len()..].split('"').next().unwrap().to_owned())
            .collect()
    };
    let (status, html) = page(format!("?commit={}", &A[..12])).await;
    assert_eq!(status, 200, "{html}");
    assert_eq!(rows(&html), ["103-linux", "102-windows", "100-linux"], "{html}");
    assert!(html.contains("id=\"commit-filter\""));
    let (_, html) = page(String::new()).await;
    assert_eq!(rows(&html).len(), 4, "unfiltered: every run");
    assert!(html.contains(&format!("<code>{}</code>", &B[..12])), "rows show their commit");
    let (status, html) = page(format!("?commit={unknown}")).await;
    assert_eq!(status, 200);
    assert!(html.contains(&format!("No run built commit {unknown}")), "{html}");
    let (status, _) = page("?commit=zz".into()).await;
    assert_eq!(status, 400, "a malformed commit is bad input");
}

/// `quarry upload` into a bucket is a run's first write as often as a push is: it gives the run
/// its manifest, and `runs find` finds the run by the commit CI built.
#[tokio::test(flavor = "multi_thread")]
async fn an_upload_gives_its_run_a_manifest() {
    let server = quarry_tests::s3::S3Server::start_s3s_fs().await;
    let client = quarry_tests::s3::s3_client(&server);
    client.create_bucket().bucket("therock-ci-artifacts").send().await.expect("create bucket");
    let tmp = tempfile::tempdir().unwrap();
    let wheel = quarry_tests::WheelSpec::new("found-by-commit", "1.0").write_to(tmp.path());
    let client_env = server.client_env();
    let mut env: Vec<(&str, &str)> = client_env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.extend([("GITHUB_SHA", A), ("GITHUB_REF_NAME", "main"), ("GITHUB_REPOSITORY", "ROCm/TheRock")]);
    let args = ["upload", "--run-id", "300", "--platform", "linux", wheel.to_str().unwrap()];
    assert_success(&quarry(&args, &env).await, "quarry upload");
    let out =
        quarry(&["runs", "find", "--commit", A, "--store", "s3://therock-ci-artifacts"], &env[..client_env.len()])
            .await;
    assert_success(&out, "quarry runs find");
    assert_eq!(stdout(&out), "300\n");
    server.stop().await;
}
