//! Quarry's HTTP server over any [`Store`]: `fn app(state) -> Router`.
//!
//! - `GET`/`HEAD` of any stored object, with `Accept-Ranges`, single `Range`, `ETag` /
//!   `If-None-Match` and `Cache-Control` (short for pages, `immutable` for package files).
//! - `…/simple/` and `…/simple/<project>/` under each pip root, negotiated between PEP 691
//!   JSON and HTML on `Accept`, with redirects to the normalized, slashed URL and 404 for
//!   unknown projects.
//! - `PUT /<root>/<file>` with `Authorization: Bearer <token>`: streamed into the store,
//!   validated, then the root is reindexed in-process (coalesced) before the response.
//! - `/healthz`, `/metrics`.
//!
//! No index logic lives here: pages are what `quarry-index` published into the store.

mod coalesce;
mod error;
mod files;
mod negotiate;
mod upload;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use quarry_index::Indexer;
#[cfg(test)]
use quarry_store::StoreExt;
use quarry_store::{CountingStore, Store};

pub use coalesce::Coalescer;
pub use error::AppError;
pub use negotiate::{SimpleFormat, negotiate};
pub use upload::SHA256_HEADER;

/// Default cap on one upload: TheRock wheels and packages reach several GiB.
pub const DEFAULT_MAX_UPLOAD: u64 = 64 * 1024 * 1024 * 1024;
const REQUEST_LOG_CAPACITY: usize = 10_000;

/// One served request, kept in a bounded in-memory log (tests and debugging read it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRequest {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub content_type: Option<String>,
}

#[derive(Debug, Default)]
struct Metrics {
    requests: AtomicU64,
    client_errors: AtomicU64,
    server_errors: AtomicU64,
    uploads: AtomicU64,
}

/// Everything the handlers share. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    store: Arc<dyn Store>,
    coalescer: Arc<Coalescer>,
    tokens: Arc<Vec<String>>,
    max_upload: u64,
    log: Arc<Mutex<VecDeque<LoggedRequest>>>,
    metrics: Arc<Metrics>,
    /// The store wrapped to count operations (reported on `/metrics`).
    counting: Arc<CountingStore>,
}

impl AppState {
    /// Serve `store`; uploads need one of `tokens` (none: uploads are refused).
    pub fn new(store: Arc<dyn Store>, tokens: Vec<String>) -> Self {
        let counting = Arc::new(CountingStore::new(store));
        let store: Arc<dyn Store> = counting.clone();
        let coalescer = Coalescer::new(Indexer::new(store.clone()));
        Self {
            store,
            coalescer,
            tokens: Arc::new(tokens.into_iter().filter(|t| !t.is_empty()).collect()),
            max_upload: DEFAULT_MAX_UPLOAD,
            log: Arc::default(),
            metrics: Arc::default(),
            counting,
        }
    }

    /// Publish apt/dnf metadata with `config` (signing key, Release fields, grace period).
    #[must_use]
    pub fn with_index_config(mut self, config: quarry_index::IndexConfig) -> Self {
        self.coalescer = Coalescer::new(Indexer::new(self.store.clone()).with_config(config));
        self
    }

    #[must_use]
    pub fn with_max_upload(mut self, bytes: u64) -> Self {
        self.max_upload = bytes;
        self
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The most recent requests, oldest first.
    pub fn request_log(&self) -> Vec<LoggedRequest> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect()
    }

    pub fn clear_request_log(&self) {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }
}

/// The whole HTTP surface.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics))
        .route("/", get(files::get_path))
        .route("/{*path}", get(files::get_path).put(upload::put_path))
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(state.clone(), record))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

async fn record(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    let content_type =
        response.headers().get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    state.metrics.requests.fetch_add(1, Ordering::Relaxed);
    if (400..500).contains(&status) {
        state.metrics.client_errors.fetch_add(1, Ordering::Relaxed);
    } else if status >= 500 {
        state.metrics.server_errors.fetch_add(1, Ordering::Relaxed);
    }
    let mut log = state.log.lock().unwrap_or_else(PoisonError::into_inner);
    if log.len() == REQUEST_LOG_CAPACITY {
        log.pop_front();
    }
    log.push_back(LoggedRequest { method, path, status, content_type });
    response
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let m = &state.metrics;
    let ops = state.counting.counts();
    let body = format!(
        "# TYPE quarry_requests_total counter\nquarry_requests_total {}\n\
         # TYPE quarry_client_errors_total counter\nquarry_client_errors_total {}\n\
         # TYPE quarry_server_errors_total counter\nquarry_server_errors_total {}\n\
         # TYPE quarry_uploads_total counter\nquarry_uploads_total {}\n\
         # TYPE quarry_store_operations_total counter\n\
         quarry_store_operations_total{{op=\"list\"}} {}\n\
         quarry_store_operations_total{{op=\"head\"}} {}\n\
         quarry_store_operations_total{{op=\"get\"}} {}\n\
         quarry_store_operations_total{{op=\"put\"}} {}\n\
         quarry_store_operations_total{{op=\"delete\"}} {}\n",
        m.requests.load(Ordering::Relaxed),
        m.client_errors.load(Ordering::Relaxed),
        m.server_errors.load(Ordering::Relaxed),
        m.uploads.load(Ordering::Relaxed),
        ops.list,
        ops.head,
        ops.get,
        ops.put,
        ops.delete,
    );
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

/// Decode a request path into the store key it names (without the leading `/`).
fn decode_path(raw: &str) -> Result<String, AppError> {
    percent_encoding::percent_decode_str(raw.trim_start_matches('/'))
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| AppError::BadRequest(format!("path {raw:?} is not valid UTF-8 once percent-decoded")))
}

/// Percent-encode a key for use in a `Location` header.
fn encode_path(key: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet =
        &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');
    format!("/{}", percent_encoding::utf8_percent_encode(key, SEGMENT))
}

/// Serve [`app`] on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(state)).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use quarry_store::MemoryStore;
    use tower::ServiceExt;

    use super::*;

    async fn call(app: Router, request: Request<Body>) -> (StatusCode, String) {
        let response = app.oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    fn get(uri: &str) -> Request<Body> {
        Request::get(uri).body(Body::empty()).unwrap()
    }

    #[tokio::test]
    async fn reads_are_open_and_keys_are_checked() {
        let app = app(AppState::new(Arc::new(MemoryStore::default()), vec![]));
        assert_eq!(call(app.clone(), get("/healthz")).await, (StatusCode::OK, "ok\n".into()));
        let (status, body) = call(app.clone(), get("/a/%2e%2e/b")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        insta::assert_snapshot!(body, @r#"error: invalid key "a/../b": '.' and '..' segments are not allowed"#);
        let (status, body) = call(app.clone(), get("/.quarry/lock")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(body.contains("reserved"), "{body}");
        let (status, body) = call(app.clone(), get("/r/python/simple/nope/")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        insta::assert_snapshot!(body, @r#"error: no project "nope" in r/python/"#);
        let (status, _) = call(app, get("/")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn uploads_need_a_configured_token() {
        let put = || Request::put("/r/python/a-1.0-py3-none-any.whl").body(Body::from("x")).unwrap();
        let read_only = app(AppState::new(Arc::new(MemoryStore::default()), vec![]));
        let (status, body) = call(read_only, put()).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        insta::assert_snapshot!(body, @"error: uploads are disabled: start the server with --token-file or QUARRY_TOKEN set");
        let guarded = app(AppState::new(Arc::new(MemoryStore::default()), vec!["secret".into()]));
        let (status, body) = call(guarded, put()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        insta::assert_snapshot!(body, @"error: uploads need an 'Authorization: Bearer <token>' header");
    }

    #[tokio::test]
    async fn too_large_uploads_are_refused_up_front() {
        let state = AppState::new(Arc::new(MemoryStore::default()), vec!["t".into()]).with_max_upload(10);
        let request = Request::put("/r/python/a-1.0-py3-none-any.whl")
            .header("authorization", "Bearer t")
            .header("content-length", "11")
            .body(Body::from("01234567890"))
            .unwrap();
        let (status, body) = call(app(state.clone()), request).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
        assert!(state.store().list_all("", false).await.unwrap().objects.is_empty());
    }
}
