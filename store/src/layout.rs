//! TheRock's key layout and bucket choice (spec §5): where a run's artifacts and packages go.

/// What is being uploaded, which decides the key prefix under the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Wheels and sdists: `{run}-{platform}/python/`.
    Python,
    /// Debian packages: `{run}-{platform}/packages/deb/pool/main/`.
    Deb,
    /// RPMs: `{run}-{platform}/packages/rpm/x86_64/`.
    Rpm,
    /// Stage artifacts (`*.tar.zst` + `.sha256sum`): the run prefix itself.
    Artifacts,
}

impl Kind {
    pub fn subdir(self) -> &'static str {
        match self {
            Self::Python => "python/",
            Self::Deb => "packages/deb/pool/main/",
            Self::Rpm => "packages/rpm/x86_64/",
            Self::Artifacts => "",
        }
    }
}

/// The directory of a run that holds its pip root (`{run}-{platform}/python/`).
pub const PYTHON_DIR: &str = "python";
/// The directory of a run that holds its apt and dnf repos (`{run}-{platform}/packages/`).
pub const PACKAGES_DIR: &str = "packages";

/// A key segment naming a CI run: `{run_id}-{platform}`, the run id all digits, the platform
/// ASCII letters, digits and `_` (`12345-linux`, `678-windows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunSegment<'a> {
    pub run_id: &'a str,
    pub platform: &'a str,
}

impl<'a> RunSegment<'a> {
    /// The run a segment names, or `None` when it names none.
    pub fn parse(segment: &'a str) -> Option<Self> {
        let (run_id, platform) = segment.split_once('-')?;
        let ok = !run_id.is_empty()
            && run_id.bytes().all(|b| b.is_ascii_digit())
            && !platform.is_empty()
            && platform.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        ok.then_some(Self { run_id, platform })
    }

    /// The sort key of the run id in numeric order, without parsing it: ids can be longer than
    /// any integer type.
    pub fn order(&self) -> (usize, &'a str) {
        run_id_order(self.run_id)
    }
}

/// Sort key of a run id (the digits before any `-`) in numeric order, without parsing.
pub fn run_id_order(id: &str) -> (usize, &str) {
    let digits = id.split('-').next().unwrap_or(id).trim_start_matches('0');
    (digits.len(), digits)
}

/// The first run segment of a `/`-separated key or prefix, with its index among the segments.
pub fn find_run(key: &str) -> Option<(usize, RunSegment<'_>)> {
    key.split('/').enumerate().find_map(|(i, segment)| RunSegment::parse(segment).map(|run| (i, run)))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("unknown RELEASE_TYPE {0:?}: expected ci, dev, dev-bkc, nightly, nightly-bkc or prerelease")]
    ReleaseType(String),
    #[error("{what} {value:?} must be non-empty and contain no '/'")]
    BadPart { what: &'static str, value: String },
}

/// The bucket holding a run's artifacts, from `RELEASE_TYPE` (default `ci`), the repository
/// (`GITHUB_REPOSITORY`, `owner/name`) and whether the run is a pull request from a fork.
pub fn artifact_bucket(release_type: &str, repository: &str, is_fork: bool) -> Result<&'static str, LayoutError> {
    Ok(match release_type {
        "" | "ci" if repository == "ROCm/TheRock" && !is_fork => "therock-ci-artifacts",
        "" | "ci" => "therock-ci-artifacts-external",
        "dev" | "dev-bkc" => "therock-dev-artifacts",
        "nightly" | "nightly-bkc" => "therock-nightly-artifacts",
        "prerelease" => "therock-prerelease-artifacts",
        other => return Err(LayoutError::ReleaseType(other.to_owned())),
    })
}

/// The run prefix `{external_repo}{run_id}-{platform}/`; the external bucket keys runs under
/// `{owner}-{repo}/` (case kept).
pub fn run_prefix(bucket: &str, repository: &str, run_id: &str, platform: &str) -> Result<String, LayoutError> {
    for (what, value) in [("run id", run_id), ("platform", platform)] {
        if value.is_empty() || value.contains('/') {
            return Err(LayoutError::BadPart { what, value: value.to_owned() });
        }
    }
    let external = if bucket == "therock-ci-artifacts-external" {
        let owner_repo = repository.replace('/', "-");
        if owner_repo.is_empty() {
            return Err(LayoutError::BadPart { what: "repository", value: repository.to_owned() });
        }
        format!("{owner_repo}/")
    } else {
        String::new()
    };
    Ok(format!("{external}{run_id}-{platform}/"))
}

/// The public https form of a key (`https://{bucket}.s3.amazonaws.com/{key}`, no region).
pub fn public_url(bucket: &str, key: &str) -> String {
    format!("https://{bucket}.s3.amazonaws.com/{key}")
}

/// Like [`public_url`], but on an S3-compatible server (`AWS_ENDPOINT_URL[_S3]`) the
/// path-style URL there.
pub fn public_url_from_env(bucket: &str, key: &str) -> String {
    let endpoint = std::env::var("AWS_ENDPOINT_URL_S3").or_else(|_| std::env::var("AWS_ENDPOINT_URL"));
    match endpoint {
        Ok(endpoint) if !endpoint.is_empty() => format!("{}/{bucket}/{key}", endpoint.trim_end_matches('/')),
        _ => public_url(bucket, key),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_therock() {
        assert_eq!(artifact_bucket("ci", "ROCm/TheRock", false), Ok("therock-ci-artifacts"));
        assert_eq!(artifact_bucket("", "ROCm/TheRock", false), Ok("therock-ci-artifacts"));
        assert_eq!(artifact_bucket("ci", "ROCm/TheRock", true), Ok("therock-ci-artifacts-external"));
        assert_eq!(artifact_bucket("ci", "ROCm/rocm-libraries", false), Ok("therock-ci-artifacts-external"));
        assert_eq!(artifact_bucket("dev-bkc", "ROCm/TheRock", false), Ok("therock-dev-artifacts"));
        assert_eq!(artifact_bucket("nightly", "ROCm/TheRock", false), Ok("therock-nightly-artifacts"));
        assert_eq!(artifact_bucket("prerelease", "x/y", false), Ok("therock-prerelease-artifacts"));
        assert_eq!(artifact_bucket("release", "ROCm/TheRock", false), Err(LayoutError::ReleaseType("release".into())));
    }

    #[test]
    fn run_segments() {
        assert_eq!(RunSegment::parse("12345-linux"), Some(RunSegment { run_id: "12345", platform: "linux" }));
        assert_eq!(RunSegment::parse("1-windows_x64").map(|r| r.platform), Some("windows_x64"));
        for bad in ["python", "-linux", "12a-linux", "12-", "12-lin-ux", "12-li.nux", ""] {
            assert_eq!(RunSegment::parse(bad), None, "{bad}");
        }
        assert_eq!(find_run("ROCm-rocm-libraries/12-linux/python/x.whl").map(|(i, r)| (i, r.run_id)), Some((1, "12")));
        assert!(run_id_order("9-linux") < run_id_order("10-linux"));
        assert_eq!(run_id_order("0012"), run_id_order("12"));
    }

    #[test]
    fn prefixes_follow_therock() {
        assert_eq!(
            run_prefix("therock-ci-artifacts", "ROCm/TheRock", "12345678901", "linux").unwrap(),
            "12345678901-linux/"
        );
        assert_eq!(
            run_prefix("therock-ci-artifacts-external", "ROCm/rocm-libraries", "12345", "linux").unwrap(),
            "ROCm-rocm-libraries/12345-linux/"
        );
        assert!(run_prefix("b", "r", "1/2", "linux").is_err());
        assert_eq!(Kind::Deb.subdir(), "packages/deb/pool/main/");
        assert_eq!(
            public_url("therock-ci-artifacts", "1-linux/python/index.html"),
            "https://therock-ci-artifacts.s3.amazonaws.com/1-linux/python/index.html"
        );
    }
}
