//! apt and dnf read the chunked indexes (`Packages.xz` as one stream of many blocks,
//! `Packages.gz` and the repodata `*.xml.gz` as many gzip members), and a `+1` reindex that
//! reused the previous outputs' chunks writes the bytes a from-scratch reindex writes.

use std::path::Path;

use crate::apt_dnf::relocate;
use quarry_tests::native::{Apt, DEB_ROOT, RPM_ROOT, build_fixtures, dnf, files_in, run_tool, text};
use quarry_tests::{TestServer, assert_success, plant, quarry_bin, run, sha256_hex};

const COUNT: usize = 120;
/// The package landed last (the middle of the name order).
const EXTRA: &str = "quarry-many-60";
const PACKAGES: &str = "dists/stable/main/binary-amd64/Packages";

/// Plant the fixtures whose names start with `EXTRA` (`extra`) or the others into `store`.
fn plant_fixtures(fixtures: &Path, store: &Path, extra: bool) {
    for (dir, prefix) in [("deb", format!("{DEB_ROOT}pool/main/")), ("rpm", RPM_ROOT.to_owned())] {
        for file in files_in(&fixtures.join(dir)) {
            let name = file.file_name().unwrap().to_str().unwrap().to_owned();
            let is_extra = name.starts_with(&format!("{EXTRA}_")) || name.starts_with(&format!("{EXTRA}-1.0"));
            if is_extra == extra {
                let key = format!("{prefix}{name}");
                plant(store, &key, &std::fs::read(&file).unwrap());
                // primary.xml's `time file` is the upload time: the same in both stores.
                let planted = std::fs::File::options().write(true).open(store.join(&key)).unwrap();
                planted.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_000_000)).unwrap();
            }
        }
    }
}

async fn index(store: &Path) {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["index"]).arg(store);
    assert_success(&run(cmd, std::time::Duration::from_secs(120)).await, "quarry index");
}

/// The compressed indexes of both repos: `Packages{,.gz,.xz}` and the repodata `*.xml.gz`,
/// by path.
fn indexes(store: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for name in [PACKAGES, &format!("{PACKAGES}.gz"), &format!("{PACKAGES}.xz")] {
        out.push((name.to_owned(), std::fs::read(store.join(DEB_ROOT).join(name)).unwrap()));
    }
    for name in current_repodata(store) {
        out.push((name.clone(), std::fs::read(store.join(RPM_ROOT).join(&name)).unwrap()));
    }
    out
}

/// The documents repomd.xml names (older ones stay for a grace period).
fn current_repodata(store: &Path) -> Vec<String> {
    let repomd = std::fs::read_to_string(store.join(RPM_ROOT).join("repodata/repomd.xml")).unwrap();
    repomd.split("<location href=\"").skip(1).filter_map(|rest| rest.split('"').next()).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn apt_and_dnf_read_chunked_indexes_built_incrementally() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, Some(COUNT + 1)).await;
    let (store, scratch) = (tmp.path().join("store"), tmp.path().join("scratch"));
    plant_fixtures(&fixtures, &store, false);
    index(&store).await;
    plant_fixtures(&fixtures, &store, true);
    index(&store).await;
    // The same packages indexed in one go.
    plant_fixtures(&fixtures, &scratch, false);
    plant_fixtures(&fixtures, &scratch, true);
    index(&scratch).await;
    let incremental = indexes(&store);
    assert_eq!(incremental.len(), 6, "{:?}", incremental.iter().map(|(n, _)| n).collect::<Vec<_>>());
    assert!(incremental == indexes(&scratch), "a +1 reindex wrote other bytes than a full one");

    // One xz stream of several blocks; xz and gzip find every file sound.
    let xz = store.join(DEB_ROOT).join(format!("{PACKAGES}.xz"));
    let listed = run_tool("xz", &["--robot", "--list", xz.to_str().unwrap()]).await;
    assert_success(&listed, "xz --list");
    let totals = text(&listed).lines().find(|l| l.starts_with("totals")).unwrap_or_default().to_owned();
    let fields: Vec<&str> = totals.split('\t').collect();
    assert_eq!(fields.get(1), Some(&"1"), "one stream: {totals}");
    assert!(fields.get(2).and_then(|b| b.parse::<u32>().ok()).is_some_and(|b| b >= 2), "blocks: {totals}");
    assert_success(&run_tool("xz", &["-t", xz.to_str().unwrap()]).await, "xz -t");
    let mut gz = vec![store.join(DEB_ROOT).join(format!("{PACKAGES}.gz"))];
    gz.extend(
        files_in(&store.join(RPM_ROOT).join("repodata")).into_iter().filter(|p| p.to_string_lossy().ends_with(".gz")),
    );
    for file in &gz {
        assert_success(&run_tool("gzip", &["-t", file.to_str().unwrap()]).await, "gzip -t");
    }

    let packages = std::fs::read(store.join(DEB_ROOT).join(PACKAGES)).unwrap();
    let server = TestServer::start_in_store(relocate(tmp.path(), &store)).await;
    let url = format!("{}{DEB_ROOT}", server.url);
    // apt as configured by default takes Packages.xz; told to, Packages.gz.
    for (order, suffix) in [(None, "xz"), (Some("-oAcquire::CompressionTypes::Order::=gz"), "gz")] {
        let apt = Apt::new(&tmp.path().join(format!("apt-{suffix}")), &format!("deb [trusted=yes] {url} stable main"));
        let before = server.requests().len();
        let update = apt.get(&[order.unwrap_or("-oAPT::Get::List-Cleanup=0"), "update"]).await;
        assert_success(&update, "apt-get update");
        assert!(!text(&update).contains("W: ") && !text(&update).contains("E: "), "{}", text(&update));
        let body = std::fs::read(server.store_dir().join(DEB_ROOT).join(format!("{PACKAGES}.{suffix}"))).unwrap();
        let fetched = server.requests()[before..].iter().map(|r| r.path.clone()).collect::<Vec<_>>();
        assert!(fetched.iter().any(|p| p.ends_with(&sha256_hex(&body))), "apt fetched Packages.{suffix}: {fetched:?}");
        let names = apt.cache(&["pkgnames", "quarry-many-"]).await;
        assert_eq!(String::from_utf8_lossy(&names.stdout).lines().count(), COUNT + 1, "{}", text(&names));
        let shown = text(&apt.cache(&["show", EXTRA]).await);
        assert!(shown.contains(&format!("Package: {EXTRA}")), "{shown}");
    }
    assert!(packages.starts_with(b"Package: "));

    let out =
        dnf(&format!("{}{RPM_ROOT}", server.url), &tmp.path().join("root"), &[], &["repoquery", "--qf", "%{name}"])
            .await;
    assert_success(&out, "dnf repoquery");
    let names = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(names.lines().filter(|l| l.starts_with("quarry-many-")).count(), COUNT + 1, "{names}");
    assert!(names.lines().any(|l| l == EXTRA), "{names}");
    server.stop().await;
}
