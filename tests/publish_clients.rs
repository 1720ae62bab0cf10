//! The standard upload clients against `quarry serve`: real `twine upload --repository-url` and
//! `uv publish --publish-url` post wheels and an sdist to a pip root's URL with a scoped token,
//! and pip installs them from the served index; a token scoped elsewhere, a file that exists
//! with other bytes and a wrong sha256 are refused, with the reason shown by the clients' own
//! error display.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use quarry_tests::{ServedBinary, WheelSpec, assert_success, installed, quarry_bin, run, sha256_hex, venv, venv_dir};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// May write anywhere.
const ADMIN: &str = "publish-admin-token-0123";
/// May write only under run 111.
const CI: &str = "publish-ci-token-4567";
const RUN: &str = "111-linux/python/";
const OTHER_RUN: &str = "222-linux/python/";

async fn serve(dir: &Path) -> ServedBinary {
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, format!("{ADMIN}\n{CI} 111-linux/\n")).unwrap();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(dir.join("store"))
        .arg("--token-file")
        .arg(&tokens)
        .env_remove("QUARRY_TOKEN")
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_PRIVATE")
        .current_dir(dir)
        .stderr(std::fs::File::create(dir.join("serve.stderr")).unwrap());
    ServedBinary::start(cmd).await
}

/// twine from the test virtualenv, isolated from the user's configuration.
async fn twine(home: &Path, url: &str, token: &str, files: &[&Path]) -> Output {
    let twine = venv_dir().join("bin/twine");
    assert!(twine.exists(), "{} is missing: scripts/test installs twine into the test virtualenv", twine.display());
    let mut cmd = tokio::process::Command::new(twine);
    cmd.args(["upload", "--non-interactive", "--disable-progress-bar", "--repository-url", url])
        .args(["-u", "__token__", "-p", token])
        .args(files)
        .env("HOME", home)
        .env("TWINE_NON_INTERACTIVE", "1")
        .env_remove("TWINE_USERNAME")
        .env_remove("TWINE_PASSWORD")
        .env_remove("TWINE_REPOSITORY_URL");
    run(cmd, Duration::from_secs(120)).await
}

/// uv publish with `credentials` (`--token T`, or `--username U --password P`).
async fn uv_publish(home: &Path, url: &str, credentials: &[&str], files: &[&Path]) -> Output {
    let mut cmd = tokio::process::Command::new(venv().join("bin/uv"));
    cmd.args(["publish", "--no-progress", "--trusted-publishing", "never", "--publish-url", url])
        .args(credentials)
        .args(files)
        .env("HOME", home)
        .env("UV_NO_CONFIG", "1")
        .env("UV_CACHE_DIR", home.join("uv-cache"))
        .env_remove("UV_PUBLISH_TOKEN")
        .env_remove("UV_PUBLISH_USERNAME")
        .env_remove("UV_PUBLISH_PASSWORD")
        .env_remove("UV_PUBLISH_URL");
    run(cmd, Duration::from_secs(120)).await
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A failed run whose output (the client's own error display) says each of `expected`.
fn assert_refused(out: &Output, what: &str, expected: &[&str]) {
    let shown = text(out);
    assert!(!out.status.success(), "{what} succeeded:\n{shown}");
    // twine's rich output wraps long lines; compare with line breaks and indents folded.
    let folded = shown.split_whitespace().collect::<Vec<_>>().join(" ");
    for e in expected {
        assert!(folded.contains(e), "{what}: {e:?} missing from\n{shown}");
    }
}

/// An sdist as setuptools would make it: `demo_tool-1.0/` with PKG-INFO, pyproject.toml and
/// the module, written by GNU tar.
fn sdist(dir: &Path) -> PathBuf {
    let top = dir.join("sdist-src/demo_tool-1.0");
    let files = [
        ("PKG-INFO", "Metadata-Version: 2.1\nName: demo-tool\nVersion: 1.0\nSummary: an sdist uploaded by twine\n"),
        (
            "pyproject.toml",
            "[build-system]\nrequires = [\"setuptools>=61\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
             [project]\nname = \"demo-tool\"\nversion = \"1.0\"\n\n[tool.setuptools]\npackages = [\"demo_tool\"]\n",
        ),
        ("demo_tool/__init__.py", "TOOL = 'demo'\n"),
    ];
    for (path, text) in files {
        let path = top.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let out = std::process::Command::new("tar")
        .arg("-czf")
        .arg(dir.join("demo_tool-1.0.tar.gz"))
        .arg("-C")
        .arg(dir.join("sdist-src"))
        .arg("demo_tool-1.0")
        .output()
        .expect("tar runs");
    assert!(out.status.success(), "tar: {}", String::from_utf8_lossy(&out.stderr));
    dir.join("demo_tool-1.0.tar.gz")
}

/// pip installs from the served index, building the sdist offline with the setuptools wheel
/// `scripts/test` keeps in the test virtualenv's wheelhouse.
async fn pip_install_from(index: &str, target: &Path, requirements: &[&str]) -> Output {
    let mut cmd = tokio::process::Command::new(venv().join("bin/pip"));
    cmd.args(["install", "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--index-url", index])
        .arg("--find-links")
        .arg(venv_dir().join("wheelhouse"))
        .arg("--target")
        .arg(target)
        .args(requirements)
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env_remove("PIP_FIND_LINKS")
        .env_remove("PIP_INDEX_URL");
    run(cmd, Duration::from_secs(180)).await
}

async fn served_sha256(server: &ServedBinary, key: &str) -> String {
    let response = reqwest::get(format!("{}{key}", server.url)).await.unwrap();
    assert_eq!(response.status(), 200, "GET {key}");
    sha256_hex(&response.bytes().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twine_and_uv_publish_upload_with_a_scoped_token_and_pip_installs() {
    let tmp = tempfile::tempdir().unwrap();
    let dist = tmp.path().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let server = serve(tmp.path()).await;
    let lib = WheelSpec::new("demo-lib", "2.0");
    let app = WheelSpec::new("demo-app", "1.0").requires("demo-lib>=2");
    let (lib_path, app_path, sdist_path) = (lib.write_to(&dist), app.write_to(&dist), sdist(&dist));
    let run_url = format!("{}{RUN}", server.url);

    // twine: a wheel and the sdist, to the root's URL with its slash.
    let out = twine(tmp.path(), &run_url, CI, &[&app_path, &sdist_path]).await;
    assert_success(&out, "twine upload");
    // uv publish: a wheel, to the URL without the slash, with --token.
    let out = uv_publish(tmp.path(), run_url.trim_end_matches('/'), &["--token", CI], &[&lib_path]).await;
    assert_success(&out, "uv publish");

    let target = tmp.path().join("target");
    let out = pip_install_from(&format!("{run_url}simple/"), &target, &["demo-app", "demo-tool"]).await;
    assert_success(&out, "pip install from the index twine and uv filled");
    assert_eq!(installed(&target), ["demo_app-1.0.dist-info", "demo_lib-2.0.dist-info", "demo_tool-1.0.dist-info"]);
    assert!(target.join("demo_tool/__init__.py").exists(), "the sdist was built and installed");

    // Identical bytes again: accepted by both clients, nothing changes.
    let before = served_sha256(&server, &format!("{RUN}{}", lib.filename())).await;
    assert_success(&twine(tmp.path(), &run_url, CI, &[&lib_path, &sdist_path]).await, "twine re-upload");
    let credentials = ["--username", "__token__", "--password", CI];
    assert_success(&uv_publish(tmp.path(), &run_url, &credentials, &[&app_path]).await, "uv re-upload");

    // A token scoped to run 111 may not write run 222: both clients show why.
    let other = format!("{}{OTHER_RUN}", server.url);
    let out = twine(tmp.path(), &other, CI, &[&lib_path]).await;
    assert_refused(&out, "twine outside the scope", &["403 Forbidden", "this token may write only under 111-linux/"]);
    let out = uv_publish(tmp.path(), &other, &["--token", CI], &[&lib_path]).await;
    assert_refused(
        &out,
        "uv publish outside the scope",
        &["403 Forbidden", "this token may write only under 111-linux/"],
    );
    let out = twine(tmp.path(), &other, "not-a-token", &[&lib_path]).await;
    assert_refused(&out, "twine with a wrong token", &["401 Unauthorized", "the upload token is not valid"]);
    // The unscoped token may.
    assert_success(&twine(tmp.path(), &other, ADMIN, &[&lib_path]).await, "twine with the admin token");

    // Other bytes under an existing name: refused by both, the stored file unchanged.
    let changed_dir = tmp.path().join("changed");
    std::fs::create_dir_all(&changed_dir).unwrap();
    let changed = WheelSpec::new("demo-lib", "2.0").requires("numpy").write_to(&changed_dir);
    let out = twine(tmp.path(), &run_url, CI, &[&changed]).await;
    assert_refused(&out, "twine with other bytes", &["400 Bad Request", "already exists with different content"]);
    let out = uv_publish(tmp.path(), &run_url, &["--token", CI], &[&changed]).await;
    assert_refused(&out, "uv publish with other bytes", &["400 Bad Request", "already exists with different content"]);
    assert_eq!(served_sha256(&server, &format!("{RUN}{}", lib.filename())).await, before);

    let listing = reqwest::get(format!("{run_url}simple/demo-lib/index.json")).await.unwrap().text().await.unwrap();
    assert!(listing.contains(&before), "the index lists the first upload's sha256: {listing}");
}

/// One raw upload form; the status line and the body of the answer.
async fn raw_form(server: &ServedBinary, path: &str, fields: &[(&str, &str)], file: (&str, &[u8])) -> (String, String) {
    let boundary = "raw-form-boundary";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"content\"; filename=\"{}\"\r\n\r\n", file.0)
            .as_bytes(),
    );
    body.extend_from_slice(file.1);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let host = server.url.trim_start_matches("http://").trim_end_matches('/');
    let auth = format!("__token__:{CI}");
    let auth = base64_encode(auth.as_bytes());
    let head = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAuthorization: Basic {auth}\r\n\
         Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut response)).await.unwrap().unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (head.lines().next().unwrap_or_default().to_owned(), body.to_owned())
}

fn base64_encode(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            out.push(if i <= chunk.len() { A[((n >> (18 - 6 * i)) & 63) as usize] as char } else { '=' });
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_sha256_digest_is_refused_and_nothing_is_stored() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path()).await;
    let wheel = WheelSpec::new("digest-check", "1.0");
    let bytes = wheel.build();
    let right = sha256_hex(&bytes);
    let wrong = "0".repeat(64);
    let (status, body) = raw_form(&server, RUN, &fields(&wrong), (&wheel.filename(), &bytes)).await;
    let expected = format!("has sha256 {right}, but {wrong} was declared");
    assert!(status.starts_with("HTTP/1.1 400 ") && status.contains(&expected), "{status}");
    assert!(body.contains(&expected), "{body}");
    let key = format!("{RUN}{}", wheel.filename());
    let response = reqwest::get(format!("{}{key}", server.url)).await.unwrap();
    assert_eq!(response.status(), 404, "nothing stored under {key}");

    let (status, body) = raw_form(&server, RUN, &fields(&right), (&wheel.filename(), &bytes)).await;
    assert!(status.starts_with("HTTP/1.1 200 "), "{status} {body}");
    let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!((answer["key"].as_str(), answer["status"].as_str()), (Some(key.as_str()), Some("created")));
    assert_eq!(answer["simple"], format!("/{RUN}simple/"));
    // The right digest for a file that is there: "exists"; a wrong one is still refused.
    let (status, body) = raw_form(&server, RUN, &fields(&right), (&wheel.filename(), &bytes)).await;
    assert!(status.starts_with("HTTP/1.1 200 ") && body.contains("\"exists\""), "{status} {body}");
    let (status, _) = raw_form(&server, RUN, &fields(&wrong), (&wheel.filename(), &bytes)).await;
    assert!(status.starts_with("HTTP/1.1 400 ") && status.contains("was declared"), "{status}");
}

fn fields(digest: &str) -> [(&str, &str); 4] {
    [(":action", "file_upload"), ("protocol_version", "1"), ("filetype", "bdist_wheel"), ("sha256_digest", digest)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_reaches_a_client_still_sending_its_file() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path()).await;
    // 8 MiB of file behind a part the token may not write: the server refuses at the part's
    // header, reads and drops the rest, and the client (still sending) reads the reason.
    let big = vec![7u8; 8 << 20];
    let digest = sha256_hex(&big);
    let (status, body) = raw_form(&server, OTHER_RUN, &fields(&digest), ("big-1.0-py3-none-any.whl", &big)).await;
    assert_eq!(status, "HTTP/1.1 403 this token may write only under 111-linux/");
    assert_eq!(body, "this token may write only under 111-linux/\n");
}
