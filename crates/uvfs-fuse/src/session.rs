//! The connection: INIT negotiation, the requests the protocol itself answers (INIT,
//! DESTROY, INTERRUPT; FORGET needs no reply), and notifications to the kernel.
//!
//! The transports hand every decoded request to `Session::dispatch`; the filesystem's
//! requests go on to the `Server`. INIT always arrives through `/dev/fuse` (a ring can
//! only be registered once the connection is initialized); the transport that wrote its
//! reply calls `Session::init_replied`, which lets the io_uring queues register.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};
use uvfs::Errno;
use zerocopy::IntoBytes;

use crate::abi::{self, InitFlags, notify_code};
use crate::reply::{Reply, ReplyBuf};
use crate::request::{Op, Request};
use crate::server::Server;

/// The largest WRITE the kernel sends and READ it asks for (`max_write`,
/// `max_pages` x 4 KiB).
pub const MAX_WRITE: usize = 1 << 20;
/// `max_pages` asked for in INIT.
pub const MAX_PAGES: u16 = (MAX_WRITE / 4096) as u16;
/// A `/dev/fuse` read buffer: the largest WRITE with its header and fixed struct (the
/// kernel refuses a read into anything smaller).
pub const DEV_BUF: usize = MAX_WRITE + 4096;

/// Where the io_uring transport stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UringState {
    /// Not asked for.
    NotRequested,
    /// Queues are set up, waiting for INIT.
    Prepared,
    /// INIT accepted `FUSE_OVER_IO_URING`; `n` queues have not registered yet.
    Registering(usize),
    /// Every queue registered its entries: requests come through the rings.
    Active,
    /// Not available: why (one line).
    Off(String),
}

/// The connection's negotiation state.
struct State {
    /// The flags INIT settled, once its reply was written.
    init: Option<InitFlags>,
    /// The connection is gone (or the mount failed): nothing waits any longer.
    gone: bool,
    /// The io_uring transport.
    uring: UringState,
}

/// One FUSE connection.
pub struct Session {
    /// The handlers (immutable reference).
    pub(crate) server: Arc<Server>,
    /// The connection's `/dev/fuse` descriptor (immutable; workers clone it,
    /// notifications are written to it).
    pub(crate) dev: Arc<OwnedFd>,
    /// The number of io_uring queues (immutable; 0 without io_uring).
    nqueues: usize,
    /// Requests a busy-polling `/dev/fuse` worker took without sleeping (atomic; a
    /// statistic).
    pub(crate) polled: AtomicU64,
    /// Times a busy-polling worker began to poll after a reply (atomic; a statistic).
    pub(crate) poll_windows: AtomicU64,
    /// What the `/dev/fuse` followers did (atomic statistics).
    pub(crate) crew: crate::transport::dev::CrewStats,
    /// Atomic, set once (when `state.uring` becomes `Active`, which it never leaves): the
    /// io_uring queues carry the requests. Read without the state's lock by the
    /// `/dev/fuse` workers at every request.
    uring_on: AtomicBool,
    /// Negotiation state, behind its lock; `cv` wakes those waiting for it.
    state: Mutex<State>,
    cv: Condvar,
}

impl Session {
    /// A session on `dev`; `uring` says whether `nqueues` io_uring queues stand ready.
    pub(crate) fn new(server: Arc<Server>, dev: OwnedFd, uring: UringState, nqueues: usize) -> Session {
        let dev = Arc::new(dev);
        let _ = server.passthrough.dev.set(dev.clone());
        Session {
            server,
            dev,
            nqueues,
            polled: AtomicU64::new(0),
            poll_windows: AtomicU64::new(0),
            crew: Default::default(),
            uring_on: AtomicBool::new(false),
            state: Mutex::new(State { init: None, gone: false, uring }),
            cv: Condvar::new(),
        }
    }

    /// Answers a request: the protocol's own, or the server's. `later` says where a
    /// reply sent later goes (a handler that answers [`Reply::Later`] takes it).
    pub(crate) fn dispatch(&self, req: &Request<'_>, out: &mut ReplyBuf<'_>, later: &dyn Fn() -> Later) -> Reply {
        match &req.op {
            Op::Init(init) => self.init(init, out).into(),
            // Sent to fuseblk servers before unmount; nothing to tear down early here.
            Op::Destroy => Reply::Ok,
            // Only a waiting SETLKW can be interrupted (every other handler finishes
            // promptly): it is stopped and answers EINTR itself, and the interrupt gets
            // no reply. Any other request is finished, or about to be: EAGAIN makes the
            // kernel send the interrupt again until it is (a reply for a finished request
            // it ignores).
            Op::Interrupt { unique } => {
                if self.server.interrupt_lock_wait(*unique) {
                    Reply::None
                } else {
                    Reply::Err(Errno::EAGAIN)
                }
            }
            _ => self.server.handle(req, out, later),
        }
    }

    fn init(&self, init: &abi::InitIn, out: &mut ReplyBuf<'_>) -> Result<(), Errno> {
        if init.major != abi::KERNEL_VERSION || init.minor < abi::MIN_MINOR_VERSION {
            log::error!("uvfs-fuse: kernel FUSE protocol {}.{} is not supported", init.major, init.minor);
            return Err(Errno::from_raw(libc::EPROTO));
        }
        let offered = InitFlags::from_bits_retain(
            u64::from(init.flags)
                | if init.flags & InitFlags::INIT_EXT.bits() as u32 != 0 { u64::from(init.flags2) << 32 } else { 0 },
        );
        let mut want = self.server.init_flags() | InitFlags::INIT_EXT;
        {
            let mut st = self.state.lock();
            if st.uring == UringState::Prepared {
                if offered.contains(InitFlags::OVER_IO_URING) {
                    want |= InitFlags::OVER_IO_URING;
                } else {
                    st.uring = UringState::Off("the kernel did not offer FUSE_OVER_IO_URING".into());
                }
            }
        }
        let got = want & offered;
        self.server.initialized(got, init.minor);
        let bits = got.bits();
        out.push(&abi::InitOut {
            major: abi::KERNEL_VERSION,
            minor: init.minor.min(abi::KERNEL_MINOR_VERSION),
            // The kernel keeps the smaller of this and the mount's window: at least as
            // large as `Levers::READAHEAD` raises it to, so that INIT, if it comes after
            // the raise, does not lower it again.
            max_readahead: if self.server.opts.levers.contains(crate::Levers::READAHEAD) {
                init.max_readahead.max(MAX_WRITE as u32)
            } else {
                init.max_readahead
            },
            flags: bits as u32,
            max_background: 16,
            congestion_threshold: 12,
            max_write: MAX_WRITE as u32,
            time_gran: 1,
            max_pages: MAX_PAGES,
            map_alignment: 0,
            flags2: (bits >> 32) as u32,
            // Passthrough needs a stacking depth: the host files are one level below.
            max_stack_depth: u32::from(got.contains(InitFlags::PASSTHROUGH)),
            request_timeout: 0,
            unused: [0; 11],
        })?;
        // Remembered now; published by `init_replied` once the kernel has the reply.
        self.state.lock().init = Some(got);
        Ok(())
    }

    /// Called by the transport after it wrote INIT's reply: the connection is
    /// initialized, and io_uring queues may register.
    pub(crate) fn init_replied(&self) {
        let mut st = self.state.lock();
        if let Some(got) = st.init
            && st.uring == UringState::Prepared
        {
            st.uring = if got.contains(InitFlags::OVER_IO_URING) {
                UringState::Registering(self.nqueues)
            } else {
                UringState::Off("the kernel did not offer FUSE_OVER_IO_URING".into())
            };
        }
        self.cv.notify_all();
    }

    /// Waits until INIT was answered; the flags it settled, or `None` if the connection
    /// went away first.
    pub(crate) fn wait_init(&self) -> Option<InitFlags> {
        let mut st = self.state.lock();
        loop {
            if st.gone {
                return None;
            }
            if let (Some(f), false) = (st.init, st.uring == UringState::Prepared) {
                return Some(f);
            }
            self.cv.wait(&mut st);
        }
    }

    /// The io_uring transport's state.
    pub(crate) fn uring(&self) -> UringState {
        self.state.lock().uring.clone()
    }

    /// Whether the io_uring queues serve the connection: one atomic load, no lock (the
    /// `/dev/fuse` workers ask at every request).
    pub(crate) fn uring_active(&self) -> bool {
        self.uring_on.load(Ordering::Acquire)
    }

    /// A queue registered its entries (`Ok`) or could not (`Err(why)`).
    pub(crate) fn uring_registered(&self, r: Result<(), String>) {
        let mut st = self.state.lock();
        match (&st.uring, r) {
            (UringState::Registering(n), Ok(())) => {
                st.uring = if *n <= 1 { UringState::Active } else { UringState::Registering(n - 1) };
                if st.uring == UringState::Active {
                    self.uring_on.store(true, Ordering::Release);
                }
            }
            (UringState::Registering(_), Err(why)) => st.uring = UringState::Off(why),
            _ => {}
        }
        self.cv.notify_all();
    }

    /// Waits until INIT was answered and the io_uring queues (if any) registered or gave
    /// up; false if the connection went away first.
    pub(crate) fn wait_settled(&self) -> bool {
        let mut st = self.state.lock();
        loop {
            if st.gone {
                return false;
            }
            let settled = st.init.is_some()
                && matches!(st.uring, UringState::NotRequested | UringState::Active | UringState::Off(_));
            if settled {
                return true;
            }
            self.cv.wait(&mut st);
        }
    }

    /// The connection ended: wake everything that waits.
    pub(crate) fn set_gone(&self) {
        self.state.lock().gone = true;
        self.cv.notify_all();
    }

    /// Whether the connection ended.
    pub(crate) fn is_gone(&self) -> bool {
        self.state.lock().gone
    }

    /// A notifier writing to this connection.
    pub(crate) fn notifier(&self) -> Notifier {
        Notifier { dev: self.dev.clone() }
    }
}

/// Where the reply to a request answered later ([`Reply::Later`]) goes: the
/// `/dev/fuse` descriptor it was read from (each has its own processing queue), or the
/// io_uring entry it sits in.
pub(crate) enum LaterTo {
    Dev(Arc<OwnedFd>),
    Uring(crate::transport::uring::LaterEntry),
}

/// A request to answer later, from any thread: SETLKW, whose wait for a lock must not
/// hold a transport thread (a ring's thread serves every caller on its CPU, and the
/// unlock it waits for may come from one of them).
pub(crate) struct Later {
    /// The request's `unique`.
    pub(crate) unique: u64,
    /// Where the reply goes.
    pub(crate) to: LaterTo,
}

impl Later {
    /// Sends the reply: success without payload (all SETLKW answers), or an error.
    pub(crate) fn reply(self, r: Result<(), Errno>) {
        let reply = Reply::from(r);
        let h = crate::reply::out_header(self.unique, &reply, 0);
        match self.to {
            LaterTo::Dev(fd) => {
                // SAFETY: writes the 16 bytes of a header we own.
                let w = unsafe { libc::write(fd.as_raw_fd(), h.as_bytes().as_ptr().cast(), h.len as usize) };
                if w < 0 {
                    // ENOENT: interrupted and gone; ENODEV: unmounted.
                    log::debug!("uvfs-fuse: late reply: {}", std::io::Error::last_os_error());
                }
            }
            LaterTo::Uring(e) => e.commit(h),
        }
    }
}

/// Sends notifications (unsolicited messages: `unique` 0, the code in `error`) on a
/// connection, through `/dev/fuse` (also when requests come through io_uring).
#[derive(Clone)]
pub struct Notifier {
    /// The connection's descriptor (immutable).
    dev: Arc<OwnedFd>,
}

impl Notifier {
    fn send(&self, code: i32, arg: &[u8], name: Option<&[u8]>) -> Result<(), Errno> {
        let tail: &[u8] = if name.is_some() { b"\0" } else { b"" };
        let name = name.unwrap_or(b"");
        let len = 16 + arg.len() + name.len() + tail.len();
        let h = abi::OutHeader { len: len as u32, error: code, unique: 0 };
        let iov = [
            libc::iovec { iov_base: h.as_bytes().as_ptr() as *mut _, iov_len: 16 },
            libc::iovec { iov_base: arg.as_ptr() as *mut _, iov_len: arg.len() },
            libc::iovec { iov_base: name.as_ptr() as *mut _, iov_len: name.len() },
            libc::iovec { iov_base: tail.as_ptr() as *mut _, iov_len: tail.len() },
        ];
        // SAFETY: the iovecs point at live buffers of the given lengths; the kernel only
        // reads them.
        let r = unsafe { libc::writev(self.dev.as_raw_fd(), iov.as_ptr(), iov.len() as i32) };
        if r < 0 {
            Err(Errno::from_raw(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)))
        } else {
            Ok(())
        }
    }

    /// Drops the kernel's cached attributes of node `ino` and, with `off` >= 0, its pages
    /// from `off` on (`len` 0: to the end).
    pub fn inval_inode(&self, ino: u64, off: i64, len: i64) -> Result<(), Errno> {
        self.send(notify_code::INVAL_INODE, abi::NotifyInvalInodeOut { ino, off, len }.as_bytes(), None)
    }

    /// Drops the kernel's cached entry `name` of directory node `parent`.
    pub fn inval_entry(&self, parent: u64, name: &[u8]) -> Result<(), Errno> {
        let arg = abi::NotifyInvalEntryOut { parent, namelen: name.len() as u32, flags: 0 };
        self.send(notify_code::INVAL_ENTRY, arg.as_bytes(), Some(name))
    }

    /// Tells the kernel that `name` (node `child`) was removed from `parent`.
    pub fn delete(&self, parent: u64, child: u64, name: &[u8]) -> Result<(), Errno> {
        let arg = abi::NotifyDeleteOut { parent, child, namelen: name.len() as u32, padding: 0 };
        self.send(notify_code::DELETE, arg.as_bytes(), Some(name))
    }
}
