//! `quarry index`: bring a store's indexes up to date, from the command line.
//!
//! Without `--key`, every scope under `--prefix` is reconciled whole: [`discover_scopes`] finds
//! the repo roots and run listings from one listing (a prefix that is itself a root is taken as
//! it is), and each is refreshed through [`Indexer::refresh_with`] (`--force` republishes every
//! page). `--key KEY` (repeatable) does what that key's store event would: only the scopes it
//! makes stale ([`Scope::affected_by`]). `--full` reconciles each scope and audits it, repairing
//! what the store contradicts (`quarry_index::reconcile`). `--check` changes nothing: it audits
//! each root as a client sees it. A scope that fails is logged and the others still go; the
//! command then exits 1, as it does when `--full` leaves a problem or `--check` finds one.
//! Reports go to stdout (`--json` or text); the store operations used go to the log.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use quarry_index::{Indexer, Refreshed, RepoRoot, Scope, discover_scopes};
use quarry_store::CountingStore;

use super::UsageError;
use super::args::{JsonArg, LayoutConfigArg, OptionalStoreArg, StoreUrl};

#[derive(Debug, Args)]
pub(crate) struct IndexArgs {
    #[command(flatten)]
    store: OptionalStoreArg,
    /// The store, as `--store` (the older spelling `quarry index DIR`).
    #[arg(value_name = "STORE", hide = true)]
    store_positional: Option<StoreUrl>,
    /// Only roots under this key prefix (e.g. `12345-linux/`).
    #[arg(long, default_value = "")]
    prefix: String,
    #[command(flatten)]
    json: JsonArg,
    /// Republish every page even where the state says nothing changed.
    #[arg(long)]
    force: bool,
    /// Only what a change at this key makes stale, as its store event would (one project of a
    /// pip root, a run's listings, …); repeatable. Without it every root under `--prefix` is
    /// reconciled whole (listed entirely, every project's state read).
    #[arg(long = "key", value_name = "KEY", conflicts_with = "check")]
    keys: Vec<String>,
    /// The full reconciliation: every root under `--prefix` reindexed whole, then audited as a
    /// client sees it (`--check`), each pip file's sha256 in the state checked against the one
    /// the store recorded (a HEAD per file); a root whose pages or sidecars are missing or not
    /// what its state records is republished, a project whose state the store contradicts is
    /// rebuilt from the store, and a run listing whose page is not the one its cache
    /// records is rewritten without the cache. Exits 1 if a root still disagrees afterwards.
    #[arg(long, conflicts_with_all = ["keys", "check"])]
    full: bool,
    /// Change nothing: audit each root as a client sees it (every link resolves, every
    /// advertised `.metadata` exists, every file in the listing is on the pages) and exit
    /// non-zero on any problem.
    #[arg(long, conflicts_with = "force")]
    check: bool,
    #[command(flatten)]
    config: LayoutConfigArg,
}

impl IndexArgs {
    /// `--store` (or `QUARRY_STORE`), or the positional spelling, which wins over the variable;
    /// both on the command line must agree.
    fn store(&self) -> anyhow::Result<&StoreUrl> {
        match (&self.store_positional, &self.store.store) {
            (Some(dir), Some(flag))
                if dir != flag && std::env::var("QUARRY_STORE").ok().as_deref() != Some(flag.as_str()) =>
            {
                Err(UsageError::new(format!("two stores: {dir} and --store {flag}; give one")).into())
            }
            (Some(dir), _) => Ok(dir),
            (None, Some(flag)) => Ok(flag),
            (None, None) => Err(UsageError::new("no store: give --store STORE (or set QUARRY_STORE)").into()),
        }
    }
}

pub(crate) async fn run(args: IndexArgs) -> anyhow::Result<()> {
    let inner = args.store()?.open_existing().await?;
    let layout = args.config.load()?;
    let store = Arc::new(CountingStore::new(inner));
    let started = std::time::Instant::now();
    // A prefix naming one pip root is that root: no need to list everything below it first.
    let scopes = if !args.keys.is_empty() {
        let keys = args.keys.iter().map(|k| quarry_store::Key::new(k.as_str()).with_context(|| format!("--key {k}")));
        Scope::affected_by_all(&keys.collect::<anyhow::Result<Vec<_>>>()?, &layout)
    } else {
        match RepoRoot::new(&args.prefix, &layout) {
            Ok(root) => BTreeSet::from([Scope::Root(root)]),
            Err(_) => discover_scopes(store.as_ref(), &args.prefix, &layout).await?,
        }
    };
    if args.check {
        return check(&args, store.as_ref(), &layout, scopes.iter().filter_map(Scope::root)).await;
    }
    let indexer = Indexer::new(store.clone(), layout.clone()).with_config(quarry_index::IndexConfig::from_env()?);
    if args.full {
        return full(&args, &indexer, &scopes).await;
    }
    // A root or listing that fails is reported and skipped: the others are still indexed, and
    // the command exits 1 at the end.
    let mut reports = Vec::new();
    let mut listings = Vec::new();
    let mut failed = Vec::new();
    for scope in &scopes {
        match indexer.refresh_with(scope, args.force).await {
            Ok(Refreshed::Root(report)) => reports.push(report),
            Ok(Refreshed::Listing(report)) => listings.push(report),
            Err(e) => {
                tracing::error!(%scope, error = %e, "indexing failed; going on with the others");
                failed.push(format!("{scope}: {e}"));
            }
        }
    }
    let mut text = String::new();
    for r in &listings {
        writeln!(text, "{r}")?;
    }
    for r in &reports {
        writeln!(text, "{r}")?;
        for (file, reason) in &r.rejected {
            writeln!(text, "  rejected {file}: {reason}")?;
        }
    }
    if reports.is_empty() && listings.is_empty() {
        writeln!(text, "no pip roots found under {:?}", args.prefix)?;
    }
    super::print(args.json.json, &reports, text)?;
    tracing::info!(
        roots = reports.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "store operations: {}",
        store.counts()
    );
    if !failed.is_empty() {
        anyhow::bail!("{} of {} failed to index:\n  {}", failed.len(), scopes.len(), failed.join("\n  "));
    }
    Ok(())
}

/// `--full`: [`Indexer::reconcile`] each scope, report what was repaired, fail on what is
/// left (or on a scope that failed, after doing the others).
async fn full(args: &IndexArgs, indexer: &Indexer, scopes: &BTreeSet<Scope>) -> anyhow::Result<()> {
    let (mut reports, mut text, mut failed) = (Vec::new(), String::new(), Vec::new());
    let full = quarry_index::reconcile::Full { force: args.force, verify_hashes: true };
    for scope in scopes {
        match indexer.reconcile(scope, full).await {
            Ok(done) => {
                writeln!(text, "{}", done.refreshed)?;
                for problem in &done.repaired {
                    writeln!(text, "  repaired: {problem}")?;
                }
                for problem in &done.remaining {
                    writeln!(text, "  still wrong: {problem}")?;
                }
                if !done.remaining.is_empty() {
                    failed.push(format!("{scope}: {} problems left after republishing", done.remaining.len()));
                }
                if let Refreshed::Root(report) = done.refreshed {
                    reports.push(report);
                }
            }
            Err(e) => {
                tracing::error!(%scope, error = %e, "reconciling failed; going on with the others");
                failed.push(format!("{scope}: {e}"));
            }
        }
    }
    if scopes.is_empty() {
        writeln!(text, "nothing to index under {:?}", args.prefix)?;
    }
    super::print(args.json.json, &reports, text)?;
    if !failed.is_empty() {
        anyhow::bail!("{} of {} failed to reconcile:\n  {}", failed.len(), scopes.len(), failed.join("\n  "));
    }
    Ok(())
}

async fn check(
    args: &IndexArgs,
    store: &dyn quarry_store::Store,
    layout: &quarry_layout::config::Layout,
    roots: impl Iterator<Item = &RepoRoot>,
) -> anyhow::Result<()> {
    let mut reports = Vec::new();
    for root in roots {
        reports.push(quarry_index::check(store, root, layout).await.with_context(|| format!("checking {root}"))?);
    }
    let text: String = reports.iter().map(|r| format!("{r}\n")).collect();
    super::print(args.json.json, &reports, text)?;
    let problems: usize = reports.iter().map(|r| r.problems.len()).sum();
    if problems > 0 {
        anyhow::bail!("{problems} problems in {} roots; `quarry index --force` republishes every page", reports.len());
    }
    Ok(())
}
