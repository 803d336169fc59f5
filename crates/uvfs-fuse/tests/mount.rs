//! Mounting and unmounting: through `fusermount3` (the path taken without the privilege to
//! call `mount(2)`, forced here as root), and nothing left behind by an unmount. Needs
//! root, /dev/fuse and fuse3.

mod common;

use common::{TempDir, require};
use uvfs_fuse::MountOptions;

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
