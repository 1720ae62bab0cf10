//! The full reconciliation, where the state and the store disagree: a wheel put with no event
//! delivered, a wheel deleted behind the indexer's back, a project state object corrupt and
//! another missing, a project's page and sidecar deleted, a run listing deleted and an
//! artifact put with no event. `quarry index --full` on a local store, and the Lambda handler
//! fed the template's scheduled event on an S3 bucket (moto): afterwards the pages list
//! exactly the store's files, `quarry index --check` is clean and pip installs through them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use quarry_index::RepoRoot;
use quarry_lambda_indexer::{Handler, Reconcile, Stores};
use quarry_store::{ConditionalWrites, Key, PutOptions, S3Store, Store, StoreExt};
use quarry_tests::s3::{S3Server, create_public_bucket, s3_client};
use quarry_tests::{WheelSpec, assert_success, installed, pip_install, quarry_bin, run};
use serde_json::Value;

const ROOT: &str = "4242-linux/python/";
const RUN: &str = "4242-linux/";

fn wheels() -> [WheelSpec; 5] {
    ["a", "b", "c", "d", "e"].map(|name| WheelSpec::new(&format!("recon-{name}"), "1.0"))
}

async fn put(store: &dyn Store, key: &str, body: Vec<u8>) {
    store.put_bytes(&Key::new(key).unwrap(), Bytes::from(body), PutOptions::default()).await.unwrap();
}

async fn delete(store: &dyn Store, key: &str) {
    store.delete(&Key::new(key).unwrap()).await.unwrap();
}

async fn exists(store: &dyn Store, key: &str) -> bool {
    store.head(&Key::new(key).unwrap()).await.is_ok()
}

async fn json(store: &dyn Store, key: &str) -> Value {
    let (_, body) = store.get_bytes(&Key::new(key).unwrap(), 1 << 24).await.unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// A consistent run: wheels a, b, d, e and one artifact, indexed; then everything a
/// reconciliation must repair done behind the indexer's back. Returns the files the store
/// holds afterwards.
async fn disagree(store: &Arc<dyn Store>) -> BTreeSet<String> {
    let [a, b, c, d, e] = wheels();
    for spec in [&a, &b, &d, &e] {
        put(store.as_ref(), &format!("{ROOT}{}", spec.filename()), spec.build()).await;
    }
    put(store.as_ref(), &format!("{RUN}blas_lib_gfx942.tar.zst"), b"\x28\xb5\x2f\xfd artifact".to_vec()).await;
    let indexer = quarry_index::Indexer::new(store.clone(), Default::default());
    indexer.reindex(&RepoRoot::new(ROOT, &Default::default()).unwrap()).await.unwrap();
    for scope in quarry_index::discover_scopes(store.as_ref(), RUN, &Default::default()).await.unwrap() {
        indexer.refresh(&scope).await.unwrap();
    }
    let report =
        quarry_index::check(store.as_ref(), &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default())
            .await
            .unwrap();
    assert!(report.is_clean() && report.files == 4, "{report}");

    // A wheel lands and its event is lost; another is deleted.
    put(store.as_ref(), &format!("{ROOT}{}", c.filename()), c.build()).await;
    delete(store.as_ref(), &format!("{ROOT}{}", b.filename())).await;
    // a's state object is corrupt, d's is gone.
    put(store.as_ref(), &format!("{ROOT}.quarry-index/recon-a.json"), b"{\"version\": 2, \"entries\": [".to_vec())
        .await;
    delete(store.as_ref(), &format!("{ROOT}.quarry-index/recon-d.json")).await;
    // e's page and sidecar are gone while its state says they are there.
    delete(store.as_ref(), &format!("{ROOT}simple/recon-e/index.html")).await;
    delete(store.as_ref(), &format!("{ROOT}{}.metadata", e.filename())).await;
    // The run listing is gone, and an artifact landed without an event.
    delete(store.as_ref(), &format!("{RUN}index.html")).await;
    put(store.as_ref(), &format!("{RUN}lapack_lib_gfx942.tar.zst"), b"\x28\xb5\x2f\xfd more".to_vec()).await;
    [a, c, d, e].iter().map(WheelSpec::filename).collect()
}

/// The files the pip root's pages list (every project of `simple/index.json`, every file of
/// its page), and the wheels the store holds there.
async fn pages_and_store(store: &dyn Store) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut listed = BTreeSet::new();
    for project in json(store, &format!("{ROOT}simple/index.json")).await["projects"].as_array().unwrap() {
        let name = project["name"].as_str().unwrap();
        for file in json(store, &format!("{ROOT}simple/{name}/index.json")).await["files"].as_array().unwrap() {
            listed.insert(file["filename"].as_str().unwrap().to_owned());
        }
    }
    let stored = store.list_all(ROOT, true).await.unwrap().objects;
    let wheels = stored.iter().map(|o| o.key.filename().to_owned()).filter(|n| n.ends_with(".whl")).collect();
    (listed, wheels)
}

/// Everything [`disagree`] broke is repaired.
async fn assert_repaired(store: &dyn Store, files: &BTreeSet<String>) {
    let (listed, stored) = pages_and_store(store).await;
    assert_eq!(&stored, files);
    assert_eq!(listed, stored, "the pages list exactly the store's files");
    let report = quarry_index::check(store, &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default())
        .await
        .unwrap();
    assert!(report.is_clean() && report.files == files.len(), "{report}");
    let e = &wheels()[4];
    assert!(exists(store, &format!("{ROOT}simple/recon-e/index.html")).await);
    assert!(exists(store, &format!("{ROOT}{}.metadata", e.filename())).await);
    let (_, listing) = store.get_bytes(&Key::new(format!("{RUN}index.html")).unwrap(), 1 << 20).await.unwrap();
    let listing = String::from_utf8_lossy(&listing);
    assert!(listing.contains("blas_lib_gfx942.tar.zst") && listing.contains("lapack_lib_gfx942.tar.zst"), "{listing}");
}

async fn pip_installs(find_links: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("site");
    let out = pip_install(&["--no-index", "--find-links", find_links, "recon-c", "recon-e"], &target).await;
    assert_success(&out, "pip install through the reconciled pages");
    assert_eq!(installed(&target), ["recon_c-1.0.dist-info", "recon_e-1.0.dist-info"]);
    let gone = pip_install(&["--no-index", "--find-links", find_links, "recon-b"], &tmp.path().join("b")).await;
    assert!(!gone.status.success(), "the deleted wheel is no longer offered");
}

async fn quarry_index(args: &[&str]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.arg("index").args(args).env_remove("QUARRY_CONFIG");
    run(cmd, Duration::from_secs(120)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn quarry_index_full_repairs_a_local_root_the_default_leaves_broken() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    std::fs::create_dir_all(&dir).unwrap();
    let store = quarry_store::open(dir.to_str().unwrap()).await.unwrap();
    let mut files = disagree(&store).await;
    let dir_arg = dir.to_str().unwrap();
    let f = WheelSpec::new("recon-f", "1.0");
    put(store.as_ref(), &format!("{ROOT}{}", f.filename()), f.build()).await;
    files.insert(f.filename());

    // The default reconciles states with listings, but trusts its records of the pages.
    assert_success(&quarry_index(&[dir_arg]).await, "quarry index");
    // f's state names another sha256 than the file's (parseable, so nothing rebuilds it).
    let f_state = format!("{ROOT}.quarry-index/recon-f.json");
    let real = quarry_tests::sha256_hex(&f.build());
    let wrong = "0".repeat(64);
    let text = serde_json::to_string(&json(store.as_ref(), &f_state).await).unwrap().replace(&real, &wrong);
    put(store.as_ref(), &f_state, text.into_bytes()).await;
    let check = quarry_index(&[dir_arg, "--check"]).await;
    assert!(!check.status.success(), "e's page and sidecar are still missing after a plain reindex");
    assert!(String::from_utf8_lossy(&check.stdout).contains("recon-e"), "{}", String::from_utf8_lossy(&check.stdout));
    // A listing page deleted now stays deleted too: its cache says it is current.
    delete(store.as_ref(), &format!("{RUN}index.html")).await;
    assert_success(&quarry_index(&[dir_arg]).await, "quarry index");
    assert!(!exists(store.as_ref(), &format!("{RUN}index.html")).await);

    let out = quarry_index(&[dir_arg, "--full"]).await;
    assert_success(&out, "quarry index --full");
    let text = String::from_utf8_lossy(&out.stdout);
    let f_hash = format!("repaired: {ROOT}{}: the state says sha256 {wrong}", f.filename());
    for repaired in
        ["repaired: 4242-linux/index.html is missing", "repaired: simple/recon-e/index.html is missing", &f_hash]
    {
        assert!(text.contains(repaired), "{text}");
    }
    assert_repaired(store.as_ref(), &files).await;
    let page = json(store.as_ref(), &format!("{ROOT}simple/recon-f/index.json")).await;
    assert_eq!(page["files"][0]["hashes"]["sha256"], real, "f's page has the file's real hash again");
    assert_success(&quarry_index(&[dir_arg, "--check"]).await, "quarry index --check after --full");
    // Again: nothing left to repair.
    let again = quarry_index(&[dir_arg, "--full"]).await;
    assert_success(&again, "quarry index --full, again");
    assert!(
        !String::from_utf8_lossy(&again.stdout).contains("repaired:"),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );
    pip_installs(dir.join(ROOT).join("index.html").to_str().unwrap()).await;
}

#[tokio::test]
async fn full_refuses_key_and_check_with_a_clear_error() {
    for other in [["--key", "4242-linux/python/a-1.0-py3-none-any.whl"].as_slice(), ["--check"].as_slice()] {
        let tmp = tempfile::tempdir().unwrap();
        let mut args = vec![tmp.path().to_str().unwrap(), "--full"];
        args.extend_from_slice(other);
        let out = quarry_index(&args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?} is a usage error");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("'--full' cannot be used with") && stderr.contains(other[0]), "{stderr}");
    }
    let help = quarry_index(&["--help"]).await;
    assert!(String::from_utf8_lossy(&help.stdout).contains("--full"), "documented in --help");
}

const BUCKET: &str = "therock-ci-artifacts";

struct Bucket(Arc<dyn Store>);

impl Stores for Bucket {
    fn for_bucket(&self, bucket: &str) -> Arc<dyn Store> {
        assert_eq!(bucket, BUCKET, "the scheduled tick reconciles the configured bucket");
        self.0.clone()
    }
}

fn scheduled_event() -> Value {
    let path = quarry_tests::workspace_root().join("lambda-indexer/tests/events/scheduled.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scheduled_event_reconciles_an_s3_bucket_and_pip_installs() {
    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    create_public_bucket(&client, BUCKET).await;
    let store: Arc<dyn Store> =
        Arc::new(S3Store::from_client(client, BUCKET, "").with_conditional_writes(ConditionalWrites::Verify));
    let files = disagree(&store).await;
    // An older run, never indexed: outside the window of one recent run, left alone.
    let old = WheelSpec::new("recon-old", "1.0");
    put(store.as_ref(), &format!("4000-linux/python/{}", old.filename()), old.build()).await;

    let reconcile = Reconcile { bucket: BUCKET.into(), recent_runs: 1 };
    let handler = Handler::new(Bucket(store.clone())).with_reconcile(Some(reconcile));
    let answer = handler.handle(scheduled_event()).await.expect("the scheduled event is handled");
    assert_eq!(
        answer["reindexed"],
        serde_json::json!([format!("{BUCKET}/{RUN}index.html"), format!("{BUCKET}/{ROOT}")]),
        "{answer}"
    );
    let repaired = answer["repaired"].as_object().expect("what was repaired is reported");
    assert!(
        repaired.contains_key(&format!("{BUCKET}/{ROOT}"))
            && repaired.contains_key(&format!("{BUCKET}/{RUN}index.html"))
    );
    assert!(answer.get("resume_at").is_none(), "{answer}");
    assert_repaired(store.as_ref(), &files).await;
    assert!(!exists(store.as_ref(), "4000-linux/python/.quarry-index.json").await, "older runs are not reconciled");
    assert!(!exists(store.as_ref(), quarry_index::reconcile::CURSOR_KEY).await, "a finished pass leaves no cursor");

    pip_installs(&format!("{}/{BUCKET}/{ROOT}index.html", server.endpoint)).await;
    // The next tick finds nothing to repair.
    let again = handler.handle(scheduled_event()).await.unwrap();
    assert!(again.get("repaired").is_none(), "{again}");
    server.stop().await;
}

/// Where `scripts/lambda-build` (run by `scripts/test`) leaves the function.
/// The deployed `bootstrap` under the `cargo lambda watch` runtime emulator, configured as the
/// template configures it (`QUARRY_BUCKET`, `QUARRY_RECONCILE_RUNS`), invoked with the
/// scheduled event: a wheel that landed without an event is indexed.
#[tokio::test(flavor = "multi_thread")]
async fn the_built_bootstrap_reconciles_on_the_scheduled_event() {
    use quarry_tests::s3::LambdaEmulator;
    use std::process::Stdio;
    let bootstrap = quarry_tests::s3::lambda_bootstrap();
    let server = S3Server::start_s3s_fs().await;
    let client = s3_client(&server);
    client.create_bucket().bucket("ci-artifacts").send().await.expect("create bucket");
    let store: Arc<dyn Store> =
        Arc::new(S3Store::from_client(client, "ci-artifacts", "").with_conditional_writes(ConditionalWrites::Verify));
    let spec = WheelSpec::new("recon-quiet", "1.0");
    put(store.as_ref(), &format!("{ROOT}{}", spec.filename()), spec.build()).await;

    let emulator = LambdaEmulator::start().await;
    let mut function = emulator
        .function(&bootstrap, &server)
        .env("QUARRY_BUCKET", "ci-artifacts")
        .env("QUARRY_RECONCILE_RUNS", "5")
        .stderr(Stdio::null())
        .spawn()
        .expect("start bootstrap");
    let (status, answer) = emulator.invoke(&scheduled_event()).await;
    assert!(status.is_success(), "{status}: {answer}");
    assert_eq!(answer["reindexed"], serde_json::json!([format!("ci-artifacts/{ROOT}")]), "{answer}");
    let report =
        quarry_index::check(store.as_ref(), &RepoRoot::new(ROOT, &Default::default()).unwrap(), &Default::default())
            .await
            .unwrap();
    assert!(report.is_clean() && report.files == 1, "{report}");
    function.kill().await.ok();
    emulator.stop().await;
    server.stop().await;
}
