#!/usr/bin/env bash
# Checks the dependency rules of docs/architecture.md on the sources: each folder of
# src/ (sub-folders and CUDA files included), bench/, tests/ and fuzz/ includes only
# the parts (and third-party headers) its row allows. The CMake link lines enforce the
# same at link time; this catches a stray #include first, however it is spaced.
#   tests/link_rules_test.sh [ROOT]     check the tree at ROOT (default: this repo)
#   tests/link_rules_test.sh --self-test   check that broken trees are caught
set -euo pipefail

if [ "${1:-}" = "--self-test" ]; then
  # Each case is a tree with one violation; the check must fail on every one, and
  # pass on the clean tree.
  script=$(realpath "$0")
  tmp=$(mktemp -d)  # mktemp fills in a unique name
  trap 'rm -rf "$tmp"' EXIT
  write() { mkdir -p "$(dirname "$tmp/$1/$2")"; printf '%s\n' "$3" >"$tmp/$1/$2"; }
  write clean src/sched/a.cc '#include "model/fleet.h"'
  write clean src/kernels/cuda/k.cu '#include "kernels/ops.h"'
  write spaced src/sched/a.cc '  #  include "store/state_store.h"'
  write cuda src/kernels/cuda/k.cu '#include "objects/store.h"'
  write subfolder src/kernels/cpu/x.cc '#include "rpc/api.h"'
  write bench bench/b.cc '#include "coordinator/coordinator.h"'
  write tests tests/t.cc '#include "store/state_store.h"'
  write fstream src/sched/a.cc '#include <fstream>'
  write filesystem src/sched/a.cc '# include <filesystem>'
  write mutex src/sched/a.cc '#include <mutex>'
  write shared tests/t_test.sh 'trace=../shared/data/traces/x.csv'
  fail=0
  bash "$script" "$tmp/clean" >/dev/null || { echo "self-test: the clean tree was refused"; fail=1; }
  for c in spaced cuda subfolder bench tests fstream filesystem mutex shared; do
    if bash "$script" "$tmp/$c" >/dev/null; then
      echo "self-test: the '$c' violation was not caught"
      fail=1
    fi
  done
  [ "$fail" -eq 0 ] && echo "self-test: every violation was caught"
  exit $fail
fi

root=${1:-$(dirname "$0")/..}
cd "$root"

declare -A allowed=(
  [common]="common"
  [testing]="testing store model common"
  [model]="model common"
  [spec]="spec model common"
  [sched]="sched model common"
  [sim]="sim sched spec model common"
  [kernels]="kernels common"
  [store]="store model common"
  [security]="security common"
  [http]="http security common"
  [objects]="objects security common"
  [collective]="collective objects security common"
  [rpc]="rpc security model common meridian"
  [coordinator]="coordinator sched store spec rpc http security model common"
  [agent]="agent kernels objects rpc http security model common"
  [client]="client rpc security objects spec model common meridian"
  [workloads]="workloads client kernels collective http security common model spec"
  [vopr]="vopr coordinator agent testing store rpc model common"
  [netsim]="netsim common"
  [cli]="cli spec sched sim model common bench coordinator agent client store rpc http kernels objects collective security workloads"
  [bench]="bench sched sim spec model common"
  [tests]="client rpc http security objects spec model common testing meridian"
  [fuzz]="spec sim sched objects rpc kernels netsim workloads model common meridian"
  [python]="client rpc objects model common"
)
# ("meridian/" is the code generated from proto/meridian/v1: only rpc, the client
# stubs and the tests that speak the protocol use it.)
# Headers no part may use unless listed here (platform* files excepted).
declare -A forbidden=(
  [sched]="grpc sqlite3 libpq cuda yaml-cpp nlohmann chrono thread fstream filesystem mutex iostream"
  [sim]="grpc sqlite3 libpq cuda yaml-cpp chrono thread"
  [model]="grpc sqlite3 libpq cuda yaml-cpp nlohmann chrono thread fstream filesystem"
  [common]="grpc sqlite3 libpq cuda yaml-cpp nlohmann"
  [kernels]="grpc sqlite3"
  [coordinator]="grpc sqlite3 libpq cuda"
  [agent]="grpc sqlite3 libpq cuda"
  [store]="grpc cuda"
  [objects]="grpc sqlite3 libpq cuda"
  [collective]="grpc sqlite3 libpq cuda"
  [security]="grpc sqlite3 libpq cuda yaml-cpp nlohmann"
  [http]="grpc sqlite3 libpq cuda yaml-cpp"
  [workloads]="grpc sqlite3 libpq cuda"
  [vopr]="grpc sqlite3 libpq cuda thread chrono"
  [netsim]="grpc sqlite3 libpq cuda yaml-cpp nlohmann"
  [python]="grpc sqlite3 libpq cuda"
)
# CUDA headers belong in kernels/cuda/ alone.
cuda_ok="kernels/cuda"

dir_of() {
  case "$1" in
    bench|tests|fuzz|python) echo "$1" ;;
    *) echo "src/$1" ;;
  esac
}

fail=0
checked=()
for part in "${!allowed[@]}"; do
  d=$(dir_of "$part")
  [ -d "$d" ] || continue
  checked+=("$part")
  mapfile -t files < <(find "$d" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.cuh' \) | sort)
  [ "${#files[@]}" -gt 0 ] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^/"]+)\/.*/\1/' <<<"${line#*:}")
    ok="${allowed[$part]}"
    case "$file" in *_test.cc|*_test_util.*) ok="$ok testing" ;; esac
    if ! grep -qw -- "$inc" <<<"$ok"; then
      echo "link rule broken: $file includes $inc/, but $part may use only: ${allowed[$part]}"
      fail=1
    fi
  done < <(grep -HE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^/"]+/' "${files[@]}" || true)
  for bad in ${forbidden[$part]:-}; do
    hits=$(grep -lE "^[[:space:]]*#[[:space:]]*include[[:space:]]*<[^>]*${bad}[^>]*>" "${files[@]}" | grep -v 'platform' || true)
    if [ -n "$hits" ]; then
      echo "link rule broken: $part may not include <...${bad}...>: $hits"
      fail=1
    fi
  done
  # CUDA's own headers only in kernels/cuda/.
  hits=$(grep -lE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<(cuda|cub/|cublas|nccl|thrust/)' "${files[@]}" \
         | grep -v "$cuda_ok/" || true)
  if [ -n "$hits" ]; then
    echo "link rule broken: CUDA headers outside src/$cuda_ok/: $hits"
    fail=1
  fi
done
# Tests are self-contained: they read fixtures in the repository (tests/fixtures/),
# never ../shared/data, which a clean checkout elsewhere does not have.
if [ -d tests ]; then
  hits=$(grep -rlE 'shared/data' tests src 2>/dev/null --include='*_test.cc' --include='*.sh' --include='*.yaml' --include='local_cluster.h' \
         | grep -v '^tests/link_rules_test.sh$' || true)
  # Comments in the fleet copies say where their figures came from; paths may not.
  hits=$(for f in $hits; do grep -lE '^[^#]*shared/data' "$f" || true; done)
  if [ -n "$hits" ]; then
    echo "tests read ../shared/data (use tests/fixtures/): $hits"
    fail=1
  fi
fi
if [ "$fail" -eq 0 ]; then
  echo "link rules hold for: ${checked[*]}"
fi
exit $fail
