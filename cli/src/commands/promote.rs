//! `quarry promote --from RUN-PLATFORM --to CHANNEL`: arguments and printing over
//! [`quarry_index::promote`] (which copies a run's wheels, sdists, debs and rpms into a
//! channel's roots, then reindexes them), with one install line per channel root.
//! `--release-type` promotes into TheRock's v5 layout instead (`--to v5/rocm/core/`, the
//! `therock-v5` preset, installed when no `quarry.toml` is read), into TheRock's product bucket
//! for the type unless `--store` names another, from the type's artifacts bucket unless
//! `--from-store` (or `--store`) names another. A promotion that makes a channel version
//! writes it to the CDN's KeyValueStore with `--kvs-arn` (`commands::channel::write_kvs`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;

use clap::Args;
use quarry_index::promote::{Copied, PromoteError, PromoteReport, Promotion, Release};
use quarry_index::{Indexer, RepoKind, RepoRoot};
use quarry_layout::config::{BuildVariant, ReleaseRoots, ReleaseType};
use quarry_store::Store;

use super::args::{JsonArg, KindArg, LayoutConfigArg, OptionalStoreArg, StoreUrl};

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
    /// Promote into TheRock's v5 release layout (`--to v5/rocm/PRODUCT/`) as
    /// publish_rocm_to_release_buckets.py does for this type: wheels and sdists into the
    /// structured `whl-next/` (kpack runs) or `whl/` (per-family runs), `.deb`s and `.rpm`s into
    /// `packages/{deb|rpm}/YYYYMMDD-RUN/` (the promotion's date, SOURCE_DATE_EPOCH if set; for
    /// prerelease `packages/{deb|rpm}/` itself), the run's `tarballs/*.tar.gz` into `tarball/`.
    /// The store defaults to TheRock's bucket for the type
    /// (`s3://therock-repo-amd-{dev|nightly|rc|bkc}-PRODUCT`).
    #[arg(long, value_enum, conflicts_with_all = ["init", "families"])]
    release_type: Option<ReleaseTypeArg>,
    /// With --release-type: `asan` promotes into the `-asan` directories
    /// (`packages-asan/`, `tarball-asan/`) and skips Python packages.
    #[arg(long, value_enum, requires = "release_type", default_value_t = BuildVariantArg::Release)]
    build_variant: BuildVariantArg,
    /// The store to promote into [required unless --release-type gives TheRock's bucket].
    #[command(flatten)]
    store: OptionalStoreArg,
    /// The store holding the run, when it is not --store's: copies between two buckets stay
    /// server-side [default: --store; with --release-type and no --store, TheRock's artifacts
    /// bucket for the type, `s3://therock-{dev|nightly|prerelease}-artifacts`].
    #[arg(long, value_name = "STORE", requires = "from")]
    from_store: Option<StoreUrl>,
    /// Print what would be copied; change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    json: JsonArg,
    #[command(flatten)]
    config: LayoutConfigArg,
    #[command(flatten)]
    kvs: super::channel::KvsArg,
}

/// `--release-type`: TheRock's release types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ReleaseTypeArg {
    Dev,
    DevBkc,
    Nightly,
    NightlyBkc,
    Prerelease,
}

impl From<ReleaseTypeArg> for ReleaseType {
    fn from(arg: ReleaseTypeArg) -> Self {
        match arg {
            ReleaseTypeArg::Dev => Self::Dev,
            ReleaseTypeArg::DevBkc => Self::DevBkc,
            ReleaseTypeArg::Nightly => Self::Nightly,
            ReleaseTypeArg::NightlyBkc => Self::NightlyBkc,
            ReleaseTypeArg::Prerelease => Self::Prerelease,
        }
    }
}

/// `--build-variant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BuildVariantArg {
    Release,
    Asan,
}

#[derive(Debug, serde::Serialize)]
struct Report {
    from: String,
    to: String,
    dry_run: bool,
    files: Vec<Copied>,
    roots: Vec<String>,
    install: Vec<String>,
    /// The dated native repo's name (`20260501-12345`), for a release of a dated type.
    #[serde(skip_serializing_if = "Option::is_none")]
    repo: Option<String>,
    /// The channel's version the promotion made current (`quarry channel history`).
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<quarry_index::versions::ChannelVersion>,
}

/// Where a release promotion copies: the store, the run's store, the release.
struct Places {
    to: StoreUrl,
    from: Option<StoreUrl>,
    release: Option<Release>,
}

/// The stores and release of `args`: `--store` or TheRock's product bucket for the type; the
/// run's store `--from-store`, else `--store`, else the type's artifacts bucket.
fn places(args: &PromoteArgs) -> anyhow::Result<Places> {
    let Some(release_type) = args.release_type.map(ReleaseType::from) else {
        let to = args.store.store.clone().ok_or_else(|| {
            super::UsageError::new("--store is required (or --release-type, whose bucket is TheRock's)")
        })?;
        return Ok(Places { to, from: args.from_store.clone(), release: None });
    };
    let variant = match args.build_variant {
        BuildVariantArg::Release => BuildVariant::Release,
        BuildVariantArg::Asan => BuildVariant::Asan,
    };
    let date = match super::source_date_epoch()? {
        Some(epoch) => jiff::Timestamp::from_second(i64::try_from(epoch).unwrap_or(i64::MAX))
            .map_err(|e| super::UsageError::new(format!("SOURCE_DATE_EPOCH={epoch}: {e}")))?,
        None => jiff::Timestamp::now(),
    };
    let release = Release { release_type, variant, date: date.to_zoned(jiff::tz::TimeZone::UTC).date() };
    // A bad --to names no bucket: refused before any store is opened.
    ReleaseRoots::new(&args.to, release_type, variant, release.date, "0")
        .map_err(|e| super::UsageError::new(format!("--to: {e}")))?;
    let product = args.to.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
    let bucket = |name: &str| format!("s3://{name}").parse::<StoreUrl>().map_err(super::UsageError::new);
    let (to, from) = match (&args.store.store, &args.from_store) {
        (Some(to), from) => (to.clone(), from.clone()),
        (None, from) => {
            let from = match from {
                Some(from) => from.clone(),
                None => bucket(release_type.artifact_bucket())?,
            };
            (bucket(&release_type.bucket(product))?, Some(from))
        }
    };
    Ok(Places { to, from, release: Some(release) })
}

pub(crate) async fn run(args: PromoteArgs) -> anyhow::Result<()> {
    let (mut layout, loaded) = quarry_layout::config::load(args.config.config.as_deref())?;
    if args.release_type.is_some() && loaded.is_none() {
        // The v5 roots are the preset's: without a `quarry.toml`, a release promotion lays
        // them out (and a server or Lambda reindexing them needs the same preset).
        layout = quarry_layout::config::Layout::preset("therock-v5").expect("the preset exists");
    }
    let layout = Arc::new(layout);
    let kinds: BTreeSet<RepoKind> = args.kinds.iter().copied().map(RepoKind::from).collect();
    let places = places(&args)?;
    // Promoting reads a store that must be there; `--init` may create the channel's store.
    let store: Arc<dyn Store> = match &args.from {
        Some(_) => places.to.open_existing().await?,
        None => places.to.open().await?,
    };
    let config = quarry_index::IndexConfig::from_env()?;
    let signed = config.signer.is_some();
    let source = match &places.from {
        Some(from) if *from != places.to => {
            Some(Indexer::new(from.open_existing().await?, layout.clone()).with_config(config.clone()))
        }
        _ => None,
    };
    let indexer = Indexer::new(store, layout.clone()).with_config(config);
    let targets = quarry_topology::families::AmdgpuTargets::builtin();
    let families_map = targets.family_map();
    let promotion = Promotion {
        from: args.from.as_deref().unwrap_or_default(),
        to: &args.to,
        families: &args.families,
        kinds: &kinds,
        dry_run: args.dry_run,
        families_map: &families_map,
        layout: &layout,
        release: places.release,
        source: source.as_ref(),
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
    let repo = places.release.filter(|r| r.release_type.dated()).and_then(|r| {
        let run = quarry_layout::find_run(&report.from)?.1.run_id;
        Some(ReleaseRoots::new(&report.to, r.release_type, r.variant, r.date, run).ok()?.repo().to_owned())
    });
    // The version made current, at the edge too.
    if let (Some(arn), Some(version)) = (&args.kvs.kvs_arn, &report.version) {
        let prefix = quarry_index::versions::channel_prefix(&report.to).map_err(anyhow::Error::new)?;
        super::channel::write_kvs(arn, &super::channel::kvs_key_in(places.to.as_str(), &prefix), version.n).await?;
    }
    let report = printed(places.to.as_str(), report, signed, repo);
    super::print(args.json.json, &report, text(&report))
}

fn printed(store: &str, report: PromoteReport, signed: bool, repo: Option<String>) -> Report {
    // pip, then apt, then dnf lines; the tarball directories last.
    let mut by_kind: Vec<&RepoRoot> = report.roots.iter().collect();
    by_kind.sort_by_key(|r| (r.kind(), r.as_str()));
    let mut install: Vec<String> = by_kind.into_iter().map(|r| install_line(store, r, signed)).collect();
    install.extend(report.tarballs.iter().map(|dir| format!("tarballs: {}", public_url(store, dir))));
    let roots = report.roots.iter().map(ToString::to_string).chain(report.tarballs.iter().cloned()).collect();
    Report {
        from: report.from,
        to: report.to,
        dry_run: report.dry_run,
        files: report.files,
        roots,
        install,
        repo,
        version: report.version,
    }
}

/// The public URL of `prefix` in `store`: a bucket's public URL on S3, else the store's own
/// path.
fn public_url(store: &str, prefix: &str) -> String {
    let destination = quarry_upload::destination::StoreDestination::parse(store);
    let key = destination.key(prefix);
    match destination.store_url.strip_prefix("s3://") {
        Some(bucket) => quarry_layout::public_url_from_env(bucket, &key),
        None => format!("{}/{key}", destination.store_url.trim_end_matches('/')),
    }
}

/// What a client points at ([`quarry_index::install::root_line`]), at the root's public URL.
fn install_line(store: &str, root: &RepoRoot, signed: bool) -> String {
    // apt and dnf roots are signed when the metadata is; a pip root's pages are not.
    quarry_index::install::root_line(&public_url(store, root.as_str()), root, signed && root.kind() != RepoKind::Pip)
}

fn text(report: &Report) -> String {
    let mut out = String::new();
    for c in &report.files {
        let _ = writeln!(out, "{} {} -> {} sha256={}", c.status, c.from, c.to, c.sha256);
    }
    for line in &report.install {
        let _ = writeln!(out, "{line}");
    }
    if let Some(v) = &report.version {
        let _ = writeln!(out, "version {} of {} is current", v.n, report.to.trim_end_matches('/'));
    }
    out
}
