//! `quarry mirror` end to end: a local `quarry serve` is the upstream (never a public host); the
//! chosen projects land in a `python-deps/` root with the upstream's hashes, PEP 658 metadata
//! and upload-times, pip and uv install from it, a second mirror writes nothing, a file whose
//! bytes do not match the upstream's hash is refused with nothing stored, and one origin per
//! project holds (`--compose-with`, `quarry check-origins`).
//!
//! A hostile upstream ([`Hostile`], a small HTTP/1.1 server on loopback answering fixed replies)
//! proves what an upstream cannot do: redirect the mirror to another origin (a second server
//! holding a "secret"), publish metadata other than the wheel's, slip in a file without a
//! sha256 or one the indexer refuses, send a body without end or one byte at a time. Each run is
//! bounded in time, and nothing of a refused file stays in the store or the temporary directory.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use quarry_tests::{
    ROOT, TestServer, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run, sha256_hex, uv_pip,
};

const DEPS: &str = "python-deps/";
const CHANNEL: &str = "v2/gfx94X-dcgpu/";

async fn quarry(args: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args);
    run(cmd, Duration::from_secs(120)).await
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file under `dir` with its modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, SystemTime> {
    fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, SystemTime>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.map(Result::unwrap) {
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), out);
            } else {
                out.insert(entry.path(), entry.metadata().unwrap().modified().unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, &mut out);
    out
}

async fn simple_json(server: &TestServer, path: &str) -> serde_json::Value {
    let response = server
        .client
        .get(format!("{}{path}", server.url))
        .header("Accept", "application/vnd.pypi.simple.v1+json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "GET {path}");
    serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
}

/// The upstream: foo 1.0 and 2.0 and bar 1.0 (bar needs foo) in a run's pip root.
async fn upstream() -> TestServer {
    let server = TestServer::start().await;
    for spec in
        [WheelSpec::new("foo", "1.0"), WheelSpec::new("foo", "2.0"), WheelSpec::new("bar", "1.0").requires("foo")]
    {
        server.upload(&spec).await;
    }
    server
}

fn mirror_args<'a>(store: &'a str, to: &'a str, upstream: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["mirror", "--store", store, "--to", to, "--upstream", upstream];
    args.extend_from_slice(extra);
    args
}

#[tokio::test]
async fn mirrored_projects_keep_upstream_hashes_metadata_and_times_and_install() {
    let up = upstream().await;
    let upstream_url = format!("{}{ROOT}simple/", up.url);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().display().to_string();
    let reqs = dir.path().join("requirements.txt");
    std::fs::write(&reqs, "# the base index\nbar==1.0\n").unwrap();
    let reqs = reqs.display().to_string();
    let args = mirror_args(&store, DEPS, &upstream_url, &["--project", "foo==1.0", "-r", &reqs]);
    let first = quarry(&args).await;
    assert_success(&first, "quarry mirror");
    let text = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(text.contains("mirrored  foo-1.0-py3-none-any.whl"), "{text}");
    assert!(!dir.path().join(format!("{DEPS}foo-2.0-py3-none-any.whl")).exists(), "only the version asked for");

    // Idempotent: a second identical mirror writes nothing.
    let before = snapshot(dir.path());
    let second = quarry(&args).await;
    assert_success(&second, "quarry mirror (again)");
    assert!(String::from_utf8_lossy(&second.stdout).contains("present   foo-1.0"), "{}", stderr(&second));
    assert_eq!(snapshot(dir.path()), before, "the second mirror changed the store");

    let served = TestServer::start_in_store(dir).await;
    for project in ["foo", "bar"] {
        let theirs = simple_json(&up, &format!("{ROOT}simple/{project}/")).await;
        // The stored PEP 691 page (negotiation of `python-deps/` comes with the configured layout).
        let ours = simple_json(&served, &format!("{DEPS}simple/{project}/index.json")).await;
        let want: Vec<&serde_json::Value> = theirs["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["filename"].as_str().unwrap().contains("-1.0-"))
            .collect();
        let got = ours["files"].as_array().unwrap();
        assert_eq!(got.len(), 1, "{ours}");
        for field in ["filename", "hashes", "upload-time", "core-metadata", "size"] {
            assert_eq!(got[0][field], want[0][field], "{project}: {field} differs from the upstream's");
        }
    }

    // The mirror as an upstream in turn: `python-deps/` pages are served as stored HTML (no
    // negotiation there), so this reads PEP 503 anchors and keeps the same hashes and times.
    let html_upstream = format!("{}{DEPS}simple/", served.url);
    let third = tempfile::tempdir().unwrap();
    let third_store = third.path().display().to_string();
    let chained = quarry(&mirror_args(&third_store, DEPS, &html_upstream, &["--project", "foo==1.0"])).await;
    assert_success(&chained, "quarry mirror from an HTML-only upstream");
    let read_page = |dir: &Path| -> serde_json::Value {
        let page = std::fs::read(dir.join(format!("{DEPS}simple/foo/index.json"))).unwrap();
        serde_json::from_slice(&page).unwrap()
    };
    assert_eq!(read_page(third.path())["files"], read_page(&served.store_dir())["files"]);

    let url = format!("{}{DEPS}simple/", served.url);
    let target = tempfile::tempdir().unwrap();
    let out = pip_install(&["--index-url", &url, "bar==1.0"], target.path()).await;
    assert_success(&out, "pip install from the mirror");
    assert_eq!(installed(target.path()), ["bar-1.0.dist-info", "foo-1.0.dist-info"]);
    let target = tempfile::tempdir().unwrap();
    let out = uv_pip("install", &["--index-url", &url, "bar==1.0"], Some(target.path())).await;
    assert_success(&out, "uv pip install from the mirror");
    assert_eq!(installed(target.path()), ["bar-1.0.dist-info", "foo-1.0.dist-info"]);
    served.stop().await;
    up.stop().await;
}

#[tokio::test]
async fn a_file_that_does_not_match_the_upstream_hash_is_refused_and_not_stored() {
    let up = upstream().await;
    // The upstream's file changes behind its index (one byte, so its size is still the page's):
    // its page still gives the old sha256.
    let key = format!("{ROOT}foo-2.0-py3-none-any.whl");
    let mut bytes = std::fs::read(up.store_dir().join(&key)).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    plant(&up.store_dir(), &key, &bytes);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().display().to_string();
    let upstream_url = format!("{}{ROOT}simple/", up.url);
    let out =
        quarry(&mirror_args(&store, DEPS, &upstream_url, &["--project", "foo==2.0", "--project", "nope==1"])).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(report.contains("FAILED    foo-2.0-py3-none-any.whl: the downloaded bytes: sha256"), "{report}");
    assert!(report.contains("but the upstream says"), "{report}");
    assert!(report.contains("FAILED    nope==1: GET "), "an unknown project is named: {report}");
    assert!(!dir.path().join(format!("{DEPS}foo-2.0-py3-none-any.whl")).exists(), "a mismatching file was stored");
    up.stop().await;
}

#[tokio::test]
async fn one_origin_per_project_is_enforced() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().display().to_string();
    let upstream_url = format!("{}{ROOT}simple/", up.url);
    // The channel supplies foo.
    assert_success(&quarry(&mirror_args(&store, CHANNEL, &upstream_url, &["--project", "foo==2.0"])).await, "channel");
    let composed = ["--compose-with", CHANNEL];
    let refused =
        quarry(&mirror_args(&store, DEPS, &upstream_url, &[&composed[..], &["--project", "foo==1.0"]].concat())).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains(&format!("foo is supplied by both {CHANNEL} and {DEPS}")),
        "{}",
        stderr(&refused)
    );
    assert!(!dir.path().join(DEPS).exists(), "a refused mirror stored something");
    // bar is fine beside the channel.
    let ok =
        quarry(&mirror_args(&store, DEPS, &upstream_url, &[&composed[..], &["--project", "bar==1.0"]].concat())).await;
    assert_success(&ok, "mirror bar beside the channel");
    assert_success(&quarry(&["check-origins", "--store", &store, CHANNEL, DEPS]).await, "check-origins");
    // Without --compose-with nothing stops foo; check-origins then names both roots.
    assert_success(&quarry(&mirror_args(&store, DEPS, &upstream_url, &["--project", "foo==1.0"])).await, "mirror");
    let check = quarry(&["check-origins", "--store", &store, CHANNEL, DEPS, "--json"]).await;
    assert_eq!(check.status.code(), Some(1), "{}", stderr(&check));
    let conflicts: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(conflicts, serde_json::json!([{"project": "foo", "first": CHANNEL, "second": DEPS}]));
    up.stop().await;
}

#[tokio::test]
async fn bad_mirror_input_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().display().to_string();
    for (extra, says) in [
        (vec![], "nothing to mirror"),
        (vec!["--project", "foo>=1"], "expected NAME==VERSION"),
        (vec!["--project", "foo==1", "--python-version", "three"], "not a Python version"),
        (vec!["--project", "foo==1", "--allow-redirect-origin", "ftp://files.example"], "not an http or https origin"),
        (
            vec!["--project", "foo==1", "--allow-redirect-origin", "https://files.example/packages/"],
            "an origin is scheme://host[:port] and nothing more",
        ),
    ] {
        let out = quarry(&mirror_args(&store, DEPS, "http://127.0.0.1:9/simple/", &extra)).await;
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{extra:?}: {}", stderr(&out));
    }
}

// ---- A hostile upstream ----------------------------------------------------------------------

/// What the hostile upstream answers at one path.
#[derive(Clone)]
enum Reply {
    /// 200 with this content type and body.
    Body(&'static str, Vec<u8>),
    /// 302 to this URL.
    Redirect(String),
    /// 200 with this `Content-Length` (none: to the end of the connection), then zeros without
    /// end, until the client hangs up.
    Endless(Option<u64>),
    /// 200 with `Content-Length: len`, one byte every `every`.
    Trickle { len: usize, every: Duration },
}

/// A request the hostile upstream saw: its path, and the files (not directories) under the
/// watched directory at that moment.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    files_in_watched: Vec<PathBuf>,
}

/// A small HTTP/1.1 server on a free loopback port answering fixed [`Reply`]s by path (404
/// otherwise), one request per connection; stopped (every connection with it) when dropped.
struct Hostile {
    /// `http://127.0.0.1:PORT` (no trailing `/`: also the origin).
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hostile {
    async fn start(routes: Vec<(String, Reply)>, watched: Option<PathBuf>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let routes: Arc<HashMap<String, Reply>> = Arc::new(routes.into_iter().collect());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            // Dropped with the accept loop (abort): every connection ends with the server.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((conn, _)) = listener.accept().await else { return };
                let (routes, log, watched) = (routes.clone(), log.clone(), watched.clone());
                // No connection outlives a minute, whatever the client does.
                connections.spawn(tokio::time::timeout(Duration::from_secs(60), async move {
                    let _ = answer(conn, &routes, &log, watched.as_deref()).await;
                }));
                while connections.try_join_next().is_some() {}
            }
        });
        Self { url, seen, task }
    }

    fn paths(&self) -> Vec<String> {
        self.seen.lock().unwrap().iter().map(|s| s.path.clone()).collect()
    }

    fn seen(&self, path: &str) -> Option<Seen> {
        self.seen.lock().unwrap().iter().find(|s| s.path == path).cloned()
    }
}

/// Every regular file under `dir` (an entry that vanishes while it is read is skipped: the
/// mirror may be removing it).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for entry in entries.flatten() {
            match entry.file_type() {
                Ok(t) if t.is_dir() => walk(&entry.path(), out),
                Ok(_) => out.push(entry.path()),
                Err(_) => {}
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

async fn answer(
    mut conn: tokio::net::TcpStream,
    routes: &HashMap<String, Reply>,
    log: &Mutex<Vec<Seen>>,
    watched: Option<&Path>,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = conn.read(&mut buf).await?;
        if n == 0 || head.len() > 64 << 10 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    let path = text.split(' ').nth(1).unwrap_or_default().to_owned();
    let files_in_watched = watched.map(files_under).unwrap_or_default();
    log.lock().unwrap().push(Seen { path: path.clone(), files_in_watched });
    let status = |code: &str, headers: &str| format!("HTTP/1.1 {code}\r\nConnection: close\r\n{headers}\r\n");
    match routes.get(&path) {
        None => conn.write_all(status("404 Not Found", "Content-Length: 0\r\n").as_bytes()).await?,
        Some(Reply::Body(content_type, body)) => {
            let headers = format!("Content-Type: {content_type}\r\nContent-Length: {}\r\n", body.len());
            conn.write_all(status("200 OK", &headers).as_bytes()).await?;
            conn.write_all(body).await?;
        }
        Some(Reply::Redirect(location)) => {
            let headers = format!("Location: {location}\r\nContent-Length: 0\r\n");
            conn.write_all(status("302 Found", &headers).as_bytes()).await?;
        }
        Some(Reply::Endless(length)) => {
            let headers = length.map(|n| format!("Content-Length: {n}\r\n")).unwrap_or_default();
            conn.write_all(status("200 OK", &headers).as_bytes()).await?;
            let zeros = vec![0u8; 64 << 10];
            loop {
                conn.write_all(&zeros).await?;
            }
        }
        Some(Reply::Trickle { len, every }) => {
            conn.write_all(status("200 OK", &format!("Content-Length: {len}\r\n")).as_bytes()).await?;
            for _ in 0..*len {
                conn.write_all(b"x").await?;
                conn.flush().await?;
                tokio::time::sleep(*every).await;
            }
        }
    }
    conn.shutdown().await
}

const JSON_PAGE: &str = "application/vnd.pypi.simple.v1+json";
const SECRET: &str = "AccessKeyId=ASIAQUARRYTEST SecretAccessKey=instance-credentials-must-never-be-stored";

/// A PEP 691 project page listing `files`.
fn json_page(files: Vec<serde_json::Value>) -> Reply {
    let page = serde_json::json!({"meta": {"api-version": "1.1"}, "name": "x", "files": files});
    Reply::Body(JSON_PAGE, serde_json::to_vec(&page).unwrap())
}

/// A PEP 691 file entry for `filename` at `/files/{filename}`, with `extra` fields.
fn json_file(filename: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut file = serde_json::json!({"filename": filename, "url": format!("/files/{filename}")});
    file.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    file
}

/// `quarry mirror` from a hostile upstream, with a tighter time limit than the suite's and a
/// temporary directory of the test's own (`TMPDIR` and its Windows counterparts).
async fn mirror_from(store: &Path, upstream: &Hostile, tmp: &Path, extra: &[&str]) -> (Output, Duration) {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    let upstream_url = format!("{}/simple/", upstream.url);
    cmd.args(["mirror", "--store"])
        .arg(store)
        .args(["--to", DEPS, "--upstream", &upstream_url, "--timeout", "5"])
        .args(extra)
        .env("TMPDIR", tmp)
        .env("TMP", tmp)
        .env("TEMP", tmp);
    let started = std::time::Instant::now();
    let out = run(cmd, Duration::from_secs(60)).await;
    (out, started.elapsed())
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The files under `store` (a local store directory) whose path contains `name`.
fn stored_named(store: &Path, name: &str) -> Vec<PathBuf> {
    files_under(store).into_iter().filter(|p| p.to_string_lossy().contains(name)).collect()
}

/// The files under `store` whose bytes contain `needle`.
fn stored_containing(store: &Path, needle: &[u8]) -> Vec<PathBuf> {
    files_under(store)
        .into_iter()
        .filter(|p| std::fs::read(p).unwrap_or_default().windows(needle.len()).any(|w| w == needle))
        .collect()
}

#[tokio::test]
async fn a_redirect_to_another_origin_is_refused_and_the_secret_never_stored() {
    let secret_host = Hostile::start(
        vec![
            ("/creds".into(), Reply::Body("text/plain", SECRET.into())),
            (
                "/moved/bar-1.0-py3-none-any.whl".into(),
                Reply::Body("application/zip", WheelSpec::new("bar", "1.0").build()),
            ),
        ],
        None,
    )
    .await;
    let foo = WheelSpec::new("foo", "1.0");
    let bar = WheelSpec::new("bar", "1.0");
    let upstream = Hostile::start(
        vec![
            // PEP 658/714 metadata offered without a hash; its URL sends the mirror elsewhere.
            (
                "/simple/foo/".into(),
                json_page(vec![json_file(
                    &foo.filename(),
                    serde_json::json!({"hashes": {"sha256": sha256_hex(&foo.build())}, "core-metadata": true}),
                )]),
            ),
            (format!("/files/{}", foo.filename()), Reply::Body("application/zip", foo.build())),
            (format!("/files/{}.metadata", foo.filename()), Reply::Redirect(format!("{}/creds", secret_host.url))),
            // A file whose URL moved to another host.
            (
                "/simple/bar/".into(),
                json_page(vec![json_file(
                    &bar.filename(),
                    serde_json::json!({"hashes": {"sha256": sha256_hex(&bar.build())}}),
                )]),
            ),
            (
                format!("/files/{}", bar.filename()),
                Reply::Redirect(format!("{}/moved/{}", secret_host.url, bar.filename())),
            ),
        ],
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (store, tmp) = (dir.path().join("store"), dir.path().join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    let wanted = ["--project", "foo==1.0", "--project", "bar==1.0"];

    let (out, _) = mirror_from(&store, &upstream, &tmp, &wanted).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", stdout(&out), stderr(&out));
    let report = stdout(&out);
    for (file, url) in [
        (foo.filename(), format!("{}/creds", secret_host.url)),
        (bar.filename(), format!("{}/moved/{}", secret_host.url, bar.filename())),
    ] {
        let line = report.lines().find(|l| l.contains(&file)).unwrap_or_default();
        assert!(line.starts_with("FAILED"), "{file}: {report}");
        assert!(line.contains(&format!("redirect to {url} refused")), "{line}");
        assert!(line.contains(&format!("--allow-redirect-origin {}", secret_host.url)), "{line}");
    }
    assert_eq!(secret_host.paths(), Vec::<String>::new(), "the other origin was asked");
    assert_eq!(stored_named(&store, "-1.0-py3"), Vec::<PathBuf>::new());
    assert_eq!(stored_containing(&store, SECRET.as_bytes()), Vec::<PathBuf>::new());

    // That origin allowed: the moved file is mirrored, and the "metadata" it answers for foo is
    // fetched but is not foo's METADATA, so foo is refused and the secret still lands nowhere.
    let allow = ["--allow-redirect-origin", &secret_host.url];
    let (out, _) = mirror_from(&store, &upstream, &tmp, &[&wanted[..], &allow[..]].concat()).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", stdout(&out), stderr(&out));
    let report = stdout(&out);
    assert!(report.contains(&format!("mirrored  {}", bar.filename())), "{report}");
    let line = report.lines().find(|l| l.contains(&foo.filename())).unwrap_or_default();
    assert!(line.starts_with("FAILED") && line.contains("differs from the wheel's METADATA"), "{report}");
    assert_eq!(stored_named(&store, &foo.filename()), Vec::<PathBuf>::new());
    assert_eq!(stored_containing(&store, SECRET.as_bytes()), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn upstream_metadata_other_than_the_wheels_and_files_the_indexer_refuses_are_not_published() {
    let (foo, good, junk) = (WheelSpec::new("foo", "1.0"), WheelSpec::new("good", "1.0"), "junk-1.0-py3-none-any.whl");
    // foo's upstream metadata adds a dependency the wheel does not have (and hashes it).
    let forged = format!("{}Requires-Dist: evil-package\n", foo.metadata());
    let junk_bytes = b"not a zip, but its sha256 is the page's".to_vec();
    let page = |file: String, extra| json_page(vec![json_file(&file, extra)]);
    let hashed = |bytes: &[u8], metadata: &str| serde_json::json!({"hashes": {"sha256": sha256_hex(bytes)}, "core-metadata": {"sha256": sha256_hex(metadata.as_bytes())}});
    let upstream = Hostile::start(
        vec![
            ("/simple/foo/".into(), page(foo.filename(), hashed(&foo.build(), &forged))),
            (format!("/files/{}", foo.filename()), Reply::Body("application/zip", foo.build())),
            (format!("/files/{}.metadata", foo.filename()), Reply::Body("text/plain", forged.clone().into())),
            ("/simple/good/".into(), page(good.filename(), hashed(&good.build(), &good.metadata()))),
            (format!("/files/{}", good.filename()), Reply::Body("application/zip", good.build())),
            (format!("/files/{}.metadata", good.filename()), Reply::Body("text/plain", good.metadata().into())),
            (
                "/simple/junk/".into(),
                page(junk.into(), serde_json::json!({"hashes": {"sha256": sha256_hex(&junk_bytes)}})),
            ),
            (format!("/files/{junk}"), Reply::Body("application/zip", junk_bytes)),
        ],
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (store, tmp) = (dir.path().join("store"), dir.path().join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    let wanted = ["--project", "foo==1.0", "--project", "good==1.0", "--project", "junk==1.0", "--json"];
    let (out, _) = mirror_from(&store, &upstream, &tmp, &wanted).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", stdout(&out), stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failures: Vec<&str> = report["failures"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(failures.len(), 2, "{report}");
    assert!(failures[0].starts_with(&format!("{}: ", foo.filename())), "{failures:?}");
    assert!(failures[0].contains("the upstream's metadata differs from the wheel's METADATA"), "{failures:?}");
    assert!(failures[1].starts_with(&format!("{junk}: ")) && failures[1].contains("refused"), "{failures:?}");
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{report}");
    assert_eq!(
        (files[0]["filename"].as_str(), files[0]["upstream_metadata"].as_bool()),
        (Some(&*good.filename()), Some(true))
    );
    // Nothing of foo or junk in the store; the forged metadata nowhere.
    assert_eq!(stored_named(&store, "foo-1.0"), Vec::<PathBuf>::new());
    assert_eq!(stored_named(&store, "junk"), Vec::<PathBuf>::new());
    assert_eq!(stored_containing(&store, b"evil-package"), Vec::<PathBuf>::new());
    assert_eq!(stored_containing(&store, b"not a zip"), Vec::<PathBuf>::new());
    assert!(store.join(format!("{DEPS}{}", good.filename())).exists());
}

#[tokio::test]
async fn a_file_without_an_upstream_sha256_is_refused_unless_allowed_and_then_marked_unverified() {
    let foo = WheelSpec::new("foo", "1.0");
    // A PEP 503 page whose link has no `#sha256=`.
    let html = format!("<html><body><a href=\"/files/{0}\">{0}</a></body></html>", foo.filename());
    let upstream = Hostile::start(
        vec![
            ("/simple/foo/".into(), Reply::Body("text/html", html.into())),
            (format!("/files/{}", foo.filename()), Reply::Body("application/zip", foo.build())),
        ],
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (store, tmp) = (dir.path().join("store"), dir.path().join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    let (out, _) = mirror_from(&store, &upstream, &tmp, &["--project", "foo==1.0"]).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "FAILED    {}: the upstream gives no sha256 for it, so it cannot be verified (--allow-unhashed",
            foo.filename()
        )),
        "{}",
        stdout(&out)
    );
    assert!(!upstream.paths().contains(&format!("/files/{}", foo.filename())), "downloaded anyway");
    assert_eq!(stored_named(&store, "foo"), Vec::<PathBuf>::new());

    // Allowed: hashed on the way, checked by the indexer, and marked unverified in the report.
    let (out, _) = mirror_from(&store, &upstream, &tmp, &["--project", "foo==1.0", "--allow-unhashed", "--json"]).await;
    assert_success(&out, "mirror --allow-unhashed");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let file = &report["files"][0];
    assert_eq!(file["status"], "mirrored", "{report}");
    assert_eq!(file["verified"], false, "{report}");
    assert_eq!(file["sha256"], sha256_hex(&foo.build()), "{report}");
    assert!(stderr(&out).contains("no sha256"), "a warning names the unverified file: {}", stderr(&out));
    let (text, _) = mirror_from(&store, &upstream, &tmp, &["--project", "foo==1.0", "--allow-unhashed"]).await;
    assert_success(&text, "mirror --allow-unhashed (again)");
    assert!(stdout(&text).contains(&format!("present   {} sha256=", foo.filename())), "{}", stdout(&text));
    assert!(stdout(&text).contains("(unverified: the upstream gave no sha256)"), "{}", stdout(&text));
}

#[tokio::test]
async fn an_endless_download_stops_at_its_cap_and_its_temporary_file_is_gone() {
    let ok = WheelSpec::new("ok", "1.0");
    let dir = tempfile::tempdir().unwrap();
    let (store, tmp) = (dir.path().join("store"), dir.path().join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    let (declared, sizeless, claimed) =
        ("declared-1.0-py3-none-any.whl", "unsized-1.0-py3-none-any.whl", "claimed-1.0-py3-none-any.whl");
    let hash = serde_json::json!({"hashes": {"sha256": "00".repeat(32)}});
    let upstream = Hostile::start(
        vec![
            // PEP 700 `size`: 4096 bytes, but the body does not end.
            (
                "/simple/declared/".into(),
                json_page(vec![json_file(
                    declared,
                    serde_json::json!({"hashes": {"sha256": "00".repeat(32)}, "size": 4096}),
                )]),
            ),
            (format!("/files/{declared}"), Reply::Endless(None)),
            // No size anywhere: --max-file-size stops it.
            ("/simple/unsized/".into(), json_page(vec![json_file(sizeless, hash.clone())])),
            (format!("/files/{sizeless}"), Reply::Endless(None)),
            // A Content-Length above the cap is refused before the body is read.
            ("/simple/claimed/".into(), json_page(vec![json_file(claimed, hash)])),
            (format!("/files/{claimed}"), Reply::Endless(Some(10 << 30))),
            (
                "/simple/ok/".into(),
                json_page(vec![json_file(
                    &ok.filename(),
                    serde_json::json!({"hashes": {"sha256": sha256_hex(&ok.build())}}),
                )]),
            ),
            (format!("/files/{}", ok.filename()), Reply::Body("application/zip", ok.build())),
        ],
        Some(tmp.clone()),
    )
    .await;
    let cap = (2u64 << 20).to_string();
    let wanted = [
        "--project",
        "declared==1.0",
        "--project",
        "unsized==1.0",
        "--project",
        "claimed==1.0",
        "--project",
        "ok==1.0",
    ];
    let (out, took) = mirror_from(&store, &upstream, &tmp, &[&wanted[..], &["--max-file-size", &cap]].concat()).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", stdout(&out), stderr(&out));
    assert!(took < Duration::from_secs(30), "took {took:?}");
    let report = stdout(&out);
    let line = |file: &str| report.lines().find(|l| l.contains(file)).unwrap_or_default().to_owned();
    let file_url = |file: &str| format!("{}/files/{file}", upstream.url);
    assert!(line(declared).starts_with("FAILED"), "{report}");
    assert!(
        line(declared).contains(&format!("GET {}: more than 4096 bytes (the upstream's size)", file_url(declared))),
        "{report}"
    );
    assert!(
        line(sizeless).contains(&format!("GET {}: more than {cap} bytes (--max-file-size)", file_url(sizeless))),
        "{report}"
    );
    assert!(
        line(claimed).contains(&format!(
            "GET {}: Content-Length {} is more than {cap} bytes (--max-file-size)",
            file_url(claimed),
            10u64 << 30
        )),
        "{report}"
    );
    assert!(line(&ok.filename()).starts_with("mirrored"), "{report}");
    // When the next project was asked for, no temporary file of the refused ones was left.
    let next = upstream.seen("/simple/ok/").expect("ok's page was asked for");
    assert_eq!(next.files_in_watched, Vec::<PathBuf>::new(), "temporary files left behind");
    assert_eq!(files_under(&tmp), Vec::<PathBuf>::new());
    for file in [declared, sizeless, claimed] {
        assert_eq!(stored_named(&store, file), Vec::<PathBuf>::new());
    }
}

#[tokio::test]
async fn a_trickling_upstream_is_stopped_by_the_deadline() {
    let trickle = Reply::Trickle { len: 100, every: Duration::from_secs(1) };
    let file = "slow-1.0-py3-none-any.whl";
    let upstream = Hostile::start(
        vec![
            (
                "/simple/slow/".into(),
                json_page(vec![json_file(file, serde_json::json!({"hashes": {"sha256": "00".repeat(32)}}))]),
            ),
            (format!("/files/{file}"), trickle.clone()),
            // A project page that trickles too.
            ("/simple/slowpage/".into(), trickle),
        ],
        None,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let (store, tmp) = (dir.path().join("store"), dir.path().join("tmp"));
    std::fs::create_dir_all(&tmp).unwrap();
    // Each byte comes well within --timeout 5, but the whole would take 100 s.
    let args = ["--project", "slow==1.0", "--project", "slowpage==1.0", "--deadline", "3"];
    let (out, took) = mirror_from(&store, &upstream, &tmp, &args).await;
    assert_eq!(out.status.code(), Some(1), "{}\n{}", stdout(&out), stderr(&out));
    assert!(took < Duration::from_secs(20), "took {took:?}");
    let report = stdout(&out);
    assert!(
        report.contains(&format!(
            "FAILED    {file}: GET {}/files/{file}: not finished within 3 s (--deadline)",
            upstream.url
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "FAILED    slowpage==1.0: GET {}/simple/slowpage/: not finished within 3 s (--deadline)",
            upstream.url
        )),
        "{report}"
    );
    assert_eq!(files_under(&tmp), Vec::<PathBuf>::new());
    assert_eq!(stored_named(&store, "slow-1.0"), Vec::<PathBuf>::new());
}
