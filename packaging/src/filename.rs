use std::fmt;
use std::str::FromStr;

use pep440_rs::Version;

use crate::name::{NameError, PackageName};

/// Why a filename is not a Python distribution filename. Every variant quotes the filename.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilenameError {
    #[error("{0:?} is not a Python distribution: the name must end with .whl, .tar.gz or .zip")]
    UnknownExtension(String),
    #[error("{0:?} is not a plain filename: it contains a path separator or control character")]
    NotAPlainName(String),
    #[error("wheel filename {0:?} has {1} dash-separated parts; expected name-version[-build]-python-abi-platform.whl")]
    WheelParts(String, usize),
    #[error("distribution filename {0:?} has an invalid project name: {1}")]
    InvalidName(String, NameError),
    #[error("distribution filename {0:?} has an invalid PEP 440 version {1:?}")]
    InvalidVersion(String, String),
    #[error("wheel filename {0:?} has build tag {1:?}, which must start with a digit")]
    InvalidBuildTag(String, String),
    #[error("wheel filename {0:?} has an empty compatibility tag")]
    EmptyTag(String),
    #[error("sdist filename {0:?} has no version: expected name-version.tar.gz")]
    SdistWithoutVersion(String),
}

/// A parsed wheel filename (`{name}-{version}[-{build}]-{python}-{abi}-{platform}.whl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelFilename {
    raw: String,
    pub name: PackageName,
    pub version: Version,
    pub build_tag: Option<String>,
    pub python_tags: Vec<String>,
    pub abi_tags: Vec<String>,
    pub platform_tags: Vec<String>,
}

/// A parsed source distribution filename (`{name}-{version}.tar.gz` or `.zip`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdistFilename {
    raw: String,
    pub name: PackageName,
    pub version: Version,
}

/// Either kind of distribution file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DistFilename {
    Wheel(WheelFilename),
    Sdist(SdistFilename),
}

fn check_plain(raw: &str) -> Result<(), FilenameError> {
    if raw.is_empty() || raw.chars().any(|c| c == '/' || c == '\\' || c.is_control()) {
        return Err(FilenameError::NotAPlainName(raw.to_owned()));
    }
    Ok(())
}

fn parse_version(raw: &str, text: &str) -> Result<Version, FilenameError> {
    Version::from_str(text).map_err(|_| FilenameError::InvalidVersion(raw.to_owned(), text.to_owned()))
}

fn split_tags(raw: &str, text: &str) -> Result<Vec<String>, FilenameError> {
    let tags: Vec<String> = text.split('.').map(str::to_owned).collect();
    if tags.iter().any(String::is_empty) {
        return Err(FilenameError::EmptyTag(raw.to_owned()));
    }
    Ok(tags)
}

impl FromStr for WheelFilename {
    type Err = FilenameError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        check_plain(raw)?;
        let stem = raw.strip_suffix(".whl").ok_or_else(|| FilenameError::UnknownExtension(raw.to_owned()))?;
        let parts: Vec<&str> = stem.split('-').collect();
        let (name, version, build, py, abi, plat) = match parts.as_slice() {
            [n, v, p, a, pl] => (*n, *v, None, *p, *a, *pl),
            [n, v, b, p, a, pl] => (*n, *v, Some(*b), *p, *a, *pl),
            _ => return Err(FilenameError::WheelParts(raw.to_owned(), parts.len())),
        };
        let name = PackageName::new(name).map_err(|e| FilenameError::InvalidName(raw.to_owned(), e))?;
        let version = parse_version(raw, version)?;
        if let Some(b) = build
            && !b.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(FilenameError::InvalidBuildTag(raw.to_owned(), b.to_owned()));
        }
        Ok(Self {
            raw: raw.to_owned(),
            name,
            version,
            build_tag: build.map(str::to_owned),
            python_tags: split_tags(raw, py)?,
            abi_tags: split_tags(raw, abi)?,
            platform_tags: split_tags(raw, plat)?,
        })
    }
}

impl WheelFilename {
    /// The filename exactly as given.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The `.dist-info` directory name prefix a wheel's METADATA lives under, as the wheel spec
    /// writes it (`{name}-{version}.dist-info`, name with `_` for runs of `-_.`). Used only as a
    /// hint: the indexer accepts any single `*.dist-info/METADATA`.
    pub fn dist_info_hint(&self) -> String {
        format!("{}-{}.dist-info", self.name.as_str().replace('-', "_"), self.version)
    }
}

impl FromStr for SdistFilename {
    type Err = FilenameError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        check_plain(raw)?;
        let stem = raw
            .strip_suffix(".tar.gz")
            .or_else(|| raw.strip_suffix(".zip"))
            .ok_or_else(|| FilenameError::UnknownExtension(raw.to_owned()))?;
        // Legacy sdists may carry dashes in the name: take the rightmost dash whose remainder is
        // a valid version.
        let mut last_err = None;
        for (idx, _) in stem.match_indices('-').collect::<Vec<_>>().into_iter().rev() {
            let (name, version) = (&stem[..idx], &stem[idx + 1..]);
            let Ok(version) = Version::from_str(version) else {
                last_err.get_or_insert_with(|| FilenameError::InvalidVersion(raw.to_owned(), version.to_owned()));
                continue;
            };
            let name = PackageName::new(name).map_err(|e| FilenameError::InvalidName(raw.to_owned(), e))?;
            return Ok(Self { raw: raw.to_owned(), name, version });
        }
        Err(last_err.unwrap_or_else(|| FilenameError::SdistWithoutVersion(raw.to_owned())))
    }
}

impl SdistFilename {
    /// The filename exactly as given.
    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

impl FromStr for DistFilename {
    type Err = FilenameError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        if raw.ends_with(".whl") { raw.parse().map(Self::Wheel) } else { raw.parse().map(Self::Sdist) }
    }
}

impl DistFilename {
    /// True when `filename` ends like a distribution Quarry indexes (`.whl`, `.tar.gz`, `.zip`).
    pub fn has_dist_extension(filename: &str) -> bool {
        filename.ends_with(".whl") || filename.ends_with(".tar.gz") || filename.ends_with(".zip")
    }

    pub fn name(&self) -> &PackageName {
        match self {
            Self::Wheel(w) => &w.name,
            Self::Sdist(s) => &s.name,
        }
    }

    pub fn version(&self) -> &Version {
        match self {
            Self::Wheel(w) => &w.version,
            Self::Sdist(s) => &s.version,
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Wheel(w) => w.as_str(),
            Self::Sdist(s) => s.as_str(),
        }
    }
}

impl fmt::Display for WheelFilename {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl fmt::Display for SdistFilename {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl fmt::Display for DistFilename {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wheels() {
        let w: WheelFilename =
            "rocm_sdk_libraries_gfx94X_dcgpu-7.10.0rc20251124-py3-none-linux_x86_64.whl".parse().unwrap();
        assert_eq!(w.name.as_str(), "rocm-sdk-libraries-gfx94x-dcgpu");
        assert_eq!(w.version.to_string(), "7.10.0rc20251124");
        assert_eq!(w.platform_tags, ["linux_x86_64"]);
        assert_eq!(w.to_string(), "rocm_sdk_libraries_gfx94X_dcgpu-7.10.0rc20251124-py3-none-linux_x86_64.whl");

        let w: WheelFilename =
            "torch-2.9.1+rocm7.10.0-1-cp312-cp312-manylinux_2_28_x86_64.manylinux2014_x86_64.whl".parse().unwrap();
        assert_eq!(w.version.to_string(), "2.9.1+rocm7.10.0");
        assert_eq!(w.build_tag.as_deref(), Some("1"));
        assert_eq!(w.platform_tags.len(), 2);
        assert_eq!(w.dist_info_hint(), "torch-2.9.1+rocm7.10.0.dist-info");
    }

    #[test]
    fn parses_sdists() {
        let s: SdistFilename = "Foo.Bar_baz-1.0.tar.gz".parse().unwrap();
        assert_eq!(s.name.as_str(), "foo-bar-baz");
        let s: SdistFilename = "python-dateutil-2.9.0.post0.tar.gz".parse().unwrap();
        assert_eq!(s.name.as_str(), "python-dateutil");
        assert_eq!(s.version.to_string(), "2.9.0.post0");
        let s: SdistFilename = "pkg-1.0.zip".parse().unwrap();
        assert_eq!(s.name.as_str(), "pkg");
    }

    #[test]
    fn errors_quote_the_input() {
        let err = |s: &str| s.parse::<DistFilename>().unwrap_err().to_string();
        insta::assert_snapshot!(err("x.txt"), @r#""x.txt" is not a Python distribution: the name must end with .whl, .tar.gz or .zip"#);
        insta::assert_snapshot!(err("../x.whl"), @r#""../x.whl" is not a plain filename: it contains a path separator or control character"#);
        insta::assert_snapshot!(err("x.whl"), @r#"wheel filename "x.whl" has 1 dash-separated parts; expected name-version[-build]-python-abi-platform.whl"#);
        insta::assert_snapshot!(err("foo-notaversion-py3-none-any.whl"), @r#"distribution filename "foo-notaversion-py3-none-any.whl" has an invalid PEP 440 version "notaversion""#);
        insta::assert_snapshot!(err("foo-1.0-x1-py3-none-any.whl"), @r#"wheel filename "foo-1.0-x1-py3-none-any.whl" has build tag "x1", which must start with a digit"#);
        insta::assert_snapshot!(err("foo-1.0-py3..x-none-any.whl"), @r#"wheel filename "foo-1.0-py3..x-none-any.whl" has an empty compatibility tag"#);
        insta::assert_snapshot!(err("-1.0-py3-none-any.whl"), @r#"distribution filename "-1.0-py3-none-any.whl" has an invalid project name: project name is empty"#);
        insta::assert_snapshot!(err("foo.tar.gz"), @r#"sdist filename "foo.tar.gz" has no version: expected name-version.tar.gz"#);
        insta::assert_snapshot!(err("foo-bar.tar.gz"), @r#"distribution filename "foo-bar.tar.gz" has an invalid PEP 440 version "bar""#);
    }
}
