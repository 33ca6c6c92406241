# Shared by the serving tests (service_test.sh, site_gateway_test.sh), sourced after
# $bin (meridian), D (its --dir flags) and $py are set.
# Replicas of `digits` running with an endpoint, by region: "eu-west=2 us-east=1".
serving() {
  "$bin" service get digits "${D[@]}" --json 2>/dev/null | $py -c '
import collections, json, sys
n = collections.Counter(r["region"] for r in json.load(sys.stdin)["replicas"] if r["endpoint"])
print(" ".join(f"{k}={v}" for k, v in sorted(n.items())))'
}
wait_serving() {  # WANT SECONDS
  for _ in $(seq 1 $(($2 * 10))); do [ "$(serving)" = "$1" ] && return 0; sleep 0.1; done
  return 1
}
