//! A reader that walks published indexes over HTTP the way their clients do and follows every
//! link, for the reader-consistency suite: pip's find-links page, the PEP 503/691 simple pages
//! (HTML and JSON) and their PEP 658 `.metadata`; apt's `InRelease`/`Release` → each index's
//! `by-hash/` copy (and its canonical path) → every `Filename:` in it; dnf's `repomd.xml` → each
//! repodata document → every `<location>` of `primary`; a run's artifact listing → every row.
//!
//! A link is broken when it answers anything but 200, or answers bytes whose sha256 is not the
//! one the page gives. Whether a broken link is the index's fault or the reader's own race
//! depends on what the writers do ([`Mode`]): while files are only added, a page that names a
//! missing file was wrong when it was read (nothing named ever goes away); while files are
//! removed, it is wrong only if the page still has the same bytes after the link failed
//! (the page named the file over the whole time the file was missing). A race is counted,
//! never reported.
//!
//! apt's canonical `Packages` paths are only required to exist: apt reads `by-hash/` when the
//! Release says `Acquire-By-Hash: yes`, and a canonical path necessarily disagrees with the
//! Release for a moment whenever both change (the reason by-hash exists).

use std::collections::{BTreeSet, HashSet};
use std::io::Read;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use reqwest::Url;

use crate::sha256_hex;

/// What the writers do while the reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Files are only added (uploads, promotion): a link a page names must answer.
    Growing,
    /// Files and pages are removed (prune, gc): a failed link counts only if the page that
    /// named it is unchanged after the failure.
    Shrinking,
}

/// The roots to read, as prefixes (ending in `/`) relative to the reader's base URL.
#[derive(Debug, Clone, Default)]
pub struct Site {
    pub pip: Vec<String>,
    pub apt: Vec<String>,
    pub dnf: Vec<String>,
    /// Directories with an artifact listing (`{run}-{platform}/`).
    pub listings: Vec<String>,
}

/// What the reader saw.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub sweeps: usize,
    /// Pages read (each entry point and every page a link led to).
    pub pages: usize,
    /// Links followed (answers checked).
    pub links: usize,
    /// Failed links whose page had moved on: the reader's own race.
    pub raced: usize,
    /// Broken links the index is to blame for, one line each (deduplicated).
    pub violations: Vec<String>,
    /// Distinct files (by URL) a page named that answered correctly.
    pub files_seen: usize,
}

impl Tally {
    fn absorb(&mut self, other: Tally) {
        self.sweeps += other.sweeps;
        self.pages += other.pages;
        self.links += other.links;
        self.raced += other.raced;
        for v in other.violations {
            if !self.violations.contains(&v) {
                self.violations.push(v);
            }
        }
        self.files_seen = self.files_seen.max(other.files_seen);
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} sweeps, {} pages, {} links followed, {} files, {} reader races, {} broken links",
            self.sweeps,
            self.pages,
            self.links,
            self.files_seen,
            self.raced,
            self.violations.len()
        )?;
        for v in self.violations.iter().take(20) {
            write!(f, "\n  {v}")?;
        }
        Ok(())
    }
}

/// A page as read: its URL and bytes.
struct Page {
    url: Url,
    body: Bytes,
}

/// A link to follow: where, what it is, the sha256 the page gives (if any).
struct Link {
    url: Url,
    what: &'static str,
    sha256: Option<String>,
}

/// The reader (see the module docs).
pub struct Reader {
    client: reqwest::Client,
    base: Url,
    mode: Mode,
    /// Growing mode only: `url#sha256` answers already checked (nothing goes away, so a file
    /// that answered once still does).
    good: Mutex<HashSet<String>>,
    /// Every URL that answered correctly.
    seen: Mutex<BTreeSet<String>>,
}

/// Links followed at once from one page.
const FOLLOW_CONCURRENCY: usize = 8;

impl Reader {
    /// A reader of the store published at `base` (ending in `/`).
    pub fn new(base: &str, mode: Mode) -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(4))
            .timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(0)
            .build()
            .expect("client");
        Self {
            client,
            base: Url::parse(base).expect("base URL"),
            mode,
            good: Mutex::new(HashSet::new()),
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    /// Sweep `site` again and again until `stop` is set, then once more; everything found.
    pub async fn watch(&self, site: &Site, stop: &AtomicBool) -> Tally {
        let mut total = Tally::default();
        loop {
            let last = stop.load(Ordering::Acquire);
            total.absorb(self.sweep(site).await);
            if last {
                return total;
            }
        }
    }

    /// Read every page of `site` once, following every link.
    pub async fn sweep(&self, site: &Site) -> Tally {
        let mut t = Tally { sweeps: 1, ..Tally::default() };
        for root in &site.pip {
            self.pip(&mut t, root).await;
        }
        for root in &site.apt {
            self.apt(&mut t, root).await;
        }
        for root in &site.dnf {
            self.dnf(&mut t, root).await;
        }
        for dir in &site.listings {
            self.listing(&mut t, dir).await;
        }
        t.files_seen = self.seen.lock().unwrap().len();
        t
    }

    /// GET `url`: (status, body). Transport errors and 5xx answers are retried a few times
    /// (a busy server is not a broken index); one that persists fails the test.
    async fn get(&self, url: &Url) -> (u16, Bytes) {
        let mut last = String::new();
        for attempt in 0..6 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
            }
            match self.client.get(url.clone()).send().await {
                Ok(r) if r.status().is_server_error() || r.status().as_u16() == 429 => {
                    last = format!("{}", r.status());
                }
                Ok(r) => {
                    let status = r.status().as_u16();
                    match r.bytes().await {
                        Ok(body) => return (status, body),
                        Err(e) => last = format!("reading the body: {e}"),
                    }
                }
                Err(e) => last = format!("{e}"),
            }
        }
        panic!("GET {url}: {last} (after retries)")
    }

    /// An entry point: `None` when it is not there (not published yet, or gone).
    async fn entry(&self, t: &mut Tally, path: &str) -> Option<Page> {
        let url = self.base.join(path).expect("entry URL");
        let (status, body) = self.get(&url).await;
        match status {
            200 => {
                t.pages += 1;
                Some(Page { url, body })
            }
            403 | 404 => None,
            other => panic!("GET {url}: unexpected {other}"),
        }
    }

    /// Follow `links` from `page` concurrently; each answer (`None` when broken) in order.
    async fn follow(&self, t: &mut Tally, page: &Page, links: Vec<Link>) -> Vec<Option<Bytes>> {
        let answers: Vec<(Link, Result<Bytes, String>, bool)> = futures_util::stream::iter(links)
            .map(|link| async move {
                let key = format!("{}#{}", link.url, link.sha256.as_deref().unwrap_or(""));
                let cached = self.mode == Mode::Growing && self.good.lock().unwrap().contains(&key);
                if cached {
                    return (link, Ok(Bytes::new()), true);
                }
                let (status, body) = self.get(&link.url).await;
                let result = match (status, &link.sha256) {
                    (200, Some(sha)) if sha256_hex(&body) != sha.to_ascii_lowercase() => {
                        Err(format!("answers bytes with sha256 {}, the page gives {sha}", sha256_hex(&body)))
                    }
                    (200, _) => Ok(body),
                    (status, _) => Err(format!("answers {status}")),
                };
                if result.is_ok() {
                    if self.mode == Mode::Growing {
                        self.good.lock().unwrap().insert(key);
                    }
                    self.seen.lock().unwrap().insert(link.url.to_string());
                }
                (link, result, false)
            })
            .buffered(FOLLOW_CONCURRENCY)
            .collect()
            .await;
        let mut out = Vec::with_capacity(answers.len());
        let mut again: Option<Option<Bytes>> = None;
        for (link, result, cached) in answers {
            t.links += usize::from(!cached);
            match result {
                Ok(body) => out.push(Some(body).filter(|_| !cached)),
                Err(problem) => {
                    // Read the page again (once per page) to tell a broken index from a race.
                    if again.is_none() {
                        let (status, body) = self.get(&page.url).await;
                        again = Some((status == 200).then_some(body));
                    }
                    let unchanged = again.as_ref().and_then(Option::as_ref) == Some(&page.body);
                    if self.mode == Mode::Growing || unchanged {
                        let since =
                            if unchanged { "the page is unchanged since" } else { "the page has changed since" };
                        let line = format!("{} names {} {}: it {problem} ({since})", page.url, link.what, link.url);
                        if !t.violations.contains(&line) {
                            t.violations.push(line);
                        }
                    } else {
                        t.raced += 1;
                    }
                    out.push(None);
                }
            }
        }
        out
    }

    // ---- pip ----

    async fn pip(&self, t: &mut Tally, root: &str) {
        if let Some(page) = self.entry(t, &format!("{root}index.html")).await {
            let links = pip_html_links(&page);
            self.follow(t, &page, links).await;
        }
        if let Some(page) = self.entry(t, &format!("{root}simple/index.html")).await {
            let text = String::from_utf8_lossy(&page.body).into_owned();
            for a in anchors(&text) {
                let Ok(url) = page.url.join(&format!("{}index.html", a.href)) else { continue };
                if let Some(project) = self.project_page(t, &page, url).await {
                    let links = pip_html_links(&project);
                    self.follow(t, &project, links).await;
                }
            }
        }
        if let Some(page) = self.entry(t, &format!("{root}simple/index.json")).await {
            let json: serde_json::Value = serde_json::from_slice(&page.body).expect("simple/index.json is JSON");
            let names: Vec<String> = json["projects"]
                .as_array()
                .map(|p| p.iter().filter_map(|p| p["name"].as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            for name in names {
                let Ok(url) = page.url.join(&format!("{name}/index.json")) else { continue };
                if let Some(project) = self.project_page(t, &page, url).await {
                    let links = pip_json_links(&project);
                    self.follow(t, &project, links).await;
                }
            }
        }
    }

    /// A project page is never cached: it changes.
    async fn project_page(&self, t: &mut Tally, from: &Page, url: Url) -> Option<Page> {
        let (status, body) = self.get(&url).await;
        if status == 200 {
            t.pages += 1;
            t.links += 1;
            return Some(Page { url, body });
        }
        // Broken (or a race): judged like any link.
        self.follow(t, from, vec![Link { url, what: "project page", sha256: None }]).await;
        None
    }

    // ---- apt ----

    async fn apt(&self, t: &mut Tally, root: &str) {
        for entry in ["InRelease", "Release"] {
            let Some(page) = self.entry(t, &format!("{root}dists/stable/{entry}")).await else { continue };
            let text = String::from_utf8_lossy(&page.body).into_owned();
            let sums = release_sha256(&text);
            // Each index by hash (strict), then by its canonical path (it must exist).
            let by_hash: Vec<Link> = sums
                .iter()
                .map(|(sha, _, path)| {
                    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
                    let url = page.url.join(&format!("{dir}/by-hash/SHA256/{sha}")).expect("by-hash URL");
                    Link { url, what: "by-hash index", sha256: Some(sha.clone()) }
                })
                .collect();
            let bodies = self.follow(t, &page, by_hash).await;
            let canonical: Vec<Link> = sums
                .iter()
                .map(|(_, _, path)| Link { url: page.url.join(path).expect("index URL"), what: "index", sha256: None })
                .collect();
            self.follow(t, &page, canonical).await;
            // The Packages indices of one Release, decompressed, name the same pool files.
            let mut texts: Vec<(String, String)> = Vec::new();
            for ((sha, _, path), body) in sums.iter().zip(bodies) {
                let Some(body) = body else { continue };
                let Some(text) = decompress(path, &body) else { continue };
                texts.push((format!("{path} ({sha})"), text));
            }
            if let Some((first, reference)) = texts.first() {
                for (other, text) in &texts[1..] {
                    if text != reference {
                        t.violations.push(format!("{}: {other} is not {first} decompressed", page.url));
                    }
                }
                let root_url = self.base.join(root).expect("root URL");
                let pool: Vec<Link> = packages_files(reference)
                    .into_iter()
                    .map(|(file, sha)| Link {
                        url: root_url.join(&file).expect("pool URL"),
                        what: "package",
                        sha256: sha,
                    })
                    .collect();
                // A by-hash index never changes: the Release naming it is the page to read again.
                let pool_page = Page { url: page.url.clone(), body: page.body.clone() };
                self.follow(t, &pool_page, pool).await;
            }
        }
    }

    // ---- dnf ----

    async fn dnf(&self, t: &mut Tally, root: &str) {
        let Some(page) = self.entry(t, &format!("{root}repodata/repomd.xml")).await else { return };
        let text = String::from_utf8_lossy(&page.body).into_owned();
        let root_url = self.base.join(root).expect("root URL");
        let mut primary = None;
        let mut links = Vec::new();
        for data in text.split("<data ").skip(1) {
            let kind = attribute(&format!("<data {data}"), "data", "type").unwrap_or_default();
            let Some(href) = attribute(data, "location", "href") else {
                t.violations.push(format!("{}: {kind} has no location", page.url));
                continue;
            };
            let sha =
                data.split("<checksum type=\"sha256\">").nth(1).and_then(|r| r.split('<').next()).map(str::to_owned);
            if kind == "primary" {
                primary = Some(links.len());
            }
            links.push(Link {
                url: root_url.join(&href).expect("repodata URL"),
                what: "repodata document",
                sha256: sha,
            });
        }
        let bodies = self.follow(t, &page, links).await;
        let Some(Some(body)) = primary.and_then(|i| bodies.into_iter().nth(i)) else { return };
        let mut xml = String::new();
        if flate2::read::MultiGzDecoder::new(&body[..]).read_to_string(&mut xml).is_err() {
            t.violations.push(format!("{}: primary is not gzipped XML", page.url));
            return;
        }
        let packages: Vec<Link> = xml
            .split("<package ")
            .skip(1)
            .filter_map(|p| {
                let href = attribute(p, "location", "href")?;
                let sha = p.split("pkgid=\"YES\">").nth(1).and_then(|r| r.split('<').next()).map(str::to_owned);
                Some(Link { url: root_url.join(&href).ok()?, what: "package", sha256: sha })
            })
            .collect();
        self.follow(t, &page, packages).await;
    }

    // ---- run listings ----

    async fn listing(&self, t: &mut Tally, dir: &str) {
        let Some(page) = self.entry(t, &format!("{dir}index.html")).await else { return };
        let text = String::from_utf8_lossy(&page.body).into_owned();
        let mut links = Vec::new();
        for row in text.split("<tr><td>").skip(1) {
            let Some(a) = anchors(row).into_iter().next() else { continue };
            let sha = row
                .split("<td class=\"sha\">")
                .nth(1)
                .and_then(|r| r.split('<').next())
                .filter(|s| s.len() == 64)
                .map(str::to_owned);
            let Ok(url) = page.url.join(&a.href) else { continue };
            links.push(Link { url, what: "listed object", sha256: sha });
        }
        self.follow(t, &page, links).await;
    }
}

/// One `<a>`: its href as written (entities decoded, percent-encoding kept) and its
/// `data-core-metadata` / `data-dist-info-metadata` value.
struct Anchor {
    href: String,
    core_metadata: Option<String>,
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&#62;", ">")
        .replace("&#60;", "<")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn anchors(html: &str) -> Vec<Anchor> {
    let mut out = Vec::new();
    for tag in html.split("<a ").skip(1) {
        let tag = tag.split('>').next().unwrap_or("");
        let attr = |name: &str| {
            let start = tag
                .find(&format!(" {name}=\""))
                .map(|i| i + 1)
                .or_else(|| tag.starts_with(&format!("{name}=\"")).then_some(0))?
                + name.len()
                + 2;
            let end = tag[start..].find('"')? + start;
            Some(unescape(&tag[start..end]))
        };
        let Some(href) = attr("href") else { continue };
        out.push(Anchor {
            href,
            core_metadata: attr("data-core-metadata").or_else(|| attr("data-dist-info-metadata")),
        });
    }
    out
}

/// The sha256 a `name=value` hash value gives (`sha256=<hex>`), if it gives one.
fn sha256_of(value: &str) -> Option<String> {
    value.strip_prefix("sha256=").map(str::to_owned)
}

/// The files and `.metadata` sidecars an HTML pip page (find-links or project page) names.
fn pip_html_links(page: &Page) -> Vec<Link> {
    let text = String::from_utf8_lossy(&page.body).into_owned();
    let mut links = Vec::new();
    for a in anchors(&text) {
        let (path, fragment) = a.href.split_once('#').unwrap_or((&a.href, ""));
        let Ok(url) = page.url.join(path) else { continue };
        if let Some(meta) = &a.core_metadata {
            let Ok(sidecar) = Url::parse(&format!("{url}.metadata")) else { continue };
            links.push(Link { url: sidecar, what: "core metadata", sha256: sha256_of(meta) });
        }
        links.push(Link { url, what: "distribution", sha256: sha256_of(fragment) });
    }
    links
}

/// The files and `.metadata` sidecars a PEP 691 project page names.
fn pip_json_links(page: &Page) -> Vec<Link> {
    let json: serde_json::Value = serde_json::from_slice(&page.body).expect("project JSON");
    let mut links = Vec::new();
    for file in json["files"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let Some(href) = file["url"].as_str() else { continue };
        let (path, _) = href.split_once('#').unwrap_or((href, ""));
        let Ok(url) = page.url.join(path) else { continue };
        let meta = if file["core-metadata"].is_null() { &file["dist-info-metadata"] } else { &file["core-metadata"] };
        if meta.is_object() || meta.as_bool() == Some(true) {
            let Ok(sidecar) = Url::parse(&format!("{url}.metadata")) else { continue };
            links.push(Link {
                url: sidecar,
                what: "core metadata",
                sha256: meta["sha256"].as_str().map(str::to_owned),
            });
        }
        links.push(Link { url, what: "distribution", sha256: file["hashes"]["sha256"].as_str().map(str::to_owned) });
    }
    links
}

/// The `SHA256:` section of a Release (or the text inside an InRelease): (sha, size, path).
fn release_sha256(text: &str) -> Vec<(String, u64, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        if !line.starts_with(' ') {
            inside = line.trim_end() == "SHA256:";
            continue;
        }
        if !inside {
            continue;
        }
        if let [sha, size, path] = line.split_whitespace().collect::<Vec<_>>()[..] {
            out.push((sha.to_owned(), size.parse().unwrap_or(0), path.to_owned()));
        }
    }
    out
}

/// A `Packages` index's text, decompressed by its path's suffix (`None`: not a Packages).
fn decompress(path: &str, body: &[u8]) -> Option<String> {
    let mut text = String::new();
    if path.ends_with("/Packages") {
        return Some(String::from_utf8_lossy(body).into_owned());
    } else if path.ends_with("/Packages.gz") {
        flate2::read::MultiGzDecoder::new(body).read_to_string(&mut text).ok()?;
    } else if path.ends_with("/Packages.xz") {
        xz2::read::XzDecoder::new(body).read_to_string(&mut text).ok()?;
    } else {
        return None;
    }
    Some(text)
}

/// Each stanza's `Filename:` and `SHA256:`.
fn packages_files(text: &str) -> Vec<(String, Option<String>)> {
    text.split("\n\n")
        .filter_map(|stanza| {
            let field = |name: &str| {
                stanza.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(": "))).map(str::to_owned)
            };
            Some((field("Filename")?, field("SHA256")))
        })
        .collect()
}

/// The value of `attr="…"` on the first `<tag ` in `xml`.
fn attribute(xml: &str, tag: &str, attr: &str) -> Option<String> {
    let at = xml.find(&format!("<{tag} "))?;
    let element = &xml[at..at + xml[at..].find('>')?];
    let key = format!(" {attr}=\"");
    let start = element.find(&key)? + key.len();
    let len = element[start..].find('"')?;
    Some(unescape(&element[start..start + len]))
}
