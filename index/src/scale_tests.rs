//! Cost of one more package in a big apt or dnf repo: the store operations a `+1 .deb` or
//! `+1 .rpm` reindex makes do not grow with the repo, and what it writes is the repo's indexes,
//! not one object per package. (The memory store lists up to 100,000 keys a page; on S3 the
//! listing is one page per 1,000 files, the O(root) term the scoped listing removes.)

use std::sync::Arc;

use bytes::Bytes;
use quarry_store::{CountingStore, Key, MemoryStore, OpCounts, PutOptions, Store, StoreExt};

use crate::{Indexer, RepoRoot};

const DEB_ROOT: &str = "7-linux/packages/deb/";
const RPM_ROOT: &str = "7-linux/packages/rpm/x86_64/";

/// A minimal `.deb` for package `n` (gzip members: building thousands stays quick).
fn deb(n: usize) -> (String, Vec<u8>) {
    let control = format!(
        "Package: pkg{n:05}\nVersion: 1.0-{n}\nArchitecture: amd64\nMaintainer: Q <q@example.com>\nDescription: package {n}\n"
    );
    (format!("pool/main/pkg{n:05}_1.0-{n}_amd64.deb"), crate::deb::tests::build_deb(&control, "gz"))
}

/// A minimal `.rpm` for package `n`: one small file (uncompressed payload).
fn rpm(n: usize) -> (String, Vec<u8>) {
    let name = format!("pkg{n:05}");
    let config = rpm::BuildConfig::default().compression(rpm::CompressionType::None).source_date(1_700_000_000);
    let package = rpm::PackageBuilder::new(&name, "1.0", "MIT", "x86_64", "a package")
        .using_config(config)
        .release(n.to_string())
        .with_file_contents(format!("{n}\n"), rpm::FileOptions::new(format!("/usr/share/{name}/n")))
        .expect("a valid file entry")
        .build()
        .expect("a valid package");
    let mut out = Vec::new();
    package.write(&mut out).expect("writing to memory");
    (format!("{name}-1.0-{n}.x86_64.rpm"), out)
}

async fn put(store: &dyn Store, root: &str, (name, body): (String, Vec<u8>)) {
    let key = Key::new(format!("{root}{name}")).unwrap();
    store.put_bytes(&key, Bytes::from(body), PutOptions::default()).await.unwrap();
}

/// What indexing package `size` costs in a repo already holding `size` packages: the store
/// operations (counted) and the bytes the reindex wrote.
async fn plus_one(root: &str, size: usize, make: fn(usize) -> (String, Vec<u8>)) -> (OpCounts, u64) {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let repo = RepoRoot::new(root).unwrap();
    let packages: Vec<_> = (0..size).map(make).collect();
    for package in packages {
        put(memory.as_ref(), root, package).await;
    }
    Indexer::new(memory.clone()).reindex(&repo).await.unwrap();
    put(memory.as_ref(), root, make(size)).await;
    let counting = Arc::new(CountingStore::new(memory.clone()));
    let report = Indexer::new(counting.clone()).reindex(&repo).await.unwrap();
    assert_eq!(report.added.len(), 1, "{report}");
    let mut written = 0;
    for key in &report.written {
        written += memory.head(&Key::new(key.clone()).unwrap()).await.unwrap().size;
    }
    (counting.counts(), written)
}

async fn assert_constant(root: &str, make: fn(usize) -> (String, Vec<u8>)) {
    let (small, small_bytes) = plus_one(root, 200, make).await;
    let (big, big_bytes) = plus_one(root, 2000, make).await;
    let costs =
        format!("+1 into 200: {small}, {small_bytes} bytes written; into 2,000: {big}, {big_bytes} bytes written");
    tracing::info!("{costs}");
    assert_eq!(small, big, "store operations grow with the repo: {costs}");
    assert!(big.put <= 16, "{big}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_deb_costs_the_same_operations_at_200_and_2000() {
    assert_constant(DEB_ROOT, deb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_rpm_costs_the_same_operations_at_200_and_2000() {
    assert_constant(RPM_ROOT, rpm).await;
}
