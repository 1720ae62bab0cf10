//! `quarry stage build` and `quarry pipeline run` over `quarry_stage::build`: the flags become
//! build options, the run is opened once (after stages and families are checked, so bad input
//! writes nothing), and the progress is shown as a live view (one spinner line per running
//! build, tool output to `<build-dir>/quarry-build.log`) when stderr is a terminal, log lines
//! otherwise; the summary goes to stdout.

use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use quarry_stage::build::timings::markdown_table;
use quarry_stage::build::{BuildError, PipelineOptions, build_stage, plan, run_pipeline};
use quarry_stage::{BuildOptions, BuildProgress, PipelineProgress, PipelineReport, StageReport};
use quarry_topology::split_list;

use super::UsageError;
use super::args::Backend;
use super::args::JsonArg;
use super::artifacts::{RunFlags, archive_mtime, open_run};
use super::print_json;

#[derive(Debug, clap::Args)]
pub(crate) struct BuildArgs {
    #[command(flatten)]
    backend: Backend,
    /// The stage to build.
    #[arg(long)]
    stage: String,
    /// GPU families (`;` or `,` separated) for `-DTHEROCK_AMDGPU_FAMILIES` and the per-arch
    /// artifacts to fetch.
    #[arg(long, default_value = "")]
    amdgpu_families: String,
    /// The superproject.
    #[arg(long, default_value = ".")]
    source_dir: PathBuf,
    /// The stage's build directory.
    #[arg(long, default_value = "build")]
    build_dir: PathBuf,
    /// More CMake arguments, after the stage's.
    #[arg(last = true)]
    extra: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PipelineArgs {
    #[command(subcommand)]
    command: PipelineCommand,
}

#[derive(Debug, clap::Subcommand)]
enum PipelineCommand {
    /// Every stage in dependency order through one staging directory.
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    run: RunFlags,
    /// GPU families: per-arch stages run once per family.
    #[arg(long)]
    families: String,
    /// The superproject.
    #[arg(long, default_value = ".")]
    source_dir: PathBuf,
    /// Build directories go under here: `<build-root>/<stage>` and `<build-root>/<stage>-<family>`.
    #[arg(long, default_value = "build")]
    build_root: PathBuf,
    /// Rebuild every stage even when its inputs and outputs are unchanged.
    #[arg(long)]
    force: bool,
    /// At most this many stage builds at once (each runs its own Ninja).
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    #[command(flatten)]
    json: JsonArg,
}

/// One build's progress: its line in the live view, or log lines.
#[derive(Default)]
struct JobView {
    bar: Option<ProgressBar>,
}

impl BuildProgress for JobView {
    fn live(&self) -> bool {
        self.bar.is_some()
    }

    fn step(&self, stage: &str, family: Option<&str>, step: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(step.to_owned()),
            None => tracing::info!(stage, family, "{step}"),
        }
    }
}

/// The pipeline's view: a spinner line per running build when stderr is a terminal.
struct View {
    multi: Option<MultiProgress>,
    style: ProgressStyle,
}

impl PipelineProgress for View {
    type Job = JobView;

    fn started(&self, label: &str) -> JobView {
        let bar = self.multi.as_ref().map(|m| {
            let bar = m.add(ProgressBar::new_spinner());
            bar.set_style(self.style.clone());
            bar.set_prefix(label.to_owned());
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        if bar.is_none() {
            tracing::info!("{label}: started");
        }
        JobView { bar }
    }

    fn finished(&self, label: &str, job: JobView, report: &StageReport) {
        let line = format!("{} in {:.1} s: {}", report.status.as_str(), report.seconds, report.artifacts.join(" "));
        match &job.bar {
            Some(bar) => bar.finish_with_message(line),
            None => tracing::info!("{label}: {line}"),
        }
    }

    fn failed(&self, _label: &str, job: JobView, error: &BuildError) {
        if let Some(bar) = &job.bar {
            bar.abandon_with_message(format!("failed: {}", error.to_string().lines().next().unwrap_or("")));
        }
    }
}

/// `quarry stage build`, with `--topology` from `quarry stage`.
pub(crate) async fn stage_build(args: BuildArgs, topology: &Path) -> anyhow::Result<()> {
    let location = args.backend.location();
    let opts = BuildOptions {
        stage: args.stage,
        families: split_list(&args.amdgpu_families),
        source_dir: args.source_dir,
        build_dir: args.build_dir,
        extra_cmake_args: args.extra,
        platform: args.backend.cmake_platform(),
        mtime: archive_mtime()?,
        source_excludes: location.local_staging_dir.iter().cloned().collect(),
    };
    let check = |t: &quarry_topology::Topology| match opts.check(t) {
        Err(BuildError::PerArchNeedsFamilies(stage)) => {
            Err(UsageError::new(format!("stage {stage} is per-arch: name its GPU families with --amdgpu-families"))
                .into())
        }
        other => Ok(other?),
    };
    let (run, _) = open_run(topology, &location, check).await?;
    super::runs::ensure_manifest(&run, Some(&opts.source_dir)).await;
    let report = build_stage(&run, &opts, false, &JobView::default()).await?;
    step_summary(&format!("Stage {}", report.stage), std::slice::from_ref(&report))?;
    print_json(&report)
}

/// Appends the builds' timing table to `$GITHUB_STEP_SUMMARY`, when set.
fn step_summary(title: &str, reports: &[StageReport]) -> anyhow::Result<()> {
    let text = format!("### {title}: build timings\n\n{}\n", markdown_table(reports));
    super::append_to_github_file("GITHUB_STEP_SUMMARY", &text)?;
    Ok(())
}

pub(crate) async fn run(args: PipelineArgs) -> anyhow::Result<()> {
    let PipelineCommand::Run(args) = args.command;
    let started = Instant::now();
    let opts = PipelineOptions {
        families: split_list(&args.families),
        source_dir: args.source_dir,
        build_root: args.build_root,
        platform: args.run.backend.cmake_platform(),
        mtime: archive_mtime()?,
        force: args.force,
        parallel: args.parallel,
    };
    let mut location = args.run.backend.location();
    if location.local_staging_dir.is_none() && location.store.is_none() {
        location.local_staging_dir = Some(opts.build_root.join("staging"));
    }
    let (run, jobs) = open_run(&args.run.topology, &location, |t| {
        if opts.families.is_empty() {
            return Err(UsageError::new("--families names no GPU family").into());
        }
        Ok(plan(t, &opts)?)
    })
    .await?;
    let view = View {
        multi: std::io::stderr().is_terminal().then(MultiProgress::new),
        style: ProgressStyle::with_template("{spinner} {prefix:<28} {elapsed:>4} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    };
    super::runs::ensure_manifest(&run, Some(&opts.source_dir)).await;
    let stages = run_pipeline(&run, &jobs, &opts, &view).await?;
    let report = PipelineReport { seconds: started.elapsed().as_secs_f64(), stages };
    step_summary(&format!("Pipeline ({:.1} s)", report.seconds), &report.stages)?;
    super::print(args.json.json, &report, &report)
}
