//! `File`: an open file description. Mirrors Linux's `struct file`, but: it can be held
//! without any descriptor ([`Task::openat_file`](crate::Task::openat_file)) and is released
//! when its last holder goes, and there are no `file_operations`: the calls dispatch on the
//! inode's type.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::abi::flags::{Fd, OpenFlags};
use crate::core::dentry::Dentry;
use crate::core::fsnotify::{self, EventMask};
use crate::core::inode::Inode;
use crate::core::mount::Mount;
use crate::sync::Mutex;

/// The directory argument of the `*at` calls.
#[derive(Clone, Copy, Debug)]
pub enum DirFd<'a> {
    /// `AT_FDCWD`: relative to the task's working directory.
    Cwd,
    /// A file descriptor of the task.
    Fd(Fd),
    /// An open file held outside any descriptor table ([`Task::openat_file`]): what a
    /// server that names files by handle (the FUSE frontend) walks from, with no
    /// descriptor to allocate or look up.
    ///
    /// [`Task::openat_file`]: crate::Task::openat_file
    File(&'a Arc<File>),
}

impl From<Fd> for DirFd<'_> {
    fn from(fd: Fd) -> Self {
        DirFd::Fd(fd)
    }
}

impl<'a> From<&'a Arc<File>> for DirFd<'a> {
    fn from(f: &'a Arc<File>) -> Self {
        DirFd::File(f)
    }
}

/// The file argument of the descriptor-taking calls (`read`, `fstat`, `getdents`, ...):
/// a descriptor of the task, or an open file held outside any descriptor table.
#[derive(Clone, Copy, Debug)]
pub enum FileRef<'a> {
    /// A file descriptor of the task.
    Fd(Fd),
    /// A file from [`Task::openat_file`](crate::Task::openat_file).
    File(&'a Arc<File>),
}

impl From<Fd> for FileRef<'_> {
    fn from(fd: Fd) -> Self {
        FileRef::Fd(fd)
    }
}

impl<'a> From<&'a Arc<File>> for FileRef<'a> {
    fn from(f: &'a Arc<File>) -> Self {
        FileRef::File(f)
    }
}

impl<'a> From<FileRef<'a>> for DirFd<'a> {
    fn from(f: FileRef<'a>) -> Self {
        match f {
            FileRef::Fd(fd) => DirFd::Fd(fd),
            FileRef::File(f) => DirFd::File(f),
        }
    }
}

/// An open file. Only ever constructed as `Arc<File>`.
pub struct File {
    /// Immutable: the mount it was opened through.
    pub(crate) mnt: Arc<Mount>,
    /// Immutable: the dentry it was opened through (may be unlinked since), always a
    /// positive one: the file's inode is its inode ([`File::inode`]), which a dentry never
    /// changes, so the file holds no count of its own on the inode (as Linux's `f_inode`
    /// is the dentry's, uncounted): one atomic fewer at each open and at each close.
    pub(crate) dentry: Arc<Dentry>,
    /// Atomic: status flags (`O_APPEND`, `O_NONBLOCK`, ...) as given to open.
    flags: AtomicU32,
    /// Atomic: descriptors referring to this file (dup, fork); the last close releases.
    pub(crate) fds: AtomicU32,
    /// The file position (Linux's `f_pos` under `f_pos_lock`); for directories, the
    /// readdir cursor.
    pub(crate) pos: Mutex<u64, { crate::sync::rank::FILE_POS }>,
    /// Atomic: the file still holds its open count on `inode` and its user count on `mnt`
    /// (and its writer count, if opened for writing); given back once, at the last close
    /// or at drop if it was never installed.
    counted: AtomicBool,
    /// Atomic: the open completed and was announced (`FS_OPEN`), so its release announces
    /// the close: at the last close of its descriptors, or when the last `Arc` of a file
    /// held outside any table goes.
    announced: AtomicBool,
    /// Atomic, set once by its opener: writes through this file leave the inode's times
    /// alone (Linux's `FMODE_NOCMTIME`), because someone else stamps them: a FUSE server's
    /// handles under the writeback cache, whose kernel owns mtime and ctime.
    nocmtime: AtomicBool,
    /// Set once at open, before the file is shared: the pipe of a fifo, which this file
    /// joined as reader and/or writer (its access mode) and leaves at its release.
    pub(crate) pipe: Option<Arc<crate::core::pipe::Pipe>>,
}

impl File {
    /// Writes through this file no longer stamp the inode's mtime and ctime (Linux's
    /// `FMODE_NOCMTIME`): for an opener that sets them itself, as a FUSE server under the
    /// writeback cache does with the times its kernel sends.
    pub fn set_nocmtime(&self) {
        self.nocmtime.store(true, Ordering::Relaxed);
    }

    /// A write through this file changed its contents: stamps the inode's mtime and ctime,
    /// unless its opener stamps them itself (Linux's `file_update_time`, which honours
    /// `FMODE_NOCMTIME`).
    pub(crate) fn update_time(&self) {
        if !self.nocmtime.load(Ordering::Relaxed) {
            let now = crate::core::inode::current_time();
            self.inode().update(|w| w.stamp_cmtime(now));
        }
    }

    /// How a read through this file moves the access time: [`Inode::atime_mode`], and
    /// never with `O_NOATIME`.
    #[inline]
    pub(crate) fn atime_mode(&self) -> Option<bool> {
        if self.flags().contains(OpenFlags::NOATIME) { None } else { self.inode().atime_mode(&self.mnt) }
    }

    /// The file was read or listed (`file_accessed`): its access time moves as
    /// [`File::atime_mode`] says.
    #[inline]
    pub(crate) fn accessed(&self) {
        if let Some(strict) = self.atime_mode() {
            self.inode().touch_atime_due(strict);
        }
    }

    /// `ESTALE` if the inode's contents were evicted since the caller found it (it lost
    /// its last name meanwhile), or if a non-lazy umount took the mount away since: the
    /// caller walks again. `EROFS` if opened for writing on a mount made read-only since
    /// the caller checked. The file counts as a user of its mount (umount is EBUSY) and,
    /// opened for writing, as a writer (a read-only remount is EBUSY), as Linux's
    /// `do_dentry_open` with `FMODE_WRITER`.
    /// `dentry` is positive (ENOENT if not): the file is of its inode.
    pub(crate) fn new(mnt: Arc<Mount>, dentry: Arc<Dentry>, flags: OpenFlags) -> crate::abi::errno::Result<File> {
        let inode = dentry.inode().ok_or(crate::abi::errno::Errno::ENOENT)?;
        let fs_opened = !flags.contains(OpenFlags::PATH);
        if fs_opened {
            inode.sb().fs().open(inode, flags)?;
        }
        // Undoes the filesystem's open if a later step fails.
        let release = |inode: &Inode| {
            if fs_opened {
                inode.sb().fs().release(inode);
            }
        };
        if let Err(e) = inode.opened() {
            release(inode);
            return Err(e);
        }
        if let Err(e) = mnt.get_file_user(flags.writable()) {
            release(inode);
            inode.closed();
            return Err(e);
        }
        Ok(File {
            mnt,
            dentry,
            flags: AtomicU32::new(flags.bits()),
            fds: AtomicU32::new(0),
            pos: Mutex::new(0),
            counted: AtomicBool::new(true),
            announced: AtomicBool::new(false),
            nocmtime: AtomicBool::new(false),
            pipe: None,
        })
    }

    /// The file is made for one descriptor, which its opener installs with
    /// [`FdTable::install_counted`](crate::core::fdtable::FdTable::install_counted) or a
    /// reservation: counted now, before the file is shared, without an atomic add.
    pub(crate) fn count_first_fd(&mut self) {
        *self.fds.get_mut() = 1;
    }

    /// The open completed: `fsnotify_open`, and from now on its release is a close.
    pub(crate) fn announce_open(&self, fast: crate::abi::config::FastPaths) {
        self.notify(fast, EventMask::OPEN, true);
        self.announced.store(true, Ordering::Release);
    }

    /// MODIFY of the truncation its open did (`O_TRUNC`), after its OPEN.
    pub(crate) fn announce_truncated(&self, fast: crate::abi::config::FastPaths) {
        // `notify_change`'s, carried by dentry.
        self.notify(fast, EventMask::MODIFY, false);
    }

    /// An event on the open file, if anyone may want it: only then is the reclamation
    /// domain reached (a count taken and dropped) and a guard pinned.
    fn notify(&self, fast: crate::abi::config::FastPaths, mask: EventMask, by_path: bool) {
        let inode = self.inode();
        if !self.is_path() && fsnotify::file_event_wanted(fast, &self.mnt, &self.dentry, inode, mask) {
            let rcu = inode.sb().rcu();
            let guard = rcu.pin();
            fsnotify::notify_file(fast, &self.mnt, &self.dentry, inode, mask, by_path, &guard);
        }
    }

    /// Gives back the filesystem's open (`FileSystem::release`), the inode's open count and
    /// the mount's user and writer counts, once. An inode that lost its last name is
    /// deleted now if this was its last open.
    fn put_counts(&self, fast: crate::abi::config::FastPaths) {
        if self.counted.swap(false, Ordering::AcqRel) {
            if let Some(p) = &self.pipe {
                p.release(self.flags().readable(), self.flags().writable());
            }
            let inode = self.inode();
            if !self.is_path() {
                inode.sb().fs().release(inode);
            }
            if inode.closed() {
                let rcu = inode.sb().rcu();
                let guard = rcu.pin();
                fsnotify::inode_deleted(fast, inode, &guard);
            }
            self.mnt.put_file_user(self.flags().writable());
        }
    }

    /// Open flags.
    #[inline]
    pub fn flags(&self) -> OpenFlags {
        OpenFlags::from_bits_retain(self.flags.load(Ordering::Relaxed))
    }

    /// `F_SETFL`: replaces the status flags `F_SETFL` may change (`mask`) with `new`'s,
    /// atomically (two concurrent calls each keep the other's untouched bits right).
    pub(crate) fn set_status_flags(&self, mask: OpenFlags, new: OpenFlags) {
        let _ = self
            .flags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| Some((old & !mask.bits()) | (new & mask).bits()));
    }

    /// The inode.
    #[inline]
    pub fn inode(&self) -> &Arc<Inode> {
        match self.dentry.inode() {
            Some(i) => i,
            // `File::new` took only a positive dentry, and a dentry's inode never changes.
            None => unreachable!("a file of a negative dentry"),
        }
    }

    /// The dentry.
    pub fn dentry(&self) -> &Arc<Dentry> {
        &self.dentry
    }

    /// The mount.
    pub fn mount(&self) -> &Arc<Mount> {
        &self.mnt
    }

    /// The file's identity as an owner of OFD and `flock` locks: its address, unique
    /// while it lives (its locks go at its release, before the memory can be reused).
    #[inline]
    pub(crate) fn lock_id(&self) -> usize {
        std::ptr::from_ref(self) as usize
    }

    /// Whether opened with `O_PATH`.
    #[inline]
    pub fn is_path(&self) -> bool {
        self.flags().contains(OpenFlags::PATH)
    }

    /// Called when the last descriptor referring to this file is closed (Linux's `__fput`,
    /// minus the memory, which the collector frees later).
    pub(crate) fn release(&self, fast: crate::abi::config::FastPaths) {
        // Its OFD and `flock` locks (`locks_remove_file`; one pointer test if the inode
        // was never locked).
        crate::core::locks::remove_file(self.inode(), self.lock_id());
        self.notify(
            fast,
            if self.flags().writable() { EventMask::CLOSE_WRITE } else { EventMask::CLOSE_NOWRITE },
            true,
        );
        self.put_counts(fast);
    }
}

impl Drop for File {
    /// A file that was never installed (its open failed after `new`, or the descriptor
    /// table was full) gives its counts back here, and one held outside any table
    /// (`Task::openat_file`) is released here (close event included); an installed one
    /// already was at its last close, which is what decides when a umount stops being
    /// EBUSY and when an unlinked inode is deleted (the memory is reclaimed later).
    fn drop(&mut self) {
        if *self.counted.get_mut() {
            // The switches only choose how the notify check is made, not its outcome; the
            // instance's are not at hand here.
            if *self.announced.get_mut() {
                // Held outside any table (`Task::openat_file`): this was its last user.
                self.release(crate::abi::config::FastPaths::all());
            } else {
                self.put_counts(crate::abi::config::FastPaths::all());
            }
        }
    }
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File").field("inode", self.inode()).field("flags", &self.flags()).finish()
    }
}
