//! OpenPGP signatures for apt (`InRelease`, `Release.gpg`) and dnf (`repomd.xml.asc`).
//!
//! Signatures are v4, SHA-256, made with the primary key, Issuer Fingerprint hashed and Issuer
//! unhashed, neither critical (rpm ≤ 4.16 misses a critical issuer). The creation time is the
//! caller's — the repo's generation time — so the same state signs to the same bytes (Ed25519
//! and RSA PKCS#1 v1.5 are deterministic), and an unchanged repo is never rewritten.

use std::fmt;

use pgp::composed::{ArmorOptions, CleartextSignedMessage, Deserializable, DetachedSignature, SignedSecretKey};
use pgp::crypto::hash::HashAlgorithm;
use pgp::packet::{SignatureConfig, SignatureType, Subpacket, SubpacketData};
use pgp::types::{KeyDetails, Password, Timestamp};

/// The environment variable holding an ASCII-armored secret key.
pub const KEY_ENV: &str = "QUARRY_SIGNING_KEY";
/// The environment variable naming a file holding one.
pub const KEY_FILE_ENV: &str = "QUARRY_SIGNING_KEY_FILE";

#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("cannot read the signing key: {0}")]
    Key(String),
    #[error("signing failed: {0}")]
    Sign(String),
}

/// A loaded secret key.
#[derive(Clone)]
pub struct Signer {
    key: SignedSecretKey,
    public_armored: String,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer").field("fingerprint", &self.fingerprint()).finish_non_exhaustive()
    }
}

impl Signer {
    /// Load an unprotected ASCII-armored secret key (`gpg --armor --export-secret-keys`).
    pub fn from_armored(armored: &str) -> Result<Self, SignError> {
        let (key, _) = SignedSecretKey::from_string(armored).map_err(|e| SignError::Key(e.to_string()))?;
        key.verify_bindings().map_err(|e| SignError::Key(format!("self-signatures do not verify: {e}")))?;
        let public = key.to_public_key();
        let public_armored = public
            .to_armored_string(ArmorOptions::default())
            .map_err(|e| SignError::Key(format!("cannot export the public key: {e}")))?;
        Ok(Self { key, public_armored })
    }

    /// The key named by `QUARRY_SIGNING_KEY` (armored text) or `QUARRY_SIGNING_KEY_FILE`;
    /// `None` when neither is set (repos are then published unsigned).
    pub fn from_env() -> Result<Option<Self>, SignError> {
        if let Ok(text) = std::env::var(KEY_ENV)
            && !text.trim().is_empty()
        {
            return Self::from_armored(&text).map(Some);
        }
        if let Ok(path) = std::env::var(KEY_FILE_ENV)
            && !path.is_empty()
        {
            let text = std::fs::read_to_string(&path).map_err(|e| SignError::Key(format!("{path}: {e}")))?;
            return Self::from_armored(&text).map(Some);
        }
        Ok(None)
    }

    /// Upper-case hex fingerprint of the primary key.
    pub fn fingerprint(&self) -> String {
        hex::encode_upper(self.key.fingerprint().as_bytes())
    }

    /// The public key, ASCII-armored, for clients' `signed-by` / `gpgkey`.
    pub fn public_key_armored(&self) -> &str {
        &self.public_armored
    }

    fn config(&self, kind: SignatureType, time: u32) -> Result<SignatureConfig, SignError> {
        let err = |e: pgp::errors::Error| SignError::Sign(e.to_string());
        let mut config = SignatureConfig::v4(kind, self.key.algorithm(), HashAlgorithm::Sha256);
        config.hashed_subpackets = vec![
            Subpacket::regular(SubpacketData::SignatureCreationTime(Timestamp::from_secs(time))).map_err(err)?,
            Subpacket::regular(SubpacketData::IssuerFingerprint(self.key.fingerprint())).map_err(err)?,
        ];
        config.unhashed_subpackets =
            vec![Subpacket::regular(SubpacketData::IssuerKeyId(self.key.legacy_key_id())).map_err(err)?];
        Ok(config)
    }

    /// The signature time to use for content generated at `time`: never before the key exists
    /// (gpgv refuses a signature older than its key).
    fn time(&self, time: i64) -> u32 {
        let created = i64::from(self.key.primary_key.created_at().as_secs());
        u32::try_from(time.max(created)).unwrap_or(u32::MAX)
    }

    /// A clear-signed message (`InRelease`). `text` must not have trailing whitespace on any
    /// line: split verifiers (sqv) would see different bytes than were signed.
    pub fn clearsign(&self, text: &str, time: i64) -> Result<String, SignError> {
        debug_assert!(text.lines().all(|l| l.trim_end() == l), "trailing whitespace in signed text");
        let time = self.time(time);
        let message = CleartextSignedMessage::new_many(text, |normalized| {
            let config = self
                .config(SignatureType::Text, time)
                .map_err(|e| pgp::errors::Error::Message { message: e.to_string(), backtrace: None })?;
            Ok(vec![config.sign(&self.key.primary_key, &Password::empty(), normalized.as_bytes())?])
        })
        .map_err(|e| SignError::Sign(e.to_string()))?;
        message.to_armored_string(ArmorOptions::default()).map_err(|e| SignError::Sign(e.to_string()))
    }

    /// A detached ASCII-armored signature over `data` (`Release.gpg`, `repomd.xml.asc`).
    pub fn detached(&self, data: &[u8], time: i64) -> Result<String, SignError> {
        let config = self.config(SignatureType::Binary, self.time(time))?;
        let signature =
            config.sign(&self.key.primary_key, &Password::empty(), data).map_err(|e| SignError::Sign(e.to_string()))?;
        DetachedSignature::new(signature)
            .to_armored_string(ArmorOptions::default())
            .map_err(|e| SignError::Sign(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use pgp::composed::SignedPublicKey;

    use super::*;

    const KEYS: [&str; 2] =
        [include_str!("../../testdata/test-ed25519.sec.asc"), include_str!("../../testdata/test-rsa3072.sec.asc")];

    #[test]
    fn signatures_verify_and_are_reproducible() {
        for key in KEYS {
            check(&Signer::from_armored(key).unwrap());
        }
    }

    fn check(signer: &Signer) {
        let (public, _) = SignedPublicKey::from_string(signer.public_key_armored()).unwrap();
        let text = "Origin: Quarry\nSHA256:\n abc 12 main/binary-amd64/Packages\n- dashed\n";
        let signed = signer.clearsign(text, 2_000_000_000).unwrap();
        assert_eq!(signed, signer.clearsign(text, 2_000_000_000).unwrap());
        let (message, _) = CleartextSignedMessage::from_string(&signed).unwrap();
        message.verify(&public.primary_key).unwrap();
        assert_eq!(message.signed_text().replace("\r\n", "\n"), text);

        let detached = signer.detached(text.as_bytes(), 2_000_000_000).unwrap();
        let (signature, _) = DetachedSignature::from_string(&detached).unwrap();
        signature.verify(&public.primary_key, text.as_bytes()).unwrap();
        assert!(signature.verify(&public.primary_key, b"other bytes").is_err());
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(matches!(Signer::from_armored("not a key"), Err(SignError::Key(_))));
    }
}
