//! Argument groups several commands share, each declared once: the store (`--store`,
//! `QUARRY_STORE`), `--json`, and the kinds of repository (`pip`, `apt`, `dnf`). A command
//! takes them with `#[command(flatten)]` (or the typed value), so a flag is spelled, documented
//! and checked the same everywhere, and a value clap refuses exits 2.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use quarry_index::RepoKind;
use quarry_stage::{LocationFlags, RunLocation};
use quarry_store::Store;
use quarry_topology::Platform;

use super::UsageError;

/// What `--store` takes: a directory, `file://PATH`, or `s3://BUCKET[/PREFIX]`. Any other
/// `SCHEME://` is refused when the command line is parsed (exit 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoreUrl(String);

impl StoreUrl {
    /// The URL as given (what `quarry_store::open` takes).
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The directory of a local store (`file://` stripped); `None` for S3.
    pub(crate) fn local_dir(&self) -> Option<&Path> {
        if self.0.starts_with("s3://") || self.0.starts_with("memory://") {
            return None;
        }
        Some(Path::new(self.0.strip_prefix("file://").unwrap_or(&self.0)))
    }

    /// Opens a store that must exist already: a local directory that is not there is bad input
    /// (exit 2, naming it), and nothing is created (opening would create it, and a mistyped
    /// path would then quietly hold nothing).
    pub(crate) async fn open_existing(&self) -> anyhow::Result<Arc<dyn Store>> {
        self.check_exists()?;
        self.open().await
    }

    /// A local store's directory must be there (S3 is not checked here: opening it lists
    /// nothing, and the first request names a missing bucket).
    pub(crate) fn check_exists(&self) -> Result<(), UsageError> {
        if let Some(dir) = self.local_dir()
            && !dir.is_dir()
        {
            let what = if dir.exists() { "is not a directory" } else { "does not exist" };
            return Err(UsageError::new(format!(
                "store {}: {} {what} (only `quarry serve` and commands that write create a store)",
                self.0,
                dir.display()
            )));
        }
        Ok(())
    }

    /// Opens the store, creating a local directory if missing (`quarry serve`, uploads).
    pub(crate) async fn open(&self) -> anyhow::Result<Arc<dyn Store>> {
        quarry_store::open(&self.0).await.with_context(|| format!("opening store {}", self.0))
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for StoreUrl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("empty: give a directory, file://PATH or s3://BUCKET[/PREFIX]".into());
        }
        match text.split_once("://") {
            Some(("s3", rest)) if rest.split('/').next().is_none_or(str::is_empty) => {
                return Err(format!("{text:?} names no bucket: s3://BUCKET[/PREFIX]"));
            }
            Some(("s3", _)) => {}
            Some(("file", "")) => return Err(format!("{text:?} names no directory")),
            Some(("file", _)) => {}
            // The in-memory store, for tests of the binary.
            Some(("memory", "")) => {}
            Some((scheme, _)) => {
                return Err(format!(
                    "{text:?}: unsupported scheme {scheme:?}; give a directory, file://PATH or s3://BUCKET[/PREFIX]"
                ));
            }
            None => {}
        }
        Ok(Self(text.to_owned()))
    }
}

/// `--store` for a command that works on one store.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct StoreArg {
    /// The store: a directory, file://PATH or s3://BUCKET[/PREFIX] (S3 credentials and
    /// `AWS_ENDPOINT_URL` from the environment).
    #[arg(long, env = "QUARRY_STORE", value_name = "STORE")]
    pub(crate) store: StoreUrl,
}

/// `--store` for a command with a default store (`quarry serve`'s `./quarry-store`, TheRock's
/// bucket for the stage tools): the same forms and variable, optional.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct OptionalStoreArg {
    /// The store: a directory, file://PATH or s3://BUCKET[/PREFIX] (S3 credentials and
    /// `AWS_ENDPOINT_URL` from the environment).
    #[arg(long, env = "QUARRY_STORE", value_name = "STORE")]
    pub(crate) store: Option<StoreUrl>,
}

impl OptionalStoreArg {
    pub(crate) fn url(&self) -> Option<String> {
        self.store.as_ref().map(ToString::to_string)
    }
}

/// `--json`: the report as JSON on stdout instead of text.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub(crate) struct JsonArg {
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--config`: the `quarry.toml` whose `[layout]` names the roots beyond a run's.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct LayoutConfigArg {
    /// `quarry.toml` whose `[layout]` names the roots beyond a run's [default: ./quarry.toml if
    /// present].
    #[arg(long, env = "QUARRY_CONFIG", value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
}

impl LayoutConfigArg {
    /// The file's `[layout]` (else the default), for the command to pass down.
    pub(crate) fn load(&self) -> anyhow::Result<std::sync::Arc<quarry_layout::config::Layout>> {
        super::load_layout(self.config.as_deref())
    }
}

/// A kind of repository root, as every command spells it: `pip`, `apt` (also `deb`), `dnf`
/// (also `rpm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum KindArg {
    /// Wheels and sdists: find-links and simple pages.
    Pip,
    /// `.deb` packages: an apt repository.
    #[value(alias = "deb")]
    Apt,
    /// `.rpm` packages: a dnf repository.
    #[value(alias = "rpm")]
    Dnf,
}

impl KindArg {
    /// Every kind, as a default.
    pub(crate) const ALL: [KindArg; 3] = [KindArg::Pip, KindArg::Apt, KindArg::Dnf];

    /// A kind by any of its spellings (`pip`, `apt`/`deb`, `dnf`/`rpm`), for values inside
    /// other values (`KIND:PREFIX`).
    pub(crate) fn parse(label: &str) -> Option<Self> {
        <Self as clap::ValueEnum>::from_str(label, false).ok()
    }
}

impl From<KindArg> for RepoKind {
    fn from(kind: KindArg) -> Self {
        match kind {
            KindArg::Pip => RepoKind::Pip,
            KindArg::Apt => RepoKind::Apt,
            KindArg::Dnf => RepoKind::Dnf,
        }
    }
}

/// `--platform`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PlatformArg {
    Linux,
    Windows,
}

impl From<PlatformArg> for Platform {
    fn from(value: PlatformArg) -> Self {
        match value {
            PlatformArg::Linux => Platform::Linux,
            PlatformArg::Windows => Platform::Windows,
        }
    }
}

/// Where a run's artifacts live.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Backend {
    /// The CI run (default: `THEROCK_RUN_ID`, else `GITHUB_RUN_ID`, else `local`).
    #[arg(long)]
    run_id: Option<String>,
    /// `linux` or `windows` (default: `THEROCK_PLATFORM`, else this machine's).
    #[arg(long, value_enum)]
    pub(crate) platform: Option<PlatformArg>,
    /// A directory standing in for the bucket: `{dir}/{run}-{platform}/{file}`. Without it or
    /// --store: TheRock's bucket for `RELEASE_TYPE` and `GITHUB_REPOSITORY`.
    #[arg(long, env = "THEROCK_LOCAL_STAGING_DIR")]
    local_staging_dir: Option<PathBuf>,
    #[command(flatten)]
    store: OptionalStoreArg,
    /// `owner/repo` of the run (default: `GITHUB_REPOSITORY`, else `ROCm/TheRock`).
    #[arg(long)]
    run_github_repo: Option<String>,
}

impl Backend {
    /// The run's coordinates, defaults from the environment as TheRock's tools read them.
    pub(crate) fn location(&self) -> RunLocation {
        let flags = LocationFlags {
            run_id: self.run_id.clone(),
            platform: self.platform.map(|p| Platform::from(p).as_str().to_owned()),
            local_staging_dir: self.local_staging_dir.clone(),
            store: self.store.url(),
            github_repo: self.run_github_repo.clone(),
        };
        RunLocation::with_defaults(flags, |name| std::env::var(name).ok())
    }

    /// The platform CMake is configured for: `--platform`, else this machine's.
    pub(crate) fn cmake_platform(&self) -> Platform {
        self.platform.map_or_else(Platform::host, Platform::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_urls_are_directories_file_or_s3() {
        for good in ["./store", "/srv/quarry", "file:///srv/quarry", "s3://bucket", "s3://bucket/prefix/", "memory://"]
        {
            assert_eq!(good.parse::<StoreUrl>().map(|s| s.to_string()), Ok(good.to_owned()), "{good}");
        }
        for bad in ["", "s3://", "s3:///prefix", "file://", "http://host/", "gs://bucket"] {
            assert!(bad.parse::<StoreUrl>().is_err(), "{bad}");
        }
        let dir: StoreUrl = "file:///srv/q".parse().unwrap();
        assert_eq!(dir.local_dir(), Some(Path::new("/srv/q")));
        assert_eq!("s3://b/p".parse::<StoreUrl>().unwrap().local_dir(), None);
    }

    #[test]
    fn kinds_take_both_spellings() {
        assert_eq!(KindArg::parse("deb"), Some(KindArg::Apt));
        assert_eq!(KindArg::parse("rpm"), Some(KindArg::Dnf));
        assert_eq!(KindArg::parse("pip"), Some(KindArg::Pip));
        assert_eq!(KindArg::parse("wheel"), None);
    }
}
