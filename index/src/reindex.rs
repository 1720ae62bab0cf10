//! The reindex loop: read state → list the root → compute entries for new files only → render →
//! publish changed outputs (sidecars first, pointer pages last) → conditionally commit the state.
//! A conflict on the commit means another indexer moved the state: start over and republish
//! everything, so the last successful commit always follows a full publish of its own pages.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use quarry_packaging::DistFilename;
use quarry_store::{
    Condition, ConditionalWrites, Key, ObjectMeta, PutOptions, Store, StoreError, StoreExt, sha256_hex,
};
use serde::Serialize;

use crate::apt::AptOptions;
use crate::render::{self, Page, Stage};
use crate::root::{RepoKind, RepoRoot};
use crate::sign::{SignError, Signer};
use crate::state::{Entry, Rejected, RepoState, STATE_VERSION};
use crate::wheel::{WheelError, read_wheel_metadata, read_wheel_metadata_from_bytes};

/// Largest state object read back (10,000 entries take about 4 MiB).
const MAX_STATE_SIZE: u64 = 512 * 1024 * 1024;
/// Files up to this size that must be hashed anyway are also parsed from memory.
const SMALL_FILE: u64 = 4 * 1024 * 1024;
/// Largest yank marker read; longer reasons are cut.
const MAX_YANK_REASON: u64 = 1024;
/// Suffix of the sidecar holding a wheel's core metadata (PEP 658).
pub const METADATA_SUFFIX: &str = ".metadata";
/// Suffix of the marker object that yanks a file; its content is the reason.
pub const YANK_SUFFIX: &str = ".yanked";

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Key(#[from] quarry_store::KeyError),
    #[error(
        "store {0} cannot do conditional writes; refusing to index it, since concurrent indexers would lose entries"
    )]
    UnsafeStore(String),
    #[error("gave up on {root} after {attempts} attempts that each lost a race with another indexer")]
    TooManyConflicts { root: String, attempts: u32 },
    #[error(transparent)]
    Sign(#[from] SignError),
}

/// Why one file was refused, or the store error that kept it from being read.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("{0}")]
    Rejected(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What inspecting one distribution file produced.
#[derive(Debug, Clone)]
pub struct Inspected {
    pub entry: Entry,
    /// The wheel's METADATA bytes, to publish as `<file>.metadata`.
    pub core_metadata: Option<Bytes>,
}

/// What one reindex did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReindexReport {
    pub root: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub rejected: BTreeMap<String, String>,
    pub written: Vec<String>,
    pub deleted: Vec<String>,
    pub attempts: u32,
    /// False when nothing had changed and nothing was written.
    pub committed: bool,
}

impl std::fmt::Display for ReindexReport {
    /// One line: `ROOT: N added, N removed, N rejected, N written, N deleted[ (unchanged)]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} added, {} removed, {} rejected, {} written, {} deleted{}",
            self.root,
            self.added.len(),
            self.removed.len(),
            self.rejected.len(),
            self.written.len(),
            self.deleted.len(),
            if self.committed { "" } else { " (unchanged)" }
        )
    }
}

#[derive(Debug, Clone)]
pub struct Indexer {
    store: Arc<dyn Store>,
    concurrency: usize,
    max_attempts: u32,
    /// Files already inspected by the caller (the upload path), by key; used when the ETag
    /// still matches, so a fresh upload is not read twice.
    known: Arc<Mutex<HashMap<String, Inspected>>>,
    config: IndexConfig,
}

/// How apt and dnf metadata are published: signing key, Release fields, grace period.
#[derive(Debug, Clone)]
pub struct IndexConfig {
    /// Signs apt (`InRelease`, `Release.gpg`) and dnf (`repomd.xml.asc`) metadata when set.
    pub signer: Option<Arc<Signer>>,
    pub apt: AptOptions,
    /// Seconds a superseded content-addressed output (apt by-hash, dnf repodata) is kept
    /// (0: deleted at once).
    pub grace_seconds: i64,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self { signer: None, apt: AptOptions::default(), grace_seconds: DEFAULT_GRACE_SECONDS }
    }
}

impl IndexConfig {
    /// From the environment: `QUARRY_SIGNING_KEY` (an armored OpenPGP secret key) or
    /// `QUARRY_SIGNING_KEY_FILE`, `QUARRY_APT_ORIGIN`, `QUARRY_APT_LABEL`,
    /// `QUARRY_GRACE_SECONDS`.
    pub fn from_env() -> Result<Self, SignError> {
        let mut apt = AptOptions::default();
        if let Ok(origin) = std::env::var("QUARRY_APT_ORIGIN") {
            apt.origin = origin;
        }
        if let Ok(label) = std::env::var("QUARRY_APT_LABEL") {
            apt.label = label;
        }
        let grace_seconds = match std::env::var("QUARRY_GRACE_SECONDS") {
            Ok(v) => v.parse().map_err(|_| SignError::Key(format!("QUARRY_GRACE_SECONDS={v:?} is not a number")))?,
            Err(_) => DEFAULT_GRACE_SECONDS,
        };
        Ok(Self { signer: Signer::from_env()?.map(Arc::new), apt, grace_seconds })
    }
}

/// A root's committed state as readers see it: `None` when the root was never indexed or its
/// state is unreadable (the indexer rebuilds such a state on its next run).
pub async fn read_state(store: &dyn Store, root: &RepoRoot) -> Result<Option<RepoState>, StoreError> {
    match store.get_bytes(&root.state_key(), MAX_STATE_SIZE).await {
        Ok((_, bytes)) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Default grace period for superseded by-hash and repodata files: a day.
pub const DEFAULT_GRACE_SECONDS: i64 = 24 * 60 * 60;

/// Most remembered inspections kept; beyond it the oldest are simply recomputed.
const MAX_KNOWN: usize = 4096;

impl Indexer {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store, concurrency: 8, max_attempts: 50, known: Arc::default(), config: IndexConfig::default() }
    }

    #[must_use]
    pub fn with_config(mut self, config: IndexConfig) -> Self {
        self.config = config;
        self
    }

    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// Remember what the caller learned inspecting `key`, for the next reindex of its root.
    pub fn remember(&self, key: &Key, inspected: Inspected) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= MAX_KNOWN {
            known.clear();
        }
        known.insert(key.to_string(), inspected);
    }

    fn recall(&self, object: &ObjectMeta) -> Option<Inspected> {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.remove(object.key.as_str()).filter(|i| i.entry.etag == object.version())
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Bring `root`'s pages up to date with its listing.
    pub async fn reindex(&self, root: &RepoRoot) -> Result<ReindexReport, IndexError> {
        self.reindex_with(root, false).await
    }

    /// Like [`Indexer::reindex`]; with `force`, every page is republished even when the state
    /// says nothing changed (repairs pages damaged or deleted behind the indexer's back).
    ///
    /// A lost commit race is retried; the retry republishes every page this call wrote before,
    /// since those may have overwritten the winner's newer pages. On a store whose conditional
    /// writes are not atomic ([`ConditionalWrites::Verify`]) a commit is read back: if another
    /// writer's state replaced it, or the listing holds files it lacks, the loop goes on.
    #[tracing::instrument(skip_all, fields(root = %root, force))]
    pub async fn reindex_with(&self, root: &RepoRoot, force: bool) -> Result<ReindexReport, IndexError> {
        let mode = self.store.conditional_writes();
        if mode == ConditionalWrites::Unsupported {
            return Err(IndexError::UnsafeStore(self.store.describe()));
        }
        let mut pass = Pass { force_all: force, dirty: BTreeSet::new(), expect: None, inspected: HashMap::new() };
        let mut total = ReindexReport { root: root.to_string(), ..ReindexReport::default() };
        for attempt in 1..=self.max_attempts {
            total.attempts = attempt;
            match self.attempt(root, &mut pass).await {
                Ok(report) => {
                    let committed = report.committed;
                    total.absorb(report);
                    if !committed || mode == ConditionalWrites::Atomic {
                        return Ok(total);
                    }
                    // Read back what was committed on the next pass.
                    tracing::debug!(attempt, "verifying the commit");
                    pass.force_all = false;
                }
                Err(IndexError::Store(e)) if e.is_conflict() => {
                    tracing::debug!(attempt, "state moved under us; retrying");
                    pass.expect = None;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(IndexError::TooManyConflicts { root: root.to_string(), attempts: self.max_attempts })
    }

    async fn load_state(&self, root: &RepoRoot) -> Result<(RepoState, Option<String>), IndexError> {
        match self.store.get_bytes(&root.state_key(), MAX_STATE_SIZE).await {
            Ok((meta, bytes)) => {
                let state = match serde_json::from_slice::<RepoState>(&bytes) {
                    Ok(s) if s.version == STATE_VERSION => s,
                    Ok(s) => {
                        tracing::warn!(version = s.version, "unknown state version; rebuilding");
                        RepoState::empty()
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "unreadable state; rebuilding");
                        RepoState::empty()
                    }
                };
                Ok((state, Some(meta.etag)))
            }
            Err(e) if e.is_not_found() => Ok((RepoState::empty(), None)),
            Err(e) => Err(e.into()),
        }
    }

    async fn attempt(&self, root: &RepoRoot, pass: &mut Pass) -> Result<ReindexReport, IndexError> {
        let (old, state_etag) = self.load_state(root).await?;
        // Verifying a commit: another state in its place means racing writers both passed the
        // precondition, and this call's pages may be the stale ones.
        if let Some(mine) = pass.expect.take() {
            if state_etag.as_deref().map(etag_value) == Some(etag_value(&mine)) {
                // Still this call's state: its pages went out before it, nothing to redo.
                pass.dirty.clear();
            } else {
                tracing::info!("another indexer's state replaced this commit; republishing this call's pages");
            }
        }
        let force = pass.force_all;
        let (package_prefix, recursive) = root.package_prefix();
        let listing = self.store.list_all(&package_prefix, !recursive).await?;

        // Package files by their path relative to the root.
        let mut files = BTreeMap::new();
        let mut yank_markers = BTreeMap::new();
        for object in listing.objects {
            let Some(relative) = object.key.as_str().strip_prefix(root.as_str()).map(str::to_owned) else {
                continue;
            };
            if let Some(target) = relative.strip_suffix(YANK_SUFFIX) {
                if root.kind() == RepoKind::Pip && root.is_package(target) {
                    yank_markers.insert(target.to_owned(), object.key);
                }
            } else if root.is_package(&relative) {
                files.insert(relative, object);
            }
        }

        // Nothing to index and never indexed: a root that was deleted (a run removed by gc or
        // a lifecycle rule fires one event per object) is not brought back as empty pages.
        if files.is_empty() && yank_markers.is_empty() && state_etag.is_none() && !force {
            return Ok(ReindexReport { root: root.to_string(), ..ReindexReport::default() });
        }

        let mut new = RepoState::empty();
        let mut todo = Vec::new();
        for (name, object) in &files {
            let version = object.version();
            if let Some(entry) = old.entries.get(name).filter(|e| e.etag == version) {
                new.entries.insert(name.clone(), entry.clone());
            } else if let Some(rejected) = old.rejected.get(name).filter(|r| r.etag == version) {
                new.rejected.insert(name.clone(), rejected.clone());
            } else {
                todo.push(object.clone());
            }
        }

        let store = &self.store;
        let earlier = &pass.inspected;
        let inspected: Vec<(ObjectMeta, Result<Inspected, InspectError>)> = futures_util::stream::iter(todo)
            .map(|object| async move {
                let again = earlier.get(object.key.as_str()).filter(|i| i.entry.etag == object.version()).cloned();
                let result = match again.or_else(|| self.recall(&object)) {
                    Some(known) => Ok(known),
                    None => inspect(store, &object).await,
                };
                (object, result)
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let mut report = ReindexReport { root: root.to_string(), ..ReindexReport::default() };
        let mut sidecars = Vec::new();
        for (object, result) in inspected {
            let name = object.key.as_str().strip_prefix(root.as_str()).unwrap_or(object.key.filename()).to_owned();
            match result {
                Ok(mut found) => {
                    found.entry.filename.clone_from(&name);
                    pass.inspected.insert(object.key.to_string(), found.clone());
                    if let Some(meta) = found.core_metadata {
                        sidecars.push((root.key(&format!("{name}{METADATA_SUFFIX}"))?, meta));
                    }
                    report.added.push(name.clone());
                    new.entries.insert(name, found.entry);
                }
                Err(InspectError::Rejected(reason)) => {
                    tracing::warn!(file = %name, %reason, "not indexed");
                    report.rejected.insert(name.clone(), reason.clone());
                    new.rejected.insert(name, Rejected { etag: object.version(), reason });
                }
                // Deleted since the listing: the next event sees it gone.
                Err(InspectError::Store(e)) if e.is_not_found() => {}
                Err(InspectError::Store(e)) => return Err(e.into()),
            }
        }
        for (target, marker) in &yank_markers {
            if let Some(entry) = new.entries.get_mut(target) {
                entry.yanked = Some(read_yank_reason(store.as_ref(), marker).await?);
            }
        }
        report.added.sort();
        report.removed = old.entries.keys().filter(|k| !new.entries.contains_key(*k)).cloned().collect();

        if root.kind() != RepoKind::Pip {
            // The generation time moves only with the entries, so an unchanged repo renders
            // (and signs) to the same bytes.
            let now = jiff::Timestamp::now().as_second();
            new.generated = match old.generated {
                Some(then) if new.entries == old.entries => Some(then),
                Some(then) => Some(now.max(then + 1)),
                None => Some(now),
            };
        }
        let pages = match root.kind() {
            RepoKind::Pip => render::render(root, &new),
            RepoKind::Apt => crate::apt::render(&new, &self.config.apt, self.config.signer.as_deref())?,
            RepoKind::Dnf => crate::dnf::render(&new, self.config.signer.as_deref())?,
        };
        for page in &pages {
            new.outputs.insert(format!("{root}{}", page.path), sha256_hex(&page.body));
        }
        for entry in new.entries.values() {
            if let Some(hash) = &entry.core_metadata_sha256 {
                new.outputs.insert(format!("{root}{}{METADATA_SUFFIX}", entry.filename), hash.clone());
            }
        }

        // Superseded content-addressed outputs stay for the grace period, then go.
        let now = jiff::Timestamp::now().as_second();
        new.retired = old.retired.clone();
        new.retired.retain(|key, _| !new.outputs.contains_key(key));
        for stale in old.outputs.keys().filter(|k| !new.outputs.contains_key(*k)) {
            if retained(root, stale) {
                new.retired.insert(stale.clone(), now);
            }
        }
        let expired: Vec<String> = new
            .retired
            .iter()
            .filter(|(_, since)| now - **since >= self.config.grace_seconds.max(0))
            .map(|(k, _)| k.clone())
            .collect();
        for key in &expired {
            new.retired.remove(key);
        }

        // Pages this call wrote in an attempt that lost (or was overwritten) are rewritten
        // even when the state already holds everything: they may be the stale ones.
        if !force && pass.dirty.is_empty() && state_etag.is_some() && new == old {
            return Ok(report);
        }
        // Inspecting took a while: if another indexer committed meanwhile, this attempt would
        // lose anyway, so give up before publishing anything (one HEAD against a page storm).
        if !report.added.is_empty() {
            let now = match self.store.head(&root.state_key()).await {
                Ok(meta) => Some(meta.etag),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e.into()),
            };
            if now.as_deref().map(etag_value) != state_etag.as_deref().map(etag_value) {
                return Err(StoreError::Conflict {
                    key: root.state_key().to_string(),
                    reason: "another indexer committed while this one inspected files".into(),
                }
                .into());
            }
        }

        // Stage by stage: immutable sidecars and content-addressed files first, so no page ever
        // advertises a missing object; then the indices, then the pages pointing at them, their
        // signatures, and the entry point clients read first. Each stage is written concurrently.
        let mut stages: BTreeMap<Stage, Vec<(Key, Bytes, &'static str)>> = BTreeMap::new();
        stages
            .entry(Stage::Immutable)
            .or_default()
            .extend(sidecars.into_iter().map(|(key, body)| (key, body, "text/plain; charset=utf-8")));
        for Page { path, body, content_type, stage } in pages {
            let key = root.key(&path)?;
            if !force
                && !pass.dirty.contains(key.as_str())
                && old.outputs.get(key.as_str()) == new.outputs.get(key.as_str())
            {
                continue;
            }
            pass.dirty.insert(key.to_string());
            stages.entry(stage).or_default().push((key, Bytes::from(body), content_type));
        }
        for (_, outputs) in stages {
            report.written.extend(self.publish(outputs).await?);
        }

        let condition = match state_etag {
            Some(etag) => Condition::IfMatch(etag),
            None => Condition::IfNoneMatch,
        };
        let state_bytes = serde_json::to_vec(&new).map_err(|e| StoreError::Backend(e.to_string()))?;
        let put = self
            .store
            .put_bytes(
                &root.state_key(),
                Bytes::from(state_bytes),
                PutOptions::condition(condition).with_content_type("application/json"),
            )
            .await?;
        report.committed = true;
        pass.expect = Some(put.etag);

        // Outputs the committed state no longer lists (removed projects, removed wheels'
        // sidecars) and retired ones past their grace period. Best effort: an orphan is
        // harmless, a failure here must not fail the commit.
        let stale = old.outputs.keys().filter(|k| !new.outputs.contains_key(*k) && !new.retired.contains_key(*k));
        for stale in stale.chain(expired.iter()) {
            let Ok(key) = Key::new(stale.clone()) else {
                continue;
            };
            match self.store.delete(&key).await {
                Ok(()) => report.deleted.push(stale.clone()),
                Err(e) => tracing::warn!(key = %stale, error = %e, "could not delete stale output"),
            }
        }
        Ok(report)
    }
}

impl Indexer {
    /// Write derived outputs concurrently; the keys written, in order.
    async fn publish(&self, outputs: Vec<(Key, Bytes, &'static str)>) -> Result<Vec<String>, IndexError> {
        let mut pending = outputs.into_iter();
        let mut in_flight = futures_util::stream::FuturesUnordered::new();
        let mut written = Vec::new();
        loop {
            while in_flight.len() < PUBLISH_CONCURRENCY {
                let Some((key, body, content_type)) = pending.next() else { break };
                in_flight.push(put_output(self.store.clone(), key, body, content_type));
            }
            match in_flight.next().await {
                Some(result) => written.push(result?),
                None => break,
            }
        }
        written.sort();
        Ok(written)
    }
}

async fn put_output(
    store: Arc<dyn Store>,
    key: Key,
    body: Bytes,
    content_type: &'static str,
) -> Result<String, IndexError> {
    store.put_bytes(&key, body, PutOptions::derived().with_content_type(content_type)).await?;
    Ok(key.to_string())
}

/// Outputs written at once.
const PUBLISH_CONCURRENCY: usize = 16;

/// Whether an output of `root` (a full key) is content-addressed and outlives its state:
/// apt `by-hash/` copies and dnf `repodata/<sha>-…` documents.
fn retained(root: &RepoRoot, key: &str) -> bool {
    let relative = key.strip_prefix(root.as_str()).unwrap_or(key);
    match root.kind() {
        RepoKind::Pip => false,
        RepoKind::Apt => relative.starts_with("dists/") && relative.contains("/by-hash/"),
        RepoKind::Dnf => relative.starts_with("repodata/") && !relative.starts_with("repodata/repomd.xml"),
    }
}

/// What carries from one attempt of a reindex to the next.
struct Pass {
    /// Republish every page.
    force_all: bool,
    /// Pages written by earlier attempts of this call whose state did not stay committed:
    /// republished by the next attempt.
    dirty: BTreeSet<String>,
    /// The ETag of the state this call just committed, to read back.
    expect: Option<String>,
    /// Files this call already inspected, by key: a retry does not read them again.
    inspected: HashMap<String, Inspected>,
}

impl ReindexReport {
    /// Fold a later pass of the same reindex into this report.
    fn absorb(&mut self, later: ReindexReport) {
        for (list, more) in [(&mut self.added, later.added), (&mut self.removed, later.removed)] {
            for name in more {
                if !list.contains(&name) {
                    list.push(name);
                }
            }
            list.sort();
        }
        self.rejected.extend(later.rejected);
        self.written.extend(later.written);
        self.deleted.extend(later.deleted);
        self.committed |= later.committed;
    }
}

/// An ETag without quotes or a weak prefix, for comparing what a put and a later read return.
fn etag_value(etag: &str) -> &str {
    etag.trim_start_matches("W/").trim_matches('"')
}

fn backoff(attempt: u32) -> Duration {
    // Exponential from 5 ms, capped at 500 ms, with jitter from the clock's nanoseconds.
    let base = 5u64.saturating_mul(1 << attempt.min(7)).min(500);
    let jitter = u64::from(jiff::Timestamp::now().subsec_nanosecond().unsigned_abs()) % base.max(1);
    Duration::from_millis(base / 2 + jitter)
}

async fn read_yank_reason(store: &dyn Store, marker: &Key) -> Result<String, IndexError> {
    let size = match store.head(marker).await {
        Ok(m) => m.size,
        Err(e) if e.is_not_found() => return Ok(String::new()),
        Err(e) => return Err(e.into()),
    };
    let bytes = store.get_range(marker, 0, size.min(MAX_YANK_REASON)).await?;
    Ok(String::from_utf8_lossy(&bytes).trim().to_owned())
}

/// Read what the index needs from one distribution file: its sha256 (from `object`, store
/// metadata, or streamed), and for wheels the validated core metadata (ranged reads only).
pub async fn inspect(store: &Arc<dyn Store>, object: &ObjectMeta) -> Result<Inspected, InspectError> {
    let key = &object.key;
    if key.filename().ends_with(".deb") || key.filename().ends_with(".rpm") {
        return crate::native::inspect_native(store, object).await;
    }
    let dist: DistFilename = key.filename().parse().map_err(|e| InspectError::Rejected(format!("{e}")))?;
    // A caller that already knows the sha256 (the upload path) saves the HEAD.
    let mut meta = if object.sha256.is_some() { object.clone() } else { store.head(key).await? };
    // Without a recorded sha256 the file is read once anyway: a small one is kept in memory
    // for the METADATA as well, a large one is streamed through the hasher.
    let mut whole: Option<Bytes> = None;
    let sha256 = match meta.sha256.clone() {
        Some(sha) => sha,
        None => {
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

/// Every pip repo root with at least one distribution file under `prefix`.
pub async fn discover_roots(store: &dyn Store, prefix: &str) -> Result<BTreeSet<RepoRoot>, StoreError> {
    Ok(discover(store, prefix).await?.0)
}

/// Every pip repo root and every run listing directory under `prefix`, from one listing.
pub async fn discover(
    store: &dyn Store,
    prefix: &str,
) -> Result<(BTreeSet<RepoRoot>, BTreeSet<crate::ListingDir>), StoreError> {
    let listing = store.list_all(prefix, false).await?;
    let mut roots = BTreeSet::new();
    let mut dirs = BTreeSet::new();
    for object in &listing.objects {
        if let Some(root) = RepoRoot::for_key(&object.key) {
            roots.insert(root);
        } else if let Some(root) = RepoRoot::for_state_key(&object.key) {
            // A root whose files were all deleted still needs its pages emptied.
            roots.insert(root);
        } else if let Some(dir) = crate::ListingDir::for_key(&object.key) {
            dirs.extend(dir.with_parents());
        }
    }
    Ok((roots, dirs))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Mutex;

    use quarry_store::faults::{Fault, FaultyStore, NonAtomicConditions, Op};
    use quarry_store::{
        ByteRange, ByteStream, CountingStore, GetObject, ListOptions, ListPage, MemoryStore, PutResult,
    };

    use super::*;

    const ROOT: &str = "run-linux/python/";

    #[tokio::test]
    async fn a_deleted_root_is_not_brought_back_as_empty_pages() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let indexer = Indexer::new(store.clone());
        for root in [ROOT, "run-linux/packages/deb/", "run-linux/packages/rpm/x86_64/"] {
            let report = indexer.reindex(&RepoRoot::new(root).unwrap()).await.unwrap();
            assert!(!report.committed && report.written.is_empty(), "{report}");
        }
        let dir = crate::ListingDir::for_key(&Key::new("7-linux/x.tar.zst").unwrap()).unwrap();
        let listed = crate::update_listing(store.as_ref(), &dir).await.unwrap();
        assert!(!listed.written);
        assert!(store.list_all("", false).await.unwrap().objects.is_empty(), "nothing written");
    }

    fn wheel(name: &str, version: &str, filler: usize) -> (String, Vec<u8>) {
        let dist = name.replace('-', "_");
        let mut out = std::io::Cursor::new(Vec::new());
        {
            let mut zip = zip::ZipWriter::new(&mut out);
            let stored = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
            zip.start_file(format!("{dist}/data.bin"), stored).unwrap();
            // Incompressible filler so the wheel is really that large.
            let mut x = 0x2545_f491_u32;
            let chunk: Vec<u8> = (0..filler)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            zip.write_all(&chunk).unwrap();
            zip.start_file(format!("{dist}-{version}.dist-info/METADATA"), stored).unwrap();
            write!(zip, "Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nRequires-Python: >=3.9\n").unwrap();
            zip.finish().unwrap();
        }
        (format!("{dist}-{version}-py3-none-any.whl"), out.into_inner())
    }

    async fn put(store: &dyn Store, name: &str, data: Vec<u8>) {
        store
            .put_bytes(&Key::new(format!("{ROOT}{name}")).unwrap(), Bytes::from(data), PutOptions::default())
            .await
            .unwrap();
    }

    async fn text(store: &dyn Store, path: &str) -> String {
        let (_, b) = store.get_bytes(&Key::new(format!("{ROOT}{path}")).unwrap(), 1 << 24).await.unwrap();
        String::from_utf8(b.to_vec()).unwrap()
    }

    /// Records the bytes each ranged read asks for.
    #[derive(Debug)]
    struct RangeRecorder {
        inner: MemoryStore,
        fetched: Mutex<u64>,
    }

    #[async_trait::async_trait]
    impl Store for RangeRecorder {
        fn describe(&self) -> String {
            "recorder".into()
        }
        async fn head(&self, key: &Key) -> quarry_store::Result<ObjectMeta> {
            self.inner.head(key).await
        }
        async fn get(&self, key: &Key, range: Option<ByteRange>) -> quarry_store::Result<GetObject> {
            let got = self.inner.get(key, range).await?;
            *self.fetched.lock().unwrap() += got.range.1 - got.range.0;
            Ok(got)
        }
        async fn put(&self, key: &Key, body: ByteStream, options: PutOptions) -> quarry_store::Result<PutResult> {
            self.inner.put(key, body, options).await
        }
        async fn list(&self, prefix: &str, options: ListOptions) -> quarry_store::Result<ListPage> {
            self.inner.list(prefix, options).await
        }
        async fn delete(&self, key: &Key) -> quarry_store::Result<()> {
            self.inner.delete(key).await
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn large_wheels_are_indexed_from_a_few_ranged_reads() {
        let recorder = Arc::new(RangeRecorder { inner: MemoryStore::default(), fetched: Mutex::new(0) });
        let (name, data) = wheel("big-wheel", "1.0", 48 << 20);
        put(recorder.as_ref(), &name, data).await;
        let store: Arc<dyn Store> = recorder.clone();
        let report = Indexer::new(store).reindex(&RepoRoot::new(ROOT).unwrap()).await.unwrap();
        assert_eq!(report.added, [name]);
        let fetched = *recorder.fetched.lock().unwrap();
        assert!(fetched < 1 << 20, "read {fetched} bytes of a 48 MiB wheel whose sha256 was known");
        assert!(text(recorder.as_ref(), "index.html").await.contains("data-requires-python=\"&#62;=3.9\""));
    }

    #[tokio::test]
    async fn reindexing_is_incremental_and_idempotent() {
        let counting = Arc::new(CountingStore::new(Arc::new(MemoryStore::default())));
        let store: Arc<dyn Store> = counting.clone();
        let root = RepoRoot::new(ROOT).unwrap();
        let indexer = Indexer::new(store.clone());
        for v in ["1.0", "1.1"] {
            let (name, data) = wheel("alpha", v, 100);
            put(store.as_ref(), &name, data).await;
        }
        let first = indexer.reindex(&root).await.unwrap();
        assert!(first.committed);
        assert_eq!(first.added.len(), 2);

        // Nothing changed: one state read, one listing, no writes.
        let before = counting.counts();
        let again = indexer.reindex(&root).await.unwrap();
        let delta = counting.counts();
        assert!(!again.committed);
        assert_eq!((delta.get - before.get, delta.list - before.list, delta.put - before.put), (1, 1, 0));

        // One more wheel: only its entry is computed, and only affected pages are written.
        let (name, data) = wheel("beta", "0.1", 100);
        put(store.as_ref(), &name, data).await;
        let before = counting.counts();
        let third = indexer.reindex(&root).await.unwrap();
        let delta = counting.counts();
        assert_eq!(third.added, std::slice::from_ref(&name));
        // One HEAD for the new file, one for the state before publishing.
        assert_eq!(delta.head - before.head, 2, "only the new file is inspected");
        let mut written = third.written.clone();
        written.sort();
        assert_eq!(
            written,
            [
                format!("{ROOT}beta-0.1-py3-none-any.whl.metadata"),
                format!("{ROOT}index.html"),
                format!("{ROOT}simple/beta/index.html"),
                format!("{ROOT}simple/beta/index.json"),
                format!("{ROOT}simple/index.html"),
                format!("{ROOT}simple/index.json"),
            ]
        );
    }

    #[tokio::test]
    async fn deletions_yanks_and_rejections() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let root = RepoRoot::new(ROOT).unwrap();
        let indexer = Indexer::new(store.clone());
        let (keep, data) = wheel("keep", "1.0", 10);
        put(store.as_ref(), &keep, data).await;
        let (gone, data) = wheel("gone", "1.0", 10);
        put(store.as_ref(), &gone, data).await;
        put(store.as_ref(), "broken-1.0-py3-none-any.whl", b"not a zip".to_vec()).await;
        put(store.as_ref(), &format!("{keep}.yanked"), b"  broken on ROCm 7  ".to_vec()).await;
        let report = indexer.reindex(&root).await.unwrap();
        assert_eq!(report.rejected.len(), 1);
        assert!(report.rejected["broken-1.0-py3-none-any.whl"].contains("not a valid zip archive"));
        let json = text(store.as_ref(), "simple/keep/index.json").await;
        assert!(json.contains("\"yanked\":\"broken on ROCm 7\""), "{json}");
        assert!(text(store.as_ref(), "simple/gone/index.html").await.contains(&gone));

        // A rejected file is remembered by ETag and not read again.
        let second = indexer.reindex(&root).await.unwrap();
        assert!(second.rejected.is_empty() && !second.committed);

        store.delete(&Key::new(format!("{ROOT}{gone}")).unwrap()).await.unwrap();
        let third = indexer.reindex(&root).await.unwrap();
        assert_eq!(third.removed, std::slice::from_ref(&gone));
        let mut deleted = third.deleted.clone();
        deleted.sort();
        assert_eq!(
            deleted,
            [
                format!("{ROOT}gone-1.0-py3-none-any.whl.metadata"),
                format!("{ROOT}simple/gone/index.html"),
                format!("{ROOT}simple/gone/index.json"),
            ]
        );
        assert!(!text(store.as_ref(), "index.html").await.contains(&gone));
    }

    /// A store that fails the operations a rule picks, as a flaky S3 would (5xx, throttling,
    /// timeouts) or as a crash would cut a reindex short.
    async fn assert_consistent(store: &dyn Store) {
        let report = crate::check(store, &RepoRoot::new(ROOT).unwrap()).await.unwrap();
        assert!(report.is_clean(), "{report}");
    }

    /// No published page may point at a missing object (the state may lag behind the listing).
    async fn assert_no_dangling_links(store: &dyn Store) {
        let report = crate::check(store, &RepoRoot::new(ROOT).unwrap()).await.unwrap();
        assert!(report.dangling().is_empty(), "{report}");
    }

    #[tokio::test]
    async fn a_crash_before_the_commit_converges_later() {
        let memory = Arc::new(MemoryStore::default());
        let faulty = Arc::new(FaultyStore::new(memory.clone(), |op, key| {
            (op == Op::Put && key.ends_with(crate::STATE_NAME)).then_some(Fault::Crash)
        }));
        for v in ["1.0", "2.0"] {
            let (name, data) = wheel("crashy", v, 100);
            put(memory.as_ref(), &name, data).await;
        }
        let store: Arc<dyn Store> = faulty.clone();
        let root = RepoRoot::new(ROOT).unwrap();
        let err = Indexer::new(store.clone()).reindex(&root).await.unwrap_err();
        assert!(err.to_string().contains("injected fault"), "{err}");
        // Outputs were published, the state was not: nothing dangles.
        assert_no_dangling_links(memory.as_ref()).await;
        assert!(memory.head(&root.state_key()).await.is_err());

        faulty.heal();
        let report = Indexer::new(store).reindex(&root).await.unwrap();
        assert!(report.committed);
        assert_eq!(report.added.len(), 2);
        assert_consistent(memory.as_ref()).await;
        assert!(text(memory.as_ref(), "index.html").await.contains("crashy-2.0"));
    }

    #[tokio::test]
    async fn transient_faults_never_leave_dangling_links() {
        // Every third store operation fails, cycling through the failures S3 produces.
        let memory = Arc::new(MemoryStore::default());
        let faults = vec![Fault::ServerError, Fault::Throttled, Fault::Timeout(Duration::from_millis(5))];
        let faulty = Arc::new(FaultyStore::every(memory.clone(), 3, faults));
        let store: Arc<dyn Store> = faulty.clone();
        let root = RepoRoot::new(ROOT).unwrap();
        let mut failures = 0;
        for round in 0..6 {
            let (name, data) = wheel(&format!("flaky-{round}"), "1.0", 100);
            put(memory.as_ref(), &name, data).await;
            // Events are retried until one succeeds; after every failed one the pages hold.
            for _ in 0..50 {
                match Indexer::new(store.clone()).reindex(&root).await {
                    Ok(_) => break,
                    Err(e) => {
                        assert!(e.to_string().contains("injected fault"), "{e}");
                        failures += 1;
                        assert_no_dangling_links(memory.as_ref()).await;
                    }
                }
            }
        }
        // A deletion, indexed through the same faults.
        let (gone, _) = wheel("flaky-0", "1.0", 100);
        memory.delete(&Key::new(format!("{ROOT}{gone}")).unwrap()).await.unwrap();
        for _ in 0..50 {
            if Indexer::new(store.clone()).reindex(&root).await.is_ok() {
                break;
            }
            failures += 1;
        }
        assert!(failures > 0, "the faults never hit");
        let kinds: BTreeSet<String> = faulty.injected().iter().map(|(_, _, f)| format!("{f:?}")).collect();
        assert_eq!(kinds.len(), 3, "{kinds:?}");
        faulty.heal();
        Indexer::new(store).reindex(&root).await.unwrap();
        assert_consistent(memory.as_ref()).await;
        let index = text(memory.as_ref(), "index.html").await;
        for round in 1..6 {
            assert!(index.contains(&format!("flaky_{round}-1.0")), "flaky-{round} missing");
        }
        assert!(!index.contains("flaky_0-1.0"));
    }

    /// Uploads racing into one root, each followed by its own indexer, on a store whose
    /// conditional puts let racing writers both pass.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn racing_indexers_converge_where_conditional_puts_are_not_atomic() {
        for _ in 0..3 {
            let memory = Arc::new(MemoryStore::default());
            let store: Arc<dyn Store> = Arc::new(NonAtomicConditions::new(memory.clone(), Duration::from_millis(5)));
            let root = RepoRoot::new(ROOT).unwrap();
            let tasks: Vec<_> = (0..16)
                .map(|i| {
                    let (store, root) = (store.clone(), root.clone());
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis((i * 7) % 16)).await;
                        let (name, data) = wheel(&format!("racer-{i}"), "1.0", 64);
                        put(store.as_ref(), &name, data).await;
                        Indexer::new(store).reindex(&root).await.unwrap();
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            let report = crate::check(memory.as_ref(), &root).await.unwrap();
            assert!(report.is_clean(), "{report}");
            assert_eq!(report.files, 16);
        }
    }

    /// The lost update such a store allows, made deterministic: a slow indexer reads the
    /// state, lists one file, passes its precondition check; a fast one indexes a second file
    /// and commits; then the slow one's write lands on top.
    async fn lost_update(declared: ConditionalWrites) -> crate::CheckReport {
        let memory = Arc::new(MemoryStore::default());
        let slow: Arc<dyn Store> =
            Arc::new(NonAtomicConditions::new(memory.clone(), Duration::from_millis(300)).declaring(declared));
        let fast: Arc<dyn Store> =
            Arc::new(NonAtomicConditions::new(memory.clone(), Duration::from_millis(1)).declaring(declared));
        let root = RepoRoot::new(ROOT).unwrap();
        let (first, data) = wheel("first", "1.0", 64);
        put(memory.as_ref(), &first, data).await;
        let slow_run = tokio::spawn({
            let root = root.clone();
            async move { Indexer::new(slow).reindex(&root).await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (second, data) = wheel("second", "1.0", 64);
        put(memory.as_ref(), &second, data).await;
        Indexer::new(fast).reindex(&root).await.unwrap();
        let slow_report = slow_run.await.unwrap();
        assert!(slow_report.committed);
        crate::check(memory.as_ref(), &root).await.unwrap()
    }

    #[tokio::test]
    async fn verified_commits_repair_a_lost_update() {
        let trusting = lost_update(ConditionalWrites::Atomic).await;
        assert!(
            trusting.problems.iter().any(|p| p.contains("second-1.0") && p.contains("not in the committed state")),
            "the scenario no longer loses an update: {trusting}"
        );
        let verifying = lost_update(ConditionalWrites::Verify).await;
        assert!(verifying.is_clean(), "{verifying}");
        assert_eq!(verifying.files, 2);
    }

    #[tokio::test]
    async fn stores_without_conditional_puts_are_refused() {
        let indexer = Indexer::new(Arc::new(quarry_store::conformance::NoConditionalWrites::default()));
        let err = indexer.reindex(&RepoRoot::new(ROOT).unwrap()).await.unwrap_err();
        assert!(matches!(err, IndexError::UnsafeStore(_)), "{err}");
    }

    #[tokio::test]
    async fn superseded_by_hash_files_stay_for_the_grace_period_then_go() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::default());
        let root = RepoRoot::new("7-linux/packages/deb/").unwrap();
        let land = |name: &str, version: &str| {
            let control = format!("Package: {name}\nVersion: {version}\nArchitecture: amd64\nDescription: x\n");
            let key = Key::new(format!("7-linux/packages/deb/pool/main/{name}_{version}_amd64.deb")).unwrap();
            (key, Bytes::from(crate::deb::tests::build_deb(&control, "xz")))
        };
        let by_hash = |store: Arc<dyn Store>| async move {
            let listing = store.list_all("7-linux/packages/deb/dists/", false).await.unwrap();
            listing
                .objects
                .into_iter()
                .map(|o| o.key.to_string())
                .filter(|k| k.contains("/by-hash/"))
                .collect::<BTreeSet<_>>()
        };
        let day =
            Indexer::new(store.clone()).with_config(IndexConfig { grace_seconds: 86_400, ..IndexConfig::default() });
        let (key, body) = land("alpha", "1.0");
        store.put_bytes(&key, body, PutOptions::default()).await.unwrap();
        day.reindex(&root).await.unwrap();
        let first = by_hash(store.clone()).await;
        assert_eq!(first.len(), 3, "Packages, .gz, .xz: {first:?}");

        let (key, body) = land("beta", "2.0~rc1");
        store.put_bytes(&key, body, PutOptions::default()).await.unwrap();
        let report = day.reindex(&root).await.unwrap();
        assert_eq!(report.added, ["pool/main/beta_2.0~rc1_amd64.deb"]);
        let second = by_hash(store.clone()).await;
        assert_eq!(second.len(), 6, "the old generation is kept: {second:?}");
        assert!(first.is_subset(&second));
        let (_, state) = store.get_bytes(&root.state_key(), 1 << 24).await.unwrap();
        let state: RepoState = serde_json::from_slice(&state).unwrap();
        assert_eq!(state.retired.keys().cloned().collect::<BTreeSet<_>>(), first);
        assert_eq!(state.entries["pool/main/beta_2.0~rc1_amd64.deb"].deb.as_ref().unwrap().version(), "2.0~rc1");

        // Past the grace period the next reindex collects the old generation, nothing else.
        let now = Indexer::new(store.clone()).with_config(IndexConfig { grace_seconds: 0, ..IndexConfig::default() });
        let report = now.reindex(&root).await.unwrap();
        assert_eq!(report.deleted.iter().cloned().collect::<BTreeSet<_>>(), first);
        let third = by_hash(store.clone()).await;
        assert_eq!(third, second.difference(&first).cloned().collect());
        let audit = crate::check(store.as_ref(), &root).await.unwrap();
        assert!(audit.is_clean() && audit.files == 2, "{audit}");
        // A Packages index edited behind the indexer's back no longer matches Release.
        let packages = root.key("dists/stable/main/binary-amd64/Packages").unwrap();
        store.put_bytes(&packages, Bytes::from_static(b"Package: x\n"), PutOptions::default()).await.unwrap();
        let audit = crate::check(store.as_ref(), &root).await.unwrap();
        assert!(audit.problems.iter().any(|p| p.contains("does not match its Release checksum")), "{audit}");
        now.reindex_with(&root, true).await.unwrap();
        // And an unchanged repo is left alone: same Release bytes, nothing written.
        let (_, before) = store.get_bytes(&root.key("dists/stable/Release").unwrap(), 1 << 20).await.unwrap();
        let report = now.reindex(&root).await.unwrap();
        assert!(!report.committed && report.written.is_empty(), "{report}");
        let (_, after) = store.get_bytes(&root.key("dists/stable/Release").unwrap(), 1 << 20).await.unwrap();
        assert_eq!(before, after);
    }
}
