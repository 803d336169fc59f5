//! The allocator's own statistics for the memory rows of `--case scale`: a wrapper of the
//! global allocator that counts, per thread, the bytes it hands out and takes back.
//!
//! The `uvfs` binary installs it around mimalloc. The counters are thread-local (a plain
//! add, no shared write), so what a thread allocated minus what it freed is exact for
//! work done on one thread, which is how the scale cases measure: uvfs frees what it
//! retires on the thread that retires it. Without the wrapper installed (a test binary),
//! [`installed`] is false and the memory rows say so instead of guessing.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

thread_local! {
    /// Bytes allocated minus bytes freed by this thread (may go negative when it frees what
    /// another thread allocated).
    static LIVE: Cell<i64> = const { Cell::new(0) };
    /// Allocations made by this thread.
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

/// Set by the first allocation through a [`Counting`] allocator.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// A global allocator that counts what it hands out, per thread, around `A`.
pub struct Counting<A>(pub A);

// SAFETY: every method forwards to `A` with the caller's arguments; the bookkeeping
// touches only const-initialized thread-locals (it never allocates) and tolerates their
// absence during thread teardown (`try_with`).
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { self.0.alloc(l) };
        if !p.is_null() {
            note(l.size() as i64, 1);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as ours.
        let p = unsafe { self.0.alloc_zeroed(l) };
        if !p.is_null() {
            note(l.size() as i64, 1);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { self.0.dealloc(p, l) };
        note(-(l.size() as i64), 0);
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        // SAFETY: same contract as ours.
        let q = unsafe { self.0.realloc(p, l, n) };
        if !q.is_null() {
            note(n as i64 - l.size() as i64, 1);
        }
        q
    }
}

#[inline]
fn note(bytes: i64, count: u64) {
    let _ = LIVE.try_with(|c| c.set(c.get() + bytes));
    let _ = COUNT.try_with(|c| c.set(c.get() + count));
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

/// Whether the global allocator counts (the `uvfs` binary's does).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// Bytes this thread allocated minus what it freed, so far.
pub fn live_bytes() -> i64 {
    LIVE.with(|c| c.get())
}

/// Allocations this thread made, so far.
pub fn allocations() -> u64 {
    COUNT.with(|c| c.get())
}

/// The process's resident set size in bytes (`/proc/self/statm`), 0 if unreadable.
pub fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|x| x.parse::<u64>().ok()))
        .unwrap_or(0);
    pages * 4096
}

/// The kernel's slab memory (`Slab:` of `/proc/meminfo`) in bytes: where a tmpfs file's
/// dentry and inode live.
pub fn kernel_slab_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Slab:"))
                .and_then(|v| v.split_whitespace().next().and_then(|x| x.parse::<u64>().ok()))
        })
        .unwrap_or(0)
        * 1024
}
