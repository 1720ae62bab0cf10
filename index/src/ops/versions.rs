//! Channel versions: each promotion into a channel (and `quarry promote --init`) freezes the
//! channel's pages as a new *version*, and readers see the current version's pages only, so a
//! promotion or a rollback switches pip, apt and dnf readers in one write (`quarry channel
//! history|rollback`).
//!
//! After a promotion has reindexed the channel in place, [`snapshot`] copies every page under
//! the channel (pip simple and find-links pages, apt `dists/`, dnf `repodata/`, listings:
//! every object that is no package file, sidecar or dot-named state) to
//! `{channel}/.versions/{N}/{same relative key}` (server-side copies on S3), writes the
//! version's manifest (`{channel}/.versions/{N}/.manifest.json`: the package files the
//! channel held, relative to it), then switches the pointer `{channel}/.channel.json`
//! ([`ChannelPointer`]: `current` and the versions' history) with a conditional put
//! (`If-Match` its ETag, `If-None-Match` for the first): the switch is that one write, and of
//! two writers racing on it one fails, naming the channel. Packages are never copied: a
//! version costs its pages. Page hrefs are relative, so a version's page served at the
//! channel's own URL names the channel's package files.
//!
//! Readers resolve a page key under a channel to the current version's copy ([`Resolver`]:
//! `quarry serve`, one pointer read per channel, cached); package files are
//! served where they are. The CDN does the same in `infra/cloudfront/index-router.js` from a
//! CloudFront KeyValueStore whose key is the channel's prefix ([`kvs_key`]) and value the
//! current version. [`rollback`] rewrites the pointer only: its cost does not depend on the
//! channel's size. A file any version of the pointer names is held ([`holders`]): deletion
//! and retention leave it alone. [`forget`] removes old versions (never the current one): out
//! of the pointer first, then their pages; their numbers are not given again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use quarry_store::{Condition, Key, PutOptions, Store, StoreError, StoreExt};
use serde::{Deserialize, Serialize};

use crate::state::root::LEAVING_SUFFIX;

/// The pointer's name under a channel's prefix.
pub const POINTER_NAME: &str = ".channel.json";
/// The directory of a channel's versions' pages.
pub const VERSIONS_DIR: &str = ".versions";
/// A version's manifest, in its directory.
pub const MANIFEST_NAME: &str = ".manifest.json";
/// How long [`Resolver`] trusts a pointer it read.
pub const RESOLVE_TTL: Duration = Duration::from_secs(1);
/// Largest pointer or manifest read.
const MAX_JSON: u64 = 64 * 1024 * 1024;
/// Page copies in flight at once.
const CONCURRENCY: usize = 16;

/// Why a version operation failed.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("{0}")]
    BadInput(String),
    #[error("{channel} changed while it was being switched (another promotion or rollback); nothing was switched")]
    Raced { channel: String },
    #[error("{what}")]
    Store {
        what: String,
        #[source]
        source: StoreError,
    },
    #[error("{what}: {source}")]
    Json {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

impl VersionError {
    /// A mistake in the request (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Self::BadInput(_))
    }
}

fn store_err(what: impl Into<String>) -> impl FnOnce(StoreError) -> VersionError {
    let what = what.into();
    move |source| VersionError::Store { what, source }
}

/// One version of a channel, as its history lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelVersion {
    pub n: u64,
    /// When it was made (RFC 3339, UTC).
    pub created: String,
    /// The run promoted (`12345-linux`); absent for `--init`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Package files the version names.
    pub files: usize,
    /// Pages it holds.
    pub pages: usize,
}

/// `{channel}/.channel.json`: which version readers see, and every version kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelPointer {
    pub current: u64,
    pub versions: Vec<ChannelVersion>,
    /// Versions removed by [`forget`]: their numbers are never given again (a CDN may still
    /// cache their pages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forgotten: Vec<u64>,
}

impl ChannelPointer {
    pub fn version(&self, n: u64) -> Option<&ChannelVersion> {
        self.versions.iter().find(|v| v.n == n)
    }

    /// The number the next version gets: past every version made, forgotten ones too.
    fn next(&self) -> u64 {
        self.versions.iter().map(|v| v.n).chain(self.forgotten.iter().copied()).max().unwrap_or(0) + 1
    }

    /// `n` is not a kept version: named as forgotten, or as unknown with the ones kept.
    fn unknown(&self, prefix: &str, n: u64) -> VersionError {
        if self.forgotten.contains(&n) {
            return VersionError::BadInput(format!(
                "version {n} of {prefix} was forgotten (quarry channel forget): its pages are gone"
            ));
        }
        let known: Vec<String> = self.versions.iter().map(|v| v.n.to_string()).collect();
        VersionError::BadInput(format!("{prefix} has no version {n} (it has {})", known.join(", ")))
    }
}

/// A version's manifest: the package files it names, relative to the channel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub files: Vec<String>,
}

/// `prefix` as a channel prefix: no leading slash, one trailing slash.
pub fn channel_prefix(channel: &str) -> Result<String, VersionError> {
    let trimmed = channel.trim_matches('/');
    if trimmed.is_empty() {
        return Err(VersionError::BadInput("a channel is a non-empty key prefix".into()));
    }
    let prefix = format!("{trimmed}/");
    Key::new(format!("{prefix}{POINTER_NAME}"))
        .map_err(|e| VersionError::BadInput(format!("channel {channel}: {e}")))?;
    Ok(prefix)
}

fn pointer_key(prefix: &str) -> Result<Key, VersionError> {
    Key::new(format!("{prefix}{POINTER_NAME}")).map_err(|e| VersionError::BadInput(format!("{prefix}: {e}")))
}

/// The key of `relative`'s copy in version `n` of the channel at `prefix`.
pub fn version_key(prefix: &str, n: u64, relative: &str) -> String {
    format!("{prefix}{VERSIONS_DIR}/{n}/{relative}")
}

/// The CloudFront KeyValueStore key of a channel: its prefix as a URI path (`/nightly/`).
pub fn kvs_key(prefix: &str) -> String {
    format!("/{prefix}")
}

/// Names of package files and their sidecars: served where they are, never copied per version.
const PACKAGE_SUFFIXES: &[&str] = &[
    ".whl",
    ".tar.gz",
    ".zip",
    ".tar.bz2",
    ".tgz",
    ".deb",
    ".rpm",
    ".metadata",
    ".yanked",
    ".sha256sum",
    ".quarry-leaving",
];

/// Whether `relative` (under a channel) is a page of it: no package file or sidecar, no
/// dot-named segment (states, `.versions/`, the pointer).
pub fn is_page(relative: &str) -> bool {
    let name = relative.rsplit('/').next().unwrap_or(relative);
    !relative.split('/').any(|s| s.starts_with('.') || s.is_empty())
        && !PACKAGE_SUFFIXES.iter().any(|s| name.to_ascii_lowercase().ends_with(s))
}

/// Whether `relative` is a package file (not a sidecar) a version names.
fn is_package(relative: &str) -> bool {
    let name = relative.rsplit('/').next().unwrap_or(relative).to_ascii_lowercase();
    !relative.split('/').any(|s| s.starts_with('.'))
        && [".whl", ".tar.gz", ".zip", ".tar.bz2", ".tgz", ".deb", ".rpm"].iter().any(|s| name.ends_with(s))
}

/// The channel's pointer and its ETag, or `None` for a channel without versions.
pub async fn read_pointer(store: &dyn Store, prefix: &str) -> Result<Option<(ChannelPointer, String)>, VersionError> {
    let key = pointer_key(prefix)?;
    match store.get_bytes(&key, MAX_JSON).await {
        Ok((meta, body)) => {
            let pointer = serde_json::from_slice(&body)
                .map_err(|source| VersionError::Json { what: format!("reading {key}"), source })?;
            Ok(Some((pointer, meta.etag)))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(store_err(format!("reading {key}"))(e)),
    }
}

/// A version's manifest.
pub async fn read_manifest(store: &dyn Store, prefix: &str, n: u64) -> Result<Manifest, VersionError> {
    let key = Key::new(version_key(prefix, n, MANIFEST_NAME)).map_err(|e| VersionError::BadInput(e.to_string()))?;
    let (_, body) = store.get_bytes(&key, MAX_JSON).await.map_err(store_err(format!("reading {key}")))?;
    serde_json::from_slice(&body).map_err(|source| VersionError::Json { what: format!("reading {key}"), source })
}

/// Write `pointer` over the one read with `etag` (`None`: create it), as one conditional put.
async fn switch(
    store: &dyn Store,
    prefix: &str,
    pointer: &ChannelPointer,
    etag: Option<&str>,
) -> Result<(), VersionError> {
    let key = pointer_key(prefix)?;
    let body = serde_json::to_vec_pretty(pointer)
        .map_err(|source| VersionError::Json { what: format!("writing {key}"), source })?;
    let condition = match etag {
        Some(etag) => Condition::IfMatch(etag.to_owned()),
        None => Condition::IfNoneMatch,
    };
    let options = PutOptions::condition(condition).with_content_type("application/json");
    match store.put_bytes(&key, Bytes::from(body), options).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_conflict() => Err(VersionError::Raced { channel: prefix.to_owned() }),
        Err(e) => Err(store_err(format!("writing {key}"))(e)),
    }
}

/// What a channel holds beyond its current version ([`outside_current`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outside {
    /// Package files (keys) the current version does not name and the promotion does not
    /// bring: after a rollback, the rolled-back versions' files.
    pub keys: BTreeSet<String>,
    /// Some file the promotion brings is not named by the current version (a promotion that
    /// copies nothing still makes a version then: a rolled-back run promoted again).
    pub brings_new: bool,
}

/// The channel's files outside its current version, given the files a promotion brings
/// (keys). The next version leaves [`Outside::keys`] out (a reindex with
/// [`crate::Request::leaving`], then [`snapshot`] with them): it holds the current version's
/// files plus what the promotion brings. Nothing for a channel without versions.
pub async fn outside_current(
    store: &dyn Store,
    channel: &str,
    brought: &BTreeSet<String>,
) -> Result<Outside, VersionError> {
    let prefix = channel_prefix(channel)?;
    let Some((pointer, _)) = read_pointer(store, &prefix).await? else { return Ok(Outside::default()) };
    let manifest = read_manifest(store, &prefix, pointer.current).await?;
    let named = |key: &str| {
        let relative = key.strip_prefix(prefix.as_str()).unwrap_or_default();
        manifest.files.binary_search_by(|f| f.as_str().cmp(relative)).is_ok()
    };
    let listed = store.list_all(&prefix, false).await.map_err(store_err(format!("listing {prefix}")))?;
    let keys = listed
        .objects
        .into_iter()
        .map(|o| o.key.to_string())
        .filter(|key| {
            is_package(key.strip_prefix(prefix.as_str()).unwrap_or_default()) && !named(key) && !brought.contains(key)
        })
        .collect();
    let brings_new = brought.iter().any(|key| key.starts_with(prefix.as_str()) && !named(key));
    Ok(Outside { keys, brings_new })
}

/// Freeze the channel's pages as a new version and make it current (the module's doc). Files
/// in `leaving` (keys: left out of the pages by the reindex before) and files marked leaving
/// (`quarry prune`) are not the version's.
pub async fn snapshot(
    store: &dyn Store,
    channel: &str,
    from: Option<&str>,
    note: Option<&str>,
    leaving: &BTreeSet<String>,
) -> Result<ChannelVersion, VersionError> {
    let prefix = channel_prefix(channel)?;
    let read = read_pointer(store, &prefix).await?;
    let (mut pointer, etag) = match read {
        Some((pointer, etag)) => (pointer, Some(etag)),
        None => (ChannelPointer::default(), None),
    };
    let n = pointer.next();
    let listed = store.list_all(&prefix, false).await.map_err(store_err(format!("listing {prefix}")))?;
    let marked: BTreeSet<String> =
        listed.objects.iter().filter_map(|o| o.key.as_str().strip_suffix(LEAVING_SUFFIX).map(str::to_owned)).collect();
    let mut pages = Vec::new();
    let mut files = Vec::new();
    for object in listed.objects {
        let relative = object.key.as_str().strip_prefix(&prefix).unwrap_or_default().to_owned();
        if is_page(&relative) {
            pages.push((object.key, relative));
        } else if is_package(&relative)
            && !leaving.contains(object.key.as_str())
            && !marked.contains(object.key.as_str())
        {
            files.push(relative);
        }
    }
    let copies: Vec<Result<(), VersionError>> = futures_util::stream::iter(&pages)
        .map(|(key, relative)| {
            let prefix = &prefix;
            async move {
                let to =
                    Key::new(version_key(prefix, n, relative)).map_err(|e| VersionError::BadInput(e.to_string()))?;
                store.copy_from(store, key, &to).await.map_err(store_err(format!("copying {key} to {to}")))?;
                Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    copies.into_iter().collect::<Result<(), _>>()?;
    files.sort();
    let manifest_key =
        Key::new(version_key(&prefix, n, MANIFEST_NAME)).map_err(|e| VersionError::BadInput(e.to_string()))?;
    let manifest = Manifest { files };
    let body = serde_json::to_vec(&manifest)
        .map_err(|source| VersionError::Json { what: format!("writing {manifest_key}"), source })?;
    store
        .put_bytes(&manifest_key, Bytes::from(body), PutOptions::default().with_content_type("application/json"))
        .await
        .map_err(store_err(format!("writing {manifest_key}")))?;
    let version = ChannelVersion {
        n,
        created: jiff::Timestamp::now().to_string(),
        from: from.map(str::to_owned),
        note: note.map(str::to_owned),
        files: manifest.files.len(),
        pages: pages.len(),
    };
    pointer.versions.push(version.clone());
    pointer.current = n;
    switch(store, &prefix, &pointer, etag.as_deref()).await?;
    Ok(version)
}

/// What a rollback switched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Switched {
    pub channel: String,
    pub from: u64,
    pub to: u64,
    /// The CDN's KeyValueStore key and value that make the edge follow ([`kvs_key`]).
    pub kvs_key: String,
    pub kvs_value: String,
}

/// Make version `to` (default: the newest one older than the current) current: one pointer
/// read and one conditional write, whatever the channel's size.
pub async fn rollback(store: &dyn Store, channel: &str, to: Option<u64>) -> Result<Switched, VersionError> {
    let prefix = channel_prefix(channel)?;
    let (mut pointer, etag) = read_pointer(store, &prefix)
        .await?
        .ok_or_else(|| VersionError::BadInput(format!("{prefix} has no versions (promote into it first)")))?;
    let from = pointer.current;
    let target = match to {
        Some(n) => pointer.version(n).map(|v| v.n).ok_or_else(|| pointer.unknown(&prefix, n))?,
        None => pointer.versions.iter().map(|v| v.n).filter(|n| *n < from).max().ok_or_else(|| {
            VersionError::BadInput(format!("{prefix} has no version before its current one ({from})"))
        })?,
    };
    if target != from {
        // Every file the version names must still be there (prune may have taken an older
        // version's files): one listing of the channel, however many versions it has.
        let manifest = read_manifest(store, &prefix, target).await?;
        let listed = store
            .list_all(&prefix, false)
            .await
            .map_err(|source| VersionError::Store { what: format!("listing {prefix}"), source })?;
        let present: std::collections::BTreeSet<&str> =
            listed.objects.iter().filter_map(|o| o.key.as_str().strip_prefix(prefix.as_str())).collect();
        let missing: Vec<&str> = manifest.files.iter().map(String::as_str).filter(|f| !present.contains(f)).collect();
        if !missing.is_empty() {
            return Err(VersionError::BadInput(format!(
                "version {target} of {prefix} names {} file(s) no longer stored (pruned since): {}",
                missing.len(),
                missing.iter().take(5).copied().collect::<Vec<_>>().join(", ")
            )));
        }
        pointer.current = target;
        switch(store, &prefix, &pointer, Some(&etag)).await?;
    }
    Ok(Switched { channel: prefix.clone(), from, to: target, kvs_key: kvs_key(&prefix), kvs_value: target.to_string() })
}

/// Which versions [`forget`] removes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forget {
    /// All but the `n` newest (and the current one).
    Keep(usize),
    /// These.
    Versions(Vec<u64>),
}

/// What [`forget`] removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Forgotten {
    pub channel: String,
    pub current: u64,
    pub forgotten: Vec<u64>,
    pub kept: Vec<u64>,
    /// Objects deleted (the versions' pages and manifests).
    pub deleted: usize,
}

/// Remove versions of a channel (never the current one): the pointer first, with one
/// conditional write, so nothing is served from them nor held by them any more (a file only
/// they named may be deleted or pruned; a rollback to one is refused), then their pages and
/// manifests under `.versions/N/`.
pub async fn forget(store: &dyn Store, channel: &str, which: &Forget) -> Result<Forgotten, VersionError> {
    let prefix = channel_prefix(channel)?;
    let (mut pointer, etag) = read_pointer(store, &prefix)
        .await?
        .ok_or_else(|| VersionError::BadInput(format!("{prefix} has no versions (promote into it first)")))?;
    let current = pointer.current;
    let forgotten: BTreeSet<u64> = match which {
        Forget::Keep(keep) => {
            let mut newest: Vec<u64> = pointer.versions.iter().map(|v| v.n).collect();
            newest.sort_unstable_by(|a, b| b.cmp(a));
            newest.into_iter().skip(*keep).filter(|n| *n != current).collect()
        }
        Forget::Versions(named) => {
            let unknown: Vec<String> =
                named.iter().filter(|n| pointer.version(**n).is_none()).map(ToString::to_string).collect();
            if !unknown.is_empty() {
                let known: Vec<String> = pointer.versions.iter().map(|v| v.n.to_string()).collect();
                return Err(VersionError::BadInput(format!(
                    "{prefix} has no version {} (it has {})",
                    unknown.join(", "),
                    known.join(", ")
                )));
            }
            if named.contains(&current) {
                return Err(VersionError::BadInput(format!(
                    "version {current} is the current version of {prefix}: roll back to another first"
                )));
            }
            named.iter().copied().collect()
        }
    };
    if !forgotten.is_empty() {
        pointer.versions.retain(|v| !forgotten.contains(&v.n));
        pointer.forgotten.extend(forgotten.iter().copied());
        pointer.forgotten.sort_unstable();
        pointer.forgotten.dedup();
        switch(store, &prefix, &pointer, Some(&etag)).await?;
    }
    let mut deleted = 0;
    for n in &forgotten {
        let dir = format!("{prefix}{VERSIONS_DIR}/{n}/");
        let listed = store.list_all(&dir, false).await.map_err(store_err(format!("listing {dir}")))?;
        let results: Vec<Result<(), VersionError>> = futures_util::stream::iter(&listed.objects)
            .map(|object| async move {
                match store.delete(&object.key).await {
                    Ok(()) => Ok(()),
                    Err(e) if e.is_not_found() => Ok(()),
                    Err(e) => Err(store_err(format!("deleting {}", object.key))(e)),
                }
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        results.into_iter().collect::<Result<(), _>>()?;
        deleted += listed.objects.len();
    }
    Ok(Forgotten {
        channel: prefix,
        current,
        forgotten: forgotten.into_iter().collect(),
        kept: pointer.versions.iter().map(|v| v.n).collect(),
        deleted,
    })
}

/// A kept version naming a file: the channel and the version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionHolder {
    pub channel: String,
    pub n: u64,
    pub current: bool,
}

impl std::fmt::Display for VersionHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = if self.current { ", the current one" } else { "" };
        write!(f, "version {} of channel {}{current}", self.n, self.channel.trim_end_matches('/'))
    }
}

/// The channel prefixes among `key`'s ancestors that have versions, with their pointers.
pub(crate) async fn channels_above(
    store: &dyn Store,
    key: &str,
) -> Result<Vec<(String, ChannelPointer)>, VersionError> {
    let mut out = Vec::new();
    let mut end = 0;
    while let Some(slash) = key[end..].find('/') {
        end += slash + 1;
        let prefix = &key[..end];
        if let Some((pointer, _)) = read_pointer(store, prefix).await? {
            out.push((prefix.to_owned(), pointer));
        }
    }
    Ok(out)
}

/// Every version of every channel above them that names each of `keys` (a file is held while
/// any version its channel keeps names it).
pub async fn holders(store: &dyn Store, keys: &[&str]) -> Result<BTreeMap<String, Vec<VersionHolder>>, VersionError> {
    let mut out: BTreeMap<String, Vec<VersionHolder>> = BTreeMap::new();
    let mut channels: BTreeMap<String, ChannelPointer> = BTreeMap::new();
    for key in keys {
        for (prefix, pointer) in channels_above(store, key).await? {
            channels.insert(prefix, pointer);
        }
    }
    for (prefix, pointer) in &channels {
        for version in &pointer.versions {
            let manifest = read_manifest(store, prefix, version.n).await?;
            for key in keys {
                let Some(relative) = key.strip_prefix(prefix.as_str()) else { continue };
                if manifest.files.binary_search_by(|f| f.as_str().cmp(relative)).is_ok() {
                    out.entry((*key).to_owned()).or_default().push(VersionHolder {
                        channel: prefix.clone(),
                        n: version.n,
                        current: version.n == pointer.current,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// When a prefix's pointer was read, and its current version and ETag (`None`: no pointer).
type Cached = (Instant, Option<(u64, String)>);

/// Resolves page keys to the current version's copy for readers (`quarry serve`), caching
/// each prefix's pointer: while the store says it is unchanged (a local store: at once after a
/// switch), else for [`RESOLVE_TTL`]; its absence for [`RESOLVE_TTL`].
#[derive(Debug, Default)]
pub struct Resolver {
    cache: Mutex<HashMap<String, Cached>>,
}

impl Resolver {
    /// `key`, or for a page under a channel with versions, the current version's copy of it.
    pub async fn resolve(&self, store: &dyn Store, key: &Key) -> Result<Key, VersionError> {
        let raw = key.as_str();
        let mut end = 0;
        while let Some(slash) = raw[end..].find('/') {
            end += slash + 1;
            let (prefix, relative) = raw.split_at(end);
            if !is_page(relative) {
                return Ok(key.clone());
            }
            if let Some(n) = self.current(store, prefix).await? {
                let versioned = version_key(prefix, n, relative);
                return Key::new(versioned).map_err(|e| VersionError::BadInput(e.to_string()));
            }
        }
        Ok(key.clone())
    }

    async fn current(&self, store: &dyn Store, prefix: &str) -> Result<Option<u64>, VersionError> {
        let cached = self.cache.lock().ok().and_then(|c| c.get(prefix).cloned());
        if let Some((at, known)) = cached {
            // A pointer read before: still valid while the store says it is unchanged (a local
            // store tells with one `lstat`), else for the TTL. No pointer: for the TTL.
            let unchanged = match &known {
                Some((_, etag)) => store.unchanged(&pointer_key(prefix)?, etag),
                None => None,
            };
            if unchanged == Some(true) || (unchanged.is_none() && at.elapsed() < RESOLVE_TTL) {
                return Ok(known.map(|(n, _)| n));
            }
        }
        let known = read_pointer(store, prefix).await?.map(|(p, etag)| (p.current, etag));
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() > 4096 {
                cache.clear();
            }
            cache.insert(prefix.to_owned(), (Instant::now(), known.clone()));
        }
        Ok(known.map(|(n, _)| n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_store::MemoryStore;

    async fn put(store: &MemoryStore, key: &str, body: &str) {
        let key = Key::new(key).unwrap();
        store.put_bytes(&key, Bytes::from(body.to_owned()), PutOptions::default()).await.unwrap();
    }

    async fn get(store: &MemoryStore, key: &Key) -> String {
        String::from_utf8(store.get_bytes(key, 1 << 20).await.unwrap().1.to_vec()).unwrap()
    }

    #[test]
    fn pages_are_what_is_no_package_sidecar_or_state() {
        for page in ["python/simple/index.html", "python/simple/a/index.json", "packages/deb/dists/stable/InRelease"] {
            assert!(is_page(page), "{page}");
        }
        for other in [
            "python/a-1.0-py3-none-any.whl",
            "python/a-1.0-py3-none-any.whl.metadata",
            "packages/deb/pool/main/a_1.0_amd64.deb",
            "python/.quarry-index.json",
            ".versions/1/python/simple/index.html",
            ".channel.json",
        ] {
            assert!(!is_page(other), "{other}");
        }
    }

    #[tokio::test]
    async fn versions_switch_and_roll_back_and_hold_their_files() {
        let store = MemoryStore::default();
        put(&store, "nightly/python/a-1.0-py3-none-any.whl", "one").await;
        put(&store, "nightly/python/simple/a/index.html", "page names 1.0").await;
        let v1 = snapshot(&store, "nightly", Some("1-linux"), None, &BTreeSet::new()).await.unwrap();
        assert_eq!((v1.n, v1.files, v1.pages), (1, 1, 1));
        put(&store, "nightly/python/a-1.1-py3-none-any.whl", "two").await;
        put(&store, "nightly/python/simple/a/index.html", "page names 1.0 1.1").await;
        let v2 = snapshot(&store, "nightly/", Some("2-linux"), None, &BTreeSet::new()).await.unwrap();
        assert_eq!((v2.n, v2.files), (2, 2));

        let resolver = Resolver::default();
        let page = Key::new("nightly/python/simple/a/index.html").unwrap();
        let wheel = Key::new("nightly/python/a-1.0-py3-none-any.whl").unwrap();
        assert_eq!(resolver.resolve(&store, &wheel).await.unwrap(), wheel);
        let resolved = resolver.resolve(&store, &page).await.unwrap();
        assert_eq!(resolved.as_str(), "nightly/.versions/2/python/simple/a/index.html");
        assert_eq!(get(&store, &resolved).await, "page names 1.0 1.1");

        let switched = rollback(&store, "nightly", None).await.unwrap();
        assert_eq!((switched.from, switched.to, switched.kvs_key.as_str()), (2, 1, "/nightly/"));
        let (pointer, _) = read_pointer(&store, "nightly/").await.unwrap().unwrap();
        assert_eq!(pointer.current, 1);
        // The same resolver sees the switch at once: the store tells the pointer changed.
        let resolved = resolver.resolve(&store, &page).await.unwrap();
        assert_eq!(get(&store, &resolved).await, "page names 1.0");
        // No version before the first; a version that is not there is named.
        assert!(rollback(&store, "nightly", None).await.unwrap_err().is_bad_input());
        let err = rollback(&store, "nightly", Some(9)).await.unwrap_err();
        assert!(err.to_string().contains("no version 9 (it has 1, 2)"), "{err}");
        assert_eq!(rollback(&store, "nightly", Some(2)).await.unwrap().to, 2);

        let held = holders(&store, &["nightly/python/a-1.1-py3-none-any.whl", "nightly/python/a-1.0-py3-none-any.whl"])
            .await
            .unwrap();
        let names: Vec<String> =
            held["nightly/python/a-1.1-py3-none-any.whl"].iter().map(ToString::to_string).collect();
        assert_eq!(names, ["version 2 of channel nightly, the current one"]);
        assert_eq!(held["nightly/python/a-1.0-py3-none-any.whl"].len(), 2);
        let mut shown = pointer.clone();
        shown.versions.iter_mut().for_each(|v| v.created = "[created]".into());
        insta::assert_json_snapshot!(shown);
    }

    /// `forget` never takes the current version, refuses unknown ones by name, removes the
    /// versions' pages and manifests, and their numbers are not given again; a rollback to one
    /// says it was forgotten. After a rollback, the files only a newer version names are
    /// outside the current one.
    #[tokio::test]
    async fn forgotten_versions_go_and_their_numbers_stay_taken() {
        let store = MemoryStore::default();
        let none = BTreeSet::new();
        put(&store, "c/python/simple/index.html", "x").await;
        put(&store, "c/python/a-1.0-py3-none-any.whl", "1").await;
        snapshot(&store, "c", None, None, &none).await.unwrap();
        put(&store, "c/python/a-2.0-py3-none-any.whl", "2").await;
        snapshot(&store, "c", None, None, &none).await.unwrap();
        snapshot(&store, "c", None, None, &none).await.unwrap();
        rollback(&store, "c", Some(1)).await.unwrap();
        let outside = outside_current(&store, "c", &none).await.unwrap();
        assert_eq!(outside.keys, BTreeSet::from(["c/python/a-2.0-py3-none-any.whl".to_owned()]));
        assert!(!outside.brings_new);
        let brought = BTreeSet::from(["c/python/a-2.0-py3-none-any.whl".to_owned()]);
        let outside = outside_current(&store, "c", &brought).await.unwrap();
        assert!(outside.keys.is_empty() && outside.brings_new);

        let err = forget(&store, "c", &Forget::Versions(vec![2, 7, 9])).await.unwrap_err();
        assert!(err.is_bad_input() && err.to_string().contains("no version 7, 9 (it has 1, 2, 3)"), "{err}");
        let err = forget(&store, "c", &Forget::Versions(vec![1])).await.unwrap_err();
        assert!(err.to_string().contains("version 1 is the current version"), "{err}");
        // Keep 1: the newest (3) and the current (1).
        let done = forget(&store, "c", &Forget::Keep(1)).await.unwrap();
        assert_eq!(
            (done.forgotten.as_slice(), done.kept.as_slice(), done.deleted),
            ([2].as_slice(), [1, 3].as_slice(), 2)
        );
        assert!(store.list_all("c/.versions/2/", false).await.unwrap().objects.is_empty());
        let err = rollback(&store, "c", Some(2)).await.unwrap_err();
        assert!(err.to_string().contains("version 2 of c/ was forgotten"), "{err}");
        forget(&store, "c", &Forget::Versions(vec![3])).await.unwrap();
        assert_eq!(snapshot(&store, "c", None, None, &none).await.unwrap().n, 4);
        let (pointer, _) = read_pointer(&store, "c/").await.unwrap().unwrap();
        assert_eq!(pointer.forgotten, [2, 3]);
    }

    /// Of two writers switching from the same pointer, the second is refused, naming the
    /// channel.
    #[tokio::test]
    async fn a_stale_switch_is_refused() {
        let store = MemoryStore::default();
        put(&store, "c/python/simple/index.html", "x").await;
        snapshot(&store, "c", None, None, &BTreeSet::new()).await.unwrap();
        snapshot(&store, "c", None, None, &BTreeSet::new()).await.unwrap();
        let (pointer, etag) = read_pointer(&store, "c/").await.unwrap().unwrap();
        rollback(&store, "c", Some(1)).await.unwrap();
        let err = switch(&store, "c/", &pointer, Some(&etag)).await.unwrap_err();
        assert!(matches!(err, VersionError::Raced { .. }), "{err}");
        assert!(err.to_string().contains("c/ changed"), "{err}");
    }
}
