//! TheRock's packaging driven end to end, for `quarry package`: artifact archives unpacked
//! into a scratch directory ([`StagedArtifacts`]), the plan of `quarry_packaging::therock`
//! mapped to control fields ([`deb_control`], [`rpm_spec`]), and every planned package or
//! distribution built in parallel within the job count ([`package_native`],
//! [`package_wheels`]). Reading flags and the environment, and printing, are the caller's.
//!
//! `jobs` ([`BuildSettings::jobs`], `--jobs`) is the whole thread budget: archives unpack and
//! packages build on a pool of that many threads, and the native packages share it again as
//! compression threads in proportion to their bytes (the bytes written do not depend on it).
//! A native package that fails is reported ([`Summary::failed`]) and the others still build;
//! wheels are all attempted, then the first that failed (in plan order) is the run's error,
//! before the devel wheel and the sdist. The archives unpack into a `.quarry-artifacts-*`
//! directory under the destination, removed when the [`StagedArtifacts`] is dropped. A wheel's
//! platform tag is the caller's choice; `quarry package` takes `ROCM_SDK_WHEEL_PLATFORM_TAG`,
//! else [`artifacts_platform`] (the first shared library of the staged artifacts: a PE DLL
//! gives `win_amd64`), else the host's.

mod control;
mod log;
mod native;
mod stage;
pub mod variants;
mod wheels;

use std::path::PathBuf;

use quarry_packaging::therock::wheels::{WheelPlan, WheelPlanError};
use quarry_packaging::therock::{Plan, PlanError};

pub use control::{DEFAULT_INSTALL_PREFIX, deb_control, debian_docs_for, install_prefix, rpm_spec};
pub use log::LOGS_DIR;
pub use native::{Built, NativeOptions, Summary, package_native};
pub use stage::{StagedArtifacts, clean_build};
pub use variants::{VariantRequest, VariantsError, variant_json};
pub use wheels::{WheelSummary, artifacts_platform, package_wheels};

use crate::deb::DebBuildError;
use crate::python::PythonBuildError;
use crate::rpath::{RpathError, RpathPolicy};
use crate::rpm::RpmBuildError;
use crate::tree::TreeError;

/// Where packages go and how they are built, for every kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildSettings {
    /// The destination directory (created if missing; the scratch directory goes under it).
    pub dest_dir: PathBuf,
    /// Every timestamp in the packages (`SOURCE_DATE_EPOCH`).
    pub epoch: u64,
    /// Archives unpacked and packages built at once (at least one).
    pub jobs: usize,
    /// RUNPATH made RPATH in packaged ELF files (TheRock's default), or kept (`--runpath-pkg`).
    pub rpath: RpathPolicy,
}

/// What the driver is doing, for logs and progress bars. Called from worker threads.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// This many artifact archives are being unpacked into the scratch directory.
    Unpacking { archives: usize },
    /// The native packages are planned and installed under `prefix`.
    Planned { plan: &'a Plan, prefix: &'a str, kpack: bool },
    /// The rocm-sdk distributions are planned.
    PlannedWheels { plan: &'a WheelPlan, kpack: bool },
    /// A package build starts.
    Started { package: &'a str },
    /// A package build is over (built or failed).
    Finished { package: &'a str },
}

/// A sink for [`Progress`] events.
pub type OnProgress<'a> = &'a (dyn Fn(Progress<'_>) + Sync);

/// Why packaging could not run, or one package could not be built (a single package that
/// fails is reported in [`Summary::failed`], the others are still built).
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    #[error("{}: the artifacts directory does not exist", .0.display())]
    NoArtifacts(PathBuf),
    #[error("creating {}", path.display())]
    CreateDest { path: PathBuf, source: std::io::Error },
    #[error("reading {}", path.display())]
    ReadDir { path: PathBuf, source: std::io::Error },
    #[error("artifact archives refused:\n  {}", .0.join("\n  "))]
    Refused(Vec<String>),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Tree(#[from] TreeError),
    #[error(transparent)]
    Deb(#[from] DebBuildError),
    #[error(transparent)]
    Rpm(#[from] RpmBuildError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    WheelPlan(#[from] WheelPlanError),
    #[error(transparent)]
    Rpath(#[from] RpathError),
    #[error(transparent)]
    Variants(#[from] variants::VariantsError),
    #[error(transparent)]
    Pool(#[from] rayon::ThreadPoolBuildError),
    #[error("building {file}")]
    Wheel { file: String, source: PythonBuildError },
    #[error("building the rocm sdist")]
    Sdist(#[source] PythonBuildError),
}

/// A thread pool of `jobs` workers (at least one).
fn pool(jobs: usize) -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new().num_threads(jobs.max(1)).build()
}

/// `error` and its sources joined by `: `, as the CLI prints an error chain.
fn chain(error: &dyn std::error::Error) -> String {
    std::iter::successors(Some(error), |e| e.source()).map(ToString::to_string).collect::<Vec<_>>().join(": ")
}
