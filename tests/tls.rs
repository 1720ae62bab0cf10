//! `quarry serve --tls-cert PEM --tls-key PEM` with real clients: a test CA (rcgen) signs a
//! certificate for 127.0.0.1 and localhost; `quarry upload` and `quarry mirror` trust it from
//! `SSL_CERT_FILE`, pip and uv (both through `SSL_CERT_FILE`) install over HTTPS. Plain HTTP to the
//! TLS port gets a readable refusal, a client that never sends its ClientHello is cut by the
//! handshake timeout, and replacing the certificate on disk (or SIGHUP) reaches the next
//! connection.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use quarry_tests::{ServedBinary, WheelSpec, assert_success, installed, quarry_bin, run, venv};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SerialNumber};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const TOKEN: &str = "tls-test-token-0123456789abcdef0123456789";

/// A test certificate authority (also `tests/oidc.rs`'s).
pub(crate) struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub(crate) pem: String,
}

/// A server certificate and its key, as PEM, and the certificate's DER.
pub(crate) struct Leaf {
    pub(crate) cert: String,
    pub(crate) key: String,
    der: Vec<u8>,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("CA key");
        let pem = params.self_signed(&key).expect("CA certificate").pem();
        Self { issuer: Issuer::new(params, key), pem }
    }

    /// A certificate for 127.0.0.1 and localhost, with a new key or `key`.
    pub(crate) fn issue(&self, serial: u8, key: Option<&str>) -> Leaf {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).expect("server params");
        params.distinguished_name.push(DnType::CommonName, format!("quarry test {serial}"));
        params.serial_number = Some(SerialNumber::from(vec![1, serial]));
        let key = match key {
            Some(pem) => KeyPair::from_pem(pem).expect("key PEM"),
            None => KeyPair::generate().expect("server key"),
        };
        let cert = params.signed_by(&key, &self.issuer).expect("server certificate");
        Leaf { cert: cert.pem(), key: key.serialize_pem(), der: cert.der().to_vec() }
    }
}

/// The files of one test: the CA's certificate, the served certificate and key.
struct Files {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

impl Files {
    fn write(dir: &Path, ca: &Ca, leaf: &Leaf) -> Self {
        let files = Self { ca: dir.join("ca.pem"), cert: dir.join("cert.pem"), key: dir.join("key.pem") };
        std::fs::write(&files.ca, &ca.pem).unwrap();
        files.replace(leaf, None);
        files
    }

    /// Put `leaf` in place as an operator would (written aside, renamed over), the files' times
    /// set to `mtime` if given.
    fn replace(&self, leaf: &Leaf, mtime: Option<std::time::SystemTime>) {
        for (path, text) in [(&self.key, &leaf.key), (&self.cert, &leaf.cert)] {
            let aside = path.with_extension("new");
            std::fs::write(&aside, text).unwrap();
            if let Some(t) = mtime {
                std::fs::File::options().write(true).open(&aside).unwrap().set_modified(t).unwrap();
            }
            std::fs::rename(&aside, path).unwrap();
        }
    }
}

/// `quarry serve` over TLS on a free loopback port, with `args` after the store's.
async fn serve(dir: &Path, args: &[&std::ffi::OsStr]) -> ServedBinary {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(dir.join("store"))
        .args(args)
        .env("QUARRY_TOKEN", TOKEN)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::null());
    let served = ServedBinary::start(cmd).await;
    assert!(served.url.starts_with("https://127.0.0.1:"), "TLS is announced as https: {}", served.url);
    served
}

async fn serve_flags(dir: &Path, files: &Files) -> ServedBinary {
    serve(dir, &["--tls-cert".as_ref(), files.cert.as_os_str(), "--tls-key".as_ref(), files.key.as_os_str()]).await
}

/// A client trusting only `ca`, on a new connection each time, reporting the certificate seen.
fn client(ca: &Path) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    reqwest::Client::builder()
        .tls_certs_only([ca])
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// `GET /healthz` over TLS on a new connection: the status and the server's certificate (DER).
async fn healthz(ca: &Path, url: &str) -> (u16, Vec<u8>) {
    let response = client(ca).get(format!("{url}healthz")).send().await.expect("healthz over TLS");
    let seen = response
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .expect("the server's certificate")
        .to_vec();
    (response.status().as_u16(), seen)
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("https://").trim_end_matches('/').to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_mirror_pip_and_uv_over_https() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("quarry test CA");
    let files = Files::write(tmp.path(), &ca, &ca.issue(1, None));
    let served = serve_flags(tmp.path(), &files).await;
    let to = format!("{}4242-linux/python/", served.url);
    let wheel = WheelSpec::new("tls-demo", "1.0").write_to(tmp.path());

    // Without the CA the server's certificate is not trusted: the trust comes from the variable.
    let upload = |ca: Option<&Path>| {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["upload", "--json", "--to", &to]).arg(&wheel).env("QUARRY_TOKEN", TOKEN);
        match ca {
            Some(ca) => cmd.env("SSL_CERT_FILE", ca),
            None => cmd.env_remove("SSL_CERT_FILE"),
        };
        cmd
    };
    let out = run(upload(None), Duration::from_secs(120)).await;
    assert!(!out.status.success(), "an untrusted certificate is refused");
    let out = run(upload(Some(&files.ca)), Duration::from_secs(120)).await;
    assert_success(&out, "quarry upload over https with SSL_CERT_FILE");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(summary["files"].as_array().map(Vec::len), Some(1), "{summary}");
    // The run page's install lines name the server as it is reached: https.
    let page = client(&files.ca).get(format!("{}4242-linux/", served.url)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    let line = format!("pip install --find-links {to} tls-demo");
    assert!(page.contains(&line), "{line} in {page}");
    // A bad SSL_CERT_FILE is named, not ignored.
    let out = run(upload(Some(&tmp.path().join("absent.pem"))), Duration::from_secs(120)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("absent.pem") && stderr.contains("SSL_CERT_FILE"), "{stderr}");

    // pip verifies with the system's trust store (truststore), which follows SSL_CERT_FILE;
    // its --cert is not consulted then.
    let index = format!("{to}simple/");
    let venv = venv();
    let target = tmp.path().join("pip-site");
    let mut pip = tokio::process::Command::new(venv.join("bin/pip"));
    pip.args(["install", "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--target"])
        .arg(&target)
        .args(["--index-url", &index, "tls-demo"])
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env_remove("PIP_FIND_LINKS")
        .env("SSL_CERT_FILE", &files.ca);
    let out = run(pip, Duration::from_secs(180)).await;
    assert_success(&out, "pip install over https with SSL_CERT_FILE");
    assert_eq!(installed(&target), ["tls_demo-1.0.dist-info"]);

    let target = tmp.path().join("uv-site");
    let mut uv = tokio::process::Command::new(venv.join("bin/uv"));
    uv.args(["pip", "install", "--no-cache", "--python"])
        .arg(venv.join("bin/python"))
        .arg("--target")
        .arg(&target)
        .args(["--index-url", &index, "tls-demo"])
        .env("UV_NO_CONFIG", "1")
        .env_remove("UV_INDEX_URL")
        .env_remove("UV_EXTRA_INDEX_URL")
        .env_remove("UV_NATIVE_TLS")
        .env("SSL_CERT_FILE", &files.ca);
    let out = run(uv, Duration::from_secs(180)).await;
    assert_success(&out, "uv pip install over https with SSL_CERT_FILE");
    assert_eq!(installed(&target), ["tls_demo-1.0.dist-info"]);

    // quarry mirror downloads from an https upstream it trusts through SSL_CERT_FILE.
    let mirror_store = tmp.path().join("mirror-store");
    let mut mirror = tokio::process::Command::new(quarry_bin());
    mirror
        .args(["mirror", "--store"])
        .arg(&mirror_store)
        .args(["--to", "python-deps/", "--upstream", &index, "--project", "tls-demo==1.0", "--timeout", "20"])
        .env("SSL_CERT_FILE", &files.ca);
    let out = run(mirror, Duration::from_secs(120)).await;
    assert_success(&out, "quarry mirror from an https upstream");
    let mirrored = mirror_store.join("python-deps").join(WheelSpec::new("tls-demo", "1.0").filename());
    assert!(mirrored.is_file(), "{} mirrored", mirrored.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_http_is_refused_and_a_silent_client_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("quarry test CA");
    let files = Files::write(tmp.path(), &ca, &ca.issue(1, None));
    // The configuration file's keys, and a short head timeout (the handshake's too).
    let config = tmp.path().join("quarry.toml");
    std::fs::write(
        &config,
        format!(
            "tls_cert = {:?}\ntls_key = {:?}\n[limits]\nheader_timeout_seconds = 2\n",
            files.cert.to_str().unwrap(),
            files.key.to_str().unwrap()
        ),
    )
    .unwrap();
    let served = serve(tmp.path(), &["--config".as_ref(), config.as_os_str()]).await;
    let addr = host_port(&served.url);

    // Plain HTTP: a readable 400 naming https, then the connection closes.
    let mut plain = tokio::net::TcpStream::connect(&addr).await.unwrap();
    plain.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), plain.read_to_end(&mut answer))
        .await
        .expect("the refusal and the close in time")
        .expect("read the refusal");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400 ") && answer.contains("https://"), "{answer}");
    let (status, _) = healthz(&files.ca, &served.url).await;
    assert_eq!(status, 200, "/healthz over TLS still answers");

    // A client that opens TCP and never sends its ClientHello is closed after the timeout.
    let started = Instant::now();
    let mut silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(15), silent.read(&mut byte))
        .await
        .expect("a silent client is cut within the handshake timeout, not held");
    assert!(matches!(read, Ok(0) | Err(_)), "closed without a byte: {read:?}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(1500), "held until the timeout ({waited:?})");
    let (status, _) = healthz(&files.ca, &served.url).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replaced_certificate_reaches_the_next_connection() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("quarry test CA");
    let first = ca.issue(1, None);
    let files = Files::write(tmp.path(), &ca, &first);
    let mut served = serve_flags(tmp.path(), &files).await;
    assert_eq!(healthz(&files.ca, &served.url).await, (200, first.der.clone()));

    // A new certificate and key on disk: served from the next connections, within a couple of
    // seconds (the files are looked at once a second at most).
    let second = ca.issue(2, None);
    files.replace(&second, None);
    let changed = Instant::now();
    loop {
        let (status, seen) = healthz(&files.ca, &served.url).await;
        assert_eq!(status, 200);
        if seen == second.der {
            break;
        }
        assert_eq!(seen, first.der);
        assert!(changed.elapsed() < Duration::from_secs(5), "the new certificate is served within 5 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A half-written pair (a key that is not the certificate's) keeps the last good one serving.
    let stray = ca.issue(3, None);
    std::fs::write(&files.key, &stray.key).unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(healthz(&files.ca, &served.url).await, (200, second.der.clone()));
    files.replace(&second, None);
    // Looked at again (the pair loads): the stamps below are the ones the server holds.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(healthz(&files.ca, &served.url).await, (200, second.der.clone()));

    #[cfg(unix)]
    {
        // SIGHUP reads the files again even when nothing about them looks changed: the same
        // length, the same modification time.
        let stamp = std::fs::metadata(&files.cert).unwrap().modified().unwrap();
        let length = std::fs::metadata(&files.cert).unwrap().len();
        let third = (4..200)
            .map(|serial| ca.issue(serial, Some(&second.key)))
            .find(|leaf| leaf.cert.len() as u64 == length)
            .expect("a certificate as long as the last one");
        std::fs::write(files.cert.with_extension("new"), &third.cert).unwrap();
        let aside = files.cert.with_extension("new");
        std::fs::File::options().write(true).open(&aside).unwrap().set_modified(stamp).unwrap();
        std::fs::rename(&aside, &files.cert).unwrap();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert_eq!(healthz(&files.ca, &served.url).await, (200, second.der.clone()), "unchanged stamps: no reload");
        let pid = served.child.id().expect("pid");
        let status = std::process::Command::new("kill").arg("-HUP").arg(pid.to_string()).status().expect("kill");
        assert!(status.success());
        let sent = Instant::now();
        loop {
            let (_, seen) = healthz(&files.ca, &served.url).await;
            if seen == third.der {
                break;
            }
            assert!(sent.elapsed() < Duration::from_secs(5), "SIGHUP reloads the certificate");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(served.child.try_wait().unwrap().is_none(), "SIGHUP does not stop the server");
    }
    // Windows has no SIGHUP: file changes alone reload there (above).
    let _ = served.child.start_kill();
}
