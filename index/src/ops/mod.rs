//! The ops wing: what operators run over indexed roots, on top of reindexing. The audit
//! ([`check`]: every link resolves, every file is listed, pip, apt and dnf roots and listings),
//! the full reconciliation ([`reconcile`]), retention ([`retention`]) and [`prune`],
//! cross-root origin checks ([`origin`]) and [`promote`] (a run's packages into a channel) with the
//! channel's [`versions`] (history, rollback, the atomic switch); a
//! file's [`lifecycle`] (yank, unyank, delete) and the store's [`audit_log`] of writes.

pub mod audit_log;
pub mod check;
#[cfg(test)]
mod check_tests;
pub mod lifecycle;
pub mod origin;
pub mod promote;
pub mod prune;
pub mod reconcile;
pub mod retention;
pub mod versions;
