#!/usr/bin/env python3
"""The source lines where a kernel's warps stall most, from Nsight Compute's
source page with CUDA and SASS side by side:

    ncu -i REPORT.ncu-rep --page source --csv --print-source cuda,sass | \
        python3 tests/gpu/ncu_stall_lines.py [N]

The page lists, per source file, each CUDA line followed by the SASS
instructions compiled from it; the warp stall samples sit on the SASS
rows. They are added up per CUDA line (file and line number) and the N
largest (20) printed with their share of all samples, their SASS
instruction count and their three largest stall reasons. Build with
-DCMAKE_CUDA_FLAGS=-lineinfo so that the lines are known."""
import collections
import csv
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def main() -> int:
    top = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    header = None
    source_file = "?"
    line = None
    text = {}
    samples = collections.Counter()
    instructions = collections.Counter()
    reasons = collections.defaultdict(collections.Counter)
    for row in csv.reader(sys.stdin):
        if len(row) == 2 and row[0] == "File Path":
            source_file = row[1].rsplit("/", 1)[-1]
            continue
        if row and row[0] == "Line No":
            header = row
            continue
        if header is None or len(row) < len(header) - 8:
            continue
        if row[0].strip():  # a CUDA line: the SASS rows below belong to it
            line = (source_file, row[0].strip())
            text[line] = row[1].strip()
            continue
        if line is None or not row[2].startswith("0x"):
            continue
        cells = dict(zip(header[4:], row[4:]))  # (two columns are named "Source")
        try:
            samples[line] += float(cells.get(SAMPLES, "0").replace(",", "") or 0)
        except ValueError:
            continue
        instructions[line] += 1
        for name, value in cells.items():
            if name.startswith("stall_") and "Not Issued" not in name:
                try:
                    reasons[line][name[len("stall_"):]] += float(value or 0)
                except ValueError:
                    pass
    total = sum(samples.values())
    if header is None or total == 0:
        print("ncu_stall_lines: no warp stall samples on the page (a report of --set full, "
              "printed with --print-source cuda,sass?)", file=sys.stderr)
        return 1
    print(f"{total:.0f} samples; the {top} source lines with the most")
    for (name, number), count in samples.most_common(top):
        why = ", ".join(f"{r} {100 * v / count:.0f}%"
                        for r, v in reasons[(name, number)].most_common(3) if v > 0)
        print(f"{100 * count / total:5.1f}%  {name}:{number:<5} {instructions[(name, number)]:4} "
              f"SASS  {text[(name, number)][:70]:70}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
