//! `quarry upload` straight into a store (S3 or a local directory), as CI jobs do.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use quarry_store::Store;
use quarry_upload::{PythonLayout, StoreDestination, StoreOptions, UploadKind};

use super::upload::{Bars, UploadArgs, dry_run, kind};

/// Upload `files` (path, path below the destination) to `destination`; `computed`: the
/// destination is TheRock's run location, so a Python upload also reports `kpack_split` as
/// `upload_python_packages.py` does.
pub(crate) async fn run(
    args: &UploadArgs,
    destination: StoreDestination,
    files: Vec<(PathBuf, String)>,
    computed: bool,
) -> anyhow::Result<()> {
    let store_url = destination.store_url.clone();
    if args.dry_run {
        let base = store_url.trim_end_matches('/');
        let targets = files.into_iter().map(|(path, rel)| (format!("{base}/{}", destination.key(&rel)), path));
        return dry_run(args.json.json, targets.collect());
    }
    let store: Arc<dyn Store> = quarry_store::open(&store_url).await.with_context(|| format!("opening {store_url}"))?;
    // The first upload into a run gives it its manifest (commit, branch, workflow), so
    // `quarry runs find --commit` finds it.
    if let Some(run_prefix) = run_prefix(&destination.prefix) {
        super::runs::ensure_manifest_at(store.as_ref(), &run_prefix, None).await;
    }
    let kind = kind(args);
    let python_layout =
        (computed && kind == UploadKind::Python).then(|| PythonLayout::of(&files, args.artifact_group.is_some()));
    let public_url = quarry_store::layout::public_url_from_env;
    let options = StoreOptions { destination, kind, jobs: args.jobs, public_url, python_layout };
    let summary = quarry_upload::upload_to_store(store, files, &options, &Bars::default()).await;
    super::append_to_github_file("GITHUB_OUTPUT", &summary.github_output())?;
    super::append_to_github_file("GITHUB_STEP_SUMMARY", &summary.step_summary())?;
    super::print(args.json.json, &summary, summary.text())?;
    for f in &summary.failed {
        tracing::error!("{f}");
    }
    if !summary.failed.is_empty() {
        bail!("{} of {} uploads failed", summary.failed.len(), summary.failed.len() + summary.files.len());
    }
    Ok(())
}

/// The prefix of the run `prefix` lies in (through its `{run}-{platform}` segment), if any.
fn run_prefix(prefix: &str) -> Option<String> {
    let (index, _) = quarry_store::layout::find_run(prefix)?;
    let segments: Vec<&str> = prefix.split('/').take(index + 1).collect();
    Some(format!("{}/", segments.join("/")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_run_prefix_of_a_destination() {
        assert_eq!(super::run_prefix("123-linux/python/").as_deref(), Some("123-linux/"));
        assert_eq!(
            super::run_prefix("ROCm-rocm-libraries/77-windows/logs/g/").as_deref(),
            Some("ROCm-rocm-libraries/77-windows/")
        );
        assert_eq!(super::run_prefix("nightly/v2/"), None);
        assert_eq!(super::run_prefix(""), None);
    }
}
