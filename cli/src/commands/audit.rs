//! `quarry audit --store S [--since TIME] [--key PREFIX]`: the store's audit log
//! ([`quarry_index::audit_log`]), oldest first; and [`record`], how the commands that write a
//! store directly (upload, promote, gc, prune, delete) append to it, as [`local_identity`].

use clap::Args;
use quarry_index::audit_log::{self, AuditEntry, AuditQuery};
use quarry_store::Store;

use super::UsageError;
use super::args::{JsonArg, StoreArg};

#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    #[command(flatten)]
    store: StoreArg,
    /// Only entries at or after this time: RFC 3339 (2026-01-02T03:04:05Z) or a date
    /// (2026-01-02, midnight UTC).
    #[arg(long, value_name = "TIME", value_parser = audit_log::parse_since)]
    since: Option<jiff::Timestamp>,
    /// Only entries whose key starts with this (a file, a root, a run).
    #[arg(long, value_name = "PREFIX")]
    key: Option<String>,
    #[command(flatten)]
    json: JsonArg,
}

pub(crate) async fn run(args: AuditArgs) -> anyhow::Result<()> {
    let store = args.store.store.open_existing().await?;
    let key_prefix = args.key.map(|k| k.trim_start_matches('/').to_owned());
    if let Some(prefix) = key_prefix.as_deref().filter(|p| !p.is_empty()) {
        quarry_store::validate_prefix(prefix).map_err(|e| UsageError::new(format!("--key {prefix:?}: {e}")))?;
    }
    let log = audit_log::read(store.as_ref(), &AuditQuery { since: args.since, key_prefix, done_only: false }).await?;
    super::print(args.json.json, &log, &log)
}

/// Who writes from this command line: `github:ACTOR` and the run (`GITHUB_ACTOR`,
/// `GITHUB_REPOSITORY`, `GITHUB_RUN_ID`) in GitHub Actions, else `local:USER@HOST`.
pub(crate) fn local_identity() -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if let Some(actor) = var("GITHUB_ACTOR") {
        let mut identity = format!("github:{actor}");
        if let Some(repository) = var("GITHUB_REPOSITORY") {
            identity.push_str(&format!(" repository={repository}"));
        }
        if let Some(run) = var("GITHUB_RUN_ID") {
            identity.push_str(&format!(" run={run}"));
        }
        return identity;
    }
    let user = var("USER").or_else(|| var("USERNAME")).unwrap_or_else(|| "unknown".to_owned());
    match var("HOSTNAME").or_else(|| var("COMPUTERNAME")) {
        Some(host) => format!("local:{user}@{host}"),
        None => format!("local:{user}"),
    }
}

/// Append `entries` to the store's log (a failure is logged: the writes are done).
pub(crate) async fn record(store: &dyn Store, entries: impl IntoIterator<Item = AuditEntry>) {
    for entry in entries {
        audit_log::record(store, &entry).await;
    }
}
