#!/usr/bin/env bash
# A stream job end to end with a real broker and an independent publisher: mosquitto
# (password required) on a loopback port, `meridian stream run tests/stream/factory.yaml`
# reading it, Mosquitto's own mosquitto_pub publishing records made by
# tests/stream/reference.py (out of order, late, twice, malformed, filtered), and
# mosquitto_sub collecting the results. Every window's result, and every counter, must
# equal what the reference computes from the published records.
#   tests/stream_test.sh MERIDIAN SOURCE_DIR
set -euo pipefail
meridian=$(realpath "$1")
src=$(realpath "$2")
py=/usr/bin/python3
export PATH="$PATH:/usr/sbin:/sbin"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$tmp"/*.log "$tmp"/*.err; do [ -f "$f" ] && { echo "--- $f"; tail -n 20 "$f"; }; done
  exit 1
}
wait_for() {  # FILE TEXT SECONDS
  for _ in $(seq 1 $(($3 * 10))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "no '$2' in $1 after $3 s"
}

port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mosquitto_passwd -c -b "$tmp/passwd" sensor-hub "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" 2>/dev/null
password=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
mosquitto_passwd -b "$tmp/passwd" meridian "$password"
printf '%s\n' "$password" >"$tmp/password"
chmod 600 "$tmp/password"
cat >"$tmp/mosquitto.conf" <<CONF
listener $port 127.0.0.1
allow_anonymous false
password_file $tmp/passwd
persistence false
user $(id -un)
max_packet_size 65536
# As meridian up's brokers: a consumer behind by more than this loses QoS 1 messages
# (mosquitto's default is 1,000, which a publisher as fast as mosquitto_pub outruns).
max_queued_messages 100000
CONF
mosquitto -c "$tmp/mosquitto.conf" >"$tmp/mosquitto.log" 2>&1 &
pids+=($!)
wait_for "$tmp/mosquitto.log" "running" 10
broker="mqtt://127.0.0.1:$port"
auth=(--broker "$broker" --mqtt-user meridian --mqtt-password-file "$tmp/password")

# A wrong password is refused, with the broker's reason and exit code 4.
echo wrong >"$tmp/wrong"
set +e
"$meridian" stream run "$src/tests/stream/factory.yaml" --broker "$broker" --mqtt-user meridian \
  --mqtt-password-file "$tmp/wrong" >"$tmp/refused.out" 2>"$tmp/refused.err"
rc=$?
set -e
[ "$rc" -eq 4 ] || fail "a wrong password: exit $rc, expected 4"
grep -q "refused the connection: Connection Refused: not authorised" "$tmp/refused.err" ||
  fail "a wrong password: $(cat "$tmp/refused.err")"

$py "$src/tests/stream/reference.py" make "$tmp"
want=$($py "$src/tests/stream/reference.py" count "$tmp")

stdbuf -oL mosquitto_sub -d -p "$port" -u meridian -P "$password" -q 1 -t results/factory >"$tmp/results.log" 2>&1 &
pids+=($!)
wait_for "$tmp/results.log" "SUBACK" 10
"$meridian" stream run "$src/tests/stream/factory.yaml" "${auth[@]}" --json \
  >"$tmp/counters.json" 2>"$tmp/stream.err" &
stream=$!
# The same stream with a dataset sink, by hand: its results on stdout (what becomes the
# dataset's shard in a job), what it counted on stderr.
sed 's/^sink: .*/sink: {dataset: presses}/' "$src/tests/stream/factory.yaml" >"$tmp/dataset.yaml"
"$meridian" stream run "$tmp/dataset.yaml" "${auth[@]}" --json >"$tmp/dataset-results.log" 2>"$tmp/dataset.err" &
to_dataset=$!
wait_for "$tmp/stream.err" "reading 'sensors/factory/#'" 20
wait_for "$tmp/dataset.err" "results to dataset 'presses'" 20
mosquitto_pub -p "$port" -u meridian -P "$password" -q 1 -t sensors/factory/line -l <"$tmp/records.txt"
wait "$stream" || fail "stream run exited $?"
wait "$to_dataset" || fail "stream run (dataset sink) exited $?"
[ "$(grep -vc '^{' "$tmp/dataset-results.log")" = 0 ] || fail "a dataset sink's stdout holds more than results"
$py "$src/tests/stream/reference.py" check "$tmp" "$tmp/dataset-results.log" "$tmp/dataset.err" ||
  fail "the dataset sink's results differ"
for _ in $(seq 1 200); do
  [ "$(grep -c '^{' "$tmp/results.log" || true)" -ge "$want" ] && break
  sleep 0.1
done
sleep 0.3  # a result past the expected count would be a duplicate: give it time to show
$py "$src/tests/stream/reference.py" check "$tmp" "$tmp/results.log" "$tmp/counters.json" || fail "results differ"
echo "standalone: $want windows equal the reference's"

# The same stream as a job of a local cluster: `meridian up` starts the factory's
# broker (TLS with the cluster's CA, passwords, ACL), the job's task runs on the
# factory's node with the credentials its agent gives it, the sensors publish as the
# `sensors` user.
cluster="$tmp/cluster"
"$meridian" up --fleet "$src/tests/stream/edge-fleet.yaml" --dir "$cluster" --gateways none >"$tmp/up.log" 2>&1 || fail "meridian up"
pids+=($(cat "$cluster"/pids/*.pid))
url=$(cat "$cluster/mqtt/factory/url")
[[ "$url" == mqtts://127.0.0.1:* ]] || fail "the factory's broker is at '$url', expected mqtts://127.0.0.1:PORT"
cport=${url##*:}
tls=(--cafile "$cluster/tls/ca.crt" -h 127.0.0.1 -p "$cport")
# Without TLS, or anonymous, the broker is closed.
if timeout 5 mosquitto_pub -h 127.0.0.1 -p "$cport" -u sensors -P "$(cat "$cluster/mqtt/factory/sensors.password")" \
    -t sensors/factory/x -m x -q 1 2>/dev/null; then
  fail "the factory's broker took a plaintext connection"
fi
if timeout 5 mosquitto_pub "${tls[@]}" -t sensors/factory/x -m x -q 1 2>/dev/null; then
  fail "the factory's broker took an anonymous client"
fi
# The factory's user at the depot's broker (its streams' sinks there) may publish under
# sites/factory/ and nothing else: not read, not write as the depot's sensors.
durl=$(cat "$cluster/mqtt/depot/url")
dtls=(--cafile "$cluster/tls/ca.crt" -h 127.0.0.1 -p "${durl##*:}")
as_factory=(-u site-factory -P "$(cat "$cluster/mqtt/depot/site-factory.password")")
ps -eo args | grep -q -- "--peer-broker depot,$durl,site-factory," || fail "the factory's agent was not given the depot's broker"
stdbuf -oL mosquitto_sub -d "${dtls[@]}" -u meridian -P "$(cat "$cluster/mqtt/depot/meridian.password")" -q 1 -t '#' \
  >"$tmp/depot-all.log" 2>&1 &
pids+=($!)
stdbuf -oL mosquitto_sub -d "${dtls[@]}" "${as_factory[@]}" -q 1 -t '#' >"$tmp/peer-read.log" 2>&1 &
pids+=($!)
wait_for "$tmp/depot-all.log" "SUBACK" 10
wait_for "$tmp/peer-read.log" "SUBACK" 10
mosquitto_pub "${dtls[@]}" "${as_factory[@]}" -q 1 -t sensors/depot/spoofed -m spoofed || fail "publish as site-factory"
mosquitto_pub "${dtls[@]}" "${as_factory[@]}" -q 1 -t sites/factory/summary -m summary || fail "publish as site-factory"
mosquitto_pub "${dtls[@]}" -u sensors -P "$(cat "$cluster/mqtt/depot/sensors.password")" -q 1 -t sensors/depot/reading \
  -m reading || fail "publish as the depot's sensors"
wait_for "$tmp/depot-all.log" "sites/factory/summary" 10 || fail "the depot's broker did not deliver the factory's summary"
wait_for "$tmp/depot-all.log" "sensors/depot/reading" 10 || fail "the depot's broker did not deliver its sensor's reading"
sleep 0.3
grep -q "spoofed" "$tmp/depot-all.log" && fail "the factory's user wrote as the depot's sensors"
grep -q "received PUBLISH" "$tmp/peer-read.log" && fail "the factory's user read at the depot: $(cat "$tmp/peer-read.log")"
echo "the depot's broker: the factory's user publishes under sites/factory/ only, and reads nothing"
stdbuf -oL mosquitto_sub -d "${tls[@]}" -u meridian -P "$(cat "$cluster/mqtt/factory/meridian.password")" -q 1 \
  -t results/factory >"$tmp/cluster-results.log" 2>&1 &
pids+=($!)
wait_for "$tmp/cluster-results.log" "SUBACK" 10
# Submits SPEC as job JOB and waits until its stream reads TOPIC.
submit_stream() {  # SPEC JOB TOPIC
  "$meridian" submit "$1" --dir "$cluster" >>"$tmp/submit.log" 2>&1 || fail "submit $1"
  for _ in $(seq 1 300); do
    "$meridian" job logs "$2" --dir "$cluster" >"$tmp/job$2.err" 2>&1 || true
    grep -q "reading '$3'" "$tmp/job$2.err" && return 0
    sleep 0.1
  done
  fail "job $2 did not start reading '$3'"
}
wait_succeeded() {  # JOB
  local state=""
  for _ in $(seq 1 300); do
    state=$("$meridian" job get "$1" --dir "$cluster" --json | $py -c 'import json,sys; print(json.load(sys.stdin)["state"])')
    [ "$state" = succeeded ] || [ "$state" = failed ] && break
    sleep 0.1
  done
  [ "$state" = succeeded ] || fail "stream job $1 is $state"
  "$meridian" job logs "$1" --dir "$cluster" 2>&1 | grep '^{"accepted"' >"$tmp/counters$1.json" ||
    fail "no counters in job $1's output"
}
submit_stream "$src/tests/stream/factory.yaml" 1 "sensors/factory/#"
grep -q "reading 'sensors/factory/#' at $url" "$tmp/job1.err" || fail "job 1 reads another broker than the factory's"
"$meridian" job get 1 --dir "$cluster" --json >"$tmp/job.json"
$py -c 'import json,sys; t=json.load(open(sys.argv[1]))["task_list"][0]; assert t["site"]=="factory" and t["device_type"]=="T4", t' "$tmp/job.json" ||
  fail "the stream's task is not on the factory's T4"
# A stream at the depot over the factory's summaries: the same stream at the factory
# (job 3) sends its results to the depot's broker, where job 2 windows them again
# into a dataset.
submit_stream "$src/tests/stream/depot.yaml" 2 "sites/factory/windows"
sed 's|^sink: .*|sink: {site: depot, topic: sites/factory/windows}|' "$src/tests/stream/factory.yaml" >"$tmp/to-depot.yaml"
submit_stream "$tmp/to-depot.yaml" 3 "sensors/factory/#"
grep -q "results to 'sites/factory/windows' at site depot" "$tmp/job3.err" || fail "job 3: $(cat "$tmp/job3.err")"
mosquitto_pub "${tls[@]}" -u sensors -P "$(cat "$cluster/mqtt/factory/sensors.password")" -q 1 -t sensors/factory/line \
  -l <"$tmp/records.txt"
wait_succeeded 1
for _ in $(seq 1 200); do
  [ "$(grep -c '^{' "$tmp/cluster-results.log" || true)" -ge "$want" ] && break
  sleep 0.1
done
sleep 0.3
$py "$src/tests/stream/reference.py" check "$tmp" "$tmp/cluster-results.log" "$tmp/counters1.json" ||
  fail "the cluster's results differ"
wait_succeeded 3
wait_succeeded 2
"$meridian" data ls factory-20s --dir "$cluster" --json >"$tmp/dataset.json" || fail "data ls factory-20s"
shard=$($py -c '
import json, sys
d = json.load(open(sys.argv[1]))
d = d[0] if isinstance(d, list) else d
assert len(d["shards"]) == 1, d
s = d["shards"][0]
print(s.get("object_id") or s["id"])
' "$tmp/dataset.json") || fail "dataset factory-20s: $(head -c 400 "$tmp/dataset.json")"
"$meridian" objects get "$shard" --dir "$cluster" -o "$tmp/depot-results.log" >/dev/null || fail "objects get $shard"
$py "$src/tests/stream/reference.py" check "$tmp" "$tmp/depot-results.log" "$tmp/counters2.json" --chained ||
  fail "the depot's windows over the factory's summaries differ"
"$meridian" down --dir "$cluster" >/dev/null
echo "PASS: $want windows equal the reference's, standalone and as a job at the edge site; the depot's windows over them too"
