#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with ASan + UBSan) and runs each for
# SECONDS (default 600) from its committed seed corpus. CI runs it for a few seconds;
# run it longer by hand. New inputs that reach new code go to build/fuzz/corpus/, never
# into the committed corpus; a crash leaves its input in build/fuzz/crashes/ and
# fails the script.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-600}"
shift || true
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(fuzz_job_spec fuzz_fleet_spec fuzz_trace fuzz_gavel fuzz_transfer_wire fuzz_proto_convert fuzz_chain_verify fuzz_kernels fuzz_delay_line fuzz_stream fuzz_service_spec fuzz_predict_body)
fi

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

mkdir -p build/fuzz/crashes
failed=0
for t in "${targets[@]}"; do
  work="build/fuzz/corpus/$t"
  mkdir -p "$work"
  echo "fuzz: $t for ${seconds}s"
  # The seeds are read, new finds are written to $work; one input at most 64 KiB,
  # 2 GiB of memory, 10 s per input.
  if ! ASAN_OPTIONS=detect_leaks=1 "build/fuzz/fuzz/$t" "$work" "fuzz/corpus/$t" -max_total_time="$seconds" \
      -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="build/fuzz/crashes/$t-" >"build/fuzz/$t.log" 2>&1; then
    echo "fuzz: $t FAILED; its log: build/fuzz/$t.log; the input: build/fuzz/crashes/$t-*"
    tail -n 40 "build/fuzz/$t.log"
    failed=1
  else
    grep -E "^stat::number_of_executed_units|^Done" "build/fuzz/$t.log" | tr '\n' ' ' | sed "s/^/fuzz: $t: /"
    echo
  fi
done
exit "$failed"
