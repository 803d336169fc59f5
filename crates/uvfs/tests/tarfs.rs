//! tarfs (issue 14): a tar archive made by GNU tar from a host tree is, through uvfs,
//! what `tar -x` makes of it on the host: every name, type, mode, owner, size, link
//! count, time, symlink target, device number, byte and `user.` xattr; hard links are
//! one inode; changes are EROFS and the mount cannot be made writable. Needs root and
//! GNU tar (the apt package `tar`).

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use uvfs::fs::tarfs::TarFs;
use uvfs::{AtFlags, DirFd, Errno, MountFlags, OpenFlags, Vfs, VfsConfig};

fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh").arg("-ec").arg(script).current_dir(dir).output().expect("sh");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
}

/// What a tree holds, path by path: (mode, uid, gid, nlink, size of files and links,
/// mtime, rdev, link target or file bytes, user xattrs).
type Tree = BTreeMap<Vec<u8>, (u32, u32, u32, u64, u64, i64, u64, Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>)>;

fn host_tree(root: &Path) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        let rel = p.strip_prefix(root).unwrap().as_os_str().as_bytes().to_vec();
        let ft = m.file_type();
        let body = if ft.is_symlink() {
            std::fs::read_link(&p).unwrap().as_os_str().as_bytes().to_vec()
        } else if ft.is_file() {
            std::fs::read(&p).unwrap()
        } else {
            Vec::new()
        };
        let mut xattrs = Vec::new();
        if !ft.is_symlink() {
            let mut names = vec![0u8; 4096];
            let n = rustix::fs::llistxattr(&p, &mut names).unwrap();
            for name in names[..n].split(|&b| b == 0).filter(|n| n.starts_with(b"user.")) {
                let mut v = vec![0u8; 4096];
                let k = rustix::fs::lgetxattr(&p, name, &mut v).unwrap();
                xattrs.push((name.to_vec(), v[..k].to_vec()));
            }
            xattrs.sort();
        }
        let size = if ft.is_dir() { 0 } else { m.size() };
        let nlink = if ft.is_dir() { 0 } else { m.nlink() };
        out.insert(rel, (m.mode(), m.uid(), m.gid(), nlink, size, m.mtime(), m.rdev(), body, xattrs));
        if ft.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    out
}

fn uvfs_tree(t: &uvfs::Task) -> Tree {
    let mut out = Tree::new();
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(rel) = stack.pop() {
        let path = [b"/".as_slice(), &rel].concat();
        let s = t.lstat(&path).unwrap();
        let ftype = s.file_type().unwrap();
        let body = match ftype {
            uvfs::FileType::Symlink => {
                let mut b = vec![0u8; 4096];
                let n = t.readlink(&path, &mut b).unwrap();
                b[..n].to_vec()
            }
            uvfs::FileType::Regular => {
                let fd = t.open(&path, OpenFlags::RDONLY, 0).unwrap();
                let mut all = Vec::new();
                let mut b = vec![0u8; 7000];
                loop {
                    let n = t.read(fd, &mut b).unwrap();
                    if n == 0 {
                        break;
                    }
                    all.extend_from_slice(&b[..n]);
                }
                t.close(fd).unwrap();
                all
            }
            _ => Vec::new(),
        };
        let mut xattrs = Vec::new();
        if ftype != uvfs::FileType::Symlink {
            let mut names = vec![0u8; 4096];
            let n = t.llistxattr(&path, &mut names).unwrap();
            for name in names[..n].split(|&b| b == 0).filter(|n| n.starts_with(b"user.")) {
                let mut v = vec![0u8; 4096];
                let k = t.lgetxattr(&path, name, &mut v).unwrap();
                xattrs.push((name.to_vec(), v[..k].to_vec()));
            }
            xattrs.sort();
        }
        let dir = ftype == uvfs::FileType::Directory;
        let (size, nlink) = if dir { (0, 0) } else { (s.size, u64::from(s.nlink)) };
        out.insert(rel.clone(), (s.mode, s.uid, s.gid, nlink, size, s.mtime.sec, s.rdev, body, xattrs));
        if dir {
            let fd = t.open(&path, OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
            let names = t.getdents(fd, usize::MAX).unwrap();
            t.close(fd).unwrap();
            let mut seen: Vec<Vec<u8>> = names.iter().map(|e| e.name.clone()).collect();
            seen.sort();
            assert_eq!(&seen[..2], [b".".to_vec(), b"..".to_vec()], "{path:?} lists . and ..");
            for name in &seen[2..] {
                stack.push(if rel.is_empty() { name.clone() } else { [&rel[..], b"/", name].concat() });
            }
        }
    }
    out
}

#[test]
fn an_archive_reads_as_its_extraction() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let long = "n".repeat(150);
    sh(
        &src,
        &format!(
            "mkdir -p a/b/c empty && echo hello > a/hello && : > a/zero \
             && head -c 300000 /dev/urandom > a/b/big && ln a/hello a/b/hardlink \
             && ln -s ../hello a/b/sym && ln -s /nowhere dangling && mkfifo a/fifo \
             && mknod a/null c 1 3 && chmod 4755 a/hello && chmod 1777 a/b/c \
             && chown 1000:1001 a/b/big && echo long > {long} && mkdir -p d/{long}/e \
             && setfattr -n user.one -v 1 a/zero && setfattr -n user.two -v 'x y' a \
             && truncate -s 1M sparse && printf data | dd of=sparse bs=1 seek=500000 conv=notrunc 2>/dev/null \
             && touch -d '2001-02-03 04:05:06' a/hello && touch -d '2011-01-01' a"
        ),
    );
    let tar = tmp.path().join("t.tar");
    // A replaced name: the archive holds `a/zero` twice, the second one wins.
    sh(
        tmp.path(),
        "tar --xattrs --format=posix -S -C src -cf t.tar . && echo replaced > zero.new \
         && mkdir -p r/a && cp -p src/a/zero r/a/zero && echo second > r/a/zero \
         && touch -d '2020-01-01' r/a/zero && tar --xattrs --format=posix -C r -rf t.tar a/zero",
    );
    let dst = tmp.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    sh(tmp.path(), "tar --xattrs --xattrs-include='user.*' --same-owner -xpf t.tar -C dst");

    let vfs = Vfs::with_root(VfsConfig::default(), Box::new(TarFs::open(&tar).unwrap())).unwrap();
    let t = vfs.root_task();
    let (want, got) = (host_tree(&dst), uvfs_tree(&t));
    assert_eq!(want.keys().collect::<Vec<_>>(), got.keys().collect::<Vec<_>>());
    for (k, w) in &want {
        let g = &got[k];
        // The root's own time is the archive's `./` entry; host and uvfs agree on the
        // rest field by field.
        assert_eq!(w, g, "{}", String::from_utf8_lossy(k));
    }
    assert_eq!(got[b"a/zero".as_slice()].7, b"second\n", "the later entry of a name wins");

    // Hard links are one inode.
    let (x, y) = (t.stat(b"/a/hello").unwrap(), t.stat(b"/a/b/hardlink").unwrap());
    assert_eq!((x.ino, x.nlink), (y.ino, 2));

    // Read-only, whatever is asked.
    assert_eq!(t.open(b"/a/hello", OpenFlags::WRONLY, 0), Err(Errno::EROFS));
    assert_eq!(t.open(b"/new", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644), Err(Errno::EROFS));
    assert_eq!(t.unlinkat(DirFd::Cwd, b"/a/hello", AtFlags::empty()), Err(Errno::EROFS));
    assert_eq!(t.fchmodat(DirFd::Cwd, b"/a/hello", 0o600, AtFlags::empty()), Err(Errno::EROFS));
    assert_eq!(t.mkdir(b"/newdir", 0o755), Err(Errno::EROFS));
    assert_eq!(t.remount(b"/", MountFlags::empty()), Err(Errno::EROFS));
    assert!(t.statfs(b"/").unwrap().blocks > 0);
}

#[test]
fn bad_archives_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let junk = tmp.path().join("junk");
    std::fs::write(&junk, vec![7u8; 2000]).unwrap();
    assert!(TarFs::open(&junk).is_err());
    assert_eq!(TarFs::open(tmp.path().join("missing")).err(), Some(Errno::ENOENT));
    // A member that climbs out of the root.
    sh(tmp.path(), "echo x > f && tar -cf up.tar --transform 's,^,../,' f");
    assert_eq!(TarFs::open(tmp.path().join("up.tar")).err(), Some(Errno::EINVAL));
}
