//! In-process reindexing, coalesced per root: at most one reindex runs and one is pending for
//! each root, however many uploads arrive. A waiter returns once a reindex that started after
//! its request has finished.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use quarry_index::{Indexer, RepoRoot};

use crate::metrics::ReindexStats;
use tokio::sync::watch;

#[derive(Debug)]
struct Slot {
    /// Generation of the latest request; guarded with `running`.
    state: Mutex<(u64, bool)>,
    /// The generation the last finished run covered, and its error if it failed.
    done: watch::Sender<(u64, Option<String>)>,
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

    /// Ask for `root` to be reindexed and wait until a run covering this request has finished.
    pub async fn reindex(self: &Arc<Self>, root: RepoRoot) -> Result<(), String> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            slots
                .entry(root.clone())
                .or_insert_with(|| {
                    Arc::new(Slot { state: Mutex::new((0, false)), done: watch::Sender::new((0, None)) })
                })
                .clone()
        };
        let mut done = slot.done.subscribe();
        let generation = {
            let mut state = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.0 += 1;
            if !state.1 {
                state.1 = true;
                tokio::spawn(Self::run(self.indexer.clone(), root, slot.clone(), self.stats.clone()));
            }
            state.0
        };
        let finished = done
            .wait_for(|(covered, _)| *covered >= generation)
            .await
            .map_err(|_| "the reindex task ended unexpectedly".to_owned())?;
        match &finished.1 {
            None => Ok(()),
            Some(e) => Err(e.clone()),
        }
    }

    async fn run(indexer: Indexer, root: RepoRoot, slot: Arc<Slot>, stats: Arc<ReindexStats>) {
        let kind = root.kind().label();
        loop {
            let target = slot.state.lock().unwrap_or_else(PoisonError::into_inner).0;
            let started = std::time::Instant::now();
            let run = std::panic::AssertUnwindSafe(indexer.reindex(&root));
            let outcome = futures_util::FutureExt::catch_unwind(run).await;
            let conflicts = match &outcome {
                Ok(Ok(report)) => u64::from(report.attempts.saturating_sub(1)),
                _ => 0,
            };
            stats.record(kind, !matches!(outcome, Ok(Ok(_))), started.elapsed(), conflicts);
            let error = match outcome {
                Err(_) => {
                    tracing::error!(root = %root, "reindex panicked");
                    Some("the reindex panicked; see the server log".to_owned())
                }
                Ok(Ok(report)) => {
                    tracing::info!(attempts = report.attempts, "reindexed {report}");
                    None
                }
                Ok(Err(e)) => {
                    tracing::error!(root = %root, error = %e, "reindex failed");
                    Some(e.to_string())
                }
            };
            slot.done.send_replace((target, error));
            let mut state = slot.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.0 == target {
                state.1 = false;
                return;
            }
        }
    }
}
