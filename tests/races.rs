//! Concurrent writers never lose a file: uploads racing through one server, and separate
//! `quarry index` processes racing on one directory.

use std::sync::Arc;
use std::time::Duration;

use quarry_store::{LocalStore, PutOptions, StoreExt};
use quarry_tests::{ROOT, TestServer, WheelSpec, assert_pages_complete, assert_success, quarry_bin, run};

const TRIALS: usize = 20;

fn specs(trial: usize, count: usize) -> Vec<WheelSpec> {
    (0..count).map(|i| WheelSpec::new(&format!("pkg-{}", i % 8), &format!("{trial}.{i}"))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_concurrent_uploads_all_land_on_every_page() {
    for trial in 0..TRIALS {
        let server = TestServer::start().await;
        let files = specs(trial, 32);
        let uploads = files.iter().map(|spec| server.upload(spec));
        futures_util::future::join_all(uploads).await;
        assert_pages_complete(&server, &files).await;
        server.stop().await;
    }
}

async fn put_wheel(store: &LocalStore, spec: &WheelSpec) {
    let key = quarry_store::Key::new(format!("{ROOT}{}", spec.filename())).unwrap();
    store.put_bytes(&key, spec.build().into(), PutOptions::default()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn racing_index_processes_converge() {
    for trial in 0..TRIALS {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(LocalStore::open(dir.path()).unwrap());
        let files = specs(trial, 24);
        // Half dropped in as plain files (no recorded sha256: the indexer streams them), half
        // through the store (sha256 recorded).
        let root_dir = dir.path().join(ROOT);
        std::fs::create_dir_all(&root_dir).unwrap();
        for spec in &files[..12] {
            spec.write_to(&root_dir);
        }
        let index = || {
            let mut cmd = tokio::process::Command::new(quarry_bin());
            cmd.arg("index").arg(dir.path()).env("RUST_LOG", "warn");
            run(cmd, Duration::from_secs(60))
        };
        // The first indexer starts on half the files; the rest land while it runs, and a
        // second indexer starts after them.
        let first = tokio::spawn(index());
        for spec in &files[12..] {
            put_wheel(&store, spec).await;
        }
        let second = index().await;
        let first = first.await.unwrap();
        assert_success(&first, "first quarry index");
        assert_success(&second, "second quarry index");

        // Serve what they wrote (read-only; the server's start-up does not reindex).
        let server = TestServer::start_in_store(dir).await;
        assert_pages_complete(&server, &files).await;
        server.stop().await;
    }
}
