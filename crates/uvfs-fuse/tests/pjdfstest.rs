//! pjdfstest (crates.io `pjdfstest`, the Rust rewrite) as root on a memfs mount (and on an
//! overlay mount over a host directory, `pjdfstest_on_an_overlay`, and on a host directory
//! itself, `pjdfstest_on_a_host_directory`), in both
//! permission modes and over both transports (`/dev/fuse`, and FUSE over io_uring where
//! the kernel allows it; `UVFS_FUSE_TRANSPORT` picks one), and with the writeback cache on
//! (`Levers::WRITEBACK_CACHE`, kernel permissions): 0 failed. Needs root, /dev/fuse, the `pjdfstest` binary
//! (`cargo install pjdfstest`) and the dummy users of the configuration below (`nobody`
//! with group `nogroup`, and `tests` with group `tests`); fails saying so if one is missing.
//!
//! Skipped by pjdfstest itself, with the reason:
//! - `*::erofs_*` (13 cases): they remount the file system read-only with mount(8), which
//!   for a FUSE mount runs the fuse3 helper (`mount.fuse3`), which runs the subtype's
//!   program; uvfs's read-only mounts are tested in the core.
//! - `link::link_count_max`: `pathconf(LINK_MAX)` on the mount is too large to reach.

mod common;

use std::process::Command;

use common::{TempDir, require, which};
use uvfs_fuse::{Levers, MountOptions, Permissions, Transport};

const CONFIG: &str = r#"
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
naptime = NAPTIME
allow_remount = false

[dummy_auth]
entries = [
  ["nobody", "nogroup"],
  ["tests", "tests"],
]
"#;

/// The coarse clock's tick (`CLOCK_REALTIME_COARSE`'s resolution: 4 ms at `HZ=250`).
fn coarse_tick() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable `timespec`.
    let r = unsafe { libc::clock_getres(libc::CLOCK_REALTIME_COARSE, &mut ts) };
    assert_eq!(r, 0, "clock_getres(CLOCK_REALTIME_COARSE)");
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn user_exists(name: &str) -> bool {
    Command::new("id").arg(name).output().is_ok_and(|o| o.status.success())
}

/// pjdfstest on a memfs mount with these permissions, transport and levers.
fn pjdfstest(perm: Permissions, transport: Transport, levers: Levers) {
    let opts = MountOptions { permissions: perm, transport, levers, ..MountOptions::default() };
    pjdfstest_on(&format!("memfs, {perm:?}"), uvfs::Vfs::new(uvfs::VfsConfig::default()), opts);
}

/// Both permission modes over each transport, one after the other: each server runs in
/// this process while pjdfstest runs, so they are not run concurrently.
#[test]
fn pjdfstest_both_permission_modes() {
    let transports = match std::env::var_os("UVFS_FUSE_TRANSPORT") {
        Some(_) => vec![common::transport()],
        None => vec![Transport::Dev, Transport::Uring],
    };
    // The writeback cache, where the kernel owns size and mtime (`Permissions::Kernel`
    // only): once, over the first transport.
    pjdfstest(Permissions::Kernel, transports[0], Levers::DEFAULT | Levers::WRITEBACK_CACHE);
    for &t in &transports {
        pjdfstest(Permissions::Kernel, t, Levers::DEFAULT);
        pjdfstest(Permissions::Uvfs, t, Levers::DEFAULT);
    }
}

/// pjdfstest on an overlay mount (issue 14): the test directory's parent is a host
/// directory in the overlay's lower layer, so every file the suite makes is made in the
/// upper layer inside a merged directory.
#[test]
fn pjdfstest_on_an_overlay() {
    let lower = TempDir::new("pjd-lower");
    std::fs::create_dir(lower.path().join("pjd")).unwrap();
    std::fs::set_permissions(lower.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let host = uvfs::fs::hostfs::HostFs::new(lower.path()).unwrap();
    let fs = uvfs::fs::overlay::OverlayFs::new(vec![Box::new(host)]).unwrap();
    let vfs = uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).unwrap();
    pjdfstest_on("overlay", vfs, MountOptions::default());
}

/// pjdfstest on a host directory served by hostfs, as `uvfs mount --fs host:DIR` serves
/// it: trusted (`--host-unchanged`: day-long caches, and creates that take the host's
/// owner and mode as they come; with passthrough, and without it, when `NO_OPEN` takes
/// over), and revalidated (the default: one-second caches).
#[test]
fn pjdfstest_on_a_host_directory() {
    use uvfs::fs::hostfs::{HostChanges, HostFs, HostFsOptions};
    let no_passthrough = MountOptions { levers: Levers::DEFAULT - Levers::PASSTHROUGH, ..MountOptions::default() };
    for (what, mount) in [
        ("host, unchanged", MountOptions::default()),
        ("host, unchanged, no passthrough", no_passthrough),
        ("host, revalidated", MountOptions::host_changing()),
    ] {
        let dir = TempDir::new("pjd-host");
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let mut opts = HostFsOptions::default();
        if what.starts_with("host, unchanged") {
            opts.changes = HostChanges::Never;
        }
        let fs = HostFs::with_options(dir.path(), opts).unwrap();
        let vfs = uvfs::Vfs::with_root(uvfs::VfsConfig::default(), Box::new(fs)).unwrap();
        pjdfstest_on(what, vfs, mount);
    }
}

/// Runs pjdfstest in the directory `pjd` of `vfs` (made if it is not there) mounted with
/// `opts`; 0 failed, and no skip but those listed at the top.
fn pjdfstest_on(what: &str, vfs: uvfs::Vfs, opts: MountOptions) {
    require(&[("id", "coreutils")]);
    let bin = which("pjdfstest").expect("missing `pjdfstest`: cargo install pjdfstest");
    for u in ["nobody", "tests"] {
        assert!(user_exists(u), "missing dummy user `{u}` for pjdfstest: groupadd tests; useradd -g tests -M tests");
    }
    let cfg_dir = TempDir::new("pjdcfg");
    let cfg = cfg_dir.path().join("pjdfstest.toml");
    // pjdfstest naps between two calls whose timestamps must differ, and its naptime
    // must exceed the filesystem's timestamp granularity. uvfs stamps as tmpfs does
    // (multigrain): a change nobody `stat`ed the object before gets the coarse clock, and
    // a link or unlink stamps the directory with the linked file's time, so a `stat` of
    // the directory alone, a nap and a `link` show a new time only once the coarse clock
    // moved past the directory's last stamp (as on tmpfs). That clock moves by ticks, and
    // lags the real time by more than one while the CPUs idle (7 ms seen here with 4 ms
    // ticks: a 5 ms nap failed `link::changed_ctime_success`); with the writeback cache
    // the kernel stamps a regular file's times itself with it too. Four ticks, at least
    // 20 ms.
    let naptime = (coarse_tick() * 4).max(std::time::Duration::from_millis(20));
    std::fs::write(&cfg, CONFIG.replace("NAPTIME", &format!("{:.3}", naptime.as_secs_f64()))).unwrap();
    // A second filesystem for the EXDEV cases: the host's temp dir.
    let secondary = TempDir::new("pjd2");
    match vfs.root_task().mkdir(b"/pjd", 0o755) {
        Ok(()) | Err(uvfs::Errno::EEXIST) => {}
        Err(e) => panic!("mkdir /pjd: {e:?}"),
    }
    // A short path: pjdfstest binds sockets up to five components below it (two of 32
    // characters), and a socket's path has 108 bytes.
    let mnt = tempfile::Builder::new().prefix("p").rand_bytes(4).tempdir().unwrap();
    let (handle, _uring) = common::spawn(&vfs, mnt.path(), opts);
    let out = Command::new(&bin)
        .arg("-c")
        .arg(&cfg)
        .arg("-p")
        .arg(mnt.path().join("pjd"))
        .arg("-s")
        .arg(secondary.path())
        .current_dir(cfg_dir.path())
        .output()
        .expect("run pjdfstest");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // The levers in effect (some asked for do not apply in every mode).
    let levers = handle.levers();
    let summary = text.lines().rev().find(|l| l.starts_with("Summary:"));
    println!("{what} over {:?}, {levers:?}: {}", handle.transport(), summary.unwrap_or("no summary"));
    handle.unmount().unwrap();
    let summary = summary.unwrap_or_else(|| panic!("pjdfstest printed no summary ({}):\n{text}", out.status));
    let failed: Vec<&str> = text.lines().filter(|l| l.trim_end().ends_with("FAILED")).collect();
    assert!(summary.starts_with("Summary: 0 failed"), "{what}, {levers:?}: {summary}\n{}\n\n{text}", failed.join("\n"));
    for s in text.lines().filter(|l| l.trim_end().ends_with("skipped")) {
        let name = s.split_whitespace().next().unwrap_or("");
        assert!(
            name.contains("erofs") || name == "link::link_count_max",
            "unexpected skip (document it in the README and this file): {s}"
        );
    }
}
