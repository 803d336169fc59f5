#!/usr/bin/env bash
# Installs what uvfs's build, tests and benchmarks need on a fresh Debian machine.
# Idempotent: checks first, installs only what is missing.
set -euo pipefail

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v valgrind >/dev/null || need_apt+=(valgrind)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install Rust 1.95 with rustup first" >&2
  exit 1
fi
# rustfmt and clippy come with the toolchain's default profile; add them if missing.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi
