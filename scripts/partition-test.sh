#!/usr/bin/env bash
# A site cut off mid-job and healed, on sites in network namespaces (scripts/netsim.sh,
# `meridian up --netns`; root). Prints the recovery figures: when the coordinator
# declared the cut site's node dead, how many tasks were re-placed, whether the job's
# answer is exact, whether the healed node came back, and throughput after the heal
# against an undisturbed run of the same job in the same session.
#
#   scripts/partition-test.sh [--cut-seconds 10] [--tasks 160] [--loss 5] [--jitter 20]
#                             [--meridian BIN]
#
# Then the same job with LOSS% of the factory's packets dropped (nftables, random),
# and with 0 to JITTER ms added to each of its packets each way (netem, or
# meridian-delayline where the kernel has none), each against the undisturbed run.
#
# The job: TASKS command tasks, each sleeping 1 s and printing the square of its
# index (retries: 3), on the three-site test fleet's 16 cores (the factory's 4 are
# the cheapest, so it gets work first).
set -euo pipefail
cd "$(dirname "$0")/.."
cut_seconds=10
tasks=160
loss=5
jitter=20
bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cut-seconds) cut_seconds=$2; shift 2 ;;
    --tasks) tasks=$2; shift 2 ;;
    --loss) loss=$2; shift 2 ;;
    --jitter) jitter=$2; shift 2 ;;
    --meridian) bin=$2; shift 2 ;;
    *) echo "partition-test: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  for m in build/release/meridian build/dev/meridian; do [ -x "$m" ] && bin=$m && break; done
fi
[ -n "$bin" ] || { echo "partition-test: build meridian first (or --meridian BIN)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "partition-test: needs root (network namespaces)" >&2; exit 2; }
bin=$(realpath "$bin")
prefix=mpt
fleet=tests/fleets/local-three-sites.yaml
tmp=$(mktemp -d)
cleanup() {
  "$bin" down --dir "$tmp/cluster" >/dev/null 2>&1 || true
  scripts/netsim.sh down --prefix "$prefix" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
now() { date +%s.%N; }
elapsed() { python3 -c "print(f'{$2 - $1:.2f}')"; }
m() { "$bin" "$@" --dir "$tmp/cluster"; }

scripts/netsim.sh up "$fleet" --prefix "$prefix" --meridian "$bin" >/dev/null
m up --netns "$prefix" --fleet "$fleet" >/dev/null
cat >"$tmp/job.yaml" <<EOF
name: squares
tasks:
  - name: sq
    count: $tasks
    command: [sh, -c, 'sleep 1; echo \$((MERIDIAN_TASK_INDEX * MERIDIAN_TASK_INDEX))']
    resources: {cpu: 1}
    retries: 3
EOF
state_of() { m nodes --json | python3 -c "import json,sys; print([n['state'] for n in json.load(sys.stdin) if n['name'] == '$1'][0])"; }
# Runs the job to its end; prints its seconds; its JSON in $tmp/JOB.json.
run_job() {
  local label=$1 t0 id
  t0=$(now)
  id=$(m submit "$tmp/job.yaml" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
  echo "$id" >"$tmp/$label.id"
  if [ -n "${2:-}" ]; then "$2" & fi
  while true; do
    m job get "$id" --json >"$tmp/$label.json"
    status=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['state'])" "$tmp/$label.json")
    case "$status" in succeeded|failed|cancelled) break ;; esac
    sleep 0.2
  done
  wait
  elapsed "$t0" "$(now)" >"$tmp/$label.seconds"
}
check_answer() {  # label -> "exact" or what differs
  python3 - "$tmp/$1.json" "$tasks" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1])); n = int(sys.argv[2])
tasks = j["task_list"]
bad = [t["name"] for t in tasks if t["state"] != "succeeded" or t["output"].strip() != str(int(t["name"].split("/")[1]) ** 2)]
print("exact" if len(tasks) == n and not bad and j["state"] == "succeeded" else f"{j['state']}, {len(bad)} wrong: {bad[:5]}")
EOF
}

# 1. Undisturbed.
run_job before
before_s=$(cat "$tmp/before.seconds")
echo "undisturbed: $tasks tasks in $before_s s ($(python3 -c "print(f'{$tasks / $before_s:.1f}')") tasks/s), answer $(check_answer before)"

# 2. The factory cut off 2 s into the job, healed cut_seconds later.
fault() {
  sleep 2
  scripts/netsim.sh cut factory --prefix "$prefix" >/dev/null
  local cut_at
  cut_at=$(now)
  echo "$cut_at" >"$tmp/cut_at"
  while [ "$(state_of edge-t4)" = alive ]; do sleep 0.05; done
  elapsed "$cut_at" "$(now)" >"$tmp/detected"
  sleep "$(python3 -c "print(max(0, $cut_seconds - $(cat "$tmp/detected")))")"
  scripts/netsim.sh heal factory --prefix "$prefix" >/dev/null
  local heal_at
  heal_at=$(now)
  echo "$heal_at" >"$tmp/heal_at"
  while [ "$(state_of edge-t4)" != alive ]; do sleep 0.05; done
  elapsed "$heal_at" "$(now)" >"$tmp/back"
}
run_job during fault
echo "cut: the factory's node declared dead $(cat "$tmp/detected") s after the cut (heartbeat timeout 2 s); healed after ${cut_seconds} s, alive again $(cat "$tmp/back") s later"
python3 - "$tmp/during.json" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
replaced = [t for t in j["task_list"] if any(h["node"] == "edge-t4" and h["outcome"] != "succeeded" for h in t["history"])]
done_at_factory = sum(1 for t in j["task_list"] if t["node"] == "edge-t4")
import collections
outcomes = collections.Counter(h["outcome"] for t in replaced for h in t["history"] if h["node"] == "edge-t4")
twice = [t["name"] for t in j["task_list"] if sum(h["outcome"] == "succeeded" for h in t["history"]) > 1]
print(f"tasks re-placed from the cut site: {len(replaced)} (their final nodes: "
      f"{sorted(set(t['node'] for t in replaced))}); their attempts at the factory: {dict(outcomes)}; "
      f"tasks with two successful attempts: {len(twice)}; tasks that ended at the factory: {done_at_factory}")
EOF
echo "faulted run: $tasks tasks in $(cat "$tmp/during.seconds") s, answer $(check_answer during)"

# 3. Right after the heal, the same job again.
run_job after
after_s=$(cat "$tmp/after.seconds")
echo "after the heal: $tasks tasks in $after_s s ($(python3 -c "print(f'{$tasks / $after_s:.1f}')") tasks/s), answer $(check_answer after); throughput $(python3 -c "print(f'{$before_s / $after_s:.2f}')") of the undisturbed run's, measured within $(elapsed "$(cat "$tmp/heal_at")" "$(now)") s of the heal"
echo "sites of the post-heal run: $(python3 -c "
import json, collections, sys
print(dict(collections.Counter(t['site'] for t in json.load(open(sys.argv[1]))['task_list'])))" "$tmp/after.json")"

# 4. The factory's link losing packets for a whole run.
scripts/netsim.sh loss factory "$loss" --prefix "$prefix" >/dev/null
run_job lossy
scripts/netsim.sh heal factory --prefix "$prefix" >/dev/null
lossy_s=$(cat "$tmp/lossy.seconds")
echo "with ${loss}% of the factory's packets lost: $tasks tasks in $lossy_s s ($(python3 -c "print(f'{$before_s / $lossy_s:.2f}')") of the undisturbed throughput), answer $(check_answer lossy), factory node $(state_of edge-t4), tasks at the factory: $(python3 -c "
import json, sys
print(sum(1 for t in json.load(open(sys.argv[1]))['task_list'] if t['site'] == 'factory'))" "$tmp/lossy.json")"

# 5. Jitter on the factory's link for a whole run: its round trips (to eu-west's node
# and to the coordinator) before and during, whether its node ever left `alive`.
rtt() {  # site, address -> "min/avg/max ms" over 20 pings
  scripts/netsim.sh exec "$1" --prefix "$prefix" -- ping -c 20 -i 0.05 -q "$2" | awk -F'[ /]' '/^rtt/ {print $7 "/" $8 "/" $9 " ms"}'
}
echo "round trips before jitter (min/avg/max): factory -> eu-west $(rtt factory 10.200.2.2), factory -> coordinator $(rtt factory 10.200.255.1)"
scripts/netsim.sh jitter factory "$jitter" --prefix "$prefix"
echo "round trips with 0-${jitter} ms of jitter each way: factory -> eu-west $(rtt factory 10.200.2.2), factory -> coordinator $(rtt factory 10.200.255.1)"
watch_node() {  # until the job ends (run_job writes its JSON as it polls)
  : >"$tmp/states"
  while python3 -c "
import json, sys
try:
    sys.exit(json.load(open(sys.argv[1]))['state'] in ('succeeded', 'failed', 'cancelled'))
except (OSError, ValueError):
    sys.exit(0)  # not written yet, or being written" "$tmp/jittered.json"; do
    state_of edge-t4 >>"$tmp/states"
    sleep 0.2
  done
}
run_job jittered watch_node
jittered_s=$(cat "$tmp/jittered.seconds")
echo "with 0-${jitter} ms of jitter on the factory's packets: $tasks tasks in $jittered_s s ($(python3 -c "print(f'{$before_s / $jittered_s:.2f}')") of the undisturbed throughput), answer $(check_answer jittered), factory node states seen: $(sort "$tmp/states" | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}'), tasks at the factory: $(python3 -c "
import json, sys
print(sum(1 for t in json.load(open(sys.argv[1]))['task_list'] if t['site'] == 'factory'))" "$tmp/jittered.json")"
[ -f "/run/meridian-netsim/$prefix/delayline.json" ] && echo "delay line: $(cat "/run/meridian-netsim/$prefix/delayline.json")"
scripts/netsim.sh heal factory --prefix "$prefix" >/dev/null
