//! Reading an upstream index's project page (what `quarry mirror` copies from): PEP 691 JSON (with PEP 700's `size` and
//! `upload-time`), or PEP 503 HTML (anchors with `#sha256=` fragments, `data-core-metadata` /
//! `data-dist-info-metadata`, `data-upload-time`).
//!
//! The HTML scan is one pass over the page (one lowercased copy, offsets shared with the
//! original), so a page of many anchors costs time in proportion to its length. Neither parser
//! fetches anything or judges a URL: the mirror checks each file's scheme, hash, size and
//! redirects. `fuzz/fuzz_targets/mirror_page.rs` runs both parsers over arbitrary bytes
//! through [`fuzz_check`].

use serde::Deserialize;
pub use url::Url;

/// One file of the upstream's project page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamFile {
    pub filename: String,
    pub url: Url,
    pub sha256: Option<String>,
    pub upload_time: Option<String>,
    /// PEP 700: the size the upstream declares, in bytes.
    pub size: Option<u64>,
    /// The upstream offers `<url>.metadata`, with this sha256 when given.
    pub metadata: Option<Option<String>>,
}

#[derive(Deserialize)]
struct JsonPage {
    files: Vec<JsonFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct JsonFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    upload_time: Option<String>,
    /// PEP 700: the file's size in bytes.
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    core_metadata: Option<serde_json::Value>,
    #[serde(default)]
    dist_info_metadata: Option<serde_json::Value>,
}

/// PEP 691's `core-metadata`: `true`, `false`, or a hashes object.
fn metadata_offer(value: Option<&serde_json::Value>) -> Option<Option<String>> {
    match value? {
        serde_json::Value::Bool(true) => Some(None),
        serde_json::Value::Object(hashes) => Some(hashes.get("sha256").and_then(|v| v.as_str()).map(str::to_lowercase)),
        _ => None,
    }
}

/// The files of a PEP 691 JSON project page at `base`.
pub fn parse_json(base: &Url, body: &[u8]) -> Result<Vec<UpstreamFile>, String> {
    let page: JsonPage = serde_json::from_slice(body).map_err(|e| format!("not a PEP 691 project page: {e}"))?;
    page.files
        .into_iter()
        .map(|f| {
            let url = base.join(&f.url).map_err(|e| format!("{}: URL {:?}: {e}", f.filename, f.url))?;
            Ok(UpstreamFile {
                metadata: metadata_offer(f.core_metadata.as_ref().or(f.dist_info_metadata.as_ref())),
                sha256: f.hashes.get("sha256").map(|s| s.to_lowercase()),
                upload_time: f.upload_time,
                size: f.size,
                filename: f.filename,
                url: without_fragment(url),
            })
        })
        .collect()
}

fn without_fragment(mut url: Url) -> Url {
    url.set_fragment(None);
    url
}

/// The files of a PEP 503 HTML project page at `base`.
pub fn parse_html(base: &Url, body: &str) -> Result<Vec<UpstreamFile>, String> {
    // ASCII lowercasing keeps every byte where it was: offsets into `lower` are offsets into
    // `body`, on the same character boundaries.
    let lower = body.to_ascii_lowercase();
    let mut files = Vec::new();
    let mut pos = 0;
    while let Some(start) = find_anchor(&lower, pos) {
        let attrs_start = start + 2;
        let Some(tag_len) = lower[attrs_start..].find('>') else { break };
        let attributes = parse_attributes(&body[attrs_start..attrs_start + tag_len]);
        let text_start = attrs_start + tag_len + 1;
        let text_end = lower[text_start..].find("</a").map_or(body.len(), |e| text_start + e);
        let text = unescape(body[text_start..text_end].trim());
        pos = text_end;
        let Some(href) = attributes.iter().find(|(n, _)| n == "href").map(|(_, v)| v.clone()) else { continue };
        let url = base.join(&href).map_err(|e| format!("{text}: URL {href:?}: {e}"))?;
        let sha256 = url.fragment().and_then(|f| f.strip_prefix("sha256=")).map(str::to_lowercase);
        let get = |name: &str| attributes.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
        let metadata = get("data-core-metadata").or_else(|| get("data-dist-info-metadata")).and_then(|v| {
            if v == "true" || v.is_empty() {
                Some(None)
            } else {
                v.strip_prefix("sha256=").map(|h| Some(h.to_lowercase()))
            }
        });
        let filename = if text.is_empty() {
            url.path_segments().and_then(|mut s| s.next_back()).unwrap_or_default().to_owned()
        } else {
            text
        };
        files.push(UpstreamFile {
            filename,
            url: without_fragment(url),
            sha256,
            upload_time: get("data-upload-time"),
            size: None,
            metadata,
        });
    }
    Ok(files)
}

/// The byte offset of the next `<a` tag (followed by whitespace) in `lower` from `from`.
fn find_anchor(lower: &str, from: usize) -> Option<usize> {
    let mut from = from;
    while let Some(i) = lower[from..].find("<a") {
        let at = from + i;
        if lower[at + 2..].starts_with(|c: char| c.is_ascii_whitespace()) {
            return Some(at);
        }
        from = at + 2;
    }
    None
}

/// `name="value"` pairs of a tag (names lowercased, values unescaped).
fn parse_attributes(tag: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = tag.trim_start();
    while !rest.is_empty() {
        let name_end = rest.find(|c: char| c == '=' || c.is_ascii_whitespace()).unwrap_or(rest.len());
        let name = rest[..name_end].to_ascii_lowercase();
        rest = rest[name_end..].trim_start();
        let value = if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let (value, remaining) = match after.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let end = after[1..].find(q).map_or(after.len(), |e| e + 1);
                    (&after[1..end], after.get(end + 1..).unwrap_or_default())
                }
                _ => {
                    let end = after.find(|c: char| c.is_ascii_whitespace()).unwrap_or(after.len());
                    (&after[..end], &after[end..])
                }
            };
            rest = remaining.trim_start();
            unescape(value)
        } else {
            String::new()
        };
        if !name.is_empty() && name != "/" {
            out.push((name, value));
        }
    }
    out
}

/// HTML character references: the named five and numeric ones.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        let Some(semi) = after.find(';').filter(|s| *s <= 10) else {
            out.push('&');
            rest = after;
            continue;
        };
        let entity = &after[..semi];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity.strip_prefix('#').and_then(|n| {
                let code = match n.strip_prefix(['x', 'X']) {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => n.parse().ok(),
                };
                code.and_then(char::from_u32)
            }),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &after[semi + 1..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// For the fuzz target `fuzz/fuzz_targets/mirror_page.rs`: `body` read as a JSON page and
/// (when UTF-8) as an HTML page at a fixed base. Whatever either accepts has what the mirror
/// relies on: no URL keeps a fragment, a sha256 is lowercase, and the HTML scan found no more
/// files than the page has `<a` tags.
#[doc(hidden)]
pub fn fuzz_check(body: &[u8]) {
    let base = Url::parse("https://upstream.example/simple/project/").expect("a fixed URL");
    let check = |files: &[UpstreamFile]| {
        for file in files {
            assert!(file.url.fragment().is_none(), "{} keeps a fragment", file.url);
            for hash in [file.sha256.as_ref(), file.metadata.as_ref().and_then(Option::as_ref)].into_iter().flatten() {
                assert_eq!(*hash, hash.to_lowercase(), "a sha256 not lowercased");
            }
        }
    };
    if let Ok(files) = parse_json(&base, body) {
        check(&files);
    }
    if let Ok(text) = std::str::from_utf8(body)
        && let Ok(files) = parse_html(&base, text)
    {
        check(&files);
        let tags = text.to_ascii_lowercase().matches("<a").count();
        assert!(files.len() <= tags, "{} files from {tags} tags", files.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTML: &str = r#"<!DOCTYPE html><html><body>
    <a href="../../Foo.Bar_baz-1.0-py3-none-any.whl#sha256=00AB" data-requires-python="&#62;=3.8,&#60;4" data-core-metadata="sha256=abab" data-dist-info-metadata="sha256=abab" data-size="1234" data-upload-time="2026-11-22T03:49:28.123456Z">Foo.Bar_baz-1.0-py3-none-any.whl</a><br/>
    <A HREF='https://files.example/x/foo_bar_baz-1.2.tar.gz#sha256=16' data-yanked="">foo_bar_baz-1.2.tar.gz</A>
    <abbr>not a link</abbr>
    </body></html>"#;

    #[test]
    fn html_pages_give_urls_hashes_metadata_and_times() {
        let base = Url::parse("http://up.example/simple/foo-bar-baz/").unwrap();
        let files = parse_html(&base, HTML).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].filename, "Foo.Bar_baz-1.0-py3-none-any.whl");
        assert_eq!(files[0].url.as_str(), "http://up.example/Foo.Bar_baz-1.0-py3-none-any.whl");
        assert_eq!(files[0].sha256.as_deref(), Some("00ab"));
        assert_eq!(files[0].metadata, Some(Some("abab".into())));
        assert_eq!(files[0].upload_time.as_deref(), Some("2026-11-22T03:49:28.123456Z"));
        assert_eq!(files[1].url.as_str(), "https://files.example/x/foo_bar_baz-1.2.tar.gz");
        assert_eq!(files[1].metadata, None);
        assert_eq!(unescape("a&amp;b&#x3E;&bogus;"), "a&b>&bogus;");
    }

    #[test]
    fn json_pages_give_the_same() {
        let base = Url::parse("http://up.example/simple/foo/").unwrap();
        let body = br#"{"meta":{"api-version":"1.1"},"name":"foo","files":[
            {"filename":"foo-1.0-py3-none-any.whl","url":"../../foo-1.0-py3-none-any.whl","hashes":{"sha256":"AA"},
             "core-metadata":{"sha256":"bb"},"upload-time":"2026-01-01T00:00:00Z"},
            {"filename":"foo-1.0.tar.gz","url":"../../foo-1.0.tar.gz","hashes":{},"core-metadata":false}]}"#;
        let files = parse_json(&base, body).unwrap();
        assert_eq!(files[0].url.as_str(), "http://up.example/foo-1.0-py3-none-any.whl");
        assert_eq!(files[0].sha256.as_deref(), Some("aa"));
        assert_eq!(files[0].metadata, Some(Some("bb".into())));
        assert_eq!(files[1].sha256, None);
        assert_eq!(files[1].metadata, None);
        assert!(parse_json(&base, b"<html>").unwrap_err().starts_with("not a PEP 691 project page"));
    }
}
