//! The Lambda's configured layout: read at init from a `quarry.toml` object in the bucket
//! (`QUARRY_LAYOUT_KEY`), so that channel roots (`v2/{family}/`, `v3/packages/…`) are indexed
//! from S3 events like run roots are; the handler carries it.

use std::sync::Arc;

use quarry_lambda_indexer::{Handler, Stores, load_layout};
use quarry_store::{Key, MemoryStore, PutOptions, Store, StoreExt};
use quarry_tests::WheelSpec;
use serde_json::Value;

struct Bucket(Arc<MemoryStore>);

impl Stores for Bucket {
    fn for_bucket(&self, _: &str) -> Arc<dyn Store> {
        self.0.clone()
    }
}

fn s3_put(bucket: &str, key: &str) -> Value {
    let path = format!("{}/tests/events/s3-put.json", env!("CARGO_MANIFEST_DIR"));
    let mut event: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut record = event["Records"][0].clone();
    record["s3"]["bucket"]["name"] = bucket.into();
    record["s3"]["object"]["key"] = key.into();
    event["Records"] = Value::Array(vec![record]);
    event
}

#[tokio::test]
async fn channel_roots_from_a_layout_object_in_the_bucket_are_indexed() {
    let store = Arc::new(MemoryStore::default());
    let layout = "[layout]\npreset = \"therock-release\"\n";
    store.put_bytes(&Key::new("quarry.toml").unwrap(), layout.into(), PutOptions::default()).await.unwrap();
    let loaded = load_layout(None, Some("quarry.toml"), Some(store.as_ref() as &dyn Store)).await.unwrap();
    assert_eq!(loaded.roots.len(), 5);

    let wheel = WheelSpec::new("rocm-sdk-libraries-gfx94X-dcgpu", "7.10.0");
    let key = format!("v2/gfx94X-dcgpu/{}", wheel.filename());
    store.put_bytes(&Key::new(&key).unwrap(), wheel.build().into(), PutOptions::default()).await.unwrap();
    let handler = Handler::new(Bucket(store.clone())).with_layout(Arc::new(loaded));
    let answer = handler.handle(s3_put("therock-nightly", &key)).await.unwrap();
    assert_eq!(answer["reindexed"], serde_json::json!(["therock-nightly/v2/gfx94X-dcgpu/"]), "{answer}");
    let project = Key::new("v2/gfx94X-dcgpu/simple/rocm-sdk-libraries-gfx94x-dcgpu/index.html").unwrap();
    let (_, page) = store.get_bytes(&project, 1 << 20).await.unwrap();
    assert!(String::from_utf8_lossy(&page).contains(&wheel.filename()));
    // A channel root has no find-links page unless its rule asks for one.
    let find_links = store.head(&Key::new("v2/gfx94X-dcgpu/index.html").unwrap()).await;
    assert!(find_links.is_err_and(|e| e.is_not_found()), "a find-links page was written");
}

#[tokio::test]
async fn a_bad_inline_layout_fails_naming_the_line() {
    let text = "[layout]\nruns = true\n[[layout.root]]\nprefix = \"v2/{family}/\"\nkind = \"npm\"\n";
    let err = load_layout(Some(text), Some("quarry.toml"), None).await.unwrap_err();
    assert!(err.starts_with("QUARRY_LAYOUT: layout config line 5: unknown variant `npm`"), "{err}");
}
