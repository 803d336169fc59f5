//! What the differential suite of file locks generates: the starting files, the
//! helpers of its hand-written cases, and sequences of two tasks (task 1 a fork) that
//! take, test and drop `flock` and `fcntl` locks without ever waiting. Shared by
//! `differential_locks.rs` (uvfs in-process against the host kernel) and `uvfs-fuse`'s
//! `differential_mount.rs` (the same sequences through a FUSE mount).

use proptest::prelude::*;

use super::{D, Fl, Op, p};

pub const O_RDONLY: i32 = libc::O_RDONLY;
pub const O_WRONLY: i32 = libc::O_WRONLY;
pub const O_RDWR: i32 = libc::O_RDWR;
pub const GETLK: i32 = libc::F_GETLK;
pub const SETLK: i32 = libc::F_SETLK;
pub const SETLKW: i32 = libc::F_SETLKW;
pub const OFD_GETLK: i32 = libc::F_OFD_GETLK;
pub const OFD_SETLK: i32 = libc::F_OFD_SETLK;
pub const OFD_SETLKW: i32 = libc::F_OFD_SETLKW;
pub const RD: i16 = libc::F_RDLCK as i16;
pub const WR: i16 = libc::F_WRLCK as i16;
pub const UN: i16 = libc::F_UNLCK as i16;
pub const SH: u32 = libc::LOCK_SH as u32;
pub const EX: u32 = libc::LOCK_EX as u32;
pub const NB: u32 = libc::LOCK_NB as u32;
pub const LUN: u32 = libc::LOCK_UN as u32;

/// Files every sequence starts with: /a and /b (0666, 100 bytes), directory /d.
pub fn setup() -> Vec<Op> {
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

pub fn fl(ty: i16, start: i64, len: i64) -> Fl {
    Fl { ty, whence: 0, start, len, pid: 0 }
}

pub fn set(fd: i32, ty: i16, start: i64, len: i64) -> Op {
    Op::Fcntl(fd, SETLK, fl(ty, start, len))
}

pub fn get(fd: i32, ty: i16, start: i64, len: i64) -> Op {
    Op::Fcntl(fd, GETLK, fl(ty, start, len))
}

pub fn open(path: &str, flags: i32) -> Op {
    Op::Open(D::Cwd, p(path), flags, 0)
}

pub fn child(op: Op) -> Op {
    Op::Child(Box::new(op))
}

pub fn lock_fd() -> BoxedStrategy<i32> {
    prop_oneof![20 => 0..3i32, 2 => 3..5i32, 1 => Just(-1), 1 => Just(40)].boxed()
}

pub fn flock_op() -> BoxedStrategy<u32> {
    // Never a waiting request: a task can wait for itself forever (two of its own open
    // file descriptions).
    let good = prop::sample::select(vec![SH | NB, EX | NB, LUN, LUN | NB]);
    let bad = prop::sample::select(vec![0, 3, SH | EX | NB, 32, 64 | SH | NB]);
    prop_oneof![6 => good, 1 => bad].boxed()
}

pub fn flock_struct() -> BoxedStrategy<Fl> {
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

pub fn lock_cmd() -> BoxedStrategy<i32> {
    // No waiting command (see `flock_op`); 99 is no lock command.
    prop::sample::select(vec![GETLK, GETLK, SETLK, SETLK, SETLK, OFD_GETLK, OFD_SETLK, OFD_SETLK, 99]).boxed()
}

/// An op either task may run.
pub fn task_op() -> BoxedStrategy<Op> {
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
pub fn task0_op() -> BoxedStrategy<Op> {
    prop_oneof![
        12 => task_op(),
        1 => (lock_fd(), prop::sample::select(vec![0i64, 7, 40])).prop_map(|(f, o)| Op::Lseek(f, o, super::W::Set)),
        1 => (lock_fd(), prop::sample::select(vec![0i64, 60, 200])).prop_map(|(f, l)| Op::Ftruncate(f, l)),
    ]
    .boxed()
}

/// Task 0's ops, a fork, then both tasks' ops mixed.
pub fn sequence() -> BoxedStrategy<Vec<Op>> {
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

pub fn open_first() -> BoxedStrategy<Op> {
    (prop::sample::select(vec!["/a", "/a", "/b"]), prop::sample::select(vec![O_RDONLY, O_WRONLY, O_RDWR, O_RDWR]))
        .prop_map(|(f, fl)| open(f, fl))
        .boxed()
}
