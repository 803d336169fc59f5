//! Instance configuration: the fast-path switches and cache bounds.

use bitflags::bitflags;

bitflags! {
    /// The fast paths of `shared/DESIGN.md`. Each one, when off, forces the general path
    /// that exists anyway for correctness; none selects code that exists only to be slow.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct FastPaths: u32 {
        /// Lockless, reference-free path walk (seed 004, lookup half). Off: every step
        /// takes the directory lock and the result takes references.
        const LOCKLESS_WALK = 1 << 0;
        /// Symlink bodies cached in the inode, readlink is one bounded copy (seed 002).
        /// Off: the filesystem is asked for the target every time.
        const SYMLINK_CACHE = 1 << 1;
        /// A failed open returns from the walk with no allocation (seed 003). Off: open
        /// allocates its file first and resolves through the locked lookup path.
        const FAILED_OPEN = 1 << 2;
        /// The lockless no-ACL permission check (seed 001). Off: the ACL is loaded under
        /// the inode lock on every check.
        const ACL = 1 << 3;
        /// The no-watcher notify check (seed 000). Off: every event goes to the dispatcher.
        const NOTIFY = 1 << 4;
        /// The lockless inode-cache probe (seed 004, hash half). Off: probe under the lock.
        const INODE_HASH = 1 << 5;
        /// A cached path answered by one probe of a per-thread table of whole paths
        /// (Tsai et al., "How to Get More Value From Your File System Directory Cache",
        /// SOSP 2015) when every directory on it may be searched by everyone; not one
        /// of the seeds. Needs `LOCKLESS_WALK` and `ACL` (its permission shortcut). Off:
        /// every walk goes component by component.
        const PATH_CACHE = 1 << 6;
    }
}

impl Default for FastPaths {
    fn default() -> Self {
        FastPaths::all()
    }
}

/// Where memfs keeps the new pages of a small write (under 16 pages; a bigger write's
/// always go to the process's shmem file, `fs/memfs/shmem.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SmallWritePages {
    /// On the heap: an in-process read of them is a copy from memory, where one from the
    /// shmem file is a `pread`; memory freed by a churn is reused without a system call.
    #[default]
    Heap,
    /// In the shmem file too. Fresh heap memory is zeroed by the kernel at its first touch
    /// before memfs overwrites it, which a `pwrite` into the file is not: during an untar
    /// through `uvfs mount` (writes of 10 KiB) that zeroing was 18 % of the server's CPU
    /// time, and with every page in the file the untar took 5-7 % less time (BENCHMARKS.md,
    /// "Small writes' pages in the shmem file"). The cost is a `pread` per read, which a
    /// FUSE server's READ round trip hides, so `uvfs mount` serves memfs so.
    Shmem,
}

/// Configuration of a [`Vfs`](crate::Vfs).
#[derive(Clone, Debug)]
pub struct VfsConfig {
    /// Fast paths in force (all by default).
    pub fast_paths: FastPaths,
    /// Size limit of the root memfs in bytes (tmpfs `size=`); `None`: tmpfs's default,
    /// half of RAM; `Some(0)`: unlimited.
    pub root_size_limit: Option<u64>,
    /// Inode limit of the root memfs (tmpfs `nr_inodes=`); `None`: tmpfs's default (the
    /// pages in half of RAM); `Some(0)`: unlimited.
    pub root_inode_limit: Option<u64>,
    /// Where the root memfs keeps a small write's new pages (the heap by default; a FUSE
    /// server prefers the shmem file, see [`SmallWritePages`]).
    pub root_small_write_pages: SmallWritePages,
    /// Events an inotify instance queues before `IN_Q_OVERFLOW` (`max_queued_events`).
    pub max_queued_events: usize,
    /// Watches one inotify instance may hold before ENOSPC (Linux's `max_user_watches`
    /// counts per user; uvfs per instance).
    pub max_user_watches: usize,
    /// Cached positive dentries of filesystems that are not dcache-complete (hostfs)
    /// beyond which unused ones are evicted, oldest first. (memfs dentries are the files
    /// themselves and never evicted.) Inodes of such filesystems live only as long as
    /// something uses them, so this bounds them too.
    pub dentry_limit: usize,
    /// As `dentry_limit`, for negative dentries (cached misses).
    pub negative_dentry_limit: usize,
    /// Inodes of filesystems that are not dcache-complete beyond which unused cached
    /// dentries are evicted (which frees the inodes only they held). Such an inode lives
    /// only while a dentry or an open file uses it, so `dentry_limit` bounds them too; this
    /// limit matters when it is the lower one. Inodes kept by open files are not evicted.
    pub inode_limit: usize,
}

impl Default for VfsConfig {
    fn default() -> Self {
        VfsConfig {
            fast_paths: FastPaths::all(),
            root_size_limit: None,
            root_inode_limit: None,
            root_small_write_pages: SmallWritePages::Heap,
            max_queued_events: 16384,
            max_user_watches: 65536,
            dentry_limit: 1 << 20,
            negative_dentry_limit: 1 << 18,
            inode_limit: 1 << 20,
        }
    }
}
