//! Verifying a token against its issuer's keys, fetched and cached.
//!
//! A token is read ([`crate::jwt::decode`]), its `iss` must be one of the trusted issuers
//! (exactly), its `kid` one of that issuer's keys, its signature that key's, and then `aud` must
//! be the audience and `exp`/`nbf`/`iat` hold with [`CachePolicy::skew`]. An issuer's keys are
//! fetched through OpenID discovery on first use and again once older than [`CachePolicy::ttl`]
//! (a failed refresh keeps the old keys); a token naming a `kid` the cached set lacks makes one
//! refetch (the issuer rotated its keys), but at most once per [`CachePolicy::refetch_interval`]
//! per issuer: tokens with made-up kids cannot make the server hammer the issuer. Fetches of one
//! issuer are serialized (one in flight; the others wait for its keys).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::jwks::{JwksError, KeySet, PublicKey, discovery_url, parse_discovery, parse_jwks};
use crate::jwt::{ClaimError, JwtError, check_audience, check_times, decode};
use crate::{Claims, fetchable_url};

/// Fetching a URL's body (the caller's HTTP client, bounded in time and size).
pub trait Fetch: Send + Sync {
    /// The body of a successful `GET url`, or why there is none.
    fn get(&self, url: &str) -> impl Future<Output = Result<Vec<u8>, String>> + Send;
}

/// How keys are cached and times checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    /// Keys older than this are fetched again.
    pub ttl: Duration,
    /// At most one refetch for an unknown `kid` per issuer within this.
    pub refetch_interval: Duration,
    /// Seconds of clock skew allowed on `exp`, `nbf` and `iat`.
    pub skew: u64,
}

impl Default for CachePolicy {
    fn default() -> Self {
        Self { ttl: Duration::from_secs(3600), refetch_interval: Duration::from_secs(30), skew: 60 }
    }
}

/// Why a token is not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VerifyError {
    /// It cannot be read.
    #[error(transparent)]
    Malformed(#[from] JwtError),
    /// It has no `iss`.
    #[error("the token has no iss claim")]
    NoIssuer,
    /// Its issuer is not trusted here.
    #[error("issuer {0:?} is not trusted by this server")]
    UntrustedIssuer(String),
    /// The issuer's keys cannot be had.
    #[error("the keys of {issuer} cannot be fetched: {why}")]
    Keys {
        /// The issuer.
        issuer: String,
        /// What went wrong.
        why: String,
    },
    /// The `kid` is not among the issuer's keys.
    #[error("key {kid:?} is not among the keys {issuer} publishes{note}")]
    UnknownKey {
        /// The token's `kid`.
        kid: String,
        /// The issuer.
        issuer: String,
        /// Whether the keys were just refetched, or when they may be next.
        note: String,
    },
    /// The signature is not the key's.
    #[error("the signature does not verify with key {kid:?} of {issuer}")]
    Signature {
        /// The token's `kid`.
        kid: String,
        /// The issuer.
        issuer: String,
    },
    /// A registered claim refuses it.
    #[error(transparent)]
    Claim(#[from] ClaimError),
}

/// One issuer's cached keys.
#[derive(Debug, Default)]
struct Cached {
    keys: Option<Arc<KeySet>>,
    fetched: Option<Instant>,
    refetched_for_kid: Option<Instant>,
}

/// Verifies tokens of a set of trusted issuers for one audience.
#[derive(Debug)]
pub struct Verifier<F> {
    fetch: F,
    audience: String,
    policy: CachePolicy,
    issuers: HashMap<String, tokio::sync::Mutex<Cached>>,
}

impl<F: Fetch> Verifier<F> {
    /// A verifier trusting `issuers` for tokens addressed to `audience`.
    pub fn new(fetch: F, audience: &str, issuers: impl IntoIterator<Item = String>, policy: CachePolicy) -> Self {
        let issuers = issuers.into_iter().map(|i| (i, tokio::sync::Mutex::default())).collect();
        Self { fetch, audience: audience.to_owned(), policy, issuers }
    }

    /// The audience tokens must name.
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// The fetcher.
    pub fn fetcher(&self) -> &F {
        &self.fetch
    }

    /// The claims of `token` once verified at `now` (seconds since the epoch).
    pub async fn verify(&self, token: &str, now: u64) -> Result<Claims, VerifyError> {
        let unverified = decode(token)?;
        let issuer = unverified.claims.str("iss").ok_or(VerifyError::NoIssuer)?;
        let cache = self.issuers.get(issuer).ok_or_else(|| VerifyError::UntrustedIssuer(issuer.to_owned()))?;
        let kid = &unverified.header.kid;
        let key = self.key(issuer, cache, kid).await?;
        if !unverified.check_signature(&key) {
            return Err(VerifyError::Signature { kid: kid.clone(), issuer: issuer.to_owned() });
        }
        check_audience(&unverified.claims, &self.audience)?;
        check_times(&unverified.claims, now, self.policy.skew)?;
        Ok(unverified.claims)
    }

    /// `kid`'s key among `issuer`'s, fetched or refetched as the module documentation says.
    async fn key(
        &self,
        issuer: &str,
        cache: &tokio::sync::Mutex<Cached>,
        kid: &str,
    ) -> Result<Arc<PublicKey>, VerifyError> {
        let mut cached = cache.lock().await;
        let stale = cached.fetched.is_none_or(|at| at.elapsed() >= self.policy.ttl);
        if stale {
            match self.fetch_keys(issuer).await {
                Ok(keys) => {
                    cached.keys = Some(Arc::new(keys));
                    cached.fetched = Some(Instant::now());
                }
                Err(why) if cached.keys.is_none() => return Err(VerifyError::Keys { issuer: issuer.to_owned(), why }),
                // The old keys serve until the issuer answers again.
                Err(_) => {}
            }
        }
        if let Some(key) = cached.keys.as_ref().and_then(|k| k.get(kid)) {
            return Ok(key);
        }
        let unknown = |note: String| VerifyError::UnknownKey { kid: kid.to_owned(), issuer: issuer.to_owned(), note };
        if stale {
            return Err(unknown(" (just fetched)".into()));
        }
        if let Some(at) = cached.refetched_for_kid
            && at.elapsed() < self.policy.refetch_interval
        {
            let wait = self.policy.refetch_interval.saturating_sub(at.elapsed()).as_secs() + 1;
            return Err(unknown(format!(
                " (refetched {} s ago; next refetch in {wait} s at the earliest)",
                at.elapsed().as_secs()
            )));
        }
        cached.refetched_for_kid = Some(Instant::now());
        let keys = self.fetch_keys(issuer).await.map_err(|why| VerifyError::Keys { issuer: issuer.to_owned(), why })?;
        cached.keys = Some(Arc::new(keys));
        cached.fetched = Some(Instant::now());
        cached.keys.as_ref().and_then(|k| k.get(kid)).ok_or_else(|| unknown(" (refetched just now)".into()))
    }

    /// Discovery, then the key set it names.
    async fn fetch_keys(&self, issuer: &str) -> Result<KeySet, String> {
        let url = discovery_url(issuer);
        if !fetchable_url(&url) {
            return Err(format!("{url} is neither https:// nor loopback http://"));
        }
        let doc = self.fetch.get(&url).await.map_err(|e| format!("{url}: {e}"))?;
        let jwks_uri = parse_discovery(&doc, issuer).map_err(|e: JwksError| format!("{url}: {e}"))?;
        let body = self.fetch.get(&jwks_uri).await.map_err(|e| format!("{jwks_uri}: {e}"))?;
        parse_jwks(&body).map_err(|e| format!("{jwks_uri}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde_json::{Value, json};

    use super::*;
    use crate::issue::Signer;

    const ISSUER: &str = "https://issuer.test";
    const NOW: u64 = 1_700_000_000;

    /// An issuer in memory: its current keys, and how often its key set was fetched.
    #[derive(Default)]
    struct FakeIssuer {
        jwks: Mutex<Value>,
        jwks_fetches: AtomicUsize,
        down: std::sync::atomic::AtomicBool,
    }

    impl Fetch for Arc<FakeIssuer> {
        async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
            if self.down.load(Ordering::SeqCst) {
                return Err("connection refused".into());
            }
            match url {
                "https://issuer.test/.well-known/openid-configuration" => {
                    Ok(json!({"issuer": ISSUER, "jwks_uri": "https://issuer.test/jwks"}).to_string().into_bytes())
                }
                "https://issuer.test/jwks" => {
                    self.jwks_fetches.fetch_add(1, Ordering::SeqCst);
                    Ok(self.jwks.lock().unwrap().to_string().into_bytes())
                }
                _ => Err(format!("404 for {url}")),
            }
        }
    }

    fn claims() -> Value {
        json!({"iss": ISSUER, "aud": "quarry", "exp": NOW + 300, "iat": NOW - 10, "repository": "a/b"})
    }

    fn setup(policy: CachePolicy) -> (Arc<FakeIssuer>, Verifier<Arc<FakeIssuer>>, Signer) {
        let signer = Signer::generate("k1").unwrap();
        let issuer = Arc::new(FakeIssuer::default());
        *issuer.jwks.lock().unwrap() = json!({"keys": [signer.jwk()]});
        let verifier = Verifier::new(issuer.clone(), "quarry", [ISSUER.to_owned()], policy);
        (issuer, verifier, signer)
    }

    #[tokio::test]
    async fn good_tokens_pass_and_each_bad_one_says_why() {
        let (issuer, verifier, signer) = setup(CachePolicy::default());
        let ok = signer.sign(&claims()).unwrap();
        assert_eq!(verifier.verify(&ok, NOW).await.unwrap().str("repository"), Some("a/b"));
        let with = |k: &str, v: Value| {
            let mut c = claims();
            c[k] = v;
            signer.sign(&c).unwrap()
        };
        let stranger = Signer::generate("k1").unwrap();
        let cases = [
            (with("aud", json!("pypi")), "the token is for audience \"pypi\", not \"quarry\""),
            (with("exp", json!(NOW - 100)), "the token expired at 1699999900 (now 1700000000, 60 s of skew allowed)"),
            (with("iss", json!("https://other.test")), "issuer \"https://other.test\" is not trusted by this server"),
            (stranger.sign(&claims()).unwrap(), "the signature does not verify with key \"k1\" of https://issuer.test"),
            ("not.a.token".to_owned(), "the header is not unpadded base64url"),
        ];
        for (token, why) in cases {
            assert_eq!(verifier.verify(&token, NOW).await.unwrap_err().to_string(), why);
        }
        assert_eq!(issuer.jwks_fetches.load(Ordering::SeqCst), 1, "the keys were fetched once and cached");
    }

    #[tokio::test]
    async fn an_unknown_kid_refetches_once_per_interval() {
        let (issuer, verifier, signer) = setup(CachePolicy::default());
        verifier.verify(&signer.sign(&claims()).unwrap(), NOW).await.unwrap();
        // The issuer rotates: a token of the new key makes one refetch and passes.
        let rotated = Signer::generate("k2").unwrap();
        *issuer.jwks.lock().unwrap() = json!({"keys": [signer.jwk(), rotated.jwk()]});
        verifier.verify(&rotated.sign(&claims()).unwrap(), NOW).await.unwrap();
        assert_eq!(issuer.jwks_fetches.load(Ordering::SeqCst), 2);
        // Made-up kids right after: refused without another fetch.
        let forged = Signer::generate("made-up").unwrap();
        for _ in 0..5 {
            let err = verifier.verify(&forged.sign(&claims()).unwrap(), NOW).await.unwrap_err();
            assert!(matches!(err, VerifyError::UnknownKey { ref kid, .. } if kid == "made-up"), "{err}");
            assert!(err.to_string().contains("next refetch in"), "{err}");
        }
        assert_eq!(issuer.jwks_fetches.load(Ordering::SeqCst), 2, "no fetch for made-up kids within the interval");
        // Known keys keep passing meanwhile.
        verifier.verify(&signer.sign(&claims()).unwrap(), NOW).await.unwrap();
    }

    #[tokio::test]
    async fn keys_expire_and_a_failed_refresh_keeps_the_old_ones() {
        let policy = CachePolicy { ttl: Duration::from_millis(50), refetch_interval: Duration::ZERO, skew: 60 };
        let (issuer, verifier, signer) = setup(policy);
        let token = signer.sign(&claims()).unwrap();
        verifier.verify(&token, NOW).await.unwrap();
        tokio::time::sleep(Duration::from_millis(80)).await;
        verifier.verify(&token, NOW).await.unwrap();
        assert_eq!(issuer.jwks_fetches.load(Ordering::SeqCst), 2, "refreshed after the ttl");
        issuer.down.store(true, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(80)).await;
        verifier.verify(&token, NOW).await.unwrap();
        // A fresh verifier with the issuer down cannot verify anything, and says why.
        let (down, fresh, signer) = setup(policy);
        down.down.store(true, Ordering::SeqCst);
        let err = fresh.verify(&signer.sign(&claims()).unwrap(), NOW).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "the keys of https://issuer.test cannot be fetched: https://issuer.test/.well-known/openid-configuration: connection refused"
        );
    }
}
