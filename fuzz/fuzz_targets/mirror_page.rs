//! `quarry mirror`'s reading of an upstream's project page (`inspect/src/simple_page.rs`): any
//! bytes as a PEP 691 JSON page and as a PEP 503 HTML page, through `fuzz_check`, which checks in
//! whatever either parser accepts what the mirror relies on (no URL keeps a fragment, hashes
//! lowercased, no more files than the page has anchors).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    quarry_inspect::simple_page::fuzz_check(data);
});
