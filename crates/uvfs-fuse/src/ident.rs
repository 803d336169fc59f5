//! Caller identity: each request runs on a uvfs task with the caller's credentials.
//!
//! A FUSE request header carries the caller's fsuid, fsgid and thread id. The
//! supplementary groups are not in the protocol: they are read from
//! `/proc/<tid>/status` (`Groups:`), and only when a check of the request needs them
//! ([`uvfs::GroupSource`]): the group class decides a permission check only when the
//! file's group is not the caller's fsgid and its group bits differ from the others'
//! (or an ACL names groups), and a `chown` or set-group-id rule asks the same way, so
//! most requests never read them (a read of `/proc/<tid>/status` took 18-21 us on this
//! project's VM, more than an empty request's round trip). That read is a race (the
//! caller may change its groups, or exit and have its id reused, between the syscall and
//! the read) that every FUSE server shares; it cannot give a caller groups it never had unless a process with
//! that id appears in between. The groups are read at most once per request, on the
//! thread that serves it ([`Tasks::get`] names the caller to it). Requests the kernel
//! makes on its own (pid 0: writeback, release), and root's, have no supplementary groups.
//! uid 0 gets every capability and others none ([`uvfs::Credentials::new`]), so a root
//! process that dropped capabilities is still treated as fully privileged.
//!
//! Tasks are derived from the server task ([`uvfs::Task::with_credentials`]); nodes and
//! open files are held outside any descriptor table ([`crate::nodes`]), so any task can
//! use them. They are cached per (uid, gid, umask, link capability, whether groups are
//! asked for); the umask is part of the key because creating requests carry their own.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use uvfs::{Capabilities, Credentials, Gid, GroupSource, Task, Uid};

/// The umask of requests that do not create anything (irrelevant to them).
pub const DEFAULT_UMASK: u32 = 0o022;

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    uid: u32,
    gid: u32,
    /// The supplementary groups are the caller's, read when a check needs them (else
    /// there are none: root, or the kernel's own requests).
    asked: bool,
    umask: u32,
    link: bool,
}

thread_local! {
    /// The request this thread serves: its caller's thread id (0: none that has
    /// supplementary groups) and its number among this thread's requests. Plain values
    /// (no destructor), so that naming the caller, once per request, is two stores.
    static CALLER: Cell<(u32, u64)> = const { Cell::new((0, 0)) };
    /// The groups of the request numbered here, sorted, once a check asked for them.
    static GROUPS: RefCell<(u64, Vec<Gid>)> = const { RefCell::new((0, Vec::new())) };
}

/// The groups of the caller of the request the asking thread serves (see the module
/// docs), read from `/proc` the first time one of its checks asks.
#[derive(Debug)]
struct CallerGroups {
    /// Atomic: reads of `/proc/<tid>/status` (counted for the tests and `--stats`).
    reads: AtomicU64,
}

impl CallerGroups {
    fn with<R>(&self, f: impl FnOnce(&[Gid]) -> R) -> R {
        let (pid, request) = CALLER.get();
        GROUPS.with(|c| {
            let mut c = c.borrow_mut();
            if c.0 != request {
                let mut g: Vec<Gid> = if pid == 0 {
                    Vec::new()
                } else {
                    self.reads.fetch_add(1, Ordering::Relaxed);
                    proc_groups(pid).into_iter().map(Gid).collect()
                };
                g.sort();
                g.dedup();
                *c = (request, g);
            }
            f(&c.1)
        })
    }
}

impl GroupSource for CallerGroups {
    fn contains(&self, gid: Gid) -> bool {
        self.with(|g| g.binary_search(&gid).is_ok())
    }

    fn list(&self) -> Vec<Gid> {
        self.with(<[Gid]>::to_vec)
    }
}

/// Who asks, as the server sees it.
pub struct Caller {
    /// fsuid.
    pub uid: u32,
    /// fsgid.
    pub gid: u32,
    /// Thread id (0 for the kernel's own requests).
    pub pid: u32,
}

/// The task cache.
pub struct Tasks {
    base: Arc<Task>,
    /// Keyed by the caller's ids, hashed with foldhash (one lookup per request).
    cache: Mutex<HashMap<Key, Arc<Task>, foldhash::fast::RandomState>>,
    /// Immutable: the source of every cached task's asked-for groups.
    groups: Arc<CallerGroups>,
}

const CACHE_MAX: usize = 4096;

impl Tasks {
    /// Tasks derived from `base` (the server task, owner of the shared fd table).
    pub fn new(base: Arc<Task>) -> Tasks {
        Tasks {
            base,
            cache: Mutex::new(HashMap::default()),
            groups: Arc::new(CallerGroups { reads: AtomicU64::new(0) }),
        }
    }

    /// Reads of a caller's supplementary groups from `/proc` so far.
    pub fn group_reads(&self) -> u64 {
        self.groups.reads.load(Ordering::Relaxed)
    }

    /// The server task.
    pub fn base(&self) -> &Arc<Task> {
        &self.base
    }

    /// A task acting for `c` with `umask`; `link` adds `CAP_DAC_READ_SEARCH` (see the
    /// `link` handler). Names `c` to this thread as the caller whose groups its checks
    /// ask for until the next call: call it on the thread that serves the request, for
    /// every request.
    pub fn get(&self, c: &Caller, umask: u32, link: bool) -> Arc<Task> {
        let asked = c.uid != 0 && c.pid != 0;
        // A new request number: groups read for the last request are not this one's.
        CALLER.set((if asked { c.pid } else { 0 }, CALLER.get().1 + 1));
        let key = Key { uid: c.uid, gid: c.gid, asked, umask: umask & 0o777, link };
        if let Some(t) = self.cache.lock().get(&key) {
            return t.clone();
        }
        let mut creds = if asked {
            Credentials::with_group_source(Uid(c.uid), Gid(c.gid), self.groups.clone())
        } else {
            Credentials::new(Uid(c.uid), Gid(c.gid), &[])
        };
        if link {
            let caps = creds.caps | Capabilities::DAC_READ_SEARCH;
            creds = creds.with_caps(caps);
        }
        let t = Arc::new(self.base.with_credentials(creds));
        t.umask(key.umask);
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.entry(key).or_insert(t).clone()
    }

    /// Drops the cached tasks (at unmount, so the fd table can go).
    pub fn clear(&self) {
        self.cache.lock().clear();
    }
}

/// The supplementary groups of thread `pid`, from `/proc/<pid>/status`; none if it is
/// gone.
pub fn proc_groups(pid: u32) -> Vec<u32> {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return Vec::new() };
    parse_groups(&s)
}

fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_line() {
        assert_eq!(parse_groups("Name:\tx\nGroups:\t4 24 27 \nNgid:\t0\n"), vec![4, 24, 27]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("nothing"), Vec::<u32>::new());
    }

    #[test]
    fn own_groups_readable() {
        // Our own thread's entry exists; the call must not fail whatever it holds.
        let _ = proc_groups(std::process::id());
    }
}
