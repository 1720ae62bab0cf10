//! TheRock stage work over a store (spec §3–§4): what `quarry artifacts`, `quarry stage build`
//! and `quarry pipeline run` do, without the command line.
//!
//! - [`run`]: [`RunLocation`] (run id, platform, store) → [`Run`] (the opened store, the run's
//!   key prefix and the topology), opened once per command or pipeline and passed down;
//!   [`load_topology`].
//! - [`transfer`]: [`push`](transfer::push) a stage's produced artifacts (archived, uploaded with
//!   sidecars), [`fetch`](transfer::fetch) its inbound ones (selected, downloaded with retries,
//!   verified, unpacked in parallel), [`copy`](transfer::copy) stages between runs,
//!   [`select`](transfer::select) what a listing offers for a [`GpuSelection`].
//! - [`build`]: one stage end to end ([`build_stage`](build::build_stage): fetch → `cmake -G
//!   Ninja` → build → push) with a stamp that lets an unchanged stage be reused, and a whole
//!   pipeline ([`plan`](build::plan), [`run_pipeline`](build::run_pipeline)).
//!
//! Progress is reported through [`BuildProgress`] and [`PipelineProgress`]; rendering (spinners,
//! log lines) belongs to the caller. Errors are `thiserror` enums whose `source()` chains keep
//! every [`quarry_topology::TopologyError`] reachable, so a caller can tell bad input apart.
//!
//! The reports the binary prints serialize for `--json` ([`PushReport`](transfer::PushReport),
//! [`FetchReport`](transfer::FetchReport), [`StageReport`], [`PipelineReport`]), and all but
//! [`StageReport`] (printed as JSON, or as a row of the pipeline's table) implement `Display`
//! for the text it prints otherwise.

pub mod build;
pub mod checkout;
pub mod run;
pub mod transfer;

pub use build::{
    BuildError, BuildOptions, BuildProgress, PipelineError, PipelineProgress, PipelineReport, StageReport, Status,
};
pub use run::{LocationFlags, Run, RunError, RunLocation, load_topology};
pub use transfer::{GpuSelection, Moved, TransferError};

use quarry_store::{KeyError, StoreError};

/// An I/O or store operation that failed, saying what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{what}")]
    Io { what: String, source: std::io::Error },
    #[error("{what}")]
    Store { what: String, source: StoreError },
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// An I/O error as the [`OpError`] of doing `what`.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> OpError {
    move |source| OpError::Io { what: what.into(), source }
}

/// A store error as the [`OpError`] of doing `what`.
pub(crate) fn store(what: impl Into<String>) -> impl FnOnce(StoreError) -> OpError {
    move |source| OpError::Store { what: what.into(), source }
}

#[cfg(test)]
mod tests {
    #[test]
    fn chains_read_like_anyhow() {
        let io = std::io::Error::other("disk full");
        let error = crate::TransferError::from(crate::io("writing x")(io));
        assert_eq!(quarry_store::error_chain(&error), "writing x: disk full");
    }
}
