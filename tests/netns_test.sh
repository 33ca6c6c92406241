#!/usr/bin/env bash
# Sites on separate network stacks: scripts/netsim.sh builds a namespace per site of
# the three-site test fleet and a router between them, `meridian up --netns` runs the
# coordinator in the router and each site's agents in their site's namespace, and a
# job at eu-west reads a dataset stored at the factory. Checked: the exact word
# counts, that its bytes crossed the kernel's shaped factory -> eu-west link (and no
# other), that a cut-off site's node is declared dead and comes back when healed,
# that jitter on the factory's link spreads its round trips and changes no answer,
# and `bench transfer --netns`'s figures, with namespaces earlier benches left.
# Needs root; skipped (exit 77) without it.
set -uo pipefail
bin=$(realpath "$1")
root=$2
cd "$root"
if [ "$(id -u)" -ne 0 ] || ! command -v nft >/dev/null || ! ip netns add mnt-probe$$ 2>/dev/null; then
  echo "SKIPPED: network namespaces need root, ip and nft (CI runs as root; scripts/install-deps.sh installs nftables)"
  exit 77
fi
ip netns del mnt-probe$$
prefix=nt$$
prefix=${prefix:0:8}
tmp=$(mktemp -d)
fail=0
cleanup() {
  "$bin" down --dir "$tmp/cluster" >/dev/null 2>&1
  scripts/netsim.sh down --prefix "$prefix" >/dev/null 2>&1
  for ns in "${busy_ns:-}" "${stale:-}"; do [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }
netsim() { scripts/netsim.sh "$@" --prefix "$prefix"; }

fleet=tests/fleets/local-three-sites.yaml
netsim up "$fleet" --meridian "$bin" >"$tmp/netsim.out" 2>&1 || { cat "$tmp/netsim.out"; exit 1; }
grep -q "3 sites, 3 links shaped" "$tmp/netsim.out" && ok "netsim up: 3 sites, 3 links" || bad "netsim up: $(cat "$tmp/netsim.out")"
if ! "$bin" up --netns "$prefix" --fleet "$fleet" --dir "$tmp/cluster" --gateways none >"$tmp/up.out" 2>&1; then
  cat "$tmp/up.out"
  tail -5 "$tmp"/cluster/logs/*.log
  exit 1
fi
grep -q "coordinator at 10.200.255.1:" "$tmp/up.out" && ok "the coordinator listens in the router namespace" ||
  bad "up: $(cat "$tmp/up.out")"
# Each agent runs in its site's namespace: its process's network namespace is the site's.
for pair in us-cpu-1:us-east eu-a100:eu-west edge-t4:factory; do
  node=${pair%%:*}
  site=${pair##*:}
  pid=$(cat "$tmp/cluster/pids/agent-$node.pid")
  ns=$(ip netns identify "$pid")
  want=$(awk -F'\t' -v s="$site" '$1 == s {print $2}' "/run/meridian-netsim/$prefix/sites")
  [ "$ns" = "$want" ] && ok "agent $node runs in $want" || bad "agent $node runs in '$ns', not $want"
done

# A dataset at the factory, counted by a task that needs eu-west's A100.
awk 'BEGIN {srand(7); split("alpha beta gamma delta edge cloud wan link", w, " ");
  for (i = 0; i < 20000; i++) {l = ""; for (j = 0; j < 12; j++) l = l w[int(rand() * 8) + 1] " "; print l}}' >"$tmp/words.txt"
"$bin" data put "$tmp/words.txt" --name words --site factory --shards 4 --dir "$tmp/cluster" >/dev/null ||
  bad "data put"
before=$(netsim bytes factory eu-west)
cat >"$tmp/count.yaml" <<'EOF'
name: count-at-eu-west
tasks:
  - {name: count, kernel: wordcount, inputs: [dataset://words], resources: {accelerator: A100}}
EOF
"$bin" run "$tmp/count.yaml" --dir "$tmp/cluster" --no-progress --output-dir "$tmp/out" >"$tmp/run.out" 2>&1 ||
  bad "run: $(cat "$tmp/run.out")"
tr ' ' '\n' <"$tmp/words.txt" | grep . | sort | uniq -c | awk '{print $2, $1}' | sort >"$tmp/want"
result=$(ls "$tmp"/out/* 2>/dev/null | head -1)
grep -v '^wordcount$' "$result" | sort >"$tmp/got"
if [ -s "$tmp/want" ] && cmp -s "$tmp/want" "$tmp/got"; then
  ok "word counts exact ($(wc -l <"$tmp/want") words)"
else
  bad "word counts differ:"; diff "$tmp/want" "$tmp/got" | head
fi
size=$(stat -c %s "$tmp/words.txt")
after=$(netsim bytes factory eu-west)
crossed=$((after - before))
# The payload once, with what the kernel's class counts on top of it: each frame's
# Ethernet, IP and TCP headers (~4.6% at a 1448-byte MSS), TLS records and handshakes,
# and the segments TCP sent again. At most 20%: CI's ASan run measured 10.1% once
# (1442340 bytes for 1309817), past the 10% this allowed before; a second copy of the
# dataset would be 100%.
if [ "$crossed" -ge "$size" ] && [ "$crossed" -le $((size + size / 5)) ]; then
  ok "the dataset crossed the kernel's factory -> eu-west link: $crossed bytes for $size"
else
  bad "factory -> eu-west carried $crossed bytes for a $size-byte dataset"
fi
[ "$(netsim bytes us-east eu-west)" = 0 ] && ok "nothing crossed us-east -> eu-west" ||
  bad "us-east -> eu-west carried $(netsim bytes us-east eu-west) bytes"

# Cut the factory off: its node is declared dead; healed, it registers again.
alive() {  # node -> true/false as `nodes --json` says
  "$bin" nodes --json --dir "$tmp/cluster" 2>/dev/null | python3 -c "
import json, sys
print(str(any(n['name'] == '$1' and n['state'] == 'alive' for n in json.load(sys.stdin))).lower())" 2>/dev/null
}
wait_for() {  # node, want, seconds
  for _ in $(seq 1 $(($3 * 4))); do
    [ "$(alive "$1")" = "$2" ] && return 0
    sleep 0.25
  done
  return 1
}
netsim cut factory >/dev/null
wait_for edge-t4 false 20 && ok "cut off, the factory's node is declared dead" || bad "edge-t4 still alive after the cut"
[ "$(alive eu-a100)" = true ] && ok "eu-west's node stays alive" || bad "eu-a100 dead during the factory's cut"
netsim heal factory >/dev/null
wait_for edge-t4 true 30 && ok "healed, the factory's node is alive again" || bad "edge-t4 not back 30 s after the heal"

# Jitter on the factory's link (netem's, or meridian-delayline's where the kernel has
# none): its round trips spread, a job reading a dataset stored there still gets the
# exact answer, and its node stays alive; healed, the jitter is gone.
rtts() {  # site, address -> "min max" round trip in ms over 20 pings
  scripts/netsim.sh exec "$1" --prefix "$prefix" -- ping -c 20 -i 0.05 -q "$2" | awk -F'[ /]' '/^rtt/ {print $7, $9}'
}
if netsim jitter factory 20 >"$tmp/jitter.out" 2>&1; then
  read -r lo hi <<<"$(rtts factory 10.200.2.2)"
  if python3 -c "import sys; sys.exit(0 if $hi - $lo >= 5 else 1)" 2>/dev/null; then
    ok "with 0-20 ms of jitter each way, factory -> eu-west round trips spread over $lo-$hi ms"
  else
    bad "factory -> eu-west round trips with jitter: '$lo'-'$hi' ms"
  fi
  awk 'BEGIN {srand(8); split("jitter queue wait late early", w, " ");
    for (i = 0; i < 5000; i++) {l = ""; for (j = 0; j < 12; j++) l = l w[int(rand() * 5) + 1] " "; print l}}' \
    >"$tmp/jittered.txt"
  "$bin" data put "$tmp/jittered.txt" --name jittered --site factory --shards 2 --dir "$tmp/cluster" >/dev/null ||
    bad "data put (jittered)"
  before=$(netsim bytes factory eu-west)
  sed 's|dataset://words|dataset://jittered|' "$tmp/count.yaml" >"$tmp/count-jittered.yaml"
  "$bin" run "$tmp/count-jittered.yaml" --dir "$tmp/cluster" --no-progress --output-dir "$tmp/out-jittered" \
    >"$tmp/run-jittered.out" 2>&1 || bad "run under jitter: $(cat "$tmp/run-jittered.out")"
  tr ' ' '\n' <"$tmp/jittered.txt" | grep . | sort | uniq -c | awk '{print $2, $1}' | sort >"$tmp/want-jittered"
  result=$(ls "$tmp"/out-jittered/* 2>/dev/null | head -1)
  grep -v '^wordcount$' "$result" 2>/dev/null | sort >"$tmp/got-jittered"
  crossed=$(($(netsim bytes factory eu-west) - before))
  if [ -s "$tmp/want-jittered" ] && cmp -s "$tmp/want-jittered" "$tmp/got-jittered" &&
     [ "$crossed" -ge "$(stat -c %s "$tmp/jittered.txt")" ]; then
    ok "under jitter, word counts exact; $crossed bytes crossed the jittered link"
  else
    bad "under jitter: counts differ or only $crossed bytes crossed"; diff "$tmp/want-jittered" "$tmp/got-jittered" | head -5
  fi
  [ "$(alive edge-t4)" = true ] && ok "the jittered factory's node stays alive" || bad "edge-t4 declared dead under jitter"
  netsim heal factory >/dev/null
  if netsim show | grep -q jitter; then bad "healed, jitter remains: $(netsim show | grep jitter)"; else ok "healed, no jitter remains"; fi
else
  bad "netsim jitter: $(cat "$tmp/jitter.out")"
fi

# The transfer bench across a shaped veth link: its fields (figures are quoted, not asserted).
# Namespaces that earlier benches left. One whose process runs still as `meridian` is
# another bench at work: this one refuses, changing nothing. One whose process is gone
# (killed -9 before it cleaned up) holds the bench's addresses, as a real one would,
# and took the bench's traffic before: it is deleted, saying so.
cp "$(command -v sleep)" "$tmp/meridian"
"$tmp/meridian" 60 &
busy=$!
busy_ns=mbt$busy
ip netns add "$busy_ns"
if "$bin" bench transfer --netns --bytes 8MiB --rate 500Mbps --repeat 1 >"$tmp/busy.out" 2>&1; then
  bad "bench transfer ran beside another bench's namespace"
else
  grep -q "another bench transfer --netns runs (process $busy, namespace mbt$busy): run one at a time" "$tmp/busy.out" &&
    ok "bench transfer refuses while another bench's namespace is in use" || bad "busy: $(cat "$tmp/busy.out")"
fi
ip netns list | grep -q "^mbt$busy\b" && ok "and leaves it alone" || bad "the busy bench's namespace went"
kill "$busy"; wait "$busy" 2>/dev/null
ip netns del "mbt$busy"
sleep 0 &
dead=$!
wait "$dead"
stale=mbt$dead
ip netns add "$stale" && ip link add "${stale}a" type veth peer name eth0 netns "$stale" &&
  ip addr add 10.231.0.1/24 dev "${stale}a" && ip link set "${stale}a" up &&
  ip -n "$stale" addr add 10.231.0.2/24 dev eth0 && ip -n "$stale" link set eth0 up || bad "cannot make $stale"
if "$bin" bench transfer --netns --bytes 8MiB --rate 500Mbps --repeat 1 --json >"$tmp/bench.json" 2>"$tmp/bench.err"; then
  python3 - "$tmp/bench.json" <<'EOF' && ok "bench transfer --netns reports share_of_configured" || bad "bench json: $(cat "$tmp/bench.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["netns"] is True and j["configured_gbit_per_s"] == 0.5 and j["bytes"] == 8 << 20
assert len(j["runs"]) == 1 and j["share_of_configured"] > 0 and "iperf3_share_of_configured" in j
EOF
else
  bad "bench transfer --netns: $(cat "$tmp/bench.err")"
fi
grep -q "bench transfer: deleted namespace $stale, left by an earlier run (process $dead is gone)" "$tmp/bench.err" &&
  ok "the namespace an earlier bench left was deleted first" || bad "stale: $(cat "$tmp/bench.err")"
[ -z "$(ip netns list | grep '^mbt')" ] && ok "the bench removed its namespace" || bad "bench left $(ip netns list | grep '^mbt')"
exit $fail
