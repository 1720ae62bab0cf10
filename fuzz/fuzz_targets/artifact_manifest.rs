//! A TheRock artifact archive's manifest (`read_manifest`; zstd or xz by the first byte).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_artifacts::ArchiveFormat;

fuzz_target!(|data: &[u8]| {
    let Some((first, body)) = data.split_first() else { return };
    let format = if first & 1 == 0 { ArchiveFormat::Zstd } else { ArchiveFormat::Xz };
    let _ = quarry_artifacts::extract::read_manifest(body, format);
});
