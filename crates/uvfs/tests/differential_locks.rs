//! File locks against the host kernel: `flock`, the `fcntl` lock commands (classic POSIX
//! and OFD), between two tasks (task 1 is a fork: a second process on the host, see
//! `common/locks.rs`), generated and hand-written: every errno path, conversions, split
//! and merge of ranges probed with `F_GETLK`, release on close (the POSIX trap),
//! waiting requests, deadlock detection.

mod common;

use common::generate_locks::*;
use common::{Fl, Op, Who, assert_same, check};
use proptest::prelude::*;

fn same(who: Who, ops: &[Op]) {
    assert_same(who, &setup(), ops);
}

// ---------------------------------------------------------------- generated

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
