use std::fmt;
use std::str::FromStr;

/// A project name normalized per PEP 503: lowercase, every run of `-`, `_` and `.` collapsed
/// into a single `-`.
///
/// The original spelling is not kept: two names that normalize alike are the same project.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct PackageName(String);

/// Why a string is not a valid project name (PEP 508: ASCII letters, digits, `-`, `_`, `.`,
/// starting and ending with a letter or digit).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("project name is empty")]
    Empty,
    #[error("project name {0:?} contains {1:?}; only ASCII letters, digits, '-', '_' and '.' are allowed")]
    InvalidCharacter(String, char),
    #[error("project name {0:?} must start and end with a letter or digit")]
    BadEdge(String),
}

impl PackageName {
    /// Validate and normalize a project name.
    pub fn new(raw: &str) -> Result<Self, NameError> {
        let first = raw.chars().next().ok_or(NameError::Empty)?;
        if let Some(bad) = raw.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))) {
            return Err(NameError::InvalidCharacter(raw.to_owned(), bad));
        }
        let last = raw.chars().next_back().unwrap_or(first);
        if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
            return Err(NameError::BadEdge(raw.to_owned()));
        }
        Ok(Self(normalize(raw)))
    }

    /// The normalized name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when `raw` is already in normalized form (so no redirect is needed).
    pub fn is_normalized(raw: &str) -> bool {
        normalize(raw) == raw
    }
}

fn normalize(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut in_sep = false;
    for c in raw.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !in_sep {
                out.push('-');
            }
            in_sep = true;
        } else {
            out.push(c.to_ascii_lowercase());
            in_sep = false;
        }
    }
    out
}

impl FromStr for PackageName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for PackageName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for PackageName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_pep503_examples() {
        for raw in [
            "friendly-bard",
            "Friendly-Bard",
            "FRIENDLY-BARD",
            "friendly.bard",
            "friendly_bard",
            "friendly--bard",
            "FrIeNdLy-._.-bArD",
        ] {
            assert_eq!(PackageName::new(raw).unwrap().as_str(), "friendly-bard", "{raw}");
        }
        assert_eq!(PackageName::new("Foo.Bar_baz").unwrap().as_str(), "foo-bar-baz");
        assert!(PackageName::is_normalized("foo-bar-baz"));
        assert!(!PackageName::is_normalized("Foo.Bar_baz"));
    }

    #[test]
    fn rejects_bad_names() {
        insta::assert_snapshot!(PackageName::new("").unwrap_err(), @"project name is empty");
        insta::assert_snapshot!(PackageName::new("../etc").unwrap_err(), @r#"project name "../etc" contains '/'; only ASCII letters, digits, '-', '_' and '.' are allowed"#);
        insta::assert_snapshot!(PackageName::new("-foo").unwrap_err(), @r#"project name "-foo" must start and end with a letter or digit"#);
        insta::assert_snapshot!(PackageName::new("foo bar").unwrap_err(), @r#"project name "foo bar" contains ' '; only ASCII letters, digits, '-', '_' and '.' are allowed"#);
    }
}
