//! The Lambda that keeps a bucket's indexes current, as a library: the handler is generic over
//! where stores come from, so tests feed it real event JSON against any [`Store`].
//!
//! Accepted events: S3 notifications delivered directly, S3 notifications wrapped in SQS
//! messages (batch; failures reported per message), also wrapped once more by SNS or sent as
//! EventBridge events to the queue, and EventBridge "Object Created" / "Object Deleted". Keys
//! are URL-decoded (`+` is a space there) and taken relative to the stores' key prefix
//! (`QUARRY_KEY_PREFIX` stripped); a key outside it, or an event naming another bucket than
//! `QUARRY_BUCKET`, is a misrouted event and fails its record. Each key is mapped to what
//! it makes stale ([`Scope`]: its repo root, or its run listing and the parent listings); keys
//! the indexer writes itself (pages, sidecars, state) are in no scope, so the Lambda never
//! triggers itself, and neither are the audit log's objects (`.quarry-audit/…`, written beside
//! every upload: the template's event rule does not match them, and should an event name one,
//! it is ignored). All records of one invocation are coalesced: each scope is refreshed
//! once, through [`Indexer::refresh`] (a root's projects one after another, roots
//! concurrently, then each run's listings deepest first).
//!
//! An SQS batch answers with a partial batch failure: each message whose scopes failed is
//! listed, SQS redelivers it, and after the queue's receive count the dead-letter queue keeps
//! what never succeeds. A message body that is no S3 event is logged and dropped (retrying
//! cannot help), as is a key that is no store key.
//!
//! An EventBridge "Scheduled Event" (the template's reconciliation schedule) runs the full
//! reconciliation over the bucket [`Reconcile`] names ([`quarry_index::reconcile`]): every root
//! the layout's rules find and the newest runs, each reindexed whole and audited, within the
//! invocation's time; what it did not reach is resumed by the next tick.
//! [`Handler::handle_until`] takes the deadline: the `bootstrap` passes one that keeps a quarter
//! of the invocation's time (at least 10 s) for the scope in progress and the cursor, and no
//! new scope starts after it (the first always does).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use futures_util::StreamExt;
use quarry_index::audit_log;
use quarry_index::reconcile::{Cursor, reconcile_scopes};
use quarry_index::{IndexConfig, Indexer, Refreshed, Scope};
use quarry_store::{Key, Store, StoreExt};
use serde::Deserialize;
use serde_json::{Value, json};

/// Roots reindexed at once within one invocation.
const CONCURRENT_ROOTS: usize = 4;

/// Where the handler finds the store for a bucket.
pub trait Stores: Send + Sync {
    /// The store for `bucket`, rooted at [`Stores::key_prefix`].
    fn for_bucket(&self, bucket: &str) -> Arc<dyn Store>;

    /// The key prefix the stores are rooted at (`QUARRY_KEY_PREFIX`, e.g. `ROCm-TheRock/`,
    /// spelled as [`quarry_store::root_prefix`] gives it; the handler spells it so again):
    /// event keys are taken relative to it, and an event for a key outside it fails its record.
    fn key_prefix(&self) -> &str {
        ""
    }
}

/// Why an invocation failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    #[error("not an event this function handles: {0}")]
    UnknownEvent(String),
    #[error("reindexing failed for {failed} root(s): {first}")]
    Reindex { failed: usize, first: String },
}

impl HandlerError {
    /// Whether invoking again may succeed (S3 and EventBridge retry failed async invocations).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Reindex { .. })
    }
}

/// The Lambda's layout (`[layout]` of a `quarry.toml`): inline in `QUARRY_LAYOUT`, else the
/// object `QUARRY_LAYOUT_KEY` (e.g. `quarry.toml`) of `store` (the bucket's store, read
/// at init), else the default run layout. A bad layout fails the init, naming the line.
pub async fn layout_from_env(store: Option<&dyn Store>) -> Result<quarry_layout::config::Layout, String> {
    let inline = std::env::var("QUARRY_LAYOUT").ok();
    let key = std::env::var("QUARRY_LAYOUT_KEY").ok();
    load_layout(inline.as_deref(), key.as_deref(), store).await
}

/// [`layout_from_env`] with the variables' values given.
pub async fn load_layout(
    inline: Option<&str>,
    key: Option<&str>,
    store: Option<&dyn Store>,
) -> Result<quarry_layout::config::Layout, String> {
    use quarry_layout::config::Layout;
    if let Some(text) = inline.filter(|t| !t.trim().is_empty()) {
        return Layout::parse(text).map_err(|e| format!("QUARRY_LAYOUT: {e}"));
    }
    let (Some(name), Some(store)) = (key.filter(|k| !k.is_empty()), store) else { return Ok(Layout::default()) };
    let key = Key::new(name).map_err(|e| format!("QUARRY_LAYOUT_KEY: {e}"))?;
    let (_, bytes) = store.get_bytes(&key, 1 << 20).await.map_err(|e| format!("reading the layout {name}: {e}"))?;
    let text = String::from_utf8(bytes.to_vec()).map_err(|_| format!("the layout {name} is not UTF-8"))?;
    Layout::parse(&text).map_err(|e| format!("{name}: {e}"))
}

/// One object change, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectChange {
    pub bucket: String,
    pub key: String,
}

/// The scope a change at `key` (as an event names it) makes stale under `layout`, if any:
/// [`Scope::for_key`] once the key is checked. The indexer's own outputs are in no scope, so
/// its writes never trigger it.
pub fn classify(key: &str, layout: &quarry_layout::config::Layout) -> Result<Option<Scope>, String> {
    let key = Key::new(key).map_err(|e| e.to_string())?;
    if audit_log::is_audit_path(key.as_str()) {
        return Ok(None);
    }
    Ok(Scope::for_key(&key, layout))
}

/// Every scope a change at `key` makes stale under `layout` ([`Scope::affected_by`]); none for
/// the audit log's objects (`.quarry-audit/…`, one per write: no package, no listing).
pub fn affected_by(key: &Key, layout: &quarry_layout::config::Layout) -> Vec<Scope> {
    if audit_log::is_audit_path(key.as_str()) {
        return Vec::new();
    }
    Scope::affected_by(key, layout)
}

/// Decode an object key as S3 notifications carry it (form-encoded: `+` for space, `%XX`).
pub fn decode_key(raw: &str) -> String {
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced).decode_utf8_lossy().into_owned()
}

#[derive(Debug, Deserialize)]
struct EventBridgeS3 {
    #[serde(rename = "detail-type")]
    detail_type: String,
    source: String,
    detail: EventBridgeDetail,
}

#[derive(Debug, Deserialize)]
struct EventBridgeDetail {
    bucket: EventBridgeBucket,
    object: EventBridgeObject,
}

#[derive(Debug, Deserialize)]
struct EventBridgeBucket {
    name: String,
}

#[derive(Debug, Deserialize)]
struct EventBridgeObject {
    key: String,
}

/// The parts of an S3 notification the indexer reads. Parsed leniently, not as
/// `aws_lambda_events`' `S3Event`: that type needs every timestamp with a zone and every record
/// field S3 sends, and a notification from an S3-compatible server that omits one (moto writes
/// `eventTime` without a zone) must not lose the package it announces.
#[derive(Debug, Deserialize)]
struct S3Notification {
    #[serde(rename = "Records")]
    records: Vec<S3Record>,
}

#[derive(Debug, Deserialize)]
struct S3Record {
    s3: S3Entity,
}

#[derive(Debug, Deserialize)]
struct S3Entity {
    bucket: S3Bucket,
    object: S3Object,
}

#[derive(Debug, Deserialize)]
struct S3Bucket {
    name: String,
}

#[derive(Debug, Deserialize)]
struct S3Object {
    key: String,
}

fn s3_changes(event: &S3Notification) -> Vec<ObjectChange> {
    event
        .records
        .iter()
        .map(|r| ObjectChange { bucket: r.s3.bucket.name.clone(), key: decode_key(&r.s3.object.key) })
        .collect()
}

/// The object an EventBridge S3 event names (keys are not URL-encoded there).
fn eventbridge_change(event: EventBridgeS3) -> Result<ObjectChange, HandlerError> {
    if event.source != "aws.s3" || !event.detail_type.starts_with("Object ") {
        return Err(HandlerError::UnknownEvent(format!("{} from {}", event.detail_type, event.source)));
    }
    Ok(ObjectChange { bucket: event.detail.bucket.name, key: event.detail.object.key })
}

/// The changes in an SQS message body: an S3 notification (or its `s3:TestEvent`, which has
/// none), one wrapped by SNS, or an EventBridge S3 event. `None` when the body is none of those.
fn sqs_body_changes(body: &str) -> Option<Vec<ObjectChange>> {
    let value: Value = serde_json::from_str(body).ok()?;
    if value.get("Event").and_then(Value::as_str) == Some("s3:TestEvent") {
        return Some(Vec::new());
    }
    // An S3 notification sent through SNS first arrives wrapped once more.
    if let Some(inner) = value.get("Message").and_then(Value::as_str) {
        return sqs_body_changes(inner);
    }
    // An EventBridge rule targeting the queue (infra/template.yaml) delivers the event itself.
    if value.get("detail-type").is_some() {
        let event: EventBridgeS3 = serde_json::from_value(value).ok()?;
        return eventbridge_change(event).ok().map(|c| vec![c]);
    }
    let event: S3Notification = serde_json::from_value(value).ok()?;
    Some(s3_changes(&event))
}

pub struct Handler<S> {
    stores: S,
    config: IndexConfig,
    reconcile: Option<Reconcile>,
    /// The bucket the function serves (`QUARRY_BUCKET`); `None`: any bucket an event names.
    bucket: Option<String>,
    /// Which prefixes are roots (`[layout]`, read at init: [`layout_from_env`]).
    layout: Arc<quarry_layout::config::Layout>,
}

/// What a scheduled reconciliation covers (`QUARRY_BUCKET`, `QUARRY_RECONCILE_RUNS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconcile {
    /// The bucket reconciled (a scheduled event names none).
    pub bucket: String,
    /// The newest runs (by run id, all their platforms) reconciled on each tick.
    pub recent_runs: usize,
}

/// Runs reconciled per tick when `QUARRY_RECONCILE_RUNS` is unset.
pub const DEFAULT_RECONCILE_RUNS: usize = 20;

impl Reconcile {
    /// From `QUARRY_BUCKET` (none: scheduled events are refused) and `QUARRY_RECONCILE_RUNS`.
    pub fn from_env() -> Result<Option<Self>, String> {
        let Some(bucket) = std::env::var("QUARRY_BUCKET").ok().filter(|b| !b.is_empty()) else { return Ok(None) };
        let recent_runs = match std::env::var("QUARRY_RECONCILE_RUNS").ok().filter(|v| !v.is_empty()) {
            None => DEFAULT_RECONCILE_RUNS,
            Some(v) => v.parse().map_err(|_| format!("QUARRY_RECONCILE_RUNS: not a count of runs: {v:?}"))?,
        };
        Ok(Some(Self { bucket, recent_runs }))
    }
}

/// Whether `payload` is an EventBridge scheduled event (a schedule rule's tick).
fn is_scheduled(payload: &Value) -> bool {
    use aws_lambda_events::event::eventbridge::EventBridgeEvent;
    payload.get("source").and_then(Value::as_str) == Some("aws.events")
        && serde_json::from_value::<EventBridgeEvent>(payload.clone())
            .is_ok_and(|e| e.source == "aws.events" && e.detail_type == "Scheduled Event")
}

/// What an invocation did, for the log and for direct invocations' answers.
#[derive(Debug, Default, serde::Serialize)]
pub struct InvocationSummary {
    pub reindexed: Vec<String>,
    pub ignored: usize,
    pub skipped: Vec<String>,
    pub failed: BTreeMap<String, String>,
    /// Scheduled reconciliation: the problems found in each scope's pages and repaired.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub repaired: BTreeMap<String, Vec<String>>,
    /// Scheduled reconciliation out of time: the scope the next tick starts at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<String>,
}

impl<S: Stores> Handler<S> {
    pub fn new(stores: S) -> Self {
        // The default layout (runs only) until `with_layout` gives the configured one.
        let layout = Arc::new(quarry_layout::config::Layout::default());
        Self { stores, config: IndexConfig::default(), reconcile: None, bucket: None, layout }
    }

    /// Index roots as `layout` lays them out (`[layout]`, [`layout_from_env`]).
    #[must_use]
    pub fn with_layout(mut self, layout: Arc<quarry_layout::config::Layout>) -> Self {
        self.layout = layout;
        self
    }

    /// Serve only `bucket`: an event naming another is a failure of its record (retried, then
    /// dead-lettered where it can be seen), never indexed in a bucket it was not meant for.
    #[must_use]
    pub fn with_bucket(mut self, bucket: Option<String>) -> Self {
        self.bucket = bucket.filter(|b| !b.is_empty());
        self
    }

    /// Answer scheduled events with a full reconciliation of `reconcile`'s bucket.
    #[must_use]
    pub fn with_reconcile(mut self, reconcile: Option<Reconcile>) -> Self {
        self.reconcile = reconcile;
        self
    }

    /// Publish apt/dnf metadata with `config` (signing key, Release fields, grace period).
    #[must_use]
    pub fn with_config(mut self, config: IndexConfig) -> Self {
        self.config = config;
        self
    }

    pub fn stores(&self) -> &S {
        &self.stores
    }

    /// Handle one invocation's payload. Returns the function's answer: for SQS, the partial
    /// batch response; otherwise a summary.
    pub async fn handle(&self, payload: Value) -> Result<Value, HandlerError> {
        self.handle_until(payload, None).await
    }

    /// [`Handler::handle`]; a scheduled reconciliation starts no scope after `deadline` (it
    /// always does one), leaving the rest to the next tick.
    pub async fn handle_until(&self, payload: Value, deadline: Option<Instant>) -> Result<Value, HandlerError> {
        if is_scheduled(&payload) {
            return Self::finish(self.reconcile_tick(deadline).await?);
        }
        let records = payload.get("Records").and_then(Value::as_array);
        let source =
            records.and_then(|r| r.first()).and_then(|r| r.get("eventSource").or_else(|| r.get("EventSource")));
        match source.and_then(Value::as_str) {
            Some("aws:sqs") => {
                let event: SqsEvent = serde_json::from_value(payload)
                    .map_err(|e| HandlerError::UnknownEvent(format!("malformed SQS event: {e}")))?;
                Ok(self.handle_sqs(&event).await)
            }
            Some("aws:s3") => {
                let event: S3Notification = serde_json::from_value(payload)
                    .map_err(|e| HandlerError::UnknownEvent(format!("malformed S3 event: {e}")))?;
                let summary = self.reindex_changes(&s3_changes(&event)).await;
                Self::finish(summary)
            }
            _ if payload.get("detail-type").is_some() => {
                let event: EventBridgeS3 = serde_json::from_value(payload)
                    .map_err(|e| HandlerError::UnknownEvent(format!("malformed EventBridge event: {e}")))?;
                let change = eventbridge_change(event)?;
                Self::finish(self.reindex_changes(&[change]).await)
            }
            _ => Err(HandlerError::UnknownEvent(
                "expected S3 notification Records, SQS Records or an EventBridge event".into(),
            )),
        }
    }

    /// One scheduled tick: the scopes [`reconcile_scopes`] chooses, from the stored
    /// [`Cursor`] on, each reconciled in full until `deadline`; then the cursor is stored (or
    /// removed once a pass went round).
    async fn reconcile_tick(&self, deadline: Option<Instant>) -> Result<InvocationSummary, HandlerError> {
        let Some(Reconcile { bucket, recent_runs }) = &self.reconcile else {
            return Err(HandlerError::UnknownEvent("a scheduled event, but QUARRY_BUCKET names no bucket".into()));
        };
        let store = self.stores.for_bucket(bucket);
        let retry = |what: &str, e: quarry_store::StoreError| HandlerError::Reindex {
            failed: 1,
            first: format!("{bucket}: {what}: {}", quarry_store::error_chain(&e)),
        };
        let scopes =
            reconcile_scopes(store.as_ref(), &self.layout, *recent_runs).await.map_err(|e| retry("listing", e))?;
        let cursor = Cursor::read(store.as_ref()).await.map_err(|e| retry("reading the cursor", e))?;
        let todo = cursor.order(scopes);
        let indexer = Indexer::new(store.clone(), self.layout.clone()).with_config(self.config.clone());
        let mut summary = InvocationSummary::default();
        for (done, scope) in todo.iter().enumerate() {
            if done > 0 && deadline.is_some_and(|d| Instant::now() >= d) {
                summary.resume_at = Some(scope.to_string());
                break;
            }
            let name = format!("{bucket}/{scope}");
            match indexer.reconcile(scope, quarry_index::reconcile::Full::default()).await {
                Ok(r) if r.remaining.is_empty() => {
                    tracing::info!(scope = %name, repaired = r.repaired.len(), "reconciled {}", r.refreshed);
                    if !r.repaired.is_empty() {
                        summary.repaired.insert(name.clone(), r.repaired);
                    }
                    summary.reindexed.push(name);
                }
                Ok(r) => {
                    let left = format!("{} problems left after republishing: {}", r.remaining.len(), r.remaining[0]);
                    tracing::error!(scope = %name, %left, "reconciling failed");
                    summary.failed.insert(name, left);
                }
                Err(e) => {
                    tracing::error!(scope = %name, error = %e, "reconciling failed");
                    summary.failed.insert(name, e.to_string());
                }
            }
        }
        let next = Cursor { next: summary.resume_at.clone() };
        if next != cursor {
            next.write(store.as_ref()).await.map_err(|e| retry("writing the cursor", e))?;
        }
        tracing::info!(
            reconciled = summary.reindexed.len(),
            of = todo.len(),
            resume_at = summary.resume_at.as_deref().unwrap_or(""),
            "scheduled reconciliation"
        );
        Ok(summary)
    }

    fn finish(summary: InvocationSummary) -> Result<Value, HandlerError> {
        if let Some((root, error)) = summary.failed.iter().next() {
            return Err(HandlerError::Reindex { failed: summary.failed.len(), first: format!("{root}: {error}") });
        }
        Ok(serde_json::to_value(&summary).unwrap_or(Value::Null))
    }

    async fn handle_sqs(&self, event: &SqsEvent) -> Value {
        let mut per_message: Vec<(String, Vec<ObjectChange>)> = Vec::new();
        for message in &event.records {
            let id = message.message_id.clone().unwrap_or_default();
            match message.body.as_deref().and_then(sqs_body_changes) {
                Some(changes) => per_message.push((id, changes)),
                // A body that is no S3 notification will never become one: retrying it would
                // only loop, so it is logged and dropped, not failed.
                None => tracing::warn!(message_id = %id, "SQS message is not an S3 notification; dropped"),
            }
        }
        let all: Vec<ObjectChange> = per_message.iter().flat_map(|(_, c)| c.iter().cloned()).collect();
        let summary = self.reindex_changes(&all).await;
        let mut failures = Vec::new();
        for (id, changes) in &per_message {
            let failed = changes.iter().any(|c| match self.scopes(c) {
                Ok(scopes) => scopes
                    .unwrap_or_default()
                    .iter()
                    .any(|scope| summary.failed.contains_key(&format!("{}/{scope}", c.bucket))),
                Err(_) => true,
            });
            if failed {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = id.clone();
                failures.push(failure);
            }
        }
        tracing::info!(reindexed = summary.reindexed.len(), failed = failures.len(), "SQS batch handled");
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = failures;
        serde_json::to_value(response).unwrap_or_else(|_| json!({"batchItemFailures": []}))
    }

    /// What `change` makes stale (keys taken relative to the stores' prefix): its root, or
    /// its listing and each parent listing ([`Scope::affected_by`]). `Ok(Err(_))`: a key that
    /// is no store key (skipped: retrying cannot help); `Err(_)`: an event this function was
    /// not meant to get (another bucket, a key outside the prefix): a misrouted notification
    /// or a misconfigured prefix, failed so it is seen and kept, never dropped or acted on.
    fn scopes(&self, change: &ObjectChange) -> Result<Result<Vec<Scope>, String>, String> {
        if let Some(bucket) = self.bucket.as_deref().filter(|b| *b != change.bucket) {
            return Err(format!("the event names bucket {:?}; this function serves {bucket:?}", change.bucket));
        }
        let prefix = quarry_store::root_prefix(self.stores.key_prefix())
            .map_err(|e| format!("the configured key prefix is not valid: {e}"))?;
        let Some(key) = change.key.strip_prefix(&prefix) else {
            return Err(format!("the key is outside the key prefix {prefix:?} (QUARRY_KEY_PREFIX)"));
        };
        Ok(Key::new(key).map(|key| affected_by(&key, &self.layout)).map_err(|e| e.to_string()))
    }

    /// Refresh every root and listing the changes touch, once each.
    pub async fn reindex_changes(&self, changes: &[ObjectChange]) -> InvocationSummary {
        let mut summary = InvocationSummary::default();
        let mut scopes: BTreeSet<(String, Scope)> = BTreeSet::new();
        for change in changes {
            match self.scopes(change) {
                Ok(Ok(found)) if found.is_empty() => summary.ignored += 1,
                Ok(Ok(found)) => scopes.extend(found.into_iter().map(|scope| (change.bucket.clone(), scope))),
                Ok(Err(reason)) => {
                    tracing::warn!(bucket = %change.bucket, key = %change.key, %reason, "skipped");
                    summary.skipped.push(format!("{}/{}: {reason}", change.bucket, change.key));
                }
                Err(reason) => {
                    tracing::error!(bucket = %change.bucket, key = %change.key, %reason, "misrouted event");
                    summary.failed.insert(format!("{}/{}", change.bucket, change.key), reason);
                }
            }
        }
        // One root's projects one after the other (they would race each other for the root's
        // pages), roots concurrently; then each run's listings, deepest first (a listing links
        // a subdirectory whose page exists: a root's, or a deeper listing's), runs concurrently.
        let (roots, listings): (BTreeSet<_>, BTreeSet<_>) = scopes.into_iter().partition(|(_, s)| s.root().is_some());
        let mut results = self.refresh_groups(by_root(roots)).await;
        results.extend(self.refresh_groups(by_run(listings)).await);
        for (name, result) in results {
            match result {
                Ok(Refreshed::Root(r)) => {
                    tracing::info!(scope = %name, attempts = r.attempts, "reindexed {r}");
                    summary.reindexed.push(name);
                }
                Ok(Refreshed::Listing(r)) => {
                    tracing::info!(scope = %name, passes = r.passes, "listed {r}");
                    summary.reindexed.push(name);
                }
                Err(e) => {
                    tracing::error!(scope = %name, error = %e, "reindex failed");
                    summary.failed.insert(name, e);
                }
            }
        }
        // Several projects of one root are refreshed apart; the root is named once.
        summary.reindexed.sort();
        summary.reindexed.dedup();
        summary
    }
}

impl<S: Stores> Handler<S> {
    /// Each group's scopes one after the other, in order; groups concurrently.
    async fn refresh_groups(&self, groups: Vec<Vec<(String, Scope)>>) -> Vec<(String, Result<Refreshed, String>)> {
        futures_util::stream::iter(groups)
            .map(|group| async move {
                let mut done = Vec::new();
                for (bucket, scope) in group {
                    let indexer = Indexer::new(self.stores.for_bucket(&bucket), self.layout.clone())
                        .with_config(self.config.clone());
                    let result = indexer.refresh(&scope).await.map_err(|e| e.to_string());
                    done.push((format!("{bucket}/{scope}"), result));
                }
                done
            })
            .buffer_unordered(CONCURRENT_ROOTS)
            .flat_map(futures_util::stream::iter)
            .collect()
            .await
    }
}

/// Listing scopes grouped by bucket and run directory (the key's first segment), each group
/// in [`Scope`] order: deepest listing first.
fn by_run(scopes: BTreeSet<(String, Scope)>) -> Vec<Vec<(String, Scope)>> {
    let mut groups: BTreeMap<(String, String), Vec<(String, Scope)>> = BTreeMap::new();
    for (bucket, scope) in scopes {
        let name = scope.to_string();
        let run = name.split('/').next().unwrap_or_default().to_owned();
        groups.entry((bucket.clone(), run)).or_default().push((bucket, scope));
    }
    groups
        .into_values()
        .map(|mut group| {
            group.sort_by(|a, b| a.1.cmp(&b.1));
            group
        })
        .collect()
}

/// Scopes grouped by the bucket and root (or listing) they refresh: a pip root's projects
/// together.
fn by_root(scopes: BTreeSet<(String, Scope)>) -> Vec<Vec<(String, Scope)>> {
    let mut groups: std::collections::BTreeMap<(String, String), Vec<(String, Scope)>> = Default::default();
    for (bucket, scope) in scopes {
        groups.entry((bucket.clone(), scope.to_string())).or_default().push((bucket, scope));
    }
    groups.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_decode_like_s3_notifications() {
        assert_eq!(
            decode_key("a+b/torch-2.9.1%2Brocm7.10-py3-none-any.whl"),
            "a b/torch-2.9.1+rocm7.10-py3-none-any.whl"
        );
        assert_eq!(decode_key("plain/key.whl"), "plain/key.whl");
    }

    #[test]
    fn classification_ignores_our_own_outputs() {
        let root = |k: &str| classify(k, &Default::default()).unwrap().map(|r| r.to_string());
        assert_eq!(root("1-linux/python/a-1.0-py3-none-any.whl").as_deref(), Some("1-linux/python/"));
        assert_eq!(root("1-linux/python/a-1.0-py3-none-any.whl.yanked").as_deref(), Some("1-linux/python/"));
        assert_eq!(root("1-linux/blas_lib_gfx942.tar.zst").as_deref(), Some("1-linux/index.html"));
        assert_eq!(root("1-linux/logs/gfx94X/build.log").as_deref(), Some("1-linux/logs/gfx94X/index.html"));
        for own in [
            "1-linux/python/index.html",
            "1-linux/python/a-1.0-py3-none-any.whl.metadata",
            "1-linux/python/simple/a/index.json",
            "1-linux/python/.quarry-index.json",
            "1-linux/index.html",
            "1-linux/logs/.quarry-listing.json",
            "python/gfx94X/notes.txt",
        ] {
            assert_eq!(root(own), None, "{own}");
        }
        assert!(classify("1-linux/python/../x.whl", &Default::default()).is_err());
        for audit in [
            ".quarry-audit/1-linux/python/a-1.0-py3-none-any.whl/20260102T030405.123456Z-ab12cd34ef.json",
            ".quarry-audit/1-linux/python/20260102T030405.123456Z-ab12cd34ef.json",
            ".quarry-audit/20260102T030405.123456Z-ab12cd34ef.json",
            ".quarry-audit/1-linux/python/a-1.0-py3-none-any.whl",
            ".QUARRY-AUDIT/1-linux/logs/build.log",
        ] {
            assert_eq!(root(audit), None, "{audit}");
        }
        assert!(classify("", &Default::default()).is_err());
    }
}
