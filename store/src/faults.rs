//! Stores that misbehave on purpose, for testing what is built on the [`Store`] trait:
//! [`FaultyStore`] injects the failures a real S3 endpoint produces (5xx, throttling,
//! timeouts, a process dying between two writes), and [`NonAtomicConditions`] checks
//! preconditions the way moto and s3s-fs do, one request at a time with a gap before the write.
#![allow(clippy::missing_panics_doc)]

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::{
    ByteRange, ByteStream, Condition, ConditionalWrites, GetObject, Key, ListOptions, ListPage, ObjectMeta, PutOptions,
    PutResult, Result, Store, StoreError,
};

/// One injected failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `500 InternalError` / `503 ServiceUnavailable` after the SDK's own retries ran out.
    ServerError,
    /// `503 SlowDown`.
    Throttled,
    /// The request hangs, then times out (after the given delay).
    Timeout(Duration),
    /// The process dies: this request and every later one fail until [`FaultyStore::heal`].
    Crash,
}

/// Which operation a rule is asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Head,
    Get,
    Put,
    List,
    Delete,
}

type Rule = Box<dyn FnMut(Op, &str) -> Option<Fault> + Send>;

/// Wraps any store; before each operation a rule sees the operation and key (the prefix for
/// listings) and may inject a [`Fault`]. Counts what it injected.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    rule: Mutex<Rule>,
    crashed: Mutex<bool>,
    injected: Mutex<Vec<(Op, String, Fault)>>,
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner.describe())
    }
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn Store>, rule: impl FnMut(Op, &str) -> Option<Fault> + Send + 'static) -> Self {
        Self { inner, rule: Mutex::new(Box::new(rule)), crashed: Mutex::new(false), injected: Mutex::default() }
    }

    /// A rule injecting `faults` in turn into every `every`-th operation.
    pub fn every(inner: Arc<dyn Store>, every: u32, faults: Vec<Fault>) -> Self {
        let mut n = 0u32;
        let mut next = 0usize;
        Self::new(inner, move |_, _| {
            n += 1;
            if faults.is_empty() || !n.is_multiple_of(every.max(1)) {
                return None;
            }
            next += 1;
            Some(faults[(next - 1) % faults.len()])
        })
    }

    /// Replace the rule.
    pub fn set_rule(&self, rule: impl FnMut(Op, &str) -> Option<Fault> + Send + 'static) {
        *self.rule.lock().unwrap_or_else(PoisonError::into_inner) = Box::new(rule);
    }

    /// Stop injecting anything, and undo a crash (the process was restarted).
    pub fn heal(&self) {
        self.set_rule(|_, _| None);
        *self.crashed.lock().unwrap_or_else(PoisonError::into_inner) = false;
    }

    /// What was injected so far: operation, key, fault.
    pub fn injected(&self) -> Vec<(Op, String, Fault)> {
        self.injected.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    async fn check(&self, op: Op, key: &str) -> Result<()> {
        if *self.crashed.lock().unwrap_or_else(PoisonError::into_inner) {
            return Err(StoreError::Backend(format!("injected fault: crashed before {op:?} {key}")));
        }
        let fault = (self.rule.lock().unwrap_or_else(PoisonError::into_inner))(op, key);
        let Some(fault) = fault else {
            return Ok(());
        };
        self.injected.lock().unwrap_or_else(PoisonError::into_inner).push((op, key.to_owned(), fault));
        let what = match fault {
            Fault::ServerError => "500 InternalError: We encountered an internal error. Please try again.".to_owned(),
            Fault::Throttled => "503 SlowDown: Please reduce your request rate.".to_owned(),
            Fault::Timeout(after) => {
                tokio::time::sleep(after).await;
                format!("timeout after {after:?}")
            }
            Fault::Crash => {
                *self.crashed.lock().unwrap_or_else(PoisonError::into_inner) = true;
                "crashed".to_owned()
            }
        };
        Err(StoreError::Backend(format!("injected fault: {op:?} {key}: {what}")))
    }
}

#[async_trait::async_trait]
impl Store for FaultyStore {
    fn describe(&self) -> String {
        format!("faulty {}", self.inner.describe())
    }
    fn conditional_writes(&self) -> ConditionalWrites {
        self.inner.conditional_writes()
    }
    async fn head(&self, key: &Key) -> Result<ObjectMeta> {
        self.check(Op::Head, key.as_str()).await?;
        self.inner.head(key).await
    }
    async fn get(&self, key: &Key, range: Option<ByteRange>) -> Result<GetObject> {
        self.check(Op::Get, key.as_str()).await?;
        self.inner.get(key, range).await
    }
    async fn put(&self, key: &Key, body: ByteStream, options: PutOptions) -> Result<PutResult> {
        self.check(Op::Put, key.as_str()).await?;
        self.inner.put(key, body, options).await
    }
    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage> {
        self.check(Op::List, prefix).await?;
        self.inner.list(prefix, options).await
    }
    async fn delete(&self, key: &Key) -> Result<()> {
        self.check(Op::Delete, key.as_str()).await?;
        self.inner.delete(key).await
    }
}

/// Conditional puts checked as moto and s3s-fs check them: the precondition is read, then
/// after `gap` the object is written unconditionally, so two writers racing within the gap
/// both pass. Unconditional puts go straight through.
/// Declares [`ConditionalWrites::Verify`] unless told otherwise.
#[derive(Debug)]
pub struct NonAtomicConditions {
    inner: Arc<dyn Store>,
    gap: Duration,
    declared: ConditionalWrites,
}

impl NonAtomicConditions {
    pub fn new(inner: Arc<dyn Store>, gap: Duration) -> Self {
        Self { inner, gap, declared: ConditionalWrites::Verify }
    }

    /// Claim some other guarantee (to show what goes wrong when a server is trusted blindly).
    #[must_use]
    pub fn declaring(mut self, declared: ConditionalWrites) -> Self {
        self.declared = declared;
        self
    }
}

#[async_trait::async_trait]
impl Store for NonAtomicConditions {
    fn describe(&self) -> String {
        format!("non-atomic {}", self.inner.describe())
    }
    fn conditional_writes(&self) -> ConditionalWrites {
        self.declared
    }
    async fn head(&self, key: &Key) -> Result<ObjectMeta> {
        self.inner.head(key).await
    }
    async fn get(&self, key: &Key, range: Option<ByteRange>) -> Result<GetObject> {
        self.inner.get(key, range).await
    }
    async fn put(&self, key: &Key, body: ByteStream, mut options: PutOptions) -> Result<PutResult> {
        if options.condition == Condition::None {
            return self.inner.put(key, body, options).await;
        }
        let current = match self.inner.head(key).await {
            Ok(meta) => Some(meta.etag),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let refused = match (&options.condition, &current) {
            (Condition::IfNoneMatch, Some(_)) => true,
            (Condition::IfMatch(want), Some(have)) => want != have,
            (Condition::IfMatch(_), None) => true,
            _ => false,
        };
        if refused {
            return Err(StoreError::Conflict { key: key.to_string(), reason: "precondition failed".into() });
        }
        // The window in which another writer's check passes too.
        tokio::time::sleep(self.gap).await;
        options.condition = Condition::None;
        self.inner.put(key, body, options).await
    }
    async fn list(&self, prefix: &str, options: ListOptions) -> Result<ListPage> {
        self.inner.list(prefix, options).await
    }
    async fn delete(&self, key: &Key) -> Result<()> {
        self.inner.delete(key).await
    }
}
