//! Where a CI run's artifacts live: a local staging directory (`{dir}/{run}-{platform}/`) or a
//! store (`s3://bucket[/prefix]` or a directory) under TheRock's run prefix, with TheRock's
//! external-repo folder in the external bucket. A [`Run`] is opened once and shared.
//!
//! A run's coordinates are not read from the environment here: [`RunLocation::with_defaults`]
//! applies TheRock's fallbacks (`THEROCK_RUN_ID`, then `GITHUB_RUN_ID`, then `local`;
//! `THEROCK_PLATFORM`; `GITHUB_REPOSITORY`; `RELEASE_TYPE`) through the lookup the caller passes,
//! so the command line decides where values come from (the environment) and tests pass their own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quarry_layout::LayoutError;
use quarry_store::{Key, Store, StoreError};
use quarry_topology::{Platform, Topology, TopologyError};

/// What can go wrong finding a topology or opening a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("reading {}", path.display())]
    ReadTopology { path: PathBuf, source: std::io::Error },
    /// The topology file does not parse or validate (bad input).
    #[error("{}", path.display())]
    Topology { path: PathBuf, source: TopologyError },
    #[error("run id {run_id:?} and platform {platform:?} do not make a valid key prefix")]
    BadPrefix { run_id: String, platform: String },
    #[error("the run's bucket and prefix")]
    Layout(#[from] LayoutError),
    #[error("creating {}", path.display())]
    Create { path: PathBuf, source: std::io::Error },
    #[error("opening {url}")]
    Open { url: String, source: StoreError },
}

/// Reads and validates a `BUILD_TOPOLOGY.toml`.
pub fn load_topology(path: &Path) -> Result<Topology, RunError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| RunError::ReadTopology { path: path.to_owned(), source })?;
    Topology::parse(&text).map_err(|source| RunError::Topology { path: path.to_owned(), source })
}

/// A run's coordinates, defaults already resolved (the command line reads the environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunLocation {
    /// The CI run id.
    pub run_id: String,
    /// `linux` or `windows` (any name makes a prefix; unknown ones count as Linux elsewhere).
    pub platform: String,
    /// A directory standing in for the bucket; wins over `store`.
    pub local_staging_dir: Option<PathBuf>,
    /// `s3://bucket[/prefix]` or a directory; `None`: TheRock's bucket for `release_type`.
    pub store: Option<String>,
    /// `owner/repo` of the run (decides the external bucket's folder).
    pub github_repo: String,
    /// `RELEASE_TYPE` (`ci`, `dev`, `nightly`, …), for the default bucket.
    pub release_type: String,
}

/// A run's coordinates as given on the command line, before TheRock's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LocationFlags {
    pub run_id: Option<String>,
    pub platform: Option<String>,
    pub local_staging_dir: Option<PathBuf>,
    pub store: Option<String>,
    pub github_repo: Option<String>,
}

impl RunLocation {
    /// The location `flags` give, the rest defaulted as TheRock's tools default it from the
    /// workflow variables `var` looks up: the run id from `THEROCK_RUN_ID`, else
    /// `GITHUB_RUN_ID`, else `local`; the platform from `THEROCK_PLATFORM`, else this
    /// machine's; the repository from `GITHUB_REPOSITORY`, else `ROCm/TheRock`; the release
    /// type from `RELEASE_TYPE`, else `ci`.
    pub fn with_defaults(flags: LocationFlags, var: impl Fn(&str) -> Option<String>) -> Self {
        let host = if cfg!(windows) { "windows" } else { "linux" };
        Self {
            run_id: (flags.run_id.or_else(|| var("THEROCK_RUN_ID")).or_else(|| var("GITHUB_RUN_ID")))
                .filter(|s| !s.trim().is_empty())
                .unwrap_or_else(|| "local".into()),
            platform: flags.platform.or_else(|| var("THEROCK_PLATFORM")).unwrap_or_else(|| host.into()),
            local_staging_dir: flags.local_staging_dir,
            store: flags.store,
            github_repo: flags
                .github_repo
                .or_else(|| var("GITHUB_REPOSITORY"))
                .unwrap_or_else(|| "ROCm/TheRock".into()),
            release_type: var("RELEASE_TYPE").unwrap_or_else(|| "ci".into()),
        }
    }

    /// The store URL to open and the run's key prefix (ending in `/`).
    pub fn resolve(&self) -> Result<(String, String), RunError> {
        let (run, platform) = (&self.run_id, &self.platform);
        if Key::new(format!("{run}-{platform}/x")).is_err() || run.contains('/') || platform.contains('/') {
            return Err(RunError::BadPrefix { run_id: run.clone(), platform: platform.clone() });
        }
        if let Some(dir) = &self.local_staging_dir {
            return Ok((dir.display().to_string(), format!("{run}-{platform}/")));
        }
        let url = match &self.store {
            Some(url) => url.clone(),
            None => {
                format!("s3://{}", quarry_layout::artifact_bucket(&self.release_type, &self.github_repo, false)?)
            }
        };
        let (store_url, bucket, base) = match url.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                (format!("s3://{bucket}"), bucket.to_owned(), prefix.trim_matches('/').to_owned())
            }
            None => (url.clone(), String::new(), String::new()),
        };
        let run_prefix = quarry_layout::run_prefix(&bucket, &self.github_repo, run, platform)?;
        let run_prefix = run_prefix.trim_end_matches('/');
        let prefix = if base.is_empty() { format!("{run_prefix}/") } else { format!("{base}/{run_prefix}/") };
        Ok((store_url, prefix))
    }
}

/// An opened run: the store, the run's key prefix and the topology its stages come from.
#[derive(Debug, Clone)]
pub struct Run {
    /// The store holding the run's artifacts.
    pub store: Arc<dyn Store>,
    /// `{run}-{platform}/` (under the store's base prefix and external-repo folder).
    pub prefix: String,
    /// The topology the run's stages and artifacts come from.
    pub topology: Topology,
    /// Where it was opened from.
    pub location: RunLocation,
}

impl Run {
    /// Opens the run's store (creating a local staging directory).
    pub async fn open(location: &RunLocation, topology: Topology) -> Result<Run, RunError> {
        let (url, prefix) = location.resolve()?;
        if let Some(dir) = &location.local_staging_dir {
            std::fs::create_dir_all(dir).map_err(|source| RunError::Create { path: dir.clone(), source })?;
        }
        let store = quarry_store::open(&url).await.map_err(|source| RunError::Open { url, source })?;
        Ok(Run { store, prefix, topology, location: location.clone() })
    }

    /// The run's platform; names other than `linux` and `windows` count as Linux.
    pub fn platform(&self) -> Platform {
        Platform::parse(&self.location.platform).unwrap_or(Platform::Linux)
    }

    /// The key prefix of another run in the same store and platform.
    pub fn other_prefix(&self, run_id: &str) -> Result<String, RunError> {
        Ok(RunLocation { run_id: run_id.to_owned(), ..self.location.clone() }.resolve()?.1)
    }

    /// The key of `file` in this run.
    pub fn key(&self, file: &str) -> Result<Key, crate::OpError> {
        Ok(Key::new(format!("{}{file}", self.prefix))?)
    }

    /// The file names under a run prefix (this run's or another's in the same store).
    pub async fn listed(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        use quarry_store::StoreExt as _;
        let listing = self.store.list_all(prefix, true).await?;
        Ok(listing.objects.iter().filter_map(|o| o.key.as_str().strip_prefix(prefix).map(str::to_owned)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_therocks_variables() {
        let vars = |name: &str| match name {
            "GITHUB_RUN_ID" => Some("42".to_owned()),
            "THEROCK_RUN_ID" => Some(" ".to_owned()),
            "RELEASE_TYPE" => Some("nightly".to_owned()),
            _ => None,
        };
        // THEROCK_RUN_ID wins over GITHUB_RUN_ID even when blank, and a blank id is `local`.
        let location = RunLocation::with_defaults(LocationFlags::default(), vars);
        assert_eq!((location.run_id.as_str(), location.release_type.as_str()), ("local", "nightly"));
        assert_eq!(location.github_repo, "ROCm/TheRock");
        let flags =
            LocationFlags { run_id: Some("7".into()), platform: Some("windows".into()), ..LocationFlags::default() };
        let location = RunLocation::with_defaults(flags, |_| None);
        assert_eq!((location.run_id.as_str(), location.platform.as_str()), ("7", "windows"));
    }

    fn location() -> RunLocation {
        RunLocation {
            run_id: "42".into(),
            platform: "linux".into(),
            local_staging_dir: None,
            store: None,
            github_repo: "ROCm/TheRock".into(),
            release_type: "ci".into(),
        }
    }

    #[test]
    fn prefixes_follow_therock_layout() {
        let (url, prefix) = location().resolve().unwrap();
        assert_eq!((url.as_str(), prefix.as_str()), ("s3://therock-ci-artifacts", "42-linux/"));
        let fork = RunLocation { github_repo: "me/TheRock".into(), ..location() };
        assert_eq!(fork.resolve().unwrap().1, "me-TheRock/42-linux/");
        let based = RunLocation { store: Some("s3://b/base/".into()), ..location() };
        assert_eq!(based.resolve().unwrap(), ("s3://b".to_owned(), "base/42-linux/".to_owned()));
        let local = RunLocation { local_staging_dir: Some("/tmp/s".into()), ..location() };
        assert_eq!(local.resolve().unwrap(), ("/tmp/s".to_owned(), "42-linux/".to_owned()));
        let bad = RunLocation { run_id: "a/b".into(), ..location() };
        assert!(matches!(bad.resolve(), Err(RunError::BadPrefix { .. })));
    }
}
