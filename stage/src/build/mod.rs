//! A stage end to end (fetch inbound artifacts with bootstrap → `cmake -G Ninja` with the
//! stage's arguments → `cmake --build` of `stage-<S>` and `therock-artifacts` → push what it
//! produced), and the whole topology in dependency order through one run, per-arch stages
//! fanned out per family ([`plan`], [`run_pipeline`]).
//!
//! A stage build records what it was built from in `<build-dir>/.quarry-stage.json` (the
//! sha256 of every inbound archive, the state of the stage's sources, its configure arguments
//! and the toolchain; see [`stamp`]) and the archives it pushed. A build with reuse skips a
//! stage whose fingerprint is unchanged and whose outputs are all still staged, so a second
//! pipeline run with nothing changed builds nothing, an edit to one stage's sources rebuilds
//! that stage and whatever its new output changes downstream, and deleting one family's
//! artifact rebuilds only the stage that produced it and its dependents likewise.
//!
//! Every build writes its tools' output to `<build-dir>/quarry-build.log` (and to stderr unless
//! a live view owns the terminal) and times its steps ([`timings`]); after the push both go to
//! the run's logs (`logs/{stage}[_{family}]/build.log` and `timings.json`).

mod pipeline;
mod stamp;
pub mod timings;
mod tool;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Instant;

use quarry_artifacts::{ArchiveFormat, ExtractMode};
use quarry_topology::configure::{ConfigureOptions, cmake_args};
use quarry_topology::families::AmdgpuTargets;
use quarry_topology::platform::cmake_path;
use quarry_topology::{Platform, StageType, Topology, TopologyError};

pub use pipeline::{Job, PipelineError, PipelineOptions, PipelineProgress, plan, run_pipeline};

use crate::transfer::{self, FetchOptions, GpuSelection, PushOptions, TransferError};
use crate::{OpError, Run};

/// What can stop a stage build.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// An unknown stage, or one the topology cannot configure (bad input).
    #[error("stage {stage}")]
    Stage { stage: String, source: TopologyError },
    /// Unknown GPU family names (bad input).
    #[error("checking GPU families")]
    Families(#[source] TopologyError),
    /// The superproject's own family table does not parse (bad input).
    #[error("the GPU family table")]
    FamilyTable(#[source] TopologyError),
    /// The topology's builds could not be planned (bad input).
    #[error("planning the builds")]
    Plan(#[source] TopologyError),
    /// A per-arch stage asked for without GPU families (bad input).
    #[error("stage {0} is per-arch: it needs GPU families")]
    PerArchNeedsFamilies(String),
    #[error(transparent)]
    Op(#[from] OpError),
    #[error("running {program} (is it installed?)")]
    Spawn { program: String, source: std::io::Error },
    /// A build tool failed: its log and the log's last lines when it wrote to one.
    #[error("{what} failed ({status}){log}{tail}")]
    Tool { what: String, status: std::process::ExitStatus, log: String, tail: String },
    #[error("fetching {stage}'s inputs:\n  {}", failures.join("\n  "))]
    Fetch { stage: String, failures: Vec<String> },
    #[error("pushing {stage}'s artifacts:\n  {}", failures.join("\n  "))]
    Push { stage: String, failures: Vec<String> },
    #[error("stage {stage} produced no artifacts in {}", dir.display())]
    NoArtifacts { stage: String, dir: PathBuf },
    #[error(transparent)]
    Transfer(#[from] TransferError),
}

/// How a stage build shows its progress.
pub trait BuildProgress: Send + Sync {
    /// A live view owns the terminal: build tools then write to `<build-dir>/quarry-build.log`
    /// and push's progress lines go to debug level.
    fn live(&self) -> bool;
    /// The build of `stage` (for `family`, when per-arch) moved on to `step`: `fetching
    /// inputs`, `configuring`, `building` or `pushing`.
    fn step(&self, stage: &str, family: Option<&str>, step: &str);
}

/// One stage to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildOptions {
    /// The stage to build.
    pub stage: String,
    /// GPU families for `-DTHEROCK_AMDGPU_FAMILIES` and the per-arch artifacts to fetch.
    pub families: Vec<String>,
    /// The superproject.
    pub source_dir: PathBuf,
    /// The stage's build tree (fetched inputs, CMake, `artifacts/`, the stamp).
    pub build_dir: PathBuf,
    /// More CMake arguments, after the stage's.
    pub extra_cmake_args: Vec<String>,
    /// The platform CMake's arguments and paths are written for.
    pub platform: Platform,
    /// Pushed archives' member modification time (`SOURCE_DATE_EPOCH`).
    pub mtime: u64,
    /// Directories that may lie inside `source_dir` but are no sources (build trees, staging
    /// directories): left out of the stamp's superproject state. `build_dir` always is.
    pub source_excludes: Vec<PathBuf>,
}

impl BuildOptions {
    /// Checks the stage and families against the topology and the superproject's family
    /// table before anything is written; `true` when the stage is per-arch.
    pub fn check(&self, topology: &Topology) -> Result<bool, BuildError> {
        let stage = topology.build_stages.get(&self.stage).ok_or_else(|| BuildError::Stage {
            stage: self.stage.clone(),
            source: topology.unknown_stage(&self.stage),
        })?;
        let per_arch = stage.kind == StageType::PerArch;
        check_families(&self.source_dir, &self.families)?;
        if per_arch && self.families.is_empty() {
            return Err(BuildError::PerArchNeedsFamilies(self.stage.clone()));
        }
        Ok(per_arch)
    }
}

/// Whether a stage was built or reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Fetched, configured, built and pushed.
    Built,
    /// Skipped: inputs unchanged and outputs still staged.
    Reused,
}

impl Status {
    /// `built` or `reused`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Built => "built",
            Status::Reused => "reused",
        }
    }
}

/// What one stage build did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StageReport {
    /// The stage built.
    pub stage: String,
    /// Its family (`a;b` for several), for a per-arch stage.
    pub family: Option<String>,
    /// Built or reused.
    pub status: Status,
    /// Wall time of the whole build.
    pub seconds: f64,
    /// Seconds per step ([`timings::STEPS`]: setup, fetch, configure, build, push); none when
    /// reused.
    pub steps: BTreeMap<&'static str, f64>,
    /// The archives the stage pushed.
    pub artifacts: Vec<String>,
}

/// What a pipeline run did: its stages in the order they finished, and the wall time.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PipelineReport {
    pub seconds: f64,
    pub stages: Vec<StageReport>,
}

/// The table `quarry pipeline run` prints: one line per stage build, then the total.
impl std::fmt::Display for PipelineReport {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(out, "{:<16} {:<10} {:<7} {:>8}  artifacts", "stage", "family", "status", "seconds")?;
        for r in &self.stages {
            let family = r.family.as_deref().unwrap_or("-");
            let (status, artifacts) = (r.status.as_str(), r.artifacts.join(" "));
            writeln!(out, "{:<16} {family:<10} {status:<7} {:>8.1}  {artifacts}", r.stage, r.seconds)?;
        }
        writeln!(out, "pipeline done in {:.1} s", self.seconds)
    }
}

/// Refuses family names the superproject's table (or TheRock's) does not know.
fn check_families(source_dir: &Path, families: &[String]) -> Result<(), BuildError> {
    family_table(source_dir)?.check(families).map_err(BuildError::Families)
}

/// The family → targets table for a superproject: its own `cmake/therock_amdgpu_targets.cmake`
/// when it has one, else the built-in one (TheRock's).
fn family_table(source_dir: &Path) -> Result<AmdgpuTargets, BuildError> {
    let own = source_dir.join("cmake/therock_amdgpu_targets.cmake");
    if own.is_file() {
        let text = std::fs::read_to_string(&own).map_err(crate::io(format!("reading {}", own.display())))?;
        return AmdgpuTargets::parse_cmake(&text, &own.display().to_string()).map_err(BuildError::FamilyTable);
    }
    Ok(AmdgpuTargets::builtin())
}

/// Builds one stage of an opened run; with `reuse`, skips it when the stamp says nothing
/// changed.
pub async fn build_stage(
    run: &Run,
    opts: &BuildOptions,
    reuse: bool,
    progress: &dyn BuildProgress,
) -> Result<StageReport, BuildError> {
    let started = Instant::now();
    let per_arch = opts.check(&run.topology)?;
    let family = per_arch.then(|| opts.families.join(";"));
    let stage = opts.stage.as_str();
    std::fs::create_dir_all(&opts.build_dir).map_err(crate::io(format!("creating {}", opts.build_dir.display())))?;
    let gpus = GpuSelection {
        families: opts.families.clone(),
        generic_only: opts.families.is_empty(),
        ..GpuSelection::default()
    };
    let fingerprint = fingerprint(run, opts, &gpus).await?;
    let report = |status, steps, artifacts| StageReport {
        stage: stage.to_owned(),
        family: family.clone(),
        status,
        seconds: started.elapsed().as_secs_f64(),
        steps,
        artifacts,
    };
    if reuse && let Some(outputs) = stamp::reusable(run, &opts.build_dir, &fingerprint).await? {
        tracing::info!(stage = %stage, family = ?family, "sources, inputs and toolchain unchanged, outputs staged: reused");
        return Ok(report(Status::Reused, BTreeMap::new(), outputs));
    }
    let log = opts.build_dir.join("quarry-build.log");
    std::fs::write(&log, b"").map_err(crate::io(format!("creating {}", log.display())))?;
    let mut steps = Steps { stage, family: family.as_deref(), progress, times: BTreeMap::new() };
    steps.times.insert("setup", started.elapsed().as_secs_f64());
    let tools = Tools { log: &log, echo: !progress.live() };
    steps.run("fetching inputs", "fetch", fetch_inputs(run, opts, gpus)).await?;
    steps.run("configuring", "configure", tools.run(&fingerprint.configure, "cmake configure")).await?;
    steps.run("building", "build", build(opts, &tools)).await?;
    let outputs = steps.run("pushing", "push", push_outputs(run, opts, progress.live())).await?;
    stamp::write(&opts.build_dir, fingerprint, &outputs)?;
    if !progress.live() {
        for (name, seconds) in &steps.times {
            tracing::info!(stage = %stage, family = ?family, step = name, seconds, "step done");
        }
    }
    let built = report(Status::Built, steps.times, outputs);
    upload_log_and_timings(run, &built, &log).await?;
    Ok(built)
}

/// What the stage is built from: inbound digests, sources, configure arguments, toolchain.
async fn fingerprint(run: &Run, opts: &BuildOptions, gpus: &GpuSelection) -> Result<stamp::Fingerprint, BuildError> {
    let inputs = stamp::inbound_digests(run, &opts.stage, gpus).await?;
    let configure = configure_args(run, opts)?;
    let (topology, stage, source_dir) = (run.topology.clone(), opts.stage.clone(), opts.source_dir.clone());
    let mut excluded = opts.source_excludes.clone();
    excluded.push(opts.build_dir.clone());
    let (sources, toolchain) = tokio::task::spawn_blocking(move || {
        (stamp::sources(&topology, &stage, &source_dir, &excluded), tool::toolchain())
    })
    .await
    .map_err(|e| crate::io("reading the sources' state")(std::io::Error::other(e)))?;
    Ok(stamp::Fingerprint { inputs, sources, configure, toolchain })
}

/// Puts the build's log and timings into the run's logs (replacing an earlier build's).
async fn upload_log_and_timings(run: &Run, report: &StageReport, log: &Path) -> Result<(), BuildError> {
    use quarry_store::{PutOptions, StoreExt as _};
    let dir = format!(
        "{}/{}",
        quarry_layout::THEROCK.logs_dir(),
        timings::log_group(&report.stage, report.family.as_deref())
    );
    let json = serde_json::to_vec_pretty(report).map_err(|e| crate::io("writing the timings")(e.into()))?;
    let key = run.key(&format!("{dir}/{}", timings::TIMINGS_FILE))?;
    let options = PutOptions::default().with_content_type("application/json");
    run.store.put_bytes(&key, json.into(), options).await.map_err(crate::store(format!("writing {key}")))?;
    let key = run.key(&format!("{dir}/{}", timings::BUILD_LOG_FILE))?;
    let file = tokio::fs::File::open(log).await.map_err(crate::io(format!("reading {}", log.display())))?;
    let body: quarry_store::ByteStream = Box::pin(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
    let options = PutOptions::default().with_content_type("text/plain; charset=utf-8");
    run.store.put(&key, body, options).await.map_err(crate::store(format!("writing {key}")))?;
    Ok(())
}

/// How the build tools run: into the build's log, echoed to stderr without a live view.
struct Tools<'a> {
    log: &'a Path,
    echo: bool,
}

impl Tools<'_> {
    async fn run(&self, args: &[String], what: &str) -> Result<(), BuildError> {
        tool::run("cmake", args, what, self.log, self.echo).await
    }
}

/// The steps of one build: each announced, then timed.
struct Steps<'a> {
    stage: &'a str,
    family: Option<&'a str>,
    progress: &'a dyn BuildProgress,
    times: BTreeMap<&'static str, f64>,
}

impl Steps<'_> {
    async fn run<T>(
        &mut self,
        message: &str,
        name: &'static str,
        work: impl Future<Output = Result<T, BuildError>>,
    ) -> Result<T, BuildError> {
        self.progress.step(self.stage, self.family, message);
        let started = Instant::now();
        let value = work.await?;
        self.times.insert(name, started.elapsed().as_secs_f64());
        Ok(value)
    }
}

/// Step 1: inbound artifacts, bootstrapped into the build tree.
async fn fetch_inputs(run: &Run, opts: &BuildOptions, gpus: GpuSelection) -> Result<(), BuildError> {
    let inbound =
        run.topology.inbound(&opts.stage).map_err(|source| BuildError::Stage { stage: opts.stage.clone(), source })?;
    if inbound.is_empty() {
        return Ok(());
    }
    let fetch = FetchOptions {
        stage: opts.stage.clone(),
        gpus,
        output_dir: opts.build_dir.clone(),
        extract: Some(ExtractMode::Bootstrap),
        download_cache_dir: None,
        download_concurrency: 10,
        extract_concurrency: None,
        exclude_components: Vec::new(),
        exclude_artifacts: Vec::new(),
        max_unpacked_bytes: quarry_artifacts::DEFAULT_MAX_BYTES,
        max_expansion_ratio: quarry_artifacts::DEFAULT_MAX_RATIO,
        names: transfer::NameFilter::default(),
    };
    let report = transfer::fetch(run, &fetch).await?;
    if !report.failures.is_empty() {
        return Err(BuildError::Fetch { stage: opts.stage.clone(), failures: report.failures });
    }
    Ok(())
}

/// Step 2's arguments: configure with the stage's arguments (CMake wants `B:/build`, not
/// `B:\build`, on Windows).
fn configure_args(run: &Run, opts: &BuildOptions) -> Result<Vec<String>, BuildError> {
    let options = ConfigureOptions {
        amdgpu_families: opts.families.join(";"),
        platform: Some(opts.platform),
        ..ConfigureOptions::default()
    };
    let mut args: Vec<String> = vec![
        "-B".into(),
        cmake_path(&opts.build_dir.display().to_string(), opts.platform),
        "-S".into(),
        cmake_path(&opts.source_dir.display().to_string(), opts.platform),
        "-G".into(),
        "Ninja".into(),
    ];
    let stage_args = cmake_args(&run.topology, &opts.stage, &options)
        .map_err(|source| BuildError::Stage { stage: opts.stage.clone(), source })?;
    args.extend(stage_args.into_iter().filter(|a| !a.starts_with('#') && !a.is_empty()));
    args.extend(opts.extra_cmake_args.iter().cloned());
    Ok(args)
}

/// Step 3: build the stage and lay out its artifacts (in a fresh `<build-dir>/artifacts/`).
async fn build(opts: &BuildOptions, tools: &Tools<'_>) -> Result<(), BuildError> {
    let artifacts_dir = opts.build_dir.join("artifacts");
    if artifacts_dir.exists() {
        std::fs::remove_dir_all(&artifacts_dir).map_err(crate::io(format!("clearing {}", artifacts_dir.display())))?;
    }
    let args: Vec<String> = vec![
        "--build".into(),
        opts.build_dir.display().to_string(),
        "--target".into(),
        format!("stage-{}", opts.stage),
        "therock-artifacts".into(),
    ];
    tools.run(&args, "cmake --build").await
}

/// Step 4: push what the stage produced: the archives' file names.
async fn push_outputs(run: &Run, opts: &BuildOptions, quiet: bool) -> Result<Vec<String>, BuildError> {
    let push = PushOptions {
        stage: opts.stage.clone(),
        build_dir: opts.build_dir.clone(),
        format: ArchiveFormat::Zstd,
        level: None,
        mtime: opts.mtime,
        compress_concurrency: None,
        upload_concurrency: 10,
        quiet,
    };
    let report = transfer::push(run, &push).await?;
    if !report.failures.is_empty() {
        return Err(BuildError::Push { stage: opts.stage.clone(), failures: report.failures });
    }
    let outputs: Vec<String> = report.pushed.into_iter().map(|m| m.file).collect();
    if outputs.is_empty() {
        return Err(BuildError::NoArtifacts { stage: opts.stage.clone(), dir: opts.build_dir.join("artifacts") });
    }
    Ok(outputs)
}
