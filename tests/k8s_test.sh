#!/usr/bin/env bash
# The Kubernetes manifests of deploy/k8s, on paper and in part for real (there is no
# Kubernetes cluster here, and kubectl's own validation needs an API server):
# - every document checked against the Kubernetes API's types (Debian's
#   python3-kubernetes models): unknown fields, wrong types, missing required fields;
#   and the checker shown to catch each of those;
# - rendered by `kubectl kustomize` where kubectl is installed;
# - the coordinator's and the agent's containers run here as the kubelet would run
#   them: their commands, environment (fieldRefs, resource limits, $(VAR)) and exec
#   probes taken from the manifests, with the Secrets made as docs/deploy.md says and
#   only paths and ports moved; then a job runs on the agent.
set -uo pipefail
bin=$(realpath "$1")
root=$2
cd "$root"
py=/usr/bin/python3
if ! "$py" -c 'import kubernetes, yaml' 2>/dev/null; then
  echo "FAIL Debian's python3-kubernetes and python3-yaml are missing: scripts/install-deps.sh installs them"
  exit 1
fi
tmp=$(mktemp -d)
. tests/process_lib.sh
trap stop_started EXIT
guard_cleanup stop_started
manifests() { "$py" tests/k8s_manifests.py "$@"; }

# --- On paper.
out=$(manifests check deploy/k8s 2>&1)
[ "$out" = "4 documents valid" ] && ok "deploy/k8s: $out against the Kubernetes API's types" || bad "check: $out"
cp -r deploy/k8s "$tmp/bad"
sed -i 's/^  replicas: 1$/  replica: 1/' "$tmp/bad/coordinator.yaml"
sed -i 's/{name: MERIDIAN_TRANSFER_PORT, value: "7080"}/{name: MERIDIAN_TRANSFER_PORT, value: 7080}/' "$tmp/bad/agent.yaml"
sed -i '/^  selector:$/,+1d' "$tmp/bad/agent.yaml"
got=$(manifests check "$tmp/bad" 2>&1 | sed 's/ (known: .*//')
want="coordinator.yaml document 2 (StatefulSet meridian-coordinator).spec.replica: unknown field of V1StatefulSetSpec
agent.yaml document 1 (DaemonSet meridian-agent).spec.template.spec.containers[0].env[10].value: expected str, got int 7080"
[ "$got" = "$want" ] && ok "the check finds a misspelt field and a number where a string goes" || bad "bad manifests: '$got'"
sed -i 's/value: 7080}/value: "7080"}/; ' "$tmp/bad/agent.yaml"
sed -i 's/^  replica: 1$/  replicas: 1/' "$tmp/bad/coordinator.yaml"
got=$(manifests check "$tmp/bad" 2>&1)
[ "$got" = 'agent.yaml document 1 (DaemonSet meridian-agent): Invalid value for `selector`, must not be `None`' ] &&
  ok "the check finds a missing required field" || bad "no selector: '$got'"

if command -v kubectl >/dev/null; then
  if kubectl kustomize deploy/k8s >"$tmp/rendered.yaml" 2>"$tmp/err"; then
    docs=$(grep -c '^kind:' "$tmp/rendered.yaml")
    images=$(grep -o 'image: .*' "$tmp/rendered.yaml" | sort -u | tr '\n' ' ')
    namespaced=$(grep -c '^  namespace: meridian$' "$tmp/rendered.yaml")
    [ "$docs $namespaced $images" = "4 3 image: registry.example.org/meridian:0.1.0 " ] &&
      ok "kubectl kustomize: $docs documents, $namespaced in namespace meridian, $images" ||
      bad "kustomize: $docs documents, $namespaced namespaced, images $images"
  else
    bad "kubectl kustomize: $(cat "$tmp/err")"
  fi
else
  echo "note kubectl is not installed: the kustomization is not rendered (the documents are checked above)"
fi

# --- The Secrets, made as docs/deploy.md says.
"$bin" certs init --dir "$tmp/pki" >/dev/null || bad "certs init"
"$bin" certs issue coordinator --host meridian-coordinator.meridian.svc --host 127.0.0.1 --dir "$tmp/pki" >/dev/null ||
  bad "certs issue coordinator"
"$bin" certs issue monitor --name probe --dir "$tmp/pki" >/dev/null || bad "certs issue monitor"
mkdir -p "$tmp/secret/coordinator-tls" "$tmp/secret/join"
for f in ca.crt ca.key coordinator.crt coordinator.key monitor-probe.crt monitor-probe.key; do
  cp "$tmp/pki/$f" "$tmp/secret/coordinator-tls/"
done
chmod 400 "$tmp/secret/coordinator-tls/"*

# --- The coordinator's container: paths of its volumes and its ports moved.
api=$(free_port)
https=$(free_port)
move() {  # a manifest's word, with the volumes' paths and the ports moved here
  local w=$1
  w=${w//\/var\/lib\/meridian/$tmp/$2-state}
  w=${w//\/etc\/meridian\/tls/$tmp/secret/coordinator-tls}
  w=${w//\/etc\/meridian\/join/$tmp/secret/join}
  w=${w//meridian-coordinator.meridian.svc:7070/127.0.0.1:$api}
  w=${w//7070/$api}
  w=${w//7071/$https}
  w=${w//7080/$transfer}
  w=${w//7081/$metrics}
  printf '%s' "$w"
}
container() {  # kind name container role [probe]: prints the moved command, NUL-separated
  local words=()
  while IFS= read -r -d '' w; do words+=("$(move "$w" "$4")"); done < <(manifests command deploy/k8s/"$5" "$1" "$2" "$3" ${6:-})
  printf '%s\0' "${words[@]}"
}
transfer=$(free_port)
metrics=$(free_port)
mapfile -t coord_env < <(manifests env deploy/k8s/coordinator.yaml StatefulSet meridian-coordinator coordinator)
cenv=()
for e in "${coord_env[@]}"; do cenv+=("$(move "$e" coordinator)"); done
mkdir -p "$tmp/coordinator-state"
mapfile -d '' -t ccmd < <(container StatefulSet meridian-coordinator coordinator coordinator coordinator.yaml)
env -i PATH="$(dirname "$bin"):/usr/bin:/bin" "${cenv[@]}" "${ccmd[@]}" >"$tmp/coordinator.log" 2>&1 &
pids+=($!)
probe_ok() {  # kind name container role file probe
  local cmd
  mapfile -d '' -t cmd < <(container "$1" "$2" "$3" "$4" "$5" "$6")
  env -i PATH="$(dirname "$bin"):/usr/bin:/bin" "${penv[@]}" "${cmd[@]}" >"$tmp/probe.out" 2>&1
}
penv=()
started=""
for _ in $(seq 1 100); do
  probe_ok StatefulSet meridian-coordinator coordinator coordinator coordinator.yaml startupProbe && started=yes && break
  sleep 0.1
done
[ -n "$started" ] && ok "coordinator started from the StatefulSet's command and env; its startupProbe passes" ||
  { bad "startupProbe: $(cat "$tmp/probe.out"); $(tail -3 "$tmp/coordinator.log")"; exit 1; }
probe_ok StatefulSet meridian-coordinator coordinator coordinator coordinator.yaml readinessProbe &&
  ok "its readinessProbe passes: $(cat "$tmp/probe.out")" || bad "readinessProbe: $(cat "$tmp/probe.out")"
[ -s "$tmp/coordinator-state/admin.token" ] && ok "the admin token is on the state volume" || bad "no admin token"

# The join Secret: a join token, the CA's certificate, the monitoring certificate.
export MERIDIAN_COORDINATOR=127.0.0.1:$api MERIDIAN_TOKEN=$(cat "$tmp/coordinator-state/admin.token")
"$bin" certs issue client --name ops --dir "$tmp/pki" >/dev/null || bad "certs issue client"
mkdir -p "$tmp/ops"
cp "$tmp/pki/ca.crt" "$tmp/ops/" && cp "$tmp/pki/ops.crt" "$tmp/ops/client.crt" && cp "$tmp/pki/ops.key" "$tmp/ops/client.key"
client=(--tls-dir "$tmp/ops")
"$bin" token create --role agent --user k8s-join --ttl 24h "${client[@]}" --json >"$tmp/join.json" 2>"$tmp/err" ||
  bad "token create: $(cat "$tmp/err")"
"$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['token'], end='')" "$tmp/join.json" >"$tmp/secret/join/token"
cp "$tmp/pki/ca.crt" "$tmp/pki/monitor-probe.crt" "$tmp/pki/monitor-probe.key" "$tmp/secret/join/"
chmod 400 "$tmp/secret/join/"*

# --- The agent's container, on node k8s-node-1 with pod address 127.0.0.1.
fields=(spec.nodeName=k8s-node-1 status.podIP=127.0.0.1)
mapfile -t agent_env < <(manifests env deploy/k8s/agent.yaml DaemonSet meridian-agent agent "${fields[@]}")
penv=()
for e in "${agent_env[@]}"; do penv+=("$(move "$e" agent)"); done
mapfile -d '' -t acmd < <(container DaemonSet meridian-agent agent agent agent.yaml)
env -i PATH="$(dirname "$bin"):/usr/bin:/bin" "${penv[@]}" "${acmd[@]}" >"$tmp/agent.log" 2>&1 &
pids+=($!)
ready=""
for _ in $(seq 1 100); do
  probe_ok DaemonSet meridian-agent agent agent agent.yaml readinessProbe && ready=yes && break
  sleep 0.1
done
[ -n "$ready" ] && ok "agent joined from the DaemonSet's command and env; readinessProbe: $(cat "$tmp/probe.out")" ||
  { bad "agent readinessProbe: $(cat "$tmp/probe.out"); $(tail -3 "$tmp/agent.log")"; exit 1; }
probe_ok DaemonSet meridian-agent agent agent agent.yaml livenessProbe && ok "its livenessProbe passes" ||
  bad "agent livenessProbe: $(cat "$tmp/probe.out")"
[ -s "$tmp/agent-state/tls/node.crt" ] && ok "the node's certificate is on the host volume" || bad "no node.crt"
"$bin" nodes "${client[@]}" --json >"$tmp/nodes.json"
got=$("$py" -c "import json,sys; n=json.load(open(sys.argv[1]))[0]; print(n['name'], n['site'], n['cpu_milli'], n['memory_bytes'], n['state'])" "$tmp/nodes.json")
[ "$got" = "k8s-node-1 k8s 4000 17179869184 alive" ] &&
  ok "node as the pod's limits make it: $got" || bad "node: '$got'"
printf 'name: hello\ntasks:\n  - {name: hi, command: [sh, -c, "echo hi from $MERIDIAN_NODE"]}\n' >"$tmp/hello.yaml"
"$bin" run "$tmp/hello.yaml" "${client[@]}" --no-progress >"$tmp/run.out" 2>&1 && grep -qx "hi from k8s-node-1" "$tmp/run.out" &&
  ok "a job ran on the agent" || bad "run: $(cat "$tmp/run.out")"
exit $fail
