//! Replies encoded into a buffer the transport provides (the bytes after the
//! `OutHeader` for `/dev/fuse`, a ring entry's payload buffer for io_uring): nothing is
//! allocated per reply. Read data and directory entries are produced in place
//! ([`ReplyBuf::fill`], [`ReplyBuf::dirent`], [`ReplyBuf::direntplus`]).
//!
//! The typed builders ([`entry`], [`attr_out`], [`open_out`]) take their flags as
//! [`FopenFlags`] so that cache levers (`KEEP_CACHE`, `DIRECT_IO`, `PASSTHROUGH`, ...) are a
//! bit to set where a handler answers.

use uvfs::Errno;
use zerocopy::{Immutable, IntoBytes};

use crate::abi::{self, Attr, Dirent, DirentPlus, EntryOut, FopenFlags, OpenOut, OutHeader};

/// What a handler answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// Success with the bytes written to the [`ReplyBuf`].
    Ok,
    /// An error (no payload).
    Err(Errno),
    /// No reply (FORGET, BATCH_FORGET, INTERRUPT).
    None,
    /// Answered later, from another thread, through a `session::Later` (a
    /// SETLKW that waits): the transport sends nothing now.
    Later,
}

impl From<Result<(), Errno>> for Reply {
    fn from(r: Result<(), Errno>) -> Reply {
        match r {
            Ok(()) => Reply::Ok,
            Err(e) => Reply::Err(e),
        }
    }
}

/// A reply's payload, written front to back into a borrowed buffer.
pub struct ReplyBuf<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl<'b> ReplyBuf<'b> {
    /// An empty reply over `buf`.
    pub fn new(buf: &'b mut [u8]) -> ReplyBuf<'b> {
        ReplyBuf { buf, len: 0 }
    }

    /// The bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The payload written.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Forgets what was written (an error after a partial reply).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Room left.
    pub fn spare(&self) -> usize {
        self.buf.len() - self.len
    }

    /// Appends raw bytes; ERANGE if they do not fit.
    pub fn push_bytes(&mut self, b: &[u8]) -> Result<(), Errno> {
        let end = self.len.checked_add(b.len()).filter(|&e| e <= self.buf.len()).ok_or(Errno::ERANGE)?;
        self.buf[self.len..end].copy_from_slice(b);
        self.len = end;
        Ok(())
    }

    /// Appends a struct as its bytes.
    pub fn push<T: IntoBytes + Immutable>(&mut self, v: &T) -> Result<(), Errno> {
        self.push_bytes(v.as_bytes())
    }

    /// Lets `f` write up to `max` bytes in place (read data) and keeps what it says it
    /// wrote.
    pub fn fill(&mut self, max: usize, f: impl FnOnce(&mut [u8]) -> Result<usize, Errno>) -> Result<usize, Errno> {
        let end = self.len + max.min(self.spare());
        let n = f(&mut self.buf[self.len..end])?;
        self.len += n.min(end - self.len);
        Ok(n)
    }

    /// Appends a `fuse_dirent` if it fits in `limit` bytes in all; false when it does not.
    pub fn dirent(&mut self, limit: usize, ino: u64, off: u64, typ: u32, name: &[u8]) -> bool {
        let fixed = std::mem::size_of::<Dirent>();
        let size = abi::dirent_size(fixed, name.len());
        if self.len + size > limit.min(self.buf.len()) {
            return false;
        }
        let d = Dirent { ino, off, namelen: name.len() as u32, typ };
        self.put_record(size, d.as_bytes(), name);
        true
    }

    /// Appends a `fuse_direntplus` if it fits in `limit` bytes in all; false when it does
    /// not. `entry.nodeid` 0 hands out no node (the kernel then only lists the name, with
    /// `ino` and `typ` as given).
    pub fn direntplus(&mut self, limit: usize, entry: &EntryOut, ino: u64, off: u64, typ: u32, name: &[u8]) -> bool {
        let fixed = std::mem::size_of::<DirentPlus>();
        let size = abi::dirent_size(fixed, name.len());
        if self.len + size > limit.min(self.buf.len()) {
            return false;
        }
        let d = DirentPlus { entry_out: *entry, dirent: Dirent { ino, off, namelen: name.len() as u32, typ } };
        self.put_record(size, d.as_bytes(), name);
        true
    }

    fn put_record(&mut self, size: usize, fixed: &[u8], name: &[u8]) {
        let rec = &mut self.buf[self.len..self.len + size];
        rec[..fixed.len()].copy_from_slice(fixed);
        rec[fixed.len()..fixed.len() + name.len()].copy_from_slice(name);
        rec[fixed.len() + name.len()..].fill(0);
        self.len += size;
    }
}

/// The header of a reply to `unique`: `Ok` with `payload` bytes, or an error.
pub fn out_header(unique: u64, reply: &Reply, payload: usize) -> OutHeader {
    match reply {
        Reply::Err(e) => OutHeader { len: 16, error: -e.raw(), unique },
        _ => OutHeader { len: (16 + payload) as u32, error: 0, unique },
    }
}

/// A timeout as (seconds, nanoseconds).
pub fn ttl(d: std::time::Duration) -> (u64, u32) {
    (d.as_secs(), d.subsec_nanos())
}

/// An entry reply (lookup, mknod, mkdir, symlink, link, create, readdirplus): `nodeid` 0
/// with an entry timeout caches a miss.
pub fn entry(nodeid: u64, attr: Attr, entry_ttl: std::time::Duration, attr_ttl: std::time::Duration) -> EntryOut {
    let (es, en) = ttl(entry_ttl);
    let (as_, an) = ttl(attr_ttl);
    EntryOut {
        nodeid,
        generation: 0,
        entry_valid: es,
        attr_valid: as_,
        entry_valid_nsec: en,
        attr_valid_nsec: an,
        attr,
    }
}

/// An attribute reply (getattr, setattr).
pub fn attr_out(attr: Attr, attr_ttl: std::time::Duration) -> abi::AttrOut {
    let (s, n) = ttl(attr_ttl);
    abi::AttrOut { attr_valid: s, attr_valid_nsec: n, dummy: 0, attr }
}

/// An open reply (open, opendir, create).
pub fn open_out(fh: u64, flags: FopenFlags) -> OpenOut {
    OpenOut { fh, open_flags: flags.bits(), backing_id: 0 }
}

/// An open reply whose file the kernel reads and writes through the backing file
/// `backing` (`FOPEN_PASSTHROUGH` with the id `FUSE_DEV_IOC_BACKING_OPEN` gave).
pub fn open_out_backed(fh: u64, flags: FopenFlags, backing: u32) -> OpenOut {
    OpenOut { fh, open_flags: (flags | FopenFlags::PASSTHROUGH).bits(), backing_id: backing as i32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_header_golden() {
        let h = out_header(0x0102_0304_0506_0708, &Reply::Err(Errno::ENOENT), 99);
        assert_eq!(h.as_bytes(), &[16, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 8, 7, 6, 5, 4, 3, 2, 1]);
    }

    #[test]
    fn write_reply_golden() {
        let mut b = [0xaau8; 64];
        let mut r = ReplyBuf::new(&mut b);
        r.push(&abi::WriteOut { size: 4096, padding: 0 }).unwrap();
        let h = out_header(5, &Reply::Ok, r.len());
        assert_eq!(h.as_bytes(), &[24, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(r.bytes(), &[0, 16, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn entry_reply_golden() {
        // A file before 1970 with a fraction: seconds -2 as u64, nanoseconds that add.
        let attr = Attr {
            ino: 3,
            size: 5,
            mtime: (-2i64) as u64,
            mtimensec: 500_000_032,
            mode: 0o100644,
            nlink: 1,
            ..Default::default()
        };
        let e = entry(3, attr, std::time::Duration::from_millis(1500), std::time::Duration::ZERO);
        let mut b = [0u8; 256];
        let mut r = ReplyBuf::new(&mut b);
        r.push(&e).unwrap();
        let bytes = r.bytes();
        assert_eq!(bytes.len(), 128);
        assert_eq!(&bytes[0..8], &3u64.to_le_bytes()); // nodeid
        assert_eq!(&bytes[16..24], &1u64.to_le_bytes()); // entry_valid
        assert_eq!(&bytes[32..36], &500_000_000u32.to_le_bytes()); // entry_valid_nsec
        assert_eq!(&bytes[40 + 32..40 + 40], &[0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]); // mtime
        assert_eq!(&bytes[40 + 52..40 + 56], &500_000_032u32.to_le_bytes()); // mtimensec
        assert_eq!(&bytes[40 + 60..40 + 64], &0o100644u32.to_le_bytes()); // mode
    }

    #[test]
    fn dirent_golden_and_padding() {
        let mut b = [0xaau8; 64];
        let mut r = ReplyBuf::new(&mut b);
        assert!(r.dirent(64, 9, 1, 4, b"abc"));
        assert_eq!(
            r.bytes(),
            &[9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0, b'a', b'b', b'c', 0, 0, 0, 0, 0]
        );
        // Another 32-byte record fits in 64, a third does not.
        assert!(r.dirent(64, 10, 2, 8, b"d"));
        assert!(!r.dirent(64, 11, 3, 8, b"e"));
        assert_eq!(r.len(), 64);
    }

    #[test]
    fn direntplus_keeps_ino_and_type_without_a_node() {
        let mut b = [0u8; 512];
        let mut r = ReplyBuf::new(&mut b);
        let e = entry(0, Attr::default(), std::time::Duration::ZERO, std::time::Duration::ZERO);
        assert!(r.direntplus(512, &e, 77, 1, 4, b".."));
        let bytes = r.bytes();
        assert_eq!(bytes.len(), 160);
        assert_eq!(&bytes[0..8], &0u64.to_le_bytes()); // no node
        assert_eq!(&bytes[128..136], &77u64.to_le_bytes()); // d_ino
        assert_eq!(&bytes[144..148], &2u32.to_le_bytes()); // namelen
        assert_eq!(&bytes[148..152], &4u32.to_le_bytes()); // DT_DIR
        assert_eq!(&bytes[152..154], b"..");
    }

    #[test]
    fn fill_is_bounded_and_overflow_is_erange() {
        let mut b = [0u8; 8];
        let mut r = ReplyBuf::new(&mut b);
        let n = r
            .fill(100, |buf| {
                assert_eq!(buf.len(), 8);
                buf[..3].copy_from_slice(b"xyz");
                Ok(3)
            })
            .unwrap();
        assert_eq!((n, r.bytes()), (3, &b"xyz"[..]));
        assert_eq!(r.push_bytes(&[0; 6]), Err(Errno::ERANGE));
    }
}
