//! Per-family views (`view = "family"`, the `therock-release` preset's `v2/{family}/` over
//! `v2/generic/`): the generic wheels are stored once, in the generic root; each family's pages
//! list them with hrefs across roots, their hashes and PEP 658 sidecars from the generic root;
//! a promotion or prune of the generic root alone refreshes every view; pip and uv install
//! through `quarry serve` and through the CloudFront Function in front of moto.

use std::path::Path;

use crate::promote_clients::serve;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use quarry_store::{Key, PutOptions, S3Store, StoreExt};
use quarry_tests::s3::{S3Server, create_public_bucket, s3_client};
use quarry_tests::{TOKEN, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run, uv_pip};
use reqwest::Url;
use sha2::{Digest, Sha256};

const PRESET: &str = "[layout]\npreset = \"therock-release\"\n";

async fn quarry(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args).env_remove("QUARRY_GRACE_SECONDS").env_remove("QUARRY_CONFIG");
    run(cmd, Duration::from_secs(120)).await
}

/// Two versions of the generic core, the 7.0.0 libraries of two families needing it.
fn release() -> Vec<WheelSpec> {
    vec![
        WheelSpec::new("rocm-sdk-core", "6.0.0"),
        WheelSpec::new("rocm-sdk-core", "7.0.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx94X-dcgpu", "7.0.0").requires("rocm-sdk-core==7.0.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx120X-all", "7.0.0").requires("rocm-sdk-core==7.0.0"),
    ]
}

const INSTALLED: [&str; 2] = ["rocm_sdk_core-7.0.0.dist-info", "rocm_sdk_libraries_gfx94X_dcgpu-7.0.0.dist-info"];

/// The files a PEP 691 page lists: (filename, absolute URL, sha256, core-metadata sha256).
async fn listed(client: &reqwest::Client, page: &Url) -> Vec<(String, Url, String, Option<String>)> {
    let response = client.get(page.clone()).send().await.unwrap();
    assert_eq!(response.status(), 200, "GET {page}");
    let json: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    let files = json["files"].as_array().unwrap().iter();
    files
        .map(|f| {
            let url = page.join(f["url"].as_str().unwrap()).unwrap();
            let metadata = f["core-metadata"]["sha256"].as_str().map(str::to_owned);
            (
                f["filename"].as_str().unwrap().to_owned(),
                url,
                f["hashes"]["sha256"].as_str().unwrap().to_owned(),
                metadata,
            )
        })
        .collect()
}

/// Every file the family's pages list resolves to its bytes (sha256 checked), and a wheel's
/// `.metadata` sidecar (PEP 658: the file's URL + `.metadata`) to the advertised hash; the
/// filenames listed for `project`.
async fn check_view(client: &reqwest::Client, base: &Url, family: &str, project: &str) -> Vec<String> {
    let page = base.join(&format!("v2/{family}/simple/{project}/index.json")).unwrap();
    let mut names = Vec::new();
    for (name, url, sha256, metadata) in listed(client, &page).await {
        let body = client.get(url.clone()).send().await.unwrap();
        assert_eq!(body.status(), 200, "{page} names {url}");
        assert_eq!(hex::encode(Sha256::digest(body.bytes().await.unwrap())), sha256, "{url}");
        if let Some(metadata) = metadata {
            let sidecar = client.get(format!("{url}.metadata")).send().await.unwrap();
            assert_eq!(sidecar.status(), 200, "{url}.metadata");
            assert_eq!(hex::encode(Sha256::digest(sidecar.bytes().await.unwrap())), metadata, "{url}.metadata");
        }
        names.push(name);
    }
    names
}

/// The generic core's copies under `v2/`, as paths relative to it.
fn cores(store: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for family in std::fs::read_dir(store.join("v2")).unwrap() {
        let family = family.unwrap();
        // The channel's own records (`.channel.json`, `.versions/`) are no family root.
        if family.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        for file in std::fs::read_dir(family.path()).unwrap() {
            let name = file.unwrap().file_name().to_string_lossy().into_owned();
            if name.starts_with("rocm_sdk_core-") && name.ends_with(".whl") {
                found.push(format!("{}/{name}", family.file_name().to_string_lossy()));
            }
        }
    }
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn family_views_link_the_generic_root_and_follow_its_promotions_and_prunes() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("quarry.toml");
    std::fs::write(&config, PRESET).unwrap();
    let token = tmp.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let c = config.display().to_string();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path();
    let s = store.display().to_string();
    for w in release() {
        plant(store, &format!("700-linux/python/{}", w.filename()), &w.build());
    }
    let promote = |run: &'static str| {
        let (s, c) = (s.clone(), c.clone());
        async move {
            let args = ["promote", "--from", run, "--to", "v2", "--kinds", "pip", "--config", &c, "--store", &s];
            quarry(&[&args[..], &["--families", "gfx94X-dcgpu,gfx120X-all"]].concat()).await
        }
    };
    assert_success(&promote("700-linux").await, "quarry promote");
    let want = ["generic/rocm_sdk_core-6.0.0-py3-none-any.whl", "generic/rocm_sdk_core-7.0.0-py3-none-any.whl"];
    assert_eq!(cores(store), want, "each generic wheel stored once, in the generic root");
    let check = ["index", &s, "--prefix", "v2/", "--check", "--config", &c];
    assert_success(&quarry(&check).await, "quarry index --check: the views' links into the generic root resolve");

    let served = serve(store, &config, &token).await;
    let base = Url::parse(&served.url).unwrap();
    let client = reqwest::Client::new();
    for family in ["gfx94X-dcgpu", "gfx120X-all"] {
        let listed = check_view(&client, &base, family, "rocm-sdk-core").await;
        assert_eq!(listed, ["rocm_sdk_core-6.0.0-py3-none-any.whl", "rocm_sdk_core-7.0.0-py3-none-any.whl"]);
        let page = client.get(base.join(&format!("v2/{family}/simple/rocm-sdk-core/")).unwrap()).send().await;
        let html = page.unwrap().text().await.unwrap();
        assert!(html.contains("href=\"../../../generic/rocm_sdk_core-7.0.0-py3-none-any.whl#sha256="), "{html}");
        let root = client.get(base.join(&format!("v2/{family}/simple/")).unwrap()).send().await;
        assert!(root.unwrap().text().await.unwrap().contains("rocm-sdk-core"), "{family}'s simple index");
    }
    // The browse pages: the runs page links the channels, each root's files show where they came from.
    let runs = client.get(&served.url).send().await.unwrap().text().await.unwrap();
    assert!(runs.contains("href=\"/-/channel/\""), "the runs page links the channel roots");
    let channels = client.get(base.join("-/channel/").unwrap()).send().await.unwrap().text().await.unwrap();
    assert!(channels.contains("href=\"/-/channel/v2/gfx94X-dcgpu/\""), "{channels}");
    let shot = tmp.path().join("channel.png");
    let dom = crate::browse::chromium(&format!("{}-/channel/v2/gfx94X-dcgpu/", served.url), &shot).await;
    assert_eq!(crate::browse::by_id(&dom, "file-count"), "3 files, 3 promoted from runs.");
    let core_row = dom.split("<tr data-file=\"rocm_sdk_core-7.0.0-py3-none-any.whl\"").nth(1).expect("the core's row");
    let core_row = &core_row[..core_row.find("</tr>").unwrap()];
    assert!(core_row.contains("from v2/generic/") && core_row.contains("href=\"/700-linux/\">700</a>"), "{core_row}");
    assert!(crate::browse::links_resolve(&served.url, &dom).await >= 6, "the page's links resolve");
    let index = format!("{}v2/gfx94X-dcgpu/simple/", served.url);
    let target = tmp.path().join("pip");
    let out = pip_install(&["--index-url", &index, "rocm-sdk-libraries-gfx94X-dcgpu"], &target).await;
    assert_success(&out, "pip install through the family view");
    assert_eq!(installed(&target), INSTALLED);
    let target = tmp.path().join("uv");
    let out = uv_pip("install", &["--index-url", &index, "rocm-sdk-libraries-gfx94X-dcgpu"], Some(&target)).await;
    assert_success(&out, "uv pip install through the family view");
    assert_eq!(installed(&target), INSTALLED);

    // A run with generic wheels only: promote reindexes the generic root, which brings the views.
    let core = WheelSpec::new("rocm-sdk-core", "8.0.0");
    plant(store, &format!("701-linux/python/{}", core.filename()), &core.build());
    assert_success(&promote("701-linux").await, "promoting a generic-only run");
    for family in ["gfx94X-dcgpu", "gfx120X-all"] {
        let listed = check_view(&client, &base, family, "rocm-sdk-core").await;
        assert!(listed.contains(&core.filename()), "{family}: {listed:?}");
    }

    // Pruning the generic root refreshes the views: they stop naming what it deleted.
    let prune = ["prune", "--store", &s, "--root", "v2/generic/", "--kind", "pip", "--keep-versions", "1"];
    let out = quarry(&[&prune[..], &["--config", &c]].concat()).await;
    assert_success(&out, "quarry prune of the generic root");
    // The views were republished without the pruned files before those were deleted.
    let log = String::from_utf8_lossy(&out.stderr);
    for family in ["gfx94X-dcgpu", "gfx120X-all"] {
        let line = log.lines().find(|l| l.contains("view refreshed before a deletion") && l.contains(family));
        let line = line.unwrap_or_else(|| panic!("{family}'s view was not refreshed before the deletion:\n{log}"));
        // The project's two pages (a channel root has no find-links page unless configured).
        assert!(line.contains(": 0 added, 0 removed, 0 rejected, 2 written"), "{line}");
    }
    assert_eq!(cores(store), [format!("generic/{}", core.filename())]);
    for family in ["gfx94X-dcgpu", "gfx120X-all"] {
        assert_eq!(check_view(&client, &base, family, "rocm-sdk-core").await, [core.filename()], "{family}");
        // A channel root writes no find-links page unless its rule says so.
        assert!(!store.join(format!("v2/{family}/index.html")).exists(), "{family}");
    }
    assert_success(&quarry(&check).await, "quarry index --check after the prune");
}

#[tokio::test(flavor = "multi_thread")]
async fn pip_and_uv_install_a_family_view_through_the_cloudfront_function() {
    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    create_public_bucket(&client, "releases").await;
    let store = Arc::new(S3Store::from_client(client.clone(), "releases", ""));
    for w in release() {
        let key = Key::new(format!("710-linux/python/{}", w.filename())).unwrap();
        store.put_bytes(&key, w.build().into(), PutOptions::default()).await.unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("quarry.toml");
    std::fs::write(&config, PRESET).unwrap();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["promote", "--from", "710-linux", "--to", "v2", "--kinds", "pip", "--store", "s3://releases/"])
        .arg("--config")
        .arg(&config)
        .envs(server.client_env())
        .env_remove("QUARRY_CONFIG");
    assert_success(&run(cmd, Duration::from_secs(120)).await, "quarry promote into the bucket");
    let wheels = store.list_all("v2/", false).await.unwrap().objects.into_iter().map(|o| o.key.to_string());
    let cores: Vec<String> = wheels.filter(|k| k.contains("rocm_sdk_core-") && k.ends_with(".whl")).collect();
    assert!(cores.iter().all(|k| k.starts_with("v2/generic/")) && cores.len() == 2, "{cores:?}");

    let edge = crate::cdn::Edge::start(&format!("{}/releases", server.endpoint)).await;
    let index = format!("{}/v2/gfx94X-dcgpu/simple/", edge.url);
    let target = tmp.path().join("pip");
    let out = pip_install(&["--index-url", &index, "rocm-sdk-libraries-gfx94X-dcgpu"], &target).await;
    assert_success(&out, "pip install through the edge");
    assert_eq!(installed(&target), INSTALLED);
    let target = tmp.path().join("uv");
    let out = uv_pip("install", &["--index-url", &index, "rocm-sdk-libraries-gfx94X-dcgpu"], Some(&target)).await;
    assert_success(&out, "uv pip install through the edge");
    assert_eq!(installed(&target), INSTALLED);
    let log = edge.log();
    assert!(
        log.contains("/v2/gfx94X-dcgpu/simple/rocm-sdk-core/ -> /v2/gfx94X-dcgpu/simple/rocm-sdk-core/index.json 200"),
        "{log}"
    );
    assert!(log.contains("/v2/generic/rocm_sdk_core-7.0.0-py3-none-any.whl"), "{log}");
    server.stop().await;
}
