//! Per-family views at O(changed): an event about one project of a view, or of its generic
//! root, reads and writes the same whatever the size of either root, and leaves the view's
//! pages byte-identical to what a whole-root reconciliation renders.
//!
//! Each test carries the views' layout ([`layout`]) to its indexer and scopes.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use quarry_layout::config::Layout;
use quarry_store::{CountingStore, Key, MemoryStore, OpCounts, PutOptions, Store, StoreExt};

use crate::reindex::scale_tests::wheel;
use crate::{Indexer, Refreshed, RepoRoot, Scope};

/// Views of `v2/generic/`, find-links pages off (a layout rule's default).
const LAYOUT: &str = "[layout]\n[[layout.root]]\nprefix = \"v2/{family}/\"\nkind = \"pip\"\nview = \"family\"\n\
    generic = \"v2/generic/\"\n";
const GENERIC: &str = "v2/generic/";
const VIEWS: [&str; 2] = ["v2/gfx94X-dcgpu/", "v2/gfx120X-all/"];

fn layout() -> Layout {
    Layout::parse(LAYOUT).unwrap()
}

async fn put(store: &dyn Store, root: &str, name: &str, version: &str) -> Key {
    let (file, body) = wheel(name, version);
    let key = Key::new(format!("{root}{file}")).unwrap();
    store.put_bytes(&key, Bytes::from(body), PutOptions::default()).await.unwrap();
    key
}

/// A generic root and two views of `projects` projects each (the generic root's are shared
/// with the views by name: `shared{i}`), plus project `target` in both, indexed whole.
async fn channel(projects: usize) -> Arc<MemoryStore> {
    let memory = Arc::new(MemoryStore::default());
    for i in 0..projects {
        put(memory.as_ref(), GENERIC, &format!("shared{i}"), "1.0").await;
        for view in VIEWS {
            put(memory.as_ref(), view, &format!("own{i}"), "1.0").await;
        }
    }
    put(memory.as_ref(), GENERIC, "target", "1.0").await;
    put(memory.as_ref(), VIEWS[0], "target", "1.1").await;
    let indexer = Indexer::new(memory.clone(), Arc::new(layout()));
    for view in VIEWS {
        indexer.reindex(&RepoRoot::new(view, &layout()).unwrap()).await.unwrap();
    }
    // The generic root's reindex refreshes both views.
    indexer.reindex(&RepoRoot::new(GENERIC, &layout()).unwrap()).await.unwrap();
    memory
}

/// Every object under `prefix` but the state objects, by key.
async fn pages(store: &dyn Store, prefix: &str) -> BTreeMap<String, Bytes> {
    let mut out = BTreeMap::new();
    for object in store.list_all(prefix, false).await.unwrap().objects {
        let key = object.key.to_string();
        if key.contains(".quarry-index") || key.ends_with(".whl") {
            continue;
        }
        out.insert(key, store.get_bytes(&object.key, 1 << 26).await.unwrap().1);
    }
    out
}

/// The event of `key` through a counting store: its operations.
async fn event(memory: &Arc<MemoryStore>, key: &Key) -> OpCounts {
    let counting = Arc::new(CountingStore::new(memory.clone()));
    let scope = Scope::for_key(key, &layout()).unwrap();
    let Refreshed::Root(report) = Indexer::new(counting.clone(), Arc::new(layout())).refresh(&scope).await.unwrap()
    else {
        panic!("not a root");
    };
    assert_eq!(report.attempts, 1, "{report}");
    counting.counts()
}

/// After the events, a forced whole-root reindex of each of `roots` finds the pages as stored.
async fn assert_whole_reconciliation_agrees(memory: &Arc<MemoryStore>, roots: &[&str]) {
    let before = pages(memory.as_ref(), "v2/").await;
    let indexer = Indexer::new(memory.clone(), Arc::new(layout()));
    for root in roots {
        indexer.run(crate::Request::new(RepoRoot::new(root, &layout()).unwrap()).forced(true)).await.unwrap();
    }
    let after = pages(memory.as_ref(), "v2/").await;
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    for (key, body) in &after {
        assert_eq!(before[key], *body, "{key} differs from a whole-root render");
    }
}

/// Operations of a view's own event and of a generic root's event (which refreshes both views'
/// share of the project) in a channel of `projects` projects per root; new projects too.
async fn costs(projects: usize) -> Vec<OpCounts> {
    let memory = channel(projects).await;
    let mut counts = Vec::new();
    // A new version of a project both roots hold, in a view.
    counts.push(event(&memory, &put(memory.as_ref(), VIEWS[0], "target", "2.0").await).await);
    // A new version in the generic root: both views list it.
    counts.push(event(&memory, &put(memory.as_ref(), GENERIC, "target", "3.0").await).await);
    // A project new to the generic root: it joins every view's simple root.
    counts.push(event(&memory, &put(memory.as_ref(), GENERIC, "fresh", "1.0").await).await);
    // A project new to a view only.
    counts.push(event(&memory, &put(memory.as_ref(), VIEWS[1], "mine", "1.0").await).await);
    // A deletion in the generic root: the project leaves the views where it was the only file.
    let gone = Key::new(format!("{GENERIC}{}", wheel("fresh", "1.0").0)).unwrap();
    memory.delete(&gone).await.unwrap();
    counts.push(event(&memory, &gone).await);

    for view in VIEWS {
        let listed = memory.get_bytes(&Key::new(format!("{view}simple/target/index.html")).unwrap(), 1 << 20).await;
        let listed = String::from_utf8(listed.unwrap().1.to_vec()).unwrap();
        assert!(listed.contains("../../../generic/target-3.0-py3-none-any.whl#sha256="), "{view}: {listed}");
        let root = memory.get_bytes(&Key::new(format!("{view}simple/index.html")).unwrap(), 1 << 20).await;
        let root = String::from_utf8(root.unwrap().1.to_vec()).unwrap();
        assert!(!root.contains("\">fresh<"), "{view}: the deleted generic project is still listed");
        assert_eq!(root.contains("\">mine<"), view == VIEWS[1], "{view}");
    }
    assert_whole_reconciliation_agrees(&memory, &[GENERIC, VIEWS[0], VIEWS[1]]).await;
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_events_cost_the_same_at_50_and_500_projects_and_match_a_whole_reconciliation() {
    let small = costs(50).await;
    let big = costs(500).await;
    let shown = |c: &[OpCounts]| c.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ");
    let costs = format!("50 projects: {}\n500 projects: {}", shown(&small), shown(&big));
    tracing::info!("{costs}");
    assert_eq!(small, big, "a view's event grows with the roots:\n{costs}");
    // A view's own event: its own project's state, the generic root's share, its pages.
    assert!(big[0].total() <= 14, "{costs}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_of_an_unsplit_or_unindexed_generic_root_is_reconciled_whole() {
    let memory = Arc::new(MemoryStore::default());
    put(memory.as_ref(), VIEWS[0], "own", "1.0").await;
    Indexer::new(memory.clone(), Arc::new(layout()))
        .reindex(&RepoRoot::new(VIEWS[0], &layout()).unwrap())
        .await
        .unwrap();
    // The generic root was never indexed: its files are not listed yet.
    let key = put(memory.as_ref(), GENERIC, "core", "1.0").await;
    put(memory.as_ref(), VIEWS[0], "own", "2.0").await;
    let view_key = Key::new(format!("{}{}", VIEWS[0], wheel("own", "2.0").0)).unwrap();
    event(&memory, &view_key).await;
    let root = memory.get_bytes(&Key::new(format!("{}simple/index.html", VIEWS[0])).unwrap(), 1 << 20).await;
    assert!(!String::from_utf8_lossy(&root.unwrap().1).contains("\">core<"));
    // Its event indexes it and refreshes the view.
    event(&memory, &key).await;
    let root = memory.get_bytes(&Key::new(format!("{}simple/index.html", VIEWS[0])).unwrap(), 1 << 20).await;
    assert!(String::from_utf8_lossy(&root.unwrap().1).contains("\">core<"));
    assert_whole_reconciliation_agrees(&memory, &[GENERIC, VIEWS[0]]).await;
}

/// Two layouts side by side in one process: each indexer over its own store discovers and
/// indexes the roots its own `[layout]` names, and only those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_layouts_index_their_own_roots_side_by_side() {
    let channels = Arc::new(layout());
    let nightly = Arc::new(
        Layout::parse("[layout]\nruns = false\n[[layout.root]]\nprefix = \"nightly/{family}/\"\nkind = \"pip\"\n")
            .unwrap(),
    );
    let places = ["v2/gfx94X-dcgpu/", "nightly/gfx94X-dcgpu/", "1-linux/python/"];
    let (a, b) = (Arc::new(MemoryStore::default()), Arc::new(MemoryStore::default()));
    for store in [&a, &b] {
        for place in places {
            put(store.as_ref(), place, "demo", "1.0").await;
        }
    }
    let index = |store: Arc<MemoryStore>, layout: Arc<Layout>| async move {
        let scopes = crate::discover_scopes(store.as_ref(), "", &layout).await.unwrap();
        let indexer = Indexer::new(store.clone(), layout);
        for scope in &scopes {
            indexer.refresh(scope).await.unwrap();
        }
        scopes.iter().filter_map(|s| s.root().map(ToString::to_string)).collect::<Vec<_>>()
    };
    let (roots_a, roots_b) = tokio::join!(index(a.clone(), channels), index(b.clone(), nightly));
    assert_eq!(roots_a, ["1-linux/python/", "v2/gfx94X-dcgpu/"]);
    assert_eq!(roots_b, ["nightly/gfx94X-dcgpu/"]);
    let indexed = |store: Arc<MemoryStore>, root: &'static str| async move {
        store.head(&Key::new(format!("{root}simple/demo/index.html")).unwrap()).await.is_ok()
    };
    assert_eq!(
        [indexed(a.clone(), places[0]).await, indexed(a.clone(), places[1]).await, indexed(a, places[2]).await],
        [true, false, true]
    );
    assert_eq!(
        [indexed(b.clone(), places[0]).await, indexed(b.clone(), places[1]).await, indexed(b, places[2]).await],
        [false, true, false]
    );
}
