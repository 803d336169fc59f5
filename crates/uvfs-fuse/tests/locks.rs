//! File locks through the mount: `flock(1)` and `fcntl` locks (a small Python program)
//! from two processes exclude each other (with the default `NO_OPEN` lever the kernel
//! keeps them: `kernel_locks_between_processes`); with the server's locks (`--disable
//! no-open`) a lock held in-process is seen through the mount and one held through the
//! mount in-process, a process waiting in `F_SETLKW` or
//! `flock` gets the lock when it goes (while the mount keeps serving), a waiter killed
//! by a signal is let go (FUSE INTERRUPT), and a close drops the closer's POSIX locks.
//! Processes are ordered by what they print and by uvfs's list of waiting requests,
//! never by sleeping; a watchdog turns a hang into a failure.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Mounted, count};
use uvfs::{DirFd, Flock, FlockOp, LockClass, LockCmd, OpenFlags};
use uvfs_fuse::{Levers, MountOptions};

/// The lock program: `python3 -c LOCKER PATH ACTION [START LEN]`.
/// - `hold`: a write lock (`F_SETLK`), prints `held`, keeps it until stdin closes;
/// - `try`: `F_SETLK` of a write lock, prints `ok` or the errno's name;
/// - `get`: `F_GETLK` of a write lock, prints `type start len pid`;
/// - `wait`: `F_SETLKW` of a write lock, prints `got`, keeps it until stdin closes;
/// - `trap`: a write lock, then opens and closes the file again, prints `closed`, waits
///   for stdin to close.
const LOCKER: &str = r#"
import errno, fcntl, os, struct, sys
path, action = sys.argv[1], sys.argv[2]
start, length = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (0, 0)
fd = os.open(path, os.O_RDWR)
def lk(cmd, typ):
    s = struct.pack("hhqqi4x", typ, 0, start, length, 0)
    return struct.unpack("hhqqi4x", fcntl.fcntl(fd, cmd, s))
def say(s):
    print(s, flush=True)
if action == "hold":
    lk(fcntl.F_SETLK, fcntl.F_WRLCK); say("held"); sys.stdin.read()
elif action == "try":
    try:
        lk(fcntl.F_SETLK, fcntl.F_WRLCK); say("ok")
    except OSError as e:
        say(errno.errorcode[e.errno])
elif action == "get":
    t, _, s, l, p = lk(fcntl.F_GETLK, fcntl.F_WRLCK); say("%d %d %d %d" % (t, s, l, p))
elif action == "wait":
    lk(fcntl.F_SETLKW, fcntl.F_WRLCK); say("got"); sys.stdin.read()
elif action == "trap":
    lk(fcntl.F_SETLK, fcntl.F_WRLCK)
    os.close(os.open(path, os.O_RDONLY))
    say("closed"); sys.stdin.read()
"#;

const WATCHDOG: Duration = Duration::from_secs(30);

fn require() {
    common::require(&[("python3", "python3"), ("flock", "util-linux")]);
}

/// A process with its stdin held open (closing it ends `hold`/`wait`/`trap`); killed
/// and reaped on drop.
struct Proc {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Proc {
    fn spawn(cmd: &mut Command) -> Proc {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn");
        let out = BufReader::new(child.stdout.take().unwrap());
        Proc { child, out }
    }

    fn locker(path: &Path, args: &[&str]) -> Proc {
        Proc::spawn(Command::new("python3").arg("-c").arg(LOCKER).arg(path).args(args))
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.out.read_line(&mut l).unwrap();
        l.trim().to_string()
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes stdin and waits for the exit; the rest of stdout.
    fn finish(mut self) -> String {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        self.wait_exit();
        rest
    }

    /// Waits for the process to exit (watchdog).
    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let pid = self.pid();
        self.exit_within(WATCHDOG).unwrap_or_else(|| panic!("process {pid} did not exit"))
    }

    /// The exit status if the process exits within `limit`.
    fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Proc {
    /// Kills and reaps, but does not wait forever: a process stuck in a request of a
    /// failed mount is let go when the mount (dropped after it) is aborted.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let start = Instant::now();
        while self.child.try_wait().ok().flatten().is_none() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Runs the locker to completion; its output.
fn locker_once(path: &Path, args: &[&str]) -> String {
    Proc::locker(path, args).finish().trim().to_string()
}

fn flock_n(path: &Path) -> bool {
    Command::new("flock").arg("-n").arg(path).arg("true").status().unwrap().success()
}

/// Waits until the in-process inode of `/f` lists a waiting request.
/// Waits (up to the watchdog, so that a bug fails instead of hanging) until `f` holds: a
/// process's exit releases its `flock` through a RELEASE the kernel sends without waiting
/// for it, so the next check may come first.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < WATCHDOG, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn until_waiting(m: &Mounted) {
    let t = m.vfs.root_task();
    let f = t.openat_file(DirFd::Cwd, b"/f", OpenFlags::PATH, 0).unwrap();
    let inode = f.inode().clone();
    let start = Instant::now();
    while !inode.file_locks().iter().any(|l| l.blocked) {
        assert!(start.elapsed() < WATCHDOG, "no request started waiting: {:?}", inode.file_locks());
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A mount whose locks the server keeps (`Levers::SERVER_LOCKS`; it sees every open:
/// `--disable no-open`), with `/f` of 100 bytes.
fn mounted() -> (Mounted, std::path::PathBuf) {
    let levers = (Levers::DEFAULT - Levers::NO_OPEN) | Levers::SERVER_LOCKS;
    let (m, path) = mounted_with(MountOptions { levers, ..MountOptions::default() });
    assert!(m.handle.as_ref().unwrap().levers().contains(Levers::SERVER_LOCKS));
    (m, path)
}

fn mounted_with(opts: MountOptions) -> (Mounted, std::path::PathBuf) {
    require();
    let m = Mounted::new(opts);
    let t = m.vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o666).unwrap();
    t.write(fd, &[b'x'; 100]).unwrap();
    t.close(fd).unwrap();
    let path = m.path().join("f");
    (m, path)
}

#[test]
fn flock_between_processes_and_in_process() {
    let (m, path) = mounted();
    // flock(1) holding the lock until its stdin closes excludes another flock(1).
    let mut holder = Proc::spawn(Command::new("flock").arg("-n").arg(&path).arg("-c").arg("echo held; cat"));
    assert_eq!(holder.line(), "held");
    assert!(!flock_n(&path), "a second flock -n got the lock");
    // In-process, the mount's lock is a lock of another open file description.
    let t = m.vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(t.flock(fd, FlockOp::SH | FlockOp::NB), Err(uvfs::Errno::EWOULDBLOCK));
    let locks = t.file(fd).unwrap().inode().file_locks();
    assert!(locks.iter().any(|l| l.class == LockClass::Flock && l.write && !l.blocked), "{locks:?}");
    holder.finish();
    eventually("the lock is released with its holder", || flock_n(&path));
    // A lock held in-process excludes the mount's processes.
    t.flock(fd, FlockOp::EX).unwrap();
    assert!(!flock_n(&path));
    // A waiting flock(1) gets it when it goes, while the mount keeps serving.
    let mut waiter = Proc::spawn(Command::new("flock").arg(&path).arg("-c").arg("echo got; cat"));
    until_waiting(&m);
    assert_eq!(std::fs::read(&path).unwrap().len(), 100, "the mount serves while a flock waits");
    t.flock(fd, FlockOp::UN).unwrap();
    assert_eq!(waiter.line(), "got");
    assert_eq!(t.flock(fd, FlockOp::SH | FlockOp::NB), Err(uvfs::Errno::EWOULDBLOCK));
    waiter.finish();
    eventually("the waiter's lock is released when it exits", || t.flock(fd, FlockOp::SH | FlockOp::NB).is_ok());
}

/// The kernel keeps a FUSE directory's locks itself (its directory operations have no
/// lock method: nothing reaches the server, so an in-process holder does not see them).
/// With the default `NO_OPENDIR` lever the server never opens the directory either; the
/// mount's processes still exclude each other.
#[test]
fn flock_of_a_directory_between_processes() {
    let (m, _) = mounted();
    m.vfs.root_task().mkdir(b"/d", 0o755).unwrap();
    let dir = m.path().join("d");
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
    let mut holder = Proc::spawn(Command::new("flock").arg("-n").arg(&dir).arg("-c").arg("echo held; cat"));
    assert_eq!(holder.line(), "held");
    assert!(!flock_n(&dir), "a second flock -n of the directory got the lock");
    holder.finish();
    assert!(flock_n(&dir), "the directory's lock outlived its holder");
}

#[test]
fn fcntl_locks_between_processes_and_in_process() {
    let (m, path) = mounted();
    let mut a = Proc::locker(&path, &["hold", "10", "10"]);
    assert_eq!(a.line(), "held");
    // Another process: conflict, reported with the holder's pid.
    assert_eq!(locker_once(&path, &["try", "15", "1"]), "EAGAIN");
    assert_eq!(locker_once(&path, &["try", "20", "5"]), "ok");
    assert_eq!(locker_once(&path, &["get", "0", "0"]), format!("1 10 10 {}", a.pid()));
    // In-process: the same lock, the same pid.
    let t = m.vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    let mut probe = Flock::new(Flock::RDLCK, 0, 0);
    t.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!((probe.l_type, probe.l_start, probe.l_len, probe.l_pid), (Flock::WRLCK, 10, 10, a.pid() as i32));
    assert_eq!(t.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::RDLCK, 12, 1)), Err(uvfs::Errno::EAGAIN));
    a.finish();
    // Its close released it.
    t.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 0, 50)).unwrap();
    // Held in-process: the mount's processes see the server's pid.
    assert_eq!(locker_once(&path, &["try", "49", "1"]), "EAGAIN");
    assert_eq!(locker_once(&path, &["get", "30", "0"]), format!("1 0 50 {}", std::process::id()));
    // A process waiting in F_SETLKW gets the lock when the in-process lock goes.
    let mut w = Proc::locker(&path, &["wait", "40", "20"]);
    until_waiting(&m);
    assert_eq!(locker_once(&path, &["try", "60", "1"]), "ok", "the mount serves while a request waits");
    t.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::UNLCK, 40, 0)).unwrap();
    assert_eq!(w.line(), "got");
    let mut probe = Flock::new(Flock::RDLCK, 45, 1);
    t.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!((probe.l_start, probe.l_len, probe.l_pid), (40, 20, w.pid() as i32));
    w.finish();
}

/// A process killed while it waits in `F_SETLKW` is let go: the kernel interrupts the
/// request (FUSE INTERRUPT) and the server answers it; without that the process would
/// hang until the lock went.
#[test]
fn a_killed_waiter_is_let_go() {
    let (m, path) = mounted();
    let t = m.vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    t.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 0, 0)).unwrap();
    let mut w = Proc::locker(&path, &["wait", "0", "1"]);
    until_waiting(&m);
    w.child.kill().unwrap();
    let status = w.wait_exit();
    assert!(!status.success());
    // Its request is gone from the list of waiters; the lock is still ours.
    let inode = t.file(fd).unwrap().inode().clone();
    let start = Instant::now();
    while inode.file_locks().iter().any(|l| l.blocked) {
        assert!(start.elapsed() < WATCHDOG, "the killed request still waits");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(inode.file_locks().len(), 1);
}

/// Closing any descriptor of the file drops the process's POSIX locks (FLUSH carries
/// the lock owner).
#[test]
fn a_close_drops_the_closers_posix_locks() {
    let (m, path) = mounted();
    let mut a = Proc::locker(&path, &["trap", "0", "10"]);
    assert_eq!(a.line(), "closed");
    let t = m.vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    let mut probe = Flock::new(Flock::WRLCK, 0, 0);
    t.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!(probe.l_type, Flock::UNLCK, "the lock survived a close of another descriptor");
    a.child.stdin.as_mut().unwrap().write_all(b"").unwrap();
    a.finish();
}

/// Without `Levers::SERVER_LOCKS` (the default) the kernel keeps the locks of the mount's
/// processes, whether the server sees opens or not (`Levers::NO_OPEN`): they still exclude
/// each other, a close still drops the closer's POSIX locks, and an exit its `flock`; and
/// no close costs a FLUSH.
#[test]
fn kernel_locks_between_processes() {
    let (m, path) = mounted_with(MountOptions::default());
    assert!(m.handle.as_ref().unwrap().levers().contains(Levers::NO_OPEN));
    kernel_locks(&m, &path);
    let (m, path) = mounted_with(MountOptions { levers: Levers::DEFAULT - Levers::NO_OPEN, ..MountOptions::default() });
    let l = m.handle.as_ref().unwrap().levers();
    assert!(!l.contains(Levers::NO_OPEN) && !l.contains(Levers::SERVER_LOCKS), "{l:?}");
    kernel_locks(&m, &path);
    let h = m.handle.as_ref().unwrap();
    // The server saw the opens, and answered the first FLUSH ENOSYS.
    assert!(count(h, "OPEN") >= 5 && count(h, "FLUSH") <= 1, "{:?}", h.requests());
}

fn kernel_locks(m: &Mounted, path: &std::path::Path) {
    let path = path.to_path_buf();
    let mut holder = Proc::spawn(Command::new("flock").arg("-n").arg(&path).arg("-c").arg("echo held; cat"));
    assert_eq!(holder.line(), "held");
    assert!(!flock_n(&path), "a second flock -n got the lock");
    holder.finish();
    eventually("the lock is released with its holder", || flock_n(&path));
    let mut a = Proc::locker(&path, &["hold", "10", "10"]);
    assert_eq!(a.line(), "held");
    assert_eq!(locker_once(&path, &["try", "15", "1"]), "EAGAIN");
    assert_eq!(locker_once(&path, &["try", "20", "5"]), "ok");
    assert_eq!(locker_once(&path, &["get", "0", "0"]), format!("1 10 10 {}", a.pid()));
    a.finish();
    assert_eq!(locker_once(&path, &["try", "15", "1"]), "ok", "the holder's exit released its lock");
    let mut b = Proc::locker(&path, &["trap", "0", "10"]);
    assert_eq!(b.line(), "closed");
    assert_eq!(locker_once(&path, &["try", "0", "10"]), "ok", "the lock survived a close of another descriptor");
    b.finish();
    let reqs = m.handle.as_ref().unwrap().requests();
    assert!(!reqs.iter().any(|(op, _)| op.contains("LK")), "lock requests reached the server: {reqs:?}");
}

/// The role of `a_killed_process_waiting_in_its_own_mount_ends`' child: serves a mount,
/// holds `/f`'s lock in-process, waits for it through the mount in a thread, and says
/// where it is mounted once the server holds that request; then sleeps until killed.
fn wait_in_own_mount() -> ! {
    let (m, path) = mounted();
    let t = m.vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    t.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 0, 0)).unwrap();
    std::thread::spawn(move || {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        // SAFETY: a zeroed `flock` is a valid value; filled below.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as i16;
        fl.l_whence = libc::SEEK_SET as i16;
        // SAFETY: a descriptor this thread owns and a valid `flock`.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLKW, &fl) };
    });
    until_waiting(&m);
    println!("waiting {}", m.path().display());
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// A process that serves its own mount (a library user; these tests) and is killed while
/// one of its threads waits in a request of that mount: the request was sent, so the
/// kernel waits for its answer without regard to signals, no one is left to answer, and
/// the process could not end, nor close its `/dev/fuse` descriptor (which would abort the
/// connection) or the guardian's pipe, until that thread returned. It stayed a zombie
/// with a thread in `request_wait_answer`, its mount in place, for good (a
/// `differential_mount` run interrupted by SIGINT did, with a thread reading an ACL). The
/// guardian now also hears of the kill through a death signal, and aborts the connection
/// after unmounting it.
#[test]
fn a_killed_process_waiting_in_its_own_mount_ends() {
    if std::env::var_os("UVFS_TEST_WAIT_IN_OWN_MOUNT").is_some() {
        wait_in_own_mount();
    }
    require();
    let name = "a_killed_process_waiting_in_its_own_mount_ends";
    let mut child = Proc::spawn(
        Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env("UVFS_TEST_WAIT_IN_OWN_MOUNT", "1"),
    );
    let mnt = loop {
        let mut l = String::new();
        assert!(child.out.read_line(&mut l).unwrap() > 0, "the child ended before it waited");
        if let Some(p) = l.trim_end().strip_prefix("waiting ") {
            break std::path::PathBuf::from(p);
        }
    };
    use std::os::unix::fs::MetadataExt;
    let conn = libc::minor(std::fs::metadata(&mnt).unwrap().dev());
    child.child.kill().unwrap();
    let ended = child.exit_within(Duration::from_secs(20)).is_some();
    if !ended {
        // Let it go, so that a failure leaves nothing behind either.
        let _ = std::fs::write(format!("/sys/fs/fuse/connections/{conn}/abort"), "1");
    }
    assert!(ended, "the killed process did not end: a thread still waits in its own mount");
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!info.lines().any(|l| l.split(' ').nth(2) == Some(&format!("0:{conn}"))), "its mount is still there");
}
