//! `quarry upload` straight into a store (S3 or a local directory), as CI jobs do.

use std::sync::Arc;

use anyhow::{Context, bail};
use quarry_store::Store;
use quarry_upload::{StoreDestination, StoreOptions};

use super::upload::{Bars, UploadArgs, kind};

pub(crate) async fn run(args: &UploadArgs, destination: StoreDestination) -> anyhow::Result<()> {
    let store_url = destination.store_url.clone();
    let store: Arc<dyn Store> = quarry_store::open(&store_url).await.with_context(|| format!("opening {store_url}"))?;
    let files = quarry_upload::collect(&args.files)?;
    let public_url = quarry_store::layout::public_url_from_env;
    let options = StoreOptions { destination, kind: kind(args), jobs: args.jobs, public_url };
    let summary = quarry_upload::upload_to_store(store, files, &options, &Bars::default()).await;
    super::append_to_github_file("GITHUB_OUTPUT", &summary.github_output())?;
    super::append_to_github_file("GITHUB_STEP_SUMMARY", &summary.step_summary())?;
    super::print(args.json, &summary, summary.text())?;
    for f in &summary.failed {
        tracing::error!("{f}");
    }
    if !summary.failed.is_empty() {
        bail!("{} of {} uploads failed", summary.failed.len(), summary.failed.len() + summary.files.len());
    }
    Ok(())
}
