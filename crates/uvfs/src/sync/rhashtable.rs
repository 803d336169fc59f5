//! A hash table with lockless readers and one writer at a time, reclaimed through the
//! instance's collector. Used for the mount table (Linux's mount hash) and the inode cache;
//! a directory's children have a table of their own ([`crate::core::dhash`]).
//!
//! Readers load the bucket array and walk a chain with acquire loads under a guard: no
//! lock, no write. Writers are serialized by the owner's lock (the rename lock, the
//! inode cache's lock): an insert publishes a fully built node at the head of its chain; a remove
//! unlinks the node (readers standing on it still find the rest of the chain through its
//! `next`, which is never changed after unlinking) and retires it through the collector.
//!
//! Growing moves the nodes themselves into a new array (no node is copied or allocated:
//! a copy per entry per doubling was most of a cold scan's allocations), a few buckets at
//! a time: the insert that finds the array full makes one twice as large (`future`), and
//! each insert then moves [`MOVE_PER_INSERT`] old buckets' chains into it, so no insert
//! moves more than that (a directory of a million names no longer stalls one create to
//! rehash half a million). Meanwhile new entries go to the new array, and readers that
//! miss in the old one look in the new one; the insert that moves the last bucket
//! publishes the new array and retires the old one, emptied. A reader that overlaps a
//! step may follow a moved node into its new chain and so **miss** an entry that is there;
//! it never finds a wrong one (keys are compared) and never loops (moved nodes only lead
//! to nodes of the new array). Hits are therefore always right; a miss is rechecked under
//! the writer's lock (the inode cache), or the table changes only inside a sequence its
//! lockless readers check (the mount table, attached and detached inside the rename
//! sequence).
//!
//! **Seeds.** Every table hashes with a seed of its own, drawn from a per-thread
//! generator that the OS's randomness seeds: names chosen inside a sandbox to collide
//! (and so turn every lookup in a directory into a list walk) would have to be chosen
//! against a seed nobody outside sees, and colliding in one directory says nothing about
//! another or another run. (Linux salts the dcache hash with the parent's address.)
//!
//! (papaya was the first choice, but its `Drop` reclaims the whole collector, which is
//! unsound with a collector shared by every directory while other threads run.)

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use crate::sync::rcu::{Guard, LocalGuard, Rcu};

/// Old buckets an insert moves into the new array while the table grows.
pub(crate) const MOVE_PER_INSERT: usize = 8;

struct Node<K, V> {
    /// Immutable.
    hash: u64,
    /// Immutable.
    key: K,
    /// Immutable.
    value: V,
    /// Atomic: the next node of the chain; changed only by the writer while the node is
    /// linked, never after it is unlinked.
    next: AtomicPtr<Node<K, V>>,
}

struct Buckets<K, V> {
    /// Atomic chain heads.
    heads: Box<[AtomicPtr<Node<K, V>>]>,
}

impl<K, V> Buckets<K, V> {
    fn new(n: usize) -> Buckets<K, V> {
        // Zeroed memory (all null heads) from the allocator, not written here: a large array
        // comes from fresh pages, which the kernel fills lazily as chains are moved in,
        // instead of a write pass over megabytes in the insert that starts a growth.
        let heads = Box::<[AtomicPtr<Node<K, V>>]>::new_zeroed_slice(n);
        // SAFETY: an all-zero `AtomicPtr` is a null pointer, a valid value.
        Buckets { heads: unsafe { heads.assume_init() } }
    }
}

impl<K, V> Drop for Buckets<K, V> {
    fn drop(&mut self) {
        // Frees the nodes this array owns: the current array's at the table's drop, or
        // those of an array `drain` took out whole. An array retired by a grow is empty
        // (its nodes moved).
        for h in self.heads.iter_mut() {
            let mut p = *h.get_mut();
            while !p.is_null() {
                // SAFETY: nodes of a dropped array are reachable only from it.
                let node = unsafe { Box::from_raw(p) };
                p = node.next.load(Ordering::Relaxed);
            }
        }
    }
}

/// The table.
pub struct RHashTable<K, V> {
    /// The bucket array readers start in; replaced by the writer when a growth ends, the
    /// old one retired.
    buckets: AtomicPtr<Buckets<K, V>>,
    /// The array a growth is moving the nodes into (twice as large), null when none is
    /// under way. Set and cleared by the writer; readers that miss in `buckets` look here.
    future: AtomicPtr<Buckets<K, V>>,
    /// Writer-only: old buckets already moved into `future`.
    moved: AtomicUsize,
    /// Writer-only: number of entries.
    len: AtomicUsize,
    /// Debug check that writers are serialized.
    writing: AtomicBool,
    /// Immutable: keyed with [`table_seed`].
    hasher: foldhash::fast::FixedState,
}

/// A seed for a new table: the next output of a per-thread SplitMix64 generator whose
/// state starts from the OS's randomness (`getrandom`).
pub(crate) fn table_seed() -> u64 {
    use std::cell::Cell;
    fn os_seed() -> u64 {
        let mut b = [0u8; 8];
        // A failure leaves the address of a stack slot, which ASLR randomizes (foldhash's
        // own fallback), mixed with the time.
        if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).is_ok_and(|n| n == 8) {
            return u64::from_ne_bytes(b);
        }
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        (&b as *const _ as u64) ^ t.as_nanos() as u64
    }
    thread_local! {
        static STATE: Cell<u64> = Cell::new(os_seed());
    }
    STATE.with(|s| {
        let x = s.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        s.set(x);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

// SAFETY: a table of K, V shared between threads: values are read by many threads and
// dropped by any (through the collector).
unsafe impl<K: Send + Sync, V: Send + Sync> Send for RHashTable<K, V> {}
// SAFETY: as above.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for RHashTable<K, V> {}

impl<K, V> Drop for RHashTable<K, V> {
    fn drop(&mut self) {
        // SAFETY: the table owns its current array and the one a growth fills; being
        // dropped, no reader can reach them (reclamation rule).
        drop(unsafe { Box::from_raw(*self.buckets.get_mut()) });
        let future = *self.future.get_mut();
        if !future.is_null() {
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(future) });
        }
    }
}

impl<K, V> Default for RHashTable<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn default() -> Self {
        Self::new()
    }
}

impl<K, V> RHashTable<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// An empty table.
    pub fn new() -> Self {
        RHashTable {
            buckets: AtomicPtr::new(Box::into_raw(Box::new(Buckets::new(4)))),
            future: AtomicPtr::new(std::ptr::null_mut()),
            moved: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            writing: AtomicBool::new(false),
            hasher: foldhash::fast::FixedState::with_seed(table_seed()),
        }
    }

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, k: &Q) -> u64 {
        self.hasher.hash_one(k)
    }

    /// Lockless lookup; the reference lives as long as the guard. A hit is always right; a
    /// miss may be wrong if a grow overlapped it (see the module docs): callers recheck a
    /// miss under the writers' lock.
    #[inline]
    pub(crate) fn get<'g, Q>(&'g self, key: &Q, guard: &'g LocalGuard<'_>) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let h = self.hash(key);
        // SAFETY: an array is retired through the collector only after being replaced (the
        // old one at the end of a growth, with no node left), so it outlives `guard`;
        // likewise every node reachable from it. The table's own drop, which frees them
        // directly, is excluded by the borrow of `self`.
        unsafe {
            let b = &*guard.protect(&self.buckets, Ordering::Acquire);
            if let Some(v) = Self::find_in(b, h, key, guard) {
                return Some(v);
            }
            // A growth under way: what moved, and what was added since, is in the new array.
            let f = guard.protect(&self.future, Ordering::Acquire);
            if !f.is_null() {
                return Self::find_in(&*f, h, key, guard);
            }
        }
        None
    }

    /// The value of `key` in one array's chain, walked with acquire loads.
    ///
    /// # Safety
    /// `b` is one of the table's arrays, pinned by `guard`.
    #[inline]
    unsafe fn find_in<'g, Q>(b: &'g Buckets<K, V>, h: u64, key: &Q, guard: &'g LocalGuard<'_>) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut p = guard.protect(&b.heads[(h as usize) & (b.heads.len() - 1)], Ordering::Acquire);
        // Nodes visited, counted in debug builds (the test suite's probe counts).
        let mut probes = 0u64;
        while !p.is_null() {
            probes += 1;
            // SAFETY: nodes reachable from a pinned array are freed only through the
            // collector (see `get`).
            let n = unsafe { &*p };
            if n.hash == h && n.key.borrow() == key {
                count_probes(probes);
                return Some(&n.value);
            }
            p = guard.protect(&n.next, Ordering::Acquire);
        }
        count_probes(probes);
        None
    }

    /// Inserts or replaces; returns the value replaced. The caller serializes writers.
    pub(crate) fn insert(&self, key: K, value: V, rcu: &Rcu) -> Option<V> {
        let _w = WriterCheck::enter(&self.writing);
        let old = self.remove_locked(&key, rcu);
        self.push(key, value, rcu);
        old
    }

    /// Inserts unless present; returns the value now in the table. The caller serializes
    /// writers.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn get_or_insert<'g>(&'g self, key: K, value: V, rcu: &Rcu, guard: &'g LocalGuard<'_>) -> &'g V {
        let _w = WriterCheck::enter(&self.writing);
        if let Some(v) = self.get(&key, guard) {
            return v;
        }
        let node = self.push(key, value, rcu);
        // SAFETY: the node is linked and freed only through the collector; see `get`.
        unsafe { &(*node).value }
    }

    /// Removes; returns the value removed. The caller serializes writers.
    pub(crate) fn remove<Q>(&self, key: &Q, rcu: &Rcu) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let _w = WriterCheck::enter(&self.writing);
        let v = self.remove_locked(key, rcu);
        self.grow_step(rcu);
        v
    }

    fn push(&self, key: K, value: V, rcu: &Rcu) -> *mut Node<K, V> {
        let h = self.hash(&key);
        let n = self.len.load(Ordering::Relaxed) + 1;
        // SAFETY: only the (serialized) writer replaces or frees the arrays.
        let b = unsafe {
            let f = self.future.load(Ordering::Acquire);
            if !f.is_null() {
                &*f
            } else {
                let b = &*self.buckets.load(Ordering::Acquire);
                if n > b.heads.len() { self.grow_start(b.heads.len() * 2) } else { b }
            }
        };
        let head = &b.heads[(h as usize) & (b.heads.len() - 1)];
        let node =
            Box::into_raw(Box::new(Node { hash: h, key, value, next: AtomicPtr::new(head.load(Ordering::Relaxed)) }));
        head.store(node, Ordering::Release);
        self.len.store(n, Ordering::Relaxed);
        // The node is in the new array if a growth is under way: the step moves only old
        // nodes, and frees none.
        self.grow_step(rcu);
        node
    }

    fn remove_locked<Q>(&self, key: &Q, rcu: &Rcu) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let h = self.hash(key);
        // SAFETY: the writer owns the chains' shape; nodes are freed only via the collector.
        unsafe {
            for arr in [self.buckets.load(Ordering::Acquire), self.future.load(Ordering::Acquire)] {
                if arr.is_null() {
                    continue;
                }
                let b = &*arr;
                let mut link: &AtomicPtr<Node<K, V>> = &b.heads[(h as usize) & (b.heads.len() - 1)];
                loop {
                    let p = link.load(Ordering::Relaxed);
                    if p.is_null() {
                        break;
                    }
                    let n = &*p;
                    if n.hash == h && n.key.borrow() == key {
                        link.store(n.next.load(Ordering::Relaxed), Ordering::Release);
                        let v = n.value.clone();
                        self.len.store(self.len.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
                        rcu.retire_box(p);
                        return Some(v);
                    }
                    link = &n.next;
                }
            }
            None
        }
    }

    /// Starts a growth: publishes an empty array of `size` buckets for new entries and for
    /// the old ones the next steps move. The writer holds the table.
    fn grow_start(&self, size: usize) -> &Buckets<K, V> {
        let f = Box::into_raw(Box::new(Buckets::new(size)));
        self.moved.store(0, Ordering::Relaxed);
        // Published complete (empty) before any node goes in.
        self.future.store(f, Ordering::Release);
        // SAFETY: just published; only this writer frees or replaces it.
        unsafe { &*f }
    }

    /// One step of a growth under way (none: nothing to do): moves the chains of the next
    /// [`MOVE_PER_INSERT`] old buckets into the new array; the step that moves the last
    /// one publishes the new array and retires the old one (emptied) through the
    /// collector.
    fn grow_step(&self, rcu: &Rcu) {
        let f = self.future.load(Ordering::Relaxed);
        if f.is_null() {
            return;
        }
        // SAFETY: only this (serialized) writer replaces or frees the arrays.
        let (old, new) = unsafe { (&*self.buckets.load(Ordering::Relaxed), &*f) };
        let start = self.moved.load(Ordering::Relaxed);
        let end = (start + MOVE_PER_INSERT).min(old.heads.len());
        let mask = new.heads.len() - 1;
        for head in &old.heads[start..end] {
            let mut p = head.load(Ordering::Relaxed);
            while !p.is_null() {
                // SAFETY: the writer owns the chains' shape; nodes are freed only through
                // the collector, and none is freed here.
                let n = unsafe { &*p };
                let next = n.next.load(Ordering::Relaxed);
                let slot = &new.heads[(n.hash as usize) & mask];
                // A reader standing on `n` now continues in its new chain (moved nodes only
                // lead to nodes of the new array, so it ends).
                n.next.store(slot.load(Ordering::Relaxed), Ordering::Release);
                slot.store(p, Ordering::Release);
                p = next;
            }
            // The old array must not own (and free) what moved.
            head.store(std::ptr::null_mut(), Ordering::Release);
        }
        self.moved.store(end, Ordering::Relaxed);
        if end == old.heads.len() {
            // Readers start in the new array from now on.
            let old = self.buckets.swap(f, Ordering::AcqRel);
            self.future.store(std::ptr::null_mut(), Ordering::Release);
            // SAFETY: `old` is unpublished and empty; readers still on it are waited for.
            unsafe { rcu.retire_box(old) };
        }
    }
}

/// Adds a lockless lookup's visited nodes (or compared slots, [`crate::core::dhash`]) to the
/// thread's `hash_probes` counter (debug builds only: the release hot path does not pay for
/// it).
#[inline(always)]
pub(crate) fn count_probes(n: u64) {
    #[cfg(debug_assertions)]
    crate::sync::counters::bump(|c| c.hash_probes += n);
    let _ = n;
}

/// Asserts (in debug builds) that writers of a table do not overlap (this one's and
/// [`crate::core::dhash`]'s). A release build does nothing: the flag's swap was an atomic
/// read-modify-write on every insert and removal for a check that only asserts.
pub(crate) struct WriterCheck<'a>(#[cfg(debug_assertions)] &'a AtomicBool, PhantomData<&'a AtomicBool>);

impl<'a> WriterCheck<'a> {
    #[inline(always)]
    pub(crate) fn enter(flag: &'a AtomicBool) -> WriterCheck<'a> {
        #[cfg(debug_assertions)]
        {
            let was = flag.swap(true, Ordering::Acquire);
            assert!(!was, "concurrent writers on a hash table");
            WriterCheck(flag, PhantomData)
        }
        #[cfg(not(debug_assertions))]
        {
            let _ = flag;
            WriterCheck(PhantomData)
        }
    }
}

#[cfg(debug_assertions)]
impl Drop for WriterCheck<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_across_growth() {
        let rcu = Rcu::new();
        let t: RHashTable<Vec<u8>, usize> = RHashTable::new();
        let g = rcu.pin();
        for i in 0..1000usize {
            assert_eq!(t.insert(i.to_string().into_bytes(), i, &rcu), None);
        }
        assert_eq!(t.len.load(Ordering::Relaxed), 1000);
        for i in 0..1000usize {
            assert_eq!(t.get(i.to_string().as_bytes(), &g), Some(&i));
        }
        assert_eq!(t.insert(b"7".to_vec(), 70, &rcu), Some(7));
        assert_eq!(t.get(b"7".as_slice(), &g), Some(&70));
        for i in (0..1000usize).step_by(2) {
            assert!(t.remove(i.to_string().as_bytes(), &rcu).is_some());
        }
        assert_eq!(t.len.load(Ordering::Relaxed), 500);
        assert_eq!(t.get(b"2".as_slice(), &g), None);
        assert_eq!(t.get(b"3".as_slice(), &g), Some(&3));
        assert_eq!(t.remove(b"nope".as_slice(), &rcu), None);
        assert_eq!(*t.get_or_insert(b"3".to_vec(), 99, &rcu, &g), 3);
        assert_eq!(*t.get_or_insert(b"x".to_vec(), 99, &rcu, &g), 99);
    }

    /// Growth is spread over inserts: no insert moves more than [`MOVE_PER_INSERT`] old
    /// buckets, every entry is found (and sure) between steps, entries added or removed
    /// while a growth is under way are where they should be, and the table ends in one
    /// array twice the old size.
    #[test]
    fn growth_moves_a_few_buckets_per_insert() {
        let rcu = Rcu::new();
        let t: RHashTable<Vec<u8>, usize> = RHashTable::new();
        let key = |i: usize| i.to_string().into_bytes();
        // Smaller under Miri, which runs it about a thousand times slower.
        let total = if cfg!(miri) { 300 } else { 3000 };
        let mut growths = 0;
        for i in 0..total {
            let before = t.moved.load(Ordering::Relaxed);
            let was_growing = !t.future.load(Ordering::Relaxed).is_null();
            t.insert(key(i), i, &rcu);
            let growing = !t.future.load(Ordering::Relaxed).is_null();
            let after = t.moved.load(Ordering::Relaxed);
            if was_growing {
                assert!(
                    after <= before + MOVE_PER_INSERT || !growing,
                    "{before} -> {after} buckets moved at insert {i}"
                );
            } else if growing {
                growths += 1;
                assert!(after <= MOVE_PER_INSERT, "a growth's first insert moved {after} buckets");
            }
            if i % 7 == 0 {
                assert_eq!(t.remove(key(i / 2).as_slice(), &rcu), Some(i / 2), "remove {} at insert {i}", i / 2);
                t.insert(key(i / 2), i / 2, &rcu);
            }
            let g = rcu.pin();
            for j in [0, i / 3, i / 2, i] {
                assert_eq!(t.get(key(j).as_slice(), &g), Some(&j), "entry {j} after insert {i}");
            }
            assert_eq!(t.get(b"absent".as_slice(), &g), None);
        }
        // Growths of 16 buckets and more take more than one insert: 16 -> 32 ... 2048 -> 4096.
        assert!(growths >= if cfg!(miri) { 5 } else { 8 }, "{growths} growths");
        assert_eq!(t.len.load(Ordering::Relaxed), total);
        let g = rcu.pin();
        assert!((0..total).all(|i| t.get(key(i).as_slice(), &g) == Some(&i)));
    }
}
