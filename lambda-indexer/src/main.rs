//! `quarry-lambda-indexer` (deployed as `bootstrap`): the S3-event Lambda. Stores are S3
//! buckets, one client built at init; logs are JSON on stderr.

use std::sync::Arc;

use anyhow::Context;
use lambda_runtime::{LambdaEvent, service_fn};
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
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
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
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let handler = handler.clone();
        async move {
            let answer: Result<Value, lambda_runtime::Error> =
                handler.handle(event.payload).await.context("handling the event").map_err(Into::into);
            answer
        }
    }))
    .await
}
