//! `truncate`, `faccessat`, `fchmodat`, `fchownat` and their descriptor forms. Mirrors
//! `do_truncate`, `do_faccessat`, `chmod_common` and `chown_common` of Linux's
//! `fs/open.c`, with `notify_change`'s rules for what a chown drops.

use crate::abi::cred::{Capabilities, Credentials, Gid, Uid};
use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{AccessMode, AtFlags};
use crate::abi::stat::{FileType, S_IALLUGO, S_ISGID, S_ISUID, is_setgid_exec};
use crate::core::attr::file_remove_privs;
use crate::core::attr::kill_priv;
use crate::core::file::DirFd;
use crate::core::file::FileRef;
use crate::core::fsnotify::{self, EventMask};
use crate::core::inode::Inode;
use crate::core::inode::current_time;
use crate::core::mount::MountFlags;
use crate::core::permission::{MAY_WRITE, generic_permission, owner_or_capable};
use crate::core::superblock::{SetAttr, TruncateBy};
use crate::task::Task;
use crate::walk::namei::at_lookup;
use crate::walk::namei::{LookupFlags, Outcome};

impl Task {
    /// `fsnotify_change`: an attribute or size change, reported to the object and a
    /// watched parent.
    pub(crate) fn notify_attr(
        &self,
        mnt: &crate::core::mount::Mount,
        dentry: &crate::core::dentry::Dentry,
        inode: &Inode,
        mask: EventMask,
    ) {
        let guard = self.vfs.rcu.pin();
        fsnotify::notify_file(self.vfs.fast, mnt, dentry, inode, mask, false, &guard);
    }

    /// `do_truncate`: sets the size, clears privilege bits, updates times.
    /// The times move as `by` says (see [`TruncateBy`]); for `truncate(2)` of an unchanged
    /// size, as tmpfs's: when the file has data.
    pub(crate) fn do_truncate(&self, creds: &Credentials, inode: &Inode, size: u64, by: TruncateBy) -> Result<()> {
        let (old, had_data) = (inode.size(), inode.blocks() > 0);
        inode.sb().fs().truncate(inode, size, by)?;
        file_remove_privs(creds, inode)?;
        if old != size || by == TruncateBy::File || had_data {
            let now = current_time();
            inode.update(|w| w.stamp_cmtime(now));
        }
        Ok(())
    }

    /// `truncate(2)`.
    pub fn truncate(&self, path: &[u8], len: i64) -> Result<()> {
        if len < 0 {
            return Err(Errno::EINVAL);
        }
        let p = self.resolve(DirFd::Cwd, path, LookupFlags::FOLLOW)?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        match inode.file_type() {
            FileType::Directory => return Err(Errno::EISDIR),
            FileType::Regular => {}
            _ => return Err(Errno::EINVAL),
        }
        p.mnt.want_write()?;
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        generic_permission(creds, inode, MAY_WRITE, self.vfs.fast, &guard)?;
        if inode.is_append() {
            return Err(Errno::EPERM);
        }
        self.do_truncate(creds, inode, len as u64, TruncateBy::Path)?;
        self.notify_attr(&p.mnt, &p.dentry, inode, EventMask::MODIFY);
        Ok(())
    }

    /// `ftruncate(2)`.
    pub fn ftruncate<'f>(&self, fd: impl Into<FileRef<'f>>, len: i64) -> Result<()> {
        self.ftruncate_by(fd, len, TruncateBy::File)
    }

    /// [`Task::ftruncate`] with the times moved as `by` says: [`TruncateBy::Path`] for a
    /// server that truncates an open file for the kernel's `truncate(2)` (a FUSE SETATTR
    /// of the size alone), which moves them only when something changes.
    pub fn ftruncate_by<'f>(&self, fd: impl Into<FileRef<'f>>, len: i64, by: TruncateBy) -> Result<()> {
        if len < 0 {
            return Err(Errno::EINVAL);
        }
        let file = self.file_arc(fd.into())?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        if file.inode().file_type() != FileType::Regular || !file.flags().writable() {
            return Err(Errno::EINVAL);
        }
        // Only append-only: a file opened for writing before it became immutable can
        // still be truncated through that descriptor, as on Linux.
        if file.inode().is_append() {
            return Err(Errno::EPERM);
        }
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        self.do_truncate(creds, file.inode(), len as u64, by)?;
        self.notify_attr(&file.mnt, &file.dentry, file.inode(), EventMask::MODIFY);
        Ok(())
    }

    /// `faccessat2(2)`: `AT_EACCESS`, `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`.
    /// Lockless and allocation-free on cached names.
    pub fn faccessat(&self, dirfd: DirFd, path: &[u8], mode: AccessMode, flags: AtFlags) -> Result<()> {
        if !(AtFlags::EACCESS | AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let lf = at_lookup(flags);
        let fast = self.vfs.fast;
        // Without AT_EACCESS the whole call, walk included, runs with the real ids. Only a
        // task whose real and effective ids differ builds them (allocates).
        let alt = {
            let guard = self.vfs.rcu.pin();
            let creds = self.creds.load(&guard).get();
            (!flags.contains(AtFlags::EACCESS) && !creds.uses_own_ids_for_access()).then(|| creds.for_access())
        };
        self.walk_as(alt.as_ref(), dirfd, path, lf, |o| {
            let Outcome::Found(p) = o else { return Err(Errno::ENOENT) };
            let inode = p.inode();
            let guard = self.vfs.rcu.pin();
            let creds = match &alt {
                Some(c) => c,
                None => self.creds.load(&guard).get(),
            };
            if mode.contains(AccessMode::X_OK)
                && inode.file_type() == FileType::Regular
                && p.mnt.flags().contains(MountFlags::NOEXEC)
            {
                return Err(Errno::EACCES);
            }
            generic_permission(creds, inode, mode.bits() & 7, fast, &guard)?;
            let special = matches!(
                inode.file_type(),
                FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice
            );
            if mode.contains(AccessMode::W_OK) && !special {
                p.mnt.want_write()?;
            }
            Ok(())
        })
    }

    /// `access(2)`.
    pub fn access(&self, path: &[u8], mode: AccessMode) -> Result<()> {
        self.faccessat(DirFd::Cwd, path, mode, AtFlags::empty())
    }

    /// `fchmodat2(2)`: `AT_SYMLINK_NOFOLLOW` (EOPNOTSUPP on a symlink, as Linux) and
    /// `AT_EMPTY_PATH`.
    pub fn fchmodat(&self, dirfd: DirFd, path: &[u8], mode: u32, flags: AtFlags) -> Result<()> {
        if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let p = self.resolve(dirfd, path, at_lookup(flags))?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        if inode.file_type() == FileType::Symlink {
            return Err(Errno::EOPNOTSUPP);
        }
        p.mnt.want_write()?;
        self.chmod_common(inode, mode)?;
        self.notify_attr(&p.mnt, &p.dentry, inode, EventMask::ATTRIB);
        Ok(())
    }

    /// `fchmod(2)`.
    pub fn fchmod<'f>(&self, fd: impl Into<FileRef<'f>>, mode: u32) -> Result<()> {
        let file = self.file_arc(fd.into())?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        file.mnt.want_write()?;
        self.chmod_common(file.inode(), mode)?;
        self.notify_attr(&file.mnt, &file.dentry, file.inode(), EventMask::ATTRIB);
        Ok(())
    }

    fn chmod_common(&self, inode: &Inode, mode: u32) -> Result<()> {
        may_setattr(inode)?;
        let creds = self.credentials();
        if !owner_or_capable(&creds, inode) {
            return Err(Errno::EPERM);
        }
        let mut m = mode & S_IALLUGO;
        if !creds.in_group(Gid(inode.gid())) && !creds.capable(Capabilities::FSETID) {
            m &= !S_ISGID;
        }
        let _g = inode.lock.lock();
        // The storage first, as Linux's `->setattr`: a change it refuses is not shown.
        inode.sb().fs().setattr(inode, &SetAttr { mode: Some(m), ..Default::default() })?;
        inode.update_locked(|w| {
            w.set_mode(m);
            w.stamp_ctime(current_time());
        });
        // The access ACL's mask (or group entry), owner and other entries follow the mode.
        crate::core::acl::posix_acl_chmod_locked(inode, m)
    }

    /// `fchownat(2)`: `None` leaves an id unchanged (`-1`).
    pub fn fchownat(
        &self,
        dirfd: DirFd,
        path: &[u8],
        uid: Option<Uid>,
        gid: Option<Gid>,
        flags: AtFlags,
    ) -> Result<()> {
        if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let p = self.resolve(dirfd, path, at_lookup(flags))?;
        p.mnt.want_write()?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        self.chown_common(inode, uid, gid)?;
        self.notify_attr(&p.mnt, &p.dentry, inode, EventMask::ATTRIB);
        Ok(())
    }

    /// `fchown(2)`.
    pub fn fchown<'f>(&self, fd: impl Into<FileRef<'f>>, uid: Option<Uid>, gid: Option<Gid>) -> Result<()> {
        let file = self.file_arc(fd.into())?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        file.mnt.want_write()?;
        self.chown_common(file.inode(), uid, gid)?;
        self.notify_attr(&file.mnt, &file.dentry, file.inode(), EventMask::ATTRIB);
        Ok(())
    }

    fn chown_common(&self, inode: &Inode, uid: Option<Uid>, gid: Option<Gid>) -> Result<()> {
        // `chown(-1, -1)` changes no id (`ATTR_CTIME` only): allowed, as on Linux.
        if uid.is_some() || gid.is_some() {
            may_setattr(inode)?;
        }
        let creds = self.credentials();
        let owner = creds.uid.0 == inode.uid();
        let can_chown = creds.capable(Capabilities::CHOWN);
        if let Some(u) = uid
            && !(owner && u.0 == inode.uid())
            && !can_chown
        {
            return Err(Errno::EPERM);
        }
        if let Some(g) = gid
            && !(owner && (g.0 == inode.gid() || creds.in_group(g)))
            && !can_chown
        {
            return Err(Errno::EPERM);
        }
        // `chown_common` + `notify_change`: a non-directory loses setuid, and setgid when
        // group-executable or when the caller is not in its group. Dropping a bit is a mode
        // change, which needs the owner (EPERM otherwise, even for `-1, -1`) and keeps
        // setgid only for a member of the (new) group.
        let in_group_or_capable = |g: u32| creds.in_group(Gid(g)) || creds.capable(Capabilities::FSETID);
        let old = inode.mode();
        let mut mode = old;
        if !inode.is_dir() {
            mode &= !S_ISUID;
            if is_setgid_exec(mode) || (mode & S_ISGID != 0 && !in_group_or_capable(inode.gid())) {
                mode &= !S_ISGID;
            }
        }
        if mode != old {
            if !owner_or_capable(&creds, inode) {
                return Err(Errno::EPERM);
            }
            if !in_group_or_capable(gid.map_or(inode.gid(), |g| g.0)) {
                mode &= !S_ISGID;
            }
        }
        // `ATTR_KILL_PRIV`: a chown of a non-directory takes its file capability too.
        if !inode.is_dir() {
            kill_priv(inode)?;
        }
        let now = current_time();
        // Persisted, then applied, under the inode lock, as every `setattr`
        // (`notify_change`): a change the storage refuses is not shown.
        let _g = inode.lock.lock();
        // The dropped bits are persisted with the owner: the storage's own chown may not
        // drop them (a host chown of `-1, -1`, or by a caller with CAP_FSETID).
        inode.sb().fs().setattr(
            inode,
            &SetAttr {
                uid: uid.map(|u| u.0),
                gid: gid.map(|g| g.0),
                mode: (mode != old).then_some(mode & !crate::abi::stat::S_IFMT),
                ..Default::default()
            },
        )?;
        inode.update_locked(|w| {
            w.set_mode(mode);
            if let Some(u) = uid {
                w.set_uid(u.0);
            }
            if let Some(g) = gid {
                w.set_gid(g.0);
            }
            w.stamp_ctime(now);
        });
        Ok(())
    }
}

/// `may_setattr` for a change of mode, owner, group or explicit times: EPERM for an
/// immutable or append-only inode, before whose-file-is-it is asked.
pub(crate) fn may_setattr(inode: &Inode) -> Result<()> {
    if inode.is_immutable_or_append() { Err(Errno::EPERM) } else { Ok(()) }
}
