//! Prometheus text exposition (format 0.0.4) of what the server did: requests by route, method
//! and status, bytes served, request durations, uploads by kind and outcome, reindexes (count,
//! failures, duration, conflicts retried), and store operations.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Upper bounds of the request duration histogram, seconds.
const BUCKETS: [f64; 8] = [0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10.0, 60.0];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }
}

/// The methods counted by name; any other counts as `OTHER`, so clients cannot grow the label set.
const METHODS: [&str; 9] = ["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT"];

/// The `method` label of a request method: one of [`METHODS`], else `OTHER`.
pub fn method_label(method: &str) -> &'static str {
    METHODS.iter().find(|m| **m == method).copied().unwrap_or("OTHER")
}

/// The route a path belongs to: few values, so labels stay bounded.
pub fn route_of(method: &str, path: &str) -> &'static str {
    const FILES: [&str; 8] = [".whl", ".tar.gz", ".zip", ".deb", ".rpm", ".tar.zst", ".tar.xz", ".sha256sum"];
    if method == "PUT" {
        return "upload";
    }
    match path {
        "/healthz" => return "healthz",
        "/metrics" => return "metrics",
        "/" => return "browse",
        _ => {}
    }
    if path.starts_with("/-/") {
        return "browse";
    }
    let trimmed = path.trim_matches('/');
    if path.ends_with('/') && !trimmed.contains('/') && quarry_layout::RunSegment::parse(trimmed).is_some() {
        return "browse";
    }
    if path.contains("/simple/") || path.ends_with("/simple") {
        return "simple";
    }
    if path.ends_with(".metadata") {
        return "metadata";
    }
    if FILES.iter().any(|s| path.ends_with(s)) {
        return "file";
    }
    "page"
}

/// Every counter the server keeps.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Taken once per request.
    traffic: Mutex<Traffic>,
    uploads: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    upload_bytes: AtomicU64,
}

/// Per repo kind: runs, failures, seconds, conflicts.
/// Requests by route, method and status; bytes and durations by route.
#[derive(Debug, Default)]
struct Traffic {
    requests: BTreeMap<(&'static str, &'static str, u16), u64>,
    bytes: BTreeMap<&'static str, u64>,
    durations: BTreeMap<&'static str, Histogram>,
}

#[derive(Debug, Default, Clone, Copy)]
struct KindStats {
    runs: u64,
    failures: u64,
    seconds: f64,
    conflicts: u64,
}

/// Reindex runs, recorded by the coalescer.
#[derive(Debug, Default)]
pub struct ReindexStats {
    runs: Mutex<BTreeMap<&'static str, KindStats>>,
}

impl ReindexStats {
    /// One run of a `kind` root: whether it failed, how long it took, how many times its commit
    /// lost a race and was retried.
    pub fn record(&self, kind: &'static str, failed: bool, took: Duration, conflicts: u64) {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = runs.entry(kind).or_default();
        entry.runs += 1;
        entry.failures += u64::from(failed);
        entry.seconds += took.as_secs_f64();
        entry.conflicts += conflicts;
    }
}

impl Metrics {
    /// One request: `method` is counted under [`method_label`], so the series stay bounded.
    pub fn request(&self, route: &'static str, method: &str, status: u16, bytes: u64, took: Duration) {
        let mut traffic = self.traffic.lock().unwrap_or_else(PoisonError::into_inner);
        *traffic.requests.entry((route, method_label(method), status)).or_default() += 1;
        *traffic.bytes.entry(route).or_default() += bytes;
        traffic.durations.entry(route).or_default().observe(took.as_secs_f64());
    }

    /// An upload of a `kind` file (wheel, sdist, deb, rpm) ending `outcome` (created, exists,
    /// rejected, conflict, denied, failed).
    pub fn upload(&self, kind: &'static str, outcome: &'static str, bytes: u64) {
        *self.uploads.lock().unwrap_or_else(PoisonError::into_inner).entry((kind, outcome)).or_default() += 1;
        self.upload_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The exposition text.
    pub fn render(&self, reindex: &ReindexStats, store_ops: &quarry_store::OpCounts) -> String {
        let mut out = String::new();
        let traffic = self.traffic.lock().unwrap_or_else(PoisonError::into_inner);
        out.push_str("# HELP quarry_http_requests_total HTTP requests served, by route, method and status.\n");
        out.push_str("# TYPE quarry_http_requests_total counter\n");
        for ((route, method, status), n) in &traffic.requests {
            let _ = writeln!(
                out,
                "quarry_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}"
            );
        }
        out.push_str("# HELP quarry_http_response_bytes_total Response body bytes sent, by route.\n");
        out.push_str("# TYPE quarry_http_response_bytes_total counter\n");
        for (route, n) in &traffic.bytes {
            let _ = writeln!(out, "quarry_http_response_bytes_total{{route=\"{route}\"}} {n}");
        }
        out.push_str("# HELP quarry_http_request_duration_seconds Time to the response head, by route.\n");
        out.push_str("# TYPE quarry_http_request_duration_seconds histogram\n");
        for (route, h) in &traffic.durations {
            for (le, n) in BUCKETS.iter().zip(h.counts) {
                let _ =
                    writeln!(out, "quarry_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{le}\"}} {n}");
            }
            let _ = writeln!(
                out,
                "quarry_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "quarry_http_request_duration_seconds_sum{{route=\"{route}\"}} {}", h.sum);
            let _ = writeln!(out, "quarry_http_request_duration_seconds_count{{route=\"{route}\"}} {}", h.count);
        }
        drop(traffic);
        out.push_str("# HELP quarry_uploads_total Uploads, by file kind and outcome.\n");
        out.push_str("# TYPE quarry_uploads_total counter\n");
        for ((kind, outcome), n) in self.uploads.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            let _ = writeln!(out, "quarry_uploads_total{{kind=\"{kind}\",outcome=\"{outcome}\"}} {n}");
        }
        out.push_str("# HELP quarry_upload_bytes_total Bytes of uploads stored or confirmed identical.\n");
        out.push_str("# TYPE quarry_upload_bytes_total counter\n");
        let _ = writeln!(out, "quarry_upload_bytes_total {}", self.upload_bytes.load(Ordering::Relaxed));
        let runs = reindex.runs.lock().unwrap_or_else(PoisonError::into_inner);
        out.push_str("# HELP quarry_reindex_total Reindex runs, by repo kind.\n# TYPE quarry_reindex_total counter\n");
        for (kind, KindStats { runs: n, .. }) in runs.iter() {
            let _ = writeln!(out, "quarry_reindex_total{{kind=\"{kind}\"}} {n}");
        }
        out.push_str("# HELP quarry_reindex_failures_total Reindex runs that failed.\n# TYPE quarry_reindex_failures_total counter\n");
        for (kind, KindStats { failures: failed, .. }) in runs.iter() {
            let _ = writeln!(out, "quarry_reindex_failures_total{{kind=\"{kind}\"}} {failed}");
        }
        out.push_str("# HELP quarry_reindex_duration_seconds_total Time spent reindexing.\n# TYPE quarry_reindex_duration_seconds_total counter\n");
        for (kind, KindStats { seconds: secs, .. }) in runs.iter() {
            let _ = writeln!(out, "quarry_reindex_duration_seconds_total{{kind=\"{kind}\"}} {secs}");
        }
        out.push_str(
            "# HELP quarry_reindex_conflicts_total Commits that lost a race to another writer and were retried.\n\
             # TYPE quarry_reindex_conflicts_total counter\n",
        );
        for (kind, KindStats { conflicts, .. }) in runs.iter() {
            let _ = writeln!(out, "quarry_reindex_conflicts_total{{kind=\"{kind}\"}} {conflicts}");
        }
        drop(runs);
        out.push_str("# HELP quarry_store_operations_total Store operations, by kind.\n# TYPE quarry_store_operations_total counter\n");
        for (op, n) in [
            ("list", store_ops.list),
            ("head", store_ops.head),
            ("get", store_ops.get),
            ("put", store_ops.put),
            ("delete", store_ops.delete),
        ] {
            let _ = writeln!(out, "quarry_store_operations_total{{op=\"{op}\"}} {n}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_few() {
        assert_eq!(route_of("GET", "/"), "browse");
        assert_eq!(route_of("GET", "/123-linux/"), "browse");
        assert_eq!(route_of("GET", "/123-linux/index.html"), "page");
        assert_eq!(route_of("GET", "/-/package/123-linux/a/"), "browse");
        assert_eq!(route_of("GET", "/r/python/simple/a/"), "simple");
        assert_eq!(route_of("GET", "/r/python/a-1-py3-none-any.whl"), "file");
        assert_eq!(route_of("GET", "/r/python/a-1-py3-none-any.whl.metadata"), "metadata");
        assert_eq!(route_of("PUT", "/r/python/a-1-py3-none-any.whl"), "upload");
        assert_eq!(route_of("GET", "/healthz"), "healthz");
    }

    #[test]
    fn method_labels_are_bounded() {
        let m = Metrics::default();
        for i in 0..1000 {
            let method = format!("X{i}{}", "A".repeat(200));
            m.request(route_of(&method, "/x"), &method, 404, 0, Duration::from_millis(1));
        }
        m.request("file", "GET", 200, 1, Duration::from_millis(1));
        m.request("upload", "PUT", 201, 0, Duration::from_millis(1));
        assert_eq!(method_label("get"), "OTHER", "methods are case-sensitive");
        let text = m.render(&ReindexStats::default(), &quarry_store::OpCounts::default());
        let series: Vec<&str> = text.lines().filter(|l| l.starts_with("quarry_http_requests_total{")).collect();
        insta::assert_snapshot!(series.join("\n"), @r#"
        quarry_http_requests_total{route="file",method="GET",status="200"} 1
        quarry_http_requests_total{route="page",method="OTHER",status="404"} 1000
        quarry_http_requests_total{route="upload",method="PUT",status="201"} 1
        "#);
        assert!(text.len() < 8192, "{} bytes", text.len());
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::default();
        m.request("file", "GET", 200, 10, Duration::from_millis(3));
        m.request("file", "GET", 200, 5, Duration::from_millis(200));
        let text = m.render(&ReindexStats::default(), &quarry_store::OpCounts::default());
        assert!(text.contains("quarry_http_requests_total{route=\"file\",method=\"GET\",status=\"200\"} 2"), "{text}");
        assert!(text.contains("quarry_http_response_bytes_total{route=\"file\"} 15"));
        assert!(text.contains("quarry_http_request_duration_seconds_bucket{route=\"file\",le=\"0.005\"} 1"));
        assert!(text.contains("quarry_http_request_duration_seconds_bucket{route=\"file\",le=\"0.5\"} 2"));
        assert!(text.contains("quarry_http_request_duration_seconds_count{route=\"file\"} 2"));
    }
}
