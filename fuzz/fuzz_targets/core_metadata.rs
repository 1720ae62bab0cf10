//! METADATA / PKG-INFO headers (`CoreMetadata::parse`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = quarry_inspect::CoreMetadata::parse(data);
});
