//! The Lambda indexer's path end to end on a real S3 server with notifications (moto on
//! loopback): objects land → the bucket notifies an SQS queue → the test, standing in for the
//! Lambda service, drains the queue and invokes the real handler with those messages → pip
//! installs from the pages the handler wrote into the bucket. Then the race: 64 uploads into one
//! root, every event delivered twice in shuffled order to 8 concurrent invocations, 20 trials.
#![allow(clippy::print_stderr)] // per-trial figures for the test log

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use quarry_index::RepoRoot;
use quarry_lambda_indexer::{Handler, Stores};
use quarry_store::{ConditionalWrites, CountingStore, Key, PutOptions, S3Store, Store, StoreExt};
use quarry_tests::s3::{S3Server, SqsMessage, SqsQueue, notify_queue, s3_client};
use quarry_tests::{WheelSpec, assert_success, installed, pip_install};

const BUCKET: &str = "therock-ci-artifacts";

/// The bucket as the Lambda sees it. moto checks preconditions but not atomically, which the
/// store declares, so every commit is read back.
/// Counts the handler's requests.
struct Moto(Arc<CountingStore>);

impl Moto {
    fn new(client: aws_sdk_s3::Client) -> Self {
        let store = S3Store::from_client(client, BUCKET, "").with_conditional_writes(ConditionalWrites::Verify);
        Self(Arc::new(CountingStore::new(Arc::new(store))))
    }
}

impl Stores for Moto {
    fn for_bucket(&self, bucket: &str) -> Arc<dyn Store> {
        assert_eq!(bucket, BUCKET);
        self.0.clone()
    }
}

struct Setup {
    server: S3Server,
    client: aws_sdk_s3::Client,
    queue: SqsQueue,
    store: Arc<dyn Store>,
    handler: Arc<Handler<Moto>>,
}

/// Key suffixes the deployed notifications fire on (the indexer's own outputs end otherwise).
const PACKAGE_SUFFIXES: &[&str] = &[".whl", ".tar.gz", ".zip", ".yanked"];

async fn setup(suffixes: &[&str]) -> Setup {
    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    quarry_tests::s3::create_public_bucket(&client, BUCKET).await;
    let queue = SqsQueue::create(&server, "quarry-index-events").await;
    notify_queue(&client, BUCKET, &queue, suffixes).await;
    let handler = Arc::new(Handler::new(Moto::new(client.clone())));
    let store = handler.stores().for_bucket(BUCKET);
    Setup { server, client, queue, store, handler }
}

/// The keys (decoded) of every S3 record in an SQS message body.
fn record_keys(body: &str) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    value["Records"]
        .as_array()
        .map(|records| {
            records
                .iter()
                .filter_map(|r| r["s3"]["object"]["key"].as_str())
                .map(quarry_lambda_indexer::decode_key)
                .collect()
        })
        .unwrap_or_default()
}

/// Receive until `want` keys under `prefix` were notified (bounded), returning every message.
async fn drain(queue: &SqsQueue, prefix: &str, want: usize) -> Vec<SqsMessage> {
    let mut messages = Vec::new();
    let mut seen = BTreeSet::new();
    for _ in 0..200 {
        if seen.len() >= want {
            break;
        }
        for m in queue.receive(1).await {
            seen.extend(record_keys(&m.body).into_iter().filter(|k| k.starts_with(prefix)));
            messages.push(m);
        }
    }
    assert!(seen.len() >= want, "only {} of {want} notifications under {prefix} arrived", seen.len());
    messages
}

#[tokio::test(flavor = "multi_thread")]
async fn notifications_through_sqs_reach_the_handler_and_pip_installs() {
    // Every key notifies here, the indexer's own writes too: the handler must ignore those.
    let s = setup(&[]).await;
    // moto announces the new configuration with an s3:TestEvent first.
    let specs = [WheelSpec::new("rocm-sdk-core", "7.10.0rc20251124+rocm7.10"), WheelSpec::new("events-demo", "1.0")];
    for spec in &specs {
        let key = Key::new(format!("4242-linux/python/{}", spec.filename())).unwrap();
        s.store.put_bytes(&key, spec.build().into(), PutOptions::default()).await.unwrap();
    }
    let messages = drain(&s.queue, "4242-linux/python/", 2).await;
    assert!(messages.iter().any(|m| m.body.contains("s3:TestEvent")), "moto sent its test event");

    let answer = s.handler.handle(s.queue.lambda_event(&messages)).await.expect("handler answers");
    assert_eq!(answer["batchItemFailures"], serde_json::json!([]), "{answer}");
    for m in &messages {
        s.queue.delete(m).await;
    }
    let report = quarry_index::check(
        s.store.as_ref(),
        &RepoRoot::new("4242-linux/python/", &Default::default()).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    assert!(report.is_clean() && report.files == 2, "{report}");

    // The handler's own writes notify the queue too; handling them changes nothing.
    let echoes = drain(&s.queue, "4242-linux/python/index.html", 1).await;
    let answer = s.handler.handle(s.queue.lambda_event(&echoes)).await.unwrap();
    assert_eq!(answer["batchItemFailures"], serde_json::json!([]));

    let tmp = tempfile::tempdir().unwrap();
    let find_links = format!("{}/{BUCKET}/4242-linux/python/index.html", s.server.endpoint);
    let target = tmp.path().join("site");
    let out = pip_install(&["--no-index", "--find-links", &find_links, "rocm-sdk-core", "events-demo"], &target).await;
    assert_success(&out, "pip install from the bucket the handler indexed");
    assert_eq!(installed(&target), ["events_demo-1.0.dist-info", "rocm_sdk_core-7.10.0rc20251124+rocm7.10.dist-info"]);
    s.server.stop().await;
}

/// A small deterministic generator for shuffling and batch sizes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self, below: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % below as u64) as usize
    }
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.next(i + 1));
        }
    }
}

const UPLOADS: usize = 64;
const HANDLERS: usize = 8;
/// Trials in the suite; `bench/race_soak.sh` runs 100 through `QUARRY_RACE_TRIALS`. Each
/// trial's 64 new projects are 64 project events (16 s a trial on moto in a debug build).
const TRIALS: u64 = 8;
/// Pause between mid-flight audits (each reads every page of the root).
const AUDIT_EVERY: Duration = Duration::from_secs(2);

/// One trial: uploads and handler invocations overlap; a watcher audits the pages while they
/// change. Returns the number of handler invocations.
async fn race_trial(s: &Setup, trial: u64) -> usize {
    let prefix = format!("{}-linux/python/", 9000 + trial);
    let root = RepoRoot::new(&prefix, &Default::default()).unwrap();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15 ^ (trial + 1));

    let uploads = futures_util::stream::iter(0..UPLOADS)
        .map(|i| {
            let store = s.store.clone();
            let key = Key::new(format!("{prefix}{}", WheelSpec::new(&format!("racer-{i}"), "1.0").filename())).unwrap();
            async move {
                let body = WheelSpec::new(&format!("racer-{i}"), "1.0").build();
                store.put_bytes(&key, body.into(), PutOptions::default()).await.unwrap();
            }
        })
        .buffer_unordered(UPLOADS)
        .collect::<Vec<()>>();

    // The Lambda service: messages go out as they arrive, in batches, while uploads are still
    // landing; every message is delivered a second time later, all of those shuffled; at most
    // HANDLERS invocations run at once.
    let deliver = async {
        let slots = Arc::new(tokio::sync::Semaphore::new(HANDLERS));
        let mut running = tokio::task::JoinSet::new();
        let invoke = |running: &mut tokio::task::JoinSet<serde_json::Value>, batch: Vec<SqsMessage>| {
            let (handler, event, slots) = (s.handler.clone(), s.queue.lambda_event(&batch), slots.clone());
            running.spawn(async move {
                let _slot = slots.acquire_owned().await.unwrap();
                handler.handle(event).await.unwrap()
            });
        };
        let mut messages = Vec::new();
        let mut seen = BTreeSet::new();
        let mut invocations = 0;
        for _ in 0..200 {
            if seen.len() >= UPLOADS {
                break;
            }
            let batch = s.queue.receive(1).await;
            for m in &batch {
                seen.extend(record_keys(&m.body).into_iter().filter(|k| k.starts_with(&prefix)));
            }
            if !batch.is_empty() {
                messages.extend(batch.iter().cloned());
                invoke(&mut running, batch);
                invocations += 1;
            }
        }
        assert_eq!(seen.len(), UPLOADS, "trial {trial}: notifications missing");
        let mut again = messages.clone();
        rng.shuffle(&mut again);
        while !again.is_empty() {
            let n = (1 + rng.next(10)).min(again.len());
            invoke(&mut running, again.drain(..n).collect());
            invocations += 1;
        }
        while let Some(answer) = running.join_next().await {
            let answer = answer.unwrap();
            assert_eq!(answer["batchItemFailures"], serde_json::json!([]), "trial {trial}: {answer}");
        }
        for m in &messages {
            s.queue.delete(m).await;
        }
        invocations
    };

    // While all that runs, pages must never point at a missing object.
    let done = std::sync::atomic::AtomicBool::new(false);
    let watch = async {
        let mut audits = 0;
        let mut next = std::time::Instant::now();
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            if std::time::Instant::now() >= next {
                let report = quarry_index::check(s.store.as_ref(), &root, &Default::default()).await.unwrap();
                let dangling = report.dangling();
                assert!(dangling.is_empty(), "trial {trial}, mid-flight: {dangling:?}");
                audits += 1;
                next = std::time::Instant::now() + AUDIT_EVERY;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        audits
    };
    let work = async {
        let (_, invocations) = tokio::join!(uploads, deliver);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        invocations
    };
    let started = std::time::Instant::now();
    let before = s.handler.stores().0.counts();
    let (invocations, audits) = tokio::join!(work, watch);
    let after = s.handler.stores().0.counts();
    eprintln!(
        "trial {trial}: {invocations} invocations, {audits} audits, {:.1} s, {} store requests",
        started.elapsed().as_secs_f64(),
        after.total() - before.total()
    );

    let report = quarry_index::check(s.store.as_ref(), &root, &Default::default()).await.unwrap();
    assert!(report.is_clean(), "trial {trial}: {report}");
    assert_eq!(report.files, UPLOADS, "trial {trial}");
    invocations
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_uploads_and_duplicated_shuffled_events_converge() {
    let s = setup(PACKAGE_SUFFIXES).await;
    // Clear moto's s3:TestEvent.
    let _ = s.queue.receive(0).await;
    let trials = std::env::var("QUARRY_RACE_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(TRIALS);
    let started = std::time::Instant::now();
    let mut invocations = 0;
    for trial in 0..trials {
        invocations += race_trial(&s, trial).await;
    }
    eprintln!(
        "{trials} trials of {UPLOADS} uploads, {invocations} handler invocations ({HANDLERS} at once) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Every trial's pages are still whole at the end.
    for trial in 0..trials {
        let root = RepoRoot::new(&format!("{}-linux/python/", 9000 + trial), &Default::default()).unwrap();
        let report = quarry_index::check(s.store.as_ref(), &root, &Default::default()).await.unwrap();
        assert!(report.is_clean(), "{report}");
    }
    drop(s.client);
    s.server.stop().await;
}
