//! The matrix data: families per platform, build variants, runner pools, path filters and the
//! wheel matrices. Parsed from TOML (`ci/data/ci_matrix.toml` is built in) and checked so the
//! configure pipeline can index it without failing.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::CiError;

const BUILTIN: &str = include_str!("../data/ci_matrix.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    pub release_types: Vec<String>,
    /// platform → variant name → variant.
    pub build_variants: BTreeMap<String, BTreeMap<String, Variant>>,
    /// platform → pool ("default", "sanitizer") → weighted labels.
    pub build_runners: BTreeMap<String, BTreeMap<String, Vec<RunnerLabel>>>,
    pub path_filters: PathFilters,
    pub pytorch: Pytorch,
    pub jax: Jax,
    /// platform → environments.
    pub python_tests: BTreeMap<String, Vec<PythonTestEnv>>,
    #[serde(rename = "family")]
    pub families: Vec<Family>,
    #[serde(skip)]
    skippable: globset::GlobSet,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub label: String,
    pub suffix: String,
    pub cmake_preset: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunnerLabel {
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathFilters {
    pub skippable: Vec<String>,
    pub ci_workflows: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pytorch {
    pub ci_python_versions: BTreeMap<String, Vec<String>>,
    pub release_python_versions: Vec<String>,
    pub ci_refs: BTreeMap<String, Vec<String>>,
    pub stable_refs: BTreeMap<String, Vec<String>>,
    #[serde(default)]
    pub no_tests: Vec<NoTests>,
    /// platform → ref → families the ref cannot build yet.
    pub unsupported_families: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoTests {
    pub platform: String,
    #[serde(rename = "ref")]
    pub git_ref: String,
    pub python: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Jax {
    pub ci_python_versions: BTreeMap<String, Vec<String>>,
    pub release_python_versions: Vec<String>,
    pub ci_refs: BTreeMap<String, Vec<String>>,
    pub release_refs: BTreeMap<String, Vec<String>>,
    pub refs: Vec<JaxRef>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JaxRef {
    #[serde(rename = "ref")]
    pub git_ref: String,
    pub repository: String,
    pub gfx_arch: String,
    #[serde(default)]
    pub exclude_python_versions: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PythonTestEnv {
    pub python_version: String,
    pub container_image_name: String,
    pub container_image_url: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    Presubmit,
    Postsubmit,
    Nightly,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Family {
    /// Matrix key, lowercase (`gfx94x`): what labels and inputs name.
    pub key: String,
    pub trigger: Trigger,
    #[serde(default)]
    pub linux: Option<PlatformInfo>,
    #[serde(default)]
    pub windows: Option<PlatformInfo>,
}

impl Family {
    pub fn platform(&self, platform: &str) -> Option<&PlatformInfo> {
        match platform {
            "linux" => self.linux.as_ref(),
            "windows" => self.windows.as_ref(),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PlatformInfo {
    pub test_runs_on: String,
    #[serde(default)]
    pub test_runs_on_labels: Option<Vec<RunnerLabel>>,
    #[serde(default)]
    pub test_runs_on_sandbox: Option<String>,
    #[serde(default)]
    pub test_runs_on_multi_gpu: Option<String>,
    #[serde(default)]
    pub test_runs_on_multi_gpu_labels: Option<Vec<RunnerLabel>>,
    #[serde(default)]
    pub test_runs_on_kernel: BTreeMap<String, String>,
    #[serde(default)]
    pub benchmark_runs_on: Option<String>,
    pub family: String,
    pub fetch_gfx_targets: Vec<String>,
    #[serde(rename = "build_variants")]
    pub build_variants: Vec<String>,
    #[serde(default, rename = "bypass_tests_for_releases")]
    pub bypass_tests_for_releases: bool,
    #[serde(default, rename = "sanity_check_only_for_family")]
    pub sanity_check_only_for_family: bool,
    #[serde(default, rename = "nightly_check_only_for_family")]
    pub nightly_check_only_for_family: bool,
    #[serde(default, rename = "submodule_bump_tests_only")]
    pub submodule_bump_tests_only: bool,
    #[serde(default)]
    pub run_full_tests_only: bool,
    #[serde(default, rename = "test_labels_for_family")]
    pub test_labels_for_family: Option<Vec<String>>,
}

impl Matrix {
    /// The matrix built into Quarry (`ci/data/ci_matrix.toml`).
    pub fn builtin() -> Self {
        // Checked by a unit test; the file is part of the binary.
        Self::parse(BUILTIN).expect("the built-in CI matrix is valid")
    }

    /// Parse and check a matrix file: unique lowercase keys, every platform entry's variants
    /// defined for that platform, every runner pool non-empty.
    pub fn parse(text: &str) -> Result<Self, CiError> {
        let mut matrix: Matrix = toml::from_str(text).map_err(|e| CiError::Data(e.to_string()))?;
        let mut seen = BTreeSet::new();
        for family in &matrix.families {
            if family.key != family.key.to_lowercase() {
                return Err(CiError::Data(format!("family key {:?} must be lowercase", family.key)));
            }
            if !seen.insert(family.key.as_str()) {
                return Err(CiError::Data(format!("family key {:?} is defined twice", family.key)));
            }
            for platform in ["linux", "windows"] {
                let Some(info) = family.platform(platform) else { continue };
                for variant in &info.build_variants {
                    if !matrix.build_variants.get(platform).is_some_and(|v| v.contains_key(variant)) {
                        return Err(CiError::Data(format!(
                            "[[family]] {} {platform}: build variant {variant:?} is not in [build_variants.{platform}]",
                            family.key
                        )));
                    }
                }
                for labels in [&info.test_runs_on_labels, &info.test_runs_on_multi_gpu_labels].into_iter().flatten() {
                    if labels.is_empty() {
                        return Err(CiError::Data(format!(
                            "[[family]] {} {platform}: an empty runner label list",
                            family.key
                        )));
                    }
                }
            }
        }
        for (platform, pools) in &matrix.build_runners {
            if !pools.contains_key("default") {
                return Err(CiError::Data(format!("[build_runners.{platform}] has no default pool")));
            }
            if let Some((pool, _)) = pools.iter().find(|(_, labels)| labels.is_empty()) {
                return Err(CiError::Data(format!("[build_runners.{platform}] {pool} is empty")));
            }
        }
        for (platform, refs) in matrix.jax.ci_refs.iter().chain(&matrix.jax.release_refs) {
            if let Some(r) = refs.iter().find(|r| !matrix.jax.refs.iter().any(|j| &j.git_ref == *r)) {
                return Err(CiError::Data(format!("[jax] {platform}: ref {r:?} has no [[jax.refs]] entry")));
            }
        }
        matrix.skippable = globset_for(&matrix.path_filters.skippable)?;
        Ok(matrix)
    }

    /// Families whose trigger is one of `triggers`, in file order.
    pub fn families_for(&self, triggers: &[Trigger]) -> impl Iterator<Item = &Family> {
        self.families.iter().filter(move |f| triggers.contains(&f.trigger))
    }

    pub fn family(&self, key: &str) -> Option<&Family> {
        self.families.iter().find(|f| f.key == key)
    }

    /// True when `path` matches a skippable pattern (fnmatch rules: `*` crosses `/`).
    pub(crate) fn is_skippable(&self, path: &str) -> bool {
        self.skippable.is_match(path)
    }
}

fn globset_for(patterns: &[String]) -> Result<globset::GlobSet, CiError> {
    let mut builder = globset::GlobSetBuilder::new();
    for p in patterns {
        let glob = globset::GlobBuilder::new(p)
            .literal_separator(false)
            .backslash_escape(false)
            .build()
            .map_err(|e| CiError::Data(format!("[path_filters] pattern {p:?}: {e}")))?;
        builder.add(glob);
    }
    builder.build().map_err(|e| CiError::Data(e.to_string()))
}
