//! `Levers::NO_OPEN` (on by default on a memfs mount): opening and closing an existing
//! file costs the server no round trip (the kernel stops sending OPEN, FLUSH and RELEASE
//! after the first ENOSYS), and everything done through such a descriptor stays right:
//! appends from two descriptors, `O_TRUNC`, I/O after an unlink, `fsync`, `fallocate`,
//! `SEEK_DATA`/`SEEK_HOLE`, `copy_file_range`, writes through a shared mapping, and what
//! uvfs sees in-process. Counts of
//! requests by opcode, never times.

mod common;

use common::{Mounted, count, sh};
use uvfs::OpenFlags;
use uvfs_fuse::{Levers, MountOptions};

/// Reads `/f` 100 times through the mount; returns the OPENs, FLUSHes and READs it cost.
fn hundred_reads(m: &Mounted) -> (u64, u64, u64) {
    let h = m.handle.as_ref().unwrap();
    let p = m.path().join("f");
    std::fs::write(&p, b"data").unwrap();
    let before = (count(h, "OPEN"), count(h, "FLUSH"), count(h, "READ"));
    for _ in 0..100 {
        assert_eq!(std::fs::read(&p).unwrap(), b"data");
    }
    (count(h, "OPEN") - before.0, count(h, "FLUSH") - before.1, count(h, "READ") - before.2)
}

#[test]
fn opens_and_closes_of_existing_files_cost_no_round_trip() {
    let m = Mounted::new(MountOptions::default());
    assert!(m.handle.as_ref().unwrap().levers().contains(Levers::NO_OPEN));
    let (opens, flushes, reads) = hundred_reads(&m);
    // At most the one OPEN and FLUSH whose ENOSYS turned them off; the first read fills
    // the page cache, which the next opens keep.
    assert!(opens <= 1 && flushes <= 1 && reads <= 1, "OPEN {opens}, FLUSH {flushes}, READ {reads}");
    let h = m.handle.as_ref().unwrap();
    // RELEASE comes only for the file's CREATE (sent without waiting, so maybe not yet).
    assert!(count(h, "RELEASE") <= count(h, "CREATE"), "{:?}", h.requests());

    // The lever off: each open is an OPEN round trip; a close is a FLUSH only where the
    // server keeps the locks (`Levers::SERVER_LOCKS`), else the first ENOSYS ends them.
    let m = Mounted::new(MountOptions { levers: Levers::DEFAULT - Levers::NO_OPEN, ..MountOptions::default() });
    assert!(!m.handle.as_ref().unwrap().levers().contains(Levers::NO_OPEN));
    let (opens, flushes, _) = hundred_reads(&m);
    assert!(opens >= 100 && flushes <= 1, "OPEN {opens}, FLUSH {flushes}");
    let levers = (Levers::DEFAULT - Levers::NO_OPEN) | Levers::SERVER_LOCKS;
    let m = Mounted::new(MountOptions { levers, ..MountOptions::default() });
    let (opens, flushes, _) = hundred_reads(&m);
    assert!(opens >= 100 && flushes >= 100, "OPEN {opens}, FLUSH {flushes}");
}

/// Only with kernel permission checks: with `Permissions::Uvfs` nobody would check an
/// open the server does not see.
#[test]
fn no_open_needs_kernel_permissions() {
    let m = Mounted::new(MountOptions { permissions: uvfs_fuse::Permissions::Uvfs, ..MountOptions::default() });
    assert!(!m.handle.as_ref().unwrap().levers().contains(Levers::NO_OPEN));
    let (opens, _, _) = hundred_reads(&m);
    assert!(opens >= 100, "OPEN {opens}");
}

const PROGRAM: &str = r#"
import os
def put(name, data):
    with open(name, "wb") as f: f.write(data)
def get(name):
    with open(name, "rb") as f: return f.read()
# Appends from two descriptors land at the end, in order.
put("a", b"0")
x = os.open("a", os.O_WRONLY | os.O_APPEND); y = os.open("a", os.O_WRONLY | os.O_APPEND)
for i in range(1, 6):
    os.write(x if i % 2 else y, str(i).encode())
os.close(x); os.close(y)
print("append", get("a").decode())
# O_TRUNC on an existing file.
put("t", b"a long first version")
put("t", b"short")
print("trunc", get("t").decode(), os.stat("t").st_size)
# I/O through a descriptor after its name is gone.
fd = os.open("u", os.O_RDWR | os.O_CREAT, 0o644); os.close(fd)
fd = os.open("u", os.O_RDWR)
os.unlink("u")
os.pwrite(fd, b"still here", 0); os.fsync(fd)
print("unlinked", os.pread(fd, 100, 0).decode(), os.fstat(fd).st_nlink)
os.close(fd)
# fallocate, holes, copy_file_range through an existing file's descriptors (as on
# tmpfs, allocated but unwritten space is a hole to SEEK_DATA).
put("s", b"")
fd = os.open("s", os.O_RDWR)
os.posix_fallocate(fd, 0, 8192)
os.pwrite(fd, b"x" * 4096, 1 << 20)
print("size", os.fstat(fd).st_size, "data", os.lseek(fd, 0, os.SEEK_DATA), "hole", os.lseek(fd, 8192, os.SEEK_HOLE))
os.close(fd)
put("src", b"0123456789" * 1000)
put("dst", b"")
i = os.open("src", os.O_RDONLY); o = os.open("dst", os.O_WRONLY)
n = os.copy_file_range(i, o, 5000, 10, 0)
os.close(i); os.close(o)
print("copied", n, get("dst")[:12].decode(), os.stat("dst").st_size)
# Pages written through a shared mapping reach the server (written back on handle 0).
import mmap
put("m", b"a" * 8192)
fd = os.open("m", os.O_RDWR)
mm = mmap.mmap(fd, 8192)
mm[0:5] = b"hello"; mm[4096:4101] = b"world"
mm.flush(); mm.close(); os.close(fd)
print("mapped", get("m")[:5].decode(), get("m")[4096:4101].decode())
# A descriptor opened read-only cannot write (the kernel's check).
fd = os.open("a", os.O_RDONLY)
try:
    os.write(fd, b"no")
    print("write", "ok")
except OSError as e:
    print("write", e.errno)
os.close(fd)
"#;

#[test]
fn what_unopened_files_do_stays_right() {
    let m = Mounted::new(MountOptions::default());
    assert!(m.handle.as_ref().unwrap().levers().contains(Levers::NO_OPEN));
    let out = sh(m.path(), &format!("python3 -c '{}'", PROGRAM.replace('\'', "\"")));
    assert_eq!(
        out,
        "append 012345\n\
         trunc short 5\n\
         unlinked still here 0\n\
         size 1052672 data 1048576 hole 8192\n\
         copied 5000 012345678901 5000\n\
         mapped hello world\n\
         write 9\n",
    );
    // uvfs sees what the mount's processes wrote.
    let t = m.vfs.root_task();
    let read = |p: &[u8]| {
        let fd = t.open(p, OpenFlags::RDONLY, 0).unwrap();
        let mut buf = vec![0u8; 64];
        let n = t.read(fd, &mut buf).unwrap();
        t.close(fd).unwrap();
        buf.truncate(n);
        buf
    };
    assert_eq!(read(b"/a"), b"012345");
    assert_eq!(read(b"/t"), b"short");
    assert_eq!(t.stat(b"/s").unwrap().size, 1052672);
    assert_eq!(t.stat(b"/u"), Err(uvfs::Errno::ENOENT));
    let mut page = vec![0u8; 8192];
    let fd = t.open(b"/m", OpenFlags::RDONLY, 0).unwrap();
    assert_eq!(t.read(fd, &mut page).unwrap(), 8192);
    t.close(fd).unwrap();
    assert_eq!((&page[..5], &page[4096..4101]), (&b"hello"[..], &b"world"[..]), "mapped writes in-process");
    let h = m.handle.as_ref().unwrap();
    assert!(count(h, "OPEN") <= 1, "{:?}", h.requests());
}

/// What the lever changes (documented with it): the kernel enforces no file flag of a FUSE
/// inode, and the server sees no open, so an open for writing of an immutable or
/// append-only file succeeds and its first write fails with EPERM, changing nothing; an
/// `O_TRUNC` open still fails at `open` (the kernel truncates through SETATTR, which uvfs
/// refuses).
#[test]
fn flagged_files_refuse_the_write_instead_of_the_open() {
    let m = Mounted::new(MountOptions::default());
    let script = r#"
        t() { s=0; "$@" 2>&1 || s=$?; echo "[$s]"; }
        echo hello > f; chattr +i f
        t python3 -c 'import os; fd = os.open("f", os.O_WRONLY | os.O_APPEND); print("opened"); os.write(fd, b"x")'
        t sh -c 'echo x > f'
        chattr -i f; chattr +a f
        t python3 -c 'import os; fd = os.open("f", os.O_WRONLY); print("opened"); os.write(fd, b"x")'
        t python3 -c 'import os; fd = os.open("f", os.O_WRONLY | os.O_APPEND); os.write(fd, b"appended\n")'
        chattr -a f; cat f
    "#;
    let out = sh(m.path(), script);
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with("Traceback") && !l.starts_with("  ")).collect();
    assert_eq!(
        lines,
        [
            "opened",
            "PermissionError: [Errno 1] Operation not permitted",
            "[1]",
            "sh: 1: cannot create f: Operation not permitted",
            "[2]",
            "opened",
            "PermissionError: [Errno 1] Operation not permitted",
            "[1]",
            "[0]",
            "hello",
            "appended",
        ],
        "{out}"
    );
}

/// What an in-process watch sees of a write through the mount to an existing file (the
/// lever's documented trade-off): the server's open for the request, the MODIFY, and its
/// close-write, so a watcher waiting for `IN_CLOSE_WRITE` still learns the data is there.
#[test]
fn in_process_watches_see_each_request_as_an_open_and_a_close() {
    use uvfs::{EventMask, InotifyFlags};
    let m = Mounted::new(MountOptions::default());
    let t = m.vfs.root_task();
    let fd = t.open(b"/w", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    t.close(fd).unwrap();
    let ino = t.inotify_init1(InotifyFlags::NONBLOCK).unwrap();
    let mask = EventMask::OPEN | EventMask::MODIFY | EventMask::CLOSE_WRITE | EventMask::CLOSE_NOWRITE;
    t.inotify_add_watch(&ino, b"/w", mask).unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(m.path().join("w")).unwrap();
    std::io::Write::write_all(&mut f, b"data").unwrap();
    drop(f);
    let mut seen = EventMask::empty();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !seen.contains(EventMask::CLOSE_WRITE) && std::time::Instant::now() < deadline {
        for e in ino.read_events(16, Some(std::time::Duration::from_millis(50))).unwrap_or_default() {
            seen |= e.mask;
        }
    }
    assert!(seen.contains(EventMask::OPEN | EventMask::MODIFY | EventMask::CLOSE_WRITE), "{seen:?}");
}
