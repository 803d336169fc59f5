//! The writeback cache (`Levers::WRITEBACK_CACHE`): writes through the mount batched in
//! the kernel's page cache still give the right data, size, mtime and `O_APPEND` placement,
//! seen through the mount and in-process once the file is closed. Needs root and /dev/fuse.

mod common;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};

use common::{Mounted, require};
use uvfs::{AtFlags, DirFd, OpenFlags, Task};
use uvfs_fuse::{Levers, MountOptions};

fn mounted() -> Mounted {
    let m = Mounted::new(MountOptions { levers: Levers::DEFAULT | Levers::WRITEBACK_CACHE, ..MountOptions::default() });
    assert!(m.handle.as_ref().unwrap().levers().contains(Levers::WRITEBACK_CACHE));
    m
}

/// The file's contents as uvfs holds them (in-process, not through the kernel).
fn in_process(t: &Task, path: &[u8]) -> Vec<u8> {
    let fd = t.open(path, OpenFlags::RDONLY, 0).unwrap();
    let mut buf = vec![0; 1 << 16];
    let n = t.read(fd, &mut buf).unwrap();
    t.close(fd).unwrap();
    buf.truncate(n);
    buf
}

fn in_process_stat(t: &Task, path: &[u8]) -> uvfs::Stat {
    t.fstatat(DirFd::Cwd, path, AtFlags::empty()).unwrap()
}

/// Small writes are batched: fewer WRITE requests than `write` calls (a count, proving the
/// cache is on), and the data, size and mtime the kernel showed are what uvfs holds after
/// `close`.
#[test]
fn batched_writes_keep_data_size_and_mtime() {
    require(&[]);
    let m = mounted();
    let t = m.vfs.root_task();
    let path = m.path().join("batched");
    let (_, writes_before) = m.handle.as_ref().unwrap().data_requests();
    let mut f = OpenOptions::new().create(true).write(true).truncate(true).open(&path).unwrap();
    let mut expect = Vec::new();
    for i in 0..200u32 {
        let chunk = format!("line {i}\n");
        f.write_all(chunk.as_bytes()).unwrap();
        expect.extend_from_slice(chunk.as_bytes());
    }
    let seen = std::fs::metadata(&path).unwrap();
    assert_eq!(seen.len(), expect.len() as u64, "the kernel's size counts the cached writes");
    drop(f);
    let (_, writes_after) = m.handle.as_ref().unwrap().data_requests();
    assert!(writes_after - writes_before < 200, "{} WRITEs for 200 writes", writes_after - writes_before);
    assert_eq!(in_process(&t, b"/batched"), expect);
    let st = in_process_stat(&t, b"/batched");
    assert_eq!(st.size, expect.len() as u64);
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(after.len(), st.size);
    // The kernel stamped mtime at the write; the server wrote later and took the kernel's
    // mtime at close: both sides agree, and it is the one the writer saw.
    assert_eq!((after.mtime(), after.mtime_nsec()), (st.mtime.sec, st.mtime.nsec as i64));
    assert_eq!((seen.mtime(), seen.mtime_nsec()), (after.mtime(), after.mtime_nsec()));
}

/// A write-only open of a file whose pages the kernel does not hold: writing part of a
/// page makes the kernel read the rest first, through a handle opened for writing only.
#[test]
fn partial_page_write_through_a_write_only_open() {
    require(&[]);
    let m = mounted();
    let t = m.vfs.root_task();
    let fd = t.open(b"/partial", OpenFlags::CREAT | OpenFlags::WRONLY, 0o200).unwrap();
    t.write(fd, b"hello world").unwrap();
    t.close(fd).unwrap();
    let f = OpenOptions::new().write(true).open(m.path().join("partial")).unwrap();
    f.write_all_at(b"J", 1).unwrap();
    f.write_all_at(b"!", 20).unwrap();
    drop(f);
    let mut expect = b"hJllo world".to_vec();
    expect.resize(20, 0);
    expect.push(b'!');
    assert_eq!(in_process(&t, b"/partial"), expect);
    assert_eq!(std::fs::read(m.path().join("partial")).unwrap(), expect);
}

/// `O_APPEND` opens append at the end the kernel knows, also with two open at once and a
/// file changed in-process before the opens; a truncate through the mount reaches uvfs.
#[test]
fn append_and_truncate() {
    require(&[]);
    let m = mounted();
    let t = m.vfs.root_task();
    let fd = t.open(b"/log", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    t.write(fd, b"abc").unwrap();
    t.close(fd).unwrap();
    let path = m.path().join("log");
    assert_eq!(std::fs::read(&path).unwrap(), b"abc");
    let mut a = OpenOptions::new().append(true).open(&path).unwrap();
    let mut b = OpenOptions::new().append(true).open(&path).unwrap();
    a.write_all(b"1").unwrap();
    b.write_all(b"22").unwrap();
    a.write_all(b"333").unwrap();
    // A positioned write on an O_APPEND file appends too (Linux).
    b.write_all_at(b"4", 0).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 10);
    drop((a, b));
    assert_eq!(in_process(&t, b"/log"), b"abc1223334");
    assert_eq!(std::fs::read(&path).unwrap(), b"abc1223334");
    // Truncate through the mount, then append again.
    OpenOptions::new().write(true).open(&path).unwrap().set_len(2).unwrap();
    assert_eq!(in_process_stat(&t, b"/log").size, 2);
    let mut c = OpenOptions::new().append(true).open(&path).unwrap();
    c.write_all(b"Z").unwrap();
    drop(c);
    assert_eq!(in_process(&t, b"/log"), b"abZ");
    assert_eq!(std::fs::read(&path).unwrap(), b"abZ");
}

/// `touch` (both times `UTIME_NOW`), which the kernel sends with its own clock's mtime, is
/// allowed to a non-owner with write permission and refused (EACCES) without it; an
/// explicit time stays the owner's (EPERM).
#[test]
fn touch_by_a_non_owner() {
    require(&[("setpriv", "util-linux"), ("touch", "coreutils")]);
    let m = mounted();
    let t = m.vfs.root_task();
    for (name, mode) in [(&b"/shared"[..], 0o666), (b"/private", 0o644)] {
        t.close(t.open(name, OpenFlags::CREAT | OpenFlags::WRONLY, 0).unwrap()).unwrap();
        t.fchmodat(DirFd::Cwd, name, mode, AtFlags::empty()).unwrap();
    }
    let as_nobody = |script: &str| {
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "sh", "-c", script])
            .current_dir(m.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string() + &String::from_utf8_lossy(&out.stderr)
    };
    let before = in_process_stat(&t, b"/shared");
    assert_eq!(as_nobody("touch shared && echo ok"), "ok");
    assert_ne!(in_process_stat(&t, b"/shared").atime, before.atime, "touch reached uvfs");
    let refused = as_nobody("touch private");
    assert!(refused.contains("Permission denied"), "{refused}");
    let refused = as_nobody("touch -d 2001-01-01 shared");
    assert!(refused.contains("Operation not permitted"), "{refused}");
}
