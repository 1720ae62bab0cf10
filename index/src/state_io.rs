//! A root's state object in the store: read by readers ([`read_state`]) and by the indexer
//! (with its ETag, for the conditional commit), and committed with `If-Match` /
//! `If-None-Match`.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::StreamExt;
use quarry_store::{Condition, Key, PutOptions, Store, StoreError, StoreExt};

use crate::error::IndexError;
use crate::render::file_project;
use crate::root::{RepoKind, RepoRoot};
use crate::state::{RepoState, STATE_VERSION};

/// Largest state object read back (10,000 entries take about 4 MiB).
const MAX_STATE_SIZE: u64 = 512 * 1024 * 1024;

/// A root's committed state as readers see it: `None` when the root was never indexed or its
/// state is unreadable (the indexer rebuilds such a state on its next run).
/// A split pip root's state is read whole: its manifest and every project's object.
pub async fn read_state(store: &dyn Store, root: &RepoRoot) -> Result<Option<RepoState>, StoreError> {
    let state: RepoState = match store.get_bytes(&root.state_key(), MAX_STATE_SIZE).await {
        Ok((_, bytes)) => match serde_json::from_slice(&bytes) {
            Ok(state) => state,
            Err(_) => return Ok(None),
        },
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    if root.kind() != RepoKind::Pip || state.version != SPLIT_VERSION {
        return Ok(Some(state));
    }
    let projects = load_projects(store, root).await.map_err(|e| match e {
        IndexError::Store(e) => e,
        other => StoreError::Backend(other.to_string()),
    })?;
    Ok(Some(merge(&state, projects.values().map(|(s, _)| s))))
}

/// The state object the indexer starts from: its bytes and ETag (`None`, `None`: never
/// committed), parsed with [`parse_state`] (while the root is listed).
pub(crate) async fn load_state_bytes(
    store: &dyn Store,
    root: &RepoRoot,
) -> Result<(Option<Bytes>, Option<String>), IndexError> {
    match store.get_bytes(&root.state_key(), MAX_STATE_SIZE).await {
        Ok((meta, bytes)) => Ok((Some(bytes), Some(meta.etag))),
        Err(e) if e.is_not_found() => Ok((None, None)),
        Err(e) => Err(e.into()),
    }
}

/// The state in `bytes`: a state of an unknown version, one that does not parse, or none at
/// all gives an empty one (rebuilt from scratch).
pub(crate) fn parse_state(bytes: Option<&[u8]>) -> RepoState {
    let Some(bytes) = bytes else { return RepoState::empty() };
    match serde_json::from_slice::<RepoState>(bytes) {
        Ok(s) if s.version == STATE_VERSION => s,
        Ok(s) => {
            tracing::warn!(version = s.version, "unknown state version; rebuilding");
            RepoState::empty()
        }
        Err(e) => {
            tracing::warn!(error = %e, "unreadable state; rebuilding");
            RepoState::empty()
        }
    }
}

/// Fails with a conflict when the state's ETag is no longer `read` (another indexer committed
/// since): one HEAD, to give up before publishing anything that would lose anyway.
pub(crate) async fn ensure_unmoved(store: &dyn Store, root: &RepoRoot, read: Option<&str>) -> Result<(), IndexError> {
    ensure_object_unmoved(store, &root.state_key(), read).await
}

/// Put a state serialized by [`serialize_state`] if the stored one is still the one read
/// (`read`: its ETag; `None`: there was none). A lost race is a [`StoreError::Conflict`].
/// Returns the new ETag.
pub(crate) async fn commit_state(
    store: &dyn Store,
    root: &RepoRoot,
    state: Bytes,
    read: Option<String>,
) -> Result<String, IndexError> {
    commit_bytes(store, &root.state_key(), state, read).await
}

/// A state object's bytes as they are stored.
pub(crate) fn serialize_state(state: &RepoState) -> Result<Bytes, IndexError> {
    // Room for a typical entry up front: a state of thousands of entries is not copied through
    // a dozen doublings (untouched capacity costs no memory).
    let hint = 4096 + 1024 * (state.entries.len() + state.rejected.len()) + 256 * state.outputs.len();
    let mut out = Vec::with_capacity(hint);
    serde_json::to_writer(&mut out, state).map_err(|e| StoreError::Backend(e.to_string()))?;
    Ok(Bytes::from(out))
}

/// An ETag without quotes or a weak prefix, for comparing what a put and a later read return.
pub(crate) fn etag_value(etag: &str) -> &str {
    etag.trim_start_matches("W/").trim_matches('"')
}

/// The state version of a pip root whose state is split: a small manifest at
/// [`RepoRoot::state_key`] (the root pages' hashes, files no project claims) and one object
/// per project under [`PROJECTS_DIR`].
pub const SPLIT_VERSION: u32 = 2;
/// Where a split pip root keeps its per-project state objects (inside the root).
pub const PROJECTS_DIR: &str = ".quarry-index/";
/// Project state objects read at once.
const READ_CONCURRENCY: usize = 16;

/// The key of project `name`'s (normalized) state object in `root`.
pub(crate) fn project_key(root: &RepoRoot, name: &str) -> Result<Key, IndexError> {
    Ok(root.key(&format!("{PROJECTS_DIR}{name}.json"))?)
}

/// The project (normalized name) an output of a pip root belongs to: its pages, its wheels'
/// sidecars, its releases' `-variants.json`. `None` for the root's own pages.
pub(crate) fn output_project(root: &RepoRoot, key: &str) -> Option<String> {
    let relative = key.strip_prefix(root.as_str())?;
    if let Some(rest) = relative.strip_prefix("simple/") {
        let (name, page) = rest.split_once('/')?;
        return (page == "index.html" || page == "index.json").then(|| name.to_owned());
    }
    let file = relative.strip_suffix(crate::plan::METADATA_SUFFIX).unwrap_or(relative);
    file_project(file).map(|name| name.as_str().to_owned())
}

/// A split root's state cut in two: the manifest's share (root pages, files no project
/// claims) and each project's share, by normalized name.
pub(crate) fn split(root: &RepoRoot, state: &RepoState) -> (RepoState, BTreeMap<String, RepoState>) {
    let mut manifest = RepoState { version: SPLIT_VERSION, ..RepoState::default() };
    let mut projects: BTreeMap<String, RepoState> = BTreeMap::new();
    fn share(projects: &mut BTreeMap<String, RepoState>, name: String) -> &mut RepoState {
        projects.entry(name).or_insert_with(|| RepoState { version: SPLIT_VERSION, ..RepoState::default() })
    }
    for (name, entry) in &state.entries {
        match file_project(name) {
            Some(p) => share(&mut projects, p.as_str().to_owned()).entries.insert(name.clone(), entry.clone()),
            None => manifest.entries.insert(name.clone(), entry.clone()),
        };
    }
    for (name, rejected) in &state.rejected {
        match file_project(name) {
            Some(p) => share(&mut projects, p.as_str().to_owned()).rejected.insert(name.clone(), rejected.clone()),
            None => manifest.rejected.insert(name.clone(), rejected.clone()),
        };
    }
    for (key, sha) in &state.outputs {
        match output_project(root, key) {
            Some(p) => share(&mut projects, p).outputs.insert(key.clone(), sha.clone()),
            None => manifest.outputs.insert(key.clone(), sha.clone()),
        };
    }
    manifest.retired.clone_from(&state.retired);
    manifest.generated = state.generated;
    (manifest, projects)
}

/// The whole state of a split root: the manifest and every project's share.
pub(crate) fn merge<'a>(manifest: &RepoState, projects: impl IntoIterator<Item = &'a RepoState>) -> RepoState {
    let mut state = manifest.clone();
    state.version = STATE_VERSION;
    for project in projects {
        state.entries.extend(project.entries.iter().map(|(k, v)| (k.clone(), v.clone())));
        state.rejected.extend(project.rejected.iter().map(|(k, v)| (k.clone(), v.clone())));
        state.outputs.extend(project.outputs.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    state
}

/// A state object and its ETag; `None` when absent. An unreadable one reads as `Some` empty
/// (with its ETag, so a rebuild can replace it).
pub(crate) async fn load_object(store: &dyn Store, key: &Key) -> Result<Option<(RepoState, String)>, IndexError> {
    match store.get_bytes(key, MAX_STATE_SIZE).await {
        Ok((meta, bytes)) => {
            let state = serde_json::from_slice::<RepoState>(&bytes).unwrap_or_else(|e| {
                tracing::warn!(key = %key, error = %e, "unreadable state object; rebuilding");
                RepoState::default()
            });
            Ok(Some((state, meta.etag)))
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Every project state object of `root`, by normalized name, with its ETag.
pub(crate) async fn load_projects(
    store: &dyn Store,
    root: &RepoRoot,
) -> Result<BTreeMap<String, (RepoState, String)>, IndexError> {
    let listing = store.list_all(&format!("{root}{PROJECTS_DIR}"), true).await?;
    let keys: Vec<(String, Key)> = listing
        .objects
        .into_iter()
        .filter_map(|o| {
            let name = o.key.filename().strip_suffix(".json")?.to_owned();
            Some((name, o.key))
        })
        .collect();
    let loaded: Vec<_> = futures_util::stream::iter(keys)
        .map(|(name, key)| async move { (name, load_object(store, &key).await) })
        .buffer_unordered(READ_CONCURRENCY)
        .collect()
        .await;
    let mut projects = BTreeMap::new();
    for (name, result) in loaded {
        if let Some(found) = result? {
            projects.insert(name, found);
        }
    }
    Ok(projects)
}

/// Put `state` at `key` if the stored object is still the one read (`read`: its ETag;
/// `None`: there was none). A lost race is a [`StoreError::Conflict`]. Returns the new ETag.
pub(crate) async fn commit_object(
    store: &dyn Store,
    key: &Key,
    state: &RepoState,
    read: Option<String>,
) -> Result<String, IndexError> {
    commit_bytes(store, key, serialize_state(state)?, read).await
}

/// The body and options [`commit_object`] puts: `state` as JSON, conditional on `read`.
pub(crate) fn object_put(state: &RepoState, read: Option<String>) -> Result<(Bytes, PutOptions), IndexError> {
    Ok((serialize_state(state)?, put_options(read)))
}

/// A state object's put: conditional on the ETag read (or on there being none), as JSON.
fn put_options(read: Option<String>) -> PutOptions {
    let condition = match read {
        Some(etag) => Condition::IfMatch(etag),
        None => Condition::IfNoneMatch,
    };
    PutOptions::condition(condition).with_content_type("application/json")
}

/// [`commit_object`] of a state already serialized.
async fn commit_bytes(store: &dyn Store, key: &Key, bytes: Bytes, read: Option<String>) -> Result<String, IndexError> {
    Ok(store.put_bytes(key, bytes, put_options(read)).await?.etag)
}

/// Fails with a conflict when the object at `key` is no longer at ETag `read`.
pub(crate) async fn ensure_object_unmoved(store: &dyn Store, key: &Key, read: Option<&str>) -> Result<(), IndexError> {
    let now = match store.head(key).await {
        Ok(meta) => Some(meta.etag),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    if now.as_deref().map(etag_value) == read.map(etag_value) {
        return Ok(());
    }
    Err(StoreError::Conflict {
        key: key.to_string(),
        reason: "another indexer committed while this one inspected files".into(),
    }
    .into())
}
