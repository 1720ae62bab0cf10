use std::fmt;

use quarry_packaging::DistFilename;
use quarry_store::{Key, KeyError};

/// The name of the state object inside each repo root.
pub const STATE_NAME: &str = ".quarry-index.json";

/// A pip repo root: a store prefix ending in `/` whose direct children are distribution files
/// and under which the indexer writes `index.html`, `simple/` and `.metadata` sidecars.
///
/// TheRock's layout puts them at `{run}-{platform}/python/` (multi-arch) and
/// `{run}-{platform}/python/{group}/` or `python/{group}/` (legacy): any prefix with a `python`
/// segment and no `simple` segment after it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RepoRoot(String);

impl RepoRoot {
    /// A root from a prefix such as `123-linux/python/` (a missing trailing `/` is added).
    pub fn new(prefix: &str) -> Result<Self, KeyError> {
        let trimmed = prefix.trim_end_matches('/');
        let key = Key::new(trimmed)?;
        let segments: Vec<&str> = key.as_str().split('/').collect();
        let python = segments.iter().position(|s| *s == "python");
        let ok = python.is_some_and(|i| !segments[i..].contains(&"simple"));
        if !ok {
            return Err(KeyError {
                key: prefix.to_owned(),
                reason: "a pip repo root needs a 'python' segment (e.g. RUN-linux/python/) and no 'simple' segment after it",
            });
        }
        Ok(Self(format!("{trimmed}/")))
    }

    /// The root a distribution file at `key` belongs to, if any.
    pub fn for_key(key: &Key) -> Option<Self> {
        if !DistFilename::has_dist_extension(key.filename()) {
            return None;
        }
        Self::new(key.parent_prefix()).ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of `name` directly in this root.
    pub fn key(&self, name: &str) -> Result<Key, KeyError> {
        Key::join(&self.0, name)
    }

    pub fn state_key(&self) -> Key {
        self.key(STATE_NAME).expect("state name is a valid key segment")
    }
}

impl fmt::Display for RepoRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_follow_therock_layout() {
        let root = |k: &str| RepoRoot::for_key(&Key::new(k).unwrap()).map(|r| r.to_string());
        assert_eq!(root("123-linux/python/x-1-py3-none-any.whl").as_deref(), Some("123-linux/python/"));
        assert_eq!(root("python/gfx94X/x-1-py3-none-any.whl").as_deref(), Some("python/gfx94X/"));
        assert_eq!(root("ext/org-repo/1-linux/python/x-1.tar.gz").as_deref(), Some("ext/org-repo/1-linux/python/"));
        assert_eq!(root("123-linux/x-1-py3-none-any.whl"), None);
        assert_eq!(root("123-linux/python/simple/x-1-py3-none-any.whl"), None);
        assert_eq!(root("123-linux/python/x.whl.metadata"), None);
        assert!(RepoRoot::new("../python/").is_err());
    }
}
