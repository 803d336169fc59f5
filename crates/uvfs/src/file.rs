//! `File`: an open file description. Mirrors Linux's `struct file`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::dentry::Dentry;
use crate::flags::OpenFlags;
use crate::inode::Inode;
use crate::mount::Mount;
use crate::sync::Mutex;

/// An open file. Only ever constructed as `Arc<File>`.
pub struct File {
    /// Immutable: the mount it was opened through.
    pub(crate) mnt: Arc<Mount>,
    /// Immutable: the dentry it was opened through (may be unlinked since).
    pub(crate) dentry: Arc<Dentry>,
    /// Immutable: the inode (the dentry's, or an unnamed `O_TMPFILE` inode).
    pub(crate) inode: Arc<Inode>,
    /// Atomic: status flags (`O_APPEND`, `O_NONBLOCK`, ...) as given to open.
    flags: AtomicU32,
    /// Atomic: descriptors referring to this file (dup, fork); the last close releases.
    pub(crate) fds: AtomicU32,
    /// The file position (Linux's `f_pos` under `f_pos_lock`); for directories, the
    /// readdir cursor.
    pub(crate) pos: Mutex<u64>,
}

impl File {
    /// `ESTALE` if the inode's contents were evicted since the caller found it (it lost
    /// its last name meanwhile): the caller walks again.
    pub(crate) fn new(
        mnt: Arc<Mount>,
        dentry: Arc<Dentry>,
        inode: Arc<Inode>,
        flags: OpenFlags,
    ) -> crate::errno::Result<File> {
        inode.opened()?;
        Ok(File { mnt, dentry, inode, flags: AtomicU32::new(flags.bits()), fds: AtomicU32::new(0), pos: Mutex::new(0) })
    }

    /// Open flags.
    #[inline]
    pub fn flags(&self) -> OpenFlags {
        OpenFlags::from_bits_retain(self.flags.load(Ordering::Relaxed))
    }

    /// The inode.
    #[inline]
    pub fn inode(&self) -> &Arc<Inode> {
        &self.inode
    }

    /// The dentry.
    pub fn dentry(&self) -> &Arc<Dentry> {
        &self.dentry
    }

    /// The mount.
    pub fn mount(&self) -> &Arc<Mount> {
        &self.mnt
    }

    /// Whether opened with `O_PATH`.
    #[inline]
    pub fn is_path(&self) -> bool {
        self.flags().contains(OpenFlags::PATH)
    }

    /// Called when the last descriptor referring to this file is closed (Linux's `__fput`,
    /// minus the memory, which the collector frees later).
    pub(crate) fn release(&self) {
        self.inode.closed();
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File").field("inode", &self.inode).field("flags", &self.flags()).finish()
    }
}
