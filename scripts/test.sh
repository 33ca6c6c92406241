#!/usr/bin/env bash
# The README's test command (and CI's): installs what is missing, builds every target
# with warnings as errors under AddressSanitizer + UndefinedBehaviorSanitizer and runs
# all tests; builds again under ThreadSanitizer and runs the unit and runtime tests;
# builds the fuzzers and runs each briefly from its seed corpus. Exits non-zero if
# anything fails.
#
# Build time is most of CI's time (2 cores). The sanitizer presets compile with line
# tables only (-g1: a report still names file and line of every frame), and ASan at
# -O1 as its authors advise: coordinator.cc under ASan + UBSan took 77.5 s at -O2 -g,
# 44.6 s at -O1 -g1. The TSan build and the fuzzers (build and runs) go on beside the
# tests, at SCHED_IDLE: they get the CPU the tests leave idle and no more (see below).
# Each stage prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build

# Stages run beside the tests at SCHED_IDLE, in their own process groups so that an
# early exit stops them whole; their output goes to a log printed when they are awaited.
background_pids=()
stop_background() {
  for pid in "${background_pids[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
}
trap stop_background EXIT
# start_idle LOG COMMAND...: sets background_pid.
start_idle() {
  local log="$1"
  shift
  set -m
  chrt --idle 0 "$@" >"$log" 2>&1 &
  background_pid=$!
  set +m
  background_pids+=("$background_pid")
}
# await PID LOG: prints the stage's log and fails as it did.
await() {
  local status=0
  wait "$1" || status=$?
  cat "$2"
  return "$status"
}
timed() {
  local started=$SECONDS
  "$@"
  echo "== took $((SECONDS - started)) s: $*"
}

timed scripts/install-deps.sh
# The dashboard, for its browser test (tests/dashboard_test.sh).
timed scripts/build-web.sh

echo "== AddressSanitizer + UndefinedBehaviorSanitizer: every test"
cmake --preset asan >/dev/null
timed cmake --build --preset asan
# The TSan build goes on meanwhile, on what the ASan tests leave idle (about 15% of
# the 2 cores, at -j2).
cmake --preset tsan >/dev/null
start_idle build/tsan-build.log bash -c 'started=$SECONDS; cmake --build --preset tsan && echo "== took $((SECONDS - started)) s: the TSan build"'
tsan_build_pid=$background_pid
timed ctest --preset asan

echo "== ThreadSanitizer: the unit and runtime tests"
# Debian's gRPC, protobuf and abseil are not instrumented: tests/tsan.supp hides the
# reports inside them. The cluster tests run one at a time: under TSan every process
# is several times slower, and clusters side by side on 2 cores would miss heartbeats.
# Not again under TSan (their point is bytes, not threads, and they take minutes
# there): the 1 GiB transfers, the 16 MiB oversized request, the 160 tasks' 21 MB of
# saved reports, the 70 tasks' 8.75 MiB of logs read in pages (the paging's logic runs
# under TSan in the coordinator's unit tests), the 30 s of keepalive pings; nor the
# include rules (a script), nor the GPU comparisons (no GPU in CI; CUDA is not
# instrumented).
timed await "$tsan_build_pid" build/tsan-build.log
# The fuzzers are built and run meanwhile: the cluster tests, one at a time, keep the
# 2 cores about 63% busy.
start_idle build/fuzz-stage.log bash -c 'started=$SECONDS; scripts/fuzz.sh 10 && echo "== took $((SECONDS - started)) s: the fuzzers"'
fuzz_pid=$background_pid
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tests/tsan.supp"
cluster_tests='RuntimeTest|RuntimeReportsTest|RuntimePostgresTest|DataPlaneTest|SecurityTest|WorkloadsTest|ObservabilityTest|TrainingTest|^dashboard$|^cli$|^netns$|^deploy$|^slurm$|^k8s$|^stream$|^stream_fault$|^service$|^service_fallback$|^site_gateway$'
timed ctest --preset tsan -E "$cluster_tests|GpuKernels|GpuChain|OverOneGib|^link_rules"
timed ctest --preset tsan -j1 -R "$cluster_tests" -E 'OverOneGib|BadInputGetsOneClearError|ReportsSavedUpWhileTheCoordinator|JobLogsOfManyChattyTasks|TheCoordinatorTakesKeepalivePings'
unset TSAN_OPTIONS

echo "== Fuzzers: 10 s each from the committed corpus (scripts/fuzz.sh 600 for the long run)"
timed await "$fuzz_pid" build/fuzz-stage.log
