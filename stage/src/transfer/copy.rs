//! Copy: stages' produced archives (with their sidecars) from another run of the same store and
//! platform into this one, e.g. to reuse a baseline run's early stages.

use std::collections::BTreeSet;

use futures_util::StreamExt as _;
use quarry_artifacts::sidecar;
use quarry_store::{Key, PutOptions};
use quarry_topology::Topology;

use super::{GpuSelection, TransferError, listed, select, stage_artifacts};
use quarry_store::error_chain;

use crate::{OpError, Run};

/// What to copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// The run to copy from.
    pub source_run_id: String,
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
}

/// The files a copy takes: file names under both runs' prefixes, each sidecar before its
/// archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    /// The source run's key prefix.
    pub source_prefix: String,
    /// File names to copy.
    pub files: Vec<String>,
}

/// What a copy did: files copied (sorted) and one line per failure.
#[derive(Debug, Clone, Default)]
pub struct CopyReport {
    /// File names copied.
    pub copied: Vec<String>,
    /// `file: error` per file not copied.
    pub failures: Vec<String>,
}

/// Lists the source run and picks the stages' archives and sidecars.
pub async fn copy_plan(run: &Run, opts: &CopyOptions) -> Result<CopyPlan, TransferError> {
    let wanted = opts.artifacts(&run.topology)?;
    let source_prefix = run.other_prefix(&opts.source_run_id)?;
    if source_prefix == run.prefix {
        return Err(TransferError::SameRun(run.prefix.clone()));
    }
    let listed = listed(run, &source_prefix).await?;
    let mut files = Vec::new();
    for (name, format) in select(&listed, &wanted, &opts.gpus, &BTreeSet::new()) {
        let file = name.archive_name(format);
        let side = sidecar::sidecar_name(&file);
        if listed.contains(&side) {
            files.push(side);
        }
        files.push(file);
    }
    Ok(CopyPlan { source_prefix, files })
}

/// Copies the plan's files, `concurrency` at once, keeping each object's sha256.
pub async fn copy(run: &Run, plan: &CopyPlan, concurrency: usize) -> CopyReport {
    let results: Vec<(&String, Result<(), TransferError>)> = futures_util::stream::iter(&plan.files)
        .map(|file| async move {
            let (from, to) = (format!("{}{file}", plan.source_prefix), format!("{}{file}", run.prefix));
            (file, copy_one(run, from, to).await)
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let mut report = CopyReport::default();
    for (file, result) in results {
        match result {
            Ok(()) => report.copied.push(file.clone()),
            Err(e) => report.failures.push(format!("{file}: {}", error_chain(&e))),
        }
    }
    report.copied.sort();
    report
}

async fn copy_one(run: &Run, from: String, to: String) -> Result<(), TransferError> {
    let object = run
        .store
        .get(&Key::new(from.clone()).map_err(OpError::from)?, None)
        .await
        .map_err(crate::store(format!("reading {from}")))?;
    let options = PutOptions { sha256: object.meta.sha256.clone(), ..PutOptions::default() };
    run.store
        .put(&Key::new(to.clone()).map_err(OpError::from)?, object.body, options)
        .await
        .map_err(crate::store(format!("writing {to}")))?;
    Ok(())
}
