//! Inspecting native packages (`.deb`, `.rpm`) into entries.
//!
//! A file of at most 64 MiB is read once, with one GET and no HEAD, and hashed with MD5, SHA-1
//! and SHA-256 (apt's `Packages` carries all three); a small one is kept in memory and parsed
//! from there. A larger file is HEADed: without a recorded sha256 it is streamed once through
//! the hashers; with one it is never read whole: its control member or headers come from
//! ranged reads, and its entry has SHA-256 only.
//!
//! The indexer inspects files in batches, each batch a task of its own on the runtime's
//! workers (`Indexer::inspect_batched`), so packages are decompressed and hashed on every core.

use std::sync::Arc;

use bytes::Bytes;
use quarry_store::{ObjectMeta, Store};

use crate::InspectError;
use crate::deb::{DebReadError, read_deb_control};
use crate::rpmhead::{RpmInfo, header_span};
use crate::source::{RangeSource, Source, hash_body, read_whole};
use crate::state::Entry;

/// Files up to this size are read whole for their MD5 and SHA-1 even when the sha256 is known.
const HASH_ALL_LIMIT: u64 = 64 * 1024 * 1024;
/// Files up to this size that are read whole anyway are parsed from memory.
const KEEP_LIMIT: u64 = 8 * 1024 * 1024;

/// The entry's digests and size, and the bytes when they were kept. A file listed at most
/// [`HASH_ALL_LIMIT`] long is read whole with one GET (its recorded sha256 would not spare the
/// read: MD5 and SHA-1 are needed too); a larger one (as listed, or as the GET finds it) is
/// HEADed, and with a recorded sha256 it is never read whole.
async fn read_package(store: &dyn Store, object: &ObjectMeta) -> Result<(Entry, Option<Bytes>), InspectError> {
    let key = &object.key;
    let empty = || InspectError::Rejected(format!("{} is empty", key.filename()));
    let mut got = None;
    if object.size <= HASH_ALL_LIMIT {
        // Grown since the listing: its body is left unread.
        got = Some(store.get(key, None).await?).filter(|got| got.meta.size <= HASH_ALL_LIMIT);
    }
    if got.is_none() {
        let listed = object.sha256.is_some() && object.size > HASH_ALL_LIMIT;
        let meta = if listed { object.clone() } else { store.head(key).await? };
        if meta.size == 0 {
            return Err(empty());
        }
        if let Some(sha256) = meta.sha256.clone().filter(|_| meta.size > HASH_ALL_LIMIT) {
            return Ok((Entry::stored(object, &meta, sha256), None));
        }
    }
    let whole = match got {
        Some(got) => hash_body(key, got, KEEP_LIMIT, true).await?,
        None => read_whole(store, key, KEEP_LIMIT, true).await?,
    };
    if whole.meta.size == 0 {
        return Err(empty());
    }
    let entry = Entry { md5: whole.md5, sha1: whole.sha1, ..Entry::stored(object, &whole.meta, whole.sha256) };
    Ok((entry, whole.bytes))
}

/// Read a `.deb` or `.rpm` into an entry (filename = the key's file name; the caller sets the
/// path relative to its root). The indexer runs its inspections in batches, each a task of its
/// own (`Indexer::inspect_batched`), so decompression and hashing already use every worker.
pub(crate) async fn inspect_native(store: &Arc<dyn Store>, object: &ObjectMeta) -> Result<Entry, InspectError> {
    let key = &object.key;
    let name = key.filename().to_owned();
    if name.ends_with(".deb")
        && let Some(problem) = crate::deb::pool_name_problem(&name)
    {
        return Err(InspectError::Rejected(problem));
    }
    let (mut entry, kept) = read_package(store.as_ref(), object).await?;
    let mut source = Source::new(kept, store.as_ref(), key, entry.size);
    let refuse = |e: &dyn std::fmt::Display| InspectError::Rejected(format!("{name}: {e}"));
    if name.ends_with(".deb") {
        entry.deb = Some(std::sync::Arc::new(read_deb_control(&mut source).await.map_err(|e| match e {
            DebReadError::Deb(e) => refuse(&e),
            DebReadError::Store(e) => InspectError::Store(e),
        })?));
    } else {
        let span = header_span(&mut source).await?.map_err(|e| refuse(&e))?;
        let headers = source.range(0, span.header_end).await?;
        entry.rpm = Some(std::sync::Arc::new(crate::state::Payload::new(
            RpmInfo::from_headers(&headers, span).map_err(|e| refuse(&e))?,
        )));
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use md5::Digest as _;
    use quarry_store::{CountingStore, Key, MemoryStore, PutOptions, StoreExt};

    use super::*;

    async fn stored(store: &dyn Store, name: &str, body: Vec<u8>) -> ObjectMeta {
        let key = Key::new(format!("7-linux/packages/{name}")).unwrap();
        store.put_bytes(&key, Bytes::from(body), PutOptions::default()).await.unwrap();
        // As a listing without recorded digests gives it.
        ObjectMeta { sha256: None, ..store.head(&key).await.unwrap() }
    }

    /// On a worker task and on the test's own task,
    /// a package costs one GET and no HEAD, its three digests are the file's, and broken or
    /// empty packages are refused with their reason.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn packages_are_read_with_one_get_on_any_runtime() {
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let (_, deb) = crate::reindex::scale_tests::deb(7);
        let (_, rpm) = crate::reindex::scale_tests::rpm(8);
        let objects = [
            stored(memory.as_ref(), "deb/pool/main/a.deb", deb.clone()).await,
            stored(memory.as_ref(), "rpm/x86_64/b.rpm", rpm.clone()).await,
        ];
        let counting = Arc::new(CountingStore::new(memory.clone()));
        let store: Arc<dyn Store> = counting.clone();
        for (object, body) in objects.iter().zip([&deb, &rpm]) {
            let (task_store, task_object) = (store.clone(), object.clone());
            let spawned =
                tokio::spawn(async move { inspect_native(&task_store, &task_object).await }).await.unwrap().unwrap();
            let here = inspect_native(&store, object).await.unwrap();
            assert_eq!(spawned, here);
            assert_eq!(spawned.md5.as_deref(), Some(hex::encode(md5::Md5::digest(body)).as_str()));
            assert_eq!(spawned.sha1.as_deref(), Some(hex::encode(sha1::Sha1::digest(body)).as_str()));
            assert_eq!(spawned.sha256, hex::encode(sha2::Sha256::digest(body)));
            assert_eq!(spawned.size, body.len() as u64);
        }
        let counts = counting.counts();
        assert_eq!((counts.head, counts.get), (0, 4), "{counts}");

        let refused = |r: Result<Entry, InspectError>| match r {
            Err(InspectError::Rejected(reason)) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let empty = stored(memory.as_ref(), "deb/pool/main/empty.deb", Vec::new()).await;
        assert!(refused(inspect_native(&store, &empty).await).contains("empty.deb is empty"));
        let garbage = stored(memory.as_ref(), "deb/pool/main/junk.deb", b"junk".to_vec()).await;
        assert!(refused(inspect_native(&store, &garbage).await).contains("not a Debian package"));
        let truncated = stored(memory.as_ref(), "rpm/x86_64/cut.rpm", rpm[..200].to_vec()).await;
        assert!(refused(inspect_native(&store, &truncated).await).contains("cut.rpm"));
    }

    /// A package larger than the hash-all limit with a recorded sha256 is never read whole,
    /// even when the listing still gave a small size (the GET finds it large and is dropped).
    #[tokio::test]
    async fn a_large_package_with_a_recorded_sha256_is_read_by_ranges_only() {
        let memory: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let control = "Package: pkg00003\nVersion: 1.0-3\nArchitecture: amd64\nDescription: big\n";
        let data = vec![0; (HASH_ALL_LIMIT + 1) as usize];
        let big = quarry_inspect::deb::test_support::build_deb_with_data(control, "xz", ("data.tar", data));
        let object = stored(memory.as_ref(), "deb/pool/main/big.deb", big.clone()).await;
        let sha256 = hex::encode(sha2::Sha256::digest(&big));
        assert_eq!(memory.head(&object.key).await.unwrap().sha256.as_deref(), Some(sha256.as_str()));
        let counting = Arc::new(CountingStore::new(memory.clone()));
        let store: Arc<dyn Store> = counting.clone();
        for listed_size in [object.size, 100] {
            let listed = ObjectMeta { size: listed_size, ..object.clone() };
            let entry = inspect_native(&store, &listed).await.unwrap();
            assert_eq!((entry.sha256.as_str(), entry.size), (sha256.as_str(), big.len() as u64));
            assert_eq!((entry.md5, entry.sha1), (None, None), "not read whole");
            assert_eq!(entry.deb.unwrap().package(), "pkg00003");
        }
        assert_eq!(counting.counts().head, 2, "{}", counting.counts());
    }
}
