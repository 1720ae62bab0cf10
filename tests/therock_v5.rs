//! `quarry promote --release-type` into TheRock's v5 layout (the `therock-v5` preset), as
//! clients see it: a kpack run (the `quarry package python` set with its `rocm` sdist, a
//! torch-like wheel requiring `rocm[libraries]`, the native fixtures, a tarball) promoted as
//! `dev` installs with pip and uv through the structured `whl-next/` (each file in its
//! project's directory), with apt-get and dnf through the promotion's dated repos, and the
//! tarball page lists the tarball with its sha256, all through `quarry serve`; a per-family run
//! lands in `whl/`, prerelease publishes into `packages/deb/` itself, ASAN into the `-asan`
//! directories without Python; bad values exit 2; and one promotion between two moto buckets
//! named as TheRock names them.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use quarry_store::{Key, PutOptions, S3Store, StoreExt};
use quarry_tests::native::{Apt, build_fixtures, dnf, files_in, text};
use quarry_tests::s3::{S3Server, create_public_bucket, s3_client};
use quarry_tests::{
    TOKEN, WheelSpec, assert_success, installed, pip_install, plant, quarry_bin, run, uv_pip, venv_dir,
};

const PRESET: &str = "[layout]\npreset = \"therock-v5\"\n";
/// 2026-05-01T00:00:00Z: the promotion's date names the dated repos.
const EPOCH: &str = "1777593600";
const DATE: &str = "20260501";
const V5: &str = "v5/rocm/core/";
const TARBALL: &str = "therock-dist-linux-multiarch-7.1.0.tar.gz";

/// `quarry` with `args`, run in `cwd` (no `quarry.toml` there unless a test writes one) at
/// the fixed promotion date.
async fn quarry_in(cwd: &Path, args: &[&str], env: &[(String, String)]) -> Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args)
        .current_dir(cwd)
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env_remove("QUARRY_CONFIG")
        .env_remove("QUARRY_STORE")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    run(cmd, Duration::from_secs(300)).await
}

/// Plant the fixture debs and rpms into `run`'s native repos.
fn plant_natives(store: &Path, fixtures: &Path, run: &str) {
    for (dir, root) in [("deb", "packages/deb/pool/main"), ("rpm", "packages/rpm/x86_64")] {
        for f in files_in(&fixtures.join(dir)) {
            let name = f.file_name().unwrap().to_str().unwrap();
            plant(store, &format!("{run}/{root}/{name}"), &std::fs::read(&f).unwrap());
        }
    }
}

/// The promotion's JSON report, asserting success.
fn report(out: &Output, what: &str) -> serde_json::Value {
    assert_success(out, what);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn install_lines(report: &serde_json::Value) -> Vec<String> {
    report["install"].as_array().unwrap().iter().map(|l| l.as_str().unwrap().to_owned()).collect()
}

/// Every file under `dir`, as `/`-separated paths relative to it.
fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap().components();
                out.push(relative.map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"));
            }
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kpack_run_promoted_as_dev_installs_with_pip_uv_apt_and_dnf() {
    let tmp = tempfile::tempdir().unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path();
    let s = store.display().to_string();
    let run = "5000-linux";

    // The kpack set from `quarry package python`, a torch-like wheel on top of it.
    let artifacts = tmp.path().join("artifacts");
    crate::wheels::tree(&artifacts).await;
    let dist = tmp.path().join("dist");
    assert_success(&crate::wheels::package(&artifacts, &dist, &[]).await, "quarry package python");
    let mut python: Vec<(String, Vec<u8>)> = crate::wheels::files(&dist);
    let torch = WheelSpec::new("torchlike", "2.9.0").requires("rocm[libraries]==7.1.0").requires_python(">=3.9");
    python.push((torch.filename(), torch.build()));
    for (name, bytes) in &python {
        plant(store, &format!("{run}/python/{name}"), bytes);
    }
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    plant_natives(store, &fixtures, run);
    let tarball = b"a release tarball".repeat(100);
    plant(store, &format!("{run}/tarballs/{TARBALL}"), &tarball);
    assert_success(&quarry_in(tmp.path(), &["index", &s], &[]).await, "quarry index");

    // No quarry.toml: the release promotion lays out the preset's roots.
    let promote = ["promote", "--from", run, "--to", V5, "--release-type", "dev", "--store", &s, "--json"];
    let promoted = report(&quarry_in(tmp.path(), &promote, &[]).await, "quarry promote --release-type dev");
    let repo = format!("{DATE}-5000");
    assert_eq!(promoted["repo"], repo.as_str(), "{promoted:#}");
    let base = format!("{s}/{V5}");
    assert_eq!(
        install_lines(&promoted),
        [
            format!("pip: --index-url {base}whl-next/"),
            format!("apt: deb [trusted=yes] {base}packages/deb/{repo}/ stable main"),
            format!("dnf: baseurl={base}packages/rpm/{repo}/x86_64/"),
            format!("tarballs: {base}tarball/"),
        ],
        "{promoted:#}"
    );

    // Each pip file in its project's directory, its sidecar beside it, the pages in place.
    let whl_next = store.join(V5).join("whl-next");
    let on_disk = walk(&whl_next);
    for (name, _) in &python {
        let project = name.parse::<quarry_packaging::DistFilename>().unwrap().name().to_string();
        assert!(on_disk.contains(&format!("{project}/{name}")), "{name} not in {project}/: {on_disk:#?}");
        if name.ends_with(".whl") {
            assert!(on_disk.contains(&format!("{project}/{name}.metadata")), "{name}'s sidecar: {on_disk:#?}");
        }
        assert!(on_disk.contains(&format!("{project}/index.html")), "{project}'s page");
    }
    assert!(on_disk.iter().all(|p| !p.starts_with("simple/")), "a structured root has no simple/");
    let root_page = std::fs::read_to_string(whl_next.join("index.html")).unwrap();
    for project in ["rocm/", "rocm-sdk-core/", "torchlike/"] {
        assert!(root_page.contains(&format!("<a href=\"{project}\">")), "{root_page}");
    }
    let core_page = std::fs::read_to_string(whl_next.join("rocm-sdk-core/index.html")).unwrap();
    assert!(
        core_page.contains("<a href=\"rocm_sdk_core-7.1.0-py3-none-linux_x86_64.whl#sha256=")
            && core_page.contains("data-core-metadata=\"sha256="),
        "{core_page}"
    );
    let torch_page = std::fs::read_to_string(whl_next.join("torchlike/index.html")).unwrap();
    assert!(torch_page.contains("data-requires-python=\"&#62;=3.9\""), "{torch_page}");
    assert!(!store.join(V5).join("whl").exists(), "a kpack run goes to whl-next/ only");
    for (dir, file) in [
        (format!("packages/deb/{repo}/pool/main"), "quarry-hello_1.0-1_amd64.deb"),
        (format!("packages/deb/{repo}/dists/stable"), "Release"),
        (format!("packages/rpm/{repo}/x86_64/repodata"), "repomd.xml"),
        ("tarball".to_owned(), TARBALL),
    ] {
        assert!(store.join(V5).join(&dir).join(file).is_file(), "{dir}/{file}");
    }
    // The audit reads the roots as the preset lays them out.
    std::fs::write(tmp.path().join("quarry.toml"), PRESET).unwrap();
    let check = quarry_in(tmp.path(), &["index", &s, "--check"], &[]).await;
    assert_success(&check, "quarry index --check over the promoted roots");

    let token = tmp.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let served = crate::promote_clients::serve(store, &tmp.path().join("quarry.toml"), &token).await;
    let url = format!("{}{V5}", served.url);

    // pip and uv resolve torchlike → rocm[libraries] (the sdist, built with setuptools from
    // the local wheelhouse) → the kpack wheels, all through whl-next/.
    let index = format!("{url}whl-next/");
    let wheelhouse = venv_dir().join("wheelhouse").display().to_string();
    let args = ["--index-url", index.as_str(), "--find-links", wheelhouse.as_str(), "torchlike"];
    let wanted = [
        "rocm-7.1.0.dist-info",
        "rocm_sdk_core-7.1.0.dist-info",
        "rocm_sdk_libraries-7.1.0.dist-info",
        "torchlike-2.9.0.dist-info",
    ];
    let target = tmp.path().join("pip");
    assert_success(&pip_install(&args, &target).await, "pip install through whl-next/");
    let got = installed(&target);
    assert!(wanted.iter().all(|w| got.contains(&(*w).to_owned())), "pip installed {got:?}");
    let target = tmp.path().join("uv");
    assert_success(&uv_pip("install", &args, Some(&target)).await, "uv pip install through whl-next/");
    let got = installed(&target);
    assert!(wanted.iter().all(|w| got.contains(&(*w).to_owned())), "uv installed {got:?}");

    // apt-get and dnf through the dated repos.
    let apt = Apt::new(&tmp.path().join("apt"), &format!("deb [trusted=yes] {url}packages/deb/{repo}/ stable main"));
    apt.update().await;
    let plan = apt.get(&["install", "-s", "quarry-hello", "amdrocm-fft"]).await;
    assert_success(&plan, "apt-get install -s from the dated repo");
    assert!(text(&plan).contains("Inst quarry-hello (1.0-1"), "{}", text(&plan));
    let root = tmp.path().join("dnfroot");
    let out = dnf(&format!("{url}packages/rpm/{repo}/x86_64/"), &root, &[], &["install", "quarry-hello"]).await;
    assert_success(&out, "dnf install from the dated repo");
    assert!(root.join("usr/bin/quarry-hello").exists(), "{}", text(&out));

    // The tarball page: TheRock's index, the tarball with its size and sha256.
    let page = reqwest::get(format!("{url}tarball/")).await.unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(page.contains("<title>Tarball index</title>"), "{page}");
    assert!(page.contains(&format!("<a href=\"{TARBALL}\">{TARBALL}</a>")), "{page}");
    assert!(page.contains(&quarry_store::sha256_hex(&tarball)), "{page}");
    let fetched = reqwest::get(format!("{url}tarball/{TARBALL}")).await.unwrap().bytes().await.unwrap();
    assert_eq!(fetched.as_ref(), tarball.as_slice());

    // Again: everything is there with the same bytes; nothing is copied.
    let again = report(&quarry_in(tmp.path(), &promote, &[]).await, "promote again");
    assert!(again["files"].as_array().unwrap().iter().all(|f| f["status"] == "same"), "{again:#}");
    drop(served);
}

#[tokio::test(flavor = "multi_thread")]
async fn per_family_prerelease_and_asan_runs_land_where_therock_puts_them() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("quarry.toml"), PRESET).unwrap();
    let store_dir = tempfile::tempdir().unwrap();
    let store = store_dir.path();
    let s = store.display().to_string();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, None).await;
    let many = tmp.path().join("many");
    build_fixtures(&many, Some(2)).await;

    // A per-family run (wheels under python/{family}/) as prerelease.
    let core = WheelSpec::new("rocm-sdk-core", "7.1.0");
    let libraries = WheelSpec::new("rocm-sdk-libraries-gfx94X-dcgpu", "7.1.0").requires("rocm-sdk-core==7.1.0");
    for w in [&core, &libraries] {
        plant(store, &format!("6000-linux/python/gfx94X-dcgpu/{}", w.filename()), &w.build());
    }
    plant_natives(store, &fixtures, "6000-linux");
    // A second prerelease run with other packages.
    plant_natives(store, &many, "6001-linux");
    // A kpack run whose core has the per-family run's name and other bytes.
    let other_core = WheelSpec::new("rocm-sdk-core", "7.1.0").requires("other==1.0");
    plant(store, &format!("6002-linux/python/{}", other_core.filename()), &other_core.build());
    // An ASAN run: wheels, debs, a tarball.
    let asan_wheel = WheelSpec::new("rocm-sdk-core", "7.1.0+asan");
    plant(store, &format!("7000-linux/python/{}", asan_wheel.filename()), &asan_wheel.build());
    plant_natives(store, &many, "7000-linux");
    plant(store, &format!("7000-linux/tarballs/{TARBALL}"), b"asan tarball");
    assert_success(&quarry_in(tmp.path(), &["index", &s], &[]).await, "quarry index");

    let promote = |run: &'static str, release_type: &'static str, extra: &'static [&'static str]| {
        let s = s.clone();
        let cwd = tmp.path().to_path_buf();
        async move {
            let args = ["promote", "--from", run, "--to", V5, "--release-type", release_type, "--store", &s, "--json"];
            quarry_in(&cwd, &[&args[..], extra].concat(), &[]).await
        }
    };
    let first = report(&promote("6000-linux", "prerelease", &[]).await, "prerelease of a per-family run");
    let base = format!("{s}/{V5}");
    assert_eq!(
        install_lines(&first),
        [
            format!("pip: --index-url {base}whl/"),
            format!("apt: deb [trusted=yes] {base}packages/deb/ stable main"),
            format!("dnf: baseurl={base}packages/rpm/x86_64/"),
        ],
        "{first:#}"
    );
    assert!(first.get("repo").is_none(), "prerelease has no dated repo: {first:#}");
    let whl = walk(&store.join(V5).join("whl"));
    assert!(whl.contains(&format!("rocm-sdk-libraries-gfx94x-dcgpu/{}", libraries.filename())), "{whl:#?}");
    assert!(whl.contains(&format!("rocm-sdk-core/{}", core.filename())), "{whl:#?}");
    assert!(!store.join(V5).join("whl-next").exists(), "a per-family run goes to whl/");

    // The next prerelease publishes into the same packages/deb/: its Packages names both runs'.
    let second = report(&promote("6001-linux", "prerelease", &[]).await, "second prerelease");
    assert!(second["files"].as_array().unwrap().iter().all(|f| !f["to"].as_str().unwrap().contains(DATE)));
    let debs = walk(&store.join(V5).join("packages/deb"));
    assert!(debs.iter().all(|p| !p.starts_with(DATE)), "no dated repo for prerelease: {debs:#?}");
    let packages =
        std::fs::read_to_string(store.join(V5).join("packages/deb/dists/stable/main/binary-amd64/Packages")).unwrap();
    for name in ["quarry-hello", "quarry-many-1", "quarry-many-2"] {
        assert!(packages.contains(&format!("Package: {name}\n")), "{name}:\n{packages}");
    }
    let apt = Apt::new(&tmp.path().join("apt"), &format!("deb [trusted=yes] file://{base}packages/deb/ stable main"));
    apt.update().await;
    assert_success(&apt.get(&["install", "-s", "quarry-many-2", "quarry-hello"]).await, "apt from packages/deb/");

    // ASAN: -asan directories, the dated repo, no Python anywhere.
    let asan = report(&promote("7000-linux", "nightly", &["--build-variant", "asan"]).await, "ASAN nightly");
    let repo = format!("{DATE}-7000");
    assert_eq!(
        install_lines(&asan),
        [
            format!("apt: deb [trusted=yes] {base}packages-asan/deb/{repo}/ stable main"),
            format!("dnf: baseurl={base}packages-asan/rpm/{repo}/x86_64/"),
            format!("tarballs: {base}tarball-asan/"),
        ],
        "{asan:#}"
    );
    let files: Vec<&str> = asan["files"].as_array().unwrap().iter().map(|f| f["to"].as_str().unwrap()).collect();
    assert!(files.iter().all(|t| !t.ends_with(".whl")), "ASAN publishes no Python: {files:?}");
    assert!(store.join(V5).join(format!("tarball-asan/{TARBALL}")).is_file());
    assert!(!store.join(V5).join(format!("tarball/{TARBALL}")).exists());
    let page = std::fs::read_to_string(store.join(V5).join("tarball-asan/index.html")).unwrap();
    assert!(page.contains(&quarry_store::sha256_hex(b"asan tarball")), "{page}");

    // Bad values: exit 2, naming them, nothing changed.
    let before = walk(store);
    for (args, says) in [
        (&["--release-type", "release"][..], "release"),
        (&["--release-type", "dev", "--build-variant", "tsan"], "tsan"),
        (&["--build-variant", "asan"], "--release-type"),
        (&["--release-type", "dev", "--families", "gfx94X-dcgpu"], "--families"),
    ] {
        let all = [&["promote", "--from", "6000-linux", "--to", V5, "--store", &s][..], args].concat();
        let out = quarry_in(tmp.path(), &all, &[]).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
    for to in ["v4/rocm/core/", "v5/rocm/", "v5/rocm/core/whl/"] {
        let all = ["promote", "--from", "6000-linux", "--to", to, "--store", &s, "--release-type", "dev"];
        let out = quarry_in(tmp.path(), &all, &[]).await;
        assert_eq!(out.status.code(), Some(2), "--to {to}: {}", text(&out));
        assert!(text(&out).contains("not a product prefix of TheRock's v5 layout"), "{to}: {}", text(&out));
    }
    // One name, one content across the product's pip roots: whl/ holds this core already.
    let all = ["promote", "--from", "6002-linux", "--to", V5, "--store", &s, "--release-type", "prerelease"];
    let out = quarry_in(tmp.path(), &all, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("the channel already holds other bytes under 1 name(s)"), "{said}");
    assert!(said.contains(&format!("{V5}whl/rocm-sdk-core/{}", core.filename())), "{said}");
    assert_eq!(walk(store), before, "a refused promotion changed the store");
}

/// Between two moto buckets named as TheRock names them: no `--store`, no `--from-store`; the
/// run's files are copied server-side into the product bucket's v5 keys.
#[tokio::test(flavor = "multi_thread")]
async fn a_release_promotion_between_therocks_buckets_on_moto() {
    let server = S3Server::start_moto().await;
    let client = s3_client(&server);
    for bucket in ["therock-nightly-artifacts", "therock-repo-amd-nightly-core"] {
        create_public_bucket(&client, bucket).await;
    }
    let artifacts = S3Store::from_client(client.clone(), "therock-nightly-artifacts", "");
    let product = S3Store::from_client(client.clone(), "therock-repo-amd-nightly-core", "");
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = tmp.path().join("fixtures");
    build_fixtures(&fixtures, Some(1)).await;
    let run = "8000-linux";
    let wheels = [
        WheelSpec::new("rocm-sdk-core", "7.1.0"),
        WheelSpec::new("rocm-sdk-device-gfx942", "7.1.0").requires("rocm-sdk-core==7.1.0"),
    ];
    let mut puts: Vec<(String, Vec<u8>)> =
        wheels.iter().map(|w| (format!("{run}/python/{}", w.filename()), w.build())).collect();
    for (dir, root) in [("deb", "packages/deb/pool/main"), ("rpm", "packages/rpm/x86_64")] {
        for f in files_in(&fixtures.join(dir)) {
            let name = f.file_name().unwrap().to_str().unwrap().to_owned();
            puts.push((format!("{run}/{root}/{name}"), std::fs::read(&f).unwrap()));
        }
    }
    puts.push((format!("{run}/tarballs/{TARBALL}"), b"tarball bytes".to_vec()));
    for (key, bytes) in puts {
        artifacts.put_bytes(&Key::new(key).unwrap(), bytes.into(), PutOptions::default()).await.unwrap();
    }
    let env = server.client_env();
    let promote = ["promote", "--from", run, "--to", V5, "--release-type", "nightly", "--json"];
    let promoted = report(&quarry_in(tmp.path(), &promote, &env).await, "promote between the buckets");
    let files = promoted["files"].as_array().unwrap();
    assert_eq!(files.len(), 5, "2 wheels, a deb, an rpm, a tarball: {promoted:#}");
    assert!(files.iter().all(|f| f["method"] == "server-side"), "{promoted:#}");
    let pip = install_lines(&promoted).into_iter().find(|l| l.starts_with("pip: ")).unwrap();
    assert!(pip.ends_with("/therock-repo-amd-nightly-core/v5/rocm/core/whl-next/"), "{pip}");

    let keys: Vec<String> =
        product.list_all(V5, false).await.unwrap().objects.into_iter().map(|o| o.key.to_string()).collect();
    let repo = format!("{DATE}-8000");
    for want in [
        format!("{V5}whl-next/index.html"),
        format!("{V5}whl-next/rocm-sdk-core/index.html"),
        format!("{V5}whl-next/rocm-sdk-core/{}", wheels[0].filename()),
        format!("{V5}whl-next/rocm-sdk-core/{}.metadata", wheels[0].filename()),
        format!("{V5}whl-next/rocm-sdk-device-gfx942/{}", wheels[1].filename()),
        format!("{V5}packages/deb/{repo}/pool/main/quarry-many-1_1.0.1-1_amd64.deb"),
        format!("{V5}packages/deb/{repo}/dists/stable/Release"),
        format!("{V5}packages/rpm/{repo}/x86_64/quarry-many-1-1.0-1.noarch.rpm"),
        format!("{V5}packages/rpm/{repo}/x86_64/repodata/repomd.xml"),
        format!("{V5}tarball/{TARBALL}"),
        format!("{V5}tarball/index.html"),
    ] {
        assert!(keys.contains(&want), "{want} missing from the product bucket: {keys:#?}");
    }
    assert!(keys.iter().all(|k| !k.contains("/simple/")), "{keys:#?}");
    let (_, page) =
        product.get_bytes(&Key::new(format!("{V5}whl-next/rocm-sdk-core/index.html")).unwrap(), 1 << 20).await.unwrap();
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains(&format!("href=\"{}#sha256=", wheels[0].filename())), "{page}");
    assert!(
        artifacts.list_all(V5, false).await.unwrap().objects.is_empty(),
        "nothing written into the artifacts bucket's v5/"
    );
    server.stop().await;
}
