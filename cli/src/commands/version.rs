//! `quarry version`: TheRock's `build_tools/compute_rocm_package_version.py`. The flags go to
//! `quarry_stage::checkout::package_versions` (`version.json`, git, the build date); this prints
//! a table, JSON, or appends TheRock's outputs to `$GITHUB_OUTPUT`.

use std::path::PathBuf;

use clap::ValueEnum as _;
use quarry_packaging::therock::version::{PackageVersions, ReleaseType, Suffix, VersionReport};
use quarry_stage::checkout::{VersionRequest, package_versions};

use super::UsageError;
use super::args::JsonArg;

const ABOUT: &str = "TheRock's package versions (pip, deb, rpm) for a release type, from version.json and git.";

const LONG_ABOUT: &str = "\
Print the package versions of a TheRock build for a release type, as TheRock's
build_tools/compute_rocm_package_version.py computes them: the base version is `rocm-version`
from version.json (at the git work tree's root, or --version-file), the suffix comes from the
release type, the build date and the git commit.

  type          wheel (pip)              deb                      rpm Version
  release       X.Y.Z                    X.Y.Z                    X.Y.Z
  prerelease    X.Y.ZrcN                 X.Y.Z~preN               X.Y.Z~rcN
  nightly       X.Y.ZaYYYYMMDD           X.Y.Z~YYYYMMDD           X.Y.Z~YYYYMMDD
  nightly-bkc   X.Y.ZaBASE+bkc.YYYYMMDD  X.Y.Z~BASE.bkc.YYYYMMDD  X.Y.Z~BASE.bkc.YYYYMMDD
  ci, dev,      X.Y.Z.dev0+SHA           X.Y.Z~devYYYYMMDD        X.Y.Z~YYYYMMDDgSHA8
  dev-bkc

BASE is version.json's release-metadata.base-date. The sha is --override-git-sha, else
GITHUB_SHA, else `git rev-parse HEAD`. The date is --date, else SOURCE_DATE_EPOCH, else today
(UTC). With --version-suffix (the CI run id `quarry package` takes), the deb Version gets
`-SUFFIX` and the rpm Release is SUFFIX (1 without).

pip orders release > prerelease > nightly > nightly-bkc > dev. The deb and rpm strings are
TheRock's as they are, and do not: dpkg sorts every ~devYYYYMMDD above every ~YYYYMMDD (a
letter after `~` beats a digit); rpm sorts every ~rcN below every ~YYYYMMDD (a numeric segment
beats an alphabetic one) and ~YYYYMMDDgSHA8 above ~YYYYMMDD of the same date.

Examples:
  quarry version --release-type nightly
  quarry version --release-type prerelease --prerelease-version 2 --json
  quarry version --release-type dev --github-output";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ReleaseTypeArg {
    /// CI builds: the dev versions.
    Ci,
    /// Development builds: `.dev0+SHA`, `~devYYYYMMDD`, `~YYYYMMDDgSHA8`.
    Dev,
    /// Dev builds of a release branch (needs release-metadata.base-date).
    DevBkc,
    /// Nightly builds: `aYYYYMMDD`, `~YYYYMMDD`.
    Nightly,
    /// Nightlies of a release branch (needs release-metadata.base-date).
    NightlyBkc,
    /// Release candidates (needs --prerelease-version): `rcN`, `~preN`, `~rcN`.
    Prerelease,
    /// Final releases: the base version as it is.
    Release,
}

impl ReleaseTypeArg {
    /// TheRock's release type: the flag value is its spelling.
    pub(crate) fn release_type(self) -> anyhow::Result<ReleaseType> {
        let name = self.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default();
        Ok(name.parse()?)
    }
}

#[derive(Debug, clap::Args)]
#[command(about = ABOUT, long_about = LONG_ABOUT)]
#[command(group = clap::ArgGroup::new("suffix").required(true).args(["release_type", "custom_version_suffix"]))]
pub(crate) struct VersionArgs {
    /// The kind of build the versions are for.
    #[arg(long, value_enum)]
    release_type: Option<ReleaseTypeArg>,
    /// A suffix to append to the base version as given, instead of a release type's.
    #[arg(long)]
    custom_version_suffix: Option<String>,
    /// The release candidate number (required with, and only allowed with, `prerelease`).
    #[arg(long)]
    prerelease_version: Option<String>,
    /// Use this base version instead of version.json's `rocm-version`.
    #[arg(long)]
    override_base_version: Option<String>,
    /// The commit to name in dev versions, instead of GITHUB_SHA or `git rev-parse HEAD`.
    #[arg(long, alias = "git-sha", env = "GITHUB_SHA")]
    override_git_sha: Option<String>,
    /// The version file (default: version.json at the root of the git work tree of --repo).
    #[arg(long)]
    version_file: Option<PathBuf>,
    /// The git checkout to read (default: the current directory).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// The build date, YYYYMMDD (default: SOURCE_DATE_EPOCH's date, else today, in UTC).
    #[arg(long)]
    date: Option<String>,
    /// The CI run id `quarry package --version-suffix` takes: deb `Version: V-SUFFIX`, rpm
    /// `Release: SUFFIX`.
    #[arg(long)]
    version_suffix: Option<String>,
    #[command(flatten)]
    json: JsonArg,
    /// Also append TheRock's outputs (rocm_package_version, rocm_deb_package_version,
    /// rocm_rpm_package_version) to the file $GITHUB_OUTPUT names.
    #[arg(long)]
    github_output: bool,
}

pub(crate) async fn run(args: VersionArgs) -> anyhow::Result<()> {
    let suffix = match (args.release_type, args.custom_version_suffix) {
        (_, Some(custom)) => Suffix::Custom(custom),
        (Some(t), None) => Suffix::Release(t.release_type()?),
        (None, None) => return Err(UsageError::new("give --release-type or --custom-version-suffix").into()),
    };
    let request = VersionRequest {
        suffix,
        repo: args.repo,
        version_file: args.version_file,
        override_base_version: args.override_base_version,
        git_sha: args.override_git_sha,
        date: args.date,
        source_date_epoch: std::env::var("SOURCE_DATE_EPOCH").ok(),
        prerelease_version: args.prerelease_version,
    };
    let resolved = package_versions(&request).map_err(|e| UsageError::new(e.to_string()))?;
    if args.github_output {
        write_github_output(&resolved.versions)?;
    }
    let report = VersionReport::new(&resolved.inputs, &resolved.versions, args.version_suffix.as_deref());
    super::print(args.json.json, &report, &report)
}

fn write_github_output(versions: &PackageVersions) -> anyhow::Result<()> {
    if std::env::var_os("GITHUB_OUTPUT").is_none_or(|p| p.is_empty()) {
        return Err(UsageError::new("--github-output: GITHUB_OUTPUT is not set").into());
    }
    let mut text = String::new();
    for (name, value) in versions.outputs() {
        if value.contains(['\n', '\r']) {
            return Err(UsageError::new(format!("{name} {value:?} has a line break")).into());
        }
        text.push_str(&format!("{name}={value}\n"));
    }
    super::append_to_github_file("GITHUB_OUTPUT", &text)?;
    Ok(())
}
