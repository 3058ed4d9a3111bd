#!/usr/bin/env bash
# Fails when a tracked C/C++ source differs from .clang-format's layout.
# ./scripts/check-format.sh --fix rewrites the files instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}"; then
  echo "courier: formatting differs from .clang-format; run ./scripts/check-format.sh --fix" >&2
  exit 1
fi
