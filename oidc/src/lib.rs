//! Trusted publishing's pure part, PyPI's protocol for GitHub Actions: an OpenID Connect ID
//! token (a JWT the CI run got from its issuer) is verified and matched against the rules of
//! `quarry.toml`, so the server can mint a short-lived upload token scoped to one run.
//!
//! - [`jwt`]: a compact JWS split and decoded (RS256 only, a `kid` required), its signature
//!   checked against a key, its registered claims (`iss`, `aud`, `exp`, `nbf`, `iat`) checked
//!   with a small skew.
//! - [`jwks`]: OpenID discovery documents and JSON Web Key Sets, parsed into RSA keys
//!   (2048–8192 bits; other keys skipped, each with its reason).
//! - [`verify`]: the [`Verifier`](verify::Verifier): per trusted issuer, the keys fetched
//!   through discovery and cached for an hour, refetched when a token names an unknown `kid`
//!   (at most once per interval, so forged kids cannot make it hammer the issuer).
//! - [`rules`]: `[[trusted_publisher]]` rules (issuer, repository, workflow, ref, environment,
//!   prefix with `{claim}` placeholders), the closest rule's first differing claim named, and
//!   the [`Identity`](rules::Identity) a minted token carries.
//! - [`issue`]: signing tokens and publishing keys, as an issuer does (the test stand-ins, the
//!   fuzz corpus and the benchmark's issuer use it).
//!
//! No HTTP here: the caller fetches through [`verify::Fetch`] (the server uses reqwest), and
//! passes the time in, so every check is a function of its input.

pub mod claims;
pub mod issue;
pub mod jwks;
pub mod jwt;
pub mod rules;
pub mod verify;

pub use claims::Claims;
pub use rules::{Identity, Mismatch, PrefixTemplate, Rule, RuleError};
pub use verify::{CachePolicy, Fetch, Verifier, VerifyError};

/// An issuer or key-set URL Quarry fetches: `https://`, or `http://` to a loopback host only
/// (a stand-in issuer on the same machine).
pub fn fetchable_url(url: &str) -> bool {
    if url.starts_with("https://") {
        return url.len() > "https://".len();
    }
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    matches!(host, "127.0.0.1" | "localhost" | "::1")
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_https_or_loopback_http_is_fetched() {
        for ok in [
            "https://token.actions.githubusercontent.com",
            "http://127.0.0.1:8080",
            "http://localhost/x",
            "http://[::1]:9/",
        ] {
            assert!(super::fetchable_url(ok), "{ok}");
        }
        for bad in [
            "http://example.com",
            "http://127.0.0.1.evil.com/",
            "ftp://x",
            "https://",
            "http://10.0.0.1:80",
            "file:///etc",
        ] {
            assert!(!super::fetchable_url(bad), "{bad}");
        }
    }
}
