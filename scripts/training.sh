#!/usr/bin/env bash
# The training examples (docs/training.md): a local cluster of
# examples/fleets/two-sites-training.yaml (two sites of two one-core nodes, in a
# directory of its own, stopped at the end) runs examples/training/ddp-digits.yaml (an
# unmodified PyTorch DDP script, four ranks over gloo, two at each site) and
# examples/training/mpi-pi.yaml (mpi4py over Open MPI, with Meridian as mpirun's
# launcher) and examples/training/mlp-digits.yaml (Meridian's own elastic trainer).
# Installs and builds like scripts/run.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

meridian=build/release/meridian
dir=$(mktemp -d /tmp/meridian-training-XXXXXX)  # mktemp fills in the Xs
trap '"$meridian" down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
chmod 0711 "$dir"  # commands run as their tenant's user when this runs as root
"$meridian" up --fleet examples/fleets/two-sites-training.yaml --dir "$dir" >/dev/null
"$meridian" data put --dir "$dir" examples/training/ddp_digits.py --name ddp-digits-code >/dev/null
"$meridian" data put --dir "$dir" examples/training/mpi_pi.py --name mpi-pi-code >/dev/null
echo "\$ meridian run examples/training/ddp-digits.yaml"
"$meridian" run --dir "$dir" examples/training/ddp-digits.yaml
echo
echo "\$ meridian run examples/training/mpi-pi.yaml"
"$meridian" run --dir "$dir" examples/training/mpi-pi.yaml
"$meridian" data put --dir "$dir" /usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz --name digits >/dev/null
echo
echo "\$ meridian run examples/training/mlp-digits.yaml"
"$meridian" run --dir "$dir" examples/training/mlp-digits.yaml
