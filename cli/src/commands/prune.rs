//! `quarry prune`: retention inside one flat root (a channel's pip, apt or dnf repository):
//! per project, keep the newest versions and/or the recent ones, delete the rest, reindex. The
//! work is `quarry_index::prune`.

use anyhow::Context;
use clap::Args;
use jiff::Timestamp;
use quarry_index::prune::{PrunePolicy, prune_root};
use quarry_index::{IndexConfig, Indexer, RepoKind, RepoRoot};

use super::UsageError;

#[derive(Debug, Args)]
#[command(after_help = "With both --keep-days and --keep-versions, a version is pruned only if both select it. \
A version's age is its newest file's upload-time in the root's state. The root is reindexed with the \
indexer's environment (QUARRY_SIGNING_KEY[_FILE], QUARRY_GRACE_SECONDS, …); apt by-hash and dnf repodata \
generations stay for the grace period.")]
pub(crate) struct PruneArgs {
    /// The store: a directory, file:// or s3://bucket/prefix URL.
    #[arg(long)]
    store: String,
    /// The root to prune (e.g. `v2/gfx94X-dcgpu/`, `v3/packages/deb/`).
    #[arg(long, value_name = "PREFIX")]
    root: String,
    /// What the root serves.
    #[arg(long, value_enum)]
    kind: Kind,
    /// Keep versions whose newest file entered the root less than N days ago.
    #[arg(long, value_name = "N")]
    keep_days: Option<u32>,
    /// Keep the newest N versions of each project (PEP 440, dpkg or rpm order).
    #[arg(long, value_name = "N")]
    keep_versions: Option<usize>,
    /// The time to age versions against (RFC 3339); default now.
    #[arg(long, value_name = "TIME")]
    now: Option<Timestamp>,
    /// Print what would be pruned; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Kind {
    Pip,
    Apt,
    Dnf,
}

pub(crate) async fn run(args: PruneArgs) -> anyhow::Result<()> {
    if args.keep_days.is_none() && args.keep_versions.is_none() {
        return Err(UsageError::new("nothing to keep by: give --keep-days N, --keep-versions N, or both").into());
    }
    let kind = match args.kind {
        Kind::Pip => RepoKind::Pip,
        Kind::Apt => RepoKind::Apt,
        Kind::Dnf => RepoKind::Dnf,
    };
    let root =
        RepoRoot::with_kind(&args.root, kind).map_err(|e| UsageError::new(format!("--root {:?}: {e}", args.root)))?;
    let config = IndexConfig::from_env()
        .map_err(|e| UsageError::new(format!("the index configuration from the environment: {e}")))?;
    let store = quarry_store::open(&args.store).await.with_context(|| format!("opening store {}", args.store))?;
    let indexer = Indexer::new(store).with_config(config);
    let policy = PrunePolicy { keep_days: args.keep_days, keep_versions: args.keep_versions };
    let report = prune_root(&indexer, &root, policy, args.now.unwrap_or_else(Timestamp::now), args.dry_run).await?;
    super::print(args.json, &report, &report)
}
