//! `uvfs`: the command-line front of uvfs.
//!
//! Subcommands:
//! - `bench`: the seeds' benchmarks against the host kernel and uvfs (see the
//!   `uvfs-bench` crate docs, `uvfs bench --help`).
//! - `mount`: serve a uvfs instance through FUSE (the `uvfs-fuse` crate docs,
//!   `uvfs mount --help`).
//! - `run`: a command in a sandbox whose root is a uvfs tree (`uvfs run --help`).
//!
//! Each subcommand lives in its own crate and exposes a clap `Args` struct plus a `run`
//! function; this binary only dispatches.

use std::process::ExitCode;

/// mimalloc (through `uvfs-alloc`), not glibc's malloc: uvfs frees what it retires on whichever thread reclaims
/// it (the collector's batches), and glibc frees a chunk of another thread's arena under
/// that arena's lock, which serialized a two-thread cold scan (`uvfs bench --case
/// fstree`; the figures are in BENCHMARKS.md).
/// Wrapped in the bench's counting layer (a thread-local add per allocation, no shared
/// write), which gives `uvfs bench --case scale` the allocator's own byte counts.
#[global_allocator]
static GLOBAL: uvfs_bench::alloc::Counting<uvfs_alloc::Mimalloc> = uvfs_bench::alloc::Counting(uvfs_alloc::Mimalloc);

use clap::{Parser, Subcommand};

/// A Linux-compatible virtual filesystem layer in user space.
#[derive(Parser, Debug)]
#[command(name = "uvfs", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the benchmarks: each seed's loop on the host kernel, uvfs and uvfs with one
    /// fast path off; print comparison tables, write an SVG chart, or print JSON
    Bench(Box<uvfs_bench::BenchArgs>),
    /// Serve a uvfs instance through the kernel's FUSE on MOUNTPOINT (foreground until
    /// Ctrl-C or SIGTERM, which unmount; or --daemon)
    Mount(uvfs_fuse::MountArgs),
    /// Run a command with a uvfs tree as its root, without root privileges: a
    /// copy-on-write view of host directories (--overlay /: of the whole host) whose
    /// changes stay in memory (--export writes them as a layer tar)
    Run(uvfs_fuse::run::RunArgs),
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. The soft limit is often 1,024 for
/// programs that do not raise it; hostfs sizes its descriptor cache from it (a quarter,
/// see `uvfs::fs::hostfs::HostFsOptions::descriptor_limit`; three quarters for `uvfs mount
/// --fs host:DIR`), and a FUSE server holds a host descriptor for each file open through
/// the mount. Best effort: a hard limit
/// the kernel refuses as a soft one (above `fs.nr_open`) leaves the soft one as it was.
fn raise_nofile_limit() {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: lim.maximum, maximum: lim.maximum });
    }
}

fn main() -> ExitCode {
    raise_nofile_limit();
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => uvfs_bench::run(*args),
        Command::Mount(args) => uvfs_fuse::run(args),
        Command::Run(args) => uvfs_fuse::run::run(args),
    }
}
