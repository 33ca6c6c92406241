#!/usr/bin/env bash
# The `meridian` command as a user runs it: the README's plan, JSON output, and one
# clear error line with a non-zero exit for each kind of bad input.
set -uo pipefail
bin=$1
root=$2
cd "$root"
fleet=examples/fleets/three-sites.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # name, want_rc, stderr_substring, command...
  local name=$1 want=$2 needle=$3
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL $name: exit $rc, want $want"; cat "$tmp/err"; fail=1; return
  fi
  if [ -n "$needle" ] && ! grep -qF -- "$needle" "$tmp/err"; then
    echo "FAIL $name: stderr lacks '$needle':"; cat "$tmp/err"; fail=1; return
  fi
  if [ "$want" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
    echo "FAIL $name: expected one error line, got:"; cat "$tmp/err"; fail=1; return
  fi
  echo "ok   $name"
}

check "plan the main job" 0 "" "$bin" plan --fleet $fleet examples/jobs/tile-histograms.yaml
grep -q "Total: 13 of 13 tasks placed" "$tmp/out" || { echo "FAIL plan output:"; cat "$tmp/out"; fail=1; }
check "plan as JSON" 0 "" "$bin" plan --fleet $fleet examples/jobs/transcode.yaml --json
grep -q '"device_type": "L4"' "$tmp/out" || { echo "FAIL json output:"; cat "$tmp/out"; fail=1; }
check "every example job but the infeasible one plans" 0 "" bash -c "for j in examples/jobs/*.yaml; do case \$j in *infeasible*) continue;; esac; $bin plan --fleet $fleet \$j >/dev/null || exit 1; done"
check "infeasible job" 1 "3 of 3 tasks of job 'too-big' cannot be placed" "$bin" plan --fleet $fleet examples/jobs/infeasible.yaml
grep -q "giant \[infeasible\]: 0 of 16 nodes can run it: 14 nodes have no H100" "$tmp/out" || { echo "FAIL infeasible reason:"; cat "$tmp/out"; fail=1; }
check "missing job file" 1 "no-such-job.yaml: no such file" "$bin" plan --fleet $fleet no-such-job.yaml
printf 'name: x\ntasks:\n  - name: a\n    kernel: sum\n    resources: {cpu: 2, gpus: 1}\n' >"$tmp/bad.yaml"
check "unknown field" 1 "bad.yaml:5:25: tasks[0].resources: unknown field 'gpus'" "$bin" plan --fleet $fleet "$tmp/bad.yaml"
printf 'name: x\ntasks:\n  - name: a\n    kernel: sum\n    duration: 10 parsecs\n' >"$tmp/unit.yaml"
check "wrong unit" 1 "unit.yaml:5:15: tasks[0].duration: unknown unit 'parsecs'" "$bin" plan --fleet $fleet "$tmp/unit.yaml"
check "bad queue order" 1 "--order: expected fifo, priority or fair" "$bin" plan --fleet $fleet --order lifo examples/jobs/transcode.yaml
check "missing --fleet" 2 "--fleet is required" "$bin" plan examples/jobs/transcode.yaml
check "bench sched runs" 0 "" "$bin" bench sched --nodes 200 --tasks 500 --json
grep -q '"placements_per_second"' "$tmp/out" || { echo "FAIL bench output"; fail=1; }
exit $fail
