//! `quarry.exe upload` of wheels into s3s-fs (a real S3 server that checks SigV4), configured
//! the way CI configures it (the `AWS_*` environment, which Wine passes to the Windows
//! process), as `tests/s3_upload.rs` does with the Linux binary: every object stored whole with
//! its sha256, the run's find-links URL reported; then a Linux `quarry serve` over the bucket
//! indexes the run (as the indexer does in production) and Linux pip installs from it.

use std::process::Stdio;
use std::time::Duration;

use quarry_store::{Key, S3Store, Store, StoreExt};
use quarry_tests::s3::{S3Server, s3_client};
use quarry_tests::{ServedBinary, WheelSpec, assert_success, installed, pip_install, quarry_bin, sha256_hex};

use super::{Wine, text, win};

#[tokio::test(flavor = "multi_thread")]
async fn upload_from_windows_into_s3_then_linux_pip_installs() {
    let Some(wine) = Wine::new() else { return };
    let server = S3Server::start_s3s_fs().await;
    let client = s3_client(&server);
    client.create_bucket().bucket("therock-ci-artifacts").send().await.expect("create bucket");
    let store = S3Store::from_client(client, "therock-ci-artifacts", "");
    let tmp = tempfile::tempdir().unwrap();
    let dist = tmp.path().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let specs = [WheelSpec::new("win-s3", "1.0"), WheelSpec::new("win-s3", "1.1")];
    let wheels: Vec<_> = specs.iter().map(|s| s.write_to(&dist)).collect();

    let mut cmd = wine.quarry();
    cmd.args(["upload", "--json", "--to", "s3://therock-ci-artifacts/88-windows/python/"]);
    cmd.args(wheels.iter().enumerate().map(|(i, w)| win(w, i == 0)));
    cmd.envs(server.client_env());
    let out = quarry_tests::run(cmd, Duration::from_secs(120)).await;
    assert_success(&out, "quarry.exe upload to s3");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let find_links = format!("{}/therock-ci-artifacts/88-windows/python/index.html", server.endpoint);
    assert_eq!(summary["package_find_links_url"], find_links.as_str(), "{}", text(&out.stdout));
    for (spec, path) in specs.iter().zip(&wheels) {
        let key = Key::new(format!("88-windows/python/{}", spec.filename())).unwrap();
        let bytes = std::fs::read(path).unwrap();
        let head = store.head(&key).await.unwrap();
        assert_eq!(head.sha256.as_deref(), Some(sha256_hex(&bytes).as_str()), "x-amz-meta-sha256 of {key}");
        let (_, stored) = store.get_bytes(&key, 1 << 30).await.unwrap();
        assert!(stored.as_ref() == bytes.as_slice(), "{key} differs");
    }

    // A Linux `quarry serve` over the bucket; Linux pip installs what quarry.exe uploaded.
    let token_file = tmp.path().join("token");
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store", "s3://therock-ci-artifacts/", "--token-file"])
        .arg(&token_file)
        .envs(server.client_env())
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_TOKEN")
        .stderr(Stdio::null());
    let served = ServedBinary::start(cmd).await;
    let target = tmp.path().join("site");
    let find_links = format!("{}88-windows/python/index.html", served.url);
    let out = pip_install(&["--no-index", "--find-links", &find_links, "win-s3"], &target).await;
    assert_success(&out, "Linux pip install from the bucket quarry.exe uploaded into");
    assert_eq!(installed(&target), ["win_s3-1.1.dist-info"]);
}
