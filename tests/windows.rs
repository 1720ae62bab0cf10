//! `quarry.exe` (cross-built for x86_64-pc-windows-gnu by `scripts/windows`) under Wine, each
//! test in a Wine prefix of its own: `--version`, `stage configure --platform windows` against
//! TheRock's recorded `configure_stage.py` outputs, `artifacts push`/`fetch --bootstrap` with
//! Windows paths, `upload` into a Linux `quarry serve`, and `quarry.exe serve` feeding Linux pip.
//! Submodules: `wheels` (`win_amd64` rocm-sdk wheels from mingw-built DLLs), `s3` (`upload`
//! into s3s-fs), `stage` (`ci matrix` against the Linux binary, `stage build` as far as Wine
//! can run it).
//!
//! Wine maps `Z:\` to `/`, so a Linux temporary directory `/tmp/x` is `Z:\tmp\x` to the `.exe`.
//! Known Wine limits, tested as near as Wine allows (and said where): Wine shows a symlink as
//! its target and cannot create one (`CreateSymbolicLinkW` is a stub), and it strips trailing
//! dots and spaces from names silently, so those rules are proven on Quarry's own code paths
//! (archive members checked before anything is written), not on Windows' filesystem.
//!
//! Outside CI (`CI` unset) every test skips, loudly, when Wine, mingw-w64 or `quarry.exe` is
//! missing; in CI a missing piece fails the test.

mod s3;
mod stage;
mod wheels;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use quarry_tests::native::{artifact, raw_tar_zst};
use quarry_tests::{ServedBinary, WheelSpec, assert_success, installed, pip_install, quarry_bin, run, workspace_root};

/// Where the cross-built `quarry.exe` is: `QUARRY_WINDOWS_EXE`, else beside this test's target
/// directory (`<target>/x86_64-pc-windows-gnu/debug/quarry.exe`, where `scripts/windows` builds it).
fn exe_path() -> PathBuf {
    if let Some(path) = std::env::var_os("QUARRY_WINDOWS_EXE") {
        return PathBuf::from(path);
    }
    target_dir().join("x86_64-pc-windows-gnu/debug/quarry.exe")
}

fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    // <target>/debug/deps/e2e-…
    exe.ancestors().nth(3).expect("target dir").to_path_buf()
}

fn wine_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("wine64"))
        .find(|p| p.is_file());
    on_path.or_else(|| Some(PathBuf::from("/usr/lib/wine/wine64")).filter(|p| p.is_file()))
}

fn wineserver_binary(wine: &Path) -> PathBuf {
    let beside = wine.with_file_name("wineserver");
    if beside.is_file() { beside } else { PathBuf::from("/usr/lib/wine/wineserver") }
}

fn has_mingw() -> bool {
    std::process::Command::new("x86_64-w64-mingw32-gcc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A Linux path as the `.exe` sees it: `Z:\tmp\x` (`forward`: `Z:/tmp/x`, also valid on Windows).
fn win(path: &Path, forward: bool) -> String {
    let text = path.display().to_string();
    if forward { format!("Z:{text}") } else { format!("Z:{}", text.replace('/', "\\")) }
}

/// One test's Wine prefix (a hard-linked clone of a template prefix made once per target
/// directory) with the `bcryptprimitives.dll` stand-in in its `system32`.
struct Wine {
    wine: PathBuf,
    exe: PathBuf,
    prefix: tempfile::TempDir,
}

impl Wine {
    /// The prefix, or `None` (after a loud message) when something is missing outside CI.
    fn new() -> Option<Self> {
        let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
        let exe = exe_path();
        let wine = wine_binary();
        let missing: Vec<String> = [
            (wine.is_none(), "wine64 (Debian's wine64 package)".to_owned()),
            (!has_mingw(), "x86_64-w64-mingw32-gcc (Debian's gcc-mingw-w64-x86-64)".to_owned()),
            (!exe.is_file(), format!("{} (run scripts/windows)", exe.display())),
        ]
        .into_iter()
        .filter_map(|(gone, what)| gone.then_some(what))
        .collect();
        if !missing.is_empty() {
            let message = format!("the Windows suite needs {}", missing.join(", "));
            assert!(!in_ci, "{message}: scripts/test installs and builds them");
            #[allow(clippy::print_stderr)] // the loud skip, in the test log
            {
                eprintln!("\n!!!!!!!! SKIPPED (not in CI): {message} !!!!!!!!\n");
            }
            return None;
        }
        let wine = wine.expect("checked");
        let template = template_prefix(&wine);
        let prefix = tempfile::Builder::new().prefix("quarry-wine-").tempdir().expect("tempdir");
        clone_prefix(&template, prefix.path());
        Some(Wine { wine, exe, prefix })
    }

    /// `quarry.exe args…` under Wine, stdin closed.
    fn quarry(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.wine);
        cmd.arg(&self.exe);
        self.env(&mut cmd);
        cmd
    }

    fn env(&self, cmd: &mut tokio::process::Command) {
        cmd.env("WINEPREFIX", self.prefix.path())
            .env("WINEDEBUG", "-all")
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .env_remove("QUARRY_TOKEN")
            .env_remove("GITHUB_RUN_ID")
            .env_remove("THEROCK_LOCAL_STAGING_DIR")
            .env_remove("GITHUB_REPOSITORY")
            .env_remove("RELEASE_TYPE")
            .kill_on_drop(true);
    }

    async fn output(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = self.quarry();
        cmd.args(args);
        run(cmd, Duration::from_secs(120)).await
    }
}

impl Drop for Wine {
    /// Stops the prefix's wineserver before its directory goes.
    fn drop(&mut self) {
        let _ = std::process::Command::new(wineserver_binary(&self.wine))
            .arg("-k")
            .env("WINEPREFIX", self.prefix.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// `<target>/windows-test/prefix`: `wineboot -i` once, then the stand-in DLL, made under a lock
/// so that concurrent tests wait for one another; a `ready` file marks it complete.
fn template_prefix(wine: &Path) -> PathBuf {
    let base = target_dir().join("windows-test");
    std::fs::create_dir_all(&base).unwrap();
    let lock = std::fs::File::create(base.join("lock")).unwrap();
    lock.lock().unwrap();
    let prefix = base.join("prefix");
    let ready = base.join("ready");
    let source = workspace_root().join("tests/windows/bcryptprimitives.c");
    let stale = |p: &Path| {
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        modified(p).is_none() || modified(p) < modified(&source)
    };
    if stale(&ready) {
        let _ = std::fs::remove_dir_all(&prefix);
        let boot = std::process::Command::new(wine)
            .args(["wineboot", "-i"])
            .env("WINEPREFIX", &prefix)
            .env("WINEDEBUG", "-all")
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
            .env_remove("DISPLAY")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run wineboot");
        assert!(boot.success(), "wineboot -i failed in {}", prefix.display());
        let _ = std::process::Command::new(wineserver_binary(wine)).arg("-w").env("WINEPREFIX", &prefix).status();
        let dll = prefix.join("drive_c/windows/system32/bcryptprimitives.dll");
        let def = source.with_extension("def");
        let built = std::process::Command::new("x86_64-w64-mingw32-gcc")
            .args(["-shared", "-O2", "-s", "-o"])
            .arg(&dll)
            .arg(&source)
            .arg(&def)
            .arg("-lbcrypt")
            .status()
            .expect("run x86_64-w64-mingw32-gcc");
        assert!(built.success(), "building the bcryptprimitives.dll stand-in failed");
        std::fs::write(&ready, b"").unwrap();
    }
    prefix
}

/// A prefix of its own for one test: hard links to the template's files (DLLs are never
/// written), real copies of the registry files (wineserver rewrites them), symlinks kept.
fn clone_prefix(template: &Path, to: &Path) {
    for entry in std::fs::read_dir(template).unwrap() {
        let entry = entry.unwrap();
        let (from, dest) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from).unwrap(), &dest).unwrap();
        } else if kind.is_dir() {
            std::fs::create_dir(&dest).unwrap();
            clone_prefix(&from, &dest);
        } else if from.extension().is_some_and(|e| e == "reg") {
            std::fs::copy(&from, &dest).unwrap();
        } else {
            std::fs::hard_link(&from, &dest).unwrap();
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn version_and_stage_configure_match_configure_stage_py() {
    let Some(wine) = Wine::new() else { return };
    let out = wine.output(&["--version"]).await;
    assert_success(&out, "quarry.exe --version");
    let linux = run(
        {
            let mut cmd = tokio::process::Command::new(quarry_bin());
            cmd.arg("--version");
            cmd
        },
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(text(&out.stdout), text(&linux.stdout), "the same version as the Linux build");

    let data = workspace_root().join("topology/data");
    let expected: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(data.join("configure-from-therock.json")).unwrap()).unwrap();
    let topology = win(&data.join("BUILD_TOPOLOGY.toml"), false);
    let cases: Vec<(&String, &String)> = expected.iter().filter(|(case, _)| case.contains("|windows|")).collect();
    assert_eq!(cases.len(), 33, "11 stages × 3 variants");
    let runs = cases.iter().map(|(case, want)| {
        let parts: Vec<&str> = case.split('|').collect();
        let mut args = vec!["stage", "configure", "--topology", &topology, "--stage", parts[0]];
        // The plain variant leaves --platform out: on Windows it defaults to windows.
        match parts[2] {
            "families" => args.extend(quarry_tests::CONFIGURE_WINDOWS_FAMILIES),
            "oneline" => args.extend(["--platform", "windows", "--oneline", "--amdgpu-families", "gfx1201"]),
            _ => {}
        }
        let owned: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        let wine = &wine;
        async move {
            let args: Vec<&str> = owned.iter().map(String::as_str).collect();
            let out = wine.output(&args).await;
            assert_success(&out, &format!("quarry.exe stage configure ({case})"));
            assert_eq!(text(&out.stdout), **want, "{case}");
        }
    });
    // A few at a time: every run is a Windows process under Wine.
    let mut pending: Vec<_> = runs.collect();
    while !pending.is_empty() {
        let batch: Vec<_> = pending.drain(..pending.len().min(4)).collect();
        futures_util::future::join_all(batch).await;
    }
}

/// A Windows-like stage tree under `build/artifacts/`: DLLs and import libraries, nested
/// directories, a large file, per-target kernels.
fn windows_build_tree(build: &Path) -> Vec<u8> {
    let artifacts = build.join("artifacts");
    let files = [("bin/zlib1.dll", "MZ zlib"), ("lib/zlib.lib", "!<arch>\n"), ("share/a/b/c/d/e/deep.txt", "deep")];
    artifact(&artifacts, "sysdeps_lib_generic", "third-party/sysdeps/stage", &files);
    artifact(&artifacts, "sysdeps_dev_generic", "third-party/sysdeps/stage", &[("include/zlib.h", "/* zlib */")]);
    artifact(&artifacts, "amd-llvm_lib_generic", "compiler/amd-llvm/stage", &[("lib/llvm/bin/clang.exe", "MZ clang")]);
    // 12 MiB that zstd cannot shrink: a large member streamed through both ends.
    let mut big = Vec::with_capacity(12 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while big.len() < 12 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        big.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(artifacts.join("amd-llvm_lib_generic/compiler/amd-llvm/stage/lib/llvm/bin/big.bin"), &big).unwrap();
    for gfx in ["gfx942", "gfx1100"] {
        let files = [(format!("lib/rocblas/library/{gfx}.co"), format!("{gfx} kernels"))];
        let files: Vec<(&str, &str)> = files.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        artifact(&artifacts, &format!("blas_lib_{gfx}"), "math-libs/BLAS/stage", &files);
    }
    big
}

/// Every file under `dir` with its content's hash, sorted (directories by their files).
fn files(dir: &Path) -> Vec<(String, String)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let rel = path.strip_prefix(base).unwrap().display().to_string();
                out.push((rel, quarry_tests::sha256_hex(&std::fs::read(&path).unwrap())));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn artifacts_push_and_fetch_with_windows_paths() {
    let Some(wine) = Wine::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let topology = tmp.path().join("BUILD_TOPOLOGY.toml");
    std::fs::write(&topology, crate::artifacts::TOPOLOGY).unwrap();
    let build = tmp.path().join("build");
    let big = windows_build_tree(&build);
    let staging = tmp.path().join("staging");
    // Backslashes for some flags, forward slashes for others: Windows takes both.
    let (topology, staging_flag) = (win(&topology, false), win(&staging, true));
    let common = ["--topology", &topology, "--local-staging-dir", &staging_flag, "--run-id", "42"];
    let common_without_run = &common[..4];
    for (stage, build_flag) in
        [("foundation", win(&build, false)), ("compiler", win(&build, true)), ("math-libs", win(&build, false))]
    {
        let mut args = vec!["artifacts", "push", "--stage", stage, "--build-dir", &build_flag];
        args.extend(common);
        let out = wine.output(&args).await;
        assert_success(&out, &format!("quarry.exe artifacts push --stage {stage}"));
    }
    // --platform was left out: on Windows the run is `42-windows`.
    assert!(staging.join("42-windows/amd-llvm_lib_generic.tar.zst").is_file(), "{:?}", files(&staging));
    assert!(staging.join("42-windows/blas_lib_gfx1100.tar.zst.sha256sum").is_file());

    let boot = tmp.path().join("B/build");
    std::fs::create_dir_all(boot.join("compiler/amd-llvm/stage/stale")).unwrap();
    let boot_flag = win(&boot, false);
    let mut args = vec![
        "artifacts",
        "fetch",
        "--stage",
        "math-libs",
        "--amdgpu-families",
        "gfx1100",
        "--bootstrap",
        "--output-dir",
    ];
    args.push(&boot_flag);
    args.extend(common);
    let out = wine.output(&args).await;
    assert_success(&out, "quarry.exe artifacts fetch --bootstrap");
    assert!(!boot.join("compiler/amd-llvm/stage/stale").exists(), "bootstrap wiped the root first");
    assert!(boot.join("compiler/amd-llvm/stage.prebuilt").is_file());
    let sources = build.join("artifacts");
    let mut sysdeps = files(&sources.join("sysdeps_lib_generic/third-party/sysdeps/stage"));
    sysdeps.extend(files(&sources.join("sysdeps_dev_generic/third-party/sysdeps/stage")));
    sysdeps.sort();
    assert_eq!(files(&boot.join("third-party/sysdeps/stage")), sysdeps);
    assert_eq!(
        files(&boot.join("compiler/amd-llvm/stage")),
        files(&sources.join("amd-llvm_lib_generic/compiler/amd-llvm/stage"))
    );
    assert_eq!(std::fs::read(boot.join("compiler/amd-llvm/stage/lib/llvm/bin/big.bin")).unwrap(), big);

    // Pushing again replaces every archive in place (rename over an existing file).
    let before = std::fs::read(staging.join("42-windows/sysdeps_lib_generic.tar.zst")).unwrap();
    let build_flag = win(&build, false);
    let mut args = vec!["artifacts", "push", "--stage", "foundation", "--build-dir", &build_flag];
    args.extend(common);
    assert_success(&wine.output(&args).await, "quarry.exe artifacts push again");
    assert_eq!(std::fs::read(staging.join("42-windows/sysdeps_lib_generic.tar.zst")).unwrap(), before);

    links_from_a_linux_archive(&wine, &staging, common_without_run).await;
    hostile_names_are_refused(&wine, &staging, common_without_run).await;
}

/// Run `run` in the staging directory: run 42's archives, with `archive` (and a matching
/// sidecar) as `amd-llvm_lib_generic.tar.zst`; then math-libs' inputs for gfx1100 fetched
/// (bootstrap) from it into a fresh directory.
async fn fetch_staged(
    wine: &Wine,
    staging: &Path,
    common: &[&str],
    run: &str,
    archive: &[u8],
) -> (std::process::Output, tempfile::TempDir) {
    let dir = staging.join(format!("{run}-windows"));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(staging.join("42-windows")).unwrap() {
        let entry = entry.unwrap();
        if !dir.join(entry.file_name()).exists() {
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
    }
    let path = dir.join("amd-llvm_lib_generic.tar.zst");
    std::fs::write(&path, archive).unwrap();
    std::fs::write(path.with_extension("zst.sha256sum"), format!("{}\n", quarry_tests::sha256_hex(archive))).unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let out_flag = win(out_dir.path(), false);
    let mut args = vec!["artifacts", "fetch", "--stage", "math-libs", "--amdgpu-families", "gfx1100", "--bootstrap"];
    args.extend(["--run-id", run, "--output-dir", &out_flag]);
    args.extend(common);
    (wine.output(&args).await, out_dir)
}

/// An archive the Linux build made, fetched on Windows: a hard link becomes a hard link (NTFS
/// has them, and Wine makes real ones: one inode here); a symlink fails the fetch naming the
/// member, as TheRock's `Path.symlink_to` fails without the privilege. Wine's
/// `CreateSymbolicLinkW` reports success without making the link: Quarry notices and refuses
/// rather than dropping it silently.
async fn links_from_a_linux_archive(wine: &Wine, staging: &Path, common: &[&str]) {
    use std::os::unix::fs::MetadataExt as _;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("amd-llvm_lib_generic");
    artifact(tmp.path(), "amd-llvm_lib_generic", "compiler/amd-llvm/stage", &[("bin/amdhip64_7.dll", "MZ hip")]);
    let bin = dir.join("compiler/amd-llvm/stage/bin");
    std::fs::hard_link(bin.join("amdhip64_7.dll"), bin.join("amdhip64.dll")).unwrap();
    let pack = |dir: &Path| {
        let opts = quarry_artifacts::ArchiveOptions::new(quarry_artifacts::ArchiveFormat::Zstd);
        quarry_artifacts::write_archive(dir, Vec::new(), &opts).unwrap().0
    };
    let (out, fetched) = fetch_staged(wine, staging, common, "l1", &pack(&dir)).await;
    assert_success(&out, "quarry.exe artifacts fetch of a Linux archive with a hard link");
    let got = fetched.path().join("compiler/amd-llvm/stage/bin");
    let (a, b) =
        (std::fs::metadata(got.join("amdhip64_7.dll")).unwrap(), std::fs::metadata(got.join("amdhip64.dll")).unwrap());
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "the hard link is a hard link on Windows too");
    assert_eq!(std::fs::read(got.join("amdhip64.dll")).unwrap(), b"MZ hip");

    std::os::unix::fs::symlink("amdhip64_7.dll", bin.join("hip.dll")).unwrap();
    let (out, fetched) = fetch_staged(wine, staging, common, "l2", &pack(&dir)).await;
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("member \"compiler/amd-llvm/stage/bin/hip.dll\": creating the symlink to \"amdhip64_7.dll\"")
            && stderr.contains("Developer Mode"),
        "{stderr}"
    );
    assert!(!fetched.path().join("compiler/amd-llvm/stage/bin/hip.dll").exists());
}

/// Archives in the staging directory, with matching sidecars, that Windows cannot unpack: each
/// refused naming the member, which is never written.
async fn hostile_names_are_refused(wine: &Wine, staging: &Path, common: &[&str]) {
    let members = [
        "compiler/amd-llvm/stage/bin/aux.txt",
        "compiler/amd-llvm/stage/CON",
        "compiler/amd-llvm/stage/lib/NUL.tar",
        "compiler/amd-llvm/stage/COM1.log",
        "compiler/amd-llvm/stage/trailing.",
        "compiler/amd-llvm/stage/trailing ",
        "compiler/amd-llvm/stage/a:b",
        "compiler/amd-llvm/stage/why?",
        "compiler/amd-llvm/stage/Clang.exe",
    ];
    let checks = members.iter().enumerate().map(|(i, member)| async move {
        let hostile = raw_tar_zst(&[
            ("artifact_manifest.txt", b"compiler/amd-llvm/stage\n"),
            ("compiler/amd-llvm/stage/clang.exe", b"MZ"),
            (*member, b"x"),
        ]);
        let (out, fetched) = fetch_staged(wine, staging, common, &format!("h{i}"), &hostile).await;
        let stderr = text(&out.stderr);
        assert!(stderr.contains(&format!("member {member:?} cannot exist on Windows")), "{member:?}: {stderr}");
        assert!(!out.status.success(), "{member:?} was accepted");
        // Members before the refused one may be in place (bootstrap fills the build tree as it
        // reads); the refused member never is, under any spelling Windows might give it.
        let placed = files(fetched.path());
        let stray: Vec<_> =
            placed.iter().filter(|(p, _)| p.contains("amd-llvm") && p != "compiler/amd-llvm/stage/clang.exe").collect();
        assert!(stray.is_empty(), "{member:?}: {stray:?}");
    });
    // Three Windows processes at a time.
    let mut pending: Vec<_> = checks.collect();
    while !pending.is_empty() {
        let batch: Vec<_> = pending.drain(..pending.len().min(3)).collect();
        futures_util::future::join_all(batch).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn upload_from_windows_into_a_linux_server_then_pip_installs() {
    let Some(wine) = Wine::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let token_file = tmp.path().join("token");
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store"]).arg(&store).arg("--token-file").arg(&token_file);
    cmd.stderr(Stdio::null());
    let served = ServedBinary::start(cmd).await;

    let dist = tmp.path().join("dist");
    std::fs::create_dir_all(&dist).unwrap();
    let specs = [WheelSpec::new("win-demo", "1.0"), WheelSpec::new("win-demo", "1.1")];
    // One file spelled with `\`, the other with `/`.
    let wheels: Vec<String> = specs.iter().enumerate().map(|(i, spec)| win(&spec.write_to(&dist), i == 1)).collect();
    let to = format!("{}4242-windows/python/", served.url);
    let token_flag = win(&token_file, false);
    let mut args = vec!["upload", "--json", "--to", &to, "--token-file", &token_flag];
    args.extend(wheels.iter().map(String::as_str));
    let out = wine.output(&args).await;
    assert_success(&out, "quarry.exe upload");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(summary["files"].as_array().map(Vec::len), Some(2), "{summary}");
    let find_links = summary["find_links_url"].as_str().expect("find_links_url").to_owned();

    let target = tmp.path().join("site");
    let out = pip_install(&["--no-index", "--find-links", &find_links, "win-demo"], &target).await;
    assert_success(&out, "Linux pip install from what quarry.exe uploaded");
    assert_eq!(installed(&target), ["win_demo-1.1.dist-info"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn windows_serve_takes_uploads_and_serves_linux_pip() {
    let Some(wine) = Wine::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let token_file = tmp.path().join("token");
    let mut cmd = wine.quarry();
    cmd.args([
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--store",
        &win(&store, false),
        "--token-file",
        &win(&token_file, true),
    ]);
    cmd.stderr(Stdio::null());
    let served = ServedBinary::start(cmd).await;
    let token = std::fs::read_to_string(&token_file).expect("quarry.exe serve wrote a token file");
    assert_eq!(token.trim().len(), 48, "a random token (getrandom over ProcessPrng): {token:?}");

    // A wheel is immutable: the same name with other bytes is refused, while a reader of the
    // first still gets it whole.
    let client = reqwest::Client::new();
    let key = format!("{}7-windows/python/win_demo-2.0-py3-none-any.whl", served.url);
    let put = |body: Vec<u8>| client.put(&key).bearer_auth(token.trim()).body(body).send();
    let first = WheelSpec::new("win-demo", "2.0").build();
    assert!(put(first.clone()).await.unwrap().status().is_success());
    let reading = client.get(&key).send().await.unwrap();
    let other = WheelSpec::new("win-demo", "2.0").requires_python(">=3.8").build();
    let refused = put(other).await.unwrap();
    assert_eq!(refused.status().as_u16(), 409);
    assert!(refused.text().await.unwrap().contains("immutable"));
    assert!(put(first.clone()).await.unwrap().status().is_success(), "the same bytes again are fine");
    assert_eq!(reading.bytes().await.unwrap().as_ref(), first.as_slice(), "a reader sees the object it opened whole");

    // Concurrent uploads of distinct wheels: the store's lock (LockFileEx) serializes commits.
    let uploads = (0..6).map(|i| {
        let spec = WheelSpec::new("win-many", &format!("1.{i}"));
        let url = format!("{}7-windows/python/{}", served.url, spec.filename());
        let client = client.clone();
        let token = token.trim().to_owned();
        async move { client.put(url).bearer_auth(token).body(spec.build()).send().await.unwrap().status() }
    });
    for status in futures_util::future::join_all(uploads).await {
        assert!(status.is_success(), "{status}");
    }

    let target = tmp.path().join("site");
    let find_links = format!("{}7-windows/python/index.html", served.url);
    let out = pip_install(&["--no-index", "--find-links", &find_links, "win-many", "win-demo"], &target).await;
    assert_success(&out, "Linux pip install from quarry.exe serve");
    assert_eq!(installed(&target), ["win_demo-2.0.dist-info", "win_many-1.5.dist-info"]);
}
