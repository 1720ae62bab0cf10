//! `quarry upload` into a real S3 server (s3s-fs, SigV4 checked) the way CI jobs run it:
//! sha256 stored with each object, multipart for large files, idempotent re-runs, immutable
//! keys, keys computed from the run, and `$GITHUB_OUTPUT` / `$GITHUB_STEP_SUMMARY` written.

use std::sync::Arc;
use std::time::Duration;

use quarry_store::{Key, S3Store, Store, StoreExt};
use quarry_tests::s3::{S3Server, s3_client};
use quarry_tests::{WheelSpec, assert_success, quarry_bin, run, sha256_hex};

fn upload(
    server: &S3Server,
    args: &[&str],
    github: &std::path::Path,
    file: &std::path::Path,
) -> tokio::process::Command {
    let keys = server.clone_credentials();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.arg("upload")
        .args(args)
        .arg(file)
        .env("AWS_ENDPOINT_URL", &server.endpoint)
        .env("AWS_ACCESS_KEY_ID", &keys.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &keys.secret_key)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("GITHUB_OUTPUT", github.join("output"))
        .env("GITHUB_STEP_SUMMARY", github.join("summary"))
        .env_remove("GITHUB_RUN_ID")
        .env_remove("RELEASE_TYPE")
        .env_remove("GITHUB_REPOSITORY");
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn ci_uploads_into_s3() {
    let server = S3Server::start_s3s_fs().await;
    let client = s3_client(&server);
    client.create_bucket().bucket("therock-ci-artifacts").send().await.expect("create bucket");
    let store = S3Store::from_client(client, "therock-ci-artifacts", "");
    let tmp = tempfile::tempdir().unwrap();
    let dist = tmp.path().join("dist");
    std::fs::create_dir_all(dist.join("nested")).unwrap();
    let small = WheelSpec::new("ci-pkg", "1.0").write_to(&dist);
    // Over the 8 MiB part size: a multipart upload.
    let big: Vec<u8> = (0..20u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(dist.join("nested").join("big.bin"), &big).unwrap();

    let out = run(
        upload(&server, &["--json", "--to", "s3://therock-ci-artifacts/55-linux/python/"], tmp.path(), &dist),
        Duration::from_secs(120),
    )
    .await;
    assert_success(&out, "quarry upload to s3");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // On an S3-compatible server, the URL there (on S3: https://BUCKET.s3.amazonaws.com/…).
    let find_links = format!("{}/therock-ci-artifacts/55-linux/python/index.html", server.endpoint);
    assert_eq!(summary["package_find_links_url"], find_links.as_str());
    let statuses: Vec<&str> =
        summary["files"].as_array().unwrap().iter().map(|f| f["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["uploaded", "uploaded"]);

    for (key, bytes) in [
        ("55-linux/python/ci_pkg-1.0-py3-none-any.whl".to_owned(), std::fs::read(&small).unwrap()),
        ("55-linux/python/nested/big.bin".to_owned(), big.clone()),
    ] {
        let key = Key::new(key).unwrap();
        let head = store.head(&key).await.unwrap();
        assert_eq!(head.sha256.as_deref(), Some(sha256_hex(&bytes).as_str()), "x-amz-meta-sha256 of {key}");
        let (_, stored) = store.get_bytes(&key, 1 << 30).await.unwrap();
        assert!(stored.as_ref() == bytes.as_slice(), "{key} differs");
    }
    let output = std::fs::read_to_string(tmp.path().join("output")).unwrap();
    assert_eq!(output, format!("package_find_links_url={find_links}\n"));
    assert!(
        std::fs::read_to_string(tmp.path().join("summary"))
            .unwrap()
            .contains("| `55-linux/python/nested/big.bin` | 20971520 |")
    );

    // Again: nothing to do.
    let out = run(
        upload(&server, &["--json", "--to", "s3://therock-ci-artifacts/55-linux/python/"], tmp.path(), &dist),
        Duration::from_secs(120),
    )
    .await;
    assert_success(&out, "second upload");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(summary["files"].as_array().unwrap().iter().all(|f| f["status"] == "skipped"), "{summary}");

    // Different bytes under an uploaded name are refused, and the stored object survives.
    std::fs::write(&small, b"not the same wheel").unwrap();
    let out = run(
        upload(&server, &["--to", "s3://therock-ci-artifacts/55-linux/python/"], tmp.path(), &small),
        Duration::from_secs(120),
    )
    .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("immutable"), "{}", String::from_utf8_lossy(&out.stderr));
    let head = store.head(&Key::new("55-linux/python/ci_pkg-1.0-py3-none-any.whl").unwrap()).await.unwrap();
    assert_eq!(head.sha256.as_deref(), Some(sha256_hex(&WheelSpec::new("ci-pkg", "1.0").build()).as_str()));

    // The key computed from the run, as TheRock lays it out.
    let artifact = tmp.path().join("blas_lib_gfx942.tar.zst");
    std::fs::write(&artifact, b"artifact bytes").unwrap();
    let out = run(
        upload(
            &server,
            &["--json", "--run-id", "12345678901", "--kind", "artifacts", "--bucket", "therock-ci-artifacts"],
            tmp.path(),
            &artifact,
        ),
        Duration::from_secs(120),
    )
    .await;
    assert_success(&out, "upload with a computed key");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        summary["artifacts_index_url"],
        format!("{}/therock-ci-artifacts/12345678901-linux/index.html", server.endpoint).as_str()
    );
    // Without --kind, the destination says what it is.
    let out = run(
        upload(&server, &["--json", "--to", "s3://therock-ci-artifacts/12345678901-linux/"], tmp.path(), &artifact),
        Duration::from_secs(120),
    )
    .await;
    assert_success(&out, "artifact upload with --to");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        summary["artifacts_index_url"].as_str().is_some_and(|u| u.ends_with("/12345678901-linux/index.html")),
        "{summary}"
    );
    let store: Arc<dyn Store> = Arc::new(store);
    assert!(store.head(&Key::new("12345678901-linux/blas_lib_gfx942.tar.zst").unwrap()).await.is_ok());
    server.stop().await;
}
