//! Fetch: the archives a stage needs, chosen from the run's listing, downloaded (three attempts,
//! each checked against its sidecar) into a cache and unpacked; nothing is unpacked when any
//! download failed. From a store that keeps its objects as files (a local staging directory),
//! an archive that is only unpacked is read in place: checked against its sidecar through the
//! open file, then unpacked from that same file, with no copy in a cache.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures_util::StreamExt as _;
use quarry_artifacts::{ArchiveFormat, ArtifactName, COMPONENTS, ExtractMode, sidecar};
use quarry_store::{Key, StoreExt as _};
use quarry_topology::Topology;

use super::{GpuSelection, Moved, Source, TransferError, listed, select, stage_artifacts, unpack_all};
use quarry_store::error_chain;

use crate::Run;

/// What to fetch and where to put it.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// The stage whose inbound artifacts are fetched (`all`: every topology artifact).
    pub stage: String,
    /// Which GPU-specific archives to take.
    pub gpus: GpuSelection,
    /// Where archives are unpacked (or downloaded, without extraction).
    pub output_dir: PathBuf,
    /// How to unpack; `None` downloads only (archives land in `output_dir`).
    pub extract: Option<ExtractMode>,
    /// Keep downloads here (default: `<output-dir>/.download_cache`, deleted afterwards).
    pub download_cache_dir: Option<PathBuf>,
    /// Downloads at once.
    pub download_concurrency: usize,
    /// Archives unpacked at once (default: the number of CPUs).
    pub extract_concurrency: Option<usize>,
    /// Components to leave out (`lib`, `run`, `dbg`, `dev`, `doc`, `test`).
    pub exclude_components: Vec<String>,
    /// Artifacts to leave out (names from the topology).
    pub exclude_artifacts: Vec<String>,
    /// What one archive may unpack to, its members' sizes added up
    /// ([`quarry_artifacts::DEFAULT_MAX_BYTES`] by default).
    pub max_unpacked_bytes: u64,
    /// Unpacked bytes per compressed byte one archive may reach
    /// ([`quarry_artifacts::DEFAULT_MAX_RATIO`] by default).
    pub max_expansion_ratio: u64,
    /// Which archives to take by file name (`fetch_artifacts.py`'s patterns); everything by
    /// default.
    pub names: NameFilter,
}

/// `fetch_artifacts.py`'s file-name patterns: an archive is taken when one of `include`
/// matches its file name (or there is none) and none of `exclude` does; a pattern matches
/// anywhere in the name, as Python's `re.search`.
#[derive(Debug, Clone, Default)]
pub struct NameFilter {
    include: Vec<regex_lite::Regex>,
    exclude: Vec<regex_lite::Regex>,
}

impl NameFilter {
    /// Compiles the patterns; the error names the one that is not a regular expression.
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self, String> {
        let compile = |patterns: &[String]| -> Result<Vec<regex_lite::Regex>, String> {
            patterns
                .iter()
                .map(|p| regex_lite::Regex::new(p).map_err(|e| format!("{p:?} is not a regular expression: {e}")))
                .collect()
        };
        Ok(Self { include: compile(include)?, exclude: compile(exclude)? })
    }

    /// No pattern: every archive is taken.
    pub fn is_empty(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty()
    }

    /// Whether the archive named `file` is taken.
    pub fn takes(&self, file: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|r| r.is_match(file)))
            && !self.exclude.iter().any(|r| r.is_match(file))
    }
}

impl FetchOptions {
    /// The artifact names this fetch takes; an unknown stage, excluded artifact or component
    /// is refused here.
    pub fn artifacts(&self, topology: &Topology) -> Result<BTreeSet<String>, TransferError> {
        let mut wanted = stage_artifacts(topology, &self.stage, true)?;
        for name in &self.exclude_artifacts {
            if !topology.artifacts.contains_key(name) {
                return Err(TransferError::UnknownArtifact(name.clone()));
            }
            wanted.remove(name);
        }
        if let Some(bad) = self.exclude_components.iter().find(|c| !COMPONENTS.contains(&c.as_str())) {
            return Err(TransferError::UnknownComponent { component: bad.clone() });
        }
        Ok(wanted)
    }
}

/// What a fetch did. Serialized with its fields in the order `--json` has always printed them.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FetchReport {
    /// One line per archive that failed to download, verify or unpack.
    #[serde(rename = "failed")]
    pub failures: Vec<String>,
    /// Archives downloaded, by file name.
    pub fetched: Vec<Moved>,
    /// Wanted artifacts the run has no archive of (those this platform does not build are not
    /// missing).
    pub not_in_run: Vec<String>,
    /// The run prefix fetched from.
    pub prefix: String,
}

/// One line per archive fetched, then one per failure.
impl std::fmt::Display for FetchReport {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for m in &self.fetched {
            writeln!(out, "fetched {} ({} bytes)", m.file, m.size)?;
        }
        self.failures.iter().try_for_each(|f| writeln!(out, "failed  {f}"))
    }
}

/// Downloads, verifies and unpacks a stage's artifacts; per-archive failures are in the report.
pub async fn fetch(run: &Run, opts: &FetchOptions) -> Result<FetchReport, TransferError> {
    let wanted = opts.artifacts(&run.topology)?;
    let excluded: BTreeSet<String> = opts.exclude_components.iter().cloned().collect();
    let mut chosen = select(&listed(run, &run.prefix).await?, &wanted, &opts.gpus, &excluded);
    let found: BTreeSet<String> = chosen.keys().map(|n| n.name.clone()).collect();
    let not_in_run: Vec<String> = run
        .topology
        .built_on(&wanted, run.platform(), &BTreeSet::new())
        .into_iter()
        .filter(|w| !found.contains(w.as_str()))
        .collect();
    chosen.retain(|name, format| opts.names.takes(&name.archive_name(*format)));
    for name in &not_in_run {
        tracing::warn!(artifact = %name, "no archive in {} for this artifact", run.prefix);
    }

    let creating = |dir: &Path| crate::io(format!("creating {}", dir.display()));
    std::fs::create_dir_all(&opts.output_dir).map_err(creating(&opts.output_dir))?;
    let (cache, keep_cache) = match &opts.download_cache_dir {
        Some(dir) => (dir.clone(), true),
        None if opts.extract.is_none() => (opts.output_dir.clone(), true),
        None => (opts.output_dir.join(".download_cache"), false),
    };
    std::fs::create_dir_all(&cache).map_err(creating(&cache))?;
    // Only what is unpacked and not kept is read in place.
    let in_place = opts.extract.is_some() && !keep_cache;
    let (mut fetched, downloaded, mut failures) =
        download_all(run, &chosen, &cache, in_place, opts.download_concurrency).await;
    if let Some(mode) = opts.extract
        && failures.is_empty()
    {
        let out = opts.output_dir.clone();
        let jobs =
            opts.extract_concurrency.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from));
        // A Windows run's archives must hold only names Windows can: refused on every host.
        let limits = quarry_artifacts::Limits {
            portable_names: run.platform() == quarry_topology::Platform::Windows,
            max_bytes: opts.max_unpacked_bytes,
            max_ratio: opts.max_expansion_ratio,
            ..Default::default()
        };
        failures.extend(tokio::task::spawn_blocking(move || unpack_all(&downloaded, &out, mode, jobs, limits)).await??);
    }
    if !keep_cache {
        let _ = std::fs::remove_dir_all(&cache);
    }
    fetched.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(FetchReport { failures, fetched, not_in_run, prefix: run.prefix.clone() })
}

type Downloaded = Vec<(ArtifactName, ArchiveFormat, Source)>;

/// Obtains the chosen archives, checked against their sidecars: downloaded into `cache`, or
/// (`in_place`, from a store of files) opened where they are. What was fetched, the archives
/// (sorted by name) and the failures.
async fn download_all(
    run: &Run,
    chosen: &BTreeMap<ArtifactName, ArchiveFormat>,
    cache: &Path,
    in_place: bool,
    concurrency: usize,
) -> (Vec<Moved>, Downloaded, Vec<String>) {
    let results: Vec<_> = futures_util::stream::iter(chosen)
        .map(|(name, format)| {
            let file = name.archive_name(*format);
            let to = cache.join(&file);
            async move {
                let result = fetch_one(run, &file, &to, in_place).await;
                (name, *format, file, result)
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let (mut fetched, mut ok, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    for (name, format, file, result) in results {
        match result {
            Ok((sha256, source)) => {
                fetched.push(Moved { artifact: name.to_string(), file, size: source.size(), sha256 });
                ok.push((name.clone(), format, source));
            }
            Err(e) => failures.push(format!("{file}: {}", error_chain(&e))),
        }
    }
    ok.sort_by(|a, b| a.0.cmp(&b.0));
    (fetched, ok, failures)
}

/// Obtains one archive and checks it against its sidecar: three attempts, 2 s and 4 s apart.
async fn fetch_one(run: &Run, file: &str, to: &Path, in_place: bool) -> Result<(String, Source), TransferError> {
    let key = run.key(file)?;
    let side = run.key(&sidecar::sidecar_name(file))?;
    let mut attempt = 1u32;
    loop {
        match verified(run, &key, &side, to, in_place).await {
            Ok(got) => return Ok(got),
            Err(e) => {
                tracing::warn!(%key, attempt, "{}", error_chain(&e));
                if attempt == 3 {
                    return Err(e);
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2u64 << (attempt - 1))).await;
        attempt += 1;
    }
}

/// The archive at `key`, opened in place (`in_place`, a store of files) or downloaded to `to`,
/// with its sha256 checked against the sidecar at `side` (when there is one).
async fn verified(
    run: &Run,
    key: &Key,
    side: &Key,
    to: &Path,
    in_place: bool,
) -> Result<(String, Source), TransferError> {
    let expected = match run.store.get_bytes(side, 4096).await {
        Ok((_, bytes)) => Some(
            sidecar::parse(&String::from_utf8_lossy(&bytes))
                .ok_or_else(|| TransferError::NoSha256(side.to_string()))?,
        ),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(crate::store(format!("reading {side}"))(e).into()),
    };
    let opened =
        if in_place { run.store.open_file(key).await.map_err(crate::store(format!("opening {key}")))? } else { None };
    let (actual, source) = match opened {
        Some(file) => {
            let reading = crate::io(format!("reading {key}"));
            tokio::task::spawn_blocking(move || hash_open(&file).map(|sha| (sha, Source::InPlace(file))))
                .await?
                .map_err(reading)?
        }
        None => (download(run, key, to).await?, Source::Downloaded(to.to_path_buf())),
    };
    match expected {
        Some(expected) if expected != actual => Err(TransferError::Mismatch { key: key.to_string(), actual, expected }),
        None => {
            tracing::warn!(%key, "no .sha256sum sidecar; not verified");
            Ok((actual, source))
        }
        _ => Ok((actual, source)),
    }
}

/// The sha256 of an open file read from its start, in 1 MiB chunks.
fn hash_open(file: &std::fs::File) -> std::io::Result<String> {
    use std::io::{Read as _, Seek as _};
    let mut reader = file;
    reader.seek(std::io::SeekFrom::Start(0))?;
    let mut hash = quarry_store::Sha256Hex::default();
    let mut buffer = vec![0; 1 << 20];
    loop {
        let n = reader.read(&mut buffer)?;
        if n == 0 {
            return Ok(hash.finish());
        }
        hash.update(&buffer[..n]);
    }
}

/// Streams an object into `to`, hashing on the way: its sha256.
async fn download(run: &Run, key: &Key, to: &Path) -> Result<String, TransferError> {
    let object = run.store.get(key, None).await.map_err(crate::store(format!("downloading {key}")))?;
    let writing = || crate::io(format!("writing {}", to.display()));
    let mut file = tokio::fs::File::create(to).await.map_err(writing())?;
    let mut body = object.body;
    let mut hash = quarry_store::Sha256Hex::default();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(crate::io(format!("reading {key}")))?;
        hash.update(&chunk);
        tokio::io::AsyncWriteExt::write_all(&mut file, &chunk).await.map_err(writing())?;
    }
    tokio::io::AsyncWriteExt::flush(&mut file).await.map_err(writing())?;
    Ok(hash.finish())
}

#[cfg(test)]
mod name_filter_tests {
    use super::NameFilter;

    fn filter(include: &[&str], exclude: &[&str]) -> NameFilter {
        let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        NameFilter::new(&own(include), &own(exclude)).unwrap()
    }

    #[test]
    fn patterns_match_anywhere_in_the_name_as_re_search() {
        let all = filter(&[], &[]);
        assert!(all.is_empty() && all.takes("blas_lib_gfx942.tar.zst"));
        let some = filter(&["^blas_", "_dev_"], &["gfx1100"]);
        assert!(some.takes("blas_lib_gfx942.tar.zst"));
        assert!(some.takes("sysdeps_dev_generic.tar.xz"));
        assert!(!some.takes("blas_lib_gfx1100.tar.zst"), "an exclude wins");
        assert!(!some.takes("amd-llvm_lib_generic.tar.zst"), "no include matches");
        assert!(!filter(&[], &["amd-llvm"]).takes("amd-llvm_lib_generic.tar.zst"));
    }

    #[test]
    fn a_pattern_that_is_no_regex_is_named() {
        let err = NameFilter::new(&["blas_(".to_owned()], &[]).unwrap_err();
        assert!(err.contains("\"blas_(\" is not a regular expression"), "{err}");
    }
}
