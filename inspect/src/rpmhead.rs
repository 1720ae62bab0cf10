//! Reading an `.rpm`'s headers (never the payload): the lead and both header sizes come from
//! fixed offsets, then the bytes up to the end of the main header are parsed with the `rpm`
//! crate and checked against the header digest in the signature header. What dnf's metadata
//! needs is extracted with createrepo_c's rules.

use quarry_store::StoreError;
use rpm::{DependencyFlags, FileFlags, FileType, IndexSignatureTag, PackageMetadata};
use serde::{Deserialize, Serialize};

use crate::source::RangeSource;

/// Bytes of the fixed-size lead.
const LEAD: u64 = 96;
/// Bytes of a header's preamble (magic, reserved, index count, data length).
const PREAMBLE: u64 = 16;
/// rpm's own limits for one header.
const MAX_INDEX_ENTRIES: u64 = 0xffff;
const MAX_DATA: u64 = 256 * 1024 * 1024;
/// Changelog entries kept in `other.xml` (createrepo_c's default).
pub const CHANGELOG_LIMIT: usize = 10;

/// Why an `.rpm` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RpmError {
    #[error("not an RPM package (bad lead magic)")]
    NotRpm,
    #[error("truncated: {0}")]
    Truncated(String),
    #[error("corrupt header: {0}")]
    Corrupt(String),
    #[error("source packages do not belong in a binary repository")]
    SourcePackage,
}

/// Where the headers lie: `[0, header_end)` holds lead, signature and main header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderSpan {
    pub header_start: u64,
    pub header_end: u64,
}

fn be32(bytes: &[u8], at: usize) -> u64 {
    u64::from(u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]))
}

/// The size of a header from its 16-byte preamble.
fn header_size(preamble: &[u8], what: &str) -> Result<u64, RpmError> {
    if preamble.len() < PREAMBLE as usize {
        return Err(RpmError::Truncated(format!("the {what} is cut off")));
    }
    if preamble[..3] != [0x8e, 0xad, 0xe8] {
        return Err(RpmError::Corrupt(format!("bad {what} magic")));
    }
    let (entries, data) = (be32(preamble, 8), be32(preamble, 12));
    if entries == 0 || entries > MAX_INDEX_ENTRIES || data > MAX_DATA {
        return Err(RpmError::Corrupt(format!("{what} claims {entries} entries and {data} data bytes")));
    }
    Ok(PREAMBLE + entries * 16 + data)
}

/// Locate the main header from the first `LEAD + 16` bytes and the main header's preamble.
pub async fn header_span(source: &mut impl RangeSource) -> Result<Result<HeaderSpan, RpmError>, StoreError> {
    let size = source.size();
    let start = source.range(0, size.min(LEAD + PREAMBLE)).await?;
    if start.len() < 4 || start[..4] != [0xed, 0xab, 0xee, 0xdb] {
        return Ok(Err(RpmError::NotRpm));
    }
    if (start.len() as u64) < LEAD + PREAMBLE {
        return Ok(Err(RpmError::Truncated("the lead is cut off".into())));
    }
    let signature = match header_size(&start[LEAD as usize..], "signature header") {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let header_start = LEAD + signature + (8 - signature % 8) % 8;
    let preamble = source.range(header_start, PREAMBLE).await?;
    let header = match header_size(&preamble, "main header") {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    let header_end = header_start + header;
    if header_end > size {
        return Ok(Err(RpmError::Truncated(format!("the headers need {header_end} bytes but the file has {size}"))));
    }
    Ok(Ok(HeaderSpan { header_start, header_end }))
}

/// Check every index entry of the header at `start`: a known type, a non-zero count, and
/// data that lies inside the header's data store.
fn check_index(bytes: &[u8], start: usize, what: &str) -> Result<(), RpmError> {
    let cut = || RpmError::Truncated(format!("the {what} is cut off"));
    let preamble = bytes.get(start..start + PREAMBLE as usize).ok_or_else(cut)?;
    let (entries, data) = (be32(preamble, 8) as usize, be32(preamble, 12) as usize);
    let index = start + PREAMBLE as usize;
    let store = index + entries * 16;
    if bytes.len() < store + data {
        return Err(cut());
    }
    for i in 0..entries {
        let at = index + i * 16;
        let (kind, offset, count) = (be32(bytes, at + 4), be32(bytes, at + 8) as usize, be32(bytes, at + 12) as usize);
        let size = match kind {
            0 => 0,         // NULL
            1 | 2 | 7 => 1, // CHAR, INT8, BIN (count = bytes)
            3 => 2,
            4 => 4,
            5 => 8,
            6 | 8 | 9 => 1, // strings: at least one byte each
            _ => return Err(RpmError::Corrupt(format!("{what} entry {i} has unknown type {kind}"))),
        };
        let end = count.checked_mul(size).and_then(|n| n.checked_add(offset));
        if count == 0 || end.is_none_or(|end| end > data) {
            return Err(RpmError::Corrupt(format!("{what} entry {i} points outside the header ({offset}+{count})")));
        }
    }
    Ok(())
}

/// A dependency as dnf's metadata writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct RpmDep {
    pub name: String,
    /// `EQ`, `LT`, `LE`, `GT`, `GE`; empty for an unversioned dependency.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub flags: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub epoch: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ver: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rel: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pre: bool,
}

/// One path of the package's file list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpmFile {
    pub path: String,
    /// `""` (regular file or link), `"dir"` or `"ghost"`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpmChange {
    pub author: String,
    pub date: u64,
    pub text: String,
}

/// Everything dnf's metadata says about one package, read from its headers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RpmInfo {
    pub name: String,
    pub epoch: u32,
    pub version: String,
    pub release: String,
    pub arch: String,
    pub summary: String,
    pub description: String,
    pub packager: String,
    pub url: String,
    pub license: String,
    pub vendor: String,
    pub group: String,
    pub buildhost: String,
    pub sourcerpm: String,
    pub build_time: u64,
    pub installed_size: u64,
    pub archive_size: u64,
    pub header_start: u64,
    pub header_end: u64,
    #[serde(default)]
    pub provides: Vec<RpmDep>,
    #[serde(default)]
    pub requires: Vec<RpmDep>,
    #[serde(default)]
    pub conflicts: Vec<RpmDep>,
    #[serde(default)]
    pub obsoletes: Vec<RpmDep>,
    #[serde(default)]
    pub recommends: Vec<RpmDep>,
    #[serde(default)]
    pub suggests: Vec<RpmDep>,
    #[serde(default)]
    pub supplements: Vec<RpmDep>,
    #[serde(default)]
    pub enhances: Vec<RpmDep>,
    #[serde(default)]
    pub files: Vec<RpmFile>,
    #[serde(default)]
    pub changelog: Vec<RpmChange>,
}

impl RpmInfo {
    /// `name-[epoch:]version-release.arch`.
    pub fn nevra(&self) -> String {
        let epoch = if self.epoch == 0 { String::new() } else { format!("{}:", self.epoch) };
        format!("{}-{epoch}{}-{}.{}", self.name, self.version, self.release, self.arch)
    }

    /// Parse `bytes` = `[0, span.header_end)` of the file. Every index entry is bounds-checked
    /// before the `rpm` crate sees the bytes, and a panic inside it is a refusal, not a crash.
    pub fn from_headers(bytes: &[u8], span: HeaderSpan) -> Result<Self, RpmError> {
        check_index(bytes, LEAD as usize, "signature header")?;
        check_index(bytes, span.header_start as usize, "main header")?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Self::parse_checked(bytes, span)))
            .unwrap_or_else(|_| Err(RpmError::Corrupt("the header could not be parsed".into())))
    }

    fn parse_checked(bytes: &[u8], span: HeaderSpan) -> Result<Self, RpmError> {
        let corrupt = |e: rpm::Error| RpmError::Corrupt(e.to_string());
        let md = PackageMetadata::parse(&mut std::io::Cursor::new(bytes)).map_err(corrupt)?;
        md.verify_digests().map_err(|e| RpmError::Corrupt(format!("header digest: {e}")))?;
        if md.is_source_package() {
            return Err(RpmError::SourcePackage);
        }
        let text = |r: Result<&str, rpm::Error>| r.map(str::to_owned).unwrap_or_default();
        let name = md.get_name().map_err(corrupt)?.to_owned();
        let version = md.get_version().map_err(corrupt)?.to_owned();
        let release = md.get_release().map_err(corrupt)?.to_owned();
        let arch = md.get_arch().map_err(corrupt)?.to_owned();
        for (field, value) in [("name", &name), ("version", &version), ("release", &release), ("arch", &arch)] {
            if value.is_empty() || value.chars().any(|c| c.is_whitespace() || c == '/') {
                return Err(RpmError::Corrupt(format!("invalid {field} {value:?}")));
            }
        }
        let archive_size = md
            .signature
            .get_entry_data_as_u64(IndexSignatureTag::RPMSIGTAG_LONGARCHIVESIZE)
            .or_else(|_| md.signature.get_entry_data_as_u32(IndexSignatureTag::RPMSIGTAG_PAYLOADSIZE).map(u64::from))
            .unwrap_or(0);

        let mut files = Vec::new();
        for entry in md.get_file_entries().map_err(corrupt)? {
            let kind = if entry.flags().contains(FileFlags::GHOST) {
                "ghost"
            } else if entry.file_type() == FileType::Dir {
                "dir"
            } else {
                ""
            };
            files.push(RpmFile { path: entry.path().to_string_lossy().into_owned(), kind: kind.to_owned() });
        }
        let deps = |r: Result<Vec<rpm::Dependency>, rpm::Error>| -> Result<Vec<RpmDep>, RpmError> {
            let mut out: Vec<RpmDep> = Vec::new();
            for dep in r.map_err(corrupt)? {
                let converted = convert(&dep);
                if !out.contains(&converted) {
                    out.push(converted);
                }
            }
            Ok(out)
        };
        let provides = deps(md.get_provides())?;
        let requires = requires(md.get_requires().map_err(corrupt)?, &provides, &files);
        let mut changelog: Vec<RpmChange> = md
            .get_changelog_entries()
            .unwrap_or_default()
            .into_iter()
            .take(CHANGELOG_LIMIT)
            .map(|c| RpmChange { author: c.name, date: c.timestamp, text: c.description })
            .collect();
        changelog.reverse();
        Ok(Self {
            epoch: md.get_epoch().unwrap_or(0),
            summary: text(md.get_summary()),
            description: text(md.get_description()),
            packager: text(md.get_packager()),
            url: text(md.get_url()),
            license: text(md.get_license()),
            vendor: text(md.get_vendor()),
            group: text(md.get_group()),
            buildhost: text(md.get_build_host()),
            sourcerpm: text(md.get_source_rpm()),
            build_time: md.get_build_time().unwrap_or(0),
            installed_size: md.get_installed_size().unwrap_or(0),
            archive_size,
            header_start: span.header_start,
            header_end: span.header_end,
            conflicts: deps(md.get_conflicts())?,
            obsoletes: deps(md.get_obsoletes())?,
            recommends: deps(md.get_recommends())?,
            suggests: deps(md.get_suggests())?,
            supplements: deps(md.get_supplements())?,
            enhances: deps(md.get_enhances())?,
            provides,
            requires,
            files,
            changelog,
            name,
            version,
            release,
            arch,
        })
    }
}

/// A header dependency in metadata form: flags as names, `[E:]V[-R]` split, epoch defaulting
/// to 0 when versioned.
fn convert(dep: &rpm::Dependency) -> RpmDep {
    let flags = dep.flags;
    let (less, greater, equal) = (
        flags.contains(DependencyFlags::LESS),
        flags.contains(DependencyFlags::GREATER),
        flags.contains(DependencyFlags::EQUAL),
    );
    let flag = match (less, greater, equal) {
        (true, false, true) => "LE",
        (false, true, true) => "GE",
        (false, false, true) => "EQ",
        (true, false, false) => "LT",
        (false, true, false) => "GT",
        _ => "",
    };
    let (mut epoch, mut ver, mut rel) = (String::new(), String::new(), String::new());
    if !dep.version.is_empty() {
        let (e, rest) = match dep.version.split_once(':') {
            Some((e, rest)) if !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()) => (e, rest),
            _ => ("0", dep.version.as_str()),
        };
        epoch = e.to_owned();
        match rest.rsplit_once('-') {
            Some((v, r)) => {
                ver = v.to_owned();
                rel = r.to_owned();
            }
            None => ver = rest.to_owned(),
        }
    }
    let pre = flags.intersects(DependencyFlags::PREREQ | DependencyFlags::SCRIPT_PRE | DependencyFlags::SCRIPT_POST);
    RpmDep { name: dep.name.clone(), flags: flag.to_owned(), epoch, ver, rel, pre }
}

/// createrepo_c's requires: no `rpmlib(…)`, nothing the package provides itself, no files it
/// ships in its primary file list, no duplicates, only the highest `libc.so.6(…)`.
fn requires(raw: Vec<rpm::Dependency>, provides: &[RpmDep], files: &[RpmFile]) -> Vec<RpmDep> {
    let mut out: Vec<RpmDep> = Vec::new();
    for dep in raw {
        if dep.name.starts_with("rpmlib(") || dep.flags.contains(DependencyFlags::RPMLIB) {
            continue;
        }
        let mut converted = convert(&dep);
        if converted.name.starts_with('/')
            && is_primary_file(&converted.name)
            && files.iter().any(|f| f.path == converted.name)
        {
            continue;
        }
        let unpre = RpmDep { pre: false, ..converted.clone() };
        if provides.contains(&unpre) {
            continue;
        }
        if let Some(existing) = out.iter_mut().find(|d| RpmDep { pre: false, ..(*d).clone() } == unpre) {
            existing.pre |= converted.pre;
            continue;
        }
        converted.pre = converted.pre && !converted.name.is_empty();
        out.push(converted);
    }
    // Keep only the highest libc.so.6(GLIBC_x.y) requirement.
    let libc: Vec<&RpmDep> = out.iter().filter(|d| d.name.starts_with("libc.so.6(")).collect();
    if libc.len() > 1 {
        let highest = libc.iter().map(|d| d.name.clone()).max_by(|a, b| glibc_order(a, b)).unwrap_or_default();
        out.retain(|d| !d.name.starts_with("libc.so.6(") || d.name == highest);
    }
    out
}

fn glibc_order(a: &str, b: &str) -> std::cmp::Ordering {
    let key = |s: &str| -> Vec<u64> { s.split(['(', ')', '_', '.']).filter_map(|p| p.parse().ok()).collect() };
    key(a).cmp(&key(b))
}

/// Files listed in `primary.xml` (the rest only in `filelists.xml`).
pub fn is_primary_file(path: &str) -> bool {
    path.starts_with("/etc/") || path.contains("bin/") || path == "/usr/lib/sendmail"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(name: &str, flags: DependencyFlags, version: &str) -> rpm::Dependency {
        rpm::Dependency { name: name.into(), flags, version: version.into() }
    }

    #[test]
    fn dependencies_follow_createrepo_rules() {
        let provides = vec![convert(&dep("hello", DependencyFlags::EQUAL, "1.0-1"))];
        let files = vec![RpmFile { path: "/usr/bin/hello".into(), kind: String::new() }];
        let raw = vec![
            dep(
                "rpmlib(CompressedFileNames)",
                DependencyFlags::LESS | DependencyFlags::EQUAL | DependencyFlags::RPMLIB,
                "3.0.4-1",
            ),
            dep("hello", DependencyFlags::EQUAL, "1.0-1"),
            dep("/usr/bin/hello", DependencyFlags::ANY, ""),
            dep("/bin/sh", DependencyFlags::SCRIPT_PRE, ""),
            dep("/bin/sh", DependencyFlags::SCRIPT_POST, ""),
            dep("libfoo", DependencyFlags::GREATER | DependencyFlags::EQUAL, "2:3.1"),
            dep("libc.so.6(GLIBC_2.2.5)(64bit)", DependencyFlags::ANY, ""),
            dep("libc.so.6(GLIBC_2.34)(64bit)", DependencyFlags::ANY, ""),
            dep("libc.so.6(GLIBC_2.4)(64bit)", DependencyFlags::ANY, ""),
        ];
        let got = requires(raw, &provides, &files);
        let names: Vec<(&str, &str, bool)> = got.iter().map(|d| (d.name.as_str(), d.flags.as_str(), d.pre)).collect();
        assert_eq!(
            names,
            [("/bin/sh", "", true), ("libfoo", "GE", false), ("libc.so.6(GLIBC_2.34)(64bit)", "", false)]
        );
        assert_eq!((got[1].epoch.as_str(), got[1].ver.as_str(), got[1].rel.as_str()), ("2", "3.1", ""));
        let pinned = convert(&dep("x", DependencyFlags::EQUAL, "7.1.0-daily"));
        assert_eq!((pinned.epoch.as_str(), pinned.ver.as_str(), pinned.rel.as_str()), ("0", "7.1.0", "daily"));
    }

    #[test]
    fn primary_files_are_createrepos() {
        assert!(is_primary_file("/etc/hello.conf"));
        assert!(is_primary_file("/usr/bin/hello"));
        assert!(is_primary_file("/opt/rocm/sbin/x"));
        assert!(is_primary_file("/usr/lib/sendmail"));
        assert!(!is_primary_file("/usr/lib/libhello.so"));
    }

    #[tokio::test]
    async fn spans_are_checked_before_parsing() {
        let span =
            |bytes: Vec<u8>| async move { header_span(&mut crate::source::MemorySource(bytes.into())).await.unwrap() };
        assert_eq!(span(b"garbage that is not an rpm".to_vec()).await, Err(RpmError::NotRpm));
        let mut lead = vec![0xed, 0xab, 0xee, 0xdb];
        lead.resize(96, 0);
        assert!(matches!(span(lead.clone()).await, Err(RpmError::Truncated(_))));
        let mut bad = lead.clone();
        bad.extend_from_slice(&[0x8e, 0xad, 0xe8, 1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert!(matches!(span(bad).await, Err(RpmError::Corrupt(_))));
        let mut short = lead;
        short.extend_from_slice(&[0x8e, 0xad, 0xe8, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
        short.resize(96 + 32, 0);
        assert!(matches!(span(short).await, Err(RpmError::Corrupt(_) | RpmError::Truncated(_))));
    }
}
