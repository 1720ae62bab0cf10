//! zstd written as a sequence of independent frames, one per [`CHUNK`] bytes of input, the
//! frames concatenated in input order.
//!
//! A zstd file may hold any number of frames; every decoder reads them one after the other
//! (the `zstd` CLI, pyzstd's `ZstdFile` that TheRock's tools read archives with, the `zstd`
//! crate's stream decoder). Cutting the input into fixed chunks makes the bytes depend only on
//! the input and the level, never on how many threads compressed them, while the chunks of one
//! archive can be compressed on as many threads as it is given. Against zstd's own
//! multi-threaded mode this saves its per-job copies and locking, and a push that writes one
//! archive per core compresses each on the writing thread as the bytes arrive, with no copy and
//! no hand-off (about a tenth less CPU at level 3). Each frame is compressed by zstd's
//! single-threaded streaming API fed at most [`FEED`] bytes at a time: the bytes do not depend on
//! how the input arrives, and feeding the whole chunk in one call measured nearly twice as slow.
//! The cost is each frame starting without the previous chunk's history: about 0.2 % more
//! bytes at 8 MiB chunks (level 3's window is 2 MiB).
//!
//! Memory with workers: at most `2 × threads` chunks in flight, each with its frame (about
//! `4 × CHUNK × threads`); buffers are reused, not reallocated per chunk.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use zstd::stream::raw::{Encoder, InBuffer, Operation as _, OutBuffer};

/// Input bytes per frame.
pub const CHUNK: usize = 8 << 20;
/// The most input handed to the compressor in one call.
const FEED: usize = 1 << 20;

/// One chunk to compress: its place in the stream, its input, a buffer for its frame.
type Job = (u64, Vec<u8>, Vec<u8>);
/// A compressed chunk: its place, the emptied input buffer, the frame (or the failure).
type Done = (u64, Vec<u8>, io::Result<Vec<u8>>);

/// A writer of framed zstd into `out`; [`FramedZstd::finish`] writes the last frame and gives
/// `out` back.
pub struct FramedZstd<W: Write> {
    sink: Sink<W>,
    /// Input bytes taken into the current frame, and the frames begun so far.
    in_frame: usize,
    frames: u64,
    /// Compressed on this thread (one thread) or by workers.
    engine: Engine,
}

enum Engine {
    Inline(Box<Framer>),
    Workers { workers: Workers, filling: Vec<u8> },
}

/// One streaming compression context and its output buffer, reused frame after frame.
struct Framer {
    encoder: Encoder<'static>,
    buffer: Vec<u8>,
}

impl Framer {
    fn new(level: i32) -> io::Result<Self> {
        Ok(Framer { encoder: Encoder::new(level)?, buffer: Vec::with_capacity(zstd::zstd_safe::CCtx::out_size()) })
    }

    /// Compresses `data` into the current frame, its output into `sink`.
    fn feed(&mut self, data: &[u8], sink: &mut impl Write) -> io::Result<()> {
        for piece in data.chunks(FEED) {
            let mut input = InBuffer::around(piece);
            while input.pos() < piece.len() {
                self.buffer.clear();
                let mut output = OutBuffer::around(&mut self.buffer);
                self.encoder.run(&mut input, &mut output)?;
                sink.write_all(&self.buffer)?;
            }
        }
        Ok(())
    }

    /// Ends the current frame (the next byte fed begins a new one).
    fn end(&mut self, sink: &mut impl Write) -> io::Result<()> {
        loop {
            self.buffer.clear();
            let mut output = OutBuffer::around(&mut self.buffer);
            let left = self.encoder.finish(&mut output, true)?;
            sink.write_all(&self.buffer)?;
            if left == 0 {
                return Ok(());
            }
        }
    }
}

struct Workers {
    jobs: Option<mpsc::SyncSender<Job>>,
    done: mpsc::Receiver<Done>,
    threads: Vec<JoinHandle<()>>,
    in_flight: usize,
    limit: usize,
    /// Frames that arrived before the ones ahead of them.
    early: BTreeMap<u64, (Vec<u8>, Vec<u8>)>,
}

impl<W: Write> FramedZstd<W> {
    /// Compresses at `level` on `threads` threads (1: on the writing thread).
    pub fn new(out: W, level: i32, threads: usize) -> io::Result<Self> {
        let engine = if threads <= 1 {
            Engine::Inline(Box::new(Framer::new(level)?))
        } else {
            Engine::Workers { workers: Workers::start(level, threads)?, filling: Vec::with_capacity(CHUNK) }
        };
        let sink = Sink { out, written: 0, free_inputs: Vec::new(), free_outputs: Vec::new() };
        Ok(FramedZstd { sink, in_frame: 0, frames: 0, engine })
    }

    /// Writes the last frame (an empty input still gets one, so the file is a zstd file) and
    /// every frame still being compressed; the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        if self.in_frame > 0 || self.frames == 0 {
            self.end_frame()?;
        }
        if let Engine::Workers { workers, .. } = &mut self.engine {
            while workers.in_flight > 0 {
                workers.receive_one()?;
                self.sink.drain(workers)?;
            }
            workers.stop();
        }
        self.sink.out.flush()?;
        Ok(self.sink.out)
    }

    /// Ends the current frame: written now, or handed to a worker (and whatever frames are
    /// ready written).
    fn end_frame(&mut self) -> io::Result<()> {
        let seq = self.frames;
        self.frames += 1;
        self.in_frame = 0;
        let sink = &mut self.sink;
        match &mut self.engine {
            Engine::Inline(framer) => {
                framer.end(&mut sink.out)?;
                sink.written = seq + 1;
                Ok(())
            }
            Engine::Workers { workers, filling } => {
                while workers.in_flight >= workers.limit {
                    workers.receive_one()?;
                    sink.drain(workers)?;
                }
                let mut next = sink.free_inputs.pop().unwrap_or_default();
                next.reserve(CHUNK);
                let input = std::mem::replace(filling, next);
                let output = sink.free_outputs.pop().unwrap_or_default();
                workers.send((seq, input, output))?;
                sink.drain(workers)
            }
        }
    }
}

/// Where frames go, in order, and the buffers they leave behind.
struct Sink<W> {
    out: W,
    /// The sequence number of the next frame to write out.
    written: u64,
    free_inputs: Vec<Vec<u8>>,
    free_outputs: Vec<Vec<u8>>,
}

impl<W: Write> Sink<W> {
    /// Writes out the workers' frames that are next in order.
    fn drain(&mut self, workers: &mut Workers) -> io::Result<()> {
        while let Some((input, frame)) = workers.early.remove(&self.written) {
            self.out.write_all(&frame)?;
            self.written += 1;
            self.free_inputs.push(recycled(input));
            self.free_outputs.push(recycled(frame));
        }
        Ok(())
    }
}

fn recycled(mut buffer: Vec<u8>) -> Vec<u8> {
    buffer.clear();
    buffer
}

impl<W: Write> Write for FramedZstd<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = (CHUNK - self.in_frame).min(buf.len());
        match &mut self.engine {
            Engine::Inline(framer) => framer.feed(&buf[..n], &mut self.sink.out)?,
            Engine::Workers { filling, .. } => filling.extend_from_slice(&buf[..n]),
        }
        self.in_frame += n;
        if self.in_frame == CHUNK {
            self.end_frame()?;
        }
        Ok(n)
    }

    /// Frames are written whole: a partial chunk stays until it is full or the stream ends.
    fn flush(&mut self) -> io::Result<()> {
        self.sink.out.flush()
    }
}

impl Workers {
    fn start(level: i32, threads: usize) -> io::Result<Self> {
        let (jobs, queue) = mpsc::sync_channel::<Job>(threads);
        let queue = Arc::new(Mutex::new(queue));
        let (report, done) = mpsc::channel::<Done>();
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let queue = Arc::clone(&queue);
            let report = report.clone();
            let mut framer = Framer::new(level)?;
            let handle = std::thread::Builder::new().name(format!("zstd-{i}")).spawn(move || {
                loop {
                    // The lock is held only to take one job.
                    let job = match queue.lock() {
                        Ok(queue) => queue.recv(),
                        Err(_) => return,
                    };
                    let Ok((seq, input, mut frame)) = job else { return };
                    let result = framer.feed(&input, &mut frame).and_then(|()| framer.end(&mut frame)).map(|()| frame);
                    if report.send((seq, input, result)).is_err() {
                        return;
                    }
                }
            })?;
            handles.push(handle);
        }
        Ok(Workers {
            jobs: Some(jobs),
            done,
            threads: handles,
            in_flight: 0,
            limit: 2 * threads,
            early: BTreeMap::new(),
        })
    }

    fn send(&mut self, job: Job) -> io::Result<()> {
        let jobs = self.jobs.as_ref().ok_or_else(|| io::Error::other("the zstd workers have stopped"))?;
        jobs.send(job).map_err(|_| io::Error::other("the zstd workers have stopped"))?;
        self.in_flight += 1;
        Ok(())
    }

    /// Waits for one frame and keeps it until its turn.
    fn receive_one(&mut self) -> io::Result<()> {
        let (seq, input, frame) = self.done.recv().map_err(|_| io::Error::other("the zstd workers have stopped"))?;
        self.in_flight -= 1;
        self.early.insert(seq, (input, frame?));
        Ok(())
    }

    /// Ends the workers: no more jobs, then each thread is waited for.
    fn stop(&mut self) {
        self.jobs = None;
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // An abandoned stream: the threads must not outlive it.
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Some bytes zstd shrinks and some it cannot, over several chunks.
    fn sample(len: usize) -> Vec<u8> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..len)
            .map(|i| {
                if (i / 100_000) % 2 == 0 {
                    (i % 97) as u8
                } else {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                }
            })
            .collect()
    }

    fn framed(data: &[u8], threads: usize, piece: usize) -> Vec<u8> {
        let mut w = FramedZstd::new(Vec::new(), 3, threads).unwrap();
        for part in data.chunks(piece.max(1)) {
            w.write_all(part).unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn the_bytes_do_not_depend_on_the_threads_or_the_write_sizes() {
        let data = sample(3 * CHUNK + 12_345);
        let one = framed(&data, 1, 1 << 20);
        assert_eq!(framed(&data, 2, 777), one);
        assert_eq!(framed(&data, 5, 3 << 20), one);
        let back = zstd::stream::decode_all(one.as_slice()).unwrap();
        assert_eq!(back, data);
    }

    #[test]
    fn each_chunk_is_a_frame_of_its_own() {
        let data = sample(2 * CHUNK + 1);
        let out = framed(&data, 2, 1 << 16);
        let mut frames = 0;
        let mut rest = out.as_slice();
        while !rest.is_empty() {
            let size = zstd::zstd_safe::find_frame_compressed_size(rest).unwrap();
            rest = &rest[size..];
            frames += 1;
        }
        assert_eq!(frames, 3);
    }

    #[test]
    fn an_empty_stream_is_one_empty_frame() {
        for threads in [1, 3] {
            let out = framed(&[], threads, 1);
            assert!(!out.is_empty());
            assert!(zstd::stream::decode_all(out.as_slice()).unwrap().is_empty());
        }
    }

    #[test]
    fn a_failing_writer_is_an_error_and_no_thread_is_left() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let data = sample(CHUNK + 1);
        for threads in [1, 2] {
            let mut w = FramedZstd::new(Full, 3, threads).unwrap();
            let wrote = w.write_all(&data).and_then(|()| w.finish().map(drop));
            assert!(wrote.unwrap_err().to_string().contains("disk full"));
        }
    }
}
