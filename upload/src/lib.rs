//! Uploading files to Quarry, without the command line: what `quarry upload` does.
//!
//! - [`destination`]: where files go. A Quarry server's root URL ([`server_base`]), a store
//!   prefix given as `s3://bucket/prefix/` or a directory ([`StoreDestination::parse`]), or one
//!   computed from a CI run ([`RunTarget::destination`]); the [`UploadKind`] a destination holds
//!   ([`infer_kind`]) and the index URL CI reports for it. Every layout fact comes from
//!   [`quarry_layout`].
//! - [`http`]: [`ServerClient`] PUTs files to a server with a token, retrying server errors,
//!   hashing the body as it streams and checking the server stored the same sha256; with
//!   `skip_existing`, a file whose name exists with other bytes is left as stored.
//! - [`store`]: [`collect`] the files of paths and directories, [`upload_to_store`] them with
//!   [`quarry_store::upload_file`] (hashed first, idempotent, immutable keys; with
//!   `skip_existing`, a key holding other bytes is left as stored).
//! - [`step`]: TheRock's upload step conventions: `<dir>/dist` and `<dir>/logs` inputs, the
//!   artifact group, which log files go where, the multi-arch Python layout (`kpack_split`).
//! - [`summary`]: what a finished upload reports ([`ServerSummary`], [`StoreSummary`]): JSON,
//!   text lines, and the `$GITHUB_OUTPUT` and step summary text, all pure.
//!
//! Options are plain values: this crate reads no environment variables and prints nothing.
//! Progress goes through [`Progress`], so bars stay with the caller.

pub mod destination;
pub mod http;
pub mod mirror;
pub mod step;
pub mod store;
pub mod summary;
pub mod wait;

use std::sync::Arc;

pub use destination::{Destination, DestinationError, RunTarget, StoreDestination, infer_kind, server_base};
pub use http::{ATTEMPTS, HttpError, SSL_CERT_FILE, ServerClient, ServerOutcome, TrustError, trusting_ssl_cert_file};
pub use quarry_layout::UploadKind;
pub use step::{GroupError, check_group, collect_inputs, input_dir};
pub use store::{CollectError, PythonLayout, StoreOptions, collect, upload_to_store};
pub use summary::{Kept, ServerSummary, StoreSummary};

/// Where upload progress goes: the binary draws bars, others ignore it ([`NoProgress`]).
pub trait Progress: Send + Sync {
    /// A file of `size` bytes shown as `name` starts sending (again, on a retry).
    fn start(&self, name: &str, size: u64) -> Arc<dyn FileProgress>;
}

/// The progress of one file's transfer.
pub trait FileProgress: Send + Sync {
    /// `bytes` more were sent.
    fn advance(&self, bytes: u64);
    /// The transfer ended, whether it succeeded or not.
    fn finish(&self);
}

/// Progress shown nowhere.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&self, _name: &str, _size: u64) -> Arc<dyn FileProgress> {
        Arc::new(NoProgress)
    }
}

impl FileProgress for NoProgress {
    fn advance(&self, _bytes: u64) {}
    fn finish(&self) {}
}
