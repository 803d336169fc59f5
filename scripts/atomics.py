#!/usr/bin/env python3
"""Counts the atomic read-modify-write instructions a program executes.

An uncontended atomic increment costs some 5-10 ns on this project's VM, so a path's
atomics can weigh more than its instructions, and callgrind's instruction counts do not
show them. This reads a callgrind profile made with per-instruction counts and sums the
executions of the program's `lock`-prefixed instructions (and `xchg` with memory, locked
without the prefix), by function, or by instruction with its source line.

    valgrind --tool=callgrind --dump-instr=yes --compress-pos=no --compress-strings=no \\
        --callgrind-out-file=OUT BIN ARGS...
    scripts/atomics.py BIN OUT [MIN]

With MIN, each atomic instruction executed at least MIN times is listed with its
inlined source frames (addr2line). Only the program's own code is counted (statically
linked allocator included), not shared libraries.
"""

import collections
import re
import subprocess
import sys


def main() -> None:
    binpath, out = sys.argv[1], sys.argv[2]
    minimum = int(sys.argv[3]) if len(sys.argv) > 3 else None
    name = binpath.rsplit("/", 1)[-1]

    atomic, every = set(), set()
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binpath], capture_output=True, text=True).stdout
    for line in dis.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
        if not m:
            continue
        addr, ins = int(m.group(1), 16), m.group(2)
        every.add(addr)
        if ins.startswith("lock ") or (ins.startswith("xchg") and "(" in ins):
            atomic.add(addr)

    # Cost lines of the program: (address, function, executions). A line after `calls=`
    # is the call's inclusive cost, not the instruction's own.
    rows, obj, fn, after_call = [], "", "", False
    for line in open(out):
        if line.startswith("ob="):
            obj = line[3:].strip()
        elif line.startswith("fn="):
            fn = line[3:].strip()
        elif line.startswith("calls="):
            after_call = True
        elif line.startswith("0x"):
            if after_call:
                after_call = False
                continue
            parts = line.split()
            if name in obj and len(parts) > 2:
                rows.append((int(parts[0], 16), fn, int(parts[2])))

    # A position-independent program is loaded at a base: the one that puts its
    # addresses on instructions.
    sample = [a for a, _, _ in rows[:5000]]
    base = max([0, 0x108000, 0x400000, 0x4000000], key=lambda b: sum((a - b) in every for a in sample))

    by_fn, by_site, total = collections.Counter(), collections.Counter(), 0
    for addr, f, n in rows:
        if addr - base in atomic:
            total += n
            by_fn[f] += n
            by_site[(addr - base, f)] += n
    print("atomic read-modify-writes executed:", total)
    for f, n in by_fn.most_common(30):
        print("%10d  %s" % (n, f[:150]))
    if minimum is None:
        return
    print()
    for (addr, f), n in sorted(by_site.items(), key=lambda x: -x[1]):
        if n < minimum:
            continue
        src = subprocess.run(
            ["addr2line", "-f", "-i", "-C", "-e", binpath, hex(addr)], capture_output=True, text=True
        ).stdout.split("\n")
        frames = " <- ".join(src[i + 1].rsplit("/", 1)[-1] for i in range(0, len(src) - 1, 2))
        print("%10d  %s | %s" % (n, f.rsplit("::", 1)[-1][:40], frames[:220]))


if __name__ == "__main__":
    main()
