//! Quarry's HTTP server over any [`Store`]: `fn app(state) -> Router`.
//!
//! - `GET`/`HEAD` of any stored object, with `Accept-Ranges`, single `Range`, `ETag` /
//!   `If-None-Match` and `Cache-Control` (short for pages, `immutable` for package files).
//! - `…/simple/` and `…/simple/<project>/` under each pip root, negotiated between PEP 691
//!   JSON and HTML on `Accept`, with redirects to the normalized, slashed URL and 404 for
//!   unknown projects.
//! - `PUT /<root>/<file>` with `Authorization: Bearer <token>`: streamed into the store,
//!   validated, then the root is reindexed in-process (coalesced) before the response.
//! - `POST /<pip root>/`: the legacy PyPI upload form twine and uv publish send
//!   (`legacy_upload`), Basic `__token__` credentials, then the same path as a `PUT`.
//! - `POST /-/yank/<key>`, `POST /-/unyank/<key>`, `DELETE /<key>` (`lifecycle`), each under
//!   the token's scope; every write recorded in the store's audit log, read at `GET /-/audit`
//!   with an unscoped token (`audit`).
//! - The run browser (`browse`): `/` lists runs, `/{run}-{platform}/` shows one with install
//!   lines, `/-/package/{run}/{project}/` one Python project.
//! - `/-/docs/`: the user guide's built pages from a directory (`docs`).
//! - `/healthz`, `/metrics` (Prometheus text), an access log line per request (`tracing`
//!   target `quarry::access`).
//! - Tokens may be scoped to key prefixes; reads may be made private (`auth`).
//! - Trusted publishing, PyPI's protocol (`oidc`): `GET /_/oidc/audience`, `POST
//!   /_/oidc/mint-token` trade a CI run's OIDC token for a short-lived scoped upload token.
//! - `quarry serve`'s settings: `quarry.toml`, options and environment merged ([`Settings`]),
//!   token files and `QUARRY_TOKEN`, and the start-up ([`Settings::open`]: store, tokens,
//!   topology, catch-up, connection cap).
//!
//! No index logic lives here: pages are what `quarry-index` published into the store.

mod audit;
mod auth;
pub mod browse;
mod coalesce;
mod config;
mod conn;
pub mod docs;
mod error;
mod files;
mod gpu;
mod legacy_upload;
mod lifecycle;
mod memo;
mod metrics;
mod negotiate;
pub mod oidc;
mod startup;
pub mod tls;
mod upload;
/// The JSON the server answers uploads with (`quarry-wire`, shared with the clients).
pub use quarry_wire as wire;

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::HttpBody as _;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use quarry_index::Indexer;
#[cfg(test)]
use quarry_store::StoreExt;
use quarry_store::{CountingStore, Store};

pub use auth::{Access, BadScope, Token};
pub use coalesce::Coalescer;
pub use config::{
    ConfigError, DEFAULT_ADDR, DEFAULT_STORE, ServeConfig, ServeOptions, Settings, TOKEN_ENV, env_token,
    parse_env_token, read_token_file, read_token_lines, read_tokens,
};
pub use error::AppError;
pub use legacy_upload::{FORM_BYTES, MAX_PARTS};
pub use metrics::{Metrics, ReindexStats, method_label, route_of};
pub use negotiate::{SimpleFormat, negotiate};
pub use startup::{FD_HEADROOM, catch_up, ensure_token_file, fit_connections, open_file_limit};
pub use upload::SHA256_HEADER;

/// Default cap on one upload: TheRock wheels and packages reach several GiB.
pub const DEFAULT_MAX_UPLOAD: u64 = 64 * 1024 * 1024 * 1024;
/// Most entries the request log keeps.
const REQUEST_LOG_CAPACITY: usize = 10_000;
/// Most bytes the request log keeps (its entries' strings plus a fixed cost per entry).
const REQUEST_LOG_BYTES: usize = 2 * 1024 * 1024;
/// Longest path kept in the request log and written to the access log; longer ones are cut.
pub const LOGGED_PATH_MAX: usize = 512;
/// Longest method kept in the request log and written to the access log.
const LOGGED_METHOD_MAX: usize = 16;

/// The policy for Quarry's own pages (browse, error and generated index pages): no scripts, no
/// plugins, no framing, inline styles only.
pub const PAGE_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// The policy for stored content Quarry did not generate: a sandbox, nothing loads.
pub const UNTRUSTED_CSP: &str = "default-src 'none'; sandbox; frame-ancestors 'none'";

/// One served request, kept in a bounded in-memory log (tests and debugging read it). Long
/// methods and paths are cut (see [`LOGGED_PATH_MAX`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRequest {
    pub method: String,
    pub path: String,
    pub status: u16,
    pub content_type: Option<String>,
}

impl LoggedRequest {
    /// What the entry costs the log.
    fn cost(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.method.len()
            + self.path.len()
            + self.content_type.as_ref().map_or(0, String::len)
    }
}

/// The newest requests, capped by count and by bytes: the oldest go first.
#[derive(Debug, Default)]
struct RequestLog {
    /// Shared: a kept page's entry is the same for every request it answers.
    entries: VecDeque<Arc<LoggedRequest>>,
    bytes: usize,
}

impl RequestLog {
    fn push(&mut self, entry: Arc<LoggedRequest>) {
        let cost = entry.cost();
        while self.entries.len() >= REQUEST_LOG_CAPACITY || (self.bytes + cost > REQUEST_LOG_BYTES) {
            let Some(old) = self.entries.pop_front() else { break };
            self.bytes -= old.cost();
        }
        self.bytes += cost;
        self.entries.push_back(entry);
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

/// `s` cut to at most `max` bytes at a character boundary, with a marker saying how long it was.
pub fn truncated(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}…[{} bytes]", &s[..end], s.len()))
}

/// hyper's smallest read buffer: [`Limits::max_header_bytes`] below it is raised to it.
pub const MIN_HEADER_BYTES: usize = 8192;

/// What slow, idle or greedy clients may hold of the server. Every timeout of zero disables it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at once. At the cap, the connection idle the longest (waiting for a
    /// request head, or kept alive between requests) is closed to make room, else the busy one
    /// furthest behind the minimum rates (waiting on its client, at least a moment behind);
    /// when neither exists, accepting waits for a connection to finish or fall behind.
    pub max_connections: usize,
    /// Open connections from one client address (an IPv6 client: its /64). At the cap, that
    /// address's connection idle the longest is closed for the new one, else its busy one
    /// furthest behind; with neither, the new connection is closed. One address filling its
    /// share cannot take the others', and still reaches `/healthz` itself. Behind a reverse
    /// proxy every client has the proxy's address: set it to `max_connections` there.
    pub max_connections_per_address: usize,
    /// A response must reach its client at least this fast, in bytes per second, averaged
    /// over [`Limits::min_rate_window`]; a slower one is cut. 0: no minimum.
    pub min_send_rate: u64,
    /// A request body being read (an upload, or a refused one being drained) must arrive at
    /// least this fast, in bytes per second, averaged over [`Limits::min_rate_window`]; a
    /// slower one is cut (an upload answers 400). 0: no minimum.
    pub min_body_rate: u64,
    /// The minimum rates' window: a transfer starts with this much credit (its grace period),
    /// spends it while it waits on its client, and earns `1 / rate` seconds per byte moved, up
    /// to this much again. So a transfer that moves nothing is cut after this at most, and a
    /// burst into socket buffers buys no more than this.
    pub min_rate_window: Duration,
    /// A request head (request line and headers) must arrive within this; it also bounds how
    /// long an idle keep-alive connection waits for its next request.
    pub header_timeout: Duration,
    /// A request body that delivers nothing for this long is cut (an upload answers 400). With
    /// a minimum rate, [`Limits::min_rate_window`] cuts a stall sooner if it is shorter.
    pub body_idle_timeout: Duration,
    /// A client that takes nothing of a response for this long is disconnected (likewise).
    pub send_timeout: Duration,
    /// Serve several requests per connection.
    pub keep_alive: bool,
    /// Then close the connection (`Connection: close` on the last response).
    pub max_requests_per_connection: u64,
    /// Largest request head in bytes; larger ones get 431. Also the connection's read buffer.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_connections_per_address: 256,
            min_send_rate: 1024,
            min_body_rate: 1024,
            min_rate_window: Duration::from_secs(30),
            header_timeout: Duration::from_secs(30),
            body_idle_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            keep_alive: true,
            max_requests_per_connection: 1000,
            max_header_bytes: 64 * 1024,
        }
    }
}

/// The local address a request came in on, and whether over TLS (the fallback base URL of
/// install lines, and their scheme).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServedAt {
    pub(crate) addr: SocketAddr,
    pub(crate) tls: bool,
}

/// Everything the handlers share, behind one `Arc`: axum clones the state for every request
/// (the `State` extractor, the front middleware), and that is one reference count.
#[derive(Debug, Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] shares.
#[derive(Debug, Clone)]
pub struct Shared {
    store: Arc<dyn Store>,
    coalescer: Arc<Coalescer>,
    access: Arc<Access>,
    max_upload: u64,
    /// The URL install lines name (else the request's `Host`, when allowed).
    public_url: Option<String>,
    /// Host names a request's `Host` may give install lines when no public URL is set
    /// (loopback names always may; [`browse::base_url`]).
    allowed_hosts: Arc<[String]>,
    /// Groups a run's artifacts by the stage that produced them on its page.
    topology: Option<Arc<quarry_topology::Topology>>,
    /// The user guide's built pages, served under `/-/docs/` ([`docs`]).
    docs: Option<Arc<std::path::Path>>,
    log: Arc<Mutex<RequestLog>>,
    metrics: Arc<Metrics>,
    /// The store wrapped to count operations (reported on `/metrics`).
    counting: Arc<CountingStore>,
    limits: Limits,
    /// Answers to repeated reads of stored pages, served without the router.
    memo: Arc<memo::Memo>,
    /// Serve over TLS with this ([`tls`]); none: plain HTTP.
    tls: Option<tls::Tls>,
    /// Trusted publishing ([`oidc`]); none: not configured.
    oidc: Option<Arc<oidc::TrustedPublishing>>,
    /// A channel's page read from its current version ([`quarry_index::versions`]).
    versions: Arc<quarry_index::versions::Resolver>,
    /// `quarry.toml`'s `[layout]`: which prefixes are roots, for the indexer and the pages.
    layout: Arc<quarry_layout::config::Layout>,
}

impl AppState {
    /// Serve `store`; uploads need one of `tokens`, which may write anywhere (none: uploads
    /// are refused).
    pub fn new(store: Arc<dyn Store>, tokens: Vec<String>) -> Self {
        let counting = Arc::new(CountingStore::new(store));
        let store: Arc<dyn Store> = counting.clone();
        // The default layout (runs only) until `with_layout` gives the configured one.
        let layout = Arc::new(quarry_layout::config::Layout::default());
        let coalescer = Coalescer::new(Indexer::new(store.clone(), layout.clone()));
        let tokens = tokens.into_iter().filter(|t| !t.is_empty()).map(Token::unscoped).collect();
        Self(Arc::new(Shared {
            store,
            coalescer,
            access: Arc::new(Access { tokens, private: false, minted: None }),
            max_upload: DEFAULT_MAX_UPLOAD,
            public_url: None,
            allowed_hosts: Arc::new([]),
            topology: None,
            docs: None,
            log: Arc::default(),
            metrics: Arc::default(),
            counting,
            limits: Limits::default(),
            memo: Arc::default(),
            tls: None,
            oidc: None,
            versions: Arc::default(),
            layout,
        }))
    }

    /// The shared fields, for the builder methods (before the state is shared: no copy).
    fn shared(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.0)
    }

    /// Publish apt/dnf metadata with `config` (signing key, Release fields, grace period).
    #[must_use]
    pub fn with_index_config(mut self, config: quarry_index::IndexConfig) -> Self {
        let indexer = Indexer::new(self.store.clone(), self.layout.clone()).with_config(config);
        self.shared().coalescer = Coalescer::new(indexer);
        self
    }

    /// Lay roots out as `layout` does (`quarry.toml`'s `[layout]`): the indexer's roots and
    /// views, and the pages' channels.
    #[must_use]
    pub fn with_layout(mut self, layout: Arc<quarry_layout::config::Layout>) -> Self {
        let config = self.coalescer.indexer().config().clone();
        let indexer = Indexer::new(self.store.clone(), layout.clone()).with_config(config);
        let shared = self.shared();
        shared.coalescer = Coalescer::new(indexer);
        shared.layout = layout;
        self
    }

    /// The layout the server indexes and browses with.
    pub fn layout(&self) -> &quarry_layout::config::Layout {
        &self.layout
    }

    /// Replace the tokens (each possibly scoped to key prefixes).
    #[must_use]
    pub fn with_tokens(mut self, tokens: Vec<Token>) -> Self {
        self.shared().access = Arc::new(Access { tokens, ..Access::clone(&self.access) });
        self
    }

    /// Require a valid token for reads too (`/healthz` and the OIDC audience stay open).
    #[must_use]
    pub fn with_private_reads(mut self, private: bool) -> Self {
        self.shared().access = Arc::new(Access { private, ..Access::clone(&self.access) });
        self
    }

    /// Mint upload tokens for OIDC tokens matching trusted publisher rules ([`oidc`]).
    #[must_use]
    pub fn with_trusted_publishing(mut self, tp: Option<oidc::TrustedPublishing>) -> Self {
        let minted = tp.as_ref().map(|tp| tp.minted().clone());
        self.shared().access = Arc::new(Access { minted, ..Access::clone(&self.access) });
        self.shared().oidc = tp.map(Arc::new);
        self
    }

    /// Trusted publishing, when configured.
    pub fn trusted_publishing(&self) -> Option<&oidc::TrustedPublishing> {
        self.oidc.as_deref()
    }

    /// The base URL install lines on the browse pages name (e.g. behind a proxy).
    #[must_use]
    pub fn with_public_url(mut self, url: Option<String>) -> Self {
        self.shared().public_url = url;
        self
    }

    /// Host names (`quarry.internal`, `*.example.com`) whose `Host` header install lines may
    /// name when no public URL is set; any other `Host` gives the address the request came in
    /// on. Loopback names are always allowed.
    #[must_use]
    pub fn with_allowed_hosts(mut self, hosts: Vec<String>) -> Self {
        self.shared().allowed_hosts = hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect();
        self
    }

    /// Group run artifacts by stage on the run pages.
    #[must_use]
    pub fn with_topology(mut self, topology: Option<quarry_topology::Topology>) -> Self {
        self.shared().topology = topology.map(Arc::new);
        self
    }

    /// Serve the user guide's built pages (`mdbook build docs/guide`) from `dir` under
    /// `/-/docs/`.
    #[must_use]
    pub fn with_docs(mut self, dir: Option<std::path::PathBuf>) -> Self {
        self.shared().docs = dir.map(Arc::from);
        self
    }

    #[must_use]
    pub fn with_max_upload(mut self, bytes: u64) -> Self {
        self.shared().max_upload = bytes;
        self
    }

    /// Connection limits and timeouts [`serve`] applies.
    #[must_use]
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.shared().limits = limits;
        self
    }

    /// Serve over TLS ([`tls`]) instead of plain HTTP.
    #[must_use]
    pub fn with_tls(mut self, tls: Option<tls::Tls>) -> Self {
        self.shared().tls = tls;
        self
    }

    /// The TLS configuration [`serve`] applies, if any.
    pub fn tls(&self) -> Option<&tls::Tls> {
        self.tls.as_ref()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The most recent requests, oldest first.
    pub fn request_log(&self) -> Vec<LoggedRequest> {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entries
            .iter()
            .map(|e| LoggedRequest::clone(e))
            .collect()
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
        .route("/-/channel/", get(browse::channel::channels_page))
        .route("/-/channel/{*root}", get(browse::channel::channel_page))
        .route("/-/gpu/{run}", get(gpu::gpu_page))
        .route("/-/gpu/{run}/", get(gpu::gpu_page))
        .route("/-/docs", get(docs::docs_root_redirect))
        .route("/-/docs/", get(docs::docs_index))
        .route("/-/docs/{*path}", get(docs::docs_file))
        .route("/-/audit", get(audit::audit_page))
        .route("/-/yank/{*key}", axum::routing::post(lifecycle::yank_path))
        .route("/-/unyank/{*key}", axum::routing::post(lifecycle::unyank_path))
        .route(oidc::AUDIENCE_PATH, get(oidc::audience))
        .route(oidc::MINT_PATH, axum::routing::post(oidc::mint_token))
        .route(
            "/{*path}",
            get(files::get_path).put(upload::put_path).post(legacy_upload::post_path).delete(lifecycle::delete_path),
        )
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(state.clone(), front))
        .with_state(state)
}

/// Every request, in one layer (each layer costs every request a move of the future it wraps):
/// a debug span naming it; the read guard (a private store answers reads only with a valid
/// token; `/healthz` stays open for probes, the OIDC audience for clients before they have one); metrics and the access log (labels bounded:
/// unknown methods count as `OTHER`, and so are the logged method and path); `nosniff` on
/// every response, and Quarry's policy on every response that has none of its own.
async fn front(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let head = request.method() == axum::http::Method::HEAD;
    let (method, uri) = (request.method().clone(), request.uri().clone());
    let span = tracing::debug_span!(
        "request",
        method = %truncated(method.as_str(), LOGGED_METHOD_MAX),
        path = %truncated(uri.path(), LOGGED_PATH_MAX)
    );
    // Writes authorize themselves (a PUT, an upload form POSTed to a pip root, a yank, a DELETE).
    let write =
        matches!(*request.method(), axum::http::Method::PUT | axum::http::Method::POST | axum::http::Method::DELETE);
    let open = matches!(request.uri().path(), "/healthz" | oidc::AUDIENCE_PATH);
    let denied = match !write && !open {
        true => state.access.authorize_read(request.headers()).err(),
        false => None,
    };
    let mut response = match denied {
        Some(e) => e.into_response(),
        None => tracing::Instrument::instrument(next.run(request), span.clone()).await,
    };
    let _entered = span.enter();
    let bytes = if head {
        0
    } else {
        response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .or_else(|| response.body().size_hint().exact())
            .unwrap_or(0)
    };
    let served = Served::new(&method, uri.path(), response.status().as_u16(), response.headers());
    account(&state, &served, bytes, started.elapsed());
    let headers = response.headers_mut();
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(PAGE_CSP));
    }
    response
}

/// What a served request leaves in the metrics and the request log, but its timing and size.
#[derive(Debug, Clone)]
pub(crate) struct Served {
    route: &'static str,
    label: &'static str,
    entry: Arc<LoggedRequest>,
}

impl Served {
    pub(crate) fn new(method: &axum::http::Method, path: &str, status: u16, headers: &axum::http::HeaderMap) -> Self {
        let label = method_label(method.as_str());
        let entry = LoggedRequest {
            method: truncated(method.as_str(), LOGGED_METHOD_MAX).into_owned(),
            path: truncated(path, LOGGED_PATH_MAX).into_owned(),
            status,
            content_type: headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned),
        };
        Self { route: route_of(label, path), label, entry: Arc::new(entry) }
    }
}

/// A served request's metrics, access log line and request log entry.
pub(crate) fn account(state: &Shared, served: &Served, bytes: u64, took: Duration) {
    let entry = &served.entry;
    state.metrics.request(served.route, served.label, entry.status, bytes, took);
    tracing::info!(
        target: "quarry::access",
        method = %entry.method,
        path = %entry.path,
        route = served.route,
        status = entry.status,
        bytes,
        duration_ms = took.as_secs_f64() * 1000.0,
        "request"
    );
    state.log.lock().unwrap_or_else(PoisonError::into_inner).push(entry.clone());
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let body = state.metrics.render(state.coalescer.stats(), &state.counting.counts());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
}

/// Decode a request path into the store key it names (without the leading `/`).
fn decode_path(raw: &str) -> Result<String, AppError> {
    percent_encoding::percent_decode_str(raw.trim_start_matches('/'))
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| AppError::BadRequest(format!("path {raw:?} is not valid UTF-8 once percent-decoded")))
}

/// Percent-encode a key as an absolute URL path (for `Location` headers and links).
fn encode_path(key: &str) -> String {
    format!("/{}", quarry_store::url::encode_path(key))
}

/// Serve [`app`] on `listener` until `shutdown` completes, with the state's [`Limits`]: request
/// heads time out, request bodies and responses keep their minimum rates and idle timeouts,
/// connections are capped in all and per client address (the longest-idle one, else the one
/// furthest behind, makes room for a new one), keep-alive is bounded. On shutdown, no new
/// connection is accepted, idle ones close, and requests in progress finish. With the state's
/// TLS configuration ([`AppState::with_tls`]) every connection is TLS ([`tls`]), and the
/// certificate also reloads on SIGHUP (Unix).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = state.limits.clone();
    let router = app(state.clone());
    let main = tokio::runtime::Handle::current();
    let mut lanes = conn::Lanes::start(conn::Lanes::default_count())?;
    let connections = Arc::new(conn::Connections::new(&limits));
    let http = conn::builder(&limits);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    // Ended with the server: dropping the handle does not stop the task.
    let hangup = state.tls().cloned().map(|tls| tokio::spawn(tls::reload_on_hangup(tls)));
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if conn::is_connection_error(&e) => continue,
            Err(e) => {
                // Out of file descriptors, most likely: make room and try again shortly.
                tracing::warn!(error = %e, "accepting a connection failed; closing one to make room");
                connections.make_room();
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(conn::ACCEPT_BACKOFF) => continue,
                }
            }
        };
        // At a cap, a connection is closed to make room (`conn`), or this one waits.
        let slot = tokio::select! {
            () = &mut shutdown => break,
            slot = connections.place(peer.ip()) => slot,
        };
        let Some(slot) = slot else { continue };
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::debug!(error = %e, "an accepted connection could not be handed over");
                continue;
            }
        };
        let app = (router.clone(), state.clone(), main.clone());
        lanes.spawn(conn::run(http.clone(), stream, app, slot, stopping.clone(), limits.clone()));
    }
    drop(listener);
    if let Some(hangup) = hangup {
        hangup.abort();
    }
    let _ = stop.send(true);
    drop(stopping);
    // Every connection holds a receiver: this returns once the last one has closed.
    stop.closed().await;
    lanes.stop().await;
    Ok(())
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

    pub(super) async fn plant(state: &AppState, key: &str, body: &'static [u8]) {
        let key = quarry_store::Key::new(key).unwrap();
        state
            .store()
            .put_bytes(&key, bytes::Bytes::from_static(body), quarry_store::PutOptions::default())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn every_response_is_hardened_for_browsers() {
        let state = AppState::new(Arc::new(MemoryStore::default()), vec![]);
        plant(&state, "7-linux/index.html", b"<html>listing</html>").await;
        plant(&state, "7-linux/logs/report.html", b"<script>alert(1)</script>").await;
        plant(&state, "7-linux/logs/pic.svg", b"<svg onload=alert(1)></svg>").await;
        plant(&state, "7-linux/logs/build.log", b"ok").await;
        let app = app(state);
        for (path, status) in [
            ("/", StatusCode::OK),
            ("/healthz", StatusCode::OK),
            ("/metrics", StatusCode::OK),
            ("/7-linux/index.html", StatusCode::OK),
            ("/7-linux/logs/build.log", StatusCode::OK),
            ("/nope/", StatusCode::NOT_FOUND),
            ("/a/%2e%2e/b", StatusCode::BAD_REQUEST),
        ] {
            let response = app.clone().oneshot(get(path)).await.unwrap();
            assert_eq!(response.status(), status, "{path}");
            let headers = response.headers();
            assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
            assert_eq!(headers["content-security-policy"], PAGE_CSP, "{path}");
            assert!(headers.get("content-disposition").is_none(), "{path}");
        }
        assert!(PAGE_CSP.contains("frame-ancestors 'none'") && !PAGE_CSP.contains("script-src"));
        let response = app.clone().oneshot(get("/7-linux/index.html")).await.unwrap();
        assert_eq!(response.headers()["content-type"], "text/html; charset=utf-8", "generated pages render");
        for (path, name) in [("/7-linux/logs/report.html", "report.html"), ("/7-linux/logs/pic.svg", "pic.svg")] {
            for method in ["GET", "HEAD"] {
                let request = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
                let response = app.clone().oneshot(request).await.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                let headers = response.headers();
                assert_eq!(headers["content-type"], "application/octet-stream", "{method} {path}");
                assert_eq!(headers["content-disposition"], format!("attachment; filename*=UTF-8''{name}"));
                assert_eq!(headers["content-security-policy"], UNTRUSTED_CSP);
                assert_eq!(headers["x-content-type-options"], "nosniff");
            }
        }
    }

    #[tokio::test]
    async fn the_request_log_and_metrics_stay_bounded() {
        let state = AppState::new(Arc::new(MemoryStore::default()), vec![]);
        let app = app(state.clone());
        let long = format!("/{}", "p".repeat(60 * 1024));
        for i in 0..200 {
            let method = format!("M{i}{}", "X".repeat(4096));
            let request = Request::builder().method(method.as_str()).uri(&long).body(Body::empty()).unwrap();
            let _ = app.clone().oneshot(request).await.unwrap();
            let _ = app.clone().oneshot(get(&format!("{long}{i}"))).await.unwrap();
        }
        let log = state.request_log();
        assert_eq!(log.len(), 400);
        for entry in &log {
            assert!(entry.path.len() <= LOGGED_PATH_MAX + 32, "{} bytes", entry.path.len());
            assert!(entry.method.len() <= LOGGED_METHOD_MAX + 32, "{}", entry.method);
        }
        assert!(log[0].path.ends_with(&format!("…[{} bytes]", long.len())), "{}", &log[0].path[LOGGED_PATH_MAX - 8..]);
        let (_, metrics) = call(app, get("/metrics")).await;
        assert!(metrics.contains("method=\"OTHER\""), "{metrics}");
        assert!(metrics.len() < 16 * 1024, "{} bytes of metrics", metrics.len());
    }

    #[test]
    fn the_request_log_is_capped_by_bytes_and_count() {
        let mut log = RequestLog::default();
        let entry = |path: String| LoggedRequest { method: "GET".into(), path, status: 200, content_type: None };
        for i in 0..20_000 {
            log.push(Arc::new(entry(format!("/{i}"))));
        }
        assert_eq!(log.entries.len(), REQUEST_LOG_CAPACITY);
        assert_eq!(log.entries.back().unwrap().path, "/19999");
        for _ in 0..10_000 {
            log.push(Arc::new(entry("x".repeat(LOGGED_PATH_MAX))));
        }
        assert!(log.bytes <= REQUEST_LOG_BYTES, "{}", log.bytes);
        assert_eq!(log.bytes, log.entries.iter().map(|e| e.cost()).sum::<usize>());
        assert!(log.entries.len() < REQUEST_LOG_CAPACITY && log.entries.len() > 1000, "{}", log.entries.len());
        log.clear();
        assert_eq!((log.entries.len(), log.bytes), (0, 0));
        assert_eq!(truncated("héllo", 2), "h…[6 bytes]", "cut at a character boundary");
        assert_eq!(truncated("short", 10), "short");
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
        let stored = state.store().list_all("", false).await.unwrap().objects;
        assert!(stored.iter().all(|o| quarry_index::audit_log::is_audit_path(o.key.as_str())));
    }
}

/// The accept loop on real loopback sockets.
#[cfg(test)]
mod listener_tests {
    use std::time::{Duration, Instant};

    use quarry_store::MemoryStore;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::tests::plant;
    use super::*;

    struct Running {
        addr: SocketAddr,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<std::io::Result<()>>,
    }

    impl Running {
        async fn start(state: AppState) -> Self {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(serve(listener, state, async {
                let _ = rx.await;
            }));
            Self { addr, stop: Some(tx), task }
        }

        /// Stop the server; it must return within `within`.
        async fn stop(mut self, within: Duration) {
            let _ = self.stop.take().unwrap().send(());
            tokio::time::timeout(within, &mut self.task).await.expect("serve returned in time").unwrap().unwrap();
        }
    }

    fn state(limits: Limits) -> AppState {
        AppState::new(Arc::new(MemoryStore::default()), vec!["t0k".into()]).with_limits(limits)
    }

    /// Everything the server sends until it closes, or what came within `limit`.
    async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let deadline = Instant::now() + limit;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, stream.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return (out, true),
                Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
                Err(_) => return (out, false),
            }
        }
    }

    async fn partial_head(addr: SocketAddr) -> TcpStream {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
        stream
    }

    #[tokio::test]
    async fn heads_time_out_and_the_longest_idle_connection_makes_room() {
        let limits = Limits { max_connections: 4, header_timeout: Duration::from_secs(3), ..Limits::default() };
        let server = Running::start(state(limits)).await;
        let opened = Instant::now();
        let mut partial = Vec::new();
        for _ in 0..4 {
            partial.push(partial_head(server.addr).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        // At the cap: a probe is still answered at once, long before any head times out.
        let asked = Instant::now();
        let mut probe = TcpStream::connect(server.addr).await.unwrap();
        probe.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
        let (response, closed) = read_until_closed(&mut probe, Duration::from_secs(2)).await;
        let text = String::from_utf8_lossy(&response);
        assert!(closed && text.starts_with("HTTP/1.1 200") && text.ends_with("ok\n"), "{text}");
        assert!(asked.elapsed() < Duration::from_secs(1), "{:?}", asked.elapsed());
        // The oldest partial connection made room; the others are cut by the header timeout.
        let (_, closed) = read_until_closed(&mut partial[0], Duration::from_millis(500)).await;
        assert!(closed, "the longest-idle connection was closed for the probe");
        for stream in &mut partial[1..] {
            let (_, closed) = read_until_closed(stream, Duration::from_secs(5)).await;
            assert!(closed, "a partial head is cut");
        }
        let took = opened.elapsed();
        assert!(took >= Duration::from_millis(2900) && took < Duration::from_secs(5), "cut after {took:?}");
        server.stop(Duration::from_secs(2)).await;
    }

    #[tokio::test]
    async fn stalled_upload_bodies_are_cut() {
        let state = state(Limits { body_idle_timeout: Duration::from_millis(500), ..Limits::default() });
        let server = Running::start(state.clone()).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let started = Instant::now();
        stream
            .write_all(
                b"PUT /7-linux/python/a-1.0-py3-none-any.whl HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t0k\r\n\
                  Content-Length: 100000\r\n\r\nPK\x03\x04 only a little",
            )
            .await
            .unwrap();
        let (response, _) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
        let text = String::from_utf8_lossy(&response);
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        assert!(text.contains("sent nothing for 500ms"), "{text}");
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        let stored = state.store().list_all("", false).await.unwrap().objects;
        assert!(stored.iter().all(|o| quarry_index::audit_log::is_audit_path(o.key.as_str())), "nothing stored");
        server.stop(Duration::from_secs(2)).await;
    }

    #[tokio::test]
    async fn keep_alive_is_bounded() {
        let server = Running::start(state(Limits { max_requests_per_connection: 2, ..Limits::default() })).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        // Two pipelined requests: both answered, then the connection closes (it would stay open
        // for a third without the limit).
        for _ in 0..2 {
            stream.write_all(request).await.unwrap();
        }
        let (response, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
        let text = String::from_utf8_lossy(&response).to_ascii_lowercase();
        assert!(closed, "closed after the second response: {text}");
        assert_eq!(text.matches("http/1.1 200").count(), 2, "{text}");
        assert_eq!(text.matches("connection: close").count(), 1, "{text}");

        let server2 = Running::start(state(Limits { keep_alive: false, ..Limits::default() })).await;
        let mut stream = TcpStream::connect(server2.addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        let (response, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
        assert!(closed && String::from_utf8_lossy(&response).starts_with("HTTP/1.1 200"));
        server.stop(Duration::from_secs(2)).await;
        server2.stop(Duration::from_secs(2)).await;
    }

    #[tokio::test]
    async fn oversized_heads_are_refused() {
        let server = Running::start(state(Limits::default())).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        let method = "X".repeat(200 * 1024);
        let _ = stream.write_all(format!("{method} / HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await;
        let (response, closed) = read_until_closed(&mut stream, Duration::from_secs(5)).await;
        // The rest of the head is never read, so the close may reset the 431 away.
        let text = String::from_utf8_lossy(&response);
        assert!(closed && (text.is_empty() || text.starts_with("HTTP/1.1 431")), "{text}");
        let mut probe = TcpStream::connect(server.addr).await.unwrap();
        let head = format!("GET /{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "p".repeat(70 * 1024));
        probe.write_all(head.as_bytes()).await.unwrap();
        let (response, closed) = read_until_closed(&mut probe, Duration::from_secs(5)).await;
        let text = String::from_utf8_lossy(&response);
        assert!(closed && (text.is_empty() || text.starts_with("HTTP/1.1 431")), "{text}");
        server.stop(Duration::from_secs(2)).await;
    }

    #[tokio::test]
    async fn clients_that_stop_reading_are_disconnected() {
        let state = state(Limits { send_timeout: Duration::from_millis(500), ..Limits::default() });
        const SIZE: usize = 64 * 1024 * 1024;
        let key = quarry_store::Key::new("7-linux/big.tar.zst").unwrap();
        state
            .store()
            .put_bytes(&key, bytes::Bytes::from(vec![7u8; SIZE]), quarry_store::PutOptions::default())
            .await
            .unwrap();
        let server = Running::start(state).await;
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(b"GET /7-linux/big.tar.zst HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (response, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
        assert!(closed, "the server hung up");
        assert!(response.len() < SIZE, "got {} of {SIZE} bytes", response.len());
        server.stop(Duration::from_secs(2)).await;
    }

    #[tokio::test]
    async fn shutdown_closes_idle_connections_at_once() {
        let server = Running::start(state(Limits::default())).await;
        let mut partial = partial_head(server.addr).await;
        let idle = TcpStream::connect(server.addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.stop(Duration::from_secs(2)).await;
        let (_, closed) = read_until_closed(&mut partial, Duration::from_secs(1)).await;
        assert!(closed);
        drop(idle);
    }

    /// One request on its own connection: the response head (lower-cased header names, `date`
    /// left out) and body.
    async fn ask(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> (Vec<String>, Vec<u8>) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let (response, closed) = read_until_closed(&mut stream, Duration::from_secs(10)).await;
        assert!(closed, "the server closed the connection");
        let end = response.windows(4).position(|w| w == b"\r\n\r\n").expect("a complete head");
        let head = String::from_utf8(response[..end].to_vec()).unwrap();
        let mut lines: Vec<String> = head.lines().map(str::to_owned).collect();
        for line in &mut lines[1..] {
            let (name, value) = line.split_once(':').unwrap();
            *line = format!("{}:{value}", name.to_ascii_lowercase());
        }
        lines.retain(|l| !l.starts_with("date:"));
        (lines, response[end + 4..].to_vec())
    }

    fn header<'a>(head: &'a [String], name: &str) -> Option<&'a str> {
        head.iter().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim)
    }

    #[tokio::test]
    async fn kept_pages_answer_as_the_router_does_and_follow_every_change() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(quarry_store::LocalStore::open(dir.path()).unwrap());
        let state = AppState::new(store, vec!["t0k".into()]);
        let page = "5-linux/python/simple/demo/index.html";
        plant(&state, page, b"<html>one</html>").await;
        plant(&state, "5-linux/python/simple/demo/index.json", b"{\"one\": 1}").await;
        let server = Running::start(state.clone()).await;
        let url = "/5-linux/python/simple/demo/";
        let html = [("Accept", "text/html")];

        let first = ask(server.addr, "GET", url, &html).await;
        assert_eq!(first.0[0], "HTTP/1.1 200 OK");
        assert_eq!(first.1, b"<html>one</html>");
        assert_eq!(state.memo.held().0, 1, "the answer was kept");
        let before = state.counting.counts();
        let again = ask(server.addr, "GET", url, &html).await;
        let after = state.counting.counts();
        assert_eq!(again, first, "the kept answer is the router's, header for header");
        assert_eq!((after.get - before.get, after.head - before.head), (0, 1), "one check, no read");

        // Another Accept is another answer; the JSON one is kept beside it.
        let json = [("Accept", "application/vnd.pypi.simple.v1+json")];
        let first_json = ask(server.addr, "GET", url, &json).await;
        assert_eq!(first_json.1, b"{\"one\": 1}");
        assert_eq!(ask(server.addr, "GET", url, &json).await, first_json);
        assert_eq!(state.memo.held().0, 2);

        // Ranges, conditionals and HEAD are the router's.
        let etag = header(&first.0, "etag").unwrap().to_owned();
        let ranged = ask(server.addr, "GET", url, &[html[0], ("Range", "bytes=0-5")]).await;
        assert_eq!((ranged.0[0].as_str(), &ranged.1[..]), ("HTTP/1.1 206 Partial Content", &b"<html>"[..]));
        let cached = ask(server.addr, "GET", url, &[html[0], ("If-None-Match", &etag)]).await;
        assert_eq!((cached.0[0].as_str(), cached.1.len()), ("HTTP/1.1 304 Not Modified", 0));
        let head = ask(server.addr, "HEAD", url, &html).await;
        assert_eq!((head.0[0].as_str(), head.1.len()), ("HTTP/1.1 200 OK", 0));
        assert_eq!(header(&head.0, "etag"), Some(etag.as_str()));

        // A new page, written by this store or another process's, is served at once.
        plant(&state, page, b"<html>two</html>").await;
        let second = ask(server.addr, "GET", url, &html).await;
        assert_eq!(second.1, b"<html>two</html>");
        assert_ne!(header(&second.0, "etag"), Some(etag.as_str()));
        std::fs::write(dir.path().join(page), b"<html>three, by hand</html>").unwrap();
        assert_eq!(ask(server.addr, "GET", url, &html).await.1, b"<html>three, by hand</html>");
        std::fs::remove_file(dir.path().join(page)).unwrap();
        let gone = ask(server.addr, "GET", url, &html).await;
        assert_eq!(gone.0[0], "HTTP/1.1 404 Not Found");
        assert_eq!(state.memo.held().0, 1, "the removed page's answer went");

        // Every request was counted and logged, kept answers too.
        let log = state.request_log();
        assert_eq!(log.len(), 10);
        assert!(log.iter().all(|r| r.path == url), "{log:?}");
        assert_eq!(
            log[1],
            LoggedRequest {
                method: "GET".into(),
                path: url.into(),
                status: 200,
                content_type: Some("text/html; charset=utf-8".into())
            }
        );
        let metrics = state.metrics.render(state.coalescer.stats(), &state.counting.counts());
        assert!(
            metrics.contains("quarry_http_requests_total{route=\"simple\",method=\"GET\",status=\"200\"} 6"),
            "{metrics}"
        );
        server.stop(Duration::from_secs(2)).await;
    }

    #[tokio::test]
    async fn kept_pages_of_a_private_store_still_need_a_token() {
        let state = AppState::new(Arc::new(MemoryStore::default()), vec!["t0k".into()]).with_private_reads(true);
        plant(&state, "5-linux/python/index.html", b"<html>runs</html>").await;
        let server = Running::start(state.clone()).await;
        let token = [("Authorization", "Bearer t0k")];
        let first = ask(server.addr, "GET", "/5-linux/python/", &token).await;
        assert_eq!((first.0[0].as_str(), &first.1[..]), ("HTTP/1.1 200 OK", &b"<html>runs</html>"[..]));
        assert_eq!(state.memo.held().0, 1);
        assert_eq!(ask(server.addr, "GET", "/5-linux/python/", &token).await, first);
        for headers in [&[][..], &[("Authorization", "Bearer wrong")][..]] {
            let denied = ask(server.addr, "GET", "/5-linux/python/", headers).await;
            assert_eq!(denied.0[0], "HTTP/1.1 401 Unauthorized", "{headers:?}");
            assert!(!denied.1.windows(4).any(|w| w == b"runs"));
        }
        server.stop(Duration::from_secs(2)).await;
    }
}
