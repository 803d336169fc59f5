//! File locks against the host kernel: `flock`, the `fcntl` lock commands (classic POSIX
//! and OFD), between two tasks (task 1 is a fork: a second process on the host, see
//! `common/locks.rs`), generated and hand-written: every errno path, conversions, split
//! and merge of ranges probed with `F_GETLK`, release on close (the POSIX trap),
//! waiting requests, deadlock detection.

mod common;

use common::{D, Fl, Op, Who, assert_same, check, p};
use proptest::prelude::*;

const O_RDONLY: i32 = libc::O_RDONLY;
const O_WRONLY: i32 = libc::O_WRONLY;
const O_RDWR: i32 = libc::O_RDWR;
const GETLK: i32 = libc::F_GETLK;
const SETLK: i32 = libc::F_SETLK;
const SETLKW: i32 = libc::F_SETLKW;
const OFD_GETLK: i32 = libc::F_OFD_GETLK;
const OFD_SETLK: i32 = libc::F_OFD_SETLK;
const OFD_SETLKW: i32 = libc::F_OFD_SETLKW;
const RD: i16 = libc::F_RDLCK as i16;
const WR: i16 = libc::F_WRLCK as i16;
const UN: i16 = libc::F_UNLCK as i16;
const SH: u32 = libc::LOCK_SH as u32;
const EX: u32 = libc::LOCK_EX as u32;
const NB: u32 = libc::LOCK_NB as u32;
const LUN: u32 = libc::LOCK_UN as u32;

/// Files every sequence starts with: /a and /b (0666, 100 bytes), directory /d.
fn setup() -> Vec<Op> {
    let mut v = Vec::new();
    for f in ["/a", "/b"] {
        v.extend([
            Op::Open(D::Cwd, p(f), libc::O_CREAT | O_WRONLY, 0o666),
            Op::Write(0, 100),
            Op::Fchmod(0, 0o666),
            Op::Close(0),
        ]);
    }
    v.push(Op::Mkdirat(D::Cwd, p("/d"), 0o777));
    v
}

fn fl(ty: i16, start: i64, len: i64) -> Fl {
    Fl { ty, whence: 0, start, len, pid: 0 }
}

fn set(fd: i32, ty: i16, start: i64, len: i64) -> Op {
    Op::Fcntl(fd, SETLK, fl(ty, start, len))
}

fn get(fd: i32, ty: i16, start: i64, len: i64) -> Op {
    Op::Fcntl(fd, GETLK, fl(ty, start, len))
}

fn open(path: &str, flags: i32) -> Op {
    Op::Open(D::Cwd, p(path), flags, 0)
}

fn child(op: Op) -> Op {
    Op::Child(Box::new(op))
}

fn same(who: Who, ops: &[Op]) {
    assert_same(who, &setup(), ops);
}

// ---------------------------------------------------------------- generated

fn lock_fd() -> BoxedStrategy<i32> {
    prop_oneof![20 => 0..3i32, 2 => 3..5i32, 1 => Just(-1), 1 => Just(40)].boxed()
}

fn flock_op() -> BoxedStrategy<u32> {
    // Never a waiting request: a task can wait for itself forever (two of its own open
    // file descriptions).
    let good = prop::sample::select(vec![SH | NB, EX | NB, LUN, LUN | NB]);
    let bad = prop::sample::select(vec![0, 3, SH | EX | NB, 32, 64 | SH | NB]);
    prop_oneof![6 => good, 1 => bad].boxed()
}

fn flock_struct() -> BoxedStrategy<Fl> {
    // Mostly well-formed ranges (so that locks meet), sometimes anything.
    let ty = prop::sample::select(vec![RD, WR, UN, RD, WR]);
    let start = prop::sample::select(vec![0i64, 0, 5, 10, 10, 20, 30]);
    let len = prop::sample::select(vec![0i64, 5, 10, 10, 20]);
    let good = (ty, start, len).prop_map(|(ty, start, len)| Fl { ty, whence: 0, start, len, pid: 0 });
    let ty = prop::sample::select(vec![RD, WR, UN, 5]);
    let whence = prop::sample::select(vec![0i16, 1, 2, 3]);
    let start = prop::sample::select(vec![0i64, 3, 10, 100, -5, i64::MAX]);
    let len = prop::sample::select(vec![0i64, 1, 10, -3, -20, i64::MAX]);
    let pid = prop::sample::select(vec![0i32, 0, 7]);
    let wild =
        (ty, whence, start, len, pid).prop_map(|(ty, whence, start, len, pid)| Fl { ty, whence, start, len, pid });
    prop_oneof![4 => good, 1 => wild].boxed()
}

fn lock_cmd() -> BoxedStrategy<i32> {
    // No waiting command (see `flock_op`); 99 is no lock command.
    prop::sample::select(vec![GETLK, GETLK, SETLK, SETLK, SETLK, OFD_GETLK, OFD_SETLK, OFD_SETLK, 99]).boxed()
}

/// An op either task may run.
fn task_op() -> BoxedStrategy<Op> {
    let path = prop::sample::select(vec!["/a", "/a", "/b", "/d"]).prop_map(p);
    let flags = prop::sample::select(vec![O_RDONLY, O_WRONLY, O_RDWR, O_RDWR, O_RDWR, libc::O_PATH]);
    prop_oneof![
        3 => (path, flags).prop_map(|(p, f)| Op::Open(D::Cwd, p, f, 0)),
        1 => lock_fd().prop_map(Op::Close),
        1 => lock_fd().prop_map(Op::Dup),
        5 => (lock_fd(), flock_op()).prop_map(|(f, o)| Op::Flock(f, o)),
        10 => (lock_fd(), lock_cmd(), flock_struct()).prop_map(|(f, c, l)| Op::Fcntl(f, c, l)),
    ]
    .boxed()
}

/// An op of task 0 only (the file position and size that `SEEK_CUR`/`SEEK_END` see).
fn task0_op() -> BoxedStrategy<Op> {
    prop_oneof![
        12 => task_op(),
        1 => (lock_fd(), prop::sample::select(vec![0i64, 7, 40])).prop_map(|(f, o)| Op::Lseek(f, o, common::W::Set)),
        1 => (lock_fd(), prop::sample::select(vec![0i64, 60, 200])).prop_map(|(f, l)| Op::Ftruncate(f, l)),
    ]
    .boxed()
}

/// Task 0's ops, a fork, then both tasks' ops mixed.
fn sequence() -> BoxedStrategy<Vec<Op>> {
    let before = prop::collection::vec(task0_op(), 0..8);
    let after = prop::collection::vec(prop_oneof![3 => task0_op(), 2 => task_op().prop_map(child)], 1..24);
    (prop::collection::vec(open_first(), 2..5), before, after)
        .prop_map(|(opens, before, after)| {
            let mut v = opens;
            v.extend(before);
            v.push(Op::Fork);
            v.extend(after);
            v
        })
        .boxed()
}

fn open_first() -> BoxedStrategy<Op> {
    (prop::sample::select(vec!["/a", "/a", "/b"]), prop::sample::select(vec![O_RDONLY, O_WRONLY, O_RDWR, O_RDWR]))
        .prop_map(|(f, fl)| open(f, fl))
        .boxed()
}

fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config(160))]

    #[test]
    fn lock_sequences_of_two_tasks(ops in sequence()) {
        check(Who::Root, &setup(), &ops).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn lock_sequences_as_a_user(ops in sequence()) {
        check(Who::User, &setup(), &ops).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------- hand-written: errnos

#[test]
fn flock_errnos() {
    same(
        Who::Root,
        &[
            open("/a", O_RDONLY),
            Op::Flock(0, 0),
            Op::Flock(0, 3),
            Op::Flock(0, SH | EX),
            Op::Flock(0, 16 | SH),
            // EINVAL comes before EBADF.
            Op::Flock(9, 3),
            Op::Flock(9, SH),
            Op::Flock(-1, LUN),
            // LOCK_MAND: ignored, whatever the descriptor.
            Op::Flock(9, 32 | SH),
            Op::Flock(0, 32),
            open("/a", libc::O_PATH),
            Op::Flock(1, SH | NB),
            Op::Flock(1, LUN),
            // Access mode 3: neither read nor write; unlocking is allowed.
            open("/a", 3),
            Op::Flock(2, SH | NB),
            Op::Flock(2, LUN),
            // A directory can be flocked.
            open("/d", O_RDONLY),
            Op::Flock(3, EX | NB),
            Op::Flock(3, LUN | NB),
        ],
    );
}

#[test]
fn fcntl_lock_errnos() {
    let big = i64::MAX;
    same(
        Who::Root,
        &[
            open("/a", O_RDONLY),
            open("/a", O_WRONLY),
            open("/a", libc::O_PATH),
            // Bad descriptors, O_PATH, and a command that is not a lock command.
            Op::Fcntl(9, SETLK, fl(RD, 0, 0)),
            Op::Fcntl(2, SETLK, fl(RD, 0, 0)),
            Op::Fcntl(2, GETLK, fl(RD, 0, 0)),
            // The mode must allow the type (not for GETLK, nor for an unlock).
            set(0, WR, 0, 0),
            set(1, RD, 0, 0),
            get(0, WR, 0, 0),
            set(0, UN, 0, 0),
            // GETLK of an unlock, or of no type.
            get(0, UN, 0, 0),
            get(0, 9, 0, 0),
            // Whence, start, length.
            Op::Fcntl(0, SETLK, Fl { ty: RD, whence: 3, start: 0, len: 0, pid: 0 }),
            Op::Fcntl(0, SETLK, Fl { ty: 9, whence: 7, start: 0, len: 0, pid: 0 }),
            set(0, RD, -1, 0),
            set(0, RD, 5, -6),
            set(0, RD, 5, -5),
            set(0, RD, big, 1),
            set(0, RD, big, 2),
            set(0, 9, big, 2),
            set(0, 9, 0, 0),
            Op::Fcntl(0, SETLK, Fl { ty: RD, whence: 2, start: big, len: 0, pid: 0 }),
            Op::Fcntl(0, SETLK, Fl { ty: RD, whence: 2, start: -101, len: 0, pid: 0 }),
            Op::Fcntl(0, SETLK, Fl { ty: RD, whence: 2, start: -100, len: -1, pid: 0 }),
            Op::Lseek(0, 30, common::W::Set),
            Op::Fcntl(0, SETLK, Fl { ty: RD, whence: 1, start: -30, len: 0, pid: 0 }),
            Op::Fcntl(0, SETLK, Fl { ty: RD, whence: 1, start: -31, len: 0, pid: 0 }),
            // OFD commands want l_pid 0 (checked after the mode).
            Op::Fcntl(0, OFD_SETLK, Fl { ty: RD, whence: 0, start: 0, len: 0, pid: 5 }),
            Op::Fcntl(0, OFD_SETLK, Fl { ty: WR, whence: 0, start: 0, len: 0, pid: 5 }),
            Op::Fcntl(0, OFD_GETLK, Fl { ty: RD, whence: 0, start: 0, len: 0, pid: 5 }),
            Op::Fcntl(0, OFD_GETLK, Fl { ty: 9, whence: 0, start: 0, len: 0, pid: 0 }),
            // Not a lock command (leases are not supported).
            Op::Fcntl(0, 99, fl(RD, 0, 0)),
            Op::Fcntl(0, libc::F_SETLEASE, fl(RD, 0, 0)),
        ],
    );
}

// ---------------------------------------------------------------- hand-written: semantics

/// Split, merge, upgrade and downgrade of one owner's ranges, each state probed by the
/// other task's `F_GETLK`s (which report the first conflicting lock, in Linux's order).
#[test]
fn split_and_merge_seen_from_another_process() {
    let probes = |v: &mut Vec<Op>| {
        for (ty, s, l) in [(WR, 0, 0), (WR, 15, 1), (RD, 0, 0), (WR, 40, 0), (RD, 60, 5), (WR, 99, 0)] {
            v.push(child(get(0, ty, s, l)));
        }
    };
    let mut ops = vec![open("/a", O_RDWR), Op::Fork];
    for step in [
        set(0, RD, 0, 100),
        set(0, WR, 10, 10),
        set(0, WR, 20, 10),
        set(0, RD, 15, 0),
        set(0, UN, 50, 10),
        set(0, WR, 0, 5),
        set(0, WR, 5, 5),
        set(0, UN, 0, 0),
        Op::Fcntl(0, SETLK, Fl { ty: WR, whence: 0, start: 30, len: -10, pid: 0 }),
        set(0, RD, 30, 0),
    ] {
        ops.push(step);
        probes(&mut ops);
    }
    same(Who::Root, &ops);
}

/// Classic POSIX locks conflict between processes, not within one; OFD locks conflict
/// between open file descriptions, also of one process, and with POSIX locks.
#[test]
fn posix_and_ofd_conflicts() {
    same(
        Who::Root,
        &[
            open("/a", O_RDWR),
            open("/a", O_RDWR),
            Op::Fork,
            set(0, WR, 0, 10),
            // Same owner, other descriptor: no conflict.
            set(1, WR, 5, 10),
            get(1, WR, 0, 0),
            child(get(0, RD, 0, 0)),
            child(set(0, RD, 0, 1)),
            child(set(0, RD, 15, 0)),
            get(0, WR, 0, 0),
            // OFD locks: per open file description.
            Op::Fcntl(0, OFD_SETLK, fl(RD, 50, 10)),
            Op::Fcntl(1, OFD_SETLK, fl(WR, 55, 1)),
            Op::Fcntl(1, OFD_GETLK, fl(WR, 0, 0)),
            Op::Fcntl(0, OFD_GETLK, fl(WR, 0, 0)),
            Op::Fcntl(0, OFD_GETLK, fl(UN, 0, 0)),
            Op::Fcntl(1, OFD_GETLK, fl(UN, 0, 0)),
            // The child shares descriptor 0's description: its OFD lock is the child's too.
            child(Op::Fcntl(0, OFD_SETLK, fl(WR, 50, 10))),
            child(Op::Fcntl(0, OFD_GETLK, fl(UN, 40, 0))),
            // OFD and POSIX locks conflict.
            child(get(0, WR, 50, 1)),
            Op::Fcntl(1, OFD_SETLK, fl(RD, 0, 1)),
            set(0, UN, 0, 0),
            Op::Fcntl(1, OFD_SETLK, fl(WR, 0, 1)),
            child(get(0, RD, 0, 0)),
        ],
    );
}

/// A POSIX lock goes when its owner closes *any* descriptor of the file, also one that
/// did not take it, and also one the child closes of its own; OFD and flock locks go when
/// the description's last descriptor closes; an `O_PATH` close releases nothing.
#[test]
fn release_on_close() {
    same(
        Who::Root,
        &[
            open("/a", O_RDWR),
            open("/a", O_RDONLY),
            open("/a", libc::O_PATH),
            Op::Fork,
            set(0, WR, 0, 10),
            child(get(0, RD, 0, 0)),
            Op::Close(2),
            child(get(0, RD, 0, 0)),
            Op::Close(1),
            child(get(0, RD, 0, 0)),
            // The child's own close releases the child's locks only.
            child(set(0, WR, 20, 5)),
            set(0, WR, 0, 10),
            child(Op::Close(1)),
            get(0, RD, 0, 0),
            child(Op::Close(0)),
            get(0, RD, 0, 0),
            // OFD and flock locks of a description shared by dup: the last close.
            Op::Dup(0),
            Op::Fcntl(0, OFD_SETLK, fl(WR, 40, 5)),
            Op::Flock(0, EX | NB),
            open("/a", O_RDWR),
            Op::Flock(2, SH | NB),
            Op::Fcntl(2, OFD_GETLK, fl(RD, 0, 0)),
            Op::Close(0),
            Op::Flock(2, SH | NB),
            Op::Fcntl(2, OFD_GETLK, fl(RD, 0, 0)),
            Op::Close(1),
            Op::Flock(2, SH | NB),
            Op::Fcntl(2, OFD_GETLK, fl(RD, 0, 0)),
        ],
    );
}

/// flock: per open file description (dup and fork share one), conversions that drop the
/// old lock first (a failed LOCK_NB conversion leaves none).
#[test]
fn flock_semantics() {
    same(
        Who::Root,
        &[
            open("/a", O_RDONLY),
            open("/a", O_RDONLY),
            Op::Fork,
            Op::Flock(0, SH | NB),
            Op::Flock(1, SH | NB),
            Op::Flock(0, EX | NB),
            // The failed conversion dropped fd 0's shared lock: fd 1 converts.
            Op::Flock(1, EX | NB),
            Op::Flock(0, SH | NB),
            // The child shares both descriptions.
            child(Op::Flock(1, LUN)),
            Op::Flock(0, SH | NB),
            child(open("/a", O_RDONLY)),
            child(Op::Flock(2, EX | NB)),
            child(Op::Flock(2, SH | NB)),
            Op::Flock(1, EX | NB),
            // flock and POSIX locks do not see each other.
            set(0, RD, 0, 0),
            child(get(2, WR, 0, 0)),
        ],
    );
}

/// Waiting requests: task 1 waits for task 0's lock and gets it when it goes; a flock
/// waiter likewise; `F_SETLKW` that would close a cycle is EDEADLK.
#[test]
fn waiting_and_deadlock() {
    let bg = |op: Op| Op::Bg(Box::new(op));
    same(
        Who::Root,
        &[
            open("/a", O_RDWR),
            open("/b", O_RDWR),
            Op::Fork,
            set(0, WR, 0, 10),
            child(set(0, WR, 10, 10)),
            child(set(1, WR, 0, 1)),
            // Task 1 waits for task 0's range ...
            bg(child(Op::Fcntl(0, SETLKW, fl(WR, 0, 5)))),
            // ... so task 0 waiting for task 1's would deadlock, on /a or on /b.
            Op::Fcntl(0, SETLKW, fl(WR, 10, 1)),
            Op::Fcntl(1, SETLKW, fl(WR, 0, 1)),
            get(1, WR, 0, 0),
            // Task 1 gets its lock once task 0 unlocks.
            set(0, UN, 0, 5),
            Op::Join(1),
            child(get(0, WR, 0, 0)),
            get(0, WR, 0, 0),
            // Task 0 waits for task 1's flock, which the child drops.
            child(open("/a", O_RDONLY)),
            child(Op::Flock(2, EX | NB)),
            bg(Op::Flock(0, SH)),
            child(Op::Flock(2, LUN)),
            Op::Join(0),
            child(Op::Flock(2, EX | NB)),
            // OFD waiters get no deadlock detection.
            Op::Fcntl(1, OFD_SETLK, fl(WR, 50, 1)),
            bg(child(Op::Fcntl(1, OFD_SETLKW, fl(WR, 50, 1)))),
            Op::Fcntl(1, OFD_SETLK, fl(UN, 50, 1)),
            Op::Join(1),
            Op::Fcntl(1, OFD_GETLK, fl(WR, 0, 0)),
        ],
    );
}

/// A waiting request given up with a release by its own owner's close: task 1 waits on
/// task 0's lock, task 0 closes another descriptor of the file (the POSIX trap), task 1
/// gets the lock.
#[test]
fn a_close_wakes_a_waiter() {
    same(
        Who::User,
        &[
            open("/a", O_RDWR),
            Op::Fork,
            open("/a", O_RDONLY),
            set(0, WR, 0, 0),
            Op::Bg(Box::new(child(Op::Fcntl(0, SETLKW, fl(RD, 10, 1))))),
            Op::Close(1),
            Op::Join(1),
            get(0, WR, 10, 1),
        ],
    );
}
