//! FUSE over io_uring (Linux 6.14+, `Documentation/filesystems/fuse-io-uring.rst`).
//!
//! The kernel wants one queue per possible CPU and sends a request to the queue of the
//! CPU its caller runs on. Each queue here is a thread pinned to that CPU with its own
//! ring (128-byte SQEs for the command area) and [`DEPTH`] entries. An entry is a header
//! buffer ([`abi::UringReqHeader`]: the request's `InHeader`, its fixed argument struct,
//! and the sizes) and a payload buffer (names, write data; the reply), registered once
//! with `FUSE_IO_URING_CMD_REGISTER` ([`abi::URING_CMD_REGISTER`]). A completion means a
//! request sits in the entry; the reply is written into the same buffers and handed back
//! with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also makes the entry wait for the
//! next request: one `io_uring_enter` per batch of requests, no `read`/`write` each.
//!
//! INIT, FORGET and INTERRUPT still come through `/dev/fuse` (the [`super::dev`] workers
//! stay), and so do the requests of a connection whose queues are not all registered.
//! Everything that can make io_uring unusable is found before a request depends on it:
//! the module parameter and the sysctl before mounting, the rings themselves before INIT
//! asks for `FUSE_OVER_IO_URING` (once asked, the kernel holds requests until every queue
//! registered or one registration failed), a refused registration right after INIT.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use uvfs::Errno;
use zerocopy::IntoBytes;

use super::sched::{self, QueueClass};
use crate::abi::{self, UringCmdReq, UringReqHeader};
use crate::reply::{Reply, ReplyBuf, out_header};
use crate::request::decode;
use crate::session::{MAX_WRITE, Session, UringState};

/// Ring entries per queue: requests one CPU's callers can have in flight at once without
/// waiting for an entry (the payload buffers are only touched, and so only resident, as
/// far as requests fill them).
pub const DEPTH: usize = 8;

/// The io_uring queues, set up and waiting for the session.
/// Owned by the mounting thread until handed over.
pub(crate) struct Queues {
    /// One per queue (qid = index = CPU).
    threads: Vec<JoinHandle<()>>,
    /// Each queue's start signal: the session, or `None` to give up.
    go: Vec<mpsc::Sender<Option<Arc<Session>>>>,
    /// With idle-class queue threads ([`QueueClass::Idle`]): what they share with the
    /// guard ([`sched`]), and the guard's thread, which ends after the last queue.
    sched: Option<(Arc<sched::Shared>, JoinHandle<()>)>,
    /// Why the queue threads stay in the normal class although [`QueueClass::Idle`] was
    /// asked for.
    pub(crate) idle_unavailable: Option<String>,
}

/// Why io_uring cannot be used, from what the system says before trying.
fn precheck() -> Result<(), String> {
    match std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring") {
        Ok(s) if s.trim() == "Y" => {}
        Ok(_) => return Err("enable_uring is off".into()),
        Err(_) => return Err("the kernel's FUSE has no io_uring support (no enable_uring parameter)".into()),
    }
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        && s.trim() == "2"
    {
        return Err("io_uring is disabled: kernel.io_uring_disabled is 2".into());
    }
    Ok(())
}

/// The number of possible CPUs (the kernel's number of queues).
fn possible_cpus() -> usize {
    let parse = |s: &str| -> Option<usize> {
        let mut n = 0;
        for part in s.trim().split(',') {
            let (a, b) = match part.split_once('-') {
                Some((a, b)) => (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?),
                None => {
                    let a = part.parse::<usize>().ok()?;
                    (a, a)
                }
            };
            n = n.max(b + 1).max(a + 1);
        }
        Some(n)
    };
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| parse(&s))
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl Queues {
    /// Sets up one ring per possible CPU (each on its own pinned thread, of `class`), or
    /// says why not.
    pub(crate) fn prepare(class: QueueClass) -> Result<Queues, String> {
        precheck()?;
        let n = possible_cpus();
        let (sched, idle_unavailable) = match class {
            QueueClass::Normal => (None, None),
            QueueClass::Idle => match sched::start(n) {
                Ok(s) => (Some(s), None),
                Err(why) => (None, Some(why)),
            },
        };
        let shared = sched.as_ref().map(|(s, _)| s.clone());
        let (report_tx, report_rx) = mpsc::channel::<Result<(), String>>();
        let mut q = Queues { threads: Vec::new(), go: Vec::new(), sched, idle_unavailable };
        for qid in 0..n {
            let (go_tx, go_rx) = mpsc::channel();
            let report = report_tx.clone();
            let exit = QueueExit(shared.clone(), qid);
            let spawned = std::thread::Builder::new()
                .name(format!("uvfs-fuse-q{qid}"))
                .spawn(move || queue_thread(qid, report, go_rx, &exit));
            let t = match spawned {
                Ok(t) => t,
                Err(e) => {
                    // The queues not started never end: stop the guard here.
                    if let Some(s) = &shared {
                        s.end();
                    }
                    q.cancel();
                    return Err(format!("cannot start a queue thread: {e}"));
                }
            };
            q.threads.push(t);
            q.go.push(go_tx);
        }
        drop(report_tx);
        let mut err = None;
        for _ in 0..n {
            match report_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => err = err.or(Some(e)),
                Err(_) => err = err.or(Some("a queue thread died".into())),
            }
        }
        match err {
            None => Ok(q),
            Some(e) => {
                q.cancel();
                Err(e)
            }
        }
    }

    /// The number of queues.
    pub(crate) fn len(&self) -> usize {
        self.go.len()
    }

    /// Hands the session to the queues, which register once INIT was answered; returns
    /// the threads to join (the guard's last) and what the guard counts.
    pub(crate) fn start(self, session: &Arc<Session>) -> (Vec<JoinHandle<()>>, Option<Arc<sched::Shared>>) {
        for g in &self.go {
            let _ = g.send(Some(session.clone()));
        }
        let mut threads = self.threads;
        let shared = self.sched.map(|(s, guard)| {
            threads.push(guard);
            s
        });
        (threads, shared)
    }

    /// Stops the queues unused.
    pub(crate) fn cancel(self) {
        for g in &self.go {
            let _ = g.send(None);
        }
        for t in self.threads {
            let _ = t.join();
        }
        if let Some((_, guard)) = self.sched {
            let _ = guard.join();
        }
    }
}

/// Tells the guard that queue thread `.1` ended, however it ends (dropped by the thread).
struct QueueExit(Option<Arc<sched::Shared>>, usize);

impl Drop for QueueExit {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            s.exit(self.1);
        }
    }
}

/// One ring entry's buffers. They are shared with the kernel, which writes them while our
/// thread is inside `io_uring_enter`; so they are held as raw pointers (never as `&mut`
/// across a system call) and only read or written between a completion and the next
/// submission of that entry.
struct Entry {
    /// The header buffer (`Box::into_raw`, freed on drop).
    header: *mut UringReqHeader,
    /// The payload buffer (`Box::into_raw` of a boxed slice, freed on drop).
    payload: *mut [u8],
    /// `[header, payload]` for REGISTER (boxed: its address is in the SQE).
    iov: Box<[libc::iovec; 2]>,
}

impl Entry {
    fn new(payload_len: usize) -> Entry {
        let header = Box::into_raw(Box::new(<UringReqHeader as zerocopy::FromZeros>::new_zeroed()));
        let payload = Box::into_raw(vec![0u8; payload_len].into_boxed_slice());
        let iov = Box::new([
            libc::iovec { iov_base: header.cast(), iov_len: std::mem::size_of::<UringReqHeader>() },
            libc::iovec { iov_base: payload.cast(), iov_len: payload_len },
        ]);
        Entry { header, payload, iov }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        // SAFETY: both came from `Box::into_raw` in `new` and are freed once, after the
        // ring that shared them was dropped (see `Ring`'s field order).
        unsafe {
            drop(Box::from_raw(self.header));
            drop(Box::from_raw(self.payload));
        }
    }
}

/// A queue's ring and entries. Field order matters: the ring (and with it every command
/// the kernel still holds) goes before the buffers those commands point into.
/// Owned by its queue thread.
struct Ring {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    entries: Vec<Entry>,
    /// The buffer of the eventfd read that wakes the thread for late replies (its
    /// address is in an SQE the kernel may hold until the ring goes).
    later_buf: Box<u64>,
}

/// `user_data` of the eventfd read.
const LATER_TAG: u64 = u64::MAX;

/// The late replies ([`crate::session::Later`]) of one queue's entries, waiting for its
/// thread to commit them (only that thread submits to its ring).
pub(crate) struct LaterQueue {
    /// (entry, commit id, reply header), pushed by the thread that answers.
    done: parking_lot::Mutex<Vec<(usize, u64, abi::OutHeader)>>,
    /// Written to wake the queue thread, which always has a read of it in its ring.
    efd: std::os::fd::OwnedFd,
}

/// An entry whose request is answered later.
pub(crate) struct LaterEntry {
    queue: Arc<LaterQueue>,
    entry: usize,
    commit_id: u64,
}

impl LaterEntry {
    /// Hands the reply (a header without payload) to the queue thread, which commits it.
    pub(crate) fn commit(self, h: abi::OutHeader) {
        self.queue.done.lock().push((self.entry, self.commit_id, h));
        let one = 1u64;
        // SAFETY: writes 8 bytes we own to an eventfd.
        unsafe { libc::write(self.queue.efd.as_raw_fd(), (&raw const one).cast(), 8) };
    }
}

fn build_ring() -> std::io::Result<IoUring<squeue::Entry128, cqueue::Entry>> {
    let n = (2 * DEPTH) as u32;
    // Task work (copying a request into an entry) runs when this thread waits for
    // completions, not as an interrupt of whatever it does.
    match IoUring::<squeue::Entry128, cqueue::Entry>::builder().setup_single_issuer().setup_defer_taskrun().build(n) {
        Ok(r) => Ok(r),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => IoUring::builder().build(n),
        Err(e) => Err(e),
    }
}

/// A URING_CMD SQE for `/dev/fuse`; with `iov`, the REGISTER form (its `addr` and `len`).
fn cmd_sqe(fd: RawFd, op: u32, req: &UringCmdReq, iov: Option<*const libc::iovec>, user_data: u64) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[..std::mem::size_of::<UringCmdReq>()].copy_from_slice(req.as_bytes());
    let e =
        opcode::UringCmd80::new(types::Fd(fd), op).cmd(cmd).addr(iov.map(|p| p as u64)).build().user_data(user_data);
    if iov.is_none() {
        return e;
    }
    // The builder has no `len`; REGISTER needs `len` = 2 (iovecs). `Entry128` is
    // `#[repr(C)]` around the kernel's `io_uring_sqe` (64 bytes, `len` at offset 24) and
    // 64 command bytes, every bit pattern of which is a valid value.
    // SAFETY: same size (checked by transmute), plain-data layout as described.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(e) };
    raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

fn pin_to(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    if cpu < rustix::thread::CpuSet::MAX_CPU {
        set.set(cpu);
        // An offline CPU cannot be pinned to; its queue then serves from anywhere.
        let _ = rustix::thread::sched_setaffinity(None, &set);
    }
}

fn errno_text(e: i32) -> String {
    Errno::from_raw(e).name().map_or_else(|| format!("errno {e}"), str::to_string)
}

fn queue_thread(
    qid: usize,
    report: mpsc::Sender<Result<(), String>>,
    go: mpsc::Receiver<Option<Arc<Session>>>,
    exit: &QueueExit,
) {
    pin_to(qid);
    let ring = match build_ring() {
        Ok(r) => r,
        Err(e) => {
            let why = match e.raw_os_error() {
                Some(libc::EPERM) => "io_uring is not permitted (kernel.io_uring_disabled)".to_string(),
                _ => format!("cannot create an io_uring: {e}"),
            };
            let _ = report.send(Err(why));
            return;
        }
    };
    let mut r = Ring { ring, entries: Vec::new(), later_buf: Box::new(0) };
    // The kernel's payload size: max(8 KiB, max_write, max_pages pages) = MAX_WRITE.
    for _ in 0..DEPTH {
        r.entries.push(Entry::new(MAX_WRITE));
    }
    let _ = report.send(Ok(()));
    drop(report);
    let Ok(Some(session)) = go.recv() else { return };
    if session.wait_init().is_none() || !matches!(session.uring(), UringState::Registering(_)) {
        return;
    }
    if let Some(s) = &exit.0 {
        s.enter(qid);
    }
    serve(qid, &mut r, &session, exit.0.as_deref());
}

/// What an entry is doing, as far as this thread knows.
#[derive(Clone, Copy, PartialEq)]
enum EntState {
    /// REGISTER submitted, nothing heard yet.
    Registering,
    /// Waiting for (or holding) a request.
    Live,
    /// The kernel is done with it (connection gone, or an error).
    Dead,
}

fn serve(qid: usize, r: &mut Ring, session: &Session, sched: Option<&sched::Shared>) {
    let fd = session.dev.as_raw_fd();
    let qreq = |commit_id| UringCmdReq { flags: 0, commit_id, qid: qid as u16, padding: [0; 6] };
    let mut state = vec![EntState::Registering; r.entries.len()];
    {
        let mut sq = r.ring.submission();
        for (i, e) in r.entries.iter().enumerate() {
            let sqe = cmd_sqe(fd, abi::URING_CMD_REGISTER, &qreq(0), Some(e.iov.as_ptr()), i as u64);
            // SAFETY: the SQE's iovecs and buffers live in `r.entries`, which outlive the
            // ring (see `Ring`).
            if unsafe { sq.push(&sqe) }.is_err() {
                session.uring_registered(Err("the submission queue is full".into()));
                return;
            }
        }
    }
    // SAFETY: a new eventfd, owned below.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if efd < 0 {
        session.uring_registered(Err(format!("eventfd: {}", std::io::Error::last_os_error())));
        return;
    }
    // SAFETY: just made, owned by nobody else.
    let efd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(efd) };
    let later = Arc::new(LaterQueue { done: parking_lot::Mutex::new(Vec::new()), efd });
    let arm_later = |r: &mut Ring| {
        let sqe = opcode::Read::new(types::Fd(later.efd.as_raw_fd()), (&raw mut *r.later_buf).cast(), 8)
            .build()
            .user_data(LATER_TAG);
        // SAFETY: the buffer lives in `r` after the ring (see `Ring`); at most one read
        // is in flight.
        let _ = unsafe { r.ring.submission().push(&sqe.into()) };
    };
    arm_later(r);
    if let Err(e) = r.ring.submit() {
        session.uring_registered(Err(format!("io_uring_enter: {e}")));
        return;
    }
    // A refused REGISTER completes at once; an accepted one only when a request comes.
    let mut registered = false;
    let mut scratch = vec![0u8; MAX_WRITE];
    let ts = types::Timespec::new().sec(1);
    let args = types::SubmitArgs::new().timespec(&ts);
    loop {
        let mut refused = None;
        // At most one completion per entry between two waits.
        let mut commits = [(0usize, 0u64); DEPTH];
        let mut ncommits = 0;
        let mut rearm = false;
        for cqe in r.ring.completion() {
            let (ud, res) = (cqe.user_data(), cqe.result());
            if ud == LATER_TAG {
                // Late replies: into their entries, committed below.
                for (i, commit_id, h) in std::mem::take(&mut *later.done.lock()) {
                    if let Some(e) = r.entries.get(i) {
                        // SAFETY: the kernel does not touch an entry between handing us
                        // its request and our commit; nothing else refers to it.
                        let hdr = unsafe { &mut *e.header };
                        hdr.in_out[..16].copy_from_slice(h.as_bytes());
                        hdr.ring_ent_in_out.payload_sz = 0;
                        if ncommits < DEPTH {
                            commits[ncommits] = (i, commit_id);
                            ncommits += 1;
                        }
                    }
                }
                rearm = res >= 0 || res == -libc::EINTR;
                continue;
            }
            let i = ud as usize;
            if i >= state.len() {
                continue;
            }
            if res < 0 {
                if state[i] == EntState::Registering {
                    refused = Some(-res);
                }
                state[i] = EntState::Dead;
                continue;
            }
            state[i] = EntState::Live;
            // None: answered later (see `LaterQueue`).
            if let Some(commit_id) = handle(&r.entries[i], i, &later, session, &mut scratch)
                && ncommits < DEPTH
            {
                commits[ncommits] = (i, commit_id);
                ncommits += 1;
            }
        }
        if rearm {
            arm_later(r);
        }
        if !registered {
            registered = true;
            match refused {
                Some(e) => {
                    session.uring_registered(Err(format!(
                        "the kernel refused FUSE_IO_URING_CMD_REGISTER: {}",
                        errno_text(e)
                    )));
                    return;
                }
                None => session.uring_registered(Ok(())),
            }
        }
        if ncommits > 0 {
            if let Some(s) = sched {
                s.served(qid);
            }
            let mut sq = r.ring.submission();
            for &(i, commit_id) in &commits[..ncommits] {
                let sqe = cmd_sqe(fd, abi::URING_CMD_COMMIT_AND_FETCH, &qreq(commit_id), None, i as u64);
                // SAFETY: as for REGISTER; at most DEPTH commands are in flight and the
                // queue holds 2 * DEPTH.
                let _ = unsafe { sq.push(&sqe) };
            }
        }
        if state.iter().all(|&s| s == EntState::Dead) || session.is_gone() {
            return;
        }
        match r.ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => {}
            Err(e) => {
                log::error!("uvfs-fuse: queue {qid}: io_uring_enter: {e}");
                return;
            }
        }
    }
}

/// Answers the request in entry `e` (number `idx`); returns the commit id for
/// COMMIT_AND_FETCH, or `None` when the request is answered later through `later`.
fn handle(e: &Entry, idx: usize, later: &Arc<LaterQueue>, session: &Session, scratch: &mut [u8]) -> Option<u64> {
    // SAFETY: the completion says the kernel filled the entry and will not touch it again
    // before we submit its commit; nothing else refers to these buffers now.
    let (hdr, payload) = unsafe { (&mut *e.header, &mut *e.payload) };
    let commit_id = hdr.ring_ent_in_out.commit_id;
    let psz = (hdr.ring_ent_in_out.payload_sz as usize).min(payload.len());
    let Some(h) = crate::request::header(&hdr.in_out) else {
        return Some(commit_id);
    };
    let late = || crate::session::Later {
        unique: h.unique,
        to: crate::session::LaterTo::Uring(LaterEntry { queue: later.clone(), entry: idx, commit_id }),
    };
    let (reply, len) = if psz == 0 {
        // Every argument is in the header buffer: the reply goes straight into the payload.
        let mut out = ReplyBuf::new(payload);
        let reply = match decode(h, Some(&hdr.op_in), &[]) {
            Ok(req) => session.dispatch(&req, &mut out, &late),
            Err(e) => Reply::Err(e),
        };
        (reply, out.len())
    } else {
        // The request borrows the payload (names, data; its reply is small): the reply is
        // built beside it, then copied in.
        let mut out = ReplyBuf::new(scratch);
        let reply = match decode(h, Some(&hdr.op_in), &payload[..psz]) {
            Ok(req) => session.dispatch(&req, &mut out, &late),
            Err(e) => Reply::Err(e),
        };
        let n = out.len();
        payload[..n].copy_from_slice(&scratch[..n]);
        (reply, n)
    };
    if reply == Reply::Later {
        return None;
    }
    // FORGET and INTERRUPT never come through a ring; anything without a reply would
    // leave the entry stuck, so it is answered.
    let reply = if reply == Reply::None { Reply::Err(Errno::ENOSYS) } else { reply };
    let oh = out_header(h.unique, &reply, len);
    hdr.in_out[..16].copy_from_slice(oh.as_bytes());
    hdr.ring_ent_in_out.payload_sz = if matches!(reply, Reply::Ok) { len as u32 } else { 0 };
    Some(commit_id)
}
