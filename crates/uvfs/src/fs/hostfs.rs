//! `hostfs`: a filesystem that passes through to a directory of the host. The role of
//! Linux's disk filesystems' `lookup` + `iget5_locked` (and of FUSE's passthrough).
//!
//! **No string paths.** Every host call is relative to a directory file descriptor with a
//! single name component (`openat`, `fstatat`, `readlinkat`, `mkdirat`, ...), never a
//! joined path, and never follows a host symlink (`AT_SYMLINK_NOFOLLOW`, `O_NOFOLLOW`):
//! symlinks are followed only by uvfs's own walk, inside uvfs's namespace. So a rename on
//! the host (say, a directory swapped for a symlink to `/`) cannot lead uvfs outside the
//! directory it was given: a directory is opened with `O_DIRECTORY | O_NOFOLLOW` and its
//! (device, inode) checked against the `fstatat` that found it, and everything below it is
//! relative to that descriptor. The one exception is `chmod` of a device node, fifo or
//! socket, which has no descriptor to `fchmod`: it goes through `/proc/self/fd/N` of an
//! `O_PATH` descriptor whose identity was checked (what glibc's `fchmodat` does for
//! `AT_SYMLINK_NOFOLLOW`); that magic link names the inode itself, not a path.
//!
//! **Inodes.** Directories keep an `O_RDONLY | O_DIRECTORY` descriptor (every `*at` call
//! below them, `fchmod`, xattrs, `getdents`). Other files keep only where they are named
//! (the parent's descriptor and the name) and open a host descriptor on first I/O
//! (`openat(parent, name, O_NOFOLLOW)`, checked to be the same (device, inode)); so a
//! cold scan that only stats costs one `fstatat` per file and no descriptor. Inodes are
//! found through the superblock's `InodeCache` (`icache`) by the host's
//! (device, inode number), and their attributes are refreshed from the host after every
//! change uvfs makes (so `stat` shows the host's own sizes, link counts and times).
//!
//! **Directories are not complete.** A miss asks the host and leaves a negative dentry,
//! which later lookups find without asking the host. What the cached names say is kept
//! true by [`HostChanges`]: by default (`Revalidate`) a cached name, positive or
//! negative, is checked against the host before use (`d_revalidate`: one `fstatat` of the
//! name in its directory's descriptor, which also refreshes the inode's attributes, and a
//! name that now names another inode or nothing is dropped and looked up again), and a
//! `stat` that ends on a position no name lookup checked (`fstat`, `.`, `..`, the root)
//! refreshes the attributes (`getattr`); a `max_age` lets a check stand for that long, as
//! FUSE's entry and attribute timeouts do. `HostChanges::Never` is the explicit promise
//! that nothing changes the host directory behind uvfs's back: cached names and
//! attributes are then trusted as they are (the cold-scan benchmark's mode).
//!
//! **Bad input.** Host errors pass through with the same errno. A directory removed on
//! the host gives the host's answers on its descriptor (ENOENT for creations, empty
//! listings); a file whose name now names another inode gives ESTALE.

use std::any::Any;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::Timespec;
use crate::abi::stat::{FileType, StatFs};
use crate::core::acl::{Acl, AclInit, AclType};
use crate::core::inode::{Inode, NewInode};
use crate::core::superblock::{CreateArgs, DirEntry, FileSystem, RenameReq, SetAttr, SuperBlock, WriteAt};
use crate::core::xattr::XattrFlags;
use crate::sync::Mutex;

/// Whether the host directory may change behind uvfs's back, and how uvfs notices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostChanges {
    /// Nothing changes the host directory behind uvfs's back while it is mounted: cached
    /// names (positive and negative) and attributes are trusted without asking the host.
    Never,
    /// The host may change: a cached name is checked against the host before use, and
    /// attributes are refreshed before they are reported, unless the last check of that
    /// name or inode is less than `max_age` old (`Duration::ZERO`: every time).
    Revalidate {
        /// How long a check stands.
        max_age: std::time::Duration,
    },
}

/// Options of a hostfs mount.
#[derive(Clone, Copy, Debug)]
pub struct HostFsOptions {
    /// Whether (and how) changes made on the host behind uvfs's back are noticed.
    pub changes: HostChanges,
}

impl Default for HostFsOptions {
    /// Every cached name and attribute checked against the host before use.
    fn default() -> Self {
        HostFsOptions { changes: HostChanges::Revalidate { max_age: std::time::Duration::ZERO } }
    }
}

/// The hostfs filesystem type.
pub struct HostFs {
    /// Immutable: the directory given, opened `O_DIRECTORY`.
    root: Arc<OwnedFd>,
    /// Immutable.
    opts: HostFsOptions,
    /// Immutable: the origin of the timestamps of checks (`Dentry::d_time`,
    /// `HostNode::checked`), in nanoseconds since it (0: never checked).
    epoch: std::time::Instant,
    /// Atomic: hostfs inodes alive (for tests: the bound on memory).
    live: Arc<AtomicUsize>,
}

/// Where a non-directory is named on the host.
struct Loc {
    /// The parent directory's descriptor.
    parent: Arc<OwnedFd>,
    /// The single name component.
    name: Box<[u8]>,
}

/// Per-inode private data.
struct HostNode {
    /// Immutable: the host's (device, inode number), checked whenever a descriptor is
    /// opened by name.
    key: (u64, u64),
    /// Immutable: a directory's descriptor (`None` for anything else).
    dir: Option<Arc<OwnedFd>>,
    /// Where a non-directory is named (`None` for directories and unnamed `O_TMPFILE`
    /// files). Leaf lock; changed by rename and link, which the VFS serializes with the
    /// directory locks.
    loc: Mutex<Option<Loc>>,
    /// A regular file's I/O descriptor, opened on first use (set once).
    io: OnceLock<OwnedFd>,
    /// Immutable: the superblock whose inode cache to tell when this inode is dropped
    /// (weak: the superblock owns the cache, the cache does not own inodes).
    sb: Weak<SuperBlock>,
    /// Immutable: the filesystem's count of live inodes.
    live: Arc<AtomicUsize>,
    /// Atomic: when the attributes were last read from the host (see `HostFs::epoch`);
    /// kept only under `HostChanges::Revalidate` with a `max_age`.
    checked: AtomicU64,
}

impl HostNode {
    fn new(
        sb: &Arc<SuperBlock>,
        live: &Arc<AtomicUsize>,
        key: (u64, u64),
        dir: Option<Arc<OwnedFd>>,
        loc: Option<Loc>,
    ) -> HostNode {
        live.fetch_add(1, Ordering::Relaxed);
        HostNode {
            key,
            dir,
            loc: Mutex::new(loc),
            io: OnceLock::new(),
            sb: Arc::downgrade(sb),
            live: live.clone(),
            checked: AtomicU64::new(0),
        }
    }
}

impl Drop for HostNode {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
        // Linux's `remove_inode_hash` on the final iput; only queues (see `icache`).
        if let Some(sb) = self.sb.upgrade() {
            sb.icache().reap(self.key);
        }
    }
}

fn host(e: rustix::io::Errno) -> Errno {
    Errno::from_raw(e.raw_os_error())
}

/// Rejects what is not a single name component.
fn component(name: &[u8]) -> Result<&[u8]> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    Ok(name)
}

/// A host timestamp (`st_*time_nsec` is unsigned in rustix's raw-syscall backend, signed
/// in its libc one, which Miri builds use).
fn ts(sec: i64, nsec: impl TryInto<u32>) -> Timespec {
    Timespec { sec, nsec: nsec.try_into().unwrap_or(0) }
}

fn node(inode: &Inode) -> &HostNode {
    inode.private::<HostNode>().expect("hostfs inode without hostfs data")
}

fn key_of(st: &rustix::fs::Stat) -> (u64, u64) {
    (st.st_dev, st.st_ino)
}

/// Copies host attributes into the inode (only when they differ: a write of the same
/// values would still take the inode lock).
fn apply_stat(inode: &Inode, st: &rustix::fs::Stat) {
    let a = inode.attrs();
    let (at, mt, ct) =
        (ts(st.st_atime, st.st_atime_nsec), ts(st.st_mtime, st.st_mtime_nsec), ts(st.st_ctime, st.st_ctime_nsec));
    if a.mode == st.st_mode
        && a.uid == st.st_uid
        && a.gid == st.st_gid
        && a.nlink == st.st_nlink as u32
        && a.size == st.st_size as u64
        && a.blocks == st.st_blocks as u64
        && a.atime == at
        && a.mtime == mt
        && a.ctime == ct
    {
        return;
    }
    inode.update(|w| {
        w.set_mode(st.st_mode);
        w.set_uid(st.st_uid);
        w.set_gid(st.st_gid);
        w.set_nlink(st.st_nlink as u32);
        w.set_size(st.st_size as u64);
        w.set_blocks(st.st_blocks as u64);
        w.set_atime(at);
        w.set_mtime(mt);
        w.set_ctime(ct);
    });
}

impl HostFs {
    /// A hostfs over the host directory `dir` (opened once, here; everything after is
    /// relative to that descriptor).
    pub fn new(dir: impl AsRef<Path>) -> Result<HostFs> {
        HostFs::with_options(dir, HostFsOptions::default())
    }

    /// As [`HostFs::new`], with options.
    pub fn with_options(dir: impl AsRef<Path>, opts: HostFsOptions) -> Result<HostFs> {
        let fd = rustix::fs::open(dir.as_ref(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(host)?;
        Ok(HostFs { root: Arc::new(fd), opts, epoch: std::time::Instant::now(), live: Arc::default() })
    }

    /// A handle on the number of hostfs inodes alive (kept by tests after the filesystem
    /// is mounted).
    pub fn live_inodes(&self) -> Arc<AtomicUsize> {
        self.live.clone()
    }

    /// `max_age` of `HostChanges::Revalidate` in nanoseconds (`None` under `Never`).
    fn max_age(&self) -> Option<u64> {
        match self.opts.changes {
            HostChanges::Never => None,
            HostChanges::Revalidate { max_age } => Some(max_age.as_nanos().min(u64::MAX as u128) as u64),
        }
    }

    /// Now, as a check timestamp (never 0).
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64 | 1
    }

    /// Whether a check made at `at` still stands (a `max_age` of 0: never).
    fn recent(&self, at: u64, max_age: u64) -> bool {
        max_age != 0 && at != 0 && self.now().saturating_sub(at) < max_age
    }

    /// Attributes just read from the host for `inode`. Under `Revalidate`, a change of
    /// ctime also drops the cached ACLs (they may have changed with it), and the check is
    /// timestamped for `max_age`.
    fn revalidated(&self, inode: &Inode, st: &rustix::fs::Stat) {
        if let Some(max_age) = self.max_age() {
            if inode.attrs().ctime != ts(st.st_ctime, st.st_ctime_nsec) {
                inode.forget_cached_acls();
            }
            if max_age != 0 {
                node(inode).checked.store(self.now(), Ordering::Relaxed);
            }
        }
        apply_stat(inode, st);
    }

    fn dir_fd(inode: &Inode) -> Result<&Arc<OwnedFd>> {
        node(inode).dir.as_ref().ok_or(Errno::ENOTDIR)
    }

    /// Makes (or finds in the inode cache) the inode for `st`, found as `name` in
    /// `parent`. `io` is a descriptor of it already open (create).
    fn iget(
        &self,
        sb: &Arc<SuperBlock>,
        parent: &Arc<OwnedFd>,
        name: &[u8],
        st: &rustix::fs::Stat,
        io: Option<OwnedFd>,
    ) -> Result<Arc<Inode>> {
        let key = key_of(st);
        let ftype = FileType::from_mode(st.st_mode).ok_or(Errno::EIO)?;
        let mut io = io;
        let inode = sb.icache().iget(
            key,
            &sb.rcu(),
            |i| i.file_type() == ftype,
            || {
                let dir = if ftype == FileType::Directory {
                    let fd = rustix::fs::openat(
                        parent,
                        name,
                        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(host)?;
                    // The name may have been swapped since the fstatat: only the same
                    // directory will do.
                    if key_of(&rustix::fs::fstat(&fd).map_err(host)?) != key {
                        return Err(Errno::ESTALE);
                    }
                    Some(Arc::new(fd))
                } else {
                    None
                };
                let loc = (ftype != FileType::Directory).then(|| Loc { parent: parent.clone(), name: name.into() });
                let n = HostNode::new(sb, &self.live, key, dir, loc);
                if let Some(fd) = io.take() {
                    let _ = n.io.set(fd);
                }
                Ok(Inode::new(sb, Self::new_inode(st), Box::new(n)))
            },
        )?;
        self.revalidated(&inode, st);
        if ftype != FileType::Directory {
            // The freshest name of a non-directory (it may have several, or have been
            // renamed on the host).
            let n = node(&inode);
            let mut loc = n.loc.lock();
            if loc.as_ref().is_none_or(|l| !Arc::ptr_eq(&l.parent, parent) || *l.name != *name) {
                *loc = Some(Loc { parent: parent.clone(), name: name.into() });
            }
            drop(loc);
            if let Some(fd) = io
                && n.io.get().is_none()
            {
                let _ = n.io.set(fd);
            }
        }
        Ok(inode)
    }

    fn new_inode(st: &rustix::fs::Stat) -> NewInode {
        NewInode {
            ino: st.st_ino,
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
            nlink: st.st_nlink as u32,
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            rdev: st.st_rdev,
            times: [
                ts(st.st_atime, st.st_atime_nsec),
                ts(st.st_mtime, st.st_mtime_nsec),
                ts(st.st_ctime, st.st_ctime_nsec),
            ],
            acl: AclInit::NotCached,
            default_acl: AclInit::NotCached,
            link: None,
        }
    }

    /// An `O_PATH` descriptor of a non-directory, checked to be this inode.
    fn path_fd(inode: &Inode) -> Result<OwnedFd> {
        let n = node(inode);
        let loc = n.loc.lock();
        let l = loc.as_ref().ok_or(Errno::ESTALE)?;
        let fd =
            rustix::fs::openat(&*l.parent, &*l.name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
                .map_err(host)?;
        drop(loc);
        if key_of(&rustix::fs::fstat(&fd).map_err(host)?) != n.key {
            return Err(Errno::ESTALE);
        }
        Ok(fd)
    }

    /// The I/O descriptor of a regular file, opened on first use.
    fn io(inode: &Inode) -> Result<BorrowedFd<'_>> {
        let n = node(inode);
        if let Some(fd) = n.io.get() {
            return Ok(fd.as_fd());
        }
        if inode.file_type() != FileType::Regular {
            return Err(Errno::EINVAL);
        }
        let loc = n.loc.lock();
        let l = loc.as_ref().ok_or(Errno::ESTALE)?;
        let base = OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        // Read-write when the host allows it; a read-only host file still reads.
        let fd = match rustix::fs::openat(&*l.parent, &*l.name, base | OFlags::RDWR, Mode::empty()) {
            Err(
                rustix::io::Errno::ACCESS
                | rustix::io::Errno::ROFS
                | rustix::io::Errno::TXTBSY
                | rustix::io::Errno::PERM,
            ) => rustix::fs::openat(&*l.parent, &*l.name, base | OFlags::RDONLY, Mode::empty()),
            r => r,
        }
        .map_err(host)?;
        drop(loc);
        if key_of(&rustix::fs::fstat(&fd).map_err(host)?) != n.key {
            return Err(Errno::ESTALE);
        }
        let _ = n.io.set(fd);
        Ok(n.io.get().expect("just set").as_fd())
    }

    /// A descriptor to read attributes and xattrs through: the directory's, the open I/O
    /// one, or (other types) an `O_PATH` one.
    fn with_fd<R>(inode: &Inode, f: impl FnOnce(BorrowedFd<'_>) -> Result<R>) -> Result<R> {
        let n = node(inode);
        if let Some(d) = &n.dir {
            return f(d.as_fd());
        }
        if let Some(io) = n.io.get() {
            return f(io.as_fd());
        }
        if inode.file_type() == FileType::Regular {
            return f(Self::io(inode)?);
        }
        let fd = Self::path_fd(inode)?;
        f(fd.as_fd())
    }

    /// Re-reads the inode's attributes from the host.
    fn refresh(inode: &Inode) -> Result<()> {
        let st = Self::with_fd(inode, |fd| rustix::fs::statat(fd, "", AtFlags::EMPTY_PATH).map_err(host))?;
        apply_stat(inode, &st);
        Ok(())
    }

    /// Where to send xattr calls: the descriptor of a directory or regular file; for
    /// other types (an `O_PATH` descriptor, which the xattr calls refuse) the magic link of
    /// a checked `O_PATH` descriptor, as for chmod (see the module docs).
    fn xattr_target(inode: &Inode) -> Result<XTarget<'_>> {
        let n = node(inode);
        match &n.dir {
            Some(d) => Ok(XTarget::Fd(d.as_fd())),
            None if inode.file_type() == FileType::Regular => Ok(XTarget::Fd(Self::io(inode)?)),
            None => {
                let fd = Self::path_fd(inode)?;
                let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
                Ok(XTarget::Link(fd, link))
            }
        }
    }

    /// After an unlink/rmdir/rename-over took a name of `inode`: new link count from the
    /// host if it can still be reached, and out of the inode cache once it has no name
    /// (the host may reuse its number).
    fn lost_name(inode: &Inode) {
        let n = node(inode);
        let refreshed = match (&n.dir, n.io.get()) {
            (None, Some(io)) => rustix::fs::fstat(io).map(|st| apply_stat(inode, &st)).is_ok(),
            _ => false,
        };
        if !refreshed {
            let now = Timespec::now();
            let drop_by = if inode.is_dir() { inode.nlink() } else { 1 };
            inode.update(|w| {
                w.set_nlink(w.get().nlink.saturating_sub(drop_by));
                w.set_ctime(now);
            });
        }
        if inode.nlink() == 0 {
            inode.sb().icache().remove(n.key, inode, &inode.sb().rcu());
            *n.loc.lock() = None;
        }
    }
}

impl FileSystem for HostFs {
    fn fs_type(&self) -> &'static str {
        "hostfs"
    }

    fn dcache_complete(&self) -> bool {
        false
    }

    fn revalidates(&self) -> bool {
        self.max_age().is_some()
    }

    fn d_revalidate(&self, dir: &Inode, name: &[u8], dentry: &crate::core::dentry::Dentry) -> Result<bool> {
        let Some(max_age) = self.max_age() else { return Ok(true) };
        if self.recent(dentry.d_time().load(Ordering::Relaxed), max_age) {
            return Ok(true);
        }
        let dfd = Self::dir_fd(dir)?;
        let valid = match rustix::fs::statat(&**dfd, name, AtFlags::SYMLINK_NOFOLLOW) {
            // Also the answer in a directory removed on the host.
            Err(rustix::io::Errno::NOENT) => dentry.inode().is_none(),
            Err(e) => return Err(host(e)),
            Ok(st) => match dentry.inode() {
                None => false,
                Some(inode) => {
                    let n = node(inode);
                    let same = key_of(&st) == n.key && FileType::from_mode(st.st_mode) == Some(inode.file_type());
                    // (Its `loc` is not touched: a name that moved on the host fails this
                    // check under its old name, and the lookup under the new one updates
                    // it; a lock here would cost every cached walk.)
                    if same {
                        self.revalidated(inode, &st);
                    }
                    same
                }
            },
        };
        if valid && max_age != 0 {
            dentry.d_time().store(self.now(), Ordering::Relaxed);
        }
        Ok(valid)
    }

    fn open(&self, inode: &Inode) -> Result<()> {
        // The host file is opened with the first uvfs open of it (not at lookup: a cold
        // scan that only stats holds no descriptor), and stays open with the inode.
        if inode.file_type() == FileType::Regular {
            Self::io(inode)?;
        }
        Ok(())
    }

    fn d_init(&self, dentry: &crate::core::dentry::Dentry) {
        // What a lookup or create just found counts as a check.
        if self.max_age().is_some_and(|a| a != 0) {
            dentry.d_time().store(self.now(), Ordering::Relaxed);
        }
    }

    fn getattr(&self, inode: &Inode) -> Result<()> {
        let Some(max_age) = self.max_age() else { return Ok(()) };
        let n = node(inode);
        if self.recent(n.checked.load(Ordering::Relaxed), max_age) {
            return Ok(());
        }
        // Without opening anything: the descriptor it has, else its name (checked to be
        // it). An inode the host cannot show any more keeps what it had.
        let st = match (&n.dir, n.io.get()) {
            (Some(d), _) => rustix::fs::fstat(&**d).ok(),
            (None, Some(io)) => rustix::fs::fstat(io).ok(),
            (None, None) => {
                let loc = n.loc.lock();
                loc.as_ref()
                    .and_then(|l| rustix::fs::statat(&*l.parent, &*l.name, AtFlags::SYMLINK_NOFOLLOW).ok())
                    .filter(|st| key_of(st) == n.key)
            }
        };
        if let Some(st) = st {
            self.revalidated(inode, &st);
        }
        Ok(())
    }

    fn root_inode(&self, sb: &Arc<SuperBlock>) -> Result<Arc<Inode>> {
        let st = rustix::fs::fstat(&*self.root).map_err(host)?;
        let key = key_of(&st);
        let root = self.root.clone();
        sb.icache().iget(
            key,
            &sb.rcu(),
            |_| true,
            || {
                let n = HostNode::new(sb, &self.live, key, Some(root), None);
                Ok(Inode::new(sb, Self::new_inode(&st), Box::new(n)))
            },
        )
    }

    fn statfs(&self, _sb: &SuperBlock) -> StatFs {
        match rustix::fs::fstatfs(&*self.root) {
            Ok(s) => StatFs {
                fs_type: s.f_type as u64,
                bsize: s.f_bsize as u64,
                blocks: s.f_blocks,
                bfree: s.f_bfree,
                bavail: s.f_bavail,
                files: s.f_files,
                ffree: s.f_ffree,
                namelen: s.f_namelen as u64,
            },
            Err(_) => {
                StatFs { fs_type: 0, bsize: 4096, blocks: 0, bfree: 0, bavail: 0, files: 0, ffree: 0, namelen: 255 }
            }
        }
    }

    fn lookup(&self, sb: &Arc<SuperBlock>, dir: &Inode, name: &[u8]) -> Result<Option<Arc<Inode>>> {
        let name = component(name)?;
        let dfd = Self::dir_fd(dir)?;
        // Twice at most: a directory swapped between the fstatat and its open is looked up
        // again; a second swap is ESTALE.
        for attempt in 0..2 {
            let st = match rustix::fs::statat(&**dfd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => return Ok(None),
                Err(e) => return Err(host(e)),
            };
            match self.iget(sb, dfd, name, &st, None) {
                Err(Errno::ESTALE | Errno::ELOOP | Errno::ENOTDIR | Errno::ENOENT) if attempt == 0 => continue,
                r => return r.map(Some),
            }
        }
        Err(Errno::ESTALE)
    }

    fn create(&self, sb: &Arc<SuperBlock>, dir: &Inode, name: &[u8], args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        let name = component(name)?;
        let dfd = Self::dir_fd(dir)?;
        let ftype = FileType::from_mode(args.mode).ok_or(Errno::EINVAL)?;
        let perm = Mode::from_raw_mode(args.mode & 0o7777);
        let mut io = None;
        match ftype {
            FileType::Regular => {
                let fd = rustix::fs::openat(
                    &**dfd,
                    name,
                    OFlags::CREATE | OFlags::EXCL | OFlags::RDWR | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    perm,
                )
                .map_err(host)?;
                io = Some(fd);
            }
            FileType::Directory => rustix::fs::mkdirat(&**dfd, name, perm).map_err(host)?,
            FileType::Symlink => rustix::fs::symlinkat(args.target.unwrap_or_default(), &**dfd, name).map_err(host)?,
            _ => rustix::fs::mknodat(&**dfd, name, rustix::fs::FileType::from_raw_mode(args.mode), perm, args.rdev)
                .map_err(host)?,
        }
        let st = rustix::fs::statat(&**dfd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(host)?;
        let inode = self.iget(sb, dfd, name, &st, io)?;
        // Owner, ACLs, then the mode the VFS decided (after chown, which may clear
        // set-id bits, and after the ACLs, whose mask follows the group bits).
        Self::with_fd(&inode, |fd| {
            rustix::fs::chownat(
                fd,
                "",
                Some(rustix::fs::Uid::from_raw(args.uid)),
                Some(rustix::fs::Gid::from_raw(args.gid)),
                AtFlags::EMPTY_PATH,
            )
            .map_err(host)
        })?;
        if ftype != FileType::Symlink {
            for (ty, acl) in [(AclType::Access, &args.acl), (AclType::Default, &args.default_acl)] {
                if let Some(acl) = acl {
                    Self::xattr_target(&inode)?.set(ty.xattr_name(), &acl.to_xattr_vec(), 0)?;
                }
            }
            self.chmod(&inode, args.mode & 0o7777)?;
        }
        Self::refresh(&inode)?;
        Self::refresh(dir)?;
        Ok(inode)
    }

    fn tmpfile(&self, sb: &Arc<SuperBlock>, dir: &Inode, args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        let dfd = Self::dir_fd(dir)?;
        let fd = rustix::fs::openat(
            &**dfd,
            ".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(args.mode & 0o7777),
        )
        .map_err(host)?;
        let st = rustix::fs::fstat(&fd).map_err(host)?;
        rustix::fs::fchown(&fd, Some(rustix::fs::Uid::from_raw(args.uid)), Some(rustix::fs::Gid::from_raw(args.gid)))
            .map_err(host)?;
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(args.mode & 0o7777)).map_err(host)?;
        let key = key_of(&st);
        let n = HostNode::new(sb, &self.live, key, None, None);
        let _ = n.io.set(fd);
        // Not in the inode cache: it has no name to be found by until linked.
        let inode = Inode::new(sb, Self::new_inode(&st), Box::new(n));
        Self::refresh(&inode)?;
        Ok(inode)
    }

    fn link(&self, dir: &Inode, name: &[u8], inode: &Arc<Inode>) -> Result<()> {
        let name = component(name)?;
        let dfd = Self::dir_fd(dir)?;
        let n = node(inode);
        // By descriptor (AT_EMPTY_PATH), so the file linked is this inode even if its old
        // name changed on the host, and an unnamed O_TMPFILE file can be linked.
        let fd;
        let src = match n.io.get() {
            Some(io) => io.as_fd(),
            None => {
                fd = Self::path_fd(inode)?;
                fd.as_fd()
            }
        };
        rustix::fs::linkat(src, "", &**dfd, name, AtFlags::EMPTY_PATH).map_err(host)?;
        {
            let mut loc = n.loc.lock();
            if loc.is_none() {
                *loc = Some(Loc { parent: dfd.clone(), name: name.into() });
            }
        }
        let sb = inode.sb();
        if sb.icache().iget(n.key, &sb.rcu(), |_| true, || Ok(inode.clone())).is_err() {
            return Err(Errno::EIO);
        }
        Self::refresh(inode)?;
        Self::refresh(dir)
    }

    fn unlink(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<()> {
        let name = component(name)?;
        let dfd = Self::dir_fd(dir)?;
        // An open file must stay readable after its last name goes: open its descriptor
        // while it still has a name (best effort: a file the host will not open is
        // unlinked anyway).
        if inode.file_type() == FileType::Regular {
            let _ = Self::io(inode);
        }
        rustix::fs::unlinkat(&**dfd, name, AtFlags::empty()).map_err(host)?;
        Self::lost_name(inode);
        Self::refresh(dir)
    }

    fn rmdir(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<()> {
        let name = component(name)?;
        let dfd = Self::dir_fd(dir)?;
        rustix::fs::unlinkat(&**dfd, name, AtFlags::REMOVEDIR).map_err(host)?;
        Self::lost_name(inode);
        Self::refresh(dir)
    }

    fn rename(&self, r: &RenameReq<'_>) -> Result<()> {
        let (old_name, new_name) = (component(r.old_name)?, component(r.new_name)?);
        let (ofd, nfd) = (Self::dir_fd(r.old_dir)?, Self::dir_fd(r.new_dir)?);
        let exchange = r.flags.contains(crate::abi::flags::RenameFlags::EXCHANGE);
        if let Some(t) = r.target
            && !exchange
            && t.file_type() == FileType::Regular
        {
            let _ = Self::io(t);
        }
        rustix::fs::renameat_with(
            &**ofd,
            old_name,
            &**nfd,
            new_name,
            rustix::fs::RenameFlags::from_bits_retain(r.flags.bits()),
        )
        .map_err(host)?;
        if node(r.inode).dir.is_none() {
            *node(r.inode).loc.lock() = Some(Loc { parent: nfd.clone(), name: new_name.into() });
        }
        if let Some(t) = r.target {
            if exchange {
                if node(t).dir.is_none() {
                    *node(t).loc.lock() = Some(Loc { parent: ofd.clone(), name: old_name.into() });
                }
                let _ = Self::refresh(t);
            } else {
                Self::lost_name(t);
            }
        }
        let _ = Self::refresh(r.inode);
        Self::refresh(r.old_dir)?;
        Self::refresh(r.new_dir)
    }

    fn readlink(&self, inode: &Inode) -> Result<Vec<u8>> {
        if inode.file_type() != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        let fd = Self::path_fd(inode)?;
        let body = rustix::fs::readlinkat(&fd, "", Vec::new()).map_err(host)?;
        Ok(body.into_bytes())
    }

    fn setattr(&self, inode: &Inode, attr: &SetAttr) -> Result<()> {
        if attr.uid.is_some() || attr.gid.is_some() {
            Self::with_fd(inode, |fd| {
                rustix::fs::chownat(
                    fd,
                    "",
                    attr.uid.map(rustix::fs::Uid::from_raw),
                    attr.gid.map(rustix::fs::Gid::from_raw),
                    AtFlags::EMPTY_PATH,
                )
                .map_err(host)
            })?;
        }
        if let Some(mode) = attr.mode
            && inode.file_type() != FileType::Symlink
        {
            self.chmod(inode, mode & 0o7777)?;
        }
        if attr.atime.is_some() || attr.mtime.is_some() {
            let t = |t: Option<Timespec>| match t {
                Some(t) => rustix::fs::Timespec { tv_sec: t.sec, tv_nsec: t.nsec as _ },
                None => rustix::fs::Timespec { tv_sec: 0, tv_nsec: rustix::fs::UTIME_OMIT },
            };
            let times = rustix::fs::Timestamps { last_access: t(attr.atime), last_modification: t(attr.mtime) };
            let n = node(inode);
            match (&n.dir, inode.file_type()) {
                (Some(d), _) => rustix::fs::futimens(&**d, &times).map_err(host)?,
                (None, FileType::Regular) => rustix::fs::futimens(Self::io(inode)?, &times).map_err(host)?,
                _ => {
                    let loc = n.loc.lock();
                    let l = loc.as_ref().ok_or(Errno::ESTALE)?;
                    rustix::fs::utimensat(&*l.parent, &*l.name, &times, AtFlags::SYMLINK_NOFOLLOW).map_err(host)?;
                }
            }
        }
        // No refresh: the VFS has applied the same values, and may hold the inode lock
        // (chmod does), which the refresh would take again.
        Ok(())
    }

    fn truncate(&self, inode: &Inode, size: u64) -> Result<()> {
        rustix::fs::ftruncate(Self::io(inode)?, size).map_err(host)?;
        Self::refresh(inode)
    }

    fn read(&self, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        let fd = Self::io(inode)?;
        let mut done = 0;
        while done < buf.len() {
            match rustix::io::pread(fd, &mut buf[done..], off + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) if done == 0 => return Err(host(e)),
                Err(_) => break,
            }
        }
        Ok(done)
    }

    fn write(&self, inode: &Inode, at: WriteAt, buf: &[u8]) -> Result<(u64, usize)> {
        let fd = Self::io(inode)?;
        let (off, len) = at.resolve(inode.size(), buf.len())?;
        let buf = &buf[..len];
        if at.is_append() {
            // The host places the data at its end of file atomically (`RWF_APPEND`),
            // whoever else appends, in uvfs or on the host; one call, as the host's own
            // O_APPEND write would be.
            let n = loop {
                match rustix::io::pwritev2(fd, &[std::io::IoSlice::new(buf)], 0, rustix::io::ReadWriteFlags::APPEND) {
                    Err(rustix::io::Errno::INTR) => continue,
                    r => break r.map_err(host)?,
                }
            };
            Self::refresh(inode)?;
            return Ok((inode.size().saturating_sub(n as u64), n));
        }
        let mut done = 0;
        while done < buf.len() {
            match rustix::io::pwrite(fd, &buf[done..], off + done as u64) {
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) if done == 0 => return Err(host(e)),
                Err(_) => break,
            }
        }
        Self::refresh(inode)?;
        Ok((off, done))
    }

    fn readdir(&self, dir: &Inode, cursor: u64, out: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        let dfd = Self::dir_fd(dir)?;
        // A fresh open description per call (its own position); the cursor is the host's
        // `d_off` cookie of the last entry given.
        let mut d = rustix::fs::Dir::read_from(&**dfd).map_err(host)?;
        if cursor != 0 {
            d.seek(cursor as i64).map_err(host)?;
        }
        while let Some(e) = d.read() {
            let e = e.map_err(host)?;
            let dtype = match e.file_type() {
                rustix::fs::FileType::RegularFile => FileType::Regular,
                rustix::fs::FileType::Directory => FileType::Directory,
                rustix::fs::FileType::Symlink => FileType::Symlink,
                rustix::fs::FileType::Fifo => FileType::Fifo,
                rustix::fs::FileType::Socket => FileType::Socket,
                rustix::fs::FileType::CharacterDevice => FileType::CharDevice,
                rustix::fs::FileType::BlockDevice => FileType::BlockDevice,
                rustix::fs::FileType::Unknown => FileType::Regular,
            }
            .dirent_type();
            let entry =
                DirEntry { ino: e.ino(), next: e.offset() as u64, dtype, name: e.file_name().to_bytes().to_vec() };
            if !out(entry) {
                break;
            }
        }
        Ok(())
    }

    fn fsync(&self, inode: &Inode) -> Result<()> {
        Self::with_fd(inode, |fd| rustix::fs::fsync(fd).map_err(host))
    }

    fn posix_acl(&self) -> bool {
        true
    }

    fn get_acl(&self, inode: &Inode, ty: AclType) -> Result<Option<Arc<Acl>>> {
        let mut buf = vec![0u8; XATTR_SIZE_MAX];
        match Self::xattr_target(inode)?.get(ty.xattr_name(), &mut buf) {
            Ok(n) => Ok(Acl::from_xattr(&buf[..n])?.map(Arc::new)),
            Err(Errno::ENODATA | Errno::EOPNOTSUPP) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn set_acl(&self, inode: &Inode, ty: AclType, acl: Option<&Arc<Acl>>) -> Result<()> {
        let t = Self::xattr_target(inode)?;
        match acl {
            Some(a) => t.set(ty.xattr_name(), &a.to_xattr_vec(), 0),
            None => match t.remove(ty.xattr_name()) {
                Ok(()) | Err(Errno::ENODATA) => Ok(()),
                Err(e) => Err(e),
            },
        }
    }

    fn getxattr(&self, inode: &Inode, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        let t = Self::xattr_target(inode)?;
        if buf.is_empty() {
            // The size: read into a scratch buffer of the largest size (rustix passes an
            // empty buffer as is, and the host's answer to size 0 is not given back).
            let mut scratch = vec![0u8; XATTR_SIZE_MAX];
            return t.get(name, &mut scratch);
        }
        t.get(name, buf)
    }

    fn setxattr(&self, inode: &Inode, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        // Called with the inode lock held: no refresh (only the host's ctime moved).
        Self::xattr_target(inode)?.set(name, value, flags.bits())
    }

    fn removexattr(&self, inode: &Inode, name: &[u8]) -> Result<()> {
        // As setxattr: no refresh under the inode lock.
        Self::xattr_target(inode)?.remove(name)
    }

    fn listxattr(&self, inode: &Inode, out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let mut buf = vec![0u8; XATTR_LIST_MAX];
        let n = Self::xattr_target(inode)?.list(&mut buf)?;
        for name in buf[..n].split(|&b| b == 0).filter(|s| !s.is_empty()) {
            // The VFS lists the ACLs from their slots.
            if AclType::from_xattr_name(name).is_some() {
                continue;
            }
            out(name)?;
        }
        Ok(())
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl HostFs {
    /// chmod on the host: by descriptor for directories and regular files; device nodes,
    /// fifos and sockets (no descriptor to `fchmod`) through the magic link of a checked
    /// `O_PATH` descriptor (see the module docs).
    fn chmod(&self, inode: &Inode, mode: u32) -> Result<()> {
        let m = Mode::from_raw_mode(mode);
        let n = node(inode);
        match (&n.dir, inode.file_type()) {
            (Some(d), _) => rustix::fs::fchmod(&**d, m).map_err(host),
            (None, FileType::Regular) => rustix::fs::fchmod(Self::io(inode)?, m).map_err(host),
            (None, FileType::Symlink) => Ok(()),
            _ => {
                let fd = Self::path_fd(inode)?;
                let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
                rustix::fs::chmodat(rustix::fs::CWD, link.as_str(), m, AtFlags::empty()).map_err(host)
            }
        }
    }
}

/// Largest xattr value (`XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: usize = 65536;
/// Largest xattr name list (`XATTR_LIST_MAX`).
const XATTR_LIST_MAX: usize = 65536;

/// Where an xattr call goes (see [`HostFs::xattr_target`]).
enum XTarget<'a> {
    /// A descriptor the xattr calls accept.
    Fd(BorrowedFd<'a>),
    /// The magic link of the checked `O_PATH` descriptor it holds open (only held: the
    /// link names it while it is open).
    Link(#[allow(dead_code)] OwnedFd, String),
}

impl XTarget<'_> {
    fn get(&self, name: &[u8], buf: &mut [u8]) -> Result<usize> {
        match self {
            XTarget::Fd(fd) => rustix::fs::fgetxattr(fd, name, buf),
            XTarget::Link(_, p) => rustix::fs::getxattr(p.as_str(), name, buf),
        }
        .map_err(host)
    }

    fn set(&self, name: &[u8], value: &[u8], flags: u32) -> Result<()> {
        let f = rustix::fs::XattrFlags::from_bits_retain(flags as _);
        match self {
            XTarget::Fd(fd) => rustix::fs::fsetxattr(fd, name, value, f),
            XTarget::Link(_, p) => rustix::fs::setxattr(p.as_str(), name, value, f),
        }
        .map_err(host)
    }

    fn remove(&self, name: &[u8]) -> Result<()> {
        match self {
            XTarget::Fd(fd) => rustix::fs::fremovexattr(fd, name),
            XTarget::Link(_, p) => rustix::fs::removexattr(p.as_str(), name),
        }
        .map_err(host)
    }

    fn list(&self, buf: &mut [u8]) -> Result<usize> {
        match self {
            XTarget::Fd(fd) => rustix::fs::flistxattr(fd, buf),
            XTarget::Link(_, p) => rustix::fs::listxattr(p.as_str(), buf),
        }
        .map_err(host)
    }
}
