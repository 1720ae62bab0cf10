//! Rendering every pip index format from a repo state. Pure: same state, same bytes.
//!
//! [`render_parts`] renders the pages [`Parts`] names beside every project's own (a project's event
//! renders only that project's pages), and [`splice_find_links`] replaces one project's rows in a
//! stored find-links page, so an event does not read the other projects. The find-links
//! `index.html` is the one page that grows with the root; it is written only where the root's
//! option is on: a root no layout rule matches (a run's) always, a rule's root only with
//! `find_links = true`, `IndexConfig::find_links` overriding both. Where it is off, a page left
//! from before is deleted by the next reindex.
//!
//! A structured root (`RepoRoot::is_structured`, TheRock's v5 `…/whl-next/`) is its own simple
//! index ([`PagePaths`]): `index.html`/`index.json` list the projects, each project's
//! `{name}/index.html`/`index.json` its files by same-directory hrefs (with the same sha256
//! fragments, `data-requires-python`, PEP 658/714 attributes and yank marks), a release's
//! `-variants.json` lies in its project's directory, and it has no find-links page.

use std::collections::BTreeMap;

use askama::Template;
use quarry_packaging::{DistFilename, PackageName, Version};
pub(crate) use quarry_store::url::encode_segment;
use serde::Serialize;

pub use crate::state::file_project;
use crate::state::root::RepoRoot;
use crate::state::{Entry, RepoState};

pub const HTML: &str = "text/html; charset=utf-8";
pub const PEP691_JSON: &str = "application/vnd.pypi.simple.v1+json";
pub const API_VERSION: &str = "1.1";

/// The file name part of an output key inside a root.
pub const FIND_LINKS: &str = "index.html";
pub const SIMPLE_ROOT_HTML: &str = "simple/index.html";
pub const SIMPLE_ROOT_JSON: &str = "simple/index.json";

/// Where a pip root's index pages lie and how a project page links the root's files: under
/// `simple/`, linking `../../{file}` (a flat root), or at the root itself, linking the files
/// beside the page in the project's directory (a structured root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagePaths {
    structured: bool,
}

impl PagePaths {
    pub fn of(root: &RepoRoot) -> Self {
        Self { structured: root.is_structured() }
    }

    /// The page listing the projects (HTML).
    pub fn root_html(self) -> &'static str {
        if self.structured { FIND_LINKS } else { SIMPLE_ROOT_HTML }
    }

    /// The page listing the projects (PEP 691 JSON).
    pub fn root_json(self) -> &'static str {
        if self.structured { "index.json" } else { SIMPLE_ROOT_JSON }
    }

    /// A project's page (HTML), by normalized name.
    pub fn project_html(self, name: &str) -> String {
        if self.structured { format!("{name}/index.html") } else { format!("simple/{name}/index.html") }
    }

    /// A project's page (PEP 691 JSON), by normalized name.
    pub fn project_json(self, name: &str) -> String {
        if self.structured { format!("{name}/index.json") } else { format!("simple/{name}/index.json") }
    }

    /// What a project page's hrefs to the root's own files start with.
    pub fn file_href_base(self) -> &'static str {
        if self.structured { "" } else { "../../" }
    }

    /// Whether the root has a find-links page at all (a structured root's `index.html` is its
    /// project list).
    pub fn has_find_links(self) -> bool {
        !self.structured
    }
}

/// When an output is published relative to the others: every output of one stage is written
/// (concurrently) before any of the next, so nothing ever points at a missing object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// Content-addressed objects (apt `by-hash/`, dnf `repodata/<sha>-…`, public keys).
    Immutable,
    /// Objects other outputs point at (pip project pages, apt `Packages`).
    Index,
    /// Pages pointing at the indices (pip root pages, apt `Release`).
    Pointer,
    /// Detached signatures over the pointer (`Release.gpg`, `repomd.xml.asc`).
    Signature,
    /// The entry point clients read first (`InRelease`, `repomd.xml`).
    Last,
}

/// One rendered page: its path inside the root, bytes, content type and publish stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub path: String,
    pub body: Vec<u8>,
    pub content_type: &'static str,
    pub stage: Stage,
}

impl Page {
    pub fn new(path: String, body: Vec<u8>, stage: Stage, content_type: &'static str) -> Self {
        Self { path, body, content_type, stage }
    }
}

/// A file as the templates see it.
#[derive(Debug)]
struct FileView<'a> {
    href: String,
    filename: &'a str,
    sha256: &'a str,
    requires_python: Option<&'a str>,
    core_metadata: Option<String>,
    yanked: Option<&'a str>,
    size: u64,
    upload_time: &'a str,
}

#[derive(Template)]
#[template(path = "find-links.html")]
struct FindLinksPage<'a> {
    title: &'a str,
    files: Vec<FileView<'a>>,
}

#[derive(Template)]
#[template(path = "simple-project.html")]
struct SimpleProjectPage<'a> {
    name: &'a str,
    files: Vec<FileView<'a>>,
}

#[derive(Template)]
#[template(path = "simple-root.html")]
struct SimpleRootPage<'a> {
    projects: Vec<&'a str>,
}

#[derive(Serialize)]
struct Meta {
    #[serde(rename = "api-version")]
    api_version: &'static str,
}

#[derive(Serialize)]
struct JsonRoot<'a> {
    meta: Meta,
    projects: Vec<JsonProjectName<'a>>,
}

#[derive(Serialize)]
struct JsonProjectName<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct JsonProject<'a> {
    meta: Meta,
    name: &'a str,
    versions: Vec<String>,
    files: Vec<JsonFile<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "kebab-case")]
struct JsonFile<'a> {
    filename: &'a str,
    url: String,
    hashes: BTreeMap<&'static str, &'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    requires_python: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    core_metadata: Option<BTreeMap<&'static str, &'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    yanked: Option<serde_json::Value>,
    size: u64,
    upload_time: &'a str,
    /// A promoted file's origin (PEP 691 reserves keys with a leading underscore).
    #[serde(rename = "_quarry_source_run", skip_serializing_if = "Option::is_none")]
    quarry_source_run: Option<&'a str>,
    #[serde(rename = "_quarry_source_platform", skip_serializing_if = "Option::is_none")]
    quarry_source_platform: Option<&'a str>,
    #[serde(rename = "_quarry_source_commit", skip_serializing_if = "Option::is_none")]
    quarry_source_commit: Option<&'a str>,
}

/// Extra entries from another root, with an href prefix: listed on this root's pages beside
/// its own, each linked as `href_prefix` + its file name (relative to this root, e.g.
/// `../generic/` for a per-family view listing its channel's generic wheels, `crate::reindex::view`).
/// Their hashes and `.metadata` sidecars are the other root's. A file of the same name this
/// root holds itself is listed instead.
#[derive(Debug, Clone, Copy)]
pub struct Extra<'a> {
    pub state: &'a RepoState,
    pub href_prefix: &'a str,
}

/// The entries of one project, sorted by version then filename, each with its href prefix
/// (empty for the root's own files).
struct Project<'a> {
    name: PackageName,
    files: Vec<(Version, &'a Entry, &'a str)>,
}

fn group<'a>(state: &'a RepoState, extra: Option<Extra<'a>>) -> BTreeMap<PackageName, Project<'a>> {
    let mut projects: BTreeMap<PackageName, Project<'a>> = BTreeMap::new();
    let own = state.entries.values().map(|e| (e, ""));
    let others = extra.into_iter().flat_map(|x| {
        x.state.entries.values().filter(|e| !state.entries.contains_key(&e.filename)).map(move |e| (e, x.href_prefix))
    });
    for (entry, prefix) in own.chain(others) {
        // Entries are only admitted with a valid filename; skip defensively otherwise.
        let Ok(parsed) = entry.filename.parse::<DistFilename>() else {
            continue;
        };
        projects
            .entry(parsed.name().clone())
            .or_insert_with(|| Project { name: parsed.name().clone(), files: Vec::new() })
            .files
            .push((parsed.version().clone(), entry, prefix));
    }
    for p in projects.values_mut() {
        p.sort();
    }
    projects
}

impl Project<'_> {
    fn sort(&mut self) {
        self.files.sort_by(|(va, a, _), (vb, b, _)| va.cmp(vb).then_with(|| a.filename.cmp(&b.filename)));
    }
}

/// A release's index-level variant metadata (PEP 825): the file, and an entry describing it
/// for the pages that link it beside the release's wheels.
struct VariantsFile {
    name: PackageName,
    version: Version,
    entry: Entry,
    page: Page,
}

/// One [`VariantsFile`] per release with variant wheels, merged from their `variant.json` in
/// filename order (admission has checked that they agree; a release that does not merge is
/// left without one). Its upload time is its newest variant wheel's. The page's path is the
/// file's in `root` (its project's directory in a structured root).
fn variants_files(root: &RepoRoot, state: &RepoState) -> Vec<VariantsFile> {
    let mut out = Vec::new();
    for project in group(state, None).into_values() {
        let mut releases: BTreeMap<&Version, Vec<&Entry>> = BTreeMap::new();
        for (version, entry, _) in &project.files {
            if entry.variant.is_some() {
                releases.entry(version).or_default().push(entry);
            }
        }
        for (version, wheels) in releases {
            let Ok(Some(merged)) = crate::variant::merge_release(wheels.iter().filter_map(|e| e.variant.as_deref()))
            else {
                continue;
            };
            let body = merged.to_json();
            let filename = quarry_packaging::variants_json_name(&project.name, version);
            let entry = Entry {
                filename: filename.clone(),
                size: body.len() as u64,
                sha256: quarry_store::sha256_hex(&body),
                upload_time: wheels.iter().map(|e| e.upload_time.clone()).max().unwrap_or_default(),
                ..Entry::default()
            };
            let page = Page::new(root.file_path(&filename), body, Stage::Immutable, crate::variant::JSON);
            out.push(VariantsFile { name: project.name.clone(), version: version.clone(), entry, page });
        }
    }
    out
}

fn view<'a>(entry: &'a Entry, href_base: &str) -> FileView<'a> {
    FileView {
        href: format!("{href_base}{}", encode_segment(&entry.filename)),
        filename: &entry.filename,
        sha256: &entry.sha256,
        requires_python: entry.requires_python.as_deref(),
        core_metadata: entry.core_metadata_sha256.as_ref().map(|h| format!("sha256={h}")),
        yanked: entry.yanked.as_deref(),
        size: entry.size,
        upload_time: &entry.upload_time,
    }
}

fn render_html(t: &impl Template) -> Vec<u8> {
    let mut s = t.render().expect("templates render infallibly from owned strings");
    s.push('\n');
    s.into_bytes()
}

fn render_json(v: &impl Serialize) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).expect("index JSON serializes");
    out.push(b'\n');
    out
}

/// Which of a root's pages to render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// The simple root (`simple/index.html`, `simple/index.json`).
    pub simple_root: bool,
    /// The find-links `index.html` (a per-root option).
    pub find_links: bool,
}

impl Parts {
    /// Every page.
    pub const ALL: Self = Self { simple_root: true, find_links: true };
    /// Only the projects' own pages (and their releases' `-variants.json`).
    pub const PROJECTS: Self = Self { simple_root: false, find_links: false };
}

/// Render every page for `state` under `root`, in publish order: each variant release's
/// `{name}-{version}-variants.json` (linked beside its wheels), project pages, then the
/// simple root, then the find-links page.
pub fn render(root: &RepoRoot, state: &RepoState) -> Vec<Page> {
    render_parts(root, state, Parts::ALL, None)
}

/// [`render`], the pages also listing `extra`'s entries (and linking its variant releases'
/// `-variants.json`, which its own root publishes), linked across roots.
pub fn render_with_extra(root: &RepoRoot, state: &RepoState, extra: Option<Extra<'_>>) -> Vec<Page> {
    render_parts(root, state, Parts::ALL, extra)
}

/// [`render_with_extra`], only the pages `parts` names beside the projects' own.
pub fn render_parts(root: &RepoRoot, state: &RepoState, parts: Parts, extra: Option<Extra<'_>>) -> Vec<Page> {
    let paths = PagePaths::of(root);
    let variants = variants_files(root, state);
    let extra_variants = extra.map(|x| variants_files(root, x.state)).unwrap_or_default();
    let projects = with_variants(state, &variants, extra, &extra_variants);
    let mut pages = Vec::with_capacity(projects.len() * 2 + 3 + variants.len());
    pages.extend(variants.iter().map(|file| file.page.clone()));
    for project in projects.values() {
        pages.extend(project_pages(paths, project));
    }
    if parts.simple_root {
        let names: Vec<&str> = projects.keys().map(PackageName::as_str).collect();
        pages.extend(simple_root_pages(paths, &names));
    }
    if parts.find_links && paths.has_find_links() {
        pages.push(find_links_page(root, &projects));
    }
    pages
}

/// [`group`], each release's `-variants.json` beside its files (the root's own, then
/// `extra`'s, linked across roots).
fn with_variants<'a>(
    state: &'a RepoState,
    variants: &'a [VariantsFile],
    extra: Option<Extra<'a>>,
    extra_variants: &'a [VariantsFile],
) -> BTreeMap<PackageName, Project<'a>> {
    let mut projects = group(state, extra);
    let own = variants.iter().map(|f| (f, ""));
    let others = extra_variants.iter().map(|f| (f, extra.map_or("", |x| x.href_prefix)));
    for (file, prefix) in own.chain(others) {
        if let Some(project) = projects.get_mut(&file.name)
            && !project.files.iter().any(|(_, e, _)| e.filename == file.entry.filename)
        {
            project.files.push((file.version.clone(), &file.entry, prefix));
            project.sort();
        }
    }
    projects
}

/// A project's PEP 503 and PEP 691 pages.
fn project_pages(paths: PagePaths, project: &Project<'_>) -> [Page; 2] {
    let name = project.name.as_str();
    let base = paths.file_href_base();
    let files: Vec<FileView<'_>> =
        project.files.iter().map(|(_, e, prefix)| view(e, &format!("{base}{prefix}"))).collect();
    let html = Page::new(paths.project_html(name), render_html(&SimpleProjectPage { name, files }), Stage::Index, HTML);
    let mut versions: Vec<&Version> = project.files.iter().map(|(v, _, _)| v).collect();
    versions.dedup();
    let json = JsonProject {
        meta: Meta { api_version: API_VERSION },
        name,
        versions: versions.into_iter().map(ToString::to_string).collect(),
        files: project.files.iter().map(|(_, e, prefix)| json_file(e, &format!("{base}{prefix}"))).collect(),
    };
    [html, Page::new(paths.project_json(name), render_json(&json), Stage::Index, PEP691_JSON)]
}

fn json_file<'a>(e: &'a Entry, href_base: &str) -> JsonFile<'a> {
    JsonFile {
        filename: &e.filename,
        url: format!("{href_base}{}", encode_segment(&e.filename)),
        hashes: BTreeMap::from([("sha256", e.sha256.as_str())]),
        requires_python: e.requires_python.as_deref(),
        core_metadata: e.core_metadata_sha256.as_deref().map(|h| BTreeMap::from([("sha256", h)])),
        yanked: e
            .yanked
            .as_ref()
            .map(|r| if r.is_empty() { serde_json::Value::Bool(true) } else { serde_json::Value::String(r.clone()) }),
        size: e.size,
        upload_time: &e.upload_time,
        quarry_source_run: e.source.as_ref().map(|p| p.run.as_str()),
        quarry_source_platform: e.source.as_ref().map(|p| p.platform.as_str()),
        quarry_source_commit: e.source.as_ref().and_then(|p| p.commit.as_deref()),
    }
}

/// The simple root's HTML and JSON pages listing `names` (normalized, sorted), where `paths`
/// puts them.
pub fn simple_root_pages(paths: PagePaths, names: &[&str]) -> [Page; 2] {
    let html = Page::new(
        paths.root_html().into(),
        render_html(&SimpleRootPage { projects: names.to_vec() }),
        Stage::Pointer,
        HTML,
    );
    let json_root = JsonRoot {
        meta: Meta { api_version: API_VERSION },
        projects: names.iter().map(|name| JsonProjectName { name }).collect(),
    };
    [html, Page::new(paths.root_json().into(), render_json(&json_root), Stage::Pointer, PEP691_JSON)]
}

fn find_links_page(root: &RepoRoot, projects: &BTreeMap<PackageName, Project<'_>>) -> Page {
    let all: Vec<FileView<'_>> =
        projects.values().flat_map(|p| p.files.iter().map(|(_, e, prefix)| view(e, prefix))).collect();
    Page::new(FIND_LINKS.into(), render_html(&FindLinksPage { title: root.as_str(), files: all }), Stage::Pointer, HTML)
}

/// The project names a stored `simple/index.json` lists, if it is one this module rendered.
pub fn simple_root_names(json: &[u8]) -> Option<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Root {
        projects: Vec<Name>,
    }
    #[derive(serde::Deserialize)]
    struct Name {
        name: String,
    }
    let root: Root = serde_json::from_slice(json).ok()?;
    Some(root.projects.into_iter().map(|p| p.name).collect())
}

/// The file name a find-links row links, if `line` is a row.
fn row_filename(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("<a href=")?;
    let text = rest.strip_suffix("</a><br/>")?;
    let (_, name) = text.rsplit_once('>')?;
    (!name.contains('&')).then_some(name)
}

/// A stored find-links page (`current`, rendered by this module) with `project`'s rows
/// replaced by those of `state` (which holds `project`'s entries only): the page a full render
/// would give, without reading the other projects. `None` when `current` is not such a page.
pub fn splice_find_links(root: &RepoRoot, current: &str, project: &PackageName, state: &RepoState) -> Option<Page> {
    // Only a page of whole `\n`-ended lines (what `lines()` + join would give back), checked
    // without a copy of it: at 100,000 files the page is 46 MB.
    if !current.ends_with('\n') || current.contains("\r\n") {
        return None;
    }
    let variants = variants_files(root, state);
    let projects = with_variants(state, &variants, None, &[]);
    if projects.keys().any(|name| name != project) {
        return None;
    }
    let mine = find_links_page(root, &projects);
    let mine = std::str::from_utf8(&mine.body).ok()?;
    let empty = find_links_page(root, &BTreeMap::new());
    let empty = std::str::from_utf8(&empty.body).ok()?;
    // Header and footer: the lines of an empty page around its (absent) rows.
    let (head, foot) = split_rows(empty)?;
    let (cur_head, cur_foot) = split_rows(current)?;
    if cur_head.len() != head.len() || cur_foot.len() != foot.len() {
        return None;
    }
    let new_rows: Vec<&str> = mine.lines().filter(|l| row_filename(l).is_some()).collect();
    let mut out: Vec<&str> = head.clone();
    let mut placed = false;
    for line in &current.lines().collect::<Vec<_>>()[head.len()..current.lines().count() - foot.len()] {
        let other = file_project(row_filename(line)?)?;
        if other == *project {
            continue;
        }
        if !placed && other > *project {
            out.extend(&new_rows);
            placed = true;
        }
        out.push(line);
    }
    if !placed {
        out.extend(&new_rows);
    }
    out.extend(foot);
    let mut body = out.join("\n");
    body.push('\n');
    Some(Page::new(FIND_LINKS.into(), body.into_bytes(), Stage::Pointer, HTML))
}

/// The lines before the first row and after the last one of a find-links page.
fn split_rows(page: &str) -> Option<(Vec<&str>, Vec<&str>)> {
    let lines: Vec<&str> = page.lines().collect();
    let head = lines.iter().position(|l| l.trim_start().starts_with("<h1>"))? + 1;
    let foot = lines.iter().rposition(|l| l.trim() == "</body>")?;
    if foot < head || lines[head..foot].iter().any(|l| row_filename(l).is_none()) {
        return None;
    }
    Some((lines[..head].to_vec(), lines[foot..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(filename: &str, requires_python: Option<&str>, meta: bool, yanked: Option<&str>) -> Entry {
        Entry {
            filename: filename.into(),
            size: 1234,
            sha256: format!("{:064x}", filename.len()),
            upload_time: "2026-11-22T03:49:28.123456Z".into(),
            etag: "e".into(),
            requires_python: requires_python.map(Into::into),
            core_metadata_sha256: meta.then(|| "ab".repeat(32)),
            yanked: yanked.map(Into::into),
            ..crate::state::test_entry(filename)
        }
    }

    fn state() -> RepoState {
        let mut s = RepoState::empty();
        for e in [
            entry("Foo.Bar_baz-1.0-py3-none-any.whl", Some(">=3.8,<4"), true, None),
            entry("foo_bar_baz-1.10-py3-none-any.whl", Some(">=3.99"), true, None),
            entry("foo_bar_baz-1.2.tar.gz", None, false, Some("")),
            entry("torch-2.9.1+rocm7.10.0-cp312-cp312-linux_x86_64.whl", None, true, Some("bad <build> & \"oops\"")),
        ] {
            s.entries.insert(e.filename.clone(), e);
        }
        s
    }

    fn page<'a>(pages: &'a [Page], path: &str) -> &'a str {
        std::str::from_utf8(&pages.iter().find(|p| p.path == path).unwrap().body).unwrap()
    }

    #[test]
    fn snapshots() {
        let root = RepoRoot::new("12345-linux/python/", &Default::default()).unwrap();
        let pages = render(&root, &state());
        let paths: Vec<&str> = pages.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "simple/foo-bar-baz/index.html",
                "simple/foo-bar-baz/index.json",
                "simple/torch/index.html",
                "simple/torch/index.json",
                "simple/index.html",
                "simple/index.json",
                "index.html"
            ]
        );
        insta::assert_snapshot!("find_links", page(&pages, "index.html"));
        insta::assert_snapshot!("simple_root_html", page(&pages, "simple/index.html"));
        insta::assert_snapshot!("simple_root_json", page(&pages, "simple/index.json"));
        insta::assert_snapshot!("simple_project_html", page(&pages, "simple/foo-bar-baz/index.html"));
        insta::assert_snapshot!("simple_project_json", page(&pages, "simple/foo-bar-baz/index.json"));
        insta::assert_snapshot!("simple_project_torch_html", page(&pages, "simple/torch/index.html"));
        insta::assert_snapshot!("simple_project_torch_json", page(&pages, "simple/torch/index.json"));
    }

    #[test]
    fn variant_releases_link_their_variants_json() {
        let mut s = RepoState::empty();
        let base = "rocm_sdk_device-7.10.0-py3-none-linux_x86_64";
        for (label, arch) in [("gfx942", &["gfx942"][..]), ("gfx1100", &["gfx1100"]), ("null", &[])] {
            let mut e = entry(&format!("{base}-{label}.whl"), Some(">=3.10"), true, None);
            e.variant = Some(crate::variant::test_variant(label, arch));
            s.entries.insert(e.filename.clone(), e);
        }
        let plain = entry(&format!("{base}.whl"), Some(">=3.10"), true, None);
        s.entries.insert(plain.filename.clone(), plain);
        let root = RepoRoot::new("12345-linux/python/", &Default::default()).unwrap();
        let pages = render(&root, &s);
        let paths: Vec<&str> = pages.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths[0], "rocm_sdk_device-7.10.0-variants.json");
        assert_eq!(pages[0].stage, Stage::Immutable, "written before the pages that link it");
        insta::assert_snapshot!("variants_json", page(&pages, "rocm_sdk_device-7.10.0-variants.json"));
        insta::assert_snapshot!("variants_find_links", page(&pages, "index.html"));
        insta::assert_snapshot!("variants_project_html", page(&pages, "simple/rocm-sdk-device/index.html"));
        insta::assert_snapshot!("variants_project_json", page(&pages, "simple/rocm-sdk-device/index.json"));
    }

    #[test]
    fn empty_state_renders_empty_pages() {
        let root = RepoRoot::new("python/", &Default::default()).unwrap();
        let pages = render(&root, &RepoState::empty());
        assert_eq!(pages.len(), 3);
        insta::assert_snapshot!("empty_simple_root_json", page(&pages, "simple/index.json"));
    }

    #[test]
    fn promoted_files_carry_their_provenance_as_private_keys() {
        let mut s = RepoState::empty();
        let mut promoted = entry("demo-1.0-py3-none-any.whl", Some(">=3.9"), true, None);
        promoted.source = Some(crate::state::Provenance {
            run: "12345".into(),
            platform: "linux".into(),
            commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
        });
        let mut no_commit = entry("demo-1.1-py3-none-any.whl", None, false, None);
        no_commit.source =
            Some(crate::state::Provenance { run: "12346".into(), platform: "windows".into(), commit: None });
        for e in [promoted, no_commit, entry("demo-0.9.tar.gz", None, false, None)] {
            s.entries.insert(e.filename.clone(), e);
        }
        let pages = render(&RepoRoot::new("nightly/python/gfx94X-dcgpu/", &Default::default()).unwrap(), &s);
        insta::assert_snapshot!("promoted_project_json", page(&pages, "simple/demo/index.json"));
    }

    #[test]
    fn structured_roots_are_their_own_simple_index() {
        let mut s = state();
        let base = "rocm_sdk_device-7.10.0-py3-none-linux_x86_64";
        for (label, arch) in [("gfx942", &["gfx942"][..]), ("null", &[])] {
            let mut e = entry(&format!("{base}-{label}.whl"), Some(">=3.10"), true, None);
            e.variant = Some(crate::variant::test_variant(label, arch));
            s.entries.insert(e.filename.clone(), e);
        }
        let root = RepoRoot::structured("v5/rocm/core/whl-next/").unwrap();
        let pages = render(&root, &s);
        let paths: Vec<&str> = pages.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "rocm-sdk-device/rocm_sdk_device-7.10.0-variants.json",
                "foo-bar-baz/index.html",
                "foo-bar-baz/index.json",
                "rocm-sdk-device/index.html",
                "rocm-sdk-device/index.json",
                "torch/index.html",
                "torch/index.json",
                "index.html",
                "index.json"
            ],
            "no simple/ directory and no find-links page"
        );
        insta::assert_snapshot!("structured_root_html", page(&pages, "index.html"));
        insta::assert_snapshot!("structured_root_json", page(&pages, "index.json"));
        insta::assert_snapshot!("structured_project_html", page(&pages, "foo-bar-baz/index.html"));
        insta::assert_snapshot!("structured_project_json", page(&pages, "foo-bar-baz/index.json"));
        insta::assert_snapshot!("structured_variants_project_html", page(&pages, "rocm-sdk-device/index.html"));
        // The flat root's pages, moved: the same bytes but for the hrefs.
        let flat = render(&RepoRoot::new("1-linux/python/", &Default::default()).unwrap(), &s);
        let moved = page(&flat, "simple/foo-bar-baz/index.html").replace("../../", "");
        assert_eq!(moved, page(&pages, "foo-bar-baz/index.html"));
        assert_eq!(page(&flat, "simple/index.html"), page(&pages, "index.html"));
    }

    #[test]
    fn rendering_is_deterministic() {
        let root = RepoRoot::new("python/", &Default::default()).unwrap();
        assert_eq!(render(&root, &state()), render(&root, &state()));
    }

    #[test]
    fn a_view_lists_another_roots_files_linked_across_roots() {
        let mut own = RepoState::empty();
        let mut generic = RepoState::empty();
        for (in_generic, name) in [
            (false, "rocm_sdk_libraries_gfx94X_dcgpu-7.0.0-py3-none-linux_x86_64.whl"),
            (true, "rocm_sdk_core-7.0.0-py3-none-linux_x86_64.whl"),
            (true, "rocm_sdk_core-7.0.0.tar.gz"),
            // Held by both: the view's own file is listed, once.
            (false, "rocm_sdk_core-6.0.0-py3-none-linux_x86_64.whl"),
            (true, "rocm_sdk_core-6.0.0-py3-none-linux_x86_64.whl"),
        ] {
            let mut e = entry(name, Some(">=3.10"), name.ends_with(".whl"), None);
            let state = if in_generic { &mut generic } else { &mut own };
            if in_generic {
                e.sha256 = "9".repeat(64);
            }
            state.entries.insert(e.filename.clone(), e);
        }
        let root = RepoRoot::with_kind("v2/gfx94X-dcgpu/", crate::state::root::RepoKind::Pip).unwrap();
        let pages = render_with_extra(&root, &own, Some(Extra { state: &generic, href_prefix: "../generic/" }));
        let paths: Vec<&str> = pages.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.contains(&"simple/rocm-sdk-core/index.json"), "{paths:?}");
        insta::assert_snapshot!("view_find_links", page(&pages, "index.html"));
        insta::assert_snapshot!("view_simple_root_html", page(&pages, "simple/index.html"));
        insta::assert_snapshot!("view_project_html", page(&pages, "simple/rocm-sdk-core/index.html"));
        insta::assert_snapshot!("view_project_json", page(&pages, "simple/rocm-sdk-core/index.json"));
        assert_eq!(render_with_extra(&root, &own, None), render(&root, &own));
    }
}
