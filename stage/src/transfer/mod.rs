//! TheRock's `artifact_manager.py` (spec §3–§4) over a [`Run`]: push archives a stage's produced
//! artifact directories (manifest first, reproducible, zstd or xz) and uploads each with its
//! `.sha256sum`; fetch lists the run, picks the stage's inbound artifacts for a
//! [`GpuSelection`] (generic always; `gfx942` matches `gfx942:xnack+`; `.tar.zst` preferred),
//! downloads with retries, verifies the sidecar, and unpacks plainly, flattened or
//! bootstrapped — every member checked by `quarry-artifacts`; copy takes stages' archives from
//! another run. Per-artifact failures are listed in the reports, never dropped.

mod copy;
mod fetch;
mod push;
mod unpack;
mod writeback;

use std::collections::{BTreeMap, BTreeSet};

use quarry_artifacts::{ArchiveFormat, ArtifactError, ArtifactName, COMPONENTS};
use quarry_topology::{Topology, TopologyError};

pub use copy::{CopyOptions, CopyPlan, CopyReport, copy, copy_plan};
pub use fetch::{FetchOptions, FetchReport, NameFilter, fetch};
pub use push::{PushOptions, PushReport, push};
pub use unpack::{Source, unpack_all};

use crate::run::RunError;
use crate::{OpError, Run};

/// What can stop a push, fetch or copy as a whole (single artifacts fail into the reports).
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    /// An unknown stage (bad input).
    #[error("stage {stage}")]
    Stage { stage: String, source: TopologyError },
    #[error("excluded artifact {0:?} is not an artifact of the topology")]
    UnknownArtifact(String),
    #[error("excluded component {component:?} is not one of {}", COMPONENTS.join(", "))]
    UnknownComponent { component: String },
    #[error(transparent)]
    Op(#[from] OpError),
    #[error("{what}")]
    Artifact { what: String, source: ArtifactError },
    #[error("{key}: sha256 {actual} does not match its sidecar's {expected}")]
    Mismatch { key: String, actual: String, expected: String },
    #[error("{0} holds no sha256")]
    NoSha256(String),
    #[error("the source run is this run ({0})")]
    SameRun(String),
    #[error("starting the unpack workers")]
    Pool(#[from] rayon::ThreadPoolBuildError),
    #[error("a worker task")]
    Join(#[from] tokio::task::JoinError),
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Which GPU-specific archives to take besides the generic ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuSelection {
    /// GPU families or targets (`gfx942` also matches `gfx942:xnack+`).
    pub families: Vec<String>,
    /// Specific targets.
    pub targets: Vec<String>,
    /// Only target-neutral artifacts.
    pub generic_only: bool,
    /// Also match each family's gfx targets from the built-in table (kpack-split artifacts are
    /// named per target); unknown names just match nothing more.
    pub expand_families: bool,
}

/// One archive moved: the artifact, the file name in the run, its size and sha256.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Moved {
    /// `{name}_{component}_{target}`.
    pub artifact: String,
    /// The archive's file name in the run.
    pub file: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its sha256 (hex).
    pub sha256: String,
}

/// The artifacts a stage produces (`inbound == false`) or fetches; `all`: every topology
/// artifact.
pub fn stage_artifacts(topology: &Topology, stage: &str, inbound: bool) -> Result<BTreeSet<String>, TransferError> {
    let result = match (stage, inbound) {
        ("all", _) => return Ok(topology.artifacts.keys().cloned().collect()),
        (stage, false) => topology.produced(stage),
        (stage, true) => topology.inbound(stage),
    };
    result.map_err(|source| TransferError::Stage { stage: stage.to_owned(), source })
}

/// Which listed archives a fetch takes: artifacts in `wanted`, components not excluded, generic
/// or matching the selection; `.tar.zst` over `.tar.xz`.
pub fn select(
    listed: &[String],
    wanted: &BTreeSet<String>,
    gpus: &GpuSelection,
    excluded_components: &BTreeSet<String>,
) -> BTreeMap<ArtifactName, ArchiveFormat> {
    let mut families: BTreeSet<String> =
        gpus.families.iter().chain(&gpus.targets).map(|t| t.split(':').next().unwrap_or_default().to_owned()).collect();
    if gpus.expand_families {
        let table = quarry_topology::families::AmdgpuTargets::builtin();
        let map = table.family_map();
        for family in &gpus.families {
            families.extend(map.get(family.as_str()).into_iter().flatten().map(|t| (*t).to_owned()));
        }
    }
    let any_target = families.is_empty() && !gpus.generic_only;
    let mut chosen: BTreeMap<ArtifactName, ArchiveFormat> = BTreeMap::new();
    for file in listed {
        let Some((name, format)) = ArtifactName::parse_archive(file) else { continue };
        let target_ok = name.is_generic() || any_target || families.contains(name.base_target());
        if wanted.contains(&name.name) && !excluded_components.contains(&name.component) && target_ok {
            let slot = chosen.entry(name).or_insert(format);
            *slot = (*slot).min(format);
        }
    }
    chosen
}

/// The run's file names (`what failed` names the listing).
async fn listed(run: &Run, prefix: &str) -> Result<Vec<String>, TransferError> {
    Ok(run.listed(prefix).await.map_err(crate::store(format!("listing {prefix}")))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(families: &[&str]) -> GpuSelection {
        GpuSelection { families: families.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn selection_matches_targets_and_prefers_zstd() {
        let listed: Vec<String> = [
            "blas_lib_generic.tar.xz",
            "blas_lib_generic.tar.zst",
            "blas_lib_generic.tar.zst.sha256sum",
            "blas_lib_gfx942:xnack+.tar.zst",
            "blas_lib_gfx1100.tar.zst",
            "blas_dev_generic.tar.zst",
            "fft_lib_generic.tar.zst",
            "index.html",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let wanted: BTreeSet<String> = ["blas".to_owned()].into();
        let chosen = select(&listed, &wanted, &gpus(&["gfx942"]), &["dev".to_owned()].into());
        let names: Vec<String> = chosen.iter().map(|(n, f)| n.archive_name(*f)).collect();
        assert_eq!(names, ["blas_lib_generic.tar.zst", "blas_lib_gfx942:xnack+.tar.zst"]);
        let generic = GpuSelection { generic_only: true, ..Default::default() };
        assert_eq!(select(&listed, &wanted, &generic, &BTreeSet::new()).len(), 2);
        let all = GpuSelection::default();
        assert_eq!(select(&listed, &wanted, &all, &BTreeSet::new()).len(), 4);

        // A family matches per-target (kpack-split) archives only when expanded.
        let family = gpus(&["gfx110X-all"]);
        assert_eq!(select(&listed, &wanted, &family, &BTreeSet::new()).len(), 2);
        let expanded = GpuSelection { expand_families: true, ..family };
        let names: Vec<String> =
            select(&listed, &wanted, &expanded, &BTreeSet::new()).iter().map(|(n, f)| n.archive_name(*f)).collect();
        assert!(names.contains(&"blas_lib_gfx1100.tar.zst".to_owned()), "{names:?}");
    }
}
