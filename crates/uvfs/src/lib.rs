//! # uvfs: the Linux VFS in user space
//!
//! A program embeds a [`Vfs`] and calls syscall-shaped methods on a [`Task`] (a process:
//! credentials, umask, root, cwd, descriptors). Results are `Result<T, Errno>` with Linux's
//! errno values; paths are bytes. This page is the map: read it first.
//!
//! ## Objects (one module each, named after the kernel object it mirrors)
//! | module | object | Linux |
//! |---|---|---|
//! | [`vfs`] | [`Vfs`]: the instance, mount table, config, reclamation domain | — |
//! | [`task`] | [`Task`]: credentials, umask, root/cwd, fd table | `task_struct`, `fs_struct` |
//! | [`cred`] | [`Credentials`]: uid/gid, groups, capabilities | `struct cred` |
//! | [`dentry`] | [`Dentry`]: a name; a directory's children map | `struct dentry`, dcache |
//! | [`inode`] | [`Inode`]: a file object; lockless attributes | `struct inode` |
//! | [`superblock`] | [`SuperBlock`], the [`FileSystem`] trait | `super_block`, `inode_operations` |
//! | [`mount`] | [`Mount`]: flags, users (umount EBUSY), writers (remount-ro EBUSY) | `struct mount` |
//! | `namespace` | `mount`, `remount`, `umount2`, `mountinfo` on [`Task`] | `fs/namespace.c` |
//! | `openat2` | [`OpenHow`], [`ResolveFlags`]: scoped resolution | `fs/open.c` (`build_open_flags`) |
//! | [`file`](mod@file), `fdtable` | [`File`], `FdTable` | `struct file`, `files_struct` |
//! | `namei` | the path walk | `fs/namei.c` |
//! | [`permission`] | mode bits, capabilities, sticky, setgid | `generic_permission` |
//! | [`acl`] | POSIX ACLs: the slot, evaluation, xattr format, inheritance | `fs/posix_acl.c` |
//! | [`xattr`] | extended attributes: names, namespaces, permission | `fs/xattr.c` |
//! | [`fsnotify`] | marks on inodes, mounts, filesystems; the event hooks | `fs/notify/fsnotify.c` |
//! | [`inotify`] | [`Inotify`] instances: watches, the bounded event queue | `fs/notify/inotify/` |
//! | [`memfs`] | tmpfs semantics in memory | `mm/shmem.c` |
//! | [`hostfs`] | passthrough to a host directory, by descriptors only | disk filesystems' `lookup` |
//! | `icache` | the inode cache: lockless probe, locked insert | `fs/inode.c` (inode hash) |
//! | `open`, `stat`, `dir_ops`, `read_write`, `readdir`, `utimes`, `d_path` | the calls | `fs/open.c`, `fs/stat.c`, ... |
//! | `seqcount`, `rcu`, `rhashtable`, `sync` | primitives | `seqcount_t`, RCU, the dcache hash, locks |
//!
//! ## Lock order
//! `rename_lock` (renames, mount changes; it holds the list of mounts) -> file position
//! lock (`read`, `write`, `getdents` take it first, as Linux's `f_pos_lock`) -> directory
//! locks (parent before child, a rename's two parents ancestor first) -> a file's data
//! (memfs pages) -> inode lock -> a filesystem's per-inode metadata (memfs xattrs and
//! ACLs; the inode cache's insert lock) -> an inotify group -> the mark lists of what it
//! watches. The fd table lock, a task's `fs_lock` and hostfs's name of a file are leaves
//! taken alone (a closed file is released after the fd table lock is dropped). Each lock's
//! rank is part of its type, and debug builds (the test suite) panic on an acquisition out
//! of this order (`sync`). Every struct field says whether it is immutable, atomic, or
//! protected by which lock.
//!
//! ## The reclamation rule
//! Dentries, inodes, names, files, ACLs and mounts that a lockless reader can reach are
//! freed only after every reader pinned at the time has left: every reference that makes
//! an object reachable without a lock is dropped through the instance's
//! `seize` collector. That is what lets a walk read everything with plain loads and
//! take no reference count. Details in `rcu`.
//!
//! ## Fast paths (see `shared/DESIGN.md`), each with a [`FastPaths`] switch
//! - **Lockless walk, no shared write on lookup** (seed 004): `namei`. A stat, access,
//!   readlink or failed open of cached names takes no lock, allocates nothing and writes
//!   no shared memory; the `Arc` count of a dentry lives on the cache line before it
//!   (`align(64)`), away from the lookup fields ([`dentry`]).
//! - **Lockless inode-cache probe** (seed 004, hash half): `icache`. Filesystems that
//!   load inodes (hostfs) find them by (device, inode number) in a table probed without
//!   its lock; only an insert locks (and probes again under the lock).
//! - **Symlink body in the inode** (seed 002): [`Inode::cached_link`], used by the walk and
//!   by `readlinkat`.
//! - **Failed open without allocation** (seed 003): `Task::openat` walks before it
//!   allocates.
//! - **Nobody watches** (seed 000): [`fsnotify`]. A write, open or close checks the
//!   filesystem's watched-object count, then the dentry's parent-watched flag, then the
//!   mark masks, and stops at the first zero: no lock, no call, no allocation.
//! - **No-ACL permission check** (seed 001): [`acl::AclSlot`], read by [`permission`]
//!   without a lock; "known none" (or a check the mode decides: the owner, or no group
//!   bits) touches no ACL data, a cached ACL is evaluated in place.
//!
//! Each falls back to a general path that exists anyway (the locked walk tier, asking the
//! filesystem, the locked ACL load); the switch forces it. A lockless reader that sees an
//! inconsistent state (the rename sequence moved, or a directory's map grew under a miss:
//! `rhashtable`'s `get_sure`) falls back; it never answers wrong. A walk that fell back
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

pub use abi::config::{FastPaths, VfsConfig};
pub use abi::cred::{Capabilities, Credentials, Gid, Uid};
pub use abi::errno::{Errno, Result};
pub use abi::flags::{
    AccessMode, AtFlags, Fd, OpenFlags, OpenHow, RenameFlags, ResolveFlags, TimeSpec, Timespec, Whence,
};
pub use abi::limits;
pub use abi::stat::{FileType, Stat, StatFs, makedev};
pub use core::acl::{Acl, AclEntry, AclTag, AclType};
pub use core::dentry::Dentry;
pub use core::file::{DirFd, File, FileRef};
pub use core::fsnotify::EventMask;
pub use core::inode::Inode;
pub use core::inotify::{Inotify, InotifyEvent, InotifyFlags, MarkKind};
pub use core::mount::{Mount, MountFlags, MountId, MountInfo, UmountFlags};
pub use core::superblock::{DirEntry, FileSystem, SuperBlock};
pub use core::xattr::XattrFlags;
pub use sync::counters::{Counters, counters};
pub use syscalls::mount::MountSource;
pub use task::Task;
pub use vfs::Vfs;
