//! TheRock's package versions (spec §10): `build_tools/compute_rocm_package_version.py` as pure
//! functions. The base version comes from `version.json` (`rocm-version`, or an override), the
//! suffix from the release type, the build date and the git sha; callers read the file, the
//! clock and git.
//!
//! | type | wheel | deb | rpm |
//! |---|---|---|---|
//! | release | `X.Y.Z` | `X.Y.Z` | `X.Y.Z` |
//! | prerelease N | `X.Y.ZrcN` | `X.Y.Z~preN` | `X.Y.Z~rcN` |
//! | nightly | `X.Y.ZaYYYYMMDD` | `X.Y.Z~YYYYMMDD` | `X.Y.Z~YYYYMMDD` |
//! | nightly-bkc | `X.Y.ZaBASE+bkc.YYYYMMDD` | `X.Y.Z~BASE.bkc.YYYYMMDD` | same as deb |
//! | ci, dev, dev-bkc | `X.Y.Z.dev0+{sha}` | `X.Y.Z~devYYYYMMDD` | `X.Y.Z~YYYYMMDDg{sha[:8]}` |
//!
//! A custom suffix replaces the automatic one and is appended as given, to all three.
//!
//! The strings are TheRock's, byte for byte, including two orderings that do not follow the
//! release types (checked against dpkg and rpm in `tests/package_versions.rs`): dpkg sorts
//! every `~devYYYYMMDD` above every `~YYYYMMDD` (a letter after `~` beats a digit), rpm sorts
//! every `~rcN` below every `~YYYYMMDD` (a numeric segment beats an alphabetic one) and
//! `~YYYYMMDDg{sha}` above `~YYYYMMDD` of the same date (more segments win). pip's order is
//! release > prerelease > nightly > nightly-bkc > dev-bkc == dev.

use std::fmt;

/// How far a build is from a release; picks the version suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReleaseType {
    /// CI builds: the dev shape.
    Ci,
    Dev,
    /// A dev build on a release branch (`release-metadata.base-date` set): the dev shape.
    DevBkc,
    Nightly,
    /// A nightly of a release branch: the base date, then the build date.
    NightlyBkc,
    /// A release candidate: needs a prerelease number.
    Prerelease,
    Release,
}

impl ReleaseType {
    /// Every release type, in TheRock's `--release-type` choices order.
    pub const ALL: [ReleaseType; 7] = [
        ReleaseType::Ci,
        ReleaseType::Dev,
        ReleaseType::DevBkc,
        ReleaseType::Nightly,
        ReleaseType::NightlyBkc,
        ReleaseType::Prerelease,
        ReleaseType::Release,
    ];

    /// TheRock's spelling (`dev-bkc`, `nightly-bkc`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseType::Ci => "ci",
            ReleaseType::Dev => "dev",
            ReleaseType::DevBkc => "dev-bkc",
            ReleaseType::Nightly => "nightly",
            ReleaseType::NightlyBkc => "nightly-bkc",
            ReleaseType::Prerelease => "prerelease",
            ReleaseType::Release => "release",
        }
    }

    /// The dev shapes (`ci`, `dev`, `dev-bkc`): their versions name the git sha.
    pub fn is_dev(self) -> bool {
        matches!(self, ReleaseType::Ci | ReleaseType::Dev | ReleaseType::DevBkc)
    }

    fn is_bkc(self) -> bool {
        matches!(self, ReleaseType::DevBkc | ReleaseType::NightlyBkc)
    }
}

impl fmt::Display for ReleaseType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ReleaseType {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReleaseType::ALL.into_iter().find(|t| t.as_str() == s).ok_or_else(|| VersionError::ReleaseType(s.to_owned()))
    }
}

/// What can be wrong with the inputs; each message quotes the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("version.json is not JSON: {0}")]
    Json(String),
    #[error("version.json must contain an object")]
    NotObject,
    #[error("release-metadata in version.json must be an object")]
    MetadataNotObject,
    #[error("release-metadata.base-date must be a valid date in YYYYMMDD format, not {0}")]
    BaseDate(String),
    #[error("rocm-version must be set in version.json")]
    MissingRocmVersion,
    #[error("release-metadata.base-date must be set in version.json for release type '{0}'")]
    BkcNeedsBaseDate(ReleaseType),
    #[error("{0:?} is not a date in YYYYMMDD format")]
    Date(String),
    #[error("unknown release type {0:?} (ci, dev, dev-bkc, nightly, nightly-bkc, prerelease, release)")]
    ReleaseType(String),
    #[error("a prerelease version is required when the release type is 'prerelease'")]
    PrereleaseNeedsNumber,
    #[error("the release type must be 'prerelease' when a prerelease version ({0:?}) is given")]
    PrereleaseOnly(String),
    #[error("release type '{0}' needs a git sha")]
    NeedsGitSha(ReleaseType),
    #[error("the custom version suffix is empty")]
    EmptySuffix,
}

/// A date as `YYYYMMDD`, checked as `datetime.strptime(…, "%Y%m%d")` checks it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Yyyymmdd(String);

impl Yyyymmdd {
    /// A calendar date (year 1 to 9999).
    pub fn from_ymd(year: i32, month: u32, day: u32) -> Result<Self, VersionError> {
        let text = format!("{year:04}{month:02}{day:02}");
        if !(1..=9999).contains(&year) || month == 0 || month > 12 || day == 0 || day > days_in_month(year, month) {
            return Err(VersionError::Date(text));
        }
        Ok(Self(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Yyyymmdd {
    type Err = VersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || VersionError::Date(s.to_owned());
        if s.len() != 8 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let (y, m, d) = (
            s[..4].parse().map_err(|_| bad())?,
            s[4..6].parse().map_err(|_| bad())?,
            s[6..].parse().map_err(|_| bad())?,
        );
        Self::from_ymd(y, m, d).map_err(|_| bad())
    }
}

impl fmt::Display for Yyyymmdd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The parts of `version.json` the versions use, checked as `load_version_file` checks them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionFile {
    /// `rocm-version` when it is a non-empty string (its absence is an error only when no
    /// override base version is given).
    pub rocm_version: Option<String>,
    /// `release-metadata.base-date`, when set and not empty.
    pub base_date: Option<Yyyymmdd>,
}

impl VersionFile {
    /// Parse the text of `version.json`. A file without `release-metadata` (before TheRock
    /// added it) or with an empty `base-date` (the default branch) is fine.
    pub fn parse(text: &str) -> Result<Self, VersionError> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| VersionError::Json(e.to_string()))?;
        let object = value.as_object().ok_or(VersionError::NotObject)?;
        let base_date = match object.get("release-metadata") {
            None => None,
            Some(serde_json::Value::Object(meta)) => match meta.get("base-date") {
                None => None,
                Some(serde_json::Value::String(s)) if s.is_empty() => None,
                Some(serde_json::Value::String(s)) => {
                    Some(s.parse::<Yyyymmdd>().map_err(|_| VersionError::BaseDate(format!("{s:?}")))?)
                }
                Some(other) => return Err(VersionError::BaseDate(other.to_string())),
            },
            Some(_) => return Err(VersionError::MetadataNotObject),
        };
        let rocm_version = match object.get("rocm-version") {
            Some(serde_json::Value::String(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        };
        Ok(Self { rocm_version, base_date })
    }
}

/// Where the suffix comes from: a release type, or a custom suffix taken as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Suffix {
    Release(ReleaseType),
    Custom(String),
}

/// Everything `compute_version` reads, resolved by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInputs {
    pub suffix: Suffix,
    /// `--override-base-version`; else the file's `rocm-version`.
    pub override_base_version: Option<String>,
    /// The build date (TheRock: today).
    pub date: Yyyymmdd,
    /// The full git sha (override, `GITHUB_SHA` or `git rev-parse HEAD`); used by the dev shapes.
    pub git_sha: Option<String>,
    /// `--prerelease-version`: required for, and only allowed with, `prerelease`.
    pub prerelease_version: Option<String>,
}

/// The three versions of one build, named as TheRock's `$GITHUB_OUTPUT` names them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PackageVersions {
    /// The base version the suffix was appended to.
    pub base_version: String,
    /// Wheels: `rocm_package_version` (PEP 440).
    pub rocm_package_version: String,
    /// `.deb`s: `rocm_deb_package_version` (before any `-{revision}`).
    pub rocm_deb_package_version: String,
    /// `.rpm`s: `rocm_rpm_package_version` (the `Version:` field).
    pub rocm_rpm_package_version: String,
}

impl PackageVersions {
    /// `(output name, value)` in TheRock's order: wheel, deb, rpm.
    pub fn outputs(&self) -> [(&'static str, &str); 3] {
        [
            ("rocm_package_version", &self.rocm_package_version),
            ("rocm_deb_package_version", &self.rocm_deb_package_version),
            ("rocm_rpm_package_version", &self.rocm_rpm_package_version),
        ]
    }
}

/// The wheel, deb and rpm versions, as `compute_rocm_package_version.py`'s `main` computes
/// them (its argument checks included).
pub fn compute(file: &VersionFile, inputs: &VersionInputs) -> Result<PackageVersions, VersionError> {
    let release_type = match &inputs.suffix {
        Suffix::Release(t) => Some(*t),
        Suffix::Custom(s) if s.is_empty() => return Err(VersionError::EmptySuffix),
        Suffix::Custom(_) => None,
    };
    let prerelease = match (release_type, inputs.prerelease_version.as_deref().filter(|p| !p.is_empty())) {
        (Some(ReleaseType::Prerelease), Some(n)) => n,
        (Some(ReleaseType::Prerelease), None) => return Err(VersionError::PrereleaseNeedsNumber),
        (_, Some(n)) => return Err(VersionError::PrereleaseOnly(n.to_owned())),
        (_, None) => "",
    };
    let base = match inputs.override_base_version.as_deref().filter(|v| !v.is_empty()) {
        Some(v) => v.to_owned(),
        None => file.rocm_version.clone().ok_or(VersionError::MissingRocmVersion)?,
    };
    let base_date = match release_type {
        Some(t) if t.is_bkc() => Some(file.base_date.as_ref().ok_or(VersionError::BkcNeedsBaseDate(t))?),
        _ => None,
    };
    let sha = match release_type {
        Some(t) if t.is_dev() => {
            inputs.git_sha.as_deref().filter(|s| !s.is_empty()).ok_or(VersionError::NeedsGitSha(t))?
        }
        _ => "",
    };
    let date = inputs.date.as_str();
    let base_date = base_date.map(Yyyymmdd::as_str).unwrap_or_default();
    let (wheel, deb, rpm) = match (&inputs.suffix, release_type) {
        (Suffix::Custom(s), _) => (s.clone(), s.clone(), s.clone()),
        (_, Some(ReleaseType::Release)) => (String::new(), String::new(), String::new()),
        (_, Some(ReleaseType::Ci | ReleaseType::Dev | ReleaseType::DevBkc)) => {
            let short: String = sha.chars().take(8).collect();
            (format!(".dev0+{sha}"), format!("~dev{date}"), format!("~{date}g{short}"))
        }
        (_, Some(ReleaseType::Nightly)) => (format!("a{date}"), format!("~{date}"), format!("~{date}")),
        (_, Some(ReleaseType::NightlyBkc)) => {
            let native = format!("~{base_date}.bkc.{date}");
            (format!("a{base_date}+bkc.{date}"), native.clone(), native)
        }
        (_, Some(ReleaseType::Prerelease)) => {
            (format!("rc{prerelease}"), format!("~pre{prerelease}"), format!("~rc{prerelease}"))
        }
        (Suffix::Release(_), None) => unreachable!("a release suffix has a release type"),
    };
    Ok(PackageVersions {
        rocm_package_version: format!("{base}{wheel}"),
        rocm_deb_package_version: format!("{base}{deb}"),
        rocm_rpm_package_version: format!("{base}{rpm}"),
        base_version: base,
    })
}

/// What `quarry version` reports for one build: the inputs, the three versions, and the
/// control-file fields `quarry package` writes for them with a `--version-suffix` (`None`
/// where it cannot package them: it wants `{major}.{minor}` first). Fields in the order the
/// JSON form has always had (sorted).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VersionReport {
    pub base_version: String,
    pub custom_version_suffix: Option<String>,
    pub date: String,
    pub deb: DebFields,
    pub git_sha: Option<String>,
    pub release_type: Option<&'static str>,
    pub rocm_deb_package_version: String,
    pub rocm_package_version: String,
    pub rocm_rpm_package_version: String,
    pub rpm: RpmFields,
}

/// The deb control field for a version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DebFields {
    pub version: Option<String>,
}

/// The rpm spec fields for a version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RpmFields {
    pub release: Option<String>,
    pub version: Option<String>,
}

impl VersionReport {
    /// The report of `versions` computed from `inputs`, with the fields for `version_suffix`.
    pub fn new(inputs: &VersionInputs, versions: &PackageVersions, version_suffix: Option<&str>) -> Self {
        let deb = super::Versions::new(&versions.rocm_deb_package_version, version_suffix).ok().map(|v| v.deb);
        let rpm = super::Versions::new(&versions.rocm_rpm_package_version, version_suffix).ok();
        let (release_type, custom_version_suffix) = match &inputs.suffix {
            Suffix::Release(t) => (Some(t.as_str()), None),
            Suffix::Custom(s) => (None, Some(s.clone())),
        };
        Self {
            base_version: versions.base_version.clone(),
            custom_version_suffix,
            date: inputs.date.as_str().to_owned(),
            deb: DebFields { version: deb },
            git_sha: inputs.git_sha.clone(),
            release_type,
            rocm_deb_package_version: versions.rocm_deb_package_version.clone(),
            rocm_package_version: versions.rocm_package_version.clone(),
            rocm_rpm_package_version: versions.rocm_rpm_package_version.clone(),
            rpm: RpmFields {
                release: rpm.as_ref().map(|v| v.rpm_release.clone()),
                version: rpm.map(|v| v.rpm_version),
            },
        }
    }
}

/// The table: one line per format, the version, then the control-file fields.
impl fmt::Display for VersionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let deb = self.deb.version.as_ref().map(|v| format!("Version: {v}")).unwrap_or_default();
        let rpm = match (&self.rpm.version, &self.rpm.release) {
            (Some(v), Some(r)) => format!("Version: {v}  Release: {r}"),
            _ => String::new(),
        };
        let rows = [
            ("pip", &self.rocm_package_version, String::new()),
            ("deb", &self.rocm_deb_package_version, deb),
            ("rpm", &self.rocm_rpm_package_version, rpm),
        ];
        let width = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
        for (format, version, fields) in rows {
            writeln!(f, "{}", format!("{format}  {version:width$}  {fields}").trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "abcdef1234567890abcdef1234567890abcdef12";
    const DATE: &str = "20251203";
    /// TheRock's `TEST_BKC_VERSION_DATA`.
    const BKC_FILE: &str = r#"{"release-metadata": {"base-date": "20260811"}}"#;
    /// TheRock's `version.json` at the fetched commit.
    const THEROCK_FILE: &str =
        "{\n  \"rocm-version\": \"10.1.0\",\n  \"release-metadata\": {\n    \"base-date\": \"\"\n  }\n}\n";

    fn inputs(suffix: Suffix, base: Option<&str>, sha: Option<&str>, pre: Option<&str>) -> VersionInputs {
        VersionInputs {
            suffix,
            override_base_version: base.map(str::to_owned),
            date: DATE.parse().unwrap(),
            git_sha: sha.map(str::to_owned),
            prerelease_version: pre.map(str::to_owned),
        }
    }

    fn rt(t: &str) -> Suffix {
        Suffix::Release(t.parse().unwrap())
    }

    /// One case of `compute_rocm_package_version_test.py`: (test, version.json, suffix,
    /// override base, override sha, prerelease, package, expected). TheRock checks the
    /// date-dependent ones with the regex in the comment; here the date is fixed at `DATE`
    /// and the sha (GITHUB_SHA / git HEAD there) at `SHA`, so the expectation is exact.
    #[allow(clippy::type_complexity)]
    const CASES: &[(&str, &str, &str, Option<&str>, Option<&str>, Option<&str>, &str, &str)] = &[
        // PythonPackageVersionTest; r"^[0-9]+[0-9\.]*\.dev0\+[0-9a-z]+$"
        (
            "wheel ci",
            THEROCK_FILE,
            "ci",
            None,
            None,
            None,
            "wheel",
            "10.1.0.dev0+abcdef1234567890abcdef1234567890abcdef12",
        ),
        (
            "wheel dev",
            THEROCK_FILE,
            "dev",
            None,
            None,
            None,
            "wheel",
            "10.1.0.dev0+abcdef1234567890abcdef1234567890abcdef12",
        ),
        (
            "wheel dev sha override",
            THEROCK_FILE,
            "dev",
            Some("7.9.0"),
            Some(SHA),
            None,
            "wheel",
            "7.9.0.dev0+abcdef1234567890abcdef1234567890abcdef12",
        ),
        (
            "wheel dev-bkc",
            BKC_FILE,
            "dev-bkc",
            Some("7.9.0"),
            Some(SHA),
            None,
            "wheel",
            "7.9.0.dev0+abcdef1234567890abcdef1234567890abcdef12",
        ),
        // r"^[0-9]+[0-9\.]*a[0-9]{8}$"
        ("wheel nightly", THEROCK_FILE, "nightly", None, None, None, "wheel", "10.1.0a20251203"),
        // r"^7\.9\.0a20260811\+bkc\.[0-9]{8}$"
        (
            "wheel nightly-bkc",
            BKC_FILE,
            "nightly-bkc",
            Some("7.9.0"),
            None,
            None,
            "wheel",
            "7.9.0a20260811+bkc.20251203",
        ),
        // r"^[0-9]+[0-9\.]*rc.*$"
        ("wheel prerelease", THEROCK_FILE, "prerelease", None, None, Some("5"), "wheel", "10.1.0rc5"),
        // r"^[0-9]+[0-9\.]*abc$"
        ("wheel custom suffix", THEROCK_FILE, "=abc", None, None, None, "wheel", "10.1.0abc"),
        ("wheel override base", THEROCK_FILE, "=abc", Some("1000"), None, None, "wheel", "1000abc"),
        // r"^7\.9\.0a[0-9]{8}$"
        ("wheel nightly override base", THEROCK_FILE, "nightly", Some("7.9.0"), None, None, "wheel", "7.9.0a20251203"),
        // DebPackageVersionTest; r"^[0-9]+[0-9\.]*~dev[0-9]{8}$"
        ("deb ci", THEROCK_FILE, "ci", None, None, None, "deb", "10.1.0~dev20251203"),
        ("deb dev", THEROCK_FILE, "dev", None, None, None, "deb", "10.1.0~dev20251203"),
        // r"^8\.1\.0~dev[0-9]{8}$"
        ("deb dev-bkc", BKC_FILE, "dev-bkc", Some("8.1.0"), None, None, "deb", "8.1.0~dev20251203"),
        // r"^[0-9]+[0-9\.]*~[0-9]{8}$"
        ("deb nightly", THEROCK_FILE, "nightly", None, None, None, "deb", "10.1.0~20251203"),
        // r"^8\.1\.0~20260811\.bkc\.[0-9]{8}$"
        ("deb nightly-bkc", BKC_FILE, "nightly-bkc", Some("8.1.0"), None, None, "deb", "8.1.0~20260811.bkc.20251203"),
        // r"^[0-9]+[0-9\.]*~pre.*$"
        ("deb prerelease", THEROCK_FILE, "prerelease", None, None, Some("2"), "deb", "10.1.0~pre2"),
        ("deb release", THEROCK_FILE, "release", Some("8.1.0"), None, None, "deb", "8.1.0"),
        ("deb custom suffix", THEROCK_FILE, "=~custom1", Some("8.0.0"), None, None, "deb", "8.0.0~custom1"),
        // RpmPackageVersionTest; r"^[0-9]+[0-9\.]*~[0-9]{8}g[0-9a-z]{8}$"
        ("rpm ci", THEROCK_FILE, "ci", None, None, None, "rpm", "10.1.0~20251203gabcdef12"),
        ("rpm dev", THEROCK_FILE, "dev", None, None, None, "rpm", "10.1.0~20251203gabcdef12"),
        // r"^8\.1\.0~[0-9]{8}gabcdef12$"
        (
            "rpm dev sha override",
            THEROCK_FILE,
            "dev",
            Some("8.1.0"),
            Some("abcdef1234567890"),
            None,
            "rpm",
            "8.1.0~20251203gabcdef12",
        ),
        (
            "rpm dev-bkc",
            BKC_FILE,
            "dev-bkc",
            Some("8.1.0"),
            Some("abcdef1234567890"),
            None,
            "rpm",
            "8.1.0~20251203gabcdef12",
        ),
        // r"^[0-9]+[0-9\.]*~[0-9]{8}$"
        ("rpm nightly", THEROCK_FILE, "nightly", None, None, None, "rpm", "10.1.0~20251203"),
        // r"^8\.1\.0~20260811\.bkc\.[0-9]{8}$"
        ("rpm nightly-bkc", BKC_FILE, "nightly-bkc", Some("8.1.0"), None, None, "rpm", "8.1.0~20260811.bkc.20251203"),
        // r"^[0-9]+[0-9\.]*~rc.*$"
        ("rpm prerelease", THEROCK_FILE, "prerelease", None, None, Some("2"), "rpm", "10.1.0~rc2"),
        ("rpm release", THEROCK_FILE, "release", Some("8.1.0"), None, None, "rpm", "8.1.0"),
        ("rpm custom suffix", THEROCK_FILE, "=~custom1", Some("8.0.0"), None, None, "rpm", "8.0.0~custom1"),
    ];

    #[test]
    fn therock_cases() {
        for &(name, file, suffix, base, sha, pre, package, expected) in CASES {
            let suffix = match suffix.strip_prefix('=') {
                Some(custom) => Suffix::Custom(custom.to_owned()),
                None => rt(suffix),
            };
            // Without an override the sha is the environment's (GITHUB_SHA or git HEAD).
            let sha = sha.unwrap_or(SHA);
            let file = VersionFile::parse(file).unwrap();
            let v = compute(&file, &inputs(suffix, base, Some(sha), pre)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let got = match package {
                "wheel" => &v.rocm_package_version,
                "deb" => &v.rocm_deb_package_version,
                _ => &v.rocm_rpm_package_version,
            };
            assert_eq!(got, expected, "{name}");
        }
    }

    /// MainFunctionTest: all three outputs of one invocation.
    #[test]
    fn main_outputs() {
        let file = VersionFile::parse(THEROCK_FILE).unwrap();
        let dev = compute(&file, &inputs(rt("dev"), Some("7.99.0"), Some(SHA), None)).unwrap();
        assert_eq!(
            dev.outputs(),
            [
                ("rocm_package_version", "7.99.0.dev0+abcdef1234567890abcdef1234567890abcdef12"),
                ("rocm_deb_package_version", "7.99.0~dev20251203"),
                ("rocm_rpm_package_version", "7.99.0~20251203gabcdef12"),
            ]
        );
        let pre = compute(&file, &inputs(rt("prerelease"), Some("7.99.0"), None, Some("2"))).unwrap();
        assert_eq!(
            pre.outputs(),
            [
                ("rocm_package_version", "7.99.0rc2"),
                ("rocm_deb_package_version", "7.99.0~pre2"),
                ("rocm_rpm_package_version", "7.99.0~rc2"),
            ]
        );
        let custom = compute(&file, &inputs(Suffix::Custom(".custom1".into()), Some("7.99.0"), None, None)).unwrap();
        assert_eq!(custom.outputs().map(|(_, v)| v), ["7.99.0.custom1", "7.99.0.custom1", "7.99.0.custom1"]);
        // The module docstring's samples.
        let nightly = compute(&file, &inputs(rt("nightly"), Some("7.99.0"), None, None)).unwrap();
        assert_eq!(nightly.rocm_package_version, "7.99.0a20251203");
        let bkc =
            VersionFile::parse(r#"{"rocm-version": "10.1.0", "release-metadata": {"base-date": "20260811"}}"#).unwrap();
        let mut nightly_bkc = inputs(rt("nightly-bkc"), None, None, None);
        nightly_bkc.date = "20260814".parse().unwrap();
        assert_eq!(
            compute(&bkc, &nightly_bkc).unwrap().outputs().map(|(_, v)| v),
            ["10.1.0a20260811+bkc.20260814", "10.1.0~20260811.bkc.20260814", "10.1.0~20260811.bkc.20260814"]
        );
    }

    /// VersionFileTest: files without metadata, with empty or populated metadata, invalid
    /// JSON and invalid base dates.
    #[test]
    fn version_files() {
        assert_eq!(
            VersionFile::parse(THEROCK_FILE).unwrap(),
            VersionFile { rocm_version: Some("10.1.0".into()), base_date: None }
        );
        assert_eq!(
            VersionFile::parse("{\n  \"rocm-version\": \"7.9.0\"\n}\n").unwrap(),
            VersionFile { rocm_version: Some("7.9.0".into()), base_date: None }
        );
        let populated = r#"{"rocm-version": "7.9.0", "release-metadata": {"base-date": "20260811"}}"#;
        assert_eq!(VersionFile::parse(populated).unwrap().base_date, Some("20260811".parse().unwrap()));
        assert!(matches!(VersionFile::parse(r#"{ "rocm-version": "7.9.0""#), Err(VersionError::Json(_))));
        for bad in ["2026081", "20261301", "20250229", "00000101", "2026o811"] {
            let text = format!(r#"{{"rocm-version": "7.9.0", "release-metadata": {{"base-date": "{bad}"}}}}"#);
            let err = VersionFile::parse(&text).unwrap_err();
            assert!(err.to_string().contains("valid date in YYYYMMDD format"), "{bad}: {err}");
        }
        assert_eq!(VersionFile::parse("[]").unwrap_err(), VersionError::NotObject);
        assert_eq!(VersionFile::parse(r#"{"release-metadata": []}"#).unwrap_err(), VersionError::MetadataNotObject);
        assert!(matches!(
            VersionFile::parse(r#"{"release-metadata": {"base-date": 20260811}}"#),
            Err(VersionError::BaseDate(_))
        ));
        assert_eq!("20240229".parse::<Yyyymmdd>().unwrap().as_str(), "20240229");
        assert!("21000229".parse::<Yyyymmdd>().is_err());
    }

    #[test]
    fn bad_inputs() {
        let empty = VersionFile::default();
        for t in ["dev-bkc", "nightly-bkc"] {
            let err = compute(&empty, &inputs(rt(t), Some("7.9.0"), Some(SHA), None)).unwrap_err();
            assert!(err.to_string().contains("release-metadata.base-date"), "{t}: {err}");
        }
        assert_eq!(
            compute(&empty, &inputs(rt("nightly"), None, None, None)).unwrap_err(),
            VersionError::MissingRocmVersion
        );
        let file = VersionFile::parse(THEROCK_FILE).unwrap();
        assert_eq!(
            compute(&file, &inputs(rt("prerelease"), None, None, None)).unwrap_err(),
            VersionError::PrereleaseNeedsNumber
        );
        assert_eq!(
            compute(&file, &inputs(rt("nightly"), None, None, Some("2"))).unwrap_err(),
            VersionError::PrereleaseOnly("2".into())
        );
        assert_eq!(
            compute(&file, &inputs(rt("dev"), None, None, None)).unwrap_err(),
            VersionError::NeedsGitSha(ReleaseType::Dev)
        );
        // The sha is not needed where it is not used.
        assert!(compute(&file, &inputs(rt("release"), None, None, None)).is_ok());
        assert_eq!(
            compute(&file, &inputs(Suffix::Custom(String::new()), None, None, None)).unwrap_err(),
            VersionError::EmptySuffix
        );
        assert!("weekly".parse::<ReleaseType>().is_err());
        for t in ReleaseType::ALL {
            assert_eq!(t.as_str().parse::<ReleaseType>().unwrap(), t);
        }
    }

    /// `test_versions_are_valid_and_canonical` and `test_versions_sort_by_release_type`, with
    /// pep440_rs standing in for `packaging.version` (the e2e suite asks `packaging` itself).
    #[test]
    fn wheel_versions_are_canonical_and_ordered() {
        let file = VersionFile::parse(BKC_FILE).unwrap();
        let wheel = |t: &str, pre: Option<&str>| {
            let mut i = inputs(rt(t), Some("7.10.0"), Some(SHA), pre);
            // TheRock's test runs today, after the base date; nightly-bkc sorts below nightly then.
            i.date = "20261124".parse().unwrap();
            let v = compute(&file, &i).unwrap().rocm_package_version;
            let parsed: pep440_rs::Version = v.parse().unwrap();
            assert_eq!(parsed.to_string(), v, "{t} is canonical");
            parsed
        };
        let dev = wheel("dev", None);
        assert_eq!(wheel("dev-bkc", None), dev);
        assert!(wheel("nightly-bkc", None) > dev);
        assert!(wheel("nightly", None) > wheel("nightly-bkc", None));
        assert!(wheel("prerelease", Some("0")) > wheel("nightly", None));
        assert!(wheel("release", None) > wheel("prerelease", Some("0")));
    }
}
