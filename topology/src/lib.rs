//! TheRock's `BUILD_TOPOLOGY.toml` (spec §1): source sets, build stages, artifact groups and
//! artifacts. Parsing rejects unknown keys and bad enum values; [`Topology::validate`] lists
//! every naming, reference, cycle and sharing problem with the table and key it is in; the
//! queries answer what a stage produces and what it must fetch first. Pure: callers read the
//! file.
//!
//! Beside the file: [`configure`] (a stage's CMake arguments as `configure_stage.py` prints
//! them), [`families`] (GPU family → gfx targets), [`platform`] (Windows rules), and
//! [`split_list`]: TheRock's lists of families, targets, artifacts or stages as its tools take
//! them (items separated by `,`, `;`, spaces or tabs, empty ones dropped), read so by the
//! command line and for the stage timings' names.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

pub mod configure;
pub mod families;
pub mod platform;

/// A list as TheRock's tools take them on the command line and in workflow inputs (families,
/// targets, artifacts, stages): items separated by `,`, `;`, spaces or tabs, empty items
/// dropped.
pub fn split_list(raw: &str) -> Vec<String> {
    raw.split([',', ';', ' ', '\t']).map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub version: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExternalGitSource {
    pub name: String,
    pub origin: String,
    pub commit: String,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SourceSet {
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub submodules: Vec<String>,
    #[serde(default)]
    pub external_git_sources: Vec<ExternalGitSource>,
    #[serde(default)]
    pub disable_platforms: Vec<Platform>,
    #[serde(default)]
    pub path_prefixes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum StageType {
    #[default]
    Generic,
    PerArch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ArtifactType {
    #[default]
    TargetNeutral,
    TargetSpecific,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Linux,
    Windows,
}

impl Platform {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Linux => "linux",
            Self::Windows => "windows",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Processor {
    #[serde(rename = "x86_64")]
    X86_64,
    Aarch64,
    Ppc64le,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct BuildStage {
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub artifact_groups: Vec<String>,
    #[serde(default, rename = "type")]
    pub kind: StageType,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ArtifactGroup {
    #[serde(default)]
    pub description: String,
    #[serde(default, rename = "type")]
    pub kind: StageType,
    #[serde(default)]
    pub artifact_group_deps: Vec<String>,
    #[serde(default)]
    pub source_sets: Vec<String>,
    #[serde(default)]
    pub disable_platforms: Vec<Platform>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    pub artifact_group: String,
    #[serde(default, rename = "type")]
    pub kind: ArtifactType,
    #[serde(default)]
    pub artifact_deps: Vec<String>,
    #[serde(default)]
    pub feature_name: Option<String>,
    #[serde(default)]
    pub feature_group: Option<String>,
    #[serde(default)]
    pub platform: Option<Platform>,
    #[serde(default)]
    pub disable_platforms: Vec<Platform>,
    #[serde(default)]
    pub disable_platforms_if_flags_not_set: BTreeMap<Platform, String>,
    #[serde(default)]
    pub disable_processors: Vec<Processor>,
    #[serde(default)]
    pub python_requires: Vec<String>,
    #[serde(default)]
    pub split_databases: Vec<String>,
    #[serde(default)]
    pub test_artifacts: Vec<String>,
}

/// One build of a pipeline: a stage, for one family when it is per-arch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildJob {
    pub stage: String,
    pub family: Option<String>,
    /// Indices (into the job list) of the builds this one fetches from.
    pub deps: Vec<usize>,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub metadata: Metadata,
    #[serde(default)]
    pub source_sets: BTreeMap<String, SourceSet>,
    #[serde(default)]
    pub build_stages: BTreeMap<String, BuildStage>,
    #[serde(default)]
    pub artifact_groups: BTreeMap<String, ArtifactGroup>,
    #[serde(default)]
    pub artifacts: BTreeMap<String, Artifact>,
    /// Build stage names in the order the file lists them (what "all stages" means to
    /// TheRock's CI tools).
    #[serde(skip)]
    pub stage_file_order: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// The TOML itself, an unknown key or a bad enum value (toml names the line and key).
    #[error("BUILD_TOPOLOGY.toml: {0}")]
    Parse(String),
    /// Every problem `validate` found, one per line, each naming its table and key.
    #[error("BUILD_TOPOLOGY.toml is not valid:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
    #[error("unknown build stage {stage:?} (the topology has: {known})")]
    UnknownStage { stage: String, known: String },
    #[error("unknown GPU {0}")]
    UnknownFamilies(String),
    #[error("{0}: {1}")]
    Targets(String, String),
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.split('-').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()))
}

fn is_feature(s: &str) -> bool {
    !s.is_empty()
        && s.split('_').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit()))
}

/// Upper case with `-` as `_`: the default feature name of an artifact or group.
fn feature_of(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

/// The first cycle in a graph given as node → successors, as `a -> b -> a`.
fn find_cycle<'a>(edges: &BTreeMap<&'a str, Vec<&'a str>>) -> Option<String> {
    fn visit<'a>(
        node: &'a str,
        edges: &BTreeMap<&'a str, Vec<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<String> {
        if let Some(at) = stack.iter().position(|n| *n == node) {
            let mut path = stack[at..].to_vec();
            path.push(node);
            return Some(path.join(" -> "));
        }
        if !done.insert(node) {
            return None;
        }
        stack.push(node);
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

impl Topology {
    /// Parse and validate.
    pub fn parse(text: &str) -> Result<Self, TopologyError> {
        let mut topology: Self =
            toml::from_str(text).map_err(|e| TopologyError::Parse(e.to_string().trim().to_owned()))?;
        topology.stage_file_order = stage_file_order(text, &topology.build_stages);
        let problems = topology.validate();
        if problems.is_empty() { Ok(topology) } else { Err(TopologyError::Invalid(problems)) }
    }

    /// The error for a stage name the topology does not have, listing the ones it has.
    pub fn unknown_stage(&self, stage: &str) -> TopologyError {
        let known: Vec<&str> = self.stage_file_order.iter().map(String::as_str).collect();
        let known = if known.is_empty() { self.build_stages.keys().map(String::as_str).collect() } else { known };
        TopologyError::UnknownStage { stage: stage.to_owned(), known: known.join(", ") }
    }

    /// Every problem, each naming its table and key.
    #[must_use = "an unchecked topology may be invalid"]
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.metadata.version != "2.0" {
            problems.push(format!("metadata.version: {:?} is not a supported version (2.0)", self.metadata.version));
        }
        self.check_names(&mut problems);
        self.check_group_references(&mut problems);
        self.check_artifacts(&mut problems);
        self.check_feature_names_unique(&mut problems);
        self.check_cycles(&mut problems);
        self.check_source_sets(&mut problems);
        problems
    }

    /// Every table's names are lowercase words joined by `-`.
    fn check_names(&self, problems: &mut Vec<String>) {
        let tables: [(&str, Vec<&String>); 4] = [
            ("source_sets", self.source_sets.keys().collect()),
            ("build_stages", self.build_stages.keys().collect()),
            ("artifact_groups", self.artifact_groups.keys().collect()),
            ("artifacts", self.artifacts.keys().collect()),
        ];
        for (table, names) in &tables {
            for name in names {
                if !is_name(name) {
                    problems.push(format!("{table}.{name}: names are lowercase words joined by '-'"));
                }
            }
        }
    }

    /// Stages and artifact groups name groups and source sets that exist.
    fn check_group_references(&self, problems: &mut Vec<String>) {
        for (name, stage) in &self.build_stages {
            for group in &stage.artifact_groups {
                if !self.artifact_groups.contains_key(group) {
                    problems.push(format!("build_stages.{name}.artifact_groups: unknown artifact group {group:?}"));
                }
            }
        }
        for (name, group) in &self.artifact_groups {
            for dep in &group.artifact_group_deps {
                if !self.artifact_groups.contains_key(dep) {
                    problems
                        .push(format!("artifact_groups.{name}.artifact_group_deps: unknown artifact group {dep:?}"));
                }
            }
            for set in &group.source_sets {
                if !self.source_sets.contains_key(set) {
                    problems.push(format!("artifact_groups.{name}.source_sets: unknown source set {set:?}"));
                }
            }
        }
    }

    /// Artifacts name groups and artifacts that exist, and features and flags spelled as such.
    fn check_artifacts(&self, problems: &mut Vec<String>) {
        for (name, artifact) in &self.artifacts {
            if !self.artifact_groups.contains_key(&artifact.artifact_group) {
                problems.push(format!(
                    "artifacts.{name}.artifact_group: unknown artifact group {:?}",
                    artifact.artifact_group
                ));
            }
            for (key, list) in
                [("artifact_deps", &artifact.artifact_deps), ("test_artifacts", &artifact.test_artifacts)]
            {
                for dep in list {
                    if !self.artifacts.contains_key(dep) {
                        problems.push(format!("artifacts.{name}.{key}: unknown artifact {dep:?}"));
                    }
                }
            }
            for (key, value) in [("feature_name", &artifact.feature_name), ("feature_group", &artifact.feature_group)] {
                if let Some(v) = value
                    && !is_feature(v)
                {
                    problems.push(format!("artifacts.{name}.{key}: {v:?} is not UPPER_CASE_WITH_UNDERSCORES"));
                }
            }
            for (platform, flag) in &artifact.disable_platforms_if_flags_not_set {
                if !is_feature(flag) {
                    problems.push(format!(
                        "artifacts.{name}.disable_platforms_if_flags_not_set.{}: {flag:?} is not a flag name",
                        platform.as_str()
                    ));
                }
            }
        }
    }

    /// Two artifacts with one feature name would share a `THEROCK_ENABLE_` variable.
    fn check_feature_names_unique(&self, problems: &mut Vec<String>) {
        let mut features: BTreeMap<String, &str> = BTreeMap::new();
        for name in self.artifacts.keys() {
            let feature = self.feature_name(name);
            if let Some(other) = features.insert(feature.clone(), name) {
                problems.push(format!("artifacts.{name}.feature_name: {feature} is also artifacts.{other}'s"));
            }
        }
    }

    /// Neither artifact groups nor artifacts depend on themselves through a cycle.
    fn check_cycles(&self, problems: &mut Vec<String>) {
        let group_edges: BTreeMap<&str, Vec<&str>> = self
            .artifact_groups
            .iter()
            .map(|(n, g)| (n.as_str(), g.artifact_group_deps.iter().map(String::as_str).collect()))
            .collect();
        if let Some(cycle) = find_cycle(&group_edges) {
            problems.push(format!("artifact_groups: dependency cycle {cycle}"));
        }
        let artifact_edges: BTreeMap<&str, Vec<&str>> = self
            .artifacts
            .iter()
            .map(|(n, a)| (n.as_str(), a.artifact_deps.iter().map(String::as_str).collect()))
            .collect();
        if let Some(cycle) = find_cycle(&artifact_edges) {
            problems.push(format!("artifacts: dependency cycle {cycle}"));
        }
    }

    /// A submodule, external source path or path prefix belongs to one source set, and
    /// external sources lie under `optional-sources/`.
    fn check_source_sets(&self, problems: &mut Vec<String>) {
        let mut owners: BTreeMap<(&str, &str), &str> = BTreeMap::new();
        for (name, set) in &self.source_sets {
            let paths = set
                .submodules
                .iter()
                .map(|s| ("submodules", s.as_str()))
                .chain(set.external_git_sources.iter().map(|e| ("external_git_sources", e.path.as_str())))
                .chain(set.path_prefixes.iter().map(|p| ("path_prefixes", p.as_str())));
            for (key, path) in paths {
                let kind = if key == "submodules" { "submodule" } else { "path" };
                if let Some(other) = owners.insert((kind, path), name) {
                    problems.push(format!("source_sets.{name}.{key}: {path:?} is also in source_sets.{other}"));
                }
            }
            for source in &set.external_git_sources {
                if !source.path.starts_with("optional-sources/") {
                    problems.push(format!(
                        "source_sets.{name}.external_git_sources: path {:?} must be under optional-sources/",
                        source.path
                    ));
                }
            }
        }
    }

    /// `feature_name`, or the artifact's name in upper case with `_`.
    pub fn feature_name(&self, artifact: &str) -> String {
        self.artifacts.get(artifact).and_then(|a| a.feature_name.clone()).unwrap_or_else(|| feature_of(artifact))
    }

    /// `feature_group`, or the artifact group's name in upper case with `_`.
    pub fn feature_group(&self, artifact: &str) -> String {
        match self.artifacts.get(artifact) {
            Some(a) => a.feature_group.clone().unwrap_or_else(|| feature_of(&a.artifact_group)),
            None => String::new(),
        }
    }

    /// Whether `artifact` is disabled on `platform` given the enabled `flags`.
    pub fn disabled_on(&self, artifact: &str, platform: Platform, flags: &BTreeSet<String>) -> bool {
        let Some(a) = self.artifacts.get(artifact) else { return false };
        a.disable_platforms.contains(&platform)
            || a.disable_platforms_if_flags_not_set.get(&platform).is_some_and(|flag| !flags.contains(flag))
    }

    pub fn disabled_on_processor(&self, artifact: &str, processor: Processor) -> bool {
        self.artifacts.get(artifact).is_some_and(|a| a.disable_processors.contains(&processor))
    }

    fn stage(&self, stage: &str) -> Result<&BuildStage, TopologyError> {
        self.build_stages.get(stage).ok_or_else(|| self.unknown_stage(stage))
    }

    /// Artifacts of every group the stage builds.
    pub fn produced(&self, stage: &str) -> Result<BTreeSet<String>, TopologyError> {
        let groups: BTreeSet<&String> = self.stage(stage)?.artifact_groups.iter().collect();
        Ok(self.artifacts.iter().filter(|(_, a)| groups.contains(&a.artifact_group)).map(|(n, _)| n.clone()).collect())
    }

    fn add_with_deps(&self, artifact: &str, into: &mut BTreeSet<String>) {
        if !into.insert(artifact.to_owned()) {
            return;
        }
        for dep in self.artifacts.get(artifact).map(|a| a.artifact_deps.as_slice()).unwrap_or_default() {
            self.add_with_deps(dep, into);
        }
    }

    /// What the stage must fetch before it builds: every artifact of each group its groups
    /// depend on, and the artifact dependencies of those and of its own artifacts,
    /// transitively; minus what it produces. (Group dependencies are not transitive at the
    /// group level, only through artifact dependencies.)
    pub fn inbound(&self, stage: &str) -> Result<BTreeSet<String>, TopologyError> {
        let groups: BTreeSet<&String> = self.stage(stage)?.artifact_groups.iter().collect();
        let mut inbound = BTreeSet::new();
        for group in &groups {
            for dep_group in
                self.artifact_groups.get(*group).map(|g| g.artifact_group_deps.as_slice()).unwrap_or_default()
            {
                for (name, _) in self.artifacts.iter().filter(|(_, a)| &a.artifact_group == dep_group) {
                    self.add_with_deps(name, &mut inbound);
                }
            }
        }
        for (_, artifact) in self.artifacts.iter().filter(|(_, a)| groups.contains(&a.artifact_group)) {
            for dep in &artifact.artifact_deps {
                self.add_with_deps(dep, &mut inbound);
            }
        }
        let produced = self.produced(stage)?;
        inbound.retain(|a| !produced.contains(a));
        Ok(inbound)
    }

    /// The other stages whose artifacts `stage` fetches (directly or through artifact deps):
    /// what must be built before it.
    pub fn stage_deps(&self, stage: &str) -> Result<BTreeSet<String>, TopologyError> {
        let inbound = self.inbound(stage)?;
        let mut deps = BTreeSet::new();
        for (name, other) in &self.build_stages {
            if name == stage {
                continue;
            }
            let groups: BTreeSet<&String> = other.artifact_groups.iter().collect();
            if inbound.iter().any(|a| self.artifacts.get(a).is_some_and(|a| groups.contains(&a.artifact_group))) {
                deps.insert(name.clone());
            }
        }
        Ok(deps)
    }

    /// The builds of a whole pipeline, in build order: one per generic stage and one per
    /// (per-arch stage, family), each with the indices of the builds it fetches from (the same
    /// family's for a per-arch dependency of a per-arch stage, every family's for a generic
    /// stage). Builds with no path between them can run side by side.
    pub fn build_jobs(&self, families: &[String]) -> Result<Vec<BuildJob>, TopologyError> {
        let mut jobs: Vec<BuildJob> = Vec::new();
        for stage in self.build_order() {
            let per_arch = self.build_stages[&stage].kind == StageType::PerArch;
            let stage_families: Vec<Option<&String>> =
                if per_arch { families.iter().map(Some).collect() } else { vec![None] };
            let deps_of_stage = self.stage_deps(&stage)?;
            for family in stage_families {
                let deps = jobs
                    .iter()
                    .enumerate()
                    .filter(|(_, j)| {
                        deps_of_stage.contains(&j.stage)
                            && (j.family.is_none() || family.is_none() || j.family.as_ref() == family)
                    })
                    .map(|(i, _)| i)
                    .collect();
                jobs.push(BuildJob { stage: stage.clone(), family: family.cloned(), deps });
            }
        }
        Ok(jobs)
    }

    /// Stages after the stages producing the groups theirs depend on; ties by name.
    pub fn build_order(&self) -> Vec<String> {
        fn visit<'a>(
            stage: &'a str,
            topology: &'a Topology,
            producers: &BTreeMap<&str, Vec<&'a str>>,
            done: &mut BTreeSet<&'a str>,
            order: &mut Vec<String>,
        ) {
            if !done.insert(stage) {
                return;
            }
            for group in &topology.build_stages[stage].artifact_groups {
                for dep in
                    topology.artifact_groups.get(group).map(|g| g.artifact_group_deps.as_slice()).unwrap_or_default()
                {
                    for producer in producers.get(dep.as_str()).into_iter().flatten() {
                        visit(producer, topology, producers, done, order);
                    }
                }
            }
            order.push(stage.to_owned());
        }
        let mut producers: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, stage) in &self.build_stages {
            for group in &stage.artifact_groups {
                producers.entry(group.as_str()).or_default().push(name);
            }
        }
        let mut order = Vec::new();
        let mut done = BTreeSet::new();
        for stage in self.build_stages.keys() {
            visit(stage, self, &producers, &mut done, &mut order);
        }
        order
    }
}

#[cfg(test)]
mod tests;

/// `[build_stages.NAME]` headers in file order; stages written another way (inline or dotted
/// keys) follow in name order.
fn stage_file_order(text: &str, stages: &BTreeMap<String, BuildStage>) -> Vec<String> {
    let mut order: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(name) = line.strip_prefix("[build_stages.").and_then(|r| r.split(']').next()) else { continue };
        let name = name.trim().trim_matches('"');
        if stages.contains_key(name) && !order.iter().any(|n| n == name) {
            order.push(name.to_owned());
        }
    }
    for name in stages.keys() {
        if !order.contains(name) {
            order.push(name.clone());
        }
    }
    order
}
