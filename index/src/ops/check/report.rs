//! What an audit found ([`CheckReport`]), and what the pip and native audits share: reading
//! a root's committed state, unescaping a page's attributes.

use quarry_store::{Store, StoreError};
use serde::Serialize;

use crate::state::RepoState;
use crate::state::root::RepoRoot;

/// What [`super::check`] found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckReport {
    pub root: String,
    /// Distribution files in the listing.
    pub files: usize,
    /// HTML pages (apt and dnf: documents) read.
    pub pages: usize,
    /// One line per problem; empty when the root is consistent.
    pub problems: Vec<String>,
}

/// The words that mark a problem a client trips over (see [`CheckReport::dangling`]).
pub(crate) const MISSING_FILE: &str = "links to missing";
pub(crate) const MISSING_METADATA: &str = "advertises missing";
/// A page another page links to is missing: `{page} is missing and {from} links to it`.
pub(crate) const MISSING_LINKED: &str = " links to it";

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problems a client trips over: a link to a missing file or page, or an advertised
    /// `.metadata` that is not there. (A state lagging behind the listing is not one of them:
    /// the pages are merely behind.)
    pub fn dangling(&self) -> Vec<&str> {
        self.problems
            .iter()
            .map(String::as_str)
            .filter(|p| p.contains(MISSING_FILE) || p.contains(MISSING_METADATA) || p.ends_with(MISSING_LINKED))
            .collect()
    }
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} files, {} pages, {} problems", self.root, self.files, self.pages, self.problems.len())?;
        for p in &self.problems {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

pub(crate) fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The root's committed state; `None` (and a problem when there are files) if it has none.
pub(crate) async fn committed_state(
    store: &dyn Store,
    root: &RepoRoot,
    files: usize,
    report: &mut CheckReport,
) -> Result<Option<RepoState>, StoreError> {
    let state = crate::read_state(store, root).await?;
    if state.is_none() && files > 0 {
        report.problems.push(format!("{files} files but no readable state: never indexed"));
    }
    Ok(state)
}
