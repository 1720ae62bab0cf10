//! Support for Quarry's end-to-end suites: wheels built on the fly, an in-process server on a
//! free loopback port, the real `pip` / `uv` / `quarry` executables, and raw HTTP for requests
//! a well-behaved client would never send.
//!
//! Python tools come from the virtualenv named by `QUARRY_TEST_VENV` (`scripts/test` creates
//! it). A missing tool fails the test with instructions; nothing is skipped silently.
#![allow(clippy::print_stderr, clippy::missing_panics_doc)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use base64_like::urlsafe_b64_nopad;
use quarry_index_server::{AppState, LoggedRequest};
use quarry_store::{LocalStore, Store};
use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;

pub mod built;
pub mod native;
pub mod proxy;
pub mod reader;
pub mod s3;

pub const TOKEN: &str = "test-token-0123456789";
pub const ROOT: &str = "12345678901-linux/python/";

/// A wheel to build.
#[derive(Debug, Clone)]
pub struct WheelSpec {
    pub name: String,
    pub version: String,
    pub requires_python: Option<String>,
    pub requires_dist: Vec<String>,
}

impl WheelSpec {
    pub fn new(name: &str, version: &str) -> Self {
        Self { name: name.into(), version: version.into(), requires_python: None, requires_dist: Vec::new() }
    }

    #[must_use]
    pub fn requires_python(mut self, spec: &str) -> Self {
        self.requires_python = Some(spec.into());
        self
    }

    #[must_use]
    pub fn requires(mut self, req: &str) -> Self {
        self.requires_dist.push(req.into());
        self
    }

    /// The distribution name as wheel filenames spell it.
    pub fn dist(&self) -> String {
        self.name.replace(['-', '.'], "_")
    }

    pub fn filename(&self) -> String {
        format!("{}-{}-py3-none-any.whl", self.dist(), self.version)
    }

    pub fn metadata(&self) -> String {
        let mut m = format!("Metadata-Version: 2.1\nName: {}\nVersion: {}\n", self.name, self.version);
        if let Some(rp) = &self.requires_python {
            m.push_str(&format!("Requires-Python: {rp}\n"));
        }
        for r in &self.requires_dist {
            m.push_str(&format!("Requires-Dist: {r}\n"));
        }
        m
    }

    /// Build the wheel in memory: a module, METADATA, WHEEL and a RECORD with real hashes.
    pub fn build(&self) -> Vec<u8> {
        let dist_info = format!("{}-{}.dist-info", self.dist(), self.version);
        let module = format!("{}/__init__.py", self.dist().to_lowercase());
        let members = vec![
            (module, format!("VERSION = {:?}\n", self.version)),
            (format!("{dist_info}/METADATA"), self.metadata()),
            (
                format!("{dist_info}/WHEEL"),
                "Wheel-Version: 1.0\nGenerator: quarry-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n".into(),
            ),
        ];
        build_zip(&members, Some(&dist_info))
    }

    /// Build and write into `dir`, returning the path.
    pub fn write_to(&self, dir: &Path) -> PathBuf {
        let path = dir.join(self.filename());
        std::fs::write(&path, self.build()).expect("write wheel");
        path
    }
}

/// A zip of `members` (path, text), with a RECORD under `record_dir` when given. Fixed
/// timestamps, so the same members give the same bytes.
pub fn build_zip(members: &[(String, String)], record_dir: Option<&str>) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut out);
        let options = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .last_modified_time(zip::DateTime::default());
        let mut record = String::new();
        for (path, text) in members {
            zip.start_file(path.as_str(), options).expect("zip entry");
            zip.write_all(text.as_bytes()).expect("zip write");
            let digest = urlsafe_b64_nopad(&Sha256::digest(text.as_bytes()));
            record.push_str(&format!("{path},sha256={digest},{}\n", text.len()));
        }
        if let Some(dir) = record_dir {
            record.push_str(&format!("{dir}/RECORD,,\n"));
            zip.start_file(format!("{dir}/RECORD"), options).expect("zip entry");
            zip.write_all(record.as_bytes()).expect("zip write");
        }
        zip.finish().expect("zip finish");
    }
    out.into_inner()
}

mod base64_like {
    /// URL-safe base64 without padding (RECORD's hash encoding).
    pub(crate) fn urlsafe_b64_nopad(data: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in data.chunks(3) {
            let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..=chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        out
    }
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// An in-process Quarry server over a local store in a temporary directory.
pub struct TestServer {
    pub url: String,
    pub state: AppState,
    pub dir: tempfile::TempDir,
    store_dir: PathBuf,
    pub client: reqwest::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl TestServer {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_in(dir).await
    }

    /// Serve the store at `dir/store`.
    pub async fn start_in(dir: tempfile::TempDir) -> Self {
        let store_dir = dir.path().join("store");
        Self::serve(dir, store_dir).await
    }

    /// Serve the store rooted at `dir` itself.
    pub async fn start_in_store(dir: tempfile::TempDir) -> Self {
        let store_dir = dir.path().to_path_buf();
        Self::serve(dir, store_dir).await
    }

    /// Serve a fresh store whose apt/dnf metadata is published with `config` (e.g. signed).
    pub async fn start_with_config(config: quarry_index::IndexConfig) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store_dir = dir.path().join("store");
        Self::serve_with(dir, store_dir, config).await
    }

    async fn serve(dir: tempfile::TempDir, store_dir: PathBuf) -> Self {
        Self::serve_with(dir, store_dir, quarry_index::IndexConfig::default()).await
    }

    async fn serve_with(dir: tempfile::TempDir, store_dir: PathBuf, config: quarry_index::IndexConfig) -> Self {
        let store: Arc<dyn Store> = Arc::new(LocalStore::open(&store_dir).expect("open store"));
        let state = AppState::new(store, vec![TOKEN.into()]).with_index_config(config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn({
            let state = state.clone();
            async move {
                quarry_index_server::serve(listener, state, async {
                    let _ = rx.await;
                })
                .await
                .expect("server");
            }
        });
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            // No idle keep-alive connections: they would hold up graceful shutdown.
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        Self { url, state, dir, store_dir, client, shutdown: Some(tx), task: Some(task) }
    }

    pub fn store_dir(&self) -> PathBuf {
        self.store_dir.clone()
    }

    pub fn root_url(&self) -> String {
        format!("{}{ROOT}", self.url)
    }

    pub async fn upload_bytes(&self, key: &str, body: Vec<u8>) -> (u16, String) {
        let response = self
            .client
            .put(format!("{}{key}", self.url))
            .bearer_auth(TOKEN)
            .body(body)
            .send()
            .await
            .expect("upload request");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// Upload a wheel into [`ROOT`], asserting success.
    pub async fn upload(&self, spec: &WheelSpec) {
        let (status, body) = self.upload_bytes(&format!("{ROOT}{}", spec.filename()), spec.build()).await;
        assert!(status == 201 || status == 200, "upload of {} failed: {status} {body}", spec.filename());
    }

    pub async fn get_text(&self, path: &str) -> (u16, String) {
        let response = self.client.get(format!("{}{path}", self.url)).send().await.expect("GET");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    pub fn requests(&self) -> Vec<LoggedRequest> {
        self.state.request_log()
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The virtualenv holding pip and uv for the suites.
pub fn venv() -> PathBuf {
    let path = venv_dir();
    for tool in ["python", "pip", "uv"] {
        assert!(
            path.join("bin").join(tool).exists(),
            "{tool} not found in {}: run scripts/test (it creates the virtualenv) or set QUARRY_TEST_VENV",
            path.display()
        );
    }
    path
}

/// Where the test virtualenv is (`QUARRY_TEST_VENV`, else `.venv` in the workspace), checked or not.
pub fn venv_dir() -> PathBuf {
    std::env::var_os("QUARRY_TEST_VENV").map(PathBuf::from).unwrap_or_else(|| workspace_root().join(".venv"))
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

/// The `quarry` binary built beside this test (run `cargo build -p quarry` first), or the one
/// `QUARRY_BIN` names (an installed or separately built binary).
pub fn quarry_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("QUARRY_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("quarry");
    assert!(bin.exists(), "{} is missing: run `cargo build -p quarry` first (scripts/test does)", bin.display());
    bin
}

/// The flags (after `--stage math-libs`) of the recorded `configure_stage.py` case
/// `math-libs|windows|families` in `configure-from-therock.json`.
pub const CONFIGURE_WINDOWS_FAMILIES: [&str; 8] = [
    "--platform",
    "windows",
    "--amdgpu-families",
    "gfx94X-dcgpu",
    "--dist-amdgpu-families",
    "gfx94X-dcgpu;gfx110X-all",
    "--manylinux",
    "--comments",
];

/// Write `bytes` at `key` of a local store directory (behind the server's back, as CI or a
/// broken client would).
pub fn plant(store: &Path, key: &str, bytes: &[u8]) {
    let path = store.join(key);
    std::fs::create_dir_all(path.parent().expect("a key has a parent")).expect("create dirs");
    std::fs::write(path, bytes).expect("write");
}

/// `quarry serve` as a child process, killed when dropped.
pub struct ServedBinary {
    pub child: tokio::process::Child,
    /// The URL it printed, ending in `/` (`https://` when it serves TLS).
    pub url: String,
}

impl ServedBinary {
    /// Start `cmd` (`quarry serve … --addr 127.0.0.1:0`, stderr already directed) and wait for
    /// the URL it prints on stdout.
    pub async fn start(mut cmd: tokio::process::Command) -> Self {
        let mut child = cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start quarry serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
        let url = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("quarry serve printed its URL in time")
            .expect("read stdout")
            .expect("a URL line (see the server's stderr)");
        let plain_or_tls = url.starts_with("http://127.0.0.1:") || url.starts_with("https://127.0.0.1:");
        assert!(plain_or_tls && url.ends_with('/'), "{url}");
        Self { child, url }
    }
}

/// Run a command with a time limit, returning its output.
pub async fn run(mut cmd: tokio::process::Command, limit: Duration) -> Output {
    cmd.kill_on_drop(true).stdin(std::process::Stdio::null());
    let shown = format!("{cmd:?}");
    match tokio::time::timeout(limit, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("could not run {shown}: {e}"),
        Err(_) => panic!("{shown} took longer than {limit:?}"),
    }
}

/// `pip install` into a fresh target directory; returns (output, target dir).
pub async fn pip_install(args: &[&str], target: &Path) -> Output {
    let venv = venv();
    let mut cmd = tokio::process::Command::new(venv.join("bin/pip"));
    cmd.args(["install", "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--target"])
        .arg(target)
        .args(args)
        .env("PIP_CONFIG_FILE", "/dev/null");
    run(cmd, Duration::from_secs(180)).await
}

/// `uv pip install` into a fresh target directory.
pub async fn uv_pip(subcommand: &str, args: &[&str], target: Option<&Path>) -> Output {
    let venv = venv();
    let mut cmd = tokio::process::Command::new(venv.join("bin/uv"));
    cmd.args(["pip", subcommand, "--no-cache", "--python"]).arg(venv.join("bin/python"));
    if let Some(t) = target {
        cmd.arg("--target").arg(t);
    }
    cmd.args(args).env("UV_NO_CONFIG", "1").env_remove("UV_INDEX_URL").env_remove("UV_EXTRA_INDEX_URL");
    run(cmd, Duration::from_secs(180)).await
}

pub fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `.dist-info` directories installed into `target`.
pub fn installed(target: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(target)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".dist-info"))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Send one raw HTTP/1.1 request (for paths a URL library would normalize) and return
/// (status, body).
pub async fn raw_request(
    base_url: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = base_url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(host).await.expect("connect");
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    stream.write_all(body).await.expect("write body");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response))
        .await
        .expect("response in time")
        .expect("read");
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// Every page of a root, for before/after comparisons.
pub async fn snapshot_pages(server: &TestServer, projects: &[&str]) -> Vec<(String, String)> {
    let mut paths =
        vec![format!("{ROOT}index.html"), format!("{ROOT}simple/index.html"), format!("{ROOT}simple/index.json")];
    for p in projects {
        paths.push(format!("{ROOT}simple/{p}/index.html"));
        paths.push(format!("{ROOT}simple/{p}/index.json"));
    }
    let mut out = Vec::new();
    for p in paths {
        let (status, body) = server.get_text(&p).await;
        assert_eq!(status, 200, "GET {p}");
        out.push((p, body));
    }
    out
}

/// Assert that every page of the root lists exactly `files`, and every advertised `.metadata`
/// is served.
pub async fn assert_pages_complete(server: &TestServer, files: &[WheelSpec]) {
    let (status, find_links) = server.get_text(&format!("{ROOT}index.html")).await;
    assert_eq!(status, 200);
    let (_, simple_root) = server.get_text(&format!("{ROOT}simple/index.json")).await;
    let simple_root: serde_json::Value = serde_json::from_str(&simple_root).expect("root JSON");
    let listed: Vec<&str> =
        simple_root["projects"].as_array().expect("projects").iter().filter_map(|p| p["name"].as_str()).collect();
    for spec in files {
        let filename = spec.filename();
        assert!(find_links.contains(&format!(">{filename}</a>")), "{filename} missing from index.html");
        let project = quarry_packaging::PackageName::new(&spec.name).expect("name");
        assert!(listed.contains(&project.as_str()), "{project} missing from simple/index.json");
        let (_, html) = server.get_text(&format!("{ROOT}simple/{project}/index.html")).await;
        assert!(html.contains(&format!(">{filename}</a>")), "{filename} missing from simple/{project}/index.html");
        let (_, json) = server.get_text(&format!("{ROOT}simple/{project}/index.json")).await;
        let json: serde_json::Value = serde_json::from_str(&json).expect("project JSON");
        let file = json["files"]
            .as_array()
            .expect("files")
            .iter()
            .find(|f| f["filename"] == filename.as_str())
            .unwrap_or_else(|| panic!("{filename} missing from simple/{project}/index.json"));
        assert!(file["core-metadata"]["sha256"].is_string(), "{filename} has no core-metadata");
        let (status, metadata) = server.get_text(&format!("{ROOT}{filename}.metadata")).await;
        assert_eq!(status, 200, "{filename}.metadata is advertised but not served");
        assert_eq!(sha256_hex(metadata.as_bytes()), file["core-metadata"]["sha256"].as_str().unwrap_or_default());
    }
}
