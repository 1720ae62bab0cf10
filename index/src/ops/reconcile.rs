//! The full reconciliation (`quarry index --full`, the Lambda's scheduled tick): each scope
//! brought back in line with the store whatever its state says, not only what an event names.
//!
//! A root is reindexed whole (listed entirely, every project's state object read; missing,
//! unreadable or stale ones rebuilt from the listing; entries whose files are gone dropped),
//! then audited as a client sees it ([`crate::ops::check`]); pages or sidecars the audit finds
//! missing or damaged get the root republished in full, and a pip project whose state the store
//! contradicts (an output it records is gone; with [`Full::verify_hashes`], a file's recorded
//! sha256 is another) has its state object dropped and rebuilt from the store. A run listing
//! whose page is not the one its cache records is rewritten from a fresh listing with the
//! cache dropped.
//!
//! [`reconcile_scopes`] chooses what a scheduled tick covers: every root the layout's rules
//! find in the store, and the newest `recent_runs` run prefixes (by run id). A tick that runs
//! out of time stops between scopes (each scope is left consistent by its own commit) and the
//! next one resumes at the [`Cursor`].

use std::collections::BTreeSet;

use bytes::Bytes;
use futures_util::StreamExt;
use quarry_layout::RunSegment;
use quarry_layout::config::Layout;
use quarry_store::{Key, PutOptions, Store, StoreError, StoreExt};
use serde::{Deserialize, Serialize};

use crate::error::IndexError;
use crate::reindex::indexer::Indexer;
use crate::reindex::scope::{Refreshed, Scope};
use crate::render::listing::{update_listing, verify_listing};
use crate::state::io::{output_project, project_key};
use crate::state::root::{RepoKind, RepoRoot};

/// Where a scheduled reconciliation records the scope it resumes at, at the top of the
/// indexed prefix.
pub const CURSOR_KEY: &str = ".quarry-reconcile.json";

/// What reconciling one scope did.
#[derive(Debug, Clone)]
pub struct Reconciled {
    /// The refresh (a reindex, or a listing update), the repair pass folded in.
    pub refreshed: Refreshed,
    /// What the audit found wrong after the reindex (all of it then republished).
    pub repaired: Vec<String>,
    /// What the audit still finds after the repair (should be nothing).
    pub remaining: Vec<String>,
}

/// How far [`Indexer::reconcile`] goes beyond a whole-root reindex and an audit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Full {
    /// Republish every page first (`--force`).
    pub force: bool,
    /// Check each committed pip file's sha256 against the one the store recorded for it (a
    /// HEAD per file): a project whose state names another hash is rebuilt from the store.
    /// Files the store recorded no hash for are not read whole for one.
    pub verify_hashes: bool,
}

/// HEADs in flight when verifying hashes.
const VERIFY_CONCURRENCY: usize = 16;

impl Indexer {
    /// Reconcile `scope` in full: a project's scope is its whole root.
    pub async fn reconcile(&self, scope: &Scope, full: Full) -> Result<Reconciled, IndexError> {
        match scope {
            Scope::Root(root) | Scope::Project(root, _) => self.reconcile_root(root, full).await,
            Scope::Listing(dir) => {
                let repaired = verify_listing(self.store().as_ref(), dir).await?;
                let report = update_listing(self.store().as_ref(), dir).await?;
                Ok(Reconciled { refreshed: Refreshed::Listing(report), repaired, remaining: Vec::new() })
            }
        }
    }

    async fn reconcile_root(&self, root: &RepoRoot, full: Full) -> Result<Reconciled, IndexError> {
        let store = self.store().as_ref();
        let mut report = self.run(crate::Request::new(root.clone()).forced(full.force)).await?;
        let audit = crate::ops::check::check(store, root, self.layout()).await?;
        let mut repaired = audit.problems;
        // Outputs the state records that the store lacks, and files whose recorded hash is not
        // the state's: the projects they belong to are rebuilt from the store (their state
        // objects dropped, so their files are inspected and every page and sidecar of theirs
        // written again); anything else is republished.
        repaired.extend(self.drop_projects_in_disagreement(root, full.verify_hashes).await?);
        if repaired.is_empty() {
            return Ok(Reconciled { refreshed: Refreshed::Root(report), repaired, remaining: Vec::new() });
        }
        tracing::warn!(%root, problems = repaired.len(), "pages disagree with the store; republishing the root");
        report.absorb(self.run(crate::Request::new(root.clone()).forced(true)).await?);
        let after = crate::ops::check::check(store, root, self.layout()).await?;
        Ok(Reconciled { refreshed: Refreshed::Root(report), repaired, remaining: after.problems })
    }

    /// What in `root`'s committed state the store contradicts: outputs it lacks, and with
    /// `verify_hashes` pip files whose recorded sha256 differs. For a pip root, the state
    /// object of each project concerned is deleted (the next reindex rebuilds it).
    async fn drop_projects_in_disagreement(
        &self,
        root: &RepoRoot,
        verify_hashes: bool,
    ) -> Result<Vec<String>, IndexError> {
        let store = self.store().as_ref();
        let Some(state) = crate::read_state(store, root).await? else { return Ok(Vec::new()) };
        let listed: BTreeSet<String> =
            store.list_all(root.as_str(), false).await?.objects.into_iter().map(|o| o.key.to_string()).collect();
        let missing: Vec<String> = state.outputs.keys().filter(|key| !listed.contains(*key)).cloned().collect();
        if root.kind() != RepoKind::Pip {
            return Ok(missing.into_iter().map(|key| format!("{key} is missing")).collect());
        }
        let mut projects: BTreeSet<String> = missing.iter().filter_map(|key| output_project(root, key)).collect();
        let mut problems: Vec<String> = missing.iter().map(|key| format!("{key} is missing")).collect();
        if verify_hashes {
            for (name, found) in self.hashes_in_disagreement(root, &state).await? {
                projects.extend(crate::render::pip::file_project(&name).map(|p| p.as_str().to_owned()));
                problems.push(format!("{root}{name}: the state says sha256 {found}"));
            }
        }
        for project in projects {
            tracing::warn!(%root, %project, "state contradicted by the store; rebuilding the project's state");
            store.delete(&project_key(root, &project)?).await?;
        }
        Ok(problems)
    }

    /// The committed files whose sha256 the store recorded otherwise: (name, the state's hash).
    async fn hashes_in_disagreement(
        &self,
        root: &RepoRoot,
        state: &crate::RepoState,
    ) -> Result<Vec<(String, String)>, IndexError> {
        // Owned items and a shared store: no borrow in the futures (the Lambda's handler future
        // must stay `Send` for every lifetime).
        let mut todo = Vec::new();
        for (name, entry) in &state.entries {
            todo.push((root.file_key(name)?, name.clone(), entry.sha256.clone()));
        }
        let checked: Vec<Result<Option<(String, String)>, StoreError>> = futures_util::stream::iter(todo)
            .map(|(key, name, sha)| {
                let store = self.store().clone();
                async move {
                    let meta = match store.head(&key).await {
                        Ok(meta) => meta,
                        // Gone since the reindex: the next one drops it.
                        Err(e) if e.is_not_found() => return Ok(None),
                        Err(e) => return Err(e),
                    };
                    let differs = meta.sha256.as_deref().is_some_and(|found| !found.eq_ignore_ascii_case(&sha));
                    Ok(differs.then_some((name, sha)))
                }
            })
            .buffer_unordered(VERIFY_CONCURRENCY)
            .collect()
            .await;
        let mut found = Vec::new();
        for result in checked {
            found.extend(result?);
        }
        Ok(found)
    }
}

/// What a scheduled reconciliation covers in `store` (rooted at the indexed prefix): every
/// root the layout's rules find (one delimiter listing per `{placeholder}` level), and, when
/// the layout has runs, the roots and listings of the newest `recent_runs` run prefixes by run
/// id (one delimiter listing of the top level, then one listing per run). Sorted by name, the
/// order a [`Cursor`] resumes in.
pub async fn reconcile_scopes(
    store: &dyn Store,
    layout: &Layout,
    recent_runs: usize,
) -> Result<Vec<Scope>, StoreError> {
    let mut scopes = BTreeSet::new();
    for rule in &layout.roots {
        for prefix in crate::view::roots_of_rule(store, rule).await? {
            match RepoRoot::new(&prefix, layout) {
                Ok(root) => {
                    scopes.insert(Scope::Root(root));
                }
                Err(e) => tracing::warn!(%prefix, error = %e, "not a root; skipped"),
            }
        }
    }
    if layout.runs && recent_runs > 0 {
        for run in newest_runs(store, recent_runs).await? {
            scopes.extend(crate::discover_scopes(store, &run, layout).await?);
        }
    }
    let mut scopes: Vec<Scope> = scopes.into_iter().collect();
    scopes.sort_by_key(ToString::to_string);
    Ok(scopes)
}

/// The newest `count` run prefixes (`{run}-{platform}/`) at the top of `store`, by run id.
async fn newest_runs(store: &dyn Store, count: usize) -> Result<Vec<String>, StoreError> {
    let top = store.list_all("", true).await?.common_prefixes;
    let mut runs: Vec<(RunSegment<'_>, &String)> = top
        .iter()
        .filter_map(|prefix| RunSegment::parse(prefix.trim_end_matches('/')).map(|run| (run, prefix)))
        .collect();
    runs.sort_by(|(a, pa), (b, pb)| b.order().cmp(&a.order()).then_with(|| pa.cmp(pb)));
    // All platforms of the newest runs: a run id's platforms count as one.
    let mut ids = BTreeSet::new();
    let mut chosen = Vec::new();
    for (run, prefix) in runs {
        if !ids.contains(run.run_id) {
            if ids.len() == count {
                break;
            }
            ids.insert(run.run_id);
        }
        chosen.push(prefix.clone());
    }
    Ok(chosen)
}

/// Where a scheduled reconciliation that ran out of time resumes: the name of the first scope
/// it did not reach ([`Scope`]'s `Display`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

impl Cursor {
    /// The stored cursor ([`CURSOR_KEY`]); none (start from the first scope) when absent or
    /// unreadable.
    pub async fn read(store: &dyn Store) -> Result<Self, StoreError> {
        match store.get_bytes(&Key::new(CURSOR_KEY)?, 64 * 1024).await {
            Ok((_, bytes)) => Ok(serde_json::from_slice(&bytes).unwrap_or_default()),
            Err(e) if e.is_not_found() => Ok(Self::default()),
            Err(e) => Err(e),
        }
    }

    /// Store this cursor (a finished pass deletes it).
    pub async fn write(&self, store: &dyn Store) -> Result<(), StoreError> {
        let key = Key::new(CURSOR_KEY)?;
        if self.next.is_none() {
            return store.delete(&key).await;
        }
        let body = serde_json::to_vec(self).map_err(|e| StoreError::Backend(e.to_string()))?;
        store.put_bytes(&key, Bytes::from(body), PutOptions::derived().with_content_type("application/json")).await?;
        Ok(())
    }

    /// What is left of the pass this cursor is in: `scopes` (sorted by name) from the first one
    /// at or after `next` to the end; all of them without a cursor, or when every scope sorts
    /// before it (those are gone). Reaching the end finishes the pass; the next starts over.
    pub fn order(&self, mut scopes: Vec<Scope>) -> Vec<Scope> {
        let Some(next) = &self.next else { return scopes };
        match scopes.iter().position(|s| s.to_string().as_str() >= next.as_str()) {
            Some(start) => scopes.split_off(start),
            None => scopes,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use quarry_store::MemoryStore;

    use super::*;

    async fn put(store: &dyn Store, key: &str) {
        store.put_bytes(&Key::new(key).unwrap(), Bytes::from_static(b"x"), PutOptions::default()).await.unwrap();
    }

    #[tokio::test]
    async fn a_tick_covers_configured_roots_and_only_the_newest_runs() {
        let store = Arc::new(MemoryStore::default());
        for key in [
            "9-linux/python/a-1.0-py3-none-any.whl",
            "10-linux/python/a-1.0-py3-none-any.whl",
            "10-windows/python/a-1.0-py3-none-any.whl",
            "100-linux/python/a-1.0-py3-none-any.whl",
            "100-linux/blas.tar.zst",
            "v2/gfx94X/a-1.0-py3-none-any.whl",
            "v2/gfx120X/b-1.0-py3-none-any.whl",
            "unrelated/notes.txt",
        ] {
            put(store.as_ref(), key).await;
        }
        let layout = Layout::parse("[layout]\n[[layout.root]]\nprefix = \"v2/{family}/\"\nkind = \"pip\"\n").unwrap();
        let names = |scopes: Vec<Scope>| scopes.iter().map(ToString::to_string).collect::<Vec<_>>();
        let scopes = reconcile_scopes(store.as_ref(), &layout, 2).await.unwrap();
        assert_eq!(
            names(scopes.clone()),
            [
                "10-linux/python/",
                "10-windows/python/",
                "100-linux/index.html",
                "100-linux/python/",
                "v2/gfx120X/",
                "v2/gfx94X/"
            ]
        );
        let cursor = Cursor { next: Some("100-linux/python/".into()) };
        assert_eq!(names(cursor.order(scopes.clone())), ["100-linux/python/", "v2/gfx120X/", "v2/gfx94X/"]);
        // A cursor past the end (its scope gone) starts over.
        let past = Cursor { next: Some("zz/".into()) };
        assert_eq!(past.order(scopes.clone()), scopes);
        let no_runs = Layout { runs: false, ..layout };
        assert_eq!(names(reconcile_scopes(store.as_ref(), &no_runs, 2).await.unwrap()), ["v2/gfx120X/", "v2/gfx94X/"]);
    }

    /// apt and dnf roots: entry points and indices deleted behind the indexer's back come back.
    #[tokio::test]
    async fn native_roots_get_missing_outputs_back() {
        let store = Arc::new(MemoryStore::default());
        let indexer = Indexer::new(store.clone(), Default::default());
        for (root, make, lost) in [
            (
                "1-linux/packages/deb/",
                crate::reindex::scale_tests::deb as fn(usize) -> (String, Vec<u8>),
                ["dists/stable/Release", "dists/stable/main/binary-amd64/Packages.gz"],
            ),
            (
                "1-linux/packages/rpm/x86_64/",
                crate::reindex::scale_tests::rpm,
                ["repodata/repomd.xml", "repodata/repomd.xml"],
            ),
        ] {
            for n in 0..3 {
                let (name, body) = make(n);
                let key = Key::new(format!("{root}{name}")).unwrap();
                store.put_bytes(&key, Bytes::from(body), PutOptions::default()).await.unwrap();
            }
            let root = RepoRoot::new(root, &Default::default()).unwrap();
            indexer.reindex(&root).await.unwrap();
            for lost in lost {
                store.delete(&root.key(lost).unwrap()).await.unwrap();
            }
            assert!(
                !crate::ops::check::check(store.as_ref(), &root, &Default::default()).await.unwrap().is_clean(),
                "{root} is broken"
            );
            let done = indexer.reconcile(&Scope::Root(root.clone()), Full::default()).await.unwrap();
            assert!(!done.repaired.is_empty() && done.remaining.is_empty(), "{root}: {:?}", done.remaining);
            let audit = crate::ops::check::check(store.as_ref(), &root, &Default::default()).await.unwrap();
            assert!(audit.is_clean() && audit.files == 3, "{audit}");
        }
    }

    #[tokio::test]
    async fn the_cursor_round_trips_and_a_finished_pass_deletes_it() {
        let store = MemoryStore::default();
        assert_eq!(Cursor::read(&store).await.unwrap(), Cursor::default());
        let cursor = Cursor { next: Some("v2/gfx94X/".into()) };
        cursor.write(&store).await.unwrap();
        assert_eq!(Cursor::read(&store).await.unwrap(), cursor);
        Cursor::default().write(&store).await.unwrap();
        assert!(store.list_all("", false).await.unwrap().objects.is_empty());
        assert_eq!(
            Scope::for_key(&Key::new(CURSOR_KEY).unwrap(), &Default::default()),
            None,
            "the cursor triggers no event"
        );
    }
}
