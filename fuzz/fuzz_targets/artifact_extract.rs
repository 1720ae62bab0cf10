//! Extracting a TheRock artifact archive into a temporary directory (`extract`, every mode,
//! small limits): whatever lands must stay inside the destination.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_artifacts::ArchiveFormat;
use quarry_artifacts::extract::{ExtractMode, Limits, extract};

fuzz_target!(|data: &[u8]| {
    let Some((first, body)) = data.split_first() else { return };
    let format = if first & 1 == 0 { ArchiveFormat::Zstd } else { ArchiveFormat::Xz };
    let mode = match (first >> 1) % 3 {
        0 => ExtractMode::Tree,
        1 => ExtractMode::Bootstrap,
        _ => ExtractMode::Flatten,
    };
    let scratch = tempfile::tempdir().expect("temp dir");
    let dest = scratch.path().join("out");
    let limits = Limits { max_members: 256, max_bytes: 4 << 20, ..Limits::default() };
    let _ = extract(body, format, &dest, mode, limits);
    // Nothing may appear next to the destination (a member or link that escaped).
    for entry in std::fs::read_dir(scratch.path()).expect("read scratch") {
        let name = entry.expect("entry").file_name();
        assert!(name == "out", "extraction wrote {name:?} outside its destination");
    }
});
