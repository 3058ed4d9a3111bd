#!/usr/bin/env python3
"""Fails when an EP kernel needs more per-thread stack than its budget.

A kernel whose threads need a stack frame (a kernel parameter copied into
local memory because a field's address is taken or chosen at run time, an
array indexed at run time, registers spilled) pays for it at every launch:
one such 768-byte copy made the low-latency dispatch about 19 us slower on
an H100, and only a GPU run showed it. The compilers report each kernel's
frame at compile time, so this check compiles the backend's EP kernels for
one architecture and compares each kernel's frame with its budget below.
Every budget must match a kernel, so a renamed kernel does not leave the
check with nothing to look at.

  kernel_stack_check.py cuda NVCC SOURCE_DIR ARCH [HOST_COMPILER]
      gpu-cuda's cuda_ep_kernels.cu, `nvcc -Xptxas -v` (stack frame)
  kernel_stack_check.py hip HIPCC SOURCE_DIR ARCH
      gpu-hip's hip_ep_kernels.hip, `-Rpass-analysis=kernel-resource-usage`
      (ScratchSize per lane)
"""
import re
import subprocess
import sys

# (pattern of the mangled kernel name, most stack bytes a thread may use);
# the first pattern that matches a kernel is its budget.
BUDGETS = {
    "cuda": [
        # The narrow fused combine is register-bound by its launch bounds
        # (256 threads, 3 blocks per SM: 80 registers) and spills a few words.
        (r"direct7combineILj4ELb1E", 64),
        (r"6direct", 0),
        (r"route_kernel|ht_dispatch_kernel|signal_kernel|wait_kernel", 0),
        # The proxy path's kernels keep a batch of FIFO commands in a local array.
        (r"5proxy|proxy_\w+_kernel", 160),
    ],
    "hip": [
        (r"6direct", 0),
        (r"route_kernel|ht_dispatch_kernel|signal_kernel|wait_kernel", 0),
        # Known gap (docs/gpu-backends.md, "Kernel parameters on HIP"): the
        # proxy kernels' jobs are still copied into scratch on HIP.
        (r"5proxy|proxy_\w+_kernel", 592),
    ],
}


def demangle(text):
    """The kernel names in `text` as C++ (c++filt, where it is installed)."""
    try:
        return subprocess.run(["c++filt"], input=text, capture_output=True, text=True,
                              check=True).stdout.rstrip("\n")
    except (OSError, subprocess.CalledProcessError):
        return text


def compile_report(kind, args):
    """The compiler's diagnostics and {kernel: bytes of stack per thread}."""
    compiler, root, arch = args[:3]
    common = ["-I", f"{root}/include", "-I", root, "-O2", "-DNDEBUG", "-std=c++20"]
    if kind == "cuda":
        cmd = [compiler] + (["-ccbin", args[3]] if len(args) > 3 else []) + common + [
            f"--generate-code=arch=compute_{arch},code=sm_{arch}", "-x", "cu", "-cubin",
            "-o", "/dev/null", "-Xptxas", "-v", f"{root}/backends/gpu-cuda/cuda_ep_kernels.cu"]
        name_re, size_re = r"Function properties for (\S+)", r"(\d+) bytes stack frame"
    else:
        cmd = [compiler] + common + [
            f"--offload-arch={arch}", "--cuda-device-only", "-c", "-o", "/dev/null",
            "-Rpass-analysis=kernel-resource-usage", f"{root}/backends/gpu-hip/hip_ep_kernels.hip"]
        name_re, size_re = r"Function Name: (\S+)", r"ScratchSize \[bytes/lane\]: (\d+)"
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"kernel_stack_check: {' '.join(cmd)} failed:\n{run.stderr[-4000:]}")
    frames, kernel = {}, None
    for line in run.stderr.splitlines():
        m = re.search(name_re, line)
        if m:
            kernel = m.group(1)
        m = re.search(size_re, line)
        if m and kernel:
            frames[kernel] = int(m.group(1))
            kernel = None
    return frames


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    if kind not in BUDGETS or not 5 <= len(sys.argv) <= (6 if kind == "cuda" else 5):
        sys.exit(__doc__)
    frames = compile_report(kind, sys.argv[2:])
    budgets = BUDGETS[kind]
    checked, failures, matched = 0, [], set()
    for name, frame in sorted(frames.items()):
        rule = next((r for r in budgets if re.search(r[0], name)), None)
        if rule is None:
            continue
        matched.add(rule[0])
        checked += 1
        if frame > rule[1]:
            failures.append(f"{name}: {frame} bytes of stack per thread, budget {rule[1]}")
    for pattern, _ in budgets:
        if pattern not in matched:
            failures.append(f"no kernel matches the budget '{pattern}' (renamed? the "
                            "compiler's output changed?)")
    for f in failures:
        print(f"kernel_stack_check ({kind}): " + demangle(f))
    print(f"kernel_stack_check ({kind}): {checked} kernels checked, {len(failures)} problems")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
