//! The overlay's changes as an OCI layer (issue 14): what a session changed over a lower
//! directory, exported with `OverlayFs::export_changes`, reproduces the session's tree
//! both ways a layer is used: mounted as a tarfs layer over the same lower directory in a
//! new overlay, and applied on the host to a copy of the lower directory (whiteouts
//! removed first, then `tar -x`). The semantics against the kernel's overlayfs are in
//! `differential_overlay.rs`.

mod scratch;
mod tree;

use std::path::Path;
use std::process::Command;

use tree::{assert_same_tree, contents_only, host_tree};

use uvfs::fs::hostfs::HostFs;
use uvfs::fs::overlay::OverlayFs;
use uvfs::fs::tarfs::TarFs;
use uvfs::{AtFlags, DirFd, OpenFlags, RenameFlags, Task, Vfs, VfsConfig, XattrFlags};

/// The tree `t` sees, as these tests compare it: contents, modes, owners, xattrs; not
/// link counts, times or devices, which the layers report their way.
fn uvfs_tree(t: &Task) -> tree::Tree {
    contents_only(&tree::uvfs_tree(t))
}

fn sh(dir: &Path, script: &str) -> String {
    let out = Command::new("sh").arg("-ec").arg(script).current_dir(dir).output().expect("sh");
    assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn exported_changes_reproduce_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = tmp.path().join("lower");
    std::fs::create_dir(&lower).unwrap();
    sh(
        &lower,
        "mkdir -p a/b gone opaque/inner && echo one > a/f && echo two > a/b/g && echo x > gone/h \
         && echo old > opaque/inner/o && echo keep > opaque/k && ln -s a/f s && chmod 1777 . \
         && head -c 20000 /dev/urandom > big",
    );
    let ovl = |layers: Vec<Box<dyn uvfs::fs::FileSystem>>| {
        Vfs::with_root(VfsConfig::default(), Box::new(OverlayFs::new(layers).unwrap())).unwrap()
    };
    let a = ovl(vec![Box::new(HostFs::new(&lower).unwrap())]);
    let t = a.root_task();
    // A session's changes: data, modes, owners, removals, an opaque directory, renames,
    // links, xattrs, new objects of every kind.
    let fd = t.open(b"/a/f", OpenFlags::WRONLY | OpenFlags::APPEND, 0).unwrap();
    t.write(fd, b"appended\n").unwrap();
    t.close(fd).unwrap();
    let fd = t.open(b"/big", OpenFlags::WRONLY, 0).unwrap();
    t.pwrite(fd, b"middle", 9000).unwrap();
    t.close(fd).unwrap();
    t.fchmodat(DirFd::Cwd, b"/a/b/g", 0o600, AtFlags::empty()).unwrap();
    t.fchownat(DirFd::Cwd, b"/s", Some(uvfs::Uid(7)), Some(uvfs::Gid(8)), AtFlags::SYMLINK_NOFOLLOW).unwrap();
    t.unlinkat(DirFd::Cwd, b"/gone/h", AtFlags::empty()).unwrap();
    t.unlinkat(DirFd::Cwd, b"/gone", AtFlags::REMOVEDIR).unwrap();
    t.unlinkat(DirFd::Cwd, b"/opaque/inner/o", AtFlags::empty()).unwrap();
    t.unlinkat(DirFd::Cwd, b"/opaque/inner", AtFlags::REMOVEDIR).unwrap();
    t.unlinkat(DirFd::Cwd, b"/opaque/k", AtFlags::empty()).unwrap();
    t.unlinkat(DirFd::Cwd, b"/opaque", AtFlags::REMOVEDIR).unwrap();
    t.mkdir(b"/opaque", 0o700).unwrap();
    t.mkdir(b"/new", 0o755).unwrap();
    let fd = t.open(b"/new/file", OpenFlags::CREAT | OpenFlags::WRONLY, 0o640).unwrap();
    t.write(fd, b"fresh").unwrap();
    t.close(fd).unwrap();
    t.linkat(DirFd::Cwd, b"/new/file", DirFd::Cwd, b"/new/hard", AtFlags::empty()).unwrap();
    t.symlinkat(b"../a", DirFd::Cwd, b"/new/up").unwrap();
    t.mknodat(DirFd::Cwd, b"/new/fifo", 0o010644, 0).unwrap();
    t.setxattr(b"/new/file", b"user.note", b"hello", XattrFlags::empty()).unwrap();
    t.renameat2(DirFd::Cwd, b"/a/b/g", DirFd::Cwd, b"/new/g", RenameFlags::empty()).unwrap();
    let want = uvfs_tree(&t);
    assert!(want.contains_key(b"opaque".as_slice()) && !want.contains_key(b"gone".as_slice()));

    let root = t.openat_file(DirFd::Cwd, b"/", OpenFlags::PATH, 0).unwrap();
    let layer = tmp.path().join("layer.tar");
    OverlayFs::export_changes(root.inode(), std::fs::File::create(&layer).unwrap()).unwrap();

    // Mounted as a layer over the same lower directory.
    let b = ovl(vec![Box::new(TarFs::open_layer(&layer).unwrap()), Box::new(HostFs::new(&lower).unwrap())]);
    assert_same_tree(&uvfs_tree(&b.root_task()), &want, "the layer over the lower directory");

    // Applied on the host to a copy of the lower directory, as an image tool applies a
    // layer: what the whiteouts name goes, then the rest is extracted.
    let copy = tmp.path().join("copy");
    sh(tmp.path(), "cp -a lower copy");
    let listing = sh(tmp.path(), "tar -tf layer.tar");
    for member in listing.lines() {
        let (dir, name) = member.rsplit_once('/').unwrap_or(("", member));
        if name == ".wh..wh..opq" {
            sh(&copy.join(dir), "find . -mindepth 1 -maxdepth 1 -exec rm -rf {} +");
        } else if let Some(gone) = name.strip_prefix(".wh.") {
            std::fs::remove_dir_all(copy.join(dir).join(gone))
                .or_else(|_| std::fs::remove_file(copy.join(dir).join(gone)))
                .unwrap();
        }
    }
    sh(tmp.path(), "tar --xattrs --xattrs-include='user.*' --same-owner -xpf layer.tar -C copy --exclude='.wh.*'");
    assert_same_tree(&contents_only(&host_tree(&copy)), &want, "the layer applied on the host");
}

/// Snapshots (issue 14): a snapshot of an overlay, mounted as the lower layer of a new
/// overlay, shows the tree as it was; the fork and the original then change apart. The
/// snapshot copies no file data: its pages are shared until one side writes.
#[test]
fn a_snapshot_forks_a_sandbox() {
    let tmp = tempfile::tempdir().unwrap();
    let lower = tmp.path().join("lower");
    std::fs::create_dir(&lower).unwrap();
    sh(&lower, "mkdir -p a/b && echo one > a/f && echo gone > g && head -c 3000000 /dev/urandom > big");
    let vfs = |fs: OverlayFs| Vfs::with_root(VfsConfig::default(), Box::new(fs)).unwrap();
    let a = vfs(OverlayFs::new(vec![Box::new(HostFs::new(&lower).unwrap())]).unwrap());
    let t = a.root_task();
    let fd = t.open(b"/big", OpenFlags::WRONLY, 0).unwrap();
    t.pwrite(fd, &vec![9u8; 2 << 20], 0).unwrap();
    t.close(fd).unwrap();
    t.unlinkat(DirFd::Cwd, b"/g", AtFlags::empty()).unwrap();
    t.mkdir(b"/n", 0o700).unwrap();
    t.symlinkat(b"../a/f", DirFd::Cwd, b"/n/s").unwrap();
    let fd = t.open(b"/n/h", OpenFlags::CREAT | OpenFlags::WRONLY, 0o600).unwrap();
    t.write(fd, b"hard").unwrap();
    t.close(fd).unwrap();
    t.linkat(DirFd::Cwd, b"/n/h", DirFd::Cwd, b"/a/h2", AtFlags::empty()).unwrap();
    t.setxattr(b"/a/f", b"user.k", b"v", XattrFlags::empty()).unwrap();
    let want = uvfs_tree(&t);

    let root = t.openat_file(DirFd::Cwd, b"/", OpenFlags::PATH, 0).unwrap();
    let snap = OverlayFs::snapshot(root.inode()).unwrap();
    let b = vfs(OverlayFs::new(vec![Box::new(snap)]).unwrap());
    let u = b.root_task();
    assert_same_tree(&uvfs_tree(&u), &want, "the fork shows the snapshot");
    assert_eq!(u.stat(b"/n/h").unwrap().ino, u.stat(b"/a/h2").unwrap().ino, "hard links stay one file");

    // Each side changes apart from the other.
    let fd = u.open(b"/big", OpenFlags::WRONLY, 0).unwrap();
    u.pwrite(fd, b"fork", 0).unwrap();
    u.close(fd).unwrap();
    u.unlinkat(DirFd::Cwd, b"/a/f", AtFlags::empty()).unwrap();
    let fd = t.open(b"/big", OpenFlags::WRONLY, 0).unwrap();
    t.pwrite(fd, b"orig", 4096).unwrap();
    t.close(fd).unwrap();
    let read4 = |t: &Task, off: i64| {
        let fd = t.open(b"/big", OpenFlags::RDONLY, 0).unwrap();
        let mut b = [0u8; 4];
        t.pread(fd, &mut b, off).unwrap();
        t.close(fd).unwrap();
        b
    };
    assert_eq!((read4(&t, 0), read4(&t, 4096)), ([9; 4], *b"orig"));
    assert_eq!((read4(&u, 0), read4(&u, 4096)), (*b"fork", [9; 4]));
    assert!(t.stat(b"/a/f").is_ok() && u.stat(b"/a/f").is_err());
    assert_eq!(std::fs::read(lower.join("a/f")).unwrap(), b"one\n", "the lower directory is untouched");

    // A read-only layer: the snapshot mounted alone cannot be written.
    let s2 = OverlayFs::snapshot(root.inode()).unwrap();
    let c = vfs(s2);
    assert_eq!(c.root_task().mkdir(b"/x", 0o755), Err(uvfs::Errno::EROFS));
}

/// A merged listing keeps its cursors while the directory changes (issue 14, as
/// overlayfs's cached listing): a reader that started before changes sees every name of
/// the directory as it was, once each.
#[test]
fn merged_listing_cursors_survive_changes() {
    let tmp = tempfile::tempdir().unwrap();
    sh(tmp.path(), "mkdir -p d && for i in $(seq 1 50); do : > d/f$i; done");
    let fs = OverlayFs::new(vec![Box::new(HostFs::new(tmp.path()).unwrap())]).unwrap();
    let vfs = Vfs::with_root(VfsConfig::default(), Box::new(fs)).unwrap();
    let t = vfs.root_task();
    let fd = t.open(b"/d", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    let mut seen: Vec<Vec<u8>> = t.getdents(fd, 12).unwrap().into_iter().map(|e| e.name).collect();
    for i in 1..=5 {
        t.unlinkat(DirFd::Cwd, format!("/d/f{i}").as_bytes(), AtFlags::empty()).unwrap();
        let n = t.open(format!("/d/new{i}").as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
        t.close(n).unwrap();
    }
    loop {
        let more = t.getdents(fd, 12).unwrap();
        if more.is_empty() {
            break;
        }
        seen.extend(more.into_iter().map(|e| e.name));
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "no name twice");
    let mut want: Vec<Vec<u8>> = (1..=50).map(|i| format!("f{i}").into_bytes()).collect();
    want.extend([b".".to_vec(), b"..".to_vec()]);
    want.sort();
    assert_eq!(sorted, want, "the directory as the listing found it");
    t.close(fd).unwrap();
    // A new listing sees the changes.
    let fd = t.open(b"/d", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
    let now: Vec<Vec<u8>> = t.getdents(fd, usize::MAX).unwrap().into_iter().map(|e| e.name).collect();
    assert!(now.contains(&b"new3".to_vec()) && !now.contains(&b"f3".to_vec()));
}

/// Generated OCI image layers (`.wh.` whiteouts, `.wh..wh..opq` opaque markers, files,
/// directories, symlinks, hard links, names given again, missing parents), stacked by
/// uvfs as tarfs layers in an overlay, show what overlayfs shows of the same layers
/// extracted by GNU tar and converted as an image tool does for overlayfs (a whiteout
/// becomes a character device 0/0, an opaque marker the `trusted.overlay.opaque` xattr of
/// its directory). Needs root (mount, mknod, trusted xattrs).
mod layers {
    use super::*;
    use proptest::prelude::*;
    use tree::archives::{Member, write_archive};

    const NAMES: [&str; 16] = [
        "a",
        "b",
        "a/f",
        "a/g",
        "a/c",
        "a/c/f",
        "b/f",
        "c",
        ".wh.a",
        "a/.wh.f",
        "a/.wh.c",
        "a/c/.wh.f",
        ".wh.b",
        "a/.wh..wh..opq",
        "b/.wh..wh..opq",
        "a/c/.wh..wh..opq",
    ];

    fn member() -> impl Strategy<Value = Member> {
        (
            prop::sample::select(vec!['f', 'f', 'd', 'd', 's', 'h']),
            prop::sample::select(NAMES.to_vec()),
            prop::sample::select(vec!["a/f", "b/f", "../x", "a/c/f"]),
            prop::sample::select(vec![0usize, 3, 5000]),
            prop::sample::select(vec![0o755u32, 0o644, 0o700, 0o4755]),
        )
            .prop_map(|(kind, name, target, size, mode)| {
                // A marker is an empty file.
                let marker = name.rsplit('/').next().unwrap().starts_with(".wh.");
                Member {
                    kind: if marker { 'f' } else { kind },
                    name,
                    target,
                    size: if marker { 0 } else { size },
                    mode,
                    uid: 0,
                    mtime: 1_000_000_000,
                    xattr: None,
                }
            })
    }

    /// A layer: its members, hard links pointed at a non-directory made earlier in it, and
    /// no whiteout of a name the same layer has (OCI: a whiteout hides the layers below;
    /// overlayfs's directory cannot hold both).
    fn layer() -> impl Strategy<Value = Vec<Member>> {
        prop::collection::vec(member(), 0..9).prop_map(|ms| {
            let mut out: Vec<Member> = Vec::new();
            for mut m in ms {
                if m.kind == 'h' {
                    // Not to a symlink GNU tar delays (a target with `..` or absolute: it
                    // makes a placeholder and the links at the end), whose outcome with
                    // its name given again is tar's internals: both names `../x` once,
                    // the second target the next time.
                    let linkable = |o: &Member| match o.kind {
                        'f' => true,
                        's' => !o.target.contains("..") && !o.target.starts_with('/'),
                        _ => false,
                    };
                    match out.iter().rev().find(|o| linkable(o) && !is_marker(o.name)) {
                        Some(o) => m.target = o.name,
                        None => continue,
                    }
                }
                out.push(m);
            }
            let named: Vec<String> = out.iter().map(|m| m.name.to_string()).collect();
            out.retain(|m| match m.name.rsplit_once('/').map_or(("", m.name), |(d, b)| (d, b)) {
                (dir, base) if base != ".wh..wh..opq" && base.starts_with(".wh.") => {
                    let hidden = if dir.is_empty() { base[4..].to_string() } else { format!("{dir}/{}", &base[4..]) };
                    !named.iter().any(|n| *n == hidden || n.starts_with(&format!("{hidden}/")))
                }
                _ => true,
            });
            out
        })
    }

    fn is_marker(name: &str) -> bool {
        name.rsplit('/').next().unwrap().starts_with(".wh.")
    }

    /// Extracts `tar` into `dir` and converts its markers for overlayfs; false where GNU
    /// tar does not extract it cleanly (a file under a file, a directory over one with
    /// children).
    fn apply_for_overlayfs(tar: &Path, dir: &Path) -> bool {
        let out = Command::new("tar")
            .args(["--same-owner", "--warning=no-timestamp", "-xpf"])
            .arg(tar)
            .arg("-C")
            .arg(dir)
            .output()
            .unwrap();
        if !out.status.success() || !out.stderr.is_empty() {
            return false;
        }
        let listing = sh(dir, "find . -name '.wh.*' -print0 | xargs -0 -r -n1 echo");
        for p in listing.lines() {
            let p = dir.join(p);
            let (parent, base) =
                (p.parent().unwrap().to_path_buf(), p.file_name().unwrap().to_str().unwrap().to_string());
            std::fs::remove_file(&p).unwrap();
            if base == ".wh..wh..opq" {
                rustix::fs::setxattr(&parent, "trusted.overlay.opaque", b"y", rustix::fs::XattrFlags::empty()).unwrap();
            } else {
                let hidden = parent.join(&base[4..]);
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    &hidden,
                    rustix::fs::FileType::CharacterDevice,
                    rustix::fs::Mode::empty(),
                    0,
                )
                .unwrap();
            }
        }
        true
    }

    /// What overlayfs shows of `dirs` (top first) as lower layers, read in a mount
    /// namespace of a thread of its own (the mount goes with it).
    fn overlayfs_tree(dirs: Vec<std::path::PathBuf>, merged: std::path::PathBuf) -> tree::Tree {
        std::thread::spawn(move || {
            let lowers = dirs.iter().map(|d| d.to_str().unwrap()).collect::<Vec<_>>().join(":");
            let opts = std::ffi::CString::new(format!("lowerdir={lowers}")).unwrap();
            let target = std::ffi::CString::new(merged.to_str().unwrap()).unwrap();
            // SAFETY: plain syscalls with NUL-terminated strings that outlive them; the
            // namespace is this thread's own after unshare.
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare: {}", std::io::Error::last_os_error());
                let rc = libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                );
                assert_eq!(rc, 0, "private: {}", std::io::Error::last_os_error());
                let rc = libc::mount(
                    c"overlay".as_ptr(),
                    target.as_ptr(),
                    c"overlay".as_ptr(),
                    libc::MS_RDONLY,
                    opts.as_ptr().cast(),
                );
                assert_eq!(rc, 0, "mount overlay: {}", std::io::Error::last_os_error());
            }
            let t = tree::host_tree_found(&merged);
            // SAFETY: as above.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            t
        })
        .join()
        .expect("the overlayfs side")
    }

    proptest! {
        // Rejected cases (archives tar does not extract cleanly) are bounded, so that a
        // setup that rejects every case fails instead of looping.
        #![proptest_config(ProptestConfig {
            cases: cases(48),
            max_global_rejects: 16 * cases(48),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn stacked_layers_show_what_overlayfs_shows(layers in prop::collection::vec(layer(), 1..4)) {
            let tmp = tempfile::tempdir_in(scratch::scratch_in("/dev/shm")).unwrap();
            let mut dirs = Vec::new();
            let mut tars = Vec::new();
            // Top first; an empty bottom layer, as overlayfs wants two lower layers without
            // an upper one.
            for (i, l) in layers.iter().enumerate() {
                let tar = tmp.path().join(format!("l{i}.tar"));
                assert!(write_archive(&tar, "pax", l), "writing a layer");
                let dir = tmp.path().join(format!("l{i}"));
                std::fs::create_dir(&dir).unwrap();
                prop_assume!(apply_for_overlayfs(&tar, &dir));
                dirs.push(dir);
                tars.push(tar);
            }
            let empty = tmp.path().join("empty");
            std::fs::create_dir(&empty).unwrap();
            dirs.push(empty.clone());
            let merged = tmp.path().join("merged");
            std::fs::create_dir(&merged).unwrap();
            let want = contents_only(&overlayfs_tree(dirs, merged));

            let mut fs: Vec<Box<dyn uvfs::fs::FileSystem>> = Vec::new();
            for tar in &tars {
                fs.push(Box::new(TarFs::open_layer(tar).unwrap()));
            }
            fs.push(Box::new(HostFs::new(&empty).unwrap()));
            let vfs = Vfs::with_root(VfsConfig::default(), Box::new(OverlayFs::new(fs).unwrap())).unwrap();
            let got = uvfs_tree(&vfs.root_task());
            // The roots differ by what each made them from (the empty directory's mode
            // here, tarfs's own root there): compared below them.
            let below = |t: tree::Tree| -> tree::Tree { t.into_iter().filter(|(k, _)| !k.is_empty()).collect() };
            let (want, got) = (below(want), below(got));
            prop_assert!(want == got, "{}", {
                let mut msg = String::new();
                for k in want.keys().chain(got.keys()).collect::<std::collections::BTreeSet<_>>() {
                    if want.get(k) != got.get(k) {
                        msg += &format!("{}: overlayfs {:?}\n    uvfs {:?}\n", String::from_utf8_lossy(k), want.get(k), got.get(k));
                    }
                }
                msg
            });
        }
    }
}

/// PROPTEST_CASES, or `default`: the count of a generated test, longer for a hunt.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
