//! Per-family views: a pip root the layout marks `view = "family"` with a `generic` root (the
//! `therock-release` preset's `v2/{family}/` with `v2/generic/`) lists its own files plus the
//! generic root's, without holding a copy of them: its pages link across roots
//! (`../../../generic/x.whl` from `v2/gfx94X-dcgpu/simple/x/`), with the generic root's hashes
//! and `.metadata` sidecars (PEP 658 finds a sidecar at the file's URL + `.metadata`).
//!
//! Readers never see a view naming a missing generic file: a view renders the generic root's
//! *committed* state, which names only files (and sidecars) that landed before it was
//! committed; and every reindex of a generic root refreshes its views after it
//! ([`Indexer::reindex`] and its siblings), so a view learns of new generic files only once they
//! are in place. Removal goes the other way round: `quarry prune` of a generic root first
//! marks the files it is about to delete, republishes the root and every view without them
//! ([`Indexer::reindex_before_removal`]), then deletes them, then reindexes the generic root.
//! A file deleted otherwise (by hand, a lifecycle rule; the Lambda then gets the delete event)
//! is named by the views' pages until the generic root's reindex refreshes them.
//!
//! A view's pages link a generic file as [`href_between`] the two roots plus its name, with the
//! generic root's hash and sidecar; a file of the same name the view holds itself wins and is
//! listed once, as the view's. [`Indexer::run`] refreshes the views after their generic root:
//! whole after a whole reindex, that project only after a project's event. The views are
//! found in the store by [`views_of`], one delimiter listing per `{placeholder}` level of each
//! rule naming the generic root ([`roots_of_rule`]). A view's own project event reads only the
//! generic root's manifest and that project's object (`project_source`), so it costs the same
//! whatever either root holds; a view with its find-links page on (which lists every generic
//! file), or over a generic root whose state is not split, is reconciled whole instead.

use quarry_layout::config::{Layout, RootKind, RootRule};
use quarry_store::{Store, StoreError, StoreExt};

use crate::error::IndexError;
use crate::reindex::indexer::{Indexer, Request};
use crate::reindex::report::ReindexReport;
use crate::render::pip::Extra;
use crate::state::io::{SPLIT_VERSION, load_object, project_key, read_state};
use crate::state::root::{RepoKind, RepoRoot};
use crate::state::{RepoState, STATE_VERSION};

/// What a view lists besides its own files: the generic root's committed state, and the href
/// prefix leading from the view's root to the generic root.
#[derive(Debug, Clone)]
pub(crate) struct ViewSource {
    /// The generic root.
    pub(crate) root: RepoRoot,
    pub(crate) state: RepoState,
    pub(crate) href_prefix: String,
}

impl ViewSource {
    /// The render hook's form.
    pub(crate) fn extra(&self) -> Extra<'_> {
        Extra { state: &self.state, href_prefix: &self.href_prefix }
    }
}

/// Whether `rule` makes `prefix` a per-family view: `view = "family"` with a generic root
/// that is not `prefix` itself (the generic root matches its views' pattern too).
fn generic_root_of<'a>(rule: &'a RootRule, prefix: &str) -> Option<&'a str> {
    let generic = rule.generic.as_deref().filter(|_| rule.view.as_deref() == Some("family"))?;
    (generic.trim_end_matches('/') != prefix.trim_end_matches('/')).then_some(generic)
}

/// The generic root `root` is a per-family view of, under `layout`.
pub fn generic_of(layout: &Layout, root: &RepoRoot) -> Option<RepoRoot> {
    if root.kind() != RepoKind::Pip {
        return None;
    }
    let rule = layout.rule_for(root.as_str())?;
    RepoRoot::with_kind(generic_root_of(rule, root.as_str())?, RepoKind::Pip).ok()
}

/// The relative href from a page at `from` (a root prefix) to the files of root `to`:
/// `../generic/` from `v2/gfx94X-dcgpu/` to `v2/generic/`. Segments are percent-encoded as
/// file names in hrefs are.
pub fn href_between(from: &str, to: &str) -> String {
    let from: Vec<&str> = from.split('/').filter(|s| !s.is_empty()).collect();
    let to: Vec<&str> = to.split('/').filter(|s| !s.is_empty()).collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = "../".repeat(from.len() - common);
    for segment in &to[common..] {
        out.push_str(&crate::render::pip::encode_segment(segment));
        out.push('/');
    }
    out
}

/// The generic root's committed state for a view's reindex (`None`: `root` is no view, or its
/// generic root was never indexed).
pub(crate) async fn source_for(
    store: &dyn Store,
    layout: &Layout,
    root: &RepoRoot,
) -> Result<Option<ViewSource>, StoreError> {
    let Some(generic) = generic_of(layout, root) else {
        return Ok(None);
    };
    let Some(state) = read_state(store, &generic).await? else {
        return Ok(None);
    };
    let href_prefix = href_between(root.as_str(), generic.as_str());
    Ok(Some(ViewSource { root: generic, state, href_prefix }))
}

/// The generic root's committed share of one project, for a view's event about that project:
/// two reads (the generic root's manifest and the project's object) whatever the size of
/// either root. An empty share when the generic root was never indexed or lacks the project;
/// `None` when its state is not split (the view is then reconciled whole).
pub(crate) async fn project_source(
    store: &dyn Store,
    root: &RepoRoot,
    generic: &RepoRoot,
    project: &str,
) -> Result<Option<ViewSource>, IndexError> {
    let mut state = match load_object(store, &generic.state_key()).await? {
        None => RepoState::empty(),
        Some((manifest, _)) if manifest.version != SPLIT_VERSION => return Ok(None),
        Some(_) => match load_object(store, &project_key(generic, project)?).await? {
            Some((share, _)) if share.version != SPLIT_VERSION => return Ok(None),
            Some((share, _)) => share,
            None => RepoState::empty(),
        },
    };
    state.version = STATE_VERSION;
    let href_prefix = href_between(root.as_str(), generic.as_str());
    Ok(Some(ViewSource { root: generic.clone(), state, href_prefix }))
}

/// The prefixes the store holds that `rule`'s pattern matches: literal segments appended,
/// each `{placeholder}` level found by one delimiter listing (`v2/{family}/`: one listing of
/// `v2/`). Sorted.
pub async fn roots_of_rule(store: &dyn Store, rule: &RootRule) -> Result<Vec<String>, StoreError> {
    let mut prefixes = vec![String::new()];
    for segment in rule.prefix.trim_end_matches('/').split('/') {
        if !segment.starts_with('{') {
            prefixes.iter_mut().for_each(|p| p.push_str(&format!("{segment}/")));
            continue;
        }
        let mut next = Vec::new();
        for prefix in &prefixes {
            let listed = store.list_all(prefix, true).await?.common_prefixes;
            next.extend(listed);
        }
        prefixes = next;
    }
    if !rule.prefix.contains('{') {
        // A literal root: there when anything lies under it.
        let mut there = Vec::new();
        for prefix in prefixes {
            let listed = store.list(&prefix, quarry_store::ListOptions { max_keys: Some(1), ..Default::default() });
            let page = listed.await?;
            if !page.objects.is_empty() || !page.common_prefixes.is_empty() {
                there.push(prefix);
            }
        }
        prefixes = there;
    }
    // Placeholders match no segment starting with `.`.
    prefixes.retain(|p| rule.matches(p).is_some());
    prefixes.sort();
    Ok(prefixes)
}

/// The view roots whose generic root is `generic`, found in the store: for each rule naming
/// it, the prefixes its pattern matches ([`roots_of_rule`]), the generic root itself left out.
pub async fn views_of(store: &dyn Store, layout: &Layout, generic: &RepoRoot) -> Result<Vec<RepoRoot>, IndexError> {
    let mut views = Vec::new();
    let names = |r: &RootRule| r.generic.as_deref().map(|g| g.trim_end_matches('/').to_owned());
    let wanted = generic.as_str().trim_end_matches('/');
    for rule in layout.roots.iter().filter(|r| r.kind == RootKind::Pip && names(r).as_deref() == Some(wanted)) {
        for prefix in roots_of_rule(store, rule).await? {
            // The first matching rule decides, as everywhere else: a view of this generic root.
            let root = RepoRoot::with_kind(&prefix, RepoKind::Pip).ok();
            let view = root.filter(|r| generic_of(layout, r).as_ref() == Some(generic));
            views.extend(view);
        }
    }
    views.sort();
    views.dedup();
    Ok(views)
}

impl Indexer {
    /// One reindex ([`Request`]) of its root, then, if the root is a generic root, every
    /// view of it (with the same project and inspections: a promotion's copies are not read
    /// again): a view never names a generic file before the generic root's state does. The
    /// report is the root's; the views' are logged.
    pub async fn run(&self, request: Request) -> Result<ReindexReport, IndexError> {
        let (root, project, known) = (request.root.clone(), request.project.clone(), request.known.clone());
        let leaving = request.leaving.clone();
        let report = self.run_one(request).await?;
        let layout = self.layout();
        if root.kind() != RepoKind::Pip || !layout.roots.iter().any(|r| r.generic.is_some()) {
            return Ok(report);
        }
        for view in views_of(self.store().as_ref(), layout, &root).await? {
            // Not forced: a view's pages change with the generic root's state, which the plan
            // compares; and a prefix the pattern matches that was never indexed stays so. A
            // project's event refreshes that project in each view, as the view's own event
            // about it would.
            let mut view_request = Request::new(view.clone()).knowing(known.clone()).leaving(leaving.clone());
            view_request.project = project.clone();
            let done = self.run_one(view_request).await?;
            tracing::info!(view = %view, generic = %root, "view refreshed: {done}");
        }
        Ok(report)
    }
}

impl Indexer {
    /// Before files of `root` are deleted (`quarry prune`, which marked them with
    /// [`crate::LEAVING_SUFFIX`]): the root reindexed without them, then every view of it, so
    /// that no page names them (nor their `.metadata`, deleted once the pages stopped naming
    /// it) when they go.
    /// Files in `leaving` (keys) are left out as well ([`Request::leaving`]).
    pub async fn reindex_before_removal(
        &self,
        root: &RepoRoot,
        leaving: &std::collections::BTreeSet<String>,
    ) -> Result<ReindexReport, IndexError> {
        let report = self.run_one(Request::new(root.clone()).leaving(leaving.clone())).await?;
        let layout = self.layout();
        if root.kind() != RepoKind::Pip || !layout.roots.iter().any(|r| r.generic.is_some()) {
            return Ok(report);
        }
        for view in views_of(self.store().as_ref(), layout, root).await? {
            let done = self.run_one(Request::new(view.clone()).leaving(leaving.clone())).await?;
            tracing::info!(view = %view, generic = %root, "view refreshed before a deletion: {done}");
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preset() -> Layout {
        Layout::preset("therock-release").unwrap()
    }

    #[test]
    fn hrefs_lead_from_a_view_to_its_generic_root() {
        assert_eq!(href_between("v2/gfx94X-dcgpu/", "v2/generic/"), "../generic/");
        assert_eq!(href_between("a/b/c/", "a/x/"), "../../x/");
        assert_eq!(href_between("a/", "b/c/"), "../b/c/");
        assert_eq!(href_between("a/b+c/", "a/d+e/"), "../d%2Be/");
    }

    #[test]
    fn the_preset_families_are_views_of_their_generic_root_but_not_it() {
        let layout = preset();
        let root = |p: &str| RepoRoot::new(p, &layout).unwrap();
        assert_eq!(generic_of(&layout, &root("v2/gfx94X-dcgpu/")), Some(root("v2/generic/")));
        assert_eq!(generic_of(&layout, &root("v2-staging/gfx120X-all/")), Some(root("v2-staging/generic/")));
        assert_eq!(generic_of(&layout, &root("v2/generic/")), None, "a generic root views nothing");
        assert_eq!(generic_of(&layout, &root("python-deps/")), None);
        assert_eq!(generic_of(&layout, &root("v3/packages/deb/")), None);
    }

    #[tokio::test]
    async fn views_are_found_by_one_listing() {
        let store = quarry_store::MemoryStore::default();
        for key in [
            "v2/generic/a-1.0-py3-none-any.whl",
            "v2/gfx94X-dcgpu/b-1.0-py3-none-any.whl",
            "v2/gfx120X-all/c-1.0-py3-none-any.whl",
            "v2-staging/gfx950-dcgpu/d-1.0-py3-none-any.whl",
        ] {
            let key = quarry_store::Key::new(key).unwrap();
            store.put_bytes(&key, bytes::Bytes::from_static(b"x"), quarry_store::PutOptions::default()).await.unwrap();
        }
        let layout = preset();
        let generic = RepoRoot::new("v2/generic/", &layout).unwrap();
        let views = views_of(&store, &layout, &generic).await.unwrap();
        let views: Vec<&str> = views.iter().map(RepoRoot::as_str).collect();
        assert_eq!(views, ["v2/gfx120X-all/", "v2/gfx94X-dcgpu/"]);
        let rpm = layout.rule_for("v3/packages/rpm/x86_64/").unwrap();
        assert!(roots_of_rule(&store, rpm).await.unwrap().is_empty());
        let deps = layout.rule_for("python-deps/").unwrap();
        assert!(
            roots_of_rule(&store, deps).await.unwrap().is_empty(),
            "a literal root is there once it holds something"
        );
        let staging = layout.rule_for("v2-staging/x/").unwrap();
        assert_eq!(roots_of_rule(&store, staging).await.unwrap(), ["v2-staging/gfx950-dcgpu/"]);
        let family = RepoRoot::new("v2/gfx94X-dcgpu/", &layout).unwrap();
        assert!(views_of(&store, &layout, &family).await.unwrap().is_empty());
    }
}
