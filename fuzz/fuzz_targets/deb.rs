//! A `.deb`: the ar walk, the control member's decompression and tar, `./control`
//! (`read_deb_control` over bytes in memory), and the paragraph parser on its own.
#![no_main]

use futures_util::FutureExt;
use libfuzzer_sys::fuzz_target;
use quarry_inspect::deb::{DebControl, MemorySource, read_deb_control};

fuzz_target!(|data: &[u8]| {
    let mut source = MemorySource(bytes::Bytes::copy_from_slice(data));
    // A memory source never waits: the future is ready at once.
    let _ = read_deb_control(&mut source).now_or_never().expect("ready");
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(control) = DebControl::parse(text) {
            // Whatever is accepted has the required single-line fields.
            assert!(!control.package().is_empty() && !control.version().contains('\n'));
        }
    }
});
