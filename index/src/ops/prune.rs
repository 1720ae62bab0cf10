//! Retention inside one flat root (a channel's pip, apt or dnf repository, `python-deps/`):
//! per project, keep the newest `keep_versions` versions and/or the versions whose files entered
//! within `keep_days`; mark the files of every other version ([`crate::LEAVING_SUFFIX`]),
//! republish the root without them, delete them with their sidecars, then reindex the root
//! (`quarry prune`).
//!
//! Versions are ordered as their clients order them: PEP 440 for pip, dpkg's for apt, rpm's EVR
//! for dnf. A version's age is its newest file's `upload-time` in the root's state. With both
//! rules, a version is pruned only if both select it (as `quarry gc` does with runs). Files are
//! deleted only under the root's prefix, so a file of the same name in another root (a run, a
//! channel it was promoted from or to) is never touched. The reindex retires apt `by-hash/` and
//! dnf `repodata/` generations as any reindex does: kept for the grace period, then collected.
//!
//! In a channel with versions ([`crate::ops::versions`]), the pruned files leave a new current
//! version, made once the pages stop naming them and before they are deleted; like a
//! promotion's, it starts from the current version (files it does not name, a rolled-back
//! version's, stay out of its pages). An older version that named the pruned files is then
//! refused by `rollback`, naming the files. A version whose version string does not parse, or whose `upload-time` does not, is always
//! kept (with that reason). The markers go in first (one batch), then the root and every view
//! of it are republished without the marked files, then each file is deleted with its
//! sidecars and each marker only after its file, so an interrupted prune leaves no file
//! unmarked that a page no longer names. A dry run only reports.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use bytes::Bytes;
use jiff::Timestamp;
use quarry_packaging::{DebVersion, DistFilename, Version};
use quarry_store::{PutOptions, Store, StoreError};
use serde::Serialize;

use crate::error::IndexError;
use crate::ops::origin::entry_project;
use crate::reindex::indexer::Indexer;
use crate::reindex::plan::{LEAVING_SUFFIX, METADATA_SUFFIX, YANK_SUFFIX};
use crate::reindex::report::ReindexReport;
use crate::state::io::read_state;
use crate::state::root::{RepoKind, RepoRoot};
use crate::state::{Entry, RepoState};

/// Sidecars deleted with a pruned file (the indexer's own outputs go with the reindex).
pub(crate) const SIDECARS: &[&str] = &[METADATA_SUFFIX, YANK_SUFFIX, ".sha256sum"];

/// What a root keeps. With both rules a version is pruned only if both select it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PrunePolicy {
    /// Keep versions whose newest file entered the root less than this many days ago.
    pub keep_days: Option<u32>,
    /// Keep the newest N versions of each project.
    pub keep_versions: Option<usize>,
}

impl PrunePolicy {
    /// Whether the policy has a rule at all (without one nothing is pruned).
    pub fn is_set(&self) -> bool {
        self.keep_days.is_some() || self.keep_versions.is_some()
    }
}

/// One version of one project in a root, and what the policy decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionFiles {
    pub project: String,
    pub version: String,
    /// The files of this version, relative to the root.
    pub files: Vec<String>,
    /// The newest `upload-time` among them.
    pub newest: String,
    /// Why it is kept (empty when pruned).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kept_because: Vec<String>,
}

/// What pruning one root did (or, dry, would do).
#[derive(Debug, Serialize)]
pub struct PruneReport {
    pub root: String,
    pub kind: RepoKind,
    pub dry_run: bool,
    pub policy: PrunePolicy,
    pub now: String,
    pub kept: Vec<VersionFiles>,
    pub pruned: Vec<VersionFiles>,
    /// Keys deleted (files and their sidecars).
    pub deleted: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reindex: Option<ReindexReport>,
    /// The versions made current in channels above the root (a version without the pruned
    /// files): each channel's prefix and version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<(String, u64)>,
}

/// Why pruning could not run.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    #[error("no retention rule: give keep_days, keep_versions or both")]
    NoRule,
    #[error("{0} has never been indexed (no state): nothing to prune")]
    NoState(String),
    #[error("reading the state of {root}")]
    State { root: String, source: StoreError },
    #[error("deleting {key}")]
    Delete { key: String, source: StoreError },
    #[error("marking a file to prune: {key}")]
    Mark { key: String, source: StoreError },
    #[error("reindexing {root}")]
    Reindex { root: String, source: IndexError },
    #[error("reading the channel versions above {root}: {source}")]
    Versions { root: String, source: crate::ops::versions::VersionError },
}

/// A version's sort key inside its project: how the root's clients order versions.
#[derive(Debug, Clone, PartialEq, Eq)]
enum VersionKey {
    Pep440(Version),
    Deb(DebVersion),
    Rpm(String),
    /// Not parseable: never pruned by count (sorted first, i.e. newest).
    Unknown(String),
}

impl VersionKey {
    fn of(kind: RepoKind, entry: &Entry) -> Self {
        let text = version_text(kind, entry);
        match kind {
            RepoKind::Pip => text.parse().map(Self::Pep440).unwrap_or(Self::Unknown(text)),
            RepoKind::Apt => text.parse().map(Self::Deb).unwrap_or(Self::Unknown(text)),
            RepoKind::Dnf if entry.rpm_info().is_some() => Self::Rpm(text),
            RepoKind::Dnf => Self::Unknown(text),
        }
    }

    /// Newest first.
    fn newest_first(a: &Self, b: &Self) -> Ordering {
        match (a, b) {
            (Self::Pep440(a), Self::Pep440(b)) => b.cmp(a),
            (Self::Deb(a), Self::Deb(b)) => b.cmp(a),
            (Self::Rpm(a), Self::Rpm(b)) => crate::render::dnf::evr_str_cmp(b, a),
            (Self::Unknown(a), Self::Unknown(b)) => a.cmp(b),
            (Self::Unknown(_), _) => Ordering::Less,
            (_, Self::Unknown(_)) => Ordering::Greater,
            _ => Ordering::Equal,
        }
    }
}

/// The version an entry carries, as its format spells it (`epoch:version-release` for rpm).
fn version_text(kind: RepoKind, entry: &Entry) -> String {
    match kind {
        RepoKind::Pip => entry.filename.parse::<DistFilename>().map(|f| f.version().to_string()).unwrap_or_default(),
        RepoKind::Apt => entry.deb.as_ref().map(|d| d.version().to_owned()).unwrap_or_default(),
        RepoKind::Dnf => {
            entry.rpm_info().map(|r| format!("{}:{}-{}", r.epoch, r.version, r.release)).unwrap_or_default()
        }
    }
}

/// Pure: group `state`'s entries by project and version and decide each version under `policy`
/// as of `now`. Returns (kept, pruned), each sorted by project then newest version first.
pub fn select(
    kind: RepoKind,
    state: &RepoState,
    policy: PrunePolicy,
    now: Timestamp,
) -> (Vec<VersionFiles>, Vec<VersionFiles>) {
    let mut projects: BTreeMap<String, Vec<(VersionKey, VersionFiles)>> = BTreeMap::new();
    for entry in state.entries.values() {
        let Some(project) = entry_project(kind, entry) else { continue };
        let key = VersionKey::of(kind, entry);
        let versions = projects.entry(project.clone()).or_default();
        let version = match versions.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v,
            None => {
                let files = VersionFiles {
                    project,
                    version: version_text(kind, entry),
                    files: Vec::new(),
                    newest: String::new(),
                    kept_because: Vec::new(),
                };
                versions.push((key, files));
                &mut versions.last_mut().expect("just pushed").1
            }
        };
        version.files.push(entry.filename.clone());
        if entry.upload_time > version.newest {
            version.newest.clone_from(&entry.upload_time);
        }
    }
    let (mut kept, mut pruned) = (Vec::new(), Vec::new());
    for (_, mut versions) in projects {
        versions.sort_by(|(a, _), (b, _)| VersionKey::newest_first(a, b));
        for (rank, (key, mut version)) in versions.into_iter().enumerate() {
            version.files.sort();
            version.kept_because = reasons_to_keep(&key, rank, &version.newest, policy, now);
            if version.kept_because.is_empty() { pruned.push(version) } else { kept.push(version) }
        }
    }
    (kept, pruned)
}

/// Why `policy` keeps a version of rank `rank` (0 = newest) last uploaded at `newest`.
fn reasons_to_keep(key: &VersionKey, rank: usize, newest: &str, policy: PrunePolicy, now: Timestamp) -> Vec<String> {
    let mut reasons = Vec::new();
    if matches!(key, VersionKey::Unknown(_)) {
        reasons.push("its version does not parse".to_owned());
    }
    if let Some(n) = policy.keep_versions.filter(|n| rank < *n) {
        reasons.push(format!("among the newest {n}"));
    }
    if let Some(days) = policy.keep_days {
        match newest.parse::<Timestamp>() {
            Ok(t) if now.duration_since(t).as_secs() < i64::from(days) * 86_400 => {
                reasons.push(format!("uploaded within {days} days"));
            }
            Ok(_) => {}
            Err(_) => reasons.push(format!("upload-time {newest:?} does not parse")),
        }
    }
    reasons
}

/// Prune `root` under `policy` as of `now` (unless `dry_run`): mark the pruned versions'
/// files, republish the root and its views without them, delete the files with their sidecars
/// and markers, then reindex the root through `indexer`.
pub async fn prune_root(
    indexer: &Indexer,
    root: &RepoRoot,
    policy: PrunePolicy,
    now: Timestamp,
    dry_run: bool,
) -> Result<PruneReport, PruneError> {
    if !policy.is_set() {
        return Err(PruneError::NoRule);
    }
    let store = indexer.store().as_ref();
    let state = read_state(store, root)
        .await
        .map_err(|source| PruneError::State { root: root.to_string(), source })?
        .ok_or_else(|| PruneError::NoState(root.to_string()))?;
    let (kept, pruned) = select(root.kind(), &state, policy, now);
    let mut report = PruneReport {
        root: root.to_string(),
        kind: root.kind(),
        dry_run,
        policy,
        now: now.to_string(),
        kept,
        pruned,
        deleted: Vec::new(),
        reindex: None,
        versions: Vec::new(),
    };
    if dry_run || report.pruned.is_empty() {
        return Ok(report);
    }
    // Marked, the pruned files are indexed as gone by every reindex from now on (the Lambda's,
    // reacting to the deletions, too): the root's pages (and a generic root's views) stop
    // naming them before they go, so a reader between two deletes never follows a link to a
    // deleted file. Each marker goes after its file.
    let files: Vec<&String> = report.pruned.iter().flat_map(|v| &v.files).collect();
    let mut markers = Vec::new();
    for file in &files {
        let key = root
            .key(&format!("{}{LEAVING_SUFFIX}", root.file_path(file)))
            .map_err(|e| PruneError::Mark { key: format!("{root}{file}{LEAVING_SUFFIX}"), source: e.into() })?;
        markers.push((key, Bytes::new(), PutOptions::derived()));
    }
    let keys: Vec<String> = markers.iter().map(|(k, ..)| k.to_string()).collect();
    for (key, result) in keys.into_iter().zip(store.put_many(markers).await) {
        result.map_err(|source| PruneError::Mark { key, source })?;
    }
    // A channel above the root with versions gets a new current one without the pruned files
    // before they go, so readers served its pages never follow a link to a deleted file. It
    // starts from the current version: files it does not name (a rolled-back version's) stay
    // out of the pages.
    let versions_err = |source| PruneError::Versions { root: root.to_string(), source };
    let channels = crate::ops::versions::channels_above(store, root.as_str()).await.map_err(versions_err)?;
    let mut outside = std::collections::BTreeSet::new();
    for (channel, _) in &channels {
        outside.extend(
            crate::ops::versions::outside_current(store, channel, &Default::default())
                .await
                .map_err(versions_err)?
                .keys,
        );
    }
    indexer
        .reindex_before_removal(root, &outside)
        .await
        .map_err(|source| PruneError::Reindex { root: root.to_string(), source })?;
    // The channel's other roots holding such files too: the version copies every page.
    let others: std::collections::BTreeSet<RepoRoot> = outside
        .iter()
        .filter_map(|k| quarry_store::Key::new(k).ok())
        .filter_map(|k| RepoRoot::for_key(&k, indexer.layout()))
        .filter(|r| r != root)
        .collect();
    for other in others {
        indexer
            .run(crate::Request::new(other.clone()).leaving(outside.clone()))
            .await
            .map_err(|source| PruneError::Reindex { root: other.to_string(), source })?;
    }
    for (channel, _) in channels {
        let version = crate::ops::versions::snapshot(store, &channel, None, Some("prune"), &outside)
            .await
            .map_err(versions_err)?;
        report.versions.push((channel, version.n));
    }
    for file in files {
        report.deleted.extend(delete_with_sidecars(store, root, file).await?);
        if let Ok(marker) = root.key(&format!("{}{LEAVING_SUFFIX}", root.file_path(file))) {
            match store.delete(&marker).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(source) => return Err(PruneError::Delete { key: marker.to_string(), source }),
            }
        }
    }
    let reindexed =
        indexer.reindex(root).await.map_err(|source| PruneError::Reindex { root: root.to_string(), source })?;
    report.reindex = Some(reindexed);
    Ok(report)
}

/// Delete `file` (relative to `root`) and its sidecars; the keys that were there.
async fn delete_with_sidecars(store: &dyn Store, root: &RepoRoot, file: &str) -> Result<Vec<String>, PruneError> {
    let mut deleted = Vec::new();
    let file = root.file_path(file);
    let names = std::iter::once(file.clone()).chain(SIDECARS.iter().map(|s| format!("{file}{s}")));
    for name in names {
        let Ok(key) = root.key(&name) else { continue };
        match store.delete(&key).await {
            Ok(()) => deleted.push(key.to_string()),
            Err(e) if e.is_not_found() => {}
            Err(source) => return Err(PruneError::Delete { key: key.to_string(), source }),
        }
    }
    Ok(deleted)
}

impl std::fmt::Display for PruneReport {
    /// One line per version (`keep`/`prune`), then the totals.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for v in &self.kept {
            writeln!(f, "keep  {} {} ({} files; {})", v.project, v.version, v.files.len(), v.kept_because.join(", "))?;
        }
        let verb = if self.dry_run { "would prune" } else { "prune" };
        for v in &self.pruned {
            writeln!(f, "{verb} {} {} ({} files, newest {})", v.project, v.version, v.files.len(), v.newest)?;
        }
        let files: usize = self.pruned.iter().map(|v| v.files.len()).sum();
        writeln!(
            f,
            "{}: {} versions kept, {} pruned ({files} files, {} keys deleted){}",
            self.root,
            self.kept.len(),
            self.pruned.len(),
            self.deleted.len(),
            if self.dry_run { "; dry run, nothing changed" } else { "" }
        )?;
        if let Some(r) = &self.reindex {
            writeln!(f, "{r}")?;
        }
        for (channel, n) in &self.versions {
            writeln!(f, "version {n} of {} is current", channel.trim_end_matches('/'))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_entry;

    fn pip_state(files: &[(&str, &str)]) -> RepoState {
        let mut state = RepoState::empty();
        for (name, time) in files {
            let mut entry = test_entry(name);
            entry.upload_time = (*time).to_owned();
            state.entries.insert((*name).to_owned(), entry);
        }
        state
    }

    fn names(versions: &[VersionFiles]) -> Vec<String> {
        versions.iter().map(|v| format!("{} {}", v.project, v.version)).collect()
    }

    #[test]
    fn pip_versions_go_by_pep440_and_age() {
        let state = pip_state(&[
            ("foo-1.9-py3-none-any.whl", "2026-01-01T00:00:00.000000Z"),
            ("foo-1.9.tar.gz", "2026-01-02T00:00:00.000000Z"),
            ("foo-1.10-py3-none-any.whl", "2026-01-01T00:00:00.000000Z"),
            ("foo-1.10rc1-py3-none-any.whl", "2026-03-01T00:00:00.000000Z"),
            ("bar-0.1-py3-none-any.whl", "2025-01-01T00:00:00.000000Z"),
        ]);
        let now: Timestamp = "2026-03-05T00:00:00Z".parse().unwrap();
        let count = PrunePolicy { keep_days: None, keep_versions: Some(1) };
        let (kept, pruned) = select(RepoKind::Pip, &state, count, now);
        assert_eq!(names(&kept), ["bar 0.1", "foo 1.10"]);
        assert_eq!(names(&pruned), ["foo 1.10rc1", "foo 1.9"]);
        assert_eq!(pruned[1].files, ["foo-1.9-py3-none-any.whl", "foo-1.9.tar.gz"]);
        assert_eq!(pruned[1].newest, "2026-01-02T00:00:00.000000Z");
        // Both rules: pruned only if both select it; 1.10rc1 is young.
        let both = PrunePolicy { keep_days: Some(30), keep_versions: Some(1) };
        let (kept, pruned) = select(RepoKind::Pip, &state, both, now);
        assert_eq!(names(&kept), ["bar 0.1", "foo 1.10", "foo 1.10rc1"]);
        assert_eq!(kept[2].kept_because, ["uploaded within 30 days"]);
        assert_eq!(names(&pruned), ["foo 1.9"]);
        let days = PrunePolicy { keep_days: Some(30), keep_versions: None };
        assert_eq!(names(&select(RepoKind::Pip, &state, days, now).0), ["foo 1.10rc1"]);
    }

    #[test]
    fn deb_and_rpm_versions_go_by_their_own_order() {
        let mut state = RepoState::empty();
        for (file, version) in [("a.deb", "1.0~rc1"), ("b.deb", "1.0"), ("c.deb", "1:0.1")] {
            let mut entry = test_entry(file);
            let fields = vec![("Package".to_owned(), "rocm".to_owned()), ("Version".to_owned(), version.to_owned())];
            entry.deb = Some(crate::deb::DebControl { fields }.into());
            state.entries.insert(file.into(), entry);
        }
        let policy = PrunePolicy { keep_days: None, keep_versions: Some(2) };
        let (kept, pruned) = select(RepoKind::Apt, &state, policy, Timestamp::UNIX_EPOCH);
        assert_eq!(names(&kept), ["rocm 1:0.1", "rocm 1.0"]);
        assert_eq!(names(&pruned), ["rocm 1.0~rc1"]);
        assert_eq!(
            VersionKey::newest_first(&VersionKey::Rpm("0:7.10-1".into()), &VersionKey::Rpm("0:7.9-1".into())),
            Ordering::Less
        );
    }

    #[test]
    fn report_text_and_json_snapshots() {
        let state = pip_state(&[
            ("foo-1.0-py3-none-any.whl", "2026-01-01T00:00:00.000000Z"),
            ("foo-2.0-py3-none-any.whl", "2026-03-01T00:00:00.000000Z"),
        ]);
        let now: Timestamp = "2026-03-05T00:00:00Z".parse().unwrap();
        let policy = PrunePolicy { keep_days: Some(30), keep_versions: Some(1) };
        let (kept, pruned) = select(RepoKind::Pip, &state, policy, now);
        let report = PruneReport {
            root: "v2/gfx94X-dcgpu/".into(),
            kind: RepoKind::Pip,
            dry_run: true,
            policy,
            now: now.to_string(),
            kept,
            pruned,
            deleted: Vec::new(),
            reindex: None,
            versions: Vec::new(),
        };
        insta::assert_snapshot!("prune_report_text", report.to_string());
        insta::assert_snapshot!("prune_report_json", serde_json::to_string_pretty(&report).unwrap());
    }
}
