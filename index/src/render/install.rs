//! How clients install from a root: the one place Quarry spells its pip, apt and dnf lines
//! (the upload and promote summaries, the browse and GPU pages all take them from here).

use crate::state::root::RepoKind;

/// Where an apt source line pins a signed repo's key.
pub const APT_KEYRING: &str = "/etc/apt/keyrings/quarry.asc";

/// The line that points a client at the root served at `root_url` (ending with `/`):
/// `pip: --index-url {root}simple/`, `apt: deb [signed-by=…|trusted=yes] {root} stable main`
/// (signed when the repo's metadata is), `dnf: baseurl={root}`.
pub fn summary_line(root_url: &str, kind: RepoKind, signed: bool) -> String {
    match kind {
        RepoKind::Pip => format!("pip: --index-url {}", index_url(root_url)),
        RepoKind::Apt => format!("apt: {}", apt_source(root_url, signed.then_some(APT_KEYRING))),
        RepoKind::Dnf => format!("dnf: baseurl={root_url}"),
    }
}

/// [`summary_line`] for `root` served at `root_url`: a structured pip root is its own index
/// (`pip: --index-url {root}`).
pub fn root_line(root_url: &str, root: &crate::RepoRoot, signed: bool) -> String {
    if root.is_structured() {
        return format!("pip: --index-url {root_url}");
    }
    summary_line(root_url, root.kind(), signed)
}

/// A pip root's PEP 503/691 index (`--index-url`).
pub fn index_url(root_url: &str) -> String {
    format!("{}/simple/", root_url.trim_end_matches('/'))
}

/// An apt root's sources line: `signed-by` the keyring when given, else `trusted=yes`.
pub fn apt_source(root_url: &str, keyring: Option<&str>) -> String {
    crate::render::apt::sources_line(root_url, keyring)
}

/// `pip install` (or `uv pip install` with `uv`) of `package` from a pip root, as words:
/// through its find-links page, or its simple index with `index_url`.
pub fn pip_install(uv: bool, root_url: &str, index: bool, package: &str) -> Vec<String> {
    let mut words: Vec<String> = if uv { vec!["uv".into(), "pip".into()] } else { vec!["pip".into()] };
    words.push("install".into());
    if index {
        words.extend(["--index-url".into(), index_url(root_url)]);
    } else {
        words.extend(["--find-links".into(), root_url.to_owned()]);
    }
    words.push(package.to_owned());
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_for_each_kind() {
        let root = "http://h:9/7-linux/python/";
        assert_eq!(summary_line(root, RepoKind::Pip, false), "pip: --index-url http://h:9/7-linux/python/simple/");
        let deb = "http://h:9/7-linux/packages/deb/";
        assert_eq!(
            summary_line(deb, RepoKind::Apt, false),
            "apt: deb [trusted=yes] http://h:9/7-linux/packages/deb/ stable main"
        );
        assert_eq!(
            summary_line(deb, RepoKind::Apt, true),
            "apt: deb [signed-by=/etc/apt/keyrings/quarry.asc] http://h:9/7-linux/packages/deb/ stable main"
        );
        assert_eq!(summary_line("u/", RepoKind::Dnf, true), "dnf: baseurl=u/");
        let v5 = crate::RepoRoot::structured("v5/rocm/core/whl-next/").unwrap();
        assert_eq!(
            root_line("http://h/v5/rocm/core/whl-next/", &v5, false),
            "pip: --index-url http://h/v5/rocm/core/whl-next/"
        );
        assert_eq!(
            pip_install(true, root, false, "demo").join(" "),
            "uv pip install --find-links http://h:9/7-linux/python/ demo"
        );
        assert_eq!(
            pip_install(false, root, true, "x").join(" "),
            "pip install --index-url http://h:9/7-linux/python/simple/ x"
        );
    }
}
