//! Kernel cache invalidation for changes made through the in-process API while mounted.
//!
//! The kernel caches entries, attributes and file pages of the mount for the configured
//! timeouts. A change made through the mount keeps those caches right by itself; a change
//! made in-process (another [`uvfs::Task`] of the same [`uvfs::Vfs`]) does not. This thread
//! holds a filesystem-wide notify mark ([`uvfs::Task::fanotify_mark`] with
//! [`uvfs::MarkKind::Filesystem`]) on the served filesystem and turns each event into a
//! notification: a name created, deleted or moved invalidates that entry of its directory
//! (`FUSE_NOTIFY_INVAL_ENTRY`) and the directory's cached listing and attributes
//! (`FUSE_NOTIFY_INVAL_INODE`), a data change invalidates the node's pages and attributes,
//! an attribute change its attributes (`FUSE_NOTIFY_INVAL_INODE`). Changes the server
//! makes for the kernel are not reported to the thread at all (the request threads mute
//! its instance, [`uvfs::Inotify::mute_this_thread`]): the kernel knows them, invalidating
//! them would cost a round trip at best and at worst unhash a dentry in use (a directory
//! that is a process's cwd would fail `getcwd`), and hearing of them would wake this
//! thread at every change made through the mount. Notifications are
//! asynchronous: a reader on the mount sees an in-process change once the thread has
//! handled its event (normally well under a millisecond), not at the instant of the change;
//! [`crate::MountHandle::sync_invalidations`] waits for that.
//! Only the filesystem at the root of the tree is watched.
//!
//! A second thread sends the invalidations of [`crate::Levers::RELIST`]: directories whose
//! listing the kernel should drop because files in them were read ([`spawn_relist`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use uvfs::{EventMask, InotifyFlags, MarkKind};

use crate::server::{Server, key_of};
use crate::session::Notifier;

/// Starts the thread; `None` if the mark could not be placed (logged).
pub(crate) fn spawn(s: Arc<Server>, notifier: Notifier, stop: Arc<AtomicBool>) -> Option<JoinHandle<()>> {
    let base = s.tasks.base().clone();
    let ino = match base.inotify_init1(InotifyFlags::empty()) {
        Ok(i) => Arc::new(i),
        Err(e) => {
            log::warn!("uvfs-fuse: no invalidation of in-process changes: inotify_init1: {e}");
            return None;
        }
    };
    let mask = EventMask::MODIFY
        | EventMask::ATTRIB
        | EventMask::CREATE
        | EventMask::DELETE
        | EventMask::MOVED_FROM
        | EventMask::MOVED_TO;
    // Muted on the request threads before the mark exists: no change made for the kernel
    // is ever reported.
    let _ = s.watch.set(ino.clone());
    if let Err(e) = base.fanotify_mark(&ino, MarkKind::Filesystem, b"/", mask) {
        log::warn!("uvfs-fuse: no invalidation of in-process changes: fanotify_mark: {e}");
        return None;
    }
    std::thread::Builder::new()
        .name("uvfs-fuse-inval".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let events = match ino.read_events(256, Some(Duration::from_millis(100))) {
                    Ok(ev) => ev,
                    Err(uvfs::Errno::EAGAIN) | Err(uvfs::Errno::EINTR) => continue,
                    Err(_) => break,
                };
                let n = events.len() as u64;
                for ev in events {
                    handle(&s, &notifier, &base, ev);
                }
                *s.watch_handled.lock() += n;
                s.watch_done.notify_all();
            }
            // Nothing waits for a thread that is gone.
            *s.watch_handled.lock() = u64::MAX;
            s.watch_done.notify_all();
            let _ = ino.close();
        })
        .ok()
}

fn handle(s: &Server, notifier: &Notifier, base: &uvfs::Task, ev: uvfs::InotifyEvent) {
    let m = ev.mask;
    if m.contains(EventMask::Q_OVERFLOW) {
        log::warn!("uvfs-fuse: notify queue overflow; kernel caches may be stale until their timeouts");
        return;
    }
    // The object's attributes (and with MODIFY its pages), found by its identity, not by
    // the path, which a name removed or moved no longer leads to: a name made, removed or
    // moved changes the object's link count or change time, which the kernel may hold
    // for another name of it (a hard link) or an open file; a file renamed over reports
    // its link count with no path at all.
    if let Some(key) = ev.object
        && let Some(id) = s.nodes.lookup_key_stale(key)
    {
        let off = if m.contains(EventMask::MODIFY) { 0 } else { -1 };
        let _ = notifier.inval_inode(id, off, 0);
    }
    let Some(path) = ev.path else { return };
    if m.intersects(EventMask::CREATE | EventMask::DELETE | EventMask::MOVED_FROM | EventMask::MOVED_TO) {
        let Some(slash) = path.iter().rposition(|&b| b == b'/') else { return };
        let (dir, name) = (if slash == 0 { &b"/"[..] } else { &path[..slash] }, &path[slash + 1..]);
        if name.is_empty() {
            return;
        }
        if let Ok(st) = base.lstat(dir) {
            let key = key_of(&st);
            if let Some(id) = s.nodes.lookup_key(key) {
                let _ = notifier.inval_entry(id, name);
                // The kernel drops a cached listing (`FOPEN_CACHE_DIR`, or any with
                // `NO_OPENDIR`) on an entry invalidation only when it holds a dentry of
                // that name, never for a new name: drop the directory's pages, where the
                // listing is cached, and its attributes (the mtime moved).
                let _ = notifier.inval_inode(id, 0, 0);
            }
        }
    }
}

/// Starts the thread that sends [`crate::Levers::RELIST`]'s invalidations: the request
/// threads queue a directory's node id (`Server::note_read`) and go on; the notification
/// is written here, outside any request, so no request waits for the kernel to drop a
/// listing (which takes the listing's page locks). Node id 0 ends the thread.
pub(crate) fn spawn_relist(s: &Arc<Server>, notifier: Notifier) -> Option<JoinHandle<()>> {
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    s.relist.set(tx).ok()?;
    let s = s.clone();
    std::thread::Builder::new()
        .name("uvfs-fuse-relist".into())
        .spawn(move || {
            while let Ok(id) = rx.recv() {
                if id == 0 {
                    break;
                }
                // ENOENT: the kernel forgot the directory meanwhile; nothing is cached.
                let _ = notifier.inval_inode(id, 0, 0);
                s.relisted.fetch_add(1, Ordering::Relaxed);
            }
        })
        .ok()
}
