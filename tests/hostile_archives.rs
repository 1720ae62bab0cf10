//! Symlink-chain archives against every command that unpacks artifacts: `r/a/u1 -> ..`,
//! `r/a/u1/u2 -> ..`, … each pass a textual check and together climb one directory per level.
//! A file or a hard link placed through the chain would land outside the destination (5 levels
//! reach beside `--dest-dir`, 14 far above it). `quarry package deb|rpm|python` and `quarry
//! artifacts fetch` (plain, `--bootstrap`, `--flatten`, with a valid `.sha256sum`) must refuse
//! the archive naming the member, exit non-zero, and leave nothing outside the destination.

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
