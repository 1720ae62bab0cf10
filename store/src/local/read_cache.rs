//! A bounded in-memory copy of small objects read from a [`super::LocalStore`], each checked
//! against the file's fingerprint (one `lstat`) before it is served.
//!
//! Every put renames a fresh inode into place, so any write through a store, in this process
//! or another, changes the fingerprint and the next read goes to the file. A rewrite in place
//! by a foreign writer is seen as soon as it changes the size or the modification time (the
//! ETag rests on the same fingerprint).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

use crate::ObjectMeta;

/// Bytes of bodies held at most; the oldest entries go first.
pub(super) const READ_CACHE_BYTES: usize = 32 * 1024 * 1024;

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<String, (ObjectMeta, Bytes)>,
    /// Keys in insertion order, each once.
    order: VecDeque<String>,
    bytes: usize,
}

#[derive(Debug)]
pub(super) struct ReadCache {
    cap: usize,
    entries: Mutex<Entries>,
}

impl ReadCache {
    pub(super) fn new(cap: usize) -> Self {
        Self { cap, entries: Mutex::default() }
    }

    /// The cached body of `key`, when it was read from a file of fingerprint `etag`.
    pub(super) fn get(&self, key: &str, etag: &str) -> Option<(ObjectMeta, Bytes)> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.map.get(key).filter(|(meta, _)| meta.etag == etag).cloned()
    }

    /// Remember `body`, the whole object described by `meta`, evicting the oldest entries to
    /// stay under the cap. A body larger than the cap is not kept.
    pub(super) fn insert(&self, meta: &ObjectMeta, body: &Bytes) {
        if body.len() > self.cap {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let key = meta.key.as_str();
        match entries.map.insert(key.to_owned(), (meta.clone(), body.clone())) {
            Some((_, old)) => entries.bytes -= old.len(),
            None => entries.order.push_back(key.to_owned()),
        }
        entries.bytes += body.len();
        while entries.bytes > self.cap {
            let Some(oldest) = entries.order.pop_front() else { break };
            if let Some((_, old)) = entries.map.remove(&oldest) {
                entries.bytes -= old.len();
            }
        }
    }

    #[cfg(test)]
    pub(super) fn held(&self) -> (usize, usize) {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        (entries.map.len(), entries.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Key;

    fn meta(key: &str, etag: &str, size: usize) -> ObjectMeta {
        ObjectMeta {
            key: Key::new(key).unwrap(),
            size: size as u64,
            etag: etag.to_owned(),
            last_modified: jiff::Timestamp::UNIX_EPOCH,
            sha256: None,
            content_type: None,
        }
    }

    #[test]
    fn entries_answer_only_their_fingerprint_and_stay_under_the_cap() {
        let cache = ReadCache::new(100);
        cache.insert(&meta("a", "1", 40), &Bytes::from(vec![1; 40]));
        assert!(cache.get("a", "1").is_some());
        assert!(cache.get("a", "2").is_none(), "another fingerprint is another file");
        cache.insert(&meta("a", "2", 50), &Bytes::from(vec![2; 50]));
        assert_eq!(cache.held(), (1, 50));
        assert_eq!(cache.get("a", "2").unwrap().1[0], 2);
        cache.insert(&meta("b", "1", 40), &Bytes::from(vec![3; 40]));
        cache.insert(&meta("c", "1", 40), &Bytes::from(vec![4; 40]));
        // 130 bytes > 100: the oldest ("a") went.
        assert_eq!(cache.held(), (2, 80));
        assert!(cache.get("a", "2").is_none());
        cache.insert(&meta("d", "1", 101), &Bytes::from(vec![5; 101]));
        assert!(cache.get("d", "1").is_none(), "larger than the cap: not kept");
        assert_eq!(cache.held(), (2, 80));
    }
}
