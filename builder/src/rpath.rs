//! RUNPATH to RPATH, as TheRock's `build_package.py` does by default (`runpath_to_rpath.py`:
//! `patchelf --force-rpath --set-rpath "$(existing)"`) and its wheel packaging does for every
//! ELF file (`_normalize_rpath`): the library search path a file carries becomes a `DT_RPATH`,
//! which `LD_LIBRARY_PATH` cannot override and which also applies to the file's dependencies.
//!
//! The string stays where it is: only the tag of the dynamic entry changes, `DT_RUNPATH` (29)
//! to `DT_RPATH` (15), in place, so nothing moves and no string table grows. Where a file has
//! both (the loader then ignores `DT_RPATH`), the `DT_RPATH` entry is pointed at the
//! `DT_RUNPATH` string first, so the search path in effect stays the same.
//!
//! Read through `object` with a read cache: only the headers and the dynamic segment are read,
//! whatever the file's size. Files are edited in place, but only staged copies: [`stage_items`]
//! (and [`stage_wheel_files`]) copy each file to edit into a `.quarry-elf-*` scratch directory
//! under the destination (removed with its [`StagedEdits`]) and point the package's item at the
//! copy, so the inputs are never written. Malformed ELF is an error naming the file, never a
//! panic; staging packages such a file as it is and lists it ([`StagedEdits::unreadable`]), as
//! TheRock goes on when `patchelf` fails.
//!
//! The rocm-sdk wheels also get TheRock's `$ORIGIN/…` entries (`patchelf --add-rpath`, then
//! `--force-rpath`): [`extend_search_path`], through [`crate::elf_edit`], which grows the
//! string table when the longer path does not fit. Which core-package directories each wheel
//! kind searches is `rpath_deps` in `therock/wheels.rs` (TheRock's `rpath_dep`; Linux wheels
//! only).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use object::elf::{DT_NULL, DT_RPATH, DT_RUNPATH, DT_STRSZ, DT_STRTAB, FileHeader32, FileHeader64, PT_LOAD};
use object::read::elf::{Dyn as _, FileHeader, ProgramHeader as _};
use object::{Endian as _, Endianness, ReadCache, ReadRef};

pub use crate::elf_edit::RpathError;
use crate::elf_edit::{PathTag, set_search_path};
use crate::tree::Item;

/// The longest search path read back (bytes); a longer one is reported as malformed.
const MAX_PATH_LEN: u64 = 64 * 1024;

/// What `quarry package` does with `DT_RUNPATH` (TheRock's default, or `--runpath-pkg`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RpathPolicy {
    /// Every `DT_RUNPATH` becomes `DT_RPATH`, and `rocm.cfg` says `--disable-new-dtags`.
    #[default]
    ForceRpath,
    /// Files are packaged as they are (`--runpath-pkg`).
    KeepRunpath,
}

/// The search paths of an ELF file's dynamic section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunPaths {
    pub rpath: Option<String>,
    pub runpath: Option<String>,
}

/// One dynamic entry: where its tag is in the file, the tag and the value.
#[derive(Debug, Clone, Copy)]
struct Entry {
    offset: u64,
    tag: i64,
    val: u64,
}

/// A file's dynamic entries (up to `DT_NULL`) and how to write one back.
#[derive(Debug)]
struct Dynamic {
    big_endian: bool,
    /// 4 (ELF32) or 8 (ELF64): the size of `d_tag` and of `d_val`.
    word: u64,
    entries: Vec<Entry>,
    paths: RunPaths,
}

impl Dynamic {
    fn find(&self, tag: object::elf::DynamicTag) -> Option<&Entry> {
        self.entries.iter().find(|e| e.tag == tag.0)
    }

    fn encode(&self, value: u64) -> Vec<u8> {
        let bytes = if self.big_endian { value.to_be_bytes() } else { value.to_le_bytes() };
        // The low `word` bytes: the last ones big-endian, the first ones little-endian.
        let word = usize::try_from(self.word).unwrap_or(8);
        if self.big_endian { bytes[8 - word..].to_vec() } else { bytes[..word].to_vec() }
    }
}

/// The search paths of the ELF file at `path`; `None` when it is not ELF or has no dynamic
/// segment (static executables, object files).
pub fn read_run_paths(path: &Path) -> Result<Option<RunPaths>, RpathError> {
    let file = crate::tree::open_source(path).map_err(|source| RpathError::Io { path: path.to_path_buf(), source })?;
    Ok(read_dynamic(path, file)?.map(|(d, _)| d.paths))
}

/// Turns every `DT_RUNPATH` of the ELF file at `path` into `DT_RPATH`, in place (see the
/// module). Returns whether the file changed; anything not ELF, or without `DT_RUNPATH`, is
/// left as it is.
pub fn force_rpath(path: &Path) -> Result<bool, RpathError> {
    let io = |source| RpathError::Io { path: path.to_path_buf(), source };
    let file = OpenOptions::new().read(true).write(true).open(path).map_err(io)?;
    let Some((dynamic, file)) = read_dynamic(path, file)? else { return Ok(false) };
    let Some(runpath) = dynamic.find(DT_RUNPATH).copied() else { return Ok(false) };
    let mut file = file;
    let mut write_at = |offset: u64, bytes: &[u8]| -> io::Result<()> {
        file.seek(SeekFrom::Start(offset))?;
        file.write_all(bytes)
    };
    if let Some(rpath) = dynamic.find(DT_RPATH) {
        write_at(rpath.offset + dynamic.word, &dynamic.encode(runpath.val)).map_err(io)?;
    }
    for entry in dynamic.entries.iter().filter(|e| e.tag == DT_RUNPATH.0) {
        write_at(entry.offset, &dynamic.encode(DT_RPATH.0.cast_unsigned())).map_err(io)?;
    }
    file.sync_data().map_err(io)?;
    Ok(true)
}

/// TheRock's wheel edits of one ELF file (`_extend_rpath`, then `_normalize_rpath`): each of
/// `additions` appended to the search path in effect (`patchelf --add-rpath`: `:`-separated,
/// RUNPATH's string when the file has both), the result carried by `tag`. Returns the new search
/// path; `None` when the file is not dynamically linked ELF or has no search path to write.
pub fn extend_search_path(path: &Path, additions: &[String], tag: PathTag) -> Result<Option<String>, RpathError> {
    let Some(paths) = read_run_paths(path)? else { return Ok(None) };
    let mut value = paths.runpath.or(paths.rpath).unwrap_or_default();
    for addition in additions {
        if !value.is_empty() {
            value.push(':');
        }
        value.push_str(addition);
    }
    if value.is_empty() {
        return Ok(None);
    }
    set_search_path(path, &value, tag)?;
    Ok(Some(value))
}

/// The dynamic entries of `file` (and the file back, for writing); `None` when it is not ELF
/// or has no dynamic segment.
fn read_dynamic(path: &Path, mut file: File) -> Result<Option<(Dynamic, File)>, RpathError> {
    let mut ident = [0u8; 6];
    let read =
        read_up_to(&mut file, &mut ident).map_err(|source| RpathError::Io { path: path.to_path_buf(), source })?;
    if read < 6 || &ident[..4] != b"\x7fELF" {
        return Ok(None);
    }
    let cache = ReadCache::new(file);
    let parsed = match ident[4] {
        1 => parse::<FileHeader32<Endianness>, _>(&cache),
        2 => parse::<FileHeader64<Endianness>, _>(&cache),
        class => Err(format!("unknown ELF class {class}")),
    };
    let malformed = |message| RpathError::Malformed { path: path.to_path_buf(), message };
    let dynamic = parsed.map_err(malformed)?;
    Ok(dynamic.map(|d| (d, cache.into_inner())))
}

/// Reads into `buf` until it is full or the file ends; the count read.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// The dynamic segment of an ELF file of class `Elf`, its entries' file offsets and the search
/// path strings (found through `DT_STRTAB` and the `PT_LOAD` segments).
fn parse<'data, Elf, R>(data: R) -> Result<Option<Dynamic>, String>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header = Elf::parse(data).map_err(|e| e.to_string())?;
    let endian = header.endian().map_err(|e| e.to_string())?;
    let segments = header.program_headers(endian, data).map_err(|e| e.to_string())?;
    let Some((segment, dyns)) = segments.iter().find_map(|s| s.dynamic(endian, data).transpose().map(|d| (s, d)))
    else {
        return Ok(None);
    };
    let dyns = dyns.map_err(|e| e.to_string())?;
    let size = std::mem::size_of::<Elf::Dyn>() as u64;
    let base: u64 = segment.p_offset(endian).into();
    let mut entries = Vec::new();
    for (i, d) in dyns.iter().enumerate() {
        let tag = d.d_tag(endian).0;
        if tag == DT_NULL.0 {
            break;
        }
        entries.push(Entry { offset: base + i as u64 * size, tag, val: d.val(endian) });
    }
    let loads: Vec<(u64, u64, u64)> = segments
        .iter()
        .filter(|s| s.p_type(endian) == PT_LOAD)
        .map(|s| (s.p_vaddr(endian).into(), s.p_offset(endian).into(), s.p_filesz(endian).into()))
        .collect();
    let mut dynamic =
        Dynamic { big_endian: endian.is_big_endian(), word: size / 2, entries, paths: RunPaths::default() };
    let string = |tag| -> Result<Option<String>, String> {
        match dynamic.find(tag) {
            Some(entry) => string_at(data, &dynamic, &loads, entry.val).map(Some),
            None => Ok(None),
        }
    };
    let paths = RunPaths { rpath: string(DT_RPATH)?, runpath: string(DT_RUNPATH)? };
    dynamic.paths = paths;
    Ok(Some(dynamic))
}

/// The NUL-terminated string at `offset` in the dynamic string table.
fn string_at<'data, R: ReadRef<'data>>(
    data: R,
    dynamic: &Dynamic,
    loads: &[(u64, u64, u64)],
    offset: u64,
) -> Result<String, String> {
    let strtab = dynamic.find(DT_STRTAB).ok_or("a search path without DT_STRTAB")?.val;
    let strsz = dynamic.find(DT_STRSZ).ok_or("a search path without DT_STRSZ")?.val;
    if offset >= strsz {
        return Err(format!("a search path at {offset} past the string table's {strsz} bytes"));
    }
    let (vaddr, file_offset, _) = loads
        .iter()
        .find(|(vaddr, _, filesz)| strtab >= *vaddr && strtab - vaddr < *filesz)
        .ok_or_else(|| format!("DT_STRTAB {strtab:#x} is in no loaded segment"))?;
    let start = file_offset + (strtab - vaddr) + offset;
    let len = (strsz - offset).min(MAX_PATH_LEN);
    let bytes = data.read_bytes_at(start, len).map_err(|()| format!("the string table at {start:#x} is cut short"))?;
    let end = bytes.iter().position(|&b| b == 0).ok_or("a search path without its NUL")?;
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// What [`stage_items`] changed: the edited copies live in `scratch` (removed when dropped).
#[derive(Debug, Default)]
pub struct StagedEdits {
    scratch: Option<tempfile::TempDir>,
    /// Package paths whose `DT_RUNPATH` became `DT_RPATH`, with the search path.
    pub converted: Vec<(String, String)>,
    /// Package paths of `rocm.cfg` files switched to `--disable-new-dtags`.
    pub configs: Vec<String>,
    /// Package paths of files that start as ELF but whose dynamic section cannot be read
    /// (packaged as they are, as TheRock goes on when `readelf` or `patchelf` fails), with why.
    pub unreadable: Vec<(String, String)>,
}

impl StagedEdits {
    /// The directory holding the edited copies, if any file was edited.
    pub fn scratch(&self) -> Option<&Path> {
        self.scratch.as_ref().map(tempfile::TempDir::path)
    }
}

/// Applies `policy` to a package's items ([`stage_files`] over the regular files, `rocm.cfg`
/// included).
pub fn stage_items(
    items: &mut [(String, Item)],
    policy: RpathPolicy,
    scratch_parent: &Path,
) -> Result<StagedEdits, RpathError> {
    let files = items.iter_mut().filter_map(|(path, item)| match item {
        Item::File { source, .. } => Some((path.as_str(), source)),
        Item::Dir { .. } | Item::Symlink { .. } => None,
    });
    stage_files(files, policy, true, scratch_parent)
}

/// Applies `policy` to `(package path, source)` pairs: every ELF file with a `DT_RUNPATH`, and
/// (with `compiler_configs`) every `rocm.cfg` that enables new dtags, is copied into a scratch
/// directory under `scratch_parent` and edited there, and its source then points at the copy;
/// the sources are never written. A file that starts as ELF but cannot be parsed is packaged
/// as it is and listed in [`StagedEdits::unreadable`].
pub fn stage_files<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a mut PathBuf)>,
    policy: RpathPolicy,
    compiler_configs: bool,
    scratch_parent: &Path,
) -> Result<StagedEdits, RpathError> {
    stage(files, policy, compiler_configs, &|_| Some(Vec::new()), scratch_parent)
}

/// [`stage_files`] for a wheel's files, as TheRock's `_populate_file` does on Linux: every
/// dynamically linked ELF file gets `additions(package path)` appended to its search path
/// ([`extend_search_path`]), as `DT_RPATH` (as `DT_RUNPATH` with [`RpathPolicy::KeepRunpath`]);
/// a path `additions` gives `None` for is left as it is.
pub fn stage_wheel_files<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a mut PathBuf)>,
    policy: RpathPolicy,
    additions: &dyn Fn(&str) -> Option<Vec<String>>,
    scratch_parent: &Path,
) -> Result<StagedEdits, RpathError> {
    stage(files, policy, false, additions, scratch_parent)
}

fn stage<'a>(
    files: impl IntoIterator<Item = (&'a str, &'a mut PathBuf)>,
    policy: RpathPolicy,
    compiler_configs: bool,
    additions: &dyn Fn(&str) -> Option<Vec<String>>,
    scratch_parent: &Path,
) -> Result<StagedEdits, RpathError> {
    let mut edits = StagedEdits::default();
    // One copy per source and search path additions (a file's additions follow its directory).
    let mut copies: BTreeMap<(PathBuf, Vec<String>), PathBuf> = BTreeMap::new();
    for (package_path, source) in files {
        let Some(added) = additions(package_path) else { continue };
        if policy == RpathPolicy::KeepRunpath && added.is_empty() {
            continue;
        }
        let key = (source.clone(), added);
        if let Some(copy) = copies.get(&key) {
            *source = copy.clone();
            continue;
        }
        let edit = if compiler_configs && package_path.rsplit('/').next() == Some("rocm.cfg") {
            staged_config(source, &mut edits, scratch_parent, copies.len())?
        } else {
            match staged_elf(source, &key.1, policy, &mut edits, scratch_parent, copies.len()) {
                Err(RpathError::Malformed { message, .. }) => {
                    tracing::warn!(path = package_path, "packaged as it is: malformed ELF file: {message}");
                    edits.unreadable.push((package_path.to_owned(), message));
                    None
                }
                other => other?,
            }
        };
        let Some(copy) = edit else { continue };
        match copy {
            Staged::Elf(runpath) => edits.converted.push((package_path.to_owned(), runpath)),
            Staged::Config => edits.configs.push(package_path.to_owned()),
        }
        let copy = copy_path(&edits, copies.len(), source);
        copies.insert(key, copy.clone());
        *source = copy;
    }
    Ok(edits)
}

enum Staged {
    /// An ELF file converted, with its search path.
    Elf(String),
    Config,
}

/// Where the `n`th edited copy of `source` lives.
fn copy_path(edits: &StagedEdits, n: usize, source: &Path) -> PathBuf {
    let name = source.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    edits.scratch().map(|s| s.join(format!("{n}-{name}"))).unwrap_or_default()
}

/// The scratch directory, created on first use.
fn scratch(edits: &mut StagedEdits, parent: &Path) -> Result<(), RpathError> {
    if edits.scratch.is_none() {
        let dir = tempfile::Builder::new()
            .prefix(".quarry-elf-")
            .tempdir_in(parent)
            .map_err(|source| RpathError::Io { path: parent.to_path_buf(), source })?;
        edits.scratch = Some(dir);
    }
    Ok(())
}

/// An edited copy of `source` when it is ELF: with `additions`, its search path extended
/// ([`extend_search_path`]); without, its `DT_RUNPATH` made `DT_RPATH` (when it has one).
fn staged_elf(
    source: &Path,
    additions: &[String],
    policy: RpathPolicy,
    edits: &mut StagedEdits,
    parent: &Path,
    n: usize,
) -> Result<Option<Staged>, RpathError> {
    let Some(paths) = read_run_paths(source)? else { return Ok(None) };
    if additions.is_empty() && paths.runpath.is_none() {
        return Ok(None);
    }
    scratch(edits, parent)?;
    let copy = copy_path(edits, n, source);
    let io = |source| RpathError::Io { path: copy.clone(), source };
    let mut from =
        crate::tree::open_source(source).map_err(|e| RpathError::Io { path: source.to_path_buf(), source: e })?;
    io::copy(&mut from, &mut File::create(&copy).map_err(io)?).map_err(io)?;
    std::fs::set_permissions(&copy, from.metadata().map_err(io)?.permissions()).map_err(io)?;
    make_writable(&copy).map_err(io)?;
    if additions.is_empty() {
        force_rpath(&copy)?;
        return Ok(paths.runpath.map(Staged::Elf));
    }
    let tag = match policy {
        RpathPolicy::ForceRpath => PathTag::Rpath,
        RpathPolicy::KeepRunpath => PathTag::Runpath,
    };
    Ok(extend_search_path(&copy, additions, tag)?.map(Staged::Elf))
}

/// A copy of TheRock's `rocm.cfg` with `enable-new-dtags` switched to `disable-new-dtags`
/// (`update_compiler_config`), when it has any.
fn staged_config(
    source: &Path,
    edits: &mut StagedEdits,
    parent: &Path,
    n: usize,
) -> Result<Option<Staged>, RpathError> {
    let mut text = Vec::new();
    crate::tree::open_source(source)
        .and_then(|mut f| io::Read::read_to_end(&mut f, &mut text))
        .map_err(|e| RpathError::Io { path: source.to_path_buf(), source: e })?;
    let Ok(text) = String::from_utf8(text) else { return Ok(None) };
    if !text.contains("enable-new-dtags") {
        return Ok(None);
    }
    scratch(edits, parent)?;
    let copy = copy_path(edits, n, source);
    std::fs::write(&copy, text.replace("enable-new-dtags", "disable-new-dtags"))
        .map_err(|source| RpathError::Io { path: copy.clone(), source })?;
    Ok(Some(Staged::Config))
}

/// Gives the owner write permission (a copy of a read-only file is read-only).
fn make_writable(path: &Path) -> io::Result<()> {
    let mut permissions = std::fs::metadata(path)?.permissions();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        permissions.set_mode(permissions.mode() | 0o200);
    }
    #[cfg(windows)]
    {
        #[allow(clippy::permissions_set_readonly_false)]
        permissions.set_readonly(false);
    }
    std::fs::set_permissions(path, permissions)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal little-endian ELF64 shared object: header, one PT_LOAD over the whole file,
    /// one PT_DYNAMIC, a string table and dynamic entries.
    pub(crate) fn elf64(tags: &[(i64, u64)], strings: &[u8]) -> Vec<u8> {
        let (ehsize, phsize) = (64u64, 56u64);
        let strtab = ehsize + 2 * phsize;
        let dynamic = strtab + strings.len() as u64;
        let mut entries: Vec<(i64, u64)> = vec![(DT_STRTAB.0, strtab), (DT_STRSZ.0, strings.len() as u64)];
        entries.extend_from_slice(tags);
        entries.push((0, 0));
        let total = dynamic + 16 * entries.len() as u64;
        let mut out = Vec::new();
        out.extend_from_slice(b"\x7fELF\x02\x01\x01");
        out.resize(16, 0);
        let h16 = |out: &mut Vec<u8>, v: u16| out.extend_from_slice(&v.to_le_bytes());
        let h32 = |out: &mut Vec<u8>, v: u32| out.extend_from_slice(&v.to_le_bytes());
        let h64 = |out: &mut Vec<u8>, v: u64| out.extend_from_slice(&v.to_le_bytes());
        h16(&mut out, 3); // ET_DYN
        h16(&mut out, 62); // x86-64
        h32(&mut out, 1);
        h64(&mut out, 0); // entry
        h64(&mut out, ehsize); // phoff
        h64(&mut out, 0); // shoff
        h32(&mut out, 0);
        for v in [ehsize as u16, phsize as u16, 2, 64, 0, 0] {
            h16(&mut out, v);
        }
        for (p_type, offset, size) in [(1u32, 0, total), (2, dynamic, total - dynamic)] {
            h32(&mut out, p_type);
            h32(&mut out, 6);
            for v in [offset, offset, offset, size, size, 8] {
                h64(&mut out, v);
            }
        }
        out.extend_from_slice(strings);
        for (tag, val) in entries {
            h64(&mut out, tag.cast_unsigned());
            h64(&mut out, val);
        }
        out
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn runpath_becomes_rpath_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let strings = b"\0$ORIGIN/../lib\0/old\0";
        let path = write(dir.path(), "lib.so", &elf64(&[(DT_RUNPATH.0, 1)], strings));
        let before = std::fs::read(&path).unwrap();
        let paths = read_run_paths(&path).unwrap().unwrap();
        assert_eq!(paths, RunPaths { rpath: None, runpath: Some("$ORIGIN/../lib".into()) });
        assert!(force_rpath(&path).unwrap());
        let after = std::fs::read(&path).unwrap();
        assert_eq!(before.len(), after.len());
        assert_eq!(before.iter().zip(&after).filter(|(a, b)| a != b).count(), 1, "one byte: 29 -> 15");
        let paths = read_run_paths(&path).unwrap().unwrap();
        assert_eq!(paths, RunPaths { rpath: Some("$ORIGIN/../lib".into()), runpath: None });
        assert!(!force_rpath(&path).unwrap(), "nothing left to convert");

        // Both tags: the RPATH takes the RUNPATH's string (the one in effect).
        let both = write(dir.path(), "both.so", &elf64(&[(DT_RPATH.0, 16), (DT_RUNPATH.0, 1)], strings));
        assert!(force_rpath(&both).unwrap());
        let paths = read_run_paths(&both).unwrap().unwrap();
        assert_eq!(paths, RunPaths { rpath: Some("$ORIGIN/../lib".into()), runpath: None });
    }

    #[test]
    fn not_elf_and_hostile_elf() {
        let dir = tempfile::tempdir().unwrap();
        let text = write(dir.path(), "a.txt", b"hello, world");
        assert_eq!(read_run_paths(&text).unwrap(), None);
        assert!(!force_rpath(&text).unwrap());
        let good = elf64(&[(DT_RUNPATH.0, 1)], b"\0/x\0");
        // Cut short anywhere, or with the string offset past the table: an error or nothing, no panic.
        for len in [7, 20, 64, 100, 140, good.len() - 8] {
            let cut = write(dir.path(), "cut.so", &good[..len]);
            let _ = read_run_paths(&cut);
            let _ = force_rpath(&cut);
        }
        let past = write(dir.path(), "past.so", &elf64(&[(DT_RUNPATH.0, 99)], b"\0/x\0"));
        let err = read_run_paths(&past).unwrap_err().to_string();
        assert!(err.contains("malformed ELF file") && err.contains("past the string table"), "{err}");
        let mut class = good.clone();
        class[4] = 9;
        let err = read_run_paths(&write(dir.path(), "class.so", &class)).unwrap_err().to_string();
        assert!(err.contains("unknown ELF class 9"), "{err}");
    }

    #[test]
    fn staged_copies_leave_the_sources_alone() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        let dest = dir.path().join("dest");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::create_dir_all(&dest).unwrap();
        let lib = write(&src, "libx.so", &elf64(&[(DT_RUNPATH.0, 1)], b"\0$ORIGIN\0"));
        let plain = write(&src, "README", b"text");
        let cfg = write(&src, "rocm.cfg", b"-Wl,--enable-new-dtags\n");
        let broken = write(&src, "broken.so", &elf64(&[(DT_RUNPATH.0, 99)], b"\0$ORIGIN\0"));
        let original = std::fs::read(&lib).unwrap();
        let file = |source: &Path| Item::File { source: source.to_path_buf(), mode: 0o644 };
        let mut items = vec![
            ("opt/lib/libx.so".to_owned(), file(&lib)),
            ("opt/lib/libx-hardlink.so".to_owned(), file(&lib)),
            ("opt/README".to_owned(), file(&plain)),
            ("opt/bin/rocm.cfg".to_owned(), file(&cfg)),
            ("opt/lib/broken.so".to_owned(), file(&broken)),
        ];
        let untouched = items.clone();
        let kept = stage_items(&mut items, RpathPolicy::KeepRunpath, &dest).unwrap();
        assert!(kept.converted.is_empty() && kept.scratch().is_none());
        assert_eq!(items, untouched);
        let edits = stage_items(&mut items, RpathPolicy::ForceRpath, &dest).unwrap();
        assert_eq!(edits.converted, [("opt/lib/libx.so".to_owned(), "$ORIGIN".to_owned())]);
        assert_eq!(edits.configs, ["opt/bin/rocm.cfg"]);
        assert_eq!(edits.unreadable.len(), 1);
        assert!(edits.unreadable[0].1.contains("past the string table"), "{:?}", edits.unreadable);
        assert!(matches!(&items[4].1, Item::File { source, .. } if *source == broken));
        assert_eq!(std::fs::read(&lib).unwrap(), original, "the source is not written");
        let source = |i: usize| match &items[i].1 {
            Item::File { source, .. } => source.clone(),
            other => panic!("{other:?}"),
        };
        assert!(source(0).starts_with(edits.scratch().unwrap()));
        assert_eq!(source(0), source(1), "one copy per source");
        assert_eq!(source(2), plain);
        let paths = read_run_paths(&source(0)).unwrap().unwrap();
        assert_eq!(paths.rpath.as_deref(), Some("$ORIGIN"));
        assert_eq!(std::fs::read_to_string(source(3)).unwrap(), "-Wl,--disable-new-dtags\n");
        let scratch = edits.scratch().unwrap().to_path_buf();
        drop(edits);
        assert!(!scratch.exists());
    }
}
