//! TheRock's native packaging model (spec §7): the `package.json` schema and the planning of
//! package variants from the artifacts a run produced. Pure: callers read the files.

mod package_json;
mod plan;
pub mod version;
pub mod wheels;

pub use package_json::{ArtifactRef, ArtifactSubdir, PackageSpec, SchemaError, parse_package_json};
pub use plan::{
    ArtifactIndex, ContentPath, PkgType, Plan, PlanError, PlanOptions, PlannedPackage, Variant, Versions, arch_tag,
    plan,
};

/// Artifact components (`artifact_manifest.txt` directories are `{name}_{component}_{target}`).
pub const COMPONENTS: &[&str] = &["lib", "run", "dbg", "dev", "doc", "test"];

/// TheRock's own `package.json` (81 packages; `packaging/data/therock/SOURCE.txt`).
pub const THEROCK_PACKAGE_JSON: &str = include_str!("../../data/therock/package.json");
