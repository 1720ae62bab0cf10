//! The dnf repository of a root (`{run}-{platform}/packages/rpm/x86_64/`):
//! `repodata/<sha256>-{primary,filelists,other}.xml.gz` (content-addressed, immutable) and
//! `repodata/repomd.xml` naming them, written last; `repomd.xml.asc` before it when signing.
//! The XML follows createrepo_c's (namespaces, element order, primary file rules). Each
//! document is gzipped as one member per content-defined chunk ([`crate::render::chunked`]), so a
//! reindex compresses only what changed.
//!
//! Packages are ordered by name, EVR (rpm's order), arch and file name, read from the start of
//! each record's stored text, or through [`Payload::view`](crate::state::Payload::view) when that
//! text holds an escape, without parsing the whole record. With the previous state and its
//! documents' chunks at hand, `old_places` gives each unchanged package its place in the old
//! order (the new order without what was added or changed, with what was removed or changed
//! merged back), and a chunk of the previous document holding the same run of unchanged packages
//! is taken whole, unrendered ([`crate::render::chunked::Chunker::reuse`]). So a `+1 .rpm` parses
//! and renders the records of a chunk or two per document, not of every package.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use quarry_store::sha256_hex;
use sha2::Digest as _;

use crate::render::chunked::{ChunkCache, Chunker, Chunks, Document, Member, sha_prefix};
use crate::render::pip::{Page, Stage};
use crate::render::sign::{SignError, Signer};
use crate::rpmhead::{RpmDep, RpmInfo, is_primary_file};
use crate::state::{Entry, Payload, RepoState};

/// The armored public key published next to a signed repo, for `gpgkey=`.
pub const KEY_NAME: &str = "repodata/repomd.xml.key";
pub const REPOMD: &str = "repodata/repomd.xml";

/// `s` escaped for XML text and attribute values; characters XML 1.0 cannot carry are dropped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_into(&mut out, s);
    out
}

/// [`escape`] appended to `out`: text with nothing to escape (the common case) is copied whole.
pub fn escape_into(out: &mut String, s: &str) {
    // Bytes that may need work: the five markup characters, C0 controls, and 0xEF (the lead
    // byte of U+FFFE and U+FFFF).
    let plain = s.bytes().all(|b| b >= 0x20 && !matches!(b, b'&' | b'<' | b'>' | b'"' | b'\'' | 0xEF));
    if plain {
        out.push_str(s);
        return;
    }
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {}
            c => out.push(c),
        }
    }
}

/// `<tag>escaped text</tag>` and a newline, after `indent`.
fn element(out: &mut String, indent: &str, tag: &str, text: &str) {
    out.push_str(indent);
    out.push('<');
    out.push_str(tag);
    out.push('>');
    escape_into(out, text);
    out.push_str("</");
    out.push_str(tag);
    out.push_str(">\n");
}

/// ` name="escaped value"`.
fn attribute(out: &mut String, name: &str, value: &str) {
    out.push(' ');
    out.push_str(name);
    out.push_str("=\"");
    escape_into(out, value);
    out.push('"');
}

fn version(out: &mut String, rpm: &RpmInfo) {
    let _ = write!(out, "  <version epoch=\"{}\"", rpm.epoch);
    attribute(out, "ver", &rpm.version);
    attribute(out, "rel", &rpm.release);
    out.push_str("/>\n");
}

fn deps(out: &mut String, tag: &str, deps: &[RpmDep]) {
    if deps.is_empty() {
        return;
    }
    let _ = writeln!(out, "    <rpm:{tag}>");
    for dep in deps {
        out.push_str("      <rpm:entry");
        attribute(out, "name", &dep.name);
        if !dep.flags.is_empty() {
            let _ = write!(out, " flags=\"{}\"", dep.flags);
        }
        for (attr, value) in [("epoch", &dep.epoch), ("ver", &dep.ver), ("rel", &dep.rel)] {
            if !value.is_empty() {
                attribute(out, attr, value);
            }
        }
        if dep.pre {
            out.push_str(" pre=\"1\"");
        }
        out.push_str("/>\n");
    }
    let _ = writeln!(out, "    </rpm:{tag}>");
}

fn file(out: &mut String, indent: &str, path: &str, kind: &str) {
    out.push_str(indent);
    if kind.is_empty() {
        out.push_str("<file>");
    } else {
        let _ = write!(out, "<file type=\"{kind}\">");
    }
    escape_into(out, path);
    out.push_str("</file>\n");
}

/// rpm's order of two `[epoch:]version[-release]` strings (`rpmvercmp` per part, `~` before
/// anything, `^` after the end but before any further segment).
pub fn evr_str_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    rpm_version::Evr::parse(a).cmp(&rpm_version::Evr::parse(b))
}

/// The three documents, as [`Kind`] names them.
const KINDS: [Kind; 3] = [Kind::Primary, Kind::Filelists, Kind::Other];

/// One of the three documents of a dnf repo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Primary,
    Filelists,
    Other,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Primary => "primary",
            Kind::Filelists => "filelists",
            Kind::Other => "other",
        }
    }

    /// The document's opening, naming how many packages it holds.
    fn head(self, packages: usize) -> String {
        let mut head = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = match self {
            Kind::Primary => writeln!(
                head,
                "<metadata xmlns=\"http://linux.duke.edu/metadata/common\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\" packages=\"{packages}\">"
            ),
            Kind::Filelists => {
                writeln!(head, "<filelists xmlns=\"http://linux.duke.edu/metadata/filelists\" packages=\"{packages}\">")
            }
            Kind::Other => {
                writeln!(head, "<otherdata xmlns=\"http://linux.duke.edu/metadata/other\" packages=\"{packages}\">")
            }
        };
        head
    }

    fn foot(self) -> &'static str {
        match self {
            Kind::Primary => "</metadata>\n",
            Kind::Filelists => "</filelists>\n",
            Kind::Other => "</otherdata>\n",
        }
    }

    /// Room to render `packages` packages in one go (room never written costs nothing).
    fn capacity(self, packages: usize) -> usize {
        512 + packages * if self == Kind::Primary { 1024 } else { 256 }
    }

    /// One package's element.
    fn write(self, out: &mut String, entry: &Entry, rpm: &RpmInfo) {
        match self {
            Kind::Primary => primary_package(out, entry, rpm),
            Kind::Filelists => {
                package_open(out, entry, rpm);
                for f in &rpm.files {
                    file(out, "  ", &f.path, &f.kind);
                }
                out.push_str("</package>\n");
            }
            Kind::Other => {
                package_open(out, entry, rpm);
                for change in &rpm.changelog {
                    out.push_str("  <changelog");
                    attribute(out, "author", &change.author);
                    let _ = write!(out, " date=\"{}\">", change.date);
                    escape_into(out, &change.text);
                    out.push_str("</changelog>\n");
                }
                out.push_str("</package>\n");
            }
        }
    }
}

/// One package's `<package>` element of primary.xml.
fn primary_package(out: &mut String, entry: &Entry, rpm: &RpmInfo) {
    out.push_str("<package type=\"rpm\">\n");
    element(out, "  ", "name", &rpm.name);
    element(out, "  ", "arch", &rpm.arch);
    version(out, rpm);
    let _ = writeln!(out, "  <checksum type=\"sha256\" pkgid=\"YES\">{}</checksum>", entry.sha256);
    element(out, "  ", "summary", &rpm.summary);
    element(out, "  ", "description", &rpm.description);
    element(out, "  ", "packager", &rpm.packager);
    element(out, "  ", "url", &rpm.url);
    let _ = writeln!(out, "  <time file=\"{}\" build=\"{}\"/>", upload_seconds(entry), rpm.build_time);
    let _ = writeln!(
        out,
        "  <size package=\"{}\" installed=\"{}\" archive=\"{}\"/>",
        entry.size, rpm.installed_size, rpm.archive_size
    );
    out.push_str("  <location");
    attribute(out, "href", &entry.filename);
    out.push_str("/>\n  <format>\n");
    element(out, "    ", "rpm:license", &rpm.license);
    element(out, "    ", "rpm:vendor", &rpm.vendor);
    element(out, "    ", "rpm:group", &rpm.group);
    element(out, "    ", "rpm:buildhost", &rpm.buildhost);
    element(out, "    ", "rpm:sourcerpm", &rpm.sourcerpm);
    let _ = writeln!(out, "    <rpm:header-range start=\"{}\" end=\"{}\"/>", rpm.header_start, rpm.header_end);
    deps(out, "provides", &rpm.provides);
    deps(out, "requires", &rpm.requires);
    deps(out, "conflicts", &rpm.conflicts);
    deps(out, "obsoletes", &rpm.obsoletes);
    deps(out, "suggests", &rpm.suggests);
    deps(out, "enhances", &rpm.enhances);
    deps(out, "recommends", &rpm.recommends);
    deps(out, "supplements", &rpm.supplements);
    for f in rpm.files.iter().filter(|f| is_primary_file(&f.path)) {
        file(out, "    ", &f.path, &f.kind);
    }
    out.push_str("  </format>\n</package>\n");
}

/// A filelists.xml or other.xml package's opening: `<package pkgid name arch>` and `<version>`.
fn package_open(out: &mut String, entry: &Entry, rpm: &RpmInfo) {
    let _ = write!(out, "<package pkgid=\"{}\"", entry.sha256);
    attribute(out, "name", &rpm.name);
    attribute(out, "arch", &rpm.arch);
    out.push_str(">\n");
    version(out, rpm);
}

/// Why the dnf documents could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum DnfError {
    #[error(transparent)]
    Sign(#[from] SignError),
    /// A state whose record of a package does not read as one (damaged): the caller rebuilds.
    #[error("the state's record of {0} does not read as an rpm header record")]
    Record(String),
}

/// What orders a package in the documents, read from its record without the rest of it.
#[derive(serde::Deserialize)]
struct OrderFields<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    epoch: u32,
    #[serde(borrow)]
    version: Cow<'a, str>,
    #[serde(borrow)]
    release: Cow<'a, str>,
    #[serde(borrow)]
    arch: Cow<'a, str>,
}

/// A package of the repo and what orders it: name, EVR as rpm orders it, arch, location.
struct Package<'a> {
    entry: &'a Entry,
    payload: &'a Payload<RpmInfo>,
    name: Cow<'a, str>,
    evr: rpm_version::Evr<'a>,
    arch: Cow<'a, str>,
}

/// [`OrderFields`] from the start of a record as serde writes an [`RpmInfo`]
/// (`{"name":"…","epoch":N,"version":"…","release":"…","arch":"…",…`) when none of them holds
/// an escape: the text itself, without scanning the rest of the record. `None` otherwise (the
/// record is then read by serde).
fn order_fields(raw: &str) -> Option<OrderFields<'_>> {
    let rest = raw.strip_prefix("{\"name\":\"")?;
    let (name, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(",\"epoch\":")?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    let epoch = rest[..digits].parse().ok()?;
    let rest = rest[digits..].strip_prefix(",\"version\":\"")?;
    let (version, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(",\"release\":\"")?;
    let (release, rest) = rest.split_once('"')?;
    let rest = rest.strip_prefix(",\"arch\":\"")?;
    let (arch, _) = rest.split_once('"')?;
    if [name, version, release, arch].iter().any(|field| field.contains('\\')) {
        return None;
    }
    let borrowed = Cow::Borrowed;
    Some(OrderFields {
        name: borrowed(name),
        epoch,
        version: borrowed(version),
        release: borrowed(release),
        arch: borrowed(arch),
    })
}

impl<'a> Package<'a> {
    fn of(entry: &'a Entry) -> Option<Result<Self, DnfError>> {
        let payload = entry.rpm.as_deref()?;
        let Some(key) = order_fields(payload.raw()).or_else(|| payload.view::<OrderFields<'_>>()) else {
            return Some(Err(DnfError::Record(entry.filename.clone())));
        };
        let evr = rpm_version::Evr::new(Cow::Owned(key.epoch.to_string()), key.version, key.release);
        Some(Ok(Self { entry, payload, name: key.name, evr, arch: key.arch }))
    }

    fn order(&self, other: &Self) -> std::cmp::Ordering {
        self.name
            .cmp(&other.name)
            .then_with(|| self.evr.cmp(&other.evr))
            .then_with(|| self.arch.cmp(&other.arch))
            .then_with(|| self.entry.filename.cmp(&other.entry.filename))
    }

    fn info(&self) -> Result<&'a RpmInfo, DnfError> {
        self.payload.get().ok_or_else(|| DnfError::Record(self.entry.filename.clone()))
    }
}

/// `entries`' packages in the documents' order.
fn ordered<'a>(entries: impl Iterator<Item = &'a Entry>) -> Result<Vec<Package<'a>>, DnfError> {
    let mut packages = Vec::with_capacity(entries.size_hint().1.unwrap_or(0));
    for package in entries.filter_map(Package::of) {
        packages.push(package?);
    }
    // The order is total (no two packages share a location): an unstable sort gives the one order.
    packages.sort_unstable_by(Package::order);
    Ok(packages)
}

/// For each of `packages` (the new order) that `old` holds unchanged, its place in the old
/// order; and how many packages the old documents held. The old order is the new one without
/// the packages added or changed, with those removed or changed merged back in.
fn old_places(packages: &[Package<'_>], old: &RepoState) -> Result<(Vec<Option<usize>>, usize), DnfError> {
    let kept: Vec<bool> =
        packages.iter().map(|p| old.entries.get(&p.entry.filename).is_some_and(|o| o == p.entry)).collect();
    let held: HashSet<&str> =
        packages.iter().zip(&kept).filter(|(_, kept)| **kept).map(|(p, _)| p.entry.filename.as_str()).collect();
    // The old packages the new state does not hold as they were: removed, or replaced.
    let gone = ordered(old.entries.values().filter(|e| !held.contains(e.filename.as_str())))?;
    let mut places = vec![None; packages.len()];
    let (mut next_gone, mut place) = (0, 0);
    for (i, package) in packages.iter().enumerate().filter(|(i, _)| kept[*i]) {
        while gone.get(next_gone).is_some_and(|g| g.order(package).is_lt()) {
            next_gone += 1;
            place += 1;
        }
        places[i] = Some(place);
        place += 1;
    }
    Ok((places, place + gone.len() - next_gone))
}

/// One document of `packages`: each package rendered in turn, except where a chunk starts and
/// the previous document's chunk there holds the same packages (`reuse`: the previous chunks
/// and each package's place in the old order): that chunk is taken whole. The result is what
/// rendering every package gives, chunk for chunk.
fn document(
    kind: Kind,
    packages: &[Package<'_>],
    reuse: Option<(&[Member], &[Option<usize>])>,
    cache: &ChunkCache,
) -> Result<Chunks, DnfError> {
    // The previous package chunks by the old place of their first package, and the last one.
    let mut starts = HashMap::new();
    if let Some((members, _)) = reuse {
        let mut place = 0;
        let chunks: Vec<&Member> = members.iter().filter(|m| m.id.packages() > 0).collect();
        for (i, member) in chunks.iter().enumerate() {
            starts.insert(place, (**member, i + 1 == chunks.len()));
            place += member.id.packages() as usize;
        }
    }
    let places = reuse.map_or(&[][..], |(_, places)| places);
    let reusable = |p: usize| -> Option<Member> {
        let start = (*places.get(p)?)?;
        let &(member, last) = starts.get(&start)?;
        let count = member.id.packages() as usize;
        let end = p.checked_add(count).filter(|&end| end <= packages.len())?;
        let same_run = (0..count).all(|j| places[p + j] == Some(start + j));
        // The old document's last chunk may have ended only because the document did.
        let ends_alike = !last || end == packages.len();
        let first = member.id.first() == sha_prefix(&packages[p].entry.sha256);
        (same_run && ends_alike && first && cache.holds(&member.id)).then_some(member)
    };
    let mut chunker = Chunker::with_capacity(kind.capacity(packages.len()));
    chunker.alone(&kind.head(packages.len()));
    let mut p = 0;
    while p < packages.len() {
        if chunker.at_cut()
            && let Some(member) = reusable(p)
        {
            chunker.reuse(member);
            p += member.id.packages() as usize;
            continue;
        }
        let package = &packages[p];
        let info = package.info()?;
        chunker.package_with(&package.entry.sha256, |out| kind.write(out, package.entry, info));
        p += 1;
    }
    chunker.alone(kind.foot());
    Ok(chunker.finish())
}

/// Seconds since the epoch of an entry's upload time (createrepo_c's `time file`).
pub fn upload_seconds(entry: &Entry) -> i64 {
    entry.upload_time.parse::<jiff::Timestamp>().map(|t| t.as_second()).unwrap_or(0)
}

/// Every dnf output for `state`: the three gzipped documents, then `repomd.xml.asc`, then
/// `repomd.xml`.
pub fn render(state: &RepoState, signer: Option<&Signer>) -> Result<Vec<Page>, DnfError> {
    render_cached(state, signer, &ChunkCache::new())
}

/// One rendered document: its kind, the sha256 and length of its uncompressed text, and its
/// gzip file.
struct Rendered {
    kind: &'static str,
    open_sha256: String,
    open_size: usize,
    gz: Vec<u8>,
}

/// The three documents, each cut into chunks, then compressed together (the chunks `cache`
/// holds are not compressed again; the others on every core). With the state they were last
/// rendered from (`old`) and the chunks of those documents in `cache`, only the chunks that
/// changed are rendered: a `+1` reads and renders the packages of a chunk or two.
fn documents(state: &RepoState, old: Option<&RepoState>, cache: &ChunkCache) -> Result<Vec<Rendered>, DnfError> {
    let packages = ordered(state.entries.values())?;
    let places = match old {
        Some(old) if KINDS.iter().all(|k| cache.members(k.name()).is_some()) => Some(old_places(&packages, old)?),
        _ => None,
    };
    let mut rendered = Vec::with_capacity(KINDS.len());
    for kind in KINDS {
        // The previous document, if it held the old packages as the state says.
        let previous = cache.members(kind.name()).filter(|members| {
            let held: usize = members.iter().map(|m| m.id.packages() as usize).sum();
            places.as_ref().is_some_and(|(_, count)| held == *count)
        });
        let reuse = previous.zip(places.as_ref().map(|(places, _)| places.as_slice()));
        rendered.push((kind, document(kind, &packages, reuse, cache)?));
    }
    let documents: Vec<Document<'_>> = rendered.iter().map(|(_, chunks)| Document { chunks, xz: false }).collect();
    let compressed = cache.compress(&documents);
    let mut out = Vec::with_capacity(KINDS.len());
    for ((kind, chunks), (gz, _)) in rendered.iter().zip(compressed) {
        let (open_sha256, open_size) = match chunks.reused() {
            0 => (hex::encode(sha2::Sha256::digest(chunks.text().as_bytes())), chunks.text().len()),
            // A reused chunk's member was read back whole and proven: it inflates to its text.
            _ => {
                cache.open_digest(chunks).ok_or_else(|| DnfError::Record(format!("a chunk of {}.xml", kind.name())))?
            }
        };
        out.push(Rendered { kind: kind.name(), open_sha256, open_size, gz });
    }
    Ok(out)
}

/// [`render`], reusing the compressed chunks `cache` holds: the same bytes.
pub fn render_cached(state: &RepoState, signer: Option<&Signer>, cache: &ChunkCache) -> Result<Vec<Page>, DnfError> {
    render_from(state, None, signer, cache)
}

/// [`render_cached`] of `state`, which `old` was before: the chunks of `old`'s documents that
/// still hold the same packages are taken from `cache` whole, not rendered. The same bytes.
pub fn render_from(
    state: &RepoState,
    old: Option<&RepoState>,
    signer: Option<&Signer>,
    cache: &ChunkCache,
) -> Result<Vec<Page>, DnfError> {
    let time = state.generated.unwrap_or(0);
    let mut pages = Vec::new();
    let mut repomd = String::new();
    repomd.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    repomd.push_str(
        "<repomd xmlns=\"http://linux.duke.edu/metadata/repo\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\">\n",
    );
    let _ = writeln!(repomd, "  <revision>{time}</revision>");
    for Rendered { kind, open_sha256: open, open_size, gz } in documents(state, old, cache)? {
        let closed = sha256_hex(&gz);
        let href = format!("repodata/{closed}-{kind}.xml.gz");
        let _ = writeln!(repomd, "  <data type=\"{kind}\">");
        let _ = writeln!(repomd, "    <checksum type=\"sha256\">{closed}</checksum>");
        let _ = writeln!(repomd, "    <open-checksum type=\"sha256\">{open}</open-checksum>");
        let _ = writeln!(repomd, "    <location href=\"{href}\"/>");
        let _ = writeln!(repomd, "    <timestamp>{time}</timestamp>");
        let _ = writeln!(repomd, "    <size>{}</size>", gz.len());
        let _ = writeln!(repomd, "    <open-size>{open_size}</open-size>");
        repomd.push_str("  </data>\n");
        pages.push(Page::new(href, gz, Stage::Immutable, "application/gzip"));
    }
    repomd.push_str("</repomd>\n");
    if let Some(signer) = signer {
        let signature = signer.detached(repomd.as_bytes(), time)?;
        pages.push(Page::new(
            KEY_NAME.to_owned(),
            signer.public_key_armored().as_bytes().to_vec(),
            Stage::Immutable,
            "text/plain; charset=utf-8",
        ));
        pages.push(Page::new(
            format!("{REPOMD}.asc"),
            signature.into_bytes(),
            Stage::Signature,
            "text/plain; charset=utf-8",
        ));
    }
    pages.push(Page::new(REPOMD.to_owned(), repomd.into_bytes(), Stage::Last, "application/xml"));
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpmhead::{RpmChange, RpmFile};

    fn info(name: &str, version: &str, release: &str) -> RpmInfo {
        RpmInfo {
            name: name.into(),
            epoch: 0,
            version: version.into(),
            release: release.into(),
            arch: "x86_64".into(),
            summary: "Says <hello> & more".into(),
            description: "A test package.".into(),
            packager: String::new(),
            url: "https://example.com/".into(),
            license: "MIT".into(),
            vendor: String::new(),
            group: "Unspecified".into(),
            buildhost: "builder".into(),
            sourcerpm: format!("{name}-{version}-{release}.src.rpm"),
            build_time: 1_795_000_000,
            installed_size: 1234,
            archive_size: 2048,
            header_start: 4504,
            header_end: 6000,
            provides: vec![RpmDep {
                name: name.into(),
                flags: "EQ".into(),
                epoch: "0".into(),
                ver: version.into(),
                rel: release.into(),
                pre: false,
            }],
            requires: vec![
                RpmDep { name: "/bin/sh".into(), pre: true, ..RpmDep::default() },
                RpmDep {
                    name: "libhello".into(),
                    flags: "GE".into(),
                    epoch: "0".into(),
                    ver: "1.0".into(),
                    ..RpmDep::default()
                },
            ],
            conflicts: vec![],
            obsoletes: vec![],
            recommends: vec![RpmDep { name: "hello-doc".into(), ..RpmDep::default() }],
            suggests: vec![],
            supplements: vec![],
            enhances: vec![],
            files: vec![
                RpmFile { path: "/usr/bin/hello".into(), kind: String::new() },
                RpmFile { path: "/usr/share/doc/hello".into(), kind: "dir".into() },
                RpmFile { path: "/etc/hello.conf".into(), kind: "ghost".into() },
            ],
            changelog: vec![RpmChange {
                author: "Q <q@example.com> - 1.0-1".into(),
                date: 1_795_000_000,
                text: "- first".into(),
            }],
        }
    }

    fn state() -> RepoState {
        let mut state = RepoState::empty();
        for (name, version, release) in [("hello", "1.0", "1"), ("hello", "1.0~rc1", "1"), ("libhello", "1.0", "1")] {
            let file = format!("{name}-{version}-{release}.x86_64.rpm");
            let mut entry = crate::state::test_entry(&file);
            entry.rpm = Some(std::sync::Arc::new(crate::state::Payload::new(info(name, version, release))));
            state.entries.insert(file, entry);
        }
        state.generated = Some(1_795_000_000);
        state
    }

    /// A document as a render of every package writes it.
    fn whole(kind: Kind, state: &RepoState) -> String {
        let packages = ordered(state.entries.values()).unwrap();
        document(kind, &packages, None, &ChunkCache::new()).unwrap().into_text()
    }

    #[test]
    fn primary_snapshot() {
        insta::assert_snapshot!(whole(Kind::Primary, &state()));
    }

    #[test]
    fn filelists_and_other_snapshots() {
        let state = state();
        insta::assert_snapshot!(whole(Kind::Filelists, &state));
        insta::assert_snapshot!(whole(Kind::Other, &state));
    }

    #[test]
    fn repomd_snapshot_and_order() {
        let pages = render(&state(), None).unwrap();
        let repomd = pages.last().unwrap();
        assert_eq!(repomd.path, REPOMD);
        insta::assert_snapshot!(String::from_utf8(repomd.body.clone()).unwrap());
        let signer = Signer::from_armored(include_str!("../../testdata/test-rsa3072.sec.asc")).unwrap();
        let signed = render(&state(), Some(&signer)).unwrap();
        let paths: Vec<&str> = signed.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(&paths[3..], [KEY_NAME, "repodata/repomd.xml.asc", REPOMD]);
        assert_eq!(signed, render(&state(), Some(&signer)).unwrap());
    }

    /// The order fields read off the start of a record are serde's, or left to serde: names
    /// with escapes, quotes, non-ASCII text, any epoch.
    #[test]
    fn order_fields_from_the_text_are_what_serde_reads() {
        for (name, epoch, version) in [
            ("hello", 0, "1.0"),
            ("h\"q\\x", 3, "1.0~rc1"),
            ("héllo\u{1}", 4_000_000_000, "2^post"),
            ("tab\tname", 1, "1.0"),
        ] {
            let mut rpm = info(name, version, "1");
            rpm.epoch = epoch;
            let payload = Payload::new(rpm);
            let serde: OrderFields<'_> = payload.view().unwrap();
            let fast = order_fields(payload.raw());
            assert_eq!(
                fast.is_some(),
                !payload.raw()[..64.min(payload.raw().len())].contains('\\'),
                "{}",
                payload.raw()
            );
            for fields in fast.iter().chain([&serde]) {
                let got = (&*fields.name, fields.epoch, &*fields.version, &*fields.release, &*fields.arch);
                assert_eq!(got, (name, epoch, version, "1", "x86_64"));
            }
        }
        assert!(order_fields("{\"name\":\"a\",\"epoch\":-1,\"version\":\"1\"}").is_none());
    }

    #[test]
    fn versions_sort_as_rpm_does() {
        let pages = whole(Kind::Primary, &state());
        let rc = pages.find("ver=\"1.0~rc1\"").unwrap();
        let final_ = pages.find("ver=\"1.0\" rel").unwrap();
        assert!(rc < final_, "1.0~rc1 sorts before 1.0");
    }

    #[test]
    fn escaping_drops_what_xml_cannot_hold() {
        assert_eq!(escape("a<b>&\"'\u{1}c"), "a&lt;b&gt;&amp;&quot;&apos;c");
        // Plain text is copied whole; U+FFFE/U+FFFF go, other characters led by 0xEF stay.
        assert_eq!(escape("plain é ü /usr/bin"), "plain é ü /usr/bin");
        assert_eq!(escape("a\u{fffe}b\u{ffff}c\u{f000}\u{fffd}"), "abc\u{f000}\u{fffd}");
        assert_eq!(escape("tab\tline\nret\r\u{1f}"), "tab\tline\nret\r");
        let mut out = String::from("x");
        escape_into(&mut out, "<y>");
        assert_eq!(out, "x&lt;y&gt;");
    }
}
