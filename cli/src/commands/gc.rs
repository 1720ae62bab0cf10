//! `quarry gc`: delete whole CI runs (`{run}-{platform}/` prefixes) by age or count, then
//! reindex every remaining pip, apt and dnf root so each stays consistent and superseded
//! `by-hash/` and `repodata/` generations past their grace period are collected.
//!
//! A run's age is the newest `last_modified` of the objects uploaded into it: Quarry's own index
//! outputs (pages, states, apt `dists/`, dnf `repodata/`, `.metadata` sidecars) are left out, so
//! a reindex, a re-sign (`quarry index --force`) or this command's own collection of retired
//! files does not make an old run young again. A run holding nothing else is aged by all of its
//! objects. Nothing outside the selected run prefixes is deleted; the reindex only writes where
//! a remaining root's state says so.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use futures_util::StreamExt;
use jiff::{SignedDuration, SpanRelativeTo, Timestamp};
use quarry_index::listing::{LISTING_CACHE, LISTING_PAGE, human_size, is_run_segment};
use quarry_index::{IndexConfig, Indexer, METADATA_SUFFIX, RepoKind, RepoRoot, discover};
use quarry_store::{ObjectMeta, Store, StoreExt};
use serde::Serialize;

use super::UsageError;

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct GcArgs {
    /// The store: a directory, file:// or s3://bucket/prefix URL.
    #[arg(long)]
    store: String,
    /// Select runs whose newest upload is older than this: 30d, 12h, 90m, 3600s, or any span
    /// jiff parses ("1d 12h", "P30D"; days are 24 hours, months and years are refused).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    older_than: Option<SignedDuration>,
    /// Keep the N newest runs of each platform (by their newest upload, ties to the larger run
    /// id) and select the rest.
    #[arg(long, value_name = "N")]
    keep_last: Option<usize>,
    /// Print what would be deleted and collected; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Only runs directly under this key prefix (TheRock's external bucket keeps runs under
    /// `<owner>-<repo>/`); default the store root.
    #[arg(long, default_value = "")]
    prefix: String,
    /// Deletes in flight at once.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    concurrency: u16,
}

const AFTER_HELP: &str = "With both --older-than and --keep-last, a run is deleted only if both select it. \
A run is a key prefix `{digits}-{platform}/` (12345-linux/). Every remaining pip, apt and dnf root is then \
reindexed with the indexer's environment (QUARRY_SIGNING_KEY[_FILE], QUARRY_GRACE_SECONDS, …): give gc the \
signing key the repos were signed with; a signed apt/dnf root is left alone when no key is configured.";

/// Parse `--older-than`: a jiff span (`30d`, `12h`, `90m`, `3600s`, `1d 12h`, `P30D`).
fn parse_age(text: &str) -> Result<SignedDuration, String> {
    let span: jiff::Span =
        text.trim().parse().map_err(|e| format!("{text:?} is not an age such as 30d, 12h, 90m or 3600s ({e})"))?;
    let age = span.to_duration(SpanRelativeTo::days_are_24_hours()).map_err(|_| {
        format!("{text:?}: use days, hours, minutes or seconds (months and years have no fixed length)")
    })?;
    if age.is_negative() {
        return Err(format!("{text:?} is negative"));
    }
    Ok(age)
}

/// One run and what the store holds under it.
#[derive(Debug, Clone, Serialize)]
struct Run {
    /// The key prefix, ending in `/`.
    run: String,
    id: String,
    platform: String,
    objects: usize,
    bytes: u64,
    /// The newest `last_modified` of the objects uploaded into the run, Quarry's index outputs
    /// left out (of all its objects when it holds nothing else), RFC 3339.
    #[serde(serialize_with = "rfc3339")]
    newest: Timestamp,
    age_seconds: i64,
    /// Why the run is selected (empty when kept).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    reasons: Vec<String>,
    /// Why deleting the run failed (it is partly deleted; its roots are reindexed).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn rfc3339<S: serde::Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(t)
}

impl Run {
    /// Numeric order of run ids without parsing (ids may exceed any integer type).
    fn id_order(&self) -> (usize, &str) {
        quarry_index::listing::run_id_order(&self.id)
    }
}

/// What `gc` did to one remaining root.
#[derive(Debug, Clone, Serialize)]
struct RootReport {
    root: String,
    kind: RepoKind,
    /// Retired content-addressed files past their grace period (collected, or to be collected
    /// with `--dry-run`).
    retired_collected: usize,
    /// Retired files still within their grace period.
    retired_kept: usize,
    /// Keys the reindex deleted (retired files and outputs the new state no longer lists).
    deleted: usize,
    written: usize,
    committed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    store: String,
    prefix: String,
    dry_run: bool,
    older_than_seconds: Option<i64>,
    keep_last: Option<usize>,
    grace_seconds: i64,
    deleted: Vec<Run>,
    kept: Vec<Run>,
    deleted_objects: usize,
    deleted_bytes: u64,
    roots: Vec<RootReport>,
    retired_collected: usize,
    failures: Vec<String>,
}

/// Largest state object read (as the indexer's own limit).
/// List-and-delete passes per run: objects written into a run while it is deleted (an indexer
/// reacting to the deletes) are caught by the next pass.
const DELETE_PASSES: usize = 3;

pub(crate) async fn run(args: GcArgs) -> anyhow::Result<()> {
    if args.older_than.is_none() && args.keep_last.is_none() {
        return Err(
            UsageError::new("nothing selects a run: give --older-than AGE (e.g. 30d), --keep-last N, or both").into()
        );
    }
    let mut prefix = args.prefix.trim_start_matches('/').to_owned();
    if !prefix.is_empty() && !prefix.ends_with('/') {
        prefix.push('/');
    }
    quarry_store::validate_prefix(&prefix).map_err(|e| UsageError::new(format!("--prefix {:?}: {e}", args.prefix)))?;
    let config = IndexConfig::from_env()
        .map_err(|e| UsageError::new(format!("the index configuration from the environment: {e}")))?;
    let store = open_store(&args.store).await?;

    let now = Timestamp::now();
    let mut runs = list_runs(store.as_ref(), &prefix, now, args.concurrency.into()).await?;
    select(&mut runs, args.older_than, args.keep_last);
    let (selected, kept): (Vec<Run>, Vec<Run>) = runs.into_iter().partition(|r| !r.reasons.is_empty());

    let mut report = Report {
        store: store.describe(),
        prefix: prefix.clone(),
        dry_run: args.dry_run,
        older_than_seconds: args.older_than.map(|d| d.as_secs()),
        keep_last: args.keep_last,
        grace_seconds: config.grace_seconds,
        deleted_objects: selected.iter().map(|r| r.objects).sum(),
        deleted_bytes: selected.iter().map(|r| r.bytes).sum(),
        deleted: Vec::new(),
        kept,
        roots: Vec::new(),
        retired_collected: 0,
        failures: Vec::new(),
    };

    let mut selected = selected;
    if !args.dry_run {
        for run in &mut selected {
            if let Err(e) = delete_run(store.as_ref(), run, args.concurrency.into()).await {
                tracing::error!(run = %run.run, "{e:#}");
                report.failures.push(format!("deleting {}: {e:#}", run.run));
                run.error = Some(format!("{e:#}"));
            }
        }
    }
    report.deleted = selected;

    // Every root left under the prefix (a partly deleted run's too: its pages must follow
    // what is left of it).
    let (roots, _) = discover(store.as_ref(), &prefix).await.context("listing the remaining roots")?;
    let selected_prefixes: Vec<&str> = report.deleted.iter().map(|r| r.run.as_str()).collect();
    let roots: Vec<RepoRoot> = roots
        .into_iter()
        .filter(|root| !args.dry_run || !selected_prefixes.iter().any(|p| root.as_str().starts_with(p)))
        .collect();
    let indexer = Indexer::new(store.clone()).with_config(config);
    let concurrency = usize::from(args.concurrency).min(8);
    let results: Vec<(RepoRoot, anyhow::Result<RootReport>)> = futures_util::stream::iter(roots)
        .map(|root| {
            let indexer = &indexer;
            async move {
                let result = collect_root(indexer, &root, args.dry_run, now).await;
                (root, result)
            }
        })
        .buffered(concurrency)
        .collect()
        .await;
    for (root, result) in results {
        match result {
            Ok(r) => report.roots.push(r),
            Err(e) => {
                tracing::error!(%root, "{e:#}");
                report.failures.push(format!("reindexing {root}: {e:#}"));
            }
        }
    }
    report.retired_collected = report.roots.iter().map(|r| r.retired_collected).sum();

    print(&report, args.json)?;
    if !report.failures.is_empty() {
        anyhow::bail!("{} failures; run `quarry gc` again to finish (it is idempotent)", report.failures.len());
    }
    Ok(())
}

/// Open the store; a local store must exist already (opening one would create it, and a
/// mistyped path would then quietly hold no runs).
async fn open_store(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    let local = !url.contains("://") || url.starts_with("file://");
    if local {
        let path = std::path::Path::new(url.strip_prefix("file://").unwrap_or(url));
        if !path.is_dir() {
            return Err(UsageError::new(format!("store {url}: {} is not a directory", path.display())).into());
        }
    }
    quarry_store::open(url).await.with_context(|| format!("opening store {url}"))
}

/// Every run directly under `prefix`, with its objects, size and newest time.
async fn list_runs(store: &dyn Store, prefix: &str, now: Timestamp, concurrency: usize) -> anyhow::Result<Vec<Run>> {
    let top = store.list_all(prefix, true).await.with_context(|| format!("listing {prefix:?}"))?;
    let candidates: Vec<(String, String, String)> = top
        .common_prefixes
        .into_iter()
        .filter_map(|p| {
            let segment = p.strip_prefix(prefix)?.trim_end_matches('/').to_owned();
            if !is_run_segment(&segment) {
                return None;
            }
            let (id, platform) = segment.split_once('-')?;
            Some((p.clone(), id.to_owned(), platform.to_owned()))
        })
        .collect();
    let listed: Vec<anyhow::Result<Option<Run>>> = futures_util::stream::iter(candidates)
        .map(|(run, id, platform)| async move {
            let page = store.list_all(&run, false).await.with_context(|| format!("listing {run}"))?;
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
fn select(runs: &mut [Run], older_than: Option<SignedDuration>, keep_last: Option<usize>) {
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
    dirs.any(|d| matches!(d, "simple" | "dists" | "repodata"))
}

fn is_state(object: &ObjectMeta) -> bool {
    let name = object.key.filename();
    (name.starts_with(".quarry-") && name.ends_with(".json")) || name == LISTING_CACHE
}

/// Delete every object under the run's prefix, its index state objects last; list again and
/// repeat (bounded) for anything written meanwhile.
async fn delete_run(store: &dyn Store, run: &Run, concurrency: usize) -> anyhow::Result<()> {
    for pass in 1..=DELETE_PASSES {
        let objects = store.list_all(&run.run, false).await.with_context(|| format!("listing {}", run.run))?.objects;
        if objects.is_empty() {
            tracing::info!(run = %run.run, objects = run.objects, bytes = run.bytes, "deleted");
            return Ok(());
        }
        if pass > 1 {
            tracing::warn!(run = %run.run, pass, left = objects.len(), "objects appeared while the run was deleted");
        }
        let (states, files): (Vec<ObjectMeta>, Vec<ObjectMeta>) = objects.into_iter().partition(is_state);
        delete_all(store, files, concurrency).await?;
        delete_all(store, states, concurrency).await?;
    }
    let left = store.list_all(&run.run, false).await.with_context(|| format!("listing {}", run.run))?.objects;
    if left.is_empty() {
        return Ok(());
    }
    anyhow::bail!("{} objects still under {} after {DELETE_PASSES} passes", left.len(), run.run)
}

async fn delete_all(store: &dyn Store, objects: Vec<ObjectMeta>, concurrency: usize) -> anyhow::Result<()> {
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
        [first, ..] => anyhow::bail!("{} deletes failed, first: {first}", failures.len()),
    }
}

/// Reindex one remaining root (or, dry, say what a reindex would collect).
async fn collect_root(indexer: &Indexer, root: &RepoRoot, dry_run: bool, now: Timestamp) -> anyhow::Result<RootReport> {
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
        quarry_index::read_state(store.as_ref(), root).await.with_context(|| format!("reading {}", root.state_key()))?
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
    let report = indexer.reindex(root).await.with_context(|| format!("reindexing {root}"))?;
    let deleted: BTreeSet<&str> = report.deleted.iter().map(String::as_str).collect();
    out.retired_collected = expired.iter().filter(|(k, _)| deleted.contains(k.as_str())).count();
    out.deleted = report.deleted.len();
    out.written = report.written.len();
    out.committed = report.committed;
    tracing::info!(%root, retired = out.retired_collected, "{report}");
    Ok(out)
}

/// `30d`, `40d 3h`, `5h 12m`, `3m 20s`.
fn duration(seconds: i64) -> String {
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

fn print(report: &Report, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
        return Ok(());
    }
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
        writeln!(out, "kept {}: {} objects, newest upload {} ago", run.run, run.objects, duration(run.age_seconds))?;
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
    fn ages_parse_as_spans() {
        assert_eq!(parse_age("30d"), Ok(SignedDuration::from_hours(720)));
        assert_eq!(parse_age("12h"), Ok(SignedDuration::from_hours(12)));
        assert_eq!(parse_age("90m"), Ok(SignedDuration::from_mins(90)));
        assert_eq!(parse_age("3600s"), Ok(SignedDuration::from_secs(3600)));
        assert_eq!(parse_age("1d 12h"), Ok(SignedDuration::from_hours(36)));
        assert_eq!(parse_age("P2W"), Ok(SignedDuration::from_hours(336)));
        assert!(parse_age("nonsense").unwrap_err().contains("not an age"));
        assert!(parse_age("1y").unwrap_err().contains("months and years"));
        assert!(parse_age("-3d").is_err());
    }

    #[test]
    fn run_segments_follow_the_listing_rule() {
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
