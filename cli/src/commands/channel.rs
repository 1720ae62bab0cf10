//! `quarry channel history|rollback|forget CHANNEL`: a channel's versions (each promotion into
//! it and `quarry promote --init` make one), the switch back to an older one, and the removal
//! of old ones' pages, over [`quarry_index::versions`]. A rollback rewrites the channel's
//! pointer only (one read, one conditional write) and records an audit entry.
//!
//! The CDN's function (`infra/cloudfront/index-router.js`) reads the current version from a
//! CloudFront KeyValueStore: with `--kvs-arn` (`QUARRY_KVS_ARN`) a switch (rollback, a
//! promotion or prune making a version) writes the channel's key there after the store's
//! pointer moved ([`write_kvs`], [`quarry_store::kvs`]); without it the key and value are
//! printed for the deploy to write (`aws cloudfront-keyvaluestore put-key`).

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use quarry_index::audit_log::{AuditAction, AuditEntry, AuditOutcome};
use quarry_index::versions::{self, ChannelVersion, VersionError};
use quarry_store::Store;

use super::args::{JsonArg, StoreArg};

#[derive(Debug, Args)]
pub(crate) struct ChannelArgs {
    #[command(subcommand)]
    command: ChannelCommand,
}

#[derive(Debug, Subcommand)]
enum ChannelCommand {
    /// List the channel's versions: the current one marked, the run each came from, when, how
    /// many package files and pages it holds.
    History(HistoryArgs),
    /// Switch the channel's readers back to an older version (default: the one before the
    /// current), in one write.
    Rollback(RollbackArgs),
    /// Delete old versions' pages so history does not grow forever (never the current
    /// version): files only they named are no longer held from `quarry delete` and prune, and a
    /// rollback to them is refused.
    Forget(ForgetArgs),
}

#[derive(Debug, Args)]
struct HistoryArgs {
    /// The channel: a key prefix (`nightly`, `v5/rocm/core`).
    channel: String,
    #[command(flatten)]
    store: StoreArg,
    #[command(flatten)]
    json: JsonArg,
}

#[derive(Debug, Args)]
struct RollbackArgs {
    /// The channel: a key prefix (`nightly`, `v5/rocm/core`).
    channel: String,
    /// The version to make current [default: the newest one older than the current].
    #[arg(long, value_name = "VERSION")]
    to: Option<u64>,
    #[command(flatten)]
    store: StoreArg,
    #[command(flatten)]
    kvs: KvsArg,
    #[command(flatten)]
    json: JsonArg,
}

/// `--kvs-arn`: the CloudFront KeyValueStore a switch is written to.
#[derive(Debug, Clone, Default, Args)]
pub(crate) struct KvsArg {
    /// The CloudFront KeyValueStore the CDN's function reads channel versions from
    /// (infra/cloudfront/index-router.js): once the store's pointer has moved, the channel's key
    /// (its prefix in the bucket, `/nightly/`) is set to its current version there. Without it,
    /// the key and value are printed for the deploy to write.
    #[arg(long, env = "QUARRY_KVS_ARN", value_name = "ARN")]
    pub(crate) kvs_arn: Option<String>,
}

/// The KeyValueStore key of `channel` (a prefix in `store`): the bucket key, the store's own
/// prefix first, as the edge sees it.
pub(crate) fn kvs_key_in(store: &str, channel: &str) -> String {
    let destination = quarry_upload::destination::StoreDestination::parse(store);
    versions::kvs_key(&destination.key(channel))
}

/// Set `key` to `version` in the KeyValueStore `arn` (the store's pointer has moved already):
/// a failure says so, with the key and value left to write.
pub(crate) async fn write_kvs(arn: &str, key: &str, version: u64) -> anyhow::Result<()> {
    let client = quarry_store::kvs::KvsClient::from_env(arn).await;
    client.put(key, &version.to_string()).await.map_err(|e| {
        anyhow::anyhow!(
            "writing the CloudFront KeyValueStore {arn} failed: {e}\nthe store's pointer already moved to version \
             {version}: the CDN serves the old version until key {key} = {version} is written there (aws \
             cloudfront-keyvaluestore put-key --kvs-arn {arn} --key {key} --value {version} --if-match ETAG)"
        )
    })
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["keep", "versions"]))]
struct ForgetArgs {
    /// The channel: a key prefix (`nightly`, `v5/rocm/core`).
    channel: String,
    /// The versions to forget.
    #[arg(value_name = "VERSION")]
    versions: Vec<u64>,
    /// Keep the N newest versions (and the current one); forget the others.
    #[arg(long, value_name = "N")]
    keep: Option<usize>,
    #[command(flatten)]
    store: StoreArg,
    #[command(flatten)]
    json: JsonArg,
}

#[derive(Debug, serde::Serialize)]
struct History {
    channel: String,
    current: u64,
    versions: Vec<ChannelVersion>,
}

fn usage(e: VersionError) -> anyhow::Error {
    if e.is_bad_input() { anyhow::Error::new(super::UsageError::new(e.to_string())) } else { anyhow::Error::new(e) }
}

/// One audit entry of a channel command.
async fn audit(
    store: &dyn Store,
    action: AuditAction,
    identity: &str,
    channel: &str,
    outcome: AuditOutcome,
    detail: String,
) {
    let entry = AuditEntry::now(action, identity, channel, outcome).detail(Some(detail));
    super::audit::record(store, [entry]).await;
}

/// `result`, its error recorded first as a refused (bad input) or failed `action`.
async fn audited<T>(
    result: Result<T, VersionError>,
    store: &dyn Store,
    action: AuditAction,
    identity: &str,
    channel: &str,
) -> anyhow::Result<T> {
    match result {
        Ok(value) => Ok(value),
        Err(e) => {
            let outcome = if e.is_bad_input() { AuditOutcome::Refused } else { AuditOutcome::Failed };
            audit(store, action, identity, channel, outcome, e.to_string()).await;
            Err(usage(e))
        }
    }
}

pub(crate) async fn run(args: ChannelArgs) -> anyhow::Result<()> {
    match args.command {
        ChannelCommand::History(args) => history(args).await,
        ChannelCommand::Rollback(args) => rollback(args).await,
        ChannelCommand::Forget(args) => forget(args).await,
    }
}

async fn history(args: HistoryArgs) -> anyhow::Result<()> {
    let store = args.store.store.open_existing().await?;
    let prefix = versions::channel_prefix(&args.channel).map_err(usage)?;
    let Some((pointer, _)) = versions::read_pointer(store.as_ref(), &prefix).await.map_err(usage)? else {
        return Err(super::UsageError::new(format!("{prefix} has no versions (promote into it first)")).into());
    };
    let history = History { channel: prefix, current: pointer.current, versions: pointer.versions };
    let mut text = String::new();
    for v in history.versions.iter().rev() {
        let mark = if v.n == history.current { "*" } else { " " };
        let from = v.from.as_deref().or(v.note.as_deref()).unwrap_or("-");
        let _ = writeln!(text, "{mark} {:>4}  {}  from {from}  {} files, {} pages", v.n, v.created, v.files, v.pages);
    }
    super::print(args.json.json, &history, text)
}

async fn rollback(args: RollbackArgs) -> anyhow::Result<()> {
    let store = args.store.store.open_existing().await?;
    let identity = super::audit::local_identity();
    let result = versions::rollback(store.as_ref(), &args.channel, args.to).await;
    let mut switched = audited(result, store.as_ref(), AuditAction::Rollback, &identity, &args.channel).await?;
    // The edge sees bucket keys: the store's own prefix comes first.
    switched.kvs_key = kvs_key_in(args.store.store.as_str(), &switched.channel);
    let detail = format!("version {} -> {}", switched.from, switched.to);
    audit(store.as_ref(), AuditAction::Rollback, &identity, &switched.channel, AuditOutcome::Ok, detail).await;
    let written = match &args.kvs.kvs_arn {
        Some(arn) => {
            write_kvs(arn, &switched.kvs_key, switched.to).await?;
            format!(" (written to {arn})")
        }
        None => String::new(),
    };
    let text = format!(
        "{}: version {} -> {}\ncdn: key {} = {}{written}\n",
        switched.channel, switched.from, switched.to, switched.kvs_key, switched.kvs_value
    );
    super::print(args.json.json, &switched, text)
}

async fn forget(args: ForgetArgs) -> anyhow::Result<()> {
    let store = args.store.store.open_existing().await?;
    let identity = super::audit::local_identity();
    let which = match args.keep {
        Some(n) => versions::Forget::Keep(n),
        None => versions::Forget::Versions(args.versions.clone()),
    };
    let result = versions::forget(store.as_ref(), &args.channel, &which).await;
    let forgotten = audited(result, store.as_ref(), AuditAction::Forget, &identity, &args.channel).await?;
    let list = |ns: &[u64]| {
        if ns.is_empty() {
            "none".to_owned()
        } else {
            ns.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
        }
    };
    if !forgotten.forgotten.is_empty() {
        let detail = format!("versions {} forgotten", list(&forgotten.forgotten));
        audit(store.as_ref(), AuditAction::Forget, &identity, &forgotten.channel, AuditOutcome::Ok, detail).await;
    }
    let text = format!(
        "{}: forgot {} ({} objects deleted); kept {}, current {}\n",
        forgotten.channel,
        list(&forgotten.forgotten),
        forgotten.deleted,
        list(&forgotten.kept),
        forgotten.current
    );
    super::print(args.json.json, &forgotten, text)
}
