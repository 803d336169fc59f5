//! How requests reach the server and replies the kernel: [`dev`] (`read`/`write` on
//! `/dev/fuse`, one cloned descriptor per worker thread; the one that polls sits on its
//! caller's CPU in the idle class) and [`uring`] (FUSE over
//! io_uring: one ring per CPU, requests and replies exchanged through shared buffers
//! without a system call each), whose threads [`sched`] keeps in the idle scheduling
//! class while requests come, so that a caller and the queue serving it share a CPU.

pub mod dev;
pub mod sched;
pub mod uring;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A new `/dev/fuse` descriptor bound to the connection of `dev` (`FUSE_DEV_IOC_CLONE`):
/// requests read from it are answered on it, so each worker has its own processing queue.
pub(crate) fn clone_dev(dev: &OwnedFd) -> std::io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path; the descriptor returned is owned below.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    let new = unsafe { OwnedFd::from_raw_fd(fd) };
    let src = dev.as_raw_fd() as u32;
    // SAFETY: FUSE_DEV_IOC_CLONE reads one u32 (the descriptor to clone) from the pointer.
    if unsafe { libc::ioctl(new.as_raw_fd(), crate::abi::DEV_IOC_CLONE, &src) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(new)
}
