#!/usr/bin/env bash
# Checks the dependency rules of docs/architecture.md on the sources: each folder of
# src/ includes only the parts (and third-party headers) its row allows. The CMake
# link lines enforce the same at link time; this catches a stray #include first.
set -euo pipefail
root=${1:-$(dirname "$0")/..}
cd "$root/src"

declare -A allowed=(
  [common]="common"
  [testing]="testing store model common"
  [model]="model common"
  [spec]="spec model common"
  [sched]="sched model common"
  [sim]="sim sched spec model common"
  [kernels]="kernels common"
  [store]="store model common"
  [objects]="objects common"
  [rpc]="rpc model common meridian"
  [coordinator]="coordinator sched store spec rpc model common"
  [agent]="agent kernels objects rpc model common"
  [client]="client rpc spec model common meridian"
  [cli]="cli spec sched sim model common bench coordinator agent client store rpc kernels objects"
)
# ("meridian/" is the code generated from proto/meridian/v1: only rpc and the client
# stubs use it.)
# Headers no part may use unless listed here.
declare -A forbidden=(
  [sched]="grpc sqlite3 cuda yaml-cpp nlohmann chrono thread"
  [sim]="grpc sqlite3 cuda yaml-cpp chrono thread"
  [model]="grpc sqlite3 cuda yaml-cpp nlohmann chrono thread"
  [common]="grpc sqlite3 cuda yaml-cpp nlohmann"
  [kernels]="grpc sqlite3 cuda"
  [coordinator]="grpc sqlite3 cuda"
  [agent]="grpc sqlite3 cuda"
  [store]="grpc cuda"
  [objects]="grpc sqlite3 cuda"
)

fail=0
for part in "${!allowed[@]}"; do
  [ -d "$part" ] || continue
  while IFS= read -r line; do
    file=${line%%:*}
    inc=$(sed -E 's/.*#include "([^/"]+)\/.*/\1/' <<<"${line#*:}")
    ok="${allowed[$part]}"
    case "$file" in *_test.cc|*_test_util.*) ok="$ok testing" ;; esac
    if ! grep -qw -- "$inc" <<<"$ok"; then
      echo "link rule broken: $file includes $inc/, but $part may use only: ${allowed[$part]}"
      fail=1
    fi
  done < <(grep -HE '^#include "[^/"]+/' "$part"/*.h "$part"/*.cc 2>/dev/null || true)
  for bad in ${forbidden[$part]:-}; do
    hits=$(grep -lE "^#include <[^>]*${bad}[^>]*>" "$part"/*.h "$part"/*.cc 2>/dev/null | grep -v 'platform' || true)
    if [ -n "$hits" ]; then
      echo "link rule broken: $part may not include <...${bad}...>: $hits"
      fail=1
    fi
  done
done
if [ "$fail" -eq 0 ]; then
  echo "link rules hold for: ${!allowed[*]}"
fi
exit $fail
