//! The house's shape, checked on every run: storage knows nothing of TheRock, the upload
//! client does not compile the server, and no two source files import each other, directly or
//! in a loop.
//!
//! The import graph is read from the source as a reader would: every `use crate::…`,
//! `use super::…` and inline `crate::…`/`super::…` path of a shipped file (test modules left
//! out) is resolved to the file that defines the module it names, following `pub use`
//! re-exports to the file the item comes from. `mod` declarations are not imports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (this suite's crate lives in `tests/`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// The workspace crates `cargo tree` shows below `package` (normal dependencies).
fn dependencies(package: &str) -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace())
        .args(["tree", "--offline", "--locked", "-e", "normal", "--prefix", "none", "-f", "{p}", "-p", package])
        .output()
        .expect("running cargo tree");
    assert!(out.status.success(), "cargo tree -p {package}: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("cargo tree prints UTF-8");
    text.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_owned).collect()
}

#[test]
fn storage_knows_nothing_of_therock_and_the_upload_client_no_server() {
    let store = dependencies("quarry-store");
    let quarry: Vec<&String> = store.iter().filter(|c| c.starts_with("quarry-") && *c != "quarry-store").collect();
    assert!(quarry.is_empty(), "quarry-store depends on {quarry:?}");
    let upload = dependencies("quarry-upload");
    for server in ["quarry-index-server", "axum"] {
        assert!(!upload.contains(server), "quarry-upload compiles {server}");
    }
    assert!(upload.contains("quarry-wire"), "the wire types come from quarry-wire");
    let layout = dependencies("quarry-layout");
    assert!(layout.contains("quarry-store"), "the layout stands on the store");
}

/// A file's module path inside its crate: `src/lib.rs` → `[]`, `src/a/mod.rs` and `src/a.rs`
/// → `[a]`, `src/a/b.rs` → `[a, b]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).expect("a file under src/");
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if !matches!(stem, "lib" | "main" | "mod") {
        parts.push(stem.to_owned());
    }
    parts
}

/// The text of a shipped file: its `#[cfg(test)]` items left out (rustfmt keeps them at the
/// top level, their closing brace at column 0).
fn shipped(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(all(test") {
            // Skip the item: to its closing line at column 0 (or its `;`).
            for item in lines.by_ref() {
                if item == "}" || (!item.starts_with(' ') && item.ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        // A line comment is no import.
        let code = line.split("//").next().unwrap_or_default();
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Every path a `use` item names, its braces expanded: `use a::{b, c::{d, e as f}};` →
/// `a::b`, `a::c::d`, `a::c::e`.
fn expand_use(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base = join(prefix, head);
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&inner[start..i], &base, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&inner[start..], &base, out);
    } else if !tree.is_empty() {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        let path = path.strip_suffix("::self").unwrap_or(path);
        if path == "self" {
            out.push(prefix.to_owned());
        } else {
            out.push(join(prefix, path));
        }
    }
}

fn join(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_owned(),
        (_, true) => prefix.to_owned(),
        _ => format!("{prefix}::{path}"),
    }
}

/// The `crate::`/`super::`/`self::` paths a file's code names: its `use` items expanded, and
/// inline paths.
fn paths_named(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().last();
        let after = &rest[at + 4..];
        let Some(end) = after.find(';') else { break };
        if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
            let tree: String = after[..end].split_whitespace().collect::<Vec<_>>().join(" ");
            if tree.starts_with("crate::") || tree.starts_with("super::") || tree.starts_with("self::") {
                expand_use(&tree, "", &mut out);
            }
        }
        rest = &after[end..];
    }
    let bytes = code.as_bytes();
    for anchor in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(anchor) {
            let start = from + found;
            from = start + anchor.len();
            if start > 0
                && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_' || bytes[start - 1] == b':')
            {
                continue;
            }
            let end = code[start..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| start + e);
            out.push(code[start..end].trim_end_matches(':').to_owned());
        }
    }
    out
}

/// One crate's modules: module path → (file, `pub use` re-exports name → path).
struct Crate {
    files: BTreeMap<Vec<String>, PathBuf>,
    reexports: BTreeMap<Vec<String>, BTreeMap<String, Vec<String>>>,
    named: BTreeMap<Vec<String>, Vec<Vec<String>>>,
}

/// A path as segments from the crate root, read in `module`: `crate::a::B` → `[a, B]`,
/// `super::b` → the parent's `b`.
fn absolute(module: &[String], is_dir_module: bool, path: &str) -> Option<Vec<String>> {
    let mut segments = path.split("::").filter(|s| !s.is_empty());
    let mut base: Vec<String> = module.to_vec();
    match segments.next()? {
        "crate" => base.clear(),
        "self" => {}
        "super" => {
            base.pop();
            let _ = is_dir_module;
            for s in segments.clone() {
                if s != "super" {
                    break;
                }
                base.pop();
                segments.next();
            }
        }
        _ => return None,
    }
    base.extend(segments.map(str::to_owned));
    Some(base)
}

impl Crate {
    fn read(src: &Path) -> Self {
        let mut files = BTreeMap::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("reading a source directory") {
                let path = entry.expect("a directory entry").path();
                let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
                if path.is_dir() {
                    if name != "snapshots" && name != "tests" && name != "bin" {
                        stack.push(path);
                    }
                } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                    files.insert(module_of(src, &path), path);
                }
            }
        }
        let mut reexports = BTreeMap::new();
        let mut named = BTreeMap::new();
        for (module, file) in &files {
            let code = shipped(&std::fs::read_to_string(file).expect("reading a source file"));
            let dir_module = file.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs" || n == "main.rs");
            let mut own = BTreeMap::new();
            for line in code.split(';') {
                let line = line.trim();
                let Some(tree) = line.strip_prefix("pub use ").or_else(|| line.strip_prefix("pub(crate) use ")) else {
                    continue;
                };
                let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
                let mut paths = Vec::new();
                expand_use(&tree, "", &mut paths);
                for p in paths {
                    let name = tree_alias(&tree, &p);
                    if let Some(abs) = absolute(module, dir_module, &p).or_else(|| local(module, &p)) {
                        own.insert(name, abs);
                    }
                }
            }
            reexports.insert(module.clone(), own);
            let paths = paths_named(&code).iter().filter_map(|p| absolute(module, dir_module, p)).collect();
            named.insert(module.clone(), paths);
        }
        Self { files, reexports, named }
    }

    /// The module (a key of `files`) defining what `path` names, re-exports followed.
    fn resolve(&self, path: &[String], depth: usize) -> Option<Vec<String>> {
        let module = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|m| self.files.contains_key(m))?;
        let rest = &path[module.len()..];
        if depth < 8
            && let Some(first) = rest.first()
            && let Some(target) = self.reexports.get(&module).and_then(|r| r.get(first))
        {
            let mut full = target.clone();
            full.extend(rest[1..].iter().cloned());
            return self.resolve(&full, depth + 1).or(Some(module));
        }
        Some(module)
    }

    /// file → files it imports (itself and its own submodules' declarations left out).
    fn edges(&self) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
        let mut edges = BTreeMap::new();
        for (module, paths) in &self.named {
            let from = &self.files[module];
            let targets = edges.entry(from.clone()).or_insert_with(BTreeSet::new);
            for path in paths {
                if let Some(target) = self.resolve(path, 0)
                    && &target != module
                {
                    targets.insert(self.files[&target].clone());
                }
            }
        }
        edges
    }
}

/// The name a `use` path binds (its alias, else its last segment).
fn tree_alias(tree: &str, path: &str) -> String {
    let last = path.rsplit("::").next().unwrap_or(path).to_owned();
    let marker = format!("{last} as ");
    match tree.find(&marker) {
        Some(at) => tree[at + marker.len()..]
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap_or(&last)
            .to_owned(),
        None => last,
    }
}

/// A `pub use child::Item` path relative to the module itself.
fn local(module: &[String], path: &str) -> Option<Vec<String>> {
    let first = path.split("::").next()?;
    if first.chars().next()?.is_lowercase()
        && !["std", "core", "alloc"].contains(&first)
        && !first.starts_with("quarry")
    {
        let mut full = module.to_vec();
        full.extend(path.split("::").map(str::to_owned));
        return Some(full);
    }
    None
}

/// The strongly connected groups of more than one file (Tarjan).
fn circles(edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(w: &mut Walk<'a>, v: &'a PathBuf) {
        let n = w.index.len();
        w.index.insert(v, n);
        w.low.insert(v, n);
        w.stack.push(v);
        w.on_stack.insert(v);
        let edges = w.edges;
        for next in edges.get(v).into_iter().flatten() {
            if !w.index.contains_key(next) {
                visit(w, next);
                let low = w.low[v].min(w.low[next]);
                w.low.insert(v, low);
            } else if w.on_stack.contains(next) {
                let low = w.low[v].min(w.index[next]);
                w.low.insert(v, low);
            }
        }
        if w.low[v] == w.index[v] {
            let mut group = Vec::new();
            while let Some(top) = w.stack.pop() {
                w.on_stack.remove(top);
                group.push(top.clone());
                if top == v {
                    break;
                }
            }
            if group.len() > 1 {
                group.sort();
                w.found.push(group);
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            visit(&mut walk, v);
        }
    }
    walk.found
}

/// The circles of one crate's `src/`, as paths relative to `root`.
fn crate_circles(src: &Path, root: &Path) -> Vec<Vec<String>> {
    let shown = |p: &PathBuf| p.strip_prefix(root).unwrap_or(p).display().to_string();
    circles(&Crate::read(src).edges()).iter().map(|group| group.iter().map(shown).collect()).collect()
}

#[test]
fn no_two_files_import_each_other() {
    // QUARRY_STRUCTURE_ROOT: check another checkout of the workspace instead.
    let root = std::env::var_os("QUARRY_STRUCTURE_ROOT").map_or_else(workspace, PathBuf::from);
    let mut found = Vec::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(&root).expect("reading the workspace") {
        let dir = entry.expect("a directory entry").path();
        let src = dir.join("src");
        if dir.join("Cargo.toml").is_file() && src.is_dir() && !dir.ends_with("tests") {
            crates += 1;
            found.extend(crate_circles(&src, &root));
        }
    }
    assert!(crates >= 10, "found only {crates} crates under {}", root.display());
    assert!(found.is_empty(), "files importing each other: {found:#?}");
}

/// The checker itself: a direct pair, a loop of three through a re-export and `super::`, and
/// a tree without one.
#[test]
fn the_import_check_finds_circles() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let src = tmp.path().join("src");
    let write = |path: &str, text: &str| {
        let file = src.join(path);
        std::fs::create_dir_all(file.parent().expect("a parent")).expect("mkdir");
        std::fs::write(file, text).expect("write");
    };
    write("lib.rs", "mod a;\nmod b;\nmod w;\npub use w::x::Thing;\n");
    write("a.rs", "use crate::b::{self, Beta};\npub struct Alpha;\n");
    write("b.rs", "pub struct Beta(crate::a::Alpha);\n#[cfg(test)]\nmod tests {\n    use crate::w::y;\n}\n");
    write("w/mod.rs", "pub mod x;\npub mod y;\npub mod z;\n");
    write("w/x.rs", "use super::y::Why;\npub struct Thing;\n");
    write("w/y.rs", "pub struct Why(super::z::Zed);\n");
    write("w/z.rs", "// crate::a::Alpha in a comment\npub struct Zed(crate::Thing);\n");
    let mut found = crate_circles(&src, tmp.path());
    found.sort();
    assert_eq!(found, vec![vec!["src/a.rs", "src/b.rs"], vec!["src/w/x.rs", "src/w/y.rs", "src/w/z.rs"]]);

    write("w/z.rs", "pub struct Zed;\n");
    write("b.rs", "pub struct Beta;\n");
    assert!(crate_circles(&src, tmp.path()).is_empty());
}

/// ARCHITECTURE.md stays a map: at most 30 KB, no paragraph of prose over 1,200 characters
/// (code blocks and tables are not paragraphs), and every crate of the workspace has its
/// section with at least one invariant.
#[test]
fn the_architecture_map_stays_a_map() {
    let root = workspace();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("reading ARCHITECTURE.md");
    assert!(text.len() <= 30_000, "ARCHITECTURE.md is {} bytes", text.len());
    let mut in_code = false;
    let mut paragraph = String::new();
    let mut longest = (0, String::new());
    for line in text.lines().chain(std::iter::once("")) {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || line.starts_with('|') {
            continue;
        }
        if line.trim().is_empty() {
            let n = paragraph.chars().count();
            if n > longest.0 {
                longest = (n, paragraph.chars().take(80).collect());
            }
            paragraph.clear();
        } else {
            paragraph.push_str(line);
            paragraph.push(' ');
        }
    }
    assert!(longest.0 <= 1_200, "a paragraph of {} characters: {:?}…", longest.0, longest.1);
    let sections: Vec<&str> = text.split("\n### ").skip(1).collect();
    for entry in std::fs::read_dir(&root).expect("reading the workspace") {
        let dir = entry.expect("a directory entry").path();
        let name = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if !dir.join("Cargo.toml").is_file() || ["tests", "fuzz"].contains(&name.as_str()) {
            continue;
        }
        let heading = format!("`{name}/`");
        let section = sections.iter().find(|s| s.starts_with(&heading));
        let section = section.unwrap_or_else(|| panic!("ARCHITECTURE.md has no section for {name}/"));
        assert!(section.contains("**Architecture Invariant:**"), "the section of {name}/ states no invariant");
    }
}

/// Where shipped code keeps a process-wide layout: a `static` (or `OnceLock`/`LazyLock`)
/// holding a `Layout`, or a call of the old accessors (`configured()`, `install(…)`,
/// `current()`), as `file:line: text` under `root`'s crates.
fn layout_globals(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(root).expect("reading the workspace") {
        let dir = entry.expect("a directory entry").path();
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() && !dir.ends_with("tests") {
            files.extend(rust_files(&dir.join("src")));
        }
    }
    for file in files {
        if file.file_stem().is_some_and(|s| s.to_string_lossy().ends_with("_tests")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("reading a source file");
        for (n, line) in shipped(&text).lines().enumerate() {
            let item = line.trim_start().trim_start_matches("pub ").trim_start_matches("pub(crate) ");
            let global = (item.starts_with("static ") || line.contains("OnceLock<") || line.contains("LazyLock<"))
                && line.contains("Layout");
            let accessor = ["configured()", "config::install(", "layout::current()", "quarry_layout::current()"]
                .iter()
                .any(|call| line.contains(call));
            if global || accessor {
                let shown = file.strip_prefix(root).unwrap_or(&file).display().to_string();
                found.push(format!("{shown}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("reading a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The `[layout]` is a value passed down (an `Indexer`'s, the server's state's, the Lambda
/// handler's), never a process global: no shipped code keeps one or asks for one.
#[test]
fn no_process_wide_layout_remains() {
    // QUARRY_STRUCTURE_ROOT: check another checkout of the workspace instead.
    let root = std::env::var_os("QUARRY_STRUCTURE_ROOT").map_or_else(workspace, PathBuf::from);
    let found = layout_globals(&root);
    assert!(found.is_empty(), "a process-wide layout: {found:#?}");
}

/// The checker itself finds a layout kept in a static and a call of the old accessor, and
/// leaves a layout passed as a value (and test code) alone.
#[test]
fn the_layout_global_check_finds_one() {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let src = tmp.path().join("demo/src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(tmp.path().join("demo/Cargo.toml"), "").expect("write");
    let lib = "pub fn f(layout: &Layout) -> bool {\n    layout.runs\n}\n\
               #[cfg(test)]\nmod tests {\n    static L: OnceLock<Layout> = OnceLock::new();\n}\n";
    std::fs::write(src.join("lib.rs"), lib).expect("write");
    assert!(layout_globals(tmp.path()).is_empty());
    let global = "static INSTALLED: OnceLock<Layout> = OnceLock::new();\n\
                  pub fn g() -> bool {\n    quarry_layout::config::configured().runs\n}\n\
                  pub fn h(l: &Layout) -> Result<&'static str, LayoutError> {\n    todo!()\n}\n";
    std::fs::write(src.join("global.rs"), global).expect("write");
    assert_eq!(layout_globals(tmp.path()).len(), 2, "{:?}", layout_globals(tmp.path()));
}
