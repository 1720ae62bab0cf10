//! HTTP behaviour of the server as clients rely on it: negotiation, redirects, status codes,
//! ranges, conditional requests and caching headers.

use quarry_tests::{ROOT, TestServer, WheelSpec};

const JSON: &str = "application/vnd.pypi.simple.v1+json";

async fn server_with_foo() -> TestServer {
    let server = TestServer::start().await;
    server.upload(&WheelSpec::new("Foo.Bar_baz", "1.0")).await;
    server
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn simple_pages_negotiate_and_redirect() {
    let server = server_with_foo().await;
    let project = format!("{}simple/foo-bar-baz/", server.root_url());
    for (accept, content_type) in [
        (
            Some("application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.1, text/html;q=0.01"),
            JSON,
        ),
        (Some("application/vnd.pypi.simple.latest+json"), JSON),
        (Some("application/vnd.pypi.simple.v1+html"), "application/vnd.pypi.simple.v1+html"),
        (Some("text/html"), "text/html; charset=utf-8"),
        (None, "text/html; charset=utf-8"),
    ] {
        let mut request = server.client.get(&project);
        if let Some(a) = accept {
            request = request.header("accept", a);
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), 200, "{accept:?}");
        assert_eq!(header(&r, "content-type"), content_type, "{accept:?}");
        assert_eq!(header(&r, "vary"), "Accept");
        assert_eq!(header(&r, "cache-control"), "no-cache");
        let body = r.text().await.unwrap();
        if content_type == JSON {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["meta"]["api-version"], "1.1");
            assert_eq!(v["name"], "foo-bar-baz");
        } else {
            assert!(body.contains("Foo_Bar_baz-1.0-py3-none-any.whl"));
        }
    }
    let r = server.client.get(&project).header("accept", "image/png").send().await.unwrap();
    assert_eq!(r.status(), 406);

    // Unnormalized and slashless spellings redirect to the normalized, slashed URL.
    for path in ["simple/Foo.Bar_baz/", "simple/foo-bar-baz", "simple/FOO__bar-baz"] {
        let r = server.client.get(format!("{}{path}", server.root_url())).send().await.unwrap();
        assert!(r.status().is_redirection(), "{path}: {}", r.status());
        assert_eq!(header(&r, "location"), format!("/{ROOT}simple/foo-bar-baz/"), "{path}");
    }
    let r = server.client.get(format!("{}simple", server.root_url())).send().await.unwrap();
    assert_eq!(header(&r, "location"), format!("/{ROOT}simple/"));

    // Unknown projects are 404 (uv stops at 401/403), in every representation.
    for accept in [JSON, "text/html"] {
        let r = server
            .client
            .get(format!("{}simple/nope/", server.root_url()))
            .header("accept", accept)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404);
        assert!(r.text().await.unwrap().contains("no project \"nope\""));
    }
    let r = server.client.get(format!("{}simple/", server.root_url())).header("accept", JSON).send().await.unwrap();
    assert_eq!(header(&r, "content-type"), JSON);
    let v: serde_json::Value = r.json_value().await;
    assert_eq!(v["projects"][0]["name"], "foo-bar-baz");
    server.stop().await;
}

trait JsonValue {
    async fn json_value(self) -> serde_json::Value;
}

impl JsonValue for reqwest::Response {
    async fn json_value(self) -> serde_json::Value {
        serde_json::from_str(&self.text().await.unwrap()).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn files_support_head_ranges_and_conditional_get() {
    let server = server_with_foo().await;
    let spec = WheelSpec::new("Foo.Bar_baz", "1.0");
    let bytes = spec.build();
    let url = format!("{}{}", server.root_url(), spec.filename());

    let head = server.client.head(&url).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(header(&head, "content-length"), bytes.len().to_string());
    assert_eq!(header(&head, "accept-ranges"), "bytes");
    assert_eq!(header(&head, "cache-control"), "public, max-age=31536000, immutable");
    let etag = header(&head, "etag");
    assert!(etag.starts_with('"'));

    let r = server.client.get(&url).header("range", "bytes=10-19").send().await.unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(header(&r, "content-range"), format!("bytes 10-19/{}", bytes.len()));
    assert_eq!(r.bytes().await.unwrap().as_ref(), &bytes[10..20]);
    let r = server.client.get(&url).header("range", "bytes=-22").send().await.unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(r.bytes().await.unwrap().as_ref(), &bytes[bytes.len() - 22..]);
    let r = server.client.get(&url).header("range", format!("bytes={}-", bytes.len())).send().await.unwrap();
    assert_eq!(r.status(), 416);
    assert_eq!(header(&r, "content-range"), format!("bytes */{}", bytes.len()));

    let r = server.client.get(&url).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(r.status(), 304);
    let r = server.client.get(&url).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), bytes.as_slice());

    let metadata = server.client.get(format!("{url}.metadata")).send().await.unwrap();
    assert_eq!(metadata.status(), 200);
    assert_eq!(metadata.text().await.unwrap(), spec.metadata());

    // Directory URLs serve their index; a missing file is 404.
    let r = server.client.get(server.root_url()).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8");
    let r = server.client.get(format!("{}missing-1.0-py3-none-any.whl", server.root_url())).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let r = server.client.get(format!("{}healthz", server.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let metrics = server.client.get(format!("{}metrics", server.url)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("quarry_uploads_total{kind=\"wheel\",outcome=\"created\"} 1"), "{metrics}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn reuploads_are_idempotent_and_replacements_refused() {
    let server = server_with_foo().await;
    let spec = WheelSpec::new("Foo.Bar_baz", "1.0");
    let key = format!("{ROOT}{}", spec.filename());
    let (status, body) = server.upload_bytes(&key, spec.build()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"status\":\"exists\""));

    let mut other = spec.clone();
    other.requires_python = Some(">=3.10".into());
    let (status, body) = server.upload_bytes(&key, other.build()).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("already exists with different content"), "{body}");
    let r = server.client.get(format!("{}{key}", server.url)).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), spec.build().as_slice(), "the original bytes must survive");
    server.stop().await;
}

/// One raw request with our own `Host` header; the response head and body as text.
async fn with_host(server: &TestServer, path: &str, host: &str) -> String {
    with_host_at(&server.url, path, host).await
}

/// [`with_host`] against the server at `url`.
async fn with_host_at(url: &str, path: &str, host: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(30), stream.read_to_end(&mut response))
        .await
        .expect("a response in time")
        .unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn responses_are_hardened_for_browsers() {
    let server = server_with_foo().await;
    let run = ROOT.split('/').next().unwrap();
    for path in
        [String::new(), "healthz".into(), format!("{run}/"), format!("{ROOT}simple/foo-bar-baz/"), "nope/".into()]
    {
        let r = server.client.get(format!("{}{path}", server.url)).send().await.unwrap();
        assert_eq!(header(&r, "x-content-type-options"), "nosniff", "/{path}");
        let csp = header(&r, "content-security-policy");
        assert!(csp.contains("frame-ancestors 'none'") && csp.contains("default-src 'none'"), "/{path}: {csp}");
        assert!(!csp.contains("script-src"), "no scripts on /{path}");
    }
    // A document CI put into the store next to the generated pages is a download, sandboxed.
    quarry_tests::plant(&server.store_dir(), &format!("{run}/logs/report.html"), b"<script>alert(1)</script>");
    let r = server.client.get(format!("{}{run}/logs/report.html", server.url)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "content-type"), "application/octet-stream");
    assert_eq!(header(&r, "content-disposition"), "attachment; filename*=UTF-8''report.html");
    assert!(header(&r, "content-security-policy").contains("sandbox"));
    let r = server.client.get(format!("{}{ROOT}index.html", server.url)).send().await.unwrap();
    assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8", "generated pages still render");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_host_header_falls_back_to_the_served_address() {
    let server = server_with_foo().await;
    let run = ROOT.split('/').next().unwrap();
    let served = server.url.trim_end_matches('/');
    let page = with_host(&server, &format!("/{run}/"), "evil.example';curl${IFS}x|sh;'").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(!page.contains("evil.example") && !page.contains("curl"), "{page}");
    assert!(page.contains(&format!("pip install --find-links {served}/{ROOT} foo-bar-baz")), "{page}");
    // A plausible Host that is not allowed is no better: behind a shared cache it would be
    // served to everyone (install lines, `.repo` files).
    let page = with_host(&server, &format!("/{run}/"), "quarry.internal:8080").await;
    assert!(!page.contains("quarry.internal"), "{page}");
    assert!(page.contains(&format!("pip install --find-links {served}/{ROOT} foo-bar-baz")), "{page}");
    let page = with_host(&server, &format!("/-/dnf/{run}.repo"), "evil.example").await;
    assert!(!page.contains("evil.example"), "{page}");
    // Loopback names are allowed: a local user's own `localhost` URL.
    let port = served.rsplit(':').next().unwrap();
    let page = with_host(&server, &format!("/{run}/"), &format!("localhost:{port}")).await;
    assert!(page.contains(&format!("pip install --find-links http://localhost:{port}/{ROOT} foo-bar-baz")), "{page}");
    server.stop().await;

    // `quarry serve --allowed-host`: that name (and only it) comes from the request.
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let wheel = WheelSpec::new("Foo.Bar_baz", "1.0");
    quarry_tests::plant(&store, &format!("{ROOT}{}", wheel.filename()), &wheel.build());
    let mut cmd = tokio::process::Command::new(quarry_tests::quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--allowed-host", "quarry.internal,*.ci.example", "--store"])
        .arg(&store)
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_PUBLIC_URL")
        .env_remove("QUARRY_ALLOWED_HOSTS")
        .stderr(std::process::Stdio::null());
    let binary = quarry_tests::ServedBinary::start(cmd).await;
    let page = with_host_at(&binary.url, &format!("/{run}/"), "quarry.internal:8080").await;
    assert!(
        page.contains(&format!("pip install --find-links http://quarry.internal:8080/{ROOT} foo-bar-baz")),
        "{page}"
    );
    let page = with_host_at(&binary.url, &format!("/{run}/"), "runner-7.ci.example").await;
    assert!(page.contains(&format!("http://runner-7.ci.example/{ROOT}")), "{page}");
    let page = with_host_at(&binary.url, &format!("/{run}/"), "evil.example").await;
    assert!(!page.contains("evil.example"), "{page}");
}

#[tokio::test(flavor = "multi_thread")]
async fn uploads_take_bearer_tokens_in_any_case_and_never_basic() {
    let server = TestServer::start().await;
    let spec = WheelSpec::new("auth-case", "1.0");
    let url = format!("{}{ROOT}{}", server.url, spec.filename());
    let r = server.client.put(&url).basic_auth("__token__", Some(quarry_tests::TOKEN)).body(spec.build()).send().await;
    let r = r.unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("Basic credentials are accepted for reads only"));
    assert_eq!(server.client.get(&url).send().await.unwrap().status(), 404, "nothing was stored");
    let r = server
        .client
        .put(&url)
        .header("authorization", format!("BEARER {}", quarry_tests::TOKEN))
        .body(spec.build())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());
    server.stop().await;
}
