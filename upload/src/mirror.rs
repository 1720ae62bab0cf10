//! `quarry mirror`: fill a pip root (a base index such as `python-deps/`) with chosen projects
//! and versions from an upstream PEP 691/503 simple index.
//!
//! Each project page is read as PEP 691 JSON when the upstream offers it, else as PEP 503 HTML.
//! Each chosen file is streamed to a temporary file while its sha256 is computed, compared with
//! the upstream's hash (a mismatch stores nothing), and stored with `If-None-Match` (a
//! different file under the same name is refused). The upstream's PEP 658 metadata is fetched
//! and checked when offered (else the indexer extracts it), and the upstream's `upload-time`
//! becomes the entry's in the root's state, so the mirrored pages show the upstream's hashes
//! and times. The root is reindexed once at the end; a second identical mirror downloads and
//! writes nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use futures_util::StreamExt;
use quarry_index::origin::{OriginConflict, projects};
use quarry_index::{Indexer, Inspections, MAX_METADATA_SIZE, ReindexReport, RepoRoot, read_state};
use quarry_packaging::{DistFilename, PackageName, Version};
use quarry_store::{Key, ObjectMeta, Sha256Hex, Store, StoreError, sha256_hex};
use serde::Serialize;
use tokio::io::AsyncWriteExt;

/// What `Accept` asks of a simple index: JSON first, HTML as a fallback.
const ACCEPT: &str = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01";
/// Largest project page read.
const MAX_PAGE: usize = 16 << 20;

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
}

/// One file of the upstream's project page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamFile {
    pub filename: String,
    pub url: reqwest::Url,
    pub sha256: Option<String>,
    pub upload_time: Option<String>,
    /// The upstream offers `<url>.metadata`, with this sha256 when given.
    pub metadata: Option<Option<String>>,
}

/// What happened to one file.
#[derive(Debug, Clone, Serialize)]
pub struct MirroredFile {
    pub filename: String,
    pub sha256: String,
    /// `mirrored`, `stored` (already in the store, now indexed) or `present` (already indexed).
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload_time: Option<String>,
    /// The metadata sidecar comes from the upstream (`true`) or from the file (`false`).
    pub upstream_metadata: bool,
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
            writeln!(f, "{:<9} {} sha256={}", file.status, file.filename, file.sha256)?;
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

/// Why mirroring could not start or one file failed.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error(transparent)]
    Origin(#[from] OriginConflict),
    #[error("building the HTTP client")]
    Client(#[source] reqwest::Error),
    #[error("GET {url}")]
    Get { url: String, source: reqwest::Error },
    #[error("GET {url}: {status}")]
    Status { url: String, status: reqwest::StatusCode },
    #[error("{url}: {reason}")]
    Page { url: String, reason: String },
    #[error("no file of {project}=={version} on {url} matches")]
    NoFile { project: String, version: String, url: String },
    #[error("{filename}: the upstream gives no sha256 for it, so it cannot be verified")]
    NoHash { filename: String },
    #[error("{what}: sha256 {actual}, but the upstream says {expected}; nothing stored")]
    Mismatch { what: String, expected: String, actual: String },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("writing a temporary file")]
    Temp(#[source] std::io::Error),
    #[error("{what}: {source}")]
    Index { what: String, source: quarry_index::IndexError },
    #[error("{filename}: {source}")]
    Inspect { filename: String, source: quarry_index::InspectError },
    #[error("{filename}: the indexer refused it: {reason}")]
    Refused { filename: String, reason: String },
}

/// Mirror `options.wanted` into `options.root` through `indexer`'s store, then reindex once.
/// Fails before any download when a composed root supplies a wanted project; per-file failures
/// are in the report (the rest is still mirrored and indexed).
pub async fn mirror(indexer: &Indexer, options: &MirrorOptions) -> Result<MirrorReport, MirrorError> {
    let store = indexer.store().as_ref();
    check_origins(store, options).await?;
    let client = reqwest::Client::builder()
        .connect_timeout(options.timeout)
        .read_timeout(options.timeout)
        .build()
        .map_err(MirrorError::Client)?;
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
            let job = FileJob { client: &client, indexer, root: &options.root, temp: temp.path() };
            match job.run(&file, indexed.get(&file.filename), &mut inspections).await {
                Ok(done) => report.files.push(done),
                Err(e) => report.failures.push(format!("{}: {}", file.filename, error_text(&e))),
            }
        }
    }
    let reindex = indexer
        .reindex_inspected(&options.root, inspections)
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

/// GET `url` into memory (at most `limit` bytes): the body and its `Content-Type`.
async fn get_small(
    client: &reqwest::Client,
    url: &reqwest::Url,
    accept: &str,
    limit: usize,
) -> Result<(Vec<u8>, String), MirrorError> {
    let get = |source| MirrorError::Get { url: url.to_string(), source };
    let response = client.get(url.clone()).header(reqwest::header::ACCEPT, accept).send().await.map_err(get)?;
    if !response.status().is_success() {
        return Err(MirrorError::Status { url: url.to_string(), status: response.status() });
    }
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        body.extend_from_slice(&chunk.map_err(get)?);
        if body.len() > limit {
            return Err(MirrorError::Page { url: url.to_string(), reason: format!("larger than {limit} bytes") });
        }
    }
    Ok((body, content_type))
}

/// The upstream's files of `wanted` that pass the filters.
async fn project_files(
    client: &reqwest::Client,
    options: &MirrorOptions,
    wanted: &Wanted,
) -> Result<Vec<UpstreamFile>, MirrorError> {
    let url = options
        .upstream
        .join(&format!("{}/", wanted.project))
        .map_err(|e| MirrorError::Page { url: options.upstream.to_string(), reason: e.to_string() })?;
    let (body, content_type) = get_small(client, &url, ACCEPT, MAX_PAGE).await?;
    let page = |reason: String| MirrorError::Page { url: url.to_string(), reason };
    let files = if content_type.starts_with("application/vnd.pypi.simple.v1+json") {
        crate::mirror_page::parse_json(&url, &body).map_err(page)?
    } else {
        crate::mirror_page::parse_html(&url, &String::from_utf8_lossy(&body)).map_err(page)?
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
    client: &'a reqwest::Client,
    indexer: &'a Indexer,
    root: &'a RepoRoot,
    temp: &'a Path,
}

impl FileJob<'_> {
    /// Store `file` (unless present), verify it, and prepare its inspection with the upstream's
    /// upload-time and metadata.
    async fn run(
        &self,
        file: &UpstreamFile,
        indexed_sha256: Option<&String>,
        inspections: &mut Inspections,
    ) -> Result<MirroredFile, MirrorError> {
        let expected = file.sha256.clone().ok_or_else(|| MirrorError::NoHash { filename: file.filename.clone() })?;
        let upload_time = file.upload_time.as_deref().and_then(normalize_time);
        let done = |status, upstream_metadata| MirroredFile {
            filename: file.filename.clone(),
            sha256: expected.clone(),
            status,
            upload_time: upload_time.clone(),
            upstream_metadata,
        };
        if let Some(sha) = indexed_sha256 {
            if *sha == expected {
                return Ok(done("present", file.metadata.is_some()));
            }
            return Err(mismatch(format!("{} already in {}", file.filename, self.root), &expected, sha));
        }
        let store = self.indexer.store().as_ref();
        let key = self.root.key(&file.filename).map_err(StoreError::from)?;
        let stored = match store.head(&key).await {
            Ok(meta) => {
                let stored = quarry_store::stored_sha256(store, &key, meta.sha256.clone()).await?;
                if stored != expected {
                    return Err(mismatch(format!("{key} already stored"), &expected, &stored));
                }
                Some(meta)
            }
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e.into()),
        };
        // The upstream's metadata is checked before anything is stored.
        let metadata = self.metadata(file).await?;
        let (status, object) = match stored {
            Some(meta) => ("stored", meta),
            None => {
                self.download_and_store(file, &key, &expected).await?;
                ("mirrored", store.head(&key).await?)
            }
        };
        let upstream_metadata = self.inspect(&object, upload_time.clone(), metadata, inspections).await?;
        Ok(done(status, upstream_metadata))
    }

    /// The upstream's `.metadata`, checked against its hash, when it offers one.
    async fn metadata(&self, file: &UpstreamFile) -> Result<Option<bytes::Bytes>, MirrorError> {
        let Some(expected) = &file.metadata else { return Ok(None) };
        let url = reqwest::Url::parse(&format!("{}.metadata", file.url))
            .map_err(|e| MirrorError::Page { url: file.url.to_string(), reason: e.to_string() })?;
        let limit = usize::try_from(MAX_METADATA_SIZE).unwrap_or(usize::MAX);
        let (body, _) = get_small(self.client, &url, "*/*", limit).await?;
        let actual = sha256_hex(&body);
        if let Some(expected) = expected.as_ref().filter(|e| **e != actual) {
            return Err(mismatch(format!("{}.metadata", file.filename), expected, &actual));
        }
        Ok(Some(body.into()))
    }

    /// Stream the file to a temporary file, hashing; store it only when the hash matches.
    async fn download_and_store(&self, file: &UpstreamFile, key: &Key, expected: &str) -> Result<(), MirrorError> {
        let get = |source| MirrorError::Get { url: file.url.to_string(), source };
        let response = self.client.get(file.url.clone()).send().await.map_err(get)?;
        if !response.status().is_success() {
            return Err(MirrorError::Status { url: file.url.to_string(), status: response.status() });
        }
        let path = self.temp.join(&file.filename);
        let mut out = tokio::fs::File::create(&path).await.map_err(MirrorError::Temp)?;
        let mut hasher = Sha256Hex::default();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(get)?;
            hasher.update(&chunk);
            out.write_all(&chunk).await.map_err(MirrorError::Temp)?;
        }
        out.flush().await.map_err(MirrorError::Temp)?;
        drop(out);
        let actual = hasher.finish();
        let result = if actual == expected {
            quarry_store::upload_file(self.indexer.store().as_ref(), key, &path, |_| {})
                .await
                .map(drop)
                .map_err(Into::into)
        } else {
            Err(mismatch("the downloaded bytes".to_owned(), expected, &actual))
        };
        let _ = tokio::fs::remove_file(&path).await;
        result
    }

    /// Inspect the stored file as the indexer would, with the upstream's upload-time and
    /// metadata in place of the store's; true when the metadata is the upstream's.
    async fn inspect(
        &self,
        object: &ObjectMeta,
        upload_time: Option<String>,
        metadata: Option<bytes::Bytes>,
        inspections: &mut Inspections,
    ) -> Result<bool, MirrorError> {
        let key = &object.key;
        let filename = key.filename().to_owned();
        let mut found = quarry_index::inspect(self.indexer.store(), object).await.map_err(|e| match e {
            quarry_index::InspectError::Rejected(reason) => MirrorError::Refused { filename: filename.clone(), reason },
            source => MirrorError::Inspect { filename: filename.clone(), source },
        })?;
        if let Some(time) = upload_time {
            found.entry.upload_time = time;
        }
        let upstream = metadata.is_some() && found.core_metadata.is_some();
        if let Some(body) = metadata.filter(|_| found.core_metadata.is_some()) {
            found.entry.core_metadata_sha256 = Some(sha256_hex(&body));
            found.core_metadata = Some(body);
        }
        inspections.insert(key, found);
        Ok(upstream)
    }
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
