//! The artifact listings of a CI run: `{run}-{platform}/index.html` (and one per directory
//! below it that is not a package repo), a table of the objects there with sizes, times and
//! sha256, in the layout of TheRock's server-side `generate_s3_index.py` (Name / Size /
//! Modified, subdirectories as `name/` rows linking `name/index.html`, names in codepoint
//! order) plus a SHA256 column. A subdirectory without a page of its own (`packages/`, a pip
//! root not indexed yet) is a row without a link: a listing names only pages that exist.
//!
//! A listing needs no committed state to be race-free: each writer renders what it listed,
//! writes the page, lists again and rewrites until the two listings agree. The last page
//! written is therefore always followed by a listing that matches it, whoever wrote it, and
//! every later upload brings its own event. A cache object (`.quarry-listing.json`) keeps the
//! sha256s already read, so an event costs two listings and reads only what is new.
//!
//! A tarball directory the layout configures (`kind = "tarball"`, the `therock-v5` preset's
//! `v5/rocm/{product}/tarball/`) is listed the same way, its page the facts of TheRock's
//! `index_generation_s3_tar.py` ([`render_tarball_index`]): titled `Tarball index`, only the
//! `*.tar.gz` files directly in it, newest first, each with the GPU family its name gives
//! (the first `gfx…` in it, as that script's filter does), plus the size, time and sha256.

use std::collections::BTreeMap;

use askama::Template;
use bytes::Bytes;
use quarry_layout as layout;
use quarry_store::{Key, KeyError, PutOptions, Store, StoreError, StoreExt};
use serde::{Deserialize, Serialize};

/// The page written in each listed directory.
pub const LISTING_PAGE: &str = "index.html";
/// The cache of sha256s already read, per directory.
pub const LISTING_CACHE: &str = ".quarry-listing.json";
/// Suffix of the checksum files CI uploads beside each archive (`<hex>  <name>` or `<hex>`).
pub const SHA256SUM_SUFFIX: &str = ".sha256sum";
const MAX_SHA256SUM: u64 = 4096;
const MAX_CACHE: u64 = 64 * 1024 * 1024;
/// Largest listing page read back to verify it.
const MAX_LISTING_PAGE: u64 = 256 * 1024 * 1024;
const MAX_PASSES: u32 = 10;

/// A directory of a CI run that gets a listing: the run root `…/{run}-{platform}/` or a
/// directory below it outside the package repos (`python/`, `packages/`), as
/// [`layout::config::Layout::is_listed`] tells, or a tarball directory the layout configures
/// (which it carries: its page is a tarball index).
/// Ordered deepest first (then by name): whatever refreshes listings in order refreshes a
/// directory's before its parent's, which links a subdirectory only once its page exists.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListingDir(String, bool);

impl ListingDir {
    fn depth(&self) -> usize {
        self.0.trim_end_matches('/').matches('/').count()
    }
}

impl Ord for ListingDir {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.depth().cmp(&self.depth()).then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for ListingDir {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl ListingDir {
    /// The listing the object at `key` appears in, if any. The listing's own outputs and
    /// anything inside a package repo have none.
    pub fn for_key(key: &Key, layout: &layout::config::Layout) -> Option<Self> {
        let name = key.filename();
        if name == LISTING_PAGE || name == LISTING_CACHE {
            return None;
        }
        Self::new(key.parent_prefix(), layout)
    }

    /// `prefix` (ending in `/`) as a listed directory, if it is one: a run's, or a tarball
    /// directory the layout configures (never inside the audit log,
    /// [`crate::ops::audit_log::AUDIT_PREFIX`], though it names runs).
    pub fn new(prefix: &str, layout: &layout::config::Layout) -> Option<Self> {
        let trimmed = prefix.trim_end_matches('/');
        if crate::ops::audit_log::is_audit_path(prefix) {
            return None;
        }
        let tarball = !trimmed.is_empty() && tarball_dir(layout, trimmed);
        (tarball || layout.is_listed(trimmed)).then(|| Self(format!("{trimmed}/"), tarball))
    }

    /// Whether this is a configured tarball directory (its page a tarball index).
    pub fn is_tarball_index(&self) -> bool {
        self.1
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This directory and each parent up to the run root, deepest first: a new directory
    /// must appear as a row in its parent's listing (in `layout`, this directory's).
    pub fn with_parents(&self, layout: &layout::config::Layout) -> Vec<Self> {
        let mut out = vec![self.clone()];
        let mut current = self.0.trim_end_matches('/');
        while let Some((parent, _)) = current.rsplit_once('/') {
            match Self::new(&format!("{parent}/"), layout) {
                Some(dir) => out.push(dir),
                None => break,
            }
            current = parent;
        }
        out
    }

    /// The last path segment, the page's title (`12345-linux`).
    pub fn title(&self) -> &str {
        self.0.trim_end_matches('/').rsplit('/').next().unwrap_or_default()
    }

    fn key(&self, name: &str) -> Result<Key, KeyError> {
        Key::join(&self.0, name)
    }
}

impl std::fmt::Display for ListingDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One row of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingEntry {
    pub name: String,
    /// `None` for a subdirectory.
    pub size: Option<u64>,
    pub modified: Option<jiff::Timestamp>,
    pub sha256: Option<String>,
    /// [`quarry_store::ObjectMeta::version`]: changes when the object is replaced.
    pub etag: String,
    /// A subdirectory whose `index.html` exists (its own listing, or a pip root's find-links
    /// page): its row links there. A subdirectory without one (`packages/`) is listed
    /// unlinked: no row names a page that is not there.
    pub page: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Cache {
    /// name → (object version, sha256)
    sha256: BTreeMap<String, (String, String)>,
}

/// TheRock's sizes: 1024-based, truncated, a space before the unit.
pub fn human_size(size: u64) -> String {
    const UNITS: [(&str, u64); 5] =
        [("PB", 1 << 50), ("TB", 1 << 40), ("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)];
    for (unit, factor) in UNITS {
        if size >= factor {
            return format!("{} {unit}", size / factor);
        }
    }
    format!("{size} B")
}

struct Row {
    href: String,
    name: String,
    size: String,
    size_bytes: String,
    datetime: String,
    modified: String,
    sha256: String,
}

#[derive(Template)]
#[template(path = "listing.html")]
struct ListingPage<'a> {
    title: &'a str,
    rows: Vec<Row>,
}

/// Whether `layout` makes `prefix` a tarball directory.
fn tarball_dir(layout: &layout::config::Layout, prefix: &str) -> bool {
    let rule = layout.rule_for(prefix);
    rule.is_some_and(|r| r.kind == layout::config::RootKind::Tarball)
}

/// The GPU family a tarball's name gives, as `index_generation_s3_tar.py`'s filter reads it:
/// the first `gfx` (any case) followed by digits and then letters, or else by word
/// characters (`therock-dist-linux-gfx94X-dcgpu-7.13.0.tar.gz`: `gfx94X`); empty when none.
pub fn tarball_family(name: &str) -> &str {
    let lower = name.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("gfx").map(|i| i + from) {
        let rest = &name.as_bytes()[at + 3..];
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let len = if digits > 0 {
            digits + rest[digits..].iter().take_while(|b| b.is_ascii_alphabetic()).count()
        } else {
            rest.iter().take_while(|b| b.is_ascii_alphanumeric() || **b == b'_').count()
        };
        if len > 0 {
            return &name[at..at + 3 + len];
        }
        from = at + 3;
    }
    ""
}

struct TarballRow {
    href: String,
    name: String,
    family: String,
    size: String,
    size_bytes: u64,
    datetime: String,
    modified: String,
    sha256: String,
}

#[derive(Template)]
#[template(path = "tarball-index.html")]
struct TarballPage<'a> {
    title: &'a str,
    families: Vec<&'a str>,
    rows: Vec<TarballRow>,
}

/// A tarball directory's page: its `*.tar.gz` files (not subdirectories, not other files),
/// newest first then by name, with the families found among them.
pub fn render_tarball_index(title: &str, entries: &[ListingEntry]) -> String {
    let mut tarballs: Vec<&ListingEntry> =
        entries.iter().filter(|e| e.size.is_some() && e.name.ends_with(".tar.gz")).collect();
    tarballs.sort_by(|a, b| b.modified.cmp(&a.modified).then_with(|| a.name.cmp(&b.name)));
    let mut families: Vec<&str> = tarballs.iter().map(|e| tarball_family(&e.name)).filter(|f| !f.is_empty()).collect();
    families.sort_unstable();
    families.dedup();
    let rows = tarballs
        .into_iter()
        .map(|e| TarballRow {
            href: quarry_store::url::encode_path(&e.name),
            name: e.name.clone(),
            family: tarball_family(&e.name).to_owned(),
            size: human_size(e.size.unwrap_or_default()),
            size_bytes: e.size.unwrap_or_default(),
            datetime: e.modified.map(|t| t.strftime("%Y-%m-%dT%H:%M:%S+00:00").to_string()).unwrap_or_default(),
            modified: e.modified.map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string()).unwrap_or_default(),
            sha256: e.sha256.clone().unwrap_or_default(),
        })
        .collect();
    TarballPage { title, families, rows }.render().expect("the tarball index renders")
}

/// Render a directory's listing page, rows in codepoint order (a tarball directory's:
/// [`render_tarball_index`]).
pub fn render_listing(dir: &ListingDir, entries: &[ListingEntry]) -> String {
    if dir.is_tarball_index() {
        return render_tarball_index(dir.as_str(), entries);
    }
    let mut entries: Vec<&ListingEntry> = entries.iter().collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let rows = entries
        .into_iter()
        .map(|e| {
            let href = match (e.size, e.page) {
                (Some(_), _) => e.name.clone(),
                (None, true) => format!("{}index.html", e.name),
                (None, false) => String::new(),
            };
            Row {
                href: quarry_store::url::encode_path(&href),
                name: e.name.clone(),
                size: e.size.map_or_else(|| "\u{2014}".to_owned(), human_size),
                size_bytes: e.size.map(|s| s.to_string()).unwrap_or_default(),
                datetime: e.modified.map(|t| t.strftime("%Y-%m-%dT%H:%M:%S+00:00").to_string()).unwrap_or_default(),
                modified: e.modified.map(|t| t.strftime("%Y-%m-%d %H:%M UTC").to_string()).unwrap_or_default(),
                sha256: e.sha256.clone().unwrap_or_default(),
            }
        })
        .collect();
    ListingPage { title: dir.title(), rows }.render().expect("listing renders")
}

/// What one listing run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ListingReport {
    pub dir: String,
    pub entries: usize,
    pub passes: u32,
    pub written: bool,
}

impl std::fmt::Display for ListingReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} entries listed{}", self.dir, self.entries, if self.written { "" } else { " (unchanged)" })
    }
}

/// Whether `dir`'s page is the one its cache records; when it is not (deleted or replaced
/// behind the indexer's back, or the cache unreadable), the cache is dropped so the next
/// [`update_listing`] rereads every checksum and rewrites the page. The problem found, if any.
pub async fn verify_listing(store: &dyn Store, dir: &ListingDir) -> Result<Vec<String>, StoreError> {
    let cache_key = dir.key(LISTING_CACHE)?;
    let page_key = dir.key(LISTING_PAGE)?;
    let recorded = match store.get_bytes(&cache_key, MAX_CACHE).await {
        Ok((_, bytes)) => serde_json::from_slice::<Cache>(&bytes)
            .ok()
            .and_then(|c| c.sha256.get(LISTING_PAGE).map(|(_, sha)| sha.clone())),
        // No cache: the update renders and writes the page anyway.
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let problem = match store.get_bytes(&page_key, MAX_LISTING_PAGE).await {
        Ok((_, body)) if recorded.as_deref() == Some(quarry_store::sha256_hex(&body).as_str()) => {
            return Ok(Vec::new());
        }
        Ok(_) => format!("{page_key} is not the page its cache records"),
        Err(e) if e.is_not_found() => format!("{page_key} is missing"),
        Err(e) => return Err(e),
    };
    tracing::warn!(%dir, %problem, "rewriting the listing without its cache");
    store.delete(&cache_key).await?;
    Ok(vec![problem])
}

/// Bring `dir`'s listing page up to date with the store.
pub async fn update_listing(store: &dyn Store, dir: &ListingDir) -> Result<ListingReport, StoreError> {
    let mut report = ListingReport { dir: dir.to_string(), ..ListingReport::default() };
    let cache_key = dir.key(LISTING_CACHE)?;
    let page_key = dir.key(LISTING_PAGE)?;
    let mut cache: Cache = match store.get_bytes(&cache_key, MAX_CACHE).await {
        Ok((_, bytes)) => serde_json::from_slice(&bytes).unwrap_or_default(),
        Err(e) if e.is_not_found() => Cache::default(),
        Err(e) => return Err(e),
    };
    let cached_page = cache.sha256.get(LISTING_PAGE).map(|(_, sha)| sha.clone());
    // Whether each subdirectory has a page, asked once per update.
    let mut pages = BTreeMap::new();
    let mut entries = list_entries(store, dir, &mut cache, &mut pages).await?;
    if entries.is_empty() {
        // An emptied directory (a run deleted by gc or a lifecycle rule) gets no page: its
        // own page and cache go too, so it does not come back as an empty run.
        for key in [&page_key, &cache_key] {
            store.delete(key).await?;
        }
        return Ok(report);
    }
    for pass in 1..=MAX_PASSES {
        report.passes = pass;
        let body = render_listing(dir, &entries);
        let sha = quarry_store::sha256_hex(body.as_bytes());
        let unchanged = pass == 1 && cached_page.as_deref() == Some(sha.as_str());
        if !unchanged {
            store
                .put_bytes(
                    &page_key,
                    Bytes::from(body),
                    PutOptions::derived().with_content_type("text/html; charset=utf-8"),
                )
                .await?;
            report.written = true;
            cache.sha256.insert(LISTING_PAGE.to_owned(), (String::new(), sha));
            let bytes = serde_json::to_vec(&cache).map_err(|e| StoreError::Backend(e.to_string()))?;
            store
                .put_bytes(&cache_key, Bytes::from(bytes), PutOptions::derived().with_content_type("application/json"))
                .await?;
        }
        // Read back: a page written over a newer one is rewritten from a newer listing.
        let again = list_entries(store, dir, &mut cache, &mut pages).await?;
        if same_objects(&again, &entries) {
            report.entries = entries.len();
            return Ok(report);
        }
        entries = again;
    }
    report.entries = entries.len();
    Ok(report)
}

fn same_objects(a: &[ListingEntry], b: &[ListingEntry]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| x.name == y.name && x.etag == y.etag && x.size == y.size && x.page == y.page)
}

/// The directory's rows; `pages` remembers which subdirectories have an `index.html` (one HEAD
/// each per update).
async fn list_entries(
    store: &dyn Store,
    dir: &ListingDir,
    cache: &mut Cache,
    pages: &mut BTreeMap<String, bool>,
) -> Result<Vec<ListingEntry>, StoreError> {
    let listing = store.list_all(dir.as_str(), true).await?;
    let by_name: BTreeMap<String, &quarry_store::ObjectMeta> =
        listing.objects.iter().map(|o| (o.key.filename().to_owned(), o)).collect();
    let mut entries = Vec::new();
    for (name, object) in &by_name {
        if name == LISTING_PAGE || name == LISTING_CACHE {
            continue;
        }
        let sha256 = match cache.sha256.get(name).filter(|(version, _)| *version == object.version()) {
            Some((_, sha)) => Some(sha.clone()),
            None => {
                let found =
                    find_sha256(store, object, by_name.get(&format!("{name}{SHA256SUM_SUFFIX}")).copied()).await?;
                if let Some(sha) = &found {
                    cache.sha256.insert(name.clone(), (object.version(), sha.clone()));
                }
                found
            }
        };
        entries.push(ListingEntry {
            name: name.clone(),
            size: Some(object.size),
            modified: Some(object.last_modified),
            sha256,
            etag: object.version(),
            page: false,
        });
    }
    for sub in &listing.common_prefixes {
        let name = format!("{}/", sub.trim_end_matches('/').rsplit('/').next().unwrap_or_default());
        let page = match pages.get(sub) {
            Some(known) => *known,
            None => {
                let found = match store.head(&Key::join(sub, LISTING_PAGE)?).await {
                    Ok(_) => true,
                    Err(e) if e.is_not_found() => false,
                    Err(e) => return Err(e),
                };
                pages.insert(sub.clone(), found);
                found
            }
        };
        entries.push(ListingEntry { name, size: None, modified: None, sha256: None, etag: String::new(), page });
    }
    cache.sha256.retain(|name, _| name == LISTING_PAGE || by_name.contains_key(name));
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// The sha256 of an object: its `.sha256sum` sibling, else what the store recorded. Objects
/// are not streamed for it (artifacts run to gigabytes); a row without one shows none.
async fn find_sha256(
    store: &dyn Store,
    object: &quarry_store::ObjectMeta,
    sidecar: Option<&quarry_store::ObjectMeta>,
) -> Result<Option<String>, StoreError> {
    if object.key.filename().ends_with(SHA256SUM_SUFFIX) {
        return Ok(None);
    }
    if let Some(sidecar) = sidecar {
        match store.get_range(&sidecar.key, 0, sidecar.size.min(MAX_SHA256SUM)).await {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let hex = text.split_whitespace().next().unwrap_or_default().to_ascii_lowercase();
                if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Ok(Some(hex));
                }
                tracing::warn!(key = %sidecar.key, "not a sha256sum file; ignored");
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
    }
    if object.sha256.is_some() {
        return Ok(object.sha256.clone());
    }
    match store.head(&object.key).await {
        Ok(meta) => Ok(meta.sha256),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use quarry_store::MemoryStore;

    use super::*;

    #[test]
    fn listed_directories_follow_therock_layout() {
        let dir = |k: &str| ListingDir::for_key(&Key::new(k).unwrap(), &Default::default()).map(|d| d.to_string());
        assert_eq!(dir("12345-linux/blas_lib_gfx942.tar.zst").as_deref(), Some("12345-linux/"));
        assert_eq!(dir("ROCm-TheRock/12345-linux/a.tar.xz").as_deref(), Some("ROCm-TheRock/12345-linux/"));
        assert_eq!(dir("12345-linux/logs/gfx94X/build.log").as_deref(), Some("12345-linux/logs/gfx94X/"));
        for none in [
            "12345-linux/python/x-1.0-py3-none-any.whl",
            "12345-linux/packages/deb/pool/main/a.deb",
            "12345-linux/index.html",
            "12345-linux/.quarry-listing.json",
            "python/gfx94X/x.whl",
            "linux/a.tar.zst",
        ] {
            assert_eq!(dir(none), None, "{none}");
        }
        let parents: Vec<String> = ListingDir::new("9-linux/logs/gfx94X/", &Default::default())
            .unwrap()
            .with_parents(&Default::default())
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(parents, ["9-linux/logs/gfx94X/", "9-linux/logs/", "9-linux/"]);
    }

    #[test]
    fn tarball_indexes_read_like_therocks() {
        assert_eq!(tarball_family("therock-dist-linux-gfx94X-dcgpu-7.13.0.tar.gz"), "gfx94X");
        assert_eq!(tarball_family("therock-dist-linux-GFX1151-7.13.0.tar.gz"), "GFX1151");
        assert_eq!(tarball_family("therock-dist-linux-gfx-gfxfoo_1-x.tar.gz"), "gfxfoo_1");
        assert_eq!(tarball_family("therock-dist-linux-multiarch-7.13.0.tar.gz"), "");
        let at = |s: i64| Some(jiff::Timestamp::from_second(s).unwrap());
        let entry = |name: &str, size: Option<u64>, modified, sha: Option<&str>| ListingEntry {
            name: name.into(),
            size,
            modified,
            sha256: sha.map(Into::into),
            etag: "e".into(),
            page: false,
        };
        let entries = [
            entry(
                "therock-dist-linux-multiarch-7.13.0a20260501.tar.gz",
                Some(3 << 30),
                at(1_777_600_000),
                Some(&"a".repeat(64)),
            ),
            entry(
                "therock-dist-linux-gfx94X-dcgpu-7.13.0a20260502.tar.gz",
                Some(1 << 30),
                at(1_777_700_000),
                Some(&"b".repeat(64)),
            ),
            entry("therock-dist-linux-gfx1151-tests-7.13.0a20260502.tar.gz", Some(12345), at(1_777_700_000), None),
            entry("notes.txt", Some(3), at(1_777_800_000), None),
            entry("old/", None, None, None),
        ];
        insta::assert_snapshot!(render_tarball_index("v5/rocm/core/tarball/", &entries));
        insta::assert_snapshot!("empty_tarball_index", render_tarball_index("v5/rocm/core/tarball/", &entries[3..]));
    }

    #[test]
    fn sizes_read_like_therock() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1 KB");
        assert_eq!(human_size(123_456_789), "117 MB");
        assert_eq!(human_size(5 << 30), "5 GB");
    }

    #[tokio::test]
    async fn listing_shows_sizes_hashes_and_subdirectories() {
        let store = MemoryStore::default();
        let put = |k: &str, body: &'static [u8]| {
            let store = &store;
            let key = Key::new(k).unwrap();
            async move { store.put_bytes(&key, Bytes::from_static(body), PutOptions::default()).await.unwrap() }
        };
        put("77-linux/blas_lib_gfx942.tar.zst", b"archive bytes").await;
        let sum = format!("{}  blas_lib_gfx942.tar.zst\n", quarry_store::sha256_hex(b"archive bytes"));
        store
            .put_bytes(
                &Key::new("77-linux/blas_lib_gfx942.tar.zst.sha256sum").unwrap(),
                Bytes::from(sum),
                PutOptions::default(),
            )
            .await
            .unwrap();
        put("77-linux/rccl_test_gfx942:xnack+.tar.zst", b"").await;
        put("77-linux/python/x-1.0-py3-none-any.whl", b"PK").await;
        put("77-linux/logs/build.log", b"log").await;
        // logs/ has a listing of its own, python/ (never indexed) no page: listed unlinked.
        update_listing(&store, &ListingDir::new("77-linux/logs/", &Default::default()).unwrap()).await.unwrap();
        let dir = ListingDir::new("77-linux/", &Default::default()).unwrap();
        let report = update_listing(&store, &dir).await.unwrap();
        assert!(report.written);
        assert_eq!(report.entries, 5);
        let (_, page) = store.get_bytes(&Key::new("77-linux/index.html").unwrap(), 1 << 20).await.unwrap();
        let page = String::from_utf8(page.to_vec()).unwrap();
        // Times vary; everything else is fixed.
        let stable: String = page
            .lines()
            .map(|l| match l.find("<time") {
                Some(i) => format!("{}<time …>{}", &l[..i], &l[l.find("</time>").unwrap() + 7..]),
                None => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        insta::assert_snapshot!(stable);
        // Nothing changed: nothing written.
        let again = update_listing(&store, &dir).await.unwrap();
        assert!(!again.written);
    }
}
