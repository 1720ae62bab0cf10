//! From an artifacts directory to package items: the directory read into an
//! [`ArtifactIndex`], and a package's content paths (manifest lines naming directories inside
//! artifact directories) walked into items under the install prefix, the way TheRock's
//! `copy_package_contents` merges each source directory's contents into the prefix.
//!
//! Nothing outside the artifacts directory is read, and nothing is read through a link:
//!
//! - a manifest line with `..` or an absolute path is refused, and so is a content path whose
//!   artifact directory, or any directory on the way down to it, is a symlink;
//! - the walk never follows a link (links become [`Item::Symlink`]), and the builders open an
//!   [`Item::File`]'s source with [`open_source`], which refuses a symlink put in its place;
//! - a symlink item must stay inside the package twice: as text (absolute, or more `..` than
//!   it has parents, is refused) and where it resolves through the package's other links
//!   ([`quarry_artifacts::resolve`], the floor being the package root), so a chain of links
//!   that each look inside cannot lead out of wherever the package is unpacked;
//! - an item inside a path another content path made a symlink is refused (installing it
//!   would write through the link).

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use quarry_artifacts::archive::mode_of;
use quarry_artifacts::{LinkRefusal, MANIFEST, Node, link_stays_inside, resolve_link};
use quarry_packaging::therock::{ArtifactIndex, ContentPath};

/// What goes into the package, by install path (relative, no leading `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A regular file copied from `source`.
    File { source: PathBuf, mode: u32 },
    /// A directory.
    Dir { mode: u32 },
    /// A symbolic link to `target` (may be relative).
    Symlink { target: String },
}

#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{dir}/{MANIFEST}: line {line:?} leaves the artifact (absolute or `..`)")]
    HostileManifest { dir: String, line: String },
    #[error("{dir}/{MANIFEST} names {line:?}, which is not in the artifact")]
    MissingRoot { dir: String, line: String },
    #[error("{path}: symlink to {target:?} points outside the package")]
    EscapingLink { path: String, target: String },
    #[error("{path}: symlink to {target:?} leads outside the package once the links on its way are followed: {reason}")]
    ResolvesOutside { path: String, target: String, reason: LinkRefusal },
    #[error("{}: a symlink on the way to {dir}/{line} (content is never read through a link)", link.display())]
    LinkInPath { dir: String, line: String, link: PathBuf },
    #[error("{path}: inside {link}, which another content path made a symlink")]
    UnderLink { path: String, link: String },
    #[error("{0}: not a regular file, directory or symlink")]
    Special(String),
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> TreeError + '_ {
    move |source| TreeError::Io { path: path.to_path_buf(), source }
}

/// Every immediate subdirectory of `dir` with its manifest lines (none when it has no manifest).
pub fn read_artifacts(dir: &Path) -> Result<ArtifactIndex, TreeError> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        if !entry.file_type().map_err(io_err(&entry.path()))?.is_dir() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let manifest = entry.path().join(MANIFEST);
        let lines = match std::fs::read_to_string(&manifest) {
            Ok(text) => text.lines().map(str::to_owned).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(TreeError::Io { path: manifest, source: e }),
        };
        dirs.push((name, lines));
    }
    Ok(ArtifactIndex::new(dirs))
}

fn relative_ok(path: &str) -> bool {
    !path.starts_with('/') && path.split('/').all(|s| s != ".." && !s.contains('\\'))
}

/// The items of a package: each content path's directory walked (symlinks kept as links),
/// placed under `install_prefix` (e.g. `/opt/rocm/core-7.1`). Later sources replace earlier
/// ones at the same path, as a merging copy does.
pub fn collect_items(
    artifacts_dir: &Path,
    contents: &[ContentPath],
    install_prefix: &str,
) -> Result<Vec<(String, Item)>, TreeError> {
    let prefix = install_prefix.trim_matches('/');
    let mut items: BTreeMap<String, Item> = BTreeMap::new();
    for content in contents {
        let line = content.path.trim().trim_end_matches('/');
        if !relative_ok(line) || !relative_ok(&content.dir) || content.dir.contains('/') {
            return Err(TreeError::HostileManifest { dir: content.dir.clone(), line: line.to_owned() });
        }
        // Every directory from the artifact directory down to the content, none a link.
        let mut source = artifacts_dir.to_path_buf();
        for part in std::iter::once(content.dir.as_str()).chain(line.split('/').filter(|p| !p.is_empty())) {
            source.push(part);
            match std::fs::symlink_metadata(&source) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(TreeError::LinkInPath {
                        dir: content.dir.clone(),
                        line: line.to_owned(),
                        link: source,
                    });
                }
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(TreeError::MissingRoot { dir: content.dir.clone(), line: line.to_owned() }),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(TreeError::MissingRoot { dir: content.dir.clone(), line: line.to_owned() });
                }
                Err(e) => return Err(TreeError::Io { path: source, source: e }),
            }
        }
        walk(&source, prefix, &mut items)?;
    }
    check_links(&items)?;
    Ok(items.into_iter().collect())
}

/// What `path` is among the items: an item, a directory when items lie below it (the install
/// prefix's parents), else missing.
fn node(items: &BTreeMap<String, Item>, path: &str) -> Node {
    match items.get(path) {
        Some(Item::Symlink { target }) => Node::Link(target.clone()),
        Some(Item::Dir { .. }) => Node::Dir,
        Some(Item::File { .. }) => Node::File,
        None if first_below(items, path).is_some() => Node::Dir,
        None => Node::Missing,
    }
}

/// The first item strictly below `path`.
fn first_below<'a>(items: &'a BTreeMap<String, Item>, path: &str) -> Option<&'a str> {
    let below = format!("{path}/");
    items.range(below.clone()..).next().map(|(k, _)| k.as_str()).filter(|k| k.starts_with(&below))
}

/// Every symlink item stays inside the package, as text and once resolved through the other
/// items, and no item lies below one.
fn check_links(items: &BTreeMap<String, Item>) -> Result<(), TreeError> {
    for (path, item) in items {
        if let (Item::Symlink { .. }, Some(inner)) = (item, first_below(items, path)) {
            return Err(TreeError::UnderLink { path: inner.to_owned(), link: path.clone() });
        }
    }
    for (path, item) in items {
        let Item::Symlink { target } = item else { continue };
        if !link_stays_inside(path, target) {
            return Err(TreeError::EscapingLink { path: path.clone(), target: target.clone() });
        }
        resolve_link(path, target, |p| node(items, p)).map_err(|reason| TreeError::ResolvesOutside {
            path: path.clone(),
            target: target.clone(),
            reason,
        })?;
    }
    Ok(())
}

/// Opens an [`Item::File`]'s source for reading, refusing a symlink there (the walk saw a
/// regular file; the directories above it were checked to be real): `O_NOFOLLOW` on Unix.
#[cfg(unix)]
pub fn open_source(path: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
    Ok(File::from(fd))
}

/// Windows: opened with `FILE_FLAG_OPEN_REPARSE_POINT` (the link itself, never what it points
/// at), and refused when what was opened is a link.
#[cfg(windows)]
pub fn open_source(path: &Path) -> io::Result<File> {
    use std::os::windows::fs::OpenOptionsExt;
    const FILE_FLAG_OPEN_REPARSE_POINT: u32 = 0x0020_0000;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(FILE_FLAG_OPEN_REPARSE_POINT).open(path)?;
    if file.metadata()?.file_type().is_symlink() {
        return Err(io::Error::other("a symlink where a regular file was walked (never followed)"));
    }
    Ok(file)
}

fn walk(dir: &Path, at: &str, items: &mut BTreeMap<String, Item>) -> Result<(), TreeError> {
    let mut entries: Vec<_> =
        std::fs::read_dir(dir).map_err(io_err(dir))?.collect::<Result<_, _>>().map_err(io_err(dir))?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let dest = if at.is_empty() { name } else { format!("{at}/{name}") };
        let meta = std::fs::symlink_metadata(&path).map_err(io_err(&path))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = std::fs::read_link(&path).map_err(io_err(&path))?.to_string_lossy().into_owned();
            // Windows spells a relative target with `\`; packages always use `/`.
            let target = if cfg!(windows) { target.replace('\\', "/") } else { target };
            items.insert(dest, Item::Symlink { target });
        } else if kind.is_dir() {
            items.insert(dest.clone(), Item::Dir { mode: mode_of(&meta, &path) & 0o7777 });
            walk(&path, &dest, items)?;
        } else if kind.is_file() {
            items.insert(dest, Item::File { mode: mode_of(&meta, &path) & 0o7777, source: path });
        } else {
            return Err(TreeError::Special(path.display().to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_checked_against_their_depth() {
        assert!(link_stays_inside("opt/rocm/lib/libx.so", "libx.so.1"));
        assert!(link_stays_inside("opt/rocm/lib/libx.so", "../../rocm/lib/x"));
        assert!(!link_stays_inside("opt/rocm/lib/libx.so", "/etc/passwd"));
        assert!(!link_stays_inside("opt/x", "../../etc/passwd"));
        assert!(link_stays_inside("opt/x", "../etc/y"));
    }

    #[cfg(unix)]
    #[test]
    fn content_is_merged_under_the_prefix_and_hostile_trees_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let stage = tmp.path().join("fft_lib_generic/math-libs/rocFFT/stage");
        std::fs::create_dir_all(stage.join("lib")).unwrap();
        std::fs::write(stage.join("lib/librocfft.so.0.1"), "x").unwrap();
        std::os::unix::fs::symlink("librocfft.so.0.1", stage.join("lib/librocfft.so.0")).unwrap();
        std::os::unix::fs::symlink("librocfft.so.0", stage.join("lib/librocfft.so")).unwrap();
        std::fs::write(tmp.path().join("fft_lib_generic").join(MANIFEST), "math-libs/rocFFT/stage\n").unwrap();
        let index = read_artifacts(tmp.path()).unwrap();
        assert_eq!(index.targets(), Vec::<String>::new());
        let content = |line: &str| vec![ContentPath { dir: "fft_lib_generic".into(), path: line.into() }];
        let items = collect_items(tmp.path(), &content("math-libs/rocFFT/stage"), "/opt/rocm/core-7.1").unwrap();
        let paths: Vec<&str> = items.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "opt/rocm/core-7.1/lib",
                "opt/rocm/core-7.1/lib/librocfft.so",
                "opt/rocm/core-7.1/lib/librocfft.so.0",
                "opt/rocm/core-7.1/lib/librocfft.so.0.1"
            ]
        );
        assert!(matches!(items[1].1, Item::Symlink { ref target } if target == "librocfft.so.0"));

        for hostile in ["../../etc", "/etc", "math-libs/../../x"] {
            let err = collect_items(tmp.path(), &content(hostile), "/opt/rocm").unwrap_err();
            assert!(matches!(err, TreeError::HostileManifest { .. }), "{hostile}: {err}");
        }
        let err = collect_items(tmp.path(), &content("math-libs/missing/stage"), "/opt/rocm").unwrap_err();
        assert!(matches!(err, TreeError::MissingRoot { .. }), "{err}");
        std::os::unix::fs::symlink("/etc/passwd", stage.join("lib/evil")).unwrap();
        let err = collect_items(tmp.path(), &content("math-libs/rocFFT/stage"), "/opt/rocm").unwrap_err();
        assert!(matches!(err, TreeError::EscapingLink { .. }), "{err}");
    }

    /// A fft artifact directory under `root` with `files` (`->target` makes a link).
    #[cfg(unix)]
    fn fft(root: &Path, files: &[(&str, &str)]) -> PathBuf {
        let stage = root.join("fft_lib_generic/math-libs/rocFFT/stage");
        std::fs::create_dir_all(&stage).unwrap();
        std::fs::write(root.join("fft_lib_generic").join(MANIFEST), "math-libs/rocFFT/stage\n").unwrap();
        for (path, content) in files {
            let path = stage.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            match content.strip_prefix("->") {
                Some(target) => std::os::unix::fs::symlink(target, &path).unwrap(),
                None => std::fs::write(&path, content).unwrap(),
            }
        }
        stage
    }

    #[cfg(unix)]
    fn content(line: &str) -> Vec<ContentPath> {
        vec![ContentPath { dir: "fft_lib_generic".into(), path: line.into() }]
    }

    #[cfg(unix)]
    #[test]
    fn content_is_never_read_through_a_directory_link() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("stage/lib")).unwrap();
        std::fs::write(outside.join("stage/lib/token.txt"), "secret").unwrap();
        let artifacts = tmp.path().join("artifacts");
        fft(&artifacts, &[("lib/librocfft.so.0", "x")]);
        // `math-libs/rocFFT` made a link to a directory outside the artifacts.
        let rocfft = artifacts.join("fft_lib_generic/math-libs/rocFFT");
        std::fs::remove_dir_all(&rocfft).unwrap();
        std::os::unix::fs::symlink(&outside, &rocfft).unwrap();
        let err = collect_items(&artifacts, &content("math-libs/rocFFT/stage"), "/opt/rocm").unwrap_err();
        assert!(matches!(err, TreeError::LinkInPath { ref link, .. } if *link == rocfft), "{err}");
        assert!(err.to_string().contains("math-libs/rocFFT"), "{err}");
        // The artifact directory itself a link.
        let other = tmp.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::rename(artifacts.join("fft_lib_generic"), other.join("fft_lib_generic")).unwrap();
        std::os::unix::fs::symlink(other.join("fft_lib_generic"), artifacts.join("fft_lib_generic")).unwrap();
        let err = collect_items(&artifacts, &content("math-libs/rocFFT/stage"), "/opt/rocm").unwrap_err();
        assert!(matches!(err, TreeError::LinkInPath { .. }), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_chain_leading_out_of_the_package_is_refused() {
        let deep = ('a'..='p').map(String::from).collect::<Vec<_>>().join("/");
        let up16 = vec![".."; 16].join("/");
        // The chain's `s` leads back to `lib`; `esc` then climbs 17 levels from there, above the
        // package's root, though its text climbs only back to `lib`.
        let esc = format!("{deep}/s/{}", vec![".."; 17].join("/"));
        let tmp = tempfile::tempdir().unwrap();
        fft(
            tmp.path(),
            &[
                ("lib/librocfft.so.0.1", "x"),
                (&format!("lib/{deep}/s"), &format!("->{up16}")),
                ("lib/esc", &format!("->{esc}")),
            ],
        );
        for prefix in ["/opt/rocm/core-7.1", ""] {
            assert!(link_stays_inside(&format!("{}/lib/esc", prefix.trim_start_matches('/')), &esc));
            let err = collect_items(tmp.path(), &content("math-libs/rocFFT/stage"), prefix).unwrap_err();
            assert!(matches!(err, TreeError::ResolvesOutside { ref path, .. } if path.ends_with("lib/esc")), "{err}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn therock_links_through_a_directory_link_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        fft(
            tmp.path(),
            &[
                ("lib/librocfft.so.0.1", "x"),
                ("lib/librocfft.so", "->librocfft.so.0.1"),
                ("opt/llvm/bin/clang", "ELF"),
                ("lib/llvm", "->../opt/llvm"),
                ("bin/clang", "->../lib/llvm/bin/clang"),
                ("bin/dangling", "->../lib/hip/bin/hipcc"),
            ],
        );
        let items = collect_items(tmp.path(), &content("math-libs/rocFFT/stage"), "/opt/rocm/core-7.1").unwrap();
        let links: Vec<&str> =
            items.iter().filter(|(_, i)| matches!(i, Item::Symlink { .. })).map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            links,
            [
                "opt/rocm/core-7.1/bin/clang",
                "opt/rocm/core-7.1/bin/dangling",
                "opt/rocm/core-7.1/lib/librocfft.so",
                "opt/rocm/core-7.1/lib/llvm"
            ]
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_item_below_another_sources_link_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        fft(tmp.path(), &[("lib/x/file", "x")]);
        let other = tmp.path().join("fft_dev_generic/math-libs/rocFFT/stage");
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink("y", other.join("lib")).unwrap();
        let contents = vec![
            ContentPath { dir: "fft_lib_generic".into(), path: "math-libs/rocFFT/stage".into() },
            ContentPath { dir: "fft_dev_generic".into(), path: "math-libs/rocFFT/stage".into() },
        ];
        let err = collect_items(tmp.path(), &contents, "/opt/rocm").unwrap_err();
        assert!(matches!(err, TreeError::UnderLink { ref link, .. } if link == "opt/rocm/lib"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_source_replaced_by_a_link_is_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let stage = fft(tmp.path(), &[("lib/libx.so", "inside")]);
        let items = collect_items(tmp.path(), &content("math-libs/rocFFT/stage"), "").unwrap();
        let Some((_, Item::File { source, .. })) = items.iter().find(|(p, _)| p == "lib/libx.so") else {
            panic!("{items:?}")
        };
        let mut text = String::new();
        io::Read::read_to_string(&mut open_source(source).unwrap(), &mut text).unwrap();
        assert_eq!(text, "inside");
        std::fs::write(tmp.path().join("token.txt"), "secret").unwrap();
        std::fs::remove_file(stage.join("lib/libx.so")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("token.txt"), stage.join("lib/libx.so")).unwrap();
        assert!(open_source(source).is_err(), "a link in the walked file's place is not followed");
    }
}
