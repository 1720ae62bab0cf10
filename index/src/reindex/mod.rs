//! The reindex wing: keeping a root's pages in step with its listing. A change's [`scope`]
//! (its root, project or listing), the files [`inspect`]ed (wheels and sdists here, `.deb`s
//! and `.rpm`s in [`native`]), the pure [`plan`] of what to write, commit and delete, and the
//! loop that [`publish`]es it race-free (per project: [`split`]; per-family views of a generic
//! root: [`view`]). [`discover`] finds the roots of a store; [`task`] runs work cancellably.

pub mod discover;
pub mod indexer;
pub mod inspect;
pub mod native;
pub mod plan;
pub mod publish;
pub mod report;
#[cfg(test)]
pub(crate) mod scale_tests;
pub mod scope;
pub mod split;
pub mod task;
pub mod view;
#[cfg(test)]
mod view_tests;
