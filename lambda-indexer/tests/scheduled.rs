//! The scheduled reconciliation's bounds: a tick that runs out of time stops between scopes,
//! each scope it reached consistent, and the next tick resumes where it stopped; a scheduled
//! event with no bucket configured is refused, not retried.

use std::sync::Arc;
use std::time::Instant;

use quarry_lambda_indexer::{Handler, Reconcile, Stores};
use quarry_store::{Key, MemoryStore, PutOptions, Store, StoreExt};
use quarry_tests::WheelSpec;
use serde_json::Value;

struct Bucket(Arc<MemoryStore>);

impl Stores for Bucket {
    fn for_bucket(&self, _: &str) -> Arc<dyn Store> {
        self.0.clone()
    }
}

fn scheduled() -> Value {
    let path = format!("{}/tests/events/scheduled.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn ticks_out_of_time_resume_where_they_stopped() {
    let store = Arc::new(MemoryStore::default());
    let runs = ["101-linux", "102-linux", "103-linux"];
    for run in runs {
        let spec = WheelSpec::new("tick", "1.0");
        let key = Key::new(format!("{run}/python/{}", spec.filename())).unwrap();
        store.put_bytes(&key, spec.build().into(), PutOptions::default()).await.unwrap();
    }
    let reconcile = Reconcile { bucket: "b".into(), recent_runs: 10 };
    let handler = Handler::new(Bucket(store.clone())).with_reconcile(Some(reconcile));
    let indexed = |run: &str| {
        let store = store.clone();
        let key = Key::new(format!("{run}/python/.quarry-index.json")).unwrap();
        async move { store.head(&key).await.is_ok() }
    };
    // Past its deadline, each tick reconciles one scope (at least one, so ticks progress).
    let mut seen = Vec::new();
    for (tick, run) in runs.iter().enumerate() {
        let answer = handler.handle_until(scheduled(), Some(Instant::now())).await.unwrap();
        assert_eq!(answer["reindexed"], serde_json::json!([format!("b/{run}/python/")]), "tick {tick}: {answer}");
        assert!(indexed(run).await, "{run} is consistent once reached");
        let next = runs.get(tick + 1).map(|r| format!("{r}/python/"));
        assert_eq!(answer.get("resume_at").and_then(Value::as_str), next.as_deref(), "{answer}");
        seen.push(run);
    }
    assert_eq!(seen.len(), 3);
    let cursor = Key::new(quarry_index::reconcile::CURSOR_KEY).unwrap();
    assert!(store.head(&cursor).await.is_err(), "the pass went round: no cursor left");
    // With time enough, one tick covers everything.
    let answer = handler.handle(scheduled()).await.unwrap();
    assert_eq!(answer["reindexed"].as_array().unwrap().len(), 3, "{answer}");
}

#[tokio::test]
async fn a_scheduled_event_without_a_bucket_is_a_bad_event() {
    let handler = Handler::new(Bucket(Arc::new(MemoryStore::default())));
    let error = handler.handle(scheduled()).await.unwrap_err();
    assert!(!error.is_retryable() && error.to_string().contains("QUARRY_BUCKET"), "{error}");
}
