//! Where a stage build's time went: its steps' durations, kept as JSON beside its build log in
//! the run (`{run}-{platform}/logs/{stage}[_{family}]/timings.json`, the [`StageReport`] as
//! `quarry stage build` prints it) and as a Markdown table for `$GITHUB_STEP_SUMMARY`.
//!
//! The steps, in order: `setup` (checking the stage, reading the inbound digests, the sources'
//! state and the toolchain: the overhead before any work), `fetch`, `configure`, `build`,
//! `push`. A reused stage has no steps.

use std::fmt::Write as _;

use super::StageReport;

/// The steps of a stage build, in the order they run.
pub const STEPS: [&str; 5] = ["setup", "fetch", "configure", "build", "push"];

/// The file name of a build's timings in its log directory.
pub const TIMINGS_FILE: &str = "timings.json";
/// The file name of a build's tool output in its log directory.
pub const BUILD_LOG_FILE: &str = "build.log";

/// The directory below the run's logs a stage build's log and timings go to: the stage, and
/// for a per-arch build `_` and its families joined by `_` (`math-libs_gfx94X-dcgpu`): stage
/// and family names hold no `_`.
pub fn log_group(stage: &str, family: Option<&str>) -> String {
    match family {
        Some(family) => format!("{stage}_{}", quarry_topology::split_list(family).join("_")),
        None => stage.to_owned(),
    }
}

/// The Markdown table of stage builds: stage, family, status, each step's seconds and the
/// total (`-` for a step a build did not run).
pub fn markdown_table(reports: &[StageReport]) -> String {
    let mut out = String::from("| Stage | Family | Status |");
    for step in STEPS {
        let _ = write!(out, " {} (s) |", capitalized(step));
    }
    out.push_str(" Total (s) |\n|---|---|---|");
    out.push_str(&"---:|".repeat(STEPS.len() + 1));
    out.push('\n');
    for r in reports {
        let family = r.family.as_deref().unwrap_or("-");
        let _ = write!(out, "| {} | {} | {} |", cell(&r.stage), cell(family), r.status.as_str());
        for step in STEPS {
            match r.steps.get(step) {
                Some(seconds) => {
                    let _ = write!(out, " {} |", seconds_cell(*seconds));
                }
                None => out.push_str(" - |"),
            }
        }
        let _ = writeln!(out, " {} |", seconds_cell(r.seconds));
    }
    out
}

/// Seconds with three decimals, six below a millisecond: a quick step still shows it took time.
fn seconds_cell(seconds: f64) -> String {
    if seconds < 0.001 { format!("{seconds:.6}") } else { format!("{seconds:.3}") }
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

/// Text safe in a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Status;

    #[test]
    fn log_groups_name_stage_and_families() {
        assert_eq!(log_group("compiler", None), "compiler");
        assert_eq!(log_group("math-libs", Some("gfx94X-dcgpu;gfx110X-all")), "math-libs_gfx94X-dcgpu_gfx110X-all");
    }

    #[test]
    fn the_table_has_a_row_per_build_and_a_column_per_step() {
        let built = StageReport {
            stage: "math-libs".into(),
            family: Some("famA".into()),
            status: Status::Built,
            seconds: 12.5,
            steps: [("setup", 0.0125), ("fetch", 0.00004), ("configure", 2.0), ("build", 8.0), ("push", 1.4)].into(),
            artifacts: vec!["blas_lib_famA.tar.zst".into()],
        };
        let reused = StageReport {
            stage: "found|ation".into(),
            family: None,
            status: Status::Reused,
            seconds: 0.25,
            steps: Default::default(),
            artifacts: vec![],
        };
        insta::assert_snapshot!(markdown_table(&[built, reused]));
    }
}
