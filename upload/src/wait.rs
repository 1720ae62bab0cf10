//! Read your writes (`quarry upload --wait`): after an upload, wait until the indexes clients
//! read list every uploaded file with its sha256, or fail after a deadline naming what is
//! missing. On S3 the Lambda indexes asynchronously (an SQS batching window, then its run), so
//! a job started right after an upload could otherwise miss its own packages.
//!
//! What is read, per uploaded file, through a [`Reader`] (the store itself, or a server over
//! HTTP): a wheel or sdist must be on its project's simple page (`simple/{project}/index.html`,
//! `href="…{file}#sha256={sha256}"`) and, where the root has one, on the find-links page; a
//! `.deb` in a `Packages` index its root's `Release` names (`SHA256: {sha256}`); an `.rpm` in the
//! `primary.xml.gz` its `repodata/repomd.xml` names; any other file (artifact archives, logs)
//! on its directory's listing page with its sha256.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quarry_index::{RepoKind, RepoRoot};
use quarry_packaging::DistFilename;
use quarry_store::{Key, Store, StoreExt as _};

/// The largest index object read while waiting.
const MAX_INDEX: u64 = 256 * 1024 * 1024;

/// Why waiting failed.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The deadline passed with files not yet listed.
    #[error("after {waited:?} the indexes still do not list {}: {}", .missing.len(), .missing.join("; "))]
    NotIndexed {
        /// How long it waited.
        waited: Duration,
        /// Each missing file with the index that does not list it.
        missing: Vec<String>,
    },
    /// An index could not be read (other than not being there yet).
    #[error("reading {what}: {message}")]
    Read {
        /// The key or URL read.
        what: String,
        /// What went wrong.
        message: String,
    },
}

/// Reads index objects by key: from a store, or from a server below its root URL.
#[async_trait::async_trait]
pub trait Reader: Send + Sync {
    /// The object's bytes, `None` while it does not exist.
    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, WaitError>;
}

/// Index objects read straight from a store (local or S3).
pub struct StoreReader(pub Arc<dyn Store>);

#[async_trait::async_trait]
impl Reader for StoreReader {
    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, WaitError> {
        let read_error = |message: String| WaitError::Read { what: key.to_owned(), message };
        let key = Key::new(key).map_err(|e| read_error(e.to_string()))?;
        match self.0.get_bytes(&key, MAX_INDEX).await {
            Ok((_, bytes)) => Ok(Some(bytes.to_vec())),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(read_error(quarry_store::error_chain(&e))),
        }
    }
}

/// Index objects read from a server: `GET {base}/{key}`.
pub struct HttpReader {
    client: reqwest::Client,
    base: reqwest::Url,
}

impl HttpReader {
    /// A reader of the server whose root is `base` (its origin: keys are absolute).
    pub fn new(client: reqwest::Client, base: reqwest::Url) -> Self {
        Self { client, base }
    }
}

#[async_trait::async_trait]
impl Reader for HttpReader {
    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, WaitError> {
        let url = self.base.join(&format!("/{}", quarry_store::url::encode_path(key)));
        let url = url.map_err(|e| WaitError::Read { what: key.to_owned(), message: e.to_string() })?;
        let read_error = |message: String| WaitError::Read { what: url.to_string(), message };
        let response = self.client.get(url.clone()).send().await.map_err(|e| read_error(e.to_string()))?;
        match response.status() {
            reqwest::StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => {
                Ok(Some(response.bytes().await.map_err(|e| read_error(e.to_string()))?.to_vec()))
            }
            status => Err(read_error(format!("answered {status}"))),
        }
    }
}

/// One uploaded file to wait for: its key and sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenFile {
    pub key: String,
    pub sha256: String,
}

/// Waits until every file of `files` is listed with its sha256 (polling, at most until
/// `timeout` has passed): `Ok` with how long it took, or [`WaitError::NotIndexed`] naming
/// each file still missing and where.
pub async fn wait_indexed(
    reader: &dyn Reader,
    files: &[WrittenFile],
    timeout: Duration,
) -> Result<Duration, WaitError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(100);
    loop {
        let missing = missing(reader, files).await?;
        if missing.is_empty() {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= timeout {
            return Err(WaitError::NotIndexed { waited: started.elapsed(), missing });
        }
        tokio::time::sleep(pause.min(timeout.saturating_sub(started.elapsed()))).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// Each file not yet listed, with the index that should list it (one read per index object).
async fn missing(reader: &dyn Reader, files: &[WrittenFile]) -> Result<Vec<String>, WaitError> {
    let mut cache: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
    let mut missing = Vec::new();
    for file in files {
        let Some(name) = file.key.rsplit('/').next() else { continue };
        // A client knows no server's `[layout]`: run roots only (as it always did).
        let layout = quarry_layout::config::Layout::default();
        let root = Key::new(&file.key).ok().and_then(|k| RepoRoot::for_key(&k, &layout));
        let wanted: Vec<(String, Vec<String>)> = match root.as_ref().map(|r| (r, r.kind())) {
            Some((root, RepoKind::Pip)) => pip_checks(reader, &mut cache, root, name, &file.sha256).await?,
            Some((root, RepoKind::Apt)) => {
                vec![(format!("{root}dists/stable/ (Packages)"), vec![apt_packages(reader, &mut cache, root).await?])]
            }
            Some((root, RepoKind::Dnf)) => {
                vec![(format!("{root}repodata/ (primary)"), vec![dnf_primary(reader, &mut cache, root).await?])]
            }
            None => {
                let dir = file.key.strip_suffix(name).unwrap_or_default();
                let page = format!("{dir}index.html");
                vec![(page.clone(), vec![text(read_cached(reader, &mut cache, &page).await?)])]
            }
        };
        for (index, texts) in wanted {
            let listed = texts.iter().any(|t| listed_in(t, name, &file.sha256, root.as_ref().map(RepoRoot::kind)));
            if !listed {
                missing.push(format!("{} (sha256 {}) on {index}", file.key, file.sha256));
            }
        }
    }
    Ok(missing)
}

/// A wheel's or sdist's indexes: its project's simple page, and the find-links page where the
/// root has one (a root whose find-links page is off has none: not waited for).
async fn pip_checks(
    reader: &dyn Reader,
    cache: &mut BTreeMap<String, Option<Vec<u8>>>,
    root: &RepoRoot,
    name: &str,
    _sha256: &str,
) -> Result<Vec<(String, Vec<String>)>, WaitError> {
    let project = name.parse::<DistFilename>().map(|d| d.name().as_str().to_owned()).unwrap_or_default();
    let simple = format!("{root}simple/{project}/index.html");
    let mut checks = vec![(simple.clone(), vec![text(read_cached(reader, cache, &simple).await?)])];
    let find_links = format!("{root}index.html");
    if let Some(page) = read_cached(reader, cache, &find_links).await? {
        checks.push((find_links, vec![String::from_utf8_lossy(&page).into_owned()]));
    }
    Ok(checks)
}

/// Every `Packages` index the apt root's `Release` names, concatenated (empty while none).
async fn apt_packages(
    reader: &dyn Reader,
    cache: &mut BTreeMap<String, Option<Vec<u8>>>,
    root: &RepoRoot,
) -> Result<String, WaitError> {
    let release = text(read_cached(reader, cache, &format!("{root}dists/stable/Release")).await?);
    let mut paths: Vec<String> = release
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|p| p.ends_with("/Packages"))
        .map(str::to_owned)
        .collect();
    paths.sort();
    paths.dedup();
    let mut all = String::new();
    for path in paths {
        all.push_str(&text(read_cached(reader, cache, &format!("{root}dists/stable/{path}")).await?));
    }
    Ok(all)
}

/// The dnf root's primary metadata, decompressed (empty while there is none).
async fn dnf_primary(
    reader: &dyn Reader,
    cache: &mut BTreeMap<String, Option<Vec<u8>>>,
    root: &RepoRoot,
) -> Result<String, WaitError> {
    let repomd = text(read_cached(reader, cache, &format!("{root}repodata/repomd.xml")).await?);
    let Some(at) = repomd.find("type=\"primary\"") else { return Ok(String::new()) };
    let Some(href) = repomd[at..].split("href=\"").nth(1).and_then(|h| h.split('"').next()) else {
        return Ok(String::new());
    };
    let Some(bytes) = read_cached(reader, cache, &format!("{root}{href}")).await? else { return Ok(String::new()) };
    if !href.ends_with(".gz") {
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    let mut out = String::new();
    let mut decoder = flate2::read::MultiGzDecoder::new(&bytes[..]).take(MAX_INDEX);
    decoder
        .read_to_string(&mut out)
        .map_err(|e| WaitError::Read { what: format!("{root}{href}"), message: e.to_string() })?;
    Ok(out)
}

/// Whether `index` lists `name` with `sha256`, as its format spells it.
fn listed_in(index: &str, name: &str, sha256: &str, kind: Option<RepoKind>) -> bool {
    match kind {
        // An href `…{name}#sha256={sha256}` (names percent-encoded as on the pages).
        Some(RepoKind::Pip) => {
            let encoded = quarry_store::url::encode_segment(name);
            [name, encoded.as_str()].iter().any(|n| index.contains(&format!("{n}#sha256={sha256}")))
        }
        Some(RepoKind::Apt) => index.contains(&format!("SHA256: {sha256}")),
        Some(RepoKind::Dnf) => index.contains(&format!(">{sha256}</checksum>")),
        None => index.contains(name) && index.contains(sha256),
    }
}

async fn read_cached(
    reader: &dyn Reader,
    cache: &mut BTreeMap<String, Option<Vec<u8>>>,
    key: &str,
) -> Result<Option<Vec<u8>>, WaitError> {
    if let Some(hit) = cache.get(key) {
        return Ok(hit.clone());
    }
    let read = reader.read(key).await?;
    cache.insert(key.to_owned(), read.clone());
    Ok(read)
}

fn text(bytes: Option<Vec<u8>>) -> String {
    bytes.map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use quarry_store::{MemoryStore, PutOptions};

    use super::*;

    #[test]
    fn each_format_lists_a_file_its_own_way() {
        let sha = "ab".repeat(32);
        let page = format!(r#"<a href="../../x_y-1.0-py3-none-any.whl#sha256={sha}">"#);
        assert!(listed_in(&page, "x_y-1.0-py3-none-any.whl", &sha, Some(RepoKind::Pip)));
        assert!(!listed_in(&page, "x_y-1.0-py3-none-any.whl", &"cd".repeat(32), Some(RepoKind::Pip)));
        let plus = format!(r#"<a href="t-1.0%2Brocm-py3-none-any.whl#sha256={sha}">"#);
        assert!(listed_in(&plus, "t-1.0+rocm-py3-none-any.whl", &sha, Some(RepoKind::Pip)));
        assert!(listed_in(&format!("Package: a\nSHA256: {sha}\n"), "a.deb", &sha, Some(RepoKind::Apt)));
        let primary = format!(r#"<checksum type="sha256" pkgid="YES">{sha}</checksum>"#);
        assert!(listed_in(&primary, "a.rpm", &sha, Some(RepoKind::Dnf)));
        assert!(listed_in(&format!("a.tar.zst 3 B {sha}"), "a.tar.zst", &sha, None));
    }

    #[tokio::test]
    async fn waiting_ends_when_the_page_lists_the_file_and_names_it_when_it_does_not() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let sha = "ef".repeat(32);
        let file = WrittenFile { key: "1-linux/python/demo-1.0-py3-none-any.whl".into(), sha256: sha.clone() };
        let reader = StoreReader(store.clone());
        let err = wait_indexed(&reader, std::slice::from_ref(&file), Duration::from_millis(300)).await.unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&file.key) && message.contains("simple/demo/index.html"), "{message}");
        let page = format!(r#"<a href="../../demo-1.0-py3-none-any.whl#sha256={sha}">demo</a>"#);
        let key = Key::new("1-linux/python/simple/demo/index.html").unwrap();
        store.put(&key, quarry_store::bytes_stream(page.into_bytes()), PutOptions::default()).await.unwrap();
        assert!(wait_indexed(&reader, &[file], Duration::from_secs(5)).await.is_ok());
    }
}
