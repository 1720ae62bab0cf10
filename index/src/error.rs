//! The indexer's errors: what fails a reindex ([`IndexError`]) and what keeps one file out of
//! the index ([`InspectError`]).

use quarry_store::StoreError;

use crate::render::sign::SignError;

/// Why a reindex failed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Key(#[from] quarry_store::KeyError),
    #[error(
        "store {0} cannot do conditional writes; refusing to index it, since concurrent indexers would lose entries"
    )]
    UnsafeStore(String),
    #[error("gave up on {root} after {attempts} attempts that each lost a race with another indexer")]
    TooManyConflicts { root: String, attempts: u32 },
    #[error(transparent)]
    Sign(#[from] SignError),
    /// The state read holds a record that does not read (a damaged state): the reindex starts
    /// over from an empty one.
    #[error("the state of the root is damaged: {0}")]
    DamagedState(String),
}

impl From<crate::render::dnf::DnfError> for IndexError {
    fn from(e: crate::render::dnf::DnfError) -> Self {
        match e {
            crate::render::dnf::DnfError::Sign(e) => Self::Sign(e),
            e @ crate::render::dnf::DnfError::Record(_) => Self::DamagedState(e.to_string()),
        }
    }
}

/// Why one file was refused, or the store error that kept it from being read.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("{0}")]
    Rejected(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}
