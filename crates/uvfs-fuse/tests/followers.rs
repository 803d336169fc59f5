//! `/dev/fuse` workers that do not poll stay off the device while one polls
//! (`transport::dev`): the kernel wakes a worker waiting for the device for every request,
//! also one the poller takes first, and a woken worker that finds nothing sleeps again
//! inside the kernel, so a waiting second worker used to be woken for nearly every request.
//! Counts of context switches, never times. (A file of its own: the test reads the
//! scheduler counts of this process's `uvfs-fuse-N` threads, which another mount's
//! workers would share the names of.)

mod common;

use common::{TempDir, count};
use uvfs_fuse::MountOptions;

/// The voluntary context switches (times it slept) of each of this process's threads
/// whose name starts with `uvfs-fuse-` and a digit: the `/dev/fuse` workers.
fn worker_sleeps() -> u64 {
    let mut sum = 0;
    for tid in common::dev_worker_threads() {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap_or_default();
        let n = status.lines().find_map(|l| l.strip_prefix("voluntary_ctxt_switches:")).map(str::trim);
        sum += n.and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    }
    sum
}

#[test]
fn a_second_worker_sleeps_through_requests_the_poller_takes() {
    common::require(&[]);
    let dir = TempDir::new("mnt");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    // A window far longer than the test: the worker that answers first polls throughout,
    // and nothing is cached, so each `fstat` is a GETATTR.
    // Polling throughout also beside the other tests' mounts (`tests/busy_cpus.rs`).
    let opts = MountOptions { poll_on_busy_cpus: true, ..common::polling_options() };
    let h = uvfs_fuse::spawn(&vfs, dir.path(), &opts).expect("mount");
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let f = std::fs::File::open(dir.path().join("f")).unwrap();
    assert_eq!(f.metadata().unwrap().len(), 1);
    let (sent0, sleeps0, c0) = (count(&h, "GETATTR"), worker_sleeps(), h.follower_counts());
    for _ in 0..2000 {
        assert_eq!(f.metadata().unwrap().len(), 1);
    }
    let (sent, sleeps, c) = (count(&h, "GETATTR") - sent0, worker_sleeps() - sleeps0, h.follower_counts());
    drop(f);
    h.unmount().unwrap();
    // What the second worker may sleep for besides the device: its parking and, keeping
    // watch, one timed wait per look at the poller. A look that finds the poller on the
    // same request as the look before calls the follower back to the device (a rescue;
    // `transport::dev`'s unit tests check when), where it sleeps until a request wakes it
    // and then parks again: a stall of the poller's vCPU for a millisecond does that here
    // now and then, as it should, so rescues are allowed for, not counted as a fault.
    let (parks, looks, rescues) = (c.parks - c0.parks, c.looks - c0.looks, c.rescues - c0.rescues);
    println!(
        "{sent} GETATTRs: the workers slept {sleeps} times; the follower parked {parks} times, looked {looks} times, \
         was called back {rescues} times"
    );
    assert!(sent >= 2000, "each fstat is a GETATTR: {sent}");
    // Before, the second worker slept once for nearly every request (1,9xx here).
    assert!(
        sleeps <= parks + looks + 2 * rescues + 20,
        "{sleeps} sleeps for {sent} requests ({parks} parks, {looks} looks, {rescues} rescues)"
    );
}
