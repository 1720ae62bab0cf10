//! Starting `quarry serve` from its [`Settings`] ([`Settings::open`]): open the store, make sure
//! the token file exists ([`ensure_token_file`]), gather every token, read the topology, catch
//! up with files that landed while no server ran ([`catch_up`]), and fit the connection cap
//! under the process's open-file limit ([`fit_connections`], [`open_file_limit`]).

use std::io::Write as _;
use std::path::Path;

use quarry_index::{Indexer, Refreshed, discover_scopes};
use quarry_store::error_chain;

use crate::config::{ConfigError, Settings, env_token, read, read_token_file};
use crate::{AppState, Token};

/// Open files kept free of connections under the process's limit: the listener, the store's
/// files, the S3 client's connections, logs.
pub const FD_HEADROOM: u64 = 64;

impl Settings {
    /// Everything the server needs before it accepts: the store opened, the token file
    /// created if missing, the tokens gathered (the file's `[[tokens]]`, the token file's,
    /// `QUARRY_TOKEN`), the topology read, the store caught up ([`catch_up`]) and
    /// `max_connections` fitted under the open-file limit (with a warning when lowered).
    pub async fn open(self) -> Result<AppState, ConfigError> {
        // A guide directory that is not there is a typo: say so now, not with 404s later.
        if let Some(dir) = self.docs.as_ref().filter(|d| !d.is_dir()) {
            return Err(ConfigError::Docs { path: dir.clone() });
        }
        // A certificate that does not load is said before the store is opened.
        let tls = self.tls.map(crate::tls::Tls::load).transpose()?;
        let store = quarry_store::open(&self.store)
            .await
            .map_err(|source| ConfigError::Store { url: self.store.clone(), source })?;
        if let Some(path) = &self.token_file {
            ensure_token_file(path)?;
        }
        let mut tokens = self.tokens;
        tokens.extend(read_token_file(self.token_file.as_deref())?);
        // QUARRY_TOKEN is one secret that may write anywhere.
        tokens.extend(env_token()?.map(Token::unscoped));
        if tokens.is_empty() && self.trusted_publishers.is_empty() {
            tracing::warn!("no upload tokens or trusted publishers configured: the server is read-only");
        }
        let trusted = match self.trusted_publishers.is_empty() {
            true => None,
            false => {
                let rules = self.trusted_publishers.len();
                tracing::info!(rules, audience = %self.oidc_audience, "trusted publishing enabled");
                let tp = crate::oidc::TrustedPublishing::new(&self.oidc_audience, self.trusted_publishers)
                    .map_err(ConfigError::OidcClient)?;
                Some(tp)
            }
        };
        if self.private && tokens.is_empty() {
            return Err(ConfigError::PrivateWithoutTokens);
        }
        let topology = match &self.topology {
            Some(path) => Some(quarry_topology::Topology::parse(&read(path)?)?),
            None => None,
        };
        catch_up(&Indexer::new(store.clone(), self.layout.clone()).with_config(self.index.clone())).await?;
        let mut limits = self.limits;
        let fitted = fit_connections(limits.max_connections, open_file_limit());
        if fitted < limits.max_connections {
            tracing::warn!(
                configured = limits.max_connections,
                max_connections = fitted,
                "max_connections lowered to stay under the open-file limit (ulimit -n)"
            );
            limits.max_connections = fitted;
        }
        Ok(AppState::new(store, Vec::new())
            .with_layout(self.layout)
            .with_tokens(tokens)
            .with_private_reads(self.private)
            .with_public_url(self.public_url)
            .with_allowed_hosts(self.allowed_hosts)
            .with_topology(topology)
            .with_docs(self.docs)
            .with_max_upload(self.max_upload_bytes)
            .with_limits(limits)
            .with_tls(tls)
            .with_trusted_publishing(trusted)
            .with_index_config(self.index))
    }
}

/// Refresh every root and run listing of the store: files may have landed while no server
/// was running. One that fails is served as it is (an upload into a root retries, a listing
/// follows the run's next change); only failing to list the store is an error.
pub async fn catch_up(indexer: &Indexer) -> Result<(), ConfigError> {
    let store = indexer.store().as_ref();
    let scopes = discover_scopes(store, "", indexer.layout()).await.map_err(ConfigError::Discover)?;
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
                let error = error_chain(&e);
                tracing::warn!(%scope, error, "catching up failed; serving it as it is");
            }
        }
    }
    Ok(())
}

/// Create the token file at `path` with one random token (48 hex digits, mode 0600 on Unix)
/// unless it exists.
pub fn ensure_token_file(path: &Path) -> Result<(), ConfigError> {
    if path.exists() {
        return Ok(());
    }
    let mut random = [0u8; 24];
    getrandom::fill(&mut random).map_err(ConfigError::Random)?;
    let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    // Readable by its owner only. On Windows a new file takes the ACL its directory passes on
    // (a user's profile is private by default); there is no mode to set.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file =
        options.open(path).map_err(|source| ConfigError::CreateTokenFile { path: path.to_owned(), source })?;
    writeln!(file, "{token}").map_err(ConfigError::WriteTokenFile)?;
    tracing::info!(path = %path.display(), "wrote a new upload token");
    Ok(())
}

/// The soft limit on open files, read from Linux's `/proc/self/limits` (`None` if unreadable).
#[cfg(target_os = "linux")]
pub fn open_file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The soft limit on open files: not known here, so `max_connections` stays as configured.
/// Windows has no per-process open-file limit of the `ulimit -n` kind (sockets are handles,
/// bounded by memory); other systems have no `/proc/self/limits`, and `getrlimit` would need
/// `unsafe`, which the workspace forbids.
#[cfg(not(target_os = "linux"))]
pub fn open_file_limit() -> Option<u64> {
    None
}

/// `max_connections` lowered to fit under the open-file limit `fds` (if known), so accepting
/// never fails for lack of descriptors while idle connections hold them all.
pub fn fit_connections(max_connections: usize, fds: Option<u64>) -> usize {
    match fds {
        Some(fds) => {
            let room = usize::try_from(fds.saturating_sub(FD_HEADROOM)).unwrap_or(usize::MAX).max(1);
            max_connections.min(room)
        }
        None => max_connections,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_missing_token_file_is_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        ensure_token_file(&path).unwrap();
        let first = std::fs::read_to_string(&path).unwrap();
        assert_eq!(first.trim().len(), 48);
        assert!(first.trim().bytes().all(|b| b.is_ascii_hexdigit()));
        ensure_token_file(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), first, "an existing file is kept");
    }

    #[tokio::test]
    async fn a_private_server_needs_a_token() {
        let options =
            crate::ServeOptions { store: Some("memory://".into()), private: Some(true), ..Default::default() };
        let settings = Settings::resolve(options).unwrap();
        if env_token().ok().flatten().is_none() {
            let err = settings.open().await.unwrap_err();
            assert!(err.is_bad_input());
            assert_eq!(err.to_string(), "a private server needs at least one token to read with");
        }
    }

    #[test]
    fn chains_read_like_anyhow() {
        let inner = std::io::Error::other("disk on fire");
        let outer = ConfigError::Read { path: "x.toml".into(), source: inner };
        assert_eq!(error_chain(&outer), "reading x.toml: disk on fire");
    }
}
