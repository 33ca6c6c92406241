#!/usr/bin/env bash
# The dashboard end to end: a local cluster, a job with tasks that run until the page
# has shown them running (a gate file, so a slow machine cannot let the job end
# unseen) and an input that crosses a WAN link, and the page in headless Chromium
# (web/tests/dashboard.mjs) following it. Screenshots go to $3.
set -uo pipefail
bin=$1
root=$2
shots=$3
cd "$root"
if [ ! -f web/dist/index.html ] || [ ! -d web/node_modules/playwright-core ]; then
  echo "FAIL the dashboard is not built: ./scripts/build-web.sh builds web/dist and installs the test's packages"
  exit 1
fi
command -v chromium >/dev/null || { echo "FAIL chromium is missing: ./scripts/install-deps.sh installs it"; exit 1; }
dir=$(mktemp -d /tmp/meridian-dashboard-XXXXXX)
chmod 711 "$dir"
trap '"$bin" down --dir "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT
"$bin" up --fleet tests/fleets/local-three-sites.yaml --dir "$dir" --heartbeat-timeout 5s --gateways none >"$dir/up.out" 2>&1 ||
  { echo "FAIL meridian up:"; cat "$dir/up.out"; exit 1; }
mkdir -p "$dir/parts"
for i in 0 1 2 3 4 5; do head -c 16384 /dev/zero | tr '\0' "$(printf "\\x$((61 + i))")" >"$dir/parts/$i.txt"; done
"$bin" data put "$dir/parts" --name parts --site factory --dir "$dir" >/dev/null ||
  { echo "FAIL data put"; exit 1; }
cat >"$dir/job.yaml" <<'YAML'
name: watched
tasks:
  - {name: gather, kernel: wordcount, inputs: [dataset://parts], resources: {accelerator: A100}}
  - {name: work, command: [sh, -c, 'while [ ! -e "$MERIDIAN_ARG_GATE" ]; do sleep 0.1; done'], count: 4, args: {gate: GATE_PATH}}
YAML
# A viewer's token, as a user would have: the dashboard shows what it may see.
token=$("$bin" token create --user dana --tenant default --role viewer --dir "$dir" | grep -o 'mrd_[A-Za-z0-9_]*' | head -1)
[ -n "$token" ] || { echo "FAIL token create"; exit 1; }
# The tasks run until the page has shown them running (dashboard.mjs makes the gate).
sed -i "s|GATE_PATH|$dir/go|" "$dir/job.yaml"
id=$("$bin" submit "$dir/job.yaml" --json --dir "$dir" | sed -n 's/.*"id": \([0-9]*\).*/\1/p')
[ -n "$id" ] || { echo "FAIL submit"; exit 1; }
DASHBOARD_URL="$(cat "$dir/http.addr")/" TOKEN="$token" SCREENSHOTS="$shots" NODES=4 SITES=us-east,eu-west,factory \
  JOB_ID="$id" TASKS=5 GATE="$dir/go" WAN="factory>eu-west=96.0 KiB" node web/tests/dashboard.mjs
