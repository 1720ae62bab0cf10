//! The artifacts `quarry package` reads: artifact directories as they are, or artifact
//! archives unpacked (checked member by member) into a scratch directory under the
//! destination.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use quarry_artifacts::{ArchiveFormat, ArtifactName, ExtractMode, Limits, extract};
use quarry_packaging::therock::ArtifactIndex;
use rayon::prelude::*;

use super::{BuildSettings, OnProgress, PackageError, Progress, chain, pool};
use crate::tree::read_artifacts;

/// How deep [`StagedArtifacts::kpack_requested`] looks for `therock_manifest.json`.
const MANIFEST_DEPTH: u32 = 6;

/// An artifacts directory ready to package: the directory to read (the given one, or the
/// scratch directory its archives were unpacked into) and its [`ArtifactIndex`]. The scratch
/// directory is removed when this is dropped.
#[derive(Debug)]
pub struct StagedArtifacts {
    _scratch: Option<tempfile::TempDir>,
    dir: PathBuf,
    index: ArtifactIndex,
}

impl StagedArtifacts {
    /// Checks that `artifacts_dir` exists, creates the destination, unpacks any artifact
    /// archives (`{name}_{component}_{target}.tar.zst|.tar.xz`) into a scratch directory under
    /// it beside links to the artifact directories `artifacts_dir` already holds (a directory
    /// wins over an archive of the same name, `.tar.zst` over `.tar.xz`), and reads the index.
    pub fn open(
        artifacts_dir: &Path,
        settings: &BuildSettings,
        progress: OnProgress<'_>,
    ) -> Result<Self, PackageError> {
        if !artifacts_dir.is_dir() {
            return Err(PackageError::NoArtifacts(artifacts_dir.to_path_buf()));
        }
        let dest = &settings.dest_dir;
        std::fs::create_dir_all(dest).map_err(|source| PackageError::CreateDest { path: dest.clone(), source })?;
        let sources = list(artifacts_dir)?;
        let scratch = if sources.archives.is_empty() {
            None
        } else {
            progress(Progress::Unpacking { archives: sources.archives.len() });
            Some(unpack(artifacts_dir, &sources, dest, settings.jobs)?)
        };
        let dir = scratch.as_ref().map_or_else(|| artifacts_dir.to_path_buf(), |t| t.path().to_path_buf());
        let index = read_artifacts(&dir)?;
        Ok(Self { _scratch: scratch, dir, index })
    }

    /// The directory holding the artifact directories.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artifact directories and their manifest lines.
    pub fn index(&self) -> &ArtifactIndex {
        &self.index
    }

    /// Whether an artifact's `therock_manifest.json` asks for kpack packages.
    pub fn kpack_requested(&self) -> bool {
        kpack_requested(&self.dir, MANIFEST_DEPTH)
    }
}

/// What an artifacts directory holds.
struct Sources {
    /// Artifact directories, by name.
    dirs: BTreeSet<String>,
    /// Archives without a directory of their name, by directory name (the preferred format
    /// of each).
    archives: BTreeMap<String, (ArchiveFormat, PathBuf)>,
}

/// The artifact directories and archives of `dir`.
fn list(dir: &Path) -> Result<Sources, PackageError> {
    let mut dirs = BTreeSet::new();
    let mut archives = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|source| PackageError::ReadDir { path: dir.to_path_buf(), source })?;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            dirs.insert(name);
        } else if let Some((artifact, format)) = ArtifactName::parse_archive(&name) {
            let slot = archives.entry(artifact.dir_name()).or_insert((format, entry.path()));
            if format < slot.0 {
                *slot = (format, entry.path());
            }
        }
    }
    archives.retain(|name, _| !dirs.contains(name));
    Ok(Sources { dirs, archives })
}

/// A directory symlink at `link` pointing at `target` (on Windows a directory symlink, which
/// needs Developer Mode or the symlink privilege; the error says so when it is missing).
#[cfg(unix)]
fn link_dir(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

/// Windows: a directory symlink where the privilege allows it; otherwise (no Developer Mode,
/// or Wine, whose `CreateSymbolicLinkW` is a stub) the tree is mirrored with hard links,
/// copying where a hard link fails, as TheRock's `fileset_tool.py` populates on Windows.
#[cfg(windows)]
fn link_dir(target: &Path, link: &Path) -> std::io::Result<()> {
    if std::os::windows::fs::symlink_dir(target, link).is_ok() && link.is_dir() {
        return Ok(());
    }
    let _ = std::fs::remove_dir(link);
    mirror_dir(target, link)
}

#[cfg(windows)]
fn mirror_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, dest) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            mirror_dir(&source, &dest)?;
        } else if std::fs::hard_link(&source, &dest).is_err() {
            std::fs::copy(&source, &dest)?;
        }
    }
    Ok(())
}

/// A scratch directory under `dest` with links to the artifact directories of `dir` and every
/// archive unpacked, `jobs` at a time; any refused archive fails the whole (naming each).
fn unpack(dir: &Path, sources: &Sources, dest: &Path, jobs: usize) -> Result<tempfile::TempDir, PackageError> {
    let staging = tempfile::Builder::new().prefix(".quarry-artifacts-").tempdir_in(dest)?;
    for name in &sources.dirs {
        link_dir(&std::path::absolute(dir.join(name))?, &staging.path().join(name))?;
    }
    let failures: Vec<String> = pool(jobs)?.install(|| {
        sources
            .archives
            .par_iter()
            .filter_map(|(name, (format, path))| {
                let refused = match std::fs::File::open(path) {
                    Err(e) => chain(&e),
                    Ok(file) => {
                        let reader = std::io::BufReader::new(file);
                        extract(reader, *format, &staging.path().join(name), ExtractMode::Tree, Limits::default())
                            .err()
                            .map(|e| chain(&e))?
                    }
                };
                Some(format!("{}: {refused}", path.display()))
            })
            .collect()
    });
    if !failures.is_empty() {
        return Err(PackageError::Refused(failures));
    }
    Ok(staging)
}

/// Whether any `therock_manifest.json` below `dir` (at most `depth` levels deep) sets
/// `flags.KPACK_SPLIT_ARTIFACTS` (`true` or `"true"`).
fn kpack_requested(dir: &Path, depth: u32) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == "therock_manifest.json" {
            let flag = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v.pointer("/flags/KPACK_SPLIT_ARTIFACTS").cloned());
            if matches!(flag, Some(serde_json::Value::Bool(true)))
                || flag.as_ref().and_then(|f| f.as_str()) == Some("true")
            {
                return true;
            }
        } else if depth > 0 && entry.file_type().is_ok_and(|t| t.is_dir()) && kpack_requested(&path, depth - 1) {
            return true;
        }
    }
    false
}

/// What `--clean-build` removes from the destination before a run of `kind` (`deb`, `rpm` or
/// `python`), as TheRock's `build_package.py` clears its build directory: the packages of that
/// kind directly in `dest` (`*.deb`; `*.rpm`; `*.whl` and `*.tar.gz`), their logs
/// (`logs/{kind}-*.log`) and scratch directories a killed run left (`.quarry-*`). Anything
/// else in `dest` stays. The paths removed, sorted.
pub fn clean_build(dest: &Path, kind: &str) -> Result<Vec<PathBuf>, PackageError> {
    let suffixes: &[&str] = match kind {
        "deb" => &[".deb"],
        "rpm" => &[".rpm"],
        _ => &[".whl", ".tar.gz"],
    };
    let mut removed = Vec::new();
    let read = |dir: &Path| match std::fs::read_dir(dir) {
        Ok(entries) => Ok(Some(entries)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(PackageError::ReadDir { path: dir.to_path_buf(), source }),
    };
    let Some(entries) = read(dest)? else { return Ok(removed) };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type()?.is_dir();
        if is_dir && name.starts_with(".quarry-") {
            std::fs::remove_dir_all(entry.path())?;
        } else if !is_dir && suffixes.iter().any(|s| name.ends_with(s)) {
            std::fs::remove_file(entry.path())?;
        } else {
            continue;
        }
        removed.push(entry.path());
    }
    if let Some(entries) = read(&dest.join(super::LOGS_DIR))? {
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&format!("{kind}-")) && name.ends_with(".log") && entry.file_type()?.is_file() {
                std::fs::remove_file(entry.path())?;
                removed.push(entry.path());
            }
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_build_removes_only_that_kinds_outputs() {
        let dest = tempfile::tempdir().unwrap();
        let d = dest.path();
        std::fs::create_dir_all(d.join("logs")).unwrap();
        std::fs::create_dir_all(d.join(".quarry-elf-x/sub")).unwrap();
        std::fs::create_dir_all(d.join("keep.deb.d")).unwrap();
        for f in ["a_1_amd64.deb", "b.rpm", "notes.txt", "logs/deb-a.log", "logs/rpm-b.log", "logs/deb-a.txt"] {
            std::fs::write(d.join(f), "x").unwrap();
        }
        let removed = clean_build(d, "deb").unwrap();
        let names: Vec<String> =
            removed.iter().map(|p| p.strip_prefix(d).unwrap().to_string_lossy().replace('\\', "/")).collect();
        assert_eq!(names, [".quarry-elf-x", "a_1_amd64.deb", "logs/deb-a.log"]);
        for kept in ["b.rpm", "notes.txt", "logs/rpm-b.log", "logs/deb-a.txt", "keep.deb.d"] {
            assert!(d.join(kept).exists(), "{kept}");
        }
        assert!(clean_build(&d.join("missing"), "rpm").unwrap().is_empty());
    }
}
