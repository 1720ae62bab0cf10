//! The upload API of PyPI's legacy endpoint, which `twine upload --repository-url` and
//! `uv publish --publish-url` speak: `POST` a `multipart/form-data` form with
//! `:action=file_upload`, metadata fields and the file as the `content` part, to a pip root's
//! own URL (`/123-linux/python/`). Credentials are the upload token as HTTP Basic password
//! (user `__token__`) or a Bearer token, scoped as for a `PUT`.
//!
//! The file takes the `PUT` path (`upload.rs`): the same key checks, the same store, validation
//! and reindex, the same immutability. The form is parsed as a stream: the `content` part goes
//! straight into the store; the other fields, part headers and boundaries are bounded
//! ([`FORM_BYTES`], [`MAX_PARTS`]). A refusal carries its reason in the status line's reason
//! phrase (twine prints it) and in the body (uv prints it); a file that exists with other
//! content answers 400 as PyPI does, since both clients take 409 for "identical, skip".

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt as _};
use md5::Digest as _;
use multer::{Constraints, Field, Multipart, SizeLimit};
use quarry_index::{RepoKind, RepoRoot};
use quarry_packaging::{DistFilename, PackageName, Version};
use quarry_store::{ByteStream, Key};

use crate::auth::{Token, WriteAuth};
use crate::upload::{Stored, check_length, kind_of, record, response, store, target};
use crate::{AppError, AppState, decode_path};

/// Most bytes of the form besides the file: metadata fields (a long description included),
/// part headers and boundaries.
pub const FORM_BYTES: u64 = 32 * 1024 * 1024;
/// Most parts in one form (each classifier and requirement is one).
pub const MAX_PARTS: usize = 4096;
/// Longest value of a field the server reads (name, version, digests…).
const MAX_VALUE: usize = 1024;
/// How much of a refused request's body is read and dropped before answering, so that a client
/// still sending reads the answer rather than a reset connection.
const DRAIN_BYTES: u64 = 16 * 1024 * 1024;
/// How long a refused request's body is read at most (a client dripping it slowly would
/// otherwise hold its connection until [`DRAIN_BYTES`]; the body's minimum rate, `conn.rs`,
/// cuts one slower still).
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest reason phrase sent.
const MAX_REASON: usize = 400;
/// Longest message in a refusal's body.
const MAX_MESSAGE: usize = 4096;
/// The part carrying the file.
const CONTENT: &str = "content";

/// `POST /<pip root>/`: one file of a legacy upload form.
pub(crate) async fn post_path(State(state): State<AppState>, uri: Uri, headers: HeaderMap, body: Body) -> Response {
    let mut kind = "other";
    let result = post(&state, &uri, &headers, body, &mut kind).await;
    record(&state, kind, result.as_ref().map(|(_, _, stored)| stored));
    let audited = result
        .as_ref()
        .map(|(key, _, (status, _, sha))| (key, sha.as_str(), *status == crate::wire::UploadStatus::Exists));
    crate::audit::record_upload(&state, &headers, crate::auth::WriteAuth::BearerOrBasic, uri.path(), audited).await;
    match result {
        Ok((key, root, (status, size, sha256))) => {
            let signed = state.coalescer.indexer().config().signer.is_some();
            (StatusCode::OK, Json(response(&key, &root, status, size, sha256, signed))).into_response()
        }
        Err(e) => refusal(e),
    }
}

/// An error as these clients read it: the reason in the status line and the body; 400 for a
/// conflict; a Basic challenge on 401.
fn refusal(error: AppError) -> Response {
    let message = match &error {
        AppError::Internal(_) => "internal server error (details are in the server log)".to_owned(),
        other => crate::truncated(&other.to_string(), MAX_MESSAGE).into_owned(),
    };
    let reason = reason_phrase(&message);
    let conflict = matches!(error, AppError::Conflict(_));
    let unauthorized = matches!(error, AppError::Unauthorized(_));
    // Headers as for any refusal (no-store; an internal error logged in full), the bare message
    // as the body: uv shows it after "Server says:".
    let mut response = error.into_response();
    *response.body_mut() = Body::from(format!("{message}\n"));
    response.headers_mut().remove(header::CONTENT_LENGTH);
    if conflict {
        *response.status_mut() = StatusCode::BAD_REQUEST;
    }
    if unauthorized {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"quarry\""));
    }
    if let Ok(phrase) = hyper::ext::ReasonPhrase::try_from(reason) {
        response.extensions_mut().insert(phrase);
    }
    response
}

/// `message` as a reason phrase: printable ASCII on one line, cut to [`MAX_REASON`] bytes.
fn reason_phrase(message: &str) -> String {
    let mut phrase: String =
        message.chars().map(|c| if c == ' ' || c.is_ascii_graphic() { c } else { '?' }).take(MAX_REASON).collect();
    if message.chars().count() > MAX_REASON {
        phrase.push_str("...");
    }
    phrase
}

/// The error a failed read of the form stands for: what the metering or the content stream
/// recorded, else multer's own.
type Failure = Arc<Mutex<Option<AppError>>>;

fn fail(failure: &Failure, error: AppError) -> std::io::Error {
    let message = error.to_string();
    failure.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(error);
    std::io::Error::other(message)
}

fn recorded(failure: &Failure) -> Option<AppError> {
    failure.lock().unwrap_or_else(PoisonError::into_inner).take()
}

fn form_error(failure: &Failure, error: multer::Error) -> AppError {
    if let Some(recorded) = recorded(failure) {
        return recorded;
    }
    match error {
        multer::Error::FieldSizeExceeded { limit, field_name } => AppError::TooLarge(format!(
            "form field {} exceeds {limit} bytes",
            field_name.as_deref().unwrap_or("(unnamed)")
        )),
        multer::Error::StreamSizeExceeded { limit } => {
            AppError::TooLarge(format!("the upload form exceeds {limit} bytes"))
        }
        multer::Error::StreamReadFailed(e) => AppError::BadRequest(format!("the request body could not be read: {e}")),
        other => AppError::BadRequest(format!("malformed multipart/form-data upload form: {other}")),
    }
}

async fn post(
    state: &AppState,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
    kind: &mut &'static str,
) -> Result<(Key, RepoRoot, Stored), AppError> {
    let (root, token, boundary) = match admit(state, uri, headers) {
        Ok(admitted) => admitted,
        Err(e) => {
            if !matches!(e, AppError::TooLarge(_)) {
                drain(body.into_data_stream().map(|c| c.map_err(std::io::Error::other))).await;
            }
            return Err(e);
        }
    };
    let failure = Failure::default();
    let file_bytes = Arc::new(AtomicU64::new(0));
    let metered = Metered::new(body, file_bytes.clone(), failure.clone());
    let limits = SizeLimit::new()
        .whole_stream(state.max_upload.saturating_add(FORM_BYTES))
        .per_field(FORM_BYTES)
        .for_field(CONTENT, state.max_upload);
    let mut multipart = Multipart::with_constraints(metered, boundary, Constraints::new().size_limit(limits));
    let (form, field, parts) = match read_form(&mut multipart, &failure).await {
        Ok(read) => read,
        Err(e) => {
            drain_form(multipart, None).await;
            return Err(e);
        }
    };
    let (key, dist) = match accept_file(state.layout(), &root, &token, &form, &field) {
        Ok(accepted) => accepted,
        Err(e) => {
            drain_form(multipart, Some(field)).await;
            return Err(e);
        }
    };
    *kind = kind_of(key.as_str());
    let content = Content {
        multipart,
        field: Some(field),
        md5: form.md5.clone().filter(|_| form.sha256.is_none()).map(|expected| (md5::Md5::new(), expected)),
        file_bytes,
        failure: failure.clone(),
        parts,
        name: dist.as_str().to_owned(),
    };
    let stored = store(state, &key, &root, form.sha256.clone(), content.into_stream())
        .await
        .map_err(|e| recorded(&failure).unwrap_or(e))?;
    Ok((key, root, stored))
}

/// What is known before the body is read: the pip root the URL names, the token, the form's
/// boundary.
fn admit(state: &AppState, uri: &Uri, headers: &HeaderMap) -> Result<(RepoRoot, Token, String), AppError> {
    let token = state.access.writer(headers, WriteAuth::BearerOrBasic)?;
    let path = decode_path(uri.path())?;
    let root = RepoRoot::new(&path, state.layout()).ok().filter(|r| r.kind() == RepoKind::Pip).ok_or_else(|| {
        AppError::BadRequest(format!(
            "/{path} is not a pip root: upload forms (twine, uv publish) are posted to a pip root's URL, such as \
             /RUN-linux/python/"
        ))
    })?;
    check_length(state, headers, FORM_BYTES)?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let boundary = multer::parse_boundary(content_type).map_err(|_| {
        AppError::BadRequest(
            "uploads by POST are multipart/form-data forms with :action=file_upload and the file as 'content' \
             (as twine and uv publish send)"
                .into(),
        )
    })?;
    Ok((root, token, boundary))
}

/// The file's key once its name, its place and the form pass every check a `PUT` makes, the
/// token's scope included.
fn accept_file(
    layout: &quarry_layout::config::Layout,
    root: &RepoRoot,
    token: &Token,
    form: &Form,
    field: &Field<'static>,
) -> Result<(Key, DistFilename), AppError> {
    let filename = field
        .file_name()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| AppError::BadRequest("the form's content part has no filename".into()))?;
    let dist: DistFilename = filename.parse().map_err(|e| AppError::BadRequest(format!("{e}")))?;
    let path = format!("{root}{filename}");
    token.authorize(&path)?;
    let (key, key_root) = target(&path, layout)?;
    if key_root != *root {
        return Err(AppError::BadRequest(format!("{filename} does not belong in {root}")));
    }
    form.check(&dist)?;
    Ok((key, dist))
}

/// The fields of an upload form the server reads; the others (description, classifiers…) are
/// skipped.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Form {
    action: Option<String>,
    protocol_version: Option<String>,
    name: Option<String>,
    version: Option<String>,
    filetype: Option<String>,
    sha256: Option<String>,
    md5: Option<String>,
}

impl Form {
    fn slot(&mut self, field: &str) -> Option<&mut Option<String>> {
        Some(match field {
            ":action" => &mut self.action,
            "protocol_version" => &mut self.protocol_version,
            "name" => &mut self.name,
            "version" => &mut self.version,
            "filetype" => &mut self.filetype,
            "sha256_digest" => &mut self.sha256,
            "md5_digest" => &mut self.md5,
            _ => return None,
        })
    }

    /// Whether the server reads `field`.
    pub(crate) fn reads(field: &str) -> bool {
        Self::default().slot(field).is_some()
    }

    /// Take `value` for `field` (ignored unless [`Form::reads`] it); a field given twice is refused.
    pub(crate) fn set(&mut self, field: &str, value: String) -> Result<(), AppError> {
        let Some(slot) = self.slot(field) else { return Ok(()) };
        if slot.is_some() {
            return Err(AppError::BadRequest(format!("form field {field} is given twice")));
        }
        *slot = Some(value.trim().to_owned());
        Ok(())
    }

    /// The form is an upload of `file`: `:action=file_upload`, protocol 1, a digest, and the
    /// name, version and file type (when given) those of the file.
    pub(crate) fn check(&self, file: &DistFilename) -> Result<(), AppError> {
        let bad = |m: String| Err(AppError::BadRequest(m));
        match self.action.as_deref() {
            Some("file_upload") => {}
            None => return bad("the form has no :action field; uploads send :action=file_upload".into()),
            Some(other) => {
                return bad(format!(":action {other:?} is not supported; this server accepts file_upload only"));
            }
        }
        if let Some(v) = self.protocol_version.as_deref().filter(|v| *v != "1") {
            return bad(format!("protocol_version {v:?} is not supported; this server speaks protocol_version 1"));
        }
        match (&self.sha256, &self.md5) {
            (None, None) => {
                return bad("the form has no sha256_digest (nor md5_digest): send the file's SHA-256".into());
            }
            (Some(d), _) if !is_hex(d, 64) => return bad(format!("sha256_digest {d:?} is not 64 hex digits")),
            (_, Some(d)) if !is_hex(d, 32) => return bad(format!("md5_digest {d:?} is not 32 hex digits")),
            _ => {}
        }
        if let Some(name) = &self.name {
            let normalized = PackageName::new(name).map_err(|e| AppError::BadRequest(format!("name {name:?}: {e}")))?;
            if normalized != *file.name() {
                return bad(format!("name {name:?} does not match the file {}", file.as_str()));
            }
        }
        if let Some(version) = &self.version {
            let parsed: Version = version
                .parse()
                .map_err(|_| AppError::BadRequest(format!("version {version:?} is not a PEP 440 version")))?;
            if parsed != *file.version() {
                return bad(format!("version {version:?} does not match the file {}", file.as_str()));
            }
        }
        let expected = match file {
            DistFilename::Wheel(_) => "bdist_wheel",
            DistFilename::Sdist(_) => "sdist",
        };
        match self.filetype.as_deref() {
            Some(t) if t != expected => {
                bad(format!("filetype {t:?} does not match the file {} ({expected})", file.as_str()))
            }
            _ => Ok(()),
        }
    }
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Reads the form up to its `content` part: the fields it reads, that part, and how many parts
/// came before.
async fn read_form(
    multipart: &mut Multipart<'static>,
    failure: &Failure,
) -> Result<(Form, Field<'static>, usize), AppError> {
    let mut form = Form::default();
    let mut parts = 0;
    loop {
        let Some(mut field) = multipart.next_field().await.map_err(|e| form_error(failure, e))? else {
            return Err(AppError::BadRequest("the form has no content part (the file)".into()));
        };
        parts += 1;
        if parts > MAX_PARTS {
            return Err(AppError::BadRequest(format!("the form has more than {MAX_PARTS} parts")));
        }
        let name = field.name().unwrap_or_default().to_owned();
        if name == CONTENT {
            return Ok((form, field, parts));
        }
        let value = read_value(&mut field, Form::reads(&name), failure).await?;
        if let Some(value) = value {
            form.set(&name, value)?;
        }
    }
}

/// A field's value if `keep` (at most [`MAX_VALUE`] bytes of UTF-8), else skipped.
async fn read_value(field: &mut Field<'static>, keep: bool, failure: &Failure) -> Result<Option<String>, AppError> {
    let mut value = Vec::new();
    while let Some(chunk) = field.chunk().await.map_err(|e| form_error(failure, e))? {
        if keep {
            if value.len() + chunk.len() > MAX_VALUE {
                let name = field.name().unwrap_or_default();
                return Err(AppError::BadRequest(format!("form field {name} is longer than {MAX_VALUE} bytes")));
            }
            value.extend_from_slice(&chunk);
        }
    }
    if !keep {
        return Ok(None);
    }
    String::from_utf8(value)
        .map(Some)
        .map_err(|_| AppError::BadRequest(format!("form field {} is not UTF-8", field.name().unwrap_or_default())))
}

/// Reads and drops up to [`DRAIN_BYTES`] of what is left of a refused request, for at most
/// [`DRAIN_TIME`].
async fn drain(body: impl Stream<Item = std::io::Result<Bytes>> + Unpin) {
    drain_for(body, DRAIN_TIME).await;
}

/// [`drain`], for at most `time`.
async fn drain_for(mut body: impl Stream<Item = std::io::Result<Bytes>> + Unpin, time: std::time::Duration) {
    let read = async {
        let mut read = 0u64;
        while read < DRAIN_BYTES {
            match body.next().await {
                Some(Ok(chunk)) => read += chunk.len() as u64,
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(time, read).await;
}

/// [`drain`] for a form being parsed (from the part `field`, if any).
async fn drain_form(mut multipart: Multipart<'static>, mut field: Option<Field<'static>>) {
    let read = async {
        let mut read = 0u64;
        loop {
            // Each part is dropped before the next is asked for (multer's rule).
            if let Some(mut current) = field.take() {
                loop {
                    match current.chunk().await {
                        Ok(Some(chunk)) => read += chunk.len() as u64,
                        Ok(None) => break,
                        Err(_) => return,
                    }
                    if read >= DRAIN_BYTES {
                        return;
                    }
                }
            }
            match multipart.next_field().await {
                Ok(Some(next)) => field = Some(next),
                _ => return,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
}

/// The request body as the form parser reads it: one chunk per poll (the parser buffers all a
/// stream has ready, so a fast client could otherwise fill memory), and no more than
/// [`FORM_BYTES`] beyond the file's bytes held or read (part headers without an end,
/// boundaries never found).
struct Metered {
    body: axum::body::BodyDataStream,
    delivered: u64,
    file_bytes: Arc<AtomicU64>,
    failure: Failure,
    pause: bool,
}

impl Metered {
    fn new(body: Body, file_bytes: Arc<AtomicU64>, failure: Failure) -> Self {
        Self { body: body.into_data_stream(), delivered: 0, file_bytes, failure, pause: false }
    }
}

impl Stream for Metered {
    type Item = std::io::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.pause {
            self.pause = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let beyond_file = self.delivered.saturating_sub(self.file_bytes.load(Ordering::Relaxed));
        if beyond_file > FORM_BYTES {
            let error =
                AppError::TooLarge(format!("the upload form has more than {FORM_BYTES} bytes besides the file"));
            return Poll::Ready(Some(Err(fail(&self.failure, error))));
        }
        match self.body.poll_next_unpin(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                self.delivered += chunk.len() as u64;
                self.pause = true;
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(std::io::Error::other(e)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The file's bytes as the store reads them: the `content` part, then the rest of the form
/// (which must not carry a field the server reads), then the md5 check when the form gave an
/// md5 and no sha256 (the store checks the sha256 itself).
struct Content {
    multipart: Multipart<'static>,
    field: Option<Field<'static>>,
    md5: Option<(md5::Md5, String)>,
    file_bytes: Arc<AtomicU64>,
    failure: Failure,
    parts: usize,
    name: String,
}

impl Content {
    fn into_stream(self) -> ByteStream {
        Box::pin(futures_util::stream::unfold(Some(self), |content| async move {
            let mut content = content?;
            match content.next_chunk().await {
                Ok(Some(chunk)) => Some((Ok(chunk), Some(content))),
                Ok(None) => None,
                Err(e) => Some((Err(fail(&content.failure, e)), None)),
            }
        }))
    }

    async fn next_chunk(&mut self) -> Result<Option<Bytes>, AppError> {
        let Some(field) = self.field.as_mut() else { return Ok(None) };
        if let Some(chunk) = field.chunk().await.map_err(|e| form_error(&self.failure, e))? {
            self.file_bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            if let Some((md5, _)) = self.md5.as_mut() {
                md5.update(&chunk);
            }
            return Ok(Some(chunk));
        }
        self.field = None;
        self.trailing().await?;
        if let Some((md5, expected)) = self.md5.take() {
            let actual = hex::encode(md5.finalize());
            if !actual.eq_ignore_ascii_case(&expected) {
                return Err(AppError::BadRequest(format!(
                    "{} has md5 {actual}, but md5_digest {expected} was declared",
                    self.name
                )));
            }
        }
        Ok(None)
    }

    /// The parts after the file: skipped, unless they are fields the server reads.
    async fn trailing(&mut self) -> Result<(), AppError> {
        while let Some(mut field) = self.multipart.next_field().await.map_err(|e| form_error(&self.failure, e))? {
            self.parts += 1;
            if self.parts > MAX_PARTS {
                return Err(AppError::BadRequest(format!("the form has more than {MAX_PARTS} parts")));
            }
            let name = field.name().unwrap_or_default().to_owned();
            if name == CONTENT {
                return Err(AppError::BadRequest(
                    "the form has more than one content part; upload one file per request".into(),
                ));
            }
            if Form::reads(&name) {
                return Err(AppError::BadRequest(format!(
                    "form field {name} comes after the file; send it before the content part"
                )));
            }
            read_value(&mut field, false, &self.failure).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "legacy_upload_tests.rs"]
mod tests;
