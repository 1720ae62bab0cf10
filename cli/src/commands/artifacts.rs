//! `quarry artifacts push | fetch | info`: TheRock's `artifact_manager.py` (spec §3–§4) over a
//! local staging directory or a store (S3 or a directory). Push archives a stage's produced
//! artifact directories (manifest first, reproducible, zstd or xz) and uploads each with its
//! `.sha256sum`; fetch lists the run, picks the stage's inbound artifacts for the requested
//! targets (generic always; `gfx942` matches `gfx942:xnack+`; `.tar.zst` preferred), downloads
//! with retries, verifies the sidecar, and unpacks plainly, flattened or bootstrapped — every
//! member checked by `quarry-artifacts`. Any shortfall exits non-zero with the list.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::StreamExt as _;
use quarry_artifacts::{
    ArchiveFormat, ArchiveOptions, ArtifactName, COMPONENTS, ExtractMode, Limits, extract_deferred, read_manifest,
    sidecar, wipe_roots, write_archive,
};
use quarry_store::{Key, PutOptions, Store, StoreExt as _};
use quarry_topology::Topology;

#[derive(Debug, clap::Args)]
pub(crate) struct ArtifactsArgs {
    #[command(subcommand)]
    command: ArtifactsCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ArtifactsCommand {
    /// Archive a stage's produced artifacts from `<build-dir>/artifacts/` and upload them.
    Push(PushArgs),
    /// Download and unpack the artifacts a stage needs (or every artifact: `--stage all`).
    Fetch(FetchArgs),
    /// Copy stages' artifacts (with sidecars) from another run into this one, e.g. to reuse
    /// a baseline run's early stages.
    Copy(CopyArgs),
    /// What a stage produces and fetches.
    Info(InfoArgs),
}

#[derive(Debug, clap::Args)]
struct CopyArgs {
    /// The topology file.
    #[arg(long, default_value = "BUILD_TOPOLOGY.toml")]
    topology: PathBuf,
    #[command(flatten)]
    backend: Backend,
    #[command(flatten)]
    targets: Targets,
    /// The run to copy from (same platform, same store).
    #[arg(long)]
    source_run_id: String,
    /// Stages whose produced artifacts are copied (`,` separated).
    #[arg(long)]
    stage: String,
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Print what would be copied and copy nothing.
    #[arg(long)]
    dry_run: bool,
}

/// Where a run's artifacts live.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Backend {
    /// The topology file (set from the command's `--topology`).
    #[arg(skip = PathBuf::from("BUILD_TOPOLOGY.toml"))]
    pub(crate) topology: PathBuf,
    /// The CI run (default: `THEROCK_RUN_ID`, else `GITHUB_RUN_ID`, else `local`).
    #[arg(long)]
    pub(crate) run_id: Option<String>,
    /// `linux` or `windows` (default: `THEROCK_PLATFORM`, else this machine's).
    #[arg(long, value_parser = ["linux", "windows"])]
    pub(crate) platform: Option<String>,
    /// A directory standing in for the bucket: `{dir}/{run}-{platform}/{file}`.
    #[arg(long, env = "THEROCK_LOCAL_STAGING_DIR")]
    pub(crate) local_staging_dir: Option<PathBuf>,
    /// The store when not staging locally: `s3://bucket[/prefix]` or a directory (default:
    /// TheRock's bucket for `RELEASE_TYPE` and `GITHUB_REPOSITORY`).
    #[arg(long)]
    pub(crate) store: Option<String>,
    /// `owner/repo` of the run (default: `GITHUB_REPOSITORY`, else `ROCm/TheRock`).
    #[arg(long)]
    pub(crate) run_github_repo: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PushArgs {
    /// The topology file.
    #[arg(long, default_value = "BUILD_TOPOLOGY.toml")]
    pub(crate) topology: PathBuf,
    #[command(flatten)]
    pub(crate) backend: Backend,
    /// The stage whose produced artifacts are pushed (`all`: every artifact found).
    #[arg(long)]
    pub(crate) stage: String,
    /// The build directory: artifacts are read from `<build-dir>/artifacts/`, archives written
    /// to `<build-dir>/.upload_cache/` (ready archives in `artifacts/` are uploaded as they are).
    #[arg(long)]
    pub(crate) build_dir: PathBuf,
    #[arg(long, value_parser = ["zstd", "xz"], default_value = "zstd")]
    pub(crate) compression_type: String,
    /// zstd 1–22 (default 3), xz 0–9 (default 6).
    #[arg(long)]
    pub(crate) compression_level: Option<i32>,
    /// Archives written at once (each zstd archive also uses every core).
    #[arg(long, default_value_t = 1)]
    pub(crate) compress_concurrency: usize,
    #[arg(long, default_value_t = 10)]
    pub(crate) upload_concurrency: usize,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Progress lines at debug level (a live view owns the terminal).
    #[arg(skip)]
    pub(crate) quiet: bool,
}

#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct Targets {
    /// GPU families or targets to fetch besides `generic` (`;` or `,` separated).
    #[arg(long, conflicts_with = "generic_only")]
    pub(crate) amdgpu_families: Option<String>,
    /// Specific targets (`gfx942,gfx1100`); `gfx942` also matches `gfx942:xnack+`.
    #[arg(long)]
    pub(crate) amdgpu_targets: Option<String>,
    /// Only target-neutral artifacts.
    #[arg(long)]
    pub(crate) generic_only: bool,
    /// Also match each family's gfx targets (kpack-split artifacts are named per target):
    /// `gfx94X-dcgpu` fetches `*_gfx942` too. Unknown names just match nothing more.
    #[arg(long)]
    pub(crate) expand_family_to_targets: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct FetchArgs {
    /// The topology file.
    #[arg(long, default_value = "BUILD_TOPOLOGY.toml")]
    pub(crate) topology: PathBuf,
    #[command(flatten)]
    pub(crate) backend: Backend,
    #[command(flatten)]
    pub(crate) targets: Targets,
    /// The stage whose inbound artifacts are fetched (`all`: every topology artifact).
    #[arg(long, default_value = "all")]
    pub(crate) stage: String,
    #[arg(long)]
    pub(crate) output_dir: PathBuf,
    /// Wipe each manifest root, unpack into `<output-dir>/<root>`, touch `<root>.prebuilt`.
    #[arg(long, conflicts_with = "flatten")]
    pub(crate) bootstrap: bool,
    /// Merge every artifact's contents into `<output-dir>`.
    #[arg(long)]
    pub(crate) flatten: bool,
    /// Download only (archives land in `<output-dir>`).
    #[arg(long, conflicts_with_all = ["bootstrap", "flatten"])]
    pub(crate) no_extract: bool,
    /// Keep downloads here (default: `<output-dir>/.download_cache`, deleted afterwards).
    #[arg(long)]
    pub(crate) download_cache_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 10)]
    pub(crate) download_concurrency: usize,
    /// Archives unpacked at once (default: the number of CPUs).
    #[arg(long)]
    pub(crate) extract_concurrency: Option<usize>,
    /// Components to leave out (`,` or `;` separated: lib run dbg dev doc test).
    #[arg(long)]
    pub(crate) exclude_components: Option<String>,
    /// Artifacts to leave out (names from the topology).
    #[arg(long)]
    pub(crate) exclude_artifacts: Option<String>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
struct InfoArgs {
    /// The topology file.
    #[arg(long, default_value = "BUILD_TOPOLOGY.toml")]
    pub(crate) topology: PathBuf,
    /// The same backend flags as push and fetch (only `--topology` is read).
    #[command(flatten)]
    backend: Backend,
    #[arg(long)]
    stage: String,
}

pub(crate) async fn run(args: ArtifactsArgs) -> anyhow::Result<()> {
    match args.command {
        ArtifactsCommand::Push(mut args) => {
            args.backend.topology = args.topology.clone();
            push(args).await
        }
        ArtifactsCommand::Fetch(mut args) => {
            args.backend.topology = args.topology.clone();
            fetch(args).await
        }
        ArtifactsCommand::Copy(mut args) => {
            args.backend.topology = args.topology.clone();
            copy(args).await
        }
        ArtifactsCommand::Info(mut args) => {
            args.backend.topology = args.topology.clone();
            info(&args)
        }
    }
}

fn load_topology(path: &Path) -> anyhow::Result<Topology> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(Topology::parse(&text)?)
}

/// A `,`, `;` or space separated list, empty items dropped.
pub(crate) fn split_list(raw: Option<&str>) -> Vec<String> {
    raw.unwrap_or_default().split([',', ';', ' ']).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

impl Backend {
    fn run_id(&self) -> String {
        self.run_id
            .clone()
            .or_else(|| std::env::var("THEROCK_RUN_ID").ok())
            .or_else(|| std::env::var("GITHUB_RUN_ID").ok())
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "local".into())
    }

    fn platform(&self) -> String {
        self.platform
            .clone()
            .or_else(|| std::env::var("THEROCK_PLATFORM").ok())
            .unwrap_or_else(|| if cfg!(windows) { "windows".into() } else { "linux".into() })
    }

    /// The store and the run's key prefix (`{run}-{platform}/`, with TheRock's external-repo
    /// folder in the external bucket).
    pub(crate) async fn open(&self) -> anyhow::Result<(Arc<dyn Store>, String)> {
        let (run, platform) = (self.run_id(), self.platform());
        if Key::new(format!("{run}-{platform}/x")).is_err() || run.contains('/') || platform.contains('/') {
            bail!("--run-id {run:?} / --platform {platform:?} do not make a valid key prefix");
        }
        if let Some(dir) = &self.local_staging_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let store = quarry_store::open(&dir.display().to_string()).await?;
            return Ok((store, format!("{run}-{platform}/")));
        }
        let repo = self
            .run_github_repo
            .clone()
            .or_else(|| std::env::var("GITHUB_REPOSITORY").ok())
            .unwrap_or_else(|| "ROCm/TheRock".into());
        let url = match &self.store {
            Some(url) => url.clone(),
            None => {
                let release = std::env::var("RELEASE_TYPE").unwrap_or_else(|_| "ci".into());
                format!("s3://{}", quarry_store::layout::artifact_bucket(&release, &repo, false)?)
            }
        };
        let (store_url, base) = match url.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                (format!("s3://{bucket}"), (bucket.to_owned(), prefix.trim_matches('/').to_owned()))
            }
            None => (url.clone(), (String::new(), String::new())),
        };
        let store = quarry_store::open(&store_url).await.with_context(|| format!("opening {store_url}"))?;
        let run_prefix = quarry_store::layout::run_prefix(&base.0, &repo, &run, &platform)?;
        let run_prefix = run_prefix.trim_end_matches('/');
        let prefix = if base.1.is_empty() { format!("{run_prefix}/") } else { format!("{}/{run_prefix}/", base.1) };
        Ok((store, prefix))
    }
}

/// Artifact names a stage pushes (`all`: every topology artifact).
fn stage_set(topology: &Topology, stage: &str, inbound: bool) -> anyhow::Result<BTreeSet<String>> {
    Ok(match (stage, inbound) {
        ("all", _) => topology.artifacts.keys().cloned().collect(),
        (stage, false) => topology.produced(stage)?,
        (stage, true) => topology.inbound(stage)?,
    })
}

fn mtime() -> anyhow::Result<u64> {
    Ok(match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v.trim().parse().with_context(|| format!("SOURCE_DATE_EPOCH={v:?} is not a number"))?,
        Err(_) => 0,
    })
}

#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Moved {
    pub(crate) artifact: String,
    pub(crate) file: String,
    pub(crate) size: u64,
    sha256: String,
}

async fn push(args: PushArgs) -> anyhow::Result<()> {
    let (prefix, pushed, failures) = push_stage(&args).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let value = serde_json::json!({ "prefix": prefix, "pushed": pushed, "failed": failures });
        serde_json::to_writer_pretty(&mut out, &value)?;
        writeln!(out)?;
    } else {
        for m in &pushed {
            writeln!(out, "pushed  {prefix}{} ({} bytes)", m.file, m.size)?;
        }
        for f in &failures {
            writeln!(out, "failed  {f}")?;
        }
    }
    if !failures.is_empty() {
        bail!("{} of {} artifacts not pushed", failures.len(), failures.len() + pushed.len());
    }
    Ok(())
}

/// Archives and uploads a stage's artifacts: (run prefix, pushed, failures).
pub(crate) async fn push_stage(args: &PushArgs) -> anyhow::Result<(String, Vec<Moved>, Vec<String>)> {
    let topology = load_topology(&args.backend.topology)?;
    let wanted = stage_set(&topology, &args.stage, false)?;
    let (store, prefix) = args.backend.open().await?;
    let source = args.build_dir.join("artifacts");
    let cache = args.build_dir.join(".upload_cache");
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let format = ArchiveFormat::parse(&args.compression_type).unwrap_or(ArchiveFormat::Zstd);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get() as u32);
    let opts = ArchiveOptions { format, level: args.compression_level, threads, mtime: mtime()? };

    // Directories to archive and archives ready to go, for this stage's artifacts only.
    let mut to_archive = Vec::new();
    let mut ready: BTreeMap<ArtifactName, (ArchiveFormat, PathBuf)> = BTreeMap::new();
    for entry in std::fs::read_dir(&source).with_context(|| format!("reading {}", source.display()))? {
        let entry = entry?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            if let Ok(name) = ArtifactName::parse_dir(&file_name)
                && (args.stage == "all" || wanted.contains(&name.name))
            {
                to_archive.push((name, entry.path()));
            }
        } else if let Some((name, f)) = ArtifactName::parse_archive(&file_name)
            && (args.stage == "all" || wanted.contains(&name.name))
        {
            ready.entry(name).or_insert((f, entry.path()));
        }
    }
    to_archive.sort();
    if args.quiet {
        tracing::debug!(archive = to_archive.len(), ready = ready.len(), stage = %args.stage, "pushing");
    } else {
        tracing::info!(archive = to_archive.len(), ready = ready.len(), stage = %args.stage, "pushing");
    }
    let started = std::time::Instant::now();
    let archived: Vec<anyhow::Result<(ArtifactName, PathBuf)>> = futures_util::stream::iter(to_archive)
        .map(|(name, dir)| {
            let path = cache.join(name.archive_name(format));
            tokio::task::spawn_blocking(move || -> anyhow::Result<(ArtifactName, PathBuf)> {
                let tmp = tempfile::NamedTempFile::new_in(path.parent().unwrap_or(Path::new(".")))?;
                let (writer, _) = write_archive(&dir, std::io::BufWriter::new(tmp), &opts)
                    .with_context(|| format!("archiving {}", dir.display()))?;
                let tmp = writer.into_inner().map_err(|e| e.into_error())?;
                tmp.persist(&path)?;
                Ok((name, path))
            })
        })
        .buffer_unordered(args.compress_concurrency.max(1))
        .map(|r| r.map_err(anyhow::Error::from).and_then(|r| r))
        .collect()
        .await;
    let mut failures = Vec::new();
    for result in archived {
        match result {
            Ok((name, path)) => {
                ready.insert(name, (format, path));
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    if args.quiet {
        tracing::debug!(seconds = started.elapsed().as_secs_f64(), "archived");
    } else {
        tracing::info!(seconds = started.elapsed().as_secs_f64(), "archived");
    }
    let uploads: Vec<anyhow::Result<Moved>> = futures_util::stream::iter(ready)
        .map(|(name, (f, path))| {
            let (store, prefix) = (store.clone(), prefix.clone());
            async move { upload_archive(store.as_ref(), &prefix, &name, f, &path).await }
        })
        .buffer_unordered(args.upload_concurrency.max(1))
        .collect()
        .await;
    let mut pushed = Vec::new();
    for result in uploads {
        match result {
            Ok(m) => pushed.push(m),
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    pushed.sort_by(|a, b| a.file.cmp(&b.file));
    Ok((prefix, pushed, failures))
}

/// Uploads an archive, then its sidecar (a reader that sees the sidecar sees the archive).
/// Pushing again replaces both: a rebuilt artifact is not an error.
async fn upload_archive(
    store: &dyn Store,
    prefix: &str,
    name: &ArtifactName,
    format: ArchiveFormat,
    path: &Path,
) -> anyhow::Result<Moved> {
    let file = name.archive_name(format);
    let (size, sha256) = quarry_store::hash_file(path).await.with_context(|| format!("reading {}", path.display()))?;
    let key = Key::new(format!("{prefix}{file}"))?;
    let body = tokio::fs::File::open(path).await?;
    let body: quarry_store::ByteStream = Box::pin(tokio_util::io::ReaderStream::with_capacity(body, 1 << 20));
    let options = PutOptions { sha256: Some(sha256.clone()), ..PutOptions::default() };
    store.put(&key, body, options).await.with_context(|| format!("uploading {key}"))?;
    let side = Key::new(format!("{prefix}{}", sidecar::sidecar_name(&file)))?;
    store
        .put_bytes(&side, sidecar::render(&sha256).into(), PutOptions::default())
        .await
        .with_context(|| format!("uploading {side}"))?;
    Ok(Moved { artifact: name.to_string(), file, size, sha256 })
}

/// Which listed archives a fetch takes.
pub(crate) fn select(
    listed: &[String],
    wanted: &BTreeSet<String>,
    targets: &Targets,
    excluded_components: &BTreeSet<String>,
) -> BTreeMap<ArtifactName, ArchiveFormat> {
    let mut families: BTreeSet<String> = split_list(targets.amdgpu_families.as_deref())
        .into_iter()
        .chain(split_list(targets.amdgpu_targets.as_deref()))
        .map(|t| t.split(':').next().unwrap_or_default().to_owned())
        .collect();
    if targets.expand_family_to_targets {
        let table = quarry_topology::families::AmdgpuTargets::builtin();
        let map = table.family_map();
        for family in split_list(targets.amdgpu_families.as_deref()) {
            families.extend(map.get(family.as_str()).into_iter().flatten().map(|t| (*t).to_owned()));
        }
    }
    let any_target = families.is_empty() && !targets.generic_only;
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

async fn download(store: &dyn Store, key: &Key, to: &Path) -> anyhow::Result<String> {
    let object = store.get(key, None).await?;
    let mut file = tokio::fs::File::create(to).await.with_context(|| format!("creating {}", to.display()))?;
    let mut body = object.body;
    let mut hash = quarry_store::Sha256Hex::default();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.with_context(|| format!("reading {key}"))?;
        hash.update(&chunk);
        tokio::io::AsyncWriteExt::write_all(&mut file, &chunk).await?;
    }
    tokio::io::AsyncWriteExt::flush(&mut file).await?;
    Ok(hash.finish())
}

/// Downloads one archive and checks it against its sidecar: three attempts, 2 s and 4 s apart.
async fn fetch_one(store: &dyn Store, prefix: &str, file: &str, to: &Path) -> anyhow::Result<String> {
    let key = Key::new(format!("{prefix}{file}"))?;
    let side = Key::new(format!("{prefix}{}", sidecar::sidecar_name(file)))?;
    let mut last = None;
    for attempt in 0..3u32 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(2u64 << (attempt - 1))).await;
        }
        let result = async {
            let expected = match store.get_bytes(&side, 4096).await {
                Ok((_, bytes)) => Some(
                    sidecar::parse(&String::from_utf8_lossy(&bytes))
                        .with_context(|| format!("{side} holds no sha256"))?,
                ),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e.into()),
            };
            let actual = download(store, &key, to).await?;
            match expected {
                Some(expected) if expected != actual => {
                    bail!("{key}: sha256 {actual} does not match its sidecar's {expected}")
                }
                None => tracing::warn!(%key, "no .sha256sum sidecar; not verified"),
                _ => {}
            }
            Ok(actual)
        }
        .await;
        match result {
            Ok(sha) => return Ok(sha),
            Err(e) => {
                tracing::warn!(%key, attempt = attempt + 1, "{e:#}");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("{key}: not fetched")))
}

async fn fetch(args: FetchArgs) -> anyhow::Result<()> {
    let report = fetch_stage(&args).await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let value = serde_json::json!({
            "prefix": report.prefix,
            "fetched": report.fetched,
            "failed": report.failures,
            "not_in_run": report.not_in_run,
        });
        serde_json::to_writer_pretty(&mut out, &value)?;
        writeln!(out)?;
    } else {
        for m in &report.fetched {
            writeln!(out, "fetched {} ({} bytes)", m.file, m.size)?;
        }
        for f in &report.failures {
            writeln!(out, "failed  {f}")?;
        }
    }
    if !report.failures.is_empty() {
        bail!("{} artifacts could not be fetched:\n  {}", report.failures.len(), report.failures.join("\n  "));
    }
    Ok(())
}

/// What a fetch did.
#[derive(Debug, Default)]
pub(crate) struct FetchReport {
    pub(crate) prefix: String,
    pub(crate) fetched: Vec<Moved>,
    pub(crate) failures: Vec<String>,
    pub(crate) not_in_run: Vec<String>,
}

/// Downloads, verifies and unpacks a stage's artifacts; failures are in the report.
pub(crate) async fn fetch_stage(args: &FetchArgs) -> anyhow::Result<FetchReport> {
    let topology = load_topology(&args.backend.topology)?;
    let mut wanted = stage_set(&topology, &args.stage, true)?;
    for name in split_list(args.exclude_artifacts.as_deref()) {
        if !topology.artifacts.contains_key(&name) {
            bail!("--exclude-artifacts: {name:?} is not an artifact of {}", args.backend.topology.display());
        }
        wanted.remove(&name);
    }
    let excluded: BTreeSet<String> = split_list(args.exclude_components.as_deref()).into_iter().collect();
    if let Some(bad) = excluded.iter().find(|c| !COMPONENTS.contains(&c.as_str())) {
        bail!("--exclude-components: {bad:?} is not one of {}", COMPONENTS.join(", "));
    }
    let (store, prefix) = args.backend.open().await?;
    let listing = store.list_all(&prefix, true).await.with_context(|| format!("listing {prefix}"))?;
    let listed: Vec<String> =
        listing.objects.iter().filter_map(|o| o.key.as_str().strip_prefix(&prefix).map(str::to_owned)).collect();
    let chosen = select(&listed, &wanted, &args.targets, &excluded);
    let found: BTreeSet<&str> = chosen.keys().map(|n| n.name.as_str()).collect();
    let platform =
        quarry_topology::Platform::parse(&args.backend.platform()).unwrap_or(quarry_topology::Platform::Linux);
    // What this platform does not build is not missing.
    let not_in_run: Vec<String> = topology
        .built_on(&wanted, platform, &BTreeSet::new())
        .into_iter()
        .filter(|w| !found.contains(w.as_str()))
        .collect();
    for name in &not_in_run {
        tracing::warn!(artifact = %name, "no archive in {prefix} for this artifact");
    }

    std::fs::create_dir_all(&args.output_dir).with_context(|| format!("creating {}", args.output_dir.display()))?;
    let (cache, keep_cache) = match &args.download_cache_dir {
        Some(dir) => (dir.clone(), true),
        None if args.no_extract => (args.output_dir.clone(), true),
        None => (args.output_dir.join(".download_cache"), false),
    };
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let downloads: Vec<(ArtifactName, ArchiveFormat, PathBuf, anyhow::Result<String>)> =
        futures_util::stream::iter(chosen.iter())
            .map(|(name, format)| {
                let (store, prefix) = (store.clone(), prefix.clone());
                let file = name.archive_name(*format);
                let to = cache.join(&file);
                async move {
                    let result = fetch_one(store.as_ref(), &prefix, &file, &to).await;
                    (name.clone(), *format, to, result)
                }
            })
            .buffer_unordered(args.download_concurrency.max(1))
            .collect()
            .await;
    let mut failures = Vec::new();
    let mut fetched = Vec::new();
    let mut ok = Vec::new();
    for (name, format, path, result) in downloads {
        match result {
            Ok(sha256) => {
                let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                fetched.push(Moved { artifact: name.to_string(), file: name.archive_name(format), size, sha256 });
                ok.push((name, format, path));
            }
            Err(e) => failures.push(format!("{}: {e:#}", name.archive_name(format))),
        }
    }
    ok.sort();

    if !args.no_extract && failures.is_empty() {
        let mode = if args.bootstrap {
            ExtractMode::Bootstrap
        } else if args.flatten {
            ExtractMode::Flatten
        } else {
            ExtractMode::Tree
        };
        let out = args.output_dir.clone();
        let jobs =
            args.extract_concurrency.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from));
        let errors = tokio::task::spawn_blocking(move || unpack_all(&ok, &out, mode, jobs)).await??;
        failures.extend(errors);
    }
    if !keep_cache {
        let _ = std::fs::remove_dir_all(&cache);
    }
    fetched.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(FetchReport { prefix, fetched, failures, not_in_run })
}

/// Unpacks every archive; bootstrap wipes every root of every archive first, so two artifacts
/// sharing a root (lib and dev of one project) both land.
fn unpack_all(
    archives: &[(ArtifactName, ArchiveFormat, PathBuf)],
    out: &Path,
    mode: ExtractMode,
    jobs: usize,
) -> anyhow::Result<Vec<String>> {
    let open = |path: &Path| -> anyhow::Result<std::io::BufReader<std::fs::File>> {
        Ok(std::io::BufReader::new(std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?))
    };
    if mode == ExtractMode::Bootstrap {
        let mut roots = BTreeSet::new();
        for (_, format, path) in archives {
            roots.extend(read_manifest(open(path)?, *format).with_context(|| format!("{}", path.display()))?);
        }
        wipe_roots(out, &roots.into_iter().collect::<Vec<_>>())?;
    }
    let queue = std::sync::Mutex::new(archives.iter());
    let errors = std::sync::Mutex::new(Vec::new());
    // Archives sharing `out` (bootstrap, flatten) place files and directories concurrently;
    // their symlinks wait until every archive is placed and are then made one archive after
    // another, so no member is ever written through a link another archive made.
    let pending = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                while let Some((name, format, path)) =
                    queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next()
                {
                    let dest = match mode {
                        ExtractMode::Tree => out.join("artifacts").join(name.dir_name()),
                        _ => out.to_path_buf(),
                    };
                    let result =
                        open(path).and_then(|r| Ok(extract_deferred(r, *format, &dest, mode, Limits::default())?));
                    let file = name.archive_name(*format);
                    match result {
                        Ok((_, links)) => {
                            pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((file, links));
                        }
                        Err(e) => {
                            errors
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .push(format!("{file}: {e:#}"));
                        }
                    }
                }
            });
        }
    });
    let mut errors = errors.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut pending = pending.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    pending.sort_by(|a, b| a.0.cmp(&b.0));
    for (file, links) in pending {
        if let Err(e) = links.create() {
            errors.push(format!("{file}: {e:#}"));
        }
    }
    Ok(errors)
}

async fn copy(args: CopyArgs) -> anyhow::Result<()> {
    let topology = load_topology(&args.backend.topology)?;
    let mut wanted = BTreeSet::new();
    for stage in split_list(Some(&args.stage)) {
        wanted.extend(stage_set(&topology, &stage, false)?);
    }
    let (store, prefix) = args.backend.open().await?;
    let mut source_backend = args.backend.clone();
    source_backend.run_id = Some(args.source_run_id.clone());
    let (_, source_prefix) = source_backend.open().await?;
    if source_prefix == prefix {
        bail!("--source-run-id is this run ({prefix})");
    }
    let listing = store.list_all(&source_prefix, true).await.with_context(|| format!("listing {source_prefix}"))?;
    let listed: Vec<String> =
        listing.objects.iter().filter_map(|o| o.key.as_str().strip_prefix(&source_prefix).map(str::to_owned)).collect();
    let chosen = select(&listed, &wanted, &args.targets, &BTreeSet::new());
    let mut files = Vec::new();
    for (name, format) in &chosen {
        let file = name.archive_name(*format);
        let side = sidecar::sidecar_name(&file);
        if listed.contains(&side) {
            files.push(side);
        }
        files.push(file);
    }
    let mut out = std::io::stdout().lock();
    if args.dry_run {
        for file in &files {
            writeln!(out, "would copy {source_prefix}{file} -> {prefix}{file}")?;
        }
        return Ok(());
    }
    let results: Vec<(String, anyhow::Result<()>)> = futures_util::stream::iter(files)
        .map(|file| {
            let (store, from, to) = (store.clone(), format!("{source_prefix}{file}"), format!("{prefix}{file}"));
            async move {
                let result = async {
                    let object = store.get(&Key::new(from.clone())?, None).await?;
                    let options = PutOptions { sha256: object.meta.sha256.clone(), ..PutOptions::default() };
                    store.put(&Key::new(to)?, object.body, options).await?;
                    Ok(())
                }
                .await;
                (file, result)
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    let mut failures = Vec::new();
    let mut copied = Vec::new();
    for (file, result) in results {
        match result {
            Ok(()) => copied.push(file),
            Err(e) => failures.push(format!("{file}: {e:#}")),
        }
    }
    copied.sort();
    for file in &copied {
        writeln!(out, "copied  {prefix}{file}")?;
    }
    if !failures.is_empty() {
        bail!("{} files not copied:\n  {}", failures.len(), failures.join("\n  "));
    }
    Ok(())
}

fn info(args: &InfoArgs) -> anyhow::Result<()> {
    let topology = load_topology(&args.backend.topology)?;
    let produced = stage_set(&topology, &args.stage, false)?;
    let inbound = stage_set(&topology, &args.stage, true)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "stage: {}", args.stage)?;
    writeln!(out, "produces: {}", produced.into_iter().collect::<Vec<_>>().join(" "))?;
    writeln!(out, "fetches: {}", inbound.into_iter().collect::<Vec<_>>().join(" "))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let targets = Targets { amdgpu_families: Some("gfx942".into()), ..Default::default() };
        let chosen = select(&listed, &wanted, &targets, &["dev".to_owned()].into());
        let names: Vec<String> = chosen.iter().map(|(n, f)| n.archive_name(*f)).collect();
        assert_eq!(names, ["blas_lib_generic.tar.zst", "blas_lib_gfx942:xnack+.tar.zst"]);
        let generic = Targets { generic_only: true, ..Default::default() };
        assert_eq!(select(&listed, &wanted, &generic, &BTreeSet::new()).len(), 2);
        let all = Targets::default();
        assert_eq!(select(&listed, &wanted, &all, &BTreeSet::new()).len(), 4);

        // A family matches per-target (kpack-split) archives only when expanded.
        let family = Targets { amdgpu_families: Some("gfx110X-all".into()), ..Default::default() };
        assert_eq!(select(&listed, &wanted, &family, &BTreeSet::new()).len(), 2);
        let expanded = Targets { expand_family_to_targets: true, ..family };
        let names: Vec<String> =
            select(&listed, &wanted, &expanded, &BTreeSet::new()).iter().map(|(n, f)| n.archive_name(*f)).collect();
        assert!(names.contains(&"blas_lib_gfx1100.tar.zst".to_owned()), "{names:?}");
    }
}
