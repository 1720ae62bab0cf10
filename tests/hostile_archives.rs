//! Symlink-chain archives against every command that unpacks artifacts: `r/a/u1 -> ..`,
//! `r/a/u1/u2 -> ..`, … each pass a textual check and together climb one directory per level.
//! A file or a hard link placed through the chain would land outside the destination (5 levels
//! reach beside `--dest-dir`, 14 far above it). `quarry package deb|rpm|python` and `quarry
//! artifacts fetch` (plain, `--bootstrap`, `--flatten`, with a valid `.sha256sum`) must refuse
//! the archive naming the member, exit non-zero, and leave nothing outside the destination.
//!
//! Links judged by where they resolve: a 16-level chain whose links each look inside while the
//! last leads out is refused by `quarry artifacts fetch` in every mode, a second `--bootstrap`
//! into the same build directory never wipes through a link (a sentinel outside survives), and
//! `quarry package deb` never reads content through a link nor packages a chain leading out (a
//! planted secret outside stays out of every package). An archive that expands hugely (zeros)
//! is refused naming the archive, the limit and the flag that raises it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use quarry_artifacts::ArchiveFormat;
use quarry_tests::native::{RawMember, compress, raw_tar};
use quarry_tests::{quarry_bin, run, sha256_hex};
use tar::EntryType::{Link, Regular, Symlink};

use crate::artifacts::TOPOLOGY;

/// Fourteen directories deep, so even a 14-level chain stays inside the test's directory.
const DEEP: &str = "d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/d13/d14";

/// A chain of `levels` links, then `payload`: a file through it, or a hard link to a file
/// reached through it.
fn chain_archive(levels: usize, hard_link: bool, format: ArchiveFormat) -> Vec<u8> {
    let links: Vec<String> = (1..=levels)
        .map(|i| format!("r/a/{}", (1..=i).map(|j| format!("u{j}")).collect::<Vec<_>>().join("/")))
        .collect();
    let through_file = format!("{}/escaped", links[levels - 1]);
    let through_secret = format!("{}/secret", links[levels - 1]);
    let mut members: Vec<RawMember<'_>> = vec![("artifact_manifest.txt", Regular, "", b"r\n")];
    members.extend(links.iter().map(|l| (l.as_str(), Symlink, "..", &b""[..])));
    if hard_link {
        members.push(("r/stolen", Link, through_secret.as_str(), b""));
    } else {
        members.push((through_file.as_str(), Regular, "", b"pwned"));
    }
    compress(&raw_tar(&members), format)
}

/// A `secret` in every directory a chain could reach; nothing named `escaped` or `stolen`.
fn plant(tmp: &Path) {
    let mut dir = tmp.to_path_buf();
    std::fs::write(dir.join("secret"), "outside").unwrap();
    for part in DEEP.split('/') {
        dir.push(part);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret"), "outside").unwrap();
    }
}

/// Files named `escaped` or `stolen` anywhere under `tmp` but inside `dest`, and any changed
/// `secret`.
fn outside(tmp: &Path, dest: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, dest: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.starts_with(dest) {
                continue;
            }
            if name == "escaped" || name == "stolen" {
                out.push(path.clone());
            }
            if name == "secret" && std::fs::read(&path).unwrap() != b"outside" {
                out.push(path.clone());
            }
            if meta.is_dir() {
                walk(&path, dest, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(tmp, dest, &mut out);
    out
}

fn cases() -> Vec<(String, Vec<u8>, ArchiveFormat)> {
    let mut cases = Vec::new();
    for levels in [5, 14] {
        for format in [ArchiveFormat::Zstd, ArchiveFormat::Xz] {
            for hard_link in [false, true] {
                let what = format!("{levels} levels, {format:?}, {}", if hard_link { "hard link" } else { "file" });
                cases.push((what, chain_archive(levels, hard_link, format), format));
            }
        }
    }
    cases
}

fn assert_refused(what: &str, out: &std::process::Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{what}: exited 0\n{stderr}\n{stdout}");
    assert!(
        stderr.contains("member \"r/") || stdout.contains("member \\\"r/") || stdout.contains("member \"r/"),
        "{what}: the error names the member\nstderr: {stderr}\nstdout: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn package_commands_refuse_symlink_chains() {
    for (what, bytes, format) in cases() {
        for kind in ["deb", "rpm", "python"] {
            let tmp = tempfile::tempdir().unwrap();
            plant(tmp.path());
            let archives = tmp.path().join(DEEP).join("archives");
            std::fs::create_dir_all(&archives).unwrap();
            std::fs::write(archives.join(format!("base_run_generic{}", format.extension())), &bytes).unwrap();
            let dest = tmp.path().join(DEEP).join("out");
            let mut cmd = tokio::process::Command::new(quarry_bin());
            let dir_flag = if kind == "python" { "--artifact-dir" } else { "--artifacts-dir" };
            cmd.args(["package", kind, dir_flag])
                .arg(&archives)
                .arg("--dest-dir")
                .arg(&dest)
                .args(["--rocm-version", "7.1.0"])
                .env("SOURCE_DATE_EPOCH", "1795000000");
            let out = run(cmd, Duration::from_secs(120)).await;
            let what = format!("package {kind}, {what}");
            assert_refused(&what, &out);
            let left = outside(tmp.path(), &dest);
            assert!(left.is_empty(), "{what}: written outside {}: {left:?}", dest.display());
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn artifacts_fetch_refuses_symlink_chains_in_every_mode() {
    for (what, bytes, format) in cases() {
        for mode in ["plain", "--bootstrap", "--flatten"] {
            let tmp = tempfile::tempdir().unwrap();
            plant(tmp.path());
            let topology = tmp.path().join("BUILD_TOPOLOGY.toml");
            std::fs::write(&topology, TOPOLOGY).unwrap();
            let staging = tmp.path().join("staging/42-linux");
            std::fs::create_dir_all(&staging).unwrap();
            let name = format!("sysdeps_lib_generic{}", format.extension());
            std::fs::write(staging.join(&name), &bytes).unwrap();
            std::fs::write(staging.join(format!("{name}.sha256sum")), format!("{}\n", sha256_hex(&bytes))).unwrap();
            let dest = tmp.path().join(DEEP).join("out");
            let mut cmd = tokio::process::Command::new(quarry_bin());
            cmd.args(["artifacts", "fetch", "--stage", "compiler", "--output-dir"])
                .arg(&dest)
                .arg("--topology")
                .arg(&topology)
                .arg("--local-staging-dir")
                .arg(tmp.path().join("staging"))
                .args(["--run-id", "42", "--platform", "linux"])
                .env_remove("THEROCK_LOCAL_STAGING_DIR");
            if mode != "plain" {
                cmd.arg(mode);
            }
            let out = run(cmd, Duration::from_secs(120)).await;
            let what = format!("fetch {mode}, {what}");
            assert_refused(&what, &out);
            assert!(String::from_utf8_lossy(&out.stderr).contains(&name), "{what}: names the archive");
            let left = outside(tmp.path(), &dest);
            assert!(left.is_empty(), "{what}: written outside {}: {left:?}", dest.display());
        }
    }
}

/// `stage/a/…/p/s -> ../…` (16 levels up: back at `stage`), then `stage/esc -> a/…/p/s/` and
/// `up` times `..`: each link's text stays inside `stage`, while `esc` resolves `up` levels
/// above it.
fn resolving_chain(up: usize) -> Vec<u8> {
    let deep = ('a'..='p').map(String::from).collect::<Vec<_>>().join("/");
    let s = format!("stage/{deep}/s");
    let up16 = vec![".."; 16].join("/");
    let esc = format!("{deep}/s/{}", vec![".."; up].join("/"));
    let members: Vec<RawMember<'_>> = vec![
        ("artifact_manifest.txt", Regular, "", b"stage\n"),
        (s.as_str(), Symlink, up16.as_str(), b""),
        ("stage/esc", Symlink, esc.as_str(), b""),
    ];
    compress(&raw_tar(&members), ArchiveFormat::Zstd)
}

/// Puts `bytes` as `sysdeps_lib_generic.tar.zst` (with its sidecar) in run `run_id`'s local
/// staging directory under `tmp`, and writes the topology.
fn stage_archive(tmp: &Path, run_id: &str, bytes: &[u8]) {
    std::fs::write(tmp.join("BUILD_TOPOLOGY.toml"), TOPOLOGY).unwrap();
    let staging = tmp.join(format!("staging/{run_id}-linux"));
    std::fs::create_dir_all(&staging).unwrap();
    let name = "sysdeps_lib_generic.tar.zst";
    std::fs::write(staging.join(name), bytes).unwrap();
    std::fs::write(staging.join(format!("{name}.sha256sum")), format!("{}\n", sha256_hex(bytes))).unwrap();
}

/// `quarry artifacts fetch --stage compiler` of run `run_id` staged under `tmp` into `dest`.
async fn fetch(tmp: &Path, run_id: &str, dest: &Path, flags: &[&str]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["artifacts", "fetch", "--stage", "compiler", "--output-dir"])
        .arg(dest)
        .arg("--topology")
        .arg(tmp.join("BUILD_TOPOLOGY.toml"))
        .arg("--local-staging-dir")
        .arg(tmp.join("staging"))
        .args(["--run-id", run_id, "--platform", "linux"])
        .args(flags)
        .env_remove("THEROCK_LOCAL_STAGING_DIR");
    run(cmd, Duration::from_secs(120)).await
}

/// Every symlink named `name` under `dir` (not followed).
fn links_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() && path.file_name().is_some_and(|n| n == name) {
            out.push(path);
        } else if meta.is_dir() {
            out.extend(links_named(&path, name));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn fetch_refuses_links_that_resolve_outside_and_never_wipes_through_one() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    std::fs::create_dir_all(tmp.join("victim")).unwrap();
    std::fs::write(tmp.join("victim/sentinel"), "keep").unwrap();
    // Bootstrapped into `<tmp>/DEEP/out`, `esc` would lead 16 levels above `stage`: `<tmp>`.
    stage_archive(tmp, "42", &resolving_chain(16));
    // A later run whose root lies below `esc`: its wipe would remove `<tmp>/victim`.
    let below: Vec<RawMember<'_>> = vec![
        ("artifact_manifest.txt", Regular, "", b"stage/esc/victim\n"),
        ("stage/esc/victim/new.txt", Regular, "", b"new"),
    ];
    let below = compress(&raw_tar(&below), ArchiveFormat::Zstd);
    stage_archive(tmp, "43", &below);

    for mode in [None, Some("--bootstrap"), Some("--flatten")] {
        let dest = tmp.join(DEEP).join(format!("out{}", mode.unwrap_or("")));
        let out = fetch(tmp, "42", &dest, mode.as_slice()).await;
        let what = format!("fetch {mode:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: exited 0\n{stderr}");
        assert!(
            stderr.contains("sysdeps_lib_generic.tar.zst") && stderr.contains("member \"stage/esc\""),
            "{what}: {stderr}"
        );
        assert!(stderr.contains("leaves its root"), "{what}: {stderr}");
        assert_eq!(links_named(tmp, "esc"), Vec::<PathBuf>::new(), "{what}");
    }

    // TheRock's pattern: a second bootstrap into the same build directory.
    let build = tmp.join(DEEP).join("out--bootstrap");
    let out = fetch(tmp, "43", &build, &["--bootstrap"]).await;
    assert_eq!(std::fs::read_to_string(tmp.join("victim/sentinel")).unwrap(), "keep", "{out:?}");
    assert!(!tmp.join("victim/new.txt").exists());

    // A build directory an older extractor left with such a link: the wipe refuses it.
    let old = tmp.join(DEEP).join("old");
    std::fs::create_dir_all(old.join("stage")).unwrap();
    std::os::unix::fs::symlink(tmp, old.join("stage/esc")).unwrap();
    let out = fetch(tmp, "43", &old, &["--bootstrap"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exited 0\n{stderr}");
    let link = old.join("stage/esc");
    assert!(stderr.contains(&format!("{} is a symlink", link.display())), "{stderr}");
    assert_eq!(std::fs::read_to_string(tmp.join("victim/sentinel")).unwrap(), "keep");
    assert!(!tmp.join("victim/new.txt").exists());
}

/// A `.tar.zst` artifact archive whose one member `stage/zeros` is `size` zero bytes.
fn zero_archive(size: u64) -> Vec<u8> {
    let encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    let mut tar = tar::Builder::new(encoder);
    let mut append = |name: &str, size: u64, data: &mut dyn std::io::Read| {
        let mut h = tar::Header::new_gnu();
        h.set_size(size);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, name, data).unwrap();
    };
    append("artifact_manifest.txt", 6, &mut &b"stage\n"[..]);
    append("stage/zeros", size, &mut std::io::Read::take(std::io::repeat(0), size));
    tar.into_inner().unwrap().finish().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn fetch_refuses_an_archive_that_expands_hugely_unless_told() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    let size = 128 << 20;
    let bytes = zero_archive(size);
    assert!(bytes.len() < 32 << 10, "{} compressed bytes", bytes.len());
    stage_archive(tmp, "42", &bytes);
    let zeros =
        |dest: &Path| std::fs::metadata(dest.join("artifacts/sysdeps_lib_generic/stage/zeros")).map(|m| m.len());

    let dest = tmp.join("refused");
    let out = fetch(tmp, "42", &dest, &[]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exited 0\n{stderr}");
    for needle in ["sysdeps_lib_generic.tar.zst", "expands beyond the limit of 200:1", "--max-expansion-ratio"] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    assert!(zeros(&dest).is_err(), "a refused tree extraction leaves nothing");
    let scratch: u64 = walk_sizes(&dest);
    assert!(scratch == 0, "{scratch} bytes left in {}", dest.display());

    let out =
        fetch(tmp, "42", &tmp.join("small"), &["--max-expansion-ratio", "1000000", "--max-unpacked-bytes", "1048576"])
            .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exited 0\n{stderr}");
    assert!(stderr.contains("limit of 1048576 bytes") && stderr.contains("--max-unpacked-bytes"), "{stderr}");

    let dest = tmp.join("allowed");
    let out = fetch(tmp, "42", &dest, &["--max-expansion-ratio", "1000000"]).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(zeros(&dest).unwrap(), size);
}

/// The bytes of every file under `dir` (0 when it does not exist).
fn walk_sizes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .map(|e| {
            let path = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() { walk_sizes(&path) } else { meta.len() }
        })
        .sum()
}

/// Runs `quarry package deb` for `amdrocm-sysdeps` over `artifacts` into `dest`.
async fn package_sysdeps(artifacts: &Path, dest: &Path) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["package", "deb", "--json", "--artifacts-dir"])
        .arg(artifacts)
        .arg("--dest-dir")
        .arg(dest)
        .args(["--rocm-version", "7.1.0", "--pkg-names", "amdrocm-sysdeps"])
        .env("SOURCE_DATE_EPOCH", "1795000000");
    run(cmd, Duration::from_secs(120)).await
}

/// Whether any `.deb` under `dir` carries `needle` in its files (`dpkg-deb --fsys-tarfile`).
async fn debs_contain(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for deb in quarry_tests::native::files_in(dir).into_iter().filter(|p| p.extension().is_some_and(|e| e == "deb")) {
        let mut cmd = tokio::process::Command::new("dpkg-deb");
        cmd.arg("--fsys-tarfile").arg(&deb);
        let out = run(cmd, Duration::from_secs(60)).await;
        assert!(
            out.status.success(),
            "dpkg-deb --fsys-tarfile {}: {}",
            deb.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.stdout.windows(needle.len()).any(|w| w == needle) {
            found.push(deb);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn package_deb_never_packages_through_a_link() {
    const SECRET: &[u8] = b"secret-token-4f1c9a";
    let tmp = tempfile::tempdir().unwrap();
    let tmp = tmp.path();
    let outside = tmp.join("outside/stage/lib/rocm_sysdeps");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("token.txt"), SECRET).unwrap();
    std::fs::write(outside.join("libz.so.1"), "zlib").unwrap();

    // `third-party/sysdeps` a link to a directory outside the artifacts.
    let artifacts = tmp.join("linked");
    let stage = "third-party/sysdeps/stage";
    quarry_tests::native::artifact(&artifacts, "sysdeps_lib_generic", stage, &[("lib/rocm_sysdeps/libz.so.1", "zlib")]);
    let sysdeps = artifacts.join("sysdeps_lib_generic/third-party/sysdeps");
    std::fs::remove_dir_all(&sysdeps).unwrap();
    std::os::unix::fs::symlink(tmp.join("outside"), &sysdeps).unwrap();
    let dest = tmp.join("out-linked");
    let out = package_sysdeps(&artifacts, &dest).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "built through the link\n{stdout}");
    assert!(stdout.contains("third-party/sysdeps") && stdout.contains("a symlink on the way"), "{stdout}");
    assert_eq!(debs_contain(&dest, SECRET).await, Vec::<PathBuf>::new());

    // A chain of links inside the artifact that each look inside and lead out of the package.
    let artifacts = tmp.join("chain");
    let deep = ('a'..='p').map(String::from).collect::<Vec<_>>().join("/");
    let s = format!("lib/{deep}/s");
    let up16 = format!("->{}", vec![".."; 16].join("/"));
    let esc = format!("->{deep}/s/{}", vec![".."; 17].join("/"));
    let files = [("lib/rocm_sysdeps/libz.so.1", "zlib"), (s.as_str(), up16.as_str()), ("lib/esc", esc.as_str())];
    quarry_tests::native::artifact(&artifacts, "sysdeps_lib_generic", stage, &files);
    let dest = tmp.join("out-chain");
    let out = package_sysdeps(&artifacts, &dest).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "packaged the chain\n{stdout}");
    assert!(stdout.contains("lib/esc") && stdout.contains("leads outside the package"), "{stdout}");
    // The metapackage is still built; no package carries the link.
    assert_eq!(debs_contain(&dest, b"/lib/esc\0").await, Vec::<PathBuf>::new());
}
