//! The cases: one loop per seed measurement, run on any [`Backend`].
//!
//! | case | seed | loop | fast paths switched off |
//! |---|---|---|---|
//! | `openneg` | 003 | `open("a/b/c/d/e/missing")` → ENOENT, 1 thread | `FAILED_OPEN`, `LOCKLESS_WALK`, `PATH_CACHE` (a miss is not cached: what its probe costs) |
//! | `readlink1` | 002 | `readlink("link")`, 1 and N threads | `SYMLINK_CACHE` |
//! | `stat` | 001 | `stat("a/b/c/d/e/file")` as owner / non-owner, 1 thread | `LOCKLESS_WALK`, `ACL`, `PATH_CACHE` |
//! | `open1` | 001 | `open` + `close` of the same path, as owner / non-owner | `LOCKLESS_WALK`, `ACL`, `PATH_CACHE` |
//! | `stat2` | 004 | N threads `stat` the same file, N = 1..=cores | `LOCKLESS_WALK`, `PATH_CACHE` |
//! | `write1` | 000 | each thread `pwrite`s 1 byte at offset 0 of its own file | (`NOTIFY` later) |
//! | `messaging` | 000 | hackbench shape: 20 senders x 20 receivers per group, 100-byte messages through files; wall time | (`NOTIFY` later) |
//! | `fstree` | 004 | T threads scan their own D x F tree, cold caches (own runner: [`crate::fstree`]) | `INODE_HASH` (and hostfs revalidation on: `uvfs-revalidate`) |
//! | `workloads` | - | real programs on tmpfs, a host dir and `uvfs mount` (own runner: [`crate::workloads`]) | - |
//!
//! For `stat` and `open1` the directories `a b c` are 0755 and `d e` 0750, the file 0640,
//! all owned by uid 1000 / gid 1000. The owner runs as uid 1000; the non-owner as uid
//! 2000 with supplementary group 1000, so every component is granted through the group
//! class, the one that consults ACLs (lmbench's "files you don't own" case of seed 001).
//! The tree has no ACLs, as lmbench's: `uvfs-no-acl` (the inode's ACL slot loaded under
//! the inode lock from the filesystem on every check, instead of read without a lock)
//! measures what the no-ACL fast path is worth on the non-owner's checks (every directory
//! of the walk, and the file for `open1`); for the owner, whose checks the mode decides,
//! it is a control (only directories the owner does not own reach the slot).
//!
//! Hooks for later work: `Case::pending` lists switches whose general path is not wired
//! yet (reported as skipped unless asked for with `--target`), the `write1` "1 unrelated
//! watcher" variant is declared and skipped until uvfs has watches, and `fstree` is
//! run by its own runner ([`crate::fstree`]) when asked for alone.

use std::ffi::{CStr, CString};
use std::sync::Arc;
use std::time::Duration;

use uvfs::FastPaths;

use crate::backend::{Backend, Errno, WalkCounters, Who, Worker, errno_name, oflags};
use crate::harness::{self, Body, Deadlines, WorkerCtx};

/// What a case measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Unit {
    /// Operations per second, all threads together; higher is better.
    #[serde(rename = "ops/s")]
    OpsPerSec,
    /// Seconds of wall time per iteration; lower is better.
    #[serde(rename = "s")]
    Seconds,
}

impl Unit {
    /// As printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::OpsPerSec => "ops/s",
            Unit::Seconds => "s",
        }
    }

    /// Whether a larger value is an improvement.
    pub fn higher_is_better(self) -> bool {
        matches!(self, Unit::OpsPerSec)
    }
}

/// Which loop a case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Failed open of a missing file.
    OpenNeg,
    /// readlink of a symlink.
    Readlink,
    /// stat of a deep path.
    Stat,
    /// open + close of a deep path.
    OpenClose,
    /// Same-file stat with 1..N threads.
    Stat2,
    /// pwrite of one byte to a per-thread file.
    Write1,
    /// hackbench-style messaging through files.
    Messaging,
    /// Cold-cache tree scan (its own runner).
    FsTree,
    /// Real programs through `uvfs mount` (its own runner).
    Workloads,
}

/// A benchmark case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Name on the command line and in output.
    pub name: &'static str,
    /// The seed it reproduces (`shared/seeds/NNN_*`).
    pub seed: &'static str,
    /// One line: what the loop does.
    pub title: &'static str,
    /// The loop.
    pub kind: Kind,
    /// What it reports.
    pub unit: Unit,
    /// Fast paths whose `uvfs-no-*` target runs by default.
    pub switches: FastPaths,
    /// Relevant switches not wired yet: their targets are reported as skipped with this
    /// reason unless named with `--target` (the hook for later issues).
    pub pending: &'static [(FastPaths, &'static str)],
    /// Why the case cannot run at all, if it cannot.
    pub unavailable: Option<&'static str>,
}

/// Every case, in run order.
pub const CASES: &[Case] = &[
    Case {
        name: "openneg",
        seed: "003",
        title: "open of a missing file a/b/c/d/e/missing (ENOENT), 1 thread",
        kind: Kind::OpenNeg,
        unit: Unit::OpsPerSec,
        switches: FastPaths::FAILED_OPEN.union(FastPaths::LOCKLESS_WALK).union(FastPaths::PATH_CACHE),
        pending: &[],
        unavailable: None,
    },
    Case {
        name: "readlink1",
        seed: "002",
        title: "readlink of a symlink, 1 and N threads",
        kind: Kind::Readlink,
        unit: Unit::OpsPerSec,
        switches: FastPaths::SYMLINK_CACHE,
        pending: &[],
        unavailable: None,
    },
    Case {
        name: "stat",
        seed: "001",
        title: "stat a/b/c/d/e/file as owner and as non-owner (group access), 1 thread",
        kind: Kind::Stat,
        unit: Unit::OpsPerSec,
        switches: FastPaths::LOCKLESS_WALK.union(FastPaths::ACL).union(FastPaths::PATH_CACHE),
        pending: &[],
        unavailable: None,
    },
    Case {
        name: "open1",
        seed: "001",
        title: "open + close of a/b/c/d/e/file as owner and as non-owner, 1 thread",
        kind: Kind::OpenClose,
        unit: Unit::OpsPerSec,
        switches: FastPaths::LOCKLESS_WALK.union(FastPaths::ACL).union(FastPaths::PATH_CACHE),
        pending: &[],
        unavailable: None,
    },
    Case {
        name: "stat2",
        seed: "004",
        title: "N threads stat the same file a/b/c/d/e/file",
        kind: Kind::Stat2,
        unit: Unit::OpsPerSec,
        switches: FastPaths::LOCKLESS_WALK.union(FastPaths::PATH_CACHE),
        pending: &[],
        unavailable: None,
    },
    Case {
        name: "write1",
        seed: "000",
        title: "each thread pwrite()s 1 byte at offset 0 of its own file",
        kind: Kind::Write1,
        unit: Unit::OpsPerSec,
        switches: FastPaths::NOTIFY,
        pending: &[],
        unavailable: None,
    },
    Case {
        name: "messaging",
        seed: "000",
        title: "hackbench shape: groups of 20 senders x 20 receivers, 100-byte messages through files",
        kind: Kind::Messaging,
        unit: Unit::Seconds,
        switches: FastPaths::NOTIFY,
        pending: &[],
        unavailable: None,
    },
    Case {
        name: "fstree",
        seed: "004",
        title: "T threads stat their own tree of D dirs x F files, cold caches",
        kind: Kind::FsTree,
        unit: Unit::Seconds,
        switches: FastPaths::INODE_HASH,
        pending: &[],
        unavailable: Some("runs alone: uvfs bench --case fstree [--quick] [--threads T]"),
    },
    Case {
        name: "workloads",
        seed: "-",
        title: "tar, find, grep, git, make, rm and a big file on tmpfs, a host dir and `uvfs mount`",
        kind: Kind::Workloads,
        unit: Unit::Seconds,
        switches: FastPaths::empty(),
        pending: &[],
        unavailable: Some("runs alone: uvfs bench --case workloads [--quick]"),
    },
];

/// Looks a case up by name.
pub fn case(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.name == name)
}

/// Names of all cases, comma separated.
pub fn case_names() -> String {
    CASES.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
}

/// Sizes of a run that cases need.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// N: the largest thread count (readlink1/write1 run 1 and N; stat2 up to N).
    pub threads: usize,
    /// Whether stat2 uses a short series (1, 2, 4, ..., N) instead of every count.
    pub short_series: bool,
    /// messaging: number of groups of 20 + 20 threads.
    pub msg_groups: usize,
    /// messaging: messages each sender sends to each receiver.
    pub msg_loops: usize,
}

/// One row set of a case: a variant at one thread count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Variant label (owner / non-owner, watchers), if the case has variants.
    pub variant: Option<&'static str>,
    /// Who the workers are.
    pub who: Who,
    /// Worker threads.
    pub threads: usize,
    /// Why this group cannot run on any target, if it cannot.
    pub skip: Option<&'static str>,
}

/// Owner of the `stat`/`open1` tree.
pub const OWNER: (u32, u32) = (1000, 1000);
/// The non-owner: uid 2000, gid 2000, supplementary group 1000.
pub const NON_OWNER: (u32, u32, u32) = (2000, 2000, 1000);

fn owner() -> Who {
    Who::User { uid: OWNER.0, gid: OWNER.1, groups: vec![] }
}

fn non_owner() -> Who {
    Who::User { uid: NON_OWNER.0, gid: NON_OWNER.1, groups: vec![NON_OWNER.2] }
}

/// Thread counts of a 1..=N scaling series.
pub fn thread_series(max: usize, short: bool) -> Vec<usize> {
    let max = max.max(1);
    if !short {
        return (1..=max).collect();
    }
    let mut v: Vec<usize> =
        std::iter::successors(Some(1usize), |&t| t.checked_mul(2)).take_while(|&t| t < max).collect();
    v.push(max);
    v
}

fn one_and(n: usize) -> Vec<usize> {
    if n > 1 { vec![1, n] } else { vec![1] }
}

/// The groups a case runs.
pub fn groups(case: &Case, sizes: &Sizes) -> Vec<Group> {
    let g = |variant, who, threads| Group { variant, who, threads, skip: None };
    match case.kind {
        Kind::OpenNeg => vec![g(None, Who::Admin, 1)],
        Kind::Readlink => one_and(sizes.threads).into_iter().map(|t| g(None, Who::Admin, t)).collect(),
        Kind::Stat | Kind::OpenClose => {
            vec![g(Some("owner"), owner(), 1), g(Some("non-owner"), non_owner(), 1)]
        }
        Kind::Stat2 => {
            thread_series(sizes.threads, sizes.short_series).into_iter().map(|t| g(None, Who::Admin, t)).collect()
        }
        Kind::Write1 => {
            let mut v: Vec<Group> =
                one_and(sizes.threads).into_iter().map(|t| g(Some("0 watchers"), Who::Admin, t)).collect();
            v.push(g(Some(WATCHED), Who::Admin, sizes.threads));
            v
        }
        Kind::Messaging => {
            let n = sizes.msg_groups * 2 * MSG_FANOUT;
            vec![g(Some("0 watchers"), Who::Admin, n), g(Some(WATCHED), Who::Admin, n)]
        }
        Kind::FsTree | Kind::Workloads => vec![],
    }
}

/// The seed-000 variant: an inotify watch on a directory the workload never touches, so
/// the filesystem has a watched object but no event of the loop concerns it.
pub const WATCHED: &str = "1 unrelated watcher";

/// Senders (and receivers) per messaging group, as hackbench.
pub const MSG_FANOUT: usize = 20;
/// Bytes per message, as hackbench.
pub const MSG_SIZE: usize = 100;

/// What a measured run produced.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Every sample (ops/s or seconds), warm-up first.
    pub raw: Vec<f64>,
    /// Total operations over the whole run (ops/s cases).
    pub ops: u64,
    /// uvfs counters summed over workers (uvfs targets).
    pub counters: Option<WalkCounters>,
}

/// How long and how often to measure.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Sample interval of ops/s cases.
    pub interval: Duration,
    /// Samples (or iterations) in total, warm-up included.
    pub count: usize,
}

/// What each worker reports.
#[derive(Clone, Copy, Debug, Default)]
struct Report {
    ops: u64,
    counters: Option<WalkCounters>,
}

fn c(s: &str) -> CString {
    CString::new(s).expect("no NUL in bench paths")
}

fn err(what: &str, path: &CStr, e: Errno) -> String {
    format!("{what} {}: {}", path.to_string_lossy(), errno_name(e))
}

/// The deep directory chain of the path cases.
const DIRS: [&str; 5] = ["a", "a/b", "a/b/c", "a/b/c/d", "a/b/c/d/e"];
const FILE: &str = "a/b/c/d/e/file";
const MISSING: &str = "a/b/c/d/e/missing";
const LINK: &str = "link";
/// A typical symlink body (like /initrd.img -> boot/initrd.img-<version>).
const LINK_TARGET: &str = "boot/initrd.img-6.12.0-uvfs-bench";

/// Runs `f` with an admin worker on a fresh thread (the kernel worker changes its
/// thread's cwd, so setup never runs on the main thread).
fn on_admin_thread<B: Backend>(
    backend: &Arc<B>,
    f: impl FnOnce(&B::Worker) -> Result<(), String> + Send,
) -> Result<(), String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let w = backend.worker(&Who::Admin)?;
            f(&w)
        })
        .join()
        .unwrap_or_else(|_| Err("setup panicked".to_string()))
    })
}

/// Builds the tree a case needs.
fn setup<B: Backend>(case: &Case, backend: &Arc<B>) -> Result<(), String> {
    let kind = case.kind;
    on_admin_thread(backend, move |w| {
        let deep = |w: &B::Worker, modes: [u32; 5], owner: Option<(u32, u32)>| {
            for (d, mode) in DIRS.iter().zip(modes) {
                let p = c(d);
                w.mkdir(&p, mode).map_err(|e| err("mkdir", &p, e))?;
            }
            let f = c(FILE);
            let fd =
                w.open(&f, oflags::WRONLY | oflags::CREAT | oflags::TRUNC, 0o640).map_err(|e| err("create", &f, e))?;
            w.pwrite(fd, b"uvfs-bench\n", 0).map_err(|e| err("write", &f, e))?;
            w.close(fd).map_err(|e| err("close", &f, e))?;
            w.chmod(&f, 0o640).map_err(|e| err("chmod", &f, e))?;
            if let Some((uid, gid)) = owner {
                for p in DIRS.iter().chain([&FILE]) {
                    let p = c(p);
                    w.chown(&p, uid, gid).map_err(|e| err("chown", &p, e))?;
                }
            }
            Ok::<(), String>(())
        };
        match kind {
            Kind::OpenNeg | Kind::Stat2 => deep(w, [0o755; 5], None),
            Kind::Stat | Kind::OpenClose => deep(w, [0o755, 0o755, 0o755, 0o750, 0o750], Some(OWNER)),
            Kind::Readlink => {
                let (t, l) = (c(LINK_TARGET), c(LINK));
                w.symlink(&t, &l).map_err(|e| err("symlink", &l, e))
            }
            Kind::Write1 | Kind::Messaging | Kind::FsTree | Kind::Workloads => Ok(()),
        }
    })
}

/// Makes `unwatched/` and watches it from an admin thread; the watch outlives the thread.
fn unrelated_watch<B: Backend>(backend: &Arc<B>) -> Result<<B::Worker as Worker>::Watch, String> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let w = backend.worker(&Who::Admin)?;
            let p = c("unwatched-by-the-loop");
            match w.mkdir(&p, 0o755) {
                Ok(()) | Err(libc::EEXIST) => {}
                Err(e) => return Err(err("mkdir", &p, e)),
            }
            w.watch(&p).map_err(|e| err("inotify_add_watch", &p, e))
        })
        .join()
        .unwrap_or_else(|_| Err("watch setup panicked".to_string()))
    })
}

/// A worker body for an ops/s case: set up (`prep`), wait for go, loop `op` until
/// stopped, release what `prep` made (`done`, also when the loop failed), report ops
/// and uvfs counters. A descriptor `prep` opens must be closed by `done`: a FUSE mount
/// with files still open on it cannot be unmounted.
fn looping<B, S, P, O, D>(backend: Arc<B>, who: Who, prep: P, op: O, done: D) -> Body<Report>
where
    B: Backend,
    P: FnOnce(&B::Worker, usize) -> Result<S, String> + Send + 'static,
    O: Fn(&B::Worker, &mut S) -> Result<(), String> + Send + 'static,
    D: FnOnce(&B::Worker, S) -> Result<(), String> + Send + 'static,
{
    Box::new(move |ctx: &WorkerCtx| {
        let w = backend.worker(&who)?;
        let mut state = prep(&w, ctx.index())?;
        if !ctx.ready() {
            done(&w, state)?;
            return Ok(Report::default());
        }
        let before = w.counters();
        let counter = ctx.counter();
        let mut looped = Ok(());
        while !ctx.stopped() {
            looped = op(&w, &mut state);
            if looped.is_err() {
                break;
            }
            counter.bump();
        }
        let released = done(&w, state);
        looped?;
        released?;
        let counters = match (before, w.counters()) {
            (Some(b), Some(a)) => Some(a.since(b)),
            _ => None,
        };
        Ok(Report { ops: counter.get(), counters })
    })
}

/// `done` for states that hold nothing to release.
fn nothing<W, S>(_: &W, _: S) -> Result<(), String> {
    Ok(())
}

fn expect_ok<T>(r: Result<T, Errno>, what: &str, path: &CStr) -> Result<T, String> {
    r.map_err(|e| err(what, path, e))
}

fn bodies<B: Backend>(case: &Case, group: &Group, backend: &Arc<B>) -> Vec<Body<Report>> {
    let mk = |_: usize| -> Body<Report> {
        let b = backend.clone();
        let who = group.who.clone();
        match case.kind {
            Kind::OpenNeg => looping(
                b,
                who,
                |_, _| Ok(c(MISSING)),
                |w, p| match w.open(p, oflags::RDONLY, 0) {
                    Err(libc::ENOENT) => Ok(()),
                    Err(e) => Err(format!("open {}: expected ENOENT, got {}", p.to_string_lossy(), errno_name(e))),
                    Ok(fd) => {
                        let _ = w.close(fd);
                        Err(format!("open {}: expected ENOENT, but it opened", p.to_string_lossy()))
                    }
                },
                nothing,
            ),
            Kind::Readlink => looping(
                b,
                who,
                |_, _| Ok((c(LINK), [0u8; 1024])),
                |w, (p, buf)| {
                    let n = expect_ok(w.readlink(p, buf), "readlink", p)?;
                    if n != LINK_TARGET.len() {
                        return Err(format!("readlink {}: {n} bytes, expected {}", LINK, LINK_TARGET.len()));
                    }
                    Ok(())
                },
                nothing,
            ),
            Kind::Stat | Kind::Stat2 => {
                looping(b, who, |_, _| Ok(c(FILE)), |w, p| expect_ok(w.stat(p), "stat", p), nothing)
            }
            Kind::OpenClose => looping(
                b,
                who,
                |_, _| Ok(c(FILE)),
                |w, p| {
                    let fd = expect_ok(w.open(p, oflags::RDONLY, 0), "open", p)?;
                    expect_ok(w.close(fd), "close", p)
                },
                nothing,
            ),
            Kind::Write1 => looping(
                b,
                who,
                |w, i| {
                    let p = c(&format!("w1.{i}"));
                    let fd = w
                        .open(&p, oflags::RDWR | oflags::CREAT | oflags::TRUNC, 0o644)
                        .map_err(|e| err("create", &p, e))?;
                    Ok((p, fd))
                },
                |w, (p, fd)| match w.pwrite(*fd, b"x", 0) {
                    Ok(1) => Ok(()),
                    Ok(n) => Err(format!("pwrite {}: wrote {n} bytes, expected 1", p.to_string_lossy())),
                    Err(e) => Err(err("pwrite", p, e)),
                },
                |w, (p, fd)| w.close(fd).map_err(|e| err("close", &p, e)),
            ),
            Kind::Messaging | Kind::FsTree | Kind::Workloads => unreachable!("not a looping case"),
        }
    };
    (0..group.threads).map(mk).collect()
}

/// Runs one group of a case on one backend.
pub fn run<B: Backend>(
    case: &Case,
    group: &Group,
    backend: Arc<B>,
    timing: Timing,
    sizes: &Sizes,
) -> Result<Measured, String> {
    if let Some(why) = backend.cannot_be(&group.who) {
        return Err(why);
    }
    setup(case, &backend)?;
    // Held for the whole run, dropped (unwatched) at the end.
    let _watch = if group.variant == Some(WATCHED) { Some(unrelated_watch(&backend)?) } else { None };
    match case.kind {
        Kind::Messaging => messaging(&backend, sizes, timing.count),
        Kind::FsTree | Kind::Workloads => Err(case.unavailable.unwrap_or("not available").to_string()),
        _ => {
            let t = harness::run_throughput(
                bodies(case, group, &backend),
                timing.interval,
                timing.count,
                Deadlines::default(),
            )?;
            let ops = t.reports.iter().map(|r| r.ops).sum();
            let counters = t.reports.iter().filter_map(|r| r.counters).reduce(WalkCounters::plus);
            Ok(Measured { raw: t.raw, ops, counters })
        }
    }
}

fn msg_path(g: usize, s: usize, r: usize) -> CString {
    c(&format!("m{g}.{s}.{r}"))
}

/// The message sender `s` sends in round `l` (to any receiver): round, sender, filler.
fn message(l: usize, s: usize) -> [u8; MSG_SIZE] {
    let mut m = [b'm'; MSG_SIZE];
    m[0] = l as u8;
    m[1] = s as u8;
    m
}

/// hackbench through files: per group, sender s and receiver r share file m<g>.<s>.<r>;
/// each sender pwrite()s `loops` messages to each receiver (message l at offset 100·l),
/// each receiver pread()s them in the same order, polling (with a yield) until each
/// message has arrived whole. One sample is the wall time from "go" until every receiver
/// has all its messages; the files are truncated before each iteration.
fn messaging<B: Backend>(backend: &Arc<B>, sizes: &Sizes, iterations: usize) -> Result<Measured, String> {
    let (groups, loops) = (sizes.msg_groups, sizes.msg_loops);
    let mut raw = Vec::with_capacity(iterations);
    let mut counters: Option<WalkCounters> = None;
    // Generous: a pathological target fails instead of hanging the benchmark.
    let limit = Duration::from_secs(120);
    for _ in 0..iterations {
        on_admin_thread(backend, |w| {
            for g in 0..groups {
                for s in 0..MSG_FANOUT {
                    for r in 0..MSG_FANOUT {
                        let p = msg_path(g, s, r);
                        let fd = w
                            .open(&p, oflags::WRONLY | oflags::CREAT | oflags::TRUNC, 0o644)
                            .map_err(|e| err("create", &p, e))?;
                        w.close(fd).map_err(|e| err("close", &p, e))?;
                    }
                }
            }
            Ok(())
        })?;
        let mut bodies: Vec<Body<Report>> = Vec::with_capacity(groups * 2 * MSG_FANOUT);
        for g in 0..groups {
            for me in 0..MSG_FANOUT {
                bodies.push(msg_worker(backend.clone(), g, me, loops, true));
                bodies.push(msg_worker(backend.clone(), g, me, loops, false));
            }
        }
        let (elapsed, reports) = harness::run_to_completion(bodies, limit, Deadlines::default())?;
        raw.push(elapsed.as_secs_f64());
        for r in reports.iter().filter_map(|r| r.counters) {
            counters = Some(counters.map_or(r, |c| c.plus(r)));
        }
    }
    let ops = (iterations * groups * MSG_FANOUT * MSG_FANOUT * loops) as u64;
    Ok(Measured { raw, ops, counters })
}

fn msg_worker<B: Backend>(backend: Arc<B>, g: usize, me: usize, loops: usize, sender: bool) -> Body<Report> {
    Box::new(move |ctx: &WorkerCtx| {
        let w = backend.worker(&Who::Admin)?;
        // Every exit closes what was opened: a FUSE mount with files still open on it
        // cannot be unmounted.
        let mut files = Vec::with_capacity(MSG_FANOUT);
        for peer in 0..MSG_FANOUT {
            let (p, flags) =
                if sender { (msg_path(g, me, peer), oflags::WRONLY) } else { (msg_path(g, peer, me), oflags::RDONLY) };
            match w.open(&p, flags, 0) {
                Ok(fd) => files.push((p, fd)),
                Err(e) => {
                    let _ = close_all(&w, files);
                    return Err(err("open", &p, e));
                }
            }
        }
        if !ctx.ready() {
            return close_all(&w, files).map(|()| Report::default());
        }
        let before = w.counters();
        let exchanged = exchange(&w, ctx, &files, me, loops, sender);
        let counters = match (before, w.counters()) {
            (Some(b), Some(a)) => Some(a.since(b)),
            _ => None,
        };
        let closed = close_all(&w, files);
        exchanged?;
        closed?;
        Ok(Report { ops: 0, counters })
    })
}

/// One messaging worker's rounds: a sender writes message `l` of every round to each
/// receiver's file, a receiver polls each sender's file until the message is whole.
fn exchange<W: Worker>(
    w: &W,
    ctx: &WorkerCtx,
    files: &[(CString, W::File)],
    me: usize,
    loops: usize,
    sender: bool,
) -> Result<(), String> {
    let mut buf = [0u8; MSG_SIZE];
    for l in 0..loops {
        let off = (l * MSG_SIZE) as u64;
        for (peer, (p, fd)) in files.iter().enumerate() {
            if sender {
                match w.pwrite(*fd, &message(l, me), off) {
                    Ok(MSG_SIZE) => {}
                    Ok(n) => return Err(format!("pwrite {}: short write of {n}", p.to_string_lossy())),
                    Err(e) => return Err(err("pwrite", p, e)),
                }
            } else {
                loop {
                    let n = w.pread(*fd, &mut buf, off).map_err(|e| err("pread", p, e))?;
                    if n == MSG_SIZE {
                        break;
                    }
                    if ctx.stopped() {
                        return Err("stopped while waiting for a message".into());
                    }
                    std::thread::yield_now();
                }
                if buf != message(l, peer) {
                    return Err(format!("pread {}: message {l} corrupted", p.to_string_lossy()));
                }
            }
        }
    }
    Ok(())
}

/// Closes every file; the first error wins.
fn close_all<W: Worker>(w: &W, files: Vec<(CString, W::File)>) -> Result<(), String> {
    let mut r = Ok(());
    for (p, fd) in files {
        if let Err(e) = w.close(fd)
            && r.is_ok()
        {
            r = Err(err("close", &p, e));
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(threads: usize, short: bool) -> Sizes {
        Sizes { threads, short_series: short, msg_groups: 2, msg_loops: 10 }
    }

    #[test]
    fn names_are_unique() {
        for (i, a) in CASES.iter().enumerate() {
            assert!(CASES[i + 1..].iter().all(|b| b.name != a.name));
            assert_eq!(case(a.name).map(|c| c.name), Some(a.name));
        }
        assert!(case("nonexistent").is_none());
    }

    #[test]
    fn thread_series_covers_one_to_max() {
        assert_eq!(thread_series(1, false), vec![1]);
        assert_eq!(thread_series(4, false), vec![1, 2, 3, 4]);
        assert_eq!(thread_series(1, true), vec![1]);
        assert_eq!(thread_series(2, true), vec![1, 2]);
        assert_eq!(thread_series(6, true), vec![1, 2, 4, 6]);
        assert_eq!(thread_series(8, true), vec![1, 2, 4, 8]);
    }

    #[test]
    fn groups_follow_the_seeds() {
        let s = sizes(4, false);
        let threads = |name| groups(case(name).unwrap(), &s).iter().map(|g| g.threads).collect::<Vec<_>>();
        assert_eq!(threads("openneg"), vec![1]);
        assert_eq!(threads("readlink1"), vec![1, 4]);
        assert_eq!(threads("stat2"), vec![1, 2, 3, 4]);
        assert_eq!(threads("messaging"), vec![2 * 2 * MSG_FANOUT, 2 * 2 * MSG_FANOUT]);
        assert!(groups(case("fstree").unwrap(), &s).is_empty());

        let st = groups(case("stat").unwrap(), &s);
        assert_eq!(st.len(), 2);
        assert_eq!(st[0].who, Who::User { uid: 1000, gid: 1000, groups: vec![] });
        assert_eq!(st[1].who, Who::User { uid: 2000, gid: 2000, groups: vec![1000] });

        let w = groups(case("write1").unwrap(), &s);
        assert_eq!(w.iter().filter(|g| g.skip.is_none()).count(), 3);
        assert!(w.iter().any(|g| g.variant == Some(WATCHED) && g.threads == 4));
        // One thread: no duplicate N = 1 group.
        assert_eq!(groups(case("readlink1").unwrap(), &sizes(1, false)).len(), 1);
    }

    /// The descriptors of this process open on `dir` or below.
    fn open_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|p| p.starts_with(dir))
            .collect()
    }

    /// Whether `dir` is a mount point, from `/proc/self/mountinfo`.
    pub(crate) fn mounted(dir: &std::path::Path) -> bool {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        info.lines().any(|l| l.split(' ').nth(4) == Some(&*dir.to_string_lossy()))
    }

    #[test]
    fn runs_on_fuse_close_their_files_and_unmount() {
        let _serial = crate::FUSE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: no preconditions.
        assert!(unsafe { libc::geteuid() } == 0, "this test mounts through FUSE: run it as root");
        assert!(std::path::Path::new("/dev/fuse").exists(), "/dev/fuse is missing (modprobe fuse)");
        let s = Sizes { threads: 2, short_series: true, msg_groups: 1, msg_loops: 2 };
        let timing = Timing { interval: Duration::from_millis(20), count: 2 };
        for name in ["write1", "open1", "messaging"] {
            let case = case(name).unwrap();
            for group in groups(case, &s).into_iter().filter(|g| g.skip.is_none()) {
                let b = Arc::new(crate::backend::KernelFs::on_fuse().unwrap());
                let mp = b.mount_point().unwrap().to_path_buf();
                run(case, &group, b.clone(), timing, &s).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(open_under(&mp), Vec::<std::path::PathBuf>::new(), "{name} left files open");
                assert!(mounted(&mp));
                drop(Arc::try_unwrap(b).expect("the workers are gone"));
                assert!(!mounted(&mp), "{name}: {} is still mounted", mp.display());
                assert!(!mp.exists());
            }
        }
    }

    #[test]
    fn messages_identify_round_and_sender() {
        let m = message(3, 7);
        assert_eq!((m[0], m[1], m.len()), (3, 7, MSG_SIZE));
        assert_ne!(message(3, 7), message(4, 7));
        assert_ne!(message(3, 7), message(3, 8));
    }
}
