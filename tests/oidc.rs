//! Trusted publishing, PyPI's protocol, end to end over HTTPS: a stand-in for GitHub's OIDC
//! provider on loopback (discovery, JWKS, and the job's ID-token endpoint issuing RS256 tokens
//! with GitHub's claims, signed by keys made here), `quarry serve --tls-cert` with a
//! `[[trusted_publisher]]` rule and a test CA. Real `uv publish --trusted-publishing always`
//! uploads into `{run_id}-linux/python/` and pip installs it; twine uploads with a minted
//! token; `quarry upload` mints by itself; a minted token cannot write another run; tokens of
//! another repository, expired, signed by another key, for another audience or naming an
//! unknown key are refused with the reason, and a rotated key is fetched once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quarry_oidc::issue::Signer;
use quarry_tests::{ServedBinary, WheelSpec, assert_success, installed, quarry_bin, run, venv, venv_dir};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::tls::Ca;

const AUDIENCE: &str = "quarry-oidc-test";
const REQUEST_TOKEN: &str = "actions-id-token-request-secret";
const RUN_ID: &str = "12345";

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// What the stand-in issuer holds: its keys (the last one signs), the claims its token endpoint
/// issues, and how often each path was asked.
struct IssuerState {
    signers: Vec<Arc<Signer>>,
    claims: Value,
    asked: HashMap<String, usize>,
}

/// A stand-in for `https://token.actions.githubusercontent.com` plus a job's token endpoint.
struct Issuer {
    url: String,
    state: Arc<Mutex<IssuerState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// GitHub's claims for a push to main of ROCm/TheRock running release.yml.
fn github_claims(issuer: &str, run_id: &str) -> Value {
    let workflow = "ROCm/TheRock/.github/workflows/release.yml@refs/heads/main";
    json!({
        "iss": issuer,
        "sub": "repo:ROCm/TheRock:environment:release",
        "repository": "ROCm/TheRock",
        "repository_id": "600000001",
        "repository_owner": "ROCm",
        "repository_owner_id": "100000001",
        "repository_visibility": "public",
        "workflow": "Release",
        "workflow_ref": workflow,
        "job_workflow_ref": workflow,
        "ref": "refs/heads/main",
        "ref_type": "branch",
        "sha": "0123456789abcdef0123456789abcdef01234567",
        "environment": "release",
        "run_id": run_id,
        "run_number": "7",
        "run_attempt": "1",
        "actor": "octocat",
        "actor_id": "583231",
        "event_name": "push",
        "runner_environment": "github-hosted",
    })
}

impl Issuer {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let signer = Arc::new(Signer::generate("key-1").expect("an RSA key"));
        let state = Arc::new(Mutex::new(IssuerState {
            signers: vec![signer],
            claims: github_claims(&url, RUN_ID),
            asked: HashMap::new(),
        }));
        let (shared, issuer) = (state.clone(), url.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut conn, _)) = listener.accept().await else { continue };
                let (shared, issuer) = (shared.clone(), issuer.clone());
                tokio::spawn(async move {
                    let head = read_head(&mut conn).await;
                    let (status, body) = answer(&shared, &issuer, &head);
                    let response = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
        });
        Self { url, state, task }
    }

    /// The job's ID-token endpoint, as GitHub hands it (a query already on it).
    fn request_url(&self) -> String {
        format!("{}/token?api-version=2.0", self.url)
    }

    fn asked(&self, path: &str) -> usize {
        self.state.lock().unwrap().asked.get(path).copied().unwrap_or(0)
    }

    fn signer(&self) -> Arc<Signer> {
        self.state.lock().unwrap().signers.last().cloned().unwrap()
    }

    fn set_claims(&self, claims: Value) {
        self.state.lock().unwrap().claims = claims;
    }

    /// A new key, published beside the old and signing from now on.
    fn rotate(&self, kid: &str) -> Arc<Signer> {
        let signer = Arc::new(Signer::generate(kid).unwrap());
        self.state.lock().unwrap().signers.push(signer.clone());
        signer
    }

    /// A token for `audience` with the current claims changed by `change`, signed by `signer`.
    fn token(&self, signer: &Signer, audience: &str, change: impl FnOnce(&mut Value)) -> String {
        let mut claims = self.state.lock().unwrap().claims.clone();
        let t = now();
        claims["aud"] = json!(audience);
        claims["iat"] = json!(t);
        claims["nbf"] = json!(t);
        claims["exp"] = json!(t + 300);
        change(&mut claims);
        signer.sign(&claims).unwrap()
    }
}

/// The request head (bounded).
async fn read_head(conn: &mut tokio::net::TcpStream) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while seen.len() < 64 * 1024 && !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => seen.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

fn answer(state: &Mutex<IssuerState>, issuer: &str, head: &str) -> (&'static str, String) {
    let target = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let mut state = state.lock().unwrap();
    *state.asked.entry(path.to_owned()).or_default() += 1;
    match path {
        "/.well-known/openid-configuration" => {
            ("200 OK", json!({"issuer": issuer, "jwks_uri": format!("{issuer}/.well-known/jwks")}).to_string())
        }
        "/.well-known/jwks" => {
            ("200 OK", json!({"keys": state.signers.iter().map(|s| s.jwk()).collect::<Vec<_>>()}).to_string())
        }
        "/token" => {
            let authorized = head.lines().any(|l| {
                l.split_once(':').is_some_and(|(name, value)| {
                    name.eq_ignore_ascii_case("authorization")
                        && value.trim().eq_ignore_ascii_case(&format!("bearer {REQUEST_TOKEN}"))
                })
            });
            let audience = query.split('&').find_map(|p| p.strip_prefix("audience="));
            match (authorized, audience) {
                (false, _) => ("401 Unauthorized", json!({"message": "bad request token"}).to_string()),
                (true, None) => ("400 Bad Request", json!({"message": "no audience"}).to_string()),
                (true, Some(audience)) => {
                    let mut claims = state.claims.clone();
                    let t = now();
                    claims["aud"] = json!(audience);
                    claims["iat"] = json!(t);
                    claims["nbf"] = json!(t);
                    claims["exp"] = json!(t + 300);
                    let signer = state.signers.last().unwrap();
                    ("200 OK", json!({"value": signer.sign(&claims).unwrap()}).to_string())
                }
            }
        }
        _ => ("404 Not Found", json!({"message": "not found"}).to_string()),
    }
}

/// A stand-in issuer, a test CA and `quarry serve` over TLS trusting the issuer for
/// ROCm/TheRock's release.yml on main, environment release, writing under `{run_id}-`.
struct Setup {
    tmp: tempfile::TempDir,
    issuer: Issuer,
    server: ServedBinary,
    ca: PathBuf,
    http: reqwest::Client,
}

impl Setup {
    async fn start() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let issuer = Issuer::start().await;
        let ca = Ca::new("quarry oidc test CA");
        let leaf = ca.issue(1, None);
        let (ca_path, cert, key) = (tmp.path().join("ca.pem"), tmp.path().join("cert.pem"), tmp.path().join("key.pem"));
        for (path, text) in [(&ca_path, &ca.pem), (&cert, &leaf.cert), (&key, &leaf.key)] {
            std::fs::write(path, text).unwrap();
        }
        let config = tmp.path().join("quarry.toml");
        let toml = format!(
            "oidc_audience = \"{AUDIENCE}\"\ntls_cert = {cert:?}\ntls_key = {key:?}\n\n\
             [[trusted_publisher]]\nissuer = \"{}\"\nrepository = \"ROCm/TheRock\"\nworkflow = \"release.yml\"\n\
             ref = \"refs/heads/main\"\nenvironment = \"release\"\nprefix = \"{{run_id}}-\"\n",
            issuer.url
        );
        std::fs::write(&config, toml).unwrap();
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["serve", "--addr", "127.0.0.1:0", "--store"])
            .arg(tmp.path().join("store"))
            .arg("--config")
            .arg(&config)
            .env_remove("QUARRY_TOKEN")
            .env("RUST_LOG", "warn")
            .stderr(Stdio::null());
        let server = ServedBinary::start(cmd).await;
        assert!(server.url.starts_with("https://"), "{}", server.url);
        let trusted = reqwest::Certificate::from_pem(ca.pem.as_bytes()).unwrap();
        let http =
            reqwest::Client::builder().tls_certs_only([trusted]).timeout(Duration::from_secs(30)).build().unwrap();
        Self { tmp, issuer, server, ca: ca_path, http }
    }

    fn run_url(&self, run: &str) -> String {
        format!("{}{run}-linux/python/", self.server.url)
    }

    /// `POST /_/oidc/mint-token` with `token`: the status and the JSON answer.
    async fn mint(&self, token: &str) -> (u16, Value) {
        self.mint_raw(&json!({ "token": token }).to_string()).await
    }

    /// `POST /_/oidc/mint-token` with `body` as it is.
    async fn mint_raw(&self, body: &str) -> (u16, Value) {
        let response = self
            .http
            .post(format!("{}_/oidc/mint-token", self.server.url))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .expect("mint-token answers");
        let status = response.status().as_u16();
        (status, serde_json::from_slice(&response.bytes().await.unwrap()).expect("a JSON answer"))
    }

    /// `PUT` a wheel under `run`'s pip root with `token`: the status and the answer's text.
    async fn put(&self, run: &str, token: &str, spec: &WheelSpec) -> (u16, String) {
        let response = self
            .http
            .put(format!("{}{}", self.run_url(run), spec.filename()))
            .bearer_auth(token)
            .body(spec.build())
            .send()
            .await
            .expect("the PUT answers");
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// The store's audit log as `quarry audit --store S --json` reads it: its entries.
    async fn audit(&self) -> Vec<Value> {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["audit", "--json", "--store"]).arg(self.tmp.path().join("store"));
        let out = run(cmd, Duration::from_secs(60)).await;
        assert_success(&out, "quarry audit --store");
        let log: Value = serde_json::from_slice(&out.stdout).expect("quarry audit --json answers JSON");
        log["entries"].as_array().cloned().unwrap_or_default()
    }

    fn stored(&self, key: &str) -> bool {
        self.tmp.path().join("store").join(key).is_file()
    }

    /// The GitHub Actions environment of a job with `id-token: write`, trusting the test CA.
    fn actions_env(&self, cmd: &mut tokio::process::Command) {
        cmd.env("GITHUB_ACTIONS", "true")
            .env("ACTIONS_ID_TOKEN_REQUEST_URL", self.issuer.request_url())
            .env("ACTIONS_ID_TOKEN_REQUEST_TOKEN", REQUEST_TOKEN)
            .env("SSL_CERT_FILE", &self.ca)
            .env_remove("QUARRY_TOKEN");
    }
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread")]
async fn uv_publish_trusted_publishing_then_pip_installs_over_https() {
    let setup = Setup::start().await;
    let dist = setup.tmp.path().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let spec = WheelSpec::new("oidc-demo", "1.0");
    let wheel = spec.write_to(&dist);
    let home = setup.tmp.path().join("home");
    let mut uv = tokio::process::Command::new(venv().join("bin/uv"));
    uv.args(["publish", "--no-progress", "--trusted-publishing", "always", "--publish-url", &setup.run_url(RUN_ID)])
        .arg(&wheel)
        .env("HOME", &home)
        .env("UV_NO_CONFIG", "1")
        .env("UV_CACHE_DIR", home.join("uv-cache"))
        .env_remove("UV_PUBLISH_TOKEN")
        .env_remove("UV_PUBLISH_USERNAME")
        .env_remove("UV_PUBLISH_PASSWORD")
        .env_remove("UV_NATIVE_TLS");
    setup.actions_env(&mut uv);
    let out = run(uv, Duration::from_secs(180)).await;
    assert_success(&out, "uv publish --trusted-publishing always");
    // uv asked the server's audience, then the job's endpoint for that audience, then minted.
    assert_eq!(setup.issuer.asked("/token"), 1, "one ID token was asked");
    assert_eq!(setup.issuer.asked("/.well-known/jwks"), 1, "the server fetched the keys once");
    assert!(setup.stored(&format!("{RUN_ID}-linux/python/{}", spec.filename())), "{}", text(&out));

    let target = setup.tmp.path().join("site");
    let mut pip = tokio::process::Command::new(venv().join("bin/pip"));
    pip.args(["install", "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--target"])
        .arg(&target)
        .args(["--index-url", &format!("{}simple/", setup.run_url(RUN_ID)), "oidc-demo"])
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env_remove("PIP_FIND_LINKS")
        .env("SSL_CERT_FILE", &setup.ca);
    let out = run(pip, Duration::from_secs(180)).await;
    assert_success(&out, "pip install over https");
    assert_eq!(installed(&target), ["oidc_demo-1.0.dist-info"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_minted_token_writes_its_run_only_and_twine_uploads_with_it() {
    let setup = Setup::start().await;
    // The audience is open, the token endpoint issues for it, the mint answers as PyPI does.
    let audience = setup.http.get(format!("{}_/oidc/audience", setup.server.url)).send().await.unwrap();
    let audience: Value = serde_json::from_slice(&audience.bytes().await.unwrap()).unwrap();
    assert_eq!(audience, json!({"audience": AUDIENCE}));
    let signer = setup.issuer.signer();
    let (status, minted) = setup.mint(&setup.issuer.token(&signer, AUDIENCE, |_| {})).await;
    assert_eq!(status, 200, "{minted}");
    assert_eq!(minted["success"], json!(true));
    let token = minted["token"].as_str().expect("a token").to_owned();
    let expires = minted["expires"].as_u64().expect("when it expires");
    assert!((now() + 800..=now() + 900).contains(&expires), "15 minutes: {expires}");

    // Another run: 403 naming the scope; its own run: stored.
    let other = WheelSpec::new("oidc-other", "1.0");
    let (status, body) = setup.put("99999", &token, &other).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains(&format!("this token may write only under {RUN_ID}-")), "{body}");
    assert!(!setup.stored(&format!("99999-linux/python/{}", other.filename())));
    let (status, body) = setup.put("123456", &token, &other).await;
    assert_eq!(status, 403, "run 123456 is not run 12345's: {body}");
    let (status, body) = setup.put(RUN_ID, &token, &other).await;
    assert!(status == 200 || status == 201, "{status} {body}");

    // twine has no OIDC flow of its own: the minted token as __token__'s password.
    let spec = WheelSpec::new("oidc-twine", "1.0");
    let wheel = spec.write_to(setup.tmp.path());
    let twine = venv_dir().join("bin/twine");
    assert!(twine.exists(), "{} is missing: scripts/test installs twine into the test virtualenv", twine.display());
    let upload = |url: String, password: String| {
        let mut cmd = tokio::process::Command::new(&twine);
        cmd.args(["upload", "--non-interactive", "--disable-progress-bar", "--repository-url", &url])
            .args(["-u", "__token__", "-p", &password, "--cert"])
            .arg(&setup.ca)
            .arg(&wheel)
            // requests lets REQUESTS_CA_BUNDLE (or CURL_CA_BUNDLE) override --cert: name the
            // test CA there too.
            .env("REQUESTS_CA_BUNDLE", &setup.ca)
            .env_remove("CURL_CA_BUNDLE")
            .env("HOME", setup.tmp.path())
            .env_remove("TWINE_USERNAME")
            .env_remove("TWINE_PASSWORD")
            .env_remove("TWINE_REPOSITORY_URL");
        cmd
    };
    let out = run(upload(setup.run_url(RUN_ID), token.clone()), Duration::from_secs(120)).await;
    assert_success(&out, "twine upload with a minted token");
    assert!(setup.stored(&format!("{RUN_ID}-linux/python/{}", spec.filename())));
    let out = run(upload(setup.run_url("4242"), token.clone()), Duration::from_secs(120)).await;
    assert!(!out.status.success() && text(&out).contains("403"), "twine outside the run: {}", text(&out));
    let out = run(upload(setup.run_url(RUN_ID), format!("{token}x")), Duration::from_secs(120)).await;
    assert!(!out.status.success() && text(&out).contains("401"), "a token not minted: {}", text(&out));

    // The audit log holds the mint and each write of the minted token under the OIDC identity
    // (repository, workflow, run, actor), not under a token's name.
    let log = setup.audit().await;
    let shown = serde_json::to_string_pretty(&log).unwrap();
    let of = |action: &str, key: &str, outcome: &str| {
        log.iter()
            .filter(|e| e["action"] == action && e["key"] == key && e["outcome"] == outcome)
            .map(|e| e["identity"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    let identity = format!(
        "oidc ROCm/TheRock workflow ROCm/TheRock/.github/workflows/release.yml@refs/heads/main \
         environment release run {RUN_ID} attempt 1 actor octocat"
    );
    assert_eq!(of("mint", &format!("{RUN_ID}-"), "ok"), [identity.as_str()], "one mint, scoped to the run: {shown}");
    for spec in [&other, &spec] {
        let key = format!("{RUN_ID}-linux/python/{}", spec.filename());
        assert_eq!(of("upload", &key, "ok"), [identity.as_str()], "{key}: {shown}");
        let entry = log.iter().find(|e| e["action"] == "upload" && e["key"] == key.as_str()).unwrap();
        assert_eq!(entry["sha256"].as_str().map(str::len), Some(64), "{entry}");
    }
    let denied: Vec<_> = log.iter().filter(|e| e["action"] == "upload" && e["outcome"] == "denied").collect();
    assert!(
        denied.len() >= 3 && denied.iter().all(|e| e["identity"] == identity.as_str()),
        "the writes outside the run are recorded as denied, under the same identity: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_tokens_are_refused_with_the_reason() {
    let setup = Setup::start().await;
    let issuer = &setup.issuer;
    let signer = issuer.signer();
    let stranger = Signer::generate(signer.kid()).unwrap();
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "another repository",
            issuer.token(&signer, AUDIENCE, |c| c["repository"] = json!("someone/TheRock")),
            "invalid-publisher",
            "valid token, but no corresponding publisher: claim repository \"someone/TheRock\" differs from the closest rule's (line 5)",
        ),
        (
            "another workflow",
            issuer.token(&signer, AUDIENCE, |c| {
                c["job_workflow_ref"] = json!("ROCm/TheRock/.github/workflows/ci.yml@refs/heads/main")
            }),
            "invalid-publisher",
            "claim job_workflow_ref \"ROCm/TheRock/.github/workflows/ci.yml@refs/heads/main\" differs",
        ),
        (
            "another environment",
            issuer.token(&signer, AUDIENCE, |c| c["environment"] = json!("staging")),
            "invalid-publisher",
            "claim environment \"staging\" differs",
        ),
        (
            "expired",
            issuer.token(&signer, AUDIENCE, |c| c["exp"] = json!(now() - 120)),
            "invalid-token",
            "malformed or invalid token: the token expired at",
        ),
        (
            "another key",
            issuer.token(&stranger, AUDIENCE, |_| {}),
            "invalid-token",
            "the signature does not verify with key \"key-1\"",
        ),
        (
            "another audience",
            issuer.token(&signer, "pypi", |_| {}),
            "invalid-token",
            "the token is for audience \"pypi\", not \"quarry-oidc-test\"",
        ),
        (
            "an unknown issuer",
            issuer.token(&signer, AUDIENCE, |c| c["iss"] = json!("https://token.actions.githubusercontent.com")),
            "invalid-token",
            "issuer \"https://token.actions.githubusercontent.com\" is not trusted by this server",
        ),
        (
            "an unsafe run id",
            issuer.token(&signer, AUDIENCE, |c| c["run_id"] = json!("../1")),
            "invalid-publisher",
            "claim run_id \"../1\" is not a key word",
        ),
        ("not a JWT", "not-a-jwt".to_owned(), "invalid-token", "not a JWT: 1 dot-separated parts, not 3"),
    ];
    for (what, token, code, reason) in &cases {
        let (status, answer) = setup.mint(token).await;
        assert_eq!(status, 422, "{what}: {answer}");
        assert_eq!(answer["message"], "Token request failed", "{what}");
        assert_eq!(answer["errors"][0]["code"], *code, "{what}: {answer}");
        let description = answer["errors"][0]["description"].as_str().unwrap_or("");
        assert!(description.contains(reason), "{what}: {description}");
    }
    let (status, answer) = setup.mint_raw("{\"tok\": 1}").await;
    assert_eq!((status, answer["errors"][0]["code"].as_str()), (422, Some("invalid-payload")), "{answer}");
    assert_eq!(issuer.asked("/.well-known/jwks"), 1, "the keys were fetched once for all of these");

    // The issuer rotates its key: a token of the new kid makes one refetch and passes; made-up
    // kids right after are refused without another fetch.
    let rotated = issuer.rotate("key-2");
    let (status, answer) = setup.mint(&issuer.token(&rotated, AUDIENCE, |_| {})).await;
    assert_eq!(status, 200, "a rotated key: {answer}");
    assert_eq!(issuer.asked("/.well-known/jwks"), 2);
    let made_up = Signer::generate("key-made-up").unwrap();
    for _ in 0..3 {
        let (status, answer) = setup.mint(&issuer.token(&made_up, AUDIENCE, |_| {})).await;
        assert_eq!(status, 422);
        let description = answer["errors"][0]["description"].as_str().unwrap_or("");
        assert!(description.contains("key \"key-made-up\" is not among the keys"), "{description}");
    }
    assert_eq!(issuer.asked("/.well-known/jwks"), 2, "an unknown kid refetches at most once per interval");

    // The audit log: a verified token matching no rule is a refused mint under the identity it
    // names, with the reason; a token that does not verify names nobody and records nothing.
    let log = setup.audit().await;
    let shown = serde_json::to_string_pretty(&log).unwrap();
    let mints: Vec<_> = log.iter().filter(|e| e["action"] == "mint").collect();
    let refused: Vec<_> = mints.iter().filter(|e| e["outcome"] == "refused").collect();
    let publisher_refusals = cases.iter().filter(|c| c.2 == "invalid-publisher").count();
    assert_eq!(refused.len(), publisher_refusals, "{shown}");
    assert_eq!(mints.len(), publisher_refusals + 1, "and the mint with the rotated key: {shown}");
    let another_repository = refused
        .iter()
        .find(|e| e["identity"].as_str().is_some_and(|i| i.starts_with("oidc someone/TheRock ")))
        .unwrap_or_else(|| panic!("the refusal names the repository: {shown}"));
    let detail = another_repository["detail"].as_str().unwrap_or("");
    assert!(detail.contains("claim repository \"someone/TheRock\" differs"), "{detail}");
    assert!(another_repository["identity"].as_str().unwrap().contains(&format!("run {RUN_ID} ")), "{shown}");
    let ok = mints.iter().find(|e| e["outcome"] == "ok").unwrap();
    assert_eq!(ok["key"], format!("{RUN_ID}-"), "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn quarry_upload_mints_by_itself() {
    let setup = Setup::start().await;
    let spec = WheelSpec::new("oidc-cli", "1.0");
    let wheel = spec.write_to(setup.tmp.path());
    let upload = |run: &str, actions: bool| {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["upload", "--json", "--to", &setup.run_url(run)]).arg(&wheel);
        if actions {
            setup.actions_env(&mut cmd);
        } else {
            cmd.env_remove("ACTIONS_ID_TOKEN_REQUEST_URL")
                .env_remove("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
                .env_remove("QUARRY_TOKEN")
                .env("SSL_CERT_FILE", &setup.ca);
        }
        cmd
    };
    let out = run(upload(RUN_ID, false), Duration::from_secs(120)).await;
    assert!(!out.status.success() && text(&out).contains("no upload token"), "{}", text(&out));
    let out = run(upload(RUN_ID, true), Duration::from_secs(120)).await;
    assert_success(&out, "quarry upload in GitHub Actions without a token");
    assert!(setup.stored(&format!("{RUN_ID}-linux/python/{}", spec.filename())));
    assert_eq!(setup.issuer.asked("/token"), 1);
    // The job of another run mints a token for its own run only.
    setup.issuer.set_claims(github_claims(&setup.issuer.url, "777"));
    let out = run(upload(RUN_ID, true), Duration::from_secs(120)).await;
    let shown = text(&out);
    assert!(!out.status.success() && shown.contains("this token may write only under 777-"), "{shown}");
    // A refusal of the mint is spelled out.
    setup.issuer.set_claims(json!({"iss": setup.issuer.url, "repository": "someone/else"}));
    let out = run(upload(RUN_ID, true), Duration::from_secs(120)).await;
    let shown = text(&out);
    assert!(
        !out.status.success()
            && shown.contains(
                "invalid-publisher: valid token, but no corresponding publisher: claim repository \"someone/else\""
            ),
        "{shown}"
    );
}
