//! TheRock's upload step through `quarry upload`, checked against where TheRock's own code puts
//! files (`upload_python_packages.py`, `post_build_upload.py`, `WorkflowOutputRoot`):
//! `{external_repo}{run}-{platform}/python/{artifact_group}/` from `<dir>/dist`, the multi-arch
//! `python/` with `kpack_split`, logs under `logs/{artifact_group}/` (raw ccache logs left out,
//! profiling summaries also at the log root), `--dry-run` listing every key and writing
//! nothing, directories uploaded to a server; reruns that upload other bytes under an existing
//! name, refused unless `--skip-existing` (a local store, S3, `quarry serve`); and `quarry
//! artifacts copy` from TheRock's bucket into a submodule repository's run in the external
//! bucket, server-side.

use std::path::{Path, PathBuf};
use std::time::Duration;

use quarry_store::{Key, S3Store, Store, StoreExt};
use quarry_tests::s3::{S3Server, s3_client};
use quarry_tests::{
    ServedBinary, TOKEN, TestServer, WheelSpec, assert_success, quarry_bin, run, sha256_hex, workspace_root,
};

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// `quarry …` with the S3 server's credentials (if any) and a clean CI environment.
fn quarry(server: Option<&S3Server>, args: &[&str], github: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(args)
        .env("GITHUB_OUTPUT", github.join("output"))
        .env("GITHUB_STEP_SUMMARY", github.join("summary"))
        .env("GITHUB_REPOSITORY", "ROCm/TheRock")
        .env_remove("GITHUB_RUN_ID")
        .env_remove("RELEASE_TYPE")
        .env_remove("THEROCK_RUN_ID")
        .env_remove("THEROCK_PLATFORM")
        .env_remove("THEROCK_LOCAL_STAGING_DIR")
        .env_remove("QUARRY_TOKEN");
    for (k, v) in server.map(S3Server::client_env).unwrap_or_default() {
        cmd.env(k, v);
    }
    cmd
}

/// A build's packages directory as `build_python_packages.py` leaves it: wheels and an sdist in
/// `dist/`, build leftovers beside it.
fn packages_dir(root: &Path) -> PathBuf {
    let packages = root.join("packages");
    std::fs::create_dir_all(packages.join("dist")).unwrap();
    WheelSpec::new("rocm-sdk-core", "7.1.0").write_to(&packages.join("dist"));
    write(&packages.join("dist/rocm-7.1.0.tar.gz"), b"sdist");
    write(&packages.join("dist/.kpack_staging/part.kpack"), b"staging");
    write(&packages.join("build/leftover.o"), b"not uploaded");
    packages
}

/// The keys TheRock's uploader writes for `packages_dir`: `upload_directory(dist_dir,
/// packages_loc)` keeps every regular file's path below `dist/` (dot directories too).
fn therock_keys(prefix: &str) -> Vec<String> {
    [".kpack_staging/part.kpack", "rocm-7.1.0.tar.gz", "rocm_sdk_core-7.1.0-py3-none-any.whl"]
        .map(|f| format!("{prefix}{f}"))
        .to_vec()
}

fn dry_run_targets(out: &std::process::Output) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("dry-run JSON");
    assert_eq!(json["dry_run"], true);
    let mut targets: Vec<String> =
        json["targets"].as_array().unwrap().iter().map(|t| t["target"].as_str().unwrap().to_owned()).collect();
    targets.sort();
    targets
}

async fn keys_under(store: &S3Store, prefix: &str) -> Vec<String> {
    store.list_all(prefix, false).await.unwrap().objects.iter().map(|o| o.key.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_runs_list_every_key_where_therock_puts_it() {
    let tmp = tempfile::tempdir().unwrap();
    let packages = packages_dir(tmp.path());
    let pkg = packages.to_str().unwrap();
    fn with<'a>(extra: &[&'a str], pkg: &'a str) -> Vec<&'a str> {
        let mut args = vec!["upload", "--dry-run", "--json", "--run-id", "77"];
        args.extend_from_slice(extra);
        args.push(pkg);
        args
    }
    let args = |extra: &[&'static str]| with(extra, pkg);
    // Single-arch in TheRock's bucket: `{run}-{platform}/python/{artifact_group}/`; the platform
    // is this machine's.
    let host = if cfg!(windows) { "windows" } else { "linux" };
    let out =
        run(quarry(None, &args(&["--artifact-group", "gfx94X-dcgpu"]), tmp.path()), Duration::from_secs(30)).await;
    assert_success(&out, "upload --dry-run");
    let prefix = format!("s3://therock-ci-artifacts/77-{host}/python/gfx94X-dcgpu/");
    assert_eq!(dry_run_targets(&out), therock_keys(&prefix));
    // Without GITHUB_REPOSITORY the run is TheRock's, as `quarry artifacts` defaults it.
    let mut cmd = quarry(None, &args(&["--artifact-group", "gfx94X-dcgpu"]), tmp.path());
    cmd.env_remove("GITHUB_REPOSITORY");
    let out = run(cmd, Duration::from_secs(30)).await;
    assert_success(&out, "upload --dry-run without GITHUB_REPOSITORY");
    assert_eq!(dry_run_targets(&out), therock_keys(&prefix));
    // A submodule repository's run: the external bucket, under `{owner}-{repo}/`.
    let mut cmd = quarry(None, &args(&["--platform", "windows"]), tmp.path());
    cmd.env("GITHUB_REPOSITORY", "ROCm/rocm-libraries");
    let out = run(cmd, Duration::from_secs(30)).await;
    assert_success(&out, "upload --dry-run external");
    let prefix = "s3://therock-ci-artifacts-external/ROCm-rocm-libraries/77-windows/python/";
    assert_eq!(dry_run_targets(&out), therock_keys(prefix));
    // A store directory: the would-be paths, and nothing written.
    let store = tmp.path().join("store");
    let to = format!("{}/", store.display());
    let out = run(
        quarry(None, &with(&["--to", &to, "--kind", "python", "--artifact-group", "g"], pkg), tmp.path()),
        Duration::from_secs(30),
    )
    .await;
    assert_success(&out, "upload --dry-run --to DIR");
    assert_eq!(dry_run_targets(&out), therock_keys(&format!("{}/g/", store.display())));
    assert!(!store.exists(), "a dry run creates nothing");
    assert!(!tmp.path().join("output").exists() && !tmp.path().join("summary").exists(), "nor CI outputs");
    // Text: one line per file.
    let mut text_args = args(&["--artifact-group", "g"]);
    text_args.retain(|a| *a != "--json");
    let out = run(quarry(None, &text_args, tmp.path()), Duration::from_secs(30)).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().filter(|l| l.starts_with("would upload ")).count(), 3, "{text}");
    // A bad artifact group is bad input.
    let out = run(quarry(None, &args(&["--artifact-group", "../x"]), tmp.path()), Duration::from_secs(30)).await;
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--artifact-group \"../x\""));
}

#[tokio::test(flavor = "multi_thread")]
async fn packages_and_logs_land_where_therock_puts_them() {
    let server = S3Server::start_s3s_fs().await;
    let client = s3_client(&server);
    client.create_bucket().bucket("therock-ci-artifacts").send().await.expect("create bucket");
    let store = S3Store::from_client(client, "therock-ci-artifacts", "");
    let tmp = tempfile::tempdir().unwrap();
    let packages = packages_dir(tmp.path());
    let pkg = packages.to_str().unwrap();
    let base = format!("{}/therock-ci-artifacts/77-linux/python", server.endpoint);

    // A dry run against the real bucket writes nothing.
    let dry = ["upload", "--dry-run", "--run-id", "77", "--platform", "linux", "--artifact-group", "gfx94X-dcgpu", pkg];
    assert_success(&run(quarry(Some(&server), &dry, tmp.path()), Duration::from_secs(30)).await, "dry run");
    assert!(keys_under(&store, "").await.is_empty(), "a dry run writes nothing");

    // Single-arch: `python/{group}/`, kpack_split=false.
    let single = &dry[..1].iter().chain(&dry[2..]).copied().collect::<Vec<_>>();
    assert_success(&run(quarry(Some(&server), single, tmp.path()), Duration::from_secs(60)).await, "upload");
    assert_eq!(
        keys_under(&store, "77-linux/python/gfx94X-dcgpu/").await,
        therock_keys("77-linux/python/gfx94X-dcgpu/")
    );
    let output = std::fs::read_to_string(tmp.path().join("output")).unwrap();
    assert_eq!(output, format!("package_find_links_url={base}/gfx94X-dcgpu/index.html\nkpack_split=false\n"));

    // Multi-arch, every wheel at the top (the dot directory is staging, not a family):
    // `python/`, kpack_split=true.
    std::fs::remove_file(tmp.path().join("output")).unwrap();
    let multi = ["upload", "--run-id", "77", "--platform", "linux", pkg];
    assert_success(&run(quarry(Some(&server), &multi, tmp.path()), Duration::from_secs(60)).await, "multi-arch");
    assert_eq!(keys_under(&store, "77-linux/python/").await.len(), 6);
    let output = std::fs::read_to_string(tmp.path().join("output")).unwrap();
    assert_eq!(output, format!("package_find_links_url={base}/index.html\nkpack_split=true\n"));
    // Legacy per-family multi-arch: the URL later jobs append `/{family}/index.html` to.
    let family = tmp.path().join("family");
    std::fs::create_dir_all(family.join("dist/gfx94X-dcgpu")).unwrap();
    WheelSpec::new("rocm-sdk-libraries-gfx942", "7.1.0").write_to(&family.join("dist/gfx94X-dcgpu"));
    std::fs::remove_file(tmp.path().join("output")).unwrap();
    let legacy = ["upload", "--run-id", "78", "--platform", "linux", family.to_str().unwrap()];
    assert_success(&run(quarry(Some(&server), &legacy, tmp.path()), Duration::from_secs(60)).await, "per-family");
    let output = std::fs::read_to_string(tmp.path().join("output")).unwrap();
    let legacy_base = format!("{}/therock-ci-artifacts/78-linux/python", server.endpoint);
    assert_eq!(output, format!("package_find_links_url={legacy_base}\nkpack_split=false\n"));

    // Logs from a build directory: `logs/{group}/`, raw ccache logs left out, the profiling
    // summaries also at the log root.
    let build = tmp.path().join("build");
    for file in ["build.log", "ninja_logs.tar.gz", "ccache/x/raw.log", "therock-build-prof/comp-summary.html"] {
        write(&build.join("logs").join(file), file.as_bytes());
    }
    let logs =
        ["upload", "--kind", "logs", "--run-id", "77", "--artifact-group", "gfx94X-dcgpu", build.to_str().unwrap()];
    assert_success(&run(quarry(Some(&server), &logs, tmp.path()), Duration::from_secs(60)).await, "logs");
    let prefix = "77-linux/logs/gfx94X-dcgpu/";
    let want: Vec<String> =
        ["build.log", "comp-summary.html", "ninja_logs.tar.gz", "therock-build-prof/comp-summary.html"]
            .map(|f| format!("{prefix}{f}"))
            .to_vec();
    assert_eq!(keys_under(&store, prefix).await, want);
    let layout = &quarry_layout::THEROCK;
    assert_eq!(
        layout.part_of("logs/gfx94X-dcgpu/build.log"),
        Some(quarry_layout::RunPart::Logs),
        "the run page counts them as logs"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn directories_upload_to_a_server() {
    let server = TestServer::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let packages = packages_dir(tmp.path());
    // The server validates what it stores: real wheels only.
    std::fs::remove_dir_all(packages.join("dist/.kpack_staging")).unwrap();
    std::fs::remove_file(packages.join("dist/rocm-7.1.0.tar.gz")).unwrap();
    WheelSpec::new("rocm", "7.1.0").write_to(&packages.join("dist"));
    let to = format!("{}12345678901-linux/python/", server.root_url().trim_end_matches(quarry_tests::ROOT));
    let mut cmd = quarry(None, &["upload", "--json", "--to", &to, "--artifact-group", "gfx94X-dcgpu"], tmp.path());
    cmd.arg(&packages).env("QUARRY_TOKEN", TOKEN);
    let out = run(cmd, Duration::from_secs(60)).await;
    assert_success(&out, "upload DIR --to http://");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut keys: Vec<&str> = summary["files"].as_array().unwrap().iter().map(|f| f["key"].as_str().unwrap()).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "12345678901-linux/python/gfx94X-dcgpu/rocm-7.1.0-py3-none-any.whl",
            "12345678901-linux/python/gfx94X-dcgpu/rocm_sdk_core-7.1.0-py3-none-any.whl"
        ]
    );
    let (status, page) = server.get_text("/12345678901-linux/python/gfx94X-dcgpu/index.html").await;
    assert_eq!(status, 200);
    assert!(page.contains("rocm_sdk_core-7.1.0-py3-none-any.whl"), "{page}");
    server.stop().await;
}

/// Plants `name` and its sidecar under `prefix` of `store`, as a push leaves them.
async fn plant_artifact(store: &S3Store, prefix: &str, name: &str) -> Vec<u8> {
    let bytes = format!("archive {name}").into_bytes();
    let sha = sha256_hex(&bytes);
    let put = |key: String, body: Vec<u8>| async move {
        let options = quarry_store::PutOptions { sha256: Some(sha256_hex(&body)), ..Default::default() };
        store.put_bytes(&Key::new(key).unwrap(), body.into(), options).await.unwrap();
    };
    put(format!("{prefix}{name}"), bytes.clone()).await;
    put(format!("{prefix}{name}.sha256sum"), format!("{sha}  {name}\n").into_bytes()).await;
    bytes
}

#[tokio::test(flavor = "multi_thread")]
async fn artifacts_copy_across_buckets_server_side() {
    let server = S3Server::start_s3s_fs().await;
    let client = s3_client(&server);
    for bucket in ["therock-ci-artifacts", "therock-ci-artifacts-external"] {
        client.create_bucket().bucket(bucket).send().await.expect("create bucket");
    }
    let source = S3Store::from_client(client.clone(), "therock-ci-artifacts", "");
    let dest = S3Store::from_client(client, "therock-ci-artifacts-external", "");
    let llvm = plant_artifact(&source, "100-linux/", "amd-llvm_lib_generic.tar.zst").await;
    plant_artifact(&source, "100-linux/", "sysdeps_lib_generic.tar.zst").await;
    plant_artifact(&source, "100-linux/", "blas_lib_gfx942.tar.zst").await;

    let tmp = tempfile::tempdir().unwrap();
    let topology = workspace_root().join("topology/data/BUILD_TOPOLOGY.toml");
    let copy = |extra: &[&str]| {
        let mut cmd = quarry(Some(&server), &["artifacts", "copy", "--topology"], tmp.path());
        cmd.arg(&topology)
            .args(["--run-id", "200", "--platform", "linux", "--source-run-id", "100"])
            .args(["--source-repository", "ROCm/TheRock", "--stage", "compiler-runtime"])
            .args(extra)
            .env("GITHUB_REPOSITORY", "ROCm/rocm-libraries");
        cmd
    };
    let out = run(copy(&["--dry-run"]), Duration::from_secs(60)).await;
    assert_success(&out, "artifacts copy --dry-run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "would copy s3://therock-ci-artifacts/100-linux/amd-llvm_lib_generic.tar.zst -> ROCm-rocm-libraries/200-linux/amd-llvm_lib_generic.tar.zst"
        ),
        "{text}"
    );
    assert!(keys_under(&dest, "").await.is_empty(), "a dry run copies nothing");

    let out = run(copy(&[]), Duration::from_secs(60)).await;
    assert_success(&out, "artifacts copy across buckets");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().filter(|l| l.ends_with("(server-side)")).count(), 4, "{text}");
    let prefix = "ROCm-rocm-libraries/200-linux/";
    let want: Vec<String> = [
        "amd-llvm_lib_generic.tar.zst",
        "amd-llvm_lib_generic.tar.zst.sha256sum",
        "sysdeps_lib_generic.tar.zst",
        "sysdeps_lib_generic.tar.zst.sha256sum",
    ]
    .map(|f| format!("{prefix}{f}"))
    .to_vec();
    assert_eq!(keys_under(&dest, prefix).await, want, "only the stage's archives, with their sidecars");
    let key = Key::new(format!("{prefix}amd-llvm_lib_generic.tar.zst")).unwrap();
    let (meta, bytes) = dest.get_bytes(&key, 1 << 20).await.unwrap();
    assert_eq!(bytes.as_ref(), llvm.as_slice());
    let head = dest.head(&key).await.unwrap();
    assert_eq!(head.sha256.as_deref(), Some(sha256_hex(&llvm).as_str()), "x-amz-meta-sha256 copied: {meta:?}");

    // The same run as source and destination is refused.
    let mut same = quarry(Some(&server), &["artifacts", "copy", "--topology"], tmp.path());
    same.arg(&topology).args([
        "--run-id",
        "100",
        "--platform",
        "linux",
        "--source-run-id",
        "100",
        "--stage",
        "compiler-runtime",
    ]);
    let out = run(same, Duration::from_secs(60)).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("the source run is this run"), "{out:?}");
    server.stop().await;
}

/// Where a rerun's destination keeps the wheel, read back for comparison.
enum Stored {
    File(PathBuf),
    Url(String),
    S3(aws_sdk_s3::Client, String, String),
}

impl Stored {
    async fn bytes(&self) -> Vec<u8> {
        match self {
            Stored::File(path) => std::fs::read(path).unwrap(),
            Stored::Url(url) => reqwest::get(url).await.unwrap().bytes().await.unwrap().to_vec(),
            Stored::S3(client, bucket, key) => {
                let object = client.get_object().bucket(bucket).key(key).send().await.unwrap();
                object.body.collect().await.unwrap().into_bytes().to_vec()
            }
        }
    }
}

/// A rerun uploads a rebuilt wheel (same name, other bytes) beside a new one: refused by default
/// (non-zero, the stored bytes kept); with `--skip-existing` (twine's flag) the rebuilt wheel is
/// left as stored, named on stderr and under `skipped` in `--json`, the new one is stored and
/// the command succeeds; the same bytes again are no skip. Into a local store directory, into
/// S3 (s3s-fs) and through `quarry serve`.
#[tokio::test(flavor = "multi_thread")]
async fn reruns_with_other_bytes_fail_unless_skip_existing() {
    let first = WheelSpec::new("rocm-sdk-core", "7.1.0");
    let rebuilt = WheelSpec::new("rocm-sdk-core", "7.1.0").requires("numpy");
    let new = WheelSpec::new("rocm-sdk-libraries", "7.1.0");
    assert_eq!(first.filename(), rebuilt.filename());
    assert_ne!(first.build(), rebuilt.build(), "other bytes under the same name");
    let name = first.filename();
    let tmp = tempfile::tempdir().unwrap();
    let (dist1, dist2) = (tmp.path().join("run1/dist"), tmp.path().join("run2/dist"));
    std::fs::create_dir_all(&dist1).unwrap();
    std::fs::create_dir_all(&dist2).unwrap();
    first.write_to(&dist1);
    rebuilt.write_to(&dist2);
    new.write_to(&dist2);

    let store = tmp.path().join("store");
    let s3 = S3Server::start_s3s_fs().await;
    s3_client(&s3).create_bucket().bucket("reruns").send().await.expect("create bucket");
    let token_file = tmp.path().join("tokens");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(tmp.path().join("served"))
        .arg("--token-file")
        .arg(&token_file)
        .current_dir(tmp.path())
        .env_remove("QUARRY_TOKEN")
        .env_remove("QUARRY_STORE")
        .env_remove("QUARRY_PRIVATE")
        .stderr(std::process::Stdio::null());
    let mut served = ServedBinary::start(cmd).await;

    let destinations = [
        (
            "a local store directory",
            format!("{}/77-linux/python/", store.display()),
            Stored::File(store.join("77-linux/python").join(&name)),
            "skipped",
            Vec::new(),
        ),
        (
            "S3",
            "s3://reruns/77-linux/python/".to_owned(),
            Stored::S3(s3_client(&s3), "reruns".into(), format!("77-linux/python/{name}")),
            "skipped",
            s3.client_env(),
        ),
        (
            "quarry serve",
            format!("{}77-linux/python/", served.url),
            Stored::Url(format!("{}77-linux/python/{name}", served.url)),
            "exists",
            Vec::new(),
        ),
    ];
    for (what, to, stored, same_status, env) in &destinations {
        let upload = |dist: &Path, flags: &[&str]| {
            let mut cmd = quarry(None, &[&["upload", "--json", "--to", to.as_str()][..], flags].concat(), tmp.path());
            cmd.arg(dist).env("QUARRY_TOKEN", TOKEN).envs(env.iter().cloned());
            run(cmd, Duration::from_secs(60))
        };
        assert_success(&upload(&dist1, &[]).await, &format!("{what}: first upload"));
        assert_eq!(stored.bytes().await, first.build(), "{what}");

        let refused = upload(&dist2, &[]).await;
        let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
        assert!(!refused.status.success(), "{what}: other bytes under an existing name are refused by default");
        assert!(stderr.contains(&name), "{what}: the refusal names the file: {stderr}");
        assert_eq!(stored.bytes().await, first.build(), "{what}: the stored bytes are kept");

        let kept = upload(&dist2, &["--skip-existing"]).await;
        assert_success(&kept, &format!("{what}: upload --skip-existing"));
        let summary: serde_json::Value = serde_json::from_slice(&kept.stdout).unwrap();
        let skipped = summary["skipped"].as_array().unwrap();
        assert_eq!(skipped.len(), 1, "{what}: {summary}");
        assert!(skipped[0]["key"].as_str().unwrap().ends_with(&name), "{what}: {summary}");
        assert!(skipped[0]["reason"].as_str().unwrap().contains("sha256"), "{what}: {summary}");
        let files: Vec<&str> =
            summary["files"].as_array().unwrap().iter().map(|f| f["key"].as_str().unwrap()).collect();
        assert!(files.len() == 1 && files[0].ends_with(&new.filename()), "{what}: only the new wheel: {summary}");
        let stderr = String::from_utf8_lossy(&kept.stderr);
        assert!(stderr.contains(&name) && stderr.contains("left as stored"), "{what}: said on stderr: {stderr}");
        assert_eq!(stored.bytes().await, first.build(), "{what}: the stored bytes are unchanged");

        let same = upload(&dist1, &["--skip-existing"]).await;
        assert_success(&same, &format!("{what}: the same bytes again"));
        let summary: serde_json::Value = serde_json::from_slice(&same.stdout).unwrap();
        assert_eq!(summary["skipped"], serde_json::json!([]), "{what}: the same bytes are no skip: {summary}");
        assert_eq!(summary["files"][0]["status"], *same_status, "{what}: unchanged, as before: {summary}");
    }
    served.child.kill().await.ok();
    s3.stop().await;
}

/// A local directory is a store like a bucket: `--to DIR/777-linux/python/` uploads into the
/// store `DIR` under `777-linux/python/`, writes the run's manifest (so `quarry runs find`
/// finds it) and indexes what it touched, so the printed find-links URL exists and pip installs
/// through it; a refused upload prints no install line on stdout.
#[tokio::test(flavor = "multi_thread")]
async fn an_upload_into_a_local_store_is_indexed_like_a_bucket() {
    let tmp = tempfile::tempdir().unwrap();
    let github = tmp.path().join("github");
    std::fs::create_dir_all(&github).unwrap();
    let store = tmp.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let wheel = WheelSpec::new("local-demo", "1.0").write_to(tmp.path());
    let to = format!("{}/777-linux/python/", store.display());
    let mut cmd = quarry(None, &["upload", wheel.to_str().unwrap(), "--to", &to], &github);
    cmd.env("GITHUB_SHA", "0123456789abcdef0123456789abcdef01234567");
    let out = run(cmd, Duration::from_secs(120)).await;
    assert_success(&out, "quarry upload --to DIR/777-linux/python/");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let url = stdout
        .lines()
        .find_map(|l| l.strip_prefix("package_find_links_url: "))
        .unwrap_or_else(|| panic!("no find-links line:\n{stdout}"));
    assert!(Path::new(url).is_file(), "the printed find-links page {url} exists");
    let page = std::fs::read_to_string(url).unwrap();
    assert!(page.contains("local_demo-1.0-py3-none-any.whl"), "{page}");
    assert!(
        store.join("777-linux/python/local-demo-1.0-py3-none-any.whl").is_file()
            || store.join("777-linux/python/local_demo-1.0-py3-none-any.whl").is_file()
    );
    assert!(store.join("777-linux/python/simple/local-demo/index.html").is_file(), "the simple page");
    assert!(store.join("777-linux/.run-manifest.json").is_file(), "the run's manifest");
    let s = store.display().to_string();
    let found =
        run(quarry(None, &["runs", "find", "--commit", "0123456", "--store", &s], &github), Duration::from_secs(60))
            .await;
    assert_success(&found, "quarry runs find");
    assert!(
        String::from_utf8_lossy(&found.stdout).lines().any(|l| l.split_whitespace().next() == Some("777")),
        "{}",
        String::from_utf8_lossy(&found.stdout)
    );
    let target = tmp.path().join("site");
    let dir = url.trim_end_matches("index.html");
    assert_success(
        &quarry_tests::pip_install(&["--no-index", "--find-links", dir, "local-demo"], &target).await,
        "pip install",
    );

    // Other bytes under the same name: refused, and stdout points nowhere.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let changed = WheelSpec::new("local-demo", "1.0").requires("numpy").write_to(&other);
    let out =
        run(quarry(None, &["upload", changed.to_str().unwrap(), "--to", &to], &github), Duration::from_secs(120)).await;
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("find_links_url") && !stdout.contains("index.html"), "{stdout}");
}

/// `--wait` on a local store and through `quarry serve`: both index before they answer, so the
/// wait ends at once, having read the pages (the S3 + Lambda case is in `consistency.rs`).
#[tokio::test(flavor = "multi_thread")]
async fn wait_ends_once_the_pages_list_the_upload_locally_and_through_a_server() {
    let tmp = tempfile::tempdir().unwrap();
    let github = tmp.path().join("github");
    std::fs::create_dir_all(&github).unwrap();
    let store = tmp.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let wheel = WheelSpec::new("wait-local", "1.0").write_to(tmp.path());
    let to = format!("{}/881-linux/python/", store.display());
    let mut cmd = quarry(None, &["upload", wheel.to_str().unwrap(), "--to", &to, "--wait=30"], &github);
    cmd.env("RUST_LOG", "info");
    let out = run(cmd, Duration::from_secs(120)).await;
    assert_success(&out, "quarry upload --wait into a local store");
    assert!(String::from_utf8_lossy(&out.stderr).contains("indexed"), "{}", String::from_utf8_lossy(&out.stderr));

    let server = TestServer::start().await;
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let to = format!("{}882-linux/python/", server.url);
    let args =
        ["upload", wheel.to_str().unwrap(), "--to", &to, "--token-file", token_file.to_str().unwrap(), "--wait=30"];
    let mut cmd = quarry(None, &args, &github);
    cmd.env("RUST_LOG", "info");
    let out = run(cmd, Duration::from_secs(120)).await;
    assert_success(&out, "quarry upload --wait through quarry serve");
    assert!(String::from_utf8_lossy(&out.stderr).contains("indexed"), "{}", String::from_utf8_lossy(&out.stderr));
}
