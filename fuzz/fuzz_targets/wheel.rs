//! A wheel's zip central directory and METADATA (`read_wheel_metadata_from_bytes`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = quarry_inspect::read_wheel_metadata_from_bytes(bytes::Bytes::copy_from_slice(data));
});
