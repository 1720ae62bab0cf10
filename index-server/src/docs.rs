//! `/-/docs/`: the user guide (the mdBook build of `docs/guide/`) served from a directory on
//! the server's disk (`quarry serve --docs DIR`, `docs` in `quarry.toml`), not from the store.
//!
//! A request path is a list of plain segments: an empty, `.` or `..` segment (except a final
//! `/`), a backslash, a NUL or a segment starting with `.` is refused (400); the file found is
//! canonicalized and must still lie inside the directory (a symlink out is 404). A directory
//! answers with its `index.html` (a redirect adds the missing `/` first). Pages are Quarry's own,
//! so they may load their own scripts, styles and fonts, and nothing from elsewhere
//! ([`DOCS_CSP`]); an HTML page may also run the inline scripts it holds, each allowed by its
//! sha256 in the page's own policy, and no other.

use std::path::{Path, PathBuf};

use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};

use crate::{AppError, AppState};

/// The guide's policy: its own scripts, styles, images and fonts, nothing from elsewhere, no
/// framing by other sites.
pub const DOCS_CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; \
font-src 'self' data:; script-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'self'";

/// [`DOCS_CSP`] for an HTML page: `script-src` also allows each inline `<script>` the page
/// holds, by its sha256 (mdBook's pages set their theme and sidebar inline).
fn page_csp(html: &str) -> Option<HeaderValue> {
    use base64::Engine as _;
    let mut sources = String::from("script-src 'self'");
    let mut rest = html;
    while let Some(at) = rest.find("<script>") {
        rest = &rest[at + "<script>".len()..];
        let Some(end) = rest.find("</script>") else { break };
        let digest = hex::decode(quarry_store::sha256_hex(&rest.as_bytes()[..end])).ok()?;
        sources.push_str(&format!(" 'sha256-{}'", base64::engine::general_purpose::STANDARD.encode(digest)));
        rest = &rest[end..];
    }
    HeaderValue::from_str(&DOCS_CSP.replace("script-src 'self'", &sources)).ok()
}

/// The largest file served from the guide's directory.
const MAX_FILE: u64 = 32 * 1024 * 1024;

/// `/-/docs`: the guide's URL ends in `/`, so its relative links resolve.
pub(crate) async fn docs_root_redirect() -> Redirect {
    Redirect::permanent("/-/docs/")
}

/// `/-/docs/`: the guide's index.
pub(crate) async fn docs_index(state: State<AppState>) -> Result<Response, AppError> {
    docs_file(state, UrlPath(String::new())).await
}

/// `/-/docs/{path}`.
pub(crate) async fn docs_file(
    State(state): State<AppState>,
    UrlPath(path): UrlPath<String>,
) -> Result<Response, AppError> {
    let Some(root) = state.docs.clone() else {
        return Err(AppError::NotFound("no guide here: start quarry serve with --docs DIR".into()));
    };
    let relative = relative_path(&path)?;
    let wanted = root.join(&relative);
    let slash = path.is_empty() || path.ends_with('/');
    let found = tokio::task::spawn_blocking(move || resolve(&root, &wanted, slash))
        .await
        .map_err(|e| AppError::Internal(format!("resolving a guide page: {e}")))?;
    let file = match found {
        Resolved::File(file) => file,
        Resolved::Directory => {
            let last = path.rsplit('/').next().unwrap_or_default();
            return Ok(Redirect::permanent(&format!("{last}/")).into_response());
        }
        Resolved::Missing => return Err(AppError::NotFound(format!("not found: /-/docs/{path}"))),
    };
    let body = tokio::fs::read(&file).await.map_err(|e| AppError::Internal(format!("reading {path}: {e}")))?;
    let content_type = content_type(&file);
    let csp = content_type
        .starts_with("text/html")
        .then(|| std::str::from_utf8(&body).ok().and_then(page_csp))
        .flatten()
        .unwrap_or(HeaderValue::from_static(DOCS_CSP));
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    Ok(response)
}

/// The request's path below `/-/docs/` as a relative path of plain segments (a final `/` names
/// a directory's index).
fn relative_path(path: &str) -> Result<PathBuf, AppError> {
    let bad = || AppError::BadRequest(format!("invalid guide path {path:?}"));
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    let mut relative = PathBuf::new();
    if trimmed.is_empty() {
        return Ok(relative);
    }
    for segment in trimmed.split('/') {
        if segment.is_empty() || segment.starts_with('.') || segment.contains(['\\', '\0', ':']) {
            return Err(bad());
        }
        relative.push(segment);
    }
    Ok(relative)
}

enum Resolved {
    File(PathBuf),
    /// A directory named without its final `/`.
    Directory,
    Missing,
}

/// `wanted` (a directory: its `index.html`, when the request ended in `/`) if it exists inside
/// `root` once every link is followed.
fn resolve(root: &Path, wanted: &Path, slash: bool) -> Resolved {
    let Ok(root) = root.canonicalize() else { return Resolved::Missing };
    let Ok(mut found) = wanted.canonicalize() else { return Resolved::Missing };
    if !found.starts_with(&root) {
        return Resolved::Missing;
    }
    if found.is_dir() {
        if !slash {
            return Resolved::Directory;
        }
        found.push("index.html");
    }
    match std::fs::metadata(&found) {
        Ok(meta) if meta.is_file() && meta.len() <= MAX_FILE => Resolved::File(found),
        _ => Resolved::Missing,
    }
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "woff" => "font/woff",
        "ttf" => "font/ttf",
        "txt" | "md" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt as _;

    use crate::{AppState, app};

    async fn get(app: &axum::Router, path: &str) -> (StatusCode, axum::http::HeaderMap, String) {
        let request = Request::builder().uri(path).body(Body::empty()).unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let (status, headers) = (response.status(), response.headers().clone());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, headers, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_guide_is_served_from_its_directory_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let book = dir.path().join("book");
        std::fs::create_dir_all(book.join("reference")).unwrap();
        std::fs::write(book.join("index.html"), "<h1>guide</h1><script>let a = 1;</script>").unwrap();
        std::fs::write(book.join("reference/promote.html"), "<h1>promote</h1>").unwrap();
        std::fs::write(book.join("reference/index.html"), "<h1>reference</h1>").unwrap();
        std::fs::write(book.join("book.js"), "let x = 1;").unwrap();
        std::fs::write(book.join(".hidden"), "no").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(dir.path().join("secret.txt"), book.join("link.txt")).unwrap();
        #[cfg(windows)]
        let _ = std::os::windows::fs::symlink_file(dir.path().join("secret.txt"), book.join("link.txt"));
        let state = AppState::new(Arc::new(quarry_store::MemoryStore::default()), vec![]);
        let app = app(state.with_docs(Some(book.clone())));

        let (status, headers, body) = get(&app, "/-/docs/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "<h1>guide</h1><script>let a = 1;</script>"));
        assert_eq!(headers["content-type"], "text/html; charset=utf-8");
        // The page's one inline script, by its hash (`printf 'let a = 1;' | openssl sha256 -binary | base64`).
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert_eq!(
            csp,
            super::DOCS_CSP.replace(
                "script-src 'self'",
                "script-src 'self' 'sha256-xY6QKfH9PRsQnLz56nj6MBwiK5oHg+im1Jkpdp1x/Ck='"
            )
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        let (status, _, body) = get(&app, "/-/docs/reference/promote.html").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "<h1>promote</h1>"));
        let (status, headers, _) = get(&app, "/-/docs/book.js").await;
        assert_eq!(headers["content-security-policy"], super::DOCS_CSP);
        assert_eq!(
            (status, headers["content-type"].to_str().unwrap()),
            (StatusCode::OK, "text/javascript; charset=utf-8")
        );
        let (status, _, body) = get(&app, "/-/docs/reference/").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "<h1>reference</h1>"));
        // A directory without its `/` and the guide's root redirect, so relative links work.
        let (status, headers, _) = get(&app, "/-/docs/reference").await;
        assert_eq!((status, headers["location"].to_str().unwrap()), (StatusCode::PERMANENT_REDIRECT, "reference/"));
        let (status, headers, _) = get(&app, "/-/docs").await;
        assert_eq!((status, headers["location"].to_str().unwrap()), (StatusCode::PERMANENT_REDIRECT, "/-/docs/"));
        // Nothing outside the directory, hidden or missing.
        for (path, want) in [
            ("/-/docs/../secret.txt", StatusCode::BAD_REQUEST),
            ("/-/docs/%2e%2e/secret.txt", StatusCode::BAD_REQUEST),
            ("/-/docs/reference/..%2f..%2fsecret.txt", StatusCode::BAD_REQUEST),
            ("/-/docs/a//b.html", StatusCode::BAD_REQUEST),
            ("/-/docs/.hidden", StatusCode::BAD_REQUEST),
            ("/-/docs/..%5csecret.txt", StatusCode::BAD_REQUEST),
            ("/-/docs/missing.html", StatusCode::NOT_FOUND),
            ("/-/docs/link.txt", StatusCode::NOT_FOUND),
        ] {
            let request = Request::builder().uri(path).body(Body::empty()).unwrap();
            let response = app.clone().oneshot(request).await.unwrap();
            // A path a client would normalize may be refused by the router first; it is never served.
            assert!(response.status() == want || response.status().is_client_error(), "{path}: {}", response.status());
            assert_ne!(response.status(), StatusCode::OK, "{path}");
            let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            assert!(!String::from_utf8_lossy(&body).contains("outside"), "{path}");
        }
        // Without --docs there is no guide, and the store's own keys are not shadowed elsewhere.
        let bare = crate::app(AppState::new(Arc::new(quarry_store::MemoryStore::default()), vec![]));
        let (status, _, body) = get(&bare, "/-/docs/").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("--docs"), "{body}");
    }
}
