//! Concurrency acceptance: threads that rename, unlink and create while others walk, stat,
//! open, read and readlink never see a wrong answer, and the descriptor table stays sound
//! while threads open, dup and close under readers.
//!
//! # How answers are judged
//! Each writer thread owns a set of watched names and a step counter ([`Gen`]): before
//! step `i` it stores `2i + 1`, after it `2i + 2`, and it records what every watched name
//! holds after each step (an inode number, or absent). A reader loads the counter before
//! and after each call; the answer must be what the name held in one of the states between
//! (`hist[g1 / 2 ..= (g2 + 1) / 2]`): the file the name named before or after a change,
//! never a third, and `ENOENT` only if some such state had no such name. All checks run
//! after the threads have joined, so readers do nothing but record.
//!
//! Loops have fixed counts (writers) or run until the writers are done (readers); nothing
//! asserts on timing, or on how often a fallback happened, only on what is deterministic:
//! every walk is answered by exactly one tier, and a VFS with the lockless walk switched
//! off answers every walk in the locked tier.
//!
//! `UVFS_STRESS_ITERS` sets the writers' step count (default 20000, about 2 s). Under
//! valgrind, as a use-after-free check of the reclamation (Miri needs nightly):
//! `valgrind --error-exitcode=1 --leak-check=no --fair-sched=yes <test binary> --test-threads=2`
//! (about 80 s; `UVFS_STRESS_ITERS=1000` for a 5 s run).

use std::collections::HashMap;
use std::sync::Barrier;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use uvfs::counters;
use uvfs::{AtFlags, DirFd, Errno, FastPaths, Fd, OpenFlags, RenameFlags, Task, Vfs, VfsConfig};

/// Writer steps per writer thread (`UVFS_STRESS_ITERS` overrides).
fn iters(default: usize) -> usize {
    std::env::var("UVFS_STRESS_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A fresh instance; `lockless: false` switches the lockless walk off (every walk runs in
/// the locked tier).
fn new_vfs(lockless: bool) -> Vfs {
    let mut fast = FastPaths::all();
    if !lockless {
        fast.remove(FastPaths::LOCKLESS_WALK);
    }
    Vfs::new(VfsConfig { fast_paths: fast, ..VfsConfig::default() })
}

/// The content of the regular file with inode number `ino` (written once, at creation,
/// before the file gets a watched name unless the test says otherwise).
fn content_of(ino: u64) -> Vec<u8> {
    format!("ino {ino}:{}", "x".repeat((ino % 37) as usize)).into_bytes()
}

/// Creates `path` with its identity content; returns the inode number.
fn make_file(t: &Task, path: &str) -> u64 {
    let fd = t.open(path.as_bytes(), OpenFlags::CREAT | OpenFlags::EXCL | OpenFlags::WRONLY, 0o644).unwrap();
    let ino = t.fstat(fd).unwrap().ino;
    let c = content_of(ino);
    assert_eq!(t.write(fd, &c).unwrap(), c.len());
    t.close(fd).unwrap();
    ino
}

/// Creates the symlink `path` with body `link:<tag>`; returns its inode number.
fn make_link(t: &Task, tag: u64, path: &str) -> u64 {
    t.symlink(format!("link:{tag}").as_bytes(), path.as_bytes()).unwrap();
    t.lstat(path.as_bytes()).unwrap().ino
}

/// A writer's step counter: odd while step `(g - 1) / 2` is in progress.
struct Gen(AtomicU64);

impl Gen {
    fn new() -> Gen {
        Gen(AtomicU64::new(0))
    }
    fn begin(&self, step: usize) {
        self.0.store(2 * step as u64 + 1, Ordering::SeqCst);
    }
    fn end(&self, step: usize) {
        self.0.store(2 * step as u64 + 2, Ordering::SeqCst);
    }
    fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Keeps writers from running ahead of readers (on two cores a writer could otherwise do
/// all its steps in one time slice): a writer starts step `i` once the readers together
/// have finished `i` rounds. Readers run until the writers are done, so this terminates.
struct Pace(AtomicUsize);

impl Pace {
    fn new() -> Pace {
        Pace(AtomicUsize::new(0))
    }
    /// A reader finished a round.
    fn round(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
    /// A writer waits before step `step`.
    fn wait(&self, step: usize) {
        while self.0.load(Ordering::SeqCst) < step {
            std::thread::yield_now();
        }
    }
}

/// What a call answered: an identity (inode number; a symlink tag or a getcwd code where
/// the observation says so), or an errno.
type Got = Result<u64, Errno>;

/// One reader observation.
struct Obs {
    /// Writer step counter before and after the call.
    g1: u64,
    g2: u64,
    /// Index of the watched name.
    name: usize,
    /// The answer.
    got: Got,
    /// `got` is a symlink tag (from readlink), to be mapped to the link's inode number.
    tag: bool,
}

/// Calls `f` between two loads of `ctr` and records the answer.
fn observe(out: &mut Vec<Obs>, ctr: &Gen, name: usize, tag: bool, f: impl FnOnce() -> Got) {
    let g1 = ctr.now();
    let got = f();
    let g2 = ctr.now();
    out.push(Obs { g1, g2, name, got, tag });
}

/// Judges every observation against the writer's history (`hist[k]`: what each name held
/// after `k` steps); `tags` maps symlink tags to inode numbers.
fn judge(label: &str, names: &[String], hist: &[Vec<Option<u64>>], tags: &HashMap<u64, u64>, obs: &[Obs]) {
    for o in obs {
        let lo = (o.g1 / 2) as usize;
        let hi = (o.g2.div_ceil(2) as usize).min(hist.len() - 1);
        let allowed: Vec<Option<u64>> = (lo..=hi).map(|k| hist[k][o.name]).collect();
        let got = match o.got {
            Ok(t) if o.tag => Ok(*tags
                .get(&t)
                .unwrap_or_else(|| panic!("{label}: readlink of {} gave unknown body link:{t}", names[o.name]))),
            g => g,
        };
        let ok = match got {
            Ok(id) => allowed.contains(&Some(id)),
            Err(Errno::ENOENT) => allowed.contains(&None),
            Err(_) => false,
        };
        assert!(
            ok,
            "{label}: {} answered {got:?} during writer steps {lo}..={hi}; the name held {allowed:?}",
            names[o.name]
        );
    }
}

/// Per-thread walk counts around a reader's calls: every walk is answered by exactly one
/// tier, and with the lockless walk off, by the locked one. `walks` counts calls that walk
/// once (stat, lstat, readlink); `opens` counts opens, which walk again when what they
/// found lost its last name before they could open it.
struct WalkCount {
    before: uvfs::Counters,
    walks: u64,
    opens: u64,
}

impl WalkCount {
    fn start() -> WalkCount {
        WalkCount { before: counters(), walks: 0, opens: 0 }
    }
    fn finish(self, lockless: bool) -> (u64, u64, u64) {
        let c = counters();
        let (free, locked, retries) = (
            c.walk_lockless - self.before.walk_lockless,
            c.walk_locked - self.before.walk_locked,
            c.walk_retries - self.before.walk_retries,
        );
        if self.opens == 0 {
            assert_eq!(free + locked, self.walks, "every walk is answered by exactly one tier");
        } else {
            assert!(free + locked >= self.walks + self.opens, "every call walks at least once");
        }
        if !lockless {
            assert_eq!(free, 0, "the lockless walk is switched off");
        }
        // The path cache answers in the lockless tier only (and its answers are judged
        // with the rest: these races are what its stamps are for).
        let hits = c.path_cache_hits - self.before.path_cache_hits;
        assert!(hits <= free, "path cache hits {hits}, lockless walks {free}");
        eprintln!("reader: {free} lockless walks, {hits} answered by the path cache");
        (free, locked, retries)
    }
}

/// `stat` as an identity.
fn stat_ino(t: &Task, dirfd: DirFd, path: &str) -> Got {
    t.fstatat(dirfd, path.as_bytes(), AtFlags::empty()).map(|s| s.ino)
}

/// `lstat` as an identity.
fn lstat_ino(t: &Task, path: &str) -> Got {
    t.lstat(path.as_bytes()).map(|s| s.ino)
}

/// `open` + `fstat` + `pread`: the identity, after checking the data is that file's (or,
/// with `may_be_empty`, not written yet).
fn open_read_ino(t: &Task, path: &str, may_be_empty: bool) -> Got {
    let fd = t.open(path.as_bytes(), OpenFlags::RDONLY, 0)?;
    let ino = t.fstat(fd).unwrap().ino;
    let mut buf = [0u8; 128];
    let n = t.pread(fd, &mut buf, 0).unwrap();
    t.close(fd).unwrap();
    let want = content_of(ino);
    assert!(
        buf[..n] == want[..] || (may_be_empty && n == 0),
        "{path}: opened inode {ino}, read {:?}, want {:?}",
        String::from_utf8_lossy(&buf[..n]),
        String::from_utf8_lossy(&want)
    );
    Ok(ino)
}

/// `readlink` as a symlink tag.
fn readlink_tag(t: &Task, path: &str) -> Got {
    let mut buf = [0u8; 64];
    let n = t.readlink(path.as_bytes(), &mut buf)?;
    let body = std::str::from_utf8(&buf[..n]).unwrap();
    Ok(body
        .strip_prefix("link:")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{path}: unexpected body {body:?}")))
}

// ---------------------------------------------------------------------------------------
// Rename race: RENAME_EXCHANGE across and within directories, and rename over a name.
// ---------------------------------------------------------------------------------------

const RENAME_WRITERS: usize = 2;
const READERS: usize = 2;

/// Watched names of rename writer `w`: three files exchanged in a cycle (two in `d0`, one
/// in `d1`), two symlinks exchanged across directories, one name renamed over.
fn rename_names(w: usize) -> Vec<String> {
    vec![
        format!("/r/d0/w{w}e0"),
        format!("/r/d1/w{w}e1"),
        format!("/r/d0/w{w}e2"),
        format!("/r/d0/w{w}l0"),
        format!("/r/d1/w{w}l1"),
        format!("/r/d1/w{w}o"),
    ]
}

fn rename_race(lockless: bool) {
    let vfs = new_vfs(lockless);
    let t = vfs.root_task();
    for d in ["/r", "/r/d0", "/r/d1"] {
        t.mkdir(d.as_bytes(), 0o755).unwrap();
    }
    let steps = iters(20_000);
    let mut tags = HashMap::new();
    let mut initial = Vec::new();
    for w in 0..RENAME_WRITERS {
        let n = rename_names(w);
        let (t0, t1) = (2 * w as u64, 2 * w as u64 + 1);
        let l0 = make_link(&t, t0, &n[3]);
        let l1 = make_link(&t, t1, &n[4]);
        tags.insert(t0, l0);
        tags.insert(t1, l1);
        initial.push(vec![
            Some(make_file(&t, &n[0])),
            Some(make_file(&t, &n[1])),
            Some(make_file(&t, &n[2])),
            Some(l0),
            Some(l1),
            Some(make_file(&t, &n[5])),
        ]);
    }
    let gens: Vec<Gen> = (0..RENAME_WRITERS).map(|_| Gen::new()).collect();
    let done = AtomicUsize::new(0);
    let start = Barrier::new(RENAME_WRITERS + READERS);
    let pace = Pace::new();
    let (hists, obs) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..RENAME_WRITERS)
            .map(|w| {
                let (t, ctr, done, init, start, pace) = (&t, &gens[w], &done, initial[w].clone(), &start, &pace);
                s.spawn(move || {
                    let n = rename_names(w);
                    start.wait();
                    let tmp = format!("/r/d0/w{w}tmp");
                    let mut hist = vec![init];
                    for i in 0..steps {
                        pace.wait(i);
                        let mut st = hist.last().unwrap().clone();
                        let xchg = |a: usize, b: usize, st: &mut Vec<Option<u64>>| {
                            t.renameat2(
                                DirFd::Cwd,
                                n[a].as_bytes(),
                                DirFd::Cwd,
                                n[b].as_bytes(),
                                RenameFlags::EXCHANGE,
                            )
                            .unwrap();
                            st.swap(a, b);
                        };
                        match i % 5 {
                            0 => {
                                ctr.begin(i);
                                xchg(0, 1, &mut st);
                            }
                            1 => {
                                ctr.begin(i);
                                xchg(1, 2, &mut st);
                            }
                            2 => {
                                ctr.begin(i);
                                xchg(0, 2, &mut st);
                            }
                            3 => {
                                ctr.begin(i);
                                xchg(3, 4, &mut st);
                            }
                            _ => {
                                // The new file is complete before it gets the watched name.
                                let ino = make_file(t, &tmp);
                                ctr.begin(i);
                                t.rename(tmp.as_bytes(), n[5].as_bytes()).unwrap();
                                st[5] = Some(ino);
                            }
                        }
                        hist.push(st);
                        ctr.end(i);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                    hist
                })
            })
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                let (t, gens, done, start, pace) = (&t, &gens, &done, &start, &pace);
                s.spawn(move || {
                    let names: Vec<Vec<String>> = (0..RENAME_WRITERS).map(rename_names).collect();
                    start.wait();
                    let mut obs: Vec<Vec<Obs>> = (0..RENAME_WRITERS).map(|_| Vec::new()).collect();
                    let mut wc = WalkCount::start();
                    let mut round = r;
                    loop {
                        let last = done.load(Ordering::SeqCst) == RENAME_WRITERS;
                        for w in 0..RENAME_WRITERS {
                            let (n, g, o) = (&names[w], &gens[w], &mut obs[w]);
                            for e in [0, 1, 2, 5] {
                                if round % 2 == 0 {
                                    observe(o, g, e, false, || stat_ino(t, DirFd::Cwd, &n[e]));
                                    wc.walks += 1;
                                } else {
                                    observe(o, g, e, false, || open_read_ino(t, &n[e], false));
                                    wc.opens += 1;
                                }
                            }
                            for l in [3, 4] {
                                if round % 2 == 0 {
                                    observe(o, g, l, false, || lstat_ino(t, &n[l]));
                                } else {
                                    observe(o, g, l, true, || readlink_tag(t, &n[l]));
                                }
                                wc.walks += 1;
                            }
                        }
                        round += 1;
                        pace.round();
                        if last {
                            break;
                        }
                    }
                    (obs, wc.finish(lockless))
                })
            })
            .collect();
        let hists: Vec<_> = writers.into_iter().map(|h| h.join().unwrap()).collect();
        let obs: Vec<_> = readers.into_iter().map(|h| h.join().unwrap()).collect();
        (hists, obs)
    });
    let mut total = (0, 0, 0, 0);
    for (per_writer, (free, locked, retries)) in &obs {
        for (w, o) in per_writer.iter().enumerate() {
            judge("rename race", &rename_names(w), &hists[w], &tags, o);
            total.0 += o.len();
        }
        total.1 += free;
        total.2 += locked;
        total.3 += retries;
    }
    eprintln!(
        "rename race (lockless walk {lockless}): {} observations; walks lockless {}, locked {}, retried {}",
        total.0, total.1, total.2, total.3
    );
    // The renamed-over files died with their last name: nothing is left in d0 but the
    // watched names.
    for w in 0..RENAME_WRITERS {
        assert_eq!(t.stat(format!("/r/d0/w{w}tmp").as_bytes()), Err(Errno::ENOENT));
    }
}

/// Exchanges and renames over while readers stat, open+read, lstat and readlink: a name
/// that exists throughout never gives ENOENT, and always names one of the files it named
/// during the call.
#[test]
fn rename_race_lockless_walk() {
    rename_race(true);
}

/// The same race with every walk in the locked tier.
#[test]
fn rename_race_locked_walk() {
    rename_race(false);
}

// ---------------------------------------------------------------------------------------
// Unlink/create race.
// ---------------------------------------------------------------------------------------

const CREATE_WRITERS: usize = 2;

/// Watched names of create writer `w`: a file, a symlink, a directory.
fn create_names(w: usize) -> Vec<String> {
    vec![format!("/u/w{w}/f"), format!("/u/w{w}/s"), format!("/u/w{w}/d")]
}

fn unlink_create_race(lockless: bool) {
    let vfs = new_vfs(lockless);
    let t = vfs.root_task();
    t.mkdir(b"/u", 0o755).unwrap();
    for w in 0..CREATE_WRITERS {
        t.mkdir(format!("/u/w{w}").as_bytes(), 0o755).unwrap();
    }
    let steps = iters(20_000);
    let gens: Vec<Gen> = (0..CREATE_WRITERS).map(|_| Gen::new()).collect();
    let done = AtomicUsize::new(0);
    let start = Barrier::new(CREATE_WRITERS + READERS);
    let pace = Pace::new();
    let (writers_out, obs) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..CREATE_WRITERS)
            .map(|w| {
                let (t, ctr, done, start, pace) = (&t, &gens[w], &done, &start, &pace);
                s.spawn(move || {
                    let n = create_names(w);
                    start.wait();
                    let mut hist = vec![vec![None; 3]];
                    let mut tags = HashMap::new();
                    for i in 0..steps {
                        pace.wait(i);
                        let mut st = hist.last().unwrap().clone();
                        ctr.begin(i);
                        match i % 6 {
                            // Created, then written: a reader may open it empty.
                            0 => st[0] = Some(make_file(t, &n[0])),
                            1 => {
                                let tag = (w * steps + i) as u64;
                                let ino = make_link(t, tag, &n[1]);
                                tags.insert(tag, ino);
                                st[1] = Some(ino);
                            }
                            2 => {
                                t.mkdir(n[2].as_bytes(), 0o755).unwrap();
                                st[2] = Some(t.stat(n[2].as_bytes()).unwrap().ino);
                            }
                            3 => {
                                t.unlink(n[0].as_bytes()).unwrap();
                                st[0] = None;
                            }
                            4 => {
                                t.unlink(n[1].as_bytes()).unwrap();
                                st[1] = None;
                            }
                            _ => {
                                t.rmdir(n[2].as_bytes()).unwrap();
                                st[2] = None;
                            }
                        }
                        hist.push(st);
                        ctr.end(i);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                    (hist, tags)
                })
            })
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                let (t, gens, done, start, pace) = (&t, &gens, &done, &start, &pace);
                s.spawn(move || {
                    let names: Vec<Vec<String>> = (0..CREATE_WRITERS).map(create_names).collect();
                    start.wait();
                    let mut obs: Vec<Vec<Obs>> = (0..CREATE_WRITERS).map(|_| Vec::new()).collect();
                    let mut wc = WalkCount::start();
                    let mut round = r;
                    loop {
                        let last = done.load(Ordering::SeqCst) == CREATE_WRITERS;
                        for w in 0..CREATE_WRITERS {
                            let (n, g, o) = (&names[w], &gens[w], &mut obs[w]);
                            if round % 2 == 0 {
                                observe(o, g, 0, false, || stat_ino(t, DirFd::Cwd, &n[0]));
                                observe(o, g, 1, false, || lstat_ino(t, &n[1]));
                                observe(o, g, 2, false, || stat_ino(t, DirFd::Cwd, &format!("{}/", n[2])));
                            } else {
                                observe(o, g, 0, false, || open_read_ino(t, &n[0], true));
                                observe(o, g, 1, true, || readlink_tag(t, &n[1]));
                                observe(o, g, 2, false, || {
                                    let fd = t.open(n[2].as_bytes(), OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0)?;
                                    let ino = t.fstat(fd).unwrap().ino;
                                    t.close(fd).unwrap();
                                    Ok(ino)
                                });
                            }
                            if round % 2 == 0 {
                                wc.walks += 3;
                            } else {
                                wc.walks += 1;
                                wc.opens += 2;
                            }
                        }
                        round += 1;
                        pace.round();
                        if last {
                            break;
                        }
                    }
                    (obs, wc.finish(lockless))
                })
            })
            .collect();
        let w: Vec<_> = writers.into_iter().map(|h| h.join().unwrap()).collect();
        let o: Vec<_> = readers.into_iter().map(|h| h.join().unwrap()).collect();
        (w, o)
    });
    let mut total = (0, 0, 0);
    for (per_writer, (free, locked, _)) in &obs {
        for (w, o) in per_writer.iter().enumerate() {
            let (hist, tags) = &writers_out[w];
            judge("unlink/create race", &create_names(w), hist, tags, o);
            total.0 += o.len();
        }
        total.1 += free;
        total.2 += locked;
    }
    eprintln!(
        "unlink/create race (lockless walk {lockless}): {} observations; walks lockless {}, locked {}",
        total.0, total.1, total.2
    );
}

/// Names unlinked and recreated (file, symlink, directory) while readers stat, open,
/// read and readlink them: ENOENT or one of the objects the name held during the call.
#[test]
fn unlink_create_race_lockless_walk() {
    unlink_create_race(true);
}

/// The same race with every walk in the locked tier.
#[test]
fn unlink_create_race_locked_walk() {
    unlink_create_race(false);
}

// ---------------------------------------------------------------------------------------
// Directory rename with deep paths, `..`, dirfd-relative walks and getcwd.
// ---------------------------------------------------------------------------------------

/// Watched names of the directory race. `fd:` names are relative to a descriptor of
/// `c`, `cwd:` names relative to a reader whose working directory is `d`.
const DIR_NAMES: [&str; 12] = [
    "/t/a/b/c/d/file",
    "/t/x/b/c/d/file",
    "/t/a/b/c/d/../../c/d/file",
    "/t/a/b/c/../../b/c/d/file",
    "fd:d/file",
    "fd:../..",
    "fd:../../b/c/d/file",
    "cwd:file",
    "cwd:../../../..",
    "getcwd",
    "/t/a/b",
    "/t/x/b",
];

/// getcwd answers as identities.
const CWD_VIA_A: u64 = 1;
const CWD_VIA_X: u64 = 2;

fn dir_rename_race(lockless: bool) {
    let vfs = new_vfs(lockless);
    let t = vfs.root_task();
    for d in ["/t", "/t/a", "/t/a/b", "/t/a/b/c", "/t/a/b/c/d", "/t/x"] {
        t.mkdir(d.as_bytes(), 0o755).unwrap();
    }
    let file = make_file(&t, "/t/a/b/c/d/file");
    let ino = |p: &str| t.stat(p.as_bytes()).unwrap().ino;
    let (ti, ai, xi, bi) = (ino("/t"), ino("/t/a"), ino("/t/x"), ino("/t/a/b"));
    let fd_c = t.open(b"/t/a/b/c", OpenFlags::PATH | OpenFlags::DIRECTORY, 0).unwrap();
    // What each watched name holds with b under a (`even`) and under x.
    let state = |under_a: bool| -> Vec<Option<u64>> {
        let (via_a, via_x) = if under_a { (Some(file), None) } else { (None, Some(file)) };
        vec![
            via_a,
            via_x,
            via_a,
            via_a,
            Some(file),
            Some(if under_a { ai } else { xi }),
            Some(file),
            Some(file),
            Some(ti),
            Some(if under_a { CWD_VIA_A } else { CWD_VIA_X }),
            if under_a { Some(bi) } else { None },
            if under_a { None } else { Some(bi) },
        ]
    };
    let steps = iters(20_000);
    let hist: Vec<Vec<Option<u64>>> = (0..=steps).map(|k| state(k % 2 == 0)).collect();
    let ctr = Gen::new();
    let done = AtomicUsize::new(0);
    let start = Barrier::new(1 + READERS);
    let pace = Pace::new();
    let results = std::thread::scope(|s| {
        let (t, ctr, done, start, pace) = (&t, &ctr, &done, &start, &pace);
        let writer = s.spawn(move || {
            start.wait();
            for i in 0..steps {
                pace.wait(i);
                ctr.begin(i);
                let (from, to): (&[u8], &[u8]) =
                    if i % 2 == 0 { (b"/t/a/b", b"/t/x/b") } else { (b"/t/x/b", b"/t/a/b") };
                t.rename(from, to).unwrap();
                ctr.end(i);
            }
            done.fetch_add(1, Ordering::SeqCst);
        });
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let rt = t.fork();
                s.spawn(move || {
                    // Its own working directory, set before the race (b under a).
                    rt.chdir(b"/t/a/b/c/d").unwrap();
                    start.wait();
                    let mut o = Vec::new();
                    let mut wc = WalkCount::start();
                    loop {
                        let last = done.load(Ordering::SeqCst) == 1;
                        for (i, name) in DIR_NAMES.iter().enumerate() {
                            if *name == "getcwd" {
                                observe(&mut o, ctr, i, false, || {
                                    let p = rt.getcwd()?;
                                    Ok(match &p[..] {
                                        b"/t/a/b/c/d" => CWD_VIA_A,
                                        b"/t/x/b/c/d" => CWD_VIA_X,
                                        other => panic!(
                                            "getcwd returned {:?}, a path that never existed",
                                            String::from_utf8_lossy(other)
                                        ),
                                    })
                                });
                                continue;
                            }
                            let (dirfd, path) = if let Some(p) = name.strip_prefix("fd:") {
                                (DirFd::Fd(fd_c), p)
                            } else if let Some(p) = name.strip_prefix("cwd:") {
                                (DirFd::Cwd, p)
                            } else {
                                (DirFd::Cwd, *name)
                            };
                            observe(&mut o, ctr, i, false, || stat_ino(&rt, dirfd, path));
                            wc.walks += 1;
                        }
                        pace.round();
                        if last {
                            break;
                        }
                    }
                    (o, wc.finish(lockless))
                })
            })
            .collect();
        writer.join().unwrap();
        readers.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    let names: Vec<String> = DIR_NAMES.iter().map(|s| s.to_string()).collect();
    let mut total = (0, 0, 0, 0);
    for (o, (free, locked, retries)) in &results {
        judge("directory rename race", &names, &hist, &HashMap::new(), o);
        total.0 += o.len();
        total.1 += free;
        total.2 += locked;
        total.3 += retries;
    }
    eprintln!(
        "directory rename race (lockless walk {lockless}): {} observations; walks lockless {}, locked {}, retried {}",
        total.0, total.1, total.2, total.3
    );
    t.close(fd_c).unwrap();
}

/// `a/b` renamed to `x/b` and back while readers resolve deep paths, paths through `..`,
/// paths relative to a descriptor and a working directory inside the moving tree, and
/// getcwd: every answer is one the tree gave before or after a rename.
#[test]
fn dir_rename_race_lockless_walk() {
    dir_rename_race(true);
}

/// The same race with every walk in the locked tier.
#[test]
fn dir_rename_race_locked_walk() {
    dir_rename_race(false);
}

// ---------------------------------------------------------------------------------------
// Descriptor table race.
// ---------------------------------------------------------------------------------------

/// Threads open, dup, dup2 and close on one task while others fstat, pread and walk
/// relative to the same descriptor numbers: each answer is EBADF (or the errno of the
/// file type: EISDIR, ENOTDIR) or the correct data of some file that was open there. A
/// fresh task per round makes the table grow (and retire its old array) under readers.
#[test]
fn fd_table_race() {
    const FILES: usize = 4;
    const OPENERS: usize = 2;
    const TOP: i32 = 200;
    let vfs = new_vfs(true);
    let t = vfs.root_task();
    t.mkdir(b"/f", 0o755).unwrap();
    let mut file_inos = Vec::new();
    let mut inner_inos = Vec::new();
    for k in 0..FILES {
        file_inos.push(make_file(&t, &format!("/f/file{k}")));
        t.mkdir(format!("/f/dir{k}").as_bytes(), 0o755).unwrap();
        inner_inos.push(make_file(&t, &format!("/f/dir{k}/inner")));
    }
    let dir_inos: Vec<u64> = (0..FILES).map(|k| t.stat(format!("/f/dir{k}").as_bytes()).unwrap().ino).collect();
    let rounds = iters(20_000).div_ceil(150);
    let per_round = 150;
    for _ in 0..rounds {
        let task = vfs.root_task();
        let done = AtomicUsize::new(0);
        let start = Barrier::new(OPENERS + READERS);
        let pace = Pace::new();
        std::thread::scope(|s| {
            for j in 0..OPENERS {
                let (task, done, start, pace) = (&task, &done, &start, &pace);
                s.spawn(move || {
                    start.wait();
                    for i in 0..per_round {
                        pace.wait(i);
                        let k = (i + j) % FILES;
                        let fd = task.open(format!("/f/file{k}").as_bytes(), OpenFlags::RDONLY, 0).unwrap();
                        let dup = task.dup(fd).unwrap();
                        // Replaces what was at the high descriptor (retiring it under readers);
                        // the first one grows the table.
                        let high = Fd(TOP + j as i32);
                        assert_eq!(task.dup2(fd, high).unwrap(), high);
                        let dir = task
                            .open(format!("/f/dir{k}").as_bytes(), OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0)
                            .unwrap();
                        if i % 2 == 0 {
                            assert_eq!(task.dup2(dir, high).unwrap(), high);
                        }
                        task.close(fd).unwrap();
                        task.close(dup).unwrap();
                        task.close(dir).unwrap();
                    }
                    task.close(Fd(TOP + j as i32)).unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                });
            }
            for _ in 0..READERS {
                let (task, done, file_inos, inner_inos, dir_inos, start) =
                    (&task, &done, &file_inos, &inner_inos, &dir_inos, &start);
                let pace = &pace;
                s.spawn(move || {
                    start.wait();
                    let mut buf = [0u8; 128];
                    loop {
                        let last = done.load(Ordering::SeqCst) == OPENERS;
                        for n in (0..8).chain(TOP..TOP + OPENERS as i32) {
                            let fd = Fd(n);
                            match task.fstat(fd) {
                                Ok(st) => assert!(
                                    file_inos.contains(&st.ino) || dir_inos.contains(&st.ino),
                                    "fstat({n}) gave inode {}",
                                    st.ino
                                ),
                                Err(e) => assert_eq!(e, Errno::EBADF, "fstat({n})"),
                            }
                            match task.pread(fd, &mut buf, 0) {
                                Ok(len) => {
                                    let data = &buf[..len];
                                    assert!(
                                        file_inos.iter().any(|&i| content_of(i) == data),
                                        "pread({n}) read {:?}",
                                        String::from_utf8_lossy(data)
                                    );
                                }
                                Err(e) => assert!(e == Errno::EBADF || e == Errno::EISDIR, "pread({n}): {e:?}"),
                            }
                            match task.fstatat(DirFd::Fd(fd), b"inner", AtFlags::empty()) {
                                Ok(st) => {
                                    assert!(inner_inos.contains(&st.ino), "fstatat({n}, inner) gave inode {}", st.ino)
                                }
                                Err(e) => {
                                    assert!(e == Errno::EBADF || e == Errno::ENOTDIR, "fstatat({n}, inner): {e:?}")
                                }
                            }
                            if let Ok(f) = task.file(fd) {
                                let ino = f.inode().ino().0;
                                assert!(file_inos.contains(&ino) || dir_inos.contains(&ino));
                            }
                        }
                        pace.round();
                        if last {
                            break;
                        }
                    }
                });
            }
        });
        // Everything the openers opened is closed again.
        for n in (0..8).chain(TOP..TOP + OPENERS as i32) {
            assert_eq!(task.fstat(Fd(n)), Err(Errno::EBADF), "fd {n} left open");
        }
    }
    // The files are intact: every open file description was released exactly once.
    for (k, &ino) in file_inos.iter().enumerate() {
        let fd = t.open(format!("/f/file{k}").as_bytes(), OpenFlags::RDONLY, 0).unwrap();
        let mut buf = [0u8; 128];
        let n = t.pread(fd, &mut buf, 0).unwrap();
        assert_eq!(&buf[..n], &content_of(ino)[..]);
        t.close(fd).unwrap();
    }
}

/// A directory's map grows (moving its entries to a larger array) while lockless walks
/// look up names that exist all along: none of them is ever reported missing (a miss that
/// overlapped a grow is looked up again under the lock), on memfs, whose misses are
/// otherwise answered without asking anyone.
#[test]
fn names_found_while_the_map_grows() {
    let vfs = new_vfs(true);
    let t = vfs.root_task();
    let n = iters(20000).max(2000);
    for round in 0..4 {
        let dir = format!("/g{round}");
        t.mkdir(dir.as_bytes(), 0o755).unwrap();
        let keep: Vec<String> = (0..8).map(|i| format!("{dir}/keep{i}")).collect();
        for k in &keep {
            t.mknodat(DirFd::Cwd, k.as_bytes(), 0o644, 0).unwrap();
        }
        let done = std::sync::atomic::AtomicBool::new(false);
        // The writer starts once the reader looks, so that the two overlap also on a
        // machine busy enough to leave the reader unscheduled for the whole fill.
        let looking = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = s.spawn(|| {
                let r = vfs.root_task();
                let mut looks = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    for k in &keep {
                        assert!(r.stat(k.as_bytes()).is_ok(), "{k} missed while its directory grew");
                        looks += 1;
                    }
                    looking.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                looks
            });
            while !looking.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::yield_now();
            }
            let w = vfs.root_task();
            for i in 0..n {
                w.mknodat(DirFd::Cwd, format!("{dir}/new{i}").as_bytes(), 0o644, 0).unwrap();
            }
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            assert!(reader.join().unwrap() > 0);
        });
    }
}

/// A directory listed while another thread creates, unlinks and renames names in it (and
/// out of it): the readdir order holds its children by pointer, kept alive by the
/// directory's table (`dentry::Ordered`). Every listing, read a few entries a call, shows
/// each name that never changes exactly once, and nothing but those and the writer's
/// names. Run under valgrind by the test command, where a child read after it was freed
/// would be an error.
#[test]
fn listings_while_names_change() {
    let vfs = new_vfs(true);
    let t = vfs.root_task();
    let n = iters(20000);
    t.mkdir(b"/l", 0o755).unwrap();
    t.mkdir(b"/away", 0o755).unwrap();
    let keep: Vec<String> = (0..6).map(|i| format!("keep{i}")).collect();
    for k in &keep {
        t.mknodat(DirFd::Cwd, format!("/l/{k}").as_bytes(), 0o644, 0).unwrap();
    }
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let r = vfs.root_task();
            let mut listings = 0u64;
            while !done.load(Ordering::Relaxed) {
                let fd = r.open(b"/l", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).unwrap();
                let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
                loop {
                    let batch = r.getdents(fd, 3).unwrap();
                    if batch.is_empty() {
                        break;
                    }
                    for e in batch {
                        *seen.entry(e.name).or_default() += 1;
                    }
                }
                r.close(fd).unwrap();
                for k in &keep {
                    assert_eq!(seen.get(k.as_bytes()), Some(&1), "{k} in a listing: {seen:?}");
                }
                for name in seen.keys() {
                    let ok = [&b"."[..], b"..", b"new", b"moved", b"keep"].iter().any(|p| name.starts_with(p));
                    assert!(ok, "a name no one made: {:?}", String::from_utf8_lossy(name));
                }
                listings += 1;
            }
            listings
        });
        let w = vfs.root_task();
        for i in 0..n {
            let new = format!("/l/new{i}");
            w.mknodat(DirFd::Cwd, new.as_bytes(), 0o644, 0).unwrap();
            match i % 3 {
                0 => w.unlink(new.as_bytes()).unwrap(),
                1 => w.rename(new.as_bytes(), format!("/l/moved{i}").as_bytes()).unwrap(),
                _ => w.rename(new.as_bytes(), format!("/away/new{i}").as_bytes()).unwrap(),
            }
            if i % 3 == 1 && i >= 4 {
                w.unlink(format!("/l/moved{}", i - 3).as_bytes()).unwrap();
            }
        }
        done.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    });
}

/// Two threads, each with its own `O_APPEND` open of one file, append fixed-size records:
/// every record lands whole, once, at the end (Linux holds the inode lock across finding
/// the end and writing there). On memfs and on hostfs.
fn appends_from_two_descriptions(vfs: &Vfs, path: &str) {
    const REC: usize = 8;
    let per = iters(100_000);
    let t = vfs.root_task();
    let fd = t.open(path.as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).unwrap();
    t.close(fd).unwrap();
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        for w in 0..2u32 {
            let (t, barrier) = (vfs.root_task(), &barrier);
            s.spawn(move || {
                let fd = t.open(path.as_bytes(), OpenFlags::WRONLY | OpenFlags::APPEND, 0).unwrap();
                barrier.wait();
                for i in 0..per as u32 {
                    let mut rec = [0u8; REC];
                    rec[..4].copy_from_slice(&w.to_le_bytes());
                    rec[4..].copy_from_slice(&i.to_le_bytes());
                    assert_eq!(t.write(fd, &rec), Ok(REC));
                }
                t.close(fd).unwrap();
            });
        }
    });
    let st = t.stat(path.as_bytes()).unwrap();
    assert_eq!(st.size as usize, 2 * per * REC, "records were overwritten");
    let fd = t.open(path.as_bytes(), OpenFlags::RDONLY, 0).unwrap();
    let mut data = vec![0u8; 2 * per * REC];
    assert_eq!(t.read(fd, &mut data), Ok(data.len()));
    t.close(fd).unwrap();
    // Each writer's records appear in its own order, each exactly once.
    let mut next = [0u32; 2];
    for rec in data.chunks(REC) {
        let w = u32::from_le_bytes(rec[..4].try_into().unwrap()) as usize;
        let i = u32::from_le_bytes(rec[4..].try_into().unwrap());
        assert!(w < 2, "torn record {rec:?}");
        assert_eq!(i, next[w], "writer {w}: record out of place");
        next[w] += 1;
    }
    assert_eq!(next, [per as u32; 2]);
}

#[test]
fn appends_from_two_descriptions_memfs() {
    appends_from_two_descriptions(&Vfs::default(), "/log");
}

#[test]
fn appends_from_two_descriptions_hostfs() {
    let dir = tempfile::tempdir().unwrap();
    let fs = uvfs::fs::hostfs::HostFs::new(dir.path()).unwrap();
    let vfs = Vfs::with_root(VfsConfig::default(), Box::new(fs)).unwrap();
    appends_from_two_descriptions(&vfs, "/log");
}
