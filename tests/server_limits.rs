//! What hostile clients can hold of `quarry serve` (the binary, configured by its file): memory
//! stays flat under huge methods and paths (VmRSS from `/proc`), `/metrics` stays small, an
//! oversized request head gets its 431, partial request heads are cut by the header timeout
//! while `/healthz` keeps answering (also under `ulimit -n 256`, where the connection cap closes
//! the longest-idle connection for a new one), a stalled upload body is cut, and a root that
//! fails to catch up at start-up is skipped.
//!
//! Slow readers (clients that ask for a large file and take a little of it now and then, from
//! several loopback addresses `127.0.0.N`): at the connection cap the one furthest behind makes
//! room, so `/healthz` and small files keep answering within 2 s; one address at its own cap
//! gives up its own connections; a response slower than the minimum rate is cut; the server's
//! memory stays bounded with a thousand of them; a refused upload dripping its body is cut.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quarry_tests::{ServedBinary, WheelSpec, plant, quarry_bin};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const TOKEN: &str = "limits-token-0123456789";

/// `quarry serve` with `config` (TOML, `store` and `token_file` added), optionally under an
/// open-file limit; stderr to `dir/serve.stderr`.
async fn serve(dir: &Path, config: &str, fd_limit: Option<u32>) -> ServedBinary {
    std::fs::write(dir.join("tokens"), format!("{TOKEN}\n")).unwrap();
    let config_path = dir.join("quarry.toml");
    let full = format!("store = \"{}\"\ntoken_file = \"tokens\"\n{config}", dir.join("store").display());
    std::fs::write(&config_path, full).unwrap();
    let mut cmd = match fd_limit {
        Some(n) => {
            let mut sh = tokio::process::Command::new("sh");
            sh.arg("-c").arg(format!("ulimit -n {n} && exec \"$0\" \"$@\"")).arg(quarry_bin());
            sh
        }
        None => tokio::process::Command::new(quarry_bin()),
    };
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--config"])
        .arg(&config_path)
        .current_dir(dir)
        .env_remove("QUARRY_TOKEN")
        .env_remove("QUARRY_STORE")
        .env_remove("QUARRY_PRIVATE")
        .env_remove("RUST_LOG")
        .stderr(std::fs::File::create(dir.join("serve.stderr")).unwrap());
    ServedBinary::start(cmd).await
}

fn host_of(url: &str) -> String {
    url.trim_start_matches("http://").trim_end_matches('/').to_owned()
}

/// Resident memory of a process, in bytes (`VmRSS` of `/proc/<pid>/status`).
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/<pid>/status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("a VmRSS line");
    kb * 1024
}

/// The soft open-file limit of this process.
fn own_fd_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|l| l.split_whitespace().next())
        .map_or(u64::MAX, |n| n.parse().unwrap_or(u64::MAX))
}

/// Send `head` on a fresh connection and read until the server closes it (a reset counts as
/// closed); the bytes received.
async fn send_and_drain(host: &str, head: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(host).await.expect("connect");
    // The server may refuse before reading everything: a write error is an answer too.
    let _ = stream.write_all(head).await;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return out,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => panic!("the server kept a connection open for 10 s after {} bytes", head.len()),
        }
    }
}

/// `n` requests spread over `workers` concurrent tasks, each made by `request(i)`.
async fn spread<F, Fut>(n: usize, workers: usize, request: F)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let request = Arc::new(request);
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let request = request.clone();
            tokio::spawn(async move {
                for i in (w..n).step_by(workers) {
                    request(i).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a request task");
    }
}

/// One round of hostile traffic: `methods` requests with 200 KB method names (refused with 431
/// before they reach the app), as many with distinct 8 KB method names (reaching it), and `paths`
/// GETs of 60 KB paths over keep-alive connections.
async fn hostile_round(url: &str, methods: usize, paths: usize) {
    let host = host_of(url);
    spread(methods, 4, {
        let host = host.clone();
        move |i| {
            let host = host.clone();
            async move {
                let huge = format!("{}{i} / HTTP/1.1\r\nHost: x\r\n\r\n", "M".repeat(200 * 1024));
                let answer = send_and_drain(&host, huge.as_bytes()).await;
                let text = String::from_utf8_lossy(&answer);
                assert!(text.starts_with("HTTP/1.1 431"), "{}", text.chars().take(200).collect::<String>());
                let odd = format!("X{i}{} / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "Y".repeat(8 * 1024));
                let answer = send_and_drain(&host, odd.as_bytes()).await;
                assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 405"), "an unknown method is 405");
            }
        }
    })
    .await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let url = url.to_owned();
    spread(paths, 4, move |i| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let path = format!("{i}-linux/{}", "p".repeat(60 * 1024));
            let response = client.get(format!("{url}{path}")).send().await.expect("GET a long path");
            assert_eq!(response.status(), 400, "a key longer than 1024 bytes");
            let body = response.bytes().await.unwrap();
            assert!(body.len() < 8 * 1024, "the error quotes the path in part: {} bytes", body.len());
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_methods_and_paths_leave_memory_flat() {
    let tmp = tempfile::tempdir().unwrap();
    let served = serve(tmp.path(), "", None).await;
    let pid = served.child.id().expect("pid");
    let started = Instant::now();

    // Warm up (allocator arenas, buffers, the request log filling to its cap), then measure.
    hostile_round(&served.url, 100, 4000).await;
    let before = rss(pid);
    hostile_round(&served.url, 1000, 5000).await;
    let after = rss(pid);
    let grown = after.saturating_sub(before);
    assert!(grown < 32 << 20, "RSS grew by {} MiB ({before} → {after} bytes, {:?} in)", grown >> 20, started.elapsed());

    let metrics = reqwest::get(format!("{}metrics", served.url)).await.unwrap().text().await.unwrap();
    assert!(metrics.len() < 1 << 20, "/metrics is {} bytes", metrics.len());
    assert!(metrics.contains("method=\"OTHER\",status=\"405\"} 1100"), "unknown methods are one series");
    assert!(!metrics.contains("MMMM") && !metrics.contains("YYYY"), "no raw method became a label");
    // The access log cut every long path and method.
    let log = std::fs::read_to_string(tmp.path().join("serve.stderr")).unwrap();
    assert!(log.lines().all(|l| l.len() < 4096), "a log line over 4 KiB");
    assert!(log.contains("bytes]"), "paths are cut and marked");
    drop(served);
}

/// Open `n` connections that send a partial request head and stall; poll `/healthz` (each poll
/// on a new connection must answer within 1 s) until `poll_for` has passed; then wait for the
/// server to close every partial connection. Returns how long each one lived.
async fn slowloris(url: &str, n: usize, poll_for: Duration) -> Vec<Duration> {
    assert!(own_fd_limit() > (n as u64) + 200, "this test needs an open-file limit above {} (ulimit -n)", n + 200);
    let host = host_of(url);
    let mut partial = Vec::new();
    for _ in 0..n {
        let mut stream = TcpStream::connect(&host).await.expect("connect");
        stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.expect("a partial head");
        partial.push((Instant::now(), stream));
    }
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).timeout(Duration::from_secs(5)).build().unwrap();
    let polling = Instant::now();
    let mut polls = 0;
    while polling.elapsed() < poll_for {
        let asked = Instant::now();
        let response = client.get(format!("{url}healthz")).send().await.expect("/healthz answers");
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await.unwrap(), "ok\n");
        let took = asked.elapsed();
        assert!(took < Duration::from_secs(1), "/healthz took {took:?} with {n} partial connections open");
        polls += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The first poll may wait for a partial connection to be idle long enough to be closed
    // (250 ms: a new connection is not closed before it could send its request).
    assert!(polls >= 8, "{polls} polls");
    let closers: Vec<_> = partial
        .into_iter()
        .map(|(opened, mut stream)| {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                loop {
                    match tokio::time::timeout(Duration::from_secs(15), stream.read(&mut buf)).await {
                        Ok(Ok(0) | Err(_)) => return opened.elapsed(),
                        Ok(Ok(_)) => {}
                        Err(_) => panic!("a partial connection was still open after {:?}", opened.elapsed()),
                    }
                }
            })
        })
        .collect();
    let mut lived = Vec::new();
    for c in closers {
        lived.push(c.await.unwrap());
    }
    lived
}

#[tokio::test(flavor = "multi_thread")]
async fn partial_heads_are_cut_and_healthz_keeps_answering() {
    let tmp = tempfile::tempdir().unwrap();
    // All 300 from one address: its cap raised above them (the cap is tested below).
    let config = "[limits]\nheader_timeout_seconds = 2\nmax_connections_per_address = 1024\n";
    let served = serve(tmp.path(), config, None).await;
    let lived = slowloris(&served.url, 300, Duration::from_millis(1500)).await;
    let longest = lived.iter().max().unwrap();
    let shortest = lived.iter().min().unwrap();
    // Under the cap nothing is evicted: every partial head lives until the header timeout.
    assert!(*shortest >= Duration::from_millis(1900), "closed after {shortest:?}, before the timeout");
    assert!(*longest < Duration::from_secs(5), "closed only after {longest:?}");
    let response = reqwest::get(format!("{}healthz", served.url)).await.unwrap();
    assert_eq!(response.status(), 200, "the server is fine afterwards");
    drop(served);
}

#[tokio::test(flavor = "multi_thread")]
async fn partial_heads_beyond_the_open_file_limit_make_room_for_healthz() {
    let tmp = tempfile::tempdir().unwrap();
    // The review's setting: 300 stalled connections against `ulimit -n 256`. The header
    // timeout is long enough that all 300 are open before the first one times out, even on a
    // machine busy with other suites (a connection cut by the timeout makes room without
    // eviction).
    let served = serve(tmp.path(), "[limits]\nheader_timeout_seconds = 5\n", Some(256)).await;
    let lived = slowloris(&served.url, 300, Duration::from_millis(1500)).await;
    let longest = lived.iter().max().unwrap();
    assert!(*longest < Duration::from_secs(8), "closed only after {longest:?}");
    let evicted = lived.iter().filter(|d| **d < Duration::from_millis(4900)).count();
    assert!((50..=200).contains(&evicted), "{evicted} connections closed early to make room");
    let log = std::fs::read_to_string(tmp.path().join("serve.stderr")).unwrap();
    assert!(log.contains("max_connections lowered"), "the cap was fitted under the limit: {log}");
    let response = reqwest::get(format!("{}healthz", served.url)).await.unwrap();
    assert_eq!(response.status(), 200);
    drop(served);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_upload_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let served = serve(tmp.path(), "[limits]\nbody_idle_timeout_seconds = 1\n", None).await;
    let wheel = WheelSpec::new("stalled", "1.0");
    let bytes = wheel.build();
    let head = format!(
        "PUT /5-linux/python/{} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        wheel.filename(),
        bytes.len()
    );
    let mut stream = TcpStream::connect(host_of(&served.url)).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&bytes[..bytes.len() / 2]).await.unwrap();
    let started = Instant::now();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .expect("the server answered a stalled upload")
        .ok();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    assert!(text.contains("sent nothing for 1s"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    assert!(!tmp.path().join("store/5-linux/python").join(wheel.filename()).exists(), "nothing stored");
    drop(served);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_root_that_fails_to_catch_up_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let good = WheelSpec::new("caught-up", "1.0");
    let bad = WheelSpec::new("stuck", "1.0");
    plant(&store, &format!("2-linux/python/{}", good.filename()), &good.build());
    plant(&store, &format!("1-linux/python/{}", bad.filename()), &bad.build());
    // The broken root's state object is a directory: reading or replacing it fails.
    plant(&store, &format!("1-linux/python/{}/x", quarry_index::STATE_NAME), b"x");
    let served = serve(tmp.path(), "", None).await;
    let client = reqwest::Client::new();
    let page = client.get(format!("{}2-linux/python/simple/caught-up/", served.url)).send().await.unwrap();
    assert_eq!(page.status(), 200, "the healthy root was caught up and is served");
    assert!(page.text().await.unwrap().contains(&good.filename()));
    let log = std::fs::read_to_string(tmp.path().join("serve.stderr")).unwrap();
    let warning = log.lines().find(|l| l.contains("catching up failed")).unwrap_or_else(|| panic!("{log}"));
    assert!(warning.contains("WARN") && warning.contains("1-linux/python/"), "{warning}");
    drop(served);
}

/// Heads over `max_header_bytes` (64 KiB by default) of every shape: a long method, header
/// value, URI, too many headers, one just over the limit. Each gets hyper's 431, and a client
/// that sends its whole request before reading (Python's `http.client`, here with a small send
/// buffer) can: the server reads what is left of the head (up to 1 MiB) before it closes.
/// Closed with the rest unread, the connection was reset under the client's send, which failed
/// with a broken pipe, and such a client never read the 431.
#[tokio::test(flavor = "multi_thread")]
async fn oversized_heads_get_their_status() {
    let tmp = tempfile::tempdir().unwrap();
    let served = serve(tmp.path(), "", None).await;
    let host = host_of(&served.url);
    let headers: String = (0..200).map(|i| format!("X-{i}: y\r\n")).collect();
    let heads = [
        format!("{} / HTTP/1.1\r\nHost: x\r\n\r\n", "M".repeat(200 * 1024)),
        format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(900 * 1024)),
        format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(65 * 1024)),
        format!("GET / HTTP/1.1\r\nHost: x\r\n{headers}\r\n"),
        format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "u".repeat(100 * 1024)),
    ];
    for head in &heads {
        for round in 0..10 {
            let socket = TcpSocket::new_v4().unwrap();
            socket.set_send_buffer_size(16 * 1024).unwrap();
            let mut stream = socket.connect(host.parse().unwrap()).await.expect("connect");
            let sent = stream.write_all(head.as_bytes()).await;
            assert!(sent.is_ok(), "a {} byte head, round {round}: sending it failed: {sent:?}", head.len());
            let mut answer = Vec::new();
            let end = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
                .await
                .expect("the server closed the connection");
            let text = String::from_utf8_lossy(&answer);
            let line = text.lines().next().unwrap_or("(nothing)");
            let shown = format!("a {} byte head, round {round}: {line}", head.len());
            assert!(line.starts_with("HTTP/1.1 431"), "{shown}");
            assert!(end.is_ok(), "{shown}, then {}", end.unwrap_err());
        }
    }
    let response = reqwest::get(format!("{}healthz", served.url)).await.unwrap();
    assert_eq!(response.status(), 200);
    drop(served);
}

/// A large file and a small one in the store under `dir` (before the server starts).
fn plant_files(dir: &Path) {
    plant(&dir.join("store"), "1-linux/big.bin", &vec![7u8; 8 << 20]);
    plant(&dir.join("store"), "1-linux/small.txt", b"small\n");
}

/// `127.0.0.N`.
fn loopback(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, n)
}

/// A connection to `host` from `from`, with a small receive buffer (as a slow link keeps it).
async fn connect_from(host: SocketAddr, from: Ipv4Addr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(host).await
}

/// A client from `from` that asks for `path`, then reads `step` bytes every `every` until
/// `limit` has passed. Whether the server closed the connection, and when the client saw it
/// (a closed connection is seen only after what was sent before the close; at `limit` that is
/// read at once).
async fn slow_reader(
    host: SocketAddr,
    from: Ipv4Addr,
    path: &str,
    step: usize,
    every: Duration,
    limit: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let Ok(mut stream) = connect_from(host, from).await else { return Some(started.elapsed()) };
    if stream.write_all(format!("GET /{path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes()).await.is_err() {
        return Some(started.elapsed());
    }
    let mut buf = vec![0u8; step];
    loop {
        let left = limit.saturating_sub(started.elapsed());
        if left.is_zero() {
            break;
        }
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => tokio::time::sleep(every.min(left)).await,
            Err(_) => break,
        }
    }
    // What is still buffered: a closed connection ends within a second, an open one goes on.
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {}
            Err(_) => return None,
        }
    }
}

/// `/healthz` and a small file from `from`, each on a new connection, every 250 ms until
/// `how_long` has passed (at least once): the slowest answer, each must be within 2 s.
async fn keeps_answering(url: &str, from: Ipv4Addr, how_long: Duration) -> Duration {
    let client = reqwest::Client::builder()
        .local_address(IpAddr::V4(from))
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    loop {
        for (path, body) in [("healthz", "ok\n"), ("1-linux/small.txt", "small\n")] {
            let asked = Instant::now();
            let response = client.get(format!("{url}{path}")).send().await.unwrap_or_else(|e| panic!("/{path}: {e}"));
            assert_eq!(response.status(), 200, "/{path}");
            assert_eq!(response.text().await.unwrap(), body);
            slowest = slowest.max(asked.elapsed());
        }
        if started.elapsed() >= how_long {
            return slowest;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Start `n` slow readers of the large file, spread over `addresses` loopback addresses from
/// `127.0.0.10` on, each reading 512 bytes a second for `limit`; all are connected and asking
/// when this returns.
async fn slow_readers(
    url: &str,
    n: usize,
    addresses: u8,
    limit: Duration,
) -> Vec<tokio::task::JoinHandle<Option<Duration>>> {
    assert!(own_fd_limit() > (n as u64) + 200, "this test needs an open-file limit above {} (ulimit -n)", n + 200);
    let host: SocketAddr = host_of(url).parse().unwrap();
    let (asked, mut all_asked) = tokio::sync::mpsc::channel::<()>(n);
    let readers = (0..n)
        .map(|i| {
            let from = loopback(10 + (i % usize::from(addresses)) as u8);
            let asked = asked.clone();
            tokio::spawn(async move {
                let reader = slow_reader(host, from, "1-linux/big.bin", 512, Duration::from_secs(1), limit);
                tokio::pin!(reader);
                // Connected and asked once it first waits (or is done).
                let done = tokio::select! {
                    biased;
                    done = &mut reader => Some(done),
                    () = tokio::time::sleep(Duration::from_millis(50)) => None,
                };
                let _ = asked.send(()).await;
                match done {
                    Some(done) => done,
                    None => reader.await,
                }
            })
        })
        .collect();
    drop(asked);
    for _ in 0..n {
        all_asked.recv().await.expect("every reader started");
    }
    readers
}

/// Resident memory of `pid` sampled every 100 ms while `work` runs: the largest, in bytes.
async fn peak_rss<T>(pid: u32, work: impl std::future::Future<Output = T>) -> (T, u64) {
    let mut peak = rss(pid);
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return (out, peak.max(rss(pid))),
            () = tokio::time::sleep(Duration::from_millis(100)) => peak = peak.max(rss(pid)),
        }
    }
}

/// 300 slow readers from 30 addresses against a server with room for 64 connections: the one
/// furthest behind makes room for each new connection, so `/healthz` and a small file keep
/// answering within 2 s.
#[tokio::test(flavor = "multi_thread")]
async fn slow_readers_make_room_at_the_connection_cap() {
    let tmp = tempfile::tempdir().unwrap();
    plant_files(tmp.path());
    let served = serve(tmp.path(), "[limits]\nmax_connections = 64\n", None).await;
    let pid = served.child.id().expect("pid");
    let readers = slow_readers(&served.url, 300, 30, Duration::from_secs(9)).await;
    let (slowest, peak) = peak_rss(pid, keeps_answering(&served.url, loopback(1), Duration::from_secs(5))).await;
    assert!(slowest < Duration::from_secs(2), "the slowest answer took {slowest:?}");
    assert!(peak < 128 << 20, "the server's RSS reached {} MiB", peak >> 20);
    let mut closed = 0;
    for reader in readers {
        closed += usize::from(reader.await.unwrap().is_some());
    }
    // Every reader beyond the cap, and the ones the probes displaced, were closed.
    assert!(closed >= 300 - 64, "{closed} readers closed");
    drop(served);
}

/// A thousand slow readers from 8 addresses against the default limits (room for all of them):
/// the server's memory stays under 256 MiB (it held about 545 KiB per connection: a 256 KiB
/// read chunk and the file's own buffer of as much) and `/healthz` keeps answering.
#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_slow_readers_leave_memory_bounded() {
    let tmp = tempfile::tempdir().unwrap();
    plant_files(tmp.path());
    let served = serve(tmp.path(), "", None).await;
    let pid = served.child.id().expect("pid");
    let before = rss(pid);
    let ((readers, slowest), peak) = peak_rss(pid, async {
        let readers = slow_readers(&served.url, 1000, 8, Duration::from_secs(8)).await;
        (readers, keeps_answering(&served.url, loopback(1), Duration::from_secs(4)).await)
    })
    .await;
    let (before, peak) = (before >> 20, peak >> 20);
    assert!(peak < 256, "the server's RSS went from {before} to {peak} MiB (slowest answer {slowest:?})");
    assert!(slowest < Duration::from_secs(2), "the slowest answer took {slowest:?} (RSS {before} → {peak} MiB)");
    for reader in readers {
        reader.await.unwrap();
    }
    drop(served);
}

/// One address at `max_connections_per_address` gives up its own connection for a new one
/// (its longest-idle, else its busy one furthest behind); other addresses keep theirs.
#[tokio::test(flavor = "multi_thread")]
async fn one_address_at_its_cap_gives_up_its_own_connections() {
    let tmp = tempfile::tempdir().unwrap();
    plant_files(tmp.path());
    let served = serve(tmp.path(), "[limits]\nmax_connections = 64\nmax_connections_per_address = 8\n", None).await;
    let host: SocketAddr = host_of(&served.url).parse().unwrap();

    // 127.0.0.3: eight idle connections (no request yet), then a ninth that asks for /healthz.
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(connect_from(host, loopback(3)).await.unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // 127.0.0.4: idle too, under its cap.
    let mut others = Vec::new();
    for _ in 0..4 {
        others.push(connect_from(host, loopback(4)).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A ninth from 127.0.0.3, kept open after its answer.
    let asked = Instant::now();
    let mut probe = connect_from(host, loopback(3)).await.unwrap();
    probe.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
    let mut answer = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(2), probe.read(&mut answer)).await.expect("answered").unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer[..n]));
    assert!(asked.elapsed() < Duration::from_secs(2), "{:?}", asked.elapsed());
    let still_open = |stream: &TcpStream| {
        let mut byte = [0u8; 1];
        matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!still_open(&idle[0]), "the longest-idle connection of 127.0.0.3 was closed for the probe");
    assert!(idle[1..].iter().all(still_open), "the newer ones were kept");
    assert!(others.iter().all(still_open), "another address's connections were kept");
    drop(idle);

    // 127.0.0.2: eight slow readers hold every place it has; /healthz from it still answers,
    // displacing its readers, not anyone else's.
    let readers: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(slow_reader(
                host,
                loopback(2),
                "1-linux/big.bin",
                512,
                Duration::from_secs(1),
                Duration::from_secs(6),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let slowest = keeps_answering(&served.url, loopback(2), Duration::from_secs(2)).await;
    assert!(slowest < Duration::from_secs(2), "{slowest:?}");
    let mut closed = 0;
    for reader in readers {
        closed += usize::from(reader.await.unwrap().is_some());
    }
    assert!((1..8).contains(&closed), "{closed} of the readers were closed for the probes");
    assert!(others.iter().all(still_open), "another address's connections were kept");
    drop(served);
}

/// A client that takes a response slower than `min_send_bytes_per_second` (1024 by default,
/// here 256 bytes a second against a window of 2 s) is cut within a few windows (8 s), though it
/// never stalls as long as `send_timeout`; one that keeps up gets the whole file.
#[tokio::test(flavor = "multi_thread")]
async fn responses_slower_than_the_minimum_rate_are_cut() {
    let tmp = tempfile::tempdir().unwrap();
    plant_files(tmp.path());
    let served = serve(tmp.path(), "[limits]\nmin_rate_window_seconds = 2\n", None).await;
    let host: SocketAddr = host_of(&served.url).parse().unwrap();
    let readers: Vec<_> = (0..20)
        .map(|_| {
            tokio::spawn(slow_reader(
                host,
                loopback(1),
                "1-linux/big.bin",
                128,
                Duration::from_millis(500),
                Duration::from_secs(8),
            ))
        })
        .collect();
    let whole = reqwest::get(format!("{}1-linux/big.bin", served.url)).await.unwrap().bytes().await.unwrap();
    assert_eq!(whole.len(), 8 << 20, "a client that keeps up gets it all");
    for reader in readers {
        assert!(reader.await.unwrap().is_some(), "a slow reader was still served after 8 s");
    }
    drop(served);
}

/// An upload refused before its body is read (no token) is drained so its client reads the
/// answer; a client dripping that body slower than `min_body_bytes_per_second` is cut and
/// answered within a few windows, not held for as long as it keeps dripping.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_upload_dripping_its_body_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let served = serve(tmp.path(), "[limits]\nmin_rate_window_seconds = 2\n", None).await;
    let mut stream = TcpStream::connect(host_of(&served.url)).await.unwrap();
    let head = "POST /5-linux/python/ HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\n\
                Content-Length: 16000000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let started = Instant::now();
    let drip = tokio::spawn(async move {
        // 400 bytes a second for at most 20 s.
        for _ in 0..80 {
            if write.write_all(&[b'x'; 100]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let mut response = Vec::new();
    let mut buf = [0u8; 4096];
    while !response.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(20), read.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => response.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
    }
    let took = started.elapsed();
    drip.abort();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    assert!(took < Duration::from_secs(8), "answered after {took:?}");
    drop(served);
}
