//! Filesystem notification: marks on inodes, mounts and filesystems, and the hooks the
//! calls use to report events. Mirrors Linux's `fs/notify/fsnotify.c` and
//! `include/linux/fsnotify.h`.
//!
//! # The fast path (seed 000)
//! Every write, open, close and namespace change asks "does anyone care?". When nobody
//! watches anything on this filesystem the answer costs one relaxed load of the
//! superblock's watched-object count. When something is watched, the per-dentry
//! [`DENTRY_PARENT_WATCHED`] flag answers for the parent, then the inode's, mount's and
//! filesystem's mark masks for themselves; the first zero ends the check. No lock, no
//! call, no allocation until a mark really wants the event. [`FastPaths::NOTIFY`] off
//! sends every event to the dispatcher, which walks the marks (the general path, which
//! exists anyway). Either way the marks are read under the event's guard, each object's
//! list published whole at every change ([`Marks`]), and a lock is taken only to queue
//! an event for a group that wants it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bitflags::bitflags;

use crate::abi::config::FastPaths;
use crate::core::dentry::{DENTRY_PARENT_WATCHED, Dentry};
use crate::core::inode::Inode;
use crate::core::inotify::Group;
use crate::core::mount::Mount;
use crate::core::path::Pos;
use crate::sync::counters;
use crate::sync::rcu::{LocalGuard, Rcu, RcuOptArc};

bitflags! {
    /// Event and watch bits, with inotify's values (`IN_*`), which equal the kernel's
    /// internal `FS_*` bits for the events.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct EventMask: u32 {
        /// File was read.
        const ACCESS = 0x1;
        /// File was written.
        const MODIFY = 0x2;
        /// Metadata changed.
        const ATTRIB = 0x4;
        /// A file opened for writing was closed.
        const CLOSE_WRITE = 0x8;
        /// A file not opened for writing was closed.
        const CLOSE_NOWRITE = 0x10;
        /// File was opened.
        const OPEN = 0x20;
        /// Moved out of the watched directory.
        const MOVED_FROM = 0x40;
        /// Moved into the watched directory.
        const MOVED_TO = 0x80;
        /// Created in the watched directory.
        const CREATE = 0x100;
        /// Deleted from the watched directory.
        const DELETE = 0x200;
        /// The watched object was deleted.
        const DELETE_SELF = 0x400;
        /// The watched object was moved.
        const MOVE_SELF = 0x800;
        /// The filesystem was unmounted.
        const UNMOUNT = 0x2000;
        /// The event queue overflowed.
        const Q_OVERFLOW = 0x4000;
        /// The watch was removed.
        const IGNORED = 0x8000;
        /// Watch only if a directory.
        const ONLYDIR = 0x0100_0000;
        /// Do not follow a final symlink.
        const DONT_FOLLOW = 0x0200_0000;
        /// No events for children after they are unlinked.
        const EXCL_UNLINK = 0x0400_0000;
        /// Fail if the watch exists.
        const MASK_CREATE = 0x1000_0000;
        /// Add to the mask of an existing watch.
        const MASK_ADD = 0x2000_0000;
        /// The subject is a directory.
        const ISDIR = 0x4000_0000;
        /// Remove the watch after one event.
        const ONESHOT = 0x8000_0000;
    }
}

impl EventMask {
    /// `IN_CLOSE`.
    pub const CLOSE: EventMask = EventMask::CLOSE_WRITE.union(EventMask::CLOSE_NOWRITE);
    /// `IN_MOVE`.
    pub const MOVE: EventMask = EventMask::MOVED_FROM.union(EventMask::MOVED_TO);
    /// `IN_ALL_EVENTS`.
    pub const ALL_EVENTS: EventMask = EventMask::from_bits_truncate(0xfff);
    /// Events a directory reports about its children.
    pub(crate) const CHILD_EVENTS: EventMask = EventMask::from_bits_retain(0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20);
    /// Events that are only ever reported to the object itself.
    pub(crate) const EVENTS: EventMask = EventMask::from_bits_retain(0xfff);
}

/// What a mark is on.
#[derive(Clone)]
pub(crate) enum MarkTarget {
    /// An inode (inotify watches).
    Inode(Arc<Inode>),
    /// Every object seen through a mount.
    Mount(Arc<Mount>),
    /// Every object of a filesystem.
    Filesystem(Arc<crate::core::superblock::SuperBlock>),
}

/// A mark: one group's interest in one object.
pub(crate) struct Mark {
    /// Immutable: the group events go to.
    pub(crate) group: Arc<Group>,
    /// Immutable: the watch descriptor within the group.
    pub(crate) wd: i32,
    /// Atomic: `EventMask` bits wanted plus `ONESHOT`/`EXCL_UNLINK`; changed under the
    /// group lock.
    pub(crate) mask: AtomicU32,
    /// Immutable: the object.
    pub(crate) target: MarkTarget,
}

impl Mark {
    /// What the mark wants: events, plus `ONESHOT`/`EXCL_UNLINK`.
    #[inline]
    pub(crate) fn mask(&self) -> EventMask {
        EventMask::from_bits_retain(self.mask.load(Ordering::Relaxed))
    }
}

/// The marks on an object (Linux's `fsnotify_mark_connector`): a mount's and a
/// filesystem's inline, an inode's behind its extras pointer, made by its first mark
/// (`Inode::add_mark`), whose union the inode also keeps inline for the fast path.
pub(crate) struct Marks {
    /// Atomic: union of the event bits of the marks (read by the fast path); recomputed
    /// under `changing`. Unused for an inode's marks, whose union the inode keeps inline
    /// (the changes are given that one instead).
    mask: AtomicU32,
    /// Serializes changes of the list. A notify lock, taken by changes only.
    changing: NotifyMutex<()>,
    /// RCU: the marks (none before the first), replaced whole under `changing`; events
    /// read them under their guard, with no lock, count or copy (Linux walks a
    /// connector's marks under SRCU). A FUSE server's filesystem-wide mark sees every
    /// change it makes (and drops it, muted): a locked copy of the list was a tenth of
    /// its work per file of an untar.
    list: RcuOptArc<Vec<Arc<Mark>>>,
}

impl Default for Marks {
    fn default() -> Self {
        Marks { mask: AtomicU32::new(0), changing: NotifyMutex::default(), list: RcuOptArc::new(None) }
    }
}

impl Marks {
    /// Union of the marks' event bits.
    #[inline]
    pub(crate) fn mask(&self) -> EventMask {
        EventMask::from_bits_retain(self.mask.load(Ordering::Relaxed))
    }

    /// Adds `m`; `rcu` is the object's reclamation domain (the list replaced waits for its
    /// readers there). `mask`: where the object keeps the union, if not here (an inode's,
    /// inline), written under the same lock.
    pub(crate) fn add(&self, m: Arc<Mark>, rcu: &Rcu, mask: Option<&AtomicU32>) {
        self.change(rcu, mask, |l| l.push(m));
    }

    /// Removes `m`; whether it was there.
    pub(crate) fn remove(&self, m: &Arc<Mark>, rcu: &Rcu, mask: Option<&AtomicU32>) -> bool {
        self.change(rcu, mask, |l| {
            let before = l.len();
            l.retain(|x| !Arc::ptr_eq(x, m));
            l.len() != before
        })
    }

    /// Recomputes the union after a mark's own mask changed.
    pub(crate) fn recalc(&self, rcu: &Rcu, mask: Option<&AtomicU32>) {
        let _changing = self.changing.lock();
        let u = union_of(self.read(&rcu.pin()));
        mask.unwrap_or(&self.mask).store(u.bits(), Ordering::Relaxed);
    }

    /// Replaces the list with a copy that `f` changed, and the union with its own.
    fn change<R>(&self, rcu: &Rcu, mask: Option<&AtomicU32>, f: impl FnOnce(&mut Vec<Arc<Mark>>) -> R) -> R {
        let _changing = self.changing.lock();
        let mut l = self.read(&rcu.pin()).to_vec();
        let r = f(&mut l);
        mask.unwrap_or(&self.mask).store(union_of(&l).bits(), Ordering::Relaxed);
        self.list.store(Arc::new(l), rcu);
        r
    }

    /// The marks, as of the last change published before `guard` read them.
    #[inline]
    pub(crate) fn read<'g>(&'g self, guard: &'g LocalGuard<'_>) -> &'g [Arc<Mark>] {
        self.list.load(guard).map_or(&[], |l| l.get().as_slice())
    }
}

/// The union of the event bits of `l`: what an object's marks want.
pub(crate) fn union_of(l: &[Arc<Mark>]) -> EventMask {
    l.iter().fold(EventMask::empty(), |a, m| a | (m.mask() & EventMask::EVENTS))
}

/// A lock of the notify machinery: counts itself separately, so tests can prove the fast
/// path takes none.
#[derive(Default)]
pub(crate) struct NotifyMutex<T, const R: u8 = { crate::sync::rank::NOTIFY_MARKS }>(crate::sync::Mutex<T, R>);

impl<T, const R: u8> NotifyMutex<T, R> {
    pub(crate) fn new(v: T) -> Self {
        NotifyMutex(crate::sync::Mutex::new(v))
    }
    pub(crate) fn lock(&self) -> crate::sync::MutexGuard<'_, T, R> {
        counters::bump(|c| c.notify_locks += 1);
        self.0.lock()
    }
}

/// Per-filesystem notification state.
#[derive(Default)]
pub(crate) struct SbNotify {
    /// Atomic: objects of this filesystem with marks (inodes, mounts of it, itself). Zero:
    /// nobody watches anything here (the first check of the fast path).
    pub(crate) watched: AtomicU32,
    /// Filesystem-wide marks.
    pub(crate) marks: Marks,
    /// Every inode mark of this filesystem, for IN_UNMOUNT when it is unmounted.
    pub(crate) inode_marks: NotifyMutex<Vec<Arc<Mark>>>,
}

/// One event as the hooks describe it.
pub(crate) struct Event<'a> {
    /// One event, plus `ISDIR`.
    pub(crate) mask: EventMask,
    /// The object the event is about.
    pub(crate) inode: &'a Inode,
    /// For events on a name in a directory (create, delete, move), the directory and the
    /// name; for events on a file, its dentry (to report to a watched parent).
    pub(crate) dir: Option<(&'a Inode, &'a [u8])>,
    /// The dentry of the object, if known (children-of-watched-parent reporting).
    pub(crate) dentry: Option<&'a Dentry>,
    /// For namespace events, the directory's dentry (paths for mount/filesystem marks).
    pub(crate) dir_dentry: Option<&'a Dentry>,
    /// The mount it was seen through.
    pub(crate) mnt: Option<&'a Mount>,
    /// Pairs MOVED_FROM with MOVED_TO.
    pub(crate) cookie: u32,
    /// Linux carries it by path (`FSNOTIFY_EVENT_PATH`: an open file's open, read, write,
    /// `fallocate`, close), not by dentry (`notify_change`'s ATTRIB and truncating
    /// MODIFY): only such events of an unlinked file are left out for `IN_EXCL_UNLINK`,
    /// by the watch of its directory and by its own.
    pub(crate) by_path: bool,
}

static COOKIE: AtomicU32 = AtomicU32::new(1);

/// A fresh rename cookie.
pub(crate) fn next_cookie() -> u32 {
    COOKIE.fetch_add(1, Ordering::Relaxed)
}

/// The fast check for an event on a file (open, access, modify, close, attrib):
/// watched count, then the parent flag, then the masks. `false`: nobody can want it, and
/// the caller need not even pin a guard for [`notify_file`] (an open and a close of a file
/// nobody watches then take none: seed 000).
#[inline]
pub(crate) fn file_event_wanted(fast: FastPaths, mnt: &Mount, dentry: &Dentry, inode: &Inode, mask: EventMask) -> bool {
    if !fast.contains(FastPaths::NOTIFY) {
        return true;
    }
    let sb = inode.sb();
    if sb.notify.watched.load(Ordering::Relaxed) == 0 {
        return false;
    }
    dentry.flags() & DENTRY_PARENT_WATCHED != 0
        || (inode.mark_mask() | mnt.marks.mask() | sb.notify.marks.mask()).intersects(mask)
}

/// An event on a file (open, access, modify, close, attrib), after the fast check
/// ([`file_event_wanted`]); `by_path`: see [`Event::by_path`].
#[inline]
pub(crate) fn notify_file(
    fast: FastPaths,
    mnt: &Mount,
    dentry: &Dentry,
    inode: &Inode,
    mask: EventMask,
    by_path: bool,
    guard: &LocalGuard<'_>,
) {
    if !file_event_wanted(fast, mnt, dentry, inode, mask) {
        return;
    }
    let isdir = if inode.is_dir() { EventMask::ISDIR } else { EventMask::empty() };
    dispatch(
        &Event {
            mask: mask | isdir,
            inode,
            dir: None,
            dentry: Some(dentry),
            dir_dentry: None,
            mnt: Some(mnt),
            cookie: 0,
            by_path,
        },
        fast,
        guard,
    );
}

/// The fast check for an event on a name in the directory `dir` (create, delete, moved
/// from/to); `inode` is the named object.
#[inline]
pub(crate) fn notify_name(
    fast: FastPaths,
    dir: Pos<'_>,
    name: &[u8],
    inode: &Inode,
    mask: EventMask,
    cookie: u32,
    guard: &LocalGuard<'_>,
) {
    let dir_inode = dir.inode();
    if fast.contains(FastPaths::NOTIFY) {
        let sb = dir_inode.sb();
        if sb.notify.watched.load(Ordering::Relaxed) == 0 {
            return;
        }
        if !(dir_inode.mark_mask() | dir.mnt.marks.mask() | sb.notify.marks.mask()).intersects(mask) {
            return;
        }
    }
    let isdir = if inode.is_dir() { EventMask::ISDIR } else { EventMask::empty() };
    let ev = Event {
        mask: mask | isdir,
        inode,
        dir: Some((dir_inode, name)),
        dentry: None,
        dir_dentry: Some(dir.dentry.get()),
        mnt: Some(dir.mnt.get()),
        cookie,
        by_path: false,
    };
    dispatch(&ev, fast, guard);
}

/// The fast check for an event on the object itself only (delete_self, move_self, its
/// link count).
#[inline]
pub(crate) fn notify_self(fast: FastPaths, inode: &Inode, mask: EventMask, guard: &LocalGuard<'_>) {
    if fast.contains(FastPaths::NOTIFY) {
        let sb = inode.sb();
        if sb.notify.watched.load(Ordering::Relaxed) == 0
            || !(inode.mark_mask() | sb.notify.marks.mask()).intersects(mask)
        {
            return;
        }
    }
    // Of the events on the object itself, only the link-count ATTRIB (`fsnotify_inode`)
    // carries IN_ISDIR; DELETE_SELF and MOVE_SELF reach inotify without it (checked
    // against the kernel by tests/notify.rs).
    let isdir = if inode.is_dir() && mask == EventMask::ATTRIB { EventMask::ISDIR } else { EventMask::empty() };
    dispatch(
        &Event {
            mask: mask | isdir,
            inode,
            dir: None,
            dentry: None,
            dir_dentry: None,
            mnt: None,
            cookie: 0,
            by_path: false,
        },
        fast,
        guard,
    );
}

/// The general path: report to the marks that want it, in Linux's order (the watched
/// parent with the child's name, then the object itself, then mount and filesystem).
#[cold]
fn dispatch(ev: &Event<'_>, fast: FastPaths, guard: &LocalGuard<'_>) {
    let bits = ev.mask & EventMask::EVENTS;
    if let Some((dir, name)) = ev.dir {
        // A namespace event: reported to the directory's watches with the name.
        for m in dir.marks(guard) {
            // IN_EXCL_UNLINK concerns events on unlinked children, not the namespace events.
            m.group.deliver(m, ev.mask, ev.cookie, Some(name), bits, false);
        }
    } else {
        if let Some(d) = ev.dentry
            && (d.flags() & DENTRY_PARENT_WATCHED != 0 || !fast.contains(FastPaths::NOTIFY))
        {
            report_to_parent(ev, d, bits, guard);
        }
        let unlinked = ev.by_path && ev.dentry.is_some_and(Dentry::is_dead);
        for m in ev.inode.marks(guard) {
            m.group.deliver(m, ev.mask, ev.cookie, None, bits, unlinked);
        }
    }
    if let Some(mnt) = ev.mnt {
        for m in mnt.marks.read(guard) {
            m.group.deliver_path(m, ev, bits, guard);
        }
    }
    for m in ev.inode.sb().notify.marks.read(guard) {
        m.group.deliver_path(m, ev, bits, guard);
    }
}

/// An event on a file, for the watches of its directory (with the file's name).
fn report_to_parent(ev: &Event<'_>, d: &Dentry, bits: EventMask, guard: &LocalGuard<'_>) {
    let parent = d.parent(guard);
    let Some(pi) = parent.inode().filter(|_| !std::ptr::eq(parent, d)) else { return };
    let marks = pi.marks(guard);
    if marks.is_empty() || !pi.mark_mask().intersects(EventMask::CHILD_EVENTS) {
        // Nobody there wants child events any more: clear lazily, as Linux.
        d.clear_parent_watched();
    }
    let unlinked = ev.by_path && d.is_dead();
    for m in marks {
        m.group.deliver(m, ev.mask, 0, Some(d.name(guard)), bits & EventMask::CHILD_EVENTS, unlinked);
    }
}

/// Sets `DENTRY_PARENT_WATCHED` on a new child if its directory wants child events.
#[inline]
pub(crate) fn d_instantiate_flags(parent: &Dentry, child: &Dentry) {
    let wants = parent.inode().is_some_and(|i| i.mark_mask().intersects(EventMask::CHILD_EVENTS));
    if wants {
        child.set_flag(DENTRY_PARENT_WATCHED);
    } else if child.flags() & DENTRY_PARENT_WATCHED != 0 {
        child.clear_parent_watched();
    }
}

/// `fsnotify_sb_delete`: the filesystem's last mount went away: every inode watch on it
/// gets IN_UNMOUNT, then IN_IGNORED.
pub(crate) fn sb_unmounted(sb: &crate::core::superblock::SuperBlock) {
    let marks = std::mem::take(&mut *sb.notify.inode_marks.lock());
    for m in marks {
        m.group.unmounted(&m);
    }
}

/// `fsnotify_inoderemove`: the inode lost its last link and use: DELETE_SELF, then its
/// watches go (IN_IGNORED), before the directory reports the DELETE.
pub(crate) fn inode_deleted(fast: FastPaths, inode: &Inode, guard: &LocalGuard<'_>) {
    notify_self(fast, inode, EventMask::DELETE_SELF, guard);
    inode_gone(fast, inode);
}

/// The inode is gone (deleted and unused): its watches get `IN_IGNORED` and go away.
pub(crate) fn inode_gone(fast: FastPaths, inode: &Inode) {
    if fast.contains(FastPaths::NOTIFY)
        && (inode.sb().notify.watched.load(Ordering::Relaxed) == 0 || inode.mark_mask().is_empty())
    {
        return;
    }
    for m in inode.marks_snapshot() {
        m.group.object_gone(&m);
    }
}
