//! TLS for `quarry serve --tls-cert PEM --tls-key PEM` (rustls with the aws-lc-rs provider,
//! TLS 1.2 and 1.3, HTTP/1.1 over it).
//!
//! Handshake. [`conn`](crate::conn) wraps each accepted socket before anything else: the
//! handshake shares the request head's timeout ([`Limits::header_timeout`](crate::Limits)), so
//! a client that connects and sends nothing holds its place no longer than one that sends no
//! head over plain HTTP, and a connection still in its handshake counts as idle when room is
//! made. A connection whose first byte is no TLS record (plain HTTP to the TLS port) is answered
//! `400` naming `https://` and closed, instead of left to a handshake error the client cannot
//! read.
//!
//! Reload ([`Tls`]). The certificate chain and key are read again when either file's
//! modification time or length changes, looked at during a handshake at most once every
//! [`CHECK_EVERY`], and at once on SIGHUP (Unix; Windows has no SIGHUP: file change only). A
//! pair that does not load (a file half-written, a key that does not match the certificate)
//! keeps the previous pair serving and is logged once; it is tried again when a file changes
//! once more. Connections already open keep the certificate they shook hands with.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often, at most, a handshake looks at the files' modification times.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The first byte of a TLS handshake record (`ContentType::Handshake`).
pub(crate) const HANDSHAKE_RECORD: u8 = 0x16;

/// The PEM files a TLS server reads: the certificate chain (the server's certificate first) and
/// its private key (PKCS#8, PKCS#1 or SEC1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why a certificate and key cannot be served; each names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate file cannot be read or holds no valid PEM.
    #[error("TLS certificate {}: {message}", path.display())]
    Cert { path: PathBuf, message: String },
    /// The certificate file holds no certificate.
    #[error("TLS certificate {}: no CERTIFICATE block in it", path.display())]
    NoCert { path: PathBuf },
    /// The key file cannot be read, holds no private key, or a key rustls cannot use.
    #[error("TLS key {}: {message}", path.display())]
    Key { path: PathBuf, message: String },
    /// The key is not the certificate's.
    #[error("TLS key {} does not match certificate {}: {message}", key.display(), cert.display())]
    Mismatch { cert: PathBuf, key: PathBuf, message: String },
    /// The protocol versions could not be set up with the provider.
    #[error("setting up TLS: {0}")]
    Setup(String),
}

/// A TLS server configuration whose certificate follows its files ([module docs](self)).
#[derive(Clone)]
pub struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    certs: Arc<Certs>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("files", &self.certs.files).finish_non_exhaustive()
    }
}

impl Tls {
    /// Load `files` (an error names the file at fault) and set up the server configuration.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let stamps = stamps(&files);
        let key = Arc::new(load_pair(&files, &provider)?);
        let certs = Arc::new(Certs {
            files,
            provider: provider.clone(),
            current: Mutex::new(Current { key, stamps, checked: Instant::now(), force: false }),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Setup(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(certs.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)), certs })
    }

    pub(crate) fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }

    /// Read the files again now (SIGHUP), whatever their modification times say.
    pub fn reload(&self) {
        self.certs.lock().force = true;
        self.certs.current();
    }

    /// The files served.
    pub fn files(&self) -> &TlsFiles {
        &self.certs.files
    }
}

/// Reload on SIGHUP until the server stops (Unix).
#[cfg(unix)]
pub(crate) async fn reload_on_hangup(tls: Tls) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(hangup) => hangup,
        Err(e) => {
            tracing::warn!(error = %e, "SIGHUP cannot be watched: the certificate reloads on file change only");
            return;
        }
    };
    while hangup.recv().await.is_some() {
        tracing::info!("SIGHUP: reading the TLS certificate and key again");
        let tls = tls.clone();
        let _ = tokio::task::spawn_blocking(move || tls.reload()).await;
    }
}

/// Windows has no SIGHUP: the certificate reloads when its files change ([module docs](self)).
#[cfg(not(unix))]
pub(crate) async fn reload_on_hangup(_tls: Tls) {}

/// A file's modification time and length, if it can be read.
type Stamp = Option<(SystemTime, u64)>;

fn stamps(files: &TlsFiles) -> [Stamp; 2] {
    let stamp = |path: &Path| std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len())));
    [stamp(&files.cert), stamp(&files.key)]
}

/// The certificate chain and key in `files`, checked to belong together.
fn load_pair(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey, TlsError> {
    let cert_error =
        |e: rustls::pki_types::pem::Error| TlsError::Cert { path: files.cert.clone(), message: e.to_string() };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(cert_error)?
        .collect::<Result<_, _>>()
        .map_err(cert_error)?;
    if chain.is_empty() {
        return Err(TlsError::NoCert { path: files.cert.clone() });
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| TlsError::Key {
        path: files.key.clone(),
        message: match e {
            rustls::pki_types::pem::Error::NoItemsFound => "no PRIVATE KEY block in it".into(),
            e => e.to_string(),
        },
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => {
            TlsError::Mismatch { cert: files.cert.clone(), key: files.key.clone(), message: e.to_string() }
        }
        e => TlsError::Key { path: files.key.clone(), message: e.to_string() },
    })
}

/// The certificate served, and when its files were last looked at.
#[derive(Debug)]
struct Certs {
    files: TlsFiles,
    provider: Arc<CryptoProvider>,
    current: Mutex<Current>,
}

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    /// The files as last read (or tried).
    stamps: [Stamp; 2],
    checked: Instant,
    /// Read the files at the next look, changed or not.
    force: bool,
}

impl Certs {
    fn lock(&self) -> std::sync::MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The certificate to serve, read again first if its files changed ([module docs](self)).
    fn current(&self) -> Arc<CertifiedKey> {
        let mut current = self.lock();
        if current.force || current.checked.elapsed() >= CHECK_EVERY {
            current.checked = Instant::now();
            let stamps = stamps(&self.files);
            if current.force || stamps != current.stamps {
                current.force = false;
                current.stamps = stamps;
                match load_pair(&self.files, &self.provider) {
                    Ok(key) => {
                        current.key = Arc::new(key);
                        tracing::info!(cert = %self.files.cert.display(), "TLS certificate reloaded");
                    }
                    Err(e) => tracing::warn!(error = %e, "TLS certificate not reloaded; the previous one is served"),
                }
            }
        }
        current.key.clone()
    }
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The answer to plain HTTP sent to the TLS port.
pub(crate) const PLAIN_HTTP_REFUSAL: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: 52\r\n\r\n\
this server speaks HTTPS only: use https:// instead\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_well_formed() {
        let text = std::str::from_utf8(PLAIN_HTTP_REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}", body.len())), "{text}");
    }

    #[test]
    fn bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let files = TlsFiles { cert: dir.path().join("cert.pem"), key: dir.path().join("key.pem") };
        let err = Tls::load(files.clone()).unwrap_err().to_string();
        assert!(err.starts_with("TLS certificate ") && err.contains("cert.pem"), "{err}");
        std::fs::write(&files.cert, "not pem\n").unwrap();
        let err = Tls::load(files.clone()).unwrap_err().to_string();
        assert!(err.contains("cert.pem: no CERTIFICATE block"), "{err}");
    }
}
