//! The `/dev/fuse` poller sits on its caller's CPU in `SCHED_IDLE` while it polls
//! (`transport::dev`, "The poller on its caller's CPU"), so that neither the request nor
//! the reply wakes a thread across CPUs; with `QueueClass::Normal` it stays where the
//! scheduler puts it. Classes, CPU sets and counts, never times. (A file of its own: the
//! test reads the classes and CPU sets of this process's `uvfs-fuse-N` threads, which
//! another mount's workers would share the names of.)

mod common;

use common::{TempDir, count};
use uvfs_fuse::transport::sched::is_idle_class;
use uvfs_fuse::{MountOptions, QueueClass};

/// The CPUs thread `tid` of this process may run on (`Cpus_allowed_list`, e.g. `0-1,3`).
fn allowed(tid: i32) -> Vec<usize> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    cpus
}

/// This thread's id.
fn gettid() -> i32 {
    uvfs_fuse::transport::sched::gettid()
}

/// A worker as seen from outside: (thread id, in `SCHED_IDLE`, allowed CPUs).
type Worker = (i32, bool, Vec<usize>);

/// What the workers are.
fn seen() -> Vec<Worker> {
    common::dev_worker_threads().into_iter().map(|t| (t, is_idle_class(t), allowed(t))).collect()
}

/// Mounts a memfs with `class` (two workers, a polling window far longer than the test,
/// nothing cached) and `fstat`s a file on it 2,000 times, each a GETATTR; then, the window
/// still open, returns what the workers are, the windows begun on the caller's CPU, and
/// the CPU this thread runs on. With `follow`, the `fstat`s go on (at most 100,000 more)
/// until the poller in `SCHED_IDLE` is kept on this thread's CPU: the scheduler may move
/// this thread now and then, and the poller follows it within a few requests.
fn after_fstats(class: QueueClass, follow: bool) -> (Vec<Worker>, u64, usize) {
    // Not `common::Mounted`: `UVFS_FUSE_TRANSPORT` would move it to io_uring.
    let dir = TempDir::new("mnt");
    let vfs = uvfs::Vfs::new(uvfs::VfsConfig::default());
    let opts = MountOptions { queue_class: class, ..common::polling_options() };
    let h = uvfs_fuse::spawn(&vfs, dir.path(), &opts).expect("mount");
    std::fs::write(dir.path().join("f"), b"x").unwrap();
    let f = std::fs::File::open(dir.path().join("f")).unwrap();
    let sent0 = count(&h, "GETATTR");
    for _ in 0..2000 {
        assert_eq!(f.metadata().unwrap().len(), 1);
    }
    assert!(count(&h, "GETATTR") - sent0 >= 2000, "each fstat is a GETATTR");
    let mut more = 0;
    let (mut now, mut me) = (seen(), rustix::thread::sched_getcpu());
    while follow && more < 100_000 && !now.iter().any(|w| w.1 && w.2 == [me]) {
        assert_eq!(f.metadata().unwrap().len(), 1);
        more += 1;
        (now, me) = (seen(), rustix::thread::sched_getcpu());
    }
    let c = h.follower_counts();
    drop(f);
    h.unmount().unwrap();
    println!(
        "{class:?}: workers {now:?}, {} windows on the caller's CPU, {} moves after it, the caller on CPU {me} \
         ({more} fstats more)",
        c.seats, c.moves
    );
    (now, c.seats, me)
}

#[test]
fn the_poller_sits_on_its_callers_cpu_in_the_idle_class() {
    common::require(&[]);
    let all = allowed(gettid());
    let (seen, seats, me) = after_fstats(QueueClass::Idle, true);
    assert_eq!(seen.len(), 2, "two workers: {seen:?}");
    assert!(seats >= 1, "no window began on the caller's CPU");
    // One of them polls, on the caller's CPU and in the idle class; the other is parked
    // where it may run anywhere, in the normal class.
    let idle: Vec<_> = seen.iter().filter(|w| w.1).collect();
    assert_eq!(idle.len(), 1, "one poller in SCHED_IDLE: {seen:?}");
    assert_eq!(idle[0].2, vec![me], "the poller is kept on the caller's CPU");
    let other = seen.iter().find(|w| !w.1).unwrap();
    assert_eq!(other.2, all, "the parked follower may run on every CPU");

    let (seen, seats, _) = after_fstats(QueueClass::Normal, false);
    assert_eq!(seats, 0);
    assert!(seen.iter().all(|w| !w.1 && w.2 == all), "in the normal class, on every CPU: {seen:?}");
}
