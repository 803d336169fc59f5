//! `uvfs bench`: the seeds' measurements, run side by side on the host kernel and uvfs.
//!
//! Each case of `shared/seeds/` is a loop (a failed open, a readlink, a deep stat, ...)
//! that this crate runs, in one invocation, against several *targets*: the host `kernel`
//! (real syscalls on a fresh directory of a tmpfs, `/dev/shm` by default), `uvfs`
//! in-process with every fast path on, and `uvfs-no-*` with one fast path switched off
//! (`uvfs::FastPaths`), so each table shows both "uvfs vs the kernel" and "what this
//! fast path is worth". A `fuse` target is declared for when `uvfs mount` exists.
//!
//! # Method
//!
//! - **Throughput cases** (ops/s), will-it-scale style ([`harness`]): N worker threads
//!   each loop over one call and bump their own counter, a `#[repr(align(128))]`
//!   [`harness::PaddedCounter`] (no shared write from counting). The main thread samples
//!   the sum every `--seconds` (1 s; 0.25 s with `--quick`), drops the first `--warmup`
//!   samples and keeps `--samples` (2 + 5; `--quick`: 1 + 8). Every call's result is
//!   checked (ENOENT for openneg, the link length for readlink, ...): a wrong answer
//!   fails the run instead of being counted.
//! - **Wall-time cases** (seconds): `messaging` runs a fixed amount of work per
//!   iteration and reports each iteration's time, with the same warm-up and sample
//!   counts.
//! - Kernel workers are threads, not processes: each `unshare(CLONE_FS)`s and `chdir`s
//!   into the benchmark directory, so paths are walked from a private cwd as in a
//!   separate process, but the fd table is shared (will-it-scale's `_threads` mode). A
//!   uvfs worker is a `uvfs::Task` of its own, which is what a process is to uvfs. See
//!   [`backend`].
//! - Non-owner credentials on the kernel side need root (per-thread `setfsuid`); without
//!   root those rows are skipped with that reason.
//!
//! # Reading the output
//!
//! One table per case: mean, standard deviation (as % of the mean), min .. max, number of
//! samples, the baseline (`vs`) and the change of the mean against it. Baselines: `uvfs`
//! (and later `fuse`) against `kernel`; each `uvfs-no-*` against `uvfs`. A `*` marks a
//! change outside the noise by Welch's t-test at 95% over at least 5 samples per side
//! ([`stats`]); `?` means too few samples to tell. `stat2` adds the scaling ratio
//! ops(N threads) / ops(1 thread). Targets that cannot run are listed as skipped with the
//! reason; runs that fail (a wrong result, a panic, a hang) are listed as FAILED and make
//! the exit status 1. `--json` prints the same data for programs ([`report`] documents
//! the schema); an SVG chart goes to `--chart` (default `bench-results/uvfs-bench.svg`,
//! see [`chart`]).
//!
//! # How cost grows: `--case scale`
//!
//! A case group with its own runner ([`scale`]): memory per empty file (the allocator's
//! own byte counts through [`alloc`], and RSS), creates and unlinks, a huge directory,
//! deep cached paths, each on uvfs in-process and on the kernel's tmpfs; sizes are
//! options (`--scale-files`, `--scale-big-dir`), `--quick` a tenth.
//!
//! # Real workloads: `--case workloads`
//!
//! A case group with its own runner ([`workloads`]): real programs (tar, find, grep,
//! git, make, rm, a big file) on a generated source tree, timed on `tmpfs`, `hostdir`
//! and `uvfs mount` run as a separate process (`uvfs-memfs`, `uvfs-hostfs`,
//! `uvfs-hostfs-unchanged`), every result checked. `--mount-opt ARG` goes to every
//! `uvfs mount` (to measure one FUSE lever on and off); `--target-cmd NAME='CMD'` adds a
//! peer FUSE server, CMD mounting on `{mnt}` in the foreground, serving `{src}` if it
//! names it:
//!
//! ```text
//! uvfs bench --case workloads --quick --mount-opt=--attr-timeout=60
//! uvfs bench --case workloads --target-cmd bindfs='bindfs -f --no-allow-other {src} {mnt}'
//! ```
//!
//! # Profiling a case
//!
//! Run one case on one target long enough for `perf`:
//!
//! ```text
//! cargo build --release -p uvfs-cli
//! perf record -g -- target/release/uvfs bench --case stat --target uvfs --seconds 2
//! perf report
//! ```
//!
//! The release profile keeps line tables (`debug = 1`), so `perf report` resolves uvfs
//! frames. `--target kernel` profiles the host's side of the same loop.
//!
//! # Exit status
//!
//! 0: every run measured; 1: some run failed (see the FAILED lines), or the chart could
//! not be written; 2: bad options (unknown case or target, bad number, a named target
//! that cannot run such as `--target kernel` without a tmpfs or `--target fuse`);
//! 130: `--case workloads` interrupted (Ctrl-C), after cleaning up.

pub mod alloc;
pub mod backend;
pub mod cases;
pub mod chart;
pub mod cli;
pub mod fstree;
pub mod harness;
pub mod report;
pub mod run;
pub mod scale;
pub mod stats;
pub mod target;
pub mod workloads;

use std::process::ExitCode;

pub use cli::BenchArgs;

/// Runs `uvfs bench` with parsed arguments and returns the process exit status.
pub fn run(args: BenchArgs) -> ExitCode {
    // fstree has its own runner (a tree on the host, cold instances per run): asked for
    // alone by name.
    if args.cases.len() == 1 && args.cases[0].trim() == "fstree" {
        return fstree::main(&args.tmpfs, args.threads.map(|n| n as usize), args.quick, args.json);
    }
    // So has scale (how cost grows with the number of files).
    if args.cases.len() == 1 && args.cases[0].trim() == "scale" {
        let n = |v: Option<u64>| v.map(|x| x as usize);
        return scale::main(&args.tmpfs, args.quick, args.json, n(args.scale_files), n(args.scale_big_dir));
    }
    // So has workloads (real programs on tmpfs, a host dir and `uvfs mount`).
    if args.cases.len() == 1 && args.cases[0].trim() == "workloads" {
        return workloads::main(&args);
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let plan = match cli::plan(&args, cores, backend::check_tmpfs) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("uvfs bench: error: {e}");
            return ExitCode::from(2);
        }
    };
    let ui = run::Ui::new(plan.settings.json);
    let report = run::execute(&plan, &ui);
    let mut status = if report.cases.iter().any(|c| !c.failed.is_empty()) { 1 } else { 0 };

    let chart = &plan.settings.chart;
    match std::fs::write(chart, chart::render(&report)) {
        Ok(()) => {
            if !plan.settings.json {
                println!("chart: {}", chart.display());
            }
        }
        Err(e) => {
            eprintln!("uvfs bench: error: cannot write chart {}: {e}", chart.display());
            status = 1;
        }
    }
    if plan.settings.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("uvfs bench: error: cannot serialise the report: {e}");
                status = 1;
            }
        }
    } else if status != 0 {
        eprintln!("uvfs bench: some runs FAILED (see above)");
    }
    ExitCode::from(status)
}

/// Serializes this crate's unit tests that mount through FUSE. One of them checks that no
/// mount of this process is left when it ends, which another test's mount, live at that
/// moment in a parallel test thread, would fail (`/uvfs-bench-fuse.<pid>.<n>` names both).
#[cfg(test)]
pub(crate) static FUSE_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());
