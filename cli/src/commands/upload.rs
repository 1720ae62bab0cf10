use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use futures_util::{StreamExt, TryStreamExt};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use quarry_index_server::wire::UploadResponse;
use quarry_store::Sha256Hex;
use quarry_store::layout::Kind;
use serde::Serialize;

#[derive(Debug, Args)]
pub(crate) struct UploadArgs {
    /// Files or directories to upload (a directory's files keep their relative paths).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Destination: a Quarry server's pip root URL (http://HOST/RUN-linux/python/), or a store
    /// prefix (s3://bucket/RUN-linux/python/, or a local directory). Without it, the S3 key is
    /// computed from --run-id, --platform and --kind, and the bucket as TheRock chooses it.
    #[arg(long)]
    to: Option<String>,
    /// Run id for the computed destination (`{run}-{platform}/…`).
    #[arg(long, env = "GITHUB_RUN_ID")]
    run_id: Option<String>,
    /// Platform for the computed destination.
    #[arg(long, default_value = "linux")]
    platform: String,
    /// What is uploaded: python, deb, rpm or artifacts (decides the key prefix under the run,
    /// and which index URL is reported). Default: from the --to prefix (`…/python/…`,
    /// `…/packages/deb/…`, `…/packages/rpm/…`, else artifacts), python without --to.
    #[arg(long, value_enum)]
    kind: Option<UploadKind>,
    /// Bucket for the computed destination (default: from RELEASE_TYPE and GITHUB_REPOSITORY).
    #[arg(long)]
    bucket: Option<String>,
    /// The run is a pull request from a fork (uses the external bucket).
    #[arg(long)]
    fork: bool,
    /// File holding the upload token (else `QUARRY_TOKEN`).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Uploads in flight at once.
    #[arg(long, default_value_t = 4)]
    jobs: usize,
    /// Print a JSON summary (with the find-links URL) on stdout.
    #[arg(long)]
    json: bool,
}

/// What `--kind` takes: what is uploaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum UploadKind {
    Python,
    Deb,
    Rpm,
    Artifacts,
}

impl From<UploadKind> for Kind {
    fn from(kind: UploadKind) -> Self {
        match kind {
            UploadKind::Python => Kind::Python,
            UploadKind::Deb => Kind::Deb,
            UploadKind::Rpm => Kind::Rpm,
            UploadKind::Artifacts => Kind::Artifacts,
        }
    }
}

/// What `quarry upload` to a server prints: where clients point, and the server's answer for
/// each file.
#[derive(Debug, Serialize)]
struct UploadSummary {
    /// pip roots: what `pip install --find-links` / `--index-url` take.
    #[serde(skip_serializing_if = "Option::is_none")]
    find_links_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    simple_url: Option<String>,
    /// apt roots: the sources.list line; dnf roots: the `baseurl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    apt_source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dnf_baseurl: Option<String>,
    /// Signed apt/dnf roots: the public key to pin.
    #[serde(skip_serializing_if = "Option::is_none")]
    key_url: Option<String>,
    files: Vec<UploadResponse>,
}

impl UploadSummary {
    /// What clients point at, from the server's answer for the first file (its root and kind).
    fn new(base: &reqwest::Url, files: Vec<UploadResponse>) -> anyhow::Result<Self> {
        let first = files.first();
        let root = first.map(|f| base.join(&format!("/{}", f.root))).transpose()?;
        let repo = first.and_then(|f| f.repo.as_deref()).unwrap_or_default();
        let key_url = first
            .and_then(|f| f.public_key.as_deref())
            .map(|k| base.join(&format!("/{}", k.trim_start_matches('/'))))
            .transpose()?;
        let mut summary = Self {
            find_links_url: None,
            simple_url: None,
            apt_source: None,
            dnf_baseurl: None,
            key_url: key_url.as_ref().map(ToString::to_string),
            files: Vec::new(),
        };
        match root {
            Some(root) if repo.ends_with("/InRelease") => {
                let keyring = key_url.is_some().then_some("/etc/apt/keyrings/quarry.asc");
                summary.apt_source = Some(quarry_index::apt::sources_line(root.as_str(), keyring));
            }
            Some(root) if repo.ends_with("repomd.xml") => summary.dnf_baseurl = Some(root.to_string()),
            _ => {
                summary.find_links_url = Some(base.join("index.html")?.to_string());
                summary.simple_url = Some(base.join("simple/")?.to_string());
            }
        }
        summary.files = files;
        Ok(summary)
    }
}

const ATTEMPTS: u32 = 3;

pub(crate) async fn run(args: UploadArgs) -> anyhow::Result<()> {
    let to = match &args.to {
        Some(to) if to.starts_with("http://") || to.starts_with("https://") => to.clone(),
        Some(to) => return super::upload_store::run(&args, to.clone(), None).await,
        None => {
            let (to, bucket) = computed_destination(&args)?;
            return super::upload_store::run(&args, to, Some(bucket)).await;
        }
    };
    let to = if to.ends_with('/') { to } else { format!("{to}/") };
    let base = reqwest::Url::parse(&to).with_context(|| format!("--to {to:?} is not a URL"))?;
    if !matches!(base.scheme(), "http" | "https") {
        bail!("--to must be an http(s) URL of a Quarry server, got {to:?}");
    }
    let token = super::read_tokens(args.token_file.as_deref())?
        .into_iter()
        .next()
        .context("no upload token: pass --token-file or set QUARRY_TOKEN")?;
    let client = reqwest::Client::builder().connect_timeout(Duration::from_secs(30)).build()?;
    let bars = MultiProgress::new();
    let results: Vec<anyhow::Result<UploadResponse>> = futures_util::stream::iter(args.files.iter())
        .map(|path| upload_one(&client, &base, &token, path, &bars))
        .buffered(args.jobs.max(1))
        .collect()
        .await;
    let mut files = Vec::new();
    let mut failed = 0;
    for (path, result) in args.files.iter().zip(results) {
        match result {
            Ok(v) => files.push(v),
            Err(e) => {
                failed += 1;
                tracing::error!("{}: {e:#}", path.display());
            }
        }
    }
    let summary = UploadSummary::new(&base, files)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        for f in &summary.files {
            writeln!(out, "{} {} sha256={}", f.status, f.key, f.sha256)?;
        }
        if let Some(url) = &summary.find_links_url {
            writeln!(out, "find-links: {url}")?;
        }
        if let Some(line) = &summary.apt_source {
            writeln!(out, "apt: {line}")?;
        }
        if let Some(url) = &summary.dnf_baseurl {
            writeln!(out, "dnf: baseurl={url}")?;
        }
        if let Some(url) = &summary.key_url {
            writeln!(out, "key: {url}")?;
        }
    }
    if failed > 0 {
        bail!("{failed} of {} uploads failed", args.files.len());
    }
    Ok(())
}

async fn upload_one(
    client: &reqwest::Client,
    base: &reqwest::Url,
    token: &str,
    path: &PathBuf,
    bars: &MultiProgress,
) -> anyhow::Result<UploadResponse> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .with_context(|| format!("{} has no UTF-8 file name", path.display()))?;
    let url = base.join(&percent_encode(name))?;
    let mut last_error = None;
    for attempt in 1..=ATTEMPTS {
        let file = tokio::fs::File::open(path).await.with_context(|| format!("opening {}", path.display()))?;
        let size = file.metadata().await?.len();
        let bar = bars.add(ProgressBar::new(size));
        bar.set_style(
            ProgressStyle::with_template("{msg:40!} {bar:30} {bytes}/{total_bytes} {bytes_per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(name.to_owned());
        let hasher = std::sync::Arc::new(std::sync::Mutex::new(Sha256Hex::default()));
        let (bar2, hasher2) = (bar.clone(), hasher.clone());
        let stream = tokio_util::io::ReaderStream::with_capacity(file, 256 * 1024).inspect_ok(move |chunk| {
            bar2.inc(chunk.len() as u64);
            hasher2.lock().unwrap_or_else(std::sync::PoisonError::into_inner).update(chunk);
        });
        let response = client
            .put(url.clone())
            .bearer_auth(token)
            .header(reqwest::header::CONTENT_LENGTH, size)
            .body(reqwest::Body::wrap_stream(stream))
            .send()
            .await;
        bar.finish_and_clear();
        match response {
            Ok(r) if r.status().is_success() => {
                let body = r.bytes().await.context("reading the server's answer")?;
                let answer: UploadResponse = serde_json::from_slice(&body).context("parsing the server's answer")?;
                let ours =
                    std::mem::take(&mut *hasher.lock().unwrap_or_else(std::sync::PoisonError::into_inner)).finish();
                if answer.sha256 != ours {
                    bail!("the server stored sha256 {} but we sent {ours}", answer.sha256);
                }
                return Ok(answer);
            }
            Ok(r) if r.status().is_server_error() => {
                last_error = Some(anyhow::anyhow!("{}: {}", r.status(), r.text().await.unwrap_or_default().trim()));
            }
            Ok(r) => {
                bail!("{} refused: {} {}", url, r.status(), r.text().await.unwrap_or_default().trim());
            }
            Err(e) => last_error = Some(anyhow::Error::new(e).context(format!("sending {name}"))),
        }
        tracing::warn!(attempt, file = name, "upload failed; retrying");
        tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
    }
    Err(last_error.unwrap_or_else(|| anyhow::anyhow!("upload failed")))
}

fn percent_encode(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `s3://{bucket}/{run prefix}{kind}` from the flags and the CI environment.
fn computed_destination(args: &UploadArgs) -> anyhow::Result<(String, String)> {
    let run_id = args.run_id.as_deref().context("pass --to, or --run-id (GITHUB_RUN_ID) to compute it")?;
    let repository = std::env::var("GITHUB_REPOSITORY").unwrap_or_default();
    let bucket = match &args.bucket {
        Some(b) => b.clone(),
        None => {
            let release_type = std::env::var("RELEASE_TYPE").unwrap_or_default();
            quarry_store::layout::artifact_bucket(&release_type, &repository, args.fork)?.to_owned()
        }
    };
    let prefix = quarry_store::layout::run_prefix(&bucket, &repository, run_id, &args.platform)?;
    Ok((format!("s3://{bucket}/{prefix}{}", kind(args).subdir()), bucket))
}

pub(crate) fn kind(args: &UploadArgs) -> Kind {
    let inferred = || {
        let to = args.to.as_deref().unwrap_or("python/");
        let segments: Vec<&str> = to.split('/').collect();
        if segments.contains(&"python") {
            UploadKind::Python
        } else if to.contains("packages/deb/") {
            UploadKind::Deb
        } else if to.contains("packages/rpm/") {
            UploadKind::Rpm
        } else {
            UploadKind::Artifacts
        }
    };
    args.kind.unwrap_or_else(inferred).into()
}

impl UploadArgs {
    pub(crate) fn files(&self) -> &[PathBuf] {
        &self.files
    }
    pub(crate) fn jobs(&self) -> usize {
        self.jobs.max(1)
    }
    pub(crate) fn json(&self) -> bool {
        self.json
    }
}
