#!/bin/sh
# The Python package's tests (docs/python.md): a virtual environment under
# build-py/, `pip install .` of this tree (CUDA and HIP off, for speed), then
# pytest over tests/python on the host backend. Exits non-zero on failure.
#
#   scripts/test-python.sh [PYTEST ARGS...]
#
# BUILD_DIR (default build-py) holds the venv and scikit-build's build tree,
# which later runs reuse.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build-py}
venv=$build_dir/venv
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}

run() {
  echo "+ $*"
  "$@"
}

if [ ! -x "$venv/bin/python" ]; then
  run python3 -m venv "$venv"
fi
run "$venv/bin/python" -m pip install --quiet numpy pytest ml_dtypes scikit-build-core nanobind
# No build isolation: the build requirements are in the venv already, and
# scikit-build's tree under build-py/wheel is reused from run to run.
run "$venv/bin/python" -m pip install --quiet --no-build-isolation \
  --config-settings=build-dir="$build_dir/wheel" \
  --config-settings=cmake.define.COURIER_WITH_CUDA=OFF \
  --config-settings=cmake.define.COURIER_WITH_HIP=OFF \
  "$root"
# Import from the installed package, not from the source tree.
cd "$build_dir"
run "$venv/bin/python" -c "import courier, courier.deep_ep; print('courier imports from', courier.package_dir)"
run "$venv/bin/python" -m pytest -v "$root/tests/python" "$@"
