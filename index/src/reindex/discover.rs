//! Finding what a store holds to index: repo roots and run listings under a prefix, from one
//! listing.

use std::collections::BTreeSet;

use quarry_layout::config::Layout;
use quarry_store::{Store, StoreError, StoreExt};

use crate::reindex::scope::Scope;
use crate::render::listing::ListingDir;
use crate::state::root::RepoRoot;

/// Every pip, apt and dnf repo root and every run listing directory under `prefix` as `layout`
/// lays them out, from one listing.
pub async fn discover(
    store: &dyn Store,
    prefix: &str,
    layout: &Layout,
) -> Result<(BTreeSet<RepoRoot>, BTreeSet<ListingDir>), StoreError> {
    let listing = store.list_all(prefix, false).await?;
    let mut roots = BTreeSet::new();
    let mut dirs = BTreeSet::new();
    for object in &listing.objects {
        if let Some(root) = RepoRoot::for_key(&object.key, layout) {
            roots.insert(root);
        } else if let Some(root) = RepoRoot::for_state_key(&object.key, layout) {
            // A root whose files were all deleted still needs its pages emptied.
            roots.insert(root);
        } else if let Some(dir) = ListingDir::for_key(&object.key, layout) {
            dirs.extend(dir.with_parents(layout));
        }
    }
    Ok((roots, dirs))
}

/// Every scope under `prefix` ([`discover`]'s roots and listings), roots first, for
/// [`crate::Indexer::refresh`].
pub async fn discover_scopes(store: &dyn Store, prefix: &str, layout: &Layout) -> Result<BTreeSet<Scope>, StoreError> {
    let (roots, dirs) = discover(store, prefix, layout).await?;
    Ok(roots.into_iter().map(Scope::Root).chain(dirs.into_iter().map(Scope::Listing)).collect())
}
