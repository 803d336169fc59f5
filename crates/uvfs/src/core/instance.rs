//! `VfsInner`: the state of one instance that every call shares: configuration and fast
//! paths, the rename lock and sequence, the mount hash, the root mount, the bounded-cache
//! counts and eviction queue, the reclamation domain. Mirrors Linux's global VFS state
//! (`rename_lock`, `mount_lock`, `namespace_sem`, the dentry hash) and gVisor's
//! `VirtualFilesystem`, but: one per [`Vfs`](crate::Vfs), so instances share nothing.

use crate::abi::config::{FastPaths, VfsConfig};
use crate::core::dentry::Dentry;
use crate::core::mount::Mount;
use crate::core::namespace::MountTree;
use crate::sync::Mutex;
use crate::sync::rcu::Rcu;
use crate::sync::seqcount::SeqCount;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

/// Mount-table key: (parent mount id, mountpoint dentry address).
pub(crate) type MountKey = (crate::core::mount::MountId, usize);

pub(crate) struct VfsInner {
    /// Immutable: unique among the process's instances, never reused (the path cache
    /// keys its entries by it).
    pub(crate) id: u64,
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
    /// `namespace_sem`), and protects the list of mounts (see [`crate::core::namespace`]).
    pub(crate) rename_lock: Mutex<MountTree, { crate::sync::rank::RENAME }>,
    /// Mounts by mountpoint, probed locklessly when a dentry says it is mounted on.
    pub(crate) mounts: crate::sync::rhashtable::RHashTable<MountKey, Arc<Mount>>,
    /// Immutable: the root mount.
    pub(crate) root: Arc<Mount>,
    /// The evictable dentries alive (atomic counts, shared with the dentries).
    pub(crate) dcache_counts: Arc<crate::core::dentry::DcacheCounts>,
    /// Evictable dentries, oldest first (FIFO: a hit takes no lock and moves nothing).
    /// Leaf lock. Entries of dentries already freed or removed are skipped when reached,
    /// and compacted away when they are the majority (`lru_add`).
    pub(crate) dcache_lru: parking_lot::Mutex<std::collections::VecDeque<std::sync::Weak<Dentry>>>,
    /// Atomic: after an eviction pass that could not get within the limits (what is over
    /// is in use), the total count below which no pass is tried again (0: none), so a
    /// cache full of pinned entries is not rescanned by every walk.
    pub(crate) shrink_retry_at: AtomicUsize,
    /// Atomic: the pid the next process ([`Task`](crate::Task) made by `Vfs::task` or
    /// `fork`) gets; the first is 1.
    pub(crate) next_pid: std::sync::atomic::AtomicI32,
    /// The pipes of the fifos open in this instance.
    pub(crate) fifos: crate::core::pipe::Fifos,
    /// Atomic: set for good by the first `umount2(MNT_EXPIRE)` that marks a mount. Until
    /// then no walk looks at the mount it ends on to clear a mark (one load instead).
    pub(crate) expiry_used: std::sync::atomic::AtomicBool,
}

/// A new instance id: 1, 2, ...; never 0, which marks an empty path cache entry.
pub(crate) fn next_instance_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Drop for VfsInner {
    /// Tears the dentry trees down. A directory's children map and a child's parent
    /// pointer make a cycle, so without this the whole tree (and, for hostfs, every host
    /// descriptor it holds) would outlive the instance. Children maps are emptied from the
    /// roots down. What the instance retired is freed when its collector goes, with the
    /// last strong hold on it (this instance's, or a descriptor table's that is being
    /// dropped with its task): no guard of it can exist then. Files, inodes and inotify
    /// instances that outlive the instance hold the collector only weakly (see
    /// [`crate::sync::rcu`]), so nothing here waits for them, and nothing they still read is
    /// freed under them.
    fn drop(&mut self) {
        let mut stack: Vec<Arc<Dentry>> = vec![self.root.root().clone()];
        stack.extend(self.rename_lock.lock().take_mounts().iter().map(|m| m.root().clone()));
        while let Some(d) = stack.pop() {
            if let Some(dir) = d.dir() {
                dir.lock.write().order.clear();
                stack.extend(dir.children.drain(&self.rcu));
            }
        }
    }
}
