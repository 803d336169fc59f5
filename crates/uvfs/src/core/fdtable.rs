//! `FdTable`: small integers to open files. Mirrors Linux's `struct files_struct` with its
//! RCU-published `fdtable`, but: a descriptor lookup takes no reference on the file (the
//! call runs pinned instead), and there is no `close_on_exec` exec to honour it.
//!
//! Readers (every fd-taking call, and dirfd-relative walks) load a slot under the
//! collector's guard without a lock or a reference count; installs and closes take the
//! table lock; a closed file is retired through the collector.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::Fd;
use crate::abi::limits::DEFAULT_MAX_FDS;
use crate::abi::limits::NR_OPEN;
use crate::core::file::File;
use crate::sync::rcu::{ArcBorrow, Guard, LocalGuard, Rcu, RcuBox};
use crate::sync::{Mutex, MutexGuard};

/// A slot taken by [`FdTable::reserve`] (Linux's `get_unused_fd_flags`) for a file not yet
/// installed: no file is there (readers see EBADF, `close` too, and `dup2` onto it is
/// EBUSY, as Linux's), but no other install takes it.
const RESERVED: *mut File = std::ptr::dangling_mut::<File>();

struct FdArray {
    /// Atomic slots: null, [`RESERVED`], or a pointer from `Arc::into_raw(Arc<File>)` owned
    /// by the table.
    slots: Box<[AtomicPtr<File>]>,
    /// Atomic close-on-exec bits, one per slot.
    cloexec: Box<[AtomicBool]>,
}

impl FdArray {
    fn with_len(n: usize) -> FdArray {
        FdArray {
            slots: (0..n).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect(),
            cloexec: (0..n).map(|_| AtomicBool::new(false)).collect(),
        }
    }
}

/// Ids of descriptor tables, the owners of classic POSIX locks: never reused, unlike an
/// address, so a lock can never pass to a later table.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A descriptor table.
pub struct FdTable {
    /// Immutable: the table's id, the owner of the POSIX locks its tasks take (Linux's
    /// `files_struct` pointer as `fl_owner`).
    pub(crate) id: u64,
    /// The current array; replaced (grown) under `lock`, the old one retired.
    array: RcuBox<FdArray>,
    /// Serializes installs, closes and growth.
    lock: Mutex<()>,
    /// Atomic: the descriptor limit (`RLIMIT_NOFILE`): new descriptors are below it.
    max: std::sync::atomic::AtomicUsize,
    /// Immutable: reclamation domain.
    rcu: Rcu,
    /// Immutable: the instance's fast paths (the close event's notify check).
    fast: crate::abi::config::FastPaths,
}

// The array's pointers are owned `Arc<File>`s.
impl Drop for FdTable {
    fn drop(&mut self) {
        let guard = self.rcu.pin();
        let arr = self.array.load(&guard);
        for s in arr.slots.iter() {
            let p = s.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() && p != RESERVED {
                // SAFETY: the slot owned this count; the table is being dropped, and other
                // threads' readers that loaded it are waited for by the collector.
                let f = unsafe { Arc::from_raw(p) };
                self.closed(&f);
                self.rcu.defer_drop_arc(f);
            }
        }
    }
}

impl FdTable {
    /// An empty table.
    pub fn new(rcu: &Rcu, fast: crate::abi::config::FastPaths) -> FdTable {
        FdTable {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            array: RcuBox::new(FdArray::with_len(64)),
            lock: Mutex::new(()),
            max: std::sync::atomic::AtomicUsize::new(DEFAULT_MAX_FDS),
            rcu: rcu.clone(),
            fast,
        }
    }

    /// The descriptor limit.
    pub fn limit(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// Sets the descriptor limit (`setrlimit(RLIMIT_NOFILE)`): descriptors at or above it
    /// stay open, new ones cannot be made there (EMFILE; EBADF for `dup2`). EPERM beyond
    /// `NR_OPEN`, as for an unprivileged raise of the hard limit.
    pub fn set_limit(&self, n: usize) -> Result<()> {
        if n > NR_OPEN {
            return Err(Errno::EPERM);
        }
        self.max.store(n, Ordering::Relaxed);
        Ok(())
    }

    /// A copy sharing the same open files (fork).
    pub fn fork(&self) -> FdTable {
        let _l = self.lock.lock();
        let guard = self.rcu.pin();
        let arr = self.array.load(&guard);
        let new = FdArray::with_len(arr.slots.len());
        for (i, s) in arr.slots.iter().enumerate() {
            let p = s.load(Ordering::Acquire);
            if !p.is_null() && p != RESERVED {
                // SAFETY: `p` is the slot's `Arc<File>` count (from `Arc::into_raw`), alive
                // while we hold the table lock; we add a count for the new table.
                let f = unsafe { ArcBorrow::from_raw(p) }.to_arc();
                f.fds.fetch_add(1, Ordering::AcqRel);
                new.slots[i].store(Arc::into_raw(f).cast_mut(), Ordering::Release);
                new.cloexec[i].store(arr.cloexec[i].load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        FdTable {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            array: RcuBox::new(new),
            lock: Mutex::new(()),
            max: std::sync::atomic::AtomicUsize::new(self.limit()),
            rcu: self.rcu.clone(),
            fast: self.fast,
        }
    }

    /// The file at `fd`, valid while `guard` and the table are borrowed. No lock, no
    /// reference count.
    #[inline]
    pub(crate) fn get<'g>(&'g self, fd: Fd, guard: &'g LocalGuard<'_>) -> Result<ArcBorrow<'g, File>> {
        let arr = self.array.load(guard);
        let slot = usize::try_from(fd.0).ok().and_then(|i| arr.slots.get(i)).ok_or(Errno::EBADF)?;
        let p = guard.protect(slot, Ordering::Acquire);
        if p.is_null() || p == RESERVED {
            return Err(Errno::EBADF);
        }
        // SAFETY: a slot's pointer other than null and RESERVED is an `Arc<File>` count
        // (from `Arc::into_raw`), retired through the collector on close, so it outlives
        // `guard`.
        Ok(unsafe { ArcBorrow::from_raw(p) })
    }

    /// Installs `file` at the lowest free descriptor >= `min`.
    pub fn install(&self, file: Arc<File>, min: usize, cloexec: bool) -> Result<Fd> {
        let l = self.lock.lock();
        let idx = self.find_free(min, &l)?;
        let arr = self.array_locked(&l);
        file.fds.fetch_add(1, Ordering::AcqRel);
        arr.cloexec[idx].store(cloexec, Ordering::Relaxed);
        arr.slots[idx].store(Arc::into_raw(file).cast_mut(), Ordering::Release);
        Ok(Fd(idx as i32))
    }

    /// Takes the lowest free descriptor for a file about to be made (Linux's
    /// `get_unused_fd_flags`): EMFILE now, before the caller does anything it could not
    /// undo (create or truncate a file). Given back when the reservation is dropped
    /// uninstalled.
    pub(crate) fn reserve(&self) -> Result<Reservation<'_>> {
        let l = self.lock.lock();
        let idx = self.find_free(0, &l)?;
        self.array_locked(&l).slots[idx].store(RESERVED, Ordering::Release);
        Ok(Reservation { table: self, idx })
    }

    /// The current array, for the holder of `lock` (`held`, its guard), without pinning
    /// one of the collector's: only a holder replaces the array ([`FdTable::grow`]), so
    /// it is not retired while the lock is held. (Each pin's release is an atomic swap;
    /// an open and close took three.)
    #[inline]
    fn array_locked<'l>(&'l self, held: &'l MutexGuard<'_, ()>) -> &'l FdArray {
        // SAFETY: `held` is this table's lock (checked in debug builds), under which every
        // replacement is made, and the borrow lasts no longer than it; `grow`, the one
        // replacement, reads the old array before it replaces it and not after, and
        // `find_free` loads the array again after a `grow`.
        debug_assert!(self.lock.is_locked());
        unsafe { self.array.load_locked(held) }
    }

    /// The lowest free slot >= `min`, growing the array if needed (`held`: the table's
    /// lock).
    fn find_free(&self, min: usize, held: &MutexGuard<'_, ()>) -> Result<usize> {
        let mut arr = self.array_locked(held);
        let idx = match arr.slots.iter().skip(min).position(|s| s.load(Ordering::Relaxed).is_null()) {
            Some(i) => i + min,
            None => {
                let idx = arr.slots.len().max(min);
                if idx >= self.limit() {
                    return Err(Errno::EMFILE);
                }
                self.grow(idx + 1, held);
                arr = self.array_locked(held);
                idx
            }
        };
        let _ = arr;
        if idx >= self.limit() {
            return Err(Errno::EMFILE);
        }
        Ok(idx)
    }

    /// Installs `file` exactly at `fd`, closing what was there (dup2/dup3).
    pub fn install_at(&self, file: Arc<File>, fd: Fd, cloexec: bool) -> Result<Fd> {
        let idx = usize::try_from(fd.0).ok().filter(|&i| i < self.limit()).ok_or(Errno::EBADF)?;
        let l = self.lock.lock();
        if idx >= self.array_locked(&l).slots.len() {
            self.grow(idx + 1, &l);
        }
        let arr = self.array_locked(&l);
        if arr.slots[idx].load(Ordering::Relaxed) == RESERVED {
            // An open is about to install there (Linux's dup2 answer to that race).
            return Err(Errno::EBUSY);
        }
        file.fds.fetch_add(1, Ordering::AcqRel);
        arr.cloexec[idx].store(cloexec, Ordering::Relaxed);
        let old = arr.slots[idx].swap(Arc::into_raw(file).cast_mut(), Ordering::AcqRel);
        drop(l);
        // Released outside the table lock: the close event takes notify locks.
        self.retire(old);
        Ok(fd)
    }

    /// Closes `fd`.
    pub fn close(&self, fd: Fd) -> Result<()> {
        let idx = usize::try_from(fd.0).map_err(|_| Errno::EBADF)?;
        let l = self.lock.lock();
        let arr = self.array_locked(&l);
        let slot = arr.slots.get(idx).ok_or(Errno::EBADF)?;
        if slot.load(Ordering::Relaxed) == RESERVED {
            return Err(Errno::EBADF);
        }
        let old = slot.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if old.is_null() {
            return Err(Errno::EBADF);
        }
        drop(l);
        // Released outside the table lock: the close event takes notify locks.
        self.retire(old);
        Ok(())
    }

    /// Sets or clears `fd`'s close-on-exec flag (`F_SETFD`); EBADF if `fd` is not open.
    pub fn set_cloexec(&self, fd: Fd, on: bool) -> Result<()> {
        let _l = self.lock.lock();
        let guard = self.rcu.pin();
        self.get(fd, &guard)?;
        self.array.load(&guard).cloexec[fd.0 as usize].store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Whether `fd` has close-on-exec.
    pub fn cloexec(&self, fd: Fd) -> Result<bool> {
        let guard = self.rcu.pin();
        self.get(fd, &guard)?;
        Ok(self.array.load(&guard).cloexec[fd.0 as usize].load(Ordering::Relaxed))
    }

    fn retire(&self, p: *mut File) {
        if p.is_null() {
            return;
        }
        // SAFETY: `p` was the slot's count and is unpublished now.
        let f = unsafe { Arc::from_raw(p) };
        self.closed(&f);
        self.rcu.defer_drop_arc(f);
    }

    /// A descriptor of `f` was closed (Linux's `filp_close`): this table's POSIX locks on
    /// its inode go (one pointer test when nobody ever locked it), and the file is
    /// released if that was its last descriptor.
    fn closed(&self, f: &File) {
        if !f.is_path() {
            crate::core::locks::remove_posix(&f.inode, crate::core::locks::Owner::Files(self.id));
        }
        if f.fds.fetch_sub(1, Ordering::AcqRel) == 1 {
            f.release(self.fast);
        }
    }

    fn grow(&self, need: usize, held: &MutexGuard<'_, ()>) {
        let old = self.array_locked(held);
        let len = need.next_power_of_two().min(self.limit()).max(need);
        let new = FdArray::with_len(len);
        for (i, s) in old.slots.iter().enumerate() {
            new.slots[i].store(s.load(Ordering::Acquire), Ordering::Relaxed);
            new.cloexec[i].store(old.cloexec[i].load(Ordering::Relaxed), Ordering::Relaxed);
        }
        // The counts move to the new array; the old one is freed without touching them.
        self.array.replace(new, &self.rcu);
    }
}

/// A descriptor taken by [`FdTable::reserve`]: installed into with
/// [`Reservation::install`], or given back when dropped.
pub(crate) struct Reservation<'t> {
    table: &'t FdTable,
    idx: usize,
}

impl Reservation<'_> {
    /// Puts `file` in the reserved slot (Linux's `fd_install`).
    pub(crate) fn install(self, file: Arc<File>, cloexec: bool) -> Fd {
        let t = self.table;
        let l = t.lock.lock();
        // The slot may have moved to a grown array; the index is the same.
        let arr = t.array_locked(&l);
        debug_assert_eq!(arr.slots[self.idx].load(Ordering::Relaxed), RESERVED);
        file.fds.fetch_add(1, Ordering::AcqRel);
        arr.cloexec[self.idx].store(cloexec, Ordering::Relaxed);
        arr.slots[self.idx].store(Arc::into_raw(file).cast_mut(), Ordering::Release);
        let fd = Fd(self.idx as i32);
        std::mem::forget(self);
        fd
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let l = self.table.lock.lock();
        self.table.array_locked(&l).slots[self.idx].store(std::ptr::null_mut(), Ordering::Release);
    }
}
