//! Audit a published root from the outside, as a client sees it: every link on every page
//! (the find-links page, the simple pages in HTML and PEP 691 JSON, and project pages no simple
//! index links any more, which pip may still read) resolves, every advertised `.metadata`
//! exists, hashes agree with the committed state, and every distribution file in the listing
//! is on the pages (or was refused, with a reason; or is marked for pruning). A missing object
//! a page names is a dangling link ([`CheckReport::dangling`]). `quarry index --check` runs it;
//! the race and fault suites assert it comes back clean. apt and dnf roots are audited from
//! their entry points down (`native`); run listings by [`check_listing`]. A structured root
//! is read where its pages lie (`index.*`, `{project}/index.*`, links beside them).

use std::collections::{BTreeMap, BTreeSet};

use quarry_layout::config::Layout;
use quarry_packaging::DistFilename;
use quarry_store::{Store, StoreError, StoreExt};

mod native;
mod report;

pub use report::CheckReport;
use report::{MISSING_FILE, MISSING_LINKED, MISSING_METADATA, committed_state, unescape};

use crate::render::pip::PagePaths;
use crate::state::RepoState;
use crate::state::root::RepoRoot;
use crate::{LEAVING_SUFFIX, METADATA_SUFFIX, YANK_SUFFIX};

/// Largest page read.
const MAX_PAGE: u64 = 256 * 1024 * 1024;

/// One `<a>` of a page: its decoded href (without fragment), the `sha256=` fragment, and
/// whether it advertises core metadata.
#[derive(Debug, PartialEq, Eq)]
struct Anchor {
    href: String,
    sha256: Option<String>,
    core_metadata: bool,
}

/// The anchors of an HTML page Quarry (or any PEP 503 producer quoting its attributes) wrote.
fn anchors(html: &str) -> Vec<Anchor> {
    let mut out = Vec::new();
    for tag in html.split("<a ").skip(1) {
        let tag = tag.split('>').next().unwrap_or("");
        let attr = |name: &str| {
            let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
            let end = tag[start..].find('"')? + start;
            Some(unescape(&tag[start..end]))
        };
        let Some(href) = attr("href") else { continue };
        let (path, fragment) = href.split_once('#').unwrap_or((&href, ""));
        let path = percent_encoding::percent_decode_str(path).decode_utf8_lossy().into_owned();
        out.push(Anchor {
            href: path,
            sha256: fragment.strip_prefix("sha256=").map(str::to_owned),
            core_metadata: attr("data-core-metadata").is_some() || attr("data-dist-info-metadata").is_some(),
        });
    }
    out
}

/// Audit `root` on `store`.
pub async fn check(store: &dyn Store, root: &RepoRoot, layout: &Layout) -> Result<CheckReport, StoreError> {
    let mut report = CheckReport { root: root.to_string(), ..CheckReport::default() };
    if root.kind() != crate::state::root::RepoKind::Pip {
        native::check_native(store, root, &mut report).await?;
        return Ok(report);
    }
    let structured = root.is_structured();
    let listing = store.list_all(root.as_str(), !structured).await?;
    let present: BTreeSet<String> =
        listing.objects.iter().map(|o| o.key.as_str()[root.as_str().len()..].to_owned()).collect();
    // A file `quarry prune` marked is on its way out: indexed as gone, not expected on a page.
    let marked = |n: &String| present.contains(&format!("{n}{LEAVING_SUFFIX}"));
    // By file name (a structured root's files in their project's directory; one elsewhere is
    // refused under its path).
    let files: BTreeSet<String> = present
        .iter()
        .filter(|n| DistFilename::has_dist_extension(n) && !n.ends_with(METADATA_SUFFIX) && !n.ends_with(YANK_SUFFIX))
        .filter(|n| !marked(n) && n.matches('/').count() <= usize::from(structured))
        .map(|n| match root.file_name_of(n) {
            Some(name) => name.to_owned(),
            // Refused under its key (`RootListing`).
            None if structured => format!("{root}{n}"),
            None => n.clone(),
        })
        .collect();
    report.files = files.len();

    let Some(state) = committed_state(store, root, files.len(), &mut report).await? else {
        return Ok(report);
    };
    // A per-family view's links into its generic root are checked there.
    let view = crate::reindex::view::source_for(store, layout, root).await?;
    let ctx = Ctx { store, root, present: &present, state: &state, view: view.as_ref() };
    // A root whose find-links page is off (`find_links = false`) has none to check.
    let find_links =
        match PagePaths::of(root).has_find_links() && state.outputs.contains_key(&format!("{root}index.html")) {
            true => Some(check_find_links(&ctx, &mut report).await?),
            false => None,
        };
    let html = check_simple_pages(&ctx, false, &mut report).await?;
    check_unlinked_projects(&ctx, &html, &mut report).await?;
    // (`pages` counts the HTML pages.)
    let html_pages = report.pages;
    let json = check_simple_pages(&ctx, true, &mut report).await?;
    report.pages = html_pages;
    check_coverage(&state, &files, &Linked { find_links, html, json }, &mut report);
    Ok(report)
}

/// The files each kind of page links to: the find-links page's (when it has one), and per
/// project its HTML and its JSON page's.
struct Linked {
    find_links: Option<BTreeSet<String>>,
    html: BTreeMap<String, BTreeSet<String>>,
    json: BTreeMap<String, BTreeSet<String>>,
}

/// The find-links page: every link resolves. Returns the files it links to.
async fn check_find_links(ctx: &Ctx<'_>, report: &mut CheckReport) -> Result<BTreeSet<String>, StoreError> {
    let page = read_page(ctx.store, ctx.root, "index.html", None, report).await?;
    let mut linked = BTreeSet::new();
    for a in anchors(&page) {
        check_file_link(ctx, &a, &a.href, "index.html", report).await?;
        linked.insert(a.href.clone());
    }
    Ok(linked)
}

/// The simple index and each project page it links to, as pip reads them (HTML) or as uv and
/// pip negotiating JSON read them (PEP 691, `json`): every link resolves. Returns the files
/// each project's page links to.
async fn check_simple_pages(
    ctx: &Ctx<'_>,
    json: bool,
    report: &mut CheckReport,
) -> Result<BTreeMap<String, BTreeSet<String>>, StoreError> {
    let paths = PagePaths::of(ctx.root);
    let index = if json { paths.root_json() } else { paths.root_html() };
    let text = read_page(ctx.store, ctx.root, index, None, report).await?;
    let projects: Vec<String> = if json {
        json_project_names(&text, index, report)
    } else {
        let mut projects = Vec::new();
        for a in anchors(&text) {
            match a.href.strip_suffix('/') {
                Some(project) => projects.push(project.to_owned()),
                None => report.problems.push(format!("{index}: link {:?} is not a project directory", a.href)),
            }
        }
        projects
    };
    let mut linked_by_project: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for project in projects {
        let page_path = if json { paths.project_json(&project) } else { paths.project_html(&project) };
        let page = read_page(ctx.store, ctx.root, &page_path, Some(index), report).await?;
        let links = if json { json_file_links(&page, &page_path, report) } else { anchors(&page) };
        let linked = linked_by_project.entry(project).or_default();
        for a in links {
            let Some(file) = own_file(paths, &a.href) else {
                let what = if json { "url" } else { "link" };
                report.problems.push(format!("{page_path}: {what} {:?} leaves the root's files", a.href));
                continue;
            };
            check_file_link(ctx, &a, file, &page_path, report).await?;
            linked.insert(file.to_owned());
        }
    }
    Ok(linked_by_project)
}

/// pip reads `simple/{project}/` without the simple index: a project page no longer linked
/// from it (its project just removed, its deletion pending or failed) must not dangle either.
async fn check_unlinked_projects(
    ctx: &Ctx<'_>,
    linked: &BTreeMap<String, BTreeSet<String>>,
    report: &mut CheckReport,
) -> Result<(), StoreError> {
    let (store, root, present) = (ctx.store, ctx.root, ctx.present);
    let paths = PagePaths::of(root);
    let pages_dir = if root.is_structured() { root.to_string() } else { format!("{root}simple/") };
    let listed_dirs = store.list_all(&pages_dir, true).await?.common_prefixes;
    for dir in listed_dirs {
        let Some(project) = dir.strip_prefix(&pages_dir).map(|d| d.trim_end_matches('/')) else {
            continue;
        };
        if linked.contains_key(project) || project.starts_with('.') {
            continue;
        }
        for (page_path, json) in [(paths.project_html(project), false), (paths.project_json(project), true)] {
            let text = match store.get_bytes(&root.key(&page_path)?, MAX_PAGE).await {
                Ok((_, bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e),
            };
            let links = if json { json_file_links(&text, &page_path, report) } else { anchors(&text) };
            for a in links {
                // A view's link into its generic root is checked there.
                let Some(file) = own_file(paths, &a.href).filter(|f| !f.starts_with("../")) else { continue };
                let file = &root.file_path(file);
                if !exists(store, root, present, file).await? {
                    report.problems.push(format!("{page_path} (on no simple index) {MISSING_FILE} {file}"));
                }
                if a.core_metadata && !exists(store, root, present, &format!("{file}{METADATA_SUFFIX}")).await? {
                    report
                        .problems
                        .push(format!("{page_path} (on no simple index) {MISSING_METADATA} {file}{METADATA_SUFFIX}"));
                }
            }
        }
    }
    Ok(())
}

/// The file a project page's link names in the root, by name (a view's `../../../generic/x`
/// keeps its `../`): none when it leaves the root's files.
fn own_file(paths: PagePaths, href: &str) -> Option<&str> {
    let file = href.strip_prefix(paths.file_href_base())?;
    (paths.has_find_links() || !file.contains('/')).then_some(file)
}

/// Coverage: every file in the listing is on the pages, or was refused with a reason.
fn check_coverage(state: &RepoState, files: &BTreeSet<String>, linked: &Linked, report: &mut CheckReport) {
    for file in files {
        if state.rejected.contains_key(file.as_str()) {
            continue;
        }
        if !state.entries.contains_key(file.as_str()) {
            report.problems.push(format!("{file} is in the listing but not in the committed state"));
            continue;
        }
        if linked.find_links.as_ref().is_some_and(|on| !on.contains(file.as_str())) {
            report.problems.push(format!("{file} is missing from index.html"));
        }
        let project = file.parse::<DistFilename>().ok().map(|d| d.name().as_str().to_owned());
        let on = |pages: &BTreeMap<String, BTreeSet<String>>| {
            project.as_ref().and_then(|p| pages.get(p)).is_some_and(|l| l.contains(file.as_str()))
        };
        if !on(&linked.html) {
            report.problems.push(format!("{file} is missing from its simple project page"));
        }
        if !on(&linked.json) {
            report.problems.push(format!("{file} is missing from its JSON project page"));
        }
    }
}

/// A page of the root, counted; missing, it is reported: on its own, or (`from`: the page
/// linking to it) as a dangling link.
async fn read_page(
    store: &dyn Store,
    root: &RepoRoot,
    path: &str,
    from: Option<&str>,
    report: &mut CheckReport,
) -> Result<String, StoreError> {
    let key = root.key(path)?;
    match store.get_bytes(&key, MAX_PAGE).await {
        Ok((_, bytes)) => {
            report.pages += 1;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        }
        Err(e) if e.is_not_found() => {
            match from {
                Some(from) => report.problems.push(format!("{path} is missing and {from}{MISSING_LINKED}")),
                None => report.problems.push(format!("{path} is missing")),
            }
            Ok(String::new())
        }
        Err(e) => Err(e),
    }
}

/// The project names of a PEP 691 root page (nothing when the page is empty: missing).
fn json_project_names(text: &str, page: &str, report: &mut CheckReport) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text) else {
        report.problems.push(format!("{page} is not JSON"));
        return Vec::new();
    };
    let names = json["projects"].as_array().map(Vec::as_slice).unwrap_or_default();
    names.iter().filter_map(|p| p["name"].as_str()).map(str::to_owned).collect()
}

/// The files of a PEP 691 project page as anchors: the url (decoded), its sha256, whether it
/// advertises core metadata.
fn json_file_links(text: &str, page: &str, report: &mut CheckReport) -> Vec<Anchor> {
    if text.is_empty() {
        return Vec::new();
    }
    let Ok(json) = serde_json::from_str::<serde_json::Value>(text) else {
        report.problems.push(format!("{page} is not JSON"));
        return Vec::new();
    };
    let files = json["files"].as_array().map(Vec::as_slice).unwrap_or_default();
    files
        .iter()
        .filter_map(|f| {
            let url = f["url"].as_str()?;
            let path = url.split_once('#').map_or(url, |(p, _)| p);
            let advertised = |v: &serde_json::Value| v.is_object() || v.as_bool() == Some(true);
            Some(Anchor {
                href: percent_encoding::percent_decode_str(path).decode_utf8_lossy().into_owned(),
                sha256: f["hashes"]["sha256"].as_str().map(str::to_owned),
                core_metadata: advertised(&f["core-metadata"]) || advertised(&f["dist-info-metadata"]),
            })
        })
        .collect()
}

/// Whether `name` exists in the root: in the listing, or (created since) by a HEAD.
async fn exists(
    store: &dyn Store,
    root: &RepoRoot,
    present: &BTreeSet<String>,
    name: &str,
) -> Result<bool, StoreError> {
    if present.contains(name) {
        return Ok(true);
    }
    match store.head(&root.key(name)?).await {
        Ok(_) => Ok(true),
        Err(e) if e.is_not_found() => Ok(false),
        Err(e) => Err(e),
    }
}

struct Ctx<'a> {
    store: &'a dyn Store,
    root: &'a RepoRoot,
    present: &'a BTreeSet<String>,
    state: &'a RepoState,
    view: Option<&'a crate::reindex::view::ViewSource>,
}

async fn check_file_link(
    ctx: &Ctx<'_>,
    a: &Anchor,
    file: &str,
    page: &str,
    report: &mut CheckReport,
) -> Result<(), StoreError> {
    let Ctx { store, root, present, state, view } = *ctx;
    let across = view.and_then(|v| Some((v, file.strip_prefix(v.href_prefix.as_str())?)));
    let none = BTreeSet::new();
    let (root, present, state, file) = match across {
        Some((v, file)) => (&v.root, &none, &v.state, file),
        None => (root, present, state, file),
    };
    let path = root.file_path(file);
    if !exists(store, root, present, &path).await? {
        report.problems.push(format!("{page} {MISSING_FILE} {path}"));
    }
    if a.core_metadata && !exists(store, root, present, &format!("{path}{METADATA_SUFFIX}")).await? {
        report.problems.push(format!("{page} {MISSING_METADATA} {path}{METADATA_SUFFIX}"));
    }
    match (state.entries.get(file), &a.sha256) {
        (Some(entry), Some(sha)) if &entry.sha256 != sha => {
            report.problems.push(format!("{page} gives {file} sha256 {sha}, the state {}", entry.sha256));
        }
        // An output the state published beside the files (a release's variants.json).
        (None, Some(sha)) if state.outputs.get(&format!("{root}{path}")) == Some(sha) => {}
        (None, _) => report.problems.push(format!("{page} links to {file}, which the state does not hold")),
        _ => {}
    }
    Ok(())
}

/// Audit a run's artifact listing (`{run}-{platform}/index.html` and the listings below it) as a
/// browser or a script following it sees it: every row's link resolves (a file, or a
/// subdirectory's page), and a row's SHA256 is the one the store recorded for the file, where
/// the store recorded one. A directory without a listing page names nothing: no problem.
pub async fn check_listing(store: &dyn Store, dir: &crate::ListingDir) -> Result<CheckReport, StoreError> {
    let mut report = CheckReport { root: dir.to_string(), ..CheckReport::default() };
    let page = crate::render::listing::LISTING_PAGE;
    let text = match store.get_bytes(&quarry_store::Key::join(dir.as_str(), page)?, MAX_PAGE).await {
        Ok((_, bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.is_not_found() => return Ok(report),
        Err(e) => return Err(e),
    };
    report.pages = 1;
    let listing = store.list_all(dir.as_str(), true).await?;
    let objects: BTreeMap<&str, &quarry_store::ObjectMeta> =
        listing.objects.iter().map(|o| (o.key.filename(), o)).collect();
    for row in text.split("<tr><td>").skip(1) {
        let Some(a) = anchors(row).into_iter().next() else { continue };
        let given = row.split("<td class=\"sha\">").nth(1).and_then(|r| r.split('<').next()).filter(|s| s.len() == 64);
        let key = match quarry_store::Key::join(dir.as_str(), &a.href) {
            Ok(key) => key,
            Err(_) => {
                report.problems.push(format!("{page}: row link {:?} is not a key", a.href));
                continue;
            }
        };
        report.files += 1;
        let recorded = match objects.get(a.href.as_str()) {
            Some(object) => object.sha256.clone(),
            None => match store.head(&key).await {
                Ok(meta) => meta.sha256,
                Err(e) if e.is_not_found() => {
                    report.problems.push(format!("{page} {MISSING_FILE} {}", a.href));
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        if let (Some(given), Some(recorded)) = (given, recorded)
            && given != recorded
        {
            report.problems.push(format!("{page} gives {} sha256 {given}, the store {recorded}", a.href));
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_decoded() {
        let html = r#"<a href="../../a%2Bb-1.0-py3-none-any.whl#sha256=ab" data-core-metadata="sha256=cd">x</a><br/>
            <a href="p/">p</a>"#;
        assert_eq!(
            anchors(html),
            [
                Anchor {
                    href: "../../a+b-1.0-py3-none-any.whl".into(),
                    sha256: Some("ab".into()),
                    core_metadata: true
                },
                Anchor { href: "p/".into(), sha256: None, core_metadata: false },
            ]
        );
    }
}
