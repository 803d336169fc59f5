//! Unmounting a background mount leaves nothing behind, even while files are still open
//! on it (a benchmark that leaked descriptors used to leave dead mounts, "Transport
//! endpoint is not connected", after every run). Needs root and /dev/fuse.

mod common;

use std::io::Write;
use std::os::unix::fs::MetadataExt;

use common::{TempDir, require};
use uvfs_fuse::MountOptions;

/// Whether `dir` is a mount point, from `/proc/self/mountinfo` (field 5).
fn mounted(dir: &std::path::Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = dir.to_string_lossy().replace(' ', "\\040");
    info.lines().any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

#[test]
fn unmount_with_open_files_detaches_the_mount() {
    require(&[]);
    let dir = TempDir::new("busy");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    let h = uvfs_fuse::spawn(&vfs, dir.path(), &MountOptions::default()).expect("mount");
    assert!(mounted(dir.path()));
    let mount_dev = std::fs::metadata(dir.path()).unwrap().dev();
    // A file and a directory held open across the unmount, as a leaking caller would.
    let mut f = std::fs::File::create(dir.path().join("held")).unwrap();
    f.write_all(b"x").unwrap();
    let d = std::fs::File::open(dir.path()).unwrap();
    h.unmount().expect("unmount with open files");
    assert!(!mounted(dir.path()), "the mount is still in /proc/self/mountinfo");
    // The directory is the plain host directory again.
    assert_ne!(std::fs::metadata(dir.path()).unwrap().dev(), mount_dev);
    // The held descriptors are dead, not hung.
    assert!(f.write_all(b"y").and_then(|()| f.sync_all()).is_err());
    drop((f, d));
}

#[test]
fn unmount_of_an_idle_mount_still_works() {
    require(&[]);
    let dir = TempDir::new("idle");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    let h = uvfs_fuse::spawn(&vfs, dir.path(), &MountOptions::default()).expect("mount");
    std::fs::write(dir.path().join("f"), b"data").unwrap();
    h.unmount().expect("unmount");
    assert!(!mounted(dir.path()));
    // memfs lives on in the Vfs.
    let t = vfs.root_task();
    assert_eq!(t.fstatat(uvfs::DirFd::Cwd, b"/f", uvfs::AtFlags::empty()).unwrap().size, 4);
}
