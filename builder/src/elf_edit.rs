//! Setting an ELF file's library search path to any string, as `patchelf --set-rpath` does
//! (`--force-rpath` or not), without reading the file whole.
//!
//! A string that fits where the old one is (and that nothing else in the string table points
//! into) is written in place. A longer one goes into a copy of `.dynstr` with the new string at
//! its end, appended to the file in a new read-only `PT_LOAD` segment. That segment also holds
//! the program header table, moved there so it has room for the new entry (the old table stays
//! where it was, unused): `e_phoff`, `PT_PHDR`, `DT_STRTAB`, `DT_STRSZ` and the `.dynstr`
//! section header are updated. The new segment keeps the first segment's offset-to-address
//! difference, so `load address + e_phoff` (what kernels before 5.18 give as `AT_PHDR`) still
//! finds the table; the gap up to it is zeros. A file without a search path takes a spare
//! `DT_NULL` slot of its dynamic segment (GNU ld and gold leave a few); without one, the dynamic
//! section is copied with the new entry after the string table, `PT_DYNAMIC` and the `.dynamic`
//! section header point there and the new segment is writable (the loader writes to it).
//!
//! What cannot be done soundly is refused with [`RpathError::Unsupported`], never written:
//! no room left in a 32-bit address space, too many program headers, a first segment whose
//! offset and address disagree modulo the alignment. Offsets and sizes from the file are checked
//! before use ([`RpathError::Malformed`]). Only headers, the dynamic segment and the string table's
//! users are read; the string table is copied in 64 KiB chunks.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use object::elf::{
    DT_AUDIT, DT_AUXILIARY, DT_CONFIG, DT_DEPAUDIT, DT_FILTER, DT_NEEDED, DT_NULL, DT_RPATH, DT_RUNPATH, DT_SONAME,
    DT_STRSZ, DT_STRTAB, FileHeader32, FileHeader64, PF_R, PF_W, PT_DYNAMIC, PT_LOAD, PT_PHDR, ProgramFlags,
    ProgramType, SHF_ALLOC, SHT_DYNAMIC, SHT_DYNSYM, SHT_STRTAB,
};
use object::read::elf::{Dyn as _, FileHeader, ProgramHeader as _, SectionHeader as _, Sym as _};
use object::{Endian as _, Endianness, ReadCache, ReadRef};

/// Why a file's search path could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum RpathError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: malformed ELF file: {message}", path.display())]
    Malformed { path: PathBuf, message: String },
    /// A well-formed file whose search path cannot be changed soundly (nothing was written).
    #[error("{}: cannot change this ELF file's search path: {message}", path.display())]
    Unsupported { path: PathBuf, message: String },
}

/// The longest search path written (bytes).
const MAX_PATH_LEN: usize = 64 * 1024;
/// The largest `.dynstr` copied into a new segment (bytes).
const MAX_STRTAB: u64 = 512 * 1024 * 1024;

/// Which dynamic tag carries the search path after the edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathTag {
    /// `DT_RPATH` (`--force-rpath`): applies to the file's dependencies too, and
    /// `LD_LIBRARY_PATH` does not override it.
    Rpath,
    /// `DT_RUNPATH` (what `patchelf --set-rpath` writes by default).
    Runpath,
}

/// Where the new search path went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The file already had it, with that tag.
    Unchanged,
    /// Over the old string.
    InPlace,
    /// In a copy of the string table, in a new segment at the end of the file.
    Appended,
}

/// One program header, whatever the class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Phdr {
    p_type: ProgramType,
    p_flags: ProgramFlags,
    offset: u64,
    vaddr: u64,
    paddr: u64,
    filesz: u64,
    memsz: u64,
    align: u64,
}

/// What the edit needs to know of a file.
#[derive(Debug)]
struct Layout {
    is64: bool,
    big_endian: bool,
    file_len: u64,
    phentsize: u64,
    phdrs: Vec<Phdr>,
    /// File offset of the dynamic segment and how many entries it has room for.
    dyn_offset: u64,
    dyn_slots: u64,
    /// The entries before the first `DT_NULL`.
    entries: Vec<(i64, u64)>,
    strtab_offset: u64,
    strsz: u64,
    /// File offsets of the `.dynstr` and `.dynamic` section headers, if the file has them.
    dynstr_header: Option<u64>,
    dynamic_header: Option<u64>,
    /// Every string table offset the symbols and version records use; `None` when unknown
    /// (no section headers), and then nothing is written in place.
    string_users: Option<Vec<u64>>,
}

impl Layout {
    fn word(&self) -> u64 {
        if self.is64 { 8 } else { 4 }
    }

    fn encode(&self, value: u64, size: usize) -> Vec<u8> {
        let bytes = if self.big_endian { value.to_be_bytes() } else { value.to_le_bytes() };
        if self.big_endian { bytes[8 - size..].to_vec() } else { bytes[..size].to_vec() }
    }

    fn encode_word(&self, value: u64) -> Vec<u8> {
        self.encode(value, if self.is64 { 8 } else { 4 })
    }

    fn encode_phdr(&self, p: &Phdr) -> Vec<u8> {
        let mut out = self.encode(u64::from(p.p_type.0), 4);
        if self.is64 {
            out.extend(self.encode(u64::from(p.p_flags.0), 4));
            for v in [p.offset, p.vaddr, p.paddr, p.filesz, p.memsz, p.align] {
                out.extend(self.encode(v, 8));
            }
        } else {
            for v in [p.offset, p.vaddr, p.paddr, p.filesz, p.memsz] {
                out.extend(self.encode(v, 4));
            }
            out.extend(self.encode(u64::from(p.p_flags.0), 4));
            out.extend(self.encode(p.align, 4));
        }
        out
    }

    /// The file offset of dynamic entry `index`.
    fn entry_offset(&self, index: usize) -> u64 {
        self.dyn_offset + index as u64 * 2 * self.word()
    }

    /// The string at `offset` in the string table.
    fn string(&self, file: &mut File, offset: u64) -> Result<String, String> {
        if offset >= self.strsz {
            return Err(format!("a search path at {offset} past the string table's {} bytes", self.strsz));
        }
        let len = (self.strsz - offset).min(MAX_PATH_LEN as u64 + 1);
        let mut bytes = vec![0u8; usize::try_from(len).map_err(|e| e.to_string())?];
        file.seek(SeekFrom::Start(self.strtab_offset + offset)).map_err(|e| e.to_string())?;
        file.read_exact(&mut bytes).map_err(|_| "the string table is cut short".to_owned())?;
        let end = bytes.iter().position(|&b| b == 0).ok_or("a search path without its NUL")?;
        Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }
}

/// Sets the search path of the ELF file at `path` to `value`, carried by `tag` (every
/// `DT_RPATH` and `DT_RUNPATH` entry is rewritten; one is added when there is none). The file
/// is edited in place: callers edit their own copy.
pub fn set_search_path(path: &Path, value: &str, tag: PathTag) -> Result<Placement, RpathError> {
    let io_err = |source| RpathError::Io { path: path.to_path_buf(), source };
    let malformed = |message: String| RpathError::Malformed { path: path.to_path_buf(), message };
    let unsupported = |message: String| RpathError::Unsupported { path: path.to_path_buf(), message };
    if value.len() > MAX_PATH_LEN || value.contains('\0') {
        return Err(unsupported(format!("a search path of {} bytes, or with a NUL", value.len())));
    }
    let file = OpenOptions::new().read(true).write(true).open(path).map_err(io_err)?;
    let (layout, mut file) = read_layout(file, value.len() as u64).map_err(|e| match e {
        LayoutError::Io(source) => io_err(source),
        LayoutError::Malformed(m) => malformed(m),
        LayoutError::NoDynamic => unsupported("not a dynamically linked ELF file".into()),
    })?;
    let plan = plan_edit(&layout, &mut file, value, tag).map_err(|e| match e {
        PlanError::Malformed(m) => malformed(m),
        PlanError::Unsupported(m) => unsupported(m),
    })?;
    if let Some(plan) = &plan {
        apply(&layout, &mut file, value, plan).map_err(io_err)?;
        file.sync_data().map_err(io_err)?;
    }
    Ok(plan.map_or(Placement::Unchanged, |p| p.placement()))
}

enum LayoutError {
    Io(io::Error),
    Malformed(String),
    NoDynamic,
}

enum PlanError {
    Malformed(String),
    Unsupported(String),
}

/// The layout of `file`; the string table's users are read only when a search path of
/// `value_len` bytes could be written in place.
fn read_layout(mut file: File, value_len: u64) -> Result<(Layout, File), LayoutError> {
    let mut ident = [0u8; 6];
    file.read_exact(&mut ident).map_err(|_| LayoutError::Malformed("not an ELF file".into()))?;
    if &ident[..4] != b"\x7fELF" {
        return Err(LayoutError::Malformed("not an ELF file".into()));
    }
    let cache = ReadCache::new(file);
    let layout = match ident[4] {
        1 => parse::<FileHeader32<Endianness>, _>(&cache, false, value_len),
        2 => parse::<FileHeader64<Endianness>, _>(&cache, true, value_len),
        class => Err(LayoutError::Malformed(format!("unknown ELF class {class}"))),
    }?;
    Ok((layout, cache.into_inner()))
}

fn parse<'data, Elf, R>(data: R, is64: bool, value_len: u64) -> Result<Layout, LayoutError>
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let bad = |e: object::Error| LayoutError::Malformed(e.to_string());
    let header = Elf::parse(data).map_err(bad)?;
    let endian = header.endian().map_err(bad)?;
    if header.e_phnum(endian) == 0xffff {
        return Err(LayoutError::Malformed("PN_XNUM program headers".into()));
    }
    let segments = header.program_headers(endian, data).map_err(bad)?;
    let phdrs: Vec<Phdr> = segments
        .iter()
        .map(|s| Phdr {
            p_type: s.p_type(endian),
            p_flags: s.p_flags(endian),
            offset: s.p_offset(endian).into(),
            vaddr: s.p_vaddr(endian).into(),
            paddr: s.p_paddr(endian).into(),
            filesz: s.p_filesz(endian).into(),
            memsz: s.p_memsz(endian).into(),
            align: s.p_align(endian).into(),
        })
        .collect();
    let Some((segment, dyns)) = segments.iter().find_map(|s| s.dynamic(endian, data).transpose().map(|d| (s, d)))
    else {
        return Err(LayoutError::NoDynamic);
    };
    let dyns = dyns.map_err(bad)?;
    let entries: Vec<(i64, u64)> =
        dyns.iter().map(|d| (d.d_tag(endian).0, d.val(endian))).take_while(|(tag, _)| *tag != DT_NULL.0).collect();
    let find = |tag: object::elf::DynamicTag| entries.iter().find(|(t, _)| *t == tag.0).map(|(_, v)| *v);
    let (Some(strtab_vaddr), Some(strsz)) = (find(DT_STRTAB), find(DT_STRSZ)) else {
        return Err(LayoutError::Malformed("a dynamic section without DT_STRTAB or DT_STRSZ".into()));
    };
    let file_len = data.len().map_err(|()| LayoutError::Io(io::Error::other("cannot read the file's length")))?;
    let strtab_offset = phdrs
        .iter()
        .filter(|p| p.p_type == PT_LOAD)
        .find(|p| strtab_vaddr >= p.vaddr && strtab_vaddr - p.vaddr < p.filesz)
        .map(|p| p.offset + (strtab_vaddr - p.vaddr))
        .ok_or_else(|| LayoutError::Malformed(format!("DT_STRTAB {strtab_vaddr:#x} is in no loaded segment")))?;
    if strtab_offset.checked_add(strsz).is_none_or(|end| end > file_len) {
        return Err(LayoutError::Malformed(format!("the string table ({strsz} bytes) runs past the end of the file")));
    }
    // The longest search path there is (up to its NUL, or to the end of the table).
    let longest = entries
        .iter()
        .filter(|(t, v)| (*t == DT_RPATH.0 || *t == DT_RUNPATH.0) && *v < strsz)
        .filter_map(|(_, v)| data.read_bytes_at(strtab_offset + v, (strsz - v).min(MAX_PATH_LEN as u64 + 1)).ok())
        .map(|bytes| bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len()) as u64)
        .max();
    let in_place = longest.is_some_and(|len| value_len <= len);
    let (dynstr_header, dynamic_header, string_users) =
        sections::<Elf, R>(header, endian, data, strtab_vaddr, in_place);
    Ok(Layout {
        is64,
        big_endian: endian.is_big_endian(),
        file_len,
        phentsize: u64::from(header.e_phentsize(endian)),
        phdrs,
        dyn_offset: segment.p_offset(endian).into(),
        dyn_slots: dyns.len() as u64,
        entries,
        strtab_offset,
        strsz,
        dynstr_header,
        dynamic_header,
        string_users,
    })
}

/// The `.dynstr` and `.dynamic` section headers' file offsets, and (`with_users`) the string
/// offsets the dynamic symbols and the version records use (`None` when the sections cannot be
/// read).
fn sections<'data, Elf, R>(
    header: &Elf,
    endian: Endianness,
    data: R,
    strtab_vaddr: u64,
    with_users: bool,
) -> (Option<u64>, Option<u64>, Option<Vec<u64>>)
where
    Elf: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let Ok(table) = header.sections(endian, data) else { return (None, None, None) };
    if table.is_empty() {
        return (None, None, None);
    }
    let shoff: u64 = header.e_shoff(endian).into();
    let shentsize = u64::from(header.e_shentsize(endian));
    let dynstr = table
        .enumerate()
        .find(|(_, s)| {
            s.sh_type(endian) == SHT_STRTAB
                && s.sh_flags(endian).0 & SHF_ALLOC.0 != 0
                && s.sh_addr(endian).into() == strtab_vaddr
        })
        .map(|(index, _)| shoff + index.0 as u64 * shentsize);
    let dynamic = table
        .enumerate()
        .find(|(_, s)| s.sh_type(endian) == SHT_DYNAMIC)
        .map(|(index, _)| shoff + index.0 as u64 * shentsize);
    let users = || -> object::Result<Vec<u64>> {
        let mut users = Vec::new();
        let symbols = table.symbols(endian, data, SHT_DYNSYM)?;
        users.extend(symbols.iter().map(|s| u64::from(s.st_name(endian))));
        if let Some((mut needs, _)) = table.gnu_verneed(endian, data)? {
            while let Some((need, mut aux)) = needs.next()? {
                users.push(u64::from(need.vn_file.get(endian)));
                while let Some(a) = aux.next()? {
                    users.push(u64::from(a.vna_name.get(endian)));
                }
            }
        }
        if let Some((mut defs, _)) = table.gnu_verdef(endian, data)? {
            while let Some((_, mut aux)) = defs.next()? {
                while let Some(a) = aux.next()? {
                    users.push(u64::from(a.vda_name.get(endian)));
                }
            }
        }
        Ok(users)
    };
    (dynstr, dynamic, if with_users { users().ok() } else { None })
}

/// What [`apply`] writes.
#[derive(Debug)]
struct Plan {
    /// Dynamic entries to write, `(index, tag, value)`.
    entries: Vec<(usize, i64, u64)>,
    /// Write the string over the old one (`offset`, bytes to cover) ...
    in_place: Option<(u64, u64)>,
    /// ... or into a new segment.
    segment: Option<Segment>,
}

impl Plan {
    fn placement(&self) -> Placement {
        if self.segment.is_some() { Placement::Appended } else { Placement::InPlace }
    }
}

#[derive(Debug)]
struct Segment {
    offset: u64,
    vaddr: u64,
    phdrs: Vec<Phdr>,
    /// Bytes of program headers at the segment's start; the string table follows.
    table_size: u64,
    strsz: u64,
    /// The dynamic section moved after the string table (where from the segment's start, and
    /// its entries), when a new entry did not fit in the old one.
    dynamic: Option<(u64, Vec<(i64, u64)>)>,
}

/// Dynamic string tags other than the search paths.
const STRING_TAGS: [object::elf::DynamicTag; 7] =
    [DT_NEEDED, DT_SONAME, DT_AUXILIARY, DT_FILTER, DT_CONFIG, DT_DEPAUDIT, DT_AUDIT];

fn plan_edit(layout: &Layout, file: &mut File, value: &str, tag: PathTag) -> Result<Option<Plan>, PlanError> {
    let target = match tag {
        PathTag::Rpath => DT_RPATH.0,
        PathTag::Runpath => DT_RUNPATH.0,
    };
    let paths: Vec<usize> =
        (0..layout.entries.len()).filter(|&i| [DT_RPATH.0, DT_RUNPATH.0].contains(&layout.entries[i].0)).collect();
    // The string in effect: RUNPATH's when there is one (the loader then ignores RPATH).
    let current = paths
        .iter()
        .copied()
        .find(|&i| layout.entries[i].0 == DT_RUNPATH.0)
        .or_else(|| paths.first().copied())
        .map(|i| layout.entries[i].1);
    let old = match current {
        Some(offset) => Some((offset, layout.string(file, offset).map_err(PlanError::Malformed)?)),
        None => None,
    };
    let same_tags = paths.iter().all(|&i| layout.entries[i].0 == target);
    if let Some((offset, text)) = &old
        && text == value
        && same_tags
        && paths.iter().all(|&i| layout.entries[i].1 == *offset)
    {
        return Ok(None);
    }
    // No search path entry and no spare slot for one: the dynamic section moves.
    let move_dynamic = paths.is_empty() && (layout.entries.len() as u64) + 1 >= layout.dyn_slots;
    let slots: Vec<usize> = if paths.is_empty() { vec![layout.entries.len()] } else { paths.clone() };
    let in_place = old.as_ref().and_then(|(offset, text)| {
        let span = text.len() as u64;
        let fits = value.len() as u64 <= span;
        (fits && writable_in_place(layout, &paths, *offset, span)).then_some((*offset, span + 1))
    });
    let (string_offset, mut segment) = match in_place {
        Some((offset, _)) => (offset, None),
        None => {
            let moved = move_dynamic.then_some(layout.entries.len() as u64 + 2);
            (layout.strsz, Some(new_segment(layout, value.len() as u64 + 1, moved)?))
        }
    };
    let mut entries: Vec<(usize, i64, u64)> = slots.iter().map(|&i| (i, target, string_offset)).collect();
    if paths.is_empty() {
        entries.push((slots[0] + 1, DT_NULL.0, 0));
    }
    if let Some(segment) = &segment {
        for (i, (t, _)) in layout.entries.iter().enumerate() {
            if *t == DT_STRTAB.0 {
                entries.push((i, *t, segment.vaddr + segment.table_size));
            } else if *t == DT_STRSZ.0 {
                entries.push((i, *t, segment.strsz));
            }
        }
    }
    if let Some(Segment { dynamic: Some((_, table)), .. }) = &mut segment {
        // Every entry goes to the moved table; the old one is left as it was.
        *table = layout.entries.clone();
        table.extend([(0, 0), (0, 0)]);
        for (index, tag, value) in entries.drain(..) {
            table[index] = (tag, value);
        }
    }
    Ok(Some(Plan { entries, in_place, segment }))
}

/// Whether the string at `offset` (`span` bytes before its NUL) can be overwritten: nothing but
/// the search path entries points into it.
fn writable_in_place(layout: &Layout, paths: &[usize], offset: u64, span: u64) -> bool {
    let Some(users) = &layout.string_users else { return false };
    let inside = |at: u64| at >= offset && at < offset + span;
    let dynamic = layout
        .entries
        .iter()
        .enumerate()
        .filter(|(i, (t, _))| !paths.contains(i) && STRING_TAGS.iter().any(|s| s.0 == *t))
        .any(|(_, (_, v))| inside(*v));
    let shared_path = paths.iter().any(|&i| layout.entries[i].1 != offset && inside(layout.entries[i].1));
    !dynamic && !shared_path && !users.iter().any(|&u| inside(u))
}

/// The new segment: program headers (the old ones, `PT_PHDR` moved, and the new `PT_LOAD`),
/// then the string table with `extra` more bytes, then (`dyn_entries`) room for a dynamic
/// section of that many entries, `PT_DYNAMIC` moved there and the segment writable (the
/// loader writes to the dynamic section).
fn new_segment(layout: &Layout, extra: u64, dyn_entries: Option<u64>) -> Result<Segment, PlanError> {
    let unsupported = |m: &str| PlanError::Unsupported(m.to_owned());
    let malformed = |m: &str| PlanError::Malformed(m.to_owned());
    let loads: Vec<&Phdr> = layout.phdrs.iter().filter(|p| p.p_type == PT_LOAD).collect();
    let first = loads.first().ok_or_else(|| malformed("no PT_LOAD segment"))?;
    let bias = first.vaddr.checked_sub(first.offset).ok_or_else(|| unsupported("a first segment below its offset"))?;
    let align = loads.iter().map(|p| p.align).max().unwrap_or(1).max(1);
    if !align.is_power_of_two() || bias % align != 0 {
        return Err(unsupported("a first segment whose address and offset disagree modulo the alignment"));
    }
    let mem_end = loads
        .iter()
        .map(|p| p.vaddr.checked_add(p.memsz.max(p.filesz)))
        .try_fold(0u64, |end, e| e.map(|e| end.max(e)))
        .ok_or_else(|| malformed("a segment past the end of the address space"))?;
    if layout.strsz > MAX_STRTAB {
        return Err(unsupported("a string table over 512 MiB"));
    }
    let expected = if layout.is64 { 56 } else { 32 };
    if layout.phentsize != expected {
        return Err(malformed("program headers of an unexpected size"));
    }
    let count = layout.phdrs.len() as u64 + 1;
    if count >= 0xffff {
        return Err(unsupported("too many program headers"));
    }
    let start = layout.file_len.max(mem_end.saturating_sub(bias));
    let offset = start.div_ceil(align).checked_mul(align).ok_or_else(|| malformed("offsets overflow"))?;
    let vaddr = offset.checked_add(bias).ok_or_else(|| malformed("addresses overflow"))?;
    let table_size = count * layout.phentsize;
    let strsz = layout.strsz + extra;
    let word = layout.word();
    let dyn_at = (table_size + strsz).div_ceil(word) * word;
    let size = match dyn_entries {
        Some(n) => dyn_at + n * 2 * word,
        None => table_size + strsz,
    };
    if !layout.is64 && vaddr.checked_add(size).is_none_or(|end| end > u64::from(u32::MAX)) {
        return Err(unsupported("no room left in a 32-bit address space"));
    }
    let mut phdrs = layout.phdrs.clone();
    for p in phdrs.iter_mut().filter(|p| p.p_type == PT_PHDR) {
        *p = Phdr { offset, vaddr, paddr: vaddr, filesz: table_size, memsz: table_size, ..*p };
    }
    if let Some(n) = dyn_entries {
        let (at, size) = (vaddr + dyn_at, n * 2 * word);
        for p in phdrs.iter_mut().filter(|p| p.p_type == PT_DYNAMIC) {
            *p = Phdr { offset: offset + dyn_at, vaddr: at, paddr: at, filesz: size, memsz: size, ..*p };
        }
    }
    let flags = if dyn_entries.is_some() { PF_R.0 | PF_W.0 } else { PF_R.0 };
    phdrs.push(Phdr {
        p_type: PT_LOAD,
        p_flags: ProgramFlags(flags),
        offset,
        vaddr,
        paddr: vaddr,
        filesz: size,
        memsz: size,
        align,
    });
    let dynamic = dyn_entries.map(|_| (dyn_at, Vec::new()));
    Ok(Segment { offset, vaddr, phdrs, table_size, strsz, dynamic })
}

fn write_at(file: &mut File, offset: u64, bytes: &[u8]) -> io::Result<()> {
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(bytes)
}

fn apply(layout: &Layout, file: &mut File, value: &str, plan: &Plan) -> io::Result<()> {
    let mut string = value.as_bytes().to_vec();
    if let Some((offset, cover)) = plan.in_place {
        string.resize(usize::try_from(cover).map_err(io::Error::other)?, 0);
        write_at(file, layout.strtab_offset + offset, &string)?;
    }
    if let Some(segment) = &plan.segment {
        string.push(0);
        file.set_len(segment.offset)?;
        let table: Vec<u8> = segment.phdrs.iter().flat_map(|p| layout.encode_phdr(p)).collect();
        write_at(file, segment.offset, &table)?;
        copy_within(file, layout.strtab_offset, segment.offset + segment.table_size, layout.strsz)?;
        write_at(file, segment.offset + segment.table_size + layout.strsz, &string)?;
        let (phoff_at, phnum_at) = if layout.is64 { (32, 56) } else { (28, 44) };
        write_at(file, phoff_at, &layout.encode_word(segment.offset))?;
        write_at(file, phnum_at, &layout.encode(segment.phdrs.len() as u64, 2))?;
        if let Some(header) = layout.dynstr_header {
            let (addr_at, offset_at, size_at) = if layout.is64 { (16, 24, 32) } else { (12, 16, 20) };
            write_at(file, header + addr_at, &layout.encode_word(segment.vaddr + segment.table_size))?;
            write_at(file, header + offset_at, &layout.encode_word(segment.offset + segment.table_size))?;
            write_at(file, header + size_at, &layout.encode_word(segment.strsz))?;
        }
        if let Some((at, table)) = &segment.dynamic {
            let bytes: Vec<u8> = table
                .iter()
                .flat_map(|&(tag, value)| [layout.encode_word(tag.cast_unsigned()), layout.encode_word(value)])
                .flatten()
                .collect();
            write_at(file, segment.offset + at, &bytes)?;
            if let Some(header) = layout.dynamic_header {
                let (addr_at, offset_at, size_at) = if layout.is64 { (16, 24, 32) } else { (12, 16, 20) };
                write_at(file, header + addr_at, &layout.encode_word(segment.vaddr + at))?;
                write_at(file, header + offset_at, &layout.encode_word(segment.offset + at))?;
                write_at(file, header + size_at, &layout.encode_word(bytes.len() as u64))?;
            }
        }
    }
    for &(index, tag, value) in &plan.entries {
        let mut bytes = layout.encode_word(tag.cast_unsigned());
        bytes.extend(layout.encode_word(value));
        write_at(file, layout.entry_offset(index), &bytes)?;
    }
    Ok(())
}

/// Copies `len` bytes from `from` to `to` (`to` past `from + len`) in bounded chunks.
fn copy_within(file: &mut File, from: u64, to: u64, len: u64) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut done = 0;
    while done < len {
        let n = usize::try_from((len - done).min(buf.len() as u64)).map_err(io::Error::other)?;
        file.seek(SeekFrom::Start(from + done))?;
        file.read_exact(&mut buf[..n])?;
        write_at(file, to + done, &buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpath::read_run_paths;

    /// A minimal ELF shared object of either class and byte order: the header, `PT_PHDR`, one
    /// `PT_LOAD` over the whole file and `PT_DYNAMIC`; then the string table and the dynamic
    /// entries (`DT_STRTAB`, `DT_STRSZ`, `tags`, `DT_NULL` and `spare` more).
    fn elf(is64: bool, big: bool, tags: &[(i64, u64)], strings: &[u8], spare: usize) -> Vec<u8> {
        let (ehsize, phsize, word) = if is64 { (64u64, 56u64, 8u64) } else { (52, 32, 4) };
        let strtab = ehsize + 3 * phsize;
        let dynamic = (strtab + strings.len() as u64).div_ceil(word) * word;
        let mut entries = vec![(DT_STRTAB.0, strtab), (DT_STRSZ.0, strings.len() as u64)];
        entries.extend_from_slice(tags);
        entries.extend(std::iter::repeat_n((0, 0), spare + 1));
        let total = dynamic + 2 * word * entries.len() as u64;
        let layout = Layout {
            is64,
            big_endian: big,
            file_len: 0,
            phentsize: phsize,
            phdrs: Vec::new(),
            dyn_offset: 0,
            dyn_slots: 0,
            entries: Vec::new(),
            strtab_offset: 0,
            strsz: 0,
            dynstr_header: None,
            dynamic_header: None,
            string_users: None,
        };
        let mut out = b"\x7fELF".to_vec();
        out.extend([if is64 { 2 } else { 1 }, if big { 2 } else { 1 }, 1]);
        out.resize(16, 0);
        out.extend(layout.encode(3, 2)); // ET_DYN
        out.extend(layout.encode(if is64 { 62 } else { 3 }, 2));
        out.extend(layout.encode(1, 4));
        out.extend(layout.encode_word(0)); // entry
        out.extend(layout.encode_word(ehsize)); // phoff
        out.extend(layout.encode_word(0)); // shoff
        out.extend(layout.encode(0, 4));
        for v in [ehsize, phsize, 3, if is64 { 64 } else { 40 }, 0, 0] {
            out.extend(layout.encode(v, 2));
        }
        let phdr = |p_type: ProgramType, offset: u64, size: u64, align: u64| Phdr {
            p_type,
            p_flags: PF_R,
            offset,
            vaddr: offset,
            paddr: offset,
            filesz: size,
            memsz: size,
            align,
        };
        let dyn_size = total - dynamic;
        for p in [
            phdr(PT_PHDR, ehsize, 3 * phsize, word),
            phdr(PT_LOAD, 0, total, 0x1000),
            phdr(PT_DYNAMIC, dynamic, dyn_size, word),
        ] {
            out.extend(layout.encode_phdr(&p));
        }
        out.extend_from_slice(strings);
        out.resize(usize::try_from(dynamic).unwrap(), 0);
        for (tag, val) in entries {
            out.extend(layout.encode_word(tag.cast_unsigned()));
            out.extend(layout.encode_word(val));
        }
        out
    }

    /// `(e_phoff, [(p_type, p_offset, p_vaddr)])` as `object` reads them.
    fn segments<Elf: FileHeader<Endian = Endianness>>(bytes: &[u8]) -> (u64, Vec<(u32, u64, u64)>) {
        let header = Elf::parse(bytes).unwrap();
        let endian = header.endian().unwrap();
        let phdrs = header.program_headers(endian, bytes).unwrap();
        let list = phdrs.iter().map(|p| (p.p_type(endian).0, p.p_offset(endian).into(), p.p_vaddr(endian).into()));
        (header.e_phoff(endian).into(), list.collect())
    }

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn longer_paths_go_into_a_new_segment_in_every_class_and_byte_order() {
        let dir = tempfile::tempdir().unwrap();
        for (is64, big) in [(true, false), (true, true), (false, false), (false, true)] {
            let original = elf(is64, big, &[(DT_RUNPATH.0, 1)], b"\0$ORIGIN\0", 0);
            let path = write(dir.path(), "lib.so", &original);
            assert_eq!(read_run_paths(&path).unwrap().unwrap().runpath.as_deref(), Some("$ORIGIN"));
            let value = "$ORIGIN:$ORIGIN/../../_rocm_sdk_core/lib/llvm/lib";
            assert_eq!(set_search_path(&path, value, PathTag::Rpath).unwrap(), Placement::Appended);
            let paths = read_run_paths(&path).unwrap().unwrap();
            assert_eq!((paths.rpath.as_deref(), paths.runpath), (Some(value), None), "{is64} {big}");
            let bytes = std::fs::read(&path).unwrap();
            let (phoff, phdrs) =
                if is64 { segments::<FileHeader64<_>>(&bytes) } else { segments::<FileHeader32<_>>(&bytes) };
            // The table moved to the new segment (page-aligned, same offset-to-address bias),
            // PT_PHDR with it; the new PT_LOAD last.
            assert_eq!(phoff % 0x1000, 0);
            assert_eq!(phdrs.len(), 4);
            assert_eq!(phdrs[0], (PT_PHDR.0, phoff, phoff));
            assert_eq!(phdrs[3], (PT_LOAD.0, phoff, phoff));
            assert!(phoff >= original.len() as u64);
            // Nothing before the new segment changed but the header and the dynamic entries.
            let dynamic = original.len() - (if is64 { 16 } else { 8 }) * 4;
            let strtab = if is64 { 64 + 3 * 56 } else { 52 + 3 * 32 };
            assert_eq!(bytes[strtab..dynamic], original[strtab..dynamic]);
            assert!(bytes[original.len()..usize::try_from(phoff).unwrap()].iter().all(|&b| b == 0));
            // The same again: nothing to do; a RUNPATH of it: in a new segment again (no section
            // headers say what else uses the string, so it is not overwritten).
            assert_eq!(set_search_path(&path, value, PathTag::Rpath).unwrap(), Placement::Unchanged);
            assert_eq!(set_search_path(&path, "$ORIGIN", PathTag::Runpath).unwrap(), Placement::Appended);
            assert_eq!(read_run_paths(&path).unwrap().unwrap().runpath.as_deref(), Some("$ORIGIN"));
        }
    }

    #[test]
    fn a_file_without_a_search_path_takes_a_spare_slot_or_moves_its_dynamic_section() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "spare.so", &elf(true, false, &[(DT_NEEDED.0, 1)], b"\0libc.so.6\0", 1));
        assert_eq!(set_search_path(&path, "$ORIGIN/../lib", PathTag::Rpath).unwrap(), Placement::Appended);
        assert_eq!(read_run_paths(&path).unwrap().unwrap().rpath.as_deref(), Some("$ORIGIN/../lib"));
        let (_, phdrs) = segments::<FileHeader64<_>>(&std::fs::read(&path).unwrap());
        assert_eq!(phdrs[2].1, 64 + 3 * 56 + 16, "the dynamic section stays where it was");
        for (is64, big) in [(true, false), (false, true)] {
            let full = elf(is64, big, &[(DT_NEEDED.0, 1)], b"\0libc.so.6\0", 0);
            let path = write(dir.path(), "full.so", &full);
            assert_eq!(set_search_path(&path, "$ORIGIN", PathTag::Rpath).unwrap(), Placement::Appended);
            let paths = read_run_paths(&path).unwrap().unwrap();
            assert_eq!(paths.rpath.as_deref(), Some("$ORIGIN"));
            let bytes = std::fs::read(&path).unwrap();
            let (phoff, phdrs) =
                if is64 { segments::<FileHeader64<_>>(&bytes) } else { segments::<FileHeader32<_>>(&bytes) };
            // PT_DYNAMIC now inside the new (last) segment, after its table and strings.
            assert_eq!(phdrs[2].0, PT_DYNAMIC.0);
            assert!(phdrs[2].1 > phoff && phdrs[2].2 > phoff, "{phdrs:?}");
        }
        let err = set_search_path(&path, "a\0b", PathTag::Rpath).unwrap_err();
        assert!(err.to_string().contains("with a NUL"), "{err}");
        // No room in a 32-bit address space: refused, nothing written.
        let mut high = elf(false, false, &[(DT_RPATH.0, 1)], b"\0/x\0", 0);
        high[52 + 32 + 20..52 + 32 + 24].copy_from_slice(&0xffff_ff00u32.to_le_bytes()); // LOAD p_memsz
        let path = write(dir.path(), "high.so", &high);
        let err = set_search_path(&path, "$ORIGIN/longer", PathTag::Rpath).unwrap_err();
        assert!(matches!(err, RpathError::Unsupported { .. }), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), high, "nothing written");
    }

    #[test]
    fn cut_or_bent_files_are_errors_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let good = elf(false, true, &[(DT_RPATH.0, 1)], b"\0/old\0", 1);
        for len in 0..good.len() {
            let path = write(dir.path(), "cut.so", &good[..len]);
            if set_search_path(&path, "$ORIGIN/longer/than/before", PathTag::Rpath).is_ok() {
                let paths = read_run_paths(&path).unwrap().unwrap();
                assert_eq!(paths.rpath.as_deref(), Some("$ORIGIN/longer/than/before"));
            }
        }
        // The string table said to run past the end of the file.
        let mut bent = elf(true, false, &[(DT_RPATH.0, 1)], b"\0/old\0", 1);
        let strsz_at = bent.len() - 16 * 4 + 8;
        bent[strsz_at..strsz_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        let path = write(dir.path(), "bent.so", &bent);
        let err = set_search_path(&path, "$ORIGIN", PathTag::Rpath).unwrap_err();
        assert!(err.to_string().contains("runs past the end of the file"), "{err}");
    }
}
