//! `Levers::DIRECT_WRITE` (on by default): a file created or opened write-only through the
//! mount is written without the page cache, one WRITE per `write`, and what other opens
//! hold in the page cache stays right. Counts of requests by opcode, never times.

mod common;

use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::process::Command;

use common::{Mounted, count};
use uvfs_fuse::{Levers, MountOptions};

/// Creates `name` write-only and writes two 10 KiB blocks, as tar does (the second starts
/// inside a page); returns the WRITEs and GETXATTRs that cost.
fn tar_like_file(m: &Mounted, name: &str) -> (u64, u64) {
    let h = m.handle.as_ref().unwrap();
    let before = (count(h, "WRITE"), count(h, "GETXATTR"));
    let f = std::fs::OpenOptions::new().write(true).create_new(true).open(m.path().join(name)).unwrap();
    f.write_all_at(&[b'a'; 10240], 0).unwrap();
    f.write_all_at(&[b'b'; 10240], 10240).unwrap();
    drop(f);
    let mut want = vec![b'a'; 10240];
    want.extend_from_slice(&[b'b'; 10240]);
    assert!(std::fs::read(m.path().join(name)).unwrap() == want);
    (count(h, "WRITE") - before.0, count(h, "GETXATTR") - before.1)
}

#[test]
fn a_write_only_file_costs_one_write_per_write() {
    let m = Mounted::new(MountOptions::default());
    assert!(m.handle.as_ref().unwrap().levers().contains(Levers::DIRECT_WRITE));
    let (writes, getxattrs) = tar_like_file(&m, "f");
    // No GETXATTR `security.capability` at the first write: the server clears privileges.
    assert_eq!((writes, getxattrs), (2, 0), "{:?}", m.handle.as_ref().unwrap().requests());

    // The lever off: the second write, which starts inside a page the cache does not hold
    // whole, is split in two, and the first write asks for the file's capability.
    let m = Mounted::new(MountOptions { levers: Levers::DEFAULT - Levers::DIRECT_WRITE, ..MountOptions::default() });
    let (writes, getxattrs) = tar_like_file(&m, "f");
    assert!(writes >= 3 && getxattrs >= 1, "WRITE {writes}, GETXATTR {getxattrs}");
}

/// A direct write drops the pages other opens (and mappings) of the file hold, so they read
/// what was written; uvfs sees it in-process at once.
#[test]
fn a_direct_write_is_seen_by_other_opens_and_mappings() {
    let m = Mounted::new(MountOptions::default());
    let p = m.path().join("f");
    let w = std::fs::OpenOptions::new().write(true).create_new(true).open(&p).unwrap();
    w.write_all_at(&[b'a'; 8192], 0).unwrap();
    let r = std::fs::File::open(&p).unwrap();
    let mut buf = [0u8; 100];
    r.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, [b'a'; 100]);
    // SAFETY: a fresh read-only shared mapping of an open file, unmapped below; nothing
    // else aliases it as a Rust reference.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&r),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    // SAFETY: the mapping is 8192 bytes long and readable.
    assert_eq!(unsafe { *(map as *const u8).add(4096) }, b'a');

    w.write_all_at(&[b'b'; 100], 0).unwrap();
    w.write_all_at(&[b'c'; 100], 4096).unwrap();
    r.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, [b'b'; 100]);
    // SAFETY: as above.
    assert_eq!(unsafe { *(map as *const u8).add(4096) }, b'c');
    // SAFETY: the mapping made above, not used afterwards.
    assert_eq!(unsafe { libc::munmap(map, 8192) }, 0);

    let t = m.vfs.root_task();
    let mut got = [0u8; 1];
    let f = t.openat(uvfs::DirFd::Cwd, b"/f", uvfs::OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(t.pread(f, &mut got, 4096).unwrap(), 1);
    assert_eq!(got, [b'c']);
}

/// A direct write by a caller without `CAP_FSETID` clears setuid and setgid, as on Linux
/// (the kernel leaves it to the server), also for the file's owner.
#[test]
fn a_direct_write_clears_setuid_and_setgid() {
    let m = Mounted::new(MountOptions::default());
    std::fs::set_permissions(m.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=1000", "--regid=1000", "--clear-groups", "/usr/bin/python3", "-c"])
        .arg(
            "import os\n\
             fd = os.open('s', os.O_WRONLY | os.O_CREAT, 0o6755)\n\
             before = os.fstat(fd).st_mode\n\
             os.write(fd, b'x' * 5000)\n\
             print(oct(before), oct(os.fstat(fd).st_mode), oct(os.stat('s').st_mode))",
        )
        .current_dir(m.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0o106755 0o100755 0o100755\n");
    let st = m.vfs.root_task().stat(b"/s").unwrap();
    assert_eq!(st.mode, 0o100755);
    // The file's own descriptor: root keeps the bits it sets (CAP_FSETID).
    let f = std::fs::OpenOptions::new().write(true).mode(0o6755).create_new(true).open(m.path().join("r")).unwrap();
    std::fs::set_permissions(m.path().join("r"), std::fs::Permissions::from_mode(0o6755)).unwrap();
    f.write_all_at(b"x", 0).unwrap();
    assert_eq!(std::fs::metadata(m.path().join("r")).unwrap().permissions().mode(), 0o106755);
}
