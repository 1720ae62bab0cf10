//! Token file lines (`Token::parse_line`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for line in text.lines() {
        if let Ok(Some(token)) = quarry_index_server::Token::parse_line(line) {
            // A scope is real: never the whole store, never a segment no key can have.
            assert!(token.prefixes().iter().all(|p| p.ends_with('/')
                && !p.starts_with('/')
                && p[..p.len() - 1].split('/').all(|s| !s.is_empty() && s != "." && s != "..")));
        }
    }
});
