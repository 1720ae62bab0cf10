//! `win_amd64` rocm-sdk wheels from Windows artifacts: real PE DLLs built here with mingw-w64
//! (`amdhip64_7.dll`, and `rocfft.dll` importing it through `amdhip64.lib`), placed as
//! TheRock's Windows artifacts hold them (`bin/*.dll` in `lib` components, import libraries
//! `lib/*.lib` in `dev` components, no sonames), packed as `.tar.zst` archives.
//!
//! - `quarry package python` on Linux and `quarry.exe package python` under Wine over the same
//!   archives build the same files, byte for byte, tagged `win_amd64` (from the DLLs' PE
//!   headers: no `ROCM_SDK_WHEEL_PLATFORM_TAG`), with the DLLs in each package's `bin/`.
//! - Linux pip installs them for Windows (`--platform win_amd64 --target`), and a Windows
//!   program (built with mingw-w64, run under Wine) loads `rocfft.dll` from the installed
//!   libraries package the way `rocm_sdk` does on Windows: `AddDllDirectory` of the core
//!   package's `bin` (what `os.add_dll_directory` calls) then `LoadLibraryExW` with the default
//!   search directories (what `ctypes.CDLL` does since Python 3.8). Without the directory the
//!   load fails: the placement is what makes it work. No Windows CPython runs here, so
//!   `rocm_sdk`'s Windows path (which DLLs, which directories) is run by Linux Python over the
//!   Windows install with `os.add_dll_directory` recorded; the call itself is the Wine load.
//! - `quarry.exe upload` puts them, with Linux-tagged builds of the same artifacts, into a
//!   Linux `quarry serve`; Linux `pip download --platform win_amd64 --only-binary=:all:`
//!   resolves exactly the Windows wheels from the run's index. The `rocm` meta distribution is
//!   an sdist by design (its `device` extra is decided on the installing machine), and pip
//!   refuses sdists whenever `--platform` is given, so the download resolves what
//!   `rocm[libraries]` requires in the kpack layout (`rocm-sdk-core`, `rocm-sdk-libraries`),
//!   plus the device wheel of one target. uv resolves `rocm[libraries]` itself for Windows
//!   (`uv pip install --python-platform x86_64-pc-windows-msvc --target`, the sdist's metadata
//!   built here) from the same index and installs exactly the `win_amd64` wheels.

use std::path::{Path, PathBuf};
use std::time::Duration;

use quarry_artifacts::{ArchiveFormat, ArchiveOptions, ArtifactName, write_archive};
use quarry_tests::native::artifact;
use quarry_tests::{ServedBinary, assert_success, quarry_bin, run, uv_pip, venv_dir};

use super::{Wine, text, win};
use crate::wheels::files;

const VERSION: &str = "7.1.0";

const HIP: &str = "__declspec(dllexport) int hipGetVersion(void) { return 70100; }\n";
const FFT: &str = "__declspec(dllimport) int hipGetVersion(void);\n\
                   __declspec(dllexport) int rocfft_version(void) { return hipGetVersion(); }\n";
/// Loads `argv[2]` with `argv[1]` (when not `-`) added as a DLL directory, as `rocm_sdk` does on
/// Windows, and prints what `rocfft_version` returns.
const LOADER: &str = r#"#include <windows.h>
#include <stdio.h>
int wmain(int argc, wchar_t **argv) {
    if (argc != 3) return 2;
    if (wcscmp(argv[1], L"-") != 0 && !AddDllDirectory(argv[1])) { printf("AddDllDirectory failed\n"); return 3; }
    HMODULE lib = LoadLibraryExW(argv[2], NULL, LOAD_LIBRARY_SEARCH_DEFAULT_DIRS | LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR);
    if (!lib) { printf("LoadLibraryExW failed: %lu\n", GetLastError()); return 4; }
    int (*version)(void) = (int (*)(void))GetProcAddress(lib, "rocfft_version");
    if (!version) { printf("no rocfft_version\n"); return 5; }
    printf("rocfft_version=%d\n", version());
    return 0;
}
"#;

async fn mingw(args: &[&std::ffi::OsStr]) {
    let mut cmd = tokio::process::Command::new("x86_64-w64-mingw32-gcc");
    cmd.args(args);
    assert_success(&run(cmd, Duration::from_secs(60)).await, "x86_64-w64-mingw32-gcc");
}

/// `dll` built from `code` (linked with `with`), its import library written to `implib`.
async fn dll(dir: &Path, dll: &Path, implib: &Path, code: &str, with: &[&Path]) {
    let src = dir.join(format!("{}.c", dll.file_stem().unwrap().to_string_lossy()));
    std::fs::write(&src, code).unwrap();
    std::fs::create_dir_all(dll.parent().unwrap()).unwrap();
    std::fs::create_dir_all(implib.parent().unwrap()).unwrap();
    let implib_flag = format!("-Wl,--out-implib,{}", implib.display());
    let mut args: Vec<&std::ffi::OsStr> = vec!["-shared".as_ref(), "-s".as_ref(), "-o".as_ref(), dll.as_os_str()];
    args.extend([src.as_os_str(), implib_flag.as_ref()]);
    args.extend(with.iter().map(|p| p.as_os_str()));
    mingw(&args).await;
}

/// TheRock-like Windows artifacts (kpack layout, one target) as `.tar.zst` archives in `archives`.
async fn windows_artifacts(tmp: &Path) -> PathBuf {
    let root = tmp.join("artifacts");
    let src = tmp.join("src");
    std::fs::create_dir_all(&src).unwrap();
    artifact(&root, "core-hip_lib_generic", "core/clr/stage", &[]);
    artifact(&root, "core-hip_dev_generic", "core/clr/stage", &[("include/hip/hip_runtime.h", "#pragma once\n")]);
    let hip_dll = root.join("core-hip_lib_generic/core/clr/stage/bin/amdhip64_7.dll");
    let hip_lib = root.join("core-hip_dev_generic/core/clr/stage/lib/amdhip64.lib");
    dll(&src, &hip_dll, &hip_lib, HIP, &[]).await;
    artifact(
        &root,
        "base_run_generic",
        "base/stage",
        &[
            ("share/therock/dist_info.json", "{\"dist_amdgpu_targets\": \"gfx1100\"}\n"),
            ("share/therock/therock_manifest.json", "{\"flags\": {\"KPACK_SPLIT_ARTIFACTS\": true}}\n"),
        ],
    );
    artifact(&root, "fft_lib_generic", "math-libs/rocFFT/stage", &[]);
    artifact(
        &root,
        "fft_dev_generic",
        "math-libs/rocFFT/stage",
        &[("include/rocfft/rocfft.h", "int rocfft_version(void);\n")],
    );
    // Host modes a Windows host does not have (the devel tarball takes Windows' own: 644, 755).
    let header = root.join("fft_dev_generic/math-libs/rocFFT/stage/include/rocfft");
    std::fs::set_permissions(header.join("rocfft.h"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&header, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let fft_dll = root.join("fft_lib_generic/math-libs/rocFFT/stage/bin/rocfft.dll");
    let fft_lib = root.join("fft_dev_generic/math-libs/rocFFT/stage/lib/rocfft.lib");
    dll(&src, &fft_dll, &fft_lib, FFT, &[&hip_lib]).await;
    artifact(&root, "fft_lib_gfx1100", "math-libs/rocFFT/stage", &[("lib/rocfft/gfx1100.kpack", "gfx1100 kernels")]);

    let archives = tmp.join("archives");
    std::fs::create_dir_all(&archives).unwrap();
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let name = ArtifactName::parse_dir(&dir.file_name().unwrap().to_string_lossy()).unwrap();
        let file = std::fs::File::create(archives.join(name.archive_name(ArchiveFormat::Zstd))).unwrap();
        write_archive(&dir, file, &ArchiveOptions::new(ArchiveFormat::Zstd)).unwrap();
    }
    archives
}

fn package_env(cmd: &mut tokio::process::Command) {
    cmd.env("SOURCE_DATE_EPOCH", "1795000000").env_remove("ROCM_SDK_WHEEL_PLATFORM_TAG").env_remove("GITHUB_RUN_ID");
}

fn zip_names(path: &Path) -> Vec<String> {
    let zip = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    zip.file_names().map(|n| n.unwrap().into_owned()).collect()
}

const WINDOWS_FILES: [&str; 5] = [
    "rocm-7.1.0.tar.gz",
    "rocm_sdk_core-7.1.0-py3-none-win_amd64.whl",
    "rocm_sdk_devel-7.1.0-py3-none-win_amd64.whl",
    "rocm_sdk_device_gfx1100-7.1.0-py3-none-win_amd64.whl",
    "rocm_sdk_libraries-7.1.0-py3-none-win_amd64.whl",
];

#[tokio::test(flavor = "multi_thread")]
async fn win_amd64_wheels_from_dll_fixtures_on_linux_and_windows() {
    let Some(wine) = Wine::new() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let archives = windows_artifacts(tmp.path()).await;

    // Linux host.
    let linux_dist = tmp.path().join("dist-linux");
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["package", "python", "--json", "--artifact-dir"]).arg(&archives).arg("--dest-dir").arg(&linux_dist);
    cmd.args(["--rocm-version", VERSION]);
    package_env(&mut cmd);
    assert_success(&run(cmd, Duration::from_secs(120)).await, "quarry package python (Linux, Windows artifacts)");
    let linux = files(&linux_dist);
    assert_eq!(linux.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), WINDOWS_FILES);
    let core = zip_names(&linux_dist.join(WINDOWS_FILES[1]));
    assert!(core.contains(&"_rocm_sdk_core/bin/amdhip64_7.dll".to_owned()), "{core:?}");
    let libraries = zip_names(&linux_dist.join(WINDOWS_FILES[4]));
    assert!(libraries.contains(&"_rocm_sdk_libraries/bin/rocfft.dll".to_owned()), "{libraries:?}");
    let wheel = std::io::read_to_string(
        zip::ZipArchive::new(std::fs::File::open(linux_dist.join(WINDOWS_FILES[1])).unwrap())
            .unwrap()
            .by_name("rocm_sdk_core-7.1.0.dist-info/WHEEL")
            .unwrap(),
    )
    .unwrap();
    assert!(wheel.contains("Tag: py3-none-win_amd64\n"), "{wheel}");

    // Windows host, the same archives: the same files, byte for byte.
    let windows_dist = tmp.path().join("dist-windows");
    let mut cmd = wine.quarry();
    cmd.args(["package", "python", "--json", "--artifact-dir", &win(&archives, false), "--dest-dir"]);
    cmd.args([&win(&windows_dist, false), "--rocm-version", VERSION]);
    package_env(&mut cmd);
    let out = run(cmd, Duration::from_secs(180)).await;
    assert_success(&out, "quarry.exe package python");
    let windows = files(&windows_dist);
    let names = |v: &[(String, Vec<u8>)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&windows), names(&linux));
    for ((name, a), (_, b)) in linux.iter().zip(&windows) {
        assert!(a == b, "{name} differs between the Linux and the Windows build");
    }

    dlls_load_from_the_installed_wheels(&wine, tmp.path(), &linux_dist).await;
    upload_and_resolve(&wine, tmp.path(), &archives, &linux_dist).await;
}

/// pip installs the core and libraries wheels for Windows; a Windows program loads
/// `rocfft.dll` from the libraries package with the core package's `bin` added.
async fn dlls_load_from_the_installed_wheels(wine: &Wine, tmp: &Path, dist: &Path) {
    let site = tmp.join("site");
    let mut cmd = tokio::process::Command::new(venv_dir().join("bin/pip"));
    cmd.args(["install", "--disable-pip-version-check", "--no-index", "--only-binary=:all:"])
        .args(["--platform", "win_amd64", "--python-version", "3.12", "--implementation", "cp", "--target"])
        .arg(&site)
        .arg("--find-links")
        .arg(dist)
        .args([format!("rocm-sdk-core=={VERSION}"), format!("rocm-sdk-libraries=={VERSION}")])
        .env_remove("PIP_FIND_LINKS");
    assert_success(&run(cmd, Duration::from_secs(120)).await, "pip install --platform win_amd64");
    assert!(site.join("_rocm_sdk_core/bin/amdhip64_7.dll").is_file());

    let loader = tmp.join("loader.exe");
    let src = tmp.join("loader.c");
    std::fs::write(&src, LOADER).unwrap();
    mingw(&["-municode".as_ref(), "-s".as_ref(), "-o".as_ref(), loader.as_os_str(), src.as_os_str()]).await;
    let rocfft = win(&site.join("_rocm_sdk_libraries/bin/rocfft.dll"), false);
    let load = |dir: String| {
        let mut cmd = tokio::process::Command::new(&wine.wine);
        cmd.arg(&loader).args([dir, rocfft.clone()]);
        wine.env(&mut cmd);
        run(cmd, Duration::from_secs(60))
    };
    let out = load(win(&site.join("_rocm_sdk_core/bin"), false)).await;
    assert_success(&out, "loading rocfft.dll with the core package's bin as a DLL directory");
    assert_eq!(text(&out.stdout).trim(), "rocfft_version=70100");
    let out = load("-".to_owned()).await;
    assert!(!out.status.success(), "rocfft.dll loaded without amdhip64_7.dll's directory: {}", text(&out.stdout));
    assert!(text(&out.stdout).contains("LoadLibraryExW failed: 126"), "{}", text(&out.stdout));
}

/// `quarry.exe upload` of the Windows wheels and Linux-tagged builds of the same artifacts
/// into a Linux `quarry serve`; `pip download --platform win_amd64` takes only the Windows ones.
async fn upload_and_resolve(wine: &Wine, tmp: &Path, archives: &Path, windows_dist: &Path) {
    let linux_tagged = tmp.join("dist-linux-tagged");
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["package", "python", "--artifact-dir"]).arg(archives).arg("--dest-dir").arg(&linux_tagged);
    cmd.args(["--rocm-version", VERSION]);
    package_env(&mut cmd);
    cmd.env("ROCM_SDK_WHEEL_PLATFORM_TAG", "linux_x86_64");
    assert_success(&run(cmd, Duration::from_secs(120)).await, "quarry package python (linux_x86_64 tag)");

    let store = tmp.join("store");
    let token_file = tmp.join("token");
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["serve", "--addr", "127.0.0.1:0", "--store"]).arg(&store).arg("--token-file").arg(&token_file);
    cmd.stderr(std::process::Stdio::null());
    let served = ServedBinary::start(cmd).await;
    let to = format!("{}77-windows/python/", served.url);
    let token_flag = win(&token_file, false);
    for dist in [windows_dist, linux_tagged.as_path()] {
        let mut args = vec!["upload".to_owned(), "--json".to_owned(), "--to".to_owned(), to.clone()];
        args.extend(["--token-file".to_owned(), token_flag.clone()]);
        // The `rocm` sdist once (the same for both platforms), every wheel.
        let wanted = |n: &str| n.ends_with(".whl") || (dist == windows_dist && n.ends_with(".tar.gz"));
        args.extend(files(dist).into_iter().filter(|(n, _)| wanted(n)).map(|(n, _)| win(&dist.join(n), false)));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_success(&wine.output(&args).await, "quarry.exe upload");
    }

    let dest = tmp.join("downloaded");
    let mut cmd = tokio::process::Command::new(venv_dir().join("bin/pip"));
    cmd.args(["download", "--disable-pip-version-check", "--no-index", "--only-binary=:all:"])
        .args(["--platform", "win_amd64", "--python-version", "3.12", "--implementation", "cp", "--dest"])
        .arg(&dest)
        .args(["--find-links", &format!("{to}index.html")])
        .args([
            format!("rocm-sdk-core=={VERSION}"),
            format!("rocm-sdk-libraries=={VERSION}"),
            format!("rocm-sdk-device-gfx1100=={VERSION}"),
        ])
        .env_remove("PIP_FIND_LINKS");
    let out = run(cmd, Duration::from_secs(120)).await;
    assert_success(&out, "pip download --platform win_amd64");
    let got: Vec<String> = files(&dest).into_iter().map(|(n, _)| n).collect();
    assert_eq!(got, [WINDOWS_FILES[1], WINDOWS_FILES[3], WINDOWS_FILES[4]], "{}", text(&out.stdout));

    // uv resolves `rocm[libraries]` itself for Windows (`--python-platform`: it builds the sdist's
    // metadata here, offline with the wheelhouse's setuptools) and installs the Windows wheels.
    let site = tmp.join("site-uv");
    let wheelhouse = venv_dir().join("wheelhouse").display().to_string();
    let args = ["--python-platform", "x86_64-pc-windows-msvc", "--no-index", "--find-links"];
    let index = format!("{to}index.html");
    let requirement = format!("rocm[libraries]=={VERSION}");
    let out =
        uv_pip("install", &[&args[..], &[&index, "--find-links", &wheelhouse, &requirement]].concat(), Some(&site))
            .await;
    assert_success(&out, "uv pip install --python-platform windows rocm[libraries]");
    let mut tags = Vec::new();
    for entry in std::fs::read_dir(&site).unwrap() {
        let path = entry.unwrap().path();
        if let Ok(wheel) = std::fs::read_to_string(path.join("WHEEL")) {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let tag = wheel.lines().find_map(|l| l.strip_prefix("Tag: ")).unwrap_or("").to_owned();
            tags.push((name, tag));
        }
    }
    tags.sort();
    let tags: Vec<(&str, &str)> = tags.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    assert_eq!(
        tags,
        [
            ("rocm-7.1.0.dist-info", "py3-none-any"),
            ("rocm_sdk_core-7.1.0.dist-info", "py3-none-win_amd64"),
            ("rocm_sdk_libraries-7.1.0.dist-info", "py3-none-win_amd64"),
        ],
        "{}",
        text(&out.stderr)
    );
    rocm_sdk_finds_the_dlls(&site).await;
}

/// `rocm_sdk`'s Windows path, run by Linux Python over what uv installed for Windows: with
/// `_WINDOWS` set and `os.add_dll_directory` recorded (the call itself is what the Wine load
/// above proves), `find_libraries` finds `bin/{name}*.dll` and `add_dll_directories` adds the
/// `bin` of every installed package, once.
async fn rocm_sdk_finds_the_dlls(site: &Path) {
    let script = r#"
import json, os, sys
added = []
os.add_dll_directory = lambda path: added.append(path) or path
import rocm_sdk
rocm_sdk._WINDOWS = True
found = rocm_sdk.find_libraries("amdhip64", "rocfft")
rocm_sdk.add_dll_directories()
root = sys.argv[1]
print(json.dumps({"found": [os.path.relpath(p, root) for p in found], "added": [os.path.relpath(p, root) for p in added]}))
"#;
    let mut cmd = tokio::process::Command::new(venv_dir().join("bin/python"));
    cmd.arg("-c").arg(script).arg(site).env("PYTHONPATH", site);
    let out = run(cmd, Duration::from_secs(60)).await;
    assert_success(&out, "rocm_sdk's Windows path");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        got,
        serde_json::json!({
            "found": ["_rocm_sdk_core/bin/amdhip64_7.dll", "_rocm_sdk_libraries/bin/rocfft.dll"],
            "added": ["_rocm_sdk_core/bin", "_rocm_sdk_libraries/bin"],
        })
    );
}
