//! Unpacking downloaded archives, a bounded number at once.
//!
//! Archives sharing one destination (bootstrap, flatten) place their files and directories
//! concurrently; their symlinks wait until every archive is placed and are then made one
//! archive after another (in file-name order), so no member is ever written through a link
//! another archive made.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use quarry_artifacts::{
    ArchiveFormat, ArtifactName, ExtractMode, Limits, PendingLinks, extract_deferred, read_manifest, wipe_roots,
};
use rayon::prelude::*;

use super::TransferError;
use crate::error_chain;

fn open(path: &Path) -> Result<std::io::BufReader<std::fs::File>, TransferError> {
    let file = std::fs::File::open(path).map_err(TransferError::io(format!("opening {}", path.display())))?;
    Ok(std::io::BufReader::new(file))
}

/// Unpacks every archive into `out` (tree mode: `out/artifacts/<artifact dir>`) on `jobs`
/// threads: one line per archive that failed. Bootstrap wipes every root of every archive
/// first, so two artifacts sharing a root (lib and dev of one project) both land; an
/// unreadable manifest stops everything before anything is wiped.
pub fn unpack_all(
    archives: &[(ArtifactName, ArchiveFormat, PathBuf)],
    out: &Path,
    mode: ExtractMode,
    jobs: usize,
) -> Result<Vec<String>, TransferError> {
    if mode == ExtractMode::Bootstrap {
        let mut roots = BTreeSet::new();
        for (_, format, path) in archives {
            let manifest = read_manifest(open(path)?, *format)
                .map_err(|source| TransferError::Artifact { what: path.display().to_string(), source })?;
            roots.extend(manifest);
        }
        wipe_roots(out, &roots.into_iter().collect::<Vec<_>>())
            .map_err(|source| TransferError::Artifact { what: format!("bootstrapping {}", out.display()), source })?;
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(jobs.max(1)).build()?;
    let placed: Vec<Result<(String, PendingLinks), String>> = pool.install(|| {
        archives
            .par_iter()
            .map(|(name, format, path)| {
                let file = name.archive_name(*format);
                let dest = match mode {
                    ExtractMode::Tree => out.join("artifacts").join(name.dir_name()),
                    _ => out.to_path_buf(),
                };
                let reader = open(path).map_err(|e| format!("{file}: {}", error_chain(&e)))?;
                match extract_deferred(reader, *format, &dest, mode, Limits::default()) {
                    Ok((_, links)) => Ok((file, links)),
                    Err(e) => Err(format!("{file}: {}", error_chain(&e))),
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
