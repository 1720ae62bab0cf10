//! Uploading straight into a store (S3 or a local directory), as CI jobs do: files by name,
//! directories walked with their relative paths, every file through
//! [`quarry_store::upload_file`] (hashed first, idempotent, immutable keys). A key that holds
//! other bytes is a failure, or with [`StoreOptions::skip_existing`] (twine's
//! `--skip-existing`, TheRock's upload steps skipping existing keys) a file left as stored and
//! reported in [`StoreSummary::skipped`]: the refusal is confirmed by reading the stored digest
//! and hashing the file again, so no other conflict is ever skipped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::StreamExt;
use quarry_layout::UploadKind;
use quarry_store::{Key, KeyError, Store, StoreError, Uploaded, hash_file, stored_sha256, upload_file};

use crate::destination::StoreDestination;
use crate::summary::{Kept, StoreSummary};
use quarry_store::error_chain;

use crate::Progress;

/// Why the files to upload cannot be listed.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// A path given does not exist (or cannot be read).
    #[error("{} does not exist", .path.display())]
    Missing {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A directory cannot be listed.
    #[error("reading {}", .path.display())]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A name in a directory is not UTF-8, so it cannot be part of a key.
    #[error("non-UTF-8 file name {0:?}")]
    NotUtf8(std::ffi::OsString),
    /// A file given by path has no UTF-8 name.
    #[error("a file name that is UTF-8")]
    FileName,
}

/// Why one file could not be uploaded.
#[derive(Debug, thiserror::Error)]
enum FileError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Every file to upload with its path relative to the destination: a file by its name, a
/// directory's regular files by their paths below it (in name order; other entries skipped).
pub fn collect(paths: &[PathBuf]) -> Result<Vec<(PathBuf, String)>, CollectError> {
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| CollectError::Missing { path: path.clone(), source })?;
        if meta.is_dir() {
            walk(path, "", &mut out)?;
        } else {
            let name = path.file_name().and_then(|n| n.to_str()).ok_or(CollectError::FileName)?;
            out.push((path.clone(), name.to_owned()));
        }
    }
    Ok(out)
}

fn walk(dir: &Path, rel: &str, out: &mut Vec<(PathBuf, String)>) -> Result<(), CollectError> {
    let read_dir = |source| CollectError::ReadDir { path: dir.to_owned(), source };
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(read_dir)?.collect::<Result<_, _>>().map_err(read_dir)?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name().into_string().map_err(CollectError::NotUtf8)?;
        let path = entry.path();
        let file_type = entry.file_type().map_err(read_dir)?;
        if file_type.is_dir() {
            walk(&path, &format!("{rel}{name}/"), out)?;
        } else if file_type.is_file() {
            out.push((path, format!("{rel}{name}")));
        }
    }
    Ok(())
}

/// How [`upload_to_store`] uploads and reports.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The store's key prefix and how its URL is formed.
    pub destination: StoreDestination,
    /// What is uploaded: decides the index URL reported.
    pub kind: UploadKind,
    /// Uploads in flight at once (at least one).
    pub jobs: usize,
    /// The public URL of an S3 key: `(bucket, key) -> url`, such as
    /// `quarry_layout::public_url` or `public_url_from_env`.
    pub public_url: fn(&str, &str) -> String,
    /// TheRock's Python upload step: how the packages are laid out, which decides the URL
    /// reported and the `kpack_split` output. `None`: no `kpack_split` output.
    pub python_layout: Option<PythonLayout>,
    /// A key that already holds other bytes is left as stored and listed in
    /// [`StoreSummary::skipped`] instead of failing.
    pub skip_existing: bool,
}

/// What uploading one file came to.
enum Outcome {
    Stored(Uploaded),
    Kept(Kept),
}

/// Upload `files` (from [`collect`]) into `store` below the destination's prefix. A file that
/// fails does not stop the others: it is listed in [`StoreSummary::failed`] as `key: reason`.
pub async fn upload_to_store(
    store: Arc<dyn Store>,
    files: Vec<(PathBuf, String)>,
    options: &StoreOptions,
    progress: &dyn Progress,
) -> StoreSummary {
    let results: Vec<(String, Result<Outcome, FileError>)> = futures_util::stream::iter(files)
        .map(|(path, rel)| {
            let store = store.clone();
            let key = options.destination.key(&rel);
            async move {
                let result = match upload_one(store.as_ref(), &key, &path, &rel, progress).await {
                    Err(FileError::Store(e @ StoreError::Conflict { .. })) if options.skip_existing => {
                        keep_existing(store.as_ref(), &key, &path, e).await
                    }
                    other => other.map(Outcome::Stored),
                };
                (key, result)
            }
        })
        .buffer_unordered(options.jobs.max(1))
        .collect()
        .await;
    let mut files = Vec::new();
    let mut failed = Vec::new();
    let mut skipped = Vec::new();
    for (key, result) in results {
        match result {
            Ok(Outcome::Stored(u)) => files.push(u),
            Ok(Outcome::Kept(k)) => skipped.push(k),
            Err(e) => failed.push(format!("{key}: {}", error_chain(&e))),
        }
    }
    files.sort_by(|a, b| a.key.cmp(&b.key));
    skipped.sort_by(|a: &Kept, b: &Kept| a.key.cmp(&b.key));
    let mut url = options.destination.index_url(options.kind, options.public_url);
    if options.python_layout == Some(PythonLayout::PerFamily) {
        // Later jobs append `/{family}/index.html`.
        url = url.trim_end_matches("index.html").trim_end_matches('/').to_owned();
    }
    let kpack_split = options.python_layout.map(PythonLayout::kpack_split);
    StoreSummary { kind: options.kind, url, files, failed, skipped, kpack_split }
}

/// `--skip-existing` after a conflict at `key`: when the key holds other bytes than `path`
/// (read back, not guessed from the error), the file is left as stored; anything else (the
/// key gone, the same bytes after a race, a store error) keeps the original refusal or is the
/// upload it was.
async fn keep_existing(store: &dyn Store, key: &str, path: &Path, refusal: StoreError) -> Result<Outcome, FileError> {
    let parsed = Key::new(key)?;
    let Ok(meta) = store.head(&parsed).await else { return Err(refusal.into()) };
    let stored = stored_sha256(store, &parsed, meta.sha256).await?;
    let (size, ours) = hash_file(path).await?;
    if stored.eq_ignore_ascii_case(&ours) {
        return Ok(Outcome::Stored(Uploaded { key: key.to_owned(), size, sha256: ours, status: "skipped" }));
    }
    Ok(Outcome::Kept(Kept {
        key: key.to_owned(),
        reason: format!("exists with other bytes (sha256 {stored} stored, {ours} here); left as stored"),
    }))
}

async fn upload_one(
    store: &dyn Store,
    key: &str,
    path: &Path,
    rel: &str,
    progress: &dyn Progress,
) -> Result<Uploaded, FileError> {
    let key = Key::new(key)?;
    let size = std::fs::metadata(path)?.len();
    let bar = progress.start(rel, size);
    let tick = bar.clone();
    let uploaded = upload_file(store, &key, path, move |n| tick.advance(n)).await;
    bar.finish();
    Ok(uploaded?)
}

/// How a Python upload is laid out, which decides the find-links URL and `kpack_split`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PythonLayout {
    /// One artifact group: `python/{group}/index.html`.
    SingleArch,
    /// Multi-arch, every wheel at the top (per-target device wheels): `python/index.html`,
    /// `kpack_split=true`.
    KpackSplit,
    /// Multi-arch with a directory per GPU family (legacy): the URL is `python` itself, later
    /// jobs append `/{family}/index.html`.
    PerFamily,
}

impl PythonLayout {
    /// The layout of files (paths relative to the uploaded directory): single-arch with an
    /// artifact group; else per-family when any file lies in a directory not starting with `.`
    /// (`.kpack_staging` is staging, not a family), else kpack-split.
    pub fn of(files: &[(PathBuf, String)], grouped: bool) -> Self {
        if grouped {
            return Self::SingleArch;
        }
        let families = files.iter().any(|(_, rel)| rel.split_once('/').is_some_and(|(dir, _)| !dir.starts_with('.')));
        if families { Self::PerFamily } else { Self::KpackSplit }
    }

    /// The `kpack_split` output: `true` or `false`.
    pub fn kpack_split(self) -> bool {
        self == Self::KpackSplit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn files_and_directories_are_collected_with_their_relative_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let dist = tmp.path().join("dist");
        std::fs::create_dir_all(dist.join("b/c")).unwrap();
        for file in ["z.whl", "b/c/x.bin", "b/a.txt"] {
            std::fs::write(dist.join(file), file).unwrap();
        }
        let single = tmp.path().join("one.deb");
        std::fs::write(&single, "deb").unwrap();
        let files = collect(&[dist.clone(), single.clone()]).unwrap();
        let rel: Vec<&str> = files.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(rel, ["b/a.txt", "b/c/x.bin", "z.whl", "one.deb"]);
        assert_eq!(files[1].0, dist.join("b/c/x.bin"));
        let missing = collect(&[tmp.path().join("nope")]).unwrap_err();
        assert_eq!(missing.to_string(), format!("{} does not exist", tmp.path().join("nope").display()));
    }

    #[tokio::test]
    async fn uploads_land_under_the_prefix_and_are_idempotent() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a-1.0-py3-none-any.whl"), "wheel").unwrap();
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        std::fs::write(tmp.path().join("sub/b.bin"), "b").unwrap();
        let store: Arc<dyn Store> = Arc::new(quarry_store::MemoryStore::default());
        let options = StoreOptions {
            destination: StoreDestination::parse("s3://bucket/7-linux/python"),
            kind: UploadKind::Python,
            jobs: 2,
            public_url: quarry_layout::public_url,
            python_layout: None,
            skip_existing: false,
        };
        let files = collect(&[tmp.path().to_owned()]).unwrap();
        let summary = upload_to_store(store.clone(), files.clone(), &options, &NoProgress).await;
        let keys: Vec<(&str, &str)> = summary.files.iter().map(|u| (u.key.as_str(), u.status)).collect();
        assert_eq!(
            keys,
            [("7-linux/python/a-1.0-py3-none-any.whl", "uploaded"), ("7-linux/python/sub/b.bin", "uploaded")]
        );
        assert_eq!(summary.url, "https://bucket.s3.amazonaws.com/7-linux/python/index.html");
        assert!(summary.failed.is_empty());
        let again = upload_to_store(store.clone(), files, &options, &NoProgress).await;
        assert!(again.files.iter().all(|u| u.status == "skipped"));

        std::fs::write(tmp.path().join("sub/b.bin"), "other bytes").unwrap();
        let bad = tmp.path().join("..");
        let files = vec![(tmp.path().join("sub/b.bin"), "sub/b.bin".to_owned()), (bad, "../x".to_owned())];
        let refused = upload_to_store(store.clone(), files, &options, &NoProgress).await;
        assert!(refused.files.is_empty());
        assert_eq!(refused.failed.len(), 2, "{:?}", refused.failed);
        assert!(refused.failed.iter().any(|f| f.starts_with("7-linux/python/sub/b.bin: ")), "{:?}", refused.failed);

        // --skip-existing: the other bytes are left as stored and reported; the hostile key still fails.
        let files =
            vec![(tmp.path().join("sub/b.bin"), "sub/b.bin".to_owned()), (tmp.path().join(".."), "../x".to_owned())];
        let skipping = StoreOptions { skip_existing: true, ..options };
        let kept = upload_to_store(store.clone(), files, &skipping, &NoProgress).await;
        assert!(kept.files.is_empty(), "{:?}", kept.files);
        assert_eq!(kept.skipped.len(), 1, "{:?}", kept.skipped);
        assert_eq!(kept.skipped[0].key, "7-linux/python/sub/b.bin");
        assert!(kept.skipped[0].reason.contains("other bytes"), "{}", kept.skipped[0].reason);
        assert_eq!(kept.failed.len(), 1, "{:?}", kept.failed);
        let stored = store.get(&Key::new("7-linux/python/sub/b.bin").unwrap(), None).await.unwrap();
        let (_, sha) = quarry_store::hash_stream("k", stored.body, None).await.unwrap();
        assert_eq!(sha, quarry_store::sha256_hex(b"b"), "the stored bytes are unchanged");
    }
}
