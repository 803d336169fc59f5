//! `File`: an open file description. Mirrors Linux's `struct file`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::dentry::Dentry;
use crate::flags::OpenFlags;
use crate::fsnotify::{self, EventMask};
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
    /// Atomic: the file still holds its open count on `inode` and its user count on `mnt`
    /// (and its writer count, if opened for writing); given back once, at the last close
    /// or at drop if it was never installed.
    counted: AtomicBool,
}

impl File {
    /// `ESTALE` if the inode's contents were evicted since the caller found it (it lost
    /// its last name meanwhile), or if a non-lazy umount took the mount away since: the
    /// caller walks again. `EROFS` if opened for writing on a mount made read-only since
    /// the caller checked. The file counts as a user of its mount (umount is EBUSY) and,
    /// opened for writing, as a writer (a read-only remount is EBUSY), as Linux's
    /// `do_dentry_open` with `FMODE_WRITER`.
    pub(crate) fn new(
        mnt: Arc<Mount>,
        dentry: Arc<Dentry>,
        inode: Arc<Inode>,
        flags: OpenFlags,
    ) -> crate::errno::Result<File> {
        if !flags.contains(OpenFlags::PATH) {
            inode.sb().fs().open(&inode)?;
        }
        inode.opened()?;
        if let Err(e) = mnt.get_user() {
            inode.closed();
            return Err(e);
        }
        if flags.writable()
            && let Err(e) = mnt.get_write_access()
        {
            mnt.put_user();
            inode.closed();
            return Err(e);
        }
        Ok(File {
            mnt,
            dentry,
            inode,
            flags: AtomicU32::new(flags.bits()),
            fds: AtomicU32::new(0),
            pos: Mutex::new(0),
            counted: AtomicBool::new(true),
        })
    }

    /// Gives back the inode's open count and the mount's user and writer counts, once.
    /// An inode that lost its last name is deleted now if this was its last open.
    fn put_counts(&self, fast: crate::config::FastPaths, guard: &crate::rcu::LocalGuard<'_>) {
        if self.counted.swap(false, Ordering::AcqRel) {
            if self.inode.closed() {
                fsnotify::inode_deleted(fast, &self.inode, guard);
            }
            if self.flags().writable() {
                self.mnt.put_write_access();
            }
            self.mnt.put_user();
        }
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
    pub(crate) fn release(&self, fast: crate::config::FastPaths) {
        let guard = self.inode.sb().rcu().pin();
        if !self.is_path() {
            let mask = if self.flags().writable() { EventMask::CLOSE_WRITE } else { EventMask::CLOSE_NOWRITE };
            fsnotify::notify_file(fast, &self.mnt, &self.dentry, &self.inode, mask.bits(), &guard);
        }
        self.put_counts(fast, &guard);
    }
}

impl Drop for File {
    /// A file that was never installed (its open failed after `new`, or the descriptor
    /// table was full) gives its counts back here; an installed one already did at its
    /// last close, which is what decides when a umount stops being EBUSY and when an
    /// unlinked inode is deleted (the memory is reclaimed later).
    fn drop(&mut self) {
        if *self.counted.get_mut() {
            let guard = self.inode.sb().rcu().pin();
            // The switches only choose how the notify check is made, not its outcome; the
            // instance's are not at hand here.
            self.put_counts(crate::config::FastPaths::all(), &guard);
        }
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File").field("inode", &self.inode).field("flags", &self.flags()).finish()
    }
}
