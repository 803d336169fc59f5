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
//! | [`nodes`] | FUSE node ids to `O_PATH` descriptors of the server task, lookup counts |
//! | [`ident`] | the caller's identity (uid, gid, groups from `/proc`) as a cached uvfs task |
//! | `server` | the request handlers: one or two uvfs calls each, panics answered EIO |
//! | `locks` | file locks (GETLK, SETLK, SETLKW, flock), answered by uvfs's lock manager; SETLKW waits off the transport threads |
//! | `expect`, `watch` | kernel cache invalidation for in-process changes |
//! | [`cli`] | `uvfs mount`: options, checks with one-line errors, signals, daemon |
//!
//! ## Transports
//! [`Transport::Dev`]: worker threads ([`MountOptions::threads`]) read requests from
//! `/dev/fuse` and write replies, two system calls and two context switches per request.
//! [`Transport::Uring`] (FUSE over io_uring, Linux 6.14+ with the `fuse` module parameter
//! `enable_uring`): one ring per CPU whose thread receives a request and sends the previous
//! reply in one `io_uring_enter`, on the CPU the caller runs on. [`Transport::Auto`] (the
//! default) uses io_uring when it is available. When it is not (the parameter is off,
//! io_uring is disabled, the kernel refuses), one line on stderr says why and the mount
//! serves over `/dev/fuse`: a missing speed-up never fails a mount.
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
//!   a default ACL (Linux would not).
//!
//! ## Kernel caching
//! Attribute, entry and negative-entry timeouts are options (default one second each).
//! File pages are cached by the kernel (no `direct_io`) and dropped on open. Changes made
//! in-process while mounted are pushed to the kernel as invalidations (`watch`).

pub mod abi;
pub mod cli;
mod expect;
pub mod ident;
mod locks;
mod mount;
pub mod nodes;
pub mod reply;
pub mod request;
mod server;
pub mod session;
pub mod transport;
mod watch;

use std::ffi::CString;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use uvfs::{DirFd, OpenFlags, Vfs};

pub use cli::{MountArgs, run};
use session::{Session, UringState};

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
    /// Who decides permissions.
    pub permissions: Permissions,
    /// How requests travel.
    pub transport: Transport,
    /// Invalidate kernel caches when the in-process API changes something.
    pub watch: bool,
    /// Let every user use the mount (`allow_other`; needs root or `user_allow_other`).
    pub allow_other: bool,
    /// Tests only: a lookup of this name panics in the handler (to show that a panic is
    /// answered with EIO and the mount keeps serving).
    #[doc(hidden)]
    pub panic_on_lookup: Option<Vec<u8>>,
    /// Tests only: mount through `fusermount3` also as root (the path taken without the
    /// privilege to call `mount(2)`).
    #[doc(hidden)]
    pub fusermount: bool,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            entry_timeout: Duration::from_secs(1),
            attr_timeout: Duration::from_secs(1),
            negative_timeout: Duration::from_secs(1),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8),
            permissions: Permissions::Kernel,
            transport: Transport::Auto,
            watch: true,
            allow_other: rustix_is_root(),
            panic_on_lookup: None,
            fusermount: false,
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
    Ok(Arc::new(server::Server {
        nodes: nodes::Nodes::new(root, (st.dev, st.ino)),
        handles: nodes::Handles::default(),
        tasks: ident::Tasks::new(base),
        opts: opts.clone(),
        expect: expect::Expect::default(),
        kernel_acl: AtomicBool::new(false),
        locks: Default::default(),
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
    /// Atomic: tells the invalidation thread to stop.
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
}

/// Mounts, starts the transport's threads and waits until INIT settled what they use.
fn start(vfs: &Vfs, mountpoint: &Path, opts: &MountOptions) -> io::Result<Running> {
    let server = new_server(vfs, opts)?;
    let (queues, uring) = match opts.transport {
        Transport::Dev => (None, UringState::NotRequested),
        Transport::Auto | Transport::Uring => match transport::uring::Queues::prepare() {
            Ok(q) => (Some(q), UringState::Prepared),
            Err(why) => (None, UringState::Off(why)),
        },
    };
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
    let mut workers = match transport::dev::spawn(&session, opts.threads) {
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
    if let Some(q) = queues {
        workers.extend(q.start(&session));
    }
    session.wait_settled();
    if let UringState::Off(why) = session.uring()
        && opts.transport != Transport::Dev
    {
        eprintln!("uvfs mount: FUSE over io_uring not available ({why}): using /dev/fuse");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = if opts.watch { watch::spawn(server.clone(), session.notifier(), stop.clone()) } else { None };
    Ok(Running { session, server, mountpoint: m.mountpoint, conn, workers, stop, watcher })
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
        release(&self.server);
    }

    fn transport(&self) -> Transport {
        if self.session.uring() == UringState::Active { Transport::Uring } else { Transport::Dev }
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
/// the kernel accepted the mount and gets a function that unmounts (for a signal handler).
pub fn serve(
    vfs: &Vfs,
    mountpoint: &Path,
    opts: &MountOptions,
    on_mounted: impl FnOnce(Box<dyn FnMut() + Send>),
) -> io::Result<()> {
    let mut run = start(vfs, mountpoint, opts)?;
    let (mp, conn) = (run.mountpoint.clone(), run.conn);
    on_mounted(Box::new(move || {
        let _ = mount::unmount(&mp, conn);
    }));
    run.join();
    Ok(())
}
