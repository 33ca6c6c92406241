#!/usr/bin/env bash
# Meridian under a real Slurm (Debian's slurm-wlm and munge, started here on
# loopback with a private configuration): `meridian slurm submit` starts an agent as
# a Slurm job; the agent describes its node from the job (partition -> site, GRES ->
# devices, the job's CPUs and memory); a Meridian job runs its tasks on it; idle, the
# agent leaves the pool and the Slurm job ends, giving the node back. Skipped (77)
# without root (slurmd runs jobs as their users).
set -uo pipefail
bin=$(realpath "$1")
root=$2
cd "$root"
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: slurmd needs root to start jobs (this test starts its own slurmctld and slurmd)"
  exit 77
fi
for p in munged slurmctld slurmd sbatch squeue scontrol; do
  command -v "$p" >/dev/null || PATH=$PATH:/usr/sbin
  command -v "$p" >/dev/null || { echo "FAIL $p is missing: scripts/install-deps.sh installs slurm-wlm and munge"; exit 1; }
done
tmp=$(mktemp -d /tmp/meridian-slurm-test.XXXXXX)
chmod 755 "$tmp"
. tests/process_lib.sh
cleanup() {
  [ -n "${SLURM_CONF:-}" ] && scancel --quiet --name meridian-agent 2>/dev/null
  sleep 0.5
  pkill -f "slurmstepd.*$tmp" 2>/dev/null
  stop_started
}
trap cleanup EXIT
guard_cleanup cleanup
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$@"; }

# --- Slurm: munge, slurmctld and slurmd, their state under $tmp.
host=$(hostname -s)
mkdir -p "$tmp/slurm/state" "$tmp/slurm/spool" "$tmp/slurm/gpus" "$tmp/slurm/munge"
chmod 700 "$tmp/slurm/munge"
touch "$tmp/slurm/gpus/gpu0" "$tmp/slurm/gpus/gpu1"
head -c 1024 /dev/urandom >"$tmp/slurm/munge/munge.key"
chmod 600 "$tmp/slurm/munge/munge.key"
munged --force --key-file="$tmp/slurm/munge/munge.key" --socket="$tmp/slurm/munge/munge.sock" \
  --pid-file="$tmp/slurm/munge/munged.pid" --log-file="$tmp/slurm/munge/munged.log" \
  --seed-file="$tmp/slurm/munge/munge.seed" || { bad "munged did not start"; exit 1; }
pids+=("$(cat "$tmp/slurm/munge/munged.pid")")
ctld_port=$(free_port)
slurmd_port=$(free_port)
cat >"$tmp/slurm/slurm.conf" <<EOF
ClusterName=meridiantest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/slurm/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$tmp/slurm/state
SlurmdSpoolDir=$tmp/slurm/spool
SlurmctldPidFile=$tmp/slurm/slurmctld.pid
SlurmdPidFile=$tmp/slurm/slurmd.pid
SlurmctldLogFile=$tmp/slurm/slurmctld.log
SlurmdLogFile=$tmp/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=2048 Gres=gpu:a100:2 State=UNKNOWN
PartitionName=hpc Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
# GPUs Slurm hands out by index; the agent emulates them (there is no GPU here).
printf 'NodeName=%s Name=gpu Type=a100 File=%s/slurm/gpus/gpu[0-1]\n' "$host" "$tmp" >"$tmp/slurm/gres.conf"
export SLURM_CONF=$tmp/slurm/slurm.conf
slurmctld -D -i >"$tmp/slurm/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D >"$tmp/slurm/slurmd.out" 2>&1 &
pids+=($!)
state=""
for _ in $(seq 1 100); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null) && [ "$state" = idle ] && break
  sleep 0.2
done
[ "$state" = idle ] && ok "slurmctld and slurmd up: node $host idle in partition hpc" ||
  { bad "slurm node state '$state': $(tail -3 "$tmp/slurm/slurmctld.log" "$tmp/slurm/slurmd.log")"; exit 1; }

# --- Meridian: a coordinator with no fleet file (sites are what agents say they are).
"$bin" certs init --dir "$tmp/tls" >/dev/null || bad "certs init"
"$bin" certs issue coordinator --host 127.0.0.1 --dir "$tmp/tls" >/dev/null || bad "certs issue coordinator"
api=$(free_port)
"$bin" coordinator --state-dir "$tmp/state" --listen "127.0.0.1:$api" --http-listen none --tls-dir "$tmp/tls" \
  --admin-token-file "$tmp/admin.token" >"$tmp/coordinator.log" 2>&1 &
pids+=($!)
wait_listening "$api" && [ -s "$tmp/admin.token" ] || { bad "coordinator did not start: $(tail -3 "$tmp/coordinator.log")"; exit 1; }
export MERIDIAN_COORDINATOR=127.0.0.1:$api MERIDIAN_TOKEN=$(cat "$tmp/admin.token")
"$bin" certs issue client --name ops --dir "$tmp/tls" >/dev/null || bad "certs issue client"
mkdir -p "$tmp/ops" "$tmp/shared"
cp "$tmp/tls/ca.crt" "$tmp/ops/" && cp "$tmp/tls/ops.crt" "$tmp/ops/client.crt" && cp "$tmp/tls/ops.key" "$tmp/ops/client.key"
client=(--tls-dir "$tmp/ops")
"$bin" token create --role agent --user slurm-join --ttl 10m "${client[@]}" --json >"$tmp/join.json" 2>"$tmp/err" ||
  bad "token create: $(cat "$tmp/err")"
json "$tmp/join.json" "d['token']" >"$tmp/shared/join.token"
# What the nodes share: the CA's certificate and the join token.
mkdir -p "$tmp/shared/tls" && cp "$tmp/tls/ca.crt" "$tmp/shared/tls/"

# --- The agent, as a Slurm job.
# Idle 10 s, it leaves: long enough that it is still there for the job below on a
# loaded machine (under TSan 3 s was not, and the job waited for it forever).
"$bin" slurm submit --partition hpc --gres gpu:a100:2 --cpus 2 --mem 1G --idle-exit 10s \
  --tls-dir "$tmp/shared/tls" --join-token-file "$tmp/shared/join.token" --work-dir "$tmp/work" \
  --log-dir "$tmp" --json >"$tmp/submit.json" 2>"$tmp/err" || { bad "slurm submit: $(cat "$tmp/err")"; exit 1; }
job=$(json "$tmp/submit.json" "d['job_id']")
ok "meridian slurm submit: Slurm job $job"
node=""
for _ in $(seq 1 150); do
  "$bin" nodes "${client[@]}" --json >"$tmp/nodes.json" 2>/dev/null &&
    node=$(json "$tmp/nodes.json" "' '.join(n['name']+':'+n['state'] for n in d)") && [ "$node" = "$host:alive" ] && break
  sleep 0.2
done
[ "$node" = "$host:alive" ] && ok "the agent Slurm started registered node $host" ||
  { bad "no node registered ('$node'): $(cat "$tmp"/meridian-agent-"$job".out 2>/dev/null | tail -5)"; exit 1; }
got=$(json "$tmp/nodes.json" "(d[0]['site'], d[0]['cpu_milli'], d[0]['memory_bytes'], [(x['type'], x['emulated']) for x in d[0]['devices']])")
want="('hpc', 2000, 1073741824, [('A100', True), ('A100', True)])"
[ "$got" = "$want" ] && ok "partition hpc -> site, the job's 2 CPUs and 1 GiB, GRES gpu:a100:2 -> 2 A100: $got" ||
  bad "node as registered: $got, expected $want"
[ "$(squeue -h -j "$job" -o %T)" = RUNNING ] && ok "Slurm job $job is running" || bad "squeue: $(squeue -h -j "$job")"
[ -s "$tmp/shared/tls/nodes/$host/node.crt" ] && ok "the node's certificate is kept under nodes/$host" ||
  bad "no $tmp/shared/tls/nodes/$host/node.crt"
# It joined with its token (gRPC's threads started) before it set up its signal
# thread: SIGTERM (scancel, or its own wake-up once it has left) must reach that thread.
agent_pid=$(pgrep -f "^[^ ]*meridian --log-level info agent --slurm .*$tmp/work" | head -1)  # not srun, which runs it
blocked=$(termination_signals_blocked "$agent_pid") &&
  ok "every thread of the agent (pid $agent_pid) blocks SIGINT and SIGTERM or waits for them: $blocked" ||
  bad "threads of the agent (pid '$agent_pid') that SIGTERM would end at once: $blocked"

# --- A Meridian job on it: four tasks that each need an A100, and a sum of their outputs.
cat >"$tmp/job.yaml" <<'EOF'
name: on-slurm
tasks:
  - name: square
    count: 4
    command: [sh, -c, 'echo $((MERIDIAN_TASK_INDEX * MERIDIAN_TASK_INDEX)) on $MERIDIAN_NODE']
    resources: {accelerator: A100, count: 1, cpu: 500m, memory: 64MiB}
EOF
timeout 120 "$bin" run "$tmp/job.yaml" "${client[@]}" --no-progress --json >"$tmp/run.json" 2>"$tmp/err" ||
  bad "run: $(cat "$tmp/err")"
id=$(json "$tmp/run.json" "d['id']" 2>/dev/null)
"$bin" job logs "$id" "${client[@]}" >"$tmp/logs" 2>&1
outs=$(grep -o "^[0-9]* on $host" "$tmp/logs" | sort -n | tr '\n' ' ')
[ "$outs" = "0 on $host 1 on $host 4 on $host 9 on $host " ] &&
  ok "job $id: its four tasks ran on the Slurm node: $outs" || bad "job $id outputs: '$outs'; $(head -20 "$tmp/logs")"

# --- Idle for 10 s: the agent leaves, its Slurm job ends and the node is Slurm's again.
jstate=""
for _ in $(seq 1 150); do
  jstate=$(scontrol show job "$job" 2>/dev/null | grep -o 'JobState=[A-Z]*')
  [ "$jstate" = JobState=COMPLETED ] && break
  sleep 0.2
done
[ "$jstate" = JobState=COMPLETED ] && ok "idle, the agent exited and Slurm job $job completed" ||
  bad "Slurm job $job: $jstate; $(tail -5 "$tmp/meridian-agent-$job.out")"
exit_code=$(scontrol show job "$job" | grep -o ' ExitCode=[0-9:]*')
[ "$exit_code" = " ExitCode=0:0" ] && ok "the job's exit code is 0:0" || bad "exit code: '$exit_code'"
grep -q "node $host left the pool after 10 s idle" "$tmp/meridian-agent-$job.out" &&
  ok "the agent says it left the pool" || bad "agent log: $(tail -5 "$tmp/meridian-agent-$job.out")"
"$bin" nodes "${client[@]}" --json >"$tmp/nodes.json"
got=$(json "$tmp/nodes.json" "[n['name']+':'+n['state'] for n in d]")
[ "$got" = "['$host:left']" ] && ok "meridian nodes: $got" || bad "after leaving: $got"
for _ in $(seq 1 50); do [ "$(sinfo -h -n "$host" -o %t)" = idle ] && break; sleep 0.2; done
[ "$(sinfo -h -n "$host" -o %t)" = idle ] && ok "node $host is idle in Slurm again" ||
  bad "sinfo: $(sinfo -h -n "$host" -o %t)"

# --- Bad input: one clear line and a non-zero exit.
(unset SLURM_JOB_ID SLURMD_NODENAME; "$bin" agent --slurm --insecure >"$tmp/out" 2>"$tmp/err")
rc=$?
[ "$rc" != 0 ] && grep -q "SLURM_JOB_ID and SLURMD_NODENAME are not set: run the agent inside a Slurm job" "$tmp/err" &&
  ok "agent --slurm outside a job: exit $rc, '$(cat "$tmp/err")'" || bad "agent --slurm outside a job: exit $rc: $(cat "$tmp/err")"
"$bin" slurm submit --partition nosuch --insecure --log-dir "$tmp" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" != 0 ] && grep -qx "meridian: sbatch: exit 1: sbatch: error: invalid partition specified: nosuch; sbatch: error: Batch job submission failed: Invalid partition name specified" "$tmp/err" && [ "$(wc -l <"$tmp/err")" = 1 ] &&
  ok "an unknown partition: exit $rc, sbatch's reason on one line" || bad "unknown partition: exit $rc: $(cat "$tmp/err")"
"$bin" slurm submit --partition 'hpc;rm' --insecure >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && grep -q "expected at most 256 letters" "$tmp/err" && ok "a partition with ';': exit 2" ||
  bad "partition with ';': exit $rc: $(cat "$tmp/err")"
[ -z "$(squeue -h)" ] && ok "nothing left queued" || bad "squeue: $(squeue -h)"
exit $fail
