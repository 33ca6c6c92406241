#!/usr/bin/env bash
# The README's run command: installs what is missing, builds Meridian (release),
# starts a local cluster from the three-site example fleet (a coordinator and one
# agent per node, as processes on this machine) and runs the main job on it,
# showing progress, where each task ran and the result. The cluster keeps running
# afterwards for you to explore; `build/release/meridian down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
# The dashboard: without the npm registry the cluster runs without it.
scripts/build-web.sh || echo "run: the dashboard could not be built (npm); the cluster runs without it"

meridian=build/release/meridian
fleet=examples/fleets/three-sites.yaml
job=${1:-examples/jobs/sensor-histograms.yaml}

# A cluster left by an earlier run may be an older build: start afresh (jobs are kept).
"$meridian" down >/dev/null 2>&1 || true
echo
echo "\$ meridian up --fleet $fleet"
"$meridian" up --fleet "$fleet"
echo
echo "\$ meridian run $job"
"$meridian" run "$job"
echo
echo "The cluster is still running: try '$meridian nodes', '$meridian jobs', '$meridian job get ID';"
echo "'$meridian down' stops it."
