#!/usr/bin/env bash
# The main job: builds uvfs and prints the benchmark table (in-memory default, quick
# mode: about two minutes on 2 cores). Extra arguments go to `uvfs bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo build --release -p uvfs-cli
exec target/release/uvfs bench --quick "$@"
