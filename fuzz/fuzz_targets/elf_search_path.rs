//! ELF search paths set to any string (`quarry_builder::elf_edit`): in place or in a grown
//! string table in a new segment. The first byte picks the path (its length and tag), the rest
//! is the file. Whatever the file, the edit is an error or it reads back as written.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_builder::elf_edit::{PathTag, set_search_path};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, file)) = data.split_first() else { return };
    let value = format!("{}$ORIGIN", "$ORIGIN/x:".repeat(usize::from(pick & 0x3f)));
    let tag = if pick & 0x80 != 0 { PathTag::Rpath } else { PathTag::Runpath };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lib.so");
    std::fs::write(&path, file).expect("write");
    if set_search_path(&path, &value, tag).is_ok() {
        let after = quarry_builder::rpath::read_run_paths(&path).expect("readable after the edit").expect("ELF");
        let (written, other) = match tag {
            PathTag::Rpath => (after.rpath, after.runpath),
            PathTag::Runpath => (after.runpath, after.rpath),
        };
        assert_eq!(written.as_deref(), Some(value.as_str()));
        assert_eq!(other, None);
    }
});
