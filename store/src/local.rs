//! A directory on the local filesystem as a store: the embedded default.
//!
//! Layout: the object at key `a/b/c` is the file `ROOT/a/b/c`. The store keeps its own files
//! under `ROOT/.quarry/` (a key can never name them): `tmp/` for uploads in flight, `meta/`
//! for per-object sidecars (sha256, content type) and `lock`, an advisory lock file.
//!
//! Writes go to a temporary file first and are renamed into place, so readers see an object
//! whole or not at all. The rename, its precondition check and the sidecar write happen under an
//! exclusive `flock` on `ROOT/.quarry/lock`, so conditional puts are atomic across threads and
//! processes sharing the directory. The ETag is a fingerprint of (inode, mtime, size): every put
//! renames a fresh inode into place, so any replacement changes it.
//!
//! Keys map to paths one to one, so a key can be a file or a directory, not both: a put whose
//! path crosses an existing file, or lands on a directory, is a [`StoreError::Collision`]. A
//! symlink planted inside the store is never followed (reads answer not found, writes a
//! collision). A temporary file is removed when its put fails or its future is dropped (a
//! client that disconnects mid-upload); files left by a process that died are swept when a
//! store is opened. A durable put fsyncs the file, renames it and fsyncs the directory.
//!
//! A batch ([`Store::put_many`], one blocking task) stages every body outside the lock (an unnamed
//! file where the system has them, [`unnamed`], else a named one in `.quarry/tmp/`), syncs the
//! durable ones concurrently (up to [`SYNC_THREADS`] at once: concurrent syncs share the
//! filesystem's journal commits, where one after another they would each pay one), then under one
//! hold of the lock places every item with its own condition and collision checks, fsyncs each
//! directory that holds a durable item once and writes the sidecars; it answers only once all of it
//! is durable, each item with the result a single put would have had.
//!
//! Reads: [`Store::head_and_read`] takes a small object's metadata and body from one open file
//! (a batch of them in one blocking task, each parent directory checked once), and a listing
//! stats the files of the listed directory through its handle ([`fs::DirEntry::metadata`]), not
//! by walking each path again. A regular file of at most [`INLINE_READ`] (64 KiB) is read on the
//! calling thread, without the hop to the blocking pool, and whole reads of pages and metadata
//! (not of immutable package files) are kept in [`read_cache`] (32 MiB per store), served only
//! while the file's fingerprint is the one read, so another process's write is seen at once.
//! Larger files stream in chunks of 16 KiB doubling up to 256 KiB while the reader keeps up;
//! every chunk over 16 KiB draws on one 64 MiB budget for the whole process ([`CHUNK_BUDGET`]),
//! so a thousand slow clients hold a small chunk each.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::AsyncWriteExt;

use crate::hashing::HashingBody;
use crate::{
    ByteRange, ByteStream, Condition, FileHandover, GetObject, Key, ListOptions, ListPage, ObjectMeta, PutOptions,
    PutResult, Result, Store, StoreError, validate_prefix,
};

const INTERNAL_DIR: &str = ".quarry";
/// Bodies and ranges up to this size are moved in one blocking call rather than streamed.
const SMALL_BODY: usize = 256 * 1024;
/// Files up to this size are read on the calling thread by [`Store::get`] (see
/// [`LocalStore::small_file`]).
const INLINE_READ: u64 = 64 * 1024;

/// The byte range `range` names in an object of `size` bytes (all of it for `None`).
fn resolve_range(key: &Key, range: Option<ByteRange>, size: u64) -> Result<(u64, u64)> {
    match range {
        None => Ok((0, size)),
        Some(r) => r.resolve(size).ok_or_else(|| StoreError::RangeNotSatisfiable { key: key.to_string(), size }),
    }
}

/// An object opened for a read: the file, its body when small, its metadata and the range.
type OpenedForGet = (fs::File, Option<bytes::Bytes>, ObjectMeta, (u64, u64));

mod read_cache;
mod unnamed;

use read_cache::{READ_CACHE_BYTES, ReadCache};

#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
    /// Small pages and metadata documents read lately, checked against their file on every read.
    cache: Arc<ReadCache>,
    /// Batched puts write unnamed files (`O_TMPFILE`, Linux) where they can; off only in tests
    /// of the named path.
    unnamed: bool,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Sidecar {
    fingerprint: String,
    sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
}

fn io_err(key: &str) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| {
        // `a/b/c` where `a/b` is a file: there is no such object either.
        if matches!(source.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) {
            StoreError::NotFound(key.to_owned())
        } else {
            StoreError::Io { key: key.to_owned(), source }
        }
    }
}

/// Removes a temporary file when dropped, unless it was committed: a put that fails, or whose
/// future is dropped mid-body, leaves nothing in `.quarry/tmp/`.
struct TempFile {
    path: PathBuf,
    armed: bool,
}

impl TempFile {
    fn new(path: PathBuf) -> Self {
        Self { path, armed: true }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Where a batch item's body was written.
enum Temp {
    /// A temporary file in `.quarry/tmp/`, renamed into place.
    Named(TempFile),
    /// An unnamed file ([`unnamed`]), linked into place: gone with its descriptor if it never is.
    Unnamed,
}

/// What a body is moved into place from.
enum Placing<'a> {
    Named(&'a Path),
    Unnamed(&'a fs::File),
}

/// A batch item's body written to its temporary file, not yet committed.
struct Staged {
    temp: Temp,
    file: fs::File,
    size: u64,
    sha256: String,
    /// Syncing its data failed: committed as this error.
    failed: Option<StoreError>,
}

/// Threads syncing a batch's durable files at once: concurrent syncs share the filesystem's
/// journal commits (and the disk's cache flushes), one after another they each pay one.
const SYNC_THREADS: usize = 16;

/// `fdatasync` each of `files`, [`SYNC_THREADS`] at a time; each one's result, in order.
fn sync_all_data(files: Vec<&fs::File>) -> Vec<io::Result<()>> {
    if files.len() <= 1 {
        return files.into_iter().map(fs::File::sync_data).collect();
    }
    let per_thread = files.len().div_ceil(SYNC_THREADS);
    std::thread::scope(|scope| {
        let handles: Vec<_> = files
            .chunks(per_thread)
            .map(|chunk| (chunk.len(), scope.spawn(move || chunk.iter().map(|f| f.sync_data()).collect::<Vec<_>>())))
            .collect();
        handles
            .into_iter()
            .flat_map(|(len, h)| {
                h.join().unwrap_or_else(|_| (0..len).map(|_| Err(io::Error::other("sync thread panicked"))).collect())
            })
            .collect()
    })
}

/// Whether the process that named a temporary file (`{pid}-…`) may still be writing it.
fn writer_alive(name: &str) -> bool {
    let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    if pid == std::process::id() {
        return true;
    }
    pid_alive(pid)
}

#[cfg(target_os = "linux")]
fn pid_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// No cheap, dependency-free liveness check here: only age decides.
#[cfg(not(target_os = "linux"))]
fn pid_alive(_pid: u32) -> bool {
    true
}

/// Temporary files older than this are swept whoever wrote them.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// (identity, modification time in ns, size): every put renames a fresh file into place, so
/// any replacement changes the identity.
fn fingerprint(meta: &fs::Metadata) -> String {
    let mut out = String::new();
    let _ = write_fingerprint(&mut out, meta);
    out
}

/// Whether `etag` is [`fingerprint`]`(meta)`, compared as it is formatted (no string built).
fn fingerprint_is(meta: &fs::Metadata, etag: &str) -> bool {
    /// Takes the formatted pieces off the front of what is expected while they match.
    struct Expect<'a>(&'a str);
    impl std::fmt::Write for Expect<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0 = self.0.strip_prefix(s).ok_or(std::fmt::Error)?;
            Ok(())
        }
    }
    let mut expect = Expect(etag);
    write_fingerprint(&mut expect, meta).is_ok() && expect.0.is_empty()
}

/// The one spelling of a fingerprint, for [`fingerprint`] and [`fingerprint_is`].
fn write_fingerprint(out: &mut impl std::fmt::Write, meta: &fs::Metadata) -> std::fmt::Result {
    write!(out, "{:x}-{:x}-{:x}", identity(meta), nanos(meta.modified()), meta.len())
}

/// Nanoseconds since the epoch (negative before it; 0 when the filesystem has no such time).
fn nanos(time: io::Result<std::time::SystemTime>) -> i128 {
    match time {
        Ok(t) => match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i128,
            Err(e) => -(e.duration().as_nanos() as i128),
        },
        Err(_) => 0,
    }
}

/// The file's inode.
#[cfg(unix)]
fn identity(meta: &fs::Metadata) -> i128 {
    i128::from(std::os::unix::fs::MetadataExt::ino(meta))
}

/// Windows: stable Rust exposes no file index, so the creation time (100 ns resolution) stands
/// in. A put writes a new temporary file and renames it over the old one, and a rename keeps
/// the moved file's creation time, so a replacement still changes it.
#[cfg(not(unix))]
fn identity(meta: &fs::Metadata) -> i128 {
    nanos(meta.created())
}

/// Reads `from` to its end in 1 MiB chunks, hashing (and writing to `to`) as it goes: the size
/// and sha256, failing beyond `limit` bytes.
fn hash_reader(
    from: &mut fs::File,
    mut to: Option<&mut fs::File>,
    key: &str,
    limit: Option<u64>,
) -> Result<(u64, String)> {
    let mut hasher = crate::Sha256Hex::default();
    let mut buffer = vec![0; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = io::Read::read(from, &mut buffer).map_err(|source| StoreError::Body { key: key.to_owned(), source })?;
        if n == 0 {
            return Ok((size, hasher.finish()));
        }
        size += n as u64;
        if limit.is_some_and(|limit| size > limit) {
            return Err(StoreError::TooLarge { key: key.to_owned(), limit: limit.unwrap_or_default() });
        }
        hasher.update(&buffer[..n]);
        if let Some(to) = to.as_deref_mut() {
            io::Write::write_all(to, &buffer[..n]).map_err(io_err(key))?;
        }
    }
}

/// A linked file keeps its owner's mode (a temporary file's is `0600`): made readable by all,
/// as a file the store creates is under the usual umask, so a web server in front of the
/// directory can serve it.
#[cfg(unix)]
fn readable_by_all(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = fs::metadata(path)?.permissions().mode();
    if mode & 0o444 != 0o444 {
        fs::set_permissions(path, fs::Permissions::from_mode(mode | 0o444))?;
    }
    Ok(())
}

/// Windows has no mode bits to widen: a linked file is readable as its directory allows.
#[cfg(not(unix))]
fn readable_by_all(_path: &Path) -> io::Result<()> {
    Ok(())
}

fn timestamp(meta: &fs::Metadata) -> jiff::Timestamp {
    let ns = nanos(meta.modified());
    jiff::Timestamp::from_nanosecond(ns).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| StoreError::Backend(format!("blocking task failed: {e}")))?
}

impl LocalStore {
    /// Open (creating if needed) a store rooted at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        for sub in ["tmp", "meta"] {
            fs::create_dir_all(path.join(INTERNAL_DIR).join(sub)).map_err(io_err(&shown))?;
        }
        let root = fs::canonicalize(path).map_err(io_err(&shown))?;
        let store = Self { root, cache: Arc::new(ReadCache::new(READ_CACHE_BYTES)), unnamed: true };
        store.sweep_temp();
        Ok(store)
    }

    /// Removes temporary files whose writer is gone (a process killed mid-upload) or that are
    /// older than a day. Returns how many were removed.
    pub fn sweep_temp(&self) -> usize {
        let Ok(entries) = fs::read_dir(self.root.join(INTERNAL_DIR).join("tmp")) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > STALE_TEMP);
            if (old || !writer_alive(&name)) && fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        if removed > 0 {
            tracing::info!(removed, store = %self.root.display(), "removed temporary files left by interrupted uploads");
        }
        removed
    }

    /// The first of `segments` (a path below the root, in order) that is not a real
    /// directory: its index and whether it is a symlink. Stops at the first missing one.
    fn first_non_dir(&self, segments: &[&str]) -> io::Result<Option<(usize, bool)>> {
        let mut path = self.root.clone();
        for (i, segment) in segments.iter().enumerate() {
            path.push(segment);
            match fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => {}
                Ok(m) => return Ok(Some((i, m.file_type().is_symlink()))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Refuses a key whose path crosses a symlink or a file below the root (the object itself
    /// is not checked). `write`: collisions are [`StoreError::Collision`]; reads see them as not
    /// found.
    fn check_parents(&self, key: &Key, write: bool) -> Result<()> {
        let k = key.as_str();
        check_portable(key, write)?;
        let segments: Vec<&str> = k.split('/').collect();
        match self.first_non_dir(&segments[..segments.len() - 1]).map_err(io_err(k))? {
            None => Ok(()),
            Some(_) if !write => Err(StoreError::NotFound(k.to_owned())),
            Some((i, symlink)) => {
                let what = if symlink { "a symlink, never followed" } else { "an object" };
                Err(StoreError::Collision {
                    key: k.to_owned(),
                    reason: format!("{} is {what}, so nothing can be stored under it", segments[..=i].join("/")),
                })
            }
        }
    }

    /// [`Self::check_parents`] for one of a batch's keys: the key itself always, its parent
    /// directories only when `checked` (the parents this batch has already checked) does not
    /// hold them yet.
    fn check_parents_once(&self, key: &Key, write: bool, checked: &mut HashSet<String>) -> Result<()> {
        let parent = key.as_str().rsplit_once('/').map_or("", |(parent, _)| parent);
        if checked.contains(parent) {
            return check_portable(key, write);
        }
        self.check_parents(key, write)?;
        checked.insert(parent.to_owned());
        Ok(())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, key: &Key) -> PathBuf {
        self.root.join(key.as_str())
    }

    fn sidecar_path(&self, key: &Key) -> PathBuf {
        self.root.join(INTERNAL_DIR).join("meta").join(format!("{}.json", key.as_str()))
    }

    fn temp_path(&self) -> PathBuf {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = jiff::Timestamp::now().as_nanosecond();
        self.root.join(INTERNAL_DIR).join("tmp").join(format!("{}-{nanos:x}-{n}", std::process::id()))
    }

    fn lock(&self) -> io::Result<fs::File> {
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.root.join(INTERNAL_DIR).join("lock"))?;
        file.lock()?;
        Ok(file)
    }

    fn object_meta(&self, key: &Key, meta: &fs::Metadata, with_sidecar: bool) -> ObjectMeta {
        let etag = fingerprint(meta);
        let sidecar = if with_sidecar {
            fs::read(self.sidecar_path(key))
                .ok()
                .and_then(|b| serde_json::from_slice::<Sidecar>(&b).ok())
                .filter(|s| s.fingerprint == etag)
        } else {
            None
        };
        ObjectMeta {
            key: key.clone(),
            size: meta.len(),
            etag,
            last_modified: timestamp(meta),
            sha256: sidecar.as_ref().map(|s| s.sha256.clone()),
            content_type: sidecar.and_then(|s| s.content_type),
        }
    }

    fn stat_file(&self, key: &Key) -> Result<fs::Metadata> {
        self.check_parents(key, false)?;
        let meta = fs::symlink_metadata(self.path(key)).map_err(io_err(key.as_str()))?;
        if meta.is_file() { Ok(meta) } else { Err(StoreError::NotFound(key.to_string())) }
    }

    /// Check the condition, rename `tmp` into place and record the sidecar, all under the lock.
    fn commit(
        &self,
        key: &Key,
        tmp: &Path,
        condition: &Condition,
        record: Option<(String, Option<String>)>,
    ) -> Result<String> {
        let _guard = self.lock().map_err(io_err(key.as_str()))?;
        self.commit_locked(key, tmp, condition, record)
    }

    /// [`LocalStore::commit`] with the lock already held by the caller.
    fn commit_locked(
        &self,
        key: &Key,
        tmp: &Path,
        condition: &Condition,
        record: Option<(String, Option<String>)>,
    ) -> Result<String> {
        let etag = self.place_locked(key, Placing::Named(tmp), condition, &mut HashSet::new())?;
        let Some((sha256, content_type)) = record else { return Ok(etag) };
        // The rename is durable once its directory is.
        sync_dir(self.path(key).parent().unwrap_or(&self.root)).map_err(io_err(key.as_str()))?;
        self.record_locked(key, &etag, sha256, content_type)?;
        Ok(etag)
    }

    /// Check the condition and rename `tmp` into place (the lock held): the new ETag.
    /// `verified`: parent directories this hold of the lock has already checked and created
    /// (a batch's items share a few), checked again only when not in it.
    fn place_locked(
        &self,
        key: &Key,
        from: Placing<'_>,
        condition: &Condition,
        verified: &mut HashSet<String>,
    ) -> Result<String> {
        let k = key.as_str();
        let target = self.path(key);
        let parent = k.rsplit_once('/').map_or("", |(parent, _)| parent);
        let known = verified.contains(parent);
        if known {
            check_portable(key, true)?;
        } else {
            self.check_parents(key, true)?;
        }
        // An unnamed file with no condition on an existing object is linked into place first:
        // a new key (the usual case) then costs no `lstat`, and whatever holds the name already
        // is dealt with below, as if the link had not been tried.
        if let (Placing::Unnamed(file), Condition::None | Condition::IfNoneMatch) = (&from, condition) {
            if !known {
                ensure_parent(&target).map_err(io_err(k))?;
            }
            if unnamed::link_new(file, &target).map_err(io_err(k))? {
                let placed = file.metadata().map_err(io_err(k))?;
                if !known {
                    verified.insert(parent.to_owned());
                }
                return Ok(fingerprint(&placed));
            }
        }
        let current = match fs::symlink_metadata(&target) {
            Ok(m) if m.is_file() => Some(m),
            Ok(m) => {
                let what = if m.is_dir() { "a directory of other objects" } else { "a symlink, never followed" };
                return Err(StoreError::Collision { key: k.to_owned(), reason: format!("the path is {what}") });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(k)(e)),
        };
        match (condition, &current) {
            (Condition::IfNoneMatch, Some(_)) => {
                return Err(StoreError::Conflict { key: k.to_owned(), reason: "the object already exists".into() });
            }
            (Condition::IfMatch(_), None) => {
                return Err(StoreError::Conflict { key: k.to_owned(), reason: "the object does not exist".into() });
            }
            (Condition::IfMatch(expected), Some(m)) if &fingerprint(m) != expected => {
                return Err(StoreError::Conflict { key: k.to_owned(), reason: "the object has changed".into() });
            }
            _ => {}
        }
        if !known {
            ensure_parent(&target).map_err(io_err(k))?;
        }
        let placed = match from {
            Placing::Named(tmp) => replace(tmp, &target).and_then(|()| fs::symlink_metadata(&target)),
            // The same inode as the name now holds: its identity, mtime and size.
            Placing::Unnamed(file) => {
                unnamed::link(file, &target, current.is_some(), &self.temp_path()).and_then(|()| file.metadata())
            }
        };
        let placed = placed.map_err(io_err(k))?;
        if !known {
            verified.insert(parent.to_owned());
        }
        Ok(fingerprint(&placed))
    }

    /// Write the sidecar of a durable object just placed at ETag `etag` (the lock held).
    fn record_locked(&self, key: &Key, etag: &str, sha256: String, content_type: Option<String>) -> Result<()> {
        let k = key.as_str();
        let sidecar = Sidecar { fingerprint: etag.to_owned(), sha256, content_type };
        let sidecar_path = self.sidecar_path(key);
        ensure_parent(&sidecar_path).map_err(io_err(k))?;
        let sidecar_tmp = self.temp_path();
        let body = serde_json::to_vec(&sidecar).map_err(|e| StoreError::Backend(e.to_string()))?;
        fs::write(&sidecar_tmp, body).map_err(io_err(k))?;
        replace(&sidecar_tmp, &sidecar_path).map_err(io_err(k))?;
        Ok(())
    }

    /// Check `body` against its size limit and declared digest and write it to a fresh
    /// temporary file, left open and unsynced: the temporary, the file, size and sha256.
    /// `dirs`: whether each parent directory met in this batch holds unnamed files.
    fn stage(&self, key: &Key, body: &[u8], options: &PutOptions, dirs: &mut HashMap<String, bool>) -> Result<Staged> {
        let k = key.as_str();
        let size = body.len() as u64;
        if let Some(limit) = options.max_size
            && size > limit
        {
            return Err(StoreError::TooLarge { key: k.to_owned(), limit });
        }
        let sha256 = crate::hashing::check_digest(k, options.sha256.as_deref(), crate::sha256_hex(body))?;
        let (temp, mut file) = self.create_temp(key, dirs).map_err(io_err(k))?;
        io::Write::write_all(&mut file, body).map_err(io_err(k))?;
        Ok(Staged { temp, file, size, sha256, failed: None })
    }

    /// A new temporary file for `key`'s body: unnamed where the system has them, in the key's
    /// directory when that is a real directory below the root (checked once per batch), else
    /// in `.quarry/tmp/`; named in `.quarry/tmp/` otherwise.
    fn create_temp(&self, key: &Key, dirs: &mut HashMap<String, bool>) -> io::Result<(Temp, fs::File)> {
        if self.unnamed {
            let parent = key.as_str().rsplit_once('/').map_or("", |(parent, _)| parent);
            let usable = *dirs.entry(parent.to_owned()).or_insert_with(|| {
                // A new directory (a new project's pages) costs one `lstat`, not one per segment.
                let segments: Vec<&str> = parent.split('/').filter(|s| !s.is_empty()).collect();
                fs::symlink_metadata(self.root.join(parent)).is_ok_and(|m| m.is_dir())
                    && matches!(self.first_non_dir(&segments), Ok(None))
            });
            let dir = if usable { self.root.join(parent) } else { self.root.join(INTERNAL_DIR).join("tmp") };
            if let Some(file) = unnamed::create(&dir) {
                return Ok((Temp::Unnamed, file));
            }
        }
        let guard = TempFile::new(self.temp_path());
        let file = fs::File::create(&guard.path)?;
        Ok((Temp::Named(guard), file))
    }

    /// [`Store::put_many`] in one blocking task: every body is staged first and the durable
    /// ones synced together, then all are committed under one hold of the lock, each as
    /// [`Store::put`] commits it, except that each directory holding a durable item is synced
    /// once for the batch (before any sidecar is written and before the lock is released).
    fn put_many_blocking(&self, items: Vec<(Key, bytes::Bytes, PutOptions)>) -> Vec<Result<PutResult>> {
        let mut dirs = HashMap::new();
        let mut staged: Vec<_> =
            items.iter().map(|(key, body, options)| self.stage(key, body, options, &mut dirs)).collect();
        let durable: Vec<_> = items
            .iter()
            .zip(staged.iter_mut())
            .filter(|((_, _, options), _)| !options.derived)
            .filter_map(|((key, _, _), staged)| staged.as_mut().ok().map(|s| (key, s)))
            .collect();
        let synced = sync_all_data(durable.iter().map(|(_, s)| &s.file).collect());
        for ((key, s), result) in durable.into_iter().zip(synced) {
            if let Err(e) = result {
                s.failed = Some(io_err(key.as_str())(e));
            }
        }
        let lock = self.lock();
        if let Err(e) = &lock {
            let err = |k: &Key| Err(io_err(k.as_str())(io::Error::new(e.kind(), e.to_string())));
            return items.iter().map(|(key, _, _)| err(key)).collect();
        }
        // Placed (renamed into place) first, then each directory synced once, then sidecars.
        let mut placed = Vec::with_capacity(items.len());
        let mut verified = HashSet::new();
        for ((key, _, options), staged) in items.iter().zip(staged) {
            placed.push(staged.and_then(|mut s| {
                if let Some(e) = s.failed.take() {
                    return Err(e);
                }
                let from = match &s.temp {
                    Temp::Named(guard) => Placing::Named(&guard.path),
                    Temp::Unnamed => Placing::Unnamed(&s.file),
                };
                let etag = self.place_locked(key, from, &options.condition, &mut verified)?;
                if let Temp::Named(guard) = &mut s.temp {
                    guard.disarm();
                }
                Ok(PutResult { etag, size: s.size, sha256: s.sha256 })
            }));
        }
        let dirs: BTreeSet<PathBuf> = items
            .iter()
            .zip(&placed)
            .filter(|((_, _, options), result)| !options.derived && result.is_ok())
            .map(|((key, _, _), _)| self.path(key).parent().unwrap_or(&self.root).to_path_buf())
            .collect();
        let dir_errors: BTreeMap<PathBuf, io::Error> =
            dirs.into_iter().filter_map(|dir| sync_dir(&dir).err().map(|e| (dir, e))).collect();
        items
            .into_iter()
            .zip(placed)
            .map(|((key, _, options), placed)| {
                let put = placed?;
                if options.derived {
                    return Ok(put);
                }
                if let Some(e) = dir_errors.get(self.path(&key).parent().unwrap_or(&self.root)) {
                    return Err(io_err(key.as_str())(io::Error::new(e.kind(), e.to_string())));
                }
                self.record_locked(&key, &put.etag, put.sha256.clone(), options.content_type)?;
                Ok(put)
            })
            .collect()
    }

    /// [`Store::head_and_read`] in one blocking task: the metadata (with the sidecar's sha256)
    /// and, without a sha256 and at most `keep_up_to` bytes, the body, from one open file.
    /// `checked`: parent directories already found to be real directories (a batch's keys
    /// share a few), not checked again.
    fn head_and_read_blocking(
        &self,
        key: &Key,
        keep_up_to: u64,
        checked: &mut HashSet<String>,
        sidecar_dirs: Option<&mut HashMap<String, bool>>,
    ) -> Result<(ObjectMeta, Option<bytes::Bytes>)> {
        let k = key.as_str();
        let path = self.path(key);
        self.check_parents_once(key, false, checked)?;
        if !fs::symlink_metadata(&path).map_err(io_err(k))?.is_file() {
            return Err(StoreError::NotFound(k.to_owned()));
        }
        let file = fs::File::open(&path).map_err(io_err(k))?;
        // Files copied into the store have no sidecars: in a batch, a directory without any is
        // looked at once, not once per file (a sidecar written meanwhile only costs the caller
        // the sha256 it then computes from the body).
        let parent = k.rsplit_once('/').map_or("", |(parent, _)| parent);
        let with_sidecar = sidecar_dirs.is_none_or(|dirs| {
            *dirs
                .entry(parent.to_owned())
                .or_insert_with(|| self.root.join(INTERNAL_DIR).join("meta").join(parent).is_dir())
        });
        let meta = self.object_meta(key, &file.metadata().map_err(io_err(k))?, with_sidecar);
        if meta.sha256.is_some() || meta.size > keep_up_to {
            return Ok((meta, None));
        }
        let mut data = Vec::with_capacity(meta.size as usize);
        io::Read::read_to_end(&mut io::Read::take(file, meta.size), &mut data).map_err(io_err(k))?;
        // Cut short by a concurrent writer: the caller streams it instead.
        let whole = (data.len() as u64 == meta.size).then(|| bytes::Bytes::from(data));
        Ok((meta, whole))
    }

    /// The metadata of `key`'s file (one `lstat`) when it is a regular file of at most
    /// [`INLINE_READ`] bytes, read without the blocking pool. Anything else, missing keys
    /// included, takes the pool.
    fn small_file(&self, key: &Key) -> Option<fs::Metadata> {
        fs::symlink_metadata(self.path(key)).ok().filter(|m| m.is_file() && m.len() <= INLINE_READ)
    }

    /// [`Store::get`]'s blocking part: check, open, stat and position the file; a body or range
    /// of at most [`SMALL_BODY`] bytes is read whole.
    fn open_for_get(&self, key: &Key, range: Option<ByteRange>) -> Result<OpenedForGet> {
        let k = key.as_str();
        let path = self.path(key);
        // Symlinks are not objects: never follow one out of the store.
        self.check_parents(key, false)?;
        if !fs::symlink_metadata(&path).map_err(io_err(k))?.is_file() {
            return Err(StoreError::NotFound(k.to_owned()));
        }
        let mut file = fs::File::open(&path).map_err(io_err(k))?;
        let fs_meta = file.metadata().map_err(io_err(k))?;
        let meta = self.object_meta(key, &fs_meta, false);
        let (start, end) = resolve_range(key, range, meta.size)?;
        if start > 0 {
            io::Seek::seek(&mut file, io::SeekFrom::Start(start)).map_err(io_err(k))?;
        }
        let len = end - start;
        let small = if len <= SMALL_BODY as u64 {
            let mut data = vec![0; len as usize];
            io::Read::read_exact(&mut file, &mut data).map_err(io_err(k))?;
            Some(bytes::Bytes::from(data))
        } else {
            None
        };
        Ok((file, small, meta, (start, end)))
    }

    /// [`Store::put_file`] in one blocking call: the file linked into `.quarry/tmp/` (given up
    /// by the caller, same file system) or copied there, hashed as it is read, synced unless
    /// derived, then committed as any put is.
    fn put_file_blocking(
        &self,
        key: &Key,
        src: &Path,
        handover: FileHandover,
        options: PutOptions,
    ) -> Result<PutResult> {
        let k = key.as_str();
        let body_err = |source| StoreError::Body { key: k.to_owned(), source };
        let mut guard = TempFile::new(self.temp_path());
        let linked = handover == FileHandover::Give && fs::hard_link(src, &guard.path).is_ok();
        let (size, sha256) = if linked {
            readable_by_all(&guard.path).map_err(io_err(k))?;
            let mut file = fs::OpenOptions::new().read(true).write(true).open(&guard.path).map_err(io_err(k))?;
            // A file given up with its digest was hashed by its writer as it wrote it: not read
            // again (the digest is the giver's word, as `FileHandover::Give` says).
            let hashed = match &options.sha256 {
                Some(declared) => {
                    let size = file.metadata().map_err(io_err(k))?.len();
                    if options.max_size.is_some_and(|limit| size > limit) {
                        return Err(StoreError::TooLarge {
                            key: k.to_owned(),
                            limit: options.max_size.unwrap_or_default(),
                        });
                    }
                    (size, declared.to_ascii_lowercase())
                }
                None => hash_reader(&mut file, None, k, options.max_size)?,
            };
            if !options.derived {
                file.sync_data().map_err(io_err(k))?;
            }
            hashed
        } else {
            let mut from = fs::File::open(src).map_err(body_err)?;
            let mut to = fs::File::create(&guard.path).map_err(io_err(k))?;
            let hashed = hash_reader(&mut from, Some(&mut to), k, options.max_size)?;
            if !options.derived {
                to.sync_data().map_err(io_err(k))?;
            }
            hashed
        };
        let sha256 = crate::hashing::check_digest(k, options.sha256.as_deref(), sha256)?;
        let record = (!options.derived).then(|| (sha256.clone(), options.content_type.clone()));
        let etag = self.commit(key, &guard.path, &options.condition, record)?;
        guard.disarm();
        Ok(PutResult { etag, size, sha256 })
    }

    /// Hash `body` and check its size limit and declared digest. A body already in memory (one
    /// chunk: bytes the caller holds) or a small one is returned in memory, written later in the
    /// same blocking call as the commit, without a copy of the former; a larger one is streamed
    /// into `tmp`. Returns the body kept in memory, if any, the size and the sha256.
    async fn write_temp(
        &self,
        key: &Key,
        tmp: &Path,
        body: ByteStream,
        options: &PutOptions,
    ) -> Result<(Option<bytes::Bytes>, u64, String)> {
        let k = key.as_str();
        let mut body = HashingBody::new(body, k, options.max_size);
        let first = body.next().await?;
        let second = match first {
            Some(_) => body.next().await?,
            None => None,
        };
        let small = match (first, second) {
            (first, None) => Some(first.unwrap_or_default()),
            (first, Some(second)) => {
                let mut buffered = Vec::with_capacity(SMALL_BODY);
                for chunk in first.iter().chain([&second]) {
                    buffered.extend_from_slice(chunk);
                }
                if body.fill(&mut buffered, SMALL_BODY).await? {
                    Some(bytes::Bytes::from(buffered))
                } else {
                    let mut file = tokio::fs::File::create(tmp).await.map_err(io_err(k))?;
                    file.write_all(&buffered).await.map_err(io_err(k))?;
                    while let Some(chunk) = body.next().await? {
                        file.write_all(&chunk).await.map_err(io_err(k))?;
                    }
                    file.flush().await.map_err(io_err(k))?;
                    if !options.derived {
                        file.sync_data().await.map_err(io_err(k))?;
                    }
                    None
                }
            }
        };
        let (size, sha256) = body.finish(options.sha256.as_deref())?;
        Ok((small, size, sha256))
    }
}

#[async_trait::async_trait]
impl Store for LocalStore {
    fn describe(&self) -> String {
        format!("local:{}", self.root.display())
    }

    async fn head(&self, key: &Key) -> Result<ObjectMeta> {
        let (this, key) = (self.clone(), key.clone());
        blocking(move || {
            let meta = this.stat_file(&key)?;
            Ok(this.object_meta(&key, &meta, true))
        })
        .await
    }

    /// One `lstat`, compared with the fingerprint the ETag is made of, nothing allocated but
    /// the path (a symlink or a directory is not an object: changed).
    fn unchanged(&self, key: &Key, etag: &str) -> Option<bool> {
        let meta = fs::symlink_metadata(self.path(key));
        Some(meta.is_ok_and(|m| m.is_file() && fingerprint_is(&m, etag)))
    }

    async fn get(&self, key: &Key, range: Option<ByteRange>) -> Result<GetObject> {
        // A small file (a generated page, a sidecar, a state document) is read on the calling
        // thread: a handful of syscalls on cached metadata cost less than the hop to the
        // blocking pool and back, which dominated serving prebuilt pages.
        let opened = if let Some(fs_meta) = self.small_file(key) {
            // Unchanged since it was cached (same inode, mtime and size): no open, no read.
            if let Some((meta, body)) = self.cache.get(key.as_str(), &fingerprint(&fs_meta)) {
                let (start, end) = resolve_range(key, range, meta.size)?;
                let body = crate::bytes_stream(body.slice(start as usize..end as usize));
                return Ok(GetObject { meta, range: (start, end), body });
            }
            let opened = self.open_for_get(key, range)?;
            // Pages and repository metadata are read again and again; package files (read
            // once by an indexer, and the server's clients cache them for a year) are not kept.
            if let (None, Some(body)) = (range, &opened.1)
                && !crate::presentation::immutable(key.as_str())
            {
                self.cache.insert(&opened.2, body);
            }
            opened
        } else {
            let (this, owned) = (self.clone(), key.clone());
            blocking(move || this.open_for_get(&owned, range)).await?
        };
        let (file, small, meta, (start, end)) = opened;
        if let Some(data) = small {
            return Ok(GetObject { meta, range: (start, end), body: crate::bytes_stream(data) });
        }
        let body = file_chunks(file, end - start);
        Ok(GetObject { meta, range: (start, end), body })
    }

    async fn put(&self, key: &Key, body: ByteStream, options: PutOptions) -> Result<PutResult> {
        // Dropped with this future (a client gone mid-body) or on any error: the file goes too.
        let mut guard = TempFile::new(self.temp_path());
        let (small, size, sha256) = self.write_temp(key, &guard.path, body, &options).await?;
        let (this, key, tmp, sha) = (self.clone(), key.clone(), guard.path.clone(), sha256.clone());
        let durable = !options.derived;
        let record = durable.then_some((sha, options.content_type));
        let condition = options.condition;
        // The blocking commit runs to its end even if this future is dropped meanwhile; it owns
        // a guard of its own so a failed commit still removes the file.
        guard.disarm();
        let etag = blocking(move || {
            let mut guard = TempFile::new(tmp);
            if let Some(data) = small {
                let mut file = fs::File::create(&guard.path).map_err(io_err(key.as_str()))?;
                io::Write::write_all(&mut file, &data).map_err(io_err(key.as_str()))?;
                if durable {
                    file.sync_data().map_err(io_err(key.as_str()))?;
                }
            }
            let etag = this.commit(&key, &guard.path, &condition, record)?;
            guard.disarm();
            Ok(etag)
        })
        .await?;
        Ok(PutResult { etag, size, sha256 })
    }

    async fn put_file(&self, key: &Key, path: &Path, handover: FileHandover, options: PutOptions) -> Result<PutResult> {
        let (this, key, path) = (self.clone(), key.clone(), path.to_path_buf());
        blocking(move || this.put_file_blocking(&key, &path, handover, options)).await
    }

    async fn open_file(&self, key: &Key) -> Result<Option<fs::File>> {
        let (this, key) = (self.clone(), key.clone());
        blocking(move || {
            this.check_parents(&key, false)?;
            let path = this.path(&key);
            // Symlinks are not objects: never follow one out of the store.
            if !fs::symlink_metadata(&path).map_err(io_err(key.as_str()))?.is_file() {
                return Err(StoreError::NotFound(key.to_string()));
            }
            fs::File::open(&path).map(Some).map_err(io_err(key.as_str()))
        })
        .await
    }

    async fn put_many(&self, items: Vec<(Key, bytes::Bytes, PutOptions)>) -> Vec<Result<PutResult>> {
        let (this, count) = (self.clone(), items.len());
        match tokio::task::spawn_blocking(move || this.put_many_blocking(items)).await {
            Ok(results) => results,
            Err(e) => (0..count).map(|_| Err(StoreError::Backend(format!("blocking task failed: {e}")))).collect(),
        }
    }

    async fn get_whole(&self, key: &Key, limit: u64) -> Result<(ObjectMeta, bytes::Bytes)> {
        // A small file comes whole from `get` (and its cache); a larger one is read straight
        // into a buffer of its size, not through a stream of chunks copied together.
        if self.small_file(key).is_some() {
            return crate::get_whole_by_get(self, key, limit).await;
        }
        let (this, key) = (self.clone(), key.clone());
        blocking(move || {
            let (file, small, meta, (start, end)) = this.open_for_get(&key, None)?;
            if meta.size > limit {
                return Err(StoreError::TooLarge { key: key.to_string(), limit });
            }
            if let Some(data) = small {
                return Ok((meta, data));
            }
            let mut data = Vec::with_capacity(usize::try_from(end - start).unwrap_or(0));
            io::Read::read_to_end(&mut io::Read::take(file, limit + 1), &mut data).map_err(io_err(key.as_str()))?;
            if data.len() as u64 > limit {
                return Err(StoreError::TooLarge { key: key.to_string(), limit });
            }
            Ok((meta, bytes::Bytes::from(data)))
        })
        .await
    }

    async fn head_and_read(&self, key: &Key, keep_up_to: u64) -> Result<(ObjectMeta, Option<bytes::Bytes>)> {
        let (this, key) = (self.clone(), key.clone());
        blocking(move || this.head_and_read_blocking(&key, keep_up_to, &mut HashSet::new(), None)).await
    }

    async fn head_and_read_many(
        &self,
        keys: Vec<Key>,
        keep_up_to: u64,
    ) -> Vec<Result<(ObjectMeta, Option<bytes::Bytes>)>> {
        let (this, count) = (self.clone(), keys.len());
        let task = tokio::task::spawn_blocking(move || {
            let (mut checked, mut sidecar_dirs) = (HashSet::new(), HashMap::new());
            keys.iter()
                .map(|key| this.head_and_read_blocking(key, keep_up_to, &mut checked, Some(&mut sidecar_dirs)))
                .collect()
        });
        match task.await {
            Ok(results) => results,
            Err(e) => (0..count).map(|_| Err(StoreError::Backend(format!("blocking task failed: {e}")))).collect(),
        }
    }

    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage> {
        validate_prefix(prefix)?;
        let (this, prefix) = (self.clone(), prefix.to_owned());
        blocking(move || this.list_blocking(&prefix, &options)).await
    }

    async fn delete(&self, key: &Key) -> Result<()> {
        let (this, key) = (self.clone(), key.clone());
        blocking(move || {
            let k = key.as_str();
            let _guard = this.lock().map_err(io_err(k))?;
            // Nothing is stored through a planted symlink or under a file: nothing to delete.
            match this.check_parents(&key, false) {
                Err(StoreError::NotFound(_)) => return Ok(()),
                other => other?,
            }
            for path in [this.path(&key), this.sidecar_path(&key)] {
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io_err(k)(e)),
                }
            }
            // Drop directories the delete left empty, up to the root.
            let mut dir = this.path(&key).parent().map(Path::to_path_buf);
            while let Some(d) = dir {
                if d == this.root || fs::remove_dir(&d).is_err() {
                    break;
                }
                dir = d.parent().map(Path::to_path_buf);
            }
            Ok(())
        })
        .await
    }
}

/// A directory entry found while listing: its key and whether it is a "directory" prefix.
struct Found {
    key: String,
    is_prefix: bool,
    /// The listed directory's own entry for a file in it: its metadata is read relative to the
    /// directory's open handle, not by walking the whole path again (a file met in a
    /// subdirectory keeps no entry, so a deep listing holds one directory handle, not one per
    /// directory).
    entry: Option<fs::DirEntry>,
}

impl LocalStore {
    fn list_blocking(&self, prefix: &str, options: &ListOptions) -> Result<ListPage> {
        let (base, name_prefix) = match prefix.rfind('/') {
            Some(i) => (&prefix[..=i], &prefix[i + 1..]),
            None => ("", prefix),
        };
        let dir = self.root.join(base);
        let base_segments: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
        if self.first_non_dir(&base_segments).map_err(io_err(prefix))?.is_some() {
            // Below a file or a planted symlink: no objects.
            return Ok(ListPage::default());
        }
        let mut found = Vec::new();
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if matches!(e.kind(), io::ErrorKind::NotFound | io::ErrorKind::NotADirectory) => {
                return Ok(ListPage::default());
            }
            Err(e) => return Err(io_err(prefix)(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_err(prefix))?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if !name.starts_with(name_prefix) || (base.is_empty() && name == INTERNAL_DIR) {
                continue;
            }
            let file_type = entry.file_type().map_err(io_err(prefix))?;
            let key = format!("{base}{name}");
            if file_type.is_file() {
                found.push(Found { key, is_prefix: false, entry: Some(entry) });
            } else if file_type.is_dir() {
                if options.delimited {
                    found.push(Found { key: format!("{key}/"), is_prefix: true, entry: None });
                } else {
                    walk(&entry.path(), &key, &mut found).map_err(io_err(prefix))?;
                }
            }
        }
        found.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        if let Some(after) = &options.continuation {
            found.retain(|f| f.key.as_str() > after.as_str());
        }
        let limit = options.max_keys.unwrap_or(crate::DEFAULT_PAGE).clamp(1, crate::MAX_LOCAL_PAGE);
        let more = found.len() > limit;
        found.truncate(limit);
        let next = if more { found.last().map(|f| f.key.clone()) } else { None };
        let mut page = ListPage { next, ..ListPage::default() };
        for f in found {
            if f.is_prefix {
                page.common_prefixes.push(f.key);
                continue;
            }
            let Ok(key) = Key::new(f.key) else { continue };
            // `DirEntry::metadata` does not follow a symlink either.
            let meta = match f.entry {
                Some(entry) => entry.metadata(),
                None => fs::symlink_metadata(self.path(&key)),
            };
            match meta {
                Ok(meta) if meta.is_file() => page.objects.push(self.object_meta(&key, &meta, false)),
                // Deleted since the directory was read: not part of this listing.
                _ => {}
            }
        }
        Ok(page)
    }
}

/// Windows: a key segment Windows cannot hold as a file name (`CON` would open the console,
/// `x.` would land as `x`): never stored there, read as not found.
#[cfg(windows)]
fn not_portable(key: &str) -> Option<String> {
    key.split('/')
        .find_map(|segment| crate::portable::windows_name_problem(segment).map(|p| format!("{segment:?} {p}")))
}

#[cfg(not(windows))]
fn not_portable(_key: &str) -> Option<String> {
    None
}

/// Refuses a key the system cannot hold as a file name ([`not_portable`]): a collision for a
/// write, not found for a read.
fn check_portable(key: &Key, write: bool) -> Result<()> {
    let k = key.as_str();
    match not_portable(k) {
        None => Ok(()),
        Some(reason) if write => Err(StoreError::Collision { key: k.to_owned(), reason }),
        Some(_) => Err(StoreError::NotFound(k.to_owned())),
    }
}

/// Renames `from` over `to`, replacing it atomically.
#[cfg(unix)]
fn replace(from: &Path, to: &Path) -> io::Result<()> {
    fs::rename(from, to)
}

/// Windows: `fs::rename` replaces an existing file (POSIX semantics where the filesystem has
/// them, `MoveFileExW(MOVEFILE_REPLACE_EXISTING)` otherwise). Without POSIX semantics the
/// replace fails with "access denied" while another process holds the old file open without
/// delete sharing (a reader outside Quarry, a virus scanner); Quarry's own readers share
/// delete, so a few short retries cover the rest before the error is reported.
#[cfg(not(unix))]
fn replace(from: &Path, to: &Path) -> io::Result<()> {
    let mut delay = std::time::Duration::from_millis(5);
    for _ in 0..6 {
        match fs::rename(from, to) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => std::thread::sleep(delay),
            other => return other,
        }
        delay *= 2;
    }
    fs::rename(from, to)
}

/// Makes a rename in `dir` durable.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Windows: directory entries are made durable with the file (NTFS journals metadata); a
/// directory cannot be opened for syncing without backup semantics.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// Create `path`'s parent directories unless they exist (one `stat` in the common case).
fn ensure_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(parent) if !parent.is_dir() => fs::create_dir_all(parent),
        _ => Ok(()),
    }
}

fn walk(dir: &Path, key_prefix: &str, found: &mut Vec<Found>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let key = format!("{key_prefix}/{name}");
        let file_type = entry.file_type()?;
        if file_type.is_file() {
            found.push(Found { key, is_prefix: false, entry: None });
        } else if file_type.is_dir() {
            walk(&entry.path(), &key, found)?;
        }
    }
    Ok(())
}

/// Bytes of chunks larger than [`MIN_CHUNK`] held at once by the file streams of every local
/// store in the process, wherever the chunks are (a server's socket queue holds each until it is
/// sent: a thousand slow clients must not hold a large chunk each).
const CHUNK_BUDGET: usize = 64 << 20;
/// A file stream's first chunk, and every chunk once its reader falls behind or the budget is
/// spent.
const MIN_CHUNK: usize = 16 * 1024;
/// The largest chunk, reached by doubling while the reader keeps up.
const MAX_CHUNK: usize = 256 * 1024;
/// A reader that comes back for the next chunk later than this fell behind.
const SLOW_TAKE: std::time::Duration = std::time::Duration::from_millis(20);
/// Bytes of [`CHUNK_BUDGET`] in use.
static CHUNKS_HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A share of [`CHUNK_BUDGET`], given back when dropped (with the chunk that holds it).
struct Charge(usize);

impl Charge {
    fn take(size: usize) -> Option<Self> {
        CHUNKS_HELD
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held.saturating_add(size) <= CHUNK_BUDGET).then_some(held + size)
            })
            .ok()
            .map(|_| Self(size))
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        CHUNKS_HELD.fetch_sub(self.0, Ordering::AcqRel);
    }
}

/// A chunk's bytes with their share of the budget.
struct Charged {
    data: Vec<u8>,
    _charge: Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

/// `len` bytes of `file` from its position, as a stream of chunks read on the blocking pool into
/// buffers of their own (nothing else is held between chunks). Chunks start at [`MIN_CHUNK`] and
/// double up to [`MAX_CHUNK`] while the reader takes each within [`SLOW_TAKE`]; one that does
/// not goes back to the smallest. A chunk larger than the smallest needs a share of
/// [`CHUNK_BUDGET`].
fn file_chunks(file: fs::File, len: u64) -> ByteStream {
    struct Reading {
        file: Option<fs::File>,
        left: u64,
        size: usize,
        handed: Option<std::time::Instant>,
    }
    let start = Reading { file: Some(file), left: len, size: MIN_CHUNK, handed: None };
    Box::pin(futures_util::stream::unfold(start, |mut reading| async move {
        if reading.left == 0 {
            return None;
        }
        if let Some(handed) = reading.handed {
            reading.size = match handed.elapsed() < SLOW_TAKE {
                true => (reading.size * 2).min(MAX_CHUNK),
                false => MIN_CHUNK,
            };
        }
        let want = usize::try_from(reading.left).unwrap_or(usize::MAX).min(reading.size);
        let charge = (want > MIN_CHUNK).then(|| Charge::take(want)).flatten();
        let want = if charge.is_some() { want } else { want.min(MIN_CHUNK) };
        let file = reading.file.take()?;
        let read = tokio::task::spawn_blocking(move || {
            let mut data = Vec::with_capacity(want);
            let read = io::Read::read_to_end(&mut io::Read::take(&file, want as u64), &mut data);
            (file, data, read)
        })
        .await;
        let (file, data, read) = match read {
            Ok(read) => read,
            Err(e) => return Some((Err(io::Error::other(format!("blocking task failed: {e}"))), reading)),
        };
        reading.file = Some(file);
        match read {
            // The file is shorter than it was: the stream ends early.
            Ok(0) => None,
            Ok(n) => {
                reading.left = reading.left.saturating_sub(n as u64);
                reading.handed = Some(std::time::Instant::now());
                let chunk = match charge {
                    Some(charge) => bytes::Bytes::from_owner(Charged { data, _charge: charge }),
                    None => bytes::Bytes::from(data),
                };
                Some((Ok(chunk), reading))
            }
            Err(e) => {
                reading.left = 0;
                Some((Err(e), reading))
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreExt as _;
    use futures_util::StreamExt as _;

    fn key(k: &str) -> Key {
        Key::new(k).unwrap()
    }

    async fn put(store: &LocalStore, k: &str, body: &[u8]) -> Result<PutResult> {
        store.put(&key(k), crate::bytes_stream(bytes::Bytes::copy_from_slice(body)), PutOptions::default()).await
    }

    async fn read(store: &LocalStore, k: &str, range: Option<ByteRange>) -> (String, Vec<u8>) {
        let got = store.get(&key(k), range).await.unwrap();
        (got.meta.etag, crate::collect(got.body, 1 << 20).await.unwrap().to_vec())
    }

    #[tokio::test]
    async fn small_reads_see_every_other_writer_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(dir.path()).unwrap();
        // Another process's store on the same directory (its own cache).
        let other = LocalStore::open(dir.path()).unwrap();
        let page = "r/simple/a/index.html";
        put(&store, page, b"first page").await.unwrap();
        let (etag, body) = read(&store, page, None).await;
        assert_eq!(body, b"first page");
        assert_eq!(read(&store, page, None).await, (etag.clone(), body), "a cached read answers the same");
        assert_eq!(read(&store, page, Some(ByteRange::Closed(0, 4))).await.1, b"first");
        assert!(matches!(
            store.get(&key(page), Some(ByteRange::From(99))).await,
            Err(StoreError::RangeNotSatisfiable { size: 10, .. })
        ));

        put(&other, page, b"second page").await.unwrap();
        let (etag2, body) = read(&store, page, None).await;
        assert_eq!(body, b"second page");
        assert_ne!(etag2, etag);

        // A foreign writer rewriting the file in place, the size changed or not.
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(dir.path().join(page), b"third, longer page").unwrap();
        assert_eq!(read(&store, page, None).await.1, b"third, longer page");
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(dir.path().join(page), b"fourth longer page").unwrap();
        assert_eq!(read(&store, page, None).await.1, b"fourth longer page");

        // Removed by the other store: gone at once.
        other.delete(&key(page)).await.unwrap();
        assert!(store.get(&key(page), None).await.unwrap_err().is_not_found());

        // Package files are read the same way but not kept.
        put(&store, "r/a-1.0-py3-none-any.whl", b"wheel").await.unwrap();
        let held = store.cache.held();
        assert_eq!(read(&store, "r/a-1.0-py3-none-any.whl", None).await.1, b"wheel");
        assert_eq!(store.cache.held(), held);

        // Larger files are streamed from the blocking pool as before, and not kept.
        let big = vec![7u8; INLINE_READ as usize + 1];
        put(&store, "r/big.bin", &big).await.unwrap();
        assert_eq!(read(&store, "r/big.bin", None).await.1, big);
        assert!(store.cache.held().1 <= INLINE_READ as usize);
    }

    /// A store on `dir` whose batched puts write unnamed files (where the system has them) or,
    /// `unnamed` false, named temporary files as on other systems.
    fn open_with(dir: &Path, unnamed: bool) -> LocalStore {
        LocalStore { unnamed, ..LocalStore::open(dir).unwrap() }
    }

    #[tokio::test]
    async fn batched_puts_commit_each_item_as_a_single_put_would() {
        for unnamed in [true, false] {
            batched_puts_commit_each_item_as_a_single_put_would_with(unnamed).await;
        }
    }

    async fn batched_puts_commit_each_item_as_a_single_put_would_with(unnamed: bool) {
        let dir = tempfile::tempdir().unwrap();
        let store = open_with(dir.path(), unnamed);
        put(&store, "r/taken", b"old").await.unwrap();
        put(&store, "r/file", b"x").await.unwrap();
        let bytes = |b: &'static [u8]| bytes::Bytes::from_static(b);
        let items = vec![
            (key("r/a.html"), bytes(b"page"), PutOptions::derived().with_content_type("text/html")),
            (key("r/b.whl"), bytes(b"wheel"), PutOptions::default()),
            (key("r/taken"), bytes(b"new"), PutOptions { condition: Condition::IfNoneMatch, ..PutOptions::default() }),
            (key("r/big"), bytes(b"too long"), PutOptions { max_size: Some(3), ..PutOptions::default() }),
            (key("r/file/under"), bytes(b"y"), PutOptions::derived()),
        ];
        let results = store.put_many(items).await;
        assert_eq!(results.len(), 5);
        let page = results[0].as_ref().unwrap();
        assert_eq!((page.size, page.sha256.as_str()), (4, crate::sha256_hex(b"page").as_str()));
        assert_eq!(store.head(&key("r/a.html")).await.unwrap().etag, page.etag);
        // Durable items get their sidecar, derived ones none, as with single puts.
        assert_eq!(store.head(&key("r/b.whl")).await.unwrap().sha256, Some(crate::sha256_hex(b"wheel")));
        assert_eq!(store.head(&key("r/a.html")).await.unwrap().sha256, None);
        assert!(matches!(results[2], Err(StoreError::Conflict { .. })), "{:?}", results[2]);
        assert!(matches!(results[3], Err(StoreError::TooLarge { .. })), "{:?}", results[3]);
        assert!(matches!(results[4], Err(StoreError::Collision { .. })), "{:?}", results[4]);
        assert_eq!(store.get_bytes(&key("r/taken"), 10).await.unwrap().1, "old");
        assert_eq!(
            fs::read_dir(dir.path().join(INTERNAL_DIR).join("tmp")).unwrap().count(),
            0,
            "no temporary file left"
        );
    }

    #[tokio::test]
    async fn batched_durable_puts_are_synced_together_and_each_recorded() {
        for unnamed in [true, false] {
            batched_durable_puts_are_synced_together_and_each_recorded_with(unnamed).await;
        }
    }

    async fn batched_durable_puts_are_synced_together_and_each_recorded_with(unnamed: bool) {
        let dir = tempfile::tempdir().unwrap();
        let store = open_with(dir.path(), unnamed);
        let old = put(&store, "s/p/moved.json", b"old").await.unwrap();
        put(&store, "s/p/moved.json", b"newer").await.unwrap();
        let kept = put(&store, "s/p/kept.json", b"old").await.unwrap();
        let json = PutOptions::default().with_content_type("application/json");
        let mut items: Vec<_> = (0..40)
            .map(|i| (key(&format!("s/p/{i}.json")), bytes::Bytes::from(format!("{{\"n\":{i}}}")), json.clone()))
            .collect();
        let if_match = |etag: &str| PutOptions { condition: Condition::IfMatch(etag.to_owned()), ..json.clone() };
        items.push((key("s/p/moved.json"), bytes::Bytes::from_static(b"lost"), if_match(&old.etag)));
        items.push((key("s/p/kept.json"), bytes::Bytes::from_static(b"won"), if_match(&kept.etag)));
        items.push((key("s/q/other.json"), bytes::Bytes::from_static(b"{}"), json.clone()));
        let results = store.put_many(items).await;
        for (i, result) in results.iter().enumerate().take(40) {
            let meta = store.head(&key(&format!("s/p/{i}.json"))).await.unwrap();
            let put = result.as_ref().unwrap();
            assert_eq!((meta.etag.as_str(), meta.sha256.as_deref()), (put.etag.as_str(), Some(put.sha256.as_str())));
            assert_eq!(meta.content_type.as_deref(), Some("application/json"));
        }
        assert!(matches!(results[40], Err(StoreError::Conflict { .. })), "{:?}", results[40]);
        assert_eq!(store.get_bytes(&key("s/p/moved.json"), 10).await.unwrap().1, "newer");
        assert_eq!(store.head(&key("s/p/kept.json")).await.unwrap().etag, results[41].as_ref().unwrap().etag);
        assert_eq!(store.head(&key("s/q/other.json")).await.unwrap().sha256, Some(crate::sha256_hex(b"{}")));
        assert_eq!(fs::read_dir(dir.path().join(INTERNAL_DIR).join("tmp")).unwrap().count(), 0);
    }

    /// Every file below `dir`, relative, sorted (the store's own included).
    fn files_below(dir: &Path) -> Vec<String> {
        let mut found = Vec::new();
        let mut todo = vec![dir.to_path_buf()];
        while let Some(d) = todo.pop() {
            for entry in fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    todo.push(path);
                } else {
                    found.push(path.strip_prefix(dir).unwrap().to_string_lossy().replace('\\', "/"));
                }
            }
        }
        found.sort();
        found
    }

    #[tokio::test]
    async fn unnamed_batch_files_appear_whole_replace_atomically_and_leave_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_with(dir.path(), true);
        #[cfg(target_os = "linux")]
        assert!(unnamed::create(dir.path()).is_some(), "this filesystem has O_TMPFILE: the unnamed path is tested");
        let old = put(&store, "r/python/old.html", b"old page").await.unwrap();
        put(&store, "r/python/kept", b"kept").await.unwrap();
        put(&store, "r/file", b"x").await.unwrap();
        let body = |b: &'static [u8]| bytes::Bytes::from_static(b);
        let derived = PutOptions::derived;
        let items = vec![
            // Into an existing directory, into a new one, over an existing object.
            (key("r/python/a.whl.metadata"), body(b"metadata"), derived()),
            (key("r/python/simple/a/index.html"), body(b"page a"), derived()),
            (key("r/python/old.html"), body(b"new page"), derived()),
            // Conditions and collisions refuse, leaving the object as it was.
            (key("r/python/kept"), body(b"lost"), PutOptions { condition: Condition::IfNoneMatch, ..derived() }),
            (
                key("r/python/kept"),
                body(b"lost"),
                PutOptions { condition: Condition::IfMatch("stale".into()), ..derived() },
            ),
            (key("r/file/under"), body(b"y"), derived()),
            // A durable object: synced, recorded.
            (key("r/python/b.whl"), body(b"wheel"), PutOptions::default()),
        ];
        let results = store.put_many(items).await;
        let new = results[2].as_ref().unwrap();
        assert_ne!(new.etag, old.etag, "a replacement is a new object");
        assert_eq!(store.head(&key("r/python/old.html")).await.unwrap().etag, new.etag);
        for (k, want) in [
            ("r/python/a.whl.metadata", "metadata"),
            ("r/python/simple/a/index.html", "page a"),
            ("r/python/old.html", "new page"),
            ("r/python/kept", "kept"),
            ("r/python/b.whl", "wheel"),
        ] {
            assert_eq!(store.get_bytes(&key(k), 100).await.unwrap().1, want.as_bytes(), "{k}");
        }
        for (i, k) in ["r/python/a.whl.metadata", "r/python/simple/a/index.html"].into_iter().enumerate() {
            let etag = &results[i].as_ref().unwrap().etag;
            assert_eq!(&store.head(&key(k)).await.unwrap().etag, etag, "the ETag answered is the object's");
        }
        assert!(matches!(results[3], Err(StoreError::Conflict { .. })), "{:?}", results[3]);
        assert!(matches!(results[4], Err(StoreError::Conflict { .. })), "{:?}", results[4]);
        assert!(matches!(results[5], Err(StoreError::Collision { .. })), "{:?}", results[5]);
        assert_eq!(store.head(&key("r/python/b.whl")).await.unwrap().sha256, Some(crate::sha256_hex(b"wheel")));
        // Nothing but the objects, their sidecars and the lock: no temporary file anywhere.
        assert_eq!(
            files_below(dir.path()),
            [
                ".quarry/lock",
                ".quarry/meta/r/file.json",
                ".quarry/meta/r/python/b.whl.json",
                ".quarry/meta/r/python/kept.json",
                ".quarry/meta/r/python/old.html.json",
                "r/file",
                "r/python/a.whl.metadata",
                "r/python/b.whl",
                "r/python/kept",
                "r/python/old.html",
                "r/python/simple/a/index.html",
            ]
        );
    }

    /// A batch checks a directory once, but every key's own name still: `r/CON` after `r/a`.
    #[cfg(windows)]
    #[tokio::test]
    async fn batches_refuse_a_name_windows_cannot_hold_after_a_good_one_in_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(dir.path()).unwrap();
        let body = bytes::Bytes::from_static(b"x");
        let items =
            vec![(key("r/a"), body.clone(), PutOptions::derived()), (key("r/CON"), body, PutOptions::derived())];
        let results = store.put_many(items).await;
        assert!(results[0].is_ok(), "{:?}", results[0]);
        assert!(matches!(results[1], Err(StoreError::Collision { .. })), "{:?}", results[1]);
        let read = store.head_and_read_many(vec![key("r/a"), key("r/CON")], 1024).await;
        assert!(read[0].is_ok() && read[1].as_ref().unwrap_err().is_not_found());
    }

    #[tokio::test]
    async fn head_and_read_many_answers_each_key_as_head_and_read_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(dir.path()).unwrap();
        put(&store, "r/recorded", b"abc").await.unwrap();
        fs::write(dir.path().join("r/copied"), b"copied in").unwrap();
        put(&store, "file", b"x").await.unwrap();
        let keys = ["r/recorded", "r/missing", "r/copied", "file/under", "r/copied"];
        let many = store.head_and_read_many(keys.iter().map(|k| key(k)).collect(), 1024).await;
        assert_eq!(many.len(), keys.len());
        for (k, got) in keys.iter().zip(many) {
            match (store.head_and_read(&key(k), 1024).await, got) {
                (Ok((want_meta, want_body)), Ok((meta, body))) => {
                    assert_eq!((meta.etag, meta.sha256, body), (want_meta.etag, want_meta.sha256, want_body), "{k}");
                }
                (Err(want), Err(got)) => assert_eq!(got.is_not_found(), want.is_not_found(), "{k}: {got}"),
                (want, got) => panic!("{k}: {want:?} against {got:?}"),
            }
        }
    }

    #[tokio::test]
    async fn head_and_read_reads_small_files_without_a_recorded_digest() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(dir.path()).unwrap();
        put(&store, "r/recorded", b"abc").await.unwrap();
        fs::write(dir.path().join("r/copied"), b"copied in").unwrap();
        let (meta, body) = store.head_and_read(&key("r/recorded"), 1024).await.unwrap();
        assert_eq!((meta.sha256, body), (Some(crate::sha256_hex(b"abc")), None));
        let (meta, body) = store.head_and_read(&key("r/copied"), 1024).await.unwrap();
        assert_eq!((meta.sha256, meta.size, body.as_deref()), (None, 9, Some(&b"copied in"[..])));
        assert_eq!(meta.etag, store.head(&key("r/copied")).await.unwrap().etag);
        let (_, body) = store.head_and_read(&key("r/copied"), 8).await.unwrap();
        assert_eq!(body, None, "larger than asked: left to stream");
        assert!(store.head_and_read(&key("r/missing"), 8).await.unwrap_err().is_not_found());
    }

    #[tokio::test]
    async fn files_and_directories_never_collide() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(dir.path()).unwrap();
        put(&store, "r/python/a.whl", b"wheel").await.unwrap();
        let err = put(&store, "r/python/a.whl/b.whl", b"squat").await.unwrap_err();
        assert!(matches!(err, StoreError::Collision { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "r/python/a.whl/b.whl: r/python/a.whl is an object, so nothing can be stored under it"
        );
        let err = put(&store, "r/python", b"over a directory").await.unwrap_err();
        assert!(matches!(err, StoreError::Collision { .. }), "{err}");
        // Reads under a file are plain misses, not I/O errors.
        assert!(store.head(&key("r/python/a.whl/x")).await.unwrap_err().is_not_found());
        assert!(store.get(&key("r/python/a.whl/x"), None).await.unwrap_err().is_not_found());
        store.delete(&key("r/python/a.whl/x")).await.unwrap();
        assert_eq!(store.get_bytes(&key("r/python/a.whl"), 100).await.unwrap().1, b"wheel".as_slice());
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn planted_symlinks_are_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "outside").unwrap();
        let store = LocalStore::open(dir.path().join("store")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("store/linked")).unwrap();
        assert!(store.get(&key("linked/secret"), None).await.unwrap_err().is_not_found());
        assert!(store.head(&key("linked/secret")).await.unwrap_err().is_not_found());
        let err = put(&store, "linked/new", b"x").await.unwrap_err();
        assert!(err.to_string().contains("linked is a symlink, never followed"), "{err}");
        store.delete(&key("linked/secret")).await.unwrap();
        assert!(store.list_all("linked/", true).await.unwrap().objects.is_empty());
        assert!(store.list_all("", false).await.unwrap().objects.is_empty());
        let mut left: Vec<_> = std::fs::read_dir(outside.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        assert_eq!(left, ["secret"]);
        assert_eq!(std::fs::read_to_string(outside.path().join("secret")).unwrap(), "outside");
    }

    #[tokio::test]
    async fn interrupted_puts_leave_no_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::open(dir.path()).unwrap();
        let tmp = dir.path().join(".quarry/tmp");
        // A body larger than the in-memory threshold that stalls after its first chunk: the
        // temporary file exists, then the put future is dropped (a client that went away).
        let first = bytes::Bytes::from(vec![7u8; SMALL_BODY + 1]);
        let body: ByteStream = Box::pin(
            futures_util::stream::once(async move { Ok(first) })
                .chain(futures_util::stream::pending::<std::io::Result<bytes::Bytes>>()),
        );
        let big = key("r/python/big.whl");
        let put = store.put(&big, body, PutOptions::default());
        assert!(tokio::time::timeout(std::time::Duration::from_millis(300), put).await.is_err());
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0, "the dropped put removed its file");
        // A body that fails half-way.
        let broken: ByteStream = Box::pin(futures_util::stream::iter([
            Ok(bytes::Bytes::from(vec![1u8; SMALL_BODY + 1])),
            Err(std::io::Error::other("connection reset")),
        ]));
        assert!(store.put(&key("r/python/broken.whl"), broken, PutOptions::default()).await.is_err());
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
        // Files of a process that died (no such pid exists) are swept on open; a live
        // writer's are kept.
        std::fs::write(tmp.join("4294967294-dead-0"), "partial").unwrap();
        std::fs::write(tmp.join(format!("{}-live-0", std::process::id())), "in flight").unwrap();
        let reopened = LocalStore::open(dir.path()).unwrap();
        let left: Vec<String> =
            std::fs::read_dir(&tmp).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(left, [format!("{}-live-0", std::process::id())]);
        assert!(reopened.list_all("", false).await.unwrap().objects.is_empty());
    }
}
