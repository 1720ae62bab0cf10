//! The deployed artifact, as deployed: the `bootstrap` that `cargo lambda build --release`
//! produced (the file `infra/` ships) runs against the `cargo lambda watch --only-lambda-apis`
//! runtime emulator, is invoked with a real S3 event for a wheel that landed in a real S3
//! server (s3s-fs, SigV4 checked), and leaves a consistent root behind; a `.deb` that lands gets
//! an apt repo signed with the key the function read from Secrets Manager (moto) at init.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use quarry_index::RepoRoot;
use quarry_store::{ConditionalWrites, Key, PutOptions, S3Store, Store, StoreExt};
use quarry_tests::native::{build_fixtures, test_key};
use quarry_tests::s3::{LambdaEmulator, S3Server, create_secret, lambda_bootstrap, s3_client, s3_put_event};
use quarry_tests::{WheelSpec, assert_success, run};

#[tokio::test(flavor = "multi_thread")]
async fn the_built_bootstrap_handles_an_s3_event_under_the_runtime_emulator() {
    let bootstrap = lambda_bootstrap();
    let server = S3Server::start_s3s_fs().await;
    let client = s3_client(&server);
    client.create_bucket().bucket("ci-artifacts").send().await.expect("create bucket");
    let store: Arc<dyn Store> =
        Arc::new(S3Store::from_client(client, "ci-artifacts", "").with_conditional_writes(ConditionalWrites::Verify));
    let spec = WheelSpec::new("rocm-sdk-core", "7.10.0rc20251124+rocm7.10");
    let key = format!("12345-linux/python/{}", spec.filename());
    store.put_bytes(&Key::new(key.as_str()).unwrap(), spec.build().into(), PutOptions::default()).await.unwrap();
    let fixtures = tempfile::tempdir().unwrap();
    build_fixtures(fixtures.path(), None).await;
    let deb_key = "12345-linux/packages/deb/pool/main/quarry-hello_1.0-1_amd64.deb".to_owned();
    let deb = std::fs::read(fixtures.path().join("deb/quarry-hello_1.0-1_amd64.deb")).unwrap();
    store.put_bytes(&Key::new(deb_key.as_str()).unwrap(), deb.into(), PutOptions::default()).await.unwrap();
    let rpm_key = "12345-linux/packages/rpm/x86_64/quarry-hello-1.0-1.x86_64.rpm".to_owned();
    let rpm = std::fs::read(fixtures.path().join("rpm/quarry-hello-1.0-1.x86_64.rpm")).unwrap();
    store.put_bytes(&Key::new(rpm_key.as_str()).unwrap(), rpm.into(), PutOptions::default()).await.unwrap();
    // The signing key lives in Secrets Manager (moto); the function reads it once at init.
    let secrets = S3Server::start_moto().await;
    let (secret_key, public_key) = test_key("ed25519");
    let secret_arn = create_secret(&secrets, "quarry/signing-key", &secret_key).await;

    let emulator = LambdaEmulator::start().await;
    let mut function = emulator
        .function(&bootstrap, &server)
        .env("AWS_ENDPOINT_URL_SECRETS_MANAGER", &secrets.endpoint)
        .env("QUARRY_SIGNING_KEY_SECRET_ARN", &secret_arn)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bootstrap");

    let (status, answer) = emulator.invoke(&s3_put_event("ci-artifacts", &key)).await;
    assert!(status.is_success(), "{status}: {answer}");
    assert_eq!(answer["reindexed"], serde_json::json!(["ci-artifacts/12345-linux/python/"]), "{answer}");

    // The function wrote the pages into the bucket; the root audits clean.
    let report = quarry_index::check(
        store.as_ref(),
        &RepoRoot::new("12345-linux/python/", &Default::default()).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(report.is_clean() && report.files == 1, "{report}");

    // A .deb: the apt root, signed with the key from the secret (gpgv checks InRelease).
    let (status, answer) = emulator.invoke(&s3_put_event("ci-artifacts", &deb_key)).await;
    assert!(status.is_success(), "{status}: {answer}");
    assert_eq!(answer["reindexed"], serde_json::json!(["ci-artifacts/12345-linux/packages/deb/"]), "{answer}");
    let (_, in_release) =
        store.get_bytes(&Key::new("12345-linux/packages/deb/dists/stable/InRelease").unwrap(), 1 << 20).await.unwrap();
    let check = tempfile::tempdir().unwrap();
    std::fs::write(check.path().join("InRelease"), &in_release).unwrap();
    std::fs::write(check.path().join("key.asc"), public_key).unwrap();
    let mut dearmor = tokio::process::Command::new("gpg");
    dearmor.args(["--batch", "--yes", "--homedir"]).arg(check.path()).args(["--dearmor", "-o"]);
    dearmor.arg(check.path().join("key.gpg")).arg(check.path().join("key.asc"));
    assert_success(&run(dearmor, Duration::from_secs(30)).await, "gpg --dearmor");
    let mut gpgv = tokio::process::Command::new("gpgv");
    gpgv.arg("--homedir").arg(check.path()).arg("--keyring").arg(check.path().join("key.gpg"));
    gpgv.arg(check.path().join("InRelease"));
    assert_success(&run(gpgv, Duration::from_secs(30)).await, "gpgv InRelease");
    let (_, packages) = store
        .get_bytes(&Key::new("12345-linux/packages/deb/dists/stable/main/binary-amd64/Packages").unwrap(), 1 << 20)
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&packages).contains("Package: quarry-hello\n"), "{packages:?}");

    // An .rpm: the dnf root, with repomd.xml signed by the same key; both roots audit clean.
    let (status, answer) = emulator.invoke(&s3_put_event("ci-artifacts", &rpm_key)).await;
    assert!(status.is_success(), "{status}: {answer}");
    assert_eq!(answer["reindexed"], serde_json::json!(["ci-artifacts/12345-linux/packages/rpm/x86_64/"]), "{answer}");
    for (root, signature) in [
        ("12345-linux/packages/deb/", "dists/stable/Release.gpg"),
        ("12345-linux/packages/rpm/x86_64/", "repodata/repomd.xml.asc"),
    ] {
        let root = RepoRoot::new(root, &Default::default()).unwrap();
        let report = quarry_index::check(store.as_ref(), &root, &Default::default()).await.unwrap();
        assert!(report.is_clean() && report.files == 1, "{report}");
        store.head(&root.key(signature).unwrap()).await.expect("a detached signature");
    }

    // An event for something that is not an event at all fails the invocation, not the function.
    let (_, answer) = emulator.invoke(&serde_json::json!({"hello": "world"})).await;
    assert!(answer.to_string().contains("not an event this function handles"), "{answer}");
    // ... which still serves the next one.
    let (status, answer) = emulator.invoke(&s3_put_event("ci-artifacts", &key)).await;
    assert!(status.is_success(), "{status}: {answer}");

    function.kill().await.ok();
    let output = function.wait_with_output().await.expect("bootstrap output");
    let logs = String::from_utf8_lossy(&output.stderr);
    let first = logs.lines().next().unwrap_or_default();
    let parsed: serde_json::Value = serde_json::from_str(first).unwrap_or_default();
    assert!(parsed.is_object(), "logs are JSON lines: {first}");
    emulator.stop().await;
    server.stop().await;
    secrets.stop().await;
}
