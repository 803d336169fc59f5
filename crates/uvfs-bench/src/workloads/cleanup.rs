//! Nothing left behind: a registry of what a run made that must not outlive it (FUSE
//! servers with their mounts, running workload commands, scratch directories), and
//! Ctrl-C/SIGTERM/SIGHUP handling.
//!
//! Normally every item is released by its owner's `Drop` (RAII: [`super::daemon::Daemon`]
//! unmounts and reaps, [`ScratchDir`] removes). A signal sets [`interrupted`] and kills
//! the running workload command's process group, so the main thread's wait returns; the
//! main thread then unwinds through the same `Drop`s and exits with status 130. Should it
//! not finish within [`GRACE`] (a wedged mount), or on a second signal, the signal thread
//! releases everything still registered itself (abort and detach each mount, kill each
//! process group, remove each directory) and exits.
//!
//! The signals are blocked in the thread that calls [`install`] (the main thread, before
//! it starts any other) and taken with `sigwait` by a thread of their own; child
//! processes start with an empty signal mask (the standard library resets it).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

/// How long the main thread gets to clean up after a signal.
pub const GRACE: Duration = Duration::from_secs(30);

/// Set by the first signal.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
/// Live items, by registration id. Protected by its mutex.
static LIVE: Mutex<Vec<(u64, Item)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(1);
static INSTALL: Once = Once::new();

/// Whether a signal asked the run to stop.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// Something to release.
#[derive(Clone, Debug)]
pub enum Item {
    /// A FUSE server (process group `pgid`) serving a mount at `mountpoint`.
    Server {
        /// Its process group (the server is the group leader).
        pgid: i32,
        /// Its mount point.
        mountpoint: PathBuf,
    },
    /// A workload command's process group: killed on the first signal.
    Command {
        /// The group (the command is the leader).
        pgid: i32,
    },
    /// A scratch directory, removed after every mount is gone.
    Dir(PathBuf),
}

/// A registration; dropping it unregisters (the owner released the item itself).
#[derive(Debug)]
pub struct Registration(u64);

impl Drop for Registration {
    fn drop(&mut self) {
        lock().retain(|(id, _)| *id != self.0);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<(u64, Item)>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers `item` until the returned registration is dropped.
pub fn register(item: Item) -> Registration {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    lock().push((id, item));
    Registration(id)
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and starts the thread that
/// takes them. Call it from the main thread before any other thread exists (threads
/// inherit the mask); later calls do nothing.
pub fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sigset manipulation on a local; pthread_sigmask on this thread.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            set
        };
        let spawned = std::thread::Builder::new().name("bench-signals".into()).spawn(move || {
            let mut sig = 0;
            // SAFETY: a valid signal set and out-pointer.
            unsafe { libc::sigwait(&set, &mut sig) };
            INTERRUPTED.store(true, Ordering::Relaxed);
            eprintln!("\nuvfs bench: interrupted, cleaning up (again to force)");
            kill_commands();
            // Give the main thread its chance; a second signal or the grace period
            // ends it.
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            std::thread::spawn(move || {
                let mut sig = 0;
                // SAFETY: as above.
                unsafe { libc::sigwait(&set, &mut sig) };
                let _ = tx.send(());
            });
            let _ = rx.recv_timeout(GRACE);
            release_all();
            // SAFETY: _exit ends the process at once; everything it made is released.
            unsafe { libc::_exit(130) };
        });
        if let Err(e) = spawned {
            eprintln!("uvfs bench: cannot start the signal thread ({e}): Ctrl-C will not clean up");
        }
    });
}

/// Kills every registered workload command (its whole process group).
fn kill_commands() {
    for (_, item) in lock().iter() {
        if let Item::Command { pgid } = item {
            // SAFETY: kill has no memory preconditions; the group is one we started.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

/// Releases everything still registered: commands, then mounts and their servers, then
/// directories.
fn release_all() {
    let items: Vec<Item> = lock().iter().map(|(_, i)| i.clone()).collect();
    kill_commands();
    for item in &items {
        if let Item::Server { pgid, mountpoint } = item {
            force_unmount(mountpoint);
            // SAFETY: as in kill_commands.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
    for item in &items {
        if let Item::Dir(d) = item {
            remove_scratch(d);
        }
    }
}

/// Whether `dir` is a FUSE mount point (in `/proc/self/mountinfo`, type `fuse*`).
pub fn is_fuse_mount(dir: &Path) -> bool {
    mounts_under(dir).iter().any(|(mp, fstype)| mp == dir && fstype.starts_with("fuse"))
}

/// Mount points at or below `dir`, with their filesystem types, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return vec![] };
    let mut v: Vec<(PathBuf, String)> = info
        .lines()
        .filter_map(|l| {
            let mp = PathBuf::from(unescape(l.split(' ').nth(4)?));
            let fstype = l.split(" - ").nth(1)?.split(' ').next()?.to_string();
            mp.starts_with(dir).then_some((mp, fstype))
        })
        .collect();
    v.sort_by_key(|(mp, _)| std::cmp::Reverse(mp.as_os_str().len()));
    v
}

fn unescape(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
}

/// Unmounts a FUSE mount whatever its state: a plain unmount, else abort the
/// connection (fusectl) and detach lazily. Returns whether it is gone.
pub fn force_unmount(mp: &Path) -> bool {
    if !is_fuse_mount(mp) {
        return true;
    }
    if unmount(mp, false).is_ok() && !is_fuse_mount(mp) {
        return true;
    }
    // The connection id is the minor number of the mount's device.
    if let Ok(m) = std::fs::metadata(mp) {
        let ctl = Path::new("/sys/fs/fuse/connections").join(libc::minor(m.dev()).to_string()).join("abort");
        let _ = std::fs::write(ctl, "1");
    }
    let _ = unmount(mp, true);
    !is_fuse_mount(mp)
}

/// `umount2(mp, 0 or MNT_DETACH)` as root, `fusermount3 -u [-z]` otherwise.
pub fn unmount(mp: &Path, lazy: bool) -> Result<(), String> {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let c = CString::new(mp.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        let flags = if lazy { libc::MNT_DETACH } else { 0 };
        // SAFETY: valid C string.
        if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
            Ok(())
        } else {
            Err(format!("umount {}: {}", mp.display(), std::io::Error::last_os_error()))
        }
    } else {
        let out = std::process::Command::new("fusermount3")
            .arg(if lazy { "-uz" } else { "-u" })
            .arg(mp)
            .output()
            .map_err(|e| format!("fusermount3: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("fusermount3 -u {}: {}", mp.display(), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }
}

/// Removes a scratch directory, unmounting whatever is still mounted below it first.
fn remove_scratch(d: &Path) {
    for (mp, _) in mounts_under(d) {
        if !force_unmount(&mp) {
            let _ = unmount(&mp, true);
        }
    }
    let _ = std::fs::remove_dir_all(d);
}

/// A directory that this run made and removes (registered, removed on drop).
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
    _reg: Registration,
}

impl ScratchDir {
    /// Creates `path` (it must not exist; its parent must).
    pub fn create(path: PathBuf) -> Result<ScratchDir, String> {
        std::fs::create_dir(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let reg = register(Item::Dir(path.clone()));
        Ok(ScratchDir { path, _reg: reg })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        remove_scratch(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_end_with_their_owner() {
        let before = lock().len();
        let a = register(Item::Command { pgid: 999_999 });
        let b = register(Item::Dir(PathBuf::from("/nonexistent/uvfs-bench")));
        assert_eq!(lock().len(), before + 2);
        drop(a);
        assert!(lock().iter().all(|(_, i)| !matches!(i, Item::Command { pgid: 999_999 })));
        drop(b);
        assert!(lock().iter().all(|(_, i)| !matches!(i, Item::Dir(d) if d == Path::new("/nonexistent/uvfs-bench"))));
    }

    #[test]
    fn scratch_dirs_are_removed_with_their_contents() {
        let base = std::env::temp_dir().join(format!("uvfs-scratch-test-{}", std::process::id()));
        let d = ScratchDir::create(base.clone()).unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/b/f"), b"x").unwrap();
        assert!(ScratchDir::create(base.clone()).is_err(), "exists already");
        drop(d);
        assert!(!base.exists());
    }

    #[test]
    fn mountinfo_parsing() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        // `/` is always mounted, and is not a FUSE mount.
        let all = mounts_under(Path::new("/"));
        assert!(all.iter().any(|(mp, _)| mp == Path::new("/")));
        assert_eq!(all.last().map(|(mp, _)| mp.as_path()), Some(Path::new("/")), "deepest first");
        assert!(!is_fuse_mount(Path::new("/")));
    }
}
