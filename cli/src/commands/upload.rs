//! `quarry upload`: flags, CI environment, progress bars and printing over `quarry_upload`,
//! to a server (`--to URL`) or straight into a store (S3 or a local directory), as CI jobs do.
//! The upload scripts' spellings are taken too ([`TheRockUploadFlags`], `--pkg-type` for
//! `--kind`; `docs/therock.md`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use quarry_store::Store;
use quarry_upload::wait::WrittenFile;
use quarry_upload::{
    Destination, FileProgress, Progress, PythonLayout, RunTarget, ServerClient, ServerOutcome, ServerSummary,
    StoreDestination, StoreOptions, UploadKind,
};

use super::UsageError;
use super::args::JsonArg;

#[derive(Debug, Args)]
pub(crate) struct UploadArgs {
    /// Files or directories to upload (a directory's files keep their relative paths). As
    /// TheRock's upload steps read them, a directory holding `dist/` uploads `dist/` (python),
    /// one holding `logs/` uploads `logs/` (logs, raw `ccache/` logs left out).
    #[arg(required_unless_present = "input_packages_dir")]
    pub(super) files: Vec<PathBuf>,
    /// Destination: a Quarry server's pip root URL (http://HOST/RUN-linux/python/), or a store
    /// prefix (s3://bucket/RUN-linux/python/, or a local directory). Without it, the S3 key is
    /// computed from --run-id, --platform and --kind, and the bucket as TheRock chooses it.
    #[arg(long)]
    pub(super) to: Option<String>,
    /// Run id for the computed destination (`{run}-{platform}/…`).
    #[arg(long, env = "GITHUB_RUN_ID")]
    pub(super) run_id: Option<String>,
    /// Platform for the computed destination (default: this machine's, `linux` or `windows`).
    #[arg(long)]
    pub(super) platform: Option<String>,
    /// What is uploaded: python, deb, rpm, artifacts or logs (decides the key prefix under the
    /// run, and which index URL is reported). Default: from the --to prefix (`…/python/…`,
    /// `…/packages/deb/…`, `…/packages/rpm/…`, `…/logs/…`, else artifacts), python without --to.
    #[arg(long, value_enum, alias = "pkg-type")]
    pub(super) kind: Option<KindArg>,
    /// The artifact group (`gfx94X-dcgpu`; `stage/family` for multi-arch logs): files go one
    /// directory deeper, `python/{group}/` or `logs/{group}/`. Without it a Python upload is
    /// multi-arch (`kpack_split` says whether every wheel lies at the top).
    #[arg(long)]
    pub(super) artifact_group: Option<String>,
    /// Print every key (or URL) that would be written, and write nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Bucket for the computed destination (default: from RELEASE_TYPE and GITHUB_REPOSITORY).
    #[arg(long)]
    pub(super) bucket: Option<String>,
    /// The run is a pull request from a fork (uses the external bucket).
    #[arg(long)]
    pub(super) fork: bool,
    /// File holding the upload token (else `QUARRY_TOKEN`; else, in GitHub Actions with
    /// `id-token: write`, one minted by the server's trusted publishing).
    #[arg(long)]
    pub(super) token_file: Option<PathBuf>,
    /// Uploads in flight at once.
    #[arg(long, default_value_t = 4)]
    pub(super) jobs: usize,
    /// A file whose name already exists with other bytes is left as stored (said on stderr and
    /// listed under `skipped` in --json) and the upload succeeds, as twine's flag of the same
    /// name (reruns of a rebuilt job). Without it such a file fails the upload. The same bytes
    /// already stored are never an error.
    #[arg(long)]
    pub(super) skip_existing: bool,
    /// Return only once the indexes clients read (simple and find-links pages, apt `Packages`,
    /// dnf primary metadata, listings) list every uploaded file with its sha256, or fail after
    /// SECONDS [default: 300] naming what is missing: on S3 the Lambda indexes asynchronously.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "300")]
    pub(super) wait: Option<u64>,
    #[command(flatten)]
    pub(super) json: JsonArg,
    #[command(flatten)]
    pub(super) therock: TheRockUploadFlags,
}

/// The upload scripts' own spellings, taken with their meaning (`docs/therock.md`):
/// upload_python_packages.py's and upload_package_repo.py's.
#[derive(Debug, Default, Args)]
pub(crate) struct TheRockUploadFlags {
    /// A directory to upload, as FILES (`--package-dir` is the same).
    #[arg(long, alias = "package-dir", value_name = "DIR", hide_short_help = true)]
    pub(super) input_packages_dir: Vec<PathBuf>,
    /// A multi-arch Python upload: no artifact group in the path (--artifact-group ignored).
    #[arg(long, hide_short_help = true)]
    pub(super) multiarch: bool,
    /// Write into this local directory instead of the bucket, at the computed keys
    /// (`{dir}/{run}-{platform}/python/…`).
    #[arg(long, value_name = "DIR", hide_short_help = true, conflicts_with_all = ["to", "bucket"])]
    pub(super) output_dir: Option<PathBuf>,
}

/// What `--kind` takes: what is uploaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum KindArg {
    Python,
    Deb,
    Rpm,
    Artifacts,
    Logs,
}

impl From<KindArg> for UploadKind {
    fn from(kind: KindArg) -> Self {
        match kind {
            KindArg::Python => UploadKind::Python,
            KindArg::Deb => UploadKind::Deb,
            KindArg::Rpm => UploadKind::Rpm,
            KindArg::Artifacts => UploadKind::Artifacts,
            KindArg::Logs => UploadKind::Logs,
        }
    }
}

pub(crate) async fn run(mut args: UploadArgs) -> anyhow::Result<()> {
    args.files.append(&mut args.therock.input_packages_dir);
    if args.therock.multiarch {
        args.artifact_group = None;
    }
    if let Some(group) = &args.artifact_group {
        quarry_upload::check_group(group).map_err(|e| UsageError::new(e.to_string()))?;
    }
    let kind = kind(&args);
    let files = quarry_upload::collect_inputs(&args.files, kind)?;
    if files.is_empty() {
        bail!("nothing to upload: no files in {}", shown(&args.files));
    }
    let group = |d: StoreDestination| match &args.artifact_group {
        Some(g) => d.with_group(g),
        None => d,
    };
    let base = match args.to.as_deref().map(Destination::parse).transpose()? {
        Some(Destination::Server(base)) => match &args.artifact_group {
            Some(g) => base.join(&format!("{}/", g.trim_matches('/'))).context("the artifact group's URL")?,
            None => base,
        },
        Some(Destination::Store(to)) => return to_store(&args, group(to), files, false).await,
        None => return to_store(&args, computed_destination(&args)?, files, true).await,
    };
    // What a server takes is judged before any credential is looked for.
    check_packages(&files)?;
    if args.dry_run {
        let client = ServerClient::new(base, String::new())?;
        let targets = files.iter().map(|(path, rel)| Ok((client.url_of(rel)?.to_string(), path.clone())));
        return dry_run(args.json.json, targets.collect::<anyhow::Result<_>>()?);
    }
    let token = match super::read_tokens(args.token_file.as_deref())?.into_iter().next() {
        Some(token) => token,
        None => match id_token_request() {
            Some(request) => {
                let token = quarry_upload::http::mint_upload_token(&base, &request)
                    .await
                    .context("trusted publishing (ACTIONS_ID_TOKEN_REQUEST_URL is set, no token given)")?;
                tracing::info!("minted an upload token by trusted publishing");
                token
            }
            None => bail!(
                "no upload token: pass --token-file, set QUARRY_TOKEN, or run in GitHub Actions with \
                 `permissions: id-token: write` for trusted publishing"
            ),
        },
    };
    let client = ServerClient::new(base, token)?.skip_existing(args.skip_existing);
    let mut uploaded = Vec::new();
    let mut skipped = Vec::new();
    let mut failed = 0;
    for ((_, rel), result) in files.iter().zip(client.upload_all(&files, args.jobs, &Bars::default()).await) {
        match result {
            Ok(ServerOutcome::Stored(v)) => uploaded.push(v),
            Ok(ServerOutcome::Kept { url, reason }) => {
                tracing::warn!("{rel}: {reason}; left as stored (--skip-existing)");
                skipped.push(quarry_upload::Kept { key: url, reason });
            }
            Err(e) => {
                failed += 1;
                tracing::error!("{rel}: {:#}", anyhow::Error::new(e));
            }
        }
    }
    let written: Vec<WrittenFile> =
        uploaded.iter().map(|u| WrittenFile { key: u.key.clone(), sha256: u.sha256.clone() }).collect();
    let mut summary = ServerSummary::new(client.base(), uploaded)?;
    summary.skipped = skipped;
    super::print(args.json.json, &summary, summary.text())?;
    if failed > 0 {
        bail!("{failed} of {} uploads failed", files.len());
    }
    if let Some(seconds) = args.wait {
        let http = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(30));
        let http = quarry_upload::trusting_ssl_cert_file(http)?.build()?;
        wait(&quarry_upload::wait::HttpReader::new(http, client.base().clone()), &written, seconds).await?;
    }
    Ok(())
}

/// The GitHub Actions ID-token endpoint, when the job may ask it (`id-token: write` sets both
/// variables): trusted publishing when no token is given.
fn id_token_request() -> Option<quarry_upload::http::IdTokenRequest> {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    Some(quarry_upload::http::IdTokenRequest {
        url: var("ACTIONS_ID_TOKEN_REQUEST_URL")?,
        token: var("ACTIONS_ID_TOKEN_REQUEST_TOKEN")?,
    })
}

/// `--wait`: until the indexes list every file written, or fail naming what they miss.
async fn wait(reader: &dyn quarry_upload::wait::Reader, written: &[WrittenFile], seconds: u64) -> anyhow::Result<()> {
    let took = quarry_upload::wait::wait_indexed(reader, written, std::time::Duration::from_secs(seconds)).await?;
    tracing::info!(files = written.len(), seconds = took.as_secs_f64(), "indexed");
    Ok(())
}

/// A server takes packages only: wheels and sdists (by their names), `.deb`s and `.rpm`s. Any
/// other file is bad input, named, before anything is sent.
fn check_packages(files: &[(PathBuf, String)]) -> Result<(), UsageError> {
    for (path, rel) in files {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        if name.ends_with(".deb") || name.ends_with(".rpm") {
            continue;
        }
        if let Err(e) = name.parse::<quarry_packaging::DistFilename>() {
            return Err(UsageError::new(format!(
                "{} is not a package: a server takes wheels, sdists, .debs and .rpms ({e})",
                path.display()
            )));
        }
    }
    Ok(())
}

/// The paths given, for a message.
fn shown(paths: &[PathBuf]) -> String {
    paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// `--dry-run`: every target (store key or URL) with the file that would go there, as text
/// lines `would upload PATH -> TARGET` or JSON `{"dry_run": true, "targets": [...]}`.
fn dry_run(json: bool, targets: Vec<(String, PathBuf)>) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut text = String::new();
    for (target, path) in &targets {
        writeln!(text, "would upload {} -> {target}", path.display())?;
    }
    let value = serde_json::json!({
        "dry_run": true,
        "targets": targets.iter().map(|(t, p)| serde_json::json!({"target": t, "path": p})).collect::<Vec<_>>(),
    });
    super::print(json, &value, text)
}

/// `s3://{bucket}/{run prefix}{kind}[{group}/]` from the flags and the CI environment; with
/// `--output-dir DIR`, `DIR` with `{run}-{platform}/{kind}[{group}/]` keys.
fn computed_destination(args: &UploadArgs) -> anyhow::Result<quarry_upload::StoreDestination> {
    if let Some(dir) = &args.therock.output_dir {
        let run_id = args.run_id.as_deref().context("--output-dir needs --run-id (or GITHUB_RUN_ID)")?;
        let platform = args.platform.as_deref().unwrap_or(quarry_topology::Platform::host().as_str());
        let destination = StoreDestination {
            store_url: dir.display().to_string(),
            prefix: format!("{run_id}-{platform}/{}", kind(args).subdir()),
            bucket: None,
        };
        return Ok(match &args.artifact_group {
            Some(group) => destination.with_group(group),
            None => destination,
        });
    }
    // As `quarry artifacts` (and TheRock's scripts) default it.
    let repository =
        std::env::var("GITHUB_REPOSITORY").ok().filter(|r| !r.is_empty()).unwrap_or_else(|| "ROCm/TheRock".to_owned());
    let release_type = std::env::var("RELEASE_TYPE").unwrap_or_default();
    let target = RunTarget {
        run_id: args.run_id.as_deref(),
        platform: args.platform.as_deref().unwrap_or(quarry_topology::Platform::host().as_str()),
        kind: kind(args),
        bucket: args.bucket.as_deref(),
        release_type: &release_type,
        repository: &repository,
        fork: args.fork,
        group: args.artifact_group.as_deref(),
    };
    Ok(target.destination()?)
}

/// `--kind`, else what the `--to` destination holds.
fn kind(args: &UploadArgs) -> UploadKind {
    args.kind.map(UploadKind::from).unwrap_or_else(|| quarry_upload::infer_kind(args.to.as_deref()))
}

/// Progress bars on stderr, one per file in flight.
#[derive(Default)]
struct Bars(MultiProgress);

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

/// Upload `files` (path, path below the destination) to `destination`; `computed`: the
/// destination is TheRock's run location, so a Python upload also reports `kpack_split` as
/// `upload_python_packages.py` does.
async fn to_store(
    args: &UploadArgs,
    destination: StoreDestination,
    files: Vec<(PathBuf, String)>,
    computed: bool,
) -> anyhow::Result<()> {
    let destination = rooted(destination);
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
    let public_url = quarry_layout::public_url_from_env;
    let options = StoreOptions {
        destination,
        kind,
        jobs: args.jobs,
        public_url,
        python_layout,
        skip_existing: args.skip_existing,
    };
    let summary = quarry_upload::upload_to_store(store.clone(), files, &options, &Bars::default()).await;
    let identity = super::audit::local_identity();
    let stored = summary.files.iter().map(|f| {
        let entry = quarry_index::audit_log::AuditEntry::now(
            quarry_index::audit_log::AuditAction::Upload,
            &identity,
            &f.key,
            quarry_index::audit_log::AuditOutcome::Ok,
        );
        entry.sha256(Some(f.sha256.clone()))
    });
    super::audit::record(store.as_ref(), stored).await;
    for k in &summary.skipped {
        tracing::warn!("{}: {} (--skip-existing)", k.key, k.reason);
    }
    // A local store is indexed here, as the Lambda indexes a bucket: every URL printed exists.
    if !store_url.starts_with("s3://") {
        index_touched(store.clone(), &summary.files).await?;
    }
    super::append_to_github_file("GITHUB_OUTPUT", &summary.github_output())?;
    super::append_to_github_file("GITHUB_STEP_SUMMARY", &summary.step_summary())?;
    super::print(args.json.json, &summary, summary.text())?;
    for f in &summary.failed {
        tracing::error!("{f}");
    }
    if !summary.failed.is_empty() {
        bail!("{} of {} uploads failed", summary.failed.len(), summary.failed.len() + summary.files.len());
    }
    if let Some(seconds) = args.wait {
        let written: Vec<WrittenFile> =
            summary.files.iter().map(|u| WrittenFile { key: u.key.clone(), sha256: u.sha256.clone() }).collect();
        wait(&quarry_upload::wait::StoreReader(store), &written, seconds).await?;
    }
    Ok(())
}

/// A local destination inside a store, re-rooted at the store: the nearest directory holding
/// `.quarry/` (the store's own area), else the directory where a `{run}-{platform}` segment
/// begins (`DIR/777-linux/python/` is the store `DIR`, keys `777-linux/python/…`), so the
/// run gets its manifest and its indexes as in a bucket. S3 and other destinations are kept.
pub(super) fn rooted(destination: StoreDestination) -> StoreDestination {
    if destination.store_url.starts_with("s3://") || !destination.prefix.is_empty() || destination.bucket.is_some() {
        return destination;
    }
    let local = destination.store_url.strip_prefix("file://").unwrap_or(&destination.store_url);
    let path = local.replace('\\', "/");
    let path = path.trim_end_matches('/');
    let parts: Vec<&str> = path.split('/').collect();
    let marked = (1..=parts.len()).rev().find(|&n| {
        let dir = parts[..n].join("/");
        !dir.is_empty() && std::path::Path::new(&dir).join(".quarry").is_dir()
    });
    let at = marked.or_else(|| quarry_layout::find_run(path).map(|(index, _)| index));
    match at {
        Some(at) if at < parts.len() => {
            let root = parts[..at].join("/");
            let root = if root.is_empty() {
                if path.starts_with('/') { "/".to_owned() } else { ".".to_owned() }
            } else {
                root
            };
            let prefix = format!("{}/", parts[at..].join("/"));
            StoreDestination { store_url: root, prefix, bucket: None }
        }
        _ => destination,
    }
}

/// Brings every index an upload touched up to date (each stored key's scopes: its root, or
/// its project, and the run listings above it).
async fn index_touched(store: Arc<dyn Store>, files: &[quarry_store::Uploaded]) -> anyhow::Result<()> {
    let keys: Vec<quarry_store::Key> = files.iter().filter_map(|f| quarry_store::Key::new(&f.key).ok()).collect();
    // `quarry upload` reads no `[layout]` (it never did): run roots only.
    let layout = std::sync::Arc::new(quarry_layout::config::Layout::default());
    let scopes = quarry_index::Scope::affected_by_all(&keys, &layout);
    if scopes.is_empty() {
        return Ok(());
    }
    let indexer = quarry_index::Indexer::new(store, layout).with_config(quarry_index::IndexConfig::from_env()?);
    for scope in &scopes {
        indexer.refresh(scope).await.with_context(|| format!("indexing {scope}"))?;
    }
    Ok(())
}

/// The prefix of the run `prefix` lies in (through its `{run}-{platform}` segment), if any.
fn run_prefix(prefix: &str) -> Option<String> {
    let (index, _) = quarry_layout::find_run(prefix)?;
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
