//! The multi-arch CI matrix (spec §6): which GPU families a workflow run builds and tests on
//! each platform, and the per-platform build configuration its jobs fan out over. The rules
//! are TheRock's `configure_multi_arch_ci.py`; the families, variants, runners and wheel
//! matrices are data ([`Matrix`], `ci/data/ci_matrix.toml` by default). Pure: callers read the
//! event, the git diff and the files, and write the outputs.
//!
//! Inputs: [`Inputs::from_lookup`] maps the workflow environment and event payload to
//! [`Inputs`]; [`GitContext::without_checkout`] says whether the run needs a diff of the checkout.
//!
//! Pipeline: [`configure`] = skip check → target selection → job decisions → build configs.
//! [`Outputs::github_output`] renders the `$GITHUB_OUTPUT` variables byte for byte as TheRock's
//! tool writes them (Python `json.dumps` spacing and key order), so a workflow can switch tools
//! by changing the command.
//!
//! Workflows: [`build_workflow`] renders a platform's reusable staged-build workflow from the
//! parsed topology ([`workflow_stages`]: the stages the platform builds and their `needs`),
//! what `quarry ci workflow` writes.

mod build_workflow;
mod configure;
mod json;
mod matrix;
mod workflow;

pub use build_workflow::{
    SEED_BUILD_INPUTS, WorkflowStage, build_workflow, build_workflow_file, stage_workflow_file, workflow_stages,
};
pub use configure::{
    BuildConfig, FamilyInfo, GitContext, Inputs, JaxRow, Outputs, PythonTestRow, PytorchRow, TestType, comma_list,
    configure, is_ci_run_required,
};
pub use json::{py_json, py_repr_list};
pub use matrix::{Matrix, PlatformInfo, RunnerLabel, Variant};

/// Chooses one runner label from a weighted pool. TheRock picks at random; [`SeededPicker`]
/// picks by weight but deterministically for a run, and [`FirstPicker`] always takes the first.
pub trait Picker {
    /// Index into `labels` (never empty).
    fn pick(&mut self, labels: &[RunnerLabel], context: &str) -> usize;
}

/// Always the first label.
#[derive(Debug, Default, Clone, Copy)]
pub struct FirstPicker;

impl Picker for FirstPicker {
    fn pick(&mut self, _labels: &[RunnerLabel], _context: &str) -> usize {
        0
    }
}

/// Weighted choice from a seed (the run id): the same run gets the same runners, different
/// runs spread over the pools in proportion to their weights.
#[derive(Debug, Clone)]
pub struct SeededPicker {
    state: u64,
}

impl SeededPicker {
    pub fn new(seed: &str) -> Self {
        Self { state: fnv1a(seed.as_bytes()) }
    }
}

impl Picker for SeededPicker {
    fn pick(&mut self, labels: &[RunnerLabel], context: &str) -> usize {
        if labels.len() <= 1 {
            return 0;
        }
        // splitmix64 over the run seed and the context.
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15) ^ fnv1a(context.as_bytes());
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let by_count = labels[0].count.is_some();
        let weights: Vec<f64> = labels
            .iter()
            .map(|l| if by_count { l.count.unwrap_or(0) as f64 } else { l.weight.unwrap_or(0.0) })
            .collect();
        let total: f64 = weights.iter().sum();
        if total <= 0.0 {
            return 0;
        }
        let mut r = (z >> 11) as f64 / (1u64 << 53) as f64 * total;
        for (i, w) in weights.iter().enumerate() {
            if r < *w {
                return i;
            }
            r -= w;
        }
        labels.len() - 1
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// Why a matrix cannot be configured: bad input (the workflow's variables, labels or payload,
/// or the matrix data), each message TheRock's where TheRock has one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CiError {
    #[error("Unknown GPU families: {unknown}. Known families: {known}")]
    UnknownFamilies { unknown: String, known: String },
    #[error("Unrecognized test_filter value: {0}. Valid values: ['comprehensive', 'full', 'quick', 'standard']")]
    UnknownTestFilter(String),
    #[error("Unsupported event type: {0}")]
    UnsupportedEvent(String),
    #[error("Unknown release_type: {0}")]
    UnknownReleaseType(String),
    #[error("Unknown JAX refs: {0}")]
    UnknownJaxRefs(String),
    #[error("CI matrix data: {0}")]
    Data(String),
    /// A required environment variable is unset.
    #[error("{0} is not set")]
    MissingVariable(&'static str),
    /// `EXTERNAL_REPO` is not JSON.
    #[error("EXTERNAL_REPO contains invalid JSON: {0:?}")]
    ExternalRepoJson(String),
    /// `EXTERNAL_REPO` has no `repository` name.
    #[error("EXTERNAL_REPO missing 'repository' field: {0:?}")]
    ExternalRepoField(String),
    /// The topology cannot be read for a workflow (an unknown group or stage).
    #[error(transparent)]
    Topology(#[from] quarry_topology::TopologyError),
    /// Stages that fetch from each other, so no job order exists (named here).
    #[error("build stages depend on each other in a cycle: {0}")]
    StageCycle(String),
}

#[cfg(test)]
mod tests;
