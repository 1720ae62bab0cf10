//! Readers never see a broken index. While writers change a store, a reader fetches every page
//! as clients do and follows every link (`quarry_tests::reader`): the pip find-links page, the
//! simple index and project pages in HTML and JSON and their `.metadata`, apt's
//! `InRelease`/`Release` → `by-hash/` indices → pool files, dnf's `repomd.xml` → repodata →
//! packages, the run listing → its rows. No page may name a file that answers 404 or whose
//! bytes are not the hash the page gives.
//!
//! - 8 writers upload 200 wheels, `.deb`s and `.rpm`s into one run through `quarry serve` (the
//!   binary; it reindexes before answering) while logs land beside them, and a real
//!   `pip install` runs mid-burst;
//! - 8 writers put 88 files into a bucket on moto, notifications through SQS to the Lambda
//!   handler (real event JSON, up to 8 invocations at once), `pip install` mid-burst;
//! - the reader during `quarry promote` (three runs into a channel), `quarry prune` (four
//!   passes, down to one version per package; and once on moto while the Lambda handles the
//!   deletions' notifications) and `quarry gc` (five runs deleted one by one);
//! - the audit (`quarry index --check`) names each removed object: a wheel, its `.metadata`, a
//!   project's JSON page, an apt `by-hash/` index, a dnf repodata document.
#![allow(clippy::print_stderr)] // the reader's figures for the test log

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use quarry_index::{Indexer, ListingDir, RepoRoot, Scope};
use quarry_lambda_indexer::{Handler, Stores};
use quarry_store::{ConditionalWrites, Key, LocalStore, PutOptions, S3Store, Store, StoreExt};
use quarry_tests::reader::{Mode, Reader, Site, Tally};
use quarry_tests::s3::{S3Server, SqsMessage, SqsQueue, create_public_bucket, notify_queue, s3_client};
use quarry_tests::{
    ServedBinary, WheelSpec, assert_success, built, installed, pip_install, plant, quarry_bin, run, sha256_hex,
};

const WRITERS: usize = 8;

/// One object a writer puts: its key and bytes.
#[derive(Clone)]
struct Upload {
    key: String,
    body: Vec<u8>,
}

fn pip_root(run: &str) -> String {
    format!("{run}python/")
}
fn apt_root(run: &str) -> String {
    format!("{run}packages/deb/")
}
fn dnf_root(run: &str) -> String {
    format!("{run}packages/rpm/x86_64/")
}

/// Every root and listing of `runs`.
fn site(runs: &[&str]) -> Site {
    Site {
        pip: runs.iter().map(|r| pip_root(r)).collect(),
        apt: runs.iter().map(|r| apt_root(r)).collect(),
        dnf: runs.iter().map(|r| dnf_root(r)).collect(),
        listings: runs.iter().flat_map(|r| [(*r).to_owned(), format!("{r}logs/")]).collect(),
    }
}

/// `wheels` wheels over 12 projects (several versions each), `natives` `.deb`s and as many
/// `.rpm`s over 8 packages each, interleaved so every writer gets each kind.
fn burst(dir: &Path, run: &str, wheels: usize, natives: usize) -> Vec<Upload> {
    let wheel = |i: usize| {
        let spec = WheelSpec::new(&format!("burst-{}", i % 12), &format!("1.{i}"));
        Upload { key: format!("{}{}", pip_root(run), spec.filename()), body: spec.build() }
    };
    let native = |i: usize, deb: bool| {
        let (name, version) = (format!("burst-{}", i % 8), format!("1.{i}"));
        let path = if deb { built::deb(dir, &name, &format!("{version}-1")) } else { built::rpm(dir, &name, &version) };
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        let key = if deb { format!("{}pool/main/{file}", apt_root(run)) } else { format!("{}{file}", dnf_root(run)) };
        Upload { key, body: std::fs::read(&path).unwrap() }
    };
    let mut out = Vec::new();
    let (mut w, mut n) = (0, 0);
    while w < wheels || n < natives {
        for _ in 0..(wheels / natives.max(1)).max(1) {
            if w < wheels {
                out.push(wheel(w));
                w += 1;
            }
        }
        if n < natives {
            out.push(native(n, true));
            out.push(native(n, false));
            n += 1;
        }
    }
    out
}

/// `files` dealt round-robin to the writers.
fn deal(files: Vec<Upload>) -> Vec<Vec<Upload>> {
    let mut hands: Vec<Vec<Upload>> = (0..WRITERS).map(|_| Vec::new()).collect();
    for (i, f) in files.into_iter().enumerate() {
        hands[i % WRITERS].push(f);
    }
    hands
}

/// A log under the run's `logs/`: a row in a listing that changes during the burst.
fn log(run: &str, n: usize) -> Upload {
    Upload { key: format!("{run}logs/stage-{n:03}.log"), body: format!("log {n}\n").into_bytes() }
}

/// Wait (bounded) until `count` reaches `at`.
async fn reached(count: &AtomicUsize, at: usize) {
    let started = Instant::now();
    while count.load(Ordering::Acquire) < at {
        assert!(started.elapsed() < Duration::from_secs(300), "the writers stalled at {count:?} of {at}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn assert_sound(what: &str, tally: &Tally, started: Instant) {
    eprintln!("{what}: {tally} in {:.1} s", started.elapsed().as_secs_f64());
    assert!(tally.violations.is_empty(), "{what}: readers saw a broken index: {tally}");
    assert!(tally.sweeps >= 2, "{what}: the reader swept only {} times", tally.sweeps);
}

async fn quarry(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args)
        .env_remove("QUARRY_GRACE_SECONDS")
        .env_remove("QUARRY_SIGNING_KEY")
        .env_remove("QUARRY_SIGNING_KEY_FILE")
        .env_remove("QUARRY_CONFIG")
        .env("RUST_LOG", "warn");
    run(cmd, Duration::from_secs(300)).await
}

/// `quarry index --check` over the whole store: exit 0, nothing to report.
async fn assert_audit_clean(store: &Path) {
    let out = quarry(&["index", &store.display().to_string(), "--check"]).await;
    assert_success(&out, "quarry index --check");
}

/// `quarry serve` (the binary) over a store directory, with its upload token.
struct Served {
    binary: ServedBinary,
    url: String,
    token: String,
    client: reqwest::Client,
}

impl Served {
    async fn start(store: &Path, work: &Path) -> Self {
        let token_file = work.join("serve-token");
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["serve", "--addr", "127.0.0.1:0", "--store"])
            .arg(store)
            .arg("--token-file")
            .arg(&token_file)
            .env_remove("QUARRY_TOKEN")
            .env_remove("QUARRY_CONFIG")
            .env_remove("QUARRY_PRIVATE")
            .env_remove("QUARRY_GRACE_SECONDS")
            .env_remove("QUARRY_SIGNING_KEY")
            .env_remove("QUARRY_SIGNING_KEY_FILE")
            .env("RUST_LOG", "warn")
            .stderr(std::process::Stdio::null());
        let binary = ServedBinary::start(cmd).await;
        let token = std::fs::read_to_string(&token_file).expect("quarry serve wrote its token file").trim().to_owned();
        let client = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap();
        Self { url: binary.url.clone(), binary, token, client }
    }

    /// PUT `body` at `key`, asserting 201 Created (the server reindexed before answering).
    async fn upload(&self, key: &str, body: Vec<u8>) {
        let response =
            self.client.put(format!("{}{key}", self.url)).bearer_auth(&self.token).body(body).send().await.unwrap();
        let status = response.status();
        assert_eq!(status, 201, "upload of {key}: {}", response.text().await.unwrap_or_default());
    }

    async fn get_text(&self, path: &str) -> String {
        let response = self.client.get(format!("{}{path}", self.url)).send().await.unwrap();
        assert_eq!(response.status(), 200, "GET {path}");
        response.text().await.unwrap()
    }

    async fn stop(mut self) {
        self.binary.child.kill().await.ok();
    }
}

// ---- uploads ----

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_through_quarry_serve_never_show_a_broken_index() {
    const RUN: &str = "3200-linux/";
    let tmp = tempfile::tempdir().unwrap();
    let files = burst(tmp.path(), RUN, 120, 40);
    let total = files.len();
    let store_dir = tmp.path().join("store");
    let server = Served::start(&store_dir, tmp.path()).await;
    // The run's listing: CI drops logs straight into the store and indexes their listing scopes
    // (`quarry index --key`), while the uploads go through the server.
    let store: Arc<dyn Store> = Arc::new(LocalStore::open(&store_dir).unwrap());
    let indexer = Indexer::new(store.clone(), Default::default());
    let drop_log = |n: usize| {
        let (store, indexer) = (store.clone(), indexer.clone());
        async move {
            let Upload { key, body } = log(RUN, n);
            let key = Key::new(key).unwrap();
            store.put_bytes(&key, body.into(), PutOptions::default()).await.unwrap();
            for scope in Scope::affected_by(&key, &Default::default()) {
                indexer.refresh(&scope).await.unwrap();
            }
        }
    };
    drop_log(0).await;

    let reader = Reader::new(&server.url, Mode::Growing);
    let site = site(&[RUN]);
    let (stop, done) = (AtomicBool::new(false), AtomicUsize::new(0));
    let started = Instant::now();
    let writers = async {
        let hands = deal(files).into_iter().enumerate().map(|(w, hand)| {
            let (server, done, drop_log) = (&server, &done, &drop_log);
            async move {
                for (i, Upload { key, body }) in hand.into_iter().enumerate() {
                    server.upload(&key, body).await;
                    done.fetch_add(1, Ordering::AcqRel);
                    if w == 0 && i % 5 == 4 {
                        drop_log(i).await;
                    }
                }
            }
        });
        futures_util::future::join_all(hands).await;
        stop.store(true, Ordering::Release);
    };
    // pip mid-burst, from the find-links page and from the simple index.
    let pip = async {
        reached(&done, total / 3).await;
        let find_links = format!("{}{}index.html", server.url, pip_root(RUN));
        let index_url = format!("{}{}simple/", server.url, pip_root(RUN));
        let a = tmp.path().join("find-links");
        let b = tmp.path().join("index-url");
        let from_page = pip_install(&["--no-index", "--find-links", &find_links, "burst-3"], &a).await;
        let from_index = pip_install(&["--index-url", &index_url, "burst-5"], &b).await;
        (from_page, installed(&a), from_index, installed(&b))
    };
    let ((), tally, (from_page, a, from_index, b)) = tokio::join!(writers, reader.watch(&site, &stop), pip);
    assert_success(&from_page, "pip install --find-links mid-burst");
    assert_success(&from_index, "pip install --index-url mid-burst");
    assert!(a.iter().any(|d| d.starts_with("burst_3-")) && b.iter().any(|d| d.starts_with("burst_5-")), "{a:?} {b:?}");
    assert_sound("uploads through quarry serve", &tally, started);
    // The last sweep ran after the burst: every file was found through the pages (each wheel
    // and its .metadata, each .deb and .rpm).
    assert!(tally.files_seen >= 120 * 2 + 40 * 2, "{tally}");
    assert_audit_clean(&store_dir).await;
    for dir in [RUN.to_owned(), format!("{RUN}logs/")] {
        let report = quarry_index::check_listing(store.as_ref(), &ListingDir::new(&dir, &Default::default()).unwrap())
            .await
            .unwrap();
        assert!(report.is_clean() && report.files > 0, "{report}");
    }
    server.stop().await;
}

const BUCKET: &str = "therock-ci-artifacts";

struct Bucket(Arc<dyn Store>);

impl Stores for Bucket {
    fn for_bucket(&self, bucket: &str) -> Arc<dyn Store> {
        assert_eq!(bucket, BUCKET);
        self.0.clone()
    }
}

/// The keys (decoded) of every S3 record in an SQS message body.
fn record_keys(body: &str) -> Vec<String> {
    let value: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    let records = value["Records"].as_array().map(Vec::as_slice).unwrap_or_default();
    records.iter().filter_map(|r| r["s3"]["object"]["key"].as_str()).map(quarry_lambda_indexer::decode_key).collect()
}

/// Invocations of the handler at once, at most.
const HANDLERS: usize = 8;

/// The Lambda service: invoke `handler` with each batch of `queue`'s messages as it arrives,
/// up to [`HANDLERS`] at once, until events about `want` distinct keys under `prefix` came;
/// then wait for every invocation (none may report a failed message) and delete the messages.
async fn lambda_service(queue: &SqsQueue, handler: &Arc<Handler<Bucket>>, prefix: &str, want: usize) {
    let slots = Arc::new(tokio::sync::Semaphore::new(HANDLERS));
    let mut running = tokio::task::JoinSet::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut messages: Vec<SqsMessage> = Vec::new();
    for _ in 0..600 {
        if seen.len() >= want {
            break;
        }
        let batch = queue.receive(1).await;
        if batch.is_empty() {
            continue;
        }
        for m in &batch {
            seen.extend(record_keys(&m.body).into_iter().filter(|k| k.starts_with(prefix)));
        }
        let (handler, event, slots) = (handler.clone(), queue.lambda_event(&batch), slots.clone());
        running.spawn(async move {
            let _slot = slots.acquire_owned().await.unwrap();
            handler.handle(event).await.unwrap()
        });
        messages.extend(batch);
    }
    assert_eq!(seen.len(), want, "notifications missing under {prefix}");
    while let Some(answer) = running.join_next().await {
        let answer = answer.unwrap();
        assert_eq!(answer["batchItemFailures"], serde_json::json!([]), "{answer}");
    }
    for m in &messages {
        queue.delete(m).await;
    }
}

/// moto with a public bucket whose package uploads and logs notify an SQS queue, and the
/// Lambda handler over the bucket (moto checks preconditions, not atomically: the handler
/// reads every commit back).
async fn moto_bucket() -> (S3Server, SqsQueue, Arc<dyn Store>, Arc<Handler<Bucket>>) {
    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    create_public_bucket(&client, BUCKET).await;
    let queue = SqsQueue::create(&server, "quarry-consistency").await;
    notify_queue(&client, BUCKET, &queue, &[".whl", ".deb", ".rpm", ".log"]).await;
    // moto announces the configuration with an s3:TestEvent.
    let _ = queue.receive(0).await;
    let store: Arc<dyn Store> =
        Arc::new(S3Store::from_client(client, BUCKET, "").with_conditional_writes(ConditionalWrites::Verify));
    let handler = Arc::new(Handler::new(Bucket(store.clone())));
    (server, queue, store, handler)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_to_s3_indexed_by_the_lambda_never_show_a_broken_index() {
    const RUN: &str = "3300-linux/";
    let (server, queue, store, handler) = moto_bucket().await;
    let tmp = tempfile::tempdir().unwrap();
    let mut files = burst(tmp.path(), RUN, 48, 16);
    files.extend((0..8).map(|n| log(RUN, n)));
    let total = files.len();

    let reader = Reader::new(&format!("{}/{BUCKET}/", server.endpoint), Mode::Growing);
    let site = site(&[RUN]);
    let (stop, done) = (AtomicBool::new(false), AtomicUsize::new(0));
    let started = Instant::now();
    let writers = async {
        let hands = deal(files).into_iter().map(|hand| {
            let (store, done) = (store.clone(), &done);
            async move {
                for Upload { key, body } in hand {
                    store.put_bytes(&Key::new(key).unwrap(), body.into(), PutOptions::default()).await.unwrap();
                    done.fetch_add(1, Ordering::AcqRel);
                }
            }
        });
        futures_util::future::join_all(hands).await;
    };
    let lambda = async {
        lambda_service(&queue, &handler, RUN, total).await;
        stop.store(true, Ordering::Release);
    };
    let pip = async {
        reached(&done, total / 2).await;
        let find_links = format!("{}/{BUCKET}/{}index.html", server.endpoint, pip_root(RUN));
        let target = tmp.path().join("site");
        // The find-links page may not exist yet: pip then finds nothing, which is no broken
        // index; a page naming a file that is not there would fail the download.
        let out = pip_install(&["--no-index", "--find-links", &find_links, "burst-3"], &target).await;
        (out, installed(&target))
    };
    let ((), (), tally, (out, installed)) = tokio::join!(writers, lambda, reader.watch(&site, &stop), pip);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() || text.contains("No matching distribution found for burst-3"),
        "pip install mid-burst failed for another reason than an index without the project yet:\n{text}"
    );
    assert!(!out.status.success() || installed.iter().any(|d| d.starts_with("burst_3-")), "{installed:?}");
    assert_sound("uploads to S3 indexed by the Lambda", &tally, started);
    assert!(tally.files_seen >= 48 * 2 + 16 * 2, "{tally}");
    for root in [pip_root(RUN), apt_root(RUN), dnf_root(RUN)] {
        let report = quarry_index::check(
            store.as_ref(),
            &RepoRoot::new(&root, &Default::default()).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        assert!(report.is_clean(), "{report}");
    }
    for dir in [RUN.to_owned(), format!("{RUN}logs/")] {
        let report = quarry_index::check_listing(store.as_ref(), &ListingDir::new(&dir, &Default::default()).unwrap())
            .await
            .unwrap();
        assert!(report.is_clean(), "{report}");
    }
    server.stop().await;
}

// ---- promote, prune, gc ----

/// Plant a run holding `wheels` (name, version), one `.deb` and one `.rpm` per (name, version)
/// of `natives`, an archive with its `.sha256sum`, a log and the run's manifest.
fn plant_run(store: &Path, work: &Path, run: &str, wheels: &[WheelSpec], natives: &[(String, String)]) {
    for w in wheels {
        plant(store, &format!("{}{}", pip_root(run), w.filename()), &w.build());
    }
    for (name, version) in natives {
        let deb = built::deb(work, name, &format!("{version}-1"));
        let file = deb.file_name().unwrap().to_str().unwrap();
        plant(store, &format!("{}pool/main/{file}", apt_root(run)), &std::fs::read(&deb).unwrap());
        let rpm = built::rpm(work, name, version);
        let file = rpm.file_name().unwrap().to_str().unwrap();
        plant(store, &format!("{}{file}", dnf_root(run)), &std::fs::read(&rpm).unwrap());
    }
    let archive = format!("archive of {run}").into_bytes();
    plant(store, &format!("{run}blas_lib_gfx942.tar.zst"), &archive);
    let sum = format!("{}  blas_lib_gfx942.tar.zst\n", sha256_hex(&archive));
    plant(store, &format!("{run}blas_lib_gfx942.tar.zst.sha256sum"), sum.as_bytes());
    plant(store, &format!("{run}logs/build.log"), b"built\n");
    let (id, platform) = run.trim_end_matches('/').split_once('-').unwrap();
    let manifest = format!(
        r#"{{"run_id":"{id}","platform":"{platform}","commit":"0123456789abcdef0123456789abcdef0123456{}","created":"2026-11-24T00:00:00Z"}}"#,
        id.len() % 10
    );
    plant(store, &format!("{run}.run-manifest.json"), manifest.as_bytes());
}

/// Run `work` while the reader sweeps `site` over `server`; the reader's tally.
async fn read_during<F: std::future::Future<Output = ()>>(server: &Served, site: &Site, mode: Mode, work: F) -> Tally {
    let reader = Reader::new(&server.url, mode);
    let stop = AtomicBool::new(false);
    let work = async {
        work.await;
        stop.store(true, Ordering::Release);
    };
    let ((), tally) = tokio::join!(work, reader.watch(site, &stop));
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn promotion_never_shows_a_broken_channel() {
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_path_buf();
    let runs = ["6000-linux/", "6001-linux/", "6002-linux/"];
    for (k, run) in runs.iter().enumerate() {
        let version = format!("7.0.{k}");
        let mut wheels = vec![
            WheelSpec::new("rocm-sdk-core", &version),
            WheelSpec::new("rocm-sdk-libraries-gfx94X-dcgpu", &version).requires(&format!("rocm-sdk-core=={version}")),
        ];
        wheels.extend((0..10).map(|j| WheelSpec::new(&format!("promoted-{j}"), &version)));
        let natives: Vec<(String, String)> = (0..6).map(|j| (format!("promoted-{j}"), version.clone())).collect();
        plant_run(&store, work.path(), run, &wheels, &natives);
    }
    let s = store.display().to_string();
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    let server = Served::start(&store, work.path()).await;
    let channel = Site {
        pip: vec!["nightly/python/gfx94X-dcgpu/".into()],
        apt: vec!["nightly/packages/deb/".into()],
        dnf: vec!["nightly/packages/rpm/x86_64/".into()],
        listings: Vec::new(),
    };
    let started = Instant::now();
    let tally = read_during(&server, &channel, Mode::Growing, async {
        for run in runs {
            let out = quarry(&[
                "promote",
                "--from",
                run.trim_end_matches('/'),
                "--to",
                "nightly",
                "--families",
                "gfx94X-dcgpu",
                "--store",
                &s,
            ])
            .await;
            assert_success(&out, &format!("quarry promote --from {run}"));
        }
    })
    .await;
    assert_sound("quarry promote", &tally, started);
    // Three runs of 12 wheels (and their .metadata), 6 .debs and 6 .rpms each.
    assert!(tally.files_seen >= 3 * (12 * 2 + 6 * 2), "{tally}");
    assert_audit_clean(&store).await;
    server.stop().await;
}

/// `versions` versions (`2.{v}`) of `projects` wheels `kept-{p}` and of `natives` `.deb`s and
/// `.rpm`s, for `run`'s roots: what the pruning tests upload, then prune.
fn versions_to_prune(dir: &Path, run: &str, versions: usize, projects: usize, natives: usize) -> Vec<Upload> {
    let mut files = Vec::new();
    for v in 0..versions {
        for p in 0..projects {
            let spec = WheelSpec::new(&format!("kept-{p}"), &format!("2.{v}"));
            files.push(Upload { key: format!("{}{}", pip_root(run), spec.filename()), body: spec.build() });
        }
        for p in 0..natives {
            let (name, version) = (format!("kept-{p}"), format!("2.{v}"));
            let deb = built::deb(dir, &name, &format!("{version}-1"));
            let rpm = built::rpm(dir, &name, &version);
            for (path, prefix) in [(deb, format!("{}pool/main/", apt_root(run))), (rpm, dnf_root(run))] {
                let file = path.file_name().unwrap().to_str().unwrap().to_owned();
                files.push(Upload { key: format!("{prefix}{file}"), body: std::fs::read(&path).unwrap() });
            }
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pruning_never_shows_a_broken_index() {
    const RUN: &str = "3400-linux/";
    let tmp = tempfile::tempdir().unwrap();
    let store_dir = tmp.path().join("store");
    let server = Served::start(&store_dir, tmp.path()).await;
    // 8 projects × 5 versions of wheels, 4 packages × 5 versions of .debs and .rpms, uploaded
    // by the writers.
    let files = versions_to_prune(tmp.path(), RUN, 5, 8, 4);
    let uploads = deal(files).into_iter().map(|hand| {
        let server = &server;
        async move {
            for Upload { key, body } in hand {
                server.upload(&key, body).await;
            }
        }
    });
    futures_util::future::join_all(uploads).await;
    let s = store_dir.display().to_string();
    let started = Instant::now();
    let tally = read_during(&server, &site(&[RUN]), Mode::Shrinking, async {
        for keep in ["4", "3", "2", "1"] {
            for (root, kind) in [(pip_root(RUN), "pip"), (apt_root(RUN), "apt"), (dnf_root(RUN), "dnf")] {
                let out =
                    quarry(&["prune", "--store", &s, "--root", &root, "--kind", kind, "--keep-versions", keep]).await;
                assert_success(&out, &format!("quarry prune {root} --keep-versions {keep}"));
            }
        }
    })
    .await;
    assert_sound("quarry prune", &tally, started);
    assert_audit_clean(&store_dir).await;
    // One version of each package is left, on every page.
    let page = server.get_text(&format!("{}index.html", pip_root(RUN))).await;
    assert_eq!(page.matches(".whl#sha256=").count(), 8, "{page}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pruning_a_bucket_the_lambda_indexes_never_shows_a_broken_index() {
    const RUN: &str = "3700-linux/";
    let (server, queue, store, handler) = moto_bucket().await;
    let tmp = tempfile::tempdir().unwrap();
    // 6 projects × 3 versions of wheels, 3 packages × 3 versions of .debs and .rpms.
    let files = versions_to_prune(tmp.path(), RUN, 3, 6, 3);
    let total = files.len();
    for Upload { key, body } in files {
        store.put_bytes(&Key::new(key).unwrap(), body.into(), PutOptions::default()).await.unwrap();
    }
    lambda_service(&queue, &handler, RUN, total).await;
    let reader = Reader::new(&format!("{}/{BUCKET}/", server.endpoint), Mode::Shrinking);
    let env = server.client_env();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    // `quarry prune` against the bucket while the Lambda handles its deletions' notifications:
    // two versions of each of 12 packages go.
    let work = async {
        let prune = async {
            for (root, kind) in [(pip_root(RUN), "pip"), (apt_root(RUN), "apt"), (dnf_root(RUN), "dnf")] {
                let mut cmd = tokio::process::Command::new(quarry_bin());
                cmd.args(["prune", "--store", &format!("s3://{BUCKET}/"), "--root", &root, "--kind", kind])
                    .args(["--keep-versions", "1"])
                    .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .env_remove("QUARRY_GRACE_SECONDS")
                    .env_remove("QUARRY_SIGNING_KEY")
                    .env_remove("QUARRY_SIGNING_KEY_FILE")
                    .env_remove("QUARRY_CONFIG");
                assert_success(&run(cmd, Duration::from_secs(300)).await, &format!("quarry prune {root} on S3"));
            }
        };
        tokio::join!(prune, lambda_service(&queue, &handler, RUN, 2 * 12));
        stop.store(true, Ordering::Release);
    };
    let site = site(&[RUN]);
    let ((), tally) = tokio::join!(work, reader.watch(&site, &stop));
    assert_sound("quarry prune of a bucket the Lambda indexes", &tally, started);
    for root in [pip_root(RUN), apt_root(RUN), dnf_root(RUN)] {
        let report = quarry_index::check(
            store.as_ref(),
            &RepoRoot::new(&root, &Default::default()).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        assert!(report.is_clean() && report.files == if root.contains("python") { 6 } else { 3 }, "{report}");
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn collecting_runs_never_shows_a_broken_index() {
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_path_buf();
    let runs = ["7000-linux/", "7001-linux/", "7002-linux/", "7003-linux/", "7004-linux/", "7005-linux/"];
    for (k, run) in runs.iter().enumerate() {
        let wheels: Vec<WheelSpec> = (0..12).map(|j| WheelSpec::new(&format!("run-{j}"), &format!("1.{k}"))).collect();
        let natives: Vec<(String, String)> = (0..4).map(|j| (format!("run-{j}"), format!("1.{k}"))).collect();
        plant_run(&store, work.path(), run, &wheels, &natives);
        // Each run newer than the last: gc keeps the newest.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let s = store.display().to_string();
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    let server = Served::start(&store, work.path()).await;
    let started = Instant::now();
    let tally = read_during(&server, &site(&runs), Mode::Shrinking, async {
        for keep in ["5", "4", "3", "2", "1"] {
            let out = quarry(&["gc", "--store", &s, "--keep-last", keep]).await;
            assert_success(&out, &format!("quarry gc --keep-last {keep}"));
        }
    })
    .await;
    assert_sound("quarry gc", &tally, started);
    for run in &runs[..5] {
        assert!(!store.join(run).exists(), "{run} is still there");
    }
    assert_audit_clean(&store).await;
    server.stop().await;
}

// ---- the audit ----

#[tokio::test(flavor = "multi_thread")]
async fn the_audit_names_each_removed_object_and_exits_non_zero() {
    const RUN: &str = "3500-linux/";
    let work = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path();
    let wheels = [WheelSpec::new("audited", "1.0"), WheelSpec::new("audited", "2.0")];
    let natives = [("audited".to_owned(), "1.0".to_owned()), ("audited".to_owned(), "2.0".to_owned())];
    plant_run(store, work.path(), RUN, &wheels, &natives);
    let s = store.display().to_string();
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    assert_audit_clean(store).await;

    let one = |dir: &str, part: &str| {
        let found: Vec<String> = std::fs::read_dir(store.join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(part))
            .collect();
        let first = found.iter().min().unwrap_or_else(|| panic!("no {part:?} in {dir}"));
        format!("{dir}{first}")
    };
    let wheel = format!("{}{}", pip_root(RUN), wheels[0].filename());
    let cases = [
        wheel.clone(),
        format!("{wheel}.metadata"),
        format!("{}simple/audited/index.json", pip_root(RUN)),
        // The by-hash directory holds Packages, .gz and .xz: one of them.
        one(&format!("{}dists/stable/main/binary-amd64/by-hash/SHA256/", apt_root(RUN)), ""),
        one(&format!("{}repodata/", dnf_root(RUN)), "-primary.xml.gz"),
    ];
    for key in cases {
        let aside = work.path().join("aside");
        std::fs::rename(store.join(&key), &aside).unwrap();
        let out = quarry(&["index", &s, "--check"]).await;
        std::fs::rename(&aside, store.join(&key)).unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(1), "{key} removed: quarry index --check exited {}\n{text}", out.status);
        let name = key.rsplit('/').next().unwrap();
        let named = text.lines().any(|l| l.contains("missing") && l.contains(name));
        assert!(named, "{key} removed: the audit does not name it:\n{text}");
    }
    assert_audit_clean(store).await;
}

/// `quarry upload --to TO WAIT FILES…` with `server`'s credentials, info logs on stderr.
async fn upload_to_bucket(server: &S3Server, to: &str, wait: &str, files: &[String]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["upload", "--to", to, wait]).args(files).env("RUST_LOG", "info");
    cmd.envs(server.client_env());
    run(cmd, Duration::from_secs(300)).await
}

/// `quarry upload --wait` into a bucket the Lambda indexes (moto, S3 → SQS, the handler):
/// the command returns only once the simple and find-links pages list both wheels with their
/// sha256, however long the notifications take; without a Lambda it fails after its timeout,
/// naming each wheel and the page that does not list it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upload_with_wait_returns_once_the_lambda_indexed_it() {
    const RUN: &str = "3400-linux/";
    let (server, queue, store, handler) = moto_bucket().await;
    let tmp = tempfile::tempdir().unwrap();
    let wheels: Vec<String> = ["1.0", "1.1"]
        .iter()
        .map(|v| WheelSpec::new("waited-for", v).write_to(tmp.path()).display().to_string())
        .collect();
    let to = format!("s3://{BUCKET}/{RUN}python/");
    let upload = upload_to_bucket(&server, &to, "--wait=120", &wheels);
    let (out, ()) = tokio::join!(upload, lambda_service(&queue, &handler, RUN, 2));
    assert_success(&out, "quarry upload --wait");
    assert!(String::from_utf8_lossy(&out.stderr).contains("indexed"), "{}", String::from_utf8_lossy(&out.stderr));
    let key = Key::new(format!("{RUN}python/simple/waited-for/index.html")).unwrap();
    let (_, page) = store.get_bytes(&key, 1 << 20).await.expect("the simple page is there when --wait returns");
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("waited_for-1.0-py3-none-any.whl#sha256=") && page.contains("waited_for-1.1"), "{page}");

    // bench/upload_wait.sh: QUARRY_WAIT_ROUNDS more uploads of one wheel each, each printing how
    // long `--wait` took from the upload's end to "indexed".
    let rounds: usize = std::env::var("QUARRY_WAIT_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(0);
    for round in 0..rounds.min(100) {
        let run_prefix = format!("{}-linux/", 3500 + round);
        let wheel = WheelSpec::new("waited-for", &format!("2.{round}")).write_to(tmp.path()).display().to_string();
        let to = format!("s3://{BUCKET}/{run_prefix}python/");
        let upload = upload_to_bucket(&server, &to, "--wait=120", std::slice::from_ref(&wheel));
        let (out, ()) = tokio::join!(upload, lambda_service(&queue, &handler, &run_prefix, 1));
        assert_success(&out, "quarry upload --wait (bench round)");
        let said = String::from_utf8_lossy(&out.stderr);
        let seconds = said.lines().find(|l| l.contains("indexed")).and_then(|l| l.split("seconds=").nth(1));
        eprintln!("wait round {round}: {}", seconds.unwrap_or("?").split_whitespace().next().unwrap_or("?"));
    }

    // Nobody indexes: the wait fails after its timeout, naming what is missing.
    let late = WheelSpec::new("never-indexed", "1.0").write_to(tmp.path()).display().to_string();
    let started = Instant::now();
    let out = upload_to_bucket(&server, &format!("s3://{BUCKET}/3401-linux/python/"), "--wait=2", &[late]).await;
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("never_indexed-1.0-py3-none-any.whl") && said.contains("simple/never-indexed/index.html"),
        "{said}"
    );
    assert!(started.elapsed() < Duration::from_secs(60), "bounded by --wait");
    server.stop().await;
}
