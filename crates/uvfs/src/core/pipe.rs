//! Named pipes (fifos): the pipe a fifo's opens share. Mirrors Linux's `fs/pipe.c`
//! (`fifo_open`, `pipe_read`, `pipe_write`, `pipe_release`).
//!
//! A fifo inode carries nothing: its pipe lives in the instance's table of open fifos
//! ([`Fifos`], Linux's `inode->i_pipe`) while any file has it open, so an inode that is
//! never opened as a fifo pays nothing. The buffer is Linux's: 16 page-sized slots, a
//! write's sub-page remainder merged into the last slot when it fits, so what fits before
//! `EAGAIN` is what fits on Linux. Writes of at most `PIPE_BUF` bytes are atomic.
//!
//! Blocking (an open waiting for its partner, a read of an empty pipe with writers, a write
//! to a full one with readers) waits on the pipe's condition variable; `O_NONBLOCK` makes
//! those `ENXIO` (a write-only open without readers) or `EAGAIN`. There are no signals
//! in-process: a blocking open waits until a partner opens.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use crate::abi::errno::{Errno, Result};
use crate::core::inode::Inode;
use crate::sync::Mutex;

/// Page size of a pipe buffer slot.
const PAGE: usize = 4096;
/// Slots of a pipe (`PIPE_DEF_BUFFERS`): 64 KiB.
const SLOTS: usize = 16;

/// One slot: a page's worth of bytes, read from the front.
struct Slot {
    /// The bytes not read yet.
    data: VecDeque<u8>,
    /// Where the written bytes end within the page (Linux's `offset + len`): a merge
    /// must fit below [`PAGE`].
    end: usize,
}

/// What the pipe's lock protects.
#[derive(Default)]
struct State {
    slots: VecDeque<Slot>,
    readers: u32,
    writers: u32,
    /// Opens for reading ever (Linux's `r_counter`): a waiting writer's open completes
    /// when it moves.
    r_counter: u64,
    /// Opens for writing ever (`w_counter`).
    w_counter: u64,
}

/// The pipe of an open fifo.
pub(crate) struct Pipe {
    /// The buffer and the counts. Leaf lock; waits give it back.
    state: Mutex<State>,
    /// Signalled on every change a waiter may wait for: data, room, an open, a close.
    cond: parking_lot::Condvar,
}

/// The pipes of the fifos that are open, by inode (Linux's `i_pipe`).
#[derive(Default)]
pub(crate) struct Fifos {
    /// Inode address -> its pipe, while a file has it open (a dead entry is replaced).
    /// Leaf lock.
    map: Mutex<HashMap<usize, Weak<Pipe>>>,
}

impl Fifos {
    /// The pipe of `inode`, made at its first open.
    fn get(&self, inode: &Arc<Inode>) -> Arc<Pipe> {
        let key = Arc::as_ptr(inode) as usize;
        let mut map = self.map.lock();
        if let Some(p) = map.get(&key).and_then(Weak::upgrade) {
            return p;
        }
        // Forget pipes nobody has open any more before the table grows.
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let p = Arc::new(Pipe { state: Mutex::new(State::default()), cond: parking_lot::Condvar::new() });
        map.insert(key, Arc::downgrade(&p));
        p
    }

    /// `fifo_open`: joins the pipe of `inode` as a reader, a writer or both, waiting for
    /// the other side as Linux does (never for `O_RDWR`; not for a reader with
    /// `nonblock`; a writer with `nonblock` and no reader is `ENXIO`).
    pub(crate) fn open(&self, inode: &Arc<Inode>, read: bool, write: bool, nonblock: bool) -> Result<Arc<Pipe>> {
        let pipe = self.get(inode);
        let mut st = pipe.state.lock();
        match (read, write) {
            (true, false) => {
                st.r_counter += 1;
                st.readers += 1;
                pipe.cond.notify_all();
                if st.writers == 0 && !nonblock {
                    let seen = st.w_counter;
                    while st.w_counter == seen {
                        pipe.cond.wait(st.parking_lot());
                    }
                }
            }
            (false, true) => {
                if nonblock && st.readers == 0 {
                    return Err(Errno::ENXIO);
                }
                st.w_counter += 1;
                st.writers += 1;
                pipe.cond.notify_all();
                if st.readers == 0 {
                    let seen = st.r_counter;
                    while st.r_counter == seen {
                        pipe.cond.wait(st.parking_lot());
                    }
                }
            }
            (true, true) => {
                st.readers += 1;
                st.writers += 1;
                st.r_counter += 1;
                st.w_counter += 1;
                pipe.cond.notify_all();
            }
            (false, false) => return Err(Errno::EINVAL),
        }
        drop(st);
        Ok(pipe)
    }
}

impl Pipe {
    /// `pipe_release`: a file that joined as reader and/or writer is gone. The last one
    /// out empties the pipe.
    pub(crate) fn release(&self, read: bool, write: bool) {
        let mut st = self.state.lock();
        st.readers -= u32::from(read);
        st.writers -= u32::from(write);
        if st.readers == 0 && st.writers == 0 {
            st.slots.clear();
        }
        self.cond.notify_all();
    }

    /// `pipe_read`: what is there, up to `buf.len()`; 0 when empty without writers;
    /// waits (or `EAGAIN` with `nonblock`) when empty with writers.
    pub(crate) fn read(&self, buf: &mut [u8], nonblock: bool) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut st = self.state.lock();
        let mut done = 0;
        loop {
            while done < buf.len()
                && let Some(slot) = st.slots.front_mut()
            {
                let n = slot.data.len().min(buf.len() - done);
                for (d, s) in buf[done..done + n].iter_mut().zip(slot.data.drain(..n)) {
                    *d = s;
                }
                done += n;
                if slot.data.is_empty() {
                    st.slots.pop_front();
                }
            }
            if done > 0 {
                // Room for waiting writers.
                self.cond.notify_all();
                return Ok(done);
            }
            if st.writers == 0 {
                return Ok(0);
            }
            if nonblock {
                return Err(Errno::EAGAIN);
            }
            self.cond.wait(st.parking_lot());
        }
    }

    /// `pipe_write`: `EPIPE` without readers; the sub-page remainder merged into the last
    /// slot if it fits, then a slot per page while there is room; waits for room (or
    /// returns what was written, `EAGAIN` if nothing, with `nonblock`).
    pub(crate) fn write(&self, buf: &[u8], nonblock: bool) -> Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut st = self.state.lock();
        if st.readers == 0 {
            return Err(Errno::EPIPE);
        }
        let mut done = 0;
        let chars = buf.len() % PAGE;
        if chars > 0
            && let Some(last) = st.slots.back_mut()
            && last.end + chars <= PAGE
        {
            last.data.extend(&buf[..chars]);
            last.end += chars;
            done = chars;
            self.cond.notify_all();
        }
        while done < buf.len() {
            if st.readers == 0 {
                return if done > 0 { Ok(done) } else { Err(Errno::EPIPE) };
            }
            if st.slots.len() < SLOTS {
                let n = (buf.len() - done).min(PAGE);
                st.slots.push_back(Slot { data: buf[done..done + n].iter().copied().collect(), end: n });
                done += n;
                self.cond.notify_all();
                continue;
            }
            if nonblock {
                return if done > 0 { Ok(done) } else { Err(Errno::EAGAIN) };
            }
            self.cond.wait(st.parking_lot());
        }
        Ok(done)
    }
}
