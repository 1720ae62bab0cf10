//! The dnf repository of a root (`{run}-{platform}/packages/rpm/x86_64/`):
//! `repodata/<sha256>-{primary,filelists,other}.xml.gz` (content-addressed, immutable) and
//! `repodata/repomd.xml` naming them, written last; `repomd.xml.asc` before it when signing.
//! The XML follows createrepo_c's (namespaces, element order, primary file rules). Each
//! document is gzipped as one member per content-defined chunk ([`crate::chunked`]), so a
//! reindex compresses only what changed.

use std::fmt::Write as _;

use quarry_store::sha256_hex;
use sha2::Digest as _;

use crate::chunked::{ChunkCache, Chunker, Chunks, Document};
use crate::render::{Page, Stage};
use crate::rpmhead::{RpmDep, RpmInfo, is_primary_file};
use crate::sign::{SignError, Signer};
use crate::state::{Entry, RepoState};

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

/// The packages in `primary.xml` order: by name, then EVR as rpm orders it, then location.
pub fn packages(state: &RepoState) -> Vec<(&Entry, &RpmInfo)> {
    let mut out: Vec<(&Entry, &RpmInfo)> =
        state.entries.values().filter_map(|e| Some((e, e.rpm.as_deref()?))).collect();
    out.sort_by(|(ea, a), (eb, b)| {
        a.name
            .cmp(&b.name)
            .then_with(|| evr_cmp(a, b))
            .then_with(|| a.arch.cmp(&b.arch))
            .then_with(|| ea.filename.cmp(&eb.filename))
    });
    out
}

/// rpm's order of two `[epoch:]version[-release]` strings (`rpmvercmp` per part, `~` before
/// anything, `^` after the end but before any further segment).
pub fn evr_str_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    rpm_version::Evr::parse(a).cmp(&rpm_version::Evr::parse(b))
}

/// rpm's EVR order.
pub fn evr_cmp(a: &RpmInfo, b: &RpmInfo) -> std::cmp::Ordering {
    let evr = |r: &RpmInfo| rpm_version::Evr::new(r.epoch.to_string(), r.version.clone(), r.release.clone());
    evr(a).cmp(&evr(b))
}

pub fn primary(packages: &[(&Entry, &RpmInfo)]) -> String {
    primary_chunks(packages).into_text()
}

/// primary.xml cut into chunks at `<package>` boundaries ([`Chunker`]).
pub fn primary_chunks(packages: &[(&Entry, &RpmInfo)]) -> Chunks {
    let mut chunker = Chunker::with_capacity(1024 * packages.len() + 512);
    let mut head = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        head,
        "<metadata xmlns=\"http://linux.duke.edu/metadata/common\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\" packages=\"{}\">",
        packages.len()
    );
    chunker.alone(&head);
    for &(entry, rpm) in packages {
        chunker.package_with(&entry.sha256, |out| primary_package(out, entry, rpm));
    }
    chunker.alone("</metadata>\n");
    chunker.finish()
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

/// A document with one `<package pkgid name arch>` (and `<version>`) per package, the
/// package's own elements written by `body`, in chunks: filelists.xml and other.xml.
fn per_package(
    root: &str,
    namespace: &str,
    packages: &[(&Entry, &RpmInfo)],
    body: impl Fn(&mut String, &RpmInfo),
) -> Chunks {
    let mut chunker = Chunker::with_capacity(256 * packages.len() + 512);
    let mut head = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(head, "<{root} xmlns=\"{namespace}\" packages=\"{}\">", packages.len());
    chunker.alone(&head);
    for &(entry, rpm) in packages {
        chunker.package_with(&entry.sha256, |out| {
            let _ = write!(out, "<package pkgid=\"{}\"", entry.sha256);
            attribute(out, "name", &rpm.name);
            attribute(out, "arch", &rpm.arch);
            out.push_str(">\n");
            version(out, rpm);
            body(out, rpm);
            out.push_str("</package>\n");
        });
    }
    chunker.alone(&format!("</{root}>\n"));
    chunker.finish()
}

pub fn filelists(packages: &[(&Entry, &RpmInfo)]) -> String {
    filelists_chunks(packages).into_text()
}

pub fn filelists_chunks(packages: &[(&Entry, &RpmInfo)]) -> Chunks {
    per_package("filelists", "http://linux.duke.edu/metadata/filelists", packages, |out, rpm| {
        for f in &rpm.files {
            file(out, "  ", &f.path, &f.kind);
        }
    })
}

pub fn other(packages: &[(&Entry, &RpmInfo)]) -> String {
    other_chunks(packages).into_text()
}

pub fn other_chunks(packages: &[(&Entry, &RpmInfo)]) -> Chunks {
    per_package("otherdata", "http://linux.duke.edu/metadata/other", packages, |out, rpm| {
        for change in &rpm.changelog {
            out.push_str("  <changelog");
            attribute(out, "author", &change.author);
            let _ = write!(out, " date=\"{}\">", change.date);
            escape_into(out, &change.text);
            out.push_str("</changelog>\n");
        }
    })
}

/// Seconds since the epoch of an entry's upload time (createrepo_c's `time file`).
pub fn upload_seconds(entry: &Entry) -> i64 {
    entry.upload_time.parse::<jiff::Timestamp>().map(|t| t.as_second()).unwrap_or(0)
}

/// Every dnf output for `state`: the three gzipped documents, then `repomd.xml.asc`, then
/// `repomd.xml`.
pub fn render(state: &RepoState, signer: Option<&Signer>) -> Result<Vec<Page>, SignError> {
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
/// holds are not compressed again; the others on every core). Rendering is sequential: for
/// the few milliseconds it takes, threads (each with its own allocator arena of freshly
/// faulted pages) cost more than they save.
fn documents(state: &RepoState, cache: &ChunkCache) -> Vec<Rendered> {
    let packages = packages(state);
    let kinds: [(&str, DocumentChunks); 3] =
        [("primary", primary_chunks), ("filelists", filelists_chunks), ("other", other_chunks)];
    let rendered: Vec<(&str, Chunks)> = kinds.into_iter().map(|(kind, chunks)| (kind, chunks(&packages))).collect();
    let pieces: Vec<Vec<&str>> = rendered.iter().map(|(_, chunks)| chunks.as_strs()).collect();
    let documents: Vec<Document<'_>> = pieces.iter().map(|chunks| Document { chunks, xz: false }).collect();
    let compressed = cache.compress(&documents);
    rendered
        .iter()
        .zip(compressed)
        .map(|((kind, chunks), (gz, _))| Rendered {
            kind,
            open_sha256: hex::encode(sha2::Sha256::digest(chunks.text().as_bytes())),
            open_size: chunks.text().len(),
            gz,
        })
        .collect()
}

/// A document's chunks from the packages in order.
type DocumentChunks = fn(&[(&Entry, &RpmInfo)]) -> Chunks;

/// [`render`], reusing the compressed chunks `cache` holds: the same bytes.
pub fn render_cached(state: &RepoState, signer: Option<&Signer>, cache: &ChunkCache) -> Result<Vec<Page>, SignError> {
    let time = state.generated.unwrap_or(0);
    let mut pages = Vec::new();
    let mut repomd = String::new();
    repomd.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    repomd.push_str(
        "<repomd xmlns=\"http://linux.duke.edu/metadata/repo\" xmlns:rpm=\"http://linux.duke.edu/metadata/rpm\">\n",
    );
    let _ = writeln!(repomd, "  <revision>{time}</revision>");
    for Rendered { kind, open_sha256: open, open_size, gz } in documents(state, cache) {
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
                RpmDep { name: "/bin/sh".into(), pre: true, ..RpmDep::default_for_test() },
                RpmDep {
                    name: "libhello".into(),
                    flags: "GE".into(),
                    epoch: "0".into(),
                    ver: "1.0".into(),
                    ..RpmDep::default_for_test()
                },
            ],
            conflicts: vec![],
            obsoletes: vec![],
            recommends: vec![RpmDep { name: "hello-doc".into(), ..RpmDep::default_for_test() }],
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

    impl RpmDep {
        fn default_for_test() -> Self {
            RpmDep {
                name: String::new(),
                flags: String::new(),
                epoch: String::new(),
                ver: String::new(),
                rel: String::new(),
                pre: false,
            }
        }
    }

    fn state() -> RepoState {
        let mut state = RepoState::empty();
        for (name, version, release) in [("hello", "1.0", "1"), ("hello", "1.0~rc1", "1"), ("libhello", "1.0", "1")] {
            let file = format!("{name}-{version}-{release}.x86_64.rpm");
            let mut entry = crate::state::test_entry(&file);
            entry.rpm = Some(std::sync::Arc::new(info(name, version, release)));
            state.entries.insert(file, entry);
        }
        state.generated = Some(1_795_000_000);
        state
    }

    #[test]
    fn primary_snapshot() {
        insta::assert_snapshot!(primary(&packages(&state())));
    }

    #[test]
    fn filelists_and_other_snapshots() {
        let state = state();
        insta::assert_snapshot!(filelists(&packages(&state)));
        insta::assert_snapshot!(other(&packages(&state)));
    }

    #[test]
    fn repomd_snapshot_and_order() {
        let pages = render(&state(), None).unwrap();
        let repomd = pages.last().unwrap();
        assert_eq!(repomd.path, REPOMD);
        insta::assert_snapshot!(String::from_utf8(repomd.body.clone()).unwrap());
        let signer = Signer::from_armored(include_str!("../testdata/test-rsa3072.sec.asc")).unwrap();
        let signed = render(&state(), Some(&signer)).unwrap();
        let paths: Vec<&str> = signed.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(&paths[3..], [KEY_NAME, "repodata/repomd.xml.asc", REPOMD]);
        assert_eq!(signed, render(&state(), Some(&signer)).unwrap());
    }

    #[test]
    fn versions_sort_as_rpm_does() {
        let pages = primary(&packages(&state()));
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
