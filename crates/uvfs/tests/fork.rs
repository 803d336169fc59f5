//! A forked child that keeps using a memfs `Vfs` cannot harm its parent's files. The pages
//! of a big write live in a shmem file the child shares with the parent (the heap would
//! have been copied), so the child must neither write into a slot nor give one back: a
//! hole punched by the child's slot allocator would be the parent's data lost.
//! (`fs::memfs::shmem`; one test per process, so that no other test thread is running
//! at the fork.)

use uvfs::{OpenFlags, Vfs, VfsConfig};

const PAGE: usize = 4096;
/// More pages than the shmem file keeps free before it punches holes (2 x 8192), so that
/// a child freeing them all would punch.
const PAGES: usize = 16_384 + 64;

#[test]
fn a_forked_child_cannot_change_or_free_the_parents_pages() {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    let fd = t.open(b"/big", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
    let chunk = vec![b'A'; 256 * PAGE];
    for i in 0..PAGES / 256 {
        assert_eq!(t.pwrite(fd, &chunk, (i * chunk.len()) as i64).unwrap(), chunk.len());
    }
    let tail = vec![b'A'; (PAGES % 256) * PAGE];
    assert_eq!(t.pwrite(fd, &tail, ((PAGES / 256) * chunk.len()) as i64).unwrap(), tail.len());
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(maps.contains("memfd:uvfs-memfs"), "the big write's pages are not in the shmem file");

    // SAFETY: this test is its binary's only one, so no other thread of the harness runs
    // uvfs or holds a lock the child needs; the child ends with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // A write into a page it holds, a new big file, then every page freed.
            assert_eq!(t.pwrite(fd, b"BB", 0).unwrap(), 2);
            let mut buf = [0u8; 4];
            assert_eq!(t.pread(fd, &mut buf, 0).unwrap(), 4);
            assert_eq!(&buf, b"BBAA");
            let other = t.open(b"/other", OpenFlags::CREAT | OpenFlags::RDWR, 0o644).unwrap();
            assert_eq!(t.pwrite(other, &vec![b'C'; 64 * PAGE], 0).unwrap(), 64 * PAGE);
            assert_eq!(t.pread(other, &mut buf, 4096).unwrap(), 4);
            assert_eq!(&buf, b"CCCC");
            t.close(other).unwrap();
            t.unlink(b"/other").unwrap();
            t.ftruncate(fd, 0).unwrap();
            t.close(fd).unwrap();
            t.unlink(b"/big").unwrap();
        }))
        .is_ok();
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child failed: status {status:#x}");

    // The parent's file is whole and unchanged.
    assert_eq!(t.stat(b"/big").unwrap().size, (PAGES * PAGE) as u64);
    assert_eq!(t.stat(b"/other").unwrap_err(), uvfs::Errno::ENOENT);
    let mut back = vec![0u8; chunk.len()];
    for i in 0..PAGES.div_ceil(256) {
        let n = t.pread(fd, &mut back, (i * chunk.len()) as i64).unwrap();
        assert!(n > 0 && back[..n].iter().all(|&b| b == b'A'), "chunk {i} changed in the parent");
    }
    // And it stays writable in place and freeable in the parent.
    assert_eq!(t.pwrite(fd, b"Z", 5).unwrap(), 1);
    let mut b = [0u8; 1];
    t.pread(fd, &mut b, 5).unwrap();
    assert_eq!(&b, b"Z");
    t.close(fd).unwrap();
    t.unlink(b"/big").unwrap();
}
