//! Mounting and unmounting: through `fusermount3` (the path taken without the privilege to
//! call `mount(2)`, forced here as root), nothing left behind by an unmount, and io_uring
//! asked for where the kernel has it off. Needs root, /dev/fuse and fuse3.

mod common;

use common::{TempDir, require};
use parking_lot::Mutex;
use uvfs_fuse::{MountOptions, Transport};

/// The tests here take turns: one of them turns `enable_uring` off, which the others'
/// mounts would see.
static SERIAL: Mutex<()> = Mutex::new(());

fn fuse_mounts_on(dir: &std::path::Path) -> usize {
    let canon = dir.canonicalize().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(canon.to_str().unwrap()) && l.contains(" - fuse"))
        .count()
}

#[test]
fn mount_through_fusermount3_serves_and_unmounts() {
    let _turn = SERIAL.lock();
    require(&[("fusermount3", "fuse3")]);
    let dir = TempDir::new("fusermount");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    let (handle, _uring) =
        common::spawn(&vfs, dir.path(), MountOptions { fusermount: true, ..MountOptions::default() });
    assert_eq!(fuse_mounts_on(dir.path()), 1);
    std::fs::write(dir.path().join("f"), b"through fusermount3").unwrap();
    assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"through fusermount3");
    let t = vfs.root_task();
    let mut buf = [0u8; 32];
    let fd = t.open(b"/f", uvfs::OpenFlags::RDONLY, 0).unwrap();
    let n = t.read(fd, &mut buf).unwrap();
    t.close(fd).unwrap();
    assert_eq!(&buf[..n], b"through fusermount3");
    handle.unmount().unwrap();
    assert_eq!(fuse_mounts_on(dir.path()), 0);
}

#[test]
fn unmount_with_a_file_still_open_detaches_and_returns() {
    let _turn = SERIAL.lock();
    require(&[]);
    let dir = TempDir::new("busy");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    let (handle, _uring) = common::spawn(&vfs, dir.path(), MountOptions::default());
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let open = std::fs::File::open(dir.path().join("f")).unwrap();
    handle.unmount().unwrap();
    assert_eq!(fuse_mounts_on(dir.path()), 0);
    drop(open);
}

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Sets `enable_uring` to N while alive; puts the old value back.
struct UringOff(Option<String>);

impl UringOff {
    fn new() -> UringOff {
        let old = std::fs::read_to_string(ENABLE_URING).ok();
        if old.is_some() {
            std::fs::write(ENABLE_URING, "N").expect("set enable_uring (as root)");
        }
        UringOff(old)
    }
}

impl Drop for UringOff {
    fn drop(&mut self) {
        if let Some(old) = self.0.take() {
            let _ = std::fs::write(ENABLE_URING, old.trim());
        }
    }
}

#[test]
fn uring_asked_for_while_off_serves_over_dev_fuse_and_says_why() {
    let _turn = SERIAL.lock();
    require(&[]);
    let _off = UringOff::new();
    let dir = TempDir::new("uringoff");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    let opts = MountOptions { transport: Transport::Uring, ..MountOptions::default() };
    let handle = uvfs_fuse::spawn(&vfs, dir.path(), &opts).expect("a missing speed-up never fails a mount");
    assert_eq!(handle.transport(), Transport::Dev);
    let why = handle.uring_unavailable().expect("a reason");
    assert!(why == "enable_uring is off" || why.contains("no io_uring support"), "unexpected reason: {why}");
    std::fs::write(dir.path().join("f"), b"over /dev/fuse").unwrap();
    assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), b"over /dev/fuse");
    handle.unmount().unwrap();
    assert_eq!(fuse_mounts_on(dir.path()), 0);
}
