//! `quarry promote --from RUN-PLATFORM --to CHANNEL`: copies a run's wheels, sdists, debs and
//! rpms into a channel's roots, then reindexes them.
//!
//! A channel is a prefix laid out like a run's packages: a pip root per family
//! (`{channel}/python/{family}/`, its family's wheels plus the generic ones; `{channel}/python/`
//! when the run has no family wheels), `{channel}/packages/deb/` and
//! `{channel}/packages/rpm/{arch}/`. Every file is checked before any is copied (same bytes:
//! skipped; other bytes under the same name: refused, nothing changed); every copy lands before
//! any root is reindexed, so no page names a file that is not there yet.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::Args;
use futures_util::StreamExt;
use quarry_index::{
    Entry, Indexer, Inspected, Inspections, METADATA_SUFFIX, Provenance, RepoKind, RepoRoot, read_state,
};
use quarry_packaging::DistFilename;
use quarry_store::layout::config::ChannelRoots;
use quarry_store::layout::{RunSegment, UploadKind};
use quarry_store::{Key, ObjectMeta, Store, StoreExt};

use super::args::{JsonArg, KindArg, LayoutConfigArg, StoreArg};

#[derive(Debug, Args)]
pub(crate) struct PromoteArgs {
    /// The run to promote from: its prefix segment (`12345-linux`), optionally under a prefix.
    #[arg(long, required_unless_present = "init")]
    from: Option<String>,
    /// Publish the channel's roots empty (valid pip, apt and dnf indexes naming nothing) if they
    /// have no index yet, instead of promoting: a channel's URLs resolve before its first
    /// promotion. Takes `--families` and `--kinds`.
    #[arg(long, conflicts_with = "from")]
    init: bool,
    /// The channel to promote into (`nightly`, `v2`, …): a key prefix.
    #[arg(long)]
    to: String,
    /// Only these families' wheels (comma-separated); generic wheels go to every one. Default:
    /// every family the run has wheels for.
    #[arg(long, value_delimiter = ',')]
    families: Vec<String>,
    /// Which packages (comma-separated; `deb` and `rpm` name apt and dnf too).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = KindArg::ALL)]
    kinds: Vec<KindArg>,
    #[command(flatten)]
    store: StoreArg,
    /// Print what would be copied; change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    json: JsonArg,
    #[command(flatten)]
    config: LayoutConfigArg,
}

/// One file of the run and where it goes in the channel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
struct Copy {
    from: String,
    to: String,
    size: u64,
    sha256: String,
    /// `copy` (new), `same` (already there with these bytes).
    status: &'static str,
    /// How it was copied: `server-side` (S3 `CopyObject`) or `streamed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'static str>,
}

#[derive(Debug, serde::Serialize)]
struct Report {
    from: String,
    to: String,
    dry_run: bool,
    files: Vec<Copy>,
    roots: Vec<String>,
    install: Vec<String>,
}

/// The family a wheel belongs to by TheRock's names: `rocm-sdk-libraries-{family}`,
/// `rocm-sdk-device-{target}` (every family holding the target), a legacy `python/{family}/`
/// directory; `None` for generic wheels. A family or target the topology does not know
/// (`rocm-sdk-libraries-simple`, a `python/python/` directory) is refused: it would become a
/// directory of the channel.
fn families_of(
    name: &str,
    dir_family: Option<&str>,
    map: &BTreeMap<&str, Vec<&str>>,
) -> anyhow::Result<Option<Vec<String>>> {
    if let Some(family) = name.strip_prefix("rocm-sdk-libraries-") {
        let known = known_family(family, map).with_context(|| format!("wheel project {name}"))?;
        return Ok(Some(vec![known]));
    }
    if let Some(target) = name.strip_prefix("rocm-sdk-device-") {
        let holds = |targets: &Vec<&str>| targets.iter().any(|t| t.eq_ignore_ascii_case(target));
        let families = map.iter().filter(|(f, targets)| holds(targets) && !f.eq_ignore_ascii_case(target));
        let families: Vec<String> = families.map(|(f, _)| (*f).to_owned()).collect();
        if families.is_empty() {
            let known = known_family(target, map)
                .with_context(|| format!("wheel project {name}: {target:?} is no AMDGPU target of any family"))?;
            return Ok(Some(vec![known]));
        }
        return Ok(Some(families));
    }
    match dir_family {
        Some(f) => Ok(Some(vec![known_family(f, map).with_context(|| format!("the run's python/{f}/ directory"))?])),
        None => Ok(None),
    }
}

/// `family` as the topology spells it (normalized project names are lowercase; families keep
/// TheRock's spelling, `gfx94X`), or an error naming it.
fn known_family(family: &str, map: &BTreeMap<&str, Vec<&str>>) -> anyhow::Result<String> {
    match map.keys().find(|f| f.eq_ignore_ascii_case(family)) {
        Some(f) => Ok((*f).to_owned()),
        None => Err(super::UsageError::new(format!("{family:?} is not an AMDGPU family of the topology")).into()),
    }
}

/// A channel key built by the plan, checked as an upload's key is: no directory named like a
/// page, state or package, and in a root of the kind it is meant for.
fn channel_key(to: String, kind: RepoKind) -> anyhow::Result<Key> {
    let refuse = |e: quarry_store::KeyError| super::UsageError::new(format!("channel key {to}: {e}"));
    let key = Key::new(&to).map_err(refuse)?;
    quarry_index::check_key_segments(&key).map_err(refuse)?;
    match RepoRoot::for_key(&key) {
        Some(root) if root.kind() == kind => Ok(key),
        _ => {
            Err(super::UsageError::new(format!("channel key {to} is not in a {} root of the channel", kind.label()))
                .into())
        }
    }
}

/// The run's package files (key, root) under its pip root and native repos.
async fn run_files(store: &dyn Store, run: &str) -> anyhow::Result<Vec<(ObjectMeta, RepoRoot)>> {
    let listed = store.list_all(&format!("{run}/"), false).await.with_context(|| format!("listing {run}/"))?;
    let files = listed.objects.into_iter().filter_map(|o| RepoRoot::for_key(&o.key).map(|r| (o, r)));
    Ok(files.collect())
}

/// Each run file's entry (sha256, size, a wheel's metadata hash, a package's fields) from its
/// root's index state while the state's ETag is the listed object's (no download). A run root
/// whose state does not know all its files is indexed first (so every promoted file carries
/// its provenance); a file it still does not know (refused) is HEADed, and its entry has no
/// ETag (the channel's reindex reads it).
async fn run_entries(
    store: &Arc<dyn Store>,
    files: &[(ObjectMeta, RepoRoot)],
) -> anyhow::Result<BTreeMap<String, Entry>> {
    let mut states = BTreeMap::new();
    for root in files.iter().map(|(_, r)| r).collect::<BTreeSet<_>>() {
        let mut state = read_state(store.as_ref(), root).await?.unwrap_or_default();
        let known = |state: &quarry_index::RepoState| {
            files.iter().filter(|(_, r)| r == root).all(|(o, _)| {
                let relative = o.key.as_str().strip_prefix(root.as_str()).unwrap_or_default();
                state.entries.get(relative).is_some_and(|e| e.etag == o.version())
                    || state.rejected.contains_key(relative)
            })
        };
        if !known(&state) {
            Indexer::new(store.clone()).reindex(root).await.with_context(|| format!("indexing {root}"))?;
            state = read_state(store.as_ref(), root).await?.unwrap_or_default();
        }
        states.insert(root.clone(), state);
    }
    let store = store.as_ref();
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
fn plan(
    args: &PromoteArgs,
    run: &str,
    files: &[(ObjectMeta, RepoRoot)],
    map: &BTreeMap<&str, Vec<&str>>,
) -> anyhow::Result<Vec<(Key, Key)>> {
    let channel = ChannelRoots::new(&args.to, quarry_store::layout::config::configured());
    let wants = |k: KindArg| args.kinds.contains(&k);
    let run_layout = quarry_store::layout::current();
    let python = run_layout.root_dir(UploadKind::Python);
    let mut wheels: Vec<(&Key, Option<Vec<String>>)> = Vec::new();
    let mut out = Vec::new();
    for (object, root) in files {
        let (key, name) = (&object.key, object.key.filename());
        match root.kind() {
            RepoKind::Pip if wants(KindArg::Pip) => {
                let dist: DistFilename = name.parse().with_context(|| format!("{key}"))?;
                let below = root.as_str().strip_prefix(&format!("{run}/{python}")).unwrap_or_default();
                let dir_family = below.trim_end_matches('/');
                let dir_family = (!dir_family.is_empty() && !dir_family.contains('/')).then_some(dir_family);
                wheels.push((key, families_of(dist.name().as_ref(), dir_family, map)?));
            }
            RepoKind::Apt if wants(KindArg::Apt) => {
                let to = format!("{}{}/{name}", channel.deb(), run_layout.deb_pool());
                out.push((key.clone(), channel_key(to, RepoKind::Apt)?));
            }
            RepoKind::Dnf if wants(KindArg::Dnf) => {
                let arch = root.as_str().trim_end_matches('/').rsplit('/').next().unwrap_or("x86_64");
                out.push((key.clone(), channel_key(format!("{}{name}", channel.rpm(arch)), RepoKind::Dnf)?));
            }
            _ => {}
        }
    }
    let found: BTreeSet<String> = wheels.iter().filter_map(|(_, f)| f.clone()).flatten().collect();
    let families: BTreeSet<String> = if args.families.is_empty() {
        found
    } else {
        args.families.iter().map(|f| known_family(f, map).context("--families")).collect::<anyhow::Result<_>>()?
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
            out.push((key.clone(), channel_key(to, RepoKind::Pip)?));
        }
    }
    out.sort_by(|a, b| a.1.cmp(&b.1));
    Ok(out)
}

pub(crate) async fn run(args: PromoteArgs) -> anyhow::Result<()> {
    args.config.load()?;
    let Some(from) = &args.from else { return init(&args).await };
    let run = from.trim_end_matches('/');
    let (_, segment) =
        quarry_store::layout::find_run(run).with_context(|| format!("--from {run:?} names no RUN-PLATFORM"))?;
    anyhow::ensure!(run.ends_with(&segment.to_string()), "--from {run:?}: give the run's own prefix (RUN-PLATFORM)");
    let store: Arc<dyn Store> = args.store.store.open_existing().await?;
    let files = run_files(store.as_ref(), run).await?;
    anyhow::ensure!(!files.is_empty(), "{run}/ holds no wheels, sdists, debs or rpms");
    let targets = quarry_topology::families::AmdgpuTargets::builtin();
    let planned = plan(&args, run, &files, &targets.family_map())?;
    let known = run_entries(&store, &files).await?;
    let mut copies = check(store.as_ref(), &planned, &known).await?;
    let roots: BTreeSet<RepoRoot> = copies.iter().filter_map(|c| RepoRoot::for_key(&Key::new(&c.to).ok()?)).collect();
    if !args.dry_run {
        let source = provenance(store.as_ref(), run, &segment).await?;
        let inspections = copy_all(store.as_ref(), &mut copies, &known, &source).await?;
        reindex(store.clone(), &roots, inspections).await?;
    }
    let install = roots.iter().map(|r| install_line(args.store.store.as_str(), r)).collect();
    let roots = roots.iter().map(ToString::to_string).collect();
    let report =
        Report { from: run.to_owned(), to: args.to.clone(), dry_run: args.dry_run, files: copies, roots, install };
    super::print(args.json.json, &report, text(&report))
}

/// Where the run's files come from: its manifest's run, platform and commit, else its prefix's.
async fn provenance(store: &dyn Store, run: &str, segment: &RunSegment<'_>) -> anyhow::Result<Provenance> {
    let manifest =
        quarry_store::runs::read_manifest(store, run).await.with_context(|| format!("reading {run}'s manifest"))?;
    Ok(match manifest {
        Some(m) => Provenance { run: m.run_id, platform: m.platform, commit: m.commit },
        None => Provenance { run: segment.run_id.to_owned(), platform: segment.platform.to_owned(), commit: None },
    })
}

/// `--init`: the channel's roots indexed while empty (an existing index is left as it is).
async fn init(args: &PromoteArgs) -> anyhow::Result<()> {
    let store: Arc<dyn Store> = args.store.store.open().await?;
    let channel = ChannelRoots::new(&args.to, quarry_store::layout::config::configured());
    let wants = |k: KindArg| args.kinds.contains(&k);
    let mut prefixes = Vec::new();
    if wants(KindArg::Pip) {
        if let Some(generic) = channel.generic() {
            prefixes.push((generic, RepoKind::Pip));
        } else if args.families.is_empty() {
            prefixes.push((channel.pip(None), RepoKind::Pip));
        }
        let targets = quarry_topology::families::AmdgpuTargets::builtin();
        let map = targets.family_map();
        for family in &args.families {
            let family = known_family(family, &map).context("--families")?;
            prefixes.push((channel.pip(Some(&family)), RepoKind::Pip));
        }
    }
    if wants(KindArg::Apt) {
        prefixes.push((channel.deb(), RepoKind::Apt));
    }
    if wants(KindArg::Dnf) {
        prefixes.push((channel.rpm("x86_64"), RepoKind::Dnf));
    }
    let mut roots = BTreeSet::new();
    for (prefix, kind) in prefixes {
        let root = RepoRoot::with_kind(&prefix, kind).with_context(|| format!("channel root {prefix}"))?;
        if read_state(store.as_ref(), &root).await?.is_none() {
            roots.insert(root);
        }
    }
    let indexer = Indexer::new(store.clone());
    for root in &roots {
        indexer.reindex_with(root, true).await.with_context(|| format!("publishing {root}"))?;
    }
    let install = roots.iter().map(|r| install_line(args.store.store.as_str(), r)).collect();
    let roots = roots.iter().map(ToString::to_string).collect();
    let report = Report { from: String::new(), to: args.to.clone(), dry_run: false, files: Vec::new(), roots, install };
    super::print(args.json.json, &report, text(&report))
}

/// Every target checked before anything is copied: already there with the same bytes is
/// `same`; other bytes under the name refuse the whole promotion. What the channel holds comes
/// from one listing and one state read per root: a target's sha256 is its root's state's while
/// the listed ETag is the one the state recorded; only a file the state does not know is HEADed.
async fn check(
    store: &dyn Store,
    planned: &[(Key, Key)],
    known: &BTreeMap<String, Entry>,
) -> anyhow::Result<Vec<Copy>> {
    let mut channel: BTreeMap<String, (ObjectMeta, Option<String>)> = BTreeMap::new();
    let roots: BTreeSet<RepoRoot> = planned.iter().filter_map(|(_, to)| RepoRoot::for_key(to)).collect();
    for root in &roots {
        let (prefix, recursive) = root.package_prefix();
        let listed = store.list_all(&prefix, !recursive).await.with_context(|| format!("listing {prefix}"))?;
        let state = read_state(store, root).await?.unwrap_or_default();
        for object in listed.objects {
            let relative = object.key.as_str().strip_prefix(root.as_str()).unwrap_or_default();
            let indexed = state.entries.get(relative).filter(|e| !e.etag.is_empty() && e.etag == object.version());
            let sha = indexed.map(|e| e.sha256.clone());
            channel.insert(object.key.to_string(), (object, sha));
        }
    }
    let checked: Vec<anyhow::Result<(Copy, Option<String>)>> = futures_util::stream::iter(planned)
        .map(|(from, to)| check_one(store, from, to, known, channel.get(to.as_str())))
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
    if !conflicts.is_empty() {
        bail!(
            "the channel already holds other bytes under {} name(s); nothing was changed: {}",
            conflicts.len(),
            conflicts.join("; ")
        );
    }
    Ok(copies)
}

/// Requests in flight at once (HEADs, copies).
const CONCURRENCY: usize = 16;

/// The size and sha256 of `key`: the stored checksum, else hashed while streaming the object.
async fn sha_of(store: &dyn Store, key: &Key) -> anyhow::Result<(u64, String)> {
    let meta = store.head(key).await?;
    if let Some(sha) = meta.sha256 {
        return Ok((meta.size, sha));
    }
    let mut body = store.get(key, None).await?.body;
    let mut hasher = quarry_store::Sha256Hex::default();
    while let Some(chunk) = body.next().await {
        hasher.update(&chunk.with_context(|| format!("reading {key}"))?);
    }
    Ok((meta.size, hasher.finish()))
}

/// `there`: the target as the channel's listing showed it, with its sha256 when the channel's
/// state vouches for it.
async fn check_one(
    store: &dyn Store,
    from: &Key,
    to: &Key,
    known: &BTreeMap<String, Entry>,
    there: Option<&(ObjectMeta, Option<String>)>,
) -> anyhow::Result<(Copy, Option<String>)> {
    let (size, sha256) = match known.get(from.as_str()) {
        Some(e) => (e.size, e.sha256.clone()),
        None => sha_of(store, from).await?,
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
    let copy = Copy { from: from.to_string(), to: to.to_string(), size, sha256, status, method: None };
    Ok((copy, conflict))
}

/// Copies every new file (server-side without a HEAD where the run's state gives its size and
/// sha256); for each whose entry the run's state holds, what the channel's reindex needs
/// instead of reading the copy again: that entry at the copy's ETag, stamped with when it
/// entered the channel and where it came from, its wheel's `.metadata` sidecar copied along.
async fn copy_all(
    store: &dyn Store,
    copies: &mut [Copy],
    known: &BTreeMap<String, Entry>,
    source: &Provenance,
) -> anyhow::Result<Inspections> {
    let now = quarry_index::upload_time(jiff::Timestamp::now());
    let pending = copies.iter_mut().filter(|c| c.status == "copy");
    let results: Vec<anyhow::Result<Option<(Key, Inspected)>>> = futures_util::stream::iter(pending)
        .map(|c| {
            let now = now.clone();
            async move {
                let (from, to) = (Key::new(&c.from)?, Key::new(&c.to)?);
                let copied = store.copy_known(store, &from, &to, c.size, Some(&c.sha256)).await;
                let (put, method) = copied.with_context(|| format!("copying {from} to {to}"))?;
                c.method = Some(method.label());
                let Some(entry) = known.get(&c.from).filter(|e| !e.etag.is_empty() && !put.etag.is_empty()) else {
                    return Ok(None);
                };
                if entry.core_metadata_sha256.is_some() && !copy_sidecar(store, &from, &to).await? {
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
async fn copy_sidecar(store: &dyn Store, from: &Key, to: &Key) -> anyhow::Result<bool> {
    let (from, to) = (Key::new(format!("{from}{METADATA_SUFFIX}"))?, Key::new(format!("{to}{METADATA_SUFFIX}"))?);
    // A sidecar is small: no size check to make before a server-side copy.
    match store.copy_known(store, &from, &to, 0, None).await {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e).with_context(|| format!("copying {from} to {to}")),
    }
}

/// apt and dnf roots first, then pip, a generic root before the per-family views that list it
/// (its reindex refreshes them too): every file is in place before any page names it.
async fn reindex(store: Arc<dyn Store>, roots: &BTreeSet<RepoRoot>, known: Inspections) -> anyhow::Result<()> {
    let indexer = Indexer::new(store);
    let layout = quarry_store::layout::config::configured();
    let mut ordered: Vec<&RepoRoot> = roots.iter().collect();
    ordered.sort_by_key(|r| {
        let view = quarry_index::view::generic_of(layout, r).is_some();
        (r.kind() == RepoKind::Pip, view, r.as_str().to_owned())
    });
    for root in ordered {
        indexer.reindex_inspected(root, known.clone()).await.with_context(|| format!("reindexing {root}"))?;
    }
    Ok(())
}

/// What a client points at: the pip root's simple index, the apt source line, the dnf baseurl.
fn install_line(store: &str, root: &RepoRoot) -> String {
    let destination = quarry_upload::destination::StoreDestination::parse(store);
    let url = |key: &str| match destination.store_url.strip_prefix("s3://") {
        Some(bucket) => quarry_store::layout::public_url_from_env(bucket, &destination.key(key)),
        None => format!("{}/{}", destination.store_url.trim_end_matches('/'), destination.key(key)),
    };
    match root.kind() {
        RepoKind::Pip => format!("pip: --index-url {}", url(&format!("{root}simple/"))),
        RepoKind::Apt => format!("apt: deb [trusted=yes] {} stable main", url(root.as_str())),
        RepoKind::Dnf => format!("dnf: baseurl={}", url(root.as_str())),
    }
}

fn text(report: &Report) -> String {
    let mut out = String::new();
    for c in &report.files {
        let _ = writeln!(out, "{} {} -> {} sha256={}", c.status, c.from, c.to, c.sha256);
    }
    for line in &report.install {
        let _ = writeln!(out, "{line}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheels_belong_to_families_by_therocks_names() {
        let targets = quarry_topology::families::AmdgpuTargets::builtin();
        let map = targets.family_map();
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
            assert!(families_of(name, dir, &map).is_err(), "{name} {dir:?}");
        }
    }

    /// A channel file its state does not know (put there without indexing) is still checked:
    /// the listing shows it, a HEAD gives its sha256.
    #[tokio::test]
    async fn unindexed_channel_files_are_checked_too() {
        let store = quarry_store::MemoryStore::default();
        let put = |key: &str, body: &'static [u8]| {
            let key = Key::new(key).unwrap();
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
        let copies = check(&store, &planned(&["a", "c"]), &known).await.unwrap();
        let status: Vec<&str> = copies.iter().map(|c| c.status).collect();
        assert_eq!(status, ["same", "copy"]);
        let err = check(&store, &planned(&["a", "b", "c"]), &known).await.unwrap_err();
        assert!(err.to_string().contains("other bytes under 1 name(s)"), "{err}");
        assert!(err.to_string().contains("nightly/python/b-1.0.tar.gz"), "{err}");
    }
}
