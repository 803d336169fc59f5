//! FUSE over io_uring: not built yet; [`Queues::prepare`] says so and the mount serves
//! over `/dev/fuse`.

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::session::Session;

/// The io_uring queues (none yet).
pub(crate) struct Queues;

impl Queues {
    /// Always unavailable for now.
    pub(crate) fn prepare() -> Result<Queues, String> {
        Err("not built into this version".into())
    }

    /// The number of queues.
    pub(crate) fn len(&self) -> usize {
        0
    }

    /// Hands the session to the queues.
    pub(crate) fn start(self, _session: &Arc<Session>) -> Vec<JoinHandle<()>> {
        Vec::new()
    }

    /// Stops the queues unused.
    pub(crate) fn cancel(self) {}
}
