//! Quarry's object store.
//!
//! [`Store`] is the one interface every component reads and writes through: head, get (whole or
//! one byte range), streaming put with an optional condition (`If-Match` / `If-None-Match`)
//! that fails with a typed [`StoreError::Conflict`], paginated list, delete. Backends:
//! [`LocalStore`] (a directory; the embedded default), [`MemoryStore`] (tests),
//! [`CountingStore`] (a wrapper that counts operations, for benchmarks) and `S3Store` (feature
//! `s3`); [`kvs`] writes a CloudFront KeyValueStore (feature `kvs`).
//!
//! Keys are [`Key`]s, validated on construction, so no backend ever sees `..` or an absolute
//! path. This crate knows nothing of index formats.
//!
//! Batches ([`Store::put_many`], [`Store::head_and_read`], [`Store::head_and_read_many`]) are
//! defined by their defaults: a single put per item, a HEAD then (without a recorded sha256, for
//! a small object) a GET per key. `S3Store` and the tests' `FaultyStore` keep those defaults, so
//! they see exactly the single operations, and [`CountingStore`] counts a batch as the single
//! operations it stands for; [`LocalStore`] does a batch's work in one blocking task with the
//! same result per item. Copies ([`Store::copy_from`], [`Store::copy_known`]) are in `copy.rs`.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod copy;
mod counting;
#[cfg(any(test, feature = "conformance"))]
pub mod faults;
mod hashing;
mod key;
#[cfg(feature = "kvs")]
pub mod kvs;
mod local;
mod memory;
pub mod portable;
pub mod presentation;
#[cfg(feature = "s3")]
mod s3;
mod upload;
pub mod url;

use std::fmt;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

pub use copy::{CopyMethod, CopySource, copy_through, encode_copy_source};
pub use counting::{CountingStore, OpCounts};
pub use hashing::{Sha256Hex, sha256_hex};
pub use key::{Key, KeyError, MAX_KEY_LEN, root_prefix, validate_prefix};
pub use local::LocalStore;
pub use memory::MemoryStore;
#[cfg(feature = "s3")]
pub use s3::{
    MAX_COPY_OBJECT, PART_SIZE, PARTS_IN_FLIGHT, S3Store, SHA256_METADATA, client_from_config, client_from_env,
    conditional_writes_from_env, sdk_config_from_env,
};
pub use upload::{Uploaded, hash_file, hash_stream, stored_sha256, upload_file};

/// Default page size of a listing, as S3's.
pub const DEFAULT_PAGE: usize = 1000;
/// Largest page the local and memory backends return.
pub const MAX_LOCAL_PAGE: usize = 100_000;

/// A stream of body chunks.
pub type ByteStream = Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send>>;

/// Wrap owned bytes as a one-chunk [`ByteStream`].
pub fn bytes_stream(data: impl Into<Bytes>) -> ByteStream {
    let data = data.into();
    Box::pin(futures_util::stream::once(async move { Ok(data) }))
}

/// [`Store::get_whole`] as one GET read to its end (the default; a store overriding it for
/// large objects still uses it for small ones).
pub(crate) async fn get_whole_by_get<S: Store + ?Sized>(
    store: &S,
    key: &Key,
    limit: u64,
) -> Result<(ObjectMeta, Bytes)> {
    let got = store.get(key, None).await?;
    if got.meta.size > limit {
        return Err(StoreError::TooLarge { key: key.to_string(), limit });
    }
    let data = collect_sized(got.body, limit, got.meta.size)
        .await
        .map_err(|source| StoreError::Body { key: key.to_string(), source })?;
    Ok((got.meta, data))
}

/// Collect a [`ByteStream`] into memory, failing beyond `limit` bytes.
pub async fn collect(body: ByteStream, limit: u64) -> io::Result<Bytes> {
    collect_sized(body, limit, 0).await
}

/// [`collect`] for a body of about `expected` bytes (a HEAD's or a GET's size): a body that
/// comes as one chunk (a small local file, a page from memory) is returned as it is, and a
/// longer one is gathered into a buffer of that size, not through a run of doublings.
pub async fn collect_sized(mut body: ByteStream, limit: u64, expected: u64) -> io::Result<Bytes> {
    let too_large = || io::Error::other(format!("body exceeds {limit} bytes"));
    let Some(first) = body.next().await.transpose()? else { return Ok(Bytes::new()) };
    if first.len() as u64 > limit {
        return Err(too_large());
    }
    let Some(second) = body.next().await.transpose()? else { return Ok(first) };
    let room = usize::try_from(expected.min(limit)).unwrap_or(0).max(first.len() + second.len());
    let mut out = Vec::with_capacity(room);
    for chunk in [first, second] {
        if (out.len() + chunk.len()) as u64 > limit {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        if (out.len() + chunk.len()) as u64 > limit {
            return Err(too_large());
        }
        out.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(out))
}

/// What the store knows about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub key: Key,
    pub size: u64,
    /// Opaque version tag: changes whenever the object's bytes are replaced.
    pub etag: String,
    pub last_modified: jiff::Timestamp,
    /// Lowercase hex SHA-256 of the content, when the store recorded it at upload
    /// (`x-amz-meta-sha256` on S3, a sidecar on the local store).
    pub sha256: Option<String>,
    pub content_type: Option<String>,
}

impl ObjectMeta {
    /// An identity for this version of the object, the same from a listing and from a HEAD:
    /// the ETag, or, where a listing carries none (s3s-fs lists without ETags), the size and
    /// modification time.
    pub fn version(&self) -> String {
        if self.etag.is_empty() {
            format!("{}@{}", self.size, self.last_modified.as_nanosecond())
        } else {
            self.etag.clone()
        }
    }
}

/// A byte range as HTTP `Range` expresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `bytes=first-last` (inclusive).
    Closed(u64, u64),
    /// `bytes=first-`.
    From(u64),
    /// `bytes=-n`: the last n bytes.
    Suffix(u64),
}

impl ByteRange {
    /// The half-open `[start, end)` this range selects from an object of `size` bytes, or
    /// `None` when it selects nothing (HTTP 416).
    pub fn resolve(self, size: u64) -> Option<(u64, u64)> {
        match self {
            Self::Closed(first, last) if first <= last && first < size => Some((first, (last + 1).min(size))),
            Self::From(first) if first < size => Some((first, size)),
            Self::Suffix(n) if n > 0 && size > 0 => Some((size.saturating_sub(n), size)),
            _ => None,
        }
    }
}

/// The answer to a get: metadata, the half-open range served, and the body.
pub struct GetObject {
    pub meta: ObjectMeta,
    pub range: (u64, u64),
    pub body: ByteStream,
}

impl fmt::Debug for GetObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GetObject").field("meta", &self.meta).field("range", &self.range).finish_non_exhaustive()
    }
}

/// A precondition on a put.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Condition {
    #[default]
    None,
    /// Replace only if the current object has this ETag.
    IfMatch(String),
    /// Create only; fail if the key exists.
    IfNoneMatch,
}

/// What [`Store::put_file`] may do with the caller's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileHandover {
    /// The caller keeps the file: its bytes are copied.
    Copy,
    /// The caller gives the file up and never changes it again (it was written for this put,
    /// through a temporary file of its own): a directory store may link it into place, and
    /// takes a declared sha256 as the writer's word (it hashed the bytes as it wrote them)
    /// rather than reading the file again.
    Give,
}

#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    pub condition: Condition,
    pub content_type: Option<String>,
    /// The content's SHA-256 as the caller computed it. Backends that hash while writing
    /// refuse a body that does not match; S3 stores it as `x-amz-meta-sha256`.
    pub sha256: Option<String>,
    /// Refuse bodies longer than this.
    pub max_size: Option<u64>,
    /// A derived output (an index page, a sidecar) that the indexer can always regenerate:
    /// backends may skip what only matters for originals (the local store does not `fsync` it
    /// or record its sha256).
    pub derived: bool,
}

impl PutOptions {
    pub fn condition(condition: Condition) -> Self {
        Self { condition, ..Self::default() }
    }

    /// Options for a regenerable output; see [`PutOptions::derived`].
    pub fn derived() -> Self {
        Self { derived: true, ..Self::default() }
    }

    #[must_use]
    pub fn with_content_type(mut self, content_type: impl Into<String>) -> Self {
        self.content_type = Some(content_type.into());
        self
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutResult {
    pub etag: String,
    pub size: u64,
    pub sha256: String,
}

/// One page of a listing, in key order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    pub objects: Vec<ObjectMeta>,
    /// With a delimiter: the "directories" directly below the prefix, each ending in `/`.
    pub common_prefixes: Vec<String>,
    /// Pass as [`ListOptions::continuation`] to get the next page (opaque; the local and memory
    /// stores use the last key listed, S3 its continuation token).
    pub next: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Group keys by the next `/` after the prefix, as S3's `delimiter=/`.
    pub delimited: bool,
    /// Where to resume: the opaque `next` of the previous page.
    pub continuation: Option<String>,
    /// Page size: 1000 when unset (as S3). Backends cap it at their own maximum (S3: 1000;
    /// local and memory: 100,000).
    pub max_keys: Option<usize>,
}

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    InvalidKey(#[from] KeyError),
    #[error("no object at {0}")]
    NotFound(String),
    #[error("precondition failed for {key}: {reason}")]
    Conflict { key: String, reason: String },
    #[error("range not satisfiable for {key} ({size} bytes)")]
    RangeNotSatisfiable { key: String, size: u64 },
    #[error("body for {key} exceeds the limit of {limit} bytes")]
    TooLarge { key: String, limit: u64 },
    #[error("body for {key} has sha256 {actual}, but {expected} was declared")]
    DigestMismatch { key: String, expected: String, actual: String },
    #[error("body for {key} could not be read: {source}")]
    Body { key: String, source: io::Error },
    #[error("I/O error on {key}: {source}")]
    Io { key: String, source: io::Error },
    #[error("store backend error: {0}")]
    Backend(String),
    /// The key and another object would need the same path as a file and as a directory
    /// (`a/b` is an object and `a/b/c` is written, or the reverse), or a path component is a
    /// symlink planted inside a directory store.
    #[error("{key}: {reason}")]
    Collision { key: String, reason: String },
}

impl StoreError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound(_))
    }
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }
}

/// What a backend promises about `If-Match` / `If-None-Match` puts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConditionalWrites {
    /// Checked and applied as one step: of two racing writers with the same precondition,
    /// exactly one wins (local directories, memory, Amazon S3).
    Atomic,
    /// Honoured one request at a time, but two racing writers may both pass (S3-compatible
    /// servers such as moto and s3s-fs). Writers must read back what they committed.
    Verify,
    /// Ignored: the server overwrites.
    Unsupported,
}

impl std::str::FromStr for ConditionalWrites {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "atomic" | "1" | "true" | "yes" | "on" => Ok(Self::Atomic),
            "verify" => Ok(Self::Verify),
            "unsupported" | "none" | "0" | "false" | "no" | "off" => Ok(Self::Unsupported),
            other => Err(format!("{other:?} is not one of atomic, verify, unsupported")),
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The object store interface. Implementations are cheap to share (`Arc<dyn Store>`).
#[async_trait::async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// A short human description (`local:/srv/quarry`, `s3://bucket/prefix`).
    fn describe(&self) -> String;

    /// How far conditional puts can be trusted. The indexer refuses to run without them and
    /// verifies each commit where they are not known to be atomic.
    fn conditional_writes(&self) -> ConditionalWrites {
        ConditionalWrites::Atomic
    }

    async fn head(&self, key: &Key) -> Result<ObjectMeta>;

    /// Whether `key` still has the ETag `etag`, when the store can tell without a request or
    /// an open (a local directory: one `lstat`; memory: a lookup): `Some(true)` unchanged,
    /// `Some(false)` changed or gone. `None`: not without a request (ask [`Store::head`]).
    fn unchanged(&self, key: &Key, etag: &str) -> Option<bool> {
        let _ = (key, etag);
        None
    }

    /// The object, or one byte range of it. The metadata returned may omit `sha256` and
    /// `content_type` (as S3's GET omits what it was not asked for); [`Store::head`] has them.
    async fn get(&self, key: &Key, range: Option<ByteRange>) -> Result<GetObject>;

    /// Stream `body` to `key`. The object appears whole or not at all.
    async fn put(&self, key: &Key, body: ByteStream, options: PutOptions) -> Result<PutResult>;

    /// One page of the keys under `prefix` (a plain string prefix, as in S3).
    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage>;

    /// Remove `key`. Removing a missing key succeeds.
    async fn delete(&self, key: &Key) -> Result<()>;

    /// Put each of `items` (whole bodies in memory); each one's result, in order. The same as
    /// one [`Store::put`] per item, which is what this does; a store that can group the work
    /// (a local directory: one blocking task and one lock per batch) overrides it.
    async fn put_many(&self, items: Vec<(Key, Bytes, PutOptions)>) -> Vec<Result<PutResult>> {
        let mut results = Vec::with_capacity(items.len());
        for (key, body, options) in items {
            results.push(self.put(&key, bytes_stream(body), options).await);
        }
        results
    }

    /// What [`Store::head`] says of `key` and, when that has no sha256 and the object is at
    /// most `keep_up_to` bytes, its whole body (read at the version the metadata describes).
    /// The same as a HEAD and a GET, which is what this does; a local directory does both in
    /// one blocking task.
    async fn head_and_read(&self, key: &Key, keep_up_to: u64) -> Result<(ObjectMeta, Option<Bytes>)> {
        let meta = self.head(key).await?;
        if meta.sha256.is_some() || meta.size > keep_up_to {
            return Ok((meta, None));
        }
        let got = self.get(key, None).await?;
        let body = collect_sized(got.body, keep_up_to, got.meta.size)
            .await
            .map_err(|source| StoreError::Body { key: key.to_string(), source })?;
        Ok((got.meta, Some(body)))
    }

    /// The whole object in memory, failing beyond `limit` bytes: a GET read to its end (what
    /// this does; a local directory reads the file straight into one buffer).
    async fn get_whole(&self, key: &Key, limit: u64) -> Result<(ObjectMeta, Bytes)> {
        get_whole_by_get(self, key, limit).await
    }

    /// [`Store::head_and_read`] of each of `keys`; each one's result, in order. The same as one
    /// call per key, which is what this does; a local directory does them all in one blocking
    /// task.
    async fn head_and_read_many(&self, keys: Vec<Key>, keep_up_to: u64) -> Vec<Result<(ObjectMeta, Option<Bytes>)>> {
        let mut results = Vec::with_capacity(keys.len());
        for key in &keys {
            results.push(self.head_and_read(key, keep_up_to).await);
        }
        results
    }

    /// Stores the file at `path` under `key`, as [`Store::put`] of its bytes would (which is
    /// what this does, reading it in 1 MiB chunks). With [`FileHandover::Give`] the caller
    /// gives the file up and never changes it again, so a directory store may link it into place
    /// instead of copying it (see [`FileHandover::Give`] for its digest).
    async fn put_file(&self, key: &Key, path: &Path, handover: FileHandover, options: PutOptions) -> Result<PutResult> {
        let _ = handover;
        let file =
            tokio::fs::File::open(path).await.map_err(|source| StoreError::Body { key: key.to_string(), source })?;
        self.put(key, Box::pin(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20)), options).await
    }

    /// The object as an open local file, for a store that keeps its objects as files (a local
    /// directory): a reader that would download it only to read it (hash, unpack) reads it in
    /// place. The handle keeps the version it opened (objects are replaced by rename, never
    /// rewritten). `None` (what this answers): the store has no such files; download it.
    async fn open_file(&self, key: &Key) -> Result<Option<std::fs::File>> {
        let _ = key;
        Ok(None)
    }

    /// Where `key` lies for a server-side copy (S3: its bucket and full key); `None` for stores
    /// that cannot be the source of one.
    fn copy_source(&self, _key: &Key) -> Option<CopySource> {
        None
    }

    /// Copies `from` of `source` to `to` here, keeping its sha256: server-side where the
    /// backend can (S3 `CopyObject`, across buckets), else read and written through
    /// ([`copy_through`]).
    async fn copy_from(&self, source: &dyn Store, from: &Key, to: &Key) -> Result<(PutResult, CopyMethod)> {
        Ok((copy_through(self, source, from, to).await?, CopyMethod::Streamed))
    }

    /// Like [`Store::copy_from`] for a source whose `size` and `sha256` the caller knows
    /// already (from an index state): a server-side copy need not HEAD it first.
    async fn copy_known(
        &self,
        source: &dyn Store,
        from: &Key,
        to: &Key,
        _size: u64,
        _sha256: Option<&str>,
    ) -> Result<(PutResult, CopyMethod)> {
        self.copy_from(source, from, to).await
    }
}

/// Helpers built on the core operations, available on every store.
#[async_trait::async_trait]
pub trait StoreExt: Store {
    /// `[start, start+len)` of the object in memory.
    async fn get_range(&self, key: &Key, start: u64, len: u64) -> Result<Bytes> {
        if len == 0 {
            return Ok(Bytes::new());
        }
        let got = self.get(key, Some(ByteRange::Closed(start, start + len - 1))).await?;
        collect_sized(got.body, len, len).await.map_err(|source| StoreError::Body { key: key.to_string(), source })
    }

    /// The whole object in memory, failing beyond `limit` bytes.
    async fn get_bytes(&self, key: &Key, limit: u64) -> Result<(ObjectMeta, Bytes)> {
        self.get_whole(key, limit).await
    }

    /// Refuses `key` when it and another object would need one path as both a file and a
    /// directory: an ancestor (`a`, `a/b` for `a/b/c`) is an object, or objects exist under
    /// `key/`. Object stores allow both; a directory store, a mirror of the bucket or a static
    /// web server in front of it cannot hold them, so writers of untrusted keys check first.
    /// Costs one HEAD per ancestor and one single-key LIST.
    async fn check_no_collision(&self, key: &Key) -> Result<()> {
        let k = key.as_str();
        let mut end = 0;
        while let Some(i) = k[end..].find('/') {
            end += i;
            let ancestor = Key::new(&k[..end])?;
            match self.head(&ancestor).await {
                Ok(_) => {
                    return Err(StoreError::Collision {
                        key: k.to_owned(),
                        reason: format!("{ancestor} is an object, so nothing can be stored under it"),
                    });
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
            end += 1;
        }
        let under =
            self.list(&format!("{k}/"), ListOptions { delimited: true, continuation: None, max_keys: Some(1) }).await?;
        if !under.objects.is_empty() || !under.common_prefixes.is_empty() {
            return Err(StoreError::Collision {
                key: k.to_owned(),
                reason: "objects exist under it as a directory".to_owned(),
            });
        }
        Ok(())
    }

    async fn put_bytes(&self, key: &Key, data: Bytes, options: PutOptions) -> Result<PutResult> {
        self.put(key, bytes_stream(data), options).await
    }

    /// Every object under `prefix`, following pagination.
    async fn list_all(&self, prefix: &str, delimited: bool) -> Result<ListPage> {
        let mut all = ListPage::default();
        let mut continuation = None;
        loop {
            let page = self
                .list(prefix, ListOptions { delimited, continuation: continuation.take(), max_keys: Some(usize::MAX) })
                .await?;
            if all.objects.is_empty() {
                all.objects = page.objects;
            } else {
                all.objects.extend(page.objects);
            }
            all.common_prefixes.extend(page.common_prefixes);
            match page.next {
                Some(next) => continuation = Some(next),
                None => return Ok(all),
            }
        }
    }
}

impl<T: Store + ?Sized> StoreExt for T {}

/// Open a store from a URL: a path or `file://` URL (local directory), `s3://bucket/prefix`
/// (with the S3 backend), or `memory://`.
pub async fn open(url: &str) -> Result<Arc<dyn Store>> {
    if url == "memory://" {
        return Ok(Arc::new(MemoryStore::default()));
    }
    if url.starts_with("s3://") {
        #[cfg(feature = "s3")]
        return Ok(Arc::new(S3Store::open(url).await?));
        #[cfg(not(feature = "s3"))]
        return Err(StoreError::Backend(format!("{url}: this build has no S3 backend (feature \"s3\")")));
    }
    if let Some((scheme, _)) = url.split_once("://")
        && scheme != "file"
    {
        return Err(StoreError::Backend(format!("unsupported store URL scheme {scheme:?} in {url:?}")));
    }
    let path = url.strip_prefix("file://").unwrap_or(url).to_owned();
    let store = tokio::task::spawn_blocking(move || LocalStore::open(path))
        .await
        .map_err(|e| StoreError::Backend(format!("opening the store failed: {e}")))??;
    Ok(Arc::new(store))
}

/// An error and its causes on one line, `outer: cause: root cause`, as reports and logs show
/// them (what anyhow's `{:#}` prints, for libraries that do not use anyhow).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_like_http() {
        assert_eq!(ByteRange::Closed(0, 9).resolve(100), Some((0, 10)));
        assert_eq!(ByteRange::Closed(90, 200).resolve(100), Some((90, 100)));
        assert_eq!(ByteRange::Closed(100, 200).resolve(100), None);
        assert_eq!(ByteRange::Closed(5, 4).resolve(100), None);
        assert_eq!(ByteRange::From(99).resolve(100), Some((99, 100)));
        assert_eq!(ByteRange::Suffix(10).resolve(100), Some((90, 100)));
        assert_eq!(ByteRange::Suffix(1000).resolve(100), Some((0, 100)));
        assert_eq!(ByteRange::Suffix(0).resolve(100), None);
        assert_eq!(ByteRange::From(0).resolve(0), None);
    }
}
