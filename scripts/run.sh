#!/usr/bin/env bash
# The README's run command: installs what is missing, builds Meridian (release) and
# runs the main job. Today that is the dry-run planner on the three-site example fleet.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

fleet=examples/fleets/three-sites.yaml
job=${1:-examples/jobs/tile-histograms.yaml}
echo
echo "\$ meridian plan --fleet $fleet $job"
build/release/meridian plan --fleet "$fleet" "$job"
