//! The apt repository of a root (`{run}-{platform}/packages/deb/`): `dists/stable/Release`,
//! `InRelease`, `Release.gpg` and `main/binary-<arch>/Packages{,.gz,.xz}` with `by-hash/SHA256`
//! copies, rendered purely from the repo state. `Packages.gz` and `.xz` are compressed in
//! content-defined chunks ([`crate::render::chunked`]): a reindex compresses only the chunks it has not
//! got from the previous outputs, and writes the bytes a from-scratch render writes.
//!
//! Release checksum lines are `hex size path` (the order `debian-packaging` 0.18 gets wrong)
//! and list the uncompressed `Packages` too (apt skips an index whose uncompressed checksum is
//! missing). No `Valid-Until`: a CI repo must stay usable without re-signing.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;

use md5::Digest as _;
use quarry_packaging::DebVersion;

use crate::render::chunked::{ChunkCache, Chunker, Chunks, Document};
use crate::render::pip::{Page, Stage};
use crate::render::sign::{SignError, Signer};
use crate::state::{Entry, RepoState};

pub use crate::state::root::{COMPONENT, SUITE};

/// The `sources.list` line for a repo at `url` (ending in `/`): pinned to the keyring file
/// `signed_by` when the repo is signed, else `trusted=yes`.
pub fn sources_line(url: &str, signed_by: Option<&str>) -> String {
    let trust = match signed_by {
        Some(keyring) => format!("signed-by={keyring}"),
        None => "trusted=yes".to_owned(),
    };
    format!("deb [{trust}] {url} {SUITE} {COMPONENT}")
}
/// The armored public key published next to a signed repo, for `signed-by`.
pub const KEY_NAME: &str = "quarry-archive-key.asc";
const TEXT: &str = "text/plain; charset=utf-8";

/// What a Release file says about its repo (frozen: changing these makes apt demand
/// `--allow-releaseinfo-change`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AptOptions {
    pub origin: String,
    pub label: String,
}

impl Default for AptOptions {
    fn default() -> Self {
        Self { origin: "Quarry".into(), label: "Quarry".into() }
    }
}

/// The `Date:` form apt expects (RFC 2822, UTC).
pub fn release_date(unix: i64) -> String {
    let ts = jiff::Timestamp::from_second(unix).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    ts.strftime("%a, %d %b %Y %H:%M:%S UTC").to_string()
}

/// dpkg's field order for a `Packages` stanza (`Dpkg::Control::FieldsCore`, index type):
/// these first, in this order, then any other field as the control file has it.
const FIELD_ORDER: &[&str] = &[
    "Package",
    "Package-Type",
    "Source",
    "Version",
    "Built-Using",
    "Static-Built-Using",
    "Kernel-Version",
    "Built-For-Profiles",
    "Auto-Built-Package",
    "Architecture",
    "Subarchitecture",
    "Installer-Menu-Item",
    "Essential",
    "Protected",
    "Origin",
    "Bugs",
    "Maintainer",
    "Installed-Size",
    "Provides",
    "Pre-Depends",
    "Depends",
    "Recommends",
    "Suggests",
    "Breaks",
    "Conflicts",
    "Replaces",
    "Enhances",
    "Filename",
    "Size",
    "MD5sum",
    "SHA1",
    "SHA256",
    "Section",
    "Priority",
    "Multi-Arch",
    "Homepage",
    "Description",
    "Tag",
    "Task",
];

/// Fields the index writes itself; the control file's own (if any) are dropped.
const POOL_FIELDS: &[&str] = &["Filename", "Size", "MD5sum", "SHA1", "SHA256", "SHA512"];

/// One package's stanza in `Packages`, fields in dpkg-scanpackages' order: the control file's
/// fields plus `Filename`, `Size` and the checksums.
pub fn stanza(entry: &Entry) -> String {
    let mut out = String::with_capacity(512);
    stanza_into(&mut out, entry);
    out
}

/// [`stanza`] appended to `out`.
fn stanza_into(out: &mut String, entry: &Entry) {
    let Some(control) = &entry.deb else { return };
    let size = entry.size.to_string();
    let mut fields: Vec<(&str, &str)> = control
        .fields
        .iter()
        .filter(|(name, value)| !value.is_empty() && !POOL_FIELDS.iter().any(|f| name.eq_ignore_ascii_case(f)))
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    fields.push(("Filename", &entry.filename));
    fields.push(("Size", &size));
    if let Some(md5) = &entry.md5 {
        fields.push(("MD5sum", md5));
    }
    if let Some(sha1) = &entry.sha1 {
        fields.push(("SHA1", sha1));
    }
    fields.push(("SHA256", &entry.sha256));
    let rank = |name: &str| FIELD_ORDER.iter().position(|f| f.eq_ignore_ascii_case(name)).unwrap_or(FIELD_ORDER.len());
    // Stable: unknown fields keep their control-file order after the known ones. Each field's
    // rank is looked up once.
    fields.sort_by_cached_key(|(name, _)| rank(name));
    for (name, value) in fields {
        out.push_str(name);
        out.push_str(": ");
        out.push_str(value);
        out.push('\n');
    }
}

/// Architectures the repo serves: every package's except `all` (folded into each), amd64 when
/// there is nothing else.
fn architectures(state: &RepoState) -> Vec<String> {
    let arches: BTreeSet<String> = state
        .entries
        .values()
        .filter_map(|e| e.deb.as_ref())
        .map(|c| c.architecture().to_owned())
        .filter(|a| a != "all")
        .collect();
    if arches.is_empty() { vec!["amd64".to_owned()] } else { arches.into_iter().collect() }
}

/// `Packages` for one architecture: its packages and the `all` ones, ordered by name, then
/// version as dpkg orders them, then filename.
pub fn packages(state: &RepoState, arch: &str) -> String {
    packages_chunks(state, arch).into_text()
}

/// `Packages` for one architecture cut into chunks at stanza boundaries ([`Chunker`]).
pub fn packages_chunks(state: &RepoState, arch: &str) -> Chunks {
    let mut entries: Vec<(&str, DebVersion, &Entry)> = state
        .entries
        .values()
        .filter_map(|e| {
            let control = e.deb.as_ref()?;
            let a = control.architecture();
            if a != arch && a != "all" {
                return None;
            }
            let version: DebVersion = control.version().parse().ok()?;
            Some((control.package(), version, e))
        })
        .collect();
    entries.sort_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.cmp(&b.1)).then_with(|| a.2.filename.cmp(&b.2.filename)));
    let mut chunker = Chunker::with_capacity(512 * entries.len());
    // Each stanza ends with a blank line, as dpkg-scanpackages writes them.
    for (_, _, entry) in &entries {
        chunker.package_with(&entry.sha256, |out| {
            stanza_into(out, entry);
            out.push('\n');
        });
    }
    chunker.finish()
}

/// gzip with no name and no time, so equal input gives equal bytes.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).expect("writing to memory");
    encoder.finish().expect("writing to memory")
}

/// MD5, SHA-1 and SHA-256 of `data`, lowercase hex.
pub fn digests(data: &[u8]) -> [String; 3] {
    [hex::encode(md5::Md5::digest(data)), hex::encode(sha1::Sha1::digest(data)), quarry_store::sha256_hex(data)]
}

/// Every apt output for `state`, in publish stages: by-hash copies, the canonical indices,
/// `Release`, `Release.gpg`, `InRelease` (and the public key when signing).
pub fn render(state: &RepoState, options: &AptOptions, signer: Option<&Signer>) -> Result<Vec<Page>, SignError> {
    render_cached(state, options, signer, &ChunkCache::new())
}

/// [`render`], reusing the compressed chunks `cache` holds: the same bytes, compressing only
/// the chunks it lacks.
pub fn render_cached(
    state: &RepoState,
    options: &AptOptions,
    signer: Option<&Signer>,
    cache: &ChunkCache,
) -> Result<Vec<Page>, SignError> {
    let date = state.generated.unwrap_or(0);
    let dists = format!("dists/{SUITE}/");
    let mut pages = Vec::new();
    // (path relative to dists/stable/, size, [md5, sha1, sha256])
    let mut indexed: Vec<(String, usize, [String; 3])> = Vec::new();
    let arches = architectures(state);
    for arch in &arches {
        let dir = format!("{COMPONENT}/binary-{arch}/");
        let chunks = packages_chunks(state, arch);
        let (gz, xzed) = cache.compress(&[Document { chunks: &chunks, xz: true }]).pop().expect("one document");
        let plain = chunks.into_text().into_bytes();
        let variants = [("Packages.gz", gz), ("Packages.xz", xzed.unwrap_or_default()), ("Packages", plain)];
        // The three files' digests side by side.
        let sums: Vec<[String; 3]> = std::thread::scope(|scope| {
            let running: Vec<_> = variants.iter().map(|(_, body)| scope.spawn(move || digests(body))).collect();
            running.into_iter().map(|h| h.join().expect("hashing does not panic")).collect()
        });
        for ((name, body), sums) in variants.into_iter().zip(sums) {
            pages.push(Page::new(
                format!("{dists}{dir}by-hash/SHA256/{}", sums[2]),
                body.clone(),
                Stage::Immutable,
                content_type(name),
            ));
            indexed.push((format!("{dir}{name}"), body.len(), sums));
            pages.push(Page::new(format!("{dists}{dir}{name}"), body, Stage::Index, content_type(name)));
        }
    }
    indexed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut release = String::new();
    let _ = writeln!(release, "Origin: {}", options.origin);
    let _ = writeln!(release, "Label: {}", options.label);
    let _ = writeln!(release, "Suite: {SUITE}");
    let _ = writeln!(release, "Codename: {SUITE}");
    let _ = writeln!(release, "Date: {}", release_date(date));
    let _ = writeln!(release, "Architectures: {}", arches.join(" "));
    let _ = writeln!(release, "Components: {COMPONENT}");
    let _ = writeln!(release, "Acquire-By-Hash: yes");
    let _ = writeln!(release, "No-Support-for-Architecture-all: Packages");
    for (i, title) in ["MD5Sum", "SHA1", "SHA256"].iter().enumerate() {
        let _ = writeln!(release, "{title}:");
        for (path, size, sums) in &indexed {
            let _ = writeln!(release, " {} {size:>16} {path}", sums[i]);
        }
    }
    if let Some(signer) = signer {
        pages.push(Page::new(
            KEY_NAME.to_owned(),
            signer.public_key_armored().as_bytes().to_vec(),
            Stage::Immutable,
            TEXT,
        ));
        let detached = signer.detached(release.as_bytes(), date)?;
        let inline = signer.clearsign(&release, date)?;
        pages.push(Page::new(format!("{dists}Release"), release.into_bytes(), Stage::Pointer, TEXT));
        pages.push(Page::new(format!("{dists}Release.gpg"), detached.into_bytes(), Stage::Signature, TEXT));
        pages.push(Page::new(format!("{dists}InRelease"), inline.into_bytes(), Stage::Last, TEXT));
    } else {
        pages.push(Page::new(format!("{dists}Release"), release.into_bytes(), Stage::Pointer, TEXT));
    }
    Ok(pages)
}

fn content_type(name: &str) -> &'static str {
    if name.ends_with(".gz") {
        "application/gzip"
    } else if name.ends_with(".xz") {
        "application/x-xz"
    } else {
        TEXT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deb::DebControl;

    fn entry(control: &str, filename: &str) -> Entry {
        let [md5, sha1, sha256] = digests(control.as_bytes());
        Entry {
            size: control.len() as u64,
            sha256,
            md5: Some(md5),
            sha1: Some(sha1),
            deb: Some(std::sync::Arc::new(DebControl::parse(control).unwrap())),
            ..crate::state::test_entry(filename)
        }
    }

    fn state() -> RepoState {
        let mut state = RepoState::empty();
        for (control, file) in [
            (
                "Package: hello\nVersion: 1.0-1\nArchitecture: amd64\nMaintainer: Q <q@example.com>\nDepends: libhello (>= 1.0)\nDescription: says hello\n Longer text.\n",
                "pool/main/hello_1.0-1_amd64.deb",
            ),
            (
                "Package: hello\nVersion: 1.0~rc1-1\nArchitecture: amd64\nMaintainer: Q <q@example.com>\nDescription: says hello\n",
                "pool/main/hello_1.0~rc1-1_amd64.deb",
            ),
            (
                "Package: libhello\nVersion: 1.0-1\nArchitecture: all\nMaintainer: Q <q@example.com>\nDescription: the library\n",
                "pool/main/libhello_1.0-1_all.deb",
            ),
        ] {
            state.entries.insert(file.into(), entry(control, file));
        }
        state.generated = Some(1_795_000_000);
        state
    }

    #[test]
    fn packages_snapshot() {
        insta::assert_snapshot!(packages(&state(), "amd64"));
    }

    #[test]
    fn release_snapshot() {
        let pages = render(&state(), &AptOptions::default(), None).unwrap();
        let release = pages.iter().find(|p| p.path == "dists/stable/Release").unwrap();
        insta::assert_snapshot!(String::from_utf8(release.body.clone()).unwrap());
        let paths: Vec<&str> = pages.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.iter().filter(|p| p.contains("/by-hash/SHA256/")).count() == 3, "{paths:?}");
        // Every line of Release is free of trailing whitespace (split verifiers need that).
        assert!(String::from_utf8_lossy(&release.body).lines().all(|l| l.trim_end() == l));
    }

    #[test]
    fn rendering_is_reproducible_and_signed() {
        let signer = Signer::from_armored(include_str!("../../testdata/test-ed25519.sec.asc")).unwrap();
        let a = render(&state(), &AptOptions::default(), Some(&signer)).unwrap();
        let b = render(&state(), &AptOptions::default(), Some(&signer)).unwrap();
        assert_eq!(a, b);
        let names: Vec<&str> = a
            .iter()
            .filter(|p| p.path.starts_with("dists/stable/") && !p.path.contains("main/"))
            .map(|p| p.path.as_str())
            .collect();
        assert_eq!(names, ["dists/stable/Release", "dists/stable/Release.gpg", "dists/stable/InRelease"]);
    }

    #[test]
    fn dates_are_rfc2822_utc() {
        assert_eq!(release_date(1_795_000_000), "Wed, 18 Nov 2026 11:06:40 UTC");
    }
}
