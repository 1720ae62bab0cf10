//! RUNPATH to RPATH in `quarry package`, as TheRock's `build_package.py` does by default:
//! a program and shared libraries built here with `cc -Wl,--enable-new-dtags` (so they carry
//! DT_RUNPATH) in a TheRock-like artifact tree, packaged as deb, rpm and wheels. `readelf -d`
//! shows DT_RPATH in the packages (DT_RUNPATH with `--runpath-pkg`), the artifacts are left as
//! they were, and the programs run from the extracted packages: their libraries resolve from
//! the installed tree. One program needs a library only the program's search path names
//! (a dependency of a dependency): it runs under DT_RPATH, which the loader applies to the
//! whole chain, and fails under DT_RUNPATH, which it does not: the tag really changed.
//! Also: one log per package under `{dest}/logs/`, and `--clean-build`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use quarry_tests::native::artifact;
use quarry_tests::{assert_success, quarry_bin};

const STAGE: &str = "core/clr/stage";

fn cc(dir: &Path, args: &[&str]) {
    let out = Command::new("cc").current_dir(dir).args(args).output().expect("cc is installed");
    assert_success(&out, &format!("cc {args:?}"));
}

/// `core-hip_lib_generic` with, under its stage directory:
/// - `lib/deps/libqdep.so` (no search path);
/// - `lib/libqfix.so` → libqdep, RUNPATH `$ORIGIN/deps`;
/// - `lib/libqtrans.so` → libqdep, no search path of its own;
/// - `bin/qhello` → libqfix, RUNPATH `$ORIGIN/../lib`;
/// - `bin/qtrans` → libqtrans, RUNPATH `$ORIGIN/../lib:$ORIGIN/../lib/deps` (libqdep is found
///   through it only when it is an RPATH).
fn tree(root: &Path) -> PathBuf {
    artifact(root, "core-hip_lib_generic", STAGE, &[("lib/deps/.keep", "")]);
    std::fs::remove_file(root.join("core-hip_lib_generic").join(STAGE).join("lib/deps/.keep")).unwrap();
    let stage = root.join("core-hip_lib_generic").join(STAGE);
    let src = root.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(stage.join("bin")).unwrap();
    let write = |name: &str, code: &str| std::fs::write(src.join(name), code).unwrap();
    write("dep.c", "int qdep(void) { return 42; }\n");
    write("fix.c", "int qdep(void);\nint qfix(void) { return qdep() + 1; }\n");
    write("trans.c", "int qdep(void);\nint qtrans(void) { return qdep() + 2; }\n");
    write(
        "hello.c",
        "#include <stdio.h>\nint qfix(void);\nint main(void) { printf(\"qfix %d\\n\", qfix()); return 0; }\n",
    );
    write(
        "tmain.c",
        "#include <stdio.h>\nint qtrans(void);\nint main(void) { printf(\"qtrans %d\\n\", qtrans()); return 0; }\n",
    );
    let s = |p: &str| stage.join(p).to_string_lossy().into_owned();
    let new_dtags = "-Wl,--enable-new-dtags";
    cc(&src, &["-shared", "-fPIC", "-o", &s("lib/deps/libqdep.so"), "dep.c", "-Wl,-soname,libqdep.so"]);
    let deps = s("lib/deps");
    let lib = s("lib");
    cc(
        &src,
        &[
            "-shared",
            "-fPIC",
            "-o",
            &s("lib/libqfix.so"),
            "fix.c",
            "-Wl,-soname,libqfix.so",
            "-L",
            &deps,
            "-lqdep",
            new_dtags,
            "-Wl,-rpath,$ORIGIN/deps",
        ],
    );
    cc(
        &src,
        &[
            "-shared",
            "-fPIC",
            "-o",
            &s("lib/libqtrans.so"),
            "trans.c",
            "-Wl,-soname,libqtrans.so",
            "-L",
            &deps,
            "-lqdep",
        ],
    );
    cc(&src, &["-o", &s("bin/qhello"), "hello.c", "-L", &lib, "-lqfix", new_dtags, "-Wl,-rpath,$ORIGIN/../lib"]);
    cc(
        &src,
        &[
            "-o",
            &s("bin/qtrans"),
            "tmain.c",
            "-L",
            &lib,
            "-lqtrans",
            "-Wl,-rpath-link",
            &deps,
            new_dtags,
            "-Wl,-rpath,$ORIGIN/../lib:$ORIGIN/../lib/deps",
        ],
    );
    std::fs::remove_dir_all(&src).unwrap();
    stage
}

/// `readelf -d`'s search path lines of `file`: `(RPATH|RUNPATH, path)`.
fn search_paths(file: &Path) -> Vec<(String, String)> {
    let out = Command::new("readelf").arg("-d").arg(file).output().expect("readelf (binutils) is installed");
    assert_success(&out, "readelf -d");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let tag = if line.contains("(RPATH)") {
                "RPATH"
            } else if line.contains("(RUNPATH)") {
                "RUNPATH"
            } else {
                return None;
            };
            let path = line.split('[').nth(1)?.trim_end_matches(']');
            Some((tag.to_owned(), path.to_owned()))
        })
        .collect()
}

fn package(kind: &str, artifacts: &Path, dest: &Path, extra: &[&str]) -> serde_json::Value {
    let out = Command::new(quarry_bin())
        .args(["package", kind, "--json", "--artifacts-dir"])
        .arg(artifacts)
        .arg("--dest-dir")
        .arg(dest)
        .args(["--rocm-version", "7.1.0", "--pkg-names", "amdrocm-runtime", "--jobs", "2"])
        .args(extra)
        .env("SOURCE_DATE_EPOCH", "1795000000")
        .env_remove("GITHUB_OUTPUT")
        .output()
        .unwrap();
    assert_success(&out, &format!("quarry package {kind} {extra:?}"));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The built package holding the files (the versioned one, the largest), unpacked into `root`.
fn extract(kind: &str, summary: &serde_json::Value, dest: &Path, root: &Path) -> PathBuf {
    let built = summary["built"].as_array().unwrap();
    let biggest = built.iter().max_by_key(|b| b["size"].as_u64().unwrap()).unwrap();
    let file = dest.join(biggest["file"].as_str().unwrap());
    std::fs::create_dir_all(root).unwrap();
    let out = if kind == "deb" {
        Command::new("dpkg-deb").arg("-x").arg(&file).arg(root).output().unwrap()
    } else {
        let cpio = format!("rpm2cpio '{}' | cpio -idm --quiet", file.display());
        Command::new("sh").args(["-c", &cpio]).current_dir(root).output().unwrap()
    };
    assert_success(&out, &format!("extract {}", file.display()));
    root.join("opt/rocm/core-7.1")
}

fn run_program(path: &Path) -> Output {
    Command::new(path).env_remove("LD_LIBRARY_PATH").output().unwrap()
}

fn assert_runs(path: &Path, expected: &str) {
    let out = run_program(path);
    assert_success(&out, &path.display().to_string());
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected, "{}", path.display());
}

fn rpath(path: &str) -> Vec<(String, String)> {
    vec![("RPATH".to_owned(), path.to_owned())]
}

fn runpath(path: &str) -> Vec<(String, String)> {
    vec![("RUNPATH".to_owned(), path.to_owned())]
}

#[test]
fn runpath_becomes_rpath_in_debs_and_rpms() {
    let tmp = tempfile::tempdir().unwrap();
    let artifacts = tmp.path().join("artifacts");
    let stage = tree(&artifacts);
    let original = |p: &str| std::fs::read(stage.join(p)).unwrap();
    let before: Vec<Vec<u8>> = ["bin/qhello", "bin/qtrans", "lib/libqfix.so"].map(original).into();
    assert_eq!(search_paths(&stage.join("bin/qhello")), runpath("$ORIGIN/../lib"));
    assert_eq!(search_paths(&stage.join("lib/libqfix.so")), runpath("$ORIGIN/deps"));
    // The artifacts as built: the chain through libqtrans does not resolve under RUNPATH.
    assert!(!run_program(&stage.join("bin/qtrans")).status.success());

    for kind in ["deb", "rpm"] {
        let dest = tmp.path().join(format!("{kind}s"));
        let summary = package(kind, &artifacts, &dest, &[]);
        let installed = extract(kind, &summary, &dest, &tmp.path().join(format!("{kind}-root")));
        assert_eq!(search_paths(&installed.join("bin/qhello")), rpath("$ORIGIN/../lib"), "{kind}");
        assert_eq!(search_paths(&installed.join("lib/libqfix.so")), rpath("$ORIGIN/deps"), "{kind}");
        assert_eq!(search_paths(&installed.join("bin/qtrans")), rpath("$ORIGIN/../lib:$ORIGIN/../lib/deps"));
        assert_eq!(search_paths(&installed.join("lib/deps/libqdep.so")), []);
        assert_runs(&installed.join("bin/qhello"), "qfix 43\n");
        assert_runs(&installed.join("bin/qtrans"), "qtrans 44\n");

        // One log per package, named in the summary.
        for built in summary["built"].as_array().unwrap() {
            let log = PathBuf::from(built["log"].as_str().unwrap());
            let package = built["package"].as_str().unwrap();
            assert_eq!(log, dest.join(format!("logs/{kind}-{package}.log")));
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(text.starts_with(&format!("package {package} ({kind})\n")), "{text}");
            assert!(text.contains(&format!("built: {}", built["file"].as_str().unwrap())), "{text}");
            assert!(text.contains("time: collect "), "{text}");
        }
        let logs = std::fs::read_dir(dest.join("logs")).unwrap().count();
        assert_eq!(logs, summary["built"].as_array().unwrap().len());
        let versioned = std::fs::read_dir(dest.join("logs"))
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .find(|t| t.contains("bin/qhello"))
            .expect("a log lists the program");
        assert!(versioned.contains("rpath: 3 files DT_RUNPATH -> DT_RPATH"), "{versioned}");
        assert!(versioned.contains("opt/rocm/core-7.1/bin/qtrans [$ORIGIN/../lib:$ORIGIN/../lib/deps]"), "{versioned}");
        assert!(versioned.contains("included: 5 files ("), "{versioned}");
        assert!(!dest.read_dir().unwrap().any(|e| e.unwrap().file_name().to_string_lossy().starts_with(".quarry")));

        // --runpath-pkg keeps RUNPATH: the direct chain still resolves, the transitive one not.
        let kept_dest = tmp.path().join(format!("{kind}s-runpath"));
        let kept = package(kind, &artifacts, &kept_dest, &["--runpath-pkg"]);
        let installed = extract(kind, &kept, &kept_dest, &tmp.path().join(format!("{kind}-root-runpath")));
        assert_eq!(search_paths(&installed.join("bin/qhello")), runpath("$ORIGIN/../lib"), "{kind}");
        assert_eq!(search_paths(&installed.join("lib/libqfix.so")), runpath("$ORIGIN/deps"), "{kind}");
        assert_runs(&installed.join("bin/qhello"), "qfix 43\n");
        let failed = run_program(&installed.join("bin/qtrans"));
        assert!(!failed.status.success());
        assert!(String::from_utf8_lossy(&failed.stderr).contains("libqdep.so"), "{failed:?}");
    }
    let after: Vec<Vec<u8>> = ["bin/qhello", "bin/qtrans", "lib/libqfix.so"].map(original).into();
    assert!(before == after, "the artifacts are not written");
}

#[test]
fn clean_build_removes_previous_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let artifacts = tmp.path().join("artifacts");
    artifact(&artifacts, "core-hip_lib_generic", STAGE, &[("lib/libamdhip64.so.7", "runtime")]);
    let dest = tmp.path().join("debs");
    std::fs::create_dir_all(dest.join("logs")).unwrap();
    for stale in ["amdrocm-old_1.0_amd64.deb", "logs/deb-amdrocm-old.log", "keep.txt", "other.rpm"] {
        std::fs::write(dest.join(stale), "stale").unwrap();
    }
    std::fs::create_dir_all(dest.join(".quarry-elf-left")).unwrap();
    package("deb", &artifacts, &dest, &[]);
    assert!(dest.join("amdrocm-old_1.0_amd64.deb").exists(), "kept without --clean-build");
    let summary = package("deb", &artifacts, &dest, &["--clean-build"]);
    for gone in ["amdrocm-old_1.0_amd64.deb", "logs/deb-amdrocm-old.log", ".quarry-elf-left"] {
        assert!(!dest.join(gone).exists(), "{gone}");
    }
    for kept in ["keep.txt", "other.rpm"] {
        assert!(dest.join(kept).exists(), "{kept}");
    }
    let mut debs: Vec<String> = std::fs::read_dir(&dest)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".deb"))
        .collect();
    debs.sort();
    let mut built: Vec<String> =
        summary["built"].as_array().unwrap().iter().map(|b| b["file"].as_str().unwrap().to_owned()).collect();
    built.sort();
    assert_eq!(debs, built);
}

/// The members of the wheel at `path` unpacked under `root` (modes kept); the member names.
fn unzip(path: &Path, root: &Path) -> Vec<String> {
    let mut zip = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut names = Vec::new();
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).unwrap();
        let name = member.name().unwrap().into_owned();
        let out = root.join(&name);
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        let mut file = std::fs::File::create(&out).unwrap();
        std::io::copy(&mut member, &mut file).unwrap();
        if let Some(mode) = member.unix_mode() {
            std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(mode & 0o777)).unwrap();
        }
        names.push(name);
    }
    names
}

#[test]
fn runpath_becomes_rpath_in_wheels() {
    let tmp = tempfile::tempdir().unwrap();
    let artifacts = tmp.path().join("artifacts");
    tree(&artifacts);
    for (flags, tag) in [(&[][..], "RPATH"), (&["--runpath-pkg"][..], "RUNPATH")] {
        let dest = tmp.path().join(format!("dist-{tag}"));
        let out = Command::new(quarry_bin())
            .args(["package", "python", "--json", "--artifacts-dir"])
            .arg(&artifacts)
            .arg("--dest-dir")
            .arg(&dest)
            .args(["--rocm-version", "7.1.0"])
            .args(flags)
            .env("SOURCE_DATE_EPOCH", "1795000000")
            .env("ROCM_SDK_WHEEL_PLATFORM_TAG", "linux-x86_64")
            .output()
            .unwrap();
        assert_success(&out, &format!("quarry package python {flags:?}"));
        let core = std::fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("rocm_sdk_core-"))
            .expect("the core wheel");
        let root = tmp.path().join(format!("site-{tag}"));
        let names = unzip(&core, &root);
        let program = names.iter().find(|n| n.ends_with("/bin/qhello")).expect("bin/qhello in the core wheel");
        let program = root.join(program);
        let package = program.parent().unwrap().parent().unwrap();
        // The core wheel's search paths also get TheRock's entries (`tests/rpath_origin.rs`).
        let core = package.file_name().unwrap().to_string_lossy().into_owned();
        let want = |path: Option<&str>, up: &str| {
            let added = format!("$ORIGIN/{up}/{core}/lib/llvm/lib:$ORIGIN/{up}/{core}/lib/rocm_sysdeps/lib");
            vec![(tag.to_owned(), path.map_or(added.clone(), |p| format!("{p}:{added}")))]
        };
        assert_eq!(search_paths(&program), want(Some("$ORIGIN/../lib"), "../.."));
        assert_eq!(search_paths(&package.join("lib/libqfix.so")), want(Some("$ORIGIN/deps"), "../.."));
        assert_eq!(search_paths(&package.join("lib/deps/libqdep.so")), want(None, "../../.."));
        assert_runs(&program, "qfix 43\n");
        let transitive = run_program(&package.join("bin/qtrans"));
        assert_eq!(transitive.status.success(), tag == "RPATH", "{transitive:?}");
    }
}
