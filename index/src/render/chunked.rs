//! Whole-repo compressed indexes (`Packages.gz`/`.xz`, dnf's `*.xml.gz`) built from
//! independently compressed chunks, so one more package recompresses one chunk, not the repo.
//!
//! A document is cut into chunks at package boundaries chosen by content (after a package whose
//! file sha256 is 0 mod [`CUT_EVERY`] once the chunk holds [`MIN_CHUNK`] bytes, or when it
//! reaches [`MAX_CHUNK`] bytes), so the same state always gives the same chunks, whichever
//! history led to it. A chunk costs its compressor a fresh start (about 0.5 KB of output each,
//! bench/RESULTS.md), hence the minimum. Each chunk is
//! compressed on its own and deterministically:
//!
//! - gzip: one member per chunk (`gzip -n`-like, level 6), concatenated. apt, zlib and dnf
//!   (libsolv) read multi-member gzip (bench/RESULTS.md). Each member's header carries an
//!   extra field (`Qc`: the chunk's [`ChunkId`], that is the sha256 of its text, its package
//!   count and the first package's sha256 prefix; the deflate data's length; and the text
//!   [`FORMAT`]), which readers skip and a reindex reads to learn the previous members without
//!   inflating them. A member of another format, or without the field, teaches nothing: its
//!   chunk is compressed again. Bump [`FORMAT`] whenever a package's text or the order of the
//!   packages changes.
//! - xz: ONE stream holding one block per chunk (apt 2.6 reads only the first of several
//!   streams): each chunk is xz-compressed alone, its block lifted out of that stream and the
//!   blocks framed with a stream header, index and footer written here. Each block's LZMA2
//!   dictionary is the smallest power of two holding its chunk (4 KiB to the preset's 4 MiB),
//!   so the encoder does not allocate and clear the preset's match-finder tables per chunk.
//!
//! A [`ChunkCache`] holds compressed chunks by [`ChunkId`]. It is filled from the previous
//! outputs (read back only while their sha256 is the one the state recorded), and a render
//! reuses whatever chunk it finds there: the bytes are the same as compressing it again, so a
//! `+1` compresses a few chunks and still equals a from-scratch render. A document is rendered
//! into one buffer by a [`Chunker`], which cuts it into [`Chunks`] (spans of that buffer). A dnf
//! document may also take a chunk of the previous render whole, unrendered
//! ([`Chunker::reuse`]), where a chunk starts and the previous document's chunk there holds the
//! same run of unchanged packages (`dnf::old_places`); its text is inflated only for the
//! document's open checksum ([`ChunkCache::open_digest`], which checks each member against its
//! CRC and length too). The chunks every document lacks are compressed at once on up to
//! `WORKERS` (4) threads.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::Digest as _;

/// A cut after a package whose file sha256 (first 8 hex digits) is 0 mod this, once the chunk
/// holds [`MIN_CHUNK`] bytes: 16 packages past the minimum on average.
pub const CUT_EVERY: u64 = 16;
/// No content-defined cut before a chunk holds this many uncompressed bytes.
pub const MIN_CHUNK: usize = 32 * 1024;
/// A chunk is cut once it holds this many uncompressed bytes, whatever the hashes say.
pub const MAX_CHUNK: usize = 256 * 1024;

const XZ_MAGIC: [u8; 6] = [0xFD, b'7', b'z', b'X', b'Z', 0];
/// Stream flags: check type CRC64 (what `XzEncoder::new` writes).
const XZ_FLAGS: [u8; 2] = [0, 0x04];
const XZ_PRESET: u32 = 3;

/// What a chunk holds: the sha256 of its text, how many packages it holds and the first
/// one's file sha256 (its first 8 bytes; zero for a chunk of no package). Compressed chunks are
/// kept and found by it, and a gzip member names its chunk by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkId {
    digest: Digest,
    packages: u32,
    first: [u8; 8],
}

impl ChunkId {
    /// Packages in the chunk (0: a header or footer).
    pub fn packages(&self) -> u32 {
        self.packages
    }

    /// The first 8 bytes of the first package's file sha256.
    pub fn first(&self) -> [u8; 8] {
        self.first
    }
}

/// One chunk of a previous render, as its gzip member names it: what it holds and the length
/// of its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub id: ChunkId,
    pub len: u32,
}

/// The first 8 bytes of a lowercase hex sha256 (zeros for text that is not hex).
pub fn sha_prefix(sha256: &str) -> [u8; 8] {
    let mut out = [0u8; 8];
    match sha256.get(..16).map(|h| hex::decode_to_slice(h, &mut out)) {
        Some(Ok(())) => out,
        _ => [0; 8],
    }
}

/// One chunk of a document: its text (`start..end` of the document's buffer), or a chunk of
/// the previous render taken whole (`reused`: its compressed forms are in the cache; it has no
/// text here).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    packages: u32,
    first: [u8; 8],
    reused: Option<Member>,
}

/// A document cut into chunks at package boundaries: the text of the chunks it rendered, in
/// one buffer, and each chunk in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Chunks {
    text: String,
    spans: Vec<Span>,
}

impl Chunks {
    /// The chunks' texts in order (a reused chunk's is empty: its text is not here).
    pub fn as_strs(&self) -> Vec<&str> {
        self.spans.iter().map(|s| &self.text[s.start..s.end]).collect()
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Chunks taken whole from the previous render.
    pub fn reused(&self) -> usize {
        self.spans.iter().filter(|s| s.reused.is_some()).count()
    }

    /// The text rendered: the whole document when no chunk was reused.
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn into_text(self) -> String {
        self.text
    }

    /// Chunks of their own (no package each), one per text.
    pub fn of_texts<S: AsRef<str>>(texts: &[S]) -> Self {
        let mut chunker = Chunker::new();
        for text in texts {
            chunker.alone(text.as_ref());
        }
        let mut chunks = chunker.chunks;
        if texts.is_empty() {
            chunks.spans.clear();
        }
        chunks
    }

    /// Each chunk's id and its text (`None` for a reused one).
    fn ids(&self) -> Vec<(ChunkId, Option<&str>)> {
        self.spans
            .iter()
            .map(|s| match s.reused {
                Some(member) => (member.id, None),
                None => {
                    let text = &self.text[s.start..s.end];
                    (ChunkId { digest: digest(text.as_bytes()), packages: s.packages, first: s.first }, Some(text))
                }
            })
            .collect()
    }
}

/// Cuts a document into [`Chunks`] as it is written, package by package.
#[derive(Debug, Default)]
pub struct Chunker {
    chunks: Chunks,
    /// Where the chunk being written starts, how many packages it holds, and the first's.
    start: usize,
    packages: u32,
    first: [u8; 8],
}

impl Chunker {
    pub fn new() -> Self {
        Self::default()
    }

    /// A chunker whose buffer has room for `bytes` of text: a document written into it is not
    /// copied through a run of doublings (room never written costs no memory).
    pub fn with_capacity(bytes: usize) -> Self {
        Self { chunks: Chunks { text: String::with_capacity(bytes), spans: Vec::new() }, ..Self::default() }
    }

    /// Text that stands in a chunk of its own (a document's header or footer, which changes
    /// with the package count or not at all).
    pub fn alone(&mut self, text: &str) {
        self.cut();
        self.chunks.text.push_str(text);
        let end = self.chunks.text.len();
        self.chunks.spans.push(Span { start: self.start, end, packages: 0, first: [0; 8], reused: None });
        self.start = end;
    }

    /// One package's text; `sha256` (lowercase hex of the package file) decides whether a chunk
    /// ends after it.
    pub fn package(&mut self, text: &str, sha256: &str) {
        self.package_with(sha256, |out| out.push_str(text));
    }

    /// One package's text as `write` appends it to the document; `sha256` as for
    /// [`Chunker::package`].
    pub fn package_with(&mut self, sha256: &str, write: impl FnOnce(&mut String)) {
        if self.packages == 0 {
            self.first = sha_prefix(sha256);
        }
        self.packages += 1;
        write(&mut self.chunks.text);
        let key = sha256.get(..8).and_then(|h| u64::from_str_radix(h, 16).ok()).unwrap_or(1);
        let len = self.chunks.text.len() - self.start;
        if (key % CUT_EVERY == 0 && len >= MIN_CHUNK) || len >= MAX_CHUNK {
            self.cut();
        }
    }

    /// Whether the next package would start a chunk.
    pub fn at_cut(&self) -> bool {
        self.packages == 0
    }

    /// A chunk of the previous render taken whole, where a chunk starts ([`Chunker::at_cut`]):
    /// the chunk a render of its packages here would cut.
    pub fn reuse(&mut self, member: Member) {
        debug_assert!(self.at_cut(), "a chunk is reused where one starts");
        self.cut();
        let at = self.chunks.text.len();
        let span =
            Span { start: at, end: at, packages: member.id.packages, first: member.id.first, reused: Some(member) };
        self.chunks.spans.push(span);
    }

    fn cut(&mut self) {
        let end = self.chunks.text.len();
        if end > self.start || self.packages > 0 {
            let span = Span { start: self.start, end, packages: self.packages, first: self.first, reused: None };
            self.chunks.spans.push(span);
            self.start = end;
            self.packages = 0;
            self.first = [0; 8];
        }
    }

    /// The chunks; a document with no text is one empty chunk.
    pub fn finish(mut self) -> Chunks {
        self.cut();
        if self.chunks.spans.is_empty() {
            self.chunks.spans.push(Span { start: 0, end: 0, packages: 0, first: [0; 8], reused: None });
        }
        self.chunks
    }
}

/// One chunk's xz block as it stands in a stream: the bytes (padded to 4), the unpadded size
/// and the uncompressed size the index records.
#[derive(Debug, Clone, PartialEq, Eq)]
struct XzBlocks {
    bytes: bytes::Bytes,
    /// (unpadded size, uncompressed size) of each block (0 or 1 of them).
    records: Vec<(u64, u64)>,
}

type Digest = [u8; 32];

/// Threads compressing chunks at once (at most the cores there are).
const WORKERS: usize = 4;

/// One document to compress: its chunks, gzipped always, xz-compressed when `xz`.
#[derive(Debug, Clone, Copy)]
pub struct Document<'a> {
    pub chunks: &'a Chunks,
    pub xz: bool,
}

/// One compressed chunk.
enum Compressed {
    Gz(bytes::Bytes),
    Xz(XzBlocks),
}

/// Chunks compressed by one render.
#[derive(Default)]
struct Fresh {
    gz: HashMap<ChunkId, bytes::Bytes>,
    xz: HashMap<ChunkId, XzBlocks>,
}

fn digest(data: &[u8]) -> Digest {
    sha2::Sha256::digest(data).into()
}

/// Compressed chunks by [`ChunkId`], the chunks each previous document was made of, and a
/// count of the bytes this cache had to compress (the cost of a render).
#[derive(Debug, Default)]
pub struct ChunkCache {
    gz: HashMap<ChunkId, bytes::Bytes>,
    xz: HashMap<ChunkId, XzBlocks>,
    documents: HashMap<String, Vec<Member>>,
    compressed: AtomicU64,
    misses: AtomicU64,
}

/// A document's chunk as compression sees it: its id and its text, if it has one here.
type Job<'a> = (ChunkId, Option<&'a str>);

impl ChunkCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// Uncompressed bytes compressed (not found in the cache) since this cache was made.
    pub fn compressed_bytes(&self) -> u64 {
        self.compressed.load(Ordering::Relaxed)
    }

    /// Chunks compressed (not found in the cache), counting gzip and xz apart.
    pub fn compressed_chunks(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// Compressed chunks held (gzip members, xz blocks).
    pub fn len(&self) -> (usize, usize) {
        (self.gz.len(), self.xz.len())
    }

    pub fn is_empty(&self) -> bool {
        self.gz.is_empty() && self.xz.is_empty()
    }

    /// The chunks the previous document `name` was made of (see [`document_name`]), each of
    /// them held here gzipped, when it was read back.
    pub fn members(&self, name: &str) -> Option<&[Member]> {
        self.documents.get(name).map(Vec::as_slice)
    }

    /// Whether the gzip member of `id` is held.
    pub fn holds(&self, id: &ChunkId) -> bool {
        self.gz.contains_key(id)
    }

    /// `chunks` gzipped, one member each, concatenated (one empty member for no chunk: a gzip
    /// file has at least one).
    pub fn gzip<S: AsRef<str>>(&self, chunks: &[S]) -> Vec<u8> {
        let chunks = Chunks::of_texts(chunks);
        self.compress_as(&[Document { chunks: &chunks, xz: false }], true).remove(0).0
    }

    /// `chunks` as one xz stream of one block each.
    pub fn xz<S: AsRef<str>>(&self, chunks: &[S]) -> Vec<u8> {
        let chunks = Chunks::of_texts(chunks);
        self.compress_as(&[Document { chunks: &chunks, xz: true }], false).remove(0).1.unwrap_or_default()
    }

    /// Each document gzipped (one member per chunk) and, where asked, xz-compressed (one
    /// stream, one block per chunk): the bytes [`ChunkCache::gzip`] and [`ChunkCache::xz`]
    /// give. Chunks the cache lacks are compressed on up to [`WORKERS`] threads at once, so a
    /// from-scratch render uses every core and a `+1` compresses its few chunks side by side.
    /// A reused chunk is taken from the cache, where the render found it.
    pub fn compress(&self, documents: &[Document<'_>]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        self.compress_as(documents, true)
    }

    /// [`ChunkCache::compress`]; without `gz`, the gzip files are left empty.
    fn compress_as(&self, documents: &[Document<'_>], gz: bool) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let empty: Job<'static> = (ChunkId { digest: digest(b""), packages: 0, first: [0; 8] }, Some(""));
        // Each document's chunks: a gzip file has at least one member.
        let docs: Vec<Vec<Job<'_>>> = documents
            .iter()
            .map(|d| {
                let ids = d.chunks.ids();
                if ids.is_empty() && gz { vec![empty] } else { ids }
            })
            .collect();
        // Every chunk the cache lacks, once (the same chunk in two documents is one job).
        let mut all: Vec<Job<'_>> = Vec::new();
        let (mut gz_jobs, mut xz_jobs) = (Vec::new(), Vec::new());
        let mut seen_gz = std::collections::HashSet::new();
        let mut seen_xz = std::collections::HashSet::new();
        for (jobs, document) in docs.iter().zip(documents) {
            for &(id, text) in jobs {
                let Some(text) = text else { continue };
                let want_gz = gz && !self.gz.contains_key(&id) && seen_gz.insert(id);
                let want_xz =
                    document.xz && !document.chunks.is_empty() && !self.xz.contains_key(&id) && seen_xz.insert(id);
                if want_gz || want_xz {
                    all.push((id, Some(text)));
                }
                if want_gz {
                    gz_jobs.push(all.len() - 1);
                }
                if want_xz {
                    xz_jobs.push(all.len() - 1);
                }
            }
        }
        let fresh = self.fill(&all, &gz_jobs, &xz_jobs);
        docs.iter()
            .zip(documents)
            .map(|(jobs, document)| {
                let ids: Vec<ChunkId> = jobs.iter().map(|(id, _)| *id).collect();
                let gz = if gz { self.assemble_gz(&ids, &fresh.gz) } else { Vec::new() };
                // An xz stream may hold no block at all.
                let xz = document.xz.then(|| match document.chunks.is_empty() {
                    true => xz_stream(&[]),
                    false => self.assemble_xz(&ids, &fresh.xz),
                });
                (gz, xz)
            })
            .collect()
    }

    /// Compress the chunks `gz_jobs` and `xz_jobs` name (indices into `chunks`), in parallel,
    /// counting them as misses.
    fn fill(&self, chunks: &[Job<'_>], gz_jobs: &[usize], xz_jobs: &[usize]) -> Fresh {
        // xz first: the longest jobs start first.
        let jobs: Vec<(usize, bool)> =
            xz_jobs.iter().map(|&i| (i, true)).chain(gz_jobs.iter().map(|&i| (i, false))).collect();
        let text = |i: usize| chunks[i].1.unwrap_or_default();
        for &(i, _) in &jobs {
            self.compressed.fetch_add(text(i).len() as u64, Ordering::Relaxed);
            self.misses.fetch_add(1, Ordering::Relaxed);
        }
        let run = |(i, xz): (usize, bool)| -> (usize, Compressed) {
            let data = text(i).as_bytes();
            let out = if xz {
                Compressed::Xz(xz_blocks(data))
            } else {
                Compressed::Gz(gzip_member(data, &chunks[i].0).into())
            };
            (i, out)
        };
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, WORKERS).min(jobs.len());
        let done: Vec<(usize, Compressed)> = if workers <= 1 {
            jobs.into_iter().map(run).collect()
        } else {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let (jobs, next, run) = (&jobs, &next, &run);
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..workers)
                    .map(|_| {
                        scope.spawn(move || {
                            let mut out = Vec::new();
                            while let Some(&job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                                out.push(run(job));
                            }
                            out
                        })
                    })
                    .collect();
                handles.into_iter().flat_map(|h| h.join().expect("compression does not panic")).collect()
            })
        };
        let mut fresh = Fresh::default();
        for (i, out) in done {
            let id = chunks[i].0;
            match out {
                Compressed::Gz(member) => {
                    fresh.gz.insert(id, member);
                }
                Compressed::Xz(blocks) => {
                    fresh.xz.insert(id, blocks);
                }
            }
        }
        fresh
    }

    fn assemble_gz(&self, ids: &[ChunkId], fresh: &HashMap<ChunkId, bytes::Bytes>) -> Vec<u8> {
        let member = |id| self.gz.get(id).or_else(|| fresh.get(id)).expect("every chunk compressed or held");
        let mut out = Vec::with_capacity(ids.iter().map(|id| member(id).len()).sum());
        for id in ids {
            out.extend_from_slice(member(id));
        }
        out
    }

    fn assemble_xz(&self, ids: &[ChunkId], fresh: &HashMap<ChunkId, XzBlocks>) -> Vec<u8> {
        let blocks: Vec<&XzBlocks> = ids
            .iter()
            .map(|id| self.xz.get(id).or_else(|| fresh.get(id)).expect("every chunk compressed or held"))
            .collect();
        xz_stream(&blocks)
    }

    /// The sha256 (lowercase hex) and length of `chunks`' whole text: rendered chunks as they
    /// are, reused ones inflated from their gzip members (each checked against its trailer's
    /// CRC and length), in turn (the text is never joined).
    pub fn open_digest(&self, chunks: &Chunks) -> Option<(String, usize)> {
        let mut hasher = sha2::Sha256::new();
        let mut size = 0usize;
        let mut buffer = vec![0u8; 64 * 1024];
        let mut inflate = flate2::Decompress::new(false);
        for span in &chunks.spans {
            match span.reused {
                None => {
                    let text = &chunks.text.as_bytes()[span.start..span.end];
                    hasher.update(text);
                    size += text.len();
                }
                Some(member) => {
                    let gz = self.gz.get(&member.id)?;
                    let deflated = gz.get(GZ_HEADER..gz.len().checked_sub(8)?)?;
                    let crc: [u8; 4] = gz.get(gz.len() - 8..gz.len() - 4)?.try_into().ok()?;
                    inflate.reset(false);
                    let mut inflated = flate2::Crc::new();
                    loop {
                        let before = (inflate.total_in() as usize, inflate.total_out());
                        let status = inflate
                            .decompress(&deflated[before.0..], &mut buffer, flate2::FlushDecompress::None)
                            .ok()?;
                        let out = (inflate.total_out() - before.1) as usize;
                        hasher.update(&buffer[..out]);
                        inflated.update(&buffer[..out]);
                        if status == flate2::Status::StreamEnd {
                            break;
                        }
                        if out == 0 && inflate.total_in() as usize == before.0 {
                            return None;
                        }
                    }
                    // The member inflates whole to its trailer's CRC and to the length it
                    // names (it came from a file whose sha256 the state recorded).
                    if inflated.sum().to_le_bytes() != crc || inflate.total_out() != u64::from(member.len) {
                        return None;
                    }
                    size += member.len as usize;
                }
            }
        }
        Some((hex::encode(hasher.finalize()), size))
    }

    /// Learn the members of a multi-member gzip file written by [`ChunkCache::gzip`] as the
    /// document `name`: each names its chunk in its extra field. `None`, and nothing learnt,
    /// when any member does not (a file of another format, or not gzip at all).
    pub fn absorb_gzip(&mut self, name: &str, gz: &bytes::Bytes) -> Option<Vec<ChunkId>> {
        let mut members = Vec::new();
        let mut at = 0;
        while at < gz.len() {
            let (id, len) = indexed_member(&gz[at..])?;
            let isize = gz.get(at + len - 4..at + len)?;
            let text_len = u32::from_le_bytes(isize.try_into().ok()?);
            members.push((Member { id, len: text_len }, gz.slice(at..at + len)));
            at += len;
        }
        if members.is_empty() {
            return None;
        }
        let ids = members.iter().map(|(m, _)| m.id).collect();
        let list = members.iter().map(|(m, _)| *m).collect();
        for (member, bytes) in members {
            self.gz.insert(member.id, bytes);
        }
        self.documents.insert(name.to_owned(), list);
        Some(ids)
    }

    /// Learn the blocks of an xz stream written by [`ChunkCache::xz`] for the chunks whose
    /// ids `chunks` gives in order (those of the gzip file rendered beside it). Nothing is
    /// learnt unless the stream has one block per chunk.
    pub fn absorb_xz(&mut self, xz: &bytes::Bytes, chunks: &[ChunkId]) -> bool {
        let Some(blocks) = split_xz(xz) else { return false };
        if blocks.len() != chunks.len() {
            return false;
        }
        for (key, block) in chunks.iter().zip(blocks) {
            self.xz.insert(*key, block);
        }
        true
    }
}

/// The name [`ChunkCache::members`] knows a document by, from its output's path in its root:
/// `primary` for `repodata/<sha>-primary.xml.gz`, `main/binary-amd64/Packages` for
/// `dists/stable/main/binary-amd64/Packages.gz`.
pub fn document_name(path: &str) -> Option<&str> {
    if let Some(file) = path.strip_prefix("repodata/") {
        return file.strip_suffix(".xml.gz")?.split_once('-').map(|(_, kind)| kind);
    }
    path.strip_prefix(&format!("dists/{}/", crate::state::root::SUITE))?.strip_suffix(".gz")
}

/// Largest previous output read back into the cache.
const MAX_PREVIOUS: u64 = 1 << 30;

/// The compressed chunks of `old`'s apt or dnf outputs, read back from `store` when `changed`
/// (something will be rendered anew): `Packages.gz` with `Packages.xz` per architecture, or
/// the three `repodata/*.xml.gz`. Only outputs whose bytes still have the sha256 the state
/// recorded are learnt from; anything unreadable is skipped (the cache only saves time).
pub(crate) async fn previous(
    store: &dyn quarry_store::Store,
    root: &crate::RepoRoot,
    old: &crate::RepoState,
    changed: bool,
) -> ChunkCache {
    let mut cache = ChunkCache::new();
    if !changed || root.kind() == crate::RepoKind::Pip {
        return cache;
    }
    // (gzip file, its xz sibling for apt): read all at once.
    let wanted: Vec<(String, Option<String>)> = old
        .outputs
        .keys()
        .filter(|k| !k.contains("/by-hash/"))
        .filter_map(|key| {
            if key.ends_with(".xml.gz") && key.contains("/repodata/") {
                Some((key.clone(), None))
            } else {
                let dir = key.strip_suffix("/Packages.gz")?;
                Some((key.clone(), Some(format!("{dir}/Packages.xz"))))
            }
        })
        .collect();
    let reads = wanted.into_iter().map(|(gz, xz)| async move {
        let xz = async {
            match xz {
                Some(key) => read_proven(store, old, key).await,
                None => None,
            }
        };
        let (read, xz) = futures_util::future::join(read_proven(store, old, gz.clone()), xz).await;
        ((gz, read), xz)
    });
    for ((key, gz), xz) in futures_util::future::join_all(reads).await {
        let (Some(gz), Some(name)) = (gz, key.strip_prefix(root.as_str()).and_then(document_name)) else { continue };
        if let (Some(ids), Some(xz)) = (cache.absorb_gzip(name, &gz), xz) {
            cache.absorb_xz(&xz, &ids);
        }
    }
    tracing::debug!(root = %root, chunks = ?cache.len(), "compressed chunks read back");
    cache
}

/// The bytes of `old`'s output `key` if they still have the sha256 the state recorded.
async fn read_proven(store: &dyn quarry_store::Store, old: &crate::RepoState, key: String) -> Option<bytes::Bytes> {
    use quarry_store::StoreExt as _;
    let key = quarry_store::Key::new(key).ok()?;
    let (_, body) = store.get_bytes(&key, MAX_PREVIOUS).await.ok()?;
    let proven = old.outputs.get(key.as_str()).is_some_and(|sha| *sha == quarry_store::sha256_hex(&body));
    proven.then_some(body)
}

/// The gzip extra subfield (RFC 1952 2.3.1.1) in which each member names its chunk: its
/// [`ChunkId`] (the sha256 of the uncompressed chunk, its package count and first package),
/// the length of the member's deflate data and the [`FORMAT`] of the text, so a reindex learns
/// the members of the previous file, and which packages each holds, without inflating them.
/// Readers skip it.
const GZ_SUBFIELD: [u8; 2] = *b"Qc";
/// The subfield's data: digest, deflate length, packages, first package, format.
const GZ_DATA: usize = 32 + 4 + 4 + 8 + 1;
/// The extra field's length: subfield id and length, then the data.
const GZ_EXTRA: usize = 4 + GZ_DATA;
/// A member's header up to its deflate data.
const GZ_HEADER: usize = 10 + 2 + GZ_EXTRA;

/// The text format of every chunked document (each package's text and the packages' order).
/// A chunk of the previous render is taken whole, unread, only when its member was written in
/// this format: bump it whenever a package's text or the order of packages changes.
pub const FORMAT: u8 = 1;

/// gzip of one chunk `id` names: no name, no time, level 6, the chunk named in the extra
/// field ([`GZ_SUBFIELD`]).
fn gzip_member(data: &[u8], id: &ChunkId) -> Vec<u8> {
    let mut deflate =
        flate2::write::DeflateEncoder::new(Vec::with_capacity(data.len() / 4 + 64), flate2::Compression::default());
    deflate.write_all(data).expect("writing to memory");
    let body = deflate.finish().expect("writing to memory");
    let body_len = u32::try_from(body.len()).expect("a chunk's deflate data is under 4 GiB");
    let mut out = Vec::with_capacity(GZ_HEADER + body.len() + 8);
    // Magic, deflate, FEXTRA, no time, no extra flags, unknown OS (as flate2 writes it).
    out.extend_from_slice(&[0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 255]);
    out.extend_from_slice(&(GZ_EXTRA as u16).to_le_bytes());
    out.extend_from_slice(&GZ_SUBFIELD);
    out.extend_from_slice(&(GZ_DATA as u16).to_le_bytes());
    out.extend_from_slice(&id.digest);
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&id.packages.to_le_bytes());
    out.extend_from_slice(&id.first);
    out.push(FORMAT);
    out.extend_from_slice(&body);
    out.extend_from_slice(&crc32(data));
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out
}

/// The chunk and length of a member [`gzip_member`] wrote, in this [`FORMAT`], at the start of
/// `gz`; `None` for any other gzip member.
fn indexed_member(gz: &[u8]) -> Option<(ChunkId, usize)> {
    let header = gz.get(..GZ_HEADER)?;
    if header[..4] != [0x1f, 0x8b, 8, 4]
        || header[10..12] != (GZ_EXTRA as u16).to_le_bytes()
        || header[12..14] != GZ_SUBFIELD
        || header[14..16] != (GZ_DATA as u16).to_le_bytes()
        || header[GZ_HEADER - 1] != FORMAT
    {
        return None;
    }
    let digest: Digest = header[16..48].try_into().ok()?;
    let body = u32::from_le_bytes(header[48..52].try_into().ok()?) as usize;
    let packages = u32::from_le_bytes(header[52..56].try_into().ok()?);
    let first: [u8; 8] = header[56..64].try_into().ok()?;
    let len = GZ_HEADER.checked_add(body)?.checked_add(8)?;
    (len <= gz.len()).then_some((ChunkId { digest, packages, first }, len))
}

/// The LZMA2 dictionary for a chunk of `len` bytes: the smallest power of two that holds it
/// (liblzma's floor is 4 KiB), at most the preset's own. A dictionary as large as the data
/// loses no match, and the encoder's match-finder tables, which it allocates and clears for
/// every chunk, shrink with it (at the preset's 4 MiB they cost more than the compression).
fn xz_dict_size(len: usize) -> u32 {
    const FLOOR: usize = 4 * 1024;
    const PRESET_DICT: usize = 4 * 1024 * 1024;
    len.max(FLOOR).next_power_of_two().min(PRESET_DICT) as u32
}

/// One chunk xz-compressed alone, its blocks lifted out of the stream.
fn xz_blocks(data: &[u8]) -> XzBlocks {
    let mut options = xz2::stream::LzmaOptions::new_preset(XZ_PRESET).expect("a valid xz preset");
    options.dict_size(xz_dict_size(data.len()));
    let stream =
        xz2::stream::Stream::new_stream_encoder(xz2::stream::Filters::new().lzma2(&options), xz2::stream::Check::Crc64)
            .expect("liblzma accepts the preset's options with a smaller dictionary");
    let mut encoder = xz2::write::XzEncoder::new_stream(Vec::new(), stream);
    encoder.write_all(data).expect("writing to memory");
    let stream = bytes::Bytes::from(encoder.finish().expect("writing to memory"));
    let blocks = split_xz(&stream).expect("liblzma writes a well-formed stream");
    match blocks.as_slice() {
        [] => XzBlocks { bytes: bytes::Bytes::new(), records: Vec::new() },
        [one] => one.clone(),
        _ => XzBlocks {
            bytes: blocks.iter().flat_map(|b| b.bytes.iter().copied()).collect::<Vec<u8>>().into(),
            records: blocks.iter().flat_map(|b| b.records.iter().copied()).collect(),
        },
    }
}

fn crc32(data: &[u8]) -> [u8; 4] {
    let mut crc = flate2::Crc::new();
    crc.update(data);
    crc.sum().to_le_bytes()
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn get_varint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..63).step_by(7) {
        let byte = *data.get(*at)?;
        *at += 1;
        n |= u64::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

/// An xz stream of `body` (blocks, each padded to 4) whose index lists `records`.
fn xz_stream(blocks: &[&XzBlocks]) -> Vec<u8> {
    let body: usize = blocks.iter().map(|b| b.bytes.len()).sum();
    let records: Vec<(u64, u64)> = blocks.iter().flat_map(|b| b.records.iter().copied()).collect();
    let mut out = Vec::with_capacity(body + 64 + records.len() * 8);
    out.extend_from_slice(&XZ_MAGIC);
    out.extend_from_slice(&XZ_FLAGS);
    out.extend_from_slice(&crc32(&XZ_FLAGS));
    for block in blocks {
        out.extend_from_slice(&block.bytes);
    }
    let mut index = vec![0u8];
    put_varint(&mut index, records.len() as u64);
    for &(unpadded, uncompressed) in &records {
        put_varint(&mut index, unpadded);
        put_varint(&mut index, uncompressed);
    }
    while index.len() % 4 != 0 {
        index.push(0);
    }
    let crc = crc32(&index);
    index.extend_from_slice(&crc);
    let backward = ((index.len() / 4 - 1) as u32).to_le_bytes();
    out.extend_from_slice(&index);
    let mut tail = Vec::with_capacity(6);
    tail.extend_from_slice(&backward);
    tail.extend_from_slice(&XZ_FLAGS);
    out.extend_from_slice(&crc32(&tail));
    out.extend_from_slice(&tail);
    out.extend_from_slice(b"YZ");
    out
}

/// The blocks of a single-stream xz file (CRC64 check) with one index record each, located
/// through the stream's index; `None` for anything else.
fn split_xz(xz: &bytes::Bytes) -> Option<Vec<XzBlocks>> {
    if xz.len() < 24 || xz[..6] != XZ_MAGIC || xz[6..8] != XZ_FLAGS || !xz.ends_with(b"YZ") {
        return None;
    }
    let footer = &xz[xz.len() - 12..];
    if footer[8..10] != XZ_FLAGS {
        return None;
    }
    let backward = u32::from_le_bytes(footer[4..8].try_into().ok()?);
    let index_len = (backward as usize + 1) * 4;
    let index_start = (xz.len() - 12).checked_sub(index_len)?;
    let index = &xz[index_start..xz.len() - 12];
    if index.first() != Some(&0) || crc32(&index[..index_len - 4]) != index[index_len - 4..] {
        return None;
    }
    let mut at = 1;
    let count = get_varint(index, &mut at)?;
    let mut blocks = Vec::new();
    let mut offset = 12usize;
    for _ in 0..count {
        let unpadded = get_varint(index, &mut at)?;
        let uncompressed = get_varint(index, &mut at)?;
        let padded = usize::try_from(unpadded.div_ceil(4) * 4).ok()?;
        let end = offset.checked_add(padded).filter(|&end| end <= index_start)?;
        blocks.push(XzBlocks { bytes: xz.slice(offset..end), records: vec![(unpadded, uncompressed)] });
        offset = end;
    }
    (offset == index_start).then_some(blocks)
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    fn chunks(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("Package: p{i}\nVersion: 1.{i}\n\n").repeat(20)).collect()
    }

    fn xz_decode(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        xz2::read::XzDecoder::new(data).read_to_end(&mut out).unwrap();
        out
    }

    fn gz_decode(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(data).read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn a_chunk_is_compressed_with_a_dictionary_that_just_holds_it() {
        assert_eq!(xz_dict_size(0), 4096);
        assert_eq!(xz_dict_size(4097), 8192);
        assert_eq!(xz_dict_size(MAX_CHUNK), MAX_CHUNK as u32);
        assert_eq!(xz_dict_size(usize::MAX / 4), 4 * 1024 * 1024);
        // The block's LZMA2 filter properties name the small dictionary, and it decodes.
        let data = "Package: p\nVersion: 1\n\n".repeat(3000);
        let blocks = xz_blocks(data.as_bytes());
        // Block header: size byte, flags (one filter), filter id 0x21, props size 1, dict byte.
        assert_eq!(&blocks.bytes[2..5], &[0x21, 1, 2 * (17 - 12)], "a 128 KiB dictionary");
        let cache = ChunkCache::new();
        assert_eq!(xz_decode(&cache.xz(std::slice::from_ref(&data))), data.as_bytes());
    }

    #[test]
    fn a_chunked_stream_decodes_to_the_whole_document() {
        for n in [0, 1, 5] {
            let chunks = chunks(n);
            let whole: String = chunks.concat();
            let cache = ChunkCache::new();
            assert_eq!(xz_decode(&cache.xz(&chunks)), whole.as_bytes(), "{n} chunks");
            assert_eq!(gz_decode(&cache.gzip(&chunks)), whole.as_bytes(), "{n} chunks");
        }
        // One stream, not several: a decoder that stops after the first stream reads it all.
        let stream = ChunkCache::new().xz(&chunks(3));
        let mut decoder = xz2::stream::Stream::new_stream_decoder(u64::MAX, 0).unwrap();
        let mut out = Vec::with_capacity(1 << 20);
        decoder.process_vec(&stream, &mut out, xz2::stream::Action::Finish).unwrap();
        assert_eq!(out, chunks(3).concat().as_bytes());
    }

    #[test]
    fn cached_chunks_give_the_same_bytes_and_skip_the_compressor() {
        let old = chunks(4);
        let fresh = ChunkCache::new();
        let (gz, xz) = (bytes::Bytes::from(fresh.gzip(&old)), bytes::Bytes::from(fresh.xz(&old)));
        let mut cache = ChunkCache::new();
        let digests = cache.absorb_gzip("doc", &gz).unwrap();
        assert!(cache.absorb_xz(&xz, &digests));
        assert_eq!(cache.len(), (4, 4));
        let mut new = old.clone();
        new.insert(2, "Package: added\n\n".into());
        assert_eq!(cache.gzip(&new), ChunkCache::new().gzip(&new));
        assert_eq!(cache.xz(&new), ChunkCache::new().xz(&new));
        assert_eq!(cache.compressed_bytes(), 2 * new[2].len() as u64);
    }

    /// Several documents compressed at once (in parallel) give what compressing each alone
    /// gives; a chunk two documents share is compressed once; an empty document is still one
    /// empty gzip member and an xz stream of no block.
    #[test]
    fn documents_compressed_together_equal_each_compressed_alone() {
        let (a, b) = (chunks(6), chunks(3));
        let empty: Vec<String> = Vec::new();
        let cache = ChunkCache::new();
        let (sa, sb, se) = (Chunks::of_texts(&a), Chunks::of_texts(&b), Chunks::of_texts(&empty));
        let together = cache.compress(&[
            Document { chunks: &sa, xz: true },
            Document { chunks: &sb, xz: false },
            Document { chunks: &se, xz: true },
        ]);
        let alone = ChunkCache::new();
        assert_eq!(together[0], (alone.gzip(&a), Some(alone.xz(&a))));
        assert_eq!(together[1], (alone.gzip(&b), None));
        assert_eq!(together[2], (alone.gzip(&empty), Some(alone.xz(&empty))));
        // b's chunks are a's first three: 6 gzip + 6 xz + the empty gzip member.
        assert_eq!(cache.compressed_chunks(), 13);
        assert_eq!(xz_decode(together[2].1.as_ref().unwrap()), b"");
    }

    /// Members name their chunk in the gzip extra field, which decoders skip; a file of plain
    /// members (older Quarry, no extra field) is still learnt, by inflating it.
    #[test]
    fn gzip_members_are_learnt_from_their_extra_field_and_only_from_it() {
        let chunks = chunks(3);
        let wanted: Vec<Digest> = chunks.iter().map(|c| digest(c.as_bytes())).collect();
        let gz = bytes::Bytes::from(ChunkCache::new().gzip(&chunks));
        let (id, len) = indexed_member(&gz).unwrap();
        assert_eq!(id.digest, wanted[0]);
        assert_eq!((id.packages(), id.first()), (0, [0; 8]), "chunks of their own");
        assert_eq!(gz_decode(&gz[..len]), chunks[0].as_bytes());
        let mut cache = ChunkCache::new();
        let ids = cache.absorb_gzip("doc", &gz).unwrap();
        assert_eq!(ids.iter().map(|id| id.digest).collect::<Vec<_>>(), wanted);
        let members = cache.members("doc").unwrap();
        assert_eq!(members.iter().map(|m| m.len as usize).collect::<Vec<_>>(), [chunks[0].len(); 3]);
        // Plain members (another writer's, or an older format's) teach nothing: their bytes are
        // not what a render writes.
        let mut plain = Vec::new();
        for chunk in &chunks {
            plain.extend_from_slice(&crate::render::apt::gzip(chunk.as_bytes()));
        }
        assert!(indexed_member(&plain).is_none());
        let mut old = ChunkCache::new();
        assert!(old.absorb_gzip("doc", &plain.into()).is_none());
        assert!(old.is_empty() && old.members("doc").is_none());
        let mut other_format = gz.to_vec();
        other_format[GZ_HEADER - 1] = FORMAT.wrapping_add(1);
        assert!(indexed_member(&other_format).is_none());
        // A truncated member is not taken on its header's word.
        assert!(indexed_member(&gz[..len - 1]).is_none());
    }

    /// A chunk's text is inflated from its member for the document's digest, and a damaged
    /// member is caught.
    #[test]
    fn reused_chunks_inflate_to_the_text_their_member_names() {
        let texts = chunks(3);
        let gz = bytes::Bytes::from(ChunkCache::new().gzip(&texts));
        let mut cache = ChunkCache::new();
        cache.absorb_gzip("doc", &gz).unwrap();
        let members = cache.members("doc").unwrap().to_vec();
        let mut chunker = Chunker::new();
        chunker.alone(&texts[0]);
        chunker.reuse(members[1]);
        chunker.alone(&texts[2]);
        let reused = chunker.finish();
        assert_eq!(reused.reused(), 1);
        let whole = texts.concat();
        let want = (hex::encode(sha2::Sha256::digest(whole.as_bytes())), whole.len());
        assert_eq!(cache.open_digest(&reused), Some(want));
        assert_eq!(cache.compress(&[Document { chunks: &reused, xz: false }])[0].0, gz.to_vec());
        let mut damaged = cache;
        let mut member = damaged.gz[&members[1].id].to_vec();
        let last = member.len() - 9;
        member[last] ^= 1;
        damaged.gz.insert(members[1].id, member.into());
        assert_eq!(damaged.open_digest(&reused), None, "a member that does not inflate to its CRC");
    }

    #[test]
    fn foreign_or_damaged_files_teach_nothing() {
        let mut cache = ChunkCache::new();
        assert!(cache.absorb_gzip("doc", &bytes::Bytes::from_static(b"not gzip")).is_none());
        let xz = bytes::Bytes::from(ChunkCache::new().xz(&chunks(2)));
        let id = |n: u8| ChunkId { digest: [n; 32], packages: 0, first: [0; 8] };
        assert!(!cache.absorb_xz(&xz, &[id(0)]), "one id for two blocks");
        let mut damaged = xz.to_vec();
        let at = damaged.len() - 14;
        damaged[at] ^= 1;
        assert!(!cache.absorb_xz(&damaged.into(), &[id(0), id(1)]));
        assert!(cache.is_empty());
    }

    /// The framing, byte for byte: stream header, one block per chunk, an index of two records
    /// and the footer; two gzip members.
    #[test]
    fn chunked_xz_and_gzip_snapshot() {
        let chunks = ["Package: a\n\n".to_owned(), "Package: b\n\n".to_owned()];
        let cache = ChunkCache::new();
        let dump = |data: &[u8]| data.chunks(16).map(hex::encode).collect::<Vec<_>>().join("\n");
        insta::assert_snapshot!(format!("xz:\n{}\ngz:\n{}", dump(&cache.xz(&chunks)), dump(&cache.gzip(&chunks))));
    }

    #[test]
    fn cuts_depend_on_the_packages_only() {
        let big = "a".repeat(MIN_CHUNK);
        let mut a = Chunker::new();
        a.alone("<head>\n");
        // The first 0 mod 16 comes before the minimum size: no cut there.
        for (text, sha) in [("0\n", "00000010"), (&big, "00000020"), ("b\n", "00000001"), ("c\n", "ffffffff")] {
            a.package(text, sha);
        }
        a.alone("</head>\n");
        let zero_big = format!("0\n{big}");
        assert_eq!(a.finish().as_strs(), ["<head>\n", zero_big.as_str(), "b\nc\n", "</head>\n"]);
        assert_eq!(Chunker::new().finish().as_strs(), [""]);
        // A chunk of its own may be empty; an empty package run between two is not a chunk.
        let mut b = Chunker::new();
        b.alone("");
        b.alone("x");
        assert_eq!(b.finish().as_strs(), ["", "x"]);
    }
}
