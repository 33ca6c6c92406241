#!/usr/bin/env bash
# The `meridian` command as a user runs it: the README's plan, JSON output, and one
# clear error line with a non-zero exit for each kind of bad input.
set -uo pipefail
bin=$1
root=$2
cd "$root"
fleet=tests/fleets/three-sites.yaml
tmp=$(mktemp -d)
# A cluster a check stopped (SIGSTOP) is continued, then stopped for good.
end_stopped_cluster() {
  [ -d "$tmp/stopped-cluster/pids" ] || return 0
  pkill -CONT -f -- "$tmp/stopped-cluster"
  "$bin" down --dir "$tmp/stopped-cluster" >/dev/null
  rm -rf "$tmp/stopped-cluster"
}
trap 'end_stopped_cluster; rm -rf "$tmp"' EXIT
. tests/process_lib.sh  # check, fail

check "plan the main job" 0 "" "$bin" plan --fleet $fleet examples/jobs/tile-histograms.yaml
grep -q "Total: 13 of 13 tasks placed" "$tmp/out" || { echo "FAIL plan output:"; cat "$tmp/out"; fail=1; }
check "plan as JSON" 0 "" "$bin" plan --fleet $fleet examples/jobs/transcode.yaml --json
grep -q '"device_type": "L4"' "$tmp/out" || { echo "FAIL json output:"; cat "$tmp/out"; fail=1; }
# (log-analytics and chain-verify read datasets put in a running cluster, which plan
# does not see; circuits and qaoa-maxcut ask for the quantum lab's simulators.)
check "every example job but the infeasible one plans" 0 "" bash -c "for j in examples/jobs/*.yaml; do case \$j in *infeasible*|*log-analytics*|*chain-verify*|*circuits*|*qaoa*) continue;; esac; $bin plan --fleet $fleet \$j >/dev/null || exit 1; done"
check "quantum jobs plan on the quantum lab" 0 "" bash -c "$bin plan --fleet tests/fleets/quantum-lab.yaml examples/jobs/circuits.yaml && $bin plan --fleet tests/fleets/quantum-lab.yaml examples/jobs/qaoa-maxcut.yaml"
grep -q "Total: 156 of 156 tasks placed" "$tmp/out" || { echo "FAIL qaoa plan:"; cat "$tmp/out"; fail=1; }
printf 'name: big\ntasks:\n  - {name: q32, kernel: qsim, resources: {qubits: 32}, args: {circuit: x}}\n' >"$tmp/q32.yaml"
check "a circuit too large for every device" 1 "1 of 1 tasks of job 'big' cannot be placed" "$bin" plan --fleet tests/fleets/quantum-lab.yaml "$tmp/q32.yaml"
grep -q "2 nodes have QPU-SIM devices with 4 GiB each, under the 64 GiB asked for" "$tmp/out" || { echo "FAIL q32 reason:"; cat "$tmp/out"; fail=1; }
check "infeasible job" 1 "3 of 3 tasks of job 'too-big' cannot be placed" "$bin" plan --fleet $fleet examples/jobs/infeasible.yaml
grep -q "giant \[infeasible\]: 0 of 16 nodes can run it: 14 nodes have no H100" "$tmp/out" || { echo "FAIL infeasible reason:"; cat "$tmp/out"; fail=1; }
printf 'name: lab\ntasks:\n  - {name: a, kernel: noop, resources: {labels: {camera-line: "3"}, spot: never}}\n' >"$tmp/labels.yaml"
check "a label selector picks its nodes" 0 "" "$bin" plan --fleet $fleet "$tmp/labels.yaml"
grep -q "^a     factory  factory-t4-" "$tmp/out" || { echo "FAIL labelled plan:"; cat "$tmp/out"; fail=1; }
printf 'name: lab\ntasks:\n  - {name: a, kernel: noop, resources: {labels: {camera-line: "9"}}}\n' >"$tmp/labels9.yaml"
check "a label no node has" 1 "1 of 1 tasks of job 'lab' cannot be placed" "$bin" plan --fleet $fleet "$tmp/labels9.yaml"
grep -qF "14 nodes have no label camera-line; 2 nodes have camera-line=3, not 9" "$tmp/out" || { echo "FAIL label reason:"; cat "$tmp/out"; fail=1; }
printf 'name: lab\ntasks:\n  - {name: a, kernel: noop, resources: {spot: only}}\n' >"$tmp/spot.yaml"
check "spot only on a fleet without spot nodes" 1 "cannot be placed" "$bin" plan --fleet $fleet "$tmp/spot.yaml"
grep -qF "16 nodes are not spot nodes, and the task takes only those" "$tmp/out" || { echo "FAIL spot reason:"; cat "$tmp/out"; fail=1; }
check "missing job file" 2 "no-such-job.yaml: no such file" "$bin" plan --fleet $fleet no-such-job.yaml
printf 'name: x\ntasks:\n  - name: a\n    kernel: sum\n    resources: {cpu: 2, gpus: 1}\n' >"$tmp/bad.yaml"
check "unknown field" 2 "bad.yaml:5:25: tasks[0].resources: unknown field 'gpus'" "$bin" plan --fleet $fleet "$tmp/bad.yaml"
printf 'name: x\ntasks:\n  - name: a\n    kernel: sum\n    duration: 10 parsecs\n' >"$tmp/unit.yaml"
check "wrong unit" 2 "unit.yaml:5:15: tasks[0].duration: unknown unit 'parsecs'" "$bin" plan --fleet $fleet "$tmp/unit.yaml"
check "bad queue order" 2 "--order: expected fifo, priority or fair" "$bin" plan --fleet $fleet --order lifo examples/jobs/transcode.yaml
check "plan with no fleet file and no cluster" 3 "no local cluster in $tmp/none (start one with 'meridian up') and no --coordinator HOST:PORT; or plan offline with --fleet FLEET.yaml" env MERIDIAN_HOME="$tmp/none" "$bin" plan examples/jobs/transcode.yaml
check "plan on a fleet file and a cluster at once" 2 "--fleet excludes --dir" "$bin" plan --fleet $fleet --dir "$tmp" examples/jobs/transcode.yaml
# A file past what one put carries is refused before any of it is read, or a cluster
# is asked (sparse: no disk is used). It was once read whole first: 15 GB held after
# 60 s, or bad_alloc under a memory limit.
truncate -s 17G "$tmp/huge.bin"
check "objects put of a file past one put" 2 "$tmp/huge.bin is 17 GiB; one put carries at most 16 GiB: put it as a dataset of smaller shards (meridian data put $tmp/huge.bin --name NAME --shards 2)" env MERIDIAN_HOME="$tmp/none" "$bin" objects put "$tmp/huge.bin"
check "data put of a shard past one put" 2 "shard 0 (huge.bin) is 17 GiB; one put carries at most 16 GiB: cut the data into smaller shards" env MERIDIAN_HOME="$tmp/none" "$bin" data put "$tmp/huge.bin" --name huge
rm -f "$tmp/huge.bin"
check "objects put of a directory" 2 "$tmp: a directory, not a file" env MERIDIAN_HOME="$tmp/none" "$bin" objects put "$tmp"
# A file that a full disk cuts short (here a file size limit of 512 bytes) is an error
# naming it: `certs init` once said it made the CA, exit 0, with its ca.crt cut to
# 512 bytes (a buffered stream's last write, at its close, went unchecked).
check "certs init on a disk that fills" 3 "/certs-full/ca.crt.tmp: File too large" \
  bash --posix -c "trap '' XFSZ; ulimit -f 1; exec \"\$0\" certs init --dir \"\$1\"" "$bin" "$tmp/certs-full"
[ -e "$tmp/certs-full/ca.crt" ] && bad "certs init on a disk that fills left a ca.crt"
# `certs rotate --ca` writes a new CA and everything it signs together: once, a disk that
# filled at the CA's bundle left certificates of a new CA whose key was never written
# beside the old CA, so the coordinator's certificate was signed by no CA anyone had.
"$bin" certs init --dir "$tmp/certs-rot" >/dev/null && "$bin" certs issue coordinator --dir "$tmp/certs-rot" >/dev/null \
  || bad "certs init and issue for the rotation"
before=$(cd "$tmp/certs-rot" && sha256sum -- * | sha256sum)
# 1 KiB: room for each certificate, not for the bundle of two CAs.
check "certs rotate --ca on a disk that fills" 3 "/certs-rot/ca.crt.tmp: File too large" \
  bash --posix -c "trap '' XFSZ; ulimit -f 2; exec \"\$0\" certs rotate --ca --dir \"\$1\"" "$bin" "$tmp/certs-rot"
[ "$(cd "$tmp/certs-rot" && sha256sum -- * | sha256sum)" = "$before" ] || bad "certs rotate --ca on a disk that fills changed files"
ls "$tmp/certs-rot" | grep -q '\.tmp$' && bad "certs rotate --ca on a disk that fills left temporary files"
check "certs rotate --ca" 0 "" "$bin" certs rotate --ca --dir "$tmp/certs-rot"
grep -q "a new CA, with the previous one still trusted" "$tmp/out" || bad "certs rotate --ca said: $(cat "$tmp/out")"
check "bench sched runs" 0 "" "$bin" bench sched --nodes 200 --tasks 500 --json
grep -q '"placements_per_second"' "$tmp/out" || { echo "FAIL bench output"; fail=1; }

# The simulator.
gavel=tests/fleets/gavel-cluster.yaml
sia=tests/fixtures/sia-philly-workload-1.csv
check "sim compares policies" 0 "" "$bin" sim --fleet $gavel --trace $sia --compare meridian,agnostic
grep -q "^meridian  *160/160" "$tmp/out" && grep -q "^agnostic  *160/160" "$tmp/out" || { echo "FAIL sim table:"; cat "$tmp/out"; fail=1; }
check "sim writes a report" 0 "" "$bin" sim --fleet $gavel --trace $sia --seed 3 --out "$tmp/r1"
grep -q "<svg" "$tmp/r1/report.html" && grep -q '"jct_s"' "$tmp/r1/metrics.json" && [ "$(wc -l <"$tmp/r1/jobs-meridian.csv")" -eq 161 ] \
  || { echo "FAIL sim report files"; ls -l "$tmp/r1"; fail=1; }
check "sim again with the same seed" 0 "" "$bin" sim --fleet $gavel --trace $sia --seed 3 --out "$tmp/r2"
cmp -s "$tmp/r1/jobs-meridian.csv" "$tmp/r2/jobs-meridian.csv" || { echo "FAIL sim not deterministic for one seed"; fail=1; }
check "sim fill experiment" 0 "" "$bin" sim --fleet tests/fleets/alibaba-gpu-2023.yaml --trace tests/fixtures/alibaba-pods-multigpu20.csv --fill 1.1 --compare best-fit,meridian
grep -q "TURNED AWAY" "$tmp/out" || { echo "FAIL fill output"; cat "$tmp/out"; fail=1; }
check "sim unknown policy" 2 "unknown policy 'lifo'" "$bin" sim --fleet $gavel --trace $sia --policy lifo
check "sim missing trace" 2 "no-such-trace.csv" "$bin" sim --fleet $gavel --trace no-such-trace.csv
printf 'a,b\n1,2\n' >"$tmp/odd.csv"
check "sim unknown trace format" 2 "cannot tell the trace format" "$bin" sim --fleet $gavel --trace "$tmp/odd.csv"
check "sim time-less trace needs --fill" 2 "replay it with --fill" "$bin" sim --fleet tests/fleets/alibaba-gpu-2023.yaml --trace tests/fixtures/alibaba-pods-multigpu20.csv
check "sim bad fleet change" 2 "--change '2h+5'" "$bin" sim --fleet $gavel --trace $sia --change 2h+5
check "sim --policy with --compare" 2 "excludes" "$bin" sim --fleet $gavel --trace $sia --policy meridian --compare meridian,random
printf 'job,arrival_s,duration_s,gpus\nj,0,1,1\nj,0,x,1\n' >"$tmp/bad.csv"
check "sim bad trace field" 2 "bad.csv:3: duration_s: expected a number, got 'x'" "$bin" sim --fleet $gavel --trace "$tmp/bad.csv"
check "bench sim runs" 0 "" "$bin" bench sim --fleet $gavel --trace $sia --scale 1 --saturated-jobs 0 --json
grep -q '"tasks_per_second"' "$tmp/out" || { echo "FAIL bench sim output"; cat "$tmp/out"; fail=1; }
grep -q '"saturated' "$tmp/out" && { echo "FAIL bench sim ran the saturated case with --saturated-jobs 0"; fail=1; }
check "bench sim saturated" 0 "" "$bin" bench sim --fleet tests/fleets/alibaba-gpu-2023.yaml \
  --trace tests/fixtures/alibaba-pods-gpuspec33-400.csv --scale 1 --saturated-jobs 3000 --saturated-limit 60 --json
grep -q '"saturated_placements_per_second"' "$tmp/out" || { echo "FAIL bench sim saturated field"; cat "$tmp/out"; fail=1; }
grep -q '"differing_jobs": 0,' "$tmp/out" || { echo "FAIL bench sim: parking changed a decision"; cat "$tmp/out"; fail=1; }
grep -q '"compared_jobs": 3000,' "$tmp/out" || { echo "FAIL bench sim: baseline did not finish"; cat "$tmp/out"; fail=1; }

# The runtime's commands without a cluster (tests/runtime_test.cc runs real ones).
export MERIDIAN_HOME="$tmp/no-cluster"
unset MERIDIAN_COORDINATOR
check "jobs without a cluster" 3 "no coordinator: no local cluster in $tmp/no-cluster" "$bin" jobs
check "status without a cluster" 3 "no coordinator: no local cluster in $tmp/no-cluster" "$bin" status --json
check "status with a dead coordinator" 3 "cannot reach the coordinator at 127.0.0.1:1" "$bin" status --coordinator 127.0.0.1:1 --insecure
check "version" 0 "" "$bin" --version
grep -qE '^meridian [0-9]+\.[0-9]+\.[0-9]+ \(commit [0-9a-f]{7,}(\+dirty)?\)$' "$tmp/out" || { echo "FAIL --version output:"; cat "$tmp/out"; fail=1; }
check "a bad flag is a bad request" 2 "--no-such-flag" "$bin" jobs --no-such-flag
check "bash completion" 0 "" "$bin" completion bash
complete_words() {  # the completions bash offers after the words given
  bash -c "source '$tmp/out'; COMP_WORDS=($*); COMP_CWORD=\$((\${#COMP_WORDS[@]} - 1)); _meridian; echo \"\${COMPREPLY[*]}\""
}
[ "$(complete_words meridian job re)" = "resubmit" ] || { echo "FAIL completion of 'job re': $(complete_words meridian job re)"; fail=1; }
[ "$(complete_words meridian --log-level debug sta)" = "status" ] || { echo "FAIL completion of 'sta'"; fail=1; }
[ "$(complete_words meridian str)" = "stream" ] || { echo "FAIL completion of 'str'"; fail=1; }
[ "$(complete_words meridian run x.yaml --cancel)" = "--cancel-on-interrupt" ] || { echo "FAIL completion of run's flag"; fail=1; }
check "completion for another shell" 2 "shell: fish not in {bash}" "$bin" completion fish
# `up` waits 30 s at most for its agents; when its coordinator took the connection but
# never answered (stopped here), it says so, where it said that no agent had
# registered ("only 0 of 1 agents registered within 30 s", after 40 s).
stopped=$tmp/stopped-cluster
up_stopped=("$bin" up --insecure --fleet tests/fleets/one-node.yaml --dir "$stopped" --gateways none)
# Started under a soft limit of 256 open files, the coordinator and the agent raise
# theirs to the hard limit (a descriptor per connection: 256 were soon spent).
if (ulimit -Sn 256 && exec "${up_stopped[@]}") >"$tmp/up.log" 2>&1; then
  coordinator=$(cat "$stopped/pids/coordinator.pid")
  for component in coordinator agent-solo; do
    files=$(awk '/^Max open files/ {print $4 " " $5}' "/proc/$(cat "$stopped/pids/$component.pid")/limits")
    [ "$files" = "$(ulimit -Hn) $(ulimit -Hn)" ] || { echo "FAIL $component's open files under a soft limit of 256: $files"; fail=1; }
  done
  kill -STOP "$coordinator"
  began=$SECONDS
  check "up while its coordinator does not answer" 3 \
    "could not read within 30 s whether the 1 agents registered: cannot reach the coordinator at $(cat "$stopped/coordinator.addr") (" \
    timeout -s KILL 120 "${up_stopped[@]}"
  echo "     (it gave up after $((SECONDS - began)) s)"
  end_stopped_cluster
else
  bad "up --insecure of one node:"; cat "$tmp/up.log"
fi
check "down without a cluster" 2 "no local cluster in $tmp/no-cluster" "$bin" down
check "up refuses a large fleet" 2 "has 1213 nodes; a local cluster runs one agent process per node, at most 64" "$bin" up --fleet tests/fleets/alibaba-gpu-2023.yaml
check "up with a bad fleet" 2 "no-such-fleet.yaml" "$bin" up --fleet no-such-fleet.yaml
check "agent with a bad node file" 2 "node.yaml:1:1: missing required field 'site'" bash -c "printf 'name: n\ncpu: 2\nmemory: 1GiB\n' >$tmp/node.yaml; $bin agent --coordinator 127.0.0.1:1 --config $tmp/node.yaml"
bench_procs() { pgrep -f "meridian-bench-" | wc -l; }
before=$(bench_procs)
check "bench tasks runs" 0 "" "$bin" bench tasks --agents 2 --tasks 2000 --samples 20 --json
grep -q '"tasks_per_second"' "$tmp/out" || { echo "FAIL bench tasks output"; cat "$tmp/out"; fail=1; }
# It stops the cluster it started: no process of it is left behind.
for _ in $(seq 50); do [ "$(bench_procs)" -le "$before" ] && break; sleep 0.1; done
[ "$(bench_procs)" -le "$before" ] || { echo "FAIL bench tasks left processes running:"; pgrep -af meridian-bench-; fail=1; }
# A coordinator with 40 simulated agents (and the 2-agent baseline): every task it
# placed was run once (4,000 + 20 warm-up + 20 round trips), no agent lost its session.
check "bench scale runs" 0 "" "$bin" bench scale --agents 40 --tasks 4000 --samples 20 --idle-seconds 0.5 --json
for want in '"agents": 40,' '"tasks": 4000,' '"tasks_done": 4040,' '"reregistered": 0,' '"stream_ends": 0,' \
            '"heartbeat_errors": 0,' '"coordinator_cpu_idle_fraction"' '"round_trip_p50_ms"' '"tasks_per_second"'; do
  grep -qF -- "$want" "$tmp/out" || { echo "FAIL bench scale output lacks $want"; cat "$tmp/out"; fail=1; }
done
check "bench scale refuses no agents" 2 "--agents: expected 1 to 20000" "$bin" bench scale --agents 0
# With clients listing jobs beside the work: 30 finished jobs made first, then the
# 2,000-task job and the 20 round trips again (20 + 30 + 2,000 + 20 + 2,000 + 20 tasks).
check "bench scale with readers" 0 "" "$bin" bench scale --agents 2 --tasks 2000 --samples 20 --idle-seconds 0.5 \
  --readers 2 --history 30 --json
for want in '"tasks_done": 4090,' '"readers": 2,' '"history_jobs": 30,' '"read_errors": 0,' \
            '"tasks_per_second_with_readers"' '"round_trip_p50_ms_with_readers"' '"list_all_us"'; do
  grep -qF -- "$want" "$tmp/out" || { echo "FAIL bench scale --readers output lacks $want"; cat "$tmp/out"; fail=1; }
done
check "bench scale refuses too many readers" 2 "--readers: expected 0 (none) to 64" "$bin" bench scale --readers 65
for _ in $(seq 50); do [ "$(bench_procs)" -le "$before" ] && break; sleep 0.1; done
[ "$(bench_procs)" -le "$before" ] || { echo "FAIL bench scale left processes running:"; pgrep -af meridian-bench-; fail=1; }
# The chain workload: the same seed writes the same bytes; bad options change nothing.
check "chain generate" 0 "" "$bin" chain generate --out "$tmp/chain" --blocks 5 --transactions-per-block 20 --accounts 10 --forged 2 --tampered 1 --seed 9
grep -q "^chain-verify blocks=5 transactions=100 bad_signatures=3 bad_merkle=1 bad_links=0 first=0 last=4 " "$tmp/out" \
  || { echo "FAIL chain generate output:"; cat "$tmp/out"; fail=1; }
[ "$(ls "$tmp/chain" | wc -l)" -eq 5 ] || { echo "FAIL chain generate: expected 5 shards"; ls -l "$tmp/chain"; fail=1; }
check "chain generate again" 0 "" "$bin" chain generate --out "$tmp/chain2" --blocks 5 --transactions-per-block 20 --accounts 10 --forged 2 --tampered 1 --seed 9
cmp -s <(cat "$tmp"/chain/*) <(cat "$tmp"/chain2/*) || { echo "FAIL chain generate is not deterministic"; fail=1; }
check "chain generate into a used directory" 2 "is not empty: give a new directory" "$bin" chain generate --out "$tmp/chain"
check "chain generate with too many bad ones" 2 "forged: 101 is outside [0, 100]" "$bin" chain generate --out "$tmp/chain3" --blocks 5 --transactions-per-block 20 --forged 101
[ ! -e "$tmp/chain3" ] || { echo "FAIL a refused chain generate wrote files"; fail=1; }
check "bench verify runs" 0 "" "$bin" bench verify --blocks 8 --transactions-per-block 50 --repeat 1 --json
for want in '"signatures": 400,' '"report_matches": true' '"ratio":' '"ratio_to_all_cores":'; do
  grep -qF -- "$want" "$tmp/out" || { echo "FAIL bench verify output lacks $want"; cat "$tmp/out"; fail=1; }
done
for _ in $(seq 50); do [ "$(bench_procs)" -le "$before" ] && break; sleep 0.1; done
[ "$(bench_procs)" -le "$before" ] || { echo "FAIL bench verify left processes running:"; pgrep -af meridian-bench-; fail=1; }
check "bench qsim runs" 0 "" "$bin" bench qsim --qubits 8,10 --layers 2 --repeat 1 --json
for want in '"qubits": 8,' '"qubits": 10,' '"ratio":' '"gates_per_second"'; do
  grep -qF -- "$want" "$tmp/out" || { echo "FAIL bench qsim output lacks $want"; cat "$tmp/out"; fail=1; }
done
check "bench qsim refuses 40 qubits" 2 "--qubits: 40 is outside [2, 30]" "$bin" bench qsim --qubits 40
check "chain generate with more shards than blocks" 2 "shards: 6 is outside [1, 5]" "$bin" chain generate --out "$tmp/chain4" --blocks 5 --transactions-per-block 2 --forged 0 --tampered 0 --shards 6
# A client certificate's name is a user's: a path in it never writes outside --dir.
check "certs init" 0 "" "$bin" certs init --dir "$tmp/pki/ca"
# Several coordinators need a shared PostgreSQL store; a state that is not one is named.
check "several coordinators without PostgreSQL" 2 "--coordinators: several coordinators share a PostgreSQL store; name it in MERIDIAN_STATE (postgresql://...)" env -u MERIDIAN_STATE "$bin" up --coordinators 2 --dir "$tmp/ha"
test ! -e "$tmp/ha" || { echo "FAIL up --coordinators 2 made $tmp/ha"; fail=1; }
check "a state that is not PostgreSQL" 2 "--state: expected a postgresql:// URI (or no --state, for SQLite in --state-dir), got 'mysql://root:***@db/meridian'" "$bin" coordinator --insecure --state-dir "$tmp/st" --state mysql://root:hunter2@db/meridian
grep -q hunter2 "$tmp/err" && { echo "FAIL the password was shown"; fail=1; }
check "sync full is SQLite's" 2 "--sync applies to the SQLite store" "$bin" coordinator --insecure --state-dir "$tmp/st" --state postgresql:///nowhere --sync full
check "certs issue client refuses a path" 2 "--name '../escaped': only letters, digits and - _ . @ are allowed" "$bin" certs issue client --name ../escaped --dir "$tmp/pki/ca"
[ ! -e "$tmp/pki/escaped.key" ] && [ ! -e "$tmp/pki/escaped.crt" ] || { echo "FAIL certs issue client wrote outside --dir"; fail=1; }
check "certs issue client for a user" 0 "" "$bin" certs issue client --name alice@corp.example --dir "$tmp/pki/ca"
[ -s "$tmp/pki/ca/alice@corp.example.crt" ] || { echo "FAIL certs issue client wrote no alice@corp.example.crt"; ls "$tmp/pki/ca"; fail=1; }

# Many hosts (docs/deploy.md): the fleet as lines for scripts, and bad input to --netns,
# bench transfer --netns and health.
check "fleet links" 0 "" "$bin" fleet links tests/fleets/local-three-sites.yaml
printf 'us-east\teu-west\t80000\t5000000000\neu-west\tfactory\t25000\t200000000\nus-east\tfactory\t95000\t100000000\n' >"$tmp/want-links"
cmp -s "$tmp/out" "$tmp/want-links" || { echo "FAIL fleet links:"; cat "$tmp/out"; fail=1; }
check "fleet sites" 0 "" "$bin" fleet sites tests/fleets/local-three-sites.yaml
[ "$(cat "$tmp/out")" = "$(printf 'us-east\tcloud\neu-west\tcloud\nfactory\tedge')" ] || { echo "FAIL fleet sites:"; cat "$tmp/out"; fail=1; }
check "up --netns with a prefix that is a path" 2 "--netns: 1 to 10 lowercase letters and digits, a letter first" "$bin" up --netns ../etc --fleet tests/fleets/local-three-sites.yaml --dir "$tmp/netns-cluster"
[ ! -e "$tmp/netns-cluster" ] || { echo "FAIL up --netns with a bad prefix made $tmp/netns-cluster"; fail=1; }
check "bench transfer --netns with a bad rate" 2 "--rate:" "$bin" bench transfer --netns --rate fast
# An iperf3 that exits 0 with no received rate (the real one did, under load in CI):
# the bench says iperf3 was not measured, and does not abort.
mkdir -p "$tmp/fake-iperf3"
cat >"$tmp/fake-iperf3/iperf3" <<'EOF'
#!/bin/sh
# iperf3 -s -B HOST -p PORT: listen until killed; iperf3 -c ...: a result with no rate.
if [ "$1" = -s ]; then
  exec /usr/bin/python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(); time.sleep(120)' "$3" "$5"
fi
echo '{"start": {}, "intervals": [], "end": {}, "error": "the control connection closed"}'
EOF
chmod +x "$tmp/fake-iperf3/iperf3"
check "bench transfer, iperf3 without a rate" 0 "" env PATH="$tmp/fake-iperf3:$PATH" "$bin" bench transfer --bytes 1MiB --repeat 1 --json
/usr/bin/python3 - "$tmp/out" <<'EOF' || { echo "FAIL bench transfer with iperf3 without a rate:"; cat "$tmp/out" "$tmp/err"; fail=1; }
import json, sys
j = json.load(open(sys.argv[1]))
assert j["iperf3_single_stream_gbit_per_s"] is None and j["ratio_to_iperf3"] is None, j
assert j["iperf3_error"] == "iperf3 printed no received rate: the control connection closed", j["iperf3_error"]
assert j["best_single_stream_gbit_per_s"] > 0, j
EOF
printf 'name: n1\nsite: s\ncpu: 1\nmemory: 1GiB\n' >"$tmp/n1.yaml"
check "agent --idle-exit that is no duration" 2 "--idle-exit: expected a duration such as 5m, or 0 for never; got 'soon'" "$bin" agent --config "$tmp/n1.yaml" --insecure --coordinator 127.0.0.1:1 --idle-exit soon
check "agent --gpu-types without --slurm" 2 "--gpu-types and --gpu-type map a Slurm job's GRES: they go with --slurm" "$bin" agent --config "$tmp/n1.yaml" --gpu-types a100=A100
check "agent --slurm with a node file" 2 "--slurm and --config (or MERIDIAN_NODE_CONFIG): the node is either" "$bin" agent --slurm --config "$tmp/n1.yaml"
check "slurm submit with no coordinator" 2 "--coordinator HOST:PORT is required (or MERIDIAN_COORDINATOR)" env -u MERIDIAN_COORDINATOR "$bin" slurm submit --partition p --insecure
check "slurm submit with an unknown --gpu-type" 2 "--gpu-type: unknown accelerator type 'Z80'" "$bin" slurm submit --partition p --gpu-type Z80 --coordinator x:1 --insecure
check "slurm submit with TLS but no join token" 2 "--tls-dir (with the cluster's ca.crt) and --join-token-file" "$bin" slurm submit --partition p --coordinator x:1
check "slurm submit --dry-run writes the script" 0 "" bash -c "$bin slurm submit --partition gpu --nodes 3 --gres gpu:a100:2 --coordinator 10.0.0.1:7070 --insecure --idle-exit 90s --dry-run --meridian /opt/meridian | grep -qx \"exec srun --ntasks=1 '/opt/meridian' '--log-level' 'info' 'agent' '--slurm' '--coordinator' '10.0.0.1:7070' '--idle-exit' '90s' '--insecure'\""
# bench allreduce: bad sizes, and a short run whose JSON carries the figures the
# training issue names, each result checked by the bench itself.
check "bench allreduce with one rank" 2 "--ranks is 2 to 64" "$bin" bench allreduce --ranks 1
check "bench allreduce with a size that is no float32 vector" 2 "--bytes is 1 KiB to 4 GiB, a multiple of 4" "$bin" bench allreduce --bytes 1030B
check "bench allreduce, short" 0 "" "$bin" bench allreduce --ranks 2 --bytes 1MiB --iterations 2 --json
python3 - "$tmp/out" <<'PY' || { echo "FAIL bench allreduce json:"; cat "$tmp/out"; fail=1; }
import json, sys
j = json.load(open(sys.argv[1]))
assert j["ranks"] == 2 and j["bytes"] == 1 << 20, j
for k in ("meridian_busbw_gbs", "meridian_tls_busbw_gbs", "openmpi_busbw_gbs", "ratio", "tls_ratio", "hierarchical_ratio",
          "meridian_shm_busbw_gbs", "openmpi_shm_busbw_gbs", "shm_ratio"):
    assert isinstance(j[k], float) and j[k] > 0, (k, j)
PY
# bench serve: a short run whose JSON carries the serving issue's figures.
check "bench serve with one connection" 2 "--connections: 2..1024" "$bin" bench serve --connections 1
check "bench serve on a device of no kind" 2 "--device tpu: expected auto, cpu or gpu" "$bin" bench serve --device tpu
check "bench serve runs" 0 "" "$bin" bench serve --hidden 16 --seconds 1 --connections 8 --json
/usr/bin/python3 - "$tmp/out" <<'PY' || { echo "FAIL bench serve json:"; cat "$tmp/out"; fail=1; }
import json, sys
j = json.load(open(sys.argv[1]))
assert isinstance(j["gateway_overhead_p50_ms"], float) and isinstance(j["batching_ratio"], float) and j["batching_ratio"] > 0, j
assert isinstance(j["gateway_tls_overhead_p50_ms"], float) and isinstance(j["site_gateway_overhead_p50_ms"], float), j
assert [r["name"] for r in j["runs"]] == ["direct, 1 connection", "gateway, 1 connection", "batching off", "batching on",
                                           "batching on, through the gateway", "gateway, TLS to the replica, 1 conn",
                                           "site gateway, 1 connection"], j
assert all(r["requests"] > 0 and r["errors"] == 0 for r in j["runs"]), j
assert j["model"]["hidden"] == 16 and 0 < j["model"]["test_accuracy"] <= 1 and j["mean_batch_images"] >= 1, j
assert j["device"] == "cpu", j
PY
# gang train: outside a gang, with bad options, and one rank of a gang of one (its
# JSON line), each error one line.
digits=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
check "gang train outside a gang" 2 "RANK is not set" "$bin" gang train --data "$digits"
printf '0 n1 s1 127.0.0.1\n' >"$tmp/peers"
gang_env=(env RANK=0 WORLD_SIZE=1 MASTER_PORT=29990 MERIDIAN_GANG_SECRET=s3cret MERIDIAN_GANG_PEERS="$tmp/peers")
check "gang train with a batch of none" 2 "batch 0: expected 1..1437" "${gang_env[@]}" "$bin" gang train --data "$digits" --batch 0
check "gang train on a device that is none" 2 "--device tpu: expected auto, cpu or gpu" "${gang_env[@]}" "$bin" gang train --data "$digits" --device tpu
# Asked for a GPU where none answers: one line saying why (no toolkit, or no device).
if ! nvidia-smi >/dev/null 2>&1; then
  check "gang train on a GPU that is not there" 3 "GPU" "${gang_env[@]}" "$bin" gang train --data "$digits" --device gpu
fi
check "gang train on a file that is no digits" 2 "expected 64 pixel values" "${gang_env[@]}" "$bin" gang train --data "$tmp/peers"
check "gang train, one rank, two epochs" 0 "" "${gang_env[@]}" "$bin" gang train --data "$digits" --epochs 2 --hidden 16
python3 - "$tmp/out" <<'PY' || { echo "FAIL gang train json:"; cat "$tmp/out"; fail=1; }
import json, sys
j = json.loads(open(sys.argv[1]).read())
assert j["rank"] == 0 and j["world_size"] == 1 and j["steps"] == 46 and j["parameters"] == 75 * 16 + 10, j
assert j["site"] == "s1" and j["resumed_from"] == -1 and j["rejoins"] == 0 and 0 < j["accuracy"] <= 1, j
import os
if not os.environ.get("CUDA_VISIBLE_DEVICES"):  # --device auto: the CPU for a task given no GPU
    assert j["device"] == "cpu", j
PY
check "health without a port" 2 "the address needs a port" "$bin" health http://127.0.0.1/healthz
check "health of nothing listening" 3 "" "$bin" health http://127.0.0.1:1/healthz
exit $fail
