//! Where a symlink leads once the links on its way are followed: [`resolve_link`].
//!
//! A link's target judged as text ([`crate::link_stays_inside`]) can stay inside its root while
//! the link leads outside: `r/d1/…/d16/s -> ../../…` (back at `r`) and then
//! `r/esc -> d1/…/d16/s/../../…` climb as many directories as the second target has `..`,
//! counted from `r` rather than from `d16`. [`resolve_link`] walks the target component by
//! component as the kernel does (physical `..`: the parent of where a link led, not of the
//! link's name), asking `lookup` what each path is, and refuses a link that:
//!
//! - has an empty, absolute or backslashed target, or one longer than [`MAX_TARGET`] bytes
//!   (such a link cannot be made on Linux anyway);
//! - climbs above the floor (the member's root, the package root);
//! - climbs (`..`) out of a path that does not exist, or out of a file: something made there
//!   later (a link) would change where the `..` leads;
//! - goes through more than [`MAX_HOPS`] links (Linux's `ELOOP` bound), so a loop ends.
//!
//! The resolution is sound against what is made after it as long as a directory stays a
//! directory and a symlink is never replaced (the extractor refuses both): every component it
//! followed keeps leading to the same place, and a path that did not exist can only be
//! descended into.
//!
//! Paths are `/`-separated and relative to the floor; the floor itself is `""`. Pure: the
//! caller's `lookup` reads the disk ([`crate::extract`]) or a package's item map
//! (`quarry-builder`'s `tree`).

use std::fmt;

/// Links followed at most while resolving one target (Linux's `MAXSYMLINKS`).
pub const MAX_HOPS: usize = 40;

/// The longest target accepted, in bytes (Linux's `PATH_MAX` less the NUL).
pub const MAX_TARGET: usize = 4095;

/// What a path below the floor is, for [`resolve_link`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A symlink and its target, as stored.
    Link(String),
    Dir,
    File,
    /// Nothing there (or nothing that can be looked at).
    Missing,
}

/// Why [`resolve_link`] refused a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkRefusal {
    /// The target (or one met on the way) is empty, absolute, has a backslash or is too long.
    NotRelative,
    /// The resolution climbs above the floor.
    Climbs,
    /// A `..` follows a path that does not exist (or is a file).
    UpFromMissing,
    /// More than [`MAX_HOPS`] links on the way.
    TooManyLinks,
}

impl fmt::Display for LinkRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LinkRefusal::NotRelative => "a target on the way is empty, absolute, backslashed or too long",
            LinkRefusal::Climbs => "following the links on the way, it climbs above its root",
            LinkRefusal::UpFromMissing => {
                "`..` follows a path that does not exist or is a file (a link made there later would move it)"
            }
            LinkRefusal::TooManyLinks => "more than 40 links on the way (a loop?)",
        })
    }
}

impl std::error::Error for LinkRefusal {}

fn relative_target(target: &str) -> bool {
    !target.is_empty() && target.len() <= MAX_TARGET && !target.starts_with('/') && !target.contains(['\\', '\0'])
}

/// Where the link at `link` (below the floor; its parent directories are real, never links)
/// with `target` leads: the components of the path it resolves to, relative to the floor (the
/// last ones may not exist: a dangling link is accepted). `lookup` says what a path (below the
/// floor, `/`-separated) is; it is asked once per component, in order.
pub fn resolve_link(
    link: &str,
    target: &str,
    mut lookup: impl FnMut(&str) -> Node,
) -> Result<Vec<String>, LinkRefusal> {
    if !relative_target(target) {
        return Err(LinkRefusal::NotRelative);
    }
    let mut at: Vec<String> = link.split('/').filter(|s| !s.is_empty()).map(str::to_owned).collect();
    if at.pop().is_none() {
        return Err(LinkRefusal::Climbs);
    }
    // Components still to walk, the next one last.
    let mut todo: Vec<String> = target.split('/').rev().map(str::to_owned).collect();
    let mut hops = 0;
    // The path so far does not exist, or is a file: only names may follow.
    let mut dead_end = false;
    let mut path = at.join("/");
    while let Some(part) = todo.pop() {
        match part.as_str() {
            "" | "." => {}
            ".." => {
                if dead_end {
                    return Err(LinkRefusal::UpFromMissing);
                }
                at.pop().ok_or(LinkRefusal::Climbs)?;
                path.truncate(path.rfind('/').unwrap_or(0));
            }
            _ => {
                if !path.is_empty() {
                    path.push('/');
                }
                path.push_str(&part);
                at.push(part);
                if dead_end {
                    continue;
                }
                match lookup(&path) {
                    Node::Dir => {}
                    Node::File | Node::Missing => dead_end = true,
                    Node::Link(next) => {
                        hops += 1;
                        if hops > MAX_HOPS {
                            return Err(LinkRefusal::TooManyLinks);
                        }
                        if !relative_target(&next) {
                            return Err(LinkRefusal::NotRelative);
                        }
                        at.pop();
                        path.truncate(path.rfind('/').unwrap_or(0));
                        todo.extend(next.split('/').rev().map(str::to_owned));
                    }
                }
            }
        }
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A tree of `(path, node)`; the parents of every path are directories.
    fn tree(nodes: &[(&str, Node)]) -> impl Fn(&str) -> Node + use<> {
        let mut map: BTreeMap<String, Node> = BTreeMap::new();
        for (path, node) in nodes {
            let mut parent = String::new();
            for part in path.split('/').collect::<Vec<_>>().split_last().map_or(&[][..], |(_, p)| p) {
                if !parent.is_empty() {
                    parent.push('/');
                }
                parent.push_str(part);
                map.entry(parent.clone()).or_insert(Node::Dir);
            }
            map.insert((*path).to_owned(), node.clone());
        }
        move |p: &str| map.get(p).cloned().unwrap_or(Node::Missing)
    }

    fn link(target: &str) -> Node {
        Node::Link(target.to_owned())
    }

    #[test]
    fn plain_links_resolve_where_their_text_says() {
        let t = tree(&[("lib/libfoo.so.1", Node::File), ("lib/llvm/bin/clang", Node::File)]);
        assert_eq!(resolve_link("lib/libfoo.so", "libfoo.so.1", &t).unwrap(), ["lib", "libfoo.so.1"]);
        assert_eq!(resolve_link("bin/clang", "../lib/llvm/bin/clang", &t).unwrap(), ["lib", "llvm", "bin", "clang"]);
        // Dangling, but inside.
        assert_eq!(resolve_link("lib/x", "nothing/here", &t).unwrap(), ["lib", "nothing", "here"]);
        assert_eq!(resolve_link("lib/x", "././/y", &t).unwrap(), ["lib", "y"]);
        assert_eq!(resolve_link("x", "..", &t), Err(LinkRefusal::Climbs));
        for bad in ["", "/etc", "a\\b"] {
            assert_eq!(resolve_link("lib/x", bad, &t), Err(LinkRefusal::NotRelative), "{bad:?}");
        }
        assert_eq!(resolve_link("lib/x", &"a/".repeat(2048), &t), Err(LinkRefusal::NotRelative));
    }

    #[test]
    fn links_on_the_way_are_followed_with_physical_parents() {
        // `lib/llvm` is a directory link; `bin/clang` goes through it.
        let t = tree(&[("llvm/bin/clang", Node::File), ("lib/llvm", link("../llvm"))]);
        assert_eq!(resolve_link("bin/clang", "../lib/llvm/bin/clang", &t).unwrap(), ["llvm", "bin", "clang"]);
        // `..` after a link is the parent of where it led: lib/llvm/.. is the floor, not lib.
        assert_eq!(resolve_link("bin/x", "../lib/llvm/../y", &t).unwrap(), ["y"]);
        assert_eq!(resolve_link("bin/x", "../lib/llvm/../..", &t), Err(LinkRefusal::Climbs));
    }

    #[test]
    fn a_sixteen_level_chain_is_refused() {
        let deep: Vec<String> = (1..=16).map(|i| format!("d{i}")).collect();
        let s = format!("{}/s", deep.join("/"));
        let up16 = vec![".."; 16].join("/");
        let t = tree(&[(s.as_str(), link(&up16))]);
        // The link itself resolves to the floor.
        assert_eq!(resolve_link(&s, &up16, &t).unwrap(), Vec::<String>::new());
        // Through it, 16 more `..` climb out (the text alone says depth 17 - 16 = 1).
        let esc = format!("{s}/{up16}");
        assert_eq!(resolve_link("esc", &esc, &t), Err(LinkRefusal::Climbs));
        assert!(crate::link_stays_inside("esc", &esc), "the textual check alone passes it");
    }

    #[test]
    fn up_from_a_missing_path_or_a_file_is_refused() {
        let t = tree(&[("f", Node::File), ("d/x", Node::File)]);
        assert_eq!(resolve_link("e", "l/..", &t), Err(LinkRefusal::UpFromMissing));
        assert_eq!(resolve_link("e", "f/..", &t), Err(LinkRefusal::UpFromMissing));
        assert_eq!(resolve_link("e", "d/../d/x", &t).unwrap(), ["d", "x"]);
    }

    #[test]
    fn loops_end() {
        let t = tree(&[("a", link("b")), ("b", link("a")), ("c", link("c/x"))]);
        assert_eq!(resolve_link("e", "a", &t), Err(LinkRefusal::TooManyLinks));
        assert_eq!(resolve_link("e", "c", &t), Err(LinkRefusal::TooManyLinks));
        let t = tree(&[("a", link("/etc"))]);
        assert_eq!(resolve_link("e", "a/passwd", &t), Err(LinkRefusal::NotRelative));
    }
}
