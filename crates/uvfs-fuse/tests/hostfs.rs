//! `uvfs mount --fs host:DIR`: a host directory served through hostfs and FUSE. What
//! programs do on the mount reaches the host directory, and what is on the host is seen
//! through the mount, also after it changes behind uvfs's back (hostfs's default
//! revalidation; the kernel's own FUSE caches are off for that part).

mod common;

use std::os::unix::fs::MetadataExt;

use common::TempDir;
use uvfs_fuse::MountOptions;

#[test]
fn host_directory_through_fuse() {
    let host = TempDir::new("hostsrc");
    std::fs::write(host.path().join("a"), b"hello\n").unwrap();
    std::fs::create_dir(host.path().join("d")).unwrap();
    std::os::unix::fs::symlink("a", host.path().join("l")).unwrap();
    let fs = uvfs::fs::hostfs::HostFs::new(host.path()).unwrap();
    let vfs = uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).unwrap();
    let mnt = TempDir::new("hostmnt");
    let (handle, _uring) = common::spawn(&vfs, mnt.path(), MountOptions::default());
    let m = mnt.path();

    assert_eq!(std::fs::read(m.join("l")).unwrap(), b"hello\n");
    assert_eq!(std::fs::read_link(m.join("l")).unwrap().as_os_str(), "a");
    std::fs::write(m.join("d/n"), b"new").unwrap();
    std::fs::rename(m.join("d/n"), m.join("d/m")).unwrap();
    assert_eq!(std::fs::read(host.path().join("d/m")).unwrap(), b"new");
    assert!(!host.path().join("d/n").exists());
    std::fs::hard_link(m.join("a"), m.join("hard")).unwrap();
    assert_eq!(std::fs::metadata(host.path().join("a")).unwrap().nlink(), 2);
    assert_eq!(std::fs::metadata(m.join("a")).unwrap().ino(), std::fs::metadata(m.join("hard")).unwrap().ino());
    std::fs::remove_file(m.join("hard")).unwrap();
    assert!(!host.path().join("hard").exists());
    let names: std::collections::BTreeSet<String> =
        std::fs::read_dir(m).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(names, ["a", "d", "l"].iter().map(|s| s.to_string()).collect());
    assert_eq!(std::fs::read(m.join("missing")).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    handle.unmount().unwrap();
}

#[test]
fn host_changes_seen_through_fuse() {
    let host = TempDir::new("hostchg");
    std::fs::create_dir(host.path().join("d")).unwrap();
    std::fs::write(host.path().join("d/a"), b"one").unwrap();
    let fs = uvfs::fs::hostfs::HostFs::new(host.path()).unwrap();
    let vfs = uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).unwrap();
    let mnt = TempDir::new("hostchgmnt");
    let zero = std::time::Duration::ZERO;
    let opts =
        MountOptions { entry_timeout: zero, attr_timeout: zero, negative_timeout: zero, ..MountOptions::default() };
    let (handle, _uring) = common::spawn(&vfs, mnt.path(), opts);
    let m = mnt.path();

    // A cached miss, then the name created on the host.
    assert_eq!(std::fs::read(m.join("d/b")).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    std::fs::write(host.path().join("d/b"), b"two").unwrap();
    assert_eq!(std::fs::read(m.join("d/b")).unwrap(), b"two");
    // A cached name removed, and one replaced by another file, on the host.
    assert_eq!(std::fs::read(m.join("d/a")).unwrap(), b"one");
    std::fs::rename(host.path().join("d/b"), host.path().join("d/a")).unwrap();
    assert_eq!(std::fs::read(m.join("d/a")).unwrap(), b"two");
    assert_eq!(std::fs::metadata(m.join("d/b")).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    // Attributes changed on the host.
    std::fs::write(host.path().join("d/a"), b"longer").unwrap();
    assert_eq!(std::fs::metadata(m.join("d/a")).unwrap().len(), 6);
    handle.unmount().unwrap();
}
