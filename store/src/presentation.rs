//! How a stored object is presented over HTTP, from its key alone: its `Content-Type` and its
//! `Cache-Control`. One table for every way an object reaches a client: `quarry serve` sends
//! these headers, and the S3 backend stores them with the object, so a bucket read directly or
//! through a CDN caches exactly as the server does.
//!
//! Package files (wheels, sdists, debs, rpms, artifact archives) and their PEP 658 metadata
//! never change once written (immutability is enforced at upload): cached for a year,
//! `immutable`. Everything else (index pages, `Packages`, `Release`, `repomd.xml`, listings,
//! checksums, logs) can be rewritten by the next event: `no-cache`, so caches revalidate.

/// `Cache-Control` of an object that can be rewritten (pages, repository metadata).
pub const PAGE_CACHE: &str = "no-cache";
/// `Cache-Control` of an object that never changes once written (package files).
pub const IMMUTABLE_CACHE: &str = "public, max-age=31536000, immutable";

/// Suffixes of package files and archives: immutable once written.
const IMMUTABLE_SUFFIXES: [&str; 8] = [".whl", ".zip", ".tar.gz", ".tar.zst", ".tar.xz", ".deb", ".rpm", ".metadata"];

/// The presentation of one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Presentation {
    pub content_type: &'static str,
    pub cache_control: &'static str,
}

/// Whether the object at `key` never changes once written.
pub fn immutable(key: &str) -> bool {
    let name = file_name(key);
    IMMUTABLE_SUFFIXES.iter().any(|s| name.ends_with(s))
}

/// The `Content-Type` and `Cache-Control` of the object at `key` (a store key or a URL path).
pub fn presentation(key: &str) -> Presentation {
    let name = file_name(key);
    let content_type = if name.ends_with(".html") {
        "text/html; charset=utf-8"
    } else if name.ends_with(".json") {
        "application/json"
    } else if name.ends_with(".metadata")
        || name.ends_with(".sha256sum")
        || name.ends_with(".txt")
        || name.ends_with(".log")
    {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    let cache_control = if immutable(key) { IMMUTABLE_CACHE } else { PAGE_CACHE };
    Presentation { content_type, cache_control }
}

fn file_name(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_files_are_immutable_and_pages_revalidate() {
        for key in [
            "1-linux/python/torch-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl",
            "1-linux/python/torch-2.9.1-cp312-cp312-manylinux_2_28_x86_64.whl.metadata",
            "1-linux/python/rocm-7.10.0.tar.gz",
            "1-linux/packages/deb/pool/main/r/rocm/rocm_7.10_amd64.deb",
            "1-linux/packages/rpm/x86_64/rocm-7.10-1.x86_64.rpm",
            "1-linux/core-runtime_run_generic.tar.zst",
        ] {
            assert_eq!(presentation(key).cache_control, IMMUTABLE_CACHE, "{key}");
        }
        for key in [
            "1-linux/python/index.html",
            "1-linux/python/simple/torch/index.json",
            "1-linux/packages/deb/dists/stable/Release",
            "1-linux/packages/deb/dists/stable/main/binary-amd64/Packages.xz",
            "1-linux/packages/rpm/x86_64/repodata/repomd.xml",
            "1-linux/core-runtime_run_generic.tar.zst.sha256sum",
            "1-linux/logs/build.log",
        ] {
            assert_eq!(presentation(key).cache_control, PAGE_CACHE, "{key}");
        }
    }

    #[test]
    fn content_types_follow_the_name() {
        assert_eq!(presentation("a/index.html").content_type, "text/html; charset=utf-8");
        assert_eq!(presentation("a/index.json").content_type, "application/json");
        assert_eq!(presentation("a/x.whl.metadata").content_type, "text/plain; charset=utf-8");
        assert_eq!(presentation("a/x.whl").content_type, "application/octet-stream");
        // A directory-like name has no suffix: plain bytes, revalidated.
        assert_eq!(presentation("a/").cache_control, PAGE_CACHE);
    }
}
