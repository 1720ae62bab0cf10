//! [`quarry_artifacts::resolve::resolve_link`] over a random tree of directories, files and
//! links below a floor (`w/f` of a virtual root that also holds `w/o/secret` outside it).
//! Input: lines `path/` (a directory), `path` (a file), `path -> target` (a link), paths
//! relative to the floor; the last line is the query `link -> target`. It must never panic or
//! loop (lookups are bounded), never answer a path with an empty, `.` or `..` component, and
//! whenever it accepts a link, a kernel-like walk of the same tree (links followed, physical
//! `..`, `..` at the root staying there, absolute targets from the root) that gets anywhere
//! must get exactly where it said: inside the floor.
#![no_main]

use std::cell::Cell;
use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use quarry_artifacts::resolve::{MAX_HOPS, MAX_TARGET, Node, resolve_link};

const FLOOR: &str = "w/f";

fn valid(path: &str) -> bool {
    !path.is_empty() && path.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Puts `node` at `FLOOR/path` when every parent is (or can be made) a directory.
fn place(tree: &mut BTreeMap<String, Node>, path: &str, node: Node) -> bool {
    let full = format!("{FLOOR}/{path}");
    let parts: Vec<&str> = full.split('/').collect();
    for end in 1..parts.len() {
        let parent = parts[..end].join("/");
        match tree.get(&parent) {
            Some(Node::Dir) => {}
            None => {
                tree.insert(parent, Node::Dir);
            }
            Some(_) => return false,
        }
    }
    tree.entry(full).or_insert(node);
    true
}

/// Where the kernel's walk from directory `start` through `target` ends, if it succeeds.
fn kernel(tree: &BTreeMap<String, Node>, start: &str, target: &str) -> Option<String> {
    let mut at: Vec<String> = start.split('/').filter(|c| !c.is_empty()).map(str::to_owned).collect();
    let mut todo: Vec<String> = target.split('/').rev().map(str::to_owned).collect();
    if target.starts_with('/') {
        at.clear();
    }
    let mut hops = 0;
    while let Some(part) = todo.pop() {
        match part.as_str() {
            "" | "." => {}
            ".." => {
                at.pop();
            }
            _ => {
                at.push(part);
                let last = todo.iter().all(|c| c.is_empty() || c == ".");
                match tree.get(&at.join("/")) {
                    Some(Node::Dir) => {}
                    None | Some(Node::Missing) | Some(Node::File) if last => {}
                    None | Some(Node::Missing) | Some(Node::File) => return None,
                    Some(Node::Link(next)) => {
                        hops += 1;
                        if hops > MAX_HOPS {
                            return None;
                        }
                        at.pop();
                        if next.starts_with('/') {
                            at.clear();
                        }
                        todo.extend(next.split('/').rev().map(str::to_owned));
                    }
                }
            }
        }
    }
    Some(at.join("/"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines: Vec<&str> = text.lines().collect();
    let Some((link, target)) = lines.pop().and_then(|q| q.split_once(" -> ")) else { return };
    let mut tree: BTreeMap<String, Node> = BTreeMap::new();
    for (path, node) in [("w", Node::Dir), ("w/f", Node::Dir), ("w/o", Node::Dir), ("w/o/secret", Node::File)] {
        tree.insert(path.to_owned(), node);
    }
    for line in lines.iter().take(64) {
        let (path, node) = match line.split_once(" -> ") {
            Some((path, to)) => (path, Node::Link(to.to_owned())),
            None => match line.strip_suffix('/') {
                Some(path) => (path, Node::Dir),
                None => (*line, Node::File),
            },
        };
        if valid(path) {
            place(&mut tree, path, node);
        }
    }
    // The link's parents are real directories, and nothing is at its path yet (the extractor
    // and the packager make sure).
    if !valid(link) || tree.contains_key(&format!("{FLOOR}/{link}")) || !place(&mut tree, link, Node::Missing) {
        return;
    }
    tree.remove(&format!("{FLOOR}/{link}"));

    let lookups = Cell::new(0usize);
    let result = resolve_link(link, target, |path| {
        lookups.set(lookups.get() + 1);
        let full = format!("{FLOOR}/{path}");
        tree.get(&full).cloned().unwrap_or(Node::Missing)
    });
    assert!(lookups.get() <= (MAX_HOPS + 1) * (MAX_TARGET + 1), "{} lookups", lookups.get());
    let Ok(rel) = result else { return };
    assert!(rel.iter().all(|c| !c.is_empty() && c != "." && c != ".."), "{rel:?}");
    let parent = link.rsplit_once('/').map_or(FLOOR.to_owned(), |(p, _)| format!("{FLOOR}/{p}"));
    if let Some(end) = kernel(&tree, &parent, target) {
        let said = if rel.is_empty() { FLOOR.to_owned() } else { format!("{FLOOR}/{}", rel.join("/")) };
        assert_eq!(end, said, "{link} -> {target} resolved inside, but the walk ends elsewhere");
    }
});
