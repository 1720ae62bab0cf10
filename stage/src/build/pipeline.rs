//! The whole topology in one run: one job per generic stage and per (per-arch stage, family);
//! a job waits for the jobs of the stages it fetches from (the same family's for a per-arch
//! one), so independent branches and families build side by side, a bounded number at a time.

use std::path::PathBuf;

use futures_util::StreamExt as _;
use quarry_topology::{Platform, Topology};

use super::{BuildError, BuildOptions, BuildProgress, StageReport, build_stage, check_families};
use crate::Run;

/// What a pipeline builds and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineOptions {
    /// GPU families: per-arch stages run once per family.
    pub families: Vec<String>,
    /// The superproject.
    pub source_dir: PathBuf,
    /// Build directories go under here: `<build-root>/<stage>` and `<build-root>/<stage>-<family>`.
    pub build_root: PathBuf,
    /// The platform CMake's arguments and paths are written for.
    pub platform: Platform,
    /// Pushed archives' member modification time (`SOURCE_DATE_EPOCH`).
    pub mtime: u64,
    /// Rebuild every stage even when its inputs and outputs are unchanged.
    pub force: bool,
    /// At most this many stage builds at once (each runs its own Ninja).
    pub parallel: usize,
}

/// One build of the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// `stage`, or `stage [family]` for a per-arch one.
    pub label: String,
    /// The build it runs.
    pub build: BuildOptions,
    /// Indices of the jobs this one fetches from.
    pub deps: Vec<usize>,
}

/// What can stop a pipeline.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("stage {label}")]
    Stage { label: String, source: BuildError },
    #[error("stage {0} never became ready (a dependency cycle?)")]
    NeverReady(String),
}

/// How a pipeline shows its progress: one handle per running job.
pub trait PipelineProgress: Sync {
    /// What a running job reports through.
    type Job: BuildProgress;
    /// A job started.
    fn started(&self, label: &str) -> Self::Job;
    /// A job built or reused its stage.
    fn finished(&self, label: &str, job: Self::Job, report: &StageReport);
    /// A job failed; the pipeline stops (the other running builds' tools are killed).
    fn failed(&self, label: &str, job: Self::Job, error: &BuildError);
}

/// The jobs in build order, families checked before anything is written.
pub fn plan(topology: &Topology, opts: &PipelineOptions) -> Result<Vec<Job>, BuildError> {
    check_families(&opts.source_dir, &opts.families)?;
    let jobs = topology.build_jobs(&opts.families).map_err(BuildError::Plan)?;
    Ok(jobs
        .into_iter()
        .map(|job| {
            let (label, dir) = match &job.family {
                Some(f) => (format!("{} [{f}]", job.stage), format!("{}-{f}", job.stage)),
                None => (job.stage.clone(), job.stage.clone()),
            };
            let build = BuildOptions {
                stage: job.stage,
                families: job.family.into_iter().collect(),
                source_dir: opts.source_dir.clone(),
                build_dir: opts.build_root.join(dir),
                extra_cmake_args: Vec::new(),
                platform: opts.platform,
                mtime: opts.mtime,
                source_excludes: vec![opts.build_root.clone()],
            };
            Job { label, build, deps: job.deps }
        })
        .collect())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobState {
    Waiting,
    Running,
    Done,
}

/// Runs the jobs, at most `opts.parallel` at once: the reports in build order (not completion
/// order). The first failure stops the pipeline; dropping the other running builds kills their
/// tools.
pub async fn run_pipeline<P: PipelineProgress>(
    run: &Run,
    jobs: &[Job],
    opts: &PipelineOptions,
    progress: &P,
) -> Result<Vec<StageReport>, PipelineError> {
    let mut state = vec![JobState::Waiting; jobs.len()];
    let mut reports: Vec<(usize, StageReport)> = Vec::new();
    let mut running = futures_util::stream::FuturesUnordered::new();
    loop {
        let mut free = opts.parallel.max(1).saturating_sub(running.len());
        for (i, job) in jobs.iter().enumerate() {
            if free == 0 {
                break;
            }
            if state[i] == JobState::Waiting && job.deps.iter().all(|d| state[*d] == JobState::Done) {
                state[i] = JobState::Running;
                free -= 1;
                let view = progress.started(&job.label);
                running.push(async move {
                    let result = build_stage(run, &job.build, !opts.force, &view).await;
                    (i, view, result)
                });
            }
        }
        let Some((i, view, result)) = running.next().await else { break };
        let label = &jobs[i].label;
        match result {
            Ok(report) => {
                state[i] = JobState::Done;
                progress.finished(label, view, &report);
                reports.push((i, report));
            }
            Err(source) => {
                progress.failed(label, view, &source);
                return Err(PipelineError::Stage { label: label.clone(), source });
            }
        }
    }
    if let Some(i) = state.iter().position(|s| *s != JobState::Done) {
        return Err(PipelineError::NeverReady(jobs[i].build.stage.clone()));
    }
    reports.sort_by_key(|(i, _)| *i);
    Ok(reports.into_iter().map(|(_, r)| r).collect())
}
