//! The handler fed real event JSON (S3 notifications direct, through SQS and SNS, and from
//! EventBridge) against in-memory stores: what lands is indexed, what is not a package is left
//! alone, and one bad record never fails the batch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use quarry_lambda_indexer::{Handler, Stores};
use quarry_store::conformance::NoConditionalWrites;
use quarry_store::{Key, MemoryStore, PutOptions, Store, StoreExt};
use quarry_tests::WheelSpec;
use serde_json::Value;

/// One in-memory store per bucket; the bucket `unsafe-bucket` cannot do conditional writes.
#[derive(Default)]
struct Buckets(Mutex<HashMap<String, Arc<dyn Store>>>);

impl Stores for Buckets {
    fn for_bucket(&self, bucket: &str) -> Arc<dyn Store> {
        let mut map = self.0.lock().unwrap();
        map.entry(bucket.to_owned())
            .or_insert_with(|| {
                if bucket == "unsafe-bucket" {
                    Arc::new(NoConditionalWrites::default()) as Arc<dyn Store>
                } else {
                    Arc::new(MemoryStore::default())
                }
            })
            .clone()
    }
}

fn event(name: &str) -> Value {
    let path = format!("{}/tests/events/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

async fn land(store: &dyn Store, root: &str, spec: &WheelSpec) {
    let key = Key::new(format!("{root}{}", spec.filename())).unwrap();
    store.put_bytes(&key, spec.build().into(), PutOptions::default()).await.unwrap();
}

async fn page(store: &dyn Store, key: &str) -> String {
    let (_, body) = store.get_bytes(&Key::new(key).unwrap(), 1 << 24).await.unwrap();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test]
async fn s3_notifications_index_what_landed() {
    let handler = Handler::new(Buckets::default());
    let store = handler_store(&handler, "therock-ci-artifacts");
    land(store.as_ref(), "12345678901-linux/python/", &WheelSpec::new("rocm-sdk-core", "7.10.0rc20251124+rocm7.10"))
        .await;
    land(store.as_ref(), "python/gfx94X-dcgpu/", &WheelSpec::new("legacy-pkg", "1.0")).await;

    let answer = handler.handle(event("s3-put.json")).await.unwrap();
    assert_eq!(
        answer["reindexed"],
        serde_json::json!([
            "therock-ci-artifacts/12345678901-linux/python/",
            "therock-ci-artifacts/python/gfx94X-dcgpu/"
        ])
    );
    assert_eq!(answer["ignored"], 3, "{answer}");
    assert_eq!(answer["skipped"].as_array().unwrap().len(), 1, "{answer}");
    let find_links = page(store.as_ref(), "12345678901-linux/python/index.html").await;
    assert!(find_links.contains("rocm_sdk_core-7.10.0rc20251124%2Brocm7.10-py3-none-any.whl#sha256="), "{find_links}");
    assert!(page(store.as_ref(), "python/gfx94X-dcgpu/simple/legacy-pkg/index.json").await.contains("legacy_pkg-1.0"));

    // Delivered again (at-least-once), nothing changes.
    let before = page(store.as_ref(), "12345678901-linux/python/.quarry-index.json").await;
    handler.handle(event("s3-put.json")).await.unwrap();
    assert_eq!(page(store.as_ref(), "12345678901-linux/python/.quarry-index.json").await, before);
}

#[tokio::test]
async fn deletions_remove_files_from_the_pages() {
    let handler = Handler::new(Buckets::default());
    let store = handler_store(&handler, "therock-ci-artifacts");
    let gone = WheelSpec::new("legacy-gone", "1.0");
    land(store.as_ref(), "12345678901-linux/python/", &gone).await;
    land(store.as_ref(), "12345678901-linux/python/", &WheelSpec::new("kept", "1.0")).await;
    handler.handle(event("s3-put.json")).await.unwrap();
    assert!(page(store.as_ref(), "12345678901-linux/python/index.html").await.contains(&gone.filename()));

    store.delete(&Key::new(format!("12345678901-linux/python/{}", gone.filename())).unwrap()).await.unwrap();
    handler.handle(event("s3-delete.json")).await.unwrap();
    let find_links = page(store.as_ref(), "12345678901-linux/python/index.html").await;
    assert!(!find_links.contains(&gone.filename()));
    assert!(find_links.contains("kept-1.0"));
    assert!(store.head(&Key::new("12345678901-linux/python/simple/legacy-gone/index.html").unwrap()).await.is_err());
}

#[tokio::test]
async fn sqs_batches_report_only_the_failed_messages() {
    let handler = Handler::new(Buckets::default());
    let store = handler_store(&handler, "therock-ci-artifacts");
    land(store.as_ref(), "777-linux/python/", &WheelSpec::new("queued-pkg", "1.0")).await;
    land(store.as_ref(), "777-linux/python/", &WheelSpec::new("via-sns", "2.0")).await;
    let unsafe_store = handler_store(&handler, "unsafe-bucket");
    land(unsafe_store.as_ref(), "777-linux/python/", &WheelSpec::new("queued-pkg", "1.0")).await;

    let answer = handler.handle(event("sqs-batch.json")).await.unwrap();
    // Only message 4 (a bucket whose store cannot do conditional writes) failed; the test
    // event and the garbage body are not retried.
    assert_eq!(
        answer,
        serde_json::json!({"batchItemFailures": [{"itemIdentifier": "059f36b4-87a3-44ab-83d2-661970000004"}]})
    );
    let find_links = page(store.as_ref(), "777-linux/python/index.html").await;
    assert!(find_links.contains("queued_pkg-1.0") && find_links.contains("via_sns-2.0"), "{find_links}");
}

#[tokio::test]
async fn eventbridge_object_created() {
    let handler = Handler::new(Buckets::default());
    let store = handler_store(&handler, "therock-ci-artifacts");
    land(store.as_ref(), "888-linux/python/", &WheelSpec::new("bridged", "1.0")).await;
    let answer = handler.handle(event("eventbridge-created.json")).await.unwrap();
    assert_eq!(answer["reindexed"], serde_json::json!(["therock-ci-artifacts/888-linux/python/"]));
    assert!(page(store.as_ref(), "888-linux/python/simple/bridged/index.html").await.contains("bridged-1.0"));
}

#[tokio::test]
async fn unknown_events_are_refused_and_failures_are_retryable() {
    let handler = Handler::new(Buckets::default());
    let err = handler.handle(serde_json::json!({"hello": "world"})).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    let unsafe_store = handler_store(&handler, "unsafe-bucket");
    land(unsafe_store.as_ref(), "1-linux/python/", &WheelSpec::new("x", "1.0")).await;
    let mut put = event("eventbridge-created.json");
    put["detail"]["bucket"]["name"] = "unsafe-bucket".into();
    put["detail"]["object"]["key"] = "1-linux/python/x-1.0-py3-none-any.whl".into();
    let err = handler.handle(put).await.unwrap_err();
    assert!(err.is_retryable());
    assert!(err.to_string().contains("cannot do conditional writes"), "{err}");
}

fn handler_store(handler: &Handler<Buckets>, bucket: &str) -> Arc<dyn Store> {
    // The same store the handler will be given for that bucket.
    handler.stores().for_bucket(bucket)
}

/// An S3 notification with one record per key (keys form-encoded as S3 sends them).
fn s3_records(bucket: &str, keys: &[&str]) -> Value {
    let mut event = event("s3-put.json");
    let template = event["Records"][0].clone();
    event["Records"] = keys
        .iter()
        .map(|k| {
            let mut r = template.clone();
            r["s3"]["bucket"]["name"] = (*bucket).into();
            r["s3"]["object"]["key"] = (*k).into();
            r
        })
        .collect();
    event
}

#[tokio::test]
async fn bad_records_are_skipped_with_a_reason_and_never_fail_the_batch() {
    let handler = Handler::new(Buckets::default());
    let store = handler_store(&handler, "ci");
    let good = WheelSpec::new("good", "1.0");
    land(store.as_ref(), "5-linux/python/", &good).await;
    // A truncated upload: the first half of a wheel.
    let truncated = WheelSpec::new("truncated", "1.0");
    let bytes = truncated.build();
    let key = Key::new(format!("5-linux/python/{}", truncated.filename())).unwrap();
    store.put_bytes(&key, bytes[..bytes.len() / 2].to_vec().into(), PutOptions::default()).await.unwrap();
    let keys = [
        "5-linux%2Fpython%2F..%2F..%2Fescape-1.0-py3-none-any.whl",
        "",
        "5-linux/python//empty-segment-1.0-py3-none-any.whl",
        "5-linux/python/notes.txt",
        "5-linux/python/truncated-1.0-py3-none-any.whl",
        "5-linux/python/good-1.0-py3-none-any.whl",
        "5-linux/python/never-uploaded-1.0-py3-none-any.whl",
    ];
    let answer = handler.handle(s3_records("ci", &keys)).await.unwrap();
    assert_eq!(answer["reindexed"], serde_json::json!(["ci/5-linux/python/"]), "{answer}");
    let skipped: Vec<String> =
        answer["skipped"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect();
    assert_eq!(skipped.len(), 3, "{skipped:?}");
    assert!(skipped.iter().any(|s| s.contains("..")), "{skipped:?}");
    assert_eq!(answer["ignored"], 1, "{answer}");
    let find_links = page(store.as_ref(), "5-linux/python/index.html").await;
    assert!(find_links.contains("good-1.0") && !find_links.contains("truncated-1.0"), "{find_links}");
    let root = quarry_index::RepoRoot::new("5-linux/python/", &Default::default()).unwrap();
    let state = quarry_index::read_state(store.as_ref(), &root).await.unwrap().unwrap();
    assert!(state.rejected.contains_key("truncated-1.0-py3-none-any.whl"), "{state:?}");

    // The same records through SQS, one per message: no message is failed.
    let mut sqs = event("sqs-batch.json");
    let template = sqs["Records"][0].clone();
    sqs["Records"] = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut m = template.clone();
            m["messageId"] = format!("bad-{i}").into();
            m["body"] = s3_records("ci", &[k]).to_string().into();
            m
        })
        .collect();
    let answer = handler.handle(sqs).await.unwrap();
    assert_eq!(answer, serde_json::json!({"batchItemFailures": []}));
}

#[tokio::test]
async fn artifacts_get_a_run_listing_with_sizes_and_sha256() {
    let handler = Handler::new(Buckets::default());
    let store = handler_store(&handler, "ci");
    let archive = b"zstd archive bytes".to_vec();
    let sha = quarry_tests::sha256_hex(&archive);
    for (key, body) in [
        ("6-linux/blas_lib_gfx942.tar.zst", archive.clone()),
        ("6-linux/blas_lib_gfx942.tar.zst.sha256sum", format!("{sha}  blas_lib_gfx942.tar.zst\n").into_bytes()),
        ("6-linux/logs/gfx942/build.log", b"ok".to_vec()),
    ] {
        store.put_bytes(&Key::new(key).unwrap(), body.into(), PutOptions::default()).await.unwrap();
    }
    let answer = handler
        .handle(s3_records(
            "ci",
            &[
                "6-linux/blas_lib_gfx942.tar.zst",
                "6-linux/blas_lib_gfx942.tar.zst.sha256sum",
                "6-linux/logs/gfx942/build.log",
            ],
        ))
        .await
        .unwrap();
    assert_eq!(
        answer["reindexed"],
        serde_json::json!(["ci/6-linux/index.html", "ci/6-linux/logs/gfx942/index.html", "ci/6-linux/logs/index.html"]),
        "{answer}"
    );
    let listing = page(store.as_ref(), "6-linux/index.html").await;
    assert!(listing.contains(&format!(">{sha}<")), "{listing}");
    assert!(listing.contains(r#"<a href="logs/index.html">logs/</a>"#), "{listing}");
    assert!(listing.contains("18 B"), "{listing}");
    assert!(
        page(store.as_ref(), "6-linux/logs/index.html").await.contains(r#"<a href="gfx942/index.html">gfx942/</a>"#)
    );
    // The listing's own writes are not events for it.
    let echo = handler.handle(s3_records("ci", &["6-linux/index.html", "6-linux/.quarry-listing.json"])).await.unwrap();
    assert_eq!(echo["reindexed"], serde_json::json!([]));
}

#[tokio::test]
async fn eventbridge_events_through_sqs_as_the_template_delivers_them() {
    let handler = Handler::new(Buckets::default());
    let store = handler_store(&handler, "therock-ci-artifacts");
    land(store.as_ref(), "888-linux/python/", &WheelSpec::new("bridged", "1.0")).await;
    let mut sqs = event("sqs-batch.json");
    let mut message = sqs["Records"][0].clone();
    message["messageId"] = "eb-1".into();
    message["body"] = event("eventbridge-created.json").to_string().into();
    let mut not_s3 = message.clone();
    not_s3["messageId"] = "eb-2".into();
    let mut other = event("eventbridge-created.json");
    other["source"] = "aws.ec2".into();
    not_s3["body"] = other.to_string().into();
    sqs["Records"] = serde_json::json!([message, not_s3]);
    let answer = handler.handle(sqs).await.unwrap();
    // The EC2 event is dropped (retrying cannot help), not failed.
    assert_eq!(answer, serde_json::json!({"batchItemFailures": []}));
    assert!(page(store.as_ref(), "888-linux/python/index.html").await.contains("bridged-1.0"));
}

/// Stores rooted at a key prefix, spelled as `QUARRY_KEY_PREFIX` was set (with or without its
/// trailing `/`).
struct Prefixed(Arc<MemoryStore>, &'static str);

impl Stores for Prefixed {
    fn for_bucket(&self, _: &str) -> Arc<dyn Store> {
        self.0.clone()
    }
    fn key_prefix(&self) -> &str {
        self.1
    }
}

/// Keys are taken relative to the prefix however it was spelled (`ROCm-TheRock` once skipped
/// every event and reported success, and indexed `ROCm-TheRockX/…` as a root); a key outside
/// it fails its record instead of being dropped or acted on.
#[tokio::test]
async fn keys_are_taken_relative_to_the_key_prefix() {
    for spelled in ["ROCm-TheRock/", "ROCm-TheRock", "/ROCm-TheRock/"] {
        let handler = Handler::new(Prefixed(Arc::default(), spelled));
        let store: Arc<dyn Store> = handler.stores().0.clone();
        land(store.as_ref(), "12345-linux/python/", &WheelSpec::new("prefixed", "1.0")).await;
        let inside = "ROCm-TheRock/12345-linux/python/prefixed-1.0-py3-none-any.whl";
        let answer = handler.handle(s3_records("therock-artifacts-external", &[inside])).await.unwrap();
        assert_eq!(
            answer["reindexed"],
            serde_json::json!(["therock-artifacts-external/12345-linux/python/"]),
            "{spelled}"
        );
        assert!(page(store.as_ref(), "12345-linux/python/index.html").await.contains("prefixed-1.0"), "{spelled}");

        land(store.as_ref(), "X/1-linux/python/", &WheelSpec::new("neighbour", "1.0")).await;
        for outside in [
            "ROCm-TheRockX/1-linux/python/neighbour-1.0-py3-none-any.whl",
            "elsewhere/1-linux/python/x-1.0-py3-none-any.whl",
        ] {
            let err = handler.handle(s3_records("therock-artifacts-external", &[inside, outside])).await.unwrap_err();
            assert!(err.to_string().contains("outside the key prefix \"ROCm-TheRock/\""), "{spelled} {outside}: {err}");
            let stored = store.list_all("X/", false).await.unwrap();
            assert!(stored.objects.iter().all(|o| !o.key.as_str().ends_with("index.html")), "{outside} was indexed");
        }
        // Through SQS the record's message fails alone.
        let mut sqs = event("sqs-batch.json");
        let template = sqs["Records"][0].clone();
        let message = |id: &str, key: &str| {
            let mut m = template.clone();
            m["messageId"] = id.into();
            m["body"] = s3_records("therock-artifacts-external", &[key]).to_string().into();
            m
        };
        sqs["Records"] = serde_json::json!([
            message("in", inside),
            message("out", "ROCm-TheRockX/1-linux/python/neighbour-1.0-py3-none-any.whl")
        ]);
        let answer = handler.handle(sqs).await.unwrap();
        assert_eq!(answer, serde_json::json!({"batchItemFailures": [{"itemIdentifier": "out"}]}), "{spelled}");
    }
}

/// A function that serves one bucket (`QUARRY_BUCKET`) fails a record naming another.
#[tokio::test]
async fn events_for_another_bucket_fail_their_record() {
    let handler = Handler::new(Buckets::default()).with_bucket(Some("ci".into()));
    let other = handler_store(&handler, "someone-elses");
    land(other.as_ref(), "5-linux/python/", &WheelSpec::new("foreign", "1.0")).await;
    let err = handler
        .handle(s3_records("someone-elses", &["5-linux/python/foreign-1.0-py3-none-any.whl"]))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("this function serves \"ci\""), "{err}");
    assert!(
        other
            .list_all("5-linux/python/", false)
            .await
            .unwrap()
            .objects
            .iter()
            .all(|o| !o.key.as_str().ends_with(".html"))
    );
    let mine = handler_store(&handler, "ci");
    land(mine.as_ref(), "5-linux/python/", &WheelSpec::new("mine", "1.0")).await;
    handler.handle(s3_records("ci", &["5-linux/python/mine-1.0-py3-none-any.whl"])).await.unwrap();
    assert!(page(mine.as_ref(), "5-linux/python/index.html").await.contains("mine-1.0"));
}

/// The audit log's objects (`.quarry-audit/…`, written by `quarry serve` and the CLI beside
/// every write) are no package and no listing: an event for one (a misrouted notification, a
/// broader rule) is ignored, and nothing is indexed or written for it.
#[tokio::test]
async fn audit_log_objects_are_ignored() {
    use quarry_index::audit_log::{self, AuditAction, AuditEntry, AuditOutcome};
    let handler = Handler::new(Buckets::default());
    let store = handler_store(&handler, "ci");
    let spec = WheelSpec::new("audited", "1.0");
    land(store.as_ref(), "7-linux/python/", &spec).await;
    let file = format!("7-linux/python/{}", spec.filename());
    let mut keys = Vec::new();
    for (key, outcome) in [(file.as_str(), AuditOutcome::Ok), ("7-", AuditOutcome::Ok), ("../x", AuditOutcome::Refused)]
    {
        let entry = AuditEntry::now(AuditAction::Upload, "ci", key, outcome);
        keys.push(audit_log::append(store.as_ref(), &entry).await.unwrap().to_string());
    }
    assert!(keys.iter().all(|k| k.starts_with(".quarry-audit/")), "{keys:?}");
    let before = store.list_all("", false).await.unwrap().objects.len();
    let shown: Vec<&str> = keys.iter().map(String::as_str).collect();
    let answer = handler.handle(s3_records("ci", &shown)).await.unwrap();
    assert_eq!(answer["reindexed"], serde_json::json!([]), "{answer}");
    assert_eq!(answer["ignored"], keys.len(), "{answer}");
    assert_eq!(answer["skipped"], serde_json::json!([]), "{answer}");
    assert_eq!(store.list_all("", false).await.unwrap().objects.len(), before, "nothing written");
}
