//! `quarry package python`: the rocm-sdk wheels and the `rocm` sdist (TheRock's
//! `build_python_packages.py`), built by `quarry_builder::therock::package_wheels`.

use std::io::Write as _;

use anyhow::bail;
use quarry_builder::therock::{
    BuildSettings, OnProgress, StagedArtifacts, WheelSummary, artifacts_platform, package_wheels,
};
use quarry_packaging::therock::wheels::{WheelOptions, platform_tag};

use super::package_args::{PackageArgs, split_targets};

/// Builds the distributions of the staged artifacts and prints the summary.
pub(crate) fn run(
    args: &PackageArgs,
    staged: &StagedArtifacts,
    kpack: bool,
    settings: &BuildSettings,
    progress: OnProgress<'_>,
) -> anyhow::Result<()> {
    let version = match &args.python_version {
        Some(v) => v.clone(),
        None if args.rocm_version.parse::<pep440_rs::Version>().is_ok() => args.rocm_version.clone(),
        None => bail!("--rocm-version {:?} is not a PEP 440 version: give --python-version", args.rocm_version),
    };
    let opts = WheelOptions {
        version,
        nonce: args.version_suffix.clone().unwrap_or_default(),
        kpack,
        platform: platform_tag_for(staged)?,
        targets: split_targets(&args.target),
    };
    let variants = args.variants.request();
    report(&package_wheels(staged, &opts, &variants, settings, progress)?, args.json.json)
}

/// The wheel platform tag: `ROCM_SDK_WHEEL_PLATFORM_TAG`, else the platform the artifacts'
/// shared libraries were built for (PE DLLs: `win_amd64`, from a Linux host too), else this
/// machine's, as TheRock's `sysconfig.get_platform()` default.
fn platform_tag_for(staged: &StagedArtifacts) -> anyhow::Result<String> {
    if let Ok(tag) = std::env::var("ROCM_SDK_WHEEL_PLATFORM_TAG")
        && !tag.trim().is_empty()
    {
        return Ok(platform_tag(tag.trim()));
    }
    if let Some(tag) = artifacts_platform(staged)? {
        return Ok(tag.to_owned());
    }
    Ok(host_platform(std::env::consts::OS, std::env::consts::ARCH))
}

/// Python's `sysconfig.get_platform()` of a host, as a wheel tag: `win_amd64` and `win_arm64`
/// on Windows (never `windows_x86_64`), else `{os}_{arch}` (`linux_x86_64`).
fn host_platform(os: &str, arch: &str) -> String {
    match (os, arch) {
        ("windows", "x86_64") => "win_amd64".to_owned(),
        ("windows", "aarch64") => "win_arm64".to_owned(),
        ("windows", "x86") => "win32".to_owned(),
        _ => platform_tag(&format!("{os}-{arch}")),
    }
}

/// Prints the summary and fails when nothing could be built.
fn report(summary: &WheelSummary, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        let value = serde_json::json!({
            "targets": summary.targets,
            "built": summary.built.iter().map(|b| serde_json::json!({
                "package": b.dist,
                "file": b.file.file_name().map(|n| n.to_string_lossy().into_owned()),
                "size": b.report.size,
                "sha256": b.report.sha256,
            })).collect::<Vec<_>>(),
            "skipped": [],
            "failed": [],
        });
        serde_json::to_writer_pretty(&mut out, &value)?;
        writeln!(out)?;
    } else {
        write!(out, "{summary}")?;
    }
    if summary.built.is_empty() {
        bail!("nothing was built");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::host_platform;

    #[test]
    fn host_platforms_are_python_s() {
        assert_eq!(host_platform("windows", "x86_64"), "win_amd64");
        assert_eq!(host_platform("windows", "aarch64"), "win_arm64");
        assert_eq!(host_platform("linux", "x86_64"), "linux_x86_64");
        assert_eq!(host_platform("linux", "aarch64"), "linux_aarch64");
    }
}
