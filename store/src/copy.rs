//! Copying an object from one store to another (or within one): server-side where the backends
//! allow it (S3 `CopyObject`, across buckets), else read and written through this process.
//!
//! S3 → S3 is one server-side `CopyObject` for an object up to 5 GiB (`MAX_COPY_OBJECT`), which
//! copies the metadata and so keeps `x-amz-meta-sha256`; there [`Store::copy_from`] HEADs the
//! source for its size and sha256 first, and [`Store::copy_known`] takes both from the caller
//! (an index state already holds them) and skips that HEAD. Anything else, and the other
//! backends' defaults, goes through [`copy_through`], which passes the source's recorded sha256
//! on to the put (checked against the bytes).

use crate::{Key, PutOptions, PutResult, Result, Store};

/// Where an object lies for a server-side copy: its bucket and its full key there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySource {
    /// The bucket.
    pub bucket: String,
    /// The object's key in the bucket (the store's prefix included).
    pub key: String,
}

/// How a copy went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyMethod {
    /// The server copied the object (S3 `CopyObject`); no byte passed through this process.
    ServerSide,
    /// Read from the source and written to the destination by this process.
    Streamed,
}

impl CopyMethod {
    /// `server-side` or `streamed`.
    pub fn label(self) -> &'static str {
        match self {
            Self::ServerSide => "server-side",
            Self::Streamed => "streamed",
        }
    }
}

/// Copies `from` of `source` to `to` of `dest` by reading and writing it, keeping (and
/// checking) its sha256 when the source recorded one.
pub async fn copy_through<S: Store + ?Sized>(dest: &S, source: &dyn Store, from: &Key, to: &Key) -> Result<PutResult> {
    let object = source.get(from, None).await?;
    let sha256 = match object.meta.sha256 {
        Some(sha256) => Some(sha256),
        None => source.head(from).await?.sha256,
    };
    let options = PutOptions { sha256, ..PutOptions::default() };
    dest.put(to, object.body, options).await
}

/// `key` with every byte but RFC 3986's unreserved characters and `/` percent-encoded, as S3's
/// `x-amz-copy-source` wants it.
pub fn encode_copy_source(bucket: &str, key: &str) -> String {
    format!("{bucket}/{}", crate::url::encode_path(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemoryStore, StoreExt};

    #[test]
    fn copy_sources_are_percent_encoded() {
        assert_eq!(encode_copy_source("b", "1-linux/a b+c_x.tar.zst"), "b/1-linux/a%20b%2Bc_x.tar.zst");
    }

    #[tokio::test]
    async fn copies_between_stores_keep_the_sha256() {
        let (a, b) = (MemoryStore::default(), MemoryStore::default());
        let (from, to) = (Key::new("1-linux/x.tar.zst").unwrap(), Key::new("2-linux/x.tar.zst").unwrap());
        a.put_bytes(&from, bytes::Bytes::from_static(b"archive"), PutOptions::default()).await.unwrap();
        let (put, method) = b.copy_from(&a, &from, &to).await.unwrap();
        assert_eq!(method, CopyMethod::Streamed);
        assert_eq!(put.sha256, crate::sha256_hex(b"archive"));
        assert_eq!(b.get_bytes(&to, 100).await.unwrap().1.as_ref(), b"archive");
        assert!(b.copy_from(&a, &Key::new("nope").unwrap(), &to).await.unwrap_err().is_not_found());
    }
}
