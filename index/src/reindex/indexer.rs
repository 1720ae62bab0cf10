//! The [`Indexer`] (a store, its [`IndexConfig`] and [`Layout`]) and what one reindex is
//! asked to do ([`Request`]: a root, optionally one [`ProjectScope`] of it, forced or not,
//! with files the caller inspected already). The rest of `impl Indexer` lives with what it
//! does: publishing ([`super::publish`]), per-project passes ([`super::split`]), views
//! ([`super::view`]) and refreshes of a scope ([`super::scope`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use quarry_layout::config::Layout;
use quarry_packaging::{DistFilename, PackageName};
use quarry_store::Store;

use crate::config::IndexConfig;
use crate::error::IndexError;
use crate::reindex::inspect::Inspections;
use crate::reindex::report::ReindexReport;
use crate::state::root::RepoRoot;

/// Keeps repo roots' pages in step with their listings over a [`Store`] with conditional puts.
#[derive(Debug, Clone)]
pub struct Indexer {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) concurrency: usize,
    pub(crate) max_attempts: u32,
    pub(crate) config: IndexConfig,
    /// Which prefixes are configured roots and views (`[layout]`).
    pub(crate) layout: Arc<Layout>,
}

/// What one reindex is asked to do ([`Indexer::run`]): bring `root` up to date, or only one
/// project of it (an event about one of its files: only its files are listed, only its pages
/// rendered; the whole root is reconciled instead when its state and the store disagree);
/// with `force`, every page republished even when the state says nothing changed (repairs
/// pages damaged or deleted behind the indexer's back); with files the caller has inspected
/// already (an upload, a promotion's copies), each used instead of reading the file again
/// while the listed object's version is still the one inspected. A generic root's views
/// follow it, with the same project and inspections.
#[derive(Debug, Clone)]
pub struct Request {
    pub(crate) root: RepoRoot,
    pub(crate) project: Option<ProjectScope>,
    pub(crate) force: bool,
    pub(crate) known: Inspections,
    /// Keys of files indexed as gone although listed (a channel's files its current version
    /// does not name: [`crate::versions::outside_current`]).
    pub(crate) leaving: BTreeSet<String>,
}

impl Request {
    /// The whole of `root`, nothing forced, nothing known.
    pub fn new(root: RepoRoot) -> Self {
        Self { root, project: None, force: false, known: Inspections::default(), leaving: BTreeSet::new() }
    }

    /// Only `project` of the root (ignored when forced, and for apt and dnf roots).
    #[must_use]
    pub fn project(mut self, project: ProjectScope) -> Self {
        self.project = Some(project);
        self
    }

    /// Every page republished when `force`.
    #[must_use]
    pub fn forced(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Files the caller inspected already.
    #[must_use]
    pub fn knowing(mut self, known: Inspections) -> Self {
        self.known = known;
        self
    }

    /// Files (by key) indexed as gone although listed, as files marked leaving are.
    #[must_use]
    pub fn leaving(mut self, keys: BTreeSet<String>) -> Self {
        self.leaving = keys;
        self
    }

    pub fn root(&self) -> &RepoRoot {
        &self.root
    }
}

impl Indexer {
    /// An indexer over `store` laying roots out as `layout` does (`quarry.toml`'s `[layout]`:
    /// the caller's, never a process-wide one), with the default [`IndexConfig`].
    pub fn new(store: Arc<dyn Store>, layout: Arc<Layout>) -> Self {
        Self { store, concurrency: 8, max_attempts: 50, config: IndexConfig::default(), layout }
    }

    /// The configured roots and views this indexer works with.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Publish apt/dnf metadata with `config` (signing key, Release fields, grace period).
    #[must_use]
    pub fn with_config(mut self, config: IndexConfig) -> Self {
        self.config = config;
        self
    }

    /// How apt/dnf metadata are published.
    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// The store indexed.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Bring `root`'s pages up to date with its listing ([`Indexer::run`] of the plain
    /// [`Request`]).
    pub async fn reindex(&self, root: &RepoRoot) -> Result<ReindexReport, IndexError> {
        self.run(Request::new(root.clone())).await
    }
}

/// One project of a pip root, as an event names it: its normalized name and the spelling of
/// the name at the start of the event's file name (the prefix its files are listed under).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProjectScope {
    name: String,
    spelling: String,
}

impl ProjectScope {
    /// The project of a distribution file named `filename` (a wheel, an sdist), if it is one.
    pub fn for_file(filename: &str) -> Option<Self> {
        let name = filename.parse::<DistFilename>().ok()?.name().as_str().to_owned();
        let spelling = spelling(filename, &name)?.to_owned();
        Some(Self { name, spelling })
    }

    /// The normalized project name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the event's file spells the name (a prefix of its file name).
    pub fn spelling(&self) -> &str {
        &self.spelling
    }
}

/// The prefix of `filename` before a `-` that normalizes to `name`: how the file spells its
/// project's name (wheel and sdist names start with it).
pub(crate) fn spelling<'a>(filename: &'a str, name: &str) -> Option<&'a str> {
    filename
        .match_indices('-')
        .map(|(i, _)| &filename[..i])
        .find(|prefix| PackageName::new(prefix).is_ok_and(|p| p.as_str() == name))
}
