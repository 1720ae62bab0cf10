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
    BuildSettings, DEFAULT_INSTALL_PREFIX, NativeOptions, Progress, StagedArtifacts, Summary, clean_build,
    package_native,
};
use quarry_builder::{Compression, RpmCompression};
use quarry_packaging::therock::{self, PkgType, PlanOptions, base_target};

use super::args::JsonArg;
use super::package_python;

/// Which packages `quarry package` builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PackageKind {
    Deb,
    Rpm,
    /// The rocm-sdk wheels and the `rocm` sdist.
    Python,
}

/// The `.rpm` payload compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RpmPayload {
    Zstd,
    Gzip,
}

/// A build variant of the packages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BuildVariant {
    Asan,
}

/// The `.deb` payload compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DebCompression {
    Xz,
    Zstd,
}

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("rocm_versions").required(true).args(["rocm_version_arg", "release_type"]))]
pub(crate) struct PackageArgs {
    /// Which packages: deb, rpm, or python (the rocm-sdk wheels and the `rocm` sdist).
    #[arg(value_enum)]
    pub(crate) pkg_type: PackageKind,
    /// TheRock artifacts: `{name}_{component}_{target}/` directories with `artifact_manifest.txt`,
    /// or `….tar.zst` / `….tar.xz` archives of them (unpacked, checked, under the destination).
    #[arg(long, alias = "artifact-dir")]
    pub(crate) artifacts_dir: PathBuf,
    /// Where the packages are written (created if missing).
    #[arg(long)]
    pub(crate) dest_dir: PathBuf,
    /// The ROCm version, e.g. 7.1.0 or 7.15.0~dev20260820.
    #[arg(long = "rocm-version", id = "rocm_version_arg")]
    rocm_version_arg: Option<String>,
    /// Instead of --rocm-version: TheRock's versions of this release type (`quarry version`):
    /// version.json at the git work tree's root (or --version-file), the sha from GITHUB_SHA or
    /// git, the date from SOURCE_DATE_EPOCH or today.
    #[arg(long, value_enum)]
    release_type: Option<super::version::ReleaseTypeArg>,
    /// With --release-type prerelease: the release candidate number.
    #[arg(long)]
    prerelease_version: Option<String>,
    /// With --release-type: the version.json to read.
    #[arg(long)]
    version_file: Option<PathBuf>,
    /// The version the packages get: --rocm-version, or the one --release-type computes.
    #[arg(skip)]
    pub(crate) rocm_version: String,
    /// deb `{version}-{suffix}`, rpm `Release: {suffix}` (CI: the run id); python: the suffix
    /// of every import package name (TheRock's nonce).
    #[arg(long)]
    pub(crate) version_suffix: Option<String>,
    /// python: the wheels' PEP 440 version (default `{rocm-version}.dev0` when the ROCm version
    /// is not PEP 440 itself, else the ROCm version).
    #[arg(long)]
    pub(crate) python_version: Option<String>,
    /// GPU targets (space, comma or `;` separated; `:xnack…` stripped). Default: every
    /// target the artifacts hold.
    #[arg(long, num_args = 1..)]
    pub(crate) target: Vec<String>,
    /// Split per-target packages into host, device and meta packages (also on when an
    /// artifact's `therock_manifest.json` sets `flags.KPACK_SPLIT_ARTIFACTS`).
    #[arg(long)]
    enable_kpack: bool,
    /// Install prefix; the default `/opt/rocm/core` becomes `/opt/rocm/core-{major.minor}`.
    #[arg(long, default_value = DEFAULT_INSTALL_PREFIX)]
    install_prefix: String,
    /// `asan` names packages `…-asan…` and installs under `core-asan-{major.minor}`.
    #[arg(long, value_enum)]
    build_variant: Option<BuildVariant>,
    /// Only these packages (package.json names).
    #[arg(long, num_args = 1..)]
    pkg_names: Vec<String>,
    /// The package description (default: TheRock's, built in).
    #[arg(long)]
    package_json: Option<PathBuf>,
    /// deb payload compression: xz (every dpkg reads it) or zstd (dpkg ≥ 1.21.18).
    #[arg(long, value_enum, default_value_t = DebCompression::Xz)]
    deb_compression: DebCompression,
    /// rpm payload compression: zstd (TheRock's `w9.zstdio`) or gzip.
    #[arg(long, value_enum, default_value_t = RpmPayload::Zstd)]
    rpm_compression: RpmPayload,
    /// Payload compression level (deb xz: 0–9, default 6 as `-Zxz`; deb zstd: 1–22, default 19;
    /// rpm zstd: 1–22, default 9 as TheRock's `w9.zstdio`; rpm gzip: 1–9, default 9).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..=22))]
    compression_level: Option<i32>,
    /// rpm: sign every package with this armored OpenPGP secret key (RSA or Ed25519);
    /// `rpm -K` verifies them once the public key is imported.
    #[arg(long, env = "QUARRY_RPM_SIGNING_KEY_FILE")]
    sign_key: Option<PathBuf>,
    /// Keep DT_RUNPATH in packaged ELF files (by default it becomes DT_RPATH, as TheRock's
    /// build_package.py does, on staged copies: the artifacts are not written).
    #[arg(long)]
    runpath_pkg: bool,
    /// First remove this type's previous outputs from the destination (its packages, their
    /// logs under logs/, scratch directories a killed run left).
    #[arg(long)]
    clean_build: bool,
    /// Threads in all (default: the number of CPUs): packages built at once, and each
    /// package's compression threads in proportion to its bytes. The packages' bytes do not
    /// depend on it.
    #[arg(long)]
    jobs: Option<usize>,
    #[command(flatten)]
    pub(crate) json: JsonArg,
    #[command(flatten)]
    pub(crate) variants: package_python::VariantsArg,
}

/// `--target` values split as TheRock splits them, `:xnack…` stripped.
pub(crate) fn split_targets(raw: &[String]) -> Vec<String> {
    raw.iter().flat_map(|t| quarry_topology::split_list(t)).map(|t| base_target(&t).to_owned()).collect()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_split_like_therock() {
        let raw = vec!["gfx942:xnack+,gfx1100;gfx90a  gfx942".to_owned(), "gfx1201".to_owned()];
        assert_eq!(split_targets(&raw), ["gfx942", "gfx1100", "gfx90a", "gfx942", "gfx1201"]);
    }
}
