#!/usr/bin/env bash
# The quantum example (docs/quantum.md): a local cluster of examples/fleets/quantum-lab.yaml
# (two QPU-SIM simulator boxes in a lab and a cloud A100, all emulated on this machine,
# in a directory of its own, stopped at the end) runs examples/jobs/circuits.yaml (GHZ
# and Grover as OpenQASM tasks) and examples/jobs/qaoa-maxcut.yaml (QAOA for MaxCut:
# six rounds of 25 circuits, each round's best point refined by an optimiser task).
# Installs and builds like scripts/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

meridian=build/release/meridian
dir=$(mktemp -d /tmp/meridian-quantum-XXXXXX)  # mktemp fills in the Xs
trap '"$meridian" down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$meridian" up --fleet examples/fleets/quantum-lab.yaml --dir "$dir" >/dev/null
echo "\$ meridian run examples/jobs/circuits.yaml"
"$meridian" run --dir "$dir" examples/jobs/circuits.yaml
echo
echo "\$ meridian run examples/jobs/qaoa-maxcut.yaml"
"$meridian" run --dir "$dir" examples/jobs/qaoa-maxcut.yaml | tail -n 12
