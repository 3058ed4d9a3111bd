#!/usr/bin/env python3
"""The functions a tests/gpu/pc_sampler.c sample file's program counters
fall in, the N (40) most sampled first, with their module:

    python3 tests/gpu/pc_report.py /tmp/samples.<pid> [N]

Each counter is placed in the executable segment that holds it and named
with addr2line (binutils) at its offset in that module; a module without
symbols gives the nearest exported name, or '??'."""
import collections
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    segments, counters = [], []
    with open(sys.argv[1]) as samples:
        for line in samples:
            kind, *fields = line.split()
            if kind == "M":
                start, size, base = (int(f, 16) for f in fields[:3])
                segments.append((start, size, base, fields[3]))
            elif kind == "P":
                counters.append(int(fields[0], 16))
    offsets = collections.defaultdict(list)
    for pc in counters:
        module = next(((name, pc - base) for start, size, base, name in segments
                       if start <= pc < start + size), ("?", pc))
        offsets[module[0]].append(module[1])
    functions = collections.Counter()
    for module, where in offsets.items():
        names = {}
        if module != "?":
            unique = sorted(set(where))
            lines = subprocess.run(["addr2line", "-f", "-C", "-e", module] +
                                   [hex(o) for o in unique],
                                   capture_output=True, text=True, check=False).stdout.split("\n")
            names = {o: lines[2 * i] for i, o in enumerate(unique) if 2 * i < len(lines)}
        short = module.rsplit("/", 1)[-1]
        for offset in where:
            functions[(short, names.get(offset, "??"))] += 1
    total = len(counters)
    print(f"{total} samples")
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    for (module, function), count in functions.most_common(top):
        print(f"{100 * count / max(total, 1):5.1f}% {count:7}  {module:24} {function[:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
