//! Reading a `.deb`: the `ar` members are walked with bounded ranged reads, the control member
//! (`control.tar[.gz|.xz|.zst]`) is decompressed with a size cap, and `./control` is parsed by
//! [`DebControl::parse`] with dpkg's rules. Nothing of the data member is read except its
//! header, which proves the archive is not truncated.

use std::io::Read;

use serde::{Deserialize, Serialize};

pub use crate::source::{MemorySource, RangeSource};

/// Largest compressed control member accepted.
pub const MAX_CONTROL_MEMBER: u64 = 16 * 1024 * 1024;
/// Largest decompressed control archive accepted (a zip bomb stops here).
const MAX_CONTROL_TAR: u64 = 64 * 1024 * 1024;
/// Largest `control` file accepted.
const MAX_CONTROL_FILE: u64 = 1024 * 1024;
const AR_MAGIC: &[u8] = b"!<arch>\n";
const AR_HEADER: u64 = 60;

/// Why a `.deb`'s file name cannot be published as its `Filename:` (apt clients join it to the
/// repository URL as they see fit: apt, aptly and reprepro send a `%` as `%25`, debmirror sends
/// it as is, and `%3a` then decodes to `:` and misses): a name with `%`, as `apt-get download`
/// writes an epoch's `:`. The message names the canonical name to upload it under,
/// `{Package}_{Version without epoch}_{Architecture}.deb` (as reprepro pools packages).
pub fn pool_name_problem(name: &str) -> Option<String> {
    if !name.contains('%') {
        return None;
    }
    let decoded = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
    let canonical = match decoded.strip_suffix(".deb").map(|stem| stem.split('_').collect::<Vec<_>>()) {
        Some(parts) if parts.len() == 3 => {
            let version = parts[1].split_once(':').map_or(parts[1], |(_, v)| v);
            format!("; upload it as {}_{version}_{}.deb", parts[0], parts[2])
        }
        _ => String::new(),
    };
    Some(format!(
        "{name}: a .deb file name with `%` (apt-get download writes an epoch's `:` as `%3a`) would be \
         published as its Filename, which some apt clients decode and then miss{canonical}"
    ))
}

/// Why a `.deb` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DebError {
    #[error("not a Debian package (no ar archive signature)")]
    NotAr,
    #[error("truncated: {0}")]
    Truncated(String),
    #[error("malformed ar archive: {0}")]
    BadAr(String),
    #[error("no control member (expected control.tar[.gz|.xz|.zst] after debian-binary, found {0:?})")]
    NoControl(String),
    #[error("unsupported package format version {0:?} (expected 2.x)")]
    BadFormat(String),
    #[error("control member {0} is larger than the {MAX_CONTROL_MEMBER}-byte limit")]
    ControlTooLarge(u64),
    #[error("cannot decompress {member}: {reason}")]
    Decompress { member: String, reason: String },
    #[error("{0} has no ./control file")]
    NoControlFile(String),
    #[error("bad control file: {0}")]
    BadControl(String),
}

/// The control stanza of a package, fields in file order, values as written (continuation
/// lines keep their leading space).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DebControl {
    pub fields: Vec<(String, String)>,
}

impl DebControl {
    /// The value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn package(&self) -> &str {
        self.get("Package").unwrap_or_default()
    }

    pub fn version(&self) -> &str {
        self.get("Version").unwrap_or_default()
    }

    pub fn architecture(&self) -> &str {
        self.get("Architecture").unwrap_or_default()
    }

    /// Parse and validate a control file's text the way dpkg does (`parse_stanza` in dpkg's
    /// `lib/dpkg/parse.c`, binary-package mode): a line starting with a space or a tab continues
    /// the field before it, a blank line ends the one paragraph, a field given twice (names
    /// compare case-insensitively) is refused, a continuation line holding only whitespace is
    /// refused, the file must end with a newline. Stricter than dpkg where it is lax, never
    /// looser: control characters other than tab and newline (dpkg counts `\r`, `\v` and `\f`
    /// as whitespace and stops at `^Z`), `#` lines, and field names that are not printable ASCII
    /// are refused, so every file accepted here has the same fields in dpkg's eyes.
    pub fn parse(text: &str) -> Result<Self, DebError> {
        let bad = DebError::BadControl;
        if let Some(c) = text.chars().find(|&c| c.is_control() && c != '\n' && c != '\t') {
            return Err(bad(format!("control character {c:?} in the control file")));
        }
        if !text.is_empty() && !text.ends_with('\n') {
            return Err(bad("the control file does not end with a newline".into()));
        }
        // dpkg skips newlines before the paragraph; a blank line ends it.
        let body = text.trim_start_matches('\n');
        if body.is_empty() {
            return Err(bad("expected one paragraph, found 0".into()));
        }
        let (paragraph, blank_after) = match body.split_once("\n\n") {
            Some((_, rest)) if !rest.trim_start_matches('\n').is_empty() => {
                return Err(bad("expected one paragraph, found several".into()));
            }
            Some((paragraph, _)) => (paragraph, true),
            None => (body.strip_suffix('\n').unwrap_or(body), false),
        };
        let lines: Vec<&str> = paragraph.split('\n').collect();
        let last = lines.len() - 1;
        let mut fields: Vec<(String, String)> = Vec::new();
        for (number, line) in lines.into_iter().enumerate() {
            if line.starts_with([' ', '\t']) {
                let Some((name, value)) = fields.last_mut() else {
                    return Err(bad("continuation line before any field".into()));
                };
                if line.trim_matches([' ', '\t']).is_empty() {
                    return Err(bad(format!("blank line in the value of field {name:?}")));
                }
                value.push('\n');
                value.push_str(line);
                continue;
            }
            let end = line.find([' ', '\t', ':']).unwrap_or(line.len());
            let (name, after) = line.split_at(end);
            if name.is_empty()
                || name.starts_with(['-', '#'])
                || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':')
            {
                return Err(bad(format!("bad field name {name:?}")));
            }
            let Some(value) = after.trim_start_matches([' ', '\t']).strip_prefix(':') else {
                return Err(bad(format!("field name {name:?} must be followed by a colon")));
            };
            let value = value.trim_start_matches([' ', '\t']);
            // dpkg refuses an empty value on the file's last line ("end of file before value").
            if value.is_empty() && number == last && !blank_after {
                return Err(bad(format!("field {name:?} has no value at the end of the file")));
            }
            if fields.iter().any(|(seen, _)| seen.eq_ignore_ascii_case(name)) {
                return Err(bad(format!("duplicate value for field {name:?}")));
            }
            fields.push((name.to_owned(), value.to_owned()));
        }
        for (_, value) in &mut fields {
            value.truncate(value.trim_end_matches([' ', '\t', '\n']).len());
        }
        let control = Self { fields };
        for required in ["Package", "Version", "Architecture"] {
            let value = control.get(required).unwrap_or_default();
            if value.is_empty() || value.contains('\n') {
                return Err(DebError::BadControl(format!("missing or multi-line {required} field")));
            }
        }
        let package = control.package();
        let valid_name = package.len() >= 2
            && package.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+-.".contains(&b))
            && package.as_bytes()[0].is_ascii_alphanumeric();
        if !valid_name {
            return Err(DebError::BadControl(format!("invalid package name {package:?}")));
        }
        control
            .version()
            .parse::<quarry_packaging::DebVersion>()
            .map_err(|e| DebError::BadControl(format!("invalid version {:?}: {e}", control.version())))?;
        let arch = control.architecture();
        if !arch.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
            return Err(DebError::BadControl(format!("invalid architecture {arch:?}")));
        }
        Ok(control)
    }
}

/// One `ar` member: name and where its data lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArMember {
    pub name: String,
    pub offset: u64,
    pub size: u64,
}

/// Parse the 60-byte `ar` header at `offset`, checking the member fits in a file of `file_size`.
pub fn parse_ar_header(header: &[u8], offset: u64, file_size: u64) -> Result<ArMember, DebError> {
    if (header.len() as u64) < AR_HEADER {
        return Err(DebError::Truncated(format!("ar member header at byte {offset} is cut off")));
    }
    if &header[58..60] != b"`\n" {
        return Err(DebError::BadAr(format!("bad member header at byte {offset}")));
    }
    let field = |range: std::ops::Range<usize>| String::from_utf8_lossy(&header[range]).trim_end().to_owned();
    let name = field(0..16).trim_end_matches('/').to_owned();
    let size: u64 = field(48..58)
        .parse()
        .map_err(|_| DebError::BadAr(format!("bad member size {:?} at byte {offset}", field(48..58))))?;
    let data = offset + AR_HEADER;
    let end = data.checked_add(size).ok_or_else(|| DebError::BadAr("member size overflows".into()))?;
    if end > file_size {
        return Err(DebError::Truncated(format!("member {name} needs {end} bytes but the file has {file_size}")));
    }
    Ok(ArMember { name, offset: data, size })
}

/// The offset of the member header following `member` (data is padded to an even length).
pub fn next_member(member: &ArMember) -> u64 {
    member.offset + member.size + (member.size & 1)
}

/// The three `ar` members of a `.deb`, after checking the layout.
#[derive(Debug, Clone)]
pub struct DebLayout {
    pub control: ArMember,
    pub data: ArMember,
}

/// A refused package or the store error that kept it from being read.
#[derive(Debug, thiserror::Error)]
pub enum DebReadError {
    #[error(transparent)]
    Deb(#[from] DebError),
    #[error(transparent)]
    Store(#[from] quarry_store::StoreError),
}

/// Walk the `ar` members and read the control stanza.
pub async fn read_deb_control(source: &mut impl RangeSource) -> Result<DebControl, DebReadError> {
    let layout = read_layout(source).await?;
    if layout.control.size > MAX_CONTROL_MEMBER {
        return Err(DebError::ControlTooLarge(layout.control.size).into());
    }
    let member = source.range(layout.control.offset, layout.control.size).await?;
    Ok(control_from_member(&layout.control.name, &member)?)
}

async fn read_layout(source: &mut impl RangeSource) -> Result<DebLayout, DebReadError> {
    let size = source.size();
    let magic = source.range(0, size.min(AR_MAGIC.len() as u64)).await?;
    if magic.as_ref() != AR_MAGIC {
        return Err(DebError::NotAr.into());
    }
    let mut offset = AR_MAGIC.len() as u64;
    let header = |offset: u64| {
        let len = AR_HEADER.min(size.saturating_sub(offset));
        (offset, len)
    };
    let (at, len) = header(offset);
    let first = parse_ar_header(&source.range(at, len).await?, at, size)?;
    if first.name != "debian-binary" {
        return Err(DebError::BadAr(format!("first member is {:?}, not debian-binary", first.name)).into());
    }
    let version = source.range(first.offset, first.size.min(16)).await?;
    let version = String::from_utf8_lossy(&version).trim().to_owned();
    if !version.starts_with("2.") {
        return Err(DebError::BadFormat(version).into());
    }
    offset = next_member(&first);
    // dpkg skips members whose names start with `_` between debian-binary and control.
    let control = loop {
        let (at, len) = header(offset);
        if len == 0 {
            return Err(DebError::NoControl("end of archive".into()).into());
        }
        let member = parse_ar_header(&source.range(at, len).await?, at, size)?;
        offset = next_member(&member);
        if !member.name.starts_with('_') {
            break member;
        }
    };
    if !control.name.starts_with("control.tar") {
        return Err(DebError::NoControl(control.name).into());
    }
    let (at, len) = header(offset);
    if len == 0 {
        return Err(DebError::Truncated("no data member after the control member".into()).into());
    }
    let data = parse_ar_header(&source.range(at, len).await?, at, size)?;
    if !data.name.starts_with("data.tar") {
        return Err(DebError::BadAr(format!("expected a data.tar member after control, found {:?}", data.name)).into());
    }
    Ok(DebLayout { control, data })
}

/// Decompress a control member and parse its `./control`.
pub fn control_from_member(name: &str, member: &[u8]) -> Result<DebControl, DebError> {
    let decompress_error = |e: std::io::Error| DebError::Decompress { member: name.to_owned(), reason: e.to_string() };
    let reader: Box<dyn Read + '_> = match name.strip_prefix("control.tar").unwrap_or(name) {
        "" => Box::new(member),
        ".gz" => Box::new(flate2::read::GzDecoder::new(member)),
        ".xz" => Box::new(xz2::read::XzDecoder::new(member)),
        ".zst" => Box::new(zstd::stream::read::Decoder::new(member).map_err(decompress_error)?),
        other => {
            return Err(DebError::Decompress {
                member: name.to_owned(),
                reason: format!("unknown compression {other:?}"),
            });
        }
    };
    let mut archive = tar::Archive::new(reader.take(MAX_CONTROL_TAR));
    let entries = archive.entries().map_err(decompress_error)?;
    for entry in entries {
        let entry = entry.map_err(decompress_error)?;
        let path = entry.path_bytes();
        let path = path.strip_prefix(b"./").unwrap_or(&path);
        if path != b"control" {
            continue;
        }
        if !entry.header().entry_type().is_file() {
            return Err(DebError::BadControl("./control is not a regular file".into()));
        }
        if entry.size() > MAX_CONTROL_FILE {
            return Err(DebError::BadControl(format!("./control is larger than {MAX_CONTROL_FILE} bytes")));
        }
        let mut text = String::new();
        entry.take(MAX_CONTROL_FILE).read_to_string(&mut text).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => DebError::BadControl("./control is not UTF-8".into()),
            _ => decompress_error(e),
        })?;
        return DebControl::parse(&text);
    }
    Err(DebError::NoControlFile(name.to_owned()))
}

/// Builders of `.deb`s laid out as dpkg-deb does, for tests (here and in other crates, with
/// the `test-support` feature).
#[cfg(any(test, feature = "test-support"))]
#[allow(clippy::unwrap_used, clippy::missing_panics_doc)]
pub mod test_support {
    use std::io::Write;

    use super::AR_MAGIC;

    /// A `.deb` built the way dpkg-deb lays it out, with `control` as given.
    pub fn build_deb(control: &str, compression: &str) -> Vec<u8> {
        let mut data_tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(5);
        header.set_mode(0o644);
        data_tar.append_data(&mut header, "./usr/share/x", &b"hello"[..]).unwrap();
        let (data_name, data) = compress("gz", &data_tar.into_inner().unwrap());
        build_deb_with_data(control, compression, (&format!("data.tar{data_name}"), data))
    }

    /// A `.deb` with `control` and the data member given as (name, bytes).
    pub fn build_deb_with_data(control: &str, compression: &str, (data_name, data): (&str, Vec<u8>)) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_size(control.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, "./control", control.as_bytes()).unwrap();
        let control_tar = tar.into_inner().unwrap();
        let (name, member) = compress(compression, &control_tar);
        ar(&[("debian-binary", b"2.0\n".to_vec()), (&format!("control.tar{name}"), member), (data_name, data)])
    }

    pub fn compress(kind: &str, bytes: &[u8]) -> (&'static str, Vec<u8>) {
        match kind {
            "gz" => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                e.write_all(bytes).unwrap();
                (".gz", e.finish().unwrap())
            }
            "xz" => {
                let mut e = xz2::write::XzEncoder::new(Vec::new(), 6);
                e.write_all(bytes).unwrap();
                (".xz", e.finish().unwrap())
            }
            "zst" => (".zst", zstd::encode_all(bytes, 3).unwrap()),
            _ => ("", bytes.to_vec()),
        }
    }

    pub fn ar(members: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut out = AR_MAGIC.to_vec();
        for (name, data) in members {
            writeln!(out, "{:<16}{:<12}{:<6}{:<6}{:<8}{:<10}`", name, 0, 0, 0, 100644, data.len()).unwrap();
            out.extend_from_slice(data);
            if data.len() % 2 == 1 {
                out.push(b'\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    const CONTROL: &str = "Package: hello-quarry\nVersion: 1.0-1\nArchitecture: amd64\nMaintainer: Q <q@example.com>\nDepends: libc6 (>= 2.17), dep-a | dep-b\nDescription: a test\n Long line one.\n .\n Line two.\n";

    fn read(bytes: Vec<u8>) -> Result<DebControl, DebReadError> {
        let mut source = MemorySource(bytes.into());
        futures_util::FutureExt::now_or_never(read_deb_control(&mut source)).unwrap()
    }

    #[test]
    fn control_is_read_from_every_compression() {
        for kind in ["gz", "xz", "zst", "none"] {
            let control = read(build_deb(CONTROL, kind)).unwrap();
            assert_eq!(control.package(), "hello-quarry");
            assert_eq!(control.version(), "1.0-1");
            assert_eq!(control.get("depends"), Some("libc6 (>= 2.17), dep-a | dep-b"));
            assert_eq!(control.get("Description"), Some("a test\n Long line one.\n .\n Line two."));
        }
    }

    #[test]
    fn broken_packages_are_refused_with_a_reason() {
        let good = build_deb(CONTROL, "xz");
        let err = |bytes: Vec<u8>| match read(bytes) {
            Err(DebReadError::Deb(e)) => e,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert_eq!(err(b"garbage".to_vec()), DebError::NotAr);
        assert!(matches!(err(good[..good.len() - 10].to_vec()), DebError::Truncated(_)));
        assert!(matches!(err(good[..200].to_vec()), DebError::Truncated(_)));
        let no_control = ar(&[("debian-binary", b"2.0\n".to_vec()), ("data.tar.gz", compress("gz", b"x").1)]);
        assert!(matches!(err(no_control), DebError::NoControl(_)));
        let empty_tar = tar::Builder::new(Vec::new()).into_inner().unwrap();
        let no_file = ar(&[("debian-binary", b"2.0\n".to_vec()), ("control.tar", empty_tar), ("data.tar", Vec::new())]);
        assert!(matches!(err(no_file), DebError::NoControlFile(_)));
        let corrupt = ar(&[
            ("debian-binary", b"2.0\n".to_vec()),
            ("control.tar.xz", b"not xz at all".to_vec()),
            ("data.tar", Vec::new()),
        ]);
        assert!(matches!(err(corrupt), DebError::Decompress { .. }));
        let v3 = ar(&[("debian-binary", b"3.0\n".to_vec())]);
        assert!(matches!(err(v3), DebError::BadFormat(_)));
    }

    #[test]
    fn control_files_are_validated() {
        assert!(DebControl::parse("Package: x\nVersion: 1\nArchitecture: amd64\n").is_err(), "one-letter name");
        assert!(DebControl::parse("Package: Hello\nVersion: 1\nArchitecture: amd64\n").is_err());
        assert!(DebControl::parse("Package: hello\nArchitecture: amd64\n").is_err());
        assert!(DebControl::parse("Package: hello\nVersion: a:b\nArchitecture: amd64\n").is_err());
        assert!(DebControl::parse("Package: hello\nVersion: 1\nArchitecture: amd64\n\nPackage: two\n").is_err());
        assert!(DebControl::parse("Package: hello\nVersion: 1:2.0~rc1-3\nArchitecture: all\n").is_ok());
    }

    #[test]
    fn control_paragraphs_parse_as_dpkg_parses_them() {
        const HEAD: &str = "Package: hello\nVersion: 1\nArchitecture: all\n";
        let parse = |tail: &str| DebControl::parse(&format!("{HEAD}{tail}"));
        // A tab starts a continuation line, as a space does: no second Package field.
        let tab = parse("Description: x\n\tPackage: evil\n").unwrap();
        assert_eq!(tab.package(), "hello");
        assert_eq!(tab.fields.len(), 4);
        assert_eq!(tab.get("Description"), Some("x\n\tPackage: evil"));
        // Duplicates are refused, whatever their case (dpkg: "duplicate value for ... field").
        for dup in ["Package: evil\n", "X-A: 1\nx-a: 2\n", "version: 2\n"] {
            let err = parse(dup).unwrap_err().to_string();
            assert!(err.contains("duplicate value for field"), "{dup:?}: {err}");
        }
        // Blank continuation lines, comments, a missing final newline, a continuation first.
        for bad in [
            format!("{HEAD}Description: x\n \n more\n"),
            format!("{HEAD}Description: x\n\t\n"),
            format!("# comment\n{HEAD}"),
            format!("{HEAD}# comment\n"),
            HEAD.trim_end().to_owned(),
            format!(" {HEAD}"),
            format!("{HEAD}-X: y\n"),
            format!("{HEAD}NoColon\n"),
            format!("{HEAD}X-Y:\n"),
            format!("{HEAD}X: 1\r\n"),
            format!("{HEAD}\x0bX: 1\n"),
            format!("{HEAD}X: a\x1a\n"),
            format!("{HEAD}\nPackage: two\n"),
            String::new(),
            "\n\n".to_owned(),
        ] {
            assert!(DebControl::parse(&bad).is_err(), "accepted {bad:?}");
        }
        // What dpkg accepts and means the same by.
        let spaced = DebControl::parse("\n\nPackage : hello\nVersion:1\nArchitecture:\tall\nX-Y:\n\n\n").unwrap();
        assert_eq!(spaced.fields[0], ("Package".to_owned(), "hello".to_owned()));
        assert_eq!(spaced.version(), "1");
        assert_eq!(spaced.architecture(), "all");
        assert_eq!(spaced.get("X-Y"), Some(""));
        let trailing = parse("Description: a  \n b \n").unwrap();
        assert_eq!(trailing.get("Description"), Some("a  \n b"));
    }

    #[test]
    fn a_control_bomb_stops_at_the_cap() {
        // 100 MiB of zeros behind a tiny gzip member: refused without inflating it all.
        let zeros = vec![0u8; 100 * 1024 * 1024];
        let (_, gz) = compress("gz", &zeros);
        let bomb = ar(&[("debian-binary", b"2.0\n".to_vec()), ("control.tar.gz", gz), ("data.tar", Vec::new())]);
        assert!(read(bomb).is_err());
    }
}
