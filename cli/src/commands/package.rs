//! `quarry package deb|rpm|python`: TheRock's `build_package.py` without dpkg-buildpackage or
//! rpmbuild. Flags and the environment in, the summary out; the work is
//! `quarry_builder::therock` (unpack, plan with `quarry-packaging`, build in parallel).

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::{Context, bail};
use clap::ValueEnum as _;
use indicatif::{ProgressBar, ProgressStyle};
use quarry_builder::rpath::RpathPolicy;
use quarry_builder::therock::{
    BuildSettings, NativeOptions, Progress, StagedArtifacts, Summary, clean_build, package_native,
};
use quarry_builder::{Compression, RpmCompression};
use quarry_packaging::therock::{self, PkgType, PlanOptions};

use super::package_args::{BuildVariant, DebCompression, PackageArgs, PackageKind, RpmPayload, split_targets};
use super::package_python;

impl PackageArgs {
    /// Fills `rocm_version` (and, for wheels, `python_version`) from --rocm-version or
    /// --release-type.
    fn resolve_versions(&mut self) -> anyhow::Result<()> {
        let Some(release_type) = self.release_type else {
            if self.prerelease_version.is_some() || self.version_file.is_some() {
                let message = "--prerelease-version and --version-file go with --release-type";
                return Err(super::UsageError::new(message).into());
            }
            self.rocm_version = self.rocm_version_arg.clone().unwrap_or_default();
            return Ok(());
        };
        let request = quarry_stage::checkout::VersionRequest {
            suffix: therock::version::Suffix::Release(release_type.release_type()?),
            repo: PathBuf::from("."),
            version_file: self.version_file.clone(),
            override_base_version: None,
            git_sha: std::env::var("GITHUB_SHA").ok(),
            date: None,
            source_date_epoch: std::env::var("SOURCE_DATE_EPOCH").ok(),
            prerelease_version: self.prerelease_version.clone(),
        };
        let resolved = quarry_stage::checkout::package_versions(&request)
            .map_err(|e| super::UsageError::new(format!("--release-type: {e}")))?;
        let v = resolved.versions;
        self.rocm_version = match self.pkg_type {
            PackageKind::Deb => v.rocm_deb_package_version,
            PackageKind::Rpm => v.rocm_rpm_package_version,
            PackageKind::Python => v.base_version,
        };
        self.python_version.get_or_insert(v.rocm_package_version);
        tracing::info!(version = %self.rocm_version, release_type = %release_type.release_type()?, "versions");
        Ok(())
    }

    fn deb_compression(&self) -> Compression {
        match (self.deb_compression, self.compression_level) {
            (DebCompression::Zstd, level) => Compression::Zstd { level: level.unwrap_or(19) },
            (DebCompression::Xz, Some(level)) => {
                Compression::Xz { level: u32::try_from(level.clamp(0, 9)).unwrap_or(6) }
            }
            (DebCompression::Xz, None) => Compression::default(),
        }
    }

    fn rpm_compression(&self) -> RpmCompression {
        match (self.rpm_compression, self.compression_level) {
            (RpmPayload::Zstd, level) => RpmCompression::Zstd { level: level.unwrap_or(9).max(1) },
            (RpmPayload::Gzip, level) => {
                RpmCompression::Gzip { level: level.map_or(9, |l| l.clamp(1, 9).unsigned_abs()) }
            }
        }
    }

    /// The rpm signing key's text (`--sign-key` is for rpms only).
    fn rpm_signing_key(&self) -> anyhow::Result<Option<String>> {
        match (&self.sign_key, self.pkg_type) {
            (Some(path), PackageKind::Rpm) => Ok(Some(
                std::fs::read_to_string(path).with_context(|| format!("reading the signing key {}", path.display()))?,
            )),
            (Some(_), _) => bail!("--sign-key signs rpm packages; debs are signed through their repository"),
            (None, _) => Ok(None),
        }
    }
}

pub(crate) async fn run(mut args: PackageArgs) -> anyhow::Result<()> {
    args.resolve_pkg_type()?;
    args.resolve_versions()?;
    tokio::task::spawn_blocking(move || run_blocking(&args)).await?
}

fn run_blocking(args: &PackageArgs) -> anyhow::Result<()> {
    args.variants.check(args.pkg_type)?;
    let text = match &args.package_json {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        None => therock::THEROCK_PACKAGE_JSON.to_owned(),
    };
    let specs = therock::parse_package_json(&text)?;
    let epoch = super::source_date_epoch()?.unwrap_or_else(|| jiff::Timestamp::now().as_second().unsigned_abs());
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from)).max(1);
    let rpath = if args.runpath_pkg { RpathPolicy::KeepRunpath } else { RpathPolicy::ForceRpath };
    let settings = BuildSettings { dest_dir: args.dest_dir.clone(), epoch, jobs, rpath };
    if args.clean_build {
        let kind = args.pkg_type.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default();
        let removed = clean_build(&args.dest_dir, &kind)?;
        tracing::info!(removed = removed.len(), dest = %args.dest_dir.display(), "--clean-build");
    }
    let bar = OnceLock::new();
    let progress = |event: Progress<'_>| on_progress(&bar, event);
    let staged = StagedArtifacts::open(&args.artifacts_dir, &settings, &progress)?;
    let kpack = args.enable_kpack || staged.kpack_requested();
    let pkg_type = match args.pkg_type {
        PackageKind::Python => return package_python::run(args, &staged, kpack, &settings, &progress),
        PackageKind::Deb => PkgType::Deb,
        PackageKind::Rpm => PkgType::Rpm,
    };
    let options = NativeOptions {
        plan: PlanOptions {
            pkg_type,
            rocm_version: args.rocm_version.clone(),
            version_suffix: args.version_suffix.clone(),
            targets: split_targets(&args.target),
            kpack,
            asan: args.build_variant == Some(BuildVariant::Asan),
            only: (!args.pkg_names.is_empty()).then(|| args.pkg_names.clone()),
        },
        install_prefix: args.install_prefix.clone(),
        deb_compression: args.deb_compression(),
        rpm_compression: args.rpm_compression(),
        rpm_signing_key: args.rpm_signing_key()?,
    };
    let summary = package_native(&staged, &specs, &options, &settings, &progress);
    if let Some(bar) = bar.get() {
        bar.finish_and_clear();
    }
    report(&summary?, args.json.json)
}

/// Logs the plan and keeps a progress bar (on stderr, when it is a terminal) over the builds.
fn on_progress(bar: &OnceLock<ProgressBar>, event: Progress<'_>) {
    match (event, bar.get()) {
        (Progress::Unpacking { archives }, _) => tracing::info!(archives, "unpacking artifact archives"),
        (Progress::Planned { plan, prefix, kpack }, _) => {
            tracing::info!(packages = plan.packages.len(), targets = %plan.targets.join(","), kpack, prefix, "planned");
            bar.get_or_init(|| {
                let style = ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
                ProgressBar::new(plan.packages.len() as u64).with_style(style)
            });
        }
        (Progress::PlannedWheels { plan, kpack }, _) => {
            tracing::info!(wheels = plan.wheels.len(), targets = %plan.targets.join(","), kpack, "planned");
        }
        (Progress::Started { package }, Some(bar)) => bar.set_message(package.to_owned()),
        (Progress::Finished { .. }, Some(bar)) => bar.inc(1),
        (Progress::Started { .. } | Progress::Finished { .. }, None) => {}
    }
}

/// `PACKAGING_ARCH_LIST` to `$GITHUB_OUTPUT`, the summary on stdout; fails when any package did.
fn report(summary: &Summary, json: bool) -> anyhow::Result<()> {
    if !summary.targets.is_empty() {
        super::append_to_github_file("GITHUB_OUTPUT", &format!("PACKAGING_ARCH_LIST={}\n", summary.targets.join(",")))?;
    }
    super::print(json, summary, summary)?;
    if !summary.failed.is_empty() {
        bail!("{} of {} packages failed", summary.failed.len(), summary.failed.len() + summary.built.len());
    }
    Ok(())
}
