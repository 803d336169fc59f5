//! `uvfs bench --case workloads`: real programs through `uvfs mount`, side by side with
//! tmpfs and a host directory.
//!
//! Every program that is not Rust code embedding uvfs (git, tar, compilers, grep) reaches
//! uvfs through the FUSE server. This case measures what its users feel: the real
//! programs, as child processes, on a source tree, on each target in turn, so each
//! kernel lever of the FUSE server (cache timeouts, `FOPEN_KEEP_CACHE`, writeback cache,
//! passthrough, io_uring, fewer round trips) can be measured on and off with
//! `--mount-opt`, without code changes.
//!
//! # The tree
//!
//! Generated deterministically ([`tree`]): 10 000 files and 150 MB (`--quick`: 2 000 and
//! 30 MB) with a source tree's shape and size distribution, text contents, a few
//! symlinks; plus a C project of 300 (`--quick`: 66) small units for `make -j`. Or a copy
//! of a real tree with `--tree DIR`. Both are staged once on the tmpfs (`--tmpfs`,
//! `/dev/shm`) and archived there with `tar`; every expected result is computed on the
//! stage first ([`steps::prepare`]).
//!
//! # Targets ([`targets`])
//!
//! `tmpfs` and `hostdir` (a directory on the host disk, `--hostdir`, `/var/tmp`) are the
//! references: the physical limit and the disk. `uvfs-memfs`, `uvfs-hostfs` and
//! `uvfs-hostfs-unchanged` are `uvfs mount` (memfs; `--fs host:DIR`; with
//! `--host-unchanged`) run as a separate process, the `uvfs` binary itself (or
//! `--uvfs-bin`), in the foreground, with every `--mount-opt` appended
//! ([`daemon`]). `--target-cmd NAME='CMD'` adds a peer FUSE server: CMD (run with
//! `sh -c`) must mount on `{mnt}` and stay in the foreground; with `{src}` in it, it
//! serves that fresh host directory (then it is compared with `hostdir` too and its cold
//! step is a remount). Example with bindfs (`apt-get install bindfs`):
//!
//! ```text
//! uvfs bench --case workloads --target-cmd bindfs='bindfs -f --no-allow-other {src} {mnt}'
//! ```
//!
//! `--target` picks targets by name (built-in or `--target-cmd` names); by default all run.
//!
//! A `--hostdir` on an ext4 without a journal is named in the report
//! ([`ext4_without_journal`]): there each create passes over the inodes deleted in the
//! last minutes, so the host-backed untars, which follow the previous round's `rm -rf`,
//! carry a scan whose length the rounds' order decides (BENCHMARKS.md measures it).
//!
//! `--as-user UID` starts every program of a round as that uid (gid the same number, no
//! supplementary groups; the round gives it the target's directory first, and checks
//! that the extracted tree is its): what a mount costs a caller other than root, whose
//! requests a FUSE server handles differently (its groups are not in the protocol). The
//! big-file rows stay the bench's own calls. A peer server must let other users in
//! (`allow_other`).
//!
//! # Rounds
//!
//! A round of a target is a fresh directory (a fresh mount for mount targets) and every
//! workload in order ([`steps`]): `untar`, `find-warm`, `find-cold`, `grep-1`, `grep-2`,
//! `git-commit`, `git-status`, `make`, `rm-rf`, `seq-write` (1 GiB, `--quick` 256 MiB,
//! with `fsync`), `seq-read` (after a second cold step), `rand-read` (20 000, `--quick`
//! 5 000, 4 KiB `pread`s). Rounds are interleaved across targets (round 1 on every
//! target, then round 2, ...) so drifting background load spreads over all of them;
//! `--samples` sets their number (3; `--quick`: 2), `--threads` the `make -j` (cores).
//! The cold step per target: none for tmpfs (its rows say n/a), `drop_caches` for
//! hostdir and memfs mounts, restart of the server plus `drop_caches` for host-backed
//! mounts.
//!
//! Each workload is timed (wall clock, from spawning the command until it is reaped),
//! with the FUSE server's user + system CPU time over the same span (from
//! `/proc/PID/stat`) and, for the uvfs targets, the FUSE requests whose reply a caller
//! waited for (the server started with `--stats` and asked for its counts with
//! `SIGUSR1` before and after, untimed; [`daemon::Requests`]); each fresh uvfs mount
//! also times an empty round trip ([`targets::Site::round_trip_us`]). Then it is
//! checked, untimed: a wrong result (a tree that differs from
//! the staged one, a commit other than the one made on the stage, a program printing the
//! wrong checksum, data read back that differs) marks the workload FAILED for that
//! target, never a time, ends the target's runs and makes the exit status 1.
//!
//! # Output
//!
//! Tables of median seconds with the ratio to tmpfs, host-backed targets against
//! hostdir, and the servers' CPU seconds ([`crate::report::workloads`], which also
//! documents the `--json` layout); an SVG chart of speed relative to tmpfs
//! (`bench-results/uvfs-workloads.svg`, [`crate::chart::workloads`]).
//!
//! # Cost
//!
//! On the project's 2-core VM with `uvfs mount` as it was when this case was written,
//! with other work on the machine: `--quick` about 2-3 minutes, the full run 10-15
//! minutes (see BENCHMARKS.md).
//!
//! # Nothing left behind
//!
//! Scratch directories (`<tmpfs>/uvfs-workloads.PID.N`, `<hostdir>/uvfs-workloads.PID.N`),
//! servers and mounts are RAII guards and are released on every exit, Ctrl-C included
//! ([`cleanup`]).

pub mod bigfile;
pub mod cleanup;
pub mod daemon;
pub mod manifest;
pub mod steps;
pub mod targets;
pub mod tree;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{BenchArgs, UsageError};
use crate::report::Machine;
use crate::report::workloads::{RoundOutcome, TargetInfo, TreeInfo, WorkloadsConfig, WorkloadsReport};
use cleanup::ScratchDir;
use steps::{Outcome, Source, Workload};
use targets::{Env, Kind, Site, Target};
use tree::{CBuild, TreeSpec};

/// The chart path when `--chart` is not given.
pub const DEFAULT_CHART: &str = "bench-results/uvfs-workloads.svg";

/// The programs the workloads run, with the Debian package of each.
pub const TOOLS: &[(&str, &str)] = &[
    ("tar", "tar"),
    ("find", "findutils"),
    ("grep", "grep"),
    ("git", "git"),
    ("make", "make"),
    ("cc", "gcc"),
    ("rm", "coreutils"),
    ("cp", "coreutils"),
];

/// A target of the run: to run, or skipped (why).
#[derive(Clone, Debug)]
pub struct Planned {
    /// The target.
    pub target: Target,
    /// Why it does not run, if it does not.
    pub skip: Option<String>,
}

/// Resolved options.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--quick`.
    pub quick: bool,
    /// Rounds per target.
    pub rounds: usize,
    /// The tree.
    pub source: Source,
    /// The C project.
    pub cbuild: CBuild,
    /// `make -j`.
    pub jobs: usize,
    /// Big file size in MiB.
    pub big_mib: u64,
    /// Random reads.
    pub reads: usize,
    /// Targets in column order.
    pub targets: Vec<Planned>,
    /// The tmpfs directory.
    pub tmpfs: PathBuf,
    /// The host-disk directory.
    pub hostdir: PathBuf,
    /// The `uvfs` binary.
    pub uvfs_bin: PathBuf,
    /// Extra `uvfs mount` arguments.
    pub mount_opts: Vec<String>,
    /// `--as-user`: the uid (and gid) the programs run as.
    pub as_user: Option<u32>,
    /// `--json`.
    pub json: bool,
    /// Chart path.
    pub chart: PathBuf,
}

/// The path of `bin` in `PATH`, if any.
fn which(bin: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(bin))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Why FUSE mounts cannot be made here, if they cannot.
fn fuse_blocker() -> Option<String> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (modprobe fuse)".into());
    }
    if !is_root() && which("fusermount3").is_none() {
        return Some("not root and no fusermount3 (apt-get install fuse3)".into());
    }
    None
}

/// Checks the options. `tmpfs_check` says whether a directory is on a tmpfs (a parameter
/// so tests need no particular machine); `tools_check` which programs are missing.
pub fn options(
    args: &BenchArgs,
    cores: usize,
    tmpfs_check: impl Fn(&Path) -> Result<(), String>,
    tools_check: impl Fn(&[(&str, &str)]) -> Vec<(String, String)>,
) -> Result<Options, UsageError> {
    let bad = |s: String| Err(UsageError(s));
    if args.seconds.is_some() || args.warmup.is_some() {
        return bad("--seconds and --warmup do not apply to --case workloads (--samples sets the rounds)".into());
    }
    let tmpfs = if args.tmpfs.as_os_str().is_empty() { PathBuf::from("/dev/shm") } else { args.tmpfs.clone() };
    tmpfs_check(&tmpfs).map_err(|e| UsageError(format!("--tmpfs: {e} (the tree is staged there)")))?;
    let hostdir = args.hostdir.clone().unwrap_or_else(|| PathBuf::from("/var/tmp"));
    if !hostdir.is_dir() {
        return bad(format!("--hostdir {} is not a directory", hostdir.display()));
    }
    let source = match &args.tree {
        Some(_) if args.tree_files.is_some() => return bad("--tree and --tree-files exclude each other".into()),
        Some(d) if !d.is_dir() => return bad(format!("--tree {} is not a directory", d.display())),
        Some(d) => {
            Source::Dir(std::fs::canonicalize(d).map_err(|e| UsageError(format!("--tree {}: {e}", d.display())))?)
        }
        None => Source::Generated(match args.tree_files {
            Some(n) => TreeSpec::with_files(n as usize),
            None if args.quick => TreeSpec::quick(),
            None => TreeSpec::full(),
        }),
    };
    let units = match &source {
        Source::Generated(spec) => spec.units,
        Source::Dir(_) if args.quick => TreeSpec::quick().units,
        Source::Dir(_) => TreeSpec::full().units,
    };
    let mut missing = tools_check(TOOLS);
    if args.tree.is_none() {
        missing.retain(|(t, _)| t != "cp");
    }
    if !missing.is_empty() {
        let tools: Vec<&str> = missing.iter().map(|(t, _)| t.as_str()).collect();
        let pkgs: Vec<&str> = missing.iter().map(|(_, p)| p.as_str()).collect();
        return bad(format!("missing {}: apt-get install {}", tools.join(", "), pkgs.join(" ")));
    }

    // Targets: the built-ins, then the peers, in that order.
    let mut all: Vec<Target> = targets::BUILTIN.iter().filter_map(|n| Target::builtin(n)).collect();
    for spec in &args.target_cmds {
        let p = Target::peer(spec).map_err(UsageError)?;
        if all.iter().any(|t| t.name == p.name) {
            return bad(format!("--target-cmd: {} is given twice", p.name));
        }
        all.push(p);
    }
    // `{mnt}` and `{src}` are pasted into a shell command line as they are.
    let plain = |p: &Path| p.to_string_lossy().chars().all(|c| c.is_ascii_alphanumeric() || "/._-+".contains(c));
    if !args.target_cmds.is_empty() && !plain(&hostdir) {
        return bad(format!(
            "--target-cmd needs a --hostdir without spaces or shell characters, not {}",
            hostdir.display()
        ));
    }
    let named: Vec<String> = args.targets.iter().map(|t| t.trim().to_string()).collect();
    for n in &named {
        if !all.iter().any(|t| &t.name == n) {
            let known: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
            return bad(format!("unknown workloads target '{n}' (known: {})", known.join(", ")));
        }
    }
    if !named.is_empty() {
        all.retain(|t| named.contains(&t.name));
    }
    let uvfs_bin = match &args.uvfs_bin {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(|e| UsageError(format!("cannot find this program: {e}")))?,
    };
    let fuse = fuse_blocker();
    let mut planned = Vec::new();
    for t in all {
        let skip = match &t.kind {
            Kind::Uvfs(_) | Kind::Peer(_) if fuse.is_some() => fuse.clone(),
            Kind::Uvfs(_) if !uvfs_bin.is_file() => Some(format!("--uvfs-bin {} is not a file", uvfs_bin.display())),
            _ => None,
        };
        if let Some(why) = &skip
            && !named.is_empty()
        {
            return bad(format!("target {} cannot run: {why}", t.name));
        }
        planned.push(Planned { target: t, skip });
    }
    if args.as_user.is_some() && !is_root() {
        return bad("--as-user needs root (each program is started as that user)".into());
    }
    let rounds = args.samples.map(|n| n as usize).unwrap_or(if args.quick { 2 } else { 3 });
    let chart = args.chart.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_CHART));
    crate::cli::check_chart_path(&chart)?;
    Ok(Options {
        quick: args.quick,
        rounds,
        source,
        cbuild: CBuild { units, seed: tree::SEED },
        jobs: args.threads.map(|n| n as usize).unwrap_or(cores.max(1)),
        big_mib: args.big_file_mib.unwrap_or(if args.quick { 256 } else { 1024 }),
        reads: if args.quick { 5_000 } else { 20_000 },
        targets: planned,
        tmpfs,
        hostdir,
        uvfs_bin,
        mount_opts: args.mount_opts.clone(),
        as_user: args.as_user,
        json: args.json,
        chart,
    })
}

/// The device name of `dir`'s filesystem if it is an ext4 without a journal. There a
/// create passes over the free inodes deleted in the last minute, one buffer lookup each
/// (five minutes more while their inode table block is not written back:
/// `recently_deleted` in Linux's fs/ext4/ialloc.c), so a host directory's creates right
/// after many deletes (a round's untar after the previous round's `rm -rf`) cost more the
/// more was deleted just before, in the host's own time.
pub fn ext4_without_journal(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir).ok()?.dev();
    let uevent =
        std::fs::read_to_string(format!("/sys/dev/block/{}:{}/uevent", libc::major(dev), libc::minor(dev))).ok()?;
    let name = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME="))?;
    // Only filesystems of the ext4 driver have this directory; its `journal_task` names
    // the journal's thread, or says `<none>`.
    let journal = std::fs::read_to_string(format!("/sys/fs/ext4/{name}/journal_task")).ok()?;
    (journal.trim() == "<none>").then(|| name.to_string())
}

/// The programs of `tools` that are not in `PATH`.
pub fn missing_tools(tools: &[(&str, &str)]) -> Vec<(String, String)> {
    tools.iter().filter(|(t, _)| which(t).is_none()).map(|(t, p)| (t.to_string(), p.to_string())).collect()
}

/// 1-minute load average (other work on the machine while measuring).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split(' ').next()?.parse().ok()
}

/// Progress on stderr: a bar on a terminal, else a line per target round (none with
/// `--json`).
struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
}

impl Progress {
    fn new(json: bool, total: u64) -> Progress {
        if json {
            return Progress { bar: None, lines: false };
        }
        if !std::io::stderr().is_terminal() {
            return Progress { bar: None, lines: true };
        }
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.enable_steady_tick(Duration::from_millis(200));
        Progress { bar: Some(b), lines: false }
    }

    fn say(&self, msg: &str) {
        match &self.bar {
            Some(b) => b.set_message(msg.to_string()),
            None if self.lines => eprintln!("workloads: {msg}"),
            None => {}
        }
    }

    fn step(&self, msg: &str) {
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
            b.inc(1);
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// `uvfs bench --case workloads`. Exit status: 0, 1 (a run failed or the chart could
/// not be written), 2 (bad options), 130 (interrupted).
pub fn main(args: &BenchArgs) -> ExitCode {
    cleanup::install();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let o = match options(args, cores, crate::backend::check_tmpfs, missing_tools) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("uvfs bench: error: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(report) => output(&o, &report),
        Err(e) if cleanup::interrupted() => {
            eprintln!("uvfs bench: interrupted ({e}); everything is cleaned up");
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("uvfs bench: workloads: {e}");
            ExitCode::from(1)
        }
    }
}

/// Stages the tree and runs every round of every target.
pub fn run(o: &Options) -> Result<WorkloadsReport, String> {
    let running: Vec<&Target> = o.targets.iter().filter(|p| p.skip.is_none()).map(|p| &p.target).collect();
    let progress = Progress::new(o.json, (o.rounds * running.len() * Workload::ALL.len()) as u64);
    static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tag = format!("uvfs-workloads.{}.{n}", std::process::id());
    let env = Env {
        tmp: ScratchDir::create(o.tmpfs.join(&tag))?,
        host: ScratchDir::create(o.hostdir.join(&tag))?,
        uvfs_bin: o.uvfs_bin.clone(),
        mount_opts: o.mount_opts.clone(),
        can_drop: is_root(),
        counts: Env::counts_supported(&o.uvfs_bin),
    };
    let load_before = load_average();
    let big = bigfile::BigFile::new(o.big_mib, o.reads, tree::SEED);
    let mut prep = steps::prepare(&env, o.source.clone(), o.cbuild, o.jobs, big, &|m| progress.say(m))?;
    prep.user = o.as_user;

    let mut rounds: Vec<RoundOutcome> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for round in 1..=o.rounds {
        for t in &running {
            if failed.contains(&t.name) {
                continue;
            }
            if cleanup::interrupted() {
                return Err("interrupted".into());
            }
            progress.say(&format!("round {round}/{} {}", o.rounds, t.name));
            let cold = t.cold_words(env.can_drop);
            let mut round_trip_us = None;
            let outcomes = match Site::open(t, &env, round) {
                Err(e) => vec![(Workload::Untar, Outcome::Failed(format!("setting up: {e}")))],
                Ok(mut site) => {
                    round_trip_us = site.round_trip_us();
                    let mut outcomes = steps::run_round(&mut site, &env, cold, &prep, &mut |w| {
                        progress.step(&format!("round {round}/{} {} {}", o.rounds, t.name, w.name()))
                    });
                    if let Err(e) = site.close() {
                        outcomes.push((Workload::RandRead, Outcome::Failed(format!("tearing down: {e}"))));
                    }
                    outcomes
                }
            };
            if cleanup::interrupted() {
                return Err("interrupted".into());
            }
            if outcomes.iter().any(|(_, o)| matches!(o, Outcome::Failed(_))) {
                failed.push(t.name.clone());
            }
            rounds.push(RoundOutcome { target: t.name.clone(), round, outcomes, round_trip_us });
        }
    }
    progress.finish();

    let (dirs, files, symlinks, bytes) = prep.manifest.counts();
    let config = WorkloadsConfig {
        quick: o.quick,
        rounds: o.rounds,
        tree: TreeInfo {
            source: match &o.source {
                Source::Generated(_) => "generated".into(),
                Source::Dir(d) => d.display().to_string(),
            },
            seed: matches!(o.source, Source::Generated(_)).then_some(tree::SEED),
            dirs,
            files,
            symlinks,
            bytes,
        },
        c_units: o.cbuild.units,
        make_jobs: o.jobs,
        big_file_bytes: prep.big.bytes,
        random_reads: o.reads,
        mount_opts: o.mount_opts.clone(),
        as_user: o.as_user,
        uvfs_bin: o.uvfs_bin.display().to_string(),
        tmpfs: o.tmpfs.display().to_string(),
        hostdir: o.hostdir.display().to_string(),
        hostdir_ext4_no_journal: ext4_without_journal(&o.hostdir),
        drop_caches: env.can_drop,
        load_average: [load_before, load_average()],
    };
    let infos = o
        .targets
        .iter()
        .map(|p| TargetInfo {
            target: p.target.name.clone(),
            kind: match p.target.kind {
                Kind::Tmpfs => "tmpfs",
                Kind::HostDir => "hostdir",
                Kind::Uvfs(_) => "uvfs",
                Kind::Peer(_) => "peer",
            },
            command: p.target.command_words(&env),
            cold: p.target.cold_words(env.can_drop).to_string(),
            host_backed: p.target.host_backed(),
            skipped: p.skip.clone(),
            round_trip_us: None,
        })
        .collect();
    Ok(WorkloadsReport::build(Machine::detect(), config, infos, &rounds))
}

/// Prints the tables or JSON and writes the chart; the exit status.
fn output(o: &Options, report: &WorkloadsReport) -> ExitCode {
    let mut status = if report.any_failed() { 1 } else { 0 };
    if o.json {
        match serde_json::to_string_pretty(report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("uvfs bench: error: cannot serialise the report: {e}");
                status = 1;
            }
        }
    } else {
        let m = &report.machine;
        println!(
            "uvfs bench --case workloads: {} cores{}, Linux {}, uvfs {}",
            m.cores,
            m.cpu.as_deref().map(|c| format!(" ({c})")).unwrap_or_default(),
            m.kernel,
            m.uvfs_version
        );
        println!("{}", crate::report::workloads::render(report));
    }
    match std::fs::write(&o.chart, crate::chart::workloads::render(report)) {
        Ok(()) if !o.json => println!("chart: {}", o.chart.display()),
        Ok(()) => {}
        Err(e) => {
            eprintln!("uvfs bench: error: cannot write chart {}: {e}", o.chart.display());
            status = 1;
        }
    }
    if status != 0 && !o.json {
        eprintln!("uvfs bench: some runs FAILED (see above)");
    }
    ExitCode::from(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> BenchArgs {
        // Accepted by the chart check, and leaves no file behind.
        Cli::try_parse_from(["bench", "--case", "workloads", "--chart", "/dev/null"].iter().chain(args.iter()).copied())
            .unwrap()
            .bench
    }

    fn plan(args: &[&str]) -> Result<Options, UsageError> {
        options(&parse(args), 2, |_| Ok(()), |_| vec![])
    }

    fn names(o: &Options) -> Vec<(&str, bool)> {
        o.targets.iter().map(|p| (p.target.name.as_str(), p.skip.is_none())).collect()
    }

    #[test]
    fn only_ext4_can_lack_a_journal() {
        // tmpfs and procfs have no ext4 directory in /sys (and no block device).
        assert_eq!(ext4_without_journal(Path::new("/dev/shm")), None);
        assert_eq!(ext4_without_journal(Path::new("/proc")), None);
        assert_eq!(ext4_without_journal(Path::new("/nonexistent-uvfs-dir")), None);
    }

    #[test]
    fn defaults_full_and_quick() {
        let o = plan(&[]).unwrap();
        assert_eq!((o.rounds, o.big_mib, o.reads, o.jobs), (3, 1024, 20_000, 2));
        assert_eq!(o.source, Source::Generated(TreeSpec::full()));
        assert_eq!(o.cbuild.units, 300);
        assert_eq!(o.hostdir, PathBuf::from("/var/tmp"));
        assert_eq!(o.tmpfs, PathBuf::from("/dev/shm"));
        assert_eq!(o.targets.len(), 5);
        assert_eq!(o.uvfs_bin, std::env::current_exe().unwrap());
        let q = plan(&["--quick", "--samples", "1", "--threads", "3"]).unwrap();
        assert_eq!((q.rounds, q.big_mib, q.reads, q.jobs), (1, 256, 5_000, 3));
        assert_eq!(q.source, Source::Generated(TreeSpec::quick()));
        let t = plan(&["--quick", "--tree-files", "40", "--big-file-mib", "2"]).unwrap();
        assert_eq!(t.source, Source::Generated(TreeSpec::with_files(40)));
        assert_eq!(t.big_mib, 2);
    }

    #[test]
    fn targets_peers_and_mount_options() {
        let o = plan(&[
            "--target",
            "tmpfs,bindfs",
            "--target-cmd",
            "bindfs=bindfs -f {src} {mnt}",
            "--mount-opt",
            "--attr-timeout=60",
            "--mount-opt=--entry-timeout=60",
        ])
        .unwrap();
        let fuse = fuse_blocker().is_none();
        assert_eq!(names(&o), [("tmpfs", true), ("bindfs", fuse)]);
        assert_eq!(o.mount_opts, ["--attr-timeout=60", "--entry-timeout=60"]);
        let all = plan(&["--target-cmd", "x=srv {mnt}"]).unwrap();
        assert_eq!(all.targets.last().unwrap().target.name, "x");
        assert_eq!(all.targets.len(), 6);
    }

    #[test]
    fn bad_options_are_one_line() {
        for (args, needle) in [
            (&["--target", "kernel"][..], "unknown workloads target 'kernel'"),
            (&["--target-cmd", "tmpfs=x {mnt}"], "built-in"),
            (&["--target-cmd", "a=x {mnt}", "--target-cmd", "a=y {mnt}"], "given twice"),
            (&["--seconds", "1"], "do not apply"),
            (&["--tree", "/nonexistent-uvfs-tree"], "is not a directory"),
            (&["--hostdir", "/nonexistent-uvfs-dir"], "is not a directory"),
            (&["--tree", "/", "--tree-files", "3"], "exclude each other"),
            (&["--uvfs-bin", "/nonexistent-uvfs", "--target", "uvfs-memfs"], "cannot run"),
        ] {
            let e = plan(args).unwrap_err();
            assert!(e.0.contains(needle), "{args:?}: {e}");
        }
        let spaced = std::env::temp_dir().join(format!("uvfs bench {}", std::process::id()));
        std::fs::create_dir_all(&spaced).unwrap();
        let e = plan(&["--target-cmd", "a=x {mnt}", "--hostdir", &spaced.to_string_lossy()]).unwrap_err();
        std::fs::remove_dir(&spaced).unwrap();
        assert!(e.0.contains("without spaces"), "{e}");
        let e = options(&parse(&[]), 2, |p| Err(format!("{} is no tmpfs", p.display())), |_| vec![]).unwrap_err();
        assert!(e.0.contains("/dev/shm is no tmpfs"), "{e}");
        let e = options(&parse(&[]), 2, |_| Ok(()), |_| vec![("git".into(), "git".into())]).unwrap_err();
        assert_eq!(e.0, "missing git: apt-get install git");
    }
}
