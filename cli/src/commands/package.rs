//! `quarry package deb|rpm`: TheRock's `build_package.py` without dpkg-buildpackage or
//! rpmbuild. The plan comes from `quarry-packaging` (pure), the files from `quarry-builder`;
//! packages are built in parallel, and the summary lists what was built, skipped and failed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use quarry_artifacts::{ArtifactName, ExtractMode, Limits, extract};
use quarry_builder::{
    Compression, DebControl, DebianDocs, RpmCompression, RpmSpec, build_deb, build_rpm, collect_items, debian_docs,
    read_artifacts,
};
use quarry_packaging::therock::wheels::WheelOptions;
use quarry_packaging::therock::{self, PackageSpec, PkgType, Plan, PlanOptions, PlannedPackage};

use super::package_python;

#[derive(Debug, clap::Args)]
pub(crate) struct PackageArgs {
    /// Which packages: deb, rpm, or python (the rocm-sdk wheels and the `rocm` sdist).
    #[arg(value_parser = ["deb", "rpm", "python"])]
    pkg_type: String,
    /// TheRock artifacts: `{name}_{component}_{target}/` directories with `artifact_manifest.txt`,
    /// or `….tar.zst` / `….tar.xz` archives of them (unpacked, checked, under the destination).
    #[arg(long, alias = "artifact-dir")]
    artifacts_dir: PathBuf,
    /// Where the packages are written (created if missing).
    #[arg(long)]
    dest_dir: PathBuf,
    /// The ROCm version, e.g. 7.1.0 or 7.15.0~dev20260820.
    #[arg(long)]
    rocm_version: String,
    /// deb `{version}-{suffix}`, rpm `Release: {suffix}` (CI: the run id); python: the suffix
    /// of every import package name (TheRock's nonce).
    #[arg(long)]
    version_suffix: Option<String>,
    /// python: the wheels' PEP 440 version (default `{rocm-version}.dev0` when the ROCm version
    /// is not PEP 440 itself, else the ROCm version).
    #[arg(long)]
    python_version: Option<String>,
    /// GPU targets (space, comma or `;` separated; `:xnack…` stripped). Default: every
    /// target the artifacts hold.
    #[arg(long, num_args = 1..)]
    target: Vec<String>,
    /// Split per-target packages into host, device and meta packages (also on when an
    /// artifact's `therock_manifest.json` sets `flags.KPACK_SPLIT_ARTIFACTS`).
    #[arg(long)]
    enable_kpack: bool,
    /// Install prefix; the default `/opt/rocm/core` becomes `/opt/rocm/core-{major.minor}`.
    #[arg(long, default_value = "/opt/rocm/core")]
    install_prefix: String,
    /// `asan` names packages `…-asan…` and installs under `core-asan-{major.minor}`.
    #[arg(long, value_parser = ["asan"])]
    build_variant: Option<String>,
    /// Only these packages (package.json names).
    #[arg(long, num_args = 1..)]
    pkg_names: Vec<String>,
    /// The package description (default: TheRock's, built in).
    #[arg(long)]
    package_json: Option<PathBuf>,
    /// deb payload compression: xz (every dpkg reads it) or zstd (dpkg ≥ 1.21.18).
    #[arg(long, value_parser = ["xz", "zstd"], default_value = "xz")]
    deb_compression: String,
    /// Payload compression level (deb xz: 0–9, default 6; deb zstd and rpm zstd: 1–22,
    /// default 19, TheRock's `w9.zstdio` is level 9).
    #[arg(long)]
    compression_level: Option<i32>,
    /// rpm: sign every package with this armored OpenPGP secret key (RSA or Ed25519);
    /// `rpm -K` verifies them once the public key is imported.
    #[arg(long, env = "QUARRY_RPM_SIGNING_KEY_FILE")]
    sign_key: Option<PathBuf>,
    /// Packages built at once (default: the number of CPUs).
    #[arg(long)]
    jobs: Option<usize>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, serde::Serialize)]
struct Built {
    package: String,
    file: String,
    size: u64,
}

#[derive(Debug, Default, serde::Serialize)]
struct Summary {
    targets: Vec<String>,
    built: Vec<Built>,
    skipped: Vec<(String, String)>,
    failed: Vec<(String, String)>,
}

/// When `dir` holds artifact archives: a scratch directory under `dest` where each is unpacked
/// (checked member by member) as `{name}_{component}_{target}/`, beside links to the artifact
/// directories `dir` already holds (a directory wins over an archive of the same name,
/// `.tar.zst` over `.tar.xz`). `None` when there are no archives. Removed when dropped.
fn stage_artifacts(dir: &Path, dest: &Path, jobs: usize) -> anyhow::Result<Option<tempfile::TempDir>> {
    let mut dirs = std::collections::BTreeSet::new();
    let mut archives = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_dir() {
            dirs.insert(name);
        } else if let Some((artifact, format)) = ArtifactName::parse_archive(&name) {
            let slot = archives.entry(artifact.dir_name()).or_insert((format, entry.path()));
            if format < slot.0 {
                *slot = (format, entry.path());
            }
        }
    }
    archives.retain(|name, _| !dirs.contains(name));
    if archives.is_empty() {
        return Ok(None);
    }
    let staging = tempfile::Builder::new().prefix(".quarry-artifacts-").tempdir_in(dest)?;
    for name in &dirs {
        std::os::unix::fs::symlink(std::path::absolute(dir.join(name))?, staging.path().join(name))?;
    }
    tracing::info!(archives = archives.len(), "unpacking artifact archives");
    let queue = Mutex::new(archives.iter());
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                while let Some((name, (format, path))) =
                    queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next()
                {
                    let result = std::fs::File::open(path).map_err(anyhow::Error::from).and_then(|file| {
                        let reader = std::io::BufReader::new(file);
                        extract(reader, *format, &staging.path().join(name), ExtractMode::Tree, Limits::default())?;
                        Ok(())
                    });
                    if let Err(e) = result {
                        failures
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(format!("{}: {e:#}", path.display()));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !failures.is_empty() {
        bail!("artifact archives refused:\n  {}", failures.join("\n  "));
    }
    Ok(Some(staging))
}

/// `--target` values split as TheRock splits them.
fn split_targets(raw: &[String]) -> Vec<String> {
    raw.iter()
        .flat_map(|t| t.split([',', ';', ' ', '\t']))
        .filter(|t| !t.is_empty())
        .map(|t| t.split(':').next().unwrap_or_default().to_owned())
        .collect()
}

/// Whether any `therock_manifest.json` below `dir` (a few levels deep) asks for kpack.
fn kpack_requested(dir: &Path, depth: u32) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    for entry in entries.flatten() {
        let path = entry.path();
        if entry.file_name() == "therock_manifest.json" {
            let flag = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v.pointer("/flags/KPACK_SPLIT_ARTIFACTS").cloned());
            if matches!(flag, Some(serde_json::Value::Bool(true)))
                || flag.as_ref().and_then(|f| f.as_str()) == Some("true")
            {
                return true;
            }
        } else if depth > 0 && entry.file_type().is_ok_and(|t| t.is_dir()) && kpack_requested(&path, depth - 1) {
            return true;
        }
    }
    false
}

/// `text` broken into lines of at most `width` characters at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn deb_control(plan: &Plan, spec: &PackageSpec, package: &PlannedPackage) -> DebControl {
    let mut description = spec.description_short.clone();
    if description.is_empty() {
        description = package.name.clone();
    }
    for line in wrap(&spec.description_long, 79) {
        description.push_str("\n ");
        description.push_str(&line);
    }
    DebControl::default()
        .field("Package", package.name.clone())
        .field("Version", plan.versions.deb.clone())
        .field("Architecture", spec.architecture.clone())
        .field("Maintainer", spec.maintainer.clone())
        .field("Depends", package.depends.join(", "))
        .field("Recommends", package.recommends.join(", "))
        .field("Suggests", package.suggests.join(", "))
        .field("Provides", package.provides.join(", "))
        .field("Replaces", package.replaces.join(", "))
        .field("Conflicts", package.conflicts.join(", "))
        .field("Section", spec.section.clone())
        .field("Priority", spec.priority.clone())
        .field("Homepage", spec.homepage.clone())
        .field("Description", description)
}

fn rpm_spec(plan: &Plan, spec: &PackageSpec, package: &PlannedPackage) -> RpmSpec {
    // rpm dependencies are `name OP version`; TheRock's pins already read that way.
    RpmSpec {
        name: package.name.clone(),
        version: plan.versions.rpm_version.clone(),
        release: plan.versions.rpm_release.clone(),
        arch: spec.build_arch.clone(),
        license: spec.license.clone(),
        summary: if spec.description_short.is_empty() { package.name.clone() } else { spec.description_short.clone() },
        description: wrap(
            if spec.description_long.is_empty() { &spec.description_short } else { &spec.description_long },
            79,
        )
        .join("\n"),
        url: spec.homepage.clone(),
        vendor: spec.vendor.clone(),
        packager: spec.maintainer.clone(),
        group: spec.group.clone(),
        requires: package.depends.clone(),
        provides: package.provides.clone(),
        recommends: package.recommends.clone(),
        suggests: package.suggests.clone(),
        conflicts: package.conflicts.clone(),
        obsoletes: package.obsoletes.clone(),
        changelog: vec![(
            format!("{} - {}-{}", spec.maintainer, plan.versions.rpm_version, plan.versions.rpm_release),
            "- Built by quarry package.".into(),
            0,
        )],
    }
}

pub(crate) async fn run(args: PackageArgs) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(move || run_blocking(&args)).await?
}

fn run_blocking(args: &PackageArgs) -> anyhow::Result<()> {
    let text = match &args.package_json {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        None => therock::THEROCK_PACKAGE_JSON.to_owned(),
    };
    let specs = therock::parse_package_json(&text)?;
    if !args.artifacts_dir.is_dir() {
        bail!("{}: the artifacts directory does not exist", args.artifacts_dir.display());
    }
    std::fs::create_dir_all(&args.dest_dir).with_context(|| format!("creating {}", args.dest_dir.display()))?;
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from)).max(1);
    let staged = stage_artifacts(&args.artifacts_dir, &args.dest_dir, jobs)?;
    let artifacts_dir = staged.as_ref().map_or(args.artifacts_dir.as_path(), |t| t.path());
    let index = read_artifacts(artifacts_dir)?;
    let epoch: u64 = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(v) => v.trim().parse().with_context(|| format!("SOURCE_DATE_EPOCH={v:?} is not a number"))?,
        Err(_) => jiff::Timestamp::now().as_second().max(0) as u64,
    };
    let kpack = args.enable_kpack || kpack_requested(artifacts_dir, 6);
    if args.pkg_type == "python" {
        let version = match &args.python_version {
            Some(v) => v.clone(),
            None if args.rocm_version.parse::<pep440_rs::Version>().is_ok() => args.rocm_version.clone(),
            None => bail!("--rocm-version {:?} is not a PEP 440 version: give --python-version", args.rocm_version),
        };
        let opts = WheelOptions {
            version,
            nonce: args.version_suffix.clone().unwrap_or_default(),
            kpack,
            platform: package_python::platform_from_env(),
            targets: split_targets(&args.target),
        };
        let (targets, built) = package_python::build(artifacts_dir, &index, &args.dest_dir, &opts, epoch, jobs)?;
        return package_python::report(&targets, &built, args.json);
    }
    let pkg_type = if args.pkg_type == "deb" { PkgType::Deb } else { PkgType::Rpm };
    let asan = args.build_variant.as_deref() == Some("asan");
    let options = PlanOptions {
        pkg_type,
        rocm_version: args.rocm_version.clone(),
        version_suffix: args.version_suffix.clone(),
        targets: split_targets(&args.target),
        kpack,
        asan,
        only: (!args.pkg_names.is_empty()).then(|| args.pkg_names.clone()),
    };
    let plan = therock::plan(&specs, &index, &options)?;
    let prefix = if args.install_prefix.trim_end_matches('/') == "/opt/rocm/core" {
        if asan {
            format!("/opt/rocm/core-asan-{}", plan.versions.tag)
        } else {
            format!("/opt/rocm/core-{}", plan.versions.tag)
        }
    } else {
        args.install_prefix.clone()
    };
    let deb_compression = match (args.deb_compression.as_str(), args.compression_level) {
        ("zstd", level) => Compression::Zstd { level: level.unwrap_or(19) },
        (_, Some(level)) => Compression::Xz { level: u32::try_from(level.clamp(0, 9)).unwrap_or(6) },
        (_, None) => Compression::default(),
    };
    let changelog_date = jiff::Timestamp::from_second(i64::try_from(epoch).unwrap_or(0))
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%a, %d %b %Y %H:%M:%S +0000")
        .to_string();
    let changelog_date = changelog_date.as_str();
    let rpm_key = match (&args.sign_key, pkg_type) {
        (Some(path), PkgType::Rpm) => {
            Some(std::fs::read_to_string(path).with_context(|| format!("reading the signing key {}", path.display()))?)
        }
        (Some(_), PkgType::Deb) => bail!("--sign-key signs rpm packages; debs are signed through their repository"),
        (None, _) => None,
    };
    let rpm_compression = RpmCompression::Zstd { level: args.compression_level.unwrap_or(19) };
    tracing::info!(
        packages = plan.packages.len(),
        targets = %plan.targets.join(","),
        kpack = options.kpack,
        prefix = %prefix,
        "planned"
    );

    let by_name: std::collections::BTreeMap<&str, &PackageSpec> =
        specs.iter().map(|s| (s.package.as_str(), s)).collect();
    let bar = ProgressBar::new(plan.packages.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}").unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let summary =
        Mutex::new(Summary { targets: plan.targets.clone(), skipped: plan.skipped.clone(), ..Summary::default() });
    let queue = Mutex::new(plan.packages.iter());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let Some(package) = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next() else {
                        break;
                    };
                    bar.set_message(package.name.clone());
                    let spec = by_name[package.source.as_str()];
                    let result = (|| -> anyhow::Result<(PathBuf, u64)> {
                        let items = collect_items(artifacts_dir, &package.contents, &prefix)?;
                        match pkg_type {
                            PkgType::Deb => {
                                let control = deb_control(&plan, spec, package);
                                let docs_dir = tempfile::tempdir()?;
                                let docs = DebianDocs {
                                    package: package.name.clone(),
                                    version: plan.versions.deb.clone(),
                                    maintainer: spec.maintainer.clone(),
                                    license: spec.license.clone(),
                                    copyright_holder: spec.vendor.clone(),
                                    source_url: spec.homepage.clone(),
                                    date: changelog_date.to_owned(),
                                    // TheRock installs under /opt/rocm on purpose.
                                    lintian_overrides: vec!["dir-or-file-in-opt".into()],
                                };
                                let mut items = items;
                                items.extend(debian_docs(&docs, docs_dir.path())?);
                                let report = build_deb(&control, items, &args.dest_dir, deb_compression, epoch)?;
                                Ok((report.path, report.size))
                            }
                            PkgType::Rpm => {
                                let spec = rpm_spec(&plan, spec, package);
                                let date = u32::try_from(epoch).unwrap_or(u32::MAX);
                                let report =
                                    build_rpm(&spec, items, &args.dest_dir, rpm_compression, date, rpm_key.as_deref())?;
                                Ok((report.path, report.size))
                            }
                        }
                    })();
                    let mut summary = summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    match result {
                        Ok((path, size)) => summary.built.push(Built {
                            package: package.name.clone(),
                            file: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                            size,
                        }),
                        Err(e) => {
                            tracing::error!(package = %package.name, "{e:#}");
                            summary.failed.push((package.name.clone(), format!("{e:#}")));
                        }
                    }
                    bar.inc(1);
                }
            });
        }
    });
    bar.finish_and_clear();
    let mut summary = summary.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    summary.built.sort_by(|a, b| a.package.cmp(&b.package));
    summary.failed.sort();

    if let Ok(path) = std::env::var("GITHUB_OUTPUT")
        && !summary.targets.is_empty()
    {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
        writeln!(file, "PACKAGING_ARCH_LIST={}", summary.targets.join(","))?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        for b in &summary.built {
            writeln!(out, "built   {} ({} bytes)", b.file, b.size)?;
        }
        for (name, reason) in &summary.skipped {
            writeln!(out, "skipped {name}: {reason}")?;
        }
        for (name, reason) in &summary.failed {
            writeln!(out, "failed  {name}: {reason}")?;
        }
        writeln!(
            out,
            "{} built, {} skipped, {} failed; targets {}",
            summary.built.len(),
            summary.skipped.len(),
            summary.failed.len(),
            summary.targets.join(",")
        )?;
    }
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
