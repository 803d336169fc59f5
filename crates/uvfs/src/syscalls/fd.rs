//! The descriptor calls: `dup`, `dup2`, `dup3`, `close`, `fcntl`'s descriptor and
//! status-flag commands, the close-on-exec bit,
//! `setrlimit(RLIMIT_NOFILE)`, and the lookups of a descriptor the other calls share.
//! Mirrors Linux's `fs/file.c`.

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{FcntlCmd, Fd, FdFlags, OpenFlags};
use crate::core::file::{File, FileRef};
use crate::core::permission::owner_or_capable;
use crate::task::Task;
use std::sync::Arc;

impl Task {
    /// `dup(2)`.
    pub fn dup(&self, fd: Fd) -> Result<Fd> {
        let file = self.file(fd)?;
        self.files.install(file, 0, false)
    }

    /// `dup2(2)`: `new` refers to `old`'s file; if equal, only validates `old`.
    pub fn dup2(&self, old: Fd, new: Fd) -> Result<Fd> {
        let file = self.file(old)?;
        if old == new {
            return Ok(new);
        }
        self.files.install_at(file, new, false)
    }

    /// `dup3(2)`: as dup2, EINVAL if equal; `cloexec` sets close-on-exec.
    pub fn dup3(&self, old: Fd, new: Fd, cloexec: bool) -> Result<Fd> {
        if old == new {
            return Err(crate::Errno::EINVAL);
        }
        let file = self.file(old)?;
        self.files.install_at(file, new, cloexec)
    }

    /// `setrlimit(RLIMIT_NOFILE)` (soft and hard alike): the descriptor limit of this
    /// task's table.
    pub fn set_nofile_limit(&self, n: usize) -> Result<()> {
        self.files.set_limit(n)
    }

    /// `close(2)`.
    pub fn close(&self, fd: Fd) -> Result<()> {
        self.files.close(fd)
    }

    /// Whether `fd` has close-on-exec.
    pub fn cloexec(&self, fd: Fd) -> Result<bool> {
        self.files.cloexec(fd)
    }

    /// `fcntl(2)` with a descriptor or status-flag command; returns what Linux returns
    /// (the new descriptor, the flags, or 0). An `O_PATH` descriptor allows only the
    /// `F_DUPFD*`, `F_GETFD`, `F_SETFD` and `F_GETFL` commands (EBADF otherwise).
    pub fn fcntl(&self, fd: Fd, cmd: FcntlCmd) -> Result<i32> {
        let file = self.file(fd)?;
        match cmd {
            FcntlCmd::DupFd(min) | FcntlCmd::DupFdCloexec(min) => {
                let min = usize::try_from(min.0).ok().filter(|&m| m < self.files.limit()).ok_or(Errno::EINVAL)?;
                let cloexec = matches!(cmd, FcntlCmd::DupFdCloexec(_));
                Ok(self.files.install(file, min, cloexec)?.0)
            }
            FcntlCmd::GetFd => Ok(if self.files.cloexec(fd)? { FdFlags::CLOEXEC.bits() as i32 } else { 0 }),
            FcntlCmd::SetFd(fl) => self.files.set_cloexec(fd, fl.contains(FdFlags::CLOEXEC)).map(|()| 0),
            FcntlCmd::GetFl => {
                // What Linux keeps in `f_flags`: for O_PATH only the flags O_PATH honours;
                // else the open flags without the creation-only ones and close-on-exec (a
                // descriptor flag), plus O_LARGEFILE, which a 64-bit kernel forces.
                let fl = file.flags();
                if fl.contains(OpenFlags::PATH) {
                    return Ok((fl & (OpenFlags::PATH | OpenFlags::DIRECTORY | OpenFlags::NOFOLLOW)).bits() as i32);
                }
                let gone =
                    OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::NOCTTY | OpenFlags::TRUNC | OpenFlags::CLOEXEC;
                Ok(((fl - gone) | OpenFlags::LARGEFILE).bits() as i32)
            }
            FcntlCmd::SetFl(new) => {
                if file.is_path() {
                    return Err(Errno::EBADF);
                }
                // `setfl`: O_APPEND neither set nor cleared on an append-only file.
                if (new ^ file.flags()).contains(OpenFlags::APPEND) && file.inode().is_append() {
                    return Err(Errno::EPERM);
                }
                // O_DIRECT only where the file can do it (`FMODE_CAN_ODIRECT`): regular files.
                if new.contains(OpenFlags::DIRECT) && file.inode().file_type() != crate::abi::stat::FileType::Regular {
                    return Err(Errno::EINVAL);
                }
                let old = file.flags();
                // O_NOATIME is for the file's owner (or CAP_FOWNER), as at open.
                if new.contains(OpenFlags::NOATIME)
                    && !old.contains(OpenFlags::NOATIME)
                    && !owner_or_capable(&self.credentials(), file.inode())
                {
                    return Err(Errno::EPERM);
                }
                let mask =
                    OpenFlags::APPEND | OpenFlags::NONBLOCK | OpenFlags::DIRECT | OpenFlags::NOATIME | OpenFlags::ASYNC;
                file.set_status_flags(mask, new);
                Ok(0)
            }
        }
    }

    /// A counted reference to the file at `fd`.
    pub fn file(&self, fd: Fd) -> Result<Arc<crate::core::file::File>> {
        self.file_arc(FileRef::Fd(fd))
    }

    /// The file `fd` names, alive under `guard` (no reference count taken).
    #[inline]
    pub(crate) fn fget<'g>(&'g self, fd: FileRef<'g>, guard: &'g crate::sync::rcu::LocalGuard<'_>) -> Result<&'g File> {
        match fd {
            FileRef::Fd(fd) => Ok(self.files.get(fd, guard)?.get()),
            FileRef::File(f) => Ok(f),
        }
    }

    /// A counted reference to the file `fd` names.
    pub(crate) fn file_arc(&self, fd: FileRef<'_>) -> Result<Arc<File>> {
        match fd {
            FileRef::Fd(fd) => {
                let guard = self.vfs.rcu.pin();
                Ok(self.files.get(fd, &guard)?.to_arc())
            }
            FileRef::File(f) => Ok(f.clone()),
        }
    }
}
