#!/usr/bin/env bash
# The installed Courier as a NIC vendor uses it (docs/adding-a-nic-backend.md):
#   1. `cmake --install` the build tree into a staging prefix, then move the
#      prefix elsewhere (an install must not depend on where it was made);
#   2. build examples/nic-skeleton out of tree with find_package(Courier),
#      and a small program that links Courier::courier;
#   3. with COURIER_BACKEND_PATH pointing at the skeleton's build:
#      a. courier-info lists the skeleton as usable and initialised, and
#         searches the moved prefix's plugin directory;
#      b. courier-info --topology on a recorded machine with a NIC only the
#         skeleton claims (tests/topology/fixtures/vendor-nic.xml) picks the
#         skeleton for that NIC's GPU and Courier's own backend for the other;
#      c. courier-conformance --backend skeleton: "N passed, 0 failed";
#      d. courier-semantics-check and the program run over the skeleton
#         (COURIER_NIC_BACKEND=skeleton) under courier-run, 3 and 2 ranks.
#
#   install_nic_skeleton.sh CMAKE SOURCE_DIR BUILD_DIR WORK_DIR [CONFIGURE_ARGS...]
#
# WORK_DIR is emptied first and kept afterwards, logs included, for a look
# after a failure.
set -euo pipefail

if [ $# -lt 4 ]; then
  echo "usage: $0 CMAKE SOURCE_DIR BUILD_DIR WORK_DIR [CONFIGURE_ARGS...]" >&2
  exit 2
fi
cmake=$1 source=$2 build=$3 work=$4
shift 4
configure_args=("$@")
python=${PYTHON:-python3}

# Only what each step sets below may steer the backends.
unset COURIER_BACKEND_PATH COURIER_NIC_BACKEND COURIER_GPU_BACKEND

fail() {
  echo "install test: $*" >&2
  exit 1
}

# Runs a step with its output in $work/<name>.log, shown when it fails.
step() {
  local name=$1
  shift
  echo "== $name"
  if ! "$@" >"$work/$name.log" 2>&1; then
    cat "$work/$name.log" >&2
    fail "$name failed (log: $work/$name.log)"
  fi
}

rm -rf "$work"
mkdir -p "$work"

# 1. Install, then move: every path inside must be relative to the prefix.
step install "$cmake" --install "$build" --prefix "$work/staging"
mv "$work/staging" "$work/prefix"
prefix=$work/prefix
for file in CourierConfig.cmake CourierConfigVersion.cmake CourierTargets.cmake \
  CourierBackend.cmake; do
  [ -f "$prefix/lib/cmake/Courier/$file" ] || fail "$prefix/lib/cmake/Courier/$file is missing"
done
if grep -rl -e "$source" -e "$work/staging" "$prefix/lib/cmake/Courier"; then
  fail "the package files above name the source tree or the staging prefix"
fi
for tool in courier-info courier-run courier-conformance courier-bench courier-semantics-check; do
  [ -x "$prefix/bin/$tool" ] || fail "$prefix/bin/$tool was not installed"
done

# 2. Out-of-tree builds against the moved prefix.
skeleton_build=$work/nic-skeleton
step configure-skeleton "$cmake" -S "$source/examples/nic-skeleton" -B "$skeleton_build" \
  "-DCMAKE_PREFIX_PATH=$prefix" "${configure_args[@]}"
step build-skeleton "$cmake" --build "$skeleton_build"
plugin_dir=$skeleton_build/lib/courier
plugin=$plugin_dir/libcourier-nic-skeleton.so
[ -f "$plugin" ] || fail "courier_add_backend did not put the plugin at $plugin"

consumer_build=$work/consumer
step configure-consumer "$cmake" -S "$source/tests/install/consumer" -B "$consumer_build" \
  "-DCMAKE_PREFIX_PATH=$prefix" "${configure_args[@]}"
step build-consumer "$cmake" --build "$consumer_build"

export COURIER_BACKEND_PATH=$plugin_dir

# 3a. courier-info: the skeleton is found where we put it, usable, and its
# init succeeded; the default directory is the moved prefix's.
step courier-info "$prefix/bin/courier-info"
info=$work/courier-info.log
grep -Eq "^ +[0-9]+ +$prefix/lib/courier +default\$" "$info" ||
  fail "courier-info does not search $prefix/lib/courier as the default directory (see $info)"
grep -Eq "^ +nic +skeleton +[0-9]+\.[0-9]+ +usable +$plugin\$" "$info" ||
  fail "courier-info does not list $plugin as usable (see $info)"
# The skeleton's block runs from its heading to the next backend's.
init=$(awk -v heading="  nic skeleton (" '
  index($0, heading) == 1 { inside = 1; next }
  inside && /^  (nic|gpu) / { inside = 0 }
  inside && $1 == "init" { print; exit }' "$info")
[[ $init =~ ^\ +init\ +ok$ ]] ||
  fail "courier-info did not initialise the skeleton: '${init:-no init line}' (see $info)"

# 3b. Topology chooses the skeleton by its device claims (NIC ABI 1.3) for
# the GPU paired with its NIC, with nothing about it in Courier; the other
# GPU keeps the installed backend claiming its ConnectX (when this build
# has it).
topology_check=("$python" "$source/tests/topology/check_topology.py" "$prefix/bin/courier-info"
  "$source/tests/topology/fixtures" vendor-nic)
if [ ! -f "$prefix/lib/courier/libcourier-nic-cx7.so" ]; then
  topology_check+=(--expect 'gpus.0.backend="skeleton"' 'gpus.0.nics=["skeleton_nic0"]')
fi
step topology "${topology_check[@]}"

# 3c. The conformance suite, through the installed program's name lookup.
step courier-conformance "$prefix/bin/courier-conformance" --backend skeleton
conformance=$work/courier-conformance.log
grep -Fq "courier-conformance: backend skeleton ($plugin)" "$conformance" ||
  fail "courier-conformance did not test $plugin (see $conformance)"
grep -Eq "^[0-9]+ passed, 0 failed" "$conformance" ||
  fail "courier-conformance has no 'N passed, 0 failed' line (see $conformance)"

# 3d. Context-level: the semantics check (3 ranks) and the program built
# above (2 ranks), over the skeleton.
export COURIER_NIC_BACKEND=skeleton COURIER_PROXY_THREADS=1 COURIER_CHANNELS=4
step semantics "$prefix/bin/courier-run" --timeout 120 -n 3 "$prefix/bin/courier-semantics-check"
[ "$(grep -Ec "semantics: [0-9]+ passed, 0 failed, .*NIC backend skeleton" "$work/semantics.log")" = 3 ] ||
  fail "courier-semantics-check did not pass on all 3 ranks over the skeleton (see $work/semantics.log)"
step consumer "$prefix/bin/courier-run" --timeout 120 -n 2 "$consumer_build/courier-install-consumer"
[ "$(grep -c "consumer: rank [01] of 2, NIC backend skeleton" "$work/consumer.log")" = 2 ] ||
  fail "the consumer did not run on both ranks over the skeleton (see $work/consumer.log)"

echo "install test: passed (prefix $prefix, plugin $plugin)"
