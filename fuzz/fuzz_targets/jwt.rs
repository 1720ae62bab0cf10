//! OIDC tokens, key sets and discovery documents (`quarry-oidc`): the first byte picks which
//! (0: a token, 1: a JWKS, 2: a discovery document), the rest is the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_oidc::{Claims, PrefixTemplate, Rule, jwks, jwt, rules};

const ISSUER: &str = "https://token.actions.githubusercontent.com";

fn check_claims(claims: &Claims) {
    let _ = jwt::check_times(claims, 1_700_000_000, 60);
    let _ = jwt::check_audience(claims, "quarry");
    let rule = Rule::new(ISSUER, "ROCm/TheRock", Some("release.yml"), Some("refs/heads/main"), None, "{run_id}-", 1)
        .expect("a valid rule");
    let _ = rules::find(std::slice::from_ref(&rule), claims);
    let _ = quarry_oidc::Identity::of(claims).to_string();
    if let Ok(prefix) = PrefixTemplate::parse("ci/{repository_owner}/{run_id}-").expect("a template").render(claims) {
        // A scope filled from claims never escapes: no empty, `.` or `..` segment, a real end.
        assert!(prefix.starts_with("ci/") && prefix.ends_with('-'), "{prefix}");
        assert!(prefix.split('/').all(|s| !s.is_empty() && s != "." && s != ".."), "{prefix}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    match which % 3 {
        0 => {
            let Ok(text) = std::str::from_utf8(rest) else { return };
            if let Ok(token) = jwt::decode(text) {
                assert_eq!(token.header.alg, "RS256");
                check_claims(&token.claims);
            }
        }
        1 => {
            if let Ok(set) = jwks::parse_jwks(rest) {
                assert!(!set.is_empty() && set.len() <= jwks::MAX_KEYS);
            }
        }
        _ => {
            if let Ok(uri) = jwks::parse_discovery(rest, ISSUER) {
                assert!(quarry_oidc::fetchable_url(&uri));
            }
        }
    }
});
