//! The run browser: server-rendered pages over the same store the indexes live in.
//!
//! - `/` lists runs (`{run}-{platform}/` prefixes), newest first, 50 a page: size, file count,
//!   age, what each holds (python, deb, rpm, artifacts, logs), the commit and branch of its
//!   manifest (`quarry_layout::runs`); `/?commit=SHA` lists only the runs that built a commit.
//! - `/{run}-{platform}/` shows the run: pip, apt and dnf repos with package counts and
//!   copy-paste install lines, stage artifacts grouped by the stage that produced them (when
//!   the server knows the topology) with each stage's logs, the build summary (every stage
//!   build's step timings across stages and families, with its logs: [`timings`]), logs. The
//!   stored listing stays at `…/index.html`.
//! - `/-/package/{run}/{project}/` shows one Python project: versions, files with sizes,
//!   sha256 and requires-python, and the dependencies of the newest version.
//! - `/-/dnf/{run}.repo` is a `.repo` file for the run's dnf repos.
//! - `/-/channel/` and `/-/channel/{root}`: the configured layout's channel roots, each file
//!   with the run, platform and commit it was promoted from ([`channel`]).
//!
//! Everything is read from the store on request: repo states for package lists, one
//! recursive listing per run shown.
//!
//! Install lines name the configured public URL, else the request's `Host` when it is a plausible
//! `host[:port]` whose name is allowed (`allowed_hosts`, loopback names by default: behind a
//! shared cache an arbitrary `Host` would poison the pages others get), else the address the
//! request came in on; every word of a copy-paste line is shell-quoted, and every link is
//! percent-encoded.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use quarry_artifacts::ArtifactName;
use quarry_index::listing::{SHA256SUM_SUFFIX, human_size};
use quarry_index::{RepoKind, RepoRoot, RepoState};
use quarry_layout::{self as layout, RunSegment, UploadKind, run_id_order};
use quarry_packaging::{DistFilename, PackageName};
use quarry_store::{Key, ObjectMeta, Store, StoreExt as _};

use crate::{AppError, AppState, ServedAt, encode_path};

pub(crate) mod channel;
mod timings;

/// Runs per page of the run list.
pub const RUNS_PER_PAGE: usize = 50;
const MAX_SIDECAR: u64 = 4096;
const MAX_METADATA: u64 = 4 * 1024 * 1024;

fn html(body: Result<String, askama::Error>) -> Result<Response, AppError> {
    let body = body.map_err(|e| AppError::Internal(format!("rendering: {e}")))?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")],
        body,
    )
        .into_response())
}

/// The URL clients reach this server at: the configured public URL; else the request's `Host`
/// when it is a plausible `host[:port]` (anything else could smuggle text into the shell lines and
/// `.repo` files built from it) naming an allowed host ([`host_allowed`]); else the address
/// the request came in on. The scheme is `https` on a TLS connection; else `X-Forwarded-Proto`
/// counts only with an allowed `Host`.
pub(crate) fn base_url(state: &AppState, headers: &HeaderMap, served_at: Option<ServedAt>) -> String {
    if let Some(url) = &state.public_url {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let host = host.filter(|h| plausible_host(h) && host_allowed(h, &state.allowed_hosts));
    let proto = match headers.get("x-forwarded-proto").and_then(|h| h.to_str().ok()) {
        _ if served_at.is_some_and(|s| s.tls) => "https",
        Some(p) if host.is_some() && p.trim().eq_ignore_ascii_case("https") => "https",
        _ => "http",
    };
    match (host, served_at) {
        (Some(host), _) => format!("{proto}://{host}"),
        (None, Some(ServedAt { addr, .. })) => format!("{proto}://{addr}"),
        (None, None) => format!("{proto}://localhost"),
    }
}

/// Whether a plausible `host[:port]` names a loopback host (`localhost`, `127.x.x.x`, `[::1]`)
/// or one of `allowed` (lowercase names; `*.example.com` allows every name below
/// `example.com`), compared without the port and in any case.
pub(crate) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    let loopback = name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    loopback
        || allowed.iter().any(|a| match a.strip_prefix("*.") {
            Some(parent) => name.strip_suffix(parent).is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            None => a.trim_end_matches('.') == name,
        })
}

/// `host[:port]` as a client may name a server: a DNS name or IPv4 address (letters, digits,
/// `-`, `_`, `.`), or an IPv6 address in brackets, and a port of at most 65535.
pub(crate) fn plausible_host(host: &str) -> bool {
    fn port(p: &str) -> bool {
        (1..=5).contains(&p.len())
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u32>().is_ok_and(|n| n <= 65535)
    }
    if host.is_empty() || host.len() > 261 {
        return false;
    }
    if let Some(rest) = host.strip_prefix('[') {
        let Some((address, after)) = rest.split_once(']') else { return false };
        let address_ok = !address.is_empty()
            && address.contains(':')
            && address.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
        return address_ok && (after.is_empty() || after.strip_prefix(':').is_some_and(port));
    }
    let (name, p) = match host.split_once(':') {
        Some((name, p)) => (name, Some(p)),
        None => (host, None),
    };
    !name.is_empty()
        && name.len() <= 253
        && !name.starts_with(['-', '.'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && p.is_none_or(port)
}

/// `word` as one POSIX shell word: unchanged when it holds only characters no shell treats
/// specially, else in single quotes (a `'` inside written `'\''`).
pub(crate) fn shell_quote(word: &str) -> Cow<'_, str> {
    let plain = !word.is_empty()
        && word.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(b, b'@' | b'%' | b'+' | b'=' | b':' | b',' | b'.' | b'/' | b'_' | b'-')
        });
    if plain { Cow::Borrowed(word) } else { Cow::Owned(format!("'{}'", word.replace('\'', "'\\''"))) }
}

/// A command line of `words`, each shell-quoted.
pub(crate) fn shell_line(words: &[&str]) -> String {
    words.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ")
}

/// [`shell_line`] of owned words (the install lines of [`quarry_index::install`]).
pub(crate) fn shell_words(words: &[String]) -> String {
    words.iter().map(|w| shell_quote(w)).collect::<Vec<_>>().join(" ")
}

/// The URL of a store prefix under `base`, percent-encoded.
pub(crate) fn url_of(base: &str, prefix: &str) -> String {
    format!("{base}{}", encode_path(prefix))
}

fn age(now: jiff::Timestamp, then: jiff::Timestamp) -> String {
    let secs = now.as_second().saturating_sub(then.as_second()).max(0);
    match secs {
        0..60 => "just now".into(),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86400 => format!("{} h ago", secs / 3600),
        _ => format!("{} d ago", secs / 86400),
    }
}

struct RunRow {
    name: String,
    run_id: String,
    platform: String,
    href: String,
    size: String,
    bytes: u64,
    files: usize,
    age: String,
    updated_iso: String,
    kinds: Vec<&'static str>,
    /// The commit its manifest names (12 digits), and its branch.
    commit: String,
    branch: String,
}

#[derive(Template)]
#[template(path = "browse-runs.html")]
struct RunsPage {
    runs: Vec<RunRow>,
    first: usize,
    last: usize,
    total: usize,
    page: usize,
    pages: usize,
    prev: Option<usize>,
    next: Option<usize>,
    /// The commit the list is filtered by, and its query string for the pager (`&commit=…`).
    commit: Option<String>,
    commit_query: String,
    /// The layout configures channel roots: link their page.
    channels: bool,
}

/// What a run holds, by where its objects are ([`layout::RunLayout::part_of`]).
fn kinds(objects: &[ObjectMeta], prefix: &str) -> Vec<&'static str> {
    let layout = &layout::THEROCK;
    let parts: BTreeSet<layout::RunPart> = objects
        .iter()
        .filter_map(|o| layout.part_of(o.key.as_str().strip_prefix(prefix).unwrap_or_default()))
        .collect();
    parts.into_iter().map(layout::RunPart::label).collect()
}

fn run_row(name: &str, objects: &[ObjectMeta], now: jiff::Timestamp) -> RunRow {
    let prefix = format!("{name}/");
    let (run_id, platform) = RunSegment::parse(name).map_or((name, ""), |run| (run.run_id, run.platform));
    let bytes = objects.iter().map(|o| o.size).sum();
    let newest = objects.iter().map(|o| o.last_modified).max().unwrap_or(now);
    RunRow {
        name: name.to_owned(),
        run_id: run_id.to_owned(),
        platform: platform.to_owned(),
        href: encode_path(&prefix),
        size: human_size(bytes),
        bytes,
        files: objects.iter().filter(|o| !o.key.filename().starts_with('.')).count(),
        age: age(now, newest),
        updated_iso: newest.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        kinds: kinds(objects, &prefix),
        commit: String::new(),
        branch: String::new(),
    }
}

impl RunRow {
    /// The row with what the run's manifest says.
    fn with_manifest(mut self, manifest: Option<&quarry_layout::runs::RunManifest>) -> Self {
        if let Some(m) = manifest {
            self.commit = m.commit.as_deref().map(|c| c.chars().take(12).collect()).unwrap_or_default();
            self.branch = m.branch.clone().unwrap_or_default();
        }
        self
    }
}

/// Run names in the store, newest (largest run id) first.
async fn run_names(store: &dyn Store) -> Result<Vec<String>, AppError> {
    let top = store.list_all("", true).await?;
    let mut runs: Vec<String> = top
        .common_prefixes
        .iter()
        .map(|p| p.trim_end_matches('/').to_owned())
        .filter(|p| RunSegment::parse(p).is_some())
        .collect();
    runs.sort_by(|a, b| run_id_order(b).cmp(&run_id_order(a)).then_with(|| a.cmp(b)));
    Ok(runs)
}

#[derive(serde::Deserialize)]
pub(crate) struct PageQuery {
    page: Option<usize>,
    /// Only the runs whose manifest names this commit (or an abbreviation of it).
    commit: Option<String>,
}

/// The run names of the list: every run newest first, or with `commit` the runs that built it
/// (newest manifest first).
async fn listed_runs(store: &dyn Store, commit: Option<&str>) -> Result<Vec<String>, AppError> {
    let Some(commit) = commit else { return run_names(store).await };
    let found = quarry_layout::runs::find_runs(store, "", commit).await.map_err(|e| match e {
        quarry_layout::runs::RunsError::Store(e) => AppError::from(e),
        other => AppError::BadRequest(other.to_string()),
    })?;
    Ok(found.into_iter().map(|(name, _)| name).collect())
}

pub(crate) async fn runs_page(State(state): State<AppState>, Query(q): Query<PageQuery>) -> Result<Response, AppError> {
    let commit = q.commit.map(|c| c.trim().to_owned()).filter(|c| !c.is_empty());
    let names = listed_runs(state.store.as_ref(), commit.as_deref()).await?;
    let total = names.len();
    let pages = total.div_ceil(RUNS_PER_PAGE).max(1);
    let page = q.page.unwrap_or(1).clamp(1, pages);
    let shown: Vec<String> = names.into_iter().skip((page - 1) * RUNS_PER_PAGE).take(RUNS_PER_PAGE).collect();
    let now = jiff::Timestamp::now();
    let store = state.store.clone();
    let listed: Vec<Result<RunRow, AppError>> = futures_util::stream::iter(shown)
        .map(|name| {
            let store = store.clone();
            async move {
                let objects = store.list_all(&format!("{name}/"), false).await?.objects;
                let manifest = quarry_layout::runs::read_manifest(store.as_ref(), &name).await.ok().flatten();
                Ok(run_row(&name, &objects, now).with_manifest(manifest.as_ref()))
            }
        })
        .buffered(16)
        .collect()
        .await;
    let runs = listed.into_iter().collect::<Result<Vec<_>, _>>()?;
    let first = (page - 1) * RUNS_PER_PAGE + 1;
    html(
        RunsPage {
            last: first + runs.len().saturating_sub(1),
            first,
            total,
            page,
            pages,
            prev: (page > 1).then(|| page - 1),
            next: (page < pages).then(|| page + 1),
            runs,
            commit_query: commit
                .as_deref()
                .map(|c| format!("&commit={}", encode_path(c).trim_start_matches('/')))
                .unwrap_or_default(),
            commit,
            channels: !state.layout().roots.is_empty(),
        }
        .render(),
    )
}

struct ProjectRow {
    name: String,
    href: String,
    latest: String,
    versions: usize,
    files: usize,
}

struct PipView {
    href: String,
    files: usize,
    projects: Vec<ProjectRow>,
    pip_line: String,
    uv_line: String,
}

struct PackageRow {
    name: String,
    version: String,
    arch: String,
    size: String,
    sha256: String,
    href: String,
}

struct AptView {
    packages: Vec<PackageRow>,
    setup: String,
}

struct DnfView {
    arch: String,
    packages: Vec<PackageRow>,
    setup: String,
    repo_file: String,
}

struct ArtifactRow {
    file: String,
    href: String,
    target: String,
    size: String,
    sha256: String,
}

struct StageView {
    name: String,
    artifacts: Vec<ArtifactRow>,
    missing: Vec<String>,
    /// The log files of the stage's builds.
    logs: Vec<timings::LogLink>,
}

struct FileRow {
    name: String,
    href: String,
    size: String,
}

#[derive(Template)]
#[template(path = "browse-run.html")]
struct RunPage {
    run: RunRow,
    pip: Vec<PipView>,
    apt: Vec<AptView>,
    dnf: Vec<DnfView>,
    stages: Vec<StageView>,
    artifacts: Vec<ArtifactRow>,
    artifact_count: usize,
    fetch_line: String,
    logs: Vec<FileRow>,
    /// The build summary's step columns and rows (one per stage build).
    timing_steps: Vec<String>,
    timings: Vec<timings::TimingRow>,
}

impl RunRow {
    fn listing_href(&self) -> String {
        format!("{}index.html", self.href)
    }
}

async fn read_state(store: &dyn Store, root: &RepoRoot) -> Result<RepoState, AppError> {
    Ok(quarry_index::read_state(store, root).await?.unwrap_or_else(RepoState::empty))
}

/// pip projects of a root: normalized name → (display name, versions → filenames).
fn projects(state: &RepoState) -> BTreeMap<String, (String, BTreeMap<quarry_packaging::Version, Vec<String>>)> {
    let mut out: BTreeMap<String, (String, BTreeMap<quarry_packaging::Version, Vec<String>>)> = BTreeMap::new();
    for name in state.entries.keys() {
        let Ok(dist) = name.parse::<DistFilename>() else { continue };
        let project =
            out.entry(dist.name().as_str().to_owned()).or_insert_with(|| (dist.name().to_string(), BTreeMap::new()));
        project.1.entry(dist.version().clone()).or_default().push(name.clone());
    }
    out
}

fn pip_view(base: &str, run: &str, root: &RepoRoot, state: &RepoState) -> PipView {
    let url = url_of(base, root.as_str());
    let projects = projects(state);
    let example = if projects.contains_key("rocm") {
        "rocm".to_owned()
    } else {
        projects.keys().next().cloned().unwrap_or_else(|| "<package>".into())
    };
    PipView {
        href: encode_path(root.as_str()),
        files: state.entries.len(),
        pip_line: shell_words(&quarry_index::install::pip_install(false, &url, false, &example)),
        uv_line: shell_words(&quarry_index::install::pip_install(true, &url, false, &example)),
        projects: projects
            .iter()
            .map(|(normalized, (display, versions))| ProjectRow {
                name: display.clone(),
                href: encode_path(&format!("-/package/{run}/{normalized}/")),
                latest: versions.keys().next_back().map(ToString::to_string).unwrap_or_default(),
                versions: versions.len(),
                files: versions.values().map(Vec::len).sum(),
            })
            .collect(),
    }
}

fn native_rows(root: &RepoRoot, state: &RepoState) -> Vec<PackageRow> {
    let mut rows: Vec<PackageRow> = state
        .entries
        .values()
        .map(|e| {
            let (name, version, arch) = match (&e.deb, e.rpm_info()) {
                (Some(d), _) => {
                    (d.package().to_owned(), d.version().to_owned(), d.get("Architecture").unwrap_or("").to_owned())
                }
                (_, Some(r)) => {
                    let epoch = if r.epoch > 0 { format!("{}:", r.epoch) } else { String::new() };
                    (r.name.clone(), format!("{epoch}{}-{}", r.version, r.release), r.arch.clone())
                }
                _ => (e.filename.clone(), String::new(), String::new()),
            };
            let href = encode_path(&format!("{}{}", root.as_str(), e.filename));
            PackageRow { name, version, arch, size: human_size(e.size), sha256: e.sha256.clone(), href }
        })
        .collect();
    rows.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    rows
}

/// `.sha256sum` sidecars of the archives, read with bounded concurrency.
async fn sidecar_sums(store: &dyn Store, keys: Vec<Key>) -> BTreeMap<String, String> {
    futures_util::stream::iter(keys)
        .map(|key| async move {
            let sum = store.get_bytes(&key, MAX_SIDECAR).await.ok().and_then(|(_, b)| {
                String::from_utf8_lossy(&b).split_whitespace().next().filter(|s| s.len() == 64).map(str::to_owned)
            });
            (key.as_str().trim_end_matches(SHA256SUM_SUFFIX).to_owned(), sum)
        })
        .buffer_unordered(16)
        .filter_map(|(k, v)| async move { v.map(|v| (k, v)) })
        .collect()
        .await
}

/// The run's page: its repos, stage artifacts (by stage when the topology is known) and logs.
pub(crate) async fn run_page(
    state: &AppState,
    run: RunSegment<'_>,
    headers: &HeaderMap,
    served_at: Option<ServedAt>,
) -> Result<Response, AppError> {
    let store = state.store.as_ref();
    let name = run.to_string();
    let prefix = format!("{name}/");
    let objects = store.list_all(&prefix, false).await?.objects;
    if objects.is_empty() {
        return Err(AppError::NotFound(format!("no run {name}")));
    }
    let base = base_url(state, headers, served_at);
    let row = run_row(&name, &objects, jiff::Timestamp::now());
    let repos = repo_views(store, state.layout(), &base, &name, &objects).await?;
    let mut rows = artifact_rows(store, &prefix, &objects).await;
    let artifact_count = rows.len();
    let order = state.topology.as_ref().map(|t| t.build_order()).unwrap_or_default();
    let summary = timings::summary(store, &prefix, &objects, &order).await;
    let mut stages = match &state.topology {
        Some(topology) => stage_views(topology, &row.platform, &mut rows),
        None => Vec::new(),
    };
    for stage in &mut stages {
        stage.logs = summary.stage_logs(&stage.name);
    }
    html(
        RunPage {
            run: row,
            pip: repos.pip,
            apt: repos.apt,
            dnf: repos.dnf,
            stages,
            artifacts: rows.into_iter().map(|(_, r)| r).collect(),
            artifact_count,
            fetch_line: fetch_line(run, &base),
            logs: log_rows(&prefix, &objects),
            timing_steps: summary.steps,
            timings: summary.rows,
        }
        .render(),
    )
}

/// The pip, apt and dnf repos of a run.
#[derive(Default)]
struct RepoViews {
    pip: Vec<PipView>,
    apt: Vec<AptView>,
    dnf: Vec<DnfView>,
}

/// Every indexed root under the run (found by its state object), read and shown by kind.
async fn repo_views(
    store: &dyn Store,
    layout: &layout::config::Layout,
    base: &str,
    run: &str,
    objects: &[ObjectMeta],
) -> Result<RepoViews, AppError> {
    let roots: BTreeSet<RepoRoot> = objects.iter().filter_map(|o| RepoRoot::for_state_key(&o.key, layout)).collect();
    let mut views = RepoViews::default();
    for root in &roots {
        let repo_state = read_state(store, root).await?;
        match root.kind() {
            RepoKind::Pip => views.pip.push(pip_view(base, run, root, &repo_state)),
            RepoKind::Apt => views.apt.push(apt_view(base, run, root, &repo_state, objects)),
            RepoKind::Dnf => views.dnf.push(dnf_view(base, run, root, &repo_state)),
        }
    }
    Ok(views)
}

/// An apt root: its packages, and the lines that add it as a source (with its key when the
/// root is signed).
fn apt_view(base: &str, run: &str, root: &RepoRoot, state: &RepoState, objects: &[ObjectMeta]) -> AptView {
    let url = url_of(base, root.as_str());
    let key_name = quarry_index::apt::KEY_NAME;
    let signed = objects.iter().any(|o| o.key.as_str() == format!("{root}{key_name}"));
    let list = format!("/etc/apt/sources.list.d/quarry-{run}.list");
    let keyring = format!("/etc/apt/keyrings/quarry-{run}.asc");
    let line = quarry_index::install::apt_source(&url, signed.then_some(keyring.as_str()));
    let fetch_key = if signed {
        format!("{}\n", shell_line(&["sudo", "curl", "-fsSL", "-o", &keyring, &format!("{url}{key_name}")]))
    } else {
        String::new()
    };
    let setup = format!(
        "{fetch_key}{} | {}\n{}",
        shell_line(&["echo", &line]),
        shell_line(&["sudo", "tee", &list]),
        shell_line(&["sudo", "apt-get", "update"])
    );
    AptView { packages: native_rows(root, state), setup }
}

/// A dnf root: its packages, and the lines that fetch the run's `.repo` file.
fn dnf_view(base: &str, run: &str, root: &RepoRoot, state: &RepoState) -> DnfView {
    let repo_file = url_of(base, &format!("-/dnf/{run}.repo"));
    let setup = format!(
        "{}\n{}",
        shell_line(&["sudo", "curl", "-fsSL", "-o", &format!("/etc/yum.repos.d/quarry-{run}.repo"), &repo_file]),
        shell_line(&["sudo", "dnf", "makecache"])
    );
    DnfView { arch: last_segment(root).to_owned(), packages: native_rows(root, state), setup, repo_file }
}

/// The last segment of a root's prefix (a dnf root's architecture).
fn last_segment(root: &RepoRoot) -> &str {
    root.as_str().trim_end_matches('/').rsplit('/').next().unwrap_or_default()
}

/// The stage archives of a run (at its root), each with the artifact name it carries, sorted
/// by file name; sha256s the store did not record are read from the `.sha256sum` sidecars.
async fn artifact_rows(store: &dyn Store, prefix: &str, objects: &[ObjectMeta]) -> Vec<(String, ArtifactRow)> {
    let layout = &layout::THEROCK;
    let archives: Vec<(&ObjectMeta, ArtifactName)> = objects
        .iter()
        .filter_map(|o| {
            let file = layout.artifact_file(o.key.as_str().strip_prefix(prefix).unwrap_or_default())?;
            Some((o, ArtifactName::parse_archive(file)?.0))
        })
        .collect();
    let missing_sums: Vec<Key> = archives
        .iter()
        .filter(|(o, _)| o.sha256.is_none())
        .filter_map(|(o, _)| Key::new(format!("{}{SHA256SUM_SUFFIX}", o.key)).ok())
        .filter(|k| objects.iter().any(|o| &o.key == k))
        .collect();
    let sums = sidecar_sums(store, missing_sums).await;
    let mut rows: Vec<(String, ArtifactRow)> = archives
        .into_iter()
        .map(|(o, name)| {
            let sha256 = o.sha256.clone().or_else(|| sums.get(o.key.as_str()).cloned()).unwrap_or_default();
            let row = ArtifactRow {
                href: encode_path(o.key.as_str()),
                target: name.target,
                size: human_size(o.size),
                sha256,
                file: o.key.filename().to_owned(),
            };
            (name.name, row)
        })
        .collect();
    rows.sort_by(|a, b| a.1.file.cmp(&b.1.file));
    rows
}

/// The stages in build order, each with the archives of `rows` it produced (taken out of
/// `rows`) and the artifacts it builds on the run's platform that are missing.
fn stage_views(
    topology: &quarry_topology::Topology,
    platform: &str,
    rows: &mut Vec<(String, ArtifactRow)>,
) -> Vec<StageView> {
    let platform = quarry_topology::Platform::parse(platform).unwrap_or(quarry_topology::Platform::Linux);
    let mut stages = Vec::new();
    for stage in topology.build_order() {
        let produced = topology.produced(&stage).unwrap_or_default();
        let (mine, rest): (Vec<_>, Vec<_>) =
            std::mem::take(rows).into_iter().partition(|(name, _)| produced.contains(name));
        *rows = rest;
        let present: BTreeSet<&String> = mine.iter().map(|(n, _)| n).collect();
        let missing = topology
            .built_on(&produced, platform, &BTreeSet::new())
            .into_iter()
            .filter(|a| !present.contains(a))
            .collect();
        let artifacts = mine.into_iter().map(|(_, r)| r).collect();
        stages.push(StageView { name: stage, artifacts, missing, logs: Vec::new() });
    }
    stages
}

/// The files under the run's logs directory.
fn log_rows(prefix: &str, objects: &[ObjectMeta]) -> Vec<FileRow> {
    let layout = &layout::THEROCK;
    objects
        .iter()
        .filter_map(|o| {
            let name = layout.log_name(o.key.as_str().strip_prefix(prefix)?)?;
            Some(FileRow { name: name.to_owned(), href: encode_path(o.key.as_str()), size: human_size(o.size) })
        })
        .collect()
}

/// The command that fetches a stage's inbound artifacts of `run` from this server.
fn fetch_line(run: RunSegment<'_>, base: &str) -> String {
    shell_line(&[
        "quarry",
        "artifacts",
        "fetch",
        "--run-id",
        run.run_id,
        "--platform",
        run.platform,
        "--store",
        &format!("{base}/"),
        "--stage",
        "<stage>",
        "--output-dir",
        "build",
        "--bootstrap",
    ])
}

struct FileView {
    name: String,
    href: String,
    size: String,
    bytes: u64,
    requires_python: String,
    uploaded: String,
    sha256: String,
    yanked: Option<String>,
    /// Who put it there, by the audit log (the newest upload or promotion of it).
    by: Option<String>,
}

struct VersionView {
    version: String,
    files: Vec<FileView>,
}

#[derive(Template)]
#[template(path = "browse-package.html")]
struct PackagePage {
    name: String,
    run: String,
    run_href: String,
    latest: Option<String>,
    summary: String,
    requires_python: String,
    dependencies: Vec<String>,
    versions: Vec<VersionView>,
    pip_line: String,
    uv_line: String,
}

/// `Summary` and every `Requires-Dist` of a core metadata file (headers only).
fn summary_and_requirements(raw: &[u8]) -> (String, Vec<String>) {
    let text = String::from_utf8_lossy(raw);
    let (mut summary, mut requires) = (String::new(), Vec::new());
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Summary:") {
            summary = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("Requires-Dist:") {
            requires.push(v.trim().to_owned());
        }
    }
    (summary, requires)
}

pub(crate) async fn package_page(
    State(state): State<AppState>,
    Path((run, project)): Path<(String, String)>,
    headers: HeaderMap,
    served_at: Option<Extension<ServedAt>>,
) -> Result<Response, AppError> {
    let Some(segment) = RunSegment::parse(&run) else {
        return Err(AppError::NotFound(format!("{run:?} is not a run")));
    };
    let name = PackageName::new(&project).map_err(|e| AppError::NotFound(format!("{project:?}: {e}")))?;
    let store = state.store.as_ref();
    let base = base_url(&state, &headers, served_at.map(|Extension(s)| s));
    let root = RepoRoot::new(&state.layout().run().root_of(segment, UploadKind::Python), state.layout())
        .map_err(|e| AppError::BadRequest(e.to_string()))?;
    let repo_state = read_state(store, &root).await?;
    let all = projects(&repo_state);
    let Some((display, versions)) = all.get(name.as_str()) else {
        return Err(AppError::NotFound(format!("no project {project:?} in {root}")));
    };
    let mut views = Vec::new();
    for (version, files) in versions.iter().rev() {
        let mut file_views: Vec<FileView> = files
            .iter()
            .filter_map(|f| repo_state.entries.get(f))
            .map(|e| FileView {
                name: e.filename.clone(),
                href: encode_path(&format!("{root}{}", e.filename)),
                size: human_size(e.size),
                bytes: e.size,
                requires_python: e.requires_python.clone().unwrap_or_default(),
                uploaded: e.upload_time.get(..19).unwrap_or(&e.upload_time).replace('T', " "),
                sha256: e.sha256.clone(),
                yanked: e.yanked.clone(),
                by: None,
            })
            .collect();
        file_views.sort_by(|a, b| a.name.cmp(&b.name));
        for view in &mut file_views {
            view.by = uploaded_by(store, &format!("{root}{}", view.name)).await;
        }
        views.push(VersionView { version: version.to_string(), files: file_views });
    }
    // Dependencies and summary from the newest version's first wheel with a metadata sidecar.
    let newest = versions.iter().next_back();
    let mut summary = String::new();
    let mut dependencies = Vec::new();
    let mut requires_python = String::new();
    if let Some((_, files)) = newest {
        for file in files {
            let Some(entry) = repo_state.entries.get(file) else { continue };
            if entry.core_metadata_sha256.is_none() {
                continue;
            }
            requires_python = entry.requires_python.clone().unwrap_or_default();
            let key = Key::new(format!("{root}{file}{}", quarry_index::METADATA_SUFFIX))?;
            if let Ok((_, raw)) = store.get_bytes(&key, MAX_METADATA).await {
                (summary, dependencies) = summary_and_requirements(&raw);
                break;
            }
        }
    }
    let url = url_of(&base, root.as_str());
    html(
        PackagePage {
            name: display.clone(),
            run_href: format!("/{run}/"),
            run,
            latest: newest.map(|(v, _)| v.to_string()),
            summary,
            requires_python,
            dependencies,
            versions: views,
            pip_line: shell_words(&quarry_index::install::pip_install(false, &url, false, display)),
            uv_line: shell_words(&quarry_index::install::pip_install(true, &url, false, display)),
        }
        .render(),
    )
}

/// Who last uploaded or promoted the file at `key`, by the audit log (nothing when it has no
/// such entry, or cannot be read: the page is shown without it).
async fn uploaded_by(store: &dyn quarry_store::Store, key: &str) -> Option<String> {
    use quarry_index::audit_log::{AuditAction, AuditOutcome, AuditQuery, read};
    let query = AuditQuery { since: None, key_prefix: Some(key.to_owned()), done_only: true };
    let log = read(store, &query).await.ok()?;
    let put = |e: &&quarry_index::audit_log::AuditEntry| {
        e.key == key && e.outcome == AuditOutcome::Ok && matches!(e.action, AuditAction::Upload | AuditAction::Promote)
    };
    log.entries.iter().rev().find(put).map(|e| e.identity.clone())
}

/// `/-/dnf/{run}.repo`: one section per dnf repo of the run.
pub(crate) async fn dnf_repo_file(
    State(state): State<AppState>,
    Path(file): Path<String>,
    headers: HeaderMap,
    served_at: Option<Extension<ServedAt>>,
) -> Result<Response, AppError> {
    let Some(run) = file.strip_suffix(".repo").filter(|r| RunSegment::parse(r).is_some()) else {
        return Err(AppError::NotFound(format!("{file:?} is not a run's .repo file")));
    };
    let store = state.store.as_ref();
    let base = base_url(&state, &headers, served_at.map(|Extension(s)| s));
    let objects = store.list_all(&format!("{run}/"), false).await?.objects;
    let mut out = String::new();
    for root in objects
        .iter()
        .filter_map(|o| RepoRoot::for_state_key(&o.key, state.layout()))
        .filter(|r| r.kind() == RepoKind::Dnf)
    {
        let url = url_of(&base, root.as_str());
        let arch: String = last_segment(&root)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '_' })
            .collect();
        let signed = objects.iter().any(|o| o.key.as_str() == format!("{root}{}", quarry_index::dnf::KEY_NAME));
        let _ = write!(
            out,
            "[quarry-{run}-{arch}]\nname=Quarry run {run} ({arch})\nbaseurl={url}\nenabled=1\ngpgcheck=0\n"
        );
        if signed {
            let _ = writeln!(out, "repo_gpgcheck=1\ngpgkey={url}{}", quarry_index::dnf::KEY_NAME);
        } else {
            out.push_str("repo_gpgcheck=0\n");
        }
        out.push('\n');
    }
    if out.is_empty() {
        return Err(AppError::NotFound(format!("run {run} has no rpm repository")));
    }
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
            (header::CONTENT_DISPOSITION, format!("attachment; filename=\"quarry-{run}.repo\"")),
        ],
        out,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::Request;
    use quarry_store::{MemoryStore, PutOptions};
    use tower::ServiceExt as _;

    use super::*;

    #[test]
    fn install_lines_over_tls_say_https() {
        let state = AppState::new(Arc::new(MemoryStore::default()), Vec::new());
        let at = |tls| Some(ServedAt { addr: std::net::SocketAddr::from(([127, 0, 0, 1], 8470)), tls });
        let mut headers = HeaderMap::new();
        assert_eq!(base_url(&state, &headers, at(true)), "https://127.0.0.1:8470");
        assert_eq!(base_url(&state, &headers, at(false)), "http://127.0.0.1:8470");
        headers.insert(header::HOST, axum::http::HeaderValue::from_static("localhost:8470"));
        headers.insert("x-forwarded-proto", axum::http::HeaderValue::from_static("http"));
        assert_eq!(base_url(&state, &headers, at(true)), "https://localhost:8470", "the connection's own scheme");
        assert_eq!(base_url(&state, &headers, at(false)), "http://localhost:8470");
    }

    #[test]
    fn hosts_are_checked() {
        for good in [
            "localhost",
            "localhost:8470",
            "quarry.example.com",
            "quarry_ci.internal:80",
            "127.0.0.1:65535",
            "[::1]:8470",
            "[fe80::1]",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert!(plausible_host(good), "{good}");
        }
        for bad in [
            "",
            "evil.com'; rm -rf ~; echo '",
            "a b",
            "host:",
            "host:99999",
            "host:80:80",
            "host:8o",
            "ex$(id).com",
            "a/b",
            "a@b",
            "-flag",
            ".hidden",
            "[::1",
            "[::1]x",
            "[evil]",
            "[]:80",
            "\"quoted\"",
            "é.example",
        ] {
            assert!(!plausible_host(bad), "{bad}");
        }
        assert!(!plausible_host(&"a".repeat(300)));
        let allowed = ["quarry.internal".to_owned(), "*.ci.example".to_owned()];
        for yes in [
            "localhost",
            "LOCALHOST:80",
            "127.0.0.1:8470",
            "127.9.9.9",
            "[::1]:1",
            "quarry.internal:8080",
            "x.ci.example",
            "a.b.ci.example",
        ] {
            assert!(host_allowed(yes, &allowed), "{yes}");
        }
        for no in
            ["quarry.internal.evil", "ci.example", "xci.example", "evil.example", "10.0.0.1", "[::2]", "localhostx"]
        {
            assert!(!host_allowed(no, &allowed), "{no}");
        }
    }

    #[test]
    fn shell_words_are_quoted() {
        let quoted: Vec<String> = [
            "pip",
            "https://q.example:8443/1-linux/python/",
            "--find-links",
            "<stage>",
            "it's",
            "a b",
            "$(id)",
            "`id`",
            "x;y",
            "~root",
            "",
            "*",
        ]
        .iter()
        .map(|w| shell_quote(w).into_owned())
        .collect();
        insta::assert_snapshot!(quoted.join("\n"), @r#"
        pip
        https://q.example:8443/1-linux/python/
        --find-links
        '<stage>'
        'it'\''s'
        'a b'
        '$(id)'
        '`id`'
        'x;y'
        '~root'
        ''
        '*'
        "#);
    }

    fn entry(filename: &str) -> quarry_index::Entry {
        quarry_index::Entry {
            filename: filename.into(),
            size: 1234,
            sha256: "ab".repeat(32),
            upload_time: "2024-05-01T12:00:00.000000Z".into(),
            etag: "e1".into(),
            ..quarry_index::Entry::default()
        }
    }

    async fn put(state: &AppState, key: &str, body: Vec<u8>) {
        state.store().put_bytes(&Key::new(key).unwrap(), body.into(), PutOptions::default()).await.unwrap();
    }

    /// A run with a pip, an apt and a dnf root (states only) and a log whose name needs encoding.
    async fn a_run(public_url: Option<&str>) -> AppState {
        let state =
            AppState::new(Arc::new(MemoryStore::default()), vec![]).with_public_url(public_url.map(str::to_owned));
        for (root, file) in [
            ("123-linux/python/", "demo-1.0-py3-none-any.whl"),
            ("123-linux/packages/deb/", "pool/main/h/hello_1.0_amd64.deb"),
            ("123-linux/packages/rpm/x86_64/", "hello-1.0-1.x86_64.rpm"),
        ] {
            let mut repo = RepoState::empty();
            repo.entries.insert(file.into(), entry(file));
            let root = RepoRoot::for_state_key(
                &Key::new(format!(
                    "{root}{}",
                    match root {
                        r if r.ends_with("python/") => quarry_index::STATE_NAME,
                        r if r.contains("/deb/") => quarry_index::APT_STATE_NAME,
                        _ => quarry_index::DNF_STATE_NAME,
                    }
                ))
                .unwrap(),
                &Default::default(),
            )
            .unwrap();
            put(&state, root.state_key().as_str(), serde_json::to_vec(&repo).unwrap()).await;
            put(&state, &format!("{root}{file}"), b"x".to_vec()).await;
        }
        put(&state, "123-linux/logs/a #1?.log", b"log".to_vec()).await;
        state
    }

    async fn page(state: AppState, path: &str, host: &str) -> String {
        let mut request = Request::get(path).header("host", host).body(Body::empty()).unwrap();
        request
            .extensions_mut()
            .insert(ServedAt { addr: std::net::SocketAddr::from(([127, 0, 0, 1], 8470)), tls: false });
        let response = crate::app(state).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        String::from_utf8(body.to_vec()).unwrap()
    }

    fn unescape(s: &str) -> String {
        s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&#39;", "'").replace("&amp;", "&")
    }

    /// The copy-paste blocks of a page, and its links.
    fn install_blocks(html: &str) -> String {
        let mut out = Vec::new();
        for (at, _) in html.match_indices("<pre class=\"install\" id=\"") {
            let rest = &html[at + "<pre class=\"install\" id=\"".len()..];
            let id = &rest[..rest.find('"').unwrap()];
            let body = &rest[rest.find('>').unwrap() + 1..rest.find("</pre>").unwrap()];
            out.push(format!("{id}:\n{}", unescape(body)));
        }
        out.join("\n")
    }

    fn hrefs(html: &str) -> Vec<String> {
        html.match_indices("href=\"").map(|(i, m)| unescape(html[i + m.len()..].split('"').next().unwrap())).collect()
    }

    #[tokio::test]
    async fn a_hostile_host_never_reaches_the_install_lines() {
        let state = a_run(None).await;
        let html = page(state.clone(), "/123-linux/", "evil.example'; touch /tmp/pwned; echo '").await;
        insta::assert_snapshot!(install_blocks(&html), @r"
        install-pip:
        pip install --find-links http://127.0.0.1:8470/123-linux/python/ demo
        install-uv:
        uv pip install --find-links http://127.0.0.1:8470/123-linux/python/ demo
        install-apt:
        echo 'deb [trusted=yes] http://127.0.0.1:8470/123-linux/packages/deb/ stable main' | sudo tee /etc/apt/sources.list.d/quarry-123-linux.list
        sudo apt-get update
        install-dnf:
        sudo curl -fsSL -o /etc/yum.repos.d/quarry-123-linux.repo http://127.0.0.1:8470/-/dnf/123-linux.repo
        sudo dnf makecache
        ");
        assert!(!html.contains("pwned"), "{html}");
        let links = hrefs(&html);
        assert!(links.contains(&"/123-linux/logs/a%20%231%3F.log".to_owned()), "{links:?}");
        assert!(links.contains(&"/123-linux/packages/deb/pool/main/h/hello_1.0_amd64.deb".to_owned()), "{links:?}");

        // A plausible Host is used as it is only when its name is allowed (a shared cache
        // would otherwise keep one client's Host for everyone): else the address it came in on.
        let html = page(state.clone(), "/123-linux/", "quarry.internal:8080").await;
        assert!(html.contains("pip install --find-links http://127.0.0.1:8470/123-linux/python/ demo"), "{html}");
        let allowed = state.clone().with_allowed_hosts(vec!["Quarry.Internal".into(), "*.ci.example".into()]);
        let html = page(allowed.clone(), "/123-linux/", "quarry.internal:8080").await;
        assert!(html.contains("pip install --find-links http://quarry.internal:8080/123-linux/python/ demo"));
        let html = page(allowed.clone(), "/123-linux/", "a.ci.example").await;
        assert!(html.contains("pip install --find-links http://a.ci.example/123-linux/python/ demo"));
        let html = page(allowed, "/123-linux/", "evil.example").await;
        assert!(html.contains("pip install --find-links http://127.0.0.1:8470/123-linux/python/ demo"));
        for loopback in ["localhost:8470", "127.0.0.2:9", "[::1]:8470"] {
            let html = page(state.clone(), "/123-linux/", loopback).await;
            assert!(html.contains(&format!("http://{loopback}/123-linux/python/")), "{loopback}");
        }
        let repo = page(state.clone(), "/-/dnf/123-linux.repo", "evil\"host").await;
        insta::assert_snapshot!(repo, @r"
        [quarry-123-linux-x86_64]
        name=Quarry run 123-linux (x86_64)
        baseurl=http://127.0.0.1:8470/123-linux/packages/rpm/x86_64/
        enabled=1
        gpgcheck=0
        repo_gpgcheck=0
        ");
        let html = page(state, "/-/package/123-linux/demo/", "a b").await;
        insta::assert_snapshot!(install_blocks(&html), @r"
        install-pip:
        pip install --find-links http://127.0.0.1:8470/123-linux/python/ demo
        install-uv:
        uv pip install --find-links http://127.0.0.1:8470/123-linux/python/ demo
        ");
    }

    #[tokio::test]
    async fn install_lines_quote_every_word() {
        let state = a_run(Some("https://quarry.example/it's here/")).await;
        let html = page(state.clone(), "/123-linux/", "ignored.example").await;
        insta::assert_snapshot!(install_blocks(&html), @r"
        install-pip:
        pip install --find-links 'https://quarry.example/it'\''s here/123-linux/python/' demo
        install-uv:
        uv pip install --find-links 'https://quarry.example/it'\''s here/123-linux/python/' demo
        install-apt:
        echo 'deb [trusted=yes] https://quarry.example/it'\''s here/123-linux/packages/deb/ stable main' | sudo tee /etc/apt/sources.list.d/quarry-123-linux.list
        sudo apt-get update
        install-dnf:
        sudo curl -fsSL -o /etc/yum.repos.d/quarry-123-linux.repo 'https://quarry.example/it'\''s here/-/dnf/123-linux.repo'
        sudo dnf makecache
        ");
    }

    #[test]
    fn requirements_come_from_the_headers_only() {
        let raw = b"Metadata-Version: 2.1\nName: a\nSummary: An A\nRequires-Dist: b>=1\nRequires-Dist: c; extra == 'x'\n\nRequires-Dist: not-a-header\n";
        let (summary, deps) = summary_and_requirements(raw);
        assert_eq!(summary, "An A");
        assert_eq!(deps, ["b>=1", "c; extra == 'x'"]);
    }

    #[test]
    fn ages_read_naturally() {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let ago = |s: i64| age(now, jiff::Timestamp::from_second(1_800_000_000 - s).unwrap());
        assert_eq!(ago(5), "just now");
        assert_eq!(ago(600), "10 min ago");
        assert_eq!(ago(7200), "2 h ago");
        assert_eq!(ago(3 * 86400), "3 d ago");
    }

    #[tokio::test]
    async fn the_build_summary_shows_every_stage_build_with_its_logs() {
        let state = a_run(None).await;
        let record = |stage: &str, family: Option<&str>, build: f64| {
            let steps =
                serde_json::json!({"setup": 0.1, "fetch": 0.00002, "configure": 1.5, "build": build, "push": 0.25});
            let json = serde_json::json!({"stage": stage, "family": family, "status": "built", "seconds": 2.0 + build, "steps": steps, "artifacts": []});
            serde_json::to_vec(&json).unwrap()
        };
        put(&state, "123-linux/logs/math-libs_gfx942/timings.json", record("math-libs", Some("gfx942"), 30.0)).await;
        put(&state, "123-linux/logs/math-libs_gfx942/build.log", b"[1/1] blas".to_vec()).await;
        put(&state, "123-linux/logs/foundation/timings.json", record("foundation", None, 3.0)).await;
        put(&state, "123-linux/logs/foundation/build.log", b"[1/1] sysdeps".to_vec()).await;
        put(&state, "123-linux/logs/foundation/index.html", b"a listing".to_vec()).await;
        put(&state, "123-linux/logs/broken/timings.json", b"{".to_vec()).await;
        let html = page(state, "/123-linux/", "quarry.internal").await;
        let start = html.find("<table id=\"timings\"").expect("a timings table");
        let table = &html[start..start + html[start..].find("</table>").unwrap()];
        insta::assert_snapshot!(table.replace("<tr", "\n<tr"));
    }
}
