//! `openat`, `openat2`, `open`, `creat`, `openat_file`, `reopen`. Mirrors Linux's
//! `fs/open.c` (`do_sys_openat2`, `build_open_flags`) with `do_filp_open`, `path_openat`,
//! `do_open` and `may_open` from `fs/namei.c`.
//!
//! The failed-open fast path (seed 003): the walk runs before anything is allocated, and a
//! miss returns its errno straight from the lockless walk. With [`FastPaths::FAILED_OPEN`]
//! off, open allocates its file first (Linux's `alloc_empty_file` before `path_openat`) and
//! resolves through the locked tier.
//!
//! `openat2`: open with scoped resolution (`RESOLVE_*`). Mirrors `build_open_flags` of
//! Linux's `fs/open.c`; the walk side of each flag is in [`crate::walk::namei`].
//!
//! These are what sandboxes use: `RESOLVE_BENEATH` and `RESOLVE_IN_ROOT` confine a walk to
//! a directory however its path, its symlinks or concurrent renames try to leave it. The
//! walk answers only from a state of the tree that no rename or mount change overlapped
//! (see [`crate::walk::namei`]), where climbing with `..` meets the scope's root before anything
//! outside it, and every scoped answer is checked to lie below the root before it is
//! returned.

use std::sync::Arc;

use crate::abi::config::FastPaths;
use crate::abi::errno::{Errno, Result};
use crate::abi::flags::OpenHow;
use crate::abi::flags::ResolveFlags;
use crate::abi::flags::{AtFlags, FallocFlags, Fd, OpenFlags};
use crate::abi::stat::{FileType, S_IALLUGO, Stat};
use crate::core::file::DirFd;
use crate::core::file::{File, FileRef};
use crate::core::fsnotify::{self, EventMask};
use crate::core::inode::{Inode, new_node_args};
use crate::core::mount::MountFlags;
use crate::core::path::{PathRef, Pos};
use crate::core::permission::{MAY_READ, MAY_WRITE, generic_permission, may_create_in, owner_or_capable};
use crate::sync::rcu::{ArcBorrow, LocalGuard};
use crate::task::Task;
use crate::walk::namei::{LookupFlags, Outcome};

/// What an open's walk ended in: an existing file's path, with references taken, or the
/// file it created.
enum OpenTarget<'t> {
    Existing(PathRef),
    /// Created in the walk's last step, under its guard, with the descriptor reserved
    /// before (`None`: the name appeared meanwhile).
    Created(Result<Option<File>>, Option<crate::core::fdtable::Reservation<'t>>),
}

/// What [`Task::lookup_path`] found.
pub enum Looked {
    /// An inode the caller said it holds: no file was made.
    Held(Arc<Inode>),
    /// An `O_PATH` file of what the path names.
    Opened(Arc<File>),
}

/// Locked walks an open makes again when what it found lost its contents before it
/// could be opened ([`Task::path_openat`]).
const REVAL_WALKS: u32 = 8;

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

    /// What a server's LOOKUP of a name needs (the FUSE frontend's; Linux has no such call):
    /// `fstatat(dirfd, path, flags)`, and an `O_PATH` file of what it found unless
    /// `held(stat, inode)` says the caller holds one of that inode already, in which case
    /// the inode comes back instead: a name the caller knows costs a lockless walk and an
    /// inode reference, no file made, announced or retired. `held` is asked inside the
    /// walk, which may ask again (a lockless attempt that a rename overlapped is done
    /// over), so it must not change anything. The walk is not kept in the path cache (the
    /// kernel that asked caches the answer; the same question rarely comes again).
    /// `flags`: `AT_SYMLINK_NOFOLLOW` (the file is then `O_PATH | O_NOFOLLOW`'s) and
    /// `AT_EMPTY_PATH`.
    pub fn lookup_path(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: AtFlags,
        held: impl Fn(&Stat, &Inode) -> bool,
    ) -> Result<(Stat, Looked)> {
        if !(AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH).contains(flags) {
            return Err(Errno::EINVAL);
        }
        let (st, found) =
            self.walk(dirfd, path, crate::walk::namei::at_lookup(flags) | LookupFlags::NO_PATH_CACHE, |o| match o {
                Outcome::Found(p) => {
                    let inode = p.dentry.get().inode().ok_or(Errno::ENOENT)?;
                    let st = inode.stat();
                    // The position to open, or the held inode (no file to make).
                    match held(&st, inode) {
                        true => Ok((st, Err(inode.clone()))),
                        false => Ok((st, Ok(p.to_path()))),
                    }
                }
                _ => Err(Errno::ENOENT),
            })?;
        let p = match found {
            Ok(p) => p,
            Err(inode) => return Ok((st, Looked::Held(inode))),
        };
        let file = match self.do_open(p, OpenFlags::PATH) {
            Ok((f, _)) => Arc::new(f),
            // It lost its last name meanwhile: what the open of that path finds now.
            Err(Errno::ESTALE) => {
                let mut fl = OpenFlags::PATH;
                fl.set(OpenFlags::NOFOLLOW, flags.contains(AtFlags::SYMLINK_NOFOLLOW));
                let file = self.openat_file(dirfd, path, fl, 0)?;
                return Ok((file.inode().stat(), Looked::Opened(file)));
            }
            Err(e) => return Err(e),
        };
        file.announce_open(self.vfs.fast);
        Ok((st, Looked::Opened(file)))
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
        // `do_filp_open` counted the descriptor in the file already.
        match slot {
            Some(slot) => Ok(slot.install(file, cloexec)),
            None => self.files.install_counted(file, cloexec),
        }
    }

    /// The open itself (Linux's `do_filp_open`), announced; with `reserve`, for a caller
    /// that installs the file in a descriptor (counted in the file already), the
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
    ) -> Result<(Arc<File>, Option<crate::core::fdtable::Reservation<'_>>)> {
        let (flags, lf) = build_open_flags(flags, resolve)?;
        // Seed 003, general path: the file is allocated before the walk.
        let slow = !self.vfs.fast.contains(FastPaths::FAILED_OPEN);
        let prealloc = slow.then(Arc::<File>::new_uninit);
        let (mut file, slot, truncated) = if flags.contains(OpenFlags::TMPFILE) {
            let slot = if reserve { Some(self.files.reserve()?) } else { None };
            (self.open_tmpfile(dirfd, path, flags, mode, resolve)?, slot, false)
        } else {
            let lf = if slow { lf | LookupFlags::LOCKED } else { lf };
            self.path_openat(dirfd, path, flags, mode, lf, reserve)?
        };
        if reserve {
            // The caller installs it ([`Task::do_sys_open`]): counted here, before it is
            // shared, with no atomic add.
            file.count_first_fd();
        }
        let file = match prealloc {
            Some(mut slot) => {
                Arc::get_mut(&mut slot).expect("fresh allocation").write(file);
                // SAFETY: just initialized.
                unsafe { slot.assume_init() }
            }
            None => Arc::new(file),
        };
        file.announce_open(self.vfs.fast);
        if truncated {
            file.announce_truncated(self.vfs.fast);
        }
        Ok((file, slot))
    }

    /// `may_create_in_sticky`: an `O_CREAT` open of a file that exists, in a sticky
    /// world-writable directory, is EACCES unless the caller or the directory's owner owns
    /// the file. With `fs.protected_regular` and `fs.protected_fifos` at 0 (this machine's
    /// and the kernel's defaults) regular files and fifos are exempt; every other type (a
    /// symlink opened with `O_NOFOLLOW`, a device) is not. Root is not exempt either.
    fn may_create_in_sticky(&self, p: crate::core::path::Pos<'_>) -> Result<()> {
        let inode = p.inode();
        if matches!(inode.file_type(), FileType::Regular | FileType::Fifo) {
            return Ok(());
        }
        let guard = self.vfs.rcu.pin();
        let dir = p.dentry.parent(&guard).inode().ok_or(Errno::ENOENT)?;
        let (dir_mode, dir_uid, uid) = (dir.mode(), dir.uid(), inode.uid());
        if dir_mode & 0o1000 == 0 || uid == dir_uid || uid == self.credentials().uid.0 {
            return Ok(());
        }
        if dir_mode & 0o002 != 0 { Err(Errno::EACCES) } else { Ok(()) }
    }

    /// `path_openat`: walks to the file (or its parent, to create it) and opens it; walks
    /// again, in the locked tier, when what the walk found lost its last name before it
    /// could be opened. With `reserve`, the descriptor of an open that may create or
    /// truncate is taken first.
    fn path_openat(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: OpenFlags,
        mode: u32,
        lf: LookupFlags,
        reserve: bool,
    ) -> Result<(File, Option<crate::core::fdtable::Reservation<'_>>, bool)> {
        let creat = flags.contains(OpenFlags::CREAT);
        let mut reval = 0;
        loop {
            let lf = if reval > 0 { lf | LookupFlags::LOCKED } else { lf };
            // The descriptor before anything that cannot be undone (a create, a truncate),
            // as Linux's `get_unused_fd_flags` comes first; only once the walk succeeded,
            // so a failed open still takes no lock (seed 003), and only when there is
            // something to undo: a plain open has nothing, and installing takes the
            // table's lock once instead of twice.
            let reserves = reserve && flags.intersects(OpenFlags::CREAT | OpenFlags::TRUNC);
            // A create runs in the walk's last step, under its guard (`walk_then`): no count
            // on the parent and no second pin.
            let target = self.walk_ctx(None).walk_then(dirfd, path, lf, |o, guard| match o {
                Outcome::Found(p) => {
                    if creat {
                        if flags.contains(OpenFlags::EXCL) {
                            return Err(Errno::EEXIST);
                        }
                        if p.inode().is_dir() {
                            return Err(Errno::EISDIR);
                        }
                        self.may_create_in_sticky(p)?;
                    }
                    Ok(OpenTarget::Existing(p.to_path()))
                }
                Outcome::Missing { parent, name, trailing_slash, probe } => {
                    if trailing_slash {
                        return Err(Errno::EISDIR);
                    }
                    let slot = if reserves { Some(self.files.reserve()?) } else { None };
                    let made = self.open_create(parent, name.bytes(path), probe, flags, mode, guard);
                    Ok(OpenTarget::Created(made, slot))
                }
                Outcome::Parent { .. } => Err(Errno::EINVAL),
            })?;
            let (opened, slot) = match target {
                OpenTarget::Existing(p) => {
                    let slot = if reserves { Some(self.files.reserve()?) } else { None };
                    (self.do_open(p, flags).map(Some), slot)
                }
                OpenTarget::Created(made, slot) => (made.map(|f| f.map(|f| (f, false))), slot),
            };
            match opened {
                Ok(Some((f, truncated))) => return Ok((f, slot, truncated)),
                // Lost a race with a creator: open what is there now.
                Ok(None) => {
                    drop(slot);
                    let flags = flags & !OpenFlags::CREAT;
                    let lf = lf & !LookupFlags::MISSING_OK | open_follow(flags);
                    return self.path_openat(dirfd, path, flags, mode, lf, reserve);
                }
                // What the walk found lost its last name (and its contents) before it could
                // be opened: walk again, in the locked tier, which waits for the unlink. A
                // few times at most, then ESTALE, as Linux after its `LOOKUP_REVAL` walk:
                // an open never spins on an object that stays unreachable.
                Err(Errno::ESTALE) if reval < REVAL_WALKS => reval += 1,
                Err(e) => return Err(e),
            }
        }
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
        let (file, truncated) = self.do_open(p, flags)?;
        let file = Arc::new(file);
        file.announce_open(self.vfs.fast);
        if truncated {
            file.announce_truncated(self.vfs.fast);
        }
        Ok(file)
    }

    /// Creates and opens `name` in `parent`; `Ok(None)` if it appeared meanwhile (and
    /// `O_EXCL` is not set).
    /// `probe`: what the walk's lockless lookup of `name` saw (see `Outcome::Missing`).
    /// `guard`: the walk's, which keeps `parent`.
    fn open_create(
        &self,
        parent: Pos<'_>,
        name: &[u8],
        probe: Option<crate::core::dhash::Probe>,
        flags: OpenFlags,
        mode: u32,
        guard: &LocalGuard<'_>,
    ) -> Result<Option<File>> {
        let vfs = &*self.vfs;
        let creds = self.creds.load(guard).get();
        let dir_inode = parent.dentry.get().inode().ok_or(Errno::ENOENT)?;
        let dir = parent.dentry.get().dir().ok_or(Errno::ENOTDIR)?;
        let mut locked = dir.lock.write();
        let sb = &parent.mnt.get().sb;
        let (found, probe) = vfs.lookup_excl_probed(sb, parent.dentry, &mut locked, name, probe, guard)?;
        if found.is_some() {
            if flags.contains(OpenFlags::EXCL) {
                return Err(Errno::EEXIST);
            }
            return Ok(None);
        }
        parent.mnt.want_write()?;
        if parent.dentry.is_dead() {
            return Err(Errno::ENOENT);
        }
        may_create_in(creds, dir_inode, vfs.fast, guard)?;
        let args =
            new_node_args(creds, dir_inode, (mode & S_IALLUGO) | FileType::Regular.mode_bits(), self.current_umask())?;
        let inode = sb.fs().create(sb, dir_inode, name, &args)?;
        let d = vfs.d_add_probed(parent.dentry, &mut locked, name, inode, probe, guard);
        if let Some(inode) = d.inode() {
            fsnotify::notify_name(vfs.fast, parent, name, inode, EventMask::CREATE, 0, guard);
        }
        drop(locked);
        Ok(Some(File::new(parent.mnt.to_arc(), d, flags & !OpenFlags::TRUNC)?))
    }

    fn open_tmpfile(
        &self,
        dirfd: DirFd,
        path: &[u8],
        flags: OpenFlags,
        mode: u32,
        resolve: LookupFlags,
    ) -> Result<File> {
        let dir = self.resolve(dirfd, path, resolve | open_follow(flags) | LookupFlags::DIRECTORY)?;
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        let dir_inode = dir.dentry.inode().ok_or(Errno::ENOENT)?;
        dir.mnt.want_write()?;
        may_create_in(creds, dir_inode, self.vfs.fast, &guard)?;
        let args =
            new_node_args(creds, dir_inode, (mode & S_IALLUGO) | FileType::Regular.mode_bits(), self.current_umask())?;
        let inode = dir.mnt.sb.fs().tmpfile(&dir.mnt.sb, dir_inode, &args)?;
        // Named as `d_tmpfile` names it ("#" and the inode number): a watch on the
        // directory reports the file's events with that name, as from any unlinked child.
        let name = format!("#{}", inode.ino().0);
        let d = crate::core::dentry::Dentry::new_child(
            ArcBorrow::from_arc(&dir.dentry),
            name.as_bytes(),
            Some(inode),
            &self.vfs.rcu,
        );
        d.set_flag(crate::core::dentry::DENTRY_DEAD | crate::core::dentry::DENTRY_LINKABLE);
        crate::core::fsnotify::d_instantiate_flags(&dir.dentry, &d);
        File::new(dir.mnt.clone(), d, flags)
    }

    /// `do_open` + `may_open`: checks and opens an existing file.
    /// Also says whether the open truncated the file (`O_TRUNC` of a regular file), whose
    /// MODIFY its caller reports after the open's OPEN, as Linux's `handle_truncate`
    /// comes after `vfs_open`.
    fn do_open(&self, p: PathRef, flags: OpenFlags) -> Result<(File, bool)> {
        if flags.contains(OpenFlags::PATH) {
            return Ok((File::new(p.mnt, p.dentry, flags)?, false));
        }
        let (fifo, truncated) = self.may_open(&p, flags)?;
        let mut file = File::new(p.mnt, p.dentry, flags)?;
        if fifo {
            // `fifo_open`, which may wait for the other side (no guard is held across it).
            let nonblock = flags.contains(OpenFlags::NONBLOCK);
            file.pipe = Some(self.vfs.fifos.open(file.inode(), flags.readable(), flags.writable(), nonblock)?);
        }
        Ok((file, truncated))
    }

    /// `may_open`, and the truncation of `O_TRUNC`: whether the file is a fifo, and
    /// whether it was truncated. The inode is borrowed from `p`'s dentry, which the file
    /// then takes.
    fn may_open(&self, p: &PathRef, flags: OpenFlags) -> Result<(bool, bool)> {
        let inode = p.dentry.inode().ok_or(Errno::ENOENT)?;
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
        generic_permission(creds, inode, acc, self.vfs.fast, &guard)?;
        // An append-only file is opened for writing only to append, and never truncated.
        if inode.is_append() && ((flags.access_mode() != 0 && !flags.contains(OpenFlags::APPEND)) || trunc) {
            return Err(Errno::EPERM);
        }
        if acc & MAY_WRITE != 0 {
            p.mnt.want_write()?;
        }
        if flags.contains(OpenFlags::NOATIME) && !owner_or_capable(creds, inode) {
            return Err(Errno::EPERM);
        }
        match inode.file_type() {
            // In-process I/O on sockets and device nodes is not supported.
            FileType::Socket | FileType::CharDevice | FileType::BlockDevice => {
                return Err(Errno::ENXIO);
            }
            _ => {}
        }
        let truncated = trunc && inode.file_type() == FileType::Regular;
        if truncated {
            self.do_truncate(creds, inode, 0, crate::core::superblock::TruncateBy::File)?;
        }
        Ok((inode.file_type() == FileType::Fifo, truncated))
    }
}

impl Task {
    /// `openat2(2)`. EINVAL for unknown flag or resolve bits, `BENEATH` with `IN_ROOT`, a
    /// mode without `O_CREAT`/`O_TMPFILE` or with bits beyond `07777`, `O_PATH` with flags
    /// other than `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`; EAGAIN for `CACHED` with
    /// `O_CREAT`, `O_TRUNC` or `O_TMPFILE`, and whenever the answer is not in the cache
    /// (with the lockless walk switched off, always). The rest is `openat`.
    pub fn openat2(&self, dirfd: DirFd, path: &[u8], how: &OpenHow) -> Result<Fd> {
        let flags = how.flags;
        if OpenFlags::from_bits(flags.bits()).is_none() || ResolveFlags::from_bits(how.resolve.bits()).is_none() {
            return Err(Errno::EINVAL);
        }
        let r = how.resolve;
        if r.contains(ResolveFlags::BENEATH | ResolveFlags::IN_ROOT) {
            return Err(Errno::EINVAL);
        }
        let will_create = flags.intersects(OpenFlags::CREAT | OpenFlags::TMPFILE);
        if (will_create && how.mode & !S_IALLUGO != 0) || (!will_create && how.mode != 0) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(OpenFlags::DIRECTORY | OpenFlags::CREAT) {
            return Err(Errno::EINVAL);
        }
        if flags.contains(OpenFlags::TMPFILE)
            && (flags & (OpenFlags::TMPFILE | OpenFlags::DIRECTORY | OpenFlags::CREAT)
                != OpenFlags::TMPFILE | OpenFlags::DIRECTORY
                || !asks_write(flags))
        {
            return Err(Errno::EINVAL);
        }
        if flags.contains(OpenFlags::PATH)
            && !(OpenFlags::PATH | OpenFlags::DIRECTORY | OpenFlags::NOFOLLOW | OpenFlags::CLOEXEC).contains(flags)
        {
            return Err(Errno::EINVAL);
        }
        let mut lf = LookupFlags::empty();
        for (rf, l) in [
            (ResolveFlags::NO_XDEV, LookupFlags::NO_XDEV),
            (ResolveFlags::NO_MAGICLINKS, LookupFlags::NO_MAGICLINKS),
            (ResolveFlags::NO_SYMLINKS, LookupFlags::NO_SYMLINKS),
            (ResolveFlags::BENEATH, LookupFlags::BENEATH),
            (ResolveFlags::IN_ROOT, LookupFlags::IN_ROOT),
        ] {
            if r.contains(rf) {
                lf |= l;
            }
        }
        if r.contains(ResolveFlags::CACHED) {
            // Don't bother even trying for create/truncate/tmpfile open.
            if flags.intersects(OpenFlags::TRUNC | OpenFlags::CREAT | OpenFlags::TMPFILE) {
                return Err(Errno::EAGAIN);
            }
            lf |= LookupFlags::CACHED;
        }
        self.do_sys_open(dirfd, path, flags, how.mode, lf)
    }
}

/// `build_open_flags`: the flags an open keeps (`O_PATH` keeps only what it uses) and how
/// it walks (`LOOKUP_*`); EINVAL for combinations Linux refuses.
fn build_open_flags(flags: OpenFlags, resolve: LookupFlags) -> Result<(OpenFlags, LookupFlags)> {
    let mut flags = flags;
    // `O_PATH` beats everything else (`build_open_how`), `O_TMPFILE` too; `openat2`
    // refused the other flags before.
    if flags.contains(OpenFlags::PATH) {
        flags &= OpenFlags::DIRECTORY | OpenFlags::NOFOLLOW | OpenFlags::PATH | OpenFlags::CLOEXEC;
    }
    if flags.contains(OpenFlags::CREAT | OpenFlags::DIRECTORY) {
        return Err(Errno::EINVAL);
    }
    if flags.contains(OpenFlags::TMPFILE) && (!flags.contains(OpenFlags::DIRECTORY) || !asks_write(flags)) {
        return Err(Errno::EINVAL);
    }
    let mut lf = resolve | open_follow(flags);
    if flags.contains(OpenFlags::DIRECTORY) {
        lf |= LookupFlags::DIRECTORY;
    }
    if flags.contains(OpenFlags::CREAT) {
        lf |= LookupFlags::MISSING_OK;
    }
    Ok((flags, lf))
}

/// Whether an open's access mode asks for write permission (`ACC_MODE`: write-only,
/// read-write, and 3, which asks for both and then allows neither).
fn asks_write(flags: OpenFlags) -> bool {
    flags.access_mode() != 0
}

/// Whether an open follows a final symlink: unless `O_NOFOLLOW`, or `O_CREAT | O_EXCL`
/// (which creates, or fails on, the link itself).
fn open_follow(flags: OpenFlags) -> LookupFlags {
    if !flags.contains(OpenFlags::NOFOLLOW) && !flags.contains(OpenFlags::CREAT | OpenFlags::EXCL) {
        LookupFlags::FOLLOW
    } else {
        LookupFlags::empty()
    }
}

impl Task {
    /// `fallocate(2)`: reserves (`mode` empty, or `KEEP_SIZE` past the end) or frees
    /// (`PUNCH_HOLE | KEEP_SIZE`) space of a regular file. Checks in `vfs_fallocate`'s
    /// order: the range, the mode, the descriptor, the file flags (EPERM: an append-only
    /// file only reserves, an immutable one nothing), the file type, the largest size; then
    /// the filesystem (memfs as tmpfs: no other mode), and the times and set-id bits as
    /// a write (`file_modified`).
    pub fn fallocate<'f>(&self, fd: impl Into<FileRef<'f>>, mode: FallocFlags, off: i64, len: i64) -> Result<()> {
        // The descriptor first (`fdget` before `vfs_fallocate`'s checks).
        let file = self.file_arc(fd.into())?;
        if file.is_path() {
            return Err(Errno::EBADF);
        }
        if off < 0 || len <= 0 {
            return Err(Errno::EINVAL);
        }
        let ops = FallocFlags::PUNCH_HOLE
            | FallocFlags::COLLAPSE_RANGE
            | FallocFlags::ZERO_RANGE
            | FallocFlags::INSERT_RANGE
            | FallocFlags::UNSHARE_RANGE
            | FallocFlags::WRITE_ZEROES;
        if mode.bits() & !(ops | FallocFlags::KEEP_SIZE).bits() != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        // The modes exclude each other; only allocation, unshare and zeroing take
        // `KEEP_SIZE` freely, a hole must keep the size, and the range shifts must not.
        let op = mode & ops;
        let keep = mode.contains(FallocFlags::KEEP_SIZE);
        let valid = match op {
            o if o.is_empty() || o == FallocFlags::UNSHARE_RANGE || o == FallocFlags::ZERO_RANGE => true,
            o if o == FallocFlags::PUNCH_HOLE => keep,
            o if o == FallocFlags::COLLAPSE_RANGE
                || o == FallocFlags::INSERT_RANGE
                || o == FallocFlags::WRITE_ZEROES =>
            {
                !keep
            }
            _ => false,
        };
        if !valid {
            return Err(Errno::EOPNOTSUPP);
        }
        if !file.flags().writable() {
            return Err(Errno::EBADF);
        }
        let inode = file.inode();
        // An append-only file only reserves space; an immutable one nothing, even through
        // a descriptor opened before.
        if (!(mode - FallocFlags::KEEP_SIZE).is_empty() && inode.is_append()) || inode.is_immutable() {
            return Err(Errno::EPERM);
        }
        match inode.file_type() {
            FileType::Regular => {}
            FileType::Fifo => return Err(Errno::ESPIPE),
            FileType::Directory => return Err(Errno::EISDIR),
            _ => return Err(Errno::ENODEV),
        }
        let end = off.checked_add(len).ok_or(Errno::EFBIG)?;
        if end as u64 > crate::abi::limits::MAX_LFS_FILESIZE {
            return Err(Errno::EFBIG);
        }
        let fs = inode.sb().fs();
        let guard = self.vfs.rcu.pin();
        let creds = self.creds.load(&guard).get();
        let privs_first = fs.privs_before_fallocate();
        if privs_first {
            crate::core::attr::file_remove_privs(creds, inode)?;
        }
        fs.fallocate(inode, mode, off as u64, len as u64)?;
        if !privs_first {
            crate::core::attr::file_remove_privs(creds, inode)?;
        }
        file.update_time();
        // `fsnotify_modify(file)`: by path, as a write's.
        fsnotify::notify_file(self.vfs.fast, &file.mnt, &file.dentry, inode, EventMask::MODIFY, true, &guard);
        Ok(())
    }
}
