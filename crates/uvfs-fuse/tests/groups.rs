//! A caller's supplementary groups (not in the FUSE protocol: the server reads them from
//! `/proc/<tid>/status`) are read only when one of a request's checks needs them, at most
//! once per request, and then decide as they would on Linux. Counts, never times.

mod common;

use std::process::Command;

use common::{Mounted, count};
use uvfs::{AtFlags, DirFd, Gid, OpenFlags, Uid};
use uvfs_fuse::{MountOptions, Permissions};

/// Runs `code` in python3 as uid and gid 1000 with `groups` (`--clear-groups` if empty)
/// in `dir`; its standard output.
fn as_user(dir: &std::path::Path, groups: &str, code: &str) -> String {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=1000", "--regid=1000"]);
    if groups.is_empty() {
        c.arg("--clear-groups");
    } else {
        c.arg(format!("--groups={groups}"));
    }
    let out = c.args(["/usr/bin/python3", "-c", code]).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn groups_are_read_only_when_a_check_needs_them() {
    common::require(&[("setpriv", "util-linux"), ("python3", "python3")]);
    // uvfs alone decides (the kernel checks nothing), and nothing is cached: every open
    // is a LOOKUP of each name and an OPEN.
    let m = Mounted::new(MountOptions { permissions: Permissions::Uvfs, ..MountOptions::uncached() });
    let t = m.vfs.root_task();
    t.mkdir(b"/d", 0o755).unwrap();
    for (name, mode) in [(&b"/d/pub"[..], 0o644), (b"/d/grp", 0o640)] {
        let fd = t.open(name, OpenFlags::CREAT | OpenFlags::WRONLY, mode).unwrap();
        t.write(fd, b"data").unwrap();
        t.close(fd).unwrap();
    }
    t.fchownat(DirFd::Cwd, b"/d/grp", Some(Uid(0)), Some(Gid(4242)), AtFlags::empty()).unwrap();
    let h = m.handle.as_ref().unwrap();

    // Group and other bits alike, directories every class may search: no check asks.
    let (r0, o0) = (h.group_reads(), count(h, "OPEN"));
    let out = as_user(
        m.path(),
        "4242,4243",
        "import os\nfor i in range(200):\n    os.stat('d/pub')\n    assert open('d/pub').read() == 'data'\nprint('ok')",
    );
    assert_eq!(out, "ok\n");
    assert!(count(h, "OPEN") - o0 >= 200, "each open reached the server");
    assert_eq!(h.group_reads() - r0, 0, "nothing needed the groups");

    // Readable by the group only: each OPEN asks, once, and the member gets in.
    let (r0, o0) = (h.group_reads(), count(h, "OPEN"));
    let out =
        as_user(m.path(), "4242,4243", "for i in range(50):\n    assert open('d/grp').read() == 'data'\nprint('ok')");
    assert_eq!(out, "ok\n");
    let opens = count(h, "OPEN") - o0;
    assert!(opens >= 50, "{opens} OPENs");
    assert_eq!(h.group_reads() - r0, opens, "one read of the groups per request that asked");

    // Not a member: denied, after the one read that showed it.
    let r0 = h.group_reads();
    let out = as_user(
        m.path(),
        "4243",
        "try:\n    open('d/grp')\n    print('opened')\nexcept PermissionError:\n    print('denied')",
    );
    assert_eq!(out, "denied\n");
    assert_eq!(h.group_reads() - r0, 1);
    // Without supplementary groups at all: denied too.
    assert_eq!(
        as_user(
            m.path(),
            "",
            "try:\n    open('d/grp')\n    print('opened')\nexcept PermissionError:\n    print('denied')"
        ),
        "denied\n"
    );
}
