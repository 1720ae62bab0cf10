//! `quarry stage build` and `quarry pipeline run`: a stage end to end (fetch inbound artifacts
//! with bootstrap → `cmake -G Ninja` with the stage's arguments → `cmake --build` of
//! `stage-<S>` and `therock-artifacts` → push what it produced), and the whole topology in
//! dependency order through one staging directory, per-arch stages fanned out per family.
//!
//! A stage build records what it was built from in `<build-dir>/.quarry-stage.json` (the
//! sha256 of every inbound archive and the archives it pushed). `pipeline run` reuses a stage
//! whose inputs are unchanged and whose outputs are all still staged, so a second run with
//! nothing changed builds nothing, and deleting one family's artifact rebuilds only the stage
//! that produced it and whatever its new output changes downstream.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use quarry_store::{Key, Store, StoreExt as _};
use quarry_topology::configure::{ConfigureOptions, cmake_args};
use quarry_topology::families::AmdgpuTargets;
use quarry_topology::platform::cmake_path;
use quarry_topology::{Platform, StageType, Topology};

use super::artifacts::{Backend, FetchArgs, PushArgs, Targets, fetch_stage, push_stage, select, split_list};

#[derive(Debug, Clone, clap::Args)]
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
    /// The topology file.
    #[arg(long, default_value = "BUILD_TOPOLOGY.toml")]
    topology: PathBuf,
    #[command(flatten)]
    backend: Backend,
    /// GPU families: per-arch stages run once per family.
    #[arg(long)]
    families: String,
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
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

impl BuildArgs {
    /// `quarry stage build` takes `--topology` from `quarry stage`'s global flag.
    pub(crate) fn set_topology(&mut self, topology: PathBuf) {
        self.backend.topology = topology;
    }
}

/// What one stage build did.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct StageReport {
    stage: String,
    family: Option<String>,
    /// `built` or `reused`.
    status: &'static str,
    seconds: f64,
    /// Seconds per step: fetch, configure, build, push.
    steps: BTreeMap<&'static str, f64>,
    artifacts: Vec<String>,
}

#[derive(Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Stamp {
    /// Inbound archive → sha256.
    inputs: BTreeMap<String, String>,
    /// Archives this stage pushed.
    outputs: Vec<String>,
}

const STAMP: &str = ".quarry-stage.json";

fn load_topology(path: &Path) -> anyhow::Result<Topology> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Topology::parse(&text)?)
}

/// Runs a build tool. Its output is log, not data: it goes to stderr, or to `log` when the
/// live progress view owns the terminal (the error then quotes the log's last lines).
async fn command(program: &str, args: &[String], what: &str, log: Option<&Path>) -> anyhow::Result<()> {
    tracing::debug!("{program} {}", args.join(" "));
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).kill_on_drop(true);
    if let Some(log) = log {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        cmd.stdout(file.try_clone()?).stderr(file);
    } else {
        cmd.stdout(std::process::Stdio::from(std::io::stderr())).stderr(std::process::Stdio::inherit());
    }
    let status = cmd.status().await.with_context(|| format!("running {program} (is it installed?)"))?;
    if !status.success() {
        let tail = log
            .and_then(|l| std::fs::read_to_string(l).ok())
            .map(|text| {
                let lines: Vec<&str> = text.lines().collect();
                format!("\n  {}", lines[lines.len().saturating_sub(15)..].join("\n  "))
            })
            .unwrap_or_default();
        let log_name = log.map(|l| format!(" (log: {})", l.display())).unwrap_or_default();
        bail!("{what} failed ({status}){log_name}{tail}");
    }
    Ok(())
}

/// How a stage build shows its progress: a line in the live view, or log lines.
#[derive(Clone, Default)]
pub(crate) struct View {
    bar: Option<indicatif::ProgressBar>,
}

impl View {
    fn step(&self, stage: &str, family: Option<&str>, step: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(step.to_owned()),
            None => tracing::info!(stage, family, "{step}"),
        }
    }

    /// Tool output goes to a log file while the live view owns the terminal.
    fn log_file(&self, build_dir: &Path) -> Option<PathBuf> {
        self.bar.as_ref().map(|_| build_dir.join("quarry-build.log"))
    }
}

/// The family → targets table for a superproject: its own `cmake/therock_amdgpu_targets.cmake`
/// when it has one, else the built-in one (TheRock's).
fn family_table(source_dir: &Path) -> anyhow::Result<AmdgpuTargets> {
    let own = source_dir.join("cmake/therock_amdgpu_targets.cmake");
    if own.is_file() {
        let text = std::fs::read_to_string(&own).with_context(|| format!("reading {}", own.display()))?;
        return Ok(AmdgpuTargets::parse_cmake(&text, &own.display().to_string())?);
    }
    Ok(AmdgpuTargets::builtin())
}

/// The sha256 of every archive the stage's fetch takes (the same selection), from the staged
/// sidecars (the object's ETag when a sidecar is missing).
async fn inbound_digests(
    store: &dyn Store,
    prefix: &str,
    topology: &Topology,
    stage: &str,
    targets: &Targets,
) -> anyhow::Result<BTreeMap<String, String>> {
    let wanted = topology.inbound(stage)?;
    let listing = store.list_all(prefix, true).await?;
    let listed: Vec<String> =
        listing.objects.iter().filter_map(|o| o.key.as_str().strip_prefix(prefix).map(str::to_owned)).collect();
    let mut out = BTreeMap::new();
    for (name, format) in select(&listed, &wanted, targets, &BTreeSet::new()) {
        let file = name.archive_name(format);
        let side = Key::new(format!("{prefix}{}", quarry_artifacts::sidecar::sidecar_name(&file)))?;
        let sha = match store.get_bytes(&side, 4096).await {
            Ok((_, bytes)) => quarry_artifacts::sidecar::parse(&String::from_utf8_lossy(&bytes)).unwrap_or_default(),
            Err(_) => store.head(&Key::new(format!("{prefix}{file}"))?).await?.etag,
        };
        out.insert(file, sha);
    }
    Ok(out)
}

async fn outputs_staged(store: &dyn Store, prefix: &str, outputs: &[String]) -> anyhow::Result<bool> {
    for file in outputs {
        match store.head(&Key::new(format!("{prefix}{file}"))?).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// Builds one stage; with `reuse`, skips it when the stamp says nothing changed.
pub(crate) async fn build_stage(args: &BuildArgs, reuse: bool, view: &View) -> anyhow::Result<StageReport> {
    let started = Instant::now();
    let topology = load_topology(&args.backend.topology)?;
    let stage = topology.build_stages.get(&args.stage).ok_or_else(|| topology.unknown_stage(&args.stage))?;
    let per_arch = stage.kind == StageType::PerArch;
    let families = split_list(Some(&args.amdgpu_families));
    family_table(&args.source_dir)?.check(&families)?;
    if per_arch && families.is_empty() {
        return Err(super::UsageError::new(format!(
            "stage {} is per-arch: name its GPU families with --amdgpu-families",
            args.stage
        ))
        .into());
    }
    let family = per_arch.then(|| families.join(";"));
    let log = view.log_file(&args.build_dir);
    std::fs::create_dir_all(&args.build_dir).with_context(|| format!("creating {}", args.build_dir.display()))?;
    let stamp_path = args.build_dir.join(STAMP);
    let targets = Targets {
        amdgpu_families: (!families.is_empty()).then(|| families.join(";")),
        amdgpu_targets: None,
        generic_only: families.is_empty(),
        expand_family_to_targets: false,
    };
    let (store, prefix) = args.backend.open().await?;
    let inputs = inbound_digests(store.as_ref(), &prefix, &topology, &args.stage, &targets).await?;
    if reuse
        && let Ok(text) = std::fs::read_to_string(&stamp_path)
        && let Ok(stamp) = serde_json::from_str::<Stamp>(&text)
        && stamp.inputs == inputs
        && !stamp.outputs.is_empty()
        && outputs_staged(store.as_ref(), &prefix, &stamp.outputs).await?
    {
        tracing::info!(stage = %args.stage, family = ?family, "inputs unchanged and outputs staged: reused");
        return Ok(StageReport {
            stage: args.stage.clone(),
            family,
            status: "reused",
            seconds: started.elapsed().as_secs_f64(),
            steps: BTreeMap::new(),
            artifacts: stamp.outputs,
        });
    }
    let mut steps = BTreeMap::new();

    if let Some(log) = &log {
        let _ = std::fs::remove_file(log);
    }
    // 1. Inbound artifacts, bootstrapped into the build tree.
    view.step(&args.stage, family.as_deref(), "fetching inputs");
    let step = Instant::now();
    let fetch = FetchArgs {
        topology: args.backend.topology.clone(),
        backend: args.backend.clone(),
        targets,
        stage: args.stage.clone(),
        output_dir: args.build_dir.clone(),
        bootstrap: true,
        flatten: false,
        no_extract: false,
        download_cache_dir: None,
        download_concurrency: 10,
        extract_concurrency: None,
        exclude_components: None,
        exclude_artifacts: None,
        json: false,
    };
    if !topology.inbound(&args.stage)?.is_empty() {
        let report = fetch_stage(&fetch).await?;
        if !report.failures.is_empty() {
            bail!("fetching {}'s inputs:\n  {}", args.stage, report.failures.join("\n  "));
        }
    }
    steps.insert("fetch", step.elapsed().as_secs_f64());

    // 2. Configure with the stage's arguments.
    view.step(&args.stage, family.as_deref(), "configuring");
    let step = Instant::now();
    let platform = args.backend.platform.as_deref().and_then(Platform::parse).unwrap_or(Platform::Linux);
    let options = ConfigureOptions {
        amdgpu_families: families.join(";"),
        platform: Some(platform),
        ..ConfigureOptions::default()
    };
    // CMake wants `B:/build`, not `B:\build`, on Windows.
    let mut configure: Vec<String> = vec![
        "-B".into(),
        cmake_path(&args.build_dir.display().to_string(), platform),
        "-S".into(),
        cmake_path(&args.source_dir.display().to_string(), platform),
        "-G".into(),
        "Ninja".into(),
    ];
    configure.extend(
        cmake_args(&topology, &args.stage, &options)?.into_iter().filter(|a| !a.starts_with('#') && !a.is_empty()),
    );
    configure.extend(args.extra.iter().cloned());
    command("cmake", &configure, "cmake configure", log.as_deref()).await?;
    steps.insert("configure", step.elapsed().as_secs_f64());

    // 3. Build the stage and lay out its artifacts.
    view.step(&args.stage, family.as_deref(), "building");
    let step = Instant::now();
    let artifacts_dir = args.build_dir.join("artifacts");
    if artifacts_dir.exists() {
        std::fs::remove_dir_all(&artifacts_dir).with_context(|| format!("clearing {}", artifacts_dir.display()))?;
    }
    let build: Vec<String> = vec![
        "--build".into(),
        args.build_dir.display().to_string(),
        "--target".into(),
        format!("stage-{}", args.stage),
        "therock-artifacts".into(),
    ];
    command("cmake", &build, "cmake --build", log.as_deref()).await?;
    steps.insert("build", step.elapsed().as_secs_f64());

    // 4. Push what the stage produced.
    view.step(&args.stage, family.as_deref(), "pushing");
    let step = Instant::now();
    let push = PushArgs {
        topology: args.backend.topology.clone(),
        backend: args.backend.clone(),
        stage: args.stage.clone(),
        build_dir: args.build_dir.clone(),
        compression_type: "zstd".into(),
        compression_level: None,
        compress_concurrency: 2,
        upload_concurrency: 10,
        json: false,
        quiet: view.bar.is_some(),
    };
    let (_, pushed, failures) = push_stage(&push).await?;
    if !failures.is_empty() {
        bail!("pushing {}'s artifacts:\n  {}", args.stage, failures.join("\n  "));
    }
    steps.insert("push", step.elapsed().as_secs_f64());
    let outputs: Vec<String> = pushed.iter().map(|m| m.file.clone()).collect();
    if outputs.is_empty() {
        bail!("stage {} produced no artifacts in {}", args.stage, artifacts_dir.display());
    }
    let stamp = Stamp { inputs, outputs: outputs.clone() };
    std::fs::write(&stamp_path, serde_json::to_vec_pretty(&stamp)?)?;
    if view.bar.is_none() {
        for (name, seconds) in &steps {
            tracing::info!(stage = %args.stage, family = ?family, step = name, seconds, "step done");
        }
    }
    Ok(StageReport {
        stage: args.stage.clone(),
        family,
        status: "built",
        seconds: started.elapsed().as_secs_f64(),
        steps,
        artifacts: outputs,
    })
}

pub(crate) async fn stage_build(args: BuildArgs) -> anyhow::Result<()> {
    let report = build_stage(&args, false, &View::default()).await?;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &report)?;
    writeln!(out)?;
    Ok(())
}

pub(crate) async fn run(args: PipelineArgs) -> anyhow::Result<()> {
    let PipelineCommand::Run(args) = args.command;
    let topology = load_topology(&args.topology)?;
    let families = split_list(Some(&args.families));
    if families.is_empty() {
        return Err(super::UsageError::new("--families names no GPU family").into());
    }
    family_table(&args.source_dir)?.check(&families)?;
    // The live view: one line per running build, when stderr is a terminal.
    let multi = std::io::stderr().is_terminal().then(indicatif::MultiProgress::new);
    let style = indicatif::ProgressStyle::with_template("{spinner} {prefix:<28} {elapsed:>4} {wide_msg}")
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner());
    let mut backend = args.backend.clone();
    backend.topology = args.topology.clone();
    if backend.local_staging_dir.is_none() && backend.store.is_none() {
        backend.local_staging_dir = Some(args.build_root.join("staging"));
    }
    let started = Instant::now();

    // One job per generic stage and per (per-arch stage, family); a job waits for the jobs of
    // the stages it fetches from (the same family's for a per-arch one), so independent
    // branches and families build side by side, at most --parallel at a time.
    let jobs: Vec<Job> = topology
        .build_jobs(&families)?
        .into_iter()
        .map(|job| Job {
            build: BuildArgs {
                backend: backend.clone(),
                amdgpu_families: job.family.clone().unwrap_or_default(),
                source_dir: args.source_dir.clone(),
                build_dir: match &job.family {
                    Some(f) => args.build_root.join(format!("{}-{f}", job.stage)),
                    None => args.build_root.join(&job.stage),
                },
                stage: job.stage,
                extra: Vec::new(),
            },
            family: job.family,
            deps: job.deps,
        })
        .collect();
    let mut state = vec![JobState::Waiting; jobs.len()];
    let mut reports: Vec<(usize, StageReport)> = Vec::new();
    let mut running = futures_util::stream::FuturesUnordered::new();
    loop {
        let mut free = args.parallel.max(1).saturating_sub(running.len());
        for i in 0..jobs.len() {
            if free == 0 {
                break;
            }
            if state[i] == JobState::Waiting && jobs[i].deps.iter().all(|d| state[*d] == JobState::Done) {
                state[i] = JobState::Running;
                free -= 1;
                let job = &jobs[i];
                let label = match &job.family {
                    Some(f) => format!("{} [{f}]", job.build.stage),
                    None => job.build.stage.clone(),
                };
                let view = View {
                    bar: multi.as_ref().map(|m| {
                        let bar = m.add(indicatif::ProgressBar::new_spinner());
                        bar.set_style(style.clone());
                        bar.set_prefix(label.clone());
                        bar.enable_steady_tick(Duration::from_millis(120));
                        bar
                    }),
                };
                if multi.is_none() {
                    eprintln_progress(&format!("{label}: started"));
                }
                let force = args.force;
                running.push(async move {
                    let result = build_stage(&job.build, !force, &view).await;
                    (i, label, view, result)
                });
            }
        }
        let Some((i, label, view, result)) = futures_util::StreamExt::next(&mut running).await else { break };
        let report = match result {
            Ok(report) => report,
            Err(e) => {
                if let Some(bar) = &view.bar {
                    bar.abandon_with_message(format!("failed: {}", e.to_string().lines().next().unwrap_or("")));
                }
                // Dropping the other running builds stops their tools (kill on drop).
                return Err(e.context(format!("stage {label}")));
            }
        };
        state[i] = JobState::Done;
        let line = format!("{} in {:.1} s: {}", report.status, report.seconds, report.artifacts.join(" "));
        match &view.bar {
            Some(bar) => bar.finish_with_message(line),
            None => eprintln_progress(&format!("{label}: {line}")),
        }
        reports.push((i, report));
    }
    if let Some(i) = state.iter().position(|s| *s != JobState::Done) {
        bail!("stage {} never became ready (a dependency cycle?)", jobs[i].build.stage);
    }
    // The summary in build order (jobs were created in it), not completion order.
    reports.sort_by_key(|(i, _)| *i);
    let reports: Vec<StageReport> = reports.into_iter().map(|(_, r)| r).collect();
    let mut out = std::io::stdout().lock();
    if args.json {
        let value = serde_json::json!({ "seconds": started.elapsed().as_secs_f64(), "stages": reports });
        serde_json::to_writer_pretty(&mut out, &value)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{:<16} {:<10} {:<7} {:>8}  artifacts", "stage", "family", "status", "seconds")?;
        for r in &reports {
            writeln!(
                out,
                "{:<16} {:<10} {:<7} {:>8.1}  {}",
                r.stage,
                r.family.as_deref().unwrap_or("-"),
                r.status,
                r.seconds,
                r.artifacts.join(" ")
            )?;
        }
        writeln!(out, "pipeline done in {:.1} s", started.elapsed().as_secs_f64())?;
    }
    Ok(())
}

struct Job {
    build: BuildArgs,
    family: Option<String>,
    /// Indices of the jobs this one fetches from.
    deps: Vec<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobState {
    Waiting,
    Running,
    Done,
}

/// A progress line on stderr (stdout carries the summary).
fn eprintln_progress(line: &str) {
    tracing::info!("{line}");
}
