//! `quarry package python` over a TheRock-like artifact tree whose libraries are real ELF
//! shared objects (built here with `cc`, with sonames and a NEEDED edge): the kpack set of
//! distributions, byte-identical across runs and between artifact directories and `.tar.zst`
//! archives of them; then pip installs `rocm[libraries,device-…,devel]` from the files into a
//! fresh virtualenv (the sdist built by setuptools, offline), `rocm-sdk test` loads every library,
//! `rocm-sdk path` unpacks the devel tree, a console script runs, and `pip uninstall` removes
//! what `rocm-sdk init` added. Hostile archives are refused with nothing written.

use std::path::{Path, PathBuf};
use std::time::Duration;

use quarry_artifacts::{ArchiveFormat, ArchiveOptions, ArtifactName, write_archive};
use quarry_tests::native::{artifact, raw_tar_zst};
use quarry_tests::{assert_success, quarry_bin, run, venv_dir};

const VERSION: &str = "7.1.0";

/// A shared library `lib/{file}` with `soname`, built from `code`, linked against `needs`.
async fn shared_object(dir: &Path, file: &str, soname: &str, code: &str, needs: &[&Path]) {
    std::fs::create_dir_all(dir).unwrap();
    let src = dir.join(format!("{file}.c"));
    std::fs::write(&src, code).unwrap();
    let mut cmd = tokio::process::Command::new("cc");
    cmd.args(["-shared", "-fPIC", "-o"]).arg(dir.join(file)).arg(&src).arg(format!("-Wl,-soname,{soname}"));
    for lib in needs {
        cmd.arg(lib);
    }
    assert_success(&run(cmd, Duration::from_secs(60)).await, "cc");
    std::fs::remove_file(src).unwrap();
}

pub(crate) async fn tree(root: &Path) {
    let hip = root.join("core-hip_lib_generic/core/clr/stage/lib");
    artifact(root, "core-hip_lib_generic", "core/clr/stage", &[]);
    shared_object(&hip, "libamdhip64.so.7.1.0", "libamdhip64.so.7", "int hipGetVersion(void) { return 70100; }\n", &[])
        .await;
    std::os::unix::fs::symlink("libamdhip64.so.7.1.0", hip.join("libamdhip64.so.7")).unwrap();
    std::os::unix::fs::symlink("libamdhip64.so.7", hip.join("libamdhip64.so")).unwrap();
    std::os::unix::fs::symlink("nowhere", hip.join("dangling.so")).unwrap();
    artifact(
        root,
        "core-hip_dev_generic",
        "core/clr/stage",
        &[("include/hip/hip_runtime.h", "#pragma once\n"), ("lib/cmake/hip/hip-config.cmake", "set(HIP_FOUND TRUE)\n")],
    );
    artifact(
        root,
        "base_run_generic",
        "base/stage",
        &[
            ("bin/hipconfig", "#!/bin/sh\necho \"HIP version: 7.1\"\n"),
            ("share/therock/dist_info.json", "{\"dist_amdgpu_targets\": \"gfx1100;gfx942\"}\n"),
            ("share/therock/therock_manifest.json", "{\"flags\": {\"KPACK_SPLIT_ARTIFACTS\": true}}\n"),
        ],
    );
    let exe = root.join("base_run_generic/base/stage/bin/hipconfig");
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let fft = root.join("fft_lib_generic/math-libs/rocFFT/stage/lib");
    artifact(root, "fft_lib_generic", "math-libs/rocFFT/stage", &[]);
    shared_object(
        &fft,
        "librocfft.so.0.1",
        "librocfft.so.0",
        "int hipGetVersion(void);\nint rocfft_version(void) { return hipGetVersion(); }\n",
        &[&hip.join("libamdhip64.so.7.1.0")],
    )
    .await;
    std::os::unix::fs::symlink("librocfft.so.0.1", fft.join("librocfft.so.0")).unwrap();
    std::os::unix::fs::symlink("librocfft.so.0", fft.join("librocfft.so")).unwrap();
    artifact(
        root,
        "fft_dev_generic",
        "math-libs/rocFFT/stage",
        &[
            ("include/rocfft/rocfft.h", "int rocfft_version(void);\n"),
            ("lib/cmake/rocfft/rocfft-config.cmake", "set(rocfft_FOUND TRUE)\n"),
            ("lib/librocfft.so", "->librocfft.so.0"),
        ],
    );
    artifact(root, "fft_test_generic", "math-libs/rocFFT/stage", &[("bin/rocfft-test", "#!/bin/sh\n")]);
    for gfx in ["gfx1100", "gfx942"] {
        let file = format!("lib/rocfft/{gfx}.kpack");
        let code = format!("{gfx} kernels");
        artifact(root, &format!("fft_lib_{gfx}"), "math-libs/rocFFT/stage", &[(&file, &code)]);
    }
}

pub(crate) async fn package(artifacts: &Path, dest: &Path, extra: &[&str]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["package", "python", "--json", "--artifact-dir"])
        .arg(artifacts)
        .arg("--dest-dir")
        .arg(dest)
        .args(["--rocm-version", VERSION])
        .args(extra)
        .env("SOURCE_DATE_EPOCH", "1795000000")
        .env("ROCM_SDK_WHEEL_PLATFORM_TAG", "linux-x86_64");
    run(cmd, Duration::from_secs(300)).await
}

pub(crate) fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    out
}

fn zip_names(path: &Path) -> Vec<String> {
    let zip = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut names: Vec<String> = zip.file_names().map(|n| n.unwrap().into_owned()).collect();
    names.sort();
    names
}

async fn python(venv: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(venv.join("bin/python"));
    cmd.args(args).env_remove("PIP_FIND_LINKS").env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(cmd, Duration::from_secs(300)).await
}

async fn fresh_venv(dir: &Path) -> PathBuf {
    let mut cmd = tokio::process::Command::new(venv_dir().join("bin/python"));
    cmd.args(["-m", "venv", "--without-pip"]).arg(dir);
    assert_success(&run(cmd, Duration::from_secs(120)).await, "python -m venv");
    dir.to_path_buf()
}

/// pip from the test virtualenv installing into `venv` with no index: our files and the
/// setuptools wheel `scripts/test` keeps in the test virtualenv's wheelhouse.
async fn pip_install(venv: &Path, dist: &Path, reqs: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(venv_dir().join("bin/python"));
    cmd.args(["-m", "pip", "--python"])
        .arg(venv.join("bin/python"))
        .args(["install", "--no-index", "--find-links"])
        .arg(dist)
        .arg("--find-links")
        .arg(venv_dir().join("wheelhouse"))
        .args(reqs)
        .env_remove("PIP_FIND_LINKS")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run(cmd, Duration::from_secs(600)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn rocm_sdk_wheels_build_reproducibly_and_install_with_pip() {
    let tmp = tempfile::tempdir().unwrap();
    let artifacts = tmp.path().join("artifacts");
    tree(&artifacts).await;

    let dist = tmp.path().join("dist");
    let out = package(&artifacts, &dist, &[]).await;
    assert_success(&out, "quarry package python");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["targets"], serde_json::json!(["gfx1100", "gfx942"]), "kpack from therock_manifest.json");
    let names: Vec<String> = files(&dist).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "rocm-7.1.0.tar.gz",
            "rocm_sdk_core-7.1.0-py3-none-linux_x86_64.whl",
            "rocm_sdk_devel-7.1.0-py3-none-linux_x86_64.whl",
            "rocm_sdk_device_gfx1100-7.1.0-py3-none-linux_x86_64.whl",
            "rocm_sdk_device_gfx942-7.1.0-py3-none-linux_x86_64.whl",
            "rocm_sdk_libraries-7.1.0-py3-none-linux_x86_64.whl",
        ]
    );
    // Only soname-named libraries in the runtime wheels; dangling links dropped.
    let core = zip_names(&dist.join("rocm_sdk_core-7.1.0-py3-none-linux_x86_64.whl"));
    assert!(core.contains(&"_rocm_sdk_core/lib/libamdhip64.so.7".to_owned()), "{core:?}");
    assert!(core.contains(&"_rocm_sdk_core/include/hip/hip_runtime.h".to_owned()), "core-hip dev goes into core");
    assert!(!core.iter().any(|n| n.ends_with("libamdhip64.so") || n.ends_with(".so.7.1.0") || n.contains("dangling")));
    assert!(!core.iter().any(|n| n.contains("/cmake/")), "cmake files stay out of core: {core:?}");
    let device = zip_names(&dist.join("rocm_sdk_device_gfx942-7.1.0-py3-none-linux_x86_64.whl"));
    assert!(device.contains(&"_rocm_sdk_libraries/lib/rocfft/gfx942.kpack".to_owned()), "{device:?}");
    assert!(device.contains(&"_rocm_sdk_libraries/.devel_links/gfx942.json".to_owned()));

    // Twice, and from .tar.zst archives of the same artifacts: the same bytes.
    let again = tmp.path().join("again");
    assert_success(&package(&artifacts, &again, &[]).await, "second run");
    let archives = tmp.path().join("archives");
    std::fs::create_dir_all(&archives).unwrap();
    for entry in std::fs::read_dir(&artifacts).unwrap() {
        let dir = entry.unwrap().path();
        let name = ArtifactName::parse_dir(&dir.file_name().unwrap().to_string_lossy()).unwrap();
        let file = std::fs::File::create(archives.join(name.archive_name(ArchiveFormat::Zstd))).unwrap();
        write_archive(&dir, file, &ArchiveOptions::new(ArchiveFormat::Zstd)).unwrap();
    }
    let from_archives = tmp.path().join("from-archives");
    assert_success(&package(&archives, &from_archives, &[]).await, "from archives");
    assert!(files(&dist) == files(&again), "a second run wrote different bytes");
    assert!(files(&dist) == files(&from_archives), "archives and directories gave different packages");

    // A fresh virtualenv: the sdist picks the pins, pip resolves the wheels.
    let venv = fresh_venv(&tmp.path().join("venv")).await;
    let out = pip_install(&venv, &dist, &["rocm[libraries,device-gfx942,devel]==7.1.0"], &[]).await;
    assert_success(&out, "pip install rocm[libraries,device-gfx942,devel]");
    let bin = venv.join("bin");
    let rocm_sdk = |args: &'static [&'static str]| {
        let mut cmd = tokio::process::Command::new(bin.join("rocm-sdk"));
        cmd.args(args);
        run(cmd, Duration::from_secs(120))
    };
    let version = rocm_sdk(&["version"]).await;
    assert_success(&version, "rocm-sdk version");
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), VERSION);
    let targets = rocm_sdk(&["targets"]).await;
    assert_eq!(String::from_utf8_lossy(&targets.stdout).trim(), "gfx1100;gfx942");
    let test = rocm_sdk(&["test"]).await;
    assert_success(&test, "rocm-sdk test");
    let report = String::from_utf8_lossy(&test.stdout);
    assert!(report.contains("2 of 2 libraries load"), "{report}");
    assert!(report.contains("rocm-sdk-device-gfx942: ok"), "{report}");

    let load = python(
        &venv,
        &[
            "-c",
            "import ctypes, rocm_sdk\n\
             rocm_sdk.initialize_process(preload_shortnames=['amdhip64', 'rocfft'], check_version='7.1.*')\n\
             print(rocm_sdk.preload_libraries('rocfft')[0].rocfft_version())",
        ],
        &[],
    )
    .await;
    assert_success(&load, "initialize_process");
    assert_eq!(String::from_utf8_lossy(&load.stdout).trim(), "70100", "librocfft called into libamdhip64");

    // The devel tree: unpacked on first use, links into the runtime packages.
    let cmake = rocm_sdk(&["path", "--cmake"]).await;
    assert_success(&cmake, "rocm-sdk path --cmake");
    let cmake = PathBuf::from(String::from_utf8_lossy(&cmake.stdout).trim());
    assert!(cmake.join("hip/hip-config.cmake").is_file() && cmake.join("rocfft/rocfft-config.cmake").is_file());
    let devel = cmake.parent().unwrap().parent().unwrap().to_path_buf();
    assert_eq!(devel.file_name().unwrap(), "_rocm_sdk_devel");
    assert_eq!(
        std::fs::read_link(devel.join("lib/libamdhip64.so.7")).unwrap(),
        Path::new("../../_rocm_sdk_core/lib/libamdhip64.so.7")
    );
    assert_eq!(std::fs::read_link(devel.join("lib/libamdhip64.so")).unwrap(), Path::new("libamdhip64.so.7"));
    assert!(devel.join("lib/librocfft.so").canonicalize().unwrap().ends_with("_rocm_sdk_libraries/lib/librocfft.so.0"));
    assert!(!devel.join("bin/rocfft-test").exists(), "kpack devel leaves test components out");
    let mut hipconfig = tokio::process::Command::new(bin.join("hipconfig"));
    hipconfig.arg("--version");
    let out = run(hipconfig, Duration::from_secs(60)).await;
    assert_success(&out, "hipconfig console script");
    assert!(String::from_utf8_lossy(&out.stdout).contains("HIP version: 7.1"));

    let out = pip_uninstall(&venv, "rocm-sdk-devel").await;
    assert_success(&out, "pip uninstall rocm-sdk-devel");
    let mut left: Vec<PathBuf> = walk(&devel);
    left.extend(walk(&devel.with_file_name("rocm_sdk_devel")));
    assert!(left.is_empty(), "pip uninstall left {left:?}");

    // `device` resolves to the installing machine's target.
    let venv2 = fresh_venv(&tmp.path().join("venv2")).await;
    let out = pip_install(&venv2, &dist, &["rocm[device]"], &[("ROCM_SDK_TARGET_FAMILY", "gfx1100")]).await;
    assert_success(&out, "pip install rocm[device] for gfx1100");
    let mut cmd = tokio::process::Command::new(venv_dir().join("bin/python"));
    cmd.args(["-m", "pip", "--python"]).arg(venv2.join("bin/python")).args(["list", "--format", "freeze"]);
    let list = run(cmd, Duration::from_secs(120)).await;
    assert_success(&list, "pip list");
    let list = String::from_utf8_lossy(&list.stdout).to_lowercase();
    assert!(list.contains("rocm-sdk-device-gfx1100==7.1.0") && !list.contains("gfx942"), "{list}");
}

/// Every path under `dir` (none when it does not exist).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.is_symlink() {
            out.extend(walk(&path));
        }
        out.push(path);
    }
    out
}

async fn pip_uninstall(venv: &Path, dist: &str) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(venv_dir().join("bin/python"));
    cmd.args(["-m", "pip", "--python"]).arg(venv.join("bin/python")).args(["uninstall", "-y", dist]);
    run(cmd, Duration::from_secs(120)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_artifact_archives_are_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let archives = tmp.path().join("archives");
    std::fs::create_dir_all(&archives).unwrap();
    // A valid-looking archive whose member climbs out of its root.
    let hostile = raw_tar_zst(&[("artifact_manifest.txt", b"base/stage\n"), ("base/stage/../../../../evil", b"x")]);
    std::fs::write(archives.join("base_run_generic.tar.zst"), hostile).unwrap();
    let dest = tmp.path().join("out/dist");
    for kind in ["python", "deb"] {
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["package", kind, "--artifacts-dir"])
            .arg(&archives)
            .arg("--dest-dir")
            .arg(&dest)
            .args(["--rocm-version", VERSION]);
        let out = run(cmd, Duration::from_secs(120)).await;
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("base_run_generic.tar.zst") && err.contains("`..`"), "{kind}: {err}");
        assert!(std::fs::read_dir(&dest).unwrap().next().is_none(), "{kind}: the destination stays empty");
    }
    let mut left: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(tmp.path()).unwrap() {
        left.push(entry.unwrap().file_name().to_string_lossy().into_owned());
    }
    left.sort();
    assert_eq!(left, ["archives", "out"], "nothing written outside the destination");
}
