//! `read`, `write`, `pread`, `pwrite`, the vectored `readv`/`writev`/`preadv2`/`pwritev2`,
//! `lseek`, `fsync`. Mirrors Linux's `fs/read_write.c`.
//!
//! The descriptor is looked up under the collector's guard, with no lock and no
//! reference count on the file; the I/O runs while pinned.

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{OpenFlags, RwfFlags, Timespec, UIO_MAXIOV, Whence};
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
        self.write_with(file, pos, buf, RwfFlags::empty(), guard)
    }

    /// [`Task::write_at`] with a call's `RWF_APPEND`/`RWF_NOAPPEND`.
    fn write_with(
        &self,
        file: &File,
        pos: u64,
        buf: &[u8],
        rwf: RwfFlags,
        guard: &LocalGuard<'_>,
    ) -> Result<(u64, usize)> {
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
        let append = (file.flags().contains(OpenFlags::APPEND) && !rwf.contains(RwfFlags::NOAPPEND))
            || rwf.contains(RwfFlags::APPEND);
        let at = if append { WriteAt::end() } else { WriteAt::offset(pos) };
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

    /// `readv(2)`: `preadv2` at the file position, no flags.
    pub fn readv<'f>(&self, fd: impl Into<FileRef<'f>>, bufs: &mut [&mut [u8]]) -> Result<usize> {
        self.preadv2(fd, bufs, -1, RwfFlags::empty())
    }

    /// `writev(2)`: `pwritev2` at the file position, no flags.
    pub fn writev<'f>(&self, fd: impl Into<FileRef<'f>>, bufs: &[&[u8]]) -> Result<usize> {
        self.pwritev2(fd, bufs, -1, RwfFlags::empty())
    }

    /// `preadv2(2)`: fills the buffers in order from `off` (-1: the file position, which
    /// moves), stopping at the end of the file.
    pub fn preadv2<'f>(
        &self,
        fd: impl Into<FileRef<'f>>,
        bufs: &mut [&mut [u8]],
        off: i64,
        flags: RwfFlags,
    ) -> Result<usize> {
        if off < -1 {
            return Err(Errno::EINVAL);
        }
        self.with_file(fd.into(), |file, guard| {
            let total = iov_count(bufs.iter().map(|b| b.len()))?;
            if !file.flags().readable() {
                return Err(Errno::EBADF);
            }
            if total == 0 {
                return Ok(0);
            }
            let mut pos_lock = (off == -1).then(|| file.pos.lock());
            let start = pos_lock.as_deref().copied().unwrap_or(off as u64);
            rw_verify_area(start, total)?;
            rwf_check(file, flags)?;
            let mut done = 0usize;
            for b in bufs.iter_mut().filter(|b| !b.is_empty()) {
                let n = Task::read_at(file, start + done as u64, b)?;
                done += n;
                if n < b.len() {
                    break;
                }
            }
            if let Some(p) = pos_lock.as_deref_mut() {
                *p = start + done as u64;
            }
            drop(pos_lock);
            self.notify_io(file, done, EventMask::ACCESS, guard);
            Ok(done)
        })
    }

    /// `pwritev2(2)`: writes the buffers as one write (one append lands whole at the end)
    /// at `off` (-1: the file position, which moves). `RWF_APPEND` appends and
    /// `RWF_NOAPPEND` ignores `O_APPEND`, for this call; `RWF_DSYNC`/`RWF_SYNC` are
    /// already met (memfs has nothing to flush; hostfs syncs the host file).
    pub fn pwritev2<'f>(&self, fd: impl Into<FileRef<'f>>, bufs: &[&[u8]], off: i64, flags: RwfFlags) -> Result<usize> {
        if off < -1 {
            return Err(Errno::EINVAL);
        }
        // One buffer is written as it is; more are gathered, so that the write is one.
        let gathered;
        let data: &[u8] = match bufs {
            [] => &[],
            [one] => one,
            _ => {
                gathered = bufs.concat();
                &gathered
            }
        };
        self.with_file(fd.into(), |file, guard| {
            iov_count(bufs.iter().map(|b| b.len()))?;
            if !file.flags().writable() {
                return Err(Errno::EBADF);
            }
            if data.is_empty() {
                return Ok(0);
            }
            let mut pos_lock = (off == -1).then(|| file.pos.lock());
            let start = pos_lock.as_deref().copied().unwrap_or(off as u64);
            rw_verify_area(start, data.len())?;
            rwf_check(file, flags)?;
            let (at, n) = self.write_with(file, start, data, flags, guard)?;
            if let Some(p) = pos_lock.as_deref_mut() {
                *p = at + n as u64;
            }
            if n > 0 && flags.intersects(RwfFlags::DSYNC | RwfFlags::SYNC) {
                file.inode.sb().fs().fsync(&file.inode)?;
            }
            Ok(n)
        })
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

/// `import_iovec`'s checks: at most `UIO_MAXIOV` buffers, a total that fits `ssize_t`.
fn iov_count(mut lens: impl ExactSizeIterator<Item = usize>) -> Result<usize> {
    if lens.len() > UIO_MAXIOV {
        return Err(Errno::EINVAL);
    }
    lens.try_fold(0usize, |t, l| t.checked_add(l).filter(|&t| t <= isize::MAX as usize)).ok_or(Errno::EINVAL)
}

/// `kiocb_set_rw_flags`: unknown flags and the ones memfs cannot honour (`RWF_ATOMIC`
/// without `O_DIRECT` support, `RWF_DONTCACHE`) are EOPNOTSUPP, `APPEND` with `NOAPPEND`
/// EINVAL. A file without `read_iter`/`write_iter` (a directory) takes only `RWF_HIPRI`
/// (`do_loop_readv_writev`).
fn rwf_check(file: &File, flags: RwfFlags) -> Result<()> {
    if file.inode.file_type() != FileType::Regular && !(flags - RwfFlags::HIPRI).is_empty() {
        return Err(Errno::EOPNOTSUPP);
    }
    if flags.bits() & !RwfFlags::all().bits() != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if flags.contains(RwfFlags::APPEND | RwfFlags::NOAPPEND) {
        return Err(Errno::EINVAL);
    }
    // tmpfs files offer none of these (no FMODE_NOWAIT, no atomic writes, no
    // FOP_DONTCACHE); uvfs answers the same for every filesystem.
    if flags.intersects(RwfFlags::NOWAIT | RwfFlags::ATOMIC | RwfFlags::DONTCACHE) {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(())
}
