//! Issuing tokens as an OIDC provider does: an RSA key with its `kid`, its JWK, and RS256
//! tokens over given claims. Quarry never issues tokens itself; the stand-in issuers of the
//! tests and the benchmark, and the fuzz corpus, are made with this.

use aws_lc_rs::error::Unspecified;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::rsa::{KeyPair, KeySize};
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use crate::jwks::PublicKey;

/// A 2048-bit RSA signing key and its key id.
#[derive(Debug)]
pub struct Signer {
    kid: String,
    key: KeyPair,
}

impl Signer {
    /// A new key named `kid`.
    pub fn generate(kid: &str) -> Result<Self, Unspecified> {
        Ok(Self { kid: kid.to_owned(), key: KeyPair::generate(KeySize::Rsa2048)? })
    }

    /// The key id tokens name.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The modulus and exponent, big-endian (from the key's DER `RSAPublicKey`).
    fn components(&self) -> (&[u8], &[u8]) {
        rsa_public_key(self.key.public_key().as_ref()).unwrap_or((&[], &[]))
    }

    /// The public key as a JWK (`kty` RSA, `use` sig, `alg` RS256).
    pub fn jwk(&self) -> Value {
        let (n, e) = self.components();
        json!({
            "kty": "RSA",
            "use": "sig",
            "alg": "RS256",
            "kid": self.kid,
            "n": URL_SAFE_NO_PAD.encode(n),
            "e": URL_SAFE_NO_PAD.encode(e),
        })
    }

    /// The public key, as a verifier holds it.
    pub fn public_key(&self) -> Result<PublicKey, String> {
        let (n, e) = self.components();
        PublicKey::from_components(n, e)
    }

    /// An RS256 token over `claims` naming this key.
    pub fn sign(&self, claims: &Value) -> Result<String, Unspecified> {
        self.sign_with_header(&json!({"alg": "RS256", "typ": "JWT", "kid": self.kid}), claims)
    }

    /// A token over `claims` with `header` as given, signed RS256 by this key.
    pub fn sign_with_header(&self, header: &Value, claims: &Value) -> Result<String, Unspecified> {
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let mut signature = vec![0; self.key.public_modulus_len()];
        self.key.sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), input.as_bytes(), &mut signature)?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)))
    }
}

/// One DER TLV of `tag`: its value and what follows.
fn tlv(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&t, rest) = input.split_first()?;
    let (&first, rest) = rest.split_first()?;
    if t != tag {
        return None;
    }
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        (rest[..n].iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b)), &rest[n..])
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// `RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER }` (RFC 8017).
fn rsa_public_key(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let (body, _) = tlv(der, 0x30)?;
    let (n, rest) = tlv(body, 0x02)?;
    let (e, _) = tlv(rest, 0x02)?;
    Some((n, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signer_publishes_the_key_it_signs_with() {
        let signer = Signer::generate("k").unwrap();
        let jwk = signer.jwk();
        assert_eq!((jwk["kid"].as_str(), jwk["e"].as_str()), (Some("k"), Some("AQAB")));
        let set = crate::jwks::parse_jwks(serde_json::json!({"keys": [jwk]}).to_string().as_bytes()).unwrap();
        let token = signer.sign(&serde_json::json!({"a": 1})).unwrap();
        assert!(crate::jwt::decode(&token).unwrap().check_signature(&set.get("k").unwrap()));
        assert_eq!(tlv(&[0x30, 0x81, 0x01, 0xff], 0x30), Some((&[0xffu8][..], &[][..])), "long-form length");
        assert_eq!(tlv(&[0x30, 0x05, 0x00], 0x30), None, "a length past the end");
    }
}
