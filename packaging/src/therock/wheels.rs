//! The rocm-sdk Python distributions (spec §8), planned from the artifacts a run produced.
//! Pure: which artifact directories feed which distribution, the distribution and import
//! package names, wheel file names and platform tags, and every metadata text (METADATA,
//! WHEEL, entry points, the generated `_dist_info.py`, the `rocm` sdist's PKG-INFO).
//!
//! Two layouts, as TheRock's `build_python_packages.py`:
//! - **kpack** (`KPACK_SPLIT_ARTIFACTS`): generic artifacts feed `rocm-sdk-core`,
//!   `rocm-sdk-libraries` and `rocm-sdk-devel`; each GPU target's artifacts feed only its
//!   `rocm-sdk-device-{target}`, which installs into the libraries import package and requires
//!   `rocm-sdk-libraries=={version}`.
//! - **per family**: one `rocm-sdk-libraries-{family}` per family, holding the generic and that
//!   family's library artifacts; the devel wheel takes generic artifacts only.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::{ArtifactIndex, ArtifactName, base_target};

/// Artifacts whose `lib`/`run` components make up `rocm-sdk-core`.
pub const CORE_ARTIFACTS: &[&str] = &[
    "amd-dbgapi",
    "amd-llvm",
    "aqlprofile",
    "base",
    "core-amdsmi",
    "core-hip",
    "core-hipinfo",
    "core-kpack",
    "core-ocl",
    "core-runtime",
    "hipfile",
    "hipify",
    "host-blas",
    "host-suite-sparse",
    "rocdecode",
    "rocgdb",
    "rocjpeg",
    "rocjitsu-hotswap",
    "rocprofiler-sdk",
    "rocr-debug-agent",
    "sysdeps",
    "sysdeps-amd-mesa",
    "sysdeps-expat",
    "sysdeps-gmp",
    "sysdeps-mpfr",
    "sysdeps-ncurses",
    "sysdeps-util-linux",
    "wsl-rocdxg",
];

/// Core artifacts whose `dev` component also goes into core (the HIP and OpenCL headers the
/// runtime compiler needs).
pub const CORE_DEV_ARTIFACTS: &[&str] = &["core-hip", "core-ocl"];

/// Artifacts whose `lib` component makes up the libraries (and, per target, device) wheels.
pub const LIBRARY_ARTIFACTS: &[&str] = &[
    "blas",
    "fft",
    "hipblasltprovider",
    "hipdnn",
    "hipkernelprovider",
    "miopen",
    "miopenprovider",
    "rand",
    "rccl",
    "rpp",
];

/// Artifacts of `rocm-profiler`.
pub const PROFILER_ARTIFACTS: &[&str] = &["rocprofiler-compute", "rocprofiler-systems"];

/// Header-only and build-time artifacts the devel wheel adds to everything the runtime wheels took.
pub const DEVEL_EXTRA_ARTIFACTS: &[&str] =
    &["flatbuffers", "hipthreads", "libhipcxx", "mirage", "nlohmann-json", "prim", "rocjitsu", "rocshmem", "rocwmma"];

/// Paths (relative to an artifact root) kept out of `rocm-sdk-core`: build-time CMake files and
/// what `rocm-profiler` ships.
pub const CORE_EXCLUDES: &[&str] = &[
    "**/cmake/**",
    "bin/rocprof-*",
    "include/rocprofiler-systems/**",
    "lib/librocprof-sys*",
    "lib/python/site-packages/rocprofsys/**",
    "lib/rocprofiler-systems/**",
    "libexec/rocprofiler-systems/**",
    "share/**/rocprofiler-systems/**",
];

/// The only paths `rocm-profiler` takes from its artifacts.
pub const PROFILER_INCLUDES: &[&str] = &[
    "bin/rocprof-*",
    "bin/rocprof-sys-*",
    "include/rocprofiler-systems/**",
    "lib/libprofiler-hub.so*",
    "lib/librocprof-sys*",
    "lib/python/site-packages/rocprofsys/**",
    "lib/rocprofiler-compute/**",
    "lib/rocprofiler-systems/**",
    "libexec/rocprofiler-compute/**",
    "libexec/rocprofiler-systems/**",
    "share/**/rocprofiler-compute/**",
    "share/**/rocprofiler-systems/**",
];

/// Console scripts of `rocm-sdk-core`: (script, function in `rocm_sdk_core._cli`, path of the
/// tool inside the core or devel tree).
pub const CORE_SCRIPTS: &[(&str, &str, &str)] = &[
    ("amd-smi", "amd_smi", "bin/amd-smi"),
    ("amdclang", "amdclang", "lib/llvm/bin/amdclang"),
    ("amdclang++", "amdclangpp", "lib/llvm/bin/amdclang++"),
    ("amdclang-cl", "amdclang_cl", "lib/llvm/bin/amdclang-cl"),
    ("amdclang-cpp", "amdclang_cpp", "lib/llvm/bin/amdclang-cpp"),
    ("amdflang", "amdflang", "lib/llvm/bin/amdflang"),
    ("amdlld", "amdlld", "lib/llvm/bin/amdlld"),
    ("hipcc", "hipcc", "bin/hipcc"),
    ("hipconfig", "hipconfig", "bin/hipconfig"),
    ("hipify-clang", "hipify_clang", "bin/hipify-clang"),
    ("hipify-perl", "hipify_perl", "bin/hipify-perl"),
    ("offload-arch", "offload_arch", "lib/llvm/bin/offload-arch"),
    ("roc-obj", "roc_obj", "bin/roc-obj"),
    ("roc-obj-extract", "roc_obj_extract", "bin/roc-obj-extract"),
    ("roc-obj-ls", "roc_obj_ls", "bin/roc-obj-ls"),
    ("rocm-smi", "rocm_smi", "bin/rocm-smi"),
    ("rocm_agent_enumerator", "rocm_agent_enumerator", "bin/rocm_agent_enumerator"),
    ("rocminfo", "rocm_info", "bin/rocminfo"),
    ("rocprofv3", "rocprofv3", "bin/rocprofv3"),
];

/// The per-family libraries distributions' names: `rocm-sdk-libraries-{family}`.
pub const LIBRARIES_PREFIX: &str = "rocm-sdk-libraries-";
/// The kpack device distributions' names: `rocm-sdk-device-{target}`.
pub const DEVICE_PREFIX: &str = "rocm-sdk-device-";

/// Which distribution.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DistKind {
    Core,
    /// kpack: `rocm-sdk-libraries`; per family: `rocm-sdk-libraries-{family}`.
    Libraries(Option<String>),
    /// kpack: one GPU target's libraries, installed into the libraries import package.
    Device(String),
    Devel,
    Profiler,
}

/// What a distribution takes from the artifacts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// Artifact directories (`{name}_{component}_{target}`), sorted.
    pub dirs: Vec<String>,
    /// Glob patterns a path must match one of (empty: everything).
    pub include: &'static [&'static str],
    pub exclude: &'static [&'static str],
}

/// One wheel to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedWheel {
    pub kind: DistKind,
    /// `rocm-sdk-core`.
    pub dist: String,
    /// `rocm_sdk_core-7.1.0-py3-none-linux_x86_64.whl`.
    pub file_name: String,
    /// `rocm_sdk_core-7.1.0.dist-info`.
    pub dist_info: String,
    /// The package holding the Python code (`rocm_sdk_core`); none for device wheels.
    pub pure_package: Option<String>,
    /// Where the artifact files go (`_rocm_sdk_core`; device wheels: the libraries package).
    pub platform_package: String,
    pub selection: Selection,
    pub metadata: String,
    pub entry_points: Option<String>,
}

/// What to plan from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelOptions {
    /// A PEP 440 version, e.g. `7.1.0` or `7.1.0.dev0`.
    pub version: String,
    /// Appended to every import package name (TheRock's `--version-suffix`).
    pub nonce: String,
    pub kpack: bool,
    /// Normalised platform tag, e.g. `linux_x86_64`.
    pub platform: String,
    /// Targets (kpack) or families (per family) to build; empty: every one the artifacts hold.
    pub targets: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelPlan {
    pub wheels: Vec<PlannedWheel>,
    /// kpack: base targets; per family: families. Sorted.
    pub targets: Vec<String>,
    /// The `rocm` sdist.
    pub sdist: PlannedSdist,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedSdist {
    /// `rocm-7.1.0.tar.gz`.
    pub file_name: String,
    /// `rocm-7.1.0`.
    pub root: String,
    pub pkg_info: String,
    /// `src/rocm_sdk/_dist_info.py`.
    pub dist_info_py: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum WheelPlanError {
    #[error("version {0:?} is not a PEP 440 version")]
    BadVersion(String),
    #[error("no rocm-sdk-core artifacts (base, core-hip, amd-llvm, ... with lib or run components) in the artifacts")]
    NoCore,
    #[error("targets {missing:?} were asked for but the artifacts hold only {found:?}")]
    MissingTargets { missing: Vec<String>, found: Vec<String> },
    #[error("{0:?} is not a usable import-package suffix (letters, digits and `_` only)")]
    BadNonce(String),
}

/// `ROCM_SDK_WHEEL_PLATFORM_TAG` or the interpreter's platform, as a wheel tag:
/// lower case, `-`, `.` and spaces as `_` (`linux-x86_64` → `linux_x86_64`).
pub fn platform_tag(raw: &str) -> String {
    raw.to_ascii_lowercase().replace(['-', '.', ' '], "_")
}

/// A distribution name as it appears in file names (PEP 427: runs of `-_.` → `_`, lower case).
pub fn file_name_part(dist: &str) -> String {
    let mut out = String::new();
    for c in dist.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('_') {
                out.push('_');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

impl DistKind {
    /// The distribution's name: the one place TheRock's wheel names are spelled
    /// ([`DistKind::from_project`] reads them back).
    pub fn dist_name(&self) -> String {
        match self {
            DistKind::Core => "rocm-sdk-core".into(),
            DistKind::Libraries(None) => "rocm-sdk-libraries".into(),
            DistKind::Libraries(Some(family)) => format!("{LIBRARIES_PREFIX}{family}"),
            DistKind::Device(target) => format!("{DEVICE_PREFIX}{target}"),
            DistKind::Devel => "rocm-sdk-devel".into(),
            DistKind::Profiler => "rocm-profiler".into(),
        }
    }

    /// Which of TheRock's distributions a project is, by its (PEP 503 normalized) name; the
    /// family or target keeps the name's spelling (lowercase once normalized).
    pub fn from_project(name: &str) -> Option<Self> {
        if let Some(family) = name.strip_prefix(LIBRARIES_PREFIX).filter(|f| !f.is_empty()) {
            return Some(DistKind::Libraries(Some(family.to_owned())));
        }
        if let Some(target) = name.strip_prefix(DEVICE_PREFIX).filter(|t| !t.is_empty()) {
            return Some(DistKind::Device(target.to_owned()));
        }
        [DistKind::Core, DistKind::Libraries(None), DistKind::Devel, DistKind::Profiler]
            .into_iter()
            .find(|kind| kind.dist_name() == name)
    }

    fn pure_package(&self) -> Option<String> {
        match self {
            DistKind::Device(_) => None,
            other => Some(other.dist_name().replace('-', "_")),
        }
    }

    fn platform_package(&self, nonce: &str) -> String {
        let base = match self {
            DistKind::Device(_) => DistKind::Libraries(None).dist_name(),
            DistKind::Libraries(Some(family)) => DistKind::Libraries(Some(base_target(family).to_owned())).dist_name(),
            other => other.dist_name(),
        };
        format!("_{}{nonce}", base.replace('-', "_"))
    }
}

fn pep440_ok(version: &str) -> bool {
    version.parse::<pep440_rs::Version>().is_ok()
}

/// Plans every wheel and the sdist.
pub fn plan_wheels(index: &ArtifactIndex, opts: &WheelOptions) -> Result<WheelPlan, WheelPlanError> {
    if !pep440_ok(&opts.version) {
        return Err(WheelPlanError::BadVersion(opts.version.clone()));
    }
    if !opts.nonce.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(WheelPlanError::BadNonce(opts.nonce.clone()));
    }
    let dirs: Vec<ArtifactName> = index
        .artifacts()
        .filter(|(_, lines)| lines.iter().any(|l| !l.trim().is_empty()))
        .map(|(name, _)| name)
        .collect();
    let found: BTreeSet<String> = dirs.iter().filter(|a| !a.is_generic()).map(|a| a.base_target().to_owned()).collect();
    let targets: Vec<String> = if opts.targets.is_empty() {
        found.iter().cloned().collect()
    } else {
        let wanted: BTreeSet<String> = opts.targets.iter().map(|t| base_target(t).to_owned()).collect();
        let missing: Vec<String> = wanted.difference(&found).cloned().collect();
        if !missing.is_empty() {
            return Err(WheelPlanError::MissingTargets { missing, found: found.into_iter().collect() });
        }
        wanted.into_iter().collect()
    };

    let pick = |pred: &dyn Fn(&str, &str, &str) -> bool| -> Vec<String> {
        dirs.iter().filter(|a| pred(&a.name, &a.component, &a.target)).map(ArtifactName::dir_name).collect()
    };
    let core_pred = |n: &str, c: &str, t: &str| {
        t == "generic"
            && ((CORE_ARTIFACTS.contains(&n) && matches!(c, "lib" | "run"))
                || (CORE_DEV_ARTIFACTS.contains(&n) && c == "dev"))
    };
    let lib_pred = |n: &str, c: &str| LIBRARY_ARTIFACTS.contains(&n) && c == "lib";

    let mut kinds: Vec<(DistKind, Selection)> = Vec::new();
    let core = pick(&core_pred);
    if core.is_empty() {
        return Err(WheelPlanError::NoCore);
    }
    kinds.push((DistKind::Core, Selection { dirs: core, include: &[], exclude: CORE_EXCLUDES }));
    let profiler = pick(&|n, c, t| t == "generic" && PROFILER_ARTIFACTS.contains(&n) && matches!(c, "lib" | "run"));
    if !profiler.is_empty() {
        kinds.push((DistKind::Profiler, Selection { dirs: profiler, include: PROFILER_INCLUDES, exclude: &[] }));
    }
    if opts.kpack {
        let libraries = pick(&|n, c, t| t == "generic" && lib_pred(n, c));
        kinds.push((DistKind::Libraries(None), Selection { dirs: libraries, include: &[], exclude: &[] }));
        for target in &targets {
            let device = pick(&|n, c, t| n != "rpp" && lib_pred(n, c) && base_target(t) == target);
            kinds.push((DistKind::Device(target.clone()), Selection { dirs: device, include: &[], exclude: &[] }));
        }
    } else {
        for family in &targets {
            let libraries = pick(&|n, c, t| (t == "generic" || base_target(t) == family) && lib_pred(n, c));
            kinds.push((
                DistKind::Libraries(Some(family.clone())),
                Selection { dirs: libraries, include: &[], exclude: &[] },
            ));
        }
    }
    // Devel: every component of what the runtime wheels took (the profiler's applications
    // excepted) plus the header-only artifacts; generic artifacts only.
    let runtime_names: BTreeSet<String> = kinds
        .iter()
        .flat_map(|(_, s)| s.dirs.iter())
        .filter_map(|d| ArtifactName::parse_dir(d).ok().map(|a| a.name))
        .filter(|n| !PROFILER_ARTIFACTS.contains(&n.as_str()))
        .collect();
    let devel = pick(&|n, c, t| {
        t == "generic"
            && (runtime_names.contains(n) || DEVEL_EXTRA_ARTIFACTS.contains(&n))
            && !(opts.kpack && c == "test")
    });
    if dirs.iter().any(|a| a.component == "dev") {
        kinds.push((DistKind::Devel, Selection { dirs: devel, include: &[], exclude: &[] }));
    }

    let wheels = kinds
        .into_iter()
        .map(|(kind, selection)| {
            let dist = kind.dist_name();
            let stem = format!("{}-{}", file_name_part(&dist), opts.version);
            PlannedWheel {
                file_name: format!("{stem}-py3-none-{}.whl", opts.platform),
                dist_info: format!("{stem}.dist-info"),
                pure_package: kind.pure_package(),
                platform_package: kind.platform_package(&opts.nonce),
                metadata: wheel_metadata(&kind, &opts.version),
                entry_points: entry_points(&kind),
                selection,
                kind,
                dist,
            }
        })
        .collect::<Vec<_>>();
    let sdist = plan_sdist(&wheels, &targets, opts);
    Ok(WheelPlan { wheels, targets, sdist })
}

/// METADATA of a wheel: what pip needs, as TheRock's setuptools output has it.
pub fn wheel_metadata(kind: &DistKind, version: &str) -> String {
    let mut m = format!("Metadata-Version: 2.1\nName: {}\nVersion: {version}\n", kind.dist_name());
    match kind {
        DistKind::Device(_) => {
            let _ = writeln!(m, "Summary: ROCm SDK device libraries for one GPU target");
            let _ = writeln!(m, "Requires-Dist: rocm-sdk-libraries=={version}");
        }
        DistKind::Profiler => {
            let _ = writeln!(m, "Summary: ROCm profiler applications (rocprofiler-systems and rocprofiler-compute)");
            let _ = writeln!(m, "Requires-Python: >=3.8");
        }
        DistKind::Core => {
            let _ = writeln!(m, "Summary: ROCm SDK core runtime and compiler");
        }
        DistKind::Libraries(_) => {
            let _ = writeln!(m, "Summary: ROCm SDK math and communication libraries");
        }
        DistKind::Devel => {
            let _ = writeln!(m, "Summary: ROCm SDK development files (headers, CMake configs, static libraries)");
        }
    }
    m
}

/// WHEEL of every rocm-sdk wheel.
pub fn wheel_file(platform: &str) -> String {
    format!(
        "Wheel-Version: 1.0\nGenerator: quarry {}\nRoot-Is-Purelib: true\nTag: py3-none-{platform}\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn entry_points(kind: &DistKind) -> Option<String> {
    let (module, scripts): (&str, Vec<(&str, &str)>) = match kind {
        DistKind::Core => ("rocm_sdk_core._cli", CORE_SCRIPTS.iter().map(|(s, f, _)| (*s, *f)).collect()),
        DistKind::Profiler => {
            ("rocm_profiler._cli", vec![("rocprof-compute", "rocprof_compute"), ("rocprof-sys-run", "rocprof_sys_run")])
        }
        _ => return None,
    };
    let mut text = String::from("[console_scripts]\n");
    for (script, function) in scripts {
        let _ = writeln!(text, "{script} = {module}:{function}");
    }
    Some(text)
}

/// Python literal for a string (only characters our names and versions use need no escaping;
/// anything else is escaped).
fn py_str(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\\' | '\'' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_ascii_graphic() || c == ' ' => out.push(c),
            c => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
        }
    }
    out.push('\'');
    out
}

fn py_list<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    format!("[{}]", items.into_iter().map(|s| py_str(s)).collect::<Vec<_>>().join(", "))
}

/// `_dist_info.py`: what the `rocm_sdk` code knows about this build.
pub fn dist_info_py(
    wheels: &[PlannedWheel],
    targets: &[String],
    opts: &WheelOptions,
    this: Option<&DistKind>,
) -> String {
    let mut py = String::from("# Generated by `quarry package python`: the distributions of this ROCm SDK build.\n");
    let _ = writeln!(py, "__version__ = {}", py_str(&opts.version));
    let _ = writeln!(py, "PY_PACKAGE_SUFFIX_NONCE = {}", py_str(&opts.nonce));
    let _ = writeln!(py, "KPACK = {}", if opts.kpack { "True" } else { "False" });
    let _ = writeln!(py, "AVAILABLE_TARGET_FAMILIES = {}", py_list(targets));
    let _ = writeln!(py, "DEFAULT_TARGET_FAMILY = {}", targets.first().map_or("None".to_owned(), |t| py_str(t)));
    py.push_str("# logical name -> (distribution, import package holding the files)\nPACKAGES = {\n");
    for wheel in wheels {
        let logical = match &wheel.kind {
            DistKind::Core => "core".to_owned(),
            DistKind::Libraries(None) => "libraries".to_owned(),
            DistKind::Libraries(Some(f)) => format!("libraries-{f}"),
            DistKind::Device(t) => format!("device-{t}"),
            DistKind::Devel => "devel".to_owned(),
            DistKind::Profiler => "profiler".to_owned(),
        };
        let _ =
            writeln!(py, "    {}: ({}, {}),", py_str(&logical), py_str(&wheel.dist), py_str(&wheel.platform_package));
    }
    py.push_str("}\n");
    let _ = writeln!(
        py,
        "CORE_SCRIPTS = {{{}}}",
        CORE_SCRIPTS.iter().map(|(_, f, p)| format!("{}: {}", py_str(f), py_str(p))).collect::<Vec<_>>().join(", ")
    );
    let this = this.map(|k| k.dist_name());
    let _ = writeln!(py, "THIS_DISTRIBUTION = {}", this.as_deref().map_or("None".to_owned(), py_str));
    py
}

fn plan_sdist(wheels: &[PlannedWheel], targets: &[String], opts: &WheelOptions) -> PlannedSdist {
    let root = format!("rocm-{}", opts.version);
    let pkg_info = format!(
        "Metadata-Version: 2.2\nName: rocm\nVersion: {}\nSummary: ROCm SDK: pick the runtime, libraries and device code for this machine's GPUs\nRequires-Python: >=3.9\nDynamic: Requires-Dist\nDynamic: Provides-Extra\n",
        opts.version
    );
    PlannedSdist {
        file_name: format!("{root}.tar.gz"),
        root,
        pkg_info,
        dist_info_py: dist_info_py(wheels, targets, opts, None),
    }
}

/// Extras of the `rocm` sdist for an install on a machine whose target is `this_target`
/// (what the sdist's `setup.py` computes at install time, here for tests and documentation):
/// `(extra, requirement)` pairs, plus the always-required core.
pub fn sdist_requirements(
    plan: &WheelPlan,
    version: &str,
    this_target: Option<&str>,
) -> (Vec<String>, Vec<(String, String)>) {
    let required = vec![format!("rocm-sdk-core=={version}")];
    let mut extras = Vec::new();
    for wheel in &plan.wheels {
        match &wheel.kind {
            DistKind::Libraries(None) => extras.push(("libraries".to_owned(), format!("{}=={version}", wheel.dist))),
            DistKind::Libraries(Some(f)) if Some(f.as_str()) == this_target => {
                extras.push(("libraries".to_owned(), format!("{}=={version}", wheel.dist)));
            }
            DistKind::Devel => extras.push(("devel".to_owned(), format!("{}=={version}", wheel.dist))),
            DistKind::Profiler => extras.push(("profiler".to_owned(), format!("{}=={version}", wheel.dist))),
            DistKind::Device(t) => {
                if Some(t.as_str()) == this_target {
                    extras.push(("device".to_owned(), format!("{}=={version}", wheel.dist)));
                }
                extras.push((format!("device-{t}"), format!("{}=={version}", wheel.dist)));
                extras.push(("device-all".to_owned(), format!("{}=={version}", wheel.dist)));
            }
            _ => {}
        }
    }
    (required, extras)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index() -> ArtifactIndex {
        let dirs = [
            ("base_run_generic", "base/stage"),
            ("core-hip_lib_generic", "core/clr/stage"),
            ("core-hip_dev_generic", "core/clr/stage"),
            ("amd-llvm_lib_generic", "compiler/amd-llvm/stage"),
            ("amd-llvm_dev_generic", "compiler/amd-llvm/stage"),
            ("fft_lib_generic", "math-libs/rocFFT/stage"),
            ("fft_dev_generic", "math-libs/rocFFT/stage"),
            ("fft_test_generic", "math-libs/rocFFT/stage"),
            ("fft_lib_gfx1100", "math-libs/rocFFT/stage"),
            ("fft_lib_gfx942:xnack+", "math-libs/rocFFT/stage"),
            ("rpp_lib_gfx942", "ml-libs/rpp/stage"),
            ("prim_dev_generic", "math-libs/rocPRIM/stage"),
            ("empty_lib_generic", ""),
        ];
        ArtifactIndex::new(dirs.iter().map(|(d, l)| (d.to_string(), vec![l.to_string()])))
    }

    fn opts(kpack: bool) -> WheelOptions {
        WheelOptions {
            version: "7.1.0.dev0".into(),
            nonce: String::new(),
            kpack,
            platform: platform_tag("linux-x86_64"),
            targets: Vec::new(),
        }
    }

    fn summary(plan: &WheelPlan) -> String {
        let mut out = String::new();
        for w in &plan.wheels {
            let _ = writeln!(
                out,
                "{} [{}] pure={:?} platform={} dirs={:?}",
                w.file_name, w.dist, w.pure_package, w.platform_package, w.selection.dirs
            );
        }
        out
    }

    #[test]
    fn kpack_plan() {
        let plan = plan_wheels(&index(), &opts(true)).unwrap();
        assert_eq!(plan.targets, ["gfx1100", "gfx942"]);
        insta::assert_snapshot!(summary(&plan));
        insta::assert_snapshot!("kpack_dist_info", plan.sdist.dist_info_py);
        for kind in plan.wheels.iter().map(|w| &w.kind) {
            assert_eq!(DistKind::from_project(&kind.dist_name()).as_ref(), Some(kind), "names read back");
        }
        assert_eq!(DistKind::from_project("rocm-sdk-device-"), None);
        assert_eq!(DistKind::from_project("torch"), None);
        let device = plan.wheels.iter().find(|w| w.dist == "rocm-sdk-device-gfx942").unwrap();
        assert!(device.metadata.contains("Requires-Dist: rocm-sdk-libraries==7.1.0.dev0\n"));
        let (required, extras) = sdist_requirements(&plan, "7.1.0.dev0", Some("gfx942"));
        assert_eq!(required, ["rocm-sdk-core==7.1.0.dev0"]);
        assert!(extras.contains(&("device".into(), "rocm-sdk-device-gfx942==7.1.0.dev0".into())));
        assert!(extras.contains(&("device-gfx1100".into(), "rocm-sdk-device-gfx1100==7.1.0.dev0".into())));
    }

    #[test]
    fn per_family_plan() {
        let plan = plan_wheels(&index(), &opts(false)).unwrap();
        assert_eq!(plan.targets, ["gfx1100", "gfx942"], "feature variants fold into their base target");
        insta::assert_snapshot!(summary(&plan));
    }

    #[test]
    fn names_tags_and_errors() {
        assert_eq!(platform_tag("linux-x86_64"), "linux_x86_64");
        assert_eq!(platform_tag("Win-AMD64"), "win_amd64");
        assert_eq!(platform_tag("manylinux_2_28_x86_64"), "manylinux_2_28_x86_64");
        assert_eq!(file_name_part("rocm-sdk-libraries-gfx110X-all"), "rocm_sdk_libraries_gfx110x_all");
        assert_eq!(
            DistKind::Libraries(Some("gfx110X-all".into())).platform_package("n1"),
            "_rocm_sdk_libraries_gfx110X_alln1"
        );
        let mut o = opts(true);
        o.targets = vec!["gfx90a".into(), "gfx942:xnack-".into()];
        assert_eq!(
            plan_wheels(&index(), &o).unwrap_err(),
            WheelPlanError::MissingTargets {
                missing: vec!["gfx90a".into()],
                found: vec!["gfx1100".into(), "gfx942".into()]
            }
        );
        o.targets = vec!["gfx942".into()];
        assert_eq!(
            plan_wheels(&index(), &o).unwrap().wheels.iter().filter(|w| matches!(w.kind, DistKind::Device(_))).count(),
            1
        );
        let mut o = opts(true);
        o.version = "7.1.0~dev".into();
        assert!(matches!(plan_wheels(&index(), &o), Err(WheelPlanError::BadVersion(_))));
        let mut o = opts(true);
        o.nonce = "a-b".into();
        assert!(matches!(plan_wheels(&index(), &o), Err(WheelPlanError::BadNonce(_))));
        let only_libs = ArtifactIndex::new([("fft_lib_generic".to_owned(), vec!["x".to_owned()])]);
        assert_eq!(plan_wheels(&only_libs, &opts(true)).unwrap_err(), WheelPlanError::NoCore);
        assert_eq!(py_str("it's"), "'it\\'s'");
    }
}
