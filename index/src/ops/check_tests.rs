//! The audit ([`crate::ops::check`]) catches what a client would trip over: each kind of object a
//! page names, removed from an indexed store, is named in the report as a dangling link. And
//! the audit as a reader between any two deletes: `quarry prune` and `quarry gc` never leave a
//! page naming an object they already deleted.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use quarry_store::{
    ByteRange, ByteStream, GetObject, Key, ListOptions, ListPage, MemoryStore, ObjectMeta, PutOptions, PutResult,
    Store, StoreExt,
};

use crate::reindex::scale_tests::wheel;
use crate::{Indexer, ListingDir, RepoRoot, check, update_listing};

const PIP: &str = "7-linux/python/";
const APT: &str = "7-linux/packages/deb/";
const DNF: &str = "7-linux/packages/rpm/x86_64/";

async fn put(store: &dyn Store, key: &str, body: Vec<u8>) {
    store.put_bytes(&Key::new(key).unwrap(), Bytes::from(body), PutOptions::default()).await.unwrap();
}

/// `name` `version` as a minimal `.rpm` (one small file, uncompressed payload).
fn rpm(name: &str, version: &str) -> (String, Vec<u8>) {
    let config = rpm::BuildConfig::default().compression(rpm::CompressionType::None).source_date(1_700_000_000);
    let package = rpm::PackageBuilder::new(name, version, "MIT", "x86_64", "a package")
        .using_config(config)
        .release("1")
        .with_file_contents(format!("{version}\n"), rpm::FileOptions::new(format!("/usr/share/{name}/v")))
        .expect("a valid file entry")
        .build()
        .expect("a valid package");
    let mut out = Vec::new();
    package.write(&mut out).expect("writing to memory");
    (format!("{name}-{version}-1.x86_64.rpm"), out)
}

fn deb(name: &str, version: &str) -> (String, Vec<u8>) {
    let control = format!("Package: {name}\nVersion: {version}\nArchitecture: amd64\nDescription: d\n");
    (format!("pool/main/{name}_{version}_amd64.deb"), quarry_inspect::deb::test_support::build_deb(&control, "gz"))
}

/// A run `{run}-linux/` with three versions of a wheel, a .deb and an .rpm, an archive and a log, every root
/// and listing indexed.
async fn indexed_run(store: &Arc<dyn Store>, run: &str) {
    for v in ["1.0", "2.0", "3.0"] {
        let (name, body) = wheel("alpha", v);
        put(store.as_ref(), &format!("{run}-linux/python/{name}"), body).await;
        let (name, body) = deb("alpha", v);
        put(store.as_ref(), &format!("{run}-linux/packages/deb/{name}"), body).await;
    }
    for v in ["1.0", "2.0", "3.0"] {
        let (name, body) = rpm("alpha", v);
        put(store.as_ref(), &format!("{run}-linux/packages/rpm/x86_64/{name}"), body).await;
    }
    put(store.as_ref(), &format!("{run}-linux/blas_lib_gfx942.tar.zst"), b"archive".to_vec()).await;
    put(store.as_ref(), &format!("{run}-linux/logs/gfx94X/build.log"), b"log".to_vec()).await;
    let indexer = Indexer::new(store.clone(), Default::default());
    for root in ["python/", "packages/deb/", "packages/rpm/x86_64/"] {
        indexer.reindex(&RepoRoot::new(&format!("{run}-linux/{root}"), &Default::default()).unwrap()).await.unwrap();
    }
    for dir in ["logs/gfx94X/", "logs/", ""] {
        update_listing(store.as_ref(), &ListingDir::new(&format!("{run}-linux/{dir}"), &Default::default()).unwrap())
            .await
            .unwrap();
    }
}

fn roots(run: &str) -> Vec<RepoRoot> {
    ["python/", "packages/deb/", "packages/rpm/x86_64/"]
        .iter()
        .map(|r| RepoRoot::new(&format!("{run}-linux/{r}"), &Default::default()).unwrap())
        .collect()
}

/// The first key under `prefix` whose name contains `part`.
async fn find(store: &dyn Store, prefix: &str, part: &str) -> String {
    let listing = store.list_all(prefix, false).await.unwrap();
    let found = listing.objects.iter().map(|o| o.key.to_string()).filter(|k| k[prefix.len()..].contains(part)).min();
    found.unwrap_or_else(|| panic!("nothing with {part} under {prefix}"))
}

/// Remove `key`, audit `root`, put it back; the dangling problems found.
async fn dangling_without(store: &Arc<dyn Store>, root: &str, key: &str) -> Vec<String> {
    let key = Key::new(key).unwrap();
    let (_, body) = store.get_bytes(&key, 1 << 30).await.unwrap();
    store.delete(&key).await.unwrap();
    let report =
        check(store.as_ref(), &RepoRoot::new(root, &Default::default()).unwrap(), &Default::default()).await.unwrap();
    let dangling = report.dangling().iter().map(|p| (*p).to_owned()).collect();
    store.put_bytes(&key, body, PutOptions::derived()).await.unwrap();
    dangling
}

#[tokio::test]
async fn the_audit_names_each_missing_object_a_page_names() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    indexed_run(&store, "7").await;
    for root in roots("7") {
        let report = check(store.as_ref(), &root, &Default::default()).await.unwrap();
        assert!(report.is_clean(), "{report}");
    }
    let (wheel_name, _) = wheel("alpha", "1.0");
    let by_hash = find(store.as_ref(), &format!("{APT}dists/"), "by-hash/SHA256/").await;
    let packages_gz = format!("{APT}dists/stable/main/binary-amd64/Packages.gz");
    let primary = find(store.as_ref(), &format!("{DNF}repodata/"), "-primary.xml.gz").await;
    let (deb_name, _) = deb("alpha", "1.0");
    let (rpm_name, _) = rpm("alpha", "1.0");
    let cases = [
        (PIP, format!("{PIP}{wheel_name}")),
        (PIP, format!("{PIP}{wheel_name}.metadata")),
        (PIP, format!("{PIP}simple/alpha/index.html")),
        (PIP, format!("{PIP}simple/alpha/index.json")),
        (APT, by_hash),
        (APT, packages_gz),
        (APT, format!("{APT}{deb_name}")),
        (DNF, primary),
        (DNF, format!("{DNF}{rpm_name}")),
    ];
    let mut missed = Vec::new();
    for (root, key) in cases {
        let dangling = dangling_without(&store, root, &key).await;
        let name = &key[root.len()..];
        if !dangling.iter().any(|p| p.contains(name)) {
            missed.push(format!("{key}: {dangling:?}"));
        }
    }
    assert!(missed.is_empty(), "the audit did not name these missing objects:\n{}", missed.join("\n"));
}

/// A store that audits every root and listing of the runs it is told of after each delete: what
/// a reader between two deletes would find.
#[derive(Debug)]
struct AuditedDeletes {
    inner: Arc<MemoryStore>,
    runs: Vec<String>,
    found: Mutex<BTreeSet<String>>,
    deletes: Mutex<usize>,
    /// Refresh what each deleted key makes stale before the audit, as the Lambda does on the
    /// deletion's notification.
    react: bool,
}

impl AuditedDeletes {
    fn new(inner: Arc<MemoryStore>, runs: &[&str]) -> Self {
        Self {
            inner,
            runs: runs.iter().map(|r| (*r).to_owned()).collect(),
            found: Mutex::new(BTreeSet::new()),
            deletes: Mutex::new(0),
            react: false,
        }
    }

    fn reacting(mut self) -> Self {
        self.react = true;
        self
    }

    async fn audit(&self, deleted: &Key) {
        let mut found = Vec::new();
        for run in &self.runs {
            for root in roots(run) {
                let report = check(self.inner.as_ref(), &root, &Default::default()).await.unwrap();
                found.extend(report.dangling().iter().map(|p| format!("after deleting {deleted}: {root}: {p}")));
            }
            for dir in ["", "logs/"] {
                let dir = ListingDir::new(&format!("{run}-linux/{dir}"), &Default::default()).unwrap();
                let report = crate::ops::check::check_listing(self.inner.as_ref(), &dir).await.unwrap();
                found.extend(report.dangling().iter().map(|p| format!("after deleting {deleted}: {dir}: {p}")));
            }
        }
        self.found.lock().unwrap().extend(found);
    }
}

#[async_trait::async_trait]
impl Store for AuditedDeletes {
    fn describe(&self) -> String {
        "audited deletes".into()
    }
    async fn head(&self, key: &Key) -> quarry_store::Result<ObjectMeta> {
        self.inner.head(key).await
    }
    async fn get(&self, key: &Key, range: Option<ByteRange>) -> quarry_store::Result<GetObject> {
        self.inner.get(key, range).await
    }
    async fn put(&self, key: &Key, body: ByteStream, options: PutOptions) -> quarry_store::Result<PutResult> {
        self.inner.put(key, body, options).await
    }
    async fn list(&self, prefix: &str, options: ListOptions) -> quarry_store::Result<ListPage> {
        self.inner.list(prefix, options).await
    }
    async fn delete(&self, key: &Key) -> quarry_store::Result<()> {
        self.inner.delete(key).await?;
        *self.deletes.lock().unwrap() += 1;
        self.audit(key).await;
        if self.react {
            let indexer = Indexer::new(self.inner.clone(), Default::default());
            for scope in crate::Scope::affected_by(key, &Default::default()) {
                indexer.refresh(&scope).await.unwrap();
            }
            self.audit(key).await;
        }
        Ok(())
    }
}

#[tokio::test]
async fn prune_never_leaves_a_page_naming_a_file_it_deleted() {
    prune_audited(false).await;
}

/// The Lambda reindexes what each deletion makes stale, while other pruned files are still
/// there: they must not come back on the pages.
#[tokio::test]
async fn prune_never_leaves_a_page_naming_a_file_it_deleted_while_deletions_are_indexed() {
    prune_audited(true).await;
}

async fn prune_audited(react: bool) {
    let memory = Arc::new(MemoryStore::default());
    let plain: Arc<dyn Store> = memory.clone();
    indexed_run(&plain, "7").await;
    let audited = AuditedDeletes::new(memory, &["7"]);
    let audited = Arc::new(if react { audited.reacting() } else { audited });
    let indexer = Indexer::new(audited.clone(), Default::default());
    // The older version of each package, then everything (a project's pages go too).
    let older = crate::ops::prune::PrunePolicy { keep_days: None, keep_versions: Some(1) };
    let all = crate::ops::prune::PrunePolicy { keep_days: Some(0), keep_versions: None };
    for policy in [older, all] {
        for root in roots("7") {
            let now = jiff::Timestamp::now();
            let report = crate::ops::prune::prune_root(&indexer, &root, policy, now, false).await.unwrap();
            assert!(!report.deleted.is_empty(), "{report}");
        }
    }
    assert!(*audited.deletes.lock().unwrap() >= 3);
    let found: Vec<String> = audited.found.lock().unwrap().iter().cloned().collect();
    assert!(found.is_empty(), "a reader saw pages naming pruned files:\n{}", found.join("\n"));
    for root in roots("7") {
        let report = check(plain.as_ref(), &root, &Default::default()).await.unwrap();
        assert!(report.is_clean(), "{report}");
    }
}

#[tokio::test]
async fn gc_never_leaves_a_page_naming_an_object_it_deleted() {
    let memory = Arc::new(MemoryStore::default());
    let plain: Arc<dyn Store> = memory.clone();
    indexed_run(&plain, "7").await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    indexed_run(&plain, "8").await;
    let audited = Arc::new(AuditedDeletes::new(memory, &["7", "8"]));
    let indexer = Indexer::new(audited.clone(), Default::default());
    let options = crate::ops::retention::RetentionOptions {
        prefix: String::new(),
        older_than: None,
        keep_last: Some(1),
        dry_run: false,
        concurrency: 4,
    };
    let report = crate::ops::retention::apply(&indexer, &options, jiff::Timestamp::now()).await.unwrap();
    assert_eq!(report.deleted.iter().map(|r| r.run.as_str()).collect::<Vec<_>>(), ["7-linux/"]);
    assert!(plain.list_all("7-linux/", false).await.unwrap().objects.is_empty());
    assert!(*audited.deletes.lock().unwrap() > 20);
    let found: Vec<String> = audited.found.lock().unwrap().iter().cloned().collect();
    assert!(found.is_empty(), "a reader saw pages naming deleted objects:\n{}", found.join("\n"));
}
