//! One log per package, as TheRock's `build_package.py` keeps them: `{dest}/logs/{type}-{pkg}.log`
//! with what went in (every item, its mode and size), the ELF edits, the file built (or the
//! error) and how long each step took. Plain text, written once the package is done.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::deb::Item;
use crate::rpath::StagedEdits;

/// The directory of the logs under the destination.
pub const LOGS_DIR: &str = "logs";

/// The log of one package build, filled in as it goes.
#[derive(Debug)]
pub(crate) struct PackageLog {
    kind: &'static str,
    package: String,
    started: Instant,
    steps: Vec<(&'static str, Duration)>,
    step_started: Instant,
    body: String,
}

impl PackageLog {
    pub(crate) fn start(kind: &'static str, package: &str) -> Self {
        let now = Instant::now();
        let body = format!("package {package} ({kind})\n");
        Self { kind, package: package.to_owned(), started: now, steps: Vec::new(), step_started: now, body }
    }

    /// Ends the current step under `name`.
    pub(crate) fn step(&mut self, name: &'static str) {
        let now = Instant::now();
        self.steps.push((name, now - self.step_started));
        self.step_started = now;
    }

    /// The items going into the package, one line each, after their totals.
    pub(crate) fn items(&mut self, items: &[(String, Item)]) {
        let mut lines = String::new();
        let (mut files, mut bytes, mut dirs, mut links) = (0u64, 0u64, 0u64, 0u64);
        for (path, item) in items {
            match item {
                Item::File { source, mode } => {
                    let size = std::fs::metadata(source).map_or(0, |m| m.len());
                    (files, bytes) = (files + 1, bytes + size);
                    let _ = writeln!(lines, "  file {mode:04o} {size:>12} {path}");
                }
                Item::Dir { mode } => {
                    dirs += 1;
                    let _ = writeln!(lines, "  dir  {mode:04o} {:>12} {path}", "");
                }
                Item::Symlink { target } => {
                    links += 1;
                    let _ = writeln!(lines, "  link      {:>12} {path} -> {target}", "");
                }
            }
        }
        let _ = writeln!(self.body, "included: {files} files ({bytes} bytes), {dirs} directories, {links} symlinks");
        self.body.push_str(&lines);
    }

    /// The ELF and compiler-configuration edits made on staged copies.
    pub(crate) fn edits(&mut self, edits: &StagedEdits, keep_runpath: bool) {
        if keep_runpath {
            self.body.push_str("rpath: RUNPATH kept (--runpath-pkg)\n");
            return;
        }
        let _ = writeln!(self.body, "rpath: {} files DT_RUNPATH -> DT_RPATH", edits.converted.len());
        for (path, runpath) in &edits.converted {
            let _ = writeln!(self.body, "  {path} [{runpath}]");
        }
        for (path, why) in &edits.unreadable {
            let _ = writeln!(self.body, "  {path}: packaged as it is (malformed ELF file: {why})");
        }
        for path in &edits.configs {
            let _ = writeln!(self.body, "  {path}: enable-new-dtags -> disable-new-dtags");
        }
    }

    /// Writes the log under `dest/logs/` with the outcome; its path.
    pub(crate) fn finish(mut self, dest: &Path, outcome: Result<(&str, u64), &str>) -> std::io::Result<PathBuf> {
        match outcome {
            Ok((file, size)) => {
                let _ = writeln!(self.body, "built: {file} ({size} bytes)");
            }
            Err(error) => {
                let _ = writeln!(self.body, "failed: {error}");
            }
        }
        let steps: Vec<String> = self.steps.iter().map(|(name, d)| format!("{name} {:.3}s", d.as_secs_f64())).collect();
        let total = self.started.elapsed().as_secs_f64();
        let _ = writeln!(self.body, "time: {} (total {total:.3}s)", steps.join(", "));
        let dir = dest.join(LOGS_DIR);
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{}-{}.log", self.kind, self.package));
        std::fs::write(&path, self.body)?;
        Ok(path)
    }
}
