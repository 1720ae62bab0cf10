//! TheRock stage artifacts (spec §3): what a stage pushes and the next stage fetches.
//!
//! - [`name`]: `{name}_{component}_{target}` directory and `….tar.zst|.tar.xz` archive names.
//! - [`archive`]: an artifact directory written as a reproducible archive, `artifact_manifest.txt`
//!   first, with its sha256 computed on the way out.
//! - [`extract`]: an archive unpacked plainly, flattened or bootstrapped into a build tree;
//!   members outside the manifest roots, `..`, absolute paths, escaping links, special files and
//!   archives over the size and expansion limits are refused before anything lands outside the
//!   destination.
//! - [`resolve`]: where a symlink leads once the links on its way are followed (used by the
//!   extractor against the disk and by the packager against a package's items).
//! - [`sidecar`]: the `<archive>.sha256sum` files.
//!
//! No network and no store here: the CLI moves archives with `quarry-store`.

pub mod archive;
pub mod extract;
pub mod framed;
pub mod name;
pub mod resolve;
pub mod sidecar;

// The round trips build their fixtures with Unix symlinks and modes.
#[cfg(all(test, unix))]
mod tests;

pub use archive::{ArchiveOptions, ArchiveReport, write_archive};
pub use extract::{
    DEFAULT_MAX_BYTES, DEFAULT_MAX_RATIO, ExtractMode, ExtractReport, Limits, PendingLinks, extract, extract_deferred,
    link_stays_inside, read_manifest, wipe_roots,
};
pub use name::{ArchiveFormat, ArtifactName, ArtifactNameError, COMPONENTS};
pub use resolve::{LinkRefusal, Node, resolve_link};

/// The manifest every artifact directory and archive carries (an archive's first member).
pub const MANIFEST: &str = "artifact_manifest.txt";

/// Everything that can go wrong reading, writing or unpacking artifacts.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{path}: {source}")]
    Io { path: std::path::PathBuf, source: std::io::Error },
    #[error("reading the archive: {0}")]
    Read(std::io::Error),
    #[error(
        "{0:?} is not an artifact name ({{name}}_{{component}}_{{target}}, none of them empty or with `_`, `/`, `\\`)"
    )]
    BadName(String),
    #[error("the archive's first member is {0:?}, not {MANIFEST}")]
    ManifestNotFirst(String),
    #[error("{MANIFEST}: root {0:?} is not a relative path inside the build tree")]
    HostileRoot(String),
    #[error("{MANIFEST} is {0} bytes, more than the 1 MiB a manifest may have")]
    ManifestTooLarge(u64),
    #[error("member {member:?}: {reason}")]
    HostileMember { member: String, reason: &'static str },
    #[error("member {0:?} is outside every root the manifest names")]
    OutsideRoots(String),
    #[error("member {member:?}: creating the symlink to {target:?}")]
    Symlink { member: String, target: String, source: std::io::Error },
    #[error("member {member:?} cannot exist on Windows: {reason}")]
    NotPortable { member: String, reason: String },
    #[error("member {member:?}: link to {target:?} leaves its root")]
    EscapingLink { member: String, target: String },
    #[error("member {member:?}: link to {target:?} leaves its root once the links on its way are followed: {reason}")]
    ResolvesOutside { member: String, target: String, reason: resolve::LinkRefusal },
    #[error("refusing to wipe root {root:?}: {} is a symlink (a root is never removed through a link)", link.display())]
    WipeThroughLink { root: String, link: std::path::PathBuf },
    #[error(
        "the archive expands beyond the limit of {limit}:1 ({unpacked} bytes unpacked from {compressed} compressed bytes)"
    )]
    Expands { unpacked: u64, compressed: u64, limit: u64 },
    #[error("member {0:?}: not a regular file, directory, symlink or hard link")]
    Special(String),
    #[error("the archive exceeds the limit of {limit} {what}")]
    TooLarge { limit: u64, what: &'static str },
    #[error("{dir}: the manifest names {root:?}, which is not in the artifact directory")]
    MissingRoot { dir: String, root: String },
}

/// Maps an I/O error to [`ArtifactError::Io`] naming `path`.
pub(crate) fn io_at(path: &std::path::Path) -> impl Fn(std::io::Error) -> ArtifactError + Copy + '_ {
    move |source| ArtifactError::Io { path: path.to_path_buf(), source }
}

/// Whether `path` is relative, non-empty and free of `..`, backslashes and NUL.
pub fn relative_ok(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains(['\\', '\0'])
        && path.split('/').all(|s| s != ".." && s != "." && !s.is_empty())
}

#[cfg(test)]
mod path_tests {
    use super::relative_ok;

    #[test]
    fn relative_paths() {
        assert!(relative_ok("math-libs/BLAS/stage"));
        for bad in ["", "/abs", "a/../b", "..", "a//b", "./a", "a\\b", "a/"] {
            assert!(!relative_ok(bad), "{bad}");
        }
    }
}
