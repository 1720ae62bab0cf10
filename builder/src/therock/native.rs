//! `.deb` and `.rpm` packages of a TheRock plan: plan, walk each package's content, build
//! every package in parallel, and summarize what was built, skipped and failed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use quarry_packaging::therock::{self, PackageSpec, PkgType, Plan, PlanOptions, PlannedPackage};
use rayon::prelude::*;

use super::control::{deb_control, debian_docs_for, install_prefix, rpm_spec};
use super::log::{LOGS_DIR, PackageLog};
use super::{BuildSettings, OnProgress, PackageError, Progress, StagedArtifacts, chain, pool};
use crate::deb::{Compression, build_deb, debian_docs};
use crate::rpath::{RpathPolicy, stage_items};
use crate::rpm::{RpmCompression, build_rpm};
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
    let results: Vec<(&PlannedPackage, Result<Built, String>)> = pool(settings.jobs)?.install(|| {
        plan.packages
            .par_iter()
            .map(|package| {
                progress(Progress::Started { package: &package.name });
                let result = run.build(package).map_err(|e| chain(&e));
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
    /// Builds one package into the destination, and writes its log (failed or not).
    fn build(&self, package: &PlannedPackage) -> Result<Built, PackageError> {
        let kind = match self.opts.plan.pkg_type {
            PkgType::Deb => "deb",
            PkgType::Rpm => "rpm",
        };
        let mut log = PackageLog::start(kind, &package.name);
        let result = self.build_file(package, &mut log);
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
    fn build_file(&self, package: &PlannedPackage, log: &mut PackageLog) -> Result<(PathBuf, u64), PackageError> {
        let spec = self.specs[package.source.as_str()];
        let mut items = collect_items(self.staged.dir(), &package.contents, &self.prefix)?;
        let dest = &self.settings.dest_dir;
        log.step("collect");
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
                let report = build_deb(&control, items, dest, self.opts.deb_compression, self.settings.epoch)?;
                log.step("build");
                Ok((report.path, report.size))
            }
            PkgType::Rpm => {
                let spec = rpm_spec(self.plan, spec, package);
                let date = u32::try_from(self.settings.epoch).unwrap_or(u32::MAX);
                let key = self.opts.rpm_signing_key.as_deref();
                let report = build_rpm(&spec, items, dest, self.opts.rpm_compression, date, key)?;
                log.step("build");
                Ok((report.path, report.size))
            }
        }
    }
}
