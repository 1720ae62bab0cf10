//! What a run is: its manifest, `{run}-{platform}/.run-manifest.json` (a dot file: metadata,
//! not one of the run's files), written once by the run's first push, stage build or upload
//! (or `quarry runs init`) from the CI environment (`GITHUB_SHA`, `GITHUB_REF_NAME`,
//! `GITHUB_WORKFLOW`, …), and finding runs by commit as TheRock's
//! `find_artifacts_for_commit.py` does (there through the GitHub API, here through the store
//! alone).
//!
//! The manifest is created with `If-None-Match`: the first writer wins and later ones read
//! what it wrote, so every job of a run agrees on it. It lies inside the run, so `quarry gc`
//! deletes it with the run.

use futures_util::StreamExt as _;

use quarry_store::{Condition, Key, KeyError, PutOptions, Store, StoreError, StoreExt as _};

use crate::{RunSegment, run_id_order};

/// The manifest's file name at the run root.
pub const MANIFEST_FILE: &str = ".run-manifest.json";
/// The largest manifest read.
const MAX_MANIFEST: u64 = 64 * 1024;

/// A run's manifest: where it came from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunManifest {
    /// The CI run id.
    pub run_id: String,
    /// `linux`, `windows`, ….
    pub platform: String,
    /// `owner/repo` (`GITHUB_REPOSITORY`).
    #[serde(default)]
    pub repository: Option<String>,
    /// The commit built, full sha (`GITHUB_SHA`).
    #[serde(default)]
    pub commit: Option<String>,
    /// The branch or tag (`GITHUB_REF_NAME`).
    #[serde(default)]
    pub branch: Option<String>,
    /// The workflow's name (`GITHUB_WORKFLOW`).
    #[serde(default)]
    pub workflow: Option<String>,
    /// What triggered the run (`GITHUB_EVENT_NAME`).
    #[serde(default)]
    pub event: Option<String>,
    /// The run's page (`GITHUB_SERVER_URL/GITHUB_REPOSITORY/actions/runs/GITHUB_RUN_ID`).
    #[serde(default)]
    pub url: Option<String>,
    /// When the manifest was written (RFC 3339, UTC).
    pub created: String,
}

impl RunManifest {
    /// The manifest of `run` from the CI variables `var` looks up (blank counts as unset).
    pub fn from_env(run: RunSegment<'_>, var: impl Fn(&str) -> Option<String>, now: jiff::Timestamp) -> Self {
        let var = |name: &str| var(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let url = match (var("GITHUB_SERVER_URL"), var("GITHUB_REPOSITORY"), var("GITHUB_RUN_ID")) {
            (Some(server), Some(repo), Some(id)) => {
                Some(format!("{}/{repo}/actions/runs/{id}", server.trim_end_matches('/')))
            }
            _ => None,
        };
        Self {
            run_id: run.run_id.to_owned(),
            platform: run.platform.to_owned(),
            repository: var("GITHUB_REPOSITORY"),
            commit: var("GITHUB_SHA").map(|s| s.to_ascii_lowercase()),
            branch: var("GITHUB_REF_NAME"),
            workflow: var("GITHUB_WORKFLOW"),
            event: var("GITHUB_EVENT_NAME"),
            url,
            created: now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }
    }

    /// Whether the run built `commit`: the whole sha or an abbreviation of it (see
    /// [`check_commit`]), in any case.
    pub fn built(&self, commit: &str) -> bool {
        let wanted = commit.trim().to_ascii_lowercase();
        self.commit.as_deref().is_some_and(|c| !wanted.is_empty() && c.to_ascii_lowercase().starts_with(&wanted))
    }

    /// The creation time, for ordering (the epoch when it does not parse).
    fn created_at(&self) -> jiff::Timestamp {
        self.created.parse().unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }
}

/// Refuses what cannot name a commit: 7 to 40 hex digits (git's shortest default abbreviation
/// up to a whole sha-1; 64 for sha-256 repositories).
pub fn check_commit(commit: &str) -> Result<(), RunsError> {
    let c = commit.trim();
    let ok = (7..=64).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_hexdigit());
    if ok { Ok(()) } else { Err(RunsError::BadCommit(commit.to_owned())) }
}

/// What can go wrong reading, writing or finding manifests.
#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    /// Not a commit sha (bad input).
    #[error("{0:?} is not a commit: give 7 to 64 hexadecimal digits of its sha")]
    BadCommit(String),
    /// The prefix names no run (`{run}-{platform}/`).
    #[error("{0:?} is not a run prefix ({{run}}-{{platform}}/)")]
    NotARun(String),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("{key}: not a run manifest: {error}")]
    Parse { key: String, error: serde_json::Error },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The run segment a run prefix (`[base/]{run}-{platform}/`) ends in.
fn segment_of(run_prefix: &str) -> Result<RunSegment<'_>, RunsError> {
    let last = run_prefix.trim_end_matches('/').rsplit('/').next().unwrap_or_default();
    RunSegment::parse(last).ok_or_else(|| RunsError::NotARun(run_prefix.to_owned()))
}

/// The key of a run's manifest.
pub fn manifest_key(run_prefix: &str) -> Result<Key, RunsError> {
    segment_of(run_prefix)?;
    Ok(Key::new(format!("{}/{MANIFEST_FILE}", run_prefix.trim_end_matches('/')))?)
}

/// The run's manifest, `None` when it has none.
pub async fn read_manifest(store: &dyn Store, run_prefix: &str) -> Result<Option<RunManifest>, RunsError> {
    let key = manifest_key(run_prefix)?;
    match store.get_bytes(&key, MAX_MANIFEST).await {
        Ok((_, bytes)) => {
            serde_json::from_slice(&bytes).map(Some).map_err(|error| RunsError::Parse { key: key.to_string(), error })
        }
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The run's manifest: the one it has, else one made from the CI variables `var` looks up,
/// written now (the first writer wins a race; the others read its manifest).
pub async fn ensure_run_manifest(
    store: &dyn Store,
    run_prefix: &str,
    var: impl Fn(&str) -> Option<String>,
) -> Result<RunManifest, RunsError> {
    if let Some(existing) = read_manifest(store, run_prefix).await? {
        return Ok(existing);
    }
    let manifest = RunManifest::from_env(segment_of(run_prefix)?, var, jiff::Timestamp::now());
    let key = manifest_key(run_prefix)?;
    let body =
        serde_json::to_vec_pretty(&manifest).map_err(|error| RunsError::Parse { key: key.to_string(), error })?;
    let options = PutOptions::condition(Condition::IfNoneMatch).with_content_type("application/json");
    match store.put_bytes(&key, body.into(), options).await {
        Ok(_) => Ok(manifest),
        Err(e) if e.is_conflict() => Ok(read_manifest(store, run_prefix).await?.unwrap_or(manifest)),
        Err(e) => Err(e.into()),
    }
}

/// Every run directly under `base` (`""` or `prefix/`) with its manifest (`None` without),
/// newest first: by manifest time, then by run id.
pub async fn list_runs(store: &dyn Store, base: &str) -> Result<Vec<(String, Option<RunManifest>)>, RunsError> {
    let top = store.list_all(base, true).await?;
    let prefixes: Vec<String> = top
        .common_prefixes
        .iter()
        .filter(|p| RunSegment::parse(p.trim_end_matches('/').rsplit('/').next().unwrap_or_default()).is_some())
        .cloned()
        .collect();
    let read: Vec<Result<(String, Option<RunManifest>), RunsError>> = futures_util::stream::iter(prefixes)
        .map(|prefix| async move {
            let manifest = read_manifest(store, &prefix).await?;
            Ok((prefix.trim_end_matches('/').to_owned(), manifest))
        })
        .buffered(16)
        .collect()
        .await;
    let mut runs = read.into_iter().collect::<Result<Vec<_>, _>>()?;
    runs.sort_by(|(a, ma), (b, mb)| {
        let time = |m: &Option<RunManifest>| m.as_ref().map(RunManifest::created_at);
        let id = |name: &str| {
            let segment = name.rsplit('/').next().unwrap_or(name).to_owned();
            let (len, digits) = run_id_order(&segment);
            (len, digits.to_owned())
        };
        time(mb).cmp(&time(ma)).then_with(|| id(b).cmp(&id(a))).then_with(|| a.cmp(b))
    });
    Ok(runs)
}

/// The runs under `base` that built `commit`, newest first.
pub async fn find_runs(store: &dyn Store, base: &str, commit: &str) -> Result<Vec<(String, RunManifest)>, RunsError> {
    check_commit(commit)?;
    let runs = list_runs(store, base).await?;
    Ok(runs.into_iter().filter_map(|(name, m)| m.filter(|m| m.built(commit)).map(|m| (name, m))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_store::MemoryStore;

    fn env(sha: &'static str) -> impl Fn(&str) -> Option<String> {
        move |name| match name {
            "GITHUB_SHA" => Some(sha.to_owned()),
            "GITHUB_REF_NAME" => Some("main".to_owned()),
            "GITHUB_WORKFLOW" => Some("CI".to_owned()),
            "GITHUB_REPOSITORY" => Some("ROCm/TheRock".to_owned()),
            "GITHUB_SERVER_URL" => Some("https://github.com/".to_owned()),
            "GITHUB_RUN_ID" => Some("12".to_owned()),
            "GITHUB_EVENT_NAME" => Some(" ".to_owned()),
            _ => None,
        }
    }

    #[test]
    fn manifests_come_from_the_ci_variables() {
        let now: jiff::Timestamp = "2026-11-24T10:00:00Z".parse().unwrap();
        let m = RunManifest::from_env(RunSegment::parse("12-linux").unwrap(), env("ABCDEF1234"), now);
        insta::assert_json_snapshot!(m, @r#"
        {
          "run_id": "12",
          "platform": "linux",
          "repository": "ROCm/TheRock",
          "commit": "abcdef1234",
          "branch": "main",
          "workflow": "CI",
          "event": null,
          "url": "https://github.com/ROCm/TheRock/actions/runs/12",
          "created": "2026-11-24T10:00:00Z"
        }
        "#);
        assert!(m.built("ABCDEF1") && m.built("abcdef1234") && !m.built("abcdef12345") && !m.built(""));
        assert!(check_commit("abcdef1").is_ok());
        for bad in ["abc", "xyz1234", "", &"a".repeat(65)] {
            let error = check_commit(bad).unwrap_err().to_string();
            assert!(error.ends_with("is not a commit: give 7 to 64 hexadecimal digits of its sha"), "{error}");
        }
    }

    #[tokio::test]
    async fn the_first_manifest_stays_and_runs_are_found_newest_first() {
        let store = MemoryStore::default();
        let first = ensure_run_manifest(&store, "1-linux/", env("aaaaaaa111")).await.unwrap();
        let again = ensure_run_manifest(&store, "1-linux/", env("bbbbbbb222")).await.unwrap();
        assert_eq!(first, again, "the first writer wins");
        ensure_run_manifest(&store, "2-linux/", env("bbbbbbb222")).await.unwrap();
        ensure_run_manifest(&store, "10-windows/", env("aaaaaaa111")).await.unwrap();
        store.put_bytes(&Key::new("3-linux/x.tar.zst").unwrap(), "x".into(), PutOptions::default()).await.unwrap();
        let found = find_runs(&store, "", "AAAAAAA").await.unwrap();
        let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["10-windows", "1-linux"], "same second: larger run id first");
        assert!(find_runs(&store, "", "ccccccc").await.unwrap().is_empty());
        assert!(matches!(find_runs(&store, "", "zz").await, Err(RunsError::BadCommit(_))));
        let all = list_runs(&store, "").await.unwrap();
        assert_eq!(all.len(), 4, "runs without a manifest are listed too");
        assert!(matches!(manifest_key("nope/"), Err(RunsError::NotARun(_))));
        store.put_bytes(&manifest_key("4-linux/").unwrap(), "{".into(), PutOptions::default()).await.unwrap();
        assert!(matches!(read_manifest(&store, "4-linux").await, Err(RunsError::Parse { .. })));
    }
}
