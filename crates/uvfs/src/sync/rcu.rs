//! Reclamation: what a lockless reader may hold is freed only after it has left.
//!
//! uvfs uses one [`seize::Collector`] per [`Vfs`](crate::Vfs). A reader pins it
//! ([`Rcu::pin`]) for the length of one call; the directories' children tables
//! (`core/dhash.rs`), the mount and inode hash tables (`rhashtable`) and the
//! [`RcuArc`]/[`RcuBox`] cells below retire what they unlink through it.
//!
//! **The reclamation rule.** Every `Arc` that makes an object reachable to a lockless
//! reader (a map entry, a parent pointer, an fd slot, a task's cwd) is dropped only through
//! the collector once it is unlinked. Any other `Arc` may be dropped directly: the object
//! then dies only after its reader-visible references were reclaimed, i.e. after every
//! reader that could have seen it has unpinned. This is what lets a walk take no
//! reference counts at all.
//!
//! **Borrows.** A guarded load returns a borrow whose lifetime is tied to both the guard
//! and the cell it was loaded from ([`RcuArc::load`], [`RcuBox::load`]), so safe code
//! cannot keep it past either. An object that lives in an `Arc` is borrowed as an
//! [`ArcBorrow`], made only here from pointers known to be `Arc` allocations, which can
//! be turned into a counted reference without assuming anything of a plain `&T` (which
//! `Arc::into_inner` could have moved out of its `Arc`).
//!
//! **The domain's life.** The collector lives as long as the instance: the instance and
//! the descriptor tables of its tasks hold it ([`Rcu`]). Objects that outlive the
//! instance (superblocks, and through them inodes, open files, inotify marks) hold it
//! weakly ([`RcuWeak`]): a strong hold there would make a cycle through the objects the
//! collector itself keeps until it reclaims them. Once the instance's collector is gone
//! there is no reader of it, and what such objects still read or retire (a file released
//! after its `Vfs` was dropped) goes through one process-wide collector for orphans. When
//! the last strong hold goes, the collector frees what it still keeps: no guard can exist
//! then, so nothing is freed under a reader.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, LazyLock, Weak};

pub(crate) use seize::{Collector, Guard, LocalGuard};

/// The reclamation domain of one VFS instance, held strongly.
#[derive(Clone)]
pub(crate) struct Rcu {
    /// Immutable; shared with the instance's descriptor tables, weakly with its
    /// superblocks.
    collector: Arc<seize::Collector>,
}

/// The domain of objects that outlived their instance (see the module docs).
static ORPHANS: LazyLock<Rcu> = LazyLock::new(Rcu::new);

impl Rcu {
    /// A new domain.
    pub(crate) fn new() -> Rcu {
        Rcu { collector: Arc::new(seize::Collector::new().batch_size(64)) }
    }

    /// Pins the domain for a read section. Nesting is allowed.
    #[inline]
    pub(crate) fn pin(&self) -> LocalGuard<'_> {
        #[cfg(debug_assertions)]
        crate::sync::counters::bump(|c| c.guard_pins += 1);
        self.collector.enter()
    }

    /// A weak hold on this domain, for objects that may outlive the instance.
    pub(crate) fn downgrade(&self) -> RcuWeak {
        RcuWeak(Arc::downgrade(&self.collector))
    }

    /// Drops the count `value` holds once every reader pinned now has left. Retires the
    /// `Arc`'s own pointer, so no box is allocated for it (a `close` retires its file this
    /// way).
    pub(crate) fn defer_drop_arc<T: Send + Sync + 'static>(&self, value: Arc<T>) {
        let ptr = Arc::into_raw(value).cast_mut();
        // SAFETY: `ptr` comes from `Arc::into_raw` and carries the one count the caller gave
        // up; the reclaimer turns it back into that `Arc`.
        unsafe { self.collector.retire(ptr, reclaim_arc::<T>) };
    }

    /// Starts reclaiming what this thread retired now, rather than once its batch holds 64
    /// objects (Linux frees a replaced hash table after one grace period too): for a large
    /// retirement, a directory's outgrown table, whose memory should not wait for 63
    /// more. It is freed once the readers pinned now have left.
    pub(crate) fn flush(&self) {
        self.collector.enter().flush();
    }

    /// Hands `ptr` to `reclaim` once every reader pinned now has left (for objects that are
    /// neither a `Box` nor an `Arc`: a directory table's arrays).
    ///
    /// # Safety
    /// `ptr` is no longer reachable by readers that pin from now on, is not used by the
    /// caller afterwards, and `reclaim` frees it correctly, once.
    pub(crate) unsafe fn retire_with<T>(&self, ptr: *mut T, reclaim: unsafe fn(*mut T, &Collector)) {
        // SAFETY: per the contract.
        unsafe { self.collector.retire(ptr, reclaim) };
    }

    /// Frees the box at `ptr` once every reader pinned now has left.
    ///
    /// # Safety
    /// `ptr` comes from `Box::into_raw`, is no longer reachable by readers that pin from
    /// now on, and is not used by the caller afterwards.
    pub(crate) unsafe fn retire_box<T: Send>(&self, ptr: *mut T) {
        // SAFETY: per the contract.
        unsafe { self.collector.retire(ptr, reclaim_box::<T>) };
    }
}

/// A weak hold on an instance's domain (see the module docs).
#[derive(Clone)]
pub(crate) struct RcuWeak(Weak<seize::Collector>);

impl RcuWeak {
    /// The instance's domain while it lives; afterwards the domain of orphans.
    pub(crate) fn get(&self) -> Rcu {
        match self.0.upgrade() {
            Some(collector) => Rcu { collector },
            None => ORPHANS.clone(),
        }
    }
}

/// A borrow, valid for `'g`, of an object that lives in an `Arc`; it derefs to the object
/// and can be turned into a counted reference ([`ArcBorrow::to_arc`]). Made only in this
/// module, from an `&Arc` or a pointer that came from `Arc::into_raw`.
pub(crate) struct ArcBorrow<'g, T> {
    /// Points into a live `Arc` allocation for `'g`.
    ptr: NonNull<T>,
    _life: PhantomData<&'g T>,
}

impl<T> Clone for ArcBorrow<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for ArcBorrow<'_, T> {}

// SAFETY: it is a shared borrow of `T`.
unsafe impl<T: Sync> Send for ArcBorrow<'_, T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for ArcBorrow<'_, T> {}

impl<'g, T> ArcBorrow<'g, T> {
    /// Borrows what `arc` holds for as long as `arc` is borrowed.
    #[inline]
    pub fn from_arc(arc: &'g Arc<T>) -> ArcBorrow<'g, T> {
        // `Arc::as_ptr`, not `&**arc`: the pointer keeps the provenance of the whole
        // allocation, counts included, which `to_arc` touches.
        // SAFETY: an `Arc`'s pointer is never null.
        ArcBorrow { ptr: unsafe { NonNull::new_unchecked(Arc::as_ptr(arc).cast_mut()) }, _life: PhantomData }
    }

    /// Borrows the object `ptr` points to.
    ///
    /// # Safety
    /// `ptr` came from `Arc::into_raw` (or `Arc::as_ptr`) and that allocation stays alive
    /// with a strong count for `'g` (a count held by something a guard of lifetime `'g`
    /// keeps from being reclaimed).
    #[inline]
    pub(crate) unsafe fn from_raw(ptr: *const T) -> ArcBorrow<'g, T> {
        // SAFETY: per the contract `ptr` is an `Arc` allocation, never null.
        ArcBorrow { ptr: unsafe { NonNull::new_unchecked(ptr.cast_mut()) }, _life: PhantomData }
    }

    /// The borrow as a plain reference for `'g`.
    #[inline]
    pub fn get(self) -> &'g T {
        // SAFETY: alive for `'g` (constructor contracts).
        unsafe { self.ptr.as_ref() }
    }

    /// A counted reference to the object.
    #[inline]
    pub fn to_arc(self) -> Arc<T> {
        // SAFETY: the pointer is an `Arc` allocation with a strong count >= 1 for `'g`
        // (constructor contracts), so a count may be added and owned.
        unsafe {
            Arc::increment_strong_count(self.ptr.as_ptr());
            Arc::from_raw(self.ptr.as_ptr())
        }
    }

    /// Whether both borrow the same object.
    #[inline]
    pub fn ptr_eq(self, other: ArcBorrow<'_, T>) -> bool {
        self.ptr == other.ptr
    }

    /// The address (for identity keys).
    #[inline]
    pub fn as_ptr(self) -> *const T {
        self.ptr.as_ptr()
    }
}

impl<T> std::ops::Deref for ArcBorrow<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: alive for the borrow's lifetime, which outlives `self`.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ArcBorrow<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

/// An atomically replaceable `Arc<T>` that readers load under a guard without touching
/// the reference count: an [`RcuOptArc`] that always holds a value.
pub(crate) struct RcuArc<T>(RcuOptArc<T>);

impl<T: Send + Sync + 'static> RcuArc<T> {
    /// A cell holding `value`.
    pub(crate) fn new(value: Arc<T>) -> RcuArc<T> {
        RcuArc(RcuOptArc::new(Some(value)))
    }

    /// The current value, for as long as both `guard` and the cell are borrowed.
    #[inline]
    pub(crate) fn load<'g>(&'g self, guard: &'g LocalGuard<'_>) -> ArcBorrow<'g, T> {
        // SAFETY: the cell was made with a value and `replace` only installs values, so
        // it is never empty.
        unsafe { self.0.load(guard).unwrap_unchecked() }
    }

    /// Takes a counted reference to the current value.
    pub(crate) fn get(&self, guard: &LocalGuard<'_>) -> Arc<T> {
        self.load(guard).to_arc()
    }

    /// Installs `value`; the previous one is released after current readers leave.
    pub(crate) fn replace(&self, value: Arc<T>, rcu: &Rcu) {
        self.0.replace(value, rcu)
    }
}

/// Reclaimer for pointers from `Arc::into_raw`. Destructors run on whichever thread
/// reclaims the batch, under whatever locks it holds: a lock-order context of their own
/// (see [`crate::sync`]).
///
/// # Safety
/// `ptr` comes from `Arc::into_raw` and carries one strong count.
unsafe fn reclaim_arc<T>(ptr: *mut T, _: &seize::Collector) {
    // SAFETY: per the function contract.
    crate::sync::in_reclaim_context(|| drop(unsafe { Arc::from_raw(ptr) }));
}

/// Reclaimer for pointers from `Box::into_raw` (as [`reclaim_arc`]).
///
/// # Safety
/// `ptr` comes from `Box::into_raw` and is owned by the collector.
unsafe fn reclaim_box<T>(ptr: *mut T, _: &seize::Collector) {
    // SAFETY: per the function contract.
    crate::sync::in_reclaim_context(|| drop(unsafe { Box::from_raw(ptr) }));
}

/// An atomically replaceable `Arc<T>`, or none, that readers load under a guard without
/// touching the reference count: 8 bytes where an `Option` of a cell that always holds
/// one ([`RcuArc`]) would take 16 (an atomic pointer has no niche); for a dentry's parent
/// (none: a root).
pub(crate) struct RcuOptArc<T> {
    /// Atomic; null, or holds one strong count of the `Arc` it points to (from
    /// `Arc::into_raw`).
    ptr: AtomicPtr<T>,
    _owns: PhantomData<Option<Arc<T>>>,
}

// SAFETY: it is an `Option<Arc<T>>` with atomic replacement; `Arc<T>` is Send+Sync when T is.
unsafe impl<T: Send + Sync> Send for RcuOptArc<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for RcuOptArc<T> {}

impl<T: Send + Sync + 'static> RcuOptArc<T> {
    /// A cell holding `value`.
    pub(crate) fn new(value: Option<Arc<T>>) -> RcuOptArc<T> {
        let p = value.map_or(std::ptr::null_mut(), |v| Arc::into_raw(v).cast_mut());
        RcuOptArc { ptr: AtomicPtr::new(p), _owns: PhantomData }
    }

    /// Whether the cell holds nothing. Nothing empties a cell (`replace` is for cells that
    /// hold a value), so a cell that holds one keeps holding one, and this needs no guard.
    #[inline]
    pub(crate) fn is_none(&self) -> bool {
        self.ptr.load(Ordering::Relaxed).is_null()
    }

    /// The current value, if any, for as long as both `guard` and the cell are borrowed.
    #[inline]
    pub(crate) fn load<'g>(&'g self, guard: &'g LocalGuard<'_>) -> Option<ArcBorrow<'g, T>> {
        let p = guard.protect(&self.ptr, Ordering::Acquire);
        // SAFETY: a non-null pointer came from `Arc::into_raw` and its count is released
        // only by `replace`, which retires it through the collector (so it outlives
        // `guard`), or by the cell's drop (which the borrow of `self` excludes).
        (!p.is_null()).then(|| unsafe { ArcBorrow::from_raw(p) })
    }

    /// The value, without a guard: `&mut self` excludes every writer (a drop's).
    pub(crate) fn get_mut(&mut self) -> Option<&T> {
        // SAFETY: a non-null pointer is a live `Arc`'s (the cell owns a count), and `&mut
        // self` excludes a concurrent `replace`, the only thing that retires it.
        unsafe { self.ptr.get_mut().cast_const().as_ref() }
    }

    /// Installs `value` in a cell that holds one; the previous one is released after
    /// current readers leave.
    pub(crate) fn replace(&self, value: Arc<T>, rcu: &Rcu) {
        debug_assert!(!self.is_none(), "an empty cell given a value");
        self.store(value, rcu);
    }

    /// Installs `value`, also in an empty cell (which `is_none` then no longer says); the
    /// previous one, if any, is released after current readers leave.
    pub(crate) fn store(&self, value: Arc<T>, rcu: &Rcu) {
        let old = self.ptr.swap(Arc::into_raw(value).cast_mut(), Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: `old` came from `Arc::into_raw` and this cell no longer publishes it;
            // new readers cannot load it, pinned ones are waited for by the collector.
            unsafe { rcu.collector.retire(old, reclaim_arc::<T>) };
        }
    }
}

impl<T> Drop for RcuOptArc<T> {
    fn drop(&mut self) {
        let p = *self.ptr.get_mut();
        if !p.is_null() {
            // SAFETY: the cell owns one count. The owner of the cell is being dropped,
            // which by the reclamation rule means no pinned reader can still reach it
            // through us.
            drop(unsafe { Arc::from_raw(p) });
        }
    }
}

/// The bytes of an `Arc`'s counts (strong, weak) before its value, for a value aligned to
/// 8 bytes or less: what the dentry's and the inode's layout checks place lines by.
pub(crate) const ARC_COUNTS: usize = 2 * std::mem::size_of::<usize>();

/// An atomically replaceable boxed value that readers load under a guard: an
/// [`RcuOptBox`] that always holds one.
pub(crate) struct RcuBox<T>(RcuOptBox<T>);

impl<T: Send + Sync + 'static> RcuBox<T> {
    /// A cell holding `value`.
    pub(crate) fn new(value: T) -> RcuBox<T> {
        RcuBox(RcuOptBox { ptr: AtomicPtr::new(Box::into_raw(Box::new(value))), _owns: PhantomData })
    }

    /// The current value, for as long as both `guard` and the cell are borrowed.
    #[inline]
    pub(crate) fn load<'g>(&'g self, guard: &'g LocalGuard<'_>) -> &'g T {
        // SAFETY: never empty: `new` fills the cell and `replace` only swaps in boxes.
        unsafe { self.0.load(guard).unwrap_unchecked() }
    }

    /// The current value, without a guard, for the holder of the lock that every
    /// [`RcuBox::replace`] of this cell is made under (`_held` is its guard, and bounds the
    /// borrow): while it is held nothing can replace the value, and so nothing retires it.
    ///
    /// # Safety
    /// Every `replace` of this cell is made with that lock held, and the caller holds it
    /// for as long as the borrow lasts, and does not use the borrow once it has replaced
    /// the value itself (the old one may be freed at once: the caller pins no guard).
    #[inline]
    pub(crate) unsafe fn load_locked<'l, L>(&'l self, _held: &'l L) -> &'l T {
        // SAFETY: never empty (see `load`); per the contract the box is not replaced, and
        // so not retired, while the borrow lasts.
        unsafe { &*self.0.ptr.load(Ordering::Acquire) }
    }

    /// Installs `value`; the previous one is freed after current readers leave.
    pub(crate) fn replace(&self, value: T, rcu: &Rcu) {
        self.0.replace(value, rcu);
    }
}

/// An atomically replaceable boxed value, or none, that readers load under a guard: for a
/// value that most owners never set (a dentry's name after a rename). [`RcuBox`] is the
/// one that always holds a value.
pub(crate) struct RcuOptBox<T> {
    /// Atomic; null, or owns the `Box` it points to.
    ptr: AtomicPtr<T>,
    _owns: PhantomData<Option<Box<T>>>,
}

// SAFETY: it is an `Option<Box<T>>` with atomic replacement.
unsafe impl<T: Send + Sync> Send for RcuOptBox<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for RcuOptBox<T> {}

impl<T: Send + Sync + 'static> RcuOptBox<T> {
    /// An empty cell.
    pub(crate) const fn empty() -> RcuOptBox<T> {
        RcuOptBox { ptr: AtomicPtr::new(std::ptr::null_mut()), _owns: PhantomData }
    }

    /// The current value, if any, for as long as both `guard` and the cell are borrowed.
    #[inline]
    pub(crate) fn load<'g>(&'g self, guard: &'g LocalGuard<'_>) -> Option<&'g T> {
        let p = guard.protect(&self.ptr, Ordering::Acquire);
        // SAFETY: a box is freed only through the collector after `replace` (so it
        // outlives `guard`), or by the cell's drop (which the borrow of `self` excludes).
        unsafe { p.as_ref() }
    }

    /// Installs `value`; the previous one, if any, is freed after current readers leave.
    pub(crate) fn replace(&self, value: T, rcu: &Rcu) {
        let old = self.ptr.swap(Box::into_raw(Box::new(value)), Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: `old` is a `Box` no longer published by this cell.
            unsafe { rcu.collector.retire(old, reclaim_box::<T>) };
        }
    }
}

impl<T> Drop for RcuOptBox<T> {
    fn drop(&mut self) {
        let p = *self.ptr.get_mut();
        if !p.is_null() {
            // SAFETY: the cell owns the box; see `RcuOptArc::drop` for why no reader remains.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty cell reads as empty; a value replaced while a reader holds it stays
    /// readable until the reader leaves; the cell frees what it holds (Miri checks).
    #[test]
    fn optional_boxes_start_empty_and_outlive_their_readers() {
        let rcu = Rcu::new();
        let cell = RcuOptBox::<Vec<u8>>::empty();
        let g = rcu.pin();
        assert!(cell.load(&g).is_none());
        cell.replace(vec![1, 2], &rcu);
        let seen = cell.load(&g).unwrap();
        cell.replace(vec![3], &rcu);
        assert_eq!(seen, &[1, 2]);
        assert_eq!(cell.load(&g).unwrap(), &[3]);
        drop(g);
        rcu.flush();
        drop(cell);
        drop(RcuOptBox::<Vec<u8>>::empty());
    }

    /// Replaced values stay readable for a reader pinned before the replacement, and
    /// are freed once it leaves (Miri checks both).
    #[test]
    fn replaced_values_outlive_their_readers() {
        let rcu = Rcu::new();
        let cell = RcuArc::new(Arc::new(String::from("old")));
        let boxed = RcuBox::new(vec![1u8, 2, 3]);
        let g = rcu.pin();
        let seen = cell.load(&g);
        let seen_box = boxed.load(&g);
        cell.replace(Arc::new(String::from("new")), &rcu);
        boxed.replace(vec![4], &rcu);
        assert_eq!(&*seen, "old");
        assert_eq!(seen_box, &[1, 2, 3]);
        let kept = seen.to_arc();
        drop(g);
        let g = rcu.pin();
        assert_eq!(&*cell.load(&g), "new");
        assert_eq!(boxed.load(&g), &[4]);
        assert_eq!(&*kept, "old");
    }

    /// Objects that outlive the instance's domain retire into the orphans' domain.
    #[test]
    fn a_weak_hold_outlives_the_domain() {
        let rcu = Rcu::new();
        let weak = rcu.downgrade();
        let cell = RcuArc::new(Arc::new(1u32));
        cell.replace(Arc::new(2), &weak.get());
        drop(rcu);
        let orphan = weak.get();
        let g = orphan.pin();
        assert_eq!(*cell.load(&g), 2);
        cell.replace(Arc::new(3), &orphan);
        assert_eq!(*cell.load(&g), 3);
    }

    /// A count given to `defer_drop_arc` is dropped after the readers pinned before it
    /// leave (when the domain goes, at the latest), not before, and only that count.
    #[test]
    fn deferred_arc_counts_drop_after_their_readers() {
        let rcu = Rcu::new();
        let v = Arc::new(String::from("file"));
        let g = rcu.pin();
        rcu.defer_drop_arc(v.clone());
        assert_eq!(Arc::strong_count(&v), 2, "dropped while a reader was pinned");
        drop(g);
        drop(rcu);
        assert_eq!(Arc::strong_count(&v), 1);
        assert_eq!(&*v, "file");
    }
}
