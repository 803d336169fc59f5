//! The descriptor calls: `dup`, `dup2`, `dup3`, `close`, the close-on-exec bit,
//! `setrlimit(RLIMIT_NOFILE)`, and the lookups of a descriptor the other calls share.
//! Mirrors Linux's `fs/file.c`.

use crate::abi::errno::Result;
use crate::abi::flags::Fd;
use crate::core::file::{File, FileRef};
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
