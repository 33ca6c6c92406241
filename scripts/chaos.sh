#!/usr/bin/env bash
# Chaos run (not in CI): a 10,000-task job of kernels and commands, with outputs that
# travel whole and outputs kept as objects on their nodes and fetched by the merges,
# on a local cluster of four agents at three sites. While it runs, agents are killed
# (SIGKILL) at random and started again, and the coordinator is killed once. The
# answer must come out byte-exact; the script prints what was killed, how long the
# job took to move again after each kill, and how many tasks ran again.
#   scripts/chaos.sh [SEED]        (MERIDIAN_BIN=... to use another build)
set -euo pipefail
cd "$(dirname "$0")/.."

seed="${1:-1}"
RANDOM=$seed
bin="${MERIDIAN_BIN:-build/release/meridian}"
if [ ! -x "$bin" ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release
fi
dir=$(mktemp -d /tmp/meridian-chaos-XXXXXX)  # mktemp fills in the Xs
trap '"$bin" down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
fleet=tests/fleets/local-three-sites.yaml
nodes=(us-cpu-0 us-cpu-1 eu-a100 edge-t4)

"$bin" up --fleet "$fleet" --dir "$dir" --heartbeat-timeout 3s --reconcile-grace 20s >/dev/null

# 5,000 sums, 4,000 shell commands, 800 commands writing 6-12 KB each (objects on
# their nodes), merged in trees, and one command that prints the three totals.
cat >"$dir/chaos.yaml" <<'YAML'
name: chaos
tasks:
  - {name: part, kernel: sum, count: 5000, args: {range: 1000}, resources: {cpu: 250m}}
  - {name: partsum, kernel: sum, reduce: {of: part, fan_in: 50}, resources: {cpu: 250m}}
  - name: cmd
    count: 4000
    command: [sh, -c, 'echo $((MERIDIAN_TASK_INDEX * 3))']
    resources: {cpu: 250m}
    retries: 2
  - {name: cmdsum, kernel: sum, reduce: {of: cmd, fan_in: 40}, resources: {cpu: 250m}}
  - name: big
    count: 800
    command: [sh, -c, 'yes $MERIDIAN_TASK_INDEX | head -n 3000']
    resources: {cpu: 250m}
    retries: 2
  - {name: bigsum, kernel: sum, reduce: {of: big, fan_in: 20}, resources: {cpu: 250m}}
  - name: answer
    after: [partsum, cmdsum, bigsum]
    command: [sh, -c, 'for f in 0 1 2; do cat $MERIDIAN_INPUTS/$f; echo; done']
YAML
# 0 + 1 + ... + 4,999,999; 3 x (0 + ... + 3,999); 3,000 x (0 + ... + 799).
expected=$'12499997500000\n23994000\n958800000\n'

submitted=$("$bin" submit "$dir/chaos.yaml" --dir "$dir" --json)
job=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$submitted")
total=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tasks"])' "$submitted")
echo "chaos: job $job, $total tasks, seed $seed"

now() { date +%s.%N; }
progress() {  # prints "state succeeded retries"
  "$bin" jobs --dir "$dir" --json 2>/dev/null | python3 -c '
import json, sys
for j in json.load(sys.stdin):
    if j["id"] == int(sys.argv[1]):
        print(j["state"], j["tasks"]["succeeded"], j["retries"])' "$job" 2>/dev/null || echo "unreachable 0 0"
}
# Waits until more tasks succeeded than `$1`; prints the seconds it took.
recovery() {
  local before=$1 t0 s
  t0=$(now)
  while true; do
    read -r state s _ < <(progress)
    if [ "$state" = succeeded ] || [ "$state" = failed ] || [ "${s:-0}" -gt "$before" ]; then break; fi
    sleep 0.2
  done
  python3 -c "print(f'{$(now) - $t0:.1f}')"
}

start=$(now)
kills=0
coordinator_killed=0
recoveries=()
while true; do
  read -r state done_tasks retries < <(progress)
  if [ "$state" = succeeded ] || [ "$state" = failed ] || [ "$state" = cancelled ]; then break; fi
  sleep $((1 + RANDOM % 2))
  read -r state done_tasks retries < <(progress)
  if [ "$state" != running ] && [ "$state" != queued ]; then continue; fi
  if [ "$coordinator_killed" -eq 0 ] && [ "$done_tasks" -gt $((total / 5)) ]; then
    kill -9 "$(cat "$dir/pids/coordinator.pid")"
    coordinator_killed=1
    sleep 1
    "$bin" up --fleet "$fleet" --dir "$dir" --heartbeat-timeout 3s --reconcile-grace 20s >/dev/null
    r=$(recovery "$done_tasks")
    echo "chaos: killed the coordinator at $done_tasks/$total; progress again after ${r}s"
  else
    victim=${nodes[$((RANDOM % ${#nodes[@]}))]}
    kill -9 "$(cat "$dir/pids/agent-$victim.pid")" 2>/dev/null || true
    sleep $((1 + RANDOM % 3))
    "$bin" up --fleet "$fleet" --dir "$dir" --heartbeat-timeout 3s --reconcile-grace 20s >/dev/null
    r=$(recovery "$done_tasks")
    echo "chaos: killed agent $victim at $done_tasks/$total; progress again after ${r}s"
  fi
  kills=$((kills + 1))
  recoveries+=("$r")
done

elapsed=$(python3 -c "print(f'{$(now) - $start:.1f}')")
read -r state done_tasks retries < <(progress)
"$bin" job get "$job" --dir "$dir" --json >"$dir/job.json"
answer=$(python3 -c '
import json, sys
for t in json.load(open(sys.argv[1]))["task_list"]:
    if t["name"] == "answer":
        sys.stdout.write(t["output"])
print("x")' "$dir/job.json")
answer=${answer%x}  # (the x keeps the answer's own final newline from $(...))
# How the attempts ended: what the kills cost.
outcomes=$(python3 -c '
import collections, json, sys
c = collections.Counter(a["outcome"] for t in json.load(open(sys.argv[1]))["task_list"] for a in t["history"])
print(", ".join(f"{n} {o}" for o, n in sorted(c.items())))' "$dir/job.json")
echo "chaos: job $state in ${elapsed}s: $done_tasks/$total tasks, $retries ran again, after $kills kills" \
     "(progress again after: ${recoveries[*]:-none} s)"
echo "chaos: attempts: $outcomes"
if [ "$state" = succeeded ] && [ "$answer" = "$expected" ]; then
  echo "chaos: the answer is byte-exact"
else
  echo "chaos: FAILED: state $state, answer:"
  printf '%s' "$answer" | od -c | head
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
print("chaos: reason:", j["reason"])
for t in j["task_list"]:
    if t["state"] == "failed":
        for a in t["history"]:
            print("chaos:", t["name"], "attempt", a["attempt"], a["node"], a["outcome"], a["reason"])' "$dir/job.json"
  tail -n 30 "$dir/logs/coordinator.log" | grep -i -E "fail|lost|warn" | tail -n 15
  exit 1
fi
