//! An issuer's keys: its OpenID discovery document (`{issuer}/.well-known/openid-configuration`,
//! whose `issuer` must be the one asked and whose `jwks_uri` must be fetchable:
//! [`crate::fetchable_url`]) and the JSON Web Key Set it names (RFC 7517). RSA signing keys of
//! 2048 to 8192 bits with a `kid` are kept; a key of another type, use or algorithm, without a
//! `kid`, or with a bad modulus is skipped with its reason (a set with none left is an error).

use std::collections::HashMap;
use std::sync::Arc;

use aws_lc_rs::signature::{ParsedPublicKey, RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Most keys a set may hold (GitHub publishes a handful).
pub const MAX_KEYS: usize = 64;

/// Why a discovery document or a key set is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    /// Not the JSON object it must be.
    #[error("the {what} is not valid JSON of its kind: {why}")]
    Json {
        /// `discovery document` or `key set`.
        what: &'static str,
        /// What serde said.
        why: String,
    },
    /// The discovery document is another issuer's.
    #[error("the discovery document is for issuer {found:?}, not {expected:?}")]
    Issuer {
        /// Its `issuer`.
        found: String,
        /// The issuer asked.
        expected: String,
    },
    /// `jwks_uri` is neither https nor loopback http.
    #[error("jwks_uri {0:?} is neither https:// nor http:// to a loopback address")]
    JwksUri(String),
    /// More than [`MAX_KEYS`] keys.
    #[error("the key set holds {0} keys, more than {MAX_KEYS}")]
    TooMany(usize),
    /// No usable key.
    #[error("the key set holds no usable RS256 key ({0})")]
    NoKeys(String),
}

/// An RSA public key a token's signature is checked with.
#[derive(Debug)]
pub struct PublicKey(ParsedPublicKey);

impl PublicKey {
    /// The key of modulus `n` and exponent `e` (big-endian bytes), 2048 to 8192 bits.
    pub fn from_components(n: &[u8], e: &[u8]) -> Result<Self, String> {
        let n = strip_zeros(n);
        let bits = n.len() * 8;
        if !(2048..=8192).contains(&bits) {
            return Err(format!("a {bits}-bit modulus (2048 to 8192 bits are taken)"));
        }
        let e = strip_zeros(e);
        if e.is_empty() || e.len() > 4 {
            return Err("an exponent that is not 1 to 4 bytes".into());
        }
        RsaPublicKeyComponents { n, e }
            .to_parsed_public_key(&RSA_PKCS1_2048_8192_SHA256)
            .map(Self)
            .map_err(|e| format!("not an RSA key: {e}"))
    }

    /// Whether `signature` is this key's RSASSA-PKCS1-v1_5 SHA-256 signature of `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> bool {
        self.0.verify_sig(message, signature).is_ok()
    }
}

fn strip_zeros(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

/// An issuer's usable keys by `kid`, and what was skipped.
#[derive(Debug, Default)]
pub struct KeySet {
    keys: HashMap<String, Arc<PublicKey>>,
    /// Each skipped key: its `kid` (or index) and why.
    pub skipped: Vec<String>,
}

impl KeySet {
    /// The key of `kid`.
    pub fn get(&self, kid: &str) -> Option<Arc<PublicKey>> {
        self.keys.get(kid).cloned()
    }

    /// How many keys are usable.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// No usable key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[derive(serde::Deserialize)]
struct Jwks {
    keys: Vec<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    alg: Option<String>,
    n: Option<String>,
    e: Option<String>,
}

/// Parse a JSON Web Key Set; see the module documentation for what is kept.
pub fn parse_jwks(bytes: &[u8]) -> Result<KeySet, JwksError> {
    let jwks: Jwks =
        serde_json::from_slice(bytes).map_err(|e| JwksError::Json { what: "key set", why: e.to_string() })?;
    if jwks.keys.len() > MAX_KEYS {
        return Err(JwksError::TooMany(jwks.keys.len()));
    }
    let mut set = KeySet::default();
    for (i, value) in jwks.keys.into_iter().enumerate() {
        let name = value.get("kid").and_then(serde_json::Value::as_str).map_or_else(|| format!("#{i}"), str::to_owned);
        match key_of(value) {
            Ok((kid, key)) => {
                set.keys.insert(kid, Arc::new(key));
            }
            Err(why) => set.skipped.push(format!("{name}: {why}")),
        }
    }
    if set.keys.is_empty() {
        let why = if set.skipped.is_empty() { "it is empty".to_owned() } else { set.skipped.join("; ") };
        return Err(JwksError::NoKeys(why));
    }
    Ok(set)
}

fn key_of(value: serde_json::Value) -> Result<(String, PublicKey), String> {
    let jwk: Jwk = serde_json::from_value(value).map_err(|e| format!("not a JWK: {e}"))?;
    if jwk.kty != "RSA" {
        return Err(format!("key type {:?}, not RSA", jwk.kty));
    }
    if let Some(usage) = jwk.usage.as_deref().filter(|u| *u != "sig") {
        return Err(format!("use {usage:?}, not sig"));
    }
    if let Some(alg) = jwk.alg.as_deref().filter(|a| *a != "RS256") {
        return Err(format!("algorithm {alg:?}, not RS256"));
    }
    let kid = jwk.kid.ok_or("no kid")?;
    let component = |v: Option<String>, name: &str| -> Result<Vec<u8>, String> {
        URL_SAFE_NO_PAD.decode(v.ok_or(format!("no {name}"))?).map_err(|_| format!("{name} is not base64url"))
    };
    let key = PublicKey::from_components(&component(jwk.n, "n")?, &component(jwk.e, "e")?)?;
    Ok((kid, key))
}

#[derive(serde::Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

/// The `jwks_uri` of `expected`'s discovery document `bytes`.
pub fn parse_discovery(bytes: &[u8], expected: &str) -> Result<String, JwksError> {
    let doc: Discovery = serde_json::from_slice(bytes)
        .map_err(|e| JwksError::Json { what: "discovery document", why: e.to_string() })?;
    if doc.issuer != expected {
        return Err(JwksError::Issuer { found: doc.issuer, expected: expected.to_owned() });
    }
    if !crate::fetchable_url(&doc.jwks_uri) {
        return Err(JwksError::JwksUri(doc.jwks_uri));
    }
    Ok(doc.jwks_uri)
}

/// Where `issuer` publishes its discovery document.
pub fn discovery_url(issuer: &str) -> String {
    format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::issue::Signer;

    #[test]
    fn key_sets_keep_rs256_signing_keys_and_say_what_they_skip() {
        let signer = Signer::generate("good").unwrap();
        let good = signer.jwk();
        let n = good["n"].clone();
        let set = json!({"keys": [
            good,
            {"kty": "EC", "kid": "ec", "crv": "P-256"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": n, "e": "AQAB"},
            {"kty": "RSA", "kid": "ps", "alg": "PS256", "n": n, "e": "AQAB"},
            {"kty": "RSA", "n": n, "e": "AQAB"},
            {"kty": "RSA", "kid": "small", "n": URL_SAFE_NO_PAD.encode([0xC5u8; 128]), "e": "AQAB"},
            {"kty": "RSA", "kid": "bad", "n": "!!", "e": "AQAB"},
            {"kty": 7},
        ]});
        let parsed = parse_jwks(set.to_string().as_bytes()).unwrap();
        assert_eq!(parsed.len(), 1);
        assert!(parsed.get("good").is_some());
        assert_eq!(
            parsed.skipped,
            [
                "ec: key type \"EC\", not RSA",
                "enc: use \"enc\", not sig",
                "ps: algorithm \"PS256\", not RS256",
                "#4: no kid",
                "small: a 1024-bit modulus (2048 to 8192 bits are taken)",
                "bad: n is not base64url",
                "#7: not a JWK: invalid type: integer `7`, expected a string",
            ]
        );
        let none = parse_jwks(br#"{"keys": [{"kty": "EC", "kid": "x"}]}"#).unwrap_err();
        assert_eq!(none.to_string(), "the key set holds no usable RS256 key (x: key type \"EC\", not RSA)");
        assert!(matches!(parse_jwks(b"[]"), Err(JwksError::Json { .. })));
        let many = json!({"keys": vec![json!({}); MAX_KEYS + 1]});
        assert_eq!(parse_jwks(many.to_string().as_bytes()).unwrap_err(), JwksError::TooMany(MAX_KEYS + 1));
    }

    #[test]
    fn discovery_names_the_issuer_and_a_fetchable_key_set() {
        let doc = |iss: &str, uri: &str| json!({"issuer": iss, "jwks_uri": uri}).to_string();
        let issuer = "https://token.actions.githubusercontent.com";
        let uri = "https://token.actions.githubusercontent.com/.well-known/jwks";
        assert_eq!(parse_discovery(doc(issuer, uri).as_bytes(), issuer).unwrap(), uri);
        assert!(matches!(parse_discovery(doc("https://evil", uri).as_bytes(), issuer), Err(JwksError::Issuer { .. })));
        assert_eq!(
            parse_discovery(doc(issuer, "http://evil/jwks").as_bytes(), issuer).unwrap_err(),
            JwksError::JwksUri("http://evil/jwks".into())
        );
        assert_eq!(discovery_url("https://i/"), "https://i/.well-known/openid-configuration");
    }
}
