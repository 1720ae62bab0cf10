//! A wrapper that counts every store operation, for benchmarks and cost assertions.

use std::sync::Arc;

use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{
    ByteRange, ByteStream, GetObject, Key, ListOptions, ListPage, ObjectMeta, PutOptions, PutResult, Result, Store,
};

#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn Store>,
    head: AtomicU64,
    get: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    delete: AtomicU64,
}

/// Operation counts so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpCounts {
    pub head: u64,
    pub get: u64,
    pub put: u64,
    pub list: u64,
    pub delete: u64,
}

impl OpCounts {
    pub fn total(&self) -> u64 {
        self.head + self.get + self.put + self.list + self.delete
    }
}

impl std::fmt::Display for OpCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ops (list {}, head {}, get {}, put {}, delete {})",
            self.total(),
            self.list,
            self.head,
            self.get,
            self.put,
            self.delete
        )
    }
}

impl CountingStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            head: AtomicU64::new(0),
            get: AtomicU64::new(0),
            put: AtomicU64::new(0),
            list: AtomicU64::new(0),
            delete: AtomicU64::new(0),
        }
    }

    pub fn counts(&self) -> OpCounts {
        OpCounts {
            head: self.head.load(Ordering::Relaxed),
            get: self.get.load(Ordering::Relaxed),
            put: self.put.load(Ordering::Relaxed),
            list: self.list.load(Ordering::Relaxed),
            delete: self.delete.load(Ordering::Relaxed),
        }
    }
}

#[async_trait::async_trait]
impl Store for CountingStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn conditional_writes(&self) -> crate::ConditionalWrites {
        self.inner.conditional_writes()
    }
    async fn head(&self, key: &Key) -> Result<ObjectMeta> {
        self.head.fetch_add(1, Ordering::Relaxed);
        self.inner.head(key).await
    }
    /// Counted as the `HEAD` it stands for, when the store could answer.
    fn unchanged(&self, key: &Key, etag: &str) -> Option<bool> {
        let answer = self.inner.unchanged(key, etag);
        if answer.is_some() {
            self.head.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }
    async fn get(&self, key: &Key, range: Option<ByteRange>) -> Result<GetObject> {
        self.get.fetch_add(1, Ordering::Relaxed);
        self.inner.get(key, range).await
    }
    async fn put(&self, key: &Key, body: ByteStream, options: PutOptions) -> Result<PutResult> {
        self.put.fetch_add(1, Ordering::Relaxed);
        self.inner.put(key, body, options).await
    }
    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage> {
        self.list.fetch_add(1, Ordering::Relaxed);
        self.inner.list(prefix, options).await
    }
    async fn delete(&self, key: &Key) -> Result<()> {
        self.delete.fetch_add(1, Ordering::Relaxed);
        self.inner.delete(key).await
    }
    async fn put_many(&self, items: Vec<(Key, Bytes, PutOptions)>) -> Vec<Result<PutResult>> {
        self.put.fetch_add(items.len() as u64, Ordering::Relaxed);
        self.inner.put_many(items).await
    }
    async fn get_whole(&self, key: &Key, limit: u64) -> Result<(ObjectMeta, Bytes)> {
        self.get.fetch_add(1, Ordering::Relaxed);
        self.inner.get_whole(key, limit).await
    }
    async fn head_and_read(&self, key: &Key, keep_up_to: u64) -> Result<(ObjectMeta, Option<Bytes>)> {
        self.head.fetch_add(1, Ordering::Relaxed);
        let (meta, body) = self.inner.head_and_read(key, keep_up_to).await?;
        if body.is_some() {
            self.get.fetch_add(1, Ordering::Relaxed);
        }
        Ok((meta, body))
    }
    async fn head_and_read_many(&self, keys: Vec<Key>, keep_up_to: u64) -> Vec<Result<(ObjectMeta, Option<Bytes>)>> {
        // Counted as `head_and_read` counts each key: a HEAD, and a GET for each body read.
        self.head.fetch_add(keys.len() as u64, Ordering::Relaxed);
        let results = self.inner.head_and_read_many(keys, keep_up_to).await;
        let bodies = results.iter().filter(|r| matches!(r, Ok((_, Some(_))))).count();
        self.get.fetch_add(bodies as u64, Ordering::Relaxed);
        results
    }
}
