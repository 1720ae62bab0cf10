//! Artifact names: `{name}_{component}_{target}` (spec §3). Owned by
//! `quarry_packaging::therock` (pure, shared with the package planning); re-exported here so
//! every user of archives finds them beside the archive code.

pub use quarry_packaging::therock::{ArchiveFormat, ArtifactName, ArtifactNameError, COMPONENTS};

use crate::ArtifactError;

impl From<ArtifactNameError> for ArtifactError {
    fn from(e: ArtifactNameError) -> Self {
        ArtifactError::BadName(e.0)
    }
}
