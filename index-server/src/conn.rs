//! Connections: the per-connection task, the cap with eviction of the longest-idle connection,
//! and the timeouts hyper does not have (idle request bodies, stalled responses).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::IntoResponse as _;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use quarry_index::task::run_owned_on;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tower::ServiceExt as _;

use super::{AppError, AppState, Limits, ServedAt, memo};

/// How long to wait before accepting again after an error such as `EMFILE`.
pub(super) const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Set in a connection's state once it was chosen to make room.
const EVICTED: u64 = 1 << 63;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(super) fn builder(limits: &Limits) -> http1::Builder {
    let mut http = http1::Builder::new();
    let header_timeout = (!limits.header_timeout.is_zero()).then_some(limits.header_timeout);
    http.timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(limits.keep_alive)
        .max_header_size(limits.max_header_bytes.max(crate::MIN_HEADER_BYTES))
        .max_buf_size(limits.max_header_bytes.max(crate::MIN_HEADER_BYTES));
    http
}

/// Errors of one connection that never was (the client gave up before it was accepted).
pub(super) fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// One open connection. `state` counts requests in progress, with [`EVICTED`] set once it
/// was closed to make room (only ever from zero requests in progress).
struct Conn {
    state: AtomicU64,
    /// When it last became idle, in milliseconds since the registry's epoch.
    idle_since: AtomicU64,
    served: AtomicU64,
    evict: Notify,
    epoch: Instant,
}

impl Conn {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A request began: the connection is busy until the guard (moved into the response
    /// body) is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        self.state.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }
}

struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.idle_since.store(self.0.now(), Ordering::Release);
        self.0.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open connections and the cap on them.
pub(super) struct Connections {
    slots: Arc<Semaphore>,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
    epoch: Instant,
}

/// A connection's place under the cap; dropping it frees the place.
pub(super) struct Slot {
    id: u64,
    conn: Arc<Conn>,
    connections: Arc<Connections>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.open.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.id);
    }
}

impl Connections {
    pub(super) fn new(max: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))),
            open: Mutex::default(),
            next: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn register(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Slot {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            state: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            served: AtomicU64::new(0),
            evict: Notify::new(),
            epoch: self.epoch,
        });
        conn.idle_since.store(conn.now(), Ordering::Release);
        self.open.lock().unwrap_or_else(PoisonError::into_inner).insert(id, conn.clone());
        Slot { id, conn, connections: self.clone(), _permit: permit }
    }

    /// A place if one is free.
    pub(super) fn slot(self: &Arc<Self>) -> Option<Slot> {
        let permit = self.slots.clone().try_acquire_owned().ok()?;
        Some(self.register(permit))
    }

    /// The next place that frees up.
    pub(super) async fn wait_slot(self: &Arc<Self>) -> Slot {
        match self.slots.clone().acquire_owned().await {
            Ok(permit) => self.register(permit),
            // The semaphore is never closed.
            Err(_) => std::future::pending().await,
        }
    }

    /// Close the connection idle the longest (no request in progress); false if every
    /// connection is busy.
    pub(super) fn evict_longest_idle(&self) -> bool {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        for _ in 0..open.len() {
            let Some(oldest) = open
                .values()
                .filter(|c| c.state.load(Ordering::Acquire) == 0)
                .min_by_key(|c| c.idle_since.load(Ordering::Acquire))
            else {
                return false;
            };
            // Lost to a request that just began: pick again.
            if oldest.state.compare_exchange(0, EVICTED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                oldest.evict.notify_one();
                return true;
            }
        }
        false
    }
}

/// Serve one connection until it ends, is evicted, or the server stops (then the request
/// in progress finishes first).
pub(super) async fn run(
    http: http1::Builder,
    stream: std::net::TcpStream,
    (router, state, main): (Router, AppState, Handle),
    slot: Slot,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    limits: Limits,
) {
    // Registered with the runtime of the lane this runs on.
    let stream = match TcpStream::from_std(stream) {
        Ok(stream) => stream,
        Err(e) => {
            tracing::debug!(error = %e, "a connection could not be registered");
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let served_at = stream.local_addr().ok();
    let conn = slot.conn.clone();
    let io = TokioIo::new(SendTimeout::new(stream, limits.send_timeout));
    let service = {
        let conn = conn.clone();
        hyper::service::service_fn(move |request: Request<Incoming>| {
            let (router, state, conn, limits, main) =
                (router.clone(), state.clone(), conn.clone(), limits.clone(), main.clone());
            async move {
                let busy = conn.begin();
                let served = conn.served.fetch_add(1, Ordering::AcqRel) + 1;
                let (mut parts, body) = request.into_parts();
                let eligible = memo::eligible(&parts);
                let kept = match eligible {
                    true => memo::serve_kept(&state, &parts).await,
                    false => None,
                };
                let mut response = match kept {
                    Some(kept) => kept.map(|page| Out::Page(Some(page))),
                    None => {
                        let asked = eligible.then(|| memo::Asked::of(&parts));
                        if let Some(addr) = served_at {
                            parts.extensions.insert(ServedAt(addr));
                        }
                        let body = Body::new(IdleBody::new(body, limits.body_idle_timeout));
                        // The handlers run on the main runtime (an upload's reindex spreads
                        // over every core there); dropping this request cancels its handler.
                        let request = Request::from_parts(parts, body);
                        let mut response = match run_owned_on(&main, router.oneshot(request)).await {
                            Ok(Ok(response)) => response,
                            // The main runtime shut down under the request.
                            Err(_) => AppError::Unavailable("the server is stopping".into()).into_response(),
                        };
                        if let Some(asked) = asked
                            && response.status() == StatusCode::OK
                            && let Some(answer) = response.extensions_mut().remove::<memo::Memoizable>()
                        {
                            state.memo.insert(&asked, answer, response.headers().clone());
                        }
                        response.map(Out::Router)
                    }
                };
                if !limits.keep_alive || served >= limits.max_requests_per_connection {
                    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _busy: busy }))
            }
        })
    };
    let mut connection = std::pin::pin!(http.serve_connection(io, service));
    let outcome = tokio::select! {
        outcome = connection.as_mut() => outcome,
        () = conn.evict.notified() => {
            tracing::debug!("closed an idle connection to make room for a new one");
            return;
        }
        _ = stopping.changed() => {
            // Idle, or still sending a request head: close now. Else finish the request.
            if conn.state.compare_exchange(0, EVICTED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return;
            }
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = outcome {
        tracing::debug!(error = %e, "connection ended");
    }
    drop(slot);
}

/// Threads, one per core by default, each with a single-threaded runtime serving the
/// connections handed to it. A connection's reads, kept pages and writes stay on one thread:
/// no wake-up of another worker per request (on a shared multi-threaded runtime that hand-off
/// cost a fifth of a kept page's CPU). Handlers still run on the main runtime.
pub(super) struct Lanes {
    handles: Vec<Handle>,
    next: usize,
    /// Dropped to stop the lanes.
    _stop: Vec<tokio::sync::oneshot::Sender<()>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Lanes {
    /// `count` lanes (at least one).
    pub(super) fn start(count: usize) -> io::Result<Self> {
        let count = count.max(1);
        let mut lanes = Self { handles: Vec::new(), next: 0, _stop: Vec::new(), threads: Vec::new() };
        for i in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            lanes.handles.push(runtime.handle().clone());
            lanes._stop.push(stop);
            let thread = std::thread::Builder::new().name(format!("quarry-conn-{i}")).spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
            lanes.threads.push(thread);
        }
        Ok(lanes)
    }

    /// The lanes to use by default: one per core.
    pub(super) fn default_count() -> usize {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    }

    /// Run `task` on the next lane, in turn.
    pub(super) fn spawn(&mut self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = &self.handles[self.next % self.handles.len()];
        self.next = self.next.wrapping_add(1);
        drop(handle.spawn(task));
    }

    /// Stop every lane (its runtime drops what is left on it) and wait for its thread.
    pub(super) async fn stop(self) {
        let Self { threads, _stop, .. } = self;
        drop(_stop);
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        let _ = joined.await;
    }
}

/// A request body that fails once the client sends nothing for `limit` while it is read.
struct IdleBody {
    inner: Incoming,
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

#[derive(Debug, thiserror::Error)]
#[error("the request body sent nothing for {0:?}; the request was cut")]
struct BodyStalled(Duration);

impl IdleBody {
    fn new(inner: Incoming, limit: Duration) -> Self {
        Self { inner, limit, timer: None, armed: false }
    }
}

impl hyper::body::Body for IdleBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.armed = false;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending if this.limit.is_zero() => Poll::Pending,
            Poll::Pending => {
                let limit = this.limit;
                let timer = this.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if !this.armed {
                    timer.as_mut().reset(tokio::time::Instant::now() + limit);
                    this.armed = true;
                }
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(BodyStalled(limit).into()))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body: the router's, or a kept page's bytes (`memo`).
enum Out {
    Router(Body),
    Page(Option<Bytes>),
}

/// A response body that keeps its connection busy (not evictable) until it is done.
struct Tracked {
    body: Out,
    _busy: Busy,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        match &mut self.body {
            Out::Router(body) => Pin::new(body).poll_frame(cx),
            Out::Page(page) => Poll::Ready(page.take().map(|data| Ok(Frame::data(data)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.body {
            Out::Router(body) => body.is_end_stream(),
            Out::Page(page) => page.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.body {
            Out::Router(body) => body.size_hint(),
            Out::Page(page) => SizeHint::with_exact(page.as_ref().map_or(0, |p| p.len() as u64)),
        }
    }
}

/// The socket, failing writes that make no progress for `limit` (a client that stopped
/// reading).
struct SendTimeout {
    stream: TcpStream,
    limit: Duration,
    timer: Option<Pin<Box<Sleep>>>,
    armed: bool,
}

impl SendTimeout {
    fn new(stream: TcpStream, limit: Duration) -> Self {
        Self { stream, limit, timer: None, armed: false }
    }

    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.armed = false;
            return poll;
        }
        if self.limit.is_zero() {
            return Poll::Pending;
        }
        let limit = self.limit;
        let timer = self.timer.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if !self.armed {
            timer.as_mut().reset(tokio::time::Instant::now() + limit);
            self.armed = true;
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took nothing of the response for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for SendTimeout {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for SendTimeout {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.watch(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(cx);
        self.watch(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_shutdown(cx);
        self.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lanes_take_tasks_in_turn_and_stop_with_their_threads() {
        let mut lanes = Lanes::start(2).unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for _ in 0..4 {
            let tx = tx.clone();
            lanes.spawn(async move {
                let _ = tx.send(std::thread::current().name().map(str::to_owned));
            });
        }
        let mut names = Vec::new();
        for _ in 0..4 {
            names.push(rx.recv().await.unwrap().unwrap());
        }
        names.sort();
        assert_eq!(names, ["quarry-conn-0", "quarry-conn-0", "quarry-conn-1", "quarry-conn-1"]);
        // A task still pending when the lanes stop is dropped with its lane's runtime.
        let (held, pending) = tokio::sync::oneshot::channel::<()>();
        lanes.spawn(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        tokio::time::timeout(Duration::from_secs(10), lanes.stop()).await.expect("the lanes stopped");
        assert!(pending.await.is_err(), "the pending task was dropped");
        assert_eq!(Lanes::start(0).unwrap().handles.len(), 1, "at least one lane");
    }
}
