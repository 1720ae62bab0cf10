//! `.rpm` packages: files with modes and root ownership, directories, symlinks, dependencies
//! and weak dependencies, a zstd (TheRock's `w9.zstdio`) or gzip payload, every time
//! `source_date` so equal input gives equal bytes. The `rpm` crate's `PackageBuilder` makes the
//! header (of a skeleton whose files are empty: it would hold the compressed payload in memory,
//! rpm-rs/rpm#100) and signs; the payload is streamed once to a temporary file beside the
//! output with every digest computed on the way ([`build_rpm_threads`]).

use std::collections::BTreeMap;
use std::io::{self, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use crate::compress::{Compression, Sha256Writer, encoder};
use crate::tree::Item;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpmCompression {
    Zstd { level: i32 },
    Gzip { level: u32 },
}

/// TheRock's `w9.zstdio`.
impl Default for RpmCompression {
    fn default() -> Self {
        Self::Zstd { level: 9 }
    }
}

impl RpmCompression {
    fn codec(self) -> Compression {
        match self {
            Self::Zstd { level } => Compression::Zstd { level },
            Self::Gzip { level } => Compression::Gzip { level },
        }
    }

    /// `PAYLOADFLAGS`: the level, as rpmbuild writes it.
    fn flags(self) -> String {
        match self {
            Self::Zstd { level } => level.to_string(),
            Self::Gzip { level } => level.to_string(),
        }
    }
}

/// The header fields of one package; dependencies as `name [op version]` (`op`: `=`, `<`,
/// `<=`, `>`, `>=`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RpmSpec {
    pub name: String,
    pub version: String,
    pub release: String,
    pub arch: String,
    pub license: String,
    pub summary: String,
    pub description: String,
    pub url: String,
    pub vendor: String,
    pub packager: String,
    pub group: String,
    pub requires: Vec<String>,
    pub provides: Vec<String>,
    pub recommends: Vec<String>,
    pub suggests: Vec<String>,
    pub conflicts: Vec<String>,
    pub obsoletes: Vec<String>,
    /// `(author, text, unix time)` changelog entries; time 0 means `source_date`.
    pub changelog: Vec<(String, String, u64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum RpmBuildError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("building the rpm: {0}")]
    Rpm(#[from] ::rpm::Error),
    #[error("install path {0:?} must be relative, without `.` or `..` segments")]
    BadPath(String),
    #[error("dependency {0:?}: expected `name`, or `name OP version` with OP one of = < <= > >=")]
    BadDependency(String),
    #[error("{field} is required")]
    MissingField { field: &'static str },
    #[error("{0} is given twice")]
    Duplicate(String),
    #[error("{path}: {source}")]
    Source { path: PathBuf, source: std::io::Error },
    #[error("{0}: files of 4 GiB or more are not supported in rpm payloads")]
    TooLarge(String),
    #[error("internal: {0}")]
    Layout(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpmReport {
    pub path: PathBuf,
    pub size: u64,
}

/// `name [op version]` as an rpm dependency.
pub fn dependency(text: &str) -> Result<::rpm::Dependency, RpmBuildError> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let bad = || RpmBuildError::BadDependency(text.to_owned());
    match parts.as_slice() {
        [name] => Ok(::rpm::Dependency::any(*name)),
        [name, op, version] => Ok(match *op {
            "=" | "==" => ::rpm::Dependency::eq(*name, *version),
            "<" => ::rpm::Dependency::less(*name, *version),
            "<=" => ::rpm::Dependency::less_eq(*name, *version),
            ">" => ::rpm::Dependency::greater(*name, *version),
            ">=" => ::rpm::Dependency::greater_eq(*name, *version),
            _ => return Err(bad()),
        }),
        _ => Err(bad()),
    }
}

/// Write `{out_dir}/{name}-{version}-{release}.{arch}.rpm`, signed (header and header+payload,
/// RSA or EdDSA, timestamped `source_date`) when `signing_key` holds an armored OpenPGP secret
/// key; compressing on one worker thread.
pub fn build_rpm(
    spec: &RpmSpec,
    items: impl IntoIterator<Item = (String, Item)>,
    out_dir: &Path,
    compression: RpmCompression,
    source_date: u32,
    signing_key: Option<&str>,
) -> Result<RpmReport, RpmBuildError> {
    build_rpm_threads(spec, items, out_dir, compression, source_date, signing_key, 1)
}

/// [`build_rpm`] with `threads` compression workers (same bytes whatever the count).
///
/// The `rpm` crate builds the header of a skeleton package (every regular file empty, so its
/// payload is a few bytes); the real payload is streamed once into a temporary file beside the
/// output, each file's SHA-256 and size and the payload's digests computed on the way; the
/// skeleton header gets the real sizes and digests, then lead, signature header, header and
/// the payload are written out. Memory stays bounded whatever the payload's size.
pub fn build_rpm_threads(
    spec: &RpmSpec,
    items: impl IntoIterator<Item = (String, Item)>,
    out_dir: &Path,
    compression: RpmCompression,
    source_date: u32,
    signing_key: Option<&str>,
    threads: u32,
) -> Result<RpmReport, RpmBuildError> {
    for (field, value) in
        [("name", &spec.name), ("version", &spec.version), ("release", &spec.release), ("arch", &spec.arch)]
    {
        if value.trim().is_empty() {
            return Err(RpmBuildError::MissingField { field });
        }
    }
    let mut entries = BTreeMap::new();
    for (path, item) in items {
        let clean = crate::deb::clean_path(&path).ok_or_else(|| RpmBuildError::BadPath(path.clone()))?;
        if entries.insert(clean.clone(), item).is_some() {
            return Err(RpmBuildError::Duplicate(clean));
        }
    }
    let skeleton = skeleton(spec, &entries, compression, source_date)?.build()?;
    let layout = Layout::of(&skeleton.metadata.header, &entries)?;
    let mut payload_tmp = tempfile::NamedTempFile::new_in(out_dir)?;
    let payload = write_payload(&layout, &entries, compression, threads, payload_tmp.reopen()?)?;
    let mut metadata = skeleton.metadata;
    metadata.header = real_header(&metadata.header, &layout, &payload, compression)?;
    let header_bytes = metadata.header_bytes()?;
    let mut signature = ::rpm::SignatureHeaderBuilder::from_existing(&metadata.signature)?
        .set_content_length(header_bytes.len() as u64 + payload.compressed_size)
        .calculate_digests(&header_bytes);
    if let Some(key) = signing_key {
        use ::rpm::signature::Signing as _;
        let signer = ::rpm::signature::pgp::Signer::from_asc(key)?;
        let now = u32::try_from(jiff::Timestamp::now().as_second()).unwrap_or(u32::MAX);
        let at = ::rpm::Timestamp(source_date.min(now));
        signature = signature.add_openpgp_signature(signer.sign(header_bytes.as_slice(), at)?);
    }
    metadata.signature = signature.build()?;
    let path = out_dir.join(format!("{}-{}-{}.{}.rpm", spec.name, spec.version, spec.release, spec.arch));
    let mut tmp = tempfile::NamedTempFile::new_in(out_dir)?;
    {
        let mut out = BufWriter::new(tmp.as_file_mut());
        metadata.write(&mut out)?;
        payload_tmp.as_file_mut().seek(io::SeekFrom::Start(0))?;
        io::copy(payload_tmp.as_file_mut(), &mut out)?;
        out.flush()?;
    }
    tmp.as_file().sync_all()?;
    let size = tmp.as_file().metadata()?.len();
    tmp.persist(&path).map_err(|e| RpmBuildError::Io(e.error))?;
    Ok(RpmReport { path, size })
}

/// A package builder holding every header field and every entry, regular files empty.
fn skeleton(
    spec: &RpmSpec,
    entries: &BTreeMap<String, Item>,
    compression: RpmCompression,
    source_date: u32,
) -> Result<::rpm::PackageBuilder, RpmBuildError> {
    let compression = match compression {
        RpmCompression::Zstd { level } => ::rpm::CompressionWithLevel::Zstd(level),
        RpmCompression::Gzip { level } => ::rpm::CompressionWithLevel::Gzip(level),
    };
    let config = ::rpm::BuildConfig::default().compression(compression).source_date(source_date);
    let license = if spec.license.is_empty() { "Unknown" } else { spec.license.as_str() };
    let mut builder = ::rpm::PackageBuilder::new(&spec.name, &spec.version, license, &spec.arch, &spec.summary);
    builder.using_config(config).release(spec.release.clone()).description(spec.description.clone());
    for (value, set) in [
        (&spec.url, ::rpm::PackageBuilder::url as fn(&mut ::rpm::PackageBuilder, String) -> &mut ::rpm::PackageBuilder),
        (&spec.vendor, ::rpm::PackageBuilder::vendor),
        (&spec.packager, ::rpm::PackageBuilder::packager),
        (&spec.group, ::rpm::PackageBuilder::group),
    ] {
        if !value.is_empty() {
            set(&mut builder, value.clone());
        }
    }
    builder.build_host("quarry");
    for (author, text, time) in &spec.changelog {
        let time = if *time == 0 { source_date } else { u32::try_from(*time).unwrap_or(u32::MAX) };
        builder.add_changelog_entry(author.clone(), text.clone(), time);
    }
    for (path, item) in entries {
        let dest = format!("/{path}");
        match item {
            Item::File { mode, .. } => {
                let options = ::rpm::FileOptions::new(dest).permissions(*mode as u16).user("root").group("root");
                builder.with_file_contents(Vec::new(), options)?;
            }
            Item::Dir { mode } => {
                builder.with_dir_entry(
                    ::rpm::FileOptions::dir(dest).permissions(*mode as u16).user("root").group("root"),
                )?;
            }
            Item::Symlink { target } => {
                builder.with_symlink(::rpm::FileOptions::symlink(dest, target).user("root").group("root"))?;
            }
        }
    }
    for (list, add) in [
        (
            &spec.requires,
            ::rpm::PackageBuilder::requires
                as fn(&mut ::rpm::PackageBuilder, ::rpm::Dependency) -> &mut ::rpm::PackageBuilder,
        ),
        (&spec.provides, ::rpm::PackageBuilder::provides),
        (&spec.recommends, ::rpm::PackageBuilder::recommends),
        (&spec.suggests, ::rpm::PackageBuilder::suggests),
        (&spec.conflicts, ::rpm::PackageBuilder::conflicts),
        (&spec.obsoletes, ::rpm::PackageBuilder::obsoletes),
    ] {
        for dep in list {
            add(&mut builder, dependency(dep)?);
        }
    }
    Ok(builder)
}

/// The skeleton header's file arrays, in payload order (the header's, sorted by path).
struct Layout {
    modes: Vec<u16>,
    inodes: Vec<u32>,
    mtimes: Vec<u32>,
    /// The skeleton's sizes: symlink targets' lengths, 0 for files and directories.
    sizes: Vec<u32>,
    digests: Vec<String>,
}

impl Layout {
    /// Reads the arrays back and checks that the header lists exactly `entries`, in order.
    fn of(header: &::rpm::Header<::rpm::IndexTag>, entries: &BTreeMap<String, Item>) -> Result<Self, RpmBuildError> {
        use ::rpm::IndexTag as T;
        let files_of = |tag| header.get_entry_data_as_u32_array(tag).or_else(|_| Ok::<_, ::rpm::Error>(Vec::new()));
        let basenames = header.get_entry_data_as_string_array(T::RPMTAG_BASENAMES).unwrap_or_default();
        let dirnames = header.get_entry_data_as_string_array(T::RPMTAG_DIRNAMES).unwrap_or_default();
        let dirindexes = files_of(T::RPMTAG_DIRINDEXES)?;
        let names = basenames.iter().zip(&dirindexes).map(|(base, &dir)| {
            let dir = dirnames.get(dir as usize).copied().unwrap_or_default();
            format!("{}{base}", dir.trim_start_matches('/'))
        });
        if !names.eq(entries.keys().cloned()) {
            return Err(RpmBuildError::Layout("the skeleton header lists other files than the payload".into()));
        }
        let layout = Self {
            modes: header.get_entry_data_as_u16_array(T::RPMTAG_FILEMODES).unwrap_or_default(),
            inodes: files_of(T::RPMTAG_FILEINODES)?,
            mtimes: files_of(T::RPMTAG_FILEMTIMES)?,
            sizes: files_of(T::RPMTAG_FILESIZES)?,
            digests: header
                .get_entry_data_as_string_array(T::RPMTAG_FILEDIGESTS)
                .unwrap_or_default()
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        let n = entries.len();
        if [layout.modes.len(), layout.inodes.len(), layout.mtimes.len(), layout.sizes.len(), layout.digests.len()]
            .iter()
            .any(|&len| len != n)
        {
            return Err(RpmBuildError::Layout(format!("file arrays of the skeleton header are not {n} long")));
        }
        Ok(layout)
    }
}

/// What streaming the payload found out.
struct Payload {
    /// Every entry's size (regular files: their bytes) and SHA-256 (regular files only).
    sizes: Vec<u64>,
    digests: Vec<String>,
    compressed_sha256: String,
    compressed_size: u64,
    raw_sha256: String,
}

/// The cpio (`newc`, as rpm writes it) of `entries` through the compressor into `out`.
fn write_payload(
    layout: &Layout,
    entries: &BTreeMap<String, Item>,
    compression: RpmCompression,
    threads: u32,
    out: std::fs::File,
) -> Result<Payload, RpmBuildError> {
    let compressed = Sha256Writer::new(BufWriter::with_capacity(1 << 20, out));
    let mut raw = Sha256Writer::new(encoder(compression.codec(), threads, compressed)?);
    let mut sizes = Vec::with_capacity(entries.len());
    let mut digests = layout.digests.clone();
    let mut buf = vec![0u8; 1 << 20];
    for (i, (path, item)) in entries.iter().enumerate() {
        let name = format!("./{path}");
        let (mode, ino, mtime) = (u32::from(layout.modes[i]), layout.inodes[i], layout.mtimes[i]);
        match item {
            Item::File { source, .. } => {
                let at_source = |e: io::Error| RpmBuildError::Source { path: source.clone(), source: e };
                let mut file = crate::tree::open_source(source).map_err(at_source)?;
                let size = file.metadata().map_err(at_source)?.len();
                let size32 = u32::try_from(size).map_err(|_| RpmBuildError::TooLarge(path.clone()))?;
                cpio_header(&mut raw, &name, mode, ino, mtime, size32)?;
                let mut hasher = sha2::Sha256::new();
                let mut left = size;
                while left > 0 {
                    let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
                    let n = file.read(&mut buf[..want]).map_err(at_source)?;
                    if n == 0 {
                        return Err(at_source(io::Error::other("the file shrank while it was packaged")));
                    }
                    hasher.update(&buf[..n]);
                    raw.write_all(&buf[..n])?;
                    left -= n as u64;
                }
                pad4(&mut raw, size)?;
                digests[i] = hex::encode(hasher.finalize());
                sizes.push(size);
            }
            Item::Symlink { target } => {
                cpio_header(&mut raw, &name, mode, ino, mtime, layout.sizes[i])?;
                raw.write_all(target.as_bytes())?;
                pad4(&mut raw, target.len() as u64)?;
                sizes.push(u64::from(layout.sizes[i]));
            }
            Item::Dir { .. } => {
                cpio_header(&mut raw, &name, mode, ino, mtime, 0)?;
                sizes.push(0);
            }
        }
    }
    cpio_header(&mut raw, "TRAILER!!!", 0, 0, 0, 0)?;
    let (encoder, raw_sha256, _) = raw.finish();
    let (mut file, compressed_sha256, compressed_size) = encoder.finish_box()?.finish();
    file.flush()?;
    Ok(Payload { sizes, digests, compressed_sha256, compressed_size, raw_sha256 })
}

/// One `newc` header (`070701`, uid/gid 0, one link) and its name, padded to 4 bytes.
fn cpio_header(out: &mut impl Write, name: &str, mode: u32, ino: u32, mtime: u32, size: u32) -> io::Result<()> {
    let nlink = 1;
    let namesize = name.len() + 1;
    write!(out, "070701{ino:08x}{mode:08x}{:08x}{:08x}{nlink:08x}{mtime:08x}{size:08x}", 0, 0)?;
    write!(out, "{:08x}{:08x}{:08x}{:08x}{namesize:08x}{:08x}", 0, 0, 0, 0, 0)?;
    out.write_all(name.as_bytes())?;
    out.write_all(b"\0")?;
    pad4(out, (110 + namesize) as u64)
}

fn pad4(out: &mut impl Write, len: u64) -> io::Result<()> {
    let pad = (4 - len % 4) % 4;
    out.write_all(&[0u8; 3][..pad as usize])
}

/// The skeleton's header with the payload's sizes and digests.
fn real_header(
    skeleton: &::rpm::Header<::rpm::IndexTag>,
    layout: &Layout,
    payload: &Payload,
    compression: RpmCompression,
) -> Result<::rpm::Header<::rpm::IndexTag>, RpmBuildError> {
    use ::rpm::{IndexData as D, IndexTag as T};
    let total: u64 = payload.sizes.iter().sum::<u64>();
    let extra = layout.sizes.iter().map(|&s| u64::from(s)).sum::<u64>();
    let installed = total.max(extra);
    let mut sizes = Vec::with_capacity(payload.sizes.len());
    for &size in &payload.sizes {
        sizes.push(u32::try_from(size).unwrap_or(u32::MAX));
    }
    let mut entries = Vec::new();
    for (tag, data) in skeleton.get_all_entries()? {
        let data = match tag {
            t if t == T::RPMTAG_HEADERIMMUTABLE as u32 => continue,
            t if t == T::RPMTAG_SIZE as u32 => match u32::try_from(installed) {
                Ok(size) => D::Int32(vec![size]),
                Err(_) => {
                    entries.push(::rpm::HeaderEntry::new(T::RPMTAG_LONGSIZE as u32, D::Int64(vec![installed])));
                    continue;
                }
            },
            t if t == T::RPMTAG_FILESIZES as u32 => D::Int32(sizes.clone()),
            t if t == T::RPMTAG_FILEDIGESTS as u32 => D::StringArray(payload.digests.clone()),
            t if t == T::RPMTAG_PAYLOADSHA256 as u32 => D::StringArray(vec![payload.compressed_sha256.clone()]),
            t if t == T::RPMTAG_PAYLOADSHA256ALT as u32 => D::StringArray(vec![payload.raw_sha256.clone()]),
            t if t == T::RPMTAG_PAYLOADFLAGS as u32 => D::StringTag(compression.flags()),
            _ => data,
        };
        entries.push(::rpm::HeaderEntry::new(tag, data));
    }
    Ok(::rpm::Header::from_entries(entries, T::RPMTAG_HEADERIMMUTABLE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> RpmSpec {
        RpmSpec {
            name: "quarry-demo".into(),
            version: "7.1.0~dev20260820".into(),
            release: "12345".into(),
            arch: "x86_64".into(),
            license: "MIT".into(),
            summary: "a demo".into(),
            description: "Built by the tests.".into(),
            requires: vec!["amdrocm-fft-host7.1 = 7.1.0~dev20260820-12345".into(), "python3 >= 3.6.8".into()],
            ..RpmSpec::default()
        }
    }

    #[test]
    fn packages_are_reproducible() {
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("f"), vec![1u8; 4096]).unwrap();
        let items = || {
            vec![
                ("opt/rocm/lib/libx.so.1".to_owned(), Item::File { source: src.path().join("f"), mode: 0o644 }),
                ("opt/rocm/lib/libx.so".to_owned(), Item::Symlink { target: "libx.so.1".into() }),
                ("opt/rocm/lib".to_owned(), Item::Dir { mode: 0o755 }),
            ]
        };
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let x = build_rpm(&spec(), items(), a.path(), RpmCompression::default(), 1_795_000_000, None).unwrap();
        let y = build_rpm(&spec(), items(), b.path(), RpmCompression::default(), 1_795_000_000, None).unwrap();
        assert_eq!(std::fs::read(&x.path).unwrap(), std::fs::read(&y.path).unwrap());
        assert_eq!(x.path.file_name().unwrap(), "quarry-demo-7.1.0~dev20260820-12345.x86_64.rpm");
    }

    #[test]
    fn bad_input_is_refused() {
        let out = tempfile::tempdir().unwrap();
        let err = build_rpm(
            &spec(),
            vec![("../x".to_owned(), Item::Dir { mode: 0o755 })],
            out.path(),
            RpmCompression::default(),
            0,
            None,
        );
        assert!(matches!(err, Err(RpmBuildError::BadPath(_))));
        let mut bad = spec();
        bad.requires = vec!["x ~= 1".into()];
        assert!(matches!(
            build_rpm(&bad, Vec::new(), out.path(), RpmCompression::default(), 0, None),
            Err(RpmBuildError::BadDependency(_))
        ));
        let mut nameless = spec();
        nameless.name.clear();
        assert!(matches!(
            build_rpm(&nameless, Vec::new(), out.path(), RpmCompression::default(), 0, None),
            Err(RpmBuildError::MissingField { field: "name" })
        ));
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
    }
}
