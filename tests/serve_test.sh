#!/usr/bin/env bash
# meridian replica and meridian gateway as a user runs them: a model trained by
# `gang train --save-model`, two replicas behind a gateway, answers checked against a
# NumPy forward pass of the same checkpoint, HTTP/1.1 and HTTP/2 through the gateway,
# the tokens both ways, a replica killed mid-load with no request failing, and one
# clear error line for each kind of bad input.
set -uo pipefail
bin=$1
root=$2
cd "$root"
py=/usr/bin/python3  # Debian's, with NumPy
tmp=$(mktemp -d)
. tests/process_lib.sh  # check, pids, start_listening, stop_started
trap stop_started EXIT
guard_cleanup stop_started

digits=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
printf '0 n1 s1 127.0.0.1\n' >"$tmp/peers"
env RANK=0 WORLD_SIZE=1 MASTER_PORT=29970 MERIDIAN_GANG_SECRET=s3cret MERIDIAN_GANG_PEERS="$tmp/peers" \
  "$bin" gang train --data "$digits" --epochs 10 --hidden 32 --save-model "$tmp/model" >"$tmp/train.json" || {
  echo "FAIL: gang train"; exit 1; }
$py -c 'import secrets; print(secrets.token_hex(16))' >"$tmp/replica-token"
$py -c 'import secrets; print(secrets.token_hex(16))' >"$tmp/client-token"
chmod 600 "$tmp/replica-token" "$tmp/client-token"

# The CLI's errors.
check "replica without a model file" 2 "--model: $tmp/none: no such file" "$bin" replica --model "$tmp/none" --token-file "$tmp/replica-token"
check "replica of a file that is no checkpoint" 2 "not a checkpoint of Meridian's trainer (no MRCK header)" \
  "$bin" replica --model "$tmp/peers" --token-file "$tmp/replica-token"
printf 'short\n' >"$tmp/short"
check "replica with a short token" 2 "the token is 5 characters; at least 16" \
  "$bin" replica --model "$tmp/model" --token-file "$tmp/short"
check "replica without a token" 2 "--token-file FILE or --token-env VARIABLE: the token callers present" "$bin" replica --model "$tmp/model"
check "replica with a short token in its variable" 2 "--token-env SHORT_TOKEN: the variable holds 5 characters; at least 16" \
  env SHORT_TOKEN=short "$bin" replica --model "$tmp/model" --token-env SHORT_TOKEN
check "replica batching nothing" 2 "max batch 0: expected 1..4096 images" \
  "$bin" replica --model "$tmp/model" --token-file "$tmp/replica-token" --max-batch 0
check "replica on a device of no kind" 2 "--device tpu: expected auto, cpu or gpu" \
  "$bin" replica --model "$tmp/model" --token-file "$tmp/replica-token" --device tpu
if [ ! -e /dev/nvidia0 ]; then
  # Asked for a GPU where there is none: an error (exit 3, unavailable), not the CPU.
  check "replica on a GPU where there is none" 3 "--device gpu: " \
    "$bin" replica --model "$tmp/model" --token-file "$tmp/replica-token" --device gpu
fi
check "gateway to a replica without a port" 2 "expected host:port" "$bin" gateway --replica nohost \
  --token-file "$tmp/client-token" --replica-token-file "$tmp/replica-token"

start_listening "$tmp/r1.log" "$bin" replica --model "$tmp/model" --token-file "$tmp/replica-token"
p1=$port
start_listening "$tmp/r2.log" "$bin" replica --model "$tmp/model" --token-file "$tmp/replica-token"
p2=$port
start_listening "$tmp/g.log" "$bin" gateway --region here --replica "127.0.0.1:$p1@here" --replica "127.0.0.1:$p2@there" \
  --token-file "$tmp/client-token" --replica-token-file "$tmp/replica-token" --probe-interval-ms 100
g=$port
# Outside a job (no CUDA_VISIBLE_DEVICES), --device auto is the CPU.
grep -q "the digits MLP, 32 hidden units, step 230, on cpu;" "$tmp/r1.log" || { echo "FAIL replica's first line:"; cat "$tmp/r1.log"; fail=1; }
"$py" - "$p1" "$(cat "$tmp/replica-token")" <<'PY' && ok "a replica's stats name its model and device" || bad "a replica's stats"
import json, sys, urllib.request
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/stats", headers={"Authorization": "Bearer " + sys.argv[2]})
s = json.load(urllib.request.urlopen(req, timeout=10))
want = {"requests": 0, "images": 0, "batches": 0, "refused": 0, "hidden": 32, "step": 230, "device": "cpu", "device_errors": 0}
assert s == want, s
PY

# Every image of the file, 100 a request, through the gateway (HTTP/1.1) and straight
# to a replica (HTTP/2), against NumPy's forward pass of the checkpoint.
"$py" - "$tmp" "$g" "$p2" "$digits" <<'PY' || fail=1
import gzip, json, struct, subprocess, sys
import numpy as np
tmp, gport, rport, digits = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
raw = open(f"{tmp}/model", "rb").read()
assert raw[:4] == b"MRCK", raw[:4]
hidden = struct.unpack_from("<i", raw, 8)[0]
n = (64 + 1 + 10) * hidden + 10
p = np.frombuffer(raw, dtype="<f4", count=n, offset=36).astype(np.float64)
w1 = p[:64 * hidden].reshape(64, hidden); b1 = p[64 * hidden:65 * hidden]
w2 = p[65 * hidden:75 * hidden].reshape(hidden, 10); b2 = p[75 * hidden:]
rows = np.loadtxt(gzip.open(digits), delimiter=",")
x, labels = rows[:, :64] / 16.0, rows[:, 64].astype(int)
logits = np.maximum(x @ w1 + b1, 0) @ w2 + b2
want = logits.argmax(axis=1)
prob = np.exp(logits - logits.max(axis=1, keepdims=True)); prob /= prob.sum(axis=1, keepdims=True)
client = open(f"{tmp}/client-token").read().strip(); replica = open(f"{tmp}/replica-token").read().strip()
def ask(url, token, body, *extra):
    out = subprocess.run(["curl", "-sS", "-w", "\n%{http_code} %{http_version}", *extra, "-H", f"Authorization: Bearer {token}",
                          "-H", "Content-Type: application/json", "--data-binary", body, url], capture_output=True, text=True)
    text, status = out.stdout.rsplit("\n", 1)
    return json.loads(text), status
got_gw, got_direct = [], []
for at in range(0, len(x), 100):
    body = json.dumps({"instances": x[at:at + 100].tolist()})
    a, s1 = ask(f"http://127.0.0.1:{gport}/v1/predict", client, body)
    b, s2 = ask(f"http://127.0.0.1:{rport}/v1/predict", replica, body, "--http2-prior-knowledge")
    assert s1 == "200 1.1" and s2 == "200 2", (s1, s2, a, b)
    assert a == b, "the gateway's answer differs from the replica's"
    got_gw += a["predictions"]
labels_served = np.array([q["label"] for q in got_gw])
assert (labels_served == want).all(), np.nonzero(labels_served != want)
served_prob = np.array([q["probabilities"] for q in got_gw])
assert np.abs(served_prob - prob).max() < 1e-5, np.abs(served_prob - prob).max()
right = int((labels_served == labels).sum())
print(f"ok   {len(x)} images through the gateway: the same labels as NumPy's forward pass, {right} right")
assert right == int((want == labels).sum())
PY

# Tokens: none, or the replicas' own, is refused at the gateway; its health check is open.
ct=$(cat "$tmp/client-token"); rt=$(cat "$tmp/replica-token")
body='{"instances": [[0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0]]}'
check "no token at the gateway" 0 "" curl -sS -o "$tmp/body" -w "%{http_code}" --data-binary "$body" "http://127.0.0.1:$g/v1/predict"
[ "$(cat "$tmp/out")" = 401 ] && grep -qF "no 'Authorization: Bearer TOKEN' header" "$tmp/body" || { echo "FAIL anonymous: $(cat "$tmp/out") $(cat "$tmp/body")"; fail=1; }
check "the replicas' token at the gateway" 0 "" curl -sS -o "$tmp/body" -w "%{http_code}" -H "Authorization: Bearer $rt" --data-binary "$body" "http://127.0.0.1:$g/v1/predict"
[ "$(cat "$tmp/out")" = 401 ] || { echo "FAIL replicas' token: $(cat "$tmp/out")"; fail=1; }
check "the gateway's health, no token" 0 "" curl -sSf "http://127.0.0.1:$g/healthz"

# The replica the gateway prefers killed (SIGKILL) while requests come, one after
# another: none fails.
"$py" - "$g" "$ct" "$body" "$p1=${pids[0]}" "$p2=${pids[1]}" <<'PY' || fail=1
import json, os, signal, subprocess, sys, urllib.request
port, token, body = sys.argv[1], sys.argv[2], sys.argv[3].encode()
pid_of = {int(a.split("=")[0]): int(a.split("=")[1]) for a in sys.argv[4:]}
def call(path, data=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.read()
start = json.loads(call("/v1/gateway")[1])
statuses = []
for i in range(300):
    if i == 100:
        before = json.loads(call("/v1/gateway")[1])
        busiest = max(before["replicas"], key=lambda r: r["served"])
        victim = int(busiest["address"].split(":")[1])
        os.kill(pid_of[victim], signal.SIGKILL)
    statuses.append(call("/v1/predict", body)[0])
assert statuses == [200] * 300, [s for s in statuses if s != 200]
view = json.loads(call("/v1/gateway")[1])
assert view["requests"] - start["requests"] == 300 and view["failed"] == 0 and view["shed"] == 0, view
dead = [r for r in view["replicas"] if not r["healthy"]]
assert len(dead) == 1 and dead[0]["address"] == busiest["address"], view
# The next request found it dead and was sent again (unless a probe found it first).
assert view["retried"] <= 1 and dead[0]["failures"] == view["retried"], view
assert sum(r["served"] for r in view["replicas"]) - sum(r["served"] for r in start["replicas"]) == 300, view
print(f"ok   300 requests, a replica killed at the 100th: 300 answered 200, {view['retried']} sent again")
PY

# HTTPS from a gateway to its replicas, by hand: the replica's certificate (for the
# name digits.example, self-signed: its own CA) and a gateway that trusts it alone.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$tmp/replica.key" -out "$tmp/replica.crt" \
  -days 1 -subj /CN=digits.example -addext subjectAltName=DNS:digits.example >/dev/null 2>&1 || { echo "FAIL openssl"; fail=1; }
check "gateway with a CA and no name" 2 "--replica-ca and --replica-tls-name come together" "$bin" gateway \
  --replica 127.0.0.1:1 --token-file "$tmp/client-token" --replica-token-file "$tmp/replica-token" --replica-ca "$tmp/replica.crt"
check "gateway with a CA that is no certificate" 2 "the replicas' CA: TLS: the CA bundle holds no certificate" "$bin" gateway \
  --replica 127.0.0.1:1 --token-file "$tmp/client-token" --replica-token-file "$tmp/replica-token" \
  --replica-ca "$tmp/peers" --replica-tls-name digits.example
start_listening "$tmp/r3.log" "$bin" replica --model "$tmp/model" --token-file "$tmp/replica-token" \
  --tls-cert "$tmp/replica.crt" --tls-key "$tmp/replica.key"
p3=$port
for name in digits.example other.example; do
  start_listening "$tmp/g-$name.log" "$bin" gateway --replica "127.0.0.1:$p3" --token-file "$tmp/client-token" \
    --replica-token-file "$tmp/replica-token" --replica-ca "$tmp/replica.crt" --replica-tls-name "$name" --probe-interval-ms 50
  sleep 0.3  # a few probes
  code=$(curl -s -o "$tmp/body" -w "%{http_code}" -H "Authorization: Bearer $ct" --data-binary "$body" "http://127.0.0.1:$port/v1/predict")
  if [ "$name" = digits.example ]; then
    [ "$code" = 200 ] && grep -qF '"predictions"' "$tmp/body" && ok "a gateway speaks HTTPS to a replica that proves its name" ||
      bad "TLS gateway: $code $(cat "$tmp/body")"
  else
    [ "$code" = 503 ] && grep -qF "no healthy replica: 1 known, none answering its health probe" "$tmp/body" &&
      ok "and sends nothing to one whose certificate has another name" || bad "wrong name: $code $(cat "$tmp/body")"
  fi
done
exit $fail
