//! The locks of the VFS: `parking_lot` locks that count their acquisitions per thread,
//! so tests can assert that a fast path took none (`counters::counters().locks`), and that
//! check the lock order in debug builds.
//!
//! # Lock order
//! Every lock has a rank, part of its type (`rank`; the default is `rank::LEAF`). A
//! thread may take a lock only if it holds none of a higher rank; locks of one rank nest
//! only as their rank's documentation says (directories: ancestor first). Debug builds
//! (the test suite) keep the ranks a thread holds and panic on an acquisition out of
//! order, naming both ranks; release builds keep nothing. A `try_*` acquisition cannot
//! deadlock and is not checked, but counts as held for what is taken under it.
//!
//! Destructors that the collector runs when a batch of retired objects is reclaimed run
//! on whichever thread retired the last of the batch, under whatever locks it holds; they
//! take only their own objects' locks, which nothing waits on while holding the retiring
//! thread's locks, so they are checked as a context of their own
//! (`in_reclaim_context`).

use crate::sync::counters;

/// Lock ranks, lowest first: a lock may be taken while holding only locks of lower (or,
/// where stated, equal) rank.
pub(crate) mod rank {
    /// `VfsInner::rename_lock`: renames and mount changes (the mount tree).
    pub const RENAME: u8 = 1;
    /// `File::pos`: the file position (Linux's `f_pos_lock`, taken before the inode's
    /// locks: `read`, `write`, `getdents`).
    pub const FILE_POS: u8 = 2;
    /// A directory's lock (`Dir::lock`, Linux's directory `i_rwsem`). Nests: parent
    /// before child, and the two parents of a rename ancestor first (or, unrelated, as
    /// `lock_rename` orders them).
    pub const DIR: u8 = 3;
    /// A file's data: memfs's pages.
    pub const FILE_DATA: u8 = 4;
    /// `Inode::lock`: attribute writers, ACL and xattr changes.
    pub const INODE: u8 = 5;
    /// A filesystem's per-inode metadata under the inode lock: memfs's xattrs and ACLs;
    /// the inode cache's insert lock.
    pub const FS_META: u8 = 6;
    /// An inotify group (its watches and queue): taken before the mark lists of the
    /// objects it watches (Linux's group `mark_mutex`, then a connector's lock).
    pub const NOTIFY_GROUP: u8 = 7;
    /// A notify mark list (an inode's, a mount's, a filesystem's).
    pub const NOTIFY_MARKS: u8 = 8;
    /// An inode's lock context (`core/locks.rs`, Linux's `flc_lock`): taken by the lock
    /// calls and by close, holding nothing else of the VFS.
    pub const FILE_LOCKS: u8 = 9;
    /// The wait-for edges of waiting POSIX lock requests (Linux's `blocked_lock_lock`),
    /// under a lock context.
    pub const BLOCKED_LOCKS: u8 = 10;
    /// Taken alone (or last): a descriptor table, a task's `fs_lock`, hostfs's name of a
    /// file, a lock `Interrupt`'s slot.
    pub const LEAF: u8 = 11;

    /// The name of a rank, for the order checker's message.
    #[cfg(debug_assertions)]
    pub(crate) fn name(r: u8) -> &'static str {
        match r {
            RENAME => "rename",
            FILE_POS => "file position",
            DIR => "directory",
            FILE_DATA => "file data",
            INODE => "inode",
            FS_META => "filesystem metadata",
            NOTIFY_MARKS => "notify marks",
            NOTIFY_GROUP => "notify group",
            FILE_LOCKS => "file locks",
            BLOCKED_LOCKS => "blocked locks",
            LEAF => "leaf",
            _ => "?",
        }
    }
}

/// The debug-build order checker: the ranks this thread holds.
#[cfg(debug_assertions)]
mod order {
    use std::cell::Cell;

    /// Most locks one thread holds at once (a rename holds about eight).
    const MAX: usize = 32;

    thread_local! {
        /// (ranks held, in acquisition order; how many). Const-initialized and fixed in
        /// size: the checker never allocates (the allocation-count tests see no change).
        static HELD: Cell<([u8; MAX], usize)> = const { Cell::new(([0; MAX], 0)) };
    }

    pub(super) fn acquire(r: u8, checked: bool) {
        HELD.with(|h| {
            let (mut ranks, n) = h.get();
            if checked && let Some(&top) = ranks[..n].iter().max() {
                assert!(
                    top <= r,
                    "lock order: taking a {} lock (rank {r}) while holding a {} lock (rank {top})",
                    super::rank::name(r),
                    super::rank::name(top)
                );
            }
            assert!(n < MAX, "more than {MAX} locks held");
            ranks[n] = r;
            h.set((ranks, n + 1));
        });
    }

    pub(super) fn release(r: u8) {
        HELD.with(|h| {
            let (mut ranks, n) = h.get();
            if let Some(i) = ranks[..n].iter().rposition(|&x| x == r) {
                ranks.copy_within(i + 1..n, i);
                h.set((ranks, n - 1));
            }
        });
    }

    pub(super) fn take() -> ([u8; MAX], usize) {
        HELD.with(|h| h.replace(([0; MAX], 0)))
    }

    pub(super) fn restore(saved: ([u8; MAX], usize)) {
        HELD.with(|h| h.set(saved));
    }
}

/// Runs `f` (a reclaimed object's destructor) as a lock-order context of its own.
#[inline]
pub(crate) fn in_reclaim_context<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(debug_assertions)]
    {
        struct Restore(([u8; 32], usize));
        impl Drop for Restore {
            fn drop(&mut self) {
                order::restore(self.0);
            }
        }
        let _saved = Restore(order::take());
        f()
    }
    #[cfg(not(debug_assertions))]
    f()
}

#[inline(always)]
fn acquired(r: u8, checked: bool) {
    counters::bump(|c| c.locks += 1);
    #[cfg(debug_assertions)]
    order::acquire(r, checked);
    let _ = (r, checked);
}

#[inline(always)]
fn released(r: u8) {
    #[cfg(debug_assertions)]
    order::release(r);
    let _ = r;
}

/// A mutex of rank `R` that counts acquisitions.
#[derive(Default, Debug)]
pub struct Mutex<T, const R: u8 = { rank::LEAF }>(parking_lot::Mutex<T>);

impl<T, const R: u8> Mutex<T, R> {
    /// A new unlocked mutex.
    pub const fn new(v: T) -> Self {
        Mutex(parking_lot::const_mutex(v))
    }

    /// Locks, counting the acquisition.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T, R> {
        acquired(R, true);
        MutexGuard(self.0.lock())
    }

    /// Whether some thread holds it (for `debug_assert!`s of preconditions).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.0.is_locked()
    }

    /// Locks if free, counting a success.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T, R>> {
        let g = self.0.try_lock()?;
        acquired(R, false);
        Some(MutexGuard(g))
    }
}

/// A held [`Mutex`].
pub struct MutexGuard<'a, T, const R: u8 = { rank::LEAF }>(parking_lot::MutexGuard<'a, T>);

impl<'a, T, const R: u8> MutexGuard<'a, T, R> {
    /// The `parking_lot` guard, for a `Condvar` wait (which gives the lock back and takes
    /// it again; the rank stays held meanwhile).
    pub(crate) fn parking_lot(&mut self) -> &mut parking_lot::MutexGuard<'a, T> {
        &mut self.0
    }
}

impl<T, const R: u8> Drop for MutexGuard<'_, T, R> {
    #[inline]
    fn drop(&mut self) {
        released(R);
    }
}

impl<T, const R: u8> std::ops::Deref for MutexGuard<'_, T, R> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T, const R: u8> std::ops::DerefMut for MutexGuard<'_, T, R> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

/// A reader-writer lock of rank `R` that counts acquisitions.
#[derive(Default, Debug)]
pub struct RwLock<T, const R: u8 = { rank::LEAF }>(parking_lot::RwLock<T>);

impl<T, const R: u8> RwLock<T, R> {
    /// A new unlocked lock.
    pub const fn new(v: T) -> Self {
        RwLock(parking_lot::const_rwlock(v))
    }

    /// Locks shared, counting the acquisition.
    #[inline]
    pub fn read(&self) -> RwLockReadGuard<'_, T, R> {
        acquired(R, true);
        RwLockReadGuard(self.0.read())
    }

    /// Locks exclusive, counting the acquisition.
    #[inline]
    pub fn write(&self) -> RwLockWriteGuard<'_, T, R> {
        acquired(R, true);
        RwLockWriteGuard(self.0.write())
    }

    /// Whether some thread holds it exclusive (for `debug_assert!`s of preconditions).
    #[inline]
    pub fn is_locked_exclusive(&self) -> bool {
        self.0.is_locked_exclusive()
    }

    /// Locks exclusive if free, counting a success.
    #[inline]
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T, R>> {
        let g = self.0.try_write()?;
        acquired(R, false);
        Some(RwLockWriteGuard(g))
    }
}

/// A [`RwLock`] held shared.
pub struct RwLockReadGuard<'a, T, const R: u8 = { rank::LEAF }>(parking_lot::RwLockReadGuard<'a, T>);

impl<T, const R: u8> Drop for RwLockReadGuard<'_, T, R> {
    #[inline]
    fn drop(&mut self) {
        released(R);
    }
}

impl<T, const R: u8> std::ops::Deref for RwLockReadGuard<'_, T, R> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A [`RwLock`] held exclusive.
pub struct RwLockWriteGuard<'a, T, const R: u8 = { rank::LEAF }>(parking_lot::RwLockWriteGuard<'a, T>);

impl<T, const R: u8> Drop for RwLockWriteGuard<'_, T, R> {
    #[inline]
    fn drop(&mut self) {
        released(R);
    }
}

impl<T, const R: u8> std::ops::Deref for RwLockWriteGuard<'_, T, R> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T, const R: u8> std::ops::DerefMut for RwLockWriteGuard<'_, T, R> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use super::*;

    #[test]
    fn in_order_and_nested_equal_ranks_pass() {
        let a: Mutex<(), { rank::RENAME }> = Mutex::new(());
        let d1: RwLock<(), { rank::DIR }> = RwLock::new(());
        let d2: RwLock<(), { rank::DIR }> = RwLock::new(());
        let i: Mutex<(), { rank::INODE }> = Mutex::new(());
        let _a = a.lock();
        let _d1 = d1.write();
        let _d2 = d2.read();
        let _i = i.lock();
    }

    #[test]
    #[should_panic(expected = "lock order: taking a directory lock (rank 3) while holding a inode lock (rank 5)")]
    fn out_of_order_panics() {
        let i: Mutex<(), { rank::INODE }> = Mutex::new(());
        let d: RwLock<(), { rank::DIR }> = RwLock::new(());
        let _i = i.lock();
        let _d = d.write();
    }

    #[test]
    fn released_out_of_order_and_tried_locks() {
        let d: RwLock<(), { rank::DIR }> = RwLock::new(());
        let i: Mutex<(), { rank::INODE }> = Mutex::new(());
        let r: Mutex<(), { rank::RENAME }> = Mutex::new(());
        let gd = d.write();
        let gi = i.lock();
        drop(gd);
        drop(gi);
        // Nothing held: any order again.
        let _gr = r.lock();
        let gi = i.lock();
        // A try-lock cannot deadlock: allowed out of order.
        let tried = d.try_write().expect("free");
        drop(tried);
        drop(gi);
        // A reclaim context starts empty and gives the outer ranks back.
        let _gi = i.lock();
        in_reclaim_context(|| drop(d.write()));
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(d.write())));
        assert!(again.is_err(), "the inode lock is held again after the reclaim context");
    }
}
