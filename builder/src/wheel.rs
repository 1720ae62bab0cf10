//! Wheels (PEP 427) and sdists written reproducibly: members in byte order of their paths with
//! the `.dist-info` files last and `RECORD` at the very end, one timestamp
//! (`SOURCE_DATE_EPOCH`, clamped to zip's 1980 epoch), unix modes kept, file contents streamed
//! from disk. `RECORD` rows carry `sha256=<urlsafe base64, unpadded>` and sizes.
//!
//! Every zip entry is "made by Unix" with explicit permission bits, whatever the host: zip's
//! default on a Windows host (DOS) would drop the modes pip applies on Linux, so a Windows host
//! writes the same bytes. The modes themselves come from the caller: a Windows-platform wheel
//! carries the modes Python reports on Windows (`crate::python::member_mode`).

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use sha2::{Digest, Sha256};
use zip::write::SimpleFileOptions;

#[derive(Debug, thiserror::Error)]
pub enum WheelError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("writing {path}: {source}")]
    Zip { path: PathBuf, source: zip::result::ZipError },
    #[error("{0:?} is not a path a wheel may hold")]
    BadPath(String),
}

/// Where a member's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    File(PathBuf),
    Bytes(Vec<u8>),
}

/// One member: its path inside the archive, unix mode and content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub path: String,
    pub mode: u32,
    pub source: Source,
}

impl Member {
    pub fn bytes(path: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        Member { path: path.into(), mode: 0o644, source: Source::Bytes(bytes.into()) }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelReport {
    pub size: u64,
    pub members: usize,
    pub sha256: String,
}

struct HashingReader<R> {
    inner: R,
    hash: Sha256,
    size: u64,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }
}

fn open(source: &Source) -> Result<Box<dyn Read + '_>, WheelError> {
    Ok(match source {
        Source::File(path) => {
            Box::new(crate::tree::open_source(path).map_err(|source| WheelError::Io { path: path.clone(), source })?)
        }
        Source::Bytes(bytes) => Box::new(bytes.as_slice()),
    })
}

fn path_ok(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains(['\\', '\0'])
        && path.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

fn zip_time(epoch: u64) -> zip::DateTime {
    let t = jiff::Timestamp::from_second(epoch.clamp(315_532_800, 4_102_444_799) as i64).unwrap_or_default();
    let d = t.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    zip::DateTime::from_date_and_time(
        d.year() as u16,
        d.month() as u8,
        d.day() as u8,
        d.hour() as u8,
        d.minute() as u8,
        d.second() as u8,
    )
    .unwrap_or_default()
}

/// Writes `dest` (via a temporary file beside it) from `members` plus the `.dist-info` files,
/// then `RECORD`. `compress`: deflate (level 6) or stored.
pub fn write_wheel(
    dest: &Path,
    mut members: Vec<Member>,
    dist_info: &str,
    dist_info_files: Vec<Member>,
    mtime: u64,
    compress: bool,
) -> Result<WheelReport, WheelError> {
    let io_at = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WheelError::Io { path: path.clone(), source }
    };
    members.sort_by(|a, b| a.path.cmp(&b.path));
    members.dedup_by(|later, earlier| later.path == earlier.path);
    let mut info = dist_info_files;
    info.sort_by(|a, b| a.path.cmp(&b.path));
    for m in members.iter().chain(&info) {
        if !path_ok(&m.path) || m.path.starts_with(&format!("{dist_info}/RECORD")) {
            return Err(WheelError::BadPath(m.path.clone()));
        }
    }
    let dir = dest.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir).map_err(io_at(dir))?;
    let zip_err = |source| WheelError::Zip { path: dest.to_path_buf(), source };
    let mut zip = zip::ZipWriter::new(BufWriter::new(tmp));
    let time = zip_time(mtime);
    let method = if compress { zip::CompressionMethod::Deflated } else { zip::CompressionMethod::Stored };
    let mut record = String::new();
    let count = members.len() + info.len() + 1;
    for m in members.iter().chain(&info) {
        let mut reader = HashingReader { inner: open(&m.source)?, hash: Sha256::new(), size: 0 };
        let large = match &m.source {
            Source::File(p) => fs::metadata(p).map_err(io_at(p))?.len() >= u32::MAX as u64,
            Source::Bytes(b) => b.len() as u64 >= u32::MAX as u64,
        };
        let options = SimpleFileOptions::default()
            .compression_method(method)
            .compression_level(compress.then_some(6))
            .last_modified_time(time)
            .unix_permissions(m.mode & 0o777)
            .system(zip::System::Unix)
            .large_file(large);
        zip.start_file(m.path.as_str(), options).map_err(zip_err)?;
        io::copy(&mut reader, &mut zip).map_err(io_at(dest))?;
        let digest = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(reader.hash.finalize());
        record.push_str(&format!("{},sha256={digest},{}\n", csv_field(&m.path), reader.size));
    }
    let record_path = format!("{dist_info}/RECORD");
    record.push_str(&format!("{record_path},,\n"));
    // Unix modes and a Unix "made by" whatever the host: a Windows host writes the same bytes
    // (zip's default there is DOS, which drops the modes pip applies on Linux).
    let options = SimpleFileOptions::default()
        .compression_method(method)
        .last_modified_time(time)
        .unix_permissions(0o644)
        .system(zip::System::Unix);
    zip.start_file(record_path.as_str(), options).map_err(zip_err)?;
    zip.write_all(record.as_bytes()).map_err(io_at(dest))?;
    let writer = zip.finish().map_err(zip_err)?;
    let tmp = writer.into_inner().map_err(|e| WheelError::Io { path: dest.to_path_buf(), source: e.into_error() })?;
    tmp.as_file().sync_all().map_err(io_at(dest))?;
    tmp.persist(dest).map_err(|e| WheelError::Io { path: dest.to_path_buf(), source: e.error })?;
    let (size, sha256) = file_digest(dest)?;
    Ok(WheelReport { size, members: count, sha256 })
}

/// RECORD is CSV: a path with a comma or quote is quoted.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_owned() }
}

fn file_digest(path: &Path) -> Result<(u64, String), WheelError> {
    let file = File::open(path).map_err(|source| WheelError::Io { path: path.to_path_buf(), source })?;
    let mut reader = HashingReader { inner: file, hash: Sha256::new(), size: 0 };
    io::copy(&mut reader, &mut io::sink()).map_err(|source| WheelError::Io { path: path.to_path_buf(), source })?;
    Ok((reader.size, hex::encode(reader.hash.finalize())))
}

/// One entry of a plain tar (the sdist, the devel tarball).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TarEntry {
    Dir { mode: u32 },
    File { mode: u32, source: Source },
    Symlink { target: String },
}

/// Writes a tar of `entries` (given in the order they should appear) to `out`, with 0:0 owners
/// and one mtime.
pub fn write_tar<W: Write>(out: W, entries: &[(String, TarEntry)], mtime: u64) -> Result<W, WheelError> {
    let io_at = |name: &str| {
        let path = PathBuf::from(name);
        move |source| WheelError::Io { path: path.clone(), source }
    };
    let mut tar = tar::Builder::new(out);
    for (name, entry) in entries {
        if !path_ok(name) {
            return Err(WheelError::BadPath(name.clone()));
        }
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(mtime);
        match entry {
            TarEntry::Dir { mode } => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(mode & 0o777);
                h.set_size(0);
                tar.append_data(&mut h, format!("{name}/"), io::empty()).map_err(io_at(name))?;
            }
            TarEntry::File { mode, source } => {
                let size = match source {
                    Source::File(p) => fs::metadata(p).map_err(io_at(name))?.len(),
                    Source::Bytes(b) => b.len() as u64,
                };
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(mode & 0o777);
                h.set_size(size);
                tar.append_data(&mut h, name, open(source)?).map_err(io_at(name))?;
            }
            TarEntry::Symlink { target } => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                tar.append_link(&mut h, name, target).map_err(io_at(name))?;
            }
        }
    }
    tar.into_inner().map_err(io_at("tar"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheels_are_reproducible_and_record_every_member() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("lib.so"), b"\x7fELF fake").unwrap();
        let members = || {
            vec![
                Member::bytes("pkg/__init__.py", "x = 1\n"),
                Member {
                    path: "_pkg/lib/libx.so.1".into(),
                    mode: 0o755,
                    source: Source::File(tmp.path().join("lib.so")),
                },
            ]
        };
        let info = || {
            vec![
                Member::bytes("pkg-1.0.dist-info/METADATA", "Name: pkg\n"),
                Member::bytes("pkg-1.0.dist-info/WHEEL", "Tag: py3-none-any\n"),
            ]
        };
        let a = tmp.path().join("a.whl");
        let b = tmp.path().join("b.whl");
        let ra = write_wheel(&a, members(), "pkg-1.0.dist-info", info(), 1_700_000_000, true).unwrap();
        let mut reversed = members();
        reversed.reverse();
        let rb = write_wheel(&b, reversed, "pkg-1.0.dist-info", info(), 1_700_000_000, true).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert_eq!(ra, rb);

        let mut zip = zip::ZipArchive::new(File::open(&a).unwrap()).unwrap();
        let names: Vec<String> =
            (0..zip.len()).map(|i| zip.by_index(i).unwrap().name().unwrap().into_owned()).collect();
        assert_eq!(
            names,
            [
                "_pkg/lib/libx.so.1",
                "pkg/__init__.py",
                "pkg-1.0.dist-info/METADATA",
                "pkg-1.0.dist-info/WHEEL",
                "pkg-1.0.dist-info/RECORD"
            ]
        );
        assert_eq!(zip.by_name("_pkg/lib/libx.so.1").unwrap().unix_mode().unwrap() & 0o777, 0o755);
        let mut record = String::new();
        zip.by_name("pkg-1.0.dist-info/RECORD").unwrap().read_to_string(&mut record).unwrap();
        let digest = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(b"x = 1\n"));
        assert!(record.contains(&format!("pkg/__init__.py,sha256={digest},6\n")), "{record}");
        assert!(record.ends_with("pkg-1.0.dist-info/RECORD,,\n"));

        for bad in ["../x", "/abs", "a//b", "pkg-1.0.dist-info/RECORD"] {
            let err = write_wheel(
                &tmp.path().join("c.whl"),
                vec![Member::bytes(bad, "")],
                "pkg-1.0.dist-info",
                info(),
                0,
                true,
            );
            assert!(matches!(err, Err(WheelError::BadPath(_))), "{bad}");
        }
    }
}
