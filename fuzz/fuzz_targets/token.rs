//! Token file lines (`Token::parse_line`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for line in text.lines() {
        if let Some(token) = quarry_index_server::Token::parse_line(line) {
            assert!(token.prefixes().iter().all(|p| p.ends_with('/') && !p.starts_with('/')));
        }
    }
});
