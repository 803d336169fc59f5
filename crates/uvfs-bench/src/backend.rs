//! What a case runs against: the host kernel or a uvfs instance, behind one trait.
//!
//! A [`Backend`] is a filesystem namespace that benchmark threads enter; a [`Worker`] is
//! one thread's handle on it, with the calls the cases make. Cases are generic over the
//! backend, so the hot loop is monomorphised per target: no dynamic dispatch and no
//! allocation between the loop and the call under test. Paths are `&CStr` built before
//! the loop, so the kernel gets them without a copy and uvfs gets the same bytes.
//!
//! Both sides walk the same relative paths from their working directory:
//! - [`KernelFs`]: real syscalls (libc) on a fresh directory of a tmpfs. Each worker
//!   thread `unshare(CLONE_FS)`s and `chdir`s into the directory, so a lookup starts at
//!   its own cwd (no shared dirfd whose `struct file` refcount every thread would bounce
//!   on) and the main thread's cwd is untouched. Workers are threads of one process, so
//!   they share the fd table (will-it-scale's `*_threads` mode); credentials are switched
//!   per thread with the raw `setgroups`/`setfsgid`/`setfsuid` syscalls, which needs root.
//! - [`UvfsFs`]: a `uvfs::Vfs` in this process; each worker is its own `Task` (a process
//!   of the VFS: own fd table and credentials) whose cwd is the instance's root.
//!
//! A FUSE target will be a [`KernelFs`] rooted in the mount point.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use uvfs::{AtFlags, Credentials, DirFd, Fd, Gid, OpenFlags, Task, Uid, Vfs};

/// A raw Linux errno value (both sides use Linux numbers).
pub type Errno = i32;

/// `open(2)` flags used by the cases, Linux values (shared by libc and uvfs).
pub mod oflags {
    /// `O_RDONLY`
    pub const RDONLY: u32 = 0;
    /// `O_WRONLY`
    pub const WRONLY: u32 = 0o1;
    /// `O_RDWR`
    pub const RDWR: u32 = 0o2;
    /// `O_CREAT`
    pub const CREAT: u32 = 0o100;
    /// `O_TRUNC`
    pub const TRUNC: u32 = 0o1000;
    /// `O_CLOEXEC`
    pub const CLOEXEC: u32 = 0o2000000;
}

/// Who a worker is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Who {
    /// The benchmark's own identity: root for uvfs; the process's credentials for the
    /// kernel (root when run as root).
    Admin,
    /// A user with the given uid, gid and supplementary groups.
    User {
        /// User id.
        uid: u32,
        /// Primary group id.
        gid: u32,
        /// Supplementary groups.
        groups: Vec<u32>,
    },
}

/// A filesystem namespace that benchmark threads enter.
pub trait Backend: Send + Sync + 'static {
    /// One thread's handle.
    type Worker: Worker;

    /// Enters the namespace as `who`. Called on the thread that will use the worker
    /// (the kernel backend changes that thread's cwd and credentials).
    fn worker(&self, who: &Who) -> Result<Self::Worker, String>;

    /// Why `who` cannot be had on this backend, if it cannot (checked before a run).
    fn cannot_be(&self, who: &Who) -> Option<String>;
}

/// Per-thread uvfs event counts, summed over a run (see `uvfs::stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WalkCounters {
    /// Locks taken.
    pub locks: u64,
    /// Walks answered locklessly.
    pub walk_lockless: u64,
    /// Walks answered by the locked tier.
    pub walk_locked: u64,
    /// Lockless walks retried.
    pub walk_retries: u64,
    /// Symlink bodies read from the filesystem.
    pub link_fs_reads: u64,
}

impl WalkCounters {
    /// `self - before`, field by field.
    pub fn since(self, before: WalkCounters) -> WalkCounters {
        WalkCounters {
            locks: self.locks.wrapping_sub(before.locks),
            walk_lockless: self.walk_lockless.wrapping_sub(before.walk_lockless),
            walk_locked: self.walk_locked.wrapping_sub(before.walk_locked),
            walk_retries: self.walk_retries.wrapping_sub(before.walk_retries),
            link_fs_reads: self.link_fs_reads.wrapping_sub(before.link_fs_reads),
        }
    }

    /// Field-by-field sum.
    pub fn plus(self, o: WalkCounters) -> WalkCounters {
        WalkCounters {
            locks: self.locks + o.locks,
            walk_lockless: self.walk_lockless + o.walk_lockless,
            walk_locked: self.walk_locked + o.walk_locked,
            walk_retries: self.walk_retries + o.walk_retries,
            link_fs_reads: self.link_fs_reads + o.link_fs_reads,
        }
    }
}

/// The calls a case makes, on one thread. Errors are raw errno values.
pub trait Worker {
    /// An open file.
    type File: Copy + Send;
    /// A live inotify watch (dropped: the watch and its instance go away).
    type Watch: Send;

    /// An inotify instance watching `path` for every event (`IN_ALL_EVENTS`).
    fn watch(&self, path: &CStr) -> Result<Self::Watch, Errno>;

    /// `mkdir(path, mode)` followed by `chmod(path, mode)` (so the umask does not matter).
    fn mkdir(&self, path: &CStr, mode: u32) -> Result<(), Errno>;
    /// `symlink(target, path)`.
    fn symlink(&self, target: &CStr, path: &CStr) -> Result<(), Errno>;
    /// `lchown(path, uid, gid)`.
    fn chown(&self, path: &CStr, uid: u32, gid: u32) -> Result<(), Errno>;
    /// `chmod(path, mode)`.
    fn chmod(&self, path: &CStr, mode: u32) -> Result<(), Errno>;
    /// `open(path, flags, mode)` with Linux flag values ([`oflags`]).
    fn open(&self, path: &CStr, flags: u32, mode: u32) -> Result<Self::File, Errno>;
    /// `close(file)`.
    fn close(&self, file: Self::File) -> Result<(), Errno>;
    /// `stat(path)` (follows symlinks); the result is discarded.
    fn stat(&self, path: &CStr) -> Result<(), Errno>;
    /// `readlink(path, buf)`.
    fn readlink(&self, path: &CStr, buf: &mut [u8]) -> Result<usize, Errno>;
    /// `pwrite(file, buf, off)`.
    fn pwrite(&self, file: Self::File, buf: &[u8], off: u64) -> Result<usize, Errno>;
    /// `pread(file, buf, off)`.
    fn pread(&self, file: Self::File, buf: &mut [u8], off: u64) -> Result<usize, Errno>;
    /// `unlink(path)`.
    fn unlink(&self, path: &CStr) -> Result<(), Errno>;
    /// This thread's uvfs counters now (`None` for the kernel).
    fn counters(&self) -> Option<WalkCounters>;
}

/// Whether the process runs as root (needed to switch kernel credentials).
pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn errno() -> Errno {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn check(r: libc::c_int) -> Result<(), Errno> {
    if r < 0 { Err(errno()) } else { Ok(()) }
}

/// `TMPFS_MAGIC` from `<linux/magic.h>`.
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// The host kernel, on a fresh directory of a tmpfs, removed on drop; or (the `fuse`
/// target, [`KernelFs::on_fuse`]) on a fresh memfs served through FUSE by `uvfs-fuse`
/// in this process, with kernel caching off, unmounted on drop.
pub struct KernelFs {
    dir: PathBuf,
    cdir: CString,
    /// The FUSE mount and its mount point, for the `fuse` target.
    fuse: Option<(uvfs_fuse::MountHandle, PathBuf)>,
}

impl std::fmt::Debug for KernelFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelFs").field("dir", &self.dir).field("fuse", &self.fuse.is_some()).finish()
    }
}

impl KernelFs {
    /// Makes a fresh directory `uvfs-bench.<pid>.<n>` under `parent`, which must be a
    /// directory on a tmpfs. The error says why the kernel target cannot run.
    pub fn new(parent: &Path) -> Result<KernelFs, String> {
        check_tmpfs(parent)?;
        KernelFs::in_dir(parent)
    }

    /// A fresh memfs mounted through FUSE (entry, attribute and negative timeouts 0) on a
    /// new directory of the system temp dir; the workers make real syscalls there. Needs
    /// root (or a usable fusermount3) and /dev/fuse; the error says what is missing.
    pub fn on_fuse() -> Result<KernelFs, String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static SEQ: AtomicU32 = AtomicU32::new(0);
        if !Path::new("/dev/fuse").exists() {
            return Err("/dev/fuse is missing (no FUSE in this kernel)".into());
        }
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let mp = std::env::temp_dir().join(format!("uvfs-bench-fuse.{}.{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&mp);
        std::fs::create_dir(&mp).map_err(|e| format!("cannot create {}: {e}", mp.display()))?;
        let vfs = Vfs::new(uvfs::VfsConfig::default());
        let opts = uvfs_fuse::MountOptions { watch: false, ..uvfs_fuse::MountOptions::uncached() };
        let h = match uvfs_fuse::spawn(&vfs, &mp, &opts) {
            Ok(h) => h,
            Err(e) => {
                let _ = std::fs::remove_dir(&mp);
                return Err(format!("cannot mount uvfs through FUSE on {}: {e}", mp.display()));
            }
        };
        let mut k = KernelFs::in_dir(&mp)?;
        k.fuse = Some((h, mp));
        Ok(k)
    }

    fn in_dir(parent: &Path) -> Result<KernelFs, String> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("uvfs-bench.{}.{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        // World-searchable, so workers with other credentials can enter it.
        let cdir = CString::new(dir.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: cdir is a valid NUL-terminated path.
        check(unsafe { libc::chmod(cdir.as_ptr(), 0o755) })
            .map_err(|e| format!("cannot chmod {}: errno {e}", dir.display()))?;
        Ok(KernelFs { dir, cdir, fuse: None })
    }

    /// The directory the workers start in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The FUSE mount point, for a backend made by [`KernelFs::on_fuse`].
    pub fn mount_point(&self) -> Option<&Path> {
        self.fuse.as_ref().map(|(_, mp)| mp.as_path())
    }
}

impl Drop for KernelFs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        if let Some((h, mp)) = self.fuse.take() {
            let _ = h.unmount();
            let _ = std::fs::remove_dir(mp);
        }
    }
}

/// Checks that `dir` exists and is on a tmpfs.
pub fn check_tmpfs(dir: &Path) -> Result<(), String> {
    let c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| format!("{} contains a NUL byte", dir.display()))?;
    let mut st: libc::statfs = unsafe {
        // SAFETY: statfs is plain old data; all-zero is a valid value.
        std::mem::zeroed()
    };
    // SAFETY: valid path pointer and a valid out-pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!("{} is not usable: {e}", dir.display()));
    }
    #[allow(clippy::unnecessary_cast)]
    let magic = st.f_type as i64;
    if magic != TMPFS_MAGIC {
        return Err(format!("{} is not a tmpfs (f_type {magic:#x})", dir.display()));
    }
    Ok(())
}

impl Backend for KernelFs {
    type Worker = KernelWorker;

    fn cannot_be(&self, who: &Who) -> Option<String> {
        match who {
            Who::Admin => None,
            Who::User { .. } if running_as_root() => None,
            Who::User { uid, .. } => Some(format!("switching the kernel credentials to uid {uid} needs root")),
        }
    }

    fn worker(&self, who: &Who) -> Result<KernelWorker, String> {
        // SAFETY: unshare(CLONE_FS) only affects the calling thread's fs_struct.
        check(unsafe { libc::unshare(libc::CLONE_FS) }).map_err(|e| format!("unshare(CLONE_FS) failed: errno {e}"))?;
        // SAFETY: valid path.
        check(unsafe { libc::chdir(self.cdir.as_ptr()) })
            .map_err(|e| format!("chdir {} failed: errno {e}", self.dir.display()))?;
        if let Who::User { uid, gid, groups } = who {
            if let Some(why) = self.cannot_be(who) {
                return Err(why);
            }
            let groups: Vec<libc::gid_t> = groups.iter().map(|&g| g as libc::gid_t).collect();
            // SAFETY: the raw syscall changes only this thread's groups (glibc's wrapper
            // would change every thread's); the pointer and length describe `groups`.
            let r = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) as libc::c_int };
            check(r).map_err(|e| format!("setgroups failed: errno {e}"))?;
            // setfsgid/setfsuid are per-thread and report the previous id; a second call
            // returns the id in force, which must be the one asked for.
            // SAFETY: no memory is passed.
            let now = unsafe {
                libc::setfsgid(*gid);
                libc::setfsgid(*gid)
            };
            if now as u32 != *gid {
                return Err(format!("setfsgid({gid}) did not take"));
            }
            // SAFETY: as above.
            let now = unsafe {
                libc::setfsuid(*uid);
                libc::setfsuid(*uid)
            };
            if now as u32 != *uid {
                return Err(format!("setfsuid({uid}) did not take"));
            }
        }
        Ok(KernelWorker { _not_send: std::marker::PhantomData })
    }
}

/// A kernel worker: this thread, inside the benchmark directory.
#[derive(Debug)]
pub struct KernelWorker {
    /// The cwd and credentials belong to the thread that made this worker.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Worker for KernelWorker {
    type File = libc::c_int;
    type Watch = std::os::fd::OwnedFd;

    fn watch(&self, path: &CStr) -> Result<std::os::fd::OwnedFd, Errno> {
        // SAFETY: plain syscalls; the descriptor is owned by the returned OwnedFd.
        unsafe {
            let fd = libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC);
            check(fd)?;
            let owned = <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd);
            check(libc::inotify_add_watch(fd, path.as_ptr(), libc::IN_ALL_EVENTS))?;
            Ok(owned)
        }
    }

    fn mkdir(&self, path: &CStr, mode: u32) -> Result<(), Errno> {
        // SAFETY: valid path.
        check(unsafe { libc::mkdir(path.as_ptr(), mode) })?;
        self.chmod(path, mode)
    }

    fn symlink(&self, target: &CStr, path: &CStr) -> Result<(), Errno> {
        // SAFETY: valid paths.
        check(unsafe { libc::symlink(target.as_ptr(), path.as_ptr()) })
    }

    fn chown(&self, path: &CStr, uid: u32, gid: u32) -> Result<(), Errno> {
        // SAFETY: valid path.
        check(unsafe { libc::lchown(path.as_ptr(), uid, gid) })
    }

    fn chmod(&self, path: &CStr, mode: u32) -> Result<(), Errno> {
        // SAFETY: valid path.
        check(unsafe { libc::chmod(path.as_ptr(), mode) })
    }

    #[inline]
    fn open(&self, path: &CStr, flags: u32, mode: u32) -> Result<libc::c_int, Errno> {
        // SAFETY: valid path; the mode argument is read only with O_CREAT.
        let fd = unsafe { libc::open(path.as_ptr(), flags as libc::c_int, mode) };
        if fd < 0 { Err(errno()) } else { Ok(fd) }
    }

    #[inline]
    fn close(&self, file: libc::c_int) -> Result<(), Errno> {
        // SAFETY: closing a descriptor this worker opened.
        check(unsafe { libc::close(file) })
    }

    #[inline]
    fn stat(&self, path: &CStr) -> Result<(), Errno> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: valid path and out-pointer.
        check(unsafe { libc::stat(path.as_ptr(), st.as_mut_ptr()) })
    }

    #[inline]
    fn readlink(&self, path: &CStr, buf: &mut [u8]) -> Result<usize, Errno> {
        // SAFETY: valid path; buf is writable for its length.
        let n = unsafe { libc::readlink(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 { Err(errno()) } else { Ok(n as usize) }
    }

    #[inline]
    fn pwrite(&self, file: libc::c_int, buf: &[u8], off: u64) -> Result<usize, Errno> {
        // SAFETY: buf is readable for its length.
        let n = unsafe { libc::pwrite(file, buf.as_ptr().cast(), buf.len(), off as libc::off_t) };
        if n < 0 { Err(errno()) } else { Ok(n as usize) }
    }

    #[inline]
    fn pread(&self, file: libc::c_int, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::pread(file, buf.as_mut_ptr().cast(), buf.len(), off as libc::off_t) };
        if n < 0 { Err(errno()) } else { Ok(n as usize) }
    }

    fn unlink(&self, path: &CStr) -> Result<(), Errno> {
        // SAFETY: valid path.
        check(unsafe { libc::unlink(path.as_ptr()) })
    }

    fn counters(&self) -> Option<WalkCounters> {
        None
    }
}

/// A uvfs instance in this process.
#[derive(Clone)]
pub struct UvfsFs {
    vfs: Vfs,
}

impl UvfsFs {
    /// A fresh instance with the given fast paths on.
    pub fn new(fast_paths: uvfs::FastPaths) -> UvfsFs {
        UvfsFs { vfs: Vfs::new(uvfs::VfsConfig { fast_paths, ..Default::default() }) }
    }
}

impl Backend for UvfsFs {
    type Worker = UvfsWorker;

    fn cannot_be(&self, _who: &Who) -> Option<String> {
        None
    }

    fn worker(&self, who: &Who) -> Result<UvfsWorker, String> {
        let task = match who {
            Who::Admin => self.vfs.root_task(),
            Who::User { uid, gid, groups } => {
                let groups: Vec<Gid> = groups.iter().map(|&g| Gid(g)).collect();
                self.vfs.task(Credentials::new(Uid(*uid), Gid(*gid), &groups))
            }
        };
        Ok(UvfsWorker { task })
    }
}

/// A uvfs worker: its own task.
pub struct UvfsWorker {
    task: Task,
}

fn raw(e: uvfs::Errno) -> Errno {
    e.raw()
}

impl Worker for UvfsWorker {
    type File = Fd;
    type Watch = uvfs::Inotify;

    fn watch(&self, path: &CStr) -> Result<uvfs::Inotify, Errno> {
        let ino = self.task.inotify_init1(uvfs::InotifyFlags::NONBLOCK).map_err(raw)?;
        self.task.inotify_add_watch(&ino, path.to_bytes(), uvfs::EventMask::ALL_EVENTS).map_err(raw)?;
        Ok(ino)
    }

    fn mkdir(&self, path: &CStr, mode: u32) -> Result<(), Errno> {
        self.task.mkdirat(DirFd::Cwd, path.to_bytes(), mode).map_err(raw)?;
        self.chmod(path, mode)
    }

    fn symlink(&self, target: &CStr, path: &CStr) -> Result<(), Errno> {
        self.task.symlinkat(target.to_bytes(), DirFd::Cwd, path.to_bytes()).map_err(raw)
    }

    fn chown(&self, path: &CStr, uid: u32, gid: u32) -> Result<(), Errno> {
        self.task
            .fchownat(DirFd::Cwd, path.to_bytes(), Some(Uid(uid)), Some(Gid(gid)), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(raw)
    }

    fn chmod(&self, path: &CStr, mode: u32) -> Result<(), Errno> {
        self.task.fchmodat(DirFd::Cwd, path.to_bytes(), mode, AtFlags::empty()).map_err(raw)
    }

    #[inline]
    fn open(&self, path: &CStr, flags: u32, mode: u32) -> Result<Fd, Errno> {
        let flags = OpenFlags::from_bits(flags).ok_or(libc::EINVAL)?;
        self.task.openat(DirFd::Cwd, path.to_bytes(), flags, mode).map_err(raw)
    }

    #[inline]
    fn close(&self, file: Fd) -> Result<(), Errno> {
        self.task.close(file).map_err(raw)
    }

    #[inline]
    fn stat(&self, path: &CStr) -> Result<(), Errno> {
        self.task.fstatat(DirFd::Cwd, path.to_bytes(), AtFlags::empty()).map(|_| ()).map_err(raw)
    }

    #[inline]
    fn readlink(&self, path: &CStr, buf: &mut [u8]) -> Result<usize, Errno> {
        self.task.readlinkat(DirFd::Cwd, path.to_bytes(), buf).map_err(raw)
    }

    #[inline]
    fn pwrite(&self, file: Fd, buf: &[u8], off: u64) -> Result<usize, Errno> {
        self.task.pwrite(file, buf, off as i64).map_err(raw)
    }

    #[inline]
    fn pread(&self, file: Fd, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
        self.task.pread(file, buf, off as i64).map_err(raw)
    }

    fn unlink(&self, path: &CStr) -> Result<(), Errno> {
        self.task.unlinkat(DirFd::Cwd, path.to_bytes(), AtFlags::empty()).map_err(raw)
    }

    fn counters(&self) -> Option<WalkCounters> {
        let c = uvfs::counters();
        Some(WalkCounters {
            locks: c.locks,
            walk_lockless: c.walk_lockless,
            walk_locked: c.walk_locked,
            walk_retries: c.walk_retries,
            link_fs_reads: c.link_fs_reads,
        })
    }
}

/// A short name for an errno value, for error messages.
pub fn errno_name(e: Errno) -> String {
    match uvfs::Errno::from_raw(e).name() {
        Some(n) => n.to_string(),
        None => format!("errno {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_flag_values_match_libc_and_uvfs() {
        assert_eq!(oflags::RDONLY, libc::O_RDONLY as u32);
        assert_eq!(oflags::WRONLY, libc::O_WRONLY as u32);
        assert_eq!(oflags::RDWR, libc::O_RDWR as u32);
        assert_eq!(oflags::CREAT, libc::O_CREAT as u32);
        assert_eq!(oflags::TRUNC, libc::O_TRUNC as u32);
        assert_eq!(oflags::CLOEXEC, libc::O_CLOEXEC as u32);
        assert_eq!(oflags::WRONLY, OpenFlags::WRONLY.bits());
        assert_eq!(oflags::RDWR, OpenFlags::RDWR.bits());
        assert_eq!(oflags::CREAT, OpenFlags::CREAT.bits());
        assert_eq!(oflags::TRUNC, OpenFlags::TRUNC.bits());
        assert_eq!(oflags::CLOEXEC, OpenFlags::CLOEXEC.bits());
    }

    #[test]
    fn non_tmpfs_is_refused_with_a_reason() {
        let e = check_tmpfs(Path::new("/nonexistent-uvfs-bench-dir")).unwrap_err();
        assert!(e.contains("/nonexistent-uvfs-bench-dir"), "{e}");
        // /proc is never a tmpfs.
        let e = check_tmpfs(Path::new("/proc")).unwrap_err();
        assert!(e.contains("not a tmpfs"), "{e}");
    }

    #[test]
    fn counters_difference_and_sum() {
        let a = WalkCounters { locks: 5, walk_lockless: 7, walk_locked: 1, walk_retries: 0, link_fs_reads: 2 };
        let b = WalkCounters { locks: 2, walk_lockless: 3, walk_locked: 1, walk_retries: 0, link_fs_reads: 1 };
        let d = a.since(b);
        assert_eq!(d, WalkCounters { locks: 3, walk_lockless: 4, walk_locked: 0, walk_retries: 0, link_fs_reads: 1 });
        assert_eq!(d.plus(b), a);
    }
}
