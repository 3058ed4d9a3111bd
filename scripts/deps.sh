#!/usr/bin/env bash
# Installs the Debian packages Courier's build and tests need, when missing.
# Run by demo.sh and test.sh; safe to run repeatedly.
set -euo pipefail

COURIER_PACKAGES=(
  git cmake ninja-build g++ pkg-config python3 python3-dev python3-venv clang-format
  libfmt-dev doctest-dev libdlpack-dev
  libfabric-dev libibverbs-dev libhwloc-dev
  openmpi-bin libopenmpi-dev
  hipcc libamdhip64-dev
  iproute2 util-linux  # the two-host test bed (tests/integration/hosts): ip, unshare, nsenter
  graphviz  # courier-info --topology --svg draws with its dot program
)

missing=()
for pkg in "${COURIER_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if ((${#missing[@]})); then
  echo "courier: installing missing packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "courier: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
