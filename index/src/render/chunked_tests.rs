//! `+1 .deb` / `+1 .rpm` into a 2,000-package repo compresses a bounded number of chunks, not
//! the repo, and still writes what a from-scratch render writes, byte for byte.

use std::sync::Arc;

use bytes::Bytes;
use quarry_store::{Key, MemoryStore, PutOptions, Store, StoreExt};

use crate::reindex::scale_tests::{DEB_ROOT, RPM_ROOT, deb, rpm};
use crate::render::chunked::{ChunkCache, previous};
use crate::{Indexer, RepoRoot};

const SIZE: usize = 2000;

async fn put(store: &dyn Store, root: &str, (name, body): (String, Vec<u8>)) {
    let key = Key::new(format!("{root}{name}")).unwrap();
    store.put_bytes(&key, Bytes::from(body), PutOptions::default()).await.unwrap();
}

/// Index `SIZE` packages, land one more (numbered `extra`), and reindex; then render the new
/// state again with the chunks read back from the previous outputs (what the reindex did) and
/// from nothing. Returns the caches used for the incremental and the from-scratch render.
async fn plus_one(root: &str, make: fn(usize) -> (String, Vec<u8>), extra: usize) -> (ChunkCache, ChunkCache) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let repo = RepoRoot::new(root, &Default::default()).unwrap();
    for n in (0..SIZE + 1).filter(|&n| n != extra) {
        put(store.as_ref(), root, make(n)).await;
    }
    let indexer = Indexer::new(store.clone(), Default::default());
    indexer.reindex(&repo).await.unwrap();
    let old = crate::read_state(store.as_ref(), &repo).await.unwrap().unwrap();
    put(store.as_ref(), root, make(extra)).await;
    let cache = previous(store.as_ref(), &repo, &old, true).await;
    let (gz, xz) = cache.len();
    assert!(gz > 4 && (xz == 0 || xz == gz), "the previous outputs' chunks are read back: {gz} gz, {xz} xz");
    let report = indexer.reindex(&repo).await.unwrap();
    assert_eq!(report.added.len(), 1, "{report}");
    let new = crate::read_state(store.as_ref(), &repo).await.unwrap().unwrap();
    let options = crate::IndexConfig::default().apt;
    let fresh = ChunkCache::new();
    let (incremental, scratch) = match repo.kind() {
        crate::RepoKind::Apt => (
            crate::render::apt::render_cached(&new, &options, None, &cache).unwrap(),
            crate::render::apt::render_cached(&new, &options, None, &fresh).unwrap(),
        ),
        _ => {
            let incremental = crate::render::dnf::render_from(&new, Some(&old), None, &cache).unwrap();
            // Only the packages of the chunks that changed were read and rendered.
            let read = new.entries.values().filter(|e| e.rpm.as_ref().is_some_and(|r| r.is_read())).count();
            assert!(read > 0 && read < SIZE / 3, "{read} of {} records read for one more package", SIZE + 1);
            let whole = crate::render::dnf::render_cached(&new, None, &ChunkCache::new()).unwrap();
            assert_eq!(incremental, whole, "taking chunks whole gives what rendering them gives");
            (incremental, crate::render::dnf::render_cached(&new, None, &fresh).unwrap())
        }
    };
    assert_eq!(incremental, scratch, "reused chunks give the from-scratch bytes");
    for page in scratch {
        let (_, stored) = store.get_bytes(&Key::new(format!("{root}{}", page.path)).unwrap(), 1 << 30).await.unwrap();
        assert!(stored[..] == page.body[..], "{} as the reindex stored it differs from a fresh render", page.path);
    }
    (cache, fresh)
}

/// The `+1` render compressed at most `chunks` chunks, and under a tenth of the bytes a
/// from-scratch render compresses.
fn assert_bounded((cache, fresh): (ChunkCache, ChunkCache), chunks: u64, what: &str) {
    let (done, all) = (cache.compressed_bytes(), fresh.compressed_bytes());
    assert!(cache.compressed_chunks() <= chunks, "{what} compressed {} chunks", cache.compressed_chunks());
    assert!(done * 10 < all, "{what} compressed {done} bytes, a full render {all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_deb_compresses_a_chunk_or_two_of_2000_packages() {
    // First, last and middle of the name order.
    for extra in [0, SIZE / 2, SIZE] {
        // gzip and xz each: the chunk the package lands in (two when it starts a new cut).
        assert_bounded(plus_one(DEB_ROOT, deb, extra).await, 4, "+1 .deb");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_rpm_compresses_a_chunk_or_two_of_each_document() {
    for extra in [0, SIZE / 2, SIZE] {
        // primary, filelists, other: the header (package count) and one or two chunks each.
        assert_bounded(plus_one(RPM_ROOT, rpm, extra).await, 9, "+1 .rpm");
    }
}

/// A previous output changed behind the indexer's back (its sha256 no longer the state's) is
/// not learnt from: the reindex compresses those chunks again and still writes the right bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_previous_output_is_not_reused() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let repo = RepoRoot::new(DEB_ROOT, &Default::default()).unwrap();
    for n in 0..300 {
        put(store.as_ref(), DEB_ROOT, deb(n)).await;
    }
    let indexer = Indexer::new(store.clone(), Default::default());
    indexer.reindex(&repo).await.unwrap();
    let xz = Key::new(format!("{DEB_ROOT}dists/stable/main/binary-amd64/Packages.xz")).unwrap();
    let (_, good) = store.get_bytes(&xz, 1 << 30).await.unwrap();
    let mut bad = good.to_vec();
    let at = bad.len() / 2;
    bad[at] ^= 0xFF;
    store.put_bytes(&xz, Bytes::from(bad), PutOptions::default()).await.unwrap();
    let old = crate::read_state(store.as_ref(), &repo).await.unwrap().unwrap();
    let cache = previous(store.as_ref(), &repo, &old, true).await;
    assert!(cache.len().0 > 1 && cache.len().1 == 0, "only Packages.gz is learnt from: {:?}", cache.len());
    put(store.as_ref(), DEB_ROOT, deb(300)).await;
    indexer.reindex(&repo).await.unwrap();
    let new = crate::read_state(store.as_ref(), &repo).await.unwrap().unwrap();
    let pages = crate::render::apt::render(&new, &crate::IndexConfig::default().apt, None).unwrap();
    let fresh = pages.iter().find(|p| p.path.ends_with("binary-amd64/Packages.xz")).unwrap();
    let (_, stored) = store.get_bytes(&xz, 1 << 30).await.unwrap();
    assert!(stored[..] == fresh.body[..], "the reindex wrote a sound Packages.xz");
}
