//! A tree as the tests compare it, read from the host or through a uvfs task: every path
//! with its attributes, bytes (or link target) and `user.` xattrs. Shared by tarfs.rs,
//! overlay.rs and the FUSE crate's archive.rs.

#![allow(dead_code)]

pub mod archives;

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// One path. Directories have size 0 and link count 0 (each filesystem counts them its
/// way).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub size: u64,
    pub mtime: i64,
    pub rdev: u64,
    /// A file's bytes, or a symlink's target.
    pub body: Vec<u8>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Path (relative, "" the root) -> node.
pub type Tree = BTreeMap<Vec<u8>, Node>;

/// `tree` without link counts, times and device numbers (what layers report their way).
pub fn contents_only(tree: &Tree) -> Tree {
    tree.iter().map(|(k, n)| (k.clone(), Node { nlink: 0, mtime: 0, rdev: 0, ..n.clone() })).collect()
}

fn user_xattrs(names: &[u8], get: impl Fn(&[u8]) -> Vec<u8>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v: Vec<_> =
        names.split(|&b| b == 0).filter(|n| n.starts_with(b"user.")).map(|n| (n.to_vec(), get(n))).collect();
    v.sort();
    v
}

pub fn host_tree(root: &Path) -> Tree {
    host_tree_of(root, false)
}

/// As [`host_tree`], leaving out names a listing shows and a lookup does not find: what
/// overlayfs shows of a whiteout in a directory of one layer, which it lists as it is.
pub fn host_tree_found(root: &Path) -> Tree {
    host_tree_of(root, true)
}

fn host_tree_of(root: &Path, found_only: bool) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = match std::fs::symlink_metadata(&p) {
            Err(e) if found_only && e.raw_os_error() == Some(libc::ENOENT) => continue,
            m => m.unwrap(),
        };
        let rel = p.strip_prefix(root).unwrap().as_os_str().as_bytes().to_vec();
        let ft = m.file_type();
        let body = if ft.is_symlink() {
            std::fs::read_link(&p).unwrap().as_os_str().as_bytes().to_vec()
        } else if ft.is_file() {
            std::fs::read(&p).unwrap()
        } else {
            Vec::new()
        };
        let xattrs = if ft.is_symlink() {
            Vec::new()
        } else {
            let mut names = vec![0u8; 4096];
            let n = rustix::fs::llistxattr(&p, &mut names).unwrap();
            user_xattrs(&names[..n], |name| {
                let mut v = vec![0u8; 4096];
                let k = rustix::fs::lgetxattr(&p, name, &mut v).unwrap();
                v[..k].to_vec()
            })
        };
        let dir = ft.is_dir();
        let (size, nlink) = if dir { (0, 0) } else { (m.size(), m.nlink()) };
        out.insert(
            rel,
            Node {
                mode: m.mode(),
                uid: m.uid(),
                gid: m.gid(),
                nlink,
                size,
                mtime: m.mtime(),
                rdev: m.rdev(),
                body,
                xattrs,
            },
        );
        if dir {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    out
}

/// The tree below `/` as `t` sees it (every directory must list "." and "..").
pub fn uvfs_tree(t: &uvfs::Task) -> Tree {
    use uvfs::{FileType, OpenFlags};
    let mut out = Tree::new();
    let mut stack: Vec<Vec<u8>> = vec![Vec::new()];
    while let Some(rel) = stack.pop() {
        let path = [b"/".as_slice(), &rel].concat();
        let s = t.lstat(&path).unwrap();
        let ftype = s.file_type().unwrap();
        let body = match ftype {
            FileType::Symlink => {
                let mut b = vec![0u8; 4096];
                let n = t.readlink(&path, &mut b).unwrap();
                b[..n].to_vec()
            }
            FileType::Regular => {
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
        let xattrs = if ftype == FileType::Symlink {
            Vec::new()
        } else {
            let mut names = vec![0u8; 4096];
            let n = t.llistxattr(&path, &mut names).unwrap();
            user_xattrs(&names[..n], |name| {
                let mut v = vec![0u8; 4096];
                let k = t.lgetxattr(&path, name, &mut v).unwrap();
                v[..k].to_vec()
            })
        };
        let dir = ftype == FileType::Directory;
        let (size, nlink) = if dir { (0, 0) } else { (s.size, u64::from(s.nlink)) };
        let node =
            Node { mode: s.mode, uid: s.uid, gid: s.gid, nlink, size, mtime: s.mtime.sec, rdev: s.rdev, body, xattrs };
        out.insert(rel.clone(), node);
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

/// Fails naming each path whose node differs (bytes shown by length).
#[track_caller]
pub fn assert_same_tree(got: &Tree, want: &Tree, what: &str) {
    let show = |n: Option<&Node>| {
        n.map(|n| format!("{:?}", Node { body: Vec::new(), ..n.clone() }) + &format!(" {} bytes", n.body.len()))
    };
    let mut diffs = Vec::new();
    for k in want.keys().chain(got.keys()).collect::<std::collections::BTreeSet<_>>() {
        if want.get(k) != got.get(k) {
            diffs.push(format!(
                "{}: want {:?}, got {:?}",
                String::from_utf8_lossy(k),
                show(want.get(k)),
                show(got.get(k))
            ));
        }
    }
    assert!(diffs.is_empty(), "{what}:\n{}", diffs.join("\n"));
}
