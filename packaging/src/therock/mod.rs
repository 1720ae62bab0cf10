//! TheRock's native packaging model (spec §7): the `package.json` schema and the planning of
//! package variants from the artifacts a run produced, and the artifact names themselves
//! ([`ArtifactName`], `{name}_{component}_{target}`). Pure: callers read the files.

mod artifact;
mod package_json;
mod plan;
pub mod version;
pub mod wheels;

pub use artifact::{ArchiveFormat, ArtifactName, ArtifactNameError, COMPONENTS, GENERIC, base_target};
pub use package_json::{ArtifactRef, ArtifactSubdir, PackageSpec, SchemaError, parse_package_json};
pub use plan::{
    ArtifactIndex, ContentPath, PkgType, Plan, PlanError, PlanOptions, PlannedPackage, Variant, Versions, arch_tag,
    plan,
};

/// TheRock's own `package.json` (81 packages; `packaging/data/therock/SOURCE.txt`).
pub const THEROCK_PACKAGE_JSON: &str = include_str!("../../data/therock/package.json");
