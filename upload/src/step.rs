//! TheRock's upload step conventions (`upload_python_packages.py`, `post_build_upload.py`), pure
//! but for reading the input directories: which directory of an input is uploaded (`<dir>/dist`
//! for packages, `<dir>/logs` for logs), which log files are left out or also copied to the log
//! root, the artifact group below the kind's directory, and how a multi-arch Python upload is
//! laid out (the `kpack_split` output later jobs read).

use std::path::{Path, PathBuf};

use quarry_layout::UploadKind;

use crate::store::{CollectError, collect};

/// Raw ccache logs: TheRock uploads them compressed (`ccache_logs.tar.zst`), never raw.
const CCACHE_LOGS: &str = "ccache/";
/// Resource profiling: its summaries are also uploaded at the log root for direct links.
const BUILD_PROF: &str = "therock-build-prof/";
/// The summaries copied from [`BUILD_PROF`] to the log root.
const BUILD_PROF_SUMMARIES: [&str; 2] = ["comp-summary.html", "comp-summary.md"];

/// A bad `--artifact-group`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--artifact-group {0:?} must be one or more '/'-separated names (gfx94X-dcgpu, math-libs/gfx1151), none empty, '.' or '..'"
)]
pub struct GroupError(pub String);

/// Checks an artifact group: `gfx94X-dcgpu`, or `stage/family` as multi-arch logs use.
pub fn check_group(group: &str) -> Result<(), GroupError> {
    let ok = !group.is_empty()
        && group.split('/').all(|s| !s.is_empty() && s != "." && s != ".." && !s.contains(['\\', '\0']));
    if ok { Ok(()) } else { Err(GroupError(group.to_owned())) }
}

/// The directory actually uploaded for an input directory: `<dir>/dist` for Python packages when
/// it exists (`build_python_packages.py` writes there; pytorch's build writes the directory
/// itself), `<dir>/logs` for logs when it exists (a build directory given), else `dir`.
pub fn input_dir(dir: &Path, kind: UploadKind) -> PathBuf {
    let sub = match kind {
        UploadKind::Python => "dist",
        UploadKind::Logs => "logs",
        _ => return dir.to_owned(),
    };
    let candidate = dir.join(sub);
    if candidate.is_dir() { candidate } else { dir.to_owned() }
}

/// The files an upload of `kind` takes from `paths`, with their paths relative to the
/// destination: directories through [`input_dir`]; for logs, raw ccache logs left out and the
/// resource profiling summaries also at the log root, as `post_build_upload.py` uploads them.
pub fn collect_inputs(paths: &[PathBuf], kind: UploadKind) -> Result<Vec<(PathBuf, String)>, CollectError> {
    let inputs: Vec<PathBuf> = paths.iter().map(|p| if p.is_dir() { input_dir(p, kind) } else { p.clone() }).collect();
    let mut files = collect(&inputs)?;
    if kind == UploadKind::Logs {
        files.retain(|(_, rel)| !rel.starts_with(CCACHE_LOGS));
        let flattened: Vec<(PathBuf, String)> = files
            .iter()
            .filter_map(|(path, rel)| {
                let name = rel.strip_prefix(BUILD_PROF)?;
                BUILD_PROF_SUMMARIES.contains(&name).then(|| (path.clone(), name.to_owned()))
            })
            .collect();
        for (path, rel) in flattened {
            if !files.iter().any(|(_, r)| *r == rel) {
                files.push((path, rel));
            }
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::PythonLayout;

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        for file in files {
            let path = tmp.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, file).unwrap();
        }
        tmp
    }

    fn rels(files: &[(PathBuf, String)]) -> Vec<&str> {
        files.iter().map(|(_, r)| r.as_str()).collect()
    }

    #[test]
    fn the_dist_and_logs_subdirectories_are_what_is_uploaded() {
        let tmp = tree(&["packages/dist/a-1-py3-none-any.whl", "packages/build.txt", "flat/b-1.tar.gz"]);
        let packages = collect_inputs(&[tmp.path().join("packages")], UploadKind::Python).unwrap();
        assert_eq!(rels(&packages), ["a-1-py3-none-any.whl"]);
        let flat = collect_inputs(&[tmp.path().join("flat")], UploadKind::Python).unwrap();
        assert_eq!(rels(&flat), ["b-1.tar.gz"]);
        let artifacts = collect_inputs(&[tmp.path().join("packages")], UploadKind::Artifacts).unwrap();
        assert_eq!(rels(&artifacts), ["build.txt", "dist/a-1-py3-none-any.whl"]);
    }

    #[test]
    fn logs_leave_out_raw_ccache_and_flatten_the_profiling_summaries() {
        let tmp = tree(&[
            "build/logs/build.log",
            "build/logs/ccache/a/b.log",
            "build/logs/ccache_logs.tar.zst",
            "build/logs/therock-build-prof/comp-summary.html",
            "build/logs/therock-build-prof/comp-summary.md",
            "build/logs/therock-build-prof/raw.csv",
            "build/other.txt",
        ]);
        let logs = collect_inputs(&[tmp.path().join("build")], UploadKind::Logs).unwrap();
        assert_eq!(
            rels(&logs),
            [
                "build.log",
                "ccache_logs.tar.zst",
                "therock-build-prof/comp-summary.html",
                "therock-build-prof/comp-summary.md",
                "therock-build-prof/raw.csv",
                "comp-summary.html",
                "comp-summary.md",
            ]
        );
    }

    #[test]
    fn python_layouts_follow_upload_python_packages() {
        let files = |rels: &[&str]| rels.iter().map(|r| (PathBuf::new(), (*r).to_owned())).collect::<Vec<_>>();
        let flat = files(&["a.whl", ".kpack_staging/x"]);
        assert_eq!(PythonLayout::of(&flat, true), PythonLayout::SingleArch);
        assert_eq!(PythonLayout::of(&flat, false), PythonLayout::KpackSplit);
        assert_eq!(PythonLayout::of(&files(&["a.whl", "gfx94X-dcgpu/b.whl"]), false), PythonLayout::PerFamily);
        assert!(PythonLayout::KpackSplit.kpack_split() && !PythonLayout::PerFamily.kpack_split());
    }

    #[test]
    fn groups_are_checked() {
        assert!(check_group("gfx94X-dcgpu").is_ok() && check_group("math-libs/gfx1151").is_ok());
        for bad in ["", "../x", "a//b", "a/.", "a\\b", "/a"] {
            assert_eq!(check_group(bad), Err(GroupError(bad.to_owned())), "{bad}");
        }
    }
}
