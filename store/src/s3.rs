//! Amazon S3 (and S3-compatible servers) as a store, through `aws-sdk-s3`.
//!
//! - Credentials and region come from the default chain; `AWS_ENDPOINT_URL` (or
//!   `AWS_ENDPOINT_URL_S3`) points at an S3-compatible server and switches to path-style
//!   addressing; `QUARRY_S3_UNSIGNED=1` reads public buckets without credentials.
//! - Conditional puts use `If-Match` / `If-None-Match: *` on `PutObject` and
//!   `CompleteMultipartUpload`; 412 and 409 answers become [`StoreError::Conflict`]. Amazon S3
//!   applies them atomically; S3-compatible servers (an `AWS_ENDPOINT_URL`) are assumed to
//!   check them one request at a time ([`ConditionalWrites::Verify`]: the indexer reads back
//!   each commit). `QUARRY_S3_CONDITIONAL_WRITES=atomic|verify|unsupported` overrides that. A
//!   server that ignores preconditions (Garage ignores `If-None-Match`) is not detected: declared
//!   `unsupported`, it is refused by the indexer (`IndexError::UnsafeStore`) rather than trusted
//!   to keep entries; undeclared, an endpoint is taken as `verify`.
//! - Bodies up to [`PART_SIZE`] go in one `PutObject`; larger ones stream as a multipart upload
//!   with up to [`PARTS_IN_FLIGHT`] parts at once (a single PUT stops at 5 GiB).
//! - The sha256 of the content is stored as `x-amz-meta-sha256` whenever it is known before
//!   the object is created (always for single puts; for multipart, when the caller declares it).
//! - `copy_from` another S3 store is a server-side `CopyObject` (across buckets), metadata
//!   kept, for objects up to 5 GiB; larger ones are read and written through.
//! - The SDK retries throttling, 5xx and timeouts with exponential backoff and jitter.

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream as AwsBody;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;

use crate::hashing::HashingBody;
use crate::{
    ByteRange, ByteStream, Condition, ConditionalWrites, CopyMethod, CopySource, GetObject, Key, ListOptions, ListPage,
    ObjectMeta, PutOptions, PutResult, Result, Store, StoreError, copy_through, encode_copy_source, validate_prefix,
};

/// Part size of multipart uploads (and the largest body sent as one `PutObject`).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts uploaded concurrently.
pub const PARTS_IN_FLIGHT: usize = 4;
/// The largest object one `CopyObject` copies (5 GiB); larger ones are streamed through.
pub const MAX_COPY_OBJECT: u64 = 5 << 30;
/// The user metadata key holding the content's sha256 (`x-amz-meta-sha256`).
pub const SHA256_METADATA: &str = "sha256";
const S3_PAGE: usize = 1000;
const CONDITIONAL_WRITES_ENV: &str = "QUARRY_S3_CONDITIONAL_WRITES";

#[derive(Debug, Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    /// Key prefix inside the bucket: empty or ending in `/`.
    prefix: String,
    conditional_writes: ConditionalWrites,
}

fn env_flag(name: &str) -> Option<bool> {
    std::env::var(name).ok().map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

fn custom_endpoint() -> bool {
    std::env::var_os("AWS_ENDPOINT_URL_S3").is_some() || std::env::var_os("AWS_ENDPOINT_URL").is_some()
}

/// An S3 client configured from the environment: the default credential chain and region
/// (us-east-1 when none), `AWS_ENDPOINT_URL[_S3]` with path-style addressing,
/// `QUARRY_S3_UNSIGNED=1` for public buckets, five attempts with exponential backoff and jitter
/// (5xx, throttling, timeouts), connect and read timeouts, and flexible checksums only where S3
/// requires them.
pub async fn client_from_env() -> Client {
    client_from_config(&sdk_config_from_env().await)
}

/// The AWS configuration from the environment (region, credentials, endpoint), loaded once
/// for every client a process builds; no credentials with `QUARRY_S3_UNSIGNED=1`.
pub async fn sdk_config_from_env() -> aws_config::SdkConfig {
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if env_flag("QUARRY_S3_UNSIGNED") == Some(true) {
        loader = loader.no_credentials();
    }
    loader.load().await
}

/// The S3 client of [`client_from_env`] from an already loaded configuration.
pub fn client_from_config(shared: &aws_config::SdkConfig) -> Client {
    let mut config = aws_sdk_s3::config::Builder::from(shared);
    if shared.region().is_none() {
        config = config.region(aws_sdk_s3::config::Region::new("us-east-1"));
    }
    if custom_endpoint() || env_flag("QUARRY_S3_PATH_STYLE") == Some(true) {
        config = config.force_path_style(true);
    }
    config = config.retry_config(aws_sdk_s3::config::retry::RetryConfig::standard().with_max_attempts(5));
    // A server that accepts a connection and then hangs is a timeout, retried like a 5xx.
    config = config.timeout_config(
        aws_sdk_s3::config::timeout::TimeoutConfig::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .read_timeout(std::time::Duration::from_secs(60))
            .build(),
    );
    // Integrity is the sha256 Quarry records and checks itself, and S3-compatible servers vary
    // in how they keep CRCs (s3s-fs served a CRC from another version of an object being
    // rewritten concurrently).
    config = config
        .request_checksum_calculation(aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired);
    Client::from_conf(config.build())
}

/// `QUARRY_S3_CONDITIONAL_WRITES` when set; otherwise [`ConditionalWrites::Verify`] for an
/// S3-compatible server (`AWS_ENDPOINT_URL[_S3]`) and [`ConditionalWrites::Atomic`] for S3.
pub fn conditional_writes_from_env() -> ConditionalWrites {
    if let Ok(value) = std::env::var(CONDITIONAL_WRITES_ENV) {
        match value.parse() {
            Ok(declared) => return declared,
            Err(e) => tracing::warn!("ignoring {CONDITIONAL_WRITES_ENV}: {e}"),
        }
    }
    if custom_endpoint() { ConditionalWrites::Verify } else { ConditionalWrites::Atomic }
}

impl S3Store {
    /// Open `s3://bucket[/prefix]` with configuration from the environment.
    pub async fn open(url: &str) -> Result<Self> {
        let rest =
            url.strip_prefix("s3://").ok_or_else(|| StoreError::Backend(format!("{url:?} is not an s3:// URL")))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(StoreError::Backend(format!("{url:?} names no bucket")));
        }
        let prefix = crate::root_prefix(prefix)?;
        Ok(Self::from_client(client_from_env().await, bucket, &prefix))
    }

    /// A store over an already configured client, rooted at `prefix` (spelled as
    /// [`crate::root_prefix`] gives it). What the server promises about conditional writes
    /// comes from the environment (see [`conditional_writes_from_env`]).
    pub fn from_client(client: Client, bucket: &str, prefix: &str) -> Self {
        let prefix = if prefix.is_empty() || prefix.ends_with('/') { prefix.to_owned() } else { format!("{prefix}/") };
        Self { client, bucket: bucket.to_owned(), prefix, conditional_writes: conditional_writes_from_env() }
    }

    /// Declare what the server promises about conditional writes.
    #[must_use]
    pub fn with_conditional_writes(mut self, honoured: ConditionalWrites) -> Self {
        self.conditional_writes = honoured;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    fn full(&self, key: &Key) -> String {
        format!("{}{}", self.prefix, key.as_str())
    }

    fn strip<'a>(&self, full: &'a str) -> Option<&'a str> {
        full.strip_prefix(&self.prefix)
    }
}

/// ETags travel quoted; the store's ETags are bare.
fn bare(etag: &str) -> String {
    etag.trim_matches('"').to_owned()
}

fn quoted(etag: &str) -> String {
    format!("\"{}\"", etag.trim_matches('"'))
}

fn timestamp(t: Option<&aws_sdk_s3::primitives::DateTime>) -> jiff::Timestamp {
    t.and_then(|t| jiff::Timestamp::new(t.secs(), t.subsec_nanos() as i32).ok()).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// Map an SDK error for `key` onto the store's errors.
fn map_err<E>(key: &str, err: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = err.raw_response().map(|r| r.status().as_u16());
    let code = err.code().map(str::to_owned);
    match (status, code.as_deref()) {
        (Some(404), _) | (_, Some("NoSuchKey" | "NotFound")) => StoreError::NotFound(key.to_owned()),
        (Some(412), _) | (_, Some("PreconditionFailed")) => {
            StoreError::Conflict { key: key.to_owned(), reason: "precondition failed (412)".into() }
        }
        (Some(409), _) | (_, Some("ConditionalRequestConflict")) => {
            StoreError::Conflict { key: key.to_owned(), reason: "conflicting concurrent write (409)".into() }
        }
        (Some(416), _) | (_, Some("InvalidRange")) => StoreError::RangeNotSatisfiable { key: key.to_owned(), size: 0 },
        _ => StoreError::Backend(format!(
            "S3 request for {key} failed: {}",
            aws_sdk_s3::error::DisplayErrorContext(&err)
        )),
    }
}

#[async_trait::async_trait]
impl Store for S3Store {
    fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    fn conditional_writes(&self) -> ConditionalWrites {
        self.conditional_writes
    }

    async fn head(&self, key: &Key) -> Result<ObjectMeta> {
        let full = self.full(key);
        let out =
            self.client.head_object().bucket(&self.bucket).key(&full).send().await.map_err(|e| map_err(&full, e))?;
        Ok(ObjectMeta {
            key: key.clone(),
            size: out.content_length().unwrap_or(0).max(0) as u64,
            etag: out.e_tag().map(bare).unwrap_or_default(),
            last_modified: timestamp(out.last_modified()),
            sha256: out.metadata().and_then(|m| m.get(SHA256_METADATA)).map(|s| s.to_ascii_lowercase()),
            content_type: out.content_type().map(str::to_owned),
        })
    }

    async fn get(&self, key: &Key, range: Option<ByteRange>) -> Result<GetObject> {
        let full = self.full(key);
        let mut request = self.client.get_object().bucket(&self.bucket).key(&full);
        if let Some(r) = range {
            request = request.range(match r {
                ByteRange::Closed(a, b) => format!("bytes={a}-{b}"),
                ByteRange::From(a) => format!("bytes={a}-"),
                ByteRange::Suffix(n) => format!("bytes=-{n}"),
            });
        }
        let out = match request.send().await {
            Ok(out) => out,
            Err(e) => {
                return Err(match map_err(&full, e) {
                    StoreError::RangeNotSatisfiable { .. } => {
                        let size = self.head(key).await.map(|m| m.size).unwrap_or(0);
                        StoreError::RangeNotSatisfiable { key: key.to_string(), size }
                    }
                    other => other,
                });
            }
        };
        let length = out.content_length().unwrap_or(0).max(0) as u64;
        let (start, end, size) = match out.content_range().and_then(parse_content_range) {
            Some((start, end_inclusive, size)) => (start, end_inclusive + 1, size),
            None => (0, length, length),
        };
        let meta = ObjectMeta {
            key: key.clone(),
            size,
            etag: out.e_tag().map(bare).unwrap_or_default(),
            last_modified: timestamp(out.last_modified()),
            sha256: out.metadata().and_then(|m| m.get(SHA256_METADATA)).map(|s| s.to_ascii_lowercase()),
            content_type: out.content_type().map(str::to_owned),
        };
        let reader = out.body.into_async_read();
        let body: ByteStream = Box::pin(tokio_util::io::ReaderStream::with_capacity(reader, 256 * 1024));
        Ok(GetObject { meta, range: (start, end), body })
    }

    async fn put(&self, key: &Key, body: ByteStream, options: PutOptions) -> Result<PutResult> {
        let full = self.full(key);
        let mut body = HashingBody::new(body, key.as_str(), options.max_size);
        // Fill the first part; a body that fits is one PutObject.
        let mut first = Vec::new();
        if body.fill(&mut first, PART_SIZE).await? {
            let (size, sha256) = body.finish(options.sha256.as_deref())?;
            let mut request = self
                .client
                .put_object()
                .bucket(&self.bucket)
                .key(&full)
                .content_length(first.len() as i64)
                .metadata(SHA256_METADATA, &sha256)
                .body(AwsBody::from(first));
            let (content_type, cache_control) = headers_for(key, &options);
            request = request.content_type(content_type).cache_control(cache_control);
            match &options.condition {
                Condition::None => {}
                Condition::IfMatch(etag) => request = request.if_match(quoted(etag)),
                Condition::IfNoneMatch => request = request.if_none_match("*"),
            }
            let out = request.send().await.map_err(|e| conditional(map_err(&full, e), &options.condition))?;
            return Ok(PutResult { etag: out.e_tag().map(bare).unwrap_or_default(), size, sha256 });
        }

        // Multipart: the sha256 metadata must be set now, so only a declared digest is stored.
        let mut create = self.client.create_multipart_upload().bucket(&self.bucket).key(&full);
        if let Some(declared) = &options.sha256 {
            create = create.metadata(SHA256_METADATA, declared.to_ascii_lowercase());
        }
        let (content_type, cache_control) = headers_for(key, &options);
        create = create.content_type(content_type).cache_control(cache_control);
        let upload = create.send().await.map_err(|e| map_err(&full, e))?;
        let upload_id = upload.upload_id().unwrap_or_default().to_owned();
        match self.multipart(&full, &upload_id, first, body, &options).await {
            Ok(done) => Ok(done),
            Err(e) => {
                let abort = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(&full)
                    .upload_id(&upload_id)
                    .send()
                    .await;
                if let Err(abort_err) = abort {
                    tracing::warn!(key = %full, error = %abort_err, "could not abort a failed multipart upload");
                }
                Err(e)
            }
        }
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage> {
        validate_prefix(prefix)?;
        let full_prefix = format!("{}{prefix}", self.prefix);
        let limit = options.max_keys.unwrap_or(crate::DEFAULT_PAGE).clamp(1, S3_PAGE);
        let mut request = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&full_prefix)
            .max_keys(i32::try_from(limit).unwrap_or(i32::MAX));
        if options.delimited {
            request = request.delimiter("/");
        }
        if let Some(token) = &options.continuation {
            request = request.continuation_token(token);
        }
        let out = request.send().await.map_err(|e| map_err(&full_prefix, e))?;
        let mut page = ListPage::default();
        for object in out.contents() {
            let Some(rel) = object.key().and_then(|k| self.strip(k)) else { continue };
            // Keys another writer made that Quarry could never name are skipped, not fatal.
            let Ok(key) = Key::new(rel) else { continue };
            page.objects.push(ObjectMeta {
                key,
                size: object.size().unwrap_or(0).max(0) as u64,
                etag: object.e_tag().map(bare).unwrap_or_default(),
                last_modified: timestamp(object.last_modified()),
                sha256: None,
                content_type: None,
            });
        }
        for common in out.common_prefixes() {
            if let Some(rel) = common.prefix().and_then(|p| self.strip(p)) {
                page.common_prefixes.push(rel.to_owned());
            }
        }
        if out.is_truncated() == Some(true) {
            page.next = out.next_continuation_token().map(str::to_owned);
        }
        Ok(page)
    }

    async fn delete(&self, key: &Key) -> Result<()> {
        let full = self.full(key);
        self.client.delete_object().bucket(&self.bucket).key(&full).send().await.map_err(|e| map_err(&full, e))?;
        Ok(())
    }

    fn copy_source(&self, key: &Key) -> Option<CopySource> {
        Some(CopySource { bucket: self.bucket.clone(), key: self.full(key) })
    }

    /// `CopyObject` when the source is on S3 too (any bucket the credentials can read) and at
    /// most [`MAX_COPY_OBJECT`] long; the metadata, `x-amz-meta-sha256` included, is copied
    /// with the object. Else read and written through.
    async fn copy_from(&self, source: &dyn Store, from: &Key, to: &Key) -> Result<(PutResult, CopyMethod)> {
        let meta = source.head(from).await?;
        self.copy_known(source, from, to, meta.size, meta.sha256.as_deref()).await
    }

    async fn copy_known(
        &self,
        source: &dyn Store,
        from: &Key,
        to: &Key,
        size: u64,
        sha256: Option<&str>,
    ) -> Result<(PutResult, CopyMethod)> {
        let Some(origin) = source.copy_source(from).filter(|_| size <= MAX_COPY_OBJECT) else {
            return Ok((copy_through(self, source, from, to).await?, CopyMethod::Streamed));
        };
        let full = self.full(to);
        let out = self
            .client
            .copy_object()
            .copy_source(encode_copy_source(&origin.bucket, &origin.key))
            .bucket(&self.bucket)
            .key(&full)
            .send()
            .await
            .map_err(|e| map_err(&full, e))?;
        let etag = out.copy_object_result().and_then(|r| r.e_tag()).map(bare).unwrap_or_default();
        let sha256 = sha256.unwrap_or_default().to_owned();
        Ok((PutResult { etag, size, sha256 }, CopyMethod::ServerSide))
    }
}

impl S3Store {
    async fn multipart(
        &self,
        full: &str,
        upload_id: &str,
        first: Vec<u8>,
        mut body: HashingBody<'_>,
        options: &PutOptions,
    ) -> Result<PutResult> {
        let mut in_flight = FuturesOrdered::new();
        let mut completed = Vec::new();
        let mut number = 0i32;
        let mut part = first;
        let mut ended = false;
        loop {
            if !part.is_empty() {
                number += 1;
                let request = self
                    .client
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(full)
                    .upload_id(upload_id)
                    .part_number(number)
                    .content_length(part.len() as i64)
                    .body(AwsBody::from(std::mem::take(&mut part)));
                let n = number;
                in_flight.push_back(async move { (n, request.send().await) });
            }
            while in_flight.len() >= PARTS_IN_FLIGHT || (ended && !in_flight.is_empty()) {
                let Some((n, sent)) = in_flight.next().await else { break };
                let out = sent.map_err(|e| map_err(full, e))?;
                completed
                    .push(CompletedPart::builder().part_number(n).set_e_tag(out.e_tag().map(str::to_owned)).build());
            }
            if ended {
                break;
            }
            ended = body.fill(&mut part, PART_SIZE).await?;
        }
        let (size, sha256) = body.finish(options.sha256.as_deref())?;
        let mut complete = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(full)
            .upload_id(upload_id)
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(completed)).build());
        match &options.condition {
            Condition::None => {}
            Condition::IfMatch(etag) => complete = complete.if_match(quoted(etag)),
            Condition::IfNoneMatch => complete = complete.if_none_match("*"),
        }
        let out = complete.send().await.map_err(|e| conditional(map_err(full, e), &options.condition))?;
        Ok(PutResult { etag: out.e_tag().map(bare).unwrap_or_default(), size, sha256 })
    }
}

/// S3 answers `If-Match` on a missing key with 404 (`NoSuchKey`): for a conditional put that is
/// a failed precondition like any other.
fn conditional(err: StoreError, condition: &Condition) -> StoreError {
    match (err, condition) {
        (StoreError::NotFound(key), Condition::IfMatch(_)) => {
            StoreError::Conflict { key, reason: "the object does not exist".into() }
        }
        (err, _) => err,
    }
}

/// `bytes a-b/size` → (a, b, size).
fn parse_content_range(value: &str) -> Option<(u64, u64, u64)> {
    let rest = value.strip_prefix("bytes ")?;
    let (range, size) = rest.split_once('/')?;
    let (a, b) = range.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?, size.parse().ok()?))
}

/// The `Content-Type` (the caller's, else from the name) and `Cache-Control` stored with an
/// object, so the bucket serves it, directly or through a CDN, as `quarry serve` would.
fn headers_for<'a>(key: &Key, options: &'a PutOptions) -> (&'a str, &'static str) {
    let presented = crate::presentation::presentation(key.as_str());
    (options.content_type.as_deref().unwrap_or(presented.content_type), presented.cache_control)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges() {
        assert_eq!(parse_content_range("bytes 0-9/100"), Some((0, 9, 100)));
        assert_eq!(parse_content_range("bytes */100"), None);
        assert_eq!(bare("\"abc\""), "abc");
        assert_eq!(quoted("abc"), "\"abc\"");
    }
}
