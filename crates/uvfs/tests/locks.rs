//! File locks in-process, where the host has no counterpart to compare with: waits
//! interrupted or given a deadline, owners (threads of one table, forks, frontends'
//! owners), locks taken through a file held without a descriptor, what `file_locks`
//! lists. Ordering between threads is by the listing of waiters, never by sleeping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use uvfs::{
    Credentials, DirFd, Errno, Flock, FlockOp, Gid, Interrupt, LockClass, LockCmd, LockOwnerSpace, LockWait, OpenFlags,
    Task, Uid, Vfs,
};

fn setup() -> (Vfs, Task) {
    let vfs = Vfs::default();
    let t = vfs.root_task();
    let fd = t.open(b"/f", OpenFlags::CREAT | OpenFlags::RDWR, 0o666).unwrap();
    t.close(fd).unwrap();
    (vfs, t)
}

/// Spins (yielding) until `t`'s file at `fd` shows a waiting request; a watchdog turns a
/// hang into a failure.
fn until_waiting(t: &Task, fd: uvfs::Fd) {
    let inode = t.file(fd).unwrap().inode().clone();
    let start = Instant::now();
    while !inode.file_locks().iter().any(|l| l.blocked) {
        assert!(start.elapsed() < Duration::from_secs(30), "no request started waiting");
        std::thread::yield_now();
    }
}

#[test]
fn an_interrupt_ends_a_wait_with_eintr() {
    let (_vfs, t) = setup();
    let fd = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    t.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 0, 0)).unwrap();
    let child = t.fork();
    let intr = Interrupt::new();
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            let w = LockWait { deadline: None, interrupt: Some(&intr) };
            child.fcntl_lock_wait(fd, LockCmd::SetLkW, &mut Flock::new(Flock::RDLCK, 5, 1), &w)
        });
        until_waiting(&t, fd);
        let waiting = t.file(fd).unwrap().inode().file_locks();
        assert!(waiting.iter().any(|l| l.blocked && l.pid == child.getpid() && l.start == 5 && l.end == Some(5)));
        intr.interrupt();
        assert_eq!(h.join().unwrap(), Err(Errno::EINTR));
    });
    // Gone from the list; a fired interrupt stays fired.
    assert!(!t.file(fd).unwrap().inode().file_locks().iter().any(|l| l.blocked));
    let w = LockWait { deadline: None, interrupt: Some(&intr) };
    assert_eq!(child.flock_wait(fd, FlockOp::EX, &w), Ok(()), "no conflict: no wait, no EINTR");
    let fd2 = child.open(b"/f", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(child.flock_wait(fd2, FlockOp::SH, &w), Err(Errno::EINTR));
}

#[test]
fn a_deadline_ends_a_wait_with_eintr() {
    let (_vfs, t) = setup();
    let a = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    let b = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    t.flock(a, FlockOp::EX).unwrap();
    // Two descriptions of one task: flock and OFD locks conflict.
    let past = LockWait { deadline: Some(Instant::now()), interrupt: None };
    assert_eq!(t.flock_wait(b, FlockOp::EX, &past), Err(Errno::EINTR));
    t.fcntl_lock(a, LockCmd::OfdSetLk, &mut Flock::new(Flock::WRLCK, 0, 1)).unwrap();
    let soon = LockWait { deadline: Some(Instant::now() + Duration::from_millis(20)), interrupt: None };
    assert_eq!(t.fcntl_lock_wait(b, LockCmd::OfdSetLkW, &mut Flock::new(Flock::WRLCK, 0, 1), &soon), Err(Errno::EINTR));
    // A classic POSIX lock conflicts with that OFD lock (any owner) ...
    assert_eq!(t.fcntl_lock_wait(b, LockCmd::SetLkW, &mut Flock::new(Flock::WRLCK, 0, 1), &past), Err(Errno::EINTR));
    // ... but never with its own table's: no wait, so no EINTR.
    assert_eq!(t.fcntl_lock_wait(b, LockCmd::SetLkW, &mut Flock::new(Flock::WRLCK, 5, 1), &past), Ok(()));
    assert_eq!(t.fcntl_lock_wait(a, LockCmd::SetLkW, &mut Flock::new(Flock::WRLCK, 5, 2), &past), Ok(()));
}

#[test]
fn threads_sharing_a_table_are_one_owner_a_fork_is_another() {
    let (_vfs, t) = setup();
    let fd = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    let thread = t.with_credentials(Credentials::new(Uid(1000), Gid(1000), &[]));
    assert_eq!(thread.getpid(), t.getpid());
    let child = t.fork();
    assert_ne!(child.getpid(), t.getpid());
    t.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 0, 10)).unwrap();
    // The other thread replaces part of the same owner's lock.
    thread.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::RDLCK, 5, 10)).unwrap();
    let mut probe = Flock::new(Flock::WRLCK, 0, 0);
    child.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!(probe, Flock { l_type: Flock::WRLCK, l_whence: 0, l_start: 0, l_len: 5, l_pid: t.getpid() });
    assert_eq!(child.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::RDLCK, 0, 1)), Err(Errno::EAGAIN));
    assert_eq!(child.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::RDLCK, 5, 0)), Ok(()));
    // The child does not inherit the parent's POSIX locks; its exit releases its own.
    drop(child);
    let mut probe = Flock::new(Flock::WRLCK, 5, 0);
    t.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!(probe.l_type, Flock::UNLCK);
}

/// A file held without a descriptor (`openat_file`) takes locks; they go when it does.
#[test]
fn locks_through_a_held_file_go_with_it() {
    let (_vfs, t) = setup();
    let held = t.openat_file(DirFd::Cwd, b"/f", OpenFlags::RDWR, 0).unwrap();
    let fd = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    let other = t.fork();
    t.flock(&held, FlockOp::EX).unwrap();
    t.fcntl_lock(&held, LockCmd::OfdSetLk, &mut Flock::new(Flock::WRLCK, 0, 1)).unwrap();
    other.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 10, 1)).unwrap();
    t.fcntl_lock(&held, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 20, 1)).unwrap();
    let inode = held.inode().clone();
    let classes: Vec<LockClass> = inode.file_locks().iter().map(|l| l.class).collect();
    assert_eq!(classes, [LockClass::Flock, LockClass::Ofd, LockClass::Posix, LockClass::Posix]);
    assert_eq!(other.flock(fd, FlockOp::SH | FlockOp::NB), Err(Errno::EWOULDBLOCK));
    drop(held);
    // The held file's flock, OFD and POSIX locks went with it; the other task's stays.
    let left = inode.file_locks();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!((left[0].class, left[0].start, left[0].pid), (LockClass::Posix, 10, other.getpid()));
    assert_eq!(other.flock(fd, FlockOp::SH | FlockOp::NB), Ok(()));
}

/// A frontend's owners: conflict with each other and with tasks, deadlock-checked, told
/// apart from the tasks' locks by `GETLK`.
#[test]
fn frontend_owners() {
    let (_vfs, t) = setup();
    let t = Arc::new(t);
    let f = t.openat_file(DirFd::Cwd, b"/f", OpenFlags::RDWR, 0).unwrap();
    let space = LockOwnerSpace::new();
    let (x, y) = (space.owner(7), space.owner(8));
    let no = LockWait::default();
    t.fcntl_lock_as(&f, x, 4242, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 0, 10), &no).unwrap();
    let mut probe = Flock::new(Flock::RDLCK, 0, 0);
    let who = t.fcntl_lock_as(&f, y, 1, LockCmd::GetLk, &mut probe, &no).unwrap();
    assert_eq!((probe.l_pid, who.map(|o| space.contains(o))), (4242, Some(true)));
    assert_eq!(t.fcntl_lock_as(&f, y, 1, LockCmd::SetLk, &mut Flock::new(Flock::RDLCK, 5, 1), &no), Err(Errno::EAGAIN));
    assert_eq!(
        t.fcntl_lock_as(&f, x, 1, LockCmd::OfdSetLk, &mut Flock::new(Flock::RDLCK, 5, 1), &no),
        Err(Errno::EINVAL)
    );
    // A task's lock is not one of the space's.
    let fd = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    t.fcntl_lock(fd, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 50, 1)).unwrap();
    let mut probe = Flock::new(Flock::RDLCK, 50, 1);
    let who = t.fcntl_lock_as(&f, y, 1, LockCmd::GetLk, &mut probe, &no).unwrap();
    assert_eq!((probe.l_pid, who.map(|o| space.contains(o))), (t.getpid(), Some(false)));
    // y holds 20, waits for x's 0; x asking for y's 20 would deadlock.
    t.fcntl_lock_as(&f, y, 2, LockCmd::SetLk, &mut Flock::new(Flock::WRLCK, 20, 1), &no).unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(|| t.fcntl_lock_as(&f, y, 2, LockCmd::SetLkW, &mut Flock::new(Flock::WRLCK, 0, 1), &no));
        let inode = f.inode().clone();
        let start = Instant::now();
        while !inode.file_locks().iter().any(|l| l.blocked) {
            assert!(start.elapsed() < Duration::from_secs(30));
            std::thread::yield_now();
        }
        assert_eq!(
            t.fcntl_lock_as(&f, x, 1, LockCmd::SetLkW, &mut Flock::new(Flock::WRLCK, 20, 1), &no),
            Err(Errno::EDEADLK)
        );
        // x lets go: y gets its lock.
        t.fcntl_lock_as(&f, x, 1, LockCmd::SetLk, &mut Flock::new(Flock::UNLCK, 0, 0), &no).unwrap();
        assert_eq!(h.join().unwrap().map(|_| ()), Ok(()));
    });
}

/// `SEEK_CUR` and `SEEK_END` ranges, negative lengths, and `F_GETLK` of a range to the
/// end of the file.
#[test]
fn ranges_relative_to_position_and_size() {
    let (_vfs, t) = setup();
    let fd = t.open(b"/f", OpenFlags::RDWR, 0).unwrap();
    t.write(fd, &[0u8; 100]).unwrap();
    t.lseek(fd, 40, uvfs::Whence::Set).unwrap();
    let child = t.fork();
    let mut l = Flock { l_type: Flock::WRLCK, l_whence: Flock::SEEK_CUR, l_start: -10, l_len: -5, l_pid: 0 };
    t.fcntl_lock(fd, LockCmd::SetLk, &mut l).unwrap();
    let mut e = Flock { l_type: Flock::RDLCK, l_whence: Flock::SEEK_END, l_start: 0, l_len: 0, l_pid: 0 };
    t.fcntl_lock(fd, LockCmd::SetLk, &mut e).unwrap();
    let mut probe = Flock::new(Flock::WRLCK, 0, 0);
    child.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!((probe.l_start, probe.l_len), (25, 5));
    let mut probe = Flock::new(Flock::WRLCK, 31, 0);
    child.fcntl_lock(fd, LockCmd::GetLk, &mut probe).unwrap();
    assert_eq!((probe.l_type, probe.l_start, probe.l_len), (Flock::RDLCK, 100, 0));
}
