//! `quarry upload`: flags, CI environment, progress bars and printing over `quarry_upload`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use quarry_upload::{Destination, FileProgress, Progress, RunTarget, ServerClient, ServerSummary, UploadKind};

#[derive(Debug, Args)]
pub(crate) struct UploadArgs {
    /// Files or directories to upload (a directory's files keep their relative paths).
    #[arg(required = true)]
    pub(super) files: Vec<PathBuf>,
    /// Destination: a Quarry server's pip root URL (http://HOST/RUN-linux/python/), or a store
    /// prefix (s3://bucket/RUN-linux/python/, or a local directory). Without it, the S3 key is
    /// computed from --run-id, --platform and --kind, and the bucket as TheRock chooses it.
    #[arg(long)]
    pub(super) to: Option<String>,
    /// Run id for the computed destination (`{run}-{platform}/…`).
    #[arg(long, env = "GITHUB_RUN_ID")]
    pub(super) run_id: Option<String>,
    /// Platform for the computed destination (default: this machine's, linux or windows).
    #[arg(long, default_value = if cfg!(windows) { "windows" } else { "linux" })]
    pub(super) platform: String,
    /// What is uploaded: python, deb, rpm or artifacts (decides the key prefix under the run,
    /// and which index URL is reported). Default: from the --to prefix (`…/python/…`,
    /// `…/packages/deb/…`, `…/packages/rpm/…`, else artifacts), python without --to.
    #[arg(long, value_enum)]
    pub(super) kind: Option<KindArg>,
    /// Bucket for the computed destination (default: from RELEASE_TYPE and GITHUB_REPOSITORY).
    #[arg(long)]
    pub(super) bucket: Option<String>,
    /// The run is a pull request from a fork (uses the external bucket).
    #[arg(long)]
    pub(super) fork: bool,
    /// File holding the upload token (else `QUARRY_TOKEN`).
    #[arg(long)]
    pub(super) token_file: Option<PathBuf>,
    /// Uploads in flight at once.
    #[arg(long, default_value_t = 4)]
    pub(super) jobs: usize,
    /// Print a JSON summary (with the find-links URL) on stdout.
    #[arg(long)]
    pub(super) json: bool,
}

/// What `--kind` takes: what is uploaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum KindArg {
    Python,
    Deb,
    Rpm,
    Artifacts,
}

impl From<KindArg> for UploadKind {
    fn from(kind: KindArg) -> Self {
        match kind {
            KindArg::Python => UploadKind::Python,
            KindArg::Deb => UploadKind::Deb,
            KindArg::Rpm => UploadKind::Rpm,
            KindArg::Artifacts => UploadKind::Artifacts,
        }
    }
}

pub(crate) async fn run(args: UploadArgs) -> anyhow::Result<()> {
    let base = match args.to.as_deref().map(Destination::parse).transpose()? {
        Some(Destination::Server(base)) => base,
        Some(Destination::Store(to)) => return super::upload_store::run(&args, to).await,
        None => return super::upload_store::run(&args, computed_destination(&args)?).await,
    };
    let token = super::read_tokens(args.token_file.as_deref())?
        .into_iter()
        .next()
        .context("no upload token: pass --token-file or set QUARRY_TOKEN")?;
    let client = ServerClient::new(base, token)?;
    let mut files = Vec::new();
    for (path, result) in args.files.iter().zip(client.upload_all(&args.files, args.jobs, &Bars::default()).await) {
        match result {
            Ok(v) => files.push(v),
            Err(e) => tracing::error!("{}: {:#}", path.display(), anyhow::Error::new(e)),
        }
    }
    let failed = args.files.len() - files.len();
    let summary = ServerSummary::new(client.base(), files)?;
    super::print(args.json, &summary, summary.text())?;
    if failed > 0 {
        bail!("{failed} of {} uploads failed", args.files.len());
    }
    Ok(())
}

/// `s3://{bucket}/{run prefix}{kind}` from the flags and the CI environment.
fn computed_destination(args: &UploadArgs) -> anyhow::Result<quarry_upload::StoreDestination> {
    let repository = std::env::var("GITHUB_REPOSITORY").unwrap_or_default();
    let release_type = std::env::var("RELEASE_TYPE").unwrap_or_default();
    let target = RunTarget {
        run_id: args.run_id.as_deref(),
        platform: &args.platform,
        kind: kind(args),
        bucket: args.bucket.as_deref(),
        release_type: &release_type,
        repository: &repository,
        fork: args.fork,
    };
    Ok(target.destination()?)
}

/// `--kind`, else what the `--to` destination holds.
pub(super) fn kind(args: &UploadArgs) -> UploadKind {
    args.kind.map(UploadKind::from).unwrap_or_else(|| quarry_upload::infer_kind(args.to.as_deref()))
}

/// Progress bars on stderr, one per file in flight.
#[derive(Default)]
pub(super) struct Bars(MultiProgress);

impl Progress for Bars {
    fn start(&self, name: &str, size: u64) -> Arc<dyn FileProgress> {
        let style = ProgressStyle::with_template("{msg:40!} {bar:30} {bytes}/{total_bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        Arc::new(Bar(self.0.add(ProgressBar::new(size).with_style(style).with_message(name.to_owned()))))
    }
}

struct Bar(ProgressBar);

impl FileProgress for Bar {
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}
