//! `quarry serve`: the embedded index server over a store (a directory by default).
//!
//! The layout is loaded, the settings resolved (flag, `QUARRY_*` variable, `quarry.toml`,
//! default) and the store opened; opening catches up first (`quarry_index_server::catch_up`):
//! every root and run listing [`quarry_index::discover_scopes`] finds is refreshed, since files
//! may have landed while no server ran, and one that fails is logged and served as it is. Only
//! then is the address bound and its URL printed on stdout. Ctrl-C (SIGTERM on Unix, the console
//! events on Windows) stops accepting and lets requests in progress finish; connections still
//! open after 10 s are dropped.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use quarry_index_server::{ServeOptions, Settings, serve};

use super::args::OptionalStoreArg;

/// `quarry serve`. Every setting comes from, highest first: the flag, its `QUARRY_*`
/// variable, the configuration file (`--config`, `QUARRY_CONFIG`), the default. The file's
/// keys are documented in `docs/configuration.md`.
#[derive(Debug, Args)]
#[command(after_help = "Without --store, the store is ./quarry-store (created if missing). Every setting may also \
come from quarry.toml (--config; docs/configuration.md lists the keys).")]
pub(crate) struct ServeArgs {
    /// Configuration file (TOML, see docs/configuration.md).
    #[arg(long, env = "QUARRY_CONFIG")]
    config: Option<PathBuf>,
    // The store to serve: a directory is created if missing [default: ./quarry-store].
    #[command(flatten)]
    store: OptionalStoreArg,
    /// Address to listen on. Port 0 picks a free port; the URL is printed on stdout
    /// [default: 127.0.0.1:8470].
    #[arg(long, env = "QUARRY_ADDR")]
    addr: Option<SocketAddr>,
    /// File with upload tokens, one per line: `TOKEN [PREFIX …]` (prefixes limit where the
    /// token may write). Created with a random token if missing. `QUARRY_TOKEN` adds one more.
    /// With none, uploads are refused.
    #[arg(long, env = "QUARRY_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Largest accepted upload, in bytes [default: 64 GiB].
    #[arg(long, env = "QUARRY_MAX_UPLOAD_BYTES")]
    max_upload_bytes: Option<u64>,
    /// Reads need a token too (Bearer, or Basic auth with the token as password).
    #[arg(long, env = "QUARRY_PRIVATE", num_args = 0..=1, default_missing_value = "true")]
    private: Option<bool>,
    /// The URL the browse pages' install lines name (default: the request's Host when its
    /// name is allowed, else the address the request came in on).
    #[arg(long, env = "QUARRY_PUBLIC_URL")]
    public_url: Option<String>,
    /// A host name whose `Host` header install lines may name without --public-url
    /// (repeatable, or comma-separated; `*.example.com` for every name below it). Loopback
    /// names are always allowed.
    #[arg(long = "allowed-host", env = "QUARRY_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
    /// BUILD_TOPOLOGY.toml: run pages group artifacts by the stage that produced them.
    #[arg(long, env = "QUARRY_TOPOLOGY")]
    topology: Option<PathBuf>,
    /// The user guide's built pages (`mdbook build docs/guide`, into docs/guide/book/), served
    /// under `/-/docs/`.
    #[arg(long, env = "QUARRY_DOCS", value_name = "DIR")]
    docs: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM, the server's certificate first); needs
    /// --tls-key. Both files are read again when they change, and on SIGHUP (Unix).
    #[arg(long, env = "QUARRY_TLS_CERT", value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "QUARRY_TLS_KEY", value_name = "PEM")]
    tls_key: Option<PathBuf>,
}

impl From<ServeArgs> for ServeOptions {
    fn from(args: ServeArgs) -> Self {
        Self {
            config: args.config,
            store: args.store.url(),
            addr: args.addr,
            token_file: args.token_file,
            max_upload_bytes: args.max_upload_bytes,
            private: args.private,
            public_url: args.public_url,
            allowed_hosts: (!args.allowed_hosts.is_empty()).then_some(args.allowed_hosts),
            topology: args.topology,
            docs: args.docs,
            tls_cert: args.tls_cert,
            tls_key: args.tls_key,
        }
    }
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let layout = super::load_layout(args.config.as_deref())?;
    let settings = Settings { layout, ..Settings::resolve(args.into())? };
    let addr = settings.addr;
    let state = settings.open().await?;
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?;
    let local = listener.local_addr()?;
    let scheme = if state.tls().is_some() { "https" } else { "http" };
    tracing::info!(store = %state.store().describe(), "serving on {scheme}://{local}/");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{scheme}://{local}/")?;
        out.flush()?;
    }
    // Graceful shutdown waits for open connections; idle keep-alive clients could hold it up
    // forever, so give them a grace period and then stop anyway.
    let stopping = std::sync::Arc::new(tokio::sync::Notify::new());
    let signal = {
        let stopping = stopping.clone();
        async move {
            shutdown().await;
            stopping.notify_waiters();
        }
    };
    tokio::select! {
        served = serve(listener, state, signal) => served.context("serving")?,
        () = async {
            stopping.notified().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; stopping anyway"),
    }
    Ok(())
}

const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Ctrl-C everywhere; SIGTERM too on Unix; on Windows also Ctrl-Break, the console window
/// closing, and logoff/shutdown (the console events a service manager or `taskkill` sends).
async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(windows)]
    let term = async {
        use tokio::signal::windows;
        let (Ok(mut brk), Ok(mut close), Ok(mut shutdown)) =
            (windows::ctrl_break(), windows::ctrl_close(), windows::ctrl_shutdown())
        else {
            return std::future::pending::<()>().await;
        };
        tokio::select! {
            _ = brk.recv() => {},
            _ = close.recv() => {},
            _ = shutdown.recv() => {},
        }
    };
    #[cfg(not(any(unix, windows)))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
