//! The lock ops of the differential harness: `flock`, the `fcntl` lock commands, and a
//! second process to conflict with.
//!
//! Owners on the host: classic POSIX locks belong to a descriptor table
//! (`files_struct`), and each sequence's host thread has its own (it unshared it), so
//! the thread is "task 0" whatever other sequences run beside it. "Task 1"
//! (`Op::Fork`) must be another *process* (a lock's pid is its process's, and a thread
//! would share it): the host thread forks a child process, which inherits a copy of the
//! thread's descriptor table, root, cwd and ids, as `Task::fork` does in uvfs. The child
//! was forked from a multi-threaded process, so it runs nothing but a loop of raw system
//! calls: it reads a fixed-size command from a pipe (open, close, dup, flock, fcntl, or
//! the inode of a descriptor), runs it, and writes the result back. It is killed and
//! reaped when the sequence ends.
//!
//! Waiting requests (`Op::Bg`): task 0's runs on a thread that shares the host thread's
//! descriptor table (so it is the same lock owner), task 1's in the child without waiting
//! for its answer. The sequence goes on once the request waits for a lock, which is read
//! where each side shows it: the host's `/proc/locks` (a `->` line for the file's
//! inode; the descriptor is opened before the host thread chroots), uvfs's
//! `Inode::file_locks` (an entry with `blocked`), or once it finished. Nothing sleeps for
//! a time; a watchdog turns a request that neither waits nor finishes into a failure.
//! `Op::Join` collects the result. At the end, whatever still waits is released: the host
//! child is killed and the thread's descriptors closed (so every conflicting lock goes),
//! uvfs's waits are interrupted.
//!
//! `F_GETLK` reports pids, which differ between the sides: the two tasks' pids are
//! compared as [`PID_TASK0`] and [`PID_TASK1`] (-1, an OFD lock's, as is).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use uvfs::{Fd, Flock, FlockOp, Interrupt, LockCmd, LockWait, Task};

use super::{Fl, Op, Out, host_op, uvfs_op};

/// Where the host thread keeps `/proc/locks` open (no sequence uses it).
pub const PROC_LOCKS_FD: i32 = 1000;

/// Where a host thread keeps the tmpfs file ([`super::raise_floors`] writes) that raises
/// the kernel's multigrain floor: a descriptor no sequence uses (nor `fork`'s pipes).
pub const FLOOR_FD: i32 = PROC_LOCKS_FD + 8;
/// Task 0's pid in an `Out::Lock`.
pub const PID_TASK0: i32 = -100;
/// Task 1's pid in an `Out::Lock`.
pub const PID_TASK1: i32 = -101;
/// How long a background request may take to wait or finish, or a waiting one to stay
/// waiting in uvfs, before the sequence fails (a hang made a failure, not a timing).
const WATCHDOG: Duration = Duration::from_secs(30);

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A `GETLK` answer; pids of the two tasks as the markers.
fn lock_out(ty: i16, whence: i16, start: i64, len: i64, pid: i32, task0: i32, task1: Option<i32>) -> Out {
    let pid = if ty == Flock::UNLCK {
        pid
    } else if pid == task0 {
        PID_TASK0
    } else if Some(pid) == task1 {
        PID_TASK1
    } else {
        pid
    };
    Out::Lock(ty, whence, start, len, pid)
}

fn is_get(cmd: i32) -> bool {
    cmd == libc::F_GETLK || cmd == libc::F_OFD_GETLK
}

/// The descriptor a lock op works on.
fn fd_of(op: &Op) -> i32 {
    match op {
        Op::Flock(fd, _) | Op::Fcntl(fd, _, _) => *fd,
        Op::Child(o) => fd_of(o),
        o => panic!("{o:?} is not a lock op"),
    }
}

// ---------------------------------------------------------------- host

/// The host's pids of the two tasks.
#[derive(Clone, Copy)]
pub struct HostPids {
    task0: i32,
    task1: Option<i32>,
}

impl HostPids {
    /// Task 0 only (the host thread's process).
    pub fn none() -> HostPids {
        HostPids { task0: std::process::id() as i32, task1: None }
    }
}

fn host_fl(f: &Fl) -> libc::flock {
    // SAFETY: plain data; every field is set or zero.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = f.ty;
    l.l_whence = f.whence;
    l.l_start = f.start;
    l.l_len = f.len;
    l.l_pid = f.pid;
    l
}

/// `Op::Flock` or `Op::Fcntl` on the host, by the calling thread's process.
pub fn host_lock_op(op: &Op, pids: &HostPids) -> Out {
    match op {
        Op::Flock(fd, o) => {
            // SAFETY: a plain syscall.
            let r = unsafe { libc::syscall(libc::SYS_flock, *fd, *o) };
            if r < 0 { Out::Err(errno()) } else { Out::Unit }
        }
        Op::Fcntl(fd, cmd, f) => {
            let mut l = host_fl(f);
            // SAFETY: `l` is a valid `struct flock` that outlives the call.
            let r = unsafe { libc::syscall(libc::SYS_fcntl, *fd, *cmd, &mut l as *mut libc::flock) };
            if r < 0 {
                Out::Err(errno())
            } else if is_get(*cmd) {
                lock_out(l.l_type, l.l_whence, l.l_start, l.l_len, l.l_pid, pids.task0, pids.task1)
            } else {
                Out::Unit
            }
        }
        o => panic!("{o:?} is not a lock op"),
    }
}

const K_OPEN: u32 = 1;
const K_CLOSE: u32 = 2;
const K_DUP: u32 = 3;
const K_FLOCK: u32 = 4;
const K_FCNTL: u32 = 5;
const K_INO: u32 = 6;

/// A command to the child process (written whole: smaller than `PIPE_BUF`).
#[repr(C)]
#[derive(Clone, Copy)]
struct Cmd {
    kind: u32,
    fd: i32,
    /// Open flags, flock operation or fcntl command.
    arg: i32,
    mode: u32,
    fl: libc::flock,
    /// NUL-terminated.
    path: [u8; 256],
}

/// The child's answer.
#[repr(C)]
#[derive(Clone, Copy)]
struct Res {
    ret: i64,
    err: i32,
    dev: u64,
    fl: libc::flock,
}

/// The child process: runs commands until its command pipe closes. Raw system calls
/// only (it was forked from a multi-threaded process: no allocation, no lock).
fn child_main(cmd_r: i32, res_w: i32) -> ! {
    loop {
        // SAFETY (whole loop): plain syscalls on buffers owned here, of their sizes.
        unsafe {
            let mut c: Cmd = std::mem::zeroed();
            let n = libc::read(cmd_r, (&raw mut c).cast(), std::mem::size_of::<Cmd>());
            if n != std::mem::size_of::<Cmd>() as isize {
                libc::_exit(0);
            }
            let mut res = Res { ret: 0, err: 0, dev: 0, fl: c.fl };
            res.ret = match c.kind {
                K_OPEN => {
                    libc::syscall(libc::SYS_openat, libc::AT_FDCWD, c.path.as_ptr(), c.arg | libc::O_NONBLOCK, c.mode)
                }
                K_CLOSE => libc::syscall(libc::SYS_close, c.fd),
                K_DUP => libc::syscall(libc::SYS_dup, c.fd),
                K_FLOCK => libc::syscall(libc::SYS_flock, c.fd, c.arg),
                K_FCNTL => libc::syscall(libc::SYS_fcntl, c.fd, c.arg, &raw mut res.fl),
                K_INO => {
                    let mut st: libc::stat = std::mem::zeroed();
                    let r = libc::syscall(libc::SYS_fstat, c.fd, &raw mut st);
                    res.dev = st.st_dev;
                    if r < 0 { r } else { st.st_ino as i64 }
                }
                _ => -1,
            };
            if res.ret < 0 {
                res.err = *libc::__errno_location();
            }
            libc::write(res_w, (&raw const res).cast(), std::mem::size_of::<Res>());
        }
    }
}

/// The forked child of a sequence.
struct Child {
    pid: i32,
    cmd_w: i32,
    res_r: i32,
}

impl Child {
    fn send(&self, c: &Cmd) {
        // SAFETY: writes a plain struct of its size.
        let n = unsafe { libc::write(self.cmd_w, (c as *const Cmd).cast(), std::mem::size_of::<Cmd>()) };
        assert_eq!(n, std::mem::size_of::<Cmd>() as isize, "command to the child: errno {}", errno());
    }

    fn recv(&self) -> Res {
        // SAFETY: reads a plain struct of its size (every bit pattern is valid).
        unsafe {
            let mut r: Res = std::mem::zeroed();
            let n = libc::read(self.res_r, (&raw mut r).cast(), std::mem::size_of::<Res>());
            assert_eq!(n, std::mem::size_of::<Res>() as isize, "answer from the child: errno {}", errno());
            r
        }
    }

    /// Whether an answer is waiting (the background request finished).
    fn answered(&self) -> bool {
        let mut p = libc::pollfd { fd: self.res_r, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }
}

/// The command for a child op.
fn child_cmd(op: &Op) -> Cmd {
    // SAFETY: plain data, all zero is valid.
    let mut c: Cmd = unsafe { std::mem::zeroed() };
    match op {
        Op::Open(super::D::Cwd, p, flags, mode) => {
            assert!(p.0.len() < c.path.len(), "child open: path too long");
            c.kind = K_OPEN;
            c.path[..p.0.len()].copy_from_slice(&p.0);
            c.arg = *flags;
            c.mode = *mode;
        }
        Op::Close(fd) => (c.kind, c.fd) = (K_CLOSE, *fd),
        Op::Dup(fd) => (c.kind, c.fd) = (K_DUP, *fd),
        Op::Flock(fd, o) => (c.kind, c.fd, c.arg) = (K_FLOCK, *fd, *o as i32),
        Op::Fcntl(fd, cmd, f) => {
            (c.kind, c.fd, c.arg) = (K_FCNTL, *fd, *cmd);
            c.fl = host_fl(f);
        }
        o => panic!("task 1 cannot run {o:?}"),
    }
    c
}

/// A child's answer to `op` as an `Out`.
fn child_out(op: &Op, r: &Res, pids: &HostPids) -> Out {
    if r.ret < 0 {
        return Out::Err(r.err);
    }
    match op {
        Op::Open(..) | Op::Dup(_) => Out::Num(r.ret),
        Op::Fcntl(_, cmd, _) if is_get(*cmd) => {
            lock_out(r.fl.l_type, r.fl.l_whence, r.fl.l_start, r.fl.l_len, r.fl.l_pid, pids.task0, pids.task1)
        }
        _ => Out::Unit,
    }
}

/// Whether `/proc/locks` shows a request waiting on the inode `(dev, ino)`.
fn host_waiting(dev: u64, ino: u64) -> bool {
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    let mut text = Vec::new();
    let mut buf = [0u8; 4096];
    // SAFETY: seek and read into a buffer of its size.
    unsafe {
        libc::lseek(PROC_LOCKS_FD, 0, libc::SEEK_SET);
        loop {
            let n = libc::read(PROC_LOCKS_FD, buf.as_mut_ptr().cast(), buf.len());
            if n <= 0 {
                break;
            }
            text.extend_from_slice(&buf[..n as usize]);
        }
    }
    String::from_utf8_lossy(&text).lines().any(|l| {
        let t: Vec<&str> = l.split_whitespace().collect();
        t.get(1) == Some(&"->") && t.contains(&want.as_str())
    })
}

/// Waits until `waiting()` or `done()`; panics after the watchdog.
fn wait_until(what: &Op, mut waiting: impl FnMut() -> bool, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !(done() || waiting()) {
        assert!(start.elapsed() < WATCHDOG, "{what:?} neither waits for a lock nor finishes");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The processes of a host sequence.
pub struct HostProcs {
    child: Option<Child>,
    /// Task 0's background request.
    bg0: Option<std::thread::JoinHandle<Out>>,
    /// Task 1's background op, whose answer is still in the pipe.
    bg1: Option<Op>,
}

impl Default for HostProcs {
    fn default() -> Self {
        HostProcs::new()
    }
}

impl HostProcs {
    pub fn new() -> HostProcs {
        HostProcs { child: None, bg0: None, bg1: None }
    }

    fn pids(&self) -> HostPids {
        HostPids { task0: std::process::id() as i32, task1: self.child.as_ref().map(|c| c.pid) }
    }

    fn child(&self) -> &Child {
        self.child.as_ref().expect("a task-1 op before Op::Fork")
    }

    /// Runs `op` in the sequence.
    pub fn op(&mut self, op: &Op) -> Out {
        match op {
            Op::Fork => {
                self.fork();
                Out::Unit
            }
            Op::Child(o) => {
                assert!(self.bg1.is_none(), "task 1 is busy with a background op");
                let c = self.child();
                c.send(&child_cmd(o));
                child_out(o, &c.recv(), &self.pids())
            }
            Op::Bg(o) => {
                let (dev, ino) = self.inode_of(o);
                match &**o {
                    Op::Child(inner) => {
                        let c = self.child();
                        c.send(&child_cmd(inner));
                        wait_until(op, || host_waiting(dev, ino), || c.answered());
                        self.bg1 = Some((**inner).clone());
                    }
                    inner => {
                        let (inner, pids) = (inner.clone(), self.pids());
                        // Shares this thread's descriptor table, root and ids: task 0.
                        let h = std::thread::spawn(move || host_lock_op(&inner, &pids));
                        wait_until(op, || host_waiting(dev, ino), || h.is_finished());
                        self.bg0 = Some(h);
                    }
                }
                Out::Unit
            }
            Op::Join(0) => self.bg0.take().expect("Join(0) without Bg").join().expect("background op panicked"),
            Op::Join(_) => {
                let o = self.bg1.take().expect("Join(1) without Bg");
                child_out(&o, &self.child().recv(), &self.pids())
            }
            Op::Flock(..) | Op::Fcntl(..) => host_lock_op(op, &self.pids()),
            o => host_op(o),
        }
    }

    /// The (device, inode) of the file a lock op's descriptor names, asked of its task.
    fn inode_of(&self, op: &Op) -> (u64, u64) {
        match op {
            Op::Child(o) => {
                let c = self.child();
                c.send(&Cmd { kind: K_INO, fd: fd_of(o), ..child_cmd(&Op::Close(0)) });
                let r = c.recv();
                assert!(r.ret >= 0, "fstat in the child: errno {}", r.err);
                (r.dev, r.ret as u64)
            }
            o => {
                // SAFETY: fstat into a struct we own.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                assert_eq!(unsafe { libc::fstat(fd_of(o), &mut st) }, 0, "fstat: errno {}", errno());
                (st.st_dev, st.st_ino)
            }
        }
    }

    fn fork(&mut self) {
        assert!(self.child.is_none(), "a second Op::Fork");
        let (mut a, mut b) = ([0i32; 2], [0i32; 2]);
        // SAFETY: pipe2 fills the arrays; the descriptors are moved out of the low numbers
        // the sequence uses (dup3 to high ones, originals closed), then fork: the child
        // runs `child_main`, which never returns.
        unsafe {
            assert_eq!(libc::pipe2(a.as_mut_ptr(), libc::O_CLOEXEC), 0);
            assert_eq!(libc::pipe2(b.as_mut_ptr(), libc::O_CLOEXEC), 0);
            let high = [PROC_LOCKS_FD + 1, PROC_LOCKS_FD + 2, PROC_LOCKS_FD + 3, PROC_LOCKS_FD + 4];
            for (fd, h) in [a[0], a[1], b[0], b[1]].into_iter().zip(high) {
                assert!(libc::dup3(fd, h, libc::O_CLOEXEC) >= 0);
                libc::close(fd);
            }
            let (cmd_r, cmd_w, res_r, res_w) = (high[0], high[1], high[2], high[3]);
            let pid = libc::fork();
            assert!(pid >= 0, "fork: errno {}", errno());
            if pid == 0 {
                libc::close(cmd_w);
                libc::close(res_r);
                child_main(cmd_r, res_w);
            }
            libc::close(cmd_r);
            libc::close(res_w);
            self.child = Some(Child { pid, cmd_w, res_r });
        }
    }

    /// Ends the sequence: the child is killed and reaped, then the descriptors close (so
    /// every lock a background request of task 0 could wait for goes), and the request
    /// is collected.
    pub fn finish(&mut self) {
        if let Some(c) = self.child.take() {
            // SAFETY: our own child and descriptors.
            unsafe {
                libc::kill(c.pid, libc::SIGKILL);
                libc::waitpid(c.pid, std::ptr::null_mut(), 0);
                libc::close(c.cmd_w);
                libc::close(c.res_r);
            }
        }
        // SAFETY: closes this thread's (private) descriptors below /proc/locks's.
        unsafe { libc::syscall(libc::SYS_close_range, 0u32, (PROC_LOCKS_FD - 1) as u32, 0u32) };
        if let Some(h) = self.bg0.take() {
            let _ = h.join();
        }
    }
}

// ---------------------------------------------------------------- uvfs

/// uvfs's pids of the two tasks.
#[derive(Clone, Copy)]
pub struct UvfsPids {
    task0: i32,
    task1: Option<i32>,
}

impl UvfsPids {
    pub fn of(t: &Task, child: Option<&Task>) -> UvfsPids {
        UvfsPids { task0: t.getpid(), task1: child.map(Task::getpid) }
    }
}

/// `Op::Flock` or `Op::Fcntl` on uvfs as `t`, waiting as `wait` says (forever if `None`).
pub fn uvfs_lock_op(t: &Task, op: &Op, pids: &UvfsPids, wait: Option<&LockWait<'_>>) -> Out {
    let forever = LockWait::default();
    let wait = wait.unwrap_or(&forever);
    match op {
        Op::Flock(fd, o) => match t.flock_wait(Fd(*fd), FlockOp::from_bits_retain(*o), wait) {
            Ok(()) => Out::Unit,
            Err(e) => Out::Err(e.raw()),
        },
        Op::Fcntl(fd, cmd, f) => {
            let Some(c) = LockCmd::from_raw(*cmd) else {
                // `fcntl` looks the descriptor up first, and refuses other commands on
                // `O_PATH` as EBADF too; uvfs's lock calls take only lock commands.
                return match t.file(Fd(*fd)) {
                    Ok(f) if !f.is_path() => Out::Err(libc::EINVAL),
                    _ => Out::Err(libc::EBADF),
                };
            };
            let mut l = Flock { l_type: f.ty, l_whence: f.whence, l_start: f.start, l_len: f.len, l_pid: f.pid };
            match t.fcntl_lock_wait(Fd(*fd), c, &mut l, wait) {
                Err(e) => Out::Err(e.raw()),
                Ok(()) if c.is_get() => {
                    lock_out(l.l_type, l.l_whence, l.l_start, l.l_len, l.l_pid, pids.task0, pids.task1)
                }
                Ok(()) => Out::Unit,
            }
        }
        o => panic!("{o:?} is not a lock op"),
    }
}

/// Any op of task `t` (lock ops with `wait`).
fn uvfs_task_op(t: &Task, op: &Op, pids: &UvfsPids, wait: Option<&LockWait<'_>>) -> Out {
    match op {
        Op::Flock(..) | Op::Fcntl(..) => uvfs_lock_op(t, op, pids, wait),
        o => uvfs_op(t, o),
    }
}

/// Runs a sequence's ops as `t` (task 0) and its fork (task 1).
pub fn uvfs_run_procs(t: &Task, ops: &[Op]) -> Vec<Out> {
    let child: OnceLock<Task> = OnceLock::new();
    let stop = Interrupt::new();
    std::thread::scope(|s| {
        let mut bg: [Option<std::thread::ScopedJoinHandle<'_, Out>>; 2] = [None, None];
        let mut out = Vec::new();
        for op in ops {
            let pids = UvfsPids::of(t, child.get());
            let o = match op {
                Op::Fork => {
                    assert!(child.set(t.fork()).is_ok(), "a second Op::Fork");
                    Out::Unit
                }
                Op::Child(o) => uvfs_task_op(child.get().expect("a task-1 op before Op::Fork"), o, &pids, None),
                Op::Bg(o) => {
                    let (task, inner, slot) = match &**o {
                        Op::Child(i) => (child.get().expect("Bg of task 1 before Op::Fork"), (**i).clone(), 1),
                        i => (t, i.clone(), 0),
                    };
                    let inode = task.file(Fd(fd_of(&inner))).ok().map(|f| f.inode().clone());
                    let stop = &stop;
                    let h = s.spawn(move || {
                        let w = LockWait { deadline: Some(Instant::now() + WATCHDOG), interrupt: Some(stop) };
                        uvfs_task_op(task, &inner, &pids, Some(&w))
                    });
                    let waiting = || inode.as_ref().is_some_and(|i| i.file_locks().iter().any(|l| l.blocked));
                    wait_until(op, waiting, || h.is_finished());
                    bg[slot] = Some(h);
                    Out::Unit
                }
                Op::Join(n) => {
                    bg[usize::from(*n).min(1)].take().expect("Join without Bg").join().expect("background op panicked")
                }
                o => uvfs_task_op(t, o, &pids, None),
            };
            super::uvfs_look_at_all(t);
            out.push(o);
        }
        stop.interrupt();
        for h in bg.into_iter().flatten() {
            let _ = h.join();
        }
        out
    })
}
