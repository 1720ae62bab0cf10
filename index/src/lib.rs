//! Quarry's indexer, in four wings over the parsers of `quarry-inspect`:
//!
//! - [`state`]: a root's committed [`RepoState`] and its object in the store;
//! - [`render`]: every page and document rendered from a state, purely;
//! - [`reindex`]: a change's scope, inspection, the pure plan and the race-free publish loop;
//! - [`ops`]: the audit, reconciliation, retention, prune, origins and promotion.
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

// The untrusted-bytes parsers live in quarry-inspect; these paths stay as they were.
pub use quarry_inspect::{
    CoreMetadata, MAX_CENTRAL_DIRECTORY, MAX_MEMBERS, MAX_METADATA_SIZE, MAX_SDIST_MEMBERS, MAX_SDIST_UNPACKED,
    MetadataError, SdistError, WheelError, WheelMetadata, check_sdist, check_sdist_bytes, deb, read_wheel_metadata,
    read_wheel_metadata_from_bytes, rpmhead, variant,
};
use quarry_inspect::{source, wheel};

mod config;
mod error;
pub mod ops;
pub mod reindex;
pub mod render;
pub mod state;

// The modules other crates name, at the paths they always had.
pub use ops::{check, origin, promote, prune, reconcile, retention};
pub use reindex::{task, view};
pub use render::{apt, chunked, dnf, install, listing, sign};

pub use config::{APT_LABEL_ENV, APT_ORIGIN_ENV, ConfigError, DEFAULT_GRACE_SECONDS, GRACE_SECONDS_ENV, IndexConfig};
pub use error::{IndexError, InspectError};
pub use ops::check::{CheckReport, check, check_listing};
pub use reindex::discover::{discover, discover_scopes};
pub use reindex::indexer::{Indexer, ProjectScope, Request};
pub use reindex::inspect::{Inspected, Inspections, inspect};
pub use reindex::plan::{LEAVING_SUFFIX, METADATA_SUFFIX, YANK_SUFFIX};
pub use reindex::report::ReindexReport;
pub use reindex::scope::{Refreshed, Scope};
pub use render::listing::{ListingDir, ListingReport, update_listing};
pub use render::pip::{Extra, Page, Stage, render, render_with_extra};
pub use render::sign::{SignError, Signer};
#[doc(hidden)]
pub use state::io::check_halves as fuzz_state_halves;
pub use state::io::{PROJECTS_DIR, SPLIT_VERSION, read_state};
pub use state::root::{APT_STATE_NAME, DNF_STATE_NAME, RepoKind, RepoRoot, STATE_NAME, check_key_segments};
pub use state::{Entry, Provenance, Rejected, RepoState, STATE_VERSION, upload_time};
