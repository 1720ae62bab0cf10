//! Cost of one more package in a big apt or dnf repo: the store operations a `+1 .deb` or
//! `+1 .rpm` reindex makes do not grow with the repo, and what it writes is the repo's indexes,
//! not one object per package. (The memory store lists up to 100,000 keys a page; on S3 the
//! listing is one page per 1,000 files, the O(root) term the scoped listing removes.)

use std::sync::Arc;

use bytes::Bytes;
use quarry_store::{CountingStore, Key, MemoryStore, OpCounts, PutOptions, Store, StoreExt, sha256_hex};

use crate::{Indexer, RepoRoot};

pub(crate) const DEB_ROOT: &str = "7-linux/packages/deb/";
pub(crate) const RPM_ROOT: &str = "7-linux/packages/rpm/x86_64/";

/// A minimal `.deb` for package `n` (gzip members: building thousands stays quick).
pub(crate) fn deb(n: usize) -> (String, Vec<u8>) {
    let control = format!(
        "Package: pkg{n:05}\nVersion: 1.0-{n}\nArchitecture: amd64\nMaintainer: Q <q@example.com>\nDescription: package {n}\n"
    );
    (format!("pool/main/pkg{n:05}_1.0-{n}_amd64.deb"), quarry_inspect::deb::test_support::build_deb(&control, "gz"))
}

/// A minimal `.rpm` for package `n`: one small file (uncompressed payload).
pub(crate) fn rpm(n: usize) -> (String, Vec<u8>) {
    let name = format!("pkg{n:05}");
    let config = rpm::BuildConfig::default().compression(rpm::CompressionType::None).source_date(1_700_000_000);
    let package = rpm::PackageBuilder::new(&name, "1.0", "MIT", "x86_64", "a package")
        .using_config(config)
        .release(n.to_string())
        .with_file_contents(format!("{n}\n"), rpm::FileOptions::new(format!("/usr/share/{name}/n")))
        .expect("a valid file entry")
        .build()
        .expect("a valid package");
    let mut out = Vec::new();
    package.write(&mut out).expect("writing to memory");
    (format!("{name}-1.0-{n}.x86_64.rpm"), out)
}

async fn put(store: &dyn Store, root: &str, (name, body): (String, Vec<u8>)) {
    let key = Key::new(format!("{root}{name}")).unwrap();
    store.put_bytes(&key, Bytes::from(body), PutOptions::default()).await.unwrap();
}

/// What indexing package `size` costs in a repo already holding `size` packages: the store
/// operations (counted) and the bytes the reindex wrote.
async fn plus_one(root: &str, size: usize, make: fn(usize) -> (String, Vec<u8>)) -> (OpCounts, u64) {
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let repo = RepoRoot::new(root, &Default::default()).unwrap();
    let packages: Vec<_> = (0..size).map(make).collect();
    for package in packages {
        put(memory.as_ref(), root, package).await;
    }
    Indexer::new(memory.clone(), Default::default()).reindex(&repo).await.unwrap();
    put(memory.as_ref(), root, make(size)).await;
    let counting = Arc::new(CountingStore::new(memory.clone()));
    let report = Indexer::new(counting.clone(), Default::default()).reindex(&repo).await.unwrap();
    assert_eq!(report.added.len(), 1, "{report}");
    let mut written = 0;
    for key in &report.written {
        written += memory.head(&Key::new(key.clone()).unwrap()).await.unwrap().size;
    }
    (counting.counts(), written)
}

async fn assert_constant(root: &str, make: fn(usize) -> (String, Vec<u8>)) {
    let (small, small_bytes) = plus_one(root, 200, make).await;
    let (big, big_bytes) = plus_one(root, 2000, make).await;
    let costs =
        format!("+1 into 200: {small}, {small_bytes} bytes written; into 2,000: {big}, {big_bytes} bytes written");
    tracing::info!("{costs}");
    assert_eq!(small, big, "store operations grow with the repo: {costs}");
    assert!(big.put <= 16, "{big}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_deb_costs_the_same_operations_at_200_and_2000() {
    assert_constant(DEB_ROOT, deb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_rpm_costs_the_same_operations_at_200_and_2000() {
    assert_constant(RPM_ROOT, rpm).await;
}

/// A minimal wheel of `name` `version`.
pub(crate) fn wheel(name: &str, version: &str) -> (String, Vec<u8>) {
    use std::io::Write as _;
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut out);
        let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        zip.start_file(format!("{name}/__init__.py"), stored).unwrap();
        zip.start_file(format!("{name}-{version}.dist-info/METADATA"), stored).unwrap();
        write!(zip, "Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n").unwrap();
        zip.finish().unwrap();
    }
    (format!("{name}-{version}-py3-none-any.whl"), out.into_inner())
}

/// xorshift: a seeded, dependency-free sequence.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Package `i` of version `v` for a root of `kind`.
fn package(kind: &str, i: usize, v: usize) -> (String, Vec<u8>) {
    match kind {
        "pip" => wheel(&format!("proj{}", i % 4), &format!("1.{i}.{v}")),
        "apt" => {
            let control = format!("Package: pkg{}\nVersion: 1.{i}.{v}\nArchitecture: amd64\nDescription: p\n", i % 4);
            (
                format!("pool/main/pkg{}_1.{i}.{v}_amd64.deb", i % 4),
                quarry_inspect::deb::test_support::build_deb(&control, "gz"),
            )
        }
        _ => rpm(i * 100 + v),
    }
}

/// Every output page the state lists, as stored.
async fn stored_outputs(store: &dyn Store, state: &crate::RepoState) -> std::collections::BTreeMap<String, Bytes> {
    let mut pages = std::collections::BTreeMap::new();
    for key in state.outputs.keys() {
        let (_, body) = store.get_bytes(&Key::new(key.clone()).unwrap(), 1 << 26).await.unwrap();
        pages.insert(key.clone(), body);
    }
    pages
}

/// A seeded random sequence of uploads, yanks, unyanks and deletes, each followed by an
/// incremental reindex; then a reindex from scratch (state and outputs removed) must find the
/// same entries, and rendering them must give every stored page byte for byte.
async fn random_history_matches_a_full_reindex(kind: &str, root: &str, seed: u64) {
    random_history(kind, root, seed, None, 0).await;
}

/// [`random_history_matches_a_full_reindex`] with `events`: each change refreshed as its event
/// would ([`Scope::for_key`]: one project of a pip root), never the whole root, with the
/// find-links page on or off.
async fn random_history(kind: &str, root: &str, seed: u64, events: Option<bool>, base: usize) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let repo = RepoRoot::new(root, &Default::default()).unwrap();
    let config = crate::IndexConfig { find_links: events, ..crate::IndexConfig::default() };
    let indexer = Indexer::new(store.clone(), Default::default()).with_config(config.clone());
    let mut rng = Rng(seed);
    let mut live: Vec<String> = Vec::new();
    // `base` packages first, named between the ones the history adds (rpm only), so its
    // changes land in the middle of documents of many chunks.
    assert!(base == 0 || kind == "dnf");
    for k in 0..base {
        let (name, body) = rpm(100 * (k / 60) + 40 + k % 60);
        store
            .put_bytes(&Key::new(format!("{root}{name}")).unwrap(), Bytes::from(body), PutOptions::default())
            .await
            .unwrap();
    }
    if base > 0 {
        indexer.reindex(&repo).await.unwrap();
    }
    for step in 0..40 {
        let key = |name: &str| Key::new(format!("{root}{name}")).unwrap();
        let op = if live.is_empty() { 0 } else { rng.below(10) };
        let changed = match op {
            0..=5 => {
                let (name, body) = package(kind, rng.below(12), step);
                store.put_bytes(&key(&name), Bytes::from(body), PutOptions::default()).await.unwrap();
                live.push(name.clone());
                key(&name)
            }
            6 | 7 if kind == "pip" => {
                let target = &live[rng.below(live.len())];
                let marker = key(&format!("{target}{}", crate::YANK_SUFFIX));
                if rng.below(3) == 0 {
                    store.delete(&marker).await.unwrap();
                } else {
                    let reason = Bytes::from(format!("bad build {step}"));
                    store.put_bytes(&marker, reason, PutOptions::default()).await.unwrap();
                }
                marker
            }
            _ => {
                let gone = live.swap_remove(rng.below(live.len()));
                store.delete(&key(&gone)).await.unwrap();
                key(&gone)
            }
        };
        if events.is_some() {
            let scope = crate::Scope::for_key(&changed, &Default::default()).unwrap();
            assert!(matches!(scope, crate::Scope::Project(..)), "{changed}");
            indexer.refresh(&scope).await.unwrap();
        } else if rng.below(3) > 0 {
            indexer.reindex(&repo).await.unwrap();
        }
    }
    if events.is_none() {
        indexer.reindex(&repo).await.unwrap();
    }
    let incremental = crate::read_state(store.as_ref(), &repo).await.unwrap().unwrap();
    assert!(!incremental.entries.is_empty(), "{kind}: seed {seed} leaves nothing to compare");
    let pages = stored_outputs(store.as_ref(), &incremental).await;

    // From scratch: the same files (same versions and times), no state, no outputs.
    let mut outputs: Vec<String> = incremental.outputs.keys().cloned().collect();
    outputs.extend(incremental.retired.keys().cloned());
    outputs.push(repo.state_key().to_string());
    for key in outputs {
        store.delete(&Key::new(key).unwrap()).await.unwrap();
    }
    for object in store.list_all(&format!("{root}{}", crate::PROJECTS_DIR), false).await.unwrap().objects {
        store.delete(&object.key).await.unwrap();
    }
    let report = Indexer::new(store.clone(), Default::default()).with_config(config).reindex(&repo).await.unwrap();
    assert!(report.committed, "{kind}: {report}; {} live, {} indexed", live.len(), incremental.entries.len());
    let mut scratch = crate::read_state(store.as_ref(), &repo).await.unwrap().unwrap();
    assert_eq!(scratch.entries, incremental.entries, "{kind}: entries differ after seed {seed}");
    assert_eq!(scratch.rejected, incremental.rejected, "{kind}: rejections differ after seed {seed}");
    assert_eq!(
        scratch.outputs.keys().collect::<Vec<_>>(),
        incremental.outputs.keys().collect::<Vec<_>>(),
        "{kind}: outputs differ"
    );
    // Release `Date` and repomd `revision` come from the generation time: the same one.
    scratch.generated = incremental.generated;
    let config = crate::IndexConfig::default();
    let find_links = events.unwrap_or(true);
    let rendered = match repo.kind() {
        crate::RepoKind::Pip => crate::render::pip::render_parts(
            &repo,
            &scratch,
            crate::render::pip::Parts { simple_root: true, find_links },
            None,
        ),
        crate::RepoKind::Apt => crate::render::apt::render(&scratch, &config.apt, None).unwrap(),
        crate::RepoKind::Dnf => crate::render::dnf::render(&scratch, None).unwrap(),
    };
    assert!(!rendered.is_empty());
    for page in rendered {
        let key = format!("{root}{}", page.path);
        let stored = pages.get(&key).unwrap_or_else(|| panic!("{kind}: {key} is not stored"));
        assert!(stored[..] == page.body[..], "{kind}: {key} differs from a full reindex's (seed {seed})");
    }
}

#[tokio::test]
async fn random_pip_histories_render_what_a_full_reindex_renders() {
    for seed in [1, 7, 42] {
        random_history_matches_a_full_reindex("pip", "7-linux/python/", seed).await;
    }
}

#[tokio::test]
async fn random_pip_event_histories_render_what_a_full_reindex_renders() {
    for seed in [1, 7, 42, 99] {
        for find_links in [true, false] {
            random_history("pip", "7-linux/python/", seed, Some(find_links), 0).await;
        }
    }
}

#[tokio::test]
async fn random_apt_histories_render_what_a_full_reindex_renders() {
    for seed in [1, 7, 42] {
        random_history_matches_a_full_reindex("apt", DEB_ROOT, seed).await;
    }
}

#[tokio::test]
async fn random_dnf_histories_render_what_a_full_reindex_renders() {
    for seed in [1, 7, 42] {
        random_history_matches_a_full_reindex("dnf", RPM_ROOT, seed).await;
    }
}

/// The same over a repo of 720 packages (documents of many chunks, most of them taken whole
/// from the previous documents on each reindex).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_dnf_histories_over_a_big_repo_render_what_a_full_reindex_renders() {
    for seed in [3, 11] {
        random_history("dnf", RPM_ROOT, seed, None, 720).await;
    }
}

/// Puts made into every test root before the files measured, so the memory store's ETags
/// (`{sha}-{generation}`) of those files have as many digits whatever the root's size.
const GENERATIONS: usize = 30_000;
const PIP_ROOT: &str = "7-linux/python/";

/// A pip root of `size` files: `size - 10` placeholder files of `size / 10 - 1` projects,
/// indexed from a state written directly (as an older Quarry left it), and ten real wheels of
/// project `target`; then split by a whole-root reindex.
async fn pip_root(size: usize, config: &crate::IndexConfig) -> Arc<MemoryStore> {
    let memory = Arc::new(MemoryStore::default());
    let repo = RepoRoot::new(PIP_ROOT, &Default::default()).unwrap();
    let mut puts = 0;
    for i in 0..size - 10 {
        let key = Key::new(format!("{PIP_ROOT}bulk{:05}-1.{}-py3-none-any.whl", i / 10, i % 10)).unwrap();
        memory.put_bytes(&key, Bytes::from_static(b"placeholder"), PutOptions::default()).await.unwrap();
        puts += 1;
    }
    let mut state = crate::RepoState::empty();
    for object in memory.list_all(PIP_ROOT, true).await.unwrap().objects {
        let filename = object.key.filename().to_owned();
        let entry = crate::Entry {
            sha256: sha256_hex(filename.as_bytes()),
            ..crate::Entry::stored(&object, &object, String::new())
        };
        state.entries.insert(filename, entry);
    }
    let body = Bytes::from(serde_json::to_vec(&state).unwrap());
    memory.put_bytes(&repo.state_key(), body, PutOptions::default()).await.unwrap();
    let pad = Key::new("pad").unwrap();
    while puts < GENERATIONS {
        memory.put_bytes(&pad, Bytes::new(), PutOptions::default()).await.unwrap();
        puts += 1;
    }
    for v in 0..10 {
        put(memory.as_ref(), PIP_ROOT, wheel("target", &format!("1.{v}"))).await;
    }
    let report =
        Indexer::new(memory.clone(), Default::default()).with_config(config.clone()).reindex(&repo).await.unwrap();
    assert_eq!(report.added.len(), 10, "{report}");
    memory
}

/// Every object's ETag and size, by key.
async fn snapshot(store: &dyn Store) -> std::collections::BTreeMap<String, (String, u64)> {
    let objects = store.list_all("", false).await.unwrap().objects;
    objects.into_iter().map(|o| (o.key.to_string(), (o.etag, o.size))).collect()
}

/// The store operations of `+1 wheel` of project `target` (its own event, [`crate::Scope::for_key`])
/// into a pip root of `size` files, and the bytes written by key.
async fn plus_one_wheel(size: usize, find_links: bool) -> (OpCounts, std::collections::BTreeMap<String, u64>) {
    let config = crate::IndexConfig { find_links: Some(find_links), ..crate::IndexConfig::default() };
    let memory = pip_root(size, &config).await;
    let (name, body) = wheel("target", "2.0");
    let key = Key::new(format!("{PIP_ROOT}{name}")).unwrap();
    memory.put_bytes(&key, Bytes::from(body), PutOptions::default()).await.unwrap();
    let before = snapshot(memory.as_ref()).await;
    let counting = Arc::new(CountingStore::new(memory.clone()));
    let scope = crate::Scope::for_key(&key, &Default::default()).unwrap();
    let crate::Refreshed::Root(report) =
        Indexer::new(counting.clone(), Default::default()).with_config(config).refresh(&scope).await.unwrap()
    else {
        panic!("not a root");
    };
    assert_eq!(report.added, [name], "{report}");
    let counts = counting.counts();
    let after = snapshot(memory.as_ref()).await;
    let written = after.into_iter().filter(|(k, v)| before.get(k) != Some(v)).map(|(k, (_, size))| (k, size)).collect();
    let audit =
        crate::check(memory.as_ref(), &RepoRoot::new(PIP_ROOT, &Default::default()).unwrap(), &Default::default())
            .await
            .unwrap();
    assert!(audit.is_clean() && audit.files == size + 1, "{audit}");
    (counts, written)
}

async fn assert_pip_constant(find_links: bool) {
    let (small, small_written) = plus_one_wheel(1_000, find_links).await;
    let (big, big_written) = plus_one_wheel(20_000, find_links).await;
    let costs = format!("+1 wheel into 1,000: {small}, {small_written:?}; into 20,000: {big}, {big_written:?}");
    tracing::info!("{costs}");
    assert_eq!(small, big, "store operations grow with the root: {costs}");
    assert!(big.total() <= 16, "{costs}");
    let find_links_page = format!("{PIP_ROOT}index.html");
    assert_eq!(small_written.contains_key(&find_links_page), find_links, "{costs}");
    let without = |written: &std::collections::BTreeMap<String, u64>| {
        written.iter().filter(|(k, _)| **k != find_links_page).map(|(k, v)| (k.clone(), *v)).collect::<Vec<_>>()
    };
    assert_eq!(without(&small_written), without(&big_written), "bytes written grow with the root: {costs}");
    let state: u64 = without(&big_written).iter().filter(|(k, _)| k.contains(".quarry-index")).map(|(_, v)| v).sum();
    assert!(state <= 64 * 1024, "{costs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_wheel_costs_the_same_at_1000_and_20000_files_without_find_links() {
    assert_pip_constant(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_wheel_costs_the_same_at_1000_and_20000_files_but_the_find_links_page() {
    assert_pip_constant(true).await;
}

/// The find-links splice takes a stored page only when it is whole `\n`-ended lines (checked
/// without copying the page: at 100,000 files it is 46 MB, and a copy was the Lambda's peak
/// memory); a page with CRLF line ends or without its final newline is refused (the event
/// then reconciles the whole root), and a spliced page equals the stored one when nothing
/// changed.
#[tokio::test]
async fn the_find_links_splice_takes_only_whole_lf_lines() {
    let memory = Arc::new(MemoryStore::default());
    for (name, version) in [("other", "1.0"), ("target", "1.0"), ("target", "1.1")] {
        put(memory.as_ref(), PIP_ROOT, wheel(name, version)).await;
    }
    let root = RepoRoot::new(PIP_ROOT, &Default::default()).unwrap();
    let config = crate::IndexConfig { find_links: Some(true), ..crate::IndexConfig::default() };
    Indexer::new(memory.clone(), Default::default()).with_config(config).reindex(&root).await.unwrap();
    let (_, page) = memory.get_bytes(&root.key(crate::render::pip::FIND_LINKS).unwrap(), 1 << 20).await.unwrap();
    let page = std::str::from_utf8(&page).unwrap().to_owned();
    let key = crate::state::io::project_key(&root, "target").unwrap();
    let (state, _) = crate::state::io::load_object(memory.as_ref(), &key).await.unwrap().unwrap();
    let name = quarry_packaging::PackageName::new("target").unwrap();
    let splice = |current: &str| crate::render::pip::splice_find_links(&root, current, &name, &state);
    let same = splice(&page).expect("a stored page splices");
    assert_eq!(std::str::from_utf8(&same.body).unwrap(), page);
    assert!(splice(&page.replace('\n', "\r\n")).is_none(), "CRLF line ends");
    assert!(splice(page.trim_end_matches('\n')).is_none(), "no final newline");
    assert!(splice(&page.replacen('\n', "\r\n", 1)).is_none(), "one CRLF line end");
}
