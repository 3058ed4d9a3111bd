#!/usr/bin/env python3
"""Plot courier-bench JSON lines (--json) as PNG files.

    courier-run -n 4 build/bin/courier-bench ep --mode ht --json > ht.jsonl
    courier-run -n 4 build/bin/courier-bench ep --mode ll --json > ll.jsonl
    tools/plot_bench.py ht.jsonl ll.jsonl --out plots/
    ... | tools/plot_bench.py --out plots/          (reads stdin without files)
    tools/plot_bench.py ht.jsonl nccl.json --out plots/   (with tools/nccl_alltoall_bench.py's
                                                           --json: drawn as path "nccl")

For `ep` rows: ep_latency.png (median latency, p99 dashed) and
ep_bandwidth.png (GB/s) against tokens per rank, one line per
mode/phase/path. For `scale` rows: scale_<unit>.png, each quantity's
median over ranks (max dashed) against ranks, log-log. Other benchmarks: <bench>_bandwidth.png (GB/s against
size) where rows have "size" and "gbytes_per_s". Lines that are not JSON
objects (tables, logs, courier-run's "[0] " prefixes are stripped) are
skipped. Needs matplotlib (Debian: python3-matplotlib; PyPI: matplotlib).
"""
import argparse
import json
import os
import re
import sys
from collections import defaultdict

PREFIX = re.compile(r"^\[\d+\]\s*")  # courier-run's rank prefix


def nccl_rows(doc):
    # tools/nccl_alltoall_bench.py --json: one object with its rows, drawn as path "nccl".
    return [dict(r, bench="ep", path="nccl") for r in doc.get("rows", [])]


def read_rows(streams):
    rows = []
    for stream in streams:
        text = stream.read()
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and doc.get("tool") == "nccl_alltoall_bench":
            rows.extend(nccl_rows(doc))
            continue
        for line in text.splitlines():
            line = PREFIX.sub("", line.strip())
            if not line.startswith("{"):
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and "bench" in row:
                rows.append(row)
    return rows


def read_files(files, tool):
    """The JSON rows of `files` (stdin without any); exits naming a file that cannot be read."""
    streams = []
    try:
        streams = [open(f) for f in files] if files else [sys.stdin]
        return read_rows(streams)
    except OSError as e:
        sys.exit("{}: {}".format(tool, e))
    finally:
        for s in streams:
            if s is not sys.stdin:
                s.close()


def plot_ep(plt, rows, out, median_only=False, heading=None):
    series = defaultdict(list)
    for r in rows:
        key = "{} {} {}".format(r.get("mode", "?"), r.get("phase", "?"), r.get("path", "courier"))
        series[key].append(r)
    written = []
    fig, ax = plt.subplots(figsize=(8, 5))
    for key, points in sorted(series.items()):
        points.sort(key=lambda r: r["tokens"])
        x = [p["tokens"] for p in points]
        line, = ax.plot(x, [p["median_us"] for p in points], marker="o", label=key + " median")
        if not median_only:
            ax.plot(x, [p["p99_us"] for p in points], linestyle="--", color=line.get_color(),
                    label=key + " p99")
    ax.set_xlabel("tokens per rank")
    ax.set_ylabel("latency (us)")
    ax.set_xscale("log", base=2)
    ax.set_title(heading or title(rows, "EP latency"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    written.append(save(fig, out, "ep_latency.png"))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 5))
    for key, points in sorted(series.items()):
        points.sort(key=lambda r: r["tokens"])
        ax.plot([p["tokens"] for p in points], [p["gbytes_per_s"] for p in points], marker="o",
                label=key)
    ax.set_xlabel("tokens per rank")
    ax.set_ylabel("GB/s (row bytes sent to other ranks / median)")
    ax.set_xscale("log", base=2)
    ax.set_title(heading or title(rows, "EP bandwidth"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    written.append(save(fig, out, "ep_bandwidth.png"))
    plt.close(fig)
    return written


def plot_sized(plt, bench, rows, out):
    series = defaultdict(list)
    for r in rows:
        if "size" in r and "gbytes_per_s" in r:
            series["{} {}".format(r.get("path", "?"), r.get("op", ""))].append(r)
    if not series:
        return []
    fig, ax = plt.subplots(figsize=(8, 5))
    for key, points in sorted(series.items()):
        points.sort(key=lambda r: r["size"])
        ax.plot([p["size"] for p in points], [p["gbytes_per_s"] for p in points], marker="o",
                label=key.strip())
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("GB/s")
    ax.set_xscale("log", base=2)
    ax.set_title("courier-bench " + bench)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    path = save(fig, out, bench + "_bandwidth.png")
    plt.close(fig)
    return [path]


def plot_scale(plt, rows, out):
    # courier-bench scale: one plot per unit, the median over ranks (max
    # dashed for per-rank quantities) of each quantity against ranks, per
    # provider, log-log (a straight line's slope is its growth exponent).
    by_unit = defaultdict(lambda: defaultdict(list))
    for r in rows:
        key = "{} {}".format(r.get("quantity", "?"), r.get("provider", ""))
        by_unit[r.get("unit", "?")][key].append(r)
    written = []
    for unit, series in sorted(by_unit.items()):
        fig, ax = plt.subplots(figsize=(8, 5))
        for key, points in sorted(series.items()):
            points.sort(key=lambda r: r["ranks"])
            x = [p["ranks"] for p in points]
            line, = ax.plot(x, [p["median"] for p in points], marker="o", label=key + " median")
            if points[0].get("over") == "ranks":
                ax.plot(x, [p["max"] for p in points], linestyle="--", color=line.get_color(),
                        label=key + " max")
        ax.set_xlabel("ranks")
        ax.set_ylabel(unit)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title("courier-bench scale ({})".format(unit))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6)
        written.append(save(fig, out, "scale_{}.png".format(re.sub(r"[^A-Za-z0-9]+", "_", unit))))
        plt.close(fig)
    return written


def title(rows, what):
    r = rows[0]
    keys = ("hidden", "topk", "experts", "ranks", "provider")
    parts = ["{} {}".format(k, r[k]) for k in keys if k in r]
    return "{} ({})".format(what, ", ".join(parts))


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="JSON-lines files (default: stdin)")
    parser.add_argument("--out", default=".", help="directory for the PNG files (default: .)")
    parser.add_argument("--median-only", action="store_true", help="ep: no p99 lines")
    parser.add_argument("--title", help="ep: the plots' title (default: from the rows)")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_bench.py: matplotlib is missing: install python3-matplotlib (Debian) "
                 "or `pip install matplotlib`")
    rows = read_files(args.files, "plot_bench.py")
    if not rows:
        sys.exit("plot_bench.py: no courier-bench JSON rows in the input (run with --json)")
    os.makedirs(args.out, exist_ok=True)
    by_bench = defaultdict(list)
    for r in rows:
        by_bench[r["bench"]].append(r)
    written = []
    for bench, bench_rows in sorted(by_bench.items()):
        if bench == "ep":
            written += plot_ep(plt, bench_rows, args.out, args.median_only, args.title)
        elif bench == "scale":
            written += plot_scale(plt, bench_rows, args.out)
        else:
            written += plot_sized(plt, bench, bench_rows, args.out)
    if not written:
        sys.exit("plot_bench.py: nothing to plot (benchmarks: {})".format(", ".join(by_bench)))
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
