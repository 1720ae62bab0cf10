use std::fmt;

/// Longest key accepted, in bytes (S3's limit).
pub const MAX_KEY_LEN: usize = 1024;

/// A validated object key: `/`-separated segments, none empty, `.` or `..`, no control
/// characters or backslashes, no leading `/`, and not inside the reserved `.quarry/` area.
///
/// Every path that reaches a backend is a `Key`, so a key can never escape the store's root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(String);

/// Why a string is not a valid key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid key {key:?}: {reason}")]
pub struct KeyError {
    pub key: String,
    pub reason: &'static str,
}

impl Key {
    pub fn new(raw: impl Into<String>) -> Result<Self, KeyError> {
        let key = raw.into();
        let fail = |reason| Err(KeyError { key: key.clone(), reason });
        if key.is_empty() {
            return fail("empty");
        }
        if key.len() > MAX_KEY_LEN {
            return fail("longer than 1024 bytes");
        }
        if key.starts_with('/') {
            return fail("absolute paths are not allowed");
        }
        if key.chars().any(|c| c.is_control()) {
            return fail("control characters (including NUL) are not allowed");
        }
        if key.contains('\\') {
            return fail("backslashes are not allowed");
        }
        for segment in key.split('/') {
            match segment {
                "" => return fail("empty path segments are not allowed"),
                "." | ".." => return fail("'.' and '..' segments are not allowed"),
                _ => {}
            }
        }
        if key.split('/').next() == Some(".quarry") {
            return fail("the .quarry/ area is reserved for the store itself");
        }
        Ok(Self(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The last segment.
    pub fn filename(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// Everything up to and including the last `/` (empty for a top-level key).
    pub fn parent_prefix(&self) -> &str {
        match self.0.rfind('/') {
            Some(i) => &self.0[..=i],
            None => "",
        }
    }

    /// `prefix` + `name`, validated.
    pub fn join(prefix: &str, name: &str) -> Result<Self, KeyError> {
        Self::new(format!("{prefix}{name}"))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Validate a listing prefix: empty, or a key-shaped string that may end with `/`.
pub fn validate_prefix(prefix: &str) -> Result<(), KeyError> {
    if prefix.is_empty() {
        return Ok(());
    }
    Key::new(prefix.trim_end_matches('/'))
        .map(|_| ())
        .map_err(|e| KeyError { key: prefix.to_owned(), reason: e.reason })
}

/// A store's root prefix inside its bucket (`QUARRY_KEY_PREFIX`, an `s3://bucket/prefix` URL)
/// as every key under it starts: empty, or key-shaped and ending with exactly one `/`
/// (`ROCm-TheRock` and `/ROCm-TheRock/` both give `ROCm-TheRock/`). The one place a root
/// prefix is spelled, so a key is inside it exactly when it starts with the result.
pub fn root_prefix(raw: &str) -> Result<String, KeyError> {
    let trimmed = raw.trim_start_matches('/');
    let body = trimmed.strip_suffix('/').unwrap_or(trimmed);
    if body.is_empty() {
        return Ok(String::new());
    }
    Key::new(body).map_err(|e| KeyError { key: raw.to_owned(), reason: e.reason })?;
    Ok(format!("{body}/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_prefixes_are_spelled_one_way() {
        for (raw, want) in [
            ("", ""),
            ("/", ""),
            ("ROCm-TheRock", "ROCm-TheRock/"),
            ("ROCm-TheRock/", "ROCm-TheRock/"),
            ("/ROCm-TheRock/", "ROCm-TheRock/"),
            ("a/b", "a/b/"),
        ] {
            assert_eq!(root_prefix(raw).unwrap(), want, "{raw:?}");
        }
        for bad in ["a//", "a//b", "../x", "a/./b", "a\\b"] {
            assert!(root_prefix(bad).is_err(), "{bad:?}");
        }
        let prefix = root_prefix("ROCm-TheRock").unwrap();
        assert!("ROCm-TheRock/1-linux/x".starts_with(&prefix));
        assert!(!"ROCm-TheRockX/1-linux/x".starts_with(&prefix));
    }

    #[test]
    fn accepts_ordinary_keys() {
        for k in ["a", "run-linux/python/x.whl", "a b/c+d.whl", "x/.hidden", "a/..b/c"] {
            Key::new(k).unwrap();
        }
    }

    #[test]
    fn rejects_escapes() {
        for (k, why) in [
            ("", "empty"),
            ("/etc/passwd", "absolute paths are not allowed"),
            ("../x.whl", "'.' and '..' segments are not allowed"),
            ("a/../../x", "'.' and '..' segments are not allowed"),
            ("a/./x", "'.' and '..' segments are not allowed"),
            ("a//x", "empty path segments are not allowed"),
            ("a/", "empty path segments are not allowed"),
            ("a\0b", "control characters (including NUL) are not allowed"),
            ("a\\..\\b", "backslashes are not allowed"),
            (".quarry/lock", "the .quarry/ area is reserved for the store itself"),
        ] {
            assert_eq!(Key::new(k).unwrap_err().reason, why, "{k:?}");
        }
        assert!(Key::new("x".repeat(1025)).is_err());
    }

    #[test]
    fn parts() {
        let k = Key::new("r-linux/python/a.whl").unwrap();
        assert_eq!(k.filename(), "a.whl");
        assert_eq!(k.parent_prefix(), "r-linux/python/");
        assert_eq!(Key::new("a.whl").unwrap().parent_prefix(), "");
        assert!(validate_prefix("r-linux/python/").is_ok());
        assert!(validate_prefix("../").is_err());
    }
}
