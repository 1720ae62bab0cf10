//! `quarry gc` end to end on a local store: whole CI runs deleted by count (`--keep-last`) and
//! age (`--older-than`), nothing outside them touched, `--dry-run` changing nothing, superseded
//! apt `by-hash/` and dnf `repodata/` files past their grace period collected from the runs
//! left, and pip, apt-get and dnf still installing from those runs; the same on a bucket of a
//! real S3 server (moto on loopback); bad input exits 2.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use quarry_tests::native::{Apt, build_fixtures, dnf, files_in, test_key, text};
use quarry_tests::{
    TestServer, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run, workspace_root,
};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

fn signing_key() -> String {
    workspace_root().join("index/testdata/test-rsa3072.sec.asc").display().to_string()
}

/// `quarry ARGS` with `env` set and the indexer's other settings cleared.
async fn quarry(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args)
        .env_remove("QUARRY_GRACE_SECONDS")
        .env_remove("QUARRY_SIGNING_KEY")
        .env_remove("QUARRY_SIGNING_KEY_FILE")
        .envs(env.iter().copied());
    run(cmd, Duration::from_secs(300)).await
}

fn store_arg(store: &Path) -> String {
    store.display().to_string()
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("--json printed no JSON ({e}):\n{}", String::from_utf8_lossy(&out.stdout)))
}

/// The run prefixes a report lists under `field` (`deleted` or `kept`), sorted.
fn runs(report: &serde_json::Value, field: &str) -> Vec<String> {
    let mut out: Vec<String> =
        report[field].as_array().expect(field).iter().map(|r| r["run"].as_str().unwrap().to_owned()).collect();
    out.sort();
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let entry = entry.unwrap();
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Every object of the store (the store's own `.quarry/` area left out) with its size and time.
fn snapshot(store: &Path) -> BTreeMap<String, (u64, SystemTime)> {
    let mut files = Vec::new();
    walk(store, &mut files);
    files
        .into_iter()
        .filter_map(|p| {
            let key = p.strip_prefix(store).unwrap().to_str().unwrap().to_owned();
            if key.starts_with(".quarry/") {
                return None;
            }
            let meta = std::fs::metadata(&p).unwrap();
            Some((key, (meta.len(), meta.modified().unwrap())))
        })
        .collect()
}

fn keys(store: &Path) -> BTreeSet<String> {
    snapshot(store).into_keys().collect()
}

/// Make every object under `prefix` `age` old (the local store reports file mtimes).
fn set_age(store: &Path, prefix: &str, age: Duration) {
    let when = SystemTime::now() - age;
    let path = store.join(prefix);
    let mut files = Vec::new();
    if path.is_file() {
        files.push(path);
    } else {
        walk(&path, &mut files);
    }
    assert!(!files.is_empty(), "nothing under {prefix}");
    for file in files {
        std::fs::File::open(&file).unwrap().set_modified(when).unwrap();
    }
}

fn under<'a>(keys: impl IntoIterator<Item = &'a String>, prefixes: &[&str]) -> BTreeSet<String> {
    keys.into_iter().filter(|k| prefixes.iter().any(|p| k.starts_with(p))).cloned().collect()
}

/// A run with a pip root (one wheel, `gc-demo 1.0.<id>`), an apt root and a dnf root holding
/// every fixture package, and a run artifact.
fn plant_run(store: &Path, run: &str, fixtures: &Path) {
    let id = run.trim_end_matches('/').split('-').next().unwrap();
    let wheel = WheelSpec::new("gc-demo", &format!("1.0.{id}"));
    plant(store, &format!("{run}python/{}", wheel.filename()), &wheel.build());
    for f in files_in(&fixtures.join("deb")) {
        let name = f.file_name().unwrap().to_str().unwrap();
        plant(store, &format!("{run}packages/deb/pool/main/{name}"), &std::fs::read(&f).unwrap());
    }
    for f in files_in(&fixtures.join("rpm")) {
        let name = f.file_name().unwrap().to_str().unwrap();
        plant(store, &format!("{run}packages/rpm/x86_64/{name}"), &std::fs::read(&f).unwrap());
    }
    plant(store, &format!("{run}logs/build.log"), format!("run {id}\n").as_bytes());
}

#[tokio::test(flavor = "multi_thread")]
async fn keep_last_deletes_the_oldest_runs_and_pip_apt_and_dnf_install_from_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path().to_path_buf();
    let all = ["101-linux/", "102-linux/", "103-linux/", "104-linux/", "105-linux/"];
    for run in all {
        plant_run(&store, run, &fixtures);
    }
    // Objects outside any run, older than every run: gc never touches them.
    plant(&store, "README.txt", b"not a run\n");
    plant(&store, "other/thing.bin", b"\x00\x01");
    plant(&store, "ext-repo/99-linux/logs/build.log", b"a run under another prefix\n");
    let key = signing_key();
    let signed = [("QUARRY_SIGNING_KEY_FILE", key.as_str())];
    assert_success(&quarry(&["index", &store_arg(&store)], &signed).await, "quarry index");
    assert_success(&quarry(&["index", "--check", &store_arg(&store)], &[]).await, "quarry index --check");
    // 101 is five days old, …, 105 one day.
    for (i, run) in all.iter().enumerate() {
        set_age(&store, run, DAY * (5 - i as u32));
    }
    for other in ["README.txt", "other/", "ext-repo/"] {
        set_age(&store, other, DAY * 100);
    }
    let before = snapshot(&store);

    // --dry-run: the plan names the three oldest runs, and nothing changes.
    let out = quarry(&["gc", "--store", &store_arg(&store), "--keep-last", "2", "--dry-run", "--json"], &signed).await;
    assert_success(&out, "quarry gc --dry-run");
    let plan = json(&out);
    assert_eq!(runs(&plan, "deleted"), ["101-linux/", "102-linux/", "103-linux/"], "{plan:#}");
    assert_eq!(runs(&plan, "kept"), ["104-linux/", "105-linux/"]);
    assert_eq!(plan["dry_run"], true);
    let planned: usize =
        plan["deleted"].as_array().unwrap().iter().map(|r| r["objects"].as_u64().unwrap() as usize).sum();
    assert_eq!(planned, under(before.keys(), &all[..3]).len(), "the plan counts every object of the three runs");
    assert_eq!(snapshot(&store), before, "--dry-run changed the store");

    let out = quarry(&["gc", "--store", &store_arg(&store), "--keep-last", "2"], &signed).await;
    assert_success(&out, "quarry gc --keep-last 2");
    let summary = String::from_utf8_lossy(&out.stdout).to_string();
    for run in &all[..3] {
        assert!(summary.contains(&format!("deleted {run}: ")), "{summary}");
    }
    for run in &all[3..] {
        assert!(summary.contains(&format!("kept {run}: ")), "{summary}");
    }
    assert!(summary.contains("deleted 3 runs"), "{summary}");

    // Exactly the three oldest run prefixes are gone; nothing else was deleted.
    let after = keys(&store);
    let removed: BTreeSet<String> = before.keys().filter(|k| !after.contains(*k)).cloned().collect();
    assert_eq!(removed, under(before.keys(), &all[..3]), "deleted something outside the selected runs");
    assert!(under(&after, &all[..3]).is_empty(), "objects left in deleted runs: {:?}", under(&after, &all[..3]));
    for run in &all[..3] {
        assert!(!store.join(run).exists(), "{run} still on disk");
    }
    for kept in ["README.txt", "other/thing.bin", "ext-repo/99-linux/logs/build.log"] {
        assert!(after.contains(kept), "{kept} was deleted");
    }
    let out = quarry(&["index", "--check", &store_arg(&store)], &[]).await;
    assert_success(&out, "quarry index --check after gc");
    let audit = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(audit.lines().filter(|l| l.contains(" 0 problems")).count(), 6, "two runs × three roots:\n{audit}");

    // The clients: pip from both remaining runs, apt-get and dnf from both, signed.
    let server = TestServer::start_in_store(store_dir).await;
    let (status, _) = server.get_text("101-linux/python/index.html").await;
    assert_eq!(status, 404);
    let target = tmp.path().join("site-104");
    let find_links = format!("{}104-linux/python/index.html", server.url);
    let out = pip_install(&["--no-index", "--find-links", &find_links, "gc-demo"], &target).await;
    assert_success(&out, "pip install from 104-linux");
    assert_eq!(installed(&target), ["gc_demo-1.0.104.dist-info"]);
    let target = tmp.path().join("site-105");
    let index_url = format!("{}105-linux/python/simple/", server.url);
    let out = pip_install(&["--index-url", &index_url, "gc-demo"], &target).await;
    assert_success(&out, "pip install from 105-linux");
    assert_eq!(installed(&target), ["gc_demo-1.0.105.dist-info"]);

    let key_path = tmp.path().join("quarry.asc");
    std::fs::write(&key_path, test_key("rsa3072").1).unwrap();
    let sources: Vec<String> = all[3..]
        .iter()
        .map(|run| format!("deb [signed-by={}] {}{run}packages/deb/ stable main", key_path.display(), server.url))
        .collect();
    let apt = Apt::new(&tmp.path().join("apt"), &sources.join("\n"));
    apt.update().await;
    let policy = text(&apt.cache(&["policy", "quarry-hello"]).await);
    assert!(policy.contains("Candidate: 1.0-1"), "{policy}");
    for run in &all[3..] {
        assert!(policy.contains(&format!("{}{run}packages/deb", server.url)), "no candidate from {run}:\n{policy}");
    }
    let plan = apt.get(&["install", "-s", "quarry-hello", "amdrocm-fft"]).await;
    assert_success(&plan, "apt-get install -s");
    assert!(text(&plan).contains("Inst libquarry-hello (1.0-1"), "{}", text(&plan));
    let downloads = tmp.path().join("downloads");
    std::fs::create_dir_all(&downloads).unwrap();
    assert_success(&apt.get_in(&downloads, &["download", "quarry-hello"]).await, "apt-get download");
    assert!(downloads.join("quarry-hello_1.0-1_amd64.deb").exists());

    for run in &all[3..] {
        let repo = format!("{}{run}packages/rpm/x86_64/", server.url);
        let gpg = ["r.repo_gpgcheck=1".to_owned(), format!("r.gpgkey={repo}repodata/repomd.xml.key")];
        let root = tmp.path().join(format!("dnf-{}", run.trim_end_matches('/')));
        let out = dnf(&repo, &root, &gpg, &["install", "quarry-hello"]).await;
        assert_success(&out, &format!("dnf install from {run}"));
        assert!(root.join("usr/bin/quarry-hello").exists(), "{}", text(&out));
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn older_than_deletes_only_runs_past_the_age_and_prefix_scopes_the_runs() {
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path();
    let ages = [
        ("301-linux/", 40),
        ("302-linux/", 20),
        ("303-windows/", 1),
        ("ext-repo/401-linux/", 40),
        ("ext-repo/402-linux/", 1),
    ];
    for (run, _) in ages {
        let id = run.trim_end_matches('/').rsplit('/').next().unwrap().split('-').next().unwrap();
        let wheel = WheelSpec::new("gc-age", &format!("1.0.{id}"));
        plant(store, &format!("{run}python/{}", wheel.filename()), &wheel.build());
        plant(store, &format!("{run}blas_lib_gfx942.tar.zst"), id.as_bytes());
    }
    assert_success(&quarry(&["index", &store_arg(store)], &[]).await, "quarry index");
    for (run, days) in ages {
        set_age(store, run, DAY * days);
    }
    let gc = |extra: &'static [&'static str]| {
        let s = store_arg(store);
        async move {
            let mut args = vec!["gc", "--json", "--store", &s];
            args.extend_from_slice(extra);
            let out = quarry(&args, &[]).await;
            assert_success(&out, &format!("quarry gc {extra:?}"));
            json(&out)
        }
    };

    // Both rules: a run goes only if both select it.
    let before = snapshot(store);
    let report = gc(&["--older-than", "30d", "--keep-last", "2", "--dry-run"]).await;
    assert!(runs(&report, "deleted").is_empty(), "301 is old but among the two newest linux runs: {report:#}");
    let report = gc(&["--older-than", "10d", "--keep-last", "1", "--dry-run"]).await;
    assert_eq!(runs(&report, "deleted"), ["301-linux/"], "302 is old but the newest linux run: {report:#}");
    assert_eq!(snapshot(store), before);

    let report = gc(&["--older-than", "30d"]).await;
    assert_eq!(runs(&report, "deleted"), ["301-linux/"], "{report:#}");
    assert_eq!(runs(&report, "kept"), ["302-linux/", "303-windows/"]);
    assert_eq!(report["older_than_seconds"], 30 * 86_400);
    let deleted = &report["deleted"][0];
    assert!(deleted["age_seconds"].as_i64().unwrap() >= 40 * 86_400 - 60, "{deleted}");
    assert!(deleted["objects"].as_u64().unwrap() >= 5 && deleted["bytes"].as_u64().unwrap() > 0, "{deleted}");
    let after = keys(store);
    let removed: BTreeSet<String> = before.keys().filter(|k| !after.contains(*k)).cloned().collect();
    assert_eq!(removed, under(before.keys(), &["301-linux/"]));
    assert!(after.iter().any(|k| k.starts_with("ext-repo/401-linux/")), "runs under ext-repo/ are out of scope");

    // --prefix: the runs under another repository's prefix. The reindex above rewrote
    // ext-repo/401's pages (its files' times changed, so their entries did): index outputs do
    // not make a run young again, its uploads are still 40 days old.
    let report = gc(&["--older-than", "720h", "--prefix", "ext-repo"]).await;
    assert_eq!(runs(&report, "deleted"), ["ext-repo/401-linux/"], "{report:#}");
    assert_eq!(runs(&report, "kept"), ["ext-repo/402-linux/"]);
    let after = keys(store);
    assert!(under(&after, &["ext-repo/401-linux/"]).is_empty());
    for run in ["302-linux/", "303-windows/", "ext-repo/402-linux/"] {
        assert!(!under(&after, &[run]).is_empty(), "{run} was deleted");
    }
    assert_success(&quarry(&["index", "--check", &store_arg(store)], &[]).await, "quarry index --check");

    // Nothing old enough: nothing to do, and the summary says so.
    let out = quarry(&["gc", "--store", &store_arg(store), "--older-than", "30d"], &[]).await;
    assert_success(&out, "quarry gc with nothing to delete");
    assert!(String::from_utf8_lossy(&out.stdout).contains("deleted 0 runs"), "{}", text(&out));
}

/// The retired content-addressed files the apt and dnf states of `run` list.
fn retired(store: &Path, run: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for state in ["packages/deb/.quarry-apt.json", "packages/rpm/x86_64/.quarry-dnf.json"] {
        let bytes = std::fs::read(store.join(format!("{run}{state}"))).unwrap();
        let state: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        if let Some(map) = state.get("retired").and_then(|r| r.as_object()) {
            out.extend(map.keys().cloned());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn superseded_apt_and_dnf_files_past_the_grace_period_are_collected_from_the_runs_left() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path().to_path_buf();
    plant_run(&store, "501-linux/", &fixtures);
    // 502 first holds only the library, then the rest lands and is indexed: a new generation.
    let (first, rest): (Vec<PathBuf>, Vec<PathBuf>) = files_in(&fixtures.join("deb"))
        .into_iter()
        .chain(files_in(&fixtures.join("rpm")))
        .partition(|f| f.file_name().unwrap().to_str().unwrap().starts_with("lib"));
    let land = |files: &[PathBuf]| {
        for f in files {
            let name = f.file_name().unwrap().to_str().unwrap();
            let key = if name.ends_with(".deb") {
                format!("502-linux/packages/deb/pool/main/{name}")
            } else {
                format!("502-linux/packages/rpm/x86_64/{name}")
            };
            plant(&store, &key, &std::fs::read(f).unwrap());
        }
    };
    let key = signing_key();
    let signed = [("QUARRY_SIGNING_KEY_FILE", key.as_str())];
    land(&first);
    assert_success(&quarry(&["index", &store_arg(&store)], &signed).await, "quarry index");
    land(&rest);
    assert_success(&quarry(&["index", &store_arg(&store)], &signed).await, "quarry index (second generation)");
    let superseded = retired(&store, "502-linux/");
    assert!(superseded.iter().any(|k| k.contains("/by-hash/SHA256/")), "apt retired by-hash files: {superseded:?}");
    assert!(superseded.iter().any(|k| k.contains("/repodata/")), "dnf retired repodata: {superseded:?}");
    for k in &superseded {
        assert!(store.join(k).exists(), "{k} is kept for the grace period");
    }
    set_age(&store, "501-linux/", DAY * 40);
    let before = snapshot(&store);
    let gc = |extra: &[&str]| {
        let mut args = vec!["gc".to_owned(), "--json".into(), "--store".into(), store_arg(&store)];
        args.extend(["--older-than", "30d"].iter().chain(extra).map(|s| (*s).to_owned()));
        args
    };
    let argv = |args: &[String]| args.iter().map(String::as_str).collect::<Vec<_>>().join(" ");

    // Within the default grace period (a day) nothing retired is due.
    let args = gc(&["--dry-run"]);
    let out = quarry(&args.iter().map(String::as_str).collect::<Vec<_>>(), &signed).await;
    assert_success(&out, &argv(&args));
    let report = json(&out);
    assert_eq!(report["retired_collected"], 0, "{report:#}");
    // Without the key the repos were signed with, gc leaves signed roots alone.
    let out = quarry(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[("QUARRY_GRACE_SECONDS", "0")]).await;
    assert_success(&out, "gc --dry-run without a signing key");
    let report = json(&out);
    let skipped: Vec<&str> = report["roots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["skipped"].is_string())
        .map(|r| r["root"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, ["502-linux/packages/deb/", "502-linux/packages/rpm/x86_64/"], "{report:#}");
    // With QUARRY_GRACE_SECONDS=0 all of them are; a dry run says so and changes nothing.
    let grace0 = [signed[0], ("QUARRY_GRACE_SECONDS", "0")];
    let out = quarry(&args.iter().map(String::as_str).collect::<Vec<_>>(), &grace0).await;
    assert_success(&out, &argv(&args));
    let report = json(&out);
    assert_eq!(report["retired_collected"].as_u64(), Some(superseded.len() as u64), "{report:#}");
    assert_eq!(snapshot(&store), before, "--dry-run changed the store");

    let args = gc(&[]);
    let out = quarry(&args.iter().map(String::as_str).collect::<Vec<_>>(), &grace0).await;
    assert_success(&out, &argv(&args));
    let report = json(&out);
    assert_eq!(runs(&report, "deleted"), ["501-linux/"], "{report:#}");
    assert_eq!(report["retired_collected"].as_u64(), Some(superseded.len() as u64), "{report:#}");
    for k in &superseded {
        assert!(!store.join(k).exists(), "retired {k} was not collected");
    }
    assert!(retired(&store, "502-linux/").is_empty(), "the states no longer list retired files");
    for current in
        ["502-linux/packages/deb/dists/stable/InRelease", "502-linux/packages/rpm/x86_64/repodata/repomd.xml"]
    {
        assert!(store.join(current).exists(), "{current}");
    }
    // Only the old run and the retired files went.
    let after = keys(&store);
    let removed: BTreeSet<String> = before.keys().filter(|k| !after.contains(*k)).cloned().collect();
    let expected: BTreeSet<String> = under(before.keys(), &["501-linux/"]).into_iter().chain(superseded).collect();
    assert_eq!(removed, expected);
    assert_success(&quarry(&["index", "--check", &store_arg(&store)], &[]).await, "quarry index --check");

    // apt and dnf still take the repos left, signatures and all.
    let server = TestServer::start_in_store(store_dir).await;
    let key_path = tmp.path().join("quarry.asc");
    std::fs::write(&key_path, test_key("rsa3072").1).unwrap();
    let url = format!("{}502-linux/packages/deb/", server.url);
    let apt = Apt::new(&tmp.path().join("apt"), &format!("deb [signed-by={}] {url} stable main", key_path.display()));
    apt.update().await;
    let policy = text(&apt.cache(&["policy", "quarry-hello"]).await);
    assert!(policy.contains("Candidate: 1.0-1"), "{policy}");
    let repo = format!("{}502-linux/packages/rpm/x86_64/", server.url);
    let gpg = ["r.repo_gpgcheck=1".to_owned(), format!("r.gpgkey={repo}repodata/repomd.xml.key")];
    let out = dnf(&repo, &tmp.path().join("dnfroot"), &gpg, &["repoquery", "--qf", "%{name}"]).await;
    assert_success(&out, "dnf repoquery");
    assert!(String::from_utf8_lossy(&out.stdout).contains("quarry-hello"), "{}", text(&out));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_exits_2_and_an_unopenable_store_fails_with_a_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    plant(&store, "1-linux/logs/build.log", b"x");
    let s = store_arg(&store);
    let cases: &[(&[&str], i32, &str)] = &[
        (&["gc", "--store", &s], 2, "give --older-than AGE"),
        (&["gc", "--store", &s, "--dry-run"], 2, "give --older-than AGE"),
        (&["gc", "--store", &s, "--older-than", "nonsense"], 2, "is not an age"),
        (&["gc", "--store", &s, "--older-than", "2mo"], 2, "months and years"),
        (&["gc", "--store", &s, "--keep-last=-1"], 2, "--keep-last"),
        (&["gc", "--store", &s, "--keep-last", "1", "--prefix", "../up"], 2, "--prefix"),
        (&["gc", "--older-than", "1d"], 2, "--store"),
        (&["gc", "--store", "ftp://example.invalid/x", "--older-than", "1d"], 2, "unsupported scheme"),
    ];
    for (args, code, message) in cases {
        let out = quarry(args, &[]).await;
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(message), "{args:?} does not say {message:?}:\n{}", text(&out));
        assert!(out.stdout.is_empty(), "{args:?} printed a report");
    }
    // A missing directory is refused, not created as an empty store.
    let missing = tmp.path().join("no-such-store");
    let out = quarry(&["gc", "--store", &store_arg(&missing), "--older-than", "1d"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("does not exist"), "{}", text(&out));
    assert!(!missing.exists(), "gc created {}", missing.display());
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let out = quarry(&["gc", "--store", &format!("file://{}", file.display()), "--keep-last", "1"], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // The store was left as it was.
    assert!(store.join("1-linux/logs/build.log").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn gc_deletes_runs_in_a_bucket_on_a_real_s3_server() {
    use quarry_store::{Key, PutOptions, S3Store, StoreExt};
    use quarry_tests::s3::{S3Server, s3_client};

    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    quarry_tests::s3::create_public_bucket(&client, "artifacts").await;
    let bucket = S3Store::from_client(client.clone(), "artifacts", "");
    // Three runs under the store's prefix `ci/`, uploaded in order (the newest last), and
    // objects beside and outside that prefix.
    for id in ["701", "702", "703"] {
        let wheel = WheelSpec::new("gc-s3", &format!("1.0.{id}"));
        let key = Key::new(format!("ci/{id}-linux/python/{}", wheel.filename())).unwrap();
        bucket.put_bytes(&key, wheel.build().into(), PutOptions::default()).await.unwrap();
        let artifact = Key::new(format!("ci/{id}-linux/core_run_generic.tar.zst")).unwrap();
        bucket.put_bytes(&artifact, id.as_bytes().to_vec().into(), PutOptions::default()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    for key in ["ci/README.txt", "other/800-linux/x.tar.zst"] {
        bucket.put_bytes(&Key::new(key).unwrap(), b"x".to_vec().into(), PutOptions::default()).await.unwrap();
    }
    let client_env = server.client_env();
    let env: Vec<(&str, &str)> = client_env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_success(&quarry(&["index", "s3://artifacts/ci/"], &env).await, "quarry index s3://");
    let all = || async {
        let listing = bucket.list_all("", false).await.unwrap();
        listing.objects.into_iter().map(|o| o.key.to_string()).collect::<BTreeSet<String>>()
    };
    let before = all().await;

    let out = quarry(&["gc", "--store", "s3://artifacts/ci/", "--keep-last", "1", "--dry-run", "--json"], &env).await;
    assert_success(&out, "quarry gc --dry-run on S3");
    assert_eq!(runs(&json(&out), "deleted"), ["701-linux/", "702-linux/"]);
    assert_eq!(all().await, before);

    let out = quarry(&["gc", "--store", "s3://artifacts/ci/", "--keep-last", "1", "--json"], &env).await;
    assert_success(&out, "quarry gc on S3");
    let report = json(&out);
    assert_eq!(runs(&report, "deleted"), ["701-linux/", "702-linux/"], "{report:#}");
    assert_eq!(runs(&report, "kept"), ["703-linux/"]);
    let after = all().await;
    let removed: BTreeSet<String> = before.difference(&after).cloned().collect();
    assert_eq!(removed, under(&before, &["ci/701-linux/", "ci/702-linux/"]));
    assert!(after.contains("ci/README.txt") && after.contains("other/800-linux/x.tar.zst"));

    // pip still installs from the run left, straight from the bucket.
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("site");
    let find_links = format!("{}/artifacts/ci/703-linux/python/index.html", server.endpoint);
    let out = pip_install(&["--no-index", "--find-links", &find_links, "gc-s3"], &target).await;
    assert_success(&out, "pip install from the bucket");
    assert_eq!(installed(&target), ["gc_s3-1.0.703.dist-info"]);
    server.stop().await;
}
