//! The stage stamp, `<build-dir>/.quarry-stage.json`: what a build was made from (a
//! [`Fingerprint`]: inbound archive → sha256, the state of its sources, its configure
//! arguments, the toolchain) and what it pushed. A stage is reusable when its fingerprint is
//! unchanged and every output is still staged.
//!
//! Sources are the stage's source sets from the topology (the source sets of its artifact
//! groups: submodules by `.gitmodules` name, path prefixes, external sources' paths) plus the
//! superproject's own files outside every source set (the build system all stages share),
//! each read by [`crate::checkout::source_state`]: git tree ids and the uncommitted changes
//! where git knows them, content hashes otherwise.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quarry_artifacts::sidecar;
use quarry_store::StoreExt as _;

use super::BuildError;
use crate::Run;
use crate::transfer::{GpuSelection, select};

const STAMP: &str = ".quarry-stage.json";

/// What a stage build is made from.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Fingerprint {
    /// Inbound archive → sha256.
    pub inputs: BTreeMap<String, String>,
    /// `superproject` and `{source set}/{path}` → its state (`git TREE [dirty SHA]`, `files
    /// SHA`, `missing`).
    #[serde(default)]
    pub sources: BTreeMap<String, String>,
    /// The configure step's arguments.
    #[serde(default)]
    pub configure: Vec<String>,
    /// The build tools' versions and the compiler variables.
    #[serde(default)]
    pub toolchain: BTreeMap<String, String>,
}

impl Fingerprint {
    /// What differs from `old`, for the log: `inputs`, `sources`, `configure`, `toolchain`.
    fn changed(&self, old: &Fingerprint) -> Vec<&'static str> {
        let mut changed = Vec::new();
        if self.inputs != old.inputs {
            changed.push("inputs");
        }
        if self.sources != old.sources {
            changed.push("sources");
        }
        if self.configure != old.configure {
            changed.push("configure arguments");
        }
        if self.toolchain != old.toolchain {
            changed.push("toolchain");
        }
        changed
    }
}

#[derive(Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Stamp {
    #[serde(flatten)]
    fingerprint: Fingerprint,
    /// Archives this stage pushed.
    outputs: Vec<String>,
}

/// The state of the stage's sources below `source_dir` (`excluded`: build trees and staging
/// directories that may lie inside it). Runs git: call it off the async threads.
pub(super) fn sources(
    topology: &quarry_topology::Topology,
    stage: &str,
    source_dir: &Path,
    excluded: &[PathBuf],
) -> BTreeMap<String, String> {
    use crate::checkout::{source_state, submodule_paths_by_name, superproject_state};
    let by_name = submodule_paths_by_name(source_dir);
    let paths = |set: &quarry_topology::SourceSet| -> Vec<String> {
        let submodules = set.submodules.iter().map(|n| by_name.get(n).cloned().unwrap_or_else(|| n.clone()));
        let external = set.external_git_sources.iter().map(|e| e.path.clone());
        let prefixes = set.path_prefixes.iter().map(|p| p.trim_matches('/').to_owned());
        submodules.chain(external).chain(prefixes).collect()
    };
    let claimed: Vec<String> = topology.source_sets.values().flat_map(&paths).collect();
    let mut out = BTreeMap::new();
    out.insert("superproject".to_owned(), superproject_state(source_dir, &claimed, excluded));
    let groups = topology.build_stages.get(stage).map(|s| s.artifact_groups.as_slice()).unwrap_or_default();
    let sets: BTreeSet<&String> =
        groups.iter().filter_map(|g| topology.artifact_groups.get(g)).flat_map(|g| &g.source_sets).collect();
    for name in sets {
        let Some(set) = topology.source_sets.get(name) else { continue };
        for path in paths(set) {
            out.insert(format!("{name}/{path}"), source_state(source_dir, &path));
        }
    }
    out
}

/// The sha256 of every archive the stage's fetch takes (the same selection), from the staged
/// sidecars (the object's ETag when a sidecar is missing).
pub(super) async fn inbound_digests(
    run: &Run,
    stage: &str,
    gpus: &GpuSelection,
) -> Result<BTreeMap<String, String>, BuildError> {
    let wanted = run.topology.inbound(stage).map_err(|source| BuildError::Stage { stage: stage.to_owned(), source })?;
    let listed = run.listed(&run.prefix).await.map_err(crate::store(format!("listing {}", run.prefix)))?;
    let mut out = BTreeMap::new();
    for (name, format) in select(&listed, &wanted, gpus, &BTreeSet::new()) {
        let file = name.archive_name(format);
        let sha = match run.store.get_bytes(&run.key(&sidecar::sidecar_name(&file))?, 4096).await {
            Ok((_, bytes)) => sidecar::parse(&String::from_utf8_lossy(&bytes)).unwrap_or_default(),
            Err(_) => {
                let key = run.key(&file)?;
                let head = run.store.head(&key).await;
                head.map_err(crate::store(format!("reading {key}")))?.etag
            }
        };
        out.insert(file, sha);
    }
    Ok(out)
}

/// The stamp's outputs when the stage can be reused: the same fingerprint, outputs all staged.
pub(super) async fn reusable(
    run: &Run,
    build_dir: &Path,
    fingerprint: &Fingerprint,
) -> Result<Option<Vec<String>>, BuildError> {
    let Ok(text) = std::fs::read_to_string(build_dir.join(STAMP)) else { return Ok(None) };
    let Ok(stamp) = serde_json::from_str::<Stamp>(&text) else { return Ok(None) };
    let changed = fingerprint.changed(&stamp.fingerprint);
    if !changed.is_empty() {
        tracing::info!(build_dir = %build_dir.display(), "rebuilding: {} changed", changed.join(", "));
        return Ok(None);
    }
    if stamp.outputs.is_empty() {
        return Ok(None);
    }
    for file in &stamp.outputs {
        let key = run.key(file)?;
        match run.store.head(&key).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(crate::store(format!("reading {key}"))(e).into()),
        }
    }
    Ok(Some(stamp.outputs))
}

/// Records what a build was made from and pushed.
pub(super) fn write(build_dir: &Path, fingerprint: Fingerprint, outputs: &[String]) -> Result<(), BuildError> {
    let path = build_dir.join(STAMP);
    let stamp = Stamp { fingerprint, outputs: outputs.to_vec() };
    let text = serde_json::to_vec_pretty(&stamp).map_err(std::io::Error::from);
    text.and_then(|text| std::fs::write(&path, text)).map_err(crate::io(format!("writing {}", path.display())))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let fingerprint = fingerprint("ab");
        write(dir.path(), fingerprint.clone(), &["b_lib_generic.tar.zst".to_owned()]).unwrap();
        let stamp: Stamp = serde_json::from_str(&std::fs::read_to_string(dir.path().join(STAMP)).unwrap()).unwrap();
        assert_eq!(stamp, Stamp { fingerprint: fingerprint.clone(), outputs: vec!["b_lib_generic.tar.zst".into()] });
        // A stamp written before sources were recorded reads as one with none: a rebuild.
        let old: Stamp = serde_json::from_str(r#"{"inputs": {}, "outputs": ["x"]}"#).unwrap();
        assert_eq!(fingerprint.changed(&old.fingerprint), ["inputs", "sources", "configure arguments", "toolchain"]);
    }

    fn fingerprint(sha: &str) -> Fingerprint {
        Fingerprint {
            inputs: [("a_lib_generic.tar.zst".to_owned(), sha.repeat(32))].into(),
            sources: [("superproject".to_owned(), "git 1234".to_owned())].into(),
            configure: vec!["-G".into(), "Ninja".into()],
            toolchain: [("cmake".to_owned(), "cmake version 3.31".to_owned())].into(),
        }
    }

    #[tokio::test]
    async fn a_stage_is_reused_only_with_the_same_inputs_and_every_output_staged() {
        use quarry_store::{PutOptions, StoreExt as _};
        let dir = tempfile::tempdir().unwrap();
        let location = crate::RunLocation {
            run_id: "1".into(),
            platform: "linux".into(),
            local_staging_dir: None,
            store: Some("memory://".into()),
            github_repo: "ROCm/TheRock".into(),
            release_type: "ci".into(),
        };
        let run = Run::open(&location, quarry_topology::Topology::default()).await.unwrap();
        let inputs = fingerprint("ab");
        let output = "b_lib_generic.tar.zst".to_owned();
        assert_eq!(reusable(&run, dir.path(), &inputs).await.unwrap(), None, "no stamp");
        write(dir.path(), inputs.clone(), std::slice::from_ref(&output)).unwrap();
        assert_eq!(reusable(&run, dir.path(), &inputs).await.unwrap(), None, "output not staged");
        run.store.put_bytes(&run.key(&output).unwrap(), "x".into(), PutOptions::default()).await.unwrap();
        assert_eq!(reusable(&run, dir.path(), &inputs).await.unwrap(), Some(vec![output]));
        assert_eq!(reusable(&run, dir.path(), &fingerprint("cd")).await.unwrap(), None, "inputs changed");
        let mut edited = fingerprint("ab");
        edited.sources.insert("superproject".into(), "git 1234 dirty 5678".into());
        assert_eq!(reusable(&run, dir.path(), &edited).await.unwrap(), None, "sources changed");
        let configured = Fingerprint { configure: vec![], ..fingerprint("ab") };
        assert_eq!(reusable(&run, dir.path(), &configured).await.unwrap(), None, "arguments changed");
        let tools = Fingerprint { toolchain: BTreeMap::new(), ..fingerprint("ab") };
        assert_eq!(reusable(&run, dir.path(), &tools).await.unwrap(), None, "toolchain changed");
    }
}
