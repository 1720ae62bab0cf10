//! The rocm-sdk distributions of a TheRock run (TheRock's `build_python_packages.py`): the
//! plan of `quarry_packaging::therock::wheels`, the runtime wheels built in parallel, then
//! the devel wheel (its tarball links to what the runtime wheels install) and the `rocm`
//! sdist.

use quarry_packaging::therock::wheels::{DistKind, PlannedWheel, WheelOptions, plan_wheels};
use rayon::prelude::*;

use std::path::Path;

use super::variants::{VariantRequest, build_variant};
use super::{BuildSettings, OnProgress, PackageError, Progress, StagedArtifacts, pool};
use crate::elf::binary_platform;
use crate::python::{
    BuiltDist, Populated, WheelContext, build_devel_wheel, build_runtime_wheel, build_sdist, patched_by_therock,
    populate,
};
use crate::rpath::stage_wheel_files;

/// What a run built, and for which targets (kpack: base targets; else families).
#[derive(Debug)]
pub struct WheelSummary {
    pub targets: Vec<String>,
    pub built: Vec<BuiltDist>,
}

impl std::fmt::Display for WheelSummary {
    /// One line per distribution built, then the count and the targets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in &self.built {
            let name = b.file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            writeln!(f, "built   {name} ({} bytes)", b.report.size)?;
        }
        writeln!(f, "{} built; targets {}", self.built.len(), self.targets.join(","))
    }
}

/// What TheRock's `build_python_packages.py` gives each runtime wheel with `rpath_dep(core, …)`:
/// the core package's directories its ELF files also search.
fn rpath_deps(kind: &DistKind) -> &'static [&'static str] {
    match kind {
        DistKind::Core => &["lib/llvm/lib", "lib/rocm_sysdeps/lib"],
        DistKind::Profiler => &["lib", "lib/llvm/lib", "lib/rocm_sysdeps/lib"],
        DistKind::Libraries(_) => &["lib", "lib/rocm_sysdeps/lib", "lib/host-math/lib", "lib/llvm/lib"],
        DistKind::Device(_) => &["lib", "lib/rocm_sysdeps/lib"],
        DistKind::Devel => &[],
    }
}

/// The search path entries TheRock's `_extend_rpath` adds to the ELF file at `path` (relative to
/// its platform package): `$ORIGIN/{up to site-packages}/{core package}/{dir}` per dependency.
fn rpath_additions(path: &str, core_package: &str, deps: &[&str]) -> Vec<String> {
    let up = vec![".."; path.split('/').count()].join("/");
    deps.iter().map(|dir| format!("$ORIGIN/{up}/{core_package}/{dir}")).collect()
}

/// One runtime wheel: its files populated, then on staged copies of its ELF files (Linux wheels)
/// TheRock's `$ORIGIN/…` entries added and the search path made DT_RPATH (`_extend_rpath`,
/// `_normalize_rpath`; DT_RUNPATH with `--runpath-pkg`), the wheel written.
fn runtime_wheel(
    ctx: &WheelContext<'_>,
    wheel: &PlannedWheel,
    settings: &BuildSettings,
) -> Result<(Populated, BuiltDist), PackageError> {
    let failed = |source| PackageError::Wheel { file: wheel.file_name.clone(), source };
    let mut populated = populate(ctx, wheel).map_err(failed)?;
    let core = ctx.plan.wheels.iter().find(|w| w.kind == DistKind::Core).map(|w| w.platform_package.as_str());
    let deps = match core {
        Some(_) if !ctx.opts.platform.starts_with("win") => rpath_deps(&wheel.kind),
        _ => &[],
    };
    let additions =
        |path: &str| patched_by_therock(path).then(|| rpath_additions(path, core.unwrap_or_default(), deps));
    let files = populated.files.iter_mut().map(|(path, file)| (path.as_str(), &mut file.source));
    let edits = stage_wheel_files(files, settings.rpath, &additions, &settings.dest_dir)?;
    if !edits.converted.is_empty() {
        tracing::info!(wheel = %wheel.file_name, files = edits.converted.len(), "search paths set");
    }
    let built = build_runtime_wheel(ctx, wheel, &populated).map_err(failed)?;
    Ok((populated, built))
}

/// Plans the rocm-sdk distributions over the staged artifacts and builds every one into the
/// destination; the first that fails ends the run. `variants`: which device wheels are also
/// built as wheel variants (`--variants`, see [`super::variants`]).
pub fn package_wheels(
    staged: &StagedArtifacts,
    opts: &WheelOptions,
    variants: &VariantRequest,
    settings: &BuildSettings,
    progress: OnProgress<'_>,
) -> Result<WheelSummary, PackageError> {
    let plan = plan_wheels(staged.index(), opts)?;
    let variant_targets = variants.resolve(&plan, opts.kpack)?;
    progress(Progress::PlannedWheels { plan: &plan, kpack: opts.kpack });
    let ctx = WheelContext {
        artifacts: staged.dir(),
        index: staged.index(),
        plan: &plan,
        opts,
        dest_dir: &settings.dest_dir,
        mtime: settings.epoch,
    };
    // Runtime wheels first (in parallel): the devel tarball links to what they install.
    let runtime: Vec<_> = plan.wheels.iter().filter(|w| w.kind != DistKind::Devel).collect();
    let results: Vec<_> = pool(settings.jobs)?.install(|| {
        runtime
            .par_iter()
            .map(|wheel| {
                progress(Progress::Started { package: &wheel.dist });
                let result = runtime_wheel(&ctx, wheel, settings).and_then(|(files, dist)| {
                    let variant = build_variant(&ctx, wheel, &files, &variant_targets)?;
                    Ok((files, dist, variant))
                });
                progress(Progress::Finished { package: &wheel.dist });
                result
            })
            .collect()
    });
    let mut built = Vec::new();
    let mut populated: Vec<(String, Populated)> = Vec::new();
    for (result, wheel) in results.into_iter().zip(&runtime) {
        let (files, dist, variant) = result?;
        if !matches!(wheel.kind, DistKind::Device(_)) {
            populated.push((wheel.platform_package.clone(), files));
        }
        built.push(dist);
        built.extend(variant);
    }
    if let Some(devel) = plan.wheels.iter().find(|w| w.kind == DistKind::Devel) {
        let runtime: Vec<(&str, &Populated)> = populated.iter().map(|(p, f)| (p.as_str(), f)).collect();
        let dist = build_devel_wheel(&ctx, devel, &runtime, settings.rpath)
            .map_err(|source| PackageError::Wheel { file: devel.file_name.clone(), source })?;
        built.push(dist);
    }
    built.push(build_sdist(&ctx).map_err(PackageError::Sdist)?);
    Ok(WheelSummary { targets: plan.targets, built })
}

/// The wheel platform the staged artifacts were built for, from their shared libraries: the
/// first PE DLL (`*.dll`: `win_amd64`) or ELF shared object (`*.so*`: `linux_x86_64`) found,
/// walking in name order; `None` when they hold neither (the caller falls back to the host's).
/// Windows artifacts packaged on Linux (or the reverse) get their own platform's tag.
pub fn artifacts_platform(staged: &StagedArtifacts) -> Result<Option<&'static str>, PackageError> {
    fn walk(dir: &Path) -> Result<Option<&'static str>, PackageError> {
        let read = |source| PackageError::ReadDir { path: dir.to_path_buf(), source };
        let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(read)?.collect::<Result<_, _>>().map_err(read)?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let kind = entry.file_type().map_err(read)?;
            let name = entry.file_name().to_string_lossy().to_ascii_lowercase();
            let found = if kind.is_dir() {
                walk(&entry.path())?
            } else if kind.is_file() && (name.ends_with(".dll") || name.ends_with(".so") || name.contains(".so.")) {
                binary_platform(&entry.path())?
            } else {
                None
            };
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }
    walk(staged.dir())
}

#[cfg(test)]
mod tests {
    use super::rpath_additions;
    use crate::python::{member_mode, patched_by_therock};

    #[test]
    fn additions_climb_to_site_packages() {
        assert_eq!(
            rpath_additions("lib/libx.so", "_rocm_sdk_core", &["lib/llvm/lib", "lib/rocm_sysdeps/lib"]),
            ["$ORIGIN/../../_rocm_sdk_core/lib/llvm/lib", "$ORIGIN/../../_rocm_sdk_core/lib/rocm_sysdeps/lib"]
        );
        assert_eq!(rpath_additions("bin/x", "_c", &["lib"]), ["$ORIGIN/../../_c/lib"]);
        assert_eq!(rpath_additions("x", "_c", &["lib"]), ["$ORIGIN/../_c/lib"]);
        assert_eq!(rpath_additions("lib/rocblas/library/x.so", "_c", &["lib"]), ["$ORIGIN/../../../../_c/lib"]);
        assert!(patched_by_therock("lib/libx.so.1") && patched_by_therock("bin/hipcc"));
        assert!(!patched_by_therock("lib/rocblas/library/Kernels.so-000-gfx942.hsaco"));
        assert!(!patched_by_therock("lib/hipblaslt/library/x_gfx942.co"));
    }

    #[test]
    fn windows_modes_follow_the_extension() {
        let windows = |path: &str, host: u32, dir: bool| member_mode("win_amd64", path, host, dir);
        assert_eq!(windows("bin/amdhip64_7.dll", 0o755, false), 0o644);
        assert_eq!(windows("bin/hipInfo.EXE", 0o644, false), 0o755);
        assert_eq!(windows("bin/hipcc.bat", 0o600, false), 0o755);
        assert_eq!(windows("lib/amdhip64.lib", 0o444, false), 0o644);
        assert_eq!(windows("include/hip", 0o700, true), 0o755);
        assert_eq!(member_mode("linux_x86_64", "lib/libx.so", 0o555, false), 0o755);
        assert_eq!(member_mode("linux_x86_64", "include", 0o555, true), 0o755);
    }
}
