//! Retention: delete whole CI runs (`{run}-{platform}/` prefixes) by age or count, then
//! reindex every remaining pip, apt and dnf root so each stays consistent and superseded
//! `by-hash/` and `repodata/` generations past their grace period are collected
//! (`quarry gc`).
//!
//! A run's age is the newest `last_modified` of the objects uploaded into it: Quarry's own index
//! outputs (pages, states, apt `dists/`, dnf `repodata/`, `.metadata` sidecars) are left out, so
//! a reindex, a re-sign (`quarry index --force`) or this module's own collection of retired
//! files does not make an old run young again. A run holding nothing else is aged by all of its
//! objects. Nothing outside the selected run prefixes is deleted; the reindex only writes where
//! a remaining root's state says so.
//!
//! [`select`]: `older_than` takes runs whose newest upload is older; `keep_last` keeps the N
//! newest runs of each platform; with both rules, a run goes only if both select it. A selected
//! run is deleted in waves, pages before what they name (its artifact listings, its repos'
//! entry points, their other pages, then the uploads and their `.metadata`), its state objects
//! last, listed again for anything written meanwhile (up to three passes). Then every remaining
//! root under the prefix is reindexed, which collects the retired apt/dnf outputs past their
//! grace period; a signed repo is left alone when no signing key is configured. A dry run
//! changes nothing: it reports the runs it would delete and what the reindexes would collect. A
//! run or root that fails is reported and the rest go on.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::StreamExt;
use jiff::{SignedDuration, Timestamp};
use quarry_layout::config::Layout;
use quarry_layout::{RunSegment, run_id_order};
use quarry_store::{ObjectMeta, Store, StoreError, StoreExt};
use serde::Serialize;

use crate::render::listing::human_size;
use crate::render::listing::{LISTING_CACHE, LISTING_PAGE};
use crate::{IndexError, Indexer, METADATA_SUFFIX, RepoKind, RepoRoot, discover, read_state};

/// List-and-delete passes per run: objects written into a run while it is deleted (an indexer
/// reacting to the deletes) are caught by the next pass.
const DELETE_PASSES: usize = 3;

/// Reindexes of remaining roots in flight at once, at most.
const MAX_REINDEX_CONCURRENCY: usize = 8;

/// Which runs to delete, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionOptions {
    /// Only runs directly under this key prefix: empty (the store root) or ending in `/`.
    pub prefix: String,
    /// Select runs whose newest upload is older than this.
    pub older_than: Option<SignedDuration>,
    /// Keep the N newest runs of each platform and select the rest. With both rules, a run is
    /// selected only if both select it.
    pub keep_last: Option<usize>,
    /// Say what would be deleted and collected; change nothing.
    pub dry_run: bool,
    /// Listings and deletes in flight at once.
    pub concurrency: usize,
}

/// One run and what the store holds under it.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// The key prefix, ending in `/`.
    pub run: String,
    pub id: String,
    pub platform: String,
    pub objects: usize,
    pub bytes: u64,
    /// The newest `last_modified` of the objects uploaded into the run, Quarry's index outputs
    /// left out (of all its objects when it holds nothing else), RFC 3339.
    #[serde(serialize_with = "rfc3339")]
    pub newest: Timestamp,
    pub age_seconds: i64,
    /// Why the run is selected (empty when kept).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// Why deleting the run failed (it is partly deleted; its roots are reindexed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn rfc3339<S: serde::Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(t)
}

impl Run {
    /// Numeric order of run ids without parsing (ids may exceed any integer type).
    fn id_order(&self) -> (usize, &str) {
        run_id_order(&self.id)
    }
}

/// What retention did to one remaining root.
#[derive(Debug, Clone, Serialize)]
pub struct RootReport {
    pub root: String,
    pub kind: RepoKind,
    /// Retired content-addressed files past their grace period (collected, or to be collected
    /// with `dry_run`).
    pub retired_collected: usize,
    /// Retired files still within their grace period.
    pub retired_kept: usize,
    /// Keys the reindex deleted (retired files and outputs the new state no longer lists).
    pub deleted: usize,
    pub written: usize,
    pub committed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// What a retention pass selected, deleted, kept and collected, and what failed.
#[derive(Debug, Serialize)]
pub struct RetentionReport {
    pub store: String,
    pub prefix: String,
    pub dry_run: bool,
    pub older_than_seconds: Option<i64>,
    pub keep_last: Option<usize>,
    pub grace_seconds: i64,
    pub deleted: Vec<Run>,
    pub kept: Vec<Run>,
    pub deleted_objects: usize,
    pub deleted_bytes: u64,
    pub roots: Vec<RootReport>,
    pub retired_collected: usize,
    pub failures: Vec<String>,
}

/// Why retention could not run, or one run or root failed.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error("listing {what}")]
    List { what: String, source: StoreError },
    #[error("listing the remaining roots")]
    Roots(#[source] StoreError),
    #[error("{failed} deletes failed, first: {first}")]
    Deletes { failed: usize, first: String },
    #[error("{left} objects still under {run} after {DELETE_PASSES} passes")]
    Left { left: usize, run: String },
    #[error("reading {key}")]
    State { key: String, source: StoreError },
    #[error("reindexing {root}")]
    Reindex { root: String, source: IndexError },
}

/// Lists the runs under the prefix, selects, deletes the selected ones (unless `dry_run`) and
/// reindexes every remaining root through `indexer` (its store and configuration), as of
/// `now`. A run or root that fails is in [`RetentionReport::failures`]; the rest go on.
pub async fn apply(
    indexer: &Indexer,
    options: &RetentionOptions,
    now: Timestamp,
) -> Result<RetentionReport, RetentionError> {
    let store = indexer.store().as_ref();
    let mut runs = list_runs(store, &options.prefix, now, options.concurrency).await?;
    select(&mut runs, options.older_than, options.keep_last);
    let (mut selected, kept): (Vec<Run>, Vec<Run>) = runs.into_iter().partition(|r| !r.reasons.is_empty());
    let mut report = RetentionReport {
        store: store.describe(),
        prefix: options.prefix.clone(),
        dry_run: options.dry_run,
        older_than_seconds: options.older_than.map(|d| d.as_secs()),
        keep_last: options.keep_last,
        grace_seconds: indexer.config().grace_seconds,
        deleted_objects: selected.iter().map(|r| r.objects).sum(),
        deleted_bytes: selected.iter().map(|r| r.bytes).sum(),
        deleted: Vec::new(),
        kept,
        roots: Vec::new(),
        retired_collected: 0,
        failures: Vec::new(),
    };
    if !options.dry_run {
        for run in &mut selected {
            if let Err(e) = delete_run(store, run, options.concurrency, indexer.layout()).await {
                let e = quarry_store::error_chain(&e);
                tracing::error!(run = %run.run, "{e}");
                report.failures.push(format!("deleting {}: {e}", run.run));
                run.error = Some(e);
            }
        }
    }
    report.deleted = selected;
    collect_roots(indexer, options, now, &mut report).await?;
    Ok(report)
}

/// Reindexes (or, dry, checks) every root left under the prefix (a partly deleted run's too:
/// its pages must follow what is left of it) into `report`.
async fn collect_roots(
    indexer: &Indexer,
    options: &RetentionOptions,
    now: Timestamp,
    report: &mut RetentionReport,
) -> Result<(), RetentionError> {
    let (roots, _) =
        discover(indexer.store().as_ref(), &options.prefix, indexer.layout()).await.map_err(RetentionError::Roots)?;
    let selected_prefixes: Vec<&str> = report.deleted.iter().map(|r| r.run.as_str()).collect();
    let roots: Vec<RepoRoot> = roots
        .into_iter()
        .filter(|root| !options.dry_run || !selected_prefixes.iter().any(|p| root.as_str().starts_with(p)))
        .collect();
    let results: Vec<(RepoRoot, Result<RootReport, RetentionError>)> = futures_util::stream::iter(roots)
        .map(|root| async move {
            let result = collect_root(indexer, &root, options.dry_run, now).await;
            (root, result)
        })
        .buffered(options.concurrency.min(MAX_REINDEX_CONCURRENCY))
        .collect()
        .await;
    for (root, result) in results {
        match result {
            Ok(r) => report.roots.push(r),
            Err(e) => {
                let e = quarry_store::error_chain(&e);
                tracing::error!(%root, "{e}");
                report.failures.push(format!("reindexing {root}: {e}"));
            }
        }
    }
    report.retired_collected = report.roots.iter().map(|r| r.retired_collected).sum();
    Ok(())
}

/// Every run directly under `prefix`, with its objects, size and newest time.
pub async fn list_runs(
    store: &dyn Store,
    prefix: &str,
    now: Timestamp,
    concurrency: usize,
) -> Result<Vec<Run>, RetentionError> {
    let top = store
        .list_all(prefix, true)
        .await
        .map_err(|source| RetentionError::List { what: format!("{prefix:?}"), source })?;
    let candidates: Vec<(String, String, String)> = top
        .common_prefixes
        .into_iter()
        .filter_map(|p| {
            let run = RunSegment::parse(p.strip_prefix(prefix)?.trim_end_matches('/'))?;
            let (id, platform) = (run.run_id.to_owned(), run.platform.to_owned());
            Some((p, id, platform))
        })
        .collect();
    let listed: Vec<Result<Option<Run>, RetentionError>> = futures_util::stream::iter(candidates)
        .map(|(run, id, platform)| async move {
            let page = store
                .list_all(&run, false)
                .await
                .map_err(|source| RetentionError::List { what: run.clone(), source })?;
            let uploaded = page.objects.iter().filter(|o| !is_generated(&o.key)).map(|o| o.last_modified).max();
            let Some(newest) = uploaded.or_else(|| page.objects.iter().map(|o| o.last_modified).max()) else {
                return Ok(None);
            };
            Ok(Some(Run {
                objects: page.objects.len(),
                bytes: page.objects.iter().map(|o| o.size).sum(),
                age_seconds: now.duration_since(newest).as_secs(),
                newest,
                run,
                id,
                platform,
                reasons: Vec::new(),
                error: None,
            }))
        })
        .buffered(concurrency.clamp(1, 16))
        .collect()
        .await;
    let mut runs = Vec::new();
    for run in listed {
        runs.extend(run?);
    }
    Ok(runs)
}

/// Mark the runs to delete: with both rules, only those both select.
pub fn select(runs: &mut [Run], older_than: Option<SignedDuration>, keep_last: Option<usize>) {
    let mut beyond = BTreeSet::new();
    if let Some(n) = keep_last {
        let mut by_platform: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
        for run in runs.iter() {
            by_platform.entry(&run.platform).or_default().push(run);
        }
        for (_, mut list) in by_platform {
            list.sort_by(|a, b| b.newest.cmp(&a.newest).then_with(|| b.id_order().cmp(&a.id_order())));
            beyond.extend(list.into_iter().skip(n).map(|r| r.run.clone()));
        }
    }
    for run in runs.iter_mut() {
        let mut reasons = Vec::new();
        if let Some(limit) = older_than {
            if run.age_seconds <= limit.as_secs() {
                continue;
            }
            reasons.push(format!(
                "newest upload {} ago, older than {}",
                duration(run.age_seconds),
                duration(limit.as_secs())
            ));
        }
        if let Some(n) = keep_last {
            if !beyond.contains(&run.run) {
                continue;
            }
            reasons.push(format!("not among the {n} newest {} runs", run.platform));
        }
        run.reasons = reasons;
    }
}

/// Whether `key` is one of Quarry's index outputs (rewritten by every reindex or re-sign)
/// rather than something uploaded: states and listing caches, `index.html` pages, PEP 658
/// sidecars, pip `simple/`, apt `dists/` and the published key, dnf `repodata/`.
fn is_generated(key: &quarry_store::Key) -> bool {
    let name = key.filename();
    if name.starts_with(".quarry-") || name == LISTING_PAGE || name == "quarry-archive-key.asc" {
        return true;
    }
    if name.ends_with(METADATA_SUFFIX) {
        return true;
    }
    let mut dirs = key.as_str().split('/');
    dirs.next_back();
    dirs.any(|d| matches!(d, "simple" | "dists" | "repodata" | ".quarry-index"))
}

fn is_state(object: &ObjectMeta) -> bool {
    let name = object.key.filename();
    (name.starts_with(".quarry-") && name.ends_with(".json"))
        || name == LISTING_CACHE
        || object.key.as_str().contains("/.quarry-index/")
}

/// When an object of a deleted run goes, so that no page ever names an object already gone:
/// pages before what they name, each wave deleted whole before the next. First the artifact
/// listings, the run's own before those below it (each names its subdirectories' pages);
/// then the repos' entry points (the find-links page, `simple/index.*`, apt's `InRelease` and
/// `Release`, dnf's `repomd.xml`); then the pages only those name (project pages, which pip
/// also reads directly, `Packages`, `by-hash/`, repodata, signatures); then the uploads and
/// their `.metadata`; the index state objects last.
fn deletion_wave(object: &ObjectMeta, layout: &Layout) -> (u8, usize) {
    let key = object.key.as_str();
    let name = object.key.filename();
    let depth = key.matches('/').count();
    if is_state(object) {
        return (5, 0);
    }
    let mut dirs = key.split('/').rev().skip(1);
    let parent = dirs.next().unwrap_or_default();
    let grandparent = dirs.next().unwrap_or_default();
    if name == LISTING_PAGE && crate::ListingDir::new(object.key.parent_prefix(), layout).is_some() {
        return (0, depth);
    }
    // pip: the find-links page and the simple root (`simple/{project}/…` are project pages).
    let pip_entry = grandparent != "simple"
        && match name {
            "index.html" => true,
            "index.json" => parent == "simple",
            _ => false,
        };
    let native_entry =
        (parent == crate::render::apt::SUITE && grandparent == "dists" && (name == "InRelease" || name == "Release"))
            || key.ends_with(&format!("/{}", crate::render::dnf::REPOMD));
    if pip_entry || native_entry {
        return (1, 0);
    }
    // A `.metadata` goes with its file: project pages (wave 2) name it.
    if is_generated(&object.key) && !name.ends_with(METADATA_SUFFIX) {
        return (2, 0);
    }
    (3, 0)
}

/// Delete every object under the run's prefix, in [`deletion_wave`] order (pages before what
/// they name, index state objects last); list again and repeat (bounded) for anything written
/// meanwhile.
async fn delete_run(store: &dyn Store, run: &Run, concurrency: usize, layout: &Layout) -> Result<(), RetentionError> {
    let list = |run: &str| {
        let run = run.to_owned();
        async move {
            match store.list_all(&run, false).await {
                Ok(page) => Ok(page.objects),
                Err(source) => Err(RetentionError::List { what: run, source }),
            }
        }
    };
    for pass in 1..=DELETE_PASSES {
        let objects = list(&run.run).await?;
        if objects.is_empty() {
            tracing::info!(run = %run.run, objects = run.objects, bytes = run.bytes, "deleted");
            return Ok(());
        }
        if pass > 1 {
            tracing::warn!(run = %run.run, pass, left = objects.len(), "objects appeared while the run was deleted");
        }
        let mut waves: BTreeMap<(u8, usize), Vec<ObjectMeta>> = BTreeMap::new();
        for object in objects {
            waves.entry(deletion_wave(&object, layout)).or_default().push(object);
        }
        for wave in waves.into_values() {
            delete_all(store, wave, concurrency).await?;
        }
    }
    let left = list(&run.run).await?;
    if left.is_empty() {
        return Ok(());
    }
    Err(RetentionError::Left { left: left.len(), run: run.run.clone() })
}

async fn delete_all(store: &dyn Store, objects: Vec<ObjectMeta>, concurrency: usize) -> Result<(), RetentionError> {
    let failures: Vec<String> =
        futures_util::stream::iter(objects)
            .map(|object| async move {
                store.delete(&object.key).await.err().map(|e| format!("deleting {}: {e}", object.key))
            })
            .buffer_unordered(concurrency.max(1))
            .filter_map(std::future::ready)
            .collect()
            .await;
    match failures.as_slice() {
        [] => Ok(()),
        [first, ..] => Err(RetentionError::Deletes { failed: failures.len(), first: first.clone() }),
    }
}

/// Reindex one remaining root (or, dry, say what a reindex would collect).
async fn collect_root(
    indexer: &Indexer,
    root: &RepoRoot,
    dry_run: bool,
    now: Timestamp,
) -> Result<RootReport, RetentionError> {
    let store = indexer.store();
    let grace = indexer.config().grace_seconds.max(0);
    let mut out = RootReport {
        root: root.to_string(),
        kind: root.kind(),
        retired_collected: 0,
        retired_kept: 0,
        deleted: 0,
        written: 0,
        committed: false,
        skipped: None,
    };
    // Only apt and dnf roots retire files; their state says which and since when.
    let state = if root.kind() == RepoKind::Pip {
        None
    } else {
        read_state(store.as_ref(), root)
            .await
            .map_err(|source| RetentionError::State { key: root.state_key().to_string(), source })?
    };
    let retired: BTreeMap<String, i64> = state.as_ref().map(|s| s.retired.clone()).unwrap_or_default();
    let (expired, within): (Vec<_>, Vec<_>) = retired.iter().partition(|(_, since)| now.as_second() - **since >= grace);
    out.retired_kept = within.len();
    let signed = state
        .as_ref()
        .is_some_and(|s| s.outputs.keys().any(|k| k.ends_with("/Release.gpg") || k.ends_with("/repomd.xml.asc")));
    if signed && indexer.config().signer.is_none() {
        out.skipped = Some(
            "signed repo, but no signing key in the environment (QUARRY_SIGNING_KEY[_FILE]): not reindexed".into(),
        );
        tracing::warn!(%root, "signed repo and no signing key configured; left alone");
        return Ok(out);
    }
    if dry_run {
        out.retired_collected = expired.len();
        return Ok(out);
    }
    let report =
        indexer.reindex(root).await.map_err(|source| RetentionError::Reindex { root: root.to_string(), source })?;
    let deleted: BTreeSet<&str> = report.deleted.iter().map(String::as_str).collect();
    out.retired_collected = expired.iter().filter(|(k, _)| deleted.contains(k.as_str())).count();
    out.deleted = report.deleted.len();
    out.written = report.written.len();
    out.committed = report.committed;
    tracing::info!(%root, retired = out.retired_collected, "{report}");
    Ok(out)
}

/// An age for people: `30d`, `40d 3h`, `5h 12m`, `3m 20s`.
pub fn duration(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    if d > 0 && h == 0 {
        format!("{d}d")
    } else if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else {
        format!("{m}m {}s", s % 60)
    }
}

/// The text report `quarry gc` prints: one line per deleted or kept run and per collected
/// root, then the totals and the failures.
impl std::fmt::Display for RetentionReport {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let report = self;
        let verb = if report.dry_run { "would delete" } else { "deleted" };
        for run in &report.deleted {
            if run.error.is_some() {
                continue; // among the failures below
            }
            writeln!(
                out,
                "{verb} {}: {} objects, {} ({})",
                run.run,
                run.objects,
                human_size(run.bytes),
                run.reasons.join("; ")
            )?;
        }
        for run in &report.kept {
            writeln!(
                out,
                "kept {}: {} objects, newest upload {} ago",
                run.run,
                run.objects,
                duration(run.age_seconds)
            )?;
        }
        for root in &report.roots {
            if let Some(why) = &root.skipped {
                writeln!(out, "skipped {}: {why}", root.root)?;
            } else if root.retired_collected > 0 {
                let verb = if report.dry_run { "would collect" } else { "collected" };
                writeln!(out, "{verb} {} retired files in {}", root.retired_collected, root.root)?;
            }
        }
        let failed = report.deleted.iter().filter(|r| r.error.is_some()).count();
        writeln!(
            out,
            "{} {} runs ({} objects, {}){}, kept {}; {} roots {}, {} retired files {}",
            verb,
            report.deleted.len() - failed,
            report.deleted_objects,
            human_size(report.deleted_bytes),
            if failed > 0 { format!(", {failed} failed") } else { String::new() },
            report.kept.len(),
            report.roots.len(),
            if report.dry_run { "checked" } else { "reindexed" },
            report.retired_collected,
            if report.dry_run { "to collect" } else { "collected" },
        )?;
        for failure in &report.failures {
            writeln!(out, "failed: {failure}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, age_days: i64, now: Timestamp) -> Run {
        let (id, platform) = name.split_once('-').unwrap();
        let newest = now - SignedDuration::from_hours(24 * age_days);
        Run {
            run: format!("{name}/"),
            id: id.into(),
            platform: platform.into(),
            objects: 1,
            bytes: 1,
            newest,
            age_seconds: now.duration_since(newest).as_secs(),
            reasons: Vec::new(),
            error: None,
        }
    }

    fn selected(runs: &[Run]) -> Vec<&str> {
        runs.iter().filter(|r| !r.reasons.is_empty()).map(|r| r.run.as_str()).collect()
    }

    #[test]
    fn run_segments_follow_the_listing_rule() {
        let is_run_segment = |s| RunSegment::parse(s).is_some();
        assert!(is_run_segment("12345-linux") && is_run_segment("1-windows") && is_run_segment("7-linux_asan"));
        assert!(!is_run_segment("python") && !is_run_segment("-linux") && !is_run_segment("12a-linux"));
        assert!(!is_run_segment("12-") && !is_run_segment("ROCm-TheRock"));
    }

    #[test]
    fn index_outputs_do_not_count_for_a_runs_age() {
        let generated = |k: &str| is_generated(&quarry_store::Key::new(k).unwrap());
        for key in [
            "1-linux/index.html",
            "1-linux/.quarry-listing.json",
            "1-linux/python/.quarry-index.json",
            "1-linux/python/simple/rocm/index.json",
            "1-linux/python/rocm-1.0-py3-none-any.whl.metadata",
            "1-linux/packages/deb/dists/stable/InRelease",
            "1-linux/packages/deb/dists/stable/main/binary-amd64/by-hash/SHA256/ab",
            "1-linux/packages/deb/quarry-archive-key.asc",
            "1-linux/packages/rpm/x86_64/repodata/repomd.xml",
        ] {
            assert!(generated(key), "{key}");
        }
        for key in [
            "1-linux/python/rocm-1.0-py3-none-any.whl",
            "1-linux/python/rocm-1.0-py3-none-any.whl.yanked",
            "1-linux/packages/deb/pool/main/a_1.0_amd64.deb",
            "1-linux/packages/rpm/x86_64/a-1.0-1.x86_64.rpm",
            "1-linux/blas_lib_gfx942.tar.zst",
            "1-linux/logs/simple.log",
        ] {
            assert!(!generated(key), "{key}");
        }
    }

    #[test]
    fn keep_last_counts_per_platform_and_both_rules_must_agree() {
        let now = Timestamp::now();
        let fresh = || {
            vec![
                run("101-linux", 50, now),
                run("102-linux", 40, now),
                run("103-linux", 20, now),
                run("104-linux", 1, now),
                run("99-windows", 45, now),
                run("100-windows", 10, now),
            ]
        };
        let mut runs = fresh();
        select(&mut runs, None, Some(2));
        assert_eq!(selected(&runs), ["101-linux/", "102-linux/"]);
        let mut runs = fresh();
        select(&mut runs, Some(SignedDuration::from_hours(24 * 30)), None);
        assert_eq!(selected(&runs), ["101-linux/", "102-linux/", "99-windows/"]);
        let mut runs = fresh();
        select(&mut runs, Some(SignedDuration::from_hours(24 * 45)), Some(1));
        assert_eq!(selected(&runs), ["101-linux/"]);
        // Equal ages: the larger run id is the newer (numerically, not as text).
        let mut runs = vec![run("9-linux", 3, now), run("10-linux", 3, now)];
        runs[1].newest = runs[0].newest;
        select(&mut runs, None, Some(1));
        assert_eq!(selected(&runs), ["9-linux/"]);
    }
}
