//! Inspecting native packages (`.deb`, `.rpm`) into entries.
//!
//! A file whose sha256 the store does not record, or that is small enough, is streamed once
//! through MD5, SHA-1 and SHA-256 (apt's `Packages` carries all three); a small one is kept in
//! memory and parsed from there. A large file with a recorded sha256 is never read whole: its
//! control member or headers come from ranged reads, and its entry has SHA-256 only.

use std::sync::Arc;

use quarry_store::{ObjectMeta, Store};

use crate::deb::{DebReadError, read_deb_control};
use crate::rpmhead::{RpmInfo, header_span};
use crate::source::{RangeSource, Source, read_whole};
use crate::state::Entry;
use crate::{InspectError, Inspected};

/// Files up to this size are read whole for their MD5 and SHA-1 even when the sha256 is known.
const HASH_ALL_LIMIT: u64 = 64 * 1024 * 1024;
/// Files up to this size that are read whole anyway are parsed from memory.
const KEEP_LIMIT: u64 = 8 * 1024 * 1024;

/// Read a `.deb` or `.rpm` into an entry (filename = the key's file name; the caller sets the
/// path relative to its root).
pub(crate) async fn inspect_native(store: &Arc<dyn Store>, object: &ObjectMeta) -> Result<Inspected, InspectError> {
    let key = &object.key;
    let name = key.filename().to_owned();
    let meta = if object.sha256.is_some() { object.clone() } else { store.head(key).await? };
    if meta.size == 0 {
        return Err(InspectError::Rejected(format!("{name} is empty")));
    }
    let (mut entry, kept) = if meta.sha256.is_none() || meta.size <= HASH_ALL_LIMIT {
        let whole = read_whole(store.as_ref(), key, KEEP_LIMIT, true).await?;
        (Entry { md5: whole.md5, sha1: whole.sha1, ..Entry::stored(object, &whole.meta, whole.sha256) }, whole.bytes)
    } else {
        (Entry::stored(object, &meta, meta.sha256.clone().unwrap_or_default()), None)
    };
    let mut source = Source::new(kept, store.as_ref(), key, entry.size);
    let refuse = |e: &dyn std::fmt::Display| InspectError::Rejected(format!("{name}: {e}"));
    if name.ends_with(".deb") {
        entry.deb = Some(std::sync::Arc::new(read_deb_control(&mut source).await.map_err(|e| match e {
            DebReadError::Deb(e) => refuse(&e),
            DebReadError::Store(e) => InspectError::Store(e),
        })?));
    } else {
        let span = header_span(&mut source).await?.map_err(|e| refuse(&e))?;
        let headers = source.range(0, span.header_end).await?;
        entry.rpm = Some(std::sync::Arc::new(RpmInfo::from_headers(&headers, span).map_err(|e| refuse(&e))?));
    }
    Ok(Inspected { entry, core_metadata: None })
}
