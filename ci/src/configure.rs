//! The configure pipeline: skip check → target selection → job decisions → build configs,
//! following TheRock's `configure_multi_arch_ci.py` rule for rule.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::json::{py_json, py_repr_list, py_repr_str};
use crate::matrix::{Matrix, PlatformInfo, RunnerLabel, Trigger};
use crate::{CiError, Picker};

/// Everything the workflow run says, already parsed: lists lowercased, PR `test:*` labels
/// appended to both platforms' test labels ([`Inputs::from_lookup`] builds them from the workflow
/// environment).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inputs {
    pub run_id: String,
    /// pull_request, push, schedule or workflow_dispatch.
    pub event_name: String,
    pub commit_ref: String,
    /// The git ref the changed files are diffed against (None: no path filters).
    pub base_ref: Option<String>,
    pub build_variant: String,
    pub release_type: String,
    pub build_python_packages: bool,
    pub build_pytorch: bool,
    pub build_jax: bool,
    pub python_versions: Vec<String>,
    pub pr_labels: Vec<String>,
    pub linux_amdgpu_families: Vec<String>,
    pub windows_amdgpu_families: Vec<String>,
    pub linux_test_labels: Vec<String>,
    pub windows_test_labels: Vec<String>,
    /// Comma list of stage names, or `all`.
    pub prebuilt_stages: String,
    pub baseline_run_id: String,
    pub baseline_repository: String,
    /// JSON `{"repository": "owner/name", ...}` when another repository calls the workflow.
    pub external_repo: String,
}

impl Inputs {
    fn is(&self, event: &str) -> bool {
        self.event_name == event
    }

    fn nightly_like(&self) -> bool {
        self.is("schedule") || self.is("workflow_dispatch")
    }

    fn has_label(&self, label: &str) -> bool {
        self.pr_labels.iter().any(|l| l == label)
    }

    /// `PREBUILT_STAGES` names `all`: [`configure`] then needs the topology's stage order.
    pub fn prebuilds_all_stages(&self) -> bool {
        comma_list(&self.prebuilt_stages).iter().any(|s| s == "all")
    }
}

/// What changed in this commit: None when unknown (no diff was computed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitContext {
    pub changed_files: Option<Vec<String>>,
    pub submodule_paths: Option<Vec<String>>,
}

impl GitContext {
    /// An external repository's build: its name stands for both a changed file and a
    /// submodule, so submodule-only tests run and stage reuse sees the change.
    pub fn external(repo_name: &str) -> Self {
        Self { changed_files: Some(vec![repo_name.to_owned()]), submodule_paths: Some(vec![repo_name.to_owned()]) }
    }

    fn changed_submodules(&self) -> Option<BTreeSet<&str>> {
        let (files, subs) = (self.changed_files.as_ref()?, self.submodule_paths.as_ref()?);
        let files: BTreeSet<&str> = files.iter().map(String::as_str).collect();
        Some(subs.iter().map(String::as_str).filter(|s| files.contains(s)).collect())
    }
}

/// How deep the tests go, least to most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TestType {
    Quick,
    Standard,
    Comprehensive,
    Full,
}

impl TestType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Quick => "quick",
            Self::Standard => "standard",
            Self::Comprehensive => "comprehensive",
            Self::Full => "full",
        }
    }
}

/// One family's entry in `per_family_info` (keys as the workflows read them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FamilyInfo {
    pub amdgpu_family: String,
    pub amdgpu_targets: String,
    #[serde(rename = "test-runs-on")]
    pub test_runs_on: String,
    pub sanity_check_only_for_family: bool,
    #[serde(rename = "test-runs-on-labels", skip_serializing_if = "Option::is_none")]
    pub test_runs_on_labels: Option<Vec<RunnerLabel>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_labels_for_family: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PythonTestRow {
    pub amdgpu_family: String,
    pub test_runs_on: String,
    pub python_version: String,
    pub container_image_name: String,
    pub container_image_url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PytorchRow {
    pub python_version: String,
    pub pytorch_git_ref: String,
    pub amdgpu_families: String,
    pub test_amdgpu_families: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JaxRow {
    pub python_version: String,
    pub jax_ref: String,
    pub jax_label: String,
    pub jax_repository: String,
    pub gfx_arch: String,
}

/// One platform's build configuration: field order is the JSON key order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BuildConfig {
    pub per_family_info: Vec<FamilyInfo>,
    /// `;` separated.
    pub dist_amdgpu_families: String,
    pub artifact_group: String,
    pub build_variant_label: String,
    pub build_variant_suffix: String,
    pub build_variant_cmake_preset: String,
    pub build_native_linux: bool,
    pub build_python_packages: bool,
    pub build_pytorch: bool,
    pub build_jax: bool,
    pub test_python_packages_matrix: Vec<PythonTestRow>,
    pub pytorch_build_matrix: Vec<PytorchRow>,
    pub jax_build_matrix: Vec<JaxRow>,
    pub build_runs_on: String,
    /// Comma separated.
    pub prebuilt_stages: String,
    pub baseline_run_id: String,
    pub baseline_repository: String,
    pub linux_amdgpu_families: String,
    pub windows_amdgpu_families: String,
}

/// The decisions, and the lines that explain them.
#[derive(Debug, Clone, PartialEq)]
pub struct Outputs {
    pub enabled: bool,
    pub linux: Option<BuildConfig>,
    pub windows: Option<BuildConfig>,
    pub test_type: TestType,
    pub test_type_reason: String,
    pub linux_test_labels: Vec<String>,
    pub windows_test_labels: Vec<String>,
    pub notes: Vec<String>,
}

impl Outputs {
    fn skipped(notes: Vec<String>) -> Self {
        Self {
            enabled: false,
            linux: None,
            windows: None,
            test_type: TestType::Quick,
            test_type_reason: "CI skipped".into(),
            linux_test_labels: Vec::new(),
            windows_test_labels: Vec::new(),
            notes,
        }
    }

    /// The `$GITHUB_OUTPUT` variables, in order, with the exact values TheRock's tool writes.
    pub fn github_output(&self) -> Vec<(&'static str, String)> {
        let config = |c: &Option<BuildConfig>| c.as_ref().map(py_json).unwrap_or_default();
        vec![
            ("enable_build_jobs", if self.enabled { "true" } else { "false" }.to_owned()),
            ("linux_build_config", config(&self.linux)),
            ("windows_build_config", config(&self.windows)),
            ("test_type", if self.enabled { self.test_type.as_str().to_owned() } else { String::new() }),
            ("linux_test_labels", py_repr_list(&self.linux_test_labels)),
            ("windows_test_labels", py_repr_list(&self.windows_test_labels)),
        ]
    }

    /// The same as one JSON object, the build configs as objects (`null` when skipped).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "enable_build_jobs": self.enabled,
            "linux_build_config": self.linux,
            "windows_build_config": self.windows,
            "test_type": if self.enabled { self.test_type.as_str() } else { "" },
            "test_type_reason": self.test_type_reason,
            "linux_test_labels": self.linux_test_labels,
            "windows_test_labels": self.windows_test_labels,
        })
    }

    /// A Markdown summary for `$GITHUB_STEP_SUMMARY`.
    pub fn summary(&self) -> String {
        let mut out = String::from("## Multi-arch CI configuration\n\n");
        if !self.enabled {
            out.push_str("CI is skipped.\n");
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
            return out;
        }
        out.push_str(&format!("Test type: **{}** ({})\n\n", self.test_type.as_str(), self.test_type_reason));
        out.push_str("| platform | variant | families | tested on |\n| --- | --- | --- | --- |\n");
        for (name, config) in [("linux", &self.linux), ("windows", &self.windows)] {
            match config {
                None => out.push_str(&format!("| {name} | — | skipped | |\n")),
                Some(c) => {
                    let tested: Vec<String> = c
                        .per_family_info
                        .iter()
                        .filter(|f| !f.test_runs_on.is_empty())
                        .map(|f| format!("{} (`{}`)", f.amdgpu_family, f.test_runs_on))
                        .collect();
                    out.push_str(&format!(
                        "| {name} | {} | {} | {} |\n",
                        c.build_variant_label,
                        c.dist_amdgpu_families.replace(';', ", "),
                        tested.join(", ")
                    ));
                }
            }
        }
        out
    }
}

/// True when the changed files need a CI run: a CI workflow file changed, or a file that no
/// skippable pattern matches (an empty list needs none).
pub fn is_ci_run_required(matrix: &Matrix, paths: &[String]) -> bool {
    let (workflows, other): (Vec<&String>, Vec<&String>) =
        paths.iter().partition(|p| p.starts_with(".github/workflows"));
    let related = workflows.iter().any(|p| {
        let name = p.rsplit('/').next().unwrap_or(p);
        matrix.path_filters.ci_workflows.iter().any(|w| w == name)
    });
    related || other.iter().any(|p| !matrix.is_skippable(p))
}

/// Configure a run. `stages` is the topology's build stage order (what `prebuilt_stages=all`
/// means); `picker` chooses among weighted runner pools.
pub fn configure(
    matrix: &Matrix,
    inputs: &Inputs,
    git: &GitContext,
    stages: &[String],
    picker: &mut dyn Picker,
) -> Result<Outputs, CiError> {
    let mut notes = Vec::new();
    if let Some(reason) = skip_reason(matrix, inputs, git) {
        notes.push(reason);
        return Ok(Outputs::skipped(notes));
    }
    let (linux, windows) = select_targets(matrix, inputs, &mut notes)?;
    let (test_type, test_type_reason) = test_type(inputs, git)?;

    let mut prebuilt: Vec<String> = Vec::new();
    let requested = if inputs.prebuilds_all_stages() { stages.to_vec() } else { comma_list(&inputs.prebuilt_stages) };
    for stage in requested {
        if !prebuilt.contains(&stage) {
            prebuilt.push(stage);
        }
    }
    let jobs = Jobs { test_type, prebuilt, build_pytorch: inputs.build_pytorch, build_jax: inputs.build_jax };

    let mut variant = inputs.build_variant.clone();
    if variant == "asan" {
        if inputs.has_label("ci:asan") {
            notes.push("full asan variant (ci:asan label)".into());
        } else if inputs.has_label("ci:host-asan") {
            variant = "host-asan".into();
            notes.push("host-asan variant (ci:host-asan label)".into());
        } else if inputs.is("push") || inputs.is("pull_request") {
            variant = "host-asan".into();
            notes.push("host-asan variant (push/pull_request default)".into());
        }
    }

    let mut configs = [None, None];
    for (slot, (platform, families)) in configs.iter_mut().zip([("linux", &linux), ("windows", &windows)]) {
        let Some(variant_config) = matrix.build_variants.get(platform).and_then(|v| v.get(&variant)) else {
            notes.push(format!("{platform} has no build variant {variant}, skipped"));
            continue;
        };
        let run = Run { matrix, inputs, git, jobs: &jobs };
        *slot = platform_config(&run, platform, families, variant_config, picker, &mut notes)?;
    }
    let [mut linux_config, mut windows_config] = configs;
    let linux_dist = linux_config.as_ref().map(|c| c.dist_amdgpu_families.clone()).unwrap_or_default();
    let windows_dist = windows_config.as_ref().map(|c| c.dist_amdgpu_families.clone()).unwrap_or_default();
    for config in [&mut linux_config, &mut windows_config].into_iter().flatten() {
        config.linux_amdgpu_families = linux_dist.clone();
        config.windows_amdgpu_families = windows_dist.clone();
    }
    Ok(Outputs {
        enabled: true,
        linux: linux_config,
        windows: windows_config,
        test_type,
        test_type_reason,
        linux_test_labels: inputs.linux_test_labels.clone(),
        windows_test_labels: inputs.windows_test_labels.clone(),
        notes,
    })
}

struct Jobs {
    test_type: TestType,
    prebuilt: Vec<String>,
    build_pytorch: bool,
    build_jax: bool,
}

/// What every per-platform step reads.
struct Run<'a> {
    matrix: &'a Matrix,
    inputs: &'a Inputs,
    git: &'a GitContext,
    jobs: &'a Jobs,
}

/// A workflow input's comma list: trimmed, lowercased, empty items dropped (`"gfx94X, "` →
/// `["gfx94x"]`).
pub fn comma_list(raw: &str) -> Vec<String> {
    raw.split(',').map(|s| s.trim().to_lowercase()).filter(|s| !s.is_empty()).collect()
}

fn skip_reason(matrix: &Matrix, inputs: &Inputs, git: &GitContext) -> Option<String> {
    if inputs.has_label("ci:skip") {
        return Some("skipped: 'ci:skip' PR label".into());
    }
    let asan_label = inputs.has_label("ci:asan") || inputs.has_label("ci:host-asan");
    if inputs.is("pull_request") && inputs.build_variant == "asan" && !asan_label {
        return Some("skipped: ASAN PR without an enabling label (add 'ci:asan' or 'ci:host-asan')".into());
    }
    if !inputs.external_repo.is_empty() {
        return None;
    }
    match &git.changed_files {
        Some(files) if !is_ci_run_required(matrix, files) => Some("skipped: no CI-relevant files changed".into()),
        _ => None,
    }
}

fn select_targets(
    matrix: &Matrix,
    inputs: &Inputs,
    notes: &mut Vec<String>,
) -> Result<(Vec<String>, Vec<String>), CiError> {
    let keys = |triggers: &[Trigger]| -> Vec<String> { matrix.families_for(triggers).map(|f| f.key.clone()).collect() };
    let all = keys(&[Trigger::Presubmit, Trigger::Postsubmit, Trigger::Nightly]);
    let explicit = |names: &[String], empty_means_all: bool| -> Vec<String> {
        match names {
            [one] if one == "all" => all.clone(),
            [] if empty_means_all => all.clone(),
            [one] if one == "none" => Vec::new(),
            other => other.to_vec(),
        }
    };
    let (mut linux, mut windows) = match inputs.event_name.as_str() {
        "workflow_dispatch" => {
            (explicit(&inputs.linux_amdgpu_families, false), explicit(&inputs.windows_amdgpu_families, false))
        }
        "pull_request" => {
            let d = keys(&[Trigger::Presubmit]);
            (d.clone(), d)
        }
        "push" => {
            let d = keys(&[Trigger::Presubmit, Trigger::Postsubmit]);
            (d.clone(), d)
        }
        "schedule" => (explicit(&inputs.linux_amdgpu_families, true), explicit(&inputs.windows_amdgpu_families, true)),
        other => return Err(CiError::UnsupportedEvent(py_repr_str(other))),
    };
    if inputs.is("pull_request") {
        for label in &inputs.pr_labels {
            if label == "ci:run-all-archs" {
                linux = all.clone();
                windows = all.clone();
                notes.push("label 'ci:run-all-archs': all families".into());
                break;
            }
            if label.starts_with("gfx") {
                let target = label.split('-').next().unwrap_or(label).to_owned();
                notes.push(format!("label '{label}': adds {target}"));
                linux.push(target.clone());
                windows.push(target);
            }
        }
    }
    let mut result = Vec::new();
    for (platform, names) in [("linux", linux), ("windows", windows)] {
        let mut unique: Vec<String> = Vec::new();
        for n in names {
            if !unique.contains(&n) {
                unique.push(n);
            }
        }
        let unknown: Vec<&String> = unique.iter().filter(|n| matrix.family(n).is_none()).collect();
        if !unknown.is_empty() {
            let mut known: Vec<&str> = all.iter().map(String::as_str).collect();
            known.sort_unstable();
            return Err(CiError::UnknownFamilies { unknown: py_repr_list(&unknown), known: py_repr_list(&known) });
        }
        let available: Vec<String> =
            unique.into_iter().filter(|n| matrix.family(n).is_some_and(|f| f.platform(platform).is_some())).collect();
        result.push(available);
    }
    let windows = result.pop().unwrap_or_default();
    let linux = result.pop().unwrap_or_default();
    Ok((linux, windows))
}

fn test_type(inputs: &Inputs, git: &GitContext) -> Result<(TestType, String), CiError> {
    let all_labels = inputs.pr_labels.iter().chain(&inputs.linux_test_labels).chain(&inputs.windows_test_labels);
    for label in all_labels {
        let Some(rest) = label.strip_prefix("test_filter:") else { continue };
        let value = rest.split(':').next().unwrap_or("");
        let kind = match value {
            "quick" => TestType::Quick,
            "standard" => TestType::Standard,
            "comprehensive" => TestType::Comprehensive,
            "full" => TestType::Full,
            other => return Err(CiError::UnknownTestFilter(py_repr_str(other))),
        };
        return Ok((kind, format!("test_filter label: {label}")));
    }
    let test_labels =
        inputs.linux_test_labels.iter().chain(&inputs.windows_test_labels).any(|l| !l.starts_with("test_filter:"))
            || inputs.pr_labels.iter().any(|l| l.starts_with("test:"));
    if test_labels {
        return Ok((TestType::Full, "test labels specified".into()));
    }
    match inputs.release_type.as_str() {
        "nightly" | "nightly-bkc" => return Ok((TestType::Comprehensive, "release build (nightly)".into())),
        "prerelease" => return Ok((TestType::Full, "release build (prerelease)".into())),
        _ => {}
    }
    if inputs.is("schedule") {
        return Ok((TestType::Comprehensive, "scheduled run".into()));
    }
    if let Some(changed) = git.changed_submodules().filter(|c| !c.is_empty()) {
        let list: Vec<&str> = changed.into_iter().collect();
        return Ok((TestType::Standard, format!("submodule(s) changed: {}", py_repr_list(&list))));
    }
    Ok((TestType::Quick, "default".into()))
}

/// The runner for one family's tests, after the kernel, sanitizer and test-policy rules.
fn test_runner(
    info: &PlatformInfo,
    family: &str,
    variant: &str,
    kernel: Option<&str>,
    run: &Run<'_>,
    notes: &mut Vec<String>,
) -> String {
    let (inputs, git, jobs) = (run.inputs, run.git, run.jobs);
    let mut runs_on = info.test_runs_on.clone();
    if let Some(kernel) = kernel {
        runs_on = match info.test_runs_on_kernel.get(kernel) {
            Some(r) => r.clone(),
            None => {
                notes.push(format!("{family}: no {kernel} kernel runner, tests disabled"));
                String::new()
            }
        };
    }
    if variant == "asan" || variant == "host-asan" {
        runs_on = if !inputs.nightly_like() {
            notes.push(format!("{family}: {variant} tests run only on schedule or dispatch"));
            String::new()
        } else if let Some(sandbox) = &info.test_runs_on_sandbox {
            sandbox.clone()
        } else {
            notes.push(format!("{family}: no {variant} sandbox runner, tests disabled"));
            String::new()
        };
    }
    if info.run_full_tests_only && jobs.test_type == TestType::Quick {
        notes.push(format!("{family}: run-full-tests-only, no tests on a quick run"));
        runs_on.clear();
    }
    if info.nightly_check_only_for_family && !inputs.nightly_like() {
        notes.push(format!("{family}: nightly_check_only_for_family, no tests on this trigger"));
        runs_on.clear();
    }
    let submodules_changed = git.changed_submodules().is_some_and(|c| !c.is_empty());
    if info.submodule_bump_tests_only && !inputs.is("workflow_dispatch") && !submodules_changed {
        notes.push(format!("{family}: submodule_bump_tests_only, no submodule changed"));
        runs_on.clear();
    }
    runs_on
}

fn platform_config(
    run: &Run<'_>,
    platform: &str,
    families: &[String],
    variant: &crate::Variant,
    picker: &mut dyn Picker,
    notes: &mut Vec<String>,
) -> Result<Option<BuildConfig>, CiError> {
    let (matrix, inputs, jobs) = (run.matrix, run.inputs, run.jobs);
    let kernel = inputs
        .pr_labels
        .iter()
        .find_map(|l| l.strip_prefix("test_runner:"))
        .map(|k| k.split(':').next().unwrap_or(""))
        .filter(|k| !k.is_empty());
    let mut per_family = Vec::new();
    for key in families {
        let Some(info) = matrix.family(key).and_then(|f| f.platform(platform)) else { continue };
        if !info.build_variants.contains(&variant.label) {
            notes.push(format!("{key} has no {} variant on {platform}", variant.label));
            continue;
        }
        let runs_on = test_runner(info, key, &variant.label, kernel, run, notes);
        per_family.push(FamilyInfo {
            amdgpu_family: info.family.clone(),
            amdgpu_targets: info.fetch_gfx_targets.join(","),
            test_runs_on_labels: if runs_on.is_empty() { None } else { info.test_runs_on_labels.clone() },
            test_runs_on: runs_on,
            sanity_check_only_for_family: info.sanity_check_only_for_family,
            test_labels_for_family: info.test_labels_for_family.clone(),
        });
    }
    if per_family.is_empty() {
        return Ok(None);
    }
    let dist = per_family.iter().map(|f| f.amdgpu_family.as_str()).collect::<Vec<_>>().join(";");
    let build_runs_on = build_runner(matrix, platform, &variant.label, picker);

    let mut pytorch = Vec::new();
    if jobs.build_pytorch {
        pytorch = pytorch_matrix(matrix, &inputs.release_type, &dist, platform, &inputs.python_versions)?;
    }
    let mut jax = Vec::new();
    if jobs.build_jax && platform == "linux" {
        jax = jax_matrix(matrix, &inputs.release_type, platform, &inputs.python_versions)?;
    }
    let python_tests = python_test_matrix(matrix, platform, &per_family, picker);
    Ok(Some(BuildConfig {
        per_family_info: per_family,
        dist_amdgpu_families: dist,
        artifact_group: format!("multi-arch-{}", if variant.suffix.is_empty() { "release" } else { &variant.suffix }),
        build_variant_label: variant.label.clone(),
        build_variant_suffix: variant.suffix.clone(),
        build_variant_cmake_preset: variant.cmake_preset.clone(),
        build_native_linux: true,
        build_python_packages: inputs.build_python_packages && variant.suffix != "asan",
        build_pytorch: !pytorch.is_empty(),
        build_jax: !jax.is_empty(),
        test_python_packages_matrix: python_tests,
        pytorch_build_matrix: pytorch,
        jax_build_matrix: jax,
        build_runs_on,
        prebuilt_stages: jobs.prebuilt.join(","),
        baseline_run_id: inputs.baseline_run_id.clone(),
        baseline_repository: inputs.baseline_repository.clone(),
        linux_amdgpu_families: String::new(),
        windows_amdgpu_families: String::new(),
    }))
}

fn build_runner(matrix: &Matrix, platform: &str, variant: &str, picker: &mut dyn Picker) -> String {
    let Some(pools) = matrix.build_runners.get(platform) else { return String::new() };
    let pool = if variant.contains("san") { pools.get("sanitizer") } else { None };
    let Some(labels) = pool.or_else(|| pools.get("default")) else { return String::new() };
    let i = picker.pick(labels, &format!("build-runner ({platform}, {variant})"));
    labels.get(i).map(|l| l.label.clone()).unwrap_or_default()
}

fn python_test_matrix(
    matrix: &Matrix,
    platform: &str,
    families: &[FamilyInfo],
    picker: &mut dyn Picker,
) -> Vec<PythonTestRow> {
    let envs = matrix.python_tests.get(platform).map(Vec::as_slice).unwrap_or_default();
    let mut rows = Vec::new();
    for family in families.iter().filter(|f| !f.test_runs_on.is_empty()) {
        for env in envs {
            let runs_on = match family.test_runs_on_labels.as_deref() {
                Some(labels) if !labels.is_empty() => {
                    let i = picker.pick(labels, &format!("python-test-runner ({})", family.amdgpu_family));
                    labels.get(i).map(|l| l.label.clone()).unwrap_or_default()
                }
                _ => family.test_runs_on.clone(),
            };
            rows.push(PythonTestRow {
                amdgpu_family: family.amdgpu_family.clone(),
                test_runs_on: runs_on,
                python_version: env.python_version.clone(),
                container_image_name: env.container_image_name.clone(),
                container_image_url: env.container_image_url.clone(),
            });
        }
    }
    rows
}

fn check_release_type(matrix: &Matrix, release_type: &str) -> Result<(), CiError> {
    if matrix.release_types.iter().any(|r| r == release_type) {
        Ok(())
    } else {
        Err(CiError::UnknownReleaseType(py_repr_str(release_type)))
    }
}

fn pytorch_matrix(
    matrix: &Matrix,
    release_type: &str,
    families: &str,
    platform: &str,
    python_versions: &[String],
) -> Result<Vec<PytorchRow>, CiError> {
    check_release_type(matrix, release_type)?;
    let p = &matrix.pytorch;
    let per_platform =
        |m: &std::collections::BTreeMap<String, Vec<String>>| m.get(platform).cloned().unwrap_or_default();
    let versions = if !python_versions.is_empty() {
        python_versions.to_vec()
    } else if release_type == "ci" {
        per_platform(&p.ci_python_versions)
    } else {
        p.release_python_versions.clone()
    };
    let refs = match release_type {
        "ci" => per_platform(&p.ci_refs),
        "prerelease" => per_platform(&p.stable_refs),
        _ => {
            let mut refs = per_platform(&p.stable_refs);
            refs.push("nightly".into());
            refs
        }
    };
    let mut rows = Vec::new();
    for py in &versions {
        for r in &refs {
            let exclude: BTreeSet<String> = p
                .unsupported_families
                .get(platform)
                .and_then(|m| m.get(r))
                .map(|v| v.iter().map(|f| f.to_lowercase()).collect())
                .unwrap_or_default();
            let kept: Vec<&str> = families
                .split(';')
                .map(str::trim)
                .filter(|f| !f.is_empty() && !exclude.contains(&f.to_lowercase()))
                .collect();
            if kept.is_empty() {
                continue;
            }
            let untested = p.no_tests.iter().any(|n| n.platform == platform && &n.git_ref == r && &n.python == py);
            rows.push(PytorchRow {
                python_version: py.clone(),
                pytorch_git_ref: r.clone(),
                amdgpu_families: kept.join(";"),
                test_amdgpu_families: if untested { "none" } else { "auto" }.into(),
            });
        }
    }
    Ok(rows)
}

fn jax_matrix(
    matrix: &Matrix,
    release_type: &str,
    platform: &str,
    python_versions: &[String],
) -> Result<Vec<JaxRow>, CiError> {
    check_release_type(matrix, release_type)?;
    let j = &matrix.jax;
    let versions = if !python_versions.is_empty() {
        python_versions.to_vec()
    } else if release_type == "ci" {
        j.ci_python_versions.get(platform).cloned().unwrap_or_default()
    } else {
        j.release_python_versions.clone()
    };
    let refs = if release_type == "ci" { &j.ci_refs } else { &j.release_refs };
    let refs = refs.get(platform).cloned().unwrap_or_default();
    let mut rows = Vec::new();
    for py in &versions {
        for r in &refs {
            let Some(cfg) = j.refs.iter().find(|c| &c.git_ref == r) else {
                return Err(CiError::UnknownJaxRefs(py_repr_list(&[r])));
            };
            if cfg.exclude_python_versions.contains(py) {
                continue;
            }
            rows.push(JaxRow {
                python_version: py.clone(),
                jax_ref: cfg.git_ref.clone(),
                jax_label: cfg.git_ref.strip_prefix("rocm-jaxlib-v").unwrap_or(&cfg.git_ref).to_owned(),
                jax_repository: cfg.repository.clone(),
                gfx_arch: cfg.gfx_arch.clone(),
            });
        }
    }
    Ok(rows)
}
