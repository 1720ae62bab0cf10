//! A file's life after its upload: [`yank`] and [`unyank`] (PEP 592) and [`delete`], for
//! `quarry serve`'s routes and `quarry yank|unyank|delete` on a store alike.
//!
//! A yank is the store's existing convention: a marker object `<file>.yanked` beside the file,
//! its content the reason ([`crate::YANK_SUFFIX`]); the indexer reads it into the entry, and
//! every pip page says so (`data-yanked` on the simple and find-links pages, `"yanked"` in PEP
//! 691 JSON). Unyanking deletes the marker. Either refreshes the file's project only, as any
//! event about one file does ([`Scope::affected_by`]). apt and dnf have no yank: a `.deb` or
//! `.rpm` is refused, and deleting it is the way.
//!
//! A deletion goes as `quarry prune` deletes: the file is marked leaving
//! ([`crate::LEAVING_SUFFIX`]), its root (and each per-family view of it) republished without
//! it, then the file goes with its sidecars (`.metadata`, `.yanked`, `.sha256sum`), the mark
//! after it, and the root is reindexed; no page ever names a file that is gone. A file a
//! channel still holds ([`channel_holders`]: promoted into it, or named by a version it keeps)
//! is refused, naming the channel (and the version): a channel is what clients install from,
//! and its files leave by retention (`quarry prune`).
//!
//! Every key is checked first ([`package_key`]): a valid key (no `..`, no empty segment, no
//! reserved directory), a package file in a pip, apt or dnf root; anything else is refused
//! before the store is touched.

use bytes::Bytes;
use quarry_store::{Key, ObjectMeta, PutOptions, StoreError, StoreExt};
use serde::Serialize;

use crate::error::IndexError;
use crate::ops::prune::SIDECARS;
use crate::reindex::indexer::Indexer;
use crate::reindex::scope::Scope;
use crate::state::io::read_state;
use crate::state::root::{LEAVING_SUFFIX, RepoKind, RepoRoot, YANK_SUFFIX};

/// Longest yank reason taken (the indexer reads no more of a marker).
pub const MAX_REASON: usize = 1024;

/// What was done to a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Yank,
    Unyank,
    Delete,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Yank => "yank",
            Self::Unyank => "unyank",
            Self::Delete => "delete",
        }
    }

    /// The audit log's name for it.
    pub fn audit_action(self) -> crate::ops::audit_log::AuditAction {
        use crate::ops::audit_log::AuditAction;
        match self {
            Self::Yank => AuditAction::Yank,
            Self::Unyank => AuditAction::Unyank,
            Self::Delete => AuditAction::Delete,
        }
    }
}

/// What a yank, unyank or deletion did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LifecycleReport {
    pub action: Change,
    pub key: String,
    /// The file's sha256, as its root's state (else the store) knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// A yank's reason (possibly empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// False when there was nothing to change (yanked already with this reason, not yanked).
    pub changed: bool,
    /// Keys deleted (a deletion: the file, its sidecars).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<String>,
    /// What was reindexed (roots, projects' roots).
    pub reindexed: Vec<String>,
}

impl std::fmt::Display for LifecycleReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let done = match (self.action, self.changed) {
            (Change::Yank, true) => "yanked",
            (Change::Yank, false) => "already yanked",
            (Change::Unyank, true) => "unyanked",
            (Change::Unyank, false) => "was not yanked",
            (Change::Delete, _) => "deleted",
        };
        write!(f, "{done} {}", self.key)?;
        if let Some(reason) = self.reason.as_deref().filter(|r| !r.is_empty()) {
            write!(f, " ({reason})")?;
        }
        if let Some(sha) = &self.sha256 {
            write!(f, " sha256={sha}")?;
        }
        writeln!(f)?;
        for key in self.deleted.iter().skip(1) {
            writeln!(f, "  deleted {key}")?;
        }
        for scope in &self.reindexed {
            writeln!(f, "  reindexed {scope}")?;
        }
        Ok(())
    }
}

/// A channel that still holds a file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    /// The channel (`nightly`, `v2`).
    pub channel: String,
    /// How it holds the file (promoted from which run, into which root).
    pub how: String,
}

/// Why a yank, unyank or deletion did nothing.
#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// The key names no package file of a root, or the change does not apply to it.
    #[error("{0}")]
    BadInput(String),
    #[error("{0} does not exist")]
    NotFound(String),
    /// A channel still holds the file.
    #[error(
        "{key} is held by channel {}: a channel's files leave by retention (`quarry prune`), not one by one; nothing was changed",
        holders.iter().map(|h| format!("{} ({})", h.channel, h.how)).collect::<Vec<_>>().join(", ")
    )]
    Held { key: String, holders: Vec<Holder> },
    #[error("{what}")]
    Store {
        what: String,
        #[source]
        source: StoreError,
    },
    #[error("{what}")]
    Index {
        what: String,
        #[source]
        source: IndexError,
    },
    #[error("{what}: {source}")]
    Versions {
        what: String,
        #[source]
        source: crate::ops::versions::VersionError,
    },
}

impl LifecycleError {
    /// A mistake in the request (exit 2; HTTP 400), not a failure.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Self::BadInput(_))
    }
}

fn store_err(what: impl Into<String>) -> impl FnOnce(StoreError) -> LifecycleError {
    let what = what.into();
    move |source| LifecycleError::Store { what, source }
}

/// `raw` as the key of a package file and its root, or why not: a valid key (no `..`, empty or
/// reserved segment), a wheel, sdist, `.deb` (under a pool) or `.rpm`, in a root of its kind.
pub fn package_key(raw: &str, layout: &quarry_layout::config::Layout) -> Result<(Key, RepoRoot), LifecycleError> {
    let raw = raw.trim_start_matches('/');
    let key = Key::new(raw).map_err(|e| LifecycleError::BadInput(e.to_string()))?;
    crate::check_key_segments(&key).map_err(|e| LifecycleError::BadInput(e.to_string()))?;
    let root = RepoRoot::for_key(&key, layout).ok_or_else(|| {
        LifecycleError::BadInput(format!(
            "{key} is not a package file of a pip, apt or dnf root (a wheel or sdist in a pip root, a .deb under an apt \
             root's pool/, an .rpm in a dnf root)"
        ))
    })?;
    Ok((key, root))
}

/// A yank reason as a marker holds it: trimmed, at most [`MAX_REASON`] bytes, one line.
pub fn check_reason(reason: &str) -> Result<String, LifecycleError> {
    let reason = reason.trim();
    if reason.len() > MAX_REASON {
        return Err(LifecycleError::BadInput(format!(
            "the yank reason is {} bytes; at most {MAX_REASON} are kept",
            reason.len()
        )));
    }
    if reason.chars().any(char::is_control) {
        return Err(LifecycleError::BadInput("the yank reason holds a control character (a newline?)".into()));
    }
    Ok(reason.to_owned())
}

/// The channels that still hold the file at `key` (empty: none). Today a channel holds a file
/// promoted into one of its roots: the root's committed state records where the entry came from
/// ([`crate::Provenance`]). Channel versions will name their files here too.
pub async fn channel_holders(indexer: &Indexer, key: &Key) -> Result<Vec<Holder>, LifecycleError> {
    let Some(root) = RepoRoot::for_key(key, indexer.layout()) else { return Ok(Vec::new()) };
    let store = indexer.store().as_ref();
    let state = read_state(store, &root).await.map_err(store_err(format!("reading {root}'s state")))?;
    let relative = key.as_str().strip_prefix(root.as_str()).unwrap_or_default();
    let entry = state.as_ref().and_then(|s| s.entries.get(relative));
    let mut holders: Vec<Holder> = entry
        .and_then(|e| e.source.as_ref())
        .map(|source| Holder {
            channel: channel_of(&root),
            how: format!("promoted from run {}-{} into {root}", source.run, source.platform),
        })
        .into_iter()
        .collect();
    // A file a kept version of its channel names is held too: a rollback must find it.
    let versions = crate::ops::versions::holders(store, &[key.as_str()])
        .await
        .map_err(|e| LifecycleError::Versions { what: format!("reading the versions naming {key}"), source: e })?;
    for holder in versions.into_values().flatten() {
        holders.push(Holder {
            channel: holder.channel.trim_end_matches('/').to_owned(),
            how: format!("named by {holder}"),
        });
    }
    Ok(holders)
}

/// The channel a promoted root belongs to: its prefix before the run-like `python/` or
/// `packages/` directory (`nightly/python/gfx94X/` → `nightly`), else its first segment
/// (a configured root, `v2/gfx94X-dcgpu/` → `v2`).
fn channel_of(root: &RepoRoot) -> String {
    let segments: Vec<&str> = root.as_str().trim_end_matches('/').split('/').collect();
    let python = quarry_layout::THEROCK.root_dir(quarry_layout::UploadKind::Python);
    let python = python.trim_end_matches('/');
    let cut = segments.iter().position(|s| *s == python || *s == quarry_layout::PACKAGES_DIR);
    segments[..cut.filter(|&i| i > 0).unwrap_or(1)].join("/")
}

/// The file's metadata, or [`LifecycleError::NotFound`].
async fn head(indexer: &Indexer, key: &Key) -> Result<ObjectMeta, LifecycleError> {
    match indexer.store().head(key).await {
        Ok(meta) => Ok(meta),
        Err(e) if e.is_not_found() => Err(LifecycleError::NotFound(key.to_string())),
        Err(source) => Err(LifecycleError::Store { what: format!("reading {key}"), source }),
    }
}

/// The file's sha256: its root's state's while the state knows this version of it, else the
/// store's record; `None` when neither knows (the file is not hashed again for a report).
async fn sha256_of(indexer: &Indexer, root: &RepoRoot, meta: &ObjectMeta) -> Option<String> {
    let relative = meta.key.as_str().strip_prefix(root.as_str())?;
    let state = read_state(indexer.store().as_ref(), root).await.ok().flatten();
    let entry = state.as_ref().and_then(|s| s.entries.get(relative)).filter(|e| e.etag == meta.version());
    entry.map(|e| e.sha256.clone()).or_else(|| meta.sha256.clone())
}

/// Refresh every scope a change at `keys` makes stale; what was refreshed.
async fn refresh(indexer: &Indexer, keys: &[Key]) -> Result<Vec<String>, LifecycleError> {
    let mut done = Vec::new();
    for scope in Scope::affected_by_all(keys, indexer.layout()) {
        indexer
            .refresh(&scope)
            .await
            .map_err(|source| LifecycleError::Index { what: format!("reindexing {scope}"), source })?;
        done.push(scope.to_string());
    }
    Ok(done)
}

/// A pip file, or refused: apt and dnf have no yank.
fn yankable(key: &Key, root: &RepoRoot) -> Result<(), LifecycleError> {
    if root.kind() == RepoKind::Pip {
        return Ok(());
    }
    Err(LifecycleError::BadInput(format!(
        "{key}: apt and dnf have no yank (PEP 592 is pip's); delete the file instead"
    )))
}

/// Yank the pip file at `key` with `reason` (possibly empty): its marker written, its project's
/// pages republished with `data-yanked` / `"yanked"`.
pub async fn yank(indexer: &Indexer, key: &str, reason: &str) -> Result<LifecycleReport, LifecycleError> {
    let (key, root) = package_key(key, indexer.layout())?;
    yankable(&key, &root)?;
    let reason = check_reason(reason)?;
    let meta = head(indexer, &key).await?;
    let marker = marker_key(&key)?;
    let store = indexer.store().as_ref();
    let already = match store.get_bytes(&marker, MAX_REASON as u64 + 1).await {
        Ok((_, bytes)) => String::from_utf8_lossy(&bytes).trim() == reason,
        Err(e) if e.is_not_found() => false,
        Err(source) => return Err(LifecycleError::Store { what: format!("reading {marker}"), source }),
    };
    if !already {
        store
            .put_bytes(&marker, Bytes::from(reason.clone().into_bytes()), PutOptions::default())
            .await
            .map_err(store_err(format!("writing {marker}")))?;
    }
    let reindexed = refresh(indexer, &[marker]).await?;
    let sha256 = sha256_of(indexer, &root, &meta).await;
    Ok(LifecycleReport {
        action: Change::Yank,
        key: key.to_string(),
        sha256,
        reason: Some(reason),
        changed: !already,
        deleted: Vec::new(),
        reindexed,
    })
}

/// Unyank the pip file at `key`: its marker deleted, its project's pages republished.
pub async fn unyank(indexer: &Indexer, key: &str) -> Result<LifecycleReport, LifecycleError> {
    let (key, root) = package_key(key, indexer.layout())?;
    yankable(&key, &root)?;
    let meta = head(indexer, &key).await?;
    let marker = marker_key(&key)?;
    // Deleting a missing object succeeds on S3: whether there was a yank is a HEAD's to say.
    let store = indexer.store();
    let changed = match store.head(&marker).await {
        Ok(_) => true,
        Err(e) if e.is_not_found() => false,
        Err(source) => return Err(LifecycleError::Store { what: format!("reading {marker}"), source }),
    };
    if changed {
        store.delete(&marker).await.map_err(store_err(format!("deleting {marker}")))?;
    }
    let reindexed = refresh(indexer, &[marker]).await?;
    let sha256 = sha256_of(indexer, &root, &meta).await;
    Ok(LifecycleReport {
        action: Change::Unyank,
        key: key.to_string(),
        sha256,
        reason: None,
        changed,
        deleted: Vec::new(),
        reindexed,
    })
}

fn marker_key(key: &Key) -> Result<Key, LifecycleError> {
    Key::new(format!("{key}{YANK_SUFFIX}")).map_err(|e| LifecycleError::BadInput(e.to_string()))
}

/// Delete the package file at `key` with its sidecars, unless a channel holds it: the root and
/// its views republished without it first, the root reindexed after.
pub async fn delete(indexer: &Indexer, key: &str) -> Result<LifecycleReport, LifecycleError> {
    let (key, root) = package_key(key, indexer.layout())?;
    let meta = head(indexer, &key).await?;
    let holders = channel_holders(indexer, &key).await?;
    if !holders.is_empty() {
        return Err(LifecycleError::Held { key: key.to_string(), holders });
    }
    let sha256 = sha256_of(indexer, &root, &meta).await;
    let store = indexer.store().as_ref();
    let leaving = Key::new(format!("{key}{LEAVING_SUFFIX}")).map_err(|e| LifecycleError::BadInput(e.to_string()))?;
    store
        .put_bytes(&leaving, Bytes::new(), PutOptions::derived())
        .await
        .map_err(store_err(format!("marking {key} to leave")))?;
    indexer
        .reindex_before_removal(&root, &Default::default())
        .await
        .map_err(|source| LifecycleError::Index { what: format!("republishing {root} without {key}"), source })?;
    // What is there of the file and its sidecars (deleting a missing object succeeds on S3).
    let listed = store.list_all(key.as_str(), false).await.map_err(store_err(format!("listing {key}")))?;
    let ours = |k: &Key| {
        let rest = k.as_str().strip_prefix(key.as_str());
        rest.is_some_and(|r| r.is_empty() || SIDECARS.contains(&r))
    };
    let mut deleted = Vec::new();
    for k in listed.objects.into_iter().map(|o| o.key).filter(ours) {
        store.delete(&k).await.map_err(store_err(format!("deleting {k}")))?;
        deleted.push(k.to_string());
    }
    deleted.sort_by_key(|k| k.len());
    // The mark goes after the file: an interrupted deletion leaves the file marked, unnamed.
    store.delete(&leaving).await.map_err(store_err(format!("deleting {leaving}")))?;
    let reindexed = refresh(indexer, std::slice::from_ref(&key)).await?;
    Ok(LifecycleReport {
        action: Change::Delete,
        key: key.to_string(),
        sha256,
        reason: None,
        changed: true,
        deleted,
        reindexed,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use quarry_store::{MemoryStore, Store};

    use super::*;

    const WHEEL: &str = "1-linux/python/foo-1.0-py3-none-any.whl";

    fn wheel_bytes() -> Vec<u8> {
        crate::reindex::scale_tests::wheel("foo", "1.0").1
    }

    async fn indexer_with_wheel() -> Indexer {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        put(store.as_ref(), WHEEL, wheel_bytes()).await;
        let indexer = Indexer::new(store, Default::default());
        indexer.reindex(&RepoRoot::new("1-linux/python/", &Default::default()).unwrap()).await.unwrap();
        indexer
    }

    async fn put(store: &dyn Store, key: &str, bytes: Vec<u8>) {
        store.put_bytes(&Key::new(key).unwrap(), Bytes::from(bytes), PutOptions::default()).await.unwrap();
    }

    async fn text(indexer: &Indexer, key: &str) -> Option<String> {
        let got = indexer.store().get_bytes(&Key::new(key).unwrap(), 1 << 20).await;
        got.ok().map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
    }

    #[test]
    fn hostile_and_non_package_keys_are_refused() {
        for bad in [
            "../etc/passwd",
            "1-linux/python/../../x.whl",
            "1-linux//python/foo-1.0-py3-none-any.whl",
            ".quarry/lock",
            "1-linux/python/simple/foo-1.0-py3-none-any.whl",
            "1-linux/python/index.html",
            "1-linux/python/foo-1.0-py3-none-any.whl.metadata",
            "1-linux/python/foo-1.0-py3-none-any.whl.yanked",
            "1-linux/logs/build.log",
            "1-linux/python/",
            "",
            "a\\b.whl",
            "1-linux/packages/deb/foo_1.0_amd64.deb",
        ] {
            let err = package_key(bad, &Default::default()).unwrap_err();
            assert!(err.is_bad_input(), "{bad}: {err}");
        }
        insta::assert_snapshot!(package_key("1-linux/logs/build.log", &Default::default()).unwrap_err(), @"1-linux/logs/build.log is not a package file of a pip, apt or dnf root (a wheel or sdist in a pip root, a .deb under an apt root's pool/, an .rpm in a dnf root)");
        let (key, root) = package_key("/1-linux/python/foo-1.0-py3-none-any.whl", &Default::default()).unwrap();
        assert_eq!((key.as_str(), root.as_str()), (WHEEL, "1-linux/python/"));
        let (_, root) = package_key("1-linux/packages/deb/pool/main/f/foo_1.0_amd64.deb", &Default::default()).unwrap();
        assert_eq!(root.kind(), RepoKind::Apt);
        assert!(check_reason(&"x".repeat(MAX_REASON + 1)).unwrap_err().is_bad_input());
        assert!(check_reason("a\nb").unwrap_err().is_bad_input());
        assert_eq!(check_reason("  broken  ").unwrap(), "broken");
    }

    #[test]
    fn channels_are_named_by_their_prefix() {
        let channel = |p: &str| channel_of(&RepoRoot::new(p, &Default::default()).unwrap());
        assert_eq!(channel("nightly/python/gfx94X-dcgpu/"), "nightly");
        assert_eq!(channel("release/v7/python/"), "release/v7");
        assert_eq!(channel_of(&RepoRoot::with_kind("nightly/packages/deb/", RepoKind::Apt).unwrap()), "nightly");
    }

    #[tokio::test]
    async fn yank_unyank_and_delete_a_wheel() {
        let indexer = indexer_with_wheel().await;
        let page = "1-linux/python/simple/foo/index.json";
        let report = yank(&indexer, WHEEL, " broken on ROCm 7 ").await.unwrap();
        assert!(report.changed);
        assert_eq!(report.reindexed, ["1-linux/python/"]);
        assert!(report.sha256.is_some());
        assert!(text(&indexer, page).await.unwrap().contains(r#""yanked":"broken on ROCm 7""#));
        assert_eq!(text(&indexer, &format!("{WHEEL}.yanked")).await.as_deref(), Some("broken on ROCm 7"));
        assert!(!yank(&indexer, WHEEL, "broken on ROCm 7").await.unwrap().changed, "the same yank twice");
        let html = text(&indexer, "1-linux/python/simple/foo/index.html").await.unwrap();
        assert!(html.contains(r#"data-yanked="broken on ROCm 7""#), "{html}");
        assert!(text(&indexer, "1-linux/python/index.html").await.unwrap().contains("data-yanked"));
        let report = unyank(&indexer, WHEEL).await.unwrap();
        assert!(report.changed);
        assert!(!text(&indexer, page).await.unwrap().contains("yanked"));
        assert!(!unyank(&indexer, WHEEL).await.unwrap().changed);
        yank(&indexer, WHEEL, "").await.unwrap();
        assert!(text(&indexer, page).await.unwrap().contains(r#""yanked":true"#));

        let report = delete(&indexer, WHEEL).await.unwrap();
        assert_eq!(report.deleted[0], WHEEL);
        // The `.metadata` sidecar went with the republication that stopped naming it.
        assert!(report.deleted.iter().any(|k| k.ends_with(".yanked")), "{report:?}");
        let listed = indexer.store().list_all("1-linux/python/", false).await.unwrap().objects;
        assert!(listed.iter().all(|o| !o.key.as_str().starts_with(WHEEL)), "{listed:?}");
        assert!(!text(&indexer, "1-linux/python/index.html").await.unwrap().contains("foo-1.0"));
        assert!(matches!(delete(&indexer, WHEEL).await, Err(LifecycleError::NotFound(_))));
        assert!(matches!(yank(&indexer, WHEEL, "").await, Err(LifecycleError::NotFound(_))));
    }

    #[tokio::test]
    async fn a_promoted_file_is_held_by_its_channel() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let held = "nightly/python/foo-1.0-py3-none-any.whl";
        put(store.as_ref(), held, wheel_bytes()).await;
        let indexer = Indexer::new(store, Default::default());
        let root = RepoRoot::new("nightly/python/", &Default::default()).unwrap();
        // What promote hands the channel's reindex: the entry, with where it came from.
        let key = Key::new(held).unwrap();
        let meta = indexer.store().head(&key).await.unwrap();
        let mut inspected = crate::inspect(indexer.store(), &meta).await.unwrap();
        inspected.entry.source = Some(crate::Provenance { run: "12".into(), platform: "linux".into(), commit: None });
        let mut known = crate::Inspections::default();
        known.insert(&key, inspected);
        indexer.run(crate::Request::new(root).knowing(known)).await.unwrap();
        let err = delete(&indexer, held).await.unwrap_err();
        assert!(matches!(&err, LifecycleError::Held { holders, .. } if holders[0].channel == "nightly"), "{err}");
        insta::assert_snapshot!(err, @"nightly/python/foo-1.0-py3-none-any.whl is held by channel nightly (promoted from run 12-linux into nightly/python/): a channel's files leave by retention (`quarry prune`), not one by one; nothing was changed");
        assert!(text(&indexer, held).await.is_some(), "nothing was deleted");
        // A yank of a channel's file is allowed (PEP 592's purpose).
        assert!(yank(&indexer, held, "bad").await.unwrap().changed);
    }

    #[tokio::test]
    async fn native_packages_cannot_be_yanked() {
        let indexer = indexer_with_wheel().await;
        let err = yank(&indexer, "1-linux/packages/rpm/x86_64/foo-1.0-1.x86_64.rpm", "").await.unwrap_err();
        assert!(err.is_bad_input(), "{err}");
        insta::assert_snapshot!(err, @"1-linux/packages/rpm/x86_64/foo-1.0-1.x86_64.rpm: apt and dnf have no yank (PEP 592 is pip's); delete the file instead");
    }
}
