//! Indexing a bucket on a real S3 server (moto on loopback): wheels land in S3, `quarry index
//! s3://…` publishes the pages into the bucket, and pip installs straight from the S3 server's
//! URLs, the way clients read a bucket or CDN in production.

use std::sync::Arc;
use std::time::Duration;

use quarry_store::{Key, PutOptions, S3Store, Store, StoreExt};
use quarry_tests::s3::{S3Server, create_public_bucket, s3_client};
use quarry_tests::{WheelSpec, assert_success, installed, pip_install, quarry_bin, run};

#[tokio::test(flavor = "multi_thread")]
async fn quarry_index_publishes_into_a_bucket_that_pip_installs_from() {
    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    // Readable by anyone, like TheRock's artifact buckets: pip reads it without credentials.
    create_public_bucket(&client, "artifacts").await;
    let store = Arc::new(S3Store::from_client(client.clone(), "artifacts", "ci/"));
    let specs = [
        WheelSpec::new("s3-demo", "1.0"),
        WheelSpec::new("s3-demo", "2.0").requires_python(">=3.99"),
        WheelSpec::new("torch", "2.9.1+rocm7.10"),
    ];
    for spec in &specs {
        let key = Key::new(format!("777-linux/python/{}", spec.filename())).unwrap();
        store.put_bytes(&key, spec.build().into(), PutOptions::default()).await.unwrap();
    }

    let keys = server.clone_credentials();
    let index = || {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["index", "s3://artifacts/ci/"])
            .env("AWS_ENDPOINT_URL", &server.endpoint)
            .env("AWS_ACCESS_KEY_ID", &keys.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &keys.secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true");
        run(cmd, Duration::from_secs(120))
    };
    let out = index().await;
    assert_success(&out, "quarry index s3://");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next(),
        Some("777-linux/python/: 3 added, 0 removed, 0 rejected, 10 written, 0 deleted")
    );

    // What the indexer wrote is in the bucket, with the metadata clients rely on.
    let page = client.get_object().bucket("artifacts").key("ci/777-linux/python/index.html").send().await.unwrap();
    assert_eq!(page.content_type(), Some("text/html; charset=utf-8"));
    let sha = store.head(&Key::new("777-linux/python/torch-2.9.1+rocm7.10-py3-none-any.whl").unwrap()).await.unwrap();
    assert_eq!(sha.sha256.as_deref(), Some(quarry_tests::sha256_hex(&specs[2].build()).as_str()));

    // pip reads the bucket over plain HTTP, as from a public bucket or a CDN.
    let tmp = tempfile::tempdir().unwrap();
    let find_links = format!("{}/artifacts/ci/777-linux/python/index.html", server.endpoint);
    let target = tmp.path().join("site");
    let out =
        pip_install(&["--no-index", "--find-links", &find_links, "s3-demo", "torch==2.9.1+rocm7.10"], &target).await;
    assert_success(&out, "pip install from the bucket");
    assert_eq!(installed(&target), ["s3_demo-1.0.dist-info", "torch-2.9.1+rocm7.10.dist-info"]);

    // Indexing again changes nothing.
    let out = index().await;
    assert_success(&out, "second quarry index");
    assert!(String::from_utf8_lossy(&out.stdout).contains("(unchanged)"));
    server.stop().await;
}
