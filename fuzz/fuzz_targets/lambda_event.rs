//! The Lambda's event parsing and classification: any JSON payload through `Handler::handle`
//! against empty in-memory stores.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use quarry_lambda_indexer::{Handler, Stores};
use quarry_store::{MemoryStore, Store};

struct Fresh;

impl Stores for Fresh {
    fn for_bucket(&self, _bucket: &str) -> Arc<dyn Store> {
        Arc::new(MemoryStore::default())
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(payload) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let _ = runtime.block_on(Handler::new(Fresh).handle(payload));
    if let Ok(text) = std::str::from_utf8(data) {
        let key = quarry_lambda_indexer::decode_key(text);
        let _ = quarry_lambda_indexer::classify(&key, &Default::default());
    }
});
