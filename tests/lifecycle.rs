//! A file's whole life through the API (issue #36 items 4 and 5): `quarry serve`'s yank, unyank
//! and delete routes under scoped tokens, on a local store and on moto; `quarry yank|unyank|delete`
//! on a server URL and straight on a store URL; real pip, uv, apt-get and dnf seeing each change
//! (a yanked version is chosen only when pinned with `==`, PEP 592); a channel-held file
//! refused; hostile keys refused with nothing changed; and the audit log holding every write
//! with its identity afterwards.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use quarry_tests::native::{Apt, DEB_ROOT, RPM_ROOT, build_fixtures, dnf, files_in, text};
use quarry_tests::s3::{S3Server, create_public_bucket, s3_client};
use quarry_tests::{
    ServedBinary, WheelSpec, assert_success, installed, pip_install, quarry_bin, raw_request, run, uv_pip,
};

const RUN: &str = "4242-linux/python/";
/// Token file: a CI job's token scoped to its run, another run's, an admin's; each named.
const TOKENS: &str = "ci-secret-0123456789 4242-linux/ name=ci-4242\n\
                      other-secret-0123456789 4343-linux/ name=ci-4343\n\
                      admin-secret-0123456789 name=admin\n";
const CI: &str = "ci-secret-0123456789";
const OTHER: &str = "other-secret-0123456789";
const ADMIN: &str = "admin-secret-0123456789";

/// `quarry serve` on `store` (a directory or an S3 URL) with [`TOKENS`].
async fn serve(store: &str, work: &Path, env: &[(String, String)]) -> ServedBinary {
    let token_file = work.join("tokens");
    std::fs::write(&token_file, TOKENS).unwrap();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store", store])
        .arg("--token-file")
        .arg(&token_file)
        .envs(env.iter().cloned())
        .env_remove("QUARRY_TOKEN")
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_PRIVATE")
        .env("RUST_LOG", "warn")
        .stderr(Stdio::null());
    ServedBinary::start(cmd).await
}

/// The `quarry` binary with `args`, `env` and no ambient CI identity.
async fn quarry(args: &[&str], env: &[(String, String)]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args)
        .envs(env.iter().cloned())
        .env_remove("GITHUB_ACTOR")
        .env_remove("GITHUB_RUN_ID")
        .env_remove("GITHUB_REPOSITORY")
        .env_remove("QUARRY_CONFIG");
    run(cmd, Duration::from_secs(120)).await
}

fn out_text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

async fn put(url: &str, key: &str, token: &str, body: Vec<u8>) -> u16 {
    let client = reqwest::Client::new();
    client.put(format!("{url}{key}")).bearer_auth(token).body(body).send().await.unwrap().status().as_u16()
}

async fn send(method: reqwest::Method, url: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let client = reqwest::Client::new();
    let mut request = client.request(method, url).body(body.to_owned());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// What pip and uv install of `requirement` from the simple index at `index`: the `.dist-info`s.
async fn pip_and_uv(index: &str, requirement: &str, work: &Path) -> (Vec<String>, Vec<String>) {
    let (p, u) = (tempfile::tempdir_in(work).unwrap(), tempfile::tempdir_in(work).unwrap());
    let out = pip_install(&["--index-url", index, requirement], p.path()).await;
    let pip = if out.status.success() { installed(p.path()) } else { vec![format!("failed: {}", out_text(&out))] };
    let out = uv_pip("install", &["--index-url", index, requirement], Some(u.path())).await;
    let uv = if out.status.success() { installed(u.path()) } else { vec![format!("failed: {}", out_text(&out))] };
    (pip, uv)
}

/// Yank, unyank and delete over HTTP on a served store (`url`), with pip and uv checking each
/// step; returns nothing, asserts everything.
async fn life_over_http(url: &str, work: &Path) {
    let (old, new) = (WheelSpec::new("life-demo", "1.0"), WheelSpec::new("life-demo", "1.1"));
    for w in [&old, &new] {
        assert_eq!(put(url, &format!("{RUN}{}", w.filename()), CI, w.build()).await, 201);
    }
    let index = format!("{url}{RUN}simple/");
    let new_key = format!("{RUN}{}", new.filename());
    let yank_url = format!("{url}-/yank/{new_key}");

    // Without a token, with another run's token: refused, naming the scope; nothing yanked.
    let (status, _) = send(reqwest::Method::POST, &yank_url, None, "").await;
    assert_eq!(status, 401);
    let (status, body) = send(reqwest::Method::POST, &yank_url, Some(OTHER), "").await;
    assert_eq!((status, body.trim()), (403, "error: this token may write only under 4343-linux/"));
    let (status, _) = send(reqwest::Method::DELETE, &format!("{url}{new_key}"), Some(OTHER), "").await;
    assert_eq!(status, 403);
    // Hostile and non-package keys: 400, nothing changed.
    for (method, path) in [
        ("POST", format!("/-/yank/{RUN}%2e%2e/%2e%2e/x-1.0-py3-none-any.whl")),
        ("POST", format!("/-/yank/{RUN}index.html")),
        ("DELETE", format!("/{RUN}..%2F..%2F{}", new.filename())),
        ("DELETE", format!("/{RUN}simple/life-demo/index.html")),
    ] {
        let (status, body) = raw_request(url, method, &path, &[("Authorization", &format!("Bearer {CI}"))], b"").await;
        assert_eq!(status, 400, "{method} {path}: {body}");
    }

    // The run's own token, through `quarry yank`: pip and uv pass the yanked 1.1 by, but take it
    // when pinned with ==.
    let env = [("QUARRY_TOKEN".to_owned(), CI.to_owned())];
    let out = quarry(&["yank", &format!("{url}{new_key}"), "--reason", "broken on gfx942"], &env).await;
    assert_success(&out, "quarry yank");
    assert!(out_text(&out).contains("yanked 4242-linux/python/life_demo-1.1"), "{}", out_text(&out));
    let (_, page) = send(reqwest::Method::GET, &format!("{index}life-demo/"), None, "").await;
    assert!(page.contains(r#"data-yanked="broken on gfx942""#), "{page}");
    let (_, find_links) = send(reqwest::Method::GET, &format!("{url}{RUN}"), None, "").await;
    assert!(find_links.contains("data-yanked"), "{find_links}");
    let (pip, uv) = pip_and_uv(&index, "life-demo", work).await;
    assert_eq!((pip, uv), (vec!["life_demo-1.0.dist-info".to_owned()], vec!["life_demo-1.0.dist-info".to_owned()]));
    let (pip, uv) = pip_and_uv(&index, "life-demo==1.1", work).await;
    assert_eq!((pip, uv), (vec!["life_demo-1.1.dist-info".to_owned()], vec!["life_demo-1.1.dist-info".to_owned()]));

    // Unyanked: 1.1 is the newest again.
    assert_success(&quarry(&["unyank", &format!("{url}{new_key}"), "--json"], &env).await, "quarry unyank");
    let (pip, uv) = pip_and_uv(&index, "life-demo", work).await;
    assert_eq!((pip, uv), (vec!["life_demo-1.1.dist-info".to_owned()], vec!["life_demo-1.1.dist-info".to_owned()]));

    // Deleted: gone from every page, == finds nothing; a second delete is 404 (exit 2).
    let out = quarry(&["delete", &format!("{url}{new_key}")], &env).await;
    assert_success(&out, "quarry delete");
    let (_, page) = send(reqwest::Method::GET, &format!("{index}life-demo/"), None, "").await;
    assert!(!page.contains("life_demo-1.1"), "{page}");
    let (status, _) = send(reqwest::Method::GET, &format!("{url}{new_key}"), None, "").await;
    assert_eq!(status, 404);
    let (pip, uv) = pip_and_uv(&index, "life-demo", work).await;
    assert_eq!((pip, uv), (vec!["life_demo-1.0.dist-info".to_owned()], vec!["life_demo-1.0.dist-info".to_owned()]));
    let (pip, _) = pip_and_uv(&index, "life-demo==1.1", work).await;
    assert!(pip[0].starts_with("failed"), "{pip:?}");
    let again = quarry(&["delete", &format!("{url}{new_key}")], &env).await;
    assert_eq!(again.status.code(), Some(2), "{}", out_text(&again));
    assert!(out_text(&again).contains("404"), "{}", out_text(&again));
}

/// The log at `GET /-/audit`: every write above, with its identity and outcome.
async fn assert_audited(url: &str) {
    let (status, body) = send(reqwest::Method::GET, &format!("{url}-/audit"), Some(CI), "").await;
    assert_eq!(status, 403, "a scoped token reads no log: {body}");
    let (status, body) = send(reqwest::Method::GET, &format!("{url}-/audit?key=4242-linux/"), Some(ADMIN), "").await;
    assert_eq!(status, 200, "{body}");
    let entries: Vec<serde_json::Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let seen: Vec<String> = entries
        .iter()
        .map(|e| format!("{} {} {} {}", e["identity"], e["action"], e["outcome"], e["key"]).replace('"', ""))
        .collect();
    let wheel = |v: &str| format!("4242-linux/python/life_demo-{v}-py3-none-any.whl");
    for expected in [
        format!("ci-4242 upload ok {}", wheel("1.0")),
        format!("ci-4242 upload ok {}", wheel("1.1")),
        format!("ci-4343 yank denied {}", wheel("1.1")),
        format!("ci-4343 delete denied {}", wheel("1.1")),
        format!("ci-4242 yank ok {}", wheel("1.1")),
        format!("ci-4242 unyank ok {}", wheel("1.1")),
        format!("ci-4242 delete ok {}", wheel("1.1")),
        format!("ci-4242 delete refused {}", wheel("1.1")),
        "ci-4242 yank refused 4242-linux/python/index.html".to_owned(),
    ] {
        assert!(seen.contains(&expected), "{expected} not in the log:\n{}", seen.join("\n"));
    }
    let times: Vec<&str> = entries.iter().map(|e| e["time"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "oldest first: {times:?}");
    let yank = entries.iter().find(|e| e["action"] == "yank" && e["outcome"] == "ok").unwrap();
    assert_eq!(yank["detail"], "broken on gfx942");
    assert_eq!(yank["sha256"].as_str().map(str::len), Some(64));
    // The browse page says who uploaded the file that stayed.
    let (_, page) = send(reqwest::Method::GET, &format!("{url}-/package/4242-linux/life-demo/"), None, "").await;
    assert!(page.contains("by ci-4242"), "{page}");
}

#[tokio::test(flavor = "multi_thread")]
async fn yank_unyank_delete_over_http_on_a_local_store() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let served = serve(store.to_str().unwrap(), tmp.path(), &[]).await;
    life_over_http(&served.url, tmp.path()).await;
    assert_audited(&served.url).await;
    // The log's own objects are never served as files, in any spelling.
    let listed: Vec<_> = walk(&store.join(".quarry-audit"));
    assert!(!listed.is_empty());
    let relative = listed[0].strip_prefix(&store).unwrap().to_str().unwrap().to_owned();
    for path in [relative.clone(), relative.replacen(".quarry-audit", "%2Equarry-audit", 1)] {
        let (status, _) = raw_request(&served.url, "GET", &format!("/{path}"), &[], b"").await;
        assert_eq!(status, 404, "{path}");
    }
    drop(served);
    // The command line reads the same log from the store.
    let out =
        quarry(&["audit", "--store", store.to_str().unwrap(), "--key", "4242-linux/python/", "--json"], &[]).await;
    assert_success(&out, "quarry audit");
    let log: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(log["entries"].as_array().unwrap().len() >= 9, "{log:#}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn yank_unyank_delete_over_http_and_on_the_bucket_on_moto() {
    let tmp = tempfile::tempdir().unwrap();
    let s3 = S3Server::start_moto().await;
    create_public_bucket(&s3_client(&s3), "life").await;
    let env = s3.client_env();
    let served = serve("s3://life", tmp.path(), &env).await;
    life_over_http(&served.url, tmp.path()).await;
    assert_audited(&served.url).await;
    drop(served);

    // Straight on the bucket: `quarry yank s3://…` republishes the project's pages itself.
    let w = WheelSpec::new("bucket-demo", "2.0");
    let file = w.write_to(tmp.path());
    let mut ci = env.clone();
    ci.push(("GITHUB_ACTOR".to_owned(), "octocat".to_owned()));
    ci.push(("GITHUB_RUN_ID".to_owned(), "777".to_owned()));
    let to = "s3://life/4242-linux/python/";
    let mut upload = tokio::process::Command::new(quarry_bin());
    upload.args(["upload", "--to", to]).arg(&file).envs(ci.iter().cloned()).env_remove("GITHUB_REPOSITORY");
    assert_success(&run(upload, Duration::from_secs(120)).await, "quarry upload to moto");
    let key = format!("s3://life/{RUN}{}", w.filename());
    let mut yank = tokio::process::Command::new(quarry_bin());
    yank.args(["yank", &key, "--reason", "bad", "--json"]).envs(ci.iter().cloned()).env_remove("GITHUB_REPOSITORY");
    let out = run(yank, Duration::from_secs(120)).await;
    assert_success(&out, "quarry yank s3://");
    let page = format!("{}/life/{RUN}simple/bucket-demo/index.json", s3.endpoint);
    let json = reqwest::get(&page).await.unwrap().text().await.unwrap();
    assert!(json.contains(r#""yanked":"bad""#), "{json}");
    let mut delete = tokio::process::Command::new(quarry_bin());
    delete.args(["delete", &key]).envs(ci.iter().cloned()).env_remove("GITHUB_REPOSITORY");
    assert_success(&run(delete, Duration::from_secs(120)).await, "quarry delete s3://");
    let json = reqwest::get(&page).await.unwrap().text().await.unwrap();
    assert!(!json.contains("bucket_demo-2.0"), "{json}");
    let out = quarry(&["audit", "--store", "s3://life", "--key", &format!("{RUN}bucket")], &env).await;
    assert_success(&out, "quarry audit on moto");
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    for action in
        ["upload ok github:octocat run=777", "yank ok github:octocat run=777", "delete ok github:octocat run=777"]
    {
        assert!(log.contains(action), "{action} not in:\n{log}");
    }
    s3.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apt_and_dnf_repos_are_regenerated_without_a_deleted_package() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let store = tmp.path().join("store");
    let served = serve(store.to_str().unwrap(), tmp.path(), &[]).await;
    let url = served.url.clone();
    let deb_root = DEB_ROOT.replace("5150-linux", "4242-linux");
    let rpm_root = RPM_ROOT.replace("5150-linux", "4242-linux");
    for f in files_in(&fixtures.join("deb")) {
        let name = f.file_name().unwrap().to_str().unwrap();
        assert_eq!(put(&url, &format!("{deb_root}pool/main/{name}"), CI, std::fs::read(&f).unwrap()).await, 201);
    }
    for f in files_in(&fixtures.join("rpm")) {
        let name = f.file_name().unwrap().to_str().unwrap();
        assert_eq!(put(&url, &format!("{rpm_root}{name}"), CI, std::fs::read(&f).unwrap()).await, 201);
    }
    let apt = Apt::new(&tmp.path().join("apt"), &format!("deb [trusted=yes] {url}{deb_root} stable main"));
    apt.update().await;
    let policy = text(&apt.cache(&["policy", "quarry-hello"]).await);
    assert!(policy.contains("Candidate: 1.0-1"), "{policy}");

    // A .deb and an .rpm cannot be yanked (apt and dnf have none): 400, with the reason.
    let deb = format!("{deb_root}pool/main/quarry-hello_1.0-1_amd64.deb");
    let (status, body) = send(reqwest::Method::POST, &format!("{url}-/yank/{deb}"), Some(CI), "").await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("apt and dnf have no yank"), "{body}");
    let (status, body) = send(reqwest::Method::DELETE, &format!("{url}{deb}"), Some(CI), "").await;
    assert_eq!(status, 200, "{body}");
    let apt = Apt::new(&tmp.path().join("apt2"), &format!("deb [trusted=yes] {url}{deb_root} stable main"));
    apt.update().await;
    let policy = text(&apt.cache(&["policy", "quarry-hello"]).await);
    assert!(policy.contains("Candidate: 1.0~rc1-1") && !policy.contains(" 1.0-1 "), "{policy}");

    let rpm = files_in(&fixtures.join("rpm"))
        .into_iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
        .find(|n| n.starts_with("quarry-hello-1.0-1"))
        .expect("the quarry-hello 1.0-1 rpm");
    let (status, body) = send(reqwest::Method::DELETE, &format!("{url}{rpm_root}{rpm}"), Some(CI), "").await;
    assert_eq!(status, 200, "{body}");
    let root = tmp.path().join("dnfroot");
    let versions =
        dnf(&format!("{url}{rpm_root}"), &root, &[], &["repoquery", "--qf", "%{version}-%{release}", "quarry-hello"])
            .await;
    assert_success(&versions, "dnf repoquery");
    let versions = String::from_utf8_lossy(&versions.stdout).into_owned();
    assert!(versions.contains("1.0~rc1-1") && !versions.contains("1.0-1\n"), "{versions}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_a_channel_holds_is_not_deleted() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let s = store.to_str().unwrap().to_owned();
    let w = WheelSpec::new("held-demo", "1.0");
    quarry_tests::plant(&store, &format!("{RUN}{}", w.filename()), &w.build());
    assert_success(&quarry(&["index", &s], &[]).await, "quarry index");
    let out =
        quarry(&["promote", "--from", "4242-linux", "--to", "nightly", "--kinds", "pip", "--store", &s], &[]).await;
    assert_success(&out, "quarry promote");
    let held = format!("nightly/python/{}", w.filename());
    assert!(store.join(&held).is_file(), "{}", out_text(&out));

    // On the store: exit 2, naming the channel; the file stays.
    let out = quarry(&["delete", store.join(&held).to_str().unwrap()], &[]).await;
    assert_eq!(out.status.code(), Some(2), "{}", out_text(&out));
    assert!(out_text(&out).contains("held by channel nightly"), "{}", out_text(&out));
    assert!(store.join(&held).is_file());
    // Through the server with a token that may write there: 409, naming it.
    let served = serve(&s, tmp.path(), &[]).await;
    let (status, body) = send(reqwest::Method::DELETE, &format!("{}{held}", served.url), Some(ADMIN), "").await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("held by channel nightly (promoted from run 4242-linux"), "{body}");
    assert!(store.join(&held).is_file());
    // The run's own copy may go: the channel keeps its own.
    let (status, body) =
        send(reqwest::Method::DELETE, &format!("{}{RUN}{}", served.url, w.filename()), Some(CI), "").await;
    assert_eq!(status, 200, "{body}");
    assert!(store.join(&held).is_file());
    drop(served);
    // The log names the local promotion and both refusals.
    let out = quarry(&["audit", "--store", &s], &[]).await;
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(log.contains("promote ok local:") && log.contains(&held), "{log}");
    assert!(log.contains(&format!("delete refused admin {held}")), "{log}");
}
