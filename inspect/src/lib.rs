//! The parsers of untrusted package bytes, each bounded in what it reads and holds: what the
//! indexer, the server and `fuzz/` share.
//!
//! - [`wheel`]: a wheel's METADATA (and a variant wheel's `variants.json`) from its zip
//!   central directory with ranged reads, never downloading the wheel; an sdist's PKG-INFO.
//! - [`metadata`]: core metadata (`METADATA`, `PKG-INFO`) parsed and checked against the name.
//! - [`variant`]: PEP 825 variant metadata and its merging across a release.
//! - [`deb`]: a `.deb`'s control stanza (ar members walked, the control member decompressed
//!   under a cap) and dpkg's control-file rules.
//! - [`rpmhead`]: an `.rpm`'s lead, signature and header, read to their end only.
//! - [`simple_page`]: an upstream index's project page (PEP 691 JSON, PEP 503 HTML), the
//!   files it offers with their hashes, sizes and metadata offers.
//! - [`source`]: where those bytes come from (a store object by ranges, or memory), hashed as
//!   they are read.
//!
//! Invariant: nothing here writes; every size read is bounded by a constant of its module, and
//! every error names what was wrong with the input.

pub mod deb;
pub mod metadata;
pub mod rpmhead;
pub mod simple_page;
pub mod source;
pub mod variant;
pub mod wheel;

pub use metadata::{CoreMetadata, MetadataError};
pub use wheel::{
    MAX_CENTRAL_DIRECTORY, MAX_MEMBERS, MAX_METADATA_SIZE, MAX_SDIST_MEMBERS, MAX_SDIST_UNPACKED, SdistError,
    WheelError, WheelMetadata, check_sdist, check_sdist_bytes, read_wheel_metadata, read_wheel_metadata_from_bytes,
};
