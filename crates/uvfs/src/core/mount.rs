//! `Mount`: a filesystem instance attached at a dentry of a parent mount. Mirrors Linux's
//! `struct mount`, but: no peer groups or propagation (the tree is in `namespace.rs`, the
//! calls in `syscalls/mount.rs`).
//!
//! The walk tests one dentry flag (`DENTRY_MOUNTED`) per step; only when it is set does it
//! probe the mount table, a lockless map keyed by (parent mount, mountpoint dentry). A
//! walk reads a mount's parent link (for `..` at its root) under its guard; both the table
//! and the parent link change only under the rename lock, inside the rename sequence, so
//! a walk that overlapped a mount change retries (Linux's `mount_lock` seqlock).
//!
//! # Users (what makes `umount` say EBUSY)
//! Linux counts every reference to a mount (`mnt_count`) and calls it busy when more than
//! the tree's own and the caller's are left. uvfs's walks take no references at all, and
//! a retired `Arc` lives on until the collector runs, so the `Arc` count says nothing. A
//! mount counts its **users** instead: open file descriptions ([`File`](crate::File),
//! from open to the last close) and the root and working directory of every task. Child
//! mounts make a mount busy too (they are found in the tree). Transient references (a
//! call that holds a path for its own length) are not users, as they are not in Linux
//! once the call returns.
//!
//! A walk finds a mount without a reference, so a non-lazy `umount` could race with an
//! open that walked into the mount and has not counted itself yet. The two meet with a
//! Dekker handshake on two `SeqCst` words, as Linux's `MNT_SYNC_UMOUNT` with
//! `legitimize_mnt`: the unmounter sets `DOOMED` then reads the user count; a new user
//! adds itself then reads the state. At least one sees the other: either `umount` sees
//! the user (EBUSY, and clears `DOOMED`), or the user sees `DOOMED` and waits for the
//! verdict: `UNMOUNTED` means what it walked to is gone (ESTALE: the caller walks again).
//! A lazy (`MNT_DETACH`) unmount only unhooks the mount; its users keep it alive, and it
//! is freed with its last `Arc`.
//!
//! # Writers (what makes a read-only remount say EBUSY)
//! Files open for writing are counted per mount in the same word as the read-only bit
//! (Linux's `mnt_writers` with `MNT_READONLY` and `MNT_WRITE_HOLD`), so "make read-only
//! unless there are writers" is one CAS. The users share that word too: an open counts
//! its user and its writer with one atomic add, and its release gives both back with one
//! (Linux keeps both counts per CPU instead). A writer added to a read-only mount is taken
//! back at once (EROFS), as Linux's `mnt_get_write_access` does; meanwhile it can only
//! make a remount read-only of a mount that is not yet read-only say EBUSY, as an open for
//! writing an instant earlier would have.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use bitflags::bitflags;

use crate::abi::errno::{Errno, Result};
use crate::core::dentry::Dentry;
use crate::core::superblock::SuperBlock;
use crate::sync::rcu::{ArcBorrow, LocalGuard, RcuBox};

bitflags! {
    /// Per-mount flags (`MS_*`/`MNT_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct MountFlags: u32 {
        /// Read-only: every write-type call gets EROFS.
        const RDONLY = 1;
        /// Ignore setuid/setgid bits (uvfs executes nothing, so this is only reported).
        const NOSUID = 2;
        /// No device access: opening a device node is EACCES.
        const NODEV = 4;
        /// No execution: `access(X_OK)` of a regular file is EACCES.
        const NOEXEC = 8;
        /// `MS_NOSYMFOLLOW`: a walk does not follow a symlink on this mount (ELOOP);
        /// `readlink` still reads it.
        const NOSYMFOLLOW = 256;
        /// Accesses move no access time (`noatime` instead of `relatime`).
        const NOATIME = 1024;
        /// Accesses move no directory's access time (`nodiratime`).
        const NODIRATIME = 2048;
        /// `MS_RELATIME`: the default access-time mode, named (a remount that names none
        /// keeps the mount's). Not kept as a flag: a mount is relatime unless `NOATIME` or
        /// `STRICTATIME`.
        const RELATIME = 1 << 21;
        /// `MS_STRICTATIME`: neither `noatime` nor `relatime`: every access moves the
        /// access time.
        const STRICTATIME = 1 << 24;
    }
}

impl MountFlags {
    /// The access-time flags: a remount that names one of them sets the mode anew.
    const ATIME: MountFlags =
        MountFlags::NOATIME.union(MountFlags::NODIRATIME).union(MountFlags::RELATIME).union(MountFlags::STRICTATIME);

    /// What a mount keeps of flags given to a mount or, with the mount's flags as
    /// `current`, to a remount (Linux's `path_mount`): `STRICTATIME` clears `NOATIME`, and
    /// a remount that names no access-time flag keeps the mount's access-time mode.
    pub(crate) fn kept(self, current: Option<MountFlags>) -> MountFlags {
        let mut f = self - MountFlags::RELATIME;
        if f.contains(MountFlags::STRICTATIME) {
            f -= MountFlags::NOATIME;
        }
        if let Some(cur) = current
            && !self.intersects(MountFlags::ATIME)
        {
            f = (f - MountFlags::ATIME) | (cur & MountFlags::ATIME);
        }
        f
    }
}

bitflags! {
    /// `umount2(2)` flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct UmountFlags: u32 {
        /// `MNT_FORCE`: accepted; memfs has nothing to abort, so it unmounts as without.
        const FORCE = 1;
        /// `MNT_DETACH`: unhook now, free when the last user goes.
        const DETACH = 2;
        /// `MNT_EXPIRE`: the first call marks an unused mount (EAGAIN), a second one
        /// unmounts it if nobody used it meanwhile.
        const EXPIRE = 4;
        /// `UMOUNT_NOFOLLOW`: do not follow a symlink in the last component.
        const NOFOLLOW = 8;
    }
}

/// A mount's id in its instance (`mnt_id`, `/proc/self/mountinfo`'s first field). The
/// root mount is 1; ids are not reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MountId(pub u64);

impl std::fmt::Display for MountId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// One line of the mount table, as `/proc/self/mountinfo` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountInfo {
    /// Mount id.
    pub id: MountId,
    /// Parent mount id (the root of the tree names itself).
    pub parent_id: MountId,
    /// Device number of the filesystem (`st_dev`).
    pub dev: u64,
    /// The mount's root within its filesystem (`/` unless a bind of a subtree).
    pub root: Vec<u8>,
    /// Where it is mounted, relative to the task's root.
    pub mount_point: Vec<u8>,
    /// Per-mount flags (`RDONLY` the mount's own: a mount of a read-only filesystem
    /// may lack it and still refuse writes).
    pub flags: MountFlags,
    /// Whether the filesystem instance as a whole is read-only (the super options' `ro`).
    pub fs_read_only: bool,
    /// Filesystem type (`"tmpfs"`).
    pub fs_type: &'static str,
}

/// The parent link of an attached mount: (parent mount, mountpoint dentry).
pub(crate) type MountParent = Option<(Arc<Mount>, Arc<Dentry>)>;

/// State bit: the mount is in the tree (reachable by path).
pub(crate) const ATTACHED: u32 = 1;
/// State bit: a non-lazy umount is deciding whether the mount is busy.
pub(crate) const DOOMED: u32 = 2;
/// State bit: a non-lazy umount took the mount away (it had no users then).
pub(crate) const UNMOUNTED: u32 = 4;

/// `counts` bit: read-only.
const RDONLY: u64 = 1 << 31;
/// `counts`: one writer (files open for writing), in the low 31 bits.
const WRITER: u64 = 1;
/// `counts`: the writers' bits.
const WRITERS: u64 = RDONLY - 1;
/// `counts`: one user (open files, task roots and cwds), in the high 32 bits.
const USER: u64 = 1 << 32;

/// A mount. Only ever constructed as `Arc<Mount>`.
pub struct Mount {
    /// Immutable: mount id (as in mountinfo).
    pub(crate) id: MountId,
    /// Immutable: the filesystem instance.
    pub(crate) sb: Arc<SuperBlock>,
    /// Immutable: the root dentry of this mount (a subdirectory, or a file, for a bind).
    pub(crate) root: Arc<Dentry>,
    /// (parent mount, mountpoint) while attached below another mount; `None` for the root
    /// of the tree and once detached. Cleared under the rename lock inside the rename
    /// sequence, the old value retired through the collector: a walk reads it under its
    /// guard.
    parent: RcuBox<MountParent>,
    /// Atomic: the per-mount `MountFlags`; written under the rename lock. Whether the
    /// mount can be written (its own `RDONLY` or its instance's) is `counts`' `RDONLY`.
    flags: AtomicU32,
    /// Atomic (`SeqCst`, see the module docs): users (open files and task roots/cwds here)
    /// in the high 32 bits; `RDONLY` and the number of files open for writing through this
    /// mount in the low 32.
    counts: AtomicU64,
    /// Atomic (`SeqCst`): `ATTACHED`, `DOOMED`, `UNMOUNTED`; changed under the rename lock.
    state: AtomicU32,
    /// Atomic: `MNT_EXPIRE`'s mark; set by `umount2(EXPIRE)`, cleared by any user.
    expiry_mark: AtomicBool,
    /// Notify marks on this mount (their mask is read by the notify fast path).
    pub(crate) marks: crate::core::fsnotify::Marks,
}

impl Mount {
    pub(crate) fn new(
        id: MountId,
        sb: Arc<SuperBlock>,
        root: Arc<Dentry>,
        parent: MountParent,
        flags: MountFlags,
    ) -> Arc<Mount> {
        let ro = if flags.contains(MountFlags::RDONLY) || sb.read_only() { RDONLY } else { 0 };
        // The root's contents live as long as the mount (a bind of a file or directory
        // that is then removed at its source); given back at the drop.
        if let Some(i) = root.inode() {
            i.hold();
        }
        Arc::new(Mount {
            id,
            sb,
            root,
            parent: RcuBox::new(parent),
            flags: AtomicU32::new(flags.kept(None).bits()),
            counts: AtomicU64::new(ro),
            state: AtomicU32::new(0),
            expiry_mark: AtomicBool::new(false),
            marks: Default::default(),
        })
    }

    /// Whether the root's contents were evicted before this mount could hold them (see
    /// [`Mount::new`]): its source lost its last name meanwhile.
    pub(crate) fn root_evicted(&self) -> bool {
        self.root.inode().is_some_and(|i| i.evicted())
    }

    /// Mount id.
    pub fn id(&self) -> MountId {
        self.id
    }

    /// The per-mount flags (a mount of a read-only instance may lack `RDONLY`:
    /// [`Mount::want_write`] says whether it can be written).
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

    /// The parent mount and the mountpoint, read under a guard (`None`: the root of the
    /// tree, or detached).
    #[inline]
    pub(crate) fn parent<'g>(&'g self, guard: &'g LocalGuard<'_>) -> Option<(&'g Mount, &'g Dentry)> {
        self.parent.load(guard).as_ref().map(|(m, d)| (&**m, &**d))
    }

    /// [`Mount::parent`] as borrows that can be counted.
    pub(crate) fn parent_borrow<'g>(
        &'g self,
        guard: &'g LocalGuard<'_>,
    ) -> Option<(ArcBorrow<'g, Mount>, ArcBorrow<'g, Dentry>)> {
        self.parent.load(guard).as_ref().map(|(m, d)| (ArcBorrow::from_arc(m), ArcBorrow::from_arc(d)))
    }

    /// Replaces the parent link (attach, detach). Caller holds the rename lock, inside the
    /// rename sequence.
    pub(crate) fn set_parent(&self, parent: MountParent, rcu: &crate::sync::rcu::Rcu) {
        self.parent.replace(parent, rcu);
    }

    /// `mnt_want_write`: EROFS on a read-only mount.
    #[inline]
    pub fn want_write(&self) -> Result<()> {
        if self.counts.load(Ordering::Acquire) & RDONLY != 0 { Err(Errno::EROFS) } else { Ok(()) }
    }

    /// Sets the per-mount flags (`MS_REMOUNT | MS_BIND`): EBUSY if it would make the mount
    /// read-only while files are open for writing through it. Caller holds the rename lock.
    pub(crate) fn set_flags(&self, flags: MountFlags) -> Result<()> {
        let flags = flags.kept(Some(self.flags()));
        if flags.contains(MountFlags::RDONLY) {
            // Already read-only: so it stays (a writer being taken back is no writer).
            self.counts
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                    (s & RDONLY != 0 || s & WRITERS == 0).then_some(s | RDONLY)
                })
                .map_err(|_| Errno::EBUSY)?;
        } else if !self.sb.read_only() {
            self.counts.fetch_and(!RDONLY, Ordering::SeqCst);
        }
        // A read-only instance's mount loses its own read-only flag and stays read-only
        // (Linux's `change_mount_ro_state`).
        self.flags.store(flags.bits(), Ordering::Release);
        Ok(())
    }

    /// Registers a user whose reference to this mount came from a walk (an open, a
    /// chdir). ESTALE if a non-lazy umount took the mount away after the walk found it
    /// (the caller walks again); see the module docs for the handshake.
    pub(crate) fn get_user(&self) -> Result<()> {
        self.get_file_user(false)
    }

    /// As [`Mount::get_user`], for a file being opened, and as its writer too if `writer`
    /// (Linux's `FMODE_WRITER`): EROFS on a read-only mount. One atomic add counts both.
    pub(crate) fn get_file_user(&self, writer: bool) -> Result<()> {
        let add = USER + if writer { WRITER } else { 0 };
        let before = self.counts.fetch_add(add, Ordering::SeqCst);
        loop {
            let s = self.state.load(Ordering::SeqCst);
            if s & UNMOUNTED != 0 {
                self.put_file_user(writer);
                return Err(Errno::ESTALE);
            }
            if s & DOOMED == 0 {
                if writer && before & RDONLY != 0 {
                    self.put_file_user(writer);
                    return Err(Errno::EROFS);
                }
                return Ok(());
            }
            // An unmounter is between setting DOOMED and its verdict, under the rename
            // lock and without blocking: a handful of instructions (yield in case it was
            // preempted there).
            std::thread::yield_now();
        }
    }

    /// Registers a user on behalf of one that already exists (fork copies a cwd): the
    /// mount cannot become unmounted meanwhile, since an unmounter would see that user.
    pub(crate) fn get_user_held(&self) {
        self.counts.fetch_add(USER, Ordering::SeqCst);
    }

    /// A user went away.
    pub(crate) fn put_user(&self) {
        self.put_file_user(false);
    }

    /// A user counted by [`Mount::get_file_user`] went away, with its writer if `writer`.
    pub(crate) fn put_file_user(&self, writer: bool) {
        self.touch();
        self.counts.fetch_sub(USER + if writer { WRITER } else { 0 }, Ordering::SeqCst);
    }

    /// Number of users (for tests and `umount`).
    pub fn users(&self) -> usize {
        (self.counts.load(Ordering::SeqCst) >> 32) as usize
    }

    /// Whether the mount is in the tree.
    pub fn is_attached(&self) -> bool {
        self.state.load(Ordering::SeqCst) & ATTACHED != 0
    }

    /// The unmounter's half of the handshake: true (and the mount is marked unmounted) if
    /// it had no users. Caller holds the rename lock.
    pub(crate) fn try_doom(&self) -> bool {
        self.state.fetch_or(DOOMED, Ordering::SeqCst);
        if self.users() > 0 {
            self.state.fetch_and(!DOOMED, Ordering::SeqCst);
            return false;
        }
        self.state.fetch_or(UNMOUNTED, Ordering::SeqCst);
        true
    }

    /// Sets or clears `ATTACHED`. Caller holds the rename lock.
    pub(crate) fn set_attached(&self, on: bool) {
        if on {
            self.state.fetch_or(ATTACHED, Ordering::SeqCst);
        } else {
            self.state.fetch_and(!ATTACHED, Ordering::SeqCst);
        }
    }

    /// A use of the mount ends (Linux's `mntput`): it clears `MNT_EXPIRE`'s mark, so
    /// that the next `umount2(EXPIRE)` only marks it again. Read first, so that the
    /// common case, no mark, writes nothing to a line every user of the mount reads.
    #[inline]
    pub(crate) fn touch(&self) {
        if self.expiry_mark.load(Ordering::Relaxed) {
            self.expiry_mark.store(false, Ordering::Relaxed);
        }
    }

    /// `MNT_EXPIRE`: sets the mark, returning whether it was already set.
    pub(crate) fn mark_expired(&self) -> bool {
        self.expiry_mark.swap(true, Ordering::Relaxed)
    }
}

impl Drop for Mount {
    /// The root's hold given back (taken by `Mount::new`): its contents go now if nothing else
    /// holds them and no name is left.
    fn drop(&mut self) {
        if let Some(i) = self.root.inode() {
            i.closed();
        }
    }
}

impl std::fmt::Debug for Mount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mount").field("id", &self.id).field("flags", &self.flags()).finish()
    }
}
