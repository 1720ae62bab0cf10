//! The CloudFront KeyValueStore data plane, through `aws-sdk-cloudfrontkeyvaluestore`: the one
//! write that switches a channel's version at the edge (`infra/cloudfront/index-router.js`
//! reads the current version from the store).
//!
//! - [`KvsClient::put`] reads the store's ETag (`DescribeKeyValueStore`), then writes the key
//!   with `PutKey` `If-Match` it; a stale ETag (another writer in between: a
//!   `ConflictException`) is described again and retried, at most [`PUT_ATTEMPTS`] times.
//! - Requests are signed with SigV4A (the service's endpoint rules ask for it; the crate's
//!   `sigv4a` feature provides it), credentials from the default chain as for S3.
//! - `QUARRY_KVS_ENDPOINT` points the client at a KeyValueStore-compatible server (a test's
//!   emulator): requests go to that URL as is (the endpoint rules would put the ARN's account
//!   in front of its host name), still SigV4A-signed. `AWS_ENDPOINT_URL` (an S3-compatible
//!   server's) is not this service's and is ignored.

use aws_sdk_cloudfrontkeyvaluestore::Client;
use aws_sdk_cloudfrontkeyvaluestore::config::endpoint::{
    DefaultResolver, EndpointFuture, Params, ResolveEndpoint as ResolveKvsEndpoint,
};
use aws_sdk_cloudfrontkeyvaluestore::error::{DisplayErrorContext, ProvideErrorMetadata};

/// The environment variable naming a KeyValueStore-compatible server's URL.
pub const KVS_ENDPOINT_ENV: &str = "QUARRY_KVS_ENDPOINT";
/// `PutKey` attempts on a stale ETag before giving up.
pub const PUT_ATTEMPTS: usize = 5;

/// Why a KeyValueStore write failed.
#[derive(Debug, thiserror::Error)]
pub enum KvsError {
    #[error("{arn}: {message}")]
    Request { arn: String, message: String },
    #[error("{arn}: the store's ETag changed under each of {attempts} writes (other writers); not written")]
    Contended { arn: String, attempts: usize },
}

/// A KeyValueStore (by its ARN) and a client for it.
#[derive(Debug, Clone)]
pub struct KvsClient {
    client: Client,
    arn: String,
}

/// The endpoint rules' answer (auth scheme: SigV4A) with the URL replaced by `url`.
#[derive(Debug)]
struct FixedUrl {
    url: String,
    rules: DefaultResolver,
}

impl ResolveKvsEndpoint for FixedUrl {
    fn resolve_endpoint<'a>(&'a self, params: &'a Params) -> EndpointFuture<'a> {
        EndpointFuture::new(async move {
            let endpoint = self.rules.resolve_endpoint(params).await?;
            Ok(endpoint.into_builder().url(self.url.clone()).build())
        })
    }
}

impl KvsClient {
    /// A client for the store `arn` from `shared` (region and credentials), at
    /// `QUARRY_KVS_ENDPOINT` when set.
    pub fn new(shared: &aws_config::SdkConfig, arn: &str) -> Self {
        let mut config = aws_sdk_cloudfrontkeyvaluestore::config::Builder::from(shared);
        // `AWS_ENDPOINT_URL` names an S3-compatible server, never this service's.
        config.set_endpoint_url(None);
        if shared.region().is_none() {
            config = config.region(aws_sdk_cloudfrontkeyvaluestore::config::Region::new("us-east-1"));
        }
        if let Some(url) = std::env::var(KVS_ENDPOINT_ENV).ok().filter(|u| !u.trim().is_empty()) {
            config = config.endpoint_resolver(FixedUrl {
                url: url.trim_end_matches('/').to_owned(),
                rules: DefaultResolver::new(),
            });
        }
        config = config
            .retry_config(aws_sdk_cloudfrontkeyvaluestore::config::retry::RetryConfig::standard().with_max_attempts(5));
        config = config.timeout_config(
            aws_sdk_cloudfrontkeyvaluestore::config::timeout::TimeoutConfig::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .read_timeout(std::time::Duration::from_secs(60))
                .build(),
        );
        Self { client: Client::from_conf(config.build()), arn: arn.to_owned() }
    }

    /// A client for `arn` with the environment's configuration.
    pub async fn from_env(arn: &str) -> Self {
        Self::new(&crate::s3::sdk_config_from_env().await, arn)
    }

    pub fn arn(&self) -> &str {
        &self.arn
    }

    /// Set `key` to `value`: describe for the ETag, put `If-Match` it, again on a stale ETag.
    pub async fn put(&self, key: &str, value: &str) -> Result<(), KvsError> {
        let request = |message: String| KvsError::Request { arn: self.arn.clone(), message };
        for attempt in 1..=PUT_ATTEMPTS {
            let described = self
                .client
                .describe_key_value_store()
                .kvs_arn(&self.arn)
                .send()
                .await
                .map_err(|e| request(format!("DescribeKeyValueStore: {}", DisplayErrorContext(&e))))?;
            let put =
                self.client.put_key().kvs_arn(&self.arn).key(key).value(value).if_match(described.e_tag()).send().await;
            match put {
                Ok(_) => return Ok(()),
                Err(e) if e.as_service_error().is_some_and(|s| s.is_conflict_exception()) => {
                    tracing::debug!(arn = %self.arn, attempt, "KeyValueStore ETag went stale: {}", e.message().unwrap_or_default());
                }
                Err(e) => return Err(request(format!("PutKey {key}: {}", DisplayErrorContext(&e)))),
            }
        }
        Err(KvsError::Contended { arn: self.arn.clone(), attempts: PUT_ATTEMPTS })
    }
}
