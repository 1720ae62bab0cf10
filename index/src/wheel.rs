//! Reading a wheel's core metadata with ranged reads of the zip central directory.
//!
//! The wheel is never downloaded whole: a [`RangeReader`] presents the object as `Read + Seek`
//! to the `zip` crate and turns reads into a few ranged GETs (the tail, which holds the end of
//! central directory record and usually the whole central directory, then the METADATA member).

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use bytes::Bytes;
use quarry_store::{Key, Store, StoreError, StoreExt};

use crate::metadata::{CoreMetadata, MetadataError};

/// Refuse METADATA members larger than this (declared or actual).
pub const MAX_METADATA_SIZE: u64 = 16 * 1024 * 1024;
/// Refuse wheels with more members than this.
pub(crate) const MAX_MEMBERS: usize = 1_000_000;

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
    #[error("archive has more than {MAX_MEMBERS} members")]
    TooManyMembers,
    #[error("no .dist-info/METADATA at the top level of the wheel")]
    NoMetadata,
    #[error("more than one .dist-info directory: {}", .0.join(", "))]
    MultipleDistInfo(Vec<String>),
    #[error("{member} declares {declared} bytes uncompressed; the limit is {MAX_METADATA_SIZE}")]
    MetadataTooLarge { member: String, declared: u64 },
    #[error("{member} is larger than its declared size or the limit of {MAX_METADATA_SIZE} bytes")]
    MetadataOverflow { member: String },
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
    let mut archive = zip::ZipArchive::new(reader).map_err(|e| WheelError::NotAZip(e.to_string()))?;
    if archive.len() > MAX_MEMBERS {
        return Err(WheelError::TooManyMembers);
    }
    let mut dist_infos: Vec<String> = Vec::new();
    let mut metadata_index = None;
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
        }
    }
    if dist_infos.len() > 1 {
        dist_infos.sort();
        return Err(WheelError::MultipleDistInfo(dist_infos));
    }
    let (index, member, declared) = metadata_index.ok_or(WheelError::NoMetadata)?;
    if declared > MAX_METADATA_SIZE {
        return Err(WheelError::MetadataTooLarge { member, declared });
    }
    let file = archive.by_index(index).map_err(|e| WheelError::NotAZip(e.to_string()))?;
    let mut raw = Vec::with_capacity(declared as usize);
    file.take(declared.min(MAX_METADATA_SIZE) + 1)
        .read_to_end(&mut raw)
        .map_err(|e| WheelError::NotAZip(format!("{member}: {e}")))?;
    if raw.len() as u64 > declared {
        return Err(WheelError::MetadataOverflow { member });
    }
    let parsed = CoreMetadata::parse(&raw).map_err(|source| WheelError::Metadata { member: member.clone(), source })?;
    Ok(WheelMetadata { member, raw: Bytes::from(raw), parsed })
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
