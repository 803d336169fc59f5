//! # uvfs-fuse: a uvfs instance through the kernel's FUSE
//!
//! [`spawn`] (in the background) and [`serve`] (in the calling thread) mount a
//! [`uvfs::Vfs`] on a directory of the host and speak the FUSE protocol with the kernel
//! themselves, so any program can use it; `uvfs mount` ([`cli`]) is the command around
//! them. Read the modules in this order:
//!
//! | module | what |
//! |---|---|
//! | [`abi`] | the kernel's structs, opcodes and flags (`linux/fuse.h`) |
//! | [`request`] | a request's bytes to a typed operation borrowing them |
//! | [`reply`] | replies encoded into the transport's buffer |
//! | [`session`] | INIT negotiation, the protocol's own requests, notifications |
//! | [`transport`] | `/dev/fuse` workers ([`transport::dev`]) and FUSE over io_uring ([`transport::uring`]) |
//! | `mount` | `mount(2)` as root, `fusermount3` otherwise; unmount |
//! | `passthrough` | backing files for `FOPEN_PASSTHROUGH` (hostfs files read and written by the kernel), and which opens of a file stay in the page cache instead ([`Levers::CACHED_READS`]; a file's opens are all one or the other) |
//! | [`nodes`] | FUSE node ids to `O_PATH` descriptors of the server task, lookup counts; a LOOKUP or READDIRPLUS entry of an inode with a node makes no descriptor (`uvfs::Task::lookup_path`) |
//! | [`ident`] | the caller's identity (uid, gid, groups from `/proc`) as a cached uvfs task |
//! | `server` | the request handlers: one or two uvfs calls each, panics answered EIO |
//! | `locks` | file locks (GETLK, SETLK, SETLKW, flock), answered by uvfs's lock manager with [`Levers::SERVER_LOCKS`] where the server sees opens (else the kernel keeps them); SETLKW waits off the transport threads |
//! | `watch` | kernel cache invalidation for in-process changes, and for [`Levers::RELIST`] (a directory's listing dropped after its files are read) |
//! | [`cli`] | `uvfs mount`: options, checks with one-line errors, signals, daemon |
//!
//! ## Transports
//! [`Transport::Dev`]: worker threads ([`MountOptions::threads`]) read requests from
//! `/dev/fuse` and write replies, two system calls and two context switches per request;
//! one of them busy-polls for a moment after each reply ([`MountOptions::busy_poll`]), so
//! that back-to-back requests do not each wake a sleeping thread, and meanwhile sits on
//! its caller's CPU in the idle scheduling class ([`MountOptions::queue_class`]), so that
//! neither the request nor the reply wakes a thread across CPUs.
//! [`Transport::Uring`] (FUSE over io_uring, Linux 6.14+ with the `fuse` module parameter
//! `enable_uring`): one ring per CPU whose thread receives a request and sends the previous
//! reply in one `io_uring_enter`, on the CPU the caller runs on. The queue threads run in
//! the idle scheduling class while requests come ([`MountOptions::queue_class`],
//! [`transport::sched`]), so that the reply's wake-up leaves the caller on that CPU too;
//! a guard moves a queue thread that starves behind busy programs back to the normal
//! class. [`Transport::Auto`] (the default) uses io_uring when it is available. When it
//! is not (the parameter is off, io_uring is disabled, the kernel refuses), one line on
//! stderr says why and the mount serves over `/dev/fuse`: a missing speed-up never fails
//! a mount.
//!
//! ## Permissions
//! Every request runs on a task with the caller's credentials, so uvfs's own checks
//! decide. Two modes ([`Permissions`]):
//! - `Kernel` (the default): the server also asks for `FUSE_POSIX_ACL`, which makes the
//!   kernel check permissions itself (mode bits and ACLs, with its cached attributes; the
//!   kernel turns `default_permissions` on with that flag) before a request is sent, and
//!   lets the server apply the umask itself (`FUSE_DONT_MASK`), so a directory's default
//!   ACL replaces the umask as on Linux. Since the kernel re-checks search permission on
//!   cached entries, entries, attributes and misses can be cached
//!   ([`MountOptions::entry_timeout`] ...): fast, and correct for a single-writer mount.
//! - `Uvfs`: the kernel checks nothing and uvfs alone decides every request (this is
//!   what pjdfstest measures uvfs's permission code with). The kernel does not ask the
//!   server before it walks through a cached entry, so entries and misses are not cached
//!   (their timeouts count as zero; attributes still are). Without `FUSE_POSIX_ACL` the
//!   kernel applies the umask before the server sees a mode, also under a directory with
//!   a default ACL (Linux would not). Some steps never reach the server, so under `Uvfs`
//!   nobody checks them: a `..` of a path (the kernel takes the parent it holds, so a
//!   caller walks out of a directory it may not search), the open of a fifo, socket or
//!   device node (the kernel opens those itself, so a caller opens a fifo whose mode
//!   refuses it). And a call that fails for two reasons may fail with the one the kernel
//!   finds first (EISDIR, ENOTDIR, the sticky bit's EPERM, or ENOENT of a rename's or
//!   link's other path) where Linux answers EACCES. `Kernel` has none of these.
//!
//! ## Kernel caching
//! uvfs is the only writer of what a mount serves (memfs; hostfs promised unchanged), so
//! the kernel may cache as long as it likes: changes made through the mount go through
//! its caches, and changes made in-process while mounted (another [`uvfs::Task`]) are
//! pushed to it as invalidations (`watch`: entries, attributes and pages, within about a
//! millisecond of the change; [`MountHandle::sync_invalidations`] waits for them). So by
//! default ([`MountOptions::default`]) names, attributes
//! and misses are cached for a day ([`LONG_TIMEOUT`]) and [`Levers::DEFAULT`] are pulled:
//!
//! | lever | saves | trade-off |
//! |---|---|---|
//! | `KEEP_CACHE` | a READ per page after every open | none while uvfs is the only writer |
//! | `CACHE_SYMLINKS` | a READLINK per walk through a symlink | none (a symlink's target never changes) |
//! | `CACHE_DIR` | READDIRs of an unchanged directory | none (dropped when its mtime moves) |
//! | `READDIRPLUS` | a LOOKUP per listed name used afterwards | a listing costs a lookup per name even when only names are wanted |
//! | `NO_OPENDIR` | OPENDIR + RELEASEDIR per listing | listings always cached (as `CACHE_DIR`); `Permissions::Kernel` only |
//! | `NO_OPEN` | OPEN + FLUSH + RELEASE per `open` of an existing regular file | the kernel keeps file locks (in-process locks do not see the mount's); in-process watches see each READ/WRITE as an open, access/modify and close; yields to `PASSTHROUGH` on a host directory; `Permissions::Kernel` only |
//! | `PASSTHROUGH` | a READ or WRITE per request on a hostfs file (module `passthrough`) | in-process watches miss those writes' MODIFY |
//! | `CACHED_READS` | on a host directory, a GETATTR per `stat` after each read of a file under 1 MiB, and its READs after the first open | the first read of such a file is a READ round trip instead of passthrough's none; a writer of a file open for reading goes through the server |
//! | `RELIST` | a GETATTR per file `stat`ed after it was read (the read made the kernel drop its atime): the directory's next listing refreshes them all | a listing after reads is read again (READDIRPLUS + GETATTR of the directory) |
//! | `KNOWN_ENTRIES` | a lookup on the server and a dentry update in the kernel per file listed by READDIRPLUS that the kernel knows with the attributes it was last given (a listing after an untar or a copy) | a file the kernel knows by another name only, or whose attributes it dropped where the server cannot see it (a rename, an unlink of its other name), is a LOOKUP or GETATTR at its next `stat` |
//! | `STATAHEAD` | on a host directory, the host calls (`getdents64`, an `fstatat` per entry, the disk reads under them) of each directory a walk enters, done on the walk's path: a `SCHED_IDLE` thread does them ahead for each directory a READDIRPLUS hands out for the first time (module `statahead`) | the CPU and host reads of directories listed but not entered (one level below what was listed, at most [`STATAHEAD_ENTRIES`] entries a directory), and their cached entries' memory (within the caches' limits) |
//! | `READAHEAD` | 7 of 8 READs of a file read in order (one per MiB, not per 128 KiB; root only) | a fault at a random place of a big mapped file reads 1 MiB around it, not 128 KiB |
//! | `DIRECT_WRITE` | for a write-only open: a second WRITE per `write` that starts inside a page, a GETXATTR at the first `write` | what was written is not left in the page cache (its first read is a READ) |
//! | `SERVER_LOCKS` (off) | nothing: it costs a FLUSH per `close` where the server sees opens | locks of the mount's processes and of in-process tasks see each other (off: the kernel keeps the mount's locks) |
//! | `NO_FLUSH` (off) | a FLUSH per `close` with `SERVER_LOCKS` | a POSIX lock taken through the mount is not released by `close` |
//! | `WRITEBACK_CACHE` (off) | a WRITE per `write` (batched at writeback) | the kernel owns size and mtime: in-process changes of them are not seen; no passthrough; `Permissions::Kernel` only; an append-only file (`chattr +a`) cannot be opened for appending nor `touch`ed; `st_blocks` leaves out the pages the kernel holds dirty |
//!
//! A tree that something else changes behind uvfs's back (hostfs revalidating the host)
//! gets [`MountOptions::host_changing`]: one-second timeouts and only the levers that stay
//! correct then ([`Levers::HOST_CHANGING`]). `uvfs mount --disable LEVER` turns one off.
//! Events inside the kernel's caches are not seen in-process: a read or `stat` served
//! from the page or attribute cache generates no access event for in-process watches, as
//! on any FUSE mount.
//!
//! ## File flags
//! The kernel sends `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS` (and the `FSGETXATTR` it reads
//! the old flags with) to the server as FUSE_IOCTL, which the caller's task answers, so
//! `chattr` and `lsattr` work as on tmpfs. The kernel enforces no flag of a FUSE inode:
//! uvfs refuses what an immutable or append-only file forbids when the request arrives.
//! After a `chattr` the kernel's cached ctime is the old one until its attribute timeout.

pub mod abi;
pub mod archive;
pub mod cli;
pub mod ident;
mod locks;
mod mount;
pub mod nodes;
mod passthrough;
pub mod reply;
pub mod request;
pub mod run;
mod server;
pub mod session;
mod statahead;
pub mod transport;
mod watch;

use std::ffi::CString;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use uvfs::{DirFd, OpenFlags, Vfs};

pub use cli::{MountArgs, run};
use session::{Session, UringState};
pub use transport::sched::QueueClass;

/// Who decides permissions (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Permissions {
    /// The kernel checks too (`FUSE_POSIX_ACL`), so entries can be cached.
    Kernel,
    /// uvfs alone; no entry caching.
    Uvfs,
}

/// How requests travel between the kernel and the server (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Transport {
    /// io_uring when available, else `/dev/fuse`.
    #[default]
    Auto,
    /// `read`/`write` on `/dev/fuse`.
    Dev,
    /// FUSE over io_uring (falls back to `/dev/fuse`, saying why, when unavailable).
    Uring,
}

bitflags::bitflags! {
    /// The kernel's levers a mount pulls: caches that last and round trips left out. Each
    /// is correct when uvfs is the only writer of what it serves (memfs; hostfs with
    /// `--host-unchanged`): changes made through the mount go through the kernel's caches,
    /// and changes made in-process are pushed to them as invalidations (`watch`).
    /// [`Levers::DEFAULT`] is what a mount uses unless told otherwise; each can be turned off
    /// (`uvfs mount --disable LEVER`) to measure it or to trade speed for another
    /// property. The crate docs ("Kernel caching") give each one's trade-off.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Levers: u32 {
        /// `FOPEN_KEEP_CACHE`: a file's pages stay cached across opens (else every open
        /// drops them and the next read asks the server again).
        const KEEP_CACHE = 1 << 0;
        /// `FUSE_CACHE_SYMLINKS`: symlink targets stay in the page cache (else every
        /// readlink and every walk through a symlink is a READLINK round trip).
        const CACHE_SYMLINKS = 1 << 1;
        /// `FOPEN_CACHE_DIR`: a directory's listing stays cached across opens while the
        /// directory's mtime does not move (else every `opendir` reads it again).
        const CACHE_DIR = 1 << 2;
        /// READDIRPLUS on every listing (else the kernel picks READDIR or READDIRPLUS by
        /// heuristics, and a READDIR is followed by a LOOKUP per name that is then used).
        const READDIRPLUS = 1 << 3;
        /// `FUSE_NO_OPENDIR_SUPPORT`: no OPENDIR/RELEASEDIR round trips; each READDIR opens
        /// the directory itself. The kernel then caches every listing as with
        /// [`Levers::CACHE_DIR`]. Only with [`Permissions::Kernel`], whose check at
        /// `opendir` stands for uvfs's (with `Uvfs` nobody would check at `opendir`).
        const NO_OPENDIR = 1 << 4;
        /// `FOPEN_NOFLUSH`: no FLUSH round trip at each `close`. Off by default: the kernel
        /// releases a process's POSIX locks on the server through FLUSH, so with this on a
        /// lock taken through the mount outlives the `close` that should drop it.
        const NO_FLUSH = 1 << 5;
        /// `FOPEN_PASSTHROUGH` (Linux 6.9+, root): an open regular file of a host directory
        /// is read, written and mapped by the kernel directly from the host file, without
        /// round trips (`passthrough`). In-process watches see no MODIFY for those writes.
        const PASSTHROUGH = 1 << 6;
        /// `FUSE_WRITEBACK_CACHE`: writes land in the kernel's page cache and reach the
        /// server later, in batches (else every `write` is a WRITE round trip). Off by
        /// default: the kernel then owns a regular file's size and mtime while it holds
        /// the inode (it ignores the server's), so an in-process change of them is not
        /// seen through the mount until the kernel forgets the inode (a file truncated
        /// in-process reads as zeros up to the old size), and `O_APPEND` is done by the
        /// kernel (appends are
        /// atomic among processes on the mount, not against in-process writers). Turns
        /// [`Levers::PASSTHROUGH`] off (a backed file has no page cache to write back).
        /// Only with [`Permissions::Kernel`]: the kernel sends `touch` as an explicit mtime
        /// of its own clock, so its check must stand for uvfs's.
        const WRITEBACK_CACHE = 1 << 7;
        /// `FUSE_NO_OPEN_SUPPORT`: no OPEN, FLUSH or RELEASE round trips for regular files
        /// (an open and a close of an existing file cost the server nothing; CREATE still
        /// comes). The kernel keeps the file's pages across opens (as
        /// [`Levers::KEEP_CACHE`]) and serves file locks itself, among the processes on
        /// the mount; each READ or WRITE of a file the kernel did not open is served by a
        /// file the server opens for that request alone. Trade-offs: locks taken through
        /// the mount and in-process locks no longer see each other; in-process watches see
        /// each such request as an open, the access or modify, and a close, instead of the
        /// caller's own open and close; an open for writing of an immutable or append-only
        /// file (`chattr`) fails at its first write instead of at `open` (with `O_TRUNC`
        /// at `open`, as on Linux). Only with [`Permissions::Kernel`] (the kernel's check
        /// at `open` stands for uvfs's) and [`Levers::KEEP_CACHE`], without the writeback
        /// cache, and not where
        /// [`Levers::PASSTHROUGH`] can back files (a mount whose root is a host
        /// directory): passthrough needs the OPEN, and saves more.
        const NO_OPEN = 1 << 8;
        /// `FOPEN_DIRECT_IO` on a file the kernel opens (or creates) write-only: its
        /// writes go to the server as they come, one WRITE per `write`, without the page
        /// cache. Through the page cache, a `write` that starts inside a page the cache
        /// does not hold whole is split in two WRITEs (the kernel stops a request at such
        /// a page), as is every `write` of an untar after its first block, and the first
        /// `write` after an open asks GETXATTR `security.capability` (`file_remove_privs`;
        /// a direct write leaves clearing setuid and capabilities to the server, which
        /// does it as uvfs does). The cost: what was written is not left in the page
        /// cache, so the first read of it is a READ (through the cache it mostly was too:
        /// the partial last page is not kept). Only where the kernel invalidates cached
        /// pages before a direct write (Linux 6.6+, FUSE 7.39), not with the writeback
        /// cache, and not on files passthrough backs.
        const DIRECT_WRITE = 1 << 9;
        /// After the first READ of a file of a directory since the kernel last listed it,
        /// the server tells the kernel to drop the directory's cached listing and attributes
        /// (`FUSE_NOTIFY_INVAL_INODE`, from a thread of its own). The kernel forgets a
        /// file's attributes after each read that reaches the server (its atime moved), so
        /// a `stat` of each file read is a GETATTR; with this the next listing of the
        /// directory is a READDIRPLUS, which brings back the attributes of all its files
        /// at once: `find` or `ls -l` after `grep -r` or a build costs a round trip or two
        /// per directory instead of one per file. The cost: a listing after reads is read
        /// again (a READDIRPLUS and a GETATTR of the directory) where it was cached, also
        /// when no `stat` follows (`rm -rf`). Only with [`Levers::READDIRPLUS`] and cached
        /// listings ([`Levers::CACHE_DIR`] or [`Levers::NO_OPENDIR`]); files passthrough
        /// serves are read without READs and do not count.
        const RELIST = 1 << 10;
        /// File locks kept by uvfs's lock manager (`crate::locks`) where the server sees
        /// opens (a host directory, whose opens carry passthrough, or without
        /// [`Levers::NO_OPEN`]): the kernel sends `flock` and `fcntl` locks to the server
        /// (`FUSE_POSIX_LOCKS`, `FUSE_FLOCK_LOCKS`), so processes on the mount and
        /// in-process tasks see each other's locks. The cost: a FLUSH round trip at every
        /// `close`, through which the kernel releases a process's POSIX locks on the server.
        /// Off by default: the kernel keeps the locks of the mount's processes itself, as
        /// with [`Levers::NO_OPEN`] (they exclude each other as on any filesystem; an
        /// in-process task does not see them, nor they its locks), and the server answers
        /// the first FLUSH ENOSYS, after which the kernel sends none.
        const SERVER_LOCKS = 1 << 11;
        /// An open for reading only of a host file smaller than [`CACHED_READ_MAX`], which
        /// [`Levers::PASSTHROUGH`] would back, is served through the page cache instead
        /// (the server's READs, whose pages [`Levers::KEEP_CACHE`] keeps across opens),
        /// unless an open of it is backed now. Through passthrough the kernel forgets a
        /// file's attributes at every read (its atime), so the `stat` or `fstat` after
        /// each read of a small file was a GETATTR, and `grep -r` or `find` over a source
        /// tree paid one per file every time; read through the page cache, a file costs a
        /// READ once and then nothing, and [`Levers::RELIST`] brings the attributes back by
        /// directory. Big files, and every open that writes, keep passthrough. A node's
        /// open files are all backed or all cached (the kernel fails an open of the other
        /// kind with EIO), so a writer of a file open cached is served through the server;
        /// and the kernel drops a file's pages at each backed open, so a cached open after
        /// a write through the backing file reads the new data. Only with
        /// [`Levers::KEEP_CACHE`].
        const CACHED_READS = 1 << 12;
        /// A READDIRPLUS lists a file (not a directory) that the kernel knows, and whose
        /// attributes it holds as the server last gave them, without attributes (node id
        /// 0: the kernel keeps its dentry and attributes as they are): no lookup on the
        /// server and no dentry update in the kernel, for each entry of a listing after an
        /// untar or a copy, whose files the kernel learned of as they were made. A file
        /// opened, read or written, read as a symlink, linked, renamed, given xattrs or
        /// flags, or changed in-process since gets its attributes as before (the kernel
        /// dropped or changed them). The cost: a file the
        /// kernel knows by another name only (a hard link), or whose attributes it dropped
        /// where the server cannot see it (a rename, an unlink of its other name), is then
        /// a LOOKUP or GETATTR at its next `stat` instead of none.
        const KNOWN_ENTRIES = 1 << 13;
        /// A directory that a READDIRPLUS hands the kernel for the first time is listed,
        /// and its entries looked up, ahead of the kernel's own listing of it, by a
        /// `SCHED_IDLE` thread of the server (`statahead`, after Lustre's): a walk of a
        /// tree through the mount finds the host's directory blocks and inodes, and
        /// uvfs's dentries, ready instead of waiting for them at each directory. Only
        /// where a lookup costs host calls (a mount whose root is a host directory). The
        /// cost: the CPU and host reads of directories a listing showed but nobody
        /// entered (one level below what was listed, at most [`STATAHEAD_ENTRIES`] entries
        /// a directory), and the memory of their cached entries (within the caches'
        /// limits).
        const STATAHEAD = 1 << 14;
        /// The mount's readahead window raised from the kernel's 128 KiB to
        /// [`READAHEAD_KIB`] (its `read_ahead_kb` in `/sys/class/bdi`, which only root
        /// may write; INIT cannot raise it): a file read in order costs one READ per MiB
        /// instead of one per 128 KiB. The cost: a page fault in a mapped file reads a
        /// window that large around it (unless the mapping is `MADV_RANDOM`), so faults
        /// at random places of a big mapped file cost more; a small file is read whole
        /// either way. Without root, a one-line notice and the kernel's window.
        const READAHEAD = 1 << 15;
    }
}

/// [`Levers::STATAHEAD`]: entries of one directory looked up ahead at most.
pub const STATAHEAD_ENTRIES: usize = statahead::ENTRIES_MAX;

/// [`Levers::READAHEAD`]: the readahead window asked for, in KiB (the largest READ the
/// kernel sends, `max_pages`).
pub const READAHEAD_KIB: u32 = (session::MAX_WRITE / 1024) as u32;

/// [`Levers::CACHED_READS`]: the size below which a host file opened for reading only is
/// served through the page cache (a source file, not a disk image or a database).
pub const CACHED_READ_MAX: u64 = 1 << 20;

impl Levers {
    /// The levers a mount pulls by default: all but [`Levers::NO_FLUSH`],
    /// [`Levers::WRITEBACK_CACHE`] and [`Levers::SERVER_LOCKS`].
    pub const DEFAULT: Levers = Levers::KEEP_CACHE
        .union(Levers::CACHE_SYMLINKS)
        .union(Levers::CACHE_DIR)
        .union(Levers::READDIRPLUS)
        .union(Levers::NO_OPENDIR)
        .union(Levers::PASSTHROUGH)
        .union(Levers::NO_OPEN)
        .union(Levers::DIRECT_WRITE)
        .union(Levers::RELIST)
        .union(Levers::CACHED_READS)
        .union(Levers::KNOWN_ENTRIES)
        .union(Levers::STATAHEAD)
        .union(Levers::READAHEAD);
    /// What stays correct when something else changes the served tree behind uvfs's back
    /// (hostfs without `--host-unchanged`): caches of names and attributes expire with
    /// their (short) timeouts, but pages and listings would not, so those levers are off.
    /// (A bigger readahead window reads more ahead within one open; it caches nothing
    /// across opens.)
    pub const HOST_CHANGING: Levers = Levers::CACHE_SYMLINKS
        .union(Levers::READDIRPLUS)
        .union(Levers::PASSTHROUGH)
        .union(Levers::DIRECT_WRITE)
        .union(Levers::READAHEAD);
}

/// [`MountHandle::follower_counts`]: what the `/dev/fuse` workers that did not poll did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FollowerCounts {
    /// Returns from a wait for the device.
    pub wakes: u64,
    /// Parks while another worker polled.
    pub parks: u64,
    /// Looks at the poller by the parked follower that keeps watch.
    pub looks: u64,
    /// Calls back because the poller was on one request for `transport::dev::HELP_AFTER`.
    pub rescues: u64,
    /// Pauses of polling because the poller's CPU had gone to other threads
    /// (`transport::dev::CONTENDED`).
    pub backoffs: u64,
    /// Polling windows begun on the caller's CPU in `SCHED_IDLE` ([`QueueClass::Idle`]).
    pub seats: u64,
    /// Moves of such a poller back to the normal class, starving while a request waited.
    pub unseats: u64,
    /// Times such a poller followed its caller to another CPU.
    pub moves: u64,
}

/// How long the kernel keeps names, attributes and misses by default: a day, since uvfs
/// invalidates what changes in-process; in practice "until invalidated or evicted".
pub const LONG_TIMEOUT: Duration = Duration::from_secs(86_400);

/// [`MountOptions::busy_poll`]'s default: longer than the gap between the requests of one
/// program that makes them back to back (an untar's are 5-20 us apart), short enough that
/// an idle mount costs nothing.
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(50);

/// How to serve.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// How long the kernel may keep a name -> node entry.
    pub entry_timeout: Duration,
    /// How long the kernel may keep attributes.
    pub attr_timeout: Duration,
    /// How long the kernel may keep a miss (ENOENT).
    pub negative_timeout: Duration,
    /// Worker threads reading requests from `/dev/fuse`.
    pub threads: usize,
    /// How long one `/dev/fuse` worker keeps asking for the next request after answering
    /// one, before it sleeps (zero: never; see [`transport::dev`]). A request arriving in
    /// that time is taken without waking a thread, which saves a third of the round trip
    /// of a metadata request on the machine of BENCHMARKS.md, at the price of the CPU the
    /// worker spends asking (it yields to any runnable program between attempts, and stops
    /// for a while when a yield shows the CPUs busy with other work). Default
    /// [`DEFAULT_BUSY_POLL`] with two or more CPUs, else zero. The io_uring transport
    /// does not poll.
    pub busy_poll: Duration,
    /// Who decides permissions.
    pub permissions: Permissions,
    /// How requests travel.
    pub transport: Transport,
    /// The scheduling class of the io_uring queue threads ([`transport::sched`]) and of
    /// the `/dev/fuse` poller, which then also sits on its caller's CPU for its window
    /// ([`transport::dev`]): `SCHED_IDLE` by default, so that a caller stays on its CPU
    /// when the reply wakes it.
    pub queue_class: QueueClass,
    /// Invalidate kernel caches when the in-process API changes something.
    pub watch: bool,
    /// Let every user use the mount (`allow_other`; needs root or `user_allow_other`).
    pub allow_other: bool,
    /// The kernel caching and round-trip levers pulled.
    pub levers: Levers,
    /// Tests only: a lookup of this name panics in the handler (to show that a panic is
    /// answered with EIO and the mount keeps serving).
    #[doc(hidden)]
    pub panic_on_lookup: Option<Vec<u8>>,
    /// Tests only: mount through `fusermount3` also as root (the path taken without the
    /// privilege to call `mount(2)`).
    #[doc(hidden)]
    pub fusermount: bool,
    /// Tests only: busy polling goes on when a yield shows the CPUs busy with other work
    /// (it pauses by default, see [`MountOptions::busy_poll`]). For the tests of polling
    /// itself, which run beside each other on a few CPUs, and to show what the pause
    /// changes.
    #[doc(hidden)]
    pub poll_on_busy_cpus: bool,
    /// Print the requests received, by opcode, to stderr when the mount ends.
    pub stats: bool,
    /// Show owners the server's user namespace does not map (the overflow id, 65534) as
    /// root: for a server in a user namespace (`uvfs run`) over host files whose owners
    /// it cannot map, which the kernel would otherwise refuse to let anyone write.
    pub squash_unmapped: bool,
    /// Unmount also when this process is killed: a small shell waits for the process to
    /// end and detaches the mount if it is still there (libfuse's `auto_unmount`), so a
    /// killed server leaves no dead mount behind; as root it also aborts the connection,
    /// which lets a thread of the killed process that waited in its own mount end. On by
    /// default.
    pub auto_unmount: bool,
    /// Say in one line on stderr when a speed-up the mount asked for is not available
    /// (FUSE over io_uring, the idle class, a larger readahead window, passthrough) and
    /// what is used instead; the mount serves either way. On by default; `uvfs run` turns
    /// it off, as the sandboxed command's stderr is the command's own.
    pub notices: bool,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        MountOptions {
            entry_timeout: LONG_TIMEOUT,
            attr_timeout: LONG_TIMEOUT,
            negative_timeout: LONG_TIMEOUT,
            threads: cpus.clamp(2, 8),
            // On one CPU the poller would only take the CPU from the caller it waits for.
            busy_poll: if cpus >= 2 { DEFAULT_BUSY_POLL } else { Duration::ZERO },
            permissions: Permissions::Kernel,
            transport: Transport::Auto,
            queue_class: QueueClass::Idle,
            watch: true,
            allow_other: rustix_is_root(),
            levers: Levers::DEFAULT,
            panic_on_lookup: None,
            fusermount: false,
            poll_on_busy_cpus: false,
            stats: false,
            squash_unmapped: false,
            auto_unmount: true,
            notices: true,
        }
    }
}

impl MountOptions {
    /// No kernel caching at all (the benchmark's FUSE target).
    pub fn uncached() -> MountOptions {
        MountOptions {
            entry_timeout: Duration::ZERO,
            attr_timeout: Duration::ZERO,
            negative_timeout: Duration::ZERO,
            levers: Levers::empty(),
            ..MountOptions::default()
        }
    }

    /// For a tree that something else may change behind uvfs's back (a hostfs that
    /// revalidates): one-second timeouts and [`Levers::HOST_CHANGING`].
    pub fn host_changing() -> MountOptions {
        let second = Duration::from_secs(1);
        MountOptions {
            entry_timeout: second,
            attr_timeout: second,
            negative_timeout: second,
            levers: Levers::HOST_CHANGING,
            ..MountOptions::default()
        }
    }
}

fn rustix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn new_server(vfs: &Vfs, opts: &MountOptions) -> io::Result<Arc<server::Server>> {
    let base = Arc::new(vfs.root_task());
    let e = |e: uvfs::Errno| io::Error::from_raw_os_error(e.raw());
    let root = base.openat_file(DirFd::Cwd, b"/", OpenFlags::PATH | OpenFlags::DIRECTORY, 0).map_err(e)?;
    let st = base.fstat(&root).map_err(e)?;
    // A root whose filesystem has host files to back opens with (hostfs) keeps OPEN for
    // passthrough (`Levers::NO_OPEN`).
    let inode = root.inode();
    let host_backed = inode.sb().fs().with_host_fd(inode, &mut |_| Ok(())) != Err(uvfs::Errno::EOPNOTSUPP);
    let no_open = opts.levers.contains(Levers::NO_OPEN | Levers::KEEP_CACHE)
        && opts.permissions == Permissions::Kernel
        && !opts.levers.contains(Levers::WRITEBACK_CACHE)
        && !(opts.levers.contains(Levers::PASSTHROUGH) && host_backed);
    // Server locks need the opens (a `flock` belongs to an open file).
    let server_locks = opts.levers.contains(Levers::SERVER_LOCKS) && !no_open;
    // Lookups ahead pay only where a lookup costs host calls.
    let statahead = (opts.levers.contains(Levers::STATAHEAD) && host_backed).then(Default::default);
    Ok(Arc::new(server::Server {
        no_open,
        server_locks,
        nodes: nodes::Nodes::new(root, (st.dev, st.ino)),
        handles: nodes::Handles::default(),
        tasks: ident::Tasks::new(base),
        opts: opts.clone(),
        watch: std::sync::OnceLock::new(),
        watch_handled: parking_lot::Mutex::new(0),
        watch_done: parking_lot::Condvar::new(),
        kernel_acl: AtomicBool::new(false),
        writeback: AtomicBool::new(false),
        direct_write: AtomicBool::new(false),
        relist: std::sync::OnceLock::new(),
        relisted: Default::default(),
        passthrough: Default::default(),
        requests: std::array::from_fn(|_| Default::default()),
        locks: Default::default(),
        bare_entries: Default::default(),
        statahead,
        listing_fs_lookups: Default::default(),
    }))
}

/// A mount being served: the session, its threads and the invalidation thread. Owned by
/// one thread (the `MountHandle`'s or `serve`'s caller); the fields are immutable once
/// started, except the thread handles, taken when joined.
struct Running {
    session: Arc<Session>,
    server: Arc<server::Server>,
    /// The canonical mount point.
    mountpoint: CString,
    /// The fusectl connection id (the mount's minor device number; 0 if unknown).
    conn: u64,
    /// `/dev/fuse` workers and io_uring queue threads; they end with the connection.
    workers: Vec<JoinHandle<()>>,
    /// What the idle-class queues' guard counts (with [`QueueClass::Idle`] on io_uring).
    sched: Option<Arc<transport::sched::Shared>>,
    /// Atomic: tells the invalidation thread to stop.
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
    /// The thread sending `Levers::RELIST`'s invalidations; ends when told (`join`).
    relister: Option<JoinHandle<()>>,
    /// The statahead thread (`Levers::STATAHEAD`); ends when told (`join`).
    statahead: Option<JoinHandle<()>>,
    /// Unmounts if this process dies first ([`MountOptions::auto_unmount`]); dropped
    /// (it then ends) once the connection ended.
    guardian: Option<mount::Guardian>,
    /// Immutable: whether the readahead window was raised ([`Levers::READAHEAD`]).
    readahead: bool,
}

/// Mounts, starts the transport's threads and waits until INIT settled what they use.
fn start(vfs: &Vfs, mountpoint: &Path, opts: &MountOptions) -> io::Result<Running> {
    let server = new_server(vfs, opts)?;
    let (queues, uring) = match opts.transport {
        Transport::Dev => (None, UringState::NotRequested),
        Transport::Auto | Transport::Uring => match transport::uring::Queues::prepare(opts.queue_class) {
            Ok(q) => (Some(q), UringState::Prepared),
            Err(why) => (None, UringState::Off(why)),
        },
    };
    let mut guardian = if opts.auto_unmount { mount::Guardian::start(mountpoint) } else { None };
    let m = match mount::mount(mountpoint, opts.allow_other, opts.fusermount) {
        Ok(m) => m,
        Err(e) => {
            if let Some(q) = queues {
                q.cancel();
            }
            return Err(e);
        }
    };
    let nqueues = queues.as_ref().map_or(0, |q| q.len());
    let session = Arc::new(Session::new(server.clone(), m.dev, uring, nqueues));
    let conn = exit_guard::conn_of(&m.mountpoint);
    if let Some(g) = guardian.as_mut() {
        g.arm(conn);
    }
    let spawned =
        transport::dev::spawn(&session, opts.threads, opts.busy_poll, !opts.poll_on_busy_cpus, opts.queue_class);
    let (mut workers, unseatable) = match spawned {
        Ok(w) => w,
        Err(e) => {
            exit_guard::abort(conn);
            let _ = mount::unmount(&m.mountpoint, conn);
            session.set_gone();
            if let Some(q) = queues {
                q.cancel();
            }
            return Err(e);
        }
    };
    let idle_unavailable = queues.as_ref().and_then(|q| q.idle_unavailable.clone());
    let mut sched = None;
    if let Some(q) = queues {
        let (threads, shared) = q.start(&session);
        workers.extend(threads);
        sched = shared;
    }
    session.wait_settled();
    if opts.notices
        && let UringState::Off(why) = session.uring()
        && opts.transport != Transport::Dev
    {
        eprintln!("uvfs mount: FUSE over io_uring not available ({why}): using /dev/fuse");
    } else if opts.notices
        && let Some(why) = idle_unavailable
        && session.uring_active()
    {
        eprintln!("uvfs mount: idle-class io_uring queues not available ({why}): normal class");
    }
    if opts.notices
        && let Some(why) = unseatable
        && !session.uring_active()
    {
        eprintln!(
            "uvfs mount: the /dev/fuse poller cannot sit on its caller's CPU in the idle class ({why}): normal class"
        );
    }
    let readahead = opts.levers.contains(Levers::READAHEAD)
        && match mount::raise_readahead(conn, READAHEAD_KIB) {
            Ok(()) => true,
            Err(why) => {
                if opts.notices {
                    eprintln!(
                        "uvfs mount: a {READAHEAD_KIB} KiB readahead window not available ({why}): the kernel's own"
                    );
                }
                false
            }
        };
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = if opts.watch { watch::spawn(server.clone(), session.notifier(), stop.clone()) } else { None };
    let relister = if server.relist_wanted() { watch::spawn_relist(&server, session.notifier()) } else { None };
    // (Without its thread nothing is looked up ahead: a missing speed-up, not a failure.)
    let statahead =
        server.statahead.as_ref().and_then(|sa| statahead::spawn(sa.clone(), Arc::new(vfs.root_task())).ok());
    Ok(Running {
        session,
        server,
        mountpoint: m.mountpoint,
        conn,
        workers,
        sched,
        stop,
        watcher,
        relister,
        statahead,
        guardian,
        readahead,
    })
}

impl Running {
    /// Joins the threads once the connection ended, and releases the nodes.
    fn join(&mut self) {
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
        self.session.set_gone();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        if let Some(w) = self.relister.take() {
            self.server.stop_relist();
            let _ = w.join();
        }
        if let Some(sa) = &self.server.statahead {
            // Also without a thread: what a worker queued meanwhile is dropped.
            sa.stop();
        }
        if let Some(w) = self.statahead.take() {
            let _ = w.join();
        }
        release(&self.server);
        // The mount is gone: its guardian ends.
        drop(self.guardian.take());
    }

    fn transport(&self) -> Transport {
        if self.session.uring_active() { Transport::Uring } else { Transport::Dev }
    }
}

/// A mount served in the background; dropping it unmounts.
pub struct MountHandle {
    /// The mount, until unmounted (owned by the handle).
    run: Option<Running>,
    /// The fusectl connection id registered with the exit guard.
    live: u64,
}

impl MountHandle {
    /// Unmounts and waits for the workers.
    pub fn unmount(mut self) -> io::Result<()> {
        self.finish()
    }

    /// Whether the kernel accepted `FUSE_POSIX_ACL` (kernel permission checks).
    pub fn kernel_acl(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.server.kernel_acl.load(Ordering::Relaxed))
    }

    /// The levers this mount pulls (as asked, except [`Levers::NO_OPEN`],
    /// [`Levers::STATAHEAD`] and [`Levers::READAHEAD`], which are there only if this
    /// mount can use them; `NO_OPENDIR` counts only with [`Permissions::Kernel`]).
    pub fn levers(&self) -> Levers {
        self.run.as_ref().map_or(Levers::empty(), |r| {
            let mut l = r.server.opts.levers;
            l.set(Levers::NO_OPEN, r.server.no_open);
            l.set(Levers::SERVER_LOCKS, r.server.server_locks);
            l.set(Levers::STATAHEAD, r.server.statahead.is_some());
            l.set(Levers::READAHEAD, r.readahead);
            l
        })
    }

    /// READ and WRITE requests answered so far.
    pub fn data_requests(&self) -> (u64, u64) {
        let n = |op: u32| self.run.as_ref().map_or(0, |r| r.server.requests[op as usize].load(Ordering::Relaxed));
        (n(abi::opcode::READ), n(abi::opcode::WRITE))
    }

    /// Requests a busy-polling worker took without sleeping ([`MountOptions::busy_poll`]).
    pub fn polled(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| r.session.polled.load(Ordering::Relaxed))
    }

    /// Times a busy-polling worker polled after a reply (each a window of CPU time spent
    /// asking, whether or not a request came in it).
    pub fn poll_windows(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| r.session.poll_windows.load(Ordering::Relaxed))
    }

    /// What the `/dev/fuse` workers that did not poll did ([`transport::dev`]): times they
    /// were woken by the device, parked while another polled, looked at the poller while
    /// parked, and called themselves back because it was on one request too long.
    pub fn follower_counts(&self) -> FollowerCounts {
        let n = |f: fn(&transport::dev::CrewStats) -> &AtomicU64| {
            self.run.as_ref().map_or(0, |r| f(&r.session.crew).load(Ordering::Relaxed))
        };
        FollowerCounts {
            wakes: n(|c| &c.wakes),
            parks: n(|c| &c.parks),
            looks: n(|c| &c.looks),
            rescues: n(|c| &c.rescues),
            backoffs: n(|c| &c.backoffs),
            seats: n(|c| &c.seats),
            unseats: n(|c| &c.unseats),
            moves: n(|c| &c.moves),
        }
    }

    /// Moves of io_uring queue threads into `SCHED_IDLE`, and back out of it after one
    /// starved ([`QueueClass::Idle`]; zeros in the normal class or without io_uring).
    pub fn queue_class_moves(&self) -> (u64, u64) {
        self.run
            .as_ref()
            .and_then(|r| r.sched.as_ref())
            .map_or((0, 0), |s| (s.promotions.load(Ordering::Relaxed), s.demotions.load(Ordering::Relaxed)))
    }

    /// Returns once every change made in-process (through another [`uvfs::Task`] of the
    /// served [`Vfs`]) before the call has reached the kernel's caches: a process that
    /// looks through the mount afterwards sees it. The mount pushes such changes to the
    /// kernel as invalidations from one thread, in order, normally well under a
    /// millisecond after the change; a program that changes files in-process and then
    /// starts another that reads them through the mount calls this in between. Returns at
    /// once where in-process changes are not pushed ([`MountOptions::watch`] off).
    pub fn sync_invalidations(&self) {
        let Some(r) = self.run.as_ref() else { return };
        let Some(ino) = r.server.watch.get().filter(|_| r.watcher.is_some()) else { return };
        let target = ino.queued_total();
        let mut handled = r.server.watch_handled.lock();
        while *handled < target {
            r.server.watch_done.wait(&mut handled);
        }
    }

    /// Directories whose cached listing the kernel was told to drop after their files
    /// were read ([`Levers::RELIST`]), counted once the notification is written.
    pub fn relisted(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| r.server.relisted.load(Ordering::Relaxed))
    }

    /// READDIRPLUS entries of files the kernel knew, listed without attributes so far
    /// ([`Levers::KNOWN_ENTRIES`]).
    pub fn bare_entries(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| r.server.bare_entries.load(Ordering::Relaxed))
    }

    /// Directories listed ahead by statahead so far, and the entries it looked up
    /// ([`Levers::STATAHEAD`]).
    pub fn statahead_counts(&self) -> (u64, u64) {
        self.run
            .as_ref()
            .and_then(|r| r.server.statahead.as_ref())
            .map_or((0, 0), |sa| (sa.dirs.load(Ordering::Relaxed), sa.entries.load(Ordering::Relaxed)))
    }

    /// Names listings looked up that uvfs's dentry cache did not hold, so far: READDIR and
    /// READDIRPLUS entries the filesystem was asked for on the request's path (what
    /// [`Levers::STATAHEAD`] does ahead).
    pub fn listing_fs_lookups(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| r.server.listing_fs_lookups.load(Ordering::Relaxed))
    }

    /// Reads of a caller's supplementary groups from `/proc` so far (a request reads them
    /// only when one of its checks needs them: [`crate::ident`]).
    pub fn group_reads(&self) -> u64 {
        self.run.as_ref().map_or(0, |r| r.server.tasks.group_reads())
    }

    /// Requests received so far, by opcode name, the most frequent first.
    pub fn requests(&self) -> Vec<(&'static str, u64)> {
        self.run.as_ref().map_or_else(Vec::new, |r| r.server.request_counts())
    }

    /// Whether opens of host files get a backing file (FUSE passthrough).
    pub fn passthrough(&self) -> bool {
        self.run.as_ref().is_some_and(|r| r.server.passthrough.active())
    }

    /// Number of nodes the kernel holds (the root included).
    pub fn nodes(&self) -> usize {
        self.run.as_ref().map_or(0, |r| r.server.nodes.len())
    }

    /// The transport requests travel by: [`Transport::Uring`] when every io_uring queue
    /// registered, else [`Transport::Dev`].
    pub fn transport(&self) -> Transport {
        self.run.as_ref().map_or(Transport::Dev, Running::transport)
    }

    /// Why io_uring is not used, if it was asked for and is not.
    pub fn uring_unavailable(&self) -> Option<String> {
        match self.run.as_ref()?.session.uring() {
            UringState::Off(why) => Some(why),
            _ => None,
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        let Some(mut run) = self.run.take() else { return Ok(()) };
        // Files still open on the mount (by this process or others) would keep the
        // detached connection, and so the join below, alive forever: abort it first,
        // as `umount -f` would. Nothing is lost: memfs lives in `Vfs`, not in the mount.
        exit_guard::abort(run.conn);
        let r = mount::unmount(&run.mountpoint, run.conn);
        run.join();
        exit_guard::remove(self.live);
        r
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Releases what the kernel left open (its nodes and open files) after the session
/// ended.
fn release(s: &server::Server) {
    s.stop_lock_waits();
    s.passthrough.clear();
    drop(s.nodes.drain());
    drop(s.handles.drain());
    s.tasks.clear();
}

/// Mounts `vfs` at `mountpoint` and serves it from background threads.
///
/// A process that serves its own mount must not exit with files open on it: the kernel
/// closes them at exit, after the serving threads are gone, and would wait forever for
/// the answers. So the mounts made here and not unmounted yet are aborted (through the
/// fusectl filesystem) and detached by an `atexit` handler when the process exits
/// normally.
pub fn spawn(vfs: &Vfs, mountpoint: &Path, opts: &MountOptions) -> io::Result<MountHandle> {
    let run = start(vfs, mountpoint, opts)?;
    let live = exit_guard::add(run.conn, &run.mountpoint);
    Ok(MountHandle { run: Some(run), live })
}

/// The `atexit` safety net of [`spawn`].
mod exit_guard {
    use std::ffi::CString;
    use std::path::Path;

    use parking_lot::Mutex;

    /// (fusectl connection id, mount point) of live background mounts.
    static LIVE: Mutex<Vec<(u64, CString)>> = Mutex::new(Vec::new());
    static ONCE: std::sync::Once = std::sync::Once::new();

    /// The connection id of the FUSE mount on `mp` (the last one mounted there), from
    /// `/proc/self/mountinfo` (a `stat` would be a request to ourselves); 0 if not found.
    pub(crate) fn conn_of(mp: &CString) -> u64 {
        let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return 0 };
        let want = String::from_utf8_lossy(mp.as_bytes()).into_owned();
        info.lines()
            .rev()
            .find_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                let sep = f.iter().position(|&x| x == "-")?;
                let ok = f.get(sep + 1)?.starts_with("fuse") && crate::mount::unescape(f.get(4)?) == want;
                let (_, minor) = f.get(2)?.split_once(':')?;
                if ok { minor.parse().ok() } else { None }
            })
            .unwrap_or(0)
    }

    /// Aborts connection `id` through fusectl (mounted first if it is not).
    pub(crate) fn abort(id: u64) {
        if id == 0 {
            return;
        }
        let ctl = Path::new("/sys/fs/fuse/connections");
        if std::fs::read_dir(ctl).is_ok_and(|mut d| d.next().is_none()) {
            // SAFETY: valid C strings; mounting fusectl is harmless if it fails.
            unsafe {
                libc::mount(
                    c"fusectl".as_ptr(),
                    c"/sys/fs/fuse/connections".as_ptr(),
                    c"fusectl".as_ptr(),
                    0,
                    std::ptr::null(),
                );
            }
        }
        let _ = std::fs::write(ctl.join(id.to_string()).join("abort"), "1");
    }

    extern "C" fn on_exit() {
        let live = std::mem::take(&mut *LIVE.lock());
        for (id, mp) in live {
            abort(id);
            // SAFETY: valid C string.
            unsafe { libc::umount2(mp.as_ptr(), libc::MNT_DETACH) };
        }
    }

    /// Registers a mount; returns its connection id (0 if unknown).
    pub(crate) fn add(id: u64, mp: &CString) -> u64 {
        if id == 0 {
            return 0;
        }
        ONCE.call_once(|| {
            // SAFETY: registering a plain extern "C" function.
            unsafe { libc::atexit(on_exit) };
        });
        LIVE.lock().push((id, mp.clone()));
        id
    }

    /// Unregisters a mount that was unmounted.
    pub(crate) fn remove(id: u64) {
        LIVE.lock().retain(|(i, _)| *i != id);
    }
}

/// Mounts `vfs` at `mountpoint` and serves it until it is unmounted. `on_mounted` runs once
/// the kernel accepted the mount and gets a function that unmounts (for a signal handler)
/// and the mount's [`Stats`] (which `--stats` prints at the end, and on `SIGUSR1`).
pub fn serve(
    vfs: &Vfs,
    mountpoint: &Path,
    opts: &MountOptions,
    on_mounted: impl FnOnce(Box<dyn FnMut() + Send>, Stats),
) -> io::Result<()> {
    let mut run = start(vfs, mountpoint, opts)?;
    let (mp, conn) = (run.mountpoint.clone(), run.conn);
    let stats = Stats {
        server: run.server.clone(),
        session: run.session.clone(),
        sched: run.sched.clone(),
        busy_poll: opts.busy_poll > Duration::ZERO,
    };
    on_mounted(
        Box::new(move || {
            let _ = mount::unmount(&mp, conn);
        }),
        stats.clone(),
    );
    run.join();
    if opts.stats {
        eprint!("{}", stats.report());
    }
    Ok(())
}

/// What a mount has counted so far: requests by opcode, the `/dev/fuse` followers, the
/// idle-class queues' moves. Cheap to clone; read while the mount serves, too.
#[derive(Clone)]
pub struct Stats {
    /// Immutable: the mount's server, session and queue guard (they count atomically).
    server: Arc<server::Server>,
    session: Arc<Session>,
    sched: Option<Arc<transport::sched::Shared>>,
    busy_poll: bool,
}

impl Stats {
    /// The counts so far, one `uvfs mount: ...` line each (the first: every request by
    /// opcode, the form `uvfs bench --case workloads` parses).
    pub fn report(&self) -> String {
        let mut out = String::new();
        let counts = self.server.request_counts();
        let total: u64 = counts.iter().map(|(_, n)| n).sum();
        let list: Vec<String> = counts.iter().map(|(op, n)| format!("{op} {n}")).collect();
        let polled = self.session.polled.load(Ordering::Relaxed);
        out += &format!("uvfs mount: {total} requests ({polled} taken by busy polling): {}\n", list.join(", "));
        let reads = self.server.tasks.group_reads();
        out += &format!("uvfs mount: callers' supplementary groups read from /proc {reads} times\n");
        if let Some(sa) = &self.server.statahead {
            let (d, e) = (sa.dirs.load(Ordering::Relaxed), sa.entries.load(Ordering::Relaxed));
            out += &format!("uvfs mount: statahead listed {d} directories ahead, {e} entries\n");
        }
        if self.busy_poll && !self.session.uring_active() {
            let c = &self.session.crew;
            let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
            out += &format!(
                "uvfs mount: /dev/fuse followers woken by the device {} times, parked {} times, \
                 looked at the poller {} times, called back by a slow request {} times; \
                 polling paused for busy CPUs {} times; the poller on its caller's CPU in the idle class \
                 {} times, followed it to another CPU {} times, moved back for starving {} times\n",
                n(&c.wakes),
                n(&c.parks),
                n(&c.looks),
                n(&c.rescues),
                n(&c.backoffs),
                n(&c.seats),
                n(&c.moves),
                n(&c.unseats)
            );
        }
        if let Some(s) = &self.sched {
            let (p, d) = (s.promotions.load(Ordering::Relaxed), s.demotions.load(Ordering::Relaxed));
            out += &format!("uvfs mount: queue threads moved to SCHED_IDLE {p} times, back after starving {d} times\n");
        }
        out
    }
}
