//! A TCP proxy in front of an S3 server that answers its first connections with the failures
//! S3 produces, then passes the rest through byte for byte (so SigV4 still verifies upstream).
//! It proves the SDK's own retries (backoff with jitter) on a real wire.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one accepted connection gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnFault {
    /// `503 SlowDown`, then the connection closes.
    SlowDown,
    /// `500 InternalError`, then the connection closes.
    InternalError,
    /// The request is read and the connection dropped without an answer.
    Reset,
}

pub struct FaultProxy {
    pub endpoint: String,
    faults_served: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

fn error_response(status: &str, code: &str, message: &str) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message><RequestId>quarry-proxy</RequestId></Error>"
    );
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Read until the end of the request headers (bounded), so the client has sent its request.
async fn read_head(conn: &mut tokio::net::TcpStream) {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while seen.len() < 1 << 20 {
        match conn.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
        if seen.windows(4).any(|w| w == b"\r\n\r\n") {
            return;
        }
    }
}

impl FaultProxy {
    /// Listen on a free loopback port; connection `i` gets `plan[i]`, later ones pass through
    /// to `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str, plan: Vec<ConnFault>) -> Self {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
        let faults_served = Arc::new(AtomicUsize::new(0));
        let served = faults_served.clone();
        let task = tokio::spawn(async move {
            let mut accepted = 0usize;
            while let Ok((mut conn, _)) = listener.accept().await {
                let fault = plan.get(accepted).copied();
                accepted += 1;
                let upstream = upstream.clone();
                let served = served.clone();
                tokio::spawn(async move {
                    match fault {
                        Some(fault) => {
                            read_head(&mut conn).await;
                            served.fetch_add(1, Ordering::SeqCst);
                            let answer = match fault {
                                ConnFault::SlowDown => {
                                    error_response("503 Slow Down", "SlowDown", "Please reduce your request rate.")
                                }
                                ConnFault::InternalError => error_response(
                                    "500 Internal Server Error",
                                    "InternalError",
                                    "We encountered an internal error. Please try again.",
                                ),
                                ConnFault::Reset => Vec::new(),
                            };
                            let _ = conn.write_all(&answer).await;
                            let _ = conn.shutdown().await;
                        }
                        None => {
                            if let Ok(mut up) = tokio::net::TcpStream::connect(&upstream).await {
                                let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
                            }
                        }
                    }
                });
            }
        });
        Self { endpoint, faults_served, task }
    }

    pub fn faults_served(&self) -> usize {
        self.faults_served.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
