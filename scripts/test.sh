#!/usr/bin/env bash
# The test command: sets up what is missing, then runs every check CI runs.
#   format, lints, the whole workspace's tests (unit, differential against the host
#   kernel, allocation/lock counts, concurrency), the loom models of the sequence-count
#   handoff, Miri on the core's unsafe primitives, and the concurrency stress tests under
#   valgrind (use-after-free check): the
#   core's, and host changes racing hostfs walks (cached directories dropped and pruned
#   while lockless walks stand in them).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo doc (the core crate's docs are its map: no broken links)"
RUSTDOCFLAGS="-D warnings" cargo doc -p uvfs -p uvfs-fuse --no-deps
echo "== cargo test"
cargo test --workspace
echo "== loom models (seqcount)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p uvfs --lib seqcount --release
echo "== Miri: the core's unsafe primitives and the instance teardown"
# .cargo/config.toml's runner (scripts/runner) is set for this triple, which takes
# precedence over the `cfg(all())` runner cargo-miri sets: give Miri its own back.
host=$(rustc -vV | sed -n 's/^host: //p')
runner_var="CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_RUNNER"
export "$runner_var=$(rustup which --toolchain nightly-2026-10-30 cargo-miri) runner"
# Unit tests of rcu (borrows tied to guard and cell, the orphans' domain), seqcount
# (unwinding writers), rhashtable, the children table (`dhash`: write-once slots read by
# another thread while the writer rebuilds), the lock-order checker, a dentry name kept inline or
# on the heap, a Vfs dropped while files and watches outlive it, path cache entries
# outliving what they name (`vfs::tests::path_cache_*`: a hit reads a dentry it holds no
# count on), and the inode's slot that each type uses for its own (a union). Isolation
# off: the tables seed from getrandom.
MIRIFLAGS="-Zmiri-disable-isolation" cargo +nightly-2026-10-30 miri test -p uvfs --lib -- \
  rcu:: seqcount:: rhashtable:: dhash:: sync:: vfs:: dentry:: inode::tests::each_type
# The children table's reader thread under several schedules: a data race there shows in
# some seeds only (a tag loaded with acquire instead of the collector's SeqCst did).
MIRIFLAGS="-Zmiri-disable-isolation -Zmiri-many-seeds=0..8" cargo +nightly-2026-10-30 miri test -p uvfs --lib -- \
  dhash::tests::lockless
unset "$runner_var"
echo "== concurrency stress under valgrind"
bin=$(cargo test -p uvfs --test concurrency --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
UVFS_STRESS_ITERS=2000 scripts/runner valgrind -q --fair-sched=yes --error-exitcode=1 --leak-check=no "$bin" --test-threads=2
echo "== host changes racing hostfs walks under valgrind"
bin=$(cargo test -p uvfs --test hostfs_changes --no-run --message-format=json 2>/dev/null \
  | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
UVFS_STRESS_ITERS=2000 scripts/runner valgrind -q --fair-sched=yes --error-exitcode=1 --leak-check=no "$bin" racing --test-threads=2
echo "== all checks passed"
