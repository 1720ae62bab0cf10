//! What one reindex did ([`ReindexReport`]): what the plan decided and the publish loop did,
//! folded across attempts and passes.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// What one reindex did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReindexReport {
    pub root: String,
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub rejected: BTreeMap<String, String>,
    pub written: Vec<String>,
    pub deleted: Vec<String>,
    pub attempts: u32,
    /// False when nothing had changed and nothing was written.
    pub committed: bool,
}

impl std::fmt::Display for ReindexReport {
    /// One line: `ROOT: N added, N removed, N rejected, N written, N deleted[ (unchanged)]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} added, {} removed, {} rejected, {} written, {} deleted{}",
            self.root,
            self.added.len(),
            self.removed.len(),
            self.rejected.len(),
            self.written.len(),
            self.deleted.len(),
            if self.committed { "" } else { " (unchanged)" }
        )
    }
}

impl ReindexReport {
    /// Fold a later pass of the same reindex, or another project's reindex of the same root,
    /// into this report.
    pub fn absorb(&mut self, later: ReindexReport) {
        // Sorted and without duplicates, in O(n log n): a from-scratch pass adds every file.
        for (list, more) in [(&mut self.added, later.added), (&mut self.removed, later.removed)] {
            let mut all: BTreeSet<String> = std::mem::take(list).into_iter().collect();
            all.extend(more);
            *list = all.into_iter().collect();
        }
        self.rejected.extend(later.rejected);
        self.written.extend(later.written);
        self.deleted.extend(later.deleted);
        self.committed |= later.committed;
    }
}
