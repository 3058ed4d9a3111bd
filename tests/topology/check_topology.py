#!/usr/bin/env python3
"""Checks `courier-info --topology --json` on a recorded machine against what a
careful engineer would pick (tests/topology/expected_pairs.json).

    check_topology.py COURIER_INFO FIXTURE_DIR NAME [--expect KEY=VALUE ...]

Without --expect: the pairs, distances, NUMA nodes, backend (and each GPU's
backend, where given) and proxy CPUs of fixture NAME must equal the expected
ones exactly. With --expect (for runs with overrides in the environment):
each KEY=VALUE must hold in the JSON, KEY a dotted path (gpus.2.nics,
backend_forced, ...) and VALUE JSON.
Exit 0 when everything holds; otherwise every difference is printed.
"""
import json
import os
import subprocess
import sys


def run(courier_info, xml):
    env = dict(os.environ, COURIER_TOPOLOGY_XML=xml)
    env.pop("HWLOC_THISSYSTEM", None)  # the file's allowed cpuset, not this process's
    out = subprocess.run([courier_info, "--topology", "--json"], env=env, capture_output=True,
                         text=True)
    if out.returncode != 0:
        sys.exit(f"courier-info --topology failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def cpu_text(cpus):
    parts, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(parts)


def compare_expected(got, want):
    errors = []
    if got["backend"] != want["backend"]:
        errors.append(f"backend {got['backend']!r}, expected {want['backend']!r}")
    if len(got["gpus"]) != len(want["gpus"]):
        errors.append(f"{len(got['gpus'])} GPUs, expected {len(want['gpus'])}")
    for i, (g, w) in enumerate(zip(got["gpus"], want["gpus"])):
        have = {"nics": g["nics"], "distances": g["distances"], "numa": g["numa"],
                "proxy_cpus": cpu_text(g["proxy_cpus"])}
        keys = ["nics", "distances", "numa", "proxy_cpus"]
        if "backend" in w:  # the GPU's own, where its NIC's differs from the first
            have["backend"] = g["backend"]
            keys.append("backend")
        for key in keys:
            if have[key] != w[key]:
                errors.append(f"GPU {i}: {key} {have[key]!r}, expected {w[key]!r}")
        if "note" in w and w["note"] not in (g.get("note") or ""):
            errors.append(f"GPU {i}: note {g.get('note')!r} lacks {w['note']!r}")
    return errors


def lookup(doc, path):
    for part in path.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def main():
    args = sys.argv[1:]
    if len(args) < 3:
        sys.exit(__doc__)
    courier_info, fixtures, name = args[:3]
    got = run(courier_info, os.path.join(fixtures, name + ".xml"))
    expects = [a for a in args[3:] if a != "--expect"]
    if expects:
        errors = []
        for item in expects:
            key, _, value = item.partition("=")
            have = lookup(got, key)
            if have != json.loads(value):
                errors.append(f"{key}: {have!r}, expected {value}")
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "expected_pairs.json")) as f:
            errors = compare_expected(got, json.load(f)[name])
    for e in errors:
        print(f"{name}: {e}")
    print(f"{name}: {'OK' if not errors else f'{len(errors)} differences'}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
