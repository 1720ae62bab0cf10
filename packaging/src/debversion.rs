//! Debian package versions, `[epoch:]upstream[-revision]`, ordered exactly as
//! `dpkg --compare-versions` orders them (dpkg's `verrevcmp`).
//!
//! Written here rather than taken from `debian-packaging` 0.18, whose comparison is not
//! antisymmetric around `~` (`1.0+a` vs `1.0~b` is Less both ways), panics on digit runs longer
//! than a `u64` (TheRock run ids and timestamps make long runs), and whose `Eq` disagrees with
//! its `Ord` (`1.01` vs `1.1`).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// Why a string is not a Debian version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DebVersionError {
    #[error("empty Debian version")]
    Empty,
    #[error("Debian version {0:?}: the epoch before ':' must be a number")]
    Epoch(String),
    #[error("Debian version {0:?}: the upstream version must start with a digit")]
    UpstreamStart(String),
    #[error("Debian version {version:?}: {character:?} is not allowed in the {part}")]
    Character { version: String, character: char, part: &'static str },
}

/// A parsed Debian version. Equality is dpkg's: `1.01` equals `1.1`, and `1.0` equals `1.0-0`.
#[derive(Debug, Clone)]
pub struct DebVersion {
    epoch: u64,
    upstream: String,
    revision: String,
    text: String,
}

impl DebVersion {
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
    pub fn upstream(&self) -> &str {
        &self.upstream
    }
    /// The Debian revision, empty when there is none (which compares as `0`).
    pub fn revision(&self) -> &str {
        &self.revision
    }
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for DebVersion {
    type Err = DebVersionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        if text.is_empty() {
            return Err(DebVersionError::Empty);
        }
        let (epoch, rest) = match text.split_once(':') {
            Some((e, rest)) => {
                let epoch = e.parse::<u64>().map_err(|_| DebVersionError::Epoch(text.to_owned()))?;
                (epoch, rest)
            }
            None => (0, text),
        };
        let (upstream, revision) = match rest.rsplit_once('-') {
            Some((u, r)) => (u, r),
            None => (rest, ""),
        };
        if !upstream.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(DebVersionError::UpstreamStart(text.to_owned()));
        }
        let check = |part: &str, name: &'static str, extra: &str| match part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || ".+~".contains(*c) || extra.contains(*c)))
        {
            Some(character) => Err(DebVersionError::Character { version: text.to_owned(), character, part: name }),
            None => Ok(()),
        };
        // Hyphens are allowed in the upstream part only when there is a revision (the last one
        // splits them), colons only with an epoch.
        check(upstream, "upstream version", if revision.is_empty() { "" } else { "-" })?;
        check(revision, "Debian revision", "")?;
        if rest.contains(':') {
            return Err(DebVersionError::Character {
                version: text.to_owned(),
                character: ':',
                part: "upstream version",
            });
        }
        Ok(Self { epoch, upstream: upstream.to_owned(), revision: revision.to_owned(), text: text.to_owned() })
    }
}

impl fmt::Display for DebVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// dpkg's weight of one non-digit character: `~` below the end of the part, the end below
/// letters, letters below everything else.
fn order(c: Option<u8>) -> i32 {
    match c {
        None => 0,
        Some(b'~') => -1,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => i32::from(c),
        Some(c) => i32::from(c) + 256,
    }
}

/// dpkg's `verrevcmp` over one part (upstream or revision).
fn verrevcmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        // Non-digit runs, character by character.
        while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit()) {
            let (ac, bc) = (order(a.get(i).copied()), order(b.get(j).copied()));
            if ac != bc {
                return ac.cmp(&bc);
            }
            i += 1;
            j += 1;
        }
        // Digit runs, numerically, of any length: skip leading zeros, then the longer run is
        // larger, else the first differing digit decides.
        while a.get(i) == Some(&b'0') {
            i += 1;
        }
        while b.get(j) == Some(&b'0') {
            j += 1;
        }
        let (start_a, start_b) = (i, j);
        while a.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        let (run_a, run_b) = (&a[start_a..i], &b[start_b..j]);
        match run_a.len().cmp(&run_b.len()).then_with(|| run_a.cmp(run_b)) {
            Ordering::Equal => {}
            other => return other,
        }
    }
    Ordering::Equal
}

impl Ord for DebVersion {
    fn cmp(&self, other: &Self) -> Ordering {
        self.epoch
            .cmp(&other.epoch)
            .then_with(|| verrevcmp(&self.upstream, &other.upstream))
            .then_with(|| verrevcmp(&self.revision, &other.revision))
    }
}

impl PartialOrd for DebVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for DebVersion {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for DebVersion {}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> DebVersion {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn orders_like_dpkg() {
        // Each strictly below the next (checked against dpkg --compare-versions in
        // tests/versions.rs).
        let ascending = [
            "0.9",
            "1.0~~",
            "1.0~~a",
            "1.0~",
            "1.0~rc1",
            "1.0",
            "1.0-1",
            "1.0a",
            "1.0+b1",
            "1.0.1",
            "1.1",
            "1.10",
            "7.10.0~dev20251124-1",
            "7.10.0~pre1-1",
            "7.10.0~rc1",
            "7.10.0",
            "7.10.0-12345678901",
            "7.10.0-12345678902",
            "1:0.1",
            "2:0.0",
        ];
        for pair in ascending.windows(2) {
            assert_eq!(v(pair[0]).cmp(&v(pair[1])), Ordering::Less, "{} < {}", pair[0], pair[1]);
            assert_eq!(v(pair[1]).cmp(&v(pair[0])), Ordering::Greater, "{} > {}", pair[1], pair[0]);
        }
        for (a, b) in [("1.01", "1.1"), ("1.0", "1.0-0"), ("0:1.0", "1.0"), ("1.00000000000000000000000001", "1.1")] {
            assert_eq!(v(a), v(b), "{a} = {b}");
        }
        // Digit runs beyond u64 compare as numbers, without panicking.
        assert!(v("1.123456789012345678901") < v("1.123456789012345678902"));
        assert!(v("1.99999999999999999999") < v("1.100000000000000000000"));
    }

    #[test]
    fn parts_and_errors() {
        let x = v("3:7.10.0~dev-2-rocm1");
        assert_eq!((x.epoch(), x.upstream(), x.revision()), (3, "7.10.0~dev-2", "rocm1"));
        assert_eq!(x.to_string(), "3:7.10.0~dev-2-rocm1");
        assert_eq!("".parse::<DebVersion>(), Err(DebVersionError::Empty));
        assert!(matches!("a:1".parse::<DebVersion>(), Err(DebVersionError::Epoch(_))));
        assert!(matches!("v1.0".parse::<DebVersion>(), Err(DebVersionError::UpstreamStart(_))));
        assert!(matches!("1.0_1".parse::<DebVersion>(), Err(DebVersionError::Character { character: '_', .. })));
        assert!(matches!(
            "1.0-a_b".parse::<DebVersion>(),
            Err(DebVersionError::Character { part: "Debian revision", .. })
        ));
    }
}
