//! Statahead ([`crate::Levers::STATAHEAD`]): the subdirectories a READDIRPLUS hands the
//! kernel for the first time are listed, and their entries looked up, by a thread of
//! their own, before the kernel asks for them. The role of Lustre's client statahead
//! (`ll_statahead`), which stats a directory's entries ahead of the `ls -l` that will ask.
//!
//! Why: a walk of a tree through the mount (`find`, `du`, `git status` on a cold cache) is
//! a ping-pong. The caller sleeps while the server lists each directory, and the server
//! sleeps while the caller takes each reply in; on a host directory the server's part is
//! the host's own (`getdents64`, an `fstatat` of each entry, the disk reads under them)
//! plus uvfs's (its inodes and dentries), and it is on the walk's path. A walk that gets
//! to a directory always got it from its parent's listing, so when that listing hands out
//! a directory the kernel did not know, the server can do the listing's host work while
//! the caller is still busy elsewhere: the next READDIRPLUS of it finds the host's
//! directory blocks and inodes in the host's caches and every name in uvfs's dentry
//! cache (which a `--host-unchanged` mount trusts without asking the host again).
//!
//! Bounds: only directories new to the kernel (a listing read again queues nothing), one
//! level below a listing the kernel asked for (statahead never walks on by itself, so an
//! `ls` of a tree's root costs one listing of each of its subdirectories, not the tree),
//! [`ENTRIES_MAX`] entries a directory and [`QUEUED_MAX`] directories waiting (the most
//! recent first: a depth-first walk goes to the newest listing's subdirectories next;
//! the oldest are dropped). The thread runs in `SCHED_IDLE`, so it takes no CPU a caller
//! or a request worker wants. What it makes are cache entries like any lookup's: they
//! count against, and are evicted by, the caches' own limits.
//!
//! Only where a lookup costs host calls and its result is kept (a mount whose root is a
//! host directory): on memfs a lookup is already the cache.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use uvfs::{AtFlags, DirFd, Errno, File, OpenFlags, Task};

/// Entries of one directory looked up at most: a directory bigger than that is left to
/// the kernel's own listing, whose lookups are needed anyway.
pub(crate) const ENTRIES_MAX: usize = 4096;

/// Directories waiting at most; past it the oldest are dropped.
pub(crate) const QUEUED_MAX: usize = 1024;

/// The queue and its thread's counts. Shared by the request workers (which queue) and the
/// statahead thread.
#[derive(Default)]
pub(crate) struct Statahead {
    /// Own lock (a leaf): the directories waiting, newest first (node ids and the
    /// server's `O_PATH` node files).
    queue: Mutex<VecDeque<(u64, Arc<File>)>>,
    /// Signalled when a directory is queued or the thread is told to stop.
    more: Condvar,
    /// Atomic, set under `queue`'s lock (so a waiter cannot miss it): the thread is to
    /// stop; also read between lookups (an unmount waits for the thread).
    stopping: AtomicBool,
    /// Atomic: directories listed ahead so far (`MountHandle::statahead_counts`).
    pub(crate) dirs: AtomicU64,
    /// Atomic: entries looked up ahead so far.
    pub(crate) entries: AtomicU64,
}

impl Statahead {
    /// Queues `dirs` (node ids and files, in listing order) ahead of those already
    /// waiting.
    pub(crate) fn queue(&self, dirs: Vec<(u64, Arc<File>)>) {
        if dirs.is_empty() {
            return;
        }
        let dropped: Vec<(u64, Arc<File>)> = {
            let mut q = self.queue.lock();
            if self.stopped() {
                return;
            }
            for d in dirs.into_iter().rev() {
                q.push_front(d);
            }
            let keep = q.len().min(QUEUED_MAX);
            q.drain(keep..).collect()
        };
        self.more.notify_one();
        // Released outside the lock.
        drop(dropped);
    }

    /// The kernel lists node `id` itself now: it is not listed ahead (the two would only
    /// do the same lookups at once).
    pub(crate) fn listing(&self, id: u64) {
        let taken = {
            let mut q = self.queue.lock();
            let Some(i) = q.iter().position(|&(d, _)| d == id) else { return };
            q.remove(i)
        };
        drop(taken);
    }

    /// Tells the thread to stop, and drops what waits.
    pub(crate) fn stop(&self) {
        let dropped = {
            let mut q = self.queue.lock();
            self.stopping.store(true, Ordering::Relaxed);
            std::mem::take(&mut *q)
        };
        self.more.notify_all();
        drop(dropped);
    }

    /// The next directory, waiting for one; `None` once stopped.
    fn next(&self) -> Option<Arc<File>> {
        let mut q = self.queue.lock();
        loop {
            if self.stopped() {
                return None;
            }
            if let Some((_, d)) = q.pop_front() {
                return Some(d);
            }
            self.more.wait(&mut q);
        }
    }

    fn stopped(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }
}

/// Starts the statahead thread; `task` (the server's own) does its lookups.
pub(crate) fn spawn(sa: Arc<Statahead>, task: Arc<Task>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("uvfs-fuse-ahead".into()).spawn(move || {
        // Only the CPU nobody else wants (a failure leaves it in the normal class).
        let _ = crate::transport::sched::set_class(0, true);
        while let Some(dir) = sa.next() {
            list_ahead(&sa, &task, &dir);
        }
    })
}

/// Lists `dir` and looks each entry up (errors end the directory's statahead: it is only
/// a cache warmed ahead, the kernel's own requests get them).
fn list_ahead(sa: &Statahead, t: &Task, dir: &Arc<File>) {
    // A listing nobody asked for yet is no access: `O_NOATIME` where the server's task
    // may use it (the owner's or `CAP_FOWNER`; EPERM otherwise).
    let flags = OpenFlags::RDONLY | OpenFlags::DIRECTORY;
    let opened = match t.reopen_file(dir, flags | OpenFlags::NOATIME) {
        Err(Errno::EPERM) => t.reopen_file(dir, flags),
        r => r,
    };
    let Ok(fd) = opened else { return };
    let mut seen = 0;
    'listing: loop {
        let Ok(batch) = t.getdents(&fd, 256) else { return };
        if batch.is_empty() {
            break;
        }
        for e in batch {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            // "Held": no file is made; the lookup leaves the dentry and inode cached.
            let _ = t.lookup_path(DirFd::File(dir), &e.name, AtFlags::SYMLINK_NOFOLLOW, |_, _| true);
            seen += 1;
            if seen >= ENTRIES_MAX || sa.stopped() {
                break 'listing;
            }
        }
    }
    sa.entries.fetch_add(seen as u64, Ordering::Relaxed);
    sa.dirs.fetch_add(1, Ordering::Relaxed);
}
