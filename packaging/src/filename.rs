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
    #[error(
        "wheel filename {0:?} has variant label {1:?}; a variant label (PEP 825) is 1-16 characters of 0-9, a-z, _ and ."
    )]
    InvalidVariantLabel(String, String),
    #[error(
        "wheel filename {0:?} has build tag {1:?}, which must start with a digit; read as a variant wheel instead, its variant label {2:?} is not 1-16 characters of 0-9, a-z, _ and . (PEP 825)"
    )]
    BuildTagOrVariantLabel(String, String, String),
    #[error("wheel filename {0:?} has an empty compatibility tag")]
    EmptyTag(String),
    #[error("sdist filename {0:?} has no version: expected name-version.tar.gz")]
    SdistWithoutVersion(String),
}

/// A parsed wheel filename (`{name}-{version}[-{build}]-{python}-{abi}-{platform}[-{label}].whl`;
/// the variant label is PEP 825's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WheelFilename {
    raw: String,
    pub name: PackageName,
    pub version: Version,
    pub build_tag: Option<String>,
    pub python_tags: Vec<String>,
    pub abi_tags: Vec<String>,
    pub platform_tags: Vec<String>,
    /// The PEP 825 variant label (`null` is the null variant); `None` for a non-variant wheel.
    pub variant_label: Option<String>,
}

/// The variant label that wheel filenames reserve for the variant with no properties.
pub const NULL_VARIANT_LABEL: &str = "null";

/// Whether `label` is a valid PEP 825 variant label (`^[0-9a-z_.]{1,16}$`).
pub fn is_variant_label(label: &str) -> bool {
    (1..=16).contains(&label.len())
        && label.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b == b'_' || b == b'.')
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

/// The dash-separated parts of a wheel filename's stem, sorted into their fields: 5 parts are
/// a plain wheel, 7 a variant wheel with a build tag; 6 are a build tag when the third part
/// starts with a digit (a Python tag never does), else a variant label at the end (PEP 825).
fn wheel_fields<'a>(raw: &str, parts: &[&'a str]) -> Result<[Option<&'a str>; 7], FilenameError> {
    let fields = match *parts {
        [n, v, p, a, pl] => [Some(n), Some(v), None, Some(p), Some(a), Some(pl), None],
        [n, v, b, p, a, pl] if b.starts_with(|c: char| c.is_ascii_digit()) => {
            [Some(n), Some(v), Some(b), Some(p), Some(a), Some(pl), None]
        }
        [n, v, p, a, pl, label] => {
            if !is_variant_label(label) {
                return Err(FilenameError::BuildTagOrVariantLabel(raw.to_owned(), p.to_owned(), label.to_owned()));
            }
            [Some(n), Some(v), None, Some(p), Some(a), Some(pl), Some(label)]
        }
        [n, v, b, p, a, pl, label] => [Some(n), Some(v), Some(b), Some(p), Some(a), Some(pl), Some(label)],
        _ => return Err(FilenameError::WheelParts(raw.to_owned(), parts.len())),
    };
    Ok(fields)
}

impl FromStr for WheelFilename {
    type Err = FilenameError;
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        check_plain(raw)?;
        let stem = raw.strip_suffix(".whl").ok_or_else(|| FilenameError::UnknownExtension(raw.to_owned()))?;
        let parts: Vec<&str> = stem.split('-').collect();
        let [name, version, build, py, abi, plat, label] = wheel_fields(raw, &parts)?;
        let field = |f: Option<&str>| f.unwrap_or_default().to_owned();
        let name = PackageName::new(&field(name)).map_err(|e| FilenameError::InvalidName(raw.to_owned(), e))?;
        let version = parse_version(raw, &field(version))?;
        if let Some(b) = build
            && !b.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(FilenameError::InvalidBuildTag(raw.to_owned(), b.to_owned()));
        }
        if let Some(l) = label
            && !is_variant_label(l)
        {
            return Err(FilenameError::InvalidVariantLabel(raw.to_owned(), l.to_owned()));
        }
        Ok(Self {
            raw: raw.to_owned(),
            name,
            version,
            build_tag: build.map(str::to_owned),
            python_tags: split_tags(raw, &field(py))?,
            abi_tags: split_tags(raw, &field(abi))?,
            platform_tags: split_tags(raw, &field(plat))?,
            variant_label: label.map(str::to_owned),
        })
    }
}

impl WheelFilename {
    /// The filename exactly as given.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Whether the filename carries a variant label (PEP 825).
    pub fn is_variant(&self) -> bool {
        self.variant_label.is_some()
    }

    /// The release's index-level variant metadata file, `{name}-{version}-variants.json`,
    /// name and version normalized as in wheel filenames (PEP 825).
    pub fn variants_json_name(&self) -> String {
        variants_json_name(&self.name, &self.version)
    }

    /// The `.dist-info` directory name prefix a wheel's METADATA lives under, as the wheel spec
    /// writes it (`{name}-{version}.dist-info`, name with `_` for runs of `-_.`). Used only as a
    /// hint: the indexer accepts any single `*.dist-info/METADATA`.
    pub fn dist_info_hint(&self) -> String {
        format!("{}-{}.dist-info", self.name.as_str().replace('-', "_"), self.version)
    }
}

/// `{name}-{version}-variants.json` for a release: the name with `_` for `-` (it is already
/// PEP 503-normalized), the version in its normal form (PEP 825, index-level metadata).
pub fn variants_json_name(name: &PackageName, version: &Version) -> String {
    format!("{}-{version}-variants.json", name.as_str().replace('-', "_"))
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
    fn parses_variant_labels() {
        let w: WheelFilename = "numpy-2.3.2-cp313-cp313t-musllinux_1_2_x86_64-x86_64_v3.whl".parse().unwrap();
        assert_eq!(w.variant_label.as_deref(), Some("x86_64_v3"));
        assert_eq!((w.build_tag.as_deref(), w.python_tags.as_slice()), (None, ["cp313".to_owned()].as_slice()));
        assert_eq!(w.platform_tags, ["musllinux_1_2_x86_64"]);
        let w: WheelFilename = "rocm_sdk-7.10.0-2-py3-none-linux_x86_64-null.whl".parse().unwrap();
        assert_eq!((w.build_tag.as_deref(), w.variant_label.as_deref()), (Some("2"), Some(NULL_VARIANT_LABEL)));
        assert!(w.is_variant());
        assert_eq!(w.variants_json_name(), "rocm_sdk-7.10.0-variants.json");
        // Six parts whose third starts with a digit are a build tag, as before.
        let w: WheelFilename = "torch-2.9.1-1-cp312-cp312-linux_x86_64.whl".parse().unwrap();
        assert_eq!((w.build_tag.as_deref(), w.variant_label), (Some("1"), None));
        assert!(is_variant_label("gfx942") && is_variant_label("a.b_9") && !is_variant_label(""));
        assert!(!is_variant_label("gfx94X") && !is_variant_label("x-y") && !is_variant_label(&"a".repeat(17)));
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
        insta::assert_snapshot!(err("foo-1.0-x1-py3-none-any-gfx942.whl"), @r#"wheel filename "foo-1.0-x1-py3-none-any-gfx942.whl" has build tag "x1", which must start with a digit"#);
        insta::assert_snapshot!(err("foo-1.0-x1-py3-none-manylinux_2_28_x86_64.whl"), @r#"wheel filename "foo-1.0-x1-py3-none-manylinux_2_28_x86_64.whl" has build tag "x1", which must start with a digit; read as a variant wheel instead, its variant label "manylinux_2_28_x86_64" is not 1-16 characters of 0-9, a-z, _ and . (PEP 825)"#);
        insta::assert_snapshot!(err("foo-1.0-py3-none-any-GFX942.whl"), @r#"wheel filename "foo-1.0-py3-none-any-GFX942.whl" has build tag "py3", which must start with a digit; read as a variant wheel instead, its variant label "GFX942" is not 1-16 characters of 0-9, a-z, _ and . (PEP 825)"#);
        insta::assert_snapshot!(err("foo-1.0-1-py3-none-any-a_label_of_17_chr.whl"), @r#"wheel filename "foo-1.0-1-py3-none-any-a_label_of_17_chr.whl" has variant label "a_label_of_17_chr"; a variant label (PEP 825) is 1-16 characters of 0-9, a-z, _ and ."#);
        insta::assert_snapshot!(err("foo-1.0-py3..x-none-any.whl"), @r#"wheel filename "foo-1.0-py3..x-none-any.whl" has an empty compatibility tag"#);
        insta::assert_snapshot!(err("-1.0-py3-none-any.whl"), @r#"distribution filename "-1.0-py3-none-any.whl" has an invalid project name: project name is empty"#);
        insta::assert_snapshot!(err("foo.tar.gz"), @r#"sdist filename "foo.tar.gz" has no version: expected name-version.tar.gz"#);
        insta::assert_snapshot!(err("foo-bar.tar.gz"), @r#"distribution filename "foo-bar.tar.gz" has an invalid PEP 440 version "bar""#);
    }
}
