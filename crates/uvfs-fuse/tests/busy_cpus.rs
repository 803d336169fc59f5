//! A busy-polling `/dev/fuse` worker stops polling while every CPU has other work
//! (`transport::dev`, `Crew::idle`): there its yields hand the CPU to the busy threads,
//! and the requests it holds the polling token for wait until the scheduler gives the CPU
//! back (the followers are parked meanwhile), which made a `make -j2` on 2 CPUs slower
//! with polling than without. Counts of requests and pauses, never times. (A file of its
//! own: the spinning threads would disturb every other mount test of the binary.)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{TempDir, count};
use uvfs_fuse::{MountOptions, Transport};

#[test]
fn polling_pauses_while_every_cpu_is_busy() {
    common::require(&[]);
    let dir = TempDir::new("mnt");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    // A window far longer than the test, as in `followers.rs`: without the pause the
    // worker that answers first would poll throughout and take every request.
    let opts = MountOptions {
        transport: Transport::Dev,
        threads: 2,
        busy_poll: Duration::from_secs(60),
        ..MountOptions::uncached()
    };
    let h = uvfs_fuse::spawn(&vfs, dir.path(), &opts).expect("mount");
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let f = std::fs::File::open(dir.path().join("f")).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 1);

    // One spinning thread per CPU, in the normal class: a yield of the poller gives its
    // CPU to one of them until its slice ends.
    let stop = Arc::new(AtomicBool::new(false));
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..cpus)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let (sent0, polled0, c0) = (count(&h, "GETATTR"), h.polled(), h.follower_counts());
    for _ in 0..500 {
        assert_eq!(f.metadata().unwrap().len(), 1);
    }
    let (sent, polled, c) = (count(&h, "GETATTR") - sent0, h.polled() - polled0, h.follower_counts());
    stop.store(true, Ordering::Relaxed);
    for t in hogs {
        t.join().unwrap();
    }
    drop(f);
    h.unmount().unwrap();
    let pauses = c.backoffs - c0.backoffs;
    println!("{sent} GETATTRs beside {cpus} spinning threads: {polled} taken by polling, {pauses} pauses");
    assert!(sent >= 500, "each fstat is a GETATTR: {sent}");
    assert!(pauses >= 1, "the poller never found its CPU busy");
    // Each pause lasts 10 ms to 200 ms; what polling still takes is the requests of the
    // windows between them.
    assert!(polled * 2 < sent, "{polled} of {sent} requests taken by polling beside busy CPUs");
}
