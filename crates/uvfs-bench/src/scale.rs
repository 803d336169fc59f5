//! `uvfs bench --case scale`: how cost grows with the number of files: memory per empty
//! file, creates and unlinks, huge directories, deep paths. Each row runs the same work on
//! uvfs in-process (a fresh memfs instance, one thread) and on the host kernel through
//! system calls (a fresh directory of a tmpfs, `/dev/shm` by default):
//!
//! | row | work |
//! |---|---|
//! | `memory per empty file` | create `files` empty files in `dirs` directories; uvfs: the allocator's live bytes (and RSS) before and after, per file; kernel: the growth of `Slab:` in `/proc/meminfo` (dentry, inode, shmem inode), per file, which other processes' activity blurs |
//! | `create + close` | `open(O_CREAT)` + `close` of `churn_dirs` x 1000 files, after one round of the same that warmed the allocator; the median of 10 timed batches, each side's batches taken in turn with the other's (so that the two see the same machine), the paths made beforehand |
//! | `allocations per create + close` | (uvfs) the allocator's count over uvfs's timed creates |
//! | `unlink` | `unlink` of those files, timed the same way |
//! | `create in a big directory` | `open(O_CREAT)` + `close` of 10,000 more files in a directory of `big_dir` entries, in 10 timed batches: the median batch |
//! | `create in a 1000-entry directory` | the same number of creates spread over directories of 1000 entries (100 new names each), their batches taken in turn with the row above's, so that the two divide |
//! | `create: big / 1000-entry directory` | the two rows above divided: how a create's cost grows with the directory |
//! | `slowest create while filling` | the longest single `mknod` among the `big_dir` that fill that directory, in microseconds (a table that grows all at once shows here) |
//! | `stat of a random name in a big directory` | `fstatat` of names drawn at random (seeded) from that directory, the median of 10 batches |
//! | `cached stat, depth D` | `fstatat` of a file D directories deep, relative to a directory descriptor, the same path again and again (D = 1, 8, 64); uvfs answers from its path cache |
//! | `cached stat, depth 64, path cache off` | the same with `FastPaths::PATH_CACHE` off: uvfs walks component by component |
//! | `create + close, path depth 8` | `open(O_CREAT)` + `close` of `big_ops` files 8 directories deep (`deep/d/.../fN`, from the root), after one round of the same; the median of 10 timed batches, taken in turn as above; uvfs walks from the parent its path cache answers |
//! | `unlink, path depth 8` | `unlink` of those files, timed the same way |
//!
//! Times are nanoseconds per operation (one pass over a fixed amount of work, after a
//! warm-up pass for the stat rows), lower is better; memory is bytes per file. `--quick`
//! shrinks every size by 10. The memory rows need the counting allocator of the `uvfs`
//! binary ([`crate::alloc`]); elsewhere they read "n/a". Nothing here is asserted: the
//! counts that tests assert (allocations per create, bytes per empty file) are in the
//! core crate's tests.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use uvfs::{AtFlags, DirFd, FastPaths, Fd, OpenFlags, Task, Vfs, VfsConfig};

use crate::alloc;

/// Sizes of a scale run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScaleSizes {
    /// Empty files of the memory row.
    pub files: usize,
    /// Directories they are spread over.
    pub dirs: usize,
    /// Directories of 1000 files of the create/unlink rows.
    pub churn_dirs: usize,
    /// Entries of the big directory.
    pub big_dir: usize,
    /// Creates and stats measured in the big directory.
    pub big_ops: usize,
    /// Stats per depth of the deep-path rows.
    pub stats: usize,
}

impl ScaleSizes {
    /// The issue's sizes (1M files in 1000 dirs, 200 x 1000 creates, a 1M-entry directory),
    /// or a tenth of them with `quick`; `files`/`big_dir` override.
    pub fn new(quick: bool, files: Option<usize>, big_dir: Option<usize>) -> ScaleSizes {
        let d = if quick { 10 } else { 1 };
        let files = files.unwrap_or(1_000_000 / d);
        ScaleSizes {
            files,
            dirs: (files / 1000).max(1),
            churn_dirs: 200 / d,
            big_dir: big_dir.unwrap_or(1_000_000 / d),
            big_ops: 10_000 / d,
            stats: 1_000_000 / d,
        }
    }
}

/// One measured row.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Row {
    /// What was measured.
    pub measure: String,
    /// The unit of the values.
    pub unit: &'static str,
    /// uvfs in-process (`None`: not measured, see `note`).
    pub uvfs: Option<f64>,
    /// The host kernel on a tmpfs (`None`: not measured).
    pub kernel: Option<f64>,
    /// Why a value is missing, or what else to know.
    pub note: String,
}

/// The whole report (`--json`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScaleReport {
    /// The sizes used.
    pub files: usize,
    /// Directories of the memory row.
    pub dirs: usize,
    /// Directories of 1000 files of the create/unlink rows.
    pub churn_dirs: usize,
    /// Entries of the big directory.
    pub big_dir: usize,
    /// The rows.
    pub rows: Vec<Row>,
}

/// `uvfs bench --case scale`.
pub fn main(tmpfs: &Path, quick: bool, json: bool, files: Option<usize>, big_dir: Option<usize>) -> ExitCode {
    let s = ScaleSizes::new(quick, files, big_dir);
    match run(tmpfs, s, &|m| {
        if !json {
            eprintln!("scale: {m}");
        }
    }) {
        Ok(report) => {
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(t) => println!("{t}"),
                    Err(e) => {
                        eprintln!("uvfs bench: scale: {e}");
                        return ExitCode::from(1);
                    }
                }
            } else {
                print!("{}", table(&report));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("uvfs bench: scale: {e}");
            ExitCode::from(1)
        }
    }
}

/// Runs every row; `say` reports progress.
pub fn run(tmpfs: &Path, s: ScaleSizes, say: &dyn Fn(&str)) -> Result<ScaleReport, String> {
    let host = HostDir::create(tmpfs)?;
    let mut rows = Vec::new();

    say("memory per empty file");
    let (bytes, rss) = uvfs_memory(s);
    let kernel = host.memory(s)?;
    let note = if alloc::installed() {
        format!("uvfs RSS growth: {:.0} B/file; kernel: Slab growth, blurred by other processes", rss)
    } else {
        "the allocator does not count here (run the uvfs binary)".into()
    };
    rows.push(Row {
        measure: format!("memory per empty file ({} files in {} dirs)", s.files, s.dirs),
        unit: "B/file",
        uvfs: alloc::installed().then_some(bytes),
        kernel: Some(kernel),
        note,
    });

    say("create + close, unlink");
    let Churn { create, allocs, unlink, kcreate, kunlink } = churn(s, &host)?;
    rows.push(Row {
        measure: format!("create + close, {} dirs x 1000 (warm allocator)", s.churn_dirs),
        unit: "ns/op",
        uvfs: Some(create),
        kernel: Some(kcreate),
        note: String::new(),
    });
    rows.push(Row {
        measure: "allocations per create + close".into(),
        unit: "allocs/op",
        uvfs: alloc::installed().then_some(allocs),
        kernel: None,
        note: if alloc::installed() { String::new() } else { "the allocator does not count here".into() },
    });
    rows.push(Row {
        measure: "unlink".into(),
        unit: "ns/op",
        uvfs: Some(unlink),
        kernel: Some(kunlink),
        note: String::new(),
    });

    say("big directory");
    let u = uvfs_big_dir(s);
    let k = host.big_dir(s)?;
    rows.push(Row {
        measure: format!("create in a {}-entry directory", s.big_dir),
        unit: "ns/op",
        uvfs: Some(u.create),
        kernel: Some(k.create),
        note: format!("batches taken in turn with the next row's ({} ops each)", s.big_ops),
    });
    rows.push(Row {
        measure: format!("create in a {SMALL_DIR}-entry directory"),
        unit: "ns/op",
        uvfs: Some(u.create_small),
        kernel: Some(k.create_small),
        note: format!("spread over {} directories of {SMALL_DIR} entries", small_dirs(s)),
    });
    rows.push(Row {
        measure: format!("create: {}-entry / {SMALL_DIR}-entry directory", s.big_dir),
        unit: "x",
        uvfs: Some(u.create / u.create_small),
        kernel: Some(k.create / k.create_small),
        note: "the two rows above divided (same machine state)".into(),
    });
    rows.push(Row {
        measure: "slowest create while filling that directory".into(),
        unit: "us",
        uvfs: Some(u.worst),
        kernel: Some(k.worst),
        note: "one create's worst: the map's growth, fresh memory, the scheduler".into(),
    });
    rows.push(Row {
        measure: format!("stat of a random name in a {}-entry directory", s.big_dir),
        unit: "ns/op",
        uvfs: Some(u.stat),
        kernel: Some(k.stat),
        note: String::new(),
    });

    say("deep paths");
    let mut k64 = None;
    for depth in [1usize, 8, 64] {
        let u = uvfs_deep_stat(depth, s.stats, FastPaths::all());
        let k = host.deep_stat(depth, s.stats)?;
        k64 = Some(k);
        rows.push(Row {
            measure: format!("cached stat, path depth {depth}"),
            unit: "ns/op",
            uvfs: Some(u),
            kernel: Some(k),
            note: "uvfs: answered by the path cache".into(),
        });
    }
    rows.push(Row {
        measure: "cached stat, path depth 64, path cache off".into(),
        unit: "ns/op",
        uvfs: Some(uvfs_deep_stat(64, s.stats, FastPaths::all() - FastPaths::PATH_CACHE)),
        kernel: k64,
        note: "uvfs: the lockless walk, component by component".into(),
    });

    say("deep creates");
    let Churn { create: uc, unlink: uu, kcreate: kc, kunlink: ku, .. } = deep_creates(DEEP_CREATE, s.big_ops, &host)?;
    rows.push(Row {
        measure: format!("create + close, path depth {DEEP_CREATE}"),
        unit: "ns/op",
        uvfs: Some(uc),
        kernel: Some(kc),
        note: "uvfs: the parent answered by the path cache".into(),
    });
    rows.push(Row {
        measure: format!("unlink, path depth {DEEP_CREATE}"),
        unit: "ns/op",
        uvfs: Some(uu),
        kernel: Some(ku),
        note: String::new(),
    });

    say("fork a tree");
    let fork_files = s.files / 10;
    let empty = host.path.join("fork-empty");
    std::fs::create_dir(&empty).map_err(|e| format!("{}: {e}", empty.display()))?;
    let (ms, mb) = uvfs_fork(fork_files, &empty)?;
    std::fs::remove_dir(&empty).map_err(|e| format!("{}: {e}", empty.display()))?;
    let (kms, kmb) = host.fork(fork_files)?;
    rows.push(Row {
        measure: format!("fork a {fork_files}-file tree: snapshot + new overlay (kernel: cp -a)"),
        unit: "ms",
        uvfs: Some(ms),
        kernel: Some(kms),
        note: "overlay over an empty host dir, 100-byte files made in its upper layer".into(),
    });
    rows.push(Row {
        measure: "memory of the fork".into(),
        unit: "MB",
        uvfs: alloc::installed().then_some(mb),
        kernel: Some(kmb),
        note: "uvfs: allocator bytes; kernel: Slab + Shmem growth, blurred by other processes".into(),
    });
    Ok(ScaleReport { files: s.files, dirs: s.dirs, churn_dirs: s.churn_dirs, big_dir: s.big_dir, rows })
}

/// The rows as a table.
pub fn table(r: &ScaleReport) -> String {
    let mut t = comfy_table::Table::new();
    t.set_header(vec!["measure", "unit", "uvfs", "kernel tmpfs", "uvfs / kernel", "note"]);
    let f = |v: Option<f64>| {
        v.map_or("n/a".to_string(), |x| if x >= 100.0 { format!("{x:.0}") } else { format!("{x:.2}") })
    };
    for row in &r.rows {
        let ratio = match (row.uvfs, row.kernel) {
            // A row that is itself a ratio is not divided again.
            (Some(u), Some(k)) if k > 0.0 && row.unit != "x" => format!("{:.2}x", u / k),
            _ => String::new(),
        };
        t.add_row(vec![row.measure.clone(), row.unit.into(), f(row.uvfs), f(row.kernel), ratio, row.note.clone()]);
    }
    format!("scale: how cost grows (uvfs memfs in-process, one thread; kernel: tmpfs)\n{t}\n")
}

fn vfs() -> (Vfs, Task) {
    let vfs = Vfs::new(VfsConfig::default());
    let t = vfs.root_task();
    (vfs, t)
}

fn per(start: Instant, n: usize) -> f64 {
    start.elapsed().as_nanos() as f64 / n.max(1) as f64
}

/// Batches [`batched`] splits a short measurement into.
const BATCHES: usize = 10;

/// `op` over `range`, timed: nanoseconds per operation.
fn timed<E>(range: std::ops::Range<usize>, op: &mut impl FnMut(usize) -> Result<(), E>) -> Result<f64, E> {
    let n = range.len();
    let start = Instant::now();
    for i in range {
        op(i)?;
    }
    Ok(per(start, n))
}

/// The median of some batch times.
fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied().unwrap_or(0.0)
}

/// `op` over `0..n` in [`BATCHES`] consecutive batches, each timed: the median batch's
/// nanoseconds per operation. A row of 10,000 creates lasts some 20 ms, which one stall
/// of the machine (a few ms, see the slowest-create row) would move by tens of percent;
/// the median batch is the operation's own cost.
fn batched<E>(n: usize, mut op: impl FnMut(usize) -> Result<(), E>) -> Result<f64, E> {
    let size = n.div_ceil(BATCHES).max(1);
    let mut times = Vec::with_capacity(BATCHES);
    for b in (0..n).step_by(size) {
        times.push(timed(b..(b + size).min(n), &mut op)?);
    }
    Ok(median(times))
}

/// `a` and `b`, each over `0..n` in [`BATCHES`] batches, the batches taken in turn (a, b,
/// a, b, ...): the median batch of each, in nanoseconds per operation. Taken in turn, the
/// two see the same machine: this VM's speed drifts by tens of percent within minutes, so
/// two rows measured a minute apart cannot be divided, and these two can.
fn alternated<E>(
    n: usize,
    mut a: impl FnMut(usize) -> Result<(), E>,
    mut b: impl FnMut(usize) -> Result<(), E>,
) -> Result<(f64, f64), E> {
    let size = n.div_ceil(BATCHES).max(1);
    let (mut ta, mut tb) = (Vec::with_capacity(BATCHES), Vec::with_capacity(BATCHES));
    for start in (0..n).step_by(size) {
        let r = start..(start + size).min(n);
        ta.push(timed(r.clone(), &mut a)?);
        tb.push(timed(r, &mut b)?);
    }
    Ok((median(ta), median(tb)))
}

/// `dirs` directories `/dN` with the files spread over them: (dir, file) names.
fn spread(files: usize, dirs: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..files).map(move |i| (i % dirs, i / dirs))
}

fn uvfs_memory(s: ScaleSizes) -> (f64, f64) {
    let (vfs, t) = vfs();
    for d in 0..s.dirs {
        t.mkdir(format!("/d{d}").as_bytes(), 0o755).expect("mkdir");
    }
    let (b0, r0) = (alloc::live_bytes(), alloc::rss_bytes());
    for (d, f) in spread(s.files, s.dirs) {
        t.mknodat(DirFd::Cwd, format!("/d{d}/f{f}").as_bytes(), 0o100644, 0).expect("mknod");
    }
    let (b1, r1) = (alloc::live_bytes(), alloc::rss_bytes());
    drop(t);
    drop(vfs);
    ((b1 - b0) as f64 / s.files as f64, r1.saturating_sub(r0) as f64 / s.files as f64)
}

/// Snapshot + new overlay of an overlay (over the empty host directory `empty`) holding
/// `files` 100-byte files in 100 dirs (issue 14's fork): milliseconds, and megabytes the
/// fork allocated.
fn uvfs_fork(files: usize, empty: &Path) -> Result<(f64, f64), String> {
    use uvfs::fs::overlay::OverlayFs;
    let layer = uvfs::fs::hostfs::HostFs::new(empty).map_err(|e| format!("hostfs: {e}"))?;
    let ovl = OverlayFs::new(vec![Box::new(layer)]).map_err(|e| format!("overlay: {e}"))?;
    let a = Vfs::with_root(VfsConfig::default(), Box::new(ovl)).map_err(|e| format!("overlay: {e}"))?;
    let t = a.root_task();
    let data = [7u8; 100];
    for d in 0..100 {
        t.mkdir(format!("/d{d}").as_bytes(), 0o755).map_err(|e| format!("mkdir: {e}"))?;
    }
    for (d, f) in spread(files, 100) {
        let fd = t.open(format!("/d{d}/f{f}").as_bytes(), OpenFlags::CREAT | OpenFlags::WRONLY, 0o644).expect("create");
        t.write(fd, &data).expect("write");
        t.close(fd).expect("close");
    }
    let root = t.openat_file(DirFd::Cwd, b"/", OpenFlags::PATH, 0).map_err(|e| format!("{e}"))?;
    let b0 = alloc::live_bytes();
    let start = Instant::now();
    let snap = OverlayFs::snapshot(root.inode()).map_err(|e| format!("snapshot: {e}"))?;
    let fork = OverlayFs::new(vec![Box::new(snap)]).map_err(|e| format!("fork: {e}"))?;
    let b = Vfs::with_root(VfsConfig::default(), Box::new(fork)).map_err(|e| format!("fork: {e}"))?;
    b.root_task().stat(b"/d0/f0").map_err(|e| format!("the fork: {e}"))?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let mb = alloc::live_bytes().saturating_sub(b0) as f64 / 1e6;
    drop(b);
    Ok((ms, mb))
}

/// The paths of the create/unlink rows: `churn_dirs` x 1000 files, made before the timing
/// starts (as the kernel's side does), so that the rows time the file system, not `format!`.
fn churn_names(s: ScaleSizes) -> Vec<Vec<u8>> {
    (0..s.churn_dirs).flat_map(|d| (0..1000).map(move |f| format!("/c{d}/f{f}").into_bytes())).collect()
}

fn uvfs_create_close(t: &Task, path: &[u8]) -> Result<(), uvfs::Errno> {
    let fd = t.open(path, OpenFlags::CREAT | OpenFlags::WRONLY, 0o644)?;
    t.close(fd)
}

/// The create + close and unlink rows of both sides (ns per operation).
struct Churn {
    create: f64,
    /// Allocations per uvfs create + close.
    allocs: f64,
    unlink: f64,
    kcreate: f64,
    kunlink: f64,
}

/// The create + close and unlink rows: `churn_dirs` x 1000 names on each side, after one
/// round of both that warmed the allocator (and the directories' tables), then each
/// operation's batches taken in turn with the kernel's ([`alternated`]), so that the two
/// see the same machine. The allocations are counted over the creates' alternation, in
/// which only uvfs's side allocates.
fn churn(s: ScaleSizes, host: &HostDir) -> Result<Churn, String> {
    let (_vfs, t) = vfs();
    for d in 0..s.churn_dirs {
        t.mkdir(format!("/c{d}").as_bytes(), 0o755).expect("mkdir");
        host.mkdir(format!("c{d}").as_bytes())?;
    }
    creates_and_unlinks(&t, host, &churn_names(s))
}

/// [`churn`]'s measurement of `names` (absolute in uvfs; the same names relative to the
/// host's directory for the kernel), whose directories exist on both sides; the kernel's
/// directory is emptied afterwards.
fn creates_and_unlinks(t: &Task, host: &HostDir, names: &[Vec<u8>]) -> Result<Churn, String> {
    let knames: Vec<CString> = names.iter().map(|n| cstr(&n[1..])).collect();
    for n in names {
        uvfs_create_close(t, n).expect("create");
    }
    for n in names {
        t.unlink(n).expect("unlink");
    }
    host.creates_and_unlinks_untimed(&knames)?;
    // Counted around the whole alternation, not inside uvfs's timed operations: the
    // kernel's side and the batches' bookkeeping allocate nothing (the names are made
    // above, the batch times go into vectors made with room for them).
    let a0 = alloc::allocations();
    let (create, kcreate) = alternated(
        names.len(),
        |i| uvfs_create_close(t, &names[i]).map_err(|e| format!("create: {e}")),
        |i| host.create_close(&knames[i]),
    )?;
    let allocs = alloc::allocations() - a0;
    let (unlink, kunlink) = alternated(
        names.len(),
        |i| t.unlink(&names[i]).map_err(|e| format!("unlink: {e}")),
        |i| host.unlink(&knames[i]),
    )?;
    host.clear()?;
    Ok(Churn { create, allocs: allocs as f64 / names.len() as f64, unlink, kcreate, kunlink })
}

/// A seeded sequence of indices below `n` (SplitMix64).
fn random_indices(n: usize, count: usize) -> Vec<usize> {
    let mut x: u64 = 0x5eed;
    (0..count)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % n as u64) as usize
        })
        .collect()
}

/// The big-directory rows of one side (ns per operation; `worst` in microseconds).
struct BigDir {
    /// A create + close in the big directory.
    create: f64,
    /// A create + close in a directory of about 1000 entries, in batches taken in turn
    /// with those of `create` ([`alternated`]).
    create_small: f64,
    /// A stat of a random name in the big directory.
    stat: f64,
    /// The slowest single create while filling the big directory.
    worst: f64,
}

/// Directories of [`SMALL_DIR`] entries that the creates compared with the big
/// directory's are spread over: 100 new names each, so they stay near that size.
fn small_dirs(s: ScaleSizes) -> usize {
    (s.big_ops / 100).max(1)
}

/// Entries of each of those directories before the creates.
const SMALL_DIR: usize = 1000;

/// The new names of the big-directory creates and of the small-directory creates.
fn big_dir_news(s: ScaleSizes, prefix: &str) -> (Vec<String>, Vec<String>) {
    let small = small_dirs(s);
    let big = (0..s.big_ops).map(|i| format!("{prefix}big/x{i}")).collect();
    let smalls = (0..s.big_ops).map(|i| format!("{prefix}s{}/x{}", i % small, i / small)).collect();
    (big, smalls)
}

fn uvfs_big_dir(s: ScaleSizes) -> BigDir {
    let (_vfs, t) = vfs();
    t.mkdir(b"/big", 0o755).expect("mkdir");
    let mut worst = 0f64;
    for i in 0..s.big_dir {
        let name = format!("/big/n{i}");
        let one = Instant::now();
        t.mknodat(DirFd::Cwd, name.as_bytes(), 0o100644, 0).expect("mknod");
        worst = worst.max(one.elapsed().as_secs_f64() * 1e6);
    }
    for d in 0..small_dirs(s) {
        t.mkdir(format!("/s{d}").as_bytes(), 0o755).expect("mkdir");
        for i in 0..SMALL_DIR {
            t.mknodat(DirFd::Cwd, format!("/s{d}/n{i}").as_bytes(), 0o100644, 0).expect("mknod");
        }
    }
    let (big, small) = big_dir_news(s, "/");
    let (create, create_small) = alternated(
        s.big_ops,
        |i| uvfs_create_close(&t, big[i].as_bytes()),
        |i| uvfs_create_close(&t, small[i].as_bytes()),
    )
    .expect("create");
    let names: Vec<Vec<u8>> =
        random_indices(s.big_dir, s.big_ops * 10).into_iter().map(|i| format!("/big/n{i}").into_bytes()).collect();
    let stat = batched(names.len(), |i| {
        std::hint::black_box(t.fstatat(DirFd::Cwd, &names[i], AtFlags::empty())?);
        Ok::<(), uvfs::Errno>(())
    })
    .expect("stat");
    BigDir { create, create_small, stat, worst }
}

/// The relative path of a file `depth` directories below the base: `d/d/.../f`.
fn deep_path(depth: usize) -> Vec<u8> {
    let mut p = Vec::new();
    for _ in 0..depth {
        p.extend_from_slice(b"d/");
    }
    p.extend_from_slice(b"f");
    p
}

/// Directories above the files of the deep create rows.
const DEEP_CREATE: usize = 8;

/// The deep create rows' files, relative to the root: `deep/d/.../d/fN`, `depth` times `d`.
fn deep_names(depth: usize, n: usize) -> Vec<Vec<u8>> {
    let mut dir = b"deep/".to_vec();
    for _ in 0..depth {
        dir.extend_from_slice(b"d/");
    }
    (0..n).map(|i| [&dir[..], format!("f{i}").as_bytes()].concat()).collect()
}

/// The create + close and unlink rows of `n` files `depth` directories deep, both sides
/// in turn ([`creates_and_unlinks`]).
fn deep_creates(depth: usize, n: usize, host: &HostDir) -> Result<Churn, String> {
    let (_vfs, t) = vfs();
    let mut dir = b"/deep".to_vec();
    t.mkdir(&dir, 0o755).expect("mkdir");
    host.mkdir(&dir[1..])?;
    for _ in 0..depth {
        dir.extend_from_slice(b"/d");
        t.mkdir(&dir, 0o755).expect("mkdir");
        host.mkdir(&dir[1..])?;
    }
    let names: Vec<Vec<u8>> = deep_names(depth, n).into_iter().map(|p| [b"/".as_slice(), &p].concat()).collect();
    creates_and_unlinks(&t, host, &names)
}

fn uvfs_deep_stat(depth: usize, stats: usize, fast: FastPaths) -> f64 {
    let vfs = Vfs::new(VfsConfig { fast_paths: fast, ..VfsConfig::default() });
    let t = vfs.root_task();
    t.mkdir(b"/base", 0o755).expect("mkdir");
    let mut dir = b"/base".to_vec();
    for _ in 0..depth {
        dir.extend_from_slice(b"/d");
        t.mkdir(&dir, 0o755).expect("mkdir");
    }
    dir.extend_from_slice(b"/f");
    t.mknodat(DirFd::Cwd, &dir, 0o100644, 0).expect("mknod");
    let base = t.open(b"/base", OpenFlags::RDONLY | OpenFlags::DIRECTORY, 0).expect("open");
    let path = deep_path(depth);
    let stat =
        |t: &Task, base: Fd| std::hint::black_box(t.fstatat(DirFd::Fd(base), &path, AtFlags::empty()).expect("stat"));
    for _ in 0..stats / 10 {
        stat(&t, base);
    }
    let start = Instant::now();
    for _ in 0..stats {
        stat(&t, base);
    }
    per(start, stats)
}

/// A fresh directory on the host's tmpfs, removed on drop.
struct HostDir {
    path: PathBuf,
    fd: OwnedFd,
}

fn cstr(b: &[u8]) -> CString {
    CString::new(b).expect("no NUL in generated names")
}

fn check(r: libc::c_int, what: &str) -> Result<libc::c_int, String> {
    if r < 0 { Err(format!("{what}: {}", std::io::Error::last_os_error())) } else { Ok(r) }
}

impl HostDir {
    fn create(tmpfs: &Path) -> Result<HostDir, String> {
        let path = tmpfs.join(format!("uvfs-scale.{}", std::process::id()));
        std::fs::create_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let c = cstr(path.as_os_str().as_encoded_bytes());
        // SAFETY: a valid C string; the descriptor is owned below.
        let fd =
            check(unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) }, "open")?;
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(HostDir { path, fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    fn raw(&self) -> libc::c_int {
        self.fd.as_raw_fd()
    }

    fn mkdir(&self, p: &[u8]) -> Result<(), String> {
        let c = cstr(p);
        // SAFETY: valid descriptor and C string.
        check(unsafe { libc::mkdirat(self.raw(), c.as_ptr(), 0o755) }, "mkdir").map(|_| ())
    }

    fn mknod(&self, p: &[u8]) -> Result<(), String> {
        let c = cstr(p);
        // SAFETY: valid descriptor and C string.
        check(unsafe { libc::mknodat(self.raw(), c.as_ptr(), libc::S_IFREG | 0o644, 0) }, "mknod").map(|_| ())
    }

    fn create_close(&self, c: &CString) -> Result<(), String> {
        // SAFETY: valid descriptor and C string.
        let fd = check(
            unsafe { libc::openat(self.raw(), c.as_ptr(), libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC, 0o644) },
            "create",
        )?;
        // SAFETY: our own fresh descriptor.
        unsafe { libc::close(fd) };
        Ok(())
    }

    fn unlink(&self, c: &CString) -> Result<(), String> {
        // SAFETY: valid descriptor and C string.
        check(unsafe { libc::unlinkat(self.raw(), c.as_ptr(), 0) }, "unlink").map(|_| ())
    }

    fn stat(&self, dirfd: libc::c_int, c: &CString) -> Result<(), String> {
        // SAFETY: a zeroed stat is a valid out-parameter; valid descriptor and C string.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        check(unsafe { libc::fstatat(dirfd, c.as_ptr(), &mut st, 0) }, "stat")?;
        std::hint::black_box(st);
        Ok(())
    }

    /// Empties the directory (and its subdirectories) for the next row.
    fn clear(&self) -> Result<(), String> {
        for e in std::fs::read_dir(&self.path).map_err(|e| e.to_string())? {
            let p = e.map_err(|e| e.to_string())?.path();
            if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) }
                .map_err(|e| format!("{}: {e}", p.display()))?;
        }
        Ok(())
    }

    fn memory(&self, s: ScaleSizes) -> Result<f64, String> {
        for d in 0..s.dirs {
            self.mkdir(format!("d{d}").as_bytes())?;
        }
        let before = alloc::kernel_slab_bytes();
        for (d, f) in spread(s.files, s.dirs) {
            self.mknod(format!("d{d}/f{f}").as_bytes())?;
        }
        let after = alloc::kernel_slab_bytes();
        self.clear()?;
        Ok(after.saturating_sub(before) as f64 / s.files as f64)
    }

    /// The same tree on the tmpfs, then `cp -a` of it: milliseconds, and the megabytes
    /// the kernel's Slab and Shmem grew by.
    fn fork(&self, files: usize) -> Result<(f64, f64), String> {
        let src = self.path.join("fork-src");
        let data = [7u8; 100];
        for d in 0..100 {
            std::fs::create_dir_all(src.join(format!("d{d}"))).map_err(|e| format!("mkdir: {e}"))?;
        }
        for (d, f) in spread(files, 100) {
            std::fs::write(src.join(format!("d{d}/f{f}")), data).map_err(|e| format!("write: {e}"))?;
        }
        let meminfo = |key: &str| {
            std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.split_whitespace().next().and_then(|x| x.parse::<u64>().ok()))
            })
        };
        let mem = || (meminfo("Slab:").unwrap_or(0) + meminfo("Shmem:").unwrap_or(0)) * 1024;
        let m0 = mem();
        let start = Instant::now();
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(&src)
            .arg(self.path.join("fork-dst"))
            .status()
            .map_err(|e| format!("cp: {e}"))?;
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let mb = mem().saturating_sub(m0) as f64 / 1e6;
        if !st.success() {
            return Err(format!("cp -a: {st}"));
        }
        self.clear()?;
        Ok((ms, mb))
    }

    /// One round of creates and unlinks of `names`, untimed (it warms the directories).
    fn creates_and_unlinks_untimed(&self, names: &[CString]) -> Result<(), String> {
        for n in names {
            self.create_close(n)?;
        }
        for n in names {
            self.unlink(n)?;
        }
        Ok(())
    }

    fn big_dir(&self, s: ScaleSizes) -> Result<BigDir, String> {
        self.mkdir(b"big")?;
        let mut worst = 0f64;
        for i in 0..s.big_dir {
            let name = format!("big/n{i}");
            let one = Instant::now();
            self.mknod(name.as_bytes())?;
            worst = worst.max(one.elapsed().as_secs_f64() * 1e6);
        }
        for d in 0..small_dirs(s) {
            self.mkdir(format!("s{d}").as_bytes())?;
            for i in 0..SMALL_DIR {
                self.mknod(format!("s{d}/n{i}").as_bytes())?;
            }
        }
        let (big, small) = big_dir_news(s, "");
        let (big, small): (Vec<CString>, Vec<CString>) =
            (big.iter().map(|n| cstr(n.as_bytes())).collect(), small.iter().map(|n| cstr(n.as_bytes())).collect());
        let (create, create_small) =
            alternated(s.big_ops, |i| self.create_close(&big[i]), |i| self.create_close(&small[i]))?;
        let names: Vec<CString> = random_indices(s.big_dir, s.big_ops * 10)
            .into_iter()
            .map(|i| cstr(format!("big/n{i}").as_bytes()))
            .collect();
        let stat = batched(names.len(), |i| self.stat(self.raw(), &names[i]))?;
        self.clear()?;
        Ok(BigDir { create, create_small, stat, worst })
    }

    fn deep_stat(&self, depth: usize, stats: usize) -> Result<f64, String> {
        self.mkdir(b"base")?;
        let mut dir = b"base".to_vec();
        for _ in 0..depth {
            dir.extend_from_slice(b"/d");
            self.mkdir(&dir)?;
        }
        dir.extend_from_slice(b"/f");
        self.mknod(&dir)?;
        let c = cstr(b"base");
        // SAFETY: valid descriptor and C string; the descriptor is owned below.
        let base = check(
            unsafe { libc::openat(self.raw(), c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) },
            "open",
        )?;
        // SAFETY: a fresh descriptor nobody else owns.
        let base = unsafe { OwnedFd::from_raw_fd(base) };
        let path = cstr(&deep_path(depth));
        for _ in 0..stats / 10 {
            self.stat(base.as_raw_fd(), &path)?;
        }
        let start = Instant::now();
        for _ in 0..stats {
            self.stat(base.as_raw_fd(), &path)?;
        }
        let r = per(start, stats);
        drop(base);
        self.clear()?;
        Ok(r)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation runs once, in order, across the batches; the first error stops it.
    #[test]
    fn batches_cover_every_operation_once() {
        for n in [0, 1, 9, 10, 11, 10_000] {
            let mut seen = Vec::new();
            let t = batched(n, |i| {
                seen.push(i);
                Ok::<(), ()>(())
            });
            assert!(t.is_ok_and(|t| t >= 0.0));
            assert_eq!(seen, (0..n).collect::<Vec<_>>(), "n = {n}");
        }
        let mut ran = 0;
        let failed = batched(100, |i| {
            if i == 42 {
                return Err(i);
            }
            ran += 1;
            Ok(())
        });
        assert_eq!(failed, Err(42));
        assert_eq!(ran, 42);
    }

    /// Each side runs every operation once, in order, and the batches take turns: a's
    /// first batch, b's first, a's second, ...; an error on either side stops both.
    #[test]
    fn alternated_batches_take_turns() {
        for n in [0, 1, 10, 25] {
            let seen = std::cell::RefCell::new(Vec::new());
            let r = alternated(
                n,
                |i| {
                    seen.borrow_mut().push(('a', i));
                    Ok::<(), ()>(())
                },
                |i| {
                    seen.borrow_mut().push(('b', i));
                    Ok(())
                },
            );
            assert!(r.is_ok_and(|(a, b)| a >= 0.0 && b >= 0.0));
            let size = n.div_ceil(BATCHES).max(1);
            let want: Vec<(char, usize)> = (0..n)
                .step_by(size)
                .flat_map(|s| {
                    let r = s..(s + size).min(n);
                    r.clone().map(|i| ('a', i)).chain(r.map(|i| ('b', i)))
                })
                .collect();
            assert_eq!(seen.into_inner(), want, "n = {n}");
        }
        let mut b_ran = 0;
        let failed = alternated(
            100,
            |i| if i == 15 { Err(i) } else { Ok(()) },
            |_| {
                b_ran += 1;
                Ok(())
            },
        );
        assert_eq!(failed, Err(15));
        assert_eq!(b_ran, 10, "b ran its first batch only");
    }

    #[test]
    fn sizes_follow_the_issue_and_quick_is_a_tenth() {
        let full = ScaleSizes::new(false, None, None);
        assert_eq!((full.files, full.dirs, full.churn_dirs, full.big_dir), (1_000_000, 1000, 200, 1_000_000));
        let quick = ScaleSizes::new(true, None, None);
        assert_eq!((quick.files, quick.dirs, quick.churn_dirs, quick.big_dir), (100_000, 100, 20, 100_000));
        let tiny = ScaleSizes::new(true, Some(10), Some(50));
        assert_eq!((tiny.files, tiny.dirs, tiny.big_dir), (10, 1, 50));
    }

    #[test]
    fn deep_paths_and_random_names() {
        assert_eq!(deep_path(0), b"f");
        assert_eq!(deep_path(2), b"d/d/f");
        let a = random_indices(100, 1000);
        assert_eq!(a, random_indices(100, 1000), "seeded");
        assert!(a.iter().all(|&i| i < 100));
        assert!(a.iter().collect::<std::collections::HashSet<_>>().len() > 50, "spread over the range");
    }
}
