//! inotify: a group of watches and its event queue. Mirrors Linux's
//! `fs/notify/inotify/` (queue limit with one `IN_Q_OVERFLOW`, coalescing of an event
//! identical to the last queued one, `IN_IGNORED` when a watch goes away, `IN_ONESHOT`),
//! plus marks on a whole mount or filesystem whose events carry the path (fanotify's mark
//! kinds), for tools that watch a tree without a watch per directory.
//!
//! An instance is an [`Inotify`] handle rather than a descriptor of the task; it reads
//! events as typed values or as Linux's `struct inotify_event` bytes, blocks with a
//! timeout, and offers a readiness descriptor (an eventfd, readable while events are
//! queued) for epoll or an async loop.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bitflags::bitflags;

use crate::abi::errno::{Errno, Result};

use crate::core::fsnotify::{EventMask, Mark, MarkTarget, NotifyMutex};
use crate::sync::rcu::LocalGuard;

bitflags! {
    /// `inotify_init1(2)` flags.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct InotifyFlags: u32 {
        /// Reads do not block: EAGAIN when the queue is empty.
        const NONBLOCK = 0o4000;
        /// Accepted for compatibility (no exec here).
        const CLOEXEC = 0o2000000;
    }
}

/// What a filesystem-wide mark covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkKind {
    /// Every object seen through the mount of the path.
    Mount,
    /// Every object of the filesystem of the path.
    Filesystem,
}

/// One event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InotifyEvent {
    /// Watch descriptor (-1 for `IN_Q_OVERFLOW`).
    pub wd: i32,
    /// Event bits (one event, plus `ISDIR`), or `IGNORED`/`UNMOUNT`/`Q_OVERFLOW`.
    pub mask: EventMask,
    /// Pairs `MOVED_FROM` with `MOVED_TO`.
    pub cookie: u32,
    /// Name of the child, for events a directory reports about an entry.
    pub name: Option<Vec<u8>>,
    /// Path of the object, for mount and filesystem marks (none for an event on the
    /// object alone, its link count, which only filesystem marks hear).
    pub path: Option<Vec<u8>>,
    /// The object's device and inode number (`st_dev`, `st_ino`), for mount and
    /// filesystem marks, as fanotify's `FAN_REPORT_FID` identifies it: for a namespace
    /// event the named object, which the path may no longer name (a name removed or
    /// moved) while other names of it stay.
    pub object: Option<(u64, u64)>,
}

impl InotifyEvent {
    /// Whether this event folds into `last`, the last one queued (`inotify_merge`'s
    /// `event_compare`): the same watch, bits and name (and, for mount and filesystem
    /// marks, path and object), after anything but `IN_IGNORED`. The cookie is not
    /// compared: a `MOVED_TO` of a name right after one of the same name from another
    /// move is dropped, as Linux drops it.
    fn merges_into(&self, last: &InotifyEvent) -> bool {
        !last.mask.contains(EventMask::IGNORED)
            && last.wd == self.wd
            && last.mask == self.mask
            && last.name == self.name
            && last.path == self.path
            && last.object == self.object
    }

    /// Size of this event in Linux's byte layout.
    pub fn byte_len(&self) -> usize {
        16 + self.name.as_ref().map_or(0, |n| (n.len() + 1).next_multiple_of(16))
    }

    fn write_to(&self, out: &mut [u8]) {
        let name_len = self.byte_len() - 16;
        out[0..4].copy_from_slice(&self.wd.to_ne_bytes());
        out[4..8].copy_from_slice(&self.mask.bits().to_ne_bytes());
        out[8..12].copy_from_slice(&self.cookie.to_ne_bytes());
        out[12..16].copy_from_slice(&(name_len as u32).to_ne_bytes());
        out[16..16 + name_len].fill(0);
        if let Some(n) = &self.name {
            out[16..16 + n.len()].copy_from_slice(n);
        }
    }
}

/// What the group lock protects.
pub(crate) struct GroupState {
    queue: VecDeque<InotifyEvent>,
    /// Events ever queued (an overflow marker counts; a merged or dropped event does not).
    queued: u64,
    /// Watches by descriptor.
    pub(crate) watches: BTreeMap<i32, Arc<Mark>>,
    /// Next descriptor to hand out.
    pub(crate) next_wd: i32,
    pub(crate) closed: bool,
}

/// A group: the watches of one instance and its queue.
pub struct Group {
    /// The group lock (a notify lock; a leaf after the marks' locks).
    pub(crate) state: NotifyMutex<GroupState, { crate::sync::rank::NOTIFY_GROUP }>,
    /// Signalled when an event is queued or the group is closed.
    cond: parking_lot::Condvar,
    /// Readable (count > 0) while events are queued.
    efd: OwnedFd,
    /// Immutable.
    nonblock: bool,
    /// Immutable: queue bound (`max_queued_events`).
    max_events: usize,
    /// Immutable: watch bound (`max_user_watches`).
    pub(crate) max_watches: usize,
}

/// An inotify instance.
pub struct Inotify {
    pub(crate) group: Arc<Group>,
}

impl Inotify {
    /// A new instance (`inotify_init1`) that queues at most `max_events` events and holds
    /// at most `max_watches` watches.
    pub(crate) fn new(flags: InotifyFlags, max_events: usize, max_watches: usize) -> Result<Inotify> {
        let efd =
            rustix::event::eventfd(0, rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC)
                .map_err(|e| Errno::from_raw(e.raw_os_error()))?;
        Ok(Inotify {
            group: Arc::new(Group {
                state: NotifyMutex::new(GroupState {
                    queue: VecDeque::new(),
                    queued: 0,
                    watches: BTreeMap::new(),
                    next_wd: 1,
                    closed: false,
                }),
                cond: parking_lot::Condvar::new(),
                efd,
                nonblock: flags.contains(InotifyFlags::NONBLOCK),
                max_events,
                max_watches,
            }),
        })
    }
}

impl Group {
    fn signal(&self, st: &GroupState) {
        let ready = !st.queue.is_empty();
        // The eventfd mirrors "queue non-empty": write 1 when it becomes so, drain when
        // it empties. Both calls are nonblocking; a full counter cannot happen (at most 1).
        if ready {
            let _ = rustix::io::write(&self.efd, &1u64.to_ne_bytes());
        } else {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&self.efd, &mut b);
        }
        self.cond.notify_all();
    }

    fn push(&self, st: &mut GroupState, ev: InotifyEvent) {
        if st.closed {
            return;
        }
        // Coalesce with the last queued event, as `inotify_merge`.
        if st.queue.back().is_some_and(|last| ev.merges_into(last)) {
            return;
        }
        let was_empty = st.queue.is_empty();
        if st.queue.len() >= self.max_events {
            if st.queue.back().is_some_and(|l| l.mask == EventMask::Q_OVERFLOW) {
                return;
            }
            st.queue.push_back(InotifyEvent {
                wd: -1,
                mask: EventMask::Q_OVERFLOW,
                cookie: 0,
                name: None,
                path: None,
                object: None,
            });
        } else {
            st.queue.push_back(ev);
        }
        st.queued += 1;
        if was_empty {
            self.signal(st);
        } else {
            self.cond.notify_all();
        }
    }

    /// Delivers an event to `m` if it wants it.
    pub(crate) fn deliver(
        &self,
        m: &Arc<Mark>,
        mask: EventMask,
        cookie: u32,
        name: Option<&[u8]>,
        bits: EventMask,
        unlinked: bool,
    ) {
        let mmask = m.mask();
        if !mmask.intersects(bits) || self.muted_here() {
            return;
        }
        if unlinked && mmask.contains(EventMask::EXCL_UNLINK) {
            return;
        }
        let mut st = self.state.lock();
        if !st.watches.get(&m.wd).is_some_and(|w| Arc::ptr_eq(w, m)) {
            return;
        }
        let reported = (mask & (bits & mmask)) | (mask & EventMask::ISDIR);
        let ev =
            InotifyEvent { wd: m.wd, mask: reported, cookie, name: name.map(<[u8]>::to_vec), path: None, object: None };
        self.push(&mut st, ev);
        if mmask.contains(EventMask::ONESHOT) {
            let gone = self.remove_watch_locked(&mut st, m.wd);
            drop(st);
            drop(gone);
        }
    }

    /// Delivers an event with its path to a mount or filesystem mark.
    pub(crate) fn deliver_path(
        &self,
        m: &Arc<Mark>,
        ev: &crate::core::fsnotify::Event<'_>,
        bits: EventMask,
        guard: &LocalGuard<'_>,
    ) {
        if !m.mask().intersects(bits) || self.muted_here() {
            return;
        }
        // An event on the object alone (its link count: `fsnotify_inode`) has no path; a
        // filesystem mark hears it by the object's identity, as fanotify's FID groups do.
        let path = match (ev.mnt, ev.dentry, ev.dir_dentry, ev.dir) {
            (None, ..) => None,
            (Some(mnt), Some(d), _, _) => Some(crate::core::path::dentry_path(mnt, d, guard)),
            (Some(mnt), None, Some(dd), Some((_, name))) => {
                let mut p = crate::core::path::dentry_path(mnt, dd, guard);
                if p.last() != Some(&b'/') {
                    p.push(b'/');
                }
                p.extend_from_slice(name);
                Some(p)
            }
            _ => return,
        };
        let mut st = self.state.lock();
        let reported = (ev.mask & bits) | (ev.mask & EventMask::ISDIR);
        let object = Some((ev.inode.sb().dev(), ev.inode.ino().0));
        let e = InotifyEvent { wd: m.wd, mask: reported, cookie: ev.cookie, name: None, path, object };
        self.push(&mut st, e);
    }

    /// Removes a watch: unhooks the mark and queues `IN_IGNORED`. Returns the mark, for
    /// the caller to drop after the group lock: it may hold the last reference of an inode,
    /// whose destructor takes the filesystem's locks.
    #[must_use]
    pub(crate) fn remove_watch_locked(&self, st: &mut GroupState, wd: i32) -> Option<Arc<Mark>> {
        let m = st.watches.remove(&wd)?;
        unhook(&m);
        let ev = InotifyEvent { wd, mask: EventMask::IGNORED, cookie: 0, name: None, path: None, object: None };
        self.push(st, ev);
        Some(m)
    }

    /// The filesystem of `m` was unmounted: `IN_UNMOUNT`, then `IN_IGNORED`.
    pub(crate) fn unmounted(&self, m: &Arc<Mark>) {
        let mut st = self.state.lock();
        if st.watches.get(&m.wd).is_some_and(|w| Arc::ptr_eq(w, m)) {
            let ev =
                InotifyEvent { wd: m.wd, mask: EventMask::UNMOUNT, cookie: 0, name: None, path: None, object: None };
            self.push(&mut st, ev);
            let gone = self.remove_watch_locked(&mut st, m.wd);
            drop(st);
            drop(gone);
        }
    }

    /// The object of `m` is gone (deleted, unmounted): `IN_IGNORED`, mark removed.
    pub(crate) fn object_gone(&self, m: &Arc<Mark>) {
        let mut st = self.state.lock();
        if st.watches.get(&m.wd).is_some_and(|w| Arc::ptr_eq(w, m)) {
            let gone = self.remove_watch_locked(&mut st, m.wd);
            drop(st);
            drop(gone);
        }
    }
}

/// Takes a mark off its object and out of the watched count.
pub(crate) fn unhook(m: &Arc<Mark>) {
    let sb = match &m.target {
        MarkTarget::Inode(i) => {
            i.remove_mark(m);
            i.sb().notify.inode_marks.lock().retain(|x| !Arc::ptr_eq(x, m));
            i.sb().clone()
        }
        MarkTarget::Mount(mnt) => {
            mnt.marks.remove(m, &mnt.sb().rcu(), None);
            mnt.sb().clone()
        }
        MarkTarget::Filesystem(sb) => {
            sb.notify.marks.remove(m, &sb.rcu(), None);
            sb.clone()
        }
    };
    sb.notify.watched.fetch_sub(1, Ordering::Relaxed);
}

thread_local! {
    /// The group (its address) the calling thread's changes are not reported to, while a
    /// [`MuteGuard`] lives on this thread; 0 for none.
    static MUTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// While alive, changes made by the thread that made it are not reported to one instance
/// ([`Inotify::mute_this_thread`]); the thread's previous muting comes back on drop.
pub struct MuteGuard {
    prev: usize,
    /// Tied to the thread that set it (the muting is a thread-local).
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for MuteGuard {
    fn drop(&mut self) {
        MUTED.with(|m| m.set(self.prev));
    }
}

impl Group {
    /// Whether the calling thread muted this group.
    fn muted_here(&self) -> bool {
        MUTED.with(|m| m.get()) == self as *const Group as usize
    }
}

impl Inotify {
    /// Changes made by the calling thread while the guard lives are not reported to this
    /// instance. No Linux call does this; it is for a server that applies, on its own
    /// threads, changes its client already knows of, and watches the filesystem for the
    /// others (uvfs-fuse: the kernel's caches see the mount's changes, and the watch
    /// pushes only in-process changes to them). Costs nothing on the fast path: it is
    /// checked where an event is about to be queued.
    pub fn mute_this_thread(&self) -> MuteGuard {
        let me = Arc::as_ptr(&self.group) as usize;
        MuteGuard { prev: MUTED.with(|m| m.replace(me)), _not_send: std::marker::PhantomData }
    }

    /// Reads up to `max` events, waiting up to `timeout` (`None`: as the instance's
    /// blocking mode says; a nonblocking instance never waits). EAGAIN if none came.
    pub fn read_events(&self, max: usize, timeout: Option<Duration>) -> Result<Vec<InotifyEvent>> {
        let g = &*self.group;
        let mut st = g.state.lock();
        if st.closed {
            return Err(Errno::EBADF);
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        while st.queue.is_empty() {
            if g.nonblock && timeout.is_none() {
                return Err(Errno::EAGAIN);
            }
            match deadline {
                Some(d) => {
                    if g.cond.wait_until(st.parking_lot(), d).timed_out() && st.queue.is_empty() {
                        return Err(Errno::EAGAIN);
                    }
                }
                None => g.cond.wait(st.parking_lot()),
            }
            if st.closed {
                return Err(Errno::EBADF);
            }
        }
        let n = max.min(st.queue.len());
        let out: Vec<InotifyEvent> = st.queue.drain(..n).collect();
        if st.queue.is_empty() {
            g.signal(&st);
        }
        Ok(out)
    }

    /// `read(2)` on the instance: events in Linux's `struct inotify_event` layout; EINVAL
    /// if the first event does not fit; blocks unless the instance is nonblocking.
    pub fn read(&self, buf: &mut [u8]) -> Result<usize> {
        let g = &*self.group;
        let mut st = g.state.lock();
        loop {
            if st.closed {
                return Err(Errno::EBADF);
            }
            if !st.queue.is_empty() {
                break;
            }
            if g.nonblock {
                return Err(Errno::EAGAIN);
            }
            g.cond.wait(st.parking_lot());
        }
        let mut used = 0;
        while let Some(ev) = st.queue.front() {
            let len = ev.byte_len();
            if used + len > buf.len() {
                if used == 0 {
                    return Err(Errno::EINVAL);
                }
                break;
            }
            ev.write_to(&mut buf[used..used + len]);
            used += len;
            st.queue.pop_front();
        }
        if st.queue.is_empty() {
            g.signal(&st);
        }
        Ok(used)
    }

    /// Events queued now (`FIONREAD` counts bytes; this counts events).
    pub fn pending(&self) -> usize {
        self.group.state.lock().queue.len()
    }

    /// Events queued since the instance was made, read or not (an event merged into the
    /// one before it, or dropped at overflow, is not; the overflow event is). A reader
    /// that counts the events it has handled has handled every change made before a call
    /// of this once its count reaches the value returned.
    pub fn queued_total(&self) -> u64 {
        self.group.state.lock().queued
    }

    /// A descriptor that is readable while events are queued (an eventfd).
    pub fn readiness_fd(&self) -> BorrowedFd<'_> {
        self.group.efd.as_fd()
    }

    /// Closes the instance: every watch goes away; later calls get EBADF.
    pub fn close(&self) -> Result<()> {
        let g = &*self.group;
        let mut st = g.state.lock();
        if st.closed {
            return Err(Errno::EBADF);
        }
        st.closed = true;
        let watches = std::mem::take(&mut st.watches);
        for m in watches.values() {
            unhook(m);
        }
        st.queue.clear();
        g.signal(&st);
        // The marks may hold the last references of inodes, whose destructors take the
        // filesystem's locks: dropped after the group lock.
        drop(st);
        drop(watches);
        Ok(())
    }
}

impl Drop for Inotify {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// A directory that now wants child events flags its children, so their events find
/// the watch through the per-dentry check (Linux's `fsnotify_set_children_dentry_flags`,
/// over every cached child: a filesystem that is not dcache-complete keeps no readdir
/// order, only its table). Under the directory lock shared, no child is added meanwhile;
/// one added after takes the flag from the watch already in place (`d_instantiate_flags`).
pub(crate) fn set_children_watched(
    dentry: &crate::core::dentry::Dentry,
    inode: &crate::core::inode::Inode,
    guard: &crate::sync::rcu::LocalGuard<'_>,
) {
    if !inode.is_dir() || !inode.mark_mask().intersects(EventMask::CHILD_EVENTS) {
        return;
    }
    if let Some(dir) = dentry.dir() {
        let _l = dir.lock.read();
        dir.children.for_each(guard, |d| {
            if d.inode().is_some() {
                d.set_flag(crate::core::dentry::DENTRY_PARENT_WATCHED);
            }
        });
    }
}
