//! Real pip and uv installing from Quarry's pages, served by the in-process server.

use quarry_tests::{ROOT, TestServer, WheelSpec, assert_success, installed, pip_install, sha256_hex, uv_pip};

/// The repository most suites share: a project with an awkward name, a newer version that
/// needs a Python nobody has, and a dependency chain.
fn repository() -> Vec<WheelSpec> {
    vec![
        WheelSpec::new("Foo.Bar_baz", "1.0").requires_python(">=3.8"),
        WheelSpec::new("Foo.Bar_baz", "2.0").requires_python(">=3.99"),
        WheelSpec::new("app-top", "1.0").requires("Foo.Bar-baz>=1.0"),
        WheelSpec::new("Other_Pkg", "0.1"),
        WheelSpec::new("Other_Pkg", "0.2"),
        WheelSpec::new("rocm-sdk-core", "7.10.0rc20251124+rocm7.10"),
    ]
}

async fn serve_repository() -> TestServer {
    let server = TestServer::start().await;
    for spec in repository() {
        server.upload(&spec).await;
    }
    server
}

fn requested(server: &TestServer, suffix: &str) -> Vec<String> {
    server.requests().into_iter().filter(|r| r.method == "GET" && r.path.ends_with(suffix)).map(|r| r.path).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn pip_find_links_and_index_url_install_our_wheels() {
    let server = serve_repository().await;
    let tmp = tempfile::tempdir().unwrap();

    // --find-links with the flat page; requires-python >=3.99 makes pip take 1.0.
    let target = tmp.path().join("find-links");
    let find_links = format!("{}index.html", server.root_url());
    let out = pip_install(&["--no-index", "--find-links", &find_links, "Foo.Bar_baz"], &target).await;
    assert_success(&out, "pip --find-links");
    assert_eq!(installed(&target), ["Foo_Bar_baz-1.0.dist-info"]);

    // --index-url with the simple API, asking with another spelling of the name.
    let target = tmp.path().join("index-url");
    let simple = format!("{}simple/", server.root_url());
    server.state.clear_request_log();
    let out = pip_install(&["--index-url", &simple, "FOO-bar.BAZ"], &target).await;
    assert_success(&out, "pip --index-url");
    assert_eq!(installed(&target), ["Foo_Bar_baz-1.0.dist-info"]);
    // pip asks for PEP 691 JSON first; the normalized URL answers it.
    let page = server
        .requests()
        .into_iter()
        .find(|r| r.path == format!("/{ROOT}simple/foo-bar-baz/") && r.status == 200)
        .expect("pip fetched the normalized project page");
    assert_eq!(page.content_type.as_deref(), Some("application/vnd.pypi.simple.v1+json"));
    assert!(
        requested(&server, "Foo_Bar_baz-2.0-py3-none-any.whl").is_empty(),
        "pip downloaded a wheel its Python cannot use"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn uv_find_links_and_index_url_install_our_wheels() {
    let server = serve_repository().await;
    let tmp = tempfile::tempdir().unwrap();
    let simple = format!("{}simple/", server.root_url());
    let find_links = format!("{}index.html", server.root_url());

    let target = tmp.path().join("uv-index");
    server.state.clear_request_log();
    let out = uv_pip("install", &["--index-url", &simple, "app-top"], Some(&target)).await;
    assert_success(&out, "uv pip install --index-url");
    assert_eq!(installed(&target), ["Foo_Bar_baz-1.0.dist-info", "app_top-1.0.dist-info"]);
    let pages: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(&format!("/{ROOT}simple/")) && r.status == 200)
        .collect();
    assert!(!pages.is_empty(), "uv fetched no simple pages");
    for page in &pages {
        assert_eq!(
            page.content_type.as_deref(),
            Some("application/vnd.pypi.simple.v1+json"),
            "uv got non-JSON for {}",
            page.path
        );
    }

    let target = tmp.path().join("uv-flat");
    let out = uv_pip("install", &["--no-index", "--find-links", &find_links, "foo_bar.baz"], Some(&target)).await;
    assert_success(&out, "uv pip install --find-links");
    assert_eq!(installed(&target), ["Foo_Bar_baz-1.0.dist-info"]);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resolution_reads_metadata_sidecars_not_wheels() {
    let server = serve_repository().await;
    let tmp = tempfile::tempdir().unwrap();
    let simple = format!("{}simple/", server.root_url());
    let find_links = format!("{}index.html", server.root_url());

    // pip resolving only (--dry-run): PEP 658 metadata and no wheel at all.
    server.state.clear_request_log();
    let target = tmp.path().join("dry");
    let out = pip_install(&["--dry-run", "--index-url", &simple, "app-top", "Other_Pkg"], &target).await;
    assert_success(&out, "pip --dry-run");
    let metadata = requested(&server, ".whl.metadata");
    for wanted in ["app_top-1.0", "Foo_Bar_baz-1.0", "Other_Pkg-0.2"] {
        assert!(metadata.iter().any(|p| p.contains(wanted)), "pip did not fetch {wanted} metadata: {metadata:?}");
    }
    assert_eq!(requested(&server, ".whl"), Vec::<String>::new(), "pip downloaded wheels to resolve");

    // uv resolving only (pip compile), from the simple API and from the flat page.
    for args in [vec!["--index-url", simple.as_str()], vec!["--no-index", "--find-links", find_links.as_str()]] {
        server.state.clear_request_log();
        let requirements = tmp.path().join("requirements.in");
        std::fs::write(&requirements, "app-top\nOther_Pkg\n").unwrap();
        let mut all = args.clone();
        all.push(requirements.to_str().unwrap());
        let out = uv_pip("compile", &all, None).await;
        assert_success(&out, "uv pip compile");
        let resolved = String::from_utf8_lossy(&out.stdout);
        assert!(resolved.contains("foo-bar-baz==1.0"), "uv resolved: {resolved}");
        assert!(resolved.contains("other-pkg==0.2"), "uv resolved: {resolved}");
        assert!(!requested(&server, ".whl.metadata").is_empty(), "uv fetched no .metadata with {args:?}");
        assert_eq!(requested(&server, ".whl"), Vec::<String>::new(), "uv downloaded wheels to resolve with {args:?}");
    }

    // A real install downloads exactly the chosen wheels, each after its metadata.
    server.state.clear_request_log();
    let target = tmp.path().join("install");
    let out = pip_install(&["--index-url", &simple, "app-top"], &target).await;
    assert_success(&out, "pip install");
    let mut wheels = requested(&server, ".whl");
    wheels.sort();
    assert_eq!(
        wheels,
        [format!("/{ROOT}Foo_Bar_baz-1.0-py3-none-any.whl"), format!("/{ROOT}app_top-1.0-py3-none-any.whl")]
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn require_hashes_uses_our_hashes_and_catches_tampering() {
    let server = serve_repository().await;
    let tmp = tempfile::tempdir().unwrap();
    let (_, page) = server.get_text(&format!("{ROOT}index.html")).await;
    let filename = "Other_Pkg-0.2-py3-none-any.whl";
    let hash = page
        .split(&format!("href=\"{filename}#sha256="))
        .nth(1)
        .and_then(|rest| rest.get(..64))
        .expect("hash for Other_Pkg 0.2 on the find-links page")
        .to_owned();
    assert_eq!(hash, sha256_hex(&WheelSpec::new("Other_Pkg", "0.2").build()));
    let requirements = tmp.path().join("requirements.txt");
    std::fs::write(&requirements, format!("other-pkg==0.2 --hash=sha256:{hash}\n")).unwrap();
    let find_links = format!("{}index.html", server.root_url());
    let req = requirements.to_str().unwrap();

    let out = pip_install(
        &["--require-hashes", "--no-index", "--find-links", &find_links, "-r", req],
        &tmp.path().join("ok"),
    )
    .await;
    assert_success(&out, "pip --require-hashes");
    assert_eq!(installed(&tmp.path().join("ok")), ["Other_Pkg-0.2.dist-info"]);

    // Replace the bytes behind the server's back: pip must refuse them.
    let mut tampered = WheelSpec::new("Other_Pkg", "0.2").build();
    let last = tampered.len() - 30;
    tampered[last] ^= 0xff;
    std::fs::write(server.store_dir().join(ROOT).join(filename), tampered).unwrap();
    let out = pip_install(
        &["--require-hashes", "--no-index", "--find-links", &find_links, "-r", req],
        &tmp.path().join("bad"),
    )
    .await;
    assert!(!out.status.success(), "pip installed a tampered wheel");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("THESE PACKAGES DO NOT MATCH THE HASHES"), "unexpected pip error: {stderr}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn local_versions_and_yanked_files() {
    let server = serve_repository().await;
    let tmp = tempfile::tempdir().unwrap();
    let find_links = format!("{}index.html", server.root_url());
    let simple = format!("{}simple/", server.root_url());

    // A `+` local version: the href carries %2B, and both clients fetch it.
    let (_, page) = server.get_text(&format!("{ROOT}index.html")).await;
    assert!(page.contains("href=\"rocm_sdk_core-7.10.0rc20251124%2Brocm7.10-py3-none-any.whl#sha256="), "{page}");
    let target = tmp.path().join("pip-local");
    let out = pip_install(
        &["--pre", "--no-index", "--find-links", &find_links, "rocm-sdk-core==7.10.0rc20251124+rocm7.10"],
        &target,
    )
    .await;
    assert_success(&out, "pip install of a local version");
    assert_eq!(installed(&target), ["rocm_sdk_core-7.10.0rc20251124+rocm7.10.dist-info"]);
    let target = tmp.path().join("uv-local");
    let out =
        uv_pip("install", &["--prerelease", "allow", "--index-url", &simple, "rocm-sdk-core"], Some(&target)).await;
    assert_success(&out, "uv install of a local version");
    assert_eq!(installed(&target), ["rocm_sdk_core-7.10.0rc20251124+rocm7.10.dist-info"]);

    // Yank Other_Pkg 0.2 with a marker beside it: pip falls back to 0.1, and an exact pin
    // still gets 0.2 (PEP 592).
    let marker = server.store_dir().join(ROOT).join("Other_Pkg-0.2-py3-none-any.whl.yanked");
    std::fs::write(&marker, "broken build").unwrap();
    // A marker written behind the server's back has no event: an upload into the same
    // project (whose refresh reads the project's markers) brings it in.
    server.upload(&WheelSpec::new("Other_Pkg", "0.0.1")).await;
    let (_, json) = server.get_text(&format!("{ROOT}simple/other-pkg/index.json")).await;
    assert!(json.contains("\"yanked\":\"broken build\""), "{json}");
    let target = tmp.path().join("yanked");
    let out = pip_install(&["--index-url", &simple, "other-pkg"], &target).await;
    assert_success(&out, "pip install with a yanked newest version");
    assert_eq!(installed(&target), ["Other_Pkg-0.1.dist-info"]);
    let target = tmp.path().join("pinned");
    let out = pip_install(&["--no-index", "--find-links", &find_links, "other-pkg==0.2"], &target).await;
    assert_success(&out, "pip install of a pinned yanked version");
    assert_eq!(installed(&target), ["Other_Pkg-0.2.dist-info"]);
    server.stop().await;
}
