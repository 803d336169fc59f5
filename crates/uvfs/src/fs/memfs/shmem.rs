//! Where the bytes of memfs's pages live: pages of one shmem file of the process (a
//! `memfd`), as tmpfs's pages are pages of the kernel's page cache.
//!
//! Why not the heap: the first touch of fresh anonymous memory is a page fault, and the
//! kernel zeroes the page (`clear_page`) before memfs overwrites it whole. Behind a 1 GiB
//! write through `uvfs mount`, 70 % of the server's CPU time was that zeroing (see
//! BENCHMARKS.md, "memfs pages in a shmem file"). A `write(2)` into a shmem file allocates
//! its page without zeroing what it overwrites whole (`shmem_write_begin`), as tmpfs does
//! for a `write` to it. So the new pages of a big write ([`SHMEM_MIN_PAGES`] or more) are
//! written with `pwritev` into the file, consecutive slots with one call; a smaller
//! write's are heap boxes, where freed memory is reused without a system call. A read from
//! consecutive slots is one `pread` ([`read_slots`]); a write into a page that exists and
//! is not shared goes through one shared mapping of the whole file, without a system call.
//!
//! The file is a sparse array of 4 KiB slots, one per page ([`Page::Slot`]), reserved once
//! ([`RESERVE`] of address space, `MAP_NORESERVE`: nothing is used until written). A freed
//! slot is reused first (it still holds its memory: the next `pwrite` overwrites it); when
//! twice [`FREE_KEPT`] slots are free, all but the newest [`FREE_KEPT`] are given back to
//! the system (`fallocate(PUNCH_HOLE)`, by runs of consecutive slots), so memory returns
//! after a churn as it does from the heap.
//!
//! Under Miri, and where the file or its mapping cannot be made (a seccomp filter, an
//! address-space limit), every page is a heap box ([`Page::Heap`]).
//!
//! Soundness of the shared mapping: a slot's bytes are read only through a [`Page`] the
//! reader holds, and written in place only through `&mut Page` (an `Arc` nobody else
//! holds, under the file's page lock); a slot is written by `pwrite` only before its
//! `Page` exists, and reused only after its `Page` was dropped. So no slot is read while
//! it is written, and none is used by two pages at once.
//!
//! A forked child shares the file with its parent, where the heap would have been copied:
//! its copies of the parent's pages name the same slots, and its slot allocator is a copy
//! of the parent's. So a process that finds itself a forked child (a word the kernel
//! zeroes in the child, `MADV_WIPEONFORK`) neither writes a slot nor frees one (a punched
//! hole would be the parent's data lost): a write into a page it holds copies the page to
//! the heap first, and its new pages are heap boxes. What it reads of the parent's slots
//! follows what the parent writes there later; a child should exec or exit, as with any
//! multithreaded library, but it cannot harm the parent's files.

use std::os::fd::OwnedFd;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::abi::errno::{Errno, Result};
use crate::sync::Mutex;

/// Size of a page.
pub(super) const PAGE: usize = 4096;

/// Address space reserved for the file's mapping: 1 TiB, 2^28 slots (a `u32` each).
const RESERVE: usize = 1 << 40;

/// The fewest new pages a write puts in the shmem file by default
/// ([`SmallWritePages::Heap`](super::SmallWritePages)); fewer go to the heap. Each later
/// read of a page in the file is a `pread` where the heap's is a copy from memory, and a
/// `pwritev` costs a system call where the heap reuses freed memory without one; a 1 GiB
/// write took half the time with its 128 KiB writes in the file (BENCHMARKS.md). A FUSE
/// server, whose reads are round trips anyway, puts every page there (`Shmem`).
const SHMEM_MIN_PAGES: usize = 16;

/// Free slots kept with their memory for reuse (32 MiB); when twice as many are free, the
/// oldest beyond this many are punched out.
const FREE_KEPT: usize = 8192;

/// The bytes of one page (the value behind memfs's `Arc`, which shares it copy-on-write).
pub(super) enum Page {
    /// A slot of the shmem file.
    Slot(u32),
    /// A heap box: a page of a small write (by default), of a forked child, or any page
    /// where there is no shmem file.
    Heap(Box<[u8; PAGE]>),
}

/// The shmem file and its mapping.
struct Shmem {
    /// Immutable: the memfd.
    fd: OwnedFd,
    /// Immutable: the start of the shared mapping of the file's [`RESERVE`] bytes.
    base: *mut u8,
    /// Immutable pointer to an atomic byte: 1, on a private page the kernel zeroes in a
    /// forked child (`MADV_WIPEONFORK`): 0 there.
    parent: *const AtomicU8,
    /// The slot allocator (a leaf lock, held for list operations only).
    slots: Mutex<Slots>,
}

// SAFETY: `base` is a shared mapping this value owns (unmapped when it drops; the
// process's own never does), and the slots it covers are handed out under the mutex; see
// the module docs for why reads and writes through it do not race.
unsafe impl Send for Shmem {}
// SAFETY: as above.
unsafe impl Sync for Shmem {}

impl Drop for Shmem {
    fn drop(&mut self) {
        // SAFETY: the mappings made in `new`, of these sizes; no `Page` refers to this
        // instance once it is dropped (the process's own is never dropped).
        unsafe {
            let _ = rustix::mm::munmap(self.base.cast(), RESERVE);
            let _ = rustix::mm::munmap(self.parent.cast_mut().cast(), PAGE);
        }
    }
}

/// Free slots and the end of the used part.
struct Slots {
    /// Slots never handed out start here.
    next: u32,
    /// Freed slots that still hold memory, oldest first.
    kept: Vec<u32>,
    /// Freed slots whose memory was given back.
    punched: Vec<u32>,
}

impl Shmem {
    fn new() -> Option<Shmem> {
        use rustix::fs::{MemfdFlags, ftruncate, memfd_create};
        use rustix::mm::{Advice, MapFlags, ProtFlags, madvise, mmap};
        let fd = memfd_create("uvfs-memfs", MemfdFlags::CLOEXEC).ok()?;
        ftruncate(&fd, RESERVE as u64).ok()?;
        // SAFETY: a new shared mapping of our own file, placed by the kernel (no address
        // given), so it overlaps nothing of ours.
        let base = unsafe {
            mmap(
                std::ptr::null_mut(),
                RESERVE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::NORESERVE,
                &fd,
                0,
            )
        }
        .ok()?;
        // The mapping stays in a forked child (fork copies no page tables of a shared
        // file mapping; they fault in), so what a child reads through it is mapped.
        // SAFETY: a new private anonymous page, placed by the kernel.
        let page = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                PAGE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        };
        // SAFETY: the range is the page just made.
        let wiped = page.and_then(|p| unsafe { madvise(p, PAGE, Advice::LinuxWipeOnFork) }.map(|()| p));
        let Ok(page) = wiped else {
            // Without fork detection a child could punch out its parent's pages: no file.
            // SAFETY: the mappings made above, used by nothing yet.
            unsafe {
                if let Ok(p) = page {
                    let _ = rustix::mm::munmap(p, PAGE);
                }
                let _ = rustix::mm::munmap(base, RESERVE);
            }
            return None;
        };
        let parent = page.cast::<AtomicU8>();
        // SAFETY: the page is ours, writable, and an `AtomicU8` has no alignment need.
        unsafe { (*parent).store(1, Ordering::Relaxed) };
        Some(Shmem {
            fd,
            base: base.cast(),
            parent,
            slots: Mutex::new(Slots { next: 0, kept: Vec::new(), punched: Vec::new() }),
        })
    }

    /// Whether this process is a child forked after the file was made (see the module
    /// docs): it must neither write nor free a slot.
    fn forked(&self) -> bool {
        // SAFETY: the page `new` made, mapped as long as `self` lives (in a child too).
        unsafe { (*self.parent).load(Ordering::Relaxed) == 0 }
    }

    /// `n` free slots, ascending (so that consecutive pages often get consecutive slots,
    /// written with one call). ENOSPC when the reservation is used up.
    fn alloc(&self, n: usize) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(n);
        let mut s = self.slots.lock();
        while out.len() < n {
            let slot = match s.kept.pop().or_else(|| s.punched.pop()) {
                Some(slot) => slot,
                None if (s.next as usize) < RESERVE / PAGE => {
                    s.next += 1;
                    s.next - 1
                }
                None => {
                    s.kept.extend(out);
                    return Err(Errno::ENOSPC);
                }
            };
            out.push(slot);
        }
        drop(s);
        out.sort_unstable();
        Ok(out)
    }

    fn free(&self, slot: u32) {
        let mut s = self.slots.lock();
        s.kept.push(slot);
        if s.kept.len() < 2 * FREE_KEPT {
            return;
        }
        let surplus = s.kept.len() - FREE_KEPT;
        let mut old: Vec<u32> = s.kept.drain(..surplus).collect();
        drop(s);
        // Out of both lists while punched: nobody can take them meanwhile.
        old.sort_unstable();
        for run in old.chunk_by(|a, b| b - a == 1) {
            // Best effort: a slot that keeps its memory is still a free slot.
            let _ = rustix::fs::fallocate(
                &self.fd,
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                u64::from(run[0]) * PAGE as u64,
                (run.len() * PAGE) as u64,
            );
        }
        self.slots.lock().punched.extend(old);
    }

    /// Writes the pages of `parts` (each a whole number of pages, in order) into `slots`
    /// (ascending, one per page): consecutive slots with one `pwritev`.
    fn fill(&self, slots: &[u32], parts: &[&[u8]]) -> Result<()> {
        // (part, page within it) of each page, in order.
        let mut pages = parts.iter().enumerate().flat_map(|(i, p)| (0..p.len() / PAGE).map(move |k| (i, k)));
        let mut iov: Vec<std::io::IoSlice<'_>> = Vec::new();
        for run in slots.chunk_by(|a, b| b - a == 1) {
            // The run's pages, a slice per stretch of one part: (part, first page, end).
            iov.clear();
            let mut stretch: Option<(usize, usize, usize)> = None;
            for (i, k) in pages.by_ref().take(run.len()) {
                stretch = match stretch {
                    Some((si, a, b)) if si == i && b == k => Some((si, a, b + 1)),
                    Some((si, a, b)) => {
                        iov.push(std::io::IoSlice::new(&parts[si][a * PAGE..b * PAGE]));
                        Some((i, k, k + 1))
                    }
                    None => Some((i, k, k + 1)),
                };
            }
            if let Some((si, a, b)) = stretch {
                iov.push(std::io::IoSlice::new(&parts[si][a * PAGE..b * PAGE]));
            }
            self.pwritev_all(&mut iov, u64::from(run[0]) * PAGE as u64)?;
        }
        Ok(())
    }

    /// `pwritev` of all of `iov` at `off`, in calls of at most `IOV_MAX` slices.
    fn pwritev_all(&self, mut iov: &mut [std::io::IoSlice<'_>], mut off: u64) -> Result<()> {
        const IOV_MAX: usize = 1024;
        while !iov.is_empty() {
            let n = iov.len().min(IOV_MAX);
            match rustix::io::pwritev(&self.fd, &iov[..n], off) {
                Ok(w) => {
                    off += w as u64;
                    std::io::IoSlice::advance_slices(&mut iov, w);
                }
                Err(rustix::io::Errno::INTR) => {}
                // Out of memory (or of the memory cgroup's share) for the page cache.
                Err(_) => return Err(Errno::ENOSPC),
            }
        }
        Ok(())
    }

    /// The bytes of `slot`.
    fn at(&self, slot: u32) -> *mut u8 {
        // SAFETY: slots are below RESERVE / PAGE (`alloc`), so the offset is inside the
        // mapping.
        unsafe { self.base.add(slot as usize * PAGE) }
    }
}

/// Copies into `buf` the bytes from `at` in slot `first` on, through the slots after it:
/// pages the caller holds (so nobody writes them), which follow each other in a file.
///
/// With one `pread`, not through the mapping: a page first read through the mapping costs
/// a fault (that maps 16 pages around it), which took half of the server's CPU time in a
/// 1 GiB read through the mount, and more than a `pread` in 4 KiB random reads; a `pread`
/// copies from the page cache without mapping anything.
pub(super) fn read_slots(first: u32, at: usize, buf: &mut [u8]) {
    let s = shmem().expect("a slot comes from the shmem file");
    let off = first as usize * PAGE + at;
    assert!(at < PAGE && off + buf.len() <= RESERVE);
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(&s.fd, &mut buf[done..], (off + done) as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    let rest = &mut buf[done..];
    // What a `pread` did not copy (it cannot fail on pages that exist): through the
    // mapping. SAFETY: the range is inside the mapping (asserted) and in the caller's
    // pages, which nobody writes while they are held (see the module docs); `buf` is ours.
    unsafe { std::ptr::copy_nonoverlapping(s.base.add(off + done), rest.as_mut_ptr(), rest.len()) }
}

/// The process's shmem file, made at the first use; `None` where it cannot be.
fn shmem() -> Option<&'static Shmem> {
    static SHMEM: OnceLock<Option<Shmem>> = OnceLock::new();
    SHMEM.get_or_init(|| if cfg!(miri) { None } else { Shmem::new() }).as_ref()
}

impl Page {
    /// Pages holding the bytes of `parts` (each a whole number of pages), in order. New
    /// pages of one write are made with one call, so that they get consecutive slots,
    /// written with as few system calls.
    pub(super) fn new_pages(parts: &[&[u8]], small: super::SmallWritePages) -> Result<Vec<Page>> {
        debug_assert!(parts.iter().all(|p| p.len().is_multiple_of(PAGE)));
        let n = parts.iter().map(|p| p.len() / PAGE).sum();
        if n == 0 {
            return Ok(Vec::new());
        }
        let min = if small == super::SmallWritePages::Shmem { 1 } else { SHMEM_MIN_PAGES };
        let (pages, in_file) = match shmem().filter(|s| n >= min && !s.forked()) {
            Some(s) => {
                let slots = s.alloc(n)?;
                // Pages first: a failed fill frees the slots with them.
                let pages: Vec<Page> = slots.iter().map(|&slot| Page::Slot(slot)).collect();
                s.fill(&slots, parts)?;
                (pages, n)
            }
            None => {
                let heap = parts.iter().flat_map(|p| p.chunks_exact(PAGE));
                (heap.map(|c| Page::Heap(Box::new(c.try_into().expect("a whole page")))).collect(), 0)
            }
        };
        crate::sync::counters::bump(|c| {
            c.data_pages_made += n as u64;
            c.data_pages_in_shmem += in_file as u64;
        });
        Ok(pages)
    }

    /// The image of a page that holds what `old` holds (zeros without it), with `bytes`
    /// at `at`: what [`Page::new_pages`] makes a patched copy of a page from.
    pub(super) fn image(old: Option<&Page>, at: usize, bytes: &[u8]) -> [u8; PAGE] {
        let mut image = [0u8; PAGE];
        if let Some(old) = old {
            old.read(0, &mut image[..]);
        }
        image[at..at + bytes.len()].copy_from_slice(bytes);
        image
    }

    /// Copies the bytes at `at` into `buf`.
    pub(super) fn read(&self, at: usize, buf: &mut [u8]) {
        assert!(at + buf.len() <= PAGE);
        match self {
            Page::Heap(b) => buf.copy_from_slice(&b[at..at + buf.len()]),
            Page::Slot(slot) => read_slots(*slot, at, buf),
        }
    }

    /// The page's slot in the shmem file, if it is one.
    pub(super) fn slot(&self) -> Option<u32> {
        match self {
            Page::Slot(slot) => Some(*slot),
            Page::Heap(_) => None,
        }
    }

    /// Writes `bytes` at `at`, in place: the caller holds the only reference.
    pub(super) fn write(&mut self, at: usize, bytes: &[u8]) {
        assert!(at + bytes.len() <= PAGE);
        match self {
            Page::Heap(b) => b[at..at + bytes.len()].copy_from_slice(bytes),
            Page::Slot(slot) => {
                let s = shmem().expect("a slot comes from the shmem file");
                if s.forked() {
                    // The slot is the parent's too: the child's copy of the page moves to
                    // the heap (dropping the slot page frees nothing in a child).
                    let mut b = Box::new([0u8; PAGE]);
                    read_slots(*slot, 0, &mut b[..]);
                    b[at..at + bytes.len()].copy_from_slice(bytes);
                    *self = Page::Heap(b);
                    return;
                }
                // SAFETY: the range is inside the slot (asserted), which `&mut self`
                // makes ours alone; `bytes` is not in the mapping's slots we write.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), s.at(*slot).add(at), bytes.len()) }
            }
        }
    }

    /// The one page of zeros that copies of holes share (never written: shared), a heap
    /// box (one page: no system call to make it, and not counted as a page made).
    pub(super) fn zeros() -> &'static std::sync::Arc<Page> {
        static ZEROS: OnceLock<std::sync::Arc<Page>> = OnceLock::new();
        ZEROS.get_or_init(|| std::sync::Arc::new(Page::Heap(Box::new([0u8; PAGE]))))
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        if let Page::Slot(slot) = self
            && let Some(s) = shmem()
            && !s.forked()
        {
            s.free(*slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_hold_what_was_written() {
        let n = SHMEM_MIN_PAGES + 4;
        let mut bytes = vec![0u8; n * PAGE];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i / PAGE + 1) as u8;
        }
        let mut pages = Page::new_pages(&[&bytes[..PAGE], &bytes[PAGE..]], crate::SmallWritePages::Heap).unwrap();
        assert_eq!(pages.len(), n);
        assert!(pages.iter().all(|p| matches!(p, Page::Slot(_)) == shmem().is_some()), "a big write's pages");
        let mut buf = [0u8; 8];
        for (i, p) in pages.iter().enumerate() {
            p.read(PAGE - 8, &mut buf);
            assert_eq!(buf, [i as u8 + 1; 8]);
        }
        pages[1].write(4, b"abcd");
        pages[1].read(0, &mut buf);
        assert_eq!(&buf, &[2, 2, 2, 2, b'a', b'b', b'c', b'd']);
        let patched = |old: Option<&Page>, at, bytes| {
            Page::new_pages(&[&Page::image(old, at, bytes)], crate::SmallWritePages::Heap).unwrap().remove(0)
        };
        let p = patched(Some(&pages[1]), 0, b"xy");
        p.read(0, &mut buf);
        assert_eq!(&buf, &[b'x', b'y', 2, 2, b'a', b'b', b'c', b'd']);
        assert!(matches!(p, Page::Heap(_)), "a single page is the heap's");
        let z = patched(None, 100, b"q");
        let mut whole = [1u8; PAGE];
        z.read(0, &mut whole);
        assert!(whole.iter().enumerate().all(|(i, &b)| b == if i == 100 { b'q' } else { 0 }));
        let zeros = Page::zeros();
        zeros.read(0, &mut whole);
        assert!(whole.iter().all(|&b| b == 0));
    }

    #[test]
    fn freed_slots_are_reused_then_punched_out() {
        let s = Shmem::new().expect("a memfd and its mapping");
        let a = s.alloc(3).unwrap();
        assert_eq!(a, [0, 1, 2]);
        s.fill(&a, &[&vec![9u8; 3 * PAGE]]).unwrap();
        // SAFETY: slot 1 was just written and nobody else uses this instance.
        assert_eq!(unsafe { *s.at(1).add(17) }, 9);
        s.free(1);
        assert_eq!(s.alloc(2).unwrap(), [1, 3], "the freed slot first, then a new one");
        for slot in [0, 1, 2, 3] {
            s.free(slot);
        }
        let all = s.alloc(2 * FREE_KEPT).unwrap();
        assert_eq!(all, (0..2 * FREE_KEPT as u32).collect::<Vec<_>>());
        for slot in all {
            s.free(slot);
        }
        let g = s.slots.lock();
        assert_eq!(g.kept.len(), FREE_KEPT);
        assert_eq!(g.punched.len(), FREE_KEPT);
        assert!(g.punched.contains(&0) && g.kept.contains(&(2 * FREE_KEPT as u32 - 1)), "the oldest go");
        drop(g);
        // A punched slot reads as zeros again.
        // SAFETY: as above; slot 0 is free and nobody else uses this instance.
        assert_eq!(unsafe { *s.at(0).add(17) }, 0);
    }
}
