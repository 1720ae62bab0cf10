//! The `quarry` binary as a user runs it: `quarry serve` on a local store, `quarry upload`
//! with a progress bar and `--json`, `quarry index`, and pip installing from the printed URL.

use std::process::Stdio;
use std::time::Duration;

use quarry_tests::{ServedBinary, WheelSpec, assert_success, installed, pip_install, quarry_bin, run};

async fn serve(store: &std::path::Path, token_file: &std::path::Path) -> ServedBinary {
    serve_with_env(store, token_file, &[]).await
}

async fn serve_with_env(store: &std::path::Path, token_file: &std::path::Path, env: &[(&str, String)]) -> ServedBinary {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(store)
        .arg("--token-file")
        .arg(token_file)
        .stderr(Stdio::null());
    ServedBinary::start(cmd).await
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_upload_index_and_install() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let token_file = tmp.path().join("token");
    let mut served = serve(&store, &token_file).await;
    let token = std::fs::read_to_string(&token_file).expect("serve wrote a token file");
    assert!(token.trim().len() >= 32, "a random token: {token:?}");

    let client = reqwest::Client::new();
    let health = client.get(format!("{}healthz", served.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);

    let wheels = tmp.path().join("dist");
    std::fs::create_dir_all(&wheels).unwrap();
    let files: Vec<_> = [WheelSpec::new("cli-demo", "1.0"), WheelSpec::new("cli-demo", "1.1")]
        .iter()
        .map(|s| s.write_to(&wheels))
        .collect();
    let to = format!("{}4242-linux/python/", served.url);
    let mut upload = tokio::process::Command::new(quarry_bin());
    upload.args(["upload", "--json", "--to", &to, "--token-file"]).arg(&token_file).args(&files);
    let out = run(upload, Duration::from_secs(60)).await;
    assert_success(&out, "quarry upload");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    let find_links = summary["find_links_url"].as_str().expect("find_links_url").to_owned();
    assert_eq!(find_links, format!("{to}index.html"));
    assert_eq!(summary["files"].as_array().map(Vec::len), Some(2));

    // Uploading again is a no-op; without a token it is refused.
    let mut again = tokio::process::Command::new(quarry_bin());
    again.args(["upload", "--to", &to, "--token-file"]).arg(&token_file).arg(&files[0]);
    let out = run(again, Duration::from_secs(60)).await;
    assert_success(&out, "re-upload");
    assert!(String::from_utf8_lossy(&out.stdout).contains("exists"), "{}", String::from_utf8_lossy(&out.stdout));
    let mut anonymous = tokio::process::Command::new(quarry_bin());
    anonymous.args(["upload", "--to", &to]).arg(&files[0]).env_remove("QUARRY_TOKEN");
    let out = run(anonymous, Duration::from_secs(60)).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no upload token"));
    assert!(!out.stderr.contains(&0x1b), "log lines to a pipe carry no colour codes");

    let target = tmp.path().join("site");
    let out = pip_install(&["--no-index", "--find-links", &find_links, "cli-demo"], &target).await;
    assert_success(&out, "pip install from the printed find-links URL");
    assert_eq!(installed(&target), ["cli_demo-1.1.dist-info"]);

    // Stop the server (SIGTERM) and reindex offline: nothing to do, and --json says so.
    let pid = served.child.id().expect("pid");
    let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    let status =
        tokio::time::timeout(Duration::from_secs(20), served.child.wait()).await.expect("serve stops on SIGTERM");
    assert!(status.is_ok());
    let mut index = tokio::process::Command::new(quarry_bin());
    index.args(["index", "--json"]).arg(&store);
    let out = run(index, Duration::from_secs(60)).await;
    assert_success(&out, "quarry index");
    let reports: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reports[0]["root"], "4242-linux/python/");
    assert_eq!(reports[0]["committed"], false);

    // A file copied in by hand: `--check` reports it missing from the pages and fails…
    WheelSpec::new("cli-demo", "2.0").write_to(&store.join("4242-linux/python"));
    let check = |store: &std::path::Path| {
        let mut c = tokio::process::Command::new(quarry_bin());
        c.args(["index", "--check"]).arg(store);
        c
    };
    let out = run(check(&store), Duration::from_secs(60)).await;
    assert!(!out.status.success(), "--check passed with an unindexed file");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("cli_demo-2.0-py3-none-any.whl is in the listing but not in the committed state"),
        "{stdout}"
    );
    // …and the next `quarry index` picks it up.
    let mut index = tokio::process::Command::new(quarry_bin());
    index.arg("index").arg(&store);
    let out = run(index, Duration::from_secs(60)).await;
    assert_success(&out, "quarry index");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next(),
        Some("4242-linux/python/: 1 added, 0 removed, 0 rejected, 4 written, 0 deleted")
    );
    let out = run(check(&store), Duration::from_secs(60)).await;
    assert_success(&out, "quarry index --check");
    assert!(String::from_utf8_lossy(&out.stdout).contains("4242-linux/python/: 3 files, 3 pages, 0 problems"));
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_signs_apt_and_dnf_repos_with_the_key_from_the_environment() {
    use quarry_tests::native::{Apt, build_fixtures, dnf, files_in, text};
    let tmp = tempfile::tempdir().unwrap();
    build_fixtures(&tmp.path().join("fixtures"), None).await;
    let key_file = quarry_tests::workspace_root().join("index/testdata/test-rsa3072.sec.asc");
    let token_file = tmp.path().join("tokens");
    let mut served = serve_with_env(
        &tmp.path().join("store"),
        &token_file,
        &[("QUARRY_SIGNING_KEY_FILE", key_file.display().to_string())],
    )
    .await;
    let upload = |kind: &'static str, to: String| {
        let token_file = token_file.clone();
        let files = files_in(&tmp.path().join("fixtures").join(kind));
        async move {
            let mut cmd = tokio::process::Command::new(quarry_bin());
            cmd.args(["upload", "--json", "--to", &to, "--token-file"]).arg(&token_file).args(&files);
            let out = run(cmd, Duration::from_secs(120)).await;
            assert_success(&out, "quarry upload");
            serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("--json prints JSON")
        }
    };
    let debs = upload("deb", format!("{}77-linux/packages/deb/pool/main/", served.url)).await;
    let root = format!("{}77-linux/packages/deb/", served.url);
    assert_eq!(
        debs["apt_source"].as_str(),
        Some(format!("deb [signed-by=/etc/apt/keyrings/quarry.asc] {root} stable main").as_str()),
        "{debs}"
    );
    let key_url = debs["key_url"].as_str().expect("a signed repo names its key").to_owned();
    let key = reqwest::get(&key_url).await.unwrap().text().await.unwrap();
    let key_path = tmp.path().join("quarry.asc");
    std::fs::write(&key_path, key).unwrap();
    let apt = Apt::new(&tmp.path().join("apt"), &format!("deb [signed-by={}] {root} stable main", key_path.display()));
    apt.update().await;
    let policy = text(&apt.cache(&["policy", "amdrocm-fft7.1-gfx942"]).await);
    assert!(policy.contains("Candidate: 7.1.0~dev20260820-12345"), "{policy}");

    let rpms = upload("rpm", format!("{}77-linux/packages/rpm/x86_64/", served.url)).await;
    let baseurl = rpms["dnf_baseurl"].as_str().expect("dnf baseurl").to_owned();
    let gpg = ["r.repo_gpgcheck=1".to_owned(), format!("r.gpgkey={}", rpms["key_url"].as_str().unwrap())];
    let out = dnf(&baseurl, &tmp.path().join("root"), &gpg, &["install", "amdrocm-fft"]).await;
    assert_success(&out, "dnf install from the signed repo");
    assert!(tmp.path().join("root/opt/rocm/core-7.1/lib/fft/gfx942.kpack").exists());
    served.child.kill().await.ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn stage_configure_prints_what_configure_stage_py_prints() {
    let data = quarry_tests::workspace_root().join("topology/data");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("configure-from-therock.json")).unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let configure = |extra: &[&str]| {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["stage", "configure", "--topology"]).arg(data.join("BUILD_TOPOLOGY.toml")).args(extra);
        cmd
    };
    let cmd = configure(&[&["--stage", "math-libs"][..], &quarry_tests::CONFIGURE_WINDOWS_FAMILIES].concat());
    let out = run(cmd, Duration::from_secs(30)).await;
    assert_success(&out, "quarry stage configure");
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected["math-libs|windows|families"].as_str().unwrap());

    let github_output = tmp.path().join("github_output");
    let mut cmd = configure(&[
        "--stage",
        "compiler-runtime",
        "--platform",
        "linux",
        "--gha-output",
        "--amdgpu-families",
        "gfx1201",
    ]);
    cmd.env("GITHUB_OUTPUT", &github_output);
    assert_success(&run(cmd, Duration::from_secs(30)).await, "quarry stage configure --gha-output");
    let written = std::fs::read_to_string(&github_output).unwrap();
    let want = expected["compiler-runtime|linux|oneline"].as_str().unwrap().trim();
    assert!(written.starts_with(&format!("cmake_args={want}\n")), "{written}");
    assert!(written.ends_with("pip_install_cmd=\n"), "{written}");

    let out = run(configure(&["--stage", "no-such-stage"]), Duration::from_secs(30)).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown build stage \"no-such-stage\""));
}
