//! Reading a wheel's core metadata with ranged reads of the zip central directory, and
//! validating sdists (a `.tar.gz` streamed once, a `.zip` like a wheel).
//!
//! The wheel is never downloaded whole: a [`RangeReader`] presents the object as `Read + Seek`
//! to the `zip` crate and turns reads into a few ranged GETs (the tail, which holds the end of
//! central directory record and usually the whole central directory, then the METADATA member).

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use quarry_packaging::SdistFilename;
use quarry_store::{Key, Store, StoreError, StoreExt};

use crate::metadata::{CoreMetadata, MetadataError};

/// Refuse METADATA members larger than this (declared or actual).
pub const MAX_METADATA_SIZE: u64 = 16 * 1024 * 1024;
/// Refuse archives with more members than this (read from the end of central directory
/// record before the directory itself is read: the `zip` crate keeps a few hundred bytes per
/// member, so 1.5 million members cost 300 MB).
pub const MAX_MEMBERS: u64 = 250_000;
/// Refuse archives whose central directory is larger than this.
pub const MAX_CENTRAL_DIRECTORY: u64 = 64 * 1024 * 1024;

const TAIL_WINDOW: u64 = 256 * 1024;
const FORWARD_WINDOW: u64 = 256 * 1024;
const MAX_WINDOWS: usize = 8;

/// Why a wheel cannot be indexed. Messages are written for the uploader.
#[derive(Debug, thiserror::Error)]
pub enum WheelError {
    #[error("not a valid zip archive: {0}")]
    NotAZip(String),
    #[error("archive member {0:?} has an unsafe path (absolute, or containing '..')")]
    UnsafeMember(String),
    #[error("archive has {0} members; the limit is {MAX_MEMBERS}")]
    TooManyMembers(u64),
    #[error("archive's central directory is {0} bytes; the limit is {MAX_CENTRAL_DIRECTORY}")]
    DirectoryTooLarge(u64),
    #[error("no .dist-info/METADATA at the top level of the wheel")]
    NoMetadata,
    #[error("more than one .dist-info directory: {}", .0.join(", "))]
    MultipleDistInfo(Vec<String>),
    #[error("{member} declares {declared} bytes uncompressed; the limit is {limit}")]
    MetadataTooLarge { member: String, declared: u64, limit: u64 },
    #[error("{member} is larger than its declared size or the limit of {limit} bytes")]
    MetadataOverflow { member: String, limit: u64 },
    #[error("{member}: {source}")]
    Metadata { member: String, source: MetadataError },
    #[error("METADATA says {field} is {in_metadata:?} but the filename says {in_filename:?}")]
    Mismatch { field: &'static str, in_metadata: String, in_filename: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The core metadata file of one wheel.
#[derive(Debug, Clone)]
pub struct WheelMetadata {
    /// The member path (`name-1.0.dist-info/METADATA`).
    pub member: String,
    /// Its bytes, unmodified (served as `<wheel>.metadata`).
    pub raw: Bytes,
    pub parsed: CoreMetadata,
    /// The bytes of `*.dist-info/variant.json` when the wheel has one (PEP 825), unparsed.
    pub variant_json: Option<Bytes>,
}

/// Read and validate the METADATA of the wheel at `key` (`size` bytes).
pub async fn read_wheel_metadata(store: Arc<dyn Store>, key: Key, size: u64) -> Result<WheelMetadata, WheelError> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut reader = RangeReader { store, key, size, pos: 0, windows: Vec::new(), handle, error: None };
        let result = extract(&mut reader);
        match (result, reader.error.take()) {
            // An I/O failure inside the zip crate is reported as the store error behind it.
            (Err(_), Some(store_err)) => Err(WheelError::Store(store_err)),
            (result, _) => result,
        }
    })
    .await
    .map_err(|e| WheelError::Store(StoreError::Backend(format!("metadata task failed: {e}"))))?
}

/// Read and validate the METADATA of a wheel already in memory (small files are fetched whole:
/// one read is cheaper than several ranged ones).
pub fn read_wheel_metadata_from_bytes(data: Bytes) -> Result<WheelMetadata, WheelError> {
    extract(std::io::Cursor::new(data))
}

fn extract(reader: impl Read + Seek) -> Result<WheelMetadata, WheelError> {
    let mut archive = open_zip(reader)?;
    let mut dist_infos: Vec<String> = Vec::new();
    let mut metadata_index = None;
    let mut variant_index = None;
    for i in 0..archive.len() {
        let file = archive.by_index_raw(i).map_err(|e| WheelError::NotAZip(e.to_string()))?;
        let name = file.name().map_err(|e| WheelError::NotAZip(e.to_string()))?.into_owned();
        if file.enclosed_name().is_none() || name.split(['/', '\\']).any(|s| s == "..") {
            return Err(WheelError::UnsafeMember(name));
        }
        let top = name.split('/').next().unwrap_or_default();
        if top.ends_with(".dist-info") && name.contains('/') && !dist_infos.iter().any(|d| d == top) {
            dist_infos.push(top.to_owned());
        }
        if name.matches('/').count() == 1 && top.ends_with(".dist-info") && name.ends_with("/METADATA") {
            metadata_index = Some((i, name, file.size()));
        } else if name.matches('/').count() == 1
            && top.ends_with(".dist-info")
            && name.ends_with(&format!("/{}", crate::variant::VARIANT_JSON))
        {
            variant_index = Some((i, name, file.size()));
        }
    }
    if dist_infos.len() > 1 {
        dist_infos.sort();
        return Err(WheelError::MultipleDistInfo(dist_infos));
    }
    let (index, member, declared) = metadata_index.ok_or(WheelError::NoMetadata)?;
    let raw = read_member(&mut archive, index, &member, declared, MAX_METADATA_SIZE)?;
    let parsed = CoreMetadata::parse(&raw).map_err(|source| WheelError::Metadata { member: member.clone(), source })?;
    let variant_json = match variant_index {
        Some((index, name, declared)) => {
            Some(Bytes::from(read_member(&mut archive, index, &name, declared, crate::variant::MAX_VARIANT_JSON)?))
        }
        None => None,
    };
    Ok(WheelMetadata { member, raw: Bytes::from(raw), parsed, variant_json })
}

/// One member's bytes, refused when it declares, or turns out to hold, more than `limit`.
fn read_member<R: Read + Seek>(
    archive: &mut zip::ZipArchive<R>,
    index: usize,
    member: &str,
    declared: u64,
    limit: u64,
) -> Result<Vec<u8>, WheelError> {
    let member = member.to_owned();
    if declared > limit {
        return Err(WheelError::MetadataTooLarge { member, declared, limit });
    }
    let file = archive.by_index(index).map_err(|e| WheelError::NotAZip(e.to_string()))?;
    let mut raw = Vec::with_capacity(declared as usize);
    file.take(declared.min(limit) + 1)
        .read_to_end(&mut raw)
        .map_err(|e| WheelError::NotAZip(format!("{member}: {e}")))?;
    if raw.len() as u64 > declared {
        return Err(WheelError::MetadataOverflow { member, limit });
    }
    Ok(raw)
}

/// Open a zip archive after checking its end records: the central directory must be no larger
/// than the limits, lie right before its end record (as every zip writer puts it), and the
/// `zip` crate is handed the file only up to the end of that record, so the record checked
/// here is the one it reads. Nothing of the directory is read before the check.
pub fn open_zip<R: Read + Seek>(mut reader: R) -> Result<zip::ZipArchive<Window<R>>, WheelError> {
    let end = check_end_records(&mut reader)?;
    zip::ZipArchive::new(Window { inner: reader, len: end, pos: 0 }).map_err(|e| WheelError::NotAZip(e.to_string()))
}

const EOCD_SIG: &[u8; 4] = b"PK\x05\x06";
const EOCD_LEN: u64 = 22;
const LOCATOR_SIG: &[u8; 4] = b"PK\x06\x07";
const LOCATOR_LEN: u64 = 20;
const EOCD64_SIG: &[u8; 4] = b"PK\x06\x06";
const EOCD64_LEN: u64 = 56;
const CDFH_SIG: &[u8; 4] = b"PK\x01\x02";
/// A central directory file header is at least this long.
const CDFH_MIN: u64 = 46;

fn le16(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([b[at], b[at + 1]]))
}
fn le32(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]))
}
fn le64(b: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(bytes)
}

fn read_at(reader: &mut (impl Read + Seek), offset: u64, len: u64) -> Result<Vec<u8>, WheelError> {
    let io = |e: io::Error| WheelError::NotAZip(format!("reading the end records: {e}"));
    reader.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut buf = Vec::with_capacity(len as usize);
    reader.take(len).read_to_end(&mut buf).map_err(io)?;
    if buf.len() as u64 != len {
        return Err(WheelError::NotAZip("truncated end of central directory".into()));
    }
    Ok(buf)
}

/// Find and check the end of central directory record (and the zip64 one it points to);
/// returns where the record and its comment end.
fn check_end_records(reader: &mut (impl Read + Seek)) -> Result<u64, WheelError> {
    let bad = |what: &str| WheelError::NotAZip(what.to_owned());
    let size = reader.seek(SeekFrom::End(0)).map_err(|e| WheelError::NotAZip(e.to_string()))?;
    if size < EOCD_LEN {
        return Err(bad("too short for a zip archive"));
    }
    // The record is followed by a comment of at most 64 KiB.
    let tail_start = size.saturating_sub(EOCD_LEN + 0xffff);
    let tail = read_at(reader, tail_start, size - tail_start)?;
    // The last signature whose comment fits in the file, as zip readers look for it.
    let at = (0..=tail.len() - EOCD_LEN as usize)
        .rev()
        .find(|&i| &tail[i..i + 4] == EOCD_SIG && i as u64 + EOCD_LEN + le16(&tail, i + 20) <= tail.len() as u64)
        .ok_or_else(|| bad("no end of central directory record"))?;
    let record = &tail[at..];
    let eocd_pos = tail_start + at as u64;
    let end = eocd_pos + EOCD_LEN + le16(record, 20);
    if record[22..(end - eocd_pos) as usize].windows(4).any(|w| w == EOCD_SIG) {
        return Err(bad("the archive comment holds an end of central directory signature"));
    }
    let (disk, cd_disk) = (le16(record, 4), le16(record, 6));
    let (mut on_disk, mut entries) = (le16(record, 8), le16(record, 10));
    let (mut cd_size, mut cd_offset) = (le32(record, 12), le32(record, 16));
    let mut cd_end = eocd_pos;
    let zip64 = entries == 0xffff || cd_size == 0xffff_ffff || cd_offset == 0xffff_ffff;
    let locator = match eocd_pos.checked_sub(LOCATOR_LEN) {
        Some(pos) if zip64 => Some((pos, read_at(reader, pos, LOCATOR_LEN)?)).filter(|(_, l)| &l[..4] == LOCATOR_SIG),
        _ => None,
    };
    if let Some((locator_pos, locator)) = locator {
        // The zip64 record must lie right before its locator, without extensible data.
        let (locator_cd_disk, record_pos, disks) = (le32(&locator, 4), le64(&locator, 8), le32(&locator, 16));
        if disks > 1 || locator_pos.checked_sub(EOCD64_LEN) != Some(record_pos) {
            return Err(bad("unsupported zip64 end of central directory layout"));
        }
        let record64 = read_at(reader, record_pos, EOCD64_LEN)?;
        if &record64[..4] != EOCD64_SIG
            || le64(&record64, 4) != EOCD64_LEN - 12
            || le32(&record64, 16) != 0
            || le32(&record64, 20) != locator_cd_disk
        {
            return Err(bad("bad zip64 end of central directory record"));
        }
        (on_disk, entries, cd_size, cd_offset) =
            (le64(&record64, 24), le64(&record64, 32), le64(&record64, 40), le64(&record64, 48));
        cd_end = record_pos;
    } else if disk != 0 || cd_disk != 0 {
        return Err(bad("multi-disk archives are not supported"));
    }
    if on_disk != entries {
        return Err(bad("multi-disk archives are not supported"));
    }
    if entries > MAX_MEMBERS {
        return Err(WheelError::TooManyMembers(entries));
    }
    if cd_size > MAX_CENTRAL_DIRECTORY {
        return Err(WheelError::DirectoryTooLarge(cd_size));
    }
    if entries.saturating_mul(CDFH_MIN) > cd_size || cd_offset.checked_add(cd_size) != Some(cd_end) {
        return Err(bad("the central directory does not end where its end record begins"));
    }
    if entries > 0 && read_at(reader, cd_offset, 4)? != CDFH_SIG {
        return Err(bad("no central directory header where the end record says"));
    }
    Ok(end)
}

/// The first `len` bytes of a reader, as a reader of its own.
pub struct Window<R> {
    inner: R,
    len: u64,
    pos: u64,
}

impl<R: Read + Seek> Read for Window<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.len.saturating_sub(self.pos).min(buf.len() as u64) as usize;
        if room == 0 {
            return Ok(0);
        }
        self.inner.seek(SeekFrom::Start(self.pos))?;
        let n = self.inner.read(&mut buf[..room])?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl<R: Read + Seek> Seek for Window<R> {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let new = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = new.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before start"))?;
        Ok(self.pos)
    }
}

/// `Read + Seek` over a stored object, backed by a few cached ranged reads.
struct RangeReader {
    store: Arc<dyn Store>,
    key: Key,
    size: u64,
    pos: u64,
    /// Cached `(start, bytes)` windows, oldest first.
    windows: Vec<(u64, Bytes)>,
    handle: tokio::runtime::Handle,
    /// The store error behind the last failed read, kept so it can be reported as such.
    error: Option<StoreError>,
}

impl RangeReader {
    fn window_for(&mut self, pos: u64) -> io::Result<(u64, Bytes)> {
        if let Some(w) = self.windows.iter().find(|(start, data)| pos >= *start && pos < start + data.len() as u64) {
            return Ok(w.clone());
        }
        // Near the end, fetch the whole tail: the end records and usually the central directory.
        let start = if pos + TAIL_WINDOW >= self.size { self.size.saturating_sub(TAIL_WINDOW).min(pos) } else { pos };
        let len = (self.size - start).min(FORWARD_WINDOW.max(TAIL_WINDOW));
        let fetched = self.handle.block_on(self.store.get_range(&self.key, start, len));
        let data = fetched.map_err(|e| {
            let msg = e.to_string();
            self.error = Some(e);
            io::Error::other(msg)
        })?;
        if data.len() as u64 != len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short ranged read"));
        }
        if self.windows.len() == MAX_WINDOWS {
            self.windows.remove(0);
        }
        self.windows.push((start, data.clone()));
        Ok((start, data))
    }
}

impl Read for RangeReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.size || buf.is_empty() {
            return Ok(0);
        }
        let (start, data) = self.window_for(self.pos)?;
        let offset = (self.pos - start) as usize;
        let n = buf.len().min(data.len() - offset);
        buf[..n].copy_from_slice(&data[offset..offset + n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for RangeReader {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let new = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = new.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before start"))?;
        Ok(self.pos)
    }
}

/// Most members an sdist may have.
pub const MAX_SDIST_MEMBERS: u64 = 100_000;
/// Most bytes a `.tar.gz` sdist may decompress to (it is read to its end: the gzip checksum
/// proves it whole).
pub const MAX_SDIST_UNPACKED: u64 = 2 * 1024 * 1024 * 1024;

/// Why an sdist cannot be indexed. Messages are written for the uploader.
#[derive(Debug, thiserror::Error)]
pub enum SdistError {
    #[error("the file is not a gzip archive")]
    NotGzip,
    #[error("not a gzip-compressed tar archive: {0}")]
    NotTar(String),
    #[error(transparent)]
    Zip(WheelError),
    #[error("more than {MAX_SDIST_MEMBERS} members")]
    TooManyMembers,
    #[error("unpacks to more than {MAX_SDIST_UNPACKED} bytes")]
    TooLarge,
    #[error("member {0:?} has an unsafe path or link target")]
    UnsafeMember(String),
    #[error("member {0:?} is not a regular file, directory or link")]
    SpecialMember(String),
    #[error("member {member:?} is not under {expected}/ (the filename's name and version)")]
    OutsideTopLevel { member: String, expected: String },
    #[error("no {0}/PKG-INFO")]
    NoPkgInfo(String),
    #[error("{0}/PKG-INFO appears more than once")]
    DuplicatePkgInfo(String),
    #[error("{member} is larger than {MAX_METADATA_SIZE} bytes")]
    PkgInfoTooLarge { member: String },
    #[error("{member}: {source}")]
    Metadata { member: String, source: MetadataError },
    #[error("PKG-INFO says {field} is {in_metadata:?} but the filename says {in_filename:?}")]
    Mismatch { field: &'static str, in_metadata: String, in_filename: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Validate the sdist at `key` (`size` bytes; `kept`: its bytes when already in memory): a
/// gzip-compressed tar (streamed once, never buffered whole) or a zip whose members all lie
/// under one `{name}-{version}/` directory naming the filename's project and version, with a
/// `PKG-INFO` there whose Name and Version agree. Returns the parsed PKG-INFO.
pub async fn check_sdist(
    store: Arc<dyn Store>,
    key: Key,
    filename: SdistFilename,
    size: u64,
    kept: Option<Bytes>,
) -> Result<CoreMetadata, SdistError> {
    let handle = tokio::runtime::Handle::current();
    let zip = filename.as_str().ends_with(".zip");
    let body = match (&kept, zip) {
        (None, false) => Some(store.get(&key, None).await?.body),
        _ => None,
    };
    tokio::task::spawn_blocking(move || match (kept, body) {
        (Some(data), _) => check_sdist_bytes(&filename, data),
        (None, Some(body)) => {
            let mut reader = StreamRead { body, chunk: Bytes::new(), handle, error: None };
            let result = check_tar_gz(&filename, &mut reader);
            match (result, reader.error.take()) {
                (Err(_), Some(source)) => Err(SdistError::Store(StoreError::Body { key: key.to_string(), source })),
                (result, _) => result,
            }
        }
        (None, None) => {
            let mut reader = RangeReader { store, key, size, pos: 0, windows: Vec::new(), handle, error: None };
            let result = check_zip(&filename, &mut reader);
            match (result, reader.error.take()) {
                (Err(_), Some(store_err)) => Err(SdistError::Store(store_err)),
                (result, _) => result,
            }
        }
    })
    .await
    .map_err(|e| SdistError::Store(StoreError::Backend(format!("sdist check failed: {e}"))))?
}

/// [`check_sdist`] over bytes in memory.
pub fn check_sdist_bytes(filename: &SdistFilename, data: Bytes) -> Result<CoreMetadata, SdistError> {
    if filename.as_str().ends_with(".zip") {
        check_zip(filename, std::io::Cursor::new(data))
    } else {
        check_tar_gz(filename, &mut &data[..])
    }
}

/// The rules every member name follows, and the PKG-INFO at the end.
struct Layout<'a> {
    filename: &'a SdistFilename,
    top: Option<String>,
    pkg_info: Option<(String, Vec<u8>)>,
    members: u64,
}

impl<'a> Layout<'a> {
    fn new(filename: &'a SdistFilename) -> Self {
        Self { filename, top: None, pkg_info: None, members: 0 }
    }

    fn expected(&self) -> String {
        let stem = self.filename.as_str();
        stem.strip_suffix(".tar.gz").or_else(|| stem.strip_suffix(".zip")).unwrap_or(stem).to_owned()
    }

    /// Check one member's path; true when it is the PKG-INFO.
    fn member(&mut self, name: &str) -> Result<bool, SdistError> {
        self.members += 1;
        if self.members > MAX_SDIST_MEMBERS {
            return Err(SdistError::TooManyMembers);
        }
        if name.starts_with('/') || name.contains('\\') || name.split('/').any(|s| s == "..") || name.contains('\0') {
            return Err(SdistError::UnsafeMember(name.to_owned()));
        }
        let (first, rest) = name.split_once('/').unwrap_or((name, ""));
        let top = match &self.top {
            Some(top) => top,
            None => {
                // The directory names the filename's project and version (spelled as the
                // filename spells them, or as an older tool did: `Foo.Bar-1.0` for `foo_bar-1.0`).
                let matches = format!("{first}.tar.gz")
                    .parse::<SdistFilename>()
                    .is_ok_and(|dir| dir.name == self.filename.name && dir.version == self.filename.version);
                if !matches {
                    return Err(SdistError::OutsideTopLevel { member: name.to_owned(), expected: self.expected() });
                }
                self.top.insert(first.to_owned())
            }
        };
        if first != top || first.is_empty() {
            return Err(SdistError::OutsideTopLevel { member: name.to_owned(), expected: top.clone() });
        }
        Ok(rest == "PKG-INFO")
    }

    fn pkg_info(&mut self, name: &str, reader: impl Read, declared: u64) -> Result<(), SdistError> {
        if self.pkg_info.is_some() {
            return Err(SdistError::DuplicatePkgInfo(self.top.clone().unwrap_or_default()));
        }
        let too_large = || SdistError::PkgInfoTooLarge { member: name.to_owned() };
        if declared > MAX_METADATA_SIZE {
            return Err(too_large());
        }
        let mut raw = Vec::new();
        reader
            .take(MAX_METADATA_SIZE + 1)
            .read_to_end(&mut raw)
            .map_err(|e| SdistError::NotTar(format!("{name}: {e}")))?;
        if raw.len() as u64 > MAX_METADATA_SIZE {
            return Err(too_large());
        }
        self.pkg_info = Some((name.to_owned(), raw));
        Ok(())
    }

    fn finish(self) -> Result<CoreMetadata, SdistError> {
        let expected = self.top.clone().unwrap_or_else(|| self.expected());
        let (member, raw) = self.pkg_info.ok_or(SdistError::NoPkgInfo(expected))?;
        let parsed = CoreMetadata::parse(&raw).map_err(|source| SdistError::Metadata { member, source })?;
        if let Some((field, in_metadata, in_filename)) =
            parsed.disagreement(&self.filename.name, &self.filename.version)
        {
            return Err(SdistError::Mismatch { field, in_metadata, in_filename });
        }
        Ok(parsed)
    }
}

/// Counts what passes through and fails past the limit.
struct Counted<R> {
    inner: R,
    read: u64,
    over: bool,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > MAX_SDIST_UNPACKED {
            self.over = true;
            return Err(io::Error::other("decompressed size limit"));
        }
        Ok(n)
    }
}

fn check_tar_gz(filename: &SdistFilename, reader: &mut impl Read) -> Result<CoreMetadata, SdistError> {
    let mut magic = [0u8; 2];
    let mut reader = io::BufReader::new(reader);
    if reader.read_exact(&mut magic).is_err() || magic != [0x1f, 0x8b] {
        return Err(SdistError::NotGzip);
    }
    let gz = flate2::read::MultiGzDecoder::new(io::Cursor::new(magic).chain(reader));
    let mut archive = tar::Archive::new(Counted { inner: gz, read: 0, over: false });
    let mut layout = Layout::new(filename);
    let walked = walk_tar(&mut archive, &mut layout);
    let mut counted = archive.into_inner();
    let result = walked.and_then(|()| {
        // Read on to the end: the gzip trailer's checksum and length prove the file whole.
        io::copy(&mut counted, &mut io::sink()).map_err(|e| SdistError::NotTar(e.to_string()))?;
        Ok(())
    });
    match result {
        Err(_) if counted.over => Err(SdistError::TooLarge),
        Err(e) => Err(e),
        Ok(()) => layout.finish(),
    }
}

fn walk_tar(archive: &mut tar::Archive<impl Read>, layout: &mut Layout<'_>) -> Result<(), SdistError> {
    let not_tar = |e: io::Error| SdistError::NotTar(e.to_string());
    for entry in archive.entries().map_err(not_tar)? {
        let entry = entry.map_err(not_tar)?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        let is_pkg_info = layout.member(&name)?;
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            let target = entry.link_name_bytes().map(|t| String::from_utf8_lossy(&t).into_owned()).unwrap_or_default();
            let top = layout.top.as_deref().unwrap_or_default();
            if !link_stays_inside(top, &name, &target, kind.is_hard_link()) {
                return Err(SdistError::UnsafeMember(name));
            }
        } else if !(kind.is_file() || kind.is_dir() || kind == tar::EntryType::Continuous) {
            return Err(SdistError::SpecialMember(name));
        }
        if is_pkg_info {
            if !kind.is_file() {
                return Err(SdistError::SpecialMember(name));
            }
            let declared = entry.size();
            layout.pkg_info(&name, entry, declared)?;
        }
    }
    Ok(())
}

/// Whether a link at `name` to `target` stays inside the top-level directory `top`: hard links
/// name an archive member; symlinks are resolved against their own directory.
fn link_stays_inside(top: &str, name: &str, target: &str, hard: bool) -> bool {
    if target.is_empty() || target.starts_with('/') || target.contains('\\') {
        return false;
    }
    let mut parts: Vec<&str> = if hard { Vec::new() } else { name.split('/').collect() };
    if !hard {
        parts.pop();
    }
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
                // Never above the top-level directory.
                if parts.is_empty() {
                    return false;
                }
            }
            part => parts.push(part),
        }
    }
    parts.first() == Some(&top) && (!hard || parts.len() > 1)
}

fn check_zip(filename: &SdistFilename, reader: impl Read + Seek) -> Result<CoreMetadata, SdistError> {
    let zip_error = |e: zip::result::ZipError| SdistError::Zip(WheelError::NotAZip(e.to_string()));
    let mut archive = open_zip(reader).map_err(SdistError::Zip)?;
    if archive.len() as u64 > MAX_SDIST_MEMBERS {
        return Err(SdistError::TooManyMembers);
    }
    let mut layout = Layout::new(filename);
    let mut pkg_info = None;
    for i in 0..archive.len() {
        let file = archive.by_index_raw(i).map_err(zip_error)?;
        let name = file.name().map_err(zip_error)?.into_owned();
        if layout.member(&name)? {
            if pkg_info.is_some() {
                return Err(SdistError::DuplicatePkgInfo(layout.top.clone().unwrap_or_default()));
            }
            pkg_info = Some((i, name, file.size()));
        }
    }
    if let Some((index, name, declared)) = pkg_info {
        if declared > MAX_METADATA_SIZE {
            return Err(SdistError::PkgInfoTooLarge { member: name });
        }
        let file = archive.by_index(index).map_err(zip_error)?;
        layout.pkg_info(&name, file, declared)?;
    }
    layout.finish()
}

/// `Read` over a store object's body stream, from a blocking thread.
struct StreamRead {
    body: quarry_store::ByteStream,
    chunk: Bytes,
    handle: tokio::runtime::Handle,
    /// The body error behind the last failed read.
    error: Option<io::Error>,
}

impl Read for StreamRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Bounded: every turn either returns or takes one chunk off the finite stream.
        while self.chunk.is_empty() {
            match self.handle.block_on(self.body.next()) {
                None => return Ok(0),
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => {
                    let msg = e.to_string();
                    self.error = Some(e);
                    return Err(io::Error::other(msg));
                }
            }
        }
        let n = buf.len().min(self.chunk.len());
        buf[..n].copy_from_slice(&self.chunk[..n]);
        self.chunk = self.chunk.slice(n..);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn zip_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = io::Cursor::new(Vec::new());
        let mut zip = zip::ZipWriter::new(&mut out);
        let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        for (name, data) in members {
            zip.start_file(*name, options).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap();
        out.into_inner()
    }

    const METADATA: &[u8] = b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n";

    fn wheel(data: Vec<u8>) -> Result<WheelMetadata, WheelError> {
        read_wheel_metadata_from_bytes(Bytes::from(data))
    }

    /// Only end records: a zip32 one, behind a zip64 record and locator when `zip64`.
    fn end_records(entries: u64, cd_size: u64, cd_offset: u64, zip64: bool) -> Vec<u8> {
        let mut out = vec![0u8; cd_offset as usize];
        out.extend_from_slice(CDFH_SIG);
        out.resize((cd_offset + cd_size) as usize, 0);
        if zip64 {
            let record = out.len() as u64;
            out.extend_from_slice(EOCD64_SIG);
            out.extend_from_slice(&44u64.to_le_bytes());
            out.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            for v in [entries, entries, cd_size, cd_offset] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(LOCATOR_SIG);
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&record.to_le_bytes());
            out.extend_from_slice(&1u32.to_le_bytes());
        }
        out.extend_from_slice(EOCD_SIG);
        out.extend_from_slice(&[0, 0, 0, 0]);
        let (n, size, offset) = if zip64 { (0xffff, 0xffff_ffff, 0xffff_ffff) } else { (entries, cd_size, cd_offset) };
        out.extend_from_slice(&(n as u16).to_le_bytes());
        out.extend_from_slice(&(n as u16).to_le_bytes());
        out.extend_from_slice(&(size as u32).to_le_bytes());
        out.extend_from_slice(&(offset as u32).to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out
    }

    #[test]
    fn an_oversize_central_directory_is_refused_from_its_end_record() {
        // 1.5 million members claimed by a zip64 record: refused before the directory is read
        // (it is not even there: only its first signature is).
        let claimed = end_records(1_500_000, 1_500_000 * 46, 16, true);
        assert!(matches!(wheel(claimed), Err(WheelError::TooManyMembers(1_500_000))));
        let huge = end_records(10, MAX_CENTRAL_DIRECTORY + 1, 16, true);
        assert!(matches!(wheel(huge), Err(WheelError::DirectoryTooLarge(_))));
        let huge32 = end_records(10, 0xffff_fff0, 16, false);
        assert!(matches!(wheel(huge32), Err(WheelError::DirectoryTooLarge(_))));
        // Claims the directory cannot hold, or a directory that is not where it says.
        assert!(matches!(wheel(end_records(1000, 46 * 10, 16, true)), Err(WheelError::NotAZip(_))));
        let mut gap = end_records(1, 46, 16, false);
        gap[16] = 0; // no header signature where the directory starts
        assert!(matches!(wheel(gap), Err(WheelError::NotAZip(_))));
        assert!(matches!(wheel(b"PK\x05\x06".to_vec()), Err(WheelError::NotAZip(_))));
        assert!(matches!(wheel(Vec::new()), Err(WheelError::NotAZip(_))));
    }

    #[test]
    fn real_zips_pass_the_end_record_checks() {
        let plain = zip_of(&[("pkg-1.0.dist-info/METADATA", METADATA), ("pkg/__init__.py", b"")]);
        assert_eq!(wheel(plain.clone()).unwrap().parsed.name, "pkg");
        // Trailing bytes after the record are cut off, not read as a second archive.
        let mut trailing = plain.clone();
        trailing.extend_from_slice(b"trailing junk");
        assert_eq!(wheel(trailing).unwrap().parsed.version, "1.0");
        // A comment that hides another end record is refused.
        let mut comment = plain[..plain.len() - 2].to_vec();
        comment.extend_from_slice(&26u16.to_le_bytes());
        comment.extend_from_slice(&end_records(0, 0, 0, false)[4..]);
        comment.extend_from_slice(b"PK\x05\x06");
        assert!(matches!(wheel(comment), Err(WheelError::NotAZip(_))));
    }

    #[test]
    fn zip64_archives_with_many_members_are_read() {
        let names: Vec<String> = (0..70_000).map(|i| format!("pkg/m{i}")).collect();
        let mut members: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
        members.push(("pkg-1.0.dist-info/METADATA", METADATA));
        assert_eq!(wheel(zip_of(&members)).unwrap().parsed.name, "pkg");
    }

    fn tar_gz(members: &[(&str, tar::EntryType, &[u8], &str)]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (name, kind, data, link) in members {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            // The builder would refuse hostile names; write the bytes directly.
            let gnu = header.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
            header.set_cksum();
            tar.append(&header, *data).unwrap();
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar.into_inner().unwrap()).unwrap();
        gz.finish().unwrap()
    }

    fn sdist(filename: &str, data: Vec<u8>) -> Result<CoreMetadata, SdistError> {
        check_sdist_bytes(&filename.parse().unwrap(), Bytes::from(data))
    }

    const FILE: tar::EntryType = tar::EntryType::Regular;
    const DIR: tar::EntryType = tar::EntryType::Directory;

    #[test]
    fn sdists_are_tars_under_one_directory_with_pkg_info() {
        let good = [
            ("pkg-1.0/", DIR, &b""[..], ""),
            ("pkg-1.0/PKG-INFO", FILE, METADATA, ""),
            ("pkg-1.0/setup.py", FILE, b"", ""),
            ("pkg-1.0/link", tar::EntryType::Symlink, b"", "setup.py"),
        ];
        assert_eq!(sdist("pkg-1.0.tar.gz", tar_gz(&good)).unwrap().version, "1.0");
        // Legacy spellings of the directory name the same project and version.
        let legacy = [("Pkg-1.0.0/PKG-INFO", FILE, METADATA, "")];
        assert!(sdist("pkg-1.0.tar.gz", tar_gz(&legacy)).is_ok());

        let err = |filename: &str, data: Vec<u8>| sdist(filename, data).unwrap_err().to_string();
        // The finding: a gzip header followed by HTML.
        let mut html = vec![0x1f, 0x8b, 0x08, 0x00];
        html.extend_from_slice(b"<html><body>Not Found</body></html>");
        assert!(err("pkg-1.0.tar.gz", html).starts_with("not a gzip-compressed tar archive"));
        assert_eq!(err("pkg-1.0.tar.gz", b"plain text".to_vec()), "the file is not a gzip archive");
        let mut gz_html = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz_html.write_all(&[b"<html>".repeat(200), vec![0; 1024]].concat()).unwrap();
        assert!(err("pkg-1.0.tar.gz", gz_html.finish().unwrap()).starts_with("not a gzip-compressed tar"));
        // Truncated: the gzip trailer is missing.
        let whole = tar_gz(&good);
        assert!(err("pkg-1.0.tar.gz", whole[..whole.len() - 6].to_vec()).starts_with("not a gzip-compressed tar"));
        // Members outside the directory, another project's directory, traversal, no PKG-INFO.
        let outside = [("pkg-1.0/PKG-INFO", FILE, METADATA, ""), ("other/x", FILE, b"", "")];
        assert!(err("pkg-1.0.tar.gz", tar_gz(&outside)).contains("is not under pkg-1.0/"));
        let wrong = [("pkg-2.0/PKG-INFO", FILE, METADATA, "")];
        assert!(err("pkg-1.0.tar.gz", tar_gz(&wrong)).contains("is not under pkg-1.0/"));
        let flat = [("PKG-INFO", FILE, METADATA, "")];
        assert!(err("pkg-1.0.tar.gz", tar_gz(&flat)).contains("is not under"));
        let dotdot = [("pkg-1.0/PKG-INFO", FILE, METADATA, ""), ("pkg-1.0/../../etc/x", FILE, b"", "")];
        assert!(err("pkg-1.0.tar.gz", tar_gz(&dotdot)).contains("unsafe"));
        for target in ["/etc/passwd", "../../x", ".."] {
            let link = [("pkg-1.0/PKG-INFO", FILE, METADATA, ""), ("pkg-1.0/l", tar::EntryType::Symlink, b"", target)];
            assert!(err("pkg-1.0.tar.gz", tar_gz(&link)).contains("unsafe"), "{target}");
        }
        let hard = [("pkg-1.0/PKG-INFO", FILE, METADATA, ""), ("pkg-1.0/h", tar::EntryType::Link, b"", "etc/x")];
        assert!(err("pkg-1.0.tar.gz", tar_gz(&hard)).contains("unsafe"));
        let fifo = [("pkg-1.0/PKG-INFO", FILE, METADATA, ""), ("pkg-1.0/f", tar::EntryType::Fifo, b"", "")];
        assert!(err("pkg-1.0.tar.gz", tar_gz(&fifo)).contains("not a regular file"));
        assert_eq!(err("pkg-1.0.tar.gz", tar_gz(&[("pkg-1.0/setup.py", FILE, b"", "")])), "no pkg-1.0/PKG-INFO");
        let twice = [("pkg-1.0/PKG-INFO", FILE, METADATA, ""), ("pkg-1.0/PKG-INFO", FILE, METADATA, "")];
        assert!(err("pkg-1.0.tar.gz", tar_gz(&twice)).contains("more than once"));
        // PKG-INFO naming another version.
        let other = [("pkg-1.0/PKG-INFO", FILE, &b"Name: pkg\nVersion: 2.0\n"[..], "")];
        assert!(err("pkg-1.0.tar.gz", tar_gz(&other)).contains("Version is \"2.0\""));
    }

    #[test]
    fn zip_sdists_follow_the_same_rules() {
        let good = zip_of(&[("pkg-1.0/PKG-INFO", METADATA), ("pkg-1.0/setup.py", b"")]);
        assert_eq!(sdist("pkg-1.0.zip", good).unwrap().name, "pkg");
        let outside = zip_of(&[("pkg-1.0/PKG-INFO", METADATA), ("x/setup.py", b"")]);
        assert!(sdist("pkg-1.0.zip", outside).unwrap_err().to_string().contains("is not under"));
        assert!(matches!(sdist("pkg-1.0.zip", b"PK\x03\x04 and then html".to_vec()), Err(SdistError::Zip(_))));
    }

    #[test]
    fn an_sdist_bomb_stops_at_the_cap() {
        let mut counted = Counted { inner: io::repeat(0), read: MAX_SDIST_UNPACKED - 10, over: false };
        let mut buf = [0u8; 64];
        assert!(counted.read(&mut buf).is_err() && counted.over);
        // Members are counted as they are read.
        let filename: SdistFilename = "pkg-1.0.tar.gz".parse().unwrap();
        let mut layout = Layout::new(&filename);
        layout.members = MAX_SDIST_MEMBERS;
        assert!(matches!(layout.member("pkg-1.0/x"), Err(SdistError::TooManyMembers)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stored_sdists_are_streamed() {
        let store: Arc<dyn Store> = Arc::new(quarry_store::MemoryStore::default());
        let good = tar_gz(&[("pkg-1.0/PKG-INFO", FILE, METADATA, "")]);
        let bad = tar_gz(&[("pkg-1.0/setup.py", FILE, b"", "")]);
        for (name, data, ok) in [("pkg-1.0.tar.gz", good, true), ("pkg-1.0.zip", bad.clone(), false)] {
            let key = Key::new(format!("r/python/{name}")).unwrap();
            let size = data.len() as u64;
            store.put_bytes(&key, Bytes::from(data), Default::default()).await.unwrap();
            let got = check_sdist(store.clone(), key, name.parse().unwrap(), size, None).await;
            assert_eq!(got.is_ok(), ok, "{name}: {got:?}");
        }
    }
}
