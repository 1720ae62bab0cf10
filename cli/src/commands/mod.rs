//! The `quarry` commands, one module each: clap arguments turned into a library's options,
//! environment lookups, progress, then printing. Logic found here belongs in a library.
//!
//! Output: [`print`] writes a report to stdout as pretty JSON with `--json`, else its `Display`
//! text; logs go to stderr ([`init_logging`]); `$GITHUB_OUTPUT` and step summaries go through
//! [`append_to_github_file`]. Exit codes ([`exit_code`]): 0 success; 1 the work failed; 2 bad
//! input, when any cause in the error's chain is a [`UsageError`], a `TopologyError`, a
//! `CiError` or a server `ConfigError` that is bad input (clap exits 2 on a bad command line by
//! itself).

mod args;
mod artifacts;
mod audit;
mod channel;
mod ci;
mod gc;
mod index;
mod lifecycle;
mod mirror;
mod package;
mod package_args;
mod package_python;
mod pipeline;
mod promote;
mod prune;
mod runs;
mod self_docs;
mod self_wheel;
mod serve;
mod stage;
mod upload;
mod version;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// Quarry: an artifact store and pip, apt and dnf index server for CI-built software.
#[derive(Debug, Parser)]
#[command(
    name = "quarry",
    version,
    about,
    propagate_version = true,
    after_help = EXIT_CODES,
    disable_help_flag = true,
    disable_version_flag = true
)]
pub(crate) struct Cli {
    /// More log output on stderr (-vv for all); `RUST_LOG` overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, help_heading = GLOBAL)]
    pub(crate) verbose: u8,
    /// Log lines as `text` or `json` (one object a line).
    #[arg(long, global = true, env = "QUARRY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, help_heading = GLOBAL)]
    pub(crate) log_format: LogFormat,
    /// Print help (`--help` for more than `-h`).
    #[arg(short, long, global = true, action = clap::ArgAction::Help, help_heading = GLOBAL)]
    help: Option<bool>,
    /// Print the version.
    #[arg(short = 'V', long, global = true, action = clap::ArgAction::Version, help_heading = GLOBAL)]
    version: Option<bool>,
    #[command(subcommand)]
    command: Command,
}

/// The heading of the options every command takes, shown after a command's own.
const GLOBAL: &str = "Global options";

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve a store over HTTP: indexes, run pages, uploads.
    ///
    /// Files and their pip (find-links, PEP 503/691 simple), apt and dnf indexes, the run
    /// browser, `/metrics`, `/healthz`, and authenticated uploads reindexed as they land.
    Serve(serve::ServeArgs),
    /// Reindex a store's pip, apt and dnf roots; audit or repair them.
    ///
    /// Every pip, apt and dnf root and run listing under `--prefix` is reindexed once, and what
    /// changed is printed; `--check` audits without writing, `--full` reconciles and repairs.
    Index(index::IndexArgs),
    /// Upload packages or artifacts to a server, a bucket or a directory.
    Upload(upload::UploadArgs),
    /// Yank a wheel or sdist (PEP 592): installed only when pinned with ==.
    ///
    /// Through a server (`POST /-/yank/KEY`, the upload token) or on a store (S3, a local
    /// directory); the project's pip pages are republished with the yank.
    Yank(lifecycle::YankArgs),
    /// Undo a yank.
    Unyank(lifecycle::FileArgs),
    /// Delete a package file and republish its pip, apt or dnf index.
    ///
    /// Refused while a channel holds the file. Through a server (`DELETE /KEY`, the upload
    /// token) or on a store (S3, a local directory).
    Delete(lifecycle::FileArgs),
    /// Show a store's audit log: every write, who made it, when.
    Audit(audit::AuditArgs),
    /// Build .debs, .rpms and the rocm-sdk wheels from stage artifacts.
    Package(package_args::PackageArgs),
    /// TheRock's build stages: list, info, configure, build one.
    Stage(stage::StageArgs),
    /// Stage artifacts: push a stage's outputs, fetch a stage's inputs.
    Artifacts(artifacts::ArtifactsArgs),
    /// Build every stage in dependency order, locally.
    Pipeline(pipeline::PipelineArgs),
    /// A run's manifest; the runs that built a commit.
    #[command(visible_alias = "run")]
    Runs(runs::RunsArgs),
    /// CI configuration: a workflow run's build matrix.
    Ci(Box<ci::CiArgs>),
    /// Delete whole CI runs by age or count.
    ///
    /// Every remaining pip, apt and dnf root is then reindexed, so every index stays
    /// consistent.
    Gc(gc::GcArgs),
    /// Fill a pip root with chosen projects from an upstream index.
    Mirror(mirror::MirrorArgs),
    /// Report projects that composed roots both supply.
    ///
    /// Exits 1 when any project has more than one origin.
    CheckOrigins(mirror::CheckOriginsArgs),
    /// Delete old versions inside one pip, apt or dnf root.
    ///
    /// By age and/or count per project; the root is reindexed afterwards.
    Prune(prune::PruneArgs),
    /// Copy a run's packages into a release channel.
    ///
    /// A run's wheels, sdists, debs and rpms are copied into the channel's roots, which are
    /// then reindexed.
    Promote(promote::PromoteArgs),
    /// A channel's versions: history, rollback, forget.
    ///
    /// Each promotion into a channel makes a new version of its pages; a rollback switches
    /// readers back to an older one in one write; forget deletes old versions' pages.
    Channel(channel::ChannelArgs),
    /// TheRock's package versions (pip, deb, rpm) for a release type.
    Version(version::VersionArgs),
    /// Pack this binary as a wheel (`scripts/build-wheel` runs it).
    #[command(hide = true)]
    SelfWheel(self_wheel::SelfWheelArgs),
    /// Write the guide's command reference pages (`docs/guide/src/reference/`).
    #[command(hide = true)]
    SelfDocs(self_docs::SelfDocsArgs),
}

/// `quarry --help` lists the commands by task, in this order; every visible command is in one
/// group (a test checks).
const COMMAND_GROUPS: &[(&str, &[&str])] = &[
    ("Serve and upload", &["serve", "upload", "index", "yank", "unyank", "delete", "audit"]),
    ("Releases and retention", &["promote", "channel", "mirror", "check-origins", "prune", "gc"]),
    ("TheRock builds", &["stage", "artifacts", "pipeline", "package", "version", "runs", "ci"]),
];

/// The `quarry` command line: [`Cli`] with its commands listed by task ([`COMMAND_GROUPS`]).
pub(crate) fn command() -> clap::Command {
    use clap::CommandFactory as _;
    let cmd = Cli::command();
    let header = cmd.get_styles().get_header();
    let literal = cmd.get_styles().get_literal();
    let width = cmd.get_subcommands().map(|c| c.get_name().len()).max().unwrap_or(0);
    let mut groups = String::new();
    for (title, names) in COMMAND_GROUPS {
        groups.push_str(&format!("{header}{title}:{header:#}\n"));
        for name in *names {
            let Some(sub) = cmd.find_subcommand(name) else { continue };
            let about = sub.get_about().map(ToString::to_string).unwrap_or_default();
            let pad = " ".repeat(width - name.len());
            groups.push_str(&format!("  {literal}{name}{literal:#}{pad}  {about}\n"));
        }
        groups.push('\n');
    }
    let template = format!(
        "{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{groups}{header}{GLOBAL}:{header:#}\n{{options}}{{after-help}}"
    );
    cmd.help_template(template)
}

/// Parses the command line (exits on bad input with code 2, or after `--help`).
pub(crate) fn parse() -> Cli {
    use clap::FromArgMatches as _;
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

const EXIT_CODES: &str = "Exit codes: 0 success; 1 the work failed (a build step, missing artifacts, \
I/O, network); 2 bad input (an unknown flag or value, a missing store, an invalid topology or matrix file).";

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
    Text,
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
        Command::Channel(args) => channel::run(args).await,
        Command::Upload(args) => upload::run(args).await,
        Command::Yank(args) => lifecycle::yank(args).await,
        Command::Unyank(args) => lifecycle::unyank(args).await,
        Command::Delete(args) => lifecycle::delete(args).await,
        Command::Audit(args) => audit::run(args).await,
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
        Command::SelfDocs(args) => self_docs::run(&args),
    }
}

/// Upload tokens as a client sends them: the token file's plus `QUARRY_TOKEN`.
pub(crate) use quarry_index_server::read_tokens;

/// Reads the `[layout]` of `quarry.toml` (`path`, else `./quarry.toml` if present; else the
/// default run layout), for the command to pass down (there is no process-wide layout).
pub(crate) fn load_layout(
    path: Option<&std::path::Path>,
) -> anyhow::Result<std::sync::Arc<quarry_layout::config::Layout>> {
    let (layout, file) = quarry_layout::config::load(path)?;
    if let Some(file) = file {
        tracing::debug!(file = %file.display(), roots = layout.roots.len(), runs = layout.runs, "layout");
    }
    Ok(std::sync::Arc::new(layout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_command_is_in_exactly_one_group() {
        let cmd = command();
        let grouped: Vec<&str> = COMMAND_GROUPS.iter().flat_map(|(_, names)| names.iter().copied()).collect();
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let name = sub.get_name();
            assert_eq!(grouped.iter().filter(|n| **n == name).count(), 1, "{name} in {grouped:?}");
        }
        for name in grouped {
            assert!(cmd.find_subcommand(name).is_some_and(|s| !s.is_hide_set()), "{name} is no visible command");
        }
    }

    /// Every argument a user can see says what it is (`quarry artifacts info --stage` once
    /// showed nothing), and every command's one-line description fits one line.
    #[test]
    fn every_visible_argument_and_command_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
                if arg.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
                let name = format!("{path} {}", sub.get_name());
                let about = sub.get_about().map(ToString::to_string).unwrap_or_default();
                // `quarry --help` shows a command's description on one line.
                let most = if path == "quarry" { 72 } else { usize::MAX };
                if about.trim().is_empty() || about.len() > most {
                    missing.push(format!("{name}: about {about:?} (one line, at most {most} characters)"));
                }
                walk(sub, &name, missing);
            }
        }
        let mut cmd = command();
        cmd.build();
        let mut missing = Vec::new();
        walk(&cmd, "quarry", &mut missing);
        assert!(missing.is_empty(), "without help:\n  {}", missing.join("\n  "));
    }

    #[test]
    fn the_command_line_definitions_are_consistent() {
        command().debug_assert();
    }
}
