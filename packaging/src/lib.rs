//! Quarry's domain types. Pure: nothing here touches a file, a socket or a clock.
//!
//! - [`PackageName`]: a PEP 503 normalized project name.
//! - [`WheelFilename`], [`SdistFilename`], [`DistFilename`]: Python distribution filenames,
//!   parsed once and round-tripped through `FromStr` / `Display`.
//! - [`Version`]: PEP 440 versions (re-exported from `pep440_rs`).
//! - [`DebVersion`]: Debian versions, ordered as `dpkg --compare-versions` orders them.
//! - [`therock`]: TheRock's `package.json` and the planning of native package variants.

mod debversion;
mod filename;
mod name;
pub mod therock;

pub use debversion::{DebVersion, DebVersionError};
pub use filename::{
    DistFilename, FilenameError, NULL_VARIANT_LABEL, SdistFilename, WheelFilename, is_variant_label, variants_json_name,
};
pub use name::{NameError, PackageName};
pub use pep440_rs::{Version, VersionSpecifiers};
