//! Per-platform rules a stage job on Windows needs while CI itself runs on Linux: which
//! artifacts a platform builds at all, and how a build directory such as `B:\build` is written
//! for CMake and joined with archive member paths. Pure string rules, the same on every host.

use std::collections::BTreeSet;

use crate::{Platform, Topology};

impl Platform {
    /// `linux` or `windows` (case-insensitive), the spelling of `--platform`.
    pub fn parse(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "linux" => Some(Self::Linux),
            "windows" => Some(Self::Windows),
            _ => None,
        }
    }

    /// The platform this binary runs on: `windows` on Windows, `linux` everywhere else.
    pub fn host() -> Self {
        if cfg!(windows) { Self::Windows } else { Self::Linux }
    }
}

impl Topology {
    /// The artifacts of `names` a platform builds: those disabled there (directly, or by a
    /// flag that is not set) are left out, so nobody waits for them.
    pub fn built_on(&self, names: &BTreeSet<String>, platform: Platform, flags: &BTreeSet<String>) -> BTreeSet<String> {
        names.iter().filter(|n| !self.disabled_on(n, platform, flags)).cloned().collect()
    }
}

/// True for an absolute path on `platform`: `/x` on Linux; `B:\x`, `B:/x` or a UNC `\\server\x`
/// on Windows (a bare `B:x` is drive-relative, not absolute).
pub fn is_absolute(path: &str, platform: Platform) -> bool {
    match platform {
        Platform::Linux => path.starts_with('/'),
        Platform::Windows => {
            let b = path.as_bytes();
            (b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b[2] == b'\\' || b[2] == b'/'))
                || path.starts_with("\\\\")
                || path.starts_with("//")
        }
    }
}

/// A path as CMake wants it: on Windows, `\` becomes `/` (a backslash is an escape in CMake
/// strings) and the drive letter is kept (`B:\build` → `B:/build`); on Linux it is unchanged.
pub fn cmake_path(path: &str, platform: Platform) -> String {
    match platform {
        Platform::Linux => path.to_owned(),
        Platform::Windows => path.replace('\\', "/"),
    }
}

/// `base` joined with an archive member path (always `/`-separated), in `platform`'s own
/// spelling: `B:\build` + `math-libs/BLAS/stage` → `B:\build\math-libs\BLAS\stage`.
pub fn join(base: &str, member: &str, platform: Platform) -> String {
    let (sep, other) = match platform {
        Platform::Linux => ('/', None),
        Platform::Windows => ('\\', Some('/')),
    };
    // Keep the base's own separators; what is added uses the platform's.
    let mut out = base.trim_end_matches(|c| c == sep || Some(c) == other).to_owned();
    for part in member.split('/').filter(|p| !p.is_empty() && *p != ".") {
        out.push(sep);
        out.push_str(part);
    }
    if out.is_empty() { sep.to_string() } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_paths_for_cmake_and_members() {
        let w = Platform::Windows;
        assert!(is_absolute(r"B:\build", w));
        assert!(is_absolute("B:/build", w));
        assert!(is_absolute(r"\\runner\share\build", w));
        assert!(!is_absolute("B:build", w), "drive-relative");
        assert!(!is_absolute("/build", w), "the current drive's root is not absolute");
        assert!(!is_absolute(r"build\math-libs", w));
        assert!(is_absolute("/home/runner/build", Platform::Linux));
        assert!(!is_absolute(r"B:\build", Platform::Linux));

        assert_eq!(cmake_path(r"B:\build", w), "B:/build");
        assert_eq!(cmake_path(r"C:\Program Files\LLVM\bin\clang.exe", w), "C:/Program Files/LLVM/bin/clang.exe");
        assert_eq!(cmake_path(r"odd\name", Platform::Linux), r"odd\name", "a Linux file name may hold a backslash");

        assert_eq!(join(r"B:\build", "math-libs/BLAS/stage", w), r"B:\build\math-libs\BLAS\stage");
        assert_eq!(join(r"B:\build\", "./compiler//amd-llvm", w), r"B:\build\compiler\amd-llvm");
        assert_eq!(join("B:/build/", "base/stage", w), r"B:/build\base\stage");
        assert_eq!(join("/b/", "base/stage", Platform::Linux), "/b/base/stage");
        assert_eq!(join("/", "x", Platform::Linux), "/x");
    }

    #[test]
    fn platform_names() {
        assert_eq!(Platform::parse("Windows"), Some(Platform::Windows));
        assert_eq!(Platform::parse("linux"), Some(Platform::Linux));
        assert_eq!(Platform::parse("macos"), None);
    }

    #[test]
    fn windows_builds_leave_out_linux_only_artifacts() {
        let text = include_str!("../data/BUILD_TOPOLOGY.toml");
        let t = Topology::parse(text).unwrap();
        let inbound = t.inbound("math-libs").unwrap();
        let linux = t.built_on(&inbound, Platform::Linux, &BTreeSet::new());
        let windows = t.built_on(&inbound, Platform::Windows, &BTreeSet::new());
        assert_eq!(linux, inbound, "nothing math-libs needs is Linux-disabled");
        assert!(windows.len() < linux.len());
        assert!(linux.iter().any(|a| a.starts_with("sysdeps-")) && !windows.contains("sysdeps-expat"));
        // A flag-guarded disable: core-runtime is left out on Windows unless its flag is set.
        let all: BTreeSet<String> = t.artifacts.keys().cloned().collect();
        assert!(!t.built_on(&all, Platform::Windows, &BTreeSet::new()).contains("core-runtime"));
        let flag = t.artifacts["core-runtime"].disable_platforms_if_flags_not_set[&Platform::Windows].clone();
        assert!(t.built_on(&all, Platform::Windows, &[flag].into()).contains("core-runtime"));
    }
}
