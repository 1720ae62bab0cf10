use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use quarry_index::{Indexer, discover_roots};
use quarry_index_server::{AppState, DEFAULT_MAX_UPLOAD, serve};

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// The store to serve: a directory (created if missing).
    #[arg(long, default_value = "./quarry-store")]
    store: String,
    /// Address to listen on. Port 0 picks a free port; the URL is printed on stdout.
    #[arg(long, default_value = "127.0.0.1:8470")]
    addr: SocketAddr,
    /// File with upload tokens, one per line. Created with a random token if missing.
    /// `QUARRY_TOKEN` adds one more. With neither, uploads are refused.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Largest accepted upload, in bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_UPLOAD)]
    max_upload_bytes: u64,
}

fn ensure_token_file(path: &Path) -> anyhow::Result<()> {
    if path.exists() {
        return Ok(());
    }
    let mut random = [0u8; 24];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random))
        .context("reading /dev/urandom for a new upload token")?;
    let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| format!("creating token file {}", path.display()))?;
    writeln!(file, "{token}")?;
    tracing::info!(path = %path.display(), "wrote a new upload token");
    Ok(())
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let store = quarry_store::open(&args.store).await.with_context(|| format!("opening store {}", args.store))?;
    if let Some(path) = &args.token_file {
        ensure_token_file(path)?;
    }
    let tokens = super::read_tokens(args.token_file.as_deref())?;
    if tokens.is_empty() {
        tracing::warn!("no upload tokens configured: the server is read-only");
    }

    // Catch up with files that landed while no server was running.
    let config = quarry_index::IndexConfig::from_env()?;
    let indexer = Indexer::new(store.clone()).with_config(config.clone());
    for root in discover_roots(store.as_ref(), "").await? {
        let report = indexer.reindex(&root).await.with_context(|| format!("reindexing {root}"))?;
        if report.committed {
            tracing::info!(%root, added = report.added.len(), removed = report.removed.len(), "caught up");
        }
    }

    let listener = tokio::net::TcpListener::bind(args.addr).await.with_context(|| format!("binding {}", args.addr))?;
    let local = listener.local_addr()?;
    let state = AppState::new(store.clone(), tokens).with_max_upload(args.max_upload_bytes).with_index_config(config);
    tracing::info!(store = %store.describe(), "serving on http://{local}/");
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "http://{local}/")?;
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

async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}
