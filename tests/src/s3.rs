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

pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("addr").port()
}

/// A tool installed by `scripts/test`: on PATH, in `~/.cargo/bin`, or in the test virtualenv.
pub fn tool(name: &str) -> PathBuf {
    let mut candidates: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect()).unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(PathBuf::from(home).join(".cargo/bin").join(name));
    }
    candidates.push(crate::venv_dir().join("bin").join(name));
    candidates.into_iter().find(|p| p.exists()).unwrap_or_else(|| {
        panic!("{name} is not installed: run scripts/test, which installs it (s3s-fs with cargo; moto, cargo-lambda and ziglang with pip)")
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

    /// The environment an AWS client (the `quarry` binary) needs to reach this server.
    pub fn client_env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", self.keys.access_key.as_str()),
            ("AWS_SECRET_ACCESS_KEY", self.keys.secret_key.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    pub async fn stop(mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

/// Creates `bucket`, readable by anyone, as TheRock's artifact buckets are: pip, a CDN's edge
/// and browsers read it without credentials.
pub async fn create_public_bucket(client: &aws_sdk_s3::Client, bucket: &str) {
    client.create_bucket().bucket(bucket).send().await.expect("create bucket");
    let policy = format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::{bucket}/*"}}]}}"#
    );
    client.put_bucket_policy().bucket(bucket).policy(policy).send().await.expect("bucket policy");
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

/// One SQS message as received.
#[derive(Debug, Clone)]
pub struct SqsMessage {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
}

/// An SQS queue on a `moto_server`, spoken to in SQS's JSON protocol (moto routes by the
/// credential scope and does not check signatures).
pub struct SqsQueue {
    http: reqwest::Client,
    endpoint: String,
    pub url: String,
    pub arn: String,
}

/// Store `value` as secret `name` in moto's Secrets Manager; returns the secret's ARN.
pub async fn create_secret(server: &S3Server, name: &str, value: &str) -> String {
    let response = reqwest::Client::new()
        .post(format!("{}/", server.endpoint))
        .header("X-Amz-Target", "secretsmanager.CreateSecret")
        .header("Content-Type", "application/x-amz-json-1.1")
        .header(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/secretsmanager/aws4_request, SignedHeaders=host, Signature=0",
        )
        .body(serde_json::json!({"Name": name, "SecretString": value}).to_string())
        .send()
        .await
        .expect("CreateSecret");
    let status = response.status();
    let text = response.text().await.expect("CreateSecret answer");
    assert!(status.is_success(), "CreateSecret: {status} {text}");
    let answer: serde_json::Value = serde_json::from_str(&text).expect("CreateSecret JSON");
    answer["ARN"].as_str().expect("ARN").to_owned()
}

impl SqsQueue {
    async fn call(http: &reqwest::Client, endpoint: &str, action: &str, body: serde_json::Value) -> serde_json::Value {
        let response = http
            .post(format!("{endpoint}/"))
            .header("X-Amz-Target", format!("AmazonSQS.{action}"))
            .header("Content-Type", "application/x-amz-json-1.0")
            .header(
                "Authorization",
                "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=0",
            )
            .body(body.to_string())
            .send()
            .await
            .unwrap_or_else(|e| panic!("SQS {action}: {e}"));
        let status = response.status();
        let text = response.text().await.expect("SQS answer");
        assert!(status.is_success(), "SQS {action}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
    }

    /// Create queue `name` on `server` (moto).
    pub async fn create(server: &S3Server, name: &str) -> Self {
        let http = reqwest::Client::new();
        let endpoint = server.endpoint.clone();
        let created = Self::call(&http, &endpoint, "CreateQueue", serde_json::json!({"QueueName": name})).await;
        let url = created["QueueUrl"].as_str().expect("QueueUrl").to_owned();
        let attrs = Self::call(
            &http,
            &endpoint,
            "GetQueueAttributes",
            serde_json::json!({"QueueUrl": url, "AttributeNames": ["QueueArn"]}),
        )
        .await;
        let arn = attrs["Attributes"]["QueueArn"].as_str().expect("QueueArn").to_owned();
        Self { http, endpoint, url, arn }
    }

    /// Up to ten messages, waiting at most `wait_seconds` for the first.
    pub async fn receive(&self, wait_seconds: u32) -> Vec<SqsMessage> {
        let answer = Self::call(
            &self.http,
            &self.endpoint,
            "ReceiveMessage",
            serde_json::json!({"QueueUrl": self.url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": wait_seconds}),
        )
        .await;
        answer["Messages"]
            .as_array()
            .map(|messages| {
                messages
                    .iter()
                    .map(|m| SqsMessage {
                        message_id: m["MessageId"].as_str().unwrap_or_default().to_owned(),
                        receipt_handle: m["ReceiptHandle"].as_str().unwrap_or_default().to_owned(),
                        body: m["Body"].as_str().unwrap_or_default().to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    pub async fn delete(&self, message: &SqsMessage) {
        Self::call(
            &self.http,
            &self.endpoint,
            "DeleteMessage",
            serde_json::json!({"QueueUrl": self.url, "ReceiptHandle": message.receipt_handle}),
        )
        .await;
    }

    /// The Lambda service's view of a batch: the SQS event it invokes the function with.
    pub fn lambda_event(&self, batch: &[SqsMessage]) -> serde_json::Value {
        sqs_event(&self.arn, batch)
    }
}

/// An SQS event as the Lambda service delivers `batch` from the queue `queue_arn`.
pub fn sqs_event(queue_arn: &str, batch: &[SqsMessage]) -> serde_json::Value {
    let records: Vec<serde_json::Value> = batch
        .iter()
        .map(|m| {
            serde_json::json!({
                "messageId": m.message_id,
                "receiptHandle": m.receipt_handle,
                "body": m.body,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1763800000000"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            })
        })
        .collect();
    serde_json::json!({ "Records": records })
}

/// An S3 `ObjectCreated:Put` notification for `key` in `bucket`, the key form-encoded as S3
/// sends it.
pub fn s3_put_event(bucket: &str, key: &str) -> serde_json::Value {
    let encoded: String = key
        .split('/')
        .map(|s| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string())
        .collect::<Vec<_>>()
        .join("%2F");
    serde_json::json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2026-11-22T03:49:28.123Z", "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AWS:AROAEXAMPLE:ci"},
        "requestParameters": {"sourceIPAddress": "127.0.0.1"},
        "responseElements": {"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "example"},
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "quarry-indexer",
               "bucket": {"name": bucket, "ownerIdentity": {"principalId": "A3NL1KOZZKExample"}, "arn": format!("arn:aws:s3:::{bucket}")},
               "object": {"key": encoded, "size": 1024, "eTag": "d41d8cd98f00b204e9800998ecf8427e", "sequencer": "0055AED6DCD90281E5"}}
    }]})
}

/// Point `bucket`'s ObjectCreated / ObjectRemoved notifications at `queue`: one configuration
/// per key suffix (S3 allows one suffix rule per configuration), or every key when `suffixes`
/// is empty.
pub async fn notify_queue(client: &aws_sdk_s3::Client, bucket: &str, queue: &SqsQueue, suffixes: &[&str]) {
    use aws_sdk_s3::types::{
        Event, FilterRule, FilterRuleName, NotificationConfiguration, NotificationConfigurationFilter,
        QueueConfiguration, S3KeyFilter,
    };
    let configuration = |suffix: Option<&str>| {
        let mut q = QueueConfiguration::builder()
            .queue_arn(&queue.arn)
            .events(Event::from("s3:ObjectCreated:*"))
            .events(Event::from("s3:ObjectRemoved:*"));
        if let Some(suffix) = suffix {
            let rule = FilterRule::builder().name(FilterRuleName::Suffix).value(suffix).build();
            q = q.id(format!("quarry{suffix}")).filter(
                NotificationConfigurationFilter::builder()
                    .key(S3KeyFilter::builder().filter_rules(rule).build())
                    .build(),
            );
        }
        q.build().expect("queue configuration")
    };
    let mut config = NotificationConfiguration::builder();
    if suffixes.is_empty() {
        config = config.queue_configurations(configuration(None));
    }
    for suffix in suffixes {
        config = config.queue_configurations(configuration(Some(suffix)));
    }
    client
        .put_bucket_notification_configuration()
        .bucket(bucket)
        .notification_configuration(config.build())
        .send()
        .await
        .expect("put bucket notification configuration");
}

/// Where `scripts/lambda-build` (run by `scripts/test`) leaves the function, or
/// `QUARRY_LAMBDA_BOOTSTRAP`.
pub fn lambda_bootstrap() -> PathBuf {
    let path = std::env::var_os("QUARRY_LAMBDA_BOOTSTRAP")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target/lambda/quarry-lambda-indexer/bootstrap"));
    assert!(path.exists(), "{} is missing: run scripts/lambda-build (scripts/test does)", path.display());
    path
}

/// `cargo lambda watch` serving only the Lambda runtime and invoke APIs on a free loopback
/// port; killed when dropped.
pub struct LambdaEmulator {
    pub port: u16,
    process: tokio::process::Child,
}

impl LambdaEmulator {
    /// Start it and wait (at most 30 s) until it listens.
    pub async fn start() -> Self {
        let port = free_port();
        let process = tokio::process::Command::new(tool("cargo-lambda"))
            .args(["lambda", "watch", "--only-lambda-apis", "-A", "127.0.0.1", "-P", &port.to_string()])
            .current_dir(crate::workspace_root())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start cargo lambda watch");
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Self { port, process };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the emulator did not listen on {port} within 30 s");
    }

    /// The built bootstrap as the function behind this emulator: its environment cleared but
    /// for the runtime API, `server`'s endpoint and credentials, a region and no instance
    /// metadata. The caller adds its own variables and stdio, and spawns it.
    pub fn function(&self, bootstrap: &std::path::Path, server: &S3Server) -> tokio::process::Command {
        let keys = server.clone_credentials();
        let mut function = tokio::process::Command::new(bootstrap);
        function
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", format!("http://127.0.0.1:{}/.rt", self.port))
            .env("AWS_LAMBDA_FUNCTION_NAME", "_")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_ENDPOINT_URL", &server.endpoint)
            .env("AWS_ACCESS_KEY_ID", &keys.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &keys.secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true);
        function
    }

    /// Invoke the function with `event`: the HTTP status and the answer (as JSON, or the text
    /// as a JSON string).
    pub async fn invoke(&self, event: &serde_json::Value) -> (reqwest::StatusCode, serde_json::Value) {
        let response = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/2015-03-31/functions/_/invocations", self.port))
            .timeout(Duration::from_secs(60))
            .header("content-type", "application/json")
            .body(event.to_string())
            .send()
            .await
            .expect("invoke");
        let status = response.status();
        let text = response.text().await.expect("answer");
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        (status, body)
    }

    pub async fn stop(mut self) {
        self.process.kill().await.ok();
    }
}
