#!/usr/bin/env bash
# Installs what uvfs's build, tests and benchmarks need on a fresh Debian machine.
# Idempotent: checks first, installs only what is missing. Runs as root (the FUSE and
# differential tests need it anyway).
set -euo pipefail

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
have cc || need_apt+=(build-essential)
have make || need_apt+=(make) # uvfs bench --case workloads builds a C project
have valgrind || need_apt+=(valgrind)
have pkg-config || need_apt+=(pkg-config)
have fusermount3 || need_apt+=(fuse3)
have getfacl || need_apt+=(acl)
[ -e /usr/include/sys/acl.h ] || need_apt+=(libacl1-dev) # pjdfstest builds against it
have git || need_apt+=(git)
have tar || need_apt+=(tar)
have find || need_apt+=(findutils)
have setpriv || need_apt+=(util-linux)
have setfattr || need_apt+=(attr) # the tarfs and real-programs tests set xattrs with it
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! have cargo; then
  echo "setup: cargo not found; install Rust 1.95 with rustup first" >&2
  exit 1
fi
# rustfmt and clippy come with the toolchain's default profile; add them if missing.
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi
# Miri (a pinned nightly, so that a new nightly cannot break the test command) for the
# core's unit tests of its unsafe primitives.
MIRI_TOOLCHAIN=nightly-2026-10-30
if ! rustup run "$MIRI_TOOLCHAIN" cargo miri --version >/dev/null 2>&1 \
  || ! rustup component list --toolchain "$MIRI_TOOLCHAIN" --installed 2>/dev/null | grep -q rust-src; then
  rustup toolchain install "$MIRI_TOOLCHAIN" --profile minimal --component miri,rust-src
fi
# pjdfstest (crates.io) for the FUSE conformance test.
have pjdfstest || [ -x "$HOME/.cargo/bin/pjdfstest" ] || cargo install --locked pjdfstest
# The unprivileged user and group pjdfstest switches to (nobody/nogroup come with Debian).
getent group tests >/dev/null || groupadd tests
id tests >/dev/null 2>&1 || useradd -g tests -M -N -s /usr/sbin/nologin -d / tests
