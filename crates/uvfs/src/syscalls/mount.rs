//! The mount calls: `mount` (a new filesystem, a bind mount), `remount`, `umount2`,
//! `mountinfo`. Mirrors Linux's `fs/namespace.c` (`do_new_mount`, `do_loopback`,
//! `copy_tree`, `do_reconfigure_mnt`, `do_umount`, `umount_tree`, `show_mountinfo`).
//!
//! Every change of the tree happens under the rename lock (first in the lock order), which
//! also holds the list of mounts ([`MountTree`]), and inside the rename sequence, so a
//! lockless walk that overlapped it retries. The mount table that walks probe is
//! `VfsInner::mounts`; a mountpoint's `DENTRY_MOUNTED` flag says whether to
//! probe it. Entries are removed through the collector (the table retires its nodes), and a
//! detached mount's parent link is retired the same way, so a walk still standing on a
//! mount that is being unmounted reads valid memory and then retries.
//!
//! What counts as a user of a mount (for EBUSY) and how a umount and a concurrent open
//! agree is in [`crate::core::mount`].

use crate::abi::cred::Capabilities;
use crate::abi::errno::{Errno, Result};
use crate::core::dentry::Dentry;
use crate::core::dentry::DirReadGuard;
use crate::core::file::DirFd;
use crate::core::mount::{Mount, MountFlags, MountInfo, UmountFlags};
use crate::core::path::PathRef;
use crate::core::superblock::{FileSystem, SuperBlock};
use crate::fs::memfs::MemFs;
use crate::fs::memfs::MemFsLimits;
use crate::sync::rcu::LocalGuard;
use crate::task::Task;
use crate::walk::namei::LookupFlags;
use std::sync::Arc;

impl Task {
    fn require_sys_admin(&self) -> Result<()> {
        if self.credentials().capable(Capabilities::SYS_ADMIN) { Ok(()) } else { Err(Errno::EPERM) }
    }

    /// `mount(2)`: attaches `source` at `target` (symlinks followed) with `flags`.
    ///
    /// A new filesystem needs a directory to mount on (ENOTDIR otherwise); a bind mount
    /// needs source and target of the same kind, directory or not (ENOTDIR). Mounting on
    /// a mount stacks on top of it. EPERM without `CAP_SYS_ADMIN` (after the target is
    /// found, as Linux), ENOENT for a removed directory, EINVAL where the target or the
    /// source is not in the tree (on a lazily unmounted mount).
    ///
    /// Unlike `mount(2)` with `MS_BIND`, which ignores the other flags, a bind mount takes
    /// `flags` (as `open_tree` plus `mount_setattr` would): they add to the source mount's
    /// own (a bind of a read-only mount stays read-only; `remount` changes them).
    pub fn mount(&self, source: MountSource<'_>, target: &[u8], flags: MountFlags) -> Result<()> {
        let tp = self.resolve(DirFd::Cwd, target, LookupFlags::FOLLOW)?;
        self.require_sys_admin()?;
        let vfs = &*self.vfs;
        match source {
            MountSource::MemFs(limits) => self.mount_new(&tp, Box::new(MemFs::with_limits(limits)), flags),
            MountSource::Fs(fs) => self.mount_new(&tp, fs, flags),
            MountSource::Bind { path, recursive } => {
                let sp = self.resolve(DirFd::Cwd, path, LookupFlags::FOLLOW)?;
                let mut tree = vfs.rename_lock.lock();
                let guard = vfs.rcu.pin();
                let (pm, mp, dir_lock) = self.lock_target(&tp, &guard)?;
                if !sp.mnt.is_attached() {
                    return Err(Errno::EINVAL);
                }
                let src_dir = sp.dentry.inode().is_some_and(|i| i.is_dir());
                if mp.inode().is_some_and(|i| i.is_dir()) != src_dir {
                    return Err(Errno::ENOTDIR);
                }
                // `copy_tree`: every copy is made before any is attached, so a bind of a
                // tree into itself copies what was there before.
                let top = Mount::new(
                    tree.alloc_id(),
                    sp.mnt.sb.clone(),
                    sp.dentry.clone(),
                    Some((pm.clone(), mp.clone())),
                    sp.mnt.flags() | flags,
                );
                let mut clones = vec![top.clone()];
                if recursive {
                    // Depth first, each mount's children in the order they were attached,
                    // as `copy_tree` walks the source (`next_mnt`): the copies get their ids,
                    // and so their places in mountinfo, in that order.
                    let all = tree.mounts.clone();
                    let children = |src: &Mount, top: bool| -> std::vec::IntoIter<Arc<Mount>> {
                        all.iter()
                            .filter(|m| {
                                m.parent(&guard).is_some_and(|(p, pmp)| {
                                    // Children of the source mount only if below the bound
                                    // directory.
                                    std::ptr::eq(p, src) && (!top || pmp.is_subdir(&sp.dentry, &guard))
                                })
                            })
                            .cloned()
                            .collect::<Vec<_>>()
                            .into_iter()
                    };
                    let mut stack = vec![(0, children(&sp.mnt, true))];
                    while let Some((pc, next)) = stack.last_mut() {
                        let pc = *pc;
                        let Some(m) = next.next() else {
                            stack.pop();
                            continue;
                        };
                        let pmp = m.parent_borrow(&guard).map(|(_, d)| d.to_arc()).expect("a child has a parent");
                        let new = Mount::new(
                            tree.alloc_id(),
                            m.sb.clone(),
                            m.root.clone(),
                            Some((clones[pc].clone(), pmp)),
                            m.flags(),
                        );
                        stack.push((clones.len(), children(&m, false)));
                        clones.push(new);
                    }
                }
                // A tree whose top shows a removed directory (the source is the root of
                // a bind of a directory removed since, or such a bind is stacked on the
                // copied root): Linux 6.18 refuses it (after the kinds are compared), as
                // it refuses to mount on one; a removed bind root further down is copied.
                // Or a source whose contents went before the copy could hold them.
                let mut shown = &clones[0];
                loop {
                    if shown.root.is_dead() || shown.root_evicted() {
                        return Err(Errno::ENOENT);
                    }
                    let on_root = clones.iter().find(|c| {
                        c.parent(&guard)
                            .is_some_and(|(p, mp)| std::ptr::eq(p, &**shown) && std::ptr::eq(mp, &*shown.root))
                    });
                    match on_root {
                        Some(c) => shown = c,
                        None => break,
                    }
                }
                let _w = vfs.rename_seq.write_poisoning().map_err(|_| Errno::EIO)?;
                for c in &clones {
                    let (p, d) = c.parent(&guard).expect("a copy has a parent");
                    vfs.attach(&mut tree, p, d, c.clone());
                }
                drop(_w);
                drop(dir_lock);
                Ok(())
            }
        }
    }

    /// `do_new_mount`: a new instance of `fs` at `tp`.
    fn mount_new(&self, tp: &PathRef, fs: Box<dyn FileSystem>, flags: MountFlags) -> Result<()> {
        let vfs = &*self.vfs;
        // `MS_RDONLY` on a new filesystem makes the instance read-only too (`SB_RDONLY`),
        // not only this mount: a later remount of the mount alone does not make it writable.
        let sb = SuperBlock::with_config(fs, flags.contains(MountFlags::RDONLY), &vfs.rcu, &vfs.config);
        sb.count_inodes_in(&vfs.dcache_counts);
        let root = Dentry::new_root(sb.fs().root_inode(&sb)?, &vfs.rcu);
        let mut tree = vfs.rename_lock.lock();
        let guard = vfs.rcu.pin();
        let (pm, mp, dir_lock) = self.lock_target(tp, &guard)?;
        if !mp.inode().is_some_and(|i| i.is_dir()) {
            return Err(Errno::ENOTDIR);
        }
        let m = Mount::new(tree.alloc_id(), sb, root, Some((pm.clone(), mp.clone())), flags);
        let w = vfs.rename_seq.write_poisoning().map_err(|_| Errno::EIO)?;
        vfs.attach(&mut tree, &pm, &mp, m);
        drop(w);
        drop(dir_lock);
        Ok(())
    }

    /// `lock_mount`: the topmost mount on the target, which must not be removed (ENOENT)
    /// and must be in the tree (EINVAL). Caller holds the rename lock. The returned lock of
    /// the target's parent directory, held until the mount is attached, orders the mount
    /// with a concurrent rmdir or unlink (which check `hot.mounts` and mark the dentry
    /// dead under that lock).
    fn lock_target<'g>(
        &'g self,
        tp: &'g PathRef,
        guard: &'g LocalGuard<'_>,
    ) -> Result<(Arc<Mount>, Arc<Dentry>, Option<DirReadGuard<'g>>)> {
        let p = crate::core::path::Pos::of(tp);
        let (m, d) = self.vfs.topmost(p.mnt, p.dentry, guard);
        let l = if d.is_root() { None } else { d.get().parent(guard).dir().map(|dir| dir.lock.read()) };
        let (m, d) = (m.to_arc(), d.to_arc());
        if d.is_dead() {
            return Err(Errno::ENOENT);
        }
        if !m.is_attached() {
            return Err(Errno::EINVAL);
        }
        Ok((m, d, l))
    }

    /// `mount(MS_REMOUNT | MS_BIND)`: sets the per-mount flags of the mount whose root
    /// `target` names (EINVAL if it names no mount root). Making a mount read-only while
    /// files are open for writing through it is EBUSY, as Linux's `mnt_make_readonly`;
    /// afterwards every write-type call through it is EROFS, including through files
    /// opened before (`fchmod`, `fchown`, `futimens`: Linux's `mnt_want_write_file`). A
    /// remount that names no access-time flag (`NOATIME`, `NODIRATIME`, `RELATIME`,
    /// `STRICTATIME`) keeps the mount's access-time mode, as Linux's.
    pub fn remount(&self, target: &[u8], flags: MountFlags) -> Result<()> {
        let tp = self.resolve(DirFd::Cwd, target, LookupFlags::FOLLOW)?;
        self.require_sys_admin()?;
        let _tree = self.vfs.rename_lock.lock();
        if !tp.mnt.is_attached() || !Arc::ptr_eq(&tp.dentry, &tp.mnt.root) {
            return Err(Errno::EINVAL);
        }
        tp.mnt.set_flags(flags)
    }

    /// `umount2(2)`. EINVAL for unknown flags, `EXPIRE` with `FORCE` or `DETACH`, a path
    /// that is not a mount's root, a mount not in the tree, and the root of the tree
    /// (Linux would remount the task's root read-only; uvfs refuses); EPERM without
    /// `CAP_SYS_ADMIN`; EBUSY if the mount has users (open files, a task's root or cwd)
    /// or mounts below it, unless `DETACH`, which unhooks the whole subtree now and lets
    /// the users keep it until they go.
    pub fn umount2(&self, target: &[u8], flags: UmountFlags) -> Result<()> {
        if UmountFlags::from_bits(flags.bits()).is_none() {
            return Err(Errno::EINVAL);
        }
        let lf = LookupFlags::KEEP_EXPIRY
            | if flags.contains(UmountFlags::NOFOLLOW) { LookupFlags::empty() } else { LookupFlags::FOLLOW };
        let tp = self.resolve(DirFd::Cwd, target, lf)?;
        self.require_sys_admin()?;
        let vfs = &*self.vfs;
        let mut tree = vfs.rename_lock.lock();
        let guard = vfs.rcu.pin();
        let m = &tp.mnt;
        if !Arc::ptr_eq(&tp.dentry, &m.root) || !m.is_attached() || m.parent(&guard).is_none() {
            return Err(Errno::EINVAL);
        }
        if flags.contains(UmountFlags::EXPIRE) {
            if flags.intersects(UmountFlags::FORCE | UmountFlags::DETACH) {
                return Err(Errno::EINVAL);
            }
            if m.users() > 0 || tree.has_children(m, &guard) {
                return Err(Errno::EBUSY);
            }
            vfs.expiry_used.store(true, std::sync::atomic::Ordering::Relaxed);
            if !m.mark_expired() {
                return Err(Errno::EAGAIN);
            }
        }
        if !flags.contains(UmountFlags::DETACH) && (tree.has_children(m, &guard) || !m.try_doom()) {
            return Err(Errno::EBUSY);
        }
        let w = vfs.rename_seq.write_poisoning().map_err(|_| Errno::EIO)?;
        let sbs: Vec<Arc<SuperBlock>> = vfs.detach_tree(&mut tree, m, &guard);
        drop(w);
        // A filesystem no longer mounted anywhere is shut down: its watches hear of it.
        // (Linux waits for the last user of a lazily detached mount; uvfs tells at once.)
        let orphaned: Vec<Arc<SuperBlock>> =
            sbs.into_iter().filter(|sb| !tree.mounts.iter().any(|x| Arc::ptr_eq(&x.sb, sb))).collect();
        drop(tree);
        for sb in orphaned {
            crate::core::fsnotify::sb_unmounted(&sb);
        }
        Ok(())
    }

    /// `umount(2)`: `umount2` without flags.
    pub fn umount(&self, target: &[u8]) -> Result<()> {
        self.umount2(target, UmountFlags::empty())
    }

    /// The mount table as this task sees it (`/proc/self/mountinfo`): mounts whose
    /// mountpoint is reachable from the task's root, in mount order, mount points
    /// relative to that root.
    pub fn mountinfo(&self) -> Vec<MountInfo> {
        let vfs = &*self.vfs;
        let tree = vfs.rename_lock.lock();
        let guard = vfs.rcu.pin();
        let fsx = self.fs.load(&guard);
        let mut out = Vec::new();
        for m in &tree.mounts {
            let mut parts: Vec<&[u8]> = Vec::new();
            if !crate::core::path::climb(m, &m.root, Some((&fsx.root.mnt, &fsx.root.dentry)), &guard, |n| parts.push(n))
            {
                continue;
            }
            let mount_point = crate::core::path::join(&parts);
            // The mount's root within its filesystem.
            let mut root_parts: Vec<&[u8]> = Vec::new();
            let mut d: &Dentry = &m.root;
            while !d.is_root() {
                root_parts.push(d.name(&guard));
                d = d.parent(&guard);
            }
            let mut root = crate::core::path::join(&root_parts);
            // Linux's `dentry_path` of a root that was removed (a bind of a directory
            // removed since).
            if m.root.is_dead() && !m.root.is_root() {
                root.extend_from_slice(b"//deleted");
            }
            out.push(MountInfo {
                id: m.id(),
                parent_id: m.parent(&guard).map_or(m.id(), |(p, _)| p.id()),
                dev: m.sb.dev(),
                root,
                mount_point,
                flags: m.flags(),
                fs_read_only: m.sb.read_only(),
                fs_type: m.sb.fs().fs_type(),
            });
        }
        out
    }

    /// [`mountinfo`](Self::mountinfo) in the text format of `/proc/self/mountinfo`:
    /// `id parent major:minor root mount-point options - type source super-options`, with
    /// space, tab, newline and backslash in paths escaped as octal, as Linux's `mangle`.
    pub fn mountinfo_text(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for mi in self.mountinfo() {
            let (major, minor) = major_minor(mi.dev);
            out.extend_from_slice(format!("{} {} {}:{} ", mi.id, mi.parent_id, major, minor).as_bytes());
            mangle(&mut out, &mi.root);
            out.push(b' ');
            mangle(&mut out, &mi.mount_point);
            out.extend_from_slice(if mi.flags.contains(MountFlags::RDONLY) { b" ro" } else { b" rw" });
            for (f, name) in [
                (MountFlags::NOSUID, ",nosuid"),
                (MountFlags::NODEV, ",nodev"),
                (MountFlags::NOEXEC, ",noexec"),
                (MountFlags::NOATIME, ",noatime"),
                (MountFlags::NODIRATIME, ",nodiratime"),
            ] {
                if mi.flags.contains(f) {
                    out.extend_from_slice(name.as_bytes());
                }
            }
            if !mi.flags.intersects(MountFlags::NOATIME | MountFlags::STRICTATIME) {
                out.extend_from_slice(b",relatime");
            }
            if mi.flags.contains(MountFlags::NOSYMFOLLOW) {
                out.extend_from_slice(b",nosymfollow");
            }
            let sb_mode = if mi.fs_read_only { "ro" } else { "rw" };
            out.extend_from_slice(format!(" - {} {} {sb_mode}\n", mi.fs_type, mi.fs_type).as_bytes());
        }
        out
    }
}

/// glibc's `major`/`minor`, the inverse of [`crate::abi::stat::makedev`].
fn major_minor(dev: u64) -> (u64, u64) {
    (((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff), ((dev >> 12) & 0xffff_ff00) | (dev & 0xff))
}

/// Linux's `mangle`: ` `, `\t`, `\n` and `\\` as three-digit octal escapes.
fn mangle(out: &mut Vec<u8>, s: &[u8]) {
    for &c in s {
        if matches!(c, b' ' | b'\t' | b'\n' | b'\\') {
            out.extend_from_slice(format!("\\{c:03o}").as_bytes());
        } else {
            out.push(c);
        }
    }
}

/// What `Task::mount` attaches.
pub enum MountSource<'a> {
    /// A new, empty memfs (tmpfs semantics) with these limits.
    MemFs(MemFsLimits),
    /// A new instance of any filesystem.
    Fs(Box<dyn FileSystem>),
    /// A bind mount of what `path` names (a directory or a file), as seen through its
    /// mount; `recursive` copies the mounts below it too (`MS_REC`).
    Bind {
        /// The source path (symlinks followed).
        path: &'a [u8],
        /// `MS_BIND | MS_REC`.
        recursive: bool,
    },
}
