//! The calls: syscall-shaped methods on a [`Task`](crate::Task), one file per family,
//! each mirroring the Linux source file of its calls. They check arguments, walk, check
//! permissions and call into the objects and the filesystem.

mod acl;
mod attr;
mod fd;
mod fs_struct;
mod inotify;
mod ioctl;
mod locks;
pub(crate) mod mount;
mod names;
pub(crate) mod open;
mod read_write;
mod readdir;
mod stat;
mod utimes;
mod xattr;
