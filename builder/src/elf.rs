//! What a file is, as far as wheels care: not ELF, a shared library (with its `DT_SONAME`), or
//! an executable. Read through `object` with a read cache, so only the headers and the dynamic
//! section are read, whatever the file's size.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use object::elf::{DF_1_PIE, DT_FLAGS_1, DT_SONAME, ET_DYN, ET_EXEC};
use object::read::elf::{Dyn as _, ElfFile64, FileHeader as _};
use object::{Endianness, ReadCache};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ElfKind {
    NotElf,
    SharedObject { soname: Option<String> },
    Executable,
}

/// Probes `path` (never follows into anything but the file itself).
pub fn probe(path: &Path) -> io::Result<ElfKind> {
    let mut file = File::open(path)?;
    let mut magic = [0u8; 5];
    if file.read(&mut magic)? < 5 || &magic[..4] != b"\x7fELF" || magic[4] != 2 {
        // Not ELF, or 32-bit ELF (ROCm ships none): treated as a plain file.
        return Ok(ElfKind::NotElf);
    }
    let cache = ReadCache::new(file);
    let Ok(elf) = ElfFile64::<Endianness, _>::parse(&cache) else {
        return Ok(ElfKind::NotElf);
    };
    let endian = elf.endian();
    let e_type = elf.elf_header().e_type(endian);
    let sections = elf.elf_section_table();
    let mut soname = None;
    let mut pie = false;
    if let Ok(Some((dynamic, link))) = sections.dynamic(endian, elf.data()) {
        let strings = sections.strings(endian, elf.data(), link).ok();
        for d in dynamic {
            let tag = d.d_tag(endian);
            if tag == DT_SONAME {
                soname = strings
                    .as_ref()
                    .and_then(|s| d.string(endian, *s).ok())
                    .map(|b| String::from_utf8_lossy(b).into_owned());
            } else if tag == DT_FLAGS_1 && d.d_val(endian) & DF_1_PIE.0 != 0 {
                pie = true;
            }
        }
    }
    Ok(match e_type {
        ET_EXEC => ElfKind::Executable,
        ET_DYN if pie => ElfKind::Executable,
        ET_DYN => ElfKind::SharedObject { soname },
        _ => ElfKind::NotElf,
    })
}
