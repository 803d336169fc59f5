//! The io_uring queue threads' scheduling class (Linux's `SCHED_IDLE`), and the guard that
//! steps a starved queue thread back to the normal class.
//!
//! Why: a request's round trip costs most where the caller and the server run on two CPUs,
//! since each side then wakes the other across CPUs (an IPI, and in a virtual machine an
//! exit to the hypervisor each way). io_uring already hands a request to the queue of the
//! caller's CPU, so the request's wake-up stays on that CPU; but the reply's does not: the
//! scheduler puts a woken task on an idle CPU rather than next to a running one, so the
//! caller leaves the queue thread's CPU at every reply. A CPU that runs only `SCHED_IDLE`
//! tasks counts as idle for that choice (`sched_idle_cpu`), so with idle-class queue
//! threads the caller is woken where it slept and preempts the queue thread at once: the
//! round trip never leaves the CPU. On the VM of BENCHMARKS.md ("io_uring queue threads
//! in the idle class"), where a cross-CPU wake-up cost about 50 us, an untar took 1.8-2.5
//! s against 3.3-5.0 s in the normal class.
//!
//! The risk: an idle-class thread runs only when its CPU has nothing else to run, so on a
//! busy CPU a request could wait. The guard bounds that wait. While the queues serve
//! requests it reads each queue thread's scheduler statistics every [`TICK`]
//! (`/proc/self/task/TID/schedstat`: time spent runnable but waiting, and times run); a
//! thread that waited a quarter of the tick or more, [`STARVED_WAIT`] or more on average
//! before each run ([`starved`]), is moved back to the normal class for a while
//! ([`HOLD_MIN`], doubling up to [`HOLD_MAX`] while it keeps starving), then tried again. When no request came for [`IDLE_AFTER`] the guard puts every queue
//! thread back in the normal class and sleeps until a queue serves the next request, so
//! an unused mount costs no ticks, and a request that comes to a busy machine meanwhile
//! is served at normal priority.
//!
//! Only where the server may leave `SCHED_IDLE` again (root, `CAP_SYS_NICE`, or an
//! `RLIMIT_NICE` of 20): without that, the guard could not step a starved thread back, so
//! the queue threads stay in the normal class ([`QueueClass::Idle`] then says why once).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The class of the io_uring queue threads and of the `/dev/fuse` poller
/// ([`crate::MountOptions::queue_class`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum QueueClass {
    /// `SCHED_IDLE` while requests come, watched by the guard (io_uring) or by the
    /// watching follower (`/dev/fuse`, where the poller also sits on its caller's CPU),
    /// where the server may step back to the normal class; else normal.
    #[default]
    Idle,
    /// The normal class (`SCHED_OTHER`), always.
    Normal,
}

/// How often the guard looks at the queue threads while requests come.
pub const TICK: Duration = Duration::from_millis(4);
/// How long a starved queue thread stays in the normal class the first time.
pub const HOLD_MIN: Duration = Duration::from_millis(100);
/// The longest stay in the normal class; a thread that keeps starving stays this long
/// between tries.
pub const HOLD_MAX: Duration = Duration::from_secs(5);
/// How long without a request before the guard stops ticking.
pub const IDLE_AFTER: Duration = Duration::from_secs(1);

/// A thread's scheduler statistics (`/proc/.../schedstat`), in nanoseconds and counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStat {
    /// Time spent waiting on a run queue (runnable, not running).
    pub run_delay_ns: u64,
    /// Times it was put on a CPU.
    pub timeslices: u64,
}

impl SchedStat {
    /// Parses `schedstat`: "run-time run-delay timeslices".
    pub fn parse(s: &[u8]) -> Option<SchedStat> {
        let mut it = std::str::from_utf8(s).ok()?.split_ascii_whitespace().map(|w| w.parse::<u64>().ok());
        let _run_time = it.next()??;
        Some(SchedStat { run_delay_ns: it.next()??, timeslices: it.next()?? })
    }
}

/// Whether a thread starved between two readings `tick` apart: it waited on a run queue
/// for a quarter of it or more, at least [`STARVED_WAIT`] on average each time before it
/// was put on a CPU. An idle-class thread serving a caller on its CPU waits too, while
/// the caller it woke runs, but only as long as that caller computes between two requests
/// (microseconds for an untar), and it runs many times a tick; one behind a program that
/// does not sleep waits milliseconds each time.
pub fn starved(before: SchedStat, after: SchedStat, tick: Duration) -> bool {
    let waited = u128::from(after.run_delay_ns.saturating_sub(before.run_delay_ns));
    let runs = u128::from(after.timeslices.saturating_sub(before.timeslices).max(1));
    waited * 4 >= tick.as_nanos() && waited / runs >= STARVED_WAIT.as_nanos()
}

/// The mean wait before each run on a CPU above which a queue thread counts as starved.
pub const STARVED_WAIT: Duration = Duration::from_micros(500);

/// Moves thread `tid` of this process to `SCHED_IDLE` (`idle`) or `SCHED_OTHER`.
pub fn set_class(tid: i32, idle: bool) -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    let policy = if idle { libc::SCHED_IDLE } else { libc::SCHED_OTHER };
    // SAFETY: `param` is a valid `sched_param` for the call's duration; a thread id of
    // this process (or 0, the caller) names the thread to change.
    if unsafe { libc::sched_setscheduler(tid, policy, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether thread `tid` is in `SCHED_IDLE` now.
pub fn is_idle_class(tid: i32) -> bool {
    // SAFETY: no pointers; a thread id of this process.
    unsafe { libc::sched_getscheduler(tid) == libc::SCHED_IDLE }
}

/// The calling thread's id.
pub fn gettid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// Why the server could not leave `SCHED_IDLE` once in it, tried on a thread of its own
/// (which ends either way): `None` if it can.
pub(crate) fn cannot_step_back() -> Option<String> {
    let probe = std::thread::Builder::new().name("uvfs-sched-probe".into()).spawn(|| {
        set_class(0, true).map_err(|e| format!("SCHED_IDLE: {e}"))?;
        set_class(0, false).map_err(|_| "leaving SCHED_IDLE needs CAP_SYS_NICE".to_string())
    });
    match probe.map(JoinHandle::join) {
        Ok(Ok(Ok(()))) => None,
        Ok(Ok(Err(why))) => Some(why),
        _ => Some("the probe thread did not run".into()),
    }
}

/// One queue thread, as the guard sees it. Aligned to a cache line: `served` is written by
/// its queue thread at every batch, and must not share a line with another queue's.
#[repr(align(64))]
#[derive(Default)]
struct Slot {
    /// Atomic: the thread's id while it serves (0 before it enters and after it ends).
    tid: AtomicI32,
    /// Atomic: batches of requests it served; written by its thread only.
    served: AtomicU64,
}

/// What the queue threads and the guard share.
pub(crate) struct Shared {
    /// Immutable length: one per queue (index = qid).
    slots: Vec<Slot>,
    /// Atomic: the guard sleeps until a queue serves (`served` then unparks it).
    parked: AtomicBool,
    /// Atomic: queue threads still running; the last to end stops the guard.
    live: AtomicUsize,
    /// Atomic: the guard should end.
    stop: AtomicBool,
    /// Set once: the guard's thread, to unpark.
    guard: std::sync::OnceLock<std::thread::Thread>,
    /// Atomic: queue threads moved back to the normal class after starving.
    pub(crate) demotions: AtomicU64,
    /// Atomic: moves of a queue thread into `SCHED_IDLE`.
    pub(crate) promotions: AtomicU64,
}

impl Shared {
    /// Called by queue `qid`'s thread before it serves: from now on the guard may change
    /// its class.
    pub(crate) fn enter(&self, qid: usize) {
        if let Some(s) = self.slots.get(qid) {
            s.tid.store(gettid(), Ordering::Release);
        }
    }

    /// Called by queue `qid`'s thread after each batch of requests it answered.
    pub(crate) fn served(&self, qid: usize) {
        if let Some(s) = self.slots.get(qid) {
            s.served.fetch_add(1, Ordering::SeqCst);
        }
        // SeqCst with the guard's store of `parked` and its reading of `served`: either it
        // sees this batch, or this sees it parked.
        if self.parked.load(Ordering::SeqCst)
            && self.parked.swap(false, Ordering::SeqCst)
            && let Some(g) = self.guard.get()
        {
            g.unpark();
        }
    }

    /// Called by queue `qid`'s thread as it ends. Its id is cleared first, so that the
    /// guard does not change the class of a thread that reuses it; the last one ends the
    /// guard.
    pub(crate) fn exit(&self, qid: usize) {
        if let Some(s) = self.slots.get(qid) {
            s.tid.store(0, Ordering::SeqCst);
        }
        if self.live.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.end();
        }
    }

    /// Ends the guard (after the last queue, or when the queues could not all start).
    pub(crate) fn end(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(g) = self.guard.get() {
            g.unpark();
        }
    }

    fn total_served(&self) -> u64 {
        self.slots.iter().map(|s| s.served.load(Ordering::SeqCst)).sum()
    }
}

/// Starts the guard for `n` queues, or says why the queue threads stay in the normal class.
pub(crate) fn start(n: usize) -> Result<(Arc<Shared>, JoinHandle<()>), String> {
    if let Some(why) = cannot_step_back() {
        return Err(why);
    }
    let shared = Arc::new(Shared {
        slots: (0..n).map(|_| Slot::default()).collect(),
        parked: AtomicBool::new(true),
        live: AtomicUsize::new(n),
        stop: AtomicBool::new(false),
        guard: std::sync::OnceLock::new(),
        demotions: AtomicU64::new(0),
        promotions: AtomicU64::new(0),
    });
    let s = shared.clone();
    let t = std::thread::Builder::new()
        .name("uvfs-fuse-guard".into())
        .spawn(move || guard(&s))
        .map_err(|e| format!("cannot start the guard thread: {e}"))?;
    let _ = shared.guard.set(t.thread().clone());
    Ok((shared, t))
}

/// The guard's view of one queue thread.
struct Watched {
    tid: i32,
    /// Its `schedstat`, kept open (read again from offset 0 each tick).
    stat: Option<File>,
    last: SchedStat,
    idle: bool,
    /// In the normal class until then, after starving.
    until: Option<Instant>,
    /// The next stay in the normal class.
    hold: Duration,
    /// When it last entered `SCHED_IDLE`.
    since: Instant,
}

impl Watched {
    fn read(&self) -> Option<SchedStat> {
        let f = self.stat.as_ref()?;
        let mut buf = [0u8; 96];
        let n = f.read_at(&mut buf, 0).ok()?;
        SchedStat::parse(&buf[..n])
    }

    fn set(&mut self, shared: &Shared, idle: bool) {
        // Only while its queue thread runs: an ended thread's id may name another's soon.
        let alive = shared.slots.iter().any(|s| s.tid.load(Ordering::SeqCst) == self.tid);
        if self.idle != idle && alive && set_class(self.tid, idle).is_ok() {
            self.idle = idle;
            if idle {
                shared.promotions.fetch_add(1, Ordering::Relaxed);
                self.since = Instant::now();
            }
        }
    }
}

fn guard(shared: &Shared) {
    let mut watched: Vec<Watched> = Vec::new();
    loop {
        // Parked: every queue thread in the normal class.
        while shared.parked.load(Ordering::SeqCst) {
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::park();
        }
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        watch_new(shared, &mut watched);
        for w in &mut watched {
            w.last = w.read().unwrap_or_default();
            if w.until.is_none() {
                w.set(shared, true);
            }
        }
        let mut seen = shared.total_served();
        let mut last_request = Instant::now();
        loop {
            std::thread::sleep(TICK);
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            let now = Instant::now();
            // A queue that registered after the others: into the idle class too.
            for w in watch_new(shared, &mut watched) {
                w.set(shared, true);
            }
            for w in &mut watched {
                let Some(st) = w.read() else { continue };
                if w.idle && starved(w.last, st, TICK) {
                    w.set(shared, false);
                    if !w.idle {
                        shared.demotions.fetch_add(1, Ordering::Relaxed);
                        // A thread that starves again soon after its last try waits twice
                        // as long; one that lasted in the idle class starts over.
                        if now.duration_since(w.since) >= HOLD_MAX {
                            w.hold = HOLD_MIN;
                        }
                        w.until = Some(now + w.hold);
                        w.hold = (w.hold * 2).min(HOLD_MAX);
                    }
                } else if !w.idle && w.until.is_some_and(|u| now >= u) {
                    w.until = None;
                    w.set(shared, true);
                }
                w.last = st;
            }
            let total = shared.total_served();
            if total != seen {
                seen = total;
                last_request = now;
            } else if now.duration_since(last_request) >= IDLE_AFTER {
                for w in &mut watched {
                    w.set(shared, false);
                    w.until = None;
                }
                shared.parked.store(true, Ordering::SeqCst);
                // A batch served since the last look finds the flag set and unparks us;
                // one served before it is seen here.
                if shared.total_served() != seen {
                    shared.parked.store(false, Ordering::SeqCst);
                }
                break;
            }
        }
    }
}

/// Adds the queue threads that entered since the last call to `watched` (in the normal
/// class, their statistics read); returns the new ones.
fn watch_new<'a>(shared: &Shared, watched: &'a mut Vec<Watched>) -> &'a mut [Watched] {
    let old = watched.len();
    for s in &shared.slots {
        let tid = s.tid.load(Ordering::Acquire);
        if tid != 0 && !watched.iter().any(|w| w.tid == tid) {
            let mut w = Watched {
                tid,
                stat: File::open(format!("/proc/self/task/{tid}/schedstat")).ok(),
                last: SchedStat::default(),
                idle: false,
                until: None,
                hold: HOLD_MIN,
                since: Instant::now(),
            };
            w.last = w.read().unwrap_or_default();
            watched.push(w);
        }
    }
    &mut watched[old..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_parses_and_bad_text_is_none() {
        assert_eq!(SchedStat::parse(b"1018991 2500 7\n"), Some(SchedStat { run_delay_ns: 2500, timeslices: 7 }));
        assert_eq!(SchedStat::parse(b"1 2"), None);
        assert_eq!(SchedStat::parse(b"a b c"), None);
    }

    #[test]
    fn a_thread_starved_when_it_waited_long_each_time_it_ran() {
        let t = Duration::from_millis(4);
        let s = |d, n| SchedStat { run_delay_ns: d, timeslices: n };
        // The whole tick runnable, never run; or run once or twice after a long wait.
        assert!(starved(s(0, 5), s(4_000_000, 5), t));
        assert!(starved(s(1_000, 5), s(3_001_000, 7), t));
        assert!(starved(s(0, 5), s(1_000_000, 6), t));
        // As long in all, but a few microseconds before each of many runs: it served a
        // caller on its CPU, waiting while that caller ran.
        assert!(!starved(s(0, 5), s(2_000_000, 205), t));
        // Hardly waited: it slept (no request), or ran at once.
        assert!(!starved(s(0, 5), s(999_999, 5), t));
    }

    #[test]
    fn own_statistics_read_and_class_moves_both_ways_as_root() {
        let tid = gettid();
        let text = std::fs::read(format!("/proc/self/task/{tid}/schedstat")).expect("schedstat");
        assert!(SchedStat::parse(&text).is_some(), "{}", String::from_utf8_lossy(&text));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let h = std::thread::spawn(|| {
            let tid = gettid();
            set_class(tid, true).unwrap();
            let idle = is_idle_class(tid);
            set_class(tid, false).unwrap();
            (idle, is_idle_class(tid))
        });
        assert_eq!(h.join().unwrap(), (true, false));
        assert_eq!(cannot_step_back(), None);
    }
}
