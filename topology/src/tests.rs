//! The real topology against what TheRock's `build_topology.py` computes from it
//! (`data/expected-from-therock.json`), and every validation rule on small broken files.

use std::collections::BTreeSet;

use super::*;

const REAL: &str = include_str!("../data/BUILD_TOPOLOGY.toml");
const EXPECTED: &str = include_str!("../data/expected-from-therock.json");

fn set(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

#[test]
fn the_real_topology_matches_therocks_own_answers() {
    let topology = Topology::parse(REAL).unwrap();
    let expected: serde_json::Value = serde_json::from_str(EXPECTED).unwrap();
    assert_eq!((topology.build_stages.len(), topology.artifact_groups.len(), topology.artifacts.len()), (11, 22, 73));
    for (stage, want) in expected["stages"].as_object().unwrap() {
        assert_eq!(topology.produced(stage).unwrap(), set(&want["produced"]), "produced({stage})");
        assert_eq!(topology.inbound(stage).unwrap(), set(&want["inbound"]), "inbound({stage})");
        let per_arch = topology.build_stages[stage].kind == StageType::PerArch;
        assert_eq!(per_arch, want["type"] == "per-arch", "{stage} type");
    }
    let none = BTreeSet::new();
    for (artifact, want) in expected["features"].as_object().unwrap() {
        assert_eq!(topology.feature_name(artifact), want["feature"].as_str().unwrap(), "{artifact}");
        assert_eq!(topology.feature_group(artifact), want["group"].as_str().unwrap(), "{artifact}");
        assert_eq!(
            topology.disabled_on(artifact, Platform::Windows, &none),
            want["disabled_windows"] == true,
            "{artifact}"
        );
        assert_eq!(
            topology.disabled_on(artifact, Platform::Linux, &none),
            want["disabled_linux"] == true,
            "{artifact}"
        );
    }
    // A flag lifts a conditional disable.
    let flags = BTreeSet::from(["HSA_WINDOWS_SHARED_RUNTIME".to_owned()]);
    assert!(topology.disabled_on("core-runtime", Platform::Windows, &none));
    assert!(!topology.disabled_on("core-runtime", Platform::Windows, &flags));
    // Build order: every stage after the stages producing what its groups depend on.
    let order = topology.build_order();
    assert_eq!(order.len(), 11);
    let position = |s: &str| order.iter().position(|o| o == s).unwrap();
    for (name, stage) in &topology.build_stages {
        for group in &stage.artifact_groups {
            for dep in &topology.artifact_groups[group].artifact_group_deps {
                for (other, other_stage) in &topology.build_stages {
                    if other != name && other_stage.artifact_groups.contains(dep) {
                        assert!(position(other) < position(name), "{other} before {name}");
                    }
                }
            }
        }
    }
    assert_eq!(topology.inbound("nope").unwrap_err(), topology.unknown_stage("nope"));
}

fn problems(toml: &str) -> String {
    match Topology::parse(toml) {
        Err(TopologyError::Invalid(p)) => p.join("\n"),
        Err(other) => other.to_string(),
        Ok(_) => "valid".into(),
    }
}

const BASE: &str = r#"
[metadata]
version = "2.0"
[source_sets.core]
submodules = ["rocm-systems"]
[build_stages.foundation]
artifact_groups = ["base"]
[build_stages.math]
artifact_groups = ["math"]
type = "per-arch"
[artifact_groups.base]
source_sets = ["core"]
[artifact_groups.math]
type = "per-arch"
artifact_group_deps = ["base"]
[artifacts.sysdeps]
artifact_group = "base"
[artifacts.runtime]
artifact_group = "base"
artifact_deps = ["sysdeps"]
[artifacts.blas]
artifact_group = "math"
type = "target-specific"
artifact_deps = ["runtime"]
[artifacts.fft]
artifact_group = "math"
type = "target-specific"
artifact_deps = ["blas"]
"#;

#[test]
fn small_topologies_answer_inbound_and_produced() {
    let t = Topology::parse(BASE).unwrap();
    assert_eq!(t.produced("math").unwrap(), BTreeSet::from(["blas".into(), "fft".into()]));
    assert_eq!(t.inbound("math").unwrap(), BTreeSet::from(["runtime".into(), "sysdeps".into()]));
    assert_eq!(t.inbound("foundation").unwrap(), BTreeSet::new());
    assert_eq!(t.build_order(), ["foundation", "math"]);
    assert_eq!(t.feature_name("sysdeps"), "SYSDEPS");
    assert_eq!(t.feature_group("blas"), "MATH");
}

#[test]
fn every_problem_names_its_table_and_key() {
    let cases = [
        (BASE.replace("version = \"2.0\"", "version = \"1.0\""), "metadata.version"),
        (BASE.replace("[artifacts.fft]", "[artifacts.Bad_Name]"), "artifacts.Bad_Name: names are lowercase"),
        (
            BASE.replace("artifact_deps = [\"blas\"]", "artifact_deps = [\"nope\"]"),
            "artifacts.fft.artifact_deps: unknown artifact \"nope\"",
        ),
        (
            BASE.replace("artifact_groups = [\"math\"]", "artifact_groups = [\"nope\"]"),
            "build_stages.math.artifact_groups: unknown artifact group",
        ),
        (
            BASE.replace("source_sets = [\"core\"]", "source_sets = [\"nope\"]"),
            "artifact_groups.base.source_sets: unknown source set",
        ),
        (BASE.replace("artifact_deps = [\"sysdeps\"]", "artifact_deps = [\"fft\"]"), "artifacts: dependency cycle"),
        (
            BASE.replace("[artifact_groups.base]", "[artifact_groups.base]\nartifact_group_deps = [\"math\"]"),
            "artifact_groups: dependency cycle base -> math -> base",
        ),
        (
            format!("{BASE}\n[source_sets.other]\nsubmodules = [\"rocm-systems\"]\n"),
            "source_sets.other.submodules: \"rocm-systems\" is also in source_sets.core",
        ),
        (
            BASE.replace("[artifacts.fft]", "[artifacts.fft]\nfeature_name = \"fft\""),
            "artifacts.fft.feature_name: \"fft\" is not UPPER_CASE",
        ),
        (
            BASE.replace("[artifacts.fft]", "[artifacts.fft]\nfeature_name = \"BLAS\""),
            "artifacts.fft.feature_name: BLAS is also artifacts.blas's",
        ),
    ];
    for (toml, want) in cases {
        let got = problems(&toml);
        assert!(got.contains(want), "want {want:?}, got:\n{got}");
    }
    // Unknown keys and enum values are refused while parsing, naming the key.
    let parse = [
        (
            BASE.replace("type = \"per-arch\"\n[artifact_groups.base]", "type = \"per-gpu\"\n[artifact_groups.base]"),
            "per-gpu",
        ),
        (BASE.replace("[artifacts.fft]", "[artifacts.fft]\nplatfrom = \"linux\""), "platfrom"),
        (BASE.replace("[artifacts.fft]", "[artifacts.fft]\ndisable_processors = [\"sparc\"]"), "sparc"),
        (BASE.replace("[artifacts.fft]", "[artifacts.fft]\ndisable_platforms = [\"macos\"]"), "macos"),
    ];
    for (toml, want) in parse {
        let got = problems(&toml);
        assert!(got.starts_with("BUILD_TOPOLOGY.toml: ") && got.contains(want), "want {want:?}, got:\n{got}");
    }
}

/// A header every small topology below shares.
const HEADER: &str = "[metadata]\nversion = \"2.0\"\n";

fn topo(body: &str) -> Topology {
    Topology::parse(&format!("{HEADER}{body}")).unwrap()
}

fn names(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn an_empty_topology_has_no_stages() {
    let t = topo("");
    assert!(t.build_order().is_empty());
    assert_eq!(t.produced("any").unwrap_err(), t.unknown_stage("any"));
}

#[test]
fn a_diamond_is_fetched_once() {
    // a -> b, c -> d: the second stage fetches b, c and d, each once.
    let t = topo(
        r#"
[build_stages.stage1]
artifact_groups = ["group1"]
[build_stages.stage2]
artifact_groups = ["group2"]
[artifact_groups.group1]
[artifact_groups.group2]
artifact_group_deps = ["group1"]
[artifacts.d]
artifact_group = "group1"
[artifacts.b]
artifact_group = "group1"
artifact_deps = ["d"]
[artifacts.c]
artifact_group = "group1"
artifact_deps = ["d"]
[artifacts.a]
artifact_group = "group2"
artifact_deps = ["b", "c"]
"#,
    );
    assert_eq!(t.inbound("stage2").unwrap(), names(&["b", "c", "d"]));
    assert_eq!(t.produced("stage2").unwrap(), names(&["a"]));
    assert_eq!(t.build_order(), ["stage1", "stage2"]);
}

#[test]
fn group_dependencies_bring_their_artifacts_dependencies() {
    let t = topo(
        r#"
[build_stages.producer]
artifact_groups = ["base"]
[build_stages.consumer]
artifact_groups = ["leaf"]
[artifact_groups.base]
[artifact_groups.leaf]
artifact_group_deps = ["base"]
[artifacts.toolchain-runtime]
artifact_group = "base"
artifact_deps = ["toolchain-frontend"]
[artifacts.toolchain-frontend]
artifact_group = "base"
artifact_deps = ["toolchain-base"]
[artifacts.toolchain-base]
artifact_group = "base"
[artifacts.leaf-artifact]
artifact_group = "leaf"
"#,
    );
    assert_eq!(t.inbound("consumer").unwrap(), names(&["toolchain-base", "toolchain-frontend", "toolchain-runtime"]));
}

#[test]
fn a_long_chain_resolves_in_order() {
    let t = topo(
        r#"
[build_stages.foundation]
artifact_groups = ["base"]
[build_stages.compiler]
artifact_groups = ["llvm"]
[build_stages.runtime]
artifact_groups = ["hip"]
[build_stages.libraries]
artifact_groups = ["math"]
[artifact_groups.base]
[artifact_groups.llvm]
artifact_group_deps = ["base"]
[artifact_groups.hip]
artifact_group_deps = ["base", "llvm"]
[artifact_groups.math]
artifact_group_deps = ["hip"]
[artifacts.base-artifact]
artifact_group = "base"
[artifacts.llvm-artifact]
artifact_group = "llvm"
artifact_deps = ["base-artifact"]
[artifacts.hip-artifact]
artifact_group = "hip"
artifact_deps = ["base-artifact", "llvm-artifact"]
[artifacts.math-artifact]
artifact_group = "math"
artifact_deps = ["hip-artifact"]
"#,
    );
    assert_eq!(t.inbound("libraries").unwrap(), names(&["base-artifact", "hip-artifact", "llvm-artifact"]));
    assert!(t.inbound("foundation").unwrap().is_empty());
    assert_eq!(t.build_order(), ["foundation", "compiler", "runtime", "libraries"]);
}

#[test]
fn platform_disables_can_be_lifted_by_a_flag_and_processors_disable_too() {
    use crate::configure::{ConfigureOptions, stage_features};
    let t = topo(
        r#"
[build_stages.all]
artifact_groups = ["g"]
[artifact_groups.g]
[artifacts.always]
artifact_group = "g"
[artifacts.linux-only]
artifact_group = "g"
disable_platforms = ["windows"]
[artifacts.guarded]
artifact_group = "g"
disable_platforms_if_flags_not_set = { windows = "ENABLE_GUARDED" }
[artifacts.no-arm]
artifact_group = "g"
disable_processors = ["aarch64"]
"#,
    );
    let none = BTreeSet::new();
    let flag = names(&["ENABLE_GUARDED"]);
    assert!(
        t.disabled_on("linux-only", Platform::Windows, &none) && !t.disabled_on("linux-only", Platform::Linux, &none)
    );
    assert!(t.disabled_on("guarded", Platform::Windows, &none));
    assert!(!t.disabled_on("guarded", Platform::Windows, &flag) && !t.disabled_on("guarded", Platform::Linux, &none));
    assert!(
        t.disabled_on_processor("no-arm", Processor::Aarch64) && !t.disabled_on_processor("no-arm", Processor::X86_64)
    );

    let windows = ConfigureOptions { platform: Some(Platform::Windows), ..ConfigureOptions::default() };
    assert_eq!(stage_features(&t, "all", &windows).unwrap(), names(&["ALWAYS", "NO_ARM"]));
    let lifted = ConfigureOptions { flags: flag, ..windows };
    assert_eq!(stage_features(&t, "all", &lifted).unwrap(), names(&["ALWAYS", "GUARDED", "NO_ARM"]));
    let linux = ConfigureOptions { platform: Some(Platform::Linux), ..ConfigureOptions::default() };
    assert_eq!(stage_features(&t, "all", &linux).unwrap(), names(&["ALWAYS", "GUARDED", "LINUX_ONLY", "NO_ARM"]));
}

#[test]
fn stage_deps_follow_inbound_artifacts() {
    let t = Topology::parse(include_str!("../data/BUILD_TOPOLOGY.toml")).unwrap();
    assert!(t.stage_deps("compiler-runtime").unwrap().is_empty());
    let math = t.stage_deps("math-libs").unwrap();
    assert!(math.contains("compiler-runtime"), "{math:?}");
    assert!(!math.contains("math-libs"));
    for stage in t.build_order() {
        let position = |s: &str| t.build_order().iter().position(|x| x == s).unwrap();
        for dep in t.stage_deps(&stage).unwrap() {
            assert!(position(&dep) < position(&stage), "{dep} before {stage}");
        }
    }
    assert!(t.stage_deps("nope").is_err());
}

#[test]
fn pipeline_jobs_fan_out_per_family_and_wait_only_for_their_inputs() {
    let t = Topology::parse(include_str!("../data/BUILD_TOPOLOGY.toml")).unwrap();
    let families = vec!["gfx94X-dcgpu".to_owned(), "gfx110X-all".to_owned()];
    let jobs = t.build_jobs(&families).unwrap();
    let find = |stage: &str, family: Option<&str>| {
        jobs.iter().position(|j| j.stage == stage && j.family.as_deref() == family).unwrap()
    };
    let math_a = find("math-libs", Some("gfx94X-dcgpu"));
    let math_b = find("math-libs", Some("gfx110X-all"));
    let compiler = find("compiler-runtime", None);
    assert!(jobs[math_a].deps.contains(&compiler));
    assert!(!jobs[math_a].deps.contains(&math_b), "families do not wait for each other");
    // A per-arch stage that fetches math-libs waits for its own family's math-libs only.
    for (i, job) in jobs.iter().enumerate() {
        for &d in &job.deps {
            assert!(d < i, "dependencies come first");
            if let (Some(f), Some(g)) = (&job.family, &jobs[d].family) {
                assert_eq!(f, g, "{} waits for another family's {}", job.stage, jobs[d].stage);
            }
        }
    }
    let per_family = jobs.iter().filter(|j| j.family.is_some()).count();
    let per_arch_stages = t.build_stages.values().filter(|s| s.kind == StageType::PerArch).count();
    assert_eq!(per_family, 2 * per_arch_stages);
    // Two generic stages with no path between them are independent.
    let roots: Vec<&str> = jobs.iter().filter(|j| j.deps.is_empty()).map(|j| j.stage.as_str()).collect();
    assert!(roots.contains(&"compiler-runtime"), "{roots:?}");
}

#[test]
fn lists_split_as_therock_writes_them() {
    assert_eq!(
        split_list("gfx94X-dcgpu, gfx110X-all;gfx120X-all\tgfx1151  "),
        ["gfx94X-dcgpu", "gfx110X-all", "gfx120X-all", "gfx1151"]
    );
    assert!(split_list(" ,; ").is_empty());
}
