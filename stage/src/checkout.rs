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
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
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
