//! `<archive>.sha256sum` sidecars: the hex digest and a newline. Readers take the first
//! whitespace-separated token, so `digest  filename` lines (sha256sum's format) are read too.

/// The sidecar's name for an archive file name.
pub fn sidecar_name(archive: &str) -> String {
    format!("{archive}.sha256sum")
}

/// The sidecar's content for a digest.
pub fn render(sha256_hex: &str) -> String {
    format!("{sha256_hex}\n")
}

/// The digest a sidecar holds, lower-cased; `None` unless it is 64 hex digits.
pub fn parse(text: &str) -> Option<String> {
    let token = text.split_whitespace().next()?;
    (token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit())).then(|| token.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms_read() {
        let d = "ab".repeat(32);
        assert_eq!(parse(&render(&d)).as_deref(), Some(d.as_str()));
        assert_eq!(parse(&format!("{}  blas_lib_generic.tar.zst\n", d.to_uppercase())).as_deref(), Some(d.as_str()));
        assert_eq!(parse("xyz\n"), None);
        assert_eq!(parse(""), None);
        assert_eq!(sidecar_name("a_b_c.tar.xz"), "a_b_c.tar.xz.sha256sum");
    }
}
