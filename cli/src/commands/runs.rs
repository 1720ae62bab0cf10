//! `quarry runs init | find` (also spelled `quarry run …`): a run's manifest (commit, branch,
//! workflow, platform, time, from the CI environment; `quarry_layout::runs`) and finding the
//! runs that built a commit, so `quarry artifacts fetch --run-id $(quarry runs find --latest
//! --commit SHA --store …)` works in a developer's shell.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use quarry_layout::runs::{RunManifest, check_commit, ensure_run_manifest, find_runs};
use quarry_stage::{LocationFlags, Run, RunLocation};
use quarry_store::Store;

use super::UsageError;
use super::args::Backend;
use super::args::{JsonArg, OptionalStoreArg};

#[derive(Debug, clap::Args)]
pub(crate) struct RunsArgs {
    #[command(subcommand)]
    command: RunsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum RunsCommand {
    /// Write the run's manifest from the CI environment (`GITHUB_SHA`, `GITHUB_REF_NAME`,
    /// `GITHUB_WORKFLOW`, …) unless it has one; print it.
    Init {
        #[command(flatten)]
        backend: Backend,
    },
    /// The runs that built a commit, newest first: one run id per line (exit 1 when none).
    Find(FindArgs),
}

#[derive(Debug, clap::Args)]
struct FindArgs {
    /// The commit: its full sha or an abbreviation (at least 7 hex digits). Without --store,
    /// the runs in TheRock's bucket for `RELEASE_TYPE` and `GITHUB_REPOSITORY`.
    #[arg(long)]
    commit: String,
    // Without it: TheRock's bucket for `RELEASE_TYPE` and `GITHUB_REPOSITORY`.
    #[command(flatten)]
    store: OptionalStoreArg,
    /// `owner/repo` whose runs to search (default: `GITHUB_REPOSITORY`, else `ROCm/TheRock`).
    #[arg(long)]
    run_github_repo: Option<String>,
    /// Only runs of this platform (`linux`, `windows`).
    #[arg(long)]
    platform: Option<String>,
    /// Only the newest run.
    #[arg(long)]
    latest: bool,
    #[command(flatten)]
    json: JsonArg,
}

pub(crate) async fn run(args: RunsArgs) -> anyhow::Result<()> {
    match args.command {
        RunsCommand::Init { backend } => {
            let run = Run::open(&backend.location(), Default::default()).await?;
            let manifest = ensure_run_manifest(run.store.as_ref(), &run.prefix, env_with_checkout(None)).await?;
            super::print_json(&manifest)
        }
        RunsCommand::Find(args) => find(args).await,
    }
}

async fn find(args: FindArgs) -> anyhow::Result<()> {
    check_commit(&args.commit).map_err(|e| UsageError::new(e.to_string()))?;
    if let Some(store) = &args.store.store {
        store.check_exists()?;
    }
    // The run prefix of a placeholder run, less the run: where this repository's runs lie.
    let flags = LocationFlags {
        run_id: Some("0".into()),
        platform: Some("linux".into()),
        store: args.store.url(),
        github_repo: args.run_github_repo.clone(),
        ..LocationFlags::default()
    };
    let location = RunLocation::with_defaults(flags, |name| std::env::var(name).ok());
    let (url, prefix) = location.resolve()?;
    let base = prefix.strip_suffix("0-linux/").unwrap_or_default();
    let store = quarry_store::open(&url).await.with_context(|| format!("opening {url}"))?;
    let mut found = find_runs(store.as_ref(), base, &args.commit).await?;
    if let Some(platform) = &args.platform {
        found.retain(|(_, m)| &m.platform == platform);
    }
    if args.latest {
        found.truncate(1);
    }
    if found.is_empty() {
        anyhow::bail!(
            "no run in {url}/{base} built commit {} (runs record their commit in {}; runs made before Quarry wrote one are not found)",
            args.commit.trim(),
            quarry_layout::runs::MANIFEST_FILE
        );
    }
    if args.json.json {
        let runs: Vec<serde_json::Value> = found
            .iter()
            .map(|(name, m)| serde_json::json!({"run": name, "prefix": format!("{name}/"), "manifest": m}))
            .collect();
        return super::print_json(&runs);
    }
    let mut out = std::io::stdout().lock();
    let mut seen = std::collections::BTreeSet::new();
    for (_, manifest) in &found {
        if seen.insert(&manifest.run_id) {
            writeln!(out, "{}", manifest.run_id)?;
        }
    }
    Ok(())
}

/// The CI variables, the commit read from the checkout at `source_dir` when `GITHUB_SHA` is
/// unset (a developer's local run).
fn env_with_checkout(source_dir: Option<&Path>) -> impl Fn(&str) -> Option<String> {
    let head = source_dir
        .filter(|_| std::env::var("GITHUB_SHA").is_err())
        .and_then(|dir| quarry_stage::checkout::git(dir, &["rev-parse", "--verify", "HEAD"]).ok());
    move |name| std::env::var(name).ok().or_else(|| (name == "GITHUB_SHA").then(|| head.clone()).flatten())
}

/// Gives the run a manifest unless it has one (the first push, stage build or pipeline of a
/// run does); a failure is logged, not fatal: the manifest helps find the run, the build's
/// work does not depend on it.
pub(crate) async fn ensure_manifest(run: &Run, source_dir: Option<&Path>) {
    ensure_manifest_at(run.store.as_ref(), &run.prefix, source_dir).await;
}

/// [`ensure_manifest`] for the run whose prefix is `run_prefix` in `store` (`quarry upload`).
pub(crate) async fn ensure_manifest_at(store: &dyn Store, run_prefix: &str, source_dir: Option<&Path>) {
    let env = env_with_checkout(source_dir);
    match ensure_run_manifest(store, run_prefix, env).await {
        Ok(RunManifest { commit, .. }) => tracing::debug!(run = %run_prefix, ?commit, "run manifest"),
        Err(e) => tracing::warn!("writing the run manifest of {run_prefix}: {}", quarry_store::error_chain(&e)),
    }
}
