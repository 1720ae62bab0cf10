//! Uploading a local file to a store: hashed first (the digest is stored with the object, as
//! S3's multipart checksums are no file digests), idempotent (the same bytes already there are
//! skipped) and immutable (different bytes under an existing key are refused).

use std::path::Path;

use futures_util::TryStreamExt as _;
use tokio::io::AsyncReadExt;

use crate::{ByteStream, Condition, Key, PutOptions, Result, Sha256Hex, Store, StoreError};

/// What uploading one file did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Uploaded {
    pub key: String,
    pub size: u64,
    pub sha256: String,
    /// `uploaded`, or `skipped` when the same bytes were already stored.
    pub status: &'static str,
}

/// SHA-256 and size of a file, read once.
pub async fn hash_file(path: &Path) -> std::io::Result<(u64, String)> {
    let mut file = tokio::fs::File::open(path).await?;
    let mut hasher = Sha256Hex::default();
    let mut buffer = vec![0; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buffer).await?;
        if n == 0 {
            return Ok((size, hasher.finish()));
        }
        hasher.update(&buffer[..n]);
        size += n as u64;
    }
}

/// Upload `path` to `key`, calling `progress` with each chunk's length.
pub async fn upload_file(
    store: &dyn Store,
    key: &Key,
    path: &Path,
    progress: impl Fn(u64) + Send + Sync + 'static,
) -> Result<Uploaded> {
    let io = |source| StoreError::Io { key: path.display().to_string(), source };
    let (size, sha256) = hash_file(path).await.map_err(io)?;
    let outcome = |status| Uploaded { key: key.to_string(), size, sha256: sha256.clone(), status };
    match store.head(key).await {
        Ok(existing) => return same_or_refuse(store, key, existing.sha256, &sha256).await.map(|()| outcome("skipped")),
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    let file = tokio::fs::File::open(path).await.map_err(io)?;
    let body: ByteStream = Box::pin(
        tokio_util::io::ReaderStream::with_capacity(file, 1 << 20)
            .inspect_ok(move |chunk| progress(chunk.len() as u64)),
    );
    let options =
        PutOptions { condition: Condition::IfNoneMatch, sha256: Some(sha256.clone()), ..PutOptions::default() };
    match store.put(key, body, options).await {
        Ok(_) => Ok(outcome("uploaded")),
        // Someone stored it meanwhile: fine if it is the same file.
        Err(StoreError::Conflict { .. }) => {
            let existing = store.head(key).await?;
            same_or_refuse(store, key, existing.sha256, &sha256).await.map(|()| outcome("skipped"))
        }
        Err(e) => Err(e),
    }
}

/// Hash a whole body (at most `limit` bytes), returning its size and sha256.
pub async fn hash_stream(key: &str, body: ByteStream, limit: Option<u64>) -> Result<(u64, String)> {
    let mut body = crate::hashing::HashingBody::new(body, key, limit);
    while body.next().await?.is_some() {}
    body.finish(None)
}

/// The sha256 of a stored object: recorded at upload, or computed by reading it once.
pub async fn stored_sha256(store: &dyn Store, key: &Key, recorded: Option<String>) -> Result<String> {
    match recorded {
        Some(sha) => Ok(sha),
        None => Ok(hash_stream(key.as_str(), store.get(key, None).await?.body, None).await?.1),
    }
}

async fn same_or_refuse(store: &dyn Store, key: &Key, existing: Option<String>, ours: &str) -> Result<()> {
    let existing = stored_sha256(store, key, existing).await?;
    if existing.eq_ignore_ascii_case(ours) {
        Ok(())
    } else {
        Err(StoreError::Conflict {
            key: key.to_string(),
            reason: format!(
                "different content (sha256 {existing}) is already stored there; uploaded files are immutable, use a new name"
            ),
        })
    }
}
