//! Push: a stage's artifact directories under `<build-dir>/artifacts/` archived into
//! `<build-dir>/.upload_cache/` (ready archives in `artifacts/` go as they are), then each
//! uploaded before its sidecar, so a reader that sees the sidecar sees the archive.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use futures_util::StreamExt as _;
use quarry_artifacts::{ArchiveFormat, ArchiveOptions, ArtifactName, sidecar, write_archive};
use quarry_store::{FileHandover, PutOptions, StoreExt as _};
use quarry_topology::Topology;

use super::writeback::{self, EarlyWriteback};
use super::{Moved, TransferError, stage_artifacts};
use quarry_store::error_chain;

use crate::Run;

/// An `info!` line, or a `debug!` one when a live view owns the terminal.
macro_rules! progress {
    ($quiet:expr, $($arg:tt)+) => {
        if $quiet { tracing::debug!($($arg)+) } else { tracing::info!($($arg)+) }
    };
}

/// What to push and how.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// The stage whose produced artifacts are pushed (`all`: every artifact found).
    pub stage: String,
    /// Artifacts are read from `<build-dir>/artifacts/`, archives written to
    /// `<build-dir>/.upload_cache/`.
    pub build_dir: PathBuf,
    /// `.tar.zst` or `.tar.xz`.
    pub format: ArchiveFormat,
    /// zstd 1–22 (default 3), xz 0–9 (default 6).
    pub level: Option<i32>,
    /// Every member's modification time (`SOURCE_DATE_EPOCH`).
    pub mtime: u64,
    /// Archives written at once; `None`: one per core (at most one per archive), the cores
    /// shared out as each zstd archive's compression workers.
    pub compress_concurrency: Option<usize>,
    /// Uploads at once.
    pub upload_concurrency: usize,
    /// Progress lines at debug level.
    pub quiet: bool,
}

impl PushOptions {
    /// The artifact names this push takes (an unknown stage is refused here).
    pub fn artifacts(&self, topology: &Topology) -> Result<BTreeSet<String>, TransferError> {
        stage_artifacts(topology, &self.stage, false)
    }
}

/// What a push did: archives pushed (by file name) and one line per failure. Serialized with
/// its fields in the order `--json` has always printed them.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PushReport {
    /// One line per artifact not archived or uploaded.
    #[serde(rename = "failed")]
    pub failures: Vec<String>,
    /// The run prefix pushed to.
    pub prefix: String,
    /// Archives pushed, by file name.
    pub pushed: Vec<Moved>,
}

/// One line per archive pushed, then one per failure.
impl std::fmt::Display for PushReport {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for m in &self.pushed {
            writeln!(out, "pushed  {}{} ({} bytes)", self.prefix, m.file, m.size)?;
        }
        self.failures.iter().try_for_each(|f| writeln!(out, "failed  {f}"))
    }
}

/// Archives and uploads a stage's artifacts. Each archive is uploaded as soon as it is written
/// (the next one is being compressed meanwhile), with the sha256 its writer computed.
pub async fn push(run: &Run, opts: &PushOptions) -> Result<PushReport, TransferError> {
    let wanted = opts.artifacts(&run.topology)?;
    let cache = opts.build_dir.join(".upload_cache");
    std::fs::create_dir_all(&cache).map_err(crate::io(format!("creating {}", cache.display())))?;
    let (to_archive, mut ready) = scan(&opts.build_dir.join("artifacts"), &opts.stage, &wanted)?;
    let cpus = std::thread::available_parallelism().map_or(2, usize::from);
    let concurrency = opts.compress_concurrency.unwrap_or(cpus).clamp(1, to_archive.len().max(1));
    // The bytes do not depend on the number of workers.
    let threads = u32::try_from((cpus / concurrency).max(1)).unwrap_or(1);
    let archive = ArchiveOptions { format: opts.format, level: opts.level, threads, mtime: opts.mtime };
    // An archive written now replaces a ready one of the same artifact.
    for (name, _) in &to_archive {
        ready.remove(name);
    }
    progress!(opts.quiet, archive = to_archive.len(), ready = ready.len(), stage = %opts.stage, "pushing");
    let started = std::time::Instant::now();
    let archived = futures_util::stream::iter(to_archive)
        .map(|(name, dir)| {
            let path = cache.join(name.archive_name(opts.format));
            async move {
                let written = tokio::task::spawn_blocking(move || archive_one(name, &dir, path, &archive)).await??;
                Ok::<_, TransferError>(Pending {
                    name: written.0,
                    format: opts.format,
                    path: written.1,
                    sha256: Some(written.2),
                })
            }
        })
        .buffer_unordered(concurrency);
    let ready = futures_util::stream::iter(ready)
        .map(|(name, (format, path))| Ok(Pending { name, format, path, sha256: None }));
    let uploads: Vec<Result<Moved, TransferError>> = ready
        .chain(archived)
        .map(|pending| async move { upload_archive(run, pending?).await })
        .buffer_unordered(opts.upload_concurrency.max(1))
        .collect()
        .await;
    let mut failures = Vec::new();
    let mut pushed = successes(uploads, &mut failures);
    progress!(opts.quiet, seconds = started.elapsed().as_secs_f64(), "archived and uploaded");
    pushed.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(PushReport { failures, prefix: run.prefix.clone(), pushed })
}

/// An archive to upload: written by this push (its sha256 known) or found ready.
struct Pending {
    name: ArtifactName,
    format: ArchiveFormat,
    path: PathBuf,
    sha256: Option<String>,
}

/// The successes; each failure's chain goes to `failures`.
fn successes<T>(results: Vec<Result<T, TransferError>>, failures: &mut Vec<String>) -> Vec<T> {
    let mut ok = Vec::new();
    for result in results {
        match result {
            Ok(value) => ok.push(value),
            Err(e) => failures.push(error_chain(&e)),
        }
    }
    ok
}

type Ready = BTreeMap<ArtifactName, (ArchiveFormat, PathBuf)>;

/// The stage's artifact directories to archive and its archives ready to go.
fn scan(
    source: &Path,
    stage: &str,
    wanted: &BTreeSet<String>,
) -> Result<(Vec<(ArtifactName, PathBuf)>, Ready), TransferError> {
    let reading = || crate::io(format!("reading {}", source.display()));
    let mut to_archive = Vec::new();
    let mut ready = Ready::new();
    for entry in std::fs::read_dir(source).map_err(reading())? {
        let entry = entry.map_err(reading())?;
        let file_name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().map_err(reading())?.is_dir() {
            if let Ok(name) = ArtifactName::parse_dir(&file_name)
                && (stage == "all" || wanted.contains(&name.name))
            {
                to_archive.push((name, entry.path()));
            }
        } else if let Some((name, f)) = ArtifactName::parse_archive(&file_name)
            && (stage == "all" || wanted.contains(&name.name))
        {
            ready.entry(name).or_insert((f, entry.path()));
        }
    }
    to_archive.sort();
    Ok((to_archive, ready))
}

/// Writes one archive through a temporary file beside `path`: the name, the path and the
/// archive's sha256.
fn archive_one(
    name: ArtifactName,
    dir: &Path,
    path: PathBuf,
    opts: &ArchiveOptions,
) -> Result<(ArtifactName, PathBuf, String), TransferError> {
    let writing = || crate::io(format!("writing {}", path.display()));
    let tmp = tempfile::NamedTempFile::new_in(path.parent().unwrap_or(Path::new("."))).map_err(writing())?;
    // The disk writes the archive while it is compressed (the store's sync comes after). The
    // compressor hands over pieces of about 128 KiB: a small buffer lets them go straight
    // to the file.
    let second = tmp.as_file().try_clone();
    let out = EarlyWriteback::new(std::io::BufWriter::with_capacity(16 << 10, tmp), second, writeback::EVERY);
    let (writer, report) = write_archive(dir, out, opts)
        .map_err(|source| TransferError::Artifact { what: format!("archiving {}", dir.display()), source })?;
    let buffered = writer.finish().map_err(writing())?;
    let tmp = buffered.into_inner().map_err(|e| writing()(e.into_error()))?;
    tmp.persist(&path).map_err(|e| writing()(e.error))?;
    Ok((name, path, report.sha256))
}

/// Uploads an archive, then its sidecar. Pushing again replaces both: a rebuilt artifact is not
/// an error. An archive this push wrote is handed to the store (a local directory links it
/// rather than copying it: the cache file is replaced, never rewritten, by the next push).
async fn upload_archive(run: &Run, pending: Pending) -> Result<Moved, TransferError> {
    let Pending { name, format, path, sha256 } = pending;
    let file = name.archive_name(format);
    let reading = || crate::io(format!("reading {}", path.display()));
    let (sha256, handover) = match sha256 {
        Some(sha256) => (sha256, FileHandover::Give),
        None => (quarry_store::hash_file(&path).await.map_err(reading())?.1, FileHandover::Copy),
    };
    let key = run.key(&file)?;
    let options = PutOptions { sha256: Some(sha256.clone()), ..PutOptions::default() };
    let put =
        run.store.put_file(&key, &path, handover, options).await.map_err(crate::store(format!("uploading {key}")))?;
    let side = run.key(&sidecar::sidecar_name(&file))?;
    run.store
        .put_bytes(&side, sidecar::render(&sha256).into(), PutOptions::default())
        .await
        .map_err(crate::store(format!("uploading {side}")))?;
    Ok(Moved { artifact: name.to_string(), file, size: put.size, sha256 })
}
