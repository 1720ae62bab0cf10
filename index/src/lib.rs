//! Quarry's indexer, in four wings over the parsers of `quarry-inspect`:
//!
//! - [`state`]: a root's committed [`RepoState`] (its [`Entry`]s and refusals, the hash of
//!   every output) and its objects in the store (a pip root's split per project, [`read_state`]),
//!   and the roots themselves ([`RepoRoot`], [`check_key_segments`]);
//! - [`render`]: every page and document rendered from a state, purely: pip's find-links and
//!   PEP 503/691 pages with each variant release's `-variants.json` ([`render()`]; a structured
//!   root's in place, `render::pip::PagePaths`), apt, dnf with chunked compression, signatures,
//!   run listings and tarball indexes;
//! - [`reindex`]: the [`Indexer`], a change's [`Scope`], [`inspect`]ion of new files into
//!   entries, the pure plan, the race-free publish loop, per-project passes and per-family views,
//!   and [`discover_scopes`];
//! - [`ops`]: the audit ([`check()`]), full reconciliation, retention, prune, origins and
//!   promotion.
//!
//! The entry point is [`Indexer::run`] with a [`Request`]: a root, optionally one project of
//! it, forced or not, with files the caller inspected already. It reads the root's state, lists
//! the root, inspects only what is new, plans, publishes the pages whose bytes changed stage by
//! stage, commits the state with a conditional put and deletes what it no longer lists, then
//! refreshes the root's per-family views; race-free over any [`quarry_store::Store`] with
//! conditional puts. [`Indexer::reindex`] is the plain request, and [`Indexer::refresh`] runs a
//! [`Scope`] (a root, one pip project, or a run listing, [`update_listing`]): the dispatch the
//! Lambda, `quarry index` and the server's catch-up use.
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
pub use ops::{audit_log, check, lifecycle, origin, promote, prune, reconcile, retention, versions};
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
