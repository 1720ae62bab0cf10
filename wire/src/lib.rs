//! What the server and its clients exchange as JSON: the answer to an upload. The server
//! writes these types and `quarry upload` reads them back, so the two cannot drift apart.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Whether an upload stored a new file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UploadStatus {
    /// The file was stored (201).
    Created,
    /// Identical bytes were there already (200).
    Exists,
}

impl UploadStatus {
    /// `created` or `exists`, as serialized (also the uploads metric's outcome label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Exists => "exists",
        }
    }
}

impl fmt::Display for UploadStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The JSON body answering `PUT /<root>/<file>`. Links are absolute URL paths on the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadResponse {
    /// The stored key.
    pub key: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the stored bytes.
    pub sha256: String,
    pub status: UploadStatus,
    /// The repo root the file was indexed into (`12345-linux/python/`).
    pub root: String,
    /// pip roots: the find-links page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_links: Option<String>,
    /// pip roots: the simple index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simple: Option<String>,
    /// apt roots: the `InRelease` clients read; dnf roots: `repodata/repomd.xml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Signed apt/dnf roots: the armored public key clients pin (`signed-by`, `gpgkey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_round_trip_without_absent_links() {
        let response = UploadResponse {
            key: "7-linux/python/a-1.0-py3-none-any.whl".into(),
            size: 3,
            sha256: "ab".into(),
            status: UploadStatus::Exists,
            root: "7-linux/python/".into(),
            find_links: Some("/7-linux/python/index.html".into()),
            simple: None,
            repo: None,
            public_key: None,
        };
        let json = serde_json::to_string(&response).unwrap();
        insta::assert_snapshot!(json, @r#"{"key":"7-linux/python/a-1.0-py3-none-any.whl","size":3,"sha256":"ab","status":"exists","root":"7-linux/python/","find_links":"/7-linux/python/index.html"}"#);
        assert_eq!(serde_json::from_str::<UploadResponse>(&json).unwrap(), response);
    }
}
