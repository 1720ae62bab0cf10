//! TheRock's `$ORIGIN/…` search path entries in the rocm-sdk wheels (`py_packaging.py`:
//! `patchelf --add-rpath` per `rpath_dep`, then `--set-rpath … --force-rpath`), done in Rust
//! (`quarry_builder::elf_edit`), checked against Debian's `patchelf` as the oracle:
//! - the editor alone, on programs and libraries built here with `cc` (RUNPATH from
//!   `--enable-new-dtags`, old-style RPATH, no search path, a long one): a shorter path is
//!   written in place, a longer one in a new segment; `readelf -d` shows what `patchelf` gives
//!   on a copy, `readelf -a` has nothing to warn about, and the edited programs still run;
//! - `quarry package python`: every ELF file of the core, libraries and device wheels carries
//!   the RPATH `patchelf` gives the artifact's file, and after `pip install` of the wheels into
//!   a fresh virtualenv a library loads with `ctypes.CDLL` and a program runs from the
//!   installed tree with no `LD_LIBRARY_PATH`: the added entries are what resolves them.
//! - a file with no search path and no spare dynamic slot gets its dynamic section moved (and
//!   still runs); malformed or unsupported files are refused with a clear error, left as they were.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use quarry_builder::elf_edit::{PathTag, Placement, set_search_path};
use quarry_tests::native::artifact;
use quarry_tests::{assert_success, quarry_bin, venv_dir};

fn tool(program: &str, args: &[&str], dir: &Path) -> Output {
    let out = Command::new(program)
        .current_dir(dir)
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert_success(&out, &format!("{program} {args:?}"));
    out
}

/// `readelf -d`'s search path lines of `file`: `(RPATH|RUNPATH, path)`.
fn search_paths(file: &Path) -> Vec<(String, String)> {
    let out = tool("readelf", &["-d", &file.to_string_lossy()], Path::new("."));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let tag = ["RPATH", "RUNPATH"].into_iter().find(|t| line.contains(&format!("({t})")))?;
            Some((tag.to_owned(), line.split('[').nth(1)?.trim_end_matches(']').to_owned()))
        })
        .collect()
}

/// `readelf -a -W` has nothing to say on stderr (no warnings, no errors).
fn assert_readelf_clean(file: &Path) {
    let out = tool("readelf", &["-a", "-W", &file.to_string_lossy()], Path::new("."));
    assert!(out.stderr.is_empty(), "{}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
}

/// What TheRock's patchelf calls make of a copy of `file`: each of `additions` added, then the
/// result forced to RPATH; or, without additions, the path set to `set` with `tag`.
fn patchelf(file: &Path, scratch: &Path, additions: &[String], set: Option<(&str, PathTag)>) -> PathBuf {
    let copy = scratch.join(format!("patchelf-{}", file.file_name().unwrap().to_string_lossy()));
    std::fs::copy(file, &copy).unwrap();
    let c = copy.to_string_lossy().into_owned();
    for added in additions {
        tool("patchelf", &["--add-rpath", added, &c], scratch);
    }
    let (path, force) = match set {
        Some((path, tag)) => (path.to_owned(), tag == PathTag::Rpath),
        None => {
            let printed = tool("patchelf", &["--print-rpath", &c], scratch);
            (String::from_utf8_lossy(&printed.stdout).trim().to_owned(), true)
        }
    };
    let mut args = vec!["--set-rpath", &path];
    if force {
        args.push("--force-rpath");
    }
    args.push(&c);
    tool("patchelf", &args, scratch);
    copy
}

fn cc(dir: &Path, args: &[&str]) {
    tool("cc", args, dir);
}

/// `lib/libqdep.so` (no search path), then programs and libraries that need it.
fn fixtures(dir: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::write(dir.join("dep.c"), "int qdep(void) { return 42; }\n").unwrap();
    std::fs::write(dir.join("use.c"), "int qdep(void);\nint quse(void) { return qdep() + 1; }\n").unwrap();
    std::fs::write(
        dir.join("main.c"),
        "#include <stdio.h>\nint qdep(void);\nint main(void) { printf(\"%d\\n\", qdep()); return 0; }\n",
    )
    .unwrap();
    cc(dir, &["-shared", "-fPIC", "-o", "lib/libqdep.so", "dep.c", "-Wl,-soname,libqdep.so"]);
    let long = format!("$ORIGIN/{}", "a-rather-long-directory-name/".repeat(6));
    let link = ["-Llib", "-lqdep"];
    let so = |out: &str, extra: &[&str]| {
        let mut args = vec!["-shared", "-fPIC", "-o", out, "use.c"];
        args.extend(link);
        args.extend(extra);
        cc(dir, &args);
    };
    so("librunpath.so", &["-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/../lib"]);
    so("librpath.so", &["-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/lib"]);
    so("libnone.so", &[]);
    so("liblong.so", &["-Wl,--enable-new-dtags", &format!("-Wl,-rpath,{long}")]);
    let exe = |out: &str, extra: &[&str]| {
        let mut args = vec!["-o", out, "main.c"];
        args.extend(link);
        args.extend(extra);
        cc(dir, &args);
    };
    exe("pie-runpath", &["-Wl,--enable-new-dtags", "-Wl,-rpath,/nowhere"]);
    exe("exec-rpath", &["-no-pie", "-Wl,--disable-new-dtags", "-Wl,-rpath,/nowhere"]);
    exe("pie-none", &[]);
    exe("pie-long", &["-Wl,--enable-new-dtags", &format!("-Wl,-rpath,{long}")]);
    ["librunpath.so", "librpath.so", "libnone.so", "liblong.so", "pie-runpath", "exec-rpath", "pie-none", "pie-long"]
        .into_iter()
        .map(|name| dir.join(name))
        .collect()
}

#[test]
fn search_paths_set_as_patchelf_sets_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    for file in fixtures(dir) {
        assert_readelf_clean(&file);
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let program = !name.starts_with("lib");
        // A short path (in place where one was), a long one (a new segment), as RPATH or RUNPATH.
        let long = format!("$ORIGIN/lib:{}:$ORIGIN/../../_rocm_sdk_core/lib/rocm_sysdeps/lib", "/opt/x".repeat(40));
        for (value, tag) in [("$ORIGIN/lib", PathTag::Rpath), (long.as_str(), PathTag::Runpath)] {
            let ours = dir.join(format!("{name}-{}", value.len()));
            std::fs::copy(&file, &ours).unwrap();
            let placement = set_search_path(&ours, value, tag).unwrap();
            let had = search_paths(&file);
            let tag_name = if tag == PathTag::Rpath { "RPATH" } else { "RUNPATH" };
            let expected = match had.first() {
                Some((t, old)) if t == tag_name && old == value => Placement::Unchanged,
                Some((_, old)) if value.len() <= old.len() => Placement::InPlace,
                _ => Placement::Appended,
            };
            assert_eq!(placement, expected, "{name} <- {value}");
            let oracle = patchelf(&file, &scratch, &[], Some((value, tag)));
            assert_eq!(search_paths(&ours), search_paths(&oracle), "{name} <- {value}");
            assert_readelf_clean(&ours);
            if program {
                let out = Command::new(&ours).env_remove("LD_LIBRARY_PATH").output().unwrap();
                assert_success(&out, &format!("{name} after its search path became {value}"));
                assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n");
            }
            // Set again to the same: nothing to do.
            assert_eq!(set_search_path(&ours, value, tag).unwrap(), Placement::Unchanged);
        }
        // TheRock's two edits: additions, then RPATH.
        let additions = ["$ORIGIN/../../_rocm_sdk_core/lib".to_owned(), "$ORIGIN/../lib".to_owned()];
        let ours = dir.join(format!("{name}-extended"));
        std::fs::copy(&file, &ours).unwrap();
        quarry_builder::rpath::extend_search_path(&ours, &additions, PathTag::Rpath).unwrap().unwrap();
        let oracle = patchelf(&file, &scratch, &additions, None);
        assert_eq!(search_paths(&ours), search_paths(&oracle), "{name}");
        assert_readelf_clean(&ours);
    }
}

#[test]
fn malformed_and_unsupported_files_are_refused_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let files = fixtures(dir);
    let lib = std::fs::read(&files[0]).unwrap();
    let refused = |name: &str, bytes: &[u8], want: &str| {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        let err = set_search_path(&path, "$ORIGIN/a/longer/path/than/before", PathTag::Rpath).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()) && message.contains(want), "{name}: {message}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{name}: nothing written");
    };
    refused("text.so", b"just text", "malformed ELF file: not an ELF file");
    refused("cut.so", &lib[..lib.len() / 3], "malformed ELF file");
    let mut class = lib.clone();
    class[4] = 7;
    refused("class.so", &class, "unknown ELF class 7");
    // e_phoff pointing past the end of the file.
    let mut phoff = lib.clone();
    phoff[32..40].copy_from_slice(&u64::MAX.to_le_bytes()[..]);
    refused("phoff.so", &phoff, "malformed ELF file");
    // A static program has no dynamic section to edit.
    std::fs::write(dir.join("s.c"), "int main(void) { return 0; }\n").unwrap();
    let built = Command::new("cc").current_dir(dir).args(["-static", "-o", "static", "s.c"]).output().unwrap();
    if built.status.success() {
        refused("static-copy", &std::fs::read(dir.join("static")).unwrap(), "not a dynamically linked ELF file");
    }
}

#[test]
fn files_without_a_spare_dynamic_slot_get_their_dynamic_section_moved() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let files = fixtures(dir);
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    // libnone.so and pie-none: no search path, every spare DT_NULL slot taken.
    for source in [&files[2], &files[6]] {
        let name = source.file_name().unwrap().to_string_lossy().into_owned();
        let full = dir.join(format!("{name}-full"));
        std::fs::write(&full, fill_dynamic_slots(&std::fs::read(source).unwrap())).unwrap();
        std::fs::set_permissions(&full, std::fs::metadata(source).unwrap().permissions()).unwrap();
        assert_readelf_clean(&full);
        let ours = dir.join(format!("{name}-moved"));
        std::fs::copy(&full, &ours).unwrap();
        assert_eq!(set_search_path(&ours, "$ORIGIN/lib", PathTag::Rpath).unwrap(), Placement::Appended);
        let oracle = patchelf(&full, &scratch, &[], Some(("$ORIGIN/lib", PathTag::Rpath)));
        assert_eq!(search_paths(&ours), search_paths(&oracle), "{name}");
        assert_eq!(search_paths(&ours), [("RPATH".to_owned(), "$ORIGIN/lib".to_owned())]);
        assert_readelf_clean(&ours);
        if name.starts_with("pie") {
            let out = Command::new(&ours).env_remove("LD_LIBRARY_PATH").output().unwrap();
            assert_success(&out, &format!("{name} with its dynamic section moved"));
            assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n");
        }
    }
}

/// `bytes` (a little-endian ELF64 file) with every spare `DT_NULL` slot of its dynamic segment
/// but the last turned into `DT_DEBUG` entries.
fn fill_dynamic_slots(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let u16_at = |at: usize| u64::from(u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap()));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let (phoff, phnum) = (u64_at(32) as usize, u16_at(56) as usize);
    for i in 0..phnum {
        let ph = phoff + i * 56;
        if u32::from_le_bytes(bytes[ph..ph + 4].try_into().unwrap()) != 2 {
            continue;
        }
        let (offset, size) = (u64_at(ph + 8) as usize, u64_at(ph + 32) as usize);
        for slot in (offset..offset + size - 16).step_by(16) {
            if u64_at(slot) == 0 {
                out[slot..slot + 8].copy_from_slice(&21u64.to_le_bytes());
            }
        }
    }
    out
}

const CORE_STAGE: &str = "core/clr/stage";
const FFT_STAGE: &str = "math-libs/rocFFT/stage";

/// A kpack TheRock tree: core `lib/libqcore.so` and `lib/llvm/lib/libqomp.so` (no search
/// paths), core `bin/qprog` (needs libqomp; RUNPATH `$ORIGIN`), libraries `lib/libqfft.so`
/// (needs both; no search path) and the gfx942 device library `lib/libqfft_gfx942.so` (needs
/// libqcore; RPATH `$ORIGIN`); the devel tarball's own `lib/libqdevonly.so` (RUNPATH `$ORIGIN`).
fn tree(root: &Path) {
    artifact(root, "core-hip_lib_generic", CORE_STAGE, &[]);
    artifact(root, "fft_lib_generic", FFT_STAGE, &[]);
    artifact(root, "fft_lib_gfx942", FFT_STAGE, &[("lib/rocfft/gfx942.kpack", "gfx942 kernels")]);
    artifact(root, "fft_dev_generic", FFT_STAGE, &[("include/qfft.h", "int qfft(void);\n"), ("lib/.keep", "")]);
    artifact(
        root,
        "base_run_generic",
        "base/stage",
        &[
            ("share/therock/dist_info.json", "{\"dist_amdgpu_targets\": \"gfx942\"}\n"),
            ("share/therock/therock_manifest.json", "{\"flags\": {\"KPACK_SPLIT_ARTIFACTS\": true}}\n"),
        ],
    );
    let core = root.join("core-hip_lib_generic").join(CORE_STAGE);
    let fft = root.join("fft_lib_generic").join(FFT_STAGE);
    let device = root.join("fft_lib_gfx942").join(FFT_STAGE);
    let src = root.join("src");
    for dir in [src.clone(), core.join("lib/llvm/lib"), core.join("bin"), fft.join("lib")] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let write = |name: &str, code: &str| std::fs::write(src.join(name), code).unwrap();
    write("core.c", "int qcore(void) { return 40; }\n");
    write("omp.c", "int qomp(void) { return 2; }\n");
    write("fft.c", "int qcore(void);\nint qomp(void);\nint qfft(void) { return qcore() + qomp(); }\n");
    write("dev.c", "int qcore(void);\nint qdev(void) { return qcore() + 900; }\n");
    write("prog.c", "#include <stdio.h>\nint qomp(void);\nint main(void) { printf(\"qomp %d\\n\", qomp()); }\n");
    let s = |dir: &Path, p: &str| dir.join(p).to_string_lossy().into_owned();
    let (core_lib, omp_lib) = (s(&core, "lib"), s(&core, "lib/llvm/lib"));
    cc(&src, &["-shared", "-fPIC", "-o", &s(&core, "lib/libqcore.so"), "core.c", "-Wl,-soname,libqcore.so"]);
    cc(&src, &["-shared", "-fPIC", "-o", &s(&core, "lib/llvm/lib/libqomp.so"), "omp.c", "-Wl,-soname,libqomp.so"]);
    let links = ["-L", &core_lib, "-L", &omp_lib];
    let mut fft_args = vec!["-shared", "-fPIC", "-o"];
    let fft_out = s(&fft, "lib/libqfft.so");
    fft_args.extend([fft_out.as_str(), "fft.c", "-Wl,-soname,libqfft.so"]);
    fft_args.extend(links);
    fft_args.extend(["-lqcore", "-lqomp"]);
    cc(&src, &fft_args);
    let dev_out = s(&device, "lib/libqfft_gfx942.so");
    let mut dev_args = vec!["-shared", "-fPIC", "-o", dev_out.as_str(), "dev.c", "-Wl,-soname,libqfft_gfx942.so"];
    dev_args.extend(links);
    dev_args.extend(["-lqcore", "-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN"]);
    cc(&src, &dev_args);
    let devel_out = s(&root.join("fft_dev_generic").join(FFT_STAGE), "lib/libqdevonly.so");
    let devel_args =
        ["-shared", "-fPIC", "-o", devel_out.as_str(), "omp.c", "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN"];
    cc(&src, &devel_args);
    let prog_out = s(&core, "bin/qprog");
    let mut prog_args = vec!["-o", prog_out.as_str(), "prog.c"];
    prog_args.extend(links);
    prog_args.extend(["-lqomp", "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN"]);
    cc(&src, &prog_args);
    std::fs::remove_dir_all(&src).unwrap();
}

/// The wheel in `dist` whose name starts with `prefix`.
fn wheel(dist: &Path, prefix: &str) -> PathBuf {
    std::fs::read_dir(dist)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .unwrap_or_else(|| panic!("no {prefix}* in {}", dist.display()))
}

#[test]
fn origin_entries_in_the_rocm_sdk_wheels() {
    let tmp = tempfile::tempdir().unwrap();
    let artifacts = tmp.path().join("artifacts");
    tree(&artifacts);
    let dist = tmp.path().join("dist");
    let out = Command::new(quarry_bin())
        .args(["package", "python", "--artifact-dir"])
        .arg(&artifacts)
        .arg("--dest-dir")
        .arg(&dist)
        .args(["--rocm-version", "7.1.0"])
        .env("SOURCE_DATE_EPOCH", "1795000000")
        .env("ROCM_SDK_WHEEL_PLATFORM_TAG", "linux-x86_64")
        .output()
        .unwrap();
    assert_success(&out, "quarry package python");

    // A fresh virtualenv with the core, libraries and device wheels installed by pip.
    let venv = tmp.path().join("venv");
    let made = Command::new(venv_dir().join("bin/python")).args(["-m", "venv", "--without-pip"]).arg(&venv).output();
    assert_success(&made.unwrap(), "python -m venv");
    let wheels = ["rocm_sdk_core-", "rocm_sdk_libraries-", "rocm_sdk_device_gfx942-"].map(|p| wheel(&dist, p));
    let install = Command::new(venv_dir().join("bin/python"))
        .args(["-m", "pip", "--python"])
        .arg(venv.join("bin/python"))
        .args(["install", "--no-index", "--no-deps", "--disable-pip-version-check"])
        .args(&wheels)
        .env_remove("PIP_FIND_LINKS")
        .output()
        .unwrap();
    assert_success(&install, "pip install");
    let site = glob_one(&venv.join("lib"), "site-packages");

    let core_deps = ["lib/llvm/lib", "lib/rocm_sysdeps/lib"];
    let lib_deps = ["lib", "lib/rocm_sysdeps/lib", "lib/host-math/lib", "lib/llvm/lib"];
    let device_deps = ["lib", "lib/rocm_sysdeps/lib"];
    let checks: [(&str, PathBuf, &[&str]); 4] = [
        (
            "_rocm_sdk_core/bin/qprog",
            artifacts.join("core-hip_lib_generic").join(CORE_STAGE).join("bin/qprog"),
            &core_deps,
        ),
        (
            "_rocm_sdk_core/lib/llvm/lib/libqomp.so",
            artifacts.join("core-hip_lib_generic").join(CORE_STAGE).join("lib/llvm/lib/libqomp.so"),
            &core_deps,
        ),
        (
            "_rocm_sdk_libraries/lib/libqfft.so",
            artifacts.join("fft_lib_generic").join(FFT_STAGE).join("lib/libqfft.so"),
            &lib_deps,
        ),
        (
            "_rocm_sdk_libraries/lib/libqfft_gfx942.so",
            artifacts.join("fft_lib_gfx942").join(FFT_STAGE).join("lib/libqfft_gfx942.so"),
            &device_deps,
        ),
    ];
    let scratch = tmp.path().join("oracle");
    std::fs::create_dir_all(&scratch).unwrap();
    for (installed, original, deps) in checks {
        let depth = installed.split('/').count() - 1;
        let up = vec![".."; depth].join("/");
        let additions: Vec<String> = deps.iter().map(|d| format!("$ORIGIN/{up}/_rocm_sdk_core/{d}")).collect();
        let oracle = patchelf(&original, &scratch, &additions, None);
        let ours = site.join(installed);
        let paths = search_paths(&ours);
        assert_eq!(paths, search_paths(&oracle), "{installed}");
        assert_eq!(paths.len(), 1, "{installed}: {paths:?}");
        assert_eq!(paths[0].0, "RPATH", "{installed}");
        assert!(paths[0].1.ends_with(&additions.join(":")), "{installed}: {paths:?}");
        assert_readelf_clean(&ours);
    }

    // The devel tarball's own ELF files: RUNPATH made RPATH, nothing added (`_populate_devel_file`).
    let devel = wheel(&dist, "rocm_sdk_devel-");
    let mut zip = zip::ZipArchive::new(std::fs::File::open(&devel).unwrap()).unwrap();
    let mut tarball = tar::Archive::new(zip.by_name("rocm_sdk_devel/_devel.tar").unwrap());
    let unpacked = tmp.path().join("devel");
    for entry in tarball.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().ends_with("lib/libqdevonly.so") {
            std::fs::create_dir_all(&unpacked).unwrap();
            entry.unpack(unpacked.join("libqdevonly.so")).unwrap();
        }
    }
    assert_eq!(search_paths(&unpacked.join("libqdevonly.so")), [("RPATH".to_owned(), "$ORIGIN".to_owned())]);

    // Loaded from the installed tree with nothing but the search paths: the libraries' library
    // finds core's through `$ORIGIN/../../_rocm_sdk_core/lib`, the program its llvm library.
    let python = venv.join("bin/python");
    let load = |lib: &str, symbol: &str| {
        let code = format!(
            "import ctypes, sysconfig; l = ctypes.CDLL(sysconfig.get_paths()['platlib'] + '/{lib}'); print(l.{symbol}())"
        );
        let out = Command::new(&python).args(["-c", &code]).env_remove("LD_LIBRARY_PATH").output().unwrap();
        assert_success(&out, &format!("ctypes.CDLL({lib})"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(load("_rocm_sdk_libraries/lib/libqfft.so", "qfft"), "42\n");
    assert_eq!(load("_rocm_sdk_libraries/lib/libqfft_gfx942.so", "qdev"), "940\n");
    let out = Command::new(site.join("_rocm_sdk_core/bin/qprog")).env_remove("LD_LIBRARY_PATH").output().unwrap();
    assert_success(&out, "qprog from the installed tree");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "qomp 2\n");
    // The artifacts themselves do not resolve: the added entries are what does.
    let plain = artifacts.join("core-hip_lib_generic").join(CORE_STAGE).join("bin/qprog");
    assert!(!Command::new(plain).env_remove("LD_LIBRARY_PATH").output().unwrap().status.success());
}

/// The one directory named `name` two levels under `dir` (`lib/python3.X/site-packages`).
fn glob_one(dir: &Path, name: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path().join(name))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no */{name} under {}", dir.display()))
}
