//! A FUSE request decoded from its bytes into a typed operation ([`Op`]) that borrows
//! them: names and write data are slices of the transport's buffer, nothing is allocated.
//!
//! The two transports lay a request out differently: `/dev/fuse` gives one buffer
//! (`InHeader`, the opcode's fixed struct, then names or data); a FUSE-over-io_uring entry
//! gives the header and the fixed struct in its header buffer and the rest in its payload
//! buffer. [`decode`] takes the header bytes, the fixed struct's area (`None` when it comes
//! first in `rest`) and the rest. Anything short or malformed is an [`Errno`] (EINVAL),
//! never a panic; the caller answers it when the header could be read.

use uvfs::Errno;
use zerocopy::{FromBytes, Immutable, KnownLayout};

use crate::abi::{self, InHeader, opcode};

/// A decoded request.
#[derive(Debug)]
pub struct Request<'a> {
    /// The header (copied: it is small).
    pub header: InHeader,
    /// The operation with its arguments.
    pub op: Op<'a>,
}

/// The operations this server understands; everything else is [`Op::Unsupported`]
/// (answered ENOSYS, which tells the kernel not to send it again where it can).
#[derive(Debug)]
#[allow(missing_docs)]
pub enum Op<'a> {
    Lookup {
        name: &'a [u8],
    },
    Forget {
        nlookup: u64,
    },
    /// `count` records of [`abi::ForgetOne`], read with [`forget_ones`].
    BatchForget {
        count: u32,
        records: &'a [u8],
    },
    Getattr {
        fh: Option<u64>,
    },
    Setattr(abi::SetattrIn),
    Readlink,
    Symlink {
        name: &'a [u8],
        target: &'a [u8],
    },
    Mknod {
        arg: abi::MknodIn,
        name: &'a [u8],
    },
    Mkdir {
        arg: abi::MkdirIn,
        name: &'a [u8],
    },
    Unlink {
        name: &'a [u8],
    },
    Rmdir {
        name: &'a [u8],
    },
    Rename {
        newdir: u64,
        flags: u32,
        name: &'a [u8],
        newname: &'a [u8],
    },
    Link {
        oldnodeid: u64,
        name: &'a [u8],
    },
    Open {
        flags: u32,
    },
    Read(abi::ReadIn),
    Write {
        arg: abi::WriteIn,
        data: &'a [u8],
    },
    Statfs,
    Release(abi::ReleaseIn),
    Fsync {
        fh: u64,
        datasync: bool,
    },
    Setxattr {
        flags: u32,
        name: &'a [u8],
        value: &'a [u8],
    },
    Getxattr {
        size: u32,
        name: &'a [u8],
    },
    Listxattr {
        size: u32,
    },
    Removexattr {
        name: &'a [u8],
    },
    Flush {
        fh: u64,
        lock_owner: u64,
    },
    Init(abi::InitIn),
    Opendir {
        flags: u32,
    },
    Readdir(abi::ReadIn),
    Readdirplus(abi::ReadIn),
    Releasedir(abi::ReleaseIn),
    Fsyncdir {
        fh: u64,
        datasync: bool,
    },
    Access {
        mask: u32,
    },
    Create {
        arg: abi::CreateIn,
        name: &'a [u8],
    },
    /// `O_TMPFILE` in the node's directory (the kernel's name for the new dentry, `/`,
    /// follows the argument and means nothing to the server).
    Tmpfile {
        arg: abi::CreateIn,
    },
    Interrupt {
        unique: u64,
    },
    Destroy,
    Fallocate(abi::FallocateIn),
    /// IOCTL: the argument and the command's `in_size` bytes of input.
    Ioctl {
        arg: abi::IoctlIn,
        data: &'a [u8],
    },
    CopyFileRange(abi::CopyFileRangeIn),
    Lseek(abi::LseekIn),
    Getlk(abi::LkIn),
    /// SETLK (`sleep` false) and SETLKW (`sleep` true).
    Setlk {
        arg: abi::LkIn,
        sleep: bool,
    },
    Unsupported(u32),
}

impl Op<'_> {
    /// Whether the kernel expects no reply.
    pub fn no_reply(&self) -> bool {
        matches!(self, Op::Forget { .. } | Op::BatchForget { .. })
    }
}

/// The records of a BATCH_FORGET.
pub fn forget_ones(records: &[u8]) -> impl Iterator<Item = abi::ForgetOne> + '_ {
    records.chunks_exact(std::mem::size_of::<abi::ForgetOne>()).filter_map(abi::read_prefix::<abi::ForgetOne>)
}

/// Reads arguments in order: the fixed struct first (from its own area if the transport
/// has one), then names and data from the rest.
struct Args<'a> {
    fixed: Option<&'a [u8]>,
    rest: &'a [u8],
}

impl<'a> Args<'a> {
    fn fixed<T: FromBytes + KnownLayout + Immutable>(&mut self) -> Result<T, Errno> {
        match self.fixed.take() {
            Some(area) => abi::read_prefix(area).ok_or(Errno::EINVAL),
            None => {
                let (t, rest) = T::read_from_prefix(self.rest).map_err(|_| Errno::EINVAL)?;
                self.rest = rest;
                Ok(t)
            }
        }
    }

    /// A NUL-terminated name (without the NUL).
    fn name(&mut self) -> Result<&'a [u8], Errno> {
        let end = self.rest.iter().position(|&b| b == 0).ok_or(Errno::EINVAL)?;
        let (name, rest) = self.rest.split_at(end);
        self.rest = &rest[1..];
        Ok(name)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Errno> {
        if self.rest.len() < n {
            return Err(Errno::EINVAL);
        }
        let (b, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(b)
    }
}

/// Decodes the header alone; `None` if there are fewer bytes than a header.
pub fn header(bytes: &[u8]) -> Option<InHeader> {
    abi::read_prefix(bytes)
}

/// Decodes a request whose header is `header`, its fixed struct in `fixed` (or at the
/// start of `rest` when `None`), and its other arguments in `rest`.
pub fn decode<'a>(header: InHeader, fixed: Option<&'a [u8]>, rest: &'a [u8]) -> Result<Request<'a>, Errno> {
    let mut a = Args { fixed, rest };
    let op = match header.opcode {
        opcode::LOOKUP => Op::Lookup { name: a.name()? },
        opcode::FORGET => Op::Forget { nlookup: a.fixed::<abi::ForgetIn>()?.nlookup },
        opcode::BATCH_FORGET => {
            let b = a.fixed::<abi::BatchForgetIn>()?;
            let len = (b.count as usize).checked_mul(std::mem::size_of::<abi::ForgetOne>()).ok_or(Errno::EINVAL)?;
            Op::BatchForget { count: b.count, records: a.bytes(len)? }
        }
        opcode::GETATTR => {
            let g = a.fixed::<abi::GetattrIn>()?;
            Op::Getattr { fh: (g.getattr_flags & abi::GETATTR_FH != 0).then_some(g.fh) }
        }
        opcode::SETATTR => Op::Setattr(a.fixed()?),
        opcode::READLINK => Op::Readlink,
        opcode::SYMLINK => {
            let name = a.name()?;
            Op::Symlink { name, target: a.name()? }
        }
        opcode::MKNOD => {
            let arg = a.fixed()?;
            Op::Mknod { arg, name: a.name()? }
        }
        opcode::MKDIR => {
            let arg = a.fixed()?;
            Op::Mkdir { arg, name: a.name()? }
        }
        opcode::UNLINK => Op::Unlink { name: a.name()? },
        opcode::RMDIR => Op::Rmdir { name: a.name()? },
        opcode::RENAME => {
            let r = a.fixed::<abi::RenameIn>()?;
            let name = a.name()?;
            Op::Rename { newdir: r.newdir, flags: 0, name, newname: a.name()? }
        }
        opcode::RENAME2 => {
            let r = a.fixed::<abi::Rename2In>()?;
            let name = a.name()?;
            Op::Rename { newdir: r.newdir, flags: r.flags, name, newname: a.name()? }
        }
        opcode::LINK => {
            let l = a.fixed::<abi::LinkIn>()?;
            Op::Link { oldnodeid: l.oldnodeid, name: a.name()? }
        }
        opcode::OPEN => Op::Open { flags: a.fixed::<abi::OpenIn>()?.flags },
        opcode::READ => Op::Read(a.fixed()?),
        opcode::WRITE => {
            let arg = a.fixed::<abi::WriteIn>()?;
            Op::Write { arg, data: a.bytes(arg.size as usize)? }
        }
        opcode::STATFS => Op::Statfs,
        opcode::RELEASE => Op::Release(a.fixed()?),
        opcode::FSYNC => {
            let f = a.fixed::<abi::FsyncIn>()?;
            Op::Fsync { fh: f.fh, datasync: f.fsync_flags & abi::FSYNC_FDATASYNC != 0 }
        }
        opcode::SETXATTR => {
            let s = a.fixed::<abi::SetxattrIn>()?;
            let name = a.name()?;
            Op::Setxattr { flags: s.flags, name, value: a.bytes(s.size as usize)? }
        }
        opcode::GETXATTR => {
            let g = a.fixed::<abi::GetxattrIn>()?;
            Op::Getxattr { size: g.size, name: a.name()? }
        }
        opcode::LISTXATTR => Op::Listxattr { size: a.fixed::<abi::GetxattrIn>()?.size },
        opcode::REMOVEXATTR => Op::Removexattr { name: a.name()? },
        opcode::FLUSH => {
            let f = a.fixed::<abi::FlushIn>()?;
            Op::Flush { fh: f.fh, lock_owner: f.lock_owner }
        }
        opcode::INIT => Op::Init(init_in(&mut a)?),
        opcode::OPENDIR => Op::Opendir { flags: a.fixed::<abi::OpenIn>()?.flags },
        opcode::READDIR => Op::Readdir(a.fixed()?),
        opcode::READDIRPLUS => Op::Readdirplus(a.fixed()?),
        opcode::RELEASEDIR => Op::Releasedir(a.fixed()?),
        opcode::FSYNCDIR => {
            let f = a.fixed::<abi::FsyncIn>()?;
            Op::Fsyncdir { fh: f.fh, datasync: f.fsync_flags & abi::FSYNC_FDATASYNC != 0 }
        }
        opcode::ACCESS => Op::Access { mask: a.fixed::<abi::AccessIn>()?.mask },
        opcode::CREATE => {
            let arg = a.fixed()?;
            Op::Create { arg, name: a.name()? }
        }
        opcode::TMPFILE => Op::Tmpfile { arg: a.fixed()? },
        opcode::INTERRUPT => Op::Interrupt { unique: a.fixed::<abi::InterruptIn>()?.unique },
        opcode::DESTROY => Op::Destroy,
        opcode::FALLOCATE => Op::Fallocate(a.fixed()?),
        opcode::IOCTL => {
            let arg = a.fixed::<abi::IoctlIn>()?;
            Op::Ioctl { arg, data: a.bytes(arg.in_size as usize)? }
        }
        opcode::COPY_FILE_RANGE => Op::CopyFileRange(a.fixed()?),
        opcode::LSEEK => Op::Lseek(a.fixed()?),
        opcode::GETLK => Op::Getlk(a.fixed()?),
        opcode::SETLK => Op::Setlk { arg: a.fixed()?, sleep: false },
        opcode::SETLKW => Op::Setlk { arg: a.fixed()?, sleep: true },
        other => Op::Unsupported(other),
    };
    Ok(Request { header, op })
}

/// INIT's argument: kernels before 7.36 send a shorter struct (no `flags2`); what is
/// missing reads as zero. Always from the front of the buffer (INIT comes through
/// `/dev/fuse`).
fn init_in(a: &mut Args<'_>) -> Result<abi::InitIn, Errno> {
    let src = a.fixed.take().unwrap_or(a.rest);
    if src.len() < 16 {
        return Err(Errno::EINVAL);
    }
    let mut buf = [0u8; std::mem::size_of::<abi::InitIn>()];
    let n = src.len().min(buf.len());
    buf[..n].copy_from_slice(&src[..n]);
    abi::read_prefix(&buf).ok_or(Errno::EINVAL)
}

/// Decodes a request read whole from `/dev/fuse`. `Err(None)`: not even a header (no
/// reply possible); `Err(Some((unique, errno)))`: answer `unique` with `errno`.
pub fn decode_dev(buf: &[u8]) -> Result<Request<'_>, Option<(u64, Errno)>> {
    let h = header(buf).ok_or(None)?;
    let len = h.len as usize;
    if len < std::mem::size_of::<InHeader>() || len > buf.len() {
        return Err(Some((h.unique, Errno::EIO)));
    }
    let body = &buf[std::mem::size_of::<InHeader>()..len];
    decode(h, None, body).map_err(|e| Some((h.unique, e)))
}

#[cfg(test)]
mod tests {
    use zerocopy::IntoBytes;

    use super::*;

    fn msg(opcode: u32, body: &[u8]) -> Vec<u8> {
        let h = InHeader {
            len: (40 + body.len()) as u32,
            opcode,
            unique: 7,
            nodeid: 1,
            uid: 1000,
            gid: 100,
            pid: 42,
            ..Default::default()
        };
        let mut v = h.as_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn lookup_name_borrows_the_buffer() {
        let m = msg(opcode::LOOKUP, b"hello\0");
        let r = decode_dev(&m).unwrap();
        assert_eq!(r.header.uid, 1000);
        match r.op {
            Op::Lookup { name } => {
                assert_eq!(name, b"hello");
                assert!(std::ptr::eq(name.as_ptr(), m[40..].as_ptr()));
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn name_without_nul_is_einval() {
        let m = msg(opcode::LOOKUP, b"hello");
        assert_eq!(decode_dev(&m).unwrap_err(), Some((7, Errno::EINVAL)));
    }

    #[test]
    fn short_fixed_struct_is_einval() {
        let m = msg(opcode::SETATTR, &[0u8; 40]);
        assert_eq!(decode_dev(&m).unwrap_err(), Some((7, Errno::EINVAL)));
    }

    #[test]
    fn write_data_longer_than_sent_is_einval() {
        let w = abi::WriteIn { size: 100, ..Default::default() };
        let mut body = w.as_bytes().to_vec();
        body.extend_from_slice(&[1u8; 99]);
        assert_eq!(decode_dev(&msg(opcode::WRITE, &body)).unwrap_err(), Some((7, Errno::EINVAL)));
        body.push(2);
        match decode_dev(&msg(opcode::WRITE, &body)).unwrap().op {
            Op::Write { data, .. } => assert_eq!(data.len(), 100),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn header_length_beyond_the_buffer_is_eio() {
        let mut m = msg(opcode::GETATTR, &[0u8; 16]);
        m.truncate(50);
        assert_eq!(decode_dev(&m).unwrap_err(), Some((7, Errno::EIO)));
        assert_eq!(decode_dev(&m[..39]).unwrap_err(), None);
    }

    #[test]
    fn rename_and_symlink_take_two_names() {
        let mut body = abi::RenameIn { newdir: 9 }.as_bytes().to_vec();
        body.extend_from_slice(b"a\0bb\0");
        match decode_dev(&msg(opcode::RENAME, &body)).unwrap().op {
            Op::Rename { newdir: 9, flags: 0, name: b"a", newname: b"bb" } => {}
            o => panic!("{o:?}"),
        }
        match decode_dev(&msg(opcode::SYMLINK, b"link\0target\0")).unwrap().op {
            Op::Symlink { name: b"link", target: b"target" } => {}
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn ioctl_takes_its_input_bytes() {
        let arg = abi::IoctlIn { fh: 3, cmd: abi::FS_IOC_SETFLAGS, in_size: 4, ..Default::default() };
        let mut body = arg.as_bytes().to_vec();
        body.extend_from_slice(&[0x10, 0, 0]);
        assert_eq!(decode_dev(&msg(opcode::IOCTL, &body)).unwrap_err(), Some((7, Errno::EINVAL)));
        body.push(0);
        match decode_dev(&msg(opcode::IOCTL, &body)).unwrap().op {
            Op::Ioctl { arg: a, data } => assert_eq!((a, data), (arg, &[0x10u8, 0, 0, 0][..])),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn uring_layout_takes_the_fixed_struct_from_its_area() {
        // io_uring: the fixed struct in the header buffer's op_in, the name in the payload.
        let mut op_in = [0u8; 128];
        let mk = abi::MkdirIn { mode: 0o755, umask: 0o22 };
        op_in[..8].copy_from_slice(mk.as_bytes());
        let h = InHeader { opcode: opcode::MKDIR, unique: 3, ..Default::default() };
        match decode(h, Some(&op_in), b"dir\0").unwrap().op {
            Op::Mkdir { arg, name: b"dir" } => assert_eq!(arg, mk),
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn negative_setattr_time_is_kept_as_sent() {
        let s = abi::SetattrIn {
            valid: abi::fattr::MTIME,
            mtime: (-2i64) as u64,
            mtimensec: 500_000_032,
            ..Default::default()
        };
        match decode_dev(&msg(opcode::SETATTR, s.as_bytes())).unwrap().op {
            Op::Setattr(a) => {
                assert_eq!(a.mtime as i64, -2);
                assert_eq!(a.mtimensec, 500_000_032);
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn batch_forget_count_is_checked() {
        let mut body = abi::BatchForgetIn { count: 2, dummy: 0 }.as_bytes().to_vec();
        body.extend_from_slice(abi::ForgetOne { nodeid: 5, nlookup: 1 }.as_bytes());
        assert_eq!(decode_dev(&msg(opcode::BATCH_FORGET, &body)).unwrap_err(), Some((7, Errno::EINVAL)));
        body.extend_from_slice(abi::ForgetOne { nodeid: 6, nlookup: 2 }.as_bytes());
        match decode_dev(&msg(opcode::BATCH_FORGET, &body)).unwrap().op {
            Op::BatchForget { count: 2, records } => {
                let v: Vec<_> = forget_ones(records).map(|f| (f.nodeid, f.nlookup)).collect();
                assert_eq!(v, [(5, 1), (6, 2)]);
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn short_init_reads_as_zero_padded() {
        let body = [7u32.to_ne_bytes(), 31u32.to_ne_bytes(), 0u32.to_ne_bytes(), 5u32.to_ne_bytes()].concat();
        match decode_dev(&msg(opcode::INIT, &body)).unwrap().op {
            Op::Init(i) => assert_eq!((i.major, i.minor, i.flags, i.flags2), (7, 31, 5, 0)),
            o => panic!("{o:?}"),
        }
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode_dev(&bytes);
        }

        #[test]
        fn random_bodies_of_every_opcode_never_panic(
            op in 0u32..60,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            fixed in proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..130)),
        ) {
            let m = msg(op, &body);
            let _ = decode_dev(&m);
            let h = InHeader { opcode: op, ..Default::default() };
            let _ = decode(h, fixed.as_deref(), &body);
        }
    }
}
