//! `.rpm` packages through the `rpm` crate's `PackageBuilder`: files with modes and root
//! ownership, directories, symlinks, dependencies and weak dependencies, a zstd (TheRock's
//! `w9.zstdio`) or gzip payload, every time clamped to `source_date` so equal input gives
//! equal bytes. The crate holds the payload in memory while it builds (rpm-rs/rpm#100).

use std::path::{Path, PathBuf};

use crate::deb::Item;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpmCompression {
    Zstd { level: i32 },
    Gzip { level: u32 },
}

impl Default for RpmCompression {
    fn default() -> Self {
        Self::Zstd { level: 19 }
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
/// RSA or EdDSA, timestamped `source_date`) when `signing_key` holds an armored OpenPGP secret key.
pub fn build_rpm(
    spec: &RpmSpec,
    items: impl IntoIterator<Item = (String, Item)>,
    out_dir: &Path,
    compression: RpmCompression,
    source_date: u32,
    signing_key: Option<&str>,
) -> Result<RpmReport, RpmBuildError> {
    for (field, value) in
        [("name", &spec.name), ("version", &spec.version), ("release", &spec.release), ("arch", &spec.arch)]
    {
        if value.trim().is_empty() {
            return Err(RpmBuildError::MissingField { field });
        }
    }
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
    let mut items: Vec<(String, Item)> = items
        .into_iter()
        .map(|(path, item)| match crate::deb::clean_path(&path) {
            Some(clean) => Ok((clean, item)),
            None => Err(RpmBuildError::BadPath(path)),
        })
        .collect::<Result<_, _>>()?;
    items.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, item) in items {
        let dest = format!("/{path}");
        match item {
            Item::File { source, mode } => {
                builder.with_file(
                    &source,
                    ::rpm::FileOptions::new(dest).permissions(mode as u16).user("root").group("root"),
                )?;
            }
            Item::Dir { mode } => {
                builder.with_dir_entry(
                    ::rpm::FileOptions::dir(dest).permissions(mode as u16).user("root").group("root"),
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
    let package = match signing_key {
        Some(key) => builder.build_and_sign(::rpm::signature::pgp::Signer::from_asc(key)?)?,
        None => builder.build()?,
    };
    let path = out_dir.join(format!("{}-{}-{}.{}.rpm", spec.name, spec.version, spec.release, spec.arch));
    let mut tmp = tempfile::NamedTempFile::new_in(out_dir)?;
    package.write(&mut std::io::BufWriter::new(tmp.as_file_mut()))?;
    tmp.as_file().sync_all()?;
    let size = tmp.as_file().metadata()?.len();
    tmp.persist(&path).map_err(|e| RpmBuildError::Io(e.error))?;
    Ok(RpmReport { path, size })
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
