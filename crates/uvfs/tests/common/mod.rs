//! The differential harness: one call sequence, run against the host kernel and against
//! uvfs, compared call by call (results and errnos).
//!
//! Host side: a fresh thread per sequence that unshares its fs context and fd table
//! (`unshare(CLONE_FS | CLONE_FILES)`), closes every inherited descriptor, chroots into
//! a fresh directory on tmpfs (`/dev/shm`) and sets its ids with the raw syscalls (which,
//! unlike glibc's wrappers, change only the calling thread). So absolute paths, `..` at
//! the root, `getcwd` and descriptor numbers (lowest free, from 0) mean the same thing on
//! both sides, and the test process itself is untouched. This is the per-thread form of
//! "fork and chroot": cheaper, and safe in the multi-threaded test harness.
//!
//! uvfs side: a fresh `Vfs` whose root plays the chroot directory, one task.
//!
//! Known, documented uvfs design choices the harness accounts for:
//! - opening a fifo, socket or device node in-process is ENXIO in uvfs. The host opens
//!   with `O_NONBLOCK` added (so a fifo cannot block), and when the open of a special
//!   file *succeeds* it closes it again and reports ENXIO; every error the host open gives
//!   (EACCES, EEXIST, ELOOP, fifo-without-reader ENXIO, ...) is compared as is.
//! - a NUL byte in a path is EINVAL in uvfs; a C caller cannot pass one: never generated.
//! - xattr names are listed by tmpfs (6.18) in the order of its xattr hash table, by uvfs
//!   in name order (ACL names first, as both do): `listxattr` results are compared as the
//!   returned length plus the sorted set of names.
//! - hostfs keeps no file flags (ENOTTY): a sequence that reads or sets them
//!   (`Op::GetFlags`, `Op::SetFlags`) runs on memfs only, and the host side clears every
//!   flag it set before it removes its directory (an immutable file cannot be removed).
//! - directory offsets are opaque cookies, and uvfs lists a directory in creation order
//!   while tmpfs (6.18) lists newest first with other cookie values. So `getdents`
//!   results are compared as sorted name sets, and `lseek` on a directory is only run
//!   as a rewind (`0, SEEK_SET`): any other directory seek is skipped on both sides.
//!   A listing that reached its end stays there until rewound on both (tmpfs's
//!   `DIR_OFFSET_EOD`), names made since included.
#![allow(dead_code)]

pub mod generate;
pub mod generate_acl;
pub mod generate_locks;
pub mod locks;

#[path = "../scratch/mod.rs"]
mod scratch;
#[allow(unused_imports)]
pub use scratch::scratch_in;

use std::ffi::CString;
use std::fmt;

use uvfs::{
    AccessMode, AtFlags, Credentials, DirFd, Errno, FastPaths, Fd, Gid, OpenFlags, RenameFlags, SmallWritePages, Task,
    TimeSpec, Timespec, Uid, Vfs, VfsConfig, Whence, XattrFlags,
};

/// `STATX_ATTR_MOUNT_ROOT`, which the comparison leaves out (see `Op::Statx`).
const STATX_ATTR_MOUNT_ROOT: u64 = 0x2000;

/// The unprivileged user of the tests, its group and its supplementary group.
pub const USER: u32 = 1000;
pub const GROUP: u32 = 1000;
pub const SUPP: u32 = 1001;
/// Another user/group that owns things the test user may not touch.
pub const OTHER: u32 = 2000;

/// A path argument (bytes, no NUL), shown as text.
#[derive(Clone, PartialEq, Eq)]
pub struct P(pub Vec<u8>);

impl fmt::Debug for P {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = String::from_utf8_lossy(&self.0);
        if s.len() > 40 { write!(f, "\"{}...\"({} bytes)", &s[..20], s.len()) } else { write!(f, "{s:?}") }
    }
}

pub fn p(s: &str) -> P {
    P(s.as_bytes().to_vec())
}

/// A directory-fd argument.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum D {
    Cwd,
    Fd(i32),
}

/// The times argument of `utimensat`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Times {
    /// `times == NULL`.
    Null,
    Pair(T, T),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum T {
    Now,
    Omit,
    At(i64, u32),
}

/// `lseek` whence.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum W {
    Set,
    Cur,
    End,
    Data,
    Hole,
}

/// One call. Flags and modes are Linux's raw values (uvfs uses the same).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Op {
    Open(D, P, i32, u32),
    /// `openat2(dirfd, path, {flags, mode, resolve})`: `RESOLVE_*` without `CACHED`, whose
    /// answer depends on what each side happens to hold in its caches.
    Openat2(D, P, i32, u32, u64),
    Close(i32),
    Dup(i32),
    Dup2(i32, i32),
    Read(i32, usize),
    Write(i32, usize),
    Pread(i32, usize, i64),
    Pwrite(i32, usize, i64),
    Lseek(i32, i64, W),
    Fstat(i32),
    Fstatat(D, P, i32),
    Faccessat(D, P, i32, i32),
    Mkdirat(D, P, u32),
    Mknodat(D, P, u32, u64),
    Unlinkat(D, P, i32),
    Renameat2(D, P, D, P, u32),
    Linkat(D, P, D, P, i32),
    Symlinkat(P, D, P),
    Readlinkat(D, P, usize),
    Fchmodat(D, P, u32, i32),
    Fchmod(i32, u32),
    Fchownat(D, P, Option<u32>, Option<u32>, i32),
    Utimensat(D, P, Times, i32),
    Truncate(P, i64),
    Ftruncate(i32, i64),
    Getdents(i32),
    Fsync(i32),
    Chdir(P),
    Fchdir(i32),
    Getcwd,
    Umask(u32),
    /// getxattr (by path, lpath or fd), name, buffer size (0: ask for the size).
    Getxattr(X, P, usize),
    /// setxattr, name, value, flags.
    Setxattr(X, P, V, i32),
    /// listxattr, buffer size.
    Listxattr(X, usize),
    /// removexattr, name.
    Removexattr(X, P),
    // ---- locks (issue 13): flock, the fcntl lock commands, a second process; see
    // `locks.rs` for how the host side runs them ----
    /// `flock(fd, operation)`.
    Flock(i32, u32),
    /// `fcntl(fd, cmd, &flock)` with a lock command (raw value), as the struct says.
    Fcntl(i32, i32, Fl),
    /// Makes task 1, a fork of the sequence's task (task 0): a copy of its descriptor
    /// table, no POSIX locks. Host: a forked process that runs commands from a pipe.
    Fork,
    /// Runs an op as task 1 (only `Open`, `Close`, `Dup`, `Flock`, `Fcntl`).
    Child(Box<Op>),
    /// Starts an op (a `Flock` or `Fcntl` of task 0, or one wrapped in `Child`) that may
    /// wait for a lock, in the background; done (ok) once it waits or has finished.
    Bg(Box<Op>),
    /// The result of the op `Bg` started for task 0 or 1.
    Join(u8),
    // ---- fcntl's descriptor and status-flag commands (issue 13) ----
    /// `fcntl(fd, cmd, arg)` with `F_DUPFD`, `F_DUPFD_CLOEXEC`, `F_GETFD`, `F_SETFD`,
    /// `F_GETFL` or `F_SETFL` (raw values).
    FcntlFd(i32, i32, i64),
    // ---- vectored I/O (issue 13) ----
    /// `preadv2(fd, buffers of these lengths, off, flags)` (`off` -1: the file position).
    Preadv2(i32, Vec<usize>, i64, u32),
    /// `pwritev2(fd, buffers of these lengths filled by `data`, off, flags)`.
    Pwritev2(i32, Vec<usize>, i64, u32),
    // ---- space, copies, statx (issue 13) ----
    /// `fallocate(fd, mode, off, len)`.
    Fallocate(i32, i32, i64, i64),
    /// `copy_file_range(fd_in, off_in, fd_out, off_out, len, flags)`; answers the count and
    /// the offsets after it (-1 for a position).
    CopyFileRange(i32, Option<i64>, i32, Option<i64>, usize, u32),
    /// `sendfile(out_fd, in_fd, offset, count)`; answers the count and the offset after.
    Sendfile(i32, i32, Option<i64>, usize),
    /// `statx(dirfd, path, flags, mask)`. `STATX_ATTR_MOUNT_ROOT` is not compared: the
    /// host's test root is a plain directory, uvfs's the root of its mount.
    Statx(D, P, i32, u32),
    // ---- file flags (issue 13): what `lsattr` and `chattr` call ----
    /// `ioctl(fd, FS_IOC_GETFLAGS)`: the flags as a number.
    GetFlags(i32),
    /// `ioctl(fd, FS_IOC_SETFLAGS, &flags)`.
    SetFlags(i32, u32),
    // ---- times ----
    /// `fstatat(dirfd, path, flags)`, answering which of the object's access, change and
    /// modification times moved since this side last looked at that object (by device
    /// and inode number) with `Since` ([`Out::Since`]). A stat marks the change time as
    /// seen, so on a multigrain filesystem (tmpfs since 6.13, memfs) every later change
    /// shows.
    Since(D, P, i32),
}

impl Op {
    /// Whether the op reads or sets file flags, which hostfs does not keep (ENOTTY, where
    /// the host's tmpfs has them): such sequences run on memfs only.
    pub fn uses_file_flags(&self) -> bool {
        match self {
            Op::GetFlags(_) | Op::SetFlags(..) => true,
            Op::Child(o) | Op::Bg(o) => o.uses_file_flags(),
            _ => false,
        }
    }
}

/// The `struct flock` of an `Op::Fcntl`: type, whence, start, length, pid.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fl {
    pub ty: i16,
    pub whence: i16,
    pub start: i64,
    pub len: i64,
    pub pid: i32,
}

/// What an xattr call names: a path (followed), a path not followed (`l*xattr`), or a
/// descriptor (`f*xattr`).
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum X {
    Path(P),
    LPath(P),
    Fd(i32),
}

/// An xattr value, shown in hex (short) or by length.
#[derive(Clone, PartialEq, Eq)]
pub struct V(pub Vec<u8>);

impl fmt::Debug for V {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() > 64 {
            write!(f, "<{} bytes>", self.0.len())
        } else {
            write!(f, "{}", self.0.iter().map(|b| format!("{b:02x}")).collect::<String>())
        }
    }
}

/// The part of `struct stat` that must agree: type and mode, link count, owner, size,
/// blocks (tmpfs accounting) and device number. Not times, inode or device numbers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct St {
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    pub gid: u32,
    pub size: i64,
    pub blocks: i64,
    pub rdev: u64,
}

/// A call's result.
#[derive(Clone, PartialEq, Eq)]
pub enum Out {
    Unit,
    Num(i64),
    Bytes(Vec<u8>),
    Stat(St),
    /// getdents64: bytes returned and the (name, d_type) pairs, sorted (tmpfs and uvfs may
    /// order entries differently).
    Dents(i64, Vec<(Vec<u8>, u8)>),
    Err(i32),
    /// Not run on either side (a directory seek other than a rewind).
    Skipped,
    /// listxattr: length returned and the names, sorted (see the module doc).
    Names(i64, Vec<Vec<u8>>),
    /// A `GETLK` answer: type, whence, start, length, pid ([`locks::PID_TASK0`] and
    /// [`locks::PID_TASK1`] for the two tasks' pids, which differ between the sides).
    Lock(i16, i16, i64, i64, i32),
    /// Several numbers (a count and the offsets a call moved).
    Nums(Vec<i64>),
    /// A `statx` answer: mask, attributes, attributes mask, the stat fields, and the
    /// birth time's presence (non-zero). Not times, inode, device or mount ids.
    Statx(u32, u64, u64, St, bool),
    /// A [`Op::Since`] answer: `None` for an object not looked at before; else whether
    /// its access, modification and change times moved.
    Since(Option<Moved>),
}

/// Which of an object's times moved between two looks ([`Op::Since`]). The access time
/// only when it was at least [`RECENT`] old at the first look (`None` otherwise): an
/// access moves it to the coarse clock (no fine-grained stamps for it), so a recent one
/// moves or not by whether the clock ticked since, which the two sides need not share.
/// The old access times are the ones a sequence set (`utimensat` to 2001). `regular`:
/// the object is a regular file (whose times a FUSE client with the writeback cache
/// stamps itself).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Moved {
    pub atime: Option<bool>,
    pub mtime: bool,
    pub ctime: bool,
    pub regular: bool,
}

/// How old an access time must be for [`Moved`] to compare its move.
const RECENT: std::time::Duration = std::time::Duration::from_secs(2);

/// What a side last saw of each object's times: (device, inode number) to the access,
/// modification and change times as (seconds, nanoseconds). One per thread: the host
/// side's runs in its own thread, uvfs's is cleared at the start of each run.
type Seen = std::collections::HashMap<(u64, u64), [(i64, i64); 3]>;

thread_local! {
    static SEEN: std::cell::RefCell<Seen> = std::cell::RefCell::new(Seen::new());
}

/// Every path of up to three of the generated names (`a`, `b`, `c`, `l1`, `l2`), the
/// other names `differential_overlay.rs` and `generate_acl.rs` generate, and the
/// descriptors a sequence may hold: what [`host_look_at_all`] and [`uvfs_look_at_all`]
/// look at.
fn all_names() -> &'static [Vec<u8>] {
    static NAMES: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let comps: [&[u8]; 5] = [b"a", b"b", b"c", b"l1", b"l2"];
        let mut out: Vec<Vec<u8>> = vec![b"/".to_vec()];
        let mut level: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..3 {
            let next: Vec<Vec<u8>> =
                level.iter().flat_map(|p| comps.iter().map(move |c| [&p[..], b"/", c].concat())).collect();
            out.extend(next.iter().cloned());
            level = next;
        }
        let overlay = [".", "x", "s", "t", "e", "d", "n", "y", "a/f", "a/b/g", "a/xl", "d/h", "n/f", "e/z"];
        let acl = ["d/f", "d/x", "d/n", "d/x/n", "d/x/f", "f", "g", "l", "q", "e/h", "e/n", "k", "k/n"];
        for n in overlay.into_iter().chain(acl) {
            out.push(n.as_bytes().to_vec());
        }
        out
    })
}

/// Descriptors a sequence may hold (`fd()` generates 0..6; `dup` and `fcntl` a few more).
const LOOKED_AT_FDS: std::ops::Range<i32> = 0..12;

/// After each call, once a sequence compares times ([`Op::Since`]): a `stat` of every
/// object a call could have changed, so that every change time is marked seen and every
/// later change takes a fine-grained stamp (multigrain). Without it, a change nobody
/// looked at takes the coarse clock's tick, and whether it shows then depends on
/// whether the clock ticked since the change before, which the host's run and uvfs's
/// need not share (a directory that loses a name takes the removed inode's new change
/// time, `shmem_unlink`, so even a look at the directory does not settle it). A `stat`
/// moves no access time. On hostfs this also matches what its revalidation does on the
/// host: every `stat` it makes there marks the host's change time seen.
fn host_look_at_all() {
    if SEEN.with(|s| s.borrow().is_empty()) {
        return;
    }
    // SAFETY: `struct stat` is plain integers, for which zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    for p in all_names() {
        let c = CString::new(p.clone()).unwrap();
        // SAFETY: a NUL-terminated path and a writable `stat`.
        unsafe { libc::syscall(libc::SYS_newfstatat, libc::AT_FDCWD, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    }
    for fd in LOOKED_AT_FDS {
        // SAFETY: as above; a descriptor not open is EBADF.
        unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st) };
    }
    raise_floors();
}

/// After [`host_look_at_all`] and [`uvfs_look_at_all`]: a fine-grained change of a file
/// outside the tree, on the host's tmpfs (a host thread's [`locks::FLOOR_FD`]) and in a
/// memfs of this process, which raises the kernel's and uvfs's multigrain floors, so
/// that every change the next call makes is stamped later than every change before it.
/// Without it, a directory that a `link`, `unlink` or `rmdir` stamps with the linked
/// inode's new change time (`shmem_link`, `shmem_unlink`) keeps the time it had when
/// that stamp is the floor its own last change raised, unless another fine stamp
/// (anywhere in the system, or in this process) or the clock's tick came in between,
/// which the two sides need not share. The directory's time equal to the inode's is
/// compared by hand-written cases instead.
fn raise_floors() {
    // SAFETY: `struct stat` is plain integers; fstat and pwrite of a descriptor (EBADF
    // where a thread has none) with buffers that outlive the calls.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(locks::FLOOR_FD, &mut st) == 0 {
            libc::pwrite(locks::FLOOR_FD, b"x".as_ptr().cast(), 1, 0);
        }
    }
    thread_local! {
        static SCRATCH: Task = {
            let t = uvfs::Vfs::new(uvfs::VfsConfig::default()).root_task();
            t.mknodat(DirFd::Cwd, b"/f", libc::S_IFREG | 0o644, 0).unwrap();
            t
        };
    }
    // The `stat` marks the change time seen, so the `chmod` within the tick takes a
    // fine stamp.
    SCRATCH.with(|t| {
        let _ = t.stat(b"/f");
        let _ = t.fchmodat(DirFd::Cwd, b"/f", 0o644, AtFlags::empty());
    });
}

/// [`host_look_at_all`] on uvfs.
pub fn uvfs_look_at_all(t: &Task) {
    if SEEN.with(|s| s.borrow().is_empty()) {
        return;
    }
    for p in all_names() {
        let _ = t.fstatat(DirFd::Cwd, p, AtFlags::SYMLINK_NOFOLLOW);
    }
    for fd in LOOKED_AT_FDS {
        let _ = t.fstat(Fd(fd));
    }
    raise_floors();
}

/// Records `times` for `key` (an object of file type `mode & S_IFMT`) and answers what
/// moved since the last record.
fn since(key: (u64, u64), mode: u32, times: [(i64, i64); 3]) -> Out {
    let before = SEEN.with(|s| s.borrow_mut().insert(key, times));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let old = |t: (i64, i64)| t.0 < (now - RECENT).as_secs() as i64;
    Out::Since(before.map(|b| Moved {
        atime: old(b[0]).then_some(b[0] != times[0]),
        mtime: b[1] != times[1],
        ctime: b[2] != times[2],
        regular: mode & libc::S_IFMT == libc::S_IFREG,
    }))
}

impl fmt::Debug for Out {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Out::Unit => write!(f, "ok"),
            Out::Num(n) => write!(f, "{n}"),
            Out::Bytes(b) if b.len() > 40 => write!(f, "{:?}...({} bytes)", String::from_utf8_lossy(&b[..20]), b.len()),
            Out::Bytes(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Out::Stat(s) => write!(f, "{s:?}").map(|_| ()).and_then(|_| write!(f, " (mode {:o})", s.mode)),
            Out::Dents(n, v) => {
                write!(f, "{n}B[")?;
                for (name, t) in v {
                    write!(f, "{}:{t} ", String::from_utf8_lossy(name))?;
                }
                write!(f, "]")
            }
            Out::Err(e) => write!(f, "{:?}", Errno::from_raw(*e)),
            Out::Skipped => write!(f, "skipped"),
            Out::Nums(v) => write!(f, "{v:?}"),
            Out::Statx(m, a, am, st, b) => write!(f, "statx(mask {m:#x} attrs {a:#x}/{am:#x} {st:?} btime {b})"),
            Out::Since(None) => write!(f, "first look"),
            Out::Since(Some(m)) => {
                let moved: Vec<&str> = [(m.atime == Some(true), "atime"), (m.mtime, "mtime"), (m.ctime, "ctime")]
                    .iter()
                    .filter(|x| x.0)
                    .map(|x| x.1)
                    .collect();
                let atime = if m.atime.is_none() { " (atime recent)" } else { "" };
                write!(f, "moved {moved:?}{atime}")
            }
            Out::Lock(t, w, s, l, pid) => write!(f, "lock(type {t} whence {w} start {s} len {l} pid {pid})"),
            Out::Names(n, v) => {
                write!(f, "{n}B{{")?;
                for name in v {
                    write!(f, "{} ", String::from_utf8_lossy(name))?;
                }
                write!(f, "}}")
            }
        }
    }
}

/// Who runs the generated calls (setup always runs as root).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Who {
    Root,
    /// uid 1000, gid 1000, supplementary group 1001, no capabilities.
    User,
    /// A setuid-root program run by the user: real ids 1000/1000, effective 0/0, every
    /// capability (what `access(2)` without `AT_EACCESS` tells apart).
    SetuidRoot,
    /// Any unprivileged user: uid, gid, one supplementary group, no capabilities.
    As {
        uid: u32,
        gid: u32,
        supp: u32,
    },
}

/// The bytes `Write`/`Pwrite` of `n` bytes write (depends on `n` only).
/// The buffers of a vectored write: `data` of the total length, cut at the lengths.
pub fn vec_data(lens: &[usize]) -> Vec<Vec<u8>> {
    let all = data(lens.iter().sum());
    let mut at = 0;
    lens.iter()
        .map(|&n| {
            at += n;
            all[at - n..at].to_vec()
        })
        .collect()
}

pub fn data(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + ((i * 7 + n) % 26) as u8).collect()
}

const DENTS_BUF: usize = 8192;

fn parse_dents(buf: &[u8]) -> Vec<(Vec<u8>, u8)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + 19 <= buf.len() {
        let reclen = u16::from_ne_bytes([buf[i + 16], buf[i + 17]]) as usize;
        let dtype = buf[i + 18];
        let name = &buf[i + 19..i + reclen];
        let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
        out.push((name[..end].to_vec(), dtype));
        i += reclen;
    }
    out.sort();
    out
}

// ---------------------------------------------------------------- host

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().expect("errno")
}

fn cstr(p: &P) -> CString {
    CString::new(p.0.clone()).expect("generated paths have no NUL")
}

fn hd(d: D) -> libc::c_int {
    match d {
        D::Cwd => libc::AT_FDCWD,
        D::Fd(fd) => fd,
    }
}

fn unit(rc: libc::c_long) -> Out {
    if rc < 0 { Out::Err(errno()) } else { Out::Unit }
}

fn num(rc: libc::c_long) -> Out {
    if rc < 0 { Out::Err(errno()) } else { Out::Num(rc) }
}

fn host_st(s: &libc::stat) -> St {
    St {
        mode: s.st_mode,
        nlink: s.st_nlink,
        uid: s.st_uid,
        gid: s.st_gid,
        size: s.st_size,
        blocks: s.st_blocks,
        rdev: s.st_rdev,
    }
}

fn host_ts(t: T) -> libc::timespec {
    match t {
        T::Now => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
        T::Omit => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        T::At(s, ns) => libc::timespec { tv_sec: s, tv_nsec: ns as i64 },
    }
}

/// `struct open_how` as `openat2(2)` reads it.
#[repr(C)]
struct OpenHowRaw {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// What both sides add to an `openat2`'s flags so that a fifo's open does not block:
/// `O_NONBLOCK`, but not with `O_PATH` (which never blocks, and which `openat2` allows
/// only with `O_DIRECTORY`, `O_NOFOLLOW` and `O_CLOEXEC`).
pub fn open2_nonblock(flags: i32) -> i32 {
    if flags & libc::O_PATH != 0 { 0 } else { libc::O_NONBLOCK }
}

/// The answer of a host `openat` or `openat2` that returned `fd`, asked with `flags`.
///
/// # Safety
/// `fd` is the call's return value (a new descriptor of this thread's table, or -1).
unsafe fn host_opened(fd: libc::c_long, flags: i32) -> Out {
    // SAFETY: fstat, fcntl and close of the descriptor the call just made.
    unsafe {
        if fd < 0 {
            return Out::Err(errno());
        }
        if flags & libc::O_PATH == 0 {
            let mut st: libc::stat = std::mem::zeroed();
            libc::fstat(fd as i32, &mut st);
            if matches!(st.st_mode & libc::S_IFMT, libc::S_IFSOCK | libc::S_IFCHR | libc::S_IFBLK) {
                // uvfs design: sockets and devices cannot be opened in-process.
                libc::close(fd as i32);
                return Out::Err(libc::ENXIO);
            }
            // O_NONBLOCK was only there so that a fifo's open would not block:
            // the open file gets the status flags the sequence asked for (F_GETFL).
            // A fifo keeps it (on both sides), so that no read or write of the
            // one-thread sequence waits for ever.
            if flags & libc::O_NONBLOCK == 0 && st.st_mode & libc::S_IFMT != libc::S_IFIFO {
                let fl = libc::fcntl(fd as i32, libc::F_GETFL);
                libc::fcntl(fd as i32, libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
        }
        Out::Num(fd)
    }
}

/// Runs one call on the host (in the prepared thread). Raw syscalls throughout, so the
/// errno is the kernel's, not a libc emulation's.
pub fn host_op(op: &Op) -> Out {
    // SAFETY (whole function): plain syscalls with valid, NUL-terminated paths and
    // buffers that outlive the call.
    unsafe {
        match op {
            Op::Open(d, path, flags, mode) => {
                let c = cstr(path);
                let fd = libc::syscall(libc::SYS_openat, hd(*d), c.as_ptr(), flags | libc::O_NONBLOCK, *mode);
                host_opened(fd, *flags)
            }
            Op::Openat2(d, path, flags, mode, resolve) => {
                let c = cstr(path);
                let how = OpenHowRaw {
                    flags: (flags | open2_nonblock(*flags)) as u32 as u64,
                    mode: u64::from(*mode),
                    resolve: *resolve,
                };
                let fd = libc::syscall(
                    libc::SYS_openat2,
                    hd(*d),
                    c.as_ptr(),
                    &how as *const OpenHowRaw,
                    std::mem::size_of::<OpenHowRaw>(),
                );
                host_opened(fd, *flags)
            }
            Op::Close(fd) => unit(libc::syscall(libc::SYS_close, *fd)),
            Op::Dup(fd) => num(libc::syscall(libc::SYS_dup, *fd)),
            Op::FcntlFd(fd, cmd, arg) => num(libc::syscall(libc::SYS_fcntl, *fd, *cmd, *arg)),
            Op::Dup2(a, b) => num(libc::syscall(libc::SYS_dup2, *a, *b)),
            Op::Read(fd, n) => {
                let mut buf = vec![0u8; *n];
                let r = libc::syscall(libc::SYS_read, *fd, buf.as_mut_ptr(), *n);
                if r < 0 {
                    return Out::Err(errno());
                }
                buf.truncate(r as usize);
                Out::Bytes(buf)
            }
            Op::Pread(fd, n, off) => {
                let mut buf = vec![0u8; *n];
                let r = libc::syscall(libc::SYS_pread64, *fd, buf.as_mut_ptr(), *n, *off);
                if r < 0 {
                    return Out::Err(errno());
                }
                buf.truncate(r as usize);
                Out::Bytes(buf)
            }
            Op::Write(fd, n) => {
                let b = data(*n);
                num(libc::syscall(libc::SYS_write, *fd, b.as_ptr(), *n))
            }
            Op::Preadv2(fd, lens, off, flags) => {
                let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
                let iov: Vec<libc::iovec> = bufs
                    .iter_mut()
                    .map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() })
                    .collect();
                // The kernel's preadv2 takes the offset as two halves.
                let r = libc::syscall(libc::SYS_preadv2, *fd, iov.as_ptr(), iov.len(), *off, *off >> 32, *flags);
                if r < 0 {
                    return Out::Err(errno());
                }
                Out::Bytes(bufs.concat()[..r as usize].to_vec())
            }
            Op::Pwritev2(fd, lens, off, flags) => {
                let bufs: Vec<Vec<u8>> = vec_data(lens);
                let iov: Vec<libc::iovec> =
                    bufs.iter().map(|b| libc::iovec { iov_base: b.as_ptr() as *mut _, iov_len: b.len() }).collect();
                num(libc::syscall(libc::SYS_pwritev2, *fd, iov.as_ptr(), iov.len(), *off, *off >> 32, *flags))
            }
            Op::Fallocate(fd, mode, off, len) => unit(libc::syscall(libc::SYS_fallocate, *fd, *mode, *off, *len)),
            Op::CopyFileRange(fi, oi, fo, oo, len, flags) => {
                let (mut a, mut b) = (oi.unwrap_or(0), oo.unwrap_or(0));
                let pa = if oi.is_some() { &mut a as *mut i64 } else { std::ptr::null_mut() };
                let pb = if oo.is_some() { &mut b as *mut i64 } else { std::ptr::null_mut() };
                let r = libc::syscall(libc::SYS_copy_file_range, *fi, pa, *fo, pb, *len, *flags);
                if r < 0 {
                    return Out::Err(errno());
                }
                Out::Nums(vec![r, if oi.is_some() { a } else { -1 }, if oo.is_some() { b } else { -1 }])
            }
            Op::Sendfile(fo, fi, off, count) => {
                let mut a = off.unwrap_or(0);
                let pa = if off.is_some() { &mut a as *mut i64 } else { std::ptr::null_mut() };
                let r = libc::syscall(libc::SYS_sendfile, *fo, *fi, pa, *count);
                if r < 0 {
                    return Out::Err(errno());
                }
                Out::Nums(vec![r, if off.is_some() { a } else { -1 }])
            }
            Op::Statx(d, path, flags, mask) => {
                let c = cstr(path);
                let mut st: libc::statx = std::mem::zeroed();
                if libc::syscall(libc::SYS_statx, hd(*d), c.as_ptr(), *flags, *mask, &mut st) < 0 {
                    return Out::Err(errno());
                }
                let base = St {
                    mode: u32::from(st.stx_mode),
                    nlink: u64::from(st.stx_nlink),
                    uid: st.stx_uid,
                    gid: st.stx_gid,
                    size: st.stx_size as i64,
                    blocks: st.stx_blocks as i64,
                    rdev: libc::makedev(st.stx_rdev_major, st.stx_rdev_minor),
                };
                // The host's test root is a directory, uvfs's a mount root: not compared.
                let attrs = st.stx_attributes & !STATX_ATTR_MOUNT_ROOT;
                Out::Statx(st.stx_mask, attrs, st.stx_attributes_mask, base, st.stx_btime.tv_sec != 0)
            }
            Op::Pwrite(fd, n, off) => {
                let b = data(*n);
                num(libc::syscall(libc::SYS_pwrite64, *fd, b.as_ptr(), *n, *off))
            }
            Op::Lseek(fd, off, w) => {
                let mut st: libc::stat = std::mem::zeroed();
                if !(*off == 0 && *w == W::Set)
                    && libc::fstat(*fd, &mut st) == 0
                    && st.st_mode & libc::S_IFMT == libc::S_IFDIR
                {
                    return Out::Skipped;
                }
                let w = match w {
                    W::Set => libc::SEEK_SET,
                    W::Cur => libc::SEEK_CUR,
                    W::End => libc::SEEK_END,
                    W::Data => libc::SEEK_DATA,
                    W::Hole => libc::SEEK_HOLE,
                };
                num(libc::syscall(libc::SYS_lseek, *fd, *off, w))
            }
            Op::Fstat(fd) => {
                let mut st: libc::stat = std::mem::zeroed();
                if libc::syscall(libc::SYS_fstat, *fd, &mut st) < 0 {
                    return Out::Err(errno());
                }
                Out::Stat(host_st(&st))
            }
            Op::Fstatat(d, path, flags) => {
                let c = cstr(path);
                let mut st: libc::stat = std::mem::zeroed();
                if libc::syscall(libc::SYS_newfstatat, hd(*d), c.as_ptr(), &mut st, *flags) < 0 {
                    return Out::Err(errno());
                }
                Out::Stat(host_st(&st))
            }
            Op::Since(d, path, flags) => {
                let c = cstr(path);
                let mut st: libc::stat = std::mem::zeroed();
                if libc::syscall(libc::SYS_newfstatat, hd(*d), c.as_ptr(), &mut st, *flags) < 0 {
                    return Out::Err(errno());
                }
                since(
                    (st.st_dev, st.st_ino),
                    st.st_mode,
                    [(st.st_atime, st.st_atime_nsec), (st.st_mtime, st.st_mtime_nsec), (st.st_ctime, st.st_ctime_nsec)],
                )
            }
            Op::Faccessat(d, path, mode, flags) => {
                unit(libc::syscall(libc::SYS_faccessat2, hd(*d), cstr(path).as_ptr(), *mode, *flags))
            }
            Op::Mkdirat(d, path, mode) => unit(libc::syscall(libc::SYS_mkdirat, hd(*d), cstr(path).as_ptr(), *mode)),
            Op::Mknodat(d, path, mode, dev) => {
                unit(libc::syscall(libc::SYS_mknodat, hd(*d), cstr(path).as_ptr(), *mode, *dev))
            }
            Op::Unlinkat(d, path, flags) => {
                unit(libc::syscall(libc::SYS_unlinkat, hd(*d), cstr(path).as_ptr(), *flags))
            }
            Op::Renameat2(d1, p1, d2, p2, flags) => {
                unit(libc::syscall(libc::SYS_renameat2, hd(*d1), cstr(p1).as_ptr(), hd(*d2), cstr(p2).as_ptr(), *flags))
            }
            Op::Linkat(d1, p1, d2, p2, flags) => {
                unit(libc::syscall(libc::SYS_linkat, hd(*d1), cstr(p1).as_ptr(), hd(*d2), cstr(p2).as_ptr(), *flags))
            }
            Op::Symlinkat(target, d, path) => {
                unit(libc::syscall(libc::SYS_symlinkat, cstr(target).as_ptr(), hd(*d), cstr(path).as_ptr()))
            }
            Op::Readlinkat(d, path, n) => {
                let mut buf = vec![0u8; *n];
                let r = libc::syscall(libc::SYS_readlinkat, hd(*d), cstr(path).as_ptr(), buf.as_mut_ptr(), *n);
                if r < 0 {
                    return Out::Err(errno());
                }
                buf.truncate(r as usize);
                Out::Bytes(buf)
            }
            Op::Fchmodat(d, path, mode, flags) => {
                unit(libc::syscall(libc::SYS_fchmodat2, hd(*d), cstr(path).as_ptr(), *mode, *flags))
            }
            Op::Fchmod(fd, mode) => unit(libc::syscall(libc::SYS_fchmod, *fd, *mode)),
            Op::Fchownat(d, path, u, g, flags) => unit(libc::syscall(
                libc::SYS_fchownat,
                hd(*d),
                cstr(path).as_ptr(),
                u.unwrap_or(u32::MAX),
                g.unwrap_or(u32::MAX),
                *flags,
            )),
            Op::Utimensat(d, path, times, flags) => {
                let ts;
                let tp = match times {
                    Times::Null => std::ptr::null(),
                    Times::Pair(a, m) => {
                        ts = [host_ts(*a), host_ts(*m)];
                        ts.as_ptr()
                    }
                };
                unit(libc::syscall(libc::SYS_utimensat, hd(*d), cstr(path).as_ptr(), tp, *flags))
            }
            Op::Truncate(path, len) => unit(libc::syscall(libc::SYS_truncate, cstr(path).as_ptr(), *len)),
            Op::Ftruncate(fd, len) => unit(libc::syscall(libc::SYS_ftruncate, *fd, *len)),
            Op::Getdents(fd) => {
                let mut buf = vec![0u8; DENTS_BUF];
                let r = libc::syscall(libc::SYS_getdents64, *fd, buf.as_mut_ptr(), DENTS_BUF);
                if r < 0 {
                    return Out::Err(errno());
                }
                Out::Dents(r, parse_dents(&buf[..r as usize]))
            }
            Op::Fsync(fd) => unit(libc::syscall(libc::SYS_fsync, *fd)),
            Op::Chdir(path) => unit(libc::syscall(libc::SYS_chdir, cstr(path).as_ptr())),
            Op::Fchdir(fd) => unit(libc::syscall(libc::SYS_fchdir, *fd)),
            Op::Getcwd => {
                let mut buf = vec![0u8; 4096];
                let r = libc::syscall(libc::SYS_getcwd, buf.as_mut_ptr(), buf.len());
                if r < 0 {
                    return Out::Err(errno());
                }
                // The syscall's length counts the NUL.
                buf.truncate(r as usize - 1);
                Out::Bytes(buf)
            }
            Op::Umask(m) => num(libc::syscall(libc::SYS_umask, *m)),
            Op::Getxattr(x, name, n) => {
                let mut buf = vec![0u8; *n];
                let ptr = if *n == 0 { std::ptr::null_mut() } else { buf.as_mut_ptr() };
                let name = cstr(name);
                let r = match x {
                    X::Path(p) => libc::syscall(libc::SYS_getxattr, cstr(p).as_ptr(), name.as_ptr(), ptr, *n),
                    X::LPath(p) => libc::syscall(libc::SYS_lgetxattr, cstr(p).as_ptr(), name.as_ptr(), ptr, *n),
                    X::Fd(fd) => libc::syscall(libc::SYS_fgetxattr, *fd, name.as_ptr(), ptr, *n),
                };
                if r < 0 {
                    return Out::Err(errno());
                }
                if *n == 0 {
                    return Out::Num(r);
                }
                buf.truncate(r as usize);
                Out::Bytes(buf)
            }
            Op::Setxattr(x, name, v, flags) => {
                let name = cstr(name);
                let (vp, vn) = (v.0.as_ptr(), v.0.len());
                unit(match x {
                    X::Path(p) => libc::syscall(libc::SYS_setxattr, cstr(p).as_ptr(), name.as_ptr(), vp, vn, *flags),
                    X::LPath(p) => libc::syscall(libc::SYS_lsetxattr, cstr(p).as_ptr(), name.as_ptr(), vp, vn, *flags),
                    X::Fd(fd) => libc::syscall(libc::SYS_fsetxattr, *fd, name.as_ptr(), vp, vn, *flags),
                })
            }
            Op::Listxattr(x, n) => {
                let mut buf = vec![0u8; *n];
                let ptr = if *n == 0 { std::ptr::null_mut() } else { buf.as_mut_ptr() };
                let r = match x {
                    X::Path(p) => libc::syscall(libc::SYS_listxattr, cstr(p).as_ptr(), ptr, *n),
                    X::LPath(p) => libc::syscall(libc::SYS_llistxattr, cstr(p).as_ptr(), ptr, *n),
                    X::Fd(fd) => libc::syscall(libc::SYS_flistxattr, *fd, ptr, *n),
                };
                if r < 0 {
                    return Out::Err(errno());
                }
                if *n == 0 {
                    return Out::Num(r);
                }
                Out::Names(r, names(&buf[..r as usize]))
            }
            Op::Flock(..) | Op::Fcntl(..) => locks::host_lock_op(op, &locks::HostPids::none()),
            Op::Fork | Op::Child(_) | Op::Bg(_) | Op::Join(_) => {
                panic!("{op:?} needs a sequence's processes: run it with host_run")
            }
            Op::GetFlags(fd) => {
                let mut v: libc::c_uint = 0;
                let r = libc::syscall(libc::SYS_ioctl, *fd, libc::FS_IOC_GETFLAGS, &mut v);
                if r < 0 { Out::Err(errno()) } else { Out::Num(i64::from(v)) }
            }
            Op::SetFlags(fd, flags) => {
                let v: libc::c_uint = *flags;
                unit(libc::syscall(libc::SYS_ioctl, *fd, libc::FS_IOC_SETFLAGS, &v))
            }
            Op::Removexattr(x, name) => {
                let name = cstr(name);
                unit(match x {
                    X::Path(p) => libc::syscall(libc::SYS_removexattr, cstr(p).as_ptr(), name.as_ptr()),
                    X::LPath(p) => libc::syscall(libc::SYS_lremovexattr, cstr(p).as_ptr(), name.as_ptr()),
                    X::Fd(fd) => libc::syscall(libc::SYS_fremovexattr, *fd, name.as_ptr()),
                })
            }
        }
    }
}

/// The NUL-separated names of a listxattr buffer, sorted.
fn names(buf: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = buf.split(|&c| c == 0).filter(|n| !n.is_empty()).map(<[u8]>::to_vec).collect();
    v.sort();
    v
}

/// Sets the calling thread's ids (raw syscalls: this thread only).
pub fn host_become(who: Who) -> Result<(), String> {
    let groups = [SUPP as libc::gid_t];
    // SAFETY: plain syscalls; `groups` outlives the call.
    let rc = unsafe {
        match who {
            Who::Root => 0,
            Who::User => {
                libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr())
                    | libc::syscall(libc::SYS_setresgid, GROUP, GROUP, GROUP)
                    | libc::syscall(libc::SYS_setresuid, USER, USER, USER)
            }
            Who::As { uid, gid, supp } => {
                let groups = [supp as libc::gid_t];
                libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr())
                    | libc::syscall(libc::SYS_setresgid, gid, gid, gid)
                    | libc::syscall(libc::SYS_setresuid, uid, uid, uid)
            }
            Who::SetuidRoot => {
                libc::syscall(libc::SYS_setgroups, 1, groups.as_ptr())
                    | libc::syscall(libc::SYS_setresgid, GROUP, 0, 0)
                    | libc::syscall(libc::SYS_setresuid, USER, 0, 0)
            }
        }
    };
    if rc != 0 { Err(format!("setting ids: errno {}", errno())) } else { Ok(()) }
}

/// Runs `setup` as root then `ops` as `who` on the host, in a private thread chrooted to a
/// fresh tmpfs directory. Returns both output lists.
pub fn host_run(who: Who, setup: &[Op], ops: &[Op]) -> (Vec<Out>, Vec<Out>) {
    let tmpl = CString::new(format!("{}/uvfs-diff-XXXXXX", scratch_in("/dev/shm").display())).unwrap();
    let mut raw = tmpl.into_bytes_with_nul();
    // SAFETY: a writable NUL-terminated template.
    let dir = unsafe { libc::mkdtemp(raw.as_mut_ptr().cast()) };
    assert!(!dir.is_null(), "mkdtemp: {}", std::io::Error::last_os_error());
    raw.pop();
    let root = String::from_utf8(raw).unwrap();
    // The root plays uvfs's root: 01777 root:root (mkdtemp made it 0700).
    std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let res = host_run_at(&root, who, setup, ops);
    clear_file_flags(std::path::Path::new(&root));
    std::fs::remove_dir_all(&root).unwrap_or_else(|e| panic!("removing {root}: {e}"));
    res
}

/// [`host_run`] with `root` (which the caller made and removes) as the root.
pub fn host_run_at(root: &str, who: Who, setup: &[Op], ops: &[Op]) -> (Vec<Out>, Vec<Out>) {
    let (host, s) = HostSession::start(root, who, setup);
    let o = ops.iter().map(|op| host.op(op)).collect();
    host.finish();
    (s, o)
}

/// A private host thread chrooted to a root, as [`host_run_at`]'s, that runs calls one
/// at a time when asked: for sequences whose calls the caller runs partly elsewhere.
pub struct HostSession {
    /// Calls to run; dropped to end the thread.
    calls: Option<std::sync::mpsc::Sender<Op>>,
    /// Their results.
    results: std::sync::mpsc::Receiver<Out>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HostSession {
    /// Starts the thread in `root`, runs `setup` as root there, then becomes `who`;
    /// returns the setup's results.
    pub fn start(root: &str, who: Who, setup: &[Op]) -> (HostSession, Vec<Out>) {
        let (setup, r) = (setup.to_vec(), root.to_string());
        let (calls, calls_rx) = std::sync::mpsc::channel::<Op>();
        let (results_tx, results) = std::sync::mpsc::channel::<Out>();
        let (setup_tx, setup_rx) = std::sync::mpsc::channel::<Result<Vec<Out>, String>>();
        let thread = std::thread::spawn(move || {
            let ready = (|| {
                // SAFETY: unshare/close_range/chroot/chdir affect only this thread after
                // unshare.
                unsafe {
                    if libc::unshare(libc::CLONE_FS | libc::CLONE_FILES) != 0 {
                        return Err(format!("unshare: {}", std::io::Error::last_os_error()));
                    }
                    // `/proc/locks`, read to see a background lock request wait
                    // (`locks.rs`), kept at a descriptor no sequence uses.
                    let pl = libc::open(c"/proc/locks".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                    if pl < 0 || libc::dup3(pl, locks::PROC_LOCKS_FD, libc::O_CLOEXEC) < 0 {
                        return Err(format!("/proc/locks: {}", std::io::Error::last_os_error()));
                    }
                    // The file `raise_floors` writes, likewise.
                    let fl = libc::memfd_create(c"uvfs-test-floor".as_ptr(), libc::MFD_CLOEXEC);
                    if fl < 0 || libc::dup3(fl, locks::FLOOR_FD, libc::O_CLOEXEC) < 0 {
                        return Err(format!("memfd: {}", std::io::Error::last_os_error()));
                    }
                    let c = CString::new(r).unwrap();
                    if libc::chroot(c.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                        return Err(format!("chroot: {}", std::io::Error::last_os_error()));
                    }
                    // Descriptors are numbered from 0 in this private table, as in a fresh
                    // task.
                    let (below, floor) = (locks::PROC_LOCKS_FD as u32, locks::FLOOR_FD as u32);
                    if libc::syscall(libc::SYS_close_range, 0u32, below - 1, 0u32) != 0
                        || libc::syscall(libc::SYS_close_range, below + 1, floor - 1, 0u32) != 0
                        || libc::syscall(libc::SYS_close_range, floor + 1, u32::MAX, 0u32) != 0
                    {
                        return Err(format!("close_range: {}", std::io::Error::last_os_error()));
                    }
                    libc::umask(0o022);
                }
                let s: Vec<Out> = setup.iter().map(host_op).collect();
                host_become(who)?;
                Ok(s)
            })();
            let ok = ready.is_ok();
            let _ = setup_tx.send(ready);
            if !ok {
                return;
            }
            let mut procs = locks::HostProcs::new();
            while let Ok(op) = calls_rx.recv() {
                let o = procs.op(&op);
                host_look_at_all();
                let _ = results_tx.send(o);
            }
            procs.finish();
        });
        let s = match setup_rx.recv() {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => panic!("host setup failed: {e}"),
            Err(_) => panic!("host thread panicked: {:?}", thread.join().err()),
        };
        (HostSession { calls: Some(calls), results, thread: Some(thread) }, s)
    }

    /// Runs `op` on the host thread.
    pub fn op(&self, op: &Op) -> Out {
        self.calls.as_ref().unwrap().send(op.clone()).expect("host thread gone");
        self.results.recv().expect("host thread panicked")
    }

    /// Ends the thread (its background processes too) and waits for it.
    pub fn finish(mut self) {
        self.end();
    }

    fn end(&mut self) {
        self.calls.take();
        if let Some(t) = self.thread.take()
            && t.join().is_err()
            && !std::thread::panicking()
        {
            panic!("host thread panicked");
        }
    }
}

impl Drop for HostSession {
    fn drop(&mut self) {
        self.end();
    }
}

/// Clears the file flags of `dir` and of everything below it (a directory before its
/// entries: an append-only or immutable one keeps them), so that it can be removed.
/// Only regular files and directories have flags on tmpfs.
fn clear_file_flags(dir: &std::path::Path) {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let clear = |p: &std::path::Path| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
            .open(p)
            .unwrap_or_else(|e| panic!("opening {} to clear its flags: {e}", p.display()));
        let zero: libc::c_uint = 0;
        // SAFETY: an ioctl on a descriptor we own, reading a live `c_uint`.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_SETFLAGS, &zero) };
        assert_eq!(r, 0, "clearing the flags of {}: {}", p.display(), std::io::Error::last_os_error());
    };
    clear(dir);
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("listing {}: {e}", dir.display())) {
        let e = e.unwrap();
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            clear_file_flags(&e.path());
        } else if ty.is_file() {
            clear(&e.path());
        }
    }
}

// ---------------------------------------------------------------- uvfs

fn ud(d: D) -> DirFd<'static> {
    match d {
        D::Cwd => DirFd::Cwd,
        D::Fd(fd) => DirFd::Fd(Fd(fd)),
    }
}

fn ures<T>(r: uvfs::Result<T>, f: impl FnOnce(T) -> Out) -> Out {
    match r {
        Ok(v) => f(v),
        Err(e) => Out::Err(e.raw()),
    }
}

fn uunit(r: uvfs::Result<()>) -> Out {
    ures(r, |_| Out::Unit)
}

fn ust(s: uvfs::Stat) -> Out {
    Out::Stat(St {
        mode: s.mode,
        nlink: s.nlink as u64,
        uid: s.uid,
        gid: s.gid,
        size: s.size as i64,
        blocks: s.blocks as i64,
        rdev: s.rdev,
    })
}

fn uts(t: T) -> TimeSpec {
    match t {
        T::Now => TimeSpec::Now,
        T::Omit => TimeSpec::Omit,
        T::At(sec, nsec) => TimeSpec::At(Timespec { sec, nsec }),
    }
}

/// The answer of an in-process `openat` or `openat2` asked with `flags`, as
/// [`host_opened`]'s.
fn uvfs_opened(t: &Task, r: uvfs::Result<Fd>, flags: i32) -> Out {
    if let Ok(fd) = r
        && flags & libc::O_NONBLOCK == 0
        && flags & libc::O_PATH == 0
        && t.fstat(fd).is_ok_and(|s| s.file_type() != Some(uvfs::FileType::Fifo))
    {
        let fl = t.fcntl(fd, uvfs::FcntlCmd::GetFl).unwrap();
        let fl = OpenFlags::from_bits_retain(fl as u32) - OpenFlags::NONBLOCK;
        t.fcntl(fd, uvfs::FcntlCmd::SetFl(fl)).unwrap();
    }
    ures(r, |fd| Out::Num(fd.0 as i64))
}

pub fn uvfs_op(t: &Task, op: &Op) -> Out {
    let of = |f: i32| OpenFlags::from_bits_retain(f as u32);
    let af = |f: i32| AtFlags::from_bits_retain(f as u32);
    match op {
        Op::Open(d, path, flags, mode) => {
            // As the host side: opened without blocking, which a fifo keeps.
            let r = t.openat(ud(*d), &path.0, of(*flags | libc::O_NONBLOCK), *mode);
            uvfs_opened(t, r, *flags)
        }
        Op::Openat2(d, path, flags, mode, resolve) => {
            let how = uvfs::OpenHow {
                flags: of(*flags | open2_nonblock(*flags)),
                mode: *mode,
                resolve: uvfs::ResolveFlags::from_bits_retain(*resolve),
            };
            uvfs_opened(t, t.openat2(ud(*d), &path.0, &how), *flags)
        }
        Op::Close(fd) => uunit(t.close(Fd(*fd))),
        Op::Dup(fd) => ures(t.dup(Fd(*fd)), |fd| Out::Num(fd.0 as i64)),
        Op::FcntlFd(fd, cmd, arg) => {
            let a = *arg as i32;
            let cmd = match *cmd {
                libc::F_DUPFD => uvfs::FcntlCmd::DupFd(Fd(a)),
                libc::F_DUPFD_CLOEXEC => uvfs::FcntlCmd::DupFdCloexec(Fd(a)),
                libc::F_GETFD => uvfs::FcntlCmd::GetFd,
                libc::F_SETFD => uvfs::FcntlCmd::SetFd(uvfs::FdFlags::from_bits_truncate(a as u32)),
                libc::F_GETFL => uvfs::FcntlCmd::GetFl,
                libc::F_SETFL => uvfs::FcntlCmd::SetFl(OpenFlags::from_bits_retain(a as u32)),
                c => panic!("the generator makes no fcntl command {c}"),
            };
            ures(t.fcntl(Fd(*fd), cmd), |r| Out::Num(r as i64))
        }
        Op::Dup2(a, b) => ures(t.dup2(Fd(*a), Fd(*b)), |fd| Out::Num(fd.0 as i64)),
        Op::Read(fd, n) => {
            let mut buf = vec![0u8; *n];
            ures(t.read(Fd(*fd), &mut buf), |r| Out::Bytes(buf[..r].to_vec()))
        }
        Op::Pread(fd, n, off) => {
            let mut buf = vec![0u8; *n];
            ures(t.pread(Fd(*fd), &mut buf, *off), |r| Out::Bytes(buf[..r].to_vec()))
        }
        Op::Write(fd, n) => ures(t.write(Fd(*fd), &data(*n)), |r| Out::Num(r as i64)),
        Op::Preadv2(fd, lens, off, flags) => {
            let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
            let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
            let r = t.preadv2(Fd(*fd), &mut refs, *off, uvfs::RwfFlags::from_bits_retain(*flags));
            ures(r, |r| Out::Bytes(bufs.concat()[..r].to_vec()))
        }
        Op::Pwritev2(fd, lens, off, flags) => {
            let bufs = vec_data(lens);
            let refs: Vec<&[u8]> = bufs.iter().map(|b| b.as_slice()).collect();
            ures(t.pwritev2(Fd(*fd), &refs, *off, uvfs::RwfFlags::from_bits_retain(*flags)), |r| Out::Num(r as i64))
        }
        Op::Pwrite(fd, n, off) => ures(t.pwrite(Fd(*fd), &data(*n), *off), |r| Out::Num(r as i64)),
        Op::Fallocate(fd, mode, off, len) => {
            uunit(t.fallocate(Fd(*fd), uvfs::FallocFlags::from_bits_retain(*mode as u32), *off, *len))
        }
        Op::CopyFileRange(fi, oi, fo, oo, len, flags) => {
            let (mut a, mut b) = (oi.unwrap_or(0), oo.unwrap_or(0));
            let r = t.copy_file_range(
                Fd(*fi),
                oi.map(|_| &mut a),
                Fd(*fo),
                oo.map(|_| &mut b),
                *len,
                uvfs::CopyRangeFlags::from_bits_retain(*flags),
            );
            ures(r, |r| Out::Nums(vec![r as i64, if oi.is_some() { a } else { -1 }, if oo.is_some() { b } else { -1 }]))
        }
        Op::Sendfile(fo, fi, off, count) => {
            let mut a = off.unwrap_or(0);
            let r = t.sendfile(Fd(*fo), Fd(*fi), off.map(|_| &mut a), *count);
            ures(r, |r| Out::Nums(vec![r as i64, if off.is_some() { a } else { -1 }]))
        }
        Op::Statx(d, path, flags, mask) => {
            let r = t.statx(ud(*d), &path.0, af(*flags), uvfs::StatxMask::from_bits_retain(*mask));
            ures(r, |x| {
                let s = x.stat;
                let base = St {
                    mode: s.mode,
                    nlink: s.nlink as u64,
                    uid: s.uid,
                    gid: s.gid,
                    size: s.size as i64,
                    blocks: s.blocks as i64,
                    rdev: s.rdev,
                };
                let attrs = x.attributes.bits() & !STATX_ATTR_MOUNT_ROOT;
                Out::Statx(x.mask.bits(), attrs, x.attributes_mask.bits(), base, x.btime.sec != 0)
            })
        }
        Op::Lseek(fd, off, w) => {
            if !(*off == 0 && *w == W::Set)
                && t.fstat(Fd(*fd)).is_ok_and(|s| s.file_type() == Some(uvfs::FileType::Directory))
            {
                return Out::Skipped;
            }
            let w = match w {
                W::Set => Whence::Set,
                W::Cur => Whence::Cur,
                W::End => Whence::End,
                W::Data => Whence::Data,
                W::Hole => Whence::Hole,
            };
            ures(t.lseek(Fd(*fd), *off, w), |r| Out::Num(r as i64))
        }
        Op::Fstat(fd) => ures(t.fstat(Fd(*fd)), ust),
        Op::Fstatat(d, path, flags) => ures(t.fstatat(ud(*d), &path.0, af(*flags)), ust),
        Op::Since(d, path, flags) => match t.fstatat(ud(*d), &path.0, af(*flags)) {
            Ok(s) => since((s.dev, s.ino), s.mode, [s.atime, s.mtime, s.ctime].map(|x| (x.sec, i64::from(x.nsec)))),
            Err(e) => Out::Err(e.raw()),
        },
        Op::Faccessat(d, path, mode, flags) => {
            uunit(t.faccessat(ud(*d), &path.0, AccessMode::from_bits_retain(*mode as u32), af(*flags)))
        }
        Op::Mkdirat(d, path, mode) => uunit(t.mkdirat(ud(*d), &path.0, *mode)),
        Op::Mknodat(d, path, mode, dev) => uunit(t.mknodat(ud(*d), &path.0, *mode, *dev)),
        Op::Unlinkat(d, path, flags) => uunit(t.unlinkat(ud(*d), &path.0, af(*flags))),
        Op::Renameat2(d1, p1, d2, p2, flags) => {
            uunit(t.renameat2(ud(*d1), &p1.0, ud(*d2), &p2.0, RenameFlags::from_bits_retain(*flags)))
        }
        Op::Linkat(d1, p1, d2, p2, flags) => uunit(t.linkat(ud(*d1), &p1.0, ud(*d2), &p2.0, af(*flags))),
        Op::Symlinkat(target, d, path) => uunit(t.symlinkat(&target.0, ud(*d), &path.0)),
        Op::Readlinkat(d, path, n) => {
            let mut buf = vec![0u8; *n];
            ures(t.readlinkat(ud(*d), &path.0, &mut buf), |r| Out::Bytes(buf[..r].to_vec()))
        }
        Op::Fchmodat(d, path, mode, flags) => uunit(t.fchmodat(ud(*d), &path.0, *mode, af(*flags))),
        Op::Fchmod(fd, mode) => uunit(t.fchmod(Fd(*fd), *mode)),
        Op::Fchownat(d, path, u, g, flags) => uunit(t.fchownat(ud(*d), &path.0, u.map(Uid), g.map(Gid), af(*flags))),
        Op::Utimensat(d, path, times, flags) => {
            let times = match times {
                Times::Null => None,
                Times::Pair(a, m) => Some([uts(*a), uts(*m)]),
            };
            uunit(t.utimensat(ud(*d), &path.0, times, af(*flags)))
        }
        Op::Truncate(path, len) => uunit(t.truncate(&path.0, *len)),
        Op::Ftruncate(fd, len) => uunit(t.ftruncate(Fd(*fd), *len)),
        Op::Getdents(fd) => {
            let mut buf = vec![0u8; DENTS_BUF];
            ures(t.getdents64(Fd(*fd), &mut buf), |r| Out::Dents(r as i64, parse_dents(&buf[..r])))
        }
        Op::Fsync(fd) => uunit(t.fsync(Fd(*fd))),
        Op::Chdir(path) => uunit(t.chdir(&path.0)),
        Op::Fchdir(fd) => uunit(t.fchdir(Fd(*fd))),
        Op::Getcwd => ures(t.getcwd(), Out::Bytes),
        Op::Umask(m) => Out::Num(t.umask(*m) as i64),
        Op::Getxattr(x, name, n) => {
            let mut buf = vec![0u8; *n];
            let r = match x {
                X::Path(p) => t.getxattr(&p.0, &name.0, &mut buf),
                X::LPath(p) => t.lgetxattr(&p.0, &name.0, &mut buf),
                X::Fd(fd) => t.fgetxattr(Fd(*fd), &name.0, &mut buf),
            };
            ures(r, |r| if *n == 0 { Out::Num(r as i64) } else { Out::Bytes(buf[..r].to_vec()) })
        }
        Op::Setxattr(x, name, v, flags) => {
            let f = XattrFlags::from_bits_retain(*flags as u32);
            uunit(match x {
                X::Path(p) => t.setxattr(&p.0, &name.0, &v.0, f),
                X::LPath(p) => t.lsetxattr(&p.0, &name.0, &v.0, f),
                X::Fd(fd) => t.fsetxattr(Fd(*fd), &name.0, &v.0, f),
            })
        }
        Op::Listxattr(x, n) => {
            let mut buf = vec![0u8; *n];
            let r = match x {
                X::Path(p) => t.listxattr(&p.0, &mut buf),
                X::LPath(p) => t.llistxattr(&p.0, &mut buf),
                X::Fd(fd) => t.flistxattr(Fd(*fd), &mut buf),
            };
            ures(r, |r| if *n == 0 { Out::Num(r as i64) } else { Out::Names(r as i64, names(&buf[..r])) })
        }
        Op::Flock(..) | Op::Fcntl(..) => locks::uvfs_lock_op(t, op, &locks::UvfsPids::of(t, None), None),
        Op::Fork | Op::Child(_) | Op::Bg(_) | Op::Join(_) => {
            panic!("{op:?} needs a sequence's processes: run it with uvfs_run_on")
        }
        Op::GetFlags(fd) => ures(t.ioctl_getflags(Fd(*fd)), |f| Out::Num(i64::from(f.bits()))),
        Op::SetFlags(fd, flags) => uunit(t.ioctl_setflags(Fd(*fd), uvfs::FsFlags::from_bits_retain(*flags))),
        Op::Removexattr(x, name) => uunit(match x {
            X::Path(p) => t.removexattr(&p.0, &name.0),
            X::LPath(p) => t.lremovexattr(&p.0, &name.0),
            X::Fd(fd) => t.fremovexattr(Fd(*fd), &name.0),
        }),
    }
}

pub fn uvfs_creds(who: Who) -> Credentials {
    let groups = [Gid(SUPP)];
    match who {
        Who::Root => Credentials::root(),
        Who::User => Credentials::new(Uid(USER), Gid(GROUP), &groups),
        Who::As { uid, gid, supp } => Credentials::new(Uid(uid), Gid(gid), &[Gid(supp)]),
        Who::SetuidRoot => {
            let mut c = Credentials::new(Uid(0), Gid(0), &groups);
            c.ruid = Uid(USER);
            c.rgid = Gid(GROUP);
            c
        }
    }
}

/// Runs `setup` as root then `ops` as `who` on a fresh uvfs instance. Without fast paths
/// its memfs also keeps small writes' pages in the shmem file (as `uvfs mount` does), so
/// both page stores meet the kernel in every differential case.
pub fn uvfs_run(fast: FastPaths, who: Who, setup: &[Op], ops: &[Op]) -> (Vec<Out>, Vec<Out>) {
    let small = if fast.is_empty() { SmallWritePages::Shmem } else { SmallWritePages::Heap };
    let vfs = Vfs::new(VfsConfig { fast_paths: fast, root_small_write_pages: small, ..VfsConfig::default() });
    uvfs_run_on(&vfs, who, setup, ops)
}

/// The filesystem at uvfs's root in a differential run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Backend {
    /// memfs (tmpfs semantics in memory).
    Mem,
    /// hostfs over a fresh directory on /dev/shm (not the host side's directory), so uvfs
    /// passes every call through to the kernel's tmpfs.
    Host,
}

/// A fresh /dev/shm directory that plays the root (01777 root:root), removed on drop.
pub struct HostDir(pub String);

impl HostDir {
    pub fn new() -> HostDir {
        let tmpl = CString::new(format!("{}/uvfs-hostfs-XXXXXX", scratch_in("/dev/shm").display())).unwrap();
        let mut raw = tmpl.into_bytes_with_nul();
        // SAFETY: a writable NUL-terminated template.
        let dir = unsafe { libc::mkdtemp(raw.as_mut_ptr().cast()) };
        assert!(!dir.is_null(), "mkdtemp: {}", std::io::Error::last_os_error());
        raw.pop();
        let root = String::from_utf8(raw).unwrap();
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
        HostDir(root)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `uvfs_run` on either backend.
pub fn uvfs_run_backend(backend: Backend, fast: FastPaths, who: Who, setup: &[Op], ops: &[Op]) -> (Vec<Out>, Vec<Out>) {
    match backend {
        Backend::Mem => uvfs_run(fast, who, setup, ops),
        Backend::Host => {
            let dir = HostDir::new();
            let fs = uvfs::fs::hostfs::HostFs::new(&dir.0).expect("hostfs");
            let vfs = Vfs::with_root(VfsConfig { fast_paths: fast, ..VfsConfig::default() }, Box::new(fs)).unwrap();
            uvfs_run_on(&vfs, who, setup, ops)
        }
    }
}

/// Runs `setup` as root then `ops` as `who` on `vfs`.
pub fn uvfs_run_on(vfs: &Vfs, who: Who, setup: &[Op], ops: &[Op]) -> (Vec<Out>, Vec<Out>) {
    let t = vfs.root_task();
    t.umask(0o022);
    SEEN.with(|s| s.borrow_mut().clear());
    let s = setup.iter().map(|o| uvfs_op(&t, o)).collect();
    t.set_credentials(uvfs_creds(who));
    let o = locks::uvfs_run_procs(&t, ops);
    (s, o)
}

// ---------------------------------------------------------------- comparison

/// Runs a sequence on the host once and on uvfs with every fast path on and with all
/// off (each forces its general path); `Err` describes the first disagreement with the
/// whole sequence and both sides' results.
pub fn check(who: Who, setup: &[Op], ops: &[Op]) -> Result<(), String> {
    let (hs, ho) = host_run(who, setup, ops);
    for (i, (op, h)) in setup.iter().zip(&hs).enumerate() {
        if let Out::Err(_) = h {
            return Err(format!("setup step {i} {op:?} failed on the host: {h:?}"));
        }
    }
    let runs = [
        (Backend::Mem, FastPaths::all()),
        (Backend::Mem, FastPaths::empty()),
        (Backend::Host, FastPaths::all()),
        (Backend::Host, FastPaths::empty()),
    ];
    let flags = setup.iter().chain(ops).any(Op::uses_file_flags);
    for (backend, fast) in runs {
        if flags && backend == Backend::Host {
            continue;
        }
        let (us, uo) = uvfs_run_backend(backend, fast, who, setup, ops);
        if let Some(i) = hs.iter().zip(&us).position(|(h, u)| h != u) {
            return Err(format!("{backend:?} setup step {i} {:?}: host {:?}, uvfs {:?}", setup[i], hs[i], us[i]));
        }
        let Some(bad) = first_difference(&ho, &uo) else { continue };
        let mut msg = format!("{who:?}, {backend:?}, fast paths {fast:?}: call {bad} differs\n");
        for (i, op) in ops.iter().enumerate() {
            let mark = if i == bad { ">>" } else { "  " };
            msg += &format!("{mark}{i:3} {op:?}\n      host {:?}\n      uvfs {:?}\n", ho[i], uo[i]);
        }
        return Err(msg);
    }
    Ok(())
}

/// The first call whose results differ between the host (`ho`) and the other side
/// (`uo`).
pub fn first_difference(ho: &[Out], uo: &[Out]) -> Option<usize> {
    (0..ho.len().min(uo.len())).find(|&i| ho[i] != uo[i])
}

/// `check`, panicking with the report.
#[track_caller]
pub fn assert_same(who: Who, setup: &[Op], ops: &[Op]) {
    if let Err(m) = check(who, setup, ops) {
        panic!("{m}");
    }
}
