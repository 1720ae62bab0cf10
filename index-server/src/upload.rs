//! Writes: `PUT /<root>/<file>` streams a distribution into the store, validates it, and
//! reindexes its root before answering.
//!
//! The path: the token's scope for the path, then the key (no reserved or file name as a
//! directory, `quarry_index::check_key_segments`; a distribution's name, or a `.deb`/`.rpm`, in
//! a root of its kind). From there the work runs in a task of its own, so a client that resets
//! the connection cannot skip validation. A stored file the root's state rejected, or that
//! fails inspection now, is never answered "exists": it is deleted and the new upload judged on
//! its own; the same bytes under an existing name are "exists", other bytes a conflict. A new
//! file is checked for a file/directory collision and streamed in with `If-None-Match`, then
//! inspected from what the put returned (no HEAD): a refusal deletes it again and answers 400
//! with the reason. The inspection goes with the request to the root's `Coalescer`
//! ([`crate::coalesce`]), the answer only once a reindex that started after the upload has
//! finished; a file that reindex refuses (a variant wheel that disagrees with its release) is
//! deleted and answered 400 too. `legacy_upload.rs` feeds PyPI's upload form into the same path.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures_util::TryStreamExt;
use quarry_index::{InspectError, Inspections, ProjectScope, ReindexReport, RepoKind, RepoRoot, inspect};
use quarry_packaging::DistFilename;
use quarry_store::{
    ByteStream, Condition, Key, ObjectMeta, PutOptions, StoreError, StoreExt as _, hash_stream, stored_sha256,
};

use crate::wire::{UploadResponse, UploadStatus};
use crate::{AppError, AppState, decode_path, encode_path};

/// Request header carrying the uploader's SHA-256 of the body; a mismatch is refused.
pub const SHA256_HEADER: &str = "x-quarry-sha256";

fn body_stream(body: Body) -> ByteStream {
    Box::pin(body.into_data_stream().map_err(std::io::Error::other))
}

/// The kind of file a key names, for metrics.
pub(crate) fn kind_of(name: &str) -> &'static str {
    if name.ends_with(".whl") {
        "wheel"
    } else if name.ends_with(".deb") {
        "deb"
    } else if name.ends_with(".rpm") {
        "rpm"
    } else if name.ends_with(".tar.gz") || name.ends_with(".zip") {
        "sdist"
    } else {
        "other"
    }
}

/// What an upload stored: whether it was new, its size and its sha256.
pub(crate) type Stored = (UploadStatus, u64, String);

/// Counts an upload's outcome on `/metrics`.
pub(crate) fn record(state: &AppState, kind: &'static str, result: Result<&Stored, &AppError>) {
    let (outcome, bytes) = match result {
        Ok((status, size, _)) => (status.as_str(), *size),
        Err(AppError::Unauthorized(_) | AppError::Forbidden(_)) => ("denied", 0),
        Err(AppError::BadRequest(_) | AppError::TooLarge(_)) => ("rejected", 0),
        Err(AppError::Conflict(_)) => ("conflict", 0),
        Err(_) => ("failed", 0),
    };
    state.metrics.upload(kind, outcome, bytes);
}

pub(crate) async fn put_path(
    State(state): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, AppError> {
    let result = put(&state, &uri, &headers, body).await;
    record(&state, kind_of(uri.path()), result.as_ref().map(|(_, _, stored)| stored));
    let audited = result
        .as_ref()
        .map(|(key, _, (status, _, sha))| (key, sha.as_str(), *status == crate::wire::UploadStatus::Exists));
    crate::audit::record_upload(&state, &headers, crate::auth::WriteAuth::BearerOnly, uri.path(), audited).await;
    let (key, root, (status, size, sha256)) = result?;
    let signed = state.coalescer.indexer().config().signer.is_some();
    let body = response(&key, &root, status, size, sha256, signed);
    let code = match status {
        UploadStatus::Created => StatusCode::CREATED,
        UploadStatus::Exists => StatusCode::OK,
    };
    Ok((code, Json(body)).into_response())
}

async fn put(
    state: &AppState,
    uri: &Uri,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Key, RepoRoot, Stored), AppError> {
    let path = decode_path(uri.path())?;
    state.access.authorize_write(headers, &path)?;
    let (key, root) = target(&path, state.layout())?;
    check_length(state, headers, 0)?;
    let declared = headers.get(SHA256_HEADER).and_then(|v| v.to_str().ok()).map(|s| s.trim().to_ascii_lowercase());
    let stored = store(state, &key, &root, declared, body_stream(body)).await?;
    Ok((key, root, stored))
}

/// The key an upload to `path` writes and the root it is indexed into, once the path passes
/// every check: no reserved or dot segment, a Python distribution's name (or a `.deb`/`.rpm`),
/// inside a root of its kind. (The caller has checked the token's scope for `path`.)
pub(crate) fn target(path: &str, layout: &quarry_layout::config::Layout) -> Result<(Key, RepoRoot), AppError> {
    let key = Key::new(path)?;
    quarry_index::check_key_segments(&key).map_err(|e| AppError::BadRequest(e.to_string()))?;
    let native = [".deb", ".rpm"].iter().any(|s| key.filename().ends_with(s));
    if key.filename().ends_with(".deb")
        && let Some(problem) = quarry_index::deb::pool_name_problem(key.filename())
    {
        return Err(AppError::BadRequest(problem));
    }
    if !native {
        let _: DistFilename = key.filename().parse().map_err(|e| AppError::BadRequest(format!("{e}")))?;
    }
    let root = RepoRoot::for_key(&key, layout).ok_or_else(|| {
        AppError::BadRequest(if native {
            format!(
                "{key}: .debs are uploaded under an apt root's pool (RUN-linux/packages/deb/pool/main/), .rpms into a \
                 dnf root (RUN-linux/packages/rpm/x86_64/); source rpms are not indexed"
            )
        } else {
            format!(
                "{key}: distributions are uploaded into a pip root, a folder with a 'python' segment such as RUN-linux/python/"
            )
        })
    })?;
    Ok((key, root))
}

/// A declared `Content-Length` over the upload limit (plus `overhead`, the bytes of a form
/// around the file) is refused before any byte is read.
pub(crate) fn check_length(state: &AppState, headers: &HeaderMap, overhead: u64) -> Result<(), AppError> {
    let limit = state.max_upload.saturating_add(overhead);
    match headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok()) {
        Some(len) if len > limit => {
            Err(AppError::TooLarge(format!("{len} bytes exceeds the upload limit of {} bytes", state.max_upload)))
        }
        _ => Ok(()),
    }
}

/// Stores `body` at `key` (checked against the `declared` sha256, if any), validates it and
/// reindexes `root`, as every upload does.
pub(crate) async fn store(
    state: &AppState,
    key: &Key,
    root: &RepoRoot,
    declared: Option<String>,
    body: ByteStream,
) -> Result<Stored, AppError> {
    // The work runs in a task of its own: a client that resets the connection drops this
    // request's future, but once its body is complete the file is still checked, removed if
    // invalid and indexed. (A body cut short fails the put inside the task, and the store
    // removes the partial file.)
    let task = tokio::spawn({
        let (state, key, root) = (state.clone(), key.clone(), root.clone());
        async move { store_and_index(&state, &key, &root, declared, body).await }
    });
    task.await.map_err(|e| AppError::Internal(format!("the upload of {key} stopped: {e}")))?
}

/// The answer to an upload of `key` into `root`: what was stored and where clients find it.
pub(crate) fn response(
    key: &Key,
    root: &RepoRoot,
    status: UploadStatus,
    size: u64,
    sha256: String,
    signed: bool,
) -> UploadResponse {
    let at = |path: &str| Some(encode_path(&format!("{root}{path}")));
    let pip = root.kind() == RepoKind::Pip;
    UploadResponse {
        key: key.to_string(),
        size,
        sha256,
        status,
        root: root.to_string(),
        find_links: if pip { at("index.html") } else { None },
        simple: if pip { at("simple/") } else { None },
        repo: match root.kind() {
            RepoKind::Pip => None,
            RepoKind::Apt => at(&format!("dists/{}/InRelease", quarry_index::apt::SUITE)),
            RepoKind::Dnf => at(quarry_index::dnf::REPOMD),
        },
        public_key: match root.kind() {
            _ if !signed => None,
            RepoKind::Pip => None,
            RepoKind::Apt => at(quarry_index::apt::KEY_NAME),
            RepoKind::Dnf => at(quarry_index::dnf::KEY_NAME),
        },
    }
}

/// Stores the body at `key` (or compares it with what is there), validates a new file and
/// reindexes `root`. Returns the status, the size and the sha256.
async fn store_and_index(
    state: &AppState,
    key: &Key,
    root: &RepoRoot,
    declared: Option<String>,
    body: ByteStream,
) -> Result<Stored, AppError> {
    let store = state.store.clone();
    let existing = match store.head(key).await {
        Ok(existing) => match known_bad(state, root, &existing).await? {
            // A file refused earlier, or stored by an upload cut off before its check, is no
            // upload's "exists": it goes, and this upload is judged on its own.
            Some(reason) => {
                tracing::info!(%key, reason, "replacing a stored file that failed validation");
                store.delete(key).await?;
                None
            }
            None => Some(existing),
        },
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    let mut known = Inspections::default();
    let (status, size, sha256) = if let Some(existing) = existing {
        let (size, sha256) = hash_stream(key.as_str(), body, Some(state.max_upload)).await?;
        if let Some(expected) = declared.filter(|d| !d.eq_ignore_ascii_case(&sha256)) {
            return Err(StoreError::DigestMismatch { key: key.to_string(), expected, actual: sha256 }.into());
        }
        same_or_refuse(state, &existing, &sha256).await?;
        (UploadStatus::Exists, size, sha256)
    } else {
        // A file and a directory cannot share a path on every backend (a directory store, a
        // mirror of the bucket): refuse before storing anything.
        store.check_no_collision(key).await?;
        let options = PutOptions {
            condition: Condition::IfNoneMatch,
            content_type: None,
            sha256: declared,
            max_size: Some(state.max_upload),
            derived: false,
        };
        let put = match store.put(key, body, options).await {
            Err(StoreError::Conflict { .. }) => {
                return Err(AppError::Conflict(format!(
                    "{key} was uploaded by another request at the same time; retry to compare"
                )));
            }
            other => other?,
        };
        // What the put told us is all the validation needs: no HEAD.
        let meta = ObjectMeta {
            key: key.clone(),
            size: put.size,
            etag: put.etag.clone(),
            last_modified: jiff::Timestamp::now(),
            sha256: Some(put.sha256.clone()),
            content_type: None,
        };
        // Validate before anything advertises it; a refused file is removed again. What the
        // inspection read goes to the reindex, so a fresh upload is read once.
        match inspect(&store, &meta).await {
            Ok(inspected) => known.insert(key, inspected),
            Err(InspectError::Rejected(reason)) => {
                store.delete(key).await?;
                return Err(AppError::BadRequest(format!("{reason}; the upload was discarded")));
            }
            Err(InspectError::Store(e)) => return Err(e.into()),
        }
        (UploadStatus::Created, put.size, put.sha256)
    };
    let report = state
        .coalescer
        .reindex(root.clone(), ProjectScope::for_file(key.filename()).filter(|_| root.kind() == RepoKind::Pip), known)
        .await
        .map_err(|e| AppError::Internal(format!("{key} is stored, but reindexing {root} failed: {e}")))?;
    // The reindex may refuse what inspection alone could not judge (a variant wheel that
    // disagrees with its release): the file goes again and the client gets the reason.
    if status == UploadStatus::Created
        && let Some(reason) = refused_by_reindex(state, root, key, &report).await?
    {
        store.delete(key).await?;
        return Err(AppError::BadRequest(format!("{reason}; the upload was discarded")));
    }
    Ok((status, size, sha256))
}

/// The reason the reindex that covered this upload gave for refusing the file at `key`, if it
/// did. Its report names what it added and rejected; only when it names the file as neither
/// (an earlier, overlapping run already judged it) is the root's committed state read.
async fn refused_by_reindex(
    state: &AppState,
    root: &RepoRoot,
    key: &Key,
    report: &ReindexReport,
) -> Result<Option<String>, AppError> {
    let name = key.as_str().strip_prefix(root.as_str()).unwrap_or(key.as_str());
    // A run that retried may have rejected it in one pass and added it in another: then the
    // committed state decides.
    let added = report.added.binary_search_by(|a| a.as_str().cmp(name)).is_ok();
    match (report.rejected.get(name), added) {
        (Some(reason), false) => return Ok(Some(reason.clone())),
        (None, true) => return Ok(None),
        _ => {}
    }
    let repo = quarry_index::read_state(state.store.as_ref(), root).await?;
    Ok(repo.and_then(|r| r.rejected.get(name).map(|r| r.reason.clone())))
}

/// Why the stored object `existing` is not a valid package, if it is not: the root's state
/// names it as rejected, or (neither indexed nor rejected yet) inspecting it now fails.
async fn known_bad(state: &AppState, root: &RepoRoot, existing: &ObjectMeta) -> Result<Option<String>, AppError> {
    let name = existing.key.as_str().strip_prefix(root.as_str()).unwrap_or(existing.key.as_str());
    if let Some(repo) = quarry_index::read_state(state.store.as_ref(), root).await? {
        if repo.entries.get(name).is_some_and(|e| e.etag == existing.etag) {
            return Ok(None);
        }
        if let Some(rejected) = repo.rejected.get(name).filter(|r| r.etag == existing.etag) {
            return Ok(Some(rejected.reason.clone()));
        }
    }
    match inspect(&state.store, existing).await {
        Ok(_) => Ok(None),
        Err(InspectError::Rejected(reason)) => Ok(Some(reason)),
        Err(InspectError::Store(e)) => Err(e.into()),
    }
}

/// Identical bytes at an existing key are fine; different bytes are refused (package files are
/// immutable: pip and apt cache them by name and hash).
async fn same_or_refuse(state: &AppState, existing: &ObjectMeta, sha256: &str) -> Result<(), AppError> {
    let existing_sha = stored_sha256(state.store.as_ref(), &existing.key, existing.sha256.clone()).await?;
    if existing_sha == sha256 {
        Ok(())
    } else {
        Err(AppError::Conflict(format!(
            "{} already exists with different content (sha256 {existing_sha}); package files are immutable, upload a new version instead",
            existing.key
        )))
    }
}
