//! A uvfs tree out as a tar (issue 14): `uvfs_fuse::archive::export_tree` of a memfs tree
//! made in-process, extracted by GNU tar on the host, gives every name, type, mode,
//! owner, size, byte, link target and `user.` xattr back; hard links stay links; what is
//! excluded is left out. Needs root (to extract owners) and GNU tar.

mod common;
#[path = "../../uvfs/tests/tree/mod.rs"]
mod tree;

use std::os::unix::fs::MetadataExt;
use std::process::Command;

use uvfs::{AtFlags, DirFd, Gid, OpenFlags, Uid, Vfs, VfsConfig, XattrFlags};

#[test]
fn a_memfs_tree_exports_as_tar() {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    t.mkdir(b"/src", 0o750).unwrap();
    t.mkdir(b"/src/d", 0o700).unwrap();
    t.mkdir(b"/src/skip", 0o755).unwrap();
    let fd = t.open(b"/src/d/big", OpenFlags::CREAT | OpenFlags::WRONLY, 0o640).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    t.write(fd, &data).unwrap();
    t.close(fd).unwrap();
    let fd = t.open(b"/src/f", OpenFlags::CREAT | OpenFlags::WRONLY, 0o4755).unwrap();
    t.write(fd, b"small\n").unwrap();
    t.close(fd).unwrap();
    t.fchmodat(DirFd::Cwd, b"/src/f", 0o4755, AtFlags::empty()).unwrap();
    t.fchownat(DirFd::Cwd, b"/src/d/big", Some(Uid(1000)), Some(Gid(1001)), AtFlags::empty()).unwrap();
    t.linkat(DirFd::Cwd, b"/src/f", DirFd::Cwd, b"/src/d/hard", AtFlags::empty()).unwrap();
    t.symlinkat(b"../f", DirFd::Cwd, b"/src/d/sym").unwrap();
    t.mknodat(DirFd::Cwd, b"/src/fifo", 0o010600, 0).unwrap();
    t.mknodat(DirFd::Cwd, b"/src/null", 0o020666, uvfs::makedev(1, 3)).unwrap();
    t.setxattr(b"/src/f", b"user.note", b"kept", XattrFlags::empty()).unwrap();
    let fd = t.open(b"/src/skip/x", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    t.close(fd).unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let tar = tmp.path().join("tree.tar");
    uvfs_fuse::archive::export_tree(&t, b"/src", &[b"skip".to_vec()], std::fs::File::create(&tar).unwrap()).unwrap();
    let dst = tmp.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    let st = Command::new("tar")
        .args(["--xattrs", "--xattrs-include=user.*", "--same-owner", "-xpf"])
        .arg(&tar)
        .arg("-C")
        .arg(&dst)
        .status()
        .unwrap();
    assert!(st.success());
    let got = tree::host_tree(&dst);
    let names: Vec<String> = got.keys().map(|k| String::from_utf8_lossy(k).into_owned()).collect();
    assert_eq!(names, ["", "d", "d/big", "d/hard", "d/sym", "f", "fifo", "null"]);
    let e = |p: &str| got[p.as_bytes()].clone();
    let fields = |p: &str| {
        let n = e(p);
        (n.mode, n.uid, n.gid, n.size, n.body, n.xattrs)
    };
    assert_eq!(e("").mode & 0o7777, 0o750);
    assert_eq!(fields("d/big"), (0o100640, 1000, 1001, 300_000, data, vec![]));
    assert_eq!(fields("f"), (0o104755, 0, 0, 6, b"small\n".to_vec(), vec![(b"user.note".to_vec(), b"kept".to_vec())]));
    assert_eq!(e("d/sym").body, b"../f");
    let ino = |p: &str| std::fs::metadata(dst.join(p)).unwrap().ino();
    assert_eq!(ino("f"), ino("d/hard"), "a hard link stays one file");
    assert_eq!(e("fifo").mode, 0o010600);
    assert_eq!(std::fs::symlink_metadata(dst.join("null")).unwrap().rdev(), libc::makedev(1, 3));
}

/// A file of another owner with group permission bits reads through a tar mount: the
/// kernel's permission check asks for its ACL (`FUSE_POSIX_ACL`), and tarfs, which has
/// none, answers ENODATA, not EOPNOTSUPP (which failed the open).
#[test]
fn another_owners_file_reads_through_a_tar_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let tar = tmp.path().join("t.tar");
    let members = [tree::archives::Member {
        kind: 'f',
        name: "a/f",
        target: "",
        size: 5,
        mode: 0o644,
        uid: 1000,
        mtime: 1_000_000_000,
        xattr: None,
    }];
    assert!(tree::archives::write_archive(&tar, "gnu", &members));
    let vfs = Vfs::with_root(VfsConfig::default(), Box::new(uvfs::fs::tarfs::TarFs::open(&tar).unwrap())).unwrap();
    let mnt = common::TempDir::new("tarowner");
    let (handle, _uring) = common::spawn(&vfs, mnt.path(), uvfs_fuse::MountOptions::default());
    let read = std::fs::read(mnt.path().join("a/f"));
    let acl = rustix::fs::getxattr(mnt.path().join("a/f"), "system.posix_acl_access", &mut [0u8; 64][..]);
    handle.unmount().unwrap();
    assert_eq!(read.unwrap(), b"AAAAA");
    assert_eq!(acl.unwrap_err(), rustix::io::Errno::NODATA);
}

/// Generated archives (`tree::archives`) mounted with `--fs tar:FILE` (tarfs through
/// FUSE, the kernel's caches on) show what GNU tar extracts from them: every path's type,
/// mode, owner, size, links, time (where the extraction does not leave it to chance),
/// bytes, link target and `user.` xattrs, as the kernel reports them through the mount.
mod generated {
    use super::*;
    use proptest::prelude::*;
    use tree::archives::{case, mask_untimed, reference, same};

    proptest! {
        // Rejected cases (archives tar does not extract cleanly) are bounded, so that a
        // setup that rejects every case fails instead of looping.
        #![proptest_config(ProptestConfig {
            cases: cases(24),
            max_global_rejects: 16 * cases(24),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn generated_archives_mount_as_their_extraction((members, format) in case()) {
            let tmp = tempfile::tempdir().unwrap();
            let r = reference(tmp.path(), &members, format);
            prop_assume!(r.is_some());
            let (tar, want) = r.unwrap();
            let fs = uvfs::fs::tarfs::TarFs::open(&tar).unwrap();
            let vfs = Vfs::with_root(VfsConfig::default(), Box::new(fs)).unwrap();
            let mnt = common::TempDir::new("tarmnt");
            let (handle, _uring) = common::spawn(&vfs, mnt.path(), uvfs_fuse::MountOptions::default());
            let got = tree::host_tree(mnt.path());
            handle.unmount().unwrap();
            let got = mask_untimed(&members, got);
            same(&want, &got).map_err(TestCaseError::fail)?;
        }
    }
}

/// PROPTEST_CASES, or `default`: the count of a generated test, longer for a hunt.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
