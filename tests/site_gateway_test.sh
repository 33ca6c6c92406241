#!/usr/bin/env bash
# The gateways `meridian up` starts, one a site (docs/serving.md, "Site gateways"), as a
# user reaches the services through them, on a local cluster of two regions
# (tests/serving/two-regions.yaml):
#  1. each listens on HTTPS with a certificate of the cluster's CA, asks for the token in
#     DIR/gateways/client.token, and answers a service that does not run with a clear 404;
#  2. two services at once (the digits model in both regions, a command in us-east): each
#     at /v1/services/NAME/, a site's own region first; each service's clients' token
#     (meridian service token NAME) calls it and no other; a tenant's own API token
#     (meridian token create) calls its tenant's services, not another tenant's;
#  3. autoscaling: 10 connections at eu-west's gateway scale eu-west's replicas to the
#     spec's max (3) with no request failing; the load gone, they drain to 1; us-east's
#     gateway scales no eu-west replica (one gateway scales each region);
#  4. a deleted service leaves the gateways (404), the other is still served;
#  5. `meridian down` and `up` again: the gateways come back at the same addresses.
# Plus `gateway --site`'s errors, one line and exit 2.
#   tests/site_gateway_test.sh MERIDIAN SOURCE_DIR
set -uo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
cd "$root"
py=/usr/bin/python3  # Debian's
export PATH="$PATH:/usr/sbin:/sbin"
tmp=$(mktemp -d)
chmod 711 "$tmp"  # task users reach their directories in the cluster's
cluster="$tmp/cluster"
D=(--dir "$cluster")
. tests/process_lib.sh  # check, pids, stop_started
. tests/serving/lib.sh  # serving, wait_serving: where the digits service runs
finish() {
  "$bin" down "${D[@]}" >/dev/null 2>&1
  if [ "$fail" -ne 0 ]; then
    for f in "$tmp"/*.log "$cluster"/logs/gateway-*.log; do [ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done
  fi
  stop_started
  rm -rf "$tmp"
}
trap finish EXIT
guard_cleanup finish
test_budget 270  # ctest's TIMEOUT is 300 s

"$bin" up --fleet tests/serving/two-regions.yaml "${D[@]}" --heartbeat-timeout 2s >"$tmp/up.log" 2>&1 ||
  { bad "meridian up"; cat "$tmp/up.log"; exit 1; }
eu=$(cat "$cluster/gateways/eu-west.url")
us=$(cat "$cluster/gateways/us-east.url")
ct=$(cat "$cluster/gateways/client.token")
grep -qxF "gateway of site eu-west at $eu/v1/services/NAME/" "$tmp/up.log" &&
  grep -qxF "gateway of site us-east at $us/v1/services/NAME/" "$tmp/up.log" && [[ "$eu" == https://127.0.0.1:* ]] &&
  ok "up started a gateway a site and says where" || { bad "up said:"; cat "$tmp/up.log"; }
[ "$(stat -c %a "$cluster/gateways/client.token")" = 600 ] && [ ${#ct} -eq 64 ] &&
  ok "the clients' token: 32 random bytes, 0600" || bad "client.token: $(stat -c %a "$cluster/gateways/client.token") ${#ct}"
ca=(--cacert "$cluster/tls/ca.crt")
auth=(-H "Authorization: Bearer $ct")

# 1. HTTPS of the cluster's CA, the token, a clear 404.
code=$(curl -s -o /dev/null -w "%{http_code}" "$eu/healthz"; echo " $?")
[ "$code" = "000 60" ] && ok "a client that does not trust the cluster's CA cannot talk to it" || bad "no CA: $code"
code=$(curl -s "${ca[@]}" -o "$tmp/body" -w "%{http_code}" "$eu/v1/services")
[ "$code" = 401 ] && ok "no token: 401" || bad "no token: $code $(cat "$tmp/body")"
code=$(curl -s "${ca[@]}" "${auth[@]}" -o "$tmp/body" -w "%{http_code}" "$eu/v1/services/digits/v1/predict")
[ "$code" = 404 ] && [ "$(cat "$tmp/body")" = "{\"error\":\"no service 'digits' at this gateway (GET /v1/services lists those it routes; meridian services, those that run)\"}" ] &&
  ok "a service that does not run: 404, saying so" || bad "before serve: $code $(cat "$tmp/body")"
check "site gateway without --fleet" 2 "--site: give --fleet FILE, the fleet the site is of" \
  "$bin" gateway --site eu-west --token-file "$cluster/gateways/client.token" "${D[@]}"
check "site gateway of no such site" 2 \
  "--site 'mars': tests/serving/two-regions.yaml has no such site (its sites: eu-west, us-east)" \
  "$bin" gateway --site mars --fleet tests/serving/two-regions.yaml --token-file "$cluster/gateways/client.token" "${D[@]}"
check "site gateway of one service" 2 "--site: a site's gateway routes every service" \
  "$bin" gateway --site eu-west --service digits --fleet tests/serving/two-regions.yaml \
  --token-file "$cluster/gateways/client.token" "${D[@]}"
check "--fleet without --site or --autoscale" 2 "--fleet: a site's gateway (--site SITE) reads the fleet, or a service's autoscaling gateway (--service NAME --region R --autoscale), to know its region's sites" \
  "$bin" gateway --service digits --fleet tests/serving/two-regions.yaml \
  --token-file "$cluster/gateways/client.token" "${D[@]}"

# 2. Two services.
digits=/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz
printf '0 n1 s1 127.0.0.1\n' >"$tmp/peers"
env RANK=0 WORLD_SIZE=1 MASTER_PORT=29972 MERIDIAN_GANG_SECRET=s3cret MERIDIAN_GANG_PEERS="$tmp/peers" \
  "$bin" gang train --data "$digits" --epochs 10 --hidden 32 --save-model "$tmp/model" >"$tmp/train.log" 2>&1 ||
  { bad "gang train"; exit 1; }
"$bin" data put "$tmp/model" --name digits-model --site us-east "${D[@]}" >"$tmp/put.log" 2>&1 || { bad "data put"; exit 1; }
base=$(replica_port_base 110)
sed "s/^port: .*/port: $base/" tests/serving/digits.yaml >"$tmp/digits.yaml"
sed "s/^port: .*/port: $((base + 100))/" tests/serving/files.yaml >"$tmp/files.yaml"
check "serve digits" 0 "" "$bin" serve "$tmp/digits.yaml" "${D[@]}"
check "serve files" 0 "" "$bin" serve "$tmp/files.yaml" "${D[@]}"
body="{\"instances\": [$($py -c 'print([0.5] * 64)')]}"
answered_by() {  # GATEWAY_URL: the region of the replica that answered a prediction
  curl -s -D - -o /dev/null "${ca[@]}" "${auth[@]}" -d "$body" "$1/v1/services/digits/v1/predict" |
    tr -d '\r' | sed -n 's/^x-meridian-replica: .*@//p'
}
for _ in $(seq 300); do [ "$(answered_by "$eu") $(answered_by "$us")" = "eu-west us-east" ] && break; sleep 0.1; done
[ "$(answered_by "$eu") $(answered_by "$us")" = "eu-west us-east" ] &&
  ok "digits at /v1/services/digits/: each site's gateway sends to its own region" ||
  bad "digits: '$(answered_by "$eu") $(answered_by "$us")'"
for _ in $(seq 300); do
  code=$(curl -s "${ca[@]}" "${auth[@]}" -o "$tmp/env.txt" -w "%{http_code}" "$eu/v1/services/files/env.txt")
  [ "$code" = 200 ] && break; sleep 0.1
done
[ "$code" = 200 ] && grep -q "^PORT=[0-9]" "$tmp/env.txt" &&
  ok "files at /v1/services/files/: eu-west's gateway sends to its one replica, in us-east" || bad "files: $code"
list=$(curl -s "${ca[@]}" "${auth[@]}" "$eu/v1/services")
[ "$list" = '{"region":"eu-west","services":["digits","files"]}' ] && ok "GET /v1/services lists both" || bad "list: $list"
! grep -q "SERVICE_CLIENT_TOKEN\|REPLICA_TOKEN" "$tmp/env.txt" && ok "files' command sees neither token" ||
  bad "env.txt: $(grep TOKEN "$tmp/env.txt")"
# Each service's own clients' token: that service at every site's gateway, no other, not the lists.
check "service token digits" 0 "" "$bin" service token digits "${D[@]}"
dt=$(cat "$tmp/out")
[ ${#dt} -eq 64 ] && [ "$dt" != "$ct" ] && ok "digits' clients' token: its own, 32 random bytes" || bad "token: '$dt'"
check "service token files --json" 0 "" "$bin" service token files --json "${D[@]}"
ft=$($py -c 'import json, sys; j = json.load(sys.stdin); assert j["service"] == "files"; print(j["token"])' <"$tmp/out")
[ ${#ft} -eq 64 ] && [ "$ft" != "$dt" ] && ok "files' clients' token: another" || bad "files' token: '$ft'"
check "service token of no service" 2 "no service 'nope' runs" "$bin" service token nope "${D[@]}"
dauth=(-H "Authorization: Bearer $dt")
for g in "$eu" "$us"; do
  code=$(curl -s "${ca[@]}" "${dauth[@]}" -o "$tmp/body" -w "%{http_code}" -d "$body" "$g/v1/services/digits/v1/predict")
  [ "$code" = 200 ] && grep -qF '"predictions"' "$tmp/body" && ok "digits' token calls digits at $g" ||
    bad "digits' token at $g: $code $(cat "$tmp/body")"
done
code=$(curl -s "${ca[@]}" "${dauth[@]}" -o "$tmp/body" -w "%{http_code}" "$eu/v1/services/files/env.txt")
[ "$code" = 401 ] && [ "$(cat "$tmp/body")" = '{"error":"the bearer token is not this service'"'"'s"}' ] &&
  ok "digits' token does not call files: 401" || bad "digits' token on files: $code $(cat "$tmp/body")"
code=$(curl -s "${ca[@]}" -H "Authorization: Bearer $ft" -o /dev/null -w "%{http_code}" "$eu/v1/services/files/env.txt")
codes="$code $(curl -s "${ca[@]}" "${dauth[@]}" -o /dev/null -w "%{http_code}" "$eu/v1/services")"
codes="$codes $(curl -s "${ca[@]}" "${dauth[@]}" -o /dev/null -w "%{http_code}" "$eu/v1/gateway")"
[ "$codes" = "200 401 401" ] && ok "files' token calls files; a service's token lists nothing" || bad "codes: $codes"

# A tenant's own API token (meridian token create): its tenant's services at every
# site's gateway (the gateway asks the coordinator whose it is), no other tenant's.
check "whoami" 0 "" "$bin" whoami --json "${D[@]}"
tenant=$($py -c 'import json, sys; print(json.load(sys.stdin)["tenant"])' <"$tmp/out")
new_token() {  # user tenant role -> "ID SECRET"
  "$bin" token create --user "$1" --tenant "$2" --role "$3" --json "${D[@]}" 2>"$tmp/err" |
    $py -c 'import json, sys; j = json.load(sys.stdin); print(j["id"], j["token"])' || echo "FAIL token create $1: $(cat "$tmp/err")" >&2
}
read -r _ alice < <(new_token alice "$tenant" viewer)
read -r _ bob < <(new_token bob team-b submitter)
read -r carol_id carol < <(new_token carol "$tenant" submitter)
for g in "$eu" "$us"; do
  code=$(curl -s "${ca[@]}" -H "Authorization: Bearer $alice" -o "$tmp/body" -w "%{http_code}" -d "$body" \
    "$g/v1/services/digits/v1/predict")
  [ "$code" = 200 ] && grep -qF '"predictions"' "$tmp/body" && ok "alice's own token (tenant $tenant) calls digits at $g" ||
    bad "alice's token at $g: $code $(cat "$tmp/body")"
done
code=$(curl -s "${ca[@]}" -H "Authorization: Bearer $bob" -o "$tmp/body" -w "%{http_code}" -d "$body" \
  "$eu/v1/services/digits/v1/predict")
want='{"error":"user bob of tenant team-b may not call service digits: it is another tenant'"'"'s"}'
[ "$code" = 401 ] && [ "$(cat "$tmp/body")" = "$want" ] && ok "bob's token (tenant team-b) does not: 401, saying why" ||
  bad "bob's token: $code $(cat "$tmp/body")"
codes="$(curl -s "${ca[@]}" -H "Authorization: Bearer $alice" -o /dev/null -w "%{http_code}" "$eu/v1/services")"
codes="$codes $(curl -s "${ca[@]}" -H "Authorization: Bearer $alice" -o /dev/null -w "%{http_code}" "$eu/v1/gateway")"
[ "$codes" = "401 401" ] && ok "a tenant's token lists nothing" || bad "alice's token on the lists: $codes"
check "token revoke carol" 0 "" "$bin" token revoke "$carol_id" "${D[@]}"
code=$(curl -s "${ca[@]}" -H "Authorization: Bearer $carol" -o "$tmp/body" -w "%{http_code}" -d "$body" \
  "$eu/v1/services/digits/v1/predict")
want="{\"error\":\"service digits does not take this bearer token: token $carol_id was revoked\"}"
[ "$code" = 401 ] && [ "$(cat "$tmp/body")" = "$want" ] && ok "a revoked token: 401, saying so" ||
  bad "carol's revoked token: $code $(cat "$tmp/body")"

# A service's name is the cluster's: another tenant's `serve` of a name that runs is
# refused, and nothing is submitted (its replica would have joined the service: the
# gateways took its secrets and sent the service's requests to it).
jobs_now() { "$bin" jobs --json "${D[@]}" | $py -c 'import json, sys; print(len(json.load(sys.stdin)))'; }
before=$(jobs_now)
check "another tenant's serve of files" 2 \
  "job 'serve/files/us-east/0': a service named 'files' runs already, of another tenant; a service's name is the cluster's (the gateways route by it): serve yours under another name" \
  env MERIDIAN_TOKEN="$bob" "$bin" serve "$tmp/files.yaml" "${D[@]}"
[ "$(jobs_now)" = "$before" ] && ok "nothing submitted ($before jobs)" || bad "jobs: $before, then $(jobs_now)"
# A replica added to a tenant's service is that tenant's, whoever adds it (an admin by
# `service scale`, a site gateway's autoscaler): it was the default tenant's.
sed -e "s/^name: files/name: files-b/" -e "s/^port: .*/port: $((base + 105))/" -e "s/max: 1/max: 2/" \
  "$tmp/files.yaml" >"$tmp/files-b.yaml"
check "team-b serves files-b" 0 "" env MERIDIAN_TOKEN="$bob" "$bin" serve "$tmp/files-b.yaml" "${D[@]}"
check "the admin scales files-b" 0 "" "$bin" service scale files-b --region us-east --replicas 2 "${D[@]}"
tenants=$("$bin" jobs --json "${D[@]}" |
  $py -c 'import json, sys; print(" ".join(sorted(j["tenant"] for j in json.load(sys.stdin) if j["name"].startswith("serve/files-b/"))))')
[ "$tenants" = "team-b team-b" ] && ok "both replica jobs of files-b are team-b's: $tenants" ||
  bad "tenants of files-b's replica jobs: '$tenants'"
check "team-b deletes files-b" 0 "" env MERIDIAN_TOKEN="$bob" "$bin" service delete files-b "${D[@]}"

# 3. Autoscaling by the site gateways: eu-west's 10 connections.
cat >"$tmp/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $ct"
EOF
wait_serving "eu-west=1 us-east=1" 30 || bad "before the load: $(serving)"
wrk -t1 -c10 -d8s -s "$tmp/post.lua" "$eu/v1/services/digits/v1/predict" >"$tmp/wrk.log" 2>&1 &
wrk_pid=$!
peak=0
while kill -0 $wrk_pid 2>/dev/null; do
  n=$(serving | sed -n 's/.*eu-west=\([0-9]*\).*/\1/p')
  [ "${n:-0}" -gt "$peak" ] && peak=$n
  sleep 0.2
done
wait $wrk_pid
requests=$(sed -n 's/^ *\([0-9]*\) requests in .*/\1/p' "$tmp/wrk.log")
[ "$peak" = 3 ] && ok "10 connections at eu-west's gateway: eu-west's replicas rose to its max, 3" ||
  bad "peak $peak: $(grep autoscale "$cluster/logs/gateway-eu-west.log")"
[ "${requests:-0}" -gt 0 ] && ! grep -q "Non-2xx\|Socket errors" "$tmp/wrk.log" &&
  ok "$requests requests under the rise, none failed" || { bad "wrk:"; cat "$tmp/wrk.log"; }
wait_serving "eu-west=1 us-east=1" 40 && ok "the load gone, eu-west's replicas drained to 1" || bad "after: $(serving)"
grep -q "drained (0 requests in flight)" "$cluster/logs/gateway-eu-west.log" && ! grep -q "autoscale eu-west" "$cluster/logs/gateway-us-east.log" &&
  ok "eu-west's gateway drained them; us-east's scaled no eu-west replica" || bad "logs"

# 4. Delete one of the two.
check "delete digits" 0 "" "$bin" service delete digits "${D[@]}"
for _ in $(seq 100); do
  code=$(curl -s "${ca[@]}" "${auth[@]}" -o "$tmp/body" -w "%{http_code}" -d "$body" "$us/v1/services/digits/v1/predict")
  [ "$code" = 404 ] && break; sleep 0.1
done
code2=$(curl -s "${ca[@]}" "${auth[@]}" -o /dev/null -w "%{http_code}" "$us/v1/services/files/env.txt")
[ "$code $code2" = "404 200" ] && grep -qF "no service 'digits' at this gateway" "$tmp/body" &&
  ok "deleted, digits leaves the gateways; files is still served" || bad "after delete: $code $code2 $(cat "$tmp/body")"

# 5. Down and up: the same addresses.
"$bin" down "${D[@]}" >/dev/null 2>&1
"$bin" up --fleet tests/serving/two-regions.yaml "${D[@]}" --heartbeat-timeout 2s >"$tmp/up2.log" 2>&1 ||
  { bad "up again"; cat "$tmp/up2.log"; }
code=$(curl -s "${ca[@]}" -o /dev/null -w "%{http_code}" "$eu/healthz")
[ "$(cat "$cluster/gateways/eu-west.url")" = "$eu" ] && [ "$code" = 200 ] &&
  ok "up again: eu-west's gateway answers at $eu again" || bad "up again: $(cat "$cluster/gateways/eu-west.url") $code"
check "delete files" 0 "" "$bin" service delete files "${D[@]}"
exit $fail
