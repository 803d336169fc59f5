//! A uvfs tree out as a tar (issue 14): `uvfs_fuse::archive::export_tree` of a memfs tree
//! made in-process, extracted by GNU tar on the host, gives every name, type, mode,
//! owner, size, byte, link target and `user.` xattr back; hard links stay links; what is
//! excluded is left out. Needs root (to extract owners) and GNU tar.

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
