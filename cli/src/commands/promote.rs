//! `quarry promote --from RUN-PLATFORM --to CHANNEL`: arguments and printing over
//! [`quarry_index::promote`] (which copies a run's wheels, sdists, debs and rpms into a
//! channel's roots, then reindexes them), with one install line per channel root.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

use clap::Args;
use quarry_index::promote::{Copied, PromoteError, PromoteReport, Promotion};
use quarry_index::{Indexer, RepoKind, RepoRoot};
use quarry_store::Store;

use super::args::{JsonArg, KindArg, LayoutConfigArg, StoreArg};

#[derive(Debug, Args)]
pub(crate) struct PromoteArgs {
    /// The run to promote from: its prefix segment (`12345-linux`), optionally under a prefix.
    #[arg(long, required_unless_present = "init")]
    from: Option<String>,
    /// Publish the channel's roots empty (valid pip, apt and dnf indexes naming nothing) if they
    /// have no index yet, instead of promoting: a channel's URLs resolve before its first
    /// promotion. Takes `--families` and `--kinds`.
    #[arg(long, conflicts_with = "from")]
    init: bool,
    /// The channel to promote into (`nightly`, `v2`, …): a key prefix.
    #[arg(long)]
    to: String,
    /// Only these families' wheels (comma-separated); generic wheels go to every one. Default:
    /// every family the run has wheels for.
    #[arg(long, value_delimiter = ',')]
    families: Vec<String>,
    /// Which packages (comma-separated; `deb` and `rpm` name apt and dnf too).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = KindArg::ALL)]
    kinds: Vec<KindArg>,
    #[command(flatten)]
    store: StoreArg,
    /// Print what would be copied; change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    json: JsonArg,
    #[command(flatten)]
    config: LayoutConfigArg,
}

#[derive(Debug, serde::Serialize)]
struct Report {
    from: String,
    to: String,
    dry_run: bool,
    files: Vec<Copied>,
    roots: Vec<String>,
    install: Vec<String>,
}

pub(crate) async fn run(args: PromoteArgs) -> anyhow::Result<()> {
    args.config.load()?;
    let kinds: BTreeSet<RepoKind> = args.kinds.iter().copied().map(RepoKind::from).collect();
    // Promoting reads a store that must be there; `--init` may create the channel's store.
    let store: Arc<dyn Store> = match &args.from {
        Some(_) => args.store.store.open_existing().await?,
        None => args.store.store.open().await?,
    };
    let config = quarry_index::IndexConfig::from_env()?;
    let signed = config.signer.is_some();
    let indexer = Indexer::new(store).with_config(config);
    let targets = quarry_topology::families::AmdgpuTargets::builtin();
    let families_map = targets.family_map();
    let promotion = Promotion {
        from: args.from.as_deref().unwrap_or_default(),
        to: &args.to,
        families: &args.families,
        kinds: &kinds,
        dry_run: args.dry_run,
        families_map: &families_map,
        layout: quarry_layout::config::configured(),
    };
    let done = match &args.from {
        Some(_) => quarry_index::promote::promote(&indexer, &promotion).await,
        None => quarry_index::promote::init_channel(&indexer, &promotion).await,
    };
    let report = done.map_err(|e| match e {
        PromoteError::BadInput(message) => anyhow::Error::new(super::UsageError::new(message)),
        other => anyhow::Error::new(other),
    })?;
    if !report.dry_run {
        use quarry_index::audit_log::{AuditAction, AuditEntry, AuditOutcome};
        let identity = super::audit::local_identity();
        let copied = report.files.iter().filter(|c| c.status == "copy").map(|c| {
            AuditEntry::now(AuditAction::Promote, &identity, &c.to, AuditOutcome::Ok)
                .sha256(Some(c.sha256.clone()))
                .detail(Some(format!("from {}", c.from)))
        });
        super::audit::record(indexer.store().as_ref(), copied).await;
    }
    let report = printed(args.store.store.as_str(), report, signed);
    super::print(args.json.json, &report, text(&report))
}

fn printed(store: &str, report: PromoteReport, signed: bool) -> Report {
    let install = report.roots.iter().map(|r| install_line(store, r, signed)).collect();
    let roots = report.roots.iter().map(ToString::to_string).collect();
    Report { from: report.from, to: report.to, dry_run: report.dry_run, files: report.files, roots, install }
}

/// What a client points at ([`quarry_index::install::summary_line`]), at the root's public
/// URL: a bucket's public URL on S3, else the store's own path.
fn install_line(store: &str, root: &RepoRoot, signed: bool) -> String {
    let destination = quarry_upload::destination::StoreDestination::parse(store);
    let key = destination.key(root.as_str());
    let url = match destination.store_url.strip_prefix("s3://") {
        Some(bucket) => quarry_layout::public_url_from_env(bucket, &key),
        None => format!("{}/{key}", destination.store_url.trim_end_matches('/')),
    };
    // apt and dnf roots are signed when the metadata is; a pip root's pages are not.
    quarry_index::install::summary_line(&url, root.kind(), signed && root.kind() != RepoKind::Pip)
}

fn text(report: &Report) -> String {
    let mut out = String::new();
    for c in &report.files {
        let _ = writeln!(out, "{} {} -> {} sha256={}", c.status, c.from, c.to, c.sha256);
    }
    for line in &report.install {
        let _ = writeln!(out, "{line}");
    }
    out
}
