//! `MountOptions::busy_poll`: a `/dev/fuse` worker that keeps asking for the next request
//! takes back-to-back requests without sleeping, one that does not poll never does, and
//! one whose requests come further apart than its window stops polling. Counts of
//! requests and polling windows, never times. The tests run beside each other on a few
//! CPUs, where polling would pause for the busy CPUs (`tests/busy_cpus.rs`), so they
//! keep it polling (`poll_on_busy_cpus`).

mod common;

use std::time::Duration;

use common::{TempDir, count};
use uvfs_fuse::{MountOptions, Transport};

/// Mounts a memfs over `/dev/fuse` with one worker and nothing cached, so that each
/// `stat` of a file is a LOOKUP and a GETATTR; stats it 200 times. Returns
/// (LOOKUPs and GETATTRs sent meanwhile, requests taken by polling meanwhile, polling
/// windows opened meanwhile).
fn stats(busy_poll: Duration) -> (u64, u64, u64) {
    let dir = TempDir::new("mnt");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    let opts = MountOptions {
        transport: Transport::Dev,
        threads: 1,
        busy_poll,
        poll_on_busy_cpus: true,
        ..MountOptions::uncached()
    };
    let h = uvfs_fuse::spawn(&vfs, dir.path(), &opts).expect("mount");
    let f = dir.path().join("f");
    std::fs::write(&f, b"x").unwrap();
    let before = (count(&h, "LOOKUP") + count(&h, "GETATTR"), h.polled(), h.poll_windows());
    for _ in 0..200 {
        assert_eq!(std::fs::metadata(&f).unwrap().len(), 1);
    }
    let sent = count(&h, "LOOKUP") + count(&h, "GETATTR") - before.0;
    let polled = h.polled() - before.1;
    let windows = h.poll_windows() - before.2;
    h.unmount().unwrap();
    (sent, polled, windows)
}

#[test]
fn a_polling_worker_takes_back_to_back_requests_without_sleeping() {
    // A window far longer than any gap between two stats: every request after the
    // first answered one arrives while the (only) worker polls.
    let (sent, polled, _) = stats(Duration::from_secs(10));
    assert!(sent >= 400, "each stat is a LOOKUP and a GETATTR: {sent}");
    assert!(polled >= sent, "{polled} of {sent} requests taken by polling");
}

/// One GETATTR (an `fstat`, nothing cached) every 2 ms against a 100 us window: each
/// request comes after the window, so the window halves and then stays closed: a few
/// windows for 200 requests, where a fixed window would open one after every reply (and
/// this test fails, checked by making the window fixed). (The
/// gap is a sleep, never shorter than asked, so this holds on any machine.)
#[test]
fn a_worker_stops_polling_for_requests_that_come_later_than_its_window() {
    let dir = TempDir::new("mnt");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    let opts = MountOptions {
        transport: Transport::Dev,
        threads: 1,
        busy_poll: Duration::from_micros(100),
        poll_on_busy_cpus: true,
        ..MountOptions::uncached()
    };
    let h = uvfs_fuse::spawn(&vfs, dir.path(), &opts).expect("mount");
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let f = std::fs::File::open(dir.path().join("f")).unwrap();
    let before = (count(&h, "GETATTR"), h.polled(), h.poll_windows());
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(f.metadata().unwrap().len(), 1);
    }
    let sent = count(&h, "GETATTR") - before.0;
    let (polled, windows) = (h.polled() - before.1, h.poll_windows() - before.2);
    drop(f);
    h.unmount().unwrap();
    println!("{sent} GETATTRs 2 ms apart: {windows} polling windows, {polled} requests taken in them");
    assert!(sent >= 200, "each fstat is a GETATTR: {sent}");
    // A few while the window closes, and for the odd request sent without waiting (the
    // RELEASE of the file written before) that comes right after a reply.
    assert!(windows <= 10, "{windows} polling windows for {sent} requests 2 ms apart");
}

#[test]
fn a_worker_that_does_not_poll_sleeps_for_every_request() {
    let (sent, polled, windows) = stats(Duration::ZERO);
    assert!(sent >= 400, "{sent}");
    assert_eq!((polled, windows), (0, 0));
}
