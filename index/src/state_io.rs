//! A root's state object in the store: read by readers ([`read_state`]) and by the indexer
//! (with its ETag, for the conditional commit), and committed with `If-Match` /
//! `If-None-Match`.

use bytes::Bytes;
use quarry_store::{Condition, PutOptions, Store, StoreError, StoreExt};

use crate::error::IndexError;
use crate::root::RepoRoot;
use crate::state::{RepoState, STATE_VERSION};

/// Largest state object read back (10,000 entries take about 4 MiB).
const MAX_STATE_SIZE: u64 = 512 * 1024 * 1024;

/// A root's committed state as readers see it: `None` when the root was never indexed or its
/// state is unreadable (the indexer rebuilds such a state on its next run).
pub async fn read_state(store: &dyn Store, root: &RepoRoot) -> Result<Option<RepoState>, StoreError> {
    match store.get_bytes(&root.state_key(), MAX_STATE_SIZE).await {
        Ok((_, bytes)) => Ok(serde_json::from_slice(&bytes).ok()),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The state the indexer starts from and its ETag (`None`: never committed). A state of an
/// unknown version, or one that does not parse, is rebuilt from an empty one.
pub(crate) async fn load_state(store: &dyn Store, root: &RepoRoot) -> Result<(RepoState, Option<String>), IndexError> {
    match store.get_bytes(&root.state_key(), MAX_STATE_SIZE).await {
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

/// Fails with a conflict when the state's ETag is no longer `read` (another indexer committed
/// since): one HEAD, to give up before publishing anything that would lose anyway.
pub(crate) async fn ensure_unmoved(store: &dyn Store, root: &RepoRoot, read: Option<&str>) -> Result<(), IndexError> {
    let now = match store.head(&root.state_key()).await {
        Ok(meta) => Some(meta.etag),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    if now.as_deref().map(etag_value) == read.map(etag_value) {
        return Ok(());
    }
    Err(StoreError::Conflict {
        key: root.state_key().to_string(),
        reason: "another indexer committed while this one inspected files".into(),
    }
    .into())
}

/// Put `state` if the stored one is still the one read (`read`: its ETag; `None`: there was
/// none). A lost race is a [`StoreError::Conflict`]. Returns the new ETag.
pub(crate) async fn commit_state(
    store: &dyn Store,
    root: &RepoRoot,
    state: &RepoState,
    read: Option<String>,
) -> Result<String, IndexError> {
    let condition = match read {
        Some(etag) => Condition::IfMatch(etag),
        None => Condition::IfNoneMatch,
    };
    let bytes = serde_json::to_vec(state).map_err(|e| StoreError::Backend(e.to_string()))?;
    let options = PutOptions::condition(condition).with_content_type("application/json");
    Ok(store.put_bytes(&root.state_key(), Bytes::from(bytes), options).await?.etag)
}

/// An ETag without quotes or a weak prefix, for comparing what a put and a later read return.
pub(crate) fn etag_value(etag: &str) -> &str {
    etag.trim_start_matches("W/").trim_matches('"')
}
