//! `quarry mirror`: fill a pip root (a base index such as `python-deps/`) with chosen projects
//! and versions from an upstream PEP 691/503 simple index.
//!
//! Each project page is read as PEP 691 JSON when the upstream offers it, else as PEP 503 HTML.
//! Each chosen file is streamed to a temporary file of its own while its sha256 is computed,
//! compared with the upstream's hash (a mismatch stores nothing), inspected there as the
//! indexer would (a file it refuses is never stored), and only then stored with
//! `If-None-Match` (a different file under the same name is refused). The upstream's
//! `upload-time` becomes the entry's in the root's state, so the mirrored pages show the
//! upstream's hashes and times. The root is reindexed once at the end; a second identical
//! mirror downloads and writes nothing.
//!
//! What an upstream says is checked, never trusted:
//!
//! - **Hashes.** A file the upstream gives no sha256 for is refused before it is downloaded,
//!   unless [`MirrorOptions::allow_unhashed`]: then it is hashed on the way, inspected like any
//!   other, and reported with `verified: false` (and a warning), so nothing unverified is
//!   published silently.
//! - **PEP 658 metadata.** The `.metadata` Quarry publishes is always the wheel's own
//!   `METADATA`, extracted by the indexer. When the upstream offers one (PEP 658/714, with or
//!   without a hash) it is fetched and must be byte for byte the wheel's `METADATA`; any other
//!   answer refuses the file, with nothing stored.
//! - **Redirects.** A redirect is followed only to the origin (scheme, host and port) of the
//!   URL asked for, or to an origin in [`MirrorOptions::redirect_origins`]; any other refuses
//!   that request, naming the target, before anything is asked of it (at most
//!   [`MAX_REDIRECTS`] hops). The links a page gives may point anywhere over http(s) (PyPI's
//!   files live on another host), but their bytes must match the page's sha256.
//! - **Sizes and time.** A download stops at the upstream's declared size (PEP 700 `size`),
//!   else at [`MirrorOptions::max_file_size`]; a `Content-Length` above the limit is refused
//!   before the body is read; every request (page, metadata or file) must end within
//!   [`MirrorOptions::deadline`] from its start, whatever the per-read `timeout`. A stopped
//!   download's temporary file is removed at once.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use quarry_index::origin::{OriginConflict, projects};
use quarry_index::{Indexer, Inspected, Inspections, MAX_METADATA_SIZE, ReindexReport, RepoRoot, read_state};
use quarry_packaging::{DistFilename, PackageName, Version};
use quarry_store::{Key, LocalStore, ObjectMeta, Sha256Hex, Store, StoreError, sha256_hex};
use serde::Serialize;
use tokio::io::AsyncWriteExt;

/// What `Accept` asks of a simple index: JSON first, HTML as a fallback.
const ACCEPT: &str = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01";
/// Largest project page read.
const MAX_PAGE: u64 = 16 << 20;
/// Largest file mirrored unless [`MirrorOptions::max_file_size`] says otherwise: 8 GiB.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 8 << 30;
/// Longest one request may take, from connecting to the last byte of its body, unless
/// [`MirrorOptions::deadline`] says otherwise: an hour (8 GiB at 2.4 MB/s).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(3600);
/// Most redirects followed for one request.
pub const MAX_REDIRECTS: usize = 10;

/// One `NAME==VERSION` to mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub project: PackageName,
    pub version: Version,
}

impl std::str::FromStr for Wanted {
    type Err = String;

    /// `NAME==VERSION` (spaces around `==` allowed).
    fn from_str(text: &str) -> Result<Self, String> {
        let (name, version) =
            text.split_once("==").ok_or_else(|| format!("{text:?}: expected NAME==VERSION (e.g. numpy==2.1.0)"))?;
        let project = PackageName::new(name.trim()).map_err(|e| format!("{text:?}: {e}"))?;
        let version = version.trim().parse().map_err(|e| format!("{text:?}: {e}"))?;
        Ok(Self { project, version })
    }
}

/// Parse a requirements-style file: one `NAME==VERSION` a line; blank lines and `#` comments
/// are skipped, anything else is an error naming the line.
pub fn parse_requirements(text: &str) -> Result<Vec<Wanted>, String> {
    let mut wanted = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if !line.is_empty() {
            wanted.push(line.parse().map_err(|e| format!("line {}: {e}", n + 1))?);
        }
    }
    Ok(wanted)
}

/// What to mirror, from where, into where.
#[derive(Debug, Clone)]
pub struct MirrorOptions {
    /// The upstream's simple index, ending in `/` (`https://pypi.org/simple/`).
    pub upstream: reqwest::Url,
    pub root: RepoRoot,
    pub wanted: Vec<Wanted>,
    /// Keep only wheels with one of these platform tags (or `any`); empty: every wheel.
    pub platform_tags: Vec<String>,
    /// Keep only wheels for this Python (`3.12`); sdists are always kept.
    pub python_version: Option<(u32, u32)>,
    /// Roots composed with this one: a project any of them supplies is refused.
    pub compose_with: Vec<RepoRoot>,
    /// Per request, connect and read.
    pub timeout: Duration,
    /// Longest one request may take in all (connect, answer, whole body).
    pub deadline: Duration,
    /// Largest file downloaded, whatever the upstream declares.
    pub max_file_size: u64,
    /// Origins (`scheme://host[:port]`, as [`origin`] spells them) a redirect may lead to
    /// besides the origin of the URL asked for.
    pub redirect_origins: Vec<String>,
    /// Mirror a file the upstream gives no sha256 for (hashed on the way, reported unverified)
    /// instead of refusing it.
    pub allow_unhashed: bool,
}

/// The origin of `text` (an `http` or `https` URL, `https://files.example:8443`), spelt as
/// [`MirrorOptions::redirect_origins`] holds it; an error names what is wrong.
pub fn origin(text: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(text).map_err(|e| format!("{text:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{text:?}: not an http or https origin"));
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
        return Err(format!("{text:?}: an origin is scheme://host[:port] and nothing more"));
    }
    Ok(url.origin().ascii_serialization())
}

pub use quarry_inspect::simple_page::UpstreamFile;

/// What happened to one file.
#[derive(Debug, Clone, Serialize)]
pub struct MirroredFile {
    pub filename: String,
    pub sha256: String,
    /// `mirrored`, `stored` (already in the store, now indexed) or `present` (already indexed).
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload_time: Option<String>,
    /// The upstream offered PEP 658 metadata and it is the wheel's own `METADATA` (what is
    /// published is always the wheel's).
    pub upstream_metadata: bool,
    /// The sha256 is the upstream's, matched by the bytes (`false`: the upstream gave none and
    /// `allow_unhashed` let the file in with the sha256 of what was downloaded).
    pub verified: bool,
}

/// What a mirror did.
#[derive(Debug, Serialize)]
pub struct MirrorReport {
    pub root: String,
    pub upstream: String,
    pub files: Vec<MirroredFile>,
    /// `file or project: error`, one per failure.
    pub failures: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reindex: Option<ReindexReport>,
}

impl std::fmt::Display for MirrorReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for file in &self.files {
            let unverified = if file.verified { "" } else { " (unverified: the upstream gave no sha256)" };
            writeln!(f, "{:<9} {} sha256={}{unverified}", file.status, file.filename, file.sha256)?;
        }
        for failure in &self.failures {
            writeln!(f, "FAILED    {failure}")?;
        }
        if let Some(r) = &self.reindex {
            writeln!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Why mirroring could not start or one file failed (a file's error does not repeat its name:
/// the report puts it in front).
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error(transparent)]
    Origin(#[from] OriginConflict),
    #[error("building the HTTP client")]
    Client(#[source] reqwest::Error),
    #[error(transparent)]
    Trust(#[from] crate::http::TrustError),
    #[error("GET {url}")]
    Get { url: String, source: reqwest::Error },
    #[error("GET {url}: {status}")]
    Status { url: String, status: reqwest::StatusCode },
    #[error("GET {url}: not finished within {} s (--deadline)", .limit.as_secs_f64())]
    Deadline { url: String, limit: Duration },
    #[error("GET {url}: more than {limit} bytes ({why})")]
    TooLarge { url: String, limit: u64, why: &'static str },
    #[error("GET {url}: Content-Length {length} is more than {limit} bytes ({why})")]
    LengthTooLarge { url: String, length: u64, limit: u64, why: &'static str },
    #[error("the upstream's size, {size} bytes, is more than {limit} (--max-file-size)")]
    DeclaredTooLarge { filename: String, size: u64, limit: u64 },
    #[error("{url}: not an http or https URL")]
    Scheme { url: String },
    #[error("{url}: {reason}")]
    Page { url: String, reason: String },
    #[error("no file of {project}=={version} on {url} matches")]
    NoFile { project: String, version: String, url: String },
    #[error(
        "the upstream gives no sha256 for it, so it cannot be verified (--allow-unhashed mirrors it anyway, \
         reported unverified)"
    )]
    NoHash { filename: String },
    #[error("{what}: sha256 {actual}, but the upstream says {expected}; nothing stored")]
    Mismatch { what: String, expected: String, actual: String },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("writing a temporary file")]
    Temp(#[source] std::io::Error),
    #[error("{what}: {source}")]
    Index { what: String, source: quarry_index::IndexError },
    #[error("inspecting {filename}")]
    Inspect { filename: String, source: quarry_index::InspectError },
    #[error("the indexer refused it: {reason}")]
    Refused { filename: String, reason: String },
    #[error(
        "the upstream's metadata differs from the wheel's METADATA (sha256 {upstream}, the wheel's {wheel}); \
         nothing stored"
    )]
    MetadataDiffers { filename: String, upstream: String, wheel: String },
}

/// Why a redirect was not followed (the source of a [`MirrorError::Get`]).
#[derive(Debug, thiserror::Error)]
enum RedirectRefused {
    #[error(
        "redirect to {to} refused: another origin than the URL asked for's (allow it with --allow-redirect-origin {origin})"
    )]
    Origin { to: String, origin: String },
    #[error("redirect to {to} refused: not an http or https URL")]
    Scheme { to: String },
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooMany,
}

/// Follow a redirect only within the origin of the URL asked for, or to one of `allowed`.
fn redirect_policy(allowed: Vec<String>) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        // The first of `previous` is the URL asked for.
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(RedirectRefused::TooMany);
        }
        let to = attempt.url();
        if !matches!(to.scheme(), "http" | "https") {
            let to = to.to_string();
            return attempt.error(RedirectRefused::Scheme { to });
        }
        let origin = to.origin();
        let asked = attempt.previous().first().map(reqwest::Url::origin);
        let spelt = origin.ascii_serialization();
        if asked.as_ref() == Some(&origin) || allowed.contains(&spelt) {
            attempt.follow()
        } else {
            let to = to.to_string();
            attempt.error(RedirectRefused::Origin { to, origin: spelt })
        }
    })
}

/// Mirror `options.wanted` into `options.root` through `indexer`'s store, then reindex once.
/// Fails before any download when a composed root supplies a wanted project; per-file failures
/// are in the report (the rest is still mirrored and indexed).
pub async fn mirror(indexer: &Indexer, options: &MirrorOptions) -> Result<MirrorReport, MirrorError> {
    let store = indexer.store().as_ref();
    check_origins(store, options).await?;
    let client = Fetcher {
        client: crate::http::trusting_ssl_cert_file(
            reqwest::Client::builder()
                .connect_timeout(options.timeout)
                .read_timeout(options.timeout)
                .redirect(redirect_policy(options.redirect_origins.clone())),
        )?
        .build()
        .map_err(MirrorError::Client)?,
        deadline: options.deadline,
    };
    let indexed: BTreeMap<String, String> = read_state(store, &options.root)
        .await?
        .map(|s| s.entries.into_iter().map(|(k, e)| (k, e.sha256)).collect())
        .unwrap_or_default();
    let mut report = MirrorReport {
        root: options.root.to_string(),
        upstream: options.upstream.to_string(),
        files: Vec::new(),
        failures: Vec::new(),
        reindex: None,
    };
    let mut inspections = Inspections::default();
    let temp = tempfile::tempdir().map_err(MirrorError::Temp)?;
    for wanted in &options.wanted {
        let files = match project_files(&client, options, wanted).await {
            Ok(files) => files,
            Err(e) => {
                report.failures.push(format!("{}=={}: {}", wanted.project, wanted.version, error_text(&e)));
                continue;
            }
        };
        for file in files {
            let job = FileJob { fetch: &client, indexer, options, temp: temp.path() };
            match job.run(&file, indexed.get(&file.filename), &mut inspections).await {
                Ok(done) => report.files.push(done),
                Err(e) => report.failures.push(format!("{}: {}", file.filename, error_text(&e))),
            }
        }
    }
    let reindex = indexer
        .run(quarry_index::Request::new(options.root.clone()).knowing(inspections))
        .await
        .map_err(|source| MirrorError::Index { what: format!("reindexing {}", options.root), source })?;
    report.reindex = Some(reindex);
    Ok(report)
}

fn error_text(e: &MirrorError) -> String {
    quarry_store::error_chain(e)
}

/// Refuse a wanted project that a composed root supplies (naming both roots): the composed
/// roots' projects and the wanted ones, in that order, through [`quarry_index::origin::conflicts`]
/// (conflicts among the composed roots themselves are not this mirror's to refuse).
async fn check_origins(store: &dyn Store, options: &MirrorOptions) -> Result<(), MirrorError> {
    let mut sets = Vec::with_capacity(options.compose_with.len() + 1);
    for other in &options.compose_with {
        let state = read_state(store, other).await?.unwrap_or_default();
        sets.push((other.to_string(), other.kind(), projects(other.kind(), &state)));
    }
    let wanted = options.wanted.iter().map(|w| w.project.as_str().to_owned()).collect();
    let root = options.root.to_string();
    sets.push((root.clone(), options.root.kind(), wanted));
    match quarry_index::origin::conflicts(&sets).into_iter().find(|c| c.second == root) {
        Some(conflict) => Err(conflict.into()),
        None => Ok(()),
    }
}

/// The HTTP client with the mirror's limits: redirects kept to an origin, every request within
/// a deadline, every body within a size.
struct Fetcher {
    client: reqwest::Client,
    deadline: Duration,
}

impl Fetcher {
    /// `fetch` (a request from its start to its body's end), stopped at the deadline.
    async fn within_deadline<T>(
        &self,
        url: &reqwest::Url,
        fetch: impl Future<Output = Result<T, MirrorError>>,
    ) -> Result<T, MirrorError> {
        tokio::time::timeout(self.deadline, fetch)
            .await
            .unwrap_or_else(|_| Err(MirrorError::Deadline { url: url.to_string(), limit: self.deadline }))
    }

    /// GET `url`: the answer once its status is a success and its `Content-Length` (if any)
    /// is at most `limit`.
    async fn get(
        &self,
        url: &reqwest::Url,
        accept: &str,
        limit: u64,
        why: &'static str,
    ) -> Result<reqwest::Response, MirrorError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(MirrorError::Scheme { url: url.to_string() });
        }
        let response = self
            .client
            .get(url.clone())
            .header(reqwest::header::ACCEPT, accept)
            .send()
            .await
            .map_err(|source| MirrorError::Get { url: url.to_string(), source })?;
        if !response.status().is_success() {
            return Err(MirrorError::Status { url: url.to_string(), status: response.status() });
        }
        match response.content_length() {
            Some(length) if length > limit => {
                Err(MirrorError::LengthTooLarge { url: url.to_string(), length, limit, why })
            }
            _ => Ok(response),
        }
    }

    /// GET `url` into memory (at most `limit` bytes): the body and its `Content-Type`.
    async fn get_small(
        &self,
        url: &reqwest::Url,
        accept: &str,
        limit: u64,
        why: &'static str,
    ) -> Result<(Vec<u8>, String), MirrorError> {
        self.within_deadline(url, async {
            let response = self.get(url, accept, limit, why).await?;
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let mut body = Vec::new();
            let mut stream = response.bytes_stream();
            while let Some(chunk) = stream.next().await {
                body.extend_from_slice(&chunk.map_err(|source| MirrorError::Get { url: url.to_string(), source })?);
                if body.len() as u64 > limit {
                    return Err(MirrorError::TooLarge { url: url.to_string(), limit, why });
                }
            }
            Ok((body, content_type))
        })
        .await
    }

    /// GET `url` into the new file `path` (at most `limit` bytes): its sha256. On an error the
    /// caller removes the file.
    async fn download(
        &self,
        url: &reqwest::Url,
        path: &Path,
        limit: u64,
        why: &'static str,
    ) -> Result<String, MirrorError> {
        self.within_deadline(url, async {
            let response = self.get(url, "*/*", limit, why).await?;
            let mut out = tokio::fs::File::create(path).await.map_err(MirrorError::Temp)?;
            let mut hasher = Sha256Hex::default();
            let mut size = 0u64;
            let mut stream = response.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|source| MirrorError::Get { url: url.to_string(), source })?;
                size += chunk.len() as u64;
                if size > limit {
                    return Err(MirrorError::TooLarge { url: url.to_string(), limit, why });
                }
                hasher.update(&chunk);
                out.write_all(&chunk).await.map_err(MirrorError::Temp)?;
            }
            out.flush().await.map_err(MirrorError::Temp)?;
            Ok(hasher.finish())
        })
        .await
    }
}

/// The upstream's files of `wanted` that pass the filters.
async fn project_files(
    client: &Fetcher,
    options: &MirrorOptions,
    wanted: &Wanted,
) -> Result<Vec<UpstreamFile>, MirrorError> {
    let url = options
        .upstream
        .join(&format!("{}/", wanted.project))
        .map_err(|e| MirrorError::Page { url: options.upstream.to_string(), reason: e.to_string() })?;
    let (body, content_type) = client.get_small(&url, ACCEPT, MAX_PAGE, "the largest page read").await?;
    let page = |reason: String| MirrorError::Page { url: url.to_string(), reason };
    let files = if content_type.starts_with("application/vnd.pypi.simple.v1+json") {
        quarry_inspect::simple_page::parse_json(&url, &body).map_err(page)?
    } else {
        quarry_inspect::simple_page::parse_html(&url, &String::from_utf8_lossy(&body)).map_err(page)?
    };
    let chosen: Vec<UpstreamFile> = files.into_iter().filter(|f| wanted_file(options, wanted, &f.filename)).collect();
    if chosen.is_empty() {
        return Err(MirrorError::NoFile {
            project: wanted.project.to_string(),
            version: wanted.version.to_string(),
            url: url.to_string(),
        });
    }
    Ok(chosen)
}

/// Whether `filename` is a file of `wanted` that passes the platform and Python filters.
fn wanted_file(options: &MirrorOptions, wanted: &Wanted, filename: &str) -> bool {
    let Ok(parsed) = filename.parse::<DistFilename>() else { return false };
    if *parsed.name() != wanted.project || *parsed.version() != wanted.version {
        return false;
    }
    let DistFilename::Wheel(wheel) = parsed else { return true };
    let platform_ok = options.platform_tags.is_empty()
        || wheel.platform_tags.iter().any(|t| t == "any" || options.platform_tags.contains(t));
    let python_ok = options.python_version.is_none_or(|(major, minor)| {
        wheel.python_tags.iter().any(|t| python_tag_matches(t, &wheel.abi_tags, major, minor))
    });
    platform_ok && python_ok
}

/// Whether a wheel's python tag installs on Python `major.minor` (`py3`, `py312`, `cp312`, or
/// `cp3N` with `abi3` for N ≤ minor).
fn python_tag_matches(tag: &str, abis: &[String], major: u32, minor: u32) -> bool {
    let exact = format!("{major}{minor}");
    if tag == format!("py{major}") || tag == format!("py{exact}") || tag == format!("cp{exact}") {
        return true;
    }
    let abi3 = abis.iter().any(|a| a == "abi3");
    let Some(digits) = tag.strip_prefix("cp").and_then(|d| d.strip_prefix(&major.to_string())) else {
        return false;
    };
    abi3 && digits.parse::<u32>().is_ok_and(|m| m <= minor)
}

/// Mirroring one file.
struct FileJob<'a> {
    fetch: &'a Fetcher,
    indexer: &'a Indexer,
    options: &'a MirrorOptions,
    temp: &'a Path,
}

impl FileJob<'_> {
    /// Store `file` (unless present), verify it, and prepare its inspection with the upstream's
    /// upload-time.
    async fn run(
        &self,
        file: &UpstreamFile,
        indexed_sha256: Option<&String>,
        inspections: &mut Inspections,
    ) -> Result<MirroredFile, MirrorError> {
        let expected = file.sha256.clone();
        if expected.is_none() && !self.options.allow_unhashed {
            return Err(MirrorError::NoHash { filename: file.filename.clone() });
        }
        if !matches!(file.url.scheme(), "http" | "https") {
            return Err(MirrorError::Scheme { url: file.url.to_string() });
        }
        let limit = self.options.max_file_size;
        if let Some(size) = file.size.filter(|s| *s > limit) {
            return Err(MirrorError::DeclaredTooLarge { filename: file.filename.clone(), size, limit });
        }
        let upload_time = file.upload_time.as_deref().and_then(normalize_time);
        let done = |status, sha256: &str, upstream_metadata| MirroredFile {
            filename: file.filename.clone(),
            sha256: sha256.to_owned(),
            status,
            upload_time: upload_time.clone(),
            upstream_metadata,
            verified: expected.is_some(),
        };
        let root = &self.options.root;
        if let Some(sha) = indexed_sha256 {
            return match &expected {
                Some(expected) if sha != expected => {
                    Err(mismatch(format!("{} already in {root}", file.filename), expected, sha))
                }
                _ => Ok(done("present", sha, file.metadata.is_some())),
            };
        }
        let store = self.indexer.store().as_ref();
        let key = root.key(&file.filename).map_err(StoreError::from)?;
        let stored = match store.head(&key).await {
            Ok(meta) => {
                let stored = quarry_store::stored_sha256(store, &key, meta.sha256.clone()).await?;
                if let Some(expected) = expected.as_ref().filter(|e| **e != stored) {
                    return Err(mismatch(format!("{key} already stored"), expected, &stored));
                }
                Some((meta, stored))
            }
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e.into()),
        };
        // The upstream's metadata is fetched before the file, and compared with the file's own
        // before anything is stored.
        let upstream_metadata = self.upstream_metadata(file).await?;
        let (status, object, sha256) = match stored {
            Some((meta, sha256)) => ("stored", meta, sha256),
            None => {
                let sha256 = self.download_check_and_store(file, &key, expected.as_deref(), &upstream_metadata).await?;
                ("mirrored", store.head(&key).await?, sha256)
            }
        };
        let mut found = self.inspect_stored(&object, &sha256).await?;
        check_metadata(&file.filename, upstream_metadata.as_deref(), &found)?;
        if let Some(time) = upload_time.clone() {
            found.entry.upload_time = time;
        }
        inspections.insert(&object.key, found);
        if expected.is_none() {
            tracing::warn!(file = %file.filename, sha256, "the upstream gave no sha256; mirrored unverified");
        }
        Ok(done(status, &sha256, upstream_metadata.is_some()))
    }

    /// The upstream's `.metadata` of a wheel, checked against its hash, when it offers one.
    async fn upstream_metadata(&self, file: &UpstreamFile) -> Result<Option<bytes::Bytes>, MirrorError> {
        let Some(expected) = &file.metadata else { return Ok(None) };
        if !file.filename.ends_with(".whl") {
            // Only a wheel's METADATA is published.
            return Ok(None);
        }
        let url = reqwest::Url::parse(&format!("{}.metadata", file.url))
            .map_err(|e| MirrorError::Page { url: file.url.to_string(), reason: e.to_string() })?;
        let (body, _) = self.fetch.get_small(&url, "*/*", MAX_METADATA_SIZE, "the largest METADATA read").await?;
        let actual = sha256_hex(&body);
        if let Some(expected) = expected.as_ref().filter(|e| **e != actual) {
            return Err(mismatch(format!("{}.metadata", file.filename), expected, &actual));
        }
        Ok(Some(body.into()))
    }

    /// Download `file` into a temporary directory of its own (removed whatever happens), check
    /// its sha256 against `expected`, inspect it there as the indexer will and compare its
    /// METADATA with the upstream's, and only then store it; its sha256.
    async fn download_check_and_store(
        &self,
        file: &UpstreamFile,
        key: &Key,
        expected: Option<&str>,
        upstream_metadata: &Option<bytes::Bytes>,
    ) -> Result<String, MirrorError> {
        let (limit, why) = match file.size {
            Some(size) => (size, "the upstream's size"),
            None => (self.options.max_file_size, "--max-file-size"),
        };
        let scratch = tempfile::Builder::new().prefix("file-").tempdir_in(self.temp).map_err(MirrorError::Temp)?;
        let path = scratch.path().join(key.as_str());
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(MirrorError::Temp)?;
        }
        let actual = self.fetch.download(&file.url, &path, limit, why).await?;
        if let Some(expected) = expected.filter(|e| *e != actual) {
            return Err(mismatch("the downloaded bytes".to_owned(), expected, &actual));
        }
        // The scratch directory as a store of its own: the file is inspected in place, so a
        // file the indexer refuses (or whose METADATA is not the upstream's) is never stored.
        let scratch_store: Arc<dyn Store> = Arc::new(LocalStore::open(scratch.path())?);
        let mut object = scratch_store.head(key).await?;
        object.sha256 = Some(actual.clone());
        let found = inspect_object(&scratch_store, &object).await?;
        check_metadata(&file.filename, upstream_metadata.as_deref(), &found)?;
        quarry_store::upload_file(self.indexer.store().as_ref(), key, &path, |_| {}).await?;
        Ok(actual)
    }

    /// Inspect the stored `object` (of sha256 `sha256`) as the indexer would.
    async fn inspect_stored(&self, object: &ObjectMeta, sha256: &str) -> Result<Inspected, MirrorError> {
        let mut object = object.clone();
        object.sha256 = Some(sha256.to_owned());
        inspect_object(self.indexer.store(), &object).await
    }
}

/// [`quarry_index::inspect`], its refusal named as the mirror's.
async fn inspect_object(store: &Arc<dyn Store>, object: &ObjectMeta) -> Result<Inspected, MirrorError> {
    let filename = object.key.filename().to_owned();
    quarry_index::inspect(store, object).await.map_err(|e| match e {
        quarry_index::InspectError::Rejected(reason) => MirrorError::Refused { filename, reason },
        source => MirrorError::Inspect { filename, source },
    })
}

/// The upstream's metadata, when it offered some for a wheel, must be the wheel's `METADATA`.
fn check_metadata(filename: &str, upstream: Option<&[u8]>, found: &Inspected) -> Result<(), MirrorError> {
    let (Some(upstream), Some(wheel)) = (upstream, found.core_metadata.as_deref()) else { return Ok(()) };
    if upstream == wheel {
        return Ok(());
    }
    Err(MirrorError::MetadataDiffers {
        filename: filename.to_owned(),
        upstream: sha256_hex(upstream),
        wheel: sha256_hex(wheel),
    })
}

fn mismatch(what: String, expected: &str, actual: &str) -> MirrorError {
    MirrorError::Mismatch { what, expected: expected.to_owned(), actual: actual.to_owned() }
}

/// An upstream `upload-time` in the form Quarry's pages write (microseconds, `Z`); `None`
/// when it does not parse.
pub fn normalize_time(text: &str) -> Option<String> {
    text.parse::<jiff::Timestamp>().ok().map(quarry_index::upload_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_parse_and_bad_lines_are_named() {
        let wanted = parse_requirements("# base\nNumPy == 2.1.0\n\nfoo_bar==1.0  # pinned\n").unwrap();
        assert_eq!(wanted.len(), 2);
        assert_eq!(wanted[0].project.as_str(), "numpy");
        assert_eq!(wanted[1].project.as_str(), "foo-bar");
        assert_eq!(wanted[1].version.to_string(), "1.0");
        let err = parse_requirements("foo==1\nbar>=2\n").unwrap_err();
        assert!(err.starts_with("line 2: \"bar>=2\": expected NAME==VERSION"), "{err}");
    }

    #[test]
    fn origins_are_scheme_host_and_port() {
        assert_eq!(origin("https://Files.Example").as_deref(), Ok("https://files.example"));
        assert_eq!(origin("https://files.example:443/").as_deref(), Ok("https://files.example"));
        assert_eq!(origin("http://127.0.0.1:8080").as_deref(), Ok("http://127.0.0.1:8080"));
        assert!(origin("file:///etc").unwrap_err().contains("not an http or https origin"));
        assert!(origin("https://user@files.example").unwrap_err().contains("nothing more"));
        assert!(origin("https://files.example/x").unwrap_err().contains("nothing more"));
        assert!(origin("files.example").is_err());
    }

    #[test]
    fn python_tags_and_times() {
        let abi3 = ["abi3".to_owned()];
        assert!(python_tag_matches("py3", &[], 3, 12));
        assert!(python_tag_matches("cp312", &[], 3, 12));
        assert!(!python_tag_matches("cp311", &[], 3, 12));
        assert!(python_tag_matches("cp38", &abi3, 3, 12));
        assert!(!python_tag_matches("cp313", &abi3, 3, 12));
        assert_eq!(normalize_time("2026-01-02T03:04:05Z").as_deref(), Some("2026-01-02T03:04:05.000000Z"));
        assert_eq!(normalize_time("yesterday"), None);
    }

    #[test]
    fn report_text_snapshot() {
        let file = |filename: &str, status| MirroredFile {
            filename: filename.into(),
            sha256: "ab".repeat(32),
            status,
            upload_time: Some("2026-01-02T03:04:05.000000Z".into()),
            upstream_metadata: true,
            verified: true,
        };
        let report = MirrorReport {
            root: "python-deps/".into(),
            upstream: "http://127.0.0.1:8000/simple/".into(),
            files: vec![file("foo-1.0-py3-none-any.whl", "mirrored"), file("bar-1.0.tar.gz", "present")],
            failures: vec![
                "baz-1.0.tar.gz: the downloaded bytes: sha256 00, but the upstream says ff; nothing stored".into(),
            ],
            reindex: Some(ReindexReport { root: "python-deps/".into(), ..ReindexReport::default() }),
        };
        insta::assert_snapshot!("mirror_report_text", report.to_string());
    }
}
