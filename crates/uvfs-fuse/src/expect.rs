//! Changes made through the mount, which the invalidation thread must not report back.
//!
//! The invalidation thread ([`crate::watch`]) sees every change of the filesystem as an
//! event, also those the server made for the kernel. Invalidating what the kernel just
//! changed itself would cost a round trip at best, and at worst unhash a dentry in use
//! (a directory that is a process's cwd makes `getcwd` fail). So a handler records what
//! it is about to change before the uvfs call (a name in a directory, or an object), and
//! the thread consumes one record per event that matches. A record no event consumed
//! (the call failed and the handler took it back, or the change made no event) expires
//! after [`TTL`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::nodes::Key;

/// How long an unconsumed record lives.
pub const TTL: Duration = Duration::from_secs(2);

/// One expected event.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Expected {
    /// A name event (create, delete, move) of `name` in the directory `Key`.
    Name(Key, Vec<u8>),
    /// A data or attribute change of the object `Key`.
    Object(Key),
}

/// The records, counted.
#[derive(Default)]
pub struct Expect {
    map: Mutex<HashMap<Expected, (u32, Instant)>>,
}

impl Expect {
    /// Records `what` (one of each).
    pub fn add(&self, what: &[Expected]) {
        if what.is_empty() {
            return;
        }
        let now = Instant::now();
        let mut m = self.map.lock();
        for w in what {
            let e = m.entry(w.clone()).or_insert((0, now));
            e.0 += 1;
            e.1 = now;
        }
    }

    /// Takes `what` back (the change failed).
    pub fn remove(&self, what: &[Expected]) {
        let mut m = self.map.lock();
        for w in what {
            self.take_locked(&mut m, w);
        }
    }

    /// Consumes one record of `what`; whether there was one.
    pub fn consume(&self, what: &Expected) -> bool {
        let mut m = self.map.lock();
        self.take_locked(&mut m, what)
    }

    /// Whether a record of `what` is pending (without consuming it).
    #[cfg(test)]
    pub fn pending(&self, what: &Expected) -> bool {
        self.map.lock().contains_key(what)
    }

    fn take_locked(&self, m: &mut HashMap<Expected, (u32, Instant)>, what: &Expected) -> bool {
        match m.get_mut(what) {
            Some(e) if e.0 > 1 => {
                e.0 -= 1;
                true
            }
            Some(_) => {
                m.remove(what);
                true
            }
            None => false,
        }
    }

    /// Drops expired records.
    pub fn expire(&self) {
        let now = Instant::now();
        self.map.lock().retain(|_, (_, t)| now.duration_since(*t) < TTL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counted() {
        let e = Expect::default();
        let k = Expected::Object((1, 2));
        e.add(&[k.clone(), k.clone()]);
        assert!(e.consume(&k));
        assert!(e.consume(&k));
        assert!(!e.consume(&k));
        e.add(std::slice::from_ref(&k));
        e.remove(std::slice::from_ref(&k));
        assert!(!e.pending(&k));
    }
}
