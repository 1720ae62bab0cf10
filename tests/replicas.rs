//! Two `quarry serve --store s3://…` replicas over one bucket (moto): 64 concurrent uploads
//! split between them, each answered only after its own reindex. Afterwards every upload is on
//! every page either replica serves, and `quarry index --check` finds nothing wrong.

use std::process::Stdio;
use std::time::Duration;

use quarry_tests::s3::{S3Server, s3_client};
use quarry_tests::{ServedBinary, TOKEN, WheelSpec, quarry_bin, run};

const ROOT: &str = "4242-linux/python/";

async fn replica(server: &S3Server, token_file: &std::path::Path) -> ServedBinary {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store", "s3://replicated/ci/", "--token-file"])
        .arg(token_file)
        .envs(server.client_env())
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_TOKEN")
        .stderr(Stdio::null());
    ServedBinary::start(cmd).await
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_over_one_bucket_converge() {
    let s3 = S3Server::start_moto().await;
    s3_client(&s3).create_bucket().bucket("replicated").send().await.expect("create bucket");
    let tmp = tempfile::tempdir().unwrap();
    let token_file = tmp.path().join("tokens");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let replicas = [replica(&s3, &token_file).await, replica(&s3, &token_file).await];
    let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();

    let specs: Vec<WheelSpec> =
        (0..64).map(|i| WheelSpec::new(&format!("proj{}", i % 16), &format!("1.{i}"))).collect();
    let uploads = specs.iter().enumerate().map(|(i, spec)| {
        let url = format!("{}{ROOT}{}", replicas[i % 2].url, spec.filename());
        let (client, body) = (client.clone(), spec.build());
        async move {
            let response = client.put(&url).bearer_auth(TOKEN).body(body).send().await.expect("upload");
            (url, response.status().as_u16(), response.text().await.unwrap_or_default())
        }
    });
    for (url, status, body) in futures_util::future::join_all(uploads).await {
        assert_eq!(status, 201, "{url}: {body}");
    }

    for replica in &replicas {
        let page = client.get(format!("{}{ROOT}index.html", replica.url)).send().await.unwrap().text().await.unwrap();
        for spec in &specs {
            assert!(
                page.contains(&spec.filename()),
                "{} missing from {}'s find-links page",
                spec.filename(),
                replica.url
            );
        }
        for p in 0..16 {
            let url = format!("{}{ROOT}simple/proj{p}/", replica.url);
            let project = client.get(&url).send().await.unwrap().text().await.unwrap();
            for spec in specs.iter().filter(|s| s.name == format!("proj{p}")) {
                assert!(project.contains(&spec.filename()), "{} missing from {url}", spec.filename());
            }
        }
    }
    let mut check = tokio::process::Command::new(quarry_bin());
    check.args(["index", "s3://replicated/ci/", "--check"]).envs(s3.client_env());
    let out = run(check, Duration::from_secs(120)).await;
    assert!(
        out.status.success(),
        "quarry index --check:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(replicas);
    s3.stop().await;
}
