#!/usr/bin/env bash
# The long run of the control plane's deterministic simulation (docs/vopr.md): SEEDS
# seeds from FIRST on, split over the machine's cores, each seed with STEPS events
# under faults. A broken invariant prints its seed and the command that replays it.
#   scripts/vopr.sh [SEEDS=5000] [FIRST=1] [STEPS=20000] [-- extra meridian-vopr options]
# It builds build/release/meridian-vopr if missing; VOPR_BIN=path runs another build.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
seeds=${args[0]:-5000}
first=${args[1]:-1}
steps=${args[2]:-20000}
bin=${VOPR_BIN:-build/release/meridian-vopr}
if [ ! -x "$bin" ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release -j"$(nproc)" --target meridian-vopr
fi
jobs=$(nproc)
per=$(( (seeds + jobs - 1) / jobs ))
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
start=$(date +%s)
pids=()
for ((j = 0; j < jobs; ++j)); do
  from=$(( first + j * per ))
  count=$(( per < first + seeds - from ? per : first + seeds - from ))
  [ "$count" -gt 0 ] || break
  "$bin" --seed "$from" --seeds "$count" --steps "$steps" "$@" >"$logs/$j.out" 2>"$logs/$j.err" &
  pids+=($!)
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done
cat "$logs"/*.err
ran=$(cat "$logs"/*.out | grep -c ': ok:' || true)
echo "$ran seeds held every invariant in $(( $(date +%s) - start )) s (seeds $first..$(( first + seeds - 1 )), $steps steps each)"
exit $fail
