//! `quarry package`'s arguments: which packages (`deb`, `rpm`, `python`), the version
//! flags, the compression and build options, and `--variants` for wheels. Read by
//! [`super::package`] (debs and rpms) and [`super::package_python`] (wheels).

use std::path::PathBuf;

use anyhow::bail;
use quarry_builder::therock::{DEFAULT_INSTALL_PREFIX, VariantRequest};
use quarry_packaging::therock::base_target;

use super::args::JsonArg;

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
    /// The default packages (TheRock's CI passes its build variant label, `release`).
    Release,
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
    #[arg(value_enum, id = "pkg_type", value_name = "PKG_TYPE", required_unless_present = "pkg_type_flag")]
    pub(crate) pkg_type_arg: Option<PackageKind>,
    /// The same as PKG_TYPE, as build_package.py spells it (any case).
    #[arg(
        long = "pkg-type",
        id = "pkg_type_flag",
        value_name = "PKG_TYPE",
        value_enum,
        ignore_case = true,
        hide_short_help = true
    )]
    pub(crate) pkg_type_flag: Option<PackageKind>,
    /// Which packages: PKG_TYPE or --pkg-type (`PackageArgs::resolve_pkg_type`).
    #[arg(skip = PackageKind::Deb)]
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
    pub(crate) rocm_version_arg: Option<String>,
    /// Instead of --rocm-version: TheRock's versions of this release type (`quarry version`):
    /// version.json at the git work tree's root (or --version-file), the sha from GITHUB_SHA or
    /// git, the date from SOURCE_DATE_EPOCH or today.
    #[arg(long, value_enum)]
    pub(crate) release_type: Option<super::version::ReleaseTypeArg>,
    /// With --release-type prerelease: the release candidate number.
    #[arg(long)]
    pub(crate) prerelease_version: Option<String>,
    /// With --release-type: the version.json to read.
    #[arg(long)]
    pub(crate) version_file: Option<PathBuf>,
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
    /// artifact's `therock_manifest.json` sets `flags.KPACK_SPLIT_ARTIFACTS`). Also spelled
    /// `--enable-multi-arch`.
    #[arg(long, alias = "enable-multi-arch")]
    pub(crate) enable_kpack: bool,
    /// Install prefix; the default `/opt/rocm/core` becomes `/opt/rocm/core-{major.minor}`.
    #[arg(long, default_value = DEFAULT_INSTALL_PREFIX)]
    pub(crate) install_prefix: String,
    /// `asan` names packages `…-asan…` and installs under `core-asan-{major.minor}`.
    #[arg(long, value_enum)]
    pub(crate) build_variant: Option<BuildVariant>,
    /// Only these packages (package.json names).
    #[arg(long, num_args = 1..)]
    pub(crate) pkg_names: Vec<String>,
    /// The package description (default: TheRock's, built in).
    #[arg(long)]
    pub(crate) package_json: Option<PathBuf>,
    /// deb payload compression: xz (every dpkg reads it) or zstd (dpkg ≥ 1.21.18).
    #[arg(long, value_enum, default_value_t = DebCompression::Xz)]
    pub(crate) deb_compression: DebCompression,
    /// rpm payload compression: zstd (TheRock's `w9.zstdio`) or gzip.
    #[arg(long, value_enum, default_value_t = RpmPayload::Zstd)]
    pub(crate) rpm_compression: RpmPayload,
    /// Payload compression level (deb xz: 0–9, default 6 as `-Zxz`; deb zstd: 1–22, default 19;
    /// rpm zstd: 1–22, default 9 as TheRock's `w9.zstdio`; rpm gzip: 1–9, default 9).
    #[arg(long, value_parser = clap::value_parser!(i32).range(0..=22))]
    pub(crate) compression_level: Option<i32>,
    /// rpm: sign every package with this armored OpenPGP secret key (RSA or Ed25519);
    /// `rpm -K` verifies them once the public key is imported.
    #[arg(long, env = "QUARRY_RPM_SIGNING_KEY_FILE")]
    pub(crate) sign_key: Option<PathBuf>,
    /// Keep DT_RUNPATH in packaged ELF files (by default it becomes DT_RPATH, as TheRock's
    /// build_package.py does, on staged copies: the artifacts are not written).
    #[arg(long)]
    pub(crate) runpath_pkg: bool,
    /// First remove this type's previous outputs from the destination (its packages, their
    /// logs under logs/, scratch directories a killed run left).
    #[arg(long)]
    pub(crate) clean_build: bool,
    /// Threads in all (default: the number of CPUs): packages built at once, and each
    /// package's compression threads in proportion to its bytes. The packages' bytes do not
    /// depend on it.
    #[arg(long)]
    pub(crate) jobs: Option<usize>,
    #[command(flatten)]
    pub(crate) json: JsonArg,
    #[command(flatten)]
    pub(crate) variants: VariantsArg,
}

impl PackageArgs {
    /// The packages to build: PKG_TYPE or `--pkg-type`; both, disagreeing, is bad input.
    pub(crate) fn resolve_pkg_type(&mut self) -> Result<(), super::UsageError> {
        self.pkg_type = match (self.pkg_type_arg, self.pkg_type_flag) {
            (Some(a), Some(b)) if a != b => {
                return Err(super::UsageError::new(format!(
                    "`quarry package {}` and --pkg-type {} disagree: give one",
                    kind_name(a),
                    kind_name(b)
                )));
            }
            (Some(kind), _) | (None, Some(kind)) => kind,
            (None, None) => return Err(super::UsageError::new("which packages: `quarry package deb|rpm|python`")),
        };
        Ok(())
    }
}

/// A package kind as the command line spells it.
fn kind_name(kind: PackageKind) -> String {
    use clap::ValueEnum as _;
    kind.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default()
}

/// `--target` values split as TheRock splits them, `:xnack…` stripped.
pub(crate) fn split_targets(raw: &[String]) -> Vec<String> {
    raw.iter().flat_map(|t| quarry_topology::split_list(t)).map(|t| base_target(&t).to_owned()).collect()
}

/// `--variants`, flattened into `quarry package`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct VariantsArg {
    /// python (kpack): also build each GPU target's device wheel as a wheel variant (PEP 825)
    /// of `rocm-sdk-device`, labelled with the target and holding `amd :: gfx_arch :: {target}`,
    /// beside the extras-based `rocm-sdk-device-{target}` wheels. Alone or `all`: every target;
    /// else the targets (comma, `;` or space separated).
    /// Parsed once, by clap (`VariantRequest::parse`): a value that is no target is refused
    /// before anything else runs.
    #[arg(long, num_args = 0..=1, default_missing_value = "all", value_name = "TARGETS", value_parser = VariantRequest::parse)]
    pub(crate) variants: Option<VariantRequest>,
}

impl VariantsArg {
    /// Refuses `--variants` for debs and rpms, before any artifact is unpacked.
    pub(crate) fn check(&self, kind: PackageKind) -> anyhow::Result<()> {
        match (&self.variants, kind) {
            (None, _) | (Some(_), PackageKind::Python) => Ok(()),
            (Some(_), _) => bail!("--variants builds rocm-sdk wheel variants: it is for `quarry package python` only"),
        }
    }

    pub(crate) fn request(&self) -> VariantRequest {
        self.variants.clone().unwrap_or_default()
    }
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
