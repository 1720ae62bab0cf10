//! The bucket behind a CDN: `infra/cloudfront/index-router.js`, the CloudFront Function the
//! template deploys, runs under node in a stand-in edge (`tests/cdn/edge.mjs`) in front of a
//! real S3 server (moto); pip (`--index-url`) and uv (PEP 691 JSON negotiated) install through
//! it, and the objects Quarry wrote carry the caching headers a CDN honours.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use quarry_store::{Key, PutOptions, S3Store, StoreExt};
use quarry_tests::s3::{S3Server, create_public_bucket, s3_client};
use quarry_tests::{WheelSpec, assert_success, installed, pip_install, quarry_bin, run, uv_pip, workspace_root};
use serde_json::Value;

fn function_path() -> PathBuf {
    workspace_root().join("infra/cloudfront/index-router.js")
}

/// The function's own unit tests (`node --test`): rewrites, negotiation, redirects, `Vary`.
#[tokio::test]
async fn the_function_passes_its_node_tests() {
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg("--test").arg(workspace_root().join("tests/cdn/index-router.test.mjs"));
    let out = run(cmd, Duration::from_secs(60)).await;
    assert_success(&out, "node --test tests/cdn/index-router.test.mjs");
}

/// What the template deploys is the file the tests run, byte for byte.
#[tokio::test]
async fn the_template_embeds_the_function_verbatim() {
    let path = workspace_root().join("infra/template.yaml");
    let mut cmd = tokio::process::Command::new(quarry_tests::venv().join("bin/python"));
    cmd.args([
        "-c",
        "import json, sys\nfrom cfnlint.decode import decode\ntemplate, errors = decode(sys.argv[1])\nassert not errors, errors\nprint(json.dumps(template, default=str))",
    ])
    .arg(&path);
    let out = run(cmd, Duration::from_secs(60)).await;
    assert_success(&out, "decode infra/template.yaml");
    let template: Value = serde_json::from_slice(&out.stdout).unwrap();
    let function = &template["Resources"]["IndexRouterFunction"]["Properties"];
    assert_eq!(function["FunctionConfig"]["Runtime"], "cloudfront-js-2.0");
    let embedded = function["FunctionCode"].as_str().expect("inline FunctionCode");
    let source = std::fs::read_to_string(function_path()).unwrap();
    assert!(
        embedded == source,
        "infra/template.yaml's FunctionCode differs from infra/cloudfront/index-router.js: embed the file again"
    );
    let associations = &template["Resources"]["Distribution"]["Properties"]["DistributionConfig"]["DefaultCacheBehavior"]
        ["FunctionAssociations"];
    let events: Vec<&str> = associations.as_array().unwrap().iter().map(|a| a["EventType"].as_str().unwrap()).collect();
    assert_eq!(events, ["viewer-request", "viewer-response"]);
    // The function reads the channels' current versions from the template's KeyValueStore.
    let kvs = &function["FunctionConfig"]["KeyValueStoreAssociations"][0]["KeyValueStoreARN"];
    assert_eq!(kvs["Fn::GetAtt"][0], "ChannelVersions", "{kvs}");
    assert_eq!(template["Resources"]["ChannelVersions"]["Type"], "AWS::CloudFront::KeyValueStore");
}

/// The stand-in edge: node running the function in front of `origin`; killed when dropped.
pub(crate) struct Edge {
    _child: tokio::process::Child,
    pub(crate) url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Edge {
    pub(crate) async fn start(origin: &str) -> Self {
        Self::start_with_kvs(origin, None).await
    }

    /// The edge with its KeyValueStore served from `kvs` (a JSON object, read on each lookup).
    pub(crate) async fn start_with_kvs(origin: &str, kvs: Option<&std::path::Path>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let log = dir.path().join("edge.log");
        let child = tokio::process::Command::new("node")
            .arg(workspace_root().join("tests/cdn/edge.mjs"))
            .arg(function_path())
            .arg(origin)
            .arg(&port_file)
            .args(kvs)
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("start node tests/cdn/edge.mjs");
        let url = loopback_url_in(&port_file, "the edge").await;
        Self { _child: child, url, log, _dir: dir }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The loopback URL of a helper process that writes its port to `port_file` once it listens
/// (`what` names it if it never does, within 10 s).
pub(crate) async fn loopback_url_in(port_file: &std::path::Path, what: &str) -> String {
    for _ in 0..200 {
        let port = std::fs::read_to_string(port_file).unwrap_or_default();
        if !port.is_empty() {
            return format!("http://127.0.0.1:{port}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not start");
}

#[tokio::test(flavor = "multi_thread")]
async fn pip_and_uv_install_through_the_cloudfront_function() {
    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    // The edge reads the bucket without signing (CloudFront's origin access control signs in
    // production; anonymous reads stand in for it here).
    create_public_bucket(&client, "artifacts").await;
    let store = Arc::new(S3Store::from_client(client.clone(), "artifacts", "ci/"));
    let specs = [WheelSpec::new("cdn-demo", "1.0"), WheelSpec::new("cdn-demo", "2.0").requires_python(">=3.99")];
    for spec in &specs {
        let key = Key::new(format!("555-linux/python/{}", spec.filename())).unwrap();
        store.put_bytes(&key, spec.build().into(), PutOptions::default()).await.unwrap();
    }
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["index", "s3://artifacts/ci/"]).envs(server.client_env());
    assert_success(&run(cmd, Duration::from_secs(120)).await, "quarry index s3://");

    let edge = Edge::start(&format!("{}/artifacts", server.endpoint)).await;
    let index_url = format!("{}/ci/555-linux/python/simple/", edge.url);

    // pip through the CDN's --index-url.
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("pip");
    let out = pip_install(&["--index-url", &index_url, "cdn-demo"], &target).await;
    assert_success(&out, "pip install through the edge");
    assert_eq!(installed(&target), ["cdn_demo-1.0.dist-info"]);

    // uv asks for PEP 691 JSON: the function serves index.json.
    let target = tmp.path().join("uv");
    let out = uv_pip("install", &["--index-url", &index_url, "cdn-demo"], Some(&target)).await;
    assert_success(&out, "uv pip install through the edge");
    assert_eq!(installed(&target), ["cdn_demo-1.0.dist-info"]);
    let log = edge.log();
    assert!(
        log.contains("/ci/555-linux/python/simple/cdn-demo/ -> /ci/555-linux/python/simple/cdn-demo/index.json 200"),
        "{log}"
    );

    // Headers as the CDN sees them: pages revalidate and vary on Accept, wheels are immutable.
    let http = reqwest::Client::new();
    let page = http.get(format!("{index_url}cdn-demo/")).header("accept", "text/html").send().await.unwrap();
    assert_eq!(page.status(), 200, "{:?}", page.headers());
    assert_eq!(page.headers()["cache-control"], "no-cache");
    assert_eq!(page.headers()["vary"], "Accept");
    assert!(page.text().await.unwrap().contains("cdn_demo-1.0-py3-none-any.whl"));
    let wheel = http.get(format!("{}/ci/555-linux/python/{}", edge.url, specs[0].filename())).send().await.unwrap();
    assert_eq!(wheel.status(), 200);
    assert_eq!(wheel.headers()["cache-control"], "public, max-age=31536000, immutable");
    assert!(!wheel.headers().contains_key("vary"));
    // A project URL without its slash is redirected, as PyPI does.
    let redirect = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let moved = redirect.get(format!("{index_url}cdn-demo")).send().await.unwrap();
    assert_eq!(moved.status(), 301);
    assert_eq!(moved.headers()["location"], "/ci/555-linux/python/simple/cdn-demo/");
    server.stop().await;
}
