//! From an artifacts directory to package items: the directory read into an
//! [`ArtifactIndex`], and a package's content paths (manifest lines naming directories inside
//! artifact directories) walked into items under the install prefix, the way TheRock's
//! `copy_package_contents` merges each source directory's contents into the prefix.
//!
//! Nothing outside the artifacts directory is read: a manifest line with `..` or an absolute
//! path is refused, and so is a symlink whose target leaves the package (absolute, or more
//! `..` than it has parents).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use quarry_artifacts::archive::mode_of;
use quarry_artifacts::{MANIFEST, link_stays_inside};
use quarry_packaging::therock::{ArtifactIndex, ContentPath};

use crate::deb::Item;

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{dir}/{MANIFEST}: line {line:?} leaves the artifact (absolute or `..`)")]
    HostileManifest { dir: String, line: String },
    #[error("{dir}/{MANIFEST} names {line:?}, which is not in the artifact")]
    MissingRoot { dir: String, line: String },
    #[error("{path}: symlink to {target:?} points outside the package")]
    EscapingLink { path: String, target: String },
    #[error("{0}: not a regular file, directory or symlink")]
    Special(String),
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> TreeError + '_ {
    move |source| TreeError::Io { path: path.to_path_buf(), source }
}

/// Every immediate subdirectory of `dir` with its manifest lines (none when it has no manifest).
pub fn read_artifacts(dir: &Path) -> Result<ArtifactIndex, TreeError> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        if !entry.file_type().map_err(io_err(&entry.path()))?.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let manifest = entry.path().join(MANIFEST);
        let lines = match std::fs::read_to_string(&manifest) {
            Ok(text) => text.lines().map(str::to_owned).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(TreeError::Io { path: manifest, source: e }),
        };
        dirs.push((name, lines));
    }
    Ok(ArtifactIndex::new(dirs))
}

fn relative_ok(path: &str) -> bool {
    !path.starts_with('/') && path.split('/').all(|s| s != ".." && !s.contains('\\'))
}

/// The items of a package: each content path's directory walked (symlinks kept as links),
/// placed under `install_prefix` (e.g. `/opt/rocm/core-7.1`). Later sources replace earlier
/// ones at the same path, as a merging copy does.
pub fn collect_items(
    artifacts_dir: &Path,
    contents: &[ContentPath],
    install_prefix: &str,
) -> Result<Vec<(String, Item)>, TreeError> {
    let prefix = install_prefix.trim_matches('/');
    let mut items: BTreeMap<String, Item> = BTreeMap::new();
    for content in contents {
        let line = content.path.trim().trim_end_matches('/');
        if !relative_ok(line) || !relative_ok(&content.dir) || content.dir.contains('/') {
            return Err(TreeError::HostileManifest { dir: content.dir.clone(), line: line.to_owned() });
        }
        let source = artifacts_dir.join(&content.dir).join(line);
        let meta = match std::fs::symlink_metadata(&source) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(TreeError::MissingRoot { dir: content.dir.clone(), line: line.to_owned() });
            }
            Err(e) => return Err(TreeError::Io { path: source, source: e }),
        };
        if !meta.is_dir() {
            return Err(TreeError::MissingRoot { dir: content.dir.clone(), line: line.to_owned() });
        }
        walk(&source, prefix, &mut items)?;
    }
    Ok(items.into_iter().collect())
}

fn walk(dir: &Path, at: &str, items: &mut BTreeMap<String, Item>) -> Result<(), TreeError> {
    let mut entries: Vec<_> =
        std::fs::read_dir(dir).map_err(io_err(dir))?.collect::<Result<_, _>>().map_err(io_err(dir))?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let dest = if at.is_empty() { name } else { format!("{at}/{name}") };
        let meta = std::fs::symlink_metadata(&path).map_err(io_err(&path))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(io_err(&path))?.to_string_lossy().into_owned();
            // Windows spells a relative target with `\`; packages always use `/`.
            let target = if cfg!(windows) { target.replace('\\', "/") } else { target };
            if !link_stays_inside(&dest, &target) {
                return Err(TreeError::EscapingLink { path: dest, target });
            }
            items.insert(dest, Item::Symlink { target });
        } else if kind.is_dir() {
            items.insert(dest.clone(), Item::Dir { mode: mode_of(&meta, &path) & 0o7777 });
            walk(&path, &dest, items)?;
        } else if kind.is_file() {
            items.insert(dest, Item::File { mode: mode_of(&meta, &path) & 0o7777, source: path });
        } else {
            return Err(TreeError::Special(path.display().to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_checked_against_their_depth() {
        assert!(link_stays_inside("opt/rocm/lib/libx.so", "libx.so.1"));
        assert!(link_stays_inside("opt/rocm/lib/libx.so", "../../rocm/lib/x"));
        assert!(!link_stays_inside("opt/rocm/lib/libx.so", "/etc/passwd"));
        assert!(!link_stays_inside("opt/x", "../../etc/passwd"));
        assert!(link_stays_inside("opt/x", "../etc/y"));
    }

    #[cfg(unix)]
    #[test]
    fn content_is_merged_under_the_prefix_and_hostile_trees_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let stage = tmp.path().join("fft_lib_generic/math-libs/rocFFT/stage");
        std::fs::create_dir_all(stage.join("lib")).unwrap();
        std::fs::write(stage.join("lib/librocfft.so.0.1"), "x").unwrap();
        std::os::unix::fs::symlink("librocfft.so.0.1", stage.join("lib/librocfft.so.0")).unwrap();
        std::os::unix::fs::symlink("librocfft.so.0", stage.join("lib/librocfft.so")).unwrap();
        std::fs::write(tmp.path().join("fft_lib_generic").join(MANIFEST), "math-libs/rocFFT/stage\n").unwrap();
        let index = read_artifacts(tmp.path()).unwrap();
        assert_eq!(index.targets(), Vec::<String>::new());
        let content = |line: &str| vec![ContentPath { dir: "fft_lib_generic".into(), path: line.into() }];
        let items = collect_items(tmp.path(), &content("math-libs/rocFFT/stage"), "/opt/rocm/core-7.1").unwrap();
        let paths: Vec<&str> = items.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "opt/rocm/core-7.1/lib",
                "opt/rocm/core-7.1/lib/librocfft.so",
                "opt/rocm/core-7.1/lib/librocfft.so.0",
                "opt/rocm/core-7.1/lib/librocfft.so.0.1"
            ]
        );
        assert!(matches!(items[1].1, Item::Symlink { ref target } if target == "librocfft.so.0"));

        for hostile in ["../../etc", "/etc", "math-libs/../../x"] {
            let err = collect_items(tmp.path(), &content(hostile), "/opt/rocm").unwrap_err();
            assert!(matches!(err, TreeError::HostileManifest { .. }), "{hostile}: {err}");
        }
        let err = collect_items(tmp.path(), &content("math-libs/missing/stage"), "/opt/rocm").unwrap_err();
        assert!(matches!(err, TreeError::MissingRoot { .. }), "{err}");
        std::os::unix::fs::symlink("/etc/passwd", stage.join("lib/evil")).unwrap();
        let err = collect_items(tmp.path(), &content("math-libs/rocFFT/stage"), "/opt/rocm").unwrap_err();
        assert!(matches!(err, TreeError::EscapingLink { .. }), "{err}");
    }
}
