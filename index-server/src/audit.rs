//! The audit log over HTTP ([`quarry_index::audit_log`] holds it in the store): every write the
//! server takes is recorded with the identity of the token that made it ([`crate::Token::identity`])
//! before the answer goes out, refusals of a valid token too (a request without valid
//! credentials names nobody, and records nothing: it cannot fill the store). `GET /-/audit`
//! answers the log as JSON lines, oldest first, to an unscoped token (a scoped one acts only
//! under its prefix, and the log is the whole store's), filtered by `?since=TIME` and
//! `?key=PREFIX`. The entries' own objects are never served as files (`files.rs`).

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use quarry_index::audit_log::{self, AuditAction, AuditEntry, AuditOutcome, AuditQuery};

use crate::auth::WriteAuth;
use crate::{AppError, AppState};

/// The audit log's outcome for a refused request; `None` when it names nobody (no valid token).
pub(crate) fn outcome_of(error: &AppError) -> Option<AuditOutcome> {
    match error {
        AppError::Unauthorized(_) | AppError::Unauthenticated(_) => None,
        AppError::Forbidden(_) => Some(AuditOutcome::Denied),
        AppError::BadRequest(_) | AppError::Conflict(_) | AppError::TooLarge(_) | AppError::NotFound(_) => {
            Some(AuditOutcome::Refused)
        }
        _ => Some(AuditOutcome::Failed),
    }
}

/// Who the request's credentials name, if they are a valid write token.
pub(crate) fn identity(state: &AppState, headers: &HeaderMap, auth: WriteAuth) -> Option<String> {
    state.access.writer(headers, auth).ok().map(|t| t.identity())
}

/// Record `entry` in the store's log (a failure is logged: the write is done).
pub(crate) async fn record(state: &AppState, entry: AuditEntry) {
    audit_log::record(state.store.as_ref(), &entry).await;
}

/// Record an upload's outcome: the key and sha256 stored (and whether the same bytes were there
/// already), or the refusal at `path`.
pub(crate) async fn record_upload(
    state: &AppState,
    headers: &HeaderMap,
    auth: WriteAuth,
    path: &str,
    result: Result<(&quarry_store::Key, &str, bool), &AppError>,
) {
    let Some(identity) = identity(state, headers, auth) else { return };
    let entry = match result {
        Ok((key, sha256, existed)) => {
            let detail = existed.then(|| "the same bytes were there".to_owned());
            AuditEntry::now(AuditAction::Upload, &identity, key.as_str(), AuditOutcome::Ok)
                .sha256(Some(sha256.to_owned()))
                .detail(detail)
        }
        Err(error) => {
            let Some(outcome) = outcome_of(error) else { return };
            let path = path.trim_start_matches('/');
            let shown = percent_encoding::percent_decode_str(path).decode_utf8_lossy().into_owned();
            AuditEntry::now(AuditAction::Upload, &identity, &shown, outcome).detail(Some(error.to_string()))
        }
    };
    record(state, entry).await;
}

/// `GET /-/audit` parameters.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct AuditParams {
    /// Entries at or after this time (RFC 3339, or a date).
    since: Option<String>,
    /// Entries whose key starts with this.
    key: Option<String>,
}

/// `GET /-/audit`: the log as JSON lines to a token that may read it.
pub(crate) async fn audit_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(params): Query<AuditParams>,
) -> Result<Response, AppError> {
    let token = state.access.writer(&headers, WriteAuth::BearerOrBasic).map_err(|e| match e {
        AppError::Unauthorized(_) => AppError::Unauthorized(
            "reading the audit log needs an unscoped token: Authorization: Bearer <token>".into(),
        ),
        other => other,
    })?;
    if !token.may_read_audit() {
        return Err(AppError::Forbidden(format!(
            "this token may write only under {}; the audit log is read with an unscoped token",
            token.prefixes().join(", ")
        )));
    }
    let since = params.since.as_deref().map(audit_log::parse_since).transpose().map_err(AppError::BadRequest)?;
    let query = AuditQuery { since, key_prefix: params.key, done_only: false };
    let log = audit_log::read(state.store.as_ref(), &query).await?;
    let mut body = String::new();
    for entry in &log.entries {
        body.push_str(&serde_json::to_string(entry).map_err(|e| AppError::Internal(e.to_string()))?);
        body.push('\n');
    }
    for key in &log.unreadable {
        tracing::warn!(%key, "an object in the audit log is no entry");
    }
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson; charset=utf-8"), (header::CACHE_CONTROL, "no-store")],
        body,
    )
        .into_response())
}
