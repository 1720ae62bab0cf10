//! Unpacking an artifact archive, checked member by member before anything is written:
//!
//! - the first member must be `artifact_manifest.txt` (≤ 1 MiB) naming relative roots;
//! - every other member must lie under a root, with no `..`, `.`, empty segment, backslash or
//!   leading `/` (a member for a root itself, which Quarry's archives carried before they
//!   followed TheRock's rules, is accepted too); every root is created (tree and bootstrap
//!   modes), members or not;
//! - a symlink's target must stay inside the member's root, judged twice: as text (relative,
//!   never climbing above the root: what Windows, which resolves `..` lexically, sees) and by
//!   where it resolves when it is made ([`crate::resolve`]: the links already on disk followed
//!   component by component, physical `..`, at most 40 of them, no `..` out of a path that does
//!   not exist yet). A link never replaces another link (or is replaced by a file): the links
//!   checked before it would lead elsewhere. A hard link must name an earlier member under a
//!   root;
//! - no member is ever placed through a symlink: symlinks are created last (as GNU tar's delayed
//!   links are), after every file and directory, and a member, hard-link source or link whose
//!   parent path crosses a symlink already on disk below the destination is refused. A chain
//!   such as `r/a/up -> ..`, `r/a/up/up2 -> ..`, … therefore cannot climb out, even across
//!   several archives unpacked into one directory (their links wait for [`PendingLinks::create`]);
//! - devices, FIFOs and other special members are refused;
//! - member count, total size and the expansion ratio (bytes unpacked per compressed byte read,
//!   once past [`Limits::ratio_after`]) are bounded by [`Limits`]: a small archive that expands
//!   hugely (a zero-filled member) is refused before it fills the disk;
//! - with [`Limits::portable_names`] (always on Windows), every member must be a name Windows
//!   can hold: no reserved device name (`CON`, `aux.txt`, `COM1`…), no trailing dot or space,
//!   none of `<>:"|?*`, no two members differing only in case
//!   ([`quarry_store::portable::PortableNames`]).
//!
//! Modes: [`ExtractMode::Tree`] rebuilds the artifact directory (manifest + `<root>/…`) in a
//! sibling scratch directory and renames it into place only when the whole archive was good;
//! [`ExtractMode::Bootstrap`] fills `<dest>/<root>/…` and touches `<dest>/<root>.prebuilt`
//! (the caller wipes the roots first, see [`wipe_roots`]); [`ExtractMode::Flatten`] merges every
//! root's contents into `<dest>`.

use std::cell::Cell;
use std::collections::HashSet;
use std::fs;
use std::io::{self, Read, Write};
#[cfg(unix)]
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use quarry_store::portable::PortableNames;

use crate::archive::manifest_roots;
use crate::resolve::{Node, resolve_link};
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
    /// The members' sizes added up.
    pub max_bytes: u64,
    /// Bytes of tar stream unpacked per compressed byte read, at most (checked once
    /// [`Limits::ratio_after`] bytes are unpacked).
    pub max_ratio: u64,
    /// Unpacked bytes before [`Limits::max_ratio`] applies.
    pub ratio_after: u64,
    /// Refuse members Windows cannot hold (on by default on Windows; callers turn it on for
    /// Windows artifacts on other hosts).
    pub portable_names: bool,
}

/// [`Limits::max_bytes`] by default: 64 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 30;
/// [`Limits::max_ratio`] by default: 200 to 1.
pub const DEFAULT_MAX_RATIO: u64 = 200;

impl Default for Limits {
    /// 4 million members; 64 GiB, an order of magnitude above TheRock's largest artifacts (low
    /// GiB unpacked, debug-info ones included); 200:1 after the first 64 MiB, when zstd -3 on
    /// binaries, debug info and kernel databases stays below 20:1 and a zero-filled member
    /// reaches thousands to one. A 16 MiB archive so unpacks to at most 3.2 GiB.
    fn default() -> Self {
        Limits {
            max_members: 4_000_000,
            max_bytes: DEFAULT_MAX_BYTES,
            max_ratio: DEFAULT_MAX_RATIO,
            ratio_after: 64 << 20,
            portable_names: cfg!(windows),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtractReport {
    pub roots: Vec<String>,
    pub members: u64,
    pub bytes: u64,
}

/// Counts the compressed bytes read.
struct Counting<R> {
    inner: R,
    read: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get().saturating_add(n as u64));
        Ok(n)
    }
}

/// The unpacked stream, failing once it expands beyond [`Limits::max_ratio`]; what it saw
/// then (unpacked, compressed) is left in `tripped`.
struct Bounded<R> {
    inner: R,
    compressed: Rc<Cell<u64>>,
    unpacked: u64,
    limits: Limits,
    tripped: Rc<Cell<Option<(u64, u64)>>>,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.unpacked = self.unpacked.saturating_add(n as u64);
        let compressed = self.compressed.get();
        if self.unpacked > self.limits.ratio_after && self.unpacked > compressed.saturating_mul(self.limits.max_ratio) {
            self.tripped.set(Some((self.unpacked, compressed)));
            return Err(io::Error::other("the archive expands beyond its ratio limit"));
        }
        Ok(n)
    }
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
    let mut text = Vec::with_capacity(usize::try_from(size).unwrap_or_default());
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

/// Removes `<dest>/<root>` and `<dest>/<root>.prebuilt` for every root (bootstrap's wipe),
/// never through a link: a root whose path below `dest` crosses a symlink is refused (naming
/// it) before anything is removed; a root that is itself a symlink is removed as a link;
/// nothing a link inside a root points at is touched.
pub fn wipe_roots(dest: &Path, roots: &[String]) -> Result<(), ArtifactError> {
    let mut present = Vec::new();
    for root in roots {
        if !relative_ok(root) {
            return Err(ArtifactError::HostileRoot(root.clone()));
        }
        if parents_are_real(dest, root)? {
            present.push(root);
        }
    }
    for root in present {
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

/// Whether every directory between `dest` and `<dest>/<root>` is a real directory (`false`
/// when one is missing or a file: nothing to wipe); a symlink among them is an error.
fn parents_are_real(dest: &Path, root: &str) -> Result<bool, ArtifactError> {
    let mut path = dest.to_path_buf();
    let parts: Vec<&str> = root.split('/').collect();
    for part in &parts[..parts.len() - 1] {
        path.push(part);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(ArtifactError::WipeThroughLink { root: root.to_owned(), link: path });
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io_at(&path)(e)),
        }
    }
    Ok(true)
}

/// Whether a link at `rel` (path inside its root) to `target` stays inside the root.
#[must_use]
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

/// Symlinks an extraction read but has not created yet: created by [`PendingLinks::create`],
/// after every archive sharing the destination placed its files and directories.
#[derive(Debug, Default)]
#[must_use = "the archive's symlinks exist only once `create` ran"]
pub struct PendingLinks {
    dest: PathBuf,
    links: Vec<PendingLink>,
}

#[derive(Debug)]
struct PendingLink {
    member: String,
    target: String,
    /// Where the link goes.
    path: PathBuf,
    /// The directory it must resolve inside (its root on disk; the destination when flattened).
    floor: PathBuf,
    /// Its path below `floor`.
    rel: String,
}

impl PendingLinks {
    /// Creates the links in archive order, refusing any whose parent path crosses a symlink
    /// (an earlier link of this or another archive), that resolves outside its root through
    /// the links already made ([`crate::resolve`]), that would replace a directory, or that
    /// would replace a symlink with another target (one already there with the same target is
    /// kept).
    pub fn create(self) -> Result<(), ArtifactError> {
        let mut checked = HashSet::new();
        for link in self.links {
            no_symlink_between(&self.dest, &link.path, false, &link.member, &mut checked)?;
            resolve_link(&link.rel, &link.target, |rel| node_at(&link.floor, rel)).map_err(|reason| {
                ArtifactError::ResolvesOutside { member: link.member.clone(), target: link.target.clone(), reason }
            })?;
            if let Ok(meta) = fs::symlink_metadata(&link.path)
                && meta.file_type().is_symlink()
                && fs::read_link(&link.path).is_ok_and(|t| portable_target(&t) == link.target)
            {
                continue;
            }
            prepare(&link.path, &link.member)?;
            make_symlink(&link.target, &link.path).map_err(|source| ArtifactError::Symlink {
                member: link.member.clone(),
                target: link.target.clone(),
                source,
            })?;
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }
}

/// What `<floor>/<rel>` is on disk, links not followed (anything unreadable is missing).
fn node_at(floor: &Path, rel: &str) -> Node {
    let path = floor.join(rel);
    match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => match fs::read_link(&path) {
            Ok(target) => Node::Link(portable_target(&target)),
            Err(_) => Node::Missing,
        },
        Ok(m) if m.is_dir() => Node::Dir,
        Ok(_) => Node::File,
        Err(_) => Node::Missing,
    }
}

/// A link's target as text with `/` separators (Windows may store `\`).
fn portable_target(target: &Path) -> String {
    let text = target.to_string_lossy();
    if cfg!(windows) { text.replace('\\', "/") } else { text.into_owned() }
}

#[cfg(unix)]
fn make_symlink(target: &str, path: &Path) -> io::Result<()> {
    std::os::unix::fs::symlink(target, path)
}

/// Windows: a file or directory symlink by what the target is once every member is placed,
/// as TheRock's `Path.symlink_to`. Creating one needs Developer Mode or the
/// `SeCreateSymbolicLinkPrivilege`; without it the error says so. A link that is reported
/// made but is not there (Wine's `CreateSymbolicLinkW` is such a stub) is an error too: a
/// symlink is never dropped silently.
#[cfg(windows)]
fn make_symlink(target: &str, path: &Path) -> io::Result<()> {
    let resolved = path.parent().unwrap_or(Path::new(".")).join(target);
    let made = if resolved.is_dir() {
        std::os::windows::fs::symlink_dir(target, path)
    } else {
        std::os::windows::fs::symlink_file(target, path)
    };
    let hint = "Windows creates symlinks only with Developer Mode on or the SeCreateSymbolicLinkPrivilege";
    match made {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(1314) => {
            Err(io::Error::new(e.kind(), format!("{e} ({hint})")))
        }
        Err(e) => Err(e),
        Ok(()) if fs::symlink_metadata(path).is_err() => {
            Err(io::Error::other(format!("the system reported the link made, but it is not there ({hint})")))
        }
        Ok(()) => Ok(()),
    }
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

/// Windows has no mode bits: only the write bit maps (read-only), and artifacts keep files
/// writable, so nothing is set.
#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> io::Result<()> {
    Ok(())
}

/// Refuses `path` (below `dest`) when a component between `dest` and it is a symlink (or not a
/// directory); `and_self` checks `path` too. `checked` remembers directories already seen to
/// be real: an extraction never turns a directory into anything else ([`prepare`] refuses), so
/// they stay real.
fn no_symlink_between(
    dest: &Path,
    path: &Path,
    and_self: bool,
    member: &str,
    checked: &mut HashSet<PathBuf>,
) -> Result<(), ArtifactError> {
    let Ok(relative) = path.strip_prefix(dest) else {
        return Err(ArtifactError::HostileMember {
            member: member.to_owned(),
            reason: "placed outside the destination",
        });
    };
    let components: Vec<_> = relative.components().collect();
    let upto = if and_self { components.len() } else { components.len().saturating_sub(1) };
    let mut current = dest.to_path_buf();
    for component in &components[..upto] {
        current.push(component);
        if checked.contains(&current) {
            continue;
        }
        match fs::symlink_metadata(&current) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(ArtifactError::HostileMember {
                    member: member.to_owned(),
                    reason: "its path crosses a symlink (members are never placed through links)",
                });
            }
            Ok(m) if m.is_dir() => {
                checked.insert(current.clone());
            }
            Ok(_) => {
                return Err(ArtifactError::HostileMember {
                    member: member.to_owned(),
                    reason: "its path crosses a file that is not a directory",
                });
            }
            // Nothing there yet: nothing below it can exist either.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_at(&current)(e)),
        }
    }
    Ok(())
}

/// Unpacks `reader` into `dest` (see the module docs for the modes), symlinks included.
pub fn extract<R: Read>(
    reader: R,
    format: ArchiveFormat,
    dest: &Path,
    mode: ExtractMode,
    limits: Limits,
) -> Result<ExtractReport, ArtifactError> {
    if mode != ExtractMode::Tree {
        let (report, links) = extract_deferred(reader, format, dest, mode, limits)?;
        links.create()?;
        return Ok(report);
    }
    let parent = dest.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent).map_err(io_at(parent))?;
    let scratch = parent.join(format!(
        ".{}.partial-{}",
        dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        std::process::id()
    ));
    let _ = fs::remove_dir_all(&scratch);
    let result = unpack(reader, format, &scratch, mode, limits).and_then(|(report, links)| {
        links.create()?;
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

/// [`ExtractMode::Bootstrap`] or [`ExtractMode::Flatten`] without the symlinks: several
/// archives unpacked into one directory (concurrently) place their files first, then their
/// [`PendingLinks`] are created one archive after another, so no archive's member is ever
/// placed through another archive's link. A [`ExtractMode::Tree`] extraction has a directory
/// of its own and is done whole (its links included) before it is renamed into place.
pub fn extract_deferred<R: Read>(
    reader: R,
    format: ArchiveFormat,
    dest: &Path,
    mode: ExtractMode,
    limits: Limits,
) -> Result<(ExtractReport, PendingLinks), ArtifactError> {
    if mode == ExtractMode::Tree {
        let report = extract(reader, format, dest, mode, limits)?;
        return Ok((report, PendingLinks { dest: dest.to_path_buf(), links: Vec::new() }));
    }
    unpack(reader, format, dest, mode, limits)
}

fn unpack<R: Read>(
    reader: R,
    format: ArchiveFormat,
    dest: &Path,
    mode: ExtractMode,
    limits: Limits,
) -> Result<(ExtractReport, PendingLinks), ArtifactError> {
    let compressed = Rc::new(Cell::new(0));
    let tripped = Rc::new(Cell::new(None));
    let counting = Counting { inner: reader, read: Rc::clone(&compressed) };
    let bounded =
        Bounded { inner: decoder(counting, format)?, compressed, unpacked: 0, limits, tripped: Rc::clone(&tripped) };
    // Whatever error the expansion limit caused on its way out (a read, a copy), it is named.
    unpack_bounded(bounded, dest, mode, limits).map_err(|e| match tripped.get() {
        Some((unpacked, compressed)) => ArtifactError::Expands { unpacked, compressed, limit: limits.max_ratio },
        None => e,
    })
}

fn unpack_bounded<R: Read>(
    reader: R,
    dest: &Path,
    mode: ExtractMode,
    limits: Limits,
) -> Result<(ExtractReport, PendingLinks), ArtifactError> {
    let mut archive = tar::Archive::new(reader);
    let mut entries = archive.entries().map_err(ArtifactError::Read)?;
    let (roots, manifest) = read_manifest_entry(&mut entries)?;
    fs::create_dir_all(dest).map_err(io_at(dest))?;
    if mode == ExtractMode::Tree {
        fs::write(dest.join(MANIFEST), &manifest).map_err(io_at(&dest.join(MANIFEST)))?;
    }
    let mut report = ExtractReport { roots: roots.clone(), ..Default::default() };
    let mut unpacker = Unpacker {
        dest,
        mode,
        roots: &roots,
        checked: HashSet::new(),
        links: PendingLinks { dest: dest.to_path_buf(), links: Vec::new() },
        buffer: vec![0; COPY_BUFFER],
    };
    unpacker.roots()?;
    let mut portable = limits.portable_names.then(PortableNames::default);
    for entry in entries {
        let mut entry = entry.map_err(ArtifactError::Read)?;
        let member = member_name(&entry)?;
        if let Some(names) = portable.as_mut() {
            names.check(&member).map_err(|reason| ArtifactError::NotPortable { member: member.clone(), reason })?;
        }
        report.count(entry.header(), limits)?;
        unpacker.member(&mut entry, member)?;
    }
    if mode == ExtractMode::Bootstrap {
        unpacker.bootstrap_markers()?;
    }
    Ok((report, unpacker.links))
}

impl ExtractReport {
    /// Counts one more member of the header's size, refusing the archive beyond `limits`.
    fn count(&mut self, header: &tar::Header, limits: Limits) -> Result<(), ArtifactError> {
        self.members += 1;
        if self.members > limits.max_members {
            return Err(ArtifactError::TooLarge { limit: limits.max_members, what: "members" });
        }
        let size = header.size().map_err(ArtifactError::Read)?;
        self.bytes = self.bytes.saturating_add(size);
        if self.bytes > limits.max_bytes {
            return Err(ArtifactError::TooLarge { limit: limits.max_bytes, what: "bytes" });
        }
        Ok(())
    }
}

/// One archive's members on their way into `dest`: where each goes, the directories already
/// seen to be real, and the symlinks left for later.
struct Unpacker<'a> {
    dest: &'a Path,
    mode: ExtractMode,
    roots: &'a [String],
    checked: HashSet<PathBuf>,
    links: PendingLinks,
    /// One buffer for every file's bytes: large reads and writes, not `io::copy`'s 8 KiB.
    buffer: Vec<u8>,
}

/// Bytes moved per read and write when a member's data is copied into its file.
const COPY_BUFFER: usize = 256 * 1024;

impl Unpacker<'_> {
    /// Where `member` goes under `dest` by the mode, and its path inside its root; a member
    /// under no root is refused.
    fn place(&self, member: &str) -> Result<(PathBuf, String), ArtifactError> {
        let (_, rel) = locate(self.roots, member).ok_or_else(|| ArtifactError::OutsideRoots(member.to_owned()))?;
        let path = match self.mode {
            ExtractMode::Flatten if rel.is_empty() => self.dest.to_path_buf(),
            ExtractMode::Flatten => self.dest.join(&rel),
            _ => self.dest.join(member),
        };
        Ok((path, rel))
    }

    /// The directory on disk a member's links must resolve inside: its root (the destination
    /// when roots are flattened into it).
    fn floor(&self, member: &str) -> PathBuf {
        match (self.mode, locate(self.roots, member)) {
            (ExtractMode::Flatten, _) | (_, None) => self.dest.to_path_buf(),
            (_, Some((root, _))) => self.dest.join(root),
        }
    }

    /// Places one member: a directory or file now, a hard link to an earlier file now, a
    /// symlink later ([`PendingLinks`]); special members are refused.
    fn member<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>, member: String) -> Result<(), ArtifactError> {
        let (path, rel) = self.place(&member)?;
        let mode_bits = entry.header().mode().unwrap_or(0o644) & 0o777;
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                no_symlink_between(self.dest, &path, true, &member, &mut self.checked)?;
                fs::create_dir_all(&path).map_err(io_at(&path))?;
                set_mode(&path, mode_bits | 0o700).map_err(io_at(&path))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                no_symlink_between(self.dest, &path, false, &member, &mut self.checked)?;
                prepare(&path, &member)?;
                let mut file = fs::File::create(&path).map_err(io_at(&path))?;
                copy_through(entry, &mut file, &mut self.buffer).map_err(io_at(&path))?;
                drop(file);
                set_mode(&path, mode_bits).map_err(io_at(&path))?;
            }
            tar::EntryType::Symlink => {
                let target = link_name(entry, &member)?;
                if rel.is_empty() || !link_stays_inside(&rel, &target) {
                    return Err(ArtifactError::EscapingLink { member, target });
                }
                let floor = self.floor(&member);
                self.links.links.push(PendingLink { member, target, path, floor, rel });
            }
            tar::EntryType::Link => {
                let target = link_name(entry, &member)?;
                self.hard_link(member, target, &path)?;
            }
            tar::EntryType::XHeader
            | tar::EntryType::XGlobalHeader
            | tar::EntryType::GNULongName
            | tar::EntryType::GNULongLink => {}
            _ => return Err(ArtifactError::Special(member)),
        }
        Ok(())
    }

    /// A hard link at `path` to `target`, which must be an earlier regular file under a root,
    /// reached through no symlink.
    fn hard_link(&mut self, member: String, target: String, path: &Path) -> Result<(), ArtifactError> {
        let target_trimmed = target.strip_prefix("./").unwrap_or(&target).to_owned();
        if !relative_ok(&target_trimmed) {
            return Err(ArtifactError::EscapingLink { member, target });
        }
        let (source, _) = self
            .place(&target_trimmed)
            .map_err(|_| ArtifactError::EscapingLink { member: member.clone(), target: target.clone() })?;
        no_symlink_between(self.dest, &source, false, &member, &mut self.checked)?;
        match fs::symlink_metadata(&source) {
            Ok(m) if m.is_file() => {}
            _ => {
                return Err(ArtifactError::HostileMember {
                    member,
                    reason: "hard link to a member that is not an earlier regular file",
                });
            }
        }
        no_symlink_between(self.dest, path, false, &member, &mut self.checked)?;
        prepare(path, &member)?;
        fs::hard_link(&source, path).map_err(io_at(path))
    }

    /// Every root the manifest names, as a directory (tree and bootstrap modes): archives
    /// written TheRock's way have no member for a root, so an empty root exists only as its
    /// manifest line.
    fn roots(&mut self) -> Result<(), ArtifactError> {
        if self.mode == ExtractMode::Flatten {
            return Ok(());
        }
        for root in self.roots {
            let path = self.dest.join(root);
            no_symlink_between(self.dest, &path, true, root, &mut self.checked)?;
            fs::create_dir_all(&path).map_err(io_at(&path))?;
        }
        Ok(())
    }

    /// Bootstrap's `<dest>/<root>.prebuilt` markers.
    fn bootstrap_markers(&mut self) -> Result<(), ArtifactError> {
        for root in self.roots {
            let marker = self.dest.join(format!("{root}.prebuilt"));
            no_symlink_between(self.dest, &marker, false, root, &mut self.checked)?;
            prepare(&marker, root)?;
            fs::write(&marker, b"").map_err(io_at(&marker))?;
        }
        Ok(())
    }
}

/// Copies `from` to its end into `to` through `buffer`.
fn copy_through(from: &mut impl Read, to: &mut impl Write, buffer: &mut [u8]) -> io::Result<()> {
    loop {
        match from.read(buffer) {
            Ok(0) => return Ok(()),
            Ok(n) => to.write_all(&buffer[..n])?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

fn link_name(entry: &tar::Entry<'_, impl Read>, member: &str) -> Result<String, ArtifactError> {
    let target = entry
        .link_name_bytes()
        .ok_or(ArtifactError::HostileMember { member: member.to_owned(), reason: "link without a target" })?;
    String::from_utf8(target.into_owned())
        .map_err(|_| ArtifactError::HostileMember { member: member.to_owned(), reason: "link target is not UTF-8" })
}

/// Makes room for a new file, link or hard link at `path`: its parents exist, and the file
/// that was there is removed. A directory or a symlink is never replaced (links already made
/// may lead through it, and were judged by where it led).
fn prepare(path: &Path, member: &str) -> Result<(), ArtifactError> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_at(parent))?;
    }
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Err(ArtifactError::HostileMember {
            member: member.to_owned(),
            reason: "a file or link member replaces a directory",
        }),
        Ok(m) if m.file_type().is_symlink() => Err(ArtifactError::HostileMember {
            member: member.to_owned(),
            reason: "it replaces a symlink already there (other links may lead through it); unpack into an empty directory",
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
