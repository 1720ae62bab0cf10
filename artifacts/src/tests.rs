//! Round trips and hostile archives for [`crate::archive`] and [`crate::extract`].

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use crate::extract::wipe_roots;
use crate::*;

/// An artifact directory like `blas_lib_gfx942/`: two roots, a `.so` symlink chain, a hard
/// link, an executable, a nested directory.
fn artifact(dir: &Path) {
    fs::create_dir_all(dir.join("math-libs/BLAS/stage/lib/cmake")).unwrap();
    fs::create_dir_all(dir.join("base/stage/bin")).unwrap();
    fs::write(dir.join(MANIFEST), "math-libs/BLAS/stage\nbase/stage\n").unwrap();
    fs::write(dir.join("math-libs/BLAS/stage/lib/libblas.so.1.2"), b"ELF blas").unwrap();
    symlink("libblas.so.1.2", dir.join("math-libs/BLAS/stage/lib/libblas.so.1")).unwrap();
    symlink("libblas.so.1", dir.join("math-libs/BLAS/stage/lib/libblas.so")).unwrap();
    fs::hard_link(dir.join("math-libs/BLAS/stage/lib/libblas.so.1.2"), dir.join("math-libs/BLAS/stage/lib/copy.so"))
        .unwrap();
    fs::write(dir.join("math-libs/BLAS/stage/lib/cmake/blas-config.cmake"), "set(X 1)\n").unwrap();
    fs::write(dir.join("base/stage/bin/tool"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(dir.join("base/stage/bin/tool"), fs::Permissions::from_mode(0o755)).unwrap();
}

fn pack(dir: &Path, format: ArchiveFormat, threads: u32) -> (Vec<u8>, ArchiveReport) {
    let opts = ArchiveOptions { format, level: None, threads, mtime: 1_700_000_000 };
    write_archive(dir, Vec::new(), &opts).unwrap()
}

fn listing(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            let rel = path.strip_prefix(base).unwrap().display().to_string();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.push(format!("{rel} -> {}", fs::read_link(&path).unwrap().display()));
            } else if meta.is_dir() {
                out.push(format!("{rel}/"));
                walk(base, &path, out);
            } else {
                let mode = meta.permissions().mode() & 0o777;
                out.push(format!("{rel} {mode:o} {}", String::from_utf8_lossy(&fs::read(&path).unwrap())));
            }
        }
    }
    walk(root, root, &mut out);
    out
}

#[test]
fn round_trip_is_exact_and_reproducible() {
    for format in [ArchiveFormat::Zstd, ArchiveFormat::Xz] {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("blas_lib_gfx942");
        artifact(&src);
        let (bytes, report) = pack(&src, format, 1);
        let (again, _) = pack(&src, format, 4);
        assert_eq!(bytes, again, "same input, same bytes, whatever the thread count ({format:?})");
        assert_eq!(report.size, bytes.len() as u64);
        assert_eq!(report.members, 9, "no member for the two roots");
        assert_eq!(read_manifest(bytes.as_slice(), format).unwrap(), ["math-libs/BLAS/stage", "base/stage"]);

        let out = tmp.path().join("out/blas_lib_gfx942");
        extract(bytes.as_slice(), format, &out, ExtractMode::Tree, Limits::default()).unwrap();
        assert_eq!(listing(&src), listing(&out));
        let (repacked, _) = pack(&out, format, 2);
        assert_eq!(bytes, repacked, "extract then pack gives the same archive");
    }
}

#[test]
fn bootstrap_and_flatten_place_roots() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("blas_lib_gfx942");
    artifact(&src);
    let (bytes, _) = pack(&src, ArchiveFormat::Zstd, 2);

    let build = tmp.path().join("build");
    fs::create_dir_all(build.join("base/stage/stale")).unwrap();
    let roots = read_manifest(bytes.as_slice(), ArchiveFormat::Zstd).unwrap();
    wipe_roots(&build, &roots).unwrap();
    extract(bytes.as_slice(), ArchiveFormat::Zstd, &build, ExtractMode::Bootstrap, Limits::default()).unwrap();
    assert!(!build.join("base/stage/stale").exists(), "bootstrap wiped the root");
    assert!(build.join("base/stage.prebuilt").is_file() && build.join("math-libs/BLAS/stage.prebuilt").is_file());
    assert_eq!(fs::read_link(build.join("math-libs/BLAS/stage/lib/libblas.so")).unwrap(), Path::new("libblas.so.1"));

    let flat = tmp.path().join("flat");
    extract(bytes.as_slice(), ArchiveFormat::Zstd, &flat, ExtractMode::Flatten, Limits::default()).unwrap();
    assert!(flat.join("lib/libblas.so.1.2").is_file() && flat.join("bin/tool").is_file());
    assert!(!flat.join(MANIFEST).exists());
}

/// TheRock's `ArtifactPopulator` rule: the manifest first, every other member strictly under a
/// root (no member for a root or its parents); an empty root is only its manifest line and is
/// created on extraction; an archive with root members (Quarry's earlier shape) still extracts.
#[test]
fn members_lie_strictly_under_roots_and_empty_roots_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("blas_lib_gfx942");
    artifact(&src);
    fs::create_dir_all(src.join("empty/stage")).unwrap();
    fs::write(src.join(MANIFEST), "math-libs/BLAS/stage\nbase/stage\nempty/stage\n").unwrap();
    let (bytes, _) = pack(&src, ArchiveFormat::Zstd, 2);
    let mut archive = tar::Archive::new(zstd::stream::read::Decoder::new(bytes.as_slice()).unwrap());
    let names: Vec<String> = archive
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path_bytes().into_owned())
        .map(|n| String::from_utf8(n).unwrap())
        .collect();
    assert_eq!(names[0], MANIFEST);
    let roots = ["math-libs/BLAS/stage/", "base/stage/", "empty/stage/"];
    for name in &names[1..] {
        let name = name.trim_end_matches('/');
        assert!(roots.iter().any(|r| name.starts_with(r)), "member {name:?} is not strictly under a root: {names:?}");
    }
    for mode in [ExtractMode::Tree, ExtractMode::Bootstrap] {
        let out = tmp.path().join(format!("{mode:?}"));
        extract(bytes.as_slice(), ArchiveFormat::Zstd, &out, mode, Limits::default()).unwrap();
        assert!(out.join("empty/stage").is_dir(), "{mode:?}: the empty root is created");
        let blas = "math-libs/BLAS/stage";
        assert_eq!(listing(&src.join(blas)), listing(&out.join(blas)), "{mode:?}");
    }

    use tar::EntryType::{Directory, Regular};
    let old: Vec<Member<'_>> = vec![
        (MANIFEST, Regular, "", b"stage\nempty\n"),
        ("stage/", Directory, "", b""),
        ("stage/lib/", Directory, "", b""),
        ("stage/lib/a", Regular, "", b"a"),
        ("empty/", Directory, "", b""),
    ];
    let out = tmp.path().join("old");
    extract(hostile(&old).as_slice(), ArchiveFormat::Zstd, &out, ExtractMode::Tree, Limits::default()).unwrap();
    assert_eq!(fs::read(out.join("stage/lib/a")).unwrap(), b"a");
    assert!(out.join("empty").is_dir());
}

/// A raw tar member, its name written byte for byte (the tar crate refuses to build hostile
/// names itself).
fn raw(tar: &mut Vec<u8>, name: &str, kind: tar::EntryType, link: &str, data: &[u8]) {
    let mut h = tar::Header::new_old();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    h.set_cksum();
    tar.extend_from_slice(h.as_bytes());
    tar.extend_from_slice(data);
    tar.resize(tar.len().div_ceil(512) * 512, 0);
}

/// A member: name, kind, link target, data.
type Member<'a> = (&'a str, tar::EntryType, &'a str, &'a [u8]);

fn hostile(members: &[Member<'_>]) -> Vec<u8> {
    let mut tar = Vec::new();
    for (name, kind, link, data) in members {
        raw(&mut tar, name, *kind, link, data);
    }
    tar.extend_from_slice(&[0; 1024]);
    zstd::encode_all(tar.as_slice(), 3).unwrap()
}

#[test]
fn hostile_archives_are_refused_and_nothing_lands_outside() {
    use tar::EntryType::{Block, Directory, Link, Regular, Symlink};
    let manifest: Member<'_> = (MANIFEST, Regular, "", b"stage\n");
    let cases: Vec<(&str, Vec<Member<'_>>, &str)> = vec![
        ("dotdot", vec![manifest, ("stage/../../evil", Regular, "", b"x")], "`..`"),
        ("absolute", vec![manifest, ("/tmp/evil", Regular, "", b"x")], "absolute"),
        ("outside roots", vec![manifest, ("other/file", Regular, "", b"x")], "outside every root"),
        ("escaping symlink", vec![manifest, ("stage/l", Symlink, "../../etc", b"")], "leaves its root"),
        ("absolute symlink", vec![manifest, ("stage/l", Symlink, "/etc/passwd", b"")], "leaves its root"),
        ("hard link outside", vec![manifest, ("stage/h", Link, "/etc/passwd", b"")], "leaves its root"),
        ("device", vec![manifest, ("stage/dev", Block, "", b"")], "not a regular file"),
        ("no manifest", vec![("stage/file", Regular, "", b"x")], "first member"),
        ("manifest root escapes", vec![(MANIFEST, Regular, "", b"../up\n")], "not a relative path"),
        ("manifest not first", vec![("stage/", Directory, "", b""), manifest], "first member"),
    ];
    for (what, members, expect) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let bytes = hostile(&members);
        for mode in [ExtractMode::Tree, ExtractMode::Bootstrap, ExtractMode::Flatten] {
            let dest = tmp.path().join("a/b/dest");
            let err = extract(bytes.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap_err();
            assert!(err.to_string().contains(expect), "{what} ({mode:?}): {err}");
            let mut everything = listing(tmp.path());
            everything.retain(|p| !p.starts_with("a/b/dest/") && !["a/", "a/b/", "a/b/dest/"].contains(&p.as_str()));
            assert!(everything.is_empty(), "{what} ({mode:?}) left {everything:?}");
            assert!(mode != ExtractMode::Tree || !dest.exists(), "a refused tree extraction leaves nothing");
        }
    }
}

#[test]
fn limits_bound_members_and_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("blas_lib_gfx942");
    artifact(&src);
    let (bytes, _) = pack(&src, ArchiveFormat::Xz, 1);
    let few = Limits { max_members: 3, max_bytes: u64::MAX, ..Limits::default() };
    let err = extract(bytes.as_slice(), ArchiveFormat::Xz, &tmp.path().join("x"), ExtractMode::Tree, few).unwrap_err();
    assert!(err.to_string().contains("3 members"), "{err}");
    let small = Limits { max_members: 100, max_bytes: 4, ..Limits::default() };
    let err =
        extract(bytes.as_slice(), ArchiveFormat::Xz, &tmp.path().join("x"), ExtractMode::Tree, small).unwrap_err();
    assert!(err.to_string().contains("4 bytes"), "{err}");
    assert!(!tmp.path().join("x").exists());

    let mut big = Vec::new();
    raw(&mut big, MANIFEST, tar::EntryType::Regular, "", &vec![b'a'; (1 << 20) + 1]);
    big.extend_from_slice(&[0; 1024]);
    let big = zstd::encode_all(big.as_slice(), 3).unwrap();
    let err = read_manifest(big.as_slice(), ArchiveFormat::Zstd).unwrap_err();
    assert!(err.to_string().contains("1 MiB"), "{err}");
}

#[test]
fn corrupt_and_truncated_archives_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("blas_lib_gfx942");
    artifact(&src);
    let (bytes, _) = pack(&src, ArchiveFormat::Zstd, 1);
    let dest = tmp.path().join("out");
    assert!(
        extract(&bytes[..bytes.len() / 2], ArchiveFormat::Zstd, &dest, ExtractMode::Tree, Limits::default()).is_err()
    );
    assert!(extract(&b"not an archive"[..], ArchiveFormat::Xz, &dest, ExtractMode::Tree, Limits::default()).is_err());
    assert!(!dest.exists());
}

#[test]
fn a_manifest_root_missing_from_the_directory_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("blas_lib_gfx942");
    artifact(&src);
    fs::write(src.join(MANIFEST), "math-libs/BLAS/stage\nnot/there\n").unwrap();
    let err = write_archive(&src, Vec::new(), &ArchiveOptions::new(ArchiveFormat::Zstd)).unwrap_err();
    assert!(err.to_string().contains("not/there"), "{err}");
}

fn hostile_xz(members: &[Member<'_>]) -> Vec<u8> {
    let mut tar = Vec::new();
    for (name, kind, link, data) in members {
        raw(&mut tar, name, *kind, link, data);
    }
    tar.extend_from_slice(&[0; 1024]);
    let mut out = Vec::new();
    let mut encoder = xz2::write::XzEncoder::new(&mut out, 1);
    std::io::Write::write_all(&mut encoder, &tar).unwrap();
    encoder.finish().unwrap();
    out
}

/// `r/a/u1 -> ..`, `r/a/u1/u2 -> ..`, …: each link passes the textual check, and together they
/// climb one directory per level once followed.
fn chain_names(levels: usize) -> Vec<String> {
    (1..=levels).map(|i| format!("r/a/{}", (1..=i).map(|j| format!("u{j}")).collect::<Vec<_>>().join("/"))).collect()
}

#[test]
fn symlink_chains_never_climb_out() {
    use tar::EntryType::{Link, Regular, Symlink};
    for levels in [5, 14] {
        let links = chain_names(levels);
        let escaped = format!("{}/escaped", links.last().unwrap());
        let secret = format!("{}/secret", links[links.len() - 3]);
        let manifest: Member<'_> = (MANIFEST, Regular, "", b"r\n");
        let mut write_through: Vec<Member<'_>> = vec![manifest];
        write_through.extend(links.iter().map(|l| (l.as_str(), Symlink, "..", &b""[..])));
        let mut hard_link = write_through.clone();
        write_through.push((escaped.as_str(), Regular, "", b"pwned"));
        hard_link.push(("r/stolen", Link, secret.as_str(), b""));
        for (what, members) in [("file through the chain", &write_through), ("hard link through the chain", &hard_link)]
        {
            for (format, bytes) in [(ArchiveFormat::Zstd, hostile(members)), (ArchiveFormat::Xz, hostile_xz(members))] {
                for mode in [ExtractMode::Tree, ExtractMode::Bootstrap, ExtractMode::Flatten] {
                    let tmp = tempfile::tempdir().unwrap();
                    // Deep enough that 14 levels would reach far above the destination.
                    let dest = tmp.path().join("d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/d13/d14/dest");
                    fs::create_dir_all(&dest).unwrap();
                    fs::write(tmp.path().join("d1/secret"), "outside").unwrap();
                    let err = extract(bytes.as_slice(), format, &dest, mode, Limits::default()).unwrap_err();
                    let text = err.to_string();
                    assert!(text.contains("member \"r/"), "{levels} levels, {what}, {format:?}, {mode:?}: {text}");
                    let outside: Vec<String> = listing(tmp.path())
                        .into_iter()
                        .filter(|p| !p.starts_with("d1/d2/d3/d4/d5/d6/d7/d8/d9/d10/d11/d12/d13/d14/dest/"))
                        .filter(|p| p.contains("escaped") || p.contains("stolen") || p.contains("pwned"))
                        .collect();
                    assert!(outside.is_empty(), "{levels} levels, {what}, {format:?}, {mode:?}: {outside:?}");
                }
            }
        }
    }
}

#[test]
fn links_from_one_archive_are_never_followed_by_the_next() {
    use tar::EntryType::{Regular, Symlink};
    let tmp = tempfile::tempdir().unwrap();
    let manifest: Member<'_> = (MANIFEST, Regular, "", b"r\n");
    // One link that stays inside: accepted, and left on disk.
    let first = hostile(&[manifest, ("r/a/u1", Symlink, "..", b"")]);
    // Later archives into the same directory: a link and a file through it.
    let link_through = hostile(&[manifest, ("r/a/u1/u2", Symlink, "..", b"")]);
    let file_through = hostile(&[manifest, ("r/a/u1/escaped", Regular, "", b"pwned")]);
    for mode in [ExtractMode::Flatten, ExtractMode::Bootstrap] {
        let dest = tmp.path().join(format!("x/y/{mode:?}"));
        extract(first.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap();
        for second in [&link_through, &file_through] {
            let err = extract(second.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap_err();
            assert!(err.to_string().contains("crosses a symlink"), "{mode:?}: {err}");
        }
    }
    assert!(
        listing(tmp.path()).iter().all(|p| !p.contains("escaped") && !p.contains("u2")),
        "{:?}",
        listing(tmp.path())
    );

    // Deferred: archives unpacked into one directory place files first, links last, so the
    // file lands in a real directory and the link that would have redirected it is refused.
    let fresh = tmp.path().join("p/q/fresh");
    let (_, a) =
        extract_deferred(first.as_slice(), ArchiveFormat::Zstd, &fresh, ExtractMode::Flatten, Limits::default())
            .unwrap();
    let (_, b) =
        extract_deferred(file_through.as_slice(), ArchiveFormat::Zstd, &fresh, ExtractMode::Flatten, Limits::default())
            .unwrap();
    assert_eq!((a.len(), b.len()), (1, 0));
    let err = a.create().unwrap_err();
    assert!(err.to_string().contains("replaces a directory"), "{err}");
    b.create().unwrap();
    let placed: Vec<String> = listing(tmp.path()).into_iter().filter(|p| p.contains("escaped")).collect();
    assert_eq!(placed, ["p/q/fresh/a/u1/escaped 644 pwned"]);
}

#[test]
fn members_windows_cannot_hold_are_refused_by_name() {
    use tar::EntryType::{Directory, Regular};
    let manifest: Member<'_> = (MANIFEST, Regular, "", b"bin\n");
    let portable = Limits { portable_names: true, ..Limits::default() };
    for (bad, why) in [
        ("bin/CON", "device name"),
        ("bin/aux.txt", "device name"),
        ("bin/NUL.tar", "device name"),
        ("bin/com7.dll", "device name"),
        ("bin/lpt1", "device name"),
        ("bin/trailing.", "dot or a space"),
        ("bin/trailing ", "dot or a space"),
        ("bin/a:b", "forbids"),
        ("bin/what?", "forbids"),
        ("bin/pipe|d", "forbids"),
        ("bin/AMDHIP64.DLL", "only in case"),
    ] {
        let members: Vec<Member<'_>> = vec![
            manifest,
            ("bin", Directory, "", b""),
            ("bin/amdhip64.dll", Regular, "", b"MZ"),
            (bad, Regular, "", b"x"),
        ];
        let bytes = hostile(&members);
        for mode in [ExtractMode::Tree, ExtractMode::Bootstrap, ExtractMode::Flatten] {
            let tmp = tempfile::tempdir().unwrap();
            let dest = tmp.path().join("out");
            let err = extract(bytes.as_slice(), ArchiveFormat::Zstd, &dest, mode, portable).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(&format!("member {bad:?}")) && text.contains(why), "{bad:?} {mode:?}: {text}");
            assert!(text.contains("cannot exist on Windows"), "{text}");
        }
        // Off (a Linux extraction of a Linux artifact), Linux holds them all.
        let tmp = tempfile::tempdir().unwrap();
        let relaxed = Limits { portable_names: false, ..Limits::default() };
        extract(bytes.as_slice(), ArchiveFormat::Zstd, &tmp.path().join("out"), ExtractMode::Tree, relaxed).unwrap();
    }
    assert_eq!(Limits::default().portable_names, cfg!(windows), "on by default exactly on Windows");
}

/// `stage/a/b/…/p/s -> ../…` (16 levels up: back at `stage`), then `stage/esc -> a/…/p/s/`
/// and 17 `..`: both pass the textual check, and `esc` resolves 17 levels above `stage`. (One
/// letter per level: the names fit an old tar header.)
fn sixteen_level_chain() -> (String, String, String) {
    let deep = ('a'..='p').map(String::from).collect::<Vec<_>>().join("/");
    let s = format!("stage/{deep}/s");
    let up16 = vec![".."; 16].join("/");
    let esc = format!("{deep}/s/{}", vec![".."; 17].join("/"));
    assert!(link_stays_inside(&s["stage/".len()..], &up16) && link_stays_inside("esc", &esc));
    (s, up16, esc)
}

/// Every path under `dir` named `name`, links included (not followed).
fn named(dir: &Path, name: &str) -> Vec<String> {
    listing(dir)
        .into_iter()
        .filter(|p| {
            let path = p.split(" -> ").next().unwrap_or(p).split(' ').next().unwrap_or(p).trim_end_matches('/');
            path.rsplit('/').next() == Some(name)
        })
        .collect()
}

#[test]
fn a_chain_resolving_outside_is_refused_in_every_mode() {
    use tar::EntryType::{Regular, Symlink};
    let (s, up16, esc) = sixteen_level_chain();
    let manifest: Member<'_> = (MANIFEST, Regular, "", b"stage\n");
    let bytes =
        hostile(&[manifest, (s.as_str(), Symlink, up16.as_str(), b""), ("stage/esc", Symlink, esc.as_str(), b"")]);
    for mode in [ExtractMode::Tree, ExtractMode::Bootstrap, ExtractMode::Flatten] {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("a/b/dest");
        let err = extract(bytes.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("member \"stage/esc\"") && text.contains("climbs above its root"), "{mode:?}: {text}");
        assert!(named(tmp.path(), "esc").is_empty(), "{mode:?}: {:?}", named(tmp.path(), "esc"));
    }
}

#[test]
fn chains_across_archives_sharing_a_bootstrap_destination_are_refused() {
    use tar::EntryType::{Regular, Symlink};
    let (s, up16, esc) = sixteen_level_chain();
    let manifest: Member<'_> = (MANIFEST, Regular, "", b"stage\n");
    let first = hostile(&[manifest, (s.as_str(), Symlink, up16.as_str(), b"")]);
    let second = hostile(&[manifest, ("stage/esc", Symlink, esc.as_str(), b"")]);
    for mode in [ExtractMode::Bootstrap, ExtractMode::Flatten] {
        // One after the other (a later fetch into the same build directory).
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("build");
        extract(first.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap();
        let err = extract(second.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap_err();
        assert!(err.to_string().contains("member \"stage/esc\""), "{mode:?}: {err}");
        assert!(named(tmp.path(), "esc").is_empty(), "{mode:?}");

        // Deferred, as `quarry artifacts fetch` does: both place their members, then their
        // links are made archive after archive.
        let dest = tmp.path().join("deferred");
        let (_, a) = extract_deferred(first.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap();
        let (_, b) = extract_deferred(second.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap();
        a.create().unwrap();
        let err = b.create().unwrap_err();
        assert!(err.to_string().contains("member \"stage/esc\""), "{mode:?}: {err}");
        assert!(named(tmp.path(), "esc").is_empty(), "{mode:?}");
    }
}

#[test]
fn a_link_through_a_link_made_after_it_is_refused() {
    use tar::EntryType::{Regular, Symlink};
    let manifest: Member<'_> = (MANIFEST, Regular, "", b"r\n");
    // `r/e -> l/..` is read while `r/l` does not exist; `r/l -> d1/s` and `r/d1/s -> ..` then
    // make `l` lead to `r`, and `e` to the directory above `r`.
    let later =
        [manifest, ("r/e", Symlink, "l/..", b""), ("r/l", Symlink, "d1/s", b""), ("r/d1/s", Symlink, "..", b"")];
    let earlier =
        [manifest, ("r/d1/s", Symlink, "..", b""), ("r/l", Symlink, "d1/s", b""), ("r/e", Symlink, "l/..", b"")];
    for (what, members, reason) in
        [("made later", &later, "does not exist"), ("made earlier", &earlier, "climbs above its root")]
    {
        let bytes = hostile(members);
        for mode in [ExtractMode::Tree, ExtractMode::Bootstrap, ExtractMode::Flatten] {
            let tmp = tempfile::tempdir().unwrap();
            let err = extract(bytes.as_slice(), ArchiveFormat::Zstd, &tmp.path().join("out"), mode, Limits::default())
                .unwrap_err();
            let text = err.to_string();
            assert!(text.contains("member \"r/e\"") && text.contains(reason), "{what}, {mode:?}: {text}");
            assert!(named(tmp.path(), "e").is_empty(), "{what}, {mode:?}");
        }
    }
}

#[test]
fn a_link_is_never_replaced() {
    use tar::EntryType::{Regular, Symlink};
    let manifest: Member<'_> = (MANIFEST, Regular, "", b"r\n");
    // `e -> a/s/..` leads to `r` while `a/s -> .`; were `a/s` then made `-> ..` (inside on its
    // own), `e` would lead above `r`.
    let first = hostile(&[manifest, ("r/a/s", Symlink, ".", b""), ("r/e", Symlink, "a/s/..", b"")]);
    let relink = hostile(&[manifest, ("r/a/s", Symlink, "..", b"")]);
    let refile = hostile(&[manifest, ("r/a/s", Regular, "", b"x")]);
    let same = hostile(&[manifest, ("r/a/s", Symlink, ".", b"")]);
    for mode in [ExtractMode::Bootstrap, ExtractMode::Flatten] {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("out");
        extract(first.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap();
        for second in [&relink, &refile] {
            let err = extract(second.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap_err();
            assert!(err.to_string().contains("replaces a symlink"), "{mode:?}: {err}");
        }
        extract(same.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap();
        let s = if mode == ExtractMode::Flatten { dest.join("a/s") } else { dest.join("r/a/s") };
        assert_eq!(fs::read_link(s).unwrap(), Path::new("."), "{mode:?}");
    }
}

#[test]
fn a_therock_like_tree_with_links_through_a_directory_link_still_unpacks() {
    use tar::EntryType::{Directory, Regular, Symlink};
    let manifest: Member<'_> = (MANIFEST, Regular, "", b"stage\n");
    let members = [
        manifest,
        ("stage/lib", Directory, "", b""),
        ("stage/lib/libfoo.so.1.2", Regular, "", b"ELF foo"),
        ("stage/opt/llvm/bin/clang", Regular, "", b"ELF clang"),
        ("stage/bin/amdclang", Symlink, "clang", b""),
        ("stage/bin/clang", Symlink, "../lib/llvm/bin/clang", b""),
        ("stage/lib/libfoo.so", Symlink, "libfoo.so.1", b""),
        ("stage/lib/libfoo.so.1", Symlink, "libfoo.so.1.2", b""),
        ("stage/lib/llvm", Symlink, "../opt/llvm", b""),
        ("stage/lib/cmake", Symlink, "llvm/../../lib", b""),
        ("stage/include", Symlink, "opt/llvm/include", b""),
    ];
    let bytes = hostile(&members);
    for mode in [ExtractMode::Tree, ExtractMode::Bootstrap, ExtractMode::Flatten] {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("out");
        extract(bytes.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap();
        let stage = if mode == ExtractMode::Flatten { dest.clone() } else { dest.join("stage") };
        assert_eq!(fs::read(stage.join("bin/clang")).unwrap(), b"ELF clang", "{mode:?}");
        assert_eq!(fs::read(stage.join("bin/amdclang")).unwrap(), b"ELF clang", "{mode:?}");
        assert_eq!(fs::read(stage.join("lib/libfoo.so")).unwrap(), b"ELF foo", "{mode:?}");
        assert_eq!(fs::read(stage.join("lib/cmake/libfoo.so")).unwrap(), b"ELF foo", "{mode:?}");
        assert_eq!(fs::read_link(stage.join("include")).unwrap(), Path::new("opt/llvm/include"));
    }
}

#[test]
fn wiping_roots_never_goes_through_a_link() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir_all(outside.join("victim")).unwrap();
    fs::write(outside.join("victim/sentinel"), "keep").unwrap();
    let build = tmp.path().join("build");
    fs::create_dir_all(build.join("stage")).unwrap();
    // A link an older extractor let through, leading outside the build directory.
    symlink(&outside, build.join("stage/esc")).unwrap();
    fs::write(build.join("keep-me"), "x").unwrap();
    let roots = vec!["other".to_owned(), "stage/esc/victim".to_owned()];
    fs::create_dir_all(build.join("other")).unwrap();
    let err = wipe_roots(&build, &roots).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("stage/esc") && text.contains("symlink"), "{text}");
    assert_eq!(fs::read_to_string(outside.join("victim/sentinel")).unwrap(), "keep");
    assert!(build.join("other").is_dir(), "nothing is wiped when one root is refused");

    // A root that is itself a link is removed as a link; what it points at stays.
    let roots = vec!["stage/esc".to_owned()];
    wipe_roots(&build, &roots).unwrap();
    assert!(fs::symlink_metadata(build.join("stage/esc")).is_err());
    assert_eq!(fs::read_to_string(outside.join("victim/sentinel")).unwrap(), "keep");
}

/// A zstd archive whose one member is `size` zero bytes.
fn zeros(size: u64) -> Vec<u8> {
    let encoder = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    let mut tar = tar::Builder::new(encoder);
    let mut h = tar::Header::new_gnu();
    h.set_size(5);
    h.set_mode(0o644);
    h.set_cksum();
    tar.append_data(&mut h, MANIFEST, &b"zero\n"[..]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_cksum();
    tar.append_data(&mut h, "zero/file", std::io::Read::take(std::io::repeat(0), size)).unwrap();
    tar.into_inner().unwrap().finish().unwrap()
}

#[test]
fn a_small_archive_that_expands_hugely_is_refused() {
    let bytes = zeros(256 << 20);
    assert!(bytes.len() < 64 << 10, "{} bytes", bytes.len());
    for mode in [ExtractMode::Tree, ExtractMode::Bootstrap, ExtractMode::Flatten] {
        let tmp = tempfile::tempdir().unwrap();
        let dest = tmp.path().join("out");
        let err = extract(bytes.as_slice(), ArchiveFormat::Zstd, &dest, mode, Limits::default()).unwrap_err();
        assert!(err.to_string().contains("expands beyond the limit of 200:1"), "{mode:?}: {err}");
        let file = if mode == ExtractMode::Flatten { dest.join("file") } else { dest.join("zero/file") };
        let written: u64 = fs::metadata(file).map_or(0, |m| m.len());
        assert!(written <= (65 << 20), "{mode:?}: {written} bytes written");
    }
}
