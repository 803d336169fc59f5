//! The namespace-changing calls: `mkdirat`, `mknodat`, `symlinkat`, `linkat`,
//! `unlinkat`, `renameat2`. Mirrors `filename_create`, `do_unlinkat`, `do_rmdir` and
//! `do_renameat2` of Linux's `fs/namei.c`, with their order of checks (it decides which
//! errno a caller sees when several apply).
//!
//! Lock order: rename lock -> parent directory (ancestor first) -> child directory ->
//! inode. Every change to a directory's map happens under its lock; renames also bump the
//! rename sequence so lockless walks that overlapped them retry.

use std::sync::Arc;

use crate::abi::config::FastPaths;
use crate::abi::cred::Capabilities;
use crate::abi::cred::Credentials;
use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{AtFlags, RenameFlags};
use crate::abi::limits::PATH_MAX;
use crate::abi::stat::{FileType, S_IALLUGO, S_IFMT, S_ISVTX, is_sxid};
use crate::core::dentry::{DENTRY_DEAD, DENTRY_LINKABLE, Dentry, DirLocked, DirWriteGuard};
use crate::core::file::DirFd;
use crate::core::fsnotify::{self, EventMask};
use crate::core::inode::Inode;
use crate::core::inode::new_node_args;
use crate::core::instance::VfsInner;
use crate::core::path::{PathRef, Pos};
use crate::core::permission::{
    MAY_READ, MAY_WRITE, generic_permission, init_owner, may_create_in, may_delete, owner_or_capable,
};
use crate::core::superblock::SuperBlock;
use crate::core::superblock::{CreateArgs, RenameReq};
use crate::sync::rcu::LocalGuard;
use crate::task::Task;
use crate::walk::namei::{LastName, LastType, LookupFlags, Outcome, check_path};

/// The parent of a name, with a reference, as a parent walk leaves it.
struct ParentOf<'p> {
    parent: PathRef,
    last: LastType,
    /// The last name (borrowed from the path walked, as a parent walk's always is).
    name: std::borrow::Cow<'p, [u8]>,
    trailing_slash: bool,
    /// The last name is over `NAME_MAX`: ENAMETOOLONG where Linux looks it up.
    too_long: bool,
}

impl ParentOf<'_> {
    /// Linux's lookup of the last name (`lookup_one_qstr_excl`) fails first on its length.
    fn check_len(&self) -> Result<()> {
        if self.too_long { Err(Errno::ENAMETOOLONG) } else { Ok(()) }
    }
}

impl Task {
    fn parent_of<'p>(&self, dirfd: DirFd, path: &'p [u8]) -> Result<ParentOf<'p>> {
        self.walk(dirfd, path, LookupFlags::PARENT, |o| match o {
            Outcome::Parent { parent, last, name, trailing_slash, too_long } => {
                let name = match name {
                    LastName::InPath(s, e) => std::borrow::Cow::Borrowed(&path[s..e]),
                    LastName::Copied(b) => std::borrow::Cow::Owned(b.into_vec()),
                };
                Ok(ParentOf { parent: parent.to_path(), last, name, trailing_slash, too_long })
            }
            _ => Err(Errno::ENOENT),
        })
    }

    /// `filename_create`, `check` (what Linux checks before `may_create`: linkat's
    /// `may_linkat`), `may_create`, then `make` under the parent's lock; all under the
    /// parent walk's guard (`walk_then`, as `unlinkat`): no count on the parent.
    fn create_node(
        &self,
        dirfd: DirFd,
        path: &[u8],
        is_dir: bool,
        check: &dyn Fn(Pos<'_>, &LocalGuard<'_>) -> Result<()>,
        make: impl FnOnce(Pos<'_>, &[u8], &LocalGuard<'_>) -> Result<Arc<crate::core::inode::Inode>>,
    ) -> Result<()> {
        self.walk_ctx(None).walk_then(dirfd, path, LookupFlags::PARENT, |o, guard| {
            let Outcome::Parent { parent, last, name, trailing_slash, too_long } = o else {
                return Err(Errno::ENOENT);
            };
            if last != LastType::Normal {
                return Err(Errno::EEXIST);
            }
            if too_long {
                return Err(Errno::ENAMETOOLONG);
            }
            let name = name.bytes(path);
            let vfs = &*self.vfs;
            let creds = self.creds.load(guard).get();
            let dir_inode = parent.dentry.get().inode().ok_or(Errno::ENOENT)?;
            let dir = parent.dentry.get().dir().ok_or(Errno::ENOTDIR)?;
            let want_write = parent.mnt.want_write();
            let mut locked = dir.lock.write();
            // The miss's probe places the new name without a second lookup.
            let (found, probe) =
                vfs.lookup_excl_probed(&parent.mnt.get().sb, parent.dentry, &mut locked, name, None, guard)?;
            if found.is_some() {
                return Err(Errno::EEXIST);
            }
            if trailing_slash && !is_dir {
                return Err(Errno::ENOENT);
            }
            want_write?;
            if parent.dentry.is_dead() {
                return Err(Errno::ENOENT);
            }
            check(parent, guard)?;
            may_create_in(creds, dir_inode, vfs.fast, guard)?;
            let inode = make(parent, name, guard)?;
            vfs.d_add_probed(parent.dentry, &mut locked, name, inode.clone(), probe, guard);
            fsnotify::notify_name(vfs.fast, parent, name, &inode, EventMask::CREATE, 0, guard);
            Ok(())
        })
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
            // A whiteout (character device 0/0) needs no privilege since Linux 5.8
            // (`vfs_mknod`'s `is_whiteout`); other device nodes need CAP_MKNOD.
            let whiteout = ftype == FileType::CharDevice && dev == 0;
            if matches!(ftype, FileType::CharDevice | FileType::BlockDevice)
                && !whiteout
                && !creds.capable(Capabilities::MKNOD)
            {
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
        let check = |parent: Pos<'_>, guard: &LocalGuard<'_>| {
            if !std::ptr::eq(parent.mnt.as_ptr(), Arc::as_ptr(&src.mnt)) {
                return Err(Errno::EXDEV);
            }
            let creds = self.creds.load(guard).get();
            if !owner_or_capable(creds, &inode) {
                let mode = inode.mode();
                let safe = inode.file_type() == FileType::Regular
                    && !is_sxid(mode)
                    && generic_permission(creds, &inode, MAY_READ | MAY_WRITE, self.vfs.fast, guard).is_ok();
                if !safe {
                    return Err(Errno::EPERM);
                }
            }
            Ok(())
        };
        let res = self.create_node(newdirfd, new, false, &check, |parent, name, guard| {
            // `vfs_link`: no new name for an append-only or immutable file, nor for a
            // directory.
            if inode.is_immutable_or_append() || inode.is_dir() {
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
        // Under the parent walk's guard: no count on the parent, no second pin.
        self.walk_ctx(None).walk_then(dirfd, path, LookupFlags::PARENT, |o, guard| {
            let Outcome::Parent { parent, last, name, trailing_slash, too_long } = o else {
                return Err(Errno::ENOENT);
            };
            if last != LastType::Normal {
                return Err(Errno::EISDIR);
            }
            parent.mnt.want_write()?;
            if too_long {
                return Err(Errno::ENAMETOOLONG);
            }
            let name = name.bytes(path);
            let vfs = &*self.vfs;
            let creds = self.creds.load(guard).get();
            let dir_inode = parent.dentry.get().inode().ok_or(Errno::ENOENT)?;
            let dir = parent.dentry.get().dir().ok_or(Errno::ENOTDIR)?;
            let mut locked = dir.lock.write();
            let (victim, probe) =
                vfs.lookup_excl_probed(&parent.mnt.get().sb, parent.dentry, &mut locked, name, None, guard)?;
            if trailing_slash {
                return Err(match victim {
                    None => Errno::ENOENT,
                    Some(d) if d.inode().is_some_and(|i| i.is_dir()) => Errno::EISDIR,
                    Some(_) => Errno::ENOTDIR,
                });
            }
            let victim = victim.ok_or(Errno::ENOENT)?;
            // Borrowed: the victim stays valid under the guard once removed, and its inode
            // with it.
            let inode = victim.inode().expect("positive");
            may_delete(creds, dir_inode, inode, false, vfs.fast, guard)?;
            if victim.hot.mounts.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                return Err(Errno::EBUSY);
            }
            parent.mnt.get().sb.fs().unlink(dir_inode, name, inode)?;
            vfs.d_delete_probed(parent.dentry.get(), &mut locked, name, probe, guard);
            // Linux's order: ATTRIB (link count), DELETE_SELF (last link, unused), DELETE in
            // the directory, then the watches of the deleted inode go (IN_IGNORED).
            fsnotify::notify_self(vfs.fast, inode, EventMask::ATTRIB, guard);
            notify_removed(vfs.fast, parent, name, inode, guard);
            drop(locked);
            Ok(())
        })
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
        // Under the parent walk's guard, as `unlinkat`.
        self.walk_ctx(None).walk_then(dirfd, path, LookupFlags::PARENT, |o, guard| {
            let Outcome::Parent { parent, last, name, too_long, .. } = o else {
                return Err(Errno::ENOENT);
            };
            match last {
                LastType::DotDot => return Err(Errno::ENOTEMPTY),
                LastType::Dot => return Err(Errno::EINVAL),
                LastType::Root => return Err(Errno::EBUSY),
                LastType::Normal => {}
            }
            parent.mnt.want_write()?;
            if too_long {
                return Err(Errno::ENAMETOOLONG);
            }
            let name = name.bytes(path);
            let vfs = &*self.vfs;
            let sb = &parent.mnt.get().sb;
            let creds = self.creds.load(guard).get();
            let dir_inode = parent.dentry.get().inode().ok_or(Errno::ENOENT)?;
            let dir = parent.dentry.get().dir().ok_or(Errno::ENOTDIR)?;
            let mut locked = dir.lock.write();
            let (victim, probe) = vfs.lookup_excl_probed(sb, parent.dentry, &mut locked, name, None, guard)?;
            let victim = victim.ok_or(Errno::ENOENT)?;
            let inode = victim.inode().expect("positive");
            may_delete(creds, dir_inode, inode, true, vfs.fast, guard)?;
            if victim.hot.mounts.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                return Err(Errno::EBUSY);
            }
            let vdir = victim.dir().ok_or(Errno::ENOTDIR)?;
            let mut vlocked = vdir.lock.write();
            if sb.dcache_complete() && !vlocked.order.is_empty() {
                return Err(Errno::ENOTEMPTY);
            }
            sb.fs().rmdir(dir_inode, name, inode)?;
            victim.set_flag(DENTRY_DEAD);
            // What a filesystem that is not complete cached below it (misses) goes with it.
            vfs.d_prune(sb, &mut vlocked, vdir);
            drop(vlocked);
            vfs.d_delete_probed(parent.dentry.get(), &mut locked, name, probe, guard);
            notify_removed(vfs.fast, parent, name, inode, guard);
            drop(locked);
            Ok(())
        })
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
        // `lock_rename`: the rename lock, then both directories, ancestor first.
        let _rename = vfs.rename_lock.lock();
        let guard = vfs.rcu.pin();
        let (od, nd) = (&op.parent.dentry, &np.parent.dentry);
        let (oname, nname) = (&*op.name, &*np.name);
        let mut locks = RenameLocks::lock(od, nd, &guard)?;
        let sb = &op.parent.mnt.sb;
        op.check_len()?;
        let src = vfs.lookup_excl(sb, od, locks.side(false), oname, &guard)?.ok_or(Errno::ENOENT)?;
        np.check_len()?;
        let tgt = vfs.lookup_excl(sb, nd, locks.side(true), nname, &guard)?;
        let r = Rename { od, nd, oname, nname, src: &src, tgt: tgt.as_ref(), flags };
        if r.check_shape(&op, &np, &guard)? {
            // Source and target are one inode: nothing to do, successfully.
            return Ok(());
        }
        let creds = self.creds.load(&guard).get();
        r.may_rename(creds, vfs.fast, &guard)?;
        // RENAME_WHITEOUT where the dcache is the tree (memfs): the whiteout is made before
        // anything moves, as tmpfs's `shmem_whiteout` does, so a full filesystem fails the
        // rename whole; it takes the old name with the move. Elsewhere (hostfs) the
        // filesystem's rename makes it (the host's `renameat2`).
        let (mut whiteout, mut whiteout_owner) = (None, None);
        if flags.contains(RenameFlags::WHITEOUT) {
            let dir = od.inode().ok_or(Errno::ENOENT)?;
            let args = new_node_args(creds, dir, FileType::CharDevice.mode_bits(), 0)?;
            if sb.dcache_complete() {
                whiteout = Some(sb.fs().create(sb, dir, oname, &CreateArgs { rdev: 0, ..args })?);
            } else {
                whiteout_owner = Some((args.uid, args.gid));
            }
        }
        if let Err(e) = r.vfs_rename(vfs, sb, &mut locks, whiteout.as_ref(), whiteout_owner, &guard) {
            if let (Some(w), Some(dir)) = (&whiteout, od.inode()) {
                let _ = sb.fs().unlink(dir, oname, w);
            }
            return Err(e);
        }
        drop(locks);
        r.fsnotify_move(vfs.fast, &op.parent, &np.parent, &guard);
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

/// A rename's two directory locks (Linux's `lock_rename`): one when both names are in the
/// same directory, else the ancestor's first (`rmdir` locks parent, then child), or, for
/// unrelated directories, the old one first; the caller holds the rename lock, which
/// orders all of these.
struct RenameLocks<'g> {
    old: DirWriteGuard<'g>,
    new: Option<DirWriteGuard<'g>>,
}

impl<'g> RenameLocks<'g> {
    fn lock(od: &'g Dentry, nd: &'g Dentry, guard: &LocalGuard<'_>) -> Result<RenameLocks<'g>> {
        let odir = od.dir().ok_or(Errno::ENOTDIR)?;
        let ndir = nd.dir().ok_or(Errno::ENOTDIR)?;
        if std::ptr::eq(od, nd) {
            return Ok(RenameLocks { old: odir.lock.write(), new: None });
        }
        if od.is_subdir(nd, guard) {
            let new = ndir.lock.write();
            let old = odir.lock.write();
            return Ok(RenameLocks { old, new: Some(new) });
        }
        let old = odir.lock.write();
        Ok(RenameLocks { old, new: Some(ndir.lock.write()) })
    }

    /// The locked state of the old (`new == false`) or new directory (the same one when
    /// both are the same directory).
    fn side(&mut self, new: bool) -> &mut DirLocked {
        match (new, &mut self.new) {
            (true, Some(n)) => n,
            _ => &mut self.old,
        }
    }
}

/// A rename between its lookups and its end: the two directories (locked), the names, the
/// dentries they name.
struct Rename<'a> {
    od: &'a Arc<Dentry>,
    nd: &'a Arc<Dentry>,
    oname: &'a [u8],
    nname: &'a [u8],
    src: &'a Arc<Dentry>,
    tgt: Option<&'a Arc<Dentry>>,
    flags: RenameFlags,
}

impl Rename<'_> {
    fn exchange(&self) -> bool {
        self.flags.contains(RenameFlags::EXCHANGE)
    }

    fn src_inode(&self) -> &Arc<Inode> {
        self.src.inode().expect("positive")
    }

    fn tgt_inode(&self) -> Option<&Arc<Inode>> {
        self.tgt.map(|t| t.inode().expect("positive"))
    }

    /// What `do_renameat2` checks of the names found: `NOREPLACE`, trailing slashes on
    /// non-directories, a source that would become its own descendant, a target that is
    /// an ancestor of the source. `Ok(true)`: both name one inode (nothing to do).
    fn check_shape(&self, op: &ParentOf, np: &ParentOf, guard: &LocalGuard<'_>) -> Result<bool> {
        if self.flags.contains(RenameFlags::NOREPLACE) && self.tgt.is_some() {
            return Err(Errno::EEXIST);
        }
        let exchange = self.exchange();
        let src_dir = self.src_inode().is_dir();
        if exchange {
            let t = self.tgt_inode().ok_or(Errno::ENOENT)?;
            if !t.is_dir() && np.trailing_slash {
                return Err(Errno::ENOTDIR);
            }
        }
        if !src_dir && (op.trailing_slash || (!exchange && np.trailing_slash)) {
            return Err(Errno::ENOTDIR);
        }
        if self.nd.is_subdir(self.src, guard) {
            return Err(Errno::EINVAL);
        }
        if let Some(t) = self.tgt
            && self.od.is_subdir(t, guard)
        {
            return Err(if exchange { Errno::EINVAL } else { Errno::ENOTEMPTY });
        }
        Ok(self.tgt_inode().is_some_and(|ti| Arc::ptr_eq(ti, self.src_inode())))
    }

    /// The permission checks of `vfs_rename`: `may_delete` of the source, `may_create`
    /// or `may_delete` at the target, write permission on a directory that changes
    /// parent (its `..`), EBUSY for a mount point.
    fn may_rename(&self, creds: &Credentials, fast: FastPaths, guard: &LocalGuard<'_>) -> Result<()> {
        let (src_inode, tgt_inode) = (self.src_inode(), self.tgt_inode());
        let src_dir = src_inode.is_dir();
        let od_inode = self.od.inode().ok_or(Errno::ENOENT)?;
        let nd_inode = self.nd.inode().ok_or(Errno::ENOENT)?;
        may_delete(creds, od_inode, src_inode, src_dir, fast, guard)?;
        match tgt_inode {
            None => {
                if self.nd.is_dead() {
                    return Err(Errno::ENOENT);
                }
                may_create_in(creds, nd_inode, fast, guard)?;
            }
            Some(ti) => {
                may_delete(creds, nd_inode, ti, if self.exchange() { ti.is_dir() } else { src_dir }, fast, guard)?
            }
        }
        if !Arc::ptr_eq(self.od, self.nd) {
            if src_dir {
                generic_permission(creds, src_inode, MAY_WRITE, fast, guard)?;
            }
            if let Some(ti) = tgt_inode
                && self.exchange()
                && ti.is_dir()
            {
                generic_permission(creds, ti, MAY_WRITE, fast, guard)?;
            }
        }
        let mounted = |d: &Dentry| d.hot.mounts.load(std::sync::atomic::Ordering::Relaxed) > 0;
        if mounted(self.src) || self.tgt.is_some_and(|t| mounted(t)) {
            return Err(Errno::EBUSY);
        }
        Ok(())
    }

    /// `vfs_rename`: the filesystem renames, then the dcache follows (`d_move`, or
    /// `d_exchange`) inside the rename sequence. A replaced directory must be empty,
    /// checked under its own lock, and what was cached below it goes with it.
    fn vfs_rename(
        &self,
        vfs: &VfsInner,
        sb: &SuperBlock,
        locks: &mut RenameLocks<'_>,
        whiteout: Option<&Arc<Inode>>,
        whiteout_owner: Option<(u32, u32)>,
        guard: &LocalGuard<'_>,
    ) -> Result<()> {
        let exchange = self.exchange();
        let mut tl = match self.tgt {
            Some(t) if !exchange && t.inode().expect("positive").is_dir() => {
                let l = t.dir().ok_or(Errno::ENOTDIR)?.lock.write();
                if sb.dcache_complete() && !l.order.is_empty() {
                    return Err(Errno::ENOTEMPTY);
                }
                Some(l)
            }
            _ => None,
        };
        sb.fs().rename(&RenameReq {
            old_dir: self.od.inode().ok_or(Errno::ENOENT)?,
            old_name: self.oname,
            inode: self.src_inode(),
            new_dir: self.nd.inode().ok_or(Errno::ENOENT)?,
            new_name: self.nname,
            target: self.tgt_inode().map(|i| &**i),
            flags: self.flags,
            whiteout_owner,
        })?;
        // A panic in here poisons the instance (the dcache may be half moved): every
        // later walk is EIO.
        {
            let _w = vfs.rename_seq.write_poisoning().map_err(|_| Errno::EIO)?;
            let (od, nd) = (self.od, self.nd);
            vfs.d_unhash(od, locks.side(false), self.oname, guard);
            if let (true, Some(t)) = (exchange, self.tgt) {
                vfs.d_unhash(nd, locks.side(true), self.nname, guard);
                t.set_parent_and_name(od, self.oname, &vfs.rcu);
                vfs.d_insert(od, locks.side(false), self.oname, t.clone(), guard);
            } else if self.tgt.is_some() {
                vfs.d_remove(nd, locks.side(true), self.nname, guard);
            }
            self.src.set_parent_and_name(nd, self.nname, &vfs.rcu);
            vfs.d_insert(nd, locks.side(true), self.nname, self.src.clone(), guard);
            if let Some(w) = whiteout {
                vfs.d_add(od, locks.side(false), self.oname, w.clone(), guard);
            }
        }
        if let (Some(l), Some(t)) = (tl.as_mut(), self.tgt) {
            vfs.d_prune(t.inode().expect("replaced directory").sb(), l, t.dir().expect("replaced directory"));
        }
        Ok(())
    }

    /// `fsnotify_move`: MOVED_FROM/MOVED_TO sharing a cookie, ATTRIB on a replaced target,
    /// MOVE_SELF; for an exchange, the same the other way round; a replaced target that
    /// lost its last link and use is deleted.
    fn fsnotify_move(&self, fast: FastPaths, old: &PathRef, new: &PathRef, guard: &LocalGuard<'_>) {
        let (old_dir, new_dir) = (old.pos(), new.pos());
        let (src_inode, tgt_inode) = (self.src_inode(), self.tgt_inode());
        let (oname, nname) = (self.oname, self.nname);
        let exchange = self.exchange();
        let cookie = fsnotify::next_cookie();
        fsnotify::notify_name(fast, old_dir, oname, src_inode, EventMask::MOVED_FROM, cookie, guard);
        fsnotify::notify_name(fast, new_dir, nname, src_inode, EventMask::MOVED_TO, cookie, guard);
        if let (Some(ti), false) = (tgt_inode, exchange) {
            fsnotify::notify_self(fast, ti, EventMask::ATTRIB, guard);
        }
        fsnotify::notify_self(fast, src_inode, EventMask::MOVE_SELF, guard);
        if let (Some(ti), true) = (tgt_inode, exchange) {
            let cookie = fsnotify::next_cookie();
            fsnotify::notify_name(fast, new_dir, nname, ti, EventMask::MOVED_FROM, cookie, guard);
            fsnotify::notify_name(fast, old_dir, oname, ti, EventMask::MOVED_TO, cookie, guard);
            fsnotify::notify_self(fast, ti, EventMask::MOVE_SELF, guard);
        }
        if let (Some(ti), false) = (tgt_inode, exchange)
            && ti.evict_if_unused()
        {
            fsnotify::inode_deleted(fast, ti, guard);
        }
    }
}
