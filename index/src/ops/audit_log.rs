//! The audit log: every write to a store (an upload, a minted token, a yank or unyank, a
//! deletion, a promotion, a rollback, `quarry gc` and `quarry prune`), who did it, to which key,
//! with which sha256 and what came of it ([`AuditEntry`]), kept in the store itself so S3 holds
//! it too.
//!
//! S3 has no append, and rewriting one growing object per write would make each write cost the
//! log's size: each entry is one small object of its own, one JSON line, put with
//! `If-None-Match` (never overwriting another), at
//! `.quarry-audit/{key}/{yyyymmddThhmmss.ffffffZ}-{rand}.json` ([`AUDIT_PREFIX`]). An entry
//! for a prefix (a run `gc` deleted) lies at the prefix; one whose key is no valid key (a
//! refused request naming a hostile path) at the top. The key first makes the two readings
//! cheap: a file's history (the browse pages, `--key`) is one listing of its prefix, and a
//! time filter (`--since`) is applied to the names before any entry is read. [`read`] merges
//! what it lists in time order.
//!
//! The entries are objects of the store like any other; `quarry serve` answers them only at
//! `GET /-/audit` to a token with the right to read them.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures_util::StreamExt;
use jiff::Timestamp;
use quarry_store::{Condition, Key, PutOptions, Store, StoreError, StoreExt};
use serde::{Deserialize, Serialize};
use sha2::Digest;

/// Where the audit log lies in a store (a top-level prefix no run, channel or root uses).
pub const AUDIT_PREFIX: &str = ".quarry-audit/";
/// Whether `path` lies in the audit log (in any case: a local store on a case-insensitive file
/// system reads `.QUARRY-AUDIT/` there too).
pub fn is_audit_path(path: &str) -> bool {
    path.get(..AUDIT_PREFIX.len()).is_some_and(|p| p.eq_ignore_ascii_case(AUDIT_PREFIX))
}

/// Largest entry object read; larger ones are skipped.
const MAX_ENTRY_BYTES: u64 = 16 * 1024;
/// Longest key and detail kept in an entry; longer ones are cut.
const MAX_FIELD: usize = 1024;
/// Entries read at once.
const CONCURRENCY: usize = 16;

/// What was done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditAction {
    Upload,
    Mint,
    Yank,
    Unyank,
    Delete,
    Promote,
    Rollback,
    Forget,
    Gc,
    Prune,
}

impl AuditAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Upload => "upload",
            Self::Mint => "mint",
            Self::Yank => "yank",
            Self::Unyank => "unyank",
            Self::Delete => "delete",
            Self::Promote => "promote",
            Self::Rollback => "rollback",
            Self::Forget => "forget",
            Self::Gc => "gc",
            Self::Prune => "prune",
        }
    }
}

/// What came of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditOutcome {
    /// Done (also when nothing had to change: the same bytes uploaded again, a yank repeated).
    Ok,
    /// Refused as bad input or a conflict (a hostile key, a channel-held file).
    Refused,
    /// Refused by authorization: a valid token outside its scope or rights.
    Denied,
    /// Failed (the store, a reindex).
    Failed,
}

/// One write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When, RFC 3339 in UTC with microseconds (`2026-01-02T03:04:05.123456Z`).
    pub time: String,
    pub action: AuditAction,
    /// Who: a token's name or fingerprint, a trusted publisher's claims, a local user.
    pub identity: String,
    /// The key written (a file), or the prefix (a run, a channel, a token's scope).
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub outcome: AuditOutcome,
    /// The reason of a yank, a refusal or a failure; what a promotion copied from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl AuditEntry {
    /// An entry stamped now.
    pub fn now(action: AuditAction, identity: &str, key: &str, outcome: AuditOutcome) -> Self {
        Self {
            time: stamp(Timestamp::now()),
            action,
            identity: cut(identity),
            key: cut(key),
            sha256: None,
            outcome,
            detail: None,
        }
    }

    #[must_use]
    pub fn sha256(mut self, sha256: Option<String>) -> Self {
        self.sha256 = sha256;
        self
    }

    #[must_use]
    pub fn detail(mut self, detail: Option<String>) -> Self {
        self.detail = detail.as_deref().map(cut);
        self
    }

    /// The object the entry is stored as ([`AUDIT_PREFIX`], its key, its time, `nonce`). Only
    /// what was done lies under its key: a refusal's key is the request's, untrusted (a
    /// traversal, a reserved name as a directory), and lies at the top.
    fn object_key(&self, nonce: &str) -> Result<Key, StoreError> {
        let compact = compact_time(&self.time);
        let name = format!("{compact}-{nonce}.json");
        let dir = self.key.trim_end_matches('/');
        let under_key = Key::new(dir).and_then(|_| Key::new(format!("{AUDIT_PREFIX}{dir}/{name}"))).ok();
        match under_key.filter(|_| self.outcome == AuditOutcome::Ok) {
            Some(key) => Ok(key),
            None => Ok(Key::new(format!("{AUDIT_PREFIX}{name}"))?),
        }
    }
}

impl std::fmt::Display for AuditEntry {
    /// `TIME ACTION OUTCOME IDENTITY KEY [sha256=…] [(detail)]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let outcome = serde_json::to_value(self.outcome).ok();
        let outcome = outcome.as_ref().and_then(|v| v.as_str()).unwrap_or("?");
        write!(f, "{} {} {outcome} {} {}", self.time, self.action.as_str(), self.identity, self.key)?;
        if let Some(sha) = &self.sha256 {
            write!(f, " sha256={sha}")?;
        }
        if let Some(detail) = &self.detail {
            write!(f, " ({detail})")?;
        }
        Ok(())
    }
}

/// `s` cut to [`MAX_FIELD`] bytes at a character boundary.
fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_FIELD);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// `2026-01-02T03:04:05.123456Z`: sortable as text, microseconds always written.
pub fn stamp(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// `20260102T030405.123456Z`: [`stamp`] without the separators a Windows file name or a sort
/// would trip on.
fn compact_time(time: &str) -> String {
    time.chars().filter(|c| !matches!(c, '-' | ':')).collect()
}

/// The time an entry object's name carries (`20260102T030405.123456Z-ab12cd34.json`), as
/// [`stamp`] writes it; `None` for a name that is no entry's.
fn time_of_name(name: &str) -> Option<String> {
    let compact = name.strip_suffix(".json")?.split('-').next()?;
    let b = compact.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    if compact.len() != 23 || !digits(0..8) || b[8] != b'T' || !digits(9..15) || b[15] != b'.' || !digits(16..22) {
        return None;
    }
    let c = compact;
    Some(format!("{}-{}-{}T{}:{}:{}Z", &c[0..4], &c[4..6], &c[6..8], &c[9..11], &c[11..13], &c[13..22]))
}

/// A name part no other writer picks at the same microsecond: a hash of the process, a counter
/// and the clock.
fn nonce() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let seed = format!("{}:{n}:{:?}:{:?}", std::process::id(), Timestamp::now(), std::thread::current().id());
    hex::encode(&sha2::Sha256::digest(seed.as_bytes())[..5])
}

/// Append `entry` to the log in `store`: one object of its own, never overwriting another.
pub async fn append(store: &dyn Store, entry: &AuditEntry) -> Result<Key, StoreError> {
    let mut line = serde_json::to_vec(entry).map_err(|e| StoreError::Backend(format!("an audit entry: {e}")))?;
    line.push(b'\n');
    let line = Bytes::from(line);
    let mut attempt = 0;
    loop {
        let key = entry.object_key(&nonce())?;
        let options = PutOptions {
            content_type: Some("application/json".into()),
            ..PutOptions::condition(Condition::IfNoneMatch)
        };
        match store.put_bytes(&key, line.clone(), options).await {
            Ok(_) => return Ok(key),
            Err(e) if e.is_conflict() && attempt < 3 => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

/// [`append`], a failure logged instead of returned: the write it records is done already, and
/// its caller answers for the write.
pub async fn record(store: &dyn Store, entry: &AuditEntry) {
    if let Err(e) = append(store, entry).await {
        tracing::warn!(key = %entry.key, action = entry.action.as_str(), error = %e, "the audit log could not record a write");
    }
}

/// A time as `--since` and `?since=` take it: RFC 3339 (`2026-01-02T03:04:05Z`) or a date
/// (`2026-01-02`, midnight UTC).
pub fn parse_since(text: &str) -> Result<jiff::Timestamp, String> {
    let text = text.trim();
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Ok(t);
    }
    text.parse::<jiff::civil::Date>()
        .ok()
        .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC).ok())
        .map(|z| z.timestamp())
        .ok_or_else(|| format!("{text:?} is no time: give RFC 3339 (2026-01-02T03:04:05Z) or a date (2026-01-02)"))
}

/// Which entries [`read`] returns.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only entries at or after this time.
    pub since: Option<Timestamp>,
    /// Only entries whose key starts with this (a file, a root, a run).
    pub key_prefix: Option<String>,
    /// Only what was done (no refusals, which are read from the top of the log).
    pub done_only: bool,
}

/// What [`read`] found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AuditLog {
    /// Oldest first.
    pub entries: Vec<AuditEntry>,
    /// Objects under [`AUDIT_PREFIX`] that are no entry (unreadable, too large), by key.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

impl std::fmt::Display for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for entry in &self.entries {
            writeln!(f, "{entry}")?;
        }
        for key in &self.unreadable {
            writeln!(f, "unreadable: {key}")?;
        }
        Ok(())
    }
}

/// The entries of the log in `store` that `query` selects, oldest first (ties by key).
pub async fn read(store: &dyn Store, query: &AuditQuery) -> Result<AuditLog, StoreError> {
    let prefix = query.key_prefix.as_deref().unwrap_or_default().trim_start_matches('/');
    let since = query.since.map(stamp);
    let mut listed = store.list_all(&format!("{AUDIT_PREFIX}{prefix}"), false).await?.objects;
    // Refusals lie at the top, whatever their key (read whole without a prefix).
    if !prefix.is_empty() && !query.done_only {
        listed.extend(store.list_all(AUDIT_PREFIX, true).await?.objects);
    }
    let mut log = AuditLog::default();
    let mut keys = Vec::new();
    for object in listed {
        let Some(time) = time_of_name(object.key.filename()) else {
            log.unreadable.push(object.key.to_string());
            continue;
        };
        if since.as_ref().is_none_or(|s| time >= *s) {
            keys.push(object.key);
        }
    }
    let reads: Vec<(Key, Result<Bytes, StoreError>)> = futures_util::stream::iter(keys)
        .map(|key| async move {
            let read = store.get_bytes(&key, MAX_ENTRY_BYTES).await.map(|(_, bytes)| bytes);
            (key, read)
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    for (key, read) in reads {
        let parsed = match read {
            Ok(bytes) => serde_json::from_slice::<AuditEntry>(&bytes).ok(),
            Err(e) if e.is_not_found() => continue,
            Err(StoreError::TooLarge { .. }) => None,
            Err(e) => return Err(e),
        };
        let at_top = !key.as_str()[AUDIT_PREFIX.len()..].contains('/');
        match parsed {
            Some(entry) if entry.key.starts_with(prefix) && (!query.done_only || entry.outcome == AuditOutcome::Ok) => {
                log.entries.push(entry);
            }
            // A refusal about another key, or a done entry wanted without refusals.
            Some(_) if at_top || query.done_only => {}
            _ => log.unreadable.push(key.to_string()),
        }
    }
    log.entries.sort_by(|a, b| (&a.time, &a.key).cmp(&(&b.time, &b.key)));
    log.unreadable.sort();
    Ok(log)
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_store::MemoryStore;

    fn entry(time: &str, action: AuditAction, key: &str) -> AuditEntry {
        AuditEntry { time: time.into(), ..AuditEntry::now(action, "ci", key, AuditOutcome::Ok) }
    }

    #[test]
    fn times_and_names() {
        let t: Timestamp = "2026-01-02T03:04:05.1234567Z".parse().unwrap();
        assert_eq!(stamp(t), "2026-01-02T03:04:05.123456Z");
        assert_eq!(stamp(Timestamp::UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let e = entry("2026-01-02T03:04:05.123456Z", AuditAction::Upload, "1-linux/python/a-1.0-py3-none-any.whl");
        let key = e.object_key("ab12cd34ef").unwrap();
        assert_eq!(
            key.as_str(),
            ".quarry-audit/1-linux/python/a-1.0-py3-none-any.whl/20260102T030405.123456Z-ab12cd34ef.json"
        );
        assert_eq!(time_of_name(key.filename()).as_deref(), Some("2026-01-02T03:04:05.123456Z"));
        // A prefix lies at the prefix; a key no key can be, at the top.
        let gc = entry("2026-01-02T03:04:05.123456Z", AuditAction::Gc, "1-linux/");
        assert_eq!(gc.object_key("n").unwrap().as_str(), ".quarry-audit/1-linux/20260102T030405.123456Z-n.json");
        for hostile in ["../../etc/passwd", "a//b", "", "/abs", "x\\y", ".quarry/lock", "1-linux/python/simple/a.whl"] {
            let e = entry("2026-01-02T03:04:05.123456Z", AuditAction::Delete, hostile);
            let e = AuditEntry { outcome: AuditOutcome::Refused, ..e };
            assert_eq!(
                e.object_key("n").unwrap().as_str(),
                ".quarry-audit/20260102T030405.123456Z-n.json",
                "{hostile}"
            );
        }
        for bad in ["index.html", "2026-x.json", "20260102T030405.123456Z.txt", "20260102T0304051123456Z-n.json"] {
            assert_eq!(time_of_name(bad), None, "{bad}");
        }
        assert_eq!(nonce().len(), 10);
        assert_ne!(nonce(), nonce());
    }

    #[test]
    fn since_takes_times_and_dates() {
        assert_eq!(parse_since("2026-01-02").unwrap().to_string(), "2026-01-02T00:00:00Z");
        assert_eq!(parse_since(" 2026-01-02T03:04:05Z ").unwrap().to_string(), "2026-01-02T03:04:05Z");
        insta::assert_snapshot!(parse_since("yesterday").unwrap_err(), @r#""yesterday" is no time: give RFC 3339 (2026-01-02T03:04:05Z) or a date (2026-01-02)"#);
    }

    #[test]
    fn an_entry_is_one_json_line_and_reads_as_text() {
        let e = entry("2026-01-02T03:04:05.123456Z", AuditAction::Yank, "1-linux/python/a-1.0-py3-none-any.whl")
            .sha256(Some("ab".repeat(32)))
            .detail(Some("broken on ROCm 7".into()));
        insta::assert_snapshot!("audit_entry_json", serde_json::to_string(&e).unwrap());
        insta::assert_snapshot!("audit_entry_text", e.to_string());
        let long = AuditEntry::now(AuditAction::Delete, &"i".repeat(5000), &"k".repeat(5000), AuditOutcome::Refused)
            .detail(Some("é".repeat(3000)));
        assert_eq!((long.identity.len(), long.key.len()), (MAX_FIELD, MAX_FIELD));
        assert!(long.detail.unwrap().len() <= MAX_FIELD);
    }

    #[tokio::test]
    async fn appended_entries_read_back_in_time_order_by_key_and_since() {
        let store = MemoryStore::default();
        let wheel = "1-linux/python/a-1.0-py3-none-any.whl";
        let entries = [
            entry("2026-01-03T00:00:00.000000Z", AuditAction::Delete, wheel),
            entry("2026-01-01T00:00:00.000000Z", AuditAction::Upload, wheel),
            entry("2026-01-02T00:00:00.000000Z", AuditAction::Yank, wheel),
            entry("2026-01-02T12:00:00.000000Z", AuditAction::Upload, "2-linux/python/b-1.0-py3-none-any.whl"),
            entry("2026-01-04T00:00:00.000000Z", AuditAction::Gc, "1-linux/"),
            entry("2026-01-05T00:00:00.000000Z", AuditAction::Delete, "../x"),
        ];
        for e in &entries {
            append(&store, e).await.unwrap();
        }
        // The same entry twice is two objects: nothing is overwritten.
        append(&store, &entries[0]).await.unwrap();
        let all = read(&store, &AuditQuery::default()).await.unwrap();
        let times: Vec<&str> = all.entries.iter().map(|e| &e.time[..10]).collect();
        assert_eq!(
            times,
            ["2026-01-01", "2026-01-02", "2026-01-02", "2026-01-03", "2026-01-03", "2026-01-04", "2026-01-05"]
        );
        assert!(all.unreadable.is_empty());
        // A refusal lies at the top, and is found by its key all the same (but not as done).
        let refused = AuditEntry {
            outcome: AuditOutcome::Refused,
            ..entry("2026-01-06T00:00:00.000000Z", AuditAction::Delete, wheel)
        };
        assert_eq!(append(&store, &refused).await.unwrap().as_str().matches('/').count(), 1);
        let of_wheel =
            read(&store, &AuditQuery { key_prefix: Some(wheel.into()), ..AuditQuery::default() }).await.unwrap();
        assert_eq!(of_wheel.entries.last(), Some(&refused));
        let done = AuditQuery { key_prefix: Some(wheel.into()), done_only: true, ..AuditQuery::default() };
        assert_eq!(read(&store, &done).await.unwrap().entries.len(), 4);
        let actions: Vec<_> = of_wheel.entries.iter().map(|e| e.action).collect();
        assert_eq!(
            actions,
            [AuditAction::Upload, AuditAction::Yank, AuditAction::Delete, AuditAction::Delete, AuditAction::Delete]
        );
        let run =
            read(&store, &AuditQuery { key_prefix: Some("1-linux/".into()), ..AuditQuery::default() }).await.unwrap();
        assert_eq!(run.entries.len(), 6);
        let since = Some("2026-01-02T06:00:00Z".parse().unwrap());
        let late = read(&store, &AuditQuery { since, ..AuditQuery::default() }).await.unwrap();
        assert_eq!(late.entries.len(), 6);
        assert_eq!(late.entries[0].key, "2-linux/python/b-1.0-py3-none-any.whl");
    }

    #[tokio::test]
    async fn planted_objects_are_reported_not_trusted() {
        let store = MemoryStore::default();
        let put = |key: &str, body: &'static [u8]| {
            let key = Key::new(key).unwrap();
            let store = &store;
            async move { store.put_bytes(&key, Bytes::from_static(body), PutOptions::default()).await.unwrap() }
        };
        put(".quarry-audit/readme.txt", b"hello").await;
        put(".quarry-audit/1-linux/20260102T030405.123456Z-n.json", b"{not json").await;
        // An entry naming another key than its place: not listed under that place.
        put(
            ".quarry-audit/1-linux/20260102T030405.123456Z-m.json",
            br#"{"time":"2026-01-02T03:04:05.123456Z","action":"upload","identity":"x","key":"9-linux/a.whl","outcome":"ok"}"#,
        )
        .await;
        let log =
            read(&store, &AuditQuery { key_prefix: Some("1-linux/".into()), ..AuditQuery::default() }).await.unwrap();
        assert!(log.entries.is_empty(), "{log:?}");
        assert_eq!(log.unreadable.len(), 3, "{log:?}");
        let all = read(&store, &AuditQuery::default()).await.unwrap();
        assert_eq!(all.entries.len(), 1);
        assert_eq!(all.unreadable.len(), 2);
    }
}
