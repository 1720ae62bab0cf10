//! `quarry prune` end to end: retention inside one flat root. A pip channel root with versions
//! of faked ages keeps the newest N and the recent ones (PEP 440 order), an apt and a dnf root
//! keep the newest by dpkg's and rpm's order; pruned files and sidecars go, the same file name
//! in another root (a run) is untouched, superseded apt/dnf metadata stays for the grace
//! period, and pip, apt-get and dnf still install what was kept.

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use quarry_index::{Indexer, RepoKind, RepoRoot};
use quarry_store::{LocalStore, Store};
use quarry_tests::native::{Apt, DEB_ROOT, RPM_ROOT, build_fixtures, dnf, files_in, text, upload_files};
use quarry_tests::{ROOT, TestServer, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run};

const CHANNEL: &str = "v2/gfx94X-dcgpu/";
const DAY: Duration = Duration::from_secs(86_400);

async fn quarry(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args).env_remove("QUARRY_GRACE_SECONDS").env_remove("QUARRY_SIGNING_KEY");
    run(cmd, Duration::from_secs(120)).await
}

fn json(out: &Output) -> serde_json::Value {
    assert_success(out, "quarry prune");
    serde_json::from_slice(&out.stdout).expect("--json prints JSON")
}

/// `project version` of each version a report lists under `field`.
fn versions(report: &serde_json::Value, field: &str) -> Vec<String> {
    let list = report[field].as_array().expect(field);
    list.iter().map(|v| format!("{} {}", v["project"].as_str().unwrap(), v["version"].as_str().unwrap())).collect()
}

/// Plant a wheel at `prefix` that entered `age` ago.
fn plant_aged(store: &Path, prefix: &str, spec: &WheelSpec, age: Duration) {
    let key = format!("{prefix}{}", spec.filename());
    plant(store, &key, &spec.build());
    let file = std::fs::File::options().write(true).open(store.join(&key)).unwrap();
    file.set_modified(SystemTime::now() - age).unwrap();
}

#[tokio::test]
async fn a_pip_channel_keeps_the_newest_and_the_recent_versions() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().to_path_buf();
    for (version, days) in [("1.0", 100), ("2.0", 50), ("3.0", 40), ("3.1rc1", 1)] {
        plant_aged(&store_dir, CHANNEL, &WheelSpec::new("foo", version), DAY * days);
    }
    plant_aged(&store_dir, CHANNEL, &WheelSpec::new("bar", "0.1"), DAY * 200);
    // The run the channel was filled from holds foo 1.0 under the same name.
    plant_aged(&store_dir, ROOT, &WheelSpec::new("foo", "1.0"), DAY * 100);
    let store: Arc<dyn Store> = Arc::new(LocalStore::open(&store_dir).unwrap());
    let indexer = Indexer::new(store, Default::default());
    for root in
        [RepoRoot::with_kind(CHANNEL, RepoKind::Pip).unwrap(), RepoRoot::new(ROOT, &Default::default()).unwrap()]
    {
        indexer.reindex(&root).await.unwrap();
    }
    let store_arg = store_dir.display().to_string();
    let args = ["prune", "--store", &store_arg, "--root", CHANNEL, "--kind", "pip", "--keep-versions", "2"];
    let args = [&args[..], &["--keep-days", "30", "--json"]].concat();

    let dry = json(&quarry(&[&args[..], &["--dry-run"]].concat()).await);
    assert_eq!(versions(&dry, "pruned"), ["foo 2.0", "foo 1.0"]);
    assert!(store_dir.join(format!("{CHANNEL}foo-1.0-py3-none-any.whl")).exists(), "a dry run deleted");

    let report = json(&quarry(&args).await);
    assert_eq!(versions(&report, "kept"), ["bar 0.1", "foo 3.1rc1", "foo 3.0"]);
    assert_eq!(versions(&report, "pruned"), ["foo 2.0", "foo 1.0"]);
    for gone in ["foo-1.0-py3-none-any.whl", "foo-2.0-py3-none-any.whl", "foo-2.0-py3-none-any.whl.metadata"] {
        assert!(!store_dir.join(format!("{CHANNEL}{gone}")).exists(), "{gone} is still there");
    }
    assert!(store_dir.join(format!("{CHANNEL}foo-3.0-py3-none-any.whl.metadata")).exists());
    assert!(store_dir.join(format!("{ROOT}foo-1.0-py3-none-any.whl")).exists(), "the run's file was touched");
    // Pruning again finds nothing more.
    let again = json(&quarry(&args).await);
    assert_eq!(versions(&again, "pruned"), Vec::<String>::new());

    let server = TestServer::start_in_store(dir).await;
    let page = server.get_text(&format!("{CHANNEL}simple/foo/index.html")).await.1;
    assert!(page.contains("foo-3.0-py3") && !page.contains("foo-2.0-py3"), "{page}");
    let url = format!("{}{CHANNEL}simple/", server.url);
    let target = tempfile::tempdir().unwrap();
    assert_success(&pip_install(&["--index-url", &url, "foo==3.0", "bar"], target.path()).await, "pip install kept");
    assert_eq!(installed(target.path()), ["bar-0.1.dist-info", "foo-3.0.dist-info"]);
    let pruned = pip_install(&["--index-url", &url, "foo==2.0"], tempfile::tempdir().unwrap().path()).await;
    assert!(!pruned.status.success(), "foo 2.0 still installs from the channel");
    let run_url = format!("{}{ROOT}simple/", server.url);
    let target = tempfile::tempdir().unwrap();
    assert_success(
        &pip_install(&["--index-url", &run_url, "foo==1.0"], target.path()).await,
        "pip install from the run",
    );
    server.stop().await;
}

#[tokio::test]
async fn apt_and_dnf_roots_keep_the_newest_by_their_own_version_order() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let server = TestServer::start().await;
    let debs = files_in(&fixtures.join("deb"));
    let rpms = files_in(&fixtures.join("rpm"));
    upload_files(&server, &format!("{DEB_ROOT}pool/main/"), debs.clone()).await;
    upload_files(&server, RPM_ROOT, rpms.clone()).await;
    // Another run holds the pre-release under the same name.
    let other = "5151-linux/packages/deb/";
    let rc_deb: Vec<_> = debs.iter().filter(|p| p.to_str().unwrap().contains("rc1")).cloned().collect();
    assert_eq!(rc_deb.len(), 1, "{debs:?}");
    upload_files(&server, &format!("{other}pool/main/"), rc_deb.clone()).await;
    let store = server.store_dir();
    let store_arg = store.display().to_string();

    for (root, kind) in [(DEB_ROOT, "apt"), (RPM_ROOT, "dnf")] {
        let report = json(
            &quarry(&[
                "prune",
                "--store",
                &store_arg,
                "--root",
                root,
                "--kind",
                kind,
                "--keep-versions",
                "1",
                "--json",
            ])
            .await,
        );
        let pruned = versions(&report, "pruned");
        assert!(
            pruned.len() == 1 && pruned[0].starts_with("quarry-hello ") && pruned[0].contains("1.0~rc1-1"),
            "{kind}: {pruned:?}"
        );
        assert!(!versions(&report, "kept").is_empty());
    }
    let rc_name = rc_deb[0].file_name().unwrap().to_str().unwrap();
    assert!(!store.join(format!("{DEB_ROOT}pool/main/{rc_name}")).exists());
    assert!(store.join(format!("{other}pool/main/{rc_name}")).exists(), "the other run's file was touched");
    for rpm in &rpms {
        let name = rpm.file_name().unwrap().to_str().unwrap();
        assert_eq!(store.join(format!("{RPM_ROOT}{name}")).exists(), !name.contains("rc1"), "{name}");
    }
    // The superseded metadata stays for the grace period.
    for state in [format!("{DEB_ROOT}.quarry-apt.json"), format!("{RPM_ROOT}.quarry-dnf.json")] {
        let state: serde_json::Value = serde_json::from_slice(&std::fs::read(store.join(&state)).unwrap()).unwrap();
        let retired = state["retired"].as_object().map_or(0, serde_json::Map::len);
        assert!(retired > 0, "{state}");
        for key in state["retired"].as_object().unwrap().keys() {
            assert!(store.join(key).exists(), "{key} was collected within its grace period");
        }
    }

    let url = format!("{}{DEB_ROOT}", server.url);
    let apt = Apt::new(&tmp.path().join("apt"), &format!("deb [trusted=yes] {url} stable main"));
    apt.update().await;
    let policy = text(&apt.cache(&["policy", "quarry-hello"]).await);
    assert!(policy.contains("Candidate: 1.0-1") && !policy.contains("1.0~rc1-1"), "{policy}");
    assert_success(&apt.get(&["install", "-s", "quarry-hello"]).await, "apt-get install -s");

    let repo = format!("{}{RPM_ROOT}", server.url);
    let root = tmp.path().join("dnfroot");
    let out = dnf(&repo, &root, &[], &["install", "quarry-hello"]).await;
    assert_success(&out, "dnf install");
    assert!(root.join("usr/bin/quarry-hello").exists(), "{}", text(&out));
    let listed = dnf(&repo, &root, &[], &["repoquery", "--qf", "%{version}-%{release}\n", "quarry-hello"]).await;
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(listed.contains("1.0-1") && !listed.contains("rc1"), "{listed}");
    server.stop().await;
}

#[tokio::test]
async fn bad_prune_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().display().to_string();
    let out = quarry(&["prune", "--store", &store, "--root", CHANNEL, "--kind", "pip"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--keep-days N, --keep-versions N"));
    let out = quarry(&["prune", "--store", &store, "--root", "x/pool/", "--kind", "apt", "--keep-versions", "1"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}
