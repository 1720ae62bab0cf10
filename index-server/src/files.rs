//! Reads: stored objects, directory indexes and negotiated simple pages.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::TryStreamExt;
use quarry_index::RepoRoot;
use quarry_packaging::PackageName;
use quarry_store::{ByteRange, Key, ObjectMeta, StoreError};

use crate::negotiate::{SimpleFormat, negotiate};
use crate::{AppError, AppState, decode_path, encode_path};

const PAGE_CACHE: &str = "no-cache";
const IMMUTABLE_CACHE: &str = "public, max-age=31536000, immutable";

/// How a stored object is presented.
struct Presentation {
    content_type: &'static str,
    cache_control: &'static str,
    /// Distinguishes negotiated representations in the ETag.
    etag_suffix: &'static str,
}

fn presentation_for(key: &Key) -> Presentation {
    let name = key.filename();
    let (content_type, immutable) = if name.ends_with(".html") {
        ("text/html; charset=utf-8", false)
    } else if name.ends_with(".json") {
        ("application/json", false)
    } else if name.ends_with(".metadata") {
        ("text/plain; charset=utf-8", true)
    } else if name.ends_with(".sha256sum") || name.ends_with(".txt") || name.ends_with(".log") {
        ("text/plain; charset=utf-8", false)
    } else if [".whl", ".zip", ".tar.gz", ".tar.zst", ".tar.xz", ".deb", ".rpm"].iter().any(|s| name.ends_with(s)) {
        ("application/octet-stream", true)
    } else {
        ("application/octet-stream", false)
    };
    let cache_control = if immutable { IMMUTABLE_CACHE } else { PAGE_CACHE };
    Presentation { content_type, cache_control, etag_suffix: "" }
}

pub(crate) async fn get_path(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, AppError> {
    let path = decode_path(uri.path())?;
    let reader = Reader { state: &state, method: &method, headers: &headers };

    // `…/simple…` under a pip root: PEP 503/691.
    if let Some(response) = reader.simple(&path).await? {
        return Ok(response);
    }
    // A run's own page: the browser (its stored listing stays at `…/index.html`).
    if let Some(run) = path.strip_suffix('/')
        && quarry_index::listing::is_run_segment(run)
    {
        return crate::browse::run_page(&state, run, &headers).await;
    }
    if path.is_empty() || path.ends_with('/') {
        let key = Key::new(format!("{path}index.html"))?;
        return match reader.object(&key, presentation_for(&key)).await {
            Err(AppError::NotFound(_)) => Err(AppError::NotFound(format!("nothing at /{path}"))),
            other => other,
        };
    }
    let key = Key::new(path.clone())?;
    match reader.object(&key, presentation_for(&key)).await {
        Err(AppError::NotFound(_)) => {
            // A directory with an index: redirect to its slashed URL.
            let index = Key::new(format!("{path}/index.html"))?;
            match state.store.head(&index).await {
                Ok(_) => Ok(Redirect::permanent(&encode_path(&format!("{path}/"))).into_response()),
                Err(e) if e.is_not_found() => Err(AppError::NotFound(format!("nothing at /{path}"))),
                Err(e) => Err(e.into()),
            }
        }
        other => other,
    }
}

struct Reader<'a> {
    state: &'a AppState,
    method: &'a Method,
    headers: &'a HeaderMap,
}

impl Reader<'_> {
    /// Serve `…/simple/` and `…/simple/<project>/`, or `None` when `path` is not such a URL.
    async fn simple(&self, path: &str) -> Result<Option<Response>, AppError> {
        let Some((root, rest)) = split_simple(path) else {
            return Ok(None);
        };
        let Ok(root) = RepoRoot::new(root) else {
            return Ok(None);
        };
        let (name, slash) = match rest {
            None => {
                return Ok(Some(Redirect::permanent(&encode_path(&format!("{root}simple/"))).into_response()));
            }
            Some("") => (None, true),
            Some(rest) => match rest.strip_suffix('/') {
                Some(name) => (Some(name), true),
                None => (Some(rest), false),
            },
        };
        // Stored files under simple/ (index.html, index.json) are served as they are.
        if let Some(n) = name
            && !slash
            && (n == "index.html" || n == "index.json")
        {
            return Ok(None);
        }
        let dir = match name {
            None => format!("{root}simple/"),
            Some(raw) => {
                let normalized = PackageName::new(raw)
                    .map_err(|e| AppError::NotFound(format!("no project {raw:?} in {root}: {e}")))?;
                if !slash || normalized.as_str() != raw {
                    let target = format!("{root}simple/{normalized}/");
                    return Ok(Some(Redirect::permanent(&encode_path(&target)).into_response()));
                }
                format!("{root}simple/{normalized}/")
            }
        };
        let format =
            negotiate(self.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok())).ok_or(AppError::NotAcceptable)?;
        let file = if format.is_json() { "index.json" } else { "index.html" };
        let key = Key::new(format!("{dir}{file}"))?;
        let presentation = Presentation {
            content_type: format.content_type(),
            cache_control: PAGE_CACHE,
            etag_suffix: match format {
                SimpleFormat::Json => "-json",
                SimpleFormat::V1Html => "-v1html",
                SimpleFormat::TextHtml => "-html",
            },
        };
        match self.object(&key, presentation).await {
            Ok(mut response) => {
                response.headers_mut().insert(header::VARY, HeaderValue::from_static("Accept"));
                Ok(Some(response))
            }
            Err(AppError::NotFound(_)) => Err(AppError::NotFound(match name {
                Some(n) => format!("no project {n:?} in {root}"),
                None => format!("no packages have been indexed in {root}"),
            })),
            Err(e) => Err(e),
        }
    }

    /// Serve one stored object (GET with optional single range, or HEAD).
    async fn object(&self, key: &Key, p: Presentation) -> Result<Response, AppError> {
        let range = match self.headers.get(header::RANGE).and_then(|v| v.to_str().ok()) {
            Some(v) => parse_range(v),
            None => None,
        };
        if self.method == Method::HEAD {
            let meta = self.state.store.head(key).await?;
            let mut response = Response::new(Body::empty());
            self.decorate(&mut response, &meta, &p, None)?;
            return Ok(response);
        }
        let got = match self.state.store.get(key, range).await {
            Err(StoreError::RangeNotSatisfiable { size, .. }) => {
                return Err(AppError::RangeNotSatisfiable(size));
            }
            other => other?,
        };
        let etag = format!("\"{}{}\"", got.meta.etag, p.etag_suffix);
        if let Some(inm) = self.headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok())
            && inm.split(',').any(|t| t.trim() == etag || t.trim() == "*")
        {
            let mut response = StatusCode::NOT_MODIFIED.into_response();
            response.headers_mut().insert(header::ETAG, header_value(&etag)?);
            response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static(p.cache_control));
            return Ok(response);
        }
        let partial = range.map(|_| got.range);
        let body = Body::from_stream(got.body.map_err(std::io::Error::other));
        let mut response = Response::new(body);
        self.decorate(&mut response, &got.meta, &p, partial)?;
        Ok(response)
    }

    fn decorate(
        &self,
        response: &mut Response,
        meta: &ObjectMeta,
        p: &Presentation,
        partial: Option<(u64, u64)>,
    ) -> Result<(), AppError> {
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(p.content_type));
        headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(p.cache_control));
        headers.insert(header::ETAG, header_value(&format!("\"{}{}\"", meta.etag, p.etag_suffix))?);
        if let Ok(date) = header_value(&http_date(meta.last_modified)) {
            headers.insert(header::LAST_MODIFIED, date);
        }
        match partial {
            Some((start, end)) => {
                *response.status_mut() = StatusCode::PARTIAL_CONTENT;
                let headers = response.headers_mut();
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
                headers
                    .insert(header::CONTENT_RANGE, header_value(&format!("bytes {start}-{}/{}", end - 1, meta.size))?);
            }
            None => {
                response.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(meta.size));
            }
        }
        Ok(())
    }
}

fn header_value(s: &str) -> Result<HeaderValue, AppError> {
    HeaderValue::from_str(s).map_err(|e| AppError::Internal(format!("bad header value {s:?}: {e}")))
}

fn http_date(ts: jiff::Timestamp) -> String {
    ts.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string()
}

/// Split `<root>simple[/rest]` into the root (ending in `/`) and what follows `simple`
/// (`None` for a bare `…/simple`, `Some("")` for `…/simple/`).
fn split_simple(path: &str) -> Option<(&str, Option<&str>)> {
    let mut search = 0;
    while let Some(found) = path[search..].find("simple") {
        let start = search + found;
        let end = start + "simple".len();
        let at_segment_start = start == 0 || path.as_bytes()[start - 1] == b'/';
        let rest = &path[end..];
        if at_segment_start && start > 0 {
            if rest.is_empty() {
                return Some((&path[..start], None));
            }
            if let Some(after) = rest.strip_prefix('/')
                && after.matches('/').count() <= 1
                && (after.is_empty() || !after[..after.len() - 1].contains('/'))
            {
                return Some((&path[..start], Some(after)));
            }
        }
        search = end;
    }
    None
}

/// A single `bytes=` range; anything else (several ranges, other units) is ignored and the
/// whole object is served, as RFC 9110 allows.
fn parse_range(value: &str) -> Option<ByteRange> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    match (first.is_empty(), last.is_empty()) {
        (true, false) => last.parse().ok().map(ByteRange::Suffix),
        (false, true) => first.parse().ok().map(ByteRange::From),
        (false, false) => Some(ByteRange::Closed(first.parse().ok()?, last.parse().ok()?)),
        (true, true) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_urls() {
        assert_eq!(split_simple("r-linux/python/simple"), Some(("r-linux/python/", None)));
        assert_eq!(split_simple("r-linux/python/simple/"), Some(("r-linux/python/", Some(""))));
        assert_eq!(split_simple("r-linux/python/simple/Foo"), Some(("r-linux/python/", Some("Foo"))));
        assert_eq!(split_simple("r-linux/python/simple/foo/"), Some(("r-linux/python/", Some("foo/"))));
        assert_eq!(split_simple("r-linux/python/simple/foo/index.html"), None);
        assert_eq!(split_simple("r-linux/python/x-simple-1.whl"), None);
        assert_eq!(split_simple("simple/"), None);
    }

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9"), Some(ByteRange::Closed(0, 9)));
        assert_eq!(parse_range("bytes=10-"), Some(ByteRange::From(10)));
        assert_eq!(parse_range("bytes=-5"), Some(ByteRange::Suffix(5)));
        assert_eq!(parse_range("bytes=0-1,4-5"), None);
        assert_eq!(parse_range("items=0-1"), None);
        assert_eq!(parse_range("bytes=x-1"), None);
    }
}
