//! `Levers::RELIST` (on by default): after a directory's files are read, the server tells
//! the kernel to drop the directory's cached listing, so that a `find` (or `ls -l`) after
//! the reads costs a listing with attributes, not a GETATTR per file (the kernel forgets
//! a file's attributes when a read of it reaches the server). Counts of requests, never
//! times.

mod common;

use std::time::{Duration, Instant};

use common::{Mounted, count, sh};
use uvfs_fuse::{Levers, MountOptions};

const FILES: usize = 40;

/// Makes `d` with [`FILES`] files through the mount, lists it with every file's
/// attributes, reads every file, then lists it again with attributes; returns the
/// GETATTRs and READDIRPLUSes of that last listing.
fn find_after_reads(m: &Mounted) -> (u64, u64) {
    let h = m.handle.as_ref().unwrap();
    let d = m.path().join("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..FILES {
        std::fs::write(d.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    let find = "find d -printf '%s %p\\n' | sort";
    let first = sh(m.path(), find);
    assert_eq!(first.lines().count(), FILES + 1, "{first}");
    for i in 0..FILES {
        assert_eq!(std::fs::read_to_string(d.join(format!("f{i}"))).unwrap(), format!("file {i}"));
    }
    if h.levers().contains(Levers::RELIST) {
        // The notification is sent by a thread of its own; wait for it (the bound only
        // turns a bug into a failure instead of a hang).
        let start = Instant::now();
        while h.relisted() == 0 {
            assert!(start.elapsed() < Duration::from_secs(10), "the listing was never dropped");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let before = (count(h, "GETATTR"), count(h, "READDIRPLUS"));
    assert_eq!(sh(m.path(), find), first);
    (count(h, "GETATTR") - before.0, count(h, "READDIRPLUS") - before.1)
}

#[test]
fn a_listing_after_reads_refreshes_the_files_attributes_at_once() {
    let m = Mounted::new(MountOptions::default());
    let (getattrs, listings) = find_after_reads(&m);
    // One directory told (`d`); the listing is read again and brings every file's
    // attributes; what is left is the directory's own (the drop took its attributes too).
    assert_eq!(m.handle.as_ref().unwrap().relisted(), 1);
    assert!(listings >= 1 && getattrs <= 2, "READDIRPLUS {listings}, GETATTR {getattrs}");

    // The lever off: the listing stays cached, and each file read is a GETATTR.
    let m = Mounted::new(MountOptions { levers: Levers::DEFAULT - Levers::RELIST, ..MountOptions::default() });
    let (getattrs, listings) = find_after_reads(&m);
    assert_eq!(m.handle.as_ref().unwrap().relisted(), 0);
    assert!(listings == 0 && getattrs >= FILES as u64, "READDIRPLUS {listings}, GETATTR {getattrs}");
}
