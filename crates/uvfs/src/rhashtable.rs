//! A hash table with lockless readers and one writer at a time, reclaimed through the
//! instance's collector. Used for a directory's children (Linux's dentry hash) and the
//! mount table (Linux's mount hash).
//!
//! Readers load the bucket array and walk a chain with acquire loads under a guard: no
//! lock, no write. Writers are serialized by the owner's lock (the directory lock, the
//! rename lock): an insert publishes a fully built node at the head of its chain; a remove
//! unlinks the node (readers standing on it still find the rest of the chain through its
//! `next`, which is never changed after unlinking) and retires it through the collector;
//! growing builds a new array of new nodes, publishes it, and retires the old one whole.
//!
//! (papaya was the first choice, but its `Drop` reclaims the whole collector, which is
//! unsound with a collector shared by every directory while other threads run.)

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use crate::rcu::{LocalGuard, Rcu};

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
        Buckets { heads: (0..n).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect() }
    }
}

impl<K, V> Drop for Buckets<K, V> {
    fn drop(&mut self) {
        // Frees the nodes this array owns. A retired array owns nothing: its nodes were
        // re-created in the new array and are freed here too, but only once unreachable.
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
    /// The bucket array; replaced by the writer when growing, the old one retired.
    buckets: AtomicPtr<Buckets<K, V>>,
    /// Writer-only: number of entries.
    len: AtomicUsize,
    /// Debug check that writers are serialized.
    writing: AtomicBool,
    /// Immutable.
    hasher: foldhash::fast::FixedState,
}

// SAFETY: a table of K, V shared between threads: values are read by many threads and
// dropped by any (through the collector).
unsafe impl<K: Send + Sync, V: Send + Sync> Send for RHashTable<K, V> {}
// SAFETY: as above.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for RHashTable<K, V> {}

impl<K, V> Drop for RHashTable<K, V> {
    fn drop(&mut self) {
        // SAFETY: the table owns its current array; being dropped, no reader can reach it
        // (reclamation rule).
        drop(unsafe { Box::from_raw(*self.buckets.get_mut()) });
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
            len: AtomicUsize::new(0),
            writing: AtomicBool::new(false),
            hasher: foldhash::fast::FixedState::with_seed(0x9e37_79b9_7f4a_7c15),
        }
    }

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, k: &Q) -> u64 {
        self.hasher.hash_one(k)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lockless lookup; the reference lives as long as the guard.
    #[inline]
    pub fn get<'g, Q>(&self, key: &Q, guard: &'g LocalGuard<'_>) -> Option<&'g V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let _ = guard;
        let h = self.hash(key);
        // SAFETY: the array is retired through the collector only after being replaced, so
        // it outlives `guard`; likewise every node reachable from it.
        unsafe {
            let b = &*self.buckets.load(Ordering::Acquire);
            let mut p = b.heads[(h as usize) & (b.heads.len() - 1)].load(Ordering::Acquire);
            while !p.is_null() {
                let n = &*p;
                if n.hash == h && n.key.borrow() == key {
                    return Some(&n.value);
                }
                p = n.next.load(Ordering::Acquire);
            }
        }
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
    pub(crate) fn get_or_insert<'g>(&self, key: K, value: V, rcu: &Rcu, guard: &'g LocalGuard<'_>) -> &'g V {
        let _w = WriterCheck::enter(&self.writing);
        if let Some(v) = self.get(&key, guard) {
            return v;
        }
        let node = self.push(key, value, rcu);
        // SAFETY: the node is linked and freed only through the collector; see `get`.
        unsafe { &(*node).value }
    }

    /// Removes every entry and returns their values (instance teardown). The caller
    /// serializes writers. The old array is retired whole, readers still on it finish.
    pub(crate) fn drain(&self, rcu: &Rcu) -> Vec<V> {
        let _w = WriterCheck::enter(&self.writing);
        let old = self.buckets.swap(Box::into_raw(Box::new(Buckets::new(4))), Ordering::AcqRel);
        let mut out = Vec::with_capacity(self.len.load(Ordering::Relaxed));
        // SAFETY: `old` was the current array, which only the (serialized) writer frees;
        // its nodes are alive until it is reclaimed.
        unsafe {
            for h in (*old).heads.iter() {
                let mut p = h.load(Ordering::Acquire);
                while !p.is_null() {
                    out.push((*p).value.clone());
                    p = (*p).next.load(Ordering::Acquire);
                }
            }
        }
        self.len.store(0, Ordering::Relaxed);
        // SAFETY: `old` came from `Box::into_raw` and is no longer published.
        unsafe { rcu.retire_box(old) };
        out
    }

    /// Removes; returns the value removed. The caller serializes writers.
    pub(crate) fn remove<Q>(&self, key: &Q, rcu: &Rcu) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let _w = WriterCheck::enter(&self.writing);
        self.remove_locked(key, rcu)
    }

    fn push(&self, key: K, value: V, rcu: &Rcu) -> *mut Node<K, V> {
        let h = self.hash(&key);
        let n = self.len.load(Ordering::Relaxed) + 1;
        // SAFETY: only the (serialized) writer replaces the array.
        let mut b = unsafe { &*self.buckets.load(Ordering::Acquire) };
        if n > b.heads.len() {
            b = self.grow(b, b.heads.len() * 2, rcu);
        }
        let head = &b.heads[(h as usize) & (b.heads.len() - 1)];
        let node =
            Box::into_raw(Box::new(Node { hash: h, key, value, next: AtomicPtr::new(head.load(Ordering::Relaxed)) }));
        head.store(node, Ordering::Release);
        self.len.store(n, Ordering::Relaxed);
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
            let b = &*self.buckets.load(Ordering::Acquire);
            let mut link: &AtomicPtr<Node<K, V>> = &b.heads[(h as usize) & (b.heads.len() - 1)];
            loop {
                let p = link.load(Ordering::Relaxed);
                if p.is_null() {
                    return None;
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
    }

    /// Re-creates every node in a larger array, publishes it, retires the old array (and
    /// with it the old nodes) through the collector.
    fn grow<'b>(&'b self, old: &Buckets<K, V>, size: usize, rcu: &Rcu) -> &'b Buckets<K, V> {
        let new = Buckets::new(size);
        for head in old.heads.iter() {
            let mut p = head.load(Ordering::Acquire);
            while !p.is_null() {
                // SAFETY: the writer reads its own linked nodes.
                let n = unsafe { &*p };
                let slot = &new.heads[(n.hash as usize) & (size - 1)];
                let copy = Node {
                    hash: n.hash,
                    key: n.key.clone(),
                    value: n.value.clone(),
                    next: AtomicPtr::new(slot.load(Ordering::Relaxed)),
                };
                slot.store(Box::into_raw(Box::new(copy)), Ordering::Relaxed);
                p = n.next.load(Ordering::Acquire);
            }
        }
        let new = Box::into_raw(Box::new(new));
        let old = self.buckets.swap(new, Ordering::AcqRel);
        // SAFETY: `old` is unpublished; readers still on it are waited for.
        unsafe { rcu.retire_box(old) };
        // SAFETY: just published; only this writer replaces it.
        unsafe { &*new }
    }
}

/// Asserts (in debug builds) that writers do not overlap.
struct WriterCheck<'a>(&'a AtomicBool);

impl<'a> WriterCheck<'a> {
    fn enter(flag: &'a AtomicBool) -> WriterCheck<'a> {
        let was = flag.swap(true, Ordering::Acquire);
        debug_assert!(!was, "concurrent writers on an RHashTable");
        WriterCheck(flag)
    }
}

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
        assert_eq!(t.len(), 1000);
        for i in 0..1000usize {
            assert_eq!(t.get(i.to_string().as_bytes(), &g), Some(&i));
        }
        assert_eq!(t.insert(b"7".to_vec(), 70, &rcu), Some(7));
        assert_eq!(t.get(b"7".as_slice(), &g), Some(&70));
        for i in (0..1000usize).step_by(2) {
            assert!(t.remove(i.to_string().as_bytes(), &rcu).is_some());
        }
        assert_eq!(t.len(), 500);
        assert_eq!(t.get(b"2".as_slice(), &g), None);
        assert_eq!(t.get(b"3".as_slice(), &g), Some(&3));
        assert_eq!(t.remove(b"nope".as_slice(), &rcu), None);
        assert_eq!(*t.get_or_insert(b"3".to_vec(), 99, &rcu, &g), 3);
        assert_eq!(*t.get_or_insert(b"x".to_vec(), 99, &rcu, &g), 99);
    }
}
