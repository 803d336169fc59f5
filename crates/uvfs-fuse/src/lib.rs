//! # uvfs-fuse: a uvfs instance through the kernel's FUSE
//!
//! [`spawn`] (in the background) and [`serve`] (in the calling thread) mount a
//! [`uvfs::Vfs`] on a directory of the host with the [`fuser`] crate's session, so any
//! program can use it; `uvfs mount` ([`cli`]) is the command around them. Read the
//! modules in this order:
//!
//! | module | what |
//! |---|---|
//! | [`nodes`] | FUSE node ids to `O_PATH` descriptors of the server task, lookup counts |
//! | [`ident`] | the caller's identity (uid, gid, groups from `/proc`) as a cached uvfs task |
//! | `server` | the request handlers: one or two uvfs calls each, panics answered EIO |
//! | `expect`, `watch` | kernel cache invalidation for in-process changes |
//! | [`cli`] | `uvfs mount`: options, checks with one-line errors, signals, daemon |
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

pub mod cli;
mod expect;
pub mod ident;
pub mod nodes;
mod server;
mod watch;

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};
use uvfs::{AtFlags, DirFd, OpenFlags, Vfs};

pub use cli::{MountArgs, run};

/// Who decides permissions (see the crate docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Permissions {
    /// The kernel checks too (`FUSE_POSIX_ACL`), so entries can be cached.
    Kernel,
    /// uvfs alone; no entry caching.
    Uvfs,
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
    /// Worker threads reading requests.
    pub threads: usize,
    /// Who decides permissions.
    pub permissions: Permissions,
    /// Invalidate kernel caches when the in-process API changes something.
    pub watch: bool,
    /// Let every user use the mount (`allow_other`; needs root or `user_allow_other`).
    pub allow_other: bool,
    /// Tests only: a lookup of this name panics in the handler (to show that a panic is
    /// answered with EIO and the mount keeps serving).
    #[doc(hidden)]
    pub panic_on_lookup: Option<Vec<u8>>,
}

impl Default for MountOptions {
    fn default() -> MountOptions {
        MountOptions {
            entry_timeout: Duration::from_secs(1),
            attr_timeout: Duration::from_secs(1),
            negative_timeout: Duration::from_secs(1),
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 8),
            permissions: Permissions::Kernel,
            watch: true,
            allow_other: rustix_is_root(),
            panic_on_lookup: None,
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
    let root = base.openat(DirFd::Cwd, b"/", OpenFlags::PATH | OpenFlags::DIRECTORY, 0).map_err(e)?;
    let st = base.fstatat(DirFd::Fd(root), b"", AtFlags::EMPTY_PATH).map_err(e)?;
    Ok(Arc::new(server::Server {
        nodes: nodes::Nodes::new(root, (st.dev, st.ino)),
        tasks: ident::Tasks::new(base),
        opts: opts.clone(),
        expect: expect::Expect::default(),
        kernel_acl: AtomicBool::new(false),
    }))
}

fn config(opts: &MountOptions) -> Config {
    let mut c = Config::default();
    c.mount_options = vec![
        MountOption::FSName("uvfs".into()),
        MountOption::Subtype("uvfs".into()),
        MountOption::Dev,
        MountOption::Suid,
        MountOption::RW,
    ];
    c.acl = if opts.allow_other { SessionACL::All } else { SessionACL::Owner };
    c.n_threads = Some(opts.threads.max(1));
    c.clone_fd = true;
    c
}

/// A mount served in the background; dropping it unmounts.
pub struct MountHandle {
    session: Option<fuser::BackgroundSession>,
    server: Arc<server::Server>,
    stop: Arc<AtomicBool>,
    watcher: Option<JoinHandle<()>>,
    /// The fusectl connection id registered with the exit guard.
    live: u64,
    /// Where it is mounted (immutable).
    mountpoint: std::path::PathBuf,
}

impl MountHandle {
    /// Unmounts and waits for the workers.
    pub fn unmount(mut self) -> io::Result<()> {
        self.finish()
    }

    /// Whether the kernel accepted `FUSE_POSIX_ACL` (kernel permission checks).
    pub fn kernel_acl(&self) -> bool {
        self.server.kernel_acl.load(Ordering::Relaxed)
    }

    /// Number of nodes the kernel holds (the root included).
    pub fn nodes(&self) -> usize {
        self.server.nodes.len()
    }

    fn finish(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        if self.session.is_some() {
            // Files still open on the mount (by this process or others) would keep the
            // detached connection, and so the join below, alive forever: abort it first,
            // as `umount -f` would. Nothing is lost: memfs lives in `Vfs`, not in the mount.
            exit_guard::abort(self.live);
        }
        let r = match self.session.take() {
            Some(s) => match s.umount_and_join() {
                Ok(()) => Ok(()),
                // A plain umount fails (EBUSY) while files are open on the mount. The
                // connection is aborted already, so leaving the mount in place would leave
                // a dead one ("Transport endpoint is not connected") until someone
                // unmounts it by hand: detach it lazily instead, as `umount -l` would. The
                // open files answer ENOTCONN until closed; the session's threads end on
                // their own once the aborted device returns an error.
                Err(e) => exit_guard::detach(&self.mountpoint).map_err(|_| e),
            },
            None => Ok(()),
        };
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
        release(&self.server);
        exit_guard::remove(self.live);
        r
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Closes what the kernel left open (its nodes) after the session ended.
fn release(s: &server::Server) {
    for fd in s.nodes.drain() {
        let _ = s.tasks.base().close(fd);
    }
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
    let server = new_server(vfs, opts)?;
    let session = fuser::Session::new(server::UvfsFs { s: server.clone() }, mountpoint, &config(opts))?;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = if opts.watch { watch::spawn(server.clone(), session.notifier(), stop.clone()) } else { None };
    let bg = session.spawn()?;
    let live = exit_guard::add(mountpoint);
    Ok(MountHandle { session: Some(bg), server, stop, watcher, live, mountpoint: mountpoint.to_path_buf() })
}

/// The `atexit` safety net of [`spawn`].
mod exit_guard {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use parking_lot::Mutex;

    /// (fusectl connection id, mount point) of live background mounts.
    static LIVE: Mutex<Vec<(u64, std::ffi::CString)>> = Mutex::new(Vec::new());
    static ONCE: std::sync::Once = std::sync::Once::new();

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

    /// Detaches the mount at `mountpoint` lazily (`umount2(MNT_DETACH)`).
    pub(crate) fn detach(mountpoint: &Path) -> std::io::Result<()> {
        let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())?;
        // SAFETY: valid C string.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
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
    pub(crate) fn add(mountpoint: &Path) -> u64 {
        let Ok(m) = std::fs::metadata(mountpoint) else { return 0 };
        let id = u64::from(libc::minor(m.dev()));
        let Ok(c) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) else { return 0 };
        ONCE.call_once(|| {
            // SAFETY: registering a plain extern "C" function.
            unsafe { libc::atexit(on_exit) };
        });
        LIVE.lock().push((id, c));
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
    let server = new_server(vfs, opts)?;
    let mut session = fuser::Session::new(server::UvfsFs { s: server.clone() }, mountpoint, &config(opts))?;
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = if opts.watch { watch::spawn(server.clone(), session.notifier(), stop.clone()) } else { None };
    let mut unmounter = session.unmount_callable();
    on_mounted(Box::new(move || {
        let _ = unmounter.unmount();
    }));
    let r = session.run();
    stop.store(true, Ordering::Relaxed);
    if let Some(w) = watcher {
        let _ = w.join();
    }
    release(&server);
    r
}
