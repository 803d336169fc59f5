//! `SuperBlock` (one filesystem instance) and `FileSystem` (its operations). Mirrors
//! Linux's `struct super_block` with its `super_operations` and `inode_operations`, but:
//! one trait for all of them (and the file operations), called only after the VFS made
//! every check and took every lock.
//!
//! The VFS does every check (names, permissions, types, emptiness, read-only) before it
//! calls an operation, and holds the directory locks the operation needs, so a filesystem
//! implements only what its storage must do. A filesystem whose directories are complete
//! in the dentry cache ([`FileSystem::dcache_complete`], memfs) is never asked to look up
//! or list: a cache miss is ENOENT at once.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::abi::errno::{Errno, Result};
use crate::abi::flags::{FallocFlags, FsFlags, RenameFlags, Timespec};
use crate::abi::stat::{StatFs, StatxAttrs};
use crate::core::acl::{Acl, AclType};
use crate::core::inode::Inode;
use crate::core::xattr::XattrFlags;
use crate::sync::rcu::{Rcu, RcuWeak};

/// What to create.
#[derive(Clone, Debug, Default)]
pub struct CreateArgs<'a> {
    /// Type and permission bits (umask or inherited ACL, and setgid rules, already
    /// applied).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number for device nodes.
    pub rdev: u64,
    /// Symlink target, for symlinks.
    pub target: Option<&'a [u8]>,
    /// The access ACL inherited from the directory's default ACL, to store with the node.
    pub acl: Option<Arc<Acl>>,
    /// The default ACL a new directory inherits.
    pub default_acl: Option<Arc<Acl>>,
}

/// Attribute changes the VFS has decided on and applied to the inode; the filesystem
/// persists them (memfs: nothing to do).
#[derive(Clone, Copy, Debug, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New access time.
    pub atime: Option<Timespec>,
    /// New modification time.
    pub mtime: Option<Timespec>,
}

/// Which call sets a file's size, for the times it moves: Linux's `truncate(2)` passes
/// only `ATTR_SIZE`, and the filesystem moves the modification and change times when the
/// size changes (tmpfs also when the file has data: `shmem_setattr` then runs
/// `shmem_truncate_range`, which stamps them); `ftruncate(2)` and `open(O_TRUNC)` add
/// `ATTR_MTIME | ATTR_CTIME`, and the times always move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TruncateBy {
    /// `truncate(2)`, or a FUSE SETATTR of the size alone (the kernel's `truncate`).
    Path,
    /// `ftruncate(2)` or `open(O_TRUNC)`.
    File,
}

/// A directory entry as a filesystem lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode number.
    pub ino: u64,
    /// Cursor of the entry after this one (`d_off`).
    pub next: u64,
    /// `DT_*` type.
    pub dtype: u8,
    /// Name bytes.
    pub name: Vec<u8>,
}

/// The operations of a filesystem type. Directory-changing calls are made with the
/// directory (or, for rename, both directories) locked by the VFS.
pub trait FileSystem: Send + Sync + 'static {
    /// Name of the type, as in /proc/filesystems (`"tmpfs"`).
    fn fs_type(&self) -> &'static str;
    /// Whether every directory's entries are all in the dentry cache, so a cache miss is
    /// ENOENT and listing walks the cache.
    fn dcache_complete(&self) -> bool;
    /// Whether the filesystem can only be read (Linux's `SB_RDONLY` forced by the
    /// filesystem, as iso9660's): every mount of it is read-only, and cannot be made
    /// writable (EROFS).
    fn read_only(&self) -> bool {
        false
    }
    /// Makes the root inode.
    fn root_inode(&self, sb: &Arc<SuperBlock>) -> Result<Arc<Inode>>;
    /// statfs.
    fn statfs(&self, sb: &SuperBlock) -> StatFs;

    /// Whether cached dentries of this instance must be revalidated before use (Linux's
    /// `DCACHE_OP_REVALIDATE`): the storage can change behind the VFS's back. Asked once,
    /// when the root dentry is made; every dentry below inherits the answer.
    fn revalidates(&self) -> bool {
        false
    }
    /// `d_revalidate`: whether the cached `dentry`, named `name` in `dir` (positive or
    /// negative), still says what the storage holds; `false` makes the VFS drop it and
    /// look the name up again. The filesystem may refresh the inode's attributes on the
    /// way. Called in the lockless walk (no lock held) and with `dir`'s lock held; it must
    /// not take directory locks. Only called when [`FileSystem::revalidates`].
    fn d_revalidate(&self, _dir: &Inode, _name: &[u8], _dentry: &crate::core::dentry::Dentry) -> Result<bool> {
        Ok(true)
    }
    /// `d_init`: a dentry was just made from what the filesystem said (a lookup or a
    /// create), for a filesystem that [`FileSystem::revalidates`] to timestamp.
    fn d_init(&self, _dentry: &crate::core::dentry::Dentry) {}
    /// Refreshes the inode's attributes from the storage before they are reported (Linux's
    /// `->getattr` for network filesystems): called by `fstat` and by walks that end on a
    /// position no name lookup revalidated (`.`, `..`, a root), when
    /// [`FileSystem::revalidates`]. No lock held.
    fn getattr(&self, _inode: &Inode) -> Result<()> {
        Ok(())
    }

    /// The link count `stat` reports for `inode`, which the filesystem marked with
    /// [`Inode::set_stat_by_fs`] (`None`: the inode's own). Linux's `->getattr` of
    /// overlayfs reports a lower object's count while the overlay inode's own drops:
    /// an open lower file removed through the overlay shows the lower file's links. No
    /// lock held; must not take the inode's.
    fn stat_nlink(&self, _inode: &Inode) -> Option<u32> {
        None
    }

    /// Looks up `name` in `dir` (only for filesystems that are not dcache-complete).
    fn lookup(&self, _sb: &Arc<SuperBlock>, _dir: &Inode, _name: &[u8]) -> Result<Option<Arc<Inode>>> {
        Ok(None)
    }
    /// A file description of `inode` is being opened (not `O_PATH`): the filesystem
    /// readies what I/O on it needs (Linux's `->open`; hostfs opens the host file now, so
    /// an open file keeps its data whatever happens to its name on the host).
    /// `flags` are the open's (overlay copies up for an open with write access).
    fn open(&self, _inode: &Inode, _flags: crate::abi::flags::OpenFlags) -> Result<()> {
        Ok(())
    }
    /// The file description a successful [`FileSystem::open`] was for is gone (its last
    /// descriptor closed, or the open failed after `open`): called exactly once per
    /// successful `open`, before the inode's open count is given back (Linux's
    /// `->release`). hostfs unpins the host descriptor the open pinned.
    fn release(&self, _inode: &Inode) {}
    /// Calls `f` with a host descriptor of the regular file `inode`, which an open of it
    /// keeps open (between [`FileSystem::open`] and [`FileSystem::release`]): for FUSE
    /// passthrough, where the kernel then reads and writes that host file itself.
    /// `EOPNOTSUPP` where there is no host file (memfs).
    fn with_host_fd(
        &self,
        _inode: &Inode,
        _f: &mut dyn FnMut(std::os::fd::BorrowedFd<'_>) -> Result<()>,
    ) -> Result<()> {
        Err(Errno::EOPNOTSUPP)
    }
    /// The host file of `inode` was changed without uvfs (written through the descriptor
    /// [`FileSystem::with_host_fd`] gave): re-read what is cached of it (size, times).
    fn host_changed(&self, _inode: &Inode) {}
    /// Creates a node of any type (regular, directory, device, fifo, socket, symlink).
    fn create(&self, sb: &Arc<SuperBlock>, dir: &Inode, name: &[u8], args: &CreateArgs<'_>) -> Result<Arc<Inode>>;
    /// Creates an unnamed regular file (`O_TMPFILE`).
    fn tmpfile(&self, _sb: &Arc<SuperBlock>, _dir: &Inode, _args: &CreateArgs<'_>) -> Result<Arc<Inode>> {
        Err(Errno::EOPNOTSUPP)
    }
    /// Adds a hard link to `inode` as `name` in `dir`.
    fn link(&self, dir: &Inode, name: &[u8], inode: &Arc<Inode>) -> Result<()>;
    /// Removes the non-directory `inode` named `name` from `dir`.
    fn unlink(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<()>;
    /// Removes the empty directory `inode` named `name` from `dir`.
    fn rmdir(&self, dir: &Inode, name: &[u8], inode: &Inode) -> Result<()>;
    /// Renames; `target` is the inode replaced (or exchanged), if any.
    fn rename(&self, req: &RenameReq<'_>) -> Result<()>;
    /// Reads a symlink's target.
    fn readlink(&self, inode: &Inode) -> Result<Vec<u8>>;
    /// Persists attribute changes already applied to the inode. Called with the inode
    /// lock held (as Linux's `notify_change` under `inode_lock`).
    fn setattr(&self, _inode: &Inode, _attr: &SetAttr) -> Result<()> {
        Ok(())
    }
    /// Persists an access time the VFS just moved (Linux's `->update_time` with
    /// `S_ATIME`), with the inode lock held. Best effort, as `touch_atime`'s: an error is
    /// not the reader's. Nothing by default (the inode is the only copy); not a `setattr`,
    /// which overlay answers with a copy-up.
    fn update_atime(&self, _inode: &Inode, _atime: Timespec) {}
    /// Sets the size of a regular file (the VFS updates the inode's size and times; a
    /// filesystem that keeps its own times, hostfs's host, moves them as `by` says).
    fn truncate(&self, inode: &Inode, size: u64, by: TruncateBy) -> Result<()>;
    /// Reads at `off`; returns bytes read (0 at end of file).
    fn read(&self, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize>;
    /// [`FileSystem::read`] for a caller whose read leaves the access time (`O_NOATIME`,
    /// a `noatime` or read-only mount, `FS_NOATIME_FL`): for a filesystem whose storage
    /// moves it at its own reads (hostfs: the host's file).
    fn read_keeping_atime(&self, inode: &Inode, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.read(inode, off, buf)
    }
    /// Writes `buf` where `at` says, which the filesystem resolves with
    /// [`WriteAt::resolve`] against the file's size *under the lock that serializes its
    /// writes*, so that an `O_APPEND` write lands at the end atomically across open file
    /// descriptions (Linux holds the inode lock for this). Returns where the data went
    /// and how many bytes were written, and updates size/blocks in the inode.
    fn write(&self, inode: &Inode, at: WriteAt, buf: &[u8]) -> Result<(u64, usize)>;
    /// `fallocate`: allocates (`mode` empty or `KEEP_SIZE`) or frees (`PUNCH_HOLE |
    /// KEEP_SIZE`) the byte range `off..off + len` of a regular file, and updates size and
    /// blocks in the inode; the VFS has checked the mode, the descriptor and the range,
    /// and updates the times. EOPNOTSUPP for what the filesystem cannot do.
    fn fallocate(&self, _inode: &Inode, _mode: FallocFlags, _off: u64, _len: u64) -> Result<()> {
        Err(Errno::EOPNOTSUPP)
    }
    /// Whether `fallocate` drops the set-id bits (as a write does) before the filesystem
    /// sees the call, whatever it answers: overlayfs's `ovl_fallocate` does, before the
    /// upper filesystem refuses a mode; tmpfs's only after it allocated.
    fn privs_before_fallocate(&self) -> bool {
        false
    }
    /// `SEEK_DATA` (`hole` false) or `SEEK_HOLE` (`hole` true) from `off`, which is below
    /// the size: the first offset of data or of a hole at or after it (ENXIO: no data).
    /// The default is Linux's generic answer: all data, and a hole at the end.
    fn seek_hole_data(&self, inode: &Inode, off: u64, hole: bool) -> Result<u64> {
        Ok(if hole { inode.size() } else { off })
    }
    /// Copies `len` bytes from `src` at `src_off` to `dst` (of the same filesystem) at
    /// `dst_off` without the data passing through the caller (`->copy_file_range`,
    /// `->remap_file_range`): returns the bytes copied and updates size and blocks of
    /// `dst`. The VFS has clamped `len` to the source's size and checked the ranges;
    /// EOPNOTSUPP makes it copy through a buffer.
    fn copy_range(&self, _src: &Inode, _src_off: u64, _dst: &Inode, _dst_off: u64, _len: u64) -> Result<u64> {
        Err(Errno::EOPNOTSUPP)
    }
    /// `statx`'s attributes of the inode (its file flags), and which of them the
    /// filesystem can report.
    fn statx_attributes(&self, _inode: &Inode) -> (StatxAttrs, StatxAttrs) {
        (StatxAttrs::empty(), StatxAttrs::empty())
    }
    /// Birth time of the inode, if the filesystem records one (`statx`'s `STATX_BTIME`).
    fn btime(&self, _inode: &Inode) -> Option<Timespec> {
        None
    }
    /// Lists a directory from `cursor` (only for filesystems that are not dcache-complete).
    fn readdir(&self, _dir: &Inode, _cursor: u64, _out: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        Err(Errno::ENOTDIR)
    }
    /// Flushes a file to stable storage.
    fn fsync(&self, _inode: &Inode) -> Result<()> {
        Ok(())
    }
    /// The inode has no links and no open files: free its contents.
    fn evict(&self, _inode: &Inode) {}
    /// The inode is being freed (its last reference went; Linux's `free_inode`): what its
    /// private data holds of the filesystem's goes back. Called from the inode's drop,
    /// once, with the private data still in place.
    fn free_inode(&self, _inode: &Inode) {}
    /// Whether the filesystem supports POSIX ACLs (Linux's `SB_POSIXACL`): the VFS then
    /// evaluates them, accepts `system.posix_acl_*`, and leaves the umask to
    /// `posix_acl_create`-style inheritance.
    fn posix_acl(&self) -> bool {
        false
    }
    /// Reads an ACL from storage (the VFS caches the answer in the inode's slot). Called
    /// with the inode lock held.
    fn get_acl(&self, _inode: &Inode, _ty: AclType) -> Result<Option<Arc<Acl>>> {
        Ok(None)
    }
    /// Whether an ACL asked to be removed (`removexattr`, not a minimal ACL reduced to
    /// the mode) can be, after the VFS's checks and before [`FileSystem::set_acl`]. The
    /// default removes what is not there without a word (tmpfs's `simple_set_acl`);
    /// overlay's lower objects say ENODATA. Called with the inode lock held.
    fn remove_acl_check(&self, _inode: &Inode, _ty: AclType) -> Result<()> {
        Ok(())
    }
    /// Stores (`Some`) or removes an ACL, already validated and reduced (a minimal access
    /// ACL arrives as `None`; the VFS has updated the mode and persists it with
    /// [`FileSystem::setattr`]). Called with the inode lock held.
    fn set_acl(&self, _inode: &Inode, _ty: AclType, _acl: Option<&Arc<Acl>>) -> Result<()> {
        Err(Errno::EOPNOTSUPP)
    }
    /// `->fileattr_get`: the inode's flags (`FS_*_FL`, what `FS_IOC_GETFLAGS` reports).
    /// ENOTTY where the filesystem keeps none (Linux's ENOIOCTLCMD), the default.
    fn fileattr_get(&self, _inode: &Inode) -> Result<FsFlags> {
        Err(Errno::ENOTTY)
    }
    /// `->fileattr_set`: stores `flags` as the inode's flags, EOPNOTSUPP for one the
    /// filesystem does not keep, and sets the ones the VFS enforces on the inode
    /// ([`Inode::set_attr_flags`]). The VFS has checked ownership and
    /// `CAP_LINUX_IMMUTABLE`, holds the inode lock, and updates ctime after. ENOTTY where
    /// the filesystem keeps none, the default (then [`FileSystem::fileattr_get`] must say
    /// so too).
    fn fileattr_set(&self, _inode: &Inode, _flags: FsFlags) -> Result<()> {
        Err(Errno::ENOTTY)
    }
    /// Reads the xattr `name` (full name, namespace prefix included; the VFS has checked
    /// it and the caller's permission) into `buf`. An empty `buf` asks for the size;
    /// ENODATA when absent, ERANGE when `buf` is too small.
    fn getxattr(&self, _inode: &Inode, _name: &[u8], _buf: &mut [u8]) -> Result<usize> {
        Err(Errno::EOPNOTSUPP)
    }
    /// Sets the xattr `name`: EEXIST for `CREATE` when present, ENODATA for `REPLACE`
    /// when absent, ENOSPC when out of space. Called with the inode lock held.
    fn setxattr(&self, _inode: &Inode, _name: &[u8], _value: &[u8], _flags: XattrFlags) -> Result<()> {
        Err(Errno::EOPNOTSUPP)
    }
    /// Removes the xattr `name`; ENODATA when absent. Called with the inode lock held.
    fn removexattr(&self, _inode: &Inode, _name: &[u8]) -> Result<()> {
        Err(Errno::EOPNOTSUPP)
    }
    /// Calls `out` with the name of every stored xattr (not the ACLs: the VFS lists those
    /// from the slots), stopping at its first error.
    fn listxattr(&self, _inode: &Inode, _out: &mut dyn FnMut(&[u8]) -> Result<()>) -> Result<()> {
        Ok(())
    }
    /// For downcasting.
    fn as_any(&self) -> &dyn Any;
}

/// Where a write goes: at an offset, or (`O_APPEND`) at the end of the file as it is when
/// the filesystem writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteAt {
    off: u64,
    append: bool,
}

impl WriteAt {
    /// At `off` (`pwrite`, or `write` at the file position).
    pub fn offset(off: u64) -> WriteAt {
        WriteAt { off, append: false }
    }

    /// At the end of the file (`O_APPEND`, `RWF_APPEND`).
    pub fn end() -> WriteAt {
        WriteAt { off: 0, append: true }
    }

    /// Whether this is an append.
    pub fn is_append(self) -> bool {
        self.append
    }

    /// The offset to write at in a file now `size` bytes long, and how much of `len` may
    /// be written there: Linux's `generic_write_checks`, EFBIG for a start at or past the
    /// largest file size, a write that would pass it cut short.
    pub fn resolve(self, size: u64, len: usize) -> Result<(u64, usize)> {
        let off = if self.append { size } else { self.off };
        let max = crate::abi::limits::MAX_LFS_FILESIZE;
        if off >= max {
            return Err(Errno::EFBIG);
        }
        Ok((off, len.min((max - off).try_into().unwrap_or(usize::MAX))))
    }
}

/// A rename as the filesystem sees it.
pub struct RenameReq<'a> {
    /// Source directory.
    pub old_dir: &'a Inode,
    /// Source name.
    pub old_name: &'a [u8],
    /// The inode being renamed.
    pub inode: &'a Inode,
    /// Target directory.
    pub new_dir: &'a Inode,
    /// Target name.
    pub new_name: &'a [u8],
    /// The inode at the target name, replaced or exchanged.
    pub target: Option<&'a Inode>,
    /// `RENAME_*` flags.
    pub flags: RenameFlags,
    /// With `RENAME_WHITEOUT` on a filesystem that makes the whiteout itself (not
    /// dcache-complete): the owner (uid, gid) the whiteout gets, the caller's as for any
    /// new node.
    pub whiteout_owner: Option<(u32, u32)>,
}

static NEXT_DEV: AtomicU64 = AtomicU64::new(1);

/// Where the next instance's names stamp starts (see `SuperBlock::names_done`).
static NEXT_NAMES_BASE: AtomicU64 = AtomicU64::new(0);

/// A change to an instance's names in progress (see [`SuperBlock::names_change`]).
pub(crate) struct NamesChange<'a>(&'a SuperBlock);

impl Drop for NamesChange<'_> {
    fn drop(&mut self) {
        if self.0.complete {
            // Done first: a reader that sees no change in progress sees this one counted.
            self.0.names_done.fetch_add(1, Ordering::SeqCst);
            self.0.names_busy.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// One filesystem instance.
pub struct SuperBlock {
    /// Immutable: device number reported in `st_dev` (anonymous devices, major 0).
    dev: u64,
    /// Immutable: read-only as a whole (Linux's `SB_RDONLY`): mounted with `RDONLY`, or a
    /// filesystem that can only be read. Every mount of it is read-only, whatever its own
    /// flag says.
    rdonly: bool,
    /// Immutable: the filesystem.
    fs: Box<dyn FileSystem>,
    /// Immutable: the instance's reclamation domain, held weakly (see [`crate::sync::rcu`]: a
    /// superblock outlives its instance when an open file does).
    rcu: RcuWeak,
    /// Notification state: the watched-object count and filesystem-wide marks.
    pub(crate) notify: crate::core::fsnotify::SbNotify,
    /// The inode cache of a filesystem that loads inodes (hostfs); internally locked.
    icache: crate::core::icache::InodeCache,
    /// Atomic (changed under the rename lock): mounts whose mountpoint is a dentry of this
    /// instance. While there are any, revalidation does not drop directories (Linux would
    /// detach the mounts below; uvfs keeps the directory).
    pub(crate) mountpoints: std::sync::atomic::AtomicUsize,
    /// Set once, by the VFS, before the first inode is made, for a filesystem that is not
    /// dcache-complete: the instance's counts its inodes are counted in (the inode limit).
    pub(crate) counts: std::sync::OnceLock<Arc<crate::core::dentry::DcacheCounts>>,
    /// Immutable: `fs.dcache_complete()`, read without a call by the walk's misses and the
    /// dcache's writers.
    complete: bool,
    /// Atomic: changes in progress to the names of a dcache-complete instance (see
    /// [`SuperBlock::names_change`]); the path cache ([`crate::walk::pathcache`]) neither
    /// answers nor learns while it is not 0. Always 0 for other instances, which it does
    /// not serve.
    names_busy: AtomicU64,
    /// Atomic: such changes done, counted from a base of this instance's own; a path
    /// cache entry answers only while it is what it was when the entry's walk started.
    names_done: AtomicU64,
}

impl SuperBlock {
    /// A new instance of `fs`, read-only as a whole if `rdonly` (or if the filesystem can
    /// only be read); `config` gives the inode cache its probe mode
    /// ([`FastPaths::INODE_HASH`](crate::FastPaths::INODE_HASH)).
    pub(crate) fn with_config(
        fs: Box<dyn FileSystem>,
        rdonly: bool,
        rcu: &Rcu,
        config: &crate::abi::config::VfsConfig,
    ) -> Arc<SuperBlock> {
        let minor = NEXT_DEV.fetch_add(1, Ordering::Relaxed);
        let complete = fs.dcache_complete();
        Arc::new(SuperBlock {
            dev: crate::abi::stat::makedev(0, 0x40 + minor as u32),
            rdonly: rdonly || fs.read_only(),
            fs,
            rcu: rcu.downgrade(),
            notify: Default::default(),
            icache: crate::core::icache::InodeCache::new(
                config.fast_paths.contains(crate::abi::config::FastPaths::INODE_HASH),
            ),
            mountpoints: Default::default(),
            counts: std::sync::OnceLock::new(),
            complete,
            names_busy: AtomicU64::new(0),
            // Each instance counts from its own base, 2^32 apart: a stamp of one never
            // equals another's, should an address be reused for a new instance.
            names_done: AtomicU64::new(NEXT_NAMES_BASE.fetch_add(1 << 32, Ordering::Relaxed)),
        })
    }

    /// Counts this instance's inodes in `counts` if its directories are not complete in
    /// the dcache (their inodes come and go with evictable dentries). Call before the
    /// first inode is made.
    pub(crate) fn count_inodes_in(&self, counts: &Arc<crate::core::dentry::DcacheCounts>) {
        if !self.complete {
            let _ = self.counts.set(counts.clone());
        }
    }

    /// The inode cache (used by filesystems that load inodes, such as hostfs).
    #[inline]
    pub(crate) fn icache(&self) -> &crate::core::icache::InodeCache {
        &self.icache
    }

    /// `st_dev`.
    #[inline]
    pub fn dev(&self) -> u64 {
        self.dev
    }

    /// Whether the instance as a whole is read-only (`SB_RDONLY`).
    #[inline]
    pub fn read_only(&self) -> bool {
        self.rdonly
    }

    /// The filesystem operations.
    #[inline]
    pub fn fs(&self) -> &dyn FileSystem {
        &*self.fs
    }

    /// Whether the filesystem's directories are complete in the dcache (memfs): its
    /// [`FileSystem::dcache_complete`], asked once.
    #[inline]
    pub(crate) fn dcache_complete(&self) -> bool {
        self.complete
    }

    /// The names stamp: the count of changes done, or `None` while one is in progress
    /// (or for an instance the path cache does not serve). Sequentially consistent, as
    /// [`SuperBlock::names_change`]'s updates: a reader pinned before it reads a stamp
    /// that no change has begun since is pinned before anything such a change retires.
    #[inline]
    pub(crate) fn names_stamp(&self) -> Option<u64> {
        if !self.complete || self.names_busy.load(Ordering::SeqCst) != 0 {
            return None;
        }
        Some(self.names_done.load(Ordering::SeqCst))
    }

    /// Marks a change to this instance's names (a name leaving the tree: unhash, replace,
    /// prune) or to who may search a directory (its mode's execute bits, its owner or
    /// group, its access ACL), for as long as the guard lives. Begun before the change, so
    /// before anything it retires; path cache entries made before it stop answering.
    /// Creates do not need one: a new name changes no path that resolved. Nothing for an
    /// instance the path cache does not serve.
    #[inline]
    pub(crate) fn names_change(&self) -> NamesChange<'_> {
        if self.complete {
            self.names_busy.fetch_add(1, Ordering::SeqCst);
        }
        NamesChange(self)
    }

    /// The reclamation domain: the instance's while it lives, else the orphans'.
    pub(crate) fn rcu(&self) -> Rcu {
        self.rcu.get()
    }
}
