//! `uvfs mount`: the command. Checks what it can before mounting, so the common failures
//! are one line each (exit 2 for a usage problem: a bad argument, a missing or busy mount
//! point; exit 1 for the environment: no `/dev/fuse`, no fuse3, no privilege, or a mount
//! that failed). Runs in the foreground until Ctrl-C/SIGTERM/SIGHUP (then unmounts
//! cleanly) or until unmounted from outside; `--daemon` detaches once mounted.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::{Levers, MountOptions, Permissions, QueueClass, Transport};

/// Arguments of `uvfs mount`.
#[derive(clap::Args, Debug, Clone)]
pub struct MountArgs {
    /// Directory to mount on
    pub mountpoint: PathBuf,
    /// What to serve: `memfs` (a new in-memory filesystem), `host:DIR` (a host directory),
    /// `tar:FILE` (a tar archive, read-only, not unpacked), or `overlay:LAYER,...` (a
    /// writable layer in memory over read-only layers, top first, each `host:DIR` or
    /// `tar:FILE`, an OCI image layer with `.wh.` whiteouts)
    #[arg(long = "fs", default_value = "memfs")]
    pub fs: String,
    /// Seconds the kernel may cache a name lookup (ignored with `--permissions uvfs`;
    /// default: a day, or 1 with `--fs host:DIR` without `--host-unchanged`)
    #[arg(long)]
    pub entry_timeout: Option<f64>,
    /// Seconds the kernel may cache attributes (default as `--entry-timeout`)
    #[arg(long)]
    pub attr_timeout: Option<f64>,
    /// Seconds the kernel may cache a miss (ignored with `--permissions uvfs`; default as
    /// `--entry-timeout`)
    #[arg(long)]
    pub negative_timeout: Option<f64>,
    /// Turn kernel levers off (repeatable or comma-separated), e.g. to measure one: by
    /// default keep-cache, cache-symlinks, cache-dir, readdirplus, no-opendir, no-open,
    /// passthrough, direct-write, relist, cached-reads, known-entries and statahead are on
    /// (keep-cache, cache-dir, no-opendir, no-open, relist, cached-reads, known-entries and
    /// statahead off with a changing host directory; statahead only on a host directory;
    /// no-open yields to passthrough on a host directory)
    #[arg(long, value_enum, value_delimiter = ',')]
    pub disable: Vec<Lever>,
    /// Turn kernel levers on that are off by default: server-locks (locks of the mount's
    /// processes and in-process tasks see each other, where the server sees opens; a
    /// FLUSH per close), no-flush (with server-locks: loses the release of POSIX locks at
    /// close), writeback-cache (the kernel owns size and mtime: in-process changes of them
    /// are not seen through the mount; no passthrough)
    #[arg(long, value_enum, value_delimiter = ',')]
    pub enable: Vec<Lever>,
    /// Who checks permissions: `kernel` (the kernel and uvfs, with caching) or `uvfs`
    /// (uvfs alone; no entry caching; `..` steps and opens of fifos and device nodes,
    /// which never reach the server, go unchecked)
    #[arg(long, value_enum, default_value_t = Permissions::Kernel)]
    pub permissions: Permissions,
    /// Worker threads reading /dev/fuse (default: cores, 2 to 8)
    #[arg(long)]
    pub threads: Option<usize>,
    /// Microseconds one /dev/fuse worker keeps asking for the next request after answering
    /// one, before it sleeps: a request arriving meanwhile skips a thread's wake-up, at the
    /// price of that CPU time (0: never; default 50 with two or more CPUs)
    #[arg(long, value_name = "MICROSECONDS")]
    pub busy_poll: Option<u64>,
    /// How requests travel: `auto` (FUSE over io_uring when the kernel allows it, else
    /// /dev/fuse), `dev` (/dev/fuse), `uring` (io_uring; falls back to /dev/fuse, saying
    /// why, when unavailable)
    #[arg(long, value_enum, default_value_t = Transport::Auto)]
    pub transport: Transport,
    /// The scheduling class of the threads that wait for requests: `idle` (the io_uring
    /// queue threads in SCHED_IDLE while requests come, and the /dev/fuse poller on its
    /// caller's CPU in SCHED_IDLE for its window, so a caller and the thread serving it
    /// share a CPU; one that starves goes back to the normal class; needs root or
    /// CAP_SYS_NICE, else normal) or `normal`
    #[arg(long, value_enum, default_value_t = QueueClass::Idle)]
    pub queue_class: QueueClass,
    /// Detach once mounted (the mount stays until unmounted with `umount`)
    #[arg(long)]
    pub daemon: bool,
    /// Only the mounting user may use the mount (default when not root)
    #[arg(long)]
    pub owner_only: bool,
    /// With `--fs host:DIR`: promise that nothing changes DIR behind uvfs's back, so
    /// cached names and attributes are trusted (faster). Without it every cached name is
    /// checked against the host before use
    #[arg(long)]
    pub host_unchanged: bool,
    /// When the mount ends, print how many requests of each kind the kernel sent (to see
    /// what a workload costs in round trips); `SIGUSR1` prints the counts so far
    #[arg(long)]
    pub stats: bool,
    /// With `--fs overlay:...`: when the mount ends, write what changed (the upper layer)
    /// to FILE as an OCI image layer tar
    #[arg(long, value_name = "FILE")]
    pub export: Option<PathBuf>,
}

/// A kernel lever by name (see [`Levers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lever {
    /// `FOPEN_KEEP_CACHE`: pages survive opens
    KeepCache,
    /// `FUSE_CACHE_SYMLINKS`: symlink targets cached
    CacheSymlinks,
    /// `FOPEN_CACHE_DIR`: listings cached across opens
    CacheDir,
    /// READDIRPLUS on every listing (off: the kernel's heuristics)
    Readdirplus,
    /// no OPENDIR/RELEASEDIR round trips
    NoOpendir,
    /// no FLUSH at close (POSIX locks then outlive the close)
    NoFlush,
    /// `FOPEN_PASSTHROUGH`: hostfs files read and written by the kernel directly
    Passthrough,
    /// `FUSE_WRITEBACK_CACHE`: writes batched in the kernel's page cache
    WritebackCache,
    /// no OPEN/FLUSH/RELEASE round trips for files (locks then kept by the kernel)
    NoOpen,
    /// `FOPEN_DIRECT_IO` for write-only opens: one WRITE per write, no page cache
    DirectWrite,
    /// a directory's cached listing dropped after its files are read, so the next
    /// listing refreshes their attributes
    Relist,
    /// file locks kept by uvfs where the server sees opens, seen by in-process tasks
    /// (a FLUSH per close)
    ServerLocks,
    /// small host files opened for reading only served through the page cache, not
    /// passthrough
    CachedReads,
    /// files the kernel knows, with the attributes it was last given, listed without them
    /// (no lookup per entry)
    KnownEntries,
    /// directories a listing hands out for the first time listed, and their entries looked
    /// up, ahead of the kernel's own listing (a host directory only)
    Statahead,
    /// the readahead window raised to 1 MiB: one READ per MiB read in order (root)
    Readahead,
}

impl Lever {
    /// The lever's flag.
    pub fn flag(self) -> Levers {
        match self {
            Lever::KeepCache => Levers::KEEP_CACHE,
            Lever::CacheSymlinks => Levers::CACHE_SYMLINKS,
            Lever::CacheDir => Levers::CACHE_DIR,
            Lever::Readdirplus => Levers::READDIRPLUS,
            Lever::NoOpendir => Levers::NO_OPENDIR,
            Lever::NoFlush => Levers::NO_FLUSH,
            Lever::Passthrough => Levers::PASSTHROUGH,
            Lever::WritebackCache => Levers::WRITEBACK_CACHE,
            Lever::NoOpen => Levers::NO_OPEN,
            Lever::DirectWrite => Levers::DIRECT_WRITE,
            Lever::Relist => Levers::RELIST,
            Lever::ServerLocks => Levers::SERVER_LOCKS,
            Lever::CachedReads => Levers::CACHED_READS,
            Lever::KnownEntries => Levers::KNOWN_ENTRIES,
            Lever::Statahead => Levers::STATAHEAD,
            Lever::Readahead => Levers::READAHEAD,
        }
    }
}

/// A failure: message and exit code.
struct Fail(String, u8);

fn usage(msg: impl Into<String>) -> Fail {
    Fail(msg.into(), 2)
}

fn env(msg: impl Into<String>) -> Fail {
    Fail(msg.into(), 1)
}

fn seconds(name: &str, v: f64) -> Result<Duration, Fail> {
    if !v.is_finite() || !(0.0..=1e9).contains(&v) {
        return Err(usage(format!("--{name} must be a number of seconds >= 0")));
    }
    Ok(Duration::from_secs_f64(v))
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn in_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .unwrap_or_else(|| OsString::from("/usr/bin:/bin"))
        .to_string_lossy()
        .split(':')
        .chain(["/usr/bin", "/bin", "/sbin", "/usr/sbin"])
        .any(|d| Path::new(d).join(bin).is_file())
}

/// Whether `p` (canonical) is a mount point, from `/proc/self/mountinfo`.
fn is_mountpoint(p: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let want = p.to_string_lossy();
    info.lines().any(|l| l.split(' ').nth(4).is_some_and(|m| unescape(m) == want))
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// The checks that give a one-line answer; returns the canonical mount point.
fn preflight(a: &MountArgs) -> Result<PathBuf, Fail> {
    let mp = &a.mountpoint;
    let meta = std::fs::metadata(mp).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => usage(format!("mount point {} does not exist", mp.display())),
        _ => usage(format!("mount point {}: {e}", mp.display())),
    })?;
    if !meta.is_dir() {
        return Err(usage(format!("mount point {} is not a directory", mp.display())));
    }
    let canon = std::fs::canonicalize(mp).map_err(|e| usage(format!("mount point {}: {e}", mp.display())))?;
    if is_mountpoint(&canon) && canon != Path::new("/") {
        return Err(usage(format!("mount point {} is busy (something is mounted there already)", mp.display())));
    }
    if !Path::new("/dev/fuse").exists() {
        return Err(env("/dev/fuse is missing: the kernel's FUSE module is not loaded (modprobe fuse)"));
    }
    if !is_root() {
        if !in_path("fusermount3") {
            return Err(env("fuse3 is not installed (no fusermount3): apt-get install fuse3"));
        }
        // SAFETY: access with a valid C string.
        let ok = unsafe { libc::access(c"/dev/fuse".as_ptr(), libc::R_OK | libc::W_OK) } == 0;
        if !ok {
            return Err(env("no permission to use /dev/fuse: run as root or join the group that owns it"));
        }
    }
    Ok(canon)
}

fn options(a: &MountArgs) -> Result<MountOptions, Fail> {
    // A host directory that may change behind uvfs's back keeps short caches.
    let base = if a.fs.starts_with("host:") && !a.host_unchanged {
        MountOptions::host_changing()
    } else {
        MountOptions::default()
    };
    let secs = |name, v: Option<f64>, dflt| v.map_or(Ok(dflt), |v| seconds(name, v));
    let mut o = MountOptions {
        entry_timeout: secs("entry-timeout", a.entry_timeout, base.entry_timeout)?,
        attr_timeout: secs("attr-timeout", a.attr_timeout, base.attr_timeout)?,
        negative_timeout: secs("negative-timeout", a.negative_timeout, base.negative_timeout)?,
        permissions: a.permissions,
        transport: a.transport,
        queue_class: a.queue_class,
        stats: a.stats,
        ..base
    };
    for l in &a.enable {
        o.levers |= l.flag();
    }
    for l in &a.disable {
        o.levers -= l.flag();
    }
    if o.levers.contains(Levers::WRITEBACK_CACHE) && o.permissions == Permissions::Uvfs {
        eprintln!("uvfs mount: writeback-cache needs --permissions kernel: writing through to the server");
    }
    if let Some(t) = a.threads {
        if t == 0 || t > 256 {
            return Err(usage("--threads must be between 1 and 256"));
        }
        o.threads = t;
    }
    if let Some(us) = a.busy_poll {
        if us > 1_000_000 {
            return Err(usage("--busy-poll must be at most 1000000 microseconds"));
        }
        o.busy_poll = Duration::from_micros(us);
    }
    if a.owner_only {
        o.allow_other = false;
    }
    Ok(o)
}

/// The host descriptors a mount of a host directory keeps open: three quarters of the soft
/// `RLIMIT_NOFILE` (which `uvfs` raises to the hard limit), where a library's default is a
/// quarter. The server process is the mount's alone: besides the cache it needs a
/// descriptor per FUSE channel and the few that calls in progress hold, and the files open
/// through the mount are counted within the bound (they keep theirs beyond it). A tree
/// bigger than the cache is read in an order that defeats it (`grep -r`, `find`: the
/// least recently used is the next one wanted), so each file read costs an `openat` and a
/// `close` again; with the hard limit of 20,000 of this project's machine, a quarter
/// holds 5,000, less than a source tree of 10,000 files.
fn server_descriptor_limit() -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(1 << 20);
    (soft - soft / 4).clamp(16, 1 << 20) as usize
}

fn make_vfs(fs: &str, host_unchanged: bool) -> Result<uvfs::Vfs, Fail> {
    use uvfs::fs::hostfs::{HostChanges, HostFs, HostFsOptions};
    match fs {
        "memfs" if host_unchanged => Err(usage("--host-unchanged needs --fs host:DIR")),
        // A server's reads are round trips anyway: every page in the shmem file, which
        // the kernel does not zero before memfs writes it (`SmallWritePages::Shmem`).
        "memfs" => Ok(uvfs::Vfs::new(uvfs::VfsConfig {
            root_small_write_pages: uvfs::SmallWritePages::Shmem,
            ..uvfs::VfsConfig::default()
        })),
        s if s.starts_with("host:") => {
            // A host directory through hostfs. By default the host may change it behind
            // uvfs's back: every cached name is checked against the host before use (one
            // fstatat). `--host-unchanged` promises it does not, and caches are trusted.
            let dir = &s["host:".len()..];
            if dir.is_empty() {
                return Err(usage("--fs host:DIR needs a directory"));
            }
            let mut opts =
                HostFsOptions { descriptor_limit: Some(server_descriptor_limit()), ..HostFsOptions::default() };
            if host_unchanged {
                opts.changes = HostChanges::Never;
            }
            let fs = HostFs::with_options(dir, opts).map_err(|e| usage(format!("--fs {s}: {e}")))?;
            uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).map_err(|e| usage(format!("--fs {s}: {e}")))
        }
        s if s.starts_with("overlay:") => {
            if host_unchanged {
                return Err(usage("--host-unchanged needs --fs host:DIR"));
            }
            let mut layers: Vec<Box<dyn uvfs::fs::FileSystem>> = Vec::new();
            for l in s["overlay:".len()..].split(',') {
                let fail = |e: uvfs::Errno| usage(format!("--fs {s}: layer {l}: {e}"));
                if let Some(dir) = l.strip_prefix("host:") {
                    let o = HostFsOptions { changes: HostChanges::Never, ..HostFsOptions::default() };
                    layers.push(Box::new(HostFs::with_options(dir, o).map_err(fail)?));
                } else if let Some(file) = l.strip_prefix("tar:") {
                    layers.push(Box::new(uvfs::fs::tarfs::TarFs::open_layer(file).map_err(fail)?));
                } else {
                    return Err(usage(format!("--fs {s}: a layer is host:DIR or tar:FILE, not {l:?}")));
                }
            }
            let fs = uvfs::fs::overlay::OverlayFs::new(layers).map_err(|e| usage(format!("--fs {s}: {e}")))?;
            uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).map_err(|e| usage(format!("--fs {s}: {e}")))
        }
        s if s.starts_with("tar:") => {
            if host_unchanged {
                return Err(usage("--host-unchanged needs --fs host:DIR"));
            }
            let fs = uvfs::fs::tarfs::TarFs::open(&s["tar:".len()..]).map_err(|e| usage(format!("--fs {s}: {e}")))?;
            uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).map_err(|e| usage(format!("--fs {s}: {e}")))
        }
        s => Err(usage(format!("unknown --fs {s:?}: use memfs, host:DIR or tar:FILE"))),
    }
}

/// Turns a mount error into one line.
fn mount_error(e: &std::io::Error, mp: &Path) -> Fail {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            env(format!("no permission to mount on {}: run as root (or use a setuid fusermount3)", mp.display()))
        }
        Some(libc::EBUSY) => usage(format!("mount point {} is busy", mp.display())),
        Some(libc::ENOENT) if !is_root() && !in_path("fusermount3") => {
            env("fuse3 is not installed (no fusermount3): apt-get install fuse3")
        }
        Some(libc::ENODEV) => env("the kernel has no FUSE support (modprobe fuse)"),
        _ => env(format!("cannot mount on {}: {}", mp.display(), e.to_string().replace('\n', " "))),
    }
}

/// Blocks the signals the signal thread waits for: those that unmount, and with `stats`
/// `SIGUSR1`, which prints the counts so far.
fn block_signals(stats: bool) -> libc::sigset_t {
    // SAFETY: plain sigset manipulation on a local; pthread_sigmask on the calling thread,
    // before any other thread exists, so every thread inherits the mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        if stats {
            libc::sigaddset(&mut set, libc::SIGUSR1);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Runs `uvfs mount`.
pub fn run(a: MountArgs) -> ExitCode {
    match run_inner(&a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(msg, code)) => {
            eprintln!("uvfs mount: {msg}");
            ExitCode::from(code)
        }
    }
}

fn run_inner(a: &MountArgs) -> Result<(), Fail> {
    if a.export.is_some() && !a.fs.starts_with("overlay:") {
        return Err(usage("--export needs --fs overlay:..."));
    }
    let opts = options(a)?;
    let vfs_check = make_vfs(&a.fs, a.host_unchanged)?;
    drop(vfs_check);
    let mp = preflight(a)?;
    // Daemon: fork before any thread exists; the child mounts and reports through a pipe.
    let mut report: Option<std::fs::File> = None;
    if a.daemon {
        let mut fds = [0; 2];
        // SAFETY: pipe2 fills two descriptors. Close-on-exec: a program the daemon starts
        // (the mount's guardian) must not hold the parent's end of the report open.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(env(format!("pipe: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: the descriptors are fresh and owned here.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: no other thread exists yet (nothing has spawned one), so the child may
        // go on running Rust code.
        match unsafe { libc::fork() } {
            -1 => return Err(env(format!("fork: {}", std::io::Error::last_os_error()))),
            0 => {
                drop(r);
                // SAFETY: setsid has no preconditions.
                unsafe { libc::setsid() };
                report = Some(std::fs::File::from(w));
            }
            _ => {
                drop(w);
                let mut msg = String::new();
                let _ = std::fs::File::from(r).read_to_string(&mut msg);
                return match msg.strip_prefix("ok") {
                    Some(_) => Ok(()),
                    None if msg.is_empty() => Err(env("the daemon exited before mounting")),
                    None => {
                        let code = if msg.starts_with('2') { 2 } else { 1 };
                        Err(Fail(msg[1..].to_string(), code))
                    }
                };
            }
        }
    }
    let set = block_signals(a.stats);
    let vfs = make_vfs(&a.fs, a.host_unchanged)?;
    let mut report2 = report;
    let r = crate::serve(&vfs, &mp, &opts, |mut unmount, stats| {
        if let Some(mut w) = report2.take() {
            let _ = w.write_all(b"ok");
            drop(w);
            detach_stdio();
        }
        std::thread::Builder::new()
            .name("uvfs-signals".into())
            .spawn(move || {
                loop {
                    let mut sig = 0;
                    // SAFETY: `set` is a valid signal set; `sig` a valid out-parameter.
                    unsafe { libc::sigwait(&set, &mut sig) };
                    if sig != libc::SIGUSR1 {
                        break;
                    }
                    // One write, so that a reader of a log sees whole reports.
                    let _ = std::io::stderr().write_all(stats.report().as_bytes());
                }
                unmount();
            })
            .expect("signal thread");
    });
    match r {
        Ok(()) => export(a, &vfs),
        Err(e) => {
            let f = mount_error(&e, &mp);
            match report2 {
                // A daemon child: the parent prints the error.
                Some(mut w) => {
                    let _ = write!(w, "{}{}", f.1, f.0);
                    Ok(())
                }
                None => Err(f),
            }
        }
    }
}

/// `--export`: the overlay's changes as a layer tar, once the mount is gone.
fn export(a: &MountArgs, vfs: &uvfs::Vfs) -> Result<(), Fail> {
    let Some(path) = &a.export else { return Ok(()) };
    let t = vfs.root_task();
    let root =
        t.openat_file(uvfs::DirFd::Cwd, b"/", uvfs::OpenFlags::PATH, 0).map_err(|e| env(format!("--export: {e}")))?;
    let out = std::fs::File::create(path).map_err(|e| env(format!("--export {}: {e}", path.display())))?;
    uvfs::fs::overlay::OverlayFs::export_changes(root.inode(), std::io::BufWriter::new(out))
        .map_err(|e| env(format!("--export {}: {e}", path.display())))
}

fn detach_stdio() {
    // SAFETY: plain descriptor juggling on the daemon's own stdio.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            libc::dup2(null, 0);
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            if null > 2 {
                libc::close(null);
            }
        }
    }
}
