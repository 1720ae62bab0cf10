//! `quarry prune`: retention inside one flat root (a channel's pip, apt or dnf repository):
//! per project, keep the newest versions and/or the recent ones, delete the rest, reindex. With
//! `--channel PREFIX`, every root the store holds under the prefix that the layout
//! (`quarry.toml`) gives a `keep_days`/`keep_versions`, each with its own. The work is
//! `quarry_index::prune`.

use anyhow::Context;
use clap::Args;
use jiff::Timestamp;
use quarry_index::prune::PruneReport;
use quarry_index::prune::{PrunePolicy, prune_root};
use quarry_index::{IndexConfig, Indexer, RepoRoot};

use super::UsageError;
use super::args::{JsonArg, KindArg, StoreArg};

#[derive(Debug, Args)]
#[command(after_help = "With both --keep-days and --keep-versions, a version is pruned only if both select it. \
A version's age is its newest file's upload-time in the root's state. The root is reindexed with the \
indexer's environment (QUARRY_SIGNING_KEY[_FILE], QUARRY_GRACE_SECONDS, …); apt by-hash and dnf repodata \
generations stay for the grace period.")]
pub(crate) struct PruneArgs {
    #[command(flatten)]
    store: StoreArg,
    /// The root to prune (e.g. `v2/gfx94X-dcgpu/`, `v3/packages/deb/`).
    #[arg(long, value_name = "PREFIX", required_unless_present = "channel", requires = "kind")]
    root: Option<String>,
    /// What the root serves.
    #[arg(long, value_enum)]
    kind: Option<KindArg>,
    /// Prune every root under this prefix (e.g. `v2/`) that the layout gives a retention, with
    /// the layout's `keep_days`/`keep_versions` (the flags below override them).
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["root", "kind"])]
    channel: Option<String>,
    /// The layout's file (`quarry.toml`, see docs/configuration.md): `--channel`'s roots, and
    /// the per-family views a pruned generic root's reindex refreshes.
    #[arg(long, env = "QUARRY_CONFIG")]
    config: Option<std::path::PathBuf>,
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
    #[command(flatten)]
    json: JsonArg,
    #[command(flatten)]
    kvs: super::channel::KvsArg,
}

pub(crate) async fn run(args: PruneArgs) -> anyhow::Result<()> {
    let config = IndexConfig::from_env()
        .map_err(|e| UsageError::new(format!("the index configuration from the environment: {e}")))?;
    // Also for --root: a generic root's reindex refreshes the per-family views the layout names.
    let layout = super::load_layout(args.config.as_deref())?;
    if let Some(channel) = &args.channel {
        let store = args.store.store.open_existing().await?;
        let indexer = Indexer::new(store, layout).with_config(config);
        let reports = prune_channel(&indexer, channel, &args).await?;
        for report in &reports {
            record(&indexer, report).await;
        }
        write_versions(&args, &reports).await?;
        let text: String = reports.iter().map(ToString::to_string).collect();
        return super::print(args.json.json, &reports, text);
    }
    let policy = PrunePolicy { keep_days: args.keep_days, keep_versions: args.keep_versions };
    if !policy.is_set() {
        return Err(UsageError::new("nothing to keep by: give --keep-days N, --keep-versions N, or both").into());
    }
    let (Some(prefix), Some(kind)) = (&args.root, args.kind) else {
        return Err(UsageError::new("give --root PREFIX --kind KIND, or --channel PREFIX").into());
    };
    let root =
        RepoRoot::with_kind(prefix, kind.into()).map_err(|e| UsageError::new(format!("--root {prefix:?}: {e}")))?;
    let store = args.store.store.open_existing().await?;
    let indexer = Indexer::new(store, layout).with_config(config);
    let report = prune_root(&indexer, &root, policy, args.now.unwrap_or_else(Timestamp::now), args.dry_run).await?;
    record(&indexer, &report).await;
    write_versions(&args, std::slice::from_ref(&report)).await?;
    super::print(args.json.json, &report, &report)
}

/// With `--kvs-arn`, each channel's last version the reports made, written to the CDN's
/// KeyValueStore.
async fn write_versions(args: &PruneArgs, reports: &[PruneReport]) -> anyhow::Result<()> {
    let Some(arn) = &args.kvs.kvs_arn else { return Ok(()) };
    let mut last = std::collections::BTreeMap::new();
    for (channel, n) in reports.iter().flat_map(|r| &r.versions) {
        last.insert(channel.as_str(), *n);
    }
    for (channel, n) in last {
        super::channel::write_kvs(arn, &super::channel::kvs_key_in(args.store.store.as_str(), channel), n).await?;
    }
    Ok(())
}

/// Each pruned file in the store's audit log.
async fn record(indexer: &Indexer, report: &PruneReport) {
    use quarry_index::audit_log::{AuditAction, AuditEntry, AuditOutcome};
    if report.dry_run {
        return;
    }
    let identity = super::audit::local_identity();
    let files = report.pruned.iter().flat_map(|v| v.files.iter().map(move |f| (v, f)));
    let entries = files.map(|(v, f)| {
        let detail = format!("{} {} pruned", v.project, v.version);
        AuditEntry::now(AuditAction::Prune, &identity, &format!("{}{f}", report.root), AuditOutcome::Ok)
            .detail(Some(detail))
    });
    super::audit::record(indexer.store().as_ref(), entries).await;
}

/// Every root the store holds under `channel` that the configured layout gives a retention
/// (or that the flags give one), pruned with its own policy; roots without one are left alone.
async fn prune_channel(indexer: &Indexer, channel: &str, args: &PruneArgs) -> anyhow::Result<Vec<PruneReport>> {
    let layout = indexer.layout();
    let prefix = super::mirror::dir_prefix(channel);
    let (roots, _) = quarry_index::discover(indexer.store().as_ref(), &prefix, layout)
        .await
        .with_context(|| format!("listing {prefix}"))?;
    let now = args.now.unwrap_or_else(Timestamp::now);
    let mut reports = Vec::new();
    for root in roots {
        let rule = layout.rule_for(root.as_str().trim_end_matches('/'));
        let policy = PrunePolicy {
            keep_days: args.keep_days.or(rule.and_then(|r| r.keep_days)),
            keep_versions: args.keep_versions.or(rule.and_then(|r| r.keep_versions).map(|n| n as usize)),
        };
        if !policy.is_set() {
            tracing::debug!(root = root.as_str(), "no retention configured; left alone");
            continue;
        }
        reports.push(prune_root(indexer, &root, policy, now, args.dry_run).await?);
    }
    if reports.is_empty() {
        return Err(UsageError::new(format!(
            "no root under {prefix:?} has a retention: give keep_days/keep_versions in the layout's roots or the flags"
        ))
        .into());
    }
    Ok(reports)
}
