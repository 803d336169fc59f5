//! More files than a descriptor table holds, through one mount: the server keeps the
//! kernel's nodes and open files as `Arc<File>` outside any descriptor table. (It used to
//! hold one `O_PATH` descriptor of its own task per node and one per open file, and that
//! table stops at 65,536: a memfs mount held at most about 65,533 files the kernel knew.)
//! Needs root, /dev/fuse, findutils and python3.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{Mounted, require, sh};
use uvfs_fuse::MountOptions;

#[test]
fn two_hundred_thousand_files_created_listed_and_removed() {
    require(&[("find", "findutils"), ("xargs", "findutils"), ("touch", "coreutils"), ("seq", "coreutils")]);
    assert!(std::path::Path::new("/usr/bin/python3").exists(), "missing /usr/bin/python3: apt-get install python3");
    let m = Mounted::new(MountOptions::default());
    let made = sh(
        m.path(),
        "mkdir t && cd t && for d in $(seq 0 19); do mkdir d$d && (cd d$d && seq 10000 | xargs touch); done \
         && find . | wc -l",
    );
    assert_eq!(made.trim(), "200021", "200,000 files, 20 directories and '.'");
    // 100,000 of them open at once (ten processes holding a directory's 10,000 each: a
    // process's own limit is lower): each open file pins its node in the kernel, so the
    // server holds at least that many nodes and open files together.
    let hold = "import os, sys\nd = sys.argv[1]\nfds = [os.open(os.path.join(d, n), os.O_RDONLY) for n in os.listdir(d)]\nprint(len(fds), flush=True)\nsys.stdin.read()\n";
    let mut holders: Vec<std::process::Child> = (0..10)
        .map(|k| {
            Command::new("/usr/bin/python3")
                .args(["-c", hold])
                .arg(m.path().join(format!("t/d{k}")))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("python3")
        })
        .collect();
    for c in &mut holders {
        let mut line = String::new();
        BufReader::new(c.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "10000", "a holder could not open its files");
    }
    let h = m.handle.as_ref().unwrap();
    assert!(h.nodes() > 100_000, "nodes held: {}", h.nodes());
    for mut c in holders {
        drop(c.stdin.take());
        assert!(c.wait().unwrap().success());
    }
    assert_eq!(sh(m.path(), "find t -type f | wc -l").trim(), "200000");
    sh(m.path(), "rm -rf t");
    assert!(!m.path().join("t").exists());
    assert_eq!(sh(m.path(), "find . | wc -l").trim(), "1");
}
