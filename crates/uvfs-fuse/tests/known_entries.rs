//! `Levers::KNOWN_ENTRIES` (on by default): a READDIRPLUS lists a file the kernel knows,
//! with the attributes the server last gave it, without attributes (node id 0), so the
//! server looks nothing up for it; a file opened, written, linked or changed in-process
//! since gets its attributes. What a `find` then prints must be what uvfs holds, with
//! no more round trips than with the lever off. Counts, never times.

mod common;

use std::os::unix::fs::MetadataExt;

use common::{Mounted, count, require, sh};
use uvfs_fuse::{Levers, MountOptions};

const FILES: usize = 40;

/// What `find d -printf '%s %m %T@ %p\n' | sort` should print, from uvfs itself (find
/// prints ten digits of a second's fraction).
fn truth(m: &Mounted) -> String {
    let t = m.vfs.root_task();
    let mut names: Vec<String> = (0..FILES - 1).map(|i| format!("f{i}")).collect();
    names.extend(["r", "l2", "s1", "s2"].map(String::from));
    names.extend(["new".to_string()].into_iter().filter(|n| t.lstat(format!("/d/{n}").as_bytes()).is_ok()));
    let mut lines: Vec<String> = names
        .iter()
        .map(|n| {
            let st = t.lstat(format!("/d/{n}").as_bytes()).unwrap();
            format!("{} {:o} {}.{:09}0 d/{n}", st.size, st.mode & 0o7777, st.mtime.sec, st.mtime.nsec)
        })
        .collect();
    let st = t.stat(b"/d").unwrap();
    lines.push(format!("{} {:o} {}.{:09}0 d", st.size, st.mode & 0o7777, st.mtime.sec, st.mtime.nsec));
    lines.sort();
    lines.join("\n") + "\n"
}

const FIND: &str = "find d -printf '%s %m %T@ %p\\n' | sort";

/// Makes `d` through the mount as an untar does (each file created, written, closed, its
/// mode and times set), then appends to `f0`, links `f2` as `l2`, makes the symlinks `s1`
/// and `s2` and reads `s1`, renames the last file `r`; lists it with every file's
/// attributes. Returns (bare entries, GETATTRs + LOOKUPs) of that listing.
fn untar_then_find(m: &Mounted) -> (u64, u64) {
    let h = m.handle.as_ref().unwrap();
    let d = m.path().join("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..FILES {
        std::fs::write(d.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let script = format!(
        "chmod 640 d/f* && touch -d @1000000 d/f* && printf + >> d/f0 && ln d/f2 d/l2 \
         && ln -s f1 d/s1 && ln -s f2 d/s2 && readlink d/s1 && mv d/f{} d/r",
        FILES - 1
    );
    sh(m.path(), &script);
    let asked = |h: &uvfs_fuse::MountHandle| count(h, "GETATTR") + count(h, "LOOKUP");
    let before = (h.bare_entries(), asked(h));
    assert_eq!(sh(m.path(), FIND), truth(m));
    (h.bare_entries() - before.0, asked(h) - before.1)
}

#[test]
fn known_files_are_listed_without_attributes_and_still_right() {
    require(&[]);
    let m = Mounted::new(MountOptions::default());
    assert!(m.handle.as_ref().unwrap().levers().contains(Levers::KNOWN_ENTRIES));
    let (bare, asked) = untar_then_find(&m);
    // All but f0 (written after its times were set), the first listed of f2 and l2
    // (linked; that entry gives the kernel the inode's attributes, so the other name is
    // listed bare), s1 (read: the kernel dropped its atime) and r (renamed: its ctime).
    assert_eq!(bare, FILES as u64 + 3 - 4, "entries listed without attributes");
    // The directory's own attributes (dropped by the creates in it); no file's.
    assert!(asked <= 2, "GETATTR + LOOKUP during the listing: {asked}");
    // A file listed bare is shown as the kernel held it, which is what uvfs holds.
    let meta = std::fs::metadata(m.path().join("d/f5")).unwrap();
    assert_eq!((meta.len(), meta.mode() & 0o777, meta.mtime()), (6, 0o640, 1_000_000));

    // Changed in-process: the invalidations reach the kernel, and the next listing (the
    // new name drops the cached one) shows the new size of f3.
    let t = m.vfs.root_task();
    t.truncate(b"/d/f3", 0).unwrap();
    t.close(t.open(b"/d/new", uvfs::OpenFlags::CREAT | uvfs::OpenFlags::WRONLY, 0o600).unwrap()).unwrap();
    let start = std::time::Instant::now();
    loop {
        let (got, want) = (sh(m.path(), FIND), truth(&m));
        if got == want {
            break;
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "listing never caught up:\n{got}\nwant:\n{want}");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }

    // The lever off: every entry gets its attributes, and the round trips are the same.
    let m = Mounted::new(MountOptions { levers: Levers::DEFAULT - Levers::KNOWN_ENTRIES, ..MountOptions::default() });
    let (bare, asked_off) = untar_then_find(&m);
    assert_eq!(bare, 0);
    assert_eq!(asked_off, asked, "GETATTR + LOOKUP with the lever off");
}
