//! Connections: the per-connection task, the caps on them and who is closed to make room, the
//! paces hyper does not keep (request bodies and responses that stall or crawl), the close that
//! lets a refusal reach its client, and the lanes connections run on.
//!
//! Making room. At `max_connections` a new connection takes the place of the connection idle
//! the longest (no request in progress: waiting for a head, or kept alive between requests),
//! else of the busy connection furthest behind its minimum rate among those waiting on their
//! client (a response write or a body read pending), either for [`EVICT_AFTER`] at least; with
//! neither, accepting waits, looking again every [`ROOM_RETRY`]. A client address (an IPv6
//! client: its /64) at `max_connections_per_address` gives up its own connection idle the
//! longest (as long), else its own busy one furthest behind (by any amount: it competes with
//! itself only); with neither, the new connection is closed. So slow clients on one address
//! cannot take the others' places, and that address still reaches `/healthz`. A busy
//! connection closed to make room, like a response cut for its pace, is reset (`SO_LINGER` 0):
//! the kernel drops what it still holds for the client (up to megabytes of socket buffer)
//! rather than trickling it out to a slow reader.
//!
//! Pace ([`Pace`]). The response written to the socket and the request body read each keep a
//! credit in seconds: it starts at `min_rate_window` (the grace period), is spent while the
//! transfer waits on its client, and is earned back at `1 / rate` seconds per byte moved, up to
//! the window again. The transfer is cut when the credit runs out, so it must average the
//! minimum rate over any stretch longer than the window, a burst into socket buffers buys no
//! more than the window, and time the server itself takes (a handler, a slow store) is never
//! held against the client. The idle timeouts (`send_timeout`, `body_idle_timeout`) cut a
//! transfer that waits that long in one go. Each pace publishes when it will run out while it
//! waits: that is how far behind a connection is, for making room.
//!
//! Socket buffers. A served socket queues at most [`NOTSENT_LOWAT`] unsent bytes (Linux), so
//! slow readers hold little kernel memory and backpressure reaches the response's pace early.
//!
//! TLS ([`crate::tls`]): when the server has a certificate, the handshake wraps the paced
//! socket first (bounded by the head's timeout, the connection idle meanwhile), so every limit
//! here applies over TLS as over plain HTTP, paces counting the bytes on the wire.
//!
//! Closing ([`Paced::poll_shutdown`]). After its last response (a refusal such as hyper's
//! `431` for an oversized head included) a connection sends its FIN, then reads and drops what
//! the client still sends, up to [`LINGER_BYTES`] or [`LINGER_TIME`]: closing a socket with
//! unread input resets it, and the reset can overtake the response.
//!
//! Lanes ([`Lanes`]). Connections are served on one thread per core, each with a
//! single-threaded runtime; the accept loop hands them out in turn. A connection's reads, kept
//! pages ([`crate::memo`]) and writes stay on its lane's thread, with no wake-up of another
//! worker; every request the router answers runs as a task on the main runtime (an upload's
//! reindex spreads over every core there), aborted when its request is dropped. No handler work
//! runs on a lane beyond the kept pages.
//!
//! Shutdown (`serve`): the accept loop stops and the listener is dropped; every connection is
//! told to stop (an idle one, or one still reading a request head, closes at once; one with a
//! request in progress finishes it); `serve` waits for the last connection to close, then stops
//! the lanes and joins their threads, and only then returns.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future as _;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
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
use tokio_rustls::server::TlsStream;
use tower::ServiceExt as _;

use super::{AppError, AppState, Limits, ServedAt, memo};
use crate::tls::Tls;

/// How long to wait before accepting again after an error such as `EMFILE`.
pub(super) const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// Set in a connection's state once it was chosen to make room (or the server stops).
const EVICTED: u64 = 1 << 63;
/// Set with [`EVICTED`] on a busy connection: it is reset, not closed, so the kernel drops what
/// it still holds for the client (a slow reader's socket buffer can hold megabytes).
const RESET: u64 = 1 << 62;
/// A connection is closed to make room only once it has been idle, or behind its minimum rate,
/// at least this long: a new connection about to send its request, or a fast transfer waiting a
/// moment for its socket, is not (else a flood of new connections closes one another, and the
/// probe among them).
const EVICT_AFTER: Duration = Duration::from_millis(250);
/// While the server is full and nothing can be closed, how often to look again.
const ROOM_RETRY: Duration = Duration::from_millis(50);
/// A closing connection reads and drops at most this much of what its client still sends...
const LINGER_BYTES: usize = 1 << 20;
/// ...for at most this long.
const LINGER_TIME: Duration = Duration::from_secs(2);
/// A pace that is not waiting on its client.
const NOT_WAITING: u64 = u64::MAX;
/// Unsent bytes the kernel queues for one connection before it stops taking more
/// (`TCP_NOTSENT_LOWAT`, Linux): bytes in flight still grow with the congestion window, but a
/// slow reader no longer gets megabytes of socket buffer each (a thousand of them pushed the
/// kernel's TCP memory past its pressure mark), and the response's pace sees the client's.
const NOTSENT_LOWAT: u32 = 128 * 1024;

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

/// Who a connection counts against for `max_connections_per_address`: an IPv4 address, or an
/// IPv6 /64 (one host usually holds a whole /64). IPv4-mapped IPv6 addresses are IPv4.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Peer(u128);

impl Peer {
    pub(super) fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(v4) => Self(u128::from(v4.to_ipv6_mapped())),
            IpAddr::V6(v6) => Self(u128::from(v6) & !u128::from(u64::MAX)),
        }
    }
}

/// One open connection. `state` counts requests in progress, with [`EVICTED`] set once it
/// was closed to make room.
struct Conn {
    state: AtomicU64,
    /// When it last became idle, in milliseconds since the registry's epoch.
    idle_since: AtomicU64,
    served: AtomicU64,
    evict: Notify,
    epoch: Instant,
    peer: Peer,
    /// While the response waits on the client: when its pace runs out (milliseconds since the
    /// epoch), else [`NOT_WAITING`].
    send_due: AtomicU64,
    /// The same for the request body being read.
    body_due: AtomicU64,
}

impl Conn {
    fn now(&self) -> u64 {
        self.millis(Instant::now())
    }

    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX - 1)
    }

    /// A request began: the connection is busy until the guard (moved into the response
    /// body) is dropped.
    fn begin(self: &Arc<Self>) -> Busy {
        self.state.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// When the first of its waiting paces runs out, if one waits on the client.
    fn due(&self) -> Option<u64> {
        let due = self.send_due.load(Ordering::Acquire).min(self.body_due.load(Ordering::Acquire));
        (due != NOT_WAITING).then_some(due)
    }

    /// Reset it (a busy connection chosen to make room).
    fn evict(&self) {
        self.state.fetch_or(EVICTED | RESET, Ordering::AcqRel);
        self.evict.notify_one();
    }
}

struct Busy(Arc<Conn>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.idle_since.store(self.0.now(), Ordering::Release);
        self.0.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The open connections and the caps on them.
pub(super) struct Connections {
    slots: Arc<Semaphore>,
    open: Mutex<Open>,
    next: AtomicU64,
    epoch: Instant,
    per_address: usize,
    /// The paces' window: a waiting pace due at `now + window` is not behind at all.
    window: Duration,
}

#[derive(Default)]
struct Open {
    conns: HashMap<u64, Arc<Conn>>,
    /// Open connections per client address.
    per_peer: HashMap<Peer, usize>,
}

/// Which connection to close to make room.
enum Victim {
    /// Idle the longest, for at least this long.
    Idle(Duration),
    /// Waiting on its client and furthest behind, by at least this much.
    Behind(Duration),
}

impl Open {
    /// Close the chosen connection among `conns` (those `of` selects); false if none qualifies.
    fn evict(&self, of: impl Fn(&Conn) -> bool, victim: &Victim, now: u64, window: Duration) -> bool {
        for _ in 0..self.conns.len().max(1) {
            let candidates = self.conns.values().filter(|c| of(c));
            match victim {
                Victim::Idle(least) => {
                    let limit = now.saturating_sub(millis(*least));
                    let Some(oldest) = candidates
                        .filter(|c| c.state.load(Ordering::Acquire) == 0)
                        .filter(|c| c.idle_since.load(Ordering::Acquire) <= limit)
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
                Victim::Behind(least) => {
                    // Behind by `now + window - due`: due at or before this is behind enough.
                    let limit = now.saturating_add(millis(window)).saturating_sub(millis(*least));
                    let slowest = candidates
                        .filter(|c| c.state.load(Ordering::Acquire) & EVICTED == 0)
                        .filter_map(|c| Some((c.due()?, c)))
                        .filter(|(due, _)| *due <= limit)
                        .min_by_key(|(due, _)| *due);
                    return match slowest {
                        Some((_, conn)) => {
                            conn.evict();
                            true
                        }
                        None => false,
                    };
                }
            }
        }
        false
    }

    /// A connection was closed to make room and has not let go of its place yet.
    fn evicting(&self, of: impl Fn(&Conn) -> bool) -> bool {
        self.conns.values().any(|c| of(c) && c.state.load(Ordering::Acquire) & EVICTED != 0)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A connection's place under the caps; dropping it frees the place.
pub(super) struct Slot {
    id: u64,
    conn: Arc<Conn>,
    connections: Arc<Connections>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.connections.lock();
        open.conns.remove(&self.id);
        if let Some(count) = open.per_peer.get_mut(&self.conn.peer) {
            *count -= 1;
            if *count == 0 {
                open.per_peer.remove(&self.conn.peer);
            }
        }
    }
}

impl Connections {
    pub(super) fn new(limits: &Limits) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(limits.max_connections.clamp(1, Semaphore::MAX_PERMITS))),
            open: Mutex::default(),
            next: AtomicU64::new(0),
            epoch: Instant::now(),
            per_address: limits.max_connections_per_address.max(1),
            window: limits.min_rate_window,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    fn register(self: &Arc<Self>, permit: OwnedSemaphorePermit, peer: Peer) -> Slot {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            state: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            served: AtomicU64::new(0),
            evict: Notify::new(),
            epoch: self.epoch,
            peer,
            send_due: AtomicU64::new(NOT_WAITING),
            body_due: AtomicU64::new(NOT_WAITING),
        });
        conn.idle_since.store(conn.now(), Ordering::Release);
        let mut open = self.lock();
        open.conns.insert(id, conn.clone());
        *open.per_peer.entry(peer).or_default() += 1;
        drop(open);
        Slot { id, conn, connections: self.clone(), _permit: permit }
    }

    /// A place for a new connection from `peer`, once there is one ([module docs](self));
    /// `None`: its address is at its cap with nothing of its own to close.
    pub(super) async fn place(self: &Arc<Self>, peer: IpAddr) -> Option<Slot> {
        let ip = peer;
        let peer = Peer::of(ip);
        if !self.admit(peer) {
            tracing::debug!(%ip, "closed a new connection: its address is at its cap, every one of them busy");
            return None;
        }
        let mut waiting = false;
        loop {
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                return Some(self.register(permit, peer));
            }
            if !self.make_room() && !waiting {
                tracing::debug!("every connection is busy and keeping up; waiting for one to finish");
                waiting = true;
            }
            tokio::select! {
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(permit) => return Some(self.register(permit, peer)),
                    // The semaphore is never closed.
                    Err(_) => std::future::pending().await,
                },
                () = tokio::time::sleep(ROOM_RETRY) => {}
            }
        }
    }

    /// Whether `peer` may open one more connection, after closing one of its own if it is at
    /// its cap.
    fn admit(&self, peer: Peer) -> bool {
        let open = self.lock();
        if open.per_peer.get(&peer).copied().unwrap_or(0) < self.per_address {
            return true;
        }
        let of = |c: &Conn| c.peer == peer;
        let live = open.conns.values().filter(|c| of(c) && c.state.load(Ordering::Acquire) & EVICTED == 0).count();
        if live < self.per_address {
            return true;
        }
        let now = self.now();
        let made = open.evict(of, &Victim::Idle(EVICT_AFTER), now, self.window)
            || open.evict(of, &Victim::Behind(Duration::ZERO), now, self.window);
        if made {
            tracing::debug!("closed a connection of an address at its cap for its new one");
        }
        made
    }

    /// Close a connection to make room for a new one (the idle-longest, else the one furthest
    /// behind, for [`EVICT_AFTER`] at least); true if one was closed, or already is being.
    pub(super) fn make_room(&self) -> bool {
        let open = self.lock();
        if open.evicting(|_| true) {
            return true;
        }
        let now = self.now();
        if open.evict(|_| true, &Victim::Idle(EVICT_AFTER), now, self.window) {
            tracing::debug!("closed an idle connection to make room for a new one");
            return true;
        }
        if open.evict(|_| true, &Victim::Behind(EVICT_AFTER), now, self.window) {
            tracing::debug!("closed the connection furthest behind its minimum rate to make room for a new one");
            return true;
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
    limit_unsent(&stream);
    let served_at = stream.local_addr().ok();
    let conn = slot.conn.clone();
    let paced = Paced::new(stream, Pace::new(limits.min_send_rate, limits.send_timeout, &limits, &conn, Side::Send));
    let io = match state.tls() {
        None => Io::Plain(paced),
        // Idle while it shakes hands: the connection can be closed to make room.
        Some(tls) => tokio::select! {
            tls = handshake(tls, paced, limits.header_timeout) => match tls {
                Some(tls) => Io::Tls(Box::new(tls)),
                None => return,
            },
            () = conn.evict.notified() => return,
            _ = stopping.changed() => return,
        },
    };
    let tls = matches!(io, Io::Tls(_));
    let io = TokioIo::new(io);
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
                            parts.extensions.insert(ServedAt { addr, tls });
                        }
                        let pace =
                            Pace::new(limits.min_body_rate, limits.body_idle_timeout, &limits, &conn, Side::Body);
                        let body = Body::new(PacedBody { inner: body, pace });
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
        () = conn.evict.notified() => return,
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

/// The TLS handshake on `paced`, within `timeout` (zero: none); `None` if it failed, timed out,
/// or the client spoke plain HTTP (answered `400` naming `https://`, then closed).
async fn handshake(tls: &Tls, mut paced: Paced, timeout: Duration) -> Option<TlsStream<Paced>> {
    let shake = async move {
        let mut first = [0u8; 1];
        if paced.stream.peek(&mut first).await.ok()? == 0 {
            return None;
        }
        if first[0] != crate::tls::HANDSHAKE_RECORD {
            tracing::debug!("plain HTTP on the TLS port: refused");
            refuse_plain(&mut paced).await;
            return None;
        }
        match tls.acceptor().accept(paced).await {
            Ok(stream) => Some(stream),
            Err(e) => {
                tracing::debug!(error = %e, "TLS handshake failed");
                None
            }
        }
    };
    if timeout.is_zero() {
        return shake.await;
    }
    match tokio::time::timeout(timeout, shake).await {
        Ok(stream) => stream,
        Err(_) => {
            tracing::debug!(?timeout, "TLS handshake timed out");
            None
        }
    }
}

/// Answer plain HTTP sent to the TLS port with [`crate::tls::PLAIN_HTTP_REFUSAL`]: what the
/// client sent so far is read first (closing with unread input resets the connection, and the
/// reset can overtake the answer), then the lingering close.
async fn refuse_plain(paced: &mut Paced) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut head = vec![0u8; 8192];
    let _ = paced.read(&mut head).await;
    if paced.write_all(crate::tls::PLAIN_HTTP_REFUSAL).await.is_ok() {
        let _ = paced.shutdown().await;
    }
}

/// A served socket: plain, or inside TLS.
enum Io {
    Plain(Paced),
    Tls(Box<TlsStream<Paced>>),
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(io) => io.is_write_vectored(),
            Io::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_flush(cx),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }
}

/// [`NOTSENT_LOWAT`] on `stream`.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn limit_unsent(stream: &TcpStream) {
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_notsent_lowat(NOTSENT_LOWAT) {
        tracing::debug!(error = %e, "TCP_NOTSENT_LOWAT could not be set");
    }
}

/// [`NOTSENT_LOWAT`] has no counterpart here (Windows sizes its send backlog itself, from the
/// connection's bandwidth and delay): a slow reader's unsent bytes are bounded by the socket's
/// send buffer alone.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn limit_unsent(_stream: &TcpStream) {}

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

/// Which way a [`Pace`] measures.
#[derive(Clone, Copy)]
enum Side {
    /// The response, written to the socket.
    Send,
    /// The request body, read.
    Body,
}

/// Why a transfer was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// It waited this long on its client in one go.
    Idle(Duration),
    /// It fell behind this many bytes per second by more than the window.
    Slow { rate: u64, window: Duration },
}

/// The pace of one direction of a connection ([module docs](self)).
struct Pace {
    /// Bytes per second; 0: no minimum.
    rate: u64,
    window: Duration,
    /// The longest wait in one go; 0: none.
    idle: Duration,
    credit: Duration,
    /// Waiting on the client since.
    waiting: Option<tokio::time::Instant>,
    timer: Option<Pin<Box<Sleep>>>,
    /// Where the wait is published, for making room.
    conn: Option<(Arc<Conn>, Side)>,
}

impl Pace {
    fn new(rate: u64, idle: Duration, limits: &Limits, conn: &Arc<Conn>, side: Side) -> Self {
        Self::unpublished(rate, limits.min_rate_window, idle).published(conn, side)
    }

    fn unpublished(rate: u64, window: Duration, idle: Duration) -> Self {
        let rate = if window.is_zero() { 0 } else { rate };
        Self { rate, window, idle, credit: window, waiting: None, timer: None, conn: None }
    }

    fn published(mut self, conn: &Arc<Conn>, side: Side) -> Self {
        self.conn = Some((conn.clone(), side));
        self
    }

    fn due(&self) -> Option<&AtomicU64> {
        self.conn.as_ref().map(|(conn, side)| match side {
            Side::Send => &conn.send_due,
            Side::Body => &conn.body_due,
        })
    }

    /// `n` bytes moved (0: a step without bytes, such as the end).
    fn moved(&mut self, n: usize) {
        self.moved_at(n, tokio::time::Instant::now);
    }

    /// [`Pace::moved`], at `now` (asked only if the transfer was waiting).
    fn moved_at(&mut self, n: usize, now: impl FnOnce() -> tokio::time::Instant) {
        if let Some(since) = self.waiting.take() {
            self.credit = self.credit.saturating_sub(now().saturating_duration_since(since));
            if let Some(due) = self.due() {
                due.store(NOT_WAITING, Ordering::Release);
            }
        }
        if self.rate > 0 && n > 0 && self.credit < self.window {
            let earned = u128::try_from(n).unwrap_or(u128::MAX).saturating_mul(1_000_000_000) / u128::from(self.rate);
            let earned = Duration::from_nanos(u64::try_from(earned).unwrap_or(u64::MAX));
            self.credit = self.credit.saturating_add(earned).min(self.window);
        }
    }

    /// The transfer begins to wait on its client at `now` (published for making room): when it
    /// must be cut, if ever.
    fn begin_wait(&mut self, now: tokio::time::Instant) -> Option<tokio::time::Instant> {
        self.waiting = Some(now);
        // Without a minimum rate, how far behind it is counts from the start of the wait.
        let out = now + if self.rate > 0 { self.credit } else { self.window };
        if let Some((conn, _)) = &self.conn
            && let Some(due) = self.due()
        {
            due.store(conn.millis(out.into_std()), Ordering::Release);
        }
        let cuts = [(self.rate > 0).then_some(out), (!self.idle.is_zero()).then(|| now + self.idle)];
        cuts.into_iter().flatten().min()
    }

    /// Why a transfer waiting since [`Pace::begin_wait`] is cut at `now`.
    fn cut(&self, now: tokio::time::Instant) -> Cut {
        let waited = self.waiting.map(|since| now.saturating_duration_since(since)).unwrap_or_default();
        match self.rate > 0 && waited >= self.credit {
            true => Cut::Slow { rate: self.rate, window: self.window },
            false => Cut::Idle(self.idle),
        }
    }

    /// The transfer waits on its client: `Ready` once it must be cut.
    fn wait(&mut self, cx: &mut Context<'_>) -> Poll<Cut> {
        if self.rate == 0 && self.idle.is_zero() && self.conn.is_none() {
            return Poll::Pending;
        }
        if self.waiting.is_none() {
            let Some(at) = self.begin_wait(tokio::time::Instant::now()) else { return Poll::Pending };
            match &mut self.timer {
                Some(timer) => timer.as_mut().reset(at),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
            }
        }
        let Some(timer) = &mut self.timer else { return Poll::Pending };
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(self.cut(tokio::time::Instant::now()))
    }
}

impl Drop for Pace {
    fn drop(&mut self) {
        if let Some(due) = self.due() {
            due.store(NOT_WAITING, Ordering::Release);
        }
    }
}

/// A request body kept to its pace ([`Limits::min_body_rate`], [`Limits::body_idle_timeout`]).
struct PacedBody {
    inner: Incoming,
    pace: Pace,
}

#[derive(Debug, thiserror::Error)]
enum BodyCut {
    #[error("the request body sent nothing for {0:?}; the request was cut")]
    Stalled(Duration),
    #[error("the request body came slower than {rate} bytes/s over {window:?}; the request was cut")]
    Slow { rate: u64, window: Duration },
}

impl hyper::body::Body for PacedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let n = match &frame {
                    Some(Ok(frame)) => frame.data_ref().map_or(0, Bytes::len),
                    _ => 0,
                };
                this.pace.moved(n);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match ready!(this.pace.wait(cx)) {
                Cut::Idle(idle) => Poll::Ready(Some(Err(BodyCut::Stalled(idle).into()))),
                Cut::Slow { rate, window } => Poll::Ready(Some(Err(BodyCut::Slow { rate, window }.into()))),
            },
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

/// The socket: writes kept to the response's pace ([`Limits::min_send_rate`],
/// [`Limits::send_timeout`]), and a lingering close ([module docs](self)).
struct Paced {
    stream: TcpStream,
    pace: Pace,
    /// Closing: the write side is shut; reading what is left until this.
    linger: Option<(Pin<Box<Sleep>>, usize)>,
    /// The response was cut: reset the connection when it is dropped.
    cut: bool,
}

impl Paced {
    fn new(stream: TcpStream, pace: Pace) -> Self {
        Self { stream, pace, linger: None, cut: false }
    }

    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
        moved: impl Fn(&T) -> usize,
    ) -> Poll<io::Result<T>> {
        if let Poll::Ready(result) = &poll {
            self.pace.moved(result.as_ref().map_or(0, moved));
            return poll;
        }
        let cut = ready!(self.pace.wait(cx));
        self.cut = true;
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            match cut {
                Cut::Idle(idle) => format!("the client took nothing of the response for {idle:?}"),
                Cut::Slow { rate, window } => {
                    format!("the client took the response slower than {rate} bytes/s over {window:?}")
                }
            },
        )))
    }
}

impl Drop for Paced {
    /// A cut response, or a busy connection closed to make room, is reset: what the kernel
    /// still holds for the client goes at once, instead of trickling out to a slow reader.
    fn drop(&mut self) {
        let evicted = self.pace.conn.as_ref().is_some_and(|(conn, _)| conn.state.load(Ordering::Acquire) & RESET != 0);
        if self.cut || evicted {
            let _ = self.stream.set_zero_linger();
        }
    }
}

impl AsyncRead for Paced {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Paced {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.watch(cx, poll, |n| *n)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.watch(cx, poll, |n| *n)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.stream).poll_flush(cx);
        self.watch(cx, poll, |()| 0)
    }

    /// Shut the write side (the FIN follows the last response), then read and drop what the
    /// client still sends until it closes too, [`LINGER_BYTES`] or [`LINGER_TIME`].
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.linger.is_none() {
            let poll = Pin::new(&mut self.stream).poll_shutdown(cx);
            ready!(self.watch(cx, poll, |()| 0))?;
            self.linger = Some((Box::pin(tokio::time::sleep(LINGER_TIME)), 0));
        }
        let Self { stream, linger, .. } = &mut *self;
        let Some((until, read)) = linger else { return Poll::Ready(Ok(())) };
        let mut buf = [0u8; 8192];
        while *read < LINGER_BYTES {
            let mut unread = ReadBuf::new(&mut buf);
            match Pin::new(&mut *stream).poll_read(cx, &mut unread) {
                Poll::Ready(Ok(())) if !unread.filled().is_empty() => *read += unread.filled().len(),
                // The client closed too, or reset.
                Poll::Ready(_) => return Poll::Ready(Ok(())),
                Poll::Pending => {
                    ready!(until.as_mut().poll(cx));
                    return Poll::Ready(Ok(()));
                }
            }
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::time::Instant as At;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_pace_spends_credit_waiting_and_earns_it_moving() {
        let mut pace = Pace::unpublished(1024, 10 * S, 60 * S);
        let t0 = At::now();
        // A burst into socket buffers earns nothing beyond the window.
        pace.moved_at(10 << 20, || unreachable!("not waiting: no clock"));
        assert_eq!(pace.credit, 10 * S);
        // Waiting: cut when the credit runs out, or the idle timeout if that comes first.
        assert_eq!(pace.begin_wait(t0), Some(t0 + 10 * S));
        pace.moved_at(2048, || t0 + 4 * S);
        assert_eq!(pace.credit, 8 * S, "4 s spent, 2 s earned");
        // A client taking 512 bytes every 5 s (the review's) loses 4.5 s a step: cut in the
        // second step, though it never waited as long as the idle timeout.
        let mut t = t0 + 4 * S;
        let mut steps = 0;
        loop {
            let out = pace.begin_wait(t).expect("a deadline");
            if out <= t + 5 * S {
                assert_eq!(pace.cut(out), Cut::Slow { rate: 1024, window: 10 * S });
                break;
            }
            t += 5 * S;
            pace.moved_at(512, || t);
            steps += 1;
        }
        assert_eq!(steps, 1);
        // One that keeps up stays at the window however long it runs.
        let mut pace = Pace::unpublished(1024, 10 * S, 60 * S);
        for i in 0..100u32 {
            pace.begin_wait(t0 + i * S);
            pace.moved_at(1100, || t0 + (i + 1) * S);
        }
        assert!(pace.credit > 9 * S, "{:?}", pace.credit);
    }

    #[test]
    fn without_a_rate_only_the_idle_timeout_cuts() {
        let t0 = At::now();
        let mut pace = Pace::unpublished(0, 10 * S, 3 * S);
        assert_eq!(pace.begin_wait(t0), Some(t0 + 3 * S));
        assert_eq!(pace.cut(t0 + 3 * S), Cut::Idle(3 * S));
        let mut pace = Pace::unpublished(1024, 10 * S, Duration::ZERO);
        assert_eq!(pace.begin_wait(t0), Some(t0 + 10 * S));
        assert_eq!(Pace::unpublished(0, 10 * S, Duration::ZERO).begin_wait(t0), None);
        // A window of zero turns the rate off.
        assert_eq!(Pace::unpublished(1024, Duration::ZERO, 3 * S).begin_wait(t0), Some(t0 + 3 * S));
    }

    #[test]
    fn addresses_count_by_host() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(Peer::of(v4), Peer::of("::ffff:192.0.2.7".parse().unwrap()), "IPv4-mapped is IPv4");
        assert_ne!(Peer::of(v4), Peer::of("192.0.2.8".parse().unwrap()));
        assert_eq!(Peer::of("2001:db8::1".parse().unwrap()), Peer::of("2001:db8::ffff:2".parse().unwrap()), "one /64");
        assert_ne!(Peer::of("2001:db8::1".parse().unwrap()), Peer::of("2001:db8:0:1::1".parse().unwrap()));
    }

    /// A registry with `max` places, `per_address` per address, a window of 10 s.
    fn registry(max: usize, per_address: usize) -> Arc<Connections> {
        let limits = Limits {
            max_connections: max,
            max_connections_per_address: per_address,
            min_rate_window: 10 * S,
            ..Limits::default()
        };
        let mut connections = Connections::new(&limits);
        // Ten seconds old: connections can have been idle for a while.
        connections.epoch -= 10 * S;
        Arc::new(connections)
    }

    fn open(connections: &Arc<Connections>, ip: &str) -> Slot {
        let permit = connections.slots.clone().try_acquire_owned().expect("a free place");
        connections.register(permit, Peer::of(ip.parse().unwrap()))
    }

    /// Make `slot` busy and waiting on its client, due `due_in` from now (ms).
    fn behind(connections: &Connections, slot: &Slot, due_in: u64) {
        slot.conn.state.fetch_add(1, Ordering::AcqRel);
        slot.conn.send_due.store(connections.now() + due_in, Ordering::Release);
    }

    fn evicted(slot: &Slot) -> bool {
        slot.conn.state.load(Ordering::Acquire) & EVICTED != 0
    }

    #[test]
    fn the_idle_longest_then_the_slowest_busy_connection_makes_room() {
        let connections = registry(4, 4);
        let slots: Vec<_> =
            ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"].iter().map(|ip| open(&connections, ip)).collect();
        // Busy and keeping up (due a full window ahead), busy working (not waiting on its
        // client), busy and 6 s behind, busy and 3 s behind.
        behind(&connections, &slots[0], 10_000);
        slots[1].conn.state.fetch_add(1, Ordering::AcqRel);
        behind(&connections, &slots[2], 4_000);
        behind(&connections, &slots[3], 7_000);
        assert!(connections.make_room());
        assert!(evicted(&slots[2]), "the one furthest behind");
        assert!(connections.make_room(), "its place is on its way");
        assert!(!evicted(&slots[3]), "one eviction at a time");
        drop(slots);

        let connections = registry(3, 3);
        let slots: Vec<_> = ["10.0.0.1", "10.0.0.2", "10.0.0.3"].iter().map(|ip| open(&connections, ip)).collect();
        behind(&connections, &slots[0], 10_000);
        slots[1].conn.state.fetch_add(1, Ordering::AcqRel);
        slots[2].conn.state.fetch_add(1, Ordering::AcqRel);
        assert!(!connections.make_room(), "nothing idle, nothing behind: wait");
        behind(&connections, &slots[0], 9_000);
        assert!(connections.make_room());
        assert!(evicted(&slots[0]), "1 s behind is behind enough");
        drop(slots);

        let connections = registry(3, 3);
        let slots: Vec<_> = ["10.0.0.1", "10.0.0.2", "10.0.0.3"].iter().map(|ip| open(&connections, ip)).collect();
        behind(&connections, &slots[0], 1_000);
        slots[1].conn.idle_since.store(5, Ordering::Release);
        slots[2].conn.idle_since.store(9, Ordering::Release);
        assert!(connections.make_room());
        assert!(evicted(&slots[1]) && !evicted(&slots[0]), "an idle connection goes before a busy one");
        drop(slots);

        // New connections (about to send their requests) and a transfer only just behind stay.
        let connections = registry(3, 3);
        let slots: Vec<_> = ["10.0.0.1", "10.0.0.2", "10.0.0.3"].iter().map(|ip| open(&connections, ip)).collect();
        behind(&connections, &slots[0], 9_900);
        assert!(!connections.make_room());
        assert!(!slots.iter().any(evicted));
    }

    #[test]
    fn an_address_at_its_cap_gives_up_its_own() {
        let connections = registry(10, 2);
        let a1 = open(&connections, "10.0.0.1");
        let a2 = open(&connections, "10.0.0.1");
        let b = open(&connections, "10.0.0.2");
        behind(&connections, &b, 0);
        let peer = Peer::of("10.0.0.1".parse().unwrap());
        // Both busy, one keeping up, one working: the one keeping up goes (no threshold).
        behind(&connections, &a1, 10_000);
        a2.conn.state.fetch_add(1, Ordering::AcqRel);
        assert!(connections.admit(peer));
        assert!(evicted(&a1) && !evicted(&a2) && !evicted(&b));
        assert!(connections.admit(peer), "a place is on its way");
        drop(a1);
        let a3 = open(&connections, "10.0.0.1");
        a3.conn.state.fetch_add(1, Ordering::AcqRel);
        assert!(!connections.admit(peer), "both working: the new connection is refused");
        assert!(!evicted(&b), "never another address's");
        assert!(connections.admit(Peer::of("10.0.0.3".parse().unwrap())));
        drop((a2, a3));
        assert!(connections.admit(peer));
        assert!(!connections.lock().per_peer.contains_key(&peer), "counts go with their connections");
    }

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
