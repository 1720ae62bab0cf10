//! TheRock's `package.json` entries and planned packages mapped to `.deb` control fields,
//! Debian docs and rpm header fields (what `build_package.py` writes into `debian/control`
//! and the spec file), and the install prefix.

use quarry_packaging::therock::{PackageSpec, Plan, PlannedPackage};

use crate::deb::{DebControl, DebianDocs};
use crate::rpm::RpmSpec;

/// TheRock's default install prefix; it becomes `/opt/rocm/core-{major.minor}`.
pub const DEFAULT_INSTALL_PREFIX: &str = "/opt/rocm/core";

/// The install prefix: the default becomes `/opt/rocm/core-{tag}` (`core-asan-{tag}` for
/// asan builds), any other prefix stays as given.
pub fn install_prefix(requested: &str, asan: bool, tag: &str) -> String {
    if requested.trim_end_matches('/') != DEFAULT_INSTALL_PREFIX {
        return requested.to_owned();
    }
    if asan { format!("{DEFAULT_INSTALL_PREFIX}-asan-{tag}") } else { format!("{DEFAULT_INSTALL_PREFIX}-{tag}") }
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

/// The `.deb` control fields of `package` (from `spec`): the short description (or the
/// package name) with the long one wrapped at 79 columns as continuation lines.
pub fn deb_control(plan: &Plan, spec: &PackageSpec, package: &PlannedPackage) -> DebControl {
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

/// The copyright, changelog (dated `date`, RFC 2822) and lintian overrides of `package`.
pub fn debian_docs_for(plan: &Plan, spec: &PackageSpec, package: &PlannedPackage, date: &str) -> DebianDocs {
    DebianDocs {
        package: package.name.clone(),
        version: plan.versions.deb.clone(),
        maintainer: spec.maintainer.clone(),
        license: spec.license.clone(),
        copyright_holder: spec.vendor.clone(),
        source_url: spec.homepage.clone(),
        date: date.to_owned(),
        // TheRock installs under /opt/rocm on purpose.
        lintian_overrides: vec!["dir-or-file-in-opt".into()],
    }
}

/// The rpm header fields of `package` (from `spec`); dependencies are `name OP version`, as
/// TheRock's pins already read.
pub fn rpm_spec(plan: &Plan, spec: &PackageSpec, package: &PlannedPackage) -> RpmSpec {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_wrapping() {
        assert_eq!(install_prefix("/opt/rocm/core/", false, "7.1"), "/opt/rocm/core-7.1");
        assert_eq!(install_prefix("/opt/rocm/core", true, "7.1"), "/opt/rocm/core-asan-7.1");
        assert_eq!(install_prefix("/usr/local", true, "7.1"), "/usr/local");
        assert_eq!(wrap("a bb  ccc dddd", 6), ["a bb", "ccc", "dddd"]);
        assert!(wrap("  ", 79).is_empty());
    }
}
