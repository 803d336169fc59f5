//! The big-file workloads, `dd`-like in Rust: a sequential write of [`BigFile::bytes`]
//! in 1 MiB `write`s ending with `fsync`, a sequential read in 1 MiB `read`s, and
//! [`BigFile::reads`] `pread`s of 4 KiB at seeded, 4 KiB-aligned offsets.
//!
//! Contents: block *i* (1 MiB) is one fixed pseudo-random MiB with *i* in its first 8
//! bytes, so a block written to or read from the wrong place is noticed. The sequential
//! read hashes what it reads (xxh3-64, several GB/s, a small part of the time even on
//! tmpfs) and compares with the hash of what was written; each random read is compared
//! with the expected 4 KiB.

use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::Xxh3;

use super::tree::Rng;

/// Block size of the sequential workloads.
pub const BLOCK: usize = 1 << 20;
/// Size of a random read.
pub const PAGE: usize = 4096;

/// What the big-file workloads write and expect.
#[derive(Clone, Debug)]
pub struct BigFile {
    /// File size, a multiple of [`BLOCK`].
    pub bytes: u64,
    /// Offsets of the random reads.
    pub reads: Vec<u64>,
    /// The fixed block.
    block: Vec<u8>,
    /// xxh3-64 of the whole file.
    hash: u64,
}

impl BigFile {
    /// A file of `mib` MiB (at least 1) and `reads` random reads, from `seed`.
    pub fn new(mib: u64, reads: usize, seed: u64) -> BigFile {
        let bytes = mib.max(1) * BLOCK as u64;
        let mut rng = Rng::new(seed);
        let mut block = vec![0u8; BLOCK];
        for c in block.chunks_exact_mut(8) {
            c.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        let pages = bytes / PAGE as u64;
        let reads = (0..reads).map(|_| rng.below(pages) * PAGE as u64).collect();
        let mut f = BigFile { bytes, reads, block, hash: 0 };
        let mut h = Xxh3::new();
        let mut buf = f.block.clone();
        for i in 0..f.blocks() {
            f.stamp(&mut buf, i);
            h.update(&buf);
        }
        f.hash = h.digest();
        f
    }

    fn blocks(&self) -> u64 {
        self.bytes / BLOCK as u64
    }

    /// Makes `buf` (a copy of the fixed block) block `i`.
    fn stamp(&self, buf: &mut [u8], i: u64) {
        buf[..8].copy_from_slice(&i.to_le_bytes());
    }

    /// The expected bytes at `off` (page aligned).
    fn expected_page(&self, off: u64) -> Vec<u8> {
        let (b, r) = (off / BLOCK as u64, (off % BLOCK as u64) as usize);
        let mut page = self.block[r..r + PAGE].to_vec();
        if r == 0 {
            page[..8].copy_from_slice(&b.to_le_bytes());
        }
        page
    }

    /// Creates `path` and writes the file, `fsync` included. `stop` is polled per block.
    pub fn write(&self, path: &Path, stop: &dyn Fn() -> bool) -> Result<Duration, String> {
        let e = |what: &str, err: std::io::Error| format!("{what} {}: {err}", path.display());
        let mut buf = self.block.clone();
        let t = Instant::now();
        let mut f = std::fs::File::create(path).map_err(|err| e("create", err))?;
        for i in 0..self.blocks() {
            if stop() {
                return Err("interrupted".into());
            }
            self.stamp(&mut buf, i);
            f.write_all(&buf).map_err(|err| e("write", err))?;
        }
        f.sync_all().map_err(|err| e("fsync", err))?;
        drop(f);
        let took = t.elapsed();
        let len = std::fs::metadata(path).map_err(|err| e("stat", err))?.len();
        if len != self.bytes {
            return Err(format!("{}: {len} bytes after writing {}", path.display(), self.bytes));
        }
        Ok(took)
    }

    /// Reads the file sequentially and checks its hash.
    pub fn read(&self, path: &Path, stop: &dyn Fn() -> bool) -> Result<Duration, String> {
        let e = |what: &str, err: std::io::Error| format!("{what} {}: {err}", path.display());
        let mut buf = vec![0u8; BLOCK];
        let mut h = Xxh3::new();
        let mut total = 0u64;
        let t = Instant::now();
        let mut f = std::fs::File::open(path).map_err(|err| e("open", err))?;
        loop {
            if stop() {
                return Err("interrupted".into());
            }
            let n = f.read(&mut buf).map_err(|err| e("read", err))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            total += n as u64;
        }
        drop(f);
        let took = t.elapsed();
        if total != self.bytes {
            return Err(format!("{}: read {total} bytes, wrote {}", path.display(), self.bytes));
        }
        if h.digest() != self.hash {
            return Err(format!("{}: the data read back differs from the data written", path.display()));
        }
        Ok(took)
    }

    /// The random reads; each page is checked.
    pub fn random_reads(&self, path: &Path) -> Result<Duration, String> {
        let e = |what: &str, err: std::io::Error| format!("{what} {}: {err}", path.display());
        let mut buf = vec![0u8; PAGE];
        let mut got = Vec::with_capacity(self.reads.len());
        let t = Instant::now();
        let f = std::fs::File::open(path).map_err(|err| e("open", err))?;
        for &off in &self.reads {
            f.read_exact_at(&mut buf, off).map_err(|err| e("pread", err))?;
            // Compared after the clock stops; only a cheap fingerprint is kept here.
            got.push(xxhash_rust::xxh3::xxh3_64(&buf));
        }
        drop(f);
        let took = t.elapsed();
        for (&off, &g) in self.reads.iter().zip(&got) {
            if g != xxhash_rust::xxh3::xxh3_64(&self.expected_page(off)) {
                return Err(format!("{}: the 4 KiB at offset {off} differ from what was written", path.display()));
            }
        }
        Ok(took)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let d = tempfile::Builder::new().prefix("uvfs-bigfile-").tempdir().unwrap();
        let p = d.path().join("big");
        let b = BigFile::new(3, 200, 42);
        assert_eq!(b.bytes, 3 << 20);
        assert!(b.reads.iter().all(|&o| o % PAGE as u64 == 0 && o + PAGE as u64 <= b.bytes));
        b.write(&p, &|| false).unwrap();
        b.read(&p, &|| false).unwrap();
        b.random_reads(&p).unwrap();
        // Blocks carry their index: swapping two blocks is noticed.
        let mut data = std::fs::read(&p).unwrap();
        let (a, c) = data.split_at_mut(BLOCK);
        a.swap_with_slice(&mut c[..BLOCK]);
        std::fs::write(&p, &data).unwrap();
        assert!(b.read(&p, &|| false).unwrap_err().contains("differs"));
        // One byte off in a page that is read randomly.
        b.write(&p, &|| false).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&[!b.expected_page(b.reads[0])[9]], b.reads[0] + 9).unwrap();
        assert!(b.random_reads(&p).unwrap_err().contains(&format!("offset {}", b.reads[0])));
        // Short file.
        f.set_len(b.bytes - 1).unwrap();
        assert!(b.read(&p, &|| false).unwrap_err().contains("read 3145727 bytes"));
        assert_eq!(b.write(&p, &|| true).unwrap_err(), "interrupted");
    }
}
