#!/usr/bin/env bash
# The README's test command (and CI's): installs what is missing, builds every target
# with warnings as errors under AddressSanitizer + UndefinedBehaviorSanitizer and runs
# all tests; builds again under ThreadSanitizer and runs the unit and runtime tests;
# builds the fuzzers and runs each briefly from its seed corpus. Exits non-zero if
# anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

echo "== AddressSanitizer + UndefinedBehaviorSanitizer: every test"
cmake --preset asan >/dev/null
cmake --build --preset asan
ctest --preset asan

echo "== ThreadSanitizer: the unit and runtime tests"
# Not again under TSan: the 1 GiB transfer (its bytes, not its threads, are the
# point) and the GPU comparisons (no GPU in CI; the CUDA path is not instrumented).
cmake --preset tsan >/dev/null
cmake --build --preset tsan
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --preset tsan -E 'OverOneGib|GpuKernels'

echo "== Fuzzers: 10 s each from the committed corpus (scripts/fuzz.sh 600 for the long run)"
scripts/fuzz.sh 10
