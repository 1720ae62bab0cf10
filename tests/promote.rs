//! `quarry promote` end to end on a local store: a run with generic and per-family wheels, debs
//! and rpms promoted into `nightly`; pip installs through the family index, apt-get and dnf
//! from the channel's repos, still after the run is deleted with `quarry gc`; promoting again
//! writes nothing; other bytes under a name the channel holds are refused with nothing changed.
//! Through the `therock-release` preset: a channel resolves before its first promotion, and
//! apt-get and dnf install from `v3/packages/deb/` and `v3/packages/rpm/x86_64/` before and
//! after the run is deleted.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use quarry_tests::native::{Apt, build_fixtures, dnf, files_in, text};
use quarry_tests::{TestServer, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run, uv_pip};

async fn quarry(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args)
        .env_remove("QUARRY_GRACE_SECONDS")
        .env_remove("QUARRY_SIGNING_KEY")
        .env_remove("QUARRY_SIGNING_KEY_FILE")
        .env_remove("QUARRY_CONFIG");
    run(cmd, Duration::from_secs(300)).await
}

/// Every file of the store with its bytes' length and modification time.
fn snapshot(dir: &Path) -> BTreeMap<String, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                let key = entry.path().strip_prefix(dir).unwrap().to_string_lossy().replace('\\', "/");
                out.insert(key, (meta.len(), meta.modified().unwrap()));
            }
        }
    }
    out
}

fn wheels() -> [WheelSpec; 3] {
    [
        WheelSpec::new("rocm-sdk-core", "7.0.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx94X-dcgpu", "7.0.0").requires("rocm-sdk-core==7.0.0"),
        WheelSpec::new("rocm-sdk-libraries-gfx120X-all", "7.0.0").requires("rocm-sdk-core==7.0.0"),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_promoted_run_installs_from_the_channel_after_the_run_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path().to_path_buf();
    let s = store.display().to_string();
    for w in wheels() {
        plant(&store, &format!("500-linux/python/{}", w.filename()), &w.build());
    }
    for f in files_in(&fixtures.join("deb")) {
        let name = f.file_name().unwrap().to_str().unwrap();
        plant(&store, &format!("500-linux/packages/deb/pool/main/{name}"), &std::fs::read(&f).unwrap());
    }
    for f in files_in(&fixtures.join("rpm")) {
        let name = f.file_name().unwrap().to_str().unwrap();
        plant(&store, &format!("500-linux/packages/rpm/x86_64/{name}"), &std::fs::read(&f).unwrap());
    }
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let manifest =
        format!(r#"{{"run_id":"500","platform":"linux","commit":"{commit}","created":"2026-11-24T00:00:00Z"}}"#);
    plant(&store, "500-linux/.run-manifest.json", manifest.as_bytes());
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    let built = std::fs::read(store.join("500-linux/python/simple/rocm-sdk-core/index.json")).unwrap();
    let built: serde_json::Value = serde_json::from_slice(&built).unwrap();
    let built = built["files"][0]["upload-time"].as_str().unwrap().to_owned();

    let promote = ["promote", "--from", "500-linux", "--to", "nightly", "--families", "gfx94X-dcgpu,gfx120X-all"];
    let before = snapshot(&store);
    let out = quarry(&[&promote[..], &["--store", &s, "--dry-run", "--json"]].concat()).await;
    assert_success(&out, "quarry promote --dry-run");
    assert_eq!(snapshot(&store), before, "--dry-run changed the store");

    let out = quarry(&[&promote[..], &["--store", &s, "--json"]].concat()).await;
    assert_success(&out, "quarry promote");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let to: Vec<&str> = report["files"].as_array().unwrap().iter().map(|f| f["to"].as_str().unwrap()).collect();
    assert!(to.contains(&"nightly/python/gfx94X-dcgpu/rocm_sdk_core-7.0.0-py3-none-any.whl"), "{to:?}");
    assert!(to.contains(&"nightly/python/gfx120X-all/rocm_sdk_core-7.0.0-py3-none-any.whl"), "{to:?}");
    assert!(!to.iter().any(|t| t.starts_with("nightly/python/gfx120X-all/rocm_sdk_libraries_gfx94X")), "{to:?}");
    let install = report["install"].to_string();
    assert!(install.contains("pip: --index-url ") && install.contains("dnf: baseurl=") && install.contains("apt: deb"));
    assert!(report["files"].as_array().unwrap().iter().all(|f| f["status"] == "copy"));
    assert_provenance(&store.join("nightly/python/gfx94X-dcgpu/simple/rocm-sdk-core/index.json"), commit, &built);

    // Again: nothing to copy, nothing written.
    let before = snapshot(&store);
    let out = quarry(&[&promote[..], &["--store", &s, "--json"]].concat()).await;
    assert_success(&out, "quarry promote again");
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(again["files"].as_array().unwrap().iter().all(|f| f["status"] == "same"), "{again:#}");
    assert_eq!(snapshot(&store), before, "promoting again wrote something");

    // A newer run with other bytes under a name the channel holds: refused, nothing changed.
    let other = WheelSpec::new("rocm-sdk-core", "7.0.0").requires_python(">=3.9");
    plant(&store, &format!("501-linux/python/{}", other.filename()), &other.build());
    assert_success(&quarry(&["index", &s]).await, "quarry index 501");
    let before = snapshot(&store);
    let out =
        quarry(&["promote", "--from", "501-linux", "--to", "nightly", "--families", "gfx94X-dcgpu", "--store", &s])
            .await;
    assert!(!out.status.success(), "conflicting bytes were promoted");
    assert!(text(&out).contains("other bytes"), "{}", text(&out));
    assert_eq!(snapshot(&store), before, "a refused promotion changed the store");

    // The run is deleted; the channel still installs.
    assert_success(&quarry(&["gc", "--store", &s, "--keep-last", "1"]).await, "quarry gc");
    assert!(!store.join("500-linux").exists());
    let server = TestServer::start_in_store(store_dir).await;
    let target = tmp.path().join("site");
    let index_url = format!("{}nightly/python/gfx94X-dcgpu/simple/", server.url);
    let out = pip_install(&["--index-url", &index_url, "rocm-sdk-libraries-gfx94X-dcgpu"], &target).await;
    assert_success(&out, "pip install from the channel's family index");
    assert_eq!(
        installed(&target),
        ["rocm_sdk_core-7.0.0.dist-info", "rocm_sdk_libraries_gfx94X_dcgpu-7.0.0.dist-info"]
    );
    // uv negotiates the JSON pages, private `_quarry_*` keys and all.
    let uv_target = tmp.path().join("uv-site");
    let out =
        uv_pip("install", &["--index-url", &index_url, "rocm-sdk-libraries-gfx94X-dcgpu"], Some(&uv_target)).await;
    assert_success(&out, "uv pip install from the channel's family index");
    assert_eq!(installed(&uv_target), installed(&target));

    let apt = Apt::new(
        &tmp.path().join("apt"),
        &format!("deb [trusted=yes] {}nightly/packages/deb/ stable main", server.url),
    );
    apt.update().await;
    let plan = apt.get(&["install", "-s", "quarry-hello"]).await;
    assert_success(&plan, "apt-get install -s from the channel");
    let repo = format!("{}nightly/packages/rpm/x86_64/", server.url);
    let root = tmp.path().join("dnf");
    let out = dnf(&repo, &root, &[], &["install", "quarry-hello"]).await;
    assert_success(&out, "dnf install from the channel");
    assert!(root.join("usr/bin/quarry-hello").exists(), "{}", text(&out));
    server.stop().await;
}

/// A promoted file's PEP 691 object names its source run, platform and commit, and its
/// `upload-time` is when it entered the channel (after the run's `built`).
fn assert_provenance(page: &Path, commit: &str, built: &str) {
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(page).unwrap()).unwrap();
    let file = &json["files"][0];
    assert_eq!(file["_quarry_source_run"], "500", "{json:#}");
    assert_eq!(file["_quarry_source_platform"], "linux", "{json:#}");
    assert_eq!(file["_quarry_source_commit"], commit, "{json:#}");
    assert!(file["upload-time"].as_str().unwrap() > built, "built {built}: {json:#}");
}

#[tokio::test]
async fn bad_promotions_are_refused() {
    let store_dir = tempfile::tempdir().unwrap();
    let s = store_dir.path().display().to_string();
    let out = quarry(&["promote", "--from", "python", "--to", "nightly", "--store", &s]).await;
    assert!(!out.status.success());
    assert!(text(&out).contains("names no RUN-PLATFORM"), "{}", text(&out));
    let out = quarry(&["promote", "--from", "9-linux", "--to", "nightly", "--kinds", "npm", "--store", &s]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("invalid value 'npm' for '--kinds"), "{}", text(&out));
    let out = quarry(&["promote", "--from", "9-linux", "--to", "nightly", "--store", &s]).await;
    assert!(text(&out).contains("holds no wheels"), "{}", text(&out));
}

/// A channel laid out by the `therock-release` preset (`v2/{family}/`): `--init` publishes
/// valid empty indexes (pip finds no distribution rather than a missing page; apt and dnf load
/// empty repos), and a promotion then lands in the preset's roots.
#[tokio::test(flavor = "multi_thread")]
async fn a_preset_channel_resolves_before_its_first_promotion() {
    let tmp = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path().to_path_buf();
    let s = store.display().to_string();
    let config = tmp.path().join("quarry.toml");
    std::fs::write(&config, "[layout]\npreset = \"therock-release\"\n").unwrap();
    let c = config.display().to_string();
    let init = ["promote", "--init", "--to", "v2", "--families", "gfx94X-dcgpu", "--config", &c, "--store", &s];
    assert_success(&quarry(&init).await, "quarry promote --init");
    assert!(store.join("v2/gfx94X-dcgpu/simple/index.html").exists());
    let before = snapshot(&store);
    assert_success(&quarry(&init).await, "quarry promote --init again");
    assert_eq!(snapshot(&store), before, "--init rewrote an existing index");

    let server = TestServer::start_in_store(store_dir).await;
    let target = tmp.path().join("site");
    let index_url = format!("{}v2/gfx94X-dcgpu/simple/", server.url);
    let out = pip_install(&["--index-url", &index_url, "rocm-sdk-core"], &target).await;
    assert!(!out.status.success());
    assert!(text(&out).contains("No matching distribution found for rocm-sdk-core"), "{}", text(&out));
    let apt =
        Apt::new(&tmp.path().join("apt"), &format!("deb [trusted=yes] {}v2/packages/deb/ stable main", server.url));
    apt.update().await;
    let out =
        dnf(&format!("{}v2/packages/rpm/x86_64/", server.url), &tmp.path().join("dnf"), &[], &["makecache"]).await;
    assert_success(&out, "dnf makecache on an empty channel repo");

    for w in wheels() {
        plant(&store, &format!("600-linux/python/{}", w.filename()), &w.build());
    }
    let out =
        quarry(&["promote", "--from", "600-linux", "--to", "v2", "--kinds", "pip", "--config", &c, "--store", &s])
            .await;
    assert_success(&out, "quarry promote into the preset channel");
    // The generic core once, in the generic root the family views link.
    assert!(store.join("v2/generic/rocm_sdk_core-7.0.0-py3-none-any.whl").exists(), "{}", text(&out));
    assert!(!store.join("v2/gfx94X-dcgpu/rocm_sdk_core-7.0.0-py3-none-any.whl").exists());
    assert!(store.join("v2/gfx120X-all/simple/rocm-sdk-libraries-gfx120x-all/index.html").exists());
    let out = pip_install(&["--index-url", &index_url, "rocm-sdk-libraries-gfx94X-dcgpu"], &target).await;
    assert_success(&out, "pip install from v2/gfx94X-dcgpu/");
    server.stop().await;
}

/// apt-get and dnf through the `therock-release` preset's own repos: a run's debs and rpms
/// promoted with `--to v3` land in `v3/packages/deb/` and `v3/packages/rpm/x86_64/`; apt-get
/// downloads and simulates the install, dnf installs, before and after `quarry gc` deletes the
/// run.
#[tokio::test(flavor = "multi_thread")]
async fn debs_and_rpms_install_from_the_preset_repos_after_the_run_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let config = tmp.path().join("quarry.toml");
    std::fs::write(&config, "[layout]\npreset = \"therock-release\"\n").unwrap();
    let c = config.display().to_string();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path().to_path_buf();
    let s = store.display().to_string();
    for (dir, root) in [("deb", "packages/deb/pool/main"), ("rpm", "packages/rpm/x86_64")] {
        for f in files_in(&fixtures.join(dir)) {
            let name = f.file_name().unwrap().to_str().unwrap();
            plant(&store, &format!("520-linux/{root}/{name}"), &std::fs::read(&f).unwrap());
        }
    }
    // A later run, so that `gc --keep-last 1` deletes the promoted one.
    let later = WheelSpec::new("later", "1.0");
    plant(&store, &format!("521-linux/python/{}", later.filename()), &later.build());
    let promote = ["promote", "--from", "520-linux", "--to", "v3", "--kinds", "deb,rpm", "--json"];
    let out = quarry(&[&promote[..], &["--config", &c, "--store", &s]].concat()).await;
    assert_success(&out, "quarry promote --to v3");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let to: Vec<&str> = report["files"].as_array().unwrap().iter().map(|f| f["to"].as_str().unwrap()).collect();
    assert!(to.iter().any(|t| t.starts_with("v3/packages/deb/pool/main/") && t.ends_with(".deb")), "{to:?}");
    assert!(to.iter().any(|t| t.starts_with("v3/packages/rpm/x86_64/") && t.ends_with(".rpm")), "{to:?}");
    assert_eq!(report["roots"], serde_json::json!(["v3/packages/deb/", "v3/packages/rpm/x86_64/"]), "{report:#}");

    let server = TestServer::start_in_store(store_dir).await;
    for round in ["before gc", "after gc"] {
        if round == "after gc" {
            assert_success(&quarry(&["gc", "--store", &s, "--keep-last", "1"]).await, "quarry gc");
            assert!(!store.join("520-linux").exists() && store.join("521-linux").exists());
        }
        let dir = tmp.path().join(round.replace(' ', "-"));
        let apt = Apt::new(&dir.join("apt"), &format!("deb [trusted=yes] {}v3/packages/deb/ stable main", server.url));
        apt.update().await;
        let downloads = dir.join("downloads");
        std::fs::create_dir_all(&downloads).unwrap();
        assert_success(&apt.get_in(&downloads, &["download", "quarry-hello"]).await, "apt-get download");
        assert_eq!(files_in(&downloads).len(), 1, "{round}: the .deb was downloaded");
        assert_success(&apt.get(&["install", "-s", "quarry-hello"]).await, "apt-get install -s");
        let root = dir.join("dnf");
        let out =
            dnf(&format!("{}v3/packages/rpm/x86_64/", server.url), &root, &[], &["install", "quarry-hello"]).await;
        assert_success(&out, &format!("dnf install from v3/packages/rpm/x86_64/ ({round})"));
        assert!(root.join("usr/bin/quarry-hello").exists(), "{}", text(&out));
    }
    server.stop().await;
}

/// Families come from the topology, never from a wheel's name or a run's directory: a project
/// named `rocm-sdk-libraries-simple` (which would land in the channel's generated `simple/`),
/// a `python/python/` directory, an unknown device target or `--families` value is refused
/// with exit code 2, naming it, and nothing is written.
#[tokio::test(flavor = "multi_thread")]
async fn families_that_are_no_names_of_the_topology_are_refused() {
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path().to_path_buf();
    let s = store.display().to_string();
    let cases: [(&str, &str, &str); 4] = [
        ("601-linux", "python/", "rocm-sdk-libraries-simple"),
        ("602-linux", "python/", "rocm-sdk-libraries-python"),
        ("603-linux", "python/python/", "rocm-sdk-core"),
        ("604-linux", "python/", "rocm-sdk-device-gfx9999"),
    ];
    for (run, dir, project) in cases {
        let wheel = WheelSpec::new(project, "7.0.0");
        plant(&store, &format!("{run}/{dir}{}", wheel.filename()), &wheel.build());
    }
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    let before = snapshot(&store);
    for (run, _, project) in cases {
        let out = quarry(&["promote", "--from", run, "--to", "chan", "--store", &s]).await;
        assert_eq!(out.status.code(), Some(2), "{run} ({project}): {}", text(&out));
        assert!(
            text(&out).contains("is not an AMDGPU family") || text(&out).contains("no AMDGPU target"),
            "{}",
            text(&out)
        );
        assert_eq!(snapshot(&store), before, "{run}: a refused promotion changed the store");
    }
    let good = WheelSpec::new("rocm-sdk-core", "7.0.0");
    plant(&store, &format!("605-linux/python/{}", good.filename()), &good.build());
    assert_success(&quarry(&["index", &s]).await, "quarry index 605");
    let before = snapshot(&store);
    let out = quarry(&["promote", "--from", "605-linux", "--to", "chan", "--families", "simple", "--store", &s]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("\"simple\" is not an AMDGPU family"), "{}", text(&out));
    let out = quarry(&["promote", "--init", "--to", "chan", "--families", "python", "--store", &s]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(snapshot(&store), before, "a refused promotion changed the store");
}

/// One name, one content per channel: a generic wheel the channel holds in a family's root is
/// refused when another run brings other bytes under its name for another of the channel's
/// roots (here its top root: that run has no family wheels), naming both; nothing changes.
#[tokio::test(flavor = "multi_thread")]
async fn a_name_the_channel_holds_elsewhere_with_other_bytes_is_refused() {
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path().to_path_buf();
    let s = store.display().to_string();
    let core = WheelSpec::new("rocm-sdk-core", "7.1.0");
    let family = WheelSpec::new("rocm-sdk-libraries-gfx94X-dcgpu", "7.1.0").requires("rocm-sdk-core==7.1.0");
    let other_core = WheelSpec::new("rocm-sdk-core", "7.1.0").requires("numpy");
    assert_eq!(core.filename(), other_core.filename());
    assert_ne!(core.build(), other_core.build());
    for spec in [&core, &family] {
        plant(&store, &format!("701-linux/python/{}", spec.filename()), &spec.build());
    }
    plant(&store, &format!("702-linux/python/{}", other_core.filename()), &other_core.build());
    assert_success(&quarry(&["index", &s]).await, "quarry index");
    assert_success(&quarry(&["promote", "--from", "701-linux", "--to", "chan", "--store", &s]).await, "promote 701");
    let held = format!("chan/python/gfx94X-dcgpu/{}", core.filename());
    assert!(store.join(&held).is_file(), "the generic wheel went to the family's root");

    let before = snapshot(&store);
    let out = quarry(&["promote", "--from", "702-linux", "--to", "chan", "--store", &s]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains(&held) && said.contains(&format!("702-linux/python/{}", core.filename())), "{said}");
    assert_eq!(snapshot(&store), before, "a refused promotion changed the store");
    // The same bytes are no conflict: promoting 701 again copies nothing new.
    assert_success(&quarry(&["promote", "--from", "701-linux", "--to", "chan", "--store", &s]).await, "again");
}
