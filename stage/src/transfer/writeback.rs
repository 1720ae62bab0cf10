//! A file writer that starts the disk's writeback while the file is still being written.
//!
//! An archive is made durable by the store (`fdatasync` before it is named). Left alone, the
//! kernel keeps every written page dirty until then (its background threshold is a share of
//! memory, gigabytes on a build machine), so the whole archive is written to disk at the end,
//! after the last byte is compressed, and the push waits for it. Here each `every` bytes a
//! background thread syncs what was written so far through a second handle of the same file:
//! the disk works while the compressor does, and the store's final sync finds little left.
//! Portable (`File::sync_data` on every platform); the bytes written are unchanged.

use std::fs::File;
use std::io::{self, Write};
use std::sync::mpsc;
use std::thread::JoinHandle;

/// Bytes written between two background syncs.
pub(super) const EVERY: u64 = 32 << 20;

/// Writes to `file`, syncing it in the background every [`EVERY`] bytes.
pub(super) struct EarlyWriteback<W: Write> {
    inner: W,
    since: u64,
    every: u64,
    syncer: Syncer,
}

/// The background thread and the way to ask it for a sync; it ends when dropped.
struct Syncer {
    kick: Option<mpsc::SyncSender<()>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Syncer {
    fn start(file: File) -> Self {
        // One pending kick at most: a sync already queued covers every byte before it.
        let (kick, kicks) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("writeback".into())
            .spawn(move || {
                while kicks.recv().is_ok() {
                    file.sync_data()?;
                }
                Ok(())
            })
            .ok();
        Syncer { kick: thread.is_some().then_some(kick), thread }
    }

    fn stop(&mut self) -> io::Result<()> {
        self.kick = None;
        match self.thread.take() {
            Some(thread) => thread.join().map_err(|_| io::Error::other("the writeback thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        // An abandoned file: its sync error does not matter, the thread must not outlive it.
        let _ = self.stop();
    }
}

impl<W: Write> EarlyWriteback<W> {
    /// `inner` writes to the file `file` is a handle of; without a second handle (the clone
    /// failed) the writer only writes.
    pub(super) fn new(inner: W, file: io::Result<File>, every: u64) -> Self {
        let syncer = match file {
            Ok(file) => Syncer::start(file),
            Err(_) => Syncer { kick: None, thread: None },
        };
        EarlyWriteback { inner, since: 0, every: every.max(1), syncer }
    }

    /// The inner writer, once the background syncs have ended (an error of theirs is this
    /// call's error: the file may not reach the disk).
    pub(super) fn finish(mut self) -> io::Result<W> {
        self.syncer.stop()?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for EarlyWriteback<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.since += n as u64;
        if self.since >= self.every {
            self.since = 0;
            if let Some(kick) = &self.syncer.kick {
                // The bytes so far must be in the file before the sync meant to cover them
                // is asked for (a full channel: one is queued already and will).
                self.inner.flush()?;
                let _ = kick.try_send(());
            }
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_arrives_in_order_across_many_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        let file = File::create(&path).unwrap();
        let clone = file.try_clone();
        let mut w = EarlyWriteback::new(io::BufWriter::new(file), clone, 1000);
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        for chunk in data.chunks(777) {
            w.write_all(chunk).unwrap();
        }
        let mut inner = w.finish().unwrap();
        inner.flush().unwrap();
        drop(inner);
        assert_eq!(std::fs::read(&path).unwrap(), data);
    }

    #[test]
    fn without_a_second_handle_it_only_writes() {
        let mut w = EarlyWriteback::new(Vec::new(), Err(io::Error::other("no clone")), 1);
        w.write_all(b"abc").unwrap();
        assert_eq!(w.finish().unwrap(), b"abc");
    }
}
