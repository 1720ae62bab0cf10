//! What one refresh brings up to date ([`Scope`]: a repo root or a run listing), which scope a
//! changed key belongs to, and the one dispatch every caller uses ([`Indexer::refresh`]): the
//! Lambda per event, `quarry index` and the server's catch-up per discovered scope (`quarry gc`
//! reindexes the roots it leaves through [`Indexer::reindex`]).
//!
//! A distribution file or its yank marker belongs to its pip project ([`Scope::Project`]; the
//! whole root when its name does not parse), a `.deb` or `.rpm` to its apt or dnf root, any
//! other object in a run directory to that directory's listing and its parents'. An output of the
//! indexer (pages, sidecars, state objects, listing pages and caches) belongs to no scope, so
//! its own writes never trigger indexing and an event never recurses.

use std::fmt;

use quarry_layout::config::Layout;
use quarry_store::Key;

use crate::error::IndexError;
use crate::reindex::indexer::{Indexer, ProjectScope};
use crate::reindex::report::ReindexReport;
use crate::render::listing::{LISTING_PAGE, ListingDir, ListingReport, update_listing};
use crate::state::root::{RepoKind, RepoRoot, YANK_SUFFIX};

/// What one refresh brings up to date.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// A repo root, all of it: pip (a full reconciliation), apt (a `.deb` under `pool/`
    /// changed) or dnf (an `.rpm`).
    Root(RepoRoot),
    /// One project of a pip root (one of its distribution files or yank markers changed).
    Project(RepoRoot, ProjectScope),
    /// A run directory's artifact listing (an artifact, log or checksum changed).
    Listing(ListingDir),
}

impl Scope {
    /// The scope a change at `key` makes stale, if any: distribution files and yank markers
    /// their root; other objects in a run directory its listing. The indexer's own outputs
    /// (pages, sidecars, state, listing pages and caches) are in neither, so its writes never
    /// trigger it.
    pub fn for_key(key: &Key, layout: &Layout) -> Option<Self> {
        if let Some(root) = RepoRoot::for_key(key, layout) {
            return Some(Self::for_file(root, key));
        }
        if let Some(target) = key.as_str().strip_suffix(YANK_SUFFIX)
            && let Ok(target) = Key::new(target)
            && let Some(root) = RepoRoot::for_key(&target, layout)
        {
            return Some(Self::for_file(root, &target));
        }
        ListingDir::for_key(key, layout).map(Self::Listing)
    }

    /// A pip file's project (the whole root when its name does not parse, or when a
    /// structured root holds it outside its project's directory: the root's reindex refuses
    /// it), any other root.
    fn for_file(root: RepoRoot, key: &Key) -> Self {
        let relative = key.as_str().strip_prefix(root.as_str()).unwrap_or_default();
        match ProjectScope::for_file(key.filename()) {
            Some(project) if root.kind() == RepoKind::Pip && root.misplaced(relative).is_none() => {
                Self::Project(root, project)
            }
            _ => Self::Root(root),
        }
    }

    /// Every scope changes at `keys` make stale, each once ([`Scope::affected_by`]).
    pub fn affected_by_all<'a>(
        keys: impl IntoIterator<Item = &'a Key>,
        layout: &Layout,
    ) -> std::collections::BTreeSet<Self> {
        keys.into_iter().flat_map(|key| Self::affected_by(key, layout)).collect()
    }

    /// Every scope a change at `key` makes stale: [`Scope::for_key`], and for a listing each
    /// parent listing too (a new directory is a row in its parent's), deepest first.
    pub fn affected_by(key: &Key, layout: &Layout) -> Vec<Self> {
        match Self::for_key(key, layout) {
            Some(Self::Listing(dir)) => dir.with_parents(layout).into_iter().map(Self::Listing).collect(),
            Some(root) => vec![root],
            None => Vec::new(),
        }
    }

    /// The repo root, when this scope is one.
    pub fn root(&self) -> Option<&RepoRoot> {
        match self {
            Self::Root(root) | Self::Project(root, _) => Some(root),
            Self::Listing(_) => None,
        }
    }
}

impl fmt::Display for Scope {
    /// `12345-linux/python/` for a root, `12345-linux/index.html` for a listing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Root(root) | Self::Project(root, _) => write!(f, "{root}"),
            Self::Listing(dir) => write!(f, "{dir}{LISTING_PAGE}"),
        }
    }
}

/// What one refresh did.
#[derive(Debug, Clone)]
pub enum Refreshed {
    /// A root was reindexed.
    Root(ReindexReport),
    /// A listing was brought up to date.
    Listing(ListingReport),
}

impl fmt::Display for Refreshed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Root(report) => report.fmt(f),
            Self::Listing(report) => report.fmt(f),
        }
    }
}

impl Indexer {
    /// Bring `scope` up to date with the store: [`Indexer::reindex`] for a root,
    /// [`update_listing`] for a listing.
    pub async fn refresh(&self, scope: &Scope) -> Result<Refreshed, IndexError> {
        self.refresh_with(scope, false).await
    }

    /// Like [`Indexer::refresh`]; with `force`, a root's pages are all republished
    /// (a forced [`Indexer::run`]). A listing is compared with the store either way.
    pub async fn refresh_with(&self, scope: &Scope, force: bool) -> Result<Refreshed, IndexError> {
        match scope {
            Scope::Root(root) => self.run(crate::Request::new(root.clone()).forced(force)).await.map(Refreshed::Root),
            Scope::Project(root, _) if force => {
                self.run(crate::Request::new(root.clone()).forced(force)).await.map(Refreshed::Root)
            }
            Scope::Project(root, project) => {
                self.run(crate::Request::new(root.clone()).project(project.clone())).await.map(Refreshed::Root)
            }
            Scope::Listing(dir) => Ok(Refreshed::Listing(update_listing(self.store().as_ref(), dir).await?)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scopes_of(key: &str) -> Vec<Scope> {
        Scope::affected_by(&Key::new(key).unwrap(), &Default::default())
    }

    fn scopes(key: &str) -> Vec<String> {
        Scope::affected_by(&Key::new(key).unwrap(), &Default::default()).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn keys_map_to_their_root_or_listings() {
        assert_eq!(scopes("1-linux/python/a-1.0-py3-none-any.whl"), ["1-linux/python/"]);
        assert_eq!(scopes("1-linux/python/a-1.0-py3-none-any.whl.yanked"), ["1-linux/python/"]);
        assert_eq!(scopes("1-linux/packages/deb/pool/main/a_1_amd64.deb"), ["1-linux/packages/deb/"]);
        assert_eq!(
            scopes("1-linux/logs/gfx94X/build.log"),
            ["1-linux/logs/gfx94X/index.html", "1-linux/logs/index.html", "1-linux/index.html"]
        );
        for own in ["1-linux/python/index.html", "1-linux/index.html", "1-linux/logs/.quarry-listing.json"] {
            assert!(scopes(own).is_empty(), "{own}");
        }
        let root = Scope::for_key(&Key::new("1-linux/python/a-1.0.tar.gz").unwrap(), &Default::default()).unwrap();
        assert_eq!(root.root().map(RepoRoot::as_str), Some("1-linux/python/"));
        let Scope::Project(_, project) = root.clone() else { panic!("a pip file's scope is its project: {root:?}") };
        assert_eq!((project.name(), project.spelling()), ("a", "a"));
        let marker = Scope::for_key(
            &Key::new("1-linux/python/Foo.Bar-2.0-py3-none-any.whl.yanked").unwrap(),
            &Default::default(),
        );
        let Some(Scope::Project(_, project)) = marker else { panic!("{marker:?}") };
        assert_eq!((project.name(), project.spelling()), ("foo-bar", "Foo.Bar"));
        let sdist = ProjectScope::for_file("foo-bar-1.0.tar.gz").unwrap();
        assert_eq!((sdist.name(), sdist.spelling()), ("foo-bar", "foo-bar"));
        let apt =
            Scope::for_key(&Key::new("1-linux/packages/deb/pool/main/a_1_amd64.deb").unwrap(), &Default::default());
        assert!(matches!(apt, Some(Scope::Root(_))), "{apt:?}");
        let listing = Scope::for_key(&Key::new("1-linux/a.tar.zst").unwrap(), &Default::default()).unwrap();
        assert!(listing.root().is_none() && root < listing, "roots sort first");
        // Listings sort deepest first: refreshed in order, a directory's page exists before
        // its parent's is written (and links it).
        let ordered: std::collections::BTreeSet<Scope> =
            scopes_of("1-linux/logs/gfx94X/build.log").into_iter().chain(scopes_of("1-linux/a.tar.zst")).collect();
        let ordered: Vec<String> = ordered.iter().map(ToString::to_string).collect();
        assert_eq!(ordered, ["1-linux/logs/gfx94X/index.html", "1-linux/logs/index.html", "1-linux/index.html"]);
    }
}
