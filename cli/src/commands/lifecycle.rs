//! `quarry yank URL [--reason TEXT]`, `quarry unyank URL`, `quarry delete URL`: a file's life
//! after its upload. A server URL (`http(s)://HOST/KEY`) calls its routes (`POST /-/yank/KEY`,
//! `POST /-/unyank/KEY`, `DELETE /KEY`) with the upload token (`--token-file`, else
//! `QUARRY_TOKEN`); a store URL (`s3://BUCKET/KEY`, `file://PATH` or a path inside a local store)
//! acts on the store with [`quarry_index::lifecycle`], reindexes as the server would, and
//! appends to the store's audit log.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use quarry_index::audit_log::{AuditEntry, AuditOutcome};
use quarry_index::lifecycle::{self, Change, LifecycleError};
use quarry_index::{IndexConfig, Indexer};
use quarry_upload::destination::StoreDestination;

use super::UsageError;
use super::args::{JsonArg, LayoutConfigArg, StoreUrl};

/// What every one of the three takes.
#[derive(Debug, Args)]
pub(crate) struct FileArgs {
    /// The file: a server URL (http://HOST/RUN-linux/python/NAME.whl), s3://BUCKET/KEY, or a
    /// path (or file://PATH) inside a local store.
    url: String,
    /// File holding the upload token for a server URL (else `QUARRY_TOKEN`).
    #[arg(long)]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    json: JsonArg,
    #[command(flatten)]
    config: LayoutConfigArg,
}

#[derive(Debug, Args)]
pub(crate) struct YankArgs {
    #[command(flatten)]
    file: FileArgs,
    /// Why (shown by pip and uv when the version is still installed by `==`); at most 1024
    /// bytes, one line.
    #[arg(long, default_value = "")]
    reason: String,
}

pub(crate) async fn yank(args: YankArgs) -> anyhow::Result<()> {
    run(&args.file, Change::Yank, &args.reason).await
}

pub(crate) async fn unyank(args: FileArgs) -> anyhow::Result<()> {
    run(&args, Change::Unyank, "").await
}

pub(crate) async fn delete(args: FileArgs) -> anyhow::Result<()> {
    run(&args, Change::Delete, "").await
}

async fn run(args: &FileArgs, what: Change, reason: &str) -> anyhow::Result<()> {
    let url = args.url.as_str();
    if url.starts_with("http://") || url.starts_with("https://") {
        return through_server(args, what, reason).await;
    }
    let layout = args.config.load()?;
    let (store_url, key) = store_and_key(url)?;
    let store = store_url.open_existing().await?;
    let indexer = Indexer::new(store.clone(), layout).with_config(IndexConfig::from_env()?);
    let done = match what {
        Change::Yank => lifecycle::yank(&indexer, &key, reason).await,
        Change::Unyank => lifecycle::unyank(&indexer, &key).await,
        Change::Delete => lifecycle::delete(&indexer, &key).await,
    };
    let identity = super::audit::local_identity();
    let entry = match &done {
        Ok(r) => AuditEntry::now(what.audit_action(), &identity, &r.key, AuditOutcome::Ok)
            .sha256(r.sha256.clone())
            .detail(r.reason.clone().filter(|r| !r.is_empty())),
        Err(e) => {
            let outcome = match e {
                LifecycleError::BadInput(_) | LifecycleError::NotFound(_) | LifecycleError::Held { .. } => {
                    AuditOutcome::Refused
                }
                _ => AuditOutcome::Failed,
            };
            AuditEntry::now(what.audit_action(), &identity, &key, outcome).detail(Some(e.to_string()))
        }
    };
    super::audit::record(store.as_ref(), [entry]).await;
    let report = done.map_err(|e| match e {
        LifecycleError::BadInput(_) | LifecycleError::NotFound(_) | LifecycleError::Held { .. } => {
            anyhow::Error::new(UsageError::new(e.to_string()))
        }
        other => anyhow::Error::new(other),
    })?;
    super::print(args.json.json, &report, &report)
}

/// The store a URL lies in and the file's key: `s3://BUCKET/KEY`; a local path, re-rooted at
/// its store as `quarry upload` roots one (the directory holding `.quarry/`, else where the
/// `{run}-{platform}` segment begins).
fn store_and_key(url: &str) -> anyhow::Result<(StoreUrl, String)> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() || key.is_empty() {
            return Err(UsageError::new(format!("{url:?}: give s3://BUCKET/KEY")).into());
        }
        let store: StoreUrl = format!("s3://{bucket}").parse().map_err(UsageError::new)?;
        return Ok((store, key.to_owned()));
    }
    let path = url.strip_prefix("file://").unwrap_or(url);
    let whole = StoreDestination { store_url: path.to_owned(), prefix: String::new(), bucket: None };
    let rooted = super::upload::rooted(whole);
    let key = rooted.prefix.trim_end_matches('/').to_owned();
    if key.is_empty() {
        return Err(UsageError::new(format!(
            "{url:?} lies in no store: give a path inside a store (its directory holds .quarry/, or the path names a \
             RUN-PLATFORM directory), s3://BUCKET/KEY, or the server's URL"
        ))
        .into());
    }
    let store: StoreUrl = rooted.store_url.parse().map_err(UsageError::new)?;
    Ok((store, key))
}

/// The server's route for the change, with the token; the server's JSON report printed.
async fn through_server(args: &FileArgs, what: Change, reason: &str) -> anyhow::Result<()> {
    let url = reqwest::Url::parse(&args.url).map_err(|e| UsageError::new(format!("{:?}: {e}", args.url)))?;
    let token = super::read_tokens(args.token_file.as_deref())?
        .into_iter()
        .next()
        .context("no upload token: pass --token-file or set QUARRY_TOKEN")?;
    let http = reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(30));
    let http = quarry_upload::trusting_ssl_cert_file(http)?.build()?;
    let route = |name: &str| {
        let mut at = url.clone();
        at.set_path(&format!("/-/{name}{}", url.path()));
        at
    };
    let request = match what {
        Change::Yank => http
            .post(route("yank"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(serde_json::json!({ "reason": reason }).to_string()),
        Change::Unyank => http.post(route("unyank")),
        Change::Delete => http.delete(url.clone()),
    };
    let response = request.bearer_auth(token).send().await.with_context(|| format!("{} {url}", what.as_str()))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        let message = format!("{} {url}: {status}: {}", what.as_str(), body.trim().trim_start_matches("error: "));
        return Err(if status.is_client_error() { UsageError::new(message).into() } else { anyhow::anyhow!(message) });
    }
    let report: serde_json::Value = serde_json::from_str(&body).context("the server's answer is no JSON report")?;
    let text = format!(
        "{} {}{}\n",
        match (what, report["changed"].as_bool()) {
            (Change::Yank, Some(false)) => "already yanked",
            (Change::Yank, _) => "yanked",
            (Change::Unyank, Some(false)) => "was not yanked",
            (Change::Unyank, _) => "unyanked",
            (Change::Delete, _) => "deleted",
        },
        report["key"].as_str().unwrap_or_default(),
        report["sha256"].as_str().map(|s| format!(" sha256={s}")).unwrap_or_default()
    );
    super::print(args.json.json, &report, text)
}
