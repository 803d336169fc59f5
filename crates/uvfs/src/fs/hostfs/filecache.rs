//! The host descriptors a hostfs instance keeps open, bounded. The role of the NFS
//! server's open-file cache (Linux's `fs/nfsd/filecache.c`: an LRU of open `struct file`s
//! with a bound, reopened on a miss).
//!
//! Every descriptor hostfs keeps beyond one call (a directory's, a regular file's I/O
//! descriptor) lives in a [`Slot`] of its inode. A slot is read without a lock (an
//! [`ArcSwapOption`]: a load takes neither a lock nor, usually, a reference count) and
//! the caller holds what it loaded ([`HostFd`]) for the length of its call, so a
//! descriptor closed by the cache meanwhile stays open until that call is done. A slot
//! found empty is filled by its owner (reopened by name, see `hostfs`), under the slot's
//! lock, which serializes the fillers and the cache's evictions of that slot.
//!
//! **The bound.** [`FileCache`] counts the descriptors in slots (`held`). Once that count
//! passes the limit, the least recently used unpinned descriptors are closed (a clock: a
//! queue of slots, oldest first, each with a bit set on use that buys a second pass).
//! A slot is *pinned* while uvfs has the file open (`FileSystem::open` .. `release`):
//! its descriptor is what keeps the file's data reachable when its name goes, so the
//! cache never closes it; pinned descriptors count towards the limit (they leave less
//! room for the others) but are not in the queue. A slot that is never queued (a
//! filesystem's root, an unnamed `O_TMPFILE` file until its name is given) is not closed
//! either. Past the limit, what stays open is: pinned and never-queued slots, and the
//! descriptors calls in progress hold (a few per call).
//!
//! Lock order: a slot's lock, then its parent directory's slot lock (a reopen goes up),
//! then the queue's lock; the cache only *tries* a slot's lock under the queue's lock,
//! and passes over a slot that is busy.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use arc_swap::ArcSwapOption;

use crate::abi::errno::Result;
use crate::sync::Mutex;

/// A host descriptor loaded from a slot, held for the length of a call: the descriptor
/// stays open while this exists, even if the cache closes the slot's meanwhile.
pub(super) struct HostFd(arc_swap::Guard<Option<Arc<OwnedFd>>>);

impl HostFd {
    fn new(fd: Arc<OwnedFd>) -> HostFd {
        HostFd(arc_swap::Guard::from_inner(Some(fd)))
    }
}

impl AsFd for HostFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &*self.0 {
            Some(fd) => fd.as_fd(),
            // Only made from a loaded `Some` (`Slot::get`) or from a descriptor (`new`).
            None => unreachable!("HostFd without a descriptor"),
        }
    }
}

/// The descriptors of one hostfs instance.
pub(super) struct FileCache {
    /// Immutable: descriptors held in slots (pinned ones included) past which unpinned
    /// ones are closed, least recently used first.
    limit: usize,
    /// Atomic: descriptors held in slots; changed under the slot's lock.
    held: AtomicUsize,
    /// The clock's queue.
    lru: Mutex<Lru>,
}

/// The clock's queue of slots. A slot is in it at most once (`Slot::queued`); it may also
/// hold entries that went stale (the slot was dropped, emptied or pinned since): they
/// are dropped when met.
struct Lru {
    /// Oldest first.
    queue: VecDeque<Weak<Slot>>,
    /// The length at which dropped slots' entries are swept out (twice the length after
    /// the last sweep, so a sweep's cost is paid by the pushes before it).
    sweep_at: usize,
}

/// Room the queue is given over its last sweep before the next.
const SWEEP_SLACK: usize = 64;

impl FileCache {
    /// A cache that keeps at most `limit` descriptors (at least 1) beyond the pinned ones.
    pub(super) fn new(limit: usize) -> Arc<FileCache> {
        Arc::new(FileCache {
            limit: limit.max(1),
            held: AtomicUsize::new(0),
            lru: Mutex::new(Lru { queue: VecDeque::new(), sweep_at: SWEEP_SLACK }),
        })
    }

    /// The limit.
    pub(super) fn limit(&self) -> usize {
        self.limit
    }

    /// Puts `slot` (which holds an unpinned descriptor) in the queue, and closes the
    /// least recently used descriptors while over the limit.
    fn admit(&self, slot: &Arc<Slot>) {
        if slot.fixed {
            return;
        }
        let mut victims = Vec::new();
        {
            let mut lru = self.lru.lock();
            if !slot.queued.swap(true, Ordering::Relaxed) {
                lru.queue.push_back(Arc::downgrade(slot));
            }
            if lru.queue.len() > lru.sweep_at {
                lru.queue.retain(|w| w.strong_count() > 0);
                lru.sweep_at = 2 * lru.queue.len() + SWEEP_SLACK;
            }
            // Twice round the clock at most: the first pass may only clear use bits.
            let mut budget = 2 * lru.queue.len();
            while self.held.load(Ordering::Relaxed) > self.limit && budget > 0 {
                budget -= 1;
                let Some(w) = lru.queue.pop_front() else { break };
                // A dropped slot gave its count back when it was dropped.
                let Some(s) = w.upgrade() else { continue };
                if s.referenced.swap(false, Ordering::Relaxed) {
                    lru.queue.push_back(w);
                    continue;
                }
                // Busy (being filled or pinned): its turn comes again.
                let Some(state) = s.state.try_lock() else {
                    lru.queue.push_back(w);
                    continue;
                };
                s.queued.store(false, Ordering::Relaxed);
                if state.pins == 0
                    && let Some(fd) = s.fd.swap(None)
                {
                    self.held.fetch_sub(1, Ordering::Relaxed);
                    victims.push(fd);
                }
                drop(state);
                // (The slot may be dropped here if its inode went meanwhile: its count was
                // given back above, or by its own drop when it held nothing.)
                drop(s);
            }
        }
        // Closed outside the lock (a descriptor a call still holds closes with the call).
        drop(victims);
    }
}

/// One cached host descriptor: of an inode, or of a directory listing read to its end
/// (`EndStreams`).
pub(super) struct Slot {
    /// The descriptor, if open: read without a lock, written under `state`.
    fd: ArcSwapOption<OwnedFd>,
    /// Serializes filling, pinning and emptying `fd` (and `held`'s count of it).
    state: Mutex<SlotState>,
    /// Atomic: used since the clock last passed (the second-chance bit).
    referenced: AtomicBool,
    /// Atomic, changed under the queue's lock: in the queue.
    queued: AtomicBool,
    /// Immutable: never closed by the cache (a filesystem's root).
    fixed: bool,
    /// Immutable: the cache it counts in.
    cache: Arc<FileCache>,
}

/// What `Slot::state` protects besides `fd`.
struct SlotState {
    /// uvfs opens of the file: while non-zero, `fd` is not closed by the cache.
    pins: u32,
}

impl Slot {
    /// An empty slot counted in `cache`.
    pub(super) fn new(cache: &Arc<FileCache>) -> Arc<Slot> {
        Arc::new(Slot {
            fd: ArcSwapOption::empty(),
            state: Mutex::new(SlotState { pins: 0 }),
            referenced: AtomicBool::new(false),
            queued: AtomicBool::new(false),
            fixed: false,
            cache: cache.clone(),
        })
    }

    /// A slot holding `fd` for its life, never closed by the cache (a filesystem's root;
    /// not counted in `held`).
    pub(super) fn fixed(cache: &Arc<FileCache>, fd: OwnedFd) -> Arc<Slot> {
        Arc::new(Slot {
            fd: ArcSwapOption::from_pointee(fd),
            state: Mutex::new(SlotState { pins: 0 }),
            referenced: AtomicBool::new(false),
            queued: AtomicBool::new(false),
            fixed: true,
            cache: cache.clone(),
        })
    }

    /// The descriptor if open (no lock; marks it used).
    #[inline]
    pub(super) fn get(&self) -> Option<HostFd> {
        let g = self.fd.load();
        g.is_some().then(|| {
            // Only written when clear: the bit's cache line is not bounced by every use.
            if !self.referenced.load(Ordering::Relaxed) {
                self.referenced.store(true, Ordering::Relaxed);
            }
            HostFd(g)
        })
    }

    /// The descriptor, opened with `open` if the slot is empty (once, whoever races).
    /// `open` runs under the slot's lock and may fill other slots up the tree.
    pub(super) fn get_or_open(self: &Arc<Self>, open: impl FnOnce() -> Result<OwnedFd>) -> Result<HostFd> {
        if let Some(fd) = self.get() {
            return Ok(fd);
        }
        let state = self.state.lock();
        if let Some(fd) = self.get() {
            return Ok(fd);
        }
        let fd = Arc::new(open()?);
        self.fd.store(Some(fd.clone()));
        self.cache.held.fetch_add(1, Ordering::Relaxed);
        // In use now: it goes round the clock once before it may be closed.
        self.referenced.store(true, Ordering::Relaxed);
        let pinned = state.pins > 0;
        drop(state);
        if !pinned {
            self.cache.admit(self);
        }
        Ok(HostFd::new(fd))
    }

    /// Fills the empty slot with `fd`, a descriptor just made (a create). `queue`: the
    /// cache may close it (it can be reopened by name).
    pub(super) fn fill(self: &Arc<Self>, fd: OwnedFd, queue: bool) {
        let state = self.state.lock();
        if self.fd.load().is_some() {
            return;
        }
        self.fd.store(Some(Arc::new(fd)));
        self.cache.held.fetch_add(1, Ordering::Relaxed);
        self.referenced.store(true, Ordering::Relaxed);
        let pinned = state.pins > 0;
        drop(state);
        if queue && !pinned {
            self.cache.admit(self);
        }
    }

    /// Pins the descriptor (a uvfs open), opening it with `open` if the slot is empty.
    pub(super) fn pin(self: &Arc<Self>, open: impl FnOnce() -> Result<OwnedFd>) -> Result<()> {
        let mut state = self.state.lock();
        if self.fd.load().is_none() {
            self.fd.store(Some(Arc::new(open()?)));
            self.cache.held.fetch_add(1, Ordering::Relaxed);
        }
        state.pins += 1;
        Ok(())
    }

    /// Unpins (a uvfs open released). At the last, the descriptor is left to the cache
    /// if `keep` says so (the file can still be reopened by a name), else closed now.
    pub(super) fn unpin(self: &Arc<Self>, keep: impl FnOnce(&OwnedFd) -> bool) {
        let mut state = self.state.lock();
        state.pins = state.pins.saturating_sub(1);
        if state.pins > 0 || self.fixed {
            return;
        }
        let Some(fd) = self.fd.load_full() else { return };
        if !keep(&fd) {
            drop(fd);
            let fd = self.take(&state);
            drop(state);
            drop(fd);
            return;
        }
        drop(state);
        self.cache.admit(self);
    }

    /// Closes the descriptor unless pinned (the file lost its last name: nothing may
    /// keep its data but uvfs's opens).
    pub(super) fn close_unless_pinned(&self) {
        let state = self.state.lock();
        if state.pins == 0 && !self.fixed {
            let fd = self.take(&state);
            drop(state);
            drop(fd);
        }
    }

    /// Empties the slot (caller holds its lock), giving back its count.
    fn take(&self, _state: &SlotState) -> Option<Arc<OwnedFd>> {
        let fd = self.fd.swap(None);
        if fd.is_some() {
            self.cache.held.fetch_sub(1, Ordering::Relaxed);
        }
        fd
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.fixed && self.fd.load().is_some() {
            self.cache.held.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
