#!/usr/bin/env python3
"""How each `courier-bench scale` quantity grows with the rank count.

    tools/courier-bench/scale_sweep.sh > sweep.jsonl     (2..64 ranks, shm and tcp)
    tools/scale_fit.py sweep.jsonl
    tools/scale_fit.py sweep.jsonl --check               (exit 1 if a growth law fails)
    tools/scale_fit.py sweep.jsonl --json                (one object per quantity)
    tools/scale_fit.py sweep.jsonl --from 8              (fit 8 ranks and more only)
    tools/scale_fit.py sweep.jsonl --stat max            (the largest rank's value)

For each provider and quantity: the median over ranks (or, with --stat max,
the largest value of any rank: rank 0, the rendezvous, is often it) at each
rank count,
and the exponent b of value ~ ranks^b, fitted by least squares on
log(value) against log(ranks) (0: constant, 1: linear, 2: quadratic). The
growth laws --check applies are those of what a rank holds, never of time
(a time depends on the machine's load): threads and proxy threads stay
constant (b < 0.25); open files, connections, resident and registered
memory grow at most linearly (b < 1.2).
"""
import argparse
import json
import math
import sys
from collections import defaultdict

from plot_bench import read_files  # the same JSON lines, read the same way


# quantity -> the largest exponent allowed (--check)
LAWS = {
    "threads": 0.25,
    "proxy_threads": 0.25,
    "fds": 1.2,
    "connections_per_thread": 1.2,
    "rss": 1.2,
    "peak_rss": 1.2,
    "registered_peak": 1.2,
    "bootstrap_sent": 1.2,
    "bootstrap_received": 1.2,
}


def exponent(points):
    """Least-squares slope of log(value) on log(ranks); None below 2 usable points."""
    usable = [(math.log(n), math.log(v)) for n, v in points if n > 0 and v > 0]
    if len(usable) < 2:
        return None
    mx = sum(x for x, _ in usable) / len(usable)
    my = sum(y for _, y in usable) / len(usable)
    sxx = sum((x - mx) ** 2 for x, _ in usable)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in usable) / sxx


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="JSON lines of courier-bench scale --json")
    parser.add_argument("--check", action="store_true", help="exit 1 if a growth law fails")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    parser.add_argument("--from", dest="smallest", type=int, default=0,
                        help="fit only job sizes of at least this many ranks (default: all)")
    parser.add_argument("--stat", choices=("median", "max"), default="median",
                        help="which value over a job's ranks to fit (default: median)")
    args = parser.parse_args()
    rows = [r for r in read_files(args.files, "scale_fit.py") if r.get("bench") == "scale"]
    if not rows:
        sys.exit("scale_fit.py: no courier-bench scale JSON rows in the input (run it with --json)")

    series = defaultdict(dict)  # (provider, quantity, unit) -> ranks -> value (--stat)
    for r in rows:
        series[(r["provider"], r["quantity"], r["unit"])][r["ranks"]] = r[args.stat]
    sizes = sorted({n for points in series.values() for n in points})
    failures = []
    if not args.json:
        print("{:<9} {:<24} {:<6} {} {:>9}  {}".format(
            "provider", "quantity", "unit", " ".join("{:>10}".format(n) for n in sizes),
            "exponent", "law"))
    for (provider, quantity, unit), points in sorted(series.items()):
        b = exponent(sorted((n, v) for n, v in points.items() if n >= args.smallest))
        law = LAWS.get(quantity)
        verdict = ""
        if law is not None and b is not None:
            verdict = "ok (< {})".format(law) if b < law else "FAILS (< {})".format(law)
            if b >= law:
                failures.append("{} {}: exponent {:.2f}, the law allows < {}".format(
                    provider, quantity, b, law))
        if args.json:
            print(json.dumps({"provider": provider, "quantity": quantity, "unit": unit,
                              "stat": args.stat,
                              "values": {str(n): points[n] for n in sorted(points)},
                              "exponent": b, "law": law}))
        else:
            values = " ".join("{:>10.3f}".format(points[n]) if n in points else "{:>10}".format("-")
                              for n in sizes)
            print("{:<9} {:<24} {:<6} {} {:>9}  {}".format(
                provider, quantity, unit, values, "-" if b is None else "{:.2f}".format(b),
                verdict))
    if args.check and failures:
        for f in failures:
            print("scale_fit.py: " + f, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
