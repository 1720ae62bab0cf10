//! The names a directory on Windows can hold, checked on every host: a local store on Windows
//! keeps keys as files, and an archive extracted for a Windows stage job must not lose a
//! member to a reserved device name, a stripped trailing dot or a case fold. Pure string rules.

/// Device names Windows reserves in every directory, with or without an extension.
const RESERVED: [&str; 4] = ["CON", "PRN", "AUX", "NUL"];

/// Why Windows cannot hold a file named `segment` (one path segment), or `None` when it can:
/// a reserved device name (`CON`, `aux.txt`, `NUL.tar`, `COM1`–`COM9`, `LPT1`–`LPT9`, in any
/// case, with any extension), a trailing dot or space (Windows strips them silently, so the
/// file lands under another name), a character Windows forbids (`<>:"|?*`, `\`, control
/// characters), or an empty name.
pub fn windows_name_problem(segment: &str) -> Option<&'static str> {
    if segment.is_empty() {
        return Some("an empty name");
    }
    if segment.ends_with(['.', ' ']) {
        return Some("ends with a dot or a space, which Windows strips");
    }
    if segment.chars().any(|c| c < ' ' || matches!(c, '<' | '>' | ':' | '"' | '|' | '?' | '*' | '\\')) {
        return Some("holds a character Windows forbids in names (<>:\"|?*\\ or a control character)");
    }
    let stem = segment.split('.').next().unwrap_or(segment).trim_end_matches(' ');
    let upper = stem.to_ascii_uppercase();
    let numbered =
        |prefix: &str| upper.strip_prefix(prefix).is_some_and(|n| n.len() == 1 && n.as_bytes()[0].is_ascii_digit());
    if RESERVED.contains(&upper.as_str()) || numbered("COM") || numbered("LPT") {
        return Some("a device name Windows reserves (CON, PRN, AUX, NUL, COM0-9, LPT0-9)");
    }
    None
}

/// Paths checked one by one for Windows: each segment by [`windows_name_problem`], and no two
/// paths that differ only in case (Windows folds case, so the second would overwrite the first).
#[derive(Debug, Default)]
pub struct PortableNames {
    folded: std::collections::HashMap<String, String>,
}

impl PortableNames {
    /// Why Windows cannot hold `path` (`/`-separated, relative) beside the paths seen before.
    pub fn check(&mut self, path: &str) -> Result<(), String> {
        for segment in path.split('/') {
            if let Some(problem) = windows_name_problem(segment) {
                return Err(format!("{segment:?} {problem}"));
            }
        }
        match self.folded.insert(path.to_lowercase(), path.to_owned()) {
            Some(other) if other != path => Err(format!("differs from {other:?} only in case")),
            _ => Ok(()),
        }
    }
}

/// The first of `paths` Windows cannot hold, with the reason ([`PortableNames`]).
pub fn portable_names<'a>(paths: impl IntoIterator<Item = &'a str>) -> Result<(), (String, String)> {
    let mut names = PortableNames::default();
    paths.into_iter().try_for_each(|p| names.check(p).map_err(|why| (p.to_owned(), why)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_windows_cannot_hold() {
        for bad in ["CON", "con", "aux.txt", "NUL.tar", "nul.tar.gz", "COM1", "lpt9.log", "COM0", "Con .txt"] {
            assert!(windows_name_problem(bad).unwrap().contains("device name"), "{bad}");
        }
        for bad in ["trailing.", "trailing ", "a:b", "a<b", "a>b", "a\"b", "a|b", "a?b", "a*b", "a\\b", "a\tb"] {
            assert!(windows_name_problem(bad).is_some(), "{bad:?}");
        }
        for good in ["CONSOLE", "console.txt", "COM10", "LPT", "nul_", "amdhip64_7.dll", ".hidden", "a b", "com1x"] {
            assert_eq!(windows_name_problem(good), None, "{good}");
        }
        assert!(portable_names(["bin/a.dll", "bin/A.DLL"]).unwrap_err().1.contains("only in case"));
        assert!(portable_names(["bin", "bin/a.dll", "lib/a.dll"]).is_ok());
        let (path, why) = portable_names(["bin/ok", "bin/aux.txt/x"]).unwrap_err();
        assert_eq!(path, "bin/aux.txt/x");
        assert!(why.starts_with("\"aux.txt\""), "{why}");
    }
}
