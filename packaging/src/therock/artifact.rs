//! Artifact names: `{name}_{component}_{target}` (spec §3), the one place that parses and
//! spells them. The three parts never contain `_`; `name` and `target` may contain `-`, `:`,
//! `+` and `.` (e.g. `rccl_test_gfx942:xnack+`). Pure: directory and archive names in, parts
//! out.

use std::fmt;

/// Components in the order TheRock claims files (first match wins).
pub const COMPONENTS: [&str; 6] = ["lib", "run", "dbg", "dev", "doc", "test"];

/// The target meant for a generic (target-neutral) artifact.
pub const GENERIC: &str = "generic";

/// A name that is not `{name}_{component}_{target}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an artifact name ({{name}}_{{component}}_{{target}}, none of them empty or with `_`, `/`, `\\`)")]
pub struct ArtifactNameError(pub String);

/// An archive's compression; `.tar.zst` is preferred when both exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArchiveFormat {
    Zstd,
    Xz,
}

impl ArchiveFormat {
    /// The file name extension, `.tar.zst` or `.tar.xz`.
    pub fn extension(self) -> &'static str {
        match self {
            ArchiveFormat::Zstd => ".tar.zst",
            ArchiveFormat::Xz => ".tar.xz",
        }
    }

    /// `zstd` or `xz`, as `--compression-type` spells them.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "zstd" | "zst" => Some(ArchiveFormat::Zstd),
            "xz" => Some(ArchiveFormat::Xz),
            _ => None,
        }
    }
}

/// One artifact: what it is (`name`), which slice (`component`) and for which GPU target or
/// family (`target`, `generic` when target-neutral).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ArtifactName {
    pub name: String,
    pub component: String,
    pub target: String,
}

fn part_ok(part: &str) -> bool {
    !part.is_empty()
        && !part.starts_with('.')
        && part.chars().all(|c| !c.is_control() && !matches!(c, '_' | '/' | '\\' | ' '))
}

/// A GPU target without its feature suffix: `gfx942:xnack+` → `gfx942`.
pub fn base_target(target: &str) -> &str {
    target.split(':').next().unwrap_or(target)
}

impl ArtifactName {
    /// The name of these parts, each checked (non-empty, no `_`, `/`, `\`, space or control
    /// character, no leading `.`).
    pub fn new(name: &str, component: &str, target: &str) -> Result<Self, ArtifactNameError> {
        if [name, component, target].iter().all(|p| part_ok(p)) {
            Ok(ArtifactName { name: name.to_owned(), component: component.to_owned(), target: target.to_owned() })
        } else {
            Err(ArtifactNameError(format!("{name}_{component}_{target}")))
        }
    }

    /// A directory name such as `blas_lib_gfx942`.
    pub fn parse_dir(s: &str) -> Result<Self, ArtifactNameError> {
        let parts: Vec<&str> = s.split('_').collect();
        match parts.as_slice() {
            [name, component, target] => Self::new(name, component, target).map_err(|_| ArtifactNameError(s.into())),
            _ => Err(ArtifactNameError(s.to_owned())),
        }
    }

    /// An archive file name such as `blas_lib_gfx942.tar.zst`; `None` for anything else
    /// (sidecars, indexes, logs), so listings can skip it.
    pub fn parse_archive(file: &str) -> Option<(Self, ArchiveFormat)> {
        [ArchiveFormat::Zstd, ArchiveFormat::Xz].into_iter().find_map(|format| {
            let stem = file.strip_suffix(format.extension())?;
            Some((Self::parse_dir(stem).ok()?, format))
        })
    }

    /// The directory name, `{name}_{component}_{target}`.
    pub fn dir_name(&self) -> String {
        self.to_string()
    }

    /// The archive file name in `format`.
    pub fn archive_name(&self, format: ArchiveFormat) -> String {
        format!("{self}{}", format.extension())
    }

    /// The target without its feature suffix: `gfx942:xnack+` → `gfx942`.
    pub fn base_target(&self) -> &str {
        base_target(&self.target)
    }

    /// Whether the artifact is target-neutral (`generic`).
    pub fn is_generic(&self) -> bool {
        self.target == GENERIC
    }

    /// Whether one of TheRock's [`COMPONENTS`] is this artifact's component.
    pub fn has_known_component(&self) -> bool {
        COMPONENTS.contains(&self.component.as_str())
    }
}

impl fmt::Display for ArtifactName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}_{}", self.name, self.component, self.target)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_names_parse() {
        let (n, f) = ArtifactName::parse_archive("amd-llvm_lib_generic.tar.xz").unwrap();
        assert_eq!(
            (n.name.as_str(), n.component.as_str(), n.target.as_str(), f),
            ("amd-llvm", "lib", "generic", ArchiveFormat::Xz)
        );
        let (n, f) = ArtifactName::parse_archive("rccl_test_gfx942:xnack+.tar.zst").unwrap();
        assert_eq!((n.target.as_str(), n.base_target(), f), ("gfx942:xnack+", "gfx942", ArchiveFormat::Zstd));
        let (n, _) = ArtifactName::parse_archive("blas_lib_gfx94X-dcgpu.tar.xz").unwrap();
        assert_eq!(n.archive_name(ArchiveFormat::Zstd), "blas_lib_gfx94X-dcgpu.tar.zst");
        assert!(!n.is_generic() && ArtifactName::parse_dir("base_run_generic").unwrap().is_generic());
        assert_eq!(base_target("gfx1100"), "gfx1100");
    }

    #[test]
    fn other_files_and_malformed_names_are_not_artifacts() {
        for file in [
            "blas_lib_gfx942.tar.zst.sha256sum",
            "index.html",
            "blas_lib.tar.zst",
            "a_b_c_d.tar.zst",
            "_lib_generic.tar.zst",
            "blas__generic.tar.xz",
            "../x_lib_generic.tar.zst",
            "..x_lib_generic.tar.zst",
            "a b_lib_generic.tar.zst",
            "blas_lib_gfx942.tar.gz",
        ] {
            assert!(ArtifactName::parse_archive(file).is_none(), "{file}");
        }
        assert!(ArtifactName::parse_dir("x/y_lib_generic").is_err());
        assert!(ArtifactName::new("a", "lib", "gfx\\1").is_err());
    }
}
