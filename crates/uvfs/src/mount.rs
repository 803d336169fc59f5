//! `Mount`: a filesystem instance attached at a dentry of a parent mount. Mirrors Linux's
//! `struct mount`.
//!
//! The walk tests one dentry flag (`DENTRY_MOUNTED`) per step; only when it is set does it
//! probe the mount table, a lockless map keyed by (parent mount, mountpoint dentry).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bitflags::bitflags;

use crate::dentry::Dentry;
use crate::superblock::SuperBlock;

bitflags! {
    /// Per-mount flags (`MS_*`/`MNT_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct MountFlags: u32 {
        /// Read-only: every write-type call gets EROFS.
        const RDONLY = 1;
        /// Ignore setuid/setgid bits.
        const NOSUID = 2;
        /// No device access.
        const NODEV = 4;
        /// No execution.
        const NOEXEC = 8;
        /// Do not update access times.
        const NOATIME = 1024;
    }
}

/// A mount. Only ever constructed as `Arc<Mount>`.
pub struct Mount {
    /// Immutable: mount id (as in mountinfo).
    pub(crate) id: u64,
    /// Immutable: the filesystem instance.
    pub(crate) sb: Arc<SuperBlock>,
    /// Immutable: the root dentry of this mount.
    pub(crate) root: Arc<Dentry>,
    /// Immutable: (parent mount, mountpoint); `None` for the root of the tree.
    pub(crate) parent: Option<(Arc<Mount>, Arc<Dentry>)>,
    /// Atomic: `MountFlags`; changed under the mount lock.
    flags: AtomicU32,
}

impl Mount {
    pub(crate) fn new(
        id: u64,
        sb: Arc<SuperBlock>,
        root: Arc<Dentry>,
        parent: Option<(Arc<Mount>, Arc<Dentry>)>,
        flags: MountFlags,
    ) -> Arc<Mount> {
        Arc::new(Mount { id, sb, root, parent, flags: AtomicU32::new(flags.bits()) })
    }

    /// Mount id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Flags.
    #[inline]
    pub fn flags(&self) -> MountFlags {
        MountFlags::from_bits_truncate(self.flags.load(Ordering::Acquire))
    }

    /// The filesystem instance.
    pub fn sb(&self) -> &Arc<SuperBlock> {
        &self.sb
    }

    /// The root dentry of the mount.
    pub fn root(&self) -> &Arc<Dentry> {
        &self.root
    }

    /// `mnt_want_write`: EROFS on a read-only mount.
    #[inline]
    pub fn want_write(&self) -> crate::Result<()> {
        if self.flags().contains(MountFlags::RDONLY) { Err(crate::Errno::EROFS) } else { Ok(()) }
    }
}
