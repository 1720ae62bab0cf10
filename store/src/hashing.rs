use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// An incremental SHA-256 that finishes as lowercase hex.
#[derive(Debug, Clone, Default)]
pub struct Sha256Hex(Sha256);

impl Sha256Hex {
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    pub fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// A body being consumed for a put: hashes and counts every chunk and enforces the size limit.
pub(crate) struct HashingBody<'a> {
    body: crate::ByteStream,
    key: &'a str,
    limit: Option<u64>,
    pub(crate) hasher: Sha256Hex,
    pub(crate) size: u64,
}

impl<'a> HashingBody<'a> {
    pub(crate) fn new(body: crate::ByteStream, key: &'a str, limit: Option<u64>) -> Self {
        Self { body, key, limit, hasher: Sha256Hex::default(), size: 0 }
    }

    /// The next chunk, already hashed and counted; `None` at the end of the body.
    pub(crate) async fn next(&mut self) -> crate::Result<Option<bytes::Bytes>> {
        use futures_util::StreamExt;
        let Some(chunk) = self.body.next().await else { return Ok(None) };
        let chunk = chunk.map_err(|source| crate::StoreError::Body { key: self.key.to_owned(), source })?;
        self.size += chunk.len() as u64;
        if let Some(limit) = self.limit
            && self.size > limit
        {
            return Err(crate::StoreError::TooLarge { key: self.key.to_owned(), limit });
        }
        self.hasher.update(&chunk);
        Ok(Some(chunk))
    }

    /// Read into `buffer` until it holds `target` bytes or the body ends; true at the end.
    pub(crate) async fn fill(&mut self, buffer: &mut Vec<u8>, target: usize) -> crate::Result<bool> {
        while buffer.len() < target {
            match self.next().await? {
                Some(chunk) => buffer.extend_from_slice(&chunk),
                None => return Ok(true),
            }
        }
        Ok(false)
    }

    /// The sha256, checked against a declared digest.
    pub(crate) fn finish(self, declared: Option<&str>) -> crate::Result<(u64, String)> {
        let actual = check_digest(self.key, declared, self.hasher.finish())?;
        Ok((self.size, actual))
    }
}

/// `actual` (a body's sha256) when it is the `declared` digest or none was declared; else the
/// mismatch, naming `key`.
pub(crate) fn check_digest(key: &str, declared: Option<&str>, actual: String) -> crate::Result<String> {
    match declared {
        Some(expected) if !expected.eq_ignore_ascii_case(&actual) => {
            Err(crate::StoreError::DigestMismatch { key: key.to_owned(), expected: expected.to_owned(), actual })
        }
        _ => Ok(actual),
    }
}
