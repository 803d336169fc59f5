#!/usr/bin/env bash
# Builds the peer FUSE servers of issue 17's table that Debian does not package, for
# `uvfs bench --case workloads --target-cmd`: go-fuse's example servers (Han-Wen
# Nienhuys's Go FUSE library, v2.12.1), built from the Go module proxy into
# target/peers. Needs Go (1.22 or newer); bindfs comes from apt (`apt-get install bindfs`).
# Prints the bench's --target-cmd arguments for them.
#
#   gofuse-mem:  example/memfs, nodefs's MemNodeFs: the tree in the server's memory, each
#                file's data in a backing file under a fresh /dev/shm directory (removed
#                when the server exits)
#   gofuse-loop: example/loopback, the fs package's loopback node over {src}
set -euo pipefail

version=v2.12.1
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/target/peers
command -v go >/dev/null || { echo "peers: go not found (https://go.dev/doc/install)" >&2; exit 1; }
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
cat >go.mod <<EOF
module uvfspeers

go 1.22
EOF
go get "github.com/hanwen/go-fuse/v2@$version" >&2
src=$(go env GOMODCACHE)/github.com/hanwen/go-fuse/v2@$version/example
for ex in memfs loopback; do
  mkdir -p "$ex"
  cp "$src/$ex/main.go" "$ex/"
  chmod u+w "$ex/main.go"
done
go mod tidy >&2
go build -o "$out/gofuse-memfs" ./memfs
go build -o "$out/gofuse-loopback" ./loopback

cat >"$out/gofuse-mem.sh" <<'EOF'
#!/bin/sh
# gofuse-memfs on $1, its file data under a fresh /dev/shm directory, removed at exit.
d=$(mktemp -d /dev/shm/gofuse-memfs.XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT INT TERM HUP
"$(dirname "$0")/gofuse-memfs" "$1" "$d/"
EOF
chmod +x "$out/gofuse-mem.sh"

echo "--target-cmd gofuse-mem='$out/gofuse-mem.sh {mnt}' --target-cmd gofuse-loop='$out/gofuse-loopback -q {mnt} {src}'"
