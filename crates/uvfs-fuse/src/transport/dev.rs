//! The classic transport: worker threads, each on its own cloned `/dev/fuse` descriptor,
//! `read` a request into a per-thread buffer and `write` the reply (header and payload
//! contiguous in a second per-thread buffer, read data produced in place), so a request
//! costs two system calls and allocates nothing here.
//!
//! Busy polling ([`crate::MountOptions::busy_poll`]): one worker, after answering a
//! request, keeps asking for the next one without sleeping (non-blocking reads) for that
//! long. A request that arrives meanwhile is taken at once: the caller's wake-up of a
//! sleeping worker, and that worker's way out of the idle CPU (in a virtual machine an exit
//! to the hypervisor), is not paid, which is a third of a round trip here. The poller
//! yields the CPU between attempts, so a runnable program is not kept waiting by it, and it
//! sleeps as before once the requests stop; the window shrinks while requests come too
//! far apart for it to catch them (see `Poll`). The other workers sleep in `read` as
//! always and serve what arrives while the poller is busy.
//!
//! Once the io_uring queues carry the requests, what still comes here is FORGETs (one per
//! evicted inode: an `rm -rf` sends thousands) and the rare INTERRUPT. The kernel wakes a
//! worker sleeping in `read` for each of them, from the caller's CPU, inside its `unlink`:
//! a cross-CPU wake-up on the caller's path, which on the VM of BENCHMARKS.md cost more
//! than the UNLINK's own round trip. So then one worker (the last) stays and drains the
//! device without sleeping in `read` ([`LAZY_MIN`] to [`LAZY_MAX`] between looks, the gap
//! doubling while nothing comes), and the others end: a FORGET queued meanwhile wakes
//! nobody.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zerocopy::IntoBytes;

use crate::reply::{Reply, ReplyBuf, out_header};
use crate::request::{Op, decode_dev};
use crate::session::{DEV_BUF, Later, LaterTo, MAX_WRITE, Session};

/// Starts `n` workers, the first on the connection's own descriptor and the others on
/// clones. With `busy_poll` the last one polls, always on a clone (`O_NONBLOCK` belongs to
/// the open file, and the connection's own descriptor also carries notifications): a
/// single worker then reads a clone too.
pub(crate) fn spawn(session: &Arc<Session>, n: usize, busy_poll: Duration) -> std::io::Result<Vec<JoinHandle<()>>> {
    let n = n.max(1);
    let polls = !busy_poll.is_zero();
    let mut fds = Vec::new();
    for i in 0..n {
        let own = i > 0 || (polls && n == 1);
        fds.push(if own { Arc::new(super::clone_dev(&session.dev)?) } else { session.dev.clone() });
    }
    let mut workers = Vec::new();
    for (i, fd) in fds.into_iter().enumerate() {
        let s = session.clone();
        let poll = if polls && i == n - 1 { Some(busy_poll) } else { None };
        let stays = i == n - 1;
        workers.push(
            std::thread::Builder::new().name(format!("uvfs-fuse-{i}")).spawn(move || worker(&s, &fd, poll, stays))?,
        );
    }
    Ok(workers)
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

/// A worker's busy polling (owned by the worker). The window adapts, as the kernel's
/// `haltpoll` idle governor does: a request that came later than the window but within
/// `max` of the previous reply doubles it (up to `max`); one that came later than `max`
/// halves it, down to nothing. So a program sending requests back to back is polled for
/// the whole `max`, and one whose requests are further apart (a compiler, `git` hashing
/// objects) costs no CPU in polling that would not have caught them.
struct Poll {
    /// The longest window (`MountOptions::busy_poll`).
    max: Duration,
    /// How long it polls after a reply now.
    window: Duration,
    /// When the last reply was written.
    answered: Instant,
    /// The descriptor has `O_NONBLOCK`: polling, until `answered + window`.
    nonblocking: bool,
}

impl Poll {
    fn new(max: Duration) -> Poll {
        Poll { max, window: max, answered: Instant::now(), nonblocking: false }
    }

    /// Sets or clears `O_NONBLOCK` on `fd`.
    fn set(&mut self, fd: &OwnedFd, on: bool) {
        set_nonblocking(fd, on);
        self.nonblocking = on;
    }

    /// A request was read; returns whether polling took it. One that the worker slept
    /// for moves the window.
    fn arrived(&mut self) -> bool {
        if self.nonblocking {
            return true;
        }
        let floor = self.max / 8;
        if self.answered.elapsed() <= self.max {
            self.window = (self.window * 2).clamp(floor, self.max);
        } else {
            self.window /= 2;
            if self.window < floor {
                self.window = Duration::ZERO;
            }
        }
        false
    }

    /// A reply was written: poll for the next request, unless the window is closed or
    /// the io_uring queues serve the connection (they run on the caller's CPU, where
    /// polling would take it from the caller; this worker then sees only the rare
    /// request they do not carry).
    fn answered(&mut self, session: &Session, fd: &OwnedFd) {
        self.answered = Instant::now();
        let on = !self.window.is_zero() && (self.nonblocking || !session.uring_active());
        if on != self.nonblocking {
            self.set(fd, on);
        }
        if on {
            session.poll_windows.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Nothing was there: go on polling (yielding the CPU first) while the window lasts,
    /// else sleep in `read` again.
    fn idle(&mut self, fd: &OwnedFd) {
        if self.answered.elapsed() < self.window {
            std::thread::yield_now();
        } else {
            self.set(fd, false);
        }
    }
}

/// `stays`: the worker that remains once io_uring carries the requests (see the module
/// docs); the others end then.
fn worker(session: &Session, fd: &Arc<OwnedFd>, busy_poll: Option<Duration>, stays: bool) {
    let mut inbuf = vec![0u8; DEV_BUF];
    let mut outbuf = vec![0u8; 16 + MAX_WRITE + 4096];
    let mut poll = busy_poll.map(Poll::new);
    // Once io_uring serves: the gap before the next look at the device.
    let mut lazy: Option<Duration> = None;
    loop {
        if lazy.is_none() && session.uring_active() {
            if !stays {
                // Not the end of the connection: no `set_gone`.
                return;
            }
            set_nonblocking(fd, true);
            poll = None;
            lazy = Some(LAZY_MIN);
        }
        // SAFETY: reads into a buffer we own, of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), inbuf.as_mut_ptr().cast(), inbuf.len()) };
        if n < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EAGAIN) => {
                    if let Some(gap) = lazy.as_mut() {
                        std::thread::sleep(*gap);
                        *gap = (*gap * 2).min(LAZY_MAX);
                    } else if let Some(p) = poll.as_mut() {
                        p.idle(fd);
                    }
                    continue;
                }
                // Interrupted, or the request went away before we read it.
                Some(libc::EINTR) | Some(libc::ENOENT) => continue,
                // Unmounted or aborted.
                Some(libc::ENODEV) | Some(libc::ECONNABORTED) => break,
                e => {
                    log::error!("uvfs-fuse: read /dev/fuse: errno {e:?}");
                    break;
                }
            }
        }
        if poll.as_mut().is_some_and(Poll::arrived) {
            session.polled.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(gap) = lazy.as_mut() {
            *gap = LAZY_MIN;
        }
        let (head, body) = outbuf.split_at_mut(16);
        let mut out = ReplyBuf::new(body);
        let (unique, reply, init) = match decode_dev(&inbuf[..n as usize]) {
            Ok(req) => {
                let later = || Later { unique: req.header.unique, to: LaterTo::Dev(fd.clone()) };
                (req.header.unique, session.dispatch(&req, &mut out, &later), matches!(req.op, Op::Init(_)))
            }
            Err(Some((unique, e))) => (unique, Reply::Err(e), false),
            Err(None) => continue,
        };
        if reply != Reply::None && reply != Reply::Later {
            let h = out_header(unique, &reply, out.len());
            head.copy_from_slice(h.as_bytes());
            let total = h.len as usize;
            // SAFETY: writes `total` initialized bytes of a buffer we own.
            let w = unsafe { libc::write(fd.as_raw_fd(), outbuf.as_ptr().cast(), total) };
            if w < 0 {
                let e = std::io::Error::last_os_error().raw_os_error();
                // ENOENT: the request was interrupted and is gone; nothing to do.
                if e != Some(libc::ENOENT) {
                    log::warn!("uvfs-fuse: reply to /dev/fuse: errno {e:?}");
                }
            }
        }
        if init {
            session.init_replied();
        }
        if let Some(p) = poll.as_mut() {
            p.answered(session, fd);
        }
    }
    session.set_gone();
}
