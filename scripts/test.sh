#!/usr/bin/env bash
# The README's test command (and CI's): installs what is missing, builds every target
# with warnings as errors under AddressSanitizer + UndefinedBehaviorSanitizer, and runs
# all tests. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset asan >/dev/null
cmake --build --preset asan
ctest --preset asan
