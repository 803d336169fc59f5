//! The will-it-scale style harness: worker threads, padded counters, the sampler.
//!
//! A throughput run spawns one OS thread per worker. Each worker sets itself up (its own
//! credentials, cwd, files), reports ready, waits for "go", then loops over one operation
//! and bumps its own [`PaddedCounter`] after each call. The counter is written by its
//! worker only (a plain load + store, no locked instruction) and sits on its own 128-byte
//! line, so counting adds no shared write. The main thread sleeps one sample interval at
//! a time, sums the counters and turns each delta into ops/s ([`sample_rates`]); the first
//! `warmup` samples are dropped ([`split_warmup`]).
//!
//! Nothing here may hang or panic the program when a target misbehaves: a worker that
//! panics or sees a wrong result records the first error and raises `stop`; setup and
//! shutdown have deadlines; a worker that does not stop in time (a call that never
//! returns) is left detached and the run is reported as failed.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// A per-worker operation counter on its own cache-line pair (128 bytes: adjacent-line
/// prefetch pulls lines in pairs on x86), so workers never write a line another reads
/// often.
#[repr(align(128))]
#[derive(Debug, Default)]
pub struct PaddedCounter(AtomicU64);

impl PaddedCounter {
    /// A counter at zero.
    pub const fn new() -> PaddedCounter {
        PaddedCounter(AtomicU64::new(0))
    }

    /// Adds one. Only the owning worker calls this, so load + store is enough (and
    /// avoids a locked read-modify-write on the hot path).
    #[inline]
    pub fn bump(&self) {
        self.0.store(self.0.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// The current count.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Time source of the sampler, so tests can drive it with a fake clock.
pub trait Clock {
    /// Time since an arbitrary fixed origin.
    fn now(&self) -> Duration;
    /// Blocks until `now() >= t` (returns at once if it already is).
    fn sleep_until(&self, t: Duration);
}

/// The real monotonic clock.
#[derive(Debug)]
pub struct RealClock(Instant);

impl RealClock {
    /// A clock whose origin is now.
    pub fn new() -> RealClock {
        RealClock(Instant::now())
    }
}

impl Default for RealClock {
    fn default() -> Self {
        RealClock::new()
    }
}

impl Clock for RealClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }

    fn sleep_until(&self, t: Duration) {
        let now = self.now();
        if t > now {
            thread::sleep(t - now);
        }
    }
}

/// Takes `count` samples of the rate of `total()` (a monotonically increasing operation
/// count), one per `interval`. Each sample is the counter delta divided by the measured
/// time since the previous reading, so a late wake-up lengthens that sample's window
/// instead of inflating its rate. The schedule is anchored at the start (sample i ends
/// at `start + i * interval`), so wake-up delays do not accumulate. `abort()` is polled
/// after each sleep; when it returns true the samples so far are returned.
pub fn sample_rates<C: Clock>(
    clock: &C,
    interval: Duration,
    count: usize,
    mut total: impl FnMut() -> u64,
    mut abort: impl FnMut() -> bool,
) -> Vec<f64> {
    let start = clock.now();
    let mut prev_t = start;
    let mut prev = total();
    let mut out = Vec::with_capacity(count);
    for i in 1..=count {
        clock.sleep_until(start + interval.mul_f64(i as f64));
        if abort() {
            break;
        }
        let t = clock.now();
        let cur = total();
        let dt = (t - prev_t).as_secs_f64();
        out.push(if dt > 0.0 { cur.wrapping_sub(prev) as f64 / dt } else { 0.0 });
        prev = cur;
        prev_t = t;
    }
    out
}

/// Splits raw samples into (warm-up, kept): the first `warmup` samples are dropped from
/// the statistics (kept in the JSON for inspection).
pub fn split_warmup(raw: &[f64], warmup: usize) -> (&[f64], &[f64]) {
    raw.split_at(warmup.min(raw.len()))
}

/// State shared by the workers of one run and the main thread.
#[derive(Debug)]
pub struct Shared {
    counters: Box<[PaddedCounter]>,
    stop: AtomicBool,
    go: AtomicBool,
    ready: AtomicUsize,
    finished: AtomicUsize,
    error: Mutex<Option<String>>,
}

impl Shared {
    fn new(workers: usize) -> Shared {
        Shared {
            counters: (0..workers).map(|_| PaddedCounter::new()).collect(),
            stop: AtomicBool::new(false),
            go: AtomicBool::new(false),
            ready: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            error: Mutex::new(None),
        }
    }

    /// Sum of all workers' counters.
    pub fn total(&self) -> u64 {
        self.counters.iter().map(PaddedCounter::get).fold(0, u64::wrapping_add)
    }

    fn fail(&self, msg: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(msg);
        }
        drop(e);
        self.stop.store(true, SeqCst);
    }

    fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A worker's view of its run.
#[derive(Debug)]
pub struct WorkerCtx {
    shared: Arc<Shared>,
    index: usize,
    announced: std::cell::Cell<bool>,
}

impl WorkerCtx {
    /// This worker's index (0-based).
    pub fn index(&self) -> usize {
        self.index
    }

    /// This worker's counter.
    #[inline]
    pub fn counter(&self) -> &PaddedCounter {
        &self.shared.counters[self.index]
    }

    /// Whether the run is over (time is up, or a worker failed).
    #[inline]
    pub fn stopped(&self) -> bool {
        self.shared.stop.load(Relaxed)
    }

    /// Reports setup done and waits for the start signal. Returns false when the run
    /// was called off instead (another worker failed, or setup timed out).
    pub fn ready(&self) -> bool {
        if !self.announced.replace(true) {
            self.shared.ready.fetch_add(1, SeqCst);
        }
        loop {
            if self.shared.stop.load(SeqCst) {
                return false;
            }
            if self.shared.go.load(SeqCst) {
                return true;
            }
            thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Deadlines of a run.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    /// For all workers to report ready.
    pub setup: Duration,
    /// For all workers to return after `stop`.
    pub shutdown: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines { setup: Duration::from_secs(60), shutdown: Duration::from_secs(20) }
    }
}

/// A worker body: sets up, calls [`WorkerCtx::ready`], loops, and returns what it wants
/// to report (or an error).
pub type Body<R> = Box<dyn FnOnce(&WorkerCtx) -> Result<R, String> + Send + 'static>;

/// Workers of one run, spawned and waiting for "go".
struct Crew<R> {
    shared: Arc<Shared>,
    handles: Vec<thread::JoinHandle<Option<R>>>,
    deadlines: Deadlines,
}

impl<R: Send + 'static> Crew<R> {
    fn spawn(bodies: Vec<Body<R>>, deadlines: Deadlines) -> Result<Crew<R>, String> {
        let shared = Arc::new(Shared::new(bodies.len()));
        let mut handles = Vec::with_capacity(bodies.len());
        for (index, body) in bodies.into_iter().enumerate() {
            let sh = shared.clone();
            let h = thread::Builder::new().name(format!("bench-worker-{index}")).spawn(move || {
                let ctx = WorkerCtx { shared: sh.clone(), index, announced: false.into() };
                let out = catch_unwind(AssertUnwindSafe(|| body(&ctx)));
                let ret = match out {
                    Ok(Ok(r)) => Some(r),
                    Ok(Err(e)) => {
                        sh.fail(format!("worker {index}: {e}"));
                        None
                    }
                    Err(p) => {
                        sh.fail(format!("worker {index} panicked: {}", panic_message(&*p)));
                        None
                    }
                };
                if !ctx.announced.get() {
                    sh.ready.fetch_add(1, SeqCst);
                }
                sh.finished.fetch_add(1, SeqCst);
                ret
            });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    shared.fail(format!("cannot spawn worker thread: {e}"));
                    // The body was consumed; count it as ready and finished.
                    shared.ready.fetch_add(1, SeqCst);
                    shared.finished.fetch_add(1, SeqCst);
                }
            }
        }
        Ok(Crew { shared, handles, deadlines })
    }

    fn n(&self) -> usize {
        self.shared.counters.len()
    }

    /// Waits for all workers to be ready, then starts them.
    fn start(&self) -> Result<(), String> {
        let until = Instant::now() + self.deadlines.setup;
        while self.shared.ready.load(SeqCst) < self.n() {
            if Instant::now() > until {
                self.shared.fail(format!("worker setup did not finish within {:?}", self.deadlines.setup));
                break;
            }
            thread::sleep(Duration::from_millis(1));
        }
        if let Some(e) = self.shared.error() {
            return Err(e);
        }
        self.shared.go.store(true, SeqCst);
        Ok(())
    }

    /// Waits up to `limit` for every worker to return.
    fn wait_finished(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.shared.finished.load(SeqCst) < self.n() {
            if Instant::now() > until {
                return false;
            }
            thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Stops the workers and collects their reports. Workers that do not return within
    /// the shutdown deadline are left detached and the run fails.
    fn finish(self) -> Result<Vec<R>, String> {
        self.shared.stop.store(true, SeqCst);
        if !self.wait_finished(self.deadlines.shutdown) {
            let stuck = self.n() - self.shared.finished.load(SeqCst);
            let why = self.shared.error().map(|e| format!(" (first error: {e})")).unwrap_or_default();
            return Err(format!(
                "{stuck} worker(s) did not return within {:?} after stop: a call hangs{why}",
                self.deadlines.shutdown
            ));
        }
        let mut out = Vec::with_capacity(self.handles.len());
        for h in self.handles {
            if let Ok(Some(r)) = h.join() {
                out.push(r);
            }
        }
        match self.shared.error() {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Outcome of a throughput run.
#[derive(Debug)]
pub struct Throughput<R> {
    /// Every sample in ops/s, warm-up first.
    pub raw: Vec<f64>,
    /// Each worker's report.
    pub reports: Vec<R>,
}

/// Runs `bodies` as concurrent workers and samples their combined rate: `count` samples
/// of `interval` each.
pub fn run_throughput<R: Send + 'static>(
    bodies: Vec<Body<R>>,
    interval: Duration,
    count: usize,
    deadlines: Deadlines,
) -> Result<Throughput<R>, String> {
    let crew = Crew::spawn(bodies, deadlines)?;
    if let Err(e) = crew.start() {
        // Workers see `stop` and return; collect them (or report them stuck).
        return Err(crew.finish().err().unwrap_or(e));
    }
    let shared = crew.shared.clone();
    let raw = sample_rates(&RealClock::new(), interval, count, || shared.total(), || shared.stop.load(Relaxed));
    let reports = crew.finish()?;
    Ok(Throughput { raw, reports })
}

/// Runs `bodies` to completion and returns the wall time from "go" until the last worker
/// returned. Workers must watch [`WorkerCtx::stopped`] in any wait loop; after `limit`
/// the run is stopped and fails.
pub fn run_to_completion<R: Send + 'static>(
    bodies: Vec<Body<R>>,
    limit: Duration,
    deadlines: Deadlines,
) -> Result<(Duration, Vec<R>), String> {
    let crew = Crew::spawn(bodies, deadlines)?;
    if let Err(e) = crew.start() {
        return Err(crew.finish().err().unwrap_or(e));
    }
    let t0 = Instant::now();
    let done = crew.wait_finished(limit);
    let elapsed = t0.elapsed();
    if !done {
        crew.shared.fail(format!("did not complete within {limit:?}"));
    }
    let reports = crew.finish()?;
    Ok((elapsed, reports))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    /// A clock that only moves when slept on, by exactly the requested amount plus an
    /// optional lateness.
    struct FakeClock {
        now: Cell<Duration>,
        late: Duration,
        on_sleep: Box<dyn Fn(Duration)>,
    }

    impl Clock for FakeClock {
        fn now(&self) -> Duration {
            self.now.get()
        }
        fn sleep_until(&self, t: Duration) {
            let target = t.max(self.now.get()) + self.late;
            (self.on_sleep)(target - self.now.get());
            self.now.set(target);
        }
    }

    #[test]
    fn padded_counters_do_not_share_lines() {
        assert_eq!(std::mem::align_of::<PaddedCounter>(), 128);
        assert_eq!(std::mem::size_of::<PaddedCounter>(), 128);
        let v: Vec<PaddedCounter> = (0..3).map(|_| PaddedCounter::new()).collect();
        let a = &v[0] as *const _ as usize;
        let b = &v[1] as *const _ as usize;
        assert_eq!(b - a, 128);
        assert_eq!(a % 128, 0);
        v[1].bump();
        v[1].bump();
        assert_eq!((v[0].get(), v[1].get(), v[2].get()), (0, 2, 0));
    }

    #[test]
    fn samples_are_counter_deltas_over_elapsed_time() {
        // The "workers" do 1000 ops per second of fake time, then 3000 after 2 s.
        let ops = Rc::new(Cell::new(0u64));
        let o = ops.clone();
        let clock = FakeClock {
            now: Cell::new(Duration::from_secs(100)),
            late: Duration::ZERO,
            on_sleep: Box::new(move |d| {
                let rate = if o.get() >= 2000 { 3000.0 } else { 1000.0 };
                o.set(o.get() + (rate * d.as_secs_f64()) as u64);
            }),
        };
        let s = sample_rates(&clock, Duration::from_secs(1), 4, || ops.get(), || false);
        assert_eq!(s, vec![1000.0, 1000.0, 3000.0, 3000.0]);
        assert_eq!(clock.now(), Duration::from_secs(104));
    }

    #[test]
    fn late_wakeups_widen_the_window_not_the_rate() {
        let ops = Rc::new(Cell::new(0u64));
        let o = ops.clone();
        let clock = FakeClock {
            now: Cell::new(Duration::ZERO),
            late: Duration::from_millis(100),
            on_sleep: Box::new(move |d| o.set(o.get() + (d.as_secs_f64() * 500.0).round() as u64)),
        };
        let s = sample_rates(&clock, Duration::from_millis(250), 3, || ops.get(), || false);
        assert_eq!(s.len(), 3);
        for r in &s {
            assert!((r - 500.0).abs() < 1e-6, "{s:?}");
        }
        // Anchored schedule: 0.35, 0.6, 0.85 s, not 0.35, 0.7, 1.05 s.
        assert_eq!(clock.now(), Duration::from_millis(850));
    }

    #[test]
    fn abort_stops_sampling() {
        let clock = FakeClock { now: Cell::new(Duration::ZERO), late: Duration::ZERO, on_sleep: Box::new(|_| {}) };
        let polls = Cell::new(0);
        let s = sample_rates(
            &clock,
            Duration::from_secs(1),
            10,
            || 0,
            || {
                polls.set(polls.get() + 1);
                polls.get() > 2
            },
        );
        assert_eq!(s, vec![0.0, 0.0]);
    }

    #[test]
    fn warmup_is_dropped() {
        let raw = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(split_warmup(&raw, 1), (&raw[..1], &raw[1..]));
        assert_eq!(split_warmup(&raw, 0), (&raw[..0], &raw[..]));
        assert_eq!(split_warmup(&raw, 9), (&raw[..], &raw[4..]));
    }

    #[test]
    fn throughput_run_counts_every_worker() {
        let bodies: Vec<Body<u64>> = (0..3)
            .map(|_| {
                Box::new(|ctx: &WorkerCtx| {
                    if !ctx.ready() {
                        return Err("called off".into());
                    }
                    let mut n = 0u64;
                    while !ctx.stopped() {
                        ctx.counter().bump();
                        n += 1;
                        if n.is_multiple_of(1024) {
                            thread::yield_now();
                        }
                    }
                    Ok(n)
                }) as Body<u64>
            })
            .collect();
        let t = run_throughput(bodies, Duration::from_millis(20), 3, Deadlines::default()).unwrap();
        assert_eq!(t.raw.len(), 3);
        assert_eq!(t.reports.len(), 3);
        assert!(t.reports.iter().all(|&n| n > 0));
        assert!(t.raw.iter().all(|&r| r > 0.0), "{:?}", t.raw);
    }

    #[test]
    fn worker_error_and_panic_fail_the_run() {
        let bodies: Vec<Body<()>> = vec![
            Box::new(|ctx: &WorkerCtx| {
                ctx.ready();
                while !ctx.stopped() {
                    thread::yield_now();
                }
                Ok(())
            }),
            Box::new(|_ctx: &WorkerCtx| Err("setup broke".to_string())),
        ];
        let e = run_throughput(bodies, Duration::from_millis(10), 2, Deadlines::default()).unwrap_err();
        assert_eq!(e, "worker 1: setup broke");

        let bodies: Vec<Body<()>> = vec![Box::new(|ctx: &WorkerCtx| {
            ctx.ready();
            panic!("boom");
        })];
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let e = run_throughput(bodies, Duration::from_millis(10), 2, Deadlines::default());
        std::panic::set_hook(prev);
        assert_eq!(e.unwrap_err(), "worker 0 panicked: boom");
    }

    #[test]
    fn hung_worker_is_reported_not_waited_for() {
        let bodies: Vec<Body<()>> = vec![Box::new(|ctx: &WorkerCtx| {
            ctx.ready();
            thread::sleep(Duration::from_secs(3));
            Ok(())
        })];
        let d = Deadlines { setup: Duration::from_secs(5), shutdown: Duration::from_millis(50) };
        let e = run_throughput(bodies, Duration::from_millis(10), 1, d).unwrap_err();
        assert!(e.contains("did not return"), "{e}");
    }

    #[test]
    fn completion_run_times_and_times_out() {
        let bodies: Vec<Body<u32>> = (0..2u32)
            .map(|i| {
                Box::new(move |ctx: &WorkerCtx| {
                    ctx.ready();
                    thread::sleep(Duration::from_millis(30));
                    Ok(i)
                }) as Body<u32>
            })
            .collect();
        let (d, mut r) = run_to_completion(bodies, Duration::from_secs(10), Deadlines::default()).unwrap();
        r.sort();
        assert_eq!(r, vec![0, 1]);
        assert!(d >= Duration::from_millis(30));

        let bodies: Vec<Body<()>> = vec![Box::new(|ctx: &WorkerCtx| {
            ctx.ready();
            while !ctx.stopped() {
                thread::sleep(Duration::from_millis(1));
            }
            Ok(())
        })];
        let e = run_to_completion(bodies, Duration::from_millis(30), Deadlines::default()).unwrap_err();
        assert!(e.contains("did not complete"), "{e}");
    }
}
