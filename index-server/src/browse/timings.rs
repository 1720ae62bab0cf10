//! The run page's build summary: each stage build's timings (`logs/{group}/timings.json`, as
//! `quarry stage build` writes them: `stage`, `family`, `status`, `seconds`, `steps` → seconds)
//! in one table across stages and families, and the log files of each log group (a directory
//! under the run's `logs/`), linked from the table and from the stage they belong to.

use std::collections::BTreeMap;

use futures_util::StreamExt as _;
use quarry_index::listing::human_size;
use quarry_layout as layout;
use quarry_store::{Key, ObjectMeta, Store, StoreExt as _};

use crate::encode_path;

/// A build's timings in its log group.
const TIMINGS_FILE: &str = "timings.json";
/// The steps of a stage build in the order they run (`quarry_stage::build::timings::STEPS`);
/// steps a record names beyond these are shown after them.
const STEPS: [&str; 5] = ["setup", "fetch", "configure", "build", "push"];
const MAX_TIMINGS: u64 = 64 * 1024;

#[derive(serde::Deserialize)]
struct Record {
    stage: String,
    #[serde(default)]
    family: Option<String>,
    status: String,
    seconds: f64,
    #[serde(default)]
    steps: BTreeMap<String, f64>,
}

/// A log file.
#[derive(Clone)]
pub(super) struct LogLink {
    pub name: String,
    pub href: String,
    pub size: String,
}

/// One stage build's row.
pub(super) struct TimingRow {
    pub stage: String,
    pub family: String,
    pub status: String,
    /// Seconds per step of [`Summary::steps`] (`-` where the build did not run it).
    pub steps: Vec<String>,
    pub total: String,
    pub logs: Vec<LogLink>,
}

/// The build summary of a run.
#[derive(Default)]
pub(super) struct Summary {
    /// The step columns.
    pub steps: Vec<String>,
    pub rows: Vec<TimingRow>,
    /// Log group → its files (the group `""`: files directly in `logs/`).
    pub groups: BTreeMap<String, Vec<LogLink>>,
    /// Log group → the stage its timings name.
    stage_of: BTreeMap<String, String>,
}

impl Summary {
    /// The log files of `stage`'s builds: the groups its timings name, and the groups named
    /// `{stage}` or `{stage}_{families}`.
    pub(super) fn stage_logs(&self, stage: &str) -> Vec<LogLink> {
        self.groups
            .iter()
            .filter(|(group, _)| {
                self.stage_of.get(*group).is_some_and(|s| s == stage)
                    || *group == stage
                    || group.strip_prefix(stage).is_some_and(|rest| rest.starts_with('_'))
            })
            .flat_map(|(_, files)| files.iter().cloned())
            .collect()
    }
}

/// Seconds with three decimals, six below a millisecond (as the step summary shows them).
fn seconds(value: f64) -> String {
    if value < 0.001 { format!("{value:.6}") } else { format!("{value:.3}") }
}

/// The run's log groups and build timings; rows in `order` of their stages (the topology's
/// build order when known, else by name), then by family.
pub(super) async fn summary(store: &dyn Store, prefix: &str, objects: &[ObjectMeta], order: &[String]) -> Summary {
    let layout = &layout::THEROCK;
    let mut summary = Summary::default();
    let mut timing_keys: Vec<(String, Key)> = Vec::new();
    for o in objects {
        let Some(name) = o.key.as_str().strip_prefix(prefix).and_then(|r| layout.log_name(r)) else { continue };
        let (group, file) = name.split_once('/').unwrap_or(("", name));
        // The listing's own outputs in a log directory (`index.html`, dot files) are no logs.
        let leaf = file.rsplit('/').next().unwrap_or(file);
        if leaf.starts_with('.') || leaf == "index.html" {
            continue;
        }
        if file == TIMINGS_FILE {
            timing_keys.push((group.to_owned(), o.key.clone()));
        }
        let link = LogLink { name: name.to_owned(), href: encode_path(o.key.as_str()), size: human_size(o.size) };
        summary.groups.entry(group.to_owned()).or_default().push(link);
    }
    let records: Vec<(String, Record)> = futures_util::stream::iter(timing_keys)
        .map(|(group, key)| async move {
            let (_, bytes) = store.get_bytes(&key, MAX_TIMINGS).await.ok()?;
            let parsed = serde_json::from_slice::<Record>(&bytes);
            if let Err(e) = &parsed {
                tracing::debug!(%key, "not a timings record: {e}");
            }
            Some((group, parsed.ok()?))
        })
        .buffered(16)
        .filter_map(|r| async move { r })
        .collect()
        .await;
    let mut steps: Vec<String> = STEPS.iter().map(|s| (*s).to_owned()).collect();
    for step in records.iter().flat_map(|(_, r)| r.steps.keys()) {
        if !steps.contains(step) {
            steps.push(step.clone());
        }
    }
    let position = |stage: &str| order.iter().position(|s| s == stage).unwrap_or(order.len());
    let mut rows: Vec<(usize, TimingRow)> = records
        .into_iter()
        .map(|(group, r)| {
            summary.stage_of.insert(group.clone(), r.stage.clone());
            let row = TimingRow {
                steps: steps.iter().map(|s| r.steps.get(s).map_or_else(|| "-".to_owned(), |v| seconds(*v))).collect(),
                total: seconds(r.seconds),
                logs: summary.groups.get(&group).cloned().unwrap_or_default(),
                family: r.family.unwrap_or_else(|| "-".into()),
                status: r.status,
                stage: r.stage,
            };
            (position(&row.stage), row)
        })
        .collect();
    rows.sort_by(|(a, x), (b, y)| (a, &x.stage, &x.family).cmp(&(b, &y.stage, &y.family)));
    summary.rows = rows.into_iter().map(|(_, r)| r).collect();
    summary.steps = steps;
    summary
}
