//! File locks: `flock(2)` locks, POSIX record locks and open-file-description (OFD)
//! locks, kept per inode in a lock context made on first use. Mirrors Linux's
//! `fs/locks.c` (`flock_lock_inode`, `posix_lock_inode`, `posix_test_lock`,
//! `posix_locks_deadlock`, `locks_remove_posix`, `locks_remove_file`), but: a waiter
//! sleeps on its inode's condition variable and retries whenever anything there changed
//! (Linux wakes the waiters of the lock that changed; both retry the whole request, so
//! the outcome is the same and fairness is no better than Linux's), a wait can be given
//! a deadline or an [`Interrupt`] (Linux's signals; both answer EINTR), and there are no
//! leases (`F_SETLEASE`) or mandatory locks.
//!
//! Owners: a classic POSIX lock belongs to a descriptor table (Linux's `files_struct`:
//! the tasks sharing one, [`Task::with_credentials`](crate::Task::with_credentials), are
//! one owner; a [`Task::fork`](crate::Task::fork) child is another), an OFD lock and a
//! `flock` lock to the open file description ([`File`](crate::File)), and a frontend
//! (the FUSE server) can name its own owners ([`LockOwnerSpace`]).
//!
//! A file nobody locks pays nothing: the context pointer in the inode stays empty, and
//! close tests it once (`Inode::flctx`); no allocation, no lock, nothing on open or write.
//!
//! Locks of a context: its `state` lock (rank `FILE_LOCKS`), under which the waiters'
//! wait-for edges are changed in the global [`BLOCKED`] list (rank `BLOCKED_LOCKS`, Linux's
//! `blocked_lock_lock`), and an [`Interrupt`]'s slot (a leaf).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use crate::abi::errno::{Errno, Result};
use crate::core::inode::Inode;
use crate::sync::Mutex;

/// The largest offset (Linux's `OFFSET_MAX`): a range's end when it runs to the end of
/// the file.
pub(crate) const OFFSET_MAX: i64 = i64::MAX;

/// How many wait-for edges the deadlock check follows (Linux's `MAX_DEADLK_ITERATIONS`).
const MAX_DEADLK_ITERATIONS: usize = 10;

/// A lock's type (Linux's `flc_type`: `F_RDLCK`, `F_WRLCK`, `F_UNLCK`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    Read,
    Write,
    Unlock,
}

impl Ty {
    /// The `l_type` value.
    pub(crate) fn raw(self) -> i16 {
        match self {
            Ty::Read => 0,
            Ty::Write => 1,
            Ty::Unlock => 2,
        }
    }

    /// Linux's `assign_type`: EINVAL for anything but the three types.
    pub(crate) fn from_raw(t: i16) -> Result<Ty> {
        match t {
            0 => Ok(Ty::Read),
            1 => Ok(Ty::Write),
            2 => Ok(Ty::Unlock),
            _ => Err(Errno::EINVAL),
        }
    }
}

/// Who owns a POSIX or OFD lock (Linux's `flc_owner`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Owner {
    /// A descriptor table, by its id (never reused): classic POSIX locks.
    Files(u64),
    /// An open file description, by its address: OFD locks. Unique while the file lives,
    /// and its locks are removed at its release, before the memory can be reused.
    File(usize),
    /// An owner a frontend names: (its [`LockOwnerSpace`], its own id).
    Remote(u64, u64),
}

/// A lock owner named by a frontend that takes POSIX locks for others (the FUSE server:
/// the kernel's `lock_owner` of a request), from a [`LockOwnerSpace`]. Its locks are
/// classic POSIX locks: they conflict with every other owner's, take part in deadlock
/// detection, and go with an explicit unlock (or with the file they were taken through).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockOwner(pub(crate) Owner);

/// A namespace of [`LockOwner`]s: owners of different spaces never compare equal, so two
/// frontends (two FUSE mounts) cannot mix up their ids.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct LockOwnerSpace(u64);

static NEXT_SPACE: AtomicU64 = AtomicU64::new(1);

impl LockOwnerSpace {
    /// A new space.
    pub fn new() -> LockOwnerSpace {
        LockOwnerSpace(NEXT_SPACE.fetch_add(1, Ordering::Relaxed))
    }

    /// The owner this space calls `id`.
    pub fn owner(&self, id: u64) -> LockOwner {
        LockOwner(Owner::Remote(self.0, id))
    }

    /// Whether `owner` is one of this space's.
    pub fn contains(&self, owner: LockOwner) -> bool {
        matches!(owner.0, Owner::Remote(s, _) if s == self.0)
    }
}

impl Default for LockOwnerSpace {
    fn default() -> Self {
        LockOwnerSpace::new()
    }
}

/// A POSIX or OFD lock held (Linux's `struct file_lock` on `flc_posix`), or a request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Posix {
    pub(crate) owner: Owner,
    /// Whether it is an OFD lock (`FL_OFDLCK`): reported with pid -1, no deadlock check.
    pub(crate) ofd: bool,
    pub(crate) ty: Ty,
    /// First byte.
    pub(crate) start: i64,
    /// Last byte (inclusive; `OFFSET_MAX` for "to the end of the file").
    pub(crate) end: i64,
    /// The pid reported for it (`flc_pid`).
    pub(crate) pid: i32,
    /// The address of the file it was taken through (`flc_file`): released with it.
    pub(crate) file: usize,
}

impl Posix {
    fn overlaps(&self, o: &Posix) -> bool {
        self.start <= o.end && o.start <= self.end
    }
}

/// A `flock` lock held (Linux's `flc_flock` list).
#[derive(Clone, Copy, Debug)]
struct FlockLock {
    /// The address of the open file description that holds it.
    file: usize,
    ty: Ty,
    pid: i32,
}

/// What kind of lock a [`LockInfo`] describes (the second column of `/proc/locks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockClass {
    /// A `flock(2)` lock (`FLOCK`).
    Flock,
    /// A classic POSIX record lock (`POSIX`).
    Posix,
    /// An open-file-description lock (`OFDLCK`).
    Ofd,
}

/// One lock of an inode, held or waited for: a line of Linux's `/proc/locks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// Its kind.
    pub class: LockClass,
    /// Exclusive (`WRITE`) or shared (`READ`).
    pub write: bool,
    /// First byte (0 for `flock`).
    pub start: i64,
    /// Last byte, `None` for "to the end of the file" (`EOF`; always for `flock`).
    pub end: Option<i64>,
    /// The owner's pid (-1 for OFD locks).
    pub pid: i32,
    /// A request waiting for a conflicting lock to go (`->` in `/proc/locks`), not a lock
    /// held.
    pub blocked: bool,
}

/// A waiter, listed for [`Inode::file_locks`].
#[derive(Clone, Copy, Debug)]
struct Waiter {
    id: u64,
    info: LockInfo,
}

/// The locks of one inode.
#[derive(Default)]
struct LockState {
    /// `flock` locks, oldest first.
    flock: Vec<FlockLock>,
    /// POSIX and OFD locks, in Linux's list order: each owner's locks together, sorted by
    /// start (the order decides which conflict `GETLK` reports).
    posix: Vec<Posix>,
    /// Requests waiting.
    waiters: Vec<Waiter>,
}

/// An inode's lock context (Linux's `file_lock_context`), made by the first lock.
#[derive(Default)]
pub(crate) struct FileLockContext {
    /// The locks and waiters.
    state: Mutex<LockState, { crate::sync::rank::FILE_LOCKS }>,
    /// Waiters sleep here; notified whenever `state` changed or one is interrupted.
    cond: parking_lot::Condvar,
}

/// A wait-for edge: the owner of a waiting classic POSIX request, and the owner of the
/// lock it waits for (Linux's `blocked_hash`).
struct Blocked {
    id: u64,
    waiter: Owner,
    blocker: Owner,
}

/// Every waiting classic POSIX request's edge, across inodes and instances (owners are
/// unique across instances). Taken under a context's `state`.
static BLOCKED: Mutex<Vec<Blocked>, { crate::sync::rank::BLOCKED_LOCKS }> = Mutex::new(Vec::new());

static NEXT_WAITER: AtomicU64 = AtomicU64::new(1);

/// A way to stop a waiting lock request from another thread, as a signal does on Linux:
/// the request returns EINTR. One-shot: once interrupted, it stays interrupted, and a
/// wait started with it afterwards returns EINTR at once. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Interrupt(Arc<InterruptInner>);

#[derive(Default)]
struct InterruptInner {
    /// Atomic: interrupted.
    fired: AtomicBool,
    /// The inode a request is waiting on with this interrupt (set and cleared by the
    /// waiter under the inode's lock context).
    waiting: Mutex<Option<Arc<Inode>>>,
}

impl Interrupt {
    /// A new interrupt, not fired.
    pub fn new() -> Interrupt {
        Interrupt::default()
    }

    /// Interrupts the request waiting with it (now or later).
    pub fn interrupt(&self) {
        self.0.fired.store(true, Ordering::SeqCst);
        // Not held while the context is locked: the waiter locks the two the other way.
        let inode = self.0.waiting.lock().clone();
        if let Some(ctx) = inode.as_deref().and_then(Inode::flctx) {
            // Under the context's lock: the waiter either sleeps already or has not yet
            // tested `fired` (it tests it under this lock before it sleeps).
            let _g = ctx.state.lock();
            ctx.cond.notify_all();
        }
    }

    /// Whether it was fired.
    pub fn is_interrupted(&self) -> bool {
        self.0.fired.load(Ordering::SeqCst)
    }

    fn arm(&self, inode: &Arc<Inode>) {
        *self.0.waiting.lock() = Some(inode.clone());
    }

    fn disarm(&self) {
        self.0.waiting.lock().take();
    }
}

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interrupt").field("fired", &self.is_interrupted()).finish()
    }
}

/// How long a blocking lock request (`F_SETLKW`, `F_OFD_SETLKW`, `flock` without
/// `LOCK_NB`) may wait: until it gets the lock, or EINTR once `deadline` passed (a timer
/// signal, as `alarm(2)` around the call) or `interrupt` fired. The default waits for as
/// long as it takes.
#[derive(Clone, Copy, Debug, Default)]
pub struct LockWait<'a> {
    /// When to give up (EINTR).
    pub deadline: Option<Instant>,
    /// What another thread can fire to stop the wait (EINTR).
    pub interrupt: Option<&'a Interrupt>,
}

/// Linux's `locks_conflict`: two locks conflict unless both are shared.
fn types_conflict(a: Ty, b: Ty) -> bool {
    a == Ty::Write || b == Ty::Write
}

/// `posix_locks_conflict`: other owner, overlapping, not both shared.
fn posix_conflict(req: &Posix, sys: &Posix) -> bool {
    req.owner != sys.owner && req.overlaps(sys) && types_conflict(req.ty, sys.ty)
}

impl FileLockContext {
    /// Wakes the waiters (something they may wait for changed).
    fn wake(&self) {
        self.cond.notify_all();
    }
}

impl LockState {
    /// `posix_lock_inode` without the waiting: the index of the first lock in the way of
    /// `req` (nothing changed), or `None` once `req` is applied (taken, changed, split,
    /// merged, or unlocked).
    fn posix_apply(&mut self, req: &Posix) -> Option<usize> {
        let v = &mut self.posix;
        if req.ty != Ty::Unlock
            && let Some(i) = v.iter().position(|fl| posix_conflict(req, fl))
        {
            return Some(i);
        }
        let owner = req.owner;
        // The request: a copy, and where it lives in the list once it does.
        let mut r = *req;
        let mut at: Option<usize> = None;
        let mut added = false;
        let (mut left, mut right) = (None::<usize>, None::<usize>);
        let mut i = v.iter().position(|fl| fl.owner == owner).unwrap_or(v.len());
        while i < v.len() && v[i].owner == owner {
            let fl = v[i];
            if r.ty == fl.ty {
                // Adjacent or overlapping regions of one type merge ("start - 1", never
                // "end + 1", which would overflow at OFFSET_MAX).
                if fl.end < r.start - 1 {
                    i += 1;
                    continue;
                }
                if fl.start - 1 > r.end {
                    break;
                }
                r.start = r.start.min(fl.start);
                r.end = r.end.max(fl.end);
                if added {
                    v.remove(i);
                    if let Some(j) = at {
                        v[j].start = r.start;
                        v[j].end = r.end;
                    }
                    continue;
                }
                v[i].start = r.start;
                v[i].end = r.end;
                r = v[i];
                at = Some(i);
                added = true;
                i += 1;
            } else {
                if fl.end < r.start {
                    i += 1;
                    continue;
                }
                if fl.start > r.end {
                    break;
                }
                if r.ty == Ty::Unlock {
                    added = true;
                }
                if fl.start < r.start {
                    left = Some(i);
                }
                if fl.end > r.end {
                    right = Some(i);
                    break;
                }
                if fl.start >= r.start {
                    // The request covers this lock whole: it replaces it (once), or it
                    // goes.
                    if added {
                        v.remove(i);
                        continue;
                    }
                    v[i] = r;
                    at = Some(i);
                    added = true;
                }
                i += 1;
            }
        }
        let _ = at;
        if !added {
            if r.ty == Ty::Unlock {
                return None;
            }
            // Before the lock the walk stopped at (or at the end of the owner's group).
            v.insert(i, r);
            shift_past(&mut right, i);
            shift_past(&mut left, i);
        }
        if let Some(rt) = right {
            if left == Some(rt) {
                // The request splits a lock in two: its left part is a copy, inserted
                // before the request (or, for an unlock, before the right part).
                let copy = v[rt];
                let pos = if added { rt } else { i };
                v.insert(pos, copy);
                left = Some(pos);
                shift_past(&mut right, pos);
            }
            let rt = right.expect("set above");
            v[rt].start = r.end + 1;
        }
        if let Some(l) = left {
            v[l].end = r.start - 1;
        }
        None
    }

    /// `posix_test_lock`: the first lock in the way of `req` (for an unlock request, the
    /// first of the same owner that overlaps it: `F_OFD_GETLK` with `F_UNLCK`).
    fn posix_test(&self, req: &Posix) -> Option<Posix> {
        self.posix
            .iter()
            .find(|fl| {
                if req.ty == Ty::Unlock { fl.owner == req.owner && req.overlaps(fl) } else { posix_conflict(req, fl) }
            })
            .copied()
    }

    /// `flock_lock_inode` without the waiting: whether anything changed, as `Ok` once
    /// applied, as `Err` if a lock of another file is in the way (the file's own lock of
    /// the other type is gone by then: a conversion is not atomic, as on Linux).
    fn flock_apply(&mut self, file: usize, ty: Ty, pid: i32) -> std::result::Result<bool, bool> {
        let mut changed = false;
        if let Some(i) = self.flock.iter().position(|fl| fl.file == file) {
            if self.flock[i].ty == ty {
                return Ok(false);
            }
            self.flock.remove(i);
            changed = true;
        }
        if ty == Ty::Unlock {
            return Ok(changed);
        }
        if self.flock.iter().any(|fl| fl.file != file && types_conflict(ty, fl.ty)) {
            return Err(changed);
        }
        self.flock.push(FlockLock { file, ty, pid });
        Ok(true)
    }

    fn unregister(&mut self, id: u64) {
        self.waiters.retain(|w| w.id != id);
    }
}

/// Moves an index past an element inserted at `pos`.
fn shift_past(idx: &mut Option<usize>, pos: usize) {
    if let Some(r) = idx.as_mut()
        && *r >= pos
    {
        *r += 1;
    }
}

/// `posix_locks_deadlock`: whether `caller` waiting for a lock of `blocker` closes a
/// cycle of owners each waiting for the next.
fn posix_locks_deadlock(blocked: &[Blocked], caller: Owner, blocker: Owner) -> bool {
    let mut b = blocker;
    for _ in 0..=MAX_DEADLK_ITERATIONS {
        let Some(next) = blocked.iter().find(|e| e.waiter == b) else { return false };
        if next.blocker == caller {
            return true;
        }
        b = next.blocker;
    }
    false
}

/// Removes a waiter's wait-for edge.
fn unblock(id: u64) {
    BLOCKED.lock().retain(|e| e.id != id);
}

/// A request's wait: sleeps on `ctx` until notified, the deadline or the interrupt.
/// `Err(EINTR)` when the wait is over without the lock.
fn sleep(
    ctx: &FileLockContext,
    st: &mut crate::sync::MutexGuard<'_, LockState, { crate::sync::rank::FILE_LOCKS }>,
    inode: &Arc<Inode>,
    w: &LockWait<'_>,
) -> Result<()> {
    if let Some(i) = w.interrupt {
        i.arm(inode);
        if i.is_interrupted() {
            i.disarm();
            return Err(Errno::EINTR);
        }
    }
    let r = match w.deadline {
        Some(d) if Instant::now() >= d => Err(Errno::EINTR),
        Some(d) => {
            ctx.cond.wait_until(st.parking_lot(), d);
            Ok(())
        }
        None => {
            ctx.cond.wait(st.parking_lot());
            Ok(())
        }
    };
    if let Some(i) = w.interrupt {
        i.disarm();
    }
    r
}

/// Whether a woken waiter must give up (its interrupt fired or its deadline passed) now
/// that its retry found the lock still in the way.
fn given_up(w: &LockWait<'_>) -> bool {
    w.interrupt.is_some_and(Interrupt::is_interrupted) || w.deadline.is_some_and(|d| Instant::now() >= d)
}

/// Takes, changes or releases a POSIX or OFD lock (`posix_lock_file` with
/// `locks_lock_inode_wait`'s loop). Without `wait`, EAGAIN when a lock is in the way;
/// with it, sleeps until none is, EDEADLK (classic POSIX requests) if sleeping would
/// close a cycle of owners waiting for each other, EINTR when the wait is given up.
pub(crate) fn posix_lock(inode: &Arc<Inode>, req: &Posix, wait: Option<&LockWait<'_>>) -> Result<()> {
    let ctx = match req.ty {
        // An unlock needs no context, and makes none.
        Ty::Unlock => match inode.flctx() {
            Some(c) => c,
            None => return Ok(()),
        },
        _ => inode.flctx_or_init(),
    };
    let mut st = ctx.state.lock();
    let mut me: Option<u64> = None;
    let done = |st: &mut LockState, me: Option<u64>| {
        if let Some(id) = me {
            st.unregister(id);
            unblock(id);
        }
    };
    loop {
        let Some(ci) = st.posix_apply(req) else {
            done(&mut st, me);
            ctx.wake();
            return Ok(());
        };
        let Some(w) = wait else { return Err(Errno::EAGAIN) };
        if me.is_some() && given_up(w) {
            done(&mut st, me);
            return Err(Errno::EINTR);
        }
        let id = *me.get_or_insert_with(|| NEXT_WAITER.fetch_add(1, Ordering::Relaxed));
        if !req.ofd {
            let blocker = st.posix[ci].owner;
            let mut b = BLOCKED.lock();
            b.retain(|e| e.id != id);
            if posix_locks_deadlock(&b, req.owner, blocker) {
                drop(b);
                done(&mut st, me);
                return Err(Errno::EDEADLK);
            }
            b.push(Blocked { id, waiter: req.owner, blocker });
        }
        if !st.waiters.iter().any(|x| x.id == id) {
            let info = LockInfo {
                class: if req.ofd { LockClass::Ofd } else { LockClass::Posix },
                write: req.ty == Ty::Write,
                start: req.start,
                end: (req.end != OFFSET_MAX).then_some(req.end),
                pid: if req.ofd { -1 } else { req.pid },
                blocked: true,
            };
            st.waiters.push(Waiter { id, info });
        }
        if let Err(e) = sleep(ctx, &mut st, inode, w) {
            done(&mut st, me);
            return Err(e);
        }
    }
}

/// `F_GETLK`: the first lock that would be in the way of `req` (see
/// [`LockState::posix_test`]).
pub(crate) fn posix_test(inode: &Inode, req: &Posix) -> Option<Posix> {
    inode.flctx()?.state.lock().posix_test(req)
}

/// Takes, converts or releases the `flock` lock of the file at `file`
/// (`flock_lock_inode_wait`). Without `wait`, EWOULDBLOCK when a lock of another file is
/// in the way; with it, sleeps until none is, EINTR when the wait is given up.
pub(crate) fn flock_lock(inode: &Arc<Inode>, file: usize, ty: Ty, pid: i32, wait: Option<&LockWait<'_>>) -> Result<()> {
    let ctx = match ty {
        Ty::Unlock => match inode.flctx() {
            Some(c) => c,
            None => return Ok(()),
        },
        _ => inode.flctx_or_init(),
    };
    let mut st = ctx.state.lock();
    let mut me: Option<u64> = None;
    loop {
        match st.flock_apply(file, ty, pid) {
            Ok(changed) => {
                if let Some(id) = me {
                    st.unregister(id);
                }
                if changed {
                    ctx.wake();
                }
                return Ok(());
            }
            Err(changed) => {
                // The file's own lock may have gone (a failed conversion).
                if changed {
                    ctx.wake();
                }
                let Some(w) = wait else { return Err(Errno::EWOULDBLOCK) };
                if let Some(id) = me
                    && given_up(w)
                {
                    st.unregister(id);
                    return Err(Errno::EINTR);
                }
                let id = *me.get_or_insert_with(|| NEXT_WAITER.fetch_add(1, Ordering::Relaxed));
                if !st.waiters.iter().any(|x| x.id == id) {
                    let info = LockInfo {
                        class: LockClass::Flock,
                        write: ty == Ty::Write,
                        start: 0,
                        end: None,
                        pid,
                        blocked: true,
                    };
                    st.waiters.push(Waiter { id, info });
                }
                if let Err(e) = sleep(ctx, &mut st, inode, w) {
                    st.unregister(id);
                    return Err(e);
                }
            }
        }
    }
}

/// `locks_remove_posix`: a descriptor of the inode was closed by `owner`: its POSIX locks
/// on the inode go (all of them, whichever descriptor they were taken through). One test
/// of the inode's context pointer when nobody ever locked it.
#[inline]
pub(crate) fn remove_posix(inode: &Inode, owner: Owner) {
    if let Some(ctx) = inode.flctx() {
        remove_posix_slow(ctx, owner);
    }
}

fn remove_posix_slow(ctx: &FileLockContext, owner: Owner) {
    let mut st = ctx.state.lock();
    let before = st.posix.len();
    st.posix.retain(|fl| fl.owner != owner);
    if st.posix.len() != before {
        ctx.wake();
    }
}

/// `locks_remove_file`: the open file description at `file` is released: its OFD and
/// `flock` locks go, and so does any lock still taken through it (Linux warns of such a
/// leak; here a lock taken through a file held without a descriptor ends with that file).
#[inline]
pub(crate) fn remove_file(inode: &Inode, file: usize) {
    if let Some(ctx) = inode.flctx() {
        let mut st = ctx.state.lock();
        let (p, f) = (st.posix.len(), st.flock.len());
        st.posix.retain(|fl| fl.file != file && fl.owner != Owner::File(file));
        st.flock.retain(|fl| fl.file != file);
        if st.posix.len() != p || st.flock.len() != f {
            ctx.wake();
        }
    }
}

/// The locks of `ctx`, held then waited for, as `/proc/locks` lists them.
pub(crate) fn list(ctx: &FileLockContext) -> Vec<LockInfo> {
    let st = ctx.state.lock();
    let flock = st.flock.iter().map(|fl| LockInfo {
        class: LockClass::Flock,
        write: fl.ty == Ty::Write,
        start: 0,
        end: None,
        pid: fl.pid,
        blocked: false,
    });
    let posix = st.posix.iter().map(|fl| LockInfo {
        class: if fl.ofd { LockClass::Ofd } else { LockClass::Posix },
        write: fl.ty == Ty::Write,
        start: fl.start,
        end: (fl.end != OFFSET_MAX).then_some(fl.end),
        pid: if fl.ofd { -1 } else { fl.pid },
        blocked: false,
    });
    flock.chain(posix).chain(st.waiters.iter().map(|w| w.info)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lk(owner: u64, ty: Ty, start: i64, end: i64) -> Posix {
        Posix { owner: Owner::Files(owner), ofd: false, ty, start, end, pid: owner as i32, file: 0 }
    }

    fn ranges(st: &LockState) -> Vec<(u64, Ty, i64, i64)> {
        st.posix
            .iter()
            .map(|l| {
                let Owner::Files(o) = l.owner else { unreachable!() };
                (o, l.ty, l.start, l.end)
            })
            .collect()
    }

    #[test]
    fn split_merge_and_replace() {
        let mut st = LockState::default();
        assert!(st.posix_apply(&lk(1, Ty::Read, 0, 99)).is_none());
        // A write lock in the middle splits the read lock in three.
        assert!(st.posix_apply(&lk(1, Ty::Write, 10, 19)).is_none());
        assert_eq!(ranges(&st), [(1, Ty::Read, 0, 9), (1, Ty::Write, 10, 19), (1, Ty::Read, 20, 99)]);
        // Read again over it: everything merges back into one.
        assert!(st.posix_apply(&lk(1, Ty::Read, 5, 25)).is_none());
        assert_eq!(ranges(&st), [(1, Ty::Read, 0, 99)]);
        // Unlock a hole, then the end.
        assert!(st.posix_apply(&lk(1, Ty::Unlock, 40, 49)).is_none());
        assert_eq!(ranges(&st), [(1, Ty::Read, 0, 39), (1, Ty::Read, 50, 99)]);
        assert!(st.posix_apply(&lk(1, Ty::Unlock, 30, OFFSET_MAX)).is_none());
        assert_eq!(ranges(&st), [(1, Ty::Read, 0, 29)]);
        // Adjacent same-type locks merge; another owner's stay apart.
        assert!(st.posix_apply(&lk(1, Ty::Read, 30, 30)).is_none());
        assert!(st.posix_apply(&lk(2, Ty::Read, 0, 5)).is_none());
        assert_eq!(ranges(&st), [(1, Ty::Read, 0, 30), (2, Ty::Read, 0, 5)]);
        // A conflicting write of owner 2 is refused, pointing at owner 1's lock.
        assert_eq!(st.posix_apply(&lk(2, Ty::Write, 30, 40)), Some(0));
        // To EOF and a write covering several locks replaces them.
        assert!(st.posix_apply(&lk(2, Ty::Read, 10, 12)).is_none());
        assert!(st.posix_apply(&lk(2, Ty::Read, 31, OFFSET_MAX)).is_none());
        assert!(st.posix_apply(&lk(1, Ty::Unlock, 0, OFFSET_MAX)).is_none());
        assert!(st.posix_apply(&lk(2, Ty::Write, 0, 100)).is_none());
        assert_eq!(ranges(&st), [(2, Ty::Write, 0, 100), (2, Ty::Read, 101, OFFSET_MAX)]);
    }

    #[test]
    fn deadlock_cycles_are_found() {
        let e = |id, w, b| Blocked { id, waiter: Owner::Files(w), blocker: Owner::Files(b) };
        let g = [e(1, 2, 3), e(2, 3, 4)];
        assert!(posix_locks_deadlock(&g, Owner::Files(4), Owner::Files(2)));
        assert!(!posix_locks_deadlock(&g, Owner::Files(5), Owner::Files(2)));
        assert!(!posix_locks_deadlock(&[], Owner::Files(1), Owner::Files(2)));
    }
}
