//! The stage stamp, `<build-dir>/.quarry-stage.json`: what a build was made from (inbound
//! archive → sha256) and what it pushed. A stage is reusable when its inputs are unchanged and
//! every output is still staged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use quarry_artifacts::sidecar;
use quarry_store::StoreExt as _;

use super::BuildError;
use crate::Run;
use crate::transfer::{GpuSelection, select};

const STAMP: &str = ".quarry-stage.json";

#[derive(Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Stamp {
    /// Inbound archive → sha256.
    inputs: BTreeMap<String, String>,
    /// Archives this stage pushed.
    outputs: Vec<String>,
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

/// The stamp's outputs when the stage can be reused: same inputs, outputs all staged.
pub(super) async fn reusable(
    run: &Run,
    build_dir: &Path,
    inputs: &BTreeMap<String, String>,
) -> Result<Option<Vec<String>>, BuildError> {
    let Ok(text) = std::fs::read_to_string(build_dir.join(STAMP)) else { return Ok(None) };
    let Ok(stamp) = serde_json::from_str::<Stamp>(&text) else { return Ok(None) };
    if stamp.inputs != *inputs || stamp.outputs.is_empty() {
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
pub(super) fn write(build_dir: &Path, inputs: BTreeMap<String, String>, outputs: &[String]) -> Result<(), BuildError> {
    let path = build_dir.join(STAMP);
    let stamp = Stamp { inputs, outputs: outputs.to_vec() };
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
        let inputs: BTreeMap<String, String> = [("a_lib_generic.tar.zst".to_owned(), "ab".repeat(32))].into();
        write(dir.path(), inputs.clone(), &["b_lib_generic.tar.zst".to_owned()]).unwrap();
        let stamp: Stamp = serde_json::from_str(&std::fs::read_to_string(dir.path().join(STAMP)).unwrap()).unwrap();
        assert_eq!(stamp, Stamp { inputs, outputs: vec!["b_lib_generic.tar.zst".into()] });
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
        let inputs: BTreeMap<String, String> = [("a_lib_generic.tar.zst".to_owned(), "ab".repeat(32))].into();
        let output = "b_lib_generic.tar.zst".to_owned();
        assert_eq!(reusable(&run, dir.path(), &inputs).await.unwrap(), None, "no stamp");
        write(dir.path(), inputs.clone(), std::slice::from_ref(&output)).unwrap();
        assert_eq!(reusable(&run, dir.path(), &inputs).await.unwrap(), None, "output not staged");
        run.store.put_bytes(&run.key(&output).unwrap(), "x".into(), PutOptions::default()).await.unwrap();
        assert_eq!(reusable(&run, dir.path(), &inputs).await.unwrap(), Some(vec![output]));
        let changed: BTreeMap<String, String> = [("a_lib_generic.tar.zst".to_owned(), "cd".repeat(32))].into();
        assert_eq!(reusable(&run, dir.path(), &changed).await.unwrap(), None, "inputs changed");
    }
}
