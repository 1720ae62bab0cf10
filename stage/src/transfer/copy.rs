//! Copy: stages' produced archives (with their sidecars) from another run into this one, e.g.
//! to reuse a baseline run's early stages, as `artifact_manager.py copy` does. The source run
//! may belong to another repository (TheRock's own runs live in another bucket than a
//! submodule repository's) or another store; on S3 each file is a server-side `CopyObject`.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures_util::StreamExt as _;
use quarry_artifacts::sidecar;
use quarry_store::{CopyMethod, Key, Store, StoreExt as _};
use quarry_topology::Topology;

use super::{GpuSelection, TransferError, select, stage_artifacts};
use quarry_store::error_chain;

use crate::{OpError, Run, RunLocation};

/// What to copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// The run to copy from.
    pub source_run_id: String,
    /// `owner/repo` of the source run (default: this run's). Another repository's run is
    /// looked for in that repository's bucket and folder, unless `source_store` names a store.
    pub source_repository: Option<String>,
    /// The store holding the source run (`s3://bucket[/prefix]` or a directory); default: this
    /// run's store, or the source repository's bucket.
    pub source_store: Option<String>,
    /// Stages whose produced artifacts are copied.
    pub stages: Vec<String>,
    /// Which GPU-specific archives to take.
    pub gpus: GpuSelection,
    /// Files copied at once.
    pub concurrency: usize,
}

impl CopyOptions {
    /// The artifact names the stages produce (an unknown stage is refused here).
    pub fn artifacts(&self, topology: &Topology) -> Result<BTreeSet<String>, TransferError> {
        let mut wanted = BTreeSet::new();
        for stage in &self.stages {
            wanted.extend(stage_artifacts(topology, stage, false)?);
        }
        Ok(wanted)
    }

    /// Where the source run lies: this run's location with the source's run id, repository
    /// and store. Another repository without a store given: that repository's default bucket
    /// (as TheRock resolves the source run's bucket), or the same local staging directory.
    pub fn source_location(&self, this: &RunLocation) -> RunLocation {
        let mut location = RunLocation { run_id: self.source_run_id.clone(), ..this.clone() };
        if let Some(repository) = &self.source_repository {
            location.github_repo = repository.clone();
            if location.local_staging_dir.is_none() {
                location.store = None;
            }
        }
        if let Some(store) = &self.source_store {
            location.store = Some(store.clone());
            location.local_staging_dir = None;
        }
        location
    }
}

/// The files a copy takes: file names under both runs' prefixes, each sidecar before its
/// archive.
#[derive(Debug, Clone)]
pub struct CopyPlan {
    /// The store holding the source run (this run's store when it is the same).
    pub source: Arc<dyn Store>,
    /// The source store's URL (`s3://bucket`, a directory).
    pub source_url: String,
    /// The source run's key prefix.
    pub source_prefix: String,
    /// File names to copy.
    pub files: Vec<String>,
}

/// What a copy did: files copied (sorted) and one line per failure.
#[derive(Debug, Clone, Default)]
pub struct CopyReport {
    /// File names copied, each with how (`server-side`, `streamed`).
    pub copied: Vec<(String, CopyMethod)>,
    /// `file: error` per file not copied.
    pub failures: Vec<String>,
}

/// Opens the source run's store, lists the run and picks the stages' archives and sidecars.
pub async fn copy_plan(run: &Run, opts: &CopyOptions) -> Result<CopyPlan, TransferError> {
    let wanted = opts.artifacts(&run.topology)?;
    let (this_url, _) = run.location.resolve()?;
    let (source_url, source_prefix) = opts.source_location(&run.location).resolve()?;
    if (&source_url, &source_prefix) == (&this_url, &run.prefix) {
        return Err(TransferError::SameRun(run.prefix.clone()));
    }
    let source = if source_url == this_url {
        run.store.clone()
    } else {
        quarry_store::open(&source_url).await.map_err(crate::store(format!("opening {source_url}")))?
    };
    let listing =
        source.list_all(&source_prefix, true).await.map_err(crate::store(format!("listing {source_prefix}")))?;
    let listed: Vec<String> =
        listing.objects.iter().filter_map(|o| o.key.as_str().strip_prefix(&source_prefix).map(str::to_owned)).collect();
    let mut files = Vec::new();
    for (name, format) in select(&listed, &wanted, &opts.gpus, &BTreeSet::new()) {
        let file = name.archive_name(format);
        let side = sidecar::sidecar_name(&file);
        if listed.contains(&side) {
            files.push(side);
        }
        files.push(file);
    }
    Ok(CopyPlan { source, source_url, source_prefix, files })
}

/// Copies the plan's files, `concurrency` at once, keeping each object's sha256 (server-side
/// where both stores are on S3).
pub async fn copy(run: &Run, plan: &CopyPlan, concurrency: usize) -> CopyReport {
    let results: Vec<(&String, Result<CopyMethod, TransferError>)> = futures_util::stream::iter(&plan.files)
        .map(|file| async move {
            let (from, to) = (format!("{}{file}", plan.source_prefix), format!("{}{file}", run.prefix));
            (file, copy_one(run, plan.source.as_ref(), from, to).await)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut report = CopyReport::default();
    for (file, result) in results {
        match result {
            Ok(method) => report.copied.push((file.clone(), method)),
            Err(e) => report.failures.push(format!("{file}: {}", error_chain(&e))),
        }
    }
    report.copied.sort_by(|a, b| a.0.cmp(&b.0));
    report
}

async fn copy_one(run: &Run, source: &dyn Store, from: String, to: String) -> Result<CopyMethod, TransferError> {
    let from_key = Key::new(from.clone()).map_err(OpError::from)?;
    let to_key = Key::new(to.clone()).map_err(OpError::from)?;
    let (_, method) = run
        .store
        .copy_from(source, &from_key, &to_key)
        .await
        .map_err(crate::store(format!("copying {from} to {to}")))?;
    Ok(method)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LocationFlags;

    #[test]
    fn source_runs_of_other_repositories_live_in_their_buckets() {
        let vars = |name: &str| (name == "GITHUB_REPOSITORY").then(|| "ROCm/rocm-libraries".to_owned());
        let flags = LocationFlags { run_id: Some("2".into()), platform: Some("linux".into()), ..Default::default() };
        let this = RunLocation::with_defaults(flags, vars);
        assert_eq!(this.resolve().unwrap().1, "ROCm-rocm-libraries/2-linux/");
        let opts = |repository: Option<&str>, store: Option<&str>| CopyOptions {
            source_run_id: "1".into(),
            source_repository: repository.map(Into::into),
            source_store: store.map(Into::into),
            stages: Vec::new(),
            gpus: GpuSelection::default(),
            concurrency: 1,
        };
        let resolve = |o: CopyOptions| o.source_location(&this).resolve().unwrap();
        assert_eq!(
            resolve(opts(None, None)),
            ("s3://therock-ci-artifacts-external".into(), "ROCm-rocm-libraries/1-linux/".into())
        );
        assert_eq!(resolve(opts(Some("ROCm/TheRock"), None)), ("s3://therock-ci-artifacts".into(), "1-linux/".into()));
        assert_eq!(
            resolve(opts(Some("ROCm/TheRock"), Some("s3://other/base"))),
            ("s3://other".into(), "base/1-linux/".into())
        );
        let staged = RunLocation { local_staging_dir: Some("/tmp/s".into()), ..this.clone() };
        assert_eq!(
            opts(Some("ROCm/TheRock"), None).source_location(&staged).resolve().unwrap(),
            ("/tmp/s".into(), "1-linux/".into())
        );
    }
}
