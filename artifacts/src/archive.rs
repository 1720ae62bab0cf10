//! An artifact directory written as an archive the way TheRock's `fileset_tool.py
//! artifact-archive` writes one, so that TheRock's `ArtifactPopulator` (which refuses any member
//! not strictly under a manifest root) extracts it: `artifact_manifest.txt` first, then what lies
//! under every root the manifest names, each walked depth-first in byte order of names (TheRock
//! walks in scandir order; sorted order makes the bytes reproducible). A root itself (and its
//! parents) gets no member: an empty root is in the archive only as its manifest line, and the
//! extractor creates every root the manifest names. Members are regular files, symlinks, hard
//! links and directories, all strictly under a root. Owners are 0:0 without names, mtimes are
//! one fixed time (`SOURCE_DATE_EPOCH` in the CLI), permission bits are kept, files sharing an
//! inode become hard links. zstd is written in independent frames of fixed input size
//! ([`crate::framed`]), so the bytes do not depend on the number of threads.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io::{self, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::framed::FramedZstd;
use crate::{ArchiveFormat, ArtifactError, MANIFEST, io_at, relative_ok};

/// Bytes gathered before each write into the compressor.
const WRITE_BUFFER: usize = 1 << 20;
/// The largest read from an archived file.
const READ_BUFFER: usize = 1 << 20;

/// How to compress.
#[derive(Clone, Copy, Debug)]
pub struct ArchiveOptions {
    pub format: ArchiveFormat,
    /// zstd 1–22 (default 3, as TheRock's pyzstd), xz 0–9 (default 6).
    pub level: Option<i32>,
    /// zstd compression threads (≤ 1: the writing thread; the bytes do not depend on it).
    pub threads: u32,
    /// Every member's modification time, seconds since the epoch.
    pub mtime: u64,
}

impl ArchiveOptions {
    pub fn new(format: ArchiveFormat) -> Self {
        ArchiveOptions { format, level: None, threads: 2, mtime: 0 }
    }
}

/// What was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArchiveReport {
    pub sha256: String,
    /// Compressed size.
    pub size: u64,
    /// Members after the manifest.
    pub members: u64,
    /// Uncompressed bytes of regular files.
    pub content_bytes: u64,
}

struct Hashing<W> {
    inner: W,
    hash: Sha256,
    size: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The roots an artifact directory's manifest names, in manifest order without repeats.
pub fn manifest_roots(text: &str) -> Result<Vec<String>, ArtifactError> {
    let mut seen = BTreeSet::new();
    let mut roots = Vec::new();
    for line in text.lines().map(|l| l.trim().trim_end_matches('/')).filter(|l| !l.is_empty()) {
        if !relative_ok(line) {
            return Err(ArtifactError::HostileRoot(line.to_owned()));
        }
        if seen.insert(line.to_owned()) {
            roots.push(line.to_owned());
        }
    }
    Ok(roots)
}

/// Writes the artifact in `dir` to `out` and returns `out` with the report.
pub fn write_archive<W: Write>(dir: &Path, out: W, opts: &ArchiveOptions) -> Result<(W, ArchiveReport), ArtifactError> {
    let manifest_path = dir.join(MANIFEST);
    let manifest = fs::read(&manifest_path).map_err(io_at(&manifest_path))?;
    let roots = manifest_roots(&String::from_utf8_lossy(&manifest))?;
    let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    for root in &roots {
        if !dir.join(root).is_dir() {
            return Err(ArtifactError::MissingRoot { dir: dir_name.clone(), root: root.clone() });
        }
    }

    let hashing = Hashing { inner: out, hash: Sha256::new(), size: 0 };
    let encoder: Box<dyn FinishWrite<W>> = match opts.format {
        ArchiveFormat::Zstd => {
            let threads = usize::try_from(opts.threads).unwrap_or(1);
            Box::new(FramedZstd::new(hashing, opts.level.unwrap_or(3), threads).map_err(ArtifactError::Read)?)
        }
        ArchiveFormat::Xz => {
            Box::new(xz2::write::XzEncoder::new(hashing, opts.level.unwrap_or(6).clamp(0, 9).unsigned_abs()))
        }
    };
    // tar writes in 8 KiB pieces: gathered into 1 MiB before each call into the compressor.
    let mut tar = tar::Builder::new(io::BufWriter::with_capacity(WRITE_BUFFER, encoder));
    let mut walker =
        Walker { opts, members: 0, content_bytes: 0, inodes: HashMap::new(), buffer: vec![0; READ_BUFFER] };
    let mut header = walker.header(tar::EntryType::Regular, 0o644, manifest.len() as u64);
    tar.append_data(&mut header, MANIFEST, manifest.as_slice()).map_err(io_at(&manifest_path))?;
    for root in &roots {
        walker.children(&mut tar, &dir.join(root), root)?;
    }
    let buffered = tar.into_inner().map_err(ArtifactError::Read)?;
    let encoder = buffered.into_inner().map_err(|e| ArtifactError::Read(e.into_error()))?;
    let hashing = encoder.finish_into().map_err(ArtifactError::Read)?;
    let report = ArchiveReport {
        sha256: hex::encode(hashing.hash.finalize()),
        size: hashing.size,
        members: walker.members,
        content_bytes: walker.content_bytes,
    };
    Ok((hashing.inner, report))
}

trait FinishWrite<W>: Write {
    fn finish_into(self: Box<Self>) -> io::Result<Hashing<W>>;
}

impl<W: Write> FinishWrite<W> for FramedZstd<Hashing<W>> {
    fn finish_into(self: Box<Self>) -> io::Result<Hashing<W>> {
        self.finish()
    }
}

impl<W: Write> FinishWrite<W> for xz2::write::XzEncoder<Hashing<W>> {
    fn finish_into(self: Box<Self>) -> io::Result<Hashing<W>> {
        self.finish()
    }
}

struct Walker<'a> {
    opts: &'a ArchiveOptions,
    members: u64,
    content_bytes: u64,
    /// (device, inode) of multiply-linked files already written → their member name.
    inodes: HashMap<(u64, u64), String>,
    /// Where file data passes on its way into the archive.
    buffer: Vec<u8>,
}

/// Copies exactly `len` bytes of `from` into `to` through `buffer`: a file that ends sooner
/// (it shrank while being archived) is an error, bytes beyond `len` are left (the header
/// already says `len`).
fn copy_exact(from: &mut fs::File, to: &mut impl Write, len: u64, buffer: &mut [u8]) -> io::Result<()> {
    let mut left = len;
    while left > 0 {
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(buffer.len());
        let n = match io::Read::read(from, &mut buffer[..want]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the file shrank while being archived ({} of {len} bytes read)", len - left),
                ));
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buffer[..n])?;
        left -= n as u64;
    }
    Ok(())
}

impl Walker<'_> {
    fn header(&self, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode & 0o7777);
        h.set_size(size);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(self.opts.mtime);
        h
    }

    /// The members under the directory `path` (archived as `name`), in byte order of names;
    /// `name` itself gets no member (a manifest root never does).
    fn children<T: Write>(&mut self, tar: &mut tar::Builder<T>, path: &Path, name: &str) -> Result<(), ArtifactError> {
        let io_at = io_at(path);
        let mut children: Vec<_> = fs::read_dir(path)
            .map_err(io_at)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .map_err(io_at)?;
        children.sort();
        for child in children {
            let child_name = child.to_string_lossy().into_owned();
            self.walk(tar, &path.join(&child), &format!("{name}/{child_name}"))?;
        }
        Ok(())
    }

    fn walk<T: Write>(&mut self, tar: &mut tar::Builder<T>, path: &Path, name: &str) -> Result<(), ArtifactError> {
        let io_at = io_at(path);
        let meta = fs::symlink_metadata(path).map_err(io_at)?;
        let kind = meta.file_type();
        self.members += 1;
        if kind.is_symlink() {
            let target = fs::read_link(path).map_err(io_at)?;
            let mut h = self.header(tar::EntryType::Symlink, 0o777, 0);
            tar.append_link(&mut h, name, &target).map_err(io_at)?;
        } else if kind.is_dir() {
            let mut h = self.header(tar::EntryType::Directory, mode_of(&meta, path) & 0o7777, 0);
            tar.append_data(&mut h, format!("{name}/"), io::empty()).map_err(io_at)?;
            self.children(tar, path, name)?;
        } else if kind.is_file() {
            let mode = mode_of(&meta, path) & 0o7777;
            if let Some(inode) = shared_inode(&meta) {
                if let Some(first) = self.inodes.get(&inode) {
                    let mut h = self.header(tar::EntryType::Link, mode, 0);
                    tar.append_link(&mut h, name, first).map_err(io_at)?;
                    return Ok(());
                }
                self.inodes.insert(inode, name.to_owned());
            }
            let mut h = self.header(tar::EntryType::Regular, mode, meta.len());
            let mut file = fs::File::open(path).map_err(io_at)?;
            // The header (and any long-name record) from tar; the data copied here in large
            // reads straight into the compressor (tar's own copy goes in 8 KiB pieces), exactly
            // the size the header gives, then the padding to the next 512-byte block.
            tar.append_data(&mut h, name, io::empty()).map_err(io_at)?;
            copy_exact(&mut file, tar.get_mut(), meta.len(), &mut self.buffer).map_err(io_at)?;
            let tail = meta.len() % 512;
            if tail != 0 {
                tar.get_mut().write_all(&[0; 512][..(512 - tail) as usize]).map_err(io_at)?;
            }
            self.content_bytes += meta.len();
        } else {
            return Err(ArtifactError::Special(name.to_owned()));
        }
        Ok(())
    }
}

/// A file's permission bits as archived.
#[cfg(unix)]
pub fn mode_of(meta: &fs::Metadata, _path: &Path) -> u32 {
    std::os::unix::fs::MetadataExt::mode(meta)
}

/// Windows has no mode bits: the bits Python's `os.stat` reports there (what TheRock's
/// `fileset_tool.py` archives on Windows), owner-writable only: directories 0755, files 0644 or
/// 0444 when read-only, plus the execute bits for `.exe`, `.bat`, `.cmd` and `.com`.
#[cfg(not(unix))]
pub fn mode_of(meta: &fs::Metadata, path: &Path) -> u32 {
    if meta.is_dir() {
        return 0o755;
    }
    let write = if meta.permissions().readonly() { 0 } else { 0o200 };
    let exec = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| ["exe", "bat", "cmd", "com"].iter().any(|x| x.eq_ignore_ascii_case(e)));
    0o444 | write | if exec { 0o111 } else { 0 }
}

/// (device, inode) of a file with more than one name: its later names are archived as hard
/// links to the first.
#[cfg(unix)]
fn shared_inode(meta: &fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    (meta.nlink() > 1).then(|| (meta.dev(), meta.ino()))
}

/// Windows: every name is archived as a regular file. Stable Rust has no file index on
/// Windows, and TheRock's own Windows populate copies files without hard-link groups
/// (`_plain_copy`: "st_dev/st_ino unreliable"), so Windows artifact directories hold none.
#[cfg(not(unix))]
fn shared_inode(_meta: &fs::Metadata) -> Option<(u64, u64)> {
    None
}

#[cfg(test)]
mod copy_tests {
    use super::copy_exact;

    #[test]
    fn a_file_is_copied_to_the_size_its_header_gives_and_a_shrunk_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let mut out = Vec::new();
        let mut buffer = vec![0; 4];
        copy_exact(&mut std::fs::File::open(&path).unwrap(), &mut out, 10, &mut buffer).unwrap();
        assert_eq!(out, b"0123456789");
        // Grown since its header was written: only the header's bytes go in.
        let mut out = Vec::new();
        copy_exact(&mut std::fs::File::open(&path).unwrap(), &mut out, 6, &mut buffer).unwrap();
        assert_eq!(out, b"012345");
        let err = copy_exact(&mut std::fs::File::open(&path).unwrap(), &mut Vec::new(), 12, &mut buffer).unwrap_err();
        assert!(err.to_string().contains("shrank while being archived (10 of 12 bytes read)"), "{err}");
    }
}
