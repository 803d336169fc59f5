//! `FdTable`: small integers to open files. Mirrors Linux's `struct files_struct` with its
//! RCU-published `fdtable`, but: a descriptor lookup takes no reference on the file (the
//! call runs pinned instead), and there is no `close_on_exec` exec to honour it.
//!
//! Readers (every fd-taking call, and dirfd-relative walks) load a slot under the
//! collector's guard without a lock or a reference count; installs and closes take the
//! table lock; a closed file is retired through the collector. The lowest free
//! descriptor is found in a bitmap of the taken ones, kept under the lock (`Taken`), so
//! an open costs the same among 50,000 open files as among none.

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

/// Which descriptors are taken, for the search of the lowest free one (Linux's
/// `open_fds`, `full_fds_bits` and `next_fd`): a search skips 64 taken descriptors a bit
/// and 4096 a word, so an open among thousands of open files does not read every slot.
/// Under the table lock (it is the lock's data).
#[derive(Default)]
struct Taken {
    /// Bit `i % 64` of word `i / 64`: slot `i` is not null (a file, or [`RESERVED`]).
    open: Vec<u64>,
    /// Bit `w % 64` of word `w / 64`: word `w` of `open` is full.
    full: Vec<u64>,
    /// Every slot below it is taken (Linux's `next_fd`): where a search from 0 starts.
    next: usize,
}

impl Taken {
    /// For an array of `n` slots, none taken: made with the table, so that its first open
    /// allocates nothing but its file.
    fn for_slots(n: usize) -> Taken {
        let words = n.div_ceil(64);
        Taken { open: vec![0; words], full: vec![0; words.div_ceil(64)], next: 0 }
    }

    /// Slot `i` was filled.
    fn set(&mut self, i: usize) {
        let w = i / 64;
        if w >= self.open.len() {
            self.open.resize(w + 1, 0);
            self.full.resize(w / 64 + 1, 0);
        }
        self.open[w] |= 1 << (i % 64);
        if self.open[w] == u64::MAX {
            self.full[w / 64] |= 1 << (w % 64);
        }
    }

    /// Slot `i` was emptied.
    fn clear(&mut self, i: usize) {
        let w = i / 64;
        if let Some(word) = self.open.get_mut(w) {
            *word &= !(1 << (i % 64));
            self.full[w / 64] &= !(1 << (w % 64));
        }
        self.next = self.next.min(i);
    }

    /// The lowest slot >= `start` not taken (possibly past every word kept).
    fn first_free(&self, start: usize) -> usize {
        let mut w = start / 64;
        let Some(&word) = self.open.get(w) else { return start };
        let word = word | ((1u64 << (start % 64)) - 1);
        if word != u64::MAX {
            return w * 64 + (!word).trailing_zeros() as usize;
        }
        // The words after it: the first not full, found 64 words at a time.
        w += 1;
        while w < self.open.len() {
            let f = self.full[w / 64] | ((1u64 << (w % 64)) - 1);
            if f != u64::MAX {
                w = w / 64 * 64 + (!f).trailing_zeros() as usize;
                return match self.open.get(w) {
                    Some(&word) => w * 64 + (!word).trailing_zeros() as usize,
                    None => w * 64,
                };
            }
            w = (w / 64 + 1) * 64;
        }
        w.max(self.open.len()) * 64
    }
}

/// The slots of a new table's array.
const FIRST_SLOTS: usize = 64;

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
    /// Serializes installs, closes and growth; holds which slots are taken.
    lock: Mutex<Taken>,
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
            array: RcuBox::new(FdArray::with_len(FIRST_SLOTS)),
            lock: Mutex::new(Taken::for_slots(FIRST_SLOTS)),
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
        let mut taken = Taken::for_slots(arr.slots.len());
        for (i, s) in arr.slots.iter().enumerate() {
            let p = s.load(Ordering::Acquire);
            if !p.is_null() && p != RESERVED {
                // SAFETY: `p` is the slot's `Arc<File>` count (from `Arc::into_raw`), alive
                // while we hold the table lock; we add a count for the new table.
                let f = unsafe { ArcBorrow::from_raw(p) }.to_arc();
                f.fds.fetch_add(1, Ordering::AcqRel);
                new.slots[i].store(Arc::into_raw(f).cast_mut(), Ordering::Release);
                new.cloexec[i].store(arr.cloexec[i].load(Ordering::Relaxed), Ordering::Relaxed);
                taken.set(i);
            }
        }
        // The reserved slots are not copied: the copy's first free slot is found afresh.
        FdTable {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            array: RcuBox::new(new),
            lock: Mutex::new(taken),
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
        self.install_from(file, min, cloexec, false)
    }

    /// [`FdTable::install`] at the lowest free descriptor of a file whose descriptor count
    /// already includes this one ([`File::count_first_fd`]).
    pub(crate) fn install_counted(&self, file: Arc<File>, cloexec: bool) -> Result<Fd> {
        self.install_from(file, 0, cloexec, true)
    }

    fn install_from(&self, file: Arc<File>, min: usize, cloexec: bool, counted: bool) -> Result<Fd> {
        let mut l = self.lock.lock();
        let idx = self.find_free(min, &mut l)?;
        let arr = self.array_locked(&l);
        if !counted {
            file.fds.fetch_add(1, Ordering::AcqRel);
        }
        arr.cloexec[idx].store(cloexec, Ordering::Relaxed);
        arr.slots[idx].store(Arc::into_raw(file).cast_mut(), Ordering::Release);
        Ok(Fd(idx as i32))
    }

    /// Takes the lowest free descriptor for a file about to be made (Linux's
    /// `get_unused_fd_flags`): EMFILE now, before the caller does anything it could not
    /// undo (create or truncate a file). Given back when the reservation is dropped
    /// uninstalled.
    pub(crate) fn reserve(&self) -> Result<Reservation<'_>> {
        let mut l = self.lock.lock();
        let idx = self.find_free(0, &mut l)?;
        self.array_locked(&l).slots[idx].store(RESERVED, Ordering::Release);
        Ok(Reservation { table: self, idx })
    }

    /// The current array, for the holder of `lock` (`held`, its guard), without pinning
    /// one of the collector's: only a holder replaces the array ([`FdTable::grow`]), so
    /// it is not retired while the lock is held. (Each pin's release is an atomic swap;
    /// an open and close took three.)
    #[inline]
    fn array_locked<'l>(&'l self, held: &'l MutexGuard<'_, Taken>) -> &'l FdArray {
        // SAFETY: `held` is this table's lock (checked in debug builds), under which every
        // replacement is made, and the borrow lasts no longer than it; `grow`, the one
        // replacement, reads the old array before it replaces it and not after, and
        // `find_free` loads the array again after a `grow`.
        debug_assert!(self.lock.is_locked());
        unsafe { self.array.load_locked(held) }
    }

    /// Takes the lowest free slot >= `min`, growing the array if needed (`held`: the
    /// table's lock); the caller fills it.
    fn find_free(&self, min: usize, held: &mut MutexGuard<'_, Taken>) -> Result<usize> {
        let from_next = min <= held.next;
        let idx = held.first_free(min.max(held.next));
        debug_assert!(
            {
                let slots = &self.array_locked(held).slots;
                slots.get(idx).is_none_or(|s| s.load(Ordering::Relaxed).is_null())
                    && slots
                        .iter()
                        .skip(min)
                        .take(idx.saturating_sub(min))
                        .all(|s| !s.load(Ordering::Relaxed).is_null())
            },
            "not the lowest free slot >= {min}: {idx}"
        );
        if idx >= self.limit() {
            return Err(Errno::EMFILE);
        }
        if idx >= self.array_locked(held).slots.len() {
            self.grow(idx + 1, held);
        }
        held.set(idx);
        if from_next {
            held.next = idx + 1;
        }
        Ok(idx)
    }

    /// Installs `file` exactly at `fd`, closing what was there (dup2/dup3).
    pub fn install_at(&self, file: Arc<File>, fd: Fd, cloexec: bool) -> Result<Fd> {
        let idx = usize::try_from(fd.0).ok().filter(|&i| i < self.limit()).ok_or(Errno::EBADF)?;
        let mut l = self.lock.lock();
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
        l.set(idx);
        drop(l);
        // Released outside the table lock: the close event takes notify locks.
        self.retire(old);
        Ok(fd)
    }

    /// Closes `fd`.
    pub fn close(&self, fd: Fd) -> Result<()> {
        let idx = usize::try_from(fd.0).map_err(|_| Errno::EBADF)?;
        let mut l = self.lock.lock();
        let arr = self.array_locked(&l);
        let slot = arr.slots.get(idx).ok_or(Errno::EBADF)?;
        // Every writer of a slot holds the lock (readers only load), so a load and a store
        // do what a swap would, without its atomic read-modify-write.
        let old = slot.load(Ordering::Relaxed);
        if old.is_null() || old == RESERVED {
            return Err(Errno::EBADF);
        }
        slot.store(std::ptr::null_mut(), Ordering::Release);
        l.clear(idx);
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
            crate::core::locks::remove_posix(f.inode(), crate::core::locks::Owner::Files(self.id));
        }
        if f.fds.fetch_sub(1, Ordering::AcqRel) == 1 {
            f.release(self.fast);
        }
    }

    fn grow(&self, need: usize, held: &MutexGuard<'_, Taken>) {
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
    /// Puts `file` in the reserved slot (Linux's `fd_install`); its descriptor count already
    /// includes this one ([`File::count_first_fd`]).
    pub(crate) fn install(self, file: Arc<File>, cloexec: bool) -> Fd {
        let t = self.table;
        let l = t.lock.lock();
        // The slot may have moved to a grown array; the index is the same.
        let arr = t.array_locked(&l);
        debug_assert_eq!(arr.slots[self.idx].load(Ordering::Relaxed), RESERVED);
        debug_assert!(file.fds.load(Ordering::Relaxed) >= 1, "a descriptor not counted in its file");
        arr.cloexec[self.idx].store(cloexec, Ordering::Relaxed);
        arr.slots[self.idx].store(Arc::into_raw(file).cast_mut(), Ordering::Release);
        let fd = Fd(self.idx as i32);
        std::mem::forget(self);
        fd
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut l = self.table.lock.lock();
        self.table.array_locked(&l).slots[self.idx].store(std::ptr::null_mut(), Ordering::Release);
        l.clear(self.idx);
    }
}

#[cfg(test)]
mod tests {
    use super::Taken;

    /// The lowest free slot, against a plain scan of a model, under random fills and
    /// empties over 20,000 slots (runs of full words included), from random starts.
    #[test]
    fn the_lowest_free_slot_is_found_as_a_scan_would() {
        let n = 20_000;
        let mut model = vec![false; n + 64 * 64 * 2];
        let mut t = Taken::default();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |m: usize| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m as u64) as usize
        };
        let scan = |model: &[bool], start: usize| (start..).find(|&i| !model.get(i).copied().unwrap_or(false)).unwrap();
        for round in 0..60_000 {
            // Fill densely at first (long runs of full words), then churn.
            let i = if round < 15_000 { round } else { rand(n) };
            if round < 15_000 || rand(2) == 0 {
                model[i] = true;
                t.set(i);
            } else {
                model[i] = false;
                t.clear(i);
            }
            let start = if rand(4) == 0 { 0 } else { rand(n + 300) };
            assert_eq!(t.first_free(start), scan(&model, start), "round {round}, from {start}");
        }
    }
}
