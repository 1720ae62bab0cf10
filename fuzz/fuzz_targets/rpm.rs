//! An `.rpm`'s lead and headers, as `inspect` reads them (`header_span`, `RpmInfo::from_headers`).
#![no_main]

use futures_util::FutureExt;
use libfuzzer_sys::fuzz_target;
use quarry_inspect::deb::{MemorySource, RangeSource};
use quarry_inspect::rpmhead::{RpmInfo, header_span};

fuzz_target!(|data: &[u8]| {
    let mut source = MemorySource(bytes::Bytes::copy_from_slice(data));
    let Ok(Ok(span)) = header_span(&mut source).now_or_never().expect("ready") else { return };
    let headers = source.range(0, span.header_end).now_or_never().expect("ready").expect("memory");
    let _ = RpmInfo::from_headers(&headers, span);
});
