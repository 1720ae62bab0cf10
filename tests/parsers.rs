//! Parsers of untrusted bytes against the real tools and at their limits: `.deb` control
//! paragraphs read as `dpkg-deb -f` reads them (hostile files built here), a wheel whose
//! central directory is over the member limit refused from its end record, sdists made by GNU
//! tar checked through a store, and the regression inputs the fuzz targets (`fuzz/`) found.

use std::io::Write as _;
use std::process::Command;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::FutureExt as _;
use quarry_index::deb::{DebControl, DebReadError, MemorySource, read_deb_control};
use quarry_store::{Key, MemoryStore, PutOptions, Store, StoreExt as _};

/// A `.deb` as dpkg-deb lays it out, with `control` as given byte for byte (uncompressed
/// `control.tar` and `data.tar`, which dpkg-deb reads).
fn deb_with_control(control: &[u8]) -> Vec<u8> {
    let tar_of = |members: &[(&str, &[u8])]| {
        let mut tar = tar::Builder::new(Vec::new());
        for (name, data) in members {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_mtime(1_700_000_000);
            header.set_entry_type(tar::EntryType::Regular);
            tar.append_data(&mut header, name, *data).expect("tar member");
        }
        tar.into_inner().expect("tar")
    };
    let members: [(&str, Vec<u8>); 3] = [
        ("debian-binary", b"2.0\n".to_vec()),
        ("control.tar", tar_of(&[("./control", control)])),
        ("data.tar", tar_of(&[("./usr/share/doc/x", b"x")])),
    ];
    let mut out = b"!<arch>\n".to_vec();
    for (name, data) in &members {
        writeln!(out, "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`", name, 0, 0, 0, 100644, data.len()).expect("ar header");
        out.extend_from_slice(data);
        if data.len() % 2 == 1 {
            out.push(b'\n');
        }
    }
    out
}

fn quarry_reads(deb: &[u8]) -> Result<DebControl, DebReadError> {
    let mut source = MemorySource(Bytes::copy_from_slice(deb));
    read_deb_control(&mut source).now_or_never().expect("memory reads are ready at once")
}

/// What `dpkg-deb -f` says about `fields` of the package: its output, or None when it refuses
/// the control file.
fn dpkg_reads(path: &std::path::Path, fields: &[&str]) -> Option<String> {
    let out = Command::new("dpkg-deb").arg("-f").arg(path).args(fields).output().expect("dpkg-deb runs");
    out.status.success().then(|| String::from_utf8(out.stdout).expect("utf-8"))
}

const HEAD: &str = "Package: hello\nVersion: 1.0-1\nArchitecture: all\nMaintainer: Q <q@example.com>\n";

/// Control files and whether Quarry may refuse one dpkg accepts (stricter on purpose).
fn control_cases() -> Vec<(String, bool)> {
    let head = |tail: &str| format!("{HEAD}{tail}");
    vec![
        // Issue #14: a tab starts a continuation line, not a new field.
        (head("Description: x\n\tPackage: evil\n"), false),
        (head("Description: x\n\tVersion: 9\n more\n"), false),
        (head("Description: short\n long one\n .\n long two\n"), false),
        // Duplicates, in any case.
        (head("Package: evil\n"), false),
        (head("X-A: 1\nx-a: 2\n"), false),
        (head("architecture: amd64\n"), false),
        // dpkg's own refusals.
        (head("Description: x\n \n more\n"), false),
        (head("Description: x\n\t \n"), false),
        (head("-X: y\n"), false),
        (head("NoColon\n"), false),
        (head("X-Y:\n"), false),
        (format!("# comment\n{HEAD}"), false),
        (head("# comment\n"), false),
        (format!(" {HEAD}"), false),
        (HEAD.trim_end().to_owned(), false),
        (head("\nPackage: two\nVersion: 1\nArchitecture: all\n"), false),
        // Spacing dpkg accepts and means the same by.
        (format!("\n\n{HEAD}\n\n"), false),
        ("Package : hello\nVersion:1.0\nArchitecture:\tall\nX-Empty:\nDescription: a  \n b \n".to_owned(), false),
        (head("X-Tab\t: v\n"), false),
        // Accepted by dpkg, refused by Quarry: carriage returns and other control characters
        // (dpkg counts them as whitespace, so `\r` starts a continuation and `^Z` ends the file).
        (head("Description: x\n\rX-A: 1\n"), true),
        (head("X-A: 1\r\n"), true),
        (head("Description: x\n\x0bX-A: 1\n"), true),
        (head("Description: x\n\x1aX-B: 2\n"), true),
        // Field names that are not printable ASCII.
        (head("X-\u{e9}: x\n"), true),
    ]
}

#[test]
fn deb_control_files_read_as_dpkg_deb_reads_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut accepted = 0;
    for (i, (control, stricter)) in control_cases().into_iter().enumerate() {
        let deb = deb_with_control(control.as_bytes());
        let path = dir.path().join(format!("case{i}.deb"));
        std::fs::write(&path, &deb).expect("write deb");
        let dpkg_accepts = dpkg_reads(&path, &["Package"]).is_some();
        match quarry_reads(&deb) {
            Ok(parsed) => {
                accepted += 1;
                // Every field Quarry read, with the value Quarry read, is what dpkg-deb prints.
                let names: Vec<&str> = parsed.fields.iter().map(|(n, _)| n.as_str()).collect();
                let dpkg = dpkg_reads(&path, &names).unwrap_or_else(|| panic!("dpkg-deb refuses {control:?}"));
                let ours: String = parsed.fields.iter().map(|(n, v)| format!("{n}: {v}\n")).collect();
                assert_eq!(ours, dpkg, "fields of {control:?}");
            }
            Err(e) => assert!(
                !dpkg_accepts || stricter,
                "Quarry refuses what dpkg-deb accepts ({e}), and is not meant to: {control:?}"
            ),
        }
        if !dpkg_accepts {
            assert!(quarry_reads(&deb).is_err(), "dpkg-deb refuses {control:?}");
        }
    }
    assert_eq!(accepted, 6, "the accepted cases");
}

#[test]
fn a_tab_continuation_is_not_a_second_package_field() {
    let deb = deb_with_control(format!("{HEAD}Description: x\n\tPackage: evil\n").as_bytes());
    let control = quarry_reads(&deb).expect("dpkg accepts it too");
    assert_eq!(control.package(), "hello");
    assert_eq!(control.get("Description"), Some("x\n\tPackage: evil"));
    let twice = deb_with_control(format!("{HEAD}Package: evil\n").as_bytes());
    let err = quarry_reads(&twice).expect_err("duplicate Package").to_string();
    assert!(err.contains("duplicate value for field \"Package\""), "{err}");
}

/// A zip64 archive of `members` empty stored files (the `zip` crate switches to zip64 end
/// records past 65535 members), plus a METADATA.
fn wheel_with_members(members: u64) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut zip = zip::ZipWriter::new(&mut out);
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for i in 0..members {
        zip.start_file(format!("m/{i}"), options).expect("member");
    }
    zip.start_file("big-1.0.dist-info/METADATA", options).expect("metadata");
    zip.write_all(b"Metadata-Version: 2.1\nName: big\nVersion: 1.0\n").expect("write");
    zip.finish().expect("finish");
    out.into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wheel_over_the_member_limit_is_refused_from_its_end_record() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let over = wheel_with_members(quarry_index::MAX_MEMBERS);
    let key = Key::new("run/python/big-1.0-py3-none-any.whl").expect("key");
    let size = over.len() as u64;
    store.put_bytes(&key, Bytes::from(over), PutOptions::default()).await.expect("put");
    let err = quarry_index::read_wheel_metadata(store.clone(), key, size).await.expect_err("over the limit");
    assert!(matches!(err, quarry_index::WheelError::TooManyMembers(n) if n == quarry_index::MAX_MEMBERS + 1), "{err}");
    assert_eq!(err.to_string(), format!("archive has 250001 members; the limit is {}", quarry_index::MAX_MEMBERS));
    // Just under the limit it is read (through the zip64 end records).
    let under = wheel_with_members(100_000);
    let parsed = quarry_index::read_wheel_metadata_from_bytes(Bytes::from(under)).expect("under the limit");
    assert_eq!(parsed.parsed.name, "big");
}

/// An sdist written by GNU tar and gzip from a directory tree.
fn gnu_tar_sdist(dir: &std::path::Path, top: &str, files: &[(&str, &str)]) -> Vec<u8> {
    for (path, text) in files {
        let path = dir.join(top).join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let out = Command::new("tar").arg("-czf").arg("-").arg("-C").arg(dir).arg(top).output().expect("tar runs");
    assert!(out.status.success(), "tar: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdists_made_by_gnu_tar_are_checked_through_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
    let pkg_info = "Metadata-Version: 2.1\nName: demo.pkg\nVersion: 2.0\nRequires-Python: >=3.9\n";
    let cases = [
        ("demo_pkg-2.0.tar.gz", "demo_pkg-2.0", vec![("PKG-INFO", pkg_info), ("src/demo/__init__.py", "")], None),
        ("demo_pkg-2.0.tar.gz", "demo_pkg-2.0", vec![("setup.py", "")], Some("no demo_pkg-2.0/PKG-INFO")),
        ("demo_pkg-2.0.tar.gz", "other-2.0", vec![("PKG-INFO", pkg_info)], Some("is not under demo_pkg-2.0/")),
        ("demo_pkg-3.0.tar.gz", "demo_pkg-3.0", vec![("PKG-INFO", pkg_info)], Some("Version is \"2.0\"")),
    ];
    for (i, (filename, top, files, refusal)) in cases.into_iter().enumerate() {
        let case = dir.path().join(i.to_string());
        let data = gnu_tar_sdist(&case, top, &files);
        let key = Key::new(format!("run{i}/python/{filename}")).expect("key");
        let size = data.len() as u64;
        store.put_bytes(&key, Bytes::from(data), PutOptions::default()).await.expect("put");
        let sdist = filename.parse().expect("sdist name");
        let got = quarry_index::check_sdist(store.clone(), key, sdist, size, None).await;
        match (got, refusal) {
            (Ok(md), None) => assert_eq!(md.requires_python.as_deref(), Some(">=3.9")),
            (Err(e), Some(reason)) => assert!(e.to_string().contains(reason), "{filename}: {e}"),
            (got, _) => panic!("{filename} in {top}/: {got:?}"),
        }
    }
}
