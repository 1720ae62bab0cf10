//! The CMake arguments one stage configures with, exactly as TheRock's `configure_stage.py`
//! prints them: families, dist families, manylinux Python executables, `THEROCK_ENABLE_ALL=OFF`,
//! then `THEROCK_ENABLE_<FEATURE>=ON` for every produced or inbound artifact not disabled on
//! the platform, sorted.

use std::collections::BTreeSet;

use crate::{Platform, Topology, TopologyError};

/// The manylinux container's Python executables (TheRock's `manylinux_config.py`).
pub const DIST_PYTHON_EXECUTABLES: &str = "/opt/python/cp310-cp310/bin/python;/opt/python/cp311-cp311/bin/python;\
/opt/python/cp312-cp312/bin/python;/opt/python/cp313-cp313/bin/python";
pub const SHARED_PYTHON_EXECUTABLES: &str = "/opt/python-shared/cp310-cp310/bin/python3;\
/opt/python-shared/cp311-cp311/bin/python3;/opt/python-shared/cp312-cp312/bin/python3;\
/opt/python-shared/cp313-cp313/bin/python3;/opt/python-shared/cp314-cp314/bin/python3";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigureOptions {
    /// `--amdgpu-families`, passed through verbatim.
    pub amdgpu_families: String,
    /// `--dist-amdgpu-families` (`a;b`), quoted in the output.
    pub dist_amdgpu_families: String,
    pub platform: Option<Platform>,
    pub manylinux: bool,
    /// `--comments` (ignored with `--oneline`).
    pub comments: bool,
    /// Flags that lift `disable_platforms_if_flags_not_set`.
    pub flags: BTreeSet<String>,
}

/// Features to enable for `stage`: its produced and inbound artifacts, minus those disabled
/// on the platform.
pub fn stage_features(
    topology: &Topology,
    stage: &str,
    options: &ConfigureOptions,
) -> Result<BTreeSet<String>, TopologyError> {
    let mut artifacts = topology.produced(stage)?;
    artifacts.extend(topology.inbound(stage)?);
    Ok(artifacts
        .iter()
        .filter(|a| options.platform.is_none_or(|p| !topology.disabled_on(a, p, &options.flags)))
        .map(|a| topology.feature_name(a))
        .collect())
}

/// The argument lines (with comment and blank lines when `comments`).
pub fn cmake_args(topology: &Topology, stage: &str, options: &ConfigureOptions) -> Result<Vec<String>, TopologyError> {
    let features = stage_features(topology, stage, options)?;
    let mut args = Vec::new();
    if options.comments {
        args.push(format!("# CMake arguments for {stage}"));
        args.push(String::new());
    }
    if !options.amdgpu_families.is_empty() {
        args.push(format!("-DTHEROCK_AMDGPU_FAMILIES={}", options.amdgpu_families));
    }
    if !options.dist_amdgpu_families.is_empty() {
        args.push(format!("-DTHEROCK_DIST_AMDGPU_FAMILIES=\"{}\"", options.dist_amdgpu_families));
    }
    if options.manylinux {
        args.push(format!("-DTHEROCK_DIST_PYTHON_EXECUTABLES=\"{DIST_PYTHON_EXECUTABLES}\""));
        args.push(format!("-DTHEROCK_SHARED_PYTHON_EXECUTABLES=\"{SHARED_PYTHON_EXECUTABLES}\""));
    }
    if options.comments {
        args.push(String::new());
        args.push("# Disable all features by default".into());
    }
    args.push("-DTHEROCK_ENABLE_ALL=OFF".into());
    if options.comments {
        args.push(String::new());
        args.push(format!("# Enable features for {stage}"));
    }
    args.extend(features.iter().map(|f| format!("-DTHEROCK_ENABLE_{f}=ON")));
    Ok(args)
}

/// The text `configure_stage.py` prints: lines, or one line with `oneline`.
pub fn render(args: &[String], oneline: bool) -> String {
    if oneline {
        args.iter().filter(|a| !a.is_empty() && !a.starts_with('#')).cloned().collect::<Vec<_>>().join(" ")
    } else {
        args.join("\n")
    }
}

/// `pip install` arguments for the stage's artifacts (`python_requires`), deduplicated.
pub fn pip_install_args(topology: &Topology, stage: &str) -> Result<Vec<String>, TopologyError> {
    let groups = &topology.build_stages.get(stage).ok_or_else(|| topology.unknown_stage(stage))?.artifact_groups;
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for group in groups {
        for artifact in topology.artifacts.values().filter(|a| &a.artifact_group == group) {
            for req in &artifact.python_requires {
                if seen.insert(req.clone()) {
                    out.push(req.clone());
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_and_platform_prints_what_configure_stage_py_prints() {
        let topology = Topology::parse(include_str!("../data/BUILD_TOPOLOGY.toml")).unwrap();
        let expected: std::collections::BTreeMap<String, String> =
            serde_json::from_str(include_str!("../data/configure-from-therock.json")).unwrap();
        assert_eq!(expected.len(), 66);
        for (case, want) in &expected {
            let parts: Vec<&str> = case.split('|').collect();
            let [stage, platform, variant] = parts[..] else { panic!("{case}") };
            let mut options = ConfigureOptions {
                platform: Some(if platform == "linux" { Platform::Linux } else { Platform::Windows }),
                ..ConfigureOptions::default()
            };
            let oneline = variant == "oneline";
            match variant {
                "families" => {
                    options.amdgpu_families = "gfx94X-dcgpu".into();
                    options.dist_amdgpu_families = "gfx94X-dcgpu;gfx110X-all".into();
                    options.manylinux = true;
                    options.comments = true;
                }
                "oneline" => options.amdgpu_families = "gfx1201".into(),
                _ => {}
            }
            let got = render(&cmake_args(&topology, stage, &options).unwrap(), oneline);
            assert_eq!(format!("{got}\n"), *want, "{case}");
        }
        // math-libs on Linux enables 39 features, as spec §2 says.
        let linux = ConfigureOptions { platform: Some(Platform::Linux), ..ConfigureOptions::default() };
        assert_eq!(stage_features(&topology, "math-libs", &linux).unwrap().len(), 39);
    }
}
