//! The primitives everything else is built on, none of which knows what a file is: the
//! counting, rank-checked locks, the reclamation domain, sequence counts, the lockless
//! hash table, and the per-thread counters that tests and the benchmark observe.
//! Imports nothing else of the crate.

pub mod counters;
mod lock;
pub(crate) mod rcu;
pub(crate) mod rhashtable;
pub(crate) mod seqcount;

pub(crate) use lock::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, in_reclaim_context, rank};
