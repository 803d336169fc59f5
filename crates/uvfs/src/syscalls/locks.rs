//! `flock(2)` and the lock commands of `fcntl(2)`: `F_GETLK`, `F_SETLK`, `F_SETLKW`,
//! `F_OFD_GETLK`, `F_OFD_SETLK`, `F_OFD_SETLKW`. Mirrors the calls of Linux's
//! `fs/locks.c` (`SYSCALL_DEFINE2(flock)`, `fcntl_getlk`, `fcntl_setlk`,
//! `flock_to_posix_lock`, `check_fmode_for_setlk`), but: a wait takes a [`LockWait`]
//! (deadline, interrupt) where Linux has signals, and a frontend can take POSIX locks for
//! owners it names ([`Task::fcntl_lock_as`]). The other `fcntl` commands are not here.
//!
//! Who owns what (as Linux): a classic POSIX lock belongs to the task's descriptor table
//! (the tasks sharing it are one owner; [`Task::fork`] makes another, which inherits none
//! of the parent's POSIX locks) and goes when the owner closes *any* descriptor of the
//! file; an OFD lock and a `flock` lock belong to the open file description (shared by
//! `dup` and `fork`) and go when its last descriptor is closed.

use std::sync::Arc;

use crate::abi::errno::{Errno, Result};
use crate::abi::lock::{Flock, FlockOp, LockCmd};
use crate::core::file::{File, FileRef};
use crate::core::locks::{self, LockOwner, LockWait, OFFSET_MAX, Owner, Posix, Ty};
use crate::task::Task;

impl Task {
    /// `flock(2)`: waits without a deadline unless `op` has [`FlockOp::NB`].
    pub fn flock<'f>(&self, fd: impl Into<FileRef<'f>>, op: FlockOp) -> Result<()> {
        self.flock_wait(fd, op, &LockWait::default())
    }

    /// `flock(2)` whose wait (without [`FlockOp::NB`]) ends with EINTR as `wait` says.
    /// EINVAL unless exactly one of `SH`, `EX`, `UN` is given (checked first); EBADF for a
    /// bad or `O_PATH` descriptor, or for a lock on a file opened for neither reading nor
    /// writing; EWOULDBLOCK with `NB` when another open file description holds a
    /// conflicting lock. Converting a lock first drops the old one, as on Linux: a failed
    /// `NB` conversion leaves none.
    pub fn flock_wait<'f>(&self, fd: impl Into<FileRef<'f>>, op: FlockOp, wait: &LockWait<'_>) -> Result<()> {
        // LOCK_MAND locks were removed from Linux; requests for them succeed doing nothing.
        if op.contains(FlockOp::MAND) {
            return Ok(());
        }
        let ty = match op.bits() & !FlockOp::NB.bits() {
            b if b == FlockOp::SH.bits() => Ty::Read,
            b if b == FlockOp::EX.bits() => Ty::Write,
            b if b == FlockOp::UN.bits() => Ty::Unlock,
            _ => return Err(Errno::EINVAL),
        };
        let file = self.lock_file(fd.into())?;
        if ty != Ty::Unlock && !(file.flags().readable() || file.flags().writable()) {
            return Err(Errno::EBADF);
        }
        let wait = (!op.contains(FlockOp::NB)).then_some(wait);
        locks::flock_lock(file.inode(), file.lock_id(), ty, self.getpid(), wait)
    }

    /// The lock commands of `fcntl(2)` on `fd`; `F_SETLKW`/`F_OFD_SETLKW` wait without a
    /// deadline. See [`Task::fcntl_lock_wait`].
    pub fn fcntl_lock<'f>(&self, fd: impl Into<FileRef<'f>>, cmd: LockCmd, fl: &mut Flock) -> Result<()> {
        self.fcntl_lock_wait(fd, cmd, fl, &LockWait::default())
    }

    /// The lock commands of `fcntl(2)`, a waiting one ending with EINTR as `wait` says.
    ///
    /// `GETLK` fills `fl` with the first lock that would conflict (`l_whence` `SEEK_SET`,
    /// `l_len` 0 for one that runs to the end of the file, `l_pid` its owner's pid, -1 for
    /// an OFD lock), or sets only `l_type` to `F_UNLCK`; `F_OFD_GETLK` with `F_UNLCK`
    /// reports the description's own first lock over the range. `SETLK` takes, changes,
    /// splits, merges or releases the owner's locks over the range.
    ///
    /// Errors, in Linux's order: EBADF for a bad or `O_PATH` descriptor; EINVAL for
    /// `F_GETLK` of anything but a read or write lock, a bad `l_whence`, a start before 0,
    /// a negative length reaching before 0, a bad `l_type`; EOVERFLOW for a range past the
    /// largest offset; EINVAL for an `F_OFD_*` command with `l_pid` not 0; EBADF for a
    /// read lock on a file not open for reading, a write lock on one not open for
    /// writing; EAGAIN when a conflicting lock is held (`SETLK`); EDEADLK when waiting
    /// would deadlock (`F_SETLKW` only); EINTR when the wait is given up.
    pub fn fcntl_lock_wait<'f>(
        &self,
        fd: impl Into<FileRef<'f>>,
        cmd: LockCmd,
        fl: &mut Flock,
        wait: &LockWait<'_>,
    ) -> Result<()> {
        let fd = fd.into();
        let file = self.lock_file(fd)?;
        let owner = if cmd.is_ofd() { Owner::File(file.lock_id()) } else { Owner::Files(self.files.id) };
        self.do_fcntl_lock(&file, owner, self.getpid(), cmd, fl, wait)?;
        // `fcntl_setlk`'s close race: a descriptor closed (or replaced) while the lock
        // was taken did not see it; drop the owner's locks as that close would have.
        if let FileRef::Fd(n) = fd
            && !cmd.is_get()
            && !cmd.is_ofd()
            && fl.l_type != Flock::UNLCK
        {
            let guard = self.vfs.rcu.pin();
            let same = self.files.get(n, &guard).is_ok_and(|f| std::ptr::eq(f.get(), &*file));
            if !same {
                locks::remove_posix(file.inode(), owner);
                return Err(Errno::EBADF);
            }
        }
        Ok(())
    }

    /// `F_GETLK`, `F_SETLK` or `F_SETLKW` for `owner`, an owner the caller names (a
    /// frontend acting for others: the FUSE server, for the kernel's `lock_owner`), with
    /// `pid` recorded as the lock's pid. The locks are classic POSIX locks in every other
    /// respect; they go with an explicit unlock, or with the file they were taken through
    /// when it is released. EINVAL for `F_OFD_SETLK` and `F_OFD_SETLKW`; `F_OFD_GETLK`
    /// tests as Linux's does, which lets `F_UNLCK` ask for `owner`'s own first lock over
    /// the range (a FUSE server receives the kernel's `F_OFD_GETLK` of `F_UNLCK` as a
    /// GETLK of `F_UNLCK` for the description's owner: no other GETLK has that type).
    /// For `GETLK`, returns the conflicting lock's owner (if it is a [`LockOwner`] of
    /// `LockOwnerSpace` the caller can tell whether `l_pid` is one it recorded).
    pub fn fcntl_lock_as<'f>(
        &self,
        fd: impl Into<FileRef<'f>>,
        owner: LockOwner,
        pid: i32,
        cmd: LockCmd,
        fl: &mut Flock,
        wait: &LockWait<'_>,
    ) -> Result<Option<LockOwner>> {
        if cmd.is_ofd() && cmd != LockCmd::OfdGetLk {
            return Err(Errno::EINVAL);
        }
        let file = self.lock_file(fd.into())?;
        self.do_fcntl_lock(&file, owner.0, pid, cmd, fl, wait)
    }

    /// The file a lock call names, counted (a wait may be long: no collector guard is
    /// held meanwhile). EBADF for `O_PATH`, as `fcntl`'s check of its commands.
    fn lock_file(&self, fd: FileRef<'_>) -> Result<Arc<File>> {
        let file = self.file_arc(fd)?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        Ok(file)
    }

    /// `fcntl_getlk` / `fcntl_setlk` for `owner`: the conflicting lock's owner for `GETLK`.
    fn do_fcntl_lock(
        &self,
        file: &Arc<File>,
        owner: Owner,
        pid: i32,
        cmd: LockCmd,
        fl: &mut Flock,
        wait: &LockWait<'_>,
    ) -> Result<Option<LockOwner>> {
        if cmd.is_get() && cmd != LockCmd::OfdGetLk && fl.l_type != Flock::RDLCK && fl.l_type != Flock::WRLCK {
            return Err(Errno::EINVAL);
        }
        let (start, end, ty) = flock_to_posix_lock(file, fl)?;
        if !cmd.is_get() {
            check_fmode_for_setlk(file, ty)?;
        }
        if cmd.is_ofd() && fl.l_pid != 0 {
            return Err(Errno::EINVAL);
        }
        let req = Posix { owner, ofd: cmd.is_ofd(), ty, start, end, pid, file: file.lock_id() };
        if !cmd.is_get() {
            let wait = cmd.waits().then_some(wait);
            return locks::posix_lock(file.inode(), &req, wait).map(|()| None);
        }
        match locks::posix_test(file.inode(), &req) {
            None => {
                fl.l_type = Flock::UNLCK;
                Ok(None)
            }
            Some(c) => {
                // `posix_lock_to_flock`.
                fl.l_type = c.ty.raw();
                fl.l_whence = Flock::SEEK_SET;
                fl.l_start = c.start;
                fl.l_len = if c.end == OFFSET_MAX { 0 } else { c.end - c.start + 1 };
                fl.l_pid = if c.ofd { -1 } else { c.pid };
                Ok(Some(LockOwner(c.owner)))
            }
        }
    }
}

/// `flock64_to_posix_lock`: the range (first and last byte) and type of `l` on `file`.
fn flock_to_posix_lock(file: &File, l: &Flock) -> Result<(i64, i64, Ty)> {
    let base: i64 = match l.l_whence {
        Flock::SEEK_SET => 0,
        // Read without the position lock, as Linux reads `f_pos` here; nothing else is
        // held, so taking it is safe too, and gives a value not torn on any target.
        Flock::SEEK_CUR => i64::try_from(*file.pos.lock()).unwrap_or(OFFSET_MAX),
        Flock::SEEK_END => i64::try_from(file.inode().size()).unwrap_or(OFFSET_MAX),
        _ => return Err(Errno::EINVAL),
    };
    if l.l_start > OFFSET_MAX - base {
        return Err(Errno::EOVERFLOW);
    }
    let mut start = base + l.l_start;
    if start < 0 {
        return Err(Errno::EINVAL);
    }
    let end;
    if l.l_len > 0 {
        if l.l_len - 1 > OFFSET_MAX - start {
            return Err(Errno::EOVERFLOW);
        }
        end = start + (l.l_len - 1);
    } else if l.l_len < 0 {
        if start + l.l_len < 0 {
            return Err(Errno::EINVAL);
        }
        end = start - 1;
        start += l.l_len;
    } else {
        end = OFFSET_MAX;
    }
    Ok((start, end, Ty::from_raw(l.l_type)?))
}

/// `check_fmode_for_setlk`: a read lock needs a file open for reading, a write lock one
/// open for writing.
fn check_fmode_for_setlk(file: &File, ty: Ty) -> Result<()> {
    let ok = match ty {
        Ty::Read => file.flags().readable(),
        Ty::Write => file.flags().writable(),
        Ty::Unlock => true,
    };
    if ok { Ok(()) } else { Err(Errno::EBADF) }
}
