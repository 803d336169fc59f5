//! The namespace-changing calls: `mkdirat`, `mknodat`, `symlinkat`, `linkat`,
//! `unlinkat`, `renameat2`. Mirrors `filename_create`, `do_unlinkat`, `do_rmdir` and
//! `do_renameat2` of Linux's `fs/namei.c`, with their order of checks (it decides which
//! errno a caller sees when several apply).
//!
//! Lock order: rename lock -> parent directory (ancestor first) -> child directory ->
//! inode. Every change to a directory's map happens under its lock; renames also bump the
//! rename sequence so lockless walks that overlapped them retry.

use std::sync::Arc;

use crate::abi::cred::Capabilities;
use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{AtFlags, RenameFlags};
use crate::abi::limits::PATH_MAX;
use crate::abi::stat::{FileType, S_IALLUGO, S_IFMT, S_ISGID, S_ISUID, S_ISVTX};
use crate::core::dentry::{DENTRY_DEAD, DENTRY_LINKABLE, Dentry};
use crate::core::file::DirFd;
use crate::core::fsnotify::{self, EventMask};
use crate::core::inode::new_node_args;
use crate::core::path::PathRef;
use crate::core::permission::{
    MAY_READ, MAY_WRITE, generic_permission, init_owner, may_create_in, may_delete, owner_or_capable,
};
use crate::core::superblock::{CreateArgs, RenameReq};
use crate::sync::rcu::LocalGuard;
use crate::task::Task;
use crate::walk::namei::{LastType, LookupFlags, NameBuf, Outcome, check_path};

/// The parent of a name, with a reference, as a parent walk leaves it.
struct ParentOf {
    parent: PathRef,
    last: LastType,
    name: NameBuf,
    trailing_slash: bool,
    /// The last name is over `NAME_MAX`: ENAMETOOLONG where Linux looks it up.
    too_long: bool,
}

impl ParentOf {
    /// Linux's lookup of the last name (`lookup_one_qstr_excl`) fails first on its length.
    fn check_len(&self) -> Result<()> {
        if self.too_long { Err(Errno::ENAMETOOLONG) } else { Ok(()) }
    }
}

impl Task {
    fn parent_of(&self, dirfd: DirFd, path: &[u8]) -> Result<ParentOf> {
        self.walk(dirfd, path, LookupFlags::PARENT, |o| match o {
            Outcome::Parent { parent, last, name, trailing_slash, too_long } => {
                Ok(ParentOf { parent: parent.to_path(), last, name, trailing_slash, too_long })
            }
            _ => Err(Errno::ENOENT),
        })
    }

    /// `filename_create`, `check` (what Linux checks before `may_create`: linkat's
    /// `may_linkat`), `may_create`, then `make` under the parent's lock.
    fn create_node(
        &self,
        dirfd: DirFd,
        path: &[u8],
        is_dir: bool,
        check: &dyn Fn(&PathRef, &LocalGuard<'_>) -> Result<()>,
        make: impl FnOnce(&PathRef, &[u8], &LocalGuard<'_>) -> Result<Arc<crate::core::inode::Inode>>,
    ) -> Result<()> {
        let p = self.parent_of(dirfd, path)?;
        if p.last != LastType::Normal {
            return Err(Errno::EEXIST);
        }
        p.check_len()?;
        let name = p.name.as_bytes();
        let vfs = &*self.vfs;
        let guard = vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        let dir_inode = p.parent.dentry.inode().ok_or(Errno::ENOENT)?;
        let dir = p.parent.dentry.dir().ok_or(Errno::ENOTDIR)?;
        let want_write = p.parent.mnt.want_write();
        let mut locked = dir.lock.write();
        if vfs.lookup_excl(&p.parent.mnt.sb, &p.parent.dentry, &mut locked, name, &guard)?.is_some() {
            return Err(Errno::EEXIST);
        }
        if p.trailing_slash && !is_dir {
            return Err(Errno::ENOENT);
        }
        want_write?;
        if p.parent.dentry.is_dead() {
            return Err(Errno::ENOENT);
        }
        check(&p.parent, &guard)?;
        may_create_in(creds, dir_inode, vfs.fast, &guard)?;
        let inode = make(&p.parent, name, &guard)?;
        vfs.d_add(&p.parent.dentry, &mut locked, name, inode.clone(), &guard);
        fsnotify::notify_name(vfs.fast, p.parent.pos(), name, &inode, EventMask::CREATE, 0, &guard);
        Ok(())
    }

    /// `mkdirat(2)`.
    pub fn mkdirat(&self, dirfd: DirFd, path: &[u8], mode: u32) -> Result<()> {
        let umask = self.current_umask();
        self.create_node(dirfd, path, true, &|_, _| Ok(()), |parent, name, guard| {
            let creds = self.creds.load(guard).get();
            let dir_inode = parent.dentry.inode().ok_or(Errno::ENOENT)?;
            let args =
                new_node_args(creds, dir_inode, (mode & (0o777 | S_ISVTX)) | FileType::Directory.mode_bits(), umask)?;
            parent.mnt.sb.fs().create(&parent.mnt.sb, dir_inode, name, &args)
        })
    }

    /// `mkdir(2)`.
    pub fn mkdir(&self, path: &[u8], mode: u32) -> Result<()> {
        self.mkdirat(DirFd::Cwd, path, mode)
    }

    /// `mknodat(2)`: regular files, fifos, sockets and device nodes (`CAP_MKNOD`).
    pub fn mknodat(&self, dirfd: DirFd, path: &[u8], mode: u32, dev: u64) -> Result<()> {
        let ftype = match mode & S_IFMT {
            0 => FileType::Regular,
            m => match FileType::from_mode(m) {
                Some(FileType::Directory) => return Err(Errno::EPERM),
                Some(FileType::Symlink) | None => return Err(Errno::EINVAL),
                Some(t) => t,
            },
        };
        let umask = self.current_umask();
        self.create_node(dirfd, path, false, &|_, _| Ok(()), |parent, name, guard| {
            let creds = self.creds.load(guard).get();
            if matches!(ftype, FileType::CharDevice | FileType::BlockDevice) && !creds.capable(Capabilities::MKNOD) {
                return Err(Errno::EPERM);
            }
            let dir_inode = parent.dentry.inode().ok_or(Errno::ENOENT)?;
            let mut args = new_node_args(creds, dir_inode, (mode & S_IALLUGO) | ftype.mode_bits(), umask)?;
            args.rdev = if matches!(ftype, FileType::CharDevice | FileType::BlockDevice) { dev } else { 0 };
            parent.mnt.sb.fs().create(&parent.mnt.sb, dir_inode, name, &args)
        })
    }

    /// `symlinkat(2)`.
    pub fn symlinkat(&self, target: &[u8], dirfd: DirFd, path: &[u8]) -> Result<()> {
        if target.is_empty() {
            return Err(Errno::ENOENT);
        }
        if target.len() >= PATH_MAX {
            return Err(Errno::ENAMETOOLONG);
        }
        check_path(target)?;
        self.create_node(dirfd, path, false, &|_, _| Ok(()), |parent, name, guard| {
            let creds = self.creds.load(guard).get();
            let dir_inode = parent.dentry.inode().ok_or(Errno::ENOENT)?;
            let m = FileType::Symlink.mode_bits() | 0o777;
            let (gid, _) = init_owner(creds, dir_inode, m, false);
            parent.mnt.sb.fs().create(
                &parent.mnt.sb,
                dir_inode,
                name,
                &CreateArgs { mode: m, uid: creds.uid.0, gid, target: Some(target), ..Default::default() },
            )
        })
    }

    /// `symlink(2)`.
    pub fn symlink(&self, target: &[u8], path: &[u8]) -> Result<()> {
        self.symlinkat(target, DirFd::Cwd, path)
    }

    /// `linkat(2)`: `AT_SYMLINK_FOLLOW`, `AT_EMPTY_PATH` (through a descriptor: needs
    /// `CAP_DAC_READ_SEARCH`).
    /// Follows `fs.protected_hardlinks=1`.
    pub fn linkat(&self, olddirfd: DirFd, old: &[u8], newdirfd: DirFd, new: &[u8], flags: AtFlags) -> Result<()> {
        if !(AtFlags::SYMLINK_FOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let mut lf = LookupFlags::empty();
        if flags.contains(AtFlags::EMPTY_PATH) {
            // Linux checks this in `path_init` (`LOOKUP_LINKAT_EMPTY`), so only for a walk
            // that starts at a descriptor, after the descriptor is found. Linux also lets
            // the task that opened the file (same credentials) through; uvfs does not
            // record the opener, so it asks for the capability then too.
            if let DirFd::Fd(fd) = olddirfd
                && old.first() != Some(&b'/')
            {
                check_path(old)?;
                self.file(fd)?;
                if !self.credentials().capable(Capabilities::DAC_READ_SEARCH) {
                    return Err(Errno::ENOENT);
                }
            }
            lf |= LookupFlags::EMPTY;
        }
        if flags.contains(AtFlags::SYMLINK_FOLLOW) {
            lf |= LookupFlags::FOLLOW;
        }
        let src = self.resolve(olddirfd, old, lf)?;
        let inode = src.dentry.inode().ok_or(Errno::ENOENT)?.clone();
        let linkable = src.dentry.flags() & DENTRY_LINKABLE != 0;
        let mut err = None;
        // EXDEV and may_linkat (protected_hardlinks) come before may_create, as in
        // Linux's `do_linkat`.
        let check = |parent: &PathRef, guard: &LocalGuard<'_>| {
            if !Arc::ptr_eq(&parent.mnt, &src.mnt) {
                return Err(Errno::EXDEV);
            }
            let creds = self.creds.load(guard).get();
            if !owner_or_capable(creds, &inode) {
                let mode = inode.mode();
                let safe = inode.file_type() == FileType::Regular
                    && mode & S_ISUID == 0
                    && mode & (S_ISGID | 0o010) != (S_ISGID | 0o010)
                    && generic_permission(creds, &inode, MAY_READ | MAY_WRITE, self.vfs.fast, guard).is_ok();
                if !safe {
                    return Err(Errno::EPERM);
                }
            }
            Ok(())
        };
        let res = self.create_node(newdirfd, new, false, &check, |parent, name, guard| {
            if inode.is_dir() {
                return Err(Errno::EPERM);
            }
            if inode.nlink() == 0 && !linkable {
                return Err(Errno::ENOENT);
            }
            let dir_inode = parent.dentry.inode().ok_or(Errno::ENOENT)?;
            parent.mnt.sb.fs().link(dir_inode, name, &inode)?;
            // fsnotify_link: the link count changed (ATTRIB), then CREATE in the directory.
            fsnotify::notify_self(self.vfs.fast, &inode, EventMask::ATTRIB, guard);
            Ok(inode.clone())
        });
        if let Err(e) = res {
            err = Some(e);
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `link(2)`.
    pub fn link(&self, old: &[u8], new: &[u8]) -> Result<()> {
        self.linkat(DirFd::Cwd, old, DirFd::Cwd, new, AtFlags::empty())
    }

    /// `unlinkat(2)`: `AT_REMOVEDIR` for rmdir.
    pub fn unlinkat(&self, dirfd: DirFd, path: &[u8], flags: AtFlags) -> Result<()> {
        if !AtFlags::REMOVEDIR.contains(flags) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(AtFlags::REMOVEDIR) {
            return self.rmdir_at(dirfd, path);
        }
        let p = self.parent_of(dirfd, path)?;
        if p.last != LastType::Normal {
            return Err(Errno::EISDIR);
        }
        p.parent.mnt.want_write()?;
        p.check_len()?;
        let name = p.name.as_bytes();
        let vfs = &*self.vfs;
        let guard = vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        let dir_inode = p.parent.dentry.inode().ok_or(Errno::ENOENT)?;
        let dir = p.parent.dentry.dir().ok_or(Errno::ENOTDIR)?;
        let mut locked = dir.lock.write();
        let victim = vfs.lookup_excl(&p.parent.mnt.sb, &p.parent.dentry, &mut locked, name, &guard)?;
        if p.trailing_slash {
            return Err(match victim {
                None => Errno::ENOENT,
                Some(d) if d.inode().is_some_and(|i| i.is_dir()) => Errno::EISDIR,
                Some(_) => Errno::ENOTDIR,
            });
        }
        let victim = victim.ok_or(Errno::ENOENT)?;
        let inode = victim.inode().expect("positive").clone();
        may_delete(creds, dir_inode, &inode, false, vfs.fast, &guard)?;
        if victim.cold.mounts.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            return Err(Errno::EBUSY);
        }
        p.parent.mnt.sb.fs().unlink(dir_inode, name, &inode)?;
        vfs.d_remove(&p.parent.dentry, &mut locked, name, &guard);
        // Linux's order: ATTRIB (link count), DELETE_SELF (last link, unused), DELETE in
        // the directory, then the watches of the deleted inode go (IN_IGNORED).
        fsnotify::notify_self(vfs.fast, &inode, EventMask::ATTRIB, &guard);
        notify_removed(vfs.fast, p.parent.pos(), name, &inode, &guard);
        drop(locked);
        Ok(())
    }

    /// `unlink(2)`.
    pub fn unlink(&self, path: &[u8]) -> Result<()> {
        self.unlinkat(DirFd::Cwd, path, AtFlags::empty())
    }

    /// `rmdir(2)`.
    pub fn rmdir(&self, path: &[u8]) -> Result<()> {
        self.rmdir_at(DirFd::Cwd, path)
    }

    fn rmdir_at(&self, dirfd: DirFd, path: &[u8]) -> Result<()> {
        let p = self.parent_of(dirfd, path)?;
        match p.last {
            LastType::DotDot => return Err(Errno::ENOTEMPTY),
            LastType::Dot => return Err(Errno::EINVAL),
            LastType::Root => return Err(Errno::EBUSY),
            LastType::Normal => {}
        }
        p.parent.mnt.want_write()?;
        p.check_len()?;
        let name = p.name.as_bytes();
        let vfs = &*self.vfs;
        let guard = vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        let dir_inode = p.parent.dentry.inode().ok_or(Errno::ENOENT)?;
        let dir = p.parent.dentry.dir().ok_or(Errno::ENOTDIR)?;
        let mut locked = dir.lock.write();
        let victim =
            vfs.lookup_excl(&p.parent.mnt.sb, &p.parent.dentry, &mut locked, name, &guard)?.ok_or(Errno::ENOENT)?;
        let inode = victim.inode().expect("positive").clone();
        may_delete(creds, dir_inode, &inode, true, vfs.fast, &guard)?;
        if victim.cold.mounts.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            return Err(Errno::EBUSY);
        }
        let vdir = victim.dir().ok_or(Errno::ENOTDIR)?;
        let mut vlocked = vdir.lock.write();
        if p.parent.mnt.sb.fs().dcache_complete() && vlocked.count > 0 {
            return Err(Errno::ENOTEMPTY);
        }
        p.parent.mnt.sb.fs().rmdir(dir_inode, name, &inode)?;
        victim.set_flag(DENTRY_DEAD);
        // What a filesystem that is not complete cached below it (misses) goes with it.
        vfs.d_prune(&mut vlocked, vdir);
        drop(vlocked);
        vfs.d_remove(&p.parent.dentry, &mut locked, name, &guard);
        notify_removed(vfs.fast, p.parent.pos(), name, &inode, &guard);
        drop(locked);
        Ok(())
    }

    /// `renameat2(2)`: `RENAME_NOREPLACE`, `RENAME_EXCHANGE`.
    pub fn renameat2(
        &self,
        olddirfd: DirFd,
        old: &[u8],
        newdirfd: DirFd,
        new: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        if !(RenameFlags::NOREPLACE | RenameFlags::EXCHANGE | RenameFlags::WHITEOUT).contains(flags) {
            return Err(Errno::EINVAL);
        }
        if flags.intersects(RenameFlags::NOREPLACE | RenameFlags::WHITEOUT) && flags.contains(RenameFlags::EXCHANGE) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::WHITEOUT) {
            return Err(if self.credentials().capable(Capabilities::MKNOD) { Errno::EINVAL } else { Errno::EPERM });
        }
        let op = self.parent_of(olddirfd, old)?;
        let np = self.parent_of(newdirfd, new)?;
        if !Arc::ptr_eq(&op.parent.mnt, &np.parent.mnt) {
            return Err(Errno::EXDEV);
        }
        if op.last != LastType::Normal {
            return Err(Errno::EBUSY);
        }
        if np.last != LastType::Normal {
            return Err(if flags.contains(RenameFlags::NOREPLACE) { Errno::EEXIST } else { Errno::EBUSY });
        }
        op.parent.mnt.want_write()?;
        let vfs = &*self.vfs;
        let exchange = flags.contains(RenameFlags::EXCHANGE);
        let _rename = vfs.rename_lock.lock();
        let guard = vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        let (od, nd) = (&op.parent.dentry, &np.parent.dentry);
        let (oname, nname) = (op.name.as_bytes(), np.name.as_bytes());
        let same = Arc::ptr_eq(od, nd);
        let odir = od.dir().ok_or(Errno::ENOTDIR)?;
        let ndir = nd.dir().ok_or(Errno::ENOTDIR)?;
        // Ancestor first (rmdir locks parent then child), under the rename lock.
        let (mut ol, mut nl);
        let (ol_ref, nl_ref): (&mut crate::core::dentry::DirLocked, Option<&mut crate::core::dentry::DirLocked>);
        if same {
            ol = odir.lock.write();
            ol_ref = &mut ol;
            nl_ref = None;
        } else if od.is_subdir(nd, &guard) {
            nl = ndir.lock.write();
            ol = odir.lock.write();
            ol_ref = &mut ol;
            nl_ref = Some(&mut nl);
        } else {
            ol = odir.lock.write();
            nl = ndir.lock.write();
            ol_ref = &mut ol;
            nl_ref = Some(&mut nl);
        }
        let mut nl_ref = nl_ref;
        let sb = &op.parent.mnt.sb;
        op.check_len()?;
        let src = vfs.lookup_excl(sb, od, side(ol_ref, &mut nl_ref, false), oname, &guard)?.ok_or(Errno::ENOENT)?;
        np.check_len()?;
        let tgt = vfs.lookup_excl(sb, nd, side(ol_ref, &mut nl_ref, true), nname, &guard)?;
        if flags.contains(RenameFlags::NOREPLACE) && tgt.is_some() {
            return Err(Errno::EEXIST);
        }
        let src_inode = src.inode().expect("positive").clone();
        let src_dir = src_inode.is_dir();
        if exchange {
            let t = tgt.as_ref().ok_or(Errno::ENOENT)?;
            if !t.inode().expect("positive").is_dir() && np.trailing_slash {
                return Err(Errno::ENOTDIR);
            }
        }
        if !src_dir && (op.trailing_slash || (!exchange && np.trailing_slash)) {
            return Err(Errno::ENOTDIR);
        }
        // The source may not become its own descendant; the target may not be an ancestor
        // of the source.
        if nd.is_subdir(&src, &guard) {
            return Err(Errno::EINVAL);
        }
        if let Some(t) = &tgt
            && od.is_subdir(t, &guard)
        {
            return Err(if exchange { Errno::EINVAL } else { Errno::ENOTEMPTY });
        }
        let tgt_inode = tgt.as_ref().map(|t| t.inode().expect("positive").clone());
        if let Some(ti) = &tgt_inode
            && Arc::ptr_eq(ti, &src_inode)
        {
            return Ok(());
        }
        let od_inode = od.inode().ok_or(Errno::ENOENT)?;
        let nd_inode = nd.inode().ok_or(Errno::ENOENT)?;
        let fast = vfs.fast;
        may_delete(creds, od_inode, &src_inode, src_dir, fast, &guard)?;
        match &tgt_inode {
            None => {
                if nd.is_dead() {
                    return Err(Errno::ENOENT);
                }
                may_create_in(creds, nd_inode, fast, &guard)?;
            }
            Some(ti) => may_delete(creds, nd_inode, ti, if exchange { ti.is_dir() } else { src_dir }, fast, &guard)?,
        }
        if !same {
            if src_dir {
                generic_permission(creds, &src_inode, MAY_WRITE, fast, &guard)?;
            }
            if let Some(ti) = &tgt_inode
                && exchange
                && ti.is_dir()
            {
                generic_permission(creds, ti, MAY_WRITE, fast, &guard)?;
            }
        }
        let mounted = |d: &Dentry| d.cold.mounts.load(std::sync::atomic::Ordering::Relaxed) > 0;
        if mounted(&src) || tgt.as_deref().is_some_and(mounted) {
            return Err(Errno::EBUSY);
        }
        // Replacing a directory: it must be empty, checked under its own lock.
        let mut tl = match (&tgt, exchange) {
            (Some(t), false) if t.inode().expect("positive").is_dir() => {
                let l = t.dir().ok_or(Errno::ENOTDIR)?.lock.write();
                if op.parent.mnt.sb.fs().dcache_complete() && l.count > 0 {
                    return Err(Errno::ENOTEMPTY);
                }
                Some(l)
            }
            _ => None,
        };
        op.parent.mnt.sb.fs().rename(&RenameReq {
            old_dir: od_inode,
            old_name: oname,
            inode: &src_inode,
            new_dir: nd_inode,
            new_name: nname,
            target: tgt_inode.as_deref(),
            flags,
        })?;
        // The dcache follows, inside the rename sequence; a panic in there poisons the
        // instance (the dcache may be half moved): every later walk is EIO.
        {
            let _w = vfs.rename_seq.write_poisoning().map_err(|_| Errno::EIO)?;
            vfs.d_unhash(od, side(ol_ref, &mut nl_ref, false), oname, &guard);
            if exchange {
                let t = tgt.clone().expect("exchange target");
                vfs.d_unhash(nd, side(ol_ref, &mut nl_ref, true), nname, &guard);
                t.set_parent_and_name(od, oname, &vfs.rcu);
                vfs.d_insert(od, side(ol_ref, &mut nl_ref, false), oname, t, &guard);
            } else if tgt.is_some() {
                vfs.d_remove(nd, side(ol_ref, &mut nl_ref, true), nname, &guard);
            }
            src.set_parent_and_name(nd, nname, &vfs.rcu);
            vfs.d_insert(nd, side(ol_ref, &mut nl_ref, true), nname, src.clone(), &guard);
        }
        if let (Some(l), Some(t)) = (tl.as_mut(), &tgt) {
            // A replaced directory: what was cached below it (misses) goes with it.
            vfs.d_prune(l, t.dir().expect("replaced directory"));
        }
        drop(tl);
        // fsnotify_move: MOVED_FROM/MOVED_TO sharing a cookie, ATTRIB on a replaced target,
        // MOVE_SELF; for an exchange, the same the other way round.
        let fast = vfs.fast;
        let (old_dir, new_dir) = (op.parent.pos(), np.parent.pos());
        let cookie = fsnotify::next_cookie();
        fsnotify::notify_name(fast, old_dir, oname, &src_inode, EventMask::MOVED_FROM, cookie, &guard);
        fsnotify::notify_name(fast, new_dir, nname, &src_inode, EventMask::MOVED_TO, cookie, &guard);
        if let (Some(ti), false) = (&tgt_inode, exchange) {
            fsnotify::notify_self(fast, ti, EventMask::ATTRIB, &guard);
        }
        fsnotify::notify_self(fast, &src_inode, EventMask::MOVE_SELF, &guard);
        if let (Some(ti), true) = (&tgt_inode, exchange) {
            let cookie = fsnotify::next_cookie();
            fsnotify::notify_name(fast, new_dir, nname, ti, EventMask::MOVED_FROM, cookie, &guard);
            fsnotify::notify_name(fast, old_dir, oname, ti, EventMask::MOVED_TO, cookie, &guard);
            fsnotify::notify_self(fast, ti, EventMask::MOVE_SELF, &guard);
        }
        if let (Some(ti), false) = (&tgt_inode, exchange)
            && ti.evict_if_unused()
        {
            fsnotify::inode_deleted(fast, ti, &guard);
        }
        Ok(())
    }

    /// `rename(2)`.
    pub fn rename(&self, old: &[u8], new: &[u8]) -> Result<()> {
        self.renameat2(DirFd::Cwd, old, DirFd::Cwd, new, RenameFlags::empty())
    }
}

/// `d_delete_notify`: `name` left `dir`; if that was the inode's last link and use, it
/// is deleted first (DELETE_SELF, IN_IGNORED), then the directory reports the DELETE.
fn notify_removed(
    fast: crate::abi::config::FastPaths,
    dir: crate::core::path::Pos<'_>,
    name: &[u8],
    inode: &crate::core::inode::Inode,
    guard: &LocalGuard<'_>,
) {
    if inode.evict_if_unused() {
        fsnotify::inode_deleted(fast, inode, guard);
    }
    fsnotify::notify_name(fast, dir, name, inode, EventMask::DELETE, 0, guard);
}

/// The locked state of the old (`new == false`) or new directory of a rename; the same
/// one when both are the same directory.
fn side<'x>(
    ol: &'x mut crate::core::dentry::DirLocked,
    nl: &'x mut Option<&mut crate::core::dentry::DirLocked>,
    new: bool,
) -> &'x mut crate::core::dentry::DirLocked {
    match (new, nl) {
        (true, Some(n)) => n,
        _ => ol,
    }
}
