//! `openat`, `truncate`, `faccessat`, `fchmodat`, `fchownat`, `chdir`, `chroot`. Mirrors
//! Linux's `fs/open.c` (with `do_open`/`may_open` from `fs/namei.c`).
//!
//! The failed-open fast path (seed 003): the walk runs before anything is allocated, and a
//! miss returns its errno straight from the lockless walk. With [`FastPaths::FAILED_OPEN`]
//! off, open allocates its file first (Linux's `alloc_empty_file` before `path_openat`) and
//! resolves through the locked tier.

use std::sync::Arc;

use crate::config::FastPaths;
use crate::cred::{Capabilities, Credentials, Gid, Uid};
use crate::dir_ops::new_node_args;
use crate::errno::{Errno, Result};
use crate::file::DirFd;
use crate::file::{File, FileRef};
use crate::flags::{AccessMode, AtFlags, Fd, OpenFlags, Timespec};
use crate::fsnotify::{self, EventMask};
use crate::inode::Inode;
use crate::mount::MountFlags;
use crate::namei::{LookupFlags, Outcome};
use crate::permission::{MAY_EXEC, MAY_READ, MAY_WRITE, generic_permission, may_create_in, owner_or_capable};
use crate::stat::{FileType, S_IALLUGO, S_ISGID, S_ISUID};
use crate::superblock::SetAttr;
use crate::task::{PathRef, Task};

/// What an open resolved to, with references taken.
// Boxing the name would allocate on every open; this lives on the stack for one call.
#[allow(clippy::large_enum_variant)]
enum OpenTarget {
    Existing(PathRef),
    Create { parent: PathRef, name: crate::namei::NameBuf },
}

/// The xattr of a file capability (`XATTR_NAME_CAPS`).
pub(crate) const XATTR_NAME_CAPS: &[u8] = b"security.capability";

/// `file_remove_privs` (write, truncate, fallocate) of a regular file: the set-id bits a
/// writer without `CAP_FSETID` clears ([`kill_suid`]) and the file capability, which goes
/// whoever writes ([`kill_priv`]). While the inode is `I_NOSEC` this is one flag test;
/// the first call that finds nothing to remove sets it.
pub(crate) fn file_remove_privs(creds: &Credentials, inode: &Inode) -> Result<()> {
    if inode.is_nosec() || inode.file_type() != FileType::Regular {
        return Ok(());
    }
    kill_suid(creds, inode);
    let had_caps = kill_priv(inode)?;
    // `is_sxid`: setuid, or setgid with group execute (a setgid bit without it is a
    // mandatory-locking mark that writes keep).
    let mode = inode.mode();
    if !had_caps && mode & S_ISUID == 0 && mode & (S_ISGID | 0o010) != (S_ISGID | 0o010) {
        inode.set_nosec(true);
    }
    Ok(())
}

/// `security_inode_killpriv`: removes the file capability, if the file has one; true if
/// it had. A filesystem without xattrs has none.
pub(crate) fn kill_priv(inode: &Inode) -> Result<bool> {
    let fs = inode.sb().fs();
    match fs.getxattr(inode, XATTR_NAME_CAPS, &mut []) {
        Ok(_) => {}
        Err(Errno::ENODATA | Errno::EOPNOTSUPP) => return Ok(false),
        Err(e) => return Err(e),
    }
    let _g = inode.lock.lock();
    match fs.removexattr(inode, XATTR_NAME_CAPS) {
        Ok(()) | Err(Errno::ENODATA) => Ok(true),
        Err(e) => Err(e),
    }
}

/// `should_remove_suid`: the privilege bits a write or truncate by `creds` clears.
pub(crate) fn kill_suid(creds: &Credentials, inode: &Inode) {
    let mode = inode.mode();
    let mut kill = 0;
    if mode & S_ISUID != 0 {
        kill |= S_ISUID;
    }
    if mode & S_ISGID != 0 && mode & 0o010 != 0 {
        kill |= S_ISGID;
    }
    if kill != 0 && inode.file_type() == FileType::Regular && !creds.capable(Capabilities::FSETID) {
        inode.update(|w| {
            w.set_mode(mode & !kill);
            w.set_ctime(Timespec::now());
        });
        // Persisted like any mode change (Linux's `file_remove_privs` -> `notify_change`):
        // a passthrough filesystem would otherwise keep the bits (the host process may
        // hold CAP_FSETID). Best effort, as the write or truncate goes on either way.
        let _ = inode
            .sb()
            .fs()
            .setattr(inode, &crate::superblock::SetAttr { mode: Some(mode & !kill), ..Default::default() });
    }
}

impl Task {
    /// `openat(2)`.
    pub fn openat(&self, dirfd: DirFd, path: &[u8], flags: OpenFlags, mode: u32) -> Result<Fd> {
        self.do_sys_open(dirfd, path, flags, mode, LookupFlags::empty())
    }

    /// Opens as `openat` does, without installing the file in the descriptor table: the
    /// caller holds it (and walks from it with [`DirFd::File`], does I/O on it with
    /// [`FileRef::File`]); it is released, close event included, when its last `Arc`
    /// goes. What a server that names files by handle uses (the FUSE frontend), so that it
    /// needs no descriptor per file. `O_CLOEXEC` means nothing here.
    pub fn openat_file(&self, dirfd: DirFd, path: &[u8], flags: OpenFlags, mode: u32) -> Result<Arc<File>> {
        let (file, _) = self.do_filp_open(dirfd, path, flags, mode, LookupFlags::empty(), false)?;
        Ok(file)
    }

    /// `openat` with the walk flags of `openat2`'s `resolve` (`RESOLVE_*`, see
    /// [`Task::openat2`]).
    pub(crate) fn do_sys_open(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: OpenFlags,
        mode: u32,
        resolve: LookupFlags,
    ) -> Result<Fd> {
        let cloexec = flags.contains(OpenFlags::CLOEXEC);
        let (file, slot) = self.do_filp_open(dirfd, path, flags, mode, resolve, true)?;
        match slot {
            Some(slot) => Ok(slot.install(file, cloexec)),
            None => self.files.install(file, 0, cloexec),
        }
    }

    /// The open itself (Linux's `do_filp_open`), announced; with `reserve`, the
    /// descriptor an `O_CREAT`/`O_TRUNC` open will be installed at is taken before
    /// anything is created or truncated.
    fn do_filp_open(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: OpenFlags,
        mode: u32,
        resolve: LookupFlags,
        reserve: bool,
    ) -> Result<(Arc<File>, Option<crate::fdtable::Reservation<'_>>)> {
        let mut flags = flags;
        if flags.contains(OpenFlags::TMPFILE) {
            if !flags.contains(OpenFlags::DIRECTORY) || flags.contains(OpenFlags::CREAT) || !flags.writable() {
                return Err(Errno::EINVAL);
            }
        } else if flags.contains(OpenFlags::PATH) {
            flags &= OpenFlags::DIRECTORY | OpenFlags::NOFOLLOW | OpenFlags::PATH | OpenFlags::CLOEXEC;
        }
        if flags.contains(OpenFlags::CREAT | OpenFlags::DIRECTORY) {
            return Err(Errno::EINVAL);
        }
        // Seed 003, general path: the file is allocated before the walk.
        let slow = !self.vfs.fast.contains(FastPaths::FAILED_OPEN);
        let prealloc = slow.then(Arc::<File>::new_uninit);
        if flags.contains(OpenFlags::TMPFILE) {
            let slot = if reserve { Some(self.files.reserve()?) } else { None };
            return Ok((self.open_tmpfile(dirfd, path, flags, mode, resolve)?, slot));
        }
        let mut lf = resolve;
        if !flags.contains(OpenFlags::NOFOLLOW) && !flags.contains(OpenFlags::CREAT | OpenFlags::EXCL) {
            lf |= LookupFlags::FOLLOW;
        }
        if flags.contains(OpenFlags::DIRECTORY) {
            lf |= LookupFlags::DIRECTORY;
        }
        if flags.contains(OpenFlags::CREAT) {
            lf |= LookupFlags::MISSING_OK;
        }
        if slow {
            lf |= LookupFlags::LOCKED;
        }
        let creat = flags.contains(OpenFlags::CREAT);
        let mut reval = false;
        let file = loop {
            let lf = if reval { lf | LookupFlags::LOCKED } else { lf };
            let target = self.walk(dirfd, path, lf, |o| match o {
                Outcome::Found(p) => {
                    if creat {
                        if flags.contains(OpenFlags::EXCL) {
                            return Err(Errno::EEXIST);
                        }
                        if p.inode().is_dir() {
                            return Err(Errno::EISDIR);
                        }
                    }
                    Ok(OpenTarget::Existing(p.to_path()))
                }
                Outcome::Missing { parent, name, trailing_slash } => {
                    if trailing_slash {
                        return Err(Errno::EISDIR);
                    }
                    Ok(OpenTarget::Create { parent: parent.to_path(), name })
                }
                Outcome::Parent { .. } => Err(Errno::EINVAL),
            })?;
            // The descriptor before anything that cannot be undone (a create, a truncate),
            // as Linux's `get_unused_fd_flags` comes first; only once the walk succeeded,
            // so a failed open still takes no lock (seed 003), and only when there is
            // something to undo: a plain open has nothing, and installing takes the
            // table's lock once instead of twice.
            let slot = match reserve && flags.intersects(OpenFlags::CREAT | OpenFlags::TRUNC) {
                true => Some(self.files.reserve()?),
                false => None,
            };
            let opened = match target {
                OpenTarget::Existing(p) => self.do_open(p, flags).map(Some),
                OpenTarget::Create { parent, name } => self.open_create(&parent, name.as_bytes(), flags, mode),
            };
            match opened {
                Ok(Some(f)) => break (f, slot),
                // Lost a race with a creator: open what is there now.
                Ok(None) => {
                    drop(slot);
                    return self.do_filp_open(dirfd, path, flags & !OpenFlags::CREAT, mode, resolve, reserve);
                }
                // What the walk found lost its last name (and its contents) before it could be
                // opened: walk again, in the locked tier, which waits for the unlink to finish.
                Err(Errno::ESTALE) => reval = true,
                Err(e) => return Err(e),
            }
        };
        let (file, slot) = file;
        let file = match prealloc {
            Some(mut slot) => {
                Arc::get_mut(&mut slot).expect("fresh allocation").write(file);
                // SAFETY: just initialized.
                unsafe { slot.assume_init() }
            }
            None => Arc::new(file),
        };
        file.announce_open(self.vfs.fast);
        Ok((file, slot))
    }

    /// `open(2)`: `openat(AT_FDCWD, ...)`.
    pub fn open(&self, path: &[u8], flags: OpenFlags, mode: u32) -> Result<Fd> {
        self.openat(DirFd::Cwd, path, flags, mode)
    }

    /// `creat(2)`.
    pub fn creat(&self, path: &[u8], mode: u32) -> Result<Fd> {
        self.openat(DirFd::Cwd, path, OpenFlags::CREAT | OpenFlags::WRONLY | OpenFlags::TRUNC, mode)
    }

    /// Opens the file a descriptor refers to anew with `flags` (what `open` of
    /// `/proc/self/fd/N` does on Linux): the checks of an open of an existing file, also
    /// for a file that lost its last name. `O_CREAT`/`O_EXCL` are ignored. Used by the FUSE
    /// frontend, whose requests name files by node (an `O_PATH` descriptor), not by path.
    pub fn reopen<'f>(&self, fd: impl Into<FileRef<'f>>, flags: OpenFlags) -> Result<Fd> {
        let file = self.reopen_file(fd, flags)?;
        self.files.install(file, 0, flags.contains(OpenFlags::CLOEXEC))
    }

    /// [`Task::reopen`] without installing the file (see [`Task::openat_file`]).
    pub fn reopen_file<'f>(&self, fd: impl Into<FileRef<'f>>, flags: OpenFlags) -> Result<Arc<File>> {
        let flags = flags & !(OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::TMPFILE);
        let p = self.resolve(DirFd::from(fd.into()), b"", LookupFlags::EMPTY)?;
        if flags.contains(OpenFlags::DIRECTORY) && !p.dentry.inode().is_some_and(|i| i.is_dir()) {
            return Err(Errno::ENOTDIR);
        }
        let file = Arc::new(self.do_open(p, flags)?);
        file.announce_open(self.vfs.fast);
        Ok(file)
    }

    /// Creates and opens `name` in `parent`; `Ok(None)` if it appeared meanwhile (and
    /// `O_EXCL` is not set).
    fn open_create(&self, parent: &PathRef, name: &[u8], flags: OpenFlags, mode: u32) -> Result<Option<File>> {
        let vfs = &*self.vfs;
        let guard = vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        let dir_inode = parent.dentry.inode().ok_or(Errno::ENOENT)?;
        let dir = parent.dentry.dir().ok_or(Errno::ENOTDIR)?;
        let mut locked = dir.lock.write();
        if vfs.lookup_excl(&parent.mnt.sb, &parent.dentry, &mut locked, name, &guard)?.is_some() {
            if flags.contains(OpenFlags::EXCL) {
                return Err(Errno::EEXIST);
            }
            return Ok(None);
        }
        parent.mnt.want_write()?;
        if parent.dentry.is_dead() {
            return Err(Errno::ENOENT);
        }
        may_create_in(creds, dir_inode, vfs.fast, &guard)?;
        let args =
            new_node_args(creds, dir_inode, (mode & S_IALLUGO) | FileType::Regular.mode_bits(), self.current_umask())?;
        let inode = parent.mnt.sb.fs().create(&parent.mnt.sb, dir_inode, name, &args)?;
        let d = vfs.d_add(&parent.dentry, &mut locked, name, inode.clone(), &guard);
        fsnotify::notify_name(vfs.fast, parent.pos(), name, &inode, EventMask::CREATE.bits(), 0, &guard);
        drop(locked);
        Ok(Some(File::new(parent.mnt.clone(), d, inode, flags & !OpenFlags::TRUNC)?))
    }

    fn open_tmpfile(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: OpenFlags,
        mode: u32,
        resolve: LookupFlags,
    ) -> Result<Arc<File>> {
        let dir = self.resolve(dirfd, path, resolve | LookupFlags::FOLLOW | LookupFlags::DIRECTORY)?;
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        let dir_inode = dir.dentry.inode().ok_or(Errno::ENOENT)?;
        dir.mnt.want_write()?;
        may_create_in(creds, dir_inode, self.vfs.fast, &guard)?;
        let args =
            new_node_args(creds, dir_inode, (mode & S_IALLUGO) | FileType::Regular.mode_bits(), self.current_umask())?;
        let inode = dir.mnt.sb.fs().tmpfile(&dir.mnt.sb, dir_inode, &args)?;
        let d = crate::dentry::Dentry::new_child(&dir.dentry, b"#tmpfile", Some(inode.clone()), &self.vfs.rcu);
        d.set_flag(crate::dentry::DENTRY_DEAD | crate::dentry::DENTRY_LINKABLE);
        let file = Arc::new(File::new(dir.mnt.clone(), d, inode, flags)?);
        file.announce_open(self.vfs.fast);
        Ok(file)
    }

    /// `do_open` + `may_open`: checks and opens an existing file.
    fn do_open(&self, p: PathRef, flags: OpenFlags) -> Result<File> {
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?.clone();
        if flags.contains(OpenFlags::PATH) {
            return File::new(p.mnt, p.dentry, inode, flags);
        }
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        let mut acc = 0;
        if flags.readable() || flags.access_mode() == 3 {
            acc |= MAY_READ;
        }
        if flags.writable() || flags.access_mode() == 3 || flags.contains(OpenFlags::TRUNC) {
            acc |= MAY_WRITE;
        }
        let mut trunc = flags.contains(OpenFlags::TRUNC);
        match inode.file_type() {
            FileType::Symlink => return Err(Errno::ELOOP),
            FileType::Directory => {
                if acc & MAY_WRITE != 0 {
                    return Err(Errno::EISDIR);
                }
            }
            FileType::CharDevice | FileType::BlockDevice => {
                if p.mnt.flags().contains(MountFlags::NODEV) {
                    return Err(Errno::EACCES);
                }
                trunc = false;
            }
            FileType::Fifo | FileType::Socket => trunc = false,
            FileType::Regular => {}
        }
        if trunc {
            p.mnt.want_write()?;
        }
        generic_permission(creds, &inode, acc, self.vfs.fast, &guard)?;
        if acc & MAY_WRITE != 0 {
            p.mnt.want_write()?;
        }
        if flags.contains(OpenFlags::NOATIME) && !owner_or_capable(creds, &inode) {
            return Err(Errno::EPERM);
        }
        match inode.file_type() {
            // In-process I/O on special files is not supported yet.
            FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice => {
                return Err(Errno::ENXIO);
            }
            _ => {}
        }
        if trunc && inode.file_type() == FileType::Regular {
            self.do_truncate(creds, &inode, 0, true)?;
            fsnotify::notify_file(self.vfs.fast, &p.mnt, &p.dentry, &inode, EventMask::MODIFY.bits(), &guard);
        }
        File::new(p.mnt, p.dentry, inode, flags)
    }

    /// `fsnotify_change`: an attribute or size change, reported to the object and a
    /// watched parent.
    pub(crate) fn notify_attr(
        &self,
        mnt: &crate::mount::Mount,
        dentry: &crate::dentry::Dentry,
        inode: &Inode,
        mask: EventMask,
    ) {
        let guard = self.vfs.rcu.pin();
        fsnotify::notify_file(self.vfs.fast, mnt, dentry, inode, mask.bits(), &guard);
    }

    /// `do_truncate`: sets the size, clears privilege bits, updates times.
    pub(crate) fn do_truncate(&self, creds: &Credentials, inode: &Inode, size: u64, from_open: bool) -> Result<()> {
        let old = inode.size();
        inode.sb().fs().truncate(inode, size)?;
        file_remove_privs(creds, inode)?;
        if old != size || from_open {
            let now = Timespec::now();
            inode.update(|w| {
                w.set_mtime(now);
                w.set_ctime(now);
            });
        }
        Ok(())
    }

    /// Resolves a path to a counted reference.
    pub(crate) fn resolve(&self, dirfd: DirFd, path: &[u8], flags: LookupFlags) -> Result<PathRef> {
        self.walk(dirfd, path, flags, |o| match o {
            Outcome::Found(p) => Ok(p.to_path()),
            _ => Err(Errno::ENOENT),
        })
    }

    /// `truncate(2)`.
    pub fn truncate(&self, path: &[u8], len: i64) -> Result<()> {
        if len < 0 {
            return Err(Errno::EINVAL);
        }
        let p = self.resolve(DirFd::Cwd, path, LookupFlags::FOLLOW)?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        match inode.file_type() {
            FileType::Directory => return Err(Errno::EISDIR),
            FileType::Regular => {}
            _ => return Err(Errno::EINVAL),
        }
        p.mnt.want_write()?;
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        generic_permission(creds, inode, MAY_WRITE, self.vfs.fast, &guard)?;
        self.do_truncate(creds, inode, len as u64, false)?;
        self.notify_attr(&p.mnt, &p.dentry, inode, EventMask::MODIFY);
        Ok(())
    }

    /// `ftruncate(2)`.
    pub fn ftruncate<'f>(&self, fd: impl Into<FileRef<'f>>, len: i64) -> Result<()> {
        if len < 0 {
            return Err(Errno::EINVAL);
        }
        let file = self.file_arc(fd.into())?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        if file.inode.file_type() != FileType::Regular || !file.flags().writable() {
            return Err(Errno::EINVAL);
        }
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        self.do_truncate(creds, &file.inode, len as u64, false)?;
        self.notify_attr(&file.mnt, &file.dentry, &file.inode, EventMask::MODIFY);
        Ok(())
    }

    /// `faccessat2(2)`: `AT_EACCESS`, `AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`.
    /// Lockless and allocation-free on cached names.
    pub fn faccessat(&self, dirfd: DirFd, path: &[u8], mode: AccessMode, flags: AtFlags) -> Result<()> {
        if !(AtFlags::EACCESS | AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let mut lf = LookupFlags::empty();
        if !flags.contains(AtFlags::SYMLINK_NOFOLLOW) {
            lf |= LookupFlags::FOLLOW;
        }
        if flags.contains(AtFlags::EMPTY_PATH) {
            lf |= LookupFlags::EMPTY;
        }
        let fast = self.vfs.fast;
        // Without AT_EACCESS the whole call, walk included, runs with the real ids. Only a
        // task whose real and effective ids differ builds them (allocates).
        let alt = {
            let guard = self.vfs.rcu.pin();
            let creds = self.creds.load(&guard).get();
            (!flags.contains(AtFlags::EACCESS) && !creds.uses_own_ids_for_access()).then(|| creds.for_access())
        };
        self.walk_as(alt.as_ref(), dirfd, path, lf, |o| {
            let Outcome::Found(p) = o else { return Err(Errno::ENOENT) };
            let inode = p.inode();
            let guard = self.vfs.rcu.pin();
            let creds = match &alt {
                Some(c) => c,
                None => self.creds.load(&guard).get(),
            };
            if mode.contains(AccessMode::X_OK)
                && inode.file_type() == FileType::Regular
                && p.mnt.flags().contains(MountFlags::NOEXEC)
            {
                return Err(Errno::EACCES);
            }
            generic_permission(creds, inode, mode.bits() & 7, fast, &guard)?;
            let special = matches!(
                inode.file_type(),
                FileType::Fifo | FileType::Socket | FileType::CharDevice | FileType::BlockDevice
            );
            if mode.contains(AccessMode::W_OK) && !special {
                p.mnt.want_write()?;
            }
            Ok(())
        })
    }

    /// `access(2)`.
    pub fn access(&self, path: &[u8], mode: AccessMode) -> Result<()> {
        self.faccessat(DirFd::Cwd, path, mode, AtFlags::empty())
    }

    /// `fchmodat2(2)`: `AT_SYMLINK_NOFOLLOW` (EOPNOTSUPP on a symlink, as Linux) and
    /// `AT_EMPTY_PATH`.
    pub fn fchmodat(&self, dirfd: DirFd, path: &[u8], mode: u32, flags: AtFlags) -> Result<()> {
        if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let p = self.resolve(dirfd, path, at_lookup(flags))?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        if inode.file_type() == FileType::Symlink {
            return Err(Errno::EOPNOTSUPP);
        }
        p.mnt.want_write()?;
        self.chmod_common(inode, mode)?;
        self.notify_attr(&p.mnt, &p.dentry, inode, EventMask::ATTRIB);
        Ok(())
    }

    /// `fchmod(2)`.
    pub fn fchmod<'f>(&self, fd: impl Into<FileRef<'f>>, mode: u32) -> Result<()> {
        let file = self.file_arc(fd.into())?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        file.mnt.want_write()?;
        self.chmod_common(&file.inode, mode)?;
        self.notify_attr(&file.mnt, &file.dentry, &file.inode, EventMask::ATTRIB);
        Ok(())
    }

    fn chmod_common(&self, inode: &Inode, mode: u32) -> Result<()> {
        let creds = self.credentials();
        if !owner_or_capable(&creds, inode) {
            return Err(Errno::EPERM);
        }
        let mut m = mode & S_IALLUGO;
        if !creds.in_group(Gid(inode.gid())) && !creds.capable(Capabilities::FSETID) {
            m &= !S_ISGID;
        }
        let _g = inode.lock.lock();
        inode.update_locked(|w| {
            w.set_mode(m);
            w.set_ctime(Timespec::now());
        });
        inode.sb().fs().setattr(inode, &SetAttr { mode: Some(m), ..Default::default() })?;
        // The access ACL's mask (or group entry), owner and other entries follow the mode.
        crate::acl::posix_acl_chmod_locked(inode, m)
    }

    /// `fchownat(2)`: `None` leaves an id unchanged (`-1`).
    pub fn fchownat(
        &self,
        dirfd: DirFd,
        path: &[u8],
        uid: Option<Uid>,
        gid: Option<Gid>,
        flags: AtFlags,
    ) -> Result<()> {
        if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let p = self.resolve(dirfd, path, at_lookup(flags))?;
        p.mnt.want_write()?;
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
        self.chown_common(inode, uid, gid)?;
        self.notify_attr(&p.mnt, &p.dentry, inode, EventMask::ATTRIB);
        Ok(())
    }

    /// `fchown(2)`.
    pub fn fchown<'f>(&self, fd: impl Into<FileRef<'f>>, uid: Option<Uid>, gid: Option<Gid>) -> Result<()> {
        let file = self.file_arc(fd.into())?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        file.mnt.want_write()?;
        self.chown_common(&file.inode, uid, gid)?;
        self.notify_attr(&file.mnt, &file.dentry, &file.inode, EventMask::ATTRIB);
        Ok(())
    }

    fn chown_common(&self, inode: &Inode, uid: Option<Uid>, gid: Option<Gid>) -> Result<()> {
        let creds = self.credentials();
        let owner = creds.uid.0 == inode.uid();
        let can_chown = creds.capable(Capabilities::CHOWN);
        if let Some(u) = uid
            && !(owner && u.0 == inode.uid())
            && !can_chown
        {
            return Err(Errno::EPERM);
        }
        if let Some(g) = gid
            && !(owner && (g.0 == inode.gid() || creds.in_group(g)))
            && !can_chown
        {
            return Err(Errno::EPERM);
        }
        // `chown_common` + `notify_change`: a non-directory loses setuid, and setgid when
        // group-executable or when the caller is not in its group. Dropping a bit is a mode
        // change, which needs the owner (EPERM otherwise, even for `-1, -1`) and keeps
        // setgid only for a member of the (new) group.
        let in_group_or_capable = |g: u32| creds.in_group(Gid(g)) || creds.capable(Capabilities::FSETID);
        let old = inode.mode();
        let mut mode = old;
        if !inode.is_dir() {
            mode &= !S_ISUID;
            if mode & S_ISGID != 0 && (mode & 0o010 != 0 || !in_group_or_capable(inode.gid())) {
                mode &= !S_ISGID;
            }
        }
        if mode != old {
            if !owner_or_capable(&creds, inode) {
                return Err(Errno::EPERM);
            }
            if !in_group_or_capable(gid.map_or(inode.gid(), |g| g.0)) {
                mode &= !S_ISGID;
            }
        }
        // `ATTR_KILL_PRIV`: a chown of a non-directory takes its file capability too.
        if !inode.is_dir() {
            kill_priv(inode)?;
        }
        let now = Timespec::now();
        inode.update(|w| {
            w.set_mode(mode);
            if let Some(u) = uid {
                w.set_uid(u.0);
            }
            if let Some(g) = gid {
                w.set_gid(g.0);
            }
            w.set_ctime(now);
        });
        // The dropped bits are persisted with the owner: the storage's own chown may not
        // drop them (a host chown of `-1, -1`, or by a caller with CAP_FSETID).
        inode.sb().fs().setattr(
            inode,
            &SetAttr {
                uid: uid.map(|u| u.0),
                gid: gid.map(|g| g.0),
                mode: (mode != old).then_some(mode & !crate::stat::S_IFMT),
                ..Default::default()
            },
        )
    }

    /// `chdir(2)`.
    pub fn chdir(&self, path: &[u8]) -> Result<()> {
        loop {
            let p = self.resolve(DirFd::Cwd, path, LookupFlags::FOLLOW | LookupFlags::DIRECTORY)?;
            self.check_exec(&p)?;
            // ESTALE: a umount took the mount away after the walk: walk again.
            match self.set_fs(|f| f.cwd = p) {
                Err(Errno::ESTALE) => continue,
                r => return r,
            }
        }
    }

    /// `fchdir(2)`.
    pub fn fchdir<'f>(&self, fd: impl Into<FileRef<'f>>) -> Result<()> {
        let file = self.file_arc(fd.into())?;
        if !file.inode.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        let p = PathRef { mnt: file.mnt.clone(), dentry: file.dentry.clone() };
        self.check_exec(&p)?;
        self.set_fs(|f| f.cwd = p)
    }

    /// `chroot(2)`.
    pub fn chroot(&self, path: &[u8]) -> Result<()> {
        loop {
            let p = self.resolve(DirFd::Cwd, path, LookupFlags::FOLLOW | LookupFlags::DIRECTORY)?;
            self.check_exec(&p)?;
            if !self.credentials().capable(Capabilities::SYS_CHROOT) {
                return Err(Errno::EPERM);
            }
            // ESTALE: as in chdir.
            match self.set_fs(|f| f.root = p) {
                Err(Errno::ESTALE) => continue,
                r => return r,
            }
        }
    }

    fn check_exec(&self, p: &PathRef) -> Result<()> {
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        generic_permission(creds, p.dentry.inode().ok_or(Errno::ENOENT)?, MAY_EXEC, self.vfs.fast, &guard)
    }
}

/// Lookup flags of the `AT_SYMLINK_NOFOLLOW`/`AT_EMPTY_PATH` calls.
pub(crate) fn at_lookup(flags: AtFlags) -> LookupFlags {
    let mut lf = LookupFlags::empty();
    if !flags.contains(AtFlags::SYMLINK_NOFOLLOW) {
        lf |= LookupFlags::FOLLOW;
    }
    if flags.contains(AtFlags::EMPTY_PATH) {
        lf |= LookupFlags::EMPTY;
    }
    lf
}
