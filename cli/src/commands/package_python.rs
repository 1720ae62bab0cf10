//! `quarry package python`: the rocm-sdk wheels and the `rocm` sdist (TheRock's
//! `build_python_packages.py`), planned by `quarry-packaging`, built by `quarry-builder`.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context, bail};
use quarry_builder::python::{
    BuiltDist, Populated, WheelContext, build_devel_wheel, build_runtime_wheel, build_sdist, populate,
};
use quarry_packaging::therock::ArtifactIndex;
use quarry_packaging::therock::wheels::{DistKind, WheelOptions, plan_wheels, platform_tag};

/// Builds every distribution of the plan into `dest` and returns the summary lines' data.
pub(crate) fn build(
    artifacts: &Path,
    index: &ArtifactIndex,
    dest: &Path,
    opts: &WheelOptions,
    epoch: u64,
    jobs: usize,
) -> anyhow::Result<(Vec<String>, Vec<BuiltDist>)> {
    let plan = plan_wheels(index, opts)?;
    tracing::info!(wheels = plan.wheels.len(), targets = %plan.targets.join(","), kpack = opts.kpack, "planned");
    let ctx = WheelContext { artifacts, index, plan: &plan, opts, dest_dir: dest, mtime: epoch };
    // Runtime wheels first (in parallel): the devel tarball links to what they install.
    let runtime: Vec<_> = plan.wheels.iter().filter(|w| w.kind != DistKind::Devel).collect();
    let queue = std::sync::Mutex::new(runtime.iter().enumerate());
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let Some((i, wheel)) = queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner).next()
                    else {
                        break;
                    };
                    let result = populate(&ctx, wheel).and_then(|populated| {
                        let built = build_runtime_wheel(&ctx, wheel, &populated)?;
                        Ok((populated, built))
                    });
                    results.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((i, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    results.sort_by_key(|(i, _)| *i);
    let mut built = Vec::new();
    let mut populated: Vec<(String, Populated)> = Vec::new();
    for ((_, result), wheel) in results.into_iter().zip(&runtime) {
        let (files, dist) = result.with_context(|| format!("building {}", wheel.file_name))?;
        if !matches!(wheel.kind, DistKind::Device(_)) {
            populated.push((wheel.platform_package.clone(), files));
        }
        built.push(dist);
    }
    if let Some(devel) = plan.wheels.iter().find(|w| w.kind == DistKind::Devel) {
        let runtime: Vec<(&str, &Populated)> = populated.iter().map(|(p, f)| (p.as_str(), f)).collect();
        built.push(build_devel_wheel(&ctx, devel, &runtime).with_context(|| format!("building {}", devel.file_name))?);
    }
    built.push(build_sdist(&ctx).context("building the rocm sdist")?);
    Ok((plan.targets, built))
}

/// The wheel platform tag: `ROCM_SDK_WHEEL_PLATFORM_TAG`, else this machine's
/// (`linux_x86_64`), as TheRock's `sysconfig.get_platform()` default.
pub(crate) fn platform_from_env() -> String {
    match std::env::var("ROCM_SDK_WHEEL_PLATFORM_TAG") {
        Ok(tag) if !tag.trim().is_empty() => platform_tag(tag.trim()),
        _ => platform_tag(&format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH)),
    }
}

/// Prints the summary and fails when nothing could be built.
pub(crate) fn report(targets: &[String], built: &[BuiltDist], json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        let value = serde_json::json!({
            "targets": targets,
            "built": built.iter().map(|b| serde_json::json!({
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
        for b in built {
            let name = b.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            writeln!(out, "built   {name} ({} bytes)", b.report.size)?;
        }
        writeln!(out, "{} built; targets {}", built.len(), targets.join(","))?;
    }
    if built.is_empty() {
        bail!("nothing was built");
    }
    Ok(())
}
