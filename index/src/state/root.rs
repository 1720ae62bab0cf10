use std::fmt;

use quarry_layout::{self as layout, UploadKind};
use quarry_packaging::DistFilename;
use quarry_store::{Key, KeyError};

/// Objects Quarry keeps beside a file of a pip root, by the suffix they add to its name.
/// Suffix of the sidecar holding a wheel's core metadata (PEP 658).
pub const METADATA_SUFFIX: &str = ".metadata";
/// Suffix of the marker object that yanks a file; its content is the reason.
pub const YANK_SUFFIX: &str = ".yanked";
/// Suffix of the marker `quarry prune` puts beside a file it is about to delete: every reindex,
/// whoever runs it (the Lambda reacting to the deletions too), indexes a marked file as gone,
/// so no page names it when it goes. The marker goes after the file.
pub const LEAVING_SUFFIX: &str = ".quarry-leaving";

/// An apt root's one suite (`dists/stable/`) and component (`main`).
pub const SUITE: &str = "stable";
pub const COMPONENT: &str = "main";

/// The name of the state object inside each pip repo root.
pub const STATE_NAME: &str = ".quarry-index.json";
/// The state object of an apt root.
pub const APT_STATE_NAME: &str = ".quarry-apt.json";
/// The state object of a dnf root.
pub const DNF_STATE_NAME: &str = ".quarry-dnf.json";

/// The directory of a pip root's PEP 503/691 pages: no root lies in it.
const SIMPLE_DIR: &str = "simple";

/// Refuses a key that uses an output name (`index.html`, `simple`, `dists`, `repodata`, a state
/// object, …) or a file name (`*.whl`, `*.metadata`, …) as a directory: the indexer could no
/// longer write there, or a file and a directory would need the same path.
pub fn check_key_segments(key: &Key) -> Result<(), KeyError> {
    let segments: Vec<&str> = key.as_str().split('/').collect();
    for segment in &segments[..segments.len() - 1] {
        let reason = match layout::reserved_directory(segment) {
            None => continue,
            Some(layout::Reserved::Generated) => {
                "a directory in the key has the name of a page or file the indexer writes"
            }
            Some(layout::Reserved::FileName) => "a directory in the key is named like a package, page or sidecar file",
        };
        return Err(KeyError { key: key.to_string(), reason });
    }
    Ok(())
}

/// What a root serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RepoKind {
    /// Wheels and sdists: find-links, PEP 503/691 pages, PEP 658 sidecars.
    Pip,
    /// `.deb`s under `pool/`: `dists/stable/…`.
    Apt,
    /// `.rpm`s in the directory: `repodata/`.
    Dnf,
}

impl RepoKind {
    /// The repo a configured root kind serves; `None` for a tarball directory, which is no
    /// package repo (its page is a listing, `crate::render::listing`).
    pub fn of(kind: layout::config::RootKind) -> Option<Self> {
        match kind {
            layout::config::RootKind::Pip => Some(Self::Pip),
            layout::config::RootKind::Apt => Some(Self::Apt),
            layout::config::RootKind::Dnf => Some(Self::Dnf),
            layout::config::RootKind::Tarball => None,
        }
    }

    /// `pip`, `apt` or `dnf` (as serialized).
    pub fn label(self) -> &'static str {
        match self {
            Self::Pip => "pip",
            Self::Apt => "apt",
            Self::Dnf => "dnf",
        }
    }
}

/// A repo root: a store prefix ending in `/` under which the indexer keeps one repository.
///
/// TheRock's layout puts pip roots at `{run}-{platform}/python/` (multi-arch) and
/// `{run}-{platform}/python/{group}/` or `python/{group}/` (legacy): any prefix with a `python`
/// segment and no `simple` segment after it. apt roots hold `pool/…/*.deb` (TheRock:
/// `{run}-{platform}/packages/deb/`), dnf roots hold `*.rpm` directly
/// (`{run}-{platform}/packages/rpm/x86_64/`).
///
/// A structured pip root (a configured root's `structured = true`, TheRock's v5
/// `…/whl-next/`) keeps each file in its project's directory, `{root}{pep503-name}/{file}`,
/// with its sidecars beside it ([`RepoRoot::file_path`]); the root is its own simple index
/// (`index.html` listing the projects, `{project}/index.html` each project's files). A file
/// directly in the root, or in a directory that is not its normalized name, belongs to the
/// root and is refused by its reindex, named.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RepoRoot {
    prefix: String,
    kind: RepoKind,
    structured: bool,
}

impl RepoRoot {
    /// A root from a prefix in `config`: a configured root (`quarry.toml`'s `[layout]`) has
    /// its configured kind; otherwise the run layout ([`layout::RunLayout`]) tells: a `python`
    /// segment (and no `simple` after it) is pip, a last segment `deb` is apt, an rpm
    /// architecture or a parent named `rpm` is dnf. A missing trailing `/` is added.
    pub fn new(prefix: &str, config: &layout::config::Layout) -> Result<Self, KeyError> {
        let trimmed = prefix.trim_end_matches('/');
        let key = Key::new(trimmed)?;
        if let Some(rule) = config.rule_for(key.as_str()) {
            let Some(kind) = RepoKind::of(rule.kind) else {
                return Err(KeyError { key: prefix.to_owned(), reason: "a tarball directory, not a package repo" });
            };
            let root = Self::with_kind(prefix, kind)?;
            return Ok(Self { structured: rule.structured, ..root });
        }
        if !config.runs {
            return Err(KeyError { key: prefix.to_owned(), reason: "not a configured repo root (quarry.toml)" });
        }
        let segments: Vec<&str> = key.as_str().split('/').collect();
        let layout = config.run();
        if layout.python_segment(&segments).is_some_and(|i| !segments[i..].contains(&SIMPLE_DIR)) {
            return Ok(Self { prefix: format!("{trimmed}/"), kind: RepoKind::Pip, structured: false });
        }
        match layout.native_root_kind(&segments) {
            Some(UploadKind::Deb) => Self::with_kind(prefix, RepoKind::Apt),
            Some(UploadKind::Rpm) => Self::with_kind(prefix, RepoKind::Dnf),
            _ => Err(KeyError { key: prefix.to_owned(), reason: layout.not_a_root() }),
        }
    }

    /// A root of the given kind at `prefix`, whatever its name.
    pub fn with_kind(prefix: &str, kind: RepoKind) -> Result<Self, KeyError> {
        let trimmed = prefix.trim_end_matches('/');
        let key = Key::new(trimmed)?;
        let reserved: &[&str] = match kind {
            RepoKind::Pip => &[SIMPLE_DIR],
            RepoKind::Apt => &["pool", "dists"],
            RepoKind::Dnf => &["repodata"],
        };
        if key.as_str().split('/').any(|s| reserved.contains(&s)) {
            return Err(KeyError {
                key: prefix.to_owned(),
                reason: "a repo root cannot lie inside another root's generated or pool directories",
            });
        }
        Ok(Self { prefix: format!("{trimmed}/"), kind, structured: false })
    }

    /// A structured pip root at `prefix`, whatever the layout says.
    pub fn structured(prefix: &str) -> Result<Self, KeyError> {
        Ok(Self { structured: true, ..Self::with_kind(prefix, RepoKind::Pip)? })
    }

    /// Whether this is a structured pip root (files in project directories).
    pub fn is_structured(&self) -> bool {
        self.structured
    }

    /// Where the file `filename` (or an object named after it: `{filename}.metadata`, a
    /// release's `-variants.json`) lies relative to the root: `{pep503-name}/{filename}` in a
    /// structured root, the name itself in any other.
    pub fn file_path(&self, filename: &str) -> String {
        match crate::state::file_project(filename).filter(|_| self.structured) {
            Some(project) => format!("{project}/{filename}"),
            None => filename.to_owned(),
        }
    }

    /// The key of [`RepoRoot::file_path`].
    pub fn file_key(&self, filename: &str) -> Result<Key, KeyError> {
        self.key(&self.file_path(filename))
    }

    /// The file name a path relative to the root names when the file lies where
    /// [`RepoRoot::file_path`] puts it: directly in a flat root, in its project's directory in
    /// a structured one.
    pub fn file_name_of<'a>(&self, relative: &'a str) -> Option<&'a str> {
        if !self.structured {
            return (!relative.contains('/')).then_some(relative);
        }
        let (dir, name) = relative.split_once('/')?;
        (!name.contains('/') && crate::state::file_project(name).is_some_and(|p| p.as_str() == dir)).then_some(name)
    }

    /// Why a distribution file at `relative` does not lie where a structured root keeps it
    /// (`None`: it does, or the root is flat, or the path is deeper than a project directory).
    pub fn misplaced(&self, relative: &str) -> Option<String> {
        if !self.structured || self.file_name_of(relative).is_some() {
            return None;
        }
        let name = relative.rsplit('/').next().unwrap_or(relative);
        if relative.matches('/').count() > 1 || !DistFilename::has_dist_extension(name) {
            return None;
        }
        let expected = self.file_path(name);
        Some(format!(
            "a structured root keeps each file in the directory of its normalized project name: \
             {}{relative} should be {}{expected}",
            self.prefix, self.prefix
        ))
    }

    /// The root a package file at `key` belongs to, if any: wheels and sdists to their
    /// directory's pip root, `.deb`s to the prefix before their last `pool/` segment, `.rpm`s
    /// (not source rpms) to their directory; pip roots as `layout` lays them out.
    pub fn for_key(key: &Key, layout: &layout::config::Layout) -> Option<Self> {
        check_key_segments(key).ok()?;
        let name = key.filename();
        if DistFilename::has_dist_extension(name) {
            let parent = key.parent_prefix();
            if let Some(root) = Self::new(parent, layout).ok().filter(|r| r.kind == RepoKind::Pip) {
                return Some(root);
            }
            // A project directory of a structured root.
            let (grandparent, _) = parent.trim_end_matches('/').rsplit_once('/')?;
            return Self::new(grandparent, layout).ok().filter(|r| r.kind == RepoKind::Pip && r.structured);
        }
        if name.ends_with(".deb") {
            let segments: Vec<&str> = key.as_str().split('/').collect();
            let pool = segments[..segments.len() - 1].iter().rposition(|s| *s == "pool")?;
            if pool == 0 {
                return None;
            }
            return Self::with_kind(&segments[..pool].join("/"), RepoKind::Apt).ok();
        }
        if name.ends_with(".rpm") && !name.ends_with(".src.rpm") {
            let parent = key.parent_prefix();
            if parent.is_empty() {
                return None;
            }
            return Self::with_kind(parent, RepoKind::Dnf).ok();
        }
        None
    }

    /// The root whose state object is `key`, if it is one (pip roots as `layout` lays them out).
    pub fn for_state_key(key: &Key, layout: &layout::config::Layout) -> Option<Self> {
        let kind = match key.filename() {
            STATE_NAME => RepoKind::Pip,
            APT_STATE_NAME => RepoKind::Apt,
            DNF_STATE_NAME => RepoKind::Dnf,
            _ => return None,
        };
        let parent = key.parent_prefix();
        if kind == RepoKind::Pip { Self::new(parent, layout).ok() } else { Self::with_kind(parent, kind).ok() }
    }

    pub fn as_str(&self) -> &str {
        &self.prefix
    }

    pub fn kind(&self) -> RepoKind {
        self.kind
    }

    /// The key of `name` (a path relative to the root) in this root.
    pub fn key(&self, name: &str) -> Result<Key, KeyError> {
        Key::join(&self.prefix, name)
    }

    pub fn state_key(&self) -> Key {
        let name = match self.kind {
            RepoKind::Pip => STATE_NAME,
            RepoKind::Apt => APT_STATE_NAME,
            RepoKind::Dnf => DNF_STATE_NAME,
        };
        self.key(name).expect("state name is a valid key segment")
    }

    /// Where this root's package files are listed from, and whether the listing recurses.
    pub fn package_prefix(&self) -> (String, bool) {
        match self.kind {
            RepoKind::Apt => (format!("{}pool/", self.prefix), true),
            RepoKind::Pip if self.structured => (self.prefix.clone(), true),
            RepoKind::Pip | RepoKind::Dnf => (self.prefix.clone(), false),
        }
    }

    /// Whether a file (path relative to the root) is one of this root's packages (in a
    /// structured root: in its project's directory).
    pub fn is_package(&self, relative: &str) -> bool {
        match self.kind {
            RepoKind::Pip => self.file_name_of(relative).is_some_and(DistFilename::has_dist_extension),
            RepoKind::Apt => relative.starts_with("pool/") && relative.ends_with(".deb"),
            RepoKind::Dnf => !relative.contains('/') && relative.ends_with(".rpm") && !relative.ends_with(".src.rpm"),
        }
    }
}

impl fmt::Display for RepoRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_follow_therock_layout() {
        let root = |k: &str| RepoRoot::for_key(&Key::new(k).unwrap(), &Default::default()).map(|r| r.to_string());
        assert_eq!(root("123-linux/python/x-1-py3-none-any.whl").as_deref(), Some("123-linux/python/"));
        assert_eq!(root("python/gfx94X/x-1-py3-none-any.whl").as_deref(), Some("python/gfx94X/"));
        assert_eq!(root("ext/org-repo/1-linux/python/x-1.tar.gz").as_deref(), Some("ext/org-repo/1-linux/python/"));
        assert_eq!(root("123-linux/x-1-py3-none-any.whl"), None);
        assert_eq!(root("123-linux/python/simple/x-1-py3-none-any.whl"), None);
        assert_eq!(root("123-linux/python/x.whl.metadata"), None);
        assert!(RepoRoot::new("../python/", &Default::default()).is_err());
        let kind =
            |k: &str| RepoRoot::for_key(&Key::new(k).unwrap(), &Default::default()).map(|r| (r.to_string(), r.kind()));
        assert_eq!(
            kind("123-linux/packages/deb/pool/main/a_1.0_amd64.deb"),
            Some(("123-linux/packages/deb/".into(), RepoKind::Apt))
        );
        assert_eq!(
            kind("123-linux/packages/rpm/x86_64/a-1.0-1.x86_64.rpm"),
            Some(("123-linux/packages/rpm/x86_64/".into(), RepoKind::Dnf))
        );
        assert_eq!(kind("pool/main/a_1.0_amd64.deb"), None);
        assert_eq!(kind("123-linux/packages/deb/a_1.0_amd64.deb"), None);
        assert_eq!(kind("123-linux/packages/rpm/x86_64/a-1.0-1.src.rpm"), None);
        assert_eq!(kind("123-linux/packages/rpm/x86_64/repodata/a.rpm"), None);
        assert_eq!(RepoRoot::new("123-linux/packages/deb", &Default::default()).unwrap().kind(), RepoKind::Apt);
        assert_eq!(RepoRoot::new("123-linux/packages/rpm/x86_64/", &Default::default()).unwrap().kind(), RepoKind::Dnf);
        assert!(RepoRoot::new("123-linux/packages/", &Default::default()).is_err());
    }

    #[test]
    fn configured_roots_come_first_and_runs_can_be_off() {
        let release = layout::config::Layout::preset("therock-release").unwrap();
        let kind = |l: &layout::config::Layout, p: &str| RepoRoot::new(p, l).map(|r| r.kind()).ok();
        assert_eq!(kind(&release, "v2/gfx94X-dcgpu"), Some(RepoKind::Pip));
        assert_eq!(kind(&release, "v3/packages/deb/"), Some(RepoKind::Apt));
        assert_eq!(kind(&release, "v3/packages/rpm/x86_64/"), Some(RepoKind::Dnf));
        assert_eq!(kind(&release, "python-deps/"), Some(RepoKind::Pip));
        assert_eq!(kind(&release, "12-linux/python/"), Some(RepoKind::Pip));
        assert_eq!(kind(&release, "v2/"), None);
        assert_eq!(kind(&layout::config::Layout::default(), "v2/gfx94X-dcgpu/"), None);
        let channels_only = layout::config::Layout { runs: false, ..release };
        assert_eq!(kind(&channels_only, "12-linux/python/"), None);
        assert_eq!(kind(&channels_only, "v2/gfx94X-dcgpu/"), Some(RepoKind::Pip));
    }

    #[test]
    fn structured_roots_keep_files_in_project_directories() {
        let v5 = layout::config::Layout::preset("therock-v5").unwrap();
        let root = RepoRoot::new("v5/rocm/core/whl-next", &v5).unwrap();
        assert!(root.is_structured() && root.kind() == RepoKind::Pip);
        assert_eq!(
            root.file_path("rocm_sdk_core-7.13.0-py3-none-linux_x86_64.whl"),
            "rocm-sdk-core/rocm_sdk_core-7.13.0-py3-none-linux_x86_64.whl"
        );
        assert_eq!(root.file_path("rocm-7.13.0.tar.gz"), "rocm/rocm-7.13.0.tar.gz");
        assert_eq!(root.file_path("Foo.Bar-1.0-variants.json"), "foo-bar/Foo.Bar-1.0-variants.json");
        assert_eq!(root.file_name_of("rocm/rocm-7.13.0.tar.gz"), Some("rocm-7.13.0.tar.gz"));
        assert_eq!(root.file_name_of("Rocm/rocm-7.13.0.tar.gz"), None);
        assert_eq!(root.file_name_of("rocm-7.13.0.tar.gz"), None);
        assert!(root.is_package("rocm/rocm-7.13.0.tar.gz"));
        assert!(!root.is_package("rocm/index.html") && !root.is_package("rocm/rocm-7.13.0.tar.gz.metadata"));
        assert_eq!(root.misplaced("rocm/rocm-7.13.0.tar.gz"), None);
        assert!(
            root.misplaced("rocm-7.13.0.tar.gz")
                .unwrap()
                .contains("should be v5/rocm/core/whl-next/rocm/rocm-7.13.0.tar.gz")
        );
        assert!(root.misplaced("Rocm/rocm-7.13.0.tar.gz").is_some());
        assert_eq!(root.misplaced("rocm/a/rocm-7.13.0.tar.gz"), None, "deeper: not this root's");
        assert_eq!(root.package_prefix(), ("v5/rocm/core/whl-next/".to_owned(), true));
        assert!(RepoRoot::new("v5/rocm/core/tarball/", &v5).is_err(), "a tarball directory is no repo");
        let flat = RepoRoot::new("1-linux/python/", &Default::default()).unwrap();
        assert_eq!(flat.file_path("rocm-7.13.0.tar.gz"), "rocm-7.13.0.tar.gz");
        assert_eq!(flat.file_name_of("rocm/rocm-7.13.0.tar.gz"), None);
    }

    #[test]
    fn output_and_file_names_are_never_directories() {
        for squat in [
            "123-linux/python/x-1.0-py3-none-any.whl.metadata/y-1.0-py3-none-any.whl",
            "123-linux/python/index.html/y-1.0-py3-none-any.whl",
            "123-linux/python/INDEX.HTML/y-1.0-py3-none-any.whl",
            "123-linux/python/simple/y-1.0-py3-none-any.whl",
            "123-linux/python/.quarry-index.json/y-1.0-py3-none-any.whl",
            "123-linux/python/x-1.0-py3-none-any.whl/y-1.0-py3-none-any.whl",
            "123-linux/packages/deb/dists/pool/main/a_1.0_amd64.deb",
            "123-linux/packages/deb/pool/main/a_1.0_amd64.deb/b_1.0_amd64.deb",
            "123-linux/packages/rpm/x86_64/repodata/a-1.0-1.x86_64.rpm",
            "123-linux/index.json/python/y-1.0-py3-none-any.whl",
        ] {
            let key = Key::new(squat).unwrap();
            assert!(check_key_segments(&key).is_err(), "{squat}");
            assert_eq!(RepoRoot::for_key(&key, &Default::default()), None, "{squat}");
        }
        for fine in [
            "123-linux/python/y-1.0-py3-none-any.whl",
            "123-linux/python/gfx94X/index.html",
            "123-linux/packages/deb/pool/main/a_1.0_amd64.deb",
            "ext/org-repo/1-linux/python/x-1.tar.gz",
        ] {
            check_key_segments(&Key::new(fine).unwrap()).unwrap();
        }
    }

    #[test]
    fn every_name_the_indexer_writes_is_reserved() {
        for name in [
            STATE_NAME,
            APT_STATE_NAME,
            DNF_STATE_NAME,
            crate::render::listing::LISTING_CACHE,
            SIMPLE_DIR,
            "index.html",
        ] {
            assert!(layout::GENERATED_NAMES.contains(&name), "{name} is missing from layout::GENERATED_NAMES");
        }
    }
}
