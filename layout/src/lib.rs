//! TheRock's key layout above the store: where a run's artifacts, logs and packages go
//! (`{run}-{platform}/…`, spec §5), which roots beyond a run's a store holds (the `[layout]`
//! configuration, [`config`]), and what a run is (its manifest, [`runs`]).
//!
//! `quarry-store` holds keys and bytes and knows nothing of this; every crate that reads or
//! writes a run's keys asks this one, so the run grammar has one owner.
//!
//! Under a run prefix `{run}-{platform}/` ([`RunSegment`]) lie the pip root `python/` (legacy
//! layouts also have `python/{group}/` roots: any prefix with a `python` segment), the apt root
//! `packages/deb/` with its uploads in `pool/main/`, the dnf roots `packages/rpm/{arch}/`, the
//! stage archives at the run root itself and the logs in `logs/`. [`RunLayout`] answers every
//! question about that layout (`root_dir`, `upload_dir`, `root_of`, `native_root_kind`,
//! `is_listed`, `part_of`, …) and [`config::Layout::run`] returns the one in force, [`THEROCK`]; nobody else
//! spells a run's directory or parses a run segment. The upload kinds, the bucket a run goes to
//! and public URLs are here too. [`GENERATED_NAMES`] (with [`FILE_SUFFIXES`], through
//! [`reserved_directory`]) is the one list of reserved names: the key checks
//! (`quarry_index::check_key_segments`) and the configured root patterns ([`config`]) refuse the
//! same names as directories.

pub mod config;
pub mod runs;

/// What is being uploaded, which decides the key prefix under the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum UploadKind {
    /// Wheels and sdists: `{run}-{platform}/python/`.
    Python,
    /// Debian packages: `{run}-{platform}/packages/deb/pool/main/`.
    Deb,
    /// RPMs: `{run}-{platform}/packages/rpm/x86_64/`.
    Rpm,
    /// Stage artifacts (`*.tar.zst` + `.sha256sum`): the run prefix itself.
    Artifacts,
    /// Build logs: `{run}-{platform}/logs/` (per artifact group or stage below it).
    Logs,
}

impl UploadKind {
    /// Where uploads of this kind go under the run prefix ([`RunLayout::upload_dir`] of the
    /// [`THEROCK`] layout).
    pub fn subdir(self) -> String {
        THEROCK.upload_dir(self)
    }

    /// `python`, `deb`, `rpm` or `artifacts`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Python => "python",
            Self::Deb => "deb",
            Self::Rpm => "rpm",
            Self::Artifacts => "artifacts",
            Self::Logs => "logs",
        }
    }
}

/// The directory of a run that holds its pip root (`{run}-{platform}/python/`).
pub const PYTHON_DIR: &str = "python";

/// Names Quarry writes inside roots and run listings: pages, PEP 503/691 and apt/dnf
/// directories, state objects. No key uses one as a directory and no configured root pattern
/// names one (compared in any case: a case-insensitive filesystem or mirror collides just the
/// same).
pub const GENERATED_NAMES: &[&str] = &[
    "index.html",
    "index.json",
    "simple",
    "dists",
    "repodata",
    "by-hash",
    ".quarry-index.json",
    ".quarry-index",
    ".quarry-apt.json",
    ".quarry-dnf.json",
    ".quarry-listing.json",
];

/// Endings of files Quarry stores or writes (packages, sidecars, pages): never a directory.
pub const FILE_SUFFIXES: &[&str] = &[
    ".metadata",
    ".whl",
    ".tar.gz",
    ".zip",
    ".deb",
    ".rpm",
    ".tar.zst",
    ".tar.xz",
    ".sha256sum",
    ".html",
    ".json",
    ".asc",
    ".xml",
    ".xml.gz",
    ".gz",
    ".xz",
];

/// Why a segment cannot name a directory of the store ([`reserved_directory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reserved {
    /// One of [`GENERATED_NAMES`].
    Generated,
    /// Ends like one of [`FILE_SUFFIXES`].
    FileName,
}

impl Reserved {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Generated => "the name of a page or file the indexer writes",
            Self::FileName => "named like a package, page or sidecar file",
        }
    }
}

/// Why `segment` cannot name a directory of the store, if it cannot.
pub fn reserved_directory(segment: &str) -> Option<Reserved> {
    let lower = segment.to_ascii_lowercase();
    if GENERATED_NAMES.iter().any(|n| n.eq_ignore_ascii_case(segment)) {
        return Some(Reserved::Generated);
    }
    FILE_SUFFIXES.iter().any(|suffix| lower.ends_with(suffix)).then_some(Reserved::FileName)
}
/// The directory of a run that holds its apt and dnf repos (`{run}-{platform}/packages/`).
pub const PACKAGES_DIR: &str = "packages";

/// Where things lie under a run prefix `{run}-{platform}/`: the pip root, the apt and dnf repos
/// below the packages directory, the stage artifacts at the run root, the logs. Every question
/// about a run's layout is a method here, so that where the names come from (today TheRock's
/// fixed ones, [`THEROCK`]) is decided in one place: [`config::Layout::run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLayout {
    /// The pip root's directory (`python`); legacy layouts also have `python/{group}/` roots.
    python: &'static str,
    /// The directory of the native repos (`packages`).
    packages: &'static str,
    /// The apt root below `packages` (`deb`).
    deb: &'static str,
    /// Where `.deb`s are uploaded inside the apt root (`pool/main`).
    deb_pool: &'static str,
    /// The directory of the dnf roots below `packages` (`rpm`).
    rpm: &'static str,
    /// The dnf root `.rpm`s are uploaded to (`x86_64`).
    rpm_arch: &'static str,
    /// Names a dnf root directory may have: the rpm architectures.
    rpm_arches: &'static [&'static str],
    /// The directory of a run's logs (`logs`).
    logs: &'static str,
}

/// TheRock's run layout (spec §5).
pub const THEROCK: RunLayout = RunLayout {
    python: PYTHON_DIR,
    packages: PACKAGES_DIR,
    deb: "deb",
    deb_pool: "pool/main",
    rpm: "rpm",
    rpm_arch: "x86_64",
    rpm_arches: &["x86_64", "aarch64", "noarch", "i686", "ppc64le", "s390x", "riscv64"],
    logs: "logs",
};

/// What part of a run a file belongs to, by where it lies (the run browser's summary), in the
/// order they are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunPart {
    /// Files of an upload kind: the pip root, `.deb`s, `.rpm`s, stage archives.
    Upload(UploadKind),
    /// The run's logs directory.
    Logs,
}

impl RunPart {
    /// `python`, `deb`, `rpm`, `artifacts` or `logs`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Upload(kind) => kind.label(),
            Self::Logs => "logs",
        }
    }
}

impl RunLayout {
    /// The directory of a repo root of `kind` under the run prefix, ending in `/`
    /// (`python/`, `packages/deb/`, `packages/rpm/x86_64/`, `logs/`); empty for artifacts,
    /// which lie at the run prefix itself.
    pub fn root_dir(&self, kind: UploadKind) -> String {
        match kind {
            UploadKind::Python => format!("{}/", self.python),
            UploadKind::Deb => format!("{}/{}/", self.packages, self.deb),
            UploadKind::Rpm => self.rpm_root_dir(self.rpm_arch),
            UploadKind::Artifacts => String::new(),
            UploadKind::Logs => format!("{}/", self.logs),
        }
    }

    /// The directory of the dnf root of `arch` under a run prefix (`packages/rpm/aarch64/`).
    pub fn rpm_root_dir(&self, arch: &str) -> String {
        format!("{}/{}/{arch}/", self.packages, self.rpm)
    }

    /// Where `.deb`s lie inside an apt root (`pool/main`).
    pub fn deb_pool(&self) -> &'static str {
        self.deb_pool
    }

    /// Where uploads of `kind` go under the run prefix: the root directory, and for `.deb`s
    /// the pool inside it (`packages/deb/pool/main/`).
    pub fn upload_dir(&self, kind: UploadKind) -> String {
        match kind {
            UploadKind::Deb => format!("{}{}/", self.root_dir(kind), self.deb_pool),
            _ => self.root_dir(kind),
        }
    }

    /// The prefix of `run`'s root of `kind` (`12345-linux/python/`), for a run at the top of
    /// the store.
    pub fn root_of(&self, run: RunSegment<'_>, kind: UploadKind) -> String {
        format!("{run}/{}", self.root_dir(kind))
    }

    /// The index of the segment that makes a prefix a pip root, if any: the first `python`.
    pub fn python_segment(&self, segments: &[&str]) -> Option<usize> {
        segments.iter().position(|s| *s == self.python)
    }

    /// The native repo a prefix's segments name by their last one: [`UploadKind::Deb`] for a last
    /// segment `deb`, [`UploadKind::Rpm`] for an rpm architecture or a parent `rpm`.
    pub fn native_root_kind(&self, segments: &[&str]) -> Option<UploadKind> {
        let last = segments.last().copied().unwrap_or_default();
        let parent = segments.len().checked_sub(2).map(|i| segments[i]);
        if last == self.deb {
            Some(UploadKind::Deb)
        } else if self.rpm_arches.contains(&last) || parent == Some(self.rpm) {
            Some(UploadKind::Rpm)
        } else {
            None
        }
    }

    /// Why a prefix is not a repo root, saying how the roots are told apart.
    pub fn not_a_root(&self) -> &'static str {
        "not a repo root: a pip root has a 'python' segment (RUN-linux/python/), an apt root ends in \
         'deb' (RUN-linux/packages/deb/), a dnf root in an rpm architecture (RUN-linux/packages/rpm/x86_64/)"
    }

    /// The directory of a run's logs below the run prefix (`logs`), without slashes.
    pub fn logs_dir(&self) -> &'static str {
        self.logs
    }

    /// Whether a directory (a `/`-separated prefix) would get a run listing: it lies in a run
    /// and not in the run's pip root or native repos. [`config::Layout::is_listed`] also asks
    /// whether runs are laid out at all.
    pub fn is_listed(&self, prefix: &str) -> bool {
        let trimmed = prefix.trim_end_matches('/');
        let Some((run, _)) = find_run(trimmed) else {
            return false;
        };
        let below = trimmed.split('/').nth(run + 1);
        !below.is_some_and(|s| s == self.python || s == self.packages)
    }

    /// The part of a run a file at `relative` (to the run prefix) belongs to: anything under
    /// the pip root, `.deb`s and `.rpm`s anywhere else, the logs, and `.tar.zst`/`.tar.xz`
    /// archives at the run root.
    pub fn part_of(&self, relative: &str) -> Option<RunPart> {
        if relative.strip_prefix(self.python).is_some_and(|rest| rest.starts_with('/')) {
            Some(RunPart::Upload(UploadKind::Python))
        } else if relative.ends_with(".deb") {
            Some(RunPart::Upload(UploadKind::Deb))
        } else if relative.ends_with(".rpm") {
            Some(RunPart::Upload(UploadKind::Rpm))
        } else if self.log_name(relative).is_some() {
            Some(RunPart::Logs)
        } else if self
            .artifact_file(relative)
            .is_some_and(|name| name.ends_with(".tar.zst") || name.ends_with(".tar.xz"))
        {
            Some(RunPart::Upload(UploadKind::Artifacts))
        } else {
            None
        }
    }

    /// The path of a log below the logs directory, for a file at `relative` (to the run
    /// prefix) that is one.
    pub fn log_name<'a>(&self, relative: &'a str) -> Option<&'a str> {
        relative.strip_prefix(self.logs)?.strip_prefix('/')
    }

    /// The file name of a stage artifact's file at `relative` (to the run prefix): artifacts
    /// lie at the run root, so anything in a directory is none.
    pub fn artifact_file<'a>(&self, relative: &'a str) -> Option<&'a str> {
        (!relative.contains('/')).then_some(relative)
    }
}

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

/// The segment again: `{run_id}-{platform}`.
impl std::fmt::Display for RunSegment<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.run_id, self.platform)
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
    fn the_run_layout_is_therocks() {
        let layout = &THEROCK;
        let dirs: Vec<(String, String)> =
            [UploadKind::Python, UploadKind::Deb, UploadKind::Rpm, UploadKind::Artifacts, UploadKind::Logs]
                .into_iter()
                .map(|k| (layout.root_dir(k), layout.upload_dir(k)))
                .collect();
        assert_eq!(
            dirs,
            [
                ("python/".into(), "python/".into()),
                ("packages/deb/".into(), "packages/deb/pool/main/".into()),
                ("packages/rpm/x86_64/".into(), "packages/rpm/x86_64/".into()),
                (String::new(), String::new()),
                ("logs/".into(), "logs/".into()),
            ]
        );
        let run = RunSegment::parse("12-linux").unwrap();
        assert_eq!(run.to_string(), "12-linux");
        assert_eq!(layout.root_of(run, UploadKind::Python), "12-linux/python/");
        let kind = |p: &str| layout.native_root_kind(&p.split('/').collect::<Vec<_>>());
        assert_eq!(kind("1-linux/packages/deb"), Some(UploadKind::Deb));
        assert_eq!(kind("1-linux/packages/rpm/aarch64"), Some(UploadKind::Rpm));
        assert_eq!(kind("x/rpm/el9"), Some(UploadKind::Rpm));
        assert_eq!(kind("1-linux/packages"), None);
        assert_eq!(layout.python_segment(&["1-linux", "python", "gfx94X"]), Some(1));
        for (dir, listed) in [("1-linux/", true), ("o-r/1-linux/logs/", true), ("1-linux/python/", false)] {
            assert_eq!(layout.is_listed(dir), listed, "{dir}");
        }
        assert!(!layout.is_listed("1-linux/packages/deb/") && !layout.is_listed("python/gfx94X/"));
        let part = |rel: &str| layout.part_of(rel).map(RunPart::label);
        assert_eq!(part("python/x.whl"), Some("python"));
        assert_eq!(part("packages/deb/pool/main/a.deb"), Some("deb"));
        assert_eq!(part("packages/rpm/x86_64/a.rpm"), Some("rpm"));
        assert_eq!(part("logs/gfx94X/build.log"), Some("logs"));
        assert_eq!(part("blas_lib_gfx942.tar.zst"), Some("artifacts"));
        assert_eq!(part("sub/blas_lib_gfx942.tar.zst"), None);
        assert_eq!(part("pythonic/x"), None);
        assert_eq!(layout.log_name("logs/a/b.log"), Some("a/b.log"));
        assert_eq!(layout.log_name("logsx/b.log"), None);
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
        assert_eq!(UploadKind::Deb.subdir(), "packages/deb/pool/main/");
        assert_eq!(
            public_url("therock-ci-artifacts", "1-linux/python/index.html"),
            "https://therock-ci-artifacts.s3.amazonaws.com/1-linux/python/index.html"
        );
    }
}
