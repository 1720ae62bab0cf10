//! Promotion: a run's wheels, sdists, debs and rpms copied into a channel's roots, then the
//! roots reindexed (`quarry promote` is arguments and printing over [`promote`] and
//! [`init_channel`]).
//!
//! A channel is a prefix laid out like a run's packages ([`ChannelRoots`]): a pip root per
//! family (its family's wheels plus the generic ones, or a generic root its per-family views
//! list), an apt root and a dnf root per architecture. Families come from the topology's map,
//! never from a wheel's name or a run's directory alone: a name the map does not know is
//! refused ([`PromoteError::BadInput`]). Every target is checked before any is copied (same
//! bytes: skipped; other bytes under the same name, at the target or in any other pip root of
//! the channel: the whole promotion is refused, nothing changed: one name, one content per
//! channel); every copy lands before any root is reindexed, apt and dnf first, a generic root
//! before the views that list it, so no page names a file that is not there yet. Then the
//! channel's pages are frozen as its next version and readers switched to it in one write
//! ([`crate::ops::versions`]); a promotion that copies nothing makes no version.
//!
//! A release promotion ([`Release`], `quarry promote --release-type`) places each kind where
//! TheRock's `publish_rocm_to_release_buckets.py` does ([`ReleaseRoots`]) under a v5 product
//! prefix (`v5/rocm/core/`): wheels and sdists in the structured `whl-next/` (a kpack run, whose
//! `python/` has no family directories nor per-family libraries wheels) or `whl/` (a
//! per-family run), none for ASAN; `.deb`s and `.rpm`s in a repo of their own named by the
//! promotion's date and the run (`packages/deb/20260501-12345/`), or for prerelease in the one
//! `packages/{deb|rpm}/` each promotion adds to; the run's `tarballs/*.tar.gz` in `tarball/`
//! (whose index page is refreshed after the copies). The same checks hold: one name, one
//! content across the product's two pip roots and in every target. The run may lie in
//! another store ([`Promotion::source`], TheRock's artifacts bucket): copies between two S3
//! buckets stay server-side.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::StreamExt;
use quarry_layout::config::{BuildVariant, ChannelRoots, Layout, ReleaseRoots, ReleaseType};
use quarry_layout::{RunSegment, UploadKind};
use quarry_packaging::DistFilename;
use quarry_store::{Key, KeyError, ObjectMeta, Store, StoreError, StoreExt};

use crate::{
    Entry, IndexError, Indexer, Inspected, Inspections, METADATA_SUFFIX, Provenance, RepoKind, RepoRoot, RepoState,
    read_state,
};

/// Requests in flight at once (HEADs, copies).
const CONCURRENCY: usize = 16;

/// Why a promotion did nothing.
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    /// The request names something that is not there or not allowed (a run prefix, a family,
    /// a key): the user's to fix.
    #[error("{0}")]
    BadInput(String),
    /// The channel holds other bytes under names the run would copy: nothing was changed.
    #[error("the channel already holds other bytes under {} name(s); nothing was changed: {}", .0.len(), .0.join("; "))]
    Conflict(Vec<String>),
    #[error("{what}")]
    Store {
        what: String,
        #[source]
        source: StoreError,
    },
    #[error("{what}")]
    Read {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}")]
    Manifest {
        what: String,
        #[source]
        source: quarry_layout::runs::RunsError,
    },
    #[error("{what}")]
    Index {
        what: String,
        #[source]
        source: IndexError,
    },
    #[error("making the channel's new version: {0}")]
    Version(#[from] crate::ops::versions::VersionError),
}

impl PromoteError {
    /// A mistake in the request (exit code 2), not a failure of the store.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, Self::BadInput(_))
    }
}

fn store_err(what: impl Into<String>) -> impl FnOnce(StoreError) -> PromoteError {
    let what = what.into();
    move |source| PromoteError::Store { what, source }
}

fn index_err(what: impl Into<String>) -> impl FnOnce(IndexError) -> PromoteError {
    let what = what.into();
    move |source| PromoteError::Index { what, source }
}

fn key(raw: impl Into<String>) -> Result<Key, PromoteError> {
    Key::new(raw).map_err(|e| PromoteError::BadInput(e.to_string()))
}

/// What to promote, and where.
#[derive(Debug, Clone, Copy)]
pub struct Promotion<'a> {
    /// The run's own prefix (`12345-linux`, possibly under a prefix).
    pub from: &'a str,
    /// The channel prefix (`nightly`, `v2`, …).
    pub to: &'a str,
    /// Only these families' wheels (generic wheels go to every one); empty: every family the
    /// run has wheels for.
    pub families: &'a [String],
    /// Which roots: pip, apt, dnf.
    pub kinds: &'a BTreeSet<RepoKind>,
    /// Check and report only; change nothing.
    pub dry_run: bool,
    /// Family → its AMDGPU targets (the topology's; `AmdgpuTargets::family_map`).
    pub families_map: &'a BTreeMap<&'a str, Vec<&'a str>>,
    /// Where the channel's roots are (`[layout]`).
    pub layout: &'a Layout,
    /// A release into TheRock's v5 layout under `to` (`v5/rocm/core/`) instead of a channel
    /// laid out like a run's packages.
    pub release: Option<Release>,
    /// The indexer of the store holding the run, when it is not the destination's.
    pub source: Option<&'a Indexer>,
}

/// A promotion into TheRock's v5 release layout: its type, build variant and date.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub release_type: ReleaseType,
    pub variant: BuildVariant,
    /// The promotion's date (UTC), naming the dated native repos.
    pub date: jiff::civil::Date,
}

/// Where a run keeps its release tarballs (`{run}-{platform}/tarballs/therock-dist-….tar.gz`).
pub const RUN_TARBALLS_DIR: &str = "tarballs";

/// One file of the run and where it goes in the channel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Copied {
    pub from: String,
    pub to: String,
    pub size: u64,
    pub sha256: String,
    /// `copy` (new), `same` (already there with these bytes).
    pub status: &'static str,
    /// How it was copied: `server-side` (S3 `CopyObject`) or `streamed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<&'static str>,
}

/// What a promotion did (or, dry, would do).
#[derive(Debug, Clone)]
pub struct PromoteReport {
    pub from: String,
    pub to: String,
    pub dry_run: bool,
    pub files: Vec<Copied>,
    /// The channel roots copied into (and reindexed), or published empty by [`init_channel`].
    pub roots: BTreeSet<RepoRoot>,
    /// The tarball directories copied into (their index pages refreshed).
    pub tarballs: BTreeSet<String>,
    /// The channel's version this promotion made current (none when nothing changed, or dry).
    pub version: Option<crate::ops::versions::ChannelVersion>,
}

/// The family a wheel belongs to by TheRock's names: `rocm-sdk-libraries-{family}`,
/// `rocm-sdk-device-{target}` (every family holding the target), a legacy `python/{family}/`
/// directory; `None` for generic wheels. A family or target the map does not know
/// (`rocm-sdk-libraries-simple`, a `python/python/` directory) is refused: it would become a
/// directory of the channel.
pub fn families_of(
    name: &str,
    dir_family: Option<&str>,
    map: &BTreeMap<&str, Vec<&str>>,
) -> Result<Option<Vec<String>>, PromoteError> {
    use quarry_packaging::therock::wheels::DistKind;
    let kind = DistKind::from_project(name);
    if let Some(DistKind::Libraries(Some(family))) = &kind {
        let known =
            known_family(family, map).map_err(|e| PromoteError::BadInput(format!("wheel project {name}: {e}")))?;
        return Ok(Some(vec![known]));
    }
    if let Some(DistKind::Device(target)) = &kind {
        let target = target.as_str();
        let holds = |targets: &Vec<&str>| targets.iter().any(|t| t.eq_ignore_ascii_case(target));
        let families = map.iter().filter(|(f, targets)| holds(targets) && !f.eq_ignore_ascii_case(target));
        let families: Vec<String> = families.map(|(f, _)| (*f).to_owned()).collect();
        if families.is_empty() {
            let known = known_family(target, map).map_err(|_| {
                PromoteError::BadInput(format!("wheel project {name}: {target:?} is no AMDGPU target of any family"))
            })?;
            return Ok(Some(vec![known]));
        }
        return Ok(Some(families));
    }
    match dir_family {
        Some(f) => Ok(Some(vec![
            known_family(f, map)
                .map_err(|e| PromoteError::BadInput(format!("the run's python/{f}/ directory: {e}")))?,
        ])),
        None => Ok(None),
    }
}

/// `family` as the topology spells it (normalized project names are lowercase; families keep
/// TheRock's spelling, `gfx94X`), or an error naming it.
pub fn known_family(family: &str, map: &BTreeMap<&str, Vec<&str>>) -> Result<String, PromoteError> {
    match map.keys().find(|f| f.eq_ignore_ascii_case(family)) {
        Some(f) => Ok((*f).to_owned()),
        None => Err(PromoteError::BadInput(format!("{family:?} is not an AMDGPU family of the topology"))),
    }
}

/// A channel key built by the plan, checked as an upload's key is: no directory named like a
/// page, state or package, and in a root of the kind it is meant for.
fn channel_key(to: String, kind: RepoKind, layout: &Layout) -> Result<Key, PromoteError> {
    let refuse = |e: KeyError| PromoteError::BadInput(format!("channel key {to}: {e}"));
    let key = Key::new(&to).map_err(refuse)?;
    crate::check_key_segments(&key).map_err(refuse)?;
    match RepoRoot::for_key(&key, layout) {
        Some(root) if root.kind() == kind => Ok(key),
        _ => Err(PromoteError::BadInput(format!("channel key {to} is not in a {} root of the channel", kind.label()))),
    }
}

/// The run's package files (key, root) under its pip root and native repos, and the
/// `*.tar.gz` files directly in its tarballs directory.
async fn run_files(
    store: &dyn Store,
    run: &str,
    layout: &Layout,
) -> Result<(Vec<(ObjectMeta, RepoRoot)>, Vec<Key>), PromoteError> {
    let listed = store.list_all(&format!("{run}/"), false).await.map_err(store_err(format!("listing {run}/")))?;
    let tarballs_dir = format!("{run}/{RUN_TARBALLS_DIR}/");
    let mut files = Vec::new();
    let mut tarballs = Vec::new();
    for object in listed.objects {
        if let Some(root) = RepoRoot::for_key(&object.key, layout) {
            files.push((object, root));
        } else if object.key.as_str().strip_prefix(&tarballs_dir).is_some_and(|n| !n.contains('/'))
            && object.key.filename().ends_with(".tar.gz")
        {
            tarballs.push(object.key);
        }
    }
    Ok((files, tarballs))
}

/// Each run file's entry (sha256, size, a wheel's metadata hash, a package's fields) from its
/// root's index state while the state's ETag is the listed object's (no download). A run root
/// whose state does not know all its files is indexed first (so every promoted file carries
/// its provenance); a file it still does not know (refused) is HEADed, and its entry has no
/// ETag (the channel's reindex reads it).
async fn run_entries(
    indexer: &Indexer,
    files: &[(ObjectMeta, RepoRoot)],
) -> Result<BTreeMap<String, Entry>, PromoteError> {
    let store = indexer.store().as_ref();
    let mut states = BTreeMap::new();
    for root in files.iter().map(|(_, r)| r).collect::<BTreeSet<_>>() {
        let what = format!("reading {root}'s state");
        let mut state = read_state(store, root).await.map_err(store_err(what.clone()))?.unwrap_or_default();
        let known = |state: &RepoState| {
            files.iter().filter(|(_, r)| r == root).all(|(o, _)| {
                let relative = o.key.as_str().strip_prefix(root.as_str()).unwrap_or_default();
                state.entries.get(relative).is_some_and(|e| e.etag == o.version())
                    || state.rejected.contains_key(relative)
            })
        };
        if !known(&state) {
            indexer.reindex(root).await.map_err(index_err(format!("indexing {root}")))?;
            state = read_state(store, root).await.map_err(store_err(what))?.unwrap_or_default();
        }
        states.insert(root.clone(), state);
    }
    let mut known = BTreeMap::new();
    for (object, root) in files {
        let name = object.key.as_str();
        let relative = name.strip_prefix(root.as_str()).unwrap_or(name);
        let indexed = states.get(root).and_then(|s| s.entries.get(relative)).filter(|e| e.etag == object.version());
        if let Some(entry) = indexed {
            let mut entry = entry.clone();
            // A sidecar that is not the one the state published: the channel's reindex reads
            // the wheel instead of copying it.
            let sidecar = states[root].outputs.get(&format!("{name}{METADATA_SUFFIX}"));
            if entry.core_metadata_sha256.is_some() && sidecar != entry.core_metadata_sha256.as_ref() {
                entry.etag.clear();
            }
            known.insert(name.to_owned(), entry);
        } else if !name.ends_with(".deb") {
            let (size, sha256) = sha_of(store, &object.key).await?;
            known.insert(name.to_owned(), Entry { size, sha256, ..Entry::default() });
        }
    }
    Ok(known)
}

/// Where each file goes in the channel.
fn plan(p: &Promotion<'_>, run: &str, files: &[(ObjectMeta, RepoRoot)]) -> Result<Vec<(Key, Key)>, PromoteError> {
    let channel = ChannelRoots::new(p.to, p.layout);
    let wants = |k: RepoKind| p.kinds.contains(&k);
    let run_layout = p.layout.run();
    let python = run_layout.root_dir(UploadKind::Python);
    let mut wheels: Vec<(&Key, Option<Vec<String>>)> = Vec::new();
    let mut out = Vec::new();
    for (object, root) in files {
        let (key, name) = (&object.key, object.key.filename());
        match root.kind() {
            RepoKind::Pip if wants(RepoKind::Pip) => {
                let dist: DistFilename = name.parse().map_err(|e| PromoteError::BadInput(format!("{key}: {e}")))?;
                let below = root.as_str().strip_prefix(&format!("{run}/{python}")).unwrap_or_default();
                let dir_family = below.trim_end_matches('/');
                let dir_family = (!dir_family.is_empty() && !dir_family.contains('/')).then_some(dir_family);
                wheels.push((key, families_of(dist.name().as_ref(), dir_family, p.families_map)?));
            }
            RepoKind::Apt if wants(RepoKind::Apt) => {
                let to = format!("{}{}/{name}", channel.deb(), run_layout.deb_pool());
                out.push((key.clone(), channel_key(to, RepoKind::Apt, p.layout)?));
            }
            RepoKind::Dnf if wants(RepoKind::Dnf) => {
                let arch = root.as_str().trim_end_matches('/').rsplit('/').next().unwrap_or("x86_64");
                out.push((key.clone(), channel_key(format!("{}{name}", channel.rpm(arch)), RepoKind::Dnf, p.layout)?));
            }
            _ => {}
        }
    }
    let found: BTreeSet<String> = wheels.iter().filter_map(|(_, f)| f.clone()).flatten().collect();
    let families: BTreeSet<String> = if p.families.is_empty() {
        found
    } else {
        p.families.iter().map(|f| known_family(f, p.families_map)).collect::<Result<_, _>>()?
    };
    // Per-family views list the channel's generic root: a generic wheel is stored there once.
    let generic = channel.generic();
    for (key, of) in wheels {
        let name = key.filename();
        let targets: Vec<String> = match of {
            None if generic.is_some() => generic.iter().map(|g| format!("{g}{name}")).collect(),
            None if families.is_empty() => vec![format!("{}{name}", channel.pip(None))],
            None => families.iter().map(|f| format!("{}{name}", channel.pip(Some(f)))).collect(),
            Some(of) => {
                let selected = of.iter().filter(|f| families.contains(*f));
                selected.map(|f| format!("{}{name}", channel.pip(Some(f)))).collect()
            }
        };
        for to in targets {
            out.push((key.clone(), channel_key(to, RepoKind::Pip, p.layout)?));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// Whether the run is a kpack (multi-arch) build, as TheRock tells (`upload_python_packages.py`
/// reports `kpack_split` for a flat `python/` only): no `python/{family}/` directory and, here
/// too, no per-family `rocm-sdk-libraries-{family}` wheel.
fn is_kpack(run: &str, files: &[(ObjectMeta, RepoRoot)]) -> bool {
    use quarry_packaging::therock::wheels::DistKind;
    let python = format!("{run}/{}", quarry_layout::THEROCK.root_dir(UploadKind::Python));
    files.iter().filter(|(_, r)| r.kind() == RepoKind::Pip).all(|(o, r)| {
        let per_family =
            o.key.filename().parse::<DistFilename>().ok().is_some_and(|d| {
                matches!(DistKind::from_project(d.name().as_ref()), Some(DistKind::Libraries(Some(_))))
            });
        r.as_str() == python && !per_family
    })
}

/// Where each file goes in TheRock's v5 layout (the module's doc), with where the tarballs go.
fn plan_release(
    p: &Promotion<'_>,
    release: &Release,
    run: &str,
    run_id: &str,
    files: &[(ObjectMeta, RepoRoot)],
    tarballs: &[Key],
) -> Result<Vec<(Key, Key)>, PromoteError> {
    let roots = ReleaseRoots::new(p.to, release.release_type, release.variant, release.date, run_id)
        .map_err(|e| PromoteError::BadInput(format!("--to: {e}")))?;
    let wants = |k: RepoKind| p.kinds.contains(&k);
    let has_pip = files.iter().any(|(_, r)| r.kind() == RepoKind::Pip);
    let pip = match roots.pip(is_kpack(run, files)) {
        Some(prefix) if has_pip && wants(RepoKind::Pip) => Some(structured_root(&prefix, p.layout)?),
        _ => None,
    };
    let pool = p.layout.run().deb_pool();
    let mut out = Vec::new();
    for (object, root) in files {
        let (key, name) = (&object.key, object.key.filename());
        let to = match root.kind() {
            RepoKind::Pip => match &pip {
                Some(pip) => channel_key(
                    pip.file_key(name).map_err(|e| PromoteError::BadInput(e.to_string()))?.to_string(),
                    RepoKind::Pip,
                    p.layout,
                )?,
                None => continue,
            },
            RepoKind::Apt if wants(RepoKind::Apt) => {
                channel_key(format!("{}{pool}/{name}", roots.deb()), RepoKind::Apt, p.layout)?
            }
            RepoKind::Dnf if wants(RepoKind::Dnf) => {
                let arch = root.as_str().trim_end_matches('/').rsplit('/').next().unwrap_or("x86_64");
                channel_key(format!("{}{name}", roots.rpm(arch)), RepoKind::Dnf, p.layout)?
            }
            _ => continue,
        };
        out.push((key.clone(), to));
    }
    let dir = roots.tarball();
    if !tarballs.is_empty() && crate::ListingDir::new(&dir, p.layout).is_none_or(|d| !d.is_tarball_index()) {
        return Err(PromoteError::BadInput(format!(
            "{dir} is no tarball directory of the layout: use [layout] preset = \"therock-v5\""
        )));
    }
    for tarball in tarballs {
        let to = key(format!("{dir}{}", tarball.filename()))?;
        crate::check_key_segments(&to).map_err(|e| PromoteError::BadInput(e.to_string()))?;
        out.push((tarball.clone(), to));
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

/// The structured pip root the layout makes `prefix`, or the error naming the preset.
fn structured_root(prefix: &str, layout: &Layout) -> Result<RepoRoot, PromoteError> {
    match RepoRoot::new(prefix, layout) {
        Ok(root) if root.is_structured() => Ok(root),
        _ => Err(PromoteError::BadInput(format!(
            "{prefix} is no structured pip root of the layout: use [layout] preset = \"therock-v5\""
        ))),
    }
}

/// The product's pip roots (`whl/`, `whl-next/`): where a release's wheel name may already live.
fn release_pip_roots(p: &Promotion<'_>, release: &Release) -> Vec<RepoRoot> {
    let roots = ReleaseRoots::new(p.to, release.release_type, BuildVariant::Release, release.date, "0");
    let prefixes = roots.map(|r| [r.pip(true), r.pip(false)]).unwrap_or_default();
    prefixes.into_iter().flatten().filter_map(|prefix| structured_root(&prefix, p.layout).ok()).collect()
}

/// Promote `p.from` into `p.to` with `indexer` (its store and publishing configuration).
pub async fn promote(indexer: &Indexer, p: &Promotion<'_>) -> Result<PromoteReport, PromoteError> {
    let run = p.from.trim_end_matches('/');
    let bad_run = || PromoteError::BadInput(format!("--from {run:?} names no RUN-PLATFORM"));
    let (_, segment) = quarry_layout::find_run(run).ok_or_else(bad_run)?;
    if !run.ends_with(&segment.to_string()) {
        return Err(PromoteError::BadInput(format!("--from {run:?}: give the run's own prefix (RUN-PLATFORM)")));
    }
    let store = indexer.store();
    let source = p.source.unwrap_or(indexer);
    let stores = Stores { to: store.as_ref(), from: source.store().as_ref() };
    let (files, tarballs) = run_files(stores.from, run, p.layout).await?;
    let tarballs = if p.release.is_some() { tarballs } else { Vec::new() };
    if files.is_empty() && tarballs.is_empty() {
        let what =
            if p.release.is_some() { "wheels, sdists, debs, rpms or tarballs" } else { "wheels, sdists, debs or rpms" };
        return Err(PromoteError::BadInput(format!("{run}/ holds no {what}")));
    }
    let (planned, pip_roots) = match &p.release {
        Some(release) => {
            (plan_release(p, release, run, segment.run_id, &files, &tarballs)?, release_pip_roots(p, release))
        }
        None => (plan(p, run, &files)?, channel_pip_roots(p)),
    };
    if planned.is_empty() {
        return Err(PromoteError::BadInput(format!(
            "{run}/ holds nothing this promotion places (--kinds, --build-variant)"
        )));
    }
    let known = run_entries(source, &files).await?;
    let mut copies = check(stores, &planned, &known, &pip_roots, p.layout).await?;
    let targets = || copies.iter().filter_map(|c| Key::new(&c.to).ok());
    let roots: BTreeSet<RepoRoot> = targets().filter_map(|k| RepoRoot::for_key(&k, p.layout)).collect();
    let listings: BTreeSet<crate::ListingDir> = targets()
        .filter(|k| RepoRoot::for_key(k, p.layout).is_none())
        .filter_map(|k| crate::ListingDir::for_key(&k, p.layout))
        .collect();
    let mut outside = crate::ops::versions::Outside::default();
    if !p.dry_run {
        let origin = provenance(stores.from, run, &segment).await?;
        let inspections = copy_all(stores, &mut copies, &known, &origin).await?;
        // The next version holds the current one's files plus this promotion's: after a
        // rollback, the files of the versions rolled back are left out of every page (and
        // their roots reindexed so), though they stay stored.
        let brought: BTreeSet<String> = copies.iter().map(|c| c.to.clone()).collect();
        outside = crate::ops::versions::outside_current(store.as_ref(), p.to, &brought).await?;
        let mut reindexed = roots.clone();
        reindexed.extend(
            outside.keys.iter().filter_map(|k| Key::new(k).ok()).filter_map(|k| RepoRoot::for_key(&k, p.layout)),
        );
        reindex(indexer, p.layout, &reindexed, inspections, &outside.keys).await?;
        for dir in &listings {
            crate::update_listing(store.as_ref(), dir).await.map_err(store_err(format!("listing {dir}")))?;
        }
    }
    // Every page is in place: freeze them as the channel's next version and switch readers to
    // it (nothing copied and nothing the current version does not name: no version).
    let changed = copies.iter().any(|c| c.status == "copy") || outside.brings_new;
    let version = match changed && !p.dry_run {
        true => Some(crate::ops::versions::snapshot(store.as_ref(), p.to, Some(run), None, &outside.keys).await?),
        false => None,
    };
    let tarballs = listings.iter().map(ToString::to_string).collect();
    Ok(PromoteReport {
        from: run.to_owned(),
        to: p.to.to_owned(),
        dry_run: p.dry_run,
        files: copies,
        roots,
        tarballs,
        version,
    })
}

/// The store a promotion copies into and the one holding the run (the same one unless
/// [`Promotion::source`] names another).
#[derive(Clone, Copy)]
struct Stores<'a> {
    to: &'a dyn Store,
    from: &'a dyn Store,
}

/// Where the run's files come from: its manifest's run, platform and commit, else its prefix's.
async fn provenance(store: &dyn Store, run: &str, segment: &RunSegment<'_>) -> Result<Provenance, PromoteError> {
    let manifest = quarry_layout::runs::read_manifest(store, run)
        .await
        .map_err(|source| PromoteError::Manifest { what: format!("reading {run}'s manifest"), source })?;
    Ok(match manifest {
        Some(m) => Provenance { run: m.run_id, platform: m.platform, commit: m.commit },
        None => Provenance { run: segment.run_id.to_owned(), platform: segment.platform.to_owned(), commit: None },
    })
}

/// The channel's roots indexed while empty (an existing index is left as it is): a channel's
/// URLs resolve before its first promotion. `p.from` and `p.dry_run` are not read.
pub async fn init_channel(indexer: &Indexer, p: &Promotion<'_>) -> Result<PromoteReport, PromoteError> {
    let store = indexer.store();
    let channel = ChannelRoots::new(p.to, p.layout);
    let mut prefixes = Vec::new();
    if p.kinds.contains(&RepoKind::Pip) {
        if let Some(generic) = channel.generic() {
            prefixes.push((generic, RepoKind::Pip));
        } else if p.families.is_empty() {
            prefixes.push((channel.pip(None), RepoKind::Pip));
        }
        for family in p.families {
            let family = known_family(family, p.families_map)?;
            prefixes.push((channel.pip(Some(&family)), RepoKind::Pip));
        }
    }
    if p.kinds.contains(&RepoKind::Apt) {
        prefixes.push((channel.deb(), RepoKind::Apt));
    }
    if p.kinds.contains(&RepoKind::Dnf) {
        prefixes.push((channel.rpm("x86_64"), RepoKind::Dnf));
    }
    let mut roots = BTreeSet::new();
    for (prefix, kind) in prefixes {
        let root = RepoRoot::with_kind(&prefix, kind)
            .map_err(|e| PromoteError::BadInput(format!("channel root {prefix}: {e}")))?;
        let state = read_state(store.as_ref(), &root).await.map_err(store_err(format!("reading {root}'s state")))?;
        if state.is_none() {
            roots.insert(root);
        }
    }
    for root in &roots {
        indexer
            .run(crate::Request::new(root.clone()).forced(true))
            .await
            .map_err(index_err(format!("publishing {root}")))?;
    }
    // The empty channel is its first version, so readers resolve it through the pointer.
    let fresh = crate::ops::versions::read_pointer(store.as_ref(), &crate::ops::versions::channel_prefix(p.to)?)
        .await?
        .is_none();
    let version = match fresh {
        true => Some(crate::ops::versions::snapshot(store.as_ref(), p.to, None, Some("init"), &BTreeSet::new()).await?),
        false => None,
    };
    Ok(PromoteReport {
        from: String::new(),
        to: p.to.to_owned(),
        dry_run: false,
        files: Vec::new(),
        roots,
        tarballs: BTreeSet::new(),
        version,
    })
}

/// Every pip root of the channel (its generic root, its top root, each family's): where a
/// wheel's name may already live.
fn channel_pip_roots(p: &Promotion<'_>) -> Vec<RepoRoot> {
    let channel = ChannelRoots::new(p.to, p.layout);
    let mut prefixes: BTreeSet<String> = p.families_map.keys().map(|f| channel.pip(Some(f))).collect();
    prefixes.insert(channel.pip(None));
    prefixes.extend(channel.generic());
    prefixes
        .iter()
        .filter_map(|prefix| RepoRoot::new(prefix, p.layout).ok())
        .filter(|r| r.kind() == RepoKind::Pip)
        .collect()
}

/// Every target checked before anything is copied: already there with the same bytes is
/// `same`; other bytes under the name refuse the whole promotion, and so does a wheel or sdist
/// whose name lives in another pip root of the channel (`pip_roots`) with other bytes: one
/// name, one content per channel. What the channel holds comes from one listing and one state
/// read per root: a target's sha256 is its root's state's while the listed ETag is the one the
/// state recorded; only a file the state does not know is HEADed.
async fn check(
    stores: Stores<'_>,
    planned: &[(Key, Key)],
    known: &BTreeMap<String, Entry>,
    pip_roots: &[RepoRoot],
    layout: &Layout,
) -> Result<Vec<Copied>, PromoteError> {
    let store = stores.to;
    let mut channel: BTreeMap<String, (ObjectMeta, Option<String>)> = BTreeMap::new();
    let mut roots: BTreeSet<RepoRoot> = planned.iter().filter_map(|(_, to)| RepoRoot::for_key(to, layout)).collect();
    roots.extend(pip_roots.iter().cloned());
    for root in &roots {
        let (prefix, recursive) = root.package_prefix();
        let listed = store.list_all(&prefix, !recursive).await.map_err(store_err(format!("listing {prefix}")))?;
        let state = read_state(store, root).await.map_err(store_err(format!("reading {root}'s state")))?;
        let state = state.unwrap_or_default();
        for object in listed.objects {
            let relative = object.key.as_str().strip_prefix(root.as_str()).unwrap_or_default();
            let name = root.file_name_of(relative).unwrap_or(relative);
            let indexed = state.entries.get(name).filter(|e| !e.etag.is_empty() && e.etag == object.version());
            let sha = indexed.map(|e| e.sha256.clone());
            channel.insert(object.key.to_string(), (object, sha));
        }
    }
    // Targets in no repo root (tarballs): what their directories hold.
    let dirs: BTreeSet<&str> = planned
        .iter()
        .filter(|(_, to)| RepoRoot::for_key(to, layout).is_none())
        .map(|(_, to)| to.parent_prefix())
        .collect();
    for dir in dirs {
        let listed = store.list_all(dir, true).await.map_err(store_err(format!("listing {dir}")))?;
        channel.extend(listed.objects.into_iter().map(|o| (o.key.to_string(), (o, None))));
    }
    let checked: Vec<Result<(Copied, Option<String>), PromoteError>> = futures_util::stream::iter(planned)
        .map(|(from, to)| check_one(stores, from, to, known, channel.get(to.as_str())))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let mut copies = Vec::new();
    let mut conflicts = Vec::new();
    for result in checked {
        let (copy, conflict) = result?;
        conflicts.extend(conflict);
        copies.push(copy);
    }
    conflicts.extend(elsewhere_in_channel(store, &copies, &channel, pip_roots).await?);
    if !conflicts.is_empty() {
        return Err(PromoteError::Conflict(conflicts));
    }
    Ok(copies)
}

/// A channel file as listed, with its sha256 when its root's state vouches for it.
type Held = (ObjectMeta, Option<String>);

/// Wheels and sdists whose name the channel holds in another of its pip roots with other bytes.
async fn elsewhere_in_channel(
    store: &dyn Store,
    copies: &[Copied],
    channel: &BTreeMap<String, Held>,
    pip_roots: &[RepoRoot],
) -> Result<Vec<String>, PromoteError> {
    let in_pip_root =
        |key: &str| pip_roots.iter().any(|r| key.strip_prefix(r.as_str()).is_some_and(|f| r.file_name_of(f).is_some()));
    let mut by_name: BTreeMap<&str, Vec<(&String, &Held)>> = BTreeMap::new();
    for (key, there) in channel.iter().filter(|(key, _)| in_pip_root(key)) {
        let name = key.rsplit('/').next().unwrap_or_default();
        if DistFilename::has_dist_extension(name) {
            by_name.entry(name).or_default().push((key, there));
        }
    }
    let mut conflicts = Vec::new();
    let mut reported = BTreeSet::new();
    for copy in copies.iter().filter(|c| in_pip_root(&c.to)) {
        let name = copy.to.rsplit('/').next().unwrap_or_default();
        for (key, (object, sha)) in by_name.get(name).into_iter().flatten() {
            if **key == copy.to || !reported.insert((*key).clone()) {
                continue;
            }
            let (size, there_sha) = match sha {
                Some(sha) => (object.size, sha.clone()),
                None => sha_of(store, &object.key).await?,
            };
            if size != copy.size || there_sha != copy.sha256 {
                conflicts.push(format!(
                    "{} (the channel holds {name} as {key} with sha256 {there_sha}; the run's {} has {})",
                    copy.to, copy.from, copy.sha256
                ));
            }
        }
    }
    Ok(conflicts)
}

/// The size and sha256 of `key`: the stored checksum, else hashed while streaming the object.
async fn sha_of(store: &dyn Store, key: &Key) -> Result<(u64, String), PromoteError> {
    let meta = store.head(key).await.map_err(store_err(format!("reading {key}")))?;
    if let Some(sha) = meta.sha256 {
        return Ok((meta.size, sha));
    }
    let mut body = store.get(key, None).await.map_err(store_err(format!("reading {key}")))?.body;
    let mut hasher = quarry_store::Sha256Hex::default();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| PromoteError::Read { what: format!("reading {key}"), source: e })?;
        hasher.update(&chunk);
    }
    Ok((meta.size, hasher.finish()))
}

/// `there`: the target as the channel's listing showed it, with its sha256 when the channel's
/// state vouches for it.
async fn check_one(
    stores: Stores<'_>,
    from: &Key,
    to: &Key,
    known: &BTreeMap<String, Entry>,
    there: Option<&(ObjectMeta, Option<String>)>,
) -> Result<(Copied, Option<String>), PromoteError> {
    let store = stores.to;
    let (size, sha256) = match known.get(from.as_str()) {
        Some(e) => (e.size, e.sha256.clone()),
        None => sha_of(stores.from, from).await?,
    };
    let (status, conflict) = match there {
        None => ("copy", None),
        Some((object, sha)) => {
            let (there_size, there_sha) = match sha {
                Some(sha) => (object.size, sha.clone()),
                None => sha_of(store, to).await?,
            };
            let differs = there_size != size || there_sha != sha256;
            ("same", differs.then(|| format!("{to} (sha256 {there_sha}, the run's {from} has {sha256})")))
        }
    };
    let copy = Copied { from: from.to_string(), to: to.to_string(), size, sha256, status, method: None };
    Ok((copy, conflict))
}

/// Copies every new file (server-side without a HEAD where the run's state gives its size and
/// sha256); for each whose entry the run's state holds, what the channel's reindex needs
/// instead of reading the copy again: that entry at the copy's ETag, stamped with when it
/// entered the channel and where it came from, its wheel's `.metadata` sidecar copied along.
async fn copy_all(
    stores: Stores<'_>,
    copies: &mut [Copied],
    known: &BTreeMap<String, Entry>,
    source: &Provenance,
) -> Result<Inspections, PromoteError> {
    let now = crate::upload_time(jiff::Timestamp::now());
    let pending = copies.iter_mut().filter(|c| c.status == "copy");
    let results: Vec<Result<Option<(Key, Inspected)>, PromoteError>> = futures_util::stream::iter(pending)
        .map(|c| {
            let now = now.clone();
            async move {
                let (from, to) = (key(&c.from)?, key(&c.to)?);
                let copied = stores.to.copy_known(stores.from, &from, &to, c.size, Some(&c.sha256)).await;
                let (put, method) = copied.map_err(store_err(format!("copying {from} to {to}")))?;
                c.method = Some(method.label());
                let Some(entry) = known.get(&c.from).filter(|e| !e.etag.is_empty() && !put.etag.is_empty()) else {
                    return Ok(None);
                };
                if entry.core_metadata_sha256.is_some() && !copy_sidecar(stores, &from, &to).await? {
                    return Ok(None);
                }
                let entry = Entry { etag: put.etag, upload_time: now, source: Some(source.clone()), ..entry.clone() };
                Ok(Some((to, Inspected { entry, core_metadata: None })))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut inspections = Inspections::default();
    for result in results {
        if let Some((to, inspected)) = result? {
            inspections.insert(&to, inspected);
        }
    }
    Ok(inspections)
}

/// Copies the run's `<wheel>.metadata` next to the copy (before any page names it); false when
/// the run has none (the reindex then reads the wheel and writes it).
async fn copy_sidecar(stores: Stores<'_>, from: &Key, to: &Key) -> Result<bool, PromoteError> {
    let (from, to) = (key(format!("{from}{METADATA_SUFFIX}"))?, key(format!("{to}{METADATA_SUFFIX}"))?);
    // A sidecar is small: no size check to make before a server-side copy.
    match stores.to.copy_known(stores.from, &from, &to, 0, None).await {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(store_err(format!("copying {from} to {to}"))(e)),
    }
}

/// apt and dnf roots first, then pip, a generic root before the per-family views that list it
/// (its reindex refreshes them too): every file is in place before any page names it.
async fn reindex(
    indexer: &Indexer,
    layout: &Layout,
    roots: &BTreeSet<RepoRoot>,
    known: Inspections,
    leaving: &BTreeSet<String>,
) -> Result<(), PromoteError> {
    let mut ordered: Vec<&RepoRoot> = roots.iter().collect();
    ordered.sort_by_key(|r| {
        let view = crate::reindex::view::generic_of(layout, r).is_some();
        (r.kind() == RepoKind::Pip, view, r.as_str().to_owned())
    });
    for root in ordered {
        indexer
            .run(crate::Request::new(root.clone()).knowing(known.clone()).leaving(leaving.clone()))
            .await
            .map_err(index_err(format!("reindexing {root}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_store::MemoryStore;

    fn map() -> BTreeMap<&'static str, Vec<&'static str>> {
        BTreeMap::from([
            ("gfx94X-dcgpu", vec!["gfx942", "gfx950"]),
            ("gfx110X-all", vec!["gfx1100", "gfx1101"]),
            ("gfx120X-all", vec!["gfx1200", "gfx1201"]),
        ])
    }

    #[test]
    fn wheels_belong_to_families_by_therocks_names() {
        let map = map();
        let of = |name: &str, dir: Option<&str>| families_of(name, dir, &map).unwrap();
        assert_eq!(of("rocm-sdk-core", None), None);
        assert_eq!(of("rocm-sdk-libraries-gfx94x-dcgpu", None), Some(vec!["gfx94X-dcgpu".into()]));
        let device = of("rocm-sdk-device-gfx942", None).unwrap();
        assert!(device.contains(&"gfx94X-dcgpu".to_owned()), "{device:?}");
        assert_eq!(of("torch", Some("gfx120X-all")), Some(vec!["gfx120X-all".into()]));
        // Names that are no family of the topology are refused, not made directories.
        for (name, dir) in
            [("rocm-sdk-libraries-simple", None), ("rocm-sdk-device-gfx9999", None), ("torch", Some("python"))]
        {
            let err = families_of(name, dir, &map).unwrap_err();
            assert!(err.is_bad_input(), "{name} {dir:?}: {err}");
        }
    }

    /// A channel file its state does not know (put there without indexing) is still checked:
    /// the listing shows it, a HEAD gives its sha256.
    #[tokio::test]
    async fn unindexed_channel_files_are_checked_too() {
        let store = MemoryStore::default();
        let put = |k: &str, body: &'static [u8]| {
            let key = Key::new(k).unwrap();
            let store = &store;
            async move { store.put_bytes(&key, body.into(), quarry_store::PutOptions::default()).await.unwrap() }
        };
        put("nightly/python/a-1.0.tar.gz", b"same").await;
        put("nightly/python/b-1.0.tar.gz", b"other").await;
        let entry =
            |body: &[u8]| Entry { size: body.len() as u64, sha256: quarry_store::sha256_hex(body), ..Entry::default() };
        let known = BTreeMap::from([
            ("9-linux/python/a-1.0.tar.gz".to_owned(), entry(b"same")),
            ("9-linux/python/b-1.0.tar.gz".to_owned(), entry(b"bytes")),
            ("9-linux/python/c-1.0.tar.gz".to_owned(), entry(b"new")),
        ]);
        let planned = |names: &[&str]| -> Vec<(Key, Key)> {
            let key = |p: &str, n: &str| Key::new(format!("{p}/python/{n}-1.0.tar.gz")).unwrap();
            names.iter().map(|n| (key("9-linux", n), key("nightly", n))).collect()
        };
        let stores = Stores { to: &store, from: &store };
        let copies = check(stores, &planned(&["a", "c"]), &known, &[], &Layout::default()).await.unwrap();
        let status: Vec<&str> = copies.iter().map(|c| c.status).collect();
        assert_eq!(status, ["same", "copy"]);
        let err = check(stores, &planned(&["a", "b", "c"]), &known, &[], &Layout::default()).await.unwrap_err();
        assert!(err.to_string().contains("other bytes under 1 name(s)"), "{err}");
        assert!(err.to_string().contains("nightly/python/b-1.0.tar.gz"), "{err}");
    }
}
