//! A file's life through the API ([`quarry_index::lifecycle`] does the work):
//!
//! - `POST /-/yank/{key}` with an optional JSON body `{"reason": "…"}`: PEP 592 on every pip
//!   page of the file's project;
//! - `POST /-/unyank/{key}`;
//! - `DELETE /{key}`: the file and its sidecars removed, its root's pip, apt or dnf indexes
//!   republished without it; refused (409) while a channel holds it, naming the channel.
//!
//! Each takes `Authorization: Bearer <token>` as a `PUT` does, and a scoped token acts only under
//! its prefixes (401 without a valid token, 403 outside the scope, naming it). The key is
//! percent-decoded before it is checked, so `%2e%2e` is refused as `..` is. The answer is the
//! report as JSON; every outcome of a valid token is recorded in the audit log.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use quarry_index::audit_log::{AuditEntry, AuditOutcome};
use quarry_index::lifecycle::{self, Change, LifecycleError};

use crate::auth::WriteAuth;
use crate::{AppError, AppState, decode_path};

/// Largest yank request body read.
const MAX_BODY: usize = 16 * 1024;

/// A yank's JSON body.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct YankBody {
    #[serde(default)]
    reason: String,
}

pub(crate) async fn yank_path(State(state): State<AppState>, uri: Uri, headers: HeaderMap, body: Body) -> Response {
    let reason = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => Ok(String::new()),
        Ok(bytes) => serde_json::from_slice::<YankBody>(&bytes)
            .map(|b| b.reason)
            .map_err(|e| AppError::BadRequest(format!("the body is not {{\"reason\": \"…\"}}: {e}"))),
        Err(_) => Err(AppError::TooLarge(format!("a yank's body is at most {MAX_BODY} bytes"))),
    };
    change(&state, &uri, "/-/yank/", &headers, Change::Yank, reason).await
}

pub(crate) async fn unyank_path(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    change(&state, &uri, "/-/unyank/", &headers, Change::Unyank, Ok(String::new())).await
}

pub(crate) async fn delete_path(State(state): State<AppState>, uri: Uri, headers: HeaderMap) -> Response {
    change(&state, &uri, "/", &headers, Change::Delete, Ok(String::new())).await
}

/// Authorize, act, record, answer.
async fn change(
    state: &AppState,
    uri: &Uri,
    route: &str,
    headers: &HeaderMap,
    what: Change,
    reason: Result<String, AppError>,
) -> Response {
    let token = match state.access.writer(headers, WriteAuth::BearerOnly) {
        Ok(token) => token,
        Err(e) => return e.into_response(),
    };
    let identity = token.identity();
    let raw = uri.path().strip_prefix(route).unwrap_or_default();
    let result = match decode_path(raw) {
        Ok(path) => act(state, &token, &path, what, reason).await.map_err(|e| (path, e)),
        Err(e) => Err((raw.to_owned(), e)),
    };
    let entry = match &result {
        Ok(report) => AuditEntry::now(what.audit_action(), &identity, &report.key, AuditOutcome::Ok)
            .sha256(report.sha256.clone())
            .detail(report.reason.clone().filter(|r| !r.is_empty())),
        Err((path, e)) => {
            let outcome = crate::audit::outcome_of(e).unwrap_or(AuditOutcome::Failed);
            AuditEntry::now(what.audit_action(), &identity, path, outcome).detail(Some(e.to_string()))
        }
    };
    crate::audit::record(state, entry).await;
    match result {
        Ok(report) => (StatusCode::OK, Json(report)).into_response(),
        Err((_, e)) => e.into_response(),
    }
}

async fn act(
    state: &AppState,
    token: &crate::Token,
    path: &str,
    what: Change,
    reason: Result<String, AppError>,
) -> Result<lifecycle::LifecycleReport, AppError> {
    token.authorize(path)?;
    let reason = reason?;
    let indexer = state.coalescer.indexer();
    let done = match what {
        Change::Yank => lifecycle::yank(indexer, path, &reason).await,
        Change::Unyank => lifecycle::unyank(indexer, path).await,
        Change::Delete => lifecycle::delete(indexer, path).await,
    };
    done.map_err(|e| match e {
        LifecycleError::BadInput(m) => AppError::BadRequest(m),
        LifecycleError::NotFound(_) => AppError::NotFound(e.to_string()),
        LifecycleError::Held { .. } => AppError::Conflict(e.to_string()),
        other => AppError::Internal(quarry_store::error_chain(&other)),
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::http::{Method, Request};
    use quarry_index::audit_log::{AuditAction, AuditQuery};
    use quarry_store::{MemoryStore, Store, StoreExt as _};
    use tower::ServiceExt as _;

    use super::*;
    use crate::Token;

    const WHEEL: &str = "1-linux/python/foo-1.0-py3-none-any.whl";

    /// A minimal wheel of foo 1.0.
    fn quarry_index_test_wheel() -> Vec<u8> {
        use std::io::Write as _;
        let mut out = std::io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut out);
        let stored = zip::write::SimpleFileOptions::default();
        zip.start_file("foo/__init__.py", stored).unwrap();
        zip.start_file("foo-1.0.dist-info/METADATA", stored).unwrap();
        write!(zip, "Metadata-Version: 2.1\nName: foo\nVersion: 1.0\n").unwrap();
        zip.finish().unwrap();
        out.into_inner()
    }

    async fn send(state: &AppState, method: Method, path: &str, token: Option<&str>, body: &str) -> (u16, String) {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            request = request.header("authorization", format!("Bearer {t}"));
        }
        let response =
            crate::app(state.clone()).oneshot(request.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn routes_are_scoped_and_audited() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let tokens = vec![
            Token::parse_line("ci 1-linux/ name=ci-one").unwrap().unwrap(),
            Token::parse_line("other 2-linux/ name=ci-two").unwrap().unwrap(),
            Token::parse_line("admin name=admin").unwrap().unwrap(),
        ];
        let state = AppState::new(store.clone(), Vec::new()).with_tokens(tokens);
        let bytes = quarry_index_test_wheel();
        let put = Request::builder()
            .method(Method::PUT)
            .uri(format!("/{WHEEL}"))
            .header("authorization", "Bearer ci")
            .body(Body::from(bytes))
            .unwrap();
        assert_eq!(crate::app(state.clone()).oneshot(put).await.unwrap().status(), StatusCode::CREATED);

        let yank = format!("/-/yank/{WHEEL}");
        assert_eq!(send(&state, Method::POST, &yank, None, "").await.0, 401);
        assert_eq!(send(&state, Method::POST, &yank, Some("nope"), "").await.0, 401);
        let (status, body) = send(&state, Method::POST, &yank, Some("other"), "").await;
        assert_eq!((status, body.as_str()), (403, "error: this token may write only under 2-linux/\n"));
        let (status, body) = send(&state, Method::POST, &yank, Some("ci"), r#"{"reason": "broken"}"#).await;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(r#""changed":true"#), "{body}");
        let (_, page) = send(&state, Method::GET, "/1-linux/python/simple/foo/", None, "").await;
        assert!(page.contains(r#"data-yanked="broken""#), "{page}");
        assert_eq!(send(&state, Method::POST, &yank, Some("ci"), "{nope").await.0, 400);
        let (status, _) = send(&state, Method::POST, &format!("/-/unyank/{WHEEL}"), Some("ci"), "").await;
        assert_eq!(status, 200);
        // Hostile keys are refused, percent-encoded too, and nothing changes.
        for bad in ["/-/yank/1-linux/python/%2e%2e/x.whl", "/-/yank/1-linux/logs/a.log", "/1-linux/python/..%2fa.whl"] {
            let method = if bad.starts_with("/-/") { Method::POST } else { Method::DELETE };
            let (status, body) = send(&state, method, bad, Some("ci"), "").await;
            assert_eq!(status, 400, "{bad}: {body}");
        }
        assert_eq!(send(&state, Method::DELETE, &format!("/{WHEEL}"), Some("other"), "").await.0, 403);
        let (status, body) = send(&state, Method::DELETE, &format!("/{WHEEL}"), Some("ci"), "").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(send(&state, Method::DELETE, &format!("/{WHEEL}"), Some("ci"), "").await.0, 404);

        // The log: every outcome of a valid token, nothing for the anonymous requests.
        let log = quarry_index::audit_log::read(store.as_ref(), &AuditQuery::default()).await.unwrap();
        let seen: Vec<String> =
            log.entries.iter().map(|e| format!("{} {} {:?}", e.identity, e.action.as_str(), e.outcome)).collect();
        assert_eq!(
            seen.iter().filter(|s| s.starts_with("ci-one")).count(),
            9,
            "upload, yank, bad body, unyank, three hostile, delete, missing: {seen:#?}"
        );
        assert!(seen.contains(&"ci-two yank Denied".to_owned()), "{seen:#?}");
        assert!(seen.contains(&"ci-two delete Denied".to_owned()), "{seen:#?}");
        let upload = log.entries.iter().find(|e| e.action == AuditAction::Upload).unwrap();
        assert_eq!((upload.key.as_str(), upload.sha256.as_ref().map(String::len)), (WHEEL, Some(64)));

        // Reading it: an unscoped token only.
        assert_eq!(send(&state, Method::GET, "/-/audit", None, "").await.0, 401);
        let (status, body) = send(&state, Method::GET, "/-/audit", Some("ci"), "").await;
        assert_eq!(status, 403, "{body}");
        let (status, body) = send(&state, Method::GET, "/-/audit?key=1-linux/python/", Some("admin"), "").await;
        assert_eq!(status, 200, "{body}");
        let under = |e: &&AuditEntry| e.key.starts_with("1-linux/python/");
        assert_eq!(body.lines().count(), log.entries.iter().filter(under).count());
        assert_eq!(send(&state, Method::GET, "/-/audit?since=later", Some("admin"), "").await.0, 400);
        // Its objects are no files.
        let listed = store.list_all(".quarry-audit/", false).await.unwrap().objects;
        let (status, _) = send(&state, Method::GET, &format!("/{}", listed[0].key), None, "").await;
        assert_eq!(status, 404);
    }
}
