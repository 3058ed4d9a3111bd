#!/usr/bin/env bash
# Quick start: install what is missing, configure, build, and run the main
# demos: write_demo over 2 local ranks (first over shm, then over tcp), then
# moe_demo (MoE dispatch and combine) over 4.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/deps.sh
cmake --preset default
cmake --build --preset default

for provider in shm tcp; do
  echo "== write_demo over libfabric $provider, 2 ranks =="
  build/bin/courier-run -n 2 --timeout 600 build/bin/write_demo --provider "$provider"
done

echo "== moe_demo: expert-parallel dispatch and combine over 4 local ranks =="
build/bin/courier-run -n 4 --timeout 600 build/bin/moe_demo
