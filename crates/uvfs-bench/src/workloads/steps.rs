//! The workloads of one round, in order, each timed and then checked (the check is not
//! timed and not in the server's CPU time).
//!
//! | workload | what runs (in the target's directory) | check |
//! |---|---|---|
//! | `untar` | `tar -xf tree.tar` (the archive is on the tmpfs) | the tree's [`Manifest`] equals the staged tree's |
//! | `find-warm` | `find tree ( -type d -printf 'd %m %p\n' ) -o -printf '%y %m %s %p\n'` | sorted output equals the stage's |
//! | `find-cold` | the same after the cold step | the same |
//! | `grep-1` | `grep -r -e TODO tree`: contents cold after `find-cold` | sorted output equals the stage's |
//! | `grep-2` | the same again: contents warm | the same |
//! | `git-commit` | `git init`, `git add -A`, `git commit` | `git fsck`; HEAD is the commit made on the stage |
//! | `git-status` | `git status --porcelain`, warm | prints nothing |
//! | `make` | `make -jN` of the C project (`cc -O2`) | the program prints the predicted checksum |
//! | `rm-rf` | `rm -rf tree` | the directory is empty |
//! | `seq-write` | write the big file in 1 MiB blocks, `fsync` | size |
//! | `seq-read` | after the cold step, read it in 1 MiB blocks | xxh3 of the data equals what was written |
//! | `rand-read` | 4 KiB `pread`s at seeded offsets | each page equals what was written |
//!
//! Commands run with a clean environment (`PATH`, `HOME` in the scratch space,
//! `LC_ALL=C`, `TZ=UTC`); git also with `GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`,
//! a fixed author, committer and date (so the commit hash is known in advance), no gpg,
//! no automatic gc or maintenance, `core.fsync` left at its default. A command gets
//! [`COMMAND_TIMEOUT`]; on Ctrl-C its process group is killed.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::bigfile::BigFile;
use super::cleanup::{self, Item};
use super::manifest::Manifest;
use super::targets::{Env, Site};
use super::tree::{CBuild, NEEDLE};

/// How long one command may run.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(1200);

/// A workload, in run order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `tar -xf`.
    Untar,
    /// `find -printf` with warm caches.
    FindWarm,
    /// `find -printf` after the cold step.
    FindCold,
    /// `grep -r`, first run.
    Grep1,
    /// `grep -r`, second run.
    Grep2,
    /// `git init`, `add -A`, `commit`.
    GitCommit,
    /// `git status`.
    GitStatus,
    /// `make -jN`.
    Make,
    /// `rm -rf`.
    RmRf,
    /// Sequential write with fsync.
    SeqWrite,
    /// Sequential read after the cold step.
    SeqRead,
    /// Random 4 KiB reads.
    RandRead,
}

impl Workload {
    /// Every workload, in run order.
    pub const ALL: [Workload; 12] = [
        Workload::Untar,
        Workload::FindWarm,
        Workload::FindCold,
        Workload::Grep1,
        Workload::Grep2,
        Workload::GitCommit,
        Workload::GitStatus,
        Workload::Make,
        Workload::RmRf,
        Workload::SeqWrite,
        Workload::SeqRead,
        Workload::RandRead,
    ];

    /// As in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Untar => "untar",
            Workload::FindWarm => "find-warm",
            Workload::FindCold => "find-cold",
            Workload::Grep1 => "grep-1",
            Workload::Grep2 => "grep-2",
            Workload::GitCommit => "git-commit",
            Workload::GitStatus => "git-status",
            Workload::Make => "make",
            Workload::RmRf => "rm-rf",
            Workload::SeqWrite => "seq-write",
            Workload::SeqRead => "seq-read",
            Workload::RandRead => "rand-read",
        }
    }

    /// What it does, in a few words.
    pub fn title(self) -> &'static str {
        match self {
            Workload::Untar => "tar -xf of the tree (archive on tmpfs)",
            Workload::FindWarm => "find -printf (stat of every entry), warm",
            Workload::FindCold => "find -printf after the cold step",
            Workload::Grep1 => "grep -r TODO, first run (contents cold after find-cold)",
            Workload::Grep2 => "grep -r TODO, second run",
            Workload::GitCommit => "git init + add -A + commit",
            Workload::GitStatus => "git status --porcelain, warm",
            Workload::Make => "make -jN of the generated C project",
            Workload::RmRf => "rm -rf of the tree",
            Workload::SeqWrite => "sequential write of the big file, 1 MiB blocks, fsync",
            Workload::SeqRead => "sequential read of it after the cold step, 1 MiB blocks",
            Workload::RandRead => "random 4 KiB preads of it",
        }
    }

    /// Looks a workload up by name.
    pub fn by_name(name: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.name() == name)
    }
}

/// One timed run of a workload.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Wall seconds.
    pub seconds: f64,
    /// CPU seconds of the FUSE server (mount targets).
    pub server_cpu: Option<f64>,
    /// CPU seconds of the workload itself: its programs (reaped children) or, for the
    /// big-file workloads, the benchmark thread doing the I/O.
    pub client_cpu: f64,
    /// FUSE requests whose reply a caller waited for (uvfs mount targets).
    pub round_trips: Option<u64>,
}

/// What happened to a workload in a round.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Timed and checked.
    Measured(Sample),
    /// Does not apply to this target (why).
    NotApplicable(String),
    /// The command or its check failed (what went wrong): not a time.
    Failed(String),
}

/// Where the staged tree came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Generated ([`super::tree`]).
    Generated(super::tree::TreeSpec),
    /// A copy of a real tree (`--tree`), its top-level `.git` left out.
    Dir(PathBuf),
}

/// What every round shares: the archive and what each check expects.
#[derive(Debug)]
pub struct Prepared {
    /// Where the tree came from.
    pub source: Source,
    /// `<tmp>/stage`, holding `tree/src` and `tree/cbuild`.
    pub stage: PathBuf,
    /// The archive of `tree/`.
    pub tar: PathBuf,
    /// The staged tree's manifest.
    pub manifest: Manifest,
    /// (lines, digest of the sorted lines) of `find` on the stage.
    pub find: (usize, u64),
    /// The same for `grep`.
    pub grep: (usize, u64),
    /// The commit `git-commit` must make.
    pub git_head: String,
    /// The C project.
    pub cbuild: CBuild,
    /// `make -j`.
    pub jobs: usize,
    /// The big file.
    pub big: BigFile,
    /// `HOME` of the commands.
    pub home: PathBuf,
    /// The uid (and gid) the measured programs run as (`--as-user`); `None`: the bench's.
    pub user: Option<u32>,
}

/// A command with the clean environment, run in `dir`.
fn clean(prog: &str, dir: &Path, home: &Path) -> Command {
    let mut c = Command::new(prog);
    c.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()))
        .env("HOME", home)
        .env("LC_ALL", "C")
        .env("TZ", "UTC");
    c
}

/// `cmd` as `p`'s user, if it has one (the child takes the uid and gid and drops the
/// supplementary groups before it runs the program).
fn as_user(mut cmd: Command, p: &Prepared) -> Command {
    if let Some(u) = p.user {
        cmd.uid(u).gid(u);
    }
    cmd
}

/// A git command with the clean git environment.
fn git(dir: &Path, home: &Path, args: &[&str]) -> Command {
    let mut c = clean("git", dir, home);
    let who = [("NAME", "uvfs bench"), ("EMAIL", "bench@uvfs.invalid"), ("DATE", "2026-01-01T00:00:00+0000")];
    for (k, v) in who {
        c.env(format!("GIT_AUTHOR_{k}"), v).env(format!("GIT_COMMITTER_{k}"), v);
    }
    c.env("GIT_CONFIG_NOSYSTEM", "1").env("GIT_CONFIG_GLOBAL", "/dev/null").env("GIT_TERMINAL_PROMPT", "0");
    for opt in
        ["init.defaultBranch=main", "commit.gpgsign=false", "gc.auto=0", "maintenance.auto=false", "safe.directory=*"]
    {
        c.args(["-c", opt]);
    }
    c.args(args);
    c
}

const FIND_ARGS: &[&str] =
    &["tree", "(", "-type", "d", "-printf", "d %m %p\\n", ")", "-o", "-printf", "%y %m %s %p\\n"];

fn find(dir: &Path, home: &Path) -> Command {
    let mut c = clean("find", dir, home);
    c.args(FIND_ARGS);
    c
}

fn grep(dir: &Path, home: &Path) -> Command {
    let mut c = clean("grep", dir, home);
    c.args(["-r", "-e", NEEDLE, "tree"]);
    c
}

fn describe(c: &Command) -> String {
    let mut w = vec![c.get_program().to_string_lossy().into_owned()];
    w.extend(c.get_args().map(|a| a.to_string_lossy().into_owned()));
    w.join(" ")
}

/// Runs `cmd` in a process group of its own with stdout captured; `ok` lists the exit
/// codes that count as success. Returns the wall time (spawn to reaped) and stdout.
pub fn exec(mut cmd: Command, ok: &[i32]) -> Result<(Duration, Vec<u8>), String> {
    let what = describe(&cmd);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    if cleanup::interrupted() {
        return Err("interrupted".into());
    }
    let t = Instant::now();
    let child = cmd.spawn().map_err(|e| format!("cannot run {what}: {e}"))?;
    let pgid = child.id() as i32;
    let reg = cleanup::register(Item::Command { pgid });
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let timed_out = Arc::new(AtomicBool::new(false));
    let flag = timed_out.clone();
    let dog = std::thread::spawn(move || {
        if rx.recv_timeout(COMMAND_TIMEOUT) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            flag.store(true, Ordering::Relaxed);
            // SAFETY: no memory preconditions; the group is the command we started.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    });
    let out = child.wait_with_output();
    let took = t.elapsed();
    drop(tx);
    let _ = dog.join();
    drop(reg);
    let out = out.map_err(|e| format!("{what}: {e}"))?;
    if cleanup::interrupted() {
        return Err("interrupted".into());
    }
    if timed_out.load(Ordering::Relaxed) {
        return Err(format!("{what}: no result after {} s, killed", COMMAND_TIMEOUT.as_secs()));
    }
    if !out.status.code().is_some_and(|c| ok.contains(&c)) {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(4).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!("{what}: {} ({})", out.status, tail.join(" | ")));
    }
    Ok((took, out.stdout))
}

/// (lines, digest of the sorted lines): output compared across filesystems whose
/// directory order differs.
pub fn sorted_digest(out: &[u8]) -> (usize, u64) {
    let mut lines: Vec<&[u8]> = out.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    lines.sort_unstable();
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for l in &lines {
        h.update(l);
        h.update(b"\n");
    }
    (lines.len(), h.digest())
}

/// Stages the tree (generated into, or copied to, `<tmp>/stage/tree/src`), writes the C
/// project, makes the archive and computes every expected result. Not timed.
pub fn prepare(
    env: &Env,
    source: Source,
    cbuild: CBuild,
    jobs: usize,
    big: BigFile,
    say: &dyn Fn(&str),
) -> Result<Prepared, String> {
    let stage = env.tmp.path().join("stage");
    let home = env.tmp.path().join("home");
    for d in [&stage, &home, &stage.join("tree")] {
        std::fs::create_dir(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    let src = stage.join("tree/src");
    match &source {
        Source::Generated(spec) => {
            say(&format!("generating {} files, {} MB", spec.files, spec.bytes / 1_000_000));
            super::tree::TreePlan::new(spec).write(&src).map_err(|e| format!("generating the tree: {e}"))?;
        }
        Source::Dir(dir) => {
            say(&format!("copying {}", dir.display()));
            std::fs::create_dir(&src).map_err(|e| format!("{}: {e}", src.display()))?;
            let mut cp = clean("cp", &stage, &home);
            cp.arg("-a").arg("-t").arg(&src);
            let mut any = false;
            for e in std::fs::read_dir(dir).map_err(|e| format!("--tree {}: {e}", dir.display()))? {
                let e = e.map_err(|e| format!("--tree {}: {e}", dir.display()))?;
                if e.file_name() != ".git" {
                    cp.arg(e.path());
                    any = true;
                }
            }
            if any {
                exec(cp, &[0])?;
            }
        }
    }
    super::tree::write_cbuild(&stage.join("tree/cbuild"), &cbuild)
        .map_err(|e| format!("writing the C project: {e}"))?;
    say("checksums and the archive");
    let manifest = Manifest::of(&stage.join("tree"), &cleanup::interrupted)?;
    let tar = env.tmp.path().join("tree.tar");
    let mut t = clean("tar", &stage, &home);
    t.arg("-cf").arg(&tar).arg("tree");
    exec(t, &[0])?;
    let (_, out) = exec(find(&stage, &home), &[0])?;
    let find_expect = sorted_digest(&out);
    if find_expect.0 != manifest.entries.len() + 1 {
        return Err(format!(
            "find on the stage printed {} lines for {} entries",
            find_expect.0,
            manifest.entries.len()
        ));
    }
    let (_, out) = exec(grep(&stage, &home), &[0, 1])?;
    let grep_expect = sorted_digest(&out);
    // The reference commit, with its repository outside the tree.
    let refgit = env.tmp.path().join("ref.git");
    let tree = stage.join("tree");
    let with_ref = |args: &[&str]| {
        let mut c = git(&tree, &home, args);
        c.env("GIT_DIR", &refgit).env("GIT_WORK_TREE", &tree);
        c
    };
    exec(with_ref(&["init", "-q"]), &[0])?;
    exec(with_ref(&["add", "-A"]), &[0])?;
    exec(with_ref(&["commit", "-q", "-m", "uvfs bench"]), &[0])?;
    let (_, head) = exec(with_ref(&["rev-parse", "HEAD"]), &[0])?;
    let git_head = String::from_utf8_lossy(&head).trim().to_string();
    Ok(Prepared {
        source,
        stage,
        tar,
        manifest,
        find: find_expect,
        grep: grep_expect,
        git_head,
        cbuild,
        jobs,
        big,
        home,
        user: None,
    })
}

/// User + system CPU seconds of `who` (`RUSAGE_CHILDREN`: reaped children and their
/// reaped descendants; `RUSAGE_THREAD`: the calling thread).
fn rusage(who: libc::c_int) -> f64 {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The workload's own CPU so far: its reaped programs and this thread.
fn client_cpu() -> f64 {
    rusage(libc::RUSAGE_CHILDREN) + rusage(libc::RUSAGE_THREAD)
}

/// Times `f`, with the server's CPU and the workload's own over it. Only workload
/// commands are reaped meanwhile (servers are reaped when they stop), so the children's
/// CPU is theirs.
fn timed(site: &Site, f: impl FnOnce() -> Result<Duration, String>) -> Result<Sample, String> {
    if cleanup::interrupted() {
        return Err("interrupted".into());
    }
    let asked = site.requests();
    let before = site.cpu();
    let client = client_cpu();
    let d = f()?;
    let client_cpu = (client_cpu() - client).max(0.0);
    let server_cpu = before.zip(site.cpu()).map(|(a, b)| b.saturating_sub(a).as_secs_f64());
    let round_trips = asked.and_then(|a| Some(site.requests()?.waited().saturating_sub(a.waited())));
    Ok(Sample { seconds: d.as_secs_f64(), server_cpu, client_cpu, round_trips })
}

fn expect_same(what: &str, got: (usize, u64), want: (usize, u64)) -> Result<(), String> {
    if got == want {
        Ok(())
    } else if got.0 != want.0 {
        Err(format!("{what} printed {} lines, {} on the staged tree", got.0, want.0))
    } else {
        Err(format!("{what} printed different lines than on the staged tree"))
    }
}

/// Runs every workload on `site` in order. A failure ends the round: the workloads
/// after it are not run.
pub fn run_round(
    site: &mut Site,
    env: &Env,
    cold_words: &str,
    p: &Prepared,
    progress: &mut dyn FnMut(Workload),
) -> Vec<(Workload, Outcome)> {
    let mut out = Vec::new();
    if let Err((w, e)) = round(site, env, cold_words, p, progress, &mut out) {
        out.push((w, Outcome::Failed(e)));
    }
    out
}

fn round(
    site: &mut Site,
    env: &Env,
    cold_words: &str,
    p: &Prepared,
    progress: &mut dyn FnMut(Workload),
    out: &mut Vec<(Workload, Outcome)>,
) -> Result<(), (Workload, String)> {
    use Workload as W;
    let work = site.work.clone();
    let home = &p.home;
    let tree = work.join("tree");

    progress(W::Untar);
    if let Some(u) = p.user {
        std::os::unix::fs::chown(&work, Some(u), Some(u))
            .map_err(|e| (W::Untar, format!("giving {} to uid {u}: {e}", work.display())))?;
    }
    let s = timed(site, || {
        let mut t = clean("tar", &work, home);
        t.arg("-xf").arg(&p.tar);
        exec(as_user(t, p), &[0]).map(|r| r.0)
    })
    .map_err(|e| (W::Untar, e))?;
    Manifest::of(&tree, &cleanup::interrupted)
        .and_then(|m| m.compare(&p.manifest))
        .map_err(|e| (W::Untar, format!("the extracted tree differs: {e}")))?;
    // The programs ran as `--as-user`'s uid: the tree is its.
    if let Some(want) = p.user {
        let meta = std::fs::symlink_metadata(&tree).map_err(|e| (W::Untar, format!("{}: {e}", tree.display())))?;
        let owner = std::os::unix::fs::MetadataExt::uid(&meta);
        if owner != want {
            return Err((W::Untar, format!("the extracted tree is owned by uid {owner}, not {want}")));
        }
    }
    out.push((W::Untar, Outcome::Measured(s)));

    let find_once = |w: Workload, site: &Site| -> Result<Sample, (Workload, String)> {
        let mut got = (0, 0);
        let s = timed(site, || {
            let (d, o) = exec(as_user(find(&work, home), p), &[0])?;
            got = sorted_digest(&o);
            Ok(d)
        })
        .map_err(|e| (w, e))?;
        expect_same("find", got, p.find).map_err(|e| (w, e))?;
        Ok(s)
    };
    progress(W::FindWarm);
    let s = find_once(W::FindWarm, site)?;
    out.push((W::FindWarm, Outcome::Measured(s)));

    progress(W::FindCold);
    if site.cold(env).map_err(|e| (W::FindCold, format!("cold step: {e}")))? {
        let s = find_once(W::FindCold, site)?;
        out.push((W::FindCold, Outcome::Measured(s)));
    } else {
        out.push((W::FindCold, Outcome::NotApplicable(format!("cold: {cold_words}"))));
    }

    for w in [W::Grep1, W::Grep2] {
        progress(w);
        let mut got = (0, 0);
        let s = timed(site, || {
            let (d, o) = exec(as_user(grep(&work, home), p), &[0, 1])?;
            got = sorted_digest(&o);
            Ok(d)
        })
        .map_err(|e| (w, e))?;
        expect_same("grep", got, p.grep).map_err(|e| (w, e))?;
        out.push((w, Outcome::Measured(s)));
    }

    progress(W::GitCommit);
    let s = timed(site, || {
        let mut total = Duration::ZERO;
        for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-q", "-m", "uvfs bench"]] {
            total += exec(as_user(git(&tree, home, args), p), &[0])?.0;
        }
        Ok(total)
    })
    .map_err(|e| (W::GitCommit, e))?;
    exec(as_user(git(&tree, home, &["fsck", "--no-progress"]), p), &[0]).map_err(|e| (W::GitCommit, e))?;
    let (_, head) = exec(as_user(git(&tree, home, &["rev-parse", "HEAD"]), p), &[0]).map_err(|e| (W::GitCommit, e))?;
    let head = String::from_utf8_lossy(&head).trim().to_string();
    if head != p.git_head {
        return Err((W::GitCommit, format!("commit {head}, the same commit on the staged tree is {}", p.git_head)));
    }
    out.push((W::GitCommit, Outcome::Measured(s)));

    progress(W::GitStatus);
    let mut status = Vec::new();
    let s = timed(site, || {
        let (d, o) = exec(as_user(git(&tree, home, &["status", "--porcelain"]), p), &[0])?;
        status = o;
        Ok(d)
    })
    .map_err(|e| (W::GitStatus, e))?;
    if !status.is_empty() {
        let first = String::from_utf8_lossy(&status).lines().take(3).collect::<Vec<_>>().join(" | ");
        return Err((W::GitStatus, format!("git status is not clean after the commit: {first}")));
    }
    out.push((W::GitStatus, Outcome::Measured(s)));

    progress(W::Make);
    let cb = tree.join("cbuild");
    let s = timed(site, || {
        let mut m = clean("make", &cb, home);
        m.arg(format!("-j{}", p.jobs)).arg("-s");
        exec(as_user(m, p), &[0]).map(|r| r.0)
    })
    .map_err(|e| (W::Make, e))?;
    let (_, printed) = exec(as_user(clean(&cb.join(CBuild::PROGRAM).to_string_lossy(), &cb, home), p), &[0])
        .map_err(|e| (W::Make, e))?;
    let want = p.cbuild.expected_output();
    if printed != want.as_bytes() {
        return Err((
            W::Make,
            format!("the program printed {:?}, expected {want:?}", String::from_utf8_lossy(&printed)),
        ));
    }
    out.push((W::Make, Outcome::Measured(s)));

    progress(W::RmRf);
    let s = timed(site, || {
        let mut r = clean("rm", &work, home);
        r.args(["-rf", "tree"]);
        exec(as_user(r, p), &[0]).map(|r| r.0)
    })
    .map_err(|e| (W::RmRf, e))?;
    let left: Vec<String> = std::fs::read_dir(&work)
        .map_err(|e| (W::RmRf, format!("{}: {e}", work.display())))?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    if !left.is_empty() {
        return Err((W::RmRf, format!("left behind: {}", left.join(", "))));
    }
    out.push((W::RmRf, Outcome::Measured(s)));

    let big = work.join("big.bin");
    progress(W::SeqWrite);
    let s = timed(site, || p.big.write(&big, &cleanup::interrupted)).map_err(|e| (W::SeqWrite, e))?;
    out.push((W::SeqWrite, Outcome::Measured(s)));

    progress(W::SeqRead);
    site.cold(env).map_err(|e| (W::SeqRead, format!("cold step: {e}")))?;
    let s = timed(site, || p.big.read(&big, &cleanup::interrupted)).map_err(|e| (W::SeqRead, e))?;
    out.push((W::SeqRead, Outcome::Measured(s)));

    progress(W::RandRead);
    let s = timed(site, || p.big.random_reads(&big)).map_err(|e| (W::RandRead, e))?;
    out.push((W::RandRead, Outcome::Measured(s)));
    std::fs::remove_file(&big).map_err(|e| (W::RandRead, format!("removing {}: {e}", big.display())))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for w in Workload::ALL {
            assert_eq!(Workload::by_name(w.name()), Some(w));
            assert!(!w.title().is_empty());
        }
        assert_eq!(Workload::by_name("nope"), None);
    }

    #[test]
    fn sorted_digest_ignores_order_only() {
        assert_eq!(sorted_digest(b"b\na\n"), sorted_digest(b"a\nb"));
        assert_ne!(sorted_digest(b"a\nb\n"), sorted_digest(b"a\nc\n"));
        assert_eq!(sorted_digest(b"a\nb\nc\n").0, 3);
        assert!(expect_same("find", (2, 1), (3, 1)).unwrap_err().contains("2 lines, 3 on the staged tree"));
        assert!(expect_same("grep", (3, 1), (3, 2)).unwrap_err().contains("different lines"));
    }

    #[test]
    fn exec_reports_status_and_output() {
        let home = std::env::temp_dir();
        let mut c = clean("sh", &home, &home);
        c.args(["-c", "echo out; echo err >&2; exit 3"]);
        let e = exec(c, &[0]).unwrap_err();
        assert!(e.contains("exit status: 3") && e.contains("err"), "{e}");
        let mut c = clean("sh", &home, &home);
        c.args(["-c", "echo $LC_ALL $HOME; exit 1"]);
        let (_, out) = exec(c, &[0, 1]).unwrap();
        assert_eq!(String::from_utf8_lossy(&out).trim(), format!("C {}", home.display()));
    }
}
