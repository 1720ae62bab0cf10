//! A compact JWS (RFC 7515) as OIDC ID tokens are: `header.payload.signature`, each part
//! base64url without padding. Only RS256 is taken (GitHub's, PyPI's), and the header must name
//! its key (`kid`); `alg: none`, HMAC and every other algorithm are refused before any key is
//! looked at, and so is a header marking extensions critical (`crit`: none is understood).
//! [`Unverified::check_signature`] checks the signature over the first two parts as sent;
//! [`check_times`] and [`check_audience`] the registered claims.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::Claims;
use crate::jwks::PublicKey;

/// Longest token taken: GitHub's are about 1.2 KiB.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// Why a token cannot be read (before any key or claim is checked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    /// Longer than [`MAX_TOKEN_BYTES`].
    #[error("the token is {0} bytes long, more than {MAX_TOKEN_BYTES}")]
    TooLong(usize),
    /// Not three dot-separated parts.
    #[error("not a JWT: {0} dot-separated parts, not 3")]
    Parts(usize),
    /// A part that is not unpadded base64url.
    #[error("the {0} is not unpadded base64url")]
    Base64(&'static str),
    /// The header or payload is not a JSON object (or lacks a field it must have).
    #[error("the {part} is not the JSON object a token has: {why}")]
    Json {
        /// `header` or `payload`.
        part: &'static str,
        /// What serde said.
        why: String,
    },
    /// An algorithm other than RS256.
    #[error("the algorithm is {0:?}; only RS256 is accepted")]
    Algorithm(String),
    /// No `kid` in the header.
    #[error("the header names no key (kid)")]
    NoKeyId,
    /// The header marks extensions critical.
    #[error("the header marks extensions critical ({0}); none are understood")]
    Critical(String),
}

/// A token's header.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Header {
    /// The signing algorithm: RS256.
    pub alg: String,
    /// The signing key's id in the issuer's key set.
    pub kid: String,
    /// Extensions the receiver must understand (none are).
    #[serde(default)]
    crit: Option<serde_json::Value>,
}

/// A token read but not yet verified: nothing in it is to be trusted until
/// [`check_signature`](Self::check_signature) passed.
#[derive(Debug, Clone)]
pub struct Unverified<'a> {
    /// The header.
    pub header: Header,
    /// The payload's claims.
    pub claims: Claims,
    signing_input: &'a str,
    signature: Vec<u8>,
}

fn base64(part: &str, name: &'static str) -> Result<Vec<u8>, JwtError> {
    URL_SAFE_NO_PAD.decode(part).map_err(|_| JwtError::Base64(name))
}

/// Split and decode `token`; see the module documentation for what is refused.
pub fn decode(token: &str) -> Result<Unverified<'_>, JwtError> {
    let token = token.trim();
    if token.len() > MAX_TOKEN_BYTES {
        return Err(JwtError::TooLong(token.len()));
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [head, payload, signature] = parts[..] else { return Err(JwtError::Parts(parts.len())) };
    // The header is read leniently about fields it does not need, strictly about their types;
    // a missing `kid` is its own error.
    let raw: serde_json::Value = serde_json::from_slice(&base64(head, "header")?)
        .map_err(|e| JwtError::Json { part: "header", why: e.to_string() })?;
    let alg = raw.get("alg").and_then(serde_json::Value::as_str).unwrap_or("");
    if alg != "RS256" {
        return Err(JwtError::Algorithm(alg.to_owned()));
    }
    if raw.get("kid").is_none() {
        return Err(JwtError::NoKeyId);
    }
    let header: Header =
        serde_json::from_value(raw).map_err(|e| JwtError::Json { part: "header", why: e.to_string() })?;
    if let Some(crit) = &header.crit {
        return Err(JwtError::Critical(crit.to_string()));
    }
    let claims = serde_json::from_slice(&base64(payload, "payload")?)
        .map_err(|e| JwtError::Json { part: "payload", why: e.to_string() })?;
    let signature = base64(signature, "signature")?;
    let signing_input = &token[..head.len() + 1 + payload.len()];
    Ok(Unverified { header, claims: Claims::new(claims), signing_input, signature })
}

impl Unverified<'_> {
    /// Whether `key` signed the token (RSASSA-PKCS1-v1_5 with SHA-256 over `header.payload`).
    pub fn check_signature(&self, key: &PublicKey) -> bool {
        key.verify(self.signing_input.as_bytes(), &self.signature)
    }
}

/// Why a verified token's registered claims refuse it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClaimError {
    /// A claim the token must carry is absent (or of the wrong type).
    #[error("the token has no {0} claim")]
    Missing(&'static str),
    /// `exp` has passed.
    #[error("the token expired at {exp} (now {now}, {skew} s of skew allowed)")]
    Expired {
        /// Its `exp`.
        exp: u64,
        /// The time it was checked.
        now: u64,
        /// The skew allowed.
        skew: u64,
    },
    /// `nbf` is still ahead.
    #[error("the token is not valid before {nbf} (now {now})")]
    NotYetValid {
        /// Its `nbf`.
        nbf: u64,
        /// The time it was checked.
        now: u64,
    },
    /// `iat` is in the future.
    #[error("the token was issued in the future, at {iat} (now {now})")]
    IssuedLater {
        /// Its `iat`.
        iat: u64,
        /// The time it was checked.
        now: u64,
    },
    /// `aud` does not name this server.
    #[error("the token is for audience {found}, not {expected:?}")]
    Audience {
        /// The audience(s) the token names, as JSON.
        found: String,
        /// This server's audience.
        expected: String,
    },
}

/// `exp` (required) not passed, `nbf` (optional) reached and `iat` (required) not ahead, at
/// `now` (seconds since the epoch), each with `skew` seconds of tolerance.
pub fn check_times(claims: &Claims, now: u64, skew: u64) -> Result<(), ClaimError> {
    let second = |name| claims.seconds(name).map(|s| s.max(0.0) as u64);
    let exp = second("exp").ok_or(ClaimError::Missing("exp"))?;
    if now >= exp.saturating_add(skew) {
        return Err(ClaimError::Expired { exp, now, skew });
    }
    if let Some(nbf) = second("nbf")
        && now.saturating_add(skew) < nbf
    {
        return Err(ClaimError::NotYetValid { nbf, now });
    }
    let iat = second("iat").ok_or(ClaimError::Missing("iat"))?;
    if now.saturating_add(skew) < iat {
        return Err(ClaimError::IssuedLater { iat, now });
    }
    Ok(())
}

/// `aud` is `expected`, or a list holding it (RFC 7519 §4.1.3).
pub fn check_audience(claims: &Claims, expected: &str) -> Result<(), ClaimError> {
    let found = claims.get("aud").ok_or(ClaimError::Missing("aud"))?;
    let names = match found {
        serde_json::Value::String(s) => s == expected,
        serde_json::Value::Array(list) => list.iter().any(|a| a.as_str() == Some(expected)),
        _ => false,
    };
    if names { Ok(()) } else { Err(ClaimError::Audience { found: found.to_string(), expected: expected.to_owned() }) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::issue::Signer;

    fn part(v: &serde_json::Value) -> String {
        URL_SAFE_NO_PAD.encode(v.to_string())
    }

    #[test]
    fn tokens_are_read_and_their_signatures_checked() {
        let signer = Signer::generate("k1").unwrap();
        let token = signer.sign(&json!({"iss": "https://i", "sub": "repo:a/b"})).unwrap();
        let read = decode(&token).unwrap();
        assert_eq!(read.header.kid, "k1");
        assert_eq!(read.claims.str("sub"), Some("repo:a/b"));
        assert!(read.check_signature(&signer.public_key().unwrap()));
        let other = Signer::generate("k1").unwrap();
        assert!(!read.check_signature(&other.public_key().unwrap()), "another key's signature");
        // A payload changed after signing no longer verifies.
        let (head, rest) = token.split_once('.').unwrap();
        let sig = rest.split_once('.').unwrap().1;
        let forged = format!("{head}.{}.{sig}", part(&json!({"iss": "https://i", "sub": "repo:evil/b"})));
        assert!(!decode(&forged).unwrap().check_signature(&signer.public_key().unwrap()));
    }

    #[test]
    fn malformed_tokens_are_refused_with_the_reason() {
        let header = |h: serde_json::Value| format!("{}.{}.AAAA", part(&h), part(&json!({"a": 1})));
        let cases: Vec<(String, JwtError)> = vec![
            ("a.b".into(), JwtError::Parts(2)),
            ("a.b.c.d".into(), JwtError::Parts(4)),
            ("!!.e30.AA".into(), JwtError::Base64("header")),
            (header(json!({"alg": "none", "kid": "k"})), JwtError::Algorithm("none".into())),
            (header(json!({"alg": "HS256", "kid": "k"})), JwtError::Algorithm("HS256".into())),
            (header(json!({"kid": "k"})), JwtError::Algorithm(String::new())),
            (header(json!({"alg": "RS256"})), JwtError::NoKeyId),
            (header(json!({"alg": "RS256", "kid": "k", "crit": ["b64"]})), JwtError::Critical("[\"b64\"]".into())),
            ("x".repeat(MAX_TOKEN_BYTES + 1), JwtError::TooLong(MAX_TOKEN_BYTES + 1)),
        ];
        for (token, expected) in cases {
            assert_eq!(decode(&token).unwrap_err(), expected, "{}", &token[..token.len().min(60)]);
        }
        let not_object = format!("{}.{}.AA", part(&json!({"alg": "RS256", "kid": "k"})), part(&json!([1])));
        assert!(matches!(decode(&not_object).unwrap_err(), JwtError::Json { part: "payload", .. }));
        let kid_number = format!("{}.{}.AA", part(&json!({"alg": "RS256", "kid": 7})), part(&json!({})));
        assert!(matches!(decode(&kid_number).unwrap_err(), JwtError::Json { part: "header", .. }));
        let padded = format!("{}.{}=.AA", part(&json!({"alg": "RS256", "kid": "k"})), part(&json!({"a": 1})));
        assert_eq!(decode(&padded).unwrap_err(), JwtError::Base64("payload"));
    }

    #[test]
    fn times_and_audience() {
        let claims = |v: serde_json::Value| Claims::new(v.as_object().unwrap().clone());
        let ok = claims(json!({"exp": 1000, "iat": 900, "nbf": 900, "aud": "quarry"}));
        assert_eq!(check_times(&ok, 950, 60), Ok(()));
        assert_eq!(check_times(&ok, 1059, 60), Ok(()), "within the skew");
        assert_eq!(check_times(&ok, 1060, 60), Err(ClaimError::Expired { exp: 1000, now: 1060, skew: 60 }));
        assert_eq!(check_times(&ok, 800, 60), Err(ClaimError::NotYetValid { nbf: 900, now: 800 }));
        assert_eq!(check_times(&ok, 845, 60), Ok(()), "nbf within the skew");
        let later = claims(json!({"exp": 5000, "iat": 2000}));
        assert_eq!(check_times(&later, 1000, 60), Err(ClaimError::IssuedLater { iat: 2000, now: 1000 }));
        assert_eq!(check_times(&claims(json!({"iat": 1})), 2, 60), Err(ClaimError::Missing("exp")));
        assert_eq!(check_times(&claims(json!({"exp": 100})), 2, 60), Err(ClaimError::Missing("iat")));
        assert_eq!(check_audience(&ok, "quarry"), Ok(()));
        assert_eq!(check_audience(&claims(json!({"aud": ["x", "quarry"]})), "quarry"), Ok(()));
        let err = check_audience(&ok, "pypi").unwrap_err();
        assert_eq!(err.to_string(), "the token is for audience \"quarry\", not \"pypi\"");
        assert_eq!(check_audience(&claims(json!({})), "q"), Err(ClaimError::Missing("aud")));
    }
}
