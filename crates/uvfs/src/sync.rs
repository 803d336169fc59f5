//! The locks of the VFS: `parking_lot` locks that count their acquisitions per thread,
//! so tests can assert that a fast path took none (`stats::counters().locks`).

use crate::stats;

pub(crate) use parking_lot::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

/// A mutex that counts acquisitions.
#[derive(Default, Debug)]
pub struct Mutex<T>(parking_lot::Mutex<T>);

impl<T> Mutex<T> {
    /// A new unlocked mutex.
    pub const fn new(v: T) -> Self {
        Mutex(parking_lot::const_mutex(v))
    }

    /// Locks, counting the acquisition.
    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        stats::bump(|c| c.locks += 1);
        self.0.lock()
    }

    /// Locks if free, counting a success.
    #[inline]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        let g = self.0.try_lock()?;
        stats::bump(|c| c.locks += 1);
        Some(g)
    }
}

/// A reader-writer lock that counts acquisitions.
#[derive(Default, Debug)]
pub struct RwLock<T>(parking_lot::RwLock<T>);

impl<T> RwLock<T> {
    /// A new unlocked lock.
    pub const fn new(v: T) -> Self {
        RwLock(parking_lot::const_rwlock(v))
    }

    /// Locks shared, counting the acquisition.
    #[inline]
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        stats::bump(|c| c.locks += 1);
        self.0.read()
    }

    /// Locks exclusive, counting the acquisition.
    #[inline]
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        stats::bump(|c| c.locks += 1);
        self.0.write()
    }

    /// Locks exclusive if free, counting a success.
    #[inline]
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        let g = self.0.try_write()?;
        stats::bump(|c| c.locks += 1);
        Some(g)
    }
}
