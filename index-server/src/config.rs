//! `quarry serve`'s configuration: the `quarry.toml` schema ([`ServeConfig`]; unknown keys are
//! refused), merged with the command line and the environment ([`ServeOptions`]) into the
//! [`Settings`] the server starts with, and upload tokens as token files and `QUARRY_TOKEN`
//! hold them ([`read_token_lines`], [`env_token`], [`read_tokens`]). Every setting comes from,
//! highest first: the flag, its `QUARRY_*` variable (both in [`ServeOptions`]), the file, the
//! default. Errors name the file, key or variable at fault ([`ConfigError`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use quarry_index::{APT_LABEL_ENV, APT_ORIGIN_ENV, GRACE_SECONDS_ENV, IndexConfig, Signer};

use crate::tls::{TlsError, TlsFiles};
use crate::{DEFAULT_MAX_UPLOAD, Limits, MIN_HEADER_BYTES, Token};

/// The variable holding one more upload token, unscoped (see [`parse_env_token`]).
pub const TOKEN_ENV: &str = "QUARRY_TOKEN";
/// The store served when none is configured.
pub const DEFAULT_STORE: &str = "./quarry-store";
/// The address listened on when none is configured.
pub const DEFAULT_ADDR: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 8470);

/// Why `quarry serve` cannot start: a setting that cannot be used (naming its file, key or
/// variable; [`ConfigError::is_bad_input`]) or a failure while starting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A file the settings name (configuration, signing key, topology) cannot be read.
    #[error("reading {}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// The guide's directory (`--docs`, `docs`) is not a directory.
    #[error("the guide's pages {}: not a directory (build them with `mdbook build docs/guide`)", path.display())]
    Docs { path: PathBuf },
    /// The configuration file is no valid TOML or holds an unknown key (`path`: the file, when
    /// it was read from one).
    #[error("{}{message}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
    Syntax { path: Option<PathBuf>, message: String },
    /// A `[limits]` value below its minimum.
    #[error("[limits] {key} must be at least {min}")]
    Limit { key: &'static str, min: u64 },
    /// A `[[tokens]]` entry (numbered from 1) names a variable that is not set.
    #[error("[[tokens]] #{number}: ${variable} is not set")]
    TokenVariableUnset { number: usize, variable: String },
    /// A `[[tokens]]` entry (numbered from 1) has both or neither of `token` and `token_env`.
    #[error("[[tokens]] #{number}: set one of token, token_env")]
    TokenSource { number: usize },
    /// The index settings from the environment (`QUARRY_GRACE_SECONDS`, the signing key, …).
    #[error(transparent)]
    Index(#[from] quarry_index::ConfigError),
    /// The key of `[index] signing_key_file` cannot be loaded.
    #[error(transparent)]
    SigningKey(#[from] quarry_index::SignError),
    /// A token file cannot be read.
    #[error("cannot read token file {}: {error}", path.display())]
    TokenFile { path: PathBuf, error: std::io::Error },
    /// A token file line (numbered from 1) scopes its token to a prefix that is no prefix.
    #[error("{}:{line}: {error}", path.display())]
    TokenLine { path: PathBuf, line: usize, error: crate::auth::BadScope },
    /// A `[[tokens]]` entry (numbered from 1) scopes its token to a prefix that is no prefix.
    #[error("[[tokens]] #{number}: {error}")]
    TokenScope { number: usize, error: crate::auth::BadScope },
    /// `QUARRY_TOKEN` is not valid UTF-8.
    #[error("{TOKEN_ENV} is not valid UTF-8")]
    EnvTokenNotUnicode,
    /// `QUARRY_TOKEN` holds whitespace: it is one secret, never `TOKEN PREFIX…`.
    #[error("{TOKEN_ENV} holds whitespace: it is one token; scope tokens to prefixes in the token file or [[tokens]]")]
    EnvTokenWhitespace,
    /// No randomness for a new token file's token.
    #[error("asking the operating system for randomness for a new upload token")]
    Random(#[source] getrandom::Error),
    /// A new token file cannot be created.
    #[error("creating token file {}", path.display())]
    CreateTokenFile { path: PathBuf, source: std::io::Error },
    /// A new token file cannot be written.
    #[error(transparent)]
    WriteTokenFile(std::io::Error),
    /// Private reads are configured without any token to read with.
    #[error("a private server needs at least one token to read with")]
    PrivateWithoutTokens,
    /// The store cannot be opened.
    #[error("opening store {url}")]
    Store { url: String, source: quarry_store::StoreError },
    /// The topology file is not a valid `BUILD_TOPOLOGY.toml`.
    #[error(transparent)]
    Topology(#[from] quarry_topology::TopologyError),
    /// Only one of the TLS certificate and key is set.
    #[error("TLS needs both a certificate and a key: {missing} is not set")]
    TlsHalf { missing: &'static str },
    /// The TLS certificate or key cannot be served.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The HTTP client that fetches the trusted issuers' keys cannot be built.
    #[error("building the HTTP client of trusted publishing")]
    OidcClient(#[source] reqwest::Error),
    /// The start-up catch-up cannot list the store.
    #[error("listing the store's repo roots and run listings")]
    Discover(#[source] quarry_store::StoreError),
}

impl ConfigError {
    /// A mistake in the settings (the file, a flag, a variable) the user must fix, rather than
    /// a failure of the system (I/O, the store, a signing key that does not load).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::Syntax { .. }
                | Self::Docs { .. }
                | Self::Limit { .. }
                | Self::TokenVariableUnset { .. }
                | Self::TokenSource { .. }
                | Self::TokenLine { .. }
                | Self::TokenScope { .. }
                | Self::EnvTokenNotUnicode
                | Self::EnvTokenWhitespace
                | Self::PrivateWithoutTokens
                | Self::Topology(_)
                | Self::TlsHalf { .. }
                | Self::Tls(_)
        )
    }
}

/// What the command line and the `QUARRY_*` variables set (`None`: not given), over the file.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The configuration file to read (`--config`, `QUARRY_CONFIG`).
    pub config: Option<PathBuf>,
    /// The store URL or directory ([`DEFAULT_STORE`]).
    pub store: Option<String>,
    /// Address to listen on ([`DEFAULT_ADDR`]).
    pub addr: Option<SocketAddr>,
    /// File of upload tokens, one `TOKEN [PREFIX …]` a line; created if missing.
    pub token_file: Option<PathBuf>,
    /// Largest accepted upload in bytes ([`DEFAULT_MAX_UPLOAD`]).
    pub max_upload_bytes: Option<u64>,
    /// Reads need a token too (default: no).
    pub private: Option<bool>,
    /// The URL install lines name.
    pub public_url: Option<String>,
    /// Host names a request's `Host` may give install lines (none given: the file's, else
    /// loopback names only).
    pub allowed_hosts: Option<Vec<String>>,
    /// `BUILD_TOPOLOGY.toml`, to group run artifacts by stage.
    pub topology: Option<PathBuf>,
    /// The user guide's built pages, served under `/-/docs/`.
    pub docs: Option<PathBuf>,
    /// TLS: the certificate chain (PEM), with `tls_key`.
    pub tls_cert: Option<PathBuf>,
    /// TLS: the certificate's private key (PEM), with `tls_cert`.
    pub tls_key: Option<PathBuf>,
}

/// The configuration file (`quarry.toml`, keys in `docs/configuration.md`). Unknown keys are
/// refused.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    store: Option<String>,
    addr: Option<SocketAddr>,
    token_file: Option<PathBuf>,
    max_upload_bytes: Option<u64>,
    private: Option<bool>,
    public_url: Option<String>,
    allowed_hosts: Option<Vec<String>>,
    topology: Option<PathBuf>,
    docs: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    #[serde(default)]
    tokens: Vec<TokenConfig>,
    /// The audience OIDC tokens must name (`GET /_/oidc/audience`).
    oidc_audience: Option<String>,
    /// `[[trusted_publisher]]`: who may mint upload tokens (`oidc`), as written.
    #[serde(default)]
    trusted_publisher: Vec<TrustedPublisherConfig>,
    /// The same, checked (by [`ServeConfig::parse`]).
    #[serde(skip)]
    trusted_publishers: Vec<quarry_oidc::Rule>,
    #[serde(default)]
    index: IndexFileConfig,
    #[serde(default)]
    limits: LimitsFileConfig,
    /// `[layout]`: read by `quarry_layout::config` (checked there).
    #[serde(default)]
    #[allow(dead_code)]
    layout: Option<toml::Value>,
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
    max_connections_per_address: Option<usize>,
    min_send_bytes_per_second: Option<u64>,
    min_body_bytes_per_second: Option<u64>,
    min_rate_window_seconds: Option<u64>,
}

impl LimitsFileConfig {
    fn limits(&self) -> Result<Limits, ConfigError> {
        let d = Limits::default();
        let positive = |key: &'static str, value: Option<u64>, default: u64| match value {
            Some(0) => Err(ConfigError::Limit { key, min: 1 }),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        let seconds = |key: &'static str, value: Option<u64>, default: Duration| {
            positive(key, value, default.as_secs()).map(Duration::from_secs)
        };
        let max_header_bytes = self.max_header_bytes.unwrap_or(d.max_header_bytes);
        if max_header_bytes < MIN_HEADER_BYTES {
            return Err(ConfigError::Limit { key: "max_header_bytes", min: MIN_HEADER_BYTES as u64 });
        }
        let max_connections =
            positive("max_connections", self.max_connections.map(|n| n as u64), d.max_connections as u64)?;
        let per_address = positive(
            "max_connections_per_address",
            self.max_connections_per_address.map(|n| n as u64),
            d.max_connections_per_address as u64,
        )?;
        Ok(Limits {
            max_connections: usize::try_from(max_connections).unwrap_or(usize::MAX),
            max_connections_per_address: usize::try_from(per_address).unwrap_or(usize::MAX),
            min_send_rate: self.min_send_bytes_per_second.unwrap_or(d.min_send_rate),
            min_body_rate: self.min_body_bytes_per_second.unwrap_or(d.min_body_rate),
            min_rate_window: seconds("min_rate_window_seconds", self.min_rate_window_seconds, d.min_rate_window)?,
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

/// `[[tokens]]`: one more token, inline or from a variable, optionally scoped to prefixes.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenConfig {
    /// The secret itself, or the name of the variable holding it.
    token: Option<String>,
    token_env: Option<String>,
    #[serde(default)]
    prefixes: Vec<String>,
}

/// `[[trusted_publisher]]`: one rule of trusted publishing ([`quarry_oidc::Rule`]), each value
/// with its place in the file for messages.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustedPublisherConfig {
    issuer: toml::Spanned<String>,
    repository: toml::Spanned<String>,
    workflow: Option<toml::Spanned<String>>,
    #[serde(rename = "ref")]
    git_ref: Option<toml::Spanned<String>>,
    environment: Option<toml::Spanned<String>>,
    prefix: toml::Spanned<String>,
}

/// The line (from 1) of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset).unwrap_or(text).matches('\n').count() + 1
}

impl TrustedPublisherConfig {
    /// The checked rule (number `number` in the file); an error names the line of the value at
    /// fault. The rule's own line is its `[[trusted_publisher]]` header's.
    fn rule(&self, text: &str, number: usize) -> Result<quarry_oidc::Rule, ConfigError> {
        let start = self.issuer.span().start.min(self.repository.span().start);
        let header = text.get(..start).and_then(|t| t.rfind("[[trusted_publisher]]")).unwrap_or(start);
        fn value(v: &Option<toml::Spanned<String>>) -> Option<&str> {
            v.as_ref().map(|s| s.get_ref().as_str())
        }
        quarry_oidc::Rule::new(
            self.issuer.get_ref(),
            self.repository.get_ref(),
            value(&self.workflow),
            value(&self.git_ref),
            value(&self.environment),
            self.prefix.get_ref(),
            line_of(text, header),
        )
        .map_err(|e| {
            let span = match e.field() {
                "issuer" => Some(self.issuer.span()),
                "repository" => Some(self.repository.span()),
                "workflow" => self.workflow.as_ref().map(toml::Spanned::span),
                "ref" => self.git_ref.as_ref().map(toml::Spanned::span),
                "environment" => self.environment.as_ref().map(toml::Spanned::span),
                _ => Some(self.prefix.span()),
            };
            let line = line_of(text, span.map_or(header, |s| s.start));
            ConfigError::Syntax { path: None, message: format!("line {line}: [[trusted_publisher]] #{number}: {e}") }
        })
    }
}

/// `[index]`: apt and dnf metadata, under their variables.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexFileConfig {
    grace_seconds: Option<i64>,
    signing_key_file: Option<PathBuf>,
    apt_origin: Option<String>,
    apt_label: Option<String>,
}

impl ServeConfig {
    /// Parse a configuration file's text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut config: Self = toml::from_str(text)
            .map_err(|e| ConfigError::Syntax { path: None, message: e.to_string().trim().to_owned() })?;
        config.trusted_publishers =
            config.trusted_publisher.iter().enumerate().map(|(i, t)| t.rule(text, i + 1)).collect::<Result<_, _>>()?;
        if config.oidc_audience.as_deref().is_some_and(|a| a.trim().is_empty()) {
            return Err(ConfigError::Syntax { path: None, message: "oidc_audience is empty".into() });
        }
        Ok(config)
    }

    /// Read and parse the configuration file at `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = read(path)?;
        Self::parse(&text).map_err(|e| match e {
            ConfigError::Syntax { message, .. } => ConfigError::Syntax { path: Some(path.to_owned()), message },
            other => other,
        })
    }

    /// The `[[tokens]]` entries, their secrets read from their variables.
    fn tokens(&self) -> Result<Vec<Token>, ConfigError> {
        let mut tokens = Vec::new();
        for (i, t) in self.tokens.iter().enumerate() {
            let number = i + 1;
            let secret = match (&t.token, &t.token_env) {
                (Some(s), None) => s.clone(),
                (None, Some(variable)) => std::env::var(variable)
                    .map_err(|_| ConfigError::TokenVariableUnset { number, variable: variable.clone() })?,
                _ => return Err(ConfigError::TokenSource { number }),
            };
            tokens.push(
                Token::new(secret, t.prefixes.clone()).map_err(|error| ConfigError::TokenScope { number, error })?,
            );
        }
        Ok(tokens)
    }

    /// The environment's index settings ([`IndexConfig::from_env`]), with the file's
    /// `[index]` keys for what the environment leaves unset.
    fn index_config(&self) -> Result<IndexConfig, ConfigError> {
        let file = &self.index;
        let mut index = IndexConfig::from_env()?;
        if std::env::var_os(GRACE_SECONDS_ENV).is_none()
            && let Some(g) = file.grace_seconds
        {
            index.grace_seconds = g;
        }
        if index.signer.is_none()
            && let Some(path) = &file.signing_key_file
        {
            index.signer = Some(Arc::new(Signer::from_armored(&read(path)?)?));
        }
        if std::env::var_os(APT_ORIGIN_ENV).is_none()
            && let Some(o) = &file.apt_origin
        {
            index.apt.origin.clone_from(o);
        }
        if std::env::var_os(APT_LABEL_ENV).is_none()
            && let Some(l) = &file.apt_label
        {
            index.apt.label.clone_from(l);
        }
        Ok(index)
    }
}

/// A file the settings name, as text.
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })
}

/// Everything `quarry serve` runs with, after the options, the environment and the file are
/// merged ([`Settings::resolve`]); started by [`Settings::open`].
#[derive(Debug)]
pub struct Settings {
    /// The store URL or directory.
    pub store: String,
    /// Address to listen on.
    pub addr: SocketAddr,
    /// The token file (created if missing when the server opens).
    pub token_file: Option<PathBuf>,
    /// Largest accepted upload in bytes.
    pub max_upload_bytes: u64,
    /// Reads need a token too.
    pub private: bool,
    /// The URL install lines name.
    pub public_url: Option<String>,
    /// Host names a request's `Host` may give install lines (loopback names always may).
    pub allowed_hosts: Vec<String>,
    /// `BUILD_TOPOLOGY.toml` (read when the server opens).
    pub topology: Option<PathBuf>,
    /// The user guide's built pages (a directory), served under `/-/docs/`.
    pub docs: Option<PathBuf>,
    /// Serve over TLS with these files (read when the server opens).
    pub tls: Option<TlsFiles>,
    /// The file's `[[tokens]]` (the token file's and `QUARRY_TOKEN` are added when the server
    /// opens).
    pub tokens: Vec<Token>,
    /// `[[trusted_publisher]]` rules (none: trusted publishing is off).
    pub trusted_publishers: Vec<quarry_oidc::Rule>,
    /// The audience OIDC tokens must name: `oidc_audience`, else the public URL's host, else
    /// [`crate::oidc::DEFAULT_AUDIENCE`].
    pub oidc_audience: String,
    /// How apt and dnf metadata are published.
    pub index: IndexConfig,
    /// What clients may hold (`max_connections` is fitted under the open-file limit when the
    /// server opens).
    pub limits: Limits,
    /// `[layout]`: which prefixes are roots (the caller's, read with
    /// `quarry_layout::config::load`; default: runs only).
    pub layout: std::sync::Arc<quarry_layout::config::Layout>,
}

impl Settings {
    /// Merge `options` over the configuration file they name (if any) and the defaults. The
    /// `[index]` keys yield to their variables (`QUARRY_GRACE_SECONDS`, the signing key,
    /// `QUARRY_APT_ORIGIN`, `QUARRY_APT_LABEL`).
    pub fn resolve(options: ServeOptions) -> Result<Self, ConfigError> {
        let file = match &options.config {
            Some(path) => ServeConfig::load(path)?,
            None => ServeConfig::default(),
        };
        let tokens = file.tokens()?;
        let index = file.index_config()?;
        let tls = match (options.tls_cert.or(file.tls_cert), options.tls_key.or(file.tls_key)) {
            (Some(cert), Some(key)) => Some(TlsFiles { cert, key }),
            (None, None) => None,
            (Some(_), None) => return Err(ConfigError::TlsHalf { missing: "the key (--tls-key, tls_key)" }),
            (None, Some(_)) => return Err(ConfigError::TlsHalf { missing: "the certificate (--tls-cert, tls_cert)" }),
        };
        let public_url = options.public_url.or(file.public_url);
        let oidc_audience = file.oidc_audience.clone().unwrap_or_else(|| default_audience(public_url.as_deref()));
        Ok(Self {
            store: options.store.or(file.store).unwrap_or_else(|| DEFAULT_STORE.into()),
            addr: options.addr.or(file.addr).unwrap_or(DEFAULT_ADDR),
            token_file: options.token_file.or(file.token_file),
            max_upload_bytes: options.max_upload_bytes.or(file.max_upload_bytes).unwrap_or(DEFAULT_MAX_UPLOAD),
            private: options.private.or(file.private).unwrap_or(false),
            public_url,
            allowed_hosts: options.allowed_hosts.or(file.allowed_hosts).unwrap_or_default(),
            topology: options.topology.or(file.topology),
            docs: options.docs.or(file.docs),
            tls,
            tokens,
            trusted_publishers: file.trusted_publishers,
            oidc_audience,
            index,
            limits: file.limits.limits()?,
            // `quarry serve` reads `[layout]` itself (also from `./quarry.toml`) and sets it.
            layout: std::sync::Arc::new(quarry_layout::config::Layout::default()),
        })
    }
}

/// The public URL's host (`https://quarry.example.com:8443/` → `quarry.example.com`), else
/// [`crate::oidc::DEFAULT_AUDIENCE`].
fn default_audience(public_url: Option<&str>) -> String {
    let host = public_url
        .and_then(|u| u.split_once("://"))
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""))
        .map(|authority| authority.rsplit_once('@').map_or(authority, |(_, h)| h))
        .map(|authority| match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => authority.split(':').next().unwrap_or(""),
        })
        .filter(|h| !h.is_empty());
    host.map_or_else(|| crate::oidc::DEFAULT_AUDIENCE.to_owned(), str::to_owned)
}

/// Upload tokens as a client sends them: the token file's secrets (prefixes dropped: a client
/// only needs the token) plus `QUARRY_TOKEN`.
pub fn read_tokens(path: Option<&Path>) -> Result<Vec<String>, ConfigError> {
    let mut tokens: Vec<String> = read_token_file(path)?.iter().map(|t| t.secret().to_owned()).collect();
    tokens.extend(env_token()?);
    Ok(tokens)
}

/// The token file's tokens ([`Token::parse_line`]); a line whose prefix is no prefix (`TOKEN /`)
/// is an error naming the file and line, never an unscoped token.
pub fn read_token_file(path: Option<&Path>) -> Result<Vec<Token>, ConfigError> {
    let Some(path) = path else { return Ok(Vec::new()) };
    let mut tokens = Vec::new();
    for (i, line) in read_token_text(path)?.lines().enumerate() {
        match Token::parse_line(line) {
            Ok(Some(token)) => tokens.push(token),
            Ok(None) => {}
            Err(error) => return Err(ConfigError::TokenLine { path: path.to_owned(), line: i + 1, error }),
        }
    }
    Ok(tokens)
}

fn read_token_text(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|error| ConfigError::TokenFile { path: path.to_owned(), error })
}

/// The token file's lines (`TOKEN [PREFIX …]`), without blank and comment lines, each checked
/// as [`read_token_file`] does. A `#` starts a comment only at the start of a word, so
/// `abc#def` is a whole token ([`Token::parse_line`]).
pub fn read_token_lines(path: Option<&Path>) -> Result<Vec<String>, ConfigError> {
    let Some(p) = path else { return Ok(Vec::new()) };
    read_token_file(path)?;
    Ok(read_token_text(p)?
        .lines()
        .filter(|l| matches!(Token::parse_line(l), Ok(Some(_))))
        .map(|l| l.trim().to_owned())
        .collect())
}

/// `QUARRY_TOKEN`: one secret, unscoped (see [`parse_env_token`]).
pub fn env_token() -> Result<Option<String>, ConfigError> {
    match std::env::var(TOKEN_ENV) {
        Ok(value) => parse_env_token(&value),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::EnvTokenNotUnicode),
    }
}

/// The value of `QUARRY_TOKEN`: surrounding whitespace (a trailing newline from `$(cat file)`)
/// is dropped, an empty value is no token, and whitespace inside is refused: the variable holds
/// one secret, never `TOKEN PREFIX…` (scopes belong in the token file or `[[tokens]]`).
pub fn parse_env_token(value: &str) -> Result<Option<String>, ConfigError> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    if value.contains(char::is_whitespace) {
        return Err(ConfigError::EnvTokenWhitespace);
    }
    Ok(Some(value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented file is the real one: every key in docs/configuration.md parses.
    #[test]
    fn the_documented_configuration_parses() {
        let doc = include_str!("../../docs/configuration.md");
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
    fn syntax_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("quarry.toml");
        std::fs::write(&path, "stroe = \"x\"\n").unwrap();
        let err = ServeConfig::load(&path).unwrap_err();
        assert!(err.is_bad_input());
        let text = err.to_string();
        assert!(text.starts_with(&format!("{}: ", path.display())) && text.contains("stroe"), "{text}");
        let missing = ServeConfig::load(&dir.path().join("absent.toml")).unwrap_err();
        assert!(!missing.is_bad_input());
        assert!(missing.to_string().starts_with("reading "), "{missing}");
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
    fn tls_needs_both_files() {
        let half = ServeOptions { tls_cert: Some("c.pem".into()), ..Default::default() };
        let err = Settings::resolve(half).unwrap_err();
        assert!(err.is_bad_input());
        assert_eq!(err.to_string(), "TLS needs both a certificate and a key: the key (--tls-key, tls_key) is not set");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("quarry.toml");
        std::fs::write(&config, "tls_cert = \"file.pem\"\ntls_key = \"file.key\"\n").unwrap();
        let flag = ServeOptions { config: Some(config), tls_cert: Some("flag.pem".into()), ..Default::default() };
        let tls = Settings::resolve(flag).unwrap().tls.unwrap();
        assert_eq!(tls, TlsFiles { cert: "flag.pem".into(), key: "file.key".into() }, "the flag over the file");
    }

    #[test]
    fn token_entries_need_one_source() {
        let both = ServeConfig::parse("[[tokens]]\ntoken = \"a\"\ntoken_env = \"B\"\n").unwrap();
        assert_eq!(both.tokens().unwrap_err().to_string(), "[[tokens]] #1: set one of token, token_env");
        let unset = "[[tokens]]\ntoken = \"a\"\n[[tokens]]\ntoken_env = \"QUARRY_TEST_SURELY_UNSET_TOKEN\"\n";
        let err = ServeConfig::parse(unset).unwrap().tokens().unwrap_err();
        assert!(err.is_bad_input());
        assert_eq!(err.to_string(), "[[tokens]] #2: $QUARRY_TEST_SURELY_UNSET_TOKEN is not set");
        let scoped = ServeConfig::parse("[[tokens]]\ntoken = \"a\"\nprefixes = [\"1-linux\"]\n").unwrap();
        assert_eq!(scoped.tokens().unwrap(), [Token::new("a", vec!["1-linux/".into()]).unwrap()]);
        let whole = ServeConfig::parse("[[tokens]]\ntoken = \"a\"\nprefixes = [\"/\"]\n").unwrap();
        let err = whole.tokens().unwrap_err();
        assert!(err.is_bad_input());
        assert!(err.to_string().starts_with("[[tokens]] #1: prefix \"/\" names the whole store"), "{err}");
    }

    #[test]
    fn trusted_publishers_are_checked_naming_the_line() {
        let text = "store = \"s\"\n\n[[trusted_publisher]]\nissuer = \"https://token.actions.githubusercontent.com\"\nrepository = \"ROCm/TheRock\"\nworkflow = \"release.yml\"\nref = \"refs/heads/main\"\nenvironment = \"release\"\nprefix = \"{run_id}-\"\n";
        let config = ServeConfig::parse(text).unwrap();
        let rule = &config.trusted_publishers[0];
        assert_eq!(
            (rule.repository.as_str(), rule.workflow.as_deref(), rule.line),
            ("ROCm/TheRock", Some("release.yml"), 3)
        );
        for (bad, message) in [
            (
                "prefix = \"{run_id}-\"",
                "line 9: [[trusted_publisher]] #1: prefix \"{run_id}\" must end with '-' or '/' (else run 12's prefix would also cover run 123's)",
            ),
            (
                "workflow = \"release.yml\"",
                "line 6: [[trusted_publisher]] #1: workflow \".github/workflows/release.yml\" is not a workflow file name such as release.yml (no directory, ending in .yml or .yaml)",
            ),
            (
                "repository = \"ROCm/TheRock\"",
                "line 5: [[trusted_publisher]] #1: repository \"TheRock\" is not OWNER/NAME",
            ),
            (
                "issuer = \"https://token.actions.githubusercontent.com\"",
                "line 4: [[trusted_publisher]] #1: issuer \"http://token.actions.githubusercontent.com\" is neither https:// nor http:// to a loopback address",
            ),
        ] {
            let replacement = match bad.split_once(" = ").unwrap().0 {
                "prefix" => "prefix = \"{run_id}\"",
                "workflow" => "workflow = \".github/workflows/release.yml\"",
                "repository" => "repository = \"TheRock\"",
                _ => "issuer = \"http://token.actions.githubusercontent.com\"",
            };
            let err = ServeConfig::parse(&text.replace(bad, replacement)).unwrap_err();
            assert!(err.is_bad_input());
            assert_eq!(err.to_string(), message);
        }
        // A missing required key, an unknown one: toml's own errors, with their line.
        let err = ServeConfig::parse(&text.replace("prefix = \"{run_id}-\"\n", "")).unwrap_err().to_string();
        assert!(err.contains("prefix") && err.contains("line 3"), "{err}");
        let err = ServeConfig::parse(&text.replace("ref =", "branch =")).unwrap_err().to_string();
        assert!(err.contains("branch") && err.contains("line 7"), "{err}");
        // The audience: the file's, else the public URL's host, else "quarry".
        assert_eq!(default_audience(Some("https://user@quarry.example.com:8443/x")), "quarry.example.com");
        assert_eq!(default_audience(Some("http://[::1]:80/")), "::1");
        assert_eq!(default_audience(None), "quarry");
        assert!(ServeConfig::parse("oidc_audience = \" \"\n").is_err());
    }

    #[test]
    fn the_env_token_is_one_secret() {
        assert_eq!(parse_env_token("  s3cret\n").unwrap().as_deref(), Some("s3cret"));
        assert_eq!(parse_env_token("a#b").unwrap().as_deref(), Some("a#b"));
        assert_eq!(parse_env_token("#starts-with-hash").unwrap().as_deref(), Some("#starts-with-hash"));
        assert_eq!(parse_env_token(" \n").unwrap(), None);
        let err = parse_env_token("a b").unwrap_err();
        assert!(err.is_bad_input());
        assert!(err.to_string().starts_with("QUARRY_TOKEN holds whitespace"), "{err}");
    }

    #[test]
    fn token_files_keep_hashes_inside_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, "# admins\nabc#def\n\n  tok # comment\nci 1-linux/ #ci\n#old\n").unwrap();
        assert_eq!(read_token_lines(Some(&path)).unwrap(), ["abc#def", "tok # comment", "ci 1-linux/ #ci"]);
        let secrets: Vec<String> =
            read_token_file(Some(&path)).unwrap().iter().map(|t| t.secret().to_owned()).collect();
        assert_eq!(secrets, ["abc#def", "tok", "ci"]);
        std::fs::write(&path, "ok 1-linux/\n# next\nwide //\n").unwrap();
        let err = read_token_file(Some(&path)).unwrap_err();
        assert!(err.is_bad_input());
        assert!(
            err.to_string().ends_with(
                ":3: prefix \"//\" names the whole store: leave the prefixes out for a token that may write anywhere"
            ),
            "{err}"
        );
        assert!(read_token_lines(Some(&path)).is_err(), "a client reading the file refuses it too");
        let err = read_token_lines(Some(&dir.path().join("absent"))).unwrap_err().to_string();
        assert!(err.starts_with("cannot read token file "), "{err}");
    }
}
