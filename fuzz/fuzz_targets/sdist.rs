//! An sdist (`.tar.gz` or `.zip`, chosen by the first byte): decompression, members under one
//! `{name}-{version}/`, PKG-INFO (`check_sdist_bytes`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_packaging::SdistFilename;

fuzz_target!(|data: &[u8]| {
    let Some((first, body)) = data.split_first() else { return };
    let name = if first & 1 == 0 { "pkg-1.0.tar.gz" } else { "pkg-1.0.zip" };
    let filename: SdistFilename = name.parse().expect("valid name");
    let _ = quarry_inspect::check_sdist_bytes(&filename, bytes::Bytes::copy_from_slice(body));
});
