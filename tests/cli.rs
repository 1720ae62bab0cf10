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

/// `quarry` with `args`, `env` set and `QUARRY_*` from the caller's environment removed.
async fn quarry(args: &[&str], env: &[(String, String)], cwd: &std::path::Path) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args).current_dir(cwd);
    for var in ["QUARRY_STORE", "QUARRY_TOKEN", "QUARRY_CONFIG", "AWS_ENDPOINT_URL", "AWS_PROFILE"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    run(cmd, Duration::from_secs(120)).await
}

fn text(out: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// Every command that takes a store, with the rest of its arguments and the exit codes that
/// mean it ran on the store (`runs find` finds no run, `mirror` reaches no upstream: 1).
fn store_commands(work: &std::path::Path) -> Vec<(Vec<String>, &'static [i32])> {
    let topology = quarry_tests::workspace_root().join("topology/data/BUILD_TOPOLOGY.toml");
    let strings = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    vec![
        (strings(&["index"]), &[0]),
        (strings(&["index", "--check"]), &[0]),
        (strings(&["gc", "--keep-last", "5"]), &[0]),
        (strings(&["check-origins", "a/python/", "b/python/"]), &[0]),
        (strings(&["promote", "--init", "--to", "nightly", "--kinds", "deb,rpm"]), &[0]),
        // The root `promote --init` published.
        (
            strings(&[
                "prune",
                "--root",
                "nightly/packages/deb/",
                "--kind",
                "deb",
                "--keep-versions",
                "3",
                "--dry-run",
            ]),
            &[0],
        ),
        // A run with nothing to promote is bad input.
        (strings(&["promote", "--from", "9-linux", "--to", "nightly", "--kinds", "apt,dnf"]), &[2]),
        (strings(&["runs", "find", "--commit", "abcdef1"]), &[1]),
        // The channel `promote --init` made: one version, nothing older to switch back to.
        (strings(&["channel", "history", "nightly"]), &[0]),
        (strings(&["channel", "forget", "nightly", "--keep", "1"]), &[0]),
        (strings(&["channel", "rollback", "nightly"]), &[2]),
        (strings(&["audit"]), &[0]),
        (strings(&["runs", "init", "--run-id", "7", "--platform", "linux"]), &[0]),
        (
            strings(&[
                "mirror",
                "--to",
                "python-deps/",
                "--upstream",
                "http://127.0.0.1:9/simple/",
                "--project",
                "a==1",
            ]),
            &[1],
        ),
        (
            vec![
                "artifacts".into(),
                "fetch".into(),
                "--topology".into(),
                topology.display().to_string(),
                "--run-id".into(),
                "7".into(),
                "--platform".into(),
                "linux".into(),
                "--stage".into(),
                "all".into(),
                "--output-dir".into(),
                work.join("fetched").display().to_string(),
            ],
            &[0, 1],
        ),
    ]
}

/// Every command that takes a store takes it the same ways: a directory, `file://`,
/// `s3://bucket/prefix` and `QUARRY_STORE`; none refuses a form clap-side (exit 2).
#[tokio::test(flavor = "multi_thread")]
async fn every_store_command_takes_the_same_store_forms() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    std::fs::create_dir_all(&dir).unwrap();
    let s3 = quarry_tests::s3::S3Server::start_s3s_fs().await;
    quarry_tests::s3::s3_client(&s3).create_bucket().bucket("forms").send().await.expect("create bucket");
    let s3_env = s3.client_env();
    let dir_text = dir.display().to_string();
    type Form<'a> = (&'a str, Vec<String>, Vec<(String, String)>);
    let forms: Vec<Form> = vec![
        ("a directory", vec!["--store".into(), dir_text.clone()], vec![]),
        ("file://", vec!["--store".into(), format!("file://{dir_text}")], vec![]),
        ("s3://bucket/prefix", vec!["--store".into(), "s3://forms/some/prefix".into()], s3_env.clone()),
        ("QUARRY_STORE", vec![], vec![("QUARRY_STORE".to_owned(), dir_text.clone())]),
        (
            "QUARRY_STORE=s3://",
            vec![],
            [vec![("QUARRY_STORE".to_owned(), "s3://forms/env/".to_owned())], s3_env.clone()].concat(),
        ),
    ];
    let mut wrong = Vec::new();
    for (args, codes) in store_commands(tmp.path()) {
        for (form, store_args, env) in &forms {
            let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
            all.extend(store_args.iter().map(String::as_str));
            let out = quarry(&all, env, tmp.path()).await;
            let code = out.status.code().unwrap_or(-1);
            if !codes.contains(&code) {
                wrong.push(format!("quarry {} ({form}): exit {code}\n{}", args.join(" "), text(&out)));
            }
        }
    }
    // `quarry index DIR` still works, and the positional wins over QUARRY_STORE.
    let env = vec![("QUARRY_STORE".to_owned(), tmp.path().join("elsewhere").display().to_string())];
    let out = quarry(&["index", &dir_text], &env, tmp.path()).await;
    if !out.status.success() {
        wrong.push(format!("quarry index DIR: {}", text(&out)));
    }
    // `quarry serve` too: it prints its URL once the store is open.
    for (form, store_args, env) in &forms {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["serve", "--addr", "127.0.0.1:0"]).args(store_args).current_dir(tmp.path());
        cmd.env_remove("QUARRY_STORE").envs(env.iter().map(|(k, v)| (k, v))).stderr(Stdio::null());
        let mut served = ServedBinary::start(cmd).await;
        let health = reqwest::get(format!("{}healthz", served.url)).await.map(|r| r.status().as_u16());
        if health.as_ref().ok() != Some(&200) {
            wrong.push(format!("quarry serve ({form}): /healthz {health:?}"));
        }
        served.child.kill().await.ok();
    }
    s3.stop().await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// A mistyped store path is bad input for every command that reads a store: exit 2, the path
/// named, nothing created.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_store_is_bad_input_and_nothing_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("typo-in-the-path");
    let typo_text = typo.display().to_string();
    let mut wrong = Vec::new();
    let reads: Vec<Vec<&str>> = vec![
        vec!["index", &typo_text],
        vec!["index", "--store", &typo_text],
        vec!["index", "--full", "--store", &typo_text],
        vec!["gc", "--keep-last", "3", "--store", &typo_text],
        vec!["prune", "--root", "v2/", "--kind", "pip", "--keep-versions", "3", "--store", &typo_text],
        vec!["prune", "--channel", "v2/", "--store", &typo_text],
        vec!["check-origins", "a/python/", "b/python/", "--store", &typo_text],
        vec!["promote", "--from", "9-linux", "--to", "nightly", "--store", &typo_text],
        vec!["runs", "find", "--commit", "abcdef1", "--store", &typo_text],
    ];
    for args in reads {
        let out = quarry(&args, &[], tmp.path()).await;
        let shown = text(&out);
        if out.status.code() != Some(2) || !shown.contains("typo-in-the-path") || !shown.contains("does not exist") {
            wrong.push(format!("quarry {}: exit {:?}\n{shown}", args.join(" "), out.status.code()));
        }
        if typo.exists() {
            wrong.push(format!("quarry {} created {}", args.join(" "), typo.display()));
            std::fs::remove_dir_all(&typo).ok();
        }
    }
    // A file where the store should be is named too.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = quarry(&["index", "--store", &file.display().to_string()], &[], tmp.path()).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("is not a directory"), "{}", text(&out));
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

/// Values clap knows the type of are checked by clap: a bad one exits 2 naming the choices.
#[tokio::test(flavor = "multi_thread")]
async fn bad_enum_values_and_store_urls_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().display().to_string();
    for (args, says) in [
        (vec!["prune", "--root", "v2/", "--kind", "wheel", "--keep-versions", "1", "--store", &store], "wheel"),
        (vec!["promote", "--from", "9-linux", "--to", "n", "--kinds", "pip,whl", "--store", &store], "whl"),
        (vec!["index", "--store", "gs://bucket/x"], "unsupported scheme"),
        (vec!["index", "--store", "s3://"], "names no bucket"),
        (vec!["upload", "x.whl", "--kind", "egg"], "egg"),
        (vec!["--log-format", "xml", "index", "--store", &store], "xml"),
    ] {
        let out = quarry(&args, &[], tmp.path()).await;
        assert_eq!(out.status.code(), Some(2), "quarry {}: {}", args.join(" "), text(&out));
        let shown = text(&out);
        assert!(shown.contains(says) && shown.contains("invalid value"), "quarry {}: {shown}", args.join(" "));
    }
}

/// A file that is no package is refused naming it, before any upload token is looked for.
#[tokio::test(flavor = "multi_thread")]
async fn a_non_package_is_refused_before_the_token_is_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let passwd = tmp.path().join("passwd");
    std::fs::write(&passwd, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    // No token anywhere, and a server that is not there: only the input is judged.
    let out = quarry(
        &["upload", &passwd.display().to_string(), "--to", "http://127.0.0.1:9/123-linux/python/"],
        &[],
        tmp.path(),
    )
    .await;
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(shown.contains("passwd is not a package"), "{shown}");
    assert!(!shown.contains("no upload token"), "{shown}");
}

/// `scripts/demo` installs the example through the find-links page and through the simple API.
#[tokio::test(flavor = "multi_thread")]
async fn the_demo_installs_through_find_links_and_the_simple_api() {
    let root = quarry_tests::workspace_root();
    let venv_bin = quarry_tests::venv().join("bin");
    let path = std::env::join_paths(
        std::iter::once(venv_bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::new(root.join("scripts/demo"));
    cmd.env("QUARRY_DEMO_BIN", quarry_bin()).env("PATH", path).env("PIP_CONFIG_FILE", "/dev/null");
    let out = run(cmd, Duration::from_secs(300)).await;
    assert_success(&out, "scripts/demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let after = |step: &str| {
        let at = lines.iter().position(|l| l.starts_with(step)).unwrap_or_else(|| panic!("no {step:?} in\n{stdout}"));
        lines.get(at + 1).copied().unwrap_or_default()
    };
    assert_eq!(after("==> pip install --no-index --find-links http://127.0.0.1:"), "installed quarry-hello 1.0.0");
    assert_eq!(after("==> pip install --index-url http://127.0.0.1:"), "installed quarry-hello 1.0.0", "{stdout}");
}

/// `quarry --help` lists the commands by task with one line each, and the global options once;
/// a command's help shows its own options first and the global ones after, in a line each.
#[tokio::test(flavor = "multi_thread")]
async fn help_reads_by_task_with_the_global_options_once() {
    let tmp = tempfile::tempdir().unwrap();
    let out = quarry(&["--help"], &[], tmp.path()).await;
    assert_success(&out, "quarry --help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    for heading in ["Serve and upload:", "Releases and retention:", "TheRock builds:", "Global options:"] {
        assert_eq!(help.matches(heading).count(), 1, "{heading} once in\n{help}");
    }
    assert!(help.contains("\n  check-origins  "), "{help}");
    assert!(!help.contains("self-wheel") && !help.contains("self-docs"), "{help}");
    let out = quarry(&["index", "--help"], &[], tmp.path()).await;
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let own = help.find("--store").expect("--store");
    let global = help.find("Global options:").expect("a global options heading");
    assert!(own < global, "the command's own options come first:\n{help}");
    assert_eq!(help.matches("--log-format").count(), 1, "{help}");
    // Four global options, a line or two each: no long descriptions repeated in every command.
    let section: Vec<&str> = help[global..].lines().skip(1).take_while(|l| !l.trim().is_empty()).collect();
    assert!(section.len() <= 8, "{section:#?}");
}
