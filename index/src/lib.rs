//! Quarry's indexer.
//!
//! - [`inspect`] reads one distribution file into an [`Entry`] (sha256 from store metadata or
//!   streamed; wheel METADATA by ranged reads of the zip central directory).
//! - [`RepoState`] is one root's committed state; [`render()`] turns it into every pip format
//!   (find-links `index.html`, PEP 503 HTML and PEP 691 JSON simple pages), purely.
//! - [`Indexer::reindex`] keeps a root's pages in step with its listing, race-free over any
//!   [`quarry_store::Store`] with conditional puts.
//!
//! Nothing here knows HTTP or Lambda.

pub mod apt;
pub mod check;
mod check_native;
pub mod deb;
pub mod dnf;
pub mod listing;
mod metadata;
mod native;
mod reindex;
pub mod render;
pub mod retention;
mod root;
pub mod rpmhead;
pub mod sign;
mod source;
mod state;
mod wheel;

pub use check::{CheckReport, check};
pub use listing::{ListingDir, ListingReport, update_listing};
pub use metadata::{CoreMetadata, MetadataError};
pub use reindex::{
    DEFAULT_GRACE_SECONDS, IndexConfig, IndexError, Indexer, InspectError, Inspected, METADATA_SUFFIX, ReindexReport,
    YANK_SUFFIX, discover, discover_roots, inspect, read_state,
};
pub use render::{Page, Stage, render};
pub use root::{APT_STATE_NAME, DNF_STATE_NAME, RepoKind, RepoRoot, STATE_NAME, check_key_segments};
pub use sign::{SignError, Signer};
pub use state::{Entry, Rejected, RepoState, STATE_VERSION, upload_time};
pub use wheel::{
    MAX_CENTRAL_DIRECTORY, MAX_MEMBERS, MAX_METADATA_SIZE, MAX_SDIST_MEMBERS, MAX_SDIST_UNPACKED, SdistError,
    WheelError, WheelMetadata, check_sdist, check_sdist_bytes, read_wheel_metadata, read_wheel_metadata_from_bytes,
};
