//! The per-root repo state: every entry, computed once, plus what was published from it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bump when the stored shape changes incompatibly; an unknown version is rebuilt from scratch.
pub const STATE_VERSION: u32 = 1;

/// Everything an index needs about one distribution file, computed once when it lands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
}

/// A file the indexer refused, remembered by ETag so it is not re-read on every event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Rejected {
    pub etag: String,
    pub reason: String,
}

/// One root's state, stored as JSON at `<root>/.quarry-index.json`. It is the commit point:
/// outputs are written before it, and it is replaced only with a conditional put.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_time_has_microseconds() {
        let ts = jiff::Timestamp::new(1_763_783_368, 123_456_789).unwrap();
        assert_eq!(upload_time(ts), "2025-11-22T03:49:28.123456Z");
        assert_eq!(upload_time(jiff::Timestamp::new(0, 0).unwrap()), "1970-01-01T00:00:00.000000Z");
    }
}
