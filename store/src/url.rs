//! Percent-encoding of keys and file names in URLs, one set for the whole project: RFC 3986's
//! unreserved characters (`A-Z a-z 0-9 - . _ ~`) pass as they are, every other byte is encoded
//! (notably `+`, which S3 reads as a space, and `%`). Pages' hrefs, upload URLs, `Location`
//! headers and S3's `x-amz-copy-source` all encode with it, so a key reads back the same
//! whichever way it travelled.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// RFC 3986's unreserved characters: what is sent as it is in one path segment.
pub const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
/// [`UNRESERVED`] and `/`: what is sent as it is in a path of several segments.
pub const UNRESERVED_AND_SLASH: &AsciiSet = &UNRESERVED.remove(b'/');

/// One path segment (a file name) percent-encoded: `/` is encoded too.
pub fn encode_segment(segment: &str) -> String {
    utf8_percent_encode(segment, UNRESERVED).to_string()
}

/// A `/`-separated path (a key) percent-encoded segment by segment, its slashes kept.
pub fn encode_path(path: &str) -> String {
    utf8_percent_encode(path, UNRESERVED_AND_SLASH).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreserved_characters_pass_and_the_rest_is_encoded() {
        assert_eq!(encode_segment("torch-2.5.1+rocm6.3-cp312.whl"), "torch-2.5.1%2Brocm6.3-cp312.whl");
        assert_eq!(encode_segment("a b/c~d_e"), "a%20b%2Fc~d_e");
        assert_eq!(encode_path("1-linux/a b+c_x.tar.zst"), "1-linux/a%20b%2Bc_x.tar.zst");
        assert_eq!(encode_path("bash-completion_1%3a2.11-6_all.deb"), "bash-completion_1%253a2.11-6_all.deb");
        assert_eq!(encode_path("é/ü"), "%C3%A9/%C3%BC");
    }
}
