//! A root's state object in the store: read by readers ([`read_state`]) and by the indexer
//! (with its ETag, for the conditional commit), and committed with `If-Match` /
//! `If-None-Match`.
//!
//! apt and dnf roots keep one state object. A pip root's state is split ([`SPLIT_VERSION`] 2): a
//! small manifest at the state key (`.quarry-index.json`: the hashes of the root's own pages and
//! the files no project claims) and one object per project, `.quarry-index/{project}.json`
//! ([`PROJECTS_DIR`]), each committed with its own condition. [`read_state`] still returns the
//! whole logical state (the manifest merged with every project's object) to every reader (promote,
//! prune, origins, the audit, the server's pages, …). A version-1 pip state (one object) is read as
//! it is and migrates in the root's first whole-root commit (`Indexer::attempt_split`).
//!
//! Big states: the indexer parses an apt or dnf state object of 256 KiB or more in two halves on
//! two threads (a scanner cuts the JSON between two entries near the middle into two whole
//! objects); anything the scanner does not expect, or a half that fails, goes to the one-thread
//! parse, which gives the same state or the same error (the fuzz target `state_halves`, through
//! [`check_halves`], checks that whatever the halves accept the whole parse gives alike). A state
//! of 1,000 entries or more is written as two halves on two threads, spliced into exactly the bytes
//! `serde_json::to_vec` writes for it whole.

use std::collections::BTreeMap;

use bytes::Bytes;
use futures_util::StreamExt;
use quarry_store::{Condition, Key, PutOptions, Store, StoreError, StoreExt};

use crate::error::IndexError;
use crate::state::file_project;
use crate::state::root::{RepoKind, RepoRoot};
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
    // A big state is parsed in two halves side by side; anything unusual (or a failure) goes
    // through the one-thread parse, which gives the same state or the same error.
    let parsed = match parse_in_halves(bytes) {
        Some(state) => Ok(state),
        None => serde_json::from_slice::<RepoState>(bytes),
    };
    match parsed {
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

/// States smaller than this are parsed on one thread.
const PARALLEL_PARSE: usize = 256 * 1024;

/// One half of a state's JSON, each field as it appears there (if it does).
#[derive(serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Half {
    #[serde(default, deserialize_with = "present")]
    version: Option<u32>,
    #[serde(default, deserialize_with = "present")]
    entries: Option<BTreeMap<String, crate::state::Entry>>,
    #[serde(default, deserialize_with = "present")]
    rejected: Option<BTreeMap<String, crate::state::Rejected>>,
    #[serde(default, deserialize_with = "present")]
    outputs: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "present")]
    retired: Option<BTreeMap<String, i64>>,
    #[serde(default, deserialize_with = "present")]
    generated: Option<Option<i64>>,
}

/// A field that is there: parsed as `T` (a `null` is refused where `T` refuses it, as the
/// one-thread parse does).
fn present<'de, T: serde::Deserialize<'de>, D: serde::Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A big state parsed on two threads: the JSON is cut between two entries near its middle
/// into `{…"entries":{first half}}` and `{"entries":{second half}…}`, both whole objects.
/// `None` when the state is small or not as [`serialize_state`] writes it (the caller then
/// parses it whole).
fn parse_in_halves(bytes: &[u8]) -> Option<RepoState> {
    if bytes.len() < PARALLEL_PARSE {
        return None;
    }
    parse_cut(bytes)
}

/// For the fuzz target `fuzz/fuzz_targets/state_halves.rs`: whatever the two-half parse of
/// `bytes` (at any size) accepts, the one-thread parse accepts as the same state.
#[doc(hidden)]
pub fn check_halves(bytes: &[u8]) {
    if let Some(halves) = parse_cut(bytes) {
        let whole = serde_json::from_slice::<RepoState>(bytes);
        assert_eq!(whole.ok().as_ref(), Some(&halves), "the halves parse a state the whole parse does not");
    }
}

fn parse_cut(bytes: &[u8]) -> Option<RepoState> {
    let (first_end, second_start) = entries_midpoint(bytes)?;
    let mut head = Vec::with_capacity(first_end + 2);
    head.extend_from_slice(&bytes[..first_end]);
    head.extend_from_slice(b"}}");
    let mut tail = Vec::with_capacity(bytes.len() - second_start + 12);
    tail.extend_from_slice(b"{\"entries\":{");
    tail.extend_from_slice(&bytes[second_start..]);
    let (head, tail) = std::thread::scope(|scope| {
        let tail = scope.spawn(|| serde_json::from_slice::<Half>(&tail));
        (serde_json::from_slice::<Half>(&head), tail.join())
    });
    let (head, tail) = (head.ok()?, tail.ok()?.ok()?);
    fn one<T>(a: Option<T>, b: Option<T>) -> Option<Option<T>> {
        match (a, b) {
            (Some(_), Some(_)) => None,
            (a, b) => Some(a.or(b)),
        }
    }
    let mut entries = head.entries?;
    let mut second = tail.entries?;
    // Later keys win, as in a one-thread parse.
    entries.append(&mut second);
    Some(RepoState {
        version: one(head.version, tail.version)??,
        entries,
        rejected: one(head.rejected, tail.rejected)?.unwrap_or_default(),
        outputs: one(head.outputs, tail.outputs)?.unwrap_or_default(),
        retired: one(head.retired, tail.retired)?.unwrap_or_default(),
        generated: one(head.generated, tail.generated)?.flatten(),
    })
}

/// Where to cut a state's JSON: the end of the entry that reaches past the middle of the
/// text and the start of the next entry's key. Scans the top-level object up to there;
/// `None` when no top-level key before that is `"entries"` (written without escapes), when
/// the `entries` object ends before the middle, or when the text is not JSON as expected.
fn entries_midpoint(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut at = skip_ws(bytes, 0);
    (bytes.get(at) == Some(&b'{')).then_some(())?;
    // Top-level members before "entries" (e.g. "version") are skipped whole.
    loop {
        at = skip_ws(bytes, at + 1);
        let key_end = skip_string(bytes, at)?;
        let key = &bytes[at..key_end];
        at = skip_ws(bytes, key_end);
        (bytes.get(at) == Some(&b':')).then_some(())?;
        at = skip_ws(bytes, at + 1);
        if key == b"\"entries\"" {
            break;
        }
        at = skip_ws(bytes, skip_value(bytes, at)?);
        (bytes.get(at) == Some(&b',')).then_some(())?;
    }
    (bytes.get(at) == Some(&b'{')).then_some(())?;
    let middle = bytes.len() / 2;
    loop {
        at = skip_ws(bytes, at + 1);
        at = skip_string(bytes, at)?;
        at = skip_ws(bytes, at);
        (bytes.get(at) == Some(&b':')).then_some(())?;
        at = skip_value(bytes, skip_ws(bytes, at + 1))?;
        let end = at;
        at = skip_ws(bytes, at);
        if bytes.get(at) != Some(&b',') {
            return None;
        }
        if end >= middle {
            let next = skip_ws(bytes, at + 1);
            return (bytes.get(next) == Some(&b'"')).then_some((end, next));
        }
    }
}

fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while bytes.get(at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// The end of the JSON string starting at `at`.
fn skip_string(bytes: &[u8], at: usize) -> Option<usize> {
    (bytes.get(at) == Some(&b'"')).then_some(())?;
    let mut i = at + 1;
    loop {
        match bytes.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// The end of the JSON value starting at `at` (not validated: the parse that follows does).
fn skip_value(bytes: &[u8], at: usize) -> Option<usize> {
    match bytes.get(at)? {
        b'"' => skip_string(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match bytes.get(i)? {
                    b'"' => {
                        i = skip_string(bytes, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len = bytes[at..].iter().position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            Some(at + len?)
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

/// [`serialize_state`] in one go.
fn serialize_whole(state: &RepoState) -> Result<Bytes, IndexError> {
    // Room for a typical entry up front: a state of thousands of entries is not copied through
    // a dozen doublings (untouched capacity costs no memory).
    let hint = 4096 + 1024 * (state.entries.len() + state.rejected.len()) + 256 * state.outputs.len();
    let mut out = Vec::with_capacity(hint);
    serde_json::to_writer(&mut out, state).map_err(|e| StoreError::Backend(e.to_string()))?;
    Ok(Bytes::from(out))
}

/// Entries from which [`serialize_state`] writes the entries in two halves side by side, and
/// [`drop_aside`] frees a state on another thread.
const BIG_STATE: usize = 1000;

/// A state object's bytes as they are stored: a big state's entries are written in two
/// halves on two threads and joined, the same bytes as written in one go.
pub(crate) fn serialize_state(state: &RepoState) -> Result<Bytes, IndexError> {
    let fail = |e: serde_json::Error| IndexError::from(StoreError::Backend(e.to_string()));
    if state.entries.len() < BIG_STATE {
        return serialize_whole(state);
    }
    let middle = state.entries.keys().nth(state.entries.len() / 2).expect("a big state has a middle entry");
    let [first, second] = [state.entries.range::<String, _>(..middle), state.entries.range::<String, _>(middle..)];
    let members = |half| Members(std::cell::Cell::new(Some(half)));
    // The rest of the state around empty entries: the first half is written straight after
    // its `"entries":` and the second, written meanwhile on another thread, appended.
    let rest = RepoState {
        version: state.version,
        entries: BTreeMap::new(),
        rejected: state.rejected.clone(),
        outputs: state.outputs.clone(),
        retired: state.retired.clone(),
        generated: state.generated,
    };
    let rest = serde_json::to_vec(&rest).map_err(fail)?;
    let at = find(&rest, b"\"entries\":{}").ok_or_else(|| StoreError::Backend("no entries in a state".into()))? + 10;
    let size = 1024 * state.entries.len() / 2 + 4096;
    let (out, second) = std::thread::scope(|scope| {
        let second = scope.spawn(move || {
            let mut out = Vec::with_capacity(size);
            serde_json::to_writer(&mut out, &members(second)).map(|()| out)
        });
        let mut out = Vec::with_capacity(rest.len() + 2 * size);
        out.extend_from_slice(&rest[..at]);
        let first = serde_json::to_writer(&mut out, &members(first)).map(|()| out);
        (first, second.join().expect("serializing does not panic"))
    });
    let (mut out, second) = (out.map_err(fail)?, second.map_err(fail)?);
    // `{first…}` and `{second…}` become `{first…,second…}`.
    out.pop();
    out.push(b',');
    out.extend_from_slice(&second[1..]);
    out.extend_from_slice(&rest[at + 2..]);
    Ok(Bytes::from(out))
}

/// The first place `needle` starts in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A run of a state's entries written as a JSON object (as a map of them is).
struct Members<'a>(std::cell::Cell<Option<std::collections::btree_map::Range<'a, String, crate::state::Entry>>>);

impl serde::Serialize for Members<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.take().into_iter().flatten())
    }
}

/// Free a big value on another thread (a reindex of a big repo returns without waiting for
/// thousands of entries to be deallocated); a small one, or one no thread can be started
/// for, here.
pub(crate) fn drop_aside<T: Send + 'static>(entries: usize, value: T) {
    if entries >= BIG_STATE {
        let _ = std::thread::Builder::new().name("quarry-drop".into()).spawn(move || drop(value));
    }
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
    if root.is_structured() {
        // `{project}/index.*` and `{project}/{file}[.metadata]`; the root's own `index.*`.
        let (project, rest) = relative.split_once('/')?;
        if rest == "index.html" || rest == "index.json" {
            return Some(project.to_owned());
        }
        let file = rest.strip_suffix(crate::state::root::METADATA_SUFFIX).unwrap_or(rest);
        return file_project(file).map(|name| name.as_str().to_owned());
    }
    if let Some(rest) = relative.strip_prefix("simple/") {
        let (name, page) = rest.split_once('/')?;
        return (page == "index.html" || page == "index.json").then(|| name.to_owned());
    }
    let file = relative.strip_suffix(crate::state::root::METADATA_SUFFIX).unwrap_or(relative);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Rejected, test_entry};

    /// A state big enough to be parsed in halves, with keys and values JSON must escape.
    fn big_state() -> RepoState {
        let mut state = RepoState::empty();
        for i in 0..1500 {
            let name = match i % 4 {
                0 => format!("pool/main/p{i}_1.0_amd64.deb"),
                1 => format!("odd \\\"{{[{i}]}}\\.deb"),
                2 => format!("é{i}\\"),
                _ => format!("q{i}\u{1}, \"x\": {{}}"),
            };
            let mut entry = test_entry(&name);
            entry.yanked = Some(format!("reason \"{i}\" \\ }}"));
            state.entries.insert(name, entry);
        }
        state.rejected.insert("bad.deb".into(), Rejected { etag: "e".into(), reason: "no \"control\"".into() });
        state.outputs.insert("r/dists/stable/Release".into(), "00".into());
        state.retired.insert("r/old".into(), 7);
        state.generated = Some(1_795_000_000);
        state
    }

    #[test]
    fn a_big_state_parsed_in_halves_is_the_state_parsed_whole() {
        let state = big_state();
        let compact = serialize_state(&state).unwrap();
        assert!(compact.len() > PARALLEL_PARSE, "{}", compact.len());
        assert_eq!(compact, serde_json::to_vec(&state).unwrap(), "the buffer's size does not change the bytes");
        assert_eq!(parse_in_halves(&compact).as_ref(), Some(&state));
        assert_eq!(parse_state(Some(&compact)), state);
        // Pretty-printed, with the members in another order: the same state, or the whole parse.
        let pretty = serde_json::to_vec_pretty(&state).unwrap();
        assert_eq!(parse_in_halves(&pretty).as_ref(), Some(&state));
        let mut value: serde_json::Value = serde_json::from_slice(&compact).unwrap();
        let entries = value.as_object_mut().unwrap().remove("entries").unwrap();
        let reordered = format!("{},\"entries\":{entries}}}", &value.to_string()[..value.to_string().len() - 1]);
        assert_eq!(parse_in_halves(reordered.as_bytes()).as_ref(), Some(&state));
        assert_eq!(parse_state(Some(reordered.as_bytes())), state);
    }

    /// Written in halves, a big state is the bytes `serde_json` writes in one go, with or
    /// without its optional fields.
    #[test]
    fn a_big_state_written_in_halves_is_the_state_written_whole() {
        let mut state = big_state();
        assert_eq!(serialize_state(&state).unwrap(), serde_json::to_vec(&state).unwrap());
        state.retired.clear();
        state.generated = None;
        state.rejected.clear();
        state.entries = state.entries.into_iter().take(BIG_STATE).collect();
        assert_eq!(serialize_state(&state).unwrap(), serde_json::to_vec(&state).unwrap());
        state.entries.pop_first();
        assert_eq!(serialize_state(&state).unwrap(), serde_json::to_vec(&state).unwrap(), "written whole");
    }

    #[test]
    fn odd_or_broken_big_states_fall_back_to_the_whole_parse() {
        let compact = serde_json::to_string(&big_state()).unwrap();
        // A field given twice, a null where a map belongs, a cut text: not parsed in halves,
        // and the whole parse refuses them as before (an empty state: rebuilt).
        let twice = compact.replacen("\"rejected\":", "\"version\":1,\"rejected\":", 1);
        let null = compact.replacen("\"rejected\":{", "\"rejected\":null,\"x\":{", 1);
        let cut = &compact[..compact.len() - 10];
        for broken in [twice.as_str(), null.as_str(), cut] {
            assert!(parse_in_halves(broken.as_bytes()).is_none(), "{}", &broken[broken.len() - 80..]);
            assert_eq!(parse_state(Some(broken.as_bytes())), RepoState::empty());
        }
        // Entries that end before the middle (a state mostly outputs) are parsed whole.
        let mut state = big_state();
        state.entries.retain(|k, _| k.starts_with("pool/main/p1"));
        for i in 0..20_000 {
            state.outputs.insert(format!("r/page{i}"), "0".repeat(64));
        }
        let bytes = serde_json::to_vec(&state).unwrap();
        assert!(parse_in_halves(&bytes).is_none());
        assert_eq!(parse_state(Some(&bytes)), state);
    }
}
