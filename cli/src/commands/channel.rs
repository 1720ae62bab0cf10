//! `quarry channel history|rollback CHANNEL`: a channel's versions (each promotion into it
//! and `quarry promote --init` make one) and the switch back to an older one, over
//! [`quarry_index::versions`]. A rollback rewrites the channel's pointer only (one read, one
//! conditional write) and records an audit entry; it prints the CloudFront KeyValueStore key
//! and value the CDN's function reads (`infra/cloudfront/index-router.js`), for the deploy to
//! write (`aws cloudfront-keyvaluestore put-key`).

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use quarry_index::versions::{self, ChannelVersion, VersionError};

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

pub(crate) async fn run(args: ChannelArgs) -> anyhow::Result<()> {
    match args.command {
        ChannelCommand::History(args) => history(args).await,
        ChannelCommand::Rollback(args) => rollback(args).await,
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
    use quarry_index::audit_log::{AuditAction, AuditEntry, AuditOutcome};
    let store = args.store.store.open_existing().await?;
    let identity = super::audit::local_identity();
    let switched = match versions::rollback(store.as_ref(), &args.channel, args.to).await {
        Ok(mut switched) => {
            // The edge sees bucket keys: the store's own prefix comes first.
            let destination = quarry_upload::destination::StoreDestination::parse(args.store.store.as_str());
            switched.kvs_key = versions::kvs_key(&destination.key(&switched.channel));
            switched
        }
        Err(e) => {
            let outcome = if e.is_bad_input() { AuditOutcome::Refused } else { AuditOutcome::Failed };
            let entry =
                AuditEntry::now(AuditAction::Rollback, &identity, &args.channel, outcome).detail(Some(e.to_string()));
            super::audit::record(store.as_ref(), [entry]).await;
            return Err(usage(e));
        }
    };
    let detail = format!("version {} -> {}", switched.from, switched.to);
    let entry =
        AuditEntry::now(AuditAction::Rollback, &identity, &switched.channel, AuditOutcome::Ok).detail(Some(detail));
    super::audit::record(store.as_ref(), [entry]).await;
    let text = format!(
        "{}: version {} -> {}\ncdn: key {} = {}\n",
        switched.channel, switched.from, switched.to, switched.kvs_key, switched.kvs_value
    );
    super::print(args.json.json, &switched, text)
}
