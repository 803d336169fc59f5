//! # uvfs: the Linux VFS in user space
//!
//! A program embeds a [`Vfs`] and calls syscall-shaped methods on a [`Task`] (a process:
//! credentials, umask, root, cwd, descriptors). Results are `Result<T, Errno>` with Linux's
//! errno values; paths are bytes. This page is the map: read it first. The source tree
//! (`crates/uvfs/src`) has one folder per layer, and dependencies run one way, down the
//! table; `tests/layout.rs` reads every `crate::` path and fails when one runs up.
//!
//! ## Layers
//! | folder | what | may use |
//! |---|---|---|
//! | `sync/` | the primitives: counting, rank-checked locks (`lock.rs`), reclamation (`rcu.rs`), sequence counts, the lockless hash table, the per-thread [`counters`] | nothing |
//! | `abi/` | what crosses the API: [`Errno`], flags ([`OpenFlags`], [`AtFlags`], ...), [`Credentials`], [`VfsConfig`], [`Stat`], [`limits`] | `sync` |
//! | `core/` | the objects and what keeps them consistent (below) | `sync`, `abi` |
//! | `walk/` | `namei.rs`: the path walk over a `WalkCtx` (instance, credentials, root/cwd, descriptors), not a `Task`; `pathcache.rs`: the per-thread table of whole paths in front of it | `core`, `abi`, `sync` |
//! | `fs/` | the filesystems, [`fs::memfs`], [`fs::hostfs`] and [`fs::tarfs`] (a tar archive, read-only), [`fs::overlay`] (a writable layer in memory over read-only layers, overlayfs's semantics): the filesystem API of `core` only | `core` (`superblock`, `inode`, `dentry`, `acl`, `icache`, `xattr`, `file`), `abi`, `sync` |
//! | `syscalls/` | the calls on [`Task`], one file per family (`open`, `attr`, `stat`, `names`, `read_write`, `readdir`, `utimes`, `xattr`, `acl`, `mount`, `inotify`, `locks`, `fd`, `ioctl`, `fs_struct`) | everything below; the only layer besides the top that names a concrete filesystem |
//! | top level | `lib.rs` (this map), `vfs.rs` ([`Vfs`]), `task.rs` ([`Task`]) | everything |
//!
//! ## Objects (`core/`), each mirroring one kernel object
//! | file | object | mirrors | but |
//! |---|---|---|---|
//! | `instance.rs` | `VfsInner`: config, rename lock and sequence, mount hash, dcache bounds, reclamation domain | Linux's global VFS state; gVisor's `VirtualFilesystem` | one per [`Vfs`], not per machine |
//! | `dentry.rs`, `dcache.rs` | [`Dentry`]: a name, positive or negative; a directory's children | `struct dentry`, `fs/dcache.c` | the map is per directory (no global hash); memfs keeps no tree but the dcache; a name is kept inline (`d_iname`), up to 31 bytes in the dentry and 15 in the map's node; 96 bytes with its counts; the readdir position (memfs) and `d_time` (hostfs) share a field |
//! | `inode.rs` | [`Inode`]: a file object, attributes as atomics under a sequence count | `struct inode` | lockless `stat`; no page cache: the filesystem holds the data; 160 bytes with its counts, what few inodes use (marks, lock context) behind one pointer, a directory's default ACL, a symlink's body and a device's number in one slot, the filesystem's own data given at creation or made at its first need (`Inode::private_or_init`: an empty memfs file has none) |
//! | `superblock.rs` | [`SuperBlock`], the [`FileSystem`] trait (the filesystem API) | `super_block`, `inode_operations`, `file_operations` | the VFS makes every check and takes every lock before calling |
//! | `mount.rs`, `namespace.rs` | [`Mount`], the mount tree | `struct mount`, `fs/namespace.c` | one namespace per instance, no propagation; a mount's users, writers and read-only bit share one word (one atomic add at an open) |
//! | `file.rs`, `fdtable.rs` | [`File`] (an open file description), the descriptor table | `struct file`, `files_struct` | a [`File`] can be held without a descriptor ([`Task::openat_file`]); its inode is its dentry's, uncounted |
//! | `path.rs` | `PathRef` (counted), `Pos` (borrowed for a walk) | `struct path` | a walk position costs no reference count |
//! | `icache.rs` | the inode cache of filesystems that load inodes | `fs/inode.c`'s hash | probed without its lock (seed 004) |
//! | `permission.rs`, `acl.rs`, `attr.rs` | mode bits, capabilities, POSIX ACLs, what writes and chowns remove | `fs/namei.c`, `fs/posix_acl.c`, `fs/attr.c` | the ACL slot is read without a lock (seed 001) |
//! | `xattr.rs` | xattr names, namespaces, permission | `fs/xattr.c` | |
//! | `fsnotify.rs`, `inotify.rs` | marks, the event hooks, [`Inotify`] | `fs/notify/` | marks on a mount or filesystem report paths (fanotify-like) |
//! | `locks.rs` | an inode's file locks (`flock`, POSIX, OFD), made by its first lock; waits; deadlock detection | `fs/locks.c` | waits end on a deadline or an [`Interrupt`] (EINTR), no leases |
//! | `pipe.rs` | the pipe of an open fifo (16 page slots, blocking and `O_NONBLOCK` rules) | `fs/pipe.c` | kept in the instance's table of open fifos, not in the inode; no signals: a blocking open waits for its partner |
//!
//! ## Lock order
//! `rename_lock` (renames, mount changes; it holds the list of mounts) -> file position
//! lock (`read`, `write`, `getdents` take it first, as Linux's `f_pos_lock`) -> directory
//! locks (parent before child, a rename's two parents ancestor first) -> a file's data
//! (memfs pages) -> inode lock -> a filesystem's per-inode metadata (memfs xattrs and
//! ACLs; the inode cache's insert lock) -> an inotify group -> the mark lists of what it
//! watches (taken to change them; events read the lists without it). An inode's lock context (file locks) is taken by the lock calls and by
//! close holding nothing else, and under it the global wait-for edges of waiting POSIX
//! requests. The fd table lock, a task's `fs_lock`, hostfs's name of a file and a lock
//! interrupt's slot, the table of open fifos, a pipe's buffer and memfs's free pages of
//! its shmem file are leaves taken alone or last (a closed file is released after the fd
//! table lock is dropped; a fifo's open, read and write wait with no guard and no other
//! lock held). Each lock's rank is part of its type, and debug builds (the test suite)
//! panic on an acquisition out of this order (`sync`). Every struct field says whether it
//! is immutable, atomic, or protected by which lock.
//!
//! ## The reclamation rule
//! Dentries, inodes, names, files, ACLs and mounts that a lockless reader can reach are
//! freed only after every reader pinned at the time has left: every reference that makes
//! an object reachable without a lock is dropped through the instance's
//! `seize` collector. That is what lets a walk read everything with plain loads and
//! take no reference count. Details in `sync/rcu.rs`. The path cache holds dentries with
//! no count and no pin: an entry answers only while its filesystem's names stamp says no
//! name has left the tree since its walk began, and every change marks itself there
//! before it retires anything (`SuperBlock::names_change`, `walk/pathcache.rs`).
//! Counts are taken only where a reference must outlive both the guard and the lock it
//! was found under: a name's dentry is counted by its directory's table, and borrowed by
//! the readdir order (a pointer read under the directory lock, `dentry::Ordered`), by an
//! unlink or rmdir of it (under the walk's guard), and by a file for its inode (a file
//! counts its dentry, whose inode never changes).
//! An inode's contents (memfs pages, xattrs) are freed when it has neither a name nor a
//! holder that reaches it without one: open files, mounts whose root it is, tasks' roots
//! and working directories (`Inode::hold`; Linux's `evict` waits for the dentry
//! references those hold).
//!
//! ## Fast paths (see `shared/DESIGN.md`), each with a [`FastPaths`] switch
//! - **Lockless walk, no shared write on lookup** (seed 004): `walk/namei.rs`. A stat, access,
//!   readlink or failed open of cached names takes no lock, allocates nothing and writes
//!   no shared memory (but a `stat`'s one mark of a change time it is the first to report,
//!   below, and the clearing of a mount's `MNT_EXPIRE` mark where one is set; and an inode marked for it, [`Inode::set_stat_by_fs`], asks its filesystem
//!   first: a host file the kernel writes through FUSE passthrough while it is open so,
//!   an overlay object removed from below; one flag test for the others); the `Arc`
//!   counts of a dentry and of an inode share the first line of their allocation only
//!   with what lookups and stat do not read (a dentry's first name, an inode's open
//!   count, lock and filesystem data), away from the lookup fields (`core/dentry.rs`,
//!   `core/inode.rs`, checked at compile time).
//!   A directory's children are an open-addressed table (`core/dhash.rs`): a probe reads
//!   one word of tags and the slot whose tag matches, where the hash and the name are
//!   compared, before any dentry is touched. A create's lockless miss stands under the
//!   directory's lock while the table's version has not moved (`dhash::Probe`): the name
//!   is not looked up again there, and goes into the slot the miss found.
//! - **Lockless inode-cache probe** (seed 004, hash half): `core/icache.rs`. Filesystems that
//!   load inodes (hostfs) find them by (device, inode number) in a table probed without
//!   its lock; only an insert locks (and probes again under the lock).
//! - **Symlink body in the inode** (seed 002): [`Inode::cached_link`], used by the walk and
//!   by `readlinkat`.
//! - **Failed open without allocation** (seed 003): `Task::openat` walks before it
//!   allocates.
//! - **Nobody watches** (seed 000): `core/fsnotify.rs`. A write, open or close checks the
//!   filesystem's watched-object count, then the dentry's parent-watched flag, then the
//!   mark masks, and stops at the first zero: no lock, no call, no allocation. An event that
//!   passes reads the marks of its inode, mount and filesystem under its guard (an RCU
//!   list each), so a mark that drops it (a FUSE server's, muted on its request threads)
//!   costs no lock either; one that queues it takes its group's.
//! - **Nobody flags** (no switch: nothing to fall back to): the immutable and append-only
//!   flags (`chattr`) live in the inode's `iflags`, so every check Linux makes of them is
//!   one atomic load, and a lookup (which asks `MAY_EXEC` only) makes none.
//! - **Nobody locks** (no switch: nothing to fall back to): `core/locks.rs`. A file nobody
//!   ever locked has no lock context; close tests the inode's pointer to its extras (made
//!   by a first lock or inotify mark; no lock, no allocation), open and write test nothing.
//! - **Whole-path cache** (not a seed; Tsai et al., SOSP 2015): `walk/pathcache.rs`. A
//!   path whose every directory lets everyone search it, within one mount of memfs, is
//!   learned by its first lockless walk and then answered by one probe of a per-thread
//!   table (key: instance, start, root, flags, the path's bytes), checked against the
//!   rename sequence and the filesystem's names stamp, which renames, removals, mounts and
//!   a directory's mode or access ACL move. Needs the lockless walk and the no-ACL check.
//! - **Coarse timestamps** (no switch; not a seed: Linux 6.13's multigrain timestamps):
//!   `core/inode.rs`. A change reads the coarse clock (the kernel's tick, 4 ms: a read
//!   of the vDSO page, 5 ns against 25 for the fine clock here), unless a `stat` reported
//!   the change time (a bit in it, `I_CTIME_QUERIED`) and the tick has not moved since:
//!   then a fine stamp, so that every change after a `stat` shows, and it raises a floor
//!   under later coarse stamps, so that a file changed after another is never older.
//! - **No-ACL permission check** (seed 001): the ACL slot (`core/acl.rs`), read by `core/permission.rs`
//!   without a lock; "known none" (or a check the mode decides: the owner, or no group
//!   bits) touches no ACL data, a cached ACL is evaluated in place.
//!
//! Each falls back to a general path that exists anyway (the locked walk tier, asking the
//! filesystem, the locked ACL load); the switch forces it. A lockless reader that sees an
//! inconsistent state (the rename sequence moved, or a directory's map was rebuilt under a
//! miss: `DHash::get_sure`) falls back; it never answers wrong. A walk that fell back
//! still finds cached names without locks and locks only where it misses (Linux's
//! ref-walk `lookup_fast`).
//!
//! ## Filesystems that change behind the VFS (hostfs)
//! A filesystem that is not dcache-complete is asked on a miss (`lookup`), and its answer
//! is cached, positive or negative; the last name of unlink, rmdir, rename, link and the
//! creates is looked up the same way under the directory lock (`VfsInner::lookup_excl`,
//! Linux's `lookup_one_qstr_excl`). One whose storage can change
//! ([`FileSystem::revalidates`]) marks its dentries
//! `DENTRY_OP_REVALIDATE`, and every cached lookup asks it to vouch for the dentry
//! (`d_revalidate`, in the lockless tier too); a dentry it disowns is dropped with its
//! cached subtree and looked up again. A walk ending where no name was checked (`.`,
//! `..`, a root) and `fstat` refresh attributes (`getattr`). Without the flag (memfs,
//! hostfs under `HostChanges::Never`) this costs one test of flags the walk loads anyway.
//!
//! ## Bounded caches
//! Dentries that lookups cache for a filesystem that is not dcache-complete (hostfs) are
//! counted and evicted when unused, oldest first, past [`VfsConfig::dentry_limit`] and
//! [`VfsConfig::negative_dentry_limit`] ([`Vfs::dcache_counts`]), and past
//! [`VfsConfig::inode_limit`] for such filesystems' inodes ([`Vfs::cached_inodes`]). An
//! unused inode is freed with its last dentry (no LRU of unused inodes is kept), so
//! evicting dentries is what frees inodes. A pass that cannot get within the limits (what
//! is over is in use) is not retried until the caches grow further. A removed, replaced
//! or invalidated directory has its cached subtree pruned, and dropping a [`Vfs`] tears
//! its dentry trees down: a directory's map and a child's parent pointer form a cycle.
//!
//! ## Observing it
//! - **Counters** ([`counters()`], per thread, no shared write): locks taken (every lock
//!   of the VFS counts itself), walks answered by the lockless tier and by the locked tier,
//!   walks redone because a rename overlapped, symlink bodies read from the filesystem,
//!   notify locks, dentries the filesystem's revalidation dropped, entries the dcache
//!   eviction looked at, walks the path cache answered and learned, and (debug builds)
//!   hash-table probes. A fast path that fell back
//!   shows as `walk_locked` growing, or `locks` above zero for a cached stat; the tests
//!   assert these counts, never times.
//! - **Caches**: [`Vfs::dcache_counts`] and [`Vfs::cached_inodes`] for the bounded caches
//!   of hostfs.
//! - **The benchmark**: `uvfs bench` reports each case's locks per operation beside its
//!   ops/s, with every fast path on and with each switched off ([`FastPaths`]); `uvfs
//!   bench --help` shows how to run one case under `perf`.
//! - **Lock order**: debug builds panic on an acquisition out of the order above, naming
//!   both locks.
//!
//! ## Limitations
//! - No page cache and no `mmap`: memfs's pages are the file (the pages of a big write,
//!   and with [`VfsConfig::root_small_write_pages`] of every write, are pages of a shmem
//!   file of the process, `fs/memfs/shmem.rs`, which the kernel does not zero before they
//!   are written), hostfs reads and writes the host file.
//!   Through the FUSE mount the kernel's page cache does this work.
//! - Sockets and device nodes can be created, listed, renamed and removed, but not opened
//!   in-process (ENXIO). Fifos open as Linux's (`core/pipe.rs`); `F_SETPIPE_SZ` and
//!   `splice` are not offered.
//! - One mount namespace per instance: no mount propagation, `MS_MOVE` or `pivot_root`.
//! - File flags ([`Task::ioctl_setflags`]) are kept by memfs only (tmpfs's set); hostfs
//!   answers ENOTTY.
//! - No leases, `F_NOTIFY` or mandatory locks (`fcntl` has the descriptor, status-flag and
//!   lock commands). `fallocate` has tmpfs's modes (allocate, `KEEP_SIZE`, `PUNCH_HOLE`);
//!   `copy_file_range` between superblocks is EXDEV (memfs shares pages copy-on-write
//!   within one). `RWF_NOWAIT`, `RWF_ATOMIC` and `RWF_DONTCACHE` are EOPNOTSUPP on every
//!   filesystem, as on tmpfs.
//! - hostfs checks every cached name against the host before use unless told the host
//!   does not change (`HostChanges::Never`): correct, and a system call per cached lookup.
//! - A directory of a hostfs that changed on the host is not dropped from the cache while
//!   anything is mounted inside that hostfs (Linux would detach those mounts).
//! - The path cache serves memfs only, walks that stay in one mount, and successful
//!   walks only (a miss pays its probe, about 110 instructions); other paths cost one hash
//!   probe per component. A server's lookups (`Task::lookup_path`, asked once each by a
//!   kernel that caches the answer) stay out of it.
//!
//! ## Example
//! ```
//! use uvfs::{Vfs, VfsConfig, OpenFlags, DirFd, AtFlags};
//! let vfs = Vfs::new(VfsConfig::default());
//! let t = vfs.root_task();
//! t.mkdir(b"/etc", 0o755).unwrap();
//! let fd = t.open(b"/etc/motd", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
//! t.write(fd, b"hello\n").unwrap();
//! t.close(fd).unwrap();
//! assert_eq!(t.stat(b"/etc/motd").unwrap().size, 6);
//! assert_eq!(t.open(b"/etc/nope", OpenFlags::RDONLY, 0), Err(uvfs::Errno::ENOENT));
//! ```

mod abi;
mod core;
pub mod fs;
mod sync;
mod syscalls;
mod task;
mod vfs;
mod walk;

pub use abi::config::{FastPaths, SmallWritePages, VfsConfig};
pub use abi::cred::{Capabilities, Credentials, Gid, GroupSource, Uid};
pub use abi::errno::{Errno, Result};
pub use abi::flags::{
    AccessMode, AtFlags, CopyRangeFlags, FallocFlags, FcntlCmd, Fd, FdFlags, FsFlags, MAX_RW_COUNT, OpenFlags, OpenHow,
    RenameFlags, ResolveFlags, RwfFlags, TimeSpec, Timespec, UIO_MAXIOV, Whence,
};
pub use abi::limits;
pub use abi::lock::{Flock, FlockOp, LockCmd};
pub use abi::stat::{DevIno, FileType, Ino, Stat, StatFs, StatFsFlags, Statx, StatxAttrs, StatxMask, makedev};
pub use core::acl::{Acl, AclEntry, AclTag, AclType};
pub use core::dentry::Dentry;
pub use core::file::{DirFd, File, FileRef};
pub use core::fsnotify::EventMask;
pub use core::inode::{Inode, current_time};
pub use core::inotify::{Inotify, InotifyEvent, InotifyFlags, MarkKind, MuteGuard};
pub use core::locks::{Interrupt, LockClass, LockInfo, LockOwner, LockOwnerSpace, LockWait};
pub use core::mount::{Mount, MountFlags, MountId, MountInfo, UmountFlags};
pub use core::superblock::{DirEntry, FileSystem, SuperBlock, TruncateBy};
pub use core::xattr::XattrFlags;
pub use sync::counters::{Counters, counters};
pub use syscalls::mount::MountSource;
pub use syscalls::open::Looked;
pub use task::Task;
pub use vfs::Vfs;
