//! Reclamation: what a lockless reader may hold is freed only after it has left.
//!
//! uvfs uses one [`seize::Collector`] per [`Vfs`](crate::Vfs). A reader pins it
//! ([`Rcu::pin`]) for the length of one call; the dentry and mount hash tables
//! ([`crate::rhashtable`]) and the [`RcuArc`]/[`RcuBox`] cells below retire what they unlink through it.
//!
//! **The reclamation rule.** Every `Arc` that makes an object reachable to a lockless
//! reader (a map entry, a parent pointer, an fd slot, a task's cwd) is dropped only through
//! the collector once it is unlinked. Any other `Arc` may be dropped directly: the object
//! then dies only after its reader-visible references were reclaimed, i.e. after every
//! reader that could have seen it has unpinned. This is what lets a walk take no
//! reference counts at all.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};

pub use seize::{Guard, LocalGuard};

/// The reclamation domain of one VFS instance.
#[derive(Clone)]
pub struct Rcu {
    /// Immutable; shared with every dentry map of the instance.
    collector: Arc<seize::Collector>,
}

impl Default for Rcu {
    fn default() -> Self {
        Rcu::new()
    }
}

impl Rcu {
    /// A new domain.
    pub fn new() -> Rcu {
        Rcu { collector: Arc::new(seize::Collector::new().batch_size(64)) }
    }

    /// Pins the domain for a read section. Nesting is allowed.
    #[inline]
    pub fn pin(&self) -> LocalGuard<'_> {
        self.collector.enter()
    }

    /// The collector, for building maps that share it.
    pub fn collector(&self) -> &Arc<seize::Collector> {
        &self.collector
    }

    /// Drops `value` once every reader pinned now has left.
    pub fn defer_drop<T: Send + 'static>(&self, value: T) {
        let ptr = Box::into_raw(Box::new(value));
        // SAFETY: `ptr` is fresh from `Box::into_raw` and owned by nobody else; the reclaimer
        // frees it as the same `Box`.
        unsafe { self.collector.retire(ptr, reclaim_box::<T>) };
    }
}

impl Rcu {
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

/// An atomically replaceable `Arc<T>` that readers load under a guard without touching
/// the reference count.
pub struct RcuArc<T> {
    /// Atomic; holds one strong count of the `Arc` it points to (from `Arc::into_raw`).
    ptr: AtomicPtr<T>,
    _owns: PhantomData<Arc<T>>,
}

// SAFETY: it is an `Arc<T>` with atomic replacement; `Arc<T>` is Send+Sync when T is.
unsafe impl<T: Send + Sync> Send for RcuArc<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for RcuArc<T> {}

impl<T: Send + Sync + 'static> RcuArc<T> {
    /// A cell holding `value`.
    pub fn new(value: Arc<T>) -> RcuArc<T> {
        RcuArc { ptr: AtomicPtr::new(Arc::into_raw(value).cast_mut()), _owns: PhantomData }
    }

    /// Reads the current value for as long as `guard` lives.
    #[inline]
    pub fn load<'g>(&self, guard: &'g LocalGuard<'_>) -> &'g T {
        let p = guard.protect(&self.ptr, Ordering::Acquire);
        // SAFETY: the pointer came from `Arc::into_raw` and its count is released only by
        // `replace`, which retires it through the collector, so it outlives this guard.
        unsafe { &*p }
    }

    /// Takes a counted reference to the current value.
    pub fn get(&self, guard: &LocalGuard<'_>) -> Arc<T> {
        let p = guard.protect(&self.ptr, Ordering::Acquire);
        // SAFETY: as in `load`, the value is alive while `guard` is; its strong count is at
        // least the one this cell (or a retired copy of it) holds.
        unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        }
    }

    /// Installs `value`; the previous one is released after current readers leave.
    pub fn replace(&self, value: Arc<T>, rcu: &Rcu) {
        let old = self.ptr.swap(Arc::into_raw(value).cast_mut(), Ordering::AcqRel);
        // SAFETY: `old` came from `Arc::into_raw` and this cell no longer publishes it; new
        // readers cannot load it, pinned ones are waited for by the collector.
        unsafe { rcu.collector.retire(old, reclaim_arc::<T>) };
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

impl<T> Drop for RcuArc<T> {
    fn drop(&mut self) {
        // SAFETY: the cell owns one count. The owner of the cell is being dropped, which by
        // the reclamation rule means no pinned reader can still reach it through us.
        drop(unsafe { Arc::from_raw(*self.ptr.get_mut()) });
    }
}

/// An atomically replaceable boxed value that readers load under a guard.
pub struct RcuBox<T> {
    /// Atomic; owns the `Box` it points to.
    ptr: AtomicPtr<T>,
    _owns: PhantomData<Box<T>>,
}

// SAFETY: it is a `Box<T>` with atomic replacement.
unsafe impl<T: Send + Sync> Send for RcuBox<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for RcuBox<T> {}

impl<T: Send + Sync + 'static> RcuBox<T> {
    /// A cell holding `value`.
    pub fn new(value: T) -> RcuBox<T> {
        RcuBox { ptr: AtomicPtr::new(Box::into_raw(Box::new(value))), _owns: PhantomData }
    }

    /// Reads the current value for as long as `guard` lives.
    #[inline]
    pub fn load<'g>(&self, guard: &'g LocalGuard<'_>) -> &'g T {
        let p = guard.protect(&self.ptr, Ordering::Acquire);
        // SAFETY: the box is freed only through the collector after `replace`.
        unsafe { &*p }
    }

    /// Installs `value`; the previous one is freed after current readers leave.
    pub fn replace(&self, value: T, rcu: &Rcu) {
        let old = self.ptr.swap(Box::into_raw(Box::new(value)), Ordering::AcqRel);
        // SAFETY: `old` is a `Box` no longer published by this cell.
        unsafe { rcu.collector.retire(old, reclaim_box::<T>) };
    }
}

impl<T> Drop for RcuBox<T> {
    fn drop(&mut self) {
        // SAFETY: the cell owns the box; see `RcuArc::drop` for why no reader remains.
        drop(unsafe { Box::from_raw(*self.ptr.get_mut()) });
    }
}

/// Takes a counted reference to an object reached under a guard.
///
/// # Safety
/// `value` must live inside an `Arc` (every uvfs object that this is used on is only
/// ever constructed as `Arc<T>`), and be protected by a guard or a count for the call.
pub(crate) unsafe fn arc_from_ref<T>(value: &T) -> Arc<T> {
    let p: *const T = value;
    // SAFETY: per the contract the object is alive with a strong count >= 1.
    unsafe {
        Arc::increment_strong_count(p);
        Arc::from_raw(p)
    }
}
