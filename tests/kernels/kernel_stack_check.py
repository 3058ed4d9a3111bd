#!/usr/bin/env python3
"""Fails when an EP kernel of gpu-cuda needs more per-thread stack than its budget.

A kernel whose threads need a stack frame (a kernel parameter copied into
local memory because its address is taken, an array indexed at run time,
registers spilled) pays for it at every launch: one such 768-byte copy made
the low-latency dispatch about 19 us slower on an H100, and only a GPU run
showed it. ptxas reports each kernel's frame at compile time, so this check
compiles cuda_ep_kernels.cu for one architecture with `-Xptxas -v` and
compares each EP kernel's frame with its budget below. Every budget must
match a kernel, so a renamed kernel does not leave the check with nothing
to look at.

  kernel_stack_check.py NVCC SOURCE_DIR ARCH [HOST_COMPILER]
"""
import re
import subprocess
import sys

# (pattern of the mangled kernel name, most stack bytes a thread may use).
# The narrow fused combine is register-bound by its launch bounds (256
# threads, 3 blocks per SM: 80 registers) and spills a few words.
BUDGETS = [
    (r"direct7combineILj4ELb1E", 64),
    (r"6direct", 0),
    (r"route_kernel|ht_dispatch_kernel|signal_kernel|wait_kernel", 0),
    # The proxy path's kernels keep a batch of FIFO commands in a local array.
    (r"5proxy|proxy_\w+_kernel", 160),
]


def demangle(text):
    """The kernel names in `text` as C++ (c++filt, where it is installed)."""
    try:
        return subprocess.run(["c++filt"], input=text, capture_output=True, text=True,
                              check=True).stdout.rstrip("\n")
    except (OSError, subprocess.CalledProcessError):
        return text


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    nvcc, root, arch = sys.argv[1:4]
    cmd = [nvcc] + (["-ccbin", sys.argv[4]] if len(sys.argv) == 5 else []) + [
           "-I", f"{root}/include", "-I", root, "-O2", "-DNDEBUG", "-std=c++20",
           f"--generate-code=arch=compute_{arch},code=sm_{arch}", "-x", "cu", "-cubin",
           "-o", "/dev/null", "-Xptxas", "-v", f"{root}/backends/gpu-cuda/cuda_ep_kernels.cu"]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"kernel_stack_check: {' '.join(cmd)} failed:\n{run.stderr[-4000:]}")
    frames = {}
    kernel = None
    for line in run.stderr.splitlines():
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            kernel = m.group(1)
        m = re.search(r"(\d+) bytes stack frame", line)
        if m and kernel:
            frames[kernel] = int(m.group(1))
            kernel = None
    checked, failures, matched = 0, [], set()
    for name, frame in sorted(frames.items()):
        rule = next((r for r in BUDGETS if re.search(r[0], name)), None)
        if rule is None:
            continue
        matched.add(rule[0])
        checked += 1
        if frame > rule[1]:
            failures.append(f"{name}: {frame} bytes of stack per thread, budget {rule[1]}")
    for pattern, _ in BUDGETS:
        if pattern not in matched:
            failures.append(f"no kernel matches the budget '{pattern}' (renamed? ptxas's "
                            "output changed?)")
    for f in failures:
        print("kernel_stack_check: " + demangle(f))
    print(f"kernel_stack_check: {checked} kernels checked, {len(failures)} problems")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
