//! The inode cache: inodes of a filesystem that loads them from storage (hostfs), found
//! by the storage's (device, inode number). Mirrors Linux's inode hash (`fs/inode.c`:
//! `find_inode_fast`, `iget5_locked_rcu`, `inode_insert5`) after seed 004's patch, but:
//! one table per filesystem instance, holding inodes weakly (an inode lives as long as a
//! dentry or an open file uses it, not on an LRU of its own).
//!
//! **Fast path (seed 004, hash half).** [`InodeCache::iget`] first probes the table
//! without its lock (a lockless [`RHashTable`] read under the instance's collector); only
//! a miss takes the lock, probes again under it (another thread may have inserted the
//! same inode meanwhile), and inserts. On a cold scan every probe misses, so the kernel
//! before the patch takes the lock twice per file and after it once; with
//! [`FastPaths::INODE_HASH`](crate::FastPaths::INODE_HASH) off the probe takes the lock
//! too (the kernel before the patch).
//!
//! **Teardown.** The table holds *weak* references: an inode lives as long as something
//! uses it (dentries, open files, callers), exactly as Linux's inodes live by their
//! `i_count` and leave the hash on the final `iput`. (A strong reference would also make
//! a cycle: inode -> superblock -> cache -> inode.) A probe upgrades the weak reference;
//! the upgrade fails for an inode whose last strong reference is being dropped (Linux's
//! `I_FREEING` check), and the prober then goes to the locked path, which replaces the
//! dead entry with a new inode. The filesystem reports a dropped inode with
//! [`InodeCache::reap`] (from its private data's `Drop`, which may run inside the
//! collector's reclamation, even while this cache's lock is held by the same thread): that
//! takes only a leaf lock and queues the key; the next locked insert removes the queued
//! entries that are still dead. Removed entries are retired through the collector by the
//! table (the reclamation rule).

use std::sync::{Arc, Weak};

use crate::abi::errno::Result;
use crate::abi::stat::DevIno;
use crate::core::inode::Inode;
use crate::sync::Mutex;
use crate::sync::rcu::Rcu;
use crate::sync::rhashtable::RHashTable;

/// The inode cache of one filesystem instance.
pub struct InodeCache {
    /// Probed without a lock; written only under `lock`.
    table: RHashTable<DevIno, Weak<Inode>>,
    /// Serializes inserts and removals (Linux's `inode_hash_lock`).
    lock: Mutex<(), { crate::sync::rank::FS_META }>,
    /// Keys whose inode was dropped, to remove at the next locked insert. A leaf lock,
    /// never held while calling anything.
    dead: parking_lot::Mutex<Vec<DevIno>>,
    /// Immutable: probe without the lock (`FastPaths::INODE_HASH`).
    lockless: bool,
}

impl InodeCache {
    /// An empty cache; `lockless` selects the seed-004 probe.
    pub fn new(lockless: bool) -> InodeCache {
        InodeCache {
            table: RHashTable::new(),
            lock: Mutex::new(()),
            dead: parking_lot::Mutex::new(Vec::new()),
            lockless,
        }
    }

    /// `iget5_locked_rcu`: the cached inode `key` if `valid` accepts it, else the one
    /// `make` builds, inserted. `valid` sees a cached inode and says whether it still is
    /// the file (hostfs: the same type); a rejected one is replaced.
    pub fn iget(
        &self,
        key: DevIno,
        rcu: &Rcu,
        valid: impl Fn(&Inode) -> bool,
        make: impl FnOnce() -> Result<Arc<Inode>>,
    ) -> Result<Arc<Inode>> {
        let probe = |guard: &crate::sync::rcu::LocalGuard<'_>| {
            self.table.get(&key, guard).and_then(Weak::upgrade).filter(|i| valid(i))
        };
        if self.lockless {
            let guard = rcu.pin();
            if let Some(i) = probe(&guard) {
                return Ok(i);
            }
        } else {
            // The kernel before the patch: the probe takes the lock, and the insert below
            // takes it again.
            let _l = self.lock.lock();
            let guard = rcu.pin();
            if let Some(i) = probe(&guard) {
                return Ok(i);
            }
        }
        // Built outside the lock: `make` does I/O. Another thread may race us; the second
        // probe under the lock settles who wins (the loser's inode is dropped unused).
        let new = make()?;
        let _l = self.lock.lock();
        {
            let guard = rcu.pin();
            if let Some(i) = probe(&guard) {
                return Ok(i);
            }
        }
        self.table.insert(key, Arc::downgrade(&new), rcu);
        self.remove_dead(rcu);
        Ok(new)
    }

    /// Unhashes `key` if it is `inode` (an unlinked file whose number the host may reuse).
    pub fn remove(&self, key: DevIno, inode: &Inode, rcu: &Rcu) {
        let _l = self.lock.lock();
        let guard = rcu.pin();
        if self.table.get(&key, &guard).is_some_and(|w| std::ptr::eq(w.as_ptr(), inode)) {
            drop(guard);
            self.table.remove(&key, rcu);
        }
    }

    /// Reports that the inode cached as `key` was dropped (called from the filesystem's
    /// per-inode `Drop`; takes only the leaf lock).
    pub fn reap(&self, key: DevIno) {
        self.dead.lock().push(key);
    }

    /// Removes the queued entries that are still dead. Caller holds `lock`.
    fn remove_dead(&self, rcu: &Rcu) {
        let keys = std::mem::take(&mut *self.dead.lock());
        for key in keys {
            let guard = rcu.pin();
            if self.table.get(&key, &guard).is_some_and(|w| w.strong_count() == 0) {
                drop(guard);
                // Retiring may run reclamation here, dropping inodes, whose `reap` only
                // queues into `dead` (not held now).
                self.table.remove(&key, rcu);
            }
        }
    }
}
