#!/usr/bin/env bash
# Slow-client ("slowloris") run (not in CI): on a one-node local cluster, N connections
# to the coordinator's HTTPS and N to the agent's each shake hands, send the start of
# a request, then one byte a second. Meanwhile /metrics is asked for every second,
# from the coordinator and, through it, from the agent. Every answer must come back
# (each one's time is printed), and the server must close the slow connections at
# its request deadline (5 s) while they still send.
#   scripts/slow-clients.sh [N] [SECONDS]   (defaults 48, 20; MERIDIAN_BIN=... for another build)
# All connections come from 127.0.0.1: past 255 each, a listener's bound of 256 connections
# from one address refuses the coordinator's own reads of the agent too.
set -euo pipefail
cd "$(dirname "$0")/.."

n="${1:-48}"
seconds="${2:-20}"
bin="${MERIDIAN_BIN:-build/release/meridian}"
if [ ! -x "$bin" ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release
fi
dir=$(mktemp -d /tmp/meridian-slow-XXXXXX)  # mktemp fills in the Xs
chmod 711 "$dir"
trap '"$bin" down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$bin" up --dir "$dir" --gateways none >"$dir/up.out" 2>&1 || { cat "$dir/up.out"; exit 1; }
coordinator=$(cat "$dir/http.addr")
nodes=$("$bin" nodes --dir "$dir" --json)
agent=$(printf '%s' "$nodes" | sed -n 's/.*"metrics_url": "\([^"]*\)".*/\1/p' | head -1)
node=$(printf '%s' "$nodes" | sed -n 's/^    "name": "\([^"]*\)".*/\1/p' | head -1)
[ -n "$agent" ] && [ -n "$node" ] || { echo "FAIL no agent's metrics listener in 'meridian nodes'"; exit 1; }
echo "coordinator $coordinator, agent $node at $agent: $n slow clients each for ${seconds}s"
python3 - "$coordinator" "$agent" "$node" "$n" "$seconds" "$(cat "$dir/admin.token")" <<'PY'
import socket, ssl, subprocess, sys, threading, time
coordinator, agent, node, n, seconds, token = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
closed = {"coordinator": 0, "agent": 0}
lock = threading.Lock()

def slow(name, url):
    host, port = url.split("//")[1].rsplit(":", 1)
    try:
        s = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=30), server_hostname=host)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: a\r\n")
        for _ in range(seconds):
            s.sendall(b"x")
            time.sleep(1)
    except (OSError, ssl.SSLError):
        with lock:
            closed[name] += 1

threads = [threading.Thread(target=slow, args=(name, url), daemon=True)
           for name, url in (("coordinator", coordinator), ("agent", agent)) for _ in range(n)]
for t in threads:
    t.start()
time.sleep(1)
worst, failed = 0.0, 0
for k in range(max(1, seconds - 2)):
    for what, url in (("coordinator /metrics", coordinator + "/metrics"),
                      ("agent /metrics via the coordinator", f"{coordinator}/nodes/{node}/metrics")):
        t0 = time.time()
        r = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "-m", "60",
                            "-H", "Authorization: Bearer " + token, url], capture_output=True, text=True)
        took = time.time() - t0
        worst = max(worst, took)
        failed += r.stdout != "200"
        print(f"  {what}: {r.stdout} in {took:.3f} s", flush=True)
    time.sleep(1)
for t in threads:
    t.join()
print(f"slowest answer {worst:.3f} s; {failed} not 200; slow connections closed by the server: "
      f"coordinator {closed['coordinator']} of {n}, agent {closed['agent']} of {n}")
ok = failed == 0 and worst < 5 and (seconds <= 7 or closed["coordinator"] == n and closed["agent"] == n)
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
