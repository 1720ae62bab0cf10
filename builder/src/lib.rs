//! Quarry's package builders. Each streams from a file tree to a package file with bounded
//! memory and reproducible bytes; domain rules (names, variants, dependencies) live in
//! `quarry-packaging`.
//!
//! - [`deb`]: `.deb` archives (`ar` + `control.tar.xz` + `data.tar.{xz,zst,gz}`).
//! - [`rpm`]: `.rpm` packages, the header from the `rpm` crate, the payload (zstd or gzip)
//!   streamed to a temporary file with every digest computed on the way.
//! - [`compress`]: the payload compressors (multi-threaded zstd and xz whose bytes do not depend
//!   on the thread count) and a hashing writer.
//! - [`wheel`]: wheels and sdists (RECORD, reproducible zip and tar); [`python`]: the rocm-sdk
//!   distributions built from artifacts ([`elf`] tells shared libraries and their sonames).
//! - [`rpath`]: `DT_RUNPATH` turned into `DT_RPATH` in place, on staged copies of a package's
//!   ELF files (TheRock's default; `--runpath-pkg` keeps RUNPATH).
//! - [`tree`]: an artifacts directory read into an index, and a planned package's content
//!   walked into items under the install prefix (hostile manifests and links refused).
//! - [`therock`]: `quarry package` as a library: artifact archives unpacked into a scratch
//!   directory, TheRock's plan mapped to control fields, every package built in parallel.

pub mod compress;
pub mod deb;
pub mod elf;
pub mod elf_edit;
pub mod python;
pub mod rpath;
pub mod rpm;
pub mod therock;
pub mod tree;
pub mod wheel;

pub use deb::{
    Compression, DebBuildError, DebControl, DebReport, DebianDocs, Item, build_deb, build_deb_threads, debian_docs,
};
pub use rpm::{RpmBuildError, RpmCompression, RpmReport, RpmSpec, build_rpm, build_rpm_threads};
pub use tree::{TreeError, collect_items, read_artifacts};
