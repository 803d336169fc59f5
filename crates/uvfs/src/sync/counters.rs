//! Per-thread event counters, for tests and benchmarks to count what a call did
//! (locks taken, walk fallbacks) without any shared write on the hot path.

use std::cell::Cell;

/// A snapshot of this thread's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Locks of the VFS taken (directory, inode, fd table, mount, rename).
    pub locks: u64,
    /// Walks answered by the lockless tier.
    pub walk_lockless: u64,
    /// Walks that fell back to (or were forced onto) the locked tier.
    pub walk_locked: u64,
    /// Walks redone because a rename overlapped them: lockless attempts retried, and
    /// locked walks redone under the rename lock.
    pub walk_retries: u64,
    /// Symlink bodies fetched from the filesystem instead of the inode cache.
    pub link_fs_reads: u64,
    /// Notify locks taken (mark lists, inotify groups).
    pub notify_locks: u64,
    /// Cached dentries the filesystem's revalidation dropped (a name changed behind the
    /// VFS's back).
    pub dentries_invalidated: u64,
    /// Entries the dentry eviction looked at (evicted or kept).
    pub dcache_scanned: u64,
    /// Hash-table nodes lockless lookups visited (debug builds only; 0 in release).
    pub hash_probes: u64,
    /// Walks the path cache answered (counted in `walk_lockless` too).
    pub path_cache_hits: u64,
    /// Walks whose answer the path cache learned.
    pub path_cache_fills: u64,
    /// Walks to a name to create whose parent the path cache answered (the walk then
    /// looked up the last name only).
    pub path_cache_parent_hits: u64,
    /// Walks to a name to create whose parent the path cache learned.
    pub path_cache_parent_fills: u64,
    /// Pages of memfs file data made: new ones, and copies of shared ones to write.
    pub data_pages_made: u64,
    /// Of `data_pages_made`, those made in the process's shmem file (not the heap).
    pub data_pages_in_shmem: u64,
    /// Host directory streams hostfs's `readdir` opened (a call that continues a stream
    /// kept at its directory's end opens none).
    pub host_dir_streams_opened: u64,
    /// Guards pinned on a reclamation domain (debug builds only; 0 in release): each one's
    /// release is an atomic swap, so the hot paths pin only where they read something
    /// the collector protects.
    pub guard_pins: u64,
    /// Lookups of a name in a directory's table (`core/dhash.rs`; debug builds
    /// only, 0 in release): one per array probed, however many slots it compared.
    pub dir_lookups: u64,
    /// Fine-grained timestamps taken (Linux's `mg_fine_stamps`): changes that had to be
    /// told apart from a change time a `stat` reported; the rest read the coarse clock.
    pub fine_stamps: u64,
    /// Names the dentry cache did not hold and asked the filesystem for (its `lookup`).
    pub fs_lookups: u64,
}

thread_local! {
    static COUNTERS: Cell<Counters> = const { Cell::new(Counters {
        locks: 0, walk_lockless: 0, walk_locked: 0, walk_retries: 0, link_fs_reads: 0, notify_locks: 0,
        dentries_invalidated: 0, dcache_scanned: 0, hash_probes: 0, path_cache_hits: 0, path_cache_fills: 0,
        path_cache_parent_hits: 0, path_cache_parent_fills: 0,
        data_pages_made: 0, data_pages_in_shmem: 0, host_dir_streams_opened: 0, guard_pins: 0, dir_lookups: 0,
        fine_stamps: 0, fs_lookups: 0,
    }) };
}

/// This thread's counters so far.
pub fn counters() -> Counters {
    COUNTERS.with(|c| c.get())
}

#[inline]
pub(crate) fn bump(f: impl FnOnce(&mut Counters)) {
    COUNTERS.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    });
}
