//! `Vfs`: one instance: the mount tree, the configuration, the reclamation domain, and
//! the dcache operations every namespace call shares (`d_add`, `d_delete`, `d_move`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::config::{FastPaths, VfsConfig};
use crate::cred::Credentials;
use crate::dentry::{DENTRY_DEAD, Dentry, DirLocked, Name};
use crate::errno::{Errno, Result};
use crate::inode::Inode;
use crate::memfs::{MemFs, MemFsLimits};
use crate::mount::{Mount, MountFlags};
use crate::namei::Pos;
use crate::namespace::MountTree;
use crate::rcu::{LocalGuard, Rcu, arc_from_ref};
use crate::seqcount::SeqCount;
use crate::superblock::SuperBlock;
use crate::sync::Mutex;
use crate::task::Task;

/// A VFS instance. Cheap to clone (shared).
#[derive(Clone)]
pub struct Vfs {
    pub(crate) inner: Arc<VfsInner>,
}

/// Mount-table key: (parent mount id, mountpoint dentry address).
pub(crate) type MountKey = (u64, usize);

pub(crate) struct VfsInner {
    /// Immutable: the reclamation domain.
    pub(crate) rcu: Rcu,
    /// Immutable: the configuration.
    pub(crate) config: VfsConfig,
    /// Immutable: `config.fast_paths`, kept at hand for the hot paths.
    pub(crate) fast: FastPaths,
    /// Bumped by every rename and mount change, under `rename_lock`; lockless walks
    /// validate against it (Linux's `rename_lock` seqlock and `mount_lock`).
    pub(crate) rename_seq: SeqCount,
    /// Serializes renames (Linux's `s_vfs_rename_mutex`) and mount changes (Linux's
    /// `namespace_sem`), and protects the list of mounts (see [`crate::namespace`]).
    pub(crate) rename_lock: Mutex<MountTree>,
    /// Mounts by mountpoint, probed locklessly when a dentry says it is mounted on.
    pub(crate) mounts: crate::rhashtable::RHashTable<MountKey, Arc<Mount>>,
    /// Immutable: the root mount.
    pub(crate) root: Arc<Mount>,
}

impl Vfs {
    /// A new instance whose root is an empty memfs.
    pub fn new(config: VfsConfig) -> Vfs {
        let rcu = Rcu::new();
        let fs =
            MemFs::with_limits(MemFsLimits { max_bytes: config.root_size_limit, max_inodes: config.root_inode_limit });
        let sb = SuperBlock::new(Box::new(fs), &rcu);
        let root_inode = sb.fs().root_inode(&sb).expect("memfs root");
        let root_dentry = Dentry::new_root(root_inode, &rcu);
        let root = Mount::new(1, sb, root_dentry, None, MountFlags::empty());
        root.set_attached(true);
        let mounts = crate::rhashtable::RHashTable::new();
        let tree = MountTree::new(root.clone());
        Vfs {
            inner: Arc::new(VfsInner {
                fast: config.fast_paths,
                config,
                rcu,
                rename_seq: SeqCount::new(),
                rename_lock: Mutex::new(tree),
                mounts,
                root,
            }),
        }
    }

    /// A task (process) with these credentials, cwd and root at the root of the tree,
    /// umask 022 and no open files.
    pub fn task(&self, creds: Credentials) -> Task {
        Task::new(self.inner.clone(), creds)
    }

    /// A root task.
    pub fn root_task(&self) -> Task {
        self.task(Credentials::root())
    }

    /// The fast paths in force.
    pub fn fast_paths(&self) -> FastPaths {
        self.inner.fast
    }

    /// The configuration.
    pub fn config(&self) -> &VfsConfig {
        &self.inner.config
    }
}

impl Default for Vfs {
    fn default() -> Self {
        Vfs::new(VfsConfig::default())
    }
}

impl VfsInner {
    /// The mount on `dentry` as seen from `mnt`, if any (lockless).
    #[inline]
    pub(crate) fn lookup_mount<'g>(
        &self,
        mnt: &Mount,
        dentry: &Dentry,
        guard: &'g LocalGuard<'_>,
    ) -> Option<&'g Mount> {
        self.mounts.get(&(mnt.id, dentry as *const Dentry as usize), guard).map(|m| &**m)
    }

    /// The locked-tier lookup: under the directory lock; asks the filesystem on a miss in
    /// a directory that is not complete, and caches its answer (positive or negative).
    pub(crate) fn lookup_locked<'g>(
        &self,
        cur: Pos<'g>,
        name: &[u8],
        guard: &'g LocalGuard<'_>,
    ) -> Result<Option<&'g Dentry>> {
        let dir = cur.dentry.dir().ok_or(Errno::ENOTDIR)?;
        let complete = cur.mnt.sb.fs().dcache_complete();
        {
            let _l = dir.lock.read();
            if let Some(d) = dir.children.get(name, guard) {
                return Ok(d.inode().map(|_| &**d));
            }
            if complete {
                return Ok(None);
            }
        }
        let l = dir.lock.write();
        if let Some(d) = dir.children.get(name, guard) {
            return Ok(d.inode().map(|_| &**d));
        }
        if cur.dentry.is_dead() {
            return Ok(None);
        }
        let dir_inode = cur.inode();
        let found = cur.mnt.sb.fs().lookup(&cur.mnt.sb, dir_inode, name)?;
        // SAFETY: `cur.dentry` is alive under `guard` and every dentry lives in an Arc.
        let parent = unsafe { arc_from_ref(cur.dentry) };
        let d = Dentry::new_child(&parent, name, found, &self.rcu);
        let d = dir.children.get_or_insert(Name::new(name), d, &self.rcu, guard);
        drop(l);
        Ok(d.inode().map(|_| &**d))
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
        let d = Dentry::new_child(parent, name, Some(inode), &self.rcu);
        self.d_insert(parent, locked, name, d.clone(), guard);
        d
    }

    /// Inserts an existing dentry under `name` (d_add, the second half of d_move).
    pub(crate) fn d_insert(
        &self,
        parent: &Dentry,
        locked: &mut DirLocked,
        name: &[u8],
        d: Arc<Dentry>,
        _guard: &LocalGuard<'_>,
    ) {
        let dir = parent.dir().expect("parent is a directory");
        crate::fsnotify::d_instantiate_flags(parent, &d);
        let pos = locked.next_pos;
        locked.next_pos += 1;
        d.cold.pos.store(pos, Ordering::Relaxed);
        if d.inode().is_some() {
            locked.order.insert(pos, d.clone());
            locked.count += 1;
        }
        if let Some(old) = dir.children.insert(Name::new(name), d, &self.rcu) {
            if old.inode().is_some() {
                locked.order.remove(&old.cold.pos.load(Ordering::Relaxed));
                locked.count -= 1;
            }
            old.set_flag(DENTRY_DEAD);
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
        let old = self.d_unhash(parent, locked, name, guard)?;
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
        _guard: &LocalGuard<'_>,
    ) -> Option<Arc<Dentry>> {
        let dir = parent.dir().expect("parent is a directory");
        let old = dir.children.remove(name, &self.rcu)?;
        if old.inode().is_some() {
            locked.order.remove(&old.cold.pos.load(Ordering::Relaxed));
            locked.count -= 1;
        }
        Some(old)
    }
}
