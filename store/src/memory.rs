//! An in-memory store for tests. ETags are content hashes plus a write generation.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::hashing::HashingBody;
use crate::{
    ByteRange, ByteStream, Condition, GetObject, Key, ListOptions, ListPage, ObjectMeta, PutOptions, PutResult, Result,
    Store, StoreError, bytes_stream, validate_prefix,
};

#[derive(Debug, Default)]
pub struct MemoryStore {
    objects: Mutex<BTreeMap<String, (ObjectMeta, Bytes)>>,
    generation: AtomicU64,
}

impl MemoryStore {
    fn objects(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (ObjectMeta, Bytes)>> {
        self.objects.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    fn describe(&self) -> String {
        "memory://".into()
    }

    async fn head(&self, key: &Key) -> Result<ObjectMeta> {
        self.objects().get(key.as_str()).map(|(m, _)| m.clone()).ok_or_else(|| StoreError::NotFound(key.to_string()))
    }

    fn unchanged(&self, key: &Key, etag: &str) -> Option<bool> {
        Some(self.objects().get(key.as_str()).is_some_and(|(m, _)| m.etag == etag))
    }

    async fn get(&self, key: &Key, range: Option<ByteRange>) -> Result<GetObject> {
        let (meta, data) =
            self.objects().get(key.as_str()).cloned().ok_or_else(|| StoreError::NotFound(key.to_string()))?;
        let (start, end) = match range {
            None => (0, meta.size),
            Some(r) => r
                .resolve(meta.size)
                .ok_or_else(|| StoreError::RangeNotSatisfiable { key: key.to_string(), size: meta.size })?,
        };
        let body = bytes_stream(data.slice(start as usize..end as usize));
        Ok(GetObject { meta, range: (start, end), body })
    }

    async fn put(&self, key: &Key, body: ByteStream, options: PutOptions) -> Result<PutResult> {
        let k = key.to_string();
        let mut body = HashingBody::new(body, key.as_str(), options.max_size);
        let mut data = Vec::new();
        body.fill(&mut data, usize::MAX).await?;
        let (_, sha256) = body.finish(options.sha256.as_deref())?;
        let mut objects = self.objects();
        let current = objects.get(key.as_str()).map(|(m, _)| m.etag.clone());
        match (&options.condition, current) {
            (Condition::IfNoneMatch, Some(_)) => {
                return Err(StoreError::Conflict { key: k, reason: "the object already exists".into() });
            }
            (Condition::IfMatch(_), None) => {
                return Err(StoreError::Conflict { key: k, reason: "the object does not exist".into() });
            }
            (Condition::IfMatch(expected), Some(actual)) if *expected != actual => {
                return Err(StoreError::Conflict { key: k, reason: "the object has changed".into() });
            }
            _ => {}
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let etag = format!("{}-{generation}", &sha256[..16]);
        let meta = ObjectMeta {
            key: key.clone(),
            size: data.len() as u64,
            etag: etag.clone(),
            last_modified: jiff::Timestamp::now(),
            sha256: Some(sha256.clone()),
            content_type: options.content_type,
        };
        let size = meta.size;
        objects.insert(k, (meta, Bytes::from(data)));
        Ok(PutResult { etag, size, sha256 })
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage> {
        validate_prefix(prefix)?;
        let objects = self.objects();
        // (key or common prefix, metadata for objects)
        let mut items: Vec<(String, Option<ObjectMeta>)> = Vec::new();
        for (key, (meta, _)) in objects.range::<str, _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
        {
            let Some(rest) = key.strip_prefix(prefix) else {
                break;
            };
            match rest.find('/') {
                Some(i) if options.delimited => {
                    let common = format!("{prefix}{}", &rest[..=i]);
                    if items.last().map(|(k, _)| k) != Some(&common) {
                        items.push((common, None));
                    }
                }
                // Listings carry no user metadata, as in S3.
                _ => items.push((key.clone(), Some(ObjectMeta { sha256: None, content_type: None, ..meta.clone() }))),
            }
        }
        if let Some(after) = &options.continuation {
            items.retain(|(k, _)| k.as_str() > after.as_str());
        }
        let limit = options.max_keys.unwrap_or(crate::DEFAULT_PAGE).clamp(1, crate::MAX_LOCAL_PAGE);
        let more = items.len() > limit;
        items.truncate(limit);
        let mut page =
            ListPage { next: if more { items.last().map(|(k, _)| k.clone()) } else { None }, ..ListPage::default() };
        for (key, meta) in items {
            match meta {
                Some(meta) => page.objects.push(meta),
                None => page.common_prefixes.push(key),
            }
        }
        Ok(page)
    }

    async fn delete(&self, key: &Key) -> Result<()> {
        self.objects().remove(key.as_str());
        Ok(())
    }
}
