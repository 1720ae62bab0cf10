//! The user guide (`docs/guide/`) and README.md as a new user meets them: every shell example
//! runs against the real `quarry` binary and its output is checked, the guide builds with
//! mdBook and no internal link of the built pages is broken, and the command reference pages
//! are what `quarry self-docs` generates. So a renamed flag or a changed message fails here.
//!
//! How examples are written (the harness reads nothing else):
//!
//! - A ` ```console ` block holds examples. `$ COMMAND` is a command (a line ending in `\`
//!   continues it); the lines after it, up to the next `$ `, are what it prints: its stdout,
//!   then its stderr. A line `...` matches any number of lines, and `[..]` inside a line
//!   matches any text. No lines: it prints nothing. A first line `? N` says it exits with N
//!   (default 0).
//! - A command ending in `&` runs in the background; its output is not checked, and when it
//!   is `quarry serve`, the next command waits until the server answers.
//! - A page's examples run in order in one `bash` (variables and files carry over), in a
//!   scratch directory of its own that holds `dist/quarry_hello-1.0.0-py3-none-any.whl` and
//!   TheRock's `BUILD_TOPOLOGY.toml`; `quarry`, `python3` and `pip` are on `PATH`. Whatever
//!   the page left running is stopped at its end.
//! - A block whose info string names a file (` ```toml,file=quarry.toml `) writes its text to
//!   that file of the scratch directory, for the examples after it.
//! - `127.0.0.1:8470` (`quarry serve`'s default address) is a free port chosen per page:
//!   `QUARRY_ADDR` names it, the commands' text uses it, and the output shows it as 8470.
//! - `QUARRY_GUIDE_PAGE=one-machine` runs only the pages whose path holds that text, and
//!   `QUARRY_GUIDE_SHOW=1` prints every example's output (to write a page's expected lines).
//! - Every other fenced shell block (`sh`, `bash`, `shell`, `console`) is refused unless the
//!   line before it is `<!-- skip: REASON -->`: skipped examples are listed, few, and only for
//!   what cannot run here (AWS, a GPU, a TheRock checkout).
#![allow(clippy::print_stderr)] // the skipped examples and, on request, every example's output

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quarry_tests::{WheelSpec, assert_success, quarry_bin, run, venv, workspace_root};

/// The pages whose examples run: README.md and the guide's sources.
fn pages() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut pages = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs/guide/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read docs/guide/src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// One example: a command and what it prints.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Example {
    /// The 1-based line of its `$ ` in the page.
    line: usize,
    command: String,
    status: i32,
    expected: Vec<String>,
}

impl Example {
    fn background(&self) -> bool {
        self.command.trim_end().ends_with('&') && !self.command.trim_end().ends_with("&&")
    }
}

/// What a page holds: its examples, and the shell blocks it skips (line, reason).
#[derive(Debug, Default)]
struct Page {
    examples: Vec<Example>,
    skipped: Vec<(usize, String)>,
}

const SHELLS: [&str; 4] = ["console", "sh", "bash", "shell"];

/// The examples of a page's text; an error names a shell block that is neither an example
/// block nor skipped with a reason, or a malformed example.
fn parse_page(text: &str) -> Result<Page, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut page = Page::default();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let Some(info) = trimmed.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - trimmed.len();
        let language = info.split([',', ' ']).next().unwrap_or_default().trim();
        let start = i;
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim_start().starts_with("```"))
            .ok_or_else(|| format!("line {}: the fenced block never closes", start + 1))?;
        i = end + 1;
        let body: Vec<&str> = lines[start + 1..end].iter().map(|l| l.get(indent..).unwrap_or(l.trim_start())).collect();
        if let Some(file) = info.split(',').find_map(|word| word.trim().strip_prefix("file=")) {
            // The block's text becomes a file of the scratch directory, for the examples after it.
            if file.is_empty() || file.contains(['/', '\\', '\'']) || file.starts_with('.') {
                return Err(format!("line {}: file={file:?}: a plain file name", start + 1));
            }
            let command = format!("cat > '{file}' <<'QUARRY_EXAMPLE_FILE'\n{}\nQUARRY_EXAMPLE_FILE", body.join("\n"));
            page.examples.push(Example { line: start + 1, command, status: 0, expected: Vec::new() });
            continue;
        }
        if !SHELLS.contains(&language) {
            continue;
        }
        let skip = start.checked_sub(1).map(|p| lines[p].trim()).and_then(|l| {
            l.strip_prefix("<!-- skip:").and_then(|r| r.strip_suffix("-->")).map(|r| r.trim().to_owned())
        });
        if let Some(reason) = skip {
            if reason.is_empty() {
                return Err(format!("line {}: a skipped example needs a reason", start + 1));
            }
            page.skipped.push((start + 1, reason));
            continue;
        }
        if language != "console" {
            return Err(format!(
                "line {}: a ```{language} block: write examples as ```console with `$ ` prompts, or put \
                 `<!-- skip: REASON -->` on the line before",
                start + 1
            ));
        }
        page.examples.extend(parse_block(&body, start + 2)?);
    }
    Ok(page)
}

/// The examples of one console block whose first line is line `first` of the page.
fn parse_block(body: &[&str], first: usize) -> Result<Vec<Example>, String> {
    let mut examples: Vec<Example> = Vec::new();
    let mut j = 0;
    while j < body.len() {
        let line = body[j];
        let Some(command) = line.strip_prefix("$ ") else {
            let Some(current) = examples.last_mut() else {
                return Err(format!("line {}: output before any `$ ` command", first + j));
            };
            if current.expected.is_empty()
                && let Some(code) = line.strip_prefix("? ")
            {
                current.status =
                    code.trim().parse().map_err(|_| format!("line {}: `? N` needs an exit code", first + j))?;
            } else {
                current.expected.push(line.to_owned());
            }
            j += 1;
            continue;
        };
        let start = j;
        let mut command = command.to_owned();
        while command.ends_with('\\') && j + 1 < body.len() {
            j += 1;
            command.push('\n');
            command.push_str(body[j]);
        }
        examples.push(Example { line: first + start, command, status: 0, expected: Vec::new() });
        j += 1;
    }
    Ok(examples)
}

/// Whether `actual` matches `expected`: `...` lines match any run of lines, `[..]` any text
/// within a line.
fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "..." => (0..=actual.len()).any(|skip| matches(rest, &actual[skip..])),
        Some((first, rest)) => {
            actual.split_first().is_some_and(|(line, more)| line_matches(first, line) && matches(rest, more))
        }
    }
}

fn line_matches(expected: &str, actual: &str) -> bool {
    let parts: Vec<&str> = expected.split("[..]").collect();
    if parts.len() == 1 {
        return expected.trim_end() == actual.trim_end();
    }
    let actual = actual.trim_end();
    let (first, last) = (parts[0], parts[parts.len() - 1].trim_end());
    if !actual.starts_with(first) || actual.len() < first.len() + last.len() || !actual.ends_with(last) {
        return false;
    }
    let mut rest = &actual[first.len()..actual.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// What running a page found wrong, one message per example.
#[derive(Debug, Default)]
struct Outcome {
    ran: usize,
    failures: Vec<String>,
}

const PAGE_TIME: Duration = Duration::from_secs(600);
/// `quarry serve`'s default address, replaced by a free port on each page.
const DEFAULT_ADDR: &str = "127.0.0.1:8470";

/// Runs a page's examples in a scratch directory; `name` labels the messages.
async fn run_page(name: &str, examples: &[Example]) -> Outcome {
    let scratch = tempfile::tempdir().expect("scratch dir");
    let dir = scratch.path().join("work");
    let results = scratch.path().join("results");
    std::fs::create_dir_all(dir.join("dist")).expect("dist");
    std::fs::create_dir_all(&results).expect("results");
    WheelSpec::new("quarry-hello", "1.0.0").write_to(&dir.join("dist"));
    std::fs::copy(workspace_root().join("topology/data/BUILD_TOPOLOGY.toml"), dir.join("BUILD_TOPOLOGY.toml"))
        .expect("copy the topology");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");

    let mut script = String::from("cd \"$QUARRY_EXAMPLES_DIR\" || exit 99\n");
    for (i, example) in examples.iter().enumerate() {
        let command = example.command.replace(DEFAULT_ADDR, &addr);
        let out = results.join(format!("{i}"));
        let (o, e, r) = (out.with_extension("out"), out.with_extension("err"), out.with_extension("rc"));
        if example.background() {
            let command = command.trim_end().trim_end_matches('&');
            script.push_str(&format!(
                "{{ {command}\n}} >'{}' 2>'{}' </dev/null &\necho 0 >'{}'\n",
                o.display(),
                e.display(),
                r.display()
            ));
            if command.trim_start().starts_with("quarry serve") {
                script.push_str(&format!(
                    "for _ in $(seq 1 600); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done\n"
                ));
            }
        } else {
            script.push_str(&format!(
                "{{ {command}\n}} >'{}' 2>'{}' </dev/null\necho $? >'{}'\n",
                o.display(),
                e.display(),
                r.display()
            ));
        }
    }
    let script_path = scratch.path().join("page.sh");
    std::fs::write(&script_path, &script).expect("write the page's script");

    let venv_bin = venv().join("bin");
    let quarry_dir = quarry_bin().parent().expect("the binary's directory").to_path_buf();
    let path = std::env::join_paths(
        [quarry_dir, venv_bin].into_iter().chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .expect("PATH");
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg(&script_path)
        .current_dir(&dir)
        .env("PATH", path)
        .env("QUARRY_EXAMPLES_DIR", &dir)
        .env("QUARRY_ADDR", &addr)
        .env("HOME", scratch.path())
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("PIP_NO_INPUT", "1")
        .env("PIP_CONFIG_FILE", "/dev/null")
        .env("NO_COLOR", "1");
    for var in ["QUARRY_STORE", "QUARRY_CONFIG", "QUARRY_TOKEN", "QUARRY_TOKEN_FILE", "RUST_LOG", "QUARRY_LOG_FORMAT"] {
        cmd.env_remove(var);
    }
    let stopped = run_in_group(cmd, PAGE_TIME).await;
    let mut outcome = Outcome::default();
    if let Err(e) = stopped {
        outcome.failures.push(format!("{name}: {e}"));
    }
    for (i, example) in examples.iter().enumerate() {
        let read = |ext: &str| std::fs::read_to_string(results.join(format!("{i}.{ext}"))).unwrap_or_default();
        let Ok(status) = read("rc").trim().parse::<i32>() else {
            outcome.failures.push(format!("{name}:{}: `{}` did not run", example.line, example.command));
            continue;
        };
        outcome.ran += 1;
        if example.background() {
            continue;
        }
        let (stdout, stderr) = (read("out"), read("err"));
        let shown = format!("{stdout}{stderr}").replace(&addr, DEFAULT_ADDR).replace(&dir.display().to_string(), ".");
        let actual: Vec<&str> = shown.lines().collect();
        if std::env::var_os("QUARRY_GUIDE_SHOW").is_some() {
            eprintln!("{name}:{}: $ {}\n? {status}\n{shown}", example.line, example.command);
        }
        if status != example.status || !matches(&example.expected, &actual) {
            outcome.failures.push(format!(
                "{name}:{}: `{}`\n  exit code {status} (expected {})\n  --- expected\n{}\n  --- got\n{}",
                example.line,
                example.command,
                example.status,
                indent(&example.expected.join("\n")),
                indent(&shown)
            ));
        }
    }
    outcome
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// Runs `cmd` in a process group of its own, then stops whatever it left running there.
async fn run_in_group(mut cmd: tokio::process::Command, limit: Duration) -> Result<(), String> {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    let child = cmd.spawn().map_err(|e| format!("cannot start bash: {e}"))?;
    let id = child.id();
    let finished = tokio::time::timeout(limit, child.wait_with_output()).await;
    if let Some(id) = id {
        stop_group(id).await;
    }
    match finished {
        Ok(Ok(out)) if out.status.success() => Ok(()),
        Ok(Ok(out)) => Err(format!("the page's shell failed: {}", String::from_utf8_lossy(&out.stderr))),
        Ok(Err(e)) => Err(format!("waiting for bash: {e}")),
        Err(_) => Err(format!("the page's examples took longer than {limit:?}")),
    }
}

/// Stops every process of the group `id` leads (a page's background servers).
async fn stop_group(id: u32) {
    #[cfg(unix)]
    let mut kill = {
        let mut kill = tokio::process::Command::new("kill");
        kill.args(["-TERM", "--", &format!("-{id}")]);
        kill
    };
    #[cfg(windows)]
    let mut kill = {
        let mut kill = tokio::process::Command::new("taskkill");
        kill.args(["/F", "/T", "/PID", &id.to_string()]);
        kill
    };
    let _ = kill.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status().await;
    // Give servers their graceful stop before the scratch directory goes.
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Every page's examples, parsed (a malformed page fails here).
fn all_examples() -> Vec<(String, Page)> {
    let root = workspace_root();
    let mut all = Vec::new();
    let mut errors = Vec::new();
    for path in pages() {
        let name = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
        let text = std::fs::read_to_string(&path).expect("read a page");
        match parse_page(&text) {
            Ok(page) => all.push((name, page)),
            Err(e) => errors.push(format!("{name}:{e}")),
        }
    }
    assert!(errors.is_empty(), "malformed examples:\n{}", errors.join("\n"));
    all
}

#[tokio::test(flavor = "multi_thread")]
async fn every_example_in_the_guide_and_readme_runs() {
    let all = all_examples();
    let mut failures = Vec::new();
    let (mut ran, mut skipped) = (0, Vec::new());
    let only = std::env::var("QUARRY_GUIDE_PAGE").ok();
    for (name, page) in &all {
        if only.as_ref().is_some_and(|only| !name.contains(only.as_str())) {
            continue;
        }
        for (line, reason) in &page.skipped {
            skipped.push(format!("{name}:{line}: {reason}"));
        }
        if page.examples.is_empty() {
            continue;
        }
        let outcome = run_page(name, &page.examples).await;
        ran += outcome.ran;
        failures.extend(outcome.failures);
    }
    eprintln!("{ran} examples ran; {} skipped:\n  {}", skipped.len(), skipped.join("\n  "));
    assert!(failures.is_empty(), "{} examples failed:\n\n{}", failures.len(), failures.join("\n\n"));
    if only.is_some() {
        return;
    }
    let total: usize = all.iter().map(|(_, p)| p.examples.len()).sum();
    assert_eq!(ran, total, "every example ran");
    assert!(ran >= 40, "the guide shows {ran} examples");
    // Skipped examples stay rare: one in eight at most.
    assert!(skipped.len() * 8 <= ran, "{} skipped for {ran} run", skipped.len());
}

/// The harness is no test that cannot fail: a misspelled flag in a real page, or a wrong
/// output line, makes it report that example.
#[tokio::test(flavor = "multi_thread")]
async fn a_misspelled_flag_or_a_wrong_output_fails_the_harness() {
    let page = workspace_root().join("docs/guide/src/one-machine.md");
    let text = std::fs::read_to_string(&page).expect("the one-machine page");
    assert!(text.contains("--to http"), "the page uploads with --to");
    let broken = text.replacen("--to http", "--too http", 1);
    let examples = parse_page(&broken).expect("still parses").examples;
    let outcome = run_page("one-machine.md (misspelled)", &examples).await;
    assert!(!outcome.failures.is_empty(), "a misspelled flag went unnoticed");
    assert!(outcome.failures[0].contains("--too http"), "{}", outcome.failures[0]);
    assert!(outcome.failures[0].contains("exit code 2"), "{}", outcome.failures[0]);

    let examples = parse_page("```console\n$ quarry --version\nquarry 0.0.0-not-this\n```\n").unwrap().examples;
    let outcome = run_page("inline", &examples).await;
    assert_eq!(outcome.failures.len(), 1, "{:?}", outcome.failures);
    // And the same page as written passes.
    let examples = parse_page("```console\n$ quarry --version\nquarry [..]\n```\n").unwrap().examples;
    let outcome = run_page("inline", &examples).await;
    assert!(outcome.failures.is_empty(), "{:?}", outcome.failures);
}

#[test]
fn examples_parse_as_documented() {
    let page = parse_page(
        "text\n```console\n$ quarry a \\\n  --b\nout\n...\n$ quarry c\n? 2\n[..]error[..]\n$ quarry serve &\n```\n\
         <!-- skip: needs AWS -->\n```sh\naws s3 ls\n```\n```toml\nx = 1\n```\n```toml,file=q.toml\ny = 2\n```\n",
    )
    .unwrap();
    assert_eq!(page.examples.len(), 4);
    assert_eq!(page.examples[3].command, "cat > 'q.toml' <<'QUARRY_EXAMPLE_FILE'\ny = 2\nQUARRY_EXAMPLE_FILE");
    assert_eq!(page.examples[0].command, "quarry a \\\n  --b");
    assert_eq!(page.examples[0].expected, ["out", "..."]);
    assert_eq!((page.examples[1].status, page.examples[1].line), (2, 7));
    assert!(page.examples[2].background());
    assert_eq!(page.skipped, [(13, "needs AWS".to_owned())]);
    assert!(parse_page("```sh\nquarry serve\n```\n").unwrap_err().contains("```sh block"));
    assert!(parse_page("<!-- skip: -->\n```sh\nx\n```\n").unwrap_err().contains("needs a reason"));

    let lines = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert!(matches(&lines(&["a", "...", "d"]), &["a", "b", "c", "d"]));
    assert!(matches(&lines(&["a", "..."]), &["a"]));
    assert!(!matches(&lines(&["a"]), &["a", "b"]));
    assert!(matches(&lines(&["[..] ERROR store [..]: gone"]), &["2026-01-01T00:00:00Z ERROR store x: gone"]));
    assert!(!matches(&lines(&["[..] ERROR store [..]: gone"]), &["ERROR store x: gone"]));
}

/// mdBook builds the guide, and every link between its pages (and to their anchors) resolves.
#[tokio::test(flavor = "multi_thread")]
async fn the_guide_builds_without_a_broken_link() {
    let out = tempfile::tempdir().expect("tempdir");
    let book = out.path().join("book");
    let mut cmd = tokio::process::Command::new(mdbook());
    cmd.arg("build").arg(workspace_root().join("docs/guide")).arg("--dest-dir").arg(&book);
    let built = run(cmd, Duration::from_secs(300)).await;
    assert_success(&built, "mdbook build docs/guide");
    let broken = broken_links(&book);
    assert!(broken.is_empty(), "broken links in the built guide:\n  {}", broken.join("\n  "));
    assert!(book.join("reference/promote.html").is_file(), "the reference pages are in the book");
}

/// `mdbook` on PATH or in ~/.cargo/bin (`scripts/test` installs it).
fn mdbook() -> PathBuf {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|c| c.join("bin/mdbook"));
    if let Some(path) = cargo_bin.filter(|p| p.is_file()) {
        return path;
    }
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("mdbook"))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("mdbook is missing: scripts/test installs it (cargo install mdbook --locked)"))
}

/// Every `href`/`src` of the built HTML that points inside the book and does not resolve to
/// a file (and, with a `#fragment`, to an `id` in it).
fn broken_links(book: &Path) -> Vec<String> {
    let mut html = BTreeMap::new();
    let mut dirs = vec![book.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the book") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "html") {
                html.insert(path.clone(), std::fs::read_to_string(&path).expect("read a page"));
            }
        }
    }
    let mut broken = Vec::new();
    for (page, text) in &html {
        // The print page and 404 page repeat every page's links relative to elsewhere.
        let name = page.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name == "print.html" || name == "404.html" || name == "toc.html" {
            continue;
        }
        for link in attribute_values(text, &["href", "src"]) {
            if link.contains("://")
                || link.starts_with("mailto:")
                || link.starts_with("data:")
                || link.starts_with("//")
            {
                continue;
            }
            let link = link.replace("&amp;", "&");
            let (path, fragment) = link.split_once('#').map_or((link.as_str(), None), |(p, f)| (p, Some(f)));
            let path = path.split('?').next().unwrap_or_default();
            let target = if path.is_empty() {
                page.clone()
            } else if let Some(absolute) = path.strip_prefix('/') {
                book.join(absolute)
            } else {
                page.parent().expect("a page's directory").join(path)
            };
            let target = if target.is_dir() { target.join("index.html") } else { target };
            let shown = format!("{}: {link}", page.strip_prefix(book).unwrap_or(page).display());
            let Ok(target) = target.canonicalize() else {
                broken.push(format!("{shown} (no such file)"));
                continue;
            };
            if let Some(fragment) = fragment.filter(|f| !f.is_empty()) {
                let text = html.iter().find(|(p, _)| p.canonicalize().ok().as_ref() == Some(&target)).map(|(_, t)| t);
                let ids = text.map(|t| attribute_values(t, &["id"])).unwrap_or_default();
                if !ids.iter().any(|id| id == fragment) {
                    broken.push(format!("{shown} (no id {fragment:?})"));
                }
            }
        }
    }
    broken
}

/// The values of `names` attributes (`name="…"`) in HTML text.
fn attribute_values(text: &str, names: &[&str]) -> Vec<String> {
    let mut values = Vec::new();
    for name in names {
        let needle = format!(" {name}=\"");
        let mut rest = text;
        while let Some(at) = rest.find(&needle) {
            rest = &rest[at + needle.len()..];
            if let Some(end) = rest.find('"') {
                values.push(rest[..end].to_owned());
                rest = &rest[end..];
            }
        }
    }
    values
}

#[test]
fn the_link_check_finds_broken_links() {
    let book = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(book.path().join("sub")).unwrap();
    std::fs::write(book.path().join("index.html"), r#"<a href="sub/a.html#there">a</a> <a href="missing.html">m</a>"#)
        .unwrap();
    std::fs::write(
        book.path().join("sub/a.html"),
        r#"<h1 id="there">t</h1><a href="../index.html#nowhere">i</a><a href="https://example.com/x">x</a>"#,
    )
    .unwrap();
    let broken = broken_links(book.path());
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken.iter().any(|b| b.contains("missing.html")), "{broken:?}");
    assert!(broken.iter().any(|b| b.contains("nowhere")), "{broken:?}");
}

/// The committed reference pages are what the binary generates from its own definitions, and
/// each is in the book's table of contents.
#[tokio::test(flavor = "multi_thread")]
async fn the_reference_pages_are_generated_from_the_command_line() {
    let out = tempfile::tempdir().expect("tempdir");
    let mut cmd = tokio::process::Command::new(quarry_bin());
    cmd.args(["self-docs", "--out"]).arg(out.path());
    assert_success(&run(cmd, Duration::from_secs(60)).await, "quarry self-docs");
    let committed = workspace_root().join("docs/guide/src/reference");
    let summary = std::fs::read_to_string(workspace_root().join("docs/guide/src/SUMMARY.md")).expect("SUMMARY.md");
    let read_dir = |dir: &Path| -> BTreeMap<String, String> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "md"))
                    .map(|p| {
                        (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap())
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let generated = read_dir(out.path());
    let on_disk = read_dir(&committed);
    let names = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&on_disk),
        names(&generated),
        "docs/guide/src/reference/ is stale: run `cargo run -p quarry -- self-docs`"
    );
    for (name, text) in &generated {
        assert!(
            on_disk[name] == *text,
            "docs/guide/src/reference/{name} is stale: run `cargo run -p quarry -- self-docs`"
        );
        assert!(summary.contains(&format!("(reference/{name})")), "SUMMARY.md does not list reference/{name}");
    }
}
