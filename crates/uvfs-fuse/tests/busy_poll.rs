//! `MountOptions::busy_poll`: a `/dev/fuse` worker that keeps asking for the next request
//! takes back-to-back requests without sleeping, and one that does not poll never does.
//! Counts of requests, never times.

mod common;

use std::time::Duration;

use common::TempDir;
use uvfs_fuse::{MountHandle, MountOptions, Transport};

fn count(h: &MountHandle, op: &str) -> u64 {
    h.requests().iter().find(|(o, _)| *o == op).map_or(0, |r| r.1)
}

/// Mounts a memfs over `/dev/fuse` with one worker and nothing cached, so that each
/// `stat` of a file is a LOOKUP and a GETATTR; stats it 200 times. Returns (LOOKUPs and
/// GETATTRs sent meanwhile, requests taken by polling meanwhile).
fn stats(busy_poll: Duration) -> (u64, u64) {
    let dir = TempDir::new("mnt");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    let opts = MountOptions { transport: Transport::Dev, threads: 1, busy_poll, ..MountOptions::uncached() };
    let h = uvfs_fuse::spawn(&vfs, dir.path(), &opts).expect("mount");
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let before = (count(&h, "LOOKUP") + count(&h, "GETATTR"), h.polled());
    for _ in 0..200 {
        assert_eq!(std::fs::metadata(&f).unwrap().len(), 1);
    }
    let sent = count(&h, "LOOKUP") + count(&h, "GETATTR") - before.0;
    let polled = h.polled() - before.1;
    h.unmount().unwrap();
    (sent, polled)
}

#[test]
fn a_polling_worker_takes_back_to_back_requests_without_sleeping() {
    // A window far longer than any gap between two stats: every request after the
    // first answered one arrives while the (only) worker polls.
    let (sent, polled) = stats(Duration::from_secs(10));
    assert!(sent >= 400, "each stat is a LOOKUP and a GETATTR: {sent}");
    assert!(polled >= sent, "{polled} of {sent} requests taken by polling");
}

#[test]
fn a_worker_that_does_not_poll_sleeps_for_every_request() {
    let (sent, polled) = stats(Duration::ZERO);
    assert!(sent >= 400, "{sent}");
    assert_eq!(polled, 0);
}
