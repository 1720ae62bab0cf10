//! Quarry's HTTP server over any [`Store`]: `fn app(state) -> Router`.
//!
//! - `GET`/`HEAD` of any stored object, with `Accept-Ranges`, single `Range`, `ETag` /
//!   `If-None-Match` and `Cache-Control` (short for pages, `immutable` for package files).
//! - `…/simple/` and `…/simple/<project>/` under each pip root, negotiated between PEP 691
//!   JSON and HTML on `Accept`, with redirects to the normalized, slashed URL and 404 for
//!   unknown projects.
//! - `PUT /<root>/<file>` with `Authorization: Bearer <token>`: streamed into the store,
//!   validated, then the root is reindexed in-process (coalesced) before the response.
//! - The run browser (`browse`): `/` lists runs, `/{run}-{platform}/` shows one with install
//!   lines, `/-/package/{run}/{project}/` one Python project.
//! - `/healthz`, `/metrics` (Prometheus text), an access log line per request (`tracing`
//!   target `quarry::access`).
//! - Tokens may be scoped to key prefixes; reads may be made private (`auth`).
//!
//! No index logic lives here: pages are what `quarry-index` published into the store.

mod auth;
pub mod browse;
mod coalesce;
mod error;
mod files;
mod metrics;
mod negotiate;
mod upload;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::HttpBody as _;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use quarry_index::Indexer;
#[cfg(test)]
use quarry_store::StoreExt;
use quarry_store::{CountingStore, Store};

pub use auth::{Access, Token};
pub use coalesce::Coalescer;
pub use error::AppError;
pub use metrics::{Metrics, ReindexStats, route_of};
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

/// Everything the handlers share. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState {
    store: Arc<dyn Store>,
    coalescer: Arc<Coalescer>,
    access: Arc<Access>,
    max_upload: u64,
    /// The URL install lines name (else the request's `Host`).
    public_url: Option<String>,
    /// Groups a run's artifacts by the stage that produced them on its page.
    topology: Option<Arc<quarry_topology::Topology>>,
    log: Arc<Mutex<VecDeque<LoggedRequest>>>,
    metrics: Arc<Metrics>,
    /// The store wrapped to count operations (reported on `/metrics`).
    counting: Arc<CountingStore>,
}

impl AppState {
    /// Serve `store`; uploads need one of `tokens`, which may write anywhere (none: uploads
    /// are refused).
    pub fn new(store: Arc<dyn Store>, tokens: Vec<String>) -> Self {
        let counting = Arc::new(CountingStore::new(store));
        let store: Arc<dyn Store> = counting.clone();
        let coalescer = Coalescer::new(Indexer::new(store.clone()));
        let tokens = tokens.into_iter().filter(|t| !t.is_empty()).map(|t| Token::new(t, Vec::new())).collect();
        Self {
            store,
            coalescer,
            access: Arc::new(Access { tokens, private: false }),
            max_upload: DEFAULT_MAX_UPLOAD,
            public_url: None,
            topology: None,
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

    /// Replace the tokens (each possibly scoped to key prefixes).
    #[must_use]
    pub fn with_tokens(mut self, tokens: Vec<Token>) -> Self {
        self.access = Arc::new(Access { tokens, private: self.access.private });
        self
    }

    /// Require a valid token for reads too (`/healthz` stays open).
    #[must_use]
    pub fn with_private_reads(mut self, private: bool) -> Self {
        self.access = Arc::new(Access { tokens: self.access.tokens.clone(), private });
        self
    }

    /// The base URL install lines on the browse pages name (e.g. behind a proxy).
    #[must_use]
    pub fn with_public_url(mut self, url: Option<String>) -> Self {
        self.public_url = url;
        self
    }

    /// Group run artifacts by stage on the run pages.
    #[must_use]
    pub fn with_topology(mut self, topology: Option<quarry_topology::Topology>) -> Self {
        self.topology = topology.map(Arc::new);
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
        .route("/", get(browse::runs_page))
        .route("/-/package/{run}/{project}", get(browse::package_page))
        .route("/-/package/{run}/{project}/", get(browse::package_page))
        .route("/-/dnf/{file}", get(browse::dnf_repo_file))
        .route("/{*path}", get(files::get_path).put(upload::put_path))
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(state.clone(), guard_reads))
        .layer(middleware::from_fn_with_state(state.clone(), record))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// A private store answers reads only with a valid token; `/healthz` stays open for probes.
async fn guard_reads(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let write = request.method() == axum::http::Method::PUT;
    if !write
        && request.uri().path() != "/healthz"
        && let Err(e) = state.access.authorize_read(request.headers())
    {
        return e.into_response();
    }
    next.run(request).await
}

/// Metrics and the access log for every request.
async fn record(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().to_string();
    let path = request.uri().path().to_owned();
    let response = next.run(request).await;
    let took = started.elapsed();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let bytes = if method == "HEAD" {
        0
    } else {
        response
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .or_else(|| response.body().size_hint().exact())
            .unwrap_or(0)
    };
    let route = route_of(&method, &path);
    state.metrics.request(route, &method, status, bytes, took);
    tracing::info!(
        target: "quarry::access",
        method = %method,
        path = %path,
        route,
        status,
        bytes,
        duration_ms = took.as_secs_f64() * 1000.0,
        "request"
    );
    let mut log = state.log.lock().unwrap_or_else(PoisonError::into_inner);
    if log.len() == REQUEST_LOG_CAPACITY {
        log.pop_front();
    }
    log.push_back(LoggedRequest { method, path, status, content_type });
    response
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let body = state.metrics.render(state.coalescer.stats(), &state.counting.counts());
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
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
        let (status, body) = call(app, get("/")).await;
        assert_eq!(status, StatusCode::OK, "the run list");
        assert!(body.contains("No runs in this store yet"), "{body}");
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
