//! The payload compressors of debs and rpms, and the hashing writer that sits on either side.
//!
//! zstd and xz always run their multi-threaded encoders (zstd `nbWorkers ≥ 1`, liblzma's
//! `lzma_stream_encoder_mt` with 4 MiB blocks and its thread count capped by memory), whose output
//! depends on the level and the block size but not on the number of threads: a package is
//! byte-identical whether it was built with one compression thread or sixteen. Even with one thread
//! the compression runs beside the caller, so reading and hashing overlap with compressing.
//!
//! xz's thread count is the most of the caller's that fit liblzma's own memory estimate under
//! 240 MiB (`XZ_MEMORY_BUDGET`), at least one, so a package stays within it up to xz -7 (-6,
//! TheRock's `-Zxz`, fits two threads). At -8 and -9 one thread alone is over the budget (about
//! 380 and 690 MiB, as `xz -vv` reports) and it still gets that one.

use std::io::{self, Write};

use sha2::Digest as _;

/// A payload codec and its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// xz: every dpkg reads it (the default for debs; TheRock's `-Zxz`).
    Xz {
        level: u32,
    },
    /// zstd: dpkg ≥ 1.21.18 (Debian 12), every rpm ≥ 4.14; TheRock's rpms are `w9.zstdio`.
    Zstd {
        level: i32,
    },
    Gzip {
        level: u32,
    },
}

impl Default for Compression {
    fn default() -> Self {
        Self::Xz { level: 6 }
    }
}

/// A compressing writer that gives its inner writer back when finished.
pub(crate) trait FinishWrite<W>: Write {
    fn finish_box(self: Box<Self>) -> io::Result<W>;
}

impl<W: Write> FinishWrite<W> for xz2::write::XzEncoder<W> {
    fn finish_box(self: Box<Self>) -> io::Result<W> {
        self.finish()
    }
}

impl<W: Write> FinishWrite<W> for zstd::stream::write::Encoder<'static, W> {
    fn finish_box(self: Box<Self>) -> io::Result<W> {
        self.finish()
    }
}

impl<W: Write> FinishWrite<W> for flate2::write::GzEncoder<W> {
    fn finish_box(self: Box<Self>) -> io::Result<W> {
        self.finish()
    }
}

/// A compressor over `out` using up to `threads` worker threads (gzip: always one, inline).
pub(crate) fn encoder<'a, W: Write + 'a>(
    compression: Compression,
    threads: u32,
    out: W,
) -> io::Result<Box<dyn FinishWrite<W> + 'a>> {
    let threads = threads.max(1);
    Ok(match compression {
        Compression::Xz { level } => {
            let stream = xz_builder(level, threads).encoder().map_err(io::Error::other)?;
            Box::new(xz2::write::XzEncoder::new_stream(out, stream))
        }
        Compression::Zstd { level } => {
            let mut encoder = zstd::stream::write::Encoder::new(out, level)?;
            encoder.multithread(threads)?;
            Box::new(encoder)
        }
        Compression::Gzip { level } => {
            Box::new(flate2::GzBuilder::new().mtime(0).write(out, flate2::Compression::new(level.min(9))))
        }
    })
}

/// What liblzma may allocate for one package's multi-threaded xz encoder (its own estimate,
/// `lzma_stream_encoder_mt_memusage`): with the rest of the process, the packager stays under
/// 256 MiB. xz2 0.1 exposes no `memlimit_threading`, so [`xz_builder`] applies the same rule.
pub(crate) const XZ_MEMORY_BUDGET: u64 = 240 << 20;

/// The xz block size at every level. Each block restarts the dictionary, so larger blocks
/// compress better, but liblzma's multi-threaded encoder holds a block's input and output per
/// thread, and the match finder touches memory in proportion to the block: measured on a
/// compressible 150 MiB ELF at xz -6 on two threads, 24 MiB blocks (liblzma's default, three
/// dictionaries) peak at 255 MiB, 8 MiB at 205 MiB (+1.3% output), 4 MiB at 122 MiB (+3.9%, and
/// 20% faster). Quarry takes 4 MiB: two -6 threads beside everything else under 256 MiB.
pub(crate) const XZ_BLOCK_SIZE: u64 = 4 << 20;

/// liblzma's multi-threaded encoder at `level` with [`XZ_BLOCK_SIZE`] blocks and as many of
/// `threads` as fit in [`XZ_MEMORY_BUDGET`], at least one. The block size is fixed, so the
/// output bytes do not depend on how many threads end up compressing.
pub(crate) fn xz_builder(level: u32, threads: u32) -> xz2::stream::MtStreamBuilder {
    let level = level.min(9);
    let mut builder = xz2::stream::MtStreamBuilder::new();
    builder.preset(level).check(xz2::stream::Check::Crc64).block_size(XZ_BLOCK_SIZE);
    let mut threads = threads.max(1);
    while threads > 1 && builder.threads(threads).memusage() > XZ_MEMORY_BUDGET {
        threads -= 1;
    }
    builder.threads(threads);
    builder
}

/// Passes writes through to `inner`, hashing (SHA-256) and counting them.
pub(crate) struct Sha256Writer<W> {
    pub(crate) inner: W,
    hasher: sha2::Sha256,
    pub(crate) written: u64,
}

impl<W> Sha256Writer<W> {
    pub(crate) fn new(inner: W) -> Self {
        Self { inner, hasher: sha2::Sha256::new(), written: 0 }
    }

    /// The inner writer, the hex digest and the byte count.
    pub(crate) fn finish(self) -> (W, String, u64) {
        (self.inner, hex::encode(self.hasher.finalize()), self.written)
    }
}

impl<W: Write> Write for Sha256Writer<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Compressible but not trivial: a few MiB of pseudo-random words.
    fn data(len: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.extend_from_slice(format!("w{} ", x % 5000).as_bytes());
        }
        out.truncate(len);
        out
    }

    fn compress(compression: Compression, threads: u32, input: &[u8]) -> Vec<u8> {
        let mut e = encoder(compression, threads, Vec::new()).unwrap();
        for chunk in input.chunks(100_000) {
            e.write_all(chunk).unwrap();
        }
        e.finish_box().unwrap()
    }

    #[test]
    fn output_does_not_depend_on_the_thread_count() {
        // Several zstd jobs (level 1: 2 MiB jobs) and several xz blocks (4 MiB).
        let input = data(12 << 20);
        for compression in [Compression::Zstd { level: 1 }, Compression::Xz { level: 0 }] {
            let one = compress(compression, 1, &input);
            for threads in [2, 3, 8] {
                assert!(one == compress(compression, threads, &input), "{compression:?}, {threads} threads");
            }
            assert!(one.len() < input.len() / 2, "{compression:?} compresses");
        }
        let gz = compress(Compression::Gzip { level: 1 }, 4, &input);
        let mut back = Vec::new();
        io::copy(&mut flate2::read::GzDecoder::new(gz.as_slice()), &mut back).unwrap();
        assert!(back == input);
    }

    #[test]
    fn xz_threads_fit_the_memory_budget() {
        // -6 (TheRock's `-Zxz`): two threads fit, three do not.
        assert!(xz_builder(6, 2).memusage() <= XZ_MEMORY_BUDGET);
        assert!(xz_builder(6, 2).memusage() > xz_builder(6, 1).memusage());
        assert_eq!(xz_builder(6, 16).memusage(), xz_builder(6, 2).memusage());
        // -9: even one thread is over the budget; it still gets one.
        assert_eq!(xz_builder(9, 4).memusage(), xz_builder(9, 1).memusage());
        // -1: ~20 MiB a thread, so eleven fit.
        assert!(xz_builder(1, 16).memusage() <= XZ_MEMORY_BUDGET);
        assert!(xz_builder(1, 8).memusage() > xz_builder(1, 4).memusage());
    }

    #[test]
    fn the_hashing_writer_hashes_what_passes() {
        let mut w = Sha256Writer::new(Vec::new());
        w.write_all(b"abc").unwrap();
        let (inner, digest, n) = w.finish();
        assert_eq!((inner.as_slice(), n), (&b"abc"[..], 3));
        assert_eq!(digest, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
