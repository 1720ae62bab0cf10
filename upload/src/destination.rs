//! Where an upload goes: a Quarry server, a store prefix, or the prefix TheRock computes for a
//! CI run; which [`UploadKind`] of files a destination holds, and the index URL reported for it.

use quarry_layout::{self as layout, LayoutError, UploadKind};

/// Why a destination cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DestinationError {
    /// A server destination that does not parse as a URL.
    #[error("--to {to:?} is not a URL")]
    NotAUrl {
        /// The destination, with its trailing `/`.
        to: String,
        /// Why it does not parse.
        source: crate::http::UrlError,
    },
    /// A server destination that is not http(s).
    #[error("--to must be an http(s) URL of a Quarry server, got {0:?}")]
    NotHttp(String),
    /// Neither a destination nor a run id to compute one from.
    #[error("pass --to, or --run-id (GITHUB_RUN_ID) to compute it")]
    NoRunId,
    /// The run's bucket or prefix cannot be computed.
    #[error(transparent)]
    Layout(#[from] LayoutError),
}

/// Where `quarry upload --to` sends files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A Quarry server's root URL, ending in `/` (files are PUT below it).
    Server(reqwest::Url),
    /// A store and the prefix the files' keys start with.
    Store(StoreDestination),
}

impl Destination {
    /// `http://…` and `https://…` are servers ([`server_base`]); anything else is a store
    /// ([`StoreDestination::parse`]).
    pub fn parse(to: &str) -> Result<Self, DestinationError> {
        if to.starts_with("http://") || to.starts_with("https://") {
            server_base(to).map(Self::Server)
        } else {
            Ok(Self::Store(StoreDestination::parse(to)))
        }
    }
}

/// A server root URL: `to` with a trailing `/`, which must be http(s).
pub fn server_base(to: &str) -> Result<reqwest::Url, DestinationError> {
    let to = if to.ends_with('/') { to.to_owned() } else { format!("{to}/") };
    let base = reqwest::Url::parse(&to).map_err(|source| DestinationError::NotAUrl { to: to.clone(), source })?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(DestinationError::NotHttp(to));
    }
    Ok(base)
}

/// A store to open and the key prefix below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreDestination {
    /// What `quarry_store::open` takes: `s3://bucket` or a local directory.
    pub store_url: String,
    /// The keys' prefix: empty, or ending in `/`.
    pub prefix: String,
    /// The bucket the public URL names, when it was computed rather than given in the URL.
    pub bucket: Option<String>,
}

impl StoreDestination {
    /// `s3://bucket/prefix/` (the prefix gets a trailing `/`), or a local store directory whose
    /// keys start at its top.
    pub fn parse(to: &str) -> Self {
        let (store_url, mut prefix) = match to.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                (format!("s3://{bucket}"), prefix.to_owned())
            }
            None => (to.to_owned(), String::new()),
        };
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        Self { store_url, prefix, bucket: None }
    }

    /// The destination one directory deeper: `{prefix}{group}/` (an artifact group, checked by
    /// [`crate::step::check_group`]).
    #[must_use]
    pub fn with_group(mut self, group: &str) -> Self {
        self.prefix = format!("{}{}/", self.prefix, group.trim_matches('/'));
        self
    }

    /// The key of a file at `relative` (a name, or a path below an uploaded directory).
    pub fn key(&self, relative: &str) -> String {
        format!("{}{relative}", self.prefix)
    }

    /// The index clients point at for uploads of `kind`: the find-links page or run listing
    /// (`…/index.html`), the apt root above the pool, the dnf root itself.
    pub fn index_key(&self, kind: UploadKind) -> String {
        let layout = &layout::THEROCK;
        match kind {
            UploadKind::Python | UploadKind::Artifacts | UploadKind::Logs => self.key("index.html"),
            UploadKind::Deb => {
                let (root, upload) = (layout.root_dir(UploadKind::Deb), layout.upload_dir(UploadKind::Deb));
                let pool = upload.strip_prefix(root.as_str()).unwrap_or_default();
                if pool.is_empty() { self.prefix.clone() } else { self.prefix.trim_end_matches(pool).to_owned() }
            }
            UploadKind::Rpm => self.prefix.clone(),
        }
    }

    /// The URL of [`index_key`](Self::index_key): `public_url(bucket, key)` for S3 (such as
    /// `quarry_layout::public_url`), else the path in the store's directory.
    pub fn index_url(&self, kind: UploadKind, public_url: fn(&str, &str) -> String) -> String {
        let index_key = self.index_key(kind);
        match (&self.bucket, self.store_url.strip_prefix("s3://")) {
            (Some(bucket), _) => public_url(bucket, &index_key),
            (None, Some(bucket)) => public_url(bucket, &index_key),
            (None, None) => format!("{}/{index_key}", self.store_url.trim_end_matches('/')),
        }
    }
}

/// The destination TheRock computes for a CI run: `s3://{bucket}/{run prefix}{kind's dir}`.
/// The caller resolves the CI environment (`RELEASE_TYPE`, `GITHUB_REPOSITORY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunTarget<'a> {
    /// The run id (`GITHUB_RUN_ID`); none is an error.
    pub run_id: Option<&'a str>,
    /// The platform (`linux`, `windows`).
    pub platform: &'a str,
    /// What is uploaded: decides the directory under the run prefix.
    pub kind: UploadKind,
    /// The bucket; none: chosen from the release type, repository and fork flag.
    pub bucket: Option<&'a str>,
    /// `RELEASE_TYPE` (empty for `ci`).
    pub release_type: &'a str,
    /// `GITHUB_REPOSITORY` (`owner/name`).
    pub repository: &'a str,
    /// The run is a pull request from a fork.
    pub fork: bool,
    /// The artifact group below the kind's directory (`python/{group}/`, `logs/{group}/`).
    pub group: Option<&'a str>,
}

impl RunTarget<'_> {
    /// The store destination of the run, with its bucket for the public URL.
    pub fn destination(&self) -> Result<StoreDestination, DestinationError> {
        let run_id = self.run_id.ok_or(DestinationError::NoRunId)?;
        let bucket = match self.bucket {
            Some(bucket) => bucket,
            None => layout::artifact_bucket(self.release_type, self.repository, self.fork)?,
        };
        let prefix = layout::run_prefix(bucket, self.repository, run_id, self.platform)?;
        let to = format!("s3://{bucket}/{prefix}{}", layout::THEROCK.upload_dir(self.kind));
        let destination = StoreDestination { bucket: Some(bucket.to_owned()), ..StoreDestination::parse(&to) };
        Ok(match self.group {
            Some(group) => destination.with_group(group),
            None => destination,
        })
    }
}

/// The kind of files a `--to` destination holds, by its path: a pip root's segment, the apt
/// root, the dnf roots' directory (any architecture), a logs directory, else stage artifacts.
/// Without a destination, python.
pub fn infer_kind(to: Option<&str>) -> UploadKind {
    let layout = &layout::THEROCK;
    let python = layout.root_dir(UploadKind::Python);
    let to = to.unwrap_or(&python);
    let segments: Vec<&str> = to.split('/').collect();
    let rpm_root = layout.root_dir(UploadKind::Rpm);
    // The directory above the dnf root (`packages/rpm/`): every architecture's root is below it.
    let rpm_dirs = match rpm_root.trim_end_matches('/').rsplit_once('/') {
        Some((parent, _)) => format!("{parent}/"),
        None => rpm_root.clone(),
    };
    if layout.python_segment(&segments).is_some() {
        UploadKind::Python
    } else if to.contains(&layout.root_dir(UploadKind::Deb)) {
        UploadKind::Deb
    } else if to.contains(&rpm_dirs) {
        UploadKind::Rpm
    } else if segments.contains(&layout.root_dir(UploadKind::Logs).trim_end_matches('/')) {
        UploadKind::Logs
    } else {
        UploadKind::Artifacts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_inferred_from_the_destination() {
        for (to, kind) in [
            (None, UploadKind::Python),
            (Some("s3://b/1-linux/python/"), UploadKind::Python),
            (Some("http://h/1-linux/python/gfx94X/"), UploadKind::Python),
            (Some("s3://b/1-linux/pythonic/"), UploadKind::Artifacts),
            (Some("s3://b/1-linux/packages/deb/pool/main/"), UploadKind::Deb),
            (Some("s3://b/1-linux/packages/rpm/x86_64/"), UploadKind::Rpm),
            (Some("s3://b/1-linux/packages/rpm/aarch64/"), UploadKind::Rpm),
            (Some("s3://b/1-linux/"), UploadKind::Artifacts),
            (Some("s3://b/1-linux/logs/gfx94X-dcgpu/"), UploadKind::Logs),
            (Some("/srv/store"), UploadKind::Artifacts),
        ] {
            assert_eq!(infer_kind(to), kind, "{to:?}");
        }
    }

    #[test]
    fn destinations_parse() {
        let s3 = |store_url: &str, prefix: &str| StoreDestination {
            store_url: store_url.into(),
            prefix: prefix.into(),
            bucket: None,
        };
        assert_eq!(StoreDestination::parse("s3://b/1-linux/python"), s3("s3://b", "1-linux/python/"));
        assert_eq!(StoreDestination::parse("s3://b"), s3("s3://b", ""));
        assert_eq!(StoreDestination::parse("s3://b/"), s3("s3://b", ""));
        assert_eq!(StoreDestination::parse("/srv/store"), s3("/srv/store", ""));
        assert_eq!(
            Destination::parse("http://h:8080/1-linux/python").unwrap(),
            Destination::Server(reqwest::Url::parse("http://h:8080/1-linux/python/").unwrap())
        );
        assert!(matches!(Destination::parse("s3://b/x/"), Ok(Destination::Store(_))));
        let error = Destination::parse("http://[::1/").unwrap_err();
        assert_eq!(error.to_string(), r#"--to "http://[::1/" is not a URL"#);
        assert!(matches!(server_base("ftp://h/"), Err(DestinationError::NotHttp(_))));
    }

    #[test]
    fn run_destinations_follow_therock() {
        let target = RunTarget {
            run_id: Some("12345"),
            platform: "linux",
            kind: UploadKind::Deb,
            bucket: None,
            release_type: "",
            repository: "ROCm/rocm-libraries",
            fork: false,
            group: None,
        };
        let dest = target.destination().unwrap();
        assert_eq!(dest.store_url, "s3://therock-ci-artifacts-external");
        assert_eq!(dest.prefix, "ROCm-rocm-libraries/12345-linux/packages/deb/pool/main/");
        assert_eq!(dest.bucket.as_deref(), Some("therock-ci-artifacts-external"));
        let artifacts =
            RunTarget { kind: UploadKind::Artifacts, bucket: Some("b"), repository: "ROCm/TheRock", ..target };
        assert_eq!(artifacts.destination().unwrap().prefix, "12345-linux/");
        assert!(matches!(RunTarget { run_id: None, ..target }.destination(), Err(DestinationError::NoRunId)));
        let grouped = RunTarget { kind: UploadKind::Python, group: Some("gfx94X-dcgpu"), ..artifacts };
        assert_eq!(grouped.destination().unwrap().prefix, "12345-linux/python/gfx94X-dcgpu/");
        let logs = RunTarget { kind: UploadKind::Logs, group: Some("math-libs/gfx1151"), ..artifacts };
        assert_eq!(logs.destination().unwrap().prefix, "12345-linux/logs/math-libs/gfx1151/");
        let release = RunTarget { release_type: "release", ..target };
        assert_eq!(
            release.destination().unwrap_err().to_string(),
            r#"unknown RELEASE_TYPE "release": expected ci, dev, dev-bkc, nightly, nightly-bkc or prerelease"#
        );
    }

    #[test]
    fn index_urls_name_the_root_clients_use() {
        let url = |to: &str, kind| StoreDestination::parse(to).index_url(kind, layout::public_url);
        assert_eq!(
            url("s3://b/1-linux/python/", UploadKind::Python),
            "https://b.s3.amazonaws.com/1-linux/python/index.html"
        );
        assert_eq!(url("s3://b/1-linux/", UploadKind::Artifacts), "https://b.s3.amazonaws.com/1-linux/index.html");
        assert_eq!(
            url("s3://b/1-linux/packages/deb/pool/main/", UploadKind::Deb),
            "https://b.s3.amazonaws.com/1-linux/packages/deb/"
        );
        assert_eq!(
            url("s3://b/1-linux/packages/rpm/x86_64", UploadKind::Rpm),
            "https://b.s3.amazonaws.com/1-linux/packages/rpm/x86_64/"
        );
        assert_eq!(url("/srv/store/", UploadKind::Python), "/srv/store/index.html");
        let computed = StoreDestination { bucket: Some("other".into()), ..StoreDestination::parse("s3://b/x/") };
        assert_eq!(computed.index_url(UploadKind::Rpm, layout::public_url), "https://other.s3.amazonaws.com/x/");
    }
}
