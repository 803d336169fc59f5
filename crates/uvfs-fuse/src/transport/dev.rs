//! The classic transport: worker threads, each on its own cloned `/dev/fuse` descriptor,
//! `read` a request into a per-thread buffer and `write` the reply (header and payload
//! contiguous in a second per-thread buffer, read data produced in place), so a request
//! costs two system calls and allocates nothing here.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;

use zerocopy::IntoBytes;

use crate::reply::{Reply, ReplyBuf, out_header};
use crate::request::{Op, decode_dev};
use crate::session::{DEV_BUF, Later, LaterTo, MAX_WRITE, Session};

/// Starts `n` workers (the first on the connection's own descriptor).
pub(crate) fn spawn(session: &Arc<Session>, n: usize) -> std::io::Result<Vec<JoinHandle<()>>> {
    let mut fds = vec![session.dev.clone()];
    for _ in 1..n.max(1) {
        fds.push(Arc::new(super::clone_dev(&session.dev)?));
    }
    let mut workers = Vec::new();
    for (i, fd) in fds.into_iter().enumerate() {
        let s = session.clone();
        workers.push(std::thread::Builder::new().name(format!("uvfs-fuse-{i}")).spawn(move || worker(&s, &fd))?);
    }
    Ok(workers)
}

fn worker(session: &Session, fd: &Arc<OwnedFd>) {
    let mut inbuf = vec![0u8; DEV_BUF];
    let mut outbuf = vec![0u8; 16 + MAX_WRITE + 4096];
    loop {
        // SAFETY: reads into a buffer we own, of its length.
        let n = unsafe { libc::read(fd.as_raw_fd(), inbuf.as_mut_ptr().cast(), inbuf.len()) };
        if n < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                // Interrupted, or the request went away before we read it.
                Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::ENOENT) => continue,
                // Unmounted or aborted.
                Some(libc::ENODEV) | Some(libc::ECONNABORTED) => break,
                e => {
                    log::error!("uvfs-fuse: read /dev/fuse: errno {e:?}");
                    break;
                }
            }
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
    }
    session.set_gone();
}
