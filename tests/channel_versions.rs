//! Channel versions (`quarry channel history|rollback|forget`): a channel promoted with 7.1.0,
//! then 7.1.1, then rolled back installs 7.1.0 again with real pip through `quarry serve`, and no
//! page names a 7.1.1 file; readers fetching pages while a promotion and a rollback run never
//! see two versions at once; history lists the versions with the current one marked; a file a
//! kept version names cannot be deleted. Through the CloudFront Function under node over moto
//! (`tests/cdn/edge.mjs` with a stand-in `cloudfront` module serving the KeyValueStore from a
//! JSON file, or from a real KeyValueStore data plane: ministack, which `--kvs-arn` writes,
//! SigV4A-signed, with stale ETags raced by `tests/cdn/kvs_race.py`) as well. A promotion (and
//! a prune) after a rollback starts from the current version (pip and apt); forgotten versions
//! lose their pages and hold nothing.

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use quarry_tests::native::text;
use quarry_tests::{TestServer, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run};

async fn quarry(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args).env_remove("QUARRY_GRACE_SECONDS").env_remove("QUARRY_CONFIG").env_remove("QUARRY_SIGNING_KEY");
    run(cmd, Duration::from_secs(300)).await
}

/// Two projects released together, so a reader can tell one version of the channel from two.
fn release(store: &Path, run: u32, version: &str) {
    for name in ["chan-demo", "chan-extra"] {
        let wheel = WheelSpec::new(name, version);
        plant(store, &format!("{run}-linux/python/{}", wheel.filename()), &wheel.build());
    }
}

async fn promote(store: &str, run: u32) -> Output {
    quarry(&["promote", "--from", &format!("{run}-linux"), "--to", "nightly", "--kinds", "pip", "--store", store]).await
}

/// The `7.1.x` versions a page names.
fn versions_named(page: &str) -> Vec<String> {
    let mut out: Vec<String> = ["7.1.0", "7.1.1", "7.1.2"]
        .iter()
        .filter(|v| page.contains(&format!("-{v}-py3")))
        .map(|v| (*v).to_owned())
        .collect();
    out.dedup();
    out
}

async fn page(client: &reqwest::Client, url: &str) -> String {
    let response = client.get(url).send().await.unwrap();
    assert!(response.status().is_success(), "GET {url}: {}", response.status());
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollback_switches_pip_back_and_readers_never_see_two_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_path_buf();
    let s = store.display().to_string();
    release(&store, 700, "7.1.0");
    release(&store, 701, "7.1.1");
    release(&store, 702, "7.1.2");
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    assert_success(&promote(&s, 700).await, "promote 7.1.0");
    let out = promote(&s, 701).await;
    assert_success(&out, "promote 7.1.1");
    assert!(text(&out).contains("version 2 of nightly is current"), "{}", text(&out));

    let server = TestServer::start_in_store(dir).await;
    let index = format!("{}nightly/python/simple/", server.url);
    let pip = |version: &'static str| {
        let index = index.clone();
        async move {
            let tmp = tempfile::tempdir().unwrap();
            let out = pip_install(&["--index-url", &index, "chan-demo"], tmp.path()).await;
            assert_success(&out, "pip install chan-demo");
            assert_eq!(installed(tmp.path()), [format!("chan_demo-{version}.dist-info")]);
        }
    };
    pip("7.1.1").await;

    let out = quarry(&["channel", "rollback", "nightly", "--store", &s, "--json"]).await;
    assert_success(&out, "quarry channel rollback");
    let switched: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((switched["from"].as_u64(), switched["to"].as_u64()), (Some(2), Some(1)), "{switched}");
    assert_eq!(switched["kvs_key"], "/nightly/");
    // The resolver trusts a pointer for a second.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    pip("7.1.0").await;
    for url in [index.clone(), format!("{index}chan-demo/"), format!("{index}chan-extra/")] {
        let body = page(&server.client, &url).await;
        assert!(!body.contains("7.1.1"), "{url} names a 7.1.1 file after the rollback:\n{body}");
    }
    let json = server
        .client
        .get(format!("{index}chan-demo/"))
        .header("accept", "application/vnd.pypi.simple.v1+json")
        .send()
        .await
        .unwrap();
    assert!(!json.text().await.unwrap().contains("7.1.1"), "the JSON page names 7.1.1 after the rollback");

    // The rolled-back version's files are held: a kept version names them.
    let held = "nightly/python/chan_demo-7.1.1-py3-none-any.whl";
    let mut delete = tokio::process::Command::new(quarry_bin());
    delete.args(["delete", &format!("{}{held}", server.url)]).env("QUARRY_TOKEN", quarry_tests::TOKEN);
    let out = run(delete, Duration::from_secs(60)).await;
    assert!(!out.status.success(), "a file a kept version names was deleted");
    assert!(text(&out).contains("version 2 of channel nightly"), "{}", text(&out));
    assert!(store.join(held).is_file());

    // Readers during a promotion and two rollbacks: every pass (both projects' pages, the
    // first again to tell a pass that straddled a switch) sees one version of the channel.
    let done = Arc::new(AtomicBool::new(false));
    let reader = tokio::spawn({
        let (client, index, done) = (server.client.clone(), index.clone(), done.clone());
        async move {
            let (mut passes, mut straddled) = (0u32, 0u32);
            for _ in 0..100_000 {
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let first = versions_named(&page(&client, &format!("{index}chan-demo/")).await);
                let second = versions_named(&page(&client, &format!("{index}chan-extra/")).await);
                let again = versions_named(&page(&client, &format!("{index}chan-demo/")).await);
                if first != again {
                    straddled += 1;
                    continue;
                }
                assert_eq!(first, second, "one pass saw two versions of the channel");
                passes += 1;
            }
            (passes, straddled)
        }
    });
    assert_success(&promote(&s, 702).await, "promote 7.1.2");
    assert_success(&quarry(&["channel", "rollback", "nightly", "--store", &s]).await, "rollback to 1");
    assert_success(&quarry(&["channel", "rollback", "nightly", "--to", "3", "--store", &s]).await, "to 3");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    done.store(true, Ordering::SeqCst);
    let (passes, straddled) = reader.await.unwrap();
    assert!(passes > 10, "only {passes} consistent passes ({straddled} straddled a switch)");
    pip("7.1.2").await;

    let out = quarry(&["channel", "history", "nightly", "--store", &s, "--json"]).await;
    assert_success(&out, "quarry channel history");
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(history["current"], 3, "{history:#}");
    let from: Vec<&str> = history["versions"].as_array().unwrap().iter().map(|v| v["from"].as_str().unwrap()).collect();
    assert_eq!(from, ["700-linux", "701-linux", "702-linux"]);
    let out = quarry(&["channel", "history", "nightly", "--store", &s]).await;
    assert!(text(&out).lines().next().unwrap_or_default().starts_with("*    3"), "{}", text(&out));

    // Bad input is named: no such version, no such channel.
    let out = quarry(&["channel", "rollback", "nightly", "--to", "9", "--store", &s]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no version 9"), "{}", text(&out));
    let out = quarry(&["channel", "history", "weekly", "--store", &s]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("weekly/ has no versions"), "{}", text(&out));
}

/// moto with a public bucket `releases` whose `ci/` prefix holds runs 700 (7.1.0) and 701
/// (7.1.1) of two wheels each; the server and a client of it.
async fn two_runs_on_moto() -> (quarry_tests::s3::S3Server, aws_sdk_s3::Client) {
    use quarry_store::{Key, PutOptions, S3Store, StoreExt};
    use quarry_tests::s3::{S3Server, create_public_bucket, s3_client};

    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    create_public_bucket(&client, "releases").await;
    let store = S3Store::from_client(client.clone(), "releases", "ci/");
    for (run, version) in [(700, "7.1.0"), (701, "7.1.1")] {
        for name in ["chan-demo", "chan-extra"] {
            let wheel = WheelSpec::new(name, version);
            let key = Key::new(format!("{run}-linux/python/{}", wheel.filename())).unwrap();
            store.put_bytes(&key, wheel.build().into(), PutOptions::default()).await.unwrap();
        }
    }
    (server, client)
}

/// On S3 behind the CDN: the CloudFront Function under node, its KeyValueStore a JSON file the
/// test writes with the key and value `quarry channel rollback` prints (the deploy's
/// `aws cloudfront-keyvaluestore put-key`), over moto.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollback_through_the_cloudfront_function_over_s3() {
    let (server, _) = two_runs_on_moto().await;
    let s3 = "s3://releases/ci/";
    let quarry_s3 = |args: Vec<String>| {
        let env = server.client_env();
        async move {
            let mut cmd = tokio::process::Command::new(quarry_bin());
            cmd.args(&args).envs(env).env_remove("QUARRY_CONFIG");
            run(cmd, Duration::from_secs(300)).await
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_success(&quarry_s3(args(&["index", s3])).await, "quarry index s3://");
    for run in ["700-linux", "701-linux"] {
        let out =
            quarry_s3(args(&["promote", "--from", run, "--to", "nightly", "--kinds", "pip", "--store", s3])).await;
        assert_success(&out, "quarry promote s3://");
    }

    let tmp = tempfile::tempdir().unwrap();
    let kvs = tmp.path().join("kvs.json");
    std::fs::write(&kvs, r#"{"/ci/nightly/": "2"}"#).unwrap();
    let edge = crate::cdn::Edge::start_with_kvs(&format!("{}/releases", server.endpoint), Some(&kvs)).await;
    let index = format!("{}/ci/nightly/python/simple/", edge.url);
    let pip = |version: &'static str| {
        let index = index.clone();
        async move {
            let target = tempfile::tempdir().unwrap();
            let out = pip_install(&["--index-url", &index, "chan-demo"], target.path()).await;
            assert_success(&out, "pip install through the edge");
            assert_eq!(installed(target.path()), [format!("chan_demo-{version}.dist-info")]);
        }
    };
    pip("7.1.1").await;

    let out = quarry_s3(args(&["channel", "rollback", "nightly", "--store", s3, "--json"])).await;
    assert_success(&out, "quarry channel rollback s3://");
    let switched: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(switched["kvs_key"], "/ci/nightly/", "{switched}");
    let entry = serde_json::json!({ switched["kvs_key"].as_str().unwrap(): switched["kvs_value"] });
    std::fs::write(&kvs, entry.to_string()).unwrap();
    pip("7.1.0").await;
    let http = reqwest::Client::new();
    for url in [index.clone(), format!("{index}chan-demo/"), format!("{index}chan-extra/")] {
        let body = page(&http, &url).await;
        assert!(body.contains("7.1.0") || url == index, "{url}:\n{body}");
        assert!(!body.contains("7.1.1"), "{url} names a 7.1.1 file after the rollback:\n{body}");
    }
    let log = edge.log();
    assert!(log.contains("/ci/nightly/.versions/1/python/simple/chan-demo/index.html 200"), "{log}");
    server.stop().await;
}

/// A CloudFront KeyValueStore data plane on loopback: `ministack` (an AWS emulator whose
/// `cloudfront-keyvaluestore` service implements DescribeKeyValueStore, GetKey and PutKey with
/// ETags), from its own virtualenv inside the test one (`scripts/test` installs it there: it pins
/// a botocore of its own), with one store created through its CloudFront control plane.
struct Ministack {
    endpoint: String,
    arn: String,
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

impl Ministack {
    async fn start() -> Self {
        let bin = quarry_tests::venv_dir().join("ministack/bin");
        assert!(
            bin.join("ministack").exists(),
            "ministack is not installed in {}: run scripts/test, which installs it",
            bin.display()
        );
        let dir = tempfile::tempdir().unwrap();
        let port = quarry_tests::s3::free_port();
        let child = tokio::process::Command::new(bin.join("ministack"))
            .env("GATEWAY_PORT", port.to_string())
            .env("BIND_HOST", "127.0.0.1")
            .env("TMPDIR", dir.path())
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start ministack");
        let endpoint = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let mut ready = false;
        for _ in 0..300 {
            if http.get(format!("{endpoint}/_ministack/health")).send().await.is_ok() {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(ready, "ministack did not listen on {endpoint} within 30 s");
        // CreateKeyValueStore with botocore, ministack's own client library.
        let script = "import sys, botocore.session\n\
            c = botocore.session.get_session().create_client('cloudfront', endpoint_url=sys.argv[1], \
            region_name='us-east-1', aws_access_key_id='testing', aws_secret_access_key='testing')\n\
            print(c.create_key_value_store(Name='quarry-channels')['KeyValueStore']['ARN'])";
        let mut create = tokio::process::Command::new(bin.join("python"));
        create.args(["-c", script, &endpoint]);
        let out = run(create, Duration::from_secs(60)).await;
        assert_success(&out, "CreateKeyValueStore");
        let arn = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Self { endpoint, arn, _child: child, _dir: dir }
    }

    /// The store's data plane URL (the edge's KVS_URL).
    fn store_url(&self) -> String {
        format!("{}/key-value-stores/{}", self.endpoint, percent_encode(&self.arn))
    }

    /// GetKey `key`'s value, `None` when the store has no such key.
    async fn get(&self, key: &str) -> Option<String> {
        let url = format!("{}/keys/{}", self.store_url(), percent_encode(key));
        let response = reqwest::get(&url).await.unwrap();
        if response.status() == reqwest::StatusCode::NOT_FOUND {
            return None;
        }
        assert!(response.status().is_success(), "GET {url}: {}", response.status());
        let body: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        Some(body["Value"].as_str().unwrap().to_owned())
    }
}

fn percent_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// `--kvs-arn`: Quarry writes the channel's key to the CloudFront KeyValueStore (SigV4A-signed,
/// `If-Match` the store's ETag) after each switch, so the edge follows promotions and a
/// rollback with no step of the deploy's; a KeyValueStore that cannot be written is an error
/// naming it, saying the store's pointer already moved and what to write.
#[tokio::test(flavor = "multi_thread")]
async fn quarry_writes_the_cdn_keyvaluestore_on_each_switch() {
    let (server, client) = two_runs_on_moto().await;
    let kvs = Ministack::start().await;
    let s3 = "s3://releases/ci/";
    let quarry_s3 = |args: &[&str]| {
        let mut env = server.client_env();
        env.push(("QUARRY_KVS_ENDPOINT".into(), kvs.endpoint.clone()));
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        async move {
            let mut cmd = tokio::process::Command::new(quarry_bin());
            cmd.args(&args).envs(env).env_remove("QUARRY_CONFIG").env_remove("QUARRY_KVS_ARN");
            run(cmd, Duration::from_secs(300)).await
        }
    };
    let current = || async {
        let out = quarry_s3(&["channel", "history", "nightly", "--store", s3, "--json"]).await;
        assert_success(&out, "quarry channel history");
        let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        history["current"].as_u64().unwrap().to_string()
    };
    assert_success(&quarry_s3(&["index", s3]).await, "quarry index s3://");
    let edge = crate::cdn::Edge::start_with_kvs(
        &format!("{}/releases", server.endpoint),
        Some(std::path::Path::new(&kvs.store_url())),
    )
    .await;
    let index = format!("{}/ci/nightly/python/simple/", edge.url);
    let pip = |version: &'static str| {
        let index = index.clone();
        async move {
            let target = tempfile::tempdir().unwrap();
            let out = pip_install(&["--index-url", &index, "chan-demo"], target.path()).await;
            assert_success(&out, "pip install through the edge");
            assert_eq!(installed(target.path()), [format!("chan_demo-{version}.dist-info")]);
        }
    };
    let http = reqwest::Client::new();
    let pages_name_only = |version: &'static str, not: &'static str| {
        let (http, index) = (http.clone(), index.clone());
        async move {
            for url in [format!("{index}chan-demo/"), format!("{index}chan-extra/")] {
                let body = page(&http, &url).await;
                assert!(body.contains(version), "{url} names no {version} file:\n{body}");
                assert!(!body.contains(not), "{url} names a {not} file:\n{body}");
            }
        }
    };

    for (run, version, not, n) in [("700-linux", "7.1.0", "7.1.1", "1"), ("701-linux", "7.1.1", "7.1.0-py3", "2")] {
        let args =
            ["promote", "--from", run, "--to", "nightly", "--kinds", "pip", "--store", s3, "--kvs-arn", &kvs.arn];
        assert_success(&quarry_s3(&args).await, "quarry promote --kvs-arn");
        assert_eq!(current().await, n);
        assert_eq!(kvs.get("/ci/nightly/").await.as_deref(), Some(n), "after promoting {run}");
        pip(version).await;
        if n == "1" {
            pages_name_only(version, not).await;
        }
    }
    let out = quarry_s3(&["channel", "rollback", "nightly", "--store", s3, "--kvs-arn", &kvs.arn]).await;
    assert_success(&out, "quarry channel rollback --kvs-arn");
    assert!(text(&out).contains(&format!("key /ci/nightly/ = 1 (written to {})", kvs.arn)), "{}", text(&out));
    assert_eq!(current().await, "1");
    assert_eq!(kvs.get("/ci/nightly/").await.as_deref(), Some("1"), "after the rollback");
    pip("7.1.0").await;
    pages_name_only("7.1.0", "7.1.1").await;
    let log = edge.log();
    assert!(log.contains("/ci/nightly/.versions/1/python/simple/chan-demo/index.html 200"), "{log}");
    assert!(log.contains("/ci/nightly/.versions/2/python/simple/chan-demo/index.json 200"), "{log}");

    // QUARRY_KVS_ARN is the flag too; a store that is not there is an error naming it, after
    // the store's pointer moved, with the key and value to write.
    let missing = kvs.arn.replace("quarry-channels", "no-such-store");
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["channel", "rollback", "nightly", "--to", "2", "--store", s3])
        .envs(server.client_env())
        .env("QUARRY_KVS_ENDPOINT", &kvs.endpoint)
        .env("QUARRY_KVS_ARN", &missing);
    let out = run(cmd, Duration::from_secs(300)).await;
    assert!(!out.status.success(), "a KeyValueStore that is not there was written:\n{}", text(&out));
    for part in [missing.as_str(), "pointer already moved to version 2", "key /ci/nightly/ = 2"] {
        assert!(text(&out).contains(part), "no {part:?} in:\n{}", text(&out));
    }
    assert_eq!(current().await, "2");
    assert_eq!(kvs.get("/ci/nightly/").await.as_deref(), Some("1"), "the real store was written");

    // A prune's version is written too.
    let prune = ["prune", "--store", s3, "--root", "nightly/python/", "--kind", "pip", "--keep-versions", "1"];
    let out = quarry_s3(&[&prune[..], &["--kvs-arn", &kvs.arn]].concat()).await;
    assert_success(&out, "quarry prune --kvs-arn");
    assert!(text(&out).contains("version 3 of nightly is current"), "{}", text(&out));
    assert_eq!(current().await, "3");
    assert_eq!(kvs.get("/ci/nightly/").await.as_deref(), Some("3"), "after the prune");
    pip("7.1.1").await;
    pages_name_only("7.1.1", "7.1.0").await;

    // On S3, `quarry channel forget` deletes the forgotten version's objects.
    let out = quarry_s3(&["channel", "forget", "nightly", "1", "--store", s3]).await;
    assert_success(&out, "quarry channel forget s3://");
    let listed = client.list_objects_v2().bucket("releases").prefix("ci/nightly/.versions/").send().await.unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert!(!keys.iter().any(|k| k.starts_with("ci/nightly/.versions/1/")), "{keys:?}");
    assert!(keys.contains(&"ci/nightly/.versions/2/.manifest.json"), "{keys:?}");
    server.stop().await;
}

/// Every page a version holds (its `.versions/N/` copies), as text.
fn version_pages(store: &Path, channel: &str, n: u64) -> Vec<(String, String)> {
    let dir = store.join(channel).join(".versions").join(n.to_string());
    let mut out = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let body = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
                out.push((path.strip_prefix(&dir).unwrap().display().to_string(), body));
            }
        }
    }
    assert!(!out.is_empty(), "version {n} of {channel} holds no page");
    out
}

/// A `.deb` of `chan-deb` at `version`, built with `dpkg-deb`, in run `run_id`'s apt pool.
async fn deb_release(store: &Path, scratch: &Path, run_id: u32, version: &str) {
    let tree = scratch.join(format!("chan-deb-{version}"));
    std::fs::create_dir_all(tree.join("DEBIAN")).unwrap();
    let control = format!(
        "Package: chan-deb\nVersion: {version}-1\nArchitecture: amd64\nMaintainer: Quarry tests <t@example.com>\nDescription: test\n"
    );
    std::fs::write(tree.join("DEBIAN/control"), control).unwrap();
    let deb = scratch.join(format!("chan-deb_{version}-1_amd64.deb"));
    let mut cmd = tokio::process::Command::new("dpkg-deb");
    cmd.args(["--root-owner-group", "--build"]).arg(&tree).arg(&deb);
    assert_success(&run(cmd, Duration::from_secs(60)).await, "dpkg-deb --build");
    let name = deb.file_name().unwrap().to_str().unwrap();
    plant(store, &format!("{run_id}-linux/packages/deb/pool/main/{name}"), &std::fs::read(&deb).unwrap());
}

/// A promotion after a rollback starts from the current version: 7.1.0, 7.1.1, rollback to
/// 1, 7.1.2 gives a version with 7.1.0 and 7.1.2 and no 7.1.1 (its files stay stored, held by
/// version 2), so pip resolves `==7.1.2` and refuses `==7.1.1`, and apt the same.
#[tokio::test(flavor = "multi_thread")]
async fn a_promotion_after_a_rollback_leaves_the_rolled_back_files_out() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let store = dir.path().to_path_buf();
    let s = store.display().to_string();
    for (run, version) in [(700, "7.1.0"), (701, "7.1.1"), (702, "7.1.2")] {
        release(&store, run, version);
        deb_release(&store, scratch.path(), run, version).await;
    }
    let promote = |s: &str, run: u32| {
        let args =
            ["promote", "--from", &format!("{run}-linux"), "--to", "nightly", "--kinds", "pip,deb", "--store", s]
                .map(str::to_owned);
        async move { quarry(&args.each_ref().map(String::as_str)).await }
    };
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    assert_success(&promote(&s, 700).await, "promote 7.1.0");
    assert_success(&promote(&s, 701).await, "promote 7.1.1");
    assert_success(&quarry(&["channel", "rollback", "nightly", "--store", &s]).await, "rollback to 1");
    // A file put in the channel's root by hand: no version names it, the promotion does not
    // bring it.
    plant(&store, "nightly/python/chan_demo-7.0.0-py3-none-any.whl", &WheelSpec::new("chan-demo", "7.0.0").build());
    let out = promote(&s, 702).await;
    assert_success(&out, "promote 7.1.2");
    assert!(text(&out).contains("version 3 of nightly is current"), "{}", text(&out));

    // (apt's `by-hash/` keeps earlier generations for their grace period: only the ones the
    // version's `Release` names are read.)
    let release_file = version_pages(&store, "nightly", 3)
        .into_iter()
        .find(|(p, _)| p.ends_with("dists/stable/Release"))
        .map(|(_, b)| b)
        .expect("version 3 has a Release");
    for (page, body) in version_pages(&store, "nightly", 3) {
        let hash = page.rsplit_once("/by-hash/SHA256/").map(|(_, h)| h);
        if hash.is_some_and(|h| !release_file.contains(h)) {
            continue;
        }
        assert!(!body.contains("7.1.1"), "version 3's {page} names a 7.1.1 file:\n{body}");
    }
    let pages = version_pages(&store, "nightly", 3);
    let demo = pages.iter().find(|(p, _)| p.ends_with("chan-demo/index.html")).map(|(_, b)| b.as_str()).unwrap_or("");
    assert_eq!(versions_named(demo), ["7.1.0", "7.1.2"], "{demo}");
    let out = quarry(&["channel", "history", "nightly", "--store", &s, "--json"]).await;
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(history["versions"][2]["files"], 6, "{history:#}");
    // The rolled-back files stay stored, and their sidecars with them (version 2 names both).
    for name in ["chan_demo-7.1.1-py3-none-any.whl", "chan_demo-7.1.1-py3-none-any.whl.metadata"] {
        assert!(store.join("nightly/python").join(name).is_file(), "{name} is gone");
    }

    // A prune's version starts from the current one too, even after a reindex put the
    // rolled-back files back in the root's own pages: 7.0.0 goes (the fourth newest), 7.1.1
    // stays out.
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    let out =
        quarry(&["prune", "--store", &s, "--root", "nightly/python/", "--kind", "pip", "--keep-versions", "3"]).await;
    assert_success(&out, "quarry prune");
    assert!(text(&out).contains("version 4 of nightly is current"), "{}", text(&out));
    assert!(!store.join("nightly/python/chan_demo-7.0.0-py3-none-any.whl").exists());
    let pages = version_pages(&store, "nightly", 4);
    let release_file = pages.iter().find(|(p, _)| p.ends_with("dists/stable/Release")).map(|(_, b)| b.clone());
    for (page, body) in pages {
        let hash = page.rsplit_once("/by-hash/SHA256/").map(|(_, h)| h);
        if hash.is_some_and(|h| !release_file.as_deref().unwrap_or_default().contains(h)) {
            continue;
        }
        assert!(!body.contains("7.1.1") && !body.contains("7.0.0"), "version 4's {page}:\n{body}");
    }
    let pages = version_pages(&store, "nightly", 4);
    let demo = pages.iter().find(|(p, _)| p.ends_with("chan-demo/index.html")).map(|(_, b)| b.as_str()).unwrap_or("");
    assert_eq!(versions_named(demo), ["7.1.0", "7.1.2"], "{demo}");

    let server = TestServer::start_in_store(dir).await;
    let index = format!("{}nightly/python/simple/", server.url);
    let tmp = tempfile::tempdir().unwrap();
    let out = pip_install(&["--index-url", &index, "chan-demo==7.1.2"], tmp.path()).await;
    assert_success(&out, "pip install chan-demo==7.1.2");
    assert_eq!(installed(tmp.path()), ["chan_demo-7.1.2.dist-info"]);
    let tmp = tempfile::tempdir().unwrap();
    let out = pip_install(&["--index-url", &index, "chan-demo==7.1.1"], tmp.path()).await;
    assert!(!out.status.success(), "pip installed a rolled-back 7.1.1:\n{}", text(&out));
    for url in [index.clone(), format!("{index}chan-demo/"), format!("{index}chan-extra/")] {
        let body = page(&server.client, &url).await;
        assert!(!body.contains("7.1.1"), "{url} names a 7.1.1 file:\n{body}");
    }
    let apt = quarry_tests::native::Apt::new(
        &scratch.path().join("apt"),
        &format!("deb [trusted=yes] {}nightly/packages/deb/ stable main", server.url),
    );
    apt.update().await;
    let downloads = scratch.path().join("downloads");
    std::fs::create_dir_all(&downloads).unwrap();
    assert_success(&apt.get_in(&downloads, &["download", "chan-deb=7.1.2-1"]).await, "apt-get download 7.1.2");
    let out = apt.get_in(&downloads, &["download", "chan-deb=7.1.1-1"]).await;
    assert!(!out.status.success(), "apt found a rolled-back 7.1.1:\n{}", text(&out));
    // Version 2 is still whole: a rollback to it serves 7.1.1 with its metadata again.
    let out = quarry(&["channel", "rollback", "nightly", "--to", "2", "--store", &s]).await;
    assert_success(&out, "rollback to 2");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let tmp = tempfile::tempdir().unwrap();
    let out = pip_install(&["--index-url", &index, "chan-demo==7.1.1"], tmp.path()).await;
    assert_success(&out, "pip install chan-demo==7.1.1 from version 2");
}

/// `quarry channel forget`: old versions' pages and manifests go (never the current one's),
/// unknown versions are refused by name, a file only forgotten versions named may be deleted,
/// a rollback to a forgotten version is refused, and each call is in the audit log.
#[tokio::test(flavor = "multi_thread")]
async fn forgotten_versions_lose_their_pages_and_hold_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_path_buf();
    let s = store.display().to_string();
    for (run, version) in [(700, "7.1.0"), (701, "7.1.1"), (702, "7.1.2"), (703, "7.1.3")] {
        release(&store, run, version);
    }
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    // v1 7.1.0, v2 + 7.1.1, back to v1, v3 + 7.1.2 (no 7.1.1), v4 + 7.1.3.
    assert_success(&promote(&s, 700).await, "promote 7.1.0");
    assert_success(&promote(&s, 701).await, "promote 7.1.1");
    assert_success(&quarry(&["channel", "rollback", "nightly", "--store", &s]).await, "rollback to 1");
    assert_success(&promote(&s, 702).await, "promote 7.1.2");
    assert_success(&promote(&s, 703).await, "promote 7.1.3");
    let versions = store.join("nightly/.versions");
    let forget = |args: &[&str]| {
        let mut all = vec!["channel", "forget", "nightly"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--store", &s]);
        let all: Vec<String> = all.iter().map(|a| (*a).to_owned()).collect();
        async move { quarry(&all.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };

    // Unknown versions are refused by name, and the current one; nothing changes.
    let out = forget(&["2", "7", "9"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("nightly/ has no version 7, 9 (it has 1, 2, 3, 4)"), "{}", text(&out));
    let out = forget(&["4"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("version 4 is the current version"), "{}", text(&out));
    assert!(versions.join("2").is_dir());

    // Before: version 2 holds 7.1.1's files.
    let held = "nightly/python/chan_demo-7.1.1-py3-none-any.whl";
    let server = TestServer::start_in_store(dir).await;
    let delete = || async {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["delete", &format!("{}{held}", server.url)]).env("QUARRY_TOKEN", quarry_tests::TOKEN);
        run(cmd, Duration::from_secs(60)).await
    };
    let out = delete().await;
    assert!(!out.status.success(), "a file version 2 names was deleted");
    assert!(text(&out).contains("version 2 of channel nightly"), "{}", text(&out));

    // --keep 1 keeps the newest (the current one): 1, 2 and 3 go.
    let out = forget(&["--keep", "1", "--json"]).await;
    assert_success(&out, "quarry channel forget --keep 1");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["forgotten"], serde_json::json!([1, 2, 3]), "{report:#}");
    assert_eq!(report["kept"], serde_json::json!([4]), "{report:#}");
    for n in ["1", "2", "3"] {
        let left: Vec<_> = walk(&versions.join(n));
        assert!(left.is_empty(), "version {n} left {left:?}");
    }
    assert!(versions.join("4/.manifest.json").is_file());
    let out = quarry(&["channel", "history", "nightly", "--store", &s, "--json"]).await;
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kept: Vec<u64> = history["versions"].as_array().unwrap().iter().map(|v| v["n"].as_u64().unwrap()).collect();
    assert_eq!(kept, [4], "{history:#}");

    // A rollback to a forgotten version is refused, saying so; forgetting it again too.
    let out = quarry(&["channel", "rollback", "nightly", "--to", "2", "--store", &s]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("version 2 of nightly/ was forgotten"), "{}", text(&out));
    let out = quarry(&["channel", "rollback", "nightly", "--store", &s]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // 7.1.1 was named by version 2 only: it may go now. The current version still serves.
    assert_success(&delete().await, "quarry delete of a file only forgotten versions named");
    assert!(!store.join(held).exists());
    let tmp = tempfile::tempdir().unwrap();
    let index = format!("{}nightly/python/simple/", server.url);
    let out = pip_install(&["--index-url", &index, "chan-demo"], tmp.path()).await;
    assert_success(&out, "pip install after forget");
    assert_eq!(installed(tmp.path()), ["chan_demo-7.1.3.dist-info"]);

    // A new version never takes a forgotten number.
    release(&store, 704, "7.1.4");
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    let out = promote(&s, 704).await;
    assert!(text(&out).contains("version 5 of nightly is current"), "{}", text(&out));

    let out = quarry(&["audit", "--store", &s, "--key", "nightly", "--json"]).await;
    assert_success(&out, "quarry audit");
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(log.contains("versions 1, 2, 3 forgotten"), "{log}");
    assert!(log.contains("no version 7, 9"), "the refusal is not in the audit log: {log}");
}

/// Files under `dir` (none when it is gone).
fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() { stack.push(path) } else { out.push(path) }
        }
    }
    out
}

/// `tests/cdn/kvs_race.py` in front of `kvs`: a proxy that writes another key before each of
/// the first `races` PutKeys it forwards, so the client's ETag is stale. Its URL and log.
async fn racing_proxy(kvs: &Ministack, races: u32, dir: &Path) -> (tokio::process::Child, String, std::path::PathBuf) {
    let (port_file, log) = (dir.join(format!("port-{races}")), dir.join(format!("log-{races}")));
    let child = tokio::process::Command::new(quarry_tests::venv_dir().join("ministack/bin/python"))
        .arg(quarry_tests::workspace_root().join("tests/cdn/kvs_race.py"))
        .args([kvs.endpoint.as_str(), port_file.to_str().unwrap(), log.to_str().unwrap(), &races.to_string()])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start tests/cdn/kvs_race.py");
    (child, crate::cdn::loopback_url_in(&port_file, "the racing proxy").await, log)
}

/// Another writer between Quarry's DescribeKeyValueStore and its PutKey: the stale ETag is
/// described again and the write retried; a store that changes under every attempt is an
/// error after a bounded number, saying the store's pointer moved.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_keyvaluestore_etag_is_described_again_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_path_buf();
    let s = store.display().to_string();
    release(&store, 700, "7.1.0");
    release(&store, 701, "7.1.1");
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    let kvs = Ministack::start().await;
    let scratch = tempfile::tempdir().unwrap();
    let promote_through = |proxy: String, run_id: u32| {
        let (s, arn) = (s.clone(), kvs.arn.clone());
        async move {
            let mut cmd = tokio::process::Command::new(quarry_bin());
            cmd.args(["promote", "--from", &format!("{run_id}-linux"), "--to", "nightly", "--kinds", "pip"])
                .args(["--store", &s, "--kvs-arn", &arn])
                .env("QUARRY_KVS_ENDPOINT", proxy)
                .env("AWS_ACCESS_KEY_ID", "testing")
                .env("AWS_SECRET_ACCESS_KEY", "testing")
                .env("AWS_REGION", "us-east-1")
                .env("AWS_EC2_METADATA_DISABLED", "true")
                .env_remove("AWS_ENDPOINT_URL")
                .env_remove("QUARRY_CONFIG");
            run(cmd, Duration::from_secs(300)).await
        }
    };

    let (_once, proxy, log) = racing_proxy(&kvs, 1, scratch.path()).await;
    assert_success(&promote_through(proxy, 700).await, "promote with one racing writer");
    assert_eq!(kvs.get("/nightly/").await.as_deref(), Some("1"));
    assert_eq!(kvs.get("/racer/").await.as_deref(), Some("1"), "the proxy did not race");
    let puts: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("PUT ") && l.contains("%2Fnightly%2F"))
        .map(|l| l.rsplit(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(puts, ["409", "200"], "one stale PutKey, then one that landed");

    let (_always, proxy, _) = racing_proxy(&kvs, 99, scratch.path()).await;
    let out = promote_through(proxy, 701).await;
    assert!(!out.status.success(), "a store changing under every write was written:\n{}", text(&out));
    for part in ["changed under each of 5 writes", "pointer already moved to version 2", "key /nightly/ = 2"] {
        assert!(text(&out).contains(part), "no {part:?} in:\n{}", text(&out));
    }
    assert_eq!(kvs.get("/nightly/").await.as_deref(), Some("1"));
    let out = quarry(&["channel", "history", "nightly", "--store", &s, "--json"]).await;
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(history["current"], 2, "{history:#}");
}

/// Promoting again a run the channel holds, after a rollback past it, makes a version with it
/// again (nothing is copied: the files are there, and the current version does not name them).
#[tokio::test(flavor = "multi_thread")]
async fn promoting_a_rolled_back_run_again_makes_a_version_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_path_buf();
    let s = store.display().to_string();
    release(&store, 700, "7.1.0");
    release(&store, 701, "7.1.1");
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    assert_success(&promote(&s, 700).await, "promote 7.1.0");
    assert_success(&promote(&s, 701).await, "promote 7.1.1");
    assert_success(&quarry(&["channel", "rollback", "nightly", "--store", &s]).await, "rollback to 1");
    let out = promote(&s, 701).await;
    assert_success(&out, "promote 7.1.1 again");
    assert!(text(&out).contains("version 3 of nightly is current"), "{}", text(&out));
    let pages = version_pages(&store, "nightly", 3);
    let demo = pages.iter().find(|(p, _)| p.ends_with("chan-demo/index.html")).map(|(_, b)| b.as_str()).unwrap_or("");
    assert_eq!(versions_named(demo), ["7.1.0", "7.1.1"], "{demo}");
    // Once more: the current version names everything, nothing changes, no version.
    let out = promote(&s, 701).await;
    assert_success(&out, "promote 7.1.1 a third time");
    assert!(!text(&out).contains("version 4"), "{}", text(&out));
}
