//! What a git checkout of TheRock tells: [`git`] itself (the one place Quarry runs it), the
//! files a commit changed and the submodule paths (the CI matrix's path filters), and the
//! package versions of a build ([`package_versions`]: `version.json`, HEAD, the build date,
//! computed by `quarry_packaging::therock::version` as TheRock's
//! `compute_rocm_package_version.py` does).
//!
//! Error messages are whole (they quote what they wrap and carry no `source()`): a caller
//! prints one as it is.

use std::path::{Path, PathBuf};

use quarry_packaging::therock::version::{
    PackageVersions, Suffix, VersionError, VersionFile, VersionInputs, Yyyymmdd, compute,
};

/// A git command that could not start, or failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `git` could not be run.
    #[error("running git {command}: {error}")]
    Spawn { command: String, error: std::io::Error },
    /// git exited with an error; `stderr` is its message.
    #[error("git {command} failed: {stderr}")]
    Failed { command: String, stderr: String },
}

/// `git -C repo ARGS…`'s standard output, trimmed.
pub fn git(repo: &Path, args: &[&str]) -> Result<String, GitError> {
    Ok(git_untrimmed(repo, args)?.trim().to_owned())
}

/// `git -C repo ARGS…`'s standard output as it is (`-z` output starts with significant blanks).
fn git_untrimmed(repo: &Path, args: &[&str]) -> Result<String, GitError> {
    let command = || args.join(" ");
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .map_err(|error| GitError::Spawn { command: command(), error })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(GitError::Failed { command: command(), stderr });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The files changed since `base` (`git diff --name-only BASE`).
pub fn changed_files(repo: &Path, base: &str) -> Result<Vec<String>, GitError> {
    Ok(git(repo, &["diff", "--name-only", base])?.lines().map(str::to_owned).collect())
}

/// The paths of the checkout's submodules (`git submodule status`).
pub fn submodule_paths(repo: &Path) -> Result<Vec<String>, GitError> {
    let status = git(repo, &["submodule", "status"])?;
    Ok(status.lines().filter_map(|l| l.split_whitespace().nth(1)).map(str::to_owned).collect())
}

/// The paths of the checkout's submodules by their `.gitmodules` name (TheRock's source sets
/// name submodules: `llvm-project` lies at `compiler/amd-llvm`); empty without `.gitmodules`.
pub fn submodule_paths_by_name(repo: &Path) -> std::collections::BTreeMap<String, String> {
    let Ok(text) = git(repo, &["config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$"]) else {
        return Default::default();
    };
    text.lines()
        .filter_map(|line| {
            let (key, path) = line.split_once(' ')?;
            let name = key.strip_prefix("submodule.")?.strip_suffix(".path")?;
            Some((name.to_owned(), path.trim().to_owned()))
        })
        .collect()
}

/// What the sources at `path` (relative to `root`) are, as the stage stamp records them: `git
/// TREE` when git knows them and they are clean, `git TREE dirty SHA256` with the uncommitted
/// changes (the status lines and the changed files' contents) hashed, `files SHA256` (every
/// file's path and content) where git does not know them, `missing` when there is nothing.
/// A submodule checkout (a `.git` of its own) is read as its own repository.
pub fn source_state(root: &Path, path: &str) -> String {
    let dir = root.join(path);
    if !dir.exists() {
        return "missing".into();
    }
    let (repo, sub) = if dir.join(".git").exists() { (dir.clone(), "") } else { (root.to_owned(), path) };
    let spec = if sub.is_empty() { "HEAD^{tree}".to_owned() } else { format!("HEAD:./{sub}") };
    let tree = git(&repo, &["rev-parse", "--verify", "--quiet", &spec]);
    let dirty = git_status_digest(&repo, if sub.is_empty() { "." } else { sub }, &[], "--ignore-submodules=none");
    match (tree, dirty) {
        (Ok(tree), Ok(None)) => format!("git {tree}"),
        (Ok(tree), Ok(Some(dirty))) => format!("git {tree} dirty {dirty}"),
        _ => format!("files {}", content_digest(&dir, &[])),
    }
}

/// The state of the superproject's own files at `root`: everything but the `claimed` paths
/// (relative to `root`: the source sets') and the `excluded` directories (build trees). Under
/// git: its tracked entries (gitlinks give submodules' recorded commits) and its uncommitted
/// changes outside those paths; else the files' contents.
pub fn superproject_state(root: &Path, claimed: &[String], excluded: &[PathBuf]) -> String {
    let mut skip: Vec<String> = claimed.iter().map(|c| c.trim_matches('/').to_owned()).collect();
    let canonical_root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    for dir in excluded {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if let Ok(rel) = dir.strip_prefix(&canonical_root) {
            skip.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    let tracked = git(root, &["rev-parse", "--show-prefix"]).and_then(|prefix| {
        let listing = git(root, &["ls-tree", "-r", "-z", "HEAD", "."])?;
        let entries: Vec<&str> = listing
            .split('\0')
            .filter(|e| e.split_once('\t').is_some_and(|(_, path)| !under_any(path, &skip)))
            .collect();
        let top_skip: Vec<String> = skip.iter().map(|s| format!("{prefix}{s}")).collect();
        let dirty = git_status_digest(root, ".", &top_skip, "--ignore-submodules=all")?;
        Ok(format!("git {} dirty {}", sha256(entries.join("\n").as_bytes()), dirty.unwrap_or_default()))
    });
    tracked.unwrap_or_else(|_| format!("files {}", content_digest(root, &skip)))
}

/// `path` is one of `dirs` or lies below one.
fn under_any(path: &str, dirs: &[String]) -> bool {
    dirs.iter().any(|d| d.is_empty() || path == d || path.strip_prefix(d.as_str()).is_some_and(|r| r.starts_with('/')))
}

/// A digest of `git status` under `pathspec` (tracked changes and untracked files, ignored
/// ones not), the changed files' contents included; `None` when clean. `skip`: top-relative
/// paths left out; `submodules`: `--ignore-submodules=…` (the superproject's own state leaves
/// its submodules to their source sets rather than walk every one of them per stage).
fn git_status_digest(
    repo: &Path,
    pathspec: &str,
    skip: &[String],
    submodules: &str,
) -> Result<Option<String>, GitError> {
    let top = PathBuf::from(git(repo, &["rev-parse", "--show-toplevel"])?);
    let args = ["status", "--porcelain=v1", "-z", "--untracked-files=all", submodules, "--", pathspec];
    let status = git_untrimmed(repo, &args)?;
    let mut lines = Vec::new();
    let mut tokens = status.split('\0').filter(|t| !t.is_empty());
    while let Some(entry) = tokens.next() {
        let (code, path) = (entry.get(..2).unwrap_or_default(), entry.get(3..).unwrap_or_default());
        if code.starts_with(['R', 'C']) {
            tokens.next();
        }
        if under_any(path, skip) {
            continue;
        }
        let file = top.join(path);
        let content =
            if file.is_file() { std::fs::read(&file).map(|b| sha256(&b)).unwrap_or_default() } else { String::new() };
        lines.push(format!("{code} {path} {content}"));
    }
    Ok((!lines.is_empty()).then(|| sha256(lines.join("\n").as_bytes())))
}

/// Every file below `dir` (not `.git`, not below the `skip` paths relative to `dir`): its
/// relative path and content (a link's target), hashed in path order.
fn content_digest(dir: &Path, skip: &[String]) -> String {
    let mut lines = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            if entry.file_name() == ".git" || under_any(&rel, skip) {
                continue;
            }
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                pending.push(path);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&path).map(|t| t.display().to_string()).unwrap_or_default();
                lines.push(format!("{rel} -> {target}"));
            } else {
                lines.push(format!("{rel} {}", std::fs::read(&path).map(|b| sha256(&b)).unwrap_or_default()));
            }
        }
    }
    lines.sort();
    sha256(lines.join("\n").as_bytes())
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[cfg(test)]
mod source_tests {
    use super::*;

    fn git_ok(dir: &Path, args: &[&str]) {
        let mut all = vec!["-c", "user.name=q", "-c", "user.email=q@example.com", "-c", "commit.gpgsign=false"];
        all.extend_from_slice(args);
        git(dir, &all).unwrap();
    }

    #[test]
    fn source_states_follow_content_under_git_and_without() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (file, text) in [("a/x.c", "1"), ("b/y.c", "2"), ("CMakeLists.txt", "3")] {
            std::fs::create_dir_all(root.join(file).parent().unwrap()).unwrap();
            std::fs::write(root.join(file), text).unwrap();
        }
        let claimed = ["a".to_owned(), "b".to_owned()];
        let (a, rest) = (source_state(root, "a"), superproject_state(root, &claimed, &[]));
        assert!(a.starts_with("files "), "{a}");
        std::fs::write(root.join("a/x.c"), "changed").unwrap();
        assert_ne!(source_state(root, "a"), a, "a content change");
        assert_eq!(superproject_state(root, &claimed, &[]), rest, "claimed paths are not the superproject's");
        assert_eq!(source_state(root, "nope"), "missing");

        git_ok(root, &["init", "-q"]);
        git_ok(root, &["add", "-A"]);
        git_ok(root, &["commit", "-qm", "init"]);
        let (a, b, rest) = (source_state(root, "a"), source_state(root, "b"), superproject_state(root, &claimed, &[]));
        assert!(a.starts_with("git ") && !a.contains("dirty"), "{a}");
        assert!(rest.starts_with("git "), "{rest}");
        std::fs::write(root.join("a/x.c"), "edited").unwrap();
        let edited = source_state(root, "a");
        assert!(edited.starts_with(&format!("{a} dirty ")), "{edited}");
        std::fs::write(root.join("a/x.c"), "edited again").unwrap();
        assert_ne!(source_state(root, "a"), edited, "each edit counts");
        std::fs::write(root.join("a/new.c"), "").unwrap();
        assert_ne!(source_state(root, "a"), edited, "untracked files count");
        assert_eq!(source_state(root, "b"), b, "b untouched");
        assert_eq!(superproject_state(root, &claimed, &[]), rest, "the superproject untouched");
        std::fs::create_dir_all(root.join("build")).unwrap();
        std::fs::write(root.join("build/out"), "x").unwrap();
        assert_eq!(superproject_state(root, &claimed, &[root.join("build")]), rest, "build trees excluded");
        std::fs::write(root.join("CMakeLists.txt"), "4").unwrap();
        assert_ne!(superproject_state(root, &claimed, &[root.join("build")]), rest);
    }

    #[test]
    fn a_submodule_checkout_is_read_as_its_own_repository() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("compiler/amd-llvm");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("main.c"), "int main;").unwrap();
        git_ok(&sub, &["init", "-q"]);
        git_ok(&sub, &["add", "-A"]);
        git_ok(&sub, &["commit", "-qm", "sub"]);
        let tree = git(&sub, &["rev-parse", "HEAD^{tree}"]).unwrap();
        assert_eq!(source_state(dir.path(), "compiler/amd-llvm"), format!("git {tree}"));
        std::fs::write(sub.join("main.c"), "int main2;").unwrap();
        assert!(source_state(dir.path(), "compiler/amd-llvm").starts_with(&format!("git {tree} dirty ")));
    }

    #[test]
    fn submodule_names_map_to_paths() {
        let dir = tempfile::tempdir().unwrap();
        git_ok(dir.path(), &["init", "-q"]);
        let modules = "[submodule \"llvm-project\"]\n\tpath = compiler/amd-llvm\n\turl = x\n";
        std::fs::write(dir.path().join(".gitmodules"), modules).unwrap();
        let paths = submodule_paths_by_name(dir.path());
        assert_eq!(paths.get("llvm-project").map(String::as_str), Some("compiler/amd-llvm"));
    }
}

/// What a build's package versions are computed from (the flags of `quarry version`); what is
/// `None` is read from the checkout, `source_date_epoch` or the clock.
#[derive(Debug, Clone)]
pub struct VersionRequest {
    /// The release type's suffix, or a custom one.
    pub suffix: Suffix,
    /// A directory inside the git checkout.
    pub repo: PathBuf,
    /// `version.json`; None: the one at the root of `repo`'s work tree.
    pub version_file: Option<PathBuf>,
    /// Replaces `version.json`'s `rocm-version`.
    pub override_base_version: Option<String>,
    /// The commit the dev versions name (empty counts as unset); None: `git rev-parse HEAD`,
    /// run only for the release types that need a sha.
    pub git_sha: Option<String>,
    /// The build date, YYYYMMDD; None: `source_date_epoch`'s date, else today (UTC).
    pub date: Option<String>,
    /// `SOURCE_DATE_EPOCH`, in seconds (blank counts as unset).
    pub source_date_epoch: Option<String>,
    /// The release candidate number (only with `prerelease`).
    pub prerelease_version: Option<String>,
}

/// A build's versions and the inputs they were computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutVersions {
    /// The resolved inputs (date, sha, suffix).
    pub inputs: VersionInputs,
    /// The wheel, deb and rpm versions.
    pub versions: PackageVersions,
}

/// Why the versions of a checkout cannot be computed: every case is bad input.
#[derive(Debug, thiserror::Error)]
pub enum CheckoutError {
    /// No version file given and no git work tree to find one in.
    #[error("{0}: give --version-file")]
    NoWorkTree(GitError),
    /// The version file cannot be read.
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    /// The version file is not a valid `version.json`.
    #[error("{}: {error}", path.display())]
    Parse { path: PathBuf, error: VersionError },
    /// The requested date is not a YYYYMMDD date.
    #[error("--date: {0}")]
    Date(VersionError),
    /// `SOURCE_DATE_EPOCH` is not a time.
    #[error("SOURCE_DATE_EPOCH={0:?} is not a time in seconds")]
    SourceDateEpoch(String),
    /// A dev version needs the sha and there is no HEAD to read it from.
    #[error("{0}: give --override-git-sha")]
    NoHead(GitError),
    /// The inputs do not make a version (TheRock's checks).
    #[error(transparent)]
    Version(#[from] VersionError),
}

/// The package versions of the checkout `request` names, as TheRock's
/// `compute_rocm_package_version.py` computes them there.
pub fn package_versions(request: &VersionRequest) -> Result<CheckoutVersions, CheckoutError> {
    let path = match &request.version_file {
        Some(path) => path.clone(),
        None => {
            let top = git(&request.repo, &["rev-parse", "--show-toplevel"]).map_err(CheckoutError::NoWorkTree)?;
            PathBuf::from(top).join("version.json")
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|error| CheckoutError::Read { path: path.clone(), error })?;
    let file = VersionFile::parse(&text).map_err(|error| CheckoutError::Parse { path, error })?;
    let date = build_date(request.date.as_deref(), request.source_date_epoch.as_deref())?;
    let needs_sha = matches!(request.suffix, Suffix::Release(t) if t.is_dev());
    let git_sha = match request.git_sha.clone().filter(|s| !s.is_empty()) {
        Some(sha) => Some(sha),
        None if needs_sha => {
            Some(git(&request.repo, &["rev-parse", "--verify", "HEAD"]).map_err(CheckoutError::NoHead)?)
        }
        None => None,
    };
    let inputs = VersionInputs {
        suffix: request.suffix.clone(),
        override_base_version: request.override_base_version.clone(),
        date,
        git_sha,
        prerelease_version: request.prerelease_version.clone(),
    };
    let versions = compute(&file, &inputs)?;
    Ok(CheckoutVersions { inputs, versions })
}

/// The build date: `date` (YYYYMMDD), else the UTC date of `source_date_epoch` (seconds; blank
/// is unset), else today in UTC.
pub fn build_date(date: Option<&str>, source_date_epoch: Option<&str>) -> Result<Yyyymmdd, CheckoutError> {
    if let Some(date) = date {
        return date.parse().map_err(CheckoutError::Date);
    }
    let now = match source_date_epoch {
        Some(epoch) if !epoch.trim().is_empty() => epoch
            .trim()
            .parse::<i64>()
            .ok()
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
            .ok_or_else(|| CheckoutError::SourceDateEpoch(epoch.to_owned()))?,
        _ => jiff::Timestamp::now(),
    };
    let date = now.to_zoned(jiff::tz::TimeZone::UTC).date();
    Ok(Yyyymmdd::from_ymd(date.year().into(), date.month() as u32, date.day() as u32)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_dates_come_from_the_flag_the_epoch_or_the_clock() {
        assert_eq!(build_date(Some("20251203"), Some("0")).unwrap().as_str(), "20251203");
        assert_eq!(build_date(None, Some(" 1764806399 ")).unwrap().as_str(), "20251203");
        assert!(build_date(None, Some(" ")).is_ok(), "blank is unset: today");
        let err = build_date(Some("20261301"), None).unwrap_err().to_string();
        assert!(err.starts_with("--date: ") && err.contains("not a date in YYYYMMDD format"), "{err}");
        let err = build_date(None, Some("soon")).unwrap_err().to_string();
        assert_eq!(err, "SOURCE_DATE_EPOCH=\"soon\" is not a time in seconds");
    }

    #[test]
    fn versions_read_the_file_and_skip_git_when_no_sha_is_needed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("version.json");
        std::fs::write(&file, r#"{"rocm-version": "7.1.0"}"#).unwrap();
        let request = VersionRequest {
            suffix: Suffix::Release("nightly".parse().unwrap()),
            repo: dir.path().to_owned(),
            version_file: Some(file.clone()),
            override_base_version: None,
            git_sha: None,
            date: Some("20251203".into()),
            source_date_epoch: None,
            prerelease_version: None,
        };
        let got = package_versions(&request).unwrap();
        assert_eq!(got.versions.rocm_package_version, "7.1.0a20251203");
        assert_eq!(got.inputs.git_sha, None);
        let dev =
            VersionRequest { suffix: Suffix::Release("dev".parse().unwrap()), git_sha: Some("ab".into()), ..request };
        assert_eq!(package_versions(&dev).unwrap().versions.rocm_package_version, "7.1.0.dev0+ab");
        let missing = VersionRequest { version_file: Some(dir.path().join("nope.json")), ..dev };
        assert!(package_versions(&missing).unwrap_err().to_string().starts_with("cannot read "));
    }
}
