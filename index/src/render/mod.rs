//! The render wing: every page and document a root publishes, from its [`crate::RepoState`],
//! purely (the two reads are marked: [`chunked::previous`] reads back the previous documents'
//! compressed chunks to reuse, [`listing::update_listing`] lists a run directory and writes its
//! page): pip's find-links and PEP 503/691 pages and variant files
//! ([`pip`]), apt's `Packages`/`Release` ([`apt`]) and dnf's `repodata/` ([`dnf`]) with their
//! chunked compression reused across reindexes ([`chunked`]) and OpenPGP signatures ([`sign`]),
//! run listings ([`listing`]), and the install lines clients are given ([`install`]).

pub mod apt;
pub mod chunked;
#[cfg(test)]
mod chunked_tests;
pub mod dnf;
pub mod install;
pub mod listing;
pub mod pip;
pub mod sign;

pub use pip::*;
