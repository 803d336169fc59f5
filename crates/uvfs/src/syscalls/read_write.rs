//! `read`, `write`, `pread`, `pwrite`, `lseek`, `fsync`. Mirrors Linux's
//! `fs/read_write.c`.
//!
//! The descriptor is looked up under the collector's guard, with no lock and no
//! reference count on the file; the I/O runs while pinned.

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{OpenFlags, Timespec, Whence};
use crate::abi::stat::FileType;
use crate::core::attr::file_remove_privs;
use crate::core::file::{File, FileRef};
use crate::core::fsnotify::{self, EventMask};
use crate::core::superblock::WriteAt;
use crate::sync::rcu::LocalGuard;
use crate::task::Task;

impl Task {
    /// Runs `f` on the file at `fd` under the guard that keeps it alive (no reference
    /// count); `f` uses the same guard for anything else it reads locklessly.
    fn with_file<R>(&self, fd: FileRef<'_>, f: impl FnOnce(&File, &LocalGuard<'_>) -> Result<R>) -> Result<R> {
        let guard = self.vfs.rcu.pin();
        let file = self.fget(fd, &guard)?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        f(file, &guard)
    }

    /// `fsnotify_access`/`fsnotify_modify` after a transfer of `n > 0` bytes.
    #[inline]
    fn notify_io(&self, file: &File, n: usize, mask: EventMask, guard: &LocalGuard<'_>) {
        if n > 0 {
            fsnotify::notify_file(self.vfs.fast, &file.mnt, &file.dentry, &file.inode, mask, guard);
        }
    }

    fn read_at(file: &File, off: u64, buf: &mut [u8]) -> Result<usize> {
        if !file.flags().readable() {
            return Err(Errno::EBADF);
        }
        rw_verify_area(off, buf.len())?;
        match file.inode.file_type() {
            FileType::Directory => Err(Errno::EISDIR),
            FileType::Regular => file.inode.sb().fs().read(&file.inode, off, buf),
            _ => Err(Errno::EINVAL),
        }
    }

    /// Writes at `pos` (the file position, or pwrite's offset), or at the end of the file
    /// for an `O_APPEND` file; returns where the data went and how much was written.
    fn write_at(&self, file: &File, pos: u64, buf: &[u8], guard: &LocalGuard<'_>) -> Result<(u64, usize)> {
        if !file.flags().writable() {
            return Err(Errno::EBADF);
        }
        if file.inode.file_type() != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        // Linux checks the position the call was made at before `O_APPEND` moves the write
        // to the end.
        rw_verify_area(pos, buf.len())?;
        if buf.is_empty() {
            return Ok((pos, 0));
        }
        let at = if file.flags().contains(OpenFlags::APPEND) { WriteAt::end() } else { WriteAt::offset(pos) };
        let inode = &file.inode;
        // `generic_write_checks` (EFBIG) as far as it can be made before the append offset
        // is known; the filesystem resolves `at` under its write lock.
        if !at.is_append() {
            at.resolve(0, buf.len())?;
        }
        // file_remove_privs: one flag test while nothing is there to remove (`S_NOSEC`).
        file_remove_privs(self.creds.load(guard).get(), inode)?;
        let (off, n) = inode.sb().fs().write(inode, at, buf)?;
        let now = Timespec::now();
        inode.update(|w| {
            w.set_mtime(now);
            w.set_ctime(now);
        });
        self.notify_io(file, n, EventMask::MODIFY, guard);
        Ok((off, n))
    }

    /// `read(2)`.
    pub fn read<'f>(&self, fd: impl Into<FileRef<'f>>, buf: &mut [u8]) -> Result<usize> {
        self.with_file(fd.into(), |file, guard| {
            let mut pos = file.pos.lock();
            let n = Task::read_at(file, *pos, buf)?;
            *pos += n as u64;
            drop(pos);
            self.notify_io(file, n, EventMask::ACCESS, guard);
            Ok(n)
        })
    }

    /// `write(2)`.
    pub fn write<'f>(&self, fd: impl Into<FileRef<'f>>, buf: &[u8]) -> Result<usize> {
        self.with_file(fd.into(), |file, guard| {
            let mut pos = file.pos.lock();
            let (off, n) = self.write_at(file, *pos, buf, guard)?;
            *pos = off + n as u64;
            Ok(n)
        })
    }

    /// `pread64(2)`.
    pub fn pread<'f>(&self, fd: impl Into<FileRef<'f>>, buf: &mut [u8], off: i64) -> Result<usize> {
        // Before the descriptor, as Linux.
        if off < 0 {
            return Err(Errno::EINVAL);
        }
        self.with_file(fd.into(), |file, guard| {
            let n = Task::read_at(file, off as u64, buf)?;
            self.notify_io(file, n, EventMask::ACCESS, guard);
            Ok(n)
        })
    }

    /// `pwrite64(2)`. As on Linux, with `O_APPEND` the data goes to the end of the file
    /// whatever `off` says.
    pub fn pwrite<'f>(&self, fd: impl Into<FileRef<'f>>, buf: &[u8], off: i64) -> Result<usize> {
        if off < 0 {
            return Err(Errno::EINVAL);
        }
        self.with_file(fd.into(), |file, guard| Ok(self.write_at(file, off as u64, buf, guard)?.1))
    }

    /// `lseek(2)`.
    pub fn lseek<'f>(&self, fd: impl Into<FileRef<'f>>, off: i64, whence: Whence) -> Result<u64> {
        self.with_file(fd.into(), |file, _| {
            let mut pos = file.pos.lock();
            let base: i64 = match whence {
                Whence::Set => 0,
                Whence::Cur => *pos as i64,
                Whence::End => {
                    if file.inode.is_dir() {
                        return Err(Errno::EINVAL);
                    }
                    file.inode.size() as i64
                }
            };
            // An offset past the largest file size is EINVAL, as Linux's `vfs_setpos`
            // (its sum wraps negative), not EOVERFLOW.
            let new = base.checked_add(off).ok_or(Errno::EINVAL)?;
            if new < 0 {
                return Err(Errno::EINVAL);
            }
            *pos = new as u64;
            Ok(new as u64)
        })
    }

    /// `fsync(2)`.
    pub fn fsync<'f>(&self, fd: impl Into<FileRef<'f>>) -> Result<()> {
        self.with_file(fd.into(), |file, _| file.inode.sb().fs().fsync(&file.inode))
    }

    /// `fdatasync(2)`.
    pub fn fdatasync<'f>(&self, fd: impl Into<FileRef<'f>>) -> Result<()> {
        self.fsync(fd)
    }
}

/// Linux's `rw_verify_area`: a transfer whose end would pass the largest offset is EINVAL
/// (checked before the filesystem's own EFBIG for a start at or past its largest size).
#[inline]
fn rw_verify_area(pos: u64, count: usize) -> Result<()> {
    match (pos as i64).checked_add(count as i64) {
        Some(end) if end >= 0 => Ok(()),
        _ => Err(Errno::EINVAL),
    }
}
