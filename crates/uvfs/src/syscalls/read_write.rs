//! `read`, `write`, `pread`, `pwrite`, the vectored `readv`/`writev`/`preadv2`/`pwritev2`,
//! `lseek`, `fsync`. Mirrors Linux's `fs/read_write.c`.
//!
//! The descriptor is looked up under the collector's guard, with no lock and no
//! reference count on the file; the I/O runs while pinned.

use crate::abi::errno::{Errno, Result};
use std::sync::Arc;

use crate::abi::flags::{CopyRangeFlags, MAX_RW_COUNT, OpenFlags, RwfFlags, UIO_MAXIOV, Whence};
use crate::abi::limits::MAX_LFS_FILESIZE;
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

    /// [`Task::with_file`] for the calls whose I/O may wait (a fifo's): a fifo is not run
    /// under the guard but handed back counted ([`Io::Pipe`]), for its I/O to run with no
    /// guard held, so that a blocked reader or writer delays no reclamation.
    fn with_file_or_pipe<R>(
        &self,
        fd: FileRef<'_>,
        f: impl FnOnce(&File, &LocalGuard<'_>) -> Result<R>,
    ) -> Result<Io<R>> {
        let guard = self.vfs.rcu.pin();
        let file = self.fget(fd, &guard)?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        if file.pipe.is_none() {
            return f(file, &guard).map(Io::Done);
        }
        Ok(Io::Pipe(match fd {
            FileRef::Fd(n) => self.files.get(n, &guard)?.to_arc(),
            FileRef::File(a) => a.clone(),
        }))
    }

    /// A read of a fifo into `bufs` in order (`pipe_read`): one transfer, no position.
    fn pipe_read(&self, file: &File, bufs: &mut [&mut [u8]], rwf: RwfFlags) -> Result<usize> {
        if !file.flags().readable() {
            return Err(Errno::EBADF);
        }
        let pipe = Task::pipe_of(file)?;
        let nonblock = file.flags().contains(OpenFlags::NONBLOCK) || rwf.contains(RwfFlags::NOWAIT);
        let n = match bufs {
            [one] => pipe.read(one, nonblock)?,
            _ => {
                let total = bufs.iter().map(|b| b.len()).sum();
                let mut tmp = vec![0u8; total];
                let n = pipe.read(&mut tmp, nonblock)?;
                let mut rest = &tmp[..n];
                for b in bufs.iter_mut() {
                    let k = b.len().min(rest.len());
                    b[..k].copy_from_slice(&rest[..k]);
                    rest = &rest[k..];
                }
                n
            }
        };
        // `pipe_read`: an access when something was read.
        if n > 0 {
            file.accessed();
        }
        let guard = self.vfs.rcu.pin();
        self.notify_io(file, n, EventMask::ACCESS, &guard);
        Ok(n)
    }

    /// A write to a fifo (`pipe_write`), with no guard held while it waits for room.
    fn pipe_write(&self, file: &File, buf: &[u8], rwf: RwfFlags) -> Result<usize> {
        if !file.flags().writable() {
            return Err(Errno::EBADF);
        }
        let n = Task::pipe_transfer(file, buf, rwf)?;
        let guard = self.vfs.rcu.pin();
        self.notify_io(file, n, EventMask::MODIFY, &guard);
        Ok(n)
    }

    /// Writes to a fifo's pipe and stamps its times (the caller notifies).
    fn pipe_transfer(file: &File, buf: &[u8], rwf: RwfFlags) -> Result<usize> {
        let nonblock = file.flags().contains(OpenFlags::NONBLOCK) || rwf.contains(RwfFlags::NOWAIT);
        let n = Task::pipe_of(file)?.write(buf, nonblock)?;
        if n > 0 {
            file.update_time();
        }
        Ok(n)
    }

    /// `fsnotify_access`/`fsnotify_modify` after a transfer of `n > 0` bytes.
    #[inline]
    fn notify_io(&self, file: &File, n: usize, mask: EventMask, guard: &LocalGuard<'_>) {
        let (fast, inode) = (self.vfs.fast, file.inode());
        // A fifo's reads and writes report nothing (its open and close do): Linux 6.18,
        // checked with inotify on a fifo in /dev/shm. Asked only when someone may want
        // the event, so unwatched I/O pays nothing for it.
        if n > 0 && fsnotify::file_event_wanted(fast, &file.mnt, &file.dentry, inode, mask) && file.pipe.is_none() {
            fsnotify::notify_file(fast, &file.mnt, &file.dentry, inode, mask, true, guard);
        }
    }

    /// The pipe of an open fifo (joined at open).
    fn pipe_of(file: &File) -> Result<&crate::core::pipe::Pipe> {
        file.pipe.as_deref().ok_or(Errno::EBADF)
    }

    /// `FMODE_PREAD`/`FMODE_PWRITE`: a fifo has no offsets (ESPIPE).
    fn positioned(file: &File) -> Result<()> {
        match file.inode().file_type() {
            FileType::Fifo => Err(Errno::ESPIPE),
            _ => Ok(()),
        }
    }

    /// Reads a regular file (or a fifo) at `off`, and marks the access
    /// (`file_accessed`).
    fn read_at(file: &File, off: u64, buf: &mut [u8]) -> Result<usize> {
        if !file.flags().readable() {
            return Err(Errno::EBADF);
        }
        rw_verify_area(off, buf.len())?;
        match file.inode().file_type() {
            FileType::Directory => Err(Errno::EISDIR),
            FileType::Regular => {
                // A read is an access, also one of no bytes or at the end (tmpfs's
                // `shmem_file_read_iter` ends in `file_accessed`). A filesystem whose
                // storage moves the access time itself is told when it must not.
                let (inode, fs) = (file.inode(), file.inode().sb().fs());
                let Some(strict) = file.atime_mode() else {
                    return fs.read_keeping_atime(inode, off, buf);
                };
                let n = fs.read(inode, off, buf)?;
                inode.touch_atime_due(strict);
                Ok(n)
            }
            FileType::Fifo => Task::pipe_of(file)?.read(buf, file.flags().contains(OpenFlags::NONBLOCK)),
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
        if file.inode().file_type() == FileType::Fifo {
            let n = Task::pipe_transfer(file, buf, rwf)?;
            self.notify_io(file, n, EventMask::MODIFY, guard);
            return Ok((pos, n));
        }
        if file.inode().file_type() != FileType::Regular {
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
        let inode = file.inode();
        // `generic_write_checks` (EFBIG) as far as it can be made before the append offset
        // is known; the filesystem resolves `at` under its write lock.
        if !at.is_append() {
            at.resolve(0, buf.len())?;
        }
        // file_remove_privs: one flag test while nothing is there to remove (`S_NOSEC`).
        file_remove_privs(self.creds.load(guard).get(), inode)?;
        let (off, n) = inode.sb().fs().write(inode, at, buf)?;
        file.update_time();
        self.notify_io(file, n, EventMask::MODIFY, guard);
        Ok((off, n))
    }

    /// `read(2)`.
    pub fn read<'f>(&self, fd: impl Into<FileRef<'f>>, buf: &mut [u8]) -> Result<usize> {
        let io = self.with_file_or_pipe(fd.into(), |file, guard| {
            let mut pos = file.pos.lock();
            let n = Task::read_at(file, *pos, buf)?;
            *pos += n as u64;
            drop(pos);
            self.notify_io(file, n, EventMask::ACCESS, guard);
            Ok(n)
        })?;
        match io {
            Io::Done(n) => Ok(n),
            // A stream: no position, and no lock a blocked reader would hold.
            Io::Pipe(file) => self.pipe_read(&file, &mut [buf], RwfFlags::empty()),
        }
    }

    /// `write(2)`.
    pub fn write<'f>(&self, fd: impl Into<FileRef<'f>>, buf: &[u8]) -> Result<usize> {
        let io = self.with_file_or_pipe(fd.into(), |file, guard| {
            let mut pos = file.pos.lock();
            let (off, n) = self.write_at(file, *pos, buf, guard)?;
            *pos = off + n as u64;
            Ok(n)
        })?;
        match io {
            Io::Done(n) => Ok(n),
            Io::Pipe(file) => self.pipe_write(&file, buf, RwfFlags::empty()),
        }
    }

    /// `pread64(2)`.
    pub fn pread<'f>(&self, fd: impl Into<FileRef<'f>>, buf: &mut [u8], off: i64) -> Result<usize> {
        // Before the descriptor, as Linux.
        if off < 0 {
            return Err(Errno::EINVAL);
        }
        self.with_file(fd.into(), |file, guard| {
            Task::positioned(file)?;
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
        self.with_file(fd.into(), |file, guard| {
            Task::positioned(file)?;
            Ok(self.write_at(file, off as u64, buf, guard)?.1)
        })
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
        let io = self.with_file_or_pipe(fd.into(), |file, guard| {
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
        })?;
        match io {
            Io::Done(n) => Ok(n),
            Io::Pipe(file) => {
                // One read of the pipe, scattered (a stream: no position).
                if off != -1 {
                    Task::positioned(&file)?;
                }
                let total = iov_count(bufs.iter().map(|b| b.len()))?;
                if !file.flags().readable() {
                    return Err(Errno::EBADF);
                }
                if total == 0 {
                    return Ok(0);
                }
                rwf_check(&file, flags)?;
                self.pipe_read(&file, bufs, flags)
            }
        }
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
        let io = self.with_file_or_pipe(fd.into(), |file, guard| {
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
                file.inode().sb().fs().fsync(file.inode())?;
            }
            Ok(n)
        })?;
        match io {
            Io::Done(n) => Ok(n),
            Io::Pipe(file) => {
                if off != -1 {
                    Task::positioned(&file)?;
                }
                iov_count(bufs.iter().map(|b| b.len()))?;
                if !file.flags().writable() {
                    return Err(Errno::EBADF);
                }
                if data.is_empty() {
                    return Ok(0);
                }
                rwf_check(&file, flags)?;
                self.pipe_write(&file, data, flags)
            }
        }
    }

    /// `lseek(2)`.
    pub fn lseek<'f>(&self, fd: impl Into<FileRef<'f>>, off: i64, whence: Whence) -> Result<u64> {
        self.with_file(fd.into(), |file, _| {
            Task::positioned(file)?;
            let mut pos = file.pos.lock();
            let base: i64 = match whence {
                Whence::Set => 0,
                Whence::Cur => *pos as i64,
                Whence::End => {
                    if file.inode().is_dir() {
                        return Err(Errno::EINVAL);
                    }
                    file.inode().size() as i64
                }
                Whence::Data | Whence::Hole => {
                    let at = seek_hole_data(file, off, whence == Whence::Hole)?;
                    *pos = at;
                    return Ok(at);
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

    /// `copy_file_range(2)`: copies up to `len` bytes from `fd_in` at `*off_in` (or its
    /// position) to `fd_out` at `*off_out` (or its position), both regular files of one
    /// superblock (EXDEV otherwise, as Linux for filesystems without their own
    /// `->copy_file_range`). The offsets given, or the positions, move by what was copied.
    /// memfs shares whole pages copy-on-write; the rest goes through a buffer as Linux's
    /// splice fallback. Checks as `generic_copy_file_checks`.
    pub fn copy_file_range<'a, 'b>(
        &self,
        fd_in: impl Into<FileRef<'a>>,
        off_in: Option<&mut i64>,
        fd_out: impl Into<FileRef<'b>>,
        off_out: Option<&mut i64>,
        len: usize,
        flags: CopyRangeFlags,
    ) -> Result<usize> {
        let fin = self.file_arc(fd_in.into())?;
        if fin.is_path() {
            return Err(Errno::EBADF);
        }
        let fout = self.file_arc(fd_out.into())?;
        if fout.is_path() {
            return Err(Errno::EBADF);
        }
        if !flags.is_empty() {
            return Err(Errno::EINVAL);
        }
        let pos_in = off_in.as_deref().copied().unwrap_or_else(|| *fin.pos.lock() as i64);
        let pos_out = off_out.as_deref().copied().unwrap_or_else(|| *fout.pos.lock() as i64);
        let (ti, to) = (fin.inode().file_type(), fout.inode().file_type());
        if ti == FileType::Directory || to == FileType::Directory {
            return Err(Errno::EISDIR);
        }
        if ti != FileType::Regular || to != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        if !fin.flags().readable() || !fout.flags().writable() || fout.flags().contains(OpenFlags::APPEND) {
            return Err(Errno::EBADF);
        }
        if !Arc::ptr_eq(fin.inode().sb(), fout.inode().sb()) {
            return Err(Errno::EXDEV);
        }
        // No copy into an immutable file, even through a descriptor opened before.
        if fout.inode().is_immutable() {
            return Err(Errno::EPERM);
        }
        // The checks are made on the offsets as the kernel's unsigned sums see them.
        let count = len as u64;
        let (ui, uo) = (pos_in as u64, pos_out as u64);
        if ui.checked_add(count).is_none() || uo.checked_add(count).is_none() {
            return Err(Errno::EOVERFLOW);
        }
        let size_in = fin.inode().size() as i64;
        let mut count = if pos_in >= size_in { 0 } else { count.min((size_in as u64).wrapping_sub(ui)) };
        // generic_write_check_limits
        if pos_out >= MAX_LFS_FILESIZE as i64 {
            return Err(Errno::EFBIG);
        }
        count = count.min(MAX_LFS_FILESIZE - uo);
        if Arc::ptr_eq(fin.inode(), fout.inode())
            && (pos_out as u64).wrapping_add(count) as i64 > pos_in
            && pos_out < (pos_in as u64).wrapping_add(count) as i64
        {
            return Err(Errno::EINVAL);
        }
        let count = count as usize;
        rw_verify_area(ui, count)?;
        rw_verify_area(uo, count)?;
        if count == 0 {
            return Ok(0);
        }
        let n = self.copy_data(&fin, ui, &fout, uo, count.min(MAX_RW_COUNT))?;
        match off_in {
            Some(o) => *o = pos_in + n as i64,
            None => *fin.pos.lock() = ui + n as u64,
        }
        match off_out {
            Some(o) => *o = pos_out + n as i64,
            None => *fout.pos.lock() = uo + n as u64,
        }
        Ok(n)
    }

    /// `sendfile(2)` between files: copies up to `count` bytes of `in_fd` from `*offset`
    /// (which moves; without it the file position moves) to `out_fd` at its position.
    /// Any two filesystems. Checks as `do_sendfile` and `do_splice_direct`.
    pub fn sendfile<'a, 'b>(
        &self,
        out_fd: impl Into<FileRef<'a>>,
        in_fd: impl Into<FileRef<'b>>,
        offset: Option<&mut i64>,
        count: usize,
    ) -> Result<usize> {
        let fin = self.file_arc(in_fd.into())?;
        if fin.is_path() || !fin.flags().readable() {
            return Err(Errno::EBADF);
        }
        if offset.is_some() {
            Task::positioned(&fin)?;
        }
        let pos = offset.as_deref().copied().unwrap_or_else(|| *fin.pos.lock() as i64);
        rw_verify_area(pos as u64, count)?;
        if pos < 0 {
            return Err(Errno::EINVAL);
        }
        let mut count = count.min(MAX_RW_COUNT);
        let fout = self.file_arc(out_fd.into())?;
        if fout.is_path() || !fout.flags().writable() {
            return Err(Errno::EBADF);
        }
        let max = MAX_LFS_FILESIZE;
        if pos as u64 + count as u64 > max {
            if pos as u64 >= max {
                return Err(Errno::EOVERFLOW);
            }
            count = (max - pos as u64) as usize;
        }
        let out_pos = *fout.pos.lock();
        rw_verify_area(out_pos, count)?;
        // Into a file (`do_splice_direct`): no O_APPEND output, and an input that can
        // seek (not a fifo), whatever the count. Into a pipe (`splice_file_to_pipe`) a
        // count of 0 is looked at first. Then a count of 0 copies nothing from any input
        // (a directory too); more needs a regular file (Linux: a `splice_read`).
        if fout.pipe.is_none() && (fout.flags().contains(OpenFlags::APPEND) || fin.pipe.is_some()) {
            return Err(Errno::EINVAL);
        }
        if count == 0 {
            return Ok(0);
        }
        if fin.inode().file_type() != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        let n = self.copy_data(&fin, pos as u64, &fout, out_pos, count)?;
        match offset {
            Some(o) => *o = pos + n as i64,
            None => *fin.pos.lock() = pos as u64 + n as u64,
        }
        *fout.pos.lock() = out_pos + n as u64;
        Ok(n)
    }

    /// Copies `len` bytes of `fin` at `pos_in` to `fout` at `pos_out` (the splice loop of
    /// `do_splice_direct`): what the filesystem copies itself within one superblock, the
    /// rest through a buffer. Stops at the end of the source; an error after some bytes
    /// returns those bytes.
    fn copy_data(&self, fin: &File, pos_in: u64, fout: &File, pos_out: u64, len: usize) -> Result<usize> {
        let guard = self.vfs.rcu.pin();
        // The filesystem copies within one superblock, but not onto the range it reads
        // (`sendfile` within one file may overlap; a splice reads before it writes).
        let overlap =
            Arc::ptr_eq(fin.inode(), fout.inode()) && pos_out < pos_in + len as u64 && pos_in < pos_out + len as u64;
        // Into a pipe (`sendfile` may write one) it goes through the buffer.
        let same_sb = Arc::ptr_eq(fin.inode().sb(), fout.inode().sb())
            && fout.inode().file_type() == FileType::Regular
            && !overlap;
        if same_sb {
            file_remove_privs(self.creds.load(&guard).get(), fout.inode())?;
        }
        // Bytes the filesystem copied itself (the buffered writes notify as writes do).
        let mut shared = 0usize;
        let mut done = 0usize;
        let mut buf = Vec::new();
        let result = loop {
            if done == len {
                break Ok(());
            }
            let (at_in, at_out) = (pos_in + done as u64, pos_out + done as u64);
            if same_sb {
                let avail = fin.inode().size().saturating_sub(at_in).min((len - done) as u64);
                match fout.inode().sb().fs().copy_range(fin.inode(), at_in, fout.inode(), at_out, avail) {
                    Ok(0) | Err(Errno::EOPNOTSUPP) => {}
                    Ok(n) => {
                        done += n as usize;
                        shared += n as usize;
                        fout.update_time();
                        continue;
                    }
                    Err(e) => break Err(e),
                }
            }
            if buf.is_empty() {
                buf = vec![0u8; (len - done).min(COPY_CHUNK)];
            }
            let want = (len - done).min(buf.len());
            let n = match Task::read_at(fin, at_in, &mut buf[..want]) {
                Ok(0) => break Ok(()),
                Ok(n) => n,
                Err(e) => break Err(e),
            };
            match self.write_with(fout, at_out, &buf[..n], RwfFlags::NOAPPEND, &guard) {
                Ok((_, w)) => {
                    done += w;
                    if w < n {
                        break Ok(());
                    }
                }
                Err(e) => break Err(e),
            }
        };
        // The source was read ([`Task::read_at`] marks the access) or copied by its
        // filesystem: an access too.
        if shared > 0 {
            fin.accessed();
        }
        match result {
            Err(e) if done == 0 => Err(e),
            _ => {
                self.notify_io(fin, done, EventMask::ACCESS, &guard);
                self.notify_io(fout, shared, EventMask::MODIFY, &guard);
                Ok(done)
            }
        }
    }

    /// `fsync(2)`.
    pub fn fsync<'f>(&self, fd: impl Into<FileRef<'f>>) -> Result<()> {
        self.with_file(fd.into(), |file, _| {
            // A fifo has no `fsync` (`pipefifo_fops`): EINVAL.
            if file.inode().file_type() == FileType::Fifo {
                return Err(Errno::EINVAL);
            }
            file.inode().sb().fs().fsync(file.inode())
        })
    }

    /// `fdatasync(2)`.
    pub fn fdatasync<'f>(&self, fd: impl Into<FileRef<'f>>) -> Result<()> {
        self.fsync(fd)
    }
}

/// What [`Task::with_file_or_pipe`] did: the call, or nothing yet for a fifo.
enum Io<R> {
    Done(R),
    Pipe(Arc<File>),
}

/// The buffer of a copy between files that the filesystem does not copy itself (a pipe's
/// worth, as Linux's splice).
const COPY_CHUNK: usize = 64 * 1024;

/// `SEEK_DATA`/`SEEK_HOLE` (`shmem_file_llseek`, `mapping_seek_hole_data`): nothing at
/// or past the end of the file, nor before its start (ENXIO); directories have neither.
fn seek_hole_data(file: &File, off: i64, hole: bool) -> Result<u64> {
    if file.inode().is_dir() {
        return Err(Errno::EINVAL);
    }
    if off < 0 || off as u64 >= file.inode().size() {
        return Err(Errno::ENXIO);
    }
    file.inode().sb().fs().seek_hole_data(file.inode(), off as u64, hole)
}

/// Linux's `rw_verify_area`: a transfer whose end would pass the largest offset is EINVAL
/// (checked before the filesystem's own EFBIG for a start at or past its largest size).
#[inline]
fn rw_verify_area(pos: u64, count: usize) -> Result<()> {
    if count > isize::MAX as usize {
        return Err(Errno::EINVAL);
    }
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
    let ftype = file.inode().file_type();
    if !matches!(ftype, FileType::Regular | FileType::Fifo) && !(flags - RwfFlags::HIPRI).is_empty() {
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
    // A pipe can not wait (`FMODE_NOWAIT`).
    let nowait = if ftype == FileType::Fifo { RwfFlags::empty() } else { RwfFlags::NOWAIT };
    if flags.intersects(nowait | RwfFlags::ATOMIC | RwfFlags::DONTCACHE) {
        return Err(Errno::EOPNOTSUPP);
    }
    // `RWF_NOAPPEND` does not lift an `O_APPEND` an append-only file needs (reads too).
    if flags.contains(RwfFlags::NOAPPEND) && file.flags().contains(OpenFlags::APPEND) && file.inode().is_append() {
        return Err(Errno::EPERM);
    }
    Ok(())
}
