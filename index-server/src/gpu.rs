//! "Which GPU do I have?": `/-/gpu/{run}/` (HTML) and `/-/gpu/{run}.json` map a GPU's
//! marketing name, PCI device id or gfx target (`?q=`, or `?name=` / `?pci=` / `?gfx=`) to its
//! LLVM gfx target, TheRock's families for it (Quarry's families table,
//! `quarry_topology::families::AmdgpuTargets`) and the exact pip / uv / apt / dnf lines that install that
//! run's packages for it. `/-/gpu/{channel}/` does the same for a channel `quarry promote` fills
//! (its roots from the layout, `ChannelRoots`): the pip line is the `--index-url` of the
//! channel's root for the target's most specific family that it holds. The names table is `data/gpus.tsv` (its sources are named in it).
//! A GPU that is not known gets a clear answer and how to find out (`rocminfo`,
//! `offload-arch`, `lspci -nn`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use quarry_index::{RepoRoot, RepoState};
use quarry_layout::config::ChannelRoots;
use quarry_layout::{RunSegment, UploadKind};
use quarry_store::ListOptions;
use serde::Serialize;

use crate::browse::{base_url, shell_line, url_of};
use crate::{AppError, AppState, ServedAt};

const TABLE: &str = include_str!("../data/gpus.tsv");

/// How to find out a GPU's gfx target or PCI id on the machine itself.
pub(crate) const HOW_TO_FIND_OUT: [&str; 3] = [
    "rocminfo | grep -m1 -o 'gfx[0-9a-f]*'",
    "/opt/rocm/llvm/bin/offload-arch",
    "lspci -nn | grep -Ei 'vga|display|3d|processing accelerators'",
];

/// One row of the names table: a PCI device id, its gfx target and its marketing names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GpuRow {
    pub(crate) pci: String,
    pub(crate) gfx: String,
    pub(crate) names: Vec<String>,
}

/// The names table, parsed once (checked by a unit test).
pub(crate) fn table() -> &'static [GpuRow] {
    static ROWS: OnceLock<Vec<GpuRow>> = OnceLock::new();
    ROWS.get_or_init(|| parse_table(TABLE))
}

fn parse_table(text: &str) -> Vec<GpuRow> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let mut cols = l.split('\t');
            let (pci, gfx, names) = (cols.next()?, cols.next()?, cols.next()?);
            Some(GpuRow {
                pci: pci.to_ascii_lowercase(),
                gfx: gfx.to_owned(),
                names: names.split('|').map(str::to_owned).collect(),
            })
        })
        .collect()
}

/// Lowercase letters and digits only, without the words every name shares.
fn normalize(name: &str) -> String {
    let lower = name.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty() && !matches!(*w, "amd" | "radeon" | "instinct" | "graphics" | "gpu"))
        .collect();
    words.concat()
}

/// The gfx targets a query names: a gfx target itself, a PCI device id (`744c`, `0x744c`,
/// `1002:744c`) or a marketing name (exact after normalizing, else every name containing it).
pub(crate) fn targets_for(query: &str) -> Vec<String> {
    let q = query.trim().to_ascii_lowercase();
    if q.is_empty() {
        return Vec::new();
    }
    let families = quarry_topology::families::AmdgpuTargets::builtin();
    if q.starts_with("gfx") {
        let known = families.targets.iter().any(|t| t.target == q) || table().iter().any(|r| r.gfx == q);
        return if known { vec![q] } else { Vec::new() };
    }
    let pci = q.trim_start_matches("1002:").trim_start_matches("0x");
    if pci.len() == 4 && pci.bytes().all(|b| b.is_ascii_hexdigit()) {
        return dedup(table().iter().filter(|r| r.pci == pci).map(|r| r.gfx.clone()));
    }
    let wanted = normalize(&q);
    if wanted.is_empty() {
        return Vec::new();
    }
    let exact = dedup(table().iter().filter(|r| r.names.iter().any(|n| normalize(n) == wanted)).map(|r| r.gfx.clone()));
    if !exact.is_empty() {
        return exact;
    }
    dedup(table().iter().filter(|r| r.names.iter().any(|n| normalize(n).contains(&wanted))).map(|r| r.gfx.clone()))
}

fn dedup(items: impl Iterator<Item = String>) -> Vec<String> {
    let mut seen = BTreeSet::new();
    items.filter(|i| seen.insert(i.clone())).collect()
}

/// The install lines of one run for one target.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct InstallLines {
    pub(crate) pip: Option<String>,
    pub(crate) uv: Option<String>,
    pub(crate) apt: Option<String>,
    pub(crate) dnf: Option<String>,
    /// When the run has variant wheels (PEP 825) labelled with the target: uv's variant-aware
    /// install of their projects, which picks the wheel for the machine's GPU itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) uv_variants: Option<String>,
    /// Projects of the run that are not TheRock's and have no GPU-specific wheel: they install
    /// on every GPU (`pip`/`uv` install them when the run has no ROCm packages for the target).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) generic: Vec<String>,
}

impl InstallLines {
    /// Whether anything installs on the target.
    pub(crate) fn is_empty(&self) -> bool {
        self.pip.is_none() && self.uv_variants.is_none() && self.apt.is_none() && self.dnf.is_none()
    }
}

/// What the page and the JSON say about one gfx target.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct GpuAnswer {
    pub(crate) gfx: String,
    /// TheRock's product line for the target (the families table's).
    pub(crate) product: String,
    /// The most specific TheRock family (the last the table names), e.g. `gfx94X-dcgpu`.
    pub(crate) family: String,
    /// Every family the target belongs to, the target itself first.
    pub(crate) families: Vec<String>,
    pub(crate) names: Vec<String>,
    pub(crate) pci_ids: Vec<String>,
    pub(crate) install: InstallLines,
}

/// The run's packages for targets: the pip root's project names, and the apt and dnf
/// packages' names.
#[derive(Debug, Default, Clone)]
struct RunPackages {
    pip_url: Option<String>,
    /// The pip root is a channel's: install with `--index-url {pip_url}simple/`, not
    /// `--find-links`.
    index_url: bool,
    pip_projects: BTreeSet<String>,
    /// Per variant label (a gfx target for the wheels `quarry package python --variants`
    /// builds), the projects with a wheel of that label.
    variants: BTreeMap<String, BTreeSet<String>>,
    /// Projects that are none of TheRock's distributions and have no labelled wheel.
    generic: BTreeSet<String>,
    apt: BTreeSet<String>,
    dnf: BTreeSet<String>,
}

async fn root_state(state: &AppState, prefix: &str) -> Result<Option<RepoState>, AppError> {
    let Ok(root) = RepoRoot::new(prefix, state.layout()) else { return Ok(None) };
    Ok(quarry_index::read_state(state.store.as_ref(), &root).await?)
}

async fn run_packages(state: &AppState, run: RunSegment<'_>, base: &str) -> Result<RunPackages, AppError> {
    let layout = state.layout().run();
    let mut out = RunPackages::default();
    let python = layout.root_of(run, UploadKind::Python);
    if let Some(pip) = root_state(state, &python).await? {
        out.pip_url = Some(url_of(base, &python));
        out.add_pip(&pip);
    }
    out.add_native(state, &layout.root_of(run, UploadKind::Deb), &layout.root_of(run, UploadKind::Rpm)).await?;
    Ok(out)
}

/// A channel's answers for `targets`: its apt and dnf roots read once, and per target the pip
/// root of the most specific family the channel holds (families are listed least specific
/// last, so it is tried first).
async fn channel_answers(
    state: &AppState,
    channel: &ChannelRoots<'_>,
    targets: &[String],
    base: &str,
) -> Result<Vec<GpuAnswer>, AppError> {
    let mut native = RunPackages { index_url: true, ..RunPackages::default() };
    native.add_native(state, &channel.deb(), &channel.rpm("x86_64")).await?;
    let mut answers = Vec::with_capacity(targets.len());
    for gfx in targets {
        let mut packages = native.clone();
        for family in families_of(gfx).iter().rev() {
            let root = channel.pip(Some(family));
            if let Some(pip) = root_state(state, &root).await? {
                packages.pip_url = Some(url_of(base, &root));
                packages.add_pip(&pip);
                break;
            }
        }
        answers.push(answer(gfx, &packages));
    }
    Ok(answers)
}

impl RunPackages {
    /// A pip root's project names, variant wheels by label, and generic projects.
    fn add_pip(&mut self, pip: &RepoState) {
        use quarry_packaging::therock::wheels::DistKind;
        let mut labelled = BTreeSet::new();
        let mut others = BTreeSet::new();
        for name in pip.entries.keys() {
            let Ok(dist) = name.parse::<quarry_packaging::DistFilename>() else { continue };
            let project = dist.name().as_str().to_owned();
            self.pip_projects.insert(project.clone());
            match &dist {
                quarry_packaging::DistFilename::Wheel(w) if w.variant_label.is_some() => {
                    let label = w.variant_label.clone().unwrap_or_default();
                    self.variants.entry(label).or_default().insert(project.clone());
                    labelled.insert(project);
                }
                _ if project == ROCM_PROJECT || DistKind::from_project(&project).is_some() => {}
                _ => {
                    others.insert(project);
                }
            }
        }
        self.generic.extend(others.into_iter().filter(|p| !labelled.contains(p)));
    }

    /// The package names of an apt and a dnf root.
    async fn add_native(&mut self, state: &AppState, deb: &str, rpm: &str) -> Result<(), AppError> {
        if let Some(apt) = root_state(state, deb).await? {
            self.apt = apt.entries.values().filter_map(|e| e.deb.as_ref().map(|d| d.package().to_owned())).collect();
        }
        if let Some(dnf) = root_state(state, rpm).await? {
            self.dnf = dnf.entries.values().filter_map(|e| e.rpm_info().map(|r| r.name.clone())).collect();
        }
        Ok(())
    }
}

/// TheRock's `rocm` sdist, whose extras pull the distributions for a target.
const ROCM_PROJECT: &str = "rocm";

/// The shortest package name ending in `-{gfx}`: the target's metapackage.
fn native_for<'a>(names: &'a BTreeSet<String>, gfx: &str) -> Option<&'a String> {
    let suffix = format!("-{gfx}");
    names.iter().filter(|n| n.ends_with(&suffix)).min_by_key(|n| (n.len(), n.as_str()))
}

impl RunPackages {
    fn lines(&self, gfx: &str, families: &[String]) -> InstallLines {
        let mut lines = InstallLines::default();
        if let Some(url) = &self.pip_url {
            use quarry_packaging::therock::wheels::DistKind;
            let device = DistKind::Device(gfx.to_owned()).dist_name();
            let legacy = families.iter().map(|f| DistKind::Libraries(Some(f.to_ascii_lowercase())).dist_name());
            let spec = if self.pip_projects.contains(&device) && self.pip_projects.contains(ROCM_PROJECT) {
                Some(vec![format!("{ROCM_PROJECT}[libraries,device-{gfx}]")])
            } else if let Some(legacy) = legacy.into_iter().find(|p| self.pip_projects.contains(p)) {
                Some(vec![legacy])
            } else {
                // No ROCm packages for the target: what installs on every GPU.
                (!self.generic.is_empty()).then(|| self.generic.iter().cloned().collect())
            };
            let index = format!("{url}simple/");
            if let Some(spec) = spec {
                let (flag, at) =
                    if self.index_url { ("--index-url", index.as_str()) } else { ("--find-links", url.as_str()) };
                let specs = spec.iter().map(String::as_str);
                lines.pip = Some(shell_line(
                    &["pip", "install", flag, at].into_iter().chain(specs.clone()).collect::<Vec<_>>(),
                ));
                lines.uv =
                    Some(shell_line(&["uv", "pip", "install", flag, at].into_iter().chain(specs).collect::<Vec<_>>()));
            }
            lines.generic = self.generic.iter().cloned().collect();
            if let Some(projects) = self.variants.get(gfx) {
                let install = ["uv", "pip", "install", "--preview-features", "wheel-variants", "--index-url", &index];
                let all: Vec<&str> = install.into_iter().chain(projects.iter().map(String::as_str)).collect();
                lines.uv_variants = Some(shell_line(&all));
            }
        }
        lines.apt = native_for(&self.apt, gfx).map(|p| shell_line(&["sudo", "apt-get", "install", p]));
        lines.dnf = native_for(&self.dnf, gfx).map(|p| shell_line(&["sudo", "dnf", "install", p]));
        lines
    }
}

/// Every family `gfx` belongs to, the target itself first, the most specific last.
fn families_of(gfx: &str) -> Vec<String> {
    let table_targets = quarry_topology::families::AmdgpuTargets::builtin();
    let info = table_targets.targets.iter().find(|t| t.target == gfx);
    let mut families = vec![gfx.to_owned()];
    families.extend(info.map(|t| t.families.clone()).unwrap_or_default());
    families
}

fn answer(gfx: &str, packages: &RunPackages) -> GpuAnswer {
    let table_targets = quarry_topology::families::AmdgpuTargets::builtin();
    let info = table_targets.targets.iter().find(|t| t.target == gfx);
    let families = families_of(gfx);
    let rows: Vec<&GpuRow> = table().iter().filter(|r| r.gfx == gfx).collect();
    GpuAnswer {
        gfx: gfx.to_owned(),
        product: info.map(|t| t.product.clone()).unwrap_or_default(),
        family: families.last().cloned().unwrap_or_default(),
        install: packages.lines(gfx, &families),
        families,
        names: rows.iter().flat_map(|r| r.names.iter().cloned()).collect(),
        pci_ids: rows.iter().map(|r| format!("1002:{}", r.pci)).collect(),
    }
}

/// The lookup parameters: `q`, or one of `name`, `pci`, `gfx`.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct GpuQuery {
    q: Option<String>,
    name: Option<String>,
    pci: Option<String>,
    gfx: Option<String>,
}

impl GpuQuery {
    fn text(&self) -> String {
        [&self.q, &self.name, &self.pci, &self.gfx].into_iter().flatten().next().cloned().unwrap_or_default()
    }
}

/// The JSON endpoint's body.
#[derive(Debug, Serialize)]
struct GpuJson<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    run: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<&'a str>,
    query: &'a str,
    known: bool,
    matches: &'a [GpuAnswer],
    how_to_find_out: [&'static str; 3],
}

#[derive(Template)]
#[template(path = "gpu.html")]
struct GpuPage<'a> {
    run: &'a str,
    /// `run` or `channel`.
    kind: &'a str,
    run_href: String,
    query: &'a str,
    matches: &'a [GpuAnswer],
    how_to_find_out: [&'static str; 3],
    known: Vec<(String, String, String)>,
}

/// `/-/gpu/{run}/` and `/-/gpu/{run}.json`.
pub(crate) async fn gpu_page(
    State(state): State<AppState>,
    Path(segment): Path<String>,
    Query(query): Query<GpuQuery>,
    headers: HeaderMap,
    served_at: Option<Extension<ServedAt>>,
) -> Result<Response, AppError> {
    let (run_name, json) = match segment.strip_suffix(".json") {
        Some(run) => (run.to_owned(), true),
        None => (segment.trim_end_matches('/').to_owned(), false),
    };
    let base = base_url(&state, &headers, served_at.map(|Extension(s)| s));
    let text = query.text();
    let targets = targets_for(&text);
    let (kind, matches) = match RunSegment::parse(&run_name) {
        Some(run) => {
            let packages = run_packages(&state, run, &base).await?;
            ("run", targets.iter().map(|gfx| answer(gfx, &packages)).collect::<Vec<_>>())
        }
        None => {
            if !holds_anything(&state, &run_name).await? {
                return Err(AppError::NotFound(format!("{run_name:?} is neither a run nor a channel")));
            }
            let channel = ChannelRoots::new(&run_name, state.layout());
            ("channel", channel_answers(&state, &channel, &targets, &base).await?)
        }
    };
    if json {
        let named = Some(run_name.as_str());
        let body = GpuJson {
            run: named.filter(|_| kind == "run"),
            channel: named.filter(|_| kind == "channel"),
            query: &text,
            known: !matches.is_empty(),
            matches: &matches,
            how_to_find_out: HOW_TO_FIND_OUT,
        };
        let body = serde_json::to_vec_pretty(&body).map_err(|e| AppError::Internal(format!("gpu JSON: {e}")))?;
        return Ok((StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response());
    }
    let page = GpuPage {
        run: &run_name,
        kind,
        run_href: crate::encode_path(&format!("{run_name}/")),
        query: &text,
        matches: &matches,
        how_to_find_out: HOW_TO_FIND_OUT,
        known: known_table(),
    };
    let body = page.render().map_err(|e| AppError::Internal(format!("rendering: {e}")))?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")],
        body,
    )
        .into_response())
}

/// Whether the store holds anything under `{name}/` (a channel promoted into or initialised).
async fn holds_anything(state: &AppState, name: &str) -> Result<bool, AppError> {
    let options = ListOptions { max_keys: Some(1), ..ListOptions::default() };
    let page = state.store.list(&format!("{name}/"), options).await?;
    Ok(!page.objects.is_empty() || !page.common_prefixes.is_empty())
}

/// (gfx target, family, names) for every target of the names table, in table order.
fn known_table() -> Vec<(String, String, String)> {
    let mut by_gfx: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut order = Vec::new();
    for row in table() {
        if !by_gfx.contains_key(row.gfx.as_str()) {
            order.push(row.gfx.as_str());
        }
        by_gfx.entry(&row.gfx).or_default().extend(row.names.iter().map(String::as_str));
    }
    let targets = quarry_topology::families::AmdgpuTargets::builtin();
    order
        .into_iter()
        .map(|gfx| {
            let family = targets
                .targets
                .iter()
                .find(|t| t.target == gfx)
                .and_then(|t| t.families.last().cloned())
                .unwrap_or_else(|| gfx.to_owned());
            (gfx.to_owned(), family, by_gfx[gfx].join(", "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_every_target_is_in_the_families_table() {
        let rows = table();
        assert!(rows.len() > 40, "{}", rows.len());
        let families = quarry_topology::families::AmdgpuTargets::builtin();
        for row in rows {
            assert!(families.targets.iter().any(|t| t.target == row.gfx), "{row:?} names a target TheRock lacks");
            assert!(row.pci.len() == 4 && row.pci.bytes().all(|b| b.is_ascii_hexdigit()), "{row:?}");
        }
    }

    #[test]
    fn names_pci_ids_and_targets_are_looked_up() {
        assert_eq!(targets_for("AMD Instinct MI300X"), ["gfx942"]);
        assert_eq!(targets_for("mi300x"), ["gfx942"]);
        assert_eq!(targets_for("Radeon 780M"), ["gfx1103"], "a 780M is gfx1103, not gfx1150");
        assert_eq!(targets_for("RX 7900 XTX"), ["gfx1100"]);
        assert_eq!(targets_for("1002:744C"), ["gfx1100"]);
        assert_eq!(targets_for("0x74a1"), ["gfx942"]);
        assert_eq!(targets_for("gfx1151"), ["gfx1151"]);
        assert_eq!(targets_for("RX 6"), ["gfx1030", "gfx1031", "gfx1032", "gfx1034"]);
        for unknown in ["GeForce RTX 4090", "gfx9999", "ffff", "", "  ", "AMD"] {
            assert!(targets_for(unknown).is_empty(), "{unknown:?}");
        }
    }

    #[test]
    fn install_lines_name_the_run_s_packages_for_the_target() {
        let packages = RunPackages {
            pip_url: Some("http://q/1-linux/python/".into()),
            pip_projects: ["rocm", "rocm-sdk-device-gfx942", "rocm-sdk-core"].into_iter().map(Into::into).collect(),
            apt: ["amdrocm7.1-gfx942", "amdrocm-fft7.1-gfx942", "amdrocm7.1"].into_iter().map(Into::into).collect(),
            dnf: BTreeSet::new(),
            ..RunPackages::default()
        };
        let a = answer("gfx942", &packages);
        assert_eq!((a.family.as_str(), a.product.as_str()), ("gfx94X-dcgpu", "MI300A/MI300X CDNA"));
        insta::assert_snapshot!(serde_json::to_string_pretty(&a).unwrap());
        let none = answer("gfx1100", &packages);
        assert!(none.install.pip.is_none() && none.install.apt.is_none() && none.install.dnf.is_none());
        assert!(a.install.uv_variants.is_none(), "no variant wheels in this run");
    }

    #[test]
    fn a_run_with_device_variant_wheels_gets_the_variant_aware_install() {
        let packages = RunPackages {
            pip_url: Some("http://q/1-linux/python/".into()),
            pip_projects: ["rocm", "rocm-sdk-device", "rocm-sdk-device-gfx942"].into_iter().map(Into::into).collect(),
            variants: [("gfx942".to_owned(), ["rocm-sdk-device".to_owned()].into())].into(),
            ..RunPackages::default()
        };
        assert_eq!(
            answer("gfx942", &packages).install.uv_variants.as_deref(),
            Some(
                "uv pip install --preview-features wheel-variants --index-url http://q/1-linux/python/simple/ rocm-sdk-device"
            )
        );
        assert_eq!(answer("gfx1100", &packages).install.uv_variants, None, "no gfx1100 variant wheel");
    }

    #[test]
    fn generic_and_variant_wheels_count_for_a_target() {
        // A variant wheel for gfx942 and a generic wheel, no extras-based device wheel.
        let packages = RunPackages {
            pip_url: Some("http://q/1-linux/python/".into()),
            pip_projects: ["rocm-sdk-device", "rocm-sdk-core", "demo-tool"].into_iter().map(Into::into).collect(),
            variants: [("gfx942".to_owned(), ["rocm-sdk-device".to_owned()].into())].into(),
            generic: ["demo-tool".to_owned()].into(),
            ..RunPackages::default()
        };
        let a = answer("gfx942", &packages).install;
        assert!(!a.is_empty(), "the run has packages for gfx942");
        assert_eq!(a.pip.as_deref(), Some("pip install --find-links http://q/1-linux/python/ demo-tool"));
        assert_eq!(
            a.uv_variants.as_deref(),
            Some(
                "uv pip install --preview-features wheel-variants --index-url http://q/1-linux/python/simple/ rocm-sdk-device"
            )
        );
        assert_eq!(a.generic, ["demo-tool"]);
        // Another target gets the generic wheel only.
        let other = answer("gfx1100", &packages).install;
        assert_eq!(other.pip.as_deref(), Some("pip install --find-links http://q/1-linux/python/ demo-tool"));
        assert!(other.uv_variants.is_none());
        // TheRock's own distributions are not generic: without them nothing installs.
        let none = RunPackages { generic: BTreeSet::new(), variants: BTreeMap::new(), ..packages };
        assert!(answer("gfx1100", &none).install.is_empty());
    }
}
