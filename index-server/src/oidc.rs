//! Trusted publishing, PyPI's protocol, so `uv publish --trusted-publishing` and `quarry upload`
//! in GitHub Actions need no stored secret:
//!
//! - `GET /_/oidc/audience` → `{"audience": …}` (`oidc_audience` in `quarry.toml`; default the
//!   public URL's host, else `quarry`). Open even on a private server: it is no secret, and a
//!   client asks it before it has any token. Without rules: 403 `{"message": …}`, as PyPI.
//! - `POST /_/oidc/mint-token` with `{"token": <OIDC JWT>}`: the JWT verified
//!   ([`quarry_oidc::Verifier`]: the issuer's keys through discovery, cached) and matched
//!   against the `[[trusted_publisher]]` rules; the answer `{"success": true, "token": …,
//!   "expires": …}` is an upload token valid for [`MINTED_LIFETIME`], scoped to the matching
//!   rule's prefix with its `{claim}`s filled in, carrying the token's [`Identity`] for the
//!   audit log. A refusal is 422 `{"message": "Token request failed", "errors": [{"code", "description"}]}`
//!   with warehouse's codes: `not-enabled`, `invalid-payload`, `invalid-token` (the reason:
//!   expired, another audience, unknown key, bad signature, …), `invalid-publisher` (the closest
//!   rule's first differing claim).
//!
//! Each mint a verified token asked is recorded in the audit log (`audit`) as action `mint`
//! under the token's [`Identity`] (repository, workflow, run, actor): key the minted prefix and
//! outcome `ok`, or outcome `refused` with the reason when no rule matched. A token that does
//! not verify names nobody and records nothing (anyone could send those, and fill the store).
//!
//! Minted tokens live in memory only (`auth::MintedTokens`: at most `MAX_MINTED`, expired ones
//! dropped, kept by the SHA-256 of their secret), so a restart ends them; they pass through the
//! same scope check as the static tokens (`auth`).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use quarry_index::audit_log::{AuditAction, AuditEntry, AuditOutcome};
use quarry_oidc::{CachePolicy, Identity, Rule, Verifier};
use serde_json::json;

use crate::auth::MintedTokens;
use crate::{AppState, Token};

/// Where clients ask the audience.
pub const AUDIENCE_PATH: &str = "/_/oidc/audience";
/// Where clients exchange an OIDC token for an upload token.
pub const MINT_PATH: &str = "/_/oidc/mint-token";
/// How long a minted token is valid (PyPI's 15 minutes).
pub const MINTED_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// The audience when none is configured and no public URL names a host.
pub const DEFAULT_AUDIENCE: &str = "quarry";
/// Largest mint request body.
const MAX_BODY: usize = 64 * 1024;
/// Largest discovery document or key set fetched.
const MAX_FETCH: usize = 1024 * 1024;

/// The issuer's documents fetched with reqwest: 10 s, at most [`MAX_FETCH`] bytes, redirects
/// only to https or loopback http.
#[derive(Debug, Clone)]
pub struct HttpFetch {
    client: reqwest::Client,
}

impl HttpFetch {
    fn new() -> Result<Self, reqwest::Error> {
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            if attempt.previous().len() < 5 && quarry_oidc::fetchable_url(attempt.url().as_str()) {
                attempt.follow()
            } else {
                attempt.stop()
            }
        });
        let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).redirect(redirects).build()?;
        Ok(Self { client })
    }
}

impl quarry_oidc::Fetch for HttpFetch {
    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut response = self.client.get(url).send().await.map_err(|e| quarry_store::error_chain(&e))?;
        if !response.status().is_success() {
            return Err(format!("answered {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| quarry_store::error_chain(&e))? {
            if body.len() + chunk.len() > MAX_FETCH {
                return Err(format!("more than {MAX_FETCH} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }
}

/// Why a mint was refused: warehouse's code, the description, and whom the token named when it
/// verified (a refusal the audit log records).
#[derive(Debug)]
struct Refusal {
    code: &'static str,
    why: String,
    identity: Option<Identity>,
}

impl Refusal {
    fn new(code: &'static str, why: String, identity: Option<Identity>) -> Self {
        Self { code, why, identity }
    }
}

/// The rules, the verifier and the minted tokens.
#[derive(Debug)]
pub struct TrustedPublishing {
    rules: Vec<Rule>,
    verifier: Verifier<HttpFetch>,
    minted: Arc<MintedTokens>,
}

impl TrustedPublishing {
    /// Trusted publishing for tokens addressed to `audience`, matched against `rules` (their
    /// issuers trusted).
    pub fn new(audience: &str, rules: Vec<Rule>) -> Result<Self, reqwest::Error> {
        let issuers: std::collections::BTreeSet<String> = rules.iter().map(|r| r.issuer.clone()).collect();
        let verifier = Verifier::new(HttpFetch::new()?, audience, issuers, CachePolicy::default());
        Ok(Self { rules, verifier, minted: Arc::default() })
    }

    /// The audience tokens must name.
    pub fn audience(&self) -> &str {
        self.verifier.audience()
    }

    pub(crate) fn minted(&self) -> &Arc<MintedTokens> {
        &self.minted
    }

    /// An upload token for the OIDC `token` at `now`, or the refusal.
    async fn mint(&self, token: &str, now: SystemTime) -> Result<(Token, u64), Refusal> {
        let seconds = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let claims = self
            .verifier
            .verify(token, seconds)
            .await
            .map_err(|e| Refusal::new("invalid-token", format!("malformed or invalid token: {e}"), None))?;
        let identity = Identity::of(&claims);
        let rule = match quarry_oidc::rules::find(&self.rules, &claims) {
            Ok(rule) => rule,
            Err(mismatch) => {
                let why = match mismatch {
                    Some(m) => {
                        tracing::info!(claim = m.claim, found = ?m.found, wanted = %m.wanted, line = m.line, "no trusted publisher matches");
                        m.to_string()
                    }
                    None => "no [[trusted_publisher]] rules".to_owned(),
                };
                let why = format!("valid token, but no corresponding publisher: {why}");
                return Err(Refusal::new("invalid-publisher", why, Some(identity)));
            }
        };
        let prefix = match rule.prefix.render(&claims) {
            Ok(prefix) => prefix,
            Err(e) => {
                let why = format!("valid token, but it cannot be scoped by the rule of line {}: {e}", rule.line);
                return Err(Refusal::new("invalid-publisher", why, Some(identity)));
            }
        };
        let mut random = [0u8; 32];
        getrandom::fill(&mut random)
            .map_err(|_| Refusal::new("internal", "no randomness for a token".to_owned(), Some(identity.clone())))?;
        let secret = format!("quarry-oidc-{}", hex::encode(random));
        let minted = Token::minted(secret, prefix, identity);
        let expires = seconds + MINTED_LIFETIME.as_secs();
        self.minted.insert(minted.clone(), now + MINTED_LIFETIME);
        Ok((minted, expires))
    }
}

/// A refusal as warehouse words it.
fn invalid(code: &str, description: &str) -> Response {
    let body = json!({"message": "Token request failed", "errors": [{"code": code, "description": description}]});
    (StatusCode::UNPROCESSABLE_ENTITY, Json(body)).into_response()
}

/// `GET /_/oidc/audience`.
pub(crate) async fn audience(State(state): State<AppState>) -> Response {
    match state.trusted_publishing() {
        Some(tp) => Json(json!({"audience": tp.audience()})).into_response(),
        None => {
            let body = json!({"message": "Trusted publishing functionality not enabled"});
            (StatusCode::FORBIDDEN, Json(body)).into_response()
        }
    }
}

#[derive(serde::Deserialize)]
struct MintRequest {
    token: String,
}

/// `POST /_/oidc/mint-token`.
pub(crate) async fn mint_token(State(state): State<AppState>, body: Body) -> Response {
    let Some(tp) = state.trusted_publishing() else {
        return invalid(
            "not-enabled",
            "trusted publishing is not enabled: this server has no [[trusted_publisher]] rules",
        );
    };
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY).await else {
        return invalid("invalid-payload", &format!("the body is not read whole, or is over {MAX_BODY} bytes"));
    };
    let request: MintRequest = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => {
            return invalid(
                "invalid-payload",
                &format!("the body must be a JSON object {{\"token\": \"<OIDC token>\"}}: {e}"),
            );
        }
    };
    match tp.mint(&request.token, SystemTime::now()).await {
        Ok((token, expires)) => {
            let identity = token.identity();
            let scope = token.prefixes().join(" ");
            tracing::info!(%identity, %scope, expires, "minted an upload token");
            let until = i64::try_from(expires).ok().and_then(|s| jiff::Timestamp::from_second(s).ok());
            let detail = until.map(|t| format!("expires {}", quarry_index::audit_log::stamp(t)));
            let entry = AuditEntry::now(AuditAction::Mint, &identity, &scope, AuditOutcome::Ok).detail(detail);
            crate::audit::record(&state, entry).await;
            Json(json!({"success": true, "token": token.secret(), "expires": expires})).into_response()
        }
        Err(refusal) => {
            if let Some(identity) = &refusal.identity {
                let outcome = if refusal.code == "internal" { AuditOutcome::Failed } else { AuditOutcome::Refused };
                let entry = AuditEntry::now(AuditAction::Mint, &identity.to_string(), "", outcome)
                    .detail(Some(format!("{}: {}", refusal.code, refusal.why)));
                crate::audit::record(&state, entry).await;
            }
            if refusal.code == "internal" {
                return crate::AppError::Internal(refusal.why).into_response();
            }
            tracing::info!(code = refusal.code, reason = %refusal.why, "refused to mint an upload token");
            invalid(refusal.code, &refusal.why)
        }
    }
}
