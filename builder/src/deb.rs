//! `.deb` archives, written the way `dpkg-deb --root-owner-group` lays them out: an `ar` of
//! `debian-binary`, `control.tar.xz` (`./control`, `./md5sums`) and `data.tar.{xz,zst,gz}`.
//!
//! Memory stays bounded whatever the payload: files are streamed through the compressor into a
//! temporary file beside the output (hashing each for `md5sums` on the way), then copied into
//! the `ar` once its size is known. Output is reproducible: members sorted, owners root:root,
//! every mtime the given epoch (`SOURCE_DATE_EPOCH`), and the compressors' output independent of
//! their thread count ([`crate::compress`]).
//!
//! Each file is read once, 1 MiB at a time: the tar writer hands every chunk to the compressor
//! and to a thread of its own that computes `md5sums` (md5 over a GiB costs about 1.5 s of CPU,
//! which on the writer's thread held the compressors back); the channel between them holds a
//! few chunks, so memory stays bounded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};

use md5::Digest as _;

use crate::compress::{FinishWrite, encoder};

pub use crate::tree::Item;

/// Payload compression of `data.tar` (the rpm payload codecs too).
pub use crate::compress::Compression;

/// Control fields: `Package`, `Version`, `Architecture`, `Maintainer`, `Description` are
/// required; `Installed-Size` is computed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DebControl {
    pub fields: Vec<(String, String)>,
}

impl DebControl {
    pub fn field(mut self, name: &str, value: impl Into<String>) -> Self {
        let value = value.into();
        if !value.trim().is_empty() {
            self.fields.push((name.to_owned(), value));
        }
        self
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DebBuildError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{path}: {source}")]
    Source { path: PathBuf, source: io::Error },
    #[error("install path {0:?} must be relative, without `.` or `..` segments")]
    BadPath(String),
    #[error("control field {0} is required")]
    MissingField(&'static str),
    #[error("control field {name}: {problem}")]
    BadField { name: String, problem: String },
    #[error("{0} is given twice")]
    Duplicate(String),
}

/// What was built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebReport {
    pub path: PathBuf,
    pub size: u64,
    pub installed_size_kib: u64,
    pub files: usize,
}

/// A package-relative install path, trailing `/` removed; `None` if it could leave the root.
pub(crate) fn clean_path(path: &str) -> Option<String> {
    let trimmed = path.trim_end_matches('/');
    let ok = !trimmed.is_empty()
        && !path.starts_with('/')
        && !path.contains(['\\', '\0', '\n'])
        && trimmed.split('/').all(|s| !s.is_empty() && s != "." && s != "..");
    ok.then(|| trimmed.to_owned())
}

fn check_path(path: &str) -> Result<String, DebBuildError> {
    clean_path(path).ok_or_else(|| DebBuildError::BadPath(path.to_owned()))
}

/// Every parent directory of the items' paths, as directories (0755) unless given.
fn with_parents(items: BTreeMap<String, Item>) -> BTreeMap<String, Item> {
    let mut all = items.clone();
    for path in items.keys() {
        let mut parent = Path::new(path).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            all.entry(p.to_string_lossy().into_owned()).or_insert(Item::Dir { mode: 0o755 });
            parent = p.parent();
        }
    }
    all
}

fn header(kind: tar::EntryType, mode: u32, size: u64, mtime: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(mtime);
    h.set_uid(0);
    h.set_gid(0);
    let _ = h.set_username("root");
    let _ = h.set_groupname("root");
    h
}

/// Append an entry named exactly `path` (dpkg-deb's `./usr/...` form, which the `tar` crate's
/// path setters would normalize away), with GNU long-name and long-link records when a name
/// or link target exceeds the 100 bytes of a header.
fn append_raw<W: Write>(
    tar: &mut tar::Builder<W>,
    mut h: tar::Header,
    path: &str,
    link: Option<&str>,
    data: impl Read,
) -> io::Result<()> {
    let long = |tar: &mut tar::Builder<W>, kind: tar::EntryType, value: &str| -> io::Result<()> {
        let mut l = header(kind, 0o644, value.len() as u64 + 1, 0);
        set_name(&mut l, "././@LongLink");
        l.set_cksum();
        tar.append(&l, [value.as_bytes(), b"\0"].concat().as_slice())
    };
    if path.len() > 100 {
        long(tar, tar::EntryType::GNULongName, path)?;
    }
    set_name(&mut h, path);
    if let Some(target) = link {
        if target.len() > 100 {
            long(tar, tar::EntryType::GNULongLink, target)?;
        }
        let bytes = target.as_bytes();
        let field = &mut h.as_old_mut().linkname;
        field.fill(0);
        field[..bytes.len().min(100)].copy_from_slice(&bytes[..bytes.len().min(100)]);
    }
    h.set_cksum();
    tar.append(&h, data)
}

fn set_name(h: &mut tar::Header, path: &str) {
    let bytes = path.as_bytes();
    let field = &mut h.as_old_mut().name;
    field.fill(0);
    field[..bytes.len().min(100)].copy_from_slice(&bytes[..bytes.len().min(100)]);
}

/// What the md5 thread is sent: a file's bytes in order, then its path.
enum Md5Message {
    Chunk(Arc<Vec<u8>>),
    End(String),
}

/// Computes `md5sums` on its own thread, beside the tar writer and the compressor workers
/// (md5 over a GiB is ~1.5 s of CPU: on the writer's thread it held back the compressors).
/// The channel holds a few [`CHUNK`]-sized buffers, so memory stays bounded.
struct Md5Thread {
    tx: mpsc::SyncSender<Md5Message>,
    handle: std::thread::JoinHandle<String>,
}

/// The read size of a packaged file, and the unit sent to the md5 thread.
const CHUNK: usize = 1 << 20;

impl Md5Thread {
    fn spawn() -> io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel::<Md5Message>(4);
        let handle = std::thread::Builder::new().name("md5sums".into()).spawn(move || {
            let mut md5sums = String::new();
            let mut md5 = md5::Md5::new();
            for message in rx {
                match message {
                    Md5Message::Chunk(bytes) => md5.update(bytes.as_slice()),
                    Md5Message::End(path) => {
                        for b in md5.finalize_reset() {
                            let _ = write!(md5sums, "{b:02x}");
                        }
                        let _ = writeln!(md5sums, "  {path}");
                    }
                }
            }
            md5sums
        })?;
        Ok(Self { tx, handle })
    }

    fn send(&self, message: Md5Message) -> io::Result<()> {
        self.tx.send(message).map_err(|_| io::Error::other("the md5sums thread stopped"))
    }

    /// The `md5sums` text of every file sent.
    fn finish(self) -> io::Result<String> {
        drop(self.tx);
        self.handle.join().map_err(|_| io::Error::other("the md5sums thread panicked"))
    }
}

/// Reads `inner` a [`CHUNK`] at a time, sends each chunk to the md5 thread and serves it to
/// the tar writer; counts what it read.
struct Hashing<'a, R> {
    inner: R,
    md5: &'a Md5Thread,
    chunk: Arc<Vec<u8>>,
    pos: usize,
    read: u64,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.chunk.len() {
            let mut next = Vec::with_capacity(CHUNK);
            (&mut self.inner).take(CHUNK as u64).read_to_end(&mut next)?;
            if next.is_empty() {
                return Ok(0);
            }
            self.read += next.len() as u64;
            self.chunk = Arc::new(next);
            self.pos = 0;
            self.md5.send(Md5Message::Chunk(Arc::clone(&self.chunk)))?;
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn suffix(compression: Compression) -> &'static str {
    match compression {
        Compression::Xz { .. } => ".xz",
        Compression::Zstd { .. } => ".zst",
        Compression::Gzip { .. } => ".gz",
    }
}

/// What Debian policy asks of every binary package besides its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebianDocs {
    pub package: String,
    pub version: String,
    pub maintainer: String,
    pub license: String,
    pub copyright_holder: String,
    pub source_url: String,
    /// RFC 2822, e.g. `Wed, 18 Nov 2026 11:06:40 +0000`.
    pub date: String,
    /// Lintian tags the package overrides (e.g. `dir-or-file-in-opt` for `/opt/rocm`).
    pub lintian_overrides: Vec<String>,
}

/// `usr/share/doc/{package}/copyright` (machine-readable format),
/// `usr/share/doc/{package}/changelog.Debian.gz` (gzip without name or time) and, when there
/// are overrides, `usr/share/lintian/overrides/{package}`: written into `dir`, returned as items.
pub fn debian_docs(docs: &DebianDocs, dir: &Path) -> io::Result<Vec<(String, Item)>> {
    let p = &docs.package;
    let copyright = format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: {p}\n{}\nFiles: *\nCopyright: {}\nLicense: {}\n",
        if docs.source_url.is_empty() { String::new() } else { format!("Source: {}\n", docs.source_url) },
        if docs.copyright_holder.is_empty() { "unknown" } else { &docs.copyright_holder },
        if docs.license.is_empty() { "unknown" } else { &docs.license },
    );
    let changelog = format!(
        "{p} ({}) stable; urgency=medium\n\n  * Built by quarry package.\n\n -- {}  {}\n",
        docs.version, docs.maintainer, docs.date
    );
    let mut gz = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::best());
    gz.write_all(changelog.as_bytes())?;
    let changelog = gz.finish()?;
    std::fs::write(dir.join("copyright"), copyright)?;
    std::fs::write(dir.join("changelog.Debian.gz"), changelog)?;
    let mut items = vec![
        (format!("usr/share/doc/{p}/copyright"), Item::File { source: dir.join("copyright"), mode: 0o644 }),
        (
            format!("usr/share/doc/{p}/changelog.Debian.gz"),
            Item::File { source: dir.join("changelog.Debian.gz"), mode: 0o644 },
        ),
    ];
    if !docs.lintian_overrides.is_empty() {
        let text: String = docs.lintian_overrides.iter().map(|t| format!("{p}: {t}\n")).collect();
        std::fs::write(dir.join("lintian-overrides"), text)?;
        items.push((
            format!("usr/share/lintian/overrides/{p}"),
            Item::File { source: dir.join("lintian-overrides"), mode: 0o644 },
        ));
    }
    Ok(items)
}

/// Write `{out_dir}/{Package}_{Version without epoch}_{Architecture}.deb`, compressing on
/// one worker thread.
pub fn build_deb(
    control: &DebControl,
    items: impl IntoIterator<Item = (String, Item)>,
    out_dir: &Path,
    compression: Compression,
    mtime: u64,
) -> Result<DebReport, DebBuildError> {
    build_deb_threads(control, items, out_dir, compression, mtime, 1)
}

/// [`build_deb`] with `threads` compression workers (same bytes whatever the count).
pub fn build_deb_threads(
    control: &DebControl,
    items: impl IntoIterator<Item = (String, Item)>,
    out_dir: &Path,
    compression: Compression,
    mtime: u64,
    threads: u32,
) -> Result<DebReport, DebBuildError> {
    check_control(control)?;
    let tree = with_parents(install_tree(items)?);
    // data.tar, streamed into a temporary file beside the output.
    let mut data_tmp = tempfile::NamedTempFile::new_in(out_dir)?;
    let writer = encoder(compression, threads, BufWriter::new(data_tmp.reopen()?))?;
    let data = write_data(&tree, writer, mtime)?;
    let control_member = control_member(control, &data, mtime)?;
    let path = out_dir.join(deb_file_name(control));
    let mut out_tmp = tempfile::NamedTempFile::new_in(out_dir)?;
    write_ar(out_tmp.as_file_mut(), &control_member, data_tmp.as_file_mut(), compression, mtime)?;
    out_tmp.as_file().sync_all()?;
    let size = out_tmp.as_file().metadata()?.len();
    out_tmp.persist(&path).map_err(|e| DebBuildError::Io(e.error))?;
    Ok(DebReport { path, size, installed_size_kib: data.installed_kib, files: data.files })
}

/// The required fields are there, every name is valid, `Installed-Size` is left to the
/// builder, and no value has a blank or CR continuation line.
fn check_control(control: &DebControl) -> Result<(), DebBuildError> {
    for required in ["Package", "Version", "Architecture", "Maintainer", "Description"] {
        if control.get(required).is_none() {
            return Err(DebBuildError::MissingField(required));
        }
    }
    for (name, value) in &control.fields {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
            return Err(DebBuildError::BadField { name: name.clone(), problem: "invalid field name".into() });
        }
        if name.eq_ignore_ascii_case("Installed-Size") {
            return Err(DebBuildError::BadField { name: name.clone(), problem: "computed by the builder".into() });
        }
        let continuation_ok = value.lines().skip(1).all(|l| !l.trim().is_empty());
        if !continuation_ok || value.contains('\r') {
            return Err(DebBuildError::BadField {
                name: name.clone(),
                problem: "blank or CR line in the value".into(),
            });
        }
    }
    Ok(())
}

/// The items by cleaned install path; a path given twice is refused.
fn install_tree(items: impl IntoIterator<Item = (String, Item)>) -> Result<BTreeMap<String, Item>, DebBuildError> {
    let mut tree = BTreeMap::new();
    for (path, item) in items {
        let path = check_path(&path)?;
        if tree.insert(path.clone(), item).is_some() {
            return Err(DebBuildError::Duplicate(path));
        }
    }
    Ok(tree)
}

/// What writing `data.tar` found out: `md5sums`, `Installed-Size` and the file count.
struct DataSummary {
    md5sums: String,
    installed_kib: u64,
    files: usize,
}

/// `data.tar` of `tree` through `writer` (the compressor), hashing every file on the way.
fn write_data(
    tree: &BTreeMap<String, Item>,
    writer: Box<dyn FinishWrite<BufWriter<File>> + '_>,
    mtime: u64,
) -> Result<DataSummary, DebBuildError> {
    let mut summary = DataSummary { md5sums: String::new(), installed_kib: 0, files: 0 };
    let md5 = Md5Thread::spawn()?;
    let mut tar = tar::Builder::new(writer);
    append_raw(&mut tar, header(tar::EntryType::Directory, 0o755, 0, mtime), "./", None, io::empty())?;
    for (path, item) in tree {
        match item {
            Item::Dir { mode } => {
                let h = header(tar::EntryType::Directory, *mode, 0, mtime);
                append_raw(&mut tar, h, &format!("./{path}/"), None, io::empty())?;
                summary.installed_kib += 1;
            }
            Item::Symlink { target } => {
                let h = header(tar::EntryType::Symlink, 0o777, 0, mtime);
                append_raw(&mut tar, h, &format!("./{path}"), Some(target), io::empty())?;
                summary.installed_kib += 1;
            }
            Item::File { source, mode } => {
                let size = append_file(&mut tar, path, source, *mode, mtime, &md5)?;
                summary.installed_kib += size.div_ceil(1024);
                summary.files += 1;
            }
        }
    }
    tar.into_inner()?.finish_box()?.flush()?;
    summary.md5sums = md5.finish()?;
    Ok(summary)
}

/// One regular file appended as `./{path}`, its bytes and path sent to the md5 thread; its size.
fn append_file<W: Write>(
    tar: &mut tar::Builder<W>,
    path: &str,
    source: &Path,
    mode: u32,
    mtime: u64,
    md5: &Md5Thread,
) -> Result<u64, DebBuildError> {
    let at_source = |e| DebBuildError::Source { path: source.to_path_buf(), source: e };
    let file = crate::tree::open_source(source).map_err(at_source)?;
    let size = file.metadata().map_err(at_source)?.len();
    let h = header(tar::EntryType::Regular, mode, size, mtime);
    let mut hashing = Hashing { inner: file.take(size), md5, chunk: Arc::default(), pos: 0, read: 0 };
    append_raw(tar, h, &format!("./{path}"), None, &mut hashing)?;
    if hashing.read != size {
        return Err(at_source(io::Error::other("the file changed size while it was packaged")));
    }
    md5.send(Md5Message::End(path.to_owned()))?;
    Ok(size)
}

/// `control.tar.xz` (small, in memory): `./control` with `Installed-Size` where
/// dpkg-gencontrol puts it (after `Maintainer`), and `./md5sums` when there are files.
fn control_member(control: &DebControl, data: &DataSummary, mtime: u64) -> Result<Vec<u8>, DebBuildError> {
    let mut control_text = String::new();
    let mut inserted = false;
    for (name, value) in &control.fields {
        let _ = writeln!(control_text, "{name}: {value}");
        if name.eq_ignore_ascii_case("Maintainer") {
            let _ = writeln!(control_text, "Installed-Size: {}", data.installed_kib);
            inserted = true;
        }
    }
    if !inserted {
        let _ = writeln!(control_text, "Installed-Size: {}", data.installed_kib);
    }
    let mut control_tar = tar::Builder::new(Vec::new());
    append_raw(&mut control_tar, header(tar::EntryType::Directory, 0o755, 0, mtime), "./", None, io::empty())?;
    for (name, body) in [("control", control_text.as_bytes()), ("md5sums", data.md5sums.as_bytes())] {
        if name == "md5sums" && body.is_empty() {
            continue;
        }
        let h = header(tar::EntryType::Regular, 0o644, body.len() as u64, mtime);
        append_raw(&mut control_tar, h, &format!("./{name}"), None, body)?;
    }
    let control_tar = control_tar.into_inner()?;
    let mut xz = xz2::write::XzEncoder::new(Vec::new(), 6);
    xz.write_all(&control_tar)?;
    Ok(xz.finish()?)
}

/// `{Package}_{Version without epoch}_{Architecture}.deb`.
fn deb_file_name(control: &DebControl) -> String {
    let version = control.get("Version").unwrap_or_default();
    let version = version.split_once(':').map_or(version, |(_, v)| v);
    format!(
        "{}_{}_{}.deb",
        control.get("Package").unwrap_or_default(),
        version,
        control.get("Architecture").unwrap_or_default()
    )
}

/// The `ar`: `debian-binary`, `control.tar.xz`, then `data` (the compressed `data.tar`).
fn write_ar(
    out: &mut File,
    control_member: &[u8],
    data: &mut File,
    compression: Compression,
    mtime: u64,
) -> io::Result<()> {
    let mut out = BufWriter::new(out);
    out.write_all(b"!<arch>\n")?;
    let member = |out: &mut BufWriter<&mut File>, name: &str, size: u64| -> io::Result<()> {
        writeln!(out, "{name:<16}{mtime:<12}{:<6}{:<6}{:<8}{size:<10}`", 0, 0, 100644)
    };
    member(&mut out, "debian-binary", 4)?;
    out.write_all(b"2.0\n")?;
    member(&mut out, "control.tar.xz", control_member.len() as u64)?;
    out.write_all(control_member)?;
    if control_member.len() % 2 == 1 {
        out.write_all(b"\n")?;
    }
    let data_size = data.metadata()?.len();
    data.seek(io::SeekFrom::Start(0))?;
    member(&mut out, &format!("data.tar{}", suffix(compression)), data_size)?;
    io::copy(data, &mut out)?;
    if data_size % 2 == 1 {
        out.write_all(b"\n")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(dir: &Path) -> Vec<(String, Item)> {
        std::fs::write(dir.join("hello"), "#!/bin/sh\necho hello\n").unwrap();
        std::fs::write(dir.join("lib"), vec![7u8; 5000]).unwrap();
        vec![
            ("usr/bin/quarry-demo".into(), Item::File { source: dir.join("hello"), mode: 0o755 }),
            ("opt/rocm/core-7.1/lib/libdemo.so.1.0".into(), Item::File { source: dir.join("lib"), mode: 0o644 }),
            ("opt/rocm/core-7.1/lib/libdemo.so.1".into(), Item::Symlink { target: "libdemo.so.1.0".into() }),
            ("opt/rocm/core-7.1/share/empty".into(), Item::Dir { mode: 0o755 }),
        ]
    }

    fn control() -> DebControl {
        DebControl::default()
            .field("Package", "quarry-demo")
            .field("Version", "7.1.0~dev20260820-12345")
            .field("Architecture", "amd64")
            .field("Maintainer", "Quarry Tests <tests@example.invalid>")
            .field("Depends", "libc6")
            .field("Description", "a demo\n Built by the tests.")
    }

    #[test]
    fn packages_are_readable_and_reproducible() {
        let src = tempfile::tempdir().unwrap();
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let report = build_deb(&control(), tree(src.path()), a.path(), Compression::default(), 1_795_000_000).unwrap();
        assert_eq!(report.path.file_name().unwrap(), "quarry-demo_7.1.0~dev20260820-12345_amd64.deb");
        assert_eq!(report.files, 2);
        let again = build_deb(&control(), tree(src.path()), b.path(), Compression::default(), 1_795_000_000).unwrap();
        let (x, y) = (std::fs::read(&report.path).unwrap(), std::fs::read(&again.path).unwrap());
        assert_eq!(x, y, "same input, same bytes");
        let mut source = quarry_index::deb::MemorySource(bytes::Bytes::from(x));
        let read =
            futures_util::FutureExt::now_or_never(quarry_index::deb::read_deb_control(&mut source)).unwrap().unwrap();
        assert_eq!(read.package(), "quarry-demo");
        assert!(read.get("Installed-Size").is_some_and(|s| s.parse::<u64>().unwrap() >= 5));
        // Leftover temporary files are gone.
        assert_eq!(std::fs::read_dir(a.path()).unwrap().count(), 1);
    }

    #[test]
    fn every_compression_builds() {
        let src = tempfile::tempdir().unwrap();
        for compression in
            [Compression::Xz { level: 1 }, Compression::Zstd { level: 3 }, Compression::Gzip { level: 6 }]
        {
            let out = tempfile::tempdir().unwrap();
            build_deb(&control(), tree(src.path()), out.path(), compression, 0).unwrap();
        }
    }

    #[test]
    fn bad_input_is_refused() {
        let src = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let build = |items: Vec<(String, Item)>, control: DebControl| {
            build_deb(&control, items, out.path(), Compression::default(), 0)
        };
        for path in ["../etc/passwd", "/etc/passwd", "a/../../b", "", "a/./b"] {
            let err = build(vec![(path.into(), Item::Dir { mode: 0o755 })], control()).unwrap_err();
            assert!(matches!(err, DebBuildError::BadPath(_)), "{path}: {err}");
        }
        let dup = vec![("a".to_owned(), Item::Dir { mode: 0o755 }), ("a/".to_owned(), Item::Dir { mode: 0o755 })];
        assert!(matches!(build(dup, control()).unwrap_err(), DebBuildError::Duplicate(_)));
        let missing = DebControl::default().field("Package", "x1");
        assert!(matches!(build(Vec::new(), missing).unwrap_err(), DebBuildError::MissingField("Version")));
        let gone = vec![("a".to_owned(), Item::File { source: src.path().join("nope"), mode: 0o644 })];
        assert!(matches!(build(gone, control()).unwrap_err(), DebBuildError::Source { .. }));
        let blank = control().field("Conflicts", "a\n\n b");
        assert!(matches!(build(Vec::new(), blank).unwrap_err(), DebBuildError::BadField { .. }));
        // Nothing half-written is left behind.
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
    }
}
