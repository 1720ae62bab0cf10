//! Audit an apt or dnf root the way its clients read it: apt from `dists/stable/Release` down
//! (every listed index and its by-hash copy has the size and SHA-256 the Release gives, every
//! `Filename:` exists with its `Size:`), dnf from `repodata/repomd.xml` down (every document
//! has its checksum, every `<location>` exists), and every package in the listing is in the
//! indices or was refused with a reason.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use quarry_store::{Store, StoreError, StoreExt, sha256_hex};

use super::report::{CheckReport, MISSING_FILE, MISSING_LINKED, committed_state, unescape};
use crate::state::root::{RepoKind, RepoRoot};

/// Largest metadata document read (decompressed too).
const MAX_DOCUMENT: u64 = 1024 * 1024 * 1024;

/// Read a document; `from`: the document naming it (missing, it is then a dangling link).
async fn read(
    store: &dyn Store,
    root: &RepoRoot,
    (from, path): (Option<&str>, &str),
    report: &mut CheckReport,
) -> Result<Option<Vec<u8>>, StoreError> {
    match store.get_bytes(&root.key(path)?, MAX_DOCUMENT).await {
        Ok((_, bytes)) => {
            report.pages += 1;
            Ok(Some(bytes.to_vec()))
        }
        Err(e) if e.is_not_found() => {
            report.problems.push(match from {
                Some(from) => format!("{path} is missing and {from}{MISSING_LINKED}"),
                None => format!("{path} is missing"),
            });
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The root's package files as the listing saw them: path relative to the root → size.
type Listed = BTreeMap<String, u64>;

/// A package file the metadata points at: it must exist with the given size (from the
/// listing; a HEAD only for a file that landed after it).
async fn check_package(
    store: &dyn Store,
    root: &RepoRoot,
    listed: &Listed,
    (page, file, size): (&str, &str, Option<u64>),
    report: &mut CheckReport,
) -> Result<(), StoreError> {
    let actual = match listed.get(file) {
        Some(size) => *size,
        None => match store.head(&root.key(file)?).await {
            Ok(meta) => meta.size,
            Err(e) if e.is_not_found() => {
                report.problems.push(format!("{page} {MISSING_FILE} {file}"));
                return Ok(());
            }
            Err(e) => return Err(e),
        },
    };
    if let Some(size) = size.filter(|s| *s != actual) {
        report.problems.push(format!("{page} gives {file} size {size}, the store {actual}"));
    }
    Ok(())
}

pub(crate) async fn check_native(
    store: &dyn Store,
    root: &RepoRoot,
    report: &mut CheckReport,
) -> Result<(), StoreError> {
    let (prefix, recursive) = root.package_prefix();
    let listing = store.list_all(&prefix, !recursive).await?;
    // A file `quarry prune` marked is on its way out: indexed as gone, not expected listed.
    let leaving = crate::reindex::plan::leaving(listing.objects.iter().map(|o| o.key.as_str()));
    let files: Listed = listing
        .objects
        .iter()
        .filter(|o| !leaving.contains(o.key.as_str()))
        .filter_map(|o| Some((o.key.as_str().strip_prefix(root.as_str())?, o.size)))
        .filter(|(rel, _)| root.is_package(rel))
        .map(|(rel, size)| (rel.to_owned(), size))
        .collect();
    report.files = files.len();
    let Some(state) = committed_state(store, root, files.len(), report).await? else {
        return Ok(());
    };
    let listed = match root.kind() {
        RepoKind::Apt => check_apt(store, root, &files, report).await?,
        RepoKind::Dnf => check_dnf(store, root, &files, report).await?,
        RepoKind::Pip => unreachable!("pip roots are checked by check()"),
    };
    for file in files.keys() {
        if state.rejected.contains_key(file) {
            continue;
        }
        if !state.entries.contains_key(file) {
            report.problems.push(format!("{file} is in the listing but not in the committed state"));
        } else if !listed.contains(file) {
            report.problems.push(format!("{file} is missing from the repository metadata"));
        }
    }
    Ok(())
}

/// Check the apt indices; the package files they list.
async fn check_apt(
    store: &dyn Store,
    root: &RepoRoot,
    files: &Listed,
    report: &mut CheckReport,
) -> Result<BTreeSet<String>, StoreError> {
    let dists = format!("dists/{}/", crate::render::apt::SUITE);
    let mut listed = BTreeSet::new();
    let Some(release) = read(store, root, (None, &format!("{dists}Release")), report).await? else {
        return Ok(listed);
    };
    let release = String::from_utf8_lossy(&release).into_owned();
    if let Ok((_, signed)) = store.get_bytes(&root.key(&format!("{dists}InRelease"))?, MAX_DOCUMENT).await
        && !String::from_utf8_lossy(&signed).replace("\r\n", "\n").contains(&release)
    {
        report.problems.push("InRelease does not carry the same text as Release".into());
    }
    let mut in_sha256 = false;
    for line in release.lines() {
        if !line.starts_with(' ') {
            in_sha256 = line == "SHA256:";
            continue;
        }
        if !in_sha256 {
            continue;
        }
        let parts: Vec<&str> = line.split_whitespace().collect();
        let [sha, size, path] = parts[..] else {
            report.problems.push(format!("Release: bad checksum line {line:?}"));
            continue;
        };
        let Some(body) = read(store, root, (Some("Release"), &format!("{dists}{path}")), report).await? else {
            continue;
        };
        if sha256_hex(&body) != sha || size.parse::<usize>().ok() != Some(body.len()) {
            report.problems.push(format!("{dists}{path} does not match its Release checksum"));
        }
        let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
        let by_hash = format!("{dists}{dir}/by-hash/SHA256/{sha}");
        match store.head(&root.key(&by_hash)?).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => report.problems.push(format!("Release {MISSING_FILE} {by_hash}")),
            Err(e) => return Err(e),
        }
        if path.ends_with("/Packages") {
            let text = String::from_utf8_lossy(&body).into_owned();
            for stanza in text.split("\n\n").filter(|s| !s.trim().is_empty()) {
                let field = |name: &str| {
                    stanza
                        .lines()
                        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(": ")))
                        .map(str::to_owned)
                };
                let Some(file) = field("Filename") else {
                    report.problems.push(format!("{path}: a stanza without Filename"));
                    continue;
                };
                let size = field("Size").and_then(|s| s.parse().ok());
                check_package(store, root, files, (path, &file, size), report).await?;
                listed.insert(file);
            }
        }
    }
    Ok(listed)
}

/// The values of `attr="…"` on every `<tag` in `xml` (our own and createrepo_c's layout).
fn attributes(xml: &str, tag: &str, attr: &str) -> Vec<String> {
    let needle = format!("<{tag} ");
    let key = format!("{attr}=\"");
    xml.match_indices(&needle)
        .filter_map(|(at, _)| {
            let rest = &xml[at..];
            let end = rest.find('>')?;
            let element = &rest[..end];
            let start = element.find(&key)? + key.len();
            let len = element[start..].find('"')?;
            Some(unescape(&element[start..start + len]))
        })
        .collect()
}

/// Check the dnf documents; the package files primary lists.
async fn check_dnf(
    store: &dyn Store,
    root: &RepoRoot,
    files: &Listed,
    report: &mut CheckReport,
) -> Result<BTreeSet<String>, StoreError> {
    let mut listed = BTreeSet::new();
    let Some(repomd) = read(store, root, (None, crate::render::dnf::REPOMD), report).await? else {
        return Ok(listed);
    };
    let repomd = String::from_utf8_lossy(&repomd).into_owned();
    for data in repomd.split("<data ").skip(1) {
        let kind = attributes(&format!("<data {data}"), "data", "type").pop().unwrap_or_default();
        let Some(href) = attributes(data, "location", "href").pop() else {
            report.problems.push(format!("repomd.xml: {kind} has no location"));
            continue;
        };
        let checksum = data
            .split("<checksum type=\"sha256\">")
            .nth(1)
            .and_then(|rest| rest.split('<').next())
            .unwrap_or_default()
            .to_owned();
        let Some(body) = read(store, root, (Some("repomd.xml"), &href), report).await? else {
            continue;
        };
        if sha256_hex(&body) != checksum {
            report.problems.push(format!("{href} does not match its repomd.xml checksum"));
        }
        if kind == "primary" {
            let mut xml = String::new();
            if flate2::read::MultiGzDecoder::new(&body[..]).take(MAX_DOCUMENT).read_to_string(&mut xml).is_err() {
                report.problems.push(format!("{href} is not gzipped XML"));
                continue;
            }
            for (package, size) in
                attributes(&xml, "location", "href").into_iter().zip(attributes(&xml, "size", "package"))
            {
                check_package(store, root, files, (&href, &package, size.parse().ok()), report).await?;
                listed.insert(package);
            }
        }
    }
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_read_from_elements() {
        let xml = r#"<location href="a&amp;b.rpm"/><size package="12" installed="3"/><location href="c.rpm"/>"#;
        assert_eq!(attributes(xml, "location", "href"), ["a&b.rpm", "c.rpm"]);
        assert_eq!(attributes(xml, "size", "package"), ["12"]);
    }
}
