//! POSIX ACLs as the permission check sees them, and the inode's ACL slot (seed 001).
//!
//! The slot has three states: *not cached* (ask the filesystem under the inode lock),
//! *known none* (mode bits decide; the common case), or *an ACL*. The permission check
//! loads it with one atomic read and no lock; only *not cached* takes the slow path.

use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::rcu::{LocalGuard, Rcu};

/// Tag of an ACL entry (acl(5)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclTag {
    /// `ACL_USER_OBJ`: the owner.
    UserObj,
    /// `ACL_USER`: a named user.
    User(u32),
    /// `ACL_GROUP_OBJ`: the owning group.
    GroupObj,
    /// `ACL_GROUP`: a named group.
    Group(u32),
    /// `ACL_MASK`: the upper bound for the group class.
    Mask,
    /// `ACL_OTHER`: everybody else.
    Other,
}

/// One entry: a tag and `rwx` bits (4, 2, 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AclEntry {
    /// Whom it is for.
    pub tag: AclTag,
    /// Permission bits, `rwx` as 4/2/1.
    pub perm: u8,
}

/// A POSIX ACL, entries sorted as acl(5) requires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acl {
    /// Sorted by tag; exactly one each of UserObj, GroupObj, Other, and a Mask when named
    /// entries exist.
    pub entries: Vec<AclEntry>,
}

impl Acl {
    /// The permission bits (4/2/1) the ACL grants `uid`/`in_group` on an inode owned by
    /// `owner`, in the order acl(5) gives. `None` for the owner (mode bits decide, as the
    /// owner entry mirrors the mode's user bits).
    pub fn granted(&self, uid: u32, owner: u32, gid: u32, in_group: impl Fn(u32) -> bool) -> u8 {
        let mask = self.entries.iter().find(|e| e.tag == AclTag::Mask).map(|e| e.perm).unwrap_or(7);
        let mut group_match = None::<u8>;
        for e in &self.entries {
            match e.tag {
                AclTag::UserObj if uid == owner => return e.perm,
                AclTag::User(u) if u == uid => return e.perm & mask,
                AclTag::GroupObj if in_group(gid) => {
                    group_match = Some(group_match.unwrap_or(0) | e.perm);
                }
                AclTag::Group(g) if in_group(g) => {
                    group_match = Some(group_match.unwrap_or(0) | e.perm);
                }
                _ => {}
            }
        }
        if let Some(g) = group_match {
            return g & mask;
        }
        self.entries.iter().find(|e| e.tag == AclTag::Other).map(|e| e.perm).unwrap_or(0)
    }
}

/// Sentinel for "not cached".
const NOT_CACHED: *mut Acl = std::ptr::dangling_mut::<Acl>();

/// The state of an inode's ACL slot, as read.
#[derive(Debug)]
pub enum AclState<'g> {
    /// The filesystem has not been asked yet.
    NotCached,
    /// Known: no ACL; mode bits decide.
    None,
    /// The ACL.
    Some(&'g Acl),
}

/// An inode's ACL slot.
pub struct AclSlot {
    /// Atomic: null = known none, `NOT_CACHED` sentinel, or a pointer from
    /// `Arc::into_raw` (retired through the collector when replaced).
    ptr: AtomicPtr<Acl>,
}

impl AclSlot {
    pub(crate) fn new(known_none: bool) -> AclSlot {
        AclSlot { ptr: AtomicPtr::new(if known_none { std::ptr::null_mut() } else { NOT_CACHED }) }
    }

    /// Reads the state without a lock.
    #[inline]
    pub fn load<'g>(&self, _guard: &'g LocalGuard<'_>) -> AclState<'g> {
        let p = self.ptr.load(Ordering::Acquire);
        if p.is_null() {
            AclState::None
        } else if p == NOT_CACHED {
            AclState::NotCached
        } else {
            // SAFETY: a real pointer came from `Arc::into_raw` and is retired through the
            // collector only after being unpublished, so it lives as long as `_guard`.
            AclState::Some(unsafe { &*p })
        }
    }

    /// Whether the slot says "known none" (one relaxed load; for the fast path).
    #[inline]
    pub fn is_known_none(&self) -> bool {
        self.ptr.load(Ordering::Relaxed).is_null()
    }

    /// Publishes a state (`None`: known none). Called under the inode lock.
    pub(crate) fn set(&self, acl: Option<Arc<Acl>>, rcu: &Rcu) {
        let new = match acl {
            Some(a) => Arc::into_raw(a).cast_mut(),
            None => std::ptr::null_mut(),
        };
        let old = self.ptr.swap(new, Ordering::AcqRel);
        if !old.is_null() && old != NOT_CACHED {
            // SAFETY: `old` came from `Arc::into_raw`; we own its count and it is unpublished.
            let old = unsafe { Arc::from_raw(old) };
            rcu.defer_drop(old);
        }
    }
}

impl Drop for AclSlot {
    fn drop(&mut self) {
        let p = *self.ptr.get_mut();
        if !p.is_null() && p != NOT_CACHED {
            // SAFETY: the slot owns the count; the inode is being freed, so no reader.
            drop(unsafe { Arc::from_raw(p) });
        }
    }
}
