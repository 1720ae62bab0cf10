//! The pure half of a reindex: from the state read, the root's listing and what inspecting its
//! new files found, decide the state to commit, the outputs to write stage by stage
//! ([`Stage`]), and the outputs to delete once that state is committed. No store access: the
//! publish loop (`publish.rs`) reads, calls [`plan`], then writes what it says.
//!
//! Deletions name pages first, then the `.metadata` sidecars they name, so no page is left
//! pointing at a deleted sidecar. apt and dnf content-addressed outputs (`by-hash/` copies,
//! `repodata/<sha>-…`) that the new state no longer lists move to its `retired` map and are
//! deleted only once `QUARRY_GRACE_SECONDS` (a day by default) have passed, so a client holding
//! an older `InRelease` or `repomd.xml` can still fetch what it names. Their `generated` time
//! moves only when the entries change, so an unchanged repo renders and signs to the same bytes
//! and writes nothing.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use quarry_store::{Key, ObjectMeta, sha256_hex};

use crate::config::IndexConfig;
use crate::error::IndexError;
use crate::reindex::inspect::Inspected;
use crate::reindex::report::ReindexReport;
use crate::render::chunked::ChunkCache;
use crate::render::pip::{self as render, Page, Stage};
use crate::state::root::{RepoKind, RepoRoot};
use crate::state::{Rejected, RepoState};

pub use crate::state::root::{LEAVING_SUFFIX, METADATA_SUFFIX, YANK_SUFFIX};

/// A root's listing sorted into its package files and yank markers, by path relative to the
/// root; every other object is ignored.
#[derive(Debug, Default)]
pub(crate) struct RootListing {
    pub(crate) files: BTreeMap<String, ObjectMeta>,
    /// The marker's key, by the file it yanks.
    pub(crate) yank_markers: BTreeMap<String, Key>,
    /// Names directly in a pip root that hold objects (`x.whl.metadata/y`): planted behind the
    /// indexer's back (uploads of such keys are refused), they take the path of an output. In a
    /// structured root, the names in a project's directory that do.
    pub(crate) directories: BTreeSet<String>,
    /// Distribution files a structured root holds outside their project's directory, by key
    /// (never a file name: the file may also lie where it belongs): the version listed and why
    /// they are refused.
    pub(crate) misplaced: BTreeMap<String, (String, String)>,
    /// Files left out by [`Self::without`] (still stored): their sidecars stay, for the
    /// channel versions that still name them.
    pub(crate) left_out: BTreeSet<String>,
}

impl RootListing {
    /// Sort `objects` (listed under [`RepoRoot::package_prefix`]).
    pub(crate) fn new(root: &RepoRoot, objects: Vec<ObjectMeta>) -> Self {
        let mut listing = Self::default();
        let leaving: BTreeSet<String> =
            leaving(objects.iter().map(|o| o.key.as_str())).into_iter().map(str::to_owned).collect();
        for object in objects {
            let Some(relative) = object.key.as_str().strip_prefix(root.as_str()).map(str::to_owned) else {
                continue;
            };
            // A file about to be deleted is indexed as gone already (`quarry prune` marked it).
            if leaving.contains(object.key.as_str()) {
                continue;
            }
            if let Some(target) = relative.strip_suffix(YANK_SUFFIX) {
                if root.kind() == RepoKind::Pip
                    && root.is_package(target)
                    && let Some(name) = root.file_name_of(target)
                {
                    listing.yank_markers.insert(name.to_owned(), object.key);
                }
            } else if root.is_package(&relative) {
                let name = root.file_name_of(&relative).unwrap_or(&relative).to_owned();
                listing.files.insert(name, object);
            } else if let Some(reason) = root.misplaced(&relative) {
                listing.misplaced.insert(object.key.to_string(), (object.version(), reason));
            } else if root.kind() == RepoKind::Pip
                && let Some(directory) = squatting_directory(root, &relative)
            {
                listing.directories.insert(directory.to_owned());
            }
        }
        listing
    }

    /// Adds the directories a delimited listing gave as common prefixes (full keys ending
    /// in `/`) to [`Self::directories`].
    pub(crate) fn with_directories(mut self, root: &RepoRoot, prefixes: &[String]) -> Self {
        if root.kind() == RepoKind::Pip {
            let relative = prefixes.iter().filter_map(|p| p.strip_prefix(root.as_str()));
            self.directories.extend(relative.map(|p| p.trim_end_matches('/').to_owned()).filter(|d| !d.is_empty()));
        }
        self
    }

    /// Without the files `leaving` names (by key) and their yank markers: indexed as gone.
    pub(crate) fn without(mut self, leaving: &BTreeSet<String>) -> Self {
        if !leaving.is_empty() {
            let (left_out, kept): (BTreeMap<_, _>, BTreeMap<_, _>) =
                std::mem::take(&mut self.files).into_iter().partition(|(_, o)| leaving.contains(o.key.as_str()));
            self.files = kept;
            self.left_out.extend(left_out.into_values().map(|o| o.key.to_string()));
            self.yank_markers.retain(|_, marker| {
                marker.as_str().strip_suffix(YANK_SUFFIX).is_none_or(|file| !leaving.contains(file))
            });
        }
        self
    }

    /// No package file and no yank marker.
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty() && self.yank_markers.is_empty() && self.misplaced.is_empty()
    }

    /// Listed files `old` holds neither as an entry nor as rejected at their listed version:
    /// the ones to inspect, by name.
    pub(crate) fn unknown(&self, old: &RepoState) -> Vec<(String, ObjectMeta)> {
        self.files
            .iter()
            .filter(|(name, object)| {
                let version = object.version();
                let indexed = old.entries.get(*name).is_some_and(|e| e.etag == version);
                let rejected = old.rejected.get(*name).is_some_and(|r| r.etag == version);
                !(indexed || rejected)
            })
            .map(|(name, object)| (name.clone(), object.clone()))
            .collect()
    }

    /// The yank markers of files the plan will index (held by `old` at their listed version,
    /// or indexed by `inspections`), by file: their reasons are read before planning.
    pub(crate) fn markers_to_read(
        &self,
        old: &RepoState,
        inspections: &BTreeMap<String, Inspection>,
    ) -> Vec<(String, Key)> {
        let indexed = |name: &String| match inspections.get(name) {
            Some(inspection) => matches!(inspection, Inspection::Indexed(_)),
            None => self.files.get(name).is_some_and(|o| old.entries.get(name).is_some_and(|e| e.etag == o.version())),
        };
        self.yank_markers.iter().filter(|(name, _)| indexed(name)).map(|(n, k)| (n.clone(), k.clone())).collect()
    }
}

/// The directory an object at `relative` (to a pip root) lies in where outputs are named: the
/// root itself (`x.whl.metadata/y`), or in a structured root a project's directory
/// (`proj/x.whl.metadata/y`, given as `x.whl.metadata`).
fn squatting_directory<'a>(root: &RepoRoot, relative: &'a str) -> Option<&'a str> {
    if !root.is_structured() {
        return relative.split_once('/').map(|(directory, _)| directory);
    }
    let (_, rest) = relative.split_once('/')?;
    rest.split_once('/').map(|(directory, _)| directory)
}

/// The files (as `keys` spell them) a [`LEAVING_SUFFIX`] marker among `keys` marks.
pub(crate) fn leaving<'a>(keys: impl Iterator<Item = &'a str>) -> BTreeSet<&'a str> {
    keys.filter_map(|k| k.strip_suffix(LEAVING_SUFFIX)).collect()
}

/// What inspecting one listed file found.
#[derive(Debug, Clone)]
pub(crate) enum Inspection {
    /// A valid package: its entry (and a wheel's METADATA for the sidecar).
    Indexed(Box<Inspected>),
    /// Refused: remembered by version so it is not read again.
    Refused(Rejected),
}

/// One output to write.
#[derive(Debug, Clone)]
pub(crate) struct Output {
    pub(crate) key: Key,
    pub(crate) body: Bytes,
    pub(crate) content_type: &'static str,
}

/// Everything [`plan`] decides from.
#[derive(Debug)]
pub(crate) struct PlanInput<'a> {
    pub(crate) root: &'a RepoRoot,
    /// The state read (empty when there was none or it was unusable).
    pub(crate) old: &'a RepoState,
    /// Whether a state was read at all (false: the root was never committed).
    pub(crate) committed: bool,
    pub(crate) listing: &'a RootListing,
    /// What inspecting [`RootListing::unknown`] found, by name; a file missing here was
    /// deleted since the listing.
    pub(crate) inspections: BTreeMap<String, Inspection>,
    /// Yank reasons read for [`RootListing::markers_to_read`], by file.
    pub(crate) yanks: BTreeMap<String, String>,
    pub(crate) config: &'a IndexConfig,
    /// Unix time: the generation time of changed apt/dnf metadata, retirement times.
    pub(crate) now: i64,
    /// Republish every page.
    pub(crate) force: bool,
    /// Pages an earlier attempt wrote that are to be republished whatever the state says.
    pub(crate) dirty: &'a BTreeSet<String>,
    /// Which of a pip root's pages to render (a project's own event renders its pages only).
    pub(crate) parts: render::Parts,
    /// A per-family view's generic root (extra entries from another root, with an href
    /// prefix), `crate::reindex::view`.
    pub(crate) view: Option<&'a crate::reindex::view::ViewSource>,
    /// Compressed chunks of the previous apt/dnf outputs, reused where they still fit.
    pub(crate) chunks: &'a ChunkCache,
}

/// What one attempt writes, commits and deletes.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The state to commit.
    pub(crate) state: RepoState,
    /// Added, removed and rejected files (nothing written or deleted yet).
    pub(crate) report: ReindexReport,
    /// Outputs by stage, written stage after stage: sidecars and content-addressed files
    /// first, entry points last.
    pub(crate) writes: BTreeMap<Stage, Vec<Output>>,
    /// The pages among `writes` (not the sidecars): republished by a later attempt if this
    /// one's state does not stay committed.
    pub(crate) pages: Vec<String>,
    /// Outputs to delete after the commit: those the new state no longer lists (and does not
    /// retire), and retired ones past their grace period.
    pub(crate) deletes: Vec<String>,
    /// Nothing to write or commit: the state already says all this.
    pub(crate) unchanged: bool,
}

/// Decide what an attempt writes, commits and deletes. Pure: the same input gives the same plan.
pub(crate) fn plan(input: PlanInput<'_>) -> Result<Plan, IndexError> {
    let PlanInput { root, old, committed, listing, inspections, yanks, config, now, force, dirty, parts, view, chunks } =
        input;
    let mut report = ReindexReport { root: root.to_string(), ..ReindexReport::default() };
    let (mut state, sidecars) = admit(root, old, listing, inspections, &mut report)?;
    for (target, reason) in yanks {
        if let Some(entry) = state.entries.get_mut(&target) {
            entry.yanked = Some(reason);
        }
    }
    report.added.sort();
    report.removed = old.entries.keys().filter(|k| !state.entries.contains_key(*k)).cloned().collect();
    let pages = render_outputs(root, old, &mut state, config, now, How { parts, view, chunks })?;
    let expired = retire(root, old, &mut state, now, config.grace_seconds);
    // Pages this call wrote in an attempt that lost (or was overwritten) are rewritten even
    // when the state already holds everything: they may be the stale ones.
    let unchanged = !force && dirty.is_empty() && committed && state == *old;
    let mut plan = Plan { state, report, writes: BTreeMap::new(), pages: Vec::new(), deletes: Vec::new(), unchanged };
    if unchanged {
        return Ok(plan);
    }
    plan.stage(root, old, sidecars, pages, force, dirty)?;
    let current = &plan.state;
    let stale = old.outputs.keys().filter(|k| !current.outputs.contains_key(*k) && !current.retired.contains_key(*k));
    // Pages before the sidecars they name: pip reads a project page without the simple index.
    // A left-out file's sidecar stays with it (an older channel version's pages name both).
    let kept = |k: &String| k.strip_suffix(METADATA_SUFFIX).is_some_and(|f| listing.left_out.contains(f));
    let (sidecars, pages): (Vec<String>, Vec<String>) =
        stale.filter(|k| !kept(k)).cloned().chain(expired).partition(|k| k.ends_with(METADATA_SUFFIX));
    plan.deletes = pages.into_iter().chain(sidecars).collect();
    Ok(plan)
}

/// The new state's entries and rejections: `old`'s for files listed at the same version,
/// plus what the inspections found; and the sidecars of newly indexed wheels.
fn admit(
    root: &RepoRoot,
    old: &RepoState,
    listing: &RootListing,
    inspections: BTreeMap<String, Inspection>,
    report: &mut ReindexReport,
) -> Result<(RepoState, Vec<Output>), IndexError> {
    let mut state = RepoState::empty();
    for (name, object) in &listing.files {
        let version = object.version();
        if let Some(entry) = old.entries.get(name).filter(|e| e.etag == version) {
            let mut entry = entry.clone();
            // A removed marker unyanks (present ones are read again and applied after).
            if !listing.yank_markers.contains_key(name) {
                entry.yanked = None;
            }
            state.entries.insert(name.clone(), entry);
        } else if let Some(rejected) = old.rejected.get(name).filter(|r| r.etag == version) {
            state.rejected.insert(name.clone(), rejected.clone());
        }
    }
    let mut sidecars = Vec::new();
    let squatted = |name: &str| listing.directories.contains(&format!("{name}{METADATA_SUFFIX}"));
    for (name, entry) in &mut state.entries {
        if squatted(name) {
            entry.core_metadata_sha256 = None;
        }
    }
    for (name, inspection) in inspections {
        match inspection {
            Inspection::Indexed(found) => {
                let Inspected { mut entry, core_metadata } = *found;
                entry.filename.clone_from(&name);
                if let Some(reason) = variant_conflict(&state, &entry) {
                    report.rejected.insert(name.clone(), reason.clone());
                    state.rejected.insert(name, Rejected { etag: entry.etag, reason });
                    continue;
                }
                if squatted(&name) {
                    // The sidecar's path is a directory someone planted: the wheel is served
                    // without PEP 658 metadata (clients read the wheel) rather than not at all.
                    entry.core_metadata_sha256 = None;
                } else if let Some(body) = core_metadata {
                    let key = root.key(&format!("{}{METADATA_SUFFIX}", root.file_path(&name)))?;
                    sidecars.push(Output { key, body, content_type: "text/plain; charset=utf-8" });
                }
                report.added.push(name.clone());
                state.entries.insert(name, entry);
            }
            Inspection::Refused(rejected) => {
                report.rejected.insert(name.clone(), rejected.reason.clone());
                state.rejected.insert(name, rejected);
            }
        }
    }
    for (relative, (etag, reason)) in &listing.misplaced {
        report.rejected.insert(relative.clone(), reason.clone());
        state.rejected.insert(relative.clone(), Rejected { etag: etag.clone(), reason: reason.clone() });
    }
    for name in state.entries.keys().filter(|n| squatted(n)) {
        report.rejected.insert(
            format!("{name}{METADATA_SUFFIX}/"),
            format!(
                "a directory squats the name of {name}'s PEP 658 sidecar: the wheel is listed without it; \
                 remove the directory to restore it"
            ),
        );
    }
    Ok((state, sidecars))
}

/// Why a variant wheel's metadata cannot join its release's (the variant wheels of the same
/// name and version `state` already holds), if it cannot: PEP 825 requires one meaning per
/// label and compatible priorities across the release.
fn variant_conflict(state: &RepoState, entry: &crate::state::Entry) -> Option<String> {
    let variant = entry.variant.as_deref()?;
    let release = |filename: &str| {
        let parsed = filename.parse::<quarry_packaging::WheelFilename>().ok()?;
        Some((parsed.name, parsed.version))
    };
    let this = release(&entry.filename)?;
    let others = state
        .entries
        .values()
        .filter(|e| e.filename != entry.filename && e.variant.is_some() && release(&e.filename).as_ref() == Some(&this))
        .filter_map(|e| e.variant.as_deref());
    let mut merged = crate::variant::merge_release(others).ok()??;
    merged.merge(variant).err().map(|e| format!("{}: {e}", entry.filename))
}

/// How a pip or apt/dnf root's pages are rendered: which pip pages, a view's generic root,
/// the apt/dnf chunks to reuse.
#[derive(Clone, Copy)]
struct How<'a> {
    parts: render::Parts,
    view: Option<&'a crate::reindex::view::ViewSource>,
    chunks: &'a ChunkCache,
}

/// Render every page of `state` and record every output's sha256 in it. apt and dnf
/// metadata's generation time moves only with the entries, so an unchanged repo renders (and
/// signs) to the same bytes.
fn render_outputs(
    root: &RepoRoot,
    old: &RepoState,
    state: &mut RepoState,
    config: &IndexConfig,
    now: i64,
    how: How<'_>,
) -> Result<Vec<Page>, IndexError> {
    let How { parts, view, chunks } = how;
    if root.kind() != RepoKind::Pip {
        state.generated = match old.generated {
            Some(then) if state.entries == old.entries => Some(then),
            Some(then) => Some(now.max(then + 1)),
            None => Some(now),
        };
    }
    let pages = match root.kind() {
        RepoKind::Pip => render::render_parts(root, state, parts, view.map(crate::reindex::view::ViewSource::extra)),
        RepoKind::Apt => crate::render::apt::render_cached(state, &config.apt, config.signer.as_deref(), chunks)?,
        RepoKind::Dnf => crate::render::dnf::render_from(state, Some(old), config.signer.as_deref(), chunks)?,
    };
    let known = known_digests(root.kind(), &pages);
    for page in &pages {
        let sha = known
            .iter()
            .find(|(_, body)| *body == page.body.as_slice())
            .map_or_else(|| sha256_hex(&page.body), |(sha, _)| (*sha).to_owned());
        state.outputs.insert(format!("{root}{}", page.path), sha);
    }
    for entry in state.entries.values() {
        if let Some(hash) = &entry.core_metadata_sha256 {
            state.outputs.insert(format!("{root}{}{METADATA_SUFFIX}", root.file_path(&entry.filename)), hash.clone());
        }
    }
    Ok(pages)
}

/// The sha256 of the content-addressed apt/dnf pages, read from their paths (the renderer named
/// them by it): apt's `by-hash/SHA256/<sha>` copies and dnf's `repodata/<sha>-<kind>.xml.gz`.
/// A page with the same bytes (apt's canonical `Packages`) has the same digest: the big
/// indexes are not hashed again.
fn known_digests(kind: RepoKind, pages: &[Page]) -> Vec<(&str, &[u8])> {
    fn named(kind: RepoKind, path: &str) -> Option<&str> {
        let sha = match kind {
            RepoKind::Pip => return None,
            RepoKind::Apt => path.rsplit_once("/by-hash/SHA256/")?.1,
            RepoKind::Dnf => path.strip_prefix("repodata/")?.split_once('-')?.0,
        };
        (sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))).then_some(sha)
    }
    let known: Vec<(&str, &[u8])> =
        pages.iter().filter_map(|p| Some((named(kind, &p.path)?, p.body.as_slice()))).collect();
    debug_assert!(
        known.iter().all(|(sha, body)| sha256_hex(body) == *sha),
        "a content-addressed page's name is its sha256"
    );
    known
}

/// Superseded content-addressed outputs stay for the grace period, then go: carry `old`'s
/// retired outputs, retire the ones `state` no longer lists, and return those past
/// `grace_seconds` (removed from `state`).
fn retire(root: &RepoRoot, old: &RepoState, state: &mut RepoState, now: i64, grace_seconds: i64) -> Vec<String> {
    state.retired = old.retired.clone();
    state.retired.retain(|key, _| !state.outputs.contains_key(key));
    for stale in old.outputs.keys().filter(|k| !state.outputs.contains_key(*k)) {
        if retained(root, stale) {
            state.retired.insert(stale.clone(), now);
        }
    }
    let expired: Vec<String> = state
        .retired
        .iter()
        .filter(|(_, since)| now - **since >= grace_seconds.max(0))
        .map(|(k, _)| k.clone())
        .collect();
    for key in &expired {
        state.retired.remove(key);
    }
    expired
}

/// Whether an output of `root` (a full key) is content-addressed and outlives its state:
/// apt `by-hash/` copies and dnf `repodata/<sha>-…` documents.
fn retained(root: &RepoRoot, key: &str) -> bool {
    let relative = key.strip_prefix(root.as_str()).unwrap_or(key);
    match root.kind() {
        RepoKind::Pip => false,
        RepoKind::Apt => relative.starts_with("dists/") && relative.contains("/by-hash/"),
        RepoKind::Dnf => relative.starts_with("repodata/") && !relative.starts_with("repodata/repomd.xml"),
    }
}

impl Plan {
    /// Stage by stage: immutable sidecars and content-addressed files first, so no page ever
    /// advertises a missing object; then the indices, then the pages pointing at them, their
    /// signatures, and the entry point clients read first. A page whose bytes did not change
    /// is skipped unless forced or dirty.
    fn stage(
        &mut self,
        root: &RepoRoot,
        old: &RepoState,
        sidecars: Vec<Output>,
        pages: Vec<Page>,
        force: bool,
        dirty: &BTreeSet<String>,
    ) -> Result<(), IndexError> {
        self.writes.entry(Stage::Immutable).or_default().extend(sidecars);
        for Page { path, body, content_type, stage } in pages {
            let key = root.key(&path)?;
            if !force
                && !dirty.contains(key.as_str())
                && old.outputs.get(key.as_str()) == self.state.outputs.get(key.as_str())
            {
                continue;
            }
            self.pages.push(key.to_string());
            self.writes.entry(stage).or_default().push(Output { key, body: Bytes::from(body), content_type });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_entry;

    const ROOT: &str = "7-linux/python/";
    const WHEEL: &str = "alpha-1.0-py3-none-any.whl";

    fn object(key: &str, etag: &str) -> ObjectMeta {
        ObjectMeta {
            key: Key::new(key).unwrap(),
            size: 10,
            etag: etag.into(),
            last_modified: jiff::Timestamp::UNIX_EPOCH,
            sha256: None,
            content_type: None,
        }
    }

    fn listing(root: &RepoRoot, keys: &[(&str, &str)]) -> RootListing {
        RootListing::new(root, keys.iter().map(|(k, etag)| object(&format!("{root}{k}"), etag)).collect())
    }

    /// A wheel inspected at `etag` (the plan names the entry after its path in the root).
    fn wheel(etag: &str) -> Inspection {
        let mut entry = test_entry("unnamed");
        entry.etag = etag.into();
        entry.core_metadata_sha256 = Some(sha256_hex(b"Name: alpha\n"));
        Inspection::Indexed(Box::new(Inspected { entry, core_metadata: Some(Bytes::from_static(b"Name: alpha\n")) }))
    }

    struct Case {
        root: RepoRoot,
        old: RepoState,
        committed: bool,
        listing: RootListing,
        inspections: BTreeMap<String, Inspection>,
        yanks: BTreeMap<String, String>,
        config: IndexConfig,
        now: i64,
        force: bool,
        dirty: BTreeSet<String>,
    }

    impl Case {
        fn new(root: &str, old: RepoState, listing: &[(&str, &str)]) -> Self {
            let root = RepoRoot::new(root, &Default::default()).unwrap();
            let listing = self::listing(&root, listing);
            Self {
                root,
                committed: old != RepoState::empty(),
                old,
                listing,
                inspections: BTreeMap::new(),
                yanks: BTreeMap::new(),
                config: IndexConfig::default(),
                now: 1_000_000,
                force: false,
                dirty: BTreeSet::new(),
            }
        }

        fn plan(self) -> Plan {
            plan(PlanInput {
                root: &self.root,
                old: &self.old,
                committed: self.committed,
                listing: &self.listing,
                inspections: self.inspections,
                yanks: self.yanks,
                config: &self.config,
                now: self.now,
                force: self.force,
                dirty: &self.dirty,
                parts: render::Parts::ALL,
                view: None,
                chunks: &ChunkCache::new(),
            })
            .unwrap()
        }
    }

    /// A variant wheel of `alpha 1.0` labelled `label` with `amd :: gfx_arch` values `arch`.
    fn variant_wheel(etag: &str, label: &str, arch: &[&str]) -> Inspection {
        let Inspection::Indexed(mut found) = wheel(etag) else { unreachable!() };
        found.entry.variant = Some(crate::variant::test_variant(label, arch));
        Inspection::Indexed(found)
    }

    #[test]
    fn a_variant_wheel_that_disagrees_with_its_release_is_refused_and_changes_nothing() {
        const GFX942: &str = "alpha-1.0-py3-none-any-gfx942.whl";
        const OTHER: &str = "alpha-1.0-1-py3-none-any-gfx942.whl";
        let mut case = Case::new(ROOT, RepoState::empty(), &[(GFX942, "a")]);
        case.inspections.insert(GFX942.into(), variant_wheel("a", "gfx942", &["gfx942"]));
        let first = case.plan();
        assert!(first.state.outputs.contains_key(&format!("{ROOT}alpha-1.0-variants.json")));

        // Same label, other properties: refused with the reason, the pages as they were.
        let mut case = Case::new(ROOT, first.state.clone(), &[(GFX942, "a"), (OTHER, "b")]);
        case.inspections.insert(OTHER.into(), variant_wheel("b", "gfx942", &["gfx942", "gfx950"]));
        let second = case.plan();
        insta::assert_snapshot!(second.report.rejected[OTHER], @r#"alpha-1.0-1-py3-none-any-gfx942.whl: variant.json disagrees with the release's other variant wheels: label "gfx942" means [amd :: gfx_arch :: gfx942, amd :: gfx_arch :: gfx950] here but [amd :: gfx_arch :: gfx942] in the release"#);
        assert_eq!(second.state.outputs, first.state.outputs, "pages and variants.json unchanged");
        assert!(written(&second).is_empty() && !second.state.entries.contains_key(OTHER));

        // A new label that agrees joins the release.
        let mut case = Case::new(ROOT, first.state.clone(), &[(GFX942, "a"), (OTHER, "c")]);
        case.inspections.insert(OTHER.into(), variant_wheel("c", "gfx942", &["gfx942"]));
        let third = case.plan();
        assert!(third.report.rejected.is_empty() && third.state.entries.contains_key(OTHER));
    }

    fn written(plan: &Plan) -> Vec<(Stage, String)> {
        plan.writes.iter().flat_map(|(stage, outputs)| outputs.iter().map(|o| (*stage, o.key.to_string()))).collect()
    }

    /// The state after indexing one wheel into an empty root.
    fn one_wheel() -> Plan {
        let mut case = Case::new(ROOT, RepoState::empty(), &[(WHEEL, "e1")]);
        case.inspections.insert(WHEEL.into(), wheel("e1"));
        case.plan()
    }

    #[test]
    fn a_new_wheel_writes_its_sidecar_first_then_pages_by_stage() {
        let plan = one_wheel();
        assert!(!plan.unchanged);
        assert_eq!(plan.report.added, [WHEEL]);
        assert_eq!(plan.state.entries[WHEEL].filename, WHEEL, "entries are named by their path in the root");
        let written = written(&plan);
        assert_eq!(written[0], (Stage::Immutable, format!("{ROOT}{WHEEL}.metadata")));
        assert!(written.iter().any(|(s, k)| *s == Stage::Index && k.ends_with("simple/alpha/index.html")));
        assert!(written.iter().any(|(s, k)| *s == Stage::Pointer && *k == format!("{ROOT}index.html")));
        assert!(written.windows(2).all(|w| w[0].0 <= w[1].0), "stage order: {written:?}");
        assert_eq!(plan.pages.len(), written.len() - 1, "every page but the sidecar");
        assert!(plan.state.outputs.contains_key(&format!("{ROOT}{WHEEL}.metadata")));
        assert!(plan.deletes.is_empty());
    }

    #[test]
    fn an_unchanged_root_writes_nothing_unless_forced_or_dirty() {
        let state = one_wheel().state;
        let unchanged = Case::new(ROOT, state.clone(), &[(WHEEL, "e1")]).plan();
        assert!(unchanged.unchanged && unchanged.writes.is_empty() && unchanged.report.added.is_empty());

        let mut forced = Case::new(ROOT, state.clone(), &[(WHEEL, "e1")]);
        forced.force = true;
        let forced = forced.plan();
        assert!(!forced.unchanged);
        assert_eq!(forced.pages.len(), 5, "every page, no sidecar: {:?}", forced.pages);

        let mut dirty = Case::new(ROOT, state, &[(WHEEL, "e1")]);
        dirty.dirty.insert(format!("{ROOT}index.html"));
        let dirty = dirty.plan();
        assert_eq!(written(&dirty), [(Stage::Pointer, format!("{ROOT}index.html"))]);
    }

    #[test]
    fn a_new_version_of_a_file_is_inspected_and_a_gone_one_removed() {
        let state = one_wheel().state;
        let case = Case::new(ROOT, state.clone(), &[(WHEEL, "e2")]);
        assert_eq!(case.listing.unknown(&case.old).len(), 1, "another version is read again");
        let gone = Case::new(ROOT, state, &[]).plan();
        assert_eq!(gone.report.removed, [WHEEL]);
        assert!(gone.state.entries.is_empty());
        let deletes: BTreeSet<&str> = gone.deletes.iter().map(String::as_str).collect();
        assert!(deletes.contains(format!("{ROOT}{WHEEL}.metadata").as_str()), "{deletes:?}");
        assert!(deletes.contains(format!("{ROOT}simple/alpha/index.html").as_str()), "{deletes:?}");
        assert!(!deletes.contains(format!("{ROOT}index.html").as_str()), "{deletes:?}");
    }

    #[test]
    fn refusals_are_remembered_and_yanks_applied() {
        let mut case = Case::new(ROOT, RepoState::empty(), &[(WHEEL, "e1"), (&format!("{WHEEL}.yanked"), "y")]);
        case.inspections.insert(WHEEL.into(), wheel("e1"));
        assert_eq!(case.listing.markers_to_read(&case.old, &case.inspections).len(), 1);
        case.yanks.insert(WHEEL.into(), "broken".into());
        assert_eq!(case.plan().state.entries[WHEEL].yanked.as_deref(), Some("broken"));

        let mut case = Case::new(ROOT, RepoState::empty(), &[(WHEEL, "e1"), (&format!("{WHEEL}.yanked"), "y")]);
        let refused = Rejected { etag: "e1".into(), reason: "not a zip".into() };
        case.inspections.insert(WHEEL.into(), Inspection::Refused(refused.clone()));
        assert!(case.listing.markers_to_read(&case.old, &case.inspections).is_empty(), "no entry to yank");
        let plan = case.plan();
        assert_eq!(plan.state.rejected[WHEEL], refused);
        assert_eq!(plan.report.rejected[WHEEL], "not a zip");
        let again = Case::new(ROOT, plan.state, &[(WHEEL, "e1")]);
        assert!(again.listing.unknown(&again.old).is_empty(), "a refused file is not read again");
    }

    /// The digests read from content-addressed paths are the pages' sha256; pip pages and
    /// names that are not a digest are hashed.
    #[test]
    fn content_addressed_pages_are_named_by_their_sha256() {
        let mut state = RepoState::empty();
        let mut entry = test_entry("pool/main/a_1.0_amd64.deb");
        let control = "Package: alpha\nVersion: 1.0\nArchitecture: amd64\nDescription: x\n";
        entry.deb = Some(crate::deb::DebControl::parse(control).unwrap().into());
        state.entries.insert(entry.filename.clone(), entry);
        let pages = crate::render::apt::render(&state, &Default::default(), None).unwrap();
        let known = known_digests(RepoKind::Apt, &pages);
        assert_eq!(known.len(), 3, "Packages, .gz, .xz by hash");
        for (sha, body) in &known {
            assert_eq!(sha256_hex(body), *sha);
        }
        let odd = [Page::new("repodata/not-a-digest.xml.gz".into(), b"x".to_vec(), Stage::Immutable, "")];
        assert!(known_digests(RepoKind::Dnf, &odd).is_empty());
        assert!(known_digests(RepoKind::Pip, &pages).is_empty());
    }

    #[test]
    fn superseded_content_addressed_outputs_are_retired_then_expire() {
        let deb = "7-linux/packages/deb/";
        let by_hash = format!("{deb}dists/stable/main/binary-amd64/by-hash/SHA256/{}", "0".repeat(64));
        let old_by_hash = format!("{deb}dists/stable/main/binary-amd64/by-hash/SHA256/{}", "1".repeat(64));
        let mut old = RepoState::empty();
        old.generated = Some(10);
        old.outputs.insert(by_hash.clone(), "x".into());
        old.retired.insert(old_by_hash.clone(), 0);
        let mut case = Case::new(deb, old, &[]);
        case.committed = true;
        case.config.grace_seconds = 1000;
        case.now = 1050;
        let plan = case.plan();
        assert_eq!(plan.state.retired.get(&by_hash), Some(&1050), "retired now");
        assert!(!plan.state.retired.contains_key(&old_by_hash));
        assert!(plan.deletes.contains(&old_by_hash), "past its grace period: {:?}", plan.deletes);
        assert!(!plan.deletes.contains(&by_hash), "kept for the grace period");
        assert_eq!(plan.state.generated, Some(10), "the entries did not change");
    }
}
