//! The request handlers: [`fuser::Filesystem`] over a [`uvfs::Vfs`].
//!
//! Every handler resolves the node ids of the request to descriptors ([`crate::nodes`]),
//! picks the task of the caller ([`crate::ident`]) and makes one or two uvfs calls with
//! it, so uvfs's permission checks see the caller. Errors go back as the errno uvfs
//! returned. Each handler runs under `catch_unwind`: a panic is logged and the request is
//! answered with EIO (the unanswered reply's destructor sends it), and the worker thread
//! keeps serving.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use uvfs::{AccessMode, AtFlags, DirFd, Errno, Fd, FileType, Gid, OpenFlags, RenameFlags, Stat, Task, Uid, Whence};

use crate::expect::{Expect, Expected};
use crate::ident::{Caller, DEFAULT_UMASK, Tasks};
use crate::nodes::{Inserted, Key, Nodes};
use crate::{MountOptions, Permissions};

type Result<T> = uvfs::Result<T>;

/// Adds one directory entry to a reply: (node id or inode number, next offset, name,
/// type, attributes for readdirplus); true when the reply is full.
type AddEntry<'a> = dyn FnMut(u64, u64, &[u8], fuser::FileType, Option<&FileAttr>) -> bool + 'a;

/// The state shared by the worker threads and the invalidation thread.
pub(crate) struct Server {
    pub(crate) tasks: Tasks,
    pub(crate) nodes: Nodes,
    pub(crate) opts: MountOptions,
    pub(crate) expect: Expect,
    /// Set once the kernel accepted `FUSE_POSIX_ACL` (kernel permission checks too).
    pub(crate) kernel_acl: AtomicBool,
}

/// The [`fuser::Filesystem`] given to the session.
pub(crate) struct UvfsFs {
    pub(crate) s: Arc<Server>,
}

fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e.raw())
}

fn caller(req: &Request) -> Caller {
    Caller { uid: req.uid(), gid: req.gid(), pid: req.pid() }
}

/// Runs a handler body, turning a panic into EIO (logged once, with the operation).
fn guarded<R>(op: &str, f: impl FnOnce() -> Result<R>) -> Result<R> {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log::error!("uvfs-fuse: panic in {op} handler, answered EIO: {msg}");
            Err(Errno::EIO)
        }
    }
}

/// A name from the kernel: one component.
fn name_bytes(name: &OsStr) -> Result<&[u8]> {
    let b = name.as_bytes();
    if b.is_empty() || b.contains(&b'/') {
        return Err(Errno::EINVAL);
    }
    Ok(b)
}

pub(crate) fn key_of(st: &Stat) -> Key {
    (st.dev, st.ino)
}

fn system_time(t: uvfs::Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(u64::from(t.nsec))
    }
}

fn timespec(t: SystemTime) -> uvfs::Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => uvfs::Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
        Err(e) => {
            let d = e.duration();
            if d.subsec_nanos() == 0 {
                uvfs::Timespec { sec: -(d.as_secs() as i64), nsec: 0 }
            } else {
                uvfs::Timespec { sec: -(d.as_secs() as i64) - 1, nsec: 1_000_000_000 - d.subsec_nanos() }
            }
        }
    }
}

fn fuse_kind(mode: u32) -> fuser::FileType {
    match FileType::from_mode(mode) {
        Some(FileType::Directory) => fuser::FileType::Directory,
        Some(FileType::Symlink) => fuser::FileType::Symlink,
        Some(FileType::Fifo) => fuser::FileType::NamedPipe,
        Some(FileType::CharDevice) => fuser::FileType::CharDevice,
        Some(FileType::BlockDevice) => fuser::FileType::BlockDevice,
        Some(FileType::Socket) => fuser::FileType::Socket,
        _ => fuser::FileType::RegularFile,
    }
}

fn dtype_kind(dtype: u8) -> fuser::FileType {
    match dtype {
        4 => fuser::FileType::Directory,
        10 => fuser::FileType::Symlink,
        1 => fuser::FileType::NamedPipe,
        2 => fuser::FileType::CharDevice,
        6 => fuser::FileType::BlockDevice,
        12 => fuser::FileType::Socket,
        _ => fuser::FileType::RegularFile,
    }
}

/// glibc's 64-bit `dev_t` to the kernel's 32-bit `new_encode_dev` form FUSE carries.
pub(crate) fn encode_dev(dev: u64) -> u32 {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    ((minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)) as u32
}

/// The kernel's `new_decode_dev` to glibc's `makedev`.
pub(crate) fn decode_dev(dev: u32) -> u64 {
    let major = (dev & 0xfff00) >> 8;
    let minor = (dev & 0xff) | ((dev >> 12) & 0xfff00);
    uvfs::stat::makedev(major, minor)
}

impl Server {
    fn attr(&self, st: &Stat) -> FileAttr {
        let ctime = system_time(st.ctime);
        FileAttr {
            ino: INodeNo(self.nodes.ino_for_key(key_of(st))),
            size: st.size,
            blocks: st.blocks,
            atime: system_time(st.atime),
            mtime: system_time(st.mtime),
            ctime,
            crtime: ctime,
            kind: fuse_kind(st.mode),
            perm: (st.mode & 0o7777) as u16,
            nlink: st.nlink,
            uid: st.uid,
            gid: st.gid,
            rdev: encode_dev(st.rdev),
            blksize: if st.blksize == 0 { 4096 } else { st.blksize },
            flags: 0,
        }
    }

    fn base(&self) -> &Task {
        self.tasks.base()
    }

    fn task(&self, req: &Request) -> Arc<Task> {
        self.tasks.get(&caller(req), DEFAULT_UMASK, false)
    }

    fn node(&self, ino: INodeNo) -> Result<Fd> {
        self.nodes.fd(ino.0).ok_or(Errno::ESTALE)
    }

    fn entry_ttl(&self) -> Duration {
        if self.opts.permissions == Permissions::Uvfs { Duration::ZERO } else { self.opts.entry_timeout }
    }

    fn negative_ttl(&self) -> Duration {
        if self.opts.permissions == Permissions::Uvfs { Duration::ZERO } else { self.opts.negative_timeout }
    }

    /// Registers the node of the `O_PATH` descriptor `fd` (one lookup) and returns its
    /// attributes.
    fn register(&self, fd: Fd) -> Result<FileAttr> {
        let st = match self.base().fstat(fd) {
            Ok(st) => st,
            Err(e) => {
                let _ = self.base().close(fd);
                return Err(e);
            }
        };
        match self.nodes.insert(key_of(&st), fd) {
            Inserted::New(_) => {}
            Inserted::Existing(_, fd) => {
                let _ = self.base().close(fd);
            }
        }
        Ok(self.attr(&st))
    }

    /// Looks `name` up in `parent` as `t` (search permission is checked), making it a
    /// node.
    fn lookup_in(&self, t: &Task, parent: Fd, name: &[u8]) -> Result<FileAttr> {
        let fd = t.openat(DirFd::Fd(parent), name, OpenFlags::PATH | OpenFlags::NOFOLLOW, 0)?;
        self.register(fd)
    }

    fn forget_node(&self, id: u64, n: u64) {
        if let Some(fd) = self.nodes.forget(id, n) {
            let _ = self.base().close(fd);
        }
    }

    fn parent_key(&self, parent: INodeNo) -> Option<Key> {
        self.nodes.key(parent.0)
    }

    /// Runs a namespace change in `parent` with the invalidation thread told to expect its
    /// event(s), so it does not invalidate what the kernel itself just changed.
    fn expecting<R>(&self, what: &[Expected], f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.expect.add(what);
        let r = f();
        if r.is_err() {
            self.expect.remove(what);
        }
        r
    }

    fn name_expect(&self, parent: INodeNo, name: &[u8]) -> Vec<Expected> {
        self.parent_key(parent).map(|k| vec![Expected::Name(k, name.to_vec())]).unwrap_or_default()
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr_inner(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr> {
        let t = self.task(req);
        let node = self.node(ino)?;
        let here = DirFd::Fd(node);
        let at = AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW;
        let exp: Vec<Expected> = self.nodes.key(ino.0).map(|k| vec![Expected::Object(k)]).unwrap_or_default();
        self.expecting(&exp, || {
            if uid.is_some() || gid.is_some() {
                t.fchownat(here, b"", uid.map(Uid), gid.map(Gid), at)?;
            }
            if let Some(m) = mode {
                t.fchmodat(here, b"", m & 0o7777, AtFlags::EMPTY_PATH)?;
            }
            if let Some(len) = size {
                let len = i64::try_from(len).map_err(|_| Errno::EFBIG)?;
                let own = fh.map(|h| Fd(h.0 as i32)).filter(|&fd| t.file(fd).is_ok_and(|f| f.flags().writable()));
                match own {
                    Some(fd) => t.ftruncate(fd, len)?,
                    None => {
                        let fd = t.reopen(node, OpenFlags::WRONLY)?;
                        let r = t.ftruncate(fd, len);
                        let _ = t.close(fd);
                        r?;
                    }
                }
            }
            if atime.is_some() || mtime.is_some() {
                let conv = |x: Option<TimeOrNow>| match x {
                    None => uvfs::TimeSpec::Omit,
                    Some(TimeOrNow::Now) => uvfs::TimeSpec::Now,
                    Some(TimeOrNow::SpecificTime(s)) => uvfs::TimeSpec::At(timespec(s)),
                };
                t.utimensat(here, b"", Some([conv(atime), conv(mtime)]), at)?;
            }
            Ok(())
        })?;
        Ok(self.attr(&self.base().fstat(node)?))
    }

    fn readdir_inner(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        plus: bool,
        add: &mut AddEntry<'_>,
    ) -> Result<()> {
        let t = self.base();
        let fd = Fd(i32::try_from(fh.0).map_err(|_| Errno::EBADF)?);
        let dir = self.node(ino)?;
        let offset = i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
        t.lseek(fd, offset, Whence::Set)?;
        let dev = t.fstat(fd)?.dev;
        let caller_task = if plus { Some(self.task(req)) } else { None };
        loop {
            let batch = t.getdents(fd, 64)?;
            if batch.is_empty() {
                return Ok(());
            }
            for e in batch {
                let kind = dtype_kind(e.dtype);
                let ino = self.nodes.ino_for_key((dev, e.ino));
                let dots = e.name == b"." || e.name == b"..";
                let attr = match &caller_task {
                    Some(ct) if !dots => self.lookup_in(ct, dir, &e.name).ok(),
                    _ => None,
                };
                let node_id = attr.as_ref().map_or(0, |a| a.ino.0);
                if add(node_id.max(if plus { 0 } else { ino }), e.next, &e.name, kind, attr.as_ref()) {
                    // The buffer is full: the kernel never sees this entry.
                    if node_id != 0 {
                        self.forget_node(node_id, 1);
                    }
                    return Ok(());
                }
            }
        }
    }

    fn xattr_reply(buf_len: u32, data: Vec<u8>, reply: ReplyXattr) {
        if buf_len == 0 {
            reply.size(data.len() as u32);
        } else if data.len() > buf_len as usize {
            reply.error(errno(Errno::ERANGE));
        } else {
            reply.data(&data);
        }
    }
}

/// Reads a whole xattr value (or list) with a size-then-fill loop.
fn read_sized(f: impl Fn(&mut [u8]) -> Result<usize>) -> Result<Vec<u8>> {
    loop {
        let n = f(&mut [])?;
        let mut buf = vec![0u8; n];
        match f(&mut buf) {
            Ok(m) => {
                buf.truncate(m);
                return Ok(buf);
            }
            Err(Errno::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

macro_rules! reply_err {
    ($reply:expr, $r:expr, $ok:expr) => {
        match $r {
            Ok(v) => $ok(v),
            Err(e) => $reply.error(errno(e)),
        }
    };
}

impl Filesystem for UvfsFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Not FUSE_ATOMIC_O_TRUNC: with it the kernel sends O_TRUNC in OPEN and checks
        // ETXTBSY only afterwards (`handle_truncate`), so an O_RDONLY|O_TRUNC open of a
        // running executable truncated it before failing, and the program, its text gone,
        // could die of SIGBUS before the check, which then passed (pjdfstest's intermittent
        // open::etxtbsy). Without it the kernel checks first, then sends SETATTR(size 0).
        let mut want = InitFlags::FUSE_HANDLE_KILLPRIV_V2
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_EXPORT_SUPPORT
            | InitFlags::FUSE_DONT_MASK;
        if self.s.opts.permissions == Permissions::Kernel {
            want |= InitFlags::FUSE_POSIX_ACL;
        }
        let got = want & config.capabilities();
        let _ = config.add_capabilities(got);
        self.s.kernel_acl.store(got.contains(InitFlags::FUSE_POSIX_ACL), Ordering::Relaxed);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let s = &self.s;
        let r = guarded("lookup", || {
            let name = name_bytes(name)?;
            if s.opts.panic_on_lookup.as_deref() == Some(name) {
                panic!("test panic on lookup");
            }
            let p = s.node(parent)?;
            s.lookup_in(&s.task(req), p, name)
        });
        match r {
            Ok(a) => reply.entry(&s.entry_ttl(), &a, Generation(0)),
            Err(Errno::ENOENT) if !s.negative_ttl().is_zero() => {
                let mut a = s.attr(&Stat::default());
                a.ino = INodeNo(0);
                reply.entry(&s.negative_ttl(), &a, Generation(0))
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _ = guarded("forget", || {
            self.s.forget_node(ino.0, nlookup);
            Ok(())
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let s = &self.s;
        let r = guarded("getattr", || s.base().fstat(s.node(ino)?));
        reply_err!(reply, r, |st| reply.attr(&s.opts.attr_timeout, &s.attr(&st)));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let s = &self.s;
        let r = guarded("setattr", || s.setattr_inner(req, ino, mode, uid, gid, size, atime, mtime, fh));
        reply_err!(reply, r, |a| reply.attr(&s.opts.attr_timeout, &a));
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let s = &self.s;
        let r = guarded("readlink", || {
            let mut buf = vec![0u8; 4096];
            let n = s.task(req).readlinkat(DirFd::Fd(s.node(ino)?), b"", &mut buf)?;
            buf.truncate(n);
            Ok(buf)
        });
        reply_err!(reply, r, |b: Vec<u8>| reply.data(&b));
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let s = &self.s;
        let r = guarded("mknod", || {
            let name = name_bytes(name)?;
            let p = s.node(parent)?;
            let t = s.tasks.get(&caller(req), umask, false);
            s.expecting(&s.name_expect(parent, name), || t.mknodat(DirFd::Fd(p), name, mode, decode_dev(rdev)))?;
            s.lookup_in(&t, p, name)
        });
        reply_err!(reply, r, |a| reply.entry(&s.entry_ttl(), &a, Generation(0)));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let s = &self.s;
        let r = guarded("mkdir", || {
            let name = name_bytes(name)?;
            let p = s.node(parent)?;
            let t = s.tasks.get(&caller(req), umask, false);
            s.expecting(&s.name_expect(parent, name), || t.mkdirat(DirFd::Fd(p), name, mode & 0o7777))?;
            s.lookup_in(&t, p, name)
        });
        reply_err!(reply, r, |a| reply.entry(&s.entry_ttl(), &a, Generation(0)));
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let s = &self.s;
        let r = guarded("unlink", || {
            let name = name_bytes(name)?;
            let p = s.node(parent)?;
            s.expecting(&s.name_expect(parent, name), || s.task(req).unlinkat(DirFd::Fd(p), name, AtFlags::empty()))
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let s = &self.s;
        let r = guarded("rmdir", || {
            let name = name_bytes(name)?;
            let p = s.node(parent)?;
            s.expecting(&s.name_expect(parent, name), || s.task(req).unlinkat(DirFd::Fd(p), name, AtFlags::REMOVEDIR))
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        let s = &self.s;
        let r = guarded("symlink", || {
            let name = name_bytes(link_name)?;
            let p = s.node(parent)?;
            let t = s.task(req);
            s.expecting(&s.name_expect(parent, name), || {
                t.symlinkat(target.as_os_str().as_bytes(), DirFd::Fd(p), name)
            })?;
            s.lookup_in(&t, p, name)
        });
        reply_err!(reply, r, |a| reply.entry(&s.entry_ttl(), &a, Generation(0)));
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let s = &self.s;
        let r = guarded("rename", || {
            let name = name_bytes(name)?;
            let newname = name_bytes(newname)?;
            let p = s.node(parent)?;
            let np = s.node(newparent)?;
            let fl = RenameFlags::from_bits(flags.bits()).ok_or(Errno::EINVAL)?;
            let mut exp = s.name_expect(parent, name);
            exp.extend(s.name_expect(newparent, newname));
            s.expecting(&exp, || s.task(req).renameat2(DirFd::Fd(p), name, DirFd::Fd(np), newname, fl))
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let s = &self.s;
        let r = guarded("link", || {
            let name = name_bytes(newname)?;
            let src = s.node(ino)?;
            let np = s.node(newparent)?;
            // `linkat(fd, "", ..., AT_EMPTY_PATH)` needs CAP_DAC_READ_SEARCH; that capability
            // changes nothing else here: the walk from `np` is one component, and
            // `may_create` asks for write permission, which it does not bypass.
            let lt = s.tasks.get(&caller(req), DEFAULT_UMASK, true);
            s.expecting(&s.name_expect(newparent, name), || {
                lt.linkat(DirFd::Fd(src), b"", DirFd::Fd(np), name, AtFlags::EMPTY_PATH)
            })?;
            s.lookup_in(&s.task(req), np, name)
        });
        reply_err!(reply, r, |a| reply.entry(&s.entry_ttl(), &a, Generation(0)));
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        let s = &self.s;
        let r = guarded("open", || {
            let fl = OpenFlags::from_bits_truncate(flags.0 as u32)
                & !(OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::NOCTTY | OpenFlags::CLOEXEC);
            let node = s.node(ino)?;
            let exp: Vec<Expected> = match (fl.contains(OpenFlags::TRUNC), s.nodes.key(ino.0)) {
                (true, Some(k)) => vec![Expected::Object(k)],
                _ => Vec::new(),
            };
            s.expecting(&exp, || s.task(req).reopen(node, fl))
        });
        reply_err!(reply, r, |fd: Fd| reply.opened(FileHandle(fd.0 as u64), FopenFlags::empty()));
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = &self.s;
        let r = guarded("read", || {
            let off = i64::try_from(offset).map_err(|_| Errno::EINVAL)?;
            let mut buf = vec![0u8; size as usize];
            let n = s.base().pread(Fd(fh.0 as i32), &mut buf, off)?;
            buf.truncate(n);
            Ok(buf)
        });
        reply_err!(reply, r, |b: Vec<u8>| reply.data(&b));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let s = &self.s;
        let r = guarded("write", || {
            let off = i64::try_from(offset).map_err(|_| Errno::EFBIG)?;
            let exp: Vec<Expected> = s.nodes.key(ino.0).map(|k| vec![Expected::Object(k)]).unwrap_or_default();
            // The writer's task: a write by a caller without CAP_FSETID clears setuid/setgid.
            s.expecting(&exp, || s.task(req).pwrite(Fd(fh.0 as i32), data, off))
        });
        reply_err!(reply, r, |n: usize| reply.written(n as u32));
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let r = guarded("release", || self.s.base().close(Fd(fh.0 as i32)));
        reply_err!(reply, r, |_| reply.ok());
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let s = &self.s;
        let r = guarded("fsync", || {
            let fd = Fd(fh.0 as i32);
            if datasync { s.base().fdatasync(fd) } else { s.base().fsync(fd) }
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        let s = &self.s;
        let r = guarded("opendir", || {
            let fl = OpenFlags::from_bits_truncate(flags.0 as u32) & (OpenFlags::NOATIME | OpenFlags::NONBLOCK);
            s.task(req).reopen(s.node(ino)?, fl | OpenFlags::RDONLY | OpenFlags::DIRECTORY)
        });
        reply_err!(reply, r, |fd: Fd| reply.opened(FileHandle(fd.0 as u64), FopenFlags::empty()));
    }

    fn readdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let s = &self.s;
        let r = guarded("readdir", || {
            s.readdir_inner(req, ino, fh, offset, false, &mut |id, next, name, kind, _| {
                reply.add(INodeNo(id), next, kind, OsStr::from_bytes(name))
            })
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn readdirplus(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let s = &self.s;
        let ttl = s.entry_ttl();
        let blank = s.attr(&Stat::default());
        let r = guarded("readdirplus", || {
            s.readdir_inner(req, ino, fh, offset, true, &mut |id, next, name, _kind, attr| {
                let mut a = attr.copied().unwrap_or(blank);
                if attr.is_none() {
                    a.ino = INodeNo(0);
                }
                reply.add(INodeNo(id), next, OsStr::from_bytes(name), &ttl, &a, Generation(0))
            })
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: fuser::OpenFlags, reply: ReplyEmpty) {
        let r = guarded("releasedir", || self.s.base().close(Fd(fh.0 as i32)));
        reply_err!(reply, r, |_| reply.ok());
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let s = &self.s;
        let r = guarded("statfs", || {
            let f = s.base().file(s.node(ino)?)?;
            let sb = f.inode().sb();
            Ok(sb.fs().statfs(sb))
        });
        reply_err!(reply, r, |st: uvfs::StatFs| reply.statfs(
            st.blocks,
            st.bfree,
            st.bavail,
            st.files,
            st.ffree,
            st.bsize as u32,
            st.namelen as u32,
            st.bsize as u32
        ));
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let s = &self.s;
        let r = guarded("setxattr", || {
            let fl = uvfs::XattrFlags::from_bits(flags as u32).ok_or(Errno::EINVAL)?;
            let node = s.node(ino)?;
            let exp: Vec<Expected> = s.nodes.key(ino.0).map(|k| vec![Expected::Object(k)]).unwrap_or_default();
            s.expecting(&exp, || {
                s.task(req).setxattrat(
                    DirFd::Fd(node),
                    b"",
                    AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
                    name.as_bytes(),
                    value,
                    fl,
                )
            })
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let s = &self.s;
        let r = guarded("getxattr", || {
            let node = s.node(ino)?;
            let t = s.task(req);
            read_sized(|buf| {
                t.getxattrat(
                    DirFd::Fd(node),
                    b"",
                    AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
                    name.as_bytes(),
                    buf,
                )
            })
        });
        reply_err!(reply, r, |v| Server::xattr_reply(size, v, reply));
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let s = &self.s;
        let r = guarded("listxattr", || {
            let node = s.node(ino)?;
            let t = s.task(req);
            read_sized(|buf| t.listxattrat(DirFd::Fd(node), b"", AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW, buf))
        });
        reply_err!(reply, r, |v| Server::xattr_reply(size, v, reply));
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let s = &self.s;
        let r = guarded("removexattr", || {
            let node = s.node(ino)?;
            let exp: Vec<Expected> = s.nodes.key(ino.0).map(|k| vec![Expected::Object(k)]).unwrap_or_default();
            s.expecting(&exp, || {
                s.task(req).removexattrat(
                    DirFd::Fd(node),
                    b"",
                    AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
                    name.as_bytes(),
                )
            })
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let s = &self.s;
        let r = guarded("access", || {
            let mode = AccessMode::from_bits(mask.bits() as u32).ok_or(Errno::EINVAL)?;
            // The kernel already switched to the real ids for access(2): check with the
            // ids the request carries.
            s.task(req).faccessat(
                DirFd::Fd(s.node(ino)?),
                b"",
                mode,
                AtFlags::EMPTY_PATH | AtFlags::EACCESS | AtFlags::SYMLINK_NOFOLLOW,
            )
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let s = &self.s;
        let r = guarded("create", || {
            let name = name_bytes(name)?;
            let p = s.node(parent)?;
            let t = s.tasks.get(&caller(req), umask, false);
            let fl = (OpenFlags::from_bits_truncate(flags as u32) & !(OpenFlags::NOCTTY | OpenFlags::CLOEXEC))
                | OpenFlags::CREAT;
            let fd = s.expecting(&s.name_expect(parent, name), || t.openat(DirFd::Fd(p), name, fl, mode & 0o7777))?;
            let path = match t.reopen(fd, OpenFlags::PATH) {
                Ok(pfd) => pfd,
                Err(e) => {
                    let _ = t.close(fd);
                    return Err(e);
                }
            };
            match s.register(path) {
                Ok(a) => Ok((a, fd)),
                Err(e) => {
                    let _ = t.close(fd);
                    Err(e)
                }
            }
        });
        reply_err!(reply, r, |(a, fd): (FileAttr, Fd)| reply.created(
            &s.entry_ttl(),
            &a,
            Generation(0),
            FileHandle(fd.0 as u64),
            FopenFlags::empty()
        ));
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let s = &self.s;
        let r = guarded("fallocate", || {
            let fd = Fd(fh.0 as i32);
            let t = s.task(req);
            let end = offset.checked_add(length).filter(|&e| e <= i64::MAX as u64).ok_or(Errno::EFBIG)?;
            match mode {
                // Allocation without holes: memfs allocates on write, so only the size moves.
                0 => {
                    if end > t.fstat(fd)?.size {
                        let exp: Vec<Expected> =
                            s.nodes.key(ino.0).map(|k| vec![Expected::Object(k)]).unwrap_or_default();
                        s.expecting(&exp, || t.ftruncate(fd, end as i64))?;
                    }
                    Ok(())
                }
                // FALLOC_FL_KEEP_SIZE: nothing to reserve.
                1 => Ok(()),
                _ => Err(Errno::EOPNOTSUPP),
            }
        });
        reply_err!(reply, r, |_| reply.ok());
    }

    fn copy_file_range(
        &self,
        req: &Request,
        _ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let s = &self.s;
        let r = guarded("copy_file_range", || {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            let t = s.task(req);
            let len = len.min(1 << 30) as usize;
            let mut buf = vec![0u8; len.min(1 << 20)];
            let mut done = 0usize;
            let exp: Vec<Expected> = s.nodes.key(ino_out.0).map(|k| vec![Expected::Object(k)]).unwrap_or_default();
            while done < len {
                let want = (len - done).min(buf.len());
                let off_in = i64::try_from(offset_in + done as u64).map_err(|_| Errno::EINVAL)?;
                let n = t.pread(Fd(fh_in.0 as i32), &mut buf[..want], off_in)?;
                if n == 0 {
                    break;
                }
                let off_out = i64::try_from(offset_out + done as u64).map_err(|_| Errno::EFBIG)?;
                let w = s.expecting(&exp, || t.pwrite(Fd(fh_out.0 as i32), &buf[..n], off_out))?;
                done += w;
                if w < n {
                    break;
                }
            }
            Ok(done)
        });
        reply_err!(reply, r, |n: usize| reply.written(n as u32));
    }
}
