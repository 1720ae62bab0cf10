//! The per-root repo state: every entry, computed once, plus what was published from it.
//!
//! The state wing: [`RepoState`] (this file), its object in the store ([`io`]: read, split per
//! project, committed with conditions), and the roots it is kept for ([`root`]: where a key's
//! root is, what names a root writes). Pure but for [`io`].
//!
//! State objects lie at a root: `.quarry-index.json` (a pip root's manifest) with
//! `.quarry-index/{project}.json`, `.quarry-apt.json`, `.quarry-dnf.json`; run listings have none
//! (their writer lists again until page and listing agree, `render::listing`). An entry's deb
//! control and rpm header are shared ([`Arc`]), so carrying unchanged entries into the next state
//! copies nothing. An rpm's header record is a [`Payload`]: the JSON text as read, parsed on first
//! use and written back as the same text, so a `+1 .rpm` reads the records of the packages it
//! renders, not all of them. A record that does not parse is reported as
//! `IndexError::DamagedState`, and the reindex starts over from an empty state, reading every file
//! again.

pub mod io;
pub mod root;

use std::collections::BTreeMap;
use std::sync::Arc;

use quarry_packaging::{DistFilename, PackageName};
use serde::{Deserialize, Serialize};

/// Bump when the stored shape changes incompatibly; an unknown version is rebuilt from scratch.
pub const STATE_VERSION: u32 = 1;

/// Everything an index needs about one distribution file, computed once when it lands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Entry {
    pub filename: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the file.
    pub sha256: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SS.ffffffZ`.
    pub upload_time: String,
    /// The store ETag the entry was computed from; a different ETag means different bytes.
    pub etag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_python: Option<String>,
    /// SHA-256 of the core metadata sidecar (`<file>.metadata`), for wheels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_metadata_sha256: Option<String>,
    /// Yank reason (possibly empty) when a `<file>.yanked` marker exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yanked: Option<String>,
    /// Lowercase hex MD5 and SHA-1 of the file, for apt's `MD5sum`/`SHA1` (computed when the
    /// file is read whole anyway).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub md5: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
    /// A `.deb`'s control stanza (shared: carrying an entry into the next state is cheap).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "shared")]
    pub deb: Option<Arc<crate::deb::DebControl>>,
    /// An `.rpm`'s header fields (shared, as `deb`), kept as the state stores them and read
    /// only where needed ([`Payload`]): a `+1` reads the headers of the packages it renders.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "shared")]
    pub rpm: Option<Arc<Payload<crate::rpmhead::RpmInfo>>>,
    /// A variant wheel's `variant.json` (PEP 825), validated against its label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<Box<crate::variant::VariantMetadata>>,
    /// Where a promoted file came from (`quarry promote`); absent for files uploaded directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Provenance>,
}

/// A promoted file's origin: the run it was built by, that run's platform and commit (when
/// the run's manifest names one). Shown as PEP 691 private keys (`_quarry_source_*`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Provenance {
    /// The run's id (`12345` of `12345-linux`).
    pub run: String,
    /// `linux`, `windows`, ….
    pub platform: String,
    /// The commit the run built (full sha), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

impl Entry {
    /// The `.rpm` header fields, read from the state's text on first use; `None` for other
    /// files, and for a record that does not read as one (logged; only a damaged state has one).
    pub fn rpm_info(&self) -> Option<&crate::rpmhead::RpmInfo> {
        self.rpm.as_deref()?.get()
    }

    /// An entry for a stored file with nothing read from inside it yet. `object` is the file as
    /// the listing named it, `meta` as a HEAD or GET saw it: the ETag kept is the listing's
    /// version, so the next run recognizes the file.
    pub fn stored(object: &quarry_store::ObjectMeta, meta: &quarry_store::ObjectMeta, sha256: String) -> Self {
        Self {
            filename: object.key.filename().to_owned(),
            size: meta.size,
            sha256,
            upload_time: upload_time(meta.last_modified),
            etag: if object.etag.is_empty() { object.version() } else { meta.etag.clone() },
            ..Self::default()
        }
    }
}

/// A record kept as the JSON text it was stored as and parsed on first use, so a state of
/// thousands of packages is read without building every record (a `+1` needs a few). It is
/// written back as the same text, and two are equal when their texts are. Made from a value,
/// it is serialized once, at once, so the text is always what serde writes for the value.
pub struct Payload<T> {
    raw: Box<serde_json::value::RawValue>,
    parsed: std::sync::OnceLock<Option<Box<T>>>,
}

impl<T: Serialize + serde::de::DeserializeOwned> Payload<T> {
    pub fn new(value: T) -> Self {
        let raw = serde_json::value::to_raw_value(&value).expect("a record serializes to JSON");
        Self { raw, parsed: std::sync::OnceLock::from(Some(Box::new(value))) }
    }

    /// The value; `None` (logged once) when the text does not read as one.
    pub fn get(&self) -> Option<&T> {
        self.parsed
            .get_or_init(|| match serde_json::from_str(self.raw.get()) {
                Ok(value) => Some(Box::new(value)),
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable record in a repo state");
                    None
                }
            })
            .as_deref()
    }

    /// Part of the value (`K` names the fields it needs and borrows what it can), read from
    /// the text without building the rest of it.
    pub fn view<'a, K: Deserialize<'a>>(&'a self) -> Option<K> {
        serde_json::from_str(self.raw.get()).ok()
    }

    /// Whether the value was read from the text (or the payload was made from it).
    pub fn is_read(&self) -> bool {
        self.parsed.get().is_some()
    }

    /// The JSON text.
    pub fn raw(&self) -> &str {
        self.raw.get()
    }
}

impl<T> std::fmt::Debug for Payload<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Payload").field(&self.raw.get()).finish()
    }
}

impl<T> PartialEq for Payload<T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw.get() == other.raw.get()
    }
}

impl<T> Eq for Payload<T> {}

impl<T> Serialize for Payload<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

impl<'de, T> Deserialize<'de> for Payload<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self { raw: Box::<serde_json::value::RawValue>::deserialize(d)?, parsed: std::sync::OnceLock::new() })
    }
}

/// `Option<Arc<T>>` stored as `Option<T>` (serde's own `Arc` support needs its `rc` feature).
mod shared {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<T: Serialize, S: Serializer>(value: &Option<Arc<T>>, s: S) -> Result<S::Ok, S::Error> {
        value.as_deref().serialize(s)
    }

    pub(super) fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Arc<T>>, D::Error> {
        Ok(Option::<T>::deserialize(d)?.map(Arc::new))
    }
}

/// A file the indexer refused, remembered by ETag so it is not re-read on every event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Rejected {
    pub etag: String,
    pub reason: String,
}

/// One root's state, stored as JSON at the root's state key (`.quarry-index.json`,
/// `.quarry-apt.json`, `.quarry-dnf.json`; a pip root's split into a manifest and one object per
/// project, [`io`]). It is the commit point: outputs are written before it, and it is replaced
/// only with a conditional put.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RepoState {
    pub version: u32,
    /// By filename.
    #[serde(default)]
    pub entries: BTreeMap<String, Entry>,
    #[serde(default)]
    pub rejected: BTreeMap<String, Rejected>,
    /// Every output published from this state: key → sha256 of its bytes.
    #[serde(default)]
    pub outputs: BTreeMap<String, String>,
    /// Content-addressed outputs (apt `by-hash/`, dnf `repodata/<sha>-…`) no longer current,
    /// with the Unix time they were retired: kept for clients holding an older `InRelease` or
    /// `repomd.xml`, deleted once the grace period has passed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub retired: BTreeMap<String, i64>,
    /// Unix time the apt/dnf metadata was last generated (Release `Date`, repomd `revision`,
    /// signature times): moves only when the entries change, so rendering is reproducible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generated: Option<i64>,
}

impl RepoState {
    pub fn empty() -> Self {
        Self { version: STATE_VERSION, ..Self::default() }
    }
}

/// Format a timestamp the way PEP 700 writes `upload-time`.
pub fn upload_time(ts: jiff::Timestamp) -> String {
    let micros = ts.subsec_nanosecond() / 1000;
    format!("{}.{micros:06}Z", ts.strftime("%Y-%m-%dT%H:%M:%S"))
}

/// A bare entry for `filename`, for tests of the renderers.
#[cfg(test)]
pub(crate) fn test_entry(filename: &str) -> Entry {
    Entry {
        filename: filename.into(),
        size: 1234,
        sha256: format!("{:064x}", filename.len()),
        upload_time: "2026-11-22T00:00:00.000000Z".into(),
        etag: "e".into(),
        ..Entry::default()
    }
}

/// The project a file of a pip root belongs to: a distribution's, or a release's
/// `-variants.json`'s.
pub fn file_project(filename: &str) -> Option<PackageName> {
    if let Some(stem) = filename.strip_suffix("-variants.json") {
        let (name, _) = stem.rsplit_once('-')?;
        return PackageName::new(name).ok();
    }
    filename.parse::<DistFilename>().ok().map(|d| d.name().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_without_provenance_still_load() {
        let old = r#"{"version":1,"entries":{"a-1.0.tar.gz":{"filename":"a-1.0.tar.gz","size":3,"sha256":"00","upload-time":"t","etag":"e"}}}"#;
        let state: RepoState = serde_json::from_str(old).unwrap();
        assert_eq!(state.entries["a-1.0.tar.gz"].source, None);
        let mut entry = test_entry("b-1.0.tar.gz");
        entry.source = Some(Provenance { run: "12".into(), platform: "linux".into(), commit: None });
        let json = serde_json::to_string(&entry).unwrap();
        assert!(json.contains(r#""source":{"run":"12","platform":"linux"}"#), "{json}");
        assert_eq!(serde_json::from_str::<Entry>(&json).unwrap(), entry);
    }

    #[test]
    fn upload_time_has_microseconds() {
        let ts = jiff::Timestamp::new(1_763_783_368, 123_456_789).unwrap();
        assert_eq!(upload_time(ts), "2025-11-22T03:49:28.123456Z");
        assert_eq!(upload_time(jiff::Timestamp::new(0, 0).unwrap()), "1970-01-01T00:00:00.000000Z");
    }
}
