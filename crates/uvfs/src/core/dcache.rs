//! The dcache operations every namespace call shares: the locked-tier lookup and
//! `lookup_one_qstr_excl`, `d_add`/`d_insert`/`d_remove`/`d_unhash` (the halves of
//! `d_move`), `d_invalidate` and `d_prune` for names a filesystem disowns, and the bounded
//! eviction of cached names. Mirrors Linux's `fs/dcache.c` (and `shrink_dcache_sb`),
//! but: each directory owns its children map (no global hash), a memfs directory is
//! complete in it (a miss is ENOENT), and only the names of filesystems that are not
//! dcache-complete are counted and evicted.

use crate::abi::errno::{Errno, Result};
use crate::core::dentry::{DENTRY_DEAD, Dentry, DirLocked, Name, Ordered};
use crate::core::dhash::Probe;
use crate::core::inode::Inode;
use crate::core::instance::VfsInner;
use crate::core::mount::Mount;
use crate::core::path::Pos;
use crate::core::superblock::SuperBlock;
use crate::sync::counters;
use crate::sync::rcu::{ArcBorrow, LocalGuard};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A dentry an exclusive lookup found: borrowed from a complete instance's table under the
/// caller's guard, or a count of its own.
pub(crate) type Found<'g> = Cow<'g, Arc<Dentry>>;

impl VfsInner {
    /// The mount on `dentry` as seen from `mnt`, if any (lockless).
    #[inline]
    pub(crate) fn lookup_mount<'g>(
        &'g self,
        mnt: &Mount,
        dentry: &Dentry,
        guard: &'g LocalGuard<'_>,
    ) -> Option<ArcBorrow<'g, Mount>> {
        self.mounts.get(&(mnt.id, dentry as *const Dentry as usize), guard).map(ArcBorrow::from_arc)
    }

    /// The locked-tier lookup: under the directory lock; asks the filesystem on a miss in
    /// a directory that is not complete, and caches its answer (positive or negative).
    /// A cached dentry the filesystem no longer vouches for is replaced (see
    /// [`VfsInner::lookup_excl`]).
    pub(crate) fn lookup_locked<'g>(
        &self,
        cur: Pos<'g>,
        name: &[u8],
        guard: &'g LocalGuard<'_>,
    ) -> Result<Option<ArcBorrow<'g, Dentry>>> {
        let dir = cur.dentry.get().dir().ok_or(Errno::ENOTDIR)?;
        let sb = &cur.mnt.sb;
        {
            let _l = dir.lock.read();
            if let Some(d) = dir.children.get(name, guard) {
                if !d.needs_revalidate() || sb.fs().d_revalidate(cur.inode(), name, d)? {
                    return Ok(d.inode().map(|_| ArcBorrow::from_arc(d)));
                }
            } else if sb.dcache_complete() {
                return Ok(None);
            }
        }
        let mut l = dir.lock.write();
        let parent = cur.dentry.to_arc();
        let found = self.lookup_excl(sb, &parent, &mut l, name, guard)?;
        // The map holds what was found: hand out its reference (alive under `guard`, for the
        // caller's walk), taken while no writer can be growing the map.
        let r =
            found.and_then(|d| dir.children.get(name, guard).filter(|x| Arc::ptr_eq(x, &d))).map(ArcBorrow::from_arc);
        drop(l);
        Ok(r)
    }

    /// Linux's `lookup_one_qstr_excl`: `name` in `parent`, whose lock the caller holds
    /// exclusively (`locked`). A cached dentry is used if the filesystem still vouches for
    /// it (`d_revalidate`), else dropped; a miss in a directory that is not complete asks
    /// the filesystem and caches the answer, positive or negative. Returns the positive
    /// dentry, or `None` for a name that does not exist.
    pub(crate) fn lookup_excl(
        &self,
        sb: &Arc<SuperBlock>,
        parent: &Arc<Dentry>,
        locked: &mut DirLocked,
        name: &[u8],
        guard: &LocalGuard<'_>,
    ) -> Result<Option<Arc<Dentry>>> {
        let dir = parent.dir().ok_or(Errno::ENOTDIR)?;
        let dir_inode = parent.inode().ok_or(Errno::ENOENT)?;
        if let Some(d) = dir.children.get(name, guard)
            && (!d.needs_revalidate()
                || sb.fs().d_revalidate(dir_inode, name, d)?
                || !self.d_invalidate(sb, parent, locked, name, guard))
        {
            return Ok(d.inode().map(|_| d.clone()));
        }
        if sb.dcache_complete() || parent.is_dead() {
            return Ok(None);
        }
        crate::sync::counters::bump(|c| c.fs_lookups += 1);
        let found = sb.fs().lookup(sb, dir_inode, name)?;
        let d = Dentry::new_cached(parent, name, found);
        if d.needs_revalidate() {
            sb.fs().d_init(&d);
        }
        // Absent (checked under this write lock): insert with the readdir bookkeeping, so
        // that a later unlink or eviction finds the counts it expects.
        self.d_insert(parent, locked, name, d.clone(), guard);
        self.lru_add(&d);
        Ok(d.inode().is_some().then_some(d))
    }

    /// [`VfsInner::lookup_excl`] on a filesystem whose dentry cache is complete (memfs),
    /// with what a lockless lookup of `name` in `parent` saw (`probe`: the walk's, of a
    /// create's last name): if the directory's table has not changed since, that answer
    /// stands and nothing is looked up again under the lock. Also returns a probe for the
    /// change that follows ([`VfsInner::d_add_probed`], [`VfsInner::d_remove_probed`]):
    /// `probe`, or the one this lookup took. Any other filesystem: `lookup_excl`, no probe.
    /// The parent is borrowed: only the lookup of a filesystem that is not
    /// dcache-complete, which may cache a new dentry under it, takes a count on it.
    /// What it finds in a complete instance is borrowed from the table under `guard` (no
    /// count: it stays valid under the guard even once removed).
    pub(crate) fn lookup_excl_probed<'g>(
        &self,
        sb: &Arc<SuperBlock>,
        parent: ArcBorrow<'g, Dentry>,
        locked: &mut DirLocked,
        name: &[u8],
        probe: Option<Probe>,
        guard: &'g LocalGuard<'_>,
    ) -> Result<(Option<Found<'g>>, Option<Probe>)> {
        let dir = parent.get().dir().ok_or(Errno::ENOTDIR)?;
        if !sb.dcache_complete() {
            return Ok((self.lookup_excl(sb, &parent.to_arc(), locked, name, guard)?.map(Cow::Owned), None));
        }
        parent.inode().ok_or(Errno::ENOENT)?;
        // A complete instance's dentries need no revalidation, and a miss is certain.
        let (found, probe) = match probe.filter(|p| dir.children.still(p)) {
            Some(p) => (dir.children.probed(&p, guard), Some(p)),
            // Under the lock no rebuild step overlaps the lookup: its miss is certain.
            None => dir.children.get_probed(name, guard).unwrap_or((None, None)),
        };
        debug_assert!(found.is_none_or(|d| !d.needs_revalidate()));
        Ok((found.filter(|d| d.inode().is_some()).map(Cow::Borrowed), probe))
    }

    /// `d_invalidate`: drops the cached `name` in `parent` (caller holds `parent`'s lock
    /// exclusively) because the filesystem no longer vouches for it, and empties the cache
    /// below it. Returns `false`, dropping nothing, for a directory while anything is
    /// mounted in this filesystem (see [`SuperBlock`]'s `mountpoints`).
    fn d_invalidate(
        &self,
        sb: &SuperBlock,
        parent: &Dentry,
        locked: &mut DirLocked,
        name: &[u8],
        guard: &LocalGuard<'_>,
    ) -> bool {
        let Some(d) = parent.dir().and_then(|dir| dir.children.get(name, guard)).cloned() else { return true };
        if d.dir().is_some() && sb.mountpoints.load(Ordering::Relaxed) > 0 {
            return false;
        }
        counters::bump(|c| c.dentries_invalidated += 1);
        self.d_remove(parent, locked, name, guard);
        if let Some(dd) = d.dir() {
            self.d_prune(sb, &mut dd.lock.write(), dd);
        }
        true
    }

    /// Empties the cache below `dir`, the directory of a dentry just unhashed (removed,
    /// replaced or invalidated); caller holds its lock (`locked`). Its cached children are
    /// reachable only through it, and each holds it (as its parent) while its map holds
    /// them: without this the subtree would be a cycle, never freed. Children still in use
    /// (an open file, a cwd) keep what they hold. Locks go downwards only, one directory
    /// at a time below the caller's, as the lock order allows. `sb` is the directory's
    /// instance: what leaves the tree here leaves its path cache.
    pub(crate) fn d_prune(&self, sb: &SuperBlock, locked: &mut DirLocked, dir: &crate::core::dentry::Dir) {
        let _change = sb.names_change();
        locked.order.clear();
        let mut stack: Vec<Arc<Dentry>> = dir.children.drain(&self.rcu);
        while let Some(d) = stack.pop() {
            if let Some(dd) = d.dir() {
                let mut l = dd.lock.write();
                l.order.clear();
                stack.extend(dd.children.drain(&self.rcu));
            }
        }
    }

    /// Queues a new evictable dentry for eviction. The queue holds weak references, which
    /// keep a dead dentry's memory until the entry goes, and eviction only runs over the
    /// limits: so the queue is compacted (dead entries dropped) whenever it is more than
    /// twice the dentries alive, which keeps a churn of short-lived names from growing it
    /// without bound, at an amortized O(1) per insert.
    fn lru_add(&self, d: &Arc<Dentry>) {
        let mut lru = self.dcache_lru.lock();
        lru.push_back(Arc::downgrade(d));
        let c = &self.dcache_counts;
        let alive = c.positive.load(Ordering::Relaxed) + c.negative.load(Ordering::Relaxed);
        if lru.len() > 2 * alive + 1024 {
            lru.retain(|w| w.strong_count() > 0);
        }
    }

    /// Whether the evictable dentries are over their limits.
    #[inline]
    pub(crate) fn dcache_over(&self) -> bool {
        let c = &self.dcache_counts;
        let (pos, neg, ino) =
            (c.positive.load(Ordering::Relaxed), c.negative.load(Ordering::Relaxed), c.inodes.load(Ordering::Relaxed));
        (pos > self.config.dentry_limit || neg > self.config.negative_dentry_limit || ino > self.config.inode_limit)
            && pos + neg + ino >= self.shrink_retry_at.load(Ordering::Relaxed)
    }

    /// The counts an eviction pass brings the caches down to: 1/16 below the limits, so
    /// that a scan over the limit pays for a pass (the rename lock, a rename-sequence bump
    /// that makes overlapping walks retry) once per many new dentries, not once per each.
    fn dcache_targets(&self) -> (usize, usize, usize) {
        let below = |l: usize| l - l / 16;
        (below(self.config.dentry_limit), below(self.config.negative_dentry_limit), below(self.config.inode_limit))
    }

    /// Evicts unused cached dentries, oldest first, until the counts are within their
    /// limits (Linux's `prune_dcache_sb` under memory pressure). Called at the end of a
    /// locked-tier walk, which is where they are created. Unused: nothing but the
    /// parent's map holds it (these instances keep no readdir order), so no file, cwd,
    /// mount or child (a child holds its parent).
    ///
    /// Evicting a file or a negative dentry is invisible to walks: one that already read
    /// it answers what the host holds (unchanged, by hostfs's contract), one that misses
    /// it asks the host. Evicting a directory is not (a walk may stand in it, and its
    /// lookups there would find it dead), so that is done like a rename: under the rename
    /// lock, inside the rename sequence, and an overlapping walk is redone. Every lock is
    /// only tried (the caller may hold any of them): a busy one skips the candidate.
    pub(crate) fn shrink_dcache(&self) {
        if !self.dcache_over() {
            return;
        }
        let guard = self.rcu.pin();
        let mut budget = self.dcache_lru.lock().len();
        let (pos_target, neg_target, ino_target) = self.dcache_targets();
        let c = &self.dcache_counts;
        // Counts drop when the collector frees what was evicted; count evictions here.
        let (mut pos, mut neg, mut ino) =
            (c.positive.load(Ordering::Relaxed), c.negative.load(Ordering::Relaxed), c.inodes.load(Ordering::Relaxed));
        while budget > 0 && (pos > pos_target || neg > neg_target || ino > ino_target) {
            budget -= 1;
            let Some(w) = self.dcache_lru.lock().pop_front() else { break };
            counters::bump(|c| c.dcache_scanned += 1);
            let Some(d) = w.upgrade() else { continue };
            if d.is_dead() {
                continue;
            }
            let positive = d.inode().is_some();
            let wanted = if positive { pos > pos_target || ino > ino_target } else { neg > neg_target };
            if !wanted || !self.try_evict(&d, &guard) {
                self.dcache_lru.lock().push_back(Arc::downgrade(&d));
                continue;
            }
            if positive {
                pos -= 1;
                // Its inode goes with it unless something else holds it (a hard link's
                // other dentry, an open file, a caller).
                if d.inode().is_some_and(|i| Arc::strong_count(i) == 1) {
                    ino = ino.saturating_sub(1);
                }
            } else {
                neg -= 1;
            }
        }
        // Still over: what is over is in use. Try again only after the caches grew by a
        // sixteenth of a limit (or 64 entries), not at every walk.
        let retry_at = if pos > pos_target || neg > neg_target || ino > ino_target {
            let step = (self.config.dentry_limit.min(self.config.inode_limit) / 16).max(64);
            pos + neg + ino + step
        } else {
            0
        };
        self.shrink_retry_at.store(retry_at, Ordering::Relaxed);
    }

    /// Evicts `d` if it is unused (Linux's `__dentry_kill` of an LRU dentry): nothing but
    /// its parent's map holds it, it has no children, nothing is
    /// mounted on it. A directory goes like a rename (under the rename lock, inside the
    /// rename sequence: a walk may stand in it). Every lock is only tried (the caller may
    /// hold any of them); false, evicting nothing, when one is busy or `d` is in use.
    fn try_evict(&self, d: &Arc<Dentry>, guard: &LocalGuard<'_>) -> bool {
        // The map's count and ours: an instance whose dentries are evictable is not
        // dcache-complete, and keeps no readdir order (see `d_insert_probed`).
        let unused = 2;
        if Arc::strong_count(d) != unused || d.flags() & crate::core::dentry::DENTRY_MOUNTED != 0 {
            return false;
        }
        // Rename lock first, as the lock order says (directories only).
        let tree = match d.dir() {
            Some(_) => match self.rename_lock.try_lock() {
                Some(g) => Some(g),
                None => return false,
            },
            None => None,
        };
        let Some(parent) = d.parent_arc(guard) else { return false };
        let Some(pdir) = parent.dir() else { return false };
        let Some(mut pl) = pdir.lock.try_write() else { return false };
        // Parent before child.
        let cl = match d.dir() {
            Some(dd) => match dd.lock.try_write() {
                Some(g) => Some(g),
                None => return false,
            },
            None => None,
        };
        let name = d.name(guard);
        let still = pdir.children.get(name, guard).is_some_and(|x| Arc::ptr_eq(x, d));
        let childless = d.dir().is_none_or(|dd| dd.children.is_empty());
        if !still || !childless || Arc::strong_count(d) != unused {
            return false;
        }
        if tree.is_some() {
            let Ok(_w) = self.rename_seq.write_poisoning() else { return false };
            self.d_remove(&parent, &mut pl, name, guard);
        } else {
            self.d_remove(&parent, &mut pl, name, guard);
        }
        drop(cl);
        true
    }

    /// `d_add` for a new positive child: inserts it in the map and the readdir order.
    /// Caller holds the directory lock exclusively.
    pub(crate) fn d_add(
        &self,
        parent: &Arc<Dentry>,
        locked: &mut DirLocked,
        name: &[u8],
        inode: Arc<Inode>,
        guard: &LocalGuard<'_>,
    ) -> Arc<Dentry> {
        self.d_add_probed(ArcBorrow::from_arc(parent), locked, name, inode, None, guard)
    }

    /// [`VfsInner::d_add`] of the name `probe` was taken for (a miss, by
    /// [`VfsInner::lookup_excl_probed`] under this lock hold): put where the probe found
    /// room, with no lookup of its own, if the table has not changed since.
    pub(crate) fn d_add_probed(
        &self,
        parent: ArcBorrow<'_, Dentry>,
        locked: &mut DirLocked,
        name: &[u8],
        inode: Arc<Inode>,
        probe: Option<Probe>,
        guard: &LocalGuard<'_>,
    ) -> Arc<Dentry> {
        let d = Dentry::new_child(parent, name, Some(inode), &self.rcu);
        if d.needs_revalidate() {
            d.inode().expect("positive").sb().fs().d_init(&d);
        }
        self.d_insert_probed(parent.get(), locked, name, d.clone(), probe, guard);
        d
    }

    /// Inserts an existing dentry under `name` (d_add, the second half of d_move).
    pub(crate) fn d_insert(
        &self,
        parent: &Dentry,
        locked: &mut DirLocked,
        name: &[u8],
        d: Arc<Dentry>,
        guard: &LocalGuard<'_>,
    ) {
        self.d_insert_probed(parent, locked, name, d, None, guard);
    }

    fn d_insert_probed(
        &self,
        parent: &Dentry,
        locked: &mut DirLocked,
        name: &[u8],
        d: Arc<Dentry>,
        probe: Option<Probe>,
        _guard: &LocalGuard<'_>,
    ) {
        let dir = parent.dir().expect("parent is a directory");
        crate::core::fsnotify::d_instantiate_flags(parent, &d);
        // The readdir order is kept for complete instances only: the others' listings come
        // from their filesystem, and their dentries' `pos` is the filesystem's `d_time`.
        let complete = parent.inode().expect("directories are positive").sb().dcache_complete();
        if complete {
            let pos = locked.next_pos;
            locked.next_pos += 1;
            d.pos().store(pos, Ordering::Relaxed);
            if d.inode().is_some() {
                // The table's reference, inserted below, keeps it.
                locked.order.insert(pos, Ordered::new(&d));
            }
        }
        if let Some(old) = dir.children.insert_probed(probe, Name::new(name), d, &self.rcu) {
            if complete && old.inode().is_some() {
                locked.order.remove(old.pos().load(Ordering::Relaxed));
            }
            old.set_flag(DENTRY_DEAD);
            // Not for a complete instance, where a name is removed before another takes
            // its place (`d_unhash` marks that change). Should one be replaced: the map
            // retired its node before the change could be marked, so the dentry is held
            // until the readers pinned by then are gone (a path cache entry may still
            // answer with it until the mark; see `crate::walk::pathcache`).
            let sb = parent.inode().expect("directories are positive").sb();
            debug_assert!(!sb.dcache_complete(), "a complete directory's name replaced in place");
            if sb.dcache_complete() {
                drop(sb.names_change());
                self.rcu.defer_drop_arc(old);
            }
        }
    }

    /// `d_delete`: removes `name` from `parent` and marks the dentry dead.
    pub(crate) fn d_remove(
        &self,
        parent: &Dentry,
        locked: &mut DirLocked,
        name: &[u8],
        guard: &LocalGuard<'_>,
    ) -> Option<Arc<Dentry>> {
        self.d_remove_probed(parent, locked, name, None, guard)
    }

    /// [`VfsInner::d_remove`] of the name `probe` was taken for (a hit, by
    /// [`VfsInner::lookup_excl_probed`] under this lock hold): taken from the slot the
    /// probe found, with no lookup of its own, if the table has not changed since.
    pub(crate) fn d_remove_probed(
        &self,
        parent: &Dentry,
        locked: &mut DirLocked,
        name: &[u8],
        probe: Option<Probe>,
        guard: &LocalGuard<'_>,
    ) -> Option<Arc<Dentry>> {
        let old = self.d_unhash_probed(parent, locked, name, probe, guard)?;
        old.set_flag(DENTRY_DEAD);
        Some(old)
    }

    /// Takes `name` out of `parent`'s map and order, leaving the dentry alive (the first
    /// half of d_move).
    pub(crate) fn d_unhash(
        &self,
        parent: &Dentry,
        locked: &mut DirLocked,
        name: &[u8],
        guard: &LocalGuard<'_>,
    ) -> Option<Arc<Dentry>> {
        self.d_unhash_probed(parent, locked, name, None, guard)
    }

    fn d_unhash_probed(
        &self,
        parent: &Dentry,
        locked: &mut DirLocked,
        name: &[u8],
        probe: Option<Probe>,
        _guard: &LocalGuard<'_>,
    ) -> Option<Arc<Dentry>> {
        let dir = parent.dir().expect("parent is a directory");
        // Marked from before the map retires anything: see `SuperBlock::names_change`.
        let sb = parent.inode().expect("directories are positive").sb();
        let _change = sb.names_change();
        let old = dir.children.remove_probed(probe, name, &self.rcu)?;
        Self::unordered(sb, locked, &old);
        Some(old)
    }

    /// [`VfsInner::d_remove_probed`] for a caller that does not keep the dentry (unlink,
    /// rmdir): it is marked dead and the table's reference retired, with no count taken
    /// for the caller (one borrowed under the walk's guard is still valid). Whether `name`
    /// was there.
    pub(crate) fn d_delete_probed(
        &self,
        parent: &Dentry,
        locked: &mut DirLocked,
        name: &[u8],
        probe: Option<Probe>,
        _guard: &LocalGuard<'_>,
    ) -> bool {
        let dir = parent.dir().expect("parent is a directory");
        let sb = parent.inode().expect("directories are positive").sb();
        let _change = sb.names_change();
        dir.children.delete_probed(probe, name, &self.rcu, |old| {
            Self::unordered(sb, locked, old);
            old.set_flag(DENTRY_DEAD);
        })
    }

    /// A dentry left its directory's table: out of the readdir order too (kept for
    /// complete instances' positive dentries).
    fn unordered(sb: &SuperBlock, locked: &mut DirLocked, old: &Dentry) {
        if sb.dcache_complete() && old.inode().is_some() {
            locked.order.remove(old.pos().load(Ordering::Relaxed));
        }
    }
}
