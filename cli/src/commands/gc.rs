//! `quarry gc`: delete whole CI runs (`{run}-{platform}/` prefixes) by age or count, then
//! reindex every remaining pip, apt and dnf root; the work is `quarry_index::retention`.

use clap::Args;
use jiff::{SignedDuration, SpanRelativeTo, Timestamp};
use quarry_index::retention::RetentionOptions;
use quarry_index::{IndexConfig, Indexer};

use super::UsageError;
use super::args::{JsonArg, StoreArg};

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct GcArgs {
    #[command(flatten)]
    store: StoreArg,
    /// Select runs whose newest upload is older than this: 30d, 12h, 90m, 3600s, or any span
    /// jiff parses ("1d 12h", "P30D"; days are 24 hours, months and years are refused).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    older_than: Option<SignedDuration>,
    /// Keep the N newest runs of each platform (by their newest upload, ties to the larger run
    /// id) and select the rest.
    #[arg(long, value_name = "N")]
    keep_last: Option<usize>,
    /// Print what would be deleted and collected; change nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    json: JsonArg,
    /// Only runs directly under this key prefix (TheRock's external bucket keeps runs under
    /// `<owner>-<repo>/`); default the store root.
    #[arg(long, default_value = "")]
    prefix: String,
    /// Deletes in flight at once.
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    concurrency: u16,
}

const AFTER_HELP: &str = "With both --older-than and --keep-last, a run is deleted only if both select it. \
A run is a key prefix `{digits}-{platform}/` (12345-linux/). Every remaining pip, apt and dnf root is then \
reindexed with the indexer's environment (QUARRY_SIGNING_KEY[_FILE], QUARRY_GRACE_SECONDS, …): give gc the \
signing key the repos were signed with; a signed apt/dnf root is left alone when no key is configured.";

/// Parse `--older-than`: a jiff span (`30d`, `12h`, `90m`, `3600s`, `1d 12h`, `P30D`).
fn parse_age(text: &str) -> Result<SignedDuration, String> {
    let span: jiff::Span =
        text.trim().parse().map_err(|e| format!("{text:?} is not an age such as 30d, 12h, 90m or 3600s ({e})"))?;
    let age = span.to_duration(SpanRelativeTo::days_are_24_hours()).map_err(|_| {
        format!("{text:?}: use days, hours, minutes or seconds (months and years have no fixed length)")
    })?;
    if age.is_negative() {
        return Err(format!("{text:?} is negative"));
    }
    Ok(age)
}

pub(crate) async fn run(args: GcArgs) -> anyhow::Result<()> {
    if args.older_than.is_none() && args.keep_last.is_none() {
        return Err(
            UsageError::new("nothing selects a run: give --older-than AGE (e.g. 30d), --keep-last N, or both").into()
        );
    }
    let mut prefix = args.prefix.trim_start_matches('/').to_owned();
    if !prefix.is_empty() && !prefix.ends_with('/') {
        prefix.push('/');
    }
    quarry_store::validate_prefix(&prefix).map_err(|e| UsageError::new(format!("--prefix {:?}: {e}", args.prefix)))?;
    let config = IndexConfig::from_env()
        .map_err(|e| UsageError::new(format!("the index configuration from the environment: {e}")))?;
    let store = args.store.store.open_existing().await?;
    let options = RetentionOptions {
        prefix,
        older_than: args.older_than,
        keep_last: args.keep_last,
        dry_run: args.dry_run,
        concurrency: args.concurrency.into(),
    };
    // `quarry gc` reads no `[layout]` (it never did): run roots only.
    let indexer = Indexer::new(store, Default::default()).with_config(config);
    let report = quarry_index::retention::apply(&indexer, &options, Timestamp::now()).await?;
    if !report.dry_run {
        use quarry_index::audit_log::{AuditAction, AuditEntry, AuditOutcome};
        let identity = super::audit::local_identity();
        let entries = report.deleted.iter().map(|run| {
            let detail = format!("{} objects, {} bytes; {}", run.objects, run.bytes, run.reasons.join(", "));
            AuditEntry::now(AuditAction::Gc, &identity, &run.run, AuditOutcome::Ok).detail(Some(detail))
        });
        super::audit::record(indexer.store().as_ref(), entries).await;
    }
    super::print(args.json.json, &report, &report)?;
    if !report.failures.is_empty() {
        anyhow::bail!("{} failures; run `quarry gc` again to finish (it is idempotent)", report.failures.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_as_spans() {
        assert_eq!(parse_age("30d"), Ok(SignedDuration::from_hours(720)));
        assert_eq!(parse_age("12h"), Ok(SignedDuration::from_hours(12)));
        assert_eq!(parse_age("90m"), Ok(SignedDuration::from_mins(90)));
        assert_eq!(parse_age("3600s"), Ok(SignedDuration::from_secs(3600)));
        assert_eq!(parse_age("1d 12h"), Ok(SignedDuration::from_hours(36)));
        assert_eq!(parse_age("P2W"), Ok(SignedDuration::from_hours(336)));
        assert!(parse_age("nonsense").unwrap_err().contains("not an age"));
        assert!(parse_age("1y").unwrap_err().contains("months and years"));
        assert!(parse_age("-3d").is_err());
    }
}
