//! Hostile and broken uploads get a clear 4xx and change nothing: the pages stay byte-identical
//! and the refused file is not left in the store.

use std::io::Write;

use quarry_tests::{ROOT, TOKEN, TestServer, WheelSpec, build_zip, raw_request, snapshot_pages};

async fn server_with_one_wheel() -> (TestServer, Vec<(String, String)>) {
    let server = TestServer::start().await;
    server.upload(&WheelSpec::new("good", "1.0")).await;
    let pages = snapshot_pages(&server, &["good"]).await;
    (server, pages)
}

async fn assert_unchanged(server: &TestServer, before: &[(String, String)]) {
    assert_eq!(snapshot_pages(server, &["good"]).await, before, "pages changed after a refused upload");
}

fn metadata(name: &str, version: &str) -> String {
    format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
}

/// A wheel whose METADATA inflates to 64 MiB from a few kilobytes.
fn zip_bomb() -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    {
        let mut zip = zip::ZipWriter::new(&mut out);
        let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        zip.start_file("bomb-1.0.dist-info/METADATA", options).unwrap();
        zip.write_all(metadata("bomb", "1.0").as_bytes()).unwrap();
        let zeros = vec![b' '; 1 << 20];
        for _ in 0..64 {
            zip.write_all(&zeros).unwrap();
        }
        zip.finish().unwrap();
    }
    out.into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_uploads_are_refused_and_lose_nothing() {
    let (server, before) = server_with_one_wheel().await;
    let auth = format!("Bearer {TOKEN}");
    let good_wheel = WheelSpec::new("evil", "1.0").build();

    // Paths that try to leave the root, sent raw so no client library normalizes them.
    for path in [
        format!("/{ROOT}../evil-1.0-py3-none-any.whl"),
        format!("/{ROOT}%2e%2e/evil-1.0-py3-none-any.whl"),
        "/%2e%2e/evil-1.0-py3-none-any.whl".to_owned(),
        format!("/{ROOT}%2fetc%2fevil-1.0-py3-none-any.whl"),
        format!("/{ROOT}evil%00-1.0-py3-none-any.whl"),
    ] {
        let (status, body) = raw_request(&server.url, "PUT", &path, &[("Authorization", &auth)], &good_wheel).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains("invalid key"), "{path}: {body}");
    }

    let cases: Vec<(&str, String, Vec<u8>, u16, &str)> = vec![
        (
            "a text file named .whl",
            "text-1.0-py3-none-any.whl".into(),
            b"this is not a zip\n".to_vec(),
            400,
            "not a valid zip archive",
        ),
        (
            "a wheel without METADATA",
            "nometa-1.0-py3-none-any.whl".into(),
            build_zip(&[("nometa/__init__.py".into(), String::new())], None),
            400,
            "no .dist-info/METADATA",
        ),
        (
            "two dist-info directories",
            "twice-1.0-py3-none-any.whl".into(),
            build_zip(
                &[
                    ("twice-1.0.dist-info/METADATA".into(), metadata("twice", "1.0")),
                    ("other-2.0.dist-info/METADATA".into(), metadata("other", "2.0")),
                ],
                None,
            ),
            400,
            "more than one .dist-info directory",
        ),
        ("a zip bomb METADATA", "bomb-1.0-py3-none-any.whl".into(), zip_bomb(), 400, "uncompressed; the limit is"),
        (
            "METADATA naming another project",
            "liar-1.0-py3-none-any.whl".into(),
            build_zip(&[("liar-1.0.dist-info/METADATA".into(), metadata("good", "1.0"))], None),
            400,
            "METADATA says Name is \"good\"",
        ),
        (
            "a member escaping the install directory",
            "slip-1.0-py3-none-any.whl".into(),
            build_zip(
                &[
                    ("slip-1.0.dist-info/METADATA".into(), metadata("slip", "1.0")),
                    ("../../etc/evil".into(), String::new()),
                ],
                None,
            ),
            400,
            "unsafe path",
        ),
        ("a malformed wheel filename", "notawheel.whl".into(), good_wheel.clone(), 400, "dash-separated parts"),
        ("a file that is no distribution", "readme.txt".into(), b"hi".to_vec(), 400, "is not a Python distribution"),
        ("an sdist that is not gzip", "plain-1.0.tar.gz".into(), b"plain text".to_vec(), 400, "is not a gzip archive"),
        ("an empty wheel", "empty-1.0-py3-none-any.whl".into(), Vec::new(), 400, "is empty"),
    ];
    for (what, filename, body, status, message) in cases {
        let key = format!("{ROOT}{filename}");
        let (got, text) = server.upload_bytes(&key, body).await;
        assert_eq!(got, status, "{what}: {text}");
        assert!(text.contains(message), "{what}: expected {message:?} in {text:?}");
        let (after, _) = server.get_text(&key).await;
        assert_eq!(after, 404, "{what}: the refused file was left in the store");
        assert_unchanged(&server, &before).await;
    }

    // Outside a pip root, and without or with a wrong token.
    let (status, text) = server.upload_bytes("somewhere/evil-1.0-py3-none-any.whl", good_wheel.clone()).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("pip root"), "{text}");
    let url = format!("{}{ROOT}evil-1.0-py3-none-any.whl", server.url);
    let r = server.client.put(&url).body(good_wheel.clone()).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer realm=\"quarry\"");
    let r = server.client.put(&url).bearer_auth("wrong").body(good_wheel.clone()).send().await.unwrap();
    assert_eq!(r.status(), 401);
    assert_unchanged(&server, &before).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_declaring_the_wrong_sha256_is_refused() {
    let (server, before) = server_with_one_wheel().await;
    let spec = WheelSpec::new("declared", "1.0");
    let r = server
        .client
        .put(format!("{}{ROOT}{}", server.url, spec.filename()))
        .bearer_auth(TOKEN)
        .header(quarry_index_server::SHA256_HEADER, "00".repeat(32))
        .body(spec.build())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("was declared"));
    assert_unchanged(&server, &before).await;
    server.stop().await;
}

/// A `.deb` under the name `apt-get download` gives it (`%3a` for an epoch's `:`) would be
/// published as `Filename: pool/main/…%3a…`, which debmirror decodes and misses: the upload is
/// refused with a 400 naming the canonical name, nothing is stored, and the same file planted
/// behind the server's back is not indexed (rejected with the reason) while the canonical
/// name is.
#[tokio::test(flavor = "multi_thread")]
async fn a_deb_named_with_percent_is_refused_naming_its_canonical_name() {
    use quarry_builder::{Compression, DebControl, Item, build_deb};
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("f"), "x\n").unwrap();
    let control = DebControl::default()
        .field("Package", "bash-completion")
        .field("Version", "1:2.11-6")
        .field("Architecture", "all")
        .field("Maintainer", "Quarry Tests <tests@example.invalid>")
        .field("Description", "a package with an epoch\n For the test.");
    let items = vec![("usr/share/x".to_owned(), Item::File { source: tmp.path().join("f"), mode: 0o644 })];
    let built = build_deb(&control, items, tmp.path(), Compression::Gzip { level: 6 }, 1_795_000_000).unwrap();
    let bytes = std::fs::read(&built.path).unwrap();

    let server = TestServer::start().await;
    let pool = "7-linux/packages/deb/pool/main/";
    let (status, body) =
        server.upload_bytes(&format!("{pool}bash-completion_1%253a2.11-6_all.deb"), bytes.clone()).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("upload it as bash-completion_2.11-6_all.deb"), "{body}");
    assert!(!server.store_dir().join(pool).exists(), "nothing of the refused upload is stored");

    quarry_tests::plant(&server.store_dir(), &format!("{pool}bash-completion_1%3a2.11-6_all.deb"), &bytes);
    let (status, body) = server.upload_bytes(&format!("{pool}bash-completion_2.11-6_all.deb"), bytes).await;
    assert_eq!(status, 201, "{body}");
    let (status, packages) = server.get_text("7-linux/packages/deb/dists/stable/main/binary-amd64/Packages").await;
    assert_eq!(status, 200);
    assert!(packages.contains("Filename: pool/main/bash-completion_2.11-6_all.deb"), "{packages}");
    assert!(!packages.contains('%'), "the planted name is not published: {packages}");
    server.stop().await;
}
