//! `quarry version`: TheRock's `build_tools/compute_rocm_package_version.py`. Reads
//! `version.json` and git, computes with `quarry_packaging::therock::version`, prints a table,
//! JSON, or appends TheRock's outputs to `$GITHUB_OUTPUT`.

use std::io::Write as _;
use std::path::PathBuf;

use quarry_packaging::therock::Versions;
use quarry_packaging::therock::version::{
    PackageVersions, ReleaseType, Suffix, VersionFile, VersionInputs, Yyyymmdd, compute,
};

use super::UsageError;

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
enum ReleaseTypeArg {
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

impl From<ReleaseTypeArg> for ReleaseType {
    fn from(value: ReleaseTypeArg) -> Self {
        match value {
            ReleaseTypeArg::Ci => ReleaseType::Ci,
            ReleaseTypeArg::Dev => ReleaseType::Dev,
            ReleaseTypeArg::DevBkc => ReleaseType::DevBkc,
            ReleaseTypeArg::Nightly => ReleaseType::Nightly,
            ReleaseTypeArg::NightlyBkc => ReleaseType::NightlyBkc,
            ReleaseTypeArg::Prerelease => ReleaseType::Prerelease,
            ReleaseTypeArg::Release => ReleaseType::Release,
        }
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
    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Also append TheRock's outputs (rocm_package_version, rocm_deb_package_version,
    /// rocm_rpm_package_version) to the file $GITHUB_OUTPUT names.
    #[arg(long)]
    github_output: bool,
}

pub(crate) async fn run(args: VersionArgs) -> anyhow::Result<()> {
    let suffix = match (args.release_type, &args.custom_version_suffix) {
        (_, Some(custom)) => Suffix::Custom(custom.clone()),
        (Some(t), None) => Suffix::Release(t.into()),
        (None, None) => return Err(UsageError::new("give --release-type or --custom-version-suffix").into()),
    };
    let version_path = match &args.version_file {
        Some(path) => path.clone(),
        None => PathBuf::from(
            super::git(&args.repo, &["rev-parse", "--show-toplevel"])
                .map_err(|e| UsageError::new(format!("{e}: give --version-file")))?,
        )
        .join("version.json"),
    };
    let text = std::fs::read_to_string(&version_path)
        .map_err(|e| UsageError::new(format!("cannot read {}: {e}", version_path.display())))?;
    let file = VersionFile::parse(&text).map_err(|e| UsageError::new(format!("{}: {e}", version_path.display())))?;
    let date = build_date(args.date.as_deref())?;
    let needs_sha = matches!(suffix, Suffix::Release(ReleaseType::Ci | ReleaseType::Dev | ReleaseType::DevBkc));
    let git_sha = match args.override_git_sha.clone().filter(|s| !s.is_empty()) {
        Some(sha) => Some(sha),
        None if needs_sha => Some(
            super::git(&args.repo, &["rev-parse", "--verify", "HEAD"])
                .map_err(|e| UsageError::new(format!("{e}: give --override-git-sha")))?,
        ),
        None => None,
    };
    let inputs = VersionInputs {
        suffix,
        override_base_version: args.override_base_version.clone(),
        date,
        git_sha,
        prerelease_version: args.prerelease_version.clone(),
    };
    let versions = compute(&file, &inputs).map_err(|e| UsageError::new(e.to_string()))?;
    let suffix = args.version_suffix.as_deref();
    // What `quarry package` writes into the control file and the spec (when it can package
    // these versions at all: it wants `{major}.{minor}` first).
    let deb_field = Versions::new(&versions.rocm_deb_package_version, suffix).ok().map(|v| v.deb);
    let rpm_fields = Versions::new(&versions.rocm_rpm_package_version, suffix).ok();

    if args.github_output {
        write_github_output(&versions)?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let value = serde_json::json!({
            "release_type": match &inputs.suffix { Suffix::Release(t) => Some(t.as_str()), Suffix::Custom(_) => None },
            "custom_version_suffix": match &inputs.suffix { Suffix::Custom(s) => Some(s.as_str()), Suffix::Release(_) => None },
            "base_version": versions.base_version,
            "date": inputs.date.as_str(),
            "git_sha": inputs.git_sha,
            "rocm_package_version": versions.rocm_package_version,
            "rocm_deb_package_version": versions.rocm_deb_package_version,
            "rocm_rpm_package_version": versions.rocm_rpm_package_version,
            "deb": { "version": deb_field },
            "rpm": {
                "version": rpm_fields.as_ref().map(|v| v.rpm_version.as_str()),
                "release": rpm_fields.as_ref().map(|v| v.rpm_release.as_str()),
            },
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        let rows = [
            ("pip", versions.rocm_package_version.clone(), String::new()),
            (
                "deb",
                versions.rocm_deb_package_version.clone(),
                deb_field.map(|v| format!("Version: {v}")).unwrap_or_default(),
            ),
            (
                "rpm",
                versions.rocm_rpm_package_version.clone(),
                rpm_fields
                    .map(|v| format!("Version: {}  Release: {}", v.rpm_version, v.rpm_release))
                    .unwrap_or_default(),
            ),
        ];
        let width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
        for (kind, version, fields) in rows {
            writeln!(out, "{}", format!("{kind}  {version:width$}  {fields}").trim_end())?;
        }
    }
    Ok(())
}

/// `--date`, else the UTC date of SOURCE_DATE_EPOCH, else today in UTC.
fn build_date(flag: Option<&str>) -> anyhow::Result<Yyyymmdd> {
    if let Some(date) = flag {
        return date.parse().map_err(|e| UsageError::new(format!("--date: {e}")).into());
    }
    let now = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(epoch) if !epoch.trim().is_empty() => epoch
            .trim()
            .parse::<i64>()
            .ok()
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
            .ok_or_else(|| UsageError::new(format!("SOURCE_DATE_EPOCH={epoch:?} is not a time in seconds")))?,
        _ => jiff::Timestamp::now(),
    };
    let date = now.to_zoned(jiff::tz::TimeZone::UTC).date();
    Yyyymmdd::from_ymd(date.year().into(), date.month() as u32, date.day() as u32)
        .map_err(|e| UsageError::new(e.to_string()).into())
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
