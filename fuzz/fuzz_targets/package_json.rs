//! TheRock's `package.json` (`parse_package_json`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = quarry_packaging::therock::parse_package_json(text);
});
