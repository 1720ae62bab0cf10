//! The upload form: its fields, its bounds, and the answers to refused uploads. (Real twine and
//! uv publish uploads, with pip installing what they uploaded, are in the end-to-end suite
//! `tests/publish_clients.rs`.)

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use quarry_store::{MemoryStore, StoreExt as _};
use tower::ServiceExt as _;

use super::*;
use crate::{AppState, Token, app};

const BOUNDARY: &str = "quarry-test-boundary";
const WHEEL: &str = "demo_pkg-1.0-py3-none-any.whl";

/// A multipart body: `fields`, then the file (if any), then `trailing` fields.
fn form_body(fields: &[(&str, &str)], file: Option<(&str, &[u8])>, trailing: &[(&str, &str)]) -> Vec<u8> {
    let mut body = Vec::new();
    let text = |body: &mut Vec<u8>, name: &str, value: &str| {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    };
    for (name, value) in fields {
        text(&mut body, name, value);
    }
    if let Some((filename, bytes)) = file {
        body.extend_from_slice(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"content\"; filename=\"{filename}\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    for (name, value) in trailing {
        text(&mut body, name, value);
    }
    body.extend_from_slice(format!("--{BOUNDARY}--\r\n").as_bytes());
    body
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
}

fn post(path: &str, authorization: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut request = Request::post(path).header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"));
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    request.body(body.into()).unwrap()
}

fn state(tokens: Vec<Token>) -> AppState {
    AppState::new(Arc::new(MemoryStore::default()), vec![]).with_tokens(tokens)
}

/// Status, reason phrase and body of the answer.
async fn send(state: &AppState, request: Request<Body>) -> (StatusCode, String, String) {
    let response = app(state.clone()).oneshot(request).await.unwrap();
    let status = response.status();
    let reason = response
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned())
        .unwrap_or_default();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    (status, reason, String::from_utf8_lossy(&body).into_owned())
}

fn fields(sha256: &str) -> Vec<(&'static str, String)> {
    vec![
        (":action", "file_upload".into()),
        ("protocol_version", "1".into()),
        ("name", "Demo.Pkg".into()),
        ("version", "1.0.0".into()),
        ("filetype", "bdist_wheel".into()),
        ("pyversion", "py3".into()),
        ("metadata_version", "2.1".into()),
        ("sha256_digest", sha256.into()),
        ("description", "a long text that is skipped".into()),
    ]
}

fn as_refs<'a>(fields: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    fields.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// The keys stored, but the audit log's (which records each refusal).
async fn stored_keys(state: &AppState) -> Vec<String> {
    let objects = state.store().list_all("", false).await.unwrap().objects.into_iter();
    objects.map(|o| o.key.to_string()).filter(|k| !quarry_index::audit_log::is_audit_path(k)).collect()
}

#[test]
fn form_fields_are_read_once_and_checked_against_the_file() {
    let wheel: DistFilename = WHEEL.parse().unwrap();
    let sdist: DistFilename = "demo-pkg-1.0.tar.gz".parse().unwrap();
    let mut form = Form::default();
    for (name, value) in fields(&"ab".repeat(32)) {
        form.set(name, value).unwrap();
    }
    assert!(form.check(&wheel).is_ok(), "name and version compare normalized: Demo.Pkg 1.0.0 is demo_pkg 1.0");
    assert!(!Form::reads("description") && Form::reads("sha256_digest") && Form::reads(":action"));
    let twice = form.set("version", "2.0".into()).unwrap_err();
    insta::assert_snapshot!(twice, @"form field version is given twice");
    insta::assert_snapshot!(form.check(&sdist).unwrap_err(), @r#"filetype "bdist_wheel" does not match the file demo-pkg-1.0.tar.gz (sdist)"#);

    let refused = |change: &dyn Fn(&mut Form)| {
        let mut f = form.clone();
        change(&mut f);
        f.check(&wheel).unwrap_err().to_string()
    };
    insta::assert_snapshot!(refused(&|f| f.action = None), @"the form has no :action field; uploads send :action=file_upload");
    insta::assert_snapshot!(refused(&|f| f.action = Some("submit".into())), @r#":action "submit" is not supported; this server accepts file_upload only"#);
    insta::assert_snapshot!(refused(&|f| f.protocol_version = Some("2".into())), @r#"protocol_version "2" is not supported; this server speaks protocol_version 1"#);
    insta::assert_snapshot!(refused(&|f| f.sha256 = None), @"the form has no sha256_digest (nor md5_digest): send the file's SHA-256");
    insta::assert_snapshot!(refused(&|f| f.sha256 = Some("xyz".into())), @r#"sha256_digest "xyz" is not 64 hex digits"#);
    insta::assert_snapshot!(refused(&|f| f.md5 = Some("0".repeat(31))), @r#"md5_digest "0000000000000000000000000000000" is not 32 hex digits"#);
    insta::assert_snapshot!(refused(&|f| f.name = Some("other".into())), @r#"name "other" does not match the file demo_pkg-1.0-py3-none-any.whl"#);
    insta::assert_snapshot!(refused(&|f| f.name = Some("bad name!".into())), @r#"name "bad name!": project name "bad name!" contains ' '; only ASCII letters, digits, '-', '_' and '.' are allowed"#);
    insta::assert_snapshot!(refused(&|f| f.version = Some("1.1".into())), @r#"version "1.1" does not match the file demo_pkg-1.0-py3-none-any.whl"#);
    insta::assert_snapshot!(refused(&|f| f.version = Some("one".into())), @r#"version "one" is not a PEP 440 version"#);
    // An md5 alone is enough (the file is then checked against it); name, version and filetype
    // are optional.
    let mut minimal = Form::default();
    minimal.set(":action", "file_upload".into()).unwrap();
    minimal.set("md5_digest", "0".repeat(32)).unwrap();
    assert!(minimal.check(&sdist).is_ok());
}

async fn read(body: Vec<u8>) -> Result<(Form, String, usize), AppError> {
    let stream = futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from(body))]);
    let mut multipart = Multipart::new(stream, BOUNDARY);
    let (form, field, parts) = read_form(&mut multipart, &Failure::default()).await?;
    Ok((form, field.file_name().unwrap_or_default().to_owned(), parts))
}

#[tokio::test]
async fn the_form_is_read_up_to_its_file() {
    let (form, filename, parts) = read(form_body(&as_refs(&fields("cd")), Some((WHEEL, b"PK")), &[])).await.unwrap();
    assert_eq!((filename.as_str(), parts), (WHEEL, 10));
    assert_eq!((form.name.as_deref(), form.sha256.as_deref()), (Some("Demo.Pkg"), Some("cd")));

    let missing = read(form_body(&[(":action", "file_upload")], None, &[])).await.unwrap_err();
    insta::assert_snapshot!(missing, @"the form has no content part (the file)");
    let long = "1".repeat(MAX_VALUE + 1);
    let err = read(form_body(&[("version", &long)], Some((WHEEL, b"")), &[])).await.unwrap_err();
    insta::assert_snapshot!(err, @"form field version is longer than 1024 bytes");
    // A skipped field may be long; the count of parts is bounded.
    let description = "d".repeat(100_000);
    assert!(read(form_body(&[("description", &description)], Some((WHEEL, b"")), &[])).await.is_ok());
    let many: Vec<(&str, &str)> = (0..=MAX_PARTS).map(|_| ("classifiers", "x")).collect();
    let err = read(form_body(&many, Some((WHEEL, b"")), &[])).await.unwrap_err();
    insta::assert_snapshot!(err, @"the form has more than 4096 parts");
    let err = read(b"--quarry-test-boundary\r\nno headers end".to_vec()).await.unwrap_err();
    assert!(matches!(err, AppError::BadRequest(ref m) if m.starts_with("malformed multipart")), "{err:?}");
}

#[test]
fn reasons_are_one_printable_line() {
    assert_eq!(reason_phrase("a\r\nb é"), "a??b ?");
    let long = reason_phrase(&"x".repeat(1000));
    assert_eq!(long.len(), MAX_REASON + 3);
    assert!(hyper::ext::ReasonPhrase::try_from(long).is_ok());
}

#[tokio::test]
async fn credentials_are_basic_token_or_bearer() {
    let s = state(vec![Token::unscoped("t0k")]);
    let body = || form_body(&[(":action", "file_upload")], Some((WHEEL, b"x")), &[]);
    let (status, reason, body_text) = send(&s, post("/7-linux/python/", None, body())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    insta::assert_snapshot!(reason, @"uploads need credentials: user __token__ with the upload token as password");
    assert_eq!(body_text, format!("{reason}\n"));
    let response = app(s.clone()).oneshot(post("/7-linux/python/", None, body())).await.unwrap();
    assert_eq!(response.headers()["www-authenticate"], "Basic realm=\"quarry\"");
    let (status, reason, _) = send(&s, post("/7-linux/python/", Some(&basic("__token__", "nope")), body())).await;
    assert_eq!((status, reason.as_str()), (StatusCode::UNAUTHORIZED, "the upload token is not valid"));
    // Valid credentials get as far as the form (which lacks a digest here), whichever way sent.
    for auth in [basic("__token__", "t0k"), basic("anyone", "t0k"), "Bearer t0k".into()] {
        let (status, reason, _) = send(&s, post("/7-linux/python/", Some(&auth), body())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{auth}");
        assert!(reason.starts_with("the form has no sha256_digest"), "{reason}");
    }
    let disabled = state(vec![]);
    let (status, reason, _) = send(&disabled, post("/7-linux/python/", Some(&basic("__token__", "t0k")), body())).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    insta::assert_snapshot!(reason, @"uploads are disabled: start the server with --token-file or QUARRY_TOKEN set");
    // PUT still takes Bearer tokens only.
    let put = Request::put(format!("/7-linux/python/{WHEEL}"))
        .header("authorization", basic("__token__", "t0k"))
        .body(Body::from("x"))
        .unwrap();
    assert_eq!(send(&s, put).await.0, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn uploads_go_to_a_pip_root_within_the_tokens_scope() {
    let s = state(vec![Token::new("ci", vec!["8-linux/".into()]).unwrap()]);
    let auth = basic("__token__", "ci");
    let f = fields(&"ab".repeat(32));
    let body = || form_body(&as_refs(&f), Some((WHEEL, b"PK")), &[]);
    let (status, reason, body_text) = send(&s, post("/7-linux/python/", Some(&auth), body())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body_text}");
    insta::assert_snapshot!(reason, @"this token may write only under 8-linux/");
    for path in ["/8-linux/packages/deb/", "/8-linux/python/simple/", "/8-linux/"] {
        let (status, reason, _) = send(&s, post(path, Some(&auth), body())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
        assert!(reason.contains("is not a pip root"), "{path}: {reason}");
    }
    let plain = Request::post("/8-linux/python/").header("authorization", &auth).body(Body::from("x=1")).unwrap();
    let (status, reason, _) = send(&s, plain).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(reason.starts_with("uploads by POST are multipart/form-data"), "{reason}");
    for filename in ["../evil-1.0-py3-none-any.whl", "notes.txt", "sub/demo_pkg-1.0-py3-none-any.whl", ""] {
        let body = form_body(&as_refs(&f), Some((filename, b"PK")), &[]);
        let (status, reason, _) = send(&s, post("/8-linux/python", Some(&auth), body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{filename:?}: {reason}");
    }
    assert!(stored_keys(&s).await.is_empty());
}

#[tokio::test]
async fn digests_are_checked_and_a_refused_file_is_not_kept() {
    let s = state(vec![Token::unscoped("t")]);
    let auth = basic("__token__", "t");
    let bytes = b"PK\x03\x04 not really a wheel";
    let wrong = "0".repeat(64);
    let body = form_body(&as_refs(&fields(&wrong)), Some((WHEEL, bytes)), &[]);
    let (status, reason, _) = send(&s, post("/7-linux/python/", Some(&auth), body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(reason.contains(&format!("but {wrong} was declared")), "{reason}");

    let md5_only = [(":action", "file_upload"), ("md5_digest", "00000000000000000000000000000000")];
    let (status, reason, _) =
        send(&s, post("/7-linux/python/", Some(&auth), form_body(&md5_only, Some((WHEEL, bytes)), &[]))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(reason.contains("md5_digest 00000000000000000000000000000000 was declared"), "{reason}");

    // A digest after the file is refused, not ignored; so is a second file.
    let right = quarry_store::sha256_hex(bytes);
    let head = [(":action", "file_upload")];
    let late = form_body(&head, Some((WHEEL, bytes)), &[("sha256_digest", &right)]);
    let (status, reason, _) = send(&s, post("/7-linux/python/", Some(&auth), late)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(reason.starts_with("the form has no sha256_digest"), "a digest only after the file is missing: {reason}");
    let late = form_body(
        &[(":action", "file_upload"), ("sha256_digest", &right)],
        Some((WHEEL, bytes)),
        &[("md5_digest", "00000000000000000000000000000000")],
    );
    let (status, reason, _) = send(&s, post("/7-linux/python/", Some(&auth), late)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    insta::assert_snapshot!(reason, @"form field md5_digest comes after the file; send it before the content part");
    assert!(stored_keys(&s).await.is_empty(), "nothing is left behind");
}

#[tokio::test]
async fn the_form_around_the_file_is_bounded() {
    let s = state(vec![Token::unscoped("t")]);
    let auth = basic("__token__", "t");
    // Many skipped fields, each within bounds, sent in 1 MiB chunks: refused past FORM_BYTES.
    let chunk = form_body(&[("description", &"d".repeat(1 << 20))], None, &[]);
    let chunk = chunk[..chunk.len() - format!("--{BOUNDARY}--\r\n").len()].to_vec();
    let count = usize::try_from(FORM_BYTES >> 20).unwrap() + 2;
    let chunks = (0..count).map(move |_| Ok::<_, std::io::Error>(Bytes::from(chunk.clone())));
    let body = Body::from_stream(futures_util::stream::iter(chunks));
    let (status, reason, _) = send(&s, post("/7-linux/python/", Some(&auth), body)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{reason}");
    insta::assert_snapshot!(reason, @"the upload form has more than 33554432 bytes besides the file");
    // Part headers that never end are not buffered without bound either.
    let head = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"x\"\r\nX-Pad: ");
    let pad = Bytes::from(vec![b'a'; 1 << 20]);
    let chunks = std::iter::once(Bytes::from(head)).chain(std::iter::repeat_n(pad, count)).map(Ok::<_, std::io::Error>);
    let body = Body::from_stream(futures_util::stream::iter(chunks));
    let (status, reason, _) = send(&s, post("/7-linux/python/", Some(&auth), body)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{reason}");
    // A declared length over the limit is refused before reading.
    let small = state(vec![Token::unscoped("t")]).with_max_upload(10);
    let request = Request::post("/7-linux/python/")
        .header("authorization", &auth)
        .header("content-type", format!("multipart/form-data; boundary={BOUNDARY}"))
        .header("content-length", (10 + FORM_BYTES + 1).to_string())
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&small, request).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    // The file itself is bounded by the upload limit.
    let f = fields(&"ab".repeat(32));
    let body = form_body(&as_refs(&f), Some((WHEEL, &[7u8; 64])), &[]);
    let (status, reason, _) = send(&small, post("/7-linux/python/", Some(&auth), body)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{reason}");
    assert!(stored_keys(&small).await.is_empty());
}

#[tokio::test]
async fn draining_a_refused_body_stops_at_its_deadline() {
    // A body that drips a byte every 10 ms for ever (fast enough for any minimum rate).
    let drip = futures_util::stream::unfold((), |()| async {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        Some((Ok(Bytes::from_static(b"x")), ()))
    });
    let started = std::time::Instant::now();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        drain_for(Box::pin(drip), std::time::Duration::from_millis(300)),
    )
    .await
    .expect("the drain stopped at its deadline");
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    // Up to DRAIN_BYTES, a fast body is read to its end.
    let body = futures_util::stream::iter((0..4).map(|_| Ok(Bytes::from(vec![0u8; 1 << 20]))));
    tokio::time::timeout(std::time::Duration::from_secs(5), drain(body)).await.expect("drained");
}
