//! Fifos in-process with blocking opens, reads and writes (issue 13): the waits end when
//! the other side acts, as Linux's `fifo_open`, `pipe_read` and `pipe_write`. The
//! non-blocking rules are compared with the kernel in `differential.rs` (`fifos`).

use std::sync::mpsc;
use std::thread;

use uvfs::{DirFd, Errno, OpenFlags, Vfs, VfsConfig};

fn setup() -> Vfs {
    let vfs = Vfs::new(VfsConfig::default());
    vfs.root_task().mknodat(DirFd::Cwd, b"/fifo", 0o010644, 0).unwrap();
    vfs
}

/// A reader's blocking open waits for a writer, and the writer's for the reader; then the
/// data goes through in order and the reader sees the end when the writer closes.
#[test]
fn blocking_opens_meet_and_data_flows() {
    let vfs = setup();
    let (tx, rx) = mpsc::channel();
    let reader = {
        let t = vfs.root_task();
        thread::spawn(move || {
            let fd = t.open(b"/fifo", OpenFlags::RDONLY, 0).unwrap();
            tx.send(()).unwrap();
            let mut all = Vec::new();
            let mut buf = [0u8; 7];
            loop {
                match t.read(fd, &mut buf).unwrap() {
                    0 => break,
                    n => all.extend_from_slice(&buf[..n]),
                }
            }
            t.close(fd).unwrap();
            all
        })
    };
    // The reader cannot have opened yet: nobody writes.
    assert!(rx.try_recv().is_err());
    let t = vfs.root_task();
    let fd = t.open(b"/fifo", OpenFlags::WRONLY, 0).unwrap();
    rx.recv().unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    // More than the pipe holds: the write waits for the reader to make room.
    assert_eq!(t.write(fd, &data).unwrap(), data.len());
    t.close(fd).unwrap();
    assert_eq!(reader.join().unwrap(), data);
}

/// A blocked reader of an `O_RDWR` descriptor does not stop a writer on the same open
/// file (no position lock held across the wait).
#[test]
fn one_description_reads_and_writes_from_two_threads() {
    let vfs = setup();
    let t = vfs.root_task();
    let fd = t.open(b"/fifo", OpenFlags::RDWR, 0).unwrap();
    thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut buf = [0u8; 16];
            let n = t.read(fd, &mut buf).unwrap();
            buf[..n].to_vec()
        });
        assert_eq!(t.write(fd, b"ping").unwrap(), 4);
        assert_eq!(reader.join().unwrap(), b"ping");
    });
    t.close(fd).unwrap();
}

/// A write to a pipe whose reader leaves while it waits ends with what it wrote, or
/// EPIPE; a writer-only open without readers and `O_NONBLOCK` is ENXIO.
#[test]
fn writers_without_readers() {
    let vfs = setup();
    let t = vfs.root_task();
    assert_eq!(t.open(b"/fifo", OpenFlags::WRONLY | OpenFlags::NONBLOCK, 0), Err(Errno::ENXIO));
    let r = t.open(b"/fifo", OpenFlags::RDONLY | OpenFlags::NONBLOCK, 0).unwrap();
    let w = t.open(b"/fifo", OpenFlags::WRONLY, 0).unwrap();
    thread::scope(|s| {
        let writer = s.spawn(|| t.write(w, &vec![1u8; 1 << 20]));
        // Drain a little, then leave: the writer wakes and stops.
        let mut buf = vec![0u8; 4096];
        let mut got = 0;
        while got < 8192 {
            match t.read(r, &mut buf) {
                Ok(n) => got += n,
                Err(Errno::EAGAIN) => thread::yield_now(),
                Err(e) => panic!("{e:?}"),
            }
        }
        t.close(r).unwrap();
        let n = writer.join().unwrap().unwrap();
        assert!((65536..1 << 20).contains(&n), "the writer wrote {n} bytes");
    });
    assert_eq!(t.write(w, b"x"), Err(Errno::EPIPE));
}
