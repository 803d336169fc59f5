//! tarfs (issue 14): a tar archive made by GNU tar from a host tree is, through uvfs,
//! what `tar -x` makes of it on the host: every name, type, mode, owner, size, link
//! count, time, symlink target, device number, byte and `user.` xattr; hard links are
//! one inode; changes are EROFS, also after a remount without `RDONLY`. Needs root and
//! GNU tar (the apt package `tar`).

mod tree;

use std::path::Path;
use std::process::Command;

use tree::{host_tree, uvfs_tree};

use uvfs::fs::tarfs::TarFs;
use uvfs::{AtFlags, DirFd, Errno, MountFlags, OpenFlags, Vfs, VfsConfig};

fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh").arg("-ec").arg(script).current_dir(dir).output().expect("sh");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
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
    assert_eq!(got[b"a/zero".as_slice()].body, b"second\n", "the later entry of a name wins");

    // Hard links are one inode.
    let (x, y) = (t.stat(b"/a/hello").unwrap(), t.stat(b"/a/b/hardlink").unwrap());
    assert_eq!((x.ino, x.nlink), (y.ino, 2));

    // Read-only, whatever is asked.
    assert_eq!(t.open(b"/a/hello", OpenFlags::WRONLY, 0), Err(Errno::EROFS));
    assert_eq!(t.open(b"/new", OpenFlags::CREAT | OpenFlags::WRONLY, 0o644), Err(Errno::EROFS));
    assert_eq!(t.unlinkat(DirFd::Cwd, b"/a/hello", AtFlags::empty()), Err(Errno::EROFS));
    assert_eq!(t.fchmodat(DirFd::Cwd, b"/a/hello", 0o600, AtFlags::empty()), Err(Errno::EROFS));
    assert_eq!(t.mkdir(b"/newdir", 0o755), Err(Errno::EROFS));
    // A remount without `RDONLY` changes the mount's own flag only, as Linux's of a
    // filesystem that is read-only as a whole (`change_mount_ro_state`): still EROFS.
    assert_eq!(t.remount(b"/", MountFlags::empty()), Ok(()));
    assert!(!t.mountinfo()[0].flags.contains(MountFlags::RDONLY));
    assert!(t.mountinfo()[0].fs_read_only);
    assert_eq!(t.open(b"/a/hello", OpenFlags::WRONLY, 0), Err(Errno::EROFS));
    assert_eq!(t.mkdir(b"/newdir", 0o755), Err(Errno::EROFS));
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

/// Generated archives ([`tree::archives`]) read through tarfs as GNU tar extracts them:
/// every path's type, mode, owner, size, links, time (of the directories whose time the
/// extraction does not leave to chance), body and xattrs. Archives GNU tar does not
/// extract cleanly (a hard link to what is not there yet, a file under a file) are left
/// out.
mod generated {
    use super::*;
    use proptest::prelude::*;
    use tree::archives::{Member, case, mask_untimed, reference, same, write_archive};

    fn m(kind: char, name: &'static str, target: &'static str, mode: u32, uid: u32, mtime: u64) -> Member {
        Member { kind, name, target, size: 5, mode, uid, mtime, xattr: None }
    }

    /// What the generated archives found, each once: a symlink's mode is 0777 whatever
    /// its header says; PAX records give an id or a time the header cannot hold; a
    /// directory named again keeps the xattrs it was made with and gains the new ones; a
    /// hard link of a name to what it already names (a directory too) changes nothing; a
    /// member under a symlink of the archive goes where it leads.
    #[test]
    fn what_generated_archives_found() {
        let mut members = vec![
            m('s', "l", "a/f", 0o644, 0, 1_000_000_000),
            m('f', "big", "", 0o644, 3_000_000, 9_000_000_000),
            Member { xattr: Some(("user.k", "v1")), ..m('d', "a", "", 0o755, 0, 1_000_000_000) },
            Member { xattr: Some(("user.j", "second")), ..m('d', "a", "", 0o700, 0, 1_500_000_000) },
            m('d', "a/d", "", 0o755, 0, 1_000_000_000),
            m('h', "a/d", "a/d", 0o755, 0, 1_000_000_000),
        ];
        members.push(m('f', "a/f", "", 0o644, 1000, 1_000_000_000));
        let tmp = tempfile::tempdir().unwrap();
        let tar = tmp.path().join("t.tar");
        assert!(write_archive(&tar, "pax", &members));
        let vfs = Vfs::with_root(VfsConfig::default(), Box::new(TarFs::open(&tar).unwrap())).unwrap();
        let t = vfs.root_task();
        assert_eq!(t.lstat(b"/l").unwrap().mode, 0o120777);
        let big = t.stat(b"/big").unwrap();
        assert_eq!((big.uid, big.gid, big.mtime.sec), (3_000_000, 1_500_000, 9_000_000_000));
        let mut names = vec![0u8; 64];
        let n = t.listxattr(b"/a", &mut names).unwrap();
        assert_eq!(&names[..n], b"user.k\0user.j\0");
        let a = t.stat(b"/a").unwrap();
        assert_eq!((a.mode, a.mtime.sec), (0o40700, 1_500_000_000));
        assert_eq!(t.stat(b"/a/d").unwrap().mode, 0o40755);

        // A member under a symlink the archive made goes where the symlink leads (GNU tar
        // opens the path): `a/c` -> `f`, so `a/c/g` is `a/f/g`; `a/c` stays a symlink.
        let members = [
            m('d', "a/f", "", 0o755, 0, 1_000_000_000),
            m('s', "a/c", "f", 0o777, 0, 1_000_000_000),
            m('f', "a/c/g", "", 0o644, 0, 1_000_000_000),
        ];
        assert!(write_archive(&tar, "gnu", &members));
        let vfs = Vfs::with_root(VfsConfig::default(), Box::new(TarFs::open(&tar).unwrap())).unwrap();
        let t = vfs.root_task();
        assert_eq!(t.lstat(b"/a/c").unwrap().mode, 0o120777);
        assert_eq!(t.lstat(b"/a/f/g").unwrap().size, 5);
    }

    proptest! {
        // Rejected cases (archives tar does not extract cleanly) are bounded, so that a
        // setup that rejects every case fails instead of looping.
        #![proptest_config(ProptestConfig {
            cases: cases(64),
            max_global_rejects: 16 * cases(64),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn generated_archives_read_as_their_extraction((members, format) in case()) {
            let tmp = tempfile::tempdir().unwrap();
            let r = reference(tmp.path(), &members, format);
            prop_assume!(r.is_some());
            let (tar, want) = r.unwrap();
            let vfs = Vfs::with_root(VfsConfig::default(), Box::new(TarFs::open(&tar).unwrap())).unwrap();
            let got = mask_untimed(&members, uvfs_tree(&vfs.root_task()));
            same(&want, &got).map_err(TestCaseError::fail)?;
        }
    }
}

/// PROPTEST_CASES, or `default`: the count of a generated test, longer for a hunt.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
