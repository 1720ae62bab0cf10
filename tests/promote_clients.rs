//! Promotion as clients see it: a run promoted into TheRock's release layout (the
//! `therock-release` preset) with a `python-deps/` base index mirrored from a local upstream, pip
//! and uv installing through `quarry serve --config` before and after the run is deleted; an
//! audit loop reading a channel like a client while 200 wheels and the native packages are
//! promoted into it, never seeing a page that names a missing file or a family page without the
//! generic wheels it needs; the Lambda handler indexing a promotion into a moto bucket from the
//! notifications the bucket sends.
#![allow(clippy::print_stderr)] // the audit's figures for the test log

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use quarry_lambda_indexer::{Handler, Stores};
use quarry_store::{Key, PutOptions, S3Store, Store, StoreExt};
use quarry_tests::native::{build_fixtures, files_in};
use quarry_tests::s3::{S3Server, SqsMessage, SqsQueue, create_public_bucket, notify_queue, s3_client};
use quarry_tests::{
    ROOT, ServedBinary, TOKEN, TestServer, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run,
    uv_pip,
};
use reqwest::Url;

async fn quarry(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args).env_remove("QUARRY_GRACE_SECONDS").env_remove("QUARRY_CONFIG");
    run(cmd, Duration::from_secs(300)).await
}

const PRESET: &str = "[layout]\npreset = \"therock-release\"\n";
/// The preset's `v2/{family}/` views with their find-links pages on (a layout rule's default
/// is off): a bare bucket maps no directory URL to a simple page, but pip takes a find-links
/// page by its full URL.
const VIEWS_WITH_FIND_LINKS: &str = "[layout]\n[[layout.root]]\nprefix = \"v2/{family}/\"\nkind = \"pip\"\n\
    view = \"family\"\ngeneric = \"v2/generic/\"\nfind_links = true\n";

/// Generic core needing `tinydep` (from the base index), two families' libraries needing core.
fn release_wheels() -> [WheelSpec; 3] {
    [
        WheelSpec::new("rocm-sdk-core", "7.0.0").requires("tinydep==1.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx94X-dcgpu", "7.0.0").requires("rocm-sdk-core==7.0.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx120X-all", "7.0.0").requires("rocm-sdk-core==7.0.0"),
    ]
}

const INSTALLED: [&str; 3] =
    ["rocm_sdk_core-7.0.0.dist-info", "rocm_sdk_libraries_gfx94X_dcgpu-7.0.0.dist-info", "tinydep-1.0.dist-info"];

/// pip and uv install the family's libraries through the channel plus the base index.
async fn install_through(url: &str, tmp: &Path, round: &str) {
    let index = format!("{url}v2/gfx94X-dcgpu/simple/");
    let extra = format!("{url}python-deps/simple/");
    let args = ["--index-url", index.as_str(), "--extra-index-url", extra.as_str(), "rocm-sdk-libraries-gfx94X-dcgpu"];
    let target = tmp.join(format!("pip-{round}"));
    assert_success(&pip_install(&args, &target).await, &format!("pip install through the channel ({round})"));
    assert_eq!(installed(&target), INSTALLED, "pip ({round})");
    let target = tmp.join(format!("uv-{round}"));
    assert_success(&uv_pip("install", &args, Some(&target)).await, &format!("uv pip install ({round})"));
    assert_eq!(installed(&target), INSTALLED, "uv ({round})");
}

/// `quarry serve` over `store` with the layout of `config` (also used by `views.rs`).
pub(crate) async fn serve(store: &Path, config: &Path, token: &Path) -> ServedBinary {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.env_remove("QUARRY_CONFIG")
        .args(["serve", "--addr", "127.0.0.1:0", "--config"])
        .arg(config)
        .arg("--store")
        .arg(store)
        .arg("--token-file")
        .arg(token)
        .stderr(Stdio::null());
    ServedBinary::start(cmd).await
}

#[tokio::test(flavor = "multi_thread")]
async fn pip_and_uv_install_a_preset_channel_with_its_base_index_after_the_run_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("quarry.toml");
    std::fs::write(&config, PRESET).unwrap();
    let token = tmp.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let c = config.display().to_string();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path();
    let s = store.display().to_string();
    for w in release_wheels() {
        plant(store, &format!("800-linux/python/{}", w.filename()), &w.build());
    }
    // A later run, so that `gc --keep-last 1` deletes the promoted one.
    let later = WheelSpec::new("later", "1.0");
    plant(store, &format!("801-linux/python/{}", later.filename()), &later.build());
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    let promote = ["promote", "--from", "800-linux", "--to", "v2", "--kinds", "pip", "--config", &c, "--store", &s];
    assert_success(&quarry(&promote).await, "quarry promote into the preset's v2/");
    // The generic core is stored once, in the generic root the family views link.
    let core = release_wheels()[0].filename();
    let copies: Vec<String> = walk(&store.join("v2")).into_iter().filter(|p| p.ends_with(&core)).collect();
    assert_eq!(copies, [format!("generic/{core}")], "the generic wheel is stored once");
    let page = std::fs::read_to_string(store.join("v2/gfx94X-dcgpu/simple/rocm-sdk-core/index.html")).unwrap();
    assert!(page.contains(&format!("href=\"../../../generic/{core}#sha256=")), "{page}");

    // python-deps/ from a local upstream holding the dependency.
    let upstream = TestServer::start().await;
    upstream.upload(&WheelSpec::new("tinydep", "1.0")).await;
    upstream.upload(&WheelSpec::new("tinydep", "2.0")).await;
    let upstream_url = format!("{}{ROOT}simple/", upstream.url);
    let mirror = ["mirror", "--store", &s, "--to", "python-deps/", "--upstream", &upstream_url];
    let compose = ["--compose-with", "v2/gfx94X-dcgpu/", "--project", "tinydep==1.0"];
    assert_success(&quarry(&[&mirror[..], &compose[..]].concat()).await, "quarry mirror into python-deps/");
    upstream.stop().await;

    let served = serve(store, &config, &token).await;
    // JSON negotiation on the preset's prefixes (uv asks for PEP 691).
    for path in ["v2/gfx94X-dcgpu/simple/rocm-sdk-core/", "python-deps/simple/tinydep/"] {
        let response = reqwest::Client::new()
            .get(format!("{}{path}", served.url))
            .header("Accept", "application/vnd.pypi.simple.v1+json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(kind.starts_with("application/vnd.pypi.simple.v1+json"), "{path}: {kind}");
    }
    install_through(&served.url, tmp.path(), "before gc").await;

    assert_success(&quarry(&["gc", "--store", &s, "--keep-last", "1"]).await, "quarry gc");
    assert!(!store.join("800-linux").exists(), "gc kept the promoted run");
    assert!(store.join("801-linux").exists());
    install_through(&served.url, tmp.path(), "after gc").await;
}

/// Versions in the audit's promotion, each a generic core and two families' libraries: 201 wheels.
const AUDIT_VERSIONS: usize = 67;
const FAMILIES: [&str; 2] = ["gfx94X-dcgpu", "gfx120X-all"];

/// What one audit pass checked.
#[derive(Default)]
struct Audit {
    pages: usize,
    files: usize,
}

/// GET `url`, `None` on 404 (a root not yet published), panicking on any other failure.
async fn get(client: &reqwest::Client, url: &Url) -> Option<bytes::Bytes> {
    let response = client.get(url.clone()).send().await.unwrap_or_else(|e| panic!("GET {url}: {e}"));
    if response.status() == 404 {
        return None;
    }
    assert_eq!(response.status(), 200, "GET {url}");
    Some(response.bytes().await.unwrap())
}

/// Every file a PEP 691 project page names, fetched; returns the versions (wheel filenames'
/// second field).
async fn project_versions(client: &reqwest::Client, page: &Url, audit: &mut Audit) -> BTreeSet<String> {
    let Some(body) = get(client, page).await else { return BTreeSet::new() };
    audit.pages += 1;
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let mut versions = BTreeSet::new();
    for file in json["files"].as_array().unwrap() {
        let url = page.join(file["url"].as_str().unwrap()).unwrap();
        assert!(get(client, &url).await.is_some(), "{page} names {url}, which is missing");
        audit.files += 1;
        versions.insert(file["filename"].as_str().unwrap().split('-').nth(1).unwrap().to_owned());
    }
    versions
}

/// Where a channel's roots lie and how a run is promoted into it.
struct Channel {
    /// The family roots' parent.
    pip: &'static str,
    deb: &'static str,
    rpm: &'static str,
    /// `quarry promote --to` and `--kinds` of each promotion step.
    steps: &'static [(&'static str, &'static str)],
    /// Laid out by the `therock-release` preset (per-family views of a generic root).
    preset: bool,
}

/// A channel laid out like a run: each family root holds its copy of the generic wheels.
const NIGHTLY: Channel = Channel {
    pip: "nightly/python/",
    deb: "nightly/packages/deb/",
    rpm: "nightly/packages/rpm/x86_64/",
    steps: &[("nightly", "pip,deb,rpm")],
    preset: false,
};

/// TheRock's release layout: `v2/{family}/` views of `v2/generic/`, `v3/packages/…`.
const RELEASE: Channel = Channel {
    pip: "v2/",
    deb: "v3/packages/deb/",
    rpm: "v3/packages/rpm/x86_64/",
    steps: &[("v2", "pip"), ("v3", "deb,rpm")],
    preset: true,
};

/// One pass over the channel as pip, apt and dnf read it (6 pages once the channel exists).
async fn audit_once(client: &reqwest::Client, base: &Url, channel: &Channel, audit: &mut Audit) {
    for family in FAMILIES {
        let simple = base.join(&format!("{}{family}/simple/", channel.pip)).unwrap();
        let lower = family.to_lowercase();
        // The family's libraries first, then the generic core: pages only grow, so a library
        // version listed before its core is listed is a partial set.
        let libraries = simple.join(&format!("rocm-sdk-libraries-{lower}/index.json")).unwrap();
        let libraries = project_versions(client, &libraries, audit).await;
        let core = project_versions(client, &simple.join("rocm-sdk-core/index.json").unwrap(), audit).await;
        let missing: Vec<&String> = libraries.iter().filter(|v| !core.contains(*v)).collect();
        assert!(missing.is_empty(), "{family}'s page lists libraries {missing:?} without their generic core");
    }
    let packages = base.join(&format!("{}dists/stable/main/binary-amd64/Packages", channel.deb)).unwrap();
    if let Some(body) = get(client, &packages).await {
        audit.pages += 1;
        let root = base.join(channel.deb).unwrap();
        for line in String::from_utf8(body.to_vec()).unwrap().lines() {
            if let Some(path) = line.strip_prefix("Filename: ") {
                let url = root.join(path).unwrap();
                assert!(get(client, &url).await.is_some(), "Packages names {url}, which is missing");
                audit.files += 1;
            }
        }
    }
    let repo = base.join(channel.rpm).unwrap();
    if let Some(repomd) = get(client, &repo.join("repodata/repomd.xml").unwrap()).await {
        audit.pages += 1;
        let repomd = String::from_utf8(repomd.to_vec()).unwrap();
        let primary = hrefs(&repomd).into_iter().find(|h| h.ends_with("-primary.xml.gz")).expect("primary in repomd");
        let gz = get(client, &repo.join(&primary).unwrap()).await.expect("repomd names a missing primary");
        let mut xml = String::new();
        flate2::read::MultiGzDecoder::new(&gz[..]).read_to_string(&mut xml).unwrap();
        for href in hrefs(&xml) {
            let url = repo.join(&href).unwrap();
            assert!(get(client, &url).await.is_some(), "primary.xml names {url}, which is missing");
            audit.files += 1;
        }
    }
}

/// Every file under `dir`, as `/`-separated paths relative to it.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap().components();
                out.push(relative.map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"));
            }
        }
    }
    out.sort();
    out
}

/// The `href="…"` values of an XML document.
fn hrefs(xml: &str) -> Vec<String> {
    xml.split("href=\"").skip(1).filter_map(|rest| rest.split_once('"').map(|(h, _)| h.to_owned())).collect()
}

/// Plant a fixture directory's debs and rpms into `run`'s native repos.
fn plant_natives(store: &Path, fixtures: &Path, run: &str) {
    for (dir, root) in [("deb", "packages/deb/pool/main"), ("rpm", "packages/rpm/x86_64")] {
        for f in files_in(&fixtures.join(dir)) {
            let name = f.file_name().unwrap().to_str().unwrap();
            plant(store, &format!("{run}/{root}/{name}"), &std::fs::read(&f).unwrap());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_audit_loop_never_sees_a_partial_promotion() {
    audit_promotion(&NIGHTLY).await;
}

/// The same through per-family views: the generic core lands (and its root is indexed) before
/// any family page links it across roots.
#[tokio::test(flavor = "multi_thread")]
async fn an_audit_loop_never_sees_a_partial_promotion_through_family_views() {
    audit_promotion(&RELEASE).await;
}

/// A first promotion, then 201 wheels and the native packages promoted while an audit loop
/// reads the channel as clients do.
async fn audit_promotion(channel: &'static Channel) {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("quarry.toml");
    std::fs::write(&config, if channel.preset { PRESET } else { "" }).unwrap();
    let (first, many) = (tmp.path().join("fixtures"), tmp.path().join("many"));
    build_fixtures(&first, None).await;
    build_fixtures(&many, Some(12)).await;
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path().to_path_buf();
    // A first promotion, so that the channel's pages exist while the second one lands.
    for w in [
        WheelSpec::new("rocm-sdk-core", "6.0.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx94X-dcgpu", "6.0.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx120X-all", "6.0.0"),
    ] {
        plant(&store, &format!("899-linux/python/{}", w.filename()), &w.build());
    }
    plant_natives(&store, &first, "899-linux");
    let mut planted = 0;
    for i in 0..AUDIT_VERSIONS {
        let version = format!("7.0.{i}");
        let core = WheelSpec::new("rocm-sdk-core", &version);
        plant(&store, &format!("900-linux/python/{}", core.filename()), &core.build());
        planted += 1;
        for family in FAMILIES {
            let lib = WheelSpec::new(&format!("rocm-sdk-libraries-{family}"), &version)
                .requires(&format!("rocm-sdk-core=={version}"));
            plant(&store, &format!("900-linux/python/{}", lib.filename()), &lib.build());
            planted += 1;
        }
    }
    assert_eq!(planted, 201);
    plant_natives(&store, &many, "900-linux");
    let s = store.display().to_string();
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    let c = config.display().to_string();
    let promote = |run: &'static str| {
        let (s, c) = (s.clone(), c.clone());
        async move {
            let families = "gfx94X-dcgpu,gfx120X-all";
            let mut outputs = Vec::new();
            for (to, kinds) in channel.steps {
                let args = ["promote", "--from", run, "--to", to, "--kinds", kinds, "--families", families];
                let out = quarry(&[&args[..], &["--store", &s, "--config", &c]].concat()).await;
                let failed = !out.status.success();
                outputs.push(out);
                if failed {
                    break;
                }
            }
            outputs.pop().expect("a channel has promotion steps")
        }
    };
    assert_success(&promote("899-linux").await, "the first promotion");

    let server = TestServer::start_in_store(store_dir).await;
    let base = Url::parse(&server.url).unwrap();
    let mut before = Audit::default();
    audit_once(&server.client, &base, channel, &mut before).await;
    assert_eq!(before.pages, 6, "the first promotion published the channel's pages");
    let done = Arc::new(AtomicBool::new(false));
    let auditor = tokio::spawn({
        let (client, done, base) = (server.client.clone(), done.clone(), base.clone());
        async move {
            let mut audit = Audit::default();
            let mut passes = 0;
            // Bounded: until the promotion ends (plus one last pass), at most 2,000 passes.
            while passes < 2_000 {
                let last = done.load(Ordering::SeqCst);
                audit_once(&client, &base, channel, &mut audit).await;
                passes += 1;
                if last {
                    break;
                }
            }
            (passes, audit)
        }
    });
    let out = promote("900-linux").await;
    done.store(true, Ordering::SeqCst);
    assert_success(&out, "quarry promote of 201 wheels and the native packages");
    let (passes, audit) = auditor.await.expect("the audit loop saw a partial set");
    eprintln!("audit: {passes} passes, {} pages, {} files checked", audit.pages, audit.files);
    assert!(passes >= 2 && audit.pages >= 6 * passes && audit.files > 0, "the audit checked nothing");
    // The last pass saw the whole promotion: per family 68 libraries and 68 cores, the natives.
    let mut last = Audit::default();
    audit_once(&server.client, &base, channel, &mut last).await;
    assert!(last.files >= 2 * 2 * (AUDIT_VERSIONS + 1) + 2 * 12, "the finished channel lists {} files", last.files);
    let cores = walk(&store.join(channel.pip))
        .into_iter()
        .filter(|p| p.contains("rocm_sdk_core-") && p.ends_with(".whl"))
        .count();
    let stored_per_core = if channel.preset { 1 } else { FAMILIES.len() };
    assert_eq!(cores, stored_per_core * (AUDIT_VERSIONS + 1), "generic wheels stored under {}", channel.pip);
    server.stop().await;
}

/// The moto bucket as the handler sees it.
struct Bucket(Arc<dyn Store>);

impl Stores for Bucket {
    fn for_bucket(&self, bucket: &str) -> Arc<dyn Store> {
        assert_eq!(bucket, "releases");
        self.0.clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lambda_indexes_a_promotion_into_the_preset_layout_on_moto() {
    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    create_public_bucket(&client, "releases").await;
    let queue = SqsQueue::create(&server, "quarry-index-events").await;
    // The template's notification filters: package files only.
    notify_queue(&client, "releases", &queue, &[".whl", ".tar.gz", ".zip", ".yanked"]).await;
    let store: Arc<dyn Store> = Arc::new(S3Store::from_client(client.clone(), "releases", ""));
    let wheels = release_wheels();
    for w in &wheels {
        let key = Key::new(format!("810-linux/python/{}", w.filename())).unwrap();
        store.put_bytes(&key, w.build().into(), PutOptions::default()).await.unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("quarry.toml");
    std::fs::write(&config, VIEWS_WITH_FIND_LINKS).unwrap();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["promote", "--from", "810-linux", "--to", "v2", "--kinds", "pip", "--store", "s3://releases/"])
        .arg("--config")
        .arg(&config)
        .envs(server.client_env())
        .env_remove("QUARRY_CONFIG");
    assert_success(&run(cmd, Duration::from_secs(120)).await, "quarry promote into the bucket");

    // Leave the Lambda the whole indexing: remove every page and state object promote wrote.
    let listed = store.list_all("v2/", false).await.unwrap();
    let (packages, written): (Vec<_>, Vec<_>) =
        listed.objects.into_iter().map(|o| o.key).partition(|k| k.as_str().ends_with(".whl"));
    let names: Vec<&str> = packages.iter().map(|k| k.as_str().split('-').next().unwrap_or_default()).collect();
    assert_eq!(names, ["v2/generic/rocm_sdk_core", "v2/gfx120X", "v2/gfx94X"], "core once, each family's libraries");
    assert!(!written.is_empty(), "promote published no page");
    for key in &written {
        store.delete(key).await.unwrap();
    }

    // The notifications the bucket sent for the channel's copies, as the Lambda receives them.
    let mut messages: Vec<SqsMessage> = Vec::new();
    let mut seen = BTreeSet::new();
    for _ in 0..100 {
        if packages.iter().all(|k| seen.contains(k.as_str())) {
            break;
        }
        for m in queue.receive(1).await {
            let body: serde_json::Value = serde_json::from_str(&m.body).unwrap_or_default();
            for record in body["Records"].as_array().into_iter().flatten() {
                let key = quarry_lambda_indexer::decode_key(record["s3"]["object"]["key"].as_str().unwrap_or(""));
                if key.starts_with("v2/") {
                    let event = record["eventName"].as_str().unwrap_or("");
                    assert!(event.starts_with("ObjectCreated:"), "{event}");
                }
                seen.insert(key);
            }
            messages.push(m);
        }
    }
    assert!(packages.iter().all(|k| seen.contains(k.as_str())), "notified: {seen:?}");

    let layout = quarry_layout::config::Layout::parse(VIEWS_WITH_FIND_LINKS).unwrap();
    let handler = Handler::new(Bucket(store.clone())).with_layout(std::sync::Arc::new(layout));
    let answer = handler.handle(queue.lambda_event(&messages)).await.expect("the handler answers");
    assert_eq!(answer["batchItemFailures"], serde_json::json!([]), "{answer}");

    for family in FAMILIES {
        let key = Key::new(format!("v2/{family}/index.html")).unwrap();
        let (_, page) = store.get_bytes(&key, 1 << 20).await.expect("the Lambda wrote the family's page");
        assert!(String::from_utf8_lossy(&page).contains("rocm_sdk_core-7.0.0"), "{family}");
    }
    let target = tmp.path().join("site");
    let find_links = format!("{}/releases/v2/gfx94X-dcgpu/index.html", server.endpoint);
    // tinydep is not in this bucket: install without dependencies, then check the set.
    let args = ["--no-index", "--no-deps", "--find-links", find_links.as_str()];
    let out = pip_install(&[&args[..], &["rocm-sdk-libraries-gfx94X-dcgpu", "rocm-sdk-core"]].concat(), &target).await;
    assert_success(&out, "pip install from the pages the Lambda wrote");
    assert_eq!(installed(&target), INSTALLED[..2]);
    server.stop().await;
}

/// `quarry prune --channel`: every root under the channel with the layout's own retention; a
/// root the layout gives none, and roots outside the channel, are left alone.
#[tokio::test]
async fn prune_by_channel_uses_each_roots_retention_from_the_layout() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("quarry.toml");
    let layout = "[layout]\n[[layout.root]]\nprefix = \"ch/extra/\"\nkind = \"pip\"\n\
                  [[layout.root]]\nprefix = \"ch/{family}/\"\nkind = \"pip\"\nkeep_versions = 1\n";
    std::fs::write(&config, layout).unwrap();
    let c = config.display().to_string();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path();
    let s = store.display().to_string();
    let roots = [("ch/gfx94X-dcgpu/", 2), ("ch/gfx120X-all/", 3), ("ch/extra/", 2), ("1-linux/python/", 2)];
    for (root, versions) in roots {
        for v in 1..=versions {
            let w = WheelSpec::new("foo", &format!("{v}.0"));
            plant(store, &format!("{root}{}", w.filename()), &w.build());
        }
    }
    assert_success(&quarry(&["index", &s, "--config", &c]).await, "quarry index");
    let out = quarry(&["prune", "--store", &s, "--channel", "ch/", "--config", &c, "--json"]).await;
    assert_success(&out, "quarry prune --channel");
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pruned: BTreeSet<String> = reports
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let root = r["root"].as_str().unwrap().to_owned();
            r["pruned"].as_array().unwrap().iter().map(move |v| format!("{root}{}", v["version"].as_str().unwrap()))
        })
        .collect();
    let want = ["ch/gfx120X-all/1.0", "ch/gfx120X-all/2.0", "ch/gfx94X-dcgpu/1.0"];
    assert_eq!(pruned, want.iter().map(|s| (*s).to_owned()).collect(), "{reports:#}");
    for (root, versions) in roots {
        for v in 1..=versions {
            let kept = !want.contains(&format!("{root}{v}.0").as_str());
            let file = store.join(format!("{root}foo-{v}.0-py3-none-any.whl"));
            assert_eq!(file.exists(), kept, "{}", file.display());
        }
    }
    let page = std::fs::read_to_string(store.join("ch/gfx120X-all/simple/foo/index.html")).unwrap();
    assert!(page.contains("foo-3.0-py3-none-any.whl") && !page.contains("foo-2.0"), "{page}");

    // A channel without any retention configured: a usage error, nothing pruned.
    let out = quarry(&["prune", "--store", &s, "--channel", "ch/extra/", "--config", &c]).await;
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has a retention"));
    assert!(store.join("ch/extra/foo-1.0-py3-none-any.whl").exists());
}

/// `quarry mirror` without `--compose-with` takes the layout's: the preset composes
/// `python-deps/` with every `v2/{family}/` root the store holds, so a project a family index
/// supplies is refused, naming both.
#[tokio::test]
async fn mirror_composes_with_the_roots_the_layout_names() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("quarry.toml");
    std::fs::write(&config, PRESET).unwrap();
    let c = config.display().to_string();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path();
    let s = store.display().to_string();
    let foo = WheelSpec::new("foo", "2.0");
    plant(store, &format!("v2/gfx120X-all/{}", foo.filename()), &foo.build());
    assert_success(&quarry(&["index", &s, "--config", &c]).await, "quarry index");
    let upstream = TestServer::start().await;
    for spec in [WheelSpec::new("foo", "1.0"), WheelSpec::new("bar", "1.0")] {
        upstream.upload(&spec).await;
    }
    let url = format!("{}{ROOT}simple/", upstream.url);
    let mirror = ["mirror", "--store", &s, "--to", "python-deps/", "--upstream", &url, "--config", &c];
    let refused = quarry(&[&mirror[..], &["--project", "foo==1.0"]].concat()).await;
    assert_eq!(refused.status.code(), Some(1), "{}", String::from_utf8_lossy(&refused.stderr));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("foo is supplied by both v2/gfx120X-all/ and python-deps/"), "{stderr}");
    assert!(!store.join("python-deps").exists(), "a refused mirror stored something");
    assert_success(&quarry(&[&mirror[..], &["--project", "bar==1.0"]].concat()).await, "mirror bar");
    assert!(store.join("python-deps/bar-1.0-py3-none-any.whl").exists());
    upstream.stop().await;
}
