//! Faults on a real S3 server (s3s-fs on loopback, SigV4 checked): a store wrapper injects the
//! failures S3 produces (500s, 503 SlowDown, timeouts) and a crash between publishing the
//! outputs and committing the state. Failed events are redelivered, as SQS does; a crash is
//! repaired by the next event or by `quarry index`. No page ever points at a missing object.

use std::sync::Arc;
use std::time::Duration;

use quarry_index::RepoRoot;
use quarry_lambda_indexer::{Handler, Stores};
use quarry_store::faults::{Fault, FaultyStore, Op};
use quarry_store::{ConditionalWrites, Key, PutOptions, S3Store, Store, StoreExt};
use quarry_tests::s3::{S3Server, SqsMessage, s3_client, s3_put_event};
use quarry_tests::{WheelSpec, assert_success, quarry_bin, run};

const BUCKET: &str = "faulty-artifacts";
const ROOT: &str = "31-linux/python/";

struct Faulty(Arc<FaultyStore>);

impl Stores for Faulty {
    fn for_bucket(&self, _: &str) -> Arc<dyn Store> {
        self.0.clone()
    }
}

/// One SQS message `id` carrying the S3 notification for `key`.
fn sqs_event(id: &str, key: &str) -> serde_json::Value {
    let message =
        SqsMessage { message_id: id.into(), receipt_handle: id.into(), body: s3_put_event(BUCKET, key).to_string() };
    quarry_tests::s3::sqs_event("arn:aws:sqs:us-east-1:123456789012:quarry", &[message])
}

/// Only what a client would trip over: a link to a missing file or `.metadata`.
async fn assert_no_dangling_links(store: &dyn Store, when: &str) {
    let report = quarry_index::check(store, &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default())
        .await
        .unwrap();
    assert!(report.dangling().is_empty(), "{when}: {report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn injected_faults_and_a_crash_converge_without_dangling_links() {
    let server = S3Server::start_s3s_fs().await;
    let client = s3_client(&server);
    client.create_bucket().bucket(BUCKET).send().await.expect("create bucket");
    let real: Arc<dyn Store> =
        Arc::new(S3Store::from_client(client, BUCKET, "").with_conditional_writes(ConditionalWrites::Verify));
    // About one operation in ten fails (after the SDK's own retries), pseudo-randomly.
    let faults = [Fault::ServerError, Fault::Throttled, Fault::Timeout(Duration::from_millis(200))];
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    // Without faults, an event costs one pass and its read-back; a second reads no file again.
    let probe = WheelSpec::new("probe", "1.0");
    real.put_bytes(
        &Key::new(format!("{ROOT}{}", probe.filename())).unwrap(),
        probe.build().into(),
        PutOptions::default(),
    )
    .await
    .unwrap();
    let clean = quarry_index::Indexer::new(real.clone(), Default::default())
        .reindex(&RepoRoot::new(ROOT, &Default::default()).unwrap())
        .await
        .unwrap();
    assert_eq!(clean.attempts, 2, "{clean:?}");
    let counting = Arc::new(quarry_store::CountingStore::new(real.clone()));
    let again = quarry_index::Indexer::new(counting.clone(), Default::default())
        .reindex(&RepoRoot::new(ROOT, &Default::default()).unwrap())
        .await
        .unwrap();
    // s3s-fs lists without ETags; files are still recognized (size and time), not re-read:
    // the reads are the root's manifest and its one project's state.
    assert!(again.added.is_empty() && counting.counts().get == 2, "{again:?} {}", counting.counts());
    let faulty = Arc::new(FaultyStore::new(real.clone(), move |_, _| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x.is_multiple_of(10).then(|| faults[(x / 10 % 3) as usize])
    }));
    let handler = Handler::new(Faulty(faulty.clone()));

    // Six uploads, each announced once; a failed message is redelivered until it succeeds.
    let mut redeliveries = 0;
    for i in 0..6 {
        let spec = WheelSpec::new(&format!("flaky-{i}"), "1.0");
        let key = format!("{ROOT}{}", spec.filename());
        real.put_bytes(&Key::new(key.as_str()).unwrap(), spec.build().into(), PutOptions::default()).await.unwrap();
        let mut delivered = false;
        for _ in 0..60 {
            let answer = handler.handle(sqs_event(&format!("m{i}"), &key)).await.expect("an SQS answer");
            if answer["batchItemFailures"].as_array().is_some_and(Vec::is_empty) {
                delivered = true;
                break;
            }
            assert_eq!(answer["batchItemFailures"][0]["itemIdentifier"], format!("m{i}"), "{answer}");
            redeliveries += 1;
            assert_no_dangling_links(real.as_ref(), &format!("after a failed delivery of m{i}")).await;
        }
        assert!(delivered, "m{i} never went through");
    }
    let kinds: std::collections::BTreeSet<String> = faulty
        .injected()
        .iter()
        .map(|(_, _, f)| format!("{f:?}").split('(').next().unwrap_or_default().to_owned())
        .collect();
    assert!(redeliveries > 0, "no fault ever failed a delivery");
    assert_eq!(kinds.len(), 3, "{kinds:?}");
    let report =
        quarry_index::check(real.as_ref(), &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default())
            .await
            .unwrap();
    assert!(report.is_clean() && report.files == 7, "{report}");

    // A crash after the pages went out and before the state was committed.
    faulty.heal();
    // (A pip root's state is its manifest and one object per project under `.quarry-index/`.)
    faulty.set_rule(|op, key| {
        let state = key.ends_with(quarry_index::STATE_NAME) || key.contains(quarry_index::PROJECTS_DIR);
        (op == Op::Put && state).then_some(Fault::Crash)
    });
    let spec = WheelSpec::new("crashed", "1.0");
    let key = format!("{ROOT}{}", spec.filename());
    real.put_bytes(&Key::new(key.as_str()).unwrap(), spec.build().into(), PutOptions::default()).await.unwrap();
    let answer = handler.handle(sqs_event("crash", &key)).await.unwrap();
    assert_eq!(answer["batchItemFailures"][0]["itemIdentifier"], "crash", "{answer}");
    assert_no_dangling_links(real.as_ref(), "after the crash").await;
    let report =
        quarry_index::check(real.as_ref(), &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default())
            .await
            .unwrap();
    assert!(!report.is_clean(), "the crash left the state behind the listing: {report}");

    // The process is gone; `quarry index` (a backfill, or the next event) converges.
    let keys = server.clone_credentials();
    let mut index = tokio::process::Command::new(quarry_bin());
    index
        .args(["index", &format!("s3://{BUCKET}/"), "--prefix", ROOT])
        .env("AWS_ENDPOINT_URL", &server.endpoint)
        .env("AWS_ACCESS_KEY_ID", &keys.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &keys.secret_key)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true");
    let out = run(index, Duration::from_secs(120)).await;
    assert_success(&out, "quarry index after the crash");
    let report =
        quarry_index::check(real.as_ref(), &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default())
            .await
            .unwrap();
    assert!(report.is_clean() && report.files == 8, "{report}");
    server.stop().await;
}

/// The SDK's own retries on a real wire: the first connections to the server are answered
/// with 503 SlowDown, 500 InternalError and a dropped connection; `quarry upload` and
/// `quarry index` still succeed, and the root audits clean.
#[tokio::test(flavor = "multi_thread")]
async fn sdk_retries_ride_out_5xx_slowdown_and_resets() {
    use quarry_tests::proxy::{ConnFault, FaultProxy};
    let server = S3Server::start_s3s_fs().await;
    let client = s3_client(&server);
    client.create_bucket().bucket(BUCKET).send().await.expect("create bucket");
    let plan = vec![ConnFault::SlowDown, ConnFault::InternalError, ConnFault::Reset, ConnFault::SlowDown];
    let proxy = FaultProxy::start(&server.endpoint, plan).await;
    let keys = server.clone_credentials();
    let quarry = |args: &[&str]| {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(args)
            .env("AWS_ENDPOINT_URL", &proxy.endpoint)
            .env("AWS_ACCESS_KEY_ID", &keys.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &keys.secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("GITHUB_OUTPUT")
            .env_remove("GITHUB_STEP_SUMMARY");
        cmd
    };
    let tmp = tempfile::tempdir().unwrap();
    let wheel = WheelSpec::new("retried", "1.0").write_to(tmp.path());
    let to = format!("s3://{BUCKET}/{ROOT}");
    let out = run(quarry(&["upload", "--to", &to, wheel.to_str().unwrap()]), Duration::from_secs(120)).await;
    assert_success(&out, "quarry upload through the faulty proxy");
    let out = run(quarry(&["index", &format!("s3://{BUCKET}/")]), Duration::from_secs(120)).await;
    assert_success(&out, "quarry index through the faulty proxy");
    assert_eq!(proxy.faults_served(), 4, "every planned fault was served");
    let real: Arc<dyn Store> = Arc::new(S3Store::from_client(s3_client(&server), BUCKET, ""));
    let report =
        quarry_index::check(real.as_ref(), &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default())
            .await
            .unwrap();
    assert!(report.is_clean() && report.files == 1, "{report}");
    server.stop().await;
}
