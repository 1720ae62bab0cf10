//! Serving prebuilt pages from memory (the local store's read cache) stays correct: a page
//! rewritten by another writer (another process's store and indexer, or a foreign write in
//! place) is served new at the next request, with a new ETag, and the headers of a page read
//! from memory are those of one read from disk.

use std::sync::Arc;

use quarry_index::RepoRoot;
use quarry_store::{LocalStore, Store, StoreExt as _};
use quarry_tests::{ROOT, TestServer, WheelSpec};

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

/// GET `url` (optionally conditional): status, ETag, body.
async fn get(server: &TestServer, url: &str, if_none_match: Option<&str>) -> (u16, String, String) {
    let mut request = server.client.get(url);
    if let Some(etag) = if_none_match {
        request = request.header("if-none-match", etag);
    }
    let r = request.send().await.unwrap();
    let status = r.status().as_u16();
    if status == 200 {
        assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8");
        assert_eq!(header(&r, "cache-control"), "no-cache");
        assert_eq!(header(&r, "vary"), "Accept");
        assert!(
            header(&r, "content-security-policy").starts_with("default-src 'none'; style-src"),
            "{:?}",
            r.headers()
        );
        assert_eq!(header(&r, "x-content-type-options"), "nosniff");
    }
    let etag = header(&r, "etag");
    (status, etag, r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn pages_rewritten_by_another_writer_are_served_new_at_once() {
    let server = TestServer::start().await;
    server.upload(&WheelSpec::new("demo", "1.0")).await;
    let page = format!("{}simple/demo/", server.root_url());

    let (status, etag, body) = get(&server, &page, None).await;
    assert_eq!(status, 200);
    assert!(body.contains("demo-1.0-py3-none-any.whl"), "{body}");
    // From memory now: same bytes, same ETag, and a 304 for it.
    assert_eq!(get(&server, &page, None).await, (200, etag.clone(), body.clone()));
    assert_eq!(get(&server, &page, Some(&etag)).await.0, 304);

    // Another process (its own store on the same directory) uploads and reindexes.
    let other: Arc<dyn Store> = Arc::new(LocalStore::open(server.store_dir()).unwrap());
    let wheel = WheelSpec::new("demo", "2.0");
    let key = quarry_store::Key::new(format!("{ROOT}{}", wheel.filename())).unwrap();
    other.put_bytes(&key, wheel.build().into(), Default::default()).await.unwrap();
    quarry_index::Indexer::new(other.clone(), Default::default())
        .reindex(&RepoRoot::new(ROOT, &Default::default()).unwrap())
        .await
        .unwrap();

    let (status, etag2, body2) = get(&server, &page, Some(&etag)).await;
    assert_eq!(status, 200, "the old ETag no longer matches");
    assert_ne!(etag2, etag);
    assert!(body2.contains("demo-2.0-py3-none-any.whl"), "{body2}");

    // A foreign writer rewriting the page file in place.
    let file = server.store_dir().join(format!("{ROOT}simple/demo/index.html"));
    std::thread::sleep(std::time::Duration::from_millis(20));
    let rewritten = body2.replace("demo-2.0", "demo-2.1");
    std::fs::write(&file, &rewritten).unwrap();
    let (status, etag3, body3) = get(&server, &page, None).await;
    assert_eq!((status, body3), (200, rewritten));
    assert_ne!(etag3, etag2);

    // Removed: not found at once.
    std::fs::remove_file(&file).unwrap();
    assert_eq!(get(&server, &page, None).await.0, 404);
    server.stop().await;
}
