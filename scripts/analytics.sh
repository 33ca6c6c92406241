#!/usr/bin/env bash
# The analytics example: request logs generated at the three sites of
# examples/fleets/three-sites.yaml are put where they were written (dataset://weblogs,
# one shard per log file), then examples/jobs/log-analytics.yaml summarises them,
# scanning each shard at its site. Installs and builds like scripts/run.sh, and
# starts the local cluster if it is not running (with WAN emulation between sites).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

meridian=build/release/meridian
fleet=examples/fleets/three-sites.yaml
"$meridian" up --fleet "$fleet" >/dev/null
if ! "$meridian" data ls weblogs >/dev/null 2>&1; then
  logs=$(mktemp -d /tmp/meridian-weblogs-XXXXXX)  # mktemp fills in the Xs
  trap 'rm -rf "$logs"' EXIT
  echo "\$ examples/analytics/make-logs.sh $logs"
  examples/analytics/make-logs.sh "$logs"
  echo "\$ meridian data put --by-site --name weblogs $logs"
  "$meridian" data put --by-site --name weblogs "$logs"
fi
echo
echo "\$ meridian run examples/jobs/log-analytics.yaml"
"$meridian" run examples/jobs/log-analytics.yaml
