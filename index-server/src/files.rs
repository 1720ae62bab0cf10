//! Reads: stored objects, directory indexes and negotiated simple pages.

use axum::Extension;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use futures_util::TryStreamExt;
use quarry_index::RepoRoot;
use quarry_layout::RunSegment;
use quarry_packaging::PackageName;
use quarry_store::{ByteRange, Key, ObjectMeta, StoreError};

use crate::negotiate::{SimpleFormat, negotiate};
use crate::{AppError, AppState, ServedAt, decode_path, encode_path};

use quarry_store::presentation::PAGE_CACHE;

/// How a stored object is presented.
struct Presentation {
    content_type: &'static str,
    cache_control: &'static str,
    /// Distinguishes negotiated representations in the ETag.
    etag_suffix: &'static str,
    /// Stored content a browser could render as a page that Quarry did not generate: served as
    /// a download in a sandbox, so it can never run as Quarry's origin.
    attachment: bool,
}

/// Names a browser may render as a document (HTML, SVG, XML with stylesheets, archives of
/// pages), in lower case.
const DOCUMENT_SUFFIXES: [&str; 12] =
    [".html", ".htm", ".xhtml", ".xht", ".shtml", ".svg", ".svgz", ".xml", ".xsl", ".xslt", ".mht", ".mhtml"];

/// Whether `key` names a page Quarry generates: `index.html` (find-links pages, simple pages,
/// run listings) and dnf's `repodata/*.xml` / `repomd.xml`. Generated pages have no scripts and
/// are served with [`crate::PAGE_CSP`].
fn generated(key: &Key) -> bool {
    let name = key.filename();
    let in_repodata = key.as_str().contains("/repodata/") || key.as_str().starts_with("repodata/");
    name == "index.html" || (in_repodata && name.ends_with(".xml"))
}

/// Whether `key` names a document (see [`DOCUMENT_SUFFIXES`]) Quarry did not generate.
fn untrusted_document(key: &Key) -> bool {
    let name = key.filename().to_ascii_lowercase();
    DOCUMENT_SUFFIXES.iter().any(|s| name.ends_with(s)) && !generated(key)
}

fn presentation_for(key: &Key) -> Presentation {
    if untrusted_document(key) {
        return Presentation {
            content_type: "application/octet-stream",
            cache_control: PAGE_CACHE,
            etag_suffix: "",
            attachment: true,
        };
    }
    // Content-Type and Cache-Control from the table S3 objects are written with.
    let stored = quarry_store::presentation::presentation(key.as_str());
    Presentation {
        content_type: stored.content_type,
        cache_control: stored.cache_control,
        etag_suffix: "",
        attachment: false,
    }
}

pub(crate) async fn get_path(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    served_at: Option<Extension<ServedAt>>,
) -> Result<Response, AppError> {
    let path = decode_path(uri.path())?;
    // The audit log is read at `/-/audit`, with the right to.
    if quarry_index::ops::audit_log::is_audit_path(&path) {
        return Err(AppError::NotFound(format!("nothing at /{path}")));
    }
    let reader = Reader { state: &state, method: &method, headers: &headers };

    // `…/simple…` under a pip root: PEP 503/691.
    if let Some(response) = reader.simple(&path).await? {
        return Ok(response);
    }
    // A run's own page: the browser (its stored listing stays at `…/index.html`).
    if let Some(run) = path.strip_suffix('/').and_then(RunSegment::parse) {
        let served_at = served_at.map(|Extension(s)| s);
        return crate::browse::run_page(&state, run, &headers, served_at).await;
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
        let Ok(root) = RepoRoot::new(root, self.state.layout()) else {
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
            attachment: false,
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

    /// Serve one stored object (GET with optional single range, or HEAD); a channel's page
    /// from the channel's current version.
    async fn object(&self, key: &Key, p: Presentation) -> Result<Response, AppError> {
        let resolved = self.state.versions.resolve(self.state.store.as_ref(), key).await;
        let resolved = resolved.map_err(|e| AppError::Internal(format!("resolving {key}'s channel version: {e}")))?;
        // A versioned page's key depends on the channel's pointer, not on the path alone: the
        // connection's memo must not keep it.
        let versioned = resolved != *key;
        let key = &resolved;
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
        // A whole small object is collected (one chunk from a local store: no copy), so the
        // connection can keep the answer (`memo`); anything else streams.
        if partial.is_none() && got.meta.size <= crate::memo::MEMO_BODY_MAX && !versioned {
            let data = quarry_store::collect_sized(got.body, crate::memo::MEMO_BODY_MAX, got.meta.size)
                .await
                .map_err(|e| AppError::Internal(format!("reading {key}: {e}")))?;
            let mut response = Response::new(Body::from(data.clone()));
            self.decorate(&mut response, &got.meta, &p, None)?;
            let etag = got.meta.etag;
            response.extensions_mut().insert(crate::memo::Memoizable { key: key.clone(), etag, body: data });
            return Ok(response);
        }
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
        if p.attachment {
            headers.insert(header::CONTENT_DISPOSITION, header_value(&attachment(meta.key.filename()))?);
            headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(crate::UNTRUSTED_CSP));
        }
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

/// `Content-Disposition: attachment` naming `filename` (RFC 6266 `filename*`, percent-encoded).
fn attachment(filename: &str) -> String {
    const ATTR_CHAR: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'!')
        .remove(b'#')
        .remove(b'$')
        .remove(b'&')
        .remove(b'+')
        .remove(b'-')
        .remove(b'.')
        .remove(b'^')
        .remove(b'_')
        .remove(b'`')
        .remove(b'|')
        .remove(b'~');
    format!("attachment; filename*=UTF-8''{}", percent_encoding::utf8_percent_encode(filename, ATTR_CHAR))
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
    fn documents_quarry_did_not_generate_are_downloads() {
        let p = |k: &str| {
            let p = presentation_for(&Key::new(k).unwrap());
            (p.content_type, p.attachment)
        };
        let html = "text/html; charset=utf-8";
        assert_eq!(p("r-linux/python/index.html"), (html, false));
        assert_eq!(p("r-linux/python/simple/a/index.html"), (html, false));
        assert_eq!(p("r-linux/index.html"), (html, false));
        assert_eq!(p("r-linux/packages/rpm/x86_64/repodata/repomd.xml"), ("application/octet-stream", false));
        assert!(!p("r-linux/packages/rpm/x86_64/repodata/abc-primary.xml.gz").1);
        for hostile in [
            "r-linux/logs/report.html",
            "r-linux/logs/REPORT.HTM",
            "r-linux/x.svg",
            "r-linux/x.xhtml",
            "r-linux/feed.xml",
            "r-linux/x.xsl",
            "r-linux/index.html.svg",
            "r-linux/page.shtml",
        ] {
            assert_eq!(p(hostile), ("application/octet-stream", true), "{hostile}");
        }
        assert!(!p("r-linux/python/a-1-py3-none-any.whl").1);
        assert_eq!(attachment("a b\"c;.html"), "attachment; filename*=UTF-8''a%20b%22c%3B.html");
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
