//! `quarry upload` straight into a store (S3 or a local directory), as CI jobs do.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use futures_util::StreamExt;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use quarry_store::layout::Kind;
use quarry_store::{Key, Store, Uploaded, upload_file};

use super::upload::{UploadArgs, kind};

/// Every file to upload with its key suffix: files by name, directories walked (sorted).
fn collect(paths: &[PathBuf]) -> anyhow::Result<Vec<(PathBuf, String)>> {
    fn walk(dir: &Path, rel: &str, out: &mut Vec<(PathBuf, String)>) -> anyhow::Result<()> {
        let mut entries: Vec<_> =
            std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?.collect::<Result<_, _>>()?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let name = entry.file_name().into_string().map_err(|n| anyhow::anyhow!("non-UTF-8 file name {n:?}"))?;
            let path = entry.path();
            let file_type = entry.file_type()?;
            if file_type.is_dir() {
                walk(&path, &format!("{rel}{name}/"), out)?;
            } else if file_type.is_file() {
                out.push((path, format!("{rel}{name}")));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).with_context(|| format!("{} does not exist", path.display()))?;
        if meta.is_dir() {
            walk(path, "", &mut out)?;
        } else {
            let name = path.file_name().and_then(|n| n.to_str()).context("a file name that is UTF-8")?;
            out.push((path.clone(), name.to_owned()));
        }
    }
    Ok(out)
}

/// `to` is `s3://bucket/prefix/` or a local store directory (with an optional `//prefix`).
fn split_destination(to: &str) -> (String, String) {
    if let Some(rest) = to.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        return (format!("s3://{bucket}"), prefix.to_owned());
    }
    (to.to_owned(), String::new())
}

pub(crate) async fn run(args: &UploadArgs, to: String, bucket: Option<String>) -> anyhow::Result<()> {
    let (store_url, mut prefix) = split_destination(&to);
    if !prefix.is_empty() && !prefix.ends_with('/') {
        prefix.push('/');
    }
    let store: Arc<dyn Store> = quarry_store::open(&store_url).await.with_context(|| format!("opening {store_url}"))?;
    let files = collect(args.files())?;
    let bars = MultiProgress::new();
    let style = ProgressStyle::with_template("{msg:40!} {bar:30} {bytes}/{total_bytes} {bytes_per_sec}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let results: Vec<(String, anyhow::Result<Uploaded>)> = futures_util::stream::iter(files)
        .map(|(path, rel)| {
            let (store, bars, style) = (store.clone(), bars.clone(), style.clone());
            let key = format!("{prefix}{rel}");
            async move {
                let result = async {
                    let key = Key::new(key.clone())?;
                    let size = std::fs::metadata(&path)?.len();
                    let bar = bars.add(ProgressBar::new(size).with_style(style).with_message(rel.clone()));
                    let tick = bar.clone();
                    let uploaded = upload_file(store.as_ref(), &key, &path, move |n| tick.inc(n)).await;
                    bar.finish_and_clear();
                    Ok(uploaded?)
                }
                .await;
                (key, result)
            }
        })
        .buffer_unordered(args.jobs())
        .collect()
        .await;

    let mut uploaded = Vec::new();
    let mut failures = Vec::new();
    for (key, result) in results {
        match result {
            Ok(u) => uploaded.push(u),
            Err(e) => failures.push(format!("{key}: {e:#}")),
        }
    }
    uploaded.sort_by(|a, b| a.key.cmp(&b.key));
    let kind = kind(args);
    let index_key = match kind {
        Kind::Python | Kind::Artifacts => format!("{prefix}index.html"),
        Kind::Deb => prefix.trim_end_matches("pool/main/").to_owned(),
        Kind::Rpm => prefix.clone(),
    };
    let url = match (&bucket, store_url.strip_prefix("s3://")) {
        (Some(b), _) => quarry_store::layout::public_url_from_env(b, &index_key),
        (None, Some(b)) => quarry_store::layout::public_url_from_env(b, &index_key),
        (None, None) => format!("{}/{index_key}", store_url.trim_end_matches('/')),
    };
    let output_name = match kind {
        Kind::Python => "package_find_links_url",
        Kind::Deb => "deb_repo_url",
        Kind::Rpm => "rpm_repo_url",
        Kind::Artifacts => "artifacts_index_url",
    };
    write_github_files(output_name, &url, &uploaded)?;

    let mut out = std::io::stdout().lock();
    if args.json() {
        let summary = serde_json::json!({ output_name: url, "files": uploaded, "failed": failures });
        serde_json::to_writer_pretty(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        for u in &uploaded {
            writeln!(out, "{} {} sha256={}", u.status, u.key, u.sha256)?;
        }
        writeln!(out, "{output_name}: {url}")?;
    }
    for f in &failures {
        tracing::error!("{f}");
    }
    if !failures.is_empty() {
        bail!("{} of {} uploads failed", failures.len(), failures.len() + uploaded.len());
    }
    Ok(())
}

/// `$GITHUB_OUTPUT` gets `name=url`; `$GITHUB_STEP_SUMMARY` a short table.
fn write_github_files(name: &str, url: &str, uploaded: &[Uploaded]) -> anyhow::Result<()> {
    super::append_to_github_file("GITHUB_OUTPUT", &format!("{name}={url}\n"))?;
    let mut summary = format!(
        "### Uploaded {} file(s)\n\n{name}: <{url}>\n\n| file | size | sha256 | status |\n|---|---:|---|---|\n",
        uploaded.len()
    );
    for u in uploaded {
        summary.push_str(&format!("| `{}` | {} | `{}` | {} |\n", u.key, u.size, u.sha256, u.status));
    }
    super::append_to_github_file("GITHUB_STEP_SUMMARY", &summary)?;
    Ok(())
}
