//! `quarry ci matrix`: TheRock's `configure_multi_arch_ci.py` for a workflow's setup job. It
//! reads the same environment (GITHUB_EVENT_NAME, GITHUB_EVENT_PATH, BUILD_VARIANT,
//! LINUX_AMDGPU_FAMILIES, …; every one also a flag), diffs the commit for path filters, and
//! writes the same `$GITHUB_OUTPUT` variables byte for byte, or prints them as JSON.
//!
//! `quarry ci workflow`: a platform's reusable staged-build workflow, generated from
//! `BUILD_TOPOLOGY.toml` (`quarry_ci::build_workflow`), printed, written (`--output`) or compared
//! with a checked-in copy (`--check`: exit 1 when it is out of date).

use std::path::{Path, PathBuf};

use anyhow::Context;
use quarry_ci::{FirstPicker, GitContext, Inputs, Matrix, Picker, SeededPicker};
use quarry_stage::{checkout, load_topology};

use super::UsageError;
use super::args::JsonArg;
use super::args::PlatformArg;

#[derive(Debug, clap::Args)]
pub(crate) struct CiArgs {
    #[command(subcommand)]
    command: CiCommand,
}

#[derive(Debug, clap::Subcommand)]
enum CiCommand {
    /// Decide the families, variants and jobs of a multi-arch CI run.
    Matrix(Box<MatrixArgs>),
    /// Generate a platform's reusable staged-build workflow from the topology.
    Workflow(WorkflowArgs),
}

#[derive(Debug, clap::Args)]
struct WorkflowArgs {
    /// The platform whose stages the workflow builds.
    #[arg(long, value_enum)]
    platform: PlatformArg,
    /// The topology file.
    #[arg(long, default_value = "BUILD_TOPOLOGY.toml")]
    topology: PathBuf,
    /// Write the workflow to this file instead of stdout.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Write nothing; exit 1 when this file differs from the workflow the topology gives.
    #[arg(long, conflicts_with = "output")]
    check: Option<PathBuf>,
}

/// `--runner-pick`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RunnerPick {
    Seeded,
    First,
}

#[derive(Debug, clap::Args)]
struct MatrixArgs {
    /// pull_request, push, schedule or workflow_dispatch.
    #[arg(long, env = "GITHUB_EVENT_NAME")]
    event_name: String,
    /// The event payload (PR labels, the push's `before`).
    #[arg(long, env = "GITHUB_EVENT_PATH")]
    event_path: Option<PathBuf>,
    /// The workflow run id (seeds weighted runner picks).
    #[arg(long, env = "GITHUB_RUN_ID", default_value = "")]
    run_id: String,
    /// The branch or tag the workflow runs on.
    #[arg(long, env = "GITHUB_REF_NAME", default_value = "")]
    ref_name: String,
    /// release, asan, host-asan, tsan.
    #[arg(long, env = "BUILD_VARIANT", default_value = "release")]
    build_variant: String,
    /// ci, dev, dev-bkc, nightly, nightly-bkc, prerelease.
    #[arg(long, env = "RELEASE_TYPE", default_value = "ci")]
    release_type: String,
    /// "false" turns it off.
    #[arg(long, env = "BUILD_PYTHON_PACKAGES", default_value = "true")]
    build_python_packages: String,
    /// "false" turns it off.
    #[arg(long, env = "BUILD_PYTORCH", default_value = "true")]
    build_pytorch: String,
    /// Anything but "false" turns it on.
    #[arg(long, env = "BUILD_JAX", default_value = "false")]
    build_jax: String,
    /// The Python version of the PyTorch and JAX wheel jobs (default: the matrix data's).
    #[arg(long, env = "PYTHON_VERSION", default_value = "")]
    python_version: String,
    /// Matrix keys, comma separated, or `all` / `none` (workflow_dispatch and schedule).
    #[arg(long, env = "LINUX_AMDGPU_FAMILIES", default_value = "")]
    linux_amdgpu_families: String,
    /// Like --linux-amdgpu-families, for Windows.
    #[arg(long, env = "WINDOWS_AMDGPU_FAMILIES", default_value = "")]
    windows_amdgpu_families: String,
    /// Test labels for Linux (comma separated).
    #[arg(long, env = "LINUX_TEST_LABELS", default_value = "")]
    linux_test_labels: String,
    /// Test labels for Windows (comma separated).
    #[arg(long, env = "WINDOWS_TEST_LABELS", default_value = "")]
    windows_test_labels: String,
    /// Stages to take from a baseline run instead of building (comma list or `all`).
    #[arg(long, env = "PREBUILT_STAGES", default_value = "")]
    prebuilt_stages: String,
    /// The run whose artifacts --prebuilt-stages takes.
    #[arg(long, env = "BASELINE_RUN_ID", default_value = "")]
    baseline_run_id: String,
    /// `owner/repo` of the baseline run.
    #[arg(long, env = "THEROCK_REPOSITORY", default_value = "")]
    baseline_repository: String,
    /// JSON `{"repository": "owner/name", …}` when another repository calls the workflow.
    #[arg(long, env = "EXTERNAL_REPO", default_value = "")]
    external_repo: String,
    /// The matrix data (families, variants, runners); default: the one built in.
    #[arg(long)]
    matrix_file: Option<PathBuf>,
    /// The topology, for `--prebuilt-stages all`.
    #[arg(long, default_value = "BUILD_TOPOLOGY.toml")]
    topology: PathBuf,
    /// The changed files, one per line, instead of asking git (`-` reads stdin).
    #[arg(long)]
    changed_files: Option<PathBuf>,
    /// Submodule paths, one per line, instead of `git submodule status`.
    #[arg(long)]
    submodule_paths: Option<PathBuf>,
    /// The git checkout to diff (default: the current directory).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// How a runner is chosen from a weighted pool: `seeded` (by weight, the same for a run id)
    /// or `first` (always the first label).
    #[arg(long, value_enum, default_value_t = RunnerPick::Seeded)]
    runner_pick: RunnerPick,
    // Also printed when GITHUB_OUTPUT is unset.
    #[command(flatten)]
    json: JsonArg,
}

pub(crate) async fn run(args: CiArgs) -> anyhow::Result<()> {
    match args.command {
        CiCommand::Matrix(m) => matrix(*m),
        CiCommand::Workflow(w) => workflow(w),
    }
}

fn workflow(args: WorkflowArgs) -> anyhow::Result<()> {
    use std::io::Write as _;
    let topology = load_topology(&args.topology)?;
    let problems = topology.validate();
    if !problems.is_empty() {
        return Err(UsageError::new(format!("{}: {}", args.topology.display(), problems.join("; "))).into());
    }
    let platform = args.platform.into();
    let text = quarry_ci::build_workflow(&topology, platform)?;
    if let Some(path) = &args.check {
        let current = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        if current != text {
            anyhow::bail!(
                "{} is out of date with {}: regenerate it with `quarry ci workflow --platform {} --topology {} --output {}`",
                path.display(),
                args.topology.display(),
                platform.as_str(),
                args.topology.display(),
                path.display()
            );
        }
        return Ok(());
    }
    match &args.output {
        Some(path) => std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?,
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(())
}

impl MatrixArgs {
    /// A workflow variable as the flags resolve it (the flag, else the variable, else the
    /// default), for [`Inputs::from_lookup`].
    fn lookup(&self, name: &str) -> Option<String> {
        let value = match name {
            "GITHUB_EVENT_NAME" => &self.event_name,
            "GITHUB_RUN_ID" => &self.run_id,
            "GITHUB_REF_NAME" => &self.ref_name,
            "BUILD_VARIANT" => &self.build_variant,
            "RELEASE_TYPE" => &self.release_type,
            "BUILD_PYTHON_PACKAGES" => &self.build_python_packages,
            "BUILD_PYTORCH" => &self.build_pytorch,
            "BUILD_JAX" => &self.build_jax,
            "PYTHON_VERSION" => &self.python_version,
            "LINUX_AMDGPU_FAMILIES" => &self.linux_amdgpu_families,
            "WINDOWS_AMDGPU_FAMILIES" => &self.windows_amdgpu_families,
            "LINUX_TEST_LABELS" => &self.linux_test_labels,
            "WINDOWS_TEST_LABELS" => &self.windows_test_labels,
            "PREBUILT_STAGES" => &self.prebuilt_stages,
            "BASELINE_RUN_ID" => &self.baseline_run_id,
            "THEROCK_REPOSITORY" => &self.baseline_repository,
            "EXTERNAL_REPO" => &self.external_repo,
            _ => return None,
        };
        Some(value.clone())
    }
}

fn read_lines(path: &Path) -> anyhow::Result<Vec<String>> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_owned).collect())
}

/// What changed: known without the checkout, else the given lists or git.
fn git_context(args: &MatrixArgs, inputs: &Inputs) -> anyhow::Result<GitContext> {
    if let Some(known) = GitContext::without_checkout(inputs)? {
        return Ok(known);
    }
    let changed_files = match (&args.changed_files, &inputs.base_ref) {
        (Some(path), _) => read_lines(path)?,
        (None, Some(base)) => checkout::changed_files(&args.repo, base)?,
        (None, None) => return Ok(GitContext::default()),
    };
    let submodule_paths = match &args.submodule_paths {
        Some(path) => read_lines(path)?,
        None => checkout::submodule_paths(&args.repo)?,
    };
    Ok(GitContext { changed_files: Some(changed_files), submodule_paths: Some(submodule_paths) })
}

fn matrix(args: MatrixArgs) -> anyhow::Result<()> {
    let read = |path: &Path| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
    let data = match &args.matrix_file {
        Some(path) => Matrix::parse(&read(path)?).map_err(|e| UsageError::new(format!("{}: {e}", path.display())))?,
        None => Matrix::builtin(),
    };
    let event = match args.event_path.as_deref().filter(|path| path.exists()) {
        Some(path) => serde_json::from_str(&read(path)?)
            .map_err(|e| UsageError::new(format!("{}: not JSON: {e}", path.display())))?,
        None => serde_json::Value::Null,
    };
    let inputs = Inputs::from_lookup(|name| args.lookup(name), &event)?;
    let stages = if inputs.prebuilds_all_stages() {
        load_topology(&args.topology).context("--prebuilt-stages all needs the topology")?.stage_file_order
    } else {
        Vec::new()
    };
    let git = git_context(&args, &inputs)?;
    let mut seeded = SeededPicker::new(&inputs.run_id);
    let mut first = FirstPicker;
    let picker: &mut dyn Picker = if args.runner_pick == RunnerPick::First { &mut first } else { &mut seeded };
    let outputs = quarry_ci::configure(&data, &inputs, &git, &stages, picker)?;
    for note in &outputs.notes {
        tracing::info!("{note}");
    }
    let lines: String = outputs.github_output().into_iter().map(|(key, value)| format!("{key}={value}\n")).collect();
    let written = super::append_to_github_file("GITHUB_OUTPUT", &lines)?;
    super::append_to_github_file("GITHUB_STEP_SUMMARY", &outputs.summary())?;
    if args.json.json || !written {
        super::print_json(&outputs.to_json())?;
    }
    Ok(())
}
