//! The classic transport: worker threads, each on its own cloned `/dev/fuse` descriptor,
//! `read` a request into a per-thread buffer and `write` the reply (header and payload
//! contiguous in a second per-thread buffer, read data produced in place), so a request
//! costs two system calls and allocates nothing here.
//!
//! Busy polling ([`crate::MountOptions::busy_poll`]): the worker that answered the last
//! request, the poller, keeps asking for the next one without sleeping (non-blocking reads)
//! for that long. A request that arrives meanwhile is taken at once: the caller's wake-up of
//! a sleeping worker, and that worker's way out of the idle CPU (in a virtual machine an
//! exit to the hypervisor), is not paid, which is a third of a round trip here. The poller
//! yields the CPU between attempts, so a runnable program is not kept waiting by it, and it
//! sleeps once the requests stop; the window shrinks while requests come too far apart for
//! it to catch them (see `Crew`).
//!
//! The other workers, the followers, stay off the device while one polls. The kernel wakes
//! a thread waiting for the device (in `read`, or in `epoll_wait`) for every request it
//! queues, whether or not the poller takes it first, and a woken waiter that finds nothing
//! sleeps again inside the kernel: a second worker was woken for nearly every request of
//! an untar (64,749 times for 85,000 requests, with 17,950 reschedule IPIs; BENCHMARKS.md
//! "Followers off the device while one worker polls"). So polling is a token (`Crew`):
//! the worker that answers a request while nobody polls takes it, and kicks the others out
//! of their wait for the device (each waits in `epoll_wait` on its descriptor, with
//! `EPOLLEXCLUSIVE` so that one waiter is woken per request, as in `read`, and on an
//! eventfd of its own, which the kick writes); they park on a condition variable while it
//! polls. One of them keeps watch: it looks every [`HELP_AFTER`], goes back to the device
//! with the others once the window has ended (the poller then waits there too), and calls
//! them back when the poller has been on one request that long (a host call that waits for
//! the disk, say), so requests never queue for long behind one. A request that may take
//! long (a large READ or WRITE, an `fsync`, a `fallocate`, a `copy_file_range`) calls them
//! back at once, and they stay on the device until the poller answers one that may not.
//!
//! **The poller on its caller's CPU.** A round trip costs least where the caller and the
//! worker serving it share a CPU: the caller's request wakes nobody across CPUs (the
//! poller takes it when the caller sleeps) and the reply wakes the caller where it slept.
//! The scheduler does not keep them together by itself: the poller is runnable beside the
//! caller it just woke, so the other CPU, whenever it goes idle, takes it over; and a
//! reply from a worker that is running puts the caller it wakes on an idle CPU rather
//! than next to it. On the VM of BENCHMARKS.md 6 % of an untar's replies crossed CPUs
//! that way, each 20-30 us against 3-5 us on one CPU ("The /dev/fuse poller on its
//! caller's CPU"). So the poller sits on its caller's CPU (`Seat`): at the first request of
//! its window from a process it moves to the CPU that process runs on (`/proc/PID/stat`)
//! and into `SCHED_IDLE` until the window ends. A CPU that runs only idle-class threads
//! counts as idle, so the caller is woken where it slept, and preempts the poller at once;
//! and the poller is kept there, so no other CPU takes it over. Where the caller sleeps on
//! the poller's CPU, the poller finds each request at its first look (it runs again only
//! once the caller has sent the next and slept); requests that keep coming only after
//! looks in vain say the scheduler moved the caller, and the poller looks where it is now
//! and follows it ([`RECHECK_MIN`] of them in a row, more where the caller turns out to
//! be on its CPU still). A READ or WRITE that may take long gets it up from the seat, for
//! [`RESEAT_AFTER_LONG`] short requests after it: the followers are called back to share
//! the copies, and a caller woken by the pages that came before would hold the poller's
//! copy up.
//!
//! The risk of the idle class is the poller's starving behind the other programs of its
//! CPU while a request waits. The watching follower bounds it: at each look, when a
//! request waits on the device and the poller has not asked for one since the last look
//! (or has been on one request since then), it moves the poller back to the normal class
//! and calls the followers back. Only with [`QueueClass::Idle`], where the server may
//! leave `SCHED_IDLE` again, with a follower to watch, and with polling that pauses for
//! busy CPUs; elsewhere the poller stays where the scheduler puts it.
//!
//! Once the io_uring queues carry the requests, what still comes here is FORGETs (one per
//! evicted inode: an `rm -rf` sends thousands) and the rare INTERRUPT. The kernel wakes a
//! worker sleeping in `read` for each of them, from the caller's CPU, inside its `unlink`:
//! a cross-CPU wake-up on the caller's path, which on the VM of BENCHMARKS.md cost more
//! than the UNLINK's own round trip. So then one worker (the last) stays and drains the
//! device without sleeping in `read` ([`LAZY_MIN`] to [`LAZY_MAX`] between looks, the gap
//! doubling while nothing comes), and the others end: a FORGET queued meanwhile wakes
//! nobody.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use zerocopy::IntoBytes;

use super::sched::{self, QueueClass};
use crate::reply::{Reply, ReplyBuf, out_header};
use crate::request::{Op, decode_dev};
use crate::session::{DEV_BUF, Later, LaterTo, MAX_WRITE, Session};

/// Starts `n` workers, the first on the connection's own descriptor and the others on
/// clones. With `busy_poll` every worker reads a clone (`O_NONBLOCK` belongs to the open
/// file, and the connection's own descriptor also carries notifications) and they share
/// a [`Crew`]; `pauses`: polling pauses while the CPUs are busy (`Crew::idle`); `class`:
/// whether the poller sits on its caller's CPU in `SCHED_IDLE` (see the module docs).
/// Also returns why it cannot where it was asked to.
pub(crate) fn spawn(
    session: &Arc<Session>,
    n: usize,
    busy_poll: Duration,
    pauses: bool,
    class: QueueClass,
) -> std::io::Result<(Vec<JoinHandle<()>>, Option<String>)> {
    let n = n.max(1);
    let polls = !busy_poll.is_zero();
    let (seats, unseatable) = match class {
        QueueClass::Idle if polls && pauses && n >= 2 => match sched::cannot_step_back() {
            None => (true, None),
            why => (false, why),
        },
        _ => (false, None),
    };
    let crew = Arc::new(Crew::new(busy_poll, pauses, if polls { n } else { 0 }, seats)?);
    let mut fds = Vec::new();
    for i in 0..n {
        let own = i > 0 || polls;
        let fd = if own { Arc::new(super::clone_dev(&session.dev)?) } else { session.dev.clone() };
        let wait = if polls { Some(DevWait::new(&fd, &crew, i)?) } else { None };
        fds.push((fd, wait));
    }
    let mut workers = Vec::new();
    for (i, (fd, wait)) in fds.into_iter().enumerate() {
        let (s, crew) = (session.clone(), crew.clone());
        let stays = i == n - 1;
        workers.push(
            std::thread::Builder::new()
                .name(format!("uvfs-fuse-{i}"))
                .spawn(move || worker(&s, &fd, &crew, wait, stays))?,
        );
    }
    Ok((workers, unseatable))
}

/// How long the poller may be on one request before the parked followers come back by
/// themselves to serve what queues meanwhile. The follower that keeps watch looks this
/// often while another worker polls (a thousand wake-ups a second during a burst of
/// requests, whatever the number of workers, against one per request in `read`).
pub const HELP_AFTER: Duration = Duration::from_millis(1);

/// A READ or WRITE this large, or an `fsync`, `fallocate` or `copy_file_range`, calls the
/// parked followers back before the poller starts on it: a copy of this size takes longer
/// than a follower's wake-up, so the requests behind it (the next WRITEs of a big write,
/// which the kernel sends together) are served beside it.
pub const LONG_DATA: usize = 64 << 10;

/// A poller's yield that returns this much later gave its CPU to another thread that had
/// work for it (a yield with nothing else to run returns within microseconds; a program
/// that computes keeps the CPU until it blocks or its slice ends, milliseconds).
pub const CONTENDED: Duration = Duration::from_micros(500);
/// How long polling stays off after the first such yield; the pause doubles at each one
/// that follows (up to [`QUIET_MAX`]) and halves at each window that ends without one.
pub const QUIET_MIN: Duration = Duration::from_millis(10);
/// The longest pause of polling on busy CPUs: how late it resumes once they are free.
pub const QUIET_MAX: Duration = Duration::from_millis(200);

/// Whether the poller should call the followers back before it answers `op`.
fn may_take_long(op: &Op<'_>) -> bool {
    match op {
        Op::Read(r) => r.size as usize >= LONG_DATA,
        Op::Write { data, .. } => data.len() >= LONG_DATA,
        Op::Fsync { .. } | Op::Fsyncdir { .. } | Op::Fallocate(_) | Op::CopyFileRange(_) => true,
        _ => false,
    }
}

/// What the followers did (atomic statistics, for `uvfs mount --stats` and the tests).
#[derive(Default)]
pub(crate) struct CrewStats {
    /// Times a worker that does not poll returned from its wait for the device.
    pub(crate) wakes: AtomicU64,
    /// Times a follower parked.
    pub(crate) parks: AtomicU64,
    /// Times the watching follower looked at the poller after [`HELP_AFTER`].
    pub(crate) looks: AtomicU64,
    /// Times a follower called itself back because the poller was on one request that long.
    pub(crate) rescues: AtomicU64,
    /// Times the poller stopped because its CPU had gone to other threads (see `Crew::idle`).
    pub(crate) backoffs: AtomicU64,
    /// Windows the poller began on its caller's CPU in `SCHED_IDLE`.
    pub(crate) seats: AtomicU64,
    /// Times the watching follower moved a poller in `SCHED_IDLE` back to the normal class.
    pub(crate) unseats: AtomicU64,
    /// Times a seated poller followed its caller to another CPU.
    pub(crate) moves: AtomicU64,
}

/// What busy-polling workers share (see the module docs): who polls, and where the others
/// park meanwhile.
///
/// The window adapts, as the kernel's `haltpoll` idle governor does: a request that came
/// later than the window but within `max` of the previous reply doubles it (up to
/// `max`); one that came later than `max` halves it, down to nothing. So a program
/// sending requests back to back is polled for the whole `max`, and one whose requests are
/// further apart (a compiler, `git` hashing objects) costs no CPU in polling that would
/// not have caught them.
///
/// Polling also pauses while the CPUs have other work (`idle`): there a poller takes CPU
/// time from the programs, and worse, it is runnable but not running for most of it, so
/// the requests it holds the token for wait until the scheduler gives it the CPU back
/// (a `make -j2` on 2 CPUs left the two workers 2.0-2.1 s runnable but waiting, 0.9 s
/// with the pauses, 0.3 s without polling; BENCHMARKS.md "Polling paused on busy CPUs").
pub(crate) struct Crew {
    /// Immutable: the longest window (`MountOptions::busy_poll`).
    max: Duration,
    /// Immutable: polling pauses while the CPUs are busy (`idle`; off only in tests,
    /// `MountOptions::poll_on_busy_cpus`).
    pauses: bool,
    /// Immutable: the origin of the times below.
    epoch: Instant,
    /// Atomic: how long the poller polls after a reply now, in nanoseconds.
    window: AtomicU64,
    /// Atomic: when the last reply was written, in nanoseconds after `epoch`.
    answered: AtomicU64,
    /// Atomic: nobody takes the token before this time (nanoseconds after `epoch`): the
    /// poller's CPU went to other threads (`idle`).
    quiet_until: AtomicU64,
    /// Atomic: the length of the next such pause in nanoseconds, before it doubles (0: none
    /// lately).
    quiet: AtomicU64,
    /// Atomic: the polling token. A worker holds it from the reply after which it took it
    /// until its window ends; meanwhile the others stay off the device.
    polling: AtomicBool,
    /// Atomic: the poller calls the followers back: it is on a request that may take
    /// long (or its last one was), or one of them found it on the same request for
    /// [`HELP_AFTER`]. Cleared when the poller finishes a request that may not.
    help: AtomicBool,
    /// Atomic, written by the token holder only: odd while it answers a request, twice
    /// the requests it answered otherwise (so a watcher that sees the same odd value
    /// twice saw it on one request all along).
    step: AtomicU64,
    /// Atomic: nobody polls any more (io_uring serves, or the connection ended): nobody
    /// parks.
    done: AtomicBool,
    /// Atomic: followers parked now (checked by whoever wakes them before it takes `park`).
    parked: AtomicUsize,
    /// Per worker (immutable vector): how a worker that takes the token gets the others
    /// out of their wait for the device.
    kicks: Vec<Kick>,
    /// Immutable: a poller sits on its caller's CPU in `SCHED_IDLE` for its windows (see
    /// the module docs).
    seats: bool,
    /// Atomic: when the poller last asked the device for a request, in nanoseconds after
    /// `epoch` (written by the token holder only).
    beat: AtomicU64,
    /// Atomic: the thread id of the poller while it is in `SCHED_IDLE` (0: none); cleared by
    /// whoever moves it back (itself at the window's end, or the watching follower).
    seated: AtomicI32,
    /// Whether a parked follower keeps watch (see `park`). Also taken to wait on and
    /// notify `cv`: the state the followers wait on is the atomics, stored before a waker
    /// takes this lock and loaded by a waiter while holding it.
    park: Mutex<bool>,
    /// Where parked followers wait (with `park`).
    cv: Condvar,
}

/// How a worker waiting for the device is got out of the wait: the kernel wakes a waiter
/// for every request, but `epoll_wait` (as `read`) sleeps again inside the kernel when
/// another worker took the request first, so only an event of its own returns it.
struct Kick {
    /// Atomic: the worker is in (or about to enter) its wait for the device.
    waiting: AtomicBool,
    /// Immutable: an eventfd in the worker's epoll set; a write returns its wait.
    efd: OwnedFd,
}

impl Crew {
    fn new(max: Duration, pauses: bool, workers: usize, seats: bool) -> std::io::Result<Crew> {
        let mut kicks = Vec::new();
        for _ in 0..workers {
            // SAFETY: creates a descriptor, owned below; no memory is passed.
            let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if efd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `efd` was just made and is owned by nobody else.
            kicks.push(Kick { waiting: AtomicBool::new(false), efd: unsafe { OwnedFd::from_raw_fd(efd) } });
        }
        Ok(Crew {
            max,
            pauses,
            epoch: Instant::now(),
            window: AtomicU64::new(max.as_nanos() as u64),
            answered: AtomicU64::new(0),
            quiet_until: AtomicU64::new(0),
            quiet: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            help: AtomicBool::new(false),
            step: AtomicU64::new(0),
            done: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            kicks,
            seats,
            beat: AtomicU64::new(0),
            seated: AtomicI32::new(0),
            park: Mutex::new(false),
            cv: Condvar::new(),
        })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Nanoseconds since the last reply.
    fn since_answered(&self) -> u64 {
        self.since(&self.answered)
    }

    /// Nanoseconds since the time in `at` (one of the crew's, after `epoch`).
    fn since(&self, at: &AtomicU64) -> u64 {
        self.now().saturating_sub(at.load(Ordering::Relaxed))
    }

    /// Moves the poller back to the normal class if it is in `SCHED_IDLE` (the watching
    /// follower, for a poller that starves; see `park`). It stays on its CPU until its
    /// window ends.
    fn unseat(&self, stats: &CrewStats) {
        let tid = self.seated.swap(0, Ordering::SeqCst);
        if tid != 0 && sched::set_class(tid, false).is_ok() {
            stats.unseats.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether a worker that does not poll should stay off the device now.
    fn off_device(&self) -> bool {
        self.polling.load(Ordering::SeqCst) && !self.help.load(Ordering::SeqCst) && !self.done.load(Ordering::SeqCst)
    }

    /// Wakes the parked followers to look again. The store that changed what
    /// `off_device` says comes before (`SeqCst`, as `parked`'s increment in `park`): a
    /// follower that counted itself parked after this load sees the store, and one counted
    /// before is waiting or about to, holding `park`, which this takes.
    fn wake(&self) {
        if self.parked.load(Ordering::SeqCst) > 0 {
            let _g = self.park.lock();
            self.cv.notify_all();
        }
    }

    /// A worker that slept read a request: the window moves by how long after the last
    /// reply it came.
    fn arrived_unpolled(&self) {
        let (max, floor) = (self.max.as_nanos() as u64, self.max.as_nanos() as u64 / 8);
        let w = self.window.load(Ordering::Relaxed);
        let w = if self.since_answered() <= max {
            (w * 2).clamp(floor, max)
        } else if w / 2 < floor {
            0
        } else {
            w / 2
        };
        self.window.store(w, Ordering::Relaxed);
    }

    /// Worker `me` wrote a reply; `holds`: it holds the token. Returns whether it holds
    /// it now: it takes it if nobody does, the window is open, polling is not paused for
    /// busy CPUs and io_uring does not serve (its queues run on the caller's CPU, where
    /// polling would take it from the caller; then only the rare request they do not
    /// carry comes here). Taking it gets the others out of their wait for the device
    /// (they park).
    fn answered(&self, session: &Session, me: usize, holds: bool) -> bool {
        let now = self.now();
        self.answered.store(now, Ordering::Relaxed);
        let took = !holds
            && self.window.load(Ordering::Relaxed) != 0
            && now >= self.quiet_until.load(Ordering::Relaxed)
            && !session.uring_active()
            && self.polling.compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed).is_ok();
        if took {
            self.kick_others(me);
        }
        if holds || took {
            session.poll_windows.fetch_add(1, Ordering::Relaxed);
        }
        holds || took
    }

    /// Returns the wait of every other worker that waits for the device. `polling` was
    /// stored before (`SeqCst`, as `waiting` in `will_wait`): a worker that announced its
    /// wait after this load sees it and does not wait; one announced before is kicked.
    fn kick_others(&self, me: usize) {
        for (i, k) in self.kicks.iter().enumerate() {
            if i != me && k.waiting.load(Ordering::SeqCst) {
                let one = 1u64;
                // SAFETY: writes 8 bytes from a local into an eventfd we own.
                unsafe { libc::write(k.efd.as_raw_fd(), (&raw const one).cast(), 8) };
            }
        }
    }

    /// Worker `me` is about to wait for the device: returns false if it should not (it
    /// parks instead). See `kick_others`.
    fn will_wait(&self, me: usize) -> bool {
        self.kicks[me].waiting.store(true, Ordering::SeqCst);
        if self.off_device() {
            self.kicks[me].waiting.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Worker `me`'s wait ended.
    fn waited(&self, me: usize) {
        self.kicks[me].waiting.store(false, Ordering::SeqCst);
    }

    /// Whether the window after the last reply is over at `at` (nanoseconds after `epoch`).
    fn window_ended(&self, at: u64) -> bool {
        at.saturating_sub(self.answered.load(Ordering::Relaxed)) >= self.window.load(Ordering::Relaxed)
    }

    /// The poller found nothing: returns whether it goes on polling (its window lasts;
    /// it yields the CPU first), else it gives the token back. A yield that came back
    /// [`CONTENDED`] late gave the CPU to a thread with work for it: then the token goes
    /// back at once, the followers return to the device, and nobody polls for a pause
    /// that grows while the CPUs stay busy ([`QUIET_MIN`] to [`QUIET_MAX`]).
    fn idle(&self, stats: &CrewStats) -> bool {
        let t = self.now();
        self.beat.store(t, Ordering::Relaxed);
        if !self.window_ended(t) {
            std::thread::yield_now();
            let back = self.now();
            if self.pauses && back - t >= CONTENDED.as_nanos() as u64 {
                return self.pause(back, stats);
            }
            // A yield that outlasted the window ends it too: a request that came meanwhile
            // came after it (and is not counted as caught by polling).
            if !self.window_ended(back) {
                return true;
            }
        }
        // A window without a late yield: the next pause is half as long (none below the
        // shortest), so a build's pauses stay long between its compilers' brief blocks,
        // and polling resumes within about two `QUIET_MAX` once it ends.
        let q = self.quiet.load(Ordering::Relaxed) / 2;
        self.quiet.store(if q < QUIET_MIN.as_nanos() as u64 { 0 } else { q }, Ordering::Relaxed);
        self.release();
        false
    }

    /// The poller stops for busy CPUs at `now` (see `idle`).
    fn pause(&self, now: u64, stats: &CrewStats) -> bool {
        let (min, max) = (QUIET_MIN.as_nanos() as u64, QUIET_MAX.as_nanos() as u64);
        let pause = (self.quiet.load(Ordering::Relaxed) * 2).clamp(min, max);
        self.quiet.store(pause, Ordering::Relaxed);
        self.quiet_until.store(now + pause, Ordering::Relaxed);
        stats.backoffs.fetch_add(1, Ordering::Relaxed);
        self.release();
        self.wake();
        false
    }

    /// The poller gives the token back. The parked followers are not woken for it: they
    /// return to the device at their next look ([`HELP_AFTER`]), or never leave it if
    /// the requests resume before (a burst's pauses are shorter), and the poller waits
    /// there meanwhile.
    fn release(&self) {
        self.polling.store(false, Ordering::SeqCst);
    }

    /// Moves `step` on by one (a load and a store: only the token holder writes it).
    fn step_on(&self) {
        self.step.store(self.step.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    /// The poller begins to answer a request; `long`: one that may take long.
    fn begin(&self, long: bool) {
        self.step_on();
        if long {
            self.help.store(true, Ordering::SeqCst);
            self.wake();
        }
    }

    /// The poller answered it. After a request that may take long the followers stay on
    /// the device until the poller answers one that may not: the READs of a sequential
    /// read come together (the kernel's readahead), and a follower that parked between two
    /// of them would be woken again for the next.
    fn end(&self, long: bool) {
        self.step_on();
        // Written only when set: the followers' line stays clean for the common request.
        if !long && self.help.load(Ordering::Relaxed) {
            self.help.store(false, Ordering::Relaxed);
        }
    }

    /// Nobody polls any more (io_uring serves, or the connection ended): the followers
    /// go back to the device, where they find out.
    fn finish(&self) {
        self.done.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// A follower parks until it should be on the device again. One parked follower
    /// keeps watch: it looks every [`HELP_AFTER`], returns when the poller's window has
    /// ended, and calls itself back when the poller has been on one request that long; the
    /// others wait for it (or another waker) without a timer, so a burst costs the same few
    /// timer wake-ups however many workers there are.
    fn park(&self, stats: &CrewStats, pending: &dyn Fn() -> bool) {
        let mut watched = self.park.lock();
        self.parked.fetch_add(1, Ordering::SeqCst);
        stats.parks.fetch_add(1, Ordering::Relaxed);
        let mut watching = false;
        let mut on: Option<u64> = None;
        while self.off_device() {
            if !watching && !*watched {
                (*watched, watching) = (true, true);
            }
            if !watching {
                self.cv.wait(&mut watched);
                continue;
            }
            if !self.cv.wait_for(&mut watched, HELP_AFTER).timed_out() {
                continue;
            }
            stats.looks.fetch_add(1, Ordering::Relaxed);
            let step = self.step.load(Ordering::Relaxed);
            if step % 2 == 1 && on == Some(step) {
                stats.rescues.fetch_add(1, Ordering::Relaxed);
                self.unseat(stats);
                self.help.store(true, Ordering::SeqCst);
                break;
            }
            // A poller in `SCHED_IDLE` that has not asked for a request since the last look
            // while one waits: its CPU has had other work all along (a poller that runs
            // asks within microseconds).
            if step.is_multiple_of(2)
                && self.seated.load(Ordering::SeqCst) != 0
                && self.since(&self.beat) >= HELP_AFTER.as_nanos() as u64
                && self.since(&self.answered) >= HELP_AFTER.as_nanos() as u64
                && pending()
            {
                self.unseat(stats);
                self.help.store(true, Ordering::SeqCst);
                break;
            }
            on = (step % 2 == 1).then_some(step);
        }
        if watching {
            // The others come along, or one of them takes the watch.
            *watched = false;
            self.cv.notify_all();
        }
        self.parked.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A busy-polling worker's wait for the device: an epoll instance holding its
/// (non-blocking) descriptor with `EPOLLEXCLUSIVE` (the kernel wakes one waiter per
/// request, as for `read`) and its [`Kick`].
struct DevWait {
    /// The worker's index in [`Crew::kicks`] (immutable).
    me: usize,
    /// The epoll instance (owned by the worker).
    ep: OwnedFd,
}

/// The epoll tag of the kick.
const KICKED: u64 = 1;

impl DevWait {
    /// Makes `fd` non-blocking and an epoll instance that waits for it and for the kick
    /// of worker `me`.
    fn new(fd: &OwnedFd, crew: &Crew, me: usize) -> std::io::Result<DevWait> {
        set_nonblocking(fd, true);
        // SAFETY: creates a descriptor, owned below; no memory is passed.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `ep` was just made and is owned by nobody else.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        let add = |fd: &OwnedFd, events: i32, tag: u64| {
            let mut ev = libc::epoll_event { events: events as u32, u64: tag };
            // SAFETY: adds a descriptor we hold to our epoll instance; `ev` is only read.
            if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        };
        add(fd, libc::EPOLLIN | libc::EPOLLEXCLUSIVE, 0)?;
        add(&crew.kicks[me].efd, libc::EPOLLIN, KICKED)?;
        Ok(DevWait { me, ep })
    }

    /// Waits until the device has a request (or an error, which the next read reports) or
    /// the worker is kicked (then it takes the kick).
    fn wait(&self, crew: &Crew) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 2];
        // SAFETY: waits on our epoll instance, writing at most two events into `evs`.
        let n = unsafe { libc::epoll_wait(self.ep.as_raw_fd(), evs.as_mut_ptr(), 2, -1) };
        for ev in evs.iter().take(n.max(0) as usize) {
            if ev.u64 == KICKED {
                let mut v = 0u64;
                // SAFETY: reads 8 bytes from an eventfd we own into a local.
                unsafe { libc::read(crew.kicks[self.me].efd.as_raw_fd(), (&raw mut v).cast(), 8) };
            }
        }
    }
}

/// Where a worker is while it holds the polling token with [`Crew::seats`]: on its
/// caller's CPU, in `SCHED_IDLE` (see the module docs).
struct Seat {
    /// Immutable: the CPUs the worker may run on otherwise (its affinity when it began).
    all: Option<rustix::thread::CpuSet>,
    /// Immutable: the worker's thread id.
    tid: i32,
    /// It is kept on one CPU now.
    pinned: bool,
    /// It tried to sit on its caller's CPU since the window began or it last left its
    /// seat (once, at its first short request from a process: the kernel's own, pid 0,
    /// come from no CPU of a caller).
    tried: bool,
    /// The CPU it is kept on, while `pinned`.
    cpu: usize,
    /// It looked for a request and found none since it read the last one.
    looked: bool,
    /// Requests in a row that it found only after looking in vain: where the caller sleeps
    /// on the poller's CPU, the poller runs again only once the caller has sent its next
    /// request, and finds it at the first look.
    late: u32,
    /// How many such requests in a row make it look where the caller is now.
    recheck_after: u32,
    /// Short requests still to answer before it sits down again after getting up for a
    /// long one ([`RESEAT_AFTER_LONG`]).
    standing: u32,
}

impl Seat {
    fn new() -> Seat {
        Seat {
            all: rustix::thread::sched_getaffinity(None).ok(),
            tid: sched::gettid(),
            pinned: false,
            tried: false,
            cpu: 0,
            looked: false,
            late: 0,
            recheck_after: RECHECK_MIN,
            standing: 0,
        }
    }

    /// The worker holds the token and answered process `pid`: if it has not tried in this
    /// window, it moves to that process's CPU and into `SCHED_IDLE`, if it can (it stays as
    /// it is where it cannot learn the CPU or may not run there).
    fn take(&mut self, crew: &Crew, stats: &CrewStats, pid: u32) {
        if self.tried || pid == 0 || !crew.seats || self.all.is_none() {
            return;
        }
        if self.standing > 0 {
            self.standing -= 1;
            return;
        }
        self.tried = true;
        if !self.pin_to_caller(pid) {
            return;
        }
        // Published before the class changes: the watcher may move it back at once.
        crew.seated.store(self.tid, Ordering::SeqCst);
        if sched::set_class(0, true).is_ok() {
            stats.seats.fetch_add(1, Ordering::Relaxed);
        } else {
            crew.seated.store(0, Ordering::SeqCst);
        }
    }

    /// Keeps the worker on the CPU process `pid` runs on; false where it cannot.
    fn pin_to_caller(&mut self, pid: u32) -> bool {
        let Some(cpu) = caller_cpu(pid).filter(|&c| c < rustix::thread::CpuSet::MAX_CPU) else { return false };
        if self.pinned && cpu == self.cpu {
            return true;
        }
        let mut one = rustix::thread::CpuSet::new();
        one.set(cpu);
        if rustix::thread::sched_setaffinity(None, &one).is_err() {
            return false;
        }
        (self.pinned, self.cpu) = (true, cpu);
        true
    }

    /// It read a request after looking in vain (`looked`) for some since the last; then it
    /// answered it, from process `pid`. A seated poller that finds its caller's requests
    /// only after looking, [`Seat::recheck_after`] times in a row, looks where that caller
    /// runs now, and follows it there (the scheduler moved it); a caller found where the
    /// poller is sleeps on other things between its requests, and the next look waits
    /// twice as long (up to [`RECHECK_MAX`]).
    fn answered(&mut self, stats: &CrewStats, pid: u32) {
        let late = std::mem::take(&mut self.looked);
        if !self.pinned || pid == 0 {
            return;
        }
        self.late = if late { self.late + 1 } else { 0 };
        if self.late < self.recheck_after {
            return;
        }
        self.late = 0;
        let before = self.cpu;
        if self.pin_to_caller(pid) && self.cpu != before {
            self.recheck_after = RECHECK_MIN;
            stats.moves.fetch_add(1, Ordering::Relaxed);
        } else {
            self.recheck_after = (self.recheck_after * 2).min(RECHECK_MAX);
        }
    }

    /// It gets up for a request that may take long; it sits down again only after
    /// [`RESEAT_AFTER_LONG`] short ones, so that a stream of big files (a `cp -r`: a
    /// CREATE, a long WRITE, a SETATTR and a RELEASE each) does not pay for a look at
    /// `/proc` and four system calls per file.
    fn stand(&mut self, crew: &Crew) {
        self.leave(crew);
        self.standing = RESEAT_AFTER_LONG;
    }

    /// The worker's window ended: back to the normal class (unless the watcher moved it
    /// already) and to all its CPUs.
    fn leave(&mut self, crew: &Crew) {
        (self.tried, self.standing) = (false, 0);
        (self.looked, self.late, self.recheck_after) = (false, 0, RECHECK_MIN);
        if !self.pinned {
            return;
        }
        if crew.seated.compare_exchange(self.tid, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            let _ = sched::set_class(0, false);
        }
        if let Some(all) = &self.all {
            let _ = rustix::thread::sched_setaffinity(None, all);
        }
        self.pinned = false;
    }
}

/// A seated poller that found this many requests in a row only after looking in vain
/// looks where its caller runs (`Seat::answered`).
pub const RECHECK_MIN: u32 = 8;
/// The most requests in a row between two such looks where the caller stays on the
/// poller's CPU (it sleeps on other things too).
pub const RECHECK_MAX: u32 = 1024;

/// Short requests a poller answers after getting up for a long one before it sits on its
/// caller's CPU again (`Seat::stand`).
pub const RESEAT_AFTER_LONG: u32 = 16;

/// The CPU process (or thread) `pid` runs on, or last ran on: field 39 of
/// `/proc/PID/stat`. `None` for the kernel's own requests (pid 0) and where it cannot
/// be read (a process gone, or of another pid namespace than `/proc`'s).
fn caller_cpu(pid: u32) -> Option<usize> {
    if pid == 0 {
        return None;
    }
    stat_cpu(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// Field 39 (`processor`) of a `/proc/PID/stat` text. The second field, the command
/// name in parentheses, may hold spaces and parentheses itself: the fields after it
/// are counted from the last `)`.
fn stat_cpu(text: &[u8]) -> Option<usize> {
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    // The third field (`state`) comes first after the name.
    rest.split_ascii_whitespace().nth(39 - 3)?.parse().ok()
}

/// Whether a request waits on the device (every clone of the connection's descriptor
/// sees the same queue).
fn pending(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: polls one descriptor we own, without waiting; `p` is a local.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
}

/// The shortest gap between two looks of the worker left once io_uring serves.
pub const LAZY_MIN: Duration = Duration::from_millis(1);
/// The longest gap: an INTERRUPT (of a waiting lock) waits at most this long for it.
pub const LAZY_MAX: Duration = Duration::from_millis(100);

/// Sets or clears `O_NONBLOCK` on `fd`.
fn set_nonblocking(fd: &OwnedFd, on: bool) {
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own; no memory is passed.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if fl >= 0 {
            let fl = if on { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK };
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl);
        }
    }
}

/// `wait`: with busy polling, how the worker waits for the device ([`Crew`]); without,
/// it sleeps in `read`. `stays`: the worker that remains once io_uring carries the
/// requests (see the module docs); the others end then.
fn worker(session: &Session, fd: &Arc<OwnedFd>, crew: &Crew, mut wait: Option<DevWait>, stays: bool) {
    let mut inbuf = vec![0u8; DEV_BUF];
    let mut outbuf = vec![0u8; 16 + MAX_WRITE + 4096];
    // This worker holds the polling token.
    let mut polls = false;
    // Once io_uring serves: the gap before the next look at the device.
    let mut lazy: Option<Duration> = None;
    let mut seat = Seat::new();
    loop {
        if lazy.is_none() && session.uring_active() {
            seat.leave(crew);
            // Nobody polls or parks any more: the parked followers (the one that stays
            // among them, perhaps) wake to find io_uring serving.
            crew.finish();
            if !stays {
                // Not the end of the connection: no `set_gone`.
                return;
            }
            set_nonblocking(fd, true);
            (wait, polls) = (None, false);
            lazy = Some(LAZY_MIN);
        }
        if let Some(w) = &wait
            && !polls
        {
            if !crew.will_wait(w.me) {
                crew.park(&session.crew, &|| pending(fd));
                continue;
            }
            w.wait(crew);
            crew.waited(w.me);
            session.crew.wakes.fetch_add(1, Ordering::Relaxed);
            if crew.off_device() {
                // Another worker polls: it takes the request.
                continue;
            }
        }
        // rustix's raw system call: glibc's `read` is a cancellation point, two atomic
        // updates of the thread's cancel state around every request.
        let n = match rustix::io::read(&**fd, &mut inbuf[..]) {
            Ok(n) => n,
            Err(rustix::io::Errno::AGAIN) => {
                if let Some(gap) = lazy.as_mut() {
                    std::thread::sleep(*gap);
                    *gap = (*gap * 2).min(LAZY_MAX);
                } else if polls {
                    seat.looked = true;
                    polls = crew.idle(&session.crew);
                    if !polls {
                        seat.leave(crew);
                    }
                }
                continue;
            }
            // Interrupted, or the request went away before we read it.
            Err(rustix::io::Errno::INTR | rustix::io::Errno::NOENT) => continue,
            // Unmounted or aborted.
            Err(rustix::io::Errno::NODEV | rustix::io::Errno::CONNABORTED) => break,
            Err(e) => {
                log::error!("uvfs-fuse: read /dev/fuse: errno {}", e.raw_os_error());
                break;
            }
        };
        if polls {
            session.polled.fetch_add(1, Ordering::Relaxed);
        } else if wait.is_some() {
            crew.arrived_unpolled();
        }
        if let Some(gap) = lazy.as_mut() {
            *gap = LAZY_MIN;
        }
        let (head, body) = outbuf.split_at_mut(16);
        let mut out = ReplyBuf::new(body);
        let (unique, reply, init, pid) = match decode_dev(&inbuf[..n]) {
            Ok(req) => {
                let later = || Later { unique: req.header.unique, to: LaterTo::Dev(fd.clone()) };
                let long = polls && may_take_long(&req.op);
                if polls {
                    if long {
                        // A copy that long gains nothing from the caller's CPU, and the
                        // caller, woken by the pages that came before, would hold it up.
                        seat.stand(crew);
                    }
                    crew.begin(long);
                }
                let reply = session.dispatch(&req, &mut out, &later);
                if polls {
                    crew.end(long);
                }
                // After a long one the poller does not sit down again (0: no caller to sit by).
                let pid = if long { 0 } else { req.header.pid };
                (req.header.unique, reply, matches!(req.op, Op::Init(_)), pid)
            }
            Err(Some((unique, e))) => (unique, Reply::Err(e), false, 0),
            Err(None) => continue,
        };
        if reply != Reply::None && reply != Reply::Later {
            let h = out_header(unique, &reply, out.len());
            head.copy_from_slice(h.as_bytes());
            let total = h.len as usize;
            match rustix::io::write(&**fd, &outbuf[..total]) {
                // ENOENT: the request was interrupted and is gone; nothing to do.
                Ok(_) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => log::warn!("uvfs-fuse: reply to /dev/fuse: errno {}", e.raw_os_error()),
            }
        }
        if init {
            session.init_replied();
        }
        if let Some(w) = &wait {
            let held = polls;
            polls = crew.answered(session, w.me, polls);
            if polls {
                if held {
                    seat.answered(&session.crew, pid);
                }
                seat.take(crew, &session.crew, pid);
            }
        }
    }
    seat.leave(crew);
    // Whoever ends first frees the parked to find the connection gone.
    crew.finish();
    session.set_gone();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// A crew whose poller holds the token (as after a reply in its window).
    fn polling_crew() -> Arc<Crew> {
        let c = Arc::new(Crew::new(Duration::from_micros(50), true, 0, false).unwrap());
        c.polling.store(true, Ordering::SeqCst);
        c
    }

    /// `n` followers parked on `c`; each sends on the channel when it leaves.
    fn park(c: &Arc<Crew>, stats: &Arc<CrewStats>, n: usize) -> (mpsc::Receiver<()>, Vec<JoinHandle<()>>) {
        let (tx, rx) = mpsc::channel();
        let threads = (0..n)
            .map(|_| {
                let (c, stats, tx) = (c.clone(), stats.clone(), tx.clone());
                std::thread::spawn(move || {
                    c.park(&stats, &|| false);
                    tx.send(()).unwrap();
                })
            })
            .collect();
        (rx, threads)
    }

    /// Waits (at most 30 s) until `cond` holds.
    fn until(what: &str, cond: impl Fn() -> bool) {
        let t = Instant::now();
        while !cond() {
            assert!(t.elapsed() < Duration::from_secs(30), "never: {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    const LONG: Duration = Duration::from_secs(30);

    #[test]
    fn a_parked_follower_calls_itself_back_when_the_poller_is_stuck() {
        let (c, stats) = (polling_crew(), Arc::new(CrewStats::default()));
        // The poller began a request that does not end.
        c.begin(false);
        let (rx, threads) = park(&c, &stats, 1);
        rx.recv_timeout(LONG).expect("the follower stayed parked behind a stuck poller");
        assert_eq!(stats.rescues.load(Ordering::Relaxed), 1);
        assert!(stats.looks.load(Ordering::Relaxed) >= 2, "it saw the same request twice");
        assert!(!c.off_device(), "the others may come back too");
        threads.into_iter().for_each(|t| t.join().unwrap());
        // The poller answers it: the followers are sent off the device again.
        c.end(false);
        assert!(c.off_device());
    }

    #[test]
    fn a_parked_follower_keeps_watch_but_stays_while_the_poller_only_polls() {
        let (c, stats) = (polling_crew(), Arc::new(CrewStats::default()));
        let (rx, threads) = park(&c, &stats, 2);
        until("20 looks", || stats.looks.load(Ordering::Relaxed) >= 20);
        assert_eq!(stats.rescues.load(Ordering::Relaxed), 0);
        assert_eq!(c.parked.load(Ordering::SeqCst), 2);
        assert!(rx.try_recv().is_err(), "a follower left while the poller polled");
        // The window ends: the watcher finds out at its next look and brings the other
        // along (it waits without a timer).
        c.release();
        for _ in 0..2 {
            rx.recv_timeout(LONG).expect("a follower stayed parked after the window ended");
        }
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(c.parked.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_request_that_may_take_long_calls_every_parked_follower_back() {
        let (c, stats) = (polling_crew(), Arc::new(CrewStats::default()));
        let (rx, threads) = park(&c, &stats, 3);
        until("3 parked", || c.parked.load(Ordering::SeqCst) == 3);
        c.begin(true);
        for _ in 0..3 {
            rx.recv_timeout(LONG).expect("a follower stayed parked during a long request");
        }
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(stats.rescues.load(Ordering::Relaxed), 0);
        // They stay on the device after it, until the poller answers a short one.
        c.end(true);
        assert!(!c.off_device());
        c.begin(false);
        c.end(false);
        assert!(c.off_device());
    }

    /// A thread that moves itself into `SCHED_IDLE` (where it may: as root) and waits until
    /// the sender is dropped; its id, and whether it got there.
    fn idle_thread() -> (i32, bool, mpsc::Sender<()>, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel::<()>();
        let (back, got) = mpsc::channel();
        let t = std::thread::spawn(move || {
            let tid = sched::gettid();
            back.send((tid, sched::set_class(0, true).is_ok())).unwrap();
            let _ = rx.recv();
        });
        let (tid, idle) = got.recv().unwrap();
        (tid, idle, tx, t)
    }

    /// A polling crew whose poller (`tid`) sits on its caller's CPU and has not asked for a
    /// request since the crew was made.
    fn seated_crew(tid: i32) -> Arc<Crew> {
        let c = Crew::new(Duration::from_micros(50), true, 0, true).unwrap();
        c.polling.store(true, Ordering::SeqCst);
        c.seated.store(tid, Ordering::SeqCst);
        Arc::new(c)
    }

    #[test]
    fn a_seated_poller_that_starves_while_a_request_waits_is_moved_back() {
        let (tid, idle, tx, t) = idle_thread();
        let (c, stats) = (seated_crew(tid), Arc::new(CrewStats::default()));
        let (done_tx, done) = mpsc::channel();
        let (c2, s2) = (c.clone(), stats.clone());
        let follower = std::thread::spawn(move || {
            c2.park(&s2, &|| true);
            done_tx.send(()).unwrap();
        });
        done.recv_timeout(LONG).expect("the follower stayed parked while a request waited");
        follower.join().unwrap();
        assert!(!c.off_device(), "the followers are called back to the device");
        assert_eq!(c.seated.load(Ordering::SeqCst), 0);
        assert_eq!(stats.rescues.load(Ordering::Relaxed), 0, "not a poller stuck on a request");
        if idle {
            assert_eq!(stats.unseats.load(Ordering::Relaxed), 1);
            assert!(!sched::is_idle_class(tid), "the poller is back in the normal class");
        }
        drop(tx);
        t.join().unwrap();
    }

    #[test]
    fn a_seated_poller_stays_while_nothing_waits_for_it() {
        // Its CPU has other work (its caller computing, say), but no request waits.
        let (tid, idle, tx, t) = idle_thread();
        let (c, stats) = (seated_crew(tid), Arc::new(CrewStats::default()));
        let (rx, threads) = park(&c, &stats, 1);
        until("20 looks", || stats.looks.load(Ordering::Relaxed) >= 20);
        assert!(rx.try_recv().is_err(), "the follower left though nothing waited");
        assert_eq!(c.seated.load(Ordering::SeqCst), tid);
        assert_eq!(stats.unseats.load(Ordering::Relaxed), 0);
        if idle {
            assert!(sched::is_idle_class(tid));
        }
        c.release();
        rx.recv_timeout(LONG).expect("the follower stayed parked after the window ended");
        threads.into_iter().for_each(|t| t.join().unwrap());
        drop(tx);
        t.join().unwrap();
    }

    #[test]
    fn a_seated_poller_stuck_on_a_request_is_moved_back_with_the_rescue() {
        let (tid, idle, tx, t) = idle_thread();
        let (c, stats) = (seated_crew(tid), Arc::new(CrewStats::default()));
        c.begin(false);
        let (rx, threads) = park(&c, &stats, 1);
        rx.recv_timeout(LONG).expect("the follower stayed parked behind a stuck poller");
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(stats.rescues.load(Ordering::Relaxed), 1);
        assert_eq!(c.seated.load(Ordering::SeqCst), 0);
        if idle {
            assert_eq!(stats.unseats.load(Ordering::Relaxed), 1);
            assert!(!sched::is_idle_class(tid));
        }
        drop(tx);
        t.join().unwrap();
    }

    /// The CPUs this process may run on.
    fn cpus() -> Vec<usize> {
        let all = rustix::thread::sched_getaffinity(None).unwrap();
        (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| all.is_set(c)).collect()
    }

    /// Keeps thread `tid` (0: the caller) on `cpu`.
    fn pin(tid: i32, cpu: usize) {
        let mut one = rustix::thread::CpuSet::new();
        one.set(cpu);
        let pid = rustix::process::Pid::from_raw(tid);
        rustix::thread::sched_setaffinity(pid, &one).unwrap();
    }

    /// A thread that runs on `cpu` until `stop`, waking every millisecond (a caller
    /// between requests; a sleeping thread moves to a new CPU when it wakes): its id.
    fn caller_on(cpu: usize, stop: Arc<AtomicBool>) -> (i32, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel();
        let t = std::thread::spawn(move || {
            pin(0, cpu);
            tx.send(sched::gettid()).unwrap();
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        (rx.recv().unwrap(), t)
    }

    #[test]
    fn a_seated_poller_follows_its_caller_to_another_cpu() {
        let all = cpus();
        if all.len() < 2 {
            println!("one CPU: nothing to follow to");
            return;
        }
        let (a, b) = (all[0], all[1]);
        let stop = Arc::new(AtomicBool::new(false));
        let (caller, t) = caller_on(a, stop.clone());
        until("the caller on its CPU", || caller_cpu(caller as u32) == Some(a));
        let stats = CrewStats::default();
        // Its class is the other tests' matter: this thread stays in the normal class.
        let c = Crew::new(Duration::from_micros(50), true, 0, false).unwrap();
        let mut seat = Seat::new();
        // This thread is the poller: it took the token after answering the caller.
        assert!(seat.pin_to_caller(caller as u32));
        assert!(seat.pinned && seat.cpu == a, "on the caller's CPU");
        assert_eq!(rustix::thread::sched_getcpu(), a);
        // Requests found at the first look: the caller sleeps where the poller is.
        for _ in 0..100 {
            seat.answered(&stats, caller as u32);
        }
        assert_eq!((seat.cpu, stats.moves.load(Ordering::Relaxed)), (a, 0));
        // The scheduler moves the caller; its requests now come after looks in vain.
        pin(caller, b);
        until("the caller moved", || caller_cpu(caller as u32) == Some(b));
        for _ in 0..RECHECK_MIN {
            assert_eq!(seat.cpu, a, "it looks only after {RECHECK_MIN} late requests");
            seat.looked = true;
            seat.answered(&stats, caller as u32);
        }
        assert_eq!((seat.cpu, stats.moves.load(Ordering::Relaxed)), (b, 1), "it followed the caller");
        assert_eq!(rustix::thread::sched_getcpu(), b);
        // Late requests from a caller on its CPU (it sleeps on other things): the next
        // look comes twice as late.
        for _ in 0..RECHECK_MIN {
            seat.looked = true;
            seat.answered(&stats, caller as u32);
        }
        assert_eq!((seat.recheck_after, stats.moves.load(Ordering::Relaxed)), (2 * RECHECK_MIN, 1));
        seat.leave(&c);
        assert!(!seat.pinned);
        assert_eq!(cpus(), all, "back on every CPU");
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }

    #[test]
    fn a_poller_up_for_a_long_request_sits_down_again_after_short_ones() {
        let before = cpus();
        let cpu = before[0];
        let stop = Arc::new(AtomicBool::new(false));
        let (caller, t) = caller_on(cpu, stop.clone());
        until("the caller on its CPU", || caller_cpu(caller as u32) == Some(cpu));
        let stats = CrewStats::default();
        let c = Crew::new(Duration::from_micros(50), true, 0, true).unwrap();
        let mut seat = Seat::new();
        seat.take(&c, &stats, caller as u32);
        assert!(seat.pinned, "it sits at the window's first request");
        seat.stand(&c);
        assert!(!seat.pinned && c.seated.load(Ordering::SeqCst) == 0, "up for the long one");
        for i in 0..RESEAT_AFTER_LONG {
            // The long requests themselves do not count (answered as pid 0).
            seat.take(&c, &stats, 0);
            seat.take(&c, &stats, caller as u32);
            assert!(!seat.pinned, "sat down again after {} short requests", i + 1);
        }
        seat.take(&c, &stats, caller as u32);
        assert!(seat.pinned && seat.cpu == cpu, "seated again");
        // Back in the normal class and on every CPU before anything else runs here.
        seat.leave(&c);
        assert!(!sched::is_idle_class(sched::gettid()));
        assert_eq!(cpus(), before);
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
    }

    #[test]
    fn the_cpu_is_field_39_counted_from_the_last_parenthesis() {
        // A command name with a space and parentheses of its own.
        let mut fields: Vec<String> = (3..=52).map(|i| format!("{}", i * 100)).collect();
        fields[39 - 3] = "7".into();
        let text = format!("1234 (a) b (c)) {}\n", fields.join(" "));
        assert_eq!(stat_cpu(text.as_bytes()), Some(7));
        assert_eq!(stat_cpu(b"1 (x) S 2 3"), None, "too few fields");
        assert_eq!(stat_cpu(b"no name at all"), None);
        assert_eq!(caller_cpu(0), None, "the kernel's own requests");
        // This thread's: a CPU it may run on.
        let own = caller_cpu(sched::gettid() as u32).expect("this thread's stat");
        assert!(rustix::thread::sched_getaffinity(None).unwrap().is_set(own), "CPU {own}");
    }

    #[test]
    fn what_may_take_long() {
        let read = |size| Op::Read(crate::abi::ReadIn { size, ..zerocopy::FromZeros::new_zeroed() });
        assert!(!may_take_long(&read(4096)));
        assert!(may_take_long(&read(LONG_DATA as u32)));
        let big = vec![0u8; LONG_DATA];
        let w = zerocopy::FromZeros::new_zeroed();
        assert!(may_take_long(&Op::Write { arg: w, data: &big }));
        assert!(!may_take_long(&Op::Write { arg: w, data: &big[..100] }));
        assert!(may_take_long(&Op::Fsync { fh: 0, datasync: false }));
        assert!(!may_take_long(&Op::Getattr { fh: None }));
    }
}
