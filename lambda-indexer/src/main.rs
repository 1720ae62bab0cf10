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
    let client = quarry_store::client_from_env().await;
    let prefix = std::env::var("QUARRY_KEY_PREFIX").unwrap_or_default();
    let handler = Arc::new(Handler::new(Buckets { client, prefix }));
    tracing::info!(init_us = started.elapsed().as_micros() as u64, "initialized");
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let handler = handler.clone();
        async move {
            handler.handle(event.payload).await.map_err(|e| {
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
