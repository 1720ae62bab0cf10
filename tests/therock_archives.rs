//! Mixed pipelines, both ways, with TheRock's archive rules (its `fileset_tool.py
//! artifact-archive` writer and `ArtifactPopulator` reader): `artifact_manifest.txt` first,
//! every other member strictly under a manifest root, regular files, directories, symlinks and
//! hard links only.
//!
//! - Archives written TheRock's way by the real `tar` (pax), `zstd` and `xz` (no member for a
//!   root, an empty root present only as its manifest line) are fetched by `quarry artifacts
//!   fetch`, as artifact directories, `--bootstrap` and `--flatten`: the trees match the
//!   sources byte for byte, modes, symlinks, hard links and the empty root included.
//! - Archives `quarry artifacts push` wrote are read by a small reader here that applies
//!   `ArtifactPopulator`'s rules (refusing, by name, a first member other than the manifest and
//!   any member not strictly under a root), and its tree matches the sources; pyzstd and
//!   Python's `tarfile` (TheRock's reader) read one of several zstd frames member by member.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use quarry_artifacts::ArchiveFormat;
use quarry_tests::{assert_success, quarry_bin, run, sha256_hex};

use crate::artifacts::TOPOLOGY;

const ROOT: &str = "third-party/sysdeps/stage";
const EMPTY_ROOT: &str = "third-party/sysdeps/empty";
const T: Duration = Duration::from_secs(120);

/// `build/artifacts/sysdeps_lib_generic` (two roots, one empty: a library, a symlink chain, a
/// hard link, an executable, an empty directory) and `sysdeps_dev_generic` (a header).
fn sources(build: &Path) -> Vec<PathBuf> {
    let lib = build.join("artifacts/sysdeps_lib_generic");
    let stage = lib.join(ROOT);
    for dir in ["lib/pkgconfig", "bin", "share/empty"] {
        std::fs::create_dir_all(stage.join(dir)).unwrap();
    }
    std::fs::create_dir_all(lib.join(EMPTY_ROOT)).unwrap();
    std::fs::write(lib.join("artifact_manifest.txt"), format!("{ROOT}\n{EMPTY_ROOT}\n")).unwrap();
    std::fs::write(stage.join("lib/libz.so.1.3"), b"\x7fELF zlib \x00\x01\x02").unwrap();
    std::os::unix::fs::symlink("libz.so.1.3", stage.join("lib/libz.so.1")).unwrap();
    std::os::unix::fs::symlink("libz.so.1", stage.join("lib/libz.so")).unwrap();
    std::fs::hard_link(stage.join("lib/libz.so.1.3"), stage.join("lib/libz-copy.so")).unwrap();
    std::fs::write(stage.join("lib/pkgconfig/zlib.pc"), "Name: zlib\n").unwrap();
    std::fs::write(stage.join("bin/zpipe"), "#!/bin/sh\necho z\n").unwrap();
    std::fs::set_permissions(stage.join("bin/zpipe"), std::fs::Permissions::from_mode(0o755)).unwrap();

    let dev = build.join("artifacts/sysdeps_dev_generic");
    std::fs::create_dir_all(dev.join(ROOT).join("include")).unwrap();
    std::fs::write(dev.join("artifact_manifest.txt"), format!("{ROOT}\n")).unwrap();
    std::fs::write(dev.join(ROOT).join("include/zlib.h"), "/* zlib */\n").unwrap();
    vec![lib, dev]
}

/// Every path under `dir` (sorted): directories with their mode, files with mode, link count
/// and sha256, symlinks with their target. Empty when `dir` does not exist.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut paths: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        paths.sort();
        for path in paths {
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o777;
            if meta.file_type().is_symlink() {
                out.push(format!("{rel} -> {}", std::fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                out.push(format!("{rel}/ {mode:o}"));
                walk(base, &path, out);
            } else {
                let sha = sha256_hex(&std::fs::read(&path).unwrap());
                out.push(format!("{rel} {mode:o} links={} {sha}", meta.nlink()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out
}

/// The archive `fileset_tool.py artifact-archive` writes for `artifact`, made with GNU `tar`
/// (pax, as Python's `tarfile`) and the `zstd` or `xz` tool: the manifest, then what lies under
/// each root, depth first, never a root itself.
async fn therock_archive(artifact: &Path, format: ArchiveFormat, out: &Path) -> Vec<u8> {
    let manifest = std::fs::read_to_string(artifact.join("artifact_manifest.txt")).unwrap();
    let mut names = vec!["artifact_manifest.txt".to_owned()];
    fn under(base: &Path, dir: &Path, names: &mut Vec<String>) {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        paths.sort();
        for path in paths {
            names.push(path.strip_prefix(base).unwrap().display().to_string());
            if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                under(base, &path, names);
            }
        }
    }
    for root in manifest.lines().filter(|l| !l.is_empty()) {
        under(artifact, &artifact.join(root), &mut names);
    }
    let list = out.with_extension("list");
    std::fs::write(&list, names.join("\n") + "\n").unwrap();
    let tar = out.with_extension("tar");
    let mut cmd = tokio::process::Command::new("tar");
    cmd.args(["--format=pax", "--no-recursion", "-C"])
        .arg(artifact)
        .arg("-cf")
        .arg(&tar)
        .arg("-T")
        .arg(&list)
        .env("LC_ALL", "C");
    assert_success(&run(cmd, Duration::from_secs(60)).await, "tar (GNU tar must be installed)");
    let (tool, flags): (&str, &[&str]) = match format {
        ArchiveFormat::Zstd => ("zstd", &["-q", "-3", "-c"]),
        ArchiveFormat::Xz => ("xz", &["-6", "-c"]),
    };
    let mut cmd = tokio::process::Command::new(tool);
    cmd.args(flags).arg(&tar);
    let compressed = run(cmd, Duration::from_secs(60)).await;
    assert_success(&compressed, &format!("{tool} (must be installed)"));
    compressed.stdout
}

fn quarry_artifacts(tmp: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.arg("artifacts")
        .args(args)
        .arg("--topology")
        .arg(tmp.join("BUILD_TOPOLOGY.toml"))
        .arg("--local-staging-dir")
        .arg(tmp.join("staging"))
        .args(["--run-id", "42", "--platform", "linux"])
        .env("SOURCE_DATE_EPOCH", "1795000000")
        .env_remove("THEROCK_LOCAL_STAGING_DIR")
        .env_remove("GITHUB_REPOSITORY")
        .env_remove("RELEASE_TYPE");
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn quarry_fetches_archives_written_the_therock_way() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("BUILD_TOPOLOGY.toml"), TOPOLOGY).unwrap();
    let artifacts = sources(&tmp.path().join("build"));
    let staging = tmp.path().join("staging/42-linux");
    std::fs::create_dir_all(&staging).unwrap();
    for (artifact, format) in artifacts.iter().zip([ArchiveFormat::Zstd, ArchiveFormat::Xz]) {
        let name = format!("{}{}", artifact.file_name().unwrap().to_str().unwrap(), format.extension());
        let bytes = therock_archive(artifact, format, &tmp.path().join(&name)).await;
        // The test's writer follows the rules it is checked against.
        therock_read(&bytes, format, None).unwrap();
        std::fs::write(staging.join(&name), &bytes).unwrap();
        std::fs::write(staging.join(format!("{name}.sha256sum")), format!("{}\n", sha256_hex(&bytes))).unwrap();
    }

    let plain = tmp.path().join("plain");
    let cmd = quarry_artifacts(tmp.path(), &["fetch", "--stage", "compiler", "--output-dir", plain.to_str().unwrap()]);
    let out = run(cmd, T).await;
    assert_success(&out, "artifacts fetch");
    for artifact in &artifacts {
        let name = artifact.file_name().unwrap();
        assert_eq!(tree(&plain.join("artifacts").join(name)), tree(artifact), "{name:?}: the artifact directory");
    }

    let boot = tmp.path().join("boot");
    let args = ["fetch", "--stage", "compiler", "--bootstrap", "--output-dir", boot.to_str().unwrap()];
    let out = run(quarry_artifacts(tmp.path(), &args), T).await;
    assert_success(&out, "artifacts fetch --bootstrap");
    let mut merged = tree(&artifacts[0].join(ROOT));
    merged.extend(tree(&artifacts[1].join(ROOT)));
    merged.sort();
    assert_eq!(tree(&boot.join(ROOT)), merged, "lib and dev share a root; both land");
    assert!(boot.join(EMPTY_ROOT).is_dir(), "the empty root is created");
    assert_eq!(tree(&boot.join(EMPTY_ROOT)), Vec::<String>::new());
    assert!(boot.join(format!("{ROOT}.prebuilt")).is_file() && boot.join(format!("{EMPTY_ROOT}.prebuilt")).is_file());

    let flat = tmp.path().join("flat");
    let args = ["fetch", "--stage", "compiler", "--flatten", "--output-dir", flat.to_str().unwrap()];
    let out = run(quarry_artifacts(tmp.path(), &args), T).await;
    assert_success(&out, "artifacts fetch --flatten");
    assert_eq!(tree(&flat), merged, "every root's contents merged into the output directory");
}

#[tokio::test(flavor = "multi_thread")]
async fn therock_rules_read_what_quarry_pushes() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("BUILD_TOPOLOGY.toml"), TOPOLOGY).unwrap();
    let build = tmp.path().join("build");
    let artifacts = sources(&build);
    for compression in ["zstd", "xz"] {
        let staging = tmp.path().join("staging");
        let _ = std::fs::remove_dir_all(&staging);
        let args = ["push", "--stage", "foundation", "--compression-type", compression, "--build-dir"];
        let cmd = quarry_artifacts(tmp.path(), &[&args[..], &[build.to_str().unwrap()]].concat());
        assert_success(&run(cmd, T).await, &format!("artifacts push --compression-type {compression}"));
        let format = if compression == "zstd" { ArchiveFormat::Zstd } else { ArchiveFormat::Xz };
        for artifact in &artifacts {
            let name = format!("{}{}", artifact.file_name().unwrap().to_str().unwrap(), format.extension());
            let bytes = std::fs::read(staging.join("42-linux").join(&name)).unwrap();
            let out = tmp.path().join(format!("populated-{compression}-{name}"));
            if let Err(e) = therock_read(&bytes, format, Some(&out)) {
                panic!("{name}: TheRock's rules refuse it: {e}");
            }
            let manifest = std::fs::read_to_string(artifact.join("artifact_manifest.txt")).unwrap();
            for root in manifest.lines() {
                assert_eq!(tree(&out.join(root)), tree(&artifact.join(root)), "{name}: {root}");
            }
        }
    }
}

/// pyzstd's `ZstdFile` under Python's `tarfile` (how TheRock's `ZstdTarFile` opens an archive)
/// reads an archive Quarry pushed whose zstd stream is several frames (one per 8 MiB of tar):
/// the members in order, each file's bytes as archived.
#[tokio::test]
async fn pyzstd_and_tarfile_read_a_pushed_archive_of_several_frames() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("BUILD_TOPOLOGY.toml"), TOPOLOGY).unwrap();
    let build = tmp.path().join("build");
    let artifacts = sources(&build);
    let lib = &artifacts[0];
    // 20 MiB that zstd shrinks little and a compressible file: three frames at least.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let noise: Vec<u8> = (0..20 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(lib.join(ROOT).join("lib/noise.bin"), &noise).unwrap();
    let args = ["push", "--stage", "foundation", "--build-dir", build.to_str().unwrap()];
    assert_success(&run(quarry_artifacts(tmp.path(), &args), T).await, "artifacts push");
    let name = format!("{}.tar.zst", lib.file_name().unwrap().to_str().unwrap());
    let archive = tmp.path().join("staging/42-linux").join(&name);
    let bytes = std::fs::read(&archive).unwrap();
    let frames = {
        let (mut rest, mut n) = (bytes.as_slice(), 0);
        while !rest.is_empty() {
            rest = &rest[zstd::zstd_safe::find_frame_compressed_size(rest).expect("a zstd frame")..];
            n += 1;
        }
        n
    };
    assert!(frames >= 3, "{name}: {frames} frame(s)");
    let script = "import hashlib, pyzstd, sys, tarfile\n\
                  with pyzstd.ZstdFile(sys.argv[1]) as z, tarfile.open(fileobj=z, mode='r:') as t:\n\
                  \x20   for m in t:\n\
                  \x20       data = t.extractfile(m).read() if m.isfile() else b''\n\
                  \x20       print(m.name, hashlib.sha256(data).hexdigest() if m.isfile() else m.type.decode())\n";
    let mut cmd = tokio::process::Command::new(quarry_tests::venv().join("bin/python"));
    cmd.args(["-c", script]).arg(&archive);
    let out = run(cmd, T).await;
    assert_success(&out, "pyzstd + tarfile");
    let listing = String::from_utf8_lossy(&out.stdout);
    let first = listing.lines().next().unwrap_or_default();
    assert!(first.starts_with("artifact_manifest.txt "), "{listing}");
    let noise_line = listing.lines().find(|l| l.contains("noise.bin")).unwrap_or_else(|| panic!("{listing}"));
    assert!(noise_line.ends_with(&sha256_hex(&noise)), "{noise_line}");
    // After the manifest, every member Quarry's own reader of TheRock's rules sees, Python
    // sees, in the same order.
    let ours = therock_read(&bytes, ArchiveFormat::Zstd, None).unwrap();
    let theirs: Vec<&str> = listing.lines().skip(1).filter_map(|l| l.rsplit_once(' ').map(|(n, _)| n)).collect();
    assert_eq!(theirs, ours.iter().map(|n| n.trim_end_matches('/')).collect::<Vec<_>>());
}

/// `ArtifactPopulator`'s reading of an archive (not flattened): the first member must be
/// `artifact_manifest.txt`; every other member must lie strictly under one of its roots (its
/// name without a trailing `/` starting with `root/`), else it is refused by name; files get
/// their exec bits over 0644, directories are made, symlinks keep their target, hard links
/// name their target under a root. With `dest`, members land at `dest/<root>/<path>`; returns
/// the member names.
fn therock_read(bytes: &[u8], format: ArchiveFormat, dest: Option<&Path>) -> Result<Vec<String>, String> {
    let reader: Box<dyn Read + '_> = match format {
        ArchiveFormat::Zstd => Box::new(zstd::stream::read::Decoder::new(bytes).unwrap()),
        ArchiveFormat::Xz => Box::new(xz2::read::XzDecoder::new(bytes)),
    };
    let mut archive = tar::Archive::new(reader);
    let mut entries = archive.entries().map_err(|e| e.to_string())?;
    let mut first = entries.next().ok_or("empty archive")?.map_err(|e| e.to_string())?;
    let first_name = String::from_utf8_lossy(&first.path_bytes()).into_owned();
    if first_name != "artifact_manifest.txt" {
        return Err(format!("must have artifact_manifest.txt as its first member, got {first_name:?}"));
    }
    let mut manifest = String::new();
    first.read_to_string(&mut manifest).map_err(|e| e.to_string())?;
    let roots: Vec<String> = manifest.lines().map(str::to_owned).collect();
    let mut names = Vec::new();
    for entry in entries {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let raw = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let name = raw.trim_end_matches('/').to_owned();
        if !roots.iter().any(|r| !r.is_empty() && name.starts_with(&format!("{r}/"))) {
            return Err(format!("encountered file not in manifest: {raw:?}"));
        }
        names.push(name.clone());
        let Some(dest) = dest else { continue };
        let path = dest.join(&name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let header = entry.header().clone();
        match header.entry_type() {
            tar::EntryType::Regular => {
                let mut data = Vec::new();
                entry.read_to_end(&mut data).unwrap();
                std::fs::write(&path, data).unwrap();
                let mode = 0o644 | (header.mode().unwrap() & 0o111);
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            tar::EntryType::Directory => std::fs::create_dir_all(&path).unwrap(),
            tar::EntryType::Symlink => {
                let target = entry.link_name().unwrap().ok_or("symlink without target")?.into_owned();
                std::os::unix::fs::symlink(target, &path).unwrap();
            }
            tar::EntryType::Link => {
                let target = String::from_utf8_lossy(&entry.link_name_bytes().unwrap()).into_owned();
                if !roots.iter().any(|r| !r.is_empty() && target.starts_with(&format!("{r}/"))) {
                    return Err(format!("hardlink target not in manifest: {raw:?} -> {target:?}"));
                }
                std::fs::hard_link(dest.join(&target), &path).unwrap();
            }
            other => return Err(format!("unhandled tar member {raw:?} ({other:?})")),
        }
    }
    Ok(names)
}
