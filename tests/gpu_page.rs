//! "Which GPU do I have?" in headless Chromium: three known GPUs (by marketing name, PCI id
//! and name again) get their gfx target, TheRock family and the run's install lines; an unknown
//! one gets a clear "not known" with how to find out (`rocminfo`, `offload-arch`). A target
//! the run has a variant wheel for also gets uv's variant-aware install, and a generic wheel counts
//! for every target (a run of a variant and a generic wheel is no "no packages" run). The
//! JSON endpoint answers the same, and the run page links the page. Promoted to a channel, the
//! page answers from the channel's family roots with `--index-url` lines.

use std::time::Duration;

use quarry_tests::{ROOT, TestServer, WheelSpec, assert_success, quarry_bin, run};

const RUN: &str = "12345678901-linux";

/// Chromium's DOM of `url` after it loaded.
async fn chromium_dom(url: &str) -> String {
    let profile = tempfile::tempdir().expect("tempdir");
    let mut cmd = tokio::process::Command::new("chromium");
    cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .env("HOME", profile.path())
        .args(["--dump-dom", url]);
    let out = run(cmd, Duration::from_secs(120)).await;
    assert_success(&out, &format!("chromium --dump-dom {url}"));
    String::from_utf8_lossy(&out.stdout).replace("&#39;", "'").replace("&amp;", "&").replace("&quot;", "\"")
}

/// The text of the element with `id`.
fn by_id(dom: &str, id: &str) -> String {
    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in the DOM:\n{dom}"));
    let start = at + dom[at..].find('>').expect("tag end") + 1;
    dom[start..start + dom[start..].find("</").expect("element end")].to_owned()
}

/// A `.deb` named `package` built with `dpkg-deb`, for the run's apt root.
async fn deb(dir: &std::path::Path, package: &str) -> Vec<u8> {
    let tree = dir.join(package);
    std::fs::create_dir_all(tree.join("DEBIAN")).expect("mkdir");
    let control = format!(
        "Package: {package}\nVersion: 7.1.0-1\nArchitecture: amd64\nMaintainer: Quarry tests <t@example.com>\nDescription: test\n"
    );
    std::fs::write(tree.join("DEBIAN/control"), control).expect("control");
    let out_path = dir.join(format!("{package}.deb"));
    let mut cmd = tokio::process::Command::new("dpkg-deb");
    cmd.args(["--root-owner-group", "--build"]).arg(&tree).arg(&out_path);
    assert_success(&run(cmd, Duration::from_secs(60)).await, "dpkg-deb --build");
    std::fs::read(out_path).expect("deb")
}

async fn get_json(server: &TestServer, url: &str) -> serde_json::Value {
    let response = server.client.get(url).send().await.expect("GET");
    assert_eq!(response.status(), 200, "{url}");
    serde_json::from_str(&response.text().await.expect("body")).expect("JSON")
}

#[tokio::test]
async fn the_gpu_page_shows_family_and_install_lines_in_chromium() {
    let server = TestServer::start().await;
    for spec in [
        WheelSpec::new("rocm", "7.10.0"),
        WheelSpec::new("rocm-sdk-core", "7.10.0"),
        WheelSpec::new("rocm-sdk-device-gfx942", "7.10.0"),
        WheelSpec::new("rocm-sdk-device-gfx1100", "7.10.0"),
    ] {
        server.upload(&spec).await;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let key = format!("{RUN}/packages/deb/pool/main/a/amdrocm7.1-gfx942_7.1.0-1_amd64.deb");
    let (status, body) = server.upload_bytes(&key, deb(dir.path(), "amdrocm7.1-gfx942").await).await;
    assert_eq!(status, 201, "{body}");
    // A gfx942 variant wheel of rocm-sdk-device (as `quarry package python --variants` builds).
    let (filename, body) =
        crate::variants::wheel(Some("gfx942"), Some(crate::variants::variant_json("gfx942", &["gfx942"])));
    assert_eq!(server.upload_bytes(&format!("{ROOT}{filename}"), body).await.0, 201, "{filename}");

    let page = |q: &str| format!("{}-/gpu/{RUN}/?q={}", server.url, q.replace(' ', "+").replace(':', "%3A"));
    let pip = format!("{}{ROOT}", server.url);

    // MI300X by name: gfx942, gfx94X-dcgpu, the exact device wheel and the apt metapackage.
    let dom = chromium_dom(&page("AMD Instinct MI300X")).await;
    let gpu = by_id(&dom, "gpu-gfx942");
    assert!(gpu.contains("gfx942"), "{gpu}");
    assert!(dom.contains("<strong class=\"family\">gfx94X-dcgpu</strong>"), "{dom}");
    assert_eq!(
        by_id(&dom, "install-pip-gfx942"),
        format!("pip install --find-links {pip} 'rocm[libraries,device-gfx942]'")
    );
    assert_eq!(
        by_id(&dom, "install-uv-gfx942"),
        format!("uv pip install --find-links {pip} 'rocm[libraries,device-gfx942]'")
    );
    assert_eq!(by_id(&dom, "install-apt-gfx942"), "sudo apt-get install amdrocm7.1-gfx942");
    assert_eq!(
        by_id(&dom, "install-uv-variants-gfx942"),
        format!("uv pip install --preview-features wheel-variants --index-url {pip}simple/ rocm-sdk-device")
    );

    // A Radeon RX 7900 XTX by its PCI id: gfx1100, gfx110X-dgpu.
    let dom = chromium_dom(&page("1002:744c")).await;
    assert!(dom.contains("<strong class=\"family\">gfx110X-dgpu</strong>"), "{dom}");
    assert_eq!(
        by_id(&dom, "install-pip-gfx1100"),
        format!("pip install --find-links {pip} 'rocm[libraries,device-gfx1100]'")
    );
    assert!(!dom.contains("install-apt-gfx1100"), "this run has no gfx1100 deb");
    assert!(!dom.contains("install-uv-variants-gfx1100"), "nor a gfx1100 variant wheel");

    // A Radeon 780M is gfx1103 (gfx110X-igpu), not gfx1150; this run has nothing for it.
    let dom = chromium_dom(&page("Radeon 780M")).await;
    assert!(dom.contains("id=\"gpu-gfx1103\"") && !dom.contains("gpu-gfx1150"), "{dom}");
    assert!(dom.contains("<strong class=\"family\">gfx110X-igpu</strong>"), "{dom}");
    assert!(dom.contains("This run has no packages for gfx1103."), "{dom}");

    // An unknown GPU: not known, and how to find out.
    let dom = chromium_dom(&page("GeForce RTX 4090")).await;
    let result = by_id(&dom, "result");
    assert!(dom.contains("Not known: <code>GeForce RTX 4090</code>"), "{dom}");
    assert!(dom.contains("rocminfo | grep -m1 -o 'gfx[0-9a-f]*'") && dom.contains("offload-arch"), "{result}");

    // The JSON endpoint answers the same; the run page links the page.
    let json = get_json(&server, &format!("{}-/gpu/{RUN}.json?pci=744c", server.url)).await;
    assert_eq!(json["known"], true);
    assert_eq!(json["matches"][0]["gfx"], "gfx1100");
    assert_eq!(json["matches"][0]["family"], "gfx110X-dgpu");
    let mi300x = get_json(&server, &format!("{}-/gpu/{RUN}.json?gfx=gfx942", server.url)).await;
    assert_eq!(
        mi300x["matches"][0]["install"]["uv_variants"],
        format!("uv pip install --preview-features wheel-variants --index-url {pip}simple/ rocm-sdk-device").as_str()
    );
    let unknown = get_json(&server, &format!("{}-/gpu/{RUN}.json?name=GeForce", server.url)).await;
    assert_eq!((unknown["known"].clone(), unknown["matches"].as_array().map(Vec::len)), (false.into(), Some(0)));
    assert!(unknown["how_to_find_out"].to_string().contains("offload-arch"));
    let (status, run_page) = server.get_text(&format!("{RUN}/")).await;
    assert_eq!(status, 200);
    assert!(run_page.contains(&format!("href=\"/-/gpu/{RUN}/\"")), "the run page links the GPU page");
    assert_eq!(server.get_text("-/gpu/not-a-run/").await.0, 404);

    // The same run promoted to a channel: the page answers from the channel's roots, the pip
    // line is the `--index-url` of the target's family root there.
    let store = server.store_dir().to_str().expect("utf-8 path").to_owned();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["promote", "--from", RUN, "--to", "nightly", "--families", "gfx94X-dcgpu", "--store", &store]);
    assert_success(&run(cmd, Duration::from_secs(120)).await, "quarry promote");
    let channel = |q: &str| format!("{}-/gpu/nightly/?q={}", server.url, q.replace(' ', "+").replace(':', "%3A"));
    let family_index = format!("{}nightly/python/gfx94X-dcgpu/simple/", server.url);
    let dom = chromium_dom(&channel("AMD Instinct MI300X")).await;
    assert!(dom.contains("Install from channel nightly"), "{dom}");
    assert_eq!(
        by_id(&dom, "install-pip-gfx942"),
        format!("pip install --index-url {family_index} 'rocm[libraries,device-gfx942]'")
    );
    assert_eq!(by_id(&dom, "install-apt-gfx942"), "sudo apt-get install amdrocm7.1-gfx942");
    let dom = chromium_dom(&channel("1002:744c")).await;
    assert!(dom.contains("This channel has no packages for gfx1100."), "gfx110X was not promoted:\n{dom}");
    // The promotion published the variant wheel's `-variants.json` with the release, and the
    // channel's project page links it.
    let (status, project) = server.get_text("nightly/python/gfx94X-dcgpu/simple/rocm-sdk-device/").await;
    assert_eq!(status, 200, "{project}");
    assert!(project.contains("rocm_sdk_device-7.10.0-variants.json"), "{project}");
    let (status, variants) = server.get_text("nightly/python/gfx94X-dcgpu/rocm_sdk_device-7.10.0-variants.json").await;
    assert_eq!(status, 200, "{variants}");
    assert!(variants.contains("gfx942"), "{variants}");
    let json = get_json(&server, &format!("{}-/gpu/nightly.json?gfx=gfx942", server.url)).await;
    assert_eq!((json["channel"].as_str(), json.get("run")), (Some("nightly"), None));
    assert_eq!(
        json["matches"][0]["install"]["uv"],
        format!("uv pip install --index-url {family_index} 'rocm[libraries,device-gfx942]'").as_str()
    );
    server.stop().await;
}

/// A run whose only GPU-specific wheel is a gfx942 variant of `rocm-sdk-device`, beside a
/// generic wheel: the page says both count (no "no packages"), gives the variant-aware line for
/// gfx942 and the generic wheel's install line for every target.
#[tokio::test(flavor = "multi_thread")]
async fn generic_and_variant_wheels_count_on_the_gpu_page() {
    let server = TestServer::start().await;
    let run = "22-linux";
    let root = format!("{run}/python/");
    let generic = WheelSpec::new("demo-tool", "1.0");
    let (status, body) = server.upload_bytes(&format!("{root}{}", generic.filename()), generic.build()).await;
    assert_eq!(status, 201, "{body}");
    let (filename, body) =
        crate::variants::wheel(Some("gfx942"), Some(crate::variants::variant_json("gfx942", &["gfx942"])));
    assert_eq!(server.upload_bytes(&format!("{root}{filename}"), body).await.0, 201, "{filename}");
    let pip = format!("{}{root}", server.url);
    let page = |q: &str| format!("{}-/gpu/{run}/?q={q}", server.url);

    let dom = chromium_dom(&page("gfx942")).await;
    assert!(!dom.contains("has no packages"), "{dom}");
    assert_eq!(by_id(&dom, "install-pip-gfx942"), format!("pip install --find-links {pip} demo-tool"));
    assert_eq!(
        by_id(&dom, "install-uv-variants-gfx942"),
        format!("uv pip install --preview-features wheel-variants --index-url {pip}simple/ rocm-sdk-device")
    );
    assert!(by_id(&dom, "generic-gfx942").contains("demo-tool"), "{dom}");

    let dom = chromium_dom(&page("gfx1100")).await;
    assert!(!dom.contains("has no packages"), "a generic wheel installs on every GPU:\n{dom}");
    assert_eq!(by_id(&dom, "install-pip-gfx1100"), format!("pip install --find-links {pip} demo-tool"));
    assert!(!dom.contains("install-uv-variants-gfx1100"), "{dom}");
}
