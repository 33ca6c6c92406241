#!/usr/bin/env bash
# Exactly-once across a killed edge agent (docs/streams.md): the stream of
# tests/stream/factory.yaml runs as a job at the factory of a local cluster while
# mosquitto_pub publishes tests/stream/reference.py's records (out of order, late,
# twice, malformed) a chunk at a time. Once results flow, the factory's agent is
# killed with kill -9 (its task goes with it: the parent-death signal), and started
# again as a supervisor would. The stream's second attempt restores its checkpoint,
# replays its ingest log and reads on from its session at the broker. Every window,
# and every counter but the broker's redeliveries, must equal the reference's; a
# result that comes twice must be the very same.
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
  "$meridian" down --dir "$cluster" >/dev/null 2>&1
  if [ "$fail" -ne 0 ]; then
    for f in "$tmp"/*.log "$tmp"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done
  fi
  stop_started
}
trap finish EXIT
wait_for() {  # FILE TEXT SECONDS
  for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
results() { grep -c '^{' "$tmp/results.log" 2>/dev/null || true; }
job_state() {
  "$meridian" job get 1 --dir "$cluster" --json 2>/dev/null | $py -c 'import json,sys; print(json.load(sys.stdin)["state"])'
}

$py "$src/tests/stream/reference.py" make "$tmp"
want=$($py "$src/tests/stream/reference.py" count "$tmp")
"$meridian" up --fleet "$src/tests/stream/edge-fleet.yaml" --dir "$cluster" --heartbeat-timeout 2s >"$tmp/up.log" 2>&1 ||
  { bad "meridian up"; exit 1; }
url=$(cat "$cluster/mqtt/factory/url")
tls=(--cafile "$cluster/tls/ca.crt" -h 127.0.0.1 -p "${url##*:}")
stdbuf -oL mosquitto_sub -d "${tls[@]}" -u meridian -P "$(cat "$cluster/mqtt/factory/meridian.password")" -q 1 \
  -t results/factory >"$tmp/results.log" 2>&1 &
pids+=($!)
wait_for "$tmp/results.log" "SUBACK" 10 || { bad "mosquitto_sub subscribed"; exit 1; }

# Checkpoints twice a second: a kill finds some records logged since the last one.
sed 's/^end_after_idle: .*/end_after_idle: 3s\ncheckpoint_interval: 500ms/' "$src/tests/stream/factory.yaml" >"$tmp/fault.yaml"
"$meridian" submit "$tmp/fault.yaml" --dir "$cluster" >"$tmp/submit.log" 2>&1 || { bad "submit"; exit 1; }
for _ in $(seq 1 300); do
  "$meridian" job logs 1 --dir "$cluster" >"$tmp/job.err" 2>&1
  grep -q "reading 'sensors/factory/#'" "$tmp/job.err" && break
  sleep 0.1
done
grep -q "reading 'sensors/factory/#'" "$tmp/job.err" || { bad "the stream job started reading"; exit 1; }

# About 200 records a second, as sensors would send them.
split -l 40 "$tmp/records.txt" "$tmp/chunk."
(
  for c in "$tmp"/chunk.*; do
    mosquitto_pub "${tls[@]}" -u sensors -P "$(cat "$cluster/mqtt/factory/sensors.password")" -q 1 \
      -t sensors/factory/line -l <"$c" || exit 1
    sleep 0.2
  done
) >"$tmp/publisher.log" 2>&1 &
publisher=$!
pids+=($publisher)

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
"$meridian" up --fleet "$src/tests/stream/edge-fleet.yaml" --dir "$cluster" --heartbeat-timeout 2s >>"$tmp/up.log" 2>&1 ||
  bad "meridian up after the kill"
wait "$publisher" || bad "mosquitto_pub published every chunk"

state=""
for _ in $(seq 1 900); do
  state=$(job_state)
  [ "$state" = succeeded ] || [ "$state" = failed ] && break
  sleep 0.1
done
[ "$state" = succeeded ] && ok "the stream job succeeded" || bad "the stream job is '$state'"
"$meridian" job get 1 --dir "$cluster" --json >"$tmp/job.json"
attempt=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["task_list"][0]["attempts"])' "$tmp/job.json")
[ "$attempt" = 2 ] && ok "one retry: attempt 2 ran to the end" || bad "the stream's task ended at attempt $attempt, not 2"
"$meridian" job logs 1 --dir "$cluster" >"$tmp/job-end.err" 2>&1
grep '^{"accepted"' "$tmp/job-end.err" | tail -n 1 >"$tmp/counters.json"
notice=$(grep -m1 "restored the local checkpoint" "$tmp/job-end.err")
[ -n "$notice" ] && ok "attempt 2 said: ${notice#*: }" || bad "attempt 2 did not restore the local checkpoint"
$py -c '
import json, sys
c = json.load(open(sys.argv[1]))
assert c["restored"] == "local" and not c["replay_missing"] and c["checkpoints"] >= 1, c
' "$tmp/counters.json" && ok "its counters: $(cat "$tmp/counters.json")" || bad "the restored run's counters: $(cat "$tmp/counters.json")"

# Every window out at least once (some twice: those of the records the killed run read
# after its last checkpoint), then a moment for a late one to show.
distinct() { grep '^{' "$tmp/results.log" | $py -c 'import json,sys; print(len({(json.loads(l)["device"], json.loads(l)["window_start_ms"]) for l in sys.stdin}))'; }
for _ in $(seq 1 200); do [ "$(distinct)" -ge "$want" ] && break; sleep 0.1; done
sleep 0.5
if out=$($py "$src/tests/stream/reference.py" check "$tmp" "$tmp/results.log" "$tmp/counters.json" --restored); then
  ok "$(echo "$out" | tr '\n' ';')"
else
  bad "results after the restore differ: $out"
fi
[ "$fail" -eq 0 ] && echo "PASS: exactly-once across a killed edge agent" || echo "FAIL"
exit "$fail"
