//! Running the build tools (cmake, and Ninja under it), and what the toolchain is.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use super::BuildError;

/// Runs a build tool. Its output is log, not data: it is appended to `log` and, with `echo`,
/// copied to stderr too (without, a live view owns the terminal and the error quotes the log's
/// last lines). The tool is killed when the future is dropped.
pub(super) async fn run(program: &str, args: &[String], what: &str, log: &Path, echo: bool) -> Result<(), BuildError> {
    tracing::debug!("{program} {}", args.join(" "));
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).kill_on_drop(true).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let opening = || crate::io(format!("opening {}", log.display()));
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log).map_err(opening())?;
    let file = std::sync::Arc::new(tokio::sync::Mutex::new(tokio::fs::File::from_std(file)));
    let mut child = cmd.spawn().map_err(|source| BuildError::Spawn { program: program.to_owned(), source })?;
    let out = child.stdout.take().map(|s| tokio::spawn(copy(s, file.clone(), echo)));
    let err = child.stderr.take().map(|s| tokio::spawn(copy(s, file.clone(), echo)));
    let status = child.wait().await.map_err(|source| BuildError::Spawn { program: program.to_owned(), source })?;
    for task in [out, err].into_iter().flatten() {
        let _ = task.await;
    }
    let _ = file.lock().await.flush().await;
    if status.success() {
        return Ok(());
    }
    let tail = (!echo)
        .then(|| std::fs::read_to_string(log).ok())
        .flatten()
        .map(|text| {
            let lines: Vec<&str> = text.lines().collect();
            format!("\n  {}", lines[lines.len().saturating_sub(15)..].join("\n  "))
        })
        .unwrap_or_default();
    let log = format!(" (log: {})", log.display());
    Err(BuildError::Tool { what: what.to_owned(), status, log, tail })
}

/// Copies a tool's output stream to the log (and stderr with `echo`) as it comes.
async fn copy(
    mut from: impl AsyncRead + Unpin,
    log: std::sync::Arc<tokio::sync::Mutex<tokio::fs::File>>,
    echo: bool,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        log.lock().await.write_all(&buf[..n]).await?;
        if echo {
            use std::io::Write as _;
            std::io::stderr().lock().write_all(&buf[..n])?;
        }
    }
}

/// The toolchain a configure step uses, for the stage stamp: the versions of `cmake`, `ninja`
/// and the C and C++ compilers CMake picks first (`$CC`/`$CXX`, else `cc`/`c++` on Unix;
/// Windows' `cl` is found by CMake itself and recorded through `$CC` when set), and the
/// variables CMake reads the compilers and their flags from. Probed once per process.
pub(super) fn toolchain() -> BTreeMap<String, String> {
    static TOOLCHAIN: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    TOOLCHAIN.get_or_init(probe).clone()
}

const VARIABLES: [&str; 7] = ["CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "CMAKE_GENERATOR", "CMAKE_TOOLCHAIN_FILE"];

fn probe() -> BTreeMap<String, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let default = |unix: &str| if cfg!(windows) { None } else { Some(unix.to_owned()) };
    let tools = [
        ("cmake", Some("cmake".to_owned())),
        ("ninja", Some("ninja".to_owned())),
        ("cc", var("CC").or_else(|| default("cc"))),
        ("cxx", var("CXX").or_else(|| default("c++"))),
    ];
    let mut out = BTreeMap::new();
    for (name, command) in tools {
        if let Some(command) = command {
            out.insert(name.to_owned(), version_line(&command));
        }
    }
    for name in VARIABLES {
        if let Some(value) = var(name) {
            out.insert(format!("${name}"), value);
        }
    }
    out
}

/// The first line `COMMAND --version` prints (on stdout, else stderr), or `unavailable`.
fn version_line(command: &str) -> String {
    let mut words = command.split_whitespace();
    let Some(program) = words.next() else { return "unavailable".into() };
    let Ok(out) = std::process::Command::new(program).args(words).arg("--version").output() else {
        return "unavailable".into();
    };
    let first = |bytes: &[u8]| String::from_utf8_lossy(bytes).lines().find(|l| !l.trim().is_empty()).map(str::to_owned);
    first(&out.stdout).or_else(|| first(&out.stderr)).unwrap_or_else(|| "unavailable".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_tool_quotes_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("build.log");
        let args = ["-c".to_owned(), "echo first; echo boom >&2; exit 3".to_owned()];
        let error = run("sh", &args, "the step", &log, false).await.unwrap_err().to_string();
        assert!(error.starts_with("the step failed (exit status: 3) (log: "), "{error}");
        assert!(error.ends_with("\n  first\n  boom"), "{error}");
        let echoed = run("sh", &args, "the step", &log, true).await.unwrap_err().to_string();
        assert!(echoed.ends_with("build.log)"), "echoed output is not quoted again: {echoed}");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "first\nboom\nfirst\nboom\n", "both runs logged");
        let missing = run("quarry-no-such-tool", &[], "x", &log, true).await.unwrap_err().to_string();
        assert_eq!(missing, "running quarry-no-such-tool (is it installed?)");
    }

    #[test]
    fn the_toolchain_names_cmake() {
        let toolchain = toolchain();
        assert!(toolchain["cmake"].starts_with("cmake version") || toolchain["cmake"] == "unavailable");
        assert_eq!(version_line("quarry-no-such-tool"), "unavailable");
    }
}
