//! Pip roots with a split state: a small manifest at the root's state key (the commit point of
//! the root's own pages, `simple/index.*` and the find-links `index.html`; a structured root's
//! `index.*`, `crate::render::pip::PagePaths`) and one state object
//! per project under `.quarry-index/` (the commit point of that project: its entries, pages
//! and sidecars), each replaced only with a conditional put.
//!
//! An event about one file ([`Indexer::attempt_project`]) reads the manifest and its project's
//! object, lists only the project's files (prefix listings, one per spelling of its name; in a
//! structured root the one listing of its directory),
//! renders only its pages, and touches the root's pages only when they change: the simple
//! root when the project appears or goes (spliced from the stored `simple/index.json`), the
//! find-links page when enabled (spliced from the stored page). A stored root page whose hash
//! is not the one the manifest records, or a manifest that is missing or of the old format,
//! makes it reconcile the whole root instead ([`Indexer::attempt_split`]), which lists the
//! root, reads every project's object and writes those that changed, then the manifest.
//!
//! The whole-root pass commits the changed project objects in `Store::put_many` batches, each
//! put conditional on the object it read, and the manifest only once every one is committed. A
//! project's event costs the same store operations whatever the root's size: the manifest and
//! the project's object, its prefix listings, its new files' reads, its pages, its object's
//! commit, the manifest only when a root page changed; measured at 10 operations (13 with the
//! find-links page, which it reads to splice and rewrites whole: the one O(root) output;
//! `scale_tests.rs` asserts equal counts at 1,000 and 20,000 files).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use quarry_packaging::PackageName;
use quarry_store::{Key, StoreError, StoreExt, sha256_hex};

use crate::error::IndexError;
use crate::reindex::indexer::Indexer;
use crate::reindex::indexer::{ProjectScope, spelling};
use crate::reindex::plan::{Output, Plan, PlanInput, RootListing, plan};
use crate::reindex::publish::Pass;
use crate::reindex::report::ReindexReport;
use crate::render::pip::{
    FIND_LINKS, PagePaths, Parts, Stage, file_project, simple_root_names, simple_root_pages, splice_find_links,
};
use crate::state::io::{
    SPLIT_VERSION, commit_object, ensure_object_unmoved, load_object, load_projects, merge, object_put, project_key,
    split,
};
use crate::state::root::RepoRoot;
use crate::state::{RepoState, STATE_VERSION};

/// Largest root page read back to splice.
const MAX_ROOT_PAGE: u64 = 1 << 30;

/// The root's own pages after a project's event: the manifest to commit, pages to write,
/// outputs to delete once committed.
struct RootPages {
    manifest: RepoState,
    writes: Vec<Output>,
    deletes: Vec<String>,
}

impl Indexer {
    /// A whole-root attempt on a pip root: list everything, commit every project whose share
    /// changed, then the manifest. Migrates a single-object state (version 1) in its commit.
    pub(crate) async fn attempt_split(&self, root: &RepoRoot, pass: &mut Pass) -> Result<ReindexReport, IndexError> {
        let store = self.store().as_ref();
        let state_key = root.state_key();
        let manifest = load_object(store, &state_key).await?;
        let objects = load_projects(store, root).await?;
        let mut seen = BTreeMap::from([(state_key.to_string(), manifest.as_ref().map(|(_, e)| e.clone()))]);
        for (name, (_, etag)) in &objects {
            seen.insert(project_key(root, name)?.to_string(), Some(etag.clone()));
        }
        pass.verify(&seen);
        let (old, committed) = match &manifest {
            Some((m, _)) if m.version == SPLIT_VERSION => (merge(m, objects.values().map(|(s, _)| s)), true),
            Some((m, _)) if m.version == STATE_VERSION => (m.clone(), false),
            _ => (RepoState::empty(), false),
        };
        let manifest_etag = manifest.map(|(_, e)| e);
        let (prefix, recursive) = root.package_prefix();
        let listed = store.list_all(&prefix, !recursive).await?;
        let listing = RootListing::new(root, listed.objects)
            .with_directories(root, &listed.common_prefixes)
            .without(&pass.leaving);
        if listing.is_empty() && manifest_etag.is_none() && !pass.force_all {
            return Ok(ReindexReport { root: root.to_string(), ..ReindexReport::default() });
        }
        let inspections = self.inspect_unknown(listing.unknown(&old), &mut pass.inspected).await?;
        let yanks = self.read_yank_reasons(listing.markers_to_read(&old, &inspections)).await?;
        let parts = Parts { simple_root: true, find_links: self.config().find_links(self.layout(), root.as_str()) };
        // A per-family view: the generic root's files, listed beside the view's own.
        let view = crate::reindex::view::source_for(store, self.layout(), root).await?;
        let Plan { state, mut report, writes, pages, deletes, unchanged } = plan(PlanInput {
            root,
            old: &old,
            committed,
            listing: &listing,
            inspections,
            yanks,
            config: self.config(),
            now: jiff::Timestamp::now().as_second(),
            force: pass.force_all,
            dirty: &pass.dirty,
            parts,
            view: view.as_ref(),
            chunks: &crate::render::chunked::ChunkCache::new(),
        })?;
        if unchanged {
            return Ok(report);
        }
        if !report.added.is_empty() {
            ensure_object_unmoved(store, &state_key, manifest_etag.as_deref()).await?;
        }
        pass.dirty.extend(pages);
        for outputs in writes.into_values() {
            report.written.extend(self.publish(outputs).await?);
        }
        let (new_manifest, projects) = split(root, &state);
        self.commit_projects(root, projects, &objects, pass).await?;
        let etag = commit_object(store, &state_key, &new_manifest, manifest_etag).await?;
        pass.expect.push((state_key.to_string(), etag));
        report.committed = true;
        report.deleted = self.delete_stale(&deletes).await;
        Ok(report)
    }

    /// Commit each project share that differs from its stored object (a project gone is
    /// committed empty), concurrently; each commit is conditional on the object read.
    async fn commit_projects(
        &self,
        root: &RepoRoot,
        mut projects: BTreeMap<String, RepoState>,
        stored: &BTreeMap<String, (RepoState, String)>,
        pass: &mut Pass,
    ) -> Result<(), IndexError> {
        for name in stored.keys() {
            projects
                .entry(name.clone())
                .or_insert_with(|| RepoState { version: SPLIT_VERSION, ..RepoState::default() });
        }
        let mut todo = Vec::new();
        for (name, share) in projects {
            let before = stored.get(&name);
            if before.is_some_and(|(s, _)| *s == share) {
                continue;
            }
            todo.push((project_key(root, &name)?, share, before.map(|(_, etag)| etag.clone())));
        }
        let mut items = Vec::with_capacity(todo.len());
        for (key, share, read) in todo {
            let (body, options) = object_put(&share, read)?;
            items.push((key, body, options));
        }
        // Batched as outputs are (one blocking task, one lock and one directory sync each on a
        // local store).
        let results = self.put_batched(items).await;
        let mut failed = None;
        for (key, result) in results {
            match result {
                Ok(put) => pass.expect.push((key.to_string(), put.etag)),
                Err(e) => failed = failed.or(Some(IndexError::from(e))),
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// An attempt about one project; `None` when the root must be reconciled whole instead
    /// (no split manifest yet, an unreadable project object, root pages not as recorded).
    pub(crate) async fn attempt_project(
        &self,
        root: &RepoRoot,
        project: &ProjectScope,
        pass: &mut Pass,
    ) -> Result<Option<ReindexReport>, IndexError> {
        let store = self.store().as_ref();
        // A per-family view's project pages list the generic root's files of the project too
        // (its share, read as committed). Its find-links page lists every generic file: a view
        // with one is reconciled whole.
        let view = match crate::reindex::view::generic_of(self.layout(), root) {
            Some(_) if self.config().find_links(self.layout(), root.as_str()) => return Ok(None),
            Some(generic) => match crate::reindex::view::project_source(store, root, &generic, project.name()).await? {
                Some(source) => Some(source),
                None => return Ok(None),
            },
            None => None,
        };
        let state_key = root.state_key();
        let Some((manifest, manifest_etag)) = load_object(store, &state_key).await? else {
            return Ok(None);
        };
        let key = project_key(root, project.name())?;
        let (mut old, project_etag) = match load_object(store, &key).await? {
            Some((share, etag)) => (share, Some(etag)),
            None => (RepoState { version: SPLIT_VERSION, ..RepoState::default() }, None),
        };
        if manifest.version != SPLIT_VERSION || old.version != SPLIT_VERSION {
            return Ok(None);
        }
        pass.verify(&BTreeMap::from([
            (state_key.to_string(), Some(manifest_etag.clone())),
            (key.to_string(), project_etag.clone()),
        ]));
        // Planned like a whole state (the plan's version), committed as a share.
        old.version = STATE_VERSION;
        let listing = self.list_project(root, project, &old).await?.without(&pass.leaving);
        let inspections = self.inspect_unknown(listing.unknown(&old), &mut pass.inspected).await?;
        let yanks = self.read_yank_reasons(listing.markers_to_read(&old, &inspections)).await?;
        let Plan { mut state, mut report, mut writes, pages, mut deletes, unchanged } = plan(PlanInput {
            root,
            old: &old,
            // An absent project object is an empty project of a committed root.
            committed: true,
            listing: &listing,
            inspections,
            yanks,
            config: self.config(),
            now: jiff::Timestamp::now().as_second(),
            force: pass.force_all,
            dirty: &pass.dirty,
            parts: Parts::PROJECTS,
            view: view.as_ref(),
            chunks: &crate::render::chunked::ChunkCache::new(),
        })?;
        let Some(RootPages { manifest: next, writes: root_writes, deletes: root_deletes }) =
            self.root_pages(root, project, &manifest, &old, &state, &pass.dirty).await?
        else {
            // A root page this call wrote itself in a lost attempt will not come back to what
            // the manifest records: only another event's page in flight may.
            let paths = PagePaths::of(root);
            let own = [paths.root_html(), paths.root_json(), FIND_LINKS]
                .iter()
                .any(|page| pass.dirty.contains(&format!("{root}{page}")));
            // Another event's: retried as a lost race (`PROJECT_ATTEMPTS` attempts as a
            // project, then the whole root, in `Indexer::run_one`).
            if !own {
                return Err(StoreError::Conflict {
                    key: state_key.to_string(),
                    reason: "a root page is not the one the manifest records (another event in flight?)".into(),
                }
                .into());
            }
            tracing::info!(%root, project = project.name(), "root pages not as recorded; reconciling the whole root");
            return Ok(None);
        };
        if unchanged && next == manifest && root_writes.is_empty() && root_deletes.is_empty() {
            return Ok(Some(report));
        }
        if !report.added.is_empty() {
            ensure_object_unmoved(store, &key, project_etag.as_deref()).await?;
        }
        pass.dirty.extend(pages);
        pass.dirty.extend(root_writes.iter().map(|o| o.key.to_string()));
        writes.entry(Stage::Pointer).or_default().extend(root_writes);
        for outputs in writes.into_values() {
            report.written.extend(self.publish(outputs).await?);
        }
        if !unchanged {
            state.version = SPLIT_VERSION;
            let etag = commit_object(store, &key, &state, project_etag).await?;
            pass.expect.push((key.to_string(), etag));
        }
        if next != manifest {
            let etag = commit_object(store, &state_key, &next, Some(manifest_etag)).await?;
            pass.expect.push((state_key.to_string(), etag));
        }
        report.committed = true;
        deletes.extend(root_deletes);
        report.deleted = self.delete_stale(&deletes).await;
        Ok(Some(report))
    }

    /// `project`'s files: one listing per spelling of its name (the event's, and every one its
    /// state holds), keeping only the files that are the project's. In a structured root, the
    /// one listing of its directory (files elsewhere are the whole root's to refuse).
    async fn list_project(
        &self,
        root: &RepoRoot,
        project: &ProjectScope,
        old: &RepoState,
    ) -> Result<RootListing, IndexError> {
        if root.is_structured() {
            let objects = self.store().list_all(&format!("{root}{}/", project.name()), true).await?.objects;
            let mut listing = RootListing::new(root, objects);
            listing.misplaced.clear();
            return Ok(listing);
        }
        let mut spellings = BTreeSet::from([project.spelling().to_owned()]);
        for name in old.entries.keys().chain(old.rejected.keys()) {
            spellings.extend(spelling(name, project.name()).map(str::to_owned));
        }
        let mut objects = BTreeMap::new();
        for spelled in spellings {
            for object in self.store().list_all(&format!("{root}{spelled}-"), true).await?.objects {
                objects.insert(object.key.to_string(), object);
            }
        }
        let mut listing = RootListing::new(root, objects.into_values().collect());
        let mine = |name: &String| file_project(name).is_some_and(|p| p.as_str() == project.name());
        listing.files.retain(|name, _| mine(name));
        listing.yank_markers.retain(|name, _| mine(name));
        Ok(listing)
    }

    /// The root's pages after `project` went from `old` to `new`: the simple root when the
    /// project appeared or went, the find-links page when enabled and the project's files
    /// changed (or removed when disabled). `None` when a stored page to splice is not the one
    /// the manifest records.
    async fn root_pages(
        &self,
        root: &RepoRoot,
        project: &ProjectScope,
        manifest: &RepoState,
        old: &RepoState,
        new: &RepoState,
        dirty: &BTreeSet<String>,
    ) -> Result<Option<RootPages>, IndexError> {
        let mut pages = RootPages { manifest: manifest.clone(), writes: Vec::new(), deletes: Vec::new() };
        let paths = PagePaths::of(root);
        let (html, json) = (root.key(paths.root_html())?, root.key(paths.root_json())?);
        // Listed on the simple root: a project with files; in a view, one with pages (its
        // files may all be the generic root's).
        let view = crate::reindex::view::generic_of(self.layout(), root).is_some();
        let page = root.key(&paths.project_html(project.name()))?;
        let listed = |state: &RepoState| match view {
            false => !state.entries.is_empty(),
            true => state.outputs.contains_key(page.as_str()),
        };
        let (was, is) = (listed(old), listed(new));
        if was != is || dirty.contains(html.as_str()) || dirty.contains(json.as_str()) {
            let Some(names) = self.recorded(&json, manifest).await?.and_then(|b| simple_root_names(&b)) else {
                return Ok(None);
            };
            let mut names: Vec<String> = names.into_iter().filter(|n| n != project.name()).collect();
            if is {
                names.push(project.name().to_owned());
            }
            names.sort();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            for page in simple_root_pages(paths, &names) {
                pages.add(root.key(&page.path)?, page.body, page.content_type);
            }
        }
        if !paths.has_find_links() {
            // The root's `index.html` is its project list (above).
            return Ok(Some(pages));
        }
        let find_links = root.key(FIND_LINKS)?;
        if !self.config().find_links(self.layout(), root.as_str()) {
            if pages.manifest.outputs.remove(find_links.as_str()).is_some() {
                pages.deletes.push(find_links.to_string());
            }
        } else if old.entries != new.entries || dirty.contains(find_links.as_str()) {
            let Some(current) = self.recorded(&find_links, manifest).await? else {
                return Ok(None);
            };
            let Ok(name) = PackageName::new(project.name()) else {
                return Ok(None);
            };
            let spliced = std::str::from_utf8(&current).ok().and_then(|c| splice_find_links(root, c, &name, new));
            let Some(page) = spliced else {
                return Ok(None);
            };
            pages.add(find_links, page.body, page.content_type);
        }
        Ok(Some(pages))
    }

    /// The stored page at `key` if its hash is the one `manifest` records for it.
    async fn recorded(&self, key: &Key, manifest: &RepoState) -> Result<Option<Bytes>, IndexError> {
        let Some(expected) = manifest.outputs.get(key.as_str()) else {
            return Ok(None);
        };
        match self.store().get_bytes(key, MAX_ROOT_PAGE).await {
            Ok((_, body)) if sha256_hex(&body) == *expected => Ok(Some(body)),
            Ok(_) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

impl RootPages {
    /// Write `body` at `key` (recorded in the manifest) unless the manifest records it already.
    fn add(&mut self, key: Key, body: Vec<u8>, content_type: &'static str) {
        let sha = sha256_hex(&body);
        if self.manifest.outputs.get(key.as_str()) == Some(&sha) {
            return;
        }
        self.manifest.outputs.insert(key.to_string(), sha);
        self.writes.push(Output { key, body: Bytes::from(body), content_type });
    }
}
