//! One origin per project: a composed set of indexes (a channel's root plus a base index such as
//! `python-deps/`, read by clients with `--index-url` and `--extra-index-url`) must not offer a
//! project from two of them, or a client picks whichever it likes best (dependency confusion).
//!
//! Projects are read from each root's committed state: a pip root's by their PEP 503 normalized
//! distribution names, an apt or dnf root's by package name. Roots of different kinds never
//! conflict (pip and apt name different things).

use std::collections::{BTreeMap, BTreeSet};

use quarry_packaging::DistFilename;
use quarry_store::{Store, StoreError};

use crate::state::io::read_state;
use crate::state::root::{RepoKind, RepoRoot};
use crate::state::{Entry, RepoState};

/// A project that two composed roots both supply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[error("{project} is supplied by both {first} and {second}: a composed index takes each project from one origin")]
pub struct OriginConflict {
    /// The project (pip: normalized name; apt/dnf: the package name).
    pub project: String,
    /// The first root (in the order given) that supplies it.
    pub first: String,
    /// The other root that supplies it.
    pub second: String,
}

/// Why the origins could not be checked, or the first conflict found.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error(transparent)]
    Conflict(#[from] OriginConflict),
    #[error("reading the state of {root}")]
    State { root: String, source: StoreError },
}

/// The project name an entry belongs to in a root of `kind`, if it names one.
pub fn entry_project(kind: RepoKind, entry: &Entry) -> Option<String> {
    match kind {
        RepoKind::Pip => entry.filename.parse::<DistFilename>().ok().map(|f| f.name().as_str().to_owned()),
        RepoKind::Apt => entry.deb.as_ref().map(|d| d.package().to_owned()).filter(|p| !p.is_empty()),
        RepoKind::Dnf => entry.rpm_info().map(|r| r.name.clone()),
    }
}

/// The projects a root's state supplies.
pub fn projects(kind: RepoKind, state: &RepoState) -> BTreeSet<String> {
    state.entries.values().filter_map(|e| entry_project(kind, e)).collect()
}

/// Every project two of `sets` (root, kind, projects) supply, in the order given: each
/// conflict names the first root holding the project and a later one.
pub fn conflicts(sets: &[(String, RepoKind, BTreeSet<String>)]) -> Vec<OriginConflict> {
    let mut seen: BTreeMap<(RepoKind, &str), &str> = BTreeMap::new();
    let mut found = Vec::new();
    for (root, kind, projects) in sets {
        for project in projects {
            match seen.get(&(*kind, project.as_str())) {
                Some(first) if *first != root.as_str() => found.push(OriginConflict {
                    project: project.clone(),
                    first: (*first).to_owned(),
                    second: root.clone(),
                }),
                Some(_) => {}
                None => {
                    seen.insert((*kind, project.as_str()), root.as_str());
                }
            }
        }
    }
    found
}

/// Read each root's state and list every project that two of them supply (a root never
/// indexed supplies nothing).
pub async fn find_conflicts(store: &dyn Store, roots: &[RepoRoot]) -> Result<Vec<OriginConflict>, OriginError> {
    let mut sets = Vec::with_capacity(roots.len());
    for root in roots {
        let state = read_state(store, root)
            .await
            .map_err(|source| OriginError::State { root: root.to_string(), source })?
            .unwrap_or_default();
        sets.push((root.to_string(), root.kind(), projects(root.kind(), &state)));
    }
    Ok(conflicts(&sets))
}

/// `Ok` when no project is supplied by two of `roots`; else the first conflict.
pub async fn check_one_origin(store: &dyn Store, roots: &[RepoRoot]) -> Result<(), OriginError> {
    match find_conflicts(store, roots).await?.into_iter().next() {
        Some(conflict) => Err(conflict.into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(root: &str, kind: RepoKind, names: &[&str]) -> (String, RepoKind, BTreeSet<String>) {
        (root.into(), kind, names.iter().map(|n| (*n).to_owned()).collect())
    }

    #[test]
    fn a_project_in_two_roots_is_named_with_both() {
        let found = conflicts(&[
            set("v2/gfx94X/", RepoKind::Pip, &["foo", "rocm"]),
            set("python-deps/", RepoKind::Pip, &["foo", "numpy"]),
            set("v3/packages/deb/", RepoKind::Apt, &["numpy"]),
        ]);
        assert_eq!(
            found,
            vec![OriginConflict { project: "foo".into(), first: "v2/gfx94X/".into(), second: "python-deps/".into() }]
        );
        assert_eq!(
            found[0].to_string(),
            "foo is supplied by both v2/gfx94X/ and python-deps/: a composed index takes each project from one origin"
        );
    }

    #[test]
    fn pip_names_are_normalized_from_file_names() {
        let mut state = RepoState::empty();
        for name in ["Foo.Bar-1.0-py3-none-any.whl", "foo_bar-2.0.tar.gz", "baz-1.0-py3-none-any.whl"] {
            state.entries.insert(name.into(), crate::state::test_entry(name));
        }
        assert_eq!(projects(RepoKind::Pip, &state).into_iter().collect::<Vec<_>>(), ["baz", "foo-bar"]);
        assert!(conflicts(&[set("a/", RepoKind::Pip, &["x"]), set("a/", RepoKind::Pip, &["x"])]).is_empty());
    }
}
