//! `quarry ci matrix`: TheRock's `configure_multi_arch_ci.py` for a workflow's setup job. It
//! reads the same environment (GITHUB_EVENT_NAME, GITHUB_EVENT_PATH, BUILD_VARIANT,
//! LINUX_AMDGPU_FAMILIES, …; every one also a flag), diffs the commit for path filters, and
//! writes the same `$GITHUB_OUTPUT` variables byte for byte, or prints them as JSON.

use std::path::{Path, PathBuf};

use anyhow::Context;
use quarry_ci::{FirstPicker, GitContext, Inputs, Matrix, Picker, SeededPicker, comma_list};
use quarry_stage::load_topology;

use super::UsageError;

#[derive(Debug, clap::Args)]
pub(crate) struct CiArgs {
    #[command(subcommand)]
    command: CiCommand,
}

#[derive(Debug, clap::Subcommand)]
enum CiCommand {
    /// Decide the families, variants and jobs of a multi-arch CI run.
    Matrix(MatrixArgs),
}

const NULL_SHA: &str = "0000000000000000000000000000000000000000";

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
    #[arg(long, env = "GITHUB_RUN_ID", default_value = "")]
    run_id: String,
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
    #[arg(long, env = "PYTHON_VERSION", default_value = "")]
    python_version: String,
    /// Matrix keys, comma separated, or `all` / `none` (workflow_dispatch and schedule).
    #[arg(long, env = "LINUX_AMDGPU_FAMILIES", default_value = "")]
    linux_amdgpu_families: String,
    #[arg(long, env = "WINDOWS_AMDGPU_FAMILIES", default_value = "")]
    windows_amdgpu_families: String,
    #[arg(long, env = "LINUX_TEST_LABELS", default_value = "")]
    linux_test_labels: String,
    #[arg(long, env = "WINDOWS_TEST_LABELS", default_value = "")]
    windows_test_labels: String,
    /// Stages to take from a baseline run instead of building (comma list or `all`).
    #[arg(long, env = "PREBUILT_STAGES", default_value = "")]
    prebuilt_stages: String,
    #[arg(long, env = "BASELINE_RUN_ID", default_value = "")]
    baseline_run_id: String,
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
    /// Print the outputs as one JSON object on stdout (also done when GITHUB_OUTPUT is unset).
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(args: CiArgs) -> anyhow::Result<()> {
    match args.command {
        CiCommand::Matrix(m) => matrix(m),
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

/// The inputs as `configure_multi_arch_ci.py` reads them, plus the diff base.
fn inputs(args: &MatrixArgs) -> anyhow::Result<Inputs> {
    let event: serde_json::Value = match &args.event_path {
        Some(path) if path.exists() => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            serde_json::from_str(&text).map_err(|e| UsageError::new(format!("{}: not JSON: {e}", path.display())))?
        }
        _ => serde_json::Value::Null,
    };
    let mut pr_labels = Vec::new();
    let mut base_ref = Some("HEAD^1".to_owned());
    match args.event_name.as_str() {
        "pull_request" => {
            let labels = event.pointer("/pull_request/labels").and_then(|l| l.as_array()).cloned().unwrap_or_default();
            pr_labels = labels.iter().filter_map(|l| l["name"].as_str()).map(str::to_lowercase).collect();
            base_ref = Some("HEAD^".into());
        }
        "push" => match event["before"].as_str() {
            Some(NULL_SHA) => base_ref = None,
            Some(before) if !before.is_empty() => base_ref = Some(before.to_owned()),
            _ => {}
        },
        _ => {}
    }
    let pr_test_labels: Vec<String> = pr_labels.iter().filter(|l| l.starts_with("test:")).cloned().collect();
    let with_pr = |raw: &str| [comma_list(raw), pr_test_labels.clone()].concat();
    Ok(Inputs {
        run_id: args.run_id.clone(),
        event_name: args.event_name.clone(),
        commit_ref: args.ref_name.clone(),
        base_ref,
        build_variant: args.build_variant.clone(),
        release_type: args.release_type.clone(),
        build_python_packages: !args.build_python_packages.eq_ignore_ascii_case("false"),
        build_pytorch: !args.build_pytorch.eq_ignore_ascii_case("false"),
        build_jax: !args.build_jax.eq_ignore_ascii_case("false"),
        python_versions: if args.python_version.trim().is_empty() {
            Vec::new()
        } else {
            vec![args.python_version.trim().to_owned()]
        },
        pr_labels,
        linux_amdgpu_families: comma_list(&args.linux_amdgpu_families),
        windows_amdgpu_families: comma_list(&args.windows_amdgpu_families),
        linux_test_labels: with_pr(&args.linux_test_labels),
        windows_test_labels: with_pr(&args.windows_test_labels),
        prebuilt_stages: args.prebuilt_stages.clone(),
        baseline_run_id: args.baseline_run_id.clone(),
        baseline_repository: args.baseline_repository.clone(),
        external_repo: args.external_repo.clone(),
    })
}

/// What changed: the external repository's name, the given lists, or `git diff` against the
/// base (pull_request and push only).
fn git_context(args: &MatrixArgs, inputs: &Inputs) -> anyhow::Result<GitContext> {
    if !inputs.external_repo.is_empty() {
        let repo: serde_json::Value = serde_json::from_str(&inputs.external_repo)
            .map_err(|_| UsageError::new(format!("EXTERNAL_REPO contains invalid JSON: {:?}", inputs.external_repo)))?;
        let Some(full) = repo["repository"].as_str().filter(|r| !r.is_empty()) else {
            return Err(UsageError::new(format!(
                "EXTERNAL_REPO missing 'repository' field: {:?}",
                inputs.external_repo
            ))
            .into());
        };
        return Ok(GitContext::external(full.rsplit('/').next().unwrap_or(full)));
    }
    if !matches!(inputs.event_name.as_str(), "pull_request" | "push") {
        return Ok(GitContext::default());
    }
    let changed_files = match (&args.changed_files, &inputs.base_ref) {
        (Some(path), _) => Some(read_lines(path)?),
        (None, Some(base)) => {
            Some(super::git(&args.repo, &["diff", "--name-only", base])?.lines().map(str::to_owned).collect())
        }
        (None, None) => None,
    };
    if changed_files.is_none() {
        return Ok(GitContext::default());
    }
    let submodule_paths = match &args.submodule_paths {
        Some(path) => read_lines(path)?,
        None => super::git(&args.repo, &["submodule", "status"])?
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(str::to_owned)
            .collect(),
    };
    Ok(GitContext { changed_files, submodule_paths: Some(submodule_paths) })
}

fn matrix(args: MatrixArgs) -> anyhow::Result<()> {
    let data = match &args.matrix_file {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Matrix::parse(&text).map_err(|e| UsageError::new(format!("{}: {e}", path.display())))?
        }
        None => Matrix::builtin(),
    };
    let inputs = inputs(&args)?;
    let stages = if comma_list(&inputs.prebuilt_stages).iter().any(|s| s == "all") {
        load_topology(&args.topology).context("--prebuilt-stages all needs the topology")?.stage_file_order
    } else {
        Vec::new()
    };
    let git = git_context(&args, &inputs)?;
    let mut seeded = SeededPicker::new(&inputs.run_id);
    let mut first = FirstPicker;
    let picker: &mut dyn Picker = if args.runner_pick == RunnerPick::First { &mut first } else { &mut seeded };
    let outputs =
        quarry_ci::configure(&data, &inputs, &git, &stages, picker).map_err(|e| UsageError::new(e.to_string()))?;
    for note in &outputs.notes {
        tracing::info!("{note}");
    }
    let lines: String = outputs.github_output().into_iter().map(|(key, value)| format!("{key}={value}\n")).collect();
    let written = super::append_to_github_file("GITHUB_OUTPUT", &lines)?;
    super::append_to_github_file("GITHUB_STEP_SUMMARY", &outputs.summary())?;
    if args.json || !written {
        super::artifacts::print_json(&outputs.to_json())?;
    }
    Ok(())
}
