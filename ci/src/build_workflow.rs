//! `quarry ci workflow`: the reusable GitHub Actions workflow that builds one platform's
//! multi-arch pipeline, generated from the parsed `BUILD_TOPOLOGY.toml` so its stage jobs can
//! never drift from the topology. Pure: the caller parses the topology and writes the text.
//!
//! Stages: [`workflow_stages`] keeps the stages the platform builds (a stage is built when at
//! least one artifact it produces is not disabled there; flag-guarded artifacts count as
//! disabled, as with no flags set) and gives each the stages whose artifacts it fetches, among
//! the artifacts the platform builds, as its `needs`. Jobs come in dependency order, ties in the
//! file's order.
//!
//! Text: [`build_workflow`] renders `workflow_call` with seed 000's inputs (the multi-arch
//! Windows CI design) plus Quarry's (`quarry_index_url`, `quarry_version`) and TheRock's
//! (`prebuilt_stages`, `build_runs_on`, `release_type`); one job per stage calling the
//! platform's stage workflow ([`stage_workflow_file`]), a per-arch stage once per entry of
//! `matrix_per_family_json`; every job granted `contents: read` and `id-token: write`, what the
//! stage workflow's job asks for (GitHub refuses to start a run whose called job asks for more
//! than its caller has). A stage named in `prebuilt_stages` is skipped (its artifacts were
//! copied from a baseline run) and its dependents still run.
//!
//! Invariant: the same topology and platform give the same bytes (tests diff the checked-in
//! files against a fresh rendering).

use std::collections::BTreeSet;

use quarry_topology::{Platform, StageType, Topology};

use crate::CiError;

/// One stage job of the build workflow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowStage {
    /// The topology's stage name (the job's `stage_name` input).
    pub name: String,
    /// The GitHub job id: the stage name, or `stage-NAME` when the name starts with a digit
    /// (job ids must start with a letter or `_`).
    pub job_id: String,
    pub per_arch: bool,
    /// Stage names this one fetches artifacts from, in job order.
    pub needs: Vec<String>,
}

/// The seed's inputs of the staged build workflow, in its order: (name, type, description).
pub const SEED_BUILD_INPUTS: [(&str, &str, &str); 10] = [
    ("artifact_group", "string", "Artifact group of the run (e.g. multi-arch-release)"),
    (
        "matrix_per_family_json",
        "string",
        "JSON array of per-family objects ({amdgpu_family, test-runs-on, ...}): the per-arch stages' matrix",
    ),
    ("dist_amdgpu_families", "string", "Semicolon-separated GPU families for dist targets"),
    ("build_variant_label", "string", "Build variant label (e.g. release, asan)"),
    ("build_variant_cmake_preset", "string", "CMake preset of the build variant (empty: none)"),
    ("build_variant_suffix", "string", "Build variant suffix (e.g. asan)"),
    ("expect_failure", "boolean", "The build is expected to fail: its stage jobs continue on error"),
    (
        "use_prebuilt_artifacts",
        "string",
        "'true': the orchestration takes artifacts from artifact_run_id instead of building",
    ),
    ("rocm_package_version", "string", "ROCm package version (THEROCK_PACKAGE_VERSION)"),
    ("test_type", "string", "Test type of the run (quick, standard, comprehensive, full)"),
];

/// The file the build workflow is checked in as (under `.github/workflows/` of a TheRock
/// checkout; `infra/workflows/` in Quarry).
pub fn build_workflow_file(platform: Platform) -> String {
    format!("quarry_multi_arch_build_{}.yml", platform.as_str())
}

/// The reusable workflow one stage job calls.
pub fn stage_workflow_file(platform: Platform) -> String {
    format!("quarry_multi_arch_stage_{}.yml", platform.as_str())
}

fn title(platform: Platform) -> &'static str {
    match platform {
        Platform::Linux => "Linux",
        Platform::Windows => "Windows",
    }
}

fn default_runner(platform: Platform) -> &'static str {
    match platform {
        Platform::Linux => "azure-linux-scale-rocm",
        Platform::Windows => "azure-windows-scale-rocm",
    }
}

fn job_id(stage: &str) -> String {
    if stage.starts_with(|c: char| c.is_ascii_alphabetic()) { stage.to_owned() } else { format!("stage-{stage}") }
}

/// The stages `platform` builds, in dependency order (ties in the file's order), each with the
/// stages it fetches from.
pub fn workflow_stages(topology: &Topology, platform: Platform) -> Result<Vec<WorkflowStage>, CiError> {
    let no_flags = BTreeSet::new();
    let mut file_order: Vec<&String> = topology.stage_file_order.iter().collect();
    // Stages the header scan did not see (written inline) go last, by name.
    for name in topology.build_stages.keys() {
        if !file_order.contains(&name) {
            file_order.push(name);
        }
    }
    let mut built: Vec<(&String, BTreeSet<String>)> = Vec::new();
    for name in file_order {
        let produced = topology.built_on(&topology.produced(name)?, platform, &no_flags);
        if produced.is_empty() {
            continue;
        }
        built.push((name, produced));
    }
    let mut candidates: Vec<(String, bool, BTreeSet<String>)> = Vec::new();
    for (name, _) in &built {
        let inbound = topology.built_on(&topology.inbound(name)?, platform, &no_flags);
        let deps = built
            .iter()
            .filter(|(other, produced)| other != name && produced.iter().any(|a| inbound.contains(a)))
            .map(|(other, _)| (*other).clone())
            .collect();
        let per_arch = topology.build_stages[*name].kind == StageType::PerArch;
        candidates.push(((*name).clone(), per_arch, deps));
    }
    let mut ordered: Vec<WorkflowStage> = Vec::new();
    while !candidates.is_empty() {
        let placed: BTreeSet<&str> = ordered.iter().map(|s| s.name.as_str()).collect();
        let Some(next) = candidates.iter().position(|(_, _, deps)| deps.iter().all(|d| placed.contains(d.as_str())))
        else {
            let stuck: Vec<&str> = candidates.iter().map(|(n, _, _)| n.as_str()).collect();
            return Err(CiError::StageCycle(stuck.join(", ")));
        };
        let (name, per_arch, deps) = candidates.remove(next);
        let needs = ordered.iter().filter(|s| deps.contains(&s.name)).map(|s| s.name.clone()).collect();
        ordered.push(WorkflowStage { job_id: job_id(&name), name, per_arch, needs });
    }
    Ok(ordered)
}

/// A workflow file written line by line.
#[derive(Default)]
struct Lines(String);

impl Lines {
    fn line(&mut self, text: &str) {
        self.0.push_str(text);
        self.0.push('\n');
    }
}

/// The text of `quarry_multi_arch_build_{platform}.yml`.
pub fn build_workflow(topology: &Topology, platform: Platform) -> Result<String, CiError> {
    let stages = workflow_stages(topology, platform)?;
    let mut out = Lines::default();
    header(&mut out, topology, &stages, platform);
    inputs(&mut out, platform);
    out.line("");
    out.line("permissions:");
    out.line("  contents: read");
    out.line("");
    out.line("jobs:");
    for (i, stage) in stages.iter().enumerate() {
        if i > 0 {
            out.line("");
        }
        job(&mut out, stage, platform);
    }
    Ok(out.0)
}

/// The comment block: how the file was generated and the stages it builds.
fn header(out: &mut Lines, topology: &Topology, stages: &[WorkflowStage], platform: Platform) {
    let os = platform.as_str();
    let mut line = |text: &str| out.line(text);
    line(&format!("# GENERATED by `quarry ci workflow --platform {os}` from BUILD_TOPOLOGY.toml: do not edit."));
    line("# Regenerate after changing the topology:");
    line(&format!(
        "#   quarry ci workflow --platform {os} --topology BUILD_TOPOLOGY.toml --output .github/workflows/{}",
        build_workflow_file(platform)
    ));
    line("# (Quarry's tests/workflows.rs fails when this file and the topology disagree.)");
    line("#");
    line(&format!(
        "# The staged multi-arch build for {}: one job per stage built on {os}, after the stages whose",
        title(platform)
    ));
    line("# artifacts it fetches; a per-arch stage runs once per entry of matrix_per_family_json.");
    line("# Each job runs the stage workflow, which fetches inbound artifacts, builds and pushes with quarry.");
    line("#");
    for stage in stages {
        let kind = if stage.per_arch { "per-arch" } else { "generic" };
        let after = if stage.needs.is_empty() { String::new() } else { format!(", after {}", stage.needs.join(", ")) };
        line(&format!("#   {} ({kind}{after})", stage.name));
    }
    let disabled: Vec<&str> = topology
        .stage_file_order
        .iter()
        .filter(|n| !stages.iter().any(|s| s.name == **n))
        .map(String::as_str)
        .collect();
    if !disabled.is_empty() {
        line(&format!("# Not built on {os} (every artifact disabled there): {}.", disabled.join(", ")));
    }
}

/// The workflow's name, trigger and inputs (seed 000's and Quarry's own).
fn inputs(out: &mut Lines, platform: Platform) {
    let mut line = |text: &str| out.line(text);
    line("");
    line(&format!("name: Multi-arch build ({}, quarry)", title(platform)));
    line("");
    line("on:");
    line("  workflow_call:");
    line("    inputs:");
    for (name, kind, description) in SEED_BUILD_INPUTS {
        line(&format!("      {name}:"));
        line(&format!("        type: {kind}"));
        line(&format!("        description: \"{description}\""));
        match name {
            "expect_failure" => line("        default: false"),
            "use_prebuilt_artifacts" => line("        default: \"false\""),
            "build_variant_cmake_preset" | "build_variant_suffix" | "test_type" => line("        default: \"\""),
            _ => line("        required: true"),
        }
    }
    let extra = [
        (
            "prebuilt_stages",
            "Comma-separated stages not to build (their artifacts were copied from a baseline run)",
            "\"\"",
        ),
        ("build_runs_on", "Build runner label", default_runner(platform)),
        ("release_type", "Release type: artifact bucket, IAM role and package versions", "ci"),
        ("quarry_index_url", "Package index serving the quarry wheel (pip --index-url)", ""),
        ("quarry_version", "quarry version to install (empty: the newest on the index)", "\"\""),
    ];
    for (name, description, default) in extra {
        line(&format!("      {name}:"));
        line("        type: string");
        line(&format!("        description: \"{description}\""));
        if default.is_empty() {
            line("        required: true");
        } else {
            line(&format!("        default: {default}"));
        }
    }
}

/// One stage's job: after the stages it fetches from, per family when per-arch, calling the
/// stage workflow with the build's inputs.
fn job(out: &mut Lines, stage: &WorkflowStage, platform: Platform) {
    let mut line = |text: &str| out.line(text);
    let name = &stage.name;
    line(&format!("  {}:", stage.job_id));
    if stage.per_arch {
        line(&format!("    name: {name} (${{{{ matrix.family_info.amdgpu_family }}}})"));
    } else {
        line(&format!("    name: {name}"));
    }
    if !stage.needs.is_empty() {
        let needs: Vec<String> = stage.needs.iter().map(|n| job_id(n)).collect();
        line(&format!("    needs: [{}]", needs.join(", ")));
    }
    line(&format!(
        "    if: ${{{{ !cancelled() && !failure() && !contains(format(',{{0}},', inputs.prebuilt_stages), ',{name},') }}}}"
    ));
    if stage.per_arch {
        line("    strategy:");
        line("      fail-fast: false");
        line("      matrix:");
        line("        family_info: ${{ fromJSON(inputs.matrix_per_family_json) }}");
    }
    line(&format!("    uses: ./.github/workflows/{}", stage_workflow_file(platform)));
    line("    secrets: inherit");
    line("    permissions:");
    line("      contents: read");
    line("      id-token: write");
    line("    with:");
    line(&format!("      stage_name: {name}"));
    if stage.per_arch {
        line("      amdgpu_family: ${{ matrix.family_info.amdgpu_family }}");
    } else {
        line("      amdgpu_family: \"\"");
    }
    for input in [
        "dist_amdgpu_families",
        "artifact_group",
        "build_variant_label",
        "build_variant_cmake_preset",
        "build_variant_suffix",
        "expect_failure",
        "rocm_package_version",
        "build_runs_on",
        "release_type",
        "quarry_index_url",
        "quarry_version",
    ] {
        line(&format!("      {input}: ${{{{ inputs.{input} }}}}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = include_str!("../../topology/data/BUILD_TOPOLOGY.toml");

    /// `late` is listed first but fetches from `3d` and, through `linux-helper` (Linux only),
    /// from `base`; `win-off` builds nothing on Windows; `3d` needs a job id prefix.
    const SMALL: &str = r#"
[metadata]
version = "2.0"

[build_stages.late]
artifact_groups = ["late"]

[build_stages.3d]
artifact_groups = ["threed"]
type = "per-arch"

[build_stages.base]
artifact_groups = ["base"]

[build_stages.win-off]
artifact_groups = ["off"]

[artifact_groups.base]
type = "generic"

[artifact_groups.late]
type = "generic"

[artifact_groups.threed]
type = "per-arch"

[artifact_groups.off]
type = "generic"

[artifacts.base-lib]
artifact_group = "base"

[artifacts.linux-helper]
artifact_group = "base"
disable_platforms = ["windows"]

[artifacts.threed-lib]
artifact_group = "threed"
type = "target-specific"

[artifacts.late-lib]
artifact_group = "late"
artifact_deps = ["threed-lib", "linux-helper"]

[artifacts.off-lib]
artifact_group = "off"
artifact_deps = ["base-lib"]
disable_platforms = ["windows"]
"#;

    fn summary(topology: &Topology, platform: Platform) -> Vec<String> {
        workflow_stages(topology, platform)
            .unwrap()
            .iter()
            .map(|s| {
                let kind = if s.per_arch { "per-arch" } else { "generic" };
                format!("{}={} {kind} <- [{}]", s.name, s.job_id, s.needs.join(","))
            })
            .collect()
    }

    #[test]
    fn stages_follow_dependencies_and_drop_what_a_platform_does_not_build() {
        let t = Topology::parse(SMALL).unwrap();
        assert_eq!(
            summary(&t, Platform::Linux),
            [
                "3d=stage-3d per-arch <- []",
                "base=base generic <- []",
                "late=late generic <- [3d,base]",
                "win-off=win-off generic <- [base]"
            ]
        );
        // On Windows late's only link to base is disabled there, and win-off builds nothing.
        assert_eq!(
            summary(&t, Platform::Windows),
            ["3d=stage-3d per-arch <- []", "late=late generic <- [3d]", "base=base generic <- []"]
        );
        let text = build_workflow(&t, Platform::Windows).unwrap();
        assert!(text.contains("\n  stage-3d:\n    name: 3d (${{ matrix.family_info.amdgpu_family }})\n    if: "));
        assert!(text.contains("\n  late:\n    name: late\n    needs: [stage-3d]\n"), "{text}");
        assert!(text.contains("# Not built on windows (every artifact disabled there): win-off.\n"));
        assert!(!text.contains("stage_name: win-off"));
    }

    #[test]
    fn the_real_topology_gives_eleven_linux_stages_and_six_windows_ones() {
        let t = Topology::parse(REAL).unwrap();
        let linux = summary(&t, Platform::Linux);
        assert_eq!(linux.len(), 11, "{linux:#?}");
        assert_eq!(linux[0], "compiler-runtime=compiler-runtime generic <- []");
        assert!(linux.contains(&"math-libs=math-libs per-arch <- [compiler-runtime]".to_owned()));
        assert!(linux[1..].iter().all(|s| s.ends_with("<- [compiler-runtime]")), "{linux:#?}");
        let windows: Vec<String> =
            workflow_stages(&t, Platform::Windows).unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(windows, ["compiler-runtime", "wsl-rocdxg", "runtime-tests", "math-libs", "cv-libs", "debug-tools"]);
    }

    #[test]
    fn a_cycle_between_stages_is_an_error_naming_them() {
        // No artifact cycle, but base fetches from late, which fetches from base.
        let text =
            format!("{SMALL}\n[artifacts.base-extra]\nartifact_group = \"base\"\nartifact_deps = [\"late-lib\"]\n");
        let t = Topology::parse(&text).unwrap();
        let err = workflow_stages(&t, Platform::Linux).unwrap_err();
        assert_eq!(err, CiError::StageCycle("late, base, win-off".into()));
    }

    #[test]
    fn the_real_topology_renders_the_checked_in_workflows() {
        let t = Topology::parse(REAL).unwrap();
        insta::assert_snapshot!("build_workflow_linux", build_workflow(&t, Platform::Linux).unwrap());
        insta::assert_snapshot!("build_workflow_windows", build_workflow(&t, Platform::Windows).unwrap());
    }
}
