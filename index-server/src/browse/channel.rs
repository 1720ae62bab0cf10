//! Channel roots in the browser (roots the configured layout names beyond a run's, e.g. the
//! `therock-release` preset's `v2/{family}/`, `v3/packages/deb/`, `python-deps/`):
//!
//! - `/-/channel/` lists the layout's root patterns and the roots the store holds for each;
//! - `/-/channel/{root}` shows every file a root lists with its provenance from the root's
//!   committed state (`Entry.source`): the run, platform and commit it was promoted from, and
//!   when it entered the channel (its upload-time). A per-family view lists its generic root's
//!   files too, marked as such.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use quarry_index::listing::human_size;
use quarry_index::{Entry, RepoKind, RepoRoot, RepoState};
use quarry_layout::config::Layout;
use quarry_store::Store;

use crate::{AppError, AppState, encode_path};

/// One file of a channel root.
struct FileRow {
    name: String,
    href: String,
    /// The root it lies in when not the page's own (a view's generic root).
    via: Option<String>,
    size: String,
    bytes: u64,
    /// When it entered the channel.
    entered: String,
    /// `(run link, run id)`, platform, `(commit link, commit)`: empty for a file uploaded
    /// straight into the channel.
    run: Option<(String, String)>,
    platform: String,
    commit: Option<(String, String)>,
    sha256: String,
}

#[derive(Template)]
#[template(path = "browse-channel.html")]
struct ChannelPage {
    root: String,
    kind: &'static str,
    index_href: String,
    generic: Option<(String, String)>,
    files: Vec<FileRow>,
    promoted: usize,
}

/// One layout rule and the roots the store holds for it.
struct RuleRow {
    pattern: String,
    kind: &'static str,
    options: String,
    roots: Vec<(String, String)>,
}

#[derive(Template)]
#[template(path = "browse-channels.html")]
struct ChannelsPage {
    rules: Vec<RuleRow>,
}

fn row(root: &RepoRoot, entry: &Entry, via: Option<&RepoRoot>) -> FileRow {
    let home = via.unwrap_or(root);
    let source = entry.source.as_ref();
    FileRow {
        name: entry.filename.clone(),
        href: encode_path(&format!("{home}{}", entry.filename)),
        via: via.map(ToString::to_string),
        size: human_size(entry.size),
        bytes: entry.size,
        entered: entry.upload_time.get(..19).unwrap_or(&entry.upload_time).replace('T', " "),
        run: source.map(|p| (encode_path(&format!("{}-{}/", p.run, p.platform)), p.run.clone())),
        platform: source.map(|p| p.platform.clone()).unwrap_or_default(),
        commit: source
            .and_then(|p| p.commit.as_ref())
            .map(|c| (format!("/?commit={}", encode_path(c).trim_start_matches('/')), c.clone())),
        sha256: entry.sha256.clone(),
    }
}

/// The page of `prefix`, a root `layout` configures; `None` when it configures none there.
pub(crate) async fn render_channel(
    store: &dyn Store,
    layout: &Layout,
    prefix: &str,
) -> Result<Option<String>, AppError> {
    if layout.rule_for(prefix.trim_end_matches('/')).is_none() {
        return Ok(None);
    }
    let root = RepoRoot::new(prefix, layout).map_err(|e| AppError::BadRequest(e.to_string()))?;
    let state = quarry_index::read_state(store, &root).await?.unwrap_or_else(RepoState::empty);
    let mut files: Vec<FileRow> = state.entries.values().map(|e| row(&root, e, None)).collect();
    let generic = quarry_index::view::generic_of(layout, &root);
    if let Some(generic) = &generic {
        let theirs = quarry_index::read_state(store, generic).await?.unwrap_or_else(RepoState::empty);
        let shown = theirs.entries.values().filter(|e| !state.entries.contains_key(&e.filename));
        files.extend(shown.map(|e| row(&root, e, Some(generic))));
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    let index_href = match root.kind() {
        RepoKind::Pip if !root.is_structured() => encode_path(&format!("{root}simple/")),
        _ => encode_path(root.as_str()),
    };
    let page = ChannelPage {
        kind: root.kind().label(),
        root: root.to_string(),
        index_href,
        generic: generic.map(|g| (encode_path(&format!("-/channel/{g}")), g.to_string())),
        promoted: files.iter().filter(|f| f.run.is_some()).count(),
        files,
    };
    Ok(Some(page.render().map_err(|e| AppError::Internal(format!("rendering: {e}")))?))
}

/// `/-/channel/{root}`.
pub(crate) async fn channel_page(
    State(state): State<AppState>,
    Path(prefix): Path<String>,
) -> Result<Response, AppError> {
    match render_channel(state.store.as_ref(), state.layout(), &prefix).await? {
        Some(body) => super::html(Ok(body)),
        None => Err(AppError::NotFound(format!("{prefix:?} is not a channel root the layout configures"))),
    }
}

/// The layout's rules with the roots the store holds for each.
pub(crate) async fn render_channels(store: &dyn Store, layout: &Layout) -> Result<String, AppError> {
    let mut rules = Vec::new();
    for rule in &layout.roots {
        let found = quarry_index::view::roots_of_rule(store, rule).await?;
        // A root the first matching rule gives to another rule is shown there.
        let mine = found.into_iter().filter(|p| layout.rule_for(p.trim_end_matches('/')) == Some(rule));
        let mut options = Vec::new();
        if let Some(generic) = rule.generic.as_deref().filter(|_| rule.view.is_some()) {
            options.push(format!("view of {generic}"));
        }
        options.extend(rule.keep_days.map(|d| format!("keep {d} days")));
        options.extend(rule.keep_versions.map(|v| format!("keep {v} versions")));
        if !rule.compose_with.is_empty() {
            options.push(format!("composed with {}", rule.compose_with.join(", ")));
        }
        rules.push(RuleRow {
            pattern: rule.prefix.clone(),
            kind: rule.kind.label(),
            options: options.join("; "),
            roots: mine.map(|p| (encode_path(&format!("-/channel/{p}")), p)).collect(),
        });
    }
    ChannelsPage { rules }.render().map_err(|e| AppError::Internal(format!("rendering: {e}")))
}

/// `/-/channel/`.
pub(crate) async fn channels_page(State(state): State<AppState>) -> Result<Response, AppError> {
    super::html(Ok(render_channels(state.store.as_ref(), state.layout()).await?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_index::Provenance;
    use quarry_store::{Key, MemoryStore, PutOptions, StoreExt};

    fn entry(filename: &str, source: Option<(&str, &str, Option<&str>)>) -> Entry {
        Entry {
            filename: filename.into(),
            size: 2048,
            sha256: "cd".repeat(32),
            upload_time: "2026-11-20T08:30:00.000000Z".into(),
            etag: "e".into(),
            source: source.map(|(run, platform, commit)| Provenance {
                run: run.into(),
                platform: platform.into(),
                commit: commit.map(Into::into),
            }),
            ..Entry::default()
        }
    }

    async fn put_state(store: &MemoryStore, root: &str, kind: RepoKind, entries: Vec<Entry>) {
        let root = RepoRoot::with_kind(root, kind).unwrap();
        let mut state = RepoState::empty();
        for e in entries {
            let key = Key::new(format!("{root}{}", e.filename)).unwrap();
            store.put_bytes(&key, bytes::Bytes::from_static(b"x"), PutOptions::default()).await.unwrap();
            state.entries.insert(e.filename.clone(), e);
        }
        let body = serde_json::to_vec(&state).unwrap();
        store.put_bytes(&root.state_key(), body.into(), PutOptions::default()).await.unwrap();
    }

    /// A view root's page: its own files and its generic root's, each with where it came from.
    #[tokio::test]
    async fn channel_pages_show_each_files_provenance() {
        let store = MemoryStore::default();
        let commit = Some("0123456789abcdef0123456789abcdef01234567");
        let own = vec![
            entry("rocm_sdk_libraries_gfx94X_dcgpu-7.0.0-py3-none-linux_x86_64.whl", Some(("18000", "linux", commit))),
            entry("hand_placed-1.0-py3-none-any.whl", None),
        ];
        put_state(&store, "v2/gfx94X-dcgpu/", RepoKind::Pip, own).await;
        let generic = vec![entry("rocm_sdk_core-7.0.0-py3-none-linux_x86_64.whl", Some(("18001", "windows", None)))];
        put_state(&store, "v2/generic/", RepoKind::Pip, generic).await;
        let debs = vec![entry("pool/main/r/rocm_7.0.0_amd64.deb", Some(("18000", "linux", commit)))];
        put_state(&store, "v3/packages/deb/", RepoKind::Apt, debs).await;
        let layout = Layout::preset("therock-release").unwrap();
        let view = render_channel(&store, &layout, "v2/gfx94X-dcgpu/").await.unwrap().unwrap();
        insta::assert_snapshot!("channel_view", view);
        let deb = render_channel(&store, &layout, "v3/packages/deb/").await.unwrap().unwrap();
        assert!(deb.contains("pool/main/r/rocm_7.0.0_amd64.deb") && deb.contains("18000"), "{deb}");
        assert!(render_channel(&store, &layout, "123-linux/python/").await.unwrap().is_none());
        insta::assert_snapshot!("channels", render_channels(&store, &layout).await.unwrap());
    }
}
