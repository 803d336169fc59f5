//! `inotify_init1`, `inotify_add_watch`, `inotify_rm_watch`, and marks on a mount or
//! filesystem (`fanotify_mark`). Mirrors Linux's `fs/notify/inotify/inotify_user.c`; the
//! groups, queues and marks are in `core/inotify.rs` and `core/fsnotify.rs`.

use crate::abi::errno::{Errno, Result};
use crate::core::file::DirFd;
use crate::core::fsnotify::{EventMask, Mark, MarkTarget};
use crate::core::inotify::Inotify;
use crate::core::inotify::InotifyFlags;
use crate::core::inotify::MarkKind;
use crate::core::inotify::set_children_watched;
use crate::core::permission::{MAY_READ, generic_permission};
use crate::task::Task;
use crate::walk::namei::LookupFlags;
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Task {
    /// `inotify_init1(2)`.
    pub fn inotify_init1(&self, flags: InotifyFlags) -> Result<Inotify> {
        let cfg = &self.vfs.config;
        Inotify::new(flags, cfg.max_queued_events, cfg.max_user_watches)
    }

    /// `inotify_add_watch(2)`: returns the watch descriptor (the same one again for an
    /// inode this instance already watches).
    pub fn inotify_add_watch(&self, ino: &Inotify, path: &[u8], mask: EventMask) -> Result<i32> {
        if mask.contains(EventMask::MASK_ADD | EventMask::MASK_CREATE) {
            return Err(Errno::EINVAL);
        }
        if !mask.intersects(EventMask::EVENTS) {
            return Err(Errno::EINVAL);
        }
        if ino.group.state.lock().closed {
            return Err(Errno::EBADF);
        }
        let mut lf = LookupFlags::empty();
        if !mask.contains(EventMask::DONT_FOLLOW) {
            lf |= LookupFlags::FOLLOW;
        }
        if mask.contains(EventMask::ONLYDIR) {
            lf |= LookupFlags::DIRECTORY;
        }
        let p = self.resolve(DirFd::Cwd, path, lf)?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?.clone();
        {
            let guard = self.vfs.rcu.pin();
            generic_permission(self.creds.load(&guard).get(), &inode, MAY_READ, self.vfs.fast, &guard)?;
        }
        let keep = (EventMask::ALL_EVENTS | EventMask::ONESHOT | EventMask::EXCL_UNLINK).bits();
        let g = &ino.group;
        let mut st = g.state.lock();
        if let Some((wd, m)) =
            st.watches.iter().find(|(_, m)| matches!(&m.target, MarkTarget::Inode(i) if Arc::ptr_eq(i, &inode)))
        {
            if mask.contains(EventMask::MASK_CREATE) {
                return Err(Errno::EEXIST);
            }
            let old = m.mask.load(Ordering::Relaxed);
            let new = if mask.contains(EventMask::MASK_ADD) { old | (mask.bits() & keep) } else { mask.bits() & keep };
            m.mask.store(new, Ordering::Relaxed);
            inode.recalc_marks();
            let wd = *wd;
            drop(st);
            set_children_watched(&p.dentry, &inode, &self.vfs.rcu.pin());
            return Ok(wd);
        }
        if st.watches.len() >= g.max_watches {
            return Err(Errno::ENOSPC);
        }
        let wd = st.next_wd;
        st.next_wd += 1;
        let m = Arc::new(Mark {
            group: g.clone(),
            wd,
            mask: (mask.bits() & keep).into(),
            target: MarkTarget::Inode(inode.clone()),
        });
        st.watches.insert(wd, m.clone());
        inode.sb().notify.watched.fetch_add(1, Ordering::Relaxed);
        inode.sb().notify.inode_marks.lock().push(m.clone());
        inode.add_mark(m);
        drop(st);
        set_children_watched(&p.dentry, &inode, &self.vfs.rcu.pin());
        Ok(wd)
    }

    /// `inotify_rm_watch(2)`.
    pub fn inotify_rm_watch(&self, ino: &Inotify, wd: i32) -> Result<()> {
        let g = &ino.group;
        let mut st = g.state.lock();
        if st.closed {
            return Err(Errno::EBADF);
        }
        let gone = g.remove_watch_locked(&mut st, wd);
        drop(st);
        if gone.is_some() { Ok(()) } else { Err(Errno::EINVAL) }
    }

    /// A mark on the whole mount or filesystem of `path` (fanotify's mark kinds): every
    /// event of the kinds in `mask` on any object there is reported with its path and the
    /// object's identity ([`crate::InotifyEvent::object`]); a filesystem mark also hears
    /// an event on an object alone (a link count change), which has no path.
    pub fn fanotify_mark(&self, ino: &Inotify, kind: MarkKind, path: &[u8], mask: EventMask) -> Result<i32> {
        if !mask.intersects(EventMask::EVENTS) {
            return Err(Errno::EINVAL);
        }
        let p = self.resolve(DirFd::Cwd, path, LookupFlags::FOLLOW)?;
        let g = &ino.group;
        let mut st = g.state.lock();
        if st.closed {
            return Err(Errno::EBADF);
        }
        if st.watches.len() >= g.max_watches {
            return Err(Errno::ENOSPC);
        }
        let wd = st.next_wd;
        st.next_wd += 1;
        let target = match kind {
            MarkKind::Mount => MarkTarget::Mount(p.mnt.clone()),
            MarkKind::Filesystem => MarkTarget::Filesystem(p.mnt.sb().clone()),
        };
        let m =
            Arc::new(Mark { group: g.clone(), wd, mask: (mask.bits() & EventMask::ALL_EVENTS.bits()).into(), target });
        st.watches.insert(wd, m.clone());
        let sb = p.mnt.sb();
        sb.notify.watched.fetch_add(1, Ordering::Relaxed);
        match kind {
            MarkKind::Mount => p.mnt.marks.add(m, &sb.rcu(), None),
            MarkKind::Filesystem => sb.notify.marks.add(m, &sb.rcu(), None),
        }
        Ok(wd)
    }
}
