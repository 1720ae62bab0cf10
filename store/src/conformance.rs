//! The behaviour every backend must show, as one suite run against each of them (and, with
//! the `conformance` feature, against backends defined in other crates).
#![allow(clippy::missing_panics_doc)]

use std::sync::Arc;

use bytes::Bytes;

use crate::{ByteRange, Condition, Key, ListOptions, PutOptions, Store, StoreError, StoreExt, sha256_hex};

fn key(s: &str) -> Key {
    Key::new(s).expect("valid key")
}

/// Run every check against `store`, which must start empty. The contention check runs only
/// where the store declares its conditional puts atomic ([`crate::ConditionalWrites::Atomic`]):
/// moto and s3s-fs check preconditions, but a check and a write can interleave.
pub async fn run_all(store: Arc<dyn Store>) {
    let atomic = store.conditional_writes() == crate::ConditionalWrites::Atomic;
    roundtrip(store.as_ref()).await;
    ranges(store.as_ref()).await;
    conditional_puts(store.as_ref()).await;
    awkward_keys(store.as_ref()).await;
    refused_bodies(store.as_ref()).await;
    files(store.as_ref()).await;
    listing(store.as_ref()).await;
    unchanged(store.as_ref()).await;
    if atomic {
        compare_and_swap_under_contention(store.clone()).await;
    }
}

async fn roundtrip(store: &dyn Store) {
    let k = key("conf/a/object.bin");
    let data = Bytes::from_static(b"hello, quarry");
    let put = store.put_bytes(&k, data.clone(), PutOptions::default()).await.unwrap();
    assert_eq!(put.size, data.len() as u64);
    assert_eq!(put.sha256, sha256_hex(&data));
    let head = store.head(&k).await.unwrap();
    assert_eq!(head.size, data.len() as u64);
    assert_eq!(head.etag, put.etag);
    assert_eq!(head.sha256.as_deref(), Some(put.sha256.as_str()));
    let (_, got) = store.get_bytes(&k, 1 << 20).await.unwrap();
    assert_eq!(got, data);
    assert!(store.head(&key("conf/missing")).await.unwrap_err().is_not_found());
    assert!(store.get(&key("conf/missing"), None).await.unwrap_err().is_not_found());
    store.delete(&k).await.unwrap();
    store.delete(&k).await.unwrap();
    assert!(store.head(&k).await.unwrap_err().is_not_found());
}

/// `unchanged`, where a store answers it, agrees with `head`: true for the current ETag only,
/// false once the object is replaced or gone.
async fn unchanged(store: &dyn Store) {
    let k = key("conf/unchanged/page.html");
    let first = store.put_bytes(&k, Bytes::from_static(b"one"), PutOptions::default()).await.unwrap();
    if store.unchanged(&k, &first.etag).is_none() {
        return;
    }
    assert_eq!(store.unchanged(&k, &first.etag), Some(true));
    assert_eq!(store.unchanged(&k, &format!("{}0", first.etag)), Some(false));
    assert_eq!(store.unchanged(&k, &first.etag[..first.etag.len() - 1]), Some(false));
    assert_eq!(store.unchanged(&key("conf/unchanged/other.html"), &first.etag), Some(false));
    let second = store.put_bytes(&k, Bytes::from_static(b"two!"), PutOptions::default()).await.unwrap();
    assert_eq!(store.unchanged(&k, &first.etag), Some(false));
    assert_eq!(store.unchanged(&k, &second.etag), Some(true));
    assert_eq!(store.head(&k).await.unwrap().etag, second.etag);
    store.delete(&k).await.unwrap();
    assert_eq!(store.unchanged(&k, &second.etag), Some(false));
}

async fn ranges(store: &dyn Store) {
    let k = key("conf/ranges.bin");
    let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    store.put_bytes(&k, Bytes::from(data.clone()), PutOptions::default()).await.unwrap();
    assert_eq!(store.get_range(&k, 100, 50).await.unwrap().as_ref(), &data[100..150]);
    let got = store.get(&k, Some(ByteRange::Suffix(10))).await.unwrap();
    assert_eq!(got.range, (9_990, 10_000));
    let got = store.get(&k, Some(ByteRange::From(9_999))).await.unwrap();
    assert_eq!(crate::collect(got.body, 10).await.unwrap().as_ref(), &data[9_999..]);
    assert!(matches!(
        store.get(&k, Some(ByteRange::From(10_000))).await.unwrap_err(),
        StoreError::RangeNotSatisfiable { size: 10_000, .. }
    ));
    store.delete(&k).await.unwrap();
}

async fn conditional_puts(store: &dyn Store) {
    let k = key("conf/state.json");
    let first =
        store.put_bytes(&k, Bytes::from_static(b"1"), PutOptions::condition(Condition::IfNoneMatch)).await.unwrap();
    let again = store.put_bytes(&k, Bytes::from_static(b"x"), PutOptions::condition(Condition::IfNoneMatch)).await;
    assert!(again.unwrap_err().is_conflict(), "If-None-Match on an existing key must conflict");
    let second = store
        .put_bytes(&k, Bytes::from_static(b"2"), PutOptions::condition(Condition::IfMatch(first.etag.clone())))
        .await
        .unwrap();
    assert_ne!(first.etag, second.etag);
    let stale =
        store.put_bytes(&k, Bytes::from_static(b"3"), PutOptions::condition(Condition::IfMatch(first.etag))).await;
    assert!(stale.unwrap_err().is_conflict(), "If-Match with a stale ETag must conflict");
    let missing = store
        .put_bytes(&key("conf/nope"), Bytes::from_static(b"4"), PutOptions::condition(Condition::IfMatch(second.etag)))
        .await;
    assert!(missing.unwrap_err().is_conflict(), "If-Match on a missing key must conflict");
    assert_eq!(store.get_bytes(&k, 10).await.unwrap().1.as_ref(), b"2");
    store.delete(&k).await.unwrap();
}

async fn awkward_keys(store: &dyn Store) {
    for name in ["conf/with space.whl", "conf/torch-2.9.1+rocm7.10.0-cp312-none-any.whl", "conf/ünïcode.txt"] {
        let k = key(name);
        store.put_bytes(&k, Bytes::from(name.as_bytes().to_vec()), PutOptions::default()).await.unwrap();
        assert_eq!(store.get_bytes(&k, 1024).await.unwrap().1.as_ref(), name.as_bytes());
        let listed = store.list_all("conf/", false).await.unwrap();
        assert!(listed.objects.iter().any(|o| o.key == k), "{name} not listed");
        store.delete(&k).await.unwrap();
    }
}

async fn refused_bodies(store: &dyn Store) {
    let k = key("conf/refused.bin");
    let wrong = PutOptions { sha256: Some("00".repeat(32)), ..PutOptions::default() };
    assert!(matches!(
        store.put_bytes(&k, Bytes::from_static(b"data"), wrong).await.unwrap_err(),
        StoreError::DigestMismatch { .. }
    ));
    let small = PutOptions { max_size: Some(3), ..PutOptions::default() };
    assert!(matches!(
        store.put_bytes(&k, Bytes::from_static(b"data"), small).await.unwrap_err(),
        StoreError::TooLarge { .. }
    ));
    let broken: crate::ByteStream = Box::pin(futures_util::stream::iter(vec![
        Ok(Bytes::from_static(b"partial")),
        Err(std::io::Error::other("client went away")),
    ]));
    assert!(matches!(store.put(&k, broken, PutOptions::default()).await.unwrap_err(), StoreError::Body { .. }));
    assert!(store.head(&k).await.unwrap_err().is_not_found(), "a refused body must leave nothing behind");
}

/// `put_file` stores a file's bytes as `put` would, copied or given, checks them like any body,
/// and never changes the caller's file; `open_file`, where a store answers it, reads the object
/// at the version it opened.
async fn files(store: &dyn Store) {
    use std::io::Read as _;
    let dir = std::env::temp_dir().join(format!(
        "quarry-conformance-{}-{}",
        std::process::id(),
        sha256_hex(store.describe().as_bytes())
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let data = b"archive bytes ".repeat(10_000);
    for (i, handover) in [crate::FileHandover::Copy, crate::FileHandover::Give].into_iter().enumerate() {
        let path = dir.join(format!("file-{i}"));
        std::fs::write(&path, &data).unwrap();
        let k = key(&format!("conf/files/{i}.tar.zst"));
        // A copied file's bytes are checked against its digest; a given one's digest may be
        // taken as the writer's word.
        let wrong = PutOptions { sha256: Some("00".repeat(32)), ..PutOptions::default() };
        if handover == crate::FileHandover::Copy {
            assert!(matches!(
                store.put_file(&k, &path, handover, wrong).await.unwrap_err(),
                StoreError::DigestMismatch { .. }
            ));
        }
        let small = PutOptions { max_size: Some(10), ..PutOptions::default() };
        assert!(matches!(store.put_file(&k, &path, handover, small).await.unwrap_err(), StoreError::TooLarge { .. }));
        assert!(store.head(&k).await.unwrap_err().is_not_found(), "a refused file must leave nothing behind");
        let declared = PutOptions { sha256: Some(sha256_hex(&data)), ..PutOptions::default() };
        let put = store.put_file(&k, &path, handover, declared).await.unwrap();
        assert_eq!((put.size, put.sha256.as_str()), (data.len() as u64, sha256_hex(&data).as_str()));
        assert_eq!(store.head(&k).await.unwrap().sha256.as_deref(), Some(put.sha256.as_str()));
        assert_eq!(store.get_bytes(&k, 1 << 20).await.unwrap().1, data.as_slice());
        assert_eq!(std::fs::read(&path).unwrap(), data, "the caller's file is unchanged");
        if let Some(mut opened) = store.open_file(&k).await.unwrap() {
            store.put_bytes(&k, Bytes::from_static(b"replaced"), PutOptions::default()).await.unwrap();
            let mut read = Vec::new();
            opened.read_to_end(&mut read).unwrap();
            assert_eq!(read, data, "an opened object keeps the version it opened");
        }
        store.delete(&k).await.unwrap();
    }
    let (none, absent) = (key("conf/files/none"), dir.join("absent"));
    let missing = store.put_file(&none, &absent, crate::FileHandover::Copy, PutOptions::default()).await;
    assert!(matches!(missing.unwrap_err(), StoreError::Body { .. }));
    assert!(matches!(store.open_file(&key("conf/files/none")).await, Ok(None) | Err(StoreError::NotFound(_))));
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn listing(store: &dyn Store) {
    let n = 1_050;
    for i in 0..n {
        let k = key(&format!("list/flat/{i:05}.whl"));
        store.put_bytes(&k, Bytes::from_static(b"x"), PutOptions::default()).await.unwrap();
    }
    for k in ["list/flat/sub/a.txt", "list/flat/sub/b.txt", "list/flat/zdir/c.txt", "list/other.txt"] {
        store.put_bytes(&key(k), Bytes::from_static(b"y"), PutOptions::default()).await.unwrap();
    }
    let first = store.list("list/flat/", ListOptions { delimited: true, ..ListOptions::default() }).await.unwrap();
    assert_eq!(first.objects.len() + first.common_prefixes.len(), 1000, "pages hold at most 1000 items");
    assert!(first.next.is_some());
    let all = store.list_all("list/flat/", true).await.unwrap();
    assert_eq!(all.objects.len(), n);
    assert_eq!(all.common_prefixes, ["list/flat/sub/", "list/flat/zdir/"]);
    let keys: Vec<&str> = all.objects.iter().map(|o| o.key.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "listings are in key order");
    let deep = store.list_all("list/flat/", false).await.unwrap();
    assert_eq!(deep.objects.len(), n + 3);
    assert!(deep.common_prefixes.is_empty());
    let prefixed = store.list_all("list/flat/0100", false).await.unwrap();
    assert_eq!(prefixed.objects.len(), 10);
    assert!(store.list_all("list/nothing-here/", true).await.unwrap().objects.is_empty());
    let page = store.list("list/flat/", ListOptions { max_keys: Some(7), ..ListOptions::default() }).await.unwrap();
    assert_eq!(page.objects.len(), 7);
    let next = store
        .list(
            "list/flat/",
            ListOptions { continuation: page.next.clone(), max_keys: Some(7), ..ListOptions::default() },
        )
        .await
        .unwrap();
    assert_eq!(next.objects[0].key.as_str(), "list/flat/00007.whl");
}

/// Many writers bump one counter with compare-and-swap; none may be lost.
async fn compare_and_swap_under_contention(store: Arc<dyn Store>) {
    let (expected, got) = contended_increments(store, 16, 10).await;
    assert_eq!(got, expected, "conditional puts lost updates under contention");
}

/// `writers` tasks each add `increments` to a counter object by compare-and-swap; returns the
/// expected and the final count.
pub async fn contended_increments(store: Arc<dyn Store>, writers: u64, increments: u64) -> (u64, u64) {
    let k = key("conf/counter");
    store.put_bytes(&k, Bytes::from_static(b"0"), PutOptions::condition(Condition::IfNoneMatch)).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let (store, k) = (store.clone(), k.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..increments {
                loop {
                    let (meta, data) = store.get_bytes(&k, 64).await.unwrap();
                    let n: u64 = std::str::from_utf8(&data).unwrap().parse().unwrap();
                    let body = Bytes::from((n + 1).to_string());
                    match store.put_bytes(&k, body, PutOptions::condition(Condition::IfMatch(meta.etag))).await {
                        Ok(_) => break,
                        Err(e) if e.is_conflict() => tokio::task::yield_now().await,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (_, data) = store.get_bytes(&k, 64).await.unwrap();
    store.delete(&k).await.unwrap();
    (writers * increments, std::str::from_utf8(&data).unwrap().parse().unwrap())
}

/// A memory store that declares it cannot do conditional writes (as Garage, which ignores
/// `If-None-Match`), for testing that such stores are refused.
#[derive(Debug, Default)]
pub struct NoConditionalWrites(pub crate::MemoryStore);

#[async_trait::async_trait]
impl Store for NoConditionalWrites {
    fn describe(&self) -> String {
        "memory without conditional writes".into()
    }
    fn conditional_writes(&self) -> crate::ConditionalWrites {
        crate::ConditionalWrites::Unsupported
    }
    async fn head(&self, key: &Key) -> crate::Result<crate::ObjectMeta> {
        self.0.head(key).await
    }
    async fn get(&self, key: &Key, range: Option<ByteRange>) -> crate::Result<crate::GetObject> {
        self.0.get(key, range).await
    }
    async fn put(&self, key: &Key, body: crate::ByteStream, options: PutOptions) -> crate::Result<crate::PutResult> {
        self.0.put(key, body, options).await
    }
    async fn list(&self, prefix: &str, options: ListOptions) -> crate::Result<crate::ListPage> {
        self.0.list(prefix, options).await
    }
    async fn delete(&self, key: &Key) -> crate::Result<()> {
        self.0.delete(key).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn memory_store_conforms() {
        run_all(Arc::new(crate::MemoryStore::default())).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn local_store_conforms() {
        let dir = tempfile::tempdir().unwrap();
        run_all(Arc::new(crate::LocalStore::open(dir.path()).unwrap())).await;
    }

    #[tokio::test]
    async fn local_store_keeps_its_own_files_out_of_listings() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::LocalStore::open(dir.path()).unwrap();
        store.put_bytes(&key("a.txt"), Bytes::from_static(b"a"), PutOptions::default()).await.unwrap();
        let all = store.list_all("", false).await.unwrap();
        assert_eq!(all.objects.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["a.txt"]);
        // A file replaced behind the store's back loses its recorded sha256.
        std::fs::write(dir.path().join("a.txt"), b"changed").unwrap();
        assert_eq!(store.head(&key("a.txt")).await.unwrap().sha256, None);
    }
}
