//! The run browser and the operations surface of `quarry serve`, through the binary with a
//! `quarry.toml`: headless Chromium (Debian's `chromium`) renders the run list, a run page and
//! a package page of a store populated here; the DOM it built is checked (rows, links that
//! resolve, install lines that really install with pip, apt and dnf) and screenshots are kept
//! under `target/test-artifacts/browse/`. Scoped tokens and a private store are checked with
//! real requests and pip; `/metrics` is parsed with the Prometheus client library's own parser
//! and must count what the test did.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use quarry_tests::native::{Apt, build_fixtures, dnf, files_in, text};
use quarry_tests::{
    ServedBinary, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run, sha256_hex, venv,
    workspace_root,
};

const ADMIN: &str = "admin-token-0123456789abcdef";
const CI: &str = "ci-token-123-only-0123456789";

const TOPOLOGY: &str = r#"
[metadata]
version = "2.0"

[build_stages.foundation]
artifact_groups = ["base"]

[build_stages.math-libs]
artifact_groups = ["math"]
type = "per-arch"

[artifact_groups.base]

[artifact_groups.math]
type = "per-arch"
artifact_group_deps = ["base"]

[artifacts.sysdeps]
artifact_group = "base"

[artifacts.blas]
artifact_group = "math"
type = "target-specific"
artifact_deps = ["sysdeps"]

[artifacts.fft]
artifact_group = "math"
type = "target-specific"
"#;

pub(crate) struct Served {
    _server: ServedBinary,
    pub(crate) url: String,
    stderr: PathBuf,
}

/// `quarry serve --config FILE` on a free loopback port with `env`; stderr (the access log)
/// to a file.
pub(crate) async fn serve(dir: &Path, config: &str, extra: &[&str], env: &[(String, String)]) -> Served {
    let config_path = dir.join("quarry.toml");
    std::fs::write(&config_path, config).unwrap();
    let stderr = dir.join("serve.stderr");
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--config"])
        .arg(&config_path)
        .args(extra)
        .current_dir(dir)
        .env_remove("QUARRY_TOKEN")
        .env_remove("QUARRY_STORE")
        .env_remove("QUARRY_PRIVATE")
        .envs(env.iter().cloned())
        .stderr(std::fs::File::create(&stderr).unwrap());
    let server = ServedBinary::start(cmd).await;
    Served { url: server.url.clone(), _server: server, stderr }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().pool_max_idle_per_host(0).timeout(Duration::from_secs(60)).build().unwrap()
}

async fn put(url: &str, token: &str, body: Vec<u8>) -> u16 {
    client().put(url).bearer_auth(token).body(body).send().await.expect("PUT").status().as_u16()
}

/// Chromium's DOM of `url` after it loaded, and a screenshot of it.
pub(crate) async fn chromium(url: &str, screenshot: &Path) -> String {
    let profile = tempfile::tempdir().unwrap();
    let common = |cmd: &mut tokio::process::Command| {
        cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("--window-size=1280,1000")
            .env("HOME", profile.path());
    };
    let mut dom = tokio::process::Command::new("chromium");
    common(&mut dom);
    dom.args(["--dump-dom", url]);
    let out = run(dom, Duration::from_secs(120)).await;
    assert_success(&out, &format!("chromium --dump-dom {url}"));
    let page = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut shot = tokio::process::Command::new("chromium");
    common(&mut shot);
    shot.arg(format!("--screenshot={}", screenshot.display())).arg(url);
    let out = run(shot, Duration::from_secs(120)).await;
    assert_success(&out, &format!("chromium --screenshot {url}"));
    let png = std::fs::read(screenshot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 5000, "{} is a real PNG", screenshot.display());
    page
}

/// The text inside the element with `id` (entities decoded as Chromium serializes them).
pub(crate) fn by_id(dom: &str, id: &str) -> String {
    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in the DOM"));
    let start = at + dom[at..].find('>').unwrap() + 1;
    let end = start + dom[start..].find("</").unwrap();
    unescape(&dom[start..end])
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'").replace("&amp;", "&")
}

/// Every `href` in the DOM.
pub(crate) fn hrefs(dom: &str) -> Vec<String> {
    dom.match_indices("href=\"")
        .map(|(i, m)| {
            let rest = &dom[i + m.len()..];
            unescape(&rest[..rest.find('"').unwrap()])
        })
        .collect()
}

/// Every link on a page answers 200 (relative ones resolved against the server).
pub(crate) async fn links_resolve(base: &str, dom: &str) -> usize {
    let mut checked = 0;
    for href in hrefs(dom) {
        let url =
            if href.starts_with("http") { href.clone() } else { format!("{}{}", base, href.trim_start_matches('/')) };
        if !url.starts_with(base) {
            continue;
        }
        let status = client().get(&url).send().await.expect("GET link").status().as_u16();
        assert_eq!(status, 200, "link {href} on the page");
        checked += 1;
    }
    checked
}

#[tokio::test(flavor = "multi_thread")]
async fn browse_pages_render_in_headless_chromium_and_their_install_lines_work() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let store = dir.join("store");
    std::fs::write(dir.join("BUILD_TOPOLOGY.toml"), TOPOLOGY).unwrap();
    std::fs::write(dir.join("tokens"), format!("{ADMIN}\n{CI} 123-linux/\n")).unwrap();
    let config =
        format!("store = \"{}\"\ntoken_file = \"tokens\"\ntopology = \"BUILD_TOPOLOGY.toml\"\n", store.display());
    let served = serve(dir, &config, &[], &[]).await;
    let url = served.url.clone();

    // Run 123-linux: wheels, debs, rpms (uploaded), stage artifacts and a log (as CI writes them).
    let dep = WheelSpec::new("browse-dep", "1.0").requires_python(">=3.8");
    let old = WheelSpec::new("browse-demo", "1.0");
    let new = WheelSpec::new("browse-demo", "1.1").requires("browse-dep>=1.0").requires_python(">=3.9");
    for spec in [&dep, &old, &new] {
        assert_eq!(put(&format!("{url}123-linux/python/{}", spec.filename()), CI, spec.build()).await, 201);
    }
    let fixtures = dir.join("fixtures");
    build_fixtures(&fixtures, None).await;
    for deb in files_in(&fixtures.join("deb")) {
        let name = deb.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(
            put(&format!("{url}123-linux/packages/deb/pool/main/{name}"), ADMIN, std::fs::read(&deb).unwrap()).await,
            201
        );
    }
    for rpm in files_in(&fixtures.join("rpm")) {
        let name = rpm.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(
            put(&format!("{url}123-linux/packages/rpm/x86_64/{name}"), ADMIN, std::fs::read(&rpm).unwrap()).await,
            201
        );
    }
    let archive = b"not really zstd, but an archive's bytes".to_vec();
    plant(&store, "123-linux/sysdeps_lib_generic.tar.zst", &archive);
    plant(
        &store,
        "123-linux/sysdeps_lib_generic.tar.zst.sha256sum",
        format!("{}  sysdeps_lib_generic.tar.zst\n", sha256_hex(&archive)).as_bytes(),
    );
    plant(&store, "123-linux/blas_lib_gfx942.tar.zst", b"blas");
    plant(&store, "123-linux/logs/math-libs/build.log", b"[1/2] Building blas\n[2/2] Linking\n");
    // Two older runs.
    assert_eq!(put(&format!("{url}122-linux/python/{}", old.filename()), ADMIN, old.build()).await, 201);
    plant(&store, "121-windows/sysdeps_lib_generic.tar.zst", &archive);
    let index = run(
        {
            let mut c = tokio::process::Command::new(quarry_bin());
            c.args(["index"]).arg(&store);
            c
        },
        Duration::from_secs(120),
    )
    .await;
    assert_success(&index, "quarry index (run listings)");

    let shots = workspace_root().join("target/test-artifacts/browse");
    std::fs::create_dir_all(&shots).unwrap();

    // The run list: newest first, what each run holds.
    let dom = chromium(&url, &shots.join("runs.png")).await;
    let rows: Vec<&str> =
        dom.match_indices("data-run=\"").map(|(i, m)| dom[i + m.len()..].split('"').next().unwrap()).collect();
    assert_eq!(rows, ["123-linux", "122-linux", "121-windows"], "newest first");
    let row123 = &dom[dom.find("data-run=\"123-linux\"").unwrap()..dom.find("data-run=\"122-linux\"").unwrap()];
    for kind in ["python", "deb", "rpm", "artifacts", "logs"] {
        assert!(row123.contains(&format!(">{kind}<")), "123-linux holds {kind}: {row123}");
    }
    assert!(by_id(&dom, "run-count").contains("of 3"), "{dom}");
    assert!(links_resolve(&url, &dom).await >= 4);

    // The run page: repos, install lines, artifacts by stage, logs.
    let dom = chromium(&format!("{url}123-linux/"), &shots.join("run.png")).await;
    assert_eq!(by_id(&dom, "install-pip"), format!("pip install --find-links {url}123-linux/python/ browse-demo"));
    assert_eq!(by_id(&dom, "install-uv"), format!("uv pip install --find-links {url}123-linux/python/ browse-demo"));
    let apt_setup = by_id(&dom, "install-apt");
    let deb_line = format!("deb [trusted=yes] {url}123-linux/packages/deb/ stable main");
    assert!(apt_setup.contains(&deb_line), "{apt_setup}");
    let dnf_setup = by_id(&dom, "install-dnf");
    assert!(dnf_setup.contains(&format!("{url}-/dnf/123-linux.repo")), "{dnf_setup}");
    let foundation = &dom[dom.find("data-stage=\"foundation\"").expect("a foundation stage")..];
    assert!(foundation[..foundation.find("data-stage=\"math-libs\"").unwrap()].contains("sysdeps_lib_generic.tar.zst"));
    assert!(dom.contains(&sha256_hex(&archive)), "the sidecar's sha256 is shown");
    let math = &dom[dom.find("data-stage=\"math-libs\"").unwrap()..];
    assert!(math.contains("blas_lib_gfx942.tar.zst") && math.contains("1 not in this run"), "fft was never pushed");
    assert!(dom.contains("math-libs/build.log"));
    assert!(dom.contains("quarry-hello") && dom.contains("amdrocm-fft"), "deb and rpm package rows");
    assert!(links_resolve(&url, &dom).await >= 20, "every package, archive, log and repo link resolves");

    // The install lines install. pip (offline: the run has every dependency):
    let target = dir.join("site");
    let line = by_id(&dom, "install-pip");
    let args: Vec<&str> = line.split_whitespace().skip(2).collect();
    let mut pip_args = vec!["--no-index"];
    pip_args.extend(args);
    let out = pip_install(&pip_args, &target).await;
    assert_success(&out, &line);
    let got = installed(&target);
    assert_eq!(got, ["browse_demo-1.1.dist-info", "browse_dep-1.0.dist-info"]);
    // apt with the line from the page:
    let apt = Apt::new(&dir.join("apt"), &deb_line);
    apt.update().await;
    let out = apt.get(&["install", "-s", "quarry-hello"]).await;
    assert!(text(&out).contains("Inst libquarry-hello") && text(&out).contains("Inst quarry-hello"), "{}", text(&out));
    // dnf with the .repo file the page links:
    let repo_file = client().get(format!("{url}-/dnf/123-linux.repo")).send().await.unwrap().text().await.unwrap();
    let baseurl = repo_file.lines().find_map(|l| l.strip_prefix("baseurl=")).expect("a baseurl").to_owned();
    assert_eq!(baseurl, format!("{url}123-linux/packages/rpm/x86_64/"));
    let out = dnf(
        &baseurl,
        &dir.join("dnfroot"),
        &[],
        &["install", "--downloadonly", "--downloaddir", dir.join("rpms").to_str().unwrap(), "quarry-hello"],
    )
    .await;
    assert_success(&out, "dnf install from the .repo file's baseurl");

    // The package page: versions newest first, sizes, sha256, requires-python, dependencies.
    let dom = chromium(&format!("{url}-/package/123-linux/browse-demo/"), &shots.join("package.png")).await;
    let versions: Vec<&str> =
        dom.match_indices("data-version=\"").map(|(i, m)| dom[i + m.len()..].split('"').next().unwrap()).collect();
    assert_eq!(versions, ["1.1", "1.0"]);
    assert!(dom.contains(&sha256_hex(&new.build())) && dom.contains(&sha256_hex(&old.build())));
    assert_eq!(by_id(&dom, "requires-python"), ">=3.9");
    assert!(by_id(&dom, "deps").contains("browse-dep&gt;=1.0") || by_id(&dom, "deps").contains("browse-dep>=1.0"));
    assert_eq!(by_id(&dom, "install-pip"), format!("pip install --find-links {url}123-linux/python/ browse-demo"));
    assert!(links_resolve(&url, &dom).await >= 3);

    // Unknown runs and projects are 404s, not empty pages.
    assert_eq!(client().get(format!("{url}999-linux/")).send().await.unwrap().status(), 404);
    assert_eq!(client().get(format!("{url}-/package/123-linux/nope/")).send().await.unwrap().status(), 404);
    drop(served);
}

#[tokio::test(flavor = "multi_thread")]
async fn scoped_tokens_and_a_private_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("tokens"), format!("{ADMIN}\n{CI} 123-linux/\n")).unwrap();
    let served = serve(
        dir,
        &format!("store = \"{}\"\ntoken_file = \"tokens\"\n", dir.join("store").display()),
        &["--private"],
        &[],
    )
    .await;
    let url = served.url.clone();
    let wheel = WheelSpec::new("private-demo", "1.0");

    // The CI token writes its own run only.
    assert_eq!(put(&format!("{url}123-linux/python/{}", wheel.filename()), CI, wheel.build()).await, 201);
    assert_eq!(put(&format!("{url}124-linux/python/{}", wheel.filename()), CI, wheel.build()).await, 403);
    assert_eq!(put(&format!("{url}124-linux/python/{}", wheel.filename()), "wrong", wheel.build()).await, 401);
    assert!(!dir.join("store/124-linux").exists(), "nothing written outside the token's prefix");
    // Writes take Bearer tokens only: the admin token as Basic credentials is refused.
    let basic_put = client()
        .put(format!("{url}125-linux/python/{}", wheel.filename()))
        .basic_auth("__token__", Some(ADMIN))
        .body(wheel.build())
        .send()
        .await
        .unwrap();
    assert_eq!(basic_put.status(), 401);
    assert!(!dir.join("store/125-linux").exists(), "nothing written with Basic credentials");

    // Reads need credentials; /healthz does not.
    let anonymous = client().get(format!("{url}123-linux/python/simple/")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(anonymous.headers()["www-authenticate"], "Basic realm=\"quarry\"");
    assert_eq!(client().get(&url).send().await.unwrap().status(), 401, "the run list too");
    assert_eq!(client().get(format!("{url}metrics")).send().await.unwrap().status(), 401);
    assert_eq!(client().get(format!("{url}healthz")).send().await.unwrap().status(), 200);
    let bearer = client().get(format!("{url}123-linux/python/simple/")).bearer_auth(CI).send().await.unwrap();
    assert_eq!(bearer.status(), 200);
    let basic = client().get(format!("{url}123-linux/")).basic_auth("anyone", Some(ADMIN)).send().await.unwrap();
    assert_eq!(basic.status(), 200);
    let wrong = client().get(format!("{url}123-linux/")).basic_auth("anyone", Some("nope")).send().await.unwrap();
    assert_eq!(wrong.status(), 401);

    // pip sends the token from the URL as Basic auth.
    let authed = url.replacen("http://", &format!("http://__token__:{ADMIN}@"), 1);
    let target = dir.join("site");
    let out =
        pip_install(&["--no-index", "--find-links", &format!("{authed}123-linux/python/"), "private-demo"], &target)
            .await;
    assert_success(&out, "pip install from a private store with the token in the URL");
    let out = pip_install(
        &["--no-index", "--find-links", &format!("{url}123-linux/python/"), "private-demo"],
        &dir.join("site2"),
    )
    .await;
    assert!(!out.status.success(), "without the token pip finds nothing");
    drop(served);
}

/// `/metrics` parsed by prometheus_client's text parser (the reference implementation).
async fn parse_metrics(text: &str) -> serde_json::Value {
    let script = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        out.append({"name": s.name, "labels": s.labels, "value": s.value, "type": family.type})
print(json.dumps(out))
"#;
    let mut child = tokio::process::Command::new(venv().join("bin/python"))
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::io::AsyncWriteExt::write_all(child.stdin.as_mut().unwrap(), text.as_bytes()).await.unwrap();
    drop(child.stdin.take());
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output()).await.unwrap().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused /metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn sample(samples: &serde_json::Value, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name && labels.iter().all(|(k, v)| s["labels"][*k] == *v))
        .map(|s| s["value"].as_f64().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_parse_and_count_what_happened_and_access_logs_are_json() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::write(dir.join("tokens"), format!("{ADMIN}\n")).unwrap();
    let served = serve(
        dir,
        &format!("store = \"{}\"\ntoken_file = \"tokens\"\n", dir.join("store").display()),
        &["--log-format", "json"],
        &[],
    )
    .await;
    let url = served.url.clone();
    let wheel = WheelSpec::new("metrics-demo", "1.0");
    let bytes = wheel.build();
    let file = format!("{url}7-linux/python/{}", wheel.filename());
    assert_eq!(put(&file, ADMIN, bytes.clone()).await, 201);
    assert_eq!(put(&file, ADMIN, bytes.clone()).await, 200, "identical bytes again");
    assert_eq!(
        put(&format!("{url}7-linux/python/broken-1.0-py3-none-any.whl"), ADMIN, b"not a zip".to_vec()).await,
        400
    );
    for _ in 0..5 {
        let got = client().get(&file).send().await.unwrap().bytes().await.unwrap();
        assert_eq!(got.len(), bytes.len());
    }
    for _ in 0..3 {
        assert_eq!(
            client().get(format!("{url}7-linux/python/simple/metrics-demo/")).send().await.unwrap().status(),
            200
        );
    }
    assert_eq!(client().get(format!("{url}7-linux/python/nope.whl")).send().await.unwrap().status(), 404);

    let text = client().get(format!("{url}metrics")).send().await.unwrap().text().await.unwrap();
    let samples = parse_metrics(&text).await;
    let requests = "quarry_http_requests_total";
    assert_eq!(sample(&samples, requests, &[("route", "file"), ("method", "GET"), ("status", "200")]), 5.0);
    assert_eq!(sample(&samples, requests, &[("route", "file"), ("status", "404")]), 1.0);
    assert_eq!(sample(&samples, requests, &[("route", "simple"), ("status", "200")]), 3.0);
    assert_eq!(sample(&samples, requests, &[("route", "upload")]), 3.0);
    // Five wheels and one short 404 body.
    let served_bytes = sample(&samples, "quarry_http_response_bytes_total", &[("route", "file")]);
    assert!(
        (5 * bytes.len()) as f64 <= served_bytes && served_bytes < (5 * bytes.len() + 200) as f64,
        "{served_bytes}"
    );
    assert_eq!(sample(&samples, "quarry_uploads_total", &[("kind", "wheel"), ("outcome", "created")]), 1.0);
    assert_eq!(sample(&samples, "quarry_uploads_total", &[("kind", "wheel"), ("outcome", "exists")]), 1.0);
    assert_eq!(sample(&samples, "quarry_uploads_total", &[("kind", "wheel"), ("outcome", "rejected")]), 1.0);
    assert_eq!(sample(&samples, "quarry_upload_bytes_total", &[]), (2 * bytes.len()) as f64);
    assert!(sample(&samples, "quarry_reindex_total", &[("kind", "pip")]) >= 2.0, "each accepted upload reindexed");
    assert_eq!(sample(&samples, "quarry_reindex_failures_total", &[("kind", "pip")]), 0.0);
    assert_eq!(sample(&samples, "quarry_http_request_duration_seconds_count", &[("route", "file")]), 6.0);
    assert!(sample(&samples, "quarry_store_operations_total", &[("op", "put")]) >= 1.0);

    // The access log: one JSON object per request, on stderr.
    let log = std::fs::read_to_string(&served.stderr).unwrap();
    let access: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["target"] == "quarry::access")
        .collect();
    assert!(access.len() >= 13, "{log}");
    let missing = access.iter().find(|v| v["fields"]["path"] == "/7-linux/python/nope.whl").expect("the 404 is logged");
    assert_eq!(missing["fields"]["status"], 404);
    assert_eq!(missing["fields"]["route"], "file");
    drop(served);
}

/// The same pages over a bucket on a real S3 server (s3s-fs on loopback, SigV4 checked).
#[tokio::test(flavor = "multi_thread")]
async fn browse_pages_over_an_s3_store() {
    use quarry_store::{Key, PutOptions, S3Store, StoreExt};
    use quarry_tests::s3::{S3Server, s3_client};

    let server = S3Server::start_s3s_fs().await;
    let s3 = s3_client(&server);
    s3.create_bucket().bucket("runs").send().await.expect("create bucket");
    let bucket = S3Store::from_client(s3, "runs", "");
    let wheel = WheelSpec::new("s3-browse", "2.0");
    for (key, body) in [
        (format!("31-linux/python/{}", wheel.filename()), wheel.build()),
        ("31-linux/sysdeps_lib_generic.tar.zst".to_owned(), b"archive".to_vec()),
        ("30-linux/logs/build.log".to_owned(), b"log".to_vec()),
    ] {
        bucket.put_bytes(&Key::new(key).unwrap(), body.into(), PutOptions::default()).await.unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("BUILD_TOPOLOGY.toml"), TOPOLOGY).unwrap();
    let config = "store = \"s3://runs/\"\ntopology = \"BUILD_TOPOLOGY.toml\"\n";
    let served = serve(tmp.path(), config, &[], &server.client_env()).await;
    let url = served.url.clone();

    let runs = client().get(&url).send().await.unwrap().text().await.unwrap();
    let rows: Vec<&str> =
        runs.match_indices("data-run=\"").map(|(i, m)| runs[i + m.len()..].split('"').next().unwrap()).collect();
    assert_eq!(rows, ["31-linux", "30-linux"], "{runs}");
    let run = client().get(format!("{url}31-linux/")).send().await.unwrap().text().await.unwrap();
    assert!(run.contains(&format!("pip install --find-links {url}31-linux/python/ s3-browse")), "{run}");
    assert!(run.contains("data-stage=\"foundation\"") && run.contains("sysdeps_lib_generic.tar.zst"));
    let package =
        client().get(format!("{url}-/package/31-linux/s3-browse/")).send().await.unwrap().text().await.unwrap();
    assert!(package.contains(&sha256_hex(&wheel.build())), "{package}");
    drop(served);
}

/// 1,000 runs: 50 a page, newest first, the pager reaching the oldest.
#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_runs_paginate() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    for id in 1..=1000 {
        plant(&store, &format!("{id}-linux/logs/build.log"), b"x");
    }
    let served = serve(tmp.path(), &format!("store = \"{}\"\n", store.display()), &[], &[]).await;
    let page = |n: usize| {
        let url = format!("{}?page={n}", served.url);
        async move { client().get(url).send().await.unwrap().text().await.unwrap() }
    };
    let rows = |html: &str| -> Vec<String> {
        html.match_indices("data-run=\"")
            .map(|(i, m)| html[i + m.len()..].split('"').next().unwrap().to_owned())
            .collect()
    };
    let first = page(1).await;
    let ids = rows(&first);
    assert_eq!(ids.len(), 50);
    assert_eq!((ids[0].as_str(), ids[49].as_str()), ("1000-linux", "951-linux"), "numeric order, not text");
    assert!(first.contains("Runs 1–50 of 1000") && first.contains("href=\"/?page=2\""), "a pager");
    let last = page(20).await;
    assert_eq!(rows(&last).last().map(String::as_str), Some("1-linux"));
    assert!(!last.contains("rel=\"next\""));
    assert_eq!(rows(&page(99).await), rows(&last), "past the end shows the last page");
    drop(served);
}
