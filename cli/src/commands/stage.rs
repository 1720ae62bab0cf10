//! `quarry stage list | info | configure`: TheRock's `configure_stage.py` over
//! `BUILD_TOPOLOGY.toml` (flag names as TheRock's, so CI can switch by changing the command:
//! `--list-stages` prints on stderr as configure_stage.py does; its per-project flags are refused
//! naming `--stage`).

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use quarry_stage::load_topology;
use quarry_topology::Platform;
use quarry_topology::configure::{ConfigureOptions, cmake_args, pip_install_args, render};

use super::args::JsonArg;
use super::args::PlatformArg;
use super::{UsageError, print_json};

#[derive(Debug, clap::Args)]
pub(crate) struct StageArgs {
    #[command(subcommand)]
    command: StageCommand,
    /// The topology file.
    #[arg(long, global = true, default_value = "BUILD_TOPOLOGY.toml")]
    topology: PathBuf,
}

#[derive(Debug, clap::Subcommand)]
enum StageCommand {
    /// The stages, in build order, with their type and artifact groups.
    List,
    /// What a stage produces and what it fetches first.
    Info {
        /// The stage.
        #[arg(long)]
        stage: String,
        #[command(flatten)]
        json: JsonArg,
    },
    /// The CMake arguments for a stage, exactly as configure_stage.py prints them.
    Configure(ConfigureArgs),
    /// One stage end to end: fetch inbound artifacts, configure, build, push.
    Build(super::pipeline::BuildArgs),
}

#[derive(Debug, clap::Args)]
struct ConfigureArgs {
    /// The stage to configure.
    #[arg(long, required_unless_present_any = ["list_stages", "projects", "list_projects", "skip_stages", "build_dir"])]
    stage: Option<String>,
    /// Print the stages (name, type, description) on stderr, as configure_stage.py does, and
    /// configure nothing (`quarry stage list` prints them on stdout).
    #[arg(long, hide_short_help = true)]
    list_stages: bool,
    /// `-DTHEROCK_AMDGPU_FAMILIES`, verbatim.
    #[arg(long, default_value = "")]
    amdgpu_families: String,
    /// `-DTHEROCK_DIST_AMDGPU_FAMILIES` (`a;b`).
    #[arg(long, default_value = "")]
    dist_amdgpu_families: String,
    /// linux or windows (default: this machine's).
    #[arg(long, value_enum)]
    platform: Option<PlatformArg>,
    /// Add the manylinux container's Python executables.
    #[arg(long)]
    manylinux: bool,
    /// Explain the arguments with comment lines.
    #[arg(long)]
    comments: bool,
    /// One line, space separated.
    #[arg(long)]
    oneline: bool,
    /// Write `cmake_args` and `pip_install_cmd` to `$GITHUB_OUTPUT`.
    #[arg(long)]
    gha_output: bool,
    /// Write the arguments to this file instead of stdout.
    #[arg(long)]
    output_cmake_args: Option<PathBuf>,
    /// Print to stdout (the default).
    #[arg(long = "print")]
    print_args: bool,
    /// configure_stage.py's per-project selection: refused, naming Quarry's way.
    #[command(flatten)]
    projects: ProjectFlags,
}

/// configure_stage.py's `--projects` family: Quarry configures whole stages only, so these are
/// refused with a message naming `--stage` (`docs/therock.md`).
#[derive(Debug, clap::Args)]
struct ProjectFlags {
    #[arg(long, hide = true, num_args = 1..)]
    projects: Vec<String>,
    #[arg(long, hide = true)]
    list_projects: bool,
    #[arg(long, hide = true)]
    skip_stages: bool,
    #[arg(long, hide = true)]
    build_dir: Option<PathBuf>,
}

impl ProjectFlags {
    /// The first of these flags given, if any.
    fn given(&self) -> Option<&'static str> {
        if !self.projects.is_empty() {
            Some("--projects")
        } else if self.list_projects {
            Some("--list-projects")
        } else if self.skip_stages {
            Some("--skip-stages")
        } else if self.build_dir.is_some() {
            Some("--build-dir")
        } else {
            None
        }
    }
}

pub(crate) async fn run(args: StageArgs) -> anyhow::Result<()> {
    let command = match args.command {
        StageCommand::Build(build) => return super::pipeline::stage_build(build, &args.topology).await,
        other => other,
    };
    let topology = load_topology(&args.topology)?;
    let mut out = std::io::stdout().lock();
    match command {
        StageCommand::List => {
            for name in topology.build_order() {
                let stage = &topology.build_stages[&name];
                let kind = super::artifacts::stage_kind(stage.kind);
                writeln!(out, "{name}\t{kind}\t{}", stage.artifact_groups.join(","))?;
            }
        }
        StageCommand::Info { stage, json: JsonArg { json } } => {
            let produced = topology.produced(&stage)?;
            let inbound = topology.inbound(&stage)?;
            if json {
                print_json(&serde_json::json!({"stage": stage, "produced": produced, "inbound": inbound}))?;
            } else {
                writeln!(out, "produced: {}", produced.into_iter().collect::<Vec<_>>().join(" "))?;
                writeln!(out, "inbound: {}", inbound.into_iter().collect::<Vec<_>>().join(" "))?;
            }
        }
        StageCommand::Build(_) => {}
        StageCommand::Configure(c) => {
            if let Some(flag) = c.projects.given() {
                return Err(UsageError::new(format!(
                    "{flag}: Quarry configures whole stages; use `quarry stage configure --stage STAGE` \
                     (`quarry stage list` names them, `quarry stage info --stage STAGE` says what each builds)"
                ))
                .into());
            }
            if c.list_stages {
                // configure_stage.py logs the list on stderr.
                let mut err = std::io::stderr().lock();
                writeln!(err, "Available build stages:")?;
                for name in topology.build_order() {
                    let stage = &topology.build_stages[&name];
                    writeln!(err, "  {name} ({}): {}", super::artifacts::stage_kind(stage.kind), stage.description)?;
                }
                return Ok(());
            }
            let Some(stage) = c.stage else { return Err(UsageError::new("--stage is required").into()) };
            let platform = c.platform.map_or_else(Platform::host, Platform::from);
            let oneline = c.oneline || c.gha_output;
            let options = ConfigureOptions {
                amdgpu_families: c.amdgpu_families,
                dist_amdgpu_families: c.dist_amdgpu_families,
                platform: Some(platform),
                manylinux: c.manylinux,
                comments: c.comments && !oneline,
                flags: Default::default(),
            };
            let text = render(&cmake_args(&topology, &stage, &options)?, oneline);
            if c.gha_output {
                let pip = pip_install_args(&topology, &stage)?.join(" ");
                let lines = format!("cmake_args={text}\npip_install_cmd={pip}\n");
                if !super::append_to_github_file("GITHUB_OUTPUT", &lines)? {
                    anyhow::bail!("--gha-output needs GITHUB_OUTPUT");
                }
            } else if let Some(path) = &c.output_cmake_args {
                std::fs::write(path, format!("{text}\n")).with_context(|| format!("writing {}", path.display()))?;
                tracing::info!("wrote CMake arguments to {}", path.display());
            } else {
                let _ = c.print_args;
                writeln!(out, "{text}")?;
            }
        }
    }
    Ok(())
}
