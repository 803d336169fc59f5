//! The lock requests (GETLK, SETLK, SETLKW; `FUSE_LK_FLOCK` for `flock(2)`) and the lock
//! side of FLUSH and RELEASE, answered by uvfs's own lock manager, so that a process on
//! the mount and an in-process task see each other's locks. Mirrors the server side of
//! what Linux's `fs/fuse/file.c` sends (`fuse_getlk`, `fuse_setlk`, `fuse_file_flock`,
//! `fuse_flush`, `fuse_release_common`).
//!
//! Owners: a POSIX lock request carries the kernel's `lock_owner` (its `files_struct`,
//! or the open file for an OFD lock, scrambled), which becomes a [`uvfs::LockOwner`] of
//! the server's own [`LockOwnerSpace`], with the caller's pid recorded. A `flock` request
//! is a lock of the request's open file (`fh`): each kernel open is its own handle, so
//! the handle's file is the open file description, as in-process. FLUSH (every close)
//! drops the owner's POSIX locks on the file, the POSIX close rule; RELEASE with
//! `FUSE_RELEASE_FLOCK_UNLOCK` drops the handle's `flock` lock, and the handle's release
//! drops whatever is still held through it (OFD locks, which FLUSH does not name).
//!
//! GETLK reports the pid a mount's caller recorded; a lock held in-process (or through
//! another mount) is reported with the server's own pid: on the host, that process holds
//! it.
//!
//! SETLKW does not wait on a transport thread (a ring's thread serves every caller on its
//! CPU, and the unlock it waits for may come from one of them, through the same ring): a
//! request that cannot be granted at once is handed to a thread of its own, which answers
//! it when the lock is granted, the wait would deadlock, or an INTERRUPT stops it (EINTR;
//! the kernel restarts the call unless the signal kills the caller). Unmounting stops
//! every wait.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use parking_lot::Mutex;
use uvfs::{Errno, File, Flock, FlockOp, Interrupt, LockCmd, LockOwnerSpace, LockWait, Task};

use crate::abi::{self, FileLock, LkIn, LkOut};
use crate::reply::{Reply, ReplyBuf};
use crate::server::Server;
use crate::session::Later;

type Result<T> = uvfs::Result<T>;

/// The server's lock state.
#[derive(Default)]
pub(crate) struct Locks {
    /// Immutable: the space of the kernel's lock owners.
    pub(crate) owners: LockOwnerSpace,
    /// SETLKW requests waiting, by `unique`: what stops them (own lock, shared with
    /// their threads).
    waits: Arc<Mutex<HashMap<u64, Interrupt>>>,
    /// The threads answering them, joined at unmount (own lock).
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Atomic: unmounting; no wait starts any more.
    closed: AtomicBool,
}

/// A FUSE lock range as a `struct flock` (`SEEK_SET`).
fn flock_of(lk: &FileLock) -> Result<Flock> {
    let start = i64::try_from(lk.start).map_err(|_| Errno::EINVAL)?;
    let end = i64::try_from(lk.end).map_err(|_| Errno::EINVAL)?;
    if end < start {
        return Err(Errno::EINVAL);
    }
    let len = if end == i64::MAX { 0 } else { end - start + 1 };
    let l_type = i16::try_from(lk.typ).map_err(|_| Errno::EINVAL)?;
    Ok(Flock { l_type, l_whence: Flock::SEEK_SET, l_start: start, l_len: len, l_pid: 0 })
}

/// A `flock` request's operation.
fn flock_op(lk: &FileLock, sleep: bool) -> Result<FlockOp> {
    let op = match i16::try_from(lk.typ).map_err(|_| Errno::EINVAL)? {
        Flock::RDLCK => FlockOp::SH,
        Flock::WRLCK => FlockOp::EX,
        Flock::UNLCK => FlockOp::UN,
        _ => return Err(Errno::EINVAL),
    };
    Ok(if sleep { op } else { op | FlockOp::NB })
}

/// What one SETLK(W) does, on its own (no server state): the file, owner and range.
struct SetLk {
    base: Arc<Task>,
    file: Arc<File>,
    arg: LkIn,
    owner: uvfs::LockOwner,
}

impl SetLk {
    /// Runs the request, waiting as `wait` says if `sleep`.
    fn run(&self, sleep: bool, wait: &LockWait<'_>) -> Result<()> {
        if self.arg.lk_flags & abi::LK_FLOCK != 0 {
            return self.base.flock_wait(&self.file, flock_op(&self.arg.lk, sleep)?, wait);
        }
        let mut fl = flock_of(&self.arg.lk)?;
        let cmd = if sleep { LockCmd::SetLkW } else { LockCmd::SetLk };
        let pid = i32::try_from(self.arg.lk.pid).unwrap_or(0);
        self.base.fcntl_lock_as(&self.file, self.owner, pid, cmd, &mut fl, wait).map(drop)
    }
}

impl Server {
    /// GETLK: the first conflicting lock, or `F_UNLCK`.
    pub(crate) fn getlk(&self, arg: &LkIn, out: &mut ReplyBuf<'_>) -> Result<()> {
        let file = self.handles.get(arg.fh)?;
        let mut fl = flock_of(&arg.lk)?;
        let owner = self.locks.owners.owner(arg.owner);
        // A test of `F_UNLCK` is the kernel's `F_OFD_GETLK` of it (it refuses that type in
        // any other GETLK): the description's own first lock over the range.
        let cmd = if fl.l_type == Flock::UNLCK { LockCmd::OfdGetLk } else { LockCmd::GetLk };
        let holder = self.tasks.base().fcntl_lock_as(&file, owner, 0, cmd, &mut fl, &LockWait::default())?;
        let lk = if fl.l_type == Flock::UNLCK {
            FileLock { start: 0, end: 0, typ: Flock::UNLCK as u32, pid: 0 }
        } else {
            let pid = match holder {
                Some(o) if self.locks.owners.contains(o) => fl.l_pid as u32,
                _ => std::process::id(),
            };
            let end = if fl.l_len == 0 { i64::MAX } else { fl.l_start + fl.l_len - 1 };
            FileLock { start: fl.l_start as u64, end: end as u64, typ: fl.l_type as u32, pid }
        };
        out.push(&LkOut { lk })
    }

    fn setlk_of(&self, arg: &LkIn) -> Result<SetLk> {
        Ok(SetLk {
            base: self.tasks.base().clone(),
            file: self.handles.get(arg.fh)?,
            arg: *arg,
            owner: self.locks.owners.owner(arg.owner),
        })
    }

    /// SETLK: granted, changed or released now, or EAGAIN.
    pub(crate) fn setlk(&self, arg: &LkIn) -> Result<()> {
        self.setlk_of(arg)?.run(false, &LockWait::default())
    }

    /// SETLKW: granted now, or answered later by a thread that waits (see the module
    /// docs).
    pub(crate) fn setlkw(&self, unique: u64, arg: &LkIn, later: &dyn Fn() -> Later) -> Reply {
        let req = match self.setlk_of(arg) {
            Ok(r) => r,
            Err(e) => return Reply::Err(e),
        };
        match req.run(false, &LockWait::default()) {
            Err(Errno::EAGAIN) => {}
            r => return r.into(),
        }
        if self.locks.closed.load(Ordering::Acquire) {
            return Reply::Err(Errno::EINTR);
        }
        let intr = Interrupt::new();
        self.locks.waits.lock().insert(unique, intr.clone());
        let (waits, later) = (self.locks.waits.clone(), later());
        let spawned = std::thread::Builder::new().name("uvfs-fuse-setlkw".into()).spawn(move || {
            let r = req.run(true, &LockWait { deadline: None, interrupt: Some(&intr) });
            waits.lock().remove(&unique);
            later.reply(r);
        });
        match spawned {
            Ok(h) => {
                let mut threads = self.locks.threads.lock();
                threads.retain(|t| !t.is_finished());
                threads.push(h);
                // Unmounting may have stopped the waits just before this one was listed.
                if self.locks.closed.load(Ordering::Acquire) {
                    self.interrupt_lock_wait(unique);
                }
                Reply::Later
            }
            Err(_) => {
                self.locks.waits.lock().remove(&unique);
                Reply::Err(Errno::ENOLCK)
            }
        }
    }

    /// INTERRUPT of `unique`: stops it if it is a waiting SETLKW (true).
    pub(crate) fn interrupt_lock_wait(&self, unique: u64) -> bool {
        let intr = self.locks.waits.lock().get(&unique).cloned();
        intr.inspect(Interrupt::interrupt).is_some()
    }

    /// FLUSH (a close of a descriptor of the handle): the owner's POSIX locks on the file
    /// go, as at any close on Linux.
    pub(crate) fn flush_locks(&self, fh: u64, lock_owner: u64) -> Result<()> {
        let file = self.handles.get(fh)?;
        let owner = self.locks.owners.owner(lock_owner);
        let mut all = Flock::new(Flock::UNLCK, 0, 0);
        self.tasks.base().fcntl_lock_as(&file, owner, 0, LockCmd::SetLk, &mut all, &LockWait::default()).map(drop)
    }

    /// RELEASE: the handle's `flock` lock goes if the kernel says it held one (the rest
    /// goes with the handle's file).
    pub(crate) fn release_locks(&self, r: &abi::ReleaseIn) {
        if r.release_flags & abi::RELEASE_FLOCK_UNLOCK != 0
            && let Ok(file) = self.handles.get(r.fh)
        {
            let _ = self.tasks.base().flock(&file, FlockOp::UN);
        }
    }

    /// Unmount: every waiting SETLKW is stopped (answered EINTR into the closed
    /// connection) and its thread joined.
    pub(crate) fn stop_lock_waits(&self) {
        self.locks.closed.store(true, Ordering::Release);
        for intr in self.locks.waits.lock().values() {
            intr.interrupt();
        }
        let threads = std::mem::take(&mut *self.locks.threads.lock());
        for t in threads {
            let _ = t.join();
        }
    }
}
