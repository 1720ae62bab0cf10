//! `.deb` and `.rpm` packages of a TheRock plan: plan, walk each package's content, build
//! every package in parallel, and summarize what was built, skipped and failed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use quarry_packaging::therock::{self, PackageSpec, PkgType, Plan, PlanOptions, PlannedPackage};
use rayon::prelude::*;

use super::control::{deb_control, debian_docs_for, install_prefix, rpm_spec};
use super::log::{LOGS_DIR, PackageLog};
use super::{BuildSettings, OnProgress, PackageError, Progress, StagedArtifacts, chain, pool};
use crate::deb::{Compression, Item, build_deb_threads, debian_docs};
use crate::rpath::{RpathPolicy, stage_items};
use crate::rpm::{RpmCompression, build_rpm_threads};
use crate::tree::collect_items;

/// How to package: the plan's options and what the builders need beyond the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeOptions {
    /// Package type, versions, targets, kpack, asan and the package selection.
    pub plan: PlanOptions,
    /// The requested install prefix ([`install_prefix`] decides the one used).
    pub install_prefix: String,
    /// The `.deb` payload compression.
    pub deb_compression: Compression,
    /// The `.rpm` payload compression.
    pub rpm_compression: RpmCompression,
    /// An armored OpenPGP secret key signing every rpm.
    pub rpm_signing_key: Option<String>,
}

/// One package built.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Built {
    pub package: String,
    /// The file name in the destination directory.
    pub file: String,
    pub size: u64,
    /// The package's log (`{dest}/logs/{type}-{package}.log`).
    pub log: PathBuf,
}

/// What a run built (by package name), skipped and failed (each with the reason), and for
/// which targets.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub targets: Vec<String>,
    pub built: Vec<Built>,
    pub skipped: Vec<(String, String)>,
    pub failed: Vec<(String, String)>,
    /// Where every package's log is (`{dest}/logs`).
    pub logs: Option<PathBuf>,
}

impl std::fmt::Display for Summary {
    /// One line per package built, skipped and failed, then the counts and the targets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in &self.built {
            writeln!(f, "built   {} ({} bytes; log {})", b.file, b.size, b.log.display())?;
        }
        for (name, reason) in &self.skipped {
            writeln!(f, "skipped {name}: {reason}")?;
        }
        for (name, reason) in &self.failed {
            writeln!(f, "failed  {name}: {reason}")?;
        }
        let (built, skipped, failed) = (self.built.len(), self.skipped.len(), self.failed.len());
        writeln!(f, "{built} built, {skipped} skipped, {failed} failed; targets {}", self.targets.join(","))?;
        match &self.logs {
            Some(logs) => writeln!(f, "logs in {}", logs.display()),
            None => Ok(()),
        }
    }
}

/// What every package build of one run shares.
struct Run<'a> {
    staged: &'a StagedArtifacts,
    plan: &'a Plan,
    opts: &'a NativeOptions,
    settings: &'a BuildSettings,
    specs: BTreeMap<&'a str, &'a PackageSpec>,
    prefix: String,
    /// The Debian changelog date: the epoch in RFC 2822.
    changelog_date: String,
}

/// Plans the packages of `specs` over the staged artifacts and builds them into the
/// destination, `settings.jobs` at a time. A package that fails is in [`Summary::failed`]
/// (and logged); the others are still built.
pub fn package_native(
    staged: &StagedArtifacts,
    specs: &[PackageSpec],
    opts: &NativeOptions,
    settings: &BuildSettings,
    progress: OnProgress<'_>,
) -> Result<Summary, PackageError> {
    let plan = therock::plan(specs, staged.index(), &opts.plan)?;
    let prefix = install_prefix(&opts.install_prefix, opts.plan.asan, &plan.versions.tag);
    progress(Progress::Planned { plan: &plan, prefix: &prefix, kpack: opts.plan.kpack });
    let changelog_date = jiff::Timestamp::from_second(i64::try_from(settings.epoch).unwrap_or(0))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%a, %d %b %Y %H:%M:%S +0000")
        .to_string();
    let specs = specs.iter().map(|s| (s.package.as_str(), s)).collect();
    let run = Run { staged, plan: &plan, opts, settings, specs, prefix, changelog_date };
    let pool = pool(settings.jobs)?;
    // Every package's content first (a walk of the staged tree), so that each build gets
    // compression threads in proportion to its bytes.
    let kind = match opts.plan.pkg_type {
        PkgType::Deb => "deb",
        PkgType::Rpm => "rpm",
    };
    let (logs, contents): (Vec<_>, Vec<_>) = pool.install(|| {
        plan.packages
            .par_iter()
            .map(|p| {
                let mut log = PackageLog::start(kind, &p.name);
                let items = collect_items(run.staged.dir(), &p.contents, &run.prefix);
                log.step("collect");
                (log, items)
            })
            .unzip()
    });
    let threads = compression_threads(&contents, settings.jobs);
    let results: Vec<(&PlannedPackage, Result<Built, String>)> = pool.install(|| {
        plan.packages
            .par_iter()
            .zip(logs)
            .zip(contents)
            .zip(threads)
            .map(|(((package, log), items), threads)| {
                progress(Progress::Started { package: &package.name });
                let result = run.build(package, log, items.map_err(PackageError::from), threads).map_err(|e| chain(&e));
                if let Err(e) = &result {
                    tracing::error!(package = %package.name, "{e}");
                }
                progress(Progress::Finished { package: &package.name });
                (package, result)
            })
            .collect()
    });
    let logs = Some(settings.dest_dir.join(LOGS_DIR));
    let mut summary =
        Summary { targets: plan.targets.clone(), skipped: plan.skipped.clone(), logs, ..Summary::default() };
    for (package, result) in results {
        match result {
            Ok(built) => summary.built.push(built),
            Err(e) => summary.failed.push((package.name.clone(), e)),
        }
    }
    summary.built.sort_by(|a, b| a.package.cmp(&b.package));
    summary.failed.sort();
    Ok(summary)
}

impl Run<'_> {
    /// Builds one package of `items` (its collected content) into the destination, compressing
    /// on `threads` threads, and writes its log (failed or not).
    fn build(
        &self,
        package: &PlannedPackage,
        mut log: PackageLog,
        items: Result<Vec<(String, Item)>, PackageError>,
        threads: u32,
    ) -> Result<Built, PackageError> {
        let result = items.and_then(|items| self.build_file(package, items, threads, &mut log));
        let dest = &self.settings.dest_dir;
        let file = |path: &PathBuf| path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let outcome = match &result {
            Ok((path, size)) => Ok((file(path), *size)),
            Err(e) => Err(chain(e)),
        };
        let log = log.finish(dest, outcome.as_ref().map(|(f, s)| (f.as_str(), *s)).map_err(String::as_str))?;
        let (path, size) = result?;
        Ok(Built { package: package.name.clone(), file: file(&path), size, log })
    }

    /// Builds one package file (its ELF files' RUNPATH made RPATH on staged copies unless
    /// RUNPATH is kept): its path and size.
    fn build_file(
        &self,
        package: &PlannedPackage,
        mut items: Vec<(String, Item)>,
        threads: u32,
        log: &mut PackageLog,
    ) -> Result<(PathBuf, u64), PackageError> {
        let spec = self.specs[package.source.as_str()];
        let dest = &self.settings.dest_dir;
        let edits = stage_items(&mut items, self.settings.rpath, dest)?;
        log.step("rpath");
        log.edits(&edits, self.settings.rpath == RpathPolicy::KeepRunpath);
        log.items(&items);
        match self.opts.plan.pkg_type {
            PkgType::Deb => {
                let docs_dir = tempfile::tempdir()?;
                let docs = debian_docs_for(self.plan, spec, package, &self.changelog_date);
                items.extend(debian_docs(&docs, docs_dir.path())?);
                let control = deb_control(self.plan, spec, package);
                let report =
                    build_deb_threads(&control, items, dest, self.opts.deb_compression, self.settings.epoch, threads)?;
                log.step("build");
                Ok((report.path, report.size))
            }
            PkgType::Rpm => {
                let spec = rpm_spec(self.plan, spec, package);
                let date = u32::try_from(self.settings.epoch).unwrap_or(u32::MAX);
                let key = self.opts.rpm_signing_key.as_deref();
                let compression = self.opts.rpm_compression;
                let report = build_rpm_threads(&spec, items, dest, compression, date, key, threads)?;
                log.step("build");
                Ok((report.path, report.size))
            }
        }
    }
}

/// Compression threads for each package: the job count shared in proportion to the bytes of
/// regular files each holds (at least one each), so that one big package among small ones
/// gets every core. The packages' bytes do not change because of it: the compressors' output
/// does not depend on their thread count.
fn compression_threads<E>(contents: &[Result<Vec<(String, Item)>, E>], jobs: usize) -> Vec<u32> {
    let bytes: Vec<u64> = contents
        .iter()
        .map(|items| {
            let files = items.as_ref().map(|items| items.iter()).into_iter().flatten();
            files
                .filter_map(|(_, item)| match item {
                    Item::File { source, .. } => std::fs::metadata(source).ok().map(|m| m.len()),
                    _ => None,
                })
                .sum()
        })
        .collect();
    let total = bytes.iter().sum::<u64>().max(1);
    let jobs = u64::try_from(jobs.max(1)).unwrap_or(1);
    bytes.iter().map(|&b| u32::try_from((jobs * b).div_ceil(total).clamp(1, jobs)).unwrap_or(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_threads_follow_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, len: usize| {
            std::fs::write(dir.path().join(name), vec![0u8; len]).unwrap();
            (name.to_owned(), Item::File { source: dir.path().join(name), mode: 0o644 })
        };
        let contents: Vec<Result<_, ()>> =
            vec![Ok(vec![file("big", 9000)]), Ok(vec![file("small", 10)]), Ok(Vec::new()), Err(())];
        assert_eq!(compression_threads(&contents, 8), [8, 1, 1, 1]);
        assert_eq!(compression_threads(&contents, 1), [1, 1, 1, 1]);
        let halves: Vec<Result<_, ()>> = vec![Ok(vec![file("a", 500)]), Ok(vec![file("b", 500)])];
        assert_eq!(compression_threads(&halves, 4), [2, 2]);
    }
}
