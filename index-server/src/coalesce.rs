//! In-process reindexing, coalesced per root: at most one reindex runs and one is pending for
//! each root, however many uploads arrive. A request names the whole root or one project of
//! a pip root (an upload's file's); a run takes every request pending when it starts: the
//! whole root if one asked for it, else each project named, one after another
//! ([`Indexer::run`] of one project), their reports folded into one. Runs of one root never
//! overlap, so a server's own reindexes never race each other for the root's manifest. A
//! waiter returns once a run that started after its request has finished. A request may carry
//! what its caller already inspected (an upload's file): the requests a run covers hand their
//! inspections to it together.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use quarry_index::{Indexer, Inspections, ProjectScope, ReindexReport, RepoRoot};

use crate::metrics::ReindexStats;
use tokio::sync::watch;

/// The requests of one root not yet taken by a run.
#[derive(Debug, Default)]
struct Pending {
    /// Generation of the latest request.
    generation: u64,
    /// Whether a run is going on.
    running: bool,
    /// The inspections requests since the last run started brought along.
    inspections: Inspections,
    /// The projects requests since the last run started named (pip roots).
    projects: Vec<ProjectScope>,
    /// Whether a request since the last run started asked for the whole root.
    whole: bool,
}

impl Pending {
    /// What the next run covers, taken: (generation, inspections, the projects or `None` for
    /// the whole root).
    fn take(&mut self) -> (u64, Inspections, Option<Vec<ProjectScope>>) {
        let projects = std::mem::take(&mut self.projects);
        let scope = (!std::mem::take(&mut self.whole)).then_some(projects);
        (self.generation, std::mem::take(&mut self.inspections), scope)
    }
}

/// What a finished run reports to the requests it covered: its report (what it added and
/// rejected, so an upload learns its file's fate without reading the state again) or its error.
pub(crate) type Outcome = Result<Arc<ReindexReport>, String>;

#[derive(Debug)]
struct Slot {
    pending: Mutex<Pending>,
    /// The generation the last finished run covered, and what it did (or its error).
    done: watch::Sender<(u64, Outcome)>,
}

#[derive(Debug)]
pub struct Coalescer {
    indexer: Indexer,
    slots: Mutex<HashMap<RepoRoot, Arc<Slot>>>,
    stats: Arc<ReindexStats>,
}

impl Coalescer {
    pub fn new(indexer: Indexer) -> Arc<Self> {
        Arc::new(Self { indexer, slots: Mutex::new(HashMap::new()), stats: Arc::default() })
    }

    /// Every reindex run so far (for `/metrics`).
    pub fn stats(&self) -> &ReindexStats {
        &self.stats
    }

    pub fn indexer(&self) -> &Indexer {
        &self.indexer
    }

    /// Ask for `root` (only `project` of it, when given) to be reindexed and wait until a run
    /// covering this request has finished. `known` (files the caller inspected, each at the
    /// version it read) goes to that run, so they are not read again while their versions
    /// still match. Returns the report of that run.
    pub async fn reindex(
        self: &Arc<Self>,
        root: RepoRoot,
        project: Option<ProjectScope>,
        known: Inspections,
    ) -> Outcome {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots
                .entry(root.clone())
                .or_insert_with(|| {
                    Arc::new(Slot { pending: Mutex::default(), done: watch::Sender::new((0, Err(String::new()))) })
                })
                .clone()
        };
        let mut done = slot.done.subscribe();
        let generation = {
            let mut pending = slot.pending.lock().unwrap_or_else(PoisonError::into_inner);
            pending.generation += 1;
            pending.inspections.merge(known);
            match project {
                Some(project) if !pending.projects.contains(&project) => pending.projects.push(project),
                Some(_) => {}
                None => pending.whole = true,
            }
            if !pending.running {
                pending.running = true;
                tokio::spawn(Self::run(self.indexer.clone(), root, slot.clone(), self.stats.clone()));
            }
            pending.generation
        };
        let finished = done
            .wait_for(|(covered, _)| *covered >= generation)
            .await
            .map_err(|_| "the reindex task ended unexpectedly".to_owned())?;
        finished.1.clone()
    }

    /// One run: the whole root, or each project in turn (a failure stops it: its waiters all
    /// learn of it, and the next request runs again).
    async fn run_once(
        indexer: &Indexer,
        root: &RepoRoot,
        projects: Option<Vec<ProjectScope>>,
        known: Inspections,
    ) -> Result<ReindexReport, quarry_index::IndexError> {
        let Some(projects) = projects else {
            return indexer.run(quarry_index::Request::new(root.clone()).knowing(known)).await;
        };
        let mut total = ReindexReport { root: root.to_string(), ..ReindexReport::default() };
        for project in &projects {
            total.absorb(
                indexer
                    .run(quarry_index::Request::new(root.clone()).project(project.clone()).knowing(known.clone()))
                    .await?,
            );
        }
        Ok(total)
    }

    async fn run(indexer: Indexer, root: RepoRoot, slot: Arc<Slot>, stats: Arc<ReindexStats>) {
        let kind = root.kind().label();
        loop {
            let (covers, known, projects) = slot.pending.lock().unwrap_or_else(PoisonError::into_inner).take();
            let started = std::time::Instant::now();
            let run = std::panic::AssertUnwindSafe(Self::run_once(&indexer, &root, projects, known));
            let outcome = futures_util::FutureExt::catch_unwind(run).await;
            let conflicts = match &outcome {
                Ok(Ok(report)) => u64::from(report.attempts.saturating_sub(1)),
                _ => 0,
            };
            stats.record(kind, !matches!(outcome, Ok(Ok(_))), started.elapsed(), conflicts);
            let outcome = match outcome {
                Err(_) => {
                    tracing::error!(root = %root, "reindex panicked");
                    Err("the reindex panicked; see the server log".to_owned())
                }
                Ok(Ok(report)) => {
                    tracing::info!(attempts = report.attempts, "reindexed {report}");
                    Ok(Arc::new(report))
                }
                Ok(Err(e)) => {
                    tracing::error!(root = %root, error = %e, "reindex failed");
                    Err(e.to_string())
                }
            };
            let _previous = slot.done.send_replace((covers, outcome));
            let mut pending = slot.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if pending.generation == covers {
                pending.running = false;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use quarry_index::{Entry, Inspected};
    use quarry_store::{Key, MemoryStore, PutOptions, Store, StoreExt};

    use super::*;

    /// A file that would fail inspection, and an inspection of it that says it is fine: which
    /// one the reindex believes shows whether the request's inspection reached it.
    async fn planted(store: &dyn Store, name: &str) -> (Key, Inspected) {
        let key = Key::new(format!("7-linux/python/{name}")).unwrap();
        let put =
            store.put_bytes(&key, bytes::Bytes::from_static(b"not a wheel"), PutOptions::default()).await.unwrap();
        let meta = store.head(&key).await.unwrap();
        assert_eq!(meta.etag, put.etag);
        (key, Inspected { entry: Entry::stored(&meta, &meta, put.sha256), core_metadata: None })
    }

    #[tokio::test]
    async fn a_request_hands_its_inspections_to_the_run_while_versions_match() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let root = RepoRoot::new("7-linux/python/", &Default::default()).unwrap();
        let coalescer = Coalescer::new(Indexer::new(store.clone(), Default::default()));
        let (key, inspected) = planted(store.as_ref(), "known-1.0-py3-none-any.whl").await;
        let mut known = Inspections::default();
        known.insert(&key, inspected);
        let (other, mut stale) = planted(store.as_ref(), "stale-1.0-py3-none-any.whl").await;
        stale.entry.etag = "another version".into();
        known.insert(&other, stale);
        coalescer.reindex(root.clone(), None, known).await.unwrap();
        let state = quarry_index::read_state(store.as_ref(), &root).await.unwrap().unwrap();
        assert!(state.entries.contains_key("known-1.0-py3-none-any.whl"), "used, not read again");
        assert!(state.rejected.contains_key("stale-1.0-py3-none-any.whl"), "another version is read");
    }
}
