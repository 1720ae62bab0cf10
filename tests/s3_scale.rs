//! `+1 wheel` through the Lambda handler on moto costs the same S3 requests whatever the root's
//! size: every HTTP request the handler's S3 client sends is recorded (an SDK interceptor, so
//! list pages and retries count), for one more wheel into pip roots of 50 and 500 wheels
//! indexed from scratch beforehand. The find-links page is off (a channel root's default):
//! requests by method, the listing scoped to the project's prefix, bytes PUT all equal, and
//! at most 10 requests. `bench/lambda_big.sh` measures the same at 1,000 to 100,000 wheels.
#![allow(clippy::print_stderr)] // the measured costs, for the test log

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_s3::error::BoxError;
use futures_util::StreamExt;
use quarry_index::{IndexConfig, Indexer, RepoRoot};
use quarry_lambda_indexer::{Handler, Stores};
use quarry_store::{ConditionalWrites, S3Store, Store};
use quarry_tests::WheelSpec;
use quarry_tests::s3::{S3Server, s3_client, s3_put_event};

const ROOT: &str = "9999-linux/python/";

/// One sent request: method, URI, body bytes.
type Sent = (String, String, u64);

#[derive(Debug, Clone, Default)]
struct Requests(Arc<Mutex<Vec<Sent>>>);

impl Intercept for Requests {
    fn name(&self) -> &'static str {
        "Requests"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let bytes = request.body().content_length().unwrap_or(0);
        self.0.lock().unwrap().push((request.method().to_owned(), request.uri().to_owned(), bytes));
        Ok(())
    }
}

impl Requests {
    fn take(&self) -> Vec<Sent> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

struct Bucket(Arc<dyn Store>);

impl Stores for Bucket {
    fn for_bucket(&self, _bucket: &str) -> Arc<dyn Store> {
        self.0.clone()
    }
}

/// What the event cost: requests by kind, the listings' URIs, the bytes PUT by key.
#[derive(Debug, PartialEq)]
struct Cost {
    by_kind: BTreeMap<&'static str, usize>,
    lists: Vec<String>,
    puts: BTreeMap<String, u64>,
}

fn cost(sent: &[Sent], bucket: &str) -> Cost {
    let mut by_kind = BTreeMap::new();
    let (mut lists, mut puts) = (Vec::new(), BTreeMap::new());
    for (method, uri, bytes) in sent {
        let kind = match method.as_str() {
            "GET" if uri.contains("list-type=2") => {
                lists.push(uri.split_once('?').map_or("", |(_, q)| q).replace(bucket, "BUCKET"));
                "list"
            }
            "GET" => "get",
            "HEAD" => "head",
            "PUT" => {
                let path = uri.split_once('?').map_or(uri.as_str(), |(p, _)| p);
                puts.insert(path.split_once(&format!("/{bucket}/")).map_or(path, |(_, k)| k).to_owned(), *bytes);
                "put"
            }
            "DELETE" => "delete",
            _ => "other",
        };
        *by_kind.entry(kind).or_insert(0) += 1;
    }
    Cost { by_kind, lists, puts }
}

/// A root of `wheels` wheels (ten versions of each project) indexed from scratch, then one more
/// wheel of project `pkg-0001` and its event through the handler; the requests of that event.
async fn plus_one(server: &S3Server, wheels: usize) -> Cost {
    let bucket = format!("scale-{wheels}");
    let plain = s3_client(server);
    plain.create_bucket().bucket(&bucket).send().await.expect("create bucket");
    let specs: Vec<WheelSpec> =
        (0..wheels).map(|i| WheelSpec::new(&format!("pkg-{:04}", i / 10), &format!("1.{}", i % 10))).collect();
    futures_util::stream::iter(&specs)
        .map(|spec| {
            let (plain, bucket) = (plain.clone(), bucket.clone());
            async move {
                let key = format!("{ROOT}{}", spec.filename());
                plain.put_object().bucket(bucket).key(key).body(spec.build().into()).send().await.expect("put wheel");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let requests = Requests::default();
    let client = aws_sdk_s3::Client::from_conf(plain.config().to_builder().interceptor(requests.clone()).build());
    let store: Arc<dyn Store> =
        Arc::new(S3Store::from_client(client, &bucket, "").with_conditional_writes(ConditionalWrites::Atomic));
    let config = IndexConfig { find_links: Some(false), ..IndexConfig::default() };
    let root = RepoRoot::new(ROOT, &Default::default()).unwrap();
    let report =
        Indexer::new(store.clone(), Default::default()).with_config(config.clone()).reindex(&root).await.unwrap();
    assert_eq!(report.added.len(), wheels, "{report}");

    let extra = WheelSpec::new("pkg-0001", "2.0");
    let key = format!("{ROOT}{}", extra.filename());
    plain.put_object().bucket(&bucket).key(&key).body(extra.build().into()).send().await.expect("put wheel");
    let handler = Handler::new(Bucket(store.clone())).with_config(config);
    requests.take();
    let answer = handler.handle(s3_put_event(&bucket, &key)).await.expect("handler answers");
    let sent = requests.take();
    assert!(answer.get("batchItemFailures").is_none_or(|f| f.as_array().is_some_and(Vec::is_empty)), "{answer}");
    let page = plain.get_object().bucket(&bucket).key(format!("{ROOT}simple/pkg-0001/index.html")).send().await;
    let page = page.unwrap().body.collect().await.unwrap().into_bytes();
    assert!(String::from_utf8_lossy(&page).contains(&extra.filename()), "the project page lists the new wheel");
    cost(&sent, &bucket)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_wheel_sends_the_same_s3_requests_at_50_and_500_wheels() {
    let server = S3Server::start_moto().await;
    let started = std::time::Instant::now();
    let small = plus_one(&server, 50).await;
    let big = plus_one(&server, 500).await;
    eprintln!("+1 wheel: 50 wheels {small:?}; 500 wheels {big:?} ({:.1} s)", started.elapsed().as_secs_f64());
    assert_eq!(small, big, "the event's S3 requests depend on the root's size");
    let total: usize = big.by_kind.values().sum();
    assert!(total <= 10, "{total} requests for one wheel: {big:?}");
    assert!(
        big.lists.iter().all(|q| q.contains("prefix=9999-linux%2Fpython%2Fpkg_0001-")
            || q.contains("prefix=9999-linux%2Fpython%2Fpkg-0001-")),
        "a listing not scoped to the project: {:?}",
        big.lists
    );
    let state: u64 = big.puts.iter().filter(|(k, _)| k.contains(".quarry-index")).map(|(_, b)| b).sum();
    assert!(state <= 64 * 1024, "{big:?}");
    server.stop().await;
}
