//! Reading one distribution file into an [`Entry`]: its sha256 (store metadata, or streamed
//! once) and what its format needs from inside it (wheel METADATA by ranged reads, an sdist's
//! PKG-INFO, a `.deb`'s control stanza, an `.rpm`'s header).
//!
//! A reindex inspects its new files in batches, each batch a task of its own so hashing and parsing
//! use every worker thread (`Indexer::inspect_batched`); inside a batch (`inspect_many`) the wheels
//! and sdists whose sha256 the listing lacks are read with one [`Store::head_and_read_many`] per 64
//! files (`READ_BATCH`), one of at most 4 MiB with no recorded sha256 coming whole with its
//! metadata. A `.deb` or `.rpm` ([`super::native`]) up to 64 MiB costs exactly one GET (its MD5 and
//! SHA-1 are needed anyway); a larger one a HEAD and, with a recorded sha256, ranged reads only.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use quarry_packaging::DistFilename;
use quarry_store::{Key, ObjectMeta, Store, sha256_hex};

use crate::error::InspectError;
use crate::state::Entry;
use crate::variant::{VariantError, VariantMetadata};
use crate::wheel::{WheelError, read_wheel_metadata, read_wheel_metadata_from_bytes};

/// Files up to this size that must be hashed anyway are also parsed from memory.
const SMALL_FILE: u64 = 4 * 1024 * 1024;

/// What inspecting one distribution file produced.
#[derive(Debug, Clone)]
pub struct Inspected {
    pub entry: Entry,
    /// The wheel's METADATA bytes, to publish as `<file>.metadata`.
    pub core_metadata: Option<Bytes>,
}

/// Files a caller already inspected (the server's upload path), by key. A reindex uses one
/// instead of reading the file again only while the listed object's version is still the one
/// inspected (its entry's `etag`), so a fresh upload is read once.
#[derive(Debug, Clone, Default)]
pub struct Inspections(HashMap<String, Inspected>);

impl Inspections {
    /// What inspecting the object at `key` found; `inspected.entry.etag` is the version it
    /// was read at.
    pub fn insert(&mut self, key: &Key, inspected: Inspected) {
        self.0.insert(key.to_string(), inspected);
    }

    /// Add `other`'s inspections (coalesced requests); for a key in both, `other`'s wins.
    pub fn merge(&mut self, other: Inspections) {
        self.0.extend(other.0);
    }

    /// How many files.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No file.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The inspection of the listed `object`, if it was read at the version listed.
    pub(crate) fn matching(&self, object: &ObjectMeta) -> Option<Inspected> {
        self.0.get(object.key.as_str()).filter(|i| i.entry.etag == object.version()).cloned()
    }
}

/// Read what the index needs from one distribution file: its sha256 (from `object`, store
/// metadata, or streamed), and for wheels the validated core metadata (ranged reads only).
pub async fn inspect(store: &Arc<dyn Store>, object: &ObjectMeta) -> Result<Inspected, InspectError> {
    inspect_read(store, object, None).await
}

/// Whether inspecting `object` starts with [`Store::head_and_read`] (a wheel or an sdist
/// whose sha256 the listing does not give; a name that does not parse is refused unread), so
/// a batch can read them all at once.
pub(crate) fn needs_head_and_read(object: &ObjectMeta) -> bool {
    let name = object.key.filename();
    object.sha256.is_none()
        && !name.ends_with(".deb")
        && !name.ends_with(".rpm")
        && name.parse::<DistFilename>().is_ok()
}

/// Files read per [`Store::head_and_read_many`] when inspecting many.
const READ_BATCH: usize = 64;

/// [`inspect`] each of `objects`, reading those that need it with one
/// [`Store::head_and_read_many`] per [`READ_BATCH`]; each one's result, in order.
pub(crate) async fn inspect_many(
    store: &Arc<dyn Store>,
    objects: &[ObjectMeta],
) -> Vec<Result<Inspected, InspectError>> {
    let mut results = Vec::with_capacity(objects.len());
    for chunk in objects.chunks(READ_BATCH) {
        let needs: Vec<bool> = chunk.iter().map(needs_head_and_read).collect();
        let keys = chunk.iter().zip(&needs).filter(|(_, n)| **n).map(|(o, _)| o.key.clone()).collect();
        let mut read = store.head_and_read_many(keys, SMALL_FILE).await.into_iter();
        for (object, needs) in chunk.iter().zip(needs) {
            let prefetched = if needs { read.next() } else { None };
            results.push(inspect_read(store, object, prefetched).await);
        }
    }
    results
}

/// [`inspect`], with what [`Store::head_and_read`] answered for `object` when the caller
/// read it already.
async fn inspect_read(
    store: &Arc<dyn Store>,
    object: &ObjectMeta,
    prefetched: Option<quarry_store::Result<(ObjectMeta, Option<Bytes>)>>,
) -> Result<Inspected, InspectError> {
    let key = &object.key;
    if key.filename().ends_with(".deb") || key.filename().ends_with(".rpm") {
        let entry = crate::reindex::native::inspect_native(store, object).await?;
        return Ok(Inspected { entry, core_metadata: None });
    }
    let dist: DistFilename = key.filename().parse().map_err(|e| InspectError::Rejected(format!("{e}")))?;
    // A caller that already knows the sha256 (the upload path) saves the HEAD. Without a
    // recorded sha256 the file is read once anyway: a small one comes with the HEAD (one
    // trip to a local store) and is kept in memory for the METADATA as well, a large one is
    // streamed through the hasher.
    let (mut meta, mut whole) = match prefetched {
        _ if object.sha256.is_some() => (object.clone(), None),
        Some(read) => read?,
        None => store.head_and_read(key, SMALL_FILE).await?,
    };
    let sha256 = match (meta.sha256.clone(), &whole) {
        (Some(sha), _) => sha,
        (None, Some(bytes)) => sha256_hex(bytes),
        (None, None) => {
            let read = crate::source::read_whole(store.as_ref(), key, SMALL_FILE, false).await?;
            meta = read.meta;
            whole = read.bytes;
            read.sha256
        }
    };
    if meta.size == 0 {
        return Err(InspectError::Rejected(format!("{} is empty", key.filename())));
    }
    let mut entry = Entry::stored(object, &meta, sha256);
    let mut core_metadata = None;
    match &dist {
        DistFilename::Wheel(wheel) => {
            let md = match whole.clone() {
                Some(data) => read_wheel_metadata_from_bytes(data),
                None => read_wheel_metadata(store.clone(), key.clone(), meta.size).await,
            };
            let md = md.map_err(|e| match e {
                WheelError::Store(e) => InspectError::Store(e),
                other => InspectError::Rejected(format!("{}: {other}", key.filename())),
            })?;
            if let Some((field, got, want)) = md.parsed.disagreement(&wheel.name, &wheel.version) {
                return Err(InspectError::Rejected(format!(
                    "{}: METADATA says {field} is {got:?} but the filename says {want:?}",
                    key.filename()
                )));
            }
            if let Some(label) = &wheel.variant_label {
                let raw = md.variant_json.as_deref().ok_or(VariantError::Missing);
                let variant = raw.and_then(|raw| VariantMetadata::parse_wheel(raw, label));
                let variant = variant.map_err(|e| InspectError::Rejected(format!("{}: {e}", key.filename())))?;
                entry.variant = Some(Box::new(variant));
            }
            entry.requires_python = md.parsed.requires_python.clone();
            entry.core_metadata_sha256 = Some(sha256_hex(&md.raw));
            core_metadata = Some(md.raw);
        }
        DistFilename::Sdist(sdist) => {
            // Streamed once, bounded: one top directory named after the file, a PKG-INFO that
            // agrees with it (a gzip header in front of anything else is not an sdist).
            let md = crate::check_sdist(store.clone(), key.clone(), sdist.clone(), meta.size, whole.clone())
                .await
                .map_err(|e| match e {
                    crate::SdistError::Store(e) => InspectError::Store(e),
                    other => InspectError::Rejected(format!("{}: {other}", key.filename())),
                })?;
            entry.requires_python = md.requires_python;
        }
    }
    Ok(Inspected { entry, core_metadata })
}
