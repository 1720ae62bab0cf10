//! Unpacking an artifact archive, checked member by member before anything is written:
//!
//! - the first member must be `artifact_manifest.txt` (≤ 1 MiB) naming relative roots;
//! - every other member must be a root or lie under one, with no `..`, `.`, empty segment,
//!   backslash or leading `/`;
//! - a symlink's target must stay inside the member's root (relative, never climbing above it);
//!   a hard link must name an earlier member under a root;
//! - devices, FIFOs and other special members are refused;
//! - member count and total size are bounded by [`Limits`].
//!
//! Modes: [`ExtractMode::Tree`] rebuilds the artifact directory (manifest + `<root>/…`) in a
//! sibling scratch directory and renames it into place only when the whole archive was good;
//! [`ExtractMode::Bootstrap`] fills `<dest>/<root>/…` and touches `<dest>/<root>.prebuilt`
//! (the caller wipes the roots first, see [`wipe_roots`]); [`ExtractMode::Flatten`] merges every
//! root's contents into `<dest>`.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::archive::manifest_roots;
use crate::{ArchiveFormat, ArtifactError, MANIFEST, io_at, relative_ok};

const MAX_MANIFEST: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtractMode {
    Tree,
    Bootstrap,
    Flatten,
}

/// Bounds on what one archive may unpack to.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_members: u64,
    pub max_bytes: u64,
}

impl Default for Limits {
    /// 4 million members, 512 GiB: well above TheRock's largest artifacts, below a full disk.
    fn default() -> Self {
        Limits { max_members: 4_000_000, max_bytes: 512 << 30 }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtractReport {
    pub roots: Vec<String>,
    pub members: u64,
    pub bytes: u64,
}

fn decoder<'a, R: Read + 'a>(reader: R, format: ArchiveFormat) -> Result<Box<dyn Read + 'a>, ArtifactError> {
    Ok(match format {
        ArchiveFormat::Zstd => Box::new(zstd::stream::read::Decoder::new(reader).map_err(ArtifactError::Read)?),
        ArchiveFormat::Xz => Box::new(xz2::read::XzDecoder::new(reader)),
    })
}

fn member_name(entry: &tar::Entry<'_, impl Read>) -> Result<String, ArtifactError> {
    let raw = entry.path_bytes();
    let name = String::from_utf8(raw.into_owned()).map_err(|e| ArtifactError::HostileMember {
        member: String::from_utf8_lossy(e.as_bytes()).into_owned(),
        reason: "name is not UTF-8",
    })?;
    let trimmed = name.strip_prefix("./").unwrap_or(&name).trim_end_matches('/');
    if !relative_ok(trimmed) {
        return Err(ArtifactError::HostileMember {
            member: name,
            reason: "absolute, `..`, `.` or empty segment, or backslash",
        });
    }
    Ok(trimmed.to_owned())
}

fn read_manifest_entry<R: Read>(entries: &mut tar::Entries<'_, R>) -> Result<(Vec<String>, Vec<u8>), ArtifactError> {
    let mut first = match entries.next() {
        Some(e) => e.map_err(ArtifactError::Read)?,
        None => return Err(ArtifactError::ManifestNotFirst(String::new())),
    };
    let name = member_name(&first).unwrap_or_else(|_| String::from_utf8_lossy(&first.path_bytes()).into_owned());
    if name != MANIFEST || first.header().entry_type() != tar::EntryType::Regular {
        return Err(ArtifactError::ManifestNotFirst(name));
    }
    let size = first.header().size().map_err(ArtifactError::Read)?;
    if size > MAX_MANIFEST {
        return Err(ArtifactError::ManifestTooLarge(size));
    }
    let mut text = Vec::with_capacity(size as usize);
    first.by_ref().take(MAX_MANIFEST).read_to_end(&mut text).map_err(ArtifactError::Read)?;
    let roots = manifest_roots(&String::from_utf8_lossy(&text))?;
    Ok((roots, text))
}

/// The roots an archive's manifest names, reading only its first member.
pub fn read_manifest<R: Read>(reader: R, format: ArchiveFormat) -> Result<Vec<String>, ArtifactError> {
    let mut archive = tar::Archive::new(decoder(reader, format)?);
    let mut entries = archive.entries().map_err(ArtifactError::Read)?;
    Ok(read_manifest_entry(&mut entries)?.0)
}

/// Removes `<dest>/<root>` and `<dest>/<root>.prebuilt` for every root (bootstrap's wipe).
pub fn wipe_roots(dest: &Path, roots: &[String]) -> Result<(), ArtifactError> {
    for root in roots {
        if !relative_ok(root) {
            return Err(ArtifactError::HostileRoot(root.clone()));
        }
        for path in [dest.join(root), dest.join(format!("{root}.prebuilt"))] {
            let result = match fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => fs::remove_dir_all(&path),
                Ok(_) => fs::remove_file(&path),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            result.map_err(|source| ArtifactError::Io { path, source })?;
        }
    }
    Ok(())
}

/// Whether a link at `rel` (path inside its root) to `target` stays inside the root.
pub fn link_stays_inside(rel: &str, target: &str) -> bool {
    if target.is_empty() || target.starts_with('/') || target.contains('\\') {
        return false;
    }
    let mut depth = rel.split('/').filter(|s| !s.is_empty()).count() as i64 - 1;
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => depth -= 1,
            _ => depth += 1,
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

/// The root `member` lies in (the longest one), and its path inside that root.
fn locate<'r>(roots: &'r [String], member: &str) -> Option<(&'r str, String)> {
    roots
        .iter()
        .filter_map(|root| {
            if member == root {
                Some((root.as_str(), String::new()))
            } else {
                member.strip_prefix(root.as_str())?.strip_prefix('/').map(|rest| (root.as_str(), rest.to_owned()))
            }
        })
        .max_by_key(|(root, _)| root.len())
}

/// Unpacks `reader` into `dest` (see the module docs for the modes).
pub fn extract<R: Read>(
    reader: R,
    format: ArchiveFormat,
    dest: &Path,
    mode: ExtractMode,
    limits: Limits,
) -> Result<ExtractReport, ArtifactError> {
    if mode != ExtractMode::Tree {
        return unpack(reader, format, dest, mode, limits);
    }
    let parent = dest.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(io_at(parent))?;
    let scratch = parent.join(format!(
        ".{}.partial-{}",
        dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&scratch);
    let result = unpack(reader, format, &scratch, mode, limits).and_then(|report| {
        if dest.exists() {
            fs::remove_dir_all(dest).map_err(io_at(dest))?;
        }
        fs::rename(&scratch, dest).map_err(io_at(dest))?;
        Ok(report)
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&scratch);
    }
    result
}

fn unpack<R: Read>(
    reader: R,
    format: ArchiveFormat,
    dest: &Path,
    mode: ExtractMode,
    limits: Limits,
) -> Result<ExtractReport, ArtifactError> {
    let mut archive = tar::Archive::new(decoder(reader, format)?);
    let mut entries = archive.entries().map_err(ArtifactError::Read)?;
    let (roots, manifest) = read_manifest_entry(&mut entries)?;
    fs::create_dir_all(dest).map_err(io_at(dest))?;
    if mode == ExtractMode::Tree {
        fs::write(dest.join(MANIFEST), &manifest).map_err(io_at(&dest.join(MANIFEST)))?;
    }
    let place = |member: &str| -> Result<(PathBuf, String), ArtifactError> {
        let (root, rel) = locate(&roots, member).ok_or_else(|| ArtifactError::OutsideRoots(member.to_owned()))?;
        let path = match mode {
            ExtractMode::Flatten if rel.is_empty() => dest.to_path_buf(),
            ExtractMode::Flatten => dest.join(&rel),
            _ => dest.join(member),
        };
        let _ = root;
        Ok((path, rel))
    };
    let mut report = ExtractReport { roots: roots.clone(), ..Default::default() };
    for entry in entries {
        let mut entry = entry.map_err(ArtifactError::Read)?;
        let member = member_name(&entry)?;
        report.members += 1;
        if report.members > limits.max_members {
            return Err(ArtifactError::TooLarge(format!("{} members", limits.max_members)));
        }
        let size = entry.header().size().map_err(ArtifactError::Read)?;
        report.bytes = report.bytes.saturating_add(size);
        if report.bytes > limits.max_bytes {
            return Err(ArtifactError::TooLarge(format!("{} bytes", limits.max_bytes)));
        }
        let (path, rel) = place(&member)?;
        let mode_bits = entry.header().mode().unwrap_or(0o644) & 0o777;
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Directory => {
                fs::create_dir_all(&path).map_err(io_at(&path))?;
                fs::set_permissions(&path, fs::Permissions::from_mode(mode_bits | 0o700)).map_err(io_at(&path))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                prepare(&path)?;
                let mut file = fs::File::create(&path).map_err(io_at(&path))?;
                io::copy(&mut entry, &mut file).map_err(io_at(&path))?;
                file.set_permissions(fs::Permissions::from_mode(mode_bits)).map_err(io_at(&path))?;
            }
            tar::EntryType::Symlink => {
                let target = link_name(&entry, &member)?;
                if rel.is_empty() || !link_stays_inside(&rel, &target) {
                    return Err(ArtifactError::EscapingLink { member, target });
                }
                prepare(&path)?;
                std::os::unix::fs::symlink(&target, &path).map_err(io_at(&path))?;
            }
            tar::EntryType::Link => {
                let target = link_name(&entry, &member)?;
                let target_trimmed = target.strip_prefix("./").unwrap_or(&target).to_owned();
                if !relative_ok(&target_trimmed) {
                    return Err(ArtifactError::EscapingLink { member, target });
                }
                let (source, _) = place(&target_trimmed)
                    .map_err(|_| ArtifactError::EscapingLink { member: member.clone(), target: target.clone() })?;
                match fs::symlink_metadata(&source) {
                    Ok(m) if m.is_file() => {}
                    _ => {
                        return Err(ArtifactError::HostileMember {
                            member,
                            reason: "hard link to a member that is not an earlier regular file",
                        });
                    }
                }
                prepare(&path)?;
                fs::hard_link(&source, &path).map_err(io_at(&path))?;
            }
            tar::EntryType::XHeader
            | tar::EntryType::XGlobalHeader
            | tar::EntryType::GNULongName
            | tar::EntryType::GNULongLink => {}
            _ => return Err(ArtifactError::Special(member)),
        }
    }
    if mode == ExtractMode::Bootstrap {
        for root in &roots {
            let marker = dest.join(format!("{root}.prebuilt"));
            if let Some(parent) = marker.parent() {
                fs::create_dir_all(parent).map_err(io_at(parent))?;
            }
            fs::write(&marker, b"").map_err(io_at(&marker))?;
        }
    }
    Ok(report)
}

fn link_name(entry: &tar::Entry<'_, impl Read>, member: &str) -> Result<String, ArtifactError> {
    let target = entry
        .link_name_bytes()
        .ok_or(ArtifactError::HostileMember { member: member.to_owned(), reason: "link without a target" })?;
    String::from_utf8(target.into_owned())
        .map_err(|_| ArtifactError::HostileMember { member: member.to_owned(), reason: "link target is not UTF-8" })
}

/// Makes room for a new file, link or hard link at `path`: its parents exist, and whatever
/// non-directory was there is removed (never followed).
fn prepare(path: &Path) -> Result<(), ArtifactError> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_at(parent))?;
    }
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Err(ArtifactError::HostileMember {
            member: path.display().to_string(),
            reason: "a file member replaces a directory",
        }),
        Ok(_) => fs::remove_file(path).map_err(io_at(path)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_at(path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_inside_and_outside() {
        assert!(link_stays_inside("lib/libfoo.so", "libfoo.so.1"));
        assert!(link_stays_inside("lib/x/libfoo.so", "../libfoo.so.1"));
        assert!(link_stays_inside("bin/tool", "../lib/tool"));
        assert!(!link_stays_inside("libfoo.so", "../libfoo.so.1"));
        assert!(!link_stays_inside("lib/a", "/etc/passwd"));
        assert!(!link_stays_inside("lib/a", "../../x"));
        assert!(!link_stays_inside("lib/a", ""));
    }

    #[test]
    fn longest_root_wins() {
        let roots = vec!["a".to_owned(), "a/b".to_owned()];
        assert_eq!(locate(&roots, "a/b/c"), Some(("a/b", "c".to_owned())));
        assert_eq!(locate(&roots, "a/bc"), Some(("a", "bc".to_owned())));
        assert_eq!(locate(&roots, "a"), Some(("a", String::new())));
        assert_eq!(locate(&roots, "ab"), None);
    }
}
