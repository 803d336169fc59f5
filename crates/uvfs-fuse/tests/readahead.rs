//! `Levers::READAHEAD` (on by default, root): the mount's readahead window is raised to
//! 1 MiB, so a file read in order through the mount costs one READ per MiB where the
//! kernel's own window (128 KiB) costs eight; what is read is the file's data. Counts of
//! READs, never times.

mod common;

use std::io::Read;
use std::os::unix::fs::MetadataExt;

use common::Mounted;
use uvfs_fuse::{Levers, MountOptions, READAHEAD_KIB};

const MIB: usize = 1 << 20;

/// The mount's readahead window in KiB, from its `backing_dev_info` (named by its device).
fn window_kib(m: &Mounted) -> u32 {
    let dev = std::fs::metadata(m.path()).unwrap().dev();
    let p = format!("/sys/class/bdi/{}:{}/read_ahead_kb", libc::major(dev), libc::minor(dev));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")).trim().parse().unwrap()
}

/// Writes `len` bytes in-process (so the kernel holds none of their pages), reads them
/// through the mount in order in 1 MiB blocks, checks them, and returns the READs that
/// cost.
fn read_in_order(m: &Mounted, len: usize) -> u64 {
    let data: Vec<u8> = (0..len).map(|i| (i / 4096 % 251) as u8 ^ (i % 7) as u8).collect();
    let t = m.vfs.root_task();
    let f = t.openat(uvfs::DirFd::Cwd, b"/big", uvfs::OpenFlags::CREAT | uvfs::OpenFlags::WRONLY, 0o644).unwrap();
    for (k, chunk) in data.chunks(MIB).enumerate() {
        assert_eq!(t.pwrite(f, chunk, (k * MIB) as i64).unwrap(), chunk.len());
    }
    t.close(f).unwrap();
    let h = m.handle.as_ref().unwrap();
    h.sync_invalidations();
    let before = h.data_requests().0;
    let mut file = std::fs::File::open(m.path().join("big")).unwrap();
    let mut buf = vec![0u8; MIB];
    let mut at = 0;
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        assert!(buf[..n] == data[at..at + n], "the bytes at {at}..{} differ", at + n);
        at += n;
    }
    assert_eq!(at, len);
    h.data_requests().0 - before
}

#[test]
fn a_file_read_in_order_costs_one_read_per_mib() {
    common::require(&[]);
    let m = Mounted::new(MountOptions::default());
    assert!(m.handle.as_ref().unwrap().levers().contains(Levers::READAHEAD));
    assert_eq!(window_kib(&m), READAHEAD_KIB);
    let reads = read_in_order(&m, 16 * MIB);
    // 16, and one or two more where a window's end does not fall on a MiB.
    assert!((16..=18).contains(&reads), "{reads} READs for 16 MiB");

    // The lever off: the kernel's window, 128 KiB a READ.
    let m = Mounted::new(MountOptions { levers: Levers::DEFAULT - Levers::READAHEAD, ..MountOptions::default() });
    assert!(!m.handle.as_ref().unwrap().levers().contains(Levers::READAHEAD));
    assert_eq!(window_kib(&m), 128);
    let reads = read_in_order(&m, 16 * MIB);
    assert!(reads >= 128, "{reads} READs for 16 MiB");
}
