//! Repeated reads of a stored page answered without the router.
//!
//! The first `GET` of a page goes through [`crate::app`]. When the answer is a whole stored
//! object (status 200, body up to [`MEMO_BODY_MAX`]), [`crate::files`] marks it
//! [`Memoizable`] and the connection keeps the finished response (headers as the client got
//! them, body) with the store key and ETag it was read from. A later `GET` of the same path
//! with the same `Accept` and no `Range` or conditional header is answered from it, after the
//! read guard and once the store confirms the object still has that ETag (on a local store the
//! same one-`lstat` check its read cache makes, so a write by any process is seen at once).
//! Anything else goes through the router, and so does a page whose ETag moved (its entry goes).
//!
//! What a response depends on is exactly what the entry is keyed and checked by: the path
//! picks the key (the mapping in [`crate::files::get_path`] is a function of the path and,
//! under `…/simple/`, of `Accept`), the ETag stands for the object's bytes and metadata, the
//! guard runs per request, and the router's per-request headers (`Date`, `Connection`) are
//! hyper's and the connection's, added after. A page of a channel with versions is never kept:
//! its key follows the channel's pointer ([`quarry_index::versions::Resolver`]).
//!
//! A store that cannot tell from the ETag alone (`Store::unchanged` answers `None`) is asked
//! with a `HEAD`. A kept answer is counted, logged and metered as the router would have done
//! it (`crate::account`: the same route label, access log line and request log entry), so
//! `/metrics` and the logs do not depend on which path answered. Bounded: at most 4,096
//! entries and 32 MiB of bodies (mostly shared with the local store's read cache), the oldest
//! going first; paths or `Accept` values over 1 KiB are never kept.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::http::{HeaderMap, HeaderValue, Method, Response, Uri, header, request};
use bytes::Bytes;
use quarry_store::Key;

use crate::{Served, Shared};

/// Largest body kept; larger objects are streamed by the router every time.
pub(crate) const MEMO_BODY_MAX: u64 = 256 * 1024;
/// Body bytes kept at most (mostly shared with the local store's read cache).
const MEMO_BYTES: usize = 32 * 1024 * 1024;
/// Entries kept at most; the oldest go first.
const MEMO_ENTRIES: usize = 4096;
/// Longest path or `Accept` value an entry is kept for.
const MEMO_KEY_MAX: usize = 1024;

/// Request headers whose presence sends a request through the router: ranges and conditional
/// requests are answered there.
const ROUTED_HEADERS: [header::HeaderName; 6] = [
    header::RANGE,
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_RANGE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
];

/// Set by [`crate::files`] on a `200` answered with the whole stored object `key`.
#[derive(Debug, Clone)]
pub(crate) struct Memoizable {
    pub(crate) key: Key,
    pub(crate) etag: String,
    pub(crate) body: Bytes,
}

/// What an [`eligible`] request asked, kept while the router answers it.
#[derive(Debug)]
pub(crate) struct Asked {
    uri: Uri,
    accept: Option<HeaderValue>,
}

impl Asked {
    pub(crate) fn of(head: &request::Parts) -> Self {
        Self { uri: head.uri.clone(), accept: head.headers.get(header::ACCEPT).cloned() }
    }
}

/// A kept answer.
#[derive(Debug)]
pub(crate) struct Page {
    /// Its metrics labels and request log entry, the same for every request it answers.
    pub(crate) served: Served,
    pub(crate) key: Key,
    pub(crate) etag: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

#[derive(Debug)]
struct Variant {
    accept: Option<HeaderValue>,
    page: Arc<Page>,
}

#[derive(Debug, Default)]
struct Entries {
    by_path: HashMap<Box<str>, Vec<Variant>>,
    /// Entries in insertion order (path, `Accept`), each once.
    order: VecDeque<(Box<str>, Option<HeaderValue>)>,
    bytes: usize,
}

impl Entries {
    fn remove(&mut self, path: &str, accept: Option<&HeaderValue>) -> Option<Arc<Page>> {
        let variants = self.by_path.get_mut(path)?;
        let at = variants.iter().position(|v| v.accept.as_ref() == accept)?;
        let gone = variants.swap_remove(at);
        if variants.is_empty() {
            self.by_path.remove(path);
        }
        self.bytes -= gone.page.body.len();
        Some(gone.page)
    }
}

/// The kept answers, bounded by count and bytes.
#[derive(Debug)]
pub(crate) struct Memo {
    max_bytes: usize,
    max_entries: usize,
    entries: Mutex<Entries>,
}

impl Default for Memo {
    fn default() -> Self {
        Self::new(MEMO_BYTES, MEMO_ENTRIES)
    }
}

/// Whether a request may be answered from (and its answer kept in) the memo.
pub(crate) fn eligible(head: &request::Parts) -> bool {
    head.method == Method::GET
        && head.uri.path().len() <= MEMO_KEY_MAX
        && head.headers.get(header::ACCEPT).is_none_or(|v| v.len() <= MEMO_KEY_MAX)
        && !ROUTED_HEADERS.iter().any(|h| head.headers.contains_key(h))
}

impl Memo {
    pub(crate) fn new(max_bytes: usize, max_entries: usize) -> Self {
        Self { max_bytes, max_entries, entries: Mutex::default() }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The kept answer for an [`eligible`] request.
    pub(crate) fn lookup(&self, head: &request::Parts) -> Option<Arc<Page>> {
        let accept = head.headers.get(header::ACCEPT);
        let entries = self.entries();
        let variants = entries.by_path.get(head.uri.path())?;
        variants.iter().find(|v| v.accept.as_ref() == accept).map(|v| v.page.clone())
    }

    /// Drop the answer `page` for `head` (its object changed), unless a newer one replaced it.
    pub(crate) fn forget(&self, head: &request::Parts, page: &Arc<Page>) {
        let accept = head.headers.get(header::ACCEPT);
        let mut entries = self.entries();
        let current = entries
            .by_path
            .get(head.uri.path())
            .and_then(|variants| variants.iter().find(|v| v.accept.as_ref() == accept))
            .is_some_and(|v| Arc::ptr_eq(&v.page, page));
        if current {
            entries.remove(head.uri.path(), accept);
            // Out of the order too, so it stays one place per entry (a replacement keeps its
            // place; only a forgotten entry leaves it).
            entries.order.retain(|(path, a)| !(**path == *head.uri.path() && a.as_ref() == accept));
        }
    }

    /// Keep the answer to an [`eligible`] request, evicting the oldest entries to stay under the
    /// caps.
    pub(crate) fn insert(&self, asked: &Asked, answer: Memoizable, headers: HeaderMap) {
        if answer.body.len() as u64 > MEMO_BODY_MAX || answer.body.len() > self.max_bytes || self.max_entries == 0 {
            return;
        }
        let path = asked.uri.path();
        let accept = asked.accept.clone();
        let served = Served::new(&Method::GET, path, 200, &headers);
        let page = Arc::new(Page { served, key: answer.key, etag: answer.etag, headers, body: answer.body });
        let mut entries = self.entries();
        let bytes = page.body.len();
        match entries.remove(path, accept.as_ref()) {
            // Replaced: it keeps its place in the order.
            Some(_) => {}
            None => entries.order.push_back((path.into(), accept.clone())),
        }
        entries.bytes += bytes;
        entries.by_path.entry(path.into()).or_default().push(Variant { accept, page });
        while entries.bytes > self.max_bytes || entries.order.len() > self.max_entries {
            let Some((old_path, old_accept)) = entries.order.pop_front() else { break };
            entries.remove(&old_path, old_accept.as_ref());
        }
    }

    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        let entries = self.entries();
        (entries.by_path.values().map(Vec::len).sum(), entries.bytes)
    }
}

/// Answer an [`eligible`] request from its kept answer, when there is one, the read guard
/// lets it through and the object still has the kept ETag; else `None` (the router
/// answers).
pub(crate) async fn serve_kept(state: &Shared, head: &request::Parts) -> Option<Response<Bytes>> {
    let started = Instant::now();
    let page = state.memo.lookup(head)?;
    state.access.authorize_read(&head.headers).ok()?;
    let unchanged = match state.store.unchanged(&page.key, &page.etag) {
        Some(unchanged) => unchanged,
        None => state.store.head(&page.key).await.is_ok_and(|meta| meta.etag == page.etag),
    };
    if !unchanged {
        state.memo.forget(head, &page);
        return None;
    }
    let bytes = page.body.len() as u64;
    crate::account(state, &page.served, bytes, started.elapsed());
    let mut response = Response::new(page.body.clone());
    *response.headers_mut() = page.headers.clone();
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Request;

    fn head(path: &str, accept: Option<&str>) -> request::Parts {
        let mut request = Request::get(path);
        if let Some(accept) = accept {
            request = request.header(header::ACCEPT, accept);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn answer(key: &str, body: &'static [u8]) -> Memoizable {
        Memoizable { key: Key::new(key).unwrap(), etag: "e1".into(), body: Bytes::from_static(body) }
    }

    #[test]
    fn entries_are_keyed_by_path_and_accept() {
        let memo = Memo::default();
        let html = head("/r/simple/a/", Some("text/html"));
        let json = head("/r/simple/a/", Some("application/vnd.pypi.simple.v1+json"));
        memo.insert(&Asked::of(&html), answer("r/simple/a/index.html", b"<html>"), HeaderMap::new());
        assert!(memo.lookup(&json).is_none(), "another Accept is another answer");
        assert!(memo.lookup(&head("/r/simple/a/", None)).is_none());
        assert!(memo.lookup(&head("/r/simple/b/", Some("text/html"))).is_none());
        let page = memo.lookup(&html).unwrap();
        assert_eq!(page.key.as_str(), "r/simple/a/index.html");
        memo.insert(&Asked::of(&json), answer("r/simple/a/index.json", b"{}"), HeaderMap::new());
        assert_eq!(memo.held(), (2, 8));
        memo.forget(&html, &page);
        assert!(memo.lookup(&html).is_none());
        assert!(memo.lookup(&json).is_some());
        assert_eq!(memo.held(), (1, 2));
    }

    #[test]
    fn a_replaced_entry_is_not_forgotten_by_a_stale_check() {
        let memo = Memo::default();
        let h = head("/p/index.html", None);
        memo.insert(&Asked::of(&h), answer("p/index.html", b"old"), HeaderMap::new());
        let stale = memo.lookup(&h).unwrap();
        memo.insert(&Asked::of(&h), answer("p/index.html", b"newer"), HeaderMap::new());
        memo.forget(&h, &stale);
        assert_eq!(&memo.lookup(&h).unwrap().body[..], b"newer");
        assert_eq!(memo.held(), (1, 5));
    }

    #[test]
    fn a_forgotten_entry_leaves_the_order() {
        let memo = Memo::new(1024, 2);
        let (a, b) = (head("/a", None), head("/b", None));
        memo.insert(&Asked::of(&a), answer("a", b"a"), HeaderMap::new());
        let page = memo.lookup(&a).unwrap();
        memo.forget(&a, &page);
        memo.insert(&Asked::of(&a), answer("a", b"a"), HeaderMap::new());
        memo.insert(&Asked::of(&b), answer("b", b"b"), HeaderMap::new());
        assert!(memo.lookup(&a).is_some() && memo.lookup(&b).is_some(), "two entries fit two places");
        assert_eq!(memo.entries().order.len(), 2);
    }

    #[test]
    fn the_memo_stays_under_its_caps() {
        let memo = Memo::new(10, 3);
        for i in 0..5 {
            memo.insert(&Asked::of(&head(&format!("/p{i}"), None)), answer("k", b"abc"), HeaderMap::new());
        }
        assert_eq!(memo.held(), (3, 9), "by count: the oldest went");
        assert!(memo.lookup(&head("/p0", None)).is_none());
        assert!(memo.lookup(&head("/p4", None)).is_some());
        memo.insert(&Asked::of(&head("/big", None)), answer("k", b"0123456789"), HeaderMap::new());
        assert_eq!(memo.held(), (1, 10), "by bytes");
        memo.insert(&Asked::of(&head("/bigger", None)), answer("k", b"0123456789a"), HeaderMap::new());
        assert!(memo.lookup(&head("/bigger", None)).is_none(), "larger than the cap: not kept");
    }

    #[test]
    fn ranges_conditionals_and_other_methods_go_through_the_router() {
        assert!(eligible(&head("/a/index.html", Some("text/html"))));
        for (name, value) in [
            (header::RANGE, "bytes=0-1"),
            (header::IF_NONE_MATCH, "\"x\""),
            (header::IF_MODIFIED_SINCE, "Thu, 01 Jan 1970 00:00:00 GMT"),
            (header::IF_RANGE, "\"x\""),
        ] {
            let mut h = head("/a/index.html", None);
            h.headers.insert(name.clone(), HeaderValue::from_static(value));
            assert!(!eligible(&h), "{name}");
        }
        let mut h = head("/a/index.html", None);
        h.method = Method::HEAD;
        assert!(!eligible(&h));
        assert!(!eligible(&head(&format!("/{}", "a".repeat(MEMO_KEY_MAX)), None)));
    }
}
