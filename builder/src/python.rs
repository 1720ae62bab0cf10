//! The rocm-sdk Python distributions built from artifact trees, following a
//! [`WheelPlan`](quarry_packaging::therock::wheels::WheelPlan).
//!
//! Wheels hold no symlinks, so runtime files are resolved the way TheRock's
//! `py_packaging.py` does: a shared library is kept only under its `DT_SONAME`
//! (`libamdhip64.so.7`); other names of it (`libamdhip64.so`, `libamdhip64.so.7.1.0`) are
//! recorded as aliases for the devel tarball; links to directories and dangling links are
//! dropped; any other link becomes a copy of what it points at. The devel wheel carries
//! `rocm_sdk_devel/_devel.tar`: the whole development tree, where every file a runtime
//! wheel already installs is a relative symlink into that wheel's package and every alias a
//! symlink to the soname; `rocm-sdk init` unpacks it into site-packages.
//!
//! Search paths are not edited here: `therock::wheels` adds TheRock's `$ORIGIN/…` entries and
//! makes them DT_RPATH on staged copies ([`crate::rpath`]). Not done yet: the launchers TheRock
//! compiles for executable symlinks (a copy is shipped instead). Libraries
//! are also loaded through `rocm_sdk.preload_libraries` (the runtime in `builder/python/`): on
//! Windows it looks for `bin/{name}*.dll` and first adds every installed package's `bin`
//! directory with `os.add_dll_directory`, so a DLL finds those it imports from another package.
//!
//! One mode rule, [`member_mode`], serves runtime wheels and the devel tarball alike: on Linux
//! the host's mode plus the owner's write bit; for a Windows platform the modes Python reports
//! on Windows, whatever the host that unpacked the artifacts said.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
use quarry_packaging::therock::wheels::{
    DistKind, PlannedWheel, Selection, WheelOptions, WheelPlan, dist_info_py, wheel_file,
};
use quarry_packaging::therock::{ArtifactIndex, ContentPath};

use crate::deb::Item;
use crate::elf::{ElfKind, probe};
use crate::rpath::{RpathError, RpathPolicy, stage_wheel_files};
use crate::tree::{TreeError, collect_items};
use crate::wheel::{Member, Source, TarEntry, WheelError, WheelReport, write_tar, write_wheel};

#[derive(Debug, thiserror::Error)]
pub enum PythonBuildError {
    #[error(transparent)]
    Tree(#[from] TreeError),
    #[error(transparent)]
    Wheel(#[from] WheelError),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("bad glob {0:?}")]
    Glob(String),
    #[error(transparent)]
    Rpath(#[from] RpathError),
}

/// Our own Python code shipped in the distributions (`builder/python/`).
mod sources {
    pub(super) const ROCM_SDK: &[(&str, &str)] = &[
        ("__init__.py", include_str!("../python/rocm_sdk/__init__.py")),
        ("__main__.py", include_str!("../python/rocm_sdk/__main__.py")),
        ("_devel.py", include_str!("../python/rocm_sdk/_devel.py")),
        ("_selftest.py", include_str!("../python/rocm_sdk/_selftest.py")),
    ];
    pub(super) const CORE_CLI: &str = include_str!("../python/rocm_sdk_core/_cli.py");
    pub(super) const PURE_INIT: &str = include_str!("../python/pure_init.py");
    pub(super) const SETUP_PY: &str = include_str!("../python/sdist/setup.py");
    pub(super) const PYPROJECT: &str = include_str!("../python/sdist/pyproject.toml");
    pub(super) const README: &str = include_str!("../python/sdist/README.md");
}

/// One file a runtime wheel installs: where from, with which mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeFile {
    pub source: PathBuf,
    pub mode: u32,
}

/// A runtime wheel's files (relative to its platform package) and its soname aliases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Populated {
    pub files: BTreeMap<String, RuntimeFile>,
    /// `lib/libx.so` → `libx.so.1` (the soname, in the same directory).
    pub aliases: BTreeMap<String, String>,
}

fn globset(patterns: &[&str]) -> Result<Option<GlobSet>, PythonBuildError> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let glob = globset::GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map_err(|_| PythonBuildError::Glob((*p).to_owned()))?;
        b.add(glob);
    }
    let _ = Glob::new;
    b.build().map(Some).map_err(|_| PythonBuildError::Glob(patterns.join(" ")))
}

/// Items of a selection, paths relative to the artifact roots (later roots win).
fn selection_items(
    artifacts: &Path,
    index: &ArtifactIndex,
    selection: &Selection,
) -> Result<BTreeMap<String, Item>, PythonBuildError> {
    let wanted: BTreeSet<&str> = selection.dirs.iter().map(String::as_str).collect();
    let mut contents = Vec::new();
    for (dir, lines) in index.dirs().filter(|(d, _)| wanted.contains(d)) {
        for line in lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
            contents.push(ContentPath { dir: dir.to_owned(), path: line.to_owned() });
        }
    }
    let items = collect_items(artifacts, &contents, "")?;
    let include = globset(selection.include)?;
    let exclude = globset(selection.exclude)?;
    Ok(items
        .into_iter()
        .filter(|(path, _)| include.as_ref().is_none_or(|g| g.is_match(path)))
        .filter(|(path, _)| exclude.as_ref().is_none_or(|g| !g.is_match(path)))
        .collect())
}

/// Follows symlinks inside `items` from `path` to the file or directory at the end; `None` for
/// a dangling link or a loop.
fn resolve<'a>(items: &'a BTreeMap<String, Item>, path: &str) -> Option<(String, &'a Item)> {
    let mut current = path.to_owned();
    for _ in 0..40 {
        match items.get(&current)? {
            Item::Symlink { target } => {
                let mut parts: Vec<&str> = current.split('/').collect();
                parts.pop();
                for part in target.split('/') {
                    match part {
                        "" | "." => {}
                        ".." => {
                            parts.pop()?;
                        }
                        p => parts.push(p),
                    }
                }
                current = parts.join("/");
            }
            item => return Some((current, item)),
        }
    }
    None
}

/// A member's mode in a wheel or the devel tarball built for `platform`: on Linux the host's
/// mode with the owner's write bit (TheRock's `_populate_file`); on Windows what Python's
/// `os.stat` reports there (`644`, plus `111` for `.exe`, `.bat`, `.cmd`, `.com`; `755` for
/// directories), whatever the host that unpacked the artifacts said, so that a Linux and a
/// Windows host build the same bytes (pip on Windows ignores modes).
pub fn member_mode(platform: &str, path: &str, host_mode: u32, dir: bool) -> u32 {
    if !platform.starts_with("win") {
        return host_mode | if dir { 0o700 } else { 0o200 };
    }
    let lower = path.to_ascii_lowercase();
    let executable = [".exe", ".bat", ".cmd", ".com"].iter().any(|ext| lower.ends_with(ext));
    if dir || executable { 0o755 } else { 0o644 }
}

/// Whether TheRock's `get_file_type` can call the file at `path` an executable or a shared
/// object (and so edit its search path): not for names it types by extension first (GPU code
/// objects `.hsaco`, `.co`; text `.txt`, `.h`, `.hpp`; archives `.lib`).
pub fn patched_by_therock(path: &str) -> bool {
    ![".hsaco", ".co", ".txt", ".h", ".hpp", ".lib"].iter().any(|ext| path.ends_with(ext))
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// A runtime wheel's files, with TheRock's symlink and soname rules.
pub fn populate_runtime(
    artifacts: &Path,
    index: &ArtifactIndex,
    selection: &Selection,
    platform: &str,
) -> Result<Populated, PythonBuildError> {
    let items = selection_items(artifacts, index, selection)?;
    let mut out = Populated::default();
    let probe_at =
        |source: &Path| probe(source).map_err(|e| PythonBuildError::Io { path: source.to_path_buf(), source: e });
    for (path, item) in &items {
        match item {
            Item::Dir { .. } => {}
            Item::File { source, mode } => match probe_at(source)? {
                ElfKind::SharedObject { soname: Some(soname) } if soname != file_name(path) && !soname.is_empty() => {
                    out.aliases.insert(path.clone(), soname);
                }
                _ => {
                    let mode = member_mode(platform, path, *mode, false);
                    out.files.insert(path.clone(), RuntimeFile { source: source.clone(), mode });
                }
            },
            Item::Symlink { .. } => {
                let Some((_, Item::File { source, mode })) = resolve(&items, path) else { continue };
                match probe_at(source)? {
                    ElfKind::SharedObject { soname: Some(soname) }
                        if soname != file_name(path) && !soname.is_empty() =>
                    {
                        out.aliases.insert(path.clone(), soname);
                    }
                    _ => {
                        let mode = member_mode(platform, path, *mode, false);
                        out.files.insert(path.clone(), RuntimeFile { source: source.clone(), mode });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The devel tarball's entries under `_rocm_sdk_devel{nonce}/`: directories, files, links into
/// the runtime packages that already install a path, links from aliases to sonames, and the
/// tree's own (inside-pointing) symlinks.
pub fn devel_entries(
    artifacts: &Path,
    index: &ArtifactIndex,
    selection: &Selection,
    devel_package: &str,
    runtime: &[(&str, &Populated)],
    platform: &str,
) -> Result<Vec<(String, TarEntry)>, PythonBuildError> {
    let items = selection_items(artifacts, index, selection)?;
    let mut entries = vec![
        (devel_package.to_owned(), TarEntry::Dir { mode: 0o755 }),
        (format!("{devel_package}/__init__.py"), TarEntry::File { mode: 0o644, source: Source::Bytes(Vec::new()) }),
    ];
    let mut paths: BTreeSet<&str> = items.keys().map(String::as_str).collect();
    for (_, populated) in runtime {
        paths.extend(populated.files.keys().map(String::as_str));
        paths.extend(populated.aliases.keys().map(String::as_str));
    }
    // Parents of every path must exist as directories before their children.
    let mut dirs: BTreeSet<String> = BTreeSet::new();
    for path in &paths {
        let mut acc = String::new();
        for part in path.split('/').collect::<Vec<_>>().iter().rev().skip(1).rev() {
            if !acc.is_empty() {
                acc.push('/');
            }
            acc.push_str(part);
            dirs.insert(acc.clone());
        }
    }
    for (path, item) in &items {
        if matches!(item, Item::Dir { .. }) {
            dirs.insert(path.clone());
        }
    }
    for path in paths.iter().copied().chain(dirs.iter().map(String::as_str)).collect::<BTreeSet<&str>>() {
        let name = format!("{devel_package}/{path}");
        if dirs.contains(path) {
            let mode = match items.get(path) {
                Some(Item::Dir { mode }) => member_mode(platform, path, *mode, true),
                _ => 0o755,
            };
            entries.push((name, TarEntry::Dir { mode }));
            continue;
        }
        let up = "../".repeat(path.split('/').count());
        if let Some((package, _)) = runtime.iter().find(|(_, p)| p.files.contains_key(path)) {
            entries.push((name, TarEntry::Symlink { target: format!("{up}{package}/{path}") }));
        } else if let Some(soname) = runtime.iter().find_map(|(_, p)| p.aliases.get(path)) {
            entries.push((name, TarEntry::Symlink { target: soname.clone() }));
        } else {
            match items.get(path) {
                Some(Item::File { source, mode }) => {
                    let mode = member_mode(platform, path, *mode, false);
                    entries.push((name, TarEntry::File { mode, source: Source::File(source.clone()) }));
                }
                // The tree's own links, when they lead somewhere (a dangling link would outlive
                // `pip uninstall`, which skips paths that do not exist).
                Some(Item::Symlink { target }) if resolve(&items, path).is_some() => {
                    entries.push((name, TarEntry::Symlink { target: target.clone() }));
                }
                _ => {}
            }
        }
    }
    Ok(entries)
}

/// What `build_python` wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltDist {
    pub dist: String,
    pub file: PathBuf,
    pub report: WheelReport,
}

fn wheel_members(
    wheel: &PlannedWheel,
    plan: &WheelPlan,
    opts: &WheelOptions,
    populated: &Populated,
    extra: Vec<Member>,
) -> Vec<Member> {
    let mut members = vec![Member::bytes(format!("{}/__init__.py", wheel.platform_package), "")];
    for (path, file) in &populated.files {
        members.push(Member {
            path: format!("{}/{path}", wheel.platform_package),
            mode: file.mode,
            source: Source::File(file.source.clone()),
        });
    }
    if let Some(pure) = &wheel.pure_package {
        members.push(Member::bytes(format!("{pure}/__init__.py"), sources::PURE_INIT));
        members.push(Member::bytes(
            format!("{pure}/_dist_info.py"),
            dist_info_py(&plan.wheels, &plan.targets, opts, Some(&wheel.kind)),
        ));
        if wheel.kind == DistKind::Core {
            members.push(Member::bytes(format!("{pure}/_cli.py"), sources::CORE_CLI));
        }
    }
    members.extend(extra);
    members
}

fn dist_info_members(wheel: &PlannedWheel, opts: &WheelOptions) -> Vec<Member> {
    let mut top_level: BTreeSet<&str> = BTreeSet::from([wheel.platform_package.as_str()]);
    if let Some(pure) = &wheel.pure_package {
        top_level.insert(pure);
    }
    let mut info = vec![
        Member::bytes(format!("{}/METADATA", wheel.dist_info), wheel.metadata.clone()),
        Member::bytes(format!("{}/WHEEL", wheel.dist_info), wheel_file(&opts.platform)),
        Member::bytes(
            format!("{}/top_level.txt", wheel.dist_info),
            top_level.iter().map(|t| format!("{t}\n")).collect::<String>(),
        ),
    ];
    if let Some(entry_points) = &wheel.entry_points {
        info.push(Member::bytes(format!("{}/entry_points.txt", wheel.dist_info), entry_points.clone()));
    }
    info
}

/// Populates one runtime wheel (not devel) for the plan.
pub fn populate(ctx: &WheelContext<'_>, wheel: &PlannedWheel) -> Result<Populated, PythonBuildError> {
    populate_runtime(ctx.artifacts, ctx.index, &wheel.selection, &ctx.opts.platform)
}

/// What every distribution of one build shares.
#[derive(Clone, Copy, Debug)]
pub struct WheelContext<'a> {
    pub artifacts: &'a Path,
    pub index: &'a ArtifactIndex,
    pub plan: &'a WheelPlan,
    pub opts: &'a WheelOptions,
    pub dest_dir: &'a Path,
    /// Every member's timestamp (`SOURCE_DATE_EPOCH`).
    pub mtime: u64,
}

/// Writes one runtime wheel from its populated files.
pub fn build_runtime_wheel(
    ctx: &WheelContext<'_>,
    wheel: &PlannedWheel,
    populated: &Populated,
) -> Result<BuiltDist, PythonBuildError> {
    build_runtime_wheel_with(ctx, wheel, populated, Vec::new())
}

/// [`build_runtime_wheel`] with more `.dist-info` members (a variant wheel's `variant.json`).
pub fn build_runtime_wheel_with(
    ctx: &WheelContext<'_>,
    wheel: &PlannedWheel,
    populated: &Populated,
    extra_info: Vec<Member>,
) -> Result<BuiltDist, PythonBuildError> {
    let WheelContext { plan, opts, dest_dir, mtime, .. } = *ctx;
    let mut extra = Vec::new();
    if let DistKind::Device(target) = &wheel.kind {
        // What `rocm-sdk init` links into the devel tree for this target's files.
        let links: Vec<String> = populated
            .files
            .keys()
            .map(|path| {
                let up = "../".repeat(path.split('/').count());
                format!(
                    "    {{\"relpath\": {}, \"target\": {}}}",
                    json_str(path),
                    json_str(&format!("{up}{}/{path}", wheel.platform_package))
                )
            })
            .collect();
        let json =
            format!("{{\n  \"version\": {},\n  \"links\": [\n{}\n  ]\n}}", json_str(&opts.version), links.join(",\n"));
        extra.push(Member::bytes(format!("{}/.devel_links/{target}.json", wheel.platform_package), json));
    }
    let members = wheel_members(wheel, plan, opts, populated, extra);
    let file = dest_dir.join(&wheel.file_name);
    let mut info = dist_info_members(wheel, opts);
    info.extend(extra_info);
    let report = write_wheel(&file, members, &wheel.dist_info, info, mtime, true)?;
    Ok(BuiltDist { dist: wheel.dist.clone(), file, report })
}

/// Writes the devel wheel: `rocm_sdk_devel/_devel.tar` over the runtime wheels' files. The
/// tarball's own ELF files (those no runtime wheel installs) get their DT_RUNPATH made DT_RPATH
/// on staged copies under `rpath` (TheRock's `_populate_devel_file`: `_normalize_rpath` only).
pub fn build_devel_wheel(
    ctx: &WheelContext<'_>,
    wheel: &PlannedWheel,
    runtime: &[(&str, &Populated)],
    rpath: RpathPolicy,
) -> Result<BuiltDist, PythonBuildError> {
    let WheelContext { artifacts, index, plan, opts, dest_dir, mtime } = *ctx;
    let mut entries =
        devel_entries(artifacts, index, &wheel.selection, &wheel.platform_package, runtime, &opts.platform)?;
    let prefix = format!("{}/", wheel.platform_package);
    let files = entries.iter_mut().filter_map(|(name, entry)| match entry {
        TarEntry::File { source: Source::File(source), .. } => Some((name.strip_prefix(&prefix)?, source)),
        _ => None,
    });
    let policy = if opts.platform.starts_with("win") { RpathPolicy::KeepRunpath } else { rpath };
    let _edits = stage_wheel_files(files, policy, &|path| patched_by_therock(path).then(Vec::new), dest_dir)?;
    let scratch = tempfile::NamedTempFile::new_in(dest_dir)
        .map_err(|source| PythonBuildError::Io { path: dest_dir.into(), source })?;
    let tar = write_tar(
        io::BufWriter::new(scratch.reopen().map_err(|source| PythonBuildError::Io { path: dest_dir.into(), source })?),
        &entries,
        mtime,
    )?;
    drop(tar.into_inner().map_err(|e| PythonBuildError::Io { path: dest_dir.into(), source: e.into_error() })?);
    let pure = wheel.pure_package.clone().unwrap_or_default();
    let tarball =
        Member { path: format!("{pure}/_devel.tar"), mode: 0o644, source: Source::File(scratch.path().to_path_buf()) };
    let mut members = wheel_members(wheel, plan, opts, &Populated::default(), vec![tarball]);
    // The devel wheel installs only its pure package; the platform package comes from the tarball.
    members.retain(|m| !m.path.starts_with(&format!("{}/", wheel.platform_package)));
    let mut info = dist_info_members(wheel, opts);
    for m in &mut info {
        if m.path.ends_with("/top_level.txt") {
            m.source = Source::Bytes(format!("{pure}\n").into_bytes());
        }
    }
    let file = dest_dir.join(&wheel.file_name);
    let report = write_wheel(&file, members, &wheel.dist_info, info, mtime, true)?;
    Ok(BuiltDist { dist: wheel.dist.clone(), file, report })
}

/// Writes the `rocm` sdist: `setup.py` decides the extras on the installing machine.
pub fn build_sdist(ctx: &WheelContext<'_>) -> Result<BuiltDist, PythonBuildError> {
    let WheelContext { plan, dest_dir, mtime, .. } = *ctx;
    let root = &plan.sdist.root;
    let file = |name: &str, text: &str| {
        (format!("{root}/{name}"), TarEntry::File { mode: 0o644, source: Source::Bytes(text.as_bytes().to_vec()) })
    };
    let mut entries = vec![
        (root.clone(), TarEntry::Dir { mode: 0o755 }),
        file("PKG-INFO", &plan.sdist.pkg_info),
        file("README.md", sources::README),
        file("pyproject.toml", sources::PYPROJECT),
        file("setup.py", sources::SETUP_PY),
        (format!("{root}/src"), TarEntry::Dir { mode: 0o755 }),
        (format!("{root}/src/rocm_sdk"), TarEntry::Dir { mode: 0o755 }),
    ];
    let mut modules: Vec<(&str, &str)> = sources::ROCM_SDK.to_vec();
    modules.push(("_dist_info.py", &plan.sdist.dist_info_py));
    modules.sort();
    for (name, text) in modules {
        entries.push(file(&format!("src/rocm_sdk/{name}"), text));
    }
    let path = dest_dir.join(&plan.sdist.file_name);
    let tmp = tempfile::NamedTempFile::new_in(dest_dir)
        .map_err(|source| PythonBuildError::Io { path: dest_dir.into(), source })?;
    let gz = flate2::GzBuilder::new().mtime(0).write(io::BufWriter::new(tmp), flate2::Compression::new(9));
    let gz = write_tar(gz, &entries, mtime)?;
    let buf = gz.finish().map_err(|source| PythonBuildError::Io { path: path.clone(), source })?;
    let tmp = buf.into_inner().map_err(|e| PythonBuildError::Io { path: path.clone(), source: e.into_error() })?;
    tmp.persist(&path).map_err(|e| PythonBuildError::Io { path: path.clone(), source: e.error })?;
    let bytes = std::fs::read(&path).map_err(|source| PythonBuildError::Io { path: path.clone(), source })?;
    use sha2::Digest as _;
    let report = WheelReport {
        size: bytes.len() as u64,
        members: entries.len(),
        sha256: hex::encode(sha2::Sha256::digest(&bytes)),
    };
    Ok(BuiltDist { dist: "rocm".into(), file: path, report })
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
