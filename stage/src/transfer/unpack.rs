//! Unpacking downloaded archives, a bounded number at once.
//!
//! Archives sharing one destination (bootstrap, flatten) place their files and directories
//! concurrently; their symlinks wait until every archive is placed and are then made one
//! archive after another (in file-name order), so no member is ever written through a link
//! another archive made.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use quarry_artifacts::{
    ArchiveFormat, ArtifactError, ArtifactName, ExtractMode, Limits, PendingLinks, extract_deferred, read_manifest,
    wipe_roots,
};
use rayon::prelude::*;

use super::TransferError;
use quarry_store::error_chain;

/// An archive to unpack: a downloaded file, or the store's own file opened in place (read from
/// its start each time, never changed).
#[derive(Debug)]
pub enum Source {
    Downloaded(PathBuf),
    InPlace(std::fs::File),
}

impl Source {
    /// The archive's size in bytes (0 when it cannot be read: the unpack will say why).
    pub fn size(&self) -> u64 {
        match self {
            Source::Downloaded(path) => std::fs::metadata(path).map_or(0, |m| m.len()),
            Source::InPlace(file) => file.metadata().map_or(0, |m| m.len()),
        }
    }

    /// What to call it in messages.
    fn describe(&self, name: &str) -> String {
        match self {
            Source::Downloaded(path) => path.display().to_string(),
            Source::InPlace(_) => name.to_owned(),
        }
    }

    /// A buffered reader from the archive's first byte.
    fn open(&self) -> Result<std::io::BufReader<std::fs::File>, TransferError> {
        let file = match self {
            Source::Downloaded(path) => {
                std::fs::File::open(path).map_err(crate::io(format!("opening {}", path.display())))?
            }
            Source::InPlace(file) => {
                let mut file = file.try_clone().map_err(crate::io("reopening an archive in place".to_owned()))?;
                std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(0))
                    .map_err(crate::io("rewinding an archive in place".to_owned()))?;
                file
            }
        };
        Ok(std::io::BufReader::with_capacity(1 << 20, file))
    }
}

/// Unpacks every archive into `out` (tree mode: `out/artifacts/<artifact dir>`) on `jobs`
/// threads: one line per archive that failed. Bootstrap wipes every root of every archive
/// first, so two artifacts sharing a root (lib and dev of one project) both land; an
/// unreadable manifest stops everything before anything is wiped. `limits` bound each archive
/// (and say whether its names must be portable to Windows).
pub fn unpack_all(
    archives: &[(ArtifactName, ArchiveFormat, Source)],
    out: &Path,
    mode: ExtractMode,
    jobs: usize,
    limits: Limits,
) -> Result<Vec<String>, TransferError> {
    if mode == ExtractMode::Bootstrap {
        let mut roots = BTreeSet::new();
        for (name, format, source) in archives {
            let manifest = read_manifest(source.open()?, *format).map_err(|e| TransferError::Artifact {
                what: source.describe(&name.archive_name(*format)),
                source: e,
            })?;
            roots.extend(manifest);
        }
        wipe_roots(out, &roots.into_iter().collect::<Vec<_>>())
            .map_err(|source| TransferError::Artifact { what: format!("bootstrapping {}", out.display()), source })?;
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs.max(1)).build()?;
    let placed: Vec<Result<(String, PendingLinks), String>> = pool.install(|| {
        archives
            .par_iter()
            .map(|(name, format, source)| {
                let file = name.archive_name(*format);
                let dest = match mode {
                    ExtractMode::Tree => out.join("artifacts").join(name.dir_name()),
                    _ => out.to_path_buf(),
                };
                let reader = source.open().map_err(|e| format!("{file}: {}", error_chain(&e)))?;
                match extract_deferred(reader, *format, &dest, mode, limits) {
                    Ok((_, links)) => Ok((file, links)),
                    Err(e) => Err(format!("{file}: {}{}", error_chain(&e), raise_hint(&e))),
                }
            })
            .collect()
    });
    let mut errors = Vec::new();
    let mut pending = Vec::new();
    for result in placed {
        match result {
            Ok(links) => pending.push(links),
            Err(e) => errors.push(e),
        }
    }
    pending.sort_by(|a, b| a.0.cmp(&b.0));
    for (file, links) in pending {
        if let Err(e) = links.create() {
            errors.push(format!("{file}: {}", error_chain(&e)));
        }
    }
    Ok(errors)
}

/// How to raise the limit an archive ran into, if it did (the `quarry artifacts fetch` flag).
fn raise_hint(e: &ArtifactError) -> &'static str {
    match e {
        ArtifactError::Expands { .. } => " (if the archive is trusted, --max-expansion-ratio raises the limit)",
        ArtifactError::TooLarge { what: "bytes", .. } => {
            " (if the archive is trusted, --max-unpacked-bytes raises the limit)"
        }
        _ => "",
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use quarry_artifacts::{ArchiveOptions, write_archive};

    /// An archive of `files` (and `links`) under the root `proj/stage`.
    fn archive(dir: &Path, name: &str, files: &[(&str, &str)], links: &[(&str, &str)]) -> PathBuf {
        let src = dir.join("src").join(name);
        for (path, text) in files {
            let path = src.join("proj/stage").join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        for (path, target) in links {
            let path = src.join("proj/stage").join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::os::unix::fs::symlink(target, path).unwrap();
        }
        std::fs::write(src.join("artifact_manifest.txt"), "proj/stage\n").unwrap();
        let out = dir.join(format!("{name}.tar.zst"));
        let opts = ArchiveOptions::new(ArchiveFormat::Zstd);
        write_archive(&src, std::fs::File::create(&out).unwrap(), &opts).unwrap();
        out
    }

    #[test]
    fn archives_sharing_a_root_both_land_with_links_made_last() {
        let tmp = tempfile::tempdir().unwrap();
        let lib = archive(tmp.path(), "a_lib_generic", &[("lib/liba.so.1", "elf")], &[("lib/liba.so", "liba.so.1")]);
        let dev = archive(tmp.path(), "a_dev_generic", &[("include/a.h", "int a;")], &[]);
        let broken = tmp.path().join("b_lib_generic.tar.zst");
        std::fs::write(&broken, b"not zstd").unwrap();
        let name = |n: &str| ArtifactName::parse_dir(n).unwrap();
        // One read in place (its manifest, then its members, from the same open file), one
        // downloaded.
        let both = || {
            vec![
                (name("a_dev_generic"), ArchiveFormat::Zstd, Source::InPlace(std::fs::File::open(&dev).unwrap())),
                (name("a_lib_generic"), ArchiveFormat::Zstd, Source::Downloaded(lib.clone())),
            ]
        };
        let archives = both();

        let out = tmp.path().join("boot");
        std::fs::create_dir_all(out.join("proj/stage/stale")).unwrap();
        assert!(unpack_all(&archives, &out, ExtractMode::Bootstrap, 2, Limits::default()).unwrap().is_empty());
        let stage = out.join("proj/stage");
        assert!(!stage.join("stale").exists(), "bootstrap wipes the root first");
        assert_eq!(std::fs::read_to_string(stage.join("include/a.h")).unwrap(), "int a;");
        assert_eq!(std::fs::read_link(stage.join("lib/liba.so")).unwrap(), Path::new("liba.so.1"));
        assert_eq!(std::fs::read_to_string(stage.join("lib/liba.so")).unwrap(), "elf");

        let tree = tmp.path().join("tree");
        let mut with_broken = both();
        with_broken.push((name("b_lib_generic"), ArchiveFormat::Zstd, Source::Downloaded(broken)));
        let errors = unpack_all(&with_broken, &tree, ExtractMode::Tree, 1, Limits::default()).unwrap();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("b_lib_generic.tar.zst: "), "{errors:?}");
        assert!(tree.join("artifacts/a_lib_generic/proj/stage/lib/liba.so.1").is_file());
        assert!(tree.join("artifacts/a_dev_generic/proj/stage/include/a.h").is_file());
    }

    fn name(n: &str) -> ArtifactName {
        ArtifactName::parse_dir(n).unwrap()
    }

    #[test]
    fn a_chain_across_archives_sharing_the_destination_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = ('a'..='p').map(String::from).collect::<Vec<_>>().join("/");
        let up16 = vec![".."; 16].join("/");
        // `a_lib`'s link leads back to `proj/stage`; `b_lib`'s goes through it, 17 levels up.
        let chain = archive(tmp.path(), "a_lib_generic", &[], &[(&format!("{deep}/s"), &up16)]);
        let esc = format!("{deep}/s/{}", vec![".."; 17].join("/"));
        let through = archive(tmp.path(), "b_lib_generic", &[("b.txt", "b")], &[("esc", &esc)]);
        let archives = vec![
            (name("b_lib_generic"), ArchiveFormat::Zstd, Source::Downloaded(through)),
            (name("a_lib_generic"), ArchiveFormat::Zstd, Source::Downloaded(chain)),
        ];
        for mode in [ExtractMode::Bootstrap, ExtractMode::Flatten] {
            let out = tmp.path().join(format!("{mode:?}"));
            let errors = unpack_all(&archives, &out, mode, 2, Limits::default()).unwrap();
            assert_eq!(errors.len(), 1, "{mode:?}: {errors:?}");
            assert!(errors[0].starts_with("b_lib_generic.tar.zst: member \"proj/stage/esc\""), "{errors:?}");
            let stage = if mode == ExtractMode::Flatten { out.clone() } else { out.join("proj/stage") };
            assert!(std::fs::symlink_metadata(stage.join("esc")).is_err(), "{mode:?}");
            assert_eq!(std::fs::read_to_string(stage.join("b.txt")).unwrap(), "b");
        }
    }

    #[test]
    fn bootstrap_never_wipes_through_a_link() {
        let tmp = tempfile::tempdir().unwrap();
        let lib = archive(tmp.path(), "a_lib_generic", &[("lib/liba.so.1", "elf")], &[]);
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("stage")).unwrap();
        std::fs::write(outside.join("stage/sentinel"), "keep").unwrap();
        let out = tmp.path().join("boot");
        std::fs::create_dir_all(&out).unwrap();
        // `proj` a link out of the build directory (as an older extractor could leave).
        std::os::unix::fs::symlink(&outside, out.join("proj")).unwrap();
        let archives = vec![(name("a_lib_generic"), ArchiveFormat::Zstd, Source::Downloaded(lib))];
        let err = unpack_all(&archives, &out, ExtractMode::Bootstrap, 1, Limits::default()).unwrap_err();
        let text = error_chain(&err);
        assert!(text.contains(&format!("{} is a symlink", out.join("proj").display())), "{text}");
        assert_eq!(std::fs::read_to_string(outside.join("stage/sentinel")).unwrap(), "keep");
        assert!(!outside.join("stage/lib").exists());
    }

    #[test]
    fn an_archive_over_a_limit_names_the_flag_that_raises_it() {
        let tmp = tempfile::tempdir().unwrap();
        let zeros = archive(tmp.path(), "z_lib_generic", &[("zeros", &"\0".repeat(4 << 20))], &[]);
        let archives =
            vec![(name("z_lib_generic"), ArchiveFormat::Zstd, Source::InPlace(std::fs::File::open(&zeros).unwrap()))];
        let tight = Limits { ratio_after: 1 << 20, ..Limits::default() };
        let errors = unpack_all(&archives, &tmp.path().join("a"), ExtractMode::Tree, 1, tight).unwrap();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("z_lib_generic.tar.zst: the archive expands beyond the limit of 200:1"),
            "{errors:?}"
        );
        assert!(errors[0].contains("--max-expansion-ratio"), "{errors:?}");
        let small = Limits { max_bytes: 1 << 20, ..Limits::default() };
        let errors = unpack_all(&archives, &tmp.path().join("b"), ExtractMode::Tree, 1, small).unwrap();
        assert!(errors[0].contains("1048576 bytes") && errors[0].contains("--max-unpacked-bytes"), "{errors:?}");
        let loose = Limits { ratio_after: 1 << 20, max_ratio: 1 << 20, ..Limits::default() };
        assert!(unpack_all(&archives, &tmp.path().join("c"), ExtractMode::Tree, 1, loose).unwrap().is_empty());
    }
}
