//! Quarry's indexer.
//!
//! - [`inspect`] reads one distribution file into an [`Entry`] (sha256 from store metadata or
//!   streamed; wheel METADATA by ranged reads of the zip central directory).
//! - [`RepoState`] is one root's committed state; [`render()`] turns it into every pip format
//!   (find-links `index.html`, PEP 503 HTML and PEP 691 JSON simple pages, and each variant
//!   release's `{name}-{version}-variants.json`, [`variant`]), purely.
//! - [`Indexer::reindex`] keeps a root's pages in step with its listing, race-free over any
//!   [`quarry_store::Store`] with conditional puts.
//!
//! Nothing here knows HTTP or Lambda.

pub mod apt;
// The untrusted-bytes parsers live in quarry-inspect; these paths stay as they were.
pub use quarry_inspect::{
    CoreMetadata, MAX_CENTRAL_DIRECTORY, MAX_MEMBERS, MAX_METADATA_SIZE, MAX_SDIST_MEMBERS, MAX_SDIST_UNPACKED,
    MetadataError, SdistError, WheelError, WheelMetadata, check_sdist, check_sdist_bytes, deb, read_wheel_metadata,
    read_wheel_metadata_from_bytes, rpmhead, variant,
};
use quarry_inspect::{source, wheel};
pub mod check;
mod check_native;
#[cfg(test)]
mod check_tests;
pub mod chunked;
#[cfg(test)]
mod chunked_tests;
mod config;
mod discover;
pub mod dnf;
mod error;
mod inspect;
pub mod install;
pub mod listing;
mod native;
pub mod origin;
mod plan;
pub mod promote;
pub mod prune;
mod publish;
pub mod reconcile;
pub mod render;
pub mod retention;
mod root;
#[cfg(test)]
mod scale_tests;
mod scope;
pub mod sign;
mod split;
mod state;
mod state_io;
pub mod task;
pub mod view;
#[cfg(test)]
mod view_tests;

pub use check::{CheckReport, check, check_listing};
pub use config::{APT_LABEL_ENV, APT_ORIGIN_ENV, ConfigError, DEFAULT_GRACE_SECONDS, GRACE_SECONDS_ENV, IndexConfig};
pub use discover::{discover, discover_scopes};
pub use error::{IndexError, InspectError};
pub use inspect::{Inspected, Inspections, inspect};
pub use listing::{ListingDir, ListingReport, update_listing};
pub use plan::{LEAVING_SUFFIX, METADATA_SUFFIX, YANK_SUFFIX};
pub use publish::{Indexer, ReindexReport};
pub use render::{Extra, Page, Stage, render, render_with_extra};
pub use root::{APT_STATE_NAME, DNF_STATE_NAME, RepoKind, RepoRoot, STATE_NAME, check_key_segments};
pub use scope::{ProjectScope, Refreshed, Scope};
pub use sign::{SignError, Signer};
pub use state::{Entry, Provenance, Rejected, RepoState, STATE_VERSION, upload_time};
#[doc(hidden)]
pub use state_io::check_halves as fuzz_state_halves;
pub use state_io::{PROJECTS_DIR, SPLIT_VERSION, read_state};
