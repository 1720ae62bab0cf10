//! `quarry-lambda-indexer` (deployed as `bootstrap`): the S3-event Lambda. Stores are S3
//! buckets, one client built at init; logs are JSON on stderr.

use std::sync::Arc;

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};
use quarry_lambda_indexer::{Handler, Stores};
use quarry_store::{S3Store, Store};
use serde_json::Value;

struct Buckets {
    client: aws_sdk_s3::Client,
    prefix: String,
}

impl Stores for Buckets {
    fn for_bucket(&self, bucket: &str) -> Arc<dyn Store> {
        Arc::new(S3Store::from_client(self.client.clone(), bucket, &self.prefix))
    }

    fn key_prefix(&self) -> &str {
        &self.prefix
    }
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let started = std::time::Instant::now();
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_current_span(false)
        .init();
    let shared = quarry_store::sdk_config_from_env().await;
    let client = quarry_store::client_from_config(&shared);
    // Spelled one way (`ROCm-TheRock` → `ROCm-TheRock/`): the stores are rooted at it and
    // event keys are taken relative to it. A prefix no key can start with fails the init.
    let prefix = quarry_store::root_prefix(&std::env::var("QUARRY_KEY_PREFIX").unwrap_or_default())
        .map_err(|e| format!("QUARRY_KEY_PREFIX: {e}"))?;
    // The signing key: QUARRY_SIGNING_KEY(_FILE), or the Secrets Manager secret named by
    // QUARRY_SIGNING_KEY_SECRET_ARN, read once here. A bad key fails the init, not every
    // invocation.
    let mut config = quarry_index::IndexConfig::from_env()?;
    if config.signer.is_none()
        && let Ok(arn) = std::env::var("QUARRY_SIGNING_KEY_SECRET_ARN")
        && !arn.is_empty()
    {
        config.signer = Some(Arc::new(signing_key_from_secret(&shared, &arn).await?));
    }
    if let Some(signer) = &config.signer {
        tracing::info!(fingerprint = %signer.fingerprint(), "signing apt and dnf metadata");
    }
    let buckets = Buckets { client, prefix };
    // The layout: QUARRY_LAYOUT inline, or QUARRY_LAYOUT_KEY in QUARRY_LAYOUT_BUCKET.
    let layout_store =
        std::env::var("QUARRY_LAYOUT_BUCKET").ok().filter(|b| !b.is_empty()).map(|b| buckets.for_bucket(&b));
    let layout = quarry_lambda_indexer::layout_from_env(layout_store.as_deref()).await?;
    tracing::info!(roots = layout.roots.len(), runs = layout.runs, "layout");
    // Scheduled events reconcile QUARRY_BUCKET (the newest QUARRY_RECONCILE_RUNS runs).
    let reconcile = quarry_lambda_indexer::Reconcile::from_env()?;
    // The bucket the function serves: events naming another are failures, not acted on.
    let bucket = reconcile.as_ref().map(|r| r.bucket.clone());
    let handler = Arc::new(
        Handler::new(buckets)
            .with_layout(Arc::new(layout))
            .with_config(config)
            .with_reconcile(reconcile)
            .with_bucket(bucket),
    );
    tracing::info!(init_us = started.elapsed().as_micros() as u64, "initialized");
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let handler = handler.clone();
        async move {
            handler.handle_until(event.payload, Some(stop_by(event.context.deadline()))).await.map_err(|e| {
                tracing::error!(error = %e, retryable = e.is_retryable(), "invocation failed");
                Diagnostic {
                    error_type: if e.is_retryable() { "Quarry.Retryable" } else { "Quarry.BadEvent" }.to_owned(),
                    error_message: e.to_string(),
                }
            })
        }
    }))
    .await
}

/// When a scheduled reconciliation starts no more scopes: a quarter of the invocation's time
/// (at least 10 s) is kept for the scope in progress and the cursor.
fn stop_by(deadline: std::time::SystemTime) -> std::time::Instant {
    let left = deadline.duration_since(std::time::SystemTime::now()).unwrap_or_default();
    let margin = (left / 4).max(std::time::Duration::from_secs(10));
    std::time::Instant::now() + left.saturating_sub(margin)
}

/// The armored OpenPGP secret key stored as the secret's string value.
async fn signing_key_from_secret(
    shared: &aws_config::SdkConfig,
    arn: &str,
) -> Result<quarry_index::Signer, lambda_runtime::Error> {
    let client = aws_sdk_secretsmanager::Client::new(shared);
    let secret = client.get_secret_value().secret_id(arn).send().await.map_err(|e| {
        format!("reading the signing key secret {arn}: {}", aws_sdk_secretsmanager::error::DisplayErrorContext(e))
    })?;
    let text = secret.secret_string().ok_or_else(|| format!("secret {arn} holds no string"))?;
    Ok(quarry_index::Signer::from_armored(text)?)
}
