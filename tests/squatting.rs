//! Squatted keys: a token that may write a run could `PUT` a file *under* a name the indexer
//! writes (`…/x.whl.metadata/y.whl`, `…/index.html/…`, `…/simple/…`, `…/.quarry-index.json/…`,
//! `…/dists/…`, `…/repodata/…`) and so make that name a directory: the indexer could no longer
//! publish there. Every such upload is refused with a 4xx and the root keeps indexing. A root
//! wedged behind the server's back does not stop `quarry serve` from starting, and `quarry index`
//! indexes the other roots, names the failing one and exits 1.

use std::process::Stdio;
use std::time::Duration;

use quarry_tests::{ServedBinary, TOKEN, TestServer, WheelSpec, plant, quarry_bin, run};

const RUN: &str = "12345678901-linux/";

#[tokio::test(flavor = "multi_thread")]
async fn uploads_under_reserved_names_are_refused_and_the_root_keeps_indexing() {
    let server = TestServer::start().await;
    let first = WheelSpec::new("first", "1.0");
    server.upload(&first).await;
    let squatter = WheelSpec::new("squat", "1.0");
    let squats = [
        format!("{RUN}python/{}.metadata/{}", first.filename(), squatter.filename()),
        format!("{RUN}python/index.html/{}", squatter.filename()),
        format!("{RUN}python/simple/{}", squatter.filename()),
        format!("{RUN}python/simple/first/{}", squatter.filename()),
        format!("{RUN}python/.quarry-index.json/{}", squatter.filename()),
        format!("{RUN}python/{}/{}", first.filename(), squatter.filename()),
        format!("{RUN}packages/deb/dists/stable/pool/main/a_1.0_amd64.deb"),
        format!("{RUN}packages/deb/pool/main/a_1.0_amd64.deb/b_1.0_amd64.deb"),
        format!("{RUN}packages/rpm/x86_64/repodata/a-1.0-1.x86_64.rpm"),
        format!("{RUN}index.html/python/{}", squatter.filename()),
    ];
    for key in &squats {
        let (status, body) = server.upload_bytes(key, squatter.build()).await;
        assert!((400..500).contains(&status), "{key}: {status} {body}");
        assert!(body.contains("directory in the key") || body.contains("uploaded into"), "{key}: {body}");
    }
    // A file planted behind the server's back, then an upload that would use it as a
    // directory: a collision, refused before anything is stored.
    plant(&server.store_dir(), &format!("{RUN}python/group"), b"a file");
    let (status, body) =
        server.upload_bytes(&format!("{RUN}python/group/{}", squatter.filename()), squatter.build()).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("is an object"), "{body}");

    // Nothing of the squats is stored, and the root goes on indexing.
    let mut stored = Vec::new();
    for entry in walk(&server.store_dir()) {
        if entry.contains("squat") {
            stored.push(entry);
        }
    }
    assert!(stored.is_empty(), "{stored:?}");
    let second = WheelSpec::new("second", "2.0");
    server.upload(&second).await;
    let (status, page) = server.get_text(&format!("{RUN}python/index.html")).await;
    assert_eq!(status, 200);
    assert!(page.contains(&first.filename()) && page.contains(&second.filename()), "{page}");
    let (status, _) = server.get_text(&format!("{RUN}python/{}.metadata", first.filename())).await;
    assert_eq!(status, 200, "the sidecar is where the indexer put it");
    // A path below a file is a plain miss.
    let (status, body) = server.get_text(&format!("{RUN}python/{}/x", first.filename())).await;
    assert_eq!(status, 404, "{body}");
    server.stop().await;
}

/// Every file under `dir`, relative.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wedged_root_is_skipped_by_serve_and_reported_by_index() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let wedged = WheelSpec::new("wedged", "1.0");
    let fine = WheelSpec::new("fine", "1.0");
    // The squat made it into the store before it was refused (an older server, a hand copy):
    // the root's find-links page path is a directory, so its root cannot be published.
    plant(&store, &format!("111-linux/python/{}", wedged.filename()), &wedged.build());
    plant(&store, "111-linux/python/index.html/x", b"squat");
    plant(&store, &format!("222-linux/python/{}", fine.filename()), &fine.build());

    let mut index = tokio::process::Command::new(quarry_bin());
    index.arg("index").arg(&store);
    let out = run(index, Duration::from_secs(120)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("111-linux/python/") && stderr.contains("1 of"), "{stderr}");
    let page = std::fs::read_to_string(store.join("222-linux/python/index.html")).expect("the other root is indexed");
    assert!(page.contains(&fine.filename()), "{page}");

    // The server starts anyway (its catch-up skips the wedged root) and serves the others.
    // A wheel copied in while no server ran: the catch-up, after the wedged root, indexes it.
    let late = WheelSpec::new("late", "1.0");
    plant(&store, &format!("222-linux/python/{}", late.filename()), &late.build());
    let token_file = tmp.path().join("tokens");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(&store)
        .arg("--token-file")
        .arg(&token_file)
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_TOKEN")
        .stderr(Stdio::null());
    let server = ServedBinary::start(cmd).await;
    let client = reqwest::Client::new();
    let response = client.get(format!("{}222-linux/python/index.html", server.url)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let page = response.text().await.unwrap();
    assert!(page.contains(&fine.filename()) && page.contains(&late.filename()), "caught up on start: {page}");
    let more = WheelSpec::new("more", "1.0");
    let response = client
        .put(format!("{}222-linux/python/{}", server.url, more.filename()))
        .bearer_auth(TOKEN)
        .body(more.build())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
}

/// A directory planted where a wheel's PEP 658 sidecar goes (`x.whl.metadata/…`, behind the
/// server's back: uploads of such keys are refused) does not break its root: `quarry index`
/// lists the wheel without `data-core-metadata`, reports the squat and exits 0; a later upload
/// into the root answers 201 and is indexed with its own sidecar.
#[tokio::test(flavor = "multi_thread")]
async fn a_squatted_sidecar_is_skipped_and_reported_not_fatal() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let squatted = WheelSpec::new("squatted", "1.0");
    plant(&store, &format!("333-linux/python/{}", squatted.filename()), &squatted.build());
    plant(&store, &format!("333-linux/python/{}.metadata/x", squatted.filename()), b"squat");

    let mut index = tokio::process::Command::new(quarry_bin());
    index.arg("index").arg(&store).env_remove("QUARRY_CONFIG");
    let out = run(index, Duration::from_secs(120)).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains(&format!("rejected {}.metadata/: a directory squats", squatted.filename())),
        "the squat is reported: {stdout}"
    );
    let page = std::fs::read_to_string(store.join("333-linux/python/index.html")).expect("the root is indexed");
    assert!(page.contains(&squatted.filename()), "{page}");
    assert!(!page.contains("data-core-metadata"), "no sidecar is advertised for the squatted wheel: {page}");
    assert_eq!(
        std::fs::read(store.join(format!("333-linux/python/{}.metadata/x", squatted.filename()))).unwrap(),
        b"squat"
    );

    let server = TestServer::start_in(tmp).await;
    let later = WheelSpec::new("later", "1.0");
    let (status, body) = server.upload_bytes(&format!("333-linux/python/{}", later.filename()), later.build()).await;
    assert_eq!(status, 201, "{body}");
    let (status, page) = server.get_text("333-linux/python/index.html").await;
    assert_eq!(status, 200);
    assert!(page.contains(&later.filename()) && page.contains(&squatted.filename()), "{page}");
    let (status, _) = server.get_text(&format!("333-linux/python/{}.metadata", later.filename())).await;
    assert_eq!(status, 200, "the later wheel has its sidecar");
    server.stop().await;
}
