#!/usr/bin/env bash
# Writes the analytics example's logs: a day of request logs at each of the three
# sites of examples/fleets/three-sites.yaml, as DIR/<site>/<hour-range>.log. Each line
# is "unix_time service status latency_ms bytes". Deterministic (a fixed seed per
# file), so every run sees the same data.
#   make-logs.sh DIR [MiB per site, default 8]
set -euo pipefail
dir=${1:?usage: make-logs.sh DIR [MiB per site]}
mib=${2:-8}
files=4
lines=$(( mib * 1024 * 1024 / 32 / files ))  # about 32 bytes a line

gen() {  # site seed services...
  local site=$1 seed=$2
  shift 2
  mkdir -p "$dir/$site"
  for f in $(seq 0 $((files - 1))); do
    awk -v seed=$((seed * 100 + f)) -v n="$lines" -v start=$((1764460800 + f * 21600)) -v services="$*" '
      BEGIN {
        srand(seed); k = split(services, svc, " ");
        for (i = 0; i < n; i++) {
          s = svc[1 + int(rand() * k)];
          r = rand();
          status = r < 0.93 ? 200 : (r < 0.97 ? 404 : (r < 0.995 ? 500 : 503));
          latency = int(5 + (-log(1 - rand())) * (status >= 500 ? 180 : 40));
          bytes = status == 200 ? int(200 + rand() * 4000) : 0;
          printf "%d %s %d %d %d\n", start + int(i * 21600 / n), s, status, latency, bytes;
        }
      }' > "$dir/$site/$(printf '%02d' $((f * 6)))h.log"
  done
}

gen us-east 1 web api checkout
gen eu-west 2 web api search
gen factory 3 sensor-gw plc-bridge
du -sh "$dir"/* | sed 's/^/  /'
