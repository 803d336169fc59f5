//! `MountOptions::queue_class`: the io_uring queue threads move into `SCHED_IDLE` while
//! requests come (so that a caller and the queue serving it share a CPU), go back to the
//! normal class when one starves behind programs that never sleep (so that requests are
//! still answered), and stay in the normal class with `QueueClass::Normal`. Counts of
//! class moves and the threads' classes, never times. Over io_uring as root only: the
//! output says when a test could not run.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::Mounted;
use parking_lot::Mutex;
use uvfs_fuse::transport::sched::is_idle_class as idle_class;
use uvfs_fuse::{MountOptions, QueueClass, Transport};

/// The tests take turns: each looks at the queue threads of the whole process.
static TURN: Mutex<()> = Mutex::new(());

/// The io_uring queue threads (`uvfs-fuse-qN`).
fn queue_threads() -> Vec<i32> {
    common::fuse_threads(|r| r.starts_with('q'))
}

/// How many `/dev/fuse` workers (`uvfs-fuse-N`) there are.
fn dev_workers() -> usize {
    common::dev_worker_threads().len()
}

/// A memfs mounted with nothing cached (each `stat` is a LOOKUP and a GETATTR) and
/// `class`, or `None` (said) where the queues cannot be tested here.
fn mount(class: QueueClass) -> Option<Mounted> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("not root: the queue threads could not leave SCHED_IDLE again; not tested");
        return None;
    }
    let m = Mounted::new(MountOptions { queue_class: class, ..MountOptions::uncached() });
    if m.handle.as_ref().unwrap().transport() != Transport::Uring {
        println!("no FUSE over io_uring here: no queue threads to test");
        return None;
    }
    Some(m)
}

fn stats(m: &Mounted, n: usize) {
    let f = m.path().join("f");
    if !f.exists() {
        std::fs::write(&f, b"x").unwrap();
    }
    for _ in 0..n {
        assert_eq!(std::fs::metadata(&f).unwrap().len(), 1);
    }
}

/// A thread spinning on each CPU, at the normal priority, until dropped.
struct Spinners(Arc<AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl Spinners {
    /// Returns once every spinning thread is on its CPU: requests sent before would not
    /// wait behind them (200 `stat`s take a few milliseconds, less than one look of the
    /// guard, which then saw no queue thread starve: the test failed about one run in
    /// eight that way).
    fn start() -> Spinners {
        let stop = Arc::new(AtomicBool::new(false));
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let spinning = Arc::new(std::sync::Barrier::new(cpus + 1));
        let threads = (0..cpus)
            .map(|cpu| {
                let (stop, spinning) = (stop.clone(), spinning.clone());
                std::thread::spawn(move || {
                    let mut set = rustix::thread::CpuSet::new();
                    set.set(cpu);
                    let _ = rustix::thread::sched_setaffinity(None, &set);
                    spinning.wait();
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        spinning.wait();
        // A thread past the barrier may still wait for its CPU (the scheduler places it).
        std::thread::sleep(std::time::Duration::from_millis(20));
        Spinners(stop, threads)
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn queue_threads_go_idle_while_requests_come_and_back_when_starved() {
    let _turn = TURN.lock();
    let Some(m) = mount(QueueClass::Idle) else { return };
    let h = m.handle.as_ref().unwrap();
    stats(&m, 200);
    let (promoted, _) = h.queue_class_moves();
    assert!(promoted >= 1, "no queue thread moved into SCHED_IDLE");
    // The guard keeps them there for a second after the last request.
    let idle = queue_threads().into_iter().filter(|&t| idle_class(t)).count();
    assert!(idle >= 1, "no queue thread in SCHED_IDLE right after 200 requests");

    // Every CPU busy with a program that never sleeps: an idle-class queue thread would
    // wait for a time slice the scheduler hardly gives it; the guard moves it back, and
    // the stats are answered.
    let (_, demoted_before) = h.queue_class_moves();
    {
        let _spin = Spinners::start();
        stats(&m, 200);
    }
    let (_, demoted) = h.queue_class_moves();
    assert!(demoted > demoted_before, "no queue thread moved back while every CPU was busy");
}

#[test]
fn normal_class_queue_threads_never_move() {
    let _turn = TURN.lock();
    let Some(m) = mount(QueueClass::Normal) else { return };
    stats(&m, 200);
    assert_eq!(m.handle.as_ref().unwrap().queue_class_moves(), (0, 0));
    let q = queue_threads();
    assert!(!q.is_empty());
    assert!(q.iter().all(|&t| !idle_class(t)), "a queue thread of a normal-class mount is in SCHED_IDLE");
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "never happened: {what}");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Once io_uring carries the requests, FORGETs (and INTERRUPTs) still come through
/// `/dev/fuse`, and the kernel wakes a worker sleeping in `read` for each from the
/// caller's CPU. So one worker is left, which looks without sleeping in `read`: the
/// others end at their next wake-up, and every node the kernel forgets still reaches the
/// server.
#[test]
fn one_dev_worker_drains_forgets_once_io_uring_serves() {
    let _turn = TURN.lock();
    let Some(m) = mount(QueueClass::Normal) else { return };
    let h = m.handle.as_ref().unwrap();
    for i in 0..300 {
        std::fs::write(m.path().join(format!("f{i}")), b"x").unwrap();
    }
    assert!(h.nodes() > 300, "nodes held: {}", h.nodes());
    for i in 0..300 {
        std::fs::remove_file(m.path().join(format!("f{i}"))).unwrap();
    }
    eventually("the removed files' nodes forgotten", || h.nodes() == 1);
    eventually("one /dev/fuse worker left", || dev_workers() == 1);
}
