//! The inode-flag commands of `ioctl`: `FS_IOC_GETFLAGS` and `FS_IOC_SETFLAGS`, what
//! `lsattr` and `chattr` use. Mirrors `ioctl_getflags`/`ioctl_setflags` of Linux's
//! `fs/ioctl.c` with `vfs_fileattr_get`, `vfs_fileattr_set` and `fileattr_set_prepare` of
//! `fs/file_attr.c`, in their order of checks.
//!
//! The filesystem keeps the flags ([`FileSystem::fileattr_get`](crate::FileSystem::fileattr_get)) and
//! mirrors the ones the VFS enforces (immutable, append-only) in the inode, where every
//! check that needs them is one atomic load: a file nobody flags pays a load and a
//! branch where Linux tests `IS_IMMUTABLE`/`IS_APPEND`, nothing else.

use crate::abi::cred::Capabilities;
use crate::abi::errno::{Errno, Result};
use crate::abi::flags::FsFlags;
use crate::core::file::FileRef;
use crate::core::permission::owner_or_capable;
use crate::task::Task;

impl Task {
    /// `ioctl(fd, FS_IOC_GETFLAGS)`: the inode's flags (`FS_*_FL`). EBADF for an `O_PATH`
    /// descriptor; ENOTTY where the filesystem keeps none (hostfs; memfs's symlinks and
    /// special files, as tmpfs's).
    pub fn ioctl_getflags<'f>(&self, fd: impl Into<FileRef<'f>>) -> Result<FsFlags> {
        let file = self.file_arc(fd.into())?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        file.inode().sb().fs().fileattr_get(file.inode())
    }

    /// `ioctl(fd, FS_IOC_SETFLAGS)`: sets the inode's flags to `flags` (what `chattr`
    /// does after reading them), through any open descriptor, one open for reading only
    /// too. In Linux's order: EBADF for an `O_PATH` descriptor, EROFS on a read-only
    /// mount, ENOTTY where the filesystem keeps no flags, EPERM unless the caller owns
    /// the file or has `CAP_FOWNER`, EPERM for a change of `IMMUTABLE` or `APPEND`
    /// without `CAP_LINUX_IMMUTABLE`, EOPNOTSUPP for a flag the filesystem does not keep
    /// (memfs keeps tmpfs's: `IMMUTABLE`, `APPEND`, `NODUMP`, `NOATIME`). Updates ctime,
    /// also when nothing changed (as tmpfs).
    pub fn ioctl_setflags<'f>(&self, fd: impl Into<FileRef<'f>>, flags: FsFlags) -> Result<()> {
        let file = self.file_arc(fd.into())?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        file.mnt.want_write()?;
        let inode = file.inode();
        let fs = inode.sb().fs();
        // `vfs_fileattr_set` asks whether the filesystem has flags before anything else.
        fs.fileattr_get(inode)?;
        let creds = self.credentials();
        if !owner_or_capable(&creds, inode) {
            return Err(Errno::EPERM);
        }
        let _g = inode.lock.lock();
        let old = fs.fileattr_get(inode)?;
        // `fileattr_set_prepare`: only CAP_LINUX_IMMUTABLE changes these two.
        if (old ^ flags).intersects(FsFlags::IMMUTABLE | FsFlags::APPEND)
            && !creds.capable(Capabilities::LINUX_IMMUTABLE)
        {
            return Err(Errno::EPERM);
        }
        fs.fileattr_set(inode, flags)?;
        inode.update_locked(|w| w.stamp_ctime(crate::core::inode::current_time()));
        Ok(())
    }
}
