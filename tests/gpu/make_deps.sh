#!/usr/bin/env bash
# Fills build-deps/ (ignored by git) with the headers a GPU host may lack,
# copied from this machine's Debian packages (libdlpack-dev, doctest-dev),
# for tests/gpu/one_gpu.sh and ep_before_after.sh to carry there:
# build-deps/include/{dlpack,doctest} and build-deps/lib/cmake/doctest.
#
#   tests/gpu/make_deps.sh [DIR]   (DIR: build-deps)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build-deps}
for need in /usr/include/dlpack/dlpack.h /usr/include/doctest/doctest.h \
  /usr/lib/cmake/doctest/doctestConfig.cmake; do
  [ -f "$need" ] || { echo "make_deps: $need is missing: run scripts/deps.sh first" >&2; exit 1; }
done
mkdir -p "$dir/include" "$dir/lib/cmake"
cp -r /usr/include/dlpack /usr/include/doctest "$dir/include/"
cp -r /usr/lib/cmake/doctest "$dir/lib/cmake/"
echo "make_deps: $dir holds dlpack and doctest"
