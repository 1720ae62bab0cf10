mod artifacts;
mod ci;
mod gc;
mod index;
mod mirror;
mod package;
mod package_python;
mod pipeline;
mod promote;
mod prune;
mod runs;
mod self_wheel;
mod serve;
mod stage;
mod upload;
mod upload_store;
mod version;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Quarry: an artifact store and pip, apt and dnf index server for CI-built software.
#[derive(Debug, Parser)]
#[command(name = "quarry", version, about, propagate_version = true, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    /// More log output on stderr (repeat for more). `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub(crate) verbose: u8,
    /// Log lines as `text` or `json` (one object per line, for log shippers).
    #[arg(long, global = true, env = "QUARRY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve a store over HTTP: files, pip/apt/dnf indexes, run browser, authenticated uploads.
    Serve(serve::ServeArgs),
    /// Reindex every pip, apt and dnf root and run listing in a store once; print what changed.
    Index(index::IndexArgs),
    /// Upload packages or artifacts to a Quarry server, an S3 bucket or a local store.
    Upload(upload::UploadArgs),
    /// Build native packages (deb, rpm) and the rocm-sdk Python distributions from TheRock stage artifacts.
    Package(package::PackageArgs),
    /// TheRock build stages: list, info, and the CMake arguments to configure one.
    Stage(stage::StageArgs),
    /// Stage artifacts: push a stage's outputs, fetch what a stage needs (local staging or S3).
    Artifacts(artifacts::ArtifactsArgs),
    /// The whole topology locally: every stage in dependency order through a staging directory.
    Pipeline(pipeline::PipelineArgs),
    /// Runs: write a run's manifest (commit, branch, workflow), find the runs that built a commit.
    #[command(visible_alias = "run")]
    Runs(runs::RunsArgs),
    /// CI configuration: the multi-arch matrix of a workflow run.
    Ci(Box<ci::CiArgs>),
    /// Delete whole CI runs by age or count; keep every remaining index consistent.
    Gc(gc::GcArgs),
    /// Fill a pip root (e.g. `python-deps/`) with chosen projects from an upstream simple index.
    Mirror(mirror::MirrorArgs),
    /// Report projects that two composed roots both supply (exit code 1 when any).
    CheckOrigins(mirror::CheckOriginsArgs),
    /// Prune old versions inside one pip, apt or dnf root; reindex it.
    Prune(prune::PruneArgs),
    /// Copy a run's wheels, debs and rpms into a channel's roots and reindex them.
    Promote(promote::PromoteArgs),
    /// TheRock's package versions (pip, deb, rpm) for a release type.
    Version(version::VersionArgs),
    /// Pack this binary as a wheel (`scripts/build-wheel` runs it).
    #[command(hide = true)]
    SelfWheel(self_wheel::SelfWheelArgs),
}

const EXIT_CODES: &str = "Exit codes: 0 success; 1 the work failed (a build step, missing artifacts, \
I/O, network); 2 bad input (unknown flag, stage or GPU family, an invalid topology or matrix file).";

/// Bad input from the user (exit code 2): the message says what and how to fix it.
#[derive(Debug)]
pub(crate) struct UsageError(String);

impl UsageError {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Appends `text` to the file a GitHub Actions variable names (`GITHUB_OUTPUT`,
/// `GITHUB_STEP_SUMMARY`); `false` when the variable is unset or empty.
pub(crate) fn append_to_github_file(var: &str, text: &str) -> anyhow::Result<bool> {
    use anyhow::Context as _;
    use std::io::Write as _;
    let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) else { return Ok(false) };
    let shown = std::path::Path::new(&path).display().to_string();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening ${var} {shown}"))?;
    file.write_all(text.as_bytes()).with_context(|| format!("writing ${var} {shown}"))?;
    Ok(true)
}

/// The exit code for an error: 2 when any cause is bad input, else 1.
pub(crate) fn exit_code(error: &anyhow::Error) -> u8 {
    let bad_input = error.chain().any(|cause| {
        cause.downcast_ref::<UsageError>().is_some()
            || cause.downcast_ref::<quarry_topology::TopologyError>().is_some()
            || cause.downcast_ref::<quarry_ci::CiError>().is_some()
            || cause.downcast_ref::<quarry_index_server::ConfigError>().is_some_and(|e| e.is_bad_input())
    });
    if bad_input { 2 } else { 1 }
}

/// A value as pretty JSON on stdout.
pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// A report on stdout: pretty JSON with `--json`, else its text.
pub(crate) fn print(json: bool, value: &impl serde::Serialize, text: impl std::fmt::Display) -> anyhow::Result<()> {
    use std::io::Write as _;
    if json {
        return print_json(value);
    }
    write!(std::io::stdout().lock(), "{text}")?;
    Ok(())
}

/// `SOURCE_DATE_EPOCH` in seconds, `None` when unset; a value that is not a number is an error.
pub(crate) fn source_date_epoch() -> anyhow::Result<Option<u64>> {
    use anyhow::Context as _;
    std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .map(|v| v.trim().parse().with_context(|| format!("SOURCE_DATE_EPOCH={v:?} is not a number")))
        .transpose()
}

/// How log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

pub(crate) fn init_logging(verbose: u8, format: LogFormat) {
    let default = match verbose {
        0 => "warn,quarry=info,quarry_index=info,quarry_index_server=info",
        1 => "info,quarry=debug,quarry_index=debug,quarry_index_server=debug",
        _ => "debug",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colour only on a terminal: a log file or a CI log gets plain lines.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    if format == LogFormat::Json {
        builder.json().with_target(true).init();
    } else {
        builder.with_target(false).init();
    }
}

pub(crate) async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(args) => serve::run(args).await,
        Command::Index(args) => index::run(args).await,
        Command::Promote(args) => promote::run(args).await,
        Command::Upload(args) => upload::run(args).await,
        Command::Package(args) => package::run(args).await,
        Command::Stage(args) => stage::run(args).await,
        Command::Pipeline(args) => pipeline::run(args).await,
        Command::Runs(args) => runs::run(args).await,
        Command::Artifacts(args) => artifacts::run(args).await,
        Command::Ci(args) => ci::run(*args).await,
        Command::Gc(args) => gc::run(args).await,
        Command::Mirror(args) => mirror::run(args).await,
        Command::CheckOrigins(args) => mirror::check_origins(args).await,
        Command::Prune(args) => prune::run(args).await,
        Command::Version(args) => version::run(args).await,
        Command::SelfWheel(args) => self_wheel::run(&args),
    }
}

/// Upload tokens as a client sends them: the token file's plus `QUARRY_TOKEN`.
pub(crate) use quarry_index_server::read_tokens;

/// Reads the `[layout]` of `quarry.toml` (`path`, else `./quarry.toml` if present; else the
/// default run layout) and makes it the process's layout.
pub(crate) fn load_layout(path: Option<&std::path::Path>) -> anyhow::Result<()> {
    if let Some(loaded) = quarry_store::layout::config::load(path)? {
        let layout = quarry_store::layout::config::configured();
        tracing::debug!(file = %loaded.display(), roots = layout.roots.len(), runs = layout.runs, "layout");
    }
    Ok(())
}
