//! Credentials: who asks. Mirrors Linux's `struct cred` (the parts the VFS reads).

use std::borrow::Cow;
use std::sync::Arc;

use bitflags::bitflags;

/// A user id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid(pub u32);

/// A group id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gid(pub u32);

bitflags! {
    /// The capabilities the VFS consults (a subset of Linux's, same names).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Capabilities: u32 {
        /// `CAP_CHOWN`: change owner and group freely.
        const CHOWN = 1 << 0;
        /// `CAP_DAC_OVERRIDE`: bypass read/write/search permission checks.
        const DAC_OVERRIDE = 1 << 1;
        /// `CAP_DAC_READ_SEARCH`: bypass read and directory search checks.
        const DAC_READ_SEARCH = 1 << 2;
        /// `CAP_FOWNER`: act as the owner for permission-sensitive calls.
        const FOWNER = 1 << 3;
        /// `CAP_FSETID`: keep setuid/setgid bits on change.
        const FSETID = 1 << 4;
        /// `CAP_MKNOD`: create device nodes.
        const MKNOD = 1 << 5;
        /// `CAP_SYS_ADMIN`: mounts, `trusted.` xattrs.
        const SYS_ADMIN = 1 << 6;
        /// `CAP_SYS_CHROOT`: `chroot`.
        const SYS_CHROOT = 1 << 7;
        /// `CAP_LINUX_IMMUTABLE`.
        const LINUX_IMMUTABLE = 1 << 8;
    }
}

/// Supplementary groups that are looked up when a check first needs one, instead of when
/// the credentials are made: what a server acting for callers it cannot ask cheaply
/// gives (a FUSE server reads a caller's groups from `/proc`, which costs more than most
/// requests, while a check asks for membership only when the group class decides, as
/// Linux's `in_group_p` callers do). The source answers for whoever the credentials act
/// for at the moment of the check; checks whose answer the path cache would keep are not
/// kept when they depended on it.
pub trait GroupSource: Send + Sync + std::fmt::Debug {
    /// Whether `gid` is one of the supplementary groups.
    fn contains(&self, gid: Gid) -> bool;
    /// All of them, sorted and without repeats.
    fn list(&self) -> Vec<Gid>;
}

/// Where the supplementary groups are.
#[derive(Clone, Debug)]
enum Groups {
    /// Known when the credentials were made: sorted, for binary search.
    Known(Box<[Gid]>),
    /// Asked of a source when a check needs them.
    Asked(Arc<dyn GroupSource>),
}

impl PartialEq for Groups {
    fn eq(&self, o: &Groups) -> bool {
        match (self, o) {
            (Groups::Known(a), Groups::Known(b)) => a == b,
            // The same source answers alike; different ones may not.
            (Groups::Asked(a), Groups::Asked(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// What a task is to permission checks. Immutable once built; a task replaces its
/// credentials as a whole (like `commit_creds`), so checks never see a half-changed set.
/// Equal when their ids, groups and capabilities are (the install serial aside).
#[derive(Clone, Debug)]
pub struct Credentials {
    /// Real user id (used by `access(2)` without `AT_EACCESS`).
    pub ruid: Uid,
    /// Real group id.
    pub rgid: Gid,
    /// Filesystem user id (Linux's fsuid, normally the effective uid).
    pub uid: Uid,
    /// Filesystem group id.
    pub gid: Gid,
    /// Supplementary groups.
    groups: Groups,
    /// Effective capabilities.
    pub caps: Capabilities,
    /// Set when a task installs them (then they are behind an `Arc` and cannot change):
    /// unique per installation, 0 before. The path cache keys answers that depended on
    /// who asked by it.
    serial: u64,
}

impl PartialEq for Credentials {
    fn eq(&self, o: &Credentials) -> bool {
        (self.ruid, self.rgid, self.uid, self.gid, &self.groups, self.caps)
            == (o.ruid, o.rgid, o.uid, o.gid, &o.groups, o.caps)
    }
}

impl Eq for Credentials {}

impl Credentials {
    /// Root with every capability.
    pub fn root() -> Credentials {
        Credentials::new(Uid(0), Gid(0), &[])
    }

    /// A user; uid 0 gets every capability (as Linux without securebits), others none.
    pub fn new(uid: Uid, gid: Gid, groups: &[Gid]) -> Credentials {
        let mut g: Vec<Gid> = groups.to_vec();
        g.sort();
        g.dedup();
        Credentials::with_groups(uid, gid, Groups::Known(g.into_boxed_slice()))
    }

    /// A user whose supplementary groups `source` gives when a check needs them (see
    /// [`GroupSource`]); capabilities as [`Credentials::new`].
    pub fn with_group_source(uid: Uid, gid: Gid, source: Arc<dyn GroupSource>) -> Credentials {
        Credentials::with_groups(uid, gid, Groups::Asked(source))
    }

    fn with_groups(uid: Uid, gid: Gid, groups: Groups) -> Credentials {
        Credentials {
            ruid: uid,
            rgid: gid,
            uid,
            gid,
            groups,
            caps: if uid.0 == 0 { Capabilities::all() } else { Capabilities::empty() },
            serial: 0,
        }
    }

    /// These credentials as a task installs them: with a serial of their own.
    pub(crate) fn installed(mut self) -> Credentials {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        self.serial = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// The install serial (0: not installed by a task, such as `access(2)`'s).
    #[inline]
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// The same credentials with another capability set.
    pub fn with_caps(mut self, caps: Capabilities) -> Credentials {
        self.caps = caps;
        self
    }

    /// Supplementary groups, sorted (asked of the source, if they come from one).
    pub fn groups(&self) -> Cow<'_, [Gid]> {
        match &self.groups {
            Groups::Known(g) => Cow::Borrowed(g),
            Groups::Asked(s) => Cow::Owned(s.list()),
        }
    }

    /// Whether the supplementary groups come from a [`GroupSource`]: then an answer that
    /// depended on them holds for this check only, not for every holder of these
    /// credentials.
    #[inline]
    pub(crate) fn groups_asked(&self) -> bool {
        matches!(self.groups, Groups::Asked(_))
    }

    /// `in_group_p`: the fs gid or a supplementary group (the source is asked only when
    /// the fs gid is not it).
    pub fn in_group(&self, gid: Gid) -> bool {
        self.gid == gid
            || match &self.groups {
                Groups::Known(g) => g.binary_search(&gid).is_ok(),
                Groups::Asked(s) => s.contains(gid),
            }
    }

    /// Whether the capability is in the effective set.
    pub fn capable(&self, cap: Capabilities) -> bool {
        self.caps.contains(cap)
    }

    /// Whether `access(2)` would check with these very credentials (real ids equal the
    /// effective ones, and the capabilities are what Linux would leave), so it need not
    /// build new ones.
    pub fn uses_own_ids_for_access(&self) -> bool {
        self.ruid == self.uid && self.rgid == self.gid && (self.ruid.0 == 0 || self.caps.is_empty())
    }

    /// The credentials `access(2)` checks with: real ids, and for a non-root real uid
    /// no capabilities (Linux drops them unless the real uid is 0).
    pub fn for_access(&self) -> Credentials {
        let mut c = self.clone();
        c.serial = 0;
        c.uid = self.ruid;
        c.gid = self.rgid;
        if self.ruid.0 != 0 {
            c.caps = Capabilities::empty();
        }
        c
    }
}
