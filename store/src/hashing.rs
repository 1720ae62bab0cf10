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
