//! ELF dynamic sections read and edited in place (`quarry_builder::rpath`): the search paths
//! read back, then DT_RUNPATH turned into DT_RPATH on the file, then read again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lib.so");
    std::fs::write(&path, data).expect("write");
    let before = quarry_builder::rpath::read_run_paths(&path);
    if let Ok(true) = quarry_builder::rpath::force_rpath(&path) {
        // What was a RUNPATH reads back as the RPATH.
        let after = quarry_builder::rpath::read_run_paths(&path).expect("readable after the edit");
        let (before, after) = (before.expect("read").expect("ELF"), after.expect("ELF"));
        assert_eq!(after.rpath, before.runpath);
        assert_eq!(after.runpath, None);
    }
});
