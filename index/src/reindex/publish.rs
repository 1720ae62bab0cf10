//! The reindex loop: read state → list the root → inspect new files only → [`plan`] (pure) →
//! publish the planned outputs stage by stage (sidecars first, entry points last) →
//! conditionally commit the state → delete what it no longer lists. A conflict on the commit
//! means another indexer moved the state: start over and republish everything this call
//! wrote, so the last successful commit always follows a full publish of its own pages.
//!
//! Outputs go out by [`Stage`](crate::render::pip::Stage), every output of one stage before any
//! of the next, and only those whose bytes changed: new `.metadata` sidecars and
//! content-addressed objects (`-variants.json`, apt `by-hash/`, dnf `repodata/<sha>-…`), then the
//! indices (pip project pages, apt `Packages`), then what points at them (`simple/index.*`, the
//! find-links `index.html`, apt `Release`), then detached signatures, then the entry points
//! (`InRelease`, `repomd.xml`). Then the state is committed with `If-Match` (`If-None-Match` when
//! new), then stale outputs are deleted.
//!
//! A store whose conditional puts are not atomic ([`ConditionalWrites::Verify`]: moto, s3s-fs;
//! `S3Store` takes Amazon S3 as atomic and any `AWS_ENDPOINT_URL` as verify) gets every commit
//! read back by one more pass: if another writer's state replaced it, that pass republishes this
//! call's pages from the current listing. A store that ignores them
//! ([`ConditionalWrites::Unsupported`]) is refused (`IndexError::UnsafeStore`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::StreamExt;
use quarry_store::{ConditionalWrites, Key, PutOptions, StoreExt};

use crate::error::{IndexError, InspectError};
use crate::reindex::indexer::{Indexer, ProjectScope, Request};
use crate::reindex::inspect::{Inspected, Inspections};
use crate::reindex::plan::{Inspection, Output, Plan, PlanInput, RootListing, plan};
use crate::reindex::report::ReindexReport;
use crate::state::Rejected;
use crate::state::io::{commit_state, ensure_unmoved, etag_value, load_state_bytes, parse_state, serialize_state};
use crate::state::root::{RepoKind, RepoRoot};

/// Largest yank marker read; longer reasons are cut.
const MAX_YANK_REASON: u64 = 1024;
/// Outputs written at once.
const PUBLISH_CONCURRENCY: usize = 16;
/// At most this many outputs per [`Store::put_many`].
const PUBLISH_BATCH: usize = 64;
/// At most this many files per inspection batch (one task, one
/// [`Store::head_and_read_many`] per 64).
const INSPECT_BATCH: usize = 256;

/// Attempts a project's event makes on its own before it reconciles the whole root instead.
const PROJECT_ATTEMPTS: u32 = 2;

/// What carries from one attempt of a reindex to the next.
pub(crate) struct Pass {
    /// Republish every page.
    pub(crate) force_all: bool,
    /// The one project of a pip root an event is about (`None`: the whole root).
    pub(crate) project: Option<ProjectScope>,
    /// Pages written by earlier attempts of this call whose state did not stay committed:
    /// republished by the next attempt.
    pub(crate) dirty: BTreeSet<String>,
    /// The state objects this call just committed and their ETags, to read back.
    pub(crate) expect: Vec<(String, String)>,
    /// Files already inspected, by key (by the caller, or by an earlier attempt): not read
    /// again while their version matches.
    pub(crate) inspected: Inspections,
    /// The state read was found damaged: this call starts from an empty one (every file is
    /// read again).
    pub(crate) rebuild: bool,
    /// Files (by key) indexed as gone although listed ([`Request::leaving`]).
    pub(crate) leaving: BTreeSet<String>,
}

impl Pass {
    /// Verifying a commit (`now`: the state objects as this attempt read them, key and ETag):
    /// another state in the place of one this call committed means racing writers both passed
    /// the precondition, and this call's pages may be the stale ones. One not read again
    /// cannot be vouched for either.
    pub(crate) fn verify(&mut self, now: &BTreeMap<String, Option<String>>) {
        let mine = std::mem::take(&mut self.expect);
        if mine.is_empty() {
            return;
        }
        let kept = |(key, etag): &(String, String)| {
            now.get(key).is_some_and(|found| found.as_deref().map(etag_value) == Some(etag_value(etag)))
        };
        if mine.iter().all(kept) {
            // Still this call's state: its pages went out before it, nothing to redo.
            self.dirty.clear();
        } else {
            tracing::info!("another indexer's state replaced this commit; republishing this call's pages");
        }
    }
}

impl Indexer {
    /// A lost commit race is retried; the retry republishes every page this call wrote before,
    /// since those may have overwritten the winner's newer pages. On a store whose conditional
    /// writes are not atomic ([`ConditionalWrites::Verify`]) a commit is read back: if another
    /// writer's state replaced it, or the listing holds files it lacks, the loop goes on.
    #[tracing::instrument(skip_all, fields(root = %request.root, force = request.force))]
    pub(crate) async fn run_one(&self, request: Request) -> Result<ReindexReport, IndexError> {
        let Request { root, project, force, known, leaving } = request;
        let root = &root;
        let mode = self.store.conditional_writes();
        if mode == ConditionalWrites::Unsupported {
            return Err(IndexError::UnsafeStore(self.store.describe()));
        }
        let project = project.filter(|_| !force && root.kind() == RepoKind::Pip);
        let mut pass = Pass {
            force_all: force,
            project,
            dirty: BTreeSet::new(),
            expect: Vec::new(),
            inspected: known,
            rebuild: false,
            leaving,
        };
        let mut total = ReindexReport { root: root.to_string(), ..ReindexReport::default() };
        for attempt in 1..=self.max_attempts {
            total.attempts = attempt;
            match self.attempt(root, &mut pass).await {
                Ok(report) => {
                    let committed = report.committed;
                    total.absorb(report);
                    if !committed || mode == ConditionalWrites::Atomic {
                        return Ok(total);
                    }
                    // Read back what was committed on the next pass.
                    tracing::debug!(attempt, "verifying the commit");
                    pass.force_all = false;
                }
                Err(IndexError::Store(e)) if e.is_conflict() => {
                    tracing::debug!(attempt, "state moved under us; retrying");
                    pass.expect.clear();
                    // A project's event that lost (a commit, or a root page another event has
                    // not committed yet) is retried once; then one whole-root pass covers every
                    // file landed so far, so a burst of events on one root does not commit the
                    // manifest in turn, losing to the others again and again.
                    if attempt >= PROJECT_ATTEMPTS && pass.project.take().is_some() {
                        tracing::info!(%root, attempt, "contended project event; reconciling the whole root");
                    }
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(IndexError::TooManyConflicts { root: root.to_string(), attempts: self.max_attempts })
    }

    async fn attempt(&self, root: &RepoRoot, pass: &mut Pass) -> Result<ReindexReport, IndexError> {
        if root.kind() == RepoKind::Pip {
            if let Some(project) = pass.project.clone()
                && let Some(report) = self.attempt_project(root, &project, pass).await?
            {
                return Ok(report);
            }
            return self.attempt_split(root, pass).await;
        }
        let store = self.store.as_ref();
        // The state is read before the root is listed (a file a committed state names is then
        // in the listing); it is parsed while the listing runs.
        let (bytes, state_etag) = load_state_bytes(store, root).await?;
        pass.verify(&BTreeMap::from([(root.state_key().to_string(), state_etag.clone())]));
        let (package_prefix, recursive) = root.package_prefix();
        let rebuild = pass.rebuild;
        let parse = async move { if rebuild { crate::RepoState::empty() } else { parse_state(bytes.as_deref()) } };
        // The listing is polled first: its blocking work starts before the parse takes this thread.
        let (listed, old) = futures_util::future::join(store.list_all(&package_prefix, !recursive), parse).await;
        let listing = RootListing::new(root, listed?.objects).without(&pass.leaving);
        // Nothing to index and never indexed: a root that was deleted (a run removed by gc or
        // a lifecycle rule fires one event per object) is not brought back as empty pages.
        if listing.is_empty() && state_etag.is_none() && !pass.force_all {
            return Ok(ReindexReport { root: root.to_string(), ..ReindexReport::default() });
        }
        // The previous compressed indexes are read back while the new files are inspected.
        let unknown = listing.unknown(&old);
        let changed = !unknown.is_empty() || old.entries.keys().any(|k| !listing.files.contains_key(k));
        let (inspected, chunks) = futures_util::future::join(
            async {
                let inspections = self.inspect_unknown(unknown, &mut pass.inspected).await?;
                let yanks = self.read_yank_reasons(listing.markers_to_read(&old, &inspections)).await?;
                Ok::<_, IndexError>((inspections, yanks))
            },
            crate::render::chunked::previous(store, root, &old, changed),
        )
        .await;
        let (inspections, yanks) = inspected?;
        let planned = plan(PlanInput {
            root,
            old: &old,
            committed: state_etag.is_some(),
            listing: &listing,
            inspections,
            yanks,
            config: &self.config,
            now: jiff::Timestamp::now().as_second(),
            force: pass.force_all,
            dirty: &pass.dirty,
            parts: crate::render::pip::Parts::ALL,
            view: None,
            chunks: &chunks,
        });
        let Plan { state, mut report, writes, pages, deletes, unchanged } = match planned {
            Err(IndexError::DamagedState(reason)) if !pass.rebuild => {
                tracing::warn!(%root, %reason, "rebuilding the root's state from its files");
                pass.rebuild = true;
                return Box::pin(self.attempt(root, pass)).await;
            }
            planned => planned?,
        };
        if unchanged {
            return Ok(report);
        }
        // Inspecting took a while: if another indexer committed meanwhile, this attempt would
        // lose anyway, so give up before publishing anything (one HEAD against a page storm).
        if !report.added.is_empty() {
            ensure_unmoved(store, root, state_etag.as_deref()).await?;
        }
        pass.dirty.extend(pages);
        // The state is serialized while the pages are written.
        let publish = async {
            let mut written = Vec::new();
            for outputs in writes.into_values() {
                written.extend(self.publish(outputs).await?);
            }
            Ok::<_, IndexError>(written)
        };
        let (written, serialized) = futures_util::future::join(publish, async { serialize_state(&state) }).await;
        report.written.extend(written?);
        let etag = commit_state(store, root, serialized?, state_etag).await?;
        pass.expect.push((root.state_key().to_string(), etag));
        report.committed = true;
        report.deleted = self.delete_stale(&deletes).await;
        crate::state::io::drop_aside(old.entries.len().max(state.entries.len()), (old, state, listing));
        Ok(report)
    }

    /// Inspect `todo` (name, listed object), `known` first: what each holds, by name. Files
    /// deleted since the listing are left out; any other store error fails the attempt.
    pub(crate) async fn inspect_unknown(
        &self,
        todo: Vec<(String, quarry_store::ObjectMeta)>,
        known: &mut Inspections,
    ) -> Result<BTreeMap<String, Inspection>, IndexError> {
        let mut results = Vec::with_capacity(todo.len());
        let mut unread = Vec::new();
        for (name, object) in todo {
            match known.matching(&object) {
                Some(found) => results.push((name, object, Ok(found))),
                None => unread.push((name, object)),
            }
        }
        results.extend(self.inspect_batched(unread).await);
        let mut inspections = BTreeMap::new();
        for (name, object, result) in results {
            match result {
                Ok(found) => {
                    known.insert(&object.key, found.clone());
                    inspections.insert(name, Inspection::Indexed(Box::new(found)));
                }
                Err(InspectError::Rejected(reason)) => {
                    tracing::warn!(file = %name, %reason, "not indexed");
                    inspections.insert(name, Inspection::Refused(Rejected { etag: object.version(), reason }));
                }
                // Deleted since the listing: the next event sees it gone.
                Err(InspectError::Store(e)) if e.is_not_found() => {}
                Err(InspectError::Store(e)) => return Err(e.into()),
            }
        }
        Ok(inspections)
    }

    /// Inspect each of `todo` (name, listed object): in batches (one
    /// [`Store::head_and_read_many`] each), as many batches in flight as there were single
    /// inspections, each batch its own task so hashing and parsing use every core.
    async fn inspect_batched(
        &self,
        todo: Vec<(String, quarry_store::ObjectMeta)>,
    ) -> Vec<(String, quarry_store::ObjectMeta, Result<Inspected, InspectError>)> {
        let size = todo.len().div_ceil(self.concurrency).clamp(1, INSPECT_BATCH);
        let mut todo = todo.into_iter();
        let batches = std::iter::from_fn(|| {
            let batch: Vec<_> = todo.by_ref().take(size).collect();
            (!batch.is_empty()).then_some(batch)
        });
        let done: Vec<_> = futures_util::stream::iter(batches)
            .map(|batch| {
                let store = self.store.clone();
                // Aborted if this reindex is dropped: nothing is left reading behind it.
                let task = crate::reindex::task::run_owned(async move {
                    let (names, objects): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
                    let results = crate::reindex::inspect::inspect_many(&store, &objects).await;
                    names.into_iter().zip(objects).zip(results).map(|((n, o), r)| (n, o, r)).collect::<Vec<_>>()
                });
                async move { task.await.unwrap_or_else(|e| panic!("inspection task cancelled: {e}")) }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        done.into_iter().flatten().collect()
    }

    /// The reason each marker gives (empty when the marker is gone), by the file it yanks.
    pub(crate) async fn read_yank_reasons(
        &self,
        markers: Vec<(String, Key)>,
    ) -> Result<BTreeMap<String, String>, IndexError> {
        let mut reasons = BTreeMap::new();
        for (target, marker) in markers {
            let size = match self.store.head(&marker).await {
                Ok(m) => m.size,
                Err(e) if e.is_not_found() => {
                    reasons.insert(target, String::new());
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let bytes = self.store.get_range(&marker, 0, size.min(MAX_YANK_REASON)).await?;
            reasons.insert(target, String::from_utf8_lossy(&bytes).trim().to_owned());
        }
        Ok(reasons)
    }

    /// Write derived outputs concurrently; the keys written, in order.
    pub(crate) async fn publish(&self, outputs: Vec<Output>) -> Result<Vec<String>, IndexError> {
        let items = outputs
            .into_iter()
            .map(|Output { key, body, content_type }| {
                (key, body, PutOptions::derived().with_content_type(content_type))
            })
            .collect();
        let mut written = Vec::new();
        for (key, result) in self.put_batched(items).await {
            result?;
            written.push(key.to_string());
        }
        written.sort();
        Ok(written)
    }

    /// Put `items` in batches (one blocking task and one lock each on a local store), as many
    /// batches in flight as there were single puts: a handful of items still go one per batch.
    /// Each item's key with its result.
    pub(crate) async fn put_batched(
        &self,
        items: Vec<(Key, bytes::Bytes, PutOptions)>,
    ) -> Vec<(Key, Result<quarry_store::PutResult, quarry_store::StoreError>)> {
        let size = items.len().div_ceil(PUBLISH_CONCURRENCY).clamp(1, PUBLISH_BATCH);
        let mut items = items.into_iter();
        let batches = std::iter::from_fn(|| {
            let batch: Vec<_> = items.by_ref().take(size).collect();
            (!batch.is_empty()).then_some(batch)
        });
        let done: Vec<Vec<_>> = futures_util::stream::iter(batches)
            .map(|batch| async move {
                let keys: Vec<Key> = batch.iter().map(|(key, ..)| key.clone()).collect();
                keys.into_iter().zip(self.store.put_many(batch).await).collect()
            })
            .buffer_unordered(PUBLISH_CONCURRENCY)
            .collect()
            .await;
        done.into_iter().flatten().collect()
    }

    /// Delete outputs the committed state no longer lists (removed projects, removed wheels'
    /// sidecars) and retired ones past their grace period; the keys deleted. Best effort: an
    /// orphan is harmless, a failure here must not fail the commit.
    pub(crate) async fn delete_stale(&self, stale: &[String]) -> Vec<String> {
        let mut deleted = Vec::new();
        for stale in stale {
            let Ok(key) = Key::new(stale.clone()) else {
                continue;
            };
            match self.store.delete(&key).await {
                Ok(()) => deleted.push(stale.clone()),
                Err(e) => tracing::warn!(key = %stale, error = %e, "could not delete stale output"),
            }
        }
        deleted
    }
}

fn backoff(attempt: u32) -> Duration {
    // Exponential from 5 ms, capped at 500 ms, with jitter from the clock's nanoseconds.
    let base = 5u64.saturating_mul(1 << attempt.min(7)).min(500);
    let jitter = u64::from(jiff::Timestamp::now().subsec_nanosecond().unsigned_abs()) % base.max(1);
    Duration::from_millis(base / 2 + jitter)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use quarry_store::Store;

    use crate::config::IndexConfig;

    use quarry_store::faults::{Fault, FaultyStore, NonAtomicConditions, Op};
    use quarry_store::{
        ByteRange, ByteStream, CountingStore, GetObject, ListOptions, ListPage, MemoryStore, PutResult,
    };

    use bytes::Bytes;
    use quarry_store::ObjectMeta;

    use super::*;
    use crate::state::RepoState;

    const ROOT: &str = "run-linux/python/";

    #[tokio::test]
    async fn a_deleted_root_is_not_brought_back_as_empty_pages() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let indexer = Indexer::new(store.clone(), Default::default());
        for root in [ROOT, "run-linux/packages/deb/", "run-linux/packages/rpm/x86_64/"] {
            let report = indexer.reindex(&RepoRoot::new(root, &Default::default()).unwrap()).await.unwrap();
            assert!(!report.committed && report.written.is_empty(), "{report}");
        }
        let dir = crate::ListingDir::for_key(&Key::new("7-linux/x.tar.zst").unwrap(), &Default::default()).unwrap();
        let listed = crate::update_listing(store.as_ref(), &dir).await.unwrap();
        assert!(!listed.written);
        assert!(store.list_all("", false).await.unwrap().objects.is_empty(), "nothing written");
    }

    fn wheel(name: &str, version: &str, filler: usize) -> (String, Vec<u8>) {
        let dist = name.replace('-', "_");
        let mut out = std::io::Cursor::new(Vec::new());
        {
            let mut zip = zip::ZipWriter::new(&mut out);
            let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
            zip.start_file(format!("{dist}/data.bin"), stored).unwrap();
            // Incompressible filler so the wheel is really that large.
            let mut x = 0x2545_f491_u32;
            let chunk: Vec<u8> = (0..filler)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            zip.write_all(&chunk).unwrap();
            zip.start_file(format!("{dist}-{version}.dist-info/METADATA"), stored).unwrap();
            write!(zip, "Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.9\n").unwrap();
            zip.finish().unwrap();
        }
        (format!("{dist}-{version}-py3-none-any.whl"), out.into_inner())
    }

    async fn put(store: &dyn Store, name: &str, data: Vec<u8>) {
        store
            .put_bytes(&Key::new(format!("{ROOT}{name}")).unwrap(), Bytes::from(data), PutOptions::default())
            .await
            .unwrap();
    }

    async fn text(store: &dyn Store, path: &str) -> String {
        let (_, b) = store.get_bytes(&Key::new(format!("{ROOT}{path}")).unwrap(), 1 << 24).await.unwrap();
        String::from_utf8(b.to_vec()).unwrap()
    }

    /// Records the bytes each ranged read asks for.
    #[derive(Debug)]
    struct RangeRecorder {
        inner: MemoryStore,
        fetched: Mutex<u64>,
    }

    #[async_trait::async_trait]
    impl Store for RangeRecorder {
        fn describe(&self) -> String {
            "recorder".into()
        }
        async fn head(&self, key: &Key) -> quarry_store::Result<ObjectMeta> {
            self.inner.head(key).await
        }
        async fn get(&self, key: &Key, range: Option<ByteRange>) -> quarry_store::Result<GetObject> {
            let got = self.inner.get(key, range).await?;
            *self.fetched.lock().unwrap() += got.range.1 - got.range.0;
            Ok(got)
        }
        async fn put(&self, key: &Key, body: ByteStream, options: PutOptions) -> quarry_store::Result<PutResult> {
            self.inner.put(key, body, options).await
        }
        async fn list(&self, prefix: &str, options: ListOptions) -> quarry_store::Result<ListPage> {
            self.inner.list(prefix, options).await
        }
        async fn delete(&self, key: &Key) -> quarry_store::Result<()> {
            self.inner.delete(key).await
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn large_wheels_are_indexed_from_a_few_ranged_reads() {
        let recorder = Arc::new(RangeRecorder { inner: MemoryStore::default(), fetched: Mutex::new(0) });
        let (name, data) = wheel("big-wheel", "1.0", 48 << 20);
        put(recorder.as_ref(), &name, data).await;
        let store: Arc<dyn Store> = recorder.clone();
        let report = Indexer::new(store, Default::default())
            .reindex(&RepoRoot::new(ROOT, &Default::default()).unwrap())
            .await
            .unwrap();
        assert_eq!(report.added, [name]);
        let fetched = *recorder.fetched.lock().unwrap();
        assert!(fetched < 1 << 20, "read {fetched} bytes of a 48 MiB wheel whose sha256 was known");
        assert!(text(recorder.as_ref(), "index.html").await.contains("data-requires-python=\"&#62;=3.9\""));
    }

    #[tokio::test]
    async fn reindexing_is_incremental_and_idempotent() {
        let counting = Arc::new(CountingStore::new(Arc::new(MemoryStore::default())));
        let store: Arc<dyn Store> = counting.clone();
        let root = RepoRoot::new(ROOT, &Default::default()).unwrap();
        let indexer = Indexer::new(store.clone(), Default::default());
        for v in ["1.0", "1.1"] {
            let (name, data) = wheel("alpha", v, 100);
            put(store.as_ref(), &name, data).await;
        }
        let first = indexer.reindex(&root).await.unwrap();
        assert!(first.committed);
        assert_eq!(first.added.len(), 2);

        // Nothing changed: the manifest and the one project's state read, the root and the
        // project states listed, no writes.
        let before = counting.counts();
        let again = indexer.reindex(&root).await.unwrap();
        let delta = counting.counts();
        assert!(!again.committed);
        assert_eq!((delta.get - before.get, delta.list - before.list, delta.put - before.put), (2, 2, 0));

        // One more wheel: only its entry is computed, and only affected pages are written.
        let (name, data) = wheel("beta", "0.1", 100);
        put(store.as_ref(), &name, data).await;
        let before = counting.counts();
        let third = indexer.reindex(&root).await.unwrap();
        let delta = counting.counts();
        assert_eq!(third.added, std::slice::from_ref(&name));
        // One HEAD for the new file, one for the state before publishing.
        assert_eq!(delta.head - before.head, 2, "only the new file is inspected");
        let mut written = third.written.clone();
        written.sort();
        assert_eq!(
            written,
            [
                format!("{ROOT}beta-0.1-py3-none-any.whl.metadata"),
                format!("{ROOT}index.html"),
                format!("{ROOT}simple/beta/index.html"),
                format!("{ROOT}simple/beta/index.json"),
                format!("{ROOT}simple/index.html"),
                format!("{ROOT}simple/index.json"),
            ]
        );
    }

    #[tokio::test]
    async fn deletions_yanks_and_rejections() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let root = RepoRoot::new(ROOT, &Default::default()).unwrap();
        let indexer = Indexer::new(store.clone(), Default::default());
        let (keep, data) = wheel("keep", "1.0", 10);
        put(store.as_ref(), &keep, data).await;
        let (gone, data) = wheel("gone", "1.0", 10);
        put(store.as_ref(), &gone, data).await;
        put(store.as_ref(), "broken-1.0-py3-none-any.whl", b"not a zip".to_vec()).await;
        put(store.as_ref(), &format!("{keep}.yanked"), b"  broken on ROCm 7  ".to_vec()).await;
        let report = indexer.reindex(&root).await.unwrap();
        assert_eq!(report.rejected.len(), 1);
        assert!(report.rejected["broken-1.0-py3-none-any.whl"].contains("not a valid zip archive"));
        let json = text(store.as_ref(), "simple/keep/index.json").await;
        assert!(json.contains("\"yanked\":\"broken on ROCm 7\""), "{json}");
        assert!(text(store.as_ref(), "simple/gone/index.html").await.contains(&gone));

        // A rejected file is remembered by ETag and not read again.
        let second = indexer.reindex(&root).await.unwrap();
        assert!(second.rejected.is_empty() && !second.committed);

        store.delete(&Key::new(format!("{ROOT}{gone}")).unwrap()).await.unwrap();
        let third = indexer.reindex(&root).await.unwrap();
        assert_eq!(third.removed, std::slice::from_ref(&gone));
        let mut deleted = third.deleted.clone();
        deleted.sort();
        assert_eq!(
            deleted,
            [
                format!("{ROOT}gone-1.0-py3-none-any.whl.metadata"),
                format!("{ROOT}simple/gone/index.html"),
                format!("{ROOT}simple/gone/index.json"),
            ]
        );
        assert!(!text(store.as_ref(), "index.html").await.contains(&gone));
    }

    /// A structured root (TheRock's v5 `whl-next/`): files in their project's directory, the
    /// root its own simple index, sidecars beside the files; a file elsewhere refused, named;
    /// a project's event touches its directory and the root's pages only.
    #[tokio::test]
    async fn structured_roots_index_files_in_their_project_directories() {
        const V5: &str = "v5/rocm/core/whl-next/";
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let root = RepoRoot::structured(V5).unwrap();
        let indexer = Indexer::new(store.clone(), Default::default());
        let at = |path: &str| Key::new(format!("{V5}{path}")).unwrap();
        let put = |path: String, data: Vec<u8>| {
            let store = store.clone();
            async move { store.put_bytes(&at(&path), Bytes::from(data), PutOptions::default()).await.unwrap() }
        };
        let read = |path: &'static str| {
            let store = store.clone();
            async move { String::from_utf8(store.get_bytes(&at(path), 1 << 24).await.unwrap().1.to_vec()).unwrap() }
        };
        let (alpha, data) = wheel("Alpha_Pkg", "1.0", 10);
        put(format!("alpha-pkg/{alpha}"), data.clone()).await;
        put(alpha.clone(), data.clone()).await;
        put(format!("Alpha_Pkg/{alpha}"), data).await;
        put(format!("alpha-pkg/{alpha}.yanked"), b"bad build".to_vec()).await;
        let report = indexer.reindex(&root).await.unwrap();
        assert_eq!(report.added, std::slice::from_ref(&alpha));
        let refused: Vec<&String> = report.rejected.keys().collect();
        assert_eq!(refused, [&format!("{V5}{alpha}"), &format!("{V5}Alpha_Pkg/{alpha}")], "{report}");
        let why = &report.rejected[&format!("{V5}{alpha}")];
        assert!(why.contains(&format!("should be {V5}alpha-pkg/{alpha}")), "{why}");
        assert!(read("index.html").await.contains("<a href=\"alpha-pkg/\">alpha-pkg</a>"));
        let page = read("alpha-pkg/index.html").await;
        assert!(page.contains(&format!("<a href=\"{alpha}#sha256=")) && page.contains("data-core-metadata=\"sha256="));
        assert!(page.contains("data-yanked=\"bad build\""), "{page}");
        assert!(read("alpha-pkg/index.json").await.contains(&format!("\"url\":\"{alpha}\"")));
        store.head(&at(&format!("alpha-pkg/{alpha}.metadata"))).await.expect("the sidecar lies beside the wheel");
        assert!(store.list_all(&format!("{V5}simple/"), false).await.unwrap().objects.is_empty(), "no simple/");
        let check = crate::check(store.as_ref(), &root, &Default::default()).await.unwrap();
        assert!(check.is_clean() && check.pages == 2 && check.files == 3, "{check}");

        // One project's event: its directory, then the root's list.
        let (beta, data) = wheel("beta", "2.0", 10);
        put(format!("beta/{beta}"), data).await;
        let project = crate::ProjectScope::for_file(&beta).unwrap();
        let report = indexer.run(crate::Request::new(root.clone()).project(project)).await.unwrap();
        assert_eq!(report.added, std::slice::from_ref(&beta));
        assert!(read("index.html").await.contains("<a href=\"beta/\">beta</a>"));
        assert!(read("beta/index.html").await.contains(&beta));
        let check = crate::check(store.as_ref(), &root, &Default::default()).await.unwrap();
        assert!(check.is_clean(), "{check}");

        // Gone: its pages and sidecar go too.
        store.delete(&at(&format!("beta/{beta}"))).await.unwrap();
        let report = indexer.reindex(&root).await.unwrap();
        let mut deleted = report.deleted.clone();
        deleted.sort();
        assert_eq!(
            deleted,
            [
                format!("{V5}beta/beta-2.0-py3-none-any.whl.metadata"),
                format!("{V5}beta/index.html"),
                format!("{V5}beta/index.json")
            ]
        );
        assert!(!read("index.html").await.contains("beta/"));
        assert!(crate::check(store.as_ref(), &root, &Default::default()).await.unwrap().is_clean());
    }

    /// A store that fails the operations a rule picks, as a flaky S3 would (5xx, throttling,
    /// timeouts) or as a crash would cut a reindex short.
    async fn assert_consistent(store: &dyn Store) {
        let report =
            crate::check(store, &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default()).await.unwrap();
        assert!(report.is_clean(), "{report}");
    }

    /// No published page may point at a missing object (the state may lag behind the listing).
    async fn assert_no_dangling_links(store: &dyn Store) {
        let report =
            crate::check(store, &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default()).await.unwrap();
        assert!(report.dangling().is_empty(), "{report}");
    }

    #[tokio::test]
    async fn a_crash_before_the_commit_converges_later() {
        let memory = Arc::new(MemoryStore::default());
        let faulty = Arc::new(FaultyStore::new(memory.clone(), |op, key| {
            (op == Op::Put && key.ends_with(crate::STATE_NAME)).then_some(Fault::Crash)
        }));
        for v in ["1.0", "2.0"] {
            let (name, data) = wheel("crashy", v, 100);
            put(memory.as_ref(), &name, data).await;
        }
        let store: Arc<dyn Store> = faulty.clone();
        let root = RepoRoot::new(ROOT, &Default::default()).unwrap();
        let err = Indexer::new(store.clone(), Default::default()).reindex(&root).await.unwrap_err();
        assert!(err.to_string().contains("injected fault"), "{err}");
        // Outputs were published, the state was not: nothing dangles.
        assert_no_dangling_links(memory.as_ref()).await;
        assert!(memory.head(&root.state_key()).await.is_err());

        faulty.heal();
        let report = Indexer::new(store, Default::default()).reindex(&root).await.unwrap();
        assert!(report.committed);
        assert_eq!(report.added.len(), 2);
        assert_consistent(memory.as_ref()).await;
        assert!(text(memory.as_ref(), "index.html").await.contains("crashy-2.0"));
    }

    #[tokio::test]
    async fn transient_faults_never_leave_dangling_links() {
        // Every third store operation fails, cycling through the failures S3 produces.
        let memory = Arc::new(MemoryStore::default());
        let faults = vec![Fault::ServerError, Fault::Throttled, Fault::Timeout(Duration::from_millis(5))];
        let faulty = Arc::new(FaultyStore::every(memory.clone(), 3, faults));
        let store: Arc<dyn Store> = faulty.clone();
        let root = RepoRoot::new(ROOT, &Default::default()).unwrap();
        let mut failures = 0;
        for round in 0..6 {
            let (name, data) = wheel(&format!("flaky-{round}"), "1.0", 100);
            put(memory.as_ref(), &name, data).await;
            // Events are retried until one succeeds; after every failed one the pages hold.
            for _ in 0..50 {
                match Indexer::new(store.clone(), Default::default()).reindex(&root).await {
                    Ok(_) => break,
                    Err(e) => {
                        assert!(e.to_string().contains("injected fault"), "{e}");
                        failures += 1;
                        assert_no_dangling_links(memory.as_ref()).await;
                    }
                }
            }
        }
        // A deletion, indexed through the same faults.
        let (gone, _) = wheel("flaky-0", "1.0", 100);
        memory.delete(&Key::new(format!("{ROOT}{gone}")).unwrap()).await.unwrap();
        for _ in 0..50 {
            if Indexer::new(store.clone(), Default::default()).reindex(&root).await.is_ok() {
                break;
            }
            failures += 1;
        }
        assert!(failures > 0, "the faults never hit");
        let kinds: BTreeSet<String> = faulty.injected().iter().map(|(_, _, f)| format!("{f:?}")).collect();
        assert_eq!(kinds.len(), 3, "{kinds:?}");
        faulty.heal();
        Indexer::new(store, Default::default()).reindex(&root).await.unwrap();
        assert_consistent(memory.as_ref()).await;
        let index = text(memory.as_ref(), "index.html").await;
        for round in 1..6 {
            assert!(index.contains(&format!("flaky_{round}-1.0")), "flaky-{round} missing");
        }
        assert!(!index.contains("flaky_0-1.0"));
    }

    /// Uploads racing into one root, each followed by its own indexer, on a store whose
    /// conditional puts let racing writers both pass.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_indexers_converge_where_conditional_puts_are_not_atomic() {
        for _ in 0..3 {
            let memory = Arc::new(MemoryStore::default());
            let store: Arc<dyn Store> = Arc::new(NonAtomicConditions::new(memory.clone(), Duration::from_millis(5)));
            let root = RepoRoot::new(ROOT, &Default::default()).unwrap();
            let tasks: Vec<_> = (0..16)
                .map(|i| {
                    let (store, root) = (store.clone(), root.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis((i * 7) % 16)).await;
                        let (name, data) = wheel(&format!("racer-{i}"), "1.0", 64);
                        put(store.as_ref(), &name, data).await;
                        Indexer::new(store, Default::default()).reindex(&root).await.unwrap();
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            let report = crate::check(memory.as_ref(), &root, &Default::default()).await.unwrap();
            assert!(report.is_clean(), "{report}");
            assert_eq!(report.files, 16);
        }
    }

    /// The lost update such a store allows, made deterministic: a slow indexer reads a
    /// project's state, lists one new file, passes its precondition check; a fast one indexes
    /// a second file of the same project and commits; then the slow one's write lands on top.
    /// (Without a find-links page, neither event writes the root's manifest.)
    async fn lost_update(declared: ConditionalWrites) -> crate::CheckReport {
        let memory = Arc::new(MemoryStore::default());
        let config = IndexConfig { find_links: Some(false), ..IndexConfig::default() };
        let slow: Arc<dyn Store> =
            Arc::new(NonAtomicConditions::new(memory.clone(), Duration::from_millis(300)).declaring(declared));
        let fast: Arc<dyn Store> =
            Arc::new(NonAtomicConditions::new(memory.clone(), Duration::from_millis(1)).declaring(declared));
        let root = RepoRoot::new(ROOT, &Default::default()).unwrap();
        let (zeroth, data) = wheel("second", "0.1", 64);
        put(memory.as_ref(), &zeroth, data).await;
        Indexer::new(memory.clone(), Default::default()).with_config(config.clone()).reindex(&root).await.unwrap();
        let (first, data) = wheel("second", "0.9", 64);
        put(memory.as_ref(), &first, data).await;
        let project = crate::ProjectScope::for_file(&first).unwrap();
        let slow_run = tokio::spawn({
            let (root, project, config) = (root.clone(), project.clone(), config.clone());
            async move {
                Indexer::new(slow, Default::default())
                    .with_config(config)
                    .run(crate::Request::new(root.clone()).project(project.clone()))
                    .await
                    .unwrap()
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (second, data) = wheel("second", "1.0", 64);
        put(memory.as_ref(), &second, data).await;
        Indexer::new(fast, Default::default())
            .with_config(config)
            .run(crate::Request::new(root.clone()).project(project.clone()))
            .await
            .unwrap();
        let slow_report = slow_run.await.unwrap();
        assert!(slow_report.committed);
        crate::check(memory.as_ref(), &root, &Default::default()).await.unwrap()
    }

    #[tokio::test]
    async fn verified_commits_repair_a_lost_update() {
        let trusting = lost_update(ConditionalWrites::Atomic).await;
        assert!(
            trusting.problems.iter().any(|p| p.contains("second-1.0") && p.contains("not in the committed state")),
            "the scenario no longer loses an update: {trusting}"
        );
        let verifying = lost_update(ConditionalWrites::Verify).await;
        assert!(verifying.is_clean(), "{verifying}");
        assert_eq!(verifying.files, 3);
    }

    #[tokio::test]
    async fn stores_without_conditional_puts_are_refused() {
        let indexer =
            Indexer::new(Arc::new(quarry_store::conformance::NoConditionalWrites::default()), Default::default());
        let err = indexer.reindex(&RepoRoot::new(ROOT, &Default::default()).unwrap()).await.unwrap_err();
        assert!(matches!(err, IndexError::UnsafeStore(_)), "{err}");
    }

    #[tokio::test]
    async fn superseded_by_hash_files_stay_for_the_grace_period_then_go() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let root = RepoRoot::new("7-linux/packages/deb/", &Default::default()).unwrap();
        let land = |name: &str, version: &str| {
            let control = format!("Package: {name}\nVersion: {version}\nArchitecture: amd64\nDescription: x\n");
            let key = Key::new(format!("7-linux/packages/deb/pool/main/{name}_{version}_amd64.deb")).unwrap();
            (key, Bytes::from(quarry_inspect::deb::test_support::build_deb(&control, "xz")))
        };
        let by_hash = |store: Arc<dyn Store>| async move {
            let listing = store.list_all("7-linux/packages/deb/dists/", false).await.unwrap();
            listing
                .objects
                .into_iter()
                .map(|o| o.key.to_string())
                .filter(|k| k.contains("/by-hash/"))
                .collect::<BTreeSet<_>>()
        };
        let day = Indexer::new(store.clone(), Default::default())
            .with_config(IndexConfig { grace_seconds: 86_400, ..IndexConfig::default() });
        let (key, body) = land("alpha", "1.0");
        store.put_bytes(&key, body, PutOptions::default()).await.unwrap();
        day.reindex(&root).await.unwrap();
        let first = by_hash(store.clone()).await;
        assert_eq!(first.len(), 3, "Packages, .gz, .xz: {first:?}");

        let (key, body) = land("beta", "2.0~rc1");
        store.put_bytes(&key, body, PutOptions::default()).await.unwrap();
        let report = day.reindex(&root).await.unwrap();
        assert_eq!(report.added, ["pool/main/beta_2.0~rc1_amd64.deb"]);
        let second = by_hash(store.clone()).await;
        assert_eq!(second.len(), 6, "the old generation is kept: {second:?}");
        assert!(first.is_subset(&second));
        let (_, state) = store.get_bytes(&root.state_key(), 1 << 24).await.unwrap();
        let state: RepoState = serde_json::from_slice(&state).unwrap();
        assert_eq!(state.retired.keys().cloned().collect::<BTreeSet<_>>(), first);
        assert_eq!(state.entries["pool/main/beta_2.0~rc1_amd64.deb"].deb.as_ref().unwrap().version(), "2.0~rc1");

        // Past the grace period the next reindex collects the old generation, nothing else.
        let now = Indexer::new(store.clone(), Default::default())
            .with_config(IndexConfig { grace_seconds: 0, ..IndexConfig::default() });
        let report = now.reindex(&root).await.unwrap();
        assert_eq!(report.deleted.iter().cloned().collect::<BTreeSet<_>>(), first);
        let third = by_hash(store.clone()).await;
        assert_eq!(third, second.difference(&first).cloned().collect());
        let audit = crate::check(store.as_ref(), &root, &Default::default()).await.unwrap();
        assert!(audit.is_clean() && audit.files == 2, "{audit}");
        // A Packages index edited behind the indexer's back no longer matches Release.
        let packages = root.key("dists/stable/main/binary-amd64/Packages").unwrap();
        store.put_bytes(&packages, Bytes::from_static(b"Package: x\n"), PutOptions::default()).await.unwrap();
        let audit = crate::check(store.as_ref(), &root, &Default::default()).await.unwrap();
        assert!(audit.problems.iter().any(|p| p.contains("does not match its Release checksum")), "{audit}");
        now.run(crate::Request::new(root.clone()).forced(true)).await.unwrap();
        // And an unchanged repo is left alone: same Release bytes, nothing written.
        let (_, before) = store.get_bytes(&root.key("dists/stable/Release").unwrap(), 1 << 20).await.unwrap();
        let report = now.reindex(&root).await.unwrap();
        assert!(!report.committed && report.written.is_empty(), "{report}");
        let (_, after) = store.get_bytes(&root.key("dists/stable/Release").unwrap(), 1 << 20).await.unwrap();
        assert_eq!(before, after);
    }
}
