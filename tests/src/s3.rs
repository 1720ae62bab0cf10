//! Real S3-compatible servers for the suites: `s3s-fs` and `moto_server`, started on a free
//! loopback port, waited for with a bounded loop, and killed when stopped or dropped.

use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};

/// Access key and secret the servers are started with.
#[derive(Debug, Clone)]
pub struct Keys {
    pub access_key: String,
    pub secret_key: String,
}

pub struct S3Server {
    pub endpoint: String,
    keys: Keys,
    child: Option<tokio::process::Child>,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("addr").port()
}

/// A tool installed by `scripts/test`: on PATH, in `~/.cargo/bin`, or in the test virtualenv.
fn tool(name: &str) -> PathBuf {
    let mut candidates: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect()).unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join(".cargo/bin").join(name));
    }
    if let Some(venv) = std::env::var_os("QUARRY_TEST_VENV") {
        candidates.push(PathBuf::from(venv).join("bin").join(name));
    }
    candidates.into_iter().find(|p| p.exists()).unwrap_or_else(|| {
        panic!("{name} is not installed: run scripts/test, which installs it (s3s-fs with cargo, moto with pip)")
    })
}

impl S3Server {
    pub async fn start_s3s_fs() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let keys = Keys { access_key: "quarry-test-key".into(), secret_key: "quarry-test-secret".into() };
        let mut cmd = tokio::process::Command::new(tool("s3s-fs"));
        cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", &keys.access_key, "--secret-key", &keys.secret_key])
            .arg(dir.path());
        Self::spawn(cmd, port, keys, dir).await
    }

    pub async fn start_moto() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let keys = Keys { access_key: "testing".into(), secret_key: "testing".into() };
        let mut cmd = tokio::process::Command::new(tool("moto_server"));
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]).current_dir(dir.path());
        Self::spawn(cmd, port, keys, dir).await
    }

    async fn spawn(mut cmd: tokio::process::Command, port: u16, keys: Keys, dir: tempfile::TempDir) -> Self {
        cmd.kill_on_drop(true)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let child = cmd.spawn().unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        let endpoint = format!("http://127.0.0.1:{port}");
        // Bounded wait for the port to accept connections.
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Self { endpoint, keys, child: Some(child), _dir: dir };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{cmd:?} did not listen on {endpoint} within 30 s");
    }

    pub fn clone_credentials(&self) -> Keys {
        self.keys.clone()
    }

    pub async fn stop(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

/// A client for `server` with path-style addressing and its credentials.
pub fn s3_client(server: &S3Server) -> aws_sdk_s3::Client {
    client_with(&server.endpoint, &server.keys)
}

pub fn client_with(endpoint: &str, keys: &Keys) -> aws_sdk_s3::Client {
    let config = aws_sdk_s3::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .request_checksum_calculation(aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired)
        .response_checksum_validation(aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired)
        .credentials_provider(Credentials::new(&keys.access_key, &keys.secret_key, None, None, "quarry-tests"))
        .build();
    aws_sdk_s3::Client::from_conf(config)
}
