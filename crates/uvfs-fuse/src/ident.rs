//! Caller identity: each request runs on a uvfs task with the caller's credentials.
//!
//! A FUSE request header carries the caller's fsuid, fsgid and thread id. The
//! supplementary groups are not in the protocol: they are read from
//! `/proc/<tid>/status` (`Groups:`) when the request arrives. That is a race (the caller
//! may change its groups, or exit and have its id reused, between the syscall and the
//! read) that every FUSE server shares; it cannot give a caller groups it never had
//! unless a process with that id appears in between. Requests the kernel makes on its own
//! (pid 0: writeback, release) get no supplementary groups. uid 0 gets every capability
//! and others none ([`uvfs::Credentials::new`]), so a root process that dropped
//! capabilities is still treated as fully privileged.
//!
//! Tasks are derived from the server task ([`uvfs::Task::with_credentials`]); nodes and
//! open files are held outside any descriptor table ([`crate::nodes`]), so any task can
//! use them. They are cached per (uid, gid, groups, umask, link capability); the umask is
//! part of the key because creating requests carry their own.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use uvfs::{Capabilities, Credentials, Gid, Task, Uid};

/// The umask of requests that do not create anything (irrelevant to them).
pub const DEFAULT_UMASK: u32 = 0o022;

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
    umask: u32,
    link: bool,
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
}

const CACHE_MAX: usize = 4096;

impl Tasks {
    /// Tasks derived from `base` (the server task, owner of the shared fd table).
    pub fn new(base: Arc<Task>) -> Tasks {
        Tasks { base, cache: Mutex::new(HashMap::default()) }
    }

    /// The server task.
    pub fn base(&self) -> &Arc<Task> {
        &self.base
    }

    /// A task acting for `c` with `umask`; `link` adds `CAP_DAC_READ_SEARCH` (see the
    /// `link` handler).
    pub fn get(&self, c: &Caller, umask: u32, link: bool) -> Arc<Task> {
        let groups = if c.uid == 0 || c.pid == 0 { Vec::new() } else { proc_groups(c.pid) };
        let key = Key { uid: c.uid, gid: c.gid, groups, umask: umask & 0o777, link };
        if let Some(t) = self.cache.lock().get(&key) {
            return t.clone();
        }
        let gids: Vec<Gid> = key.groups.iter().map(|&g| Gid(g)).collect();
        let mut creds = Credentials::new(Uid(c.uid), Gid(c.gid), &gids);
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
