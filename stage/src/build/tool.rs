//! Running the build tools (cmake, and Ninja under it).

use std::path::Path;

use super::BuildError;

/// Runs a build tool. Its output is log, not data: it goes to stderr, or to `log` when a live
/// view owns the terminal (the error then quotes the log's last lines). The tool is killed when
/// the future is dropped.
pub(super) async fn run(program: &str, args: &[String], what: &str, log: Option<&Path>) -> Result<(), BuildError> {
    tracing::debug!("{program} {}", args.join(" "));
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).kill_on_drop(true);
    if let Some(log) = log {
        let opening = || crate::io(format!("opening {}", log.display()));
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log).map_err(opening())?;
        cmd.stdout(file.try_clone().map_err(opening())?).stderr(file);
    } else {
        cmd.stdout(std::process::Stdio::from(std::io::stderr())).stderr(std::process::Stdio::inherit());
    }
    let status = cmd.status().await.map_err(|source| BuildError::Spawn { program: program.to_owned(), source })?;
    if status.success() {
        return Ok(());
    }
    let tail = log
        .and_then(|l| std::fs::read_to_string(l).ok())
        .map(|text| {
            let lines: Vec<&str> = text.lines().collect();
            format!("\n  {}", lines[lines.len().saturating_sub(15)..].join("\n  "))
        })
        .unwrap_or_default();
    let log = log.map(|l| format!(" (log: {})", l.display())).unwrap_or_default();
    Err(BuildError::Tool { what: what.to_owned(), status, log, tail })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_tool_quotes_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("build.log");
        let args = ["-c".to_owned(), "echo first; echo boom; exit 3".to_owned()];
        let error = run("sh", &args, "the step", Some(&log)).await.unwrap_err().to_string();
        assert!(error.starts_with("the step failed (exit status: 3) (log: "), "{error}");
        assert!(error.ends_with("\n  first\n  boom"), "{error}");
        let missing = run("quarry-no-such-tool", &[], "x", None).await.unwrap_err().to_string();
        assert_eq!(missing, "running quarry-no-such-tool (is it installed?)");
    }
}
