//! `uvfs mount --fs host:DIR`: a host directory served through hostfs and FUSE. What
//! programs do on the mount reaches the host directory, and what is on the host is seen
//! through the mount, also after it changes behind uvfs's back (hostfs's default
//! revalidation; the kernel's own FUSE caches are off for that part).

mod common;
#[path = "../../uvfs/tests/hostops/mod.rs"]
mod hostops;

use std::os::unix::fs::MetadataExt;

use common::TempDir;
use uvfs_fuse::{Levers, MountOptions};

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

/// What `uvfs mount --fs host:DIR` uses for a host that may change, with no caching of
/// names and attributes at all.
fn uncached_host_changing() -> MountOptions {
    let zero = std::time::Duration::ZERO;
    MountOptions { entry_timeout: zero, attr_timeout: zero, negative_timeout: zero, ..MountOptions::host_changing() }
}

#[test]
fn host_changes_seen_through_fuse() {
    let host = TempDir::new("hostchg");
    std::fs::create_dir(host.path().join("d")).unwrap();
    std::fs::write(host.path().join("d/a"), b"one").unwrap();
    let fs = uvfs::fs::hostfs::HostFs::new(host.path()).unwrap();
    let vfs = uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).unwrap();
    let mnt = TempDir::new("hostchgmnt");
    let (handle, _uring) = common::spawn(&vfs, mnt.path(), uncached_host_changing());
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

/// FUSE passthrough: the kernel reads and writes an open host file itself. Data written
/// and read through the mount takes no READ or WRITE request, reaches the host file, and
/// uvfs's own view of the file (in-process `stat`, the mount's `stat`) follows.
#[test]
fn passthrough_reads_and_writes_bypass_the_server() {
    use uvfs::fs::hostfs::HostChanges;
    // Revalidating (uvfs re-reads the host anyway) and promised unchanged (only the
    // refresh after the kernel's writes keeps uvfs's view right).
    passthrough_case(uvfs::fs::hostfs::HostFsOptions::default().changes, MountOptions::host_changing());
    // Passthrough for every file: small ones opened for reading go through the page cache
    // by default (`cached_reads_of_small_host_files` below).
    let opts = MountOptions { levers: Levers::DEFAULT - Levers::CACHED_READS, ..MountOptions::default() };
    passthrough_case(HostChanges::Never, opts);
}

/// A host directory promised unchanged without passthrough (`--host-unchanged --disable
/// passthrough`): `NO_OPEN` applies, so opening and closing an existing file costs no
/// round trip, reads and writes reach the server, and everything lands on the host.
#[test]
fn unchanged_host_directory_without_opens() {
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    let host = TempDir::new("hostno");
    std::fs::write(host.path().join("old"), b"host data").unwrap();
    let vfs = host_vfs(host.path(), uvfs::fs::hostfs::HostChanges::Never);
    let mnt = TempDir::new("hostnomnt");
    let opts = MountOptions { levers: Levers::DEFAULT - Levers::PASSTHROUGH, ..MountOptions::default() };
    let (handle, _uring) = common::spawn(&vfs, mnt.path(), opts);
    assert!(!handle.passthrough(), "passthrough was negotiated");
    let levers = handle.levers();
    assert!(levers.contains(Levers::NO_OPEN) && !levers.contains(Levers::PASSTHROUGH), "{levers:?}");
    let m = mnt.path();
    let count = |op: &str| handle.requests().iter().find(|(o, _)| *o == op).map_or(0, |r| r.1);

    // Ten opens of an existing file: no OPEN or RELEASE (the first is answered ENOSYS at
    // most), one READ (the pages stay cached across opens).
    for _ in 0..10 {
        assert_eq!(std::fs::read(m.join("old")).unwrap(), b"host data");
    }
    assert!(count("OPEN") <= 1 && count("RELEASE") == 0, "{:?}", handle.requests());
    assert_eq!(handle.data_requests().0, 1);

    // Writes of an existing file and of a new one go through the server to the host.
    let f = std::fs::OpenOptions::new().write(true).open(m.join("old")).unwrap();
    f.write_all_at(b"HOST", 0).unwrap();
    drop(f);
    let mut a = std::fs::OpenOptions::new().append(true).open(m.join("old")).unwrap();
    a.write_all(b"!").unwrap();
    drop(a);
    assert_eq!(std::fs::read(host.path().join("old")).unwrap(), b"HOST data!");
    assert_eq!(std::fs::read(m.join("old")).unwrap(), b"HOST data!");
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    std::fs::write(m.join("new"), &data).unwrap();
    assert!(std::fs::read(host.path().join("new")).unwrap() == data);
    assert!(std::fs::read(m.join("new")).unwrap() == data);
    assert_eq!(vfs.root_task().stat(b"/new").unwrap().size, data.len() as u64);
    // O_TRUNC of an existing file, seen on the host and through the mount.
    std::fs::write(m.join("new"), b"short").unwrap();
    assert_eq!(std::fs::read(host.path().join("new")).unwrap(), b"short");
    assert_eq!(std::fs::metadata(m.join("new")).unwrap().len(), 5);
    assert!(count("OPEN") <= 1, "{:?}", handle.requests());
    handle.unmount().unwrap();
}

/// `Levers::CACHED_READS` (on with `--host-unchanged`): a small host file opened for
/// reading only is read through the page cache, once; a big one, and every open that
/// writes, through passthrough. The two never mix on one file (the kernel would fail the
/// open with EIO), and what one wrote the other reads.
#[test]
fn cached_reads_of_small_host_files() {
    use std::os::unix::fs::FileExt;
    let host = TempDir::new("hostcr");
    std::fs::write(host.path().join("small"), b"0123456789").unwrap();
    let vfs = host_vfs(host.path(), uvfs::fs::hostfs::HostChanges::Never);
    let mnt = TempDir::new("hostcrmnt");
    let (handle, _uring) = common::spawn(&vfs, mnt.path(), MountOptions::default());
    assert!(handle.passthrough() && handle.levers().contains(Levers::CACHED_READS));
    let (m, small) = (mnt.path(), mnt.path().join("small"));
    let reads = || handle.data_requests().0;

    // Read twice: one READ, then the page cache.
    assert_eq!(std::fs::read(&small).unwrap(), b"0123456789");
    assert_eq!(reads(), 1);
    assert_eq!(std::fs::read(&small).unwrap(), b"0123456789");
    assert_eq!(reads(), 1, "the second open read the file again");

    // A writer while a reader holds the file cached is served through the server (no EIO),
    // and the reader sees what it wrote.
    let r = std::fs::File::open(&small).unwrap();
    let w = std::fs::OpenOptions::new().write(true).open(&small).unwrap();
    w.write_all_at(b"AB", 0).unwrap();
    let mut buf = [0u8; 4];
    r.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"AB23");
    drop((r, w));
    assert_eq!(std::fs::read(host.path().join("small")).unwrap(), b"AB23456789");

    // With nothing open, a writer gets passthrough: its write takes no WRITE. The next
    // reader must not read the pages cached before that write.
    let (reads_before, writes) = handle.data_requests();
    let w = std::fs::OpenOptions::new().write(true).open(&small).unwrap();
    w.write_all_at(b"XY", 2).unwrap();
    // A reader while the writer is open shares its backing file.
    let r = std::fs::File::open(&small).unwrap();
    r.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"ABXY");
    drop((r, w));
    assert_eq!(handle.data_requests().1, writes, "the writer went through the server");
    // RELEASE comes after `close` returns; until the server has it, the node still counts
    // as backed and a reader shares the backing file. Either way a reader reads the new
    // data, and once the server has the RELEASEs, a reader is cached again and reads it
    // from the server, not from the pages cached before the write.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while reads() == reads_before {
        assert_eq!(std::fs::read(&small).unwrap(), b"ABXY456789");
        assert!(std::time::Instant::now() < deadline, "no cached open came back after the writer left");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }

    // A big file opened for reading is backed: no READ.
    let big: Vec<u8> = (0..2 << 20).map(|i: u32| (i % 253) as u8).collect();
    std::fs::write(host.path().join("big"), &big).unwrap();
    let before = reads();
    assert!(std::fs::read(m.join("big")).unwrap() == big);
    assert_eq!(reads(), before);
    handle.unmount().unwrap();
}

/// uvfs over the host directory `host`, whose changes behind uvfs's back hostfs expects
/// as `changes` says.
fn host_vfs(host: &std::path::Path, changes: uvfs::fs::hostfs::HostChanges) -> uvfs::Vfs {
    let hopts = uvfs::fs::hostfs::HostFsOptions { changes, ..Default::default() };
    let fs = uvfs::fs::hostfs::HostFs::with_options(host, hopts).unwrap();
    uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).unwrap()
}

fn passthrough_case(changes: uvfs::fs::hostfs::HostChanges, opts: MountOptions) {
    let host = TempDir::new("hostpt");
    std::fs::write(host.path().join("old"), b"host data").unwrap();
    let vfs = host_vfs(host.path(), changes);
    // uvfs caches the file's attributes before the kernel writes it.
    assert_eq!(vfs.root_task().stat(b"/old").unwrap().size, 9);
    let mnt = TempDir::new("hostptmnt");
    let (handle, _uring) = common::spawn(&vfs, mnt.path(), opts);
    assert!(handle.passthrough(), "this kernel (6.9+) and root allow FUSE passthrough");
    let m = mnt.path();
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 251) as u8).collect();
    std::fs::write(m.join("new"), &data).unwrap();
    assert_eq!(std::fs::read(m.join("new")).unwrap(), data);
    assert_eq!(std::fs::read(m.join("old")).unwrap(), b"host data");
    assert_eq!(handle.data_requests(), (0, 0), "READ/WRITE requests despite passthrough");
    // What did go through: the create and the opens, counted by opcode.
    let reqs = handle.requests();
    let count = |op: &str| reqs.iter().find(|(o, _)| *o == op).map_or(0, |r| r.1);
    assert!(count("CREATE") >= 1 && count("OPEN") >= 1 && count("READ") == 0, "{reqs:?}");
    assert_eq!(std::fs::read(host.path().join("new")).unwrap(), data);
    assert_eq!(std::fs::metadata(m.join("new")).unwrap().len(), data.len() as u64);
    let st = vfs.root_task().stat(b"/new").unwrap();
    assert_eq!(st.size, data.len() as u64, "uvfs's view after the kernel wrote the host file");
    // A file written, then given its mode and times on the open descriptor, as tar does:
    // each SETATTR's answer becomes the kernel's size, which must be the written one, not
    // uvfs's from before the kernel wrote (a `stat` showed 0); also after a listing.
    {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir(m.join("t")).unwrap();
        let mut f = std::fs::File::create(m.join("t/x")).unwrap();
        f.write_all(&data[..100_000]).unwrap();
        f.set_permissions(std::fs::Permissions::from_mode(0o600)).unwrap();
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        f.set_times(std::fs::FileTimes::new().set_modified(when)).unwrap();
        drop(f);
        let meta = std::fs::metadata(m.join("t/x")).unwrap();
        assert_eq!((meta.len(), meta.mode() & 0o777, meta.mtime()), (100_000, 0o600, 1_000_000));
        assert_eq!(std::fs::read_dir(m.join("t")).unwrap().count(), 1);
        assert_eq!(std::fs::metadata(m.join("t/x")).unwrap().len(), 100_000, "after a listing");
    }
    // Several open files of one inode share its backing file (the kernel refuses an
    // open whose backing file differs from the others': git's config read twice).
    let (a, b) = (std::fs::File::open(m.join("new")).unwrap(), std::fs::File::open(m.join("new")).unwrap());
    let mut rw = std::fs::OpenOptions::new().read(true).write(true).open(m.join("new")).unwrap();
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 4];
    a.read_exact_at(&mut buf, 8).unwrap();
    assert_eq!(buf, data[8..12]);
    rw.write_all_at(b"ABCD", 8).unwrap();
    b.read_exact_at(&mut buf, 8).unwrap();
    assert_eq!(&buf, b"ABCD");
    drop((a, b));
    rw.flush().unwrap();
    drop(rw);
    // Appends go through the kernel too, at the end.
    use std::io::Write;
    std::fs::OpenOptions::new().append(true).open(m.join("old")).unwrap().write_all(b"+more").unwrap();
    assert_eq!(std::fs::read(host.path().join("old")).unwrap(), b"host data+more");
    // uvfs re-reads the host file when the kernel releases the open, and the kernel sends
    // RELEASE after `close` returns, without waiting: so the in-process view reaches the
    // new size a moment after the close (it raced the assertion under a loaded gate run).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while vfs.root_task().stat(b"/old").unwrap().size != 14 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert_eq!(vfs.root_task().stat(b"/old").unwrap().size, 14);
    handle.unmount().unwrap();
}

/// Host changes interleaved with changes through the mount, with the kernel's name and
/// attribute caches off (timeouts 0, the levers of a host that may change): after every
/// step each name shows through the mount what it shows on the host (type, mode, size,
/// links, owner, group, data and status-change times, an extended attribute, or the
/// errno), listings agree, and a descriptor held open through the mount shows what one
/// held on the host for the same file shows (attributes and first bytes), whichever side
/// wrote, truncated or chmodded through its descriptor.
mod host_sequences {
    use super::*;
    use hostops::{NAMES, Op, SLOTS, XNAME, apply, host_list, op, slot_of};
    use proptest::prelude::*;
    use std::os::fd::OwnedFd;
    use std::path::Path;

    #[derive(Clone, Debug)]
    enum Step {
        Host(Op),
        Mount(Op),
        Open(usize, usize, bool),
        Close(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => op().prop_map(Step::Host),
            4 => op().prop_map(Step::Mount),
            1 => (0..NAMES.len(), 0..SLOTS, any::<bool>()).prop_map(|(a, s, rw)| Step::Open(a, s, rw)),
            1 => (0..SLOTS).prop_map(Step::Close),
        ]
    }

    /// Slot `i`: the descriptor opened on the host (`.0`) and through the mount (`.1`).
    type Held = [Option<(OwnedFd, OwnedFd)>; SLOTS];

    /// Type and mode, size, links, owner, group, mtime, ctime.
    type View = (u32, u64, u64, u32, u32, (i64, u64), (i64, u64));

    fn view_of(s: &rustix::fs::Stat) -> View {
        (
            s.st_mode,
            s.st_size as u64,
            s.st_nlink,
            s.st_uid,
            s.st_gid,
            (s.st_mtime, s.st_mtime_nsec),
            (s.st_ctime, s.st_ctime_nsec),
        )
    }

    fn path_view(root: &Path, rel: &str) -> Result<(View, Result<Vec<u8>, i32>), i32> {
        let p = root.join(rel);
        let s = rustix::fs::lstat(&p).map_err(|e| e.raw_os_error())?;
        let mut buf = [0u8; 16];
        let x = rustix::fs::lgetxattr(&p, XNAME, &mut buf[..]).map(|n| buf[..n].to_vec()).map_err(|e| e.raw_os_error());
        Ok((view_of(&s), x))
    }

    fn fd_view(fd: &OwnedFd) -> (View, Result<Vec<u8>, i32>) {
        let s = rustix::fs::fstat(fd).unwrap();
        let mut buf = [0u8; 16];
        let d = rustix::io::pread(fd, &mut buf[..], 0).map(|n| buf[..n].to_vec()).map_err(|e| e.raw_os_error());
        (view_of(&s), d)
    }

    fn open(root: &Path, a: usize, rw: bool) -> Result<OwnedFd, i32> {
        use rustix::fs::OFlags;
        let fl = if rw { OFlags::RDWR } else { OFlags::RDONLY };
        rustix::fs::open(root.join(NAMES[a]), fl | OFlags::CLOEXEC, rustix::fs::Mode::empty())
            .map_err(|e| e.raw_os_error())
    }

    proptest! {
        // Each case mounts anew; PROPTEST_CASES overrides the count for a longer hunt.
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn the_mount_shows_what_the_host_holds(steps in proptest::collection::vec(step(), 1..20)) {
            let host = TempDir::new("hostseq");
            let fs = uvfs::fs::hostfs::HostFs::new(host.path()).unwrap();
            let vfs = uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).unwrap();
            let mnt = TempDir::new("hostseqmnt");
            let (handle, _uring) = common::spawn(&vfs, mnt.path(), uncached_host_changing());
            let (h, m) = (host.path(), mnt.path());
            let mut held: Held = Default::default();
            let mut failure = None;
            'steps: for (i, s) in steps.iter().enumerate() {
                match s {
                    Step::Host(op) => apply(h, slot_of(op).and_then(|s| held[s].as_ref()).map(|p| &p.0), op),
                    Step::Mount(op) => apply(m, slot_of(op).and_then(|s| held[s].as_ref()).map(|p| &p.1), op),
                    Step::Open(a, slot, rw) => {
                        held[*slot] = None;
                        match (open(h, *a, *rw), open(m, *a, *rw)) {
                            (Ok(hf), Ok(mf)) => held[*slot] = Some((hf, mf)),
                            (Err(he), Err(me)) if he == me => {}
                            (hr, mr) => {
                                failure = Some(format!("step {i} ({s:?}): host {:?}, mount {:?}", hr.err(), mr.err()));
                                break 'steps;
                            }
                        }
                    }
                    Step::Close(slot) => held[*slot] = None,
                }
                for rel in NAMES.iter().chain([".", "a/x/.."].iter()) {
                    let (hv, mv) = (path_view(h, rel), path_view(m, rel));
                    if hv != mv {
                        failure = Some(format!("after step {i} ({s:?}): {rel}: host {hv:?}, mount {mv:?}"));
                        break 'steps;
                    }
                }
                for rel in [".", "a", "b", "a/x"] {
                    let (hl, ml) = (host_list(h, rel), host_list(m, rel));
                    if hl != ml {
                        failure = Some(format!("after step {i} ({s:?}): list {rel}: host {hl:?}, mount {ml:?}"));
                        break 'steps;
                    }
                }
                for (slot, p) in held.iter().enumerate() {
                    if let Some((hf, mf)) = p {
                        let (hv, mv) = (fd_view(hf), fd_view(mf));
                        if hv != mv {
                            failure = Some(format!("after step {i} ({s:?}): slot {slot}: host {hv:?}, mount {mv:?}"));
                            break 'steps;
                        }
                    }
                }
            }
            // Descriptors closed and the mount gone before the case's verdict.
            drop(held);
            handle.unmount().unwrap();
            prop_assert!(failure.is_none(), "{}", failure.unwrap());
        }
    }
}
