//! `Levers::STATAHEAD` (on by default): a directory that a READDIRPLUS hands the kernel
//! for the first time is listed, and its entries looked up, by the server's statahead
//! thread before the kernel lists it. Counted: the names the listings through the mount
//! had to ask the filesystem for (host calls on the caller's path), with statahead and
//! without it; and that statahead stays off where a lookup costs no host call (memfs).

mod common;

use std::path::Path;

use common::TempDir;
use uvfs::fs::hostfs::{HostChanges, HostFs, HostFsOptions};
use uvfs_fuse::{Levers, MountHandle, MountOptions};

/// Files in each of the tree's directories.
const FILES: usize = 20;

/// `top/{a,b,c}`, each with [`FILES`] files and a directory `s` holding three more.
fn tree(host: &Path) {
    for d in ["a", "b", "c"] {
        let dir = host.join("top").join(d);
        std::fs::create_dir_all(dir.join("s")).unwrap();
        for i in 0..FILES {
            std::fs::write(dir.join(format!("f{i}")), b"x").unwrap();
        }
        for i in 0..3 {
            std::fs::write(dir.join("s").join(format!("g{i}")), b"y").unwrap();
        }
    }
}

/// The host directory as `uvfs mount --fs host:DIR --host-unchanged` serves it.
fn host_vfs(host: &Path) -> uvfs::Vfs {
    let opts = HostFsOptions { changes: HostChanges::Never, ..Default::default() };
    let fs = HostFs::with_options(host, opts).unwrap();
    uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).unwrap()
}

/// Lists `dir` through the mount and stats each entry (`ls -l`); the entries' names.
fn ls_l(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        std::fs::symlink_metadata(e.path()).unwrap();
        names.push(e.file_name().into_string().unwrap());
    }
    names.sort();
    names
}

/// Waits until statahead has listed `dirs` directories (it runs in the idle class, so a
/// busy machine may hold it back a while); panics after a minute.
fn wait_listed_ahead(h: &MountHandle, dirs: u64) {
    for _ in 0..6000 {
        if h.statahead_counts().0 >= dirs {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("statahead listed {:?} (directories, entries), expected {dirs} directories", h.statahead_counts());
}

#[test]
fn subdirectories_are_listed_ahead() {
    let host = TempDir::new("sahost");
    tree(host.path());
    let vfs = host_vfs(host.path());
    let mnt = TempDir::new("samnt");
    let (h, _uring) = common::spawn(&vfs, mnt.path(), MountOptions::default());
    assert!(h.levers().contains(Levers::STATAHEAD));
    let top = mnt.path().join("top");

    // The root's listing hands out `top`, new to the kernel: listed ahead.
    ls_l(mnt.path());
    wait_listed_ahead(&h, 1);
    let before = h.listing_fs_lookups();
    assert_eq!(ls_l(&top), ["a", "b", "c"]);
    assert_eq!(h.listing_fs_lookups() - before, 0, "top's names were asked of the host on the listing's path");

    // Its listing handed out a, b and c: listed ahead too, their names cached.
    wait_listed_ahead(&h, 4);
    let before = h.listing_fs_lookups();
    for d in ["a", "b", "c"] {
        assert_eq!(ls_l(&top.join(d)).len(), FILES + 1);
    }
    assert_eq!(h.listing_fs_lookups() - before, 0, "a, b and c's names were asked of the host on the listing's path");
    // And their `s`, one level below.
    wait_listed_ahead(&h, 7);
    let before = h.listing_fs_lookups();
    for d in ["a", "b", "c"] {
        assert_eq!(ls_l(&top.join(d).join("s")), ["g0", "g1", "g2"]);
    }
    assert_eq!(h.listing_fs_lookups() - before, 0);
    // Seven directories, each listed ahead once, and their entries: top's 3, a, b and c's
    // 21 each, the three `s`'s 3 each.
    assert_eq!(h.statahead_counts(), (7, 3 + 3 * (FILES as u64 + 1) + 9));

    // A listing read again hands out no new directory: nothing more is listed ahead.
    std::fs::write(mnt.path().join("top/a/new"), b"z").unwrap();
    ls_l(&top.join("a"));
    ls_l(&top);
    assert_eq!(h.statahead_counts().0, 7);
    h.unmount().unwrap();
}

#[test]
fn without_statahead_each_listing_asks_the_host() {
    let host = TempDir::new("sahost0");
    tree(host.path());
    let vfs = host_vfs(host.path());
    let mnt = TempDir::new("samnt0");
    let opts = MountOptions { levers: Levers::DEFAULT - Levers::STATAHEAD, ..MountOptions::default() };
    let (h, _uring) = common::spawn(&vfs, mnt.path(), opts);
    let top = mnt.path().join("top");
    ls_l(mnt.path());
    let before = h.listing_fs_lookups();
    ls_l(&top);
    assert_eq!(h.listing_fs_lookups() - before, 3);
    let before = h.listing_fs_lookups();
    assert_eq!(ls_l(&top.join("a")).len(), FILES + 1);
    assert_eq!(h.listing_fs_lookups() - before, FILES as u64 + 1);
    assert_eq!(h.statahead_counts(), (0, 0));
    h.unmount().unwrap();
}

#[test]
fn no_statahead_on_memfs() {
    let m = common::Mounted::new(MountOptions::default());
    std::fs::create_dir_all(m.path().join("d/e")).unwrap();
    let h = m.handle.as_ref().unwrap();
    assert!(!h.levers().contains(Levers::STATAHEAD));
    ls_l(m.path());
    ls_l(&m.path().join("d"));
    assert_eq!(h.statahead_counts(), (0, 0));
}
