//! Uploads cut by a TCP reset. Once a body is complete, the server finishes the upload's work
//! (commit, validation, delete-on-reject, reindex) whatever the connection does; a body cut
//! short leaves no temporary file; a server killed mid-upload leaves temporary files that the
//! next start sweeps; a stored file that failed validation is never answered "exists".

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use quarry_tests::{ServedBinary, TOKEN, WheelSpec, build_zip, plant, quarry_bin};
use tokio::io::AsyncWriteExt;

const ROOT: &str = "777-linux/python/";

async fn serve(store: &Path, token_file: &Path) -> ServedBinary {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(store)
        .arg("--token-file")
        .arg(token_file)
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_TOKEN")
        .stderr(Stdio::null());
    ServedBinary::start(cmd).await
}

/// An invalid wheel of about `size` bytes: a real zip, but no `.dist-info/METADATA`.
fn invalid_wheel(i: usize, size: usize) -> (String, Vec<u8>) {
    // Letters from a xorshift generator: deflate cannot shrink them much, so the zip is about
    // as large as `size`.
    let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ i as u64;
    let filler: String = (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    let zip = build_zip(&[(format!("cut{i}/data.txt"), filler)], None);
    (format!("cut{i}-1.0-py3-none-any.whl"), zip)
}

/// Sends a PUT of `body` (all of it, or the first `send` bytes) and resets the connection.
async fn put_and_reset(url: &str, key: &str, body: &[u8], send: usize) {
    let host = url.trim_start_matches("http://").trim_end_matches('/');
    let stream = tokio::net::TcpStream::connect(host).await.expect("connect");
    let mut stream = stream;
    let head = format!(
        "PUT /{key} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(&body[..send]).await.expect("write body");
    stream.flush().await.expect("flush");
    // Give the server a moment to read what was sent, then reset (RST, not FIN).
    tokio::time::sleep(Duration::from_millis(20)).await;
    stream.set_zero_linger().expect("SO_LINGER 0");
    drop(stream);
}

fn temp_files(store: &Path) -> Vec<String> {
    std::fs::read_dir(store.join(".quarry/tmp"))
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

fn wheels_stored(store: &Path) -> Vec<String> {
    std::fs::read_dir(store.join(ROOT))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".whl")).collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_uploads_cut_by_a_reset_leave_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let token_file = tmp.path().join("tokens");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let server = serve(&store, &token_file).await;

    // 40 invalid wheels: small ones (buffered in memory) and large ones (streamed to a
    // temporary file), each sent whole or cut half-way, then reset.
    let mut sent = Vec::new();
    for i in 0..40 {
        let size = if i % 2 == 0 { 2_000 } else { 600_000 };
        let (name, bytes) = invalid_wheel(i, size);
        let send = if i % 4 < 2 { bytes.len() } else { bytes.len() / 2 };
        put_and_reset(&server.url, &format!("{ROOT}{name}"), &bytes, send).await;
        sent.push((name, bytes));
    }
    // The server finishes in the background: wait (bounded) until nothing is in flight.
    let mut settled = false;
    for _ in 0..100 {
        if temp_files(&store).is_empty() && wheels_stored(&store).is_empty() {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(settled, "still stored: {:?}, temp files: {:?}", wheels_stored(&store), temp_files(&store));

    // Uploaded again in full, each is refused on its own merits, never "exists".
    let client = reqwest::Client::new();
    for (name, bytes) in &sent {
        let response = client
            .put(format!("{}{ROOT}{name}", server.url))
            .bearer_auth(TOKEN)
            .body(bytes.clone())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = response.text().await.unwrap();
        assert_eq!(status, 400, "{name}: {body}");
        assert!(body.contains("discarded"), "{name}: {body}");
    }
    // A valid upload still works, and the root's pages name only it.
    let good = WheelSpec::new("good", "1.0");
    let response = client
        .put(format!("{}{ROOT}{}", server.url, good.filename()))
        .bearer_auth(TOKEN)
        .body(good.build())
        .send()
        .await;
    assert_eq!(response.unwrap().status(), 201);
    assert_eq!(wheels_stored(&store), [good.filename()]);
    drop(server);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_server_leaves_nothing_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let token_file = tmp.path().join("tokens");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut server = serve(&store, &token_file).await;

    // A large upload that stalls half-way: its temporary file exists while it is in flight.
    let (name, bytes) = invalid_wheel(99, 2_000_000);
    let host = server.url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
    let head = format!(
        "PUT /{ROOT}{name} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        bytes.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&bytes[..bytes.len() / 2]).await.unwrap();
    let mut appeared = false;
    for _ in 0..100 {
        if !temp_files(&store).is_empty() {
            appeared = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(appeared, "the upload in flight has a temporary file");
    server.child.start_kill().unwrap();
    server.child.wait().await.unwrap();
    drop(stream);
    assert!(!temp_files(&store).is_empty(), "kill -9 leaves the temporary file behind");

    // An invalid file stored by an upload that died between its commit and its check.
    let (bad, bad_bytes) = invalid_wheel(98, 1_000);
    plant(&store, &format!("{ROOT}{bad}"), &bad_bytes);

    let server = serve(&store, &token_file).await;
    assert_eq!(temp_files(&store), Vec::<String>::new(), "swept on start");
    let client = reqwest::Client::new();
    let response = client
        .put(format!("{}{ROOT}{bad}", server.url))
        .bearer_auth(TOKEN)
        .body(bad_bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400, "a stored file that failed validation is not \"exists\"");
    assert!(wheels_stored(&store).is_empty(), "{:?}", wheels_stored(&store));
    let page = client.get(format!("{}{ROOT}index.html", server.url)).send().await.unwrap().text().await.unwrap();
    assert!(!page.contains(&bad), "{page}");
}
