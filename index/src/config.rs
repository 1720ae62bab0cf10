//! How apt and dnf metadata are published ([`IndexConfig`]), read from the environment with
//! errors that name the variable at fault ([`ConfigError`]).

use std::sync::Arc;

use crate::render::apt::AptOptions;
use crate::render::sign::{KEY_ENV, KEY_FILE_ENV, SignError, Signer};

/// Default grace period for superseded by-hash and repodata files: a day.
pub const DEFAULT_GRACE_SECONDS: i64 = 24 * 60 * 60;

/// The variable holding the grace period in seconds.
pub const GRACE_SECONDS_ENV: &str = "QUARRY_GRACE_SECONDS";
/// The variable holding apt's `Origin` field.
pub const APT_ORIGIN_ENV: &str = "QUARRY_APT_ORIGIN";
/// The variable holding apt's `Label` field.
pub const APT_LABEL_ENV: &str = "QUARRY_APT_LABEL";

/// A setting in the environment that cannot be used, naming its variable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `QUARRY_GRACE_SECONDS` is no whole number.
    #[error("{GRACE_SECONDS_ENV}={value:?} is not a whole number of seconds")]
    GraceSeconds { value: String },
    /// The signing key named by `variable` (`QUARRY_SIGNING_KEY` or `QUARRY_SIGNING_KEY_FILE`)
    /// cannot be read or loaded.
    #[error("{variable}: {source}")]
    SigningKey { variable: &'static str, source: SignError },
}

/// How apt and dnf metadata are published: signing key, Release fields, grace period.
#[derive(Debug, Clone)]
pub struct IndexConfig {
    /// Signs apt (`InRelease`, `Release.gpg`) and dnf (`repomd.xml.asc`) metadata when set.
    pub signer: Option<Arc<Signer>>,
    pub apt: AptOptions,
    /// Seconds a superseded content-addressed output (apt by-hash, dnf repodata) is kept
    /// (0: deleted at once).
    pub grace_seconds: i64,
    /// Whether pip roots get a find-links `index.html`: `None` asks the layout (a configured
    /// root's `find_links`, on for run roots); `Some` decides for every root.
    pub find_links: Option<bool>,
}

impl Default for IndexConfig {
    fn default() -> Self {
        Self { signer: None, apt: AptOptions::default(), grace_seconds: DEFAULT_GRACE_SECONDS, find_links: None }
    }
}

impl IndexConfig {
    /// From the environment: `QUARRY_SIGNING_KEY` (an armored OpenPGP secret key) or
    /// `QUARRY_SIGNING_KEY_FILE`, `QUARRY_APT_ORIGIN`, `QUARRY_APT_LABEL`,
    /// `QUARRY_GRACE_SECONDS`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let mut apt = AptOptions::default();
        if let Ok(origin) = std::env::var(APT_ORIGIN_ENV) {
            apt.origin = origin;
        }
        if let Ok(label) = std::env::var(APT_LABEL_ENV) {
            apt.label = label;
        }
        let grace_seconds = match std::env::var(GRACE_SECONDS_ENV) {
            Ok(value) => value.parse().map_err(|_| ConfigError::GraceSeconds { value })?,
            Err(_) => DEFAULT_GRACE_SECONDS,
        };
        // `Signer::from_env` reads the armored key first, else the file: an error belongs to
        // whichever of the two it read.
        let variable = match std::env::var(KEY_ENV) {
            Ok(text) if !text.trim().is_empty() => KEY_ENV,
            _ => KEY_FILE_ENV,
        };
        let signer = Signer::from_env().map_err(|source| ConfigError::SigningKey { variable, source })?;
        Ok(Self { signer: signer.map(Arc::new), apt, grace_seconds, find_links: None })
    }

    /// Whether the pip root at `root` (a prefix) gets a find-links page: as set here, else as
    /// `layout` configures the root (a run root always does).
    pub fn find_links(&self, layout: &quarry_layout::config::Layout, root: &str) -> bool {
        self.find_links
            .unwrap_or_else(|| layout.rule_for(root.trim_end_matches('/')).is_none_or(|rule| rule.find_links))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_variable() {
        let grace = ConfigError::GraceSeconds { value: "a day".into() };
        assert_eq!(grace.to_string(), "QUARRY_GRACE_SECONDS=\"a day\" is not a whole number of seconds");
        let key = ConfigError::SigningKey { variable: KEY_FILE_ENV, source: SignError::Key("/k.asc: gone".into()) };
        assert_eq!(key.to_string(), "QUARRY_SIGNING_KEY_FILE: cannot read the signing key: /k.asc: gone");
    }
}
