//! Small `.deb`s and `.rpm`s built in process by `quarry-builder` (what `quarry package`
//! writes), for suites that need many packages and many versions of one: no `dpkg-deb` or
//! `rpmbuild` run per package.

use std::path::{Path, PathBuf};

use quarry_builder::{Compression, DebControl, Item, RpmCompression, RpmSpec, build_deb, build_rpm};

const MTIME: u64 = 1_795_000_000;

/// A file under `dir/src/` for a package's payload.
fn payload(dir: &Path, name: &str, version: &str) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).expect("src dir");
    let path = src.join(format!("{name}-{version}"));
    std::fs::write(&path, format!("{name} {version}\n")).expect("payload");
    path
}

/// `name_version_amd64.deb` in `dir`, one small file inside.
pub fn deb(dir: &Path, name: &str, version: &str) -> PathBuf {
    let control = DebControl::default()
        .field("Package", name)
        .field("Version", version)
        .field("Architecture", "amd64")
        .field("Maintainer", "Quarry Tests <tests@example.invalid>")
        .field("Section", "misc")
        .field("Priority", "optional")
        .field("Description", format!("{name} for the consistency suite\n Built in process."));
    let items = vec![(
        format!("usr/share/doc/{name}/VERSION"),
        Item::File { source: payload(dir, name, version), mode: 0o644 },
    )];
    build_deb(&control, items, dir, Compression::Gzip { level: 1 }, MTIME).expect("build .deb").path
}

/// `name-version-1.x86_64.rpm` in `dir`, one small file inside.
pub fn rpm(dir: &Path, name: &str, version: &str) -> PathBuf {
    let spec = RpmSpec {
        name: name.into(),
        version: version.into(),
        release: "1".into(),
        arch: "x86_64".into(),
        license: "MIT".into(),
        summary: format!("{name} for the consistency suite"),
        description: "Built in process.".into(),
        ..RpmSpec::default()
    };
    let items = vec![(
        format!("usr/share/doc/{name}/VERSION"),
        Item::File { source: payload(dir, name, version), mode: 0o644 },
    )];
    build_rpm(&spec, items, dir, RpmCompression::Gzip { level: 1 }, 1_795_000_000, None).expect("build .rpm").path
}
