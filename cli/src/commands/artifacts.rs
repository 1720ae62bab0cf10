//! `quarry artifacts push | fetch | copy | info`: TheRock's `artifact_manager.py` (spec §3–§4)
//! over a local staging directory or a store (S3 or a directory). The flags become
//! `quarry-stage` options, the run is opened once (after the input is checked against the
//! topology, so bad input writes nothing), and the reports are printed. Any shortfall exits
//! non-zero with the list. `fetch` also takes `fetch_artifacts.py`'s spellings (include and
//! `--exclude` patterns on archive names, `--artifact-group`, `--extract`,
//! `--[no-]delete-after-extract`; `--dry-run` is refused naming `info`), and the hidden
//! `list-stages` is `artifact_manager.py list-stages` (`docs/therock.md`).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::bail;
use quarry_artifacts::{ArchiveFormat, DEFAULT_MAX_BYTES, DEFAULT_MAX_RATIO, ExtractMode};
use quarry_stage::transfer::{self, CopyOptions, FetchOptions, NameFilter, PushOptions, stage_artifacts};
use quarry_stage::{GpuSelection, Run, RunLocation, load_topology};
use quarry_topology::{Topology, split_list};

use super::UsageError;
use super::args::{Backend, JsonArg};

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
    /// `artifact_manager.py list-stages`: every stage with its groups and artifact counts.
    #[command(hide = true)]
    ListStages(ListStagesArgs),
}

/// `--compression-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Compression {
    Zstd,
    Xz,
}

/// The topology file and where the run's artifacts live.
#[derive(Debug, clap::Args)]
pub(crate) struct RunFlags {
    /// The topology file.
    #[arg(long, default_value = "BUILD_TOPOLOGY.toml")]
    pub(crate) topology: PathBuf,
    #[command(flatten)]
    pub(crate) backend: Backend,
}

#[derive(Debug, clap::Args)]
struct PushArgs {
    #[command(flatten)]
    run: RunFlags,
    /// The stage whose produced artifacts are pushed (`all`: every artifact found).
    #[arg(long)]
    stage: String,
    /// The build directory: artifacts are read from `<build-dir>/artifacts/`, archives written
    /// to `<build-dir>/.upload_cache/` (ready archives in `artifacts/` are uploaded as they are).
    #[arg(long)]
    build_dir: PathBuf,
    /// Archive format: zstd (`.tar.zst`) or xz (`.tar.xz`).
    #[arg(long, value_enum, default_value_t = Compression::Zstd)]
    compression_type: Compression,
    /// zstd 1–22 (default 3), xz 0–9 (default 6).
    #[arg(long)]
    compression_level: Option<i32>,
    /// Archives written at once (default: one per core; the cores are shared out as each
    /// archive's zstd workers).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    compress_concurrency: Option<u64>,
    /// Uploads in flight at once.
    #[arg(long, default_value_t = 10)]
    upload_concurrency: usize,
    #[command(flatten)]
    json: JsonArg,
}

/// Which GPU-specific artifacts to take besides the generic ones.
#[derive(Debug, Clone, Default, clap::Args)]
struct GpuSelectionArgs {
    /// GPU families or targets to fetch besides `generic` (`;` or `,` separated).
    #[arg(long, alias = "artifact-group", conflicts_with = "generic_only")]
    amdgpu_families: Option<String>,
    /// Specific targets (`gfx942,gfx1100`); `gfx942` also matches `gfx942:xnack+`.
    #[arg(long)]
    amdgpu_targets: Option<String>,
    /// Only target-neutral artifacts.
    #[arg(long)]
    generic_only: bool,
    /// Also match each family's gfx targets (kpack-split artifacts are named per target):
    /// `gfx94X-dcgpu` fetches `*_gfx942` too. Unknown names just match nothing more.
    #[arg(long)]
    expand_family_to_targets: bool,
}

#[derive(Debug, clap::Args)]
struct FetchArgs {
    #[command(flatten)]
    run: RunFlags,
    #[command(flatten)]
    gpus: GpuSelectionArgs,
    /// The stage whose inbound artifacts are fetched (`all`: every topology artifact).
    #[arg(long, default_value = "all")]
    stage: String,
    /// Where the artifacts are unpacked (or, with --no-extract, downloaded).
    #[arg(long)]
    output_dir: PathBuf,
    /// Wipe each manifest root, unpack into `<output-dir>/<root>`, touch `<root>.prebuilt`.
    #[arg(long, conflicts_with = "flatten")]
    bootstrap: bool,
    /// Merge every artifact's contents into `<output-dir>`.
    #[arg(long)]
    flatten: bool,
    /// Download only (archives land in `<output-dir>`).
    #[arg(long, conflicts_with_all = ["bootstrap", "flatten"])]
    no_extract: bool,
    /// Keep downloads here (default: `<output-dir>/.download_cache`, deleted afterwards).
    #[arg(long)]
    download_cache_dir: Option<PathBuf>,
    /// Downloads in flight at once.
    #[arg(long, default_value_t = 10)]
    download_concurrency: usize,
    /// Archives unpacked at once (default: the number of CPUs).
    #[arg(long)]
    extract_concurrency: Option<usize>,
    /// Components to leave out (`,` or `;` separated: lib run dbg dev doc test).
    #[arg(long)]
    exclude_components: Option<String>,
    /// Artifacts to leave out (names from the topology).
    #[arg(long)]
    exclude_artifacts: Option<String>,
    /// Refuse an archive whose members add up to more than this many bytes (64 GiB by
    /// default, far above any TheRock artifact).
    #[arg(long, default_value_t = DEFAULT_MAX_BYTES)]
    max_unpacked_bytes: u64,
    /// Refuse an archive that unpacks to more than this many bytes per compressed byte once
    /// past its first 64 MiB (real artifacts stay below 20).
    #[arg(long, default_value_t = DEFAULT_MAX_RATIO)]
    max_expansion_ratio: u64,
    #[command(flatten)]
    json: JsonArg,
    #[command(flatten)]
    therock: FetchArtifactsFlags,
}

/// `fetch_artifacts.py`'s own flags, taken with its meaning (`docs/therock.md`).
#[derive(Debug, Clone, Default, clap::Args)]
struct FetchArtifactsFlags {
    /// Only archives whose file name one of these regular expressions matches (anywhere in the
    /// name, as `fetch_artifacts.py`'s include patterns).
    #[arg(value_name = "INCLUDE", hide_short_help = true)]
    include: Vec<String>,
    /// Leave out archives whose file name one of these regular expressions matches.
    #[arg(long, value_name = "REGEX", num_args = 0.., hide_short_help = true)]
    exclude: Vec<String>,
    /// Unpack into `<output-dir>/artifacts/<name>/` (the default mode).
    #[arg(long, hide_short_help = true, conflicts_with_all = ["bootstrap", "flatten", "no_extract"])]
    extract: bool,
    /// Delete downloaded archives once unpacked (the default).
    #[arg(long, hide_short_help = true, conflicts_with = "no_delete_after_extract")]
    delete_after_extract: bool,
    /// Keep downloaded archives in `<output-dir>` (`--download-cache-dir` chooses another
    /// directory).
    #[arg(long, hide_short_help = true)]
    no_delete_after_extract: bool,
    /// Refused: `quarry artifacts info --stage STAGE` says what a fetch takes.
    #[arg(long, hide = true)]
    dry_run: bool,
    /// Fetch (the default).
    #[arg(long, hide = true, conflicts_with = "dry_run")]
    no_dry_run: bool,
}

#[derive(Debug, clap::Args)]
struct CopyArgs {
    #[command(flatten)]
    run: RunFlags,
    #[command(flatten)]
    gpus: GpuSelectionArgs,
    /// The run to copy from (same platform).
    #[arg(long)]
    source_run_id: String,
    /// `owner/repo` of the run to copy from (default: this run's). Another repository's run is
    /// read from that repository's bucket (TheRock's own runs: `therock-ci-artifacts`), unless
    /// --source-store names one.
    #[arg(long)]
    source_repository: Option<String>,
    /// The store holding the run to copy from (`s3://bucket[/prefix]` or a directory; default:
    /// this run's store, or the source repository's bucket). S3 to S3 copies server-side.
    #[arg(long)]
    source_store: Option<String>,
    /// Stages whose produced artifacts are copied (`,` separated).
    #[arg(long)]
    stage: String,
    /// Copies in flight at once.
    #[arg(long, default_value_t = 10)]
    concurrency: usize,
    /// Print what would be copied and copy nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, clap::Args)]
struct InfoArgs {
    /// The same flags as push and fetch (only `--topology` is read).
    #[command(flatten)]
    run: RunFlags,
    /// The stage to describe.
    #[arg(long)]
    stage: String,
    /// Also list the target families a fetch for these families matches (`generic` first).
    #[arg(long, hide_short_help = true)]
    amdgpu_families: Option<String>,
}

#[derive(Debug, clap::Args)]
struct ListStagesArgs {
    /// The topology file.
    #[arg(long, default_value = "BUILD_TOPOLOGY.toml")]
    topology: PathBuf,
}

/// Loads the topology, checks the command's input against it (bad input stops before anything
/// is written), then opens the run once.
pub(crate) async fn open_run<T>(
    topology: &Path,
    location: &RunLocation,
    check: impl FnOnce(&Topology) -> anyhow::Result<T>,
) -> anyhow::Result<(Run, T)> {
    let topology = load_topology(topology)?;
    let checked = check(&topology)?;
    Ok((Run::open(location, topology).await?, checked))
}

/// Archive members' modification time: `SOURCE_DATE_EPOCH`, else 0.
pub(crate) fn archive_mtime() -> anyhow::Result<u64> {
    Ok(super::source_date_epoch()?.unwrap_or(0))
}

impl From<&GpuSelectionArgs> for GpuSelection {
    fn from(args: &GpuSelectionArgs) -> Self {
        GpuSelection {
            families: split_list(args.amdgpu_families.as_deref().unwrap_or_default()),
            targets: split_list(args.amdgpu_targets.as_deref().unwrap_or_default()),
            generic_only: args.generic_only,
            expand_families: args.expand_family_to_targets,
        }
    }
}

impl From<&FetchArgs> for FetchOptions {
    fn from(args: &FetchArgs) -> Self {
        let download_cache_dir = match (&args.download_cache_dir, args.therock.no_delete_after_extract) {
            (Some(dir), _) => Some(dir.clone()),
            (None, true) => Some(args.output_dir.clone()),
            (None, false) => None,
        };
        let extract = match (args.no_extract, args.bootstrap, args.flatten) {
            (true, _, _) => None,
            (_, true, _) => Some(ExtractMode::Bootstrap),
            (_, _, true) => Some(ExtractMode::Flatten),
            _ => Some(ExtractMode::Tree),
        };
        FetchOptions {
            stage: args.stage.clone(),
            gpus: (&args.gpus).into(),
            output_dir: args.output_dir.clone(),
            extract,
            download_cache_dir,
            download_concurrency: args.download_concurrency,
            extract_concurrency: args.extract_concurrency,
            exclude_components: split_list(args.exclude_components.as_deref().unwrap_or_default()),
            exclude_artifacts: split_list(args.exclude_artifacts.as_deref().unwrap_or_default()),
            max_unpacked_bytes: args.max_unpacked_bytes,
            max_expansion_ratio: args.max_expansion_ratio,
            names: NameFilter::default(),
        }
    }
}

pub(crate) async fn run(args: ArtifactsArgs) -> anyhow::Result<()> {
    match args.command {
        ArtifactsCommand::Push(args) => push(args).await,
        ArtifactsCommand::Fetch(args) => fetch(args).await,
        ArtifactsCommand::Copy(args) => copy(args).await,
        ArtifactsCommand::Info(args) => info(&args),
        ArtifactsCommand::ListStages(args) => list_stages(&args.topology),
    }
}

async fn push(args: PushArgs) -> anyhow::Result<()> {
    let opts = PushOptions {
        stage: args.stage,
        build_dir: args.build_dir,
        format: match args.compression_type {
            Compression::Zstd => ArchiveFormat::Zstd,
            Compression::Xz => ArchiveFormat::Xz,
        },
        level: args.compression_level,
        mtime: archive_mtime()?,
        compress_concurrency: args.compress_concurrency.and_then(|n| usize::try_from(n).ok()),
        upload_concurrency: args.upload_concurrency,
        quiet: false,
    };
    let (run, _) = open_run(&args.run.topology, &args.run.backend.location(), |t| Ok(opts.artifacts(t)?)).await?;
    super::runs::ensure_manifest(&run, None).await;
    let report = transfer::push(&run, &opts).await?;
    super::print(args.json.json, &report, &report)?;
    let failures = &report.failures;
    if !failures.is_empty() {
        bail!("{} of {} artifacts not pushed", failures.len(), failures.len() + report.pushed.len());
    }
    Ok(())
}

async fn fetch(args: FetchArgs) -> anyhow::Result<()> {
    if args.therock.dry_run {
        let message = "quarry artifacts fetch has no --dry-run: `quarry artifacts info --stage STAGE` says what a \
                       stage fetches";
        return Err(UsageError::new(message).into());
    }
    let mut opts = FetchOptions::from(&args);
    opts.names = NameFilter::new(&args.therock.include, &args.therock.exclude).map_err(UsageError::new)?;
    let (run, _) = open_run(&args.run.topology, &args.run.backend.location(), |t| Ok(opts.artifacts(t)?)).await?;
    let report = transfer::fetch(&run, &opts).await?;
    super::print(args.json.json, &report, &report)?;
    if !opts.names.is_empty() && report.fetched.is_empty() && report.failures.is_empty() {
        bail!("no archive in {} matches the include and exclude patterns", report.prefix);
    }
    if !report.failures.is_empty() {
        bail!("{} artifacts could not be fetched:\n  {}", report.failures.len(), report.failures.join("\n  "));
    }
    Ok(())
}

async fn copy(args: CopyArgs) -> anyhow::Result<()> {
    let opts = CopyOptions {
        source_run_id: args.source_run_id,
        source_repository: args.source_repository,
        source_store: args.source_store,
        stages: split_list(&args.stage),
        gpus: (&args.gpus).into(),
        concurrency: args.concurrency,
    };
    let (run, _) = open_run(&args.run.topology, &args.run.backend.location(), |t| Ok(opts.artifacts(t)?)).await?;
    let plan = transfer::copy_plan(&run, &opts).await?;
    let mut out = std::io::stdout().lock();
    let source = plan.source_url.trim_end_matches('/');
    if args.dry_run {
        for file in &plan.files {
            writeln!(out, "would copy {source}/{}{file} -> {}{file}", plan.source_prefix, run.prefix)?;
        }
        return Ok(());
    }
    let report = transfer::copy(&run, &plan, opts.concurrency).await;
    for (file, method) in &report.copied {
        writeln!(out, "copied  {}{file} from {source}/{}{file} ({})", run.prefix, plan.source_prefix, method.label())?;
    }
    if !report.failures.is_empty() {
        bail!("{} files not copied:\n  {}", report.failures.len(), report.failures.join("\n  "));
    }
    Ok(())
}

fn info(args: &InfoArgs) -> anyhow::Result<()> {
    let topology = load_topology(&args.run.topology)?;
    let produced = stage_artifacts(&topology, &args.stage, false)?;
    let inbound = stage_artifacts(&topology, &args.stage, true)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "stage: {}", args.stage)?;
    writeln!(out, "produces: {}", produced.into_iter().collect::<Vec<_>>().join(" "))?;
    writeln!(out, "fetches: {}", inbound.into_iter().collect::<Vec<_>>().join(" "))?;
    if let Some(families) = &args.amdgpu_families {
        let mut matched = vec!["generic".to_owned()];
        matched.extend(split_list(families));
        writeln!(out, "target families: {}", matched.join(", "))?;
    }
    Ok(())
}

/// `artifact_manager.py list-stages`: the stages in build order, each with its description,
/// groups and how many artifacts it fetches and produces.
fn list_stages(topology: &Path) -> anyhow::Result<()> {
    let topology = load_topology(topology)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "Build stages:")?;
    for name in topology.build_order() {
        let stage = &topology.build_stages[&name];
        writeln!(out, "\n  {name} ({})", stage_kind(stage.kind))?;
        writeln!(out, "    {}", stage.description)?;
        writeln!(out, "    Groups: {}", stage.artifact_groups.join(", "))?;
        writeln!(out, "    Inbound: {} artifacts", stage_artifacts(&topology, &name, true)?.len())?;
        writeln!(out, "    Produces: {} artifacts", stage_artifacts(&topology, &name, false)?.len())?;
    }
    Ok(())
}

/// A stage's type as TheRock's tools print it.
pub(crate) fn stage_kind(kind: quarry_topology::StageType) -> &'static str {
    if kind == quarry_topology::StageType::PerArch { "per-arch" } else { "generic" }
}
