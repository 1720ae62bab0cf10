use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use quarry_index::{Indexer, Refreshed, discover_scopes};
use quarry_index_server::{AppState, DEFAULT_MAX_UPLOAD, Limits, MIN_HEADER_BYTES, Token, serve};

/// `quarry serve`. Every setting comes from, highest first: the flag, its `QUARRY_*`
/// variable, the configuration file (`--config`, `QUARRY_CONFIG`), the default. The file's
/// keys are documented in `docs/configuration.md`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Configuration file (TOML, see docs/configuration.md).
    #[arg(long, env = "QUARRY_CONFIG")]
    config: Option<PathBuf>,
    /// The store to serve: a directory (created if missing), file:// or s3://bucket/prefix
    /// [default: ./quarry-store].
    #[arg(long, env = "QUARRY_STORE")]
    store: Option<String>,
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
    /// The URL the browse pages' install lines name (default: the request's Host).
    #[arg(long, env = "QUARRY_PUBLIC_URL")]
    public_url: Option<String>,
    /// BUILD_TOPOLOGY.toml: run pages group artifacts by the stage that produced them.
    #[arg(long, env = "QUARRY_TOPOLOGY")]
    topology: Option<PathBuf>,
}

/// The configuration file. Unknown keys are refused.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ServeConfig {
    store: Option<String>,
    addr: Option<SocketAddr>,
    token_file: Option<PathBuf>,
    max_upload_bytes: Option<u64>,
    private: Option<bool>,
    public_url: Option<String>,
    topology: Option<PathBuf>,
    #[serde(default)]
    tokens: Vec<TokenConfig>,
    #[serde(default)]
    index: IndexFileConfig,
    #[serde(default)]
    limits: LimitsFileConfig,
}

/// `[limits]`: what slow, idle or greedy clients may hold (defaults: [`Limits::default`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsFileConfig {
    max_connections: Option<usize>,
    header_timeout_seconds: Option<u64>,
    body_idle_timeout_seconds: Option<u64>,
    send_timeout_seconds: Option<u64>,
    keep_alive: Option<bool>,
    max_requests_per_connection: Option<u64>,
    max_header_bytes: Option<usize>,
}

impl LimitsFileConfig {
    fn limits(&self) -> Result<Limits, super::UsageError> {
        let d = Limits::default();
        let positive = |key: &str, value: Option<u64>, default: u64| match value {
            Some(0) => Err(super::UsageError::new(format!("[limits] {key} must be at least 1"))),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        let seconds = |key: &str, value: Option<u64>, default: Duration| {
            positive(key, value, default.as_secs()).map(Duration::from_secs)
        };
        let max_header_bytes = self.max_header_bytes.unwrap_or(d.max_header_bytes);
        if max_header_bytes < MIN_HEADER_BYTES {
            return Err(super::UsageError::new(format!(
                "[limits] max_header_bytes must be at least {MIN_HEADER_BYTES}"
            )));
        }
        let max_connections =
            positive("max_connections", self.max_connections.map(|n| n as u64), d.max_connections as u64)?;
        Ok(Limits {
            max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
            header_timeout: seconds("header_timeout_seconds", self.header_timeout_seconds, d.header_timeout)?,
            body_idle_timeout: seconds(
                "body_idle_timeout_seconds",
                self.body_idle_timeout_seconds,
                d.body_idle_timeout,
            )?,
            send_timeout: seconds("send_timeout_seconds", self.send_timeout_seconds, d.send_timeout)?,
            keep_alive: self.keep_alive.unwrap_or(d.keep_alive),
            max_requests_per_connection: positive(
                "max_requests_per_connection",
                self.max_requests_per_connection,
                d.max_requests_per_connection,
            )?,
            max_header_bytes,
        })
    }
}

/// Open files kept free of connections under the process's limit: the listener, the store's
/// files, the S3 client's connections, logs.
const FD_HEADROOM: u64 = 64;

/// The soft limit on open files where the system tells (Linux's `/proc/self/limits`).
fn open_file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// `max_connections` lowered to fit under the open-file limit `fds` (if known), so accepting
/// never fails for lack of descriptors while idle connections hold them all.
fn fit_connections(max_connections: usize, fds: Option<u64>) -> usize {
    match fds {
        Some(fds) => {
            let room = usize::try_from(fds.saturating_sub(FD_HEADROOM)).unwrap_or(usize::MAX).max(1);
            max_connections.min(room)
        }
        None => max_connections,
    }
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenConfig {
    /// The secret itself, or the name of the variable holding it.
    token: Option<String>,
    token_env: Option<String>,
    #[serde(default)]
    prefixes: Vec<String>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexFileConfig {
    grace_seconds: Option<i64>,
    signing_key_file: Option<PathBuf>,
    apt_origin: Option<String>,
    apt_label: Option<String>,
}

impl ServeConfig {
    pub(crate) fn parse(text: &str) -> anyhow::Result<Self> {
        toml::from_str(text).map_err(|e| anyhow::Error::new(super::UsageError::new(e.to_string().trim())))
    }
}

/// Everything `serve` runs with, after flags, variables and the file are merged.
struct Settings {
    store: String,
    addr: SocketAddr,
    token_file: Option<PathBuf>,
    max_upload_bytes: u64,
    private: bool,
    public_url: Option<String>,
    topology: Option<PathBuf>,
    tokens: Vec<Token>,
    index: quarry_index::IndexConfig,
    limits: Limits,
}

fn settings(args: ServeArgs) -> anyhow::Result<Settings> {
    let file = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            ServeConfig::parse(&text).with_context(|| format!("{}", path.display()))?
        }
        None => ServeConfig::default(),
    };
    let mut tokens = Vec::new();
    for (i, t) in file.tokens.iter().enumerate() {
        let secret = match (&t.token, &t.token_env) {
            (Some(s), None) => s.clone(),
            (None, Some(var)) => std::env::var(var)
                .map_err(|_| super::UsageError::new(format!("[[tokens]] #{}: ${var} is not set", i + 1)))?,
            _ => {
                return Err(
                    super::UsageError::new(format!("[[tokens]] #{}: set one of token, token_env", i + 1)).into()
                );
            }
        };
        tokens.push(Token::new(secret, t.prefixes.clone()));
    }
    let mut index = quarry_index::IndexConfig::from_env()?;
    if std::env::var_os("QUARRY_GRACE_SECONDS").is_none()
        && let Some(g) = file.index.grace_seconds
    {
        index.grace_seconds = g;
    }
    if index.signer.is_none()
        && let Some(path) = &file.index.signing_key_file
    {
        let armored = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        index.signer = Some(std::sync::Arc::new(quarry_index::Signer::from_armored(&armored)?));
    }
    if std::env::var_os("QUARRY_APT_ORIGIN").is_none()
        && let Some(o) = file.index.apt_origin
    {
        index.apt.origin = o;
    }
    if std::env::var_os("QUARRY_APT_LABEL").is_none()
        && let Some(l) = file.index.apt_label
    {
        index.apt.label = l;
    }
    Ok(Settings {
        store: args.store.or(file.store).unwrap_or_else(|| "./quarry-store".into()),
        addr: args.addr.or(file.addr).unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8470))),
        token_file: args.token_file.or(file.token_file),
        max_upload_bytes: args.max_upload_bytes.or(file.max_upload_bytes).unwrap_or(DEFAULT_MAX_UPLOAD),
        private: args.private.or(file.private).unwrap_or(false),
        public_url: args.public_url.or(file.public_url),
        topology: args.topology.or(file.topology),
        tokens,
        index,
        limits: file.limits.limits()?,
    })
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
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path).with_context(|| format!("creating token file {}", path.display()))?;
    writeln!(file, "{token}")?;
    tracing::info!(path = %path.display(), "wrote a new upload token");
    Ok(())
}

pub(crate) async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let settings = settings(args)?;
    let store =
        quarry_store::open(&settings.store).await.with_context(|| format!("opening store {}", settings.store))?;
    if let Some(path) = &settings.token_file {
        ensure_token_file(path)?;
    }
    let mut tokens = settings.tokens;
    tokens.extend(super::read_token_lines(settings.token_file.as_deref())?.iter().filter_map(|l| Token::parse_line(l)));
    // QUARRY_TOKEN is one secret that may write anywhere.
    tokens.extend(super::env_token()?.map(|secret| Token::new(secret, Vec::new())));
    if tokens.is_empty() {
        tracing::warn!("no upload tokens configured: the server is read-only");
    }
    if settings.private && tokens.is_empty() {
        return Err(super::UsageError::new("a private server needs at least one token to read with").into());
    }
    let topology = match &settings.topology {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            Some(quarry_topology::Topology::parse(&text)?)
        }
        None => None,
    };

    // Catch up with files that landed while no server was running.
    let config = settings.index;
    catch_up(&Indexer::new(store.clone()).with_config(config.clone())).await?;
    let mut limits = settings.limits;
    let fitted = fit_connections(limits.max_connections, open_file_limit());
    if fitted < limits.max_connections {
        tracing::warn!(
            configured = limits.max_connections,
            max_connections = fitted,
            "max_connections lowered to stay under the open-file limit (ulimit -n)"
        );
        limits.max_connections = fitted;
    }

    let listener =
        tokio::net::TcpListener::bind(settings.addr).await.with_context(|| format!("binding {}", settings.addr))?;
    let local = listener.local_addr()?;
    let state = AppState::new(store.clone(), Vec::new())
        .with_tokens(tokens)
        .with_private_reads(settings.private)
        .with_public_url(settings.public_url)
        .with_topology(topology)
        .with_max_upload(settings.max_upload_bytes)
        .with_limits(limits)
        .with_index_config(config);
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

/// Refresh every root and run listing of the store: files may have landed while no server
/// was running. One that fails is served as it is (an upload into a root retries, a listing
/// follows the run's next change).
async fn catch_up(indexer: &Indexer) -> anyhow::Result<()> {
    let store = indexer.store().as_ref();
    let scopes = discover_scopes(store, "").await.context("listing the store's repo roots and run listings")?;
    for scope in scopes {
        match indexer.refresh(&scope).await {
            Ok(Refreshed::Root(report)) if report.committed => {
                tracing::info!(%scope, added = report.added.len(), removed = report.removed.len(), "caught up");
            }
            Ok(Refreshed::Listing(report)) if report.written => {
                tracing::info!(%scope, entries = report.entries, "caught up");
            }
            Ok(_) => {}
            Err(e) => {
                let error = anyhow::Error::new(e);
                tracing::warn!(%scope, error = format!("{error:#}"), "catching up failed; serving it as it is");
            }
        }
    }
    Ok(())
}

const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

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
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented file is the real one: every key in docs/configuration.md parses.
    #[test]
    fn the_documented_configuration_parses() {
        let doc = include_str!("../../../docs/configuration.md");
        let start = doc.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let block = &doc[start..start + doc[start..].find("```").unwrap()];
        let config = ServeConfig::parse(block).unwrap();
        assert_eq!(config.store.as_deref(), Some("./quarry-store"));
        assert_eq!(config.tokens.len(), 1);
        assert_eq!(config.tokens[0].prefixes, ["123-linux/", "123-windows/"]);
        assert_eq!(config.index.grace_seconds, Some(86400));
        assert_eq!(config.limits.limits().unwrap(), Limits::default(), "the documented limits are the defaults");
        let err = ServeConfig::parse("stroe = \"x\"\n").unwrap_err().to_string();
        assert!(err.contains("stroe"), "{err}");
    }

    #[test]
    fn limits_are_checked() {
        let limits =
            ServeConfig::parse("[limits]\nheader_timeout_seconds = 2\nmax_connections = 10\nkeep_alive = false\n")
                .unwrap()
                .limits
                .limits()
                .unwrap();
        assert_eq!(limits.header_timeout, Duration::from_secs(2));
        assert_eq!(limits.max_connections, 10);
        assert!(!limits.keep_alive);
        assert_eq!(limits.body_idle_timeout, Limits::default().body_idle_timeout);
        for (text, message) in [
            ("[limits]\nheader_timeout_seconds = 0\n", "[limits] header_timeout_seconds must be at least 1"),
            ("[limits]\nmax_connections = 0\n", "[limits] max_connections must be at least 1"),
            ("[limits]\nmax_header_bytes = 100\n", "[limits] max_header_bytes must be at least 8192"),
        ] {
            let err = ServeConfig::parse(text).unwrap().limits.limits().unwrap_err().to_string();
            assert_eq!(err, message);
        }
        let err = ServeConfig::parse("[limits]\nheader_timeout = 2\n").unwrap_err().to_string();
        assert!(err.contains("header_timeout"), "unknown keys are refused: {err}");
    }

    #[test]
    fn connections_fit_under_the_open_file_limit() {
        assert_eq!(fit_connections(1024, None), 1024);
        assert_eq!(fit_connections(1024, Some(20_000)), 1024);
        assert_eq!(fit_connections(1024, Some(256)), 192);
        assert_eq!(fit_connections(1024, Some(10)), 1);
        if cfg!(target_os = "linux") {
            assert!(open_file_limit().is_some_and(|n| n > 0), "read from /proc/self/limits");
        }
    }
}
