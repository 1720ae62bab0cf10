//! Reading one stored package file: whole and once, through the hashers (kept in memory when
//! small enough to parse from there), or by byte ranges — from the kept bytes or the store.

use bytes::Bytes;
use futures_util::TryStreamExt;
use md5::Digest as _;
use quarry_store::{GetObject, Key, ObjectMeta, Store, StoreError, StoreExt};

/// A file read whole.
pub struct Whole {
    /// The object as the GET saw it.
    pub meta: ObjectMeta,
    /// Lowercase hex digests; MD5 and SHA-1 only when asked for.
    pub sha256: String,
    pub md5: Option<String>,
    pub sha1: Option<String>,
    /// The bytes, when the file is no larger than the caller's limit.
    pub bytes: Option<Bytes>,
}

/// Stream `key` once through SHA-256 (and MD5 and SHA-1 with `legacy_digests`), keeping the
/// bytes when the file is at most `keep_up_to` long.
pub async fn read_whole(
    store: &dyn Store,
    key: &Key,
    keep_up_to: u64,
    legacy_digests: bool,
) -> Result<Whole, StoreError> {
    let got = store.get(key, None).await?;
    hash_body(key, got, keep_up_to, legacy_digests).await
}

/// [`read_whole`] of a GET already made.
pub async fn hash_body(key: &Key, got: GetObject, keep_up_to: u64, legacy_digests: bool) -> Result<Whole, StoreError> {
    let meta = got.meta;
    let mut sha256 = sha2::Sha256::new();
    let mut legacy = legacy_digests.then(|| (md5::Md5::new(), sha1::Sha1::new()));
    // The chunks are kept as they come; a body in one chunk (a small local file) is not copied.
    let mut kept = (meta.size <= keep_up_to).then(Vec::new);
    let mut body = got.body;
    while let Some(chunk) = body.try_next().await.map_err(|source| StoreError::Body { key: key.to_string(), source })? {
        sha256.update(&chunk);
        if let Some((md5, sha1)) = legacy.as_mut() {
            md5.update(&chunk);
            sha1.update(&chunk);
        }
        if let Some(chunks) = kept.as_mut() {
            chunks.push(chunk);
        }
    }
    let bytes = kept.map(join).filter(|b| b.len() as u64 == meta.size);
    let (md5, sha1) = match legacy {
        Some((md5, sha1)) => (Some(hex::encode(md5.finalize())), Some(hex::encode(sha1.finalize()))),
        None => (None, None),
    };
    Ok(Whole { meta, sha256: hex::encode(sha256.finalize()), md5, sha1, bytes })
}

/// The chunks as one buffer (the chunk itself when there is one).
fn join(mut chunks: Vec<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => Bytes::from(chunks.concat()),
    }
}

/// Something that hands out byte ranges of one file (clamped to its end).
pub trait RangeSource {
    fn size(&self) -> u64;
    fn range(&mut self, offset: u64, len: u64) -> impl Future<Output = Result<Bytes, StoreError>> + Send;
}

/// A whole file in memory.
pub struct MemorySource(pub Bytes);

impl RangeSource for MemorySource {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }

    async fn range(&mut self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let clamp = |at: u64| usize::try_from(at).map_or(self.0.len(), |at| at.min(self.0.len()));
        let (start, end) = (clamp(offset), clamp(offset.saturating_add(len)));
        Ok(self.0.slice(start..end))
    }
}

/// A file's bytes: kept in memory when it was read whole, else ranged reads of the store.
pub enum Source<'a> {
    Memory(MemorySource),
    Store { store: &'a dyn Store, key: &'a Key, size: u64 },
}

impl<'a> Source<'a> {
    pub fn new(kept: Option<Bytes>, store: &'a dyn Store, key: &'a Key, size: u64) -> Self {
        match kept {
            Some(bytes) => Self::Memory(MemorySource(bytes)),
            None => Self::Store { store, key, size },
        }
    }
}

impl RangeSource for Source<'_> {
    fn size(&self) -> u64 {
        match self {
            Self::Memory(m) => m.size(),
            Self::Store { size, .. } => *size,
        }
    }

    async fn range(&mut self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        match self {
            Self::Memory(m) => m.range(offset, len).await,
            Self::Store { store, key, size } => {
                let len = len.min(size.saturating_sub(offset));
                store.get_range(key, offset, len).await
            }
        }
    }
}
