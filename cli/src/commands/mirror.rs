//! `quarry mirror`: fill a pip root (a base index such as `python-deps/`) with chosen projects
//! from an upstream simple index; `quarry check-origins`: refuse composed roots that supply one
//! project twice. The work is `quarry_upload::mirror` and `quarry_index::origin`.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use quarry_index::origin::find_conflicts;
use quarry_index::{IndexConfig, Indexer, RepoKind, RepoRoot};
use quarry_upload::mirror::{
    DEFAULT_DEADLINE, DEFAULT_MAX_FILE_SIZE, MirrorOptions, Wanted, origin, parse_requirements,
};

use super::UsageError;
use super::args::{JsonArg, KindArg, StoreArg};

#[derive(Debug, Args)]
pub(crate) struct MirrorArgs {
    #[command(flatten)]
    store: StoreArg,
    /// The pip root to fill (e.g. `python-deps/`).
    #[arg(long, value_name = "PREFIX")]
    to: String,
    /// The upstream's PEP 691/503 simple index (e.g. `https://pypi.org/simple/`).
    #[arg(long, value_name = "URL")]
    upstream: String,
    /// A project and version to mirror (repeatable).
    #[arg(long = "project", value_name = "NAME==VERSION")]
    projects: Vec<Wanted>,
    /// A requirements-style file: one NAME==VERSION a line, `#` comments.
    #[arg(long, short = 'r', value_name = "FILE")]
    requirements: Option<std::path::PathBuf>,
    /// Keep only wheels with this platform tag (or `any`); repeatable. Sdists are always kept.
    #[arg(long = "platform-tag", value_name = "TAG")]
    platform_tags: Vec<String>,
    /// Keep only wheels that install on this Python (`3.12`).
    #[arg(long, value_name = "X.Y", value_parser = parse_python)]
    python_version: Option<(u32, u32)>,
    /// A root composed with this one (`[pip:|apt:|dnf:]PREFIX`, repeatable): a project it
    /// supplies is refused (one origin per project). Default: the roots the store holds that
    /// the layout's `compose_with` patterns for `--to` name.
    #[arg(long = "compose-with", value_name = "PREFIX")]
    compose_with: Vec<String>,
    /// `quarry.toml` whose `[layout]` gives the default `--compose-with` [default:
    /// ./quarry.toml if present].
    #[arg(long, env = "QUARRY_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Seconds to wait to connect and between reads.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Seconds one request (a page, a `.metadata` or a file) may take in all, from connecting
    /// to the last byte of its body, however steadily bytes arrive.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_DEADLINE.as_secs())]
    deadline: u64,
    /// Largest file downloaded, in bytes [default: 8 GiB]. A file whose upstream declares a
    /// size (PEP 700) is also stopped at that size.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_FILE_SIZE, hide_default_value = true)]
    max_file_size: u64,
    /// An origin (`https://files.example[:port]`) a redirect may lead to besides the origin of
    /// the URL asked for (repeatable). Without it a redirect to another origin fails the file.
    #[arg(long = "allow-redirect-origin", value_name = "ORIGIN", value_parser = origin)]
    redirect_origins: Vec<String>,
    /// Mirror files the upstream gives no sha256 for: hashed as they download, checked by the
    /// indexer, and reported `verified: false` (unverified). Without it such a file is refused
    /// before it is downloaded.
    #[arg(long)]
    allow_unhashed: bool,
    #[command(flatten)]
    json: JsonArg,
}

#[derive(Debug, Args)]
pub(crate) struct CheckOriginsArgs {
    #[command(flatten)]
    store: StoreArg,
    /// The composed roots (`[pip:|apt:|dnf:]PREFIX`; without a kind, the layout's, else pip).
    #[arg(required = true, num_args = 2.., value_name = "PREFIX")]
    roots: Vec<String>,
    #[command(flatten)]
    json: JsonArg,
}

fn parse_python(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{text:?} is not a Python version such as 3.12");
    let (major, minor) = text.split_once('.').ok_or_else(bad)?;
    Ok((major.parse().map_err(|_| bad())?, minor.parse().map_err(|_| bad())?))
}

/// A key prefix naming a directory: no leading `/`, one trailing `/` (empty stays empty).
pub(crate) fn dir_prefix(text: &str) -> String {
    let trimmed = text.trim_matches('/');
    if trimmed.is_empty() { String::new() } else { format!("{trimmed}/") }
}

/// A root from `[pip:|apt:|dnf:]PREFIX` (`deb:`, `rpm:` too): the kind given, else the
/// layout's, else pip.
pub(crate) fn parse_root(text: &str, layout: &quarry_layout::config::Layout) -> anyhow::Result<RepoRoot> {
    let bad = |e: quarry_store::KeyError| UsageError::new(format!("root {text:?}: {e}"));
    let kind = text.split_once(':').and_then(|(label, rest)| Some((RepoKind::from(KindArg::parse(label)?), rest)));
    if let Some((kind, prefix)) = kind {
        return RepoRoot::with_kind(prefix, kind).map_err(|e| bad(e).into());
    }
    RepoRoot::new(text, layout).or_else(|_| RepoRoot::with_kind(text, RepoKind::Pip)).map_err(|e| bad(e).into())
}

pub(crate) async fn run(args: MirrorArgs) -> anyhow::Result<()> {
    let mut wanted = args.projects.clone();
    if let Some(path) = &args.requirements {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        wanted.extend(parse_requirements(&text).map_err(|e| UsageError::new(format!("{}: {e}", path.display())))?);
    }
    if wanted.is_empty() {
        return Err(UsageError::new("nothing to mirror: give --project NAME==VERSION or --requirements FILE").into());
    }
    let mut upstream = args.upstream.clone();
    if !upstream.ends_with('/') {
        upstream.push('/');
    }
    let upstream =
        reqwest::Url::parse(&upstream).map_err(|e| UsageError::new(format!("--upstream {:?}: {e}", args.upstream)))?;
    let root = RepoRoot::with_kind(&args.to, RepoKind::Pip)
        .map_err(|e| UsageError::new(format!("--to {:?}: {e}", args.to)))?;
    let layout = super::load_layout(args.config.as_deref())?;
    let mut compose_with =
        args.compose_with.iter().map(|r| parse_root(r, &layout)).collect::<anyhow::Result<Vec<_>>>()?;
    let config = IndexConfig::from_env()
        .map_err(|e| UsageError::new(format!("the index configuration from the environment: {e}")))?;
    let store = args.store.store.open().await?;
    if compose_with.is_empty() {
        compose_with = composed_by_layout(store.as_ref(), &layout, &root).await?;
    }
    let options = MirrorOptions {
        upstream,
        root,
        wanted,
        platform_tags: args.platform_tags,
        python_version: args.python_version,
        compose_with,
        timeout: Duration::from_secs(args.timeout),
        deadline: Duration::from_secs(args.deadline),
        max_file_size: args.max_file_size,
        redirect_origins: args.redirect_origins,
        allow_unhashed: args.allow_unhashed,
    };
    let indexer = Indexer::new(store, layout).with_config(config);
    let report = quarry_upload::mirror::mirror(&indexer, &options).await?;
    super::print(args.json.json, &report, &report)?;
    if !report.failures.is_empty() {
        anyhow::bail!("{} files or projects failed; the rest is mirrored and indexed", report.failures.len());
    }
    Ok(())
}

/// The roots the store holds that the layout's `compose_with` patterns for `root` configure
/// (e.g. every `v2/{family}/` beside `python-deps/`); none without such a rule.
async fn composed_by_layout(
    store: &dyn quarry_store::Store,
    layout: &quarry_layout::config::Layout,
    root: &RepoRoot,
) -> anyhow::Result<Vec<RepoRoot>> {
    let Some(rule) = layout.rule_for(root.as_str().trim_end_matches('/')) else { return Ok(Vec::new()) };
    let mut composed = Vec::new();
    for pattern in &rule.compose_with {
        // The literal segments before the first placeholder: where to look.
        let head: String = pattern
            .split('/')
            .filter(|s| !s.is_empty())
            .take_while(|s| !s.starts_with('{'))
            .map(|s| format!("{s}/"))
            .collect();
        let (roots, _) =
            quarry_index::discover(store, &head, layout).await.with_context(|| format!("listing {head}"))?;
        let configured_by = |r: &RepoRoot| {
            layout.rule_for(r.as_str().trim_end_matches('/')).is_some_and(|rule| rule.prefix == *pattern)
        };
        composed.extend(roots.into_iter().filter(|r| r != root && configured_by(r)));
    }
    tracing::debug!(roots = ?composed, "composed with, from the layout");
    Ok(composed)
}

pub(crate) async fn check_origins(args: CheckOriginsArgs) -> anyhow::Result<()> {
    // `quarry check-origins` reads no `[layout]` (it never did): run roots only.
    let layout = quarry_layout::config::Layout::default();
    let roots = args.roots.iter().map(|r| parse_root(r, &layout)).collect::<anyhow::Result<Vec<_>>>()?;
    let store = args.store.store.open_existing().await?;
    let conflicts = find_conflicts(store.as_ref(), &roots).await?;
    let text: String = conflicts.iter().map(|c| format!("{c}\n")).collect();
    super::print(args.json.json, &conflicts, text)?;
    if !conflicts.is_empty() {
        anyhow::bail!("{} projects have more than one origin", conflicts.len());
    }
    Ok(())
}
