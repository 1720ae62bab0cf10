//! The client side of a Quarry server's upload: `PUT {root}/{file}` with a bearer token, the
//! body streamed and hashed on the way, server errors and lost connections retried.
//!
//! With [`ServerClient::skip_existing`] (twine's `--skip-existing`), a 409 for a file the server
//! holds (a `HEAD` of its URL answers 2xx) leaves it as stored ([`ServerOutcome::Kept`], with
//! the server's reason) instead of failing; a 409 for a file that is not there (a file/directory
//! collision) stays a refusal.
//!
//! [`mint_upload_token`]: trusted publishing from GitHub Actions, PyPI's protocol as uv speaks
//! it: the server's audience (`GET /_/oidc/audience`), an ID token for it from the job's
//! endpoint (`$ACTIONS_ID_TOKEN_REQUEST_URL&audience=…` with `$ACTIONS_ID_TOKEN_REQUEST_TOKEN`,
//! handed in as an [`IdTokenRequest`]), exchanged at `POST /_/oidc/mint-token` for a
//! short-lived upload token scoped by the server's rule. No token is ever logged.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use quarry_store::Sha256Hex;
use quarry_wire::UploadResponse;

use crate::Progress;

/// Tries per file: a server error (5xx) or a failed request is retried; each failed try is
/// followed by a pause of 0.5 s times its number.
pub const ATTEMPTS: u32 = 3;
/// Bytes read from the file at a time.
const CHUNK: usize = 256 * 1024;

/// Why parsing or joining a URL failed.
pub type UrlError = <reqwest::Url as std::str::FromStr>::Err;

/// The variable naming a file of CA certificates (PEM) the clients trust besides the system's,
/// as pip and uv do.
pub const SSL_CERT_FILE: &str = "SSL_CERT_FILE";

/// Why the certificates [`SSL_CERT_FILE`] names cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The file cannot be read.
    #[error("reading {} (${SSL_CERT_FILE})", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The file holds no valid PEM certificates.
    #[error("{} (${SSL_CERT_FILE}): {why}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// `builder` trusting the certificates in the file [`SSL_CERT_FILE`] names (when it is set and
/// not empty) as its roots, as OpenSSL, pip and uv read the variable: the file is the trust
/// store (a system bundle, or a private CA's). reqwest's platform verifier never reads the
/// variable; and merging a whole bundle into it fails under Wine's crypt32 (every client would
/// fail where `SSL_CERT_FILE` names the system bundle), so the file replaces it.
pub fn trusting_ssl_cert_file(builder: reqwest::ClientBuilder) -> Result<reqwest::ClientBuilder, TrustError> {
    let path = std::env::var_os(SSL_CERT_FILE).filter(|p| !p.is_empty()).map(PathBuf::from);
    trusting(builder, path.as_deref())
}

fn trusting(builder: reqwest::ClientBuilder, path: Option<&Path>) -> Result<reqwest::ClientBuilder, TrustError> {
    let Some(path) = path else { return Ok(builder) };
    let pem = std::fs::read(path).map_err(|source| TrustError::Read { path: path.to_owned(), source })?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| TrustError::Parse { path: path.to_owned(), why: e.to_string() })?;
    if certs.is_empty() {
        return Err(TrustError::Parse { path: path.to_owned(), why: "no CERTIFICATE block in it".into() });
    }
    Ok(builder.tls_certs_only(certs))
}

/// Why uploading one file to a server failed; each names the file or what the server said.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The HTTP client could not be built.
    #[error("building the HTTP client")]
    Client(#[source] reqwest::Error),
    /// The CA certificates of [`SSL_CERT_FILE`] cannot be trusted.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// The file's name cannot be a URL segment.
    #[error("{} has no UTF-8 file name", .0.display())]
    FileName(PathBuf),
    /// The file's URL below the server root.
    #[error("the URL of {name}")]
    Url {
        /// The file's name.
        name: String,
        /// Why the URL does not parse.
        source: UrlError,
    },
    /// The file cannot be read.
    #[error("opening {}", .path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The request failed on the way (connection refused or reset, timeout).
    #[error("sending {name}")]
    Send {
        /// The file's name.
        name: String,
        /// What the client said.
        source: reqwest::Error,
    },
    /// The server failed (5xx): its status and answer.
    #[error("{status}: {body}")]
    Server {
        /// The status.
        status: reqwest::StatusCode,
        /// The answer's text, trimmed.
        body: String,
    },
    /// The server refused the file (4xx): the URL, status and the server's reason.
    #[error("{url} refused: {status} {body}")]
    Refused {
        /// The file's URL.
        url: reqwest::Url,
        /// The status.
        status: reqwest::StatusCode,
        /// The answer's text, trimmed.
        body: String,
    },
    /// A successful answer that could not be read.
    #[error("reading the server's answer")]
    ReadAnswer(#[source] reqwest::Error),
    /// A successful answer that is not an [`UploadResponse`].
    #[error("parsing the server's answer")]
    ParseAnswer(#[source] serde_json::Error),
    /// The server stored other bytes than were sent.
    #[error("the server stored sha256 {stored} but we sent {sent}")]
    Digest {
        /// The digest in the server's answer.
        stored: String,
        /// The digest of the bytes sent.
        sent: String,
    },
}

/// Uploads files to one server root with one token.
#[derive(Debug, Clone)]
pub struct ServerClient {
    client: reqwest::Client,
    base: reqwest::Url,
    token: String,
    skip_existing: bool,
}

/// What uploading one file to a server came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerOutcome {
    /// Stored now, or the same bytes were there: the server's answer.
    Stored(UploadResponse),
    /// Its name exists with other bytes and it was left as stored
    /// ([`ServerClient::skip_existing`]): its URL and the server's reason.
    Kept {
        /// The file's URL.
        url: String,
        /// What the server said (its 409 answer).
        reason: String,
    },
}

impl ServerClient {
    /// A client for the root `base` (ending in `/`, see [`crate::server_base`]) sending `token`.
    pub fn new(base: reqwest::Url, token: String) -> Result<Self, HttpError> {
        let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(30));
        let client = trusting_ssl_cert_file(builder)?.build().map_err(HttpError::Client)?;
        Ok(Self { client, base, token, skip_existing: false })
    }

    /// Leave files whose names exist on the server with other bytes as stored (reported as
    /// [`ServerOutcome::Kept`]) instead of failing them.
    #[must_use]
    pub fn skip_existing(mut self, skip: bool) -> Self {
        self.skip_existing = skip;
        self
    }

    /// The server root files are uploaded to.
    pub fn base(&self) -> &reqwest::Url {
        &self.base
    }

    /// Upload `files` (each a path and its path below the root, as [`crate::collect`] lists
    /// them) with at most `jobs` in flight; the results in the order of `files`.
    pub async fn upload_all(
        &self,
        files: &[(PathBuf, String)],
        jobs: usize,
        progress: &dyn Progress,
    ) -> Vec<Result<ServerOutcome, HttpError>> {
        futures_util::stream::iter(files)
            .map(|(path, rel)| self.upload_or_keep(path, rel, progress))
            .buffered(jobs.max(1))
            .collect()
            .await
    }

    /// [`upload_as`](Self::upload_as), a 409 for a file the server holds being kept with
    /// [`skip_existing`](Self::skip_existing).
    async fn upload_or_keep(
        &self,
        path: &Path,
        rel: &str,
        progress: &dyn Progress,
    ) -> Result<ServerOutcome, HttpError> {
        match self.upload_as(path, rel, progress).await {
            Err(HttpError::Refused { url, status, body })
                if self.skip_existing && status == reqwest::StatusCode::CONFLICT && self.holds(&url).await =>
            {
                let reason = body.strip_prefix("error: ").unwrap_or(&body).to_owned();
                Ok(ServerOutcome::Kept { url: url.to_string(), reason })
            }
            other => other.map(ServerOutcome::Stored),
        }
    }

    /// Whether the server holds a file at `url` (a `HEAD` answers 2xx).
    async fn holds(&self, url: &reqwest::Url) -> bool {
        let head = self.client.head(url.clone()).bearer_auth(&self.token).send().await;
        head.is_ok_and(|r| r.status().is_success())
    }

    /// Upload one file under its name; see [`upload_as`](Self::upload_as).
    pub async fn upload(&self, path: &Path, progress: &dyn Progress) -> Result<UploadResponse, HttpError> {
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| HttpError::FileName(path.to_owned()))?;
        self.upload_as(path, name, progress).await
    }

    /// The URL a file at `rel` (`/`-separated, below the root) is PUT to: each segment
    /// percent-encoded.
    pub fn url_of(&self, rel: &str) -> Result<reqwest::Url, HttpError> {
        let encoded: Vec<String> = rel.split('/').map(quarry_store::url::encode_segment).collect();
        self.base.join(&encoded.join("/")).map_err(|source| HttpError::Url { name: rel.to_owned(), source })
    }

    /// Upload one file at `rel` below the root, trying [`ATTEMPTS`] times while the server
    /// fails or the request does not get through; a refusal (4xx) is final.
    pub async fn upload_as(
        &self,
        path: &Path,
        rel: &str,
        progress: &dyn Progress,
    ) -> Result<UploadResponse, HttpError> {
        let url = self.url_of(rel)?;
        let mut attempt = 1;
        loop {
            let result = self.attempt(path, rel, &url, progress).await;
            if !matches!(result, Err(HttpError::Server { .. } | HttpError::Send { .. })) {
                return result;
            }
            tracing::warn!(attempt, file = rel, "upload failed; retrying");
            tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
            if attempt == ATTEMPTS {
                return result;
            }
            attempt += 1;
        }
    }

    /// One PUT of the file, hashed as it streams; the answer checked against the hash.
    async fn attempt(
        &self,
        path: &Path,
        name: &str,
        url: &reqwest::Url,
        progress: &dyn Progress,
    ) -> Result<UploadResponse, HttpError> {
        let open = |source| HttpError::Open { path: path.to_owned(), source };
        let file = tokio::fs::File::open(path).await.map_err(open)?;
        let size = file.metadata().await.map_err(open)?.len();
        let bar = progress.start(name, size);
        let hasher = Arc::new(Mutex::new(Sha256Hex::default()));
        let (tick, hashing) = (bar.clone(), hasher.clone());
        let stream = tokio_util::io::ReaderStream::with_capacity(file, CHUNK).inspect_ok(move |chunk| {
            tick.advance(chunk.len() as u64);
            hashing.lock().unwrap_or_else(PoisonError::into_inner).update(chunk);
        });
        let response = self
            .client
            .put(url.clone())
            .bearer_auth(&self.token)
            .header(reqwest::header::CONTENT_LENGTH, size)
            .body(reqwest::Body::wrap_stream(stream))
            .send()
            .await;
        bar.finish();
        let response = response.map_err(|source| HttpError::Send { name: name.to_owned(), source })?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default().trim().to_owned();
            return Err(if status.is_server_error() {
                HttpError::Server { status, body }
            } else {
                HttpError::Refused { url: url.clone(), status, body }
            });
        }
        let body = response.bytes().await.map_err(HttpError::ReadAnswer)?;
        let answer: UploadResponse = serde_json::from_slice(&body).map_err(HttpError::ParseAnswer)?;
        let sent = std::mem::take(&mut *hasher.lock().unwrap_or_else(PoisonError::into_inner)).finish();
        if answer.sha256 != sent {
            return Err(HttpError::Digest { stored: answer.sha256, sent });
        }
        Ok(answer)
    }
}

/// A GitHub Actions job's ID-token endpoint (`permissions: id-token: write` sets both).
#[derive(Clone)]
pub struct IdTokenRequest {
    /// `$ACTIONS_ID_TOKEN_REQUEST_URL`.
    pub url: String,
    /// `$ACTIONS_ID_TOKEN_REQUEST_TOKEN`.
    pub token: String,
}

impl std::fmt::Debug for IdTokenRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdTokenRequest").field("url", &self.url).field("token", &"…").finish()
    }
}

/// Why no upload token was minted; each names the step and URL (never a token).
#[derive(Debug, thiserror::Error)]
pub enum MintError {
    /// The HTTP client could not be built.
    #[error("building the HTTP client")]
    Client(#[source] reqwest::Error),
    /// The CA certificates of [`SSL_CERT_FILE`] cannot be trusted.
    #[error(transparent)]
    Trust(#[from] TrustError),
    /// A URL of the exchange does not parse.
    #[error("the URL of {what}")]
    Url {
        /// Which URL.
        what: &'static str,
        /// Why.
        source: UrlError,
    },
    /// A request failed on the way.
    #[error("{what} ({url})")]
    Send {
        /// Which step.
        what: &'static str,
        /// Its URL (without query).
        url: String,
        /// What the client said.
        source: reqwest::Error,
    },
    /// A step was refused or failed: its status and the answer (the mint's errors spelled out).
    #[error("{what} ({url}) answered {status}: {body}")]
    Refused {
        /// Which step.
        what: &'static str,
        /// Its URL (without query).
        url: String,
        /// The status.
        status: reqwest::StatusCode,
        /// The answer, or its errors' codes and descriptions.
        body: String,
    },
    /// A successful answer without what it must hold.
    #[error("{what} ({url}) answered without {field}")]
    Answer {
        /// Which step.
        what: &'static str,
        /// Its URL (without query).
        url: String,
        /// The field missing.
        field: &'static str,
    },
}

/// `url` without its query (the ID-token URL's carries no secret, but stays out of messages).
fn shown_url(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.to_string()
}

/// One JSON exchange of [`mint_upload_token`]: the string `field` of a successful answer.
async fn exchange(
    request: reqwest::RequestBuilder,
    what: &'static str,
    url: &reqwest::Url,
    field: &'static str,
) -> Result<String, MintError> {
    let shown = shown_url(url);
    let response = request.send().await.map_err(|source| MintError::Send { what, url: shown.clone(), source })?;
    let status = response.status();
    let body = response.bytes().await.map_err(|source| MintError::Send { what, url: shown.clone(), source })?;
    let json: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    if !status.is_success() {
        // warehouse's refusal: {"message", "errors": [{"code", "description"}]}.
        let errors = json.as_ref().and_then(|j| j["errors"].as_array()).map(|errors| {
            let each = errors
                .iter()
                .map(|e| format!("{}: {}", e["code"].as_str().unwrap_or("?"), e["description"].as_str().unwrap_or("")));
            each.collect::<Vec<_>>().join("; ")
        });
        let body = errors.unwrap_or_else(|| String::from_utf8_lossy(&body).trim().chars().take(2000).collect());
        return Err(MintError::Refused { what, url: shown, status, body });
    }
    json.as_ref().and_then(|j| j[field].as_str()).map(str::to_owned).ok_or(MintError::Answer {
        what,
        url: shown,
        field,
    })
}

/// An upload token for the server of `base` by trusted publishing (see the module
/// documentation), with the job's ID-token endpoint `request`.
pub async fn mint_upload_token(base: &reqwest::Url, request: &IdTokenRequest) -> Result<String, MintError> {
    let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(30)).timeout(Duration::from_secs(60));
    let client = trusting_ssl_cert_file(builder)?.build().map_err(MintError::Client)?;
    let join = |what, path| base.join(path).map_err(|source| MintError::Url { what, source });
    let audience_url = join("the audience", "/_/oidc/audience")?;
    let audience = exchange(client.get(audience_url.clone()), "asking the audience", &audience_url, "audience").await?;
    let mut id_url = reqwest::Url::parse(&request.url)
        .map_err(|source| MintError::Url { what: "$ACTIONS_ID_TOKEN_REQUEST_URL", source })?;
    id_url.query_pairs_mut().append_pair("audience", &audience);
    let id_request =
        client.get(id_url.clone()).header(reqwest::header::AUTHORIZATION, format!("bearer {}", request.token));
    let id_token = exchange(id_request, "asking GitHub for an ID token", &id_url, "value").await?;
    let mint_url = join("the mint", "/_/oidc/mint-token")?;
    let mint = client
        .post(mint_url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(serde_json::json!({ "token": id_token }).to_string());
    exchange(mint, "minting an upload token", &mint_url, "token").await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_percent_encoded_as_before() {
        let encode = quarry_store::url::encode_segment;
        assert_eq!(encode("a-1.0+local_x~y.whl"), "a-1.0%2Blocal_x~y.whl");
        assert_eq!(encode("a b/é"), "a%20b%2F%C3%A9");
        let base = reqwest::Url::parse("http://h/1-linux/python/").unwrap();
        let client = ServerClient::new(base, String::new()).unwrap();
        assert_eq!(client.url_of("gfx94X/a+b.whl").unwrap().as_str(), "http://h/1-linux/python/gfx94X/a%2Bb.whl");
    }

    #[test]
    fn ssl_cert_file_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.pem");
        let err = trusting(reqwest::Client::builder(), Some(&missing)).unwrap_err().to_string();
        assert!(err.starts_with("reading ") && err.contains("absent.pem") && err.contains("$SSL_CERT_FILE"), "{err}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no certificates here\n").unwrap();
        let err = trusting(reqwest::Client::builder(), Some(&empty)).unwrap_err().to_string();
        assert!(err.contains("empty.pem ($SSL_CERT_FILE): no CERTIFICATE block"), "{err}");
        assert!(trusting(reqwest::Client::builder(), None).is_ok(), "unset: the system's roots alone");
    }
}
