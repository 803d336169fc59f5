//! The request handlers: each [`Op`] over a [`uvfs::Vfs`].
//!
//! Every handler resolves the node ids and file handles of the request to files
//! ([`crate::nodes`]),
//! picks the task of the caller ([`crate::ident`]) and makes one or two uvfs calls with
//! it, so uvfs's permission checks see the caller. Errors go back as the errno uvfs
//! returned. [`Server::handle`] runs each handler under `catch_unwind`: a panic is logged
//! and the request is answered with EIO, and the worker keeps serving.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use uvfs::{
    AccessMode, AtFlags, CopyRangeFlags, DirFd, Errno, FallocFlags, File, Gid, Inode, Looked, OpenFlags, RenameFlags,
    Stat, Task, TruncateBy, Uid, Whence,
};

use crate::abi::{self, Attr, FopenFlags, InHeader, InitFlags};
use crate::ident::{Caller, DEFAULT_UMASK, Tasks};
use crate::nodes::{Handles, Inserted, Key, Nodes};
use crate::reply::{self, Reply, ReplyBuf};
use crate::request::{Op, Request, forget_ones};
use crate::{Levers, MountOptions, Permissions};

type Result<T> = uvfs::Result<T>;

/// The state shared by the workers and the invalidation thread.
pub(crate) struct Server {
    /// Caller tasks (own lock).
    pub(crate) tasks: Tasks,
    /// Node table (own lock).
    pub(crate) nodes: Nodes,
    /// Open files by handle (own lock).
    pub(crate) handles: Handles,
    /// Immutable.
    pub(crate) opts: MountOptions,
    /// The invalidation thread's instance, muted on the threads that serve requests: the
    /// kernel knows of the changes they make (set once, by `watch::spawn`).
    pub(crate) watch: std::sync::OnceLock<Arc<uvfs::Inotify>>,
    /// The events of `watch` the invalidation thread has handled (its lock; signalled
    /// with `watch_done` after each batch), or `u64::MAX` once the thread ended
    /// (`MountHandle::sync_invalidations`).
    pub(crate) watch_handled: parking_lot::Mutex<u64>,
    pub(crate) watch_done: parking_lot::Condvar,
    /// Set once the kernel accepted `FUSE_POSIX_ACL` (kernel permission checks too).
    pub(crate) kernel_acl: AtomicBool,
    /// File locks: owners, waiting SETLKW requests (`crate::locks`; own locks).
    pub(crate) locks: crate::locks::Locks,
    /// Set once the kernel accepted `FUSE_WRITEBACK_CACHE` (see `handle_for`).
    pub(crate) writeback: AtomicBool,
    /// Set once at INIT: write-only opens get `FOPEN_DIRECT_IO` ([`Levers::DIRECT_WRITE`]
    /// asked for, the kernel new enough, no writeback cache).
    pub(crate) direct_write: AtomicBool,
    /// Set once, when the relist thread starts ([`Levers::RELIST`]): where directories
    /// whose listing the kernel should drop are queued (`note_read`).
    pub(crate) relist: std::sync::OnceLock<std::sync::mpsc::Sender<u64>>,
    /// Atomic: the relist thread's notifications written (`MountHandle::relisted`).
    pub(crate) relisted: std::sync::atomic::AtomicU64,
    /// Backing files of handles (`crate::passthrough`; own lock).
    pub(crate) passthrough: crate::passthrough::Passthrough,
    /// Immutable: regular files are not opened on the server ([`Levers::NO_OPEN`] asked
    /// for and usable here).
    pub(crate) no_open: bool,
    /// Immutable: file locks are kept here, not by the kernel ([`Levers::SERVER_LOCKS`]
    /// asked for, and the server sees opens).
    pub(crate) server_locks: bool,
    /// Atomic: requests received, by opcode (below 64), for the tests (what passthrough
    /// and the page cache save) and `uvfs mount --stats`.
    pub(crate) requests: [std::sync::atomic::AtomicU64; 64],
    /// Atomic: READDIRPLUS entries of files listed without attributes
    /// ([`Levers::KNOWN_ENTRIES`]; `MountHandle::bare_entries`).
    pub(crate) bare_entries: std::sync::atomic::AtomicU64,
    /// Immutable: where READDIRPLUS queues the directories it hands out for the first time
    /// (`crate::statahead`; `None` without [`Levers::STATAHEAD`] or where it does not
    /// pay).
    pub(crate) statahead: Option<Arc<crate::statahead::Statahead>>,
    /// Atomic: names READDIRPLUS looked up that were not in uvfs's dentry cache (asked of
    /// the filesystem: for a host directory, host calls on the listing's path), for the
    /// tests of statahead (`MountHandle::listing_fs_lookups`).
    pub(crate) listing_fs_lookups: std::sync::atomic::AtomicU64,
}

impl Server {
    /// [`Server::requests`] by opcode name, the most frequent first (none left out).
    pub(crate) fn request_counts(&self) -> Vec<(&'static str, u64)> {
        let mut v: Vec<(&'static str, u64)> = (0..self.requests.len() as u32)
            .map(|op| (abi::opcode::name(op), self.requests[op as usize].load(Ordering::Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v
    }
}

/// The id a user namespace shows for one it does not map (`/proc/sys/kernel/overflowuid`
/// and `overflowgid`, 65534 unless changed).
const OVERFLOW_ID: u32 = 65534;

/// A directory entry's type (`d_type`): unknown, directory.
const DT_UNKNOWN: u32 = 0;
const DT_DIR: u32 = 4;

fn caller(h: &InHeader) -> Caller {
    Caller { uid: h.uid, gid: h.gid, pid: h.pid }
}

/// The flags of the caller's open (a READ's or WRITE's `flags`) that a file the server
/// opens for one request keeps: where writes go and how durable they are.
fn open_flags_kept(flags: u32) -> OpenFlags {
    OpenFlags::from_bits_truncate(flags) & (OpenFlags::APPEND | OpenFlags::SYNC | OpenFlags::DSYNC)
}

/// A name from the kernel: one component.
fn component(name: &[u8]) -> Result<&[u8]> {
    if name.is_empty() || name.contains(&b'/') {
        return Err(Errno::EINVAL);
    }
    Ok(name)
}

pub(crate) fn key_of(st: &Stat) -> Key {
    (st.dev, st.ino)
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
    uvfs::makedev(major, minor)
}

/// A SETATTR time: seconds are signed (stored in a `u64`), nanoseconds always add, also
/// before 1970 (-1.5 s is -2 s + 500,000,000 ns).
fn setattr_time(set: bool, now: bool, sec: u64, nsec: u32) -> uvfs::TimeSpec {
    if now {
        uvfs::TimeSpec::Now
    } else if set {
        uvfs::TimeSpec::At(uvfs::Timespec { sec: sec as i64, nsec })
    } else {
        uvfs::TimeSpec::Omit
    }
}

/// Reads a whole xattr value (or list): into a small buffer first, as most are short (the
/// kernel's GETXATTR of an absent `security.capability` before each chown and first write
/// is then one call), else with a size-then-fill loop.
fn read_sized(f: impl Fn(&mut [u8]) -> Result<usize>) -> Result<Vec<u8>> {
    let mut small = [0u8; 256];
    match f(&mut small) {
        Ok(n) => return Ok(small[..n].to_vec()),
        Err(Errno::ERANGE) => {}
        Err(e) => return Err(e),
    }
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

/// Whether `name` is one of the POSIX ACL xattrs.
fn is_acl_name(name: &[u8]) -> bool {
    name == b"system.posix_acl_access" || name == b"system.posix_acl_default"
}

/// An xattr reply: the size when the caller asked for it (`size` 0), else the value.
fn xattr_reply(size: u32, data: &[u8], out: &mut ReplyBuf<'_>) -> Result<()> {
    if size == 0 {
        out.push(&abi::GetxattrOut { size: data.len() as u32, padding: 0 })
    } else if data.len() > size as usize {
        Err(Errno::ERANGE)
    } else {
        out.push_bytes(data)
    }
}

impl Server {
    /// The INIT flags this server asks for (the transport adds its own).
    pub(crate) fn init_flags(&self) -> InitFlags {
        // Not FUSE_ATOMIC_O_TRUNC: with it the kernel sends O_TRUNC in OPEN and checks
        // ETXTBSY only afterwards (`handle_truncate`), so an O_RDONLY|O_TRUNC open of a
        // running executable truncated it before failing, and the program, its text gone,
        // could die of SIGBUS before the check, which then passed (pjdfstest's intermittent
        // open::etxtbsy). Without it the kernel checks first, then sends SETATTR(size 0).
        let mut want = InitFlags::ASYNC_READ
            | InitFlags::BIG_WRITES
            | InitFlags::MAX_PAGES
            | InitFlags::HANDLE_KILLPRIV_V2
            | InitFlags::DO_READDIRPLUS
            | InitFlags::PARALLEL_DIROPS
            | InitFlags::EXPORT_SUPPORT
            | InitFlags::DONT_MASK;
        if self.no_open {
            // Opens the server does not see: the kernel keeps the locks (a `flock` belongs
            // to an open file, which the server could not tell apart).
            want |= InitFlags::NO_OPEN_SUPPORT;
        }
        if self.server_locks {
            // File locks are answered here (`crate::locks`), so that processes on the
            // mount and in-process tasks see each other's.
            want |= InitFlags::POSIX_LOCKS | InitFlags::FLOCK_LOCKS;
        }
        if self.opts.permissions == Permissions::Kernel {
            want |= InitFlags::POSIX_ACL;
        }
        let levers = self.opts.levers;
        if !levers.contains(Levers::READDIRPLUS) {
            want |= InitFlags::READDIRPLUS_AUTO;
        }
        if levers.contains(Levers::CACHE_SYMLINKS) {
            want |= InitFlags::CACHE_SYMLINKS;
        }
        if self.no_opendir() {
            want |= InitFlags::NO_OPENDIR_SUPPORT;
        }
        if self.writeback_wanted() {
            want |= InitFlags::WRITEBACK_CACHE;
        } else if levers.contains(Levers::PASSTHROUGH) {
            want |= InitFlags::PASSTHROUGH;
        }
        want
    }

    /// The open file a handle keeps for the caller's open `f` (flags `fl`) of the node
    /// whose `O_PATH` file is `path`. With the writeback cache the kernel reads pages of
    /// a file opened only for writing (to fill a page partly written) and places appends
    /// itself (it owns the size; the WRITE carries the end as offset): so a regular
    /// file's handle is opened for reading and writing and without `O_APPEND`, by the
    /// server's own task (the caller's open, which checked its permission, is `f`).
    fn handle_for(&self, path: &Arc<File>, f: Arc<File>, fl: OpenFlags) -> Result<Arc<File>> {
        let wb = self.writeback.load(Ordering::Relaxed)
            && f.inode().file_type() == uvfs::FileType::Regular
            && (fl.access_mode() == OpenFlags::WRONLY.bits() || fl.contains(OpenFlags::APPEND));
        if !wb {
            return Ok(f);
        }
        let keep =
            fl & !(OpenFlags::APPEND | OpenFlags::WRONLY | OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::TRUNC);
        self.base().reopen_file(path, keep | OpenFlags::RDWR)
    }

    /// Whether the writeback cache is asked for: only with [`Permissions::Kernel`]. With it
    /// the kernel sends `touch` (`UTIME_NOW` for both times) as "atime now, mtime = the
    /// kernel's clock", which the server cannot tell from an explicit mtime (owner only):
    /// the kernel's own check, which saw the call, must stand for uvfs's (`setattr`).
    fn writeback_wanted(&self) -> bool {
        self.opts.levers.contains(Levers::WRITEBACK_CACHE) && self.opts.permissions == Permissions::Kernel
    }

    /// Whether [`Levers::RELIST`] applies: listings are cached and READDIRPLUS brings
    /// the attributes back.
    pub(crate) fn relist_wanted(&self) -> bool {
        let l = self.opts.levers;
        l.contains(Levers::RELIST | Levers::READDIRPLUS) && (l.contains(Levers::CACHE_DIR) || self.no_opendir())
    }

    /// Ends the relist thread (after the workers, which queue to it).
    pub(crate) fn stop_relist(&self) {
        if let Some(tx) = self.relist.get() {
            let _ = tx.send(0);
        }
    }

    /// A READ of `f`: when it ends the kernel drops `f`'s cached atime, so its next
    /// `stat` is a GETATTR. The first such file of a directory since the kernel last
    /// listed it queues the directory, whose listing the kernel is then told to drop
    /// ([`Levers::RELIST`]): its next listing is a READDIRPLUS, which brings back the
    /// attributes of every file in it. Not on an open for reading: passthrough's reads,
    /// which the server does not see, drop the atime at every read, so a listing would
    /// refresh it for nothing.
    fn note_read(&self, f: &File) {
        let Some(tx) = self.relist.get() else { return };
        let Some((dev, ino)) = self.base().parent_ino(f) else { return };
        if let Some(id) = self.nodes.relist((dev, ino.0)) {
            let _ = tx.send(id);
        }
    }

    /// Whether OPENDIR is answered ENOSYS (see [`Levers::NO_OPENDIR`]).
    fn no_opendir(&self) -> bool {
        self.opts.levers.contains(Levers::NO_OPENDIR) && self.opts.permissions == Permissions::Kernel
    }

    /// How the kernel treats a regular file the server opened with flags `fl`.
    fn file_open_flags(&self, fl: OpenFlags) -> FopenFlags {
        let mut f = FopenFlags::empty();
        if fl.access_mode() == OpenFlags::WRONLY.bits() && self.direct_write.load(Ordering::Relaxed) {
            f |= FopenFlags::DIRECT_IO;
        }
        if self.opts.levers.contains(Levers::KEEP_CACHE) {
            f |= FopenFlags::KEEP_CACHE;
        }
        if self.opts.levers.contains(Levers::NO_FLUSH) {
            f |= FopenFlags::NOFLUSH;
        }
        f
    }

    /// The reply to OPEN or CREATE (with open flags `fl`) of node `node`, whose open file
    /// `f` becomes a handle: with a backing file when passthrough is on (then the
    /// page-cache flags do not apply).
    fn open_reply(&self, node: u64, f: Arc<File>, fl: OpenFlags) -> abi::OpenOut {
        self.leave_times_to_kernel(&f);
        let file = f.clone();
        let fh = self.handles.insert(f);
        let levers = self.opts.levers;
        let prefer_cache = fl.access_mode() == OpenFlags::RDONLY.bits()
            && !fl.contains(OpenFlags::TRUNC)
            && levers.contains(Levers::CACHED_READS | Levers::KEEP_CACHE)
            && file.inode().size() < crate::CACHED_READ_MAX;
        match self.passthrough.open(fh, node, &file, prefer_cache) {
            Some(b) => {
                // No KEEP_CACHE: the kernel drops the file's pages at this open, so none
                // from before a write through the backing file is read by a later cached
                // open (`crate::passthrough`).
                let mut flags = FopenFlags::PASSTHROUGH;
                if levers.contains(Levers::NO_FLUSH) {
                    flags |= FopenFlags::NOFLUSH;
                }
                reply::open_out_backed(fh, flags, b)
            }
            None => reply::open_out(fh, self.file_open_flags(fl)),
        }
    }

    /// What the kernel accepted, and its protocol's minor version.
    pub(crate) fn initialized(&self, got: InitFlags, minor: u32) {
        self.kernel_acl.store(got.contains(InitFlags::POSIX_ACL), Ordering::Relaxed);
        self.passthrough.set_negotiated(got.contains(InitFlags::PASSTHROUGH), self.opts.notices);
        let writeback = got.contains(InitFlags::WRITEBACK_CACHE);
        self.writeback.store(writeback, Ordering::Relaxed);
        // Before 7.39 (Linux 6.6) a direct write left other opens' cached pages stale.
        let direct = self.opts.levers.contains(Levers::DIRECT_WRITE) && minor >= 39 && !writeback;
        self.direct_write.store(direct, Ordering::Relaxed);
    }

    pub(crate) fn attr(&self, st: &Stat) -> Attr {
        Attr {
            ino: self.nodes.ino_for_key(key_of(st)),
            size: st.size,
            blocks: st.blocks,
            atime: st.atime.sec as u64,
            mtime: st.mtime.sec as u64,
            ctime: st.ctime.sec as u64,
            atimensec: st.atime.nsec,
            mtimensec: st.mtime.nsec,
            ctimensec: st.ctime.nsec,
            mode: st.mode,
            nlink: st.nlink,
            uid: self.shown_id(st.uid),
            gid: self.shown_id(st.gid),
            rdev: encode_dev(st.rdev),
            blksize: if st.blksize == 0 { 4096 } else { st.blksize },
            flags: 0,
        }
    }

    fn base(&self) -> &Task {
        self.tasks.base()
    }

    /// An owner as the kernel is told it: with [`MountOptions::squash_unmapped`], the
    /// overflow id (what the server's user namespace sees for a host id it does not map)
    /// is shown as root, so that the kernel, which refuses to write an inode whose owner
    /// it cannot map, lets uvfs decide.
    fn shown_id(&self, id: u32) -> u32 {
        if self.opts.squash_unmapped && id == OVERFLOW_ID { 0 } else { id }
    }

    fn task(&self, h: &InHeader) -> Arc<Task> {
        self.tasks.get(&caller(h), DEFAULT_UMASK, false)
    }

    fn node(&self, id: u64) -> Result<Arc<File>> {
        self.nodes.file(id).ok_or(Errno::ESTALE)
    }

    fn handle_file(&self, fh: u64) -> Result<Arc<File>> {
        self.handles.get(fh)
    }

    /// The open file a request on handle `fh` of node `node` uses. Handle 0 is a regular
    /// file the kernel did not open ([`Levers::NO_OPEN`]): it checked the caller's open,
    /// so the server's own task opens the node for this request alone, with `flags` (the
    /// access the request needs, and the caller's `O_APPEND`, `O_SYNC`, ...).
    fn file_of(&self, node: u64, fh: u64, flags: OpenFlags) -> Result<Arc<File>> {
        if fh == 0 && self.no_open {
            // A read or write the kernel did not open for: as an OPEN (see there).
            let node = self.nodes.file_marked(node, false).ok_or(Errno::ESTALE)?;
            let f = self.base().reopen_file(&node, flags)?;
            self.leave_times_to_kernel(&f);
            return Ok(f);
        }
        self.handle_file(fh)
    }

    /// Under the writeback cache the kernel owns a regular file's mtime and ctime: it
    /// stamps them at its own writes and sends them in a SETATTR when they changed, so
    /// the server's writes must not stamp them too (`File::set_nocmtime`). Else the two
    /// disagree whenever the kernel's clock did not move since its last stamp (it then
    /// sends no SETATTR) while uvfs's did, as a fine-grained stamp after a `stat`.
    fn leave_times_to_kernel(&self, f: &File) {
        if self.writeback.load(Ordering::Relaxed) && f.inode().file_type() == uvfs::FileType::Regular {
            f.set_nocmtime();
        }
    }

    fn entry_ttl(&self) -> Duration {
        if self.opts.permissions == Permissions::Uvfs { Duration::ZERO } else { self.opts.entry_timeout }
    }

    fn negative_ttl(&self) -> Duration {
        if self.opts.permissions == Permissions::Uvfs { Duration::ZERO } else { self.opts.negative_timeout }
    }

    /// An entry reply for a node just registered.
    fn entry_out(&self, (id, a): (u64, Attr)) -> abi::EntryOut {
        reply::entry(id, a, self.entry_ttl(), self.opts.attr_timeout)
    }

    /// Registers the node of the `O_PATH` file `file` (one lookup) and returns its node
    /// id and attributes. A file that is not kept is released on return.
    fn register(&self, file: Arc<File>) -> Result<(u64, Attr)> {
        let st = self.base().fstat(&file)?;
        Ok(self.register_stat(file, &st))
    }

    /// [`Server::register`] of a file whose `stat` is `st`.
    fn register_stat(&self, file: Arc<File>, st: &Stat) -> (u64, Attr) {
        self.register_new(file, st).0
    }

    /// [`Server::register_stat`], and whether the node is new (the kernel did not know it).
    fn register_new(&self, file: Arc<File>, st: &Stat) -> ((u64, Attr), bool) {
        let (id, new) = match self.nodes.insert(key_of(st), file) {
            Inserted::New(id) => (id, true),
            Inserted::Existing(id, dup) => {
                drop(dup);
                (id, false)
            }
        };
        ((id, self.attr(st)), new)
    }

    /// Looks `name` up in `parent` as `t` (search permission is checked), making it a
    /// node. A node the kernel knows gets another lookup and no file (a READDIRPLUS of a
    /// listing read before, a LOOKUP after the kernel dropped a name).
    fn lookup_in(&self, t: &Task, parent: &Arc<File>, name: &[u8]) -> Result<(u64, Attr)> {
        self.lookup_new(t, parent, name).map(|(e, _)| e)
    }

    /// [`Server::lookup_in`], and whether the node is new (the kernel did not know it).
    fn lookup_new(&self, t: &Task, parent: &Arc<File>, name: &[u8]) -> Result<((u64, Attr), bool)> {
        let mut ask = true;
        loop {
            let holds = |st: &Stat, inode: &Inode| ask && self.nodes.holds(key_of(st), inode);
            let (st, looked) = t.lookup_path(DirFd::File(parent), name, AtFlags::SYMLINK_NOFOLLOW, holds)?;
            match looked {
                Looked::Opened(f) => return Ok(self.register_new(f, &st)),
                Looked::Held(inode) => {
                    if let Some(id) = self.nodes.lookup_again(key_of(&st), &inode) {
                        // An entry's attributes become the kernel's too (see `setattr`):
                        // those of a file the kernel writes itself were read from the host
                        // by the lookup's `stat` (the inode is marked while backed).
                        return Ok(((id, self.attr(&st)), false));
                    }
                }
            }
            // Forgotten since (a FORGET on another worker): a node anew, from a file.
            ask = false;
        }
    }

    fn forget_node(&self, id: u64, n: u64) {
        // Released here, outside the table's lock.
        drop(self.nodes.forget(id, n));
    }

    /// Answers one request into `out` (panics become EIO); a SETLKW that must wait is
    /// answered later, through `later`.
    pub(crate) fn handle(
        &self,
        req: &Request<'_>,
        out: &mut ReplyBuf<'_>,
        later: &dyn Fn() -> crate::session::Later,
    ) -> Reply {
        if let Some(c) = self.requests.get(req.header.opcode as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        // Changes made for the kernel are not pushed back to it as invalidations.
        let _mute = self.watch.get().map(|w| w.mute_this_thread());
        if req.op.no_reply() {
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| self.forget(req)));
            return Reply::None;
        }
        if let Op::Setlk { arg, sleep: true } = &req.op {
            return std::panic::catch_unwind(AssertUnwindSafe(|| self.setlkw(req.header.unique, arg, later)))
                .unwrap_or(Reply::Err(Errno::EIO));
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.dispatch(req, out))) {
            Ok(r) => {
                if r.is_err() {
                    out.clear();
                }
                r.into()
            }
            Err(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                log::error!("uvfs-fuse: panic in handler of opcode {}, answered EIO: {msg}", req.header.opcode);
                out.clear();
                Reply::Err(Errno::EIO)
            }
        }
    }

    fn forget(&self, req: &Request<'_>) {
        match &req.op {
            Op::Forget { nlookup } => self.forget_node(req.header.nodeid, *nlookup),
            Op::BatchForget { records, .. } => {
                for f in forget_ones(records) {
                    self.forget_node(f.nodeid, f.nlookup);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&self, req: &Request<'_>, out: &mut ReplyBuf<'_>) -> Result<()> {
        let h = &req.header;
        let id = h.nodeid;
        match &req.op {
            Op::Lookup { name } => self.lookup(h, name, out),
            Op::Getattr { .. } => {
                let node = self.nodes.file_marked(id, true).ok_or(Errno::ESTALE)?;
                // A file the kernel writes itself (passthrough) is read from the host by
                // this `fstat`: its inode is marked while backed.
                let st = self.base().fstat(&node)?;
                out.push(&reply::attr_out(self.attr(&st), self.opts.attr_timeout))
            }
            Op::Setattr(a) => {
                let attr = self.setattr(h, a)?;
                out.push(&reply::attr_out(attr, self.opts.attr_timeout))
            }
            Op::Readlink => {
                // The kernel forgets the atime of a symlink it read (as of a file).
                let node = self.nodes.file_marked(id, false).ok_or(Errno::ESTALE)?;
                let t = self.task(h);
                out.fill(4096, |buf| t.readlinkat(DirFd::File(&node), b"", buf)).map(drop)
            }
            Op::Mknod { arg, name } => {
                let name = component(name)?;
                let p = self.node(id)?;
                let t = self.tasks.get(&caller(h), arg.umask, false);
                t.mknodat(DirFd::File(&p), name, arg.mode, decode_dev(arg.rdev))?;
                let a = self.lookup_in(&t, &p, name)?;
                out.push(&self.entry_out(a))
            }
            Op::Mkdir { arg, name } => {
                let name = component(name)?;
                let p = self.node(id)?;
                let t = self.tasks.get(&caller(h), arg.umask, false);
                t.mkdirat(DirFd::File(&p), name, arg.mode & 0o7777)?;
                let a = self.lookup_in(&t, &p, name)?;
                out.push(&self.entry_out(a))
            }
            Op::Unlink { name } => {
                let name = component(name)?;
                let p = self.node(id)?;
                self.task(h).unlinkat(DirFd::File(&p), name, AtFlags::empty())
            }
            Op::Rmdir { name } => {
                let name = component(name)?;
                let p = self.node(id)?;
                self.task(h).unlinkat(DirFd::File(&p), name, AtFlags::REMOVEDIR)
            }
            Op::Symlink { name, target } => {
                let name = component(name)?;
                let p = self.node(id)?;
                let t = self.task(h);
                t.symlinkat(target, DirFd::File(&p), name)?;
                let a = self.lookup_in(&t, &p, name)?;
                out.push(&self.entry_out(a))
            }
            Op::Rename { newdir, flags, name, newname } => {
                let name = component(name)?;
                let newname = component(newname)?;
                let p = self.node(id)?;
                let np = self.node(*newdir)?;
                let fl = RenameFlags::from_bits(*flags).ok_or(Errno::EINVAL)?;
                self.task(h).renameat2(DirFd::File(&p), name, DirFd::File(&np), newname, fl)?;
                if self.opts.levers.contains(Levers::KNOWN_ENTRIES) {
                    // The kernel forgets the moved inode's attributes (its ctime).
                    let st = self.base().fstatat(DirFd::File(&np), newname, AtFlags::SYMLINK_NOFOLLOW);
                    if let Ok(st) = st {
                        self.nodes.lookup_key_stale(key_of(&st));
                    }
                }
                Ok(())
            }
            Op::Link { oldnodeid, name } => {
                let name = component(name)?;
                let src = self.node(*oldnodeid)?;
                let np = self.node(id)?;
                // `linkat(fd, "", ..., AT_EMPTY_PATH)` needs CAP_DAC_READ_SEARCH; that
                // capability changes nothing else here: the walk from `np` is one
                // component, and `may_create` asks for write permission, which it does not
                // bypass.
                let lt = self.tasks.get(&caller(h), DEFAULT_UMASK, true);
                lt.linkat(DirFd::File(&src), b"", DirFd::File(&np), name, AtFlags::EMPTY_PATH)?;
                let a = self.lookup_in(&self.task(h), &np, name)?;
                // The kernel forgets the linked inode's attributes after a link.
                self.nodes.mark(a.0, false);
                out.push(&self.entry_out(a))
            }
            // The first ENOSYS tells the kernel to stop sending OPEN (and so RELEASE).
            Op::Open { .. } if self.no_open => Err(Errno::ENOSYS),
            Op::Open { flags } => {
                let fl = OpenFlags::from_bits_truncate(*flags)
                    & !(OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::NOCTTY | OpenFlags::CLOEXEC);
                // Reads and writes of an open file change what the kernel holds (its
                // atime, size, mtime) behind the node's last attributes.
                let node = self.nodes.file_marked(id, false).ok_or(Errno::ESTALE)?;
                let f = self.task(h).reopen_file(&node, fl)?;
                let f = self.handle_for(&node, f, fl)?;
                out.push(&self.open_reply(id, f, fl))
            }
            Op::Read(r) => {
                let off = i64::try_from(r.offset).map_err(|_| Errno::EINVAL)?;
                // The caller's `O_NOATIME` (the kernel checked it at the open) keeps the
                // access time also where the server opens the file itself (`no-open`).
                let noatime = OpenFlags::from_bits_truncate(r.flags) & OpenFlags::NOATIME;
                let f = self.file_of(id, r.fh, OpenFlags::RDONLY | noatime)?;
                out.fill(r.size as usize, |buf| self.base().pread(&f, buf, off))?;
                self.note_read(&f);
                Ok(())
            }
            Op::Write { arg, data } => {
                let off = i64::try_from(arg.offset).map_err(|_| Errno::EFBIG)?;
                // The writer's task: a write by a caller without CAP_FSETID clears
                // setuid/setgid.
                let f = self.file_of(id, arg.fh, OpenFlags::WRONLY | open_flags_kept(arg.flags))?;
                let n = self.task(h).pwrite(&f, data, off)?;
                out.push(&abi::WriteOut { size: n as u32, padding: 0 })
            }
            Op::Statfs => {
                let f = self.node(id)?;
                let sb = f.inode().sb();
                let st = sb.fs().statfs(sb);
                out.push(&abi::StatfsOut {
                    st: abi::Kstatfs {
                        blocks: st.blocks,
                        bfree: st.bfree,
                        bavail: st.bavail,
                        files: st.files,
                        ffree: st.ffree,
                        bsize: st.bsize as u32,
                        namelen: st.namelen as u32,
                        frsize: st.bsize as u32,
                        padding: 0,
                        spare: [0; 6],
                    },
                })
            }
            Op::Release(r) => {
                self.release_locks(r);
                // What the kernel wrote to the host file directly becomes uvfs's size and
                // times before the backing goes: a GETATTR that finds the node no longer
                // backed answers from them.
                let file = self.handles.get(r.fh).ok();
                if self.passthrough.backs_handle(r.fh)
                    && let Some(f) = &file
                {
                    f.inode().sb().fs().host_changed(f.inode());
                }
                // The backing id goes before the handle: once the handle is free, another
                // OPEN may take its number and record a backing id of its own.
                self.passthrough.release(r.fh, file.as_ref().map(|f| &**f.inode()));
                self.handles.remove(r.fh).map(drop)
            }
            Op::Releasedir(r) => self.handles.remove(r.fh).map(drop),
            Op::Fsync { fh, datasync } => {
                let f = self.file_of(id, *fh, OpenFlags::RDONLY)?;
                if *datasync { self.base().fdatasync(&f) } else { self.base().fsync(&f) }
            }
            // Without server locks a FLUSH has nothing to do (it only released POSIX
            // locks): the first ENOSYS tells the kernel to stop sending it.
            Op::Flush { .. } if !self.server_locks => Err(Errno::ENOSYS),
            Op::Flush { fh, lock_owner } => self.flush_locks(*fh, *lock_owner),
            Op::Fsyncdir { .. } => Ok(()),
            Op::Getlk(arg) => self.getlk(arg, out),
            Op::Setlk { arg, .. } => self.setlk(arg),
            Op::Setxattr { flags, name, value } => {
                let fl = uvfs::XattrFlags::from_bits(*flags).ok_or(Errno::EINVAL)?;
                // The kernel forgets the ctime after an xattr change.
                let node = self.nodes.file_marked(id, false).ok_or(Errno::ESTALE)?;
                self.task(h).setxattrat(
                    DirFd::File(&node),
                    b"",
                    AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
                    name,
                    value,
                    fl,
                )
            }
            Op::Getxattr { size, name } => {
                let node = self.node(id)?;
                let t = self.task(h);
                let v = read_sized(|buf| {
                    t.getxattrat(DirFd::File(&node), b"", AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW, name, buf)
                });
                // With `FUSE_POSIX_ACL` the kernel asks for a file's ACL in its permission
                // checks and takes any answer but ENODATA (or a value) as the check's
                // error: a filesystem without ACLs (tarfs) has none, not an open that fails
                // with EOPNOTSUPP.
                let v = match v {
                    Err(Errno::EOPNOTSUPP) if self.kernel_acl.load(Ordering::Relaxed) && is_acl_name(name) => {
                        Err(Errno::ENODATA)
                    }
                    v => v,
                }?;
                xattr_reply(*size, &v, out)
            }
            Op::Listxattr { size } => {
                let node = self.node(id)?;
                let t = self.task(h);
                let v = read_sized(|buf| {
                    t.listxattrat(DirFd::File(&node), b"", AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW, buf)
                })?;
                xattr_reply(*size, &v, out)
            }
            Op::Removexattr { name } => {
                let node = self.nodes.file_marked(id, false).ok_or(Errno::ESTALE)?;
                self.task(h).removexattrat(
                    DirFd::File(&node),
                    b"",
                    AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
                    name,
                )
            }
            Op::Opendir { flags } => {
                if self.no_opendir() {
                    // The kernel takes ENOSYS as "never send OPENDIR again" (after its
                    // own permission check, which stands for uvfs's in this mode).
                    return Err(Errno::ENOSYS);
                }
                let fl = OpenFlags::from_bits_truncate(*flags) & (OpenFlags::NOATIME | OpenFlags::NONBLOCK);
                let f = self.task(h).reopen_file(&self.node(id)?, fl | OpenFlags::RDONLY | OpenFlags::DIRECTORY)?;
                let cache = if self.opts.levers.contains(Levers::CACHE_DIR) {
                    FopenFlags::CACHE_DIR
                } else {
                    FopenFlags::empty()
                };
                out.push(&reply::open_out(self.handles.insert(f), cache))
            }
            Op::Readdir(r) => self.readdir(h, r, false, out),
            Op::Readdirplus(r) => self.readdir(h, r, true, out),
            Op::Access { mask } => {
                let mode = AccessMode::from_bits(*mask).ok_or(Errno::EINVAL)?;
                // The kernel already switched to the real ids for access(2): check with the
                // ids the request carries.
                self.task(h).faccessat(
                    DirFd::File(&self.node(id)?),
                    b"",
                    mode,
                    AtFlags::EMPTY_PATH | AtFlags::EACCESS | AtFlags::SYMLINK_NOFOLLOW,
                )
            }
            Op::Create { arg, name } => self.create(h, arg, name, out),
            Op::Tmpfile { arg } => self.tmpfile(h, arg, out),
            Op::Fallocate(f) => self.fallocate(h, f),
            Op::Ioctl { arg, data } => self.ioctl(h, arg, data, out),
            Op::CopyFileRange(c) => {
                let n = self.copy_file_range(h, c)?;
                out.push(&abi::WriteOut { size: n as u32, padding: 0 })
            }
            Op::Lseek(l) => {
                let whence = match l.whence {
                    0 => Whence::Set,
                    1 => Whence::Cur,
                    2 => Whence::End,
                    3 => Whence::Data,
                    4 => Whence::Hole,
                    _ => return Err(Errno::EINVAL),
                };
                let fd = self.file_of(id, l.fh, OpenFlags::RDONLY)?;
                let off = i64::try_from(l.offset).map_err(|_| Errno::ENXIO)?;
                // The kernel sends only SEEK_DATA and SEEK_HOLE, and keeps the position
                // itself: the handle's own position is not the caller's.
                let at = self.task(h).lseek(&fd, off, whence)?;
                out.push(&abi::LseekOut { offset: at })
            }
            // The session answers these before they get here.
            Op::Init(_) | Op::Destroy | Op::Interrupt { .. } | Op::Forget { .. } | Op::BatchForget { .. } => {
                Err(Errno::ENOSYS)
            }
            Op::Unsupported(_) => Err(Errno::ENOSYS),
        }
    }

    fn lookup(&self, h: &InHeader, name: &[u8], out: &mut ReplyBuf<'_>) -> Result<()> {
        let name = component(name)?;
        if self.opts.panic_on_lookup.as_deref() == Some(name) {
            panic!("test panic on lookup");
        }
        let p = self.node(h.nodeid)?;
        match self.lookup_in(&self.task(h), &p, name) {
            Ok(a) => out.push(&self.entry_out(a)),
            Err(Errno::ENOENT) if !self.negative_ttl().is_zero() => {
                // Node id 0 with an entry timeout: the kernel caches the miss.
                out.push(&reply::entry(0, Attr::default(), self.negative_ttl(), Duration::ZERO))
            }
            Err(e) => Err(e),
        }
    }

    fn setattr(&self, h: &InHeader, a: &abi::SetattrIn) -> Result<Attr> {
        use abi::fattr;
        let t = self.task(h);
        // The answer carries the attributes the kernel then holds.
        let node = self.nodes.file_marked(h.nodeid, true).ok_or(Errno::ESTALE)?;
        let here = || DirFd::File(&node);
        let at = AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW;
        let v = a.valid;
        if v & fattr::CHANGES == 0 {
            // A SETATTR that changes nothing is a `chown(path, -1, -1)` (or its `fchown`
            // and `lchown`): the kernel took out the mode change by which Linux clears
            // setuid and setgid there, and the owner check that comes with it, leaving
            // both to the server (`HANDLE_KILLPRIV_V2`). uvfs's own chown does both.
            t.fchownat(here(), b"", None, None, at)?;
        }
        if v & (fattr::UID | fattr::GID) != 0 {
            let uid = (v & fattr::UID != 0).then_some(Uid(a.uid));
            let gid = (v & fattr::GID != 0).then_some(Gid(a.gid));
            t.fchownat(here(), b"", uid, gid, at)?;
        }
        if v & fattr::MODE != 0 {
            t.fchmodat(here(), b"", a.mode & 0o7777, AtFlags::EMPTY_PATH)?;
        }
        if v & fattr::SIZE != 0 {
            let len = i64::try_from(a.size).map_err(|_| Errno::EFBIG)?;
            let own =
                (v & fattr::FH != 0).then(|| self.handles.get(a.fh).ok()).flatten().filter(|f| f.flags().writable());
            // The kernel sends a time with the size for `ftruncate` and `open(O_TRUNC)`
            // (`ATTR_MTIME`), none for `truncate(2)`, whose times move only when
            // something changes.
            let by = if v & (fattr::MTIME | fattr::MTIME_NOW) != 0 { TruncateBy::File } else { TruncateBy::Path };
            match own {
                Some(f) => t.ftruncate_by(&f, len, by)?,
                None => t.ftruncate_by(&t.reopen_file(&node, OpenFlags::WRONLY)?, len, by)?,
            }
        }
        if v & (fattr::ATIME | fattr::MTIME | fattr::ATIME_NOW | fattr::MTIME_NOW) != 0 {
            let atime = setattr_time(v & fattr::ATIME != 0, v & fattr::ATIME_NOW != 0, a.atime, a.atimensec);
            let mtime = setattr_time(v & fattr::MTIME != 0, v & fattr::MTIME_NOW != 0, a.mtime, a.mtimensec);
            // With the writeback cache the kernel owns a regular file's mtime and sends
            // `UTIME_NOW` as its own clock's time: "atime now, mtime explicit" may be a
            // `touch` by a non-owner with write permission, and "size, mtime explicit"
            // is a truncate the kernel stamped itself (a writer's `truncate`,
            // `ftruncate` or `open(O_TRUNC)`), both allowed by the kernel's check (see
            // `writeback_wanted`); the server's task applies them.
            let kernel_now = self.writeback.load(Ordering::Relaxed)
                && v & (fattr::ATIME_NOW | fattr::SIZE) != 0
                && v & fattr::MTIME != 0
                && v & fattr::MTIME_NOW == 0
                && node.inode().file_type() == uvfs::FileType::Regular;
            let who = if kernel_now { self.base() } else { &*t };
            who.utimensat(here(), b"", Some([atime, mtime]), at)?;
        }
        // The answer becomes the kernel's size and times: those of a file the kernel
        // writes itself are the host file's (as for GETATTR), not uvfs's cached ones (a
        // `fchmod` after writes answered the size at open, and a `stat` showed 0): the
        // `fstat` of its marked inode reads them from the host.
        Ok(self.attr(&self.base().fstat(&node)?))
    }

    /// READDIR and READDIRPLUS: entries from the directory handle's offset, as many as fit
    /// in the kernel's `size`. Every entry carries its real inode number and type; in
    /// READDIRPLUS an entry the caller cannot look up (no search permission, or "." and
    /// "..", which are never handed out as nodes) gets node id 0, which the kernel takes as
    /// "no node" and still lists with that inode number.
    fn readdir(&self, h: &InHeader, r: &abi::ReadIn, plus: bool, out: &mut ReplyBuf<'_>) -> Result<()> {
        let t = self.base();
        let dir = self.node(h.nodeid)?;
        // Handle 0: the kernel did not open the directory (`Levers::NO_OPENDIR`); it
        // checked the caller's permission to, so the server's own task reads it.
        let fd = if r.fh == 0 && self.no_opendir() {
            t.reopen_file(&dir, OpenFlags::RDONLY | OpenFlags::DIRECTORY)?
        } else {
            self.handle_file(r.fh)?
        };
        let offset = i64::try_from(r.offset).map_err(|_| Errno::EINVAL)?;
        if plus && offset == 0 {
            // Before the entries are read: a file read meanwhile queues the directory again.
            self.nodes.listed(h.nodeid);
            if let Some(sa) = &self.statahead {
                sa.listing(h.nodeid);
            }
        }
        t.lseek(&fd, offset, Whence::Set)?;
        let dev = t.fstat(&fd)?.dev;
        let limit = r.size as usize;
        let caller_task = if plus { Some(self.task(h)) } else { None };
        let known_entries = self.opts.levers.contains(Levers::KNOWN_ENTRIES);
        // Directories new to the kernel, for statahead (queued when the reply is made).
        let mut ahead = Vec::new();
        let asked = uvfs::counters().fs_lookups;
        let r = self.fill_dir(t, &dir, &fd, dev, limit, caller_task.as_deref(), known_entries, &mut ahead, out);
        let missed = uvfs::counters().fs_lookups - asked;
        if missed > 0 {
            self.listing_fs_lookups.fetch_add(missed, Ordering::Relaxed);
        }
        if let Some(sa) = &self.statahead {
            sa.queue(ahead);
        }
        r
    }

    /// [`Server::readdir`]'s entries, with attributes when `caller_task` is given; the
    /// files of directories handed out as new nodes are pushed to `ahead` (with statahead).
    #[allow(clippy::too_many_arguments)]
    fn fill_dir(
        &self,
        t: &Task,
        dir: &Arc<File>,
        fd: &Arc<File>,
        dev: u64,
        limit: usize,
        caller_task: Option<&Task>,
        known_entries: bool,
        ahead: &mut Vec<(u64, Arc<File>)>,
        out: &mut ReplyBuf<'_>,
    ) -> Result<()> {
        loop {
            let batch = t.getdents(fd, 64)?;
            if batch.is_empty() {
                return Ok(());
            }
            for e in batch {
                let ino = self.nodes.ino_for_key((dev, e.ino));
                let typ = u32::from(e.dtype);
                let fits = match caller_task {
                    None => out.dirent(limit, ino, e.next, typ, &e.name),
                    Some(ct) => {
                        let dots = e.name == b"." || e.name == b"..";
                        // A file the kernel knows with the attributes it was last given
                        // is listed without them (node id 0: the kernel keeps what it
                        // holds), without a lookup here or a dentry update there.
                        // Directories always get theirs: a change in them or of their
                        // mode made the kernel drop their attributes or their dentry,
                        // which the listing brings back.
                        let bare = dots
                            || (known_entries
                                && typ != DT_DIR
                                && typ != DT_UNKNOWN
                                // A file the kernel writes itself changes behind the
                                // server's back: listed with its attributes.
                                && self.nodes.known_fresh((dev, e.ino)).is_some_and(|id| !self.passthrough.backs(id)));
                        let looked = if bare { None } else { self.lookup_new(ct, dir, &e.name).ok() };
                        let new_dir = looked.as_ref().is_some_and(|&(_, new)| new && typ == DT_DIR);
                        let entry = match looked {
                            Some((a, _)) => self.entry_out(a),
                            None => reply::entry(0, Attr::default(), Duration::ZERO, Duration::ZERO),
                        };
                        let fits = out.direntplus(limit, &entry, ino, e.next, typ, &e.name);
                        if fits
                            && new_dir
                            && self.statahead.is_some()
                            && let Some(f) = self.nodes.file(entry.nodeid)
                        {
                            ahead.push((entry.nodeid, f));
                        }
                        if !fits && entry.nodeid != 0 {
                            // The kernel never sees this entry: take its lookup back.
                            self.forget_node(entry.nodeid, 1);
                        }
                        if fits && bare && !dots {
                            self.bare_entries.fetch_add(1, Ordering::Relaxed);
                        }
                        fits
                    }
                };
                if !fits {
                    return Ok(());
                }
            }
        }
    }

    fn create(&self, h: &InHeader, arg: &abi::CreateIn, name: &[u8], out: &mut ReplyBuf<'_>) -> Result<()> {
        let name = component(name)?;
        let p = self.node(h.nodeid)?;
        let t = self.tasks.get(&caller(h), arg.umask, false);
        let fl =
            (OpenFlags::from_bits_truncate(arg.flags) & !(OpenFlags::NOCTTY | OpenFlags::CLOEXEC)) | OpenFlags::CREAT;
        let f = t.openat_file(DirFd::File(&p), name, fl, arg.mode & 0o7777)?;
        self.reply_made(&t, f, fl, out)
    }

    /// The reply to CREATE or TMPFILE once `t` made and opened `f` (flags `fl`): its node
    /// (an entry) and its handle (an open).
    fn reply_made(&self, t: &Task, f: Arc<File>, fl: OpenFlags, out: &mut ReplyBuf<'_>) -> Result<()> {
        let path = t.reopen_file(&f, OpenFlags::PATH)?;
        let f = self.handle_for(&path, f, fl)?;
        let (id, a) = self.register(path)?;
        // Made open: its writes follow (as an OPEN).
        self.nodes.mark(id, false);
        out.push(&self.entry_out((id, a)))?;
        out.push(&self.open_reply(id, f, fl))
    }

    /// TMPFILE (`open(dir, O_TMPFILE)` on the mount): an unnamed file in the node's
    /// directory, made and opened by the caller's task as CREATE's. Its node has no name
    /// and 0 links; the kernel marks its inode linkable unless `O_EXCL`, and a later
    /// `linkat` of it is a LINK of the node, which uvfs allows for the same reason.
    fn tmpfile(&self, h: &InHeader, arg: &abi::CreateIn, out: &mut ReplyBuf<'_>) -> Result<()> {
        let p = self.node(h.nodeid)?;
        let t = self.tasks.get(&caller(h), arg.umask, false);
        let fl = OpenFlags::from_bits_truncate(arg.flags) & !(OpenFlags::NOCTTY | OpenFlags::CLOEXEC);
        if !fl.contains(OpenFlags::TMPFILE) {
            return Err(Errno::EINVAL);
        }
        let f = t.openat_file(DirFd::File(&p), b".", fl, arg.mode & 0o7777)?;
        // From here on it is an open regular file (the writeback cache's handle reopens it).
        self.reply_made(&t, f, fl - (OpenFlags::TMPFILE | OpenFlags::DIRECTORY), out)
    }

    fn fallocate(&self, h: &InHeader, f: &abi::FallocateIn) -> Result<()> {
        let fd = self.file_of(h.nodeid, f.fh, OpenFlags::WRONLY)?;
        let off = i64::try_from(f.offset).map_err(|_| Errno::EINVAL)?;
        let len = i64::try_from(f.length).map_err(|_| Errno::EINVAL)?;
        self.task(h).fallocate(&fd, FallocFlags::from_bits_retain(f.mode), off, len)
    }

    /// IOCTL: the inode-flag commands, which the kernel sends for `FS_IOC_GETFLAGS`,
    /// `FS_IOC_SETFLAGS` and the `FS_IOC_FSGETXATTR`/`FS_IOC_FSSETXATTR` forms on the
    /// mount (its `fileattr_get`/`fileattr_set`, through a file it opens read-only for
    /// them; `chattr`'s SETFLAGS reads the old flags with FSGETXATTR), answered by the
    /// caller's task so that uvfs checks ownership and `CAP_LINUX_IMMUTABLE`. The kernel
    /// does not enforce the flags of a FUSE inode itself; uvfs does, on every request.
    /// Other commands, and the unrestricted ioctls of CUSE, are ENOTTY (what the kernel
    /// answers for a command nobody knows).
    fn ioctl(&self, h: &InHeader, a: &abi::IoctlIn, data: &[u8], out: &mut ReplyBuf<'_>) -> Result<()> {
        if a.flags & abi::IOCTL_UNRESTRICTED != 0 {
            return Err(Errno::ENOTTY);
        }
        if !matches!(
            a.cmd,
            abi::FS_IOC_GETFLAGS
                | abi::FS_IOC32_GETFLAGS
                | abi::FS_IOC_SETFLAGS
                | abi::FS_IOC32_SETFLAGS
                | abi::FS_IOC_FSGETXATTR
                | abi::FS_IOC_FSSETXATTR
        ) {
            return Err(Errno::ENOTTY);
        }
        // Handle 0: a directory or file the kernel did not open (`Levers::NO_OPENDIR`,
        // `Levers::NO_OPEN`).
        let file = if a.fh == 0 {
            let dir = if a.flags & abi::IOCTL_DIR != 0 { OpenFlags::DIRECTORY } else { OpenFlags::empty() };
            self.base().reopen_file(&self.node(h.nodeid)?, OpenFlags::RDONLY | dir)?
        } else {
            self.handle_file(a.fh)?
        };
        let t = self.task(h);
        if !matches!(a.cmd, abi::FS_IOC_GETFLAGS | abi::FS_IOC32_GETFLAGS | abi::FS_IOC_FSGETXATTR) {
            // New flags: the kernel forgets the attributes it holds (their ctime).
            self.nodes.mark(h.nodeid, false);
        }
        match a.cmd {
            abi::FS_IOC_GETFLAGS | abi::FS_IOC32_GETFLAGS => {
                // The kernel asks for an `unsigned int`; a `long` (8 bytes) is answered too.
                let n = a.out_size as usize;
                if !(4..=8).contains(&n) {
                    return Err(Errno::EINVAL);
                }
                let flags = t.ioctl_getflags(&file)?;
                let mut v = [0u8; 8];
                v[..4].copy_from_slice(&flags.bits().to_ne_bytes());
                out.push(&abi::IoctlOut::default())?;
                out.push_bytes(&v[..n])
            }
            abi::FS_IOC_SETFLAGS | abi::FS_IOC32_SETFLAGS => {
                let v = data.get(..4).ok_or(Errno::EINVAL)?;
                let flags = uvfs::FsFlags::from_bits_retain(u32::from_ne_bytes([v[0], v[1], v[2], v[3]]));
                t.ioctl_setflags(&file, flags)?;
                out.push(&abi::IoctlOut::default())
            }
            abi::FS_IOC_FSGETXATTR => {
                if a.out_size as usize != std::mem::size_of::<abi::Fsxattr>() {
                    return Err(Errno::EINVAL);
                }
                let flags = t.ioctl_getflags(&file)?;
                out.push(&abi::IoctlOut::default())?;
                out.push(&abi::Fsxattr { xflags: abi::xflags_of(flags), ..Default::default() })
            }
            _ => {
                // FSSETXATTR: as tmpfs, only the flags that have an `FS_*_FL` twin, and
                // no extent size or project (`fileattr_has_fsx`: EOPNOTSUPP).
                let x = abi::read_prefix::<abi::Fsxattr>(data).ok_or(Errno::EINVAL)?;
                let flags = abi::flags_of_xflags(x.xflags)
                    .filter(|_| x.extsize == 0 && x.projid == 0 && x.cowextsize == 0)
                    .ok_or(Errno::EOPNOTSUPP)?;
                t.ioctl_setflags(&file, flags)?;
                out.push(&abi::IoctlOut::default())
            }
        }
    }

    fn copy_file_range(&self, h: &InHeader, c: &abi::CopyFileRangeIn) -> Result<usize> {
        let flags = u32::try_from(c.flags).map_err(|_| Errno::EINVAL)?;
        let t = self.task(h);
        let fin = self.file_of(h.nodeid, c.fh_in, OpenFlags::RDONLY)?;
        let fout = self.file_of(c.nodeid_out, c.fh_out, OpenFlags::WRONLY)?;
        let mut off_in = i64::try_from(c.off_in).map_err(|_| Errno::EINVAL)?;
        let mut off_out = i64::try_from(c.off_out).map_err(|_| Errno::EINVAL)?;
        // The kernel caps what the reply's 32-bit size can say.
        let len = c.len.min(u64::from(u32::MAX) & !0xfff) as usize;
        match t.copy_file_range(
            &fin,
            Some(&mut off_in),
            &fout,
            Some(&mut off_out),
            len,
            CopyRangeFlags::from_bits_retain(flags),
        ) {
            // Two uvfs filesystems under one FUSE mount are one filesystem to the kernel,
            // which copies within one: so does the server, through a buffer.
            Err(Errno::EXDEV) => {
                let mut buf = vec![0u8; len.min(1 << 20)];
                let mut done = 0usize;
                while done < len {
                    let want = (len - done).min(buf.len());
                    let n = t.pread(&fin, &mut buf[..want], off_in + done as i64)?;
                    if n == 0 {
                        break;
                    }
                    let w = t.pwrite(&fout, &buf[..n], off_out + done as i64)?;
                    done += w;
                    if w < n {
                        break;
                    }
                }
                Ok(done)
            }
            r => r,
        }
    }
}
