//! What a file is, as far as wheels care: not ELF, a shared library (with its `DT_SONAME`), or
//! an executable. Read through `object` with a read cache, so only the headers and the dynamic
//! section are read, whatever the file's size. [`binary_platform`] tells the wheel platform a
//! shared library was built for (ELF `.so` or PE `.dll`), from its headers alone.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
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
    probe_file(crate::tree::open_source(path)?).map(|(kind, _)| kind)
}

/// What the file open at its start is, and its `e_machine` (0 when not ELF).
fn probe_file(mut file: File) -> io::Result<(ElfKind, u16)> {
    let mut magic = [0u8; 5];
    if file.read(&mut magic)? < 5 || &magic[..4] != b"\x7fELF" || magic[4] != 2 {
        // Not ELF, or 32-bit ELF (ROCm ships none): treated as a plain file.
        return Ok((ElfKind::NotElf, 0));
    }
    let cache = ReadCache::new(file);
    let Ok(elf) = ElfFile64::<Endianness, _>::parse(&cache) else {
        return Ok((ElfKind::NotElf, 0));
    };
    let endian = elf.endian();
    let e_type = elf.elf_header().e_type(endian);
    let machine = elf.elf_header().e_machine(endian);
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
    let kind = match e_type {
        ET_EXEC => ElfKind::Executable,
        ET_DYN if pie => ElfKind::Executable,
        ET_DYN => ElfKind::SharedObject { soname },
        _ => ElfKind::NotElf,
    };
    Ok((kind, machine.0))
}

/// The wheel platform tag a shared library was built for: a PE DLL (`win_amd64`, `win_arm64`)
/// or an ELF shared object (`linux_x86_64`, `linux_aarch64`); `None` for anything else (an
/// executable, an import library, a text file, another machine).
/// The file is opened once; ELF headers are parsed by [`probe_file`].
pub fn binary_platform(path: &Path) -> io::Result<Option<&'static str>> {
    let mut file = crate::tree::open_source(path)?;
    let mut head = Vec::with_capacity(64);
    (&mut file).take(64).read_to_end(&mut head)?;
    if head.starts_with(b"MZ") && head.len() >= 64 {
        return pe_dll_platform(file, &head);
    }
    if !head.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(0))?;
    Ok(match probe_file(file)? {
        (ElfKind::SharedObject { .. }, m) if m == object::elf::EM_X86_64.0 => Some("linux_x86_64"),
        (ElfKind::SharedObject { .. }, m) if m == object::elf::EM_AARCH64.0 => Some("linux_aarch64"),
        _ => None,
    })
}

/// PE/COFF header values (Microsoft's PE format specification; `object` reads PE only with
/// its `pe` feature, which nothing else here needs).
const IMAGE_FILE_DLL: u16 = 0x2000;
const IMAGE_FILE_MACHINE_AMD64: u16 = 0x8664;
const IMAGE_FILE_MACHINE_ARM64: u16 = 0xaa64;

/// A PE image's platform when it is a DLL: the COFF header after `PE\0\0` at `e_lfanew`.
fn pe_dll_platform(mut file: File, dos: &[u8]) -> io::Result<Option<&'static str>> {
    let offset = u32::from_le_bytes([dos[0x3c], dos[0x3d], dos[0x3e], dos[0x3f]]);
    file.seek(SeekFrom::Start(u64::from(offset)))?;
    let mut coff = [0u8; 24];
    if file.read_exact(&mut coff).is_err() || &coff[..4] != b"PE\0\0" {
        return Ok(None);
    }
    let machine = u16::from_le_bytes([coff[4], coff[5]]);
    let characteristics = u16::from_le_bytes([coff[22], coff[23]]);
    if characteristics & IMAGE_FILE_DLL == 0 {
        return Ok(None);
    }
    Ok(match machine {
        m if m == IMAGE_FILE_MACHINE_AMD64 => Some("win_amd64"),
        m if m == IMAGE_FILE_MACHINE_ARM64 => Some("win_arm64"),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::binary_platform;

    /// A PE header: `MZ`, `e_lfanew` = 64, `PE\0\0`, the machine, the characteristics.
    fn pe(machine: u16, characteristics: u16) -> Vec<u8> {
        let mut bytes = vec![0u8; 64];
        bytes[..2].copy_from_slice(b"MZ");
        bytes[0x3c] = 64;
        bytes.extend_from_slice(b"PE\0\0");
        bytes.extend_from_slice(&machine.to_le_bytes());
        bytes.extend_from_slice(&[0; 16]);
        bytes.extend_from_slice(&characteristics.to_le_bytes());
        bytes
    }

    #[test]
    fn pe_dlls_tell_their_platform() {
        let dir = tempfile::tempdir().unwrap();
        let cases: [(&[u8], Option<&str>); 5] = [
            (&pe(0x8664, 0x2022), Some("win_amd64")),
            (&pe(0xaa64, 0x2022), Some("win_arm64")),
            (&pe(0x8664, 0x0022), None),          // an .exe
            (&pe(0x014c, 0x2102), None),          // 32-bit x86
            (b"!<arch>\n/               ", None), // an import library
        ];
        for (i, (bytes, want)) in cases.iter().enumerate() {
            let path = dir.path().join(format!("{i}.dll"));
            std::fs::write(&path, bytes).unwrap();
            assert_eq!(binary_platform(&path).unwrap(), *want, "case {i}");
        }
    }
}
