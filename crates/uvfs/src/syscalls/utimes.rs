//! `utimensat`. Mirrors Linux's `fs/utimes.c`.

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{AtFlags, TimeSpec};
use crate::core::file::{DirFd, FileRef};
use crate::core::inode::current_time;
use crate::core::permission::{MAY_WRITE, generic_permission, owner_or_capable};
use crate::core::superblock::SetAttr;
use crate::task::Task;
use crate::walk::namei::at_lookup;

impl Task {
    /// `utimensat(2)`: `times` is `[atime, mtime]`; `None` means both now.
    pub fn utimensat(&self, dirfd: DirFd, path: &[u8], times: Option<[TimeSpec; 2]>, flags: AtFlags) -> Result<()> {
        // Linux's order: two OMITs return before anything is checked, then the flags,
        // then the path, and only then the nanoseconds (`vfs_utimes`).
        if let Some([TimeSpec::Omit, TimeSpec::Omit]) = times {
            return Ok(());
        }
        if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let p = self.resolve(dirfd, path, at_lookup(flags))?;
        if times.is_some_and(|t| t.iter().any(|ts| matches!(ts, TimeSpec::At(x) if x.nsec >= 1_000_000_000))) {
            return Err(Errno::EINVAL);
        }
        let times = match times {
            Some([TimeSpec::Now, TimeSpec::Now]) => None,
            t => t,
        };
        p.mnt.want_write()?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        // `may_setattr`: explicit times (`ATTR_TIMES_SET`) are refused on an immutable or
        // append-only file; "now" (`ATTR_TOUCH`) only on an immutable one.
        match times {
            None if inode.is_immutable() => return Err(Errno::EPERM),
            None => {}
            Some(_) => crate::syscalls::attr::may_setattr(inode)?,
        }
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        if !owner_or_capable(creds, inode) {
            match times {
                None => generic_permission(creds, inode, MAY_WRITE, self.vfs.fast, &guard)?,
                Some(_) => return Err(Errno::EPERM),
            }
        }
        let (a, m) = times.map_or((TimeSpec::Now, TimeSpec::Now), |[a, m]| (a, m));
        // Applied and persisted under the inode lock, as every `setattr` (`notify_change`).
        let g = inode.lock.lock();
        let before = inode.attrs();
        let (at, mt) = inode.update_locked(|w| {
            // "Now" is the change's own stamp (`setattr_copy_mgtime`): a fine one if the
            // change time was seen, so that a `touch` right after a `stat` shows.
            let now = w.stamp_ctime(current_time());
            let pick = |t: TimeSpec| match t {
                TimeSpec::Now => Some(now),
                TimeSpec::Omit => None,
                TimeSpec::At(x) => Some(x),
            };
            let (at, mt) = (pick(a), pick(m));
            if let Some(t) = at {
                w.set_atime(t);
            }
            if let Some(t) = mt {
                w.set_mtime(t);
            }
            (at, mt)
        });
        // The times are the stamp's, known only once applied: a change the storage
        // refuses is taken back (under the same lock, so no other change came between).
        if let Err(e) = inode.sb().fs().setattr(inode, &SetAttr { atime: at, mtime: mt, ..Default::default() }) {
            inode.update_locked(|w| {
                w.set_atime(before.atime);
                w.set_mtime(before.mtime);
                w.set_ctime(before.ctime);
            });
            return Err(e);
        }
        drop(g);
        self.notify_attr(&p.mnt, &p.dentry, inode, crate::core::fsnotify::EventMask::ATTRIB);
        Ok(())
    }

    /// `futimens(3)`.
    pub fn futimens<'f>(&self, fd: impl Into<FileRef<'f>>, times: Option<[TimeSpec; 2]>) -> Result<()> {
        self.utimensat(DirFd::from(fd.into()), b"", times, AtFlags::EMPTY_PATH)
    }
}
