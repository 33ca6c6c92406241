#!/usr/bin/env bash
# Exactly-once and offline autonomy at the edge (docs/streams.md): the stream of
# tests/stream/factory.yaml runs as a job at the factory of a local cluster while
# mosquitto_pub publishes tests/stream/reference.py's records (out of order, late,
# twice, malformed) a chunk at a time, twice:
#  1. Two jobs of the stream, one whose sink is an MQTT topic, one whose sink is a
#     dataset. Once results flow, the factory's agent is killed with kill -9 (their
#     tasks go with it: the parent-death signal), and started again as a supervisor
#     would. Each stream's second attempt restores its checkpoint, replays its ingest
#     log and reads on from its session at the broker.
#  2. The results go to the broker of another edge site, the depot (`sink: {site:
#     depot}`, as the factory's user there). Once they flow, the factory is cut off for
#     30 s: the coordinator and the depot's broker stop answering (SIGSTOP: the test's
#     sites share loopback, so the far side of the link is frozen rather than the
#     link). The factory reads and computes on, holding its results; when the link
#     returns they go out, in order.
# Every window, and every counter but the broker's redeliveries, must equal the
# reference's; a result that comes twice must be the very same, and the dataset holds
# each once.
#   tests/stream_fault_test.sh MERIDIAN SOURCE_DIR
set -uo pipefail
meridian=$(realpath "$1")
src=$(realpath "$2")
py=/usr/bin/python3
export PATH="$PATH:/usr/sbin:/sbin"
tmp=$(mktemp -d)
chmod 711 "$tmp"  # task users reach their directories in the cluster's
cluster="$tmp/cluster"
. "$src/tests/process_lib.sh"
finish() {
  [ -n "${coordinator:-}" ] && kill -CONT "$coordinator" "${depot:-}" 2>/dev/null
  "$meridian" down --dir "$cluster" >/dev/null 2>&1
  if [ "$fail" -ne 0 ]; then
    for f in "$tmp"/*.log "$tmp"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done
  fi
  stop_started
}
trap finish EXIT
guard_cleanup finish
test_budget 370  # ctest's TIMEOUT is 400 s
wait_for() {  # FILE TEXT SECONDS
  for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
results() { grep -c '^{' "$tmp/results.log" 2>/dev/null || true; }
coordinator=""
depot=""
job_state() {  # JOB
  "$meridian" job get "$1" --dir "$cluster" --json 2>/dev/null | $py -c 'import json,sys; print(json.load(sys.stdin)["state"])'
}
wait_job() {  # JOB: until it ends; says how
  local state=""
  for _ in $(seq 1 900); do
    state=$(job_state "$1")
    [ "$state" = succeeded ] || [ "$state" = failed ] && break
    sleep 0.1
  done
  echo "$state"
}

$py "$src/tests/stream/reference.py" make "$tmp"
want=$($py "$src/tests/stream/reference.py" count "$tmp")
"$meridian" up --fleet "$src/tests/stream/edge-fleet.yaml" --dir "$cluster" --heartbeat-timeout 2s --gateways none >"$tmp/up.log" 2>&1 ||
  { bad "meridian up"; exit 1; }
url=$(cat "$cluster/mqtt/factory/url")
tls=(--cafile "$cluster/tls/ca.crt" -h 127.0.0.1 -p "${url##*:}")
stdbuf -oL mosquitto_sub -d "${tls[@]}" -u meridian -P "$(cat "$cluster/mqtt/factory/meridian.password")" -q 1 \
  -t results/factory >"$tmp/results.log" 2>&1 &
pids+=($!)
wait_for "$tmp/results.log" "SUBACK" 10 || { bad "mosquitto_sub subscribed"; exit 1; }

# Checkpoints twice a second: a kill finds some records logged since the last one.
sed 's/^end_after_idle: .*/end_after_idle: 3s\ncheckpoint_interval: 500ms/' "$src/tests/stream/factory.yaml" >"$tmp/fault.yaml"
sed 's/^sink: .*/sink: {dataset: presses-windows}/' "$tmp/fault.yaml" >"$tmp/fault-dataset.yaml"
# Submits SPEC as job JOB and waits until its stream reads.
submit_stream() {  # SPEC JOB
  "$meridian" submit "$1" --dir "$cluster" >>"$tmp/submit.log" 2>&1 || { bad "submit $1"; exit 1; }
  for _ in $(seq 1 300); do
    "$meridian" job logs "$2" --dir "$cluster" >"$tmp/job$2.err" 2>&1
    grep -q "reading 'sensors/factory/#'" "$tmp/job$2.err" && return 0
    sleep 0.1
  done
  bad "stream job $2 started reading"
  exit 1
}
# Publishes the records in the background, about 200 a second, as sensors would.
split -l 40 "$tmp/records.txt" "$tmp/chunk."
publish_records() {  # LOG
  (
    for c in "$tmp"/chunk.*; do
      mosquitto_pub "${tls[@]}" -u sensors -P "$(cat "$cluster/mqtt/factory/sensors.password")" -q 1 \
        -t sensors/factory/line -l <"$c" || exit 1
      sleep 0.2
    done
  ) >"$1" 2>&1 &
  publisher=$!
  pids+=($publisher)
}

# 1. The factory's agent killed mid-stream.
submit_stream "$tmp/fault.yaml" 1
submit_stream "$tmp/fault-dataset.yaml" 2
publish_records "$tmp/publisher.log"

# Mid-stream: 40 windows written, more to come.
for _ in $(seq 1 300); do [ "$(results)" -ge 40 ] && break; sleep 0.1; done
[ "$(results)" -ge 40 ] || { bad "40 results before the kill (got $(results))"; exit 1; }
agent=$(cat "$cluster/pids/agent-factory-box.pid")
runner=$(pgrep -P "$agent" -f "stream run" | head -n 1)
[ -n "$runner" ] && ok "the stream's task runs under the factory's agent (pid $runner)" ||
  bad "no stream task under the factory's agent"
at_kill=$(results)
kill -9 "$agent"
for _ in $(seq 1 100); do kill -0 "$agent" 2>/dev/null || break; sleep 0.1; done
for _ in $(seq 1 50); do kill -0 "$runner" 2>/dev/null || break; sleep 0.1; done
kill -0 "$runner" 2>/dev/null && bad "the task outlived its killed agent" ||
  ok "the agent killed with $at_kill of $want windows out; its task went with it"
"$meridian" up --fleet "$src/tests/stream/edge-fleet.yaml" --dir "$cluster" --heartbeat-timeout 2s --gateways none >>"$tmp/up.log" 2>&1 ||
  bad "meridian up after the kill"
wait "$publisher" || bad "mosquitto_pub published every chunk"

# Each job: succeeded at its second attempt, which restored the local checkpoint.
check_restored() {  # JOB
  local state
  state=$(wait_job "$1")
  [ "$state" = succeeded ] && ok "stream job $1 succeeded" || bad "stream job $1 is '$state'"
  "$meridian" job get "$1" --dir "$cluster" --json >"$tmp/job$1.json"
  attempt=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["task_list"][0]["attempts"])' "$tmp/job$1.json")
  [ "$attempt" = 2 ] && ok "one retry: attempt 2 ran to the end" || bad "the stream's task ended at attempt $attempt, not 2"
  "$meridian" job logs "$1" --dir "$cluster" >"$tmp/job$1-end.err" 2>&1
  grep '^{"accepted"' "$tmp/job$1-end.err" | tail -n 1 >"$tmp/counters$1.json"
  notice=$(grep -m1 "restored the local checkpoint" "$tmp/job$1-end.err")
  [ -n "$notice" ] && ok "attempt 2 said: ${notice#*: }" || bad "attempt 2 did not restore the local checkpoint"
  $py -c '
import json, sys
c = json.load(open(sys.argv[1]))
assert c["restored"] == "local" and not c["replay_missing"] and c["checkpoints"] >= 1, c
' "$tmp/counters$1.json" && ok "its counters: $(cat "$tmp/counters$1.json")" || bad "the restored run's counters: $(cat "$tmp/counters$1.json")"
}
check_restored 1
check_restored 2

# Every window out at least once (some twice: those of the records a stopped run read
# after its last checkpoint), then a moment for a late one to show.
distinct() { grep '^{' "$1" | $py -c 'import json,sys; print(len({(json.loads(l)["device"], json.loads(l)["window_start_ms"]) for l in sys.stdin}))'; }
check_results() {  # RESULTS COUNTERS WHAT
  for _ in $(seq 1 200); do [ "$(distinct "$1")" -ge "$want" ] && break; sleep 0.1; done
  sleep 0.5
  if out=$($py "$src/tests/stream/reference.py" check "$tmp" "$1" "$2" --restored); then
    ok "$3: $(echo "$out" | tr '\n' ';')"
  else
    bad "$3: results differ: $out"
  fi
}
check_results "$tmp/results.log" "$tmp/counters1.json" "killed agent, MQTT sink"
# The dataset: one shard, the results file of the stream's last attempt, each window
# once.
"$meridian" data ls presses-windows --dir "$cluster" --json >"$tmp/dataset.json" 2>&1 || bad "data ls presses-windows"
shard=$($py -c '
import json, sys
d = json.load(open(sys.argv[1]))
d = d[0] if isinstance(d, list) else d
shards = d["shards"]
assert len(shards) == 1, shards
print(shards[0]["object_id"] if "object_id" in shards[0] else shards[0]["id"])
' "$tmp/dataset.json") || bad "dataset presses-windows: $(head -c 400 "$tmp/dataset.json")"
"$meridian" objects get "$shard" --dir "$cluster" -o "$tmp/dataset-results.log" >/dev/null 2>&1 || bad "objects get $shard"
if out=$($py "$src/tests/stream/reference.py" check "$tmp" "$tmp/dataset-results.log" "$tmp/counters2.json" --restored --once); then
  ok "killed agent, dataset sink: $(echo "$out" | tr '\n' ';')"
else
  bad "killed agent, dataset sink: results differ: $out"
fi

# 2. The factory cut off for 30 s, its results bound for the depot's broker.
depot_url=$(cat "$cluster/mqtt/depot/url")
stdbuf -oL mosquitto_sub -d --cafile "$cluster/tls/ca.crt" -h 127.0.0.1 -p "${depot_url##*:}" -u meridian \
  -P "$(cat "$cluster/mqtt/depot/meridian.password")" -q 1 -t sites/factory/results >"$tmp/depot-results.log" 2>&1 &
pids+=($!)
wait_for "$tmp/depot-results.log" "SUBACK" 10 || { bad "mosquitto_sub subscribed at the depot"; exit 1; }
depot=$(cat "$cluster/pids/mqtt-depot.pid")
sed "s|^sink: .*|sink: {site: depot, topic: sites/factory/results}|" "$tmp/fault.yaml" >"$tmp/cut.yaml"
submit_stream "$tmp/cut.yaml" 3
publish_records "$tmp/publisher2.log"
depot_results() { grep -c '^{' "$tmp/depot-results.log" 2>/dev/null || true; }
for _ in $(seq 1 300); do [ "$(depot_results)" -ge 20 ] && break; sleep 0.1; done
[ "$(depot_results)" -ge 20 ] || { bad "20 results at the depot before the cut (got $(depot_results))"; exit 1; }
coordinator=$(cat "$cluster/pids/coordinator.pid")
at_cut=$(depot_results)
cut_start=$SECONDS
kill -STOP "$coordinator" "$depot"
ok "cut off with $at_cut of $want windows at the depot"
wait "$publisher" || bad "mosquitto_pub published every chunk while the factory was cut off"
# While cut off the factory computes on: its checkpoints hold the results that wait.
checkpoint=$(find "$cluster" -path '*streams/3-0/checkpoint' 2>/dev/null | head -n 1)
held=0
for _ in $(seq 1 100); do
  [ -n "$checkpoint" ] || checkpoint=$(find "$cluster" -path '*streams/3-0/checkpoint' 2>/dev/null | head -n 1)
  [ -n "$checkpoint" ] && held=$(head -n 1 "$checkpoint" | sed -n 's/.* results=\([0-9]*\).*/\1/p')
  [ "${held:-0}" -ge $((want - at_cut - 12)) ] && break
  sleep 0.2
done
[ "${held:-0}" -ge $((want - at_cut - 12)) ] &&
  ok "while cut off the factory read every record and holds $held results for the depot" ||
  bad "while cut off the factory holds ${held:-no} results (expected about $((want - at_cut)))"
[ "$(depot_results)" -eq "$at_cut" ] || bad "results reached the frozen depot"
sleep $((30 - SECONDS + cut_start))
kill -CONT "$coordinator" "$depot"
ok "the link is back after $((SECONDS - cut_start)) s"
state=$(wait_job 3)
[ "$state" = succeeded ] && ok "the cut stream's job succeeded" || bad "the cut stream's job is '$state'"
"$meridian" job logs 3 --dir "$cluster" >"$tmp/job3-end.err" 2>&1
grep '^{"accepted"' "$tmp/job3-end.err" | tail -n 1 >"$tmp/counters3.json"
grep -E "^stream factory-presses: (restored|it ended before)" "$tmp/job3-end.err" | sed "s/^/     /"
check_results "$tmp/depot-results.log" "$tmp/counters3.json" "cut off for 30 s"
[ "$fail" -eq 0 ] && echo "PASS: exactly-once across a killed edge agent and a 30 s cut" || echo "FAIL"
exit "$fail"
