//! `quarry stage list | info | configure`: TheRock's `configure_stage.py` over
//! `BUILD_TOPOLOGY.toml` (flag names as TheRock's, so CI can switch by changing the command).

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use quarry_stage::load_topology;
use quarry_topology::Platform;
use quarry_topology::configure::{ConfigureOptions, cmake_args, pip_install_args, render};

use super::args::JsonArg;
use super::args::PlatformArg;
use super::print_json;

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
    #[arg(long)]
    stage: String,
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
                let kind = if stage.kind == quarry_topology::StageType::PerArch { "per-arch" } else { "generic" };
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
            let text = render(&cmake_args(&topology, &c.stage, &options)?, oneline);
            if c.gha_output {
                let pip = pip_install_args(&topology, &c.stage)?.join(" ");
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
