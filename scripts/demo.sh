#!/usr/bin/env bash
# Quick start: install what is missing, configure, build, and run the main
# demo (write_demo over 2 local ranks, first over shm, then over tcp).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/deps.sh
cmake --preset default
cmake --build --preset default

for provider in shm tcp; do
  echo "== write_demo over libfabric $provider, 2 ranks =="
  build/bin/courier-run -n 2 --timeout 600 build/bin/write_demo --provider "$provider"
done
