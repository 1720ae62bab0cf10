//! Unnamed temporary files (Linux `O_TMPFILE`) for the local store's batched puts.
//!
//! A batch item's body is written to a file that has no name at all, created in the directory
//! it will land in when that exists (else in `.quarry/tmp/`), then given its final name with
//! `linkat` under the store's lock. Against a named temporary file renamed into place this
//! saves a directory entry created and removed in `.quarry/tmp/` and a cross-directory rename
//! (which takes the filesystem-wide rename lock) per object, and nothing can be left behind: a
//! failed or interrupted put, or a crash, leaves an unnamed file that vanishes when its
//! descriptor is closed. An object that already exists is replaced atomically: the file is
//! linked to a fresh name in `.quarry/tmp/` (swept like any temporary file should the process
//! die right there) and renamed over it.
//!
//! Other systems, and filesystems without `O_TMPFILE`, keep named temporary files: [`create`]
//! answers `None` and the caller writes one.

use std::fs;
use std::io;
use std::path::Path;

/// A new unnamed file in `dir`, open for writing; `None` where there is no such thing (another
/// system, a filesystem without `O_TMPFILE`, no `/proc` to link it through, `dir` missing).
#[cfg(target_os = "linux")]
pub(super) fn create(dir: &Path) -> Option<fs::File> {
    use rustix::fs::{Mode, OFlags};
    if !proc_fd_available() {
        return None;
    }
    let flags = OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC;
    rustix::fs::open(dir, flags, Mode::from_raw_mode(0o644)).ok().map(fs::File::from)
}

#[cfg(not(target_os = "linux"))]
pub(super) fn create(_dir: &Path) -> Option<fs::File> {
    None
}

/// Whether `/proc/self/fd` is there to name an open file by (checked once).
#[cfg(target_os = "linux")]
fn proc_fd_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| Path::new("/proc/self/fd").is_dir())
}

/// Gives `file` (from [`create`]) the name `target`, whose parent exists. Absent a file at
/// `target` it is linked there directly (one directory entry); otherwise, or when another
/// writer created one meanwhile, it is linked to `spare` (a fresh temporary path) and renamed
/// over `target`, atomically.
#[cfg(target_os = "linux")]
pub(super) fn link(file: &fs::File, target: &Path, exists: bool, spare: &Path) -> io::Result<()> {
    use rustix::fs::{AtFlags, CWD};
    use std::os::fd::AsRawFd as _;
    let source = format!("/proc/self/fd/{}", file.as_raw_fd());
    if !exists {
        match rustix::fs::linkat(CWD, source.as_str(), CWD, target, AtFlags::SYMLINK_FOLLOW) {
            Err(rustix::io::Errno::EXIST) => {}
            other => return other.map_err(io::Error::from),
        }
    }
    rustix::fs::linkat(CWD, source.as_str(), CWD, spare, AtFlags::SYMLINK_FOLLOW).map_err(io::Error::from)?;
    fs::rename(spare, target).inspect_err(|_| {
        let _ = fs::remove_file(spare);
    })
}

/// Gives `file` (from [`create`]) the name `target`, whose parent exists, only if nothing has
/// that name: `Ok(false)`, and nothing done, when something does (a file, a directory, a
/// symlink).
#[cfg(target_os = "linux")]
pub(super) fn link_new(file: &fs::File, target: &Path) -> io::Result<bool> {
    use rustix::fs::{AtFlags, CWD};
    use std::os::fd::AsRawFd as _;
    let source = format!("/proc/self/fd/{}", file.as_raw_fd());
    match rustix::fs::linkat(CWD, source.as_str(), CWD, target, AtFlags::SYMLINK_FOLLOW) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::EXIST) => Ok(false),
        Err(e) => Err(io::Error::from(e)),
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn link_new(_file: &fs::File, _target: &Path) -> io::Result<bool> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(not(target_os = "linux"))]
pub(super) fn link(_file: &fs::File, _target: &Path, _exists: bool, _spare: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
