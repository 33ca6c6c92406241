#!/usr/bin/env bash
# The transaction-verification example (docs/chain.md): a chain of signed transfers
# between 1,000 accounts, with three forged and one tampered transaction planted, is
# written by `meridian chain generate` with its shards spread over the three sites of
# examples/fleets/three-sites.yaml, put where they were written (dataset://chain),
# and verified by examples/jobs/chain-verify.yaml, each shard at its site. The job's
# report must equal the one the generator printed. Installs and builds like
# scripts/run.sh, and starts the local cluster if it is not running.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release

meridian=build/release/meridian
"$meridian" up --fleet examples/fleets/three-sites.yaml >/dev/null
work=$(mktemp -d /tmp/meridian-chain-XXXXXX)  # mktemp fills in the Xs
trap 'rm -rf "$work"' EXIT
if ! "$meridian" data ls chain >/dev/null 2>&1; then
  echo "\$ meridian chain generate --out $work/chain --blocks 60 --transactions-per-block 1000 --shards 12 --sites us-east,eu-west,factory"
  "$meridian" chain generate --out "$work/chain" --blocks 60 --transactions-per-block 1000 --shards 12 \
    --sites us-east,eu-west,factory | tee "$work/generated.txt"
  echo "\$ meridian data put --by-site --name chain $work/chain"
  "$meridian" data put --by-site --name chain "$work/chain"
else
  # The dataset is there from an earlier run: the same seed writes the same chain.
  "$meridian" chain generate --out "$work/chain" --blocks 60 --transactions-per-block 1000 --shards 12 \
    --sites us-east,eu-west,factory >"$work/generated.txt"
fi
echo
echo "\$ meridian run --output-dir $work/out examples/jobs/chain-verify.yaml"
"$meridian" run --output-dir "$work/out" examples/jobs/chain-verify.yaml
echo
# The generator's expected report is everything after its two summary lines.
if cmp -s <(tail -n +3 "$work/generated.txt") "$work/out/report"; then
  echo "the cluster's report is the one the generator planted: every bad transaction found, nothing else"
else
  echo "the cluster's report differs from the generator's:" >&2
  diff <(tail -n +3 "$work/generated.txt") "$work/out/report" >&2 || true
  exit 1
fi
