//! Shared by the mount tests: preconditions (fail clearly, never skip), temp dirs, a
//! mounted memfs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;
use uvfs_fuse::{MountHandle, MountOptions, Transport};

/// Panics with what to install unless we are root with `/dev/fuse` and `tools`.
pub fn require(tools: &[(&str, &str)]) {
    // SAFETY: no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "these tests mount through FUSE and switch users: run them as root");
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing: load the fuse module (modprobe fuse)");
    for (tool, package) in tools {
        assert!(which(tool).is_some(), "missing tool `{tool}`: install it (apt-get install {package})");
    }
}

/// The path of `bin` in PATH (or ~/.cargo/bin).
pub fn which(bin: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect();
    if let Some(h) = std::env::var_os("HOME") {
        dirs.push(Path::new(&h).join(".cargo/bin"));
    }
    dirs.into_iter().map(|d| d.join(bin)).find(|p| p.is_file())
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        TempDir::new_in(std::env::temp_dir(), tag)
    }

    /// A temporary directory under `base` (a tmpfs such as `/dev/shm`, to compare with).
    pub fn new_in(base: impl AsRef<Path>, tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let p =
            base.as_ref().join(format!("uvfs-fuse-{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The transport the mount tests use: `UVFS_FUSE_TRANSPORT` = `dev`, `uring` or `auto`;
/// `uring` when unset, so that FUSE over io_uring is what runs wherever the kernel allows
/// it (and `/dev/fuse`, said in the output, where it does not).
pub fn transport() -> Transport {
    match std::env::var("UVFS_FUSE_TRANSPORT").as_deref() {
        Ok("dev") => Transport::Dev,
        Ok("auto") => Transport::Auto,
        Ok("uring") | Err(_) => Transport::Uring,
        Ok(other) => panic!("UVFS_FUSE_TRANSPORT={other}: use dev, uring or auto"),
    }
}

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// (mounts holding io_uring enabled, the value to restore when the last one goes).
static URING: Mutex<(usize, Option<String>)> = Mutex::new((0, None));

/// While alive, the `fuse` module's `enable_uring` is Y (set by the first guard, the old
/// value put back by the last one). Connections set up meanwhile keep io_uring after the
/// value goes back.
pub struct UringEnabled(bool);

impl UringEnabled {
    pub fn new(transport: Transport) -> UringEnabled {
        if transport == Transport::Dev {
            return UringEnabled(false);
        }
        let mut g = URING.lock();
        if g.0 == 0 {
            match std::fs::read_to_string(ENABLE_URING) {
                Ok(old) if old.trim() != "Y" => {
                    restore_at_exit(old.trim());
                    if std::fs::write(ENABLE_URING, "Y").is_ok() {
                        g.1 = Some(old.trim().to_string());
                    }
                }
                _ => g.1 = None,
            }
        }
        g.0 += 1;
        UringEnabled(true)
    }
}

/// Puts `old` back into `enable_uring` when this process ends, however it ends (a killed
/// test runs no `Drop`): a shell reads its standard input, a pipe whose other end this
/// process holds until it exits, and writes the value when the read ends. Once per
/// process; the guards' own restore comes first on a normal exit (writing the same value).
/// The shell has a process group of its own: `timeout`, Ctrl-C or `kill -- -PGID` end the
/// test's group, and took it along (`enable_uring` then stayed Y).
fn restore_at_exit(old: &str) {
    use std::os::unix::process::CommandExt;
    static GUARDIAN: std::sync::OnceLock<Option<std::process::ChildStdin>> = std::sync::OnceLock::new();
    GUARDIAN.get_or_init(|| {
        let script = format!("read _; printf %s {old} > {ENABLE_URING}");
        let mut sh = Command::new("sh");
        sh.arg("-c").arg(script).stdin(std::process::Stdio::piped()).process_group(0);
        sh.spawn().ok()?.stdin.take()
    });
}

impl Drop for UringEnabled {
    fn drop(&mut self) {
        if !self.0 {
            return;
        }
        let mut g = URING.lock();
        g.0 -= 1;
        if g.0 == 0
            && let Some(old) = g.1.take()
        {
            let _ = std::fs::write(ENABLE_URING, old);
        }
    }
}

/// Mounts `vfs` on `dir` with the tests' transport; says in the output which one runs.
pub fn spawn(vfs: &uvfs::Vfs, dir: &Path, mut opts: MountOptions) -> (MountHandle, UringEnabled) {
    if std::env::var_os("UVFS_FUSE_TRANSPORT").is_some() || opts.transport == Transport::Auto {
        opts.transport = transport();
    }
    let guard = UringEnabled::new(opts.transport);
    let handle = uvfs_fuse::spawn(vfs, dir, &opts).expect("mount");
    match handle.uring_unavailable() {
        Some(why) => println!("transport: FUSE over io_uring not available ({why}): running over /dev/fuse"),
        None => println!("transport: {:?}", handle.transport()),
    }
    (handle, guard)
}

/// The options of the tests of `/dev/fuse` polling: two workers, a polling window far
/// longer than any test (the worker that answers first polls throughout), and nothing
/// cached, so that each `fstat` is a GETATTR.
pub fn polling_options() -> MountOptions {
    MountOptions {
        transport: Transport::Dev,
        threads: 2,
        busy_poll: std::time::Duration::from_secs(60),
        ..MountOptions::uncached()
    }
}

/// A memfs mounted on a temp dir; unmounted on drop (before the dir goes).
pub struct Mounted {
    pub vfs: uvfs::Vfs,
    pub handle: Option<MountHandle>,
    pub dir: TempDir,
    _uring: UringEnabled,
}

impl Mounted {
    pub fn new(opts: MountOptions) -> Mounted {
        let dir = TempDir::new("mnt");
        let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
        let (handle, guard) = spawn(&vfs, dir.path(), opts);
        Mounted { vfs, handle: Some(handle), dir, _uring: guard }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(h) = self.handle.take() {
            let _ = h.unmount();
        }
    }
}

/// Runs a command, panicking with its output unless it succeeds.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a shell snippet in `dir`.
pub fn sh(dir: &Path, script: &str) -> String {
    let out = run(Command::new("sh").arg("-ec").arg(script).current_dir(dir));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Requests of opcode `op` (its name, e.g. "LOOKUP") the mount has received so far.
pub fn count(h: &MountHandle, op: &str) -> u64 {
    h.requests().iter().find(|(o, _)| *o == op).map_or(0, |r| r.1)
}

/// The ids of this process's threads whose name, after `uvfs-fuse-`, `rest` accepts (the
/// transports' threads: `uvfs-fuse-N` the `/dev/fuse` workers, `uvfs-fuse-qN` the io_uring
/// queues).
pub fn fuse_threads(rest: impl Fn(&str) -> bool) -> Vec<i32> {
    let mut tids = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.strip_prefix("uvfs-fuse-").is_some_and(&rest) {
            tids.push(e.file_name().to_str().unwrap().parse().unwrap());
        }
    }
    tids
}

/// The `/dev/fuse` workers (`uvfs-fuse-N`) of this process.
pub fn dev_worker_threads() -> Vec<i32> {
    fuse_threads(|r| r.starts_with(|c: char| c.is_ascii_digit()))
}
