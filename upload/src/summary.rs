//! What a finished upload reports: where clients point and what happened to each file, as
//! JSON (`--json`), as text lines, and as the `$GITHUB_OUTPUT` line and step summary CI reads.

use std::fmt::Write as _;

use quarry_layout::UploadKind;
use quarry_store::Uploaded;
use quarry_wire::UploadResponse;
use serde::Serialize;

use crate::http::UrlError;

/// A file left as stored because its name exists with other bytes (`--skip-existing`): where
/// it is and why it was not stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kept {
    /// The key (store) or URL (server) that already holds other bytes.
    pub key: String,
    /// What the store or server said.
    pub reason: String,
}

/// What an upload to a server reports: where clients point, and the server's answer for each
/// file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerSummary {
    /// pip roots: what `pip install --find-links` takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub find_links_url: Option<String>,
    /// pip roots: what `--index-url` takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simple_url: Option<String>,
    /// apt roots: the sources.list line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apt_source: Option<String>,
    /// dnf roots: the `baseurl`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dnf_baseurl: Option<String>,
    /// Signed apt/dnf roots: the public key to pin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_url: Option<String>,
    /// The server's answer for each file uploaded.
    pub files: Vec<UploadResponse>,
    /// The files left as stored (`--skip-existing`): their names exist with other bytes.
    pub skipped: Vec<Kept>,
}

impl ServerSummary {
    /// What clients point at below the server root `base`, from the server's answer for the
    /// first file (its root, repo and key): an apt line, a dnf baseurl, else pip's URLs.
    pub fn new(base: &reqwest::Url, files: Vec<UploadResponse>) -> Result<Self, UrlError> {
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
            skipped: Vec::new(),
        };
        match root {
            Some(root) if repo.ends_with("/InRelease") => {
                let keyring = key_url.is_some().then_some(quarry_index::install::APT_KEYRING);
                summary.apt_source = Some(quarry_index::install::apt_source(root.as_str(), keyring));
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

    /// The text form: `{status} {key} sha256={sha256}` per file, `skipped {key}: {reason}` per
    /// file left as stored, then what clients point at.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.files {
            let _ = writeln!(out, "{} {} sha256={}", f.status, f.key, f.sha256);
        }
        kept_lines(&mut out, &self.skipped);
        // A wholly refused upload points nobody anywhere.
        if self.files.is_empty() && self.skipped.is_empty() {
            return out;
        }
        let lines = [
            ("find-links: ", &self.find_links_url),
            ("index-url: ", &self.simple_url),
            ("apt: ", &self.apt_source),
            ("dnf: baseurl=", &self.dnf_baseurl),
            ("key: ", &self.key_url),
        ];
        for (label, value) in lines {
            if let Some(value) = value {
                let _ = writeln!(out, "{label}{value}");
            }
        }
        out
    }
}

/// What an upload into a store reports: the index URL of the destination, the files stored
/// (sorted by key) and those that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSummary {
    /// What was uploaded: names the URL ([`output_name`](Self::output_name)).
    pub kind: UploadKind,
    /// The index clients point at (find-links page, apt or dnf root, run listing).
    pub url: String,
    /// What each stored file's upload did, sorted by key.
    pub files: Vec<Uploaded>,
    /// The files that failed, as `key: reason`.
    pub failed: Vec<String>,
    /// The files left as stored (`--skip-existing`): their keys hold other bytes.
    pub skipped: Vec<Kept>,
    /// TheRock's Python upload step: whether the wheels are kpack-split (multi-arch, all at the
    /// top), the `kpack_split` output later jobs read. `None`: not written.
    pub kpack_split: Option<bool>,
}

impl StoreSummary {
    /// The name the URL is reported under (the `$GITHUB_OUTPUT` and JSON key).
    pub fn output_name(&self) -> &'static str {
        match self.kind {
            UploadKind::Python => "package_find_links_url",
            UploadKind::Deb => "deb_repo_url",
            UploadKind::Rpm => "rpm_repo_url",
            UploadKind::Artifacts => "artifacts_index_url",
            UploadKind::Logs => "logs_index_url",
        }
    }

    /// The JSON form: `{ "<output name>": url, "files": […], "failed": […], "skipped": […] }`,
    /// and `"kpack_split"` when known.
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = serde_json::json!({
            self.output_name(): self.url,
            "files": self.files,
            "failed": self.failed,
            "skipped": self.skipped,
        });
        if let (Some(split), Some(object)) = (self.kpack_split, json.as_object_mut()) {
            object.insert("kpack_split".into(), split.into());
        }
        json
    }

    /// The text form: `{status} {key} sha256={sha256}` per stored file, `skipped {key}:
    /// {reason}` per file left as stored, then `{name}: {url}`.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for u in &self.files {
            let _ = writeln!(out, "{} {} sha256={}", u.status, u.key, u.sha256);
        }
        kept_lines(&mut out, &self.skipped);
        // A wholly refused upload points nobody anywhere.
        if !self.files.is_empty() || !self.skipped.is_empty() {
            let _ = writeln!(out, "{}: {}", self.output_name(), self.url);
            if let Some(line) = self.install_line() {
                let _ = writeln!(out, "{line}");
            }
        }
        out
    }

    /// What else a client points at, as `quarry promote` prints it: pip's `--index-url` (the
    /// simple index beside the find-links page), the apt source line, the dnf `baseurl`.
    pub fn install_line(&self) -> Option<String> {
        match self.kind {
            UploadKind::Python => {
                let root = self.url.strip_suffix("index.html")?;
                Some(format!("index-url: {}", quarry_index::install::index_url(root)))
            }
            UploadKind::Deb => Some(format!("apt: {}", quarry_index::install::apt_source(&self.url, None))),
            UploadKind::Rpm => Some(format!("dnf: baseurl={}", self.url)),
            UploadKind::Artifacts | UploadKind::Logs => None,
        }
    }

    /// The `$GITHUB_OUTPUT` lines: `{name}={url}`, then `kpack_split=true|false` when known
    /// (as `upload_python_packages.py` writes them).
    pub fn github_output(&self) -> String {
        let mut out = format!("{}={}\n", self.output_name(), self.url);
        if let Some(split) = self.kpack_split {
            let _ = writeln!(out, "kpack_split={split}");
        }
        out
    }

    /// The `$GITHUB_STEP_SUMMARY` text: a heading, the URL and a table of the stored files.
    pub fn step_summary(&self) -> String {
        let mut summary = format!(
            "### Uploaded {} file(s)\n\n{}: <{}>\n\n| file | size | sha256 | status |\n|---|---:|---|---|\n",
            self.files.len(),
            self.output_name(),
            self.url
        );
        for u in &self.files {
            let _ = writeln!(summary, "| `{}` | {} | `{}` | {} |", u.key, u.size, u.sha256, u.status);
        }
        summary
    }
}

/// `skipped {key}: {reason}` per file left as stored.
fn kept_lines(out: &mut String, kept: &[Kept]) {
    for k in kept {
        let _ = writeln!(out, "skipped {}: {}", k.key, k.reason);
    }
}

impl Serialize for StoreSummary {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use quarry_wire::UploadStatus;

    use super::*;

    fn answer(root: &str, repo: Option<&str>, public_key: Option<&str>) -> UploadResponse {
        UploadResponse {
            key: format!("{root}f"),
            size: 1,
            sha256: "ab".into(),
            status: UploadStatus::Created,
            root: root.into(),
            find_links: None,
            simple: None,
            repo: repo.map(Into::into),
            public_key: public_key.map(Into::into),
        }
    }

    #[test]
    fn server_summaries_point_clients_at_the_root() {
        let base = reqwest::Url::parse("http://h:9/7-linux/python/").unwrap();
        let pip = ServerSummary::new(&base, vec![answer("7-linux/python/", None, None)]).unwrap();
        assert_eq!(
            pip.text(),
            "created 7-linux/python/f sha256=ab\nfind-links: http://h:9/7-linux/python/index.html\n\
             index-url: http://h:9/7-linux/python/simple/\n"
        );
        assert_eq!(pip.simple_url.as_deref(), Some("http://h:9/7-linux/python/simple/"));
        let json = serde_json::to_value(&pip).unwrap();
        assert!(json.get("apt_source").is_none() && json["files"][0]["status"] == "created", "{json}");

        let deb = answer("7-linux/packages/deb/", Some("/7-linux/packages/deb/dists/stable/InRelease"), Some("/k.asc"));
        let apt = ServerSummary::new(&base, vec![deb]).unwrap();
        assert_eq!(
            apt.apt_source.as_deref(),
            Some("deb [signed-by=/etc/apt/keyrings/quarry.asc] http://h:9/7-linux/packages/deb/ stable main")
        );
        assert!(apt.text().ends_with("key: http://h:9/k.asc\n"), "{}", apt.text());
        let rpm =
            answer("7-linux/packages/rpm/x86_64/", Some("/7-linux/packages/rpm/x86_64/repodata/repomd.xml"), None);
        let dnf = ServerSummary::new(&base, vec![rpm]).unwrap();
        assert!(dnf.text().ends_with("dnf: baseurl=http://h:9/7-linux/packages/rpm/x86_64/\n"), "{}", dnf.text());
        let none = ServerSummary::new(&base, Vec::new()).unwrap();
        assert_eq!(none.text(), "", "nothing uploaded: no install line");
    }

    #[test]
    fn store_summaries_for_ci() {
        let summary = StoreSummary {
            kind: UploadKind::Deb,
            url: "https://b.s3.amazonaws.com/1-linux/packages/deb/".into(),
            files: vec![Uploaded {
                key: "1-linux/packages/deb/pool/main/a.deb".into(),
                size: 3,
                sha256: "cd".into(),
                status: "uploaded",
            }],
            failed: vec!["1-linux/packages/deb/pool/main/b.deb: immutable".into()],
            skipped: Vec::new(),
            kpack_split: None,
        };
        assert_eq!(summary.github_output(), "deb_repo_url=https://b.s3.amazonaws.com/1-linux/packages/deb/\n");
        assert_eq!(
            summary.text(),
            "uploaded 1-linux/packages/deb/pool/main/a.deb sha256=cd\ndeb_repo_url: https://b.s3.amazonaws.com/1-linux/packages/deb/\n\
             apt: deb [trusted=yes] https://b.s3.amazonaws.com/1-linux/packages/deb/ stable main\n"
        );
        assert_eq!(
            summary.step_summary(),
            "### Uploaded 1 file(s)\n\ndeb_repo_url: <https://b.s3.amazonaws.com/1-linux/packages/deb/>\n\n\
             | file | size | sha256 | status |\n|---|---:|---|---|\n\
             | `1-linux/packages/deb/pool/main/a.deb` | 3 | `cd` | uploaded |\n"
        );
        // As `serde_json::json!` builds it: every object's keys sorted.
        let json = serde_json::to_string(&summary).unwrap();
        assert_eq!(
            json,
            r#"{"deb_repo_url":"https://b.s3.amazonaws.com/1-linux/packages/deb/","failed":["1-linux/packages/deb/pool/main/b.deb: immutable"],"files":[{"key":"1-linux/packages/deb/pool/main/a.deb","sha256":"cd","size":3,"status":"uploaded"}],"skipped":[]}"#
        );
        let kinds = [UploadKind::Python, UploadKind::Rpm, UploadKind::Artifacts]
            .map(|kind| StoreSummary { kind, ..summary.clone() });
        assert_eq!(kinds.map(|s| s.output_name()), ["package_find_links_url", "rpm_repo_url", "artifacts_index_url"]);
        let split = StoreSummary { kind: UploadKind::Python, kpack_split: Some(true), ..summary.clone() };
        assert_eq!(
            split.github_output(),
            "package_find_links_url=https://b.s3.amazonaws.com/1-linux/packages/deb/\nkpack_split=true\n"
        );
        assert_eq!(split.to_json()["kpack_split"], true);
    }
}
