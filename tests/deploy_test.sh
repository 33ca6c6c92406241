#!/usr/bin/env bash
# Joining from another host as docs/deploy.md says, on loopback: a coordinator
# configured by MERIDIAN_* variables alone, an agent by its node file's `agent:` map
# alone (fixed transfer and metrics ports, a join token), their health endpoints
# behind the monitoring certificate, a job run on the joined node, and the systemd
# units checked by systemd-analyze.
set -uo pipefail
bin=$(realpath "$1")
root=$2
cd "$root"
tmp=$(mktemp -d)
. tests/process_lib.sh
trap stop_started EXIT
guard_cleanup stop_started

# The CA and the coordinator's certificate, on the coordinator's host.
"$bin" certs init --dir "$tmp/tls" >/dev/null || bad "certs init"
"$bin" certs issue coordinator --host 127.0.0.1 --dir "$tmp/tls" >/dev/null || bad "certs issue coordinator"
"$bin" certs issue monitor --name probe --dir "$tmp/tls" >/dev/null || bad "certs issue monitor"
api=$(free_port)
http=$(free_port)
MERIDIAN_STATE_DIR=$tmp/state MERIDIAN_LISTEN=127.0.0.1:$api MERIDIAN_HTTP_LISTEN=127.0.0.1:$http \
  MERIDIAN_TLS_DIR=$tmp/tls MERIDIAN_FLEET=tests/fleets/one-node.yaml MERIDIAN_ADMIN_TOKEN_FILE=$tmp/admin.token \
  "$bin" coordinator >"$tmp/coordinator.log" 2>&1 &
pids+=($!)
wait_listening "$api" && [ -s "$tmp/admin.token" ] && ok "coordinator started from MERIDIAN_* variables" ||
  { bad "no admin token: $(tail -3 "$tmp/coordinator.log")"; exit 1; }
export MERIDIAN_COORDINATOR=127.0.0.1:$api MERIDIAN_TOKEN=$(cat "$tmp/admin.token")
# The operator's directory: the CA's certificate and a client certificate.
"$bin" certs issue client --name ops --dir "$tmp/tls" >/dev/null || bad "certs issue client"
mkdir -p "$tmp/ops"
cp "$tmp/tls/ca.crt" "$tmp/ops/" && cp "$tmp/tls/ops.crt" "$tmp/ops/client.crt" && cp "$tmp/tls/ops.key" "$tmp/ops/client.key"
client=(--tls-dir "$tmp/ops")
"$bin" token create --role agent --user solo-join --ttl 10m "${client[@]}" --json >"$tmp/join.json" 2>"$tmp/err" ||
  bad "token create: $(cat "$tmp/err")"
python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['token'])" "$tmp/join.json" >"$tmp/join.token" 2>/dev/null ||
  bad "token create printed no secret: $(cat "$tmp/join.json")"

# The node's host: only the CA's certificate, the join token and the node file.
mkdir -p "$tmp/node/tls"
cp "$tmp/tls/ca.crt" "$tmp/node/tls/"
transfer=$(free_port)
metrics=$(free_port)
cat >"$tmp/node.yaml" <<EOF
name: solo
site: local
cpu: 4
memory: 8GiB
agent:
  coordinator: 127.0.0.1:$api
  join_token_file: $tmp/join.token
  tls_dir: $tmp/node/tls
  work_dir: $tmp/node/work
  transfer_host: 127.0.0.1
  transfer_port: $transfer
  metrics_listen: 127.0.0.1:$metrics
EOF
(unset MERIDIAN_COORDINATOR MERIDIAN_TOKEN; MERIDIAN_NODE_CONFIG=$tmp/node.yaml exec "$bin" agent --no-gpu-discovery \
  >"$tmp/agent.log" 2>&1) &
pids+=($!)
# An agent's certificate names its node, not a host: `meridian health --node` checks it.
health=("$bin" health --tls-dir "$tmp/tls" --cert monitor-probe)
ready=""
for _ in $(seq 1 100); do
  ready=$("${health[@]}" --node solo "https://127.0.0.1:$metrics/readyz" 2>/dev/null) && break
  sleep 0.1
done
[[ "$ready" == "ready: node solo (id 0, session "*") at site local" ]] && ok "agent joined: /readyz says '$ready'" ||
  { bad "agent /readyz: '$ready'; $(tail -3 "$tmp/agent.log")"; exit 1; }
[ -s "$tmp/node/tls/node.crt" ] && ok "the node keeps the certificate it joined with" || bad "no node.crt"
ss -ltn | grep -q "127.0.0.1:$transfer " && ok "transfer server on the configured port $transfer" ||
  bad "nothing listens on the transfer port $transfer"
[ "$("${health[@]}" --node solo "https://127.0.0.1:$metrics/healthz")" = ok ] && ok "agent /healthz" || bad "agent /healthz"
"${health[@]}" --node other "https://127.0.0.1:$metrics/healthz" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" = 4 ] && grep -q "presented the certificate of 'node:solo', not of 'node:other'" "$tmp/err" &&
  ok "health refuses an agent that is not the node asked for" || bad "health --node other: exit $rc: $(cat "$tmp/err")"
"$bin" health --tls-dir "$tmp/node/tls" --cert node --node solo "https://127.0.0.1:$metrics/readyz" >/dev/null 2>"$tmp/err"
rc=$?
[ "$rc" = 4 ] && grep -q "answered 403" "$tmp/err" && ok "agent /readyz to a node's certificate: 403" ||
  bad "agent /readyz as a node: exit $rc: $(cat "$tmp/err")"
code=$(curl -k -s -o /dev/null -w '%{http_code}' "https://127.0.0.1:$metrics/readyz")
[ "$code" = 401 ] && ok "agent /readyz without a certificate: 401" || bad "agent /readyz without a certificate: $code"
# The coordinator's certificate names its host: curl checks it like any HTTPS server.
probe=(--cacert "$tmp/tls/ca.crt" --cert "$tmp/tls/monitor-probe.crt" --key "$tmp/tls/monitor-probe.key" -s)
[ "$(curl "${probe[@]}" "https://127.0.0.1:$http/healthz")" = ok ] && ok "coordinator /healthz" || bad "coordinator /healthz"
# meridian health checks the coordinator's certificate by its name, as probes use it.
got=$("${health[@]}" "https://127.0.0.1:$http/healthz" 2>&1)
[ "$got" = ok ] && ok "meridian health of the coordinator: $got" || bad "meridian health of the coordinator: $got"
got=$("${health[@]}" --node solo "https://127.0.0.1:$http/healthz" 2>&1)
[[ "$got" == *"presented the certificate of 'coordinator', not of 'node:solo'" ]] &&
  ok "meridian health --node solo refuses the coordinator" || bad "health --node solo of the coordinator: $got"
got=$(curl "${probe[@]}" "https://127.0.0.1:$http/readyz")
[ "$got" = "ready: leading, 1 nodes alive" ] && ok "coordinator /readyz: '$got'" || bad "coordinator /readyz: '$got'"
code=$(curl --cacert "$tmp/tls/ca.crt" -s -o /dev/null -w '%{http_code}' "https://127.0.0.1:$http/healthz")
[ "$code" = 401 ] && ok "coordinator /healthz without a certificate or token: 401" || bad "coordinator /healthz: $code"

printf 'name: hello\ntasks:\n  - {name: hi, command: [sh, -c, "echo hi from $MERIDIAN_NODE"]}\n' >"$tmp/hello.yaml"
"$bin" run "$tmp/hello.yaml" "${client[@]}" --no-progress >"$tmp/run.out" 2>&1 && grep -q "hi from solo" "$tmp/run.out" &&
  ok "a job ran on the joined node" || bad "run: $(cat "$tmp/run.out")"

# An agent with no coordinator anywhere: one clear error.
printf 'name: lost\nsite: local\ncpu: 1\nmemory: 1GiB\n' >"$tmp/lost.yaml"
(unset MERIDIAN_COORDINATOR; "$bin" agent --config "$tmp/lost.yaml" >"$tmp/out" 2>"$tmp/err")
rc=$?
[ "$rc" = 2 ] && grep -q "no coordinator: give --coordinator HOST:PORT, MERIDIAN_COORDINATOR" "$tmp/err" &&
  [ "$(wc -l <"$tmp/err")" = 1 ] && ok "no coordinator: exit 2, one line" || bad "no coordinator: exit $rc: $(cat "$tmp/err")"
printf 'name: typo\nsite: local\ncpu: 1\nmemory: 1GiB\nagent: {coordinatr: x:1}\n' >"$tmp/typo.yaml"
"$bin" agent --config "$tmp/typo.yaml" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" = 2 ] && grep -q "coordinatr" "$tmp/err" && ok "an unknown agent field: exit 2, named" ||
  bad "unknown agent field: exit $rc: $(cat "$tmp/err")"

# The systemd units, with ExecStart pointed at this build.
if command -v systemd-analyze >/dev/null; then
  for unit in deploy/systemd/*.service; do
    sed "s#/usr/local/bin/meridian#$bin#" "$unit" >"$tmp/$(basename "$unit")"
    if out=$(systemd-analyze verify "$tmp/$(basename "$unit")" 2>&1) && [ -z "$out" ]; then
      ok "systemd-analyze verify $(basename "$unit")"
    else
      bad "systemd-analyze verify $(basename "$unit"): $out"
    fi
  done
else
  bad "systemd-analyze is missing (Debian's systemd package; scripts/install-deps.sh installs it)"
fi
exit $fail
