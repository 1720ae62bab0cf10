//! Variant planning: which native packages a set of TheRock artifacts and a `package.json`
//! make, with their names, dependencies and content (spec §7). Pure: the artifacts directory
//! comes in as an [`ArtifactIndex`] (directory names and manifest lines).
//!
//! The rules follow TheRock's `build_package.py` / `packaging_utils.py`, with its defects
//! fixed on purpose (each is a test here):
//! - a dependency list never gets a stray `, ` when an entry is filtered out;
//! - in kpack mode a package that is not split per GPU target depends on a split dependency's
//!   meta package `{dep}{V}` instead of silently losing it;
//! - the meta package lists the host package only when the host package is built, and a
//!   device package only when it is built (`:xnack` directories count for both);
//! - an empty versioned variant is skipped (with a reason) for rpm as for deb, and never
//!   aborts the run;
//! - an rpm without `--version-suffix` gets `Release: 1`, not `None`.

use std::collections::{BTreeMap, BTreeSet};

use super::artifact::{ArtifactName, GENERIC};
use super::package_json::PackageSpec;

/// What an artifacts directory holds: `{name}_{component}_{target}[:variant]` directories and
/// the lines of their `artifact_manifest.txt` (empty when there is none).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArtifactIndex {
    dirs: BTreeMap<String, Vec<String>>,
}

/// One path a package takes from an artifact directory: `dir/path`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContentPath {
    pub dir: String,
    pub path: String,
}

impl ArtifactIndex {
    /// An index of these directory names and their manifest lines.
    pub fn new(dirs: impl IntoIterator<Item = (String, Vec<String>)>) -> Self {
        Self { dirs: dirs.into_iter().collect() }
    }

    /// Every artifact directory name with its manifest lines, sorted by name.
    pub fn dirs(&self) -> impl Iterator<Item = (&str, &[String])> {
        self.dirs.iter().map(|(d, l)| (d.as_str(), l.as_slice()))
    }

    /// Every directory whose name is an artifact name, parsed, with its manifest lines, sorted
    /// by directory name; other directories are left out.
    pub fn artifacts(&self) -> impl Iterator<Item = (ArtifactName, &[String])> {
        self.named().map(|(_, name, lines)| (name, lines))
    }

    fn named(&self) -> impl Iterator<Item = (&String, ArtifactName, &[String])> {
        self.dirs.iter().filter_map(|(d, l)| Some((d, ArtifactName::parse_dir(d).ok()?, l.as_slice())))
    }

    /// Artifact names present: the `name` part of every directory with a known component.
    fn present_artifacts(&self) -> BTreeSet<String> {
        self.artifacts().filter(|(a, _)| a.has_known_component()).map(|(a, _)| a.name).collect()
    }

    /// GPU targets the artifacts were built for: every target other than `generic` of a
    /// directory with a non-empty manifest, `:xnack` variants folded, sorted.
    pub fn targets(&self) -> Vec<String> {
        let mut out: BTreeSet<String> = BTreeSet::new();
        for (artifact, lines) in self.artifacts() {
            let target = artifact.base_target();
            if target != GENERIC && !target.is_empty() && !lines.iter().all(|l| l.trim().is_empty()) {
                out.insert(target.to_owned());
            }
        }
        out.into_iter().collect()
    }

    /// Whether any `{artifact}_{component}_gfx*` directory of the package exists.
    fn has_gfx_dirs(&self, spec: &PackageSpec) -> bool {
        spec.artifactory.iter().any(|a| {
            a.subdirs.iter().flat_map(|s| &s.components).any(|c| {
                self.artifacts().any(|(d, _)| d.name == a.artifact && d.component == *c && d.target.starts_with("gfx"))
            })
        })
    }

    /// Manifest lines of `{artifact}_{component}_{target}` and its `:variant` siblings that
    /// name `{subdir}/` (case-insensitively).
    fn content(&self, artifact: &str, component: &str, target: &str, subdir: &str, out: &mut Vec<ContentPath>) {
        let needle = format!("{}/", subdir.to_ascii_lowercase());
        let matching = self
            .named()
            .filter(|(_, d, _)| d.name == artifact && d.component == component && d.base_target() == target);
        for (dir, _, lines) in matching {
            for line in lines.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
                if line.to_ascii_lowercase().contains(&needle) {
                    out.push(ContentPath { dir: dir.clone(), path: line.to_owned() });
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PkgType {
    Deb,
    Rpm,
}

/// How to plan: TheRock's `build_package.py` flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOptions {
    pub pkg_type: PkgType,
    pub rocm_version: String,
    pub version_suffix: Option<String>,
    /// GPU targets (already split and `:xnack`-stripped); empty = every target found.
    pub targets: Vec<String>,
    pub kpack: bool,
    pub asan: bool,
    /// `--pkg-names`: only these packages (no presence check).
    pub only: Option<Vec<String>>,
}

/// Which variant of a package a planned package is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Variant {
    /// Not split per target: `{pkg}{V}`.
    Versioned,
    /// kpack: the target-independent part `{pkg}-host{V}`.
    Host,
    /// kpack: one target's part `{pkg}{V}-{arch}` (for a metapackage: its per-target meta).
    Device(String),
    /// kpack: `{pkg}{V}` depending on host and devices (or on the per-target metas).
    Meta,
    /// Single-arch mode: `{pkg}{V}-{arch}` for a per-target package, else `{pkg}{V}`.
    SingleArch(String),
    /// The unversioned name `{pkg}` depending on `{pkg}{V}`.
    NonVersioned,
}

/// One package to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPackage {
    pub name: String,
    /// The `package.json` entry it comes from.
    pub source: String,
    pub variant: Variant,
    pub depends: Vec<String>,
    pub recommends: Vec<String>,
    pub suggests: Vec<String>,
    pub provides: Vec<String>,
    pub replaces: Vec<String>,
    pub conflicts: Vec<String>,
    pub obsoletes: Vec<String>,
    pub contents: Vec<ContentPath>,
}

/// Package versions for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// `{major}.{minor}` of the ROCm version, in versioned names.
    pub tag: String,
    /// deb `Version:` (`{rocm}-{suffix}`, or `{rocm}`).
    pub deb: String,
    /// rpm `Version:` and `Release:`.
    pub rpm_version: String,
    pub rpm_release: String,
}

impl Versions {
    pub fn new(rocm_version: &str, suffix: Option<&str>) -> Result<Self, PlanError> {
        let bad = || PlanError::Version(rocm_version.to_owned());
        let mut parts = rocm_version.split('.');
        let digits = |p: Option<&str>| -> Option<String> {
            let d: String = p?.chars().take_while(char::is_ascii_digit).collect();
            (!d.is_empty()).then_some(d)
        };
        let tag = format!("{}.{}", digits(parts.next()).ok_or_else(bad)?, digits(parts.next()).ok_or_else(bad)?);
        let suffix = suffix.filter(|s| !s.is_empty());
        for s in suffix.iter() {
            if !s.bytes().all(|b| b.is_ascii_alphanumeric() || b"+.~_".contains(&b)) {
                return Err(PlanError::Suffix((*s).to_owned()));
            }
        }
        if !rocm_version.bytes().all(|b| b.is_ascii_alphanumeric() || b"+.~".contains(&b)) {
            return Err(bad());
        }
        Ok(Self {
            tag,
            deb: match suffix {
                Some(s) => format!("{rocm_version}-{s}"),
                None => rocm_version.to_owned(),
            },
            rpm_version: rocm_version.to_owned(),
            rpm_release: suffix.unwrap_or("1").to_owned(),
        })
    }
}

/// The packages one run builds, and those it leaves out with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub versions: Versions,
    pub targets: Vec<String>,
    pub packages: Vec<PlannedPackage>,
    pub skipped: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("ROCm version {0:?} needs at least major.minor, each starting with digits (e.g. 7.1.0)")]
    Version(String),
    #[error("version suffix {0:?} may hold only letters, digits and + . ~ _")]
    Suffix(String),
    #[error("target {0:?} is not a GPU target name")]
    Target(String),
    #[error("package.json has a dependency cycle: {0}")]
    Cycle(String),
    #[error("--pkg-names names no package of package.json: {0}")]
    NothingSelected(String),
}

/// Where a name is being made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gfx<'a> {
    None,
    Host,
    Meta,
    Arch(&'a str),
}

/// The variants of one package planned so far, and those left out with the reason.
struct Found<'p, 's> {
    spec: &'p PackageSpec,
    packages: Vec<PlannedPackage>,
    skipped: &'s mut Vec<(String, String)>,
}

impl Found<'_, '_> {
    /// Keeps `package` unless it is a variant that should have content and has none (then it
    /// is skipped with the reason); whether it was kept.
    fn keep(&mut self, package: PlannedPackage) -> bool {
        let empty = package.contents.is_empty()
            && !matches!(package.variant, Variant::Meta | Variant::NonVersioned)
            && !self.spec.metapackage;
        if empty {
            self.skipped.push((package.name.clone(), "no content in the artifacts for this variant".into()));
            return false;
        }
        self.packages.push(package);
        true
    }
}

struct Planner<'a> {
    by_name: BTreeMap<&'a str, &'a PackageSpec>,
    index: &'a ArtifactIndex,
    options: &'a PlanOptions,
    versions: Versions,
    /// Packages whose dependencies survive: present or metapackages, not disabled.
    present: BTreeSet<&'a str>,
    /// Packages split per GPU target ([`splits`]), decided once.
    split: BTreeSet<&'a str>,
}

/// Whether `spec` is split per GPU target: in kpack mode a package with per-target artifact
/// directories (not a `-devel` one) or a gfxarch metapackage; otherwise a gfxarch package.
fn splits(spec: &PackageSpec, index: &ArtifactIndex, kpack: bool) -> bool {
    if !kpack || spec.metapackage {
        return spec.gfxarch;
    }
    !spec.package.ends_with("-devel") && index.has_gfx_dirs(spec)
}

/// The arch tag in names: `gfx94X-dcgpu` → `gfx94x`.
pub fn arch_tag(target: &str) -> String {
    target.to_ascii_lowercase().split('-').next().unwrap_or_default().to_owned()
}

impl<'a> Planner<'a> {
    fn split(&self, spec: &PackageSpec) -> bool {
        self.split.contains(spec.package.as_str())
    }

    fn name(&self, spec: &PackageSpec, versioned: bool, gfx: Gfx<'_>) -> String {
        let mut suffix = if versioned { self.versions.tag.clone() } else { String::new() };
        if self.options.asan {
            suffix = format!("-asan{suffix}");
        }
        let mut name = spec.package.clone();
        if self.options.pkg_type == PkgType::Deb
            && let Some(base) = name.strip_suffix("-devel")
        {
            name = format!("{base}-dev");
        }
        let split = self.split(spec);
        if split && gfx == Gfx::Host {
            name.push_str("-host");
        }
        name.push_str(&suffix);
        if split && let Gfx::Arch(arch) = gfx {
            name.push('-');
            name.push_str(&arch_tag(arch));
        }
        name
    }

    fn pin(&self, name: String) -> String {
        match self.options.pkg_type {
            // TheRock's spelling (spec §7); dpkg reads it like `name (= v)`.
            PkgType::Deb => format!("{name}( = {})", self.versions.deb),
            PkgType::Rpm => format!("{name} = {}-{}", self.versions.rpm_version, self.versions.rpm_release),
        }
    }

    /// A raw dependency from package.json: ours (renamed for `gfx`), foreign (verbatim), or
    /// dropped (an `amdrocm*` package that is not built in this run).
    fn resolve(&self, dep: &str, versioned_gfx: Gfx<'_>) -> Option<(String, bool)> {
        match self.by_name.get(dep) {
            Some(spec) if self.present.contains(dep) => Some((self.name(spec, true, versioned_gfx), true)),
            _ if dep.starts_with("amdrocm") => None,
            _ => Some((dep.to_owned(), false)),
        }
    }

    fn main_deps<'s>(&self, spec: &'s PackageSpec) -> &'s [String] {
        match self.options.pkg_type {
            PkgType::Deb => &spec.deb_depends,
            PkgType::Rpm => &spec.rpm_requires,
        }
    }

    fn content(&self, spec: &PackageSpec, variant: &Variant) -> Vec<ContentPath> {
        let mut out = Vec::new();
        let (suffix, device) = match variant {
            Variant::Meta | Variant::NonVersioned => return out,
            Variant::Host | Variant::Versioned => (GENERIC.to_owned(), false),
            Variant::Device(arch) => (arch.clone(), true),
            Variant::SingleArch(arch) => (if spec.gfxarch { arch.clone() } else { GENERIC.to_owned() }, false),
        };
        for artifact in &spec.artifactory {
            let suffix = match artifact.gfxarch {
                // A target-independent artifact belongs to the host package, a per-target one
                // to the device packages.
                Some(false) if device => continue,
                Some(true) if matches!(variant, Variant::Host | Variant::Versioned) => continue,
                Some(false) => GENERIC.to_owned(),
                _ => suffix.clone(),
            };
            for sub in &artifact.subdirs {
                for component in &sub.components {
                    self.index.content(&artifact.artifact, component, &suffix, &sub.name, &mut out);
                }
            }
        }
        out
    }

    fn package(&self, spec: &PackageSpec, variant: Variant, name: String, depends: Vec<String>) -> PlannedPackage {
        let versioned = variant != Variant::NonVersioned;
        let gfx = match &variant {
            Variant::Device(a) | Variant::SingleArch(a) => Gfx::Arch(a),
            Variant::Host => Gfx::Host,
            _ => Gfx::Meta,
        };
        let secondary = |list: &[String]| -> Vec<String> {
            if versioned { self.dependencies(spec, list, gfx) } else { Vec::new() }
        };
        let (recommends, suggests) = match self.options.pkg_type {
            PkgType::Deb => (secondary(&spec.deb_recommends), secondary(&spec.deb_suggests)),
            PkgType::Rpm => (secondary(&spec.rpm_recommends), secondary(&spec.rpm_suggests)),
        };
        let names = |list: &[String]| -> Vec<String> {
            if versioned {
                return Vec::new();
            }
            list.iter()
                .map(|n| match (self.options.pkg_type, n.strip_suffix("-devel")) {
                    (PkgType::Deb, Some(base)) => format!("{base}-dev"),
                    _ => n.clone(),
                })
                .collect()
        };
        let deb = self.options.pkg_type == PkgType::Deb;
        PlannedPackage {
            contents: self.content(spec, &variant),
            provides: names(&spec.provides),
            replaces: if deb { names(&spec.replaces) } else { Vec::new() },
            conflicts: names(&spec.conflicts),
            obsoletes: if deb { Vec::new() } else { names(&spec.obsoletes) },
            name,
            source: spec.package.clone(),
            variant,
            depends,
            recommends,
            suggests,
        }
    }

    /// `list` resolved for `gfx`; a metapackage pins its own packages to this run's version.
    fn dependencies(&self, spec: &PackageSpec, list: &[String], gfx: Gfx<'_>) -> Vec<String> {
        list.iter()
            .filter_map(|d| self.resolve(d, gfx))
            .map(|(n, ours)| if ours && spec.metapackage { self.pin(n) } else { n })
            .collect()
    }

    /// The versioned variants and the unversioned one of `spec`.
    fn variants(
        &self,
        spec: &PackageSpec,
        targets: &[String],
        skipped: &mut Vec<(String, String)>,
    ) -> Vec<PlannedPackage> {
        let mut found = Found { spec, packages: Vec::new(), skipped };
        let versioned_name = if !self.options.kpack {
            self.single_arch(spec, targets, &mut found)
        } else if self.split(spec) && spec.metapackage {
            Some(self.split_metapackage(spec, targets, &mut found))
        } else if self.split(spec) {
            Some(self.split_package(spec, targets, &mut found))
        } else {
            // Not split: per-target dependencies are met by their meta package.
            let depends = self.dependencies(spec, self.main_deps(spec), Gfx::Meta);
            let name = self.name(spec, true, Gfx::None);
            found.keep(self.package(spec, Variant::Versioned, name.clone(), depends)).then_some(name)
        };
        let mut out = found.packages;
        let Some(versioned_name) = versioned_name else { return out };
        let depends = vec![if spec.metapackage { self.pin(versioned_name) } else { versioned_name }];
        let gfx = match (&self.options.kpack, targets.first()) {
            (false, Some(arch)) if spec.gfxarch => Gfx::Arch(arch),
            _ => Gfx::Meta,
        };
        let name = self.name(spec, false, gfx);
        out.push(self.package(spec, Variant::NonVersioned, name, depends));
        out
    }

    /// Single-arch mode: one versioned package for the first target; its name when built.
    fn single_arch(&self, spec: &PackageSpec, targets: &[String], found: &mut Found<'_, '_>) -> Option<String> {
        let arch = targets.first().cloned().unwrap_or_else(|| GENERIC.into());
        let gfx = if spec.gfxarch { Gfx::Arch(&arch) } else { Gfx::None };
        let depends = self.dependencies(spec, self.main_deps(spec), gfx);
        let name = self.name(spec, true, gfx);
        found.keep(self.package(spec, Variant::SingleArch(arch.clone()), name.clone(), depends)).then_some(name)
    }

    /// kpack, a gfxarch metapackage: one per-target meta for each target (depending on the
    /// per-target packages built for it) and the versioned meta over them; its name.
    fn split_metapackage(&self, spec: &PackageSpec, targets: &[String], found: &mut Found<'_, '_>) -> String {
        let mut metas = Vec::new();
        for arch in targets {
            let gfx = Gfx::Arch(arch);
            let depends = self
                .main_deps(spec)
                .iter()
                .filter_map(|d| {
                    let dep = self.by_name.get(d.as_str());
                    let per_target = dep.is_some_and(|s| self.split(s));
                    let (n, ours) = self.resolve(d, if per_target { gfx } else { Gfx::Meta })?;
                    // A per-target dependency without content for this target is not built.
                    if per_target && !dep.is_some_and(|s| self.built_for(s, arch)) {
                        return None;
                    }
                    Some(if ours { self.pin(n) } else { n })
                })
                .collect();
            let name = self.name(spec, true, gfx);
            metas.push(name.clone());
            found.packages.push(self.package(spec, Variant::Device(arch.clone()), name, depends));
        }
        let versioned_name = self.name(spec, true, Gfx::Meta);
        let depends = metas.into_iter().map(|n| self.pin(n)).collect();
        found.packages.push(self.package(spec, Variant::Meta, versioned_name.clone(), depends));
        versioned_name
    }

    /// kpack, a package split per target: the host package, a device package per target
    /// with content, and the meta package over those built; the meta's name.
    fn split_package(&self, spec: &PackageSpec, targets: &[String], found: &mut Found<'_, '_>) -> String {
        let host_name = self.name(spec, true, Gfx::Host);
        let host_deps = self
            .main_deps(spec)
            .iter()
            .filter(|d| !self.by_name.get(d.as_str()).is_some_and(|s| self.split(s)))
            .filter_map(|d| self.resolve(d, Gfx::Host))
            .map(|(n, _)| n)
            .collect();
        let host_built = found.keep(self.package(spec, Variant::Host, host_name.clone(), host_deps));
        let mut meta_deps = Vec::new();
        if host_built {
            meta_deps.push(self.pin(host_name.clone()));
        }
        for arch in targets {
            let mut depends = Vec::new();
            if host_built {
                depends.push(host_name.clone());
            }
            for d in self.main_deps(spec) {
                let Some(dep) = self.by_name.get(d.as_str()).filter(|s| self.split(s)) else { continue };
                if !self.built_for(dep, arch) {
                    continue;
                }
                if let Some((n, _)) = self.resolve(d, Gfx::Arch(arch)) {
                    depends.push(n);
                }
            }
            let name = self.name(spec, true, Gfx::Arch(arch));
            if found.keep(self.package(spec, Variant::Device(arch.clone()), name.clone(), depends)) {
                meta_deps.push(self.pin(name));
            }
        }
        let versioned_name = self.name(spec, true, Gfx::Meta);
        found.packages.push(self.package(spec, Variant::Meta, versioned_name.clone(), meta_deps));
        versioned_name
    }

    /// Whether `spec`'s device package for `arch` has content (is built).
    fn built_for(&self, spec: &PackageSpec, arch: &str) -> bool {
        spec.metapackage || !self.content(spec, &Variant::Device(arch.to_owned())).is_empty()
    }
}

/// Plan the packages of one run.
pub fn plan(specs: &[PackageSpec], index: &ArtifactIndex, options: &PlanOptions) -> Result<Plan, PlanError> {
    let versions = Versions::new(&options.rocm_version, options.version_suffix.as_deref())?;
    let targets = if options.targets.is_empty() { index.targets() } else { options.targets.clone() };
    let mut seen = BTreeSet::new();
    let targets: Vec<String> = targets.into_iter().filter(|t| seen.insert(t.clone())).collect();
    for t in &targets {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(PlanError::Target(t.clone()));
        }
    }
    let by_name: BTreeMap<&str, &PackageSpec> = specs.iter().map(|s| (s.package.as_str(), s)).collect();
    let artifacts = index.present_artifacts();
    let mut present = BTreeSet::new();
    let mut skipped = Vec::new();
    for spec in specs.iter().filter(|s| !s.disable_packaging) {
        if spec.metapackage || spec.artifactory.iter().any(|a| artifacts.contains(a.artifact.as_str())) {
            present.insert(spec.package.as_str());
        }
    }
    let selected: Vec<&PackageSpec> = match &options.only {
        Some(names) => {
            let chosen: Vec<&PackageSpec> =
                specs.iter().filter(|s| !s.disable_packaging && names.contains(&s.package)).collect();
            if chosen.is_empty() {
                return Err(PlanError::NothingSelected(names.join(", ")));
            }
            chosen
        }
        None => specs
            .iter()
            .filter(|s| !s.disable_packaging)
            .filter(|s| {
                let ok = present.contains(s.package.as_str());
                if !ok {
                    skipped.push((s.package.clone(), "no artifacts for it in the artifacts directory".into()));
                }
                ok
            })
            .collect(),
    };
    find_cycle(specs, &by_name)?;
    let split = specs.iter().filter(|s| splits(s, index, options.kpack)).map(|s| s.package.as_str()).collect();
    let planner = Planner { by_name, index, options, versions: versions.clone(), present, split };
    let mut packages = Vec::new();
    for spec in selected {
        packages.extend(planner.variants(spec, &targets, &mut skipped));
    }
    Ok(Plan { versions, targets, packages, skipped })
}

/// A dependency cycle among metapackages (over deb and rpm dependencies), as `a -> b -> a`.
/// Metapackages are made only of dependencies, so such a cycle installs nothing and is a
/// mistake; between packages with content a cycle is legal and real (`amdrocm-runtime` and
/// `amdrocm-base` need each other), so those are left to dpkg and rpm.
fn find_cycle<'a>(specs: &'a [PackageSpec], by_name: &BTreeMap<&'a str, &'a PackageSpec>) -> Result<(), PlanError> {
    fn visit<'a>(
        name: &'a str,
        by_name: &BTreeMap<&'a str, &'a PackageSpec>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Result<(), PlanError> {
        if done.contains(name) {
            return Ok(());
        }
        if let Some(at) = stack.iter().position(|n| *n == name) {
            let mut path: Vec<&str> = stack[at..].to_vec();
            path.push(name);
            return Err(PlanError::Cycle(path.join(" -> ")));
        }
        let Some(spec) = by_name.get(name) else { return Ok(()) };
        stack.push(name);
        for dep in spec.deb_depends.iter().chain(&spec.rpm_requires) {
            if let Some((key, next)) = by_name.get_key_value(dep.as_str())
                && next.metapackage
                && !next.disable_packaging
            {
                visit(key, by_name, stack, done)?;
            }
        }
        stack.pop();
        done.insert(name);
        Ok(())
    }
    let mut done = BTreeSet::new();
    for spec in specs.iter().filter(|s| s.metapackage && !s.disable_packaging) {
        visit(spec.package.as_str(), by_name, &mut Vec::new(), &mut done)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::parse_package_json;
    use super::*;

    const REAL: &str = include_str!("../../data/therock/package.json");

    fn specs() -> Vec<PackageSpec> {
        parse_package_json(REAL).unwrap()
    }

    /// The artifacts of the worked example: fft for generic + two targets, and the runtime and
    /// sysdeps artifacts its dependencies need to be present.
    fn fft_tree(devices: &[&str]) -> ArtifactIndex {
        let fft = vec![
            "math-libs/rocFFT/stage/lib/librocfft.so.0".to_owned(),
            "math-libs/hipFFT/stage/lib/libhipfft.so.0".to_owned(),
        ];
        let mut dirs = vec![
            ("fft_lib_generic".to_owned(), fft.clone()),
            ("core-runtime_lib_generic".to_owned(), vec!["core/ROCR-Runtime/stage/lib/libhsa-runtime64.so".to_owned()]),
            ("sysdeps_lib_generic".to_owned(), vec!["third-party/sysdeps/stage/lib/libz.so".to_owned()]),
        ];
        for d in devices {
            dirs.push(((*d).to_owned(), fft.clone()));
        }
        ArtifactIndex::new(dirs)
    }

    fn options(pkg_type: PkgType, kpack: bool, targets: &[&str], suffix: Option<&str>) -> PlanOptions {
        PlanOptions {
            pkg_type,
            rocm_version: "7.1.0".into(),
            version_suffix: suffix.map(Into::into),
            targets: targets.iter().map(|t| (*t).to_owned()).collect(),
            kpack,
            asan: false,
            only: None,
        }
    }

    fn family(plan: &Plan, source: &str) -> String {
        plan.packages
            .iter()
            .filter(|p| p.source == source)
            .map(|p| {
                format!("{} [{:?}] Depends: {} ({} paths)", p.name, p.variant, p.depends.join(", "), p.contents.len())
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_worked_fft_example() {
        let index = fft_tree(&["fft_lib_gfx1100", "fft_lib_gfx942"]);
        let deb = plan(&specs(), &index, &options(PkgType::Deb, true, &["gfx1100", "gfx942"], Some("daily"))).unwrap();
        insta::assert_snapshot!("fft_kpack_deb", family(&deb, "amdrocm-fft"));
        let rpm = plan(&specs(), &index, &options(PkgType::Rpm, true, &["gfx1100", "gfx942"], Some("daily"))).unwrap();
        insta::assert_snapshot!("fft_kpack_rpm", family(&rpm, "amdrocm-fft"));
        assert_eq!(deb.versions.deb, "7.1.0-daily");
        assert_eq!((rpm.versions.rpm_version.as_str(), rpm.versions.rpm_release.as_str()), ("7.1.0", "daily"));
        // The exact Depends lines of spec §7.
        let depends = |name: &str| deb.packages.iter().find(|p| p.name == name).unwrap().depends.join(", ");
        assert_eq!(depends("amdrocm-fft-host7.1"), "libc6, amdrocm-runtime7.1, amdrocm-sysdeps7.1");
        assert_eq!(depends("amdrocm-fft7.1-gfx1100"), "amdrocm-fft-host7.1");
        assert_eq!(
            depends("amdrocm-fft7.1"),
            "amdrocm-fft-host7.1( = 7.1.0-daily), amdrocm-fft7.1-gfx1100( = 7.1.0-daily), amdrocm-fft7.1-gfx942( = 7.1.0-daily)"
        );
        assert_eq!(depends("amdrocm-fft"), "amdrocm-fft7.1");
    }

    #[test]
    fn dependencies_on_absent_packages_are_dropped_without_stray_separators() {
        // No sysdeps artifacts: amdrocm-sysdeps is absent, so the dependency goes, cleanly.
        let index = ArtifactIndex::new([
            ("fft_lib_generic".to_owned(), vec!["x/rocFFT/lib".to_owned()]),
            ("core-runtime_lib_generic".to_owned(), vec!["x/ROCR-Runtime/lib".to_owned()]),
        ]);
        let plan = plan(&specs(), &index, &options(PkgType::Deb, true, &[], Some("1"))).unwrap();
        let runtime = plan.packages.iter().find(|p| p.name == "amdrocm-runtime7.1").unwrap();
        assert!(runtime.depends.iter().all(|d| !d.is_empty()), "{:?}", runtime.depends);
        assert!(!runtime.depends.iter().any(|d| d.starts_with("amdrocm-sysdeps")), "{:?}", runtime.depends);
        let fft = plan.packages.iter().find(|p| p.name == "amdrocm-fft7.1").unwrap();
        assert_eq!(fft.variant, Variant::Versioned, "no gfx directories: not split");
        assert_eq!(fft.depends, ["libc6", "amdrocm-runtime7.1"]);
        assert!(plan.skipped.iter().any(|(n, _)| n == "amdrocm-sysdeps"), "{:?}", plan.skipped);
    }

    #[test]
    fn a_package_that_is_not_split_depends_on_a_split_dependencys_meta() {
        let mut index = fft_tree(&["fft_lib_gfx942"]);
        index.dirs.insert("fft_dev_generic".into(), vec!["math-libs/rocFFT/stage/include/rocfft.h".into()]);
        let plan = plan(&specs(), &index, &options(PkgType::Deb, true, &["gfx942"], Some("1"))).unwrap();
        let dev = plan.packages.iter().find(|p| p.name == "amdrocm-fft-dev7.1").unwrap();
        assert_eq!(dev.variant, Variant::Versioned);
        assert_eq!(dev.depends, ["libc6", "amdrocm-fft7.1"]);
        let rpm = super::plan(&specs(), &index, &options(PkgType::Rpm, true, &["gfx942"], Some("1"))).unwrap();
        assert!(rpm.packages.iter().any(|p| p.name == "amdrocm-fft-devel7.1"), "rpm keeps -devel");
    }

    #[test]
    fn empty_variants_are_skipped_and_never_referenced() {
        // gfx1100 requested but no fft_*_gfx1100: no device package, and the meta omits it.
        let index = fft_tree(&["fft_lib_gfx942:xnack+"]);
        for pkg_type in [PkgType::Deb, PkgType::Rpm] {
            let plan = plan(&specs(), &index, &options(pkg_type, true, &["gfx1100", "gfx942"], Some("1"))).unwrap();
            let names: Vec<&str> =
                plan.packages.iter().filter(|p| p.source == "amdrocm-fft").map(|p| p.name.as_str()).collect();
            assert_eq!(names, ["amdrocm-fft-host7.1", "amdrocm-fft7.1-gfx942", "amdrocm-fft7.1", "amdrocm-fft"]);
            let meta = plan.packages.iter().find(|p| p.name == "amdrocm-fft7.1").unwrap();
            assert_eq!(meta.depends.len(), 2, "{:?}", meta.depends);
            assert!(plan.skipped.iter().any(|(n, _)| n == "amdrocm-fft7.1-gfx1100"), "{:?}", plan.skipped);
        }
    }

    #[test]
    fn single_arch_names_and_dependencies() {
        let fft = vec!["math-libs/rocFFT/stage/lib/x".to_owned()];
        let index = ArtifactIndex::new([
            ("fft_lib_gfx94X-dcgpu".to_owned(), fft.clone()),
            ("fft_dev_gfx94X-dcgpu".to_owned(), vec!["math-libs/rocFFT/stage/include/x.h".to_owned()]),
            ("core-runtime_lib_generic".to_owned(), vec!["x/ROCR-Runtime/lib".to_owned()]),
            ("sysdeps_lib_generic".to_owned(), vec!["x/sysdeps/lib".to_owned()]),
        ]);
        let plan = plan(&specs(), &index, &options(PkgType::Deb, false, &["gfx94X-dcgpu"], None)).unwrap();
        let depends = |name: &str| plan.packages.iter().find(|p| p.name == name).unwrap().depends.join(", ");
        assert_eq!(depends("amdrocm-fft7.1-gfx94x"), "libc6, amdrocm-runtime7.1, amdrocm-sysdeps7.1");
        assert_eq!(depends("amdrocm-fft-gfx94x"), "amdrocm-fft7.1-gfx94x");
        assert_eq!(depends("amdrocm-fft-dev7.1-gfx94x"), "libc6, amdrocm-fft7.1-gfx94x");
        assert_eq!(
            depends("amdrocm-core7.1-gfx94x").split(", ").filter(|d| d.contains("fft")).collect::<Vec<_>>(),
            ["amdrocm-fft7.1-gfx94x( = 7.1.0)"]
        );
        assert_eq!(plan.versions.deb, "7.1.0");
        let rpm = super::plan(&specs(), &index, &options(PkgType::Rpm, false, &["gfx94X-dcgpu"], None)).unwrap();
        assert_eq!(rpm.versions.rpm_release, "1", "no suffix: Release 1, not None");
    }

    #[test]
    fn asan_names() {
        let index = fft_tree(&["fft_lib_gfx1100"]);
        let mut opts = options(PkgType::Deb, true, &["gfx1100"], Some("1"));
        opts.asan = true;
        let plan = plan(&specs(), &index, &opts).unwrap();
        let names: Vec<&str> =
            plan.packages.iter().filter(|p| p.source == "amdrocm-fft").map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            ["amdrocm-fft-host-asan7.1", "amdrocm-fft-asan7.1-gfx1100", "amdrocm-fft-asan7.1", "amdrocm-fft-asan"]
        );
    }

    #[test]
    fn metapackages_fan_out_per_target() {
        let index = fft_tree(&["fft_lib_gfx1100", "fft_lib_gfx942"]);
        let plan = plan(&specs(), &index, &options(PkgType::Deb, true, &["gfx1100", "gfx942"], Some("daily"))).unwrap();
        insta::assert_snapshot!("core_kpack_deb", family(&plan, "amdrocm-core"));
    }

    #[test]
    fn versions_targets_and_cycles_are_checked() {
        assert_eq!(Versions::new("7", None).unwrap_err(), PlanError::Version("7".into()));
        assert!(Versions::new("x.1", None).is_err());
        assert_eq!(Versions::new("7.15.0~dev20260820", Some("28484694006")).unwrap().tag, "7.15");
        assert_eq!(Versions::new("10.1rc2", None).unwrap().tag, "10.1");
        assert!(Versions::new("7.1.0", Some("a b")).is_err());
        let index = fft_tree(&[]);
        let bad = plan(&specs(), &index, &options(PkgType::Deb, true, &["../gfx"], None));
        assert_eq!(bad.unwrap_err(), PlanError::Target("../gfx".into()));
        let cyclic = parse_package_json(
            r#"[{"Package":"meta-a","Metapackage":"True","DEBDepends":["meta-b"],"Architecture":"amd64","BuildArch":"x86_64"},
                {"Package":"meta-b","Metapackage":"True","DEBDepends":["meta-a"],"Architecture":"amd64","BuildArch":"x86_64"}]"#,
        )
        .unwrap();
        let err = plan(&cyclic, &index, &options(PkgType::Deb, true, &[], None)).unwrap_err();
        assert_eq!(err, PlanError::Cycle("meta-a -> meta-b -> meta-a".into()));
        // The real file's runtime <-> base loop is between packages with content: allowed.
        assert!(plan(&specs(), &index, &options(PkgType::Deb, true, &[], None)).is_ok());
    }

    #[test]
    fn targets_default_to_what_the_artifacts_hold() {
        let index = fft_tree(&["fft_lib_gfx942", "fft_lib_gfx1100:xnack-", "fft_lib_gfx1100:xnack+"]);
        assert_eq!(index.targets(), ["gfx1100", "gfx942"]);
        let plan = plan(&specs(), &index, &options(PkgType::Deb, true, &[], Some("1"))).unwrap();
        assert_eq!(plan.targets, ["gfx1100", "gfx942"]);
    }
}
