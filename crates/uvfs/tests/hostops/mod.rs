//! Changes made on the host directly, the same for the tests that interleave them with
//! uvfs's own (`hostfs_changes.rs`: in-process; `uvfs-fuse`'s `hostfs.rs`: through a
//! mount): the calls, the names they play with, and the calls made on a host path.

#![allow(dead_code)]

use std::os::fd::OwnedFd;
use std::path::Path;

use proptest::prelude::*;

/// One change: by name, or through a held descriptor (slot `.0`).
#[derive(Clone, Debug)]
pub enum Op {
    Write(usize, usize),
    Mkdir(usize),
    Rmdir(usize),
    Unlink(usize),
    Rename(usize, usize),
    Exchange(usize, usize),
    Symlink(usize, usize),
    Link(usize, usize),
    Chmod(usize, u32),
    Chown(usize, u32, u32),
    Utimes(usize, i64, u32),
    Truncate(usize, u64),
    SetXattr(usize, usize),
    RemoveXattr(usize),
    FdWrite(usize, usize),
    FdTruncate(usize, u64),
    FdChmod(usize, u32),
}

/// The names the sequences play with (parents before children).
pub const NAMES: [&str; 7] = ["a", "b", "a/x", "a/y", "b/x", "a/x/z", "c"];
/// Descriptors held across steps.
pub const SLOTS: usize = 2;
/// The extended attribute the sequences set and read.
pub const XNAME: &str = "user.k";

pub fn op() -> impl Strategy<Value = Op> {
    let n = || 0..NAMES.len();
    let mode = || prop_oneof![Just(0o755u32), Just(0o700), Just(0o644), Just(0o000), Just(0o4755), Just(0o2711)];
    prop_oneof![
        (n(), 0..5usize).prop_map(|(a, l)| Op::Write(a, l)),
        n().prop_map(Op::Mkdir),
        n().prop_map(Op::Rmdir),
        n().prop_map(Op::Unlink),
        (n(), n()).prop_map(|(a, b)| Op::Rename(a, b)),
        (n(), n()).prop_map(|(a, b)| Op::Exchange(a, b)),
        (n(), n()).prop_map(|(a, b)| Op::Symlink(a, b)),
        (n(), n()).prop_map(|(a, b)| Op::Link(a, b)),
        (n(), mode()).prop_map(|(a, m)| Op::Chmod(a, m)),
        (n(), 0..3u32, 0..3u32).prop_map(|(a, u, g)| Op::Chown(a, u * 1000, g * 1000)),
        (n(), 0..3i64, 0..3u32).prop_map(|(a, s, ns)| Op::Utimes(a, 1_000_000_000 + s, ns * 333_333_333)),
        (n(), 0..9u64).prop_map(|(a, l)| Op::Truncate(a, l)),
        (n(), 0..4usize).prop_map(|(a, l)| Op::SetXattr(a, l)),
        n().prop_map(Op::RemoveXattr),
        (0..SLOTS, 0..6usize).prop_map(|(s, l)| Op::FdWrite(s, l)),
        (0..SLOTS, 0..9u64).prop_map(|(s, l)| Op::FdTruncate(s, l)),
        (0..SLOTS, mode()).prop_map(|(s, m)| Op::FdChmod(s, m)),
    ]
}

/// `op` under `root` (the host directory or the mount), through `fd` for the
/// descriptor ops; the result does not matter (the views after it are compared).
pub fn apply(root: &Path, fd: Option<&OwnedFd>, op: &Op) {
    use rustix::fs::{AtFlags, CWD, Timespec, Timestamps};
    let p = |i: usize| root.join(NAMES[i]);
    let _: std::io::Result<()> = match op {
        Op::Write(a, l) => std::fs::write(p(*a), vec![b'w'; *l]),
        Op::Mkdir(a) => std::fs::create_dir(p(*a)),
        Op::Rmdir(a) => std::fs::remove_dir(p(*a)),
        Op::Unlink(a) => std::fs::remove_file(p(*a)),
        Op::Rename(a, b) => std::fs::rename(p(*a), p(*b)),
        Op::Exchange(a, b) => {
            rustix::fs::renameat_with(CWD, p(*a), CWD, p(*b), rustix::fs::RenameFlags::EXCHANGE).map_err(Into::into)
        }
        Op::Symlink(a, b) => std::os::unix::fs::symlink(NAMES[*a], p(*b)),
        Op::Link(a, b) => std::fs::hard_link(p(*a), p(*b)),
        Op::Chmod(a, m) => rustix::fs::chmod(p(*a), rustix::fs::Mode::from_raw_mode(*m)).map_err(Into::into),
        Op::Chown(a, u, g) => rustix::fs::chownat(
            CWD,
            p(*a),
            Some(rustix::fs::Uid::from_raw(*u)),
            Some(rustix::fs::Gid::from_raw(*g)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(Into::into),
        Op::Utimes(a, s, ns) => {
            let t = Timespec { tv_sec: *s, tv_nsec: *ns as _ };
            let ts = Timestamps { last_access: t, last_modification: t };
            rustix::fs::utimensat(CWD, p(*a), &ts, AtFlags::SYMLINK_NOFOLLOW).map_err(Into::into)
        }
        Op::Truncate(a, l) => std::fs::OpenOptions::new().write(true).open(p(*a)).and_then(|f| f.set_len(*l)),
        Op::SetXattr(a, l) => {
            rustix::fs::lsetxattr(p(*a), XNAME, &b"vvv"[..*l], rustix::fs::XattrFlags::empty()).map_err(Into::into)
        }
        Op::RemoveXattr(a) => rustix::fs::lremovexattr(p(*a), XNAME).map_err(Into::into),
        Op::FdWrite(_, l) => {
            fd.map_or(Ok(()), |fd| rustix::io::pwrite(fd, &vec![b'f'; *l], 0).map(|_| ()).map_err(Into::into))
        }
        Op::FdTruncate(_, l) => fd.map_or(Ok(()), |fd| rustix::fs::ftruncate(fd, *l).map_err(Into::into)),
        Op::FdChmod(_, m) => {
            fd.map_or(Ok(()), |fd| rustix::fs::fchmod(fd, rustix::fs::Mode::from_raw_mode(*m)).map_err(Into::into))
        }
    };
}

pub fn slot_of(op: &Op) -> Option<usize> {
    match op {
        Op::FdWrite(s, _) | Op::FdTruncate(s, _) | Op::FdChmod(s, _) => Some(*s),
        _ => None,
    }
}

/// The sorted names of directory `rel` under `root` (`None` if it is not a directory:
/// as an open with `O_NOFOLLOW | O_DIRECTORY`, a symlink is not listed).
pub fn host_list(root: &Path, rel: &str) -> Option<Vec<Vec<u8>>> {
    if !std::fs::symlink_metadata(root.join(rel)).ok()?.is_dir() {
        return None;
    }
    let mut v: Vec<Vec<u8>> =
        std::fs::read_dir(root.join(rel)).ok()?.map(|e| e.unwrap().file_name().into_encoded_bytes()).collect();
    v.sort();
    Some(v)
}
