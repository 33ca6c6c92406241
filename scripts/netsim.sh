#!/usr/bin/env bash
# Many hosts on one machine: one network namespace per site of a fleet file, joined
# through a router namespace by veth pairs, so that traffic between sites crosses a
# real kernel network path, shaped like the fleet's links. Needs root (CAP_NET_ADMIN
# and CAP_SYS_ADMIN).
#
#   scripts/netsim.sh up FLEET [--prefix P] [--meridian BIN]
#   scripts/netsim.sh down [--prefix P]
#   scripts/netsim.sh cut SITE [--prefix P]       every packet to or from SITE dropped
#   scripts/netsim.sh loss SITE PCT [--prefix P]  PCT% of them dropped (random)
#   scripts/netsim.sh heal SITE [--prefix P]      SITE's link whole again
#   scripts/netsim.sh bytes FROM TO [--prefix P]  bytes the kernel sent on the link FROM -> TO
#   scripts/netsim.sh exec SITE|core [--prefix P] -- CMD...
#   scripts/netsim.sh show [--prefix P]           namespaces, addresses and link counters
#
# The network (prefix P, default "mnet"; one network of one prefix at a time):
#   P-core   the router; 10.200.255.1 on its loopback is where a coordinator listens
#            (reachable from every site and from this host)
#   P-sN     site N of the fleet (N from 1, in the fleet's order): 10.200.N.2 on eth0,
#            routed through P-core's sN (10.200.N.1)
#   host     this namespace reaches 10.200.0.0/16 through P-h (10.200.254.2)
# Each link A-B of the fleet is an htb class on the router's interface towards B for
# packets from A's subnet (and the other way), at the link's bandwidth. Traffic
# to and from the router or the host is not shaped. Latency needs netem: where the
# kernel has it, each direction gets half the link's round trip; where it does not
# (these CI machines), `up` says so and Meridian keeps emulating the round trip
# in-process (`meridian up --netns` passes --emulate-wan-latency then). Cuts and loss
# are nftables rules (numgen random) in the router, on forwarded packets and on the
# router's own (a coordinator in P-core loses a cut site too).
#
# State (read by `meridian up --netns P`): /run/meridian-netsim/P/
#   sites    one line per site: name, namespace, address (tab-separated)
#   core     the router's namespace and the coordinator's address
#   latency  "netem" or "in-process"
set -euo pipefail

die() { echo "netsim: $*" >&2; exit 1; }

cmd=${1:-}
[ -n "$cmd" ] || die "usage: netsim.sh up|down|cut|loss|heal|bytes|exec|show ... (see the top of this script)"
shift
prefix=mnet
meridian=""
args=()
rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
    --meridian) meridian=${2:?--meridian needs a value}; shift 2 ;;
    --) shift; rest=("$@"); break ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ "$prefix" =~ ^[a-z][a-z0-9]{0,9}$ ]] || die "--prefix: 1 to 10 lowercase letters and digits, a letter first"
state=/run/meridian-netsim/$prefix
core=$prefix-core

need_root() {
  [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces, veth pairs, tc and nftables)"
  command -v ip >/dev/null && command -v tc >/dev/null && command -v nft >/dev/null ||
    die "needs ip, tc and nft (Debian's iproute2 and nftables; scripts/install-deps.sh installs them)"
}

# The line of `sites` for site $1 (name, namespace, address), or an error.
site_line() {
  [ -f "$state/sites" ] || die "no network '$prefix' (scripts/netsim.sh up FLEET --prefix $prefix)"
  local line
  line=$(awk -F'\t' -v s="$1" '$1 == s' "$state/sites")
  [ -n "$line" ] || die "no site '$1' in network '$prefix' (sites: $(cut -f1 "$state/sites" | paste -sd' '))"
  echo "$line"
}
site_index() { site_line "$1" | cut -f2 | sed 's/.*-s//'; }

teardown() {
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}-(core|s[0-9]+)$" || true); do
    ip netns del "$ns"
  done
  ip link del "$prefix-h" 2>/dev/null || true
  rm -rf "$state"
}

case "$cmd" in
  up)
    need_root
    fleet=${args[0]:-}
    [ -n "$fleet" ] && [ -f "$fleet" ] || die "up: a fleet file is needed (scripts/netsim.sh up FLEET)"
    if [ -z "$meridian" ]; then
      for m in build/release/meridian build/dev/meridian; do [ -x "$m" ] && meridian=$m && break; done
    fi
    [ -n "$meridian" ] || die "up: no meridian binary built (give --meridian BIN)"
    sites=$("$meridian" fleet sites "$fleet") || die "up: cannot read $fleet"
    links=$("$meridian" fleet links "$fleet")
    [ "$(echo "$sites" | wc -l)" -le 250 ] || die "up: at most 250 sites"
    if [ -d "$state" ] || ip netns list | grep -q "^$core\b"; then
      die "network '$prefix' exists already (scripts/netsim.sh down --prefix $prefix)"
    fi
    trap 'teardown' ERR
    mkdir -p "$state"
    # Does this kernel have netem? Try it in a namespace of its own.
    latency=in-process
    ip netns add "$prefix-probe"
    ip -n "$prefix-probe" link set lo up
    if tc -n "$prefix-probe" qdisc add dev lo root netem delay 1ms 2>/dev/null; then latency=netem; fi
    ip netns del "$prefix-probe"

    ip netns add "$core"
    ip -n "$core" link set lo up
    ip -n "$core" addr add 10.200.255.1/32 dev lo
    ip netns exec "$core" sysctl -qw net.ipv4.ip_forward=1
    ip link add "$prefix-h" type veth peer name host netns "$core"
    ip addr add 10.200.254.2/24 dev "$prefix-h"
    ip link set "$prefix-h" up
    ip -n "$core" addr add 10.200.254.1/24 dev host
    ip -n "$core" link set host up
    ip route add 10.200.0.0/16 via 10.200.254.1 dev "$prefix-h"
    : >"$state/sites"
    i=0
    while IFS=$'\t' read -r name kind; do
      i=$((i + 1))
      ns=$prefix-s$i
      ip netns add "$ns"
      ip -n "$ns" link set lo up
      ip -n "$core" link add "s$i" type veth peer name eth0 netns "$ns"
      ip -n "$core" addr add "10.200.$i.1/24" dev "s$i"
      ip -n "$core" link set "s$i" up
      ip -n "$ns" addr add "10.200.$i.2/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" route add default via "10.200.$i.1"
      # Towards the site: unshaped unless a link's class below matches the source.
      tc -n "$core" qdisc add dev "s$i" root handle 1: htb default 1
      tc -n "$core" class add dev "s$i" parent 1: classid 1:1 htb rate 100gbit quantum 60000
      printf '%s\t%s\t%s\n' "$name" "$ns" "10.200.$i.2" >>"$state/sites"
    done <<<"$sites"
    # Each link, both ways: on the router's interface towards one end, a class for
    # packets from the other end's subnet.
    while IFS=$'\t' read -r a b rtt_us bps; do
      [ -n "$a" ] || continue
      ia=$(site_index "$a")
      ib=$(site_index "$b")
      for pair in "$ia $ib" "$ib $ia"; do
        read -r from to <<<"$pair"
        class=$((10 + from))
        burst=$((bps / 8 / 100 > 65536 ? bps / 8 / 100 : 65536))
        tc -n "$core" class add dev "s$to" parent 1: classid "1:$class" htb rate "${bps}bit" ceil "${bps}bit" \
          burst "$burst" cburst "$burst" quantum 60000
        if [ "$latency" = netem ]; then
          tc -n "$core" qdisc add dev "s$to" parent "1:$class" handle "$class:" netem delay "$((rtt_us / 2))us" \
            limit 100000
        fi
        tc -n "$core" filter add dev "s$to" parent 1: protocol ip prio 1 u32 match ip src "10.200.$from.0/24" \
          flowid "1:$class"
      done
    done <<<"$links"
    # Cuts and loss: one chain per site, empty while its link is whole.
    {
      echo "table inet netsim {"
      for j in $(seq 1 "$i"); do echo "  chain site$j { }"; done
      for hook in forward input output; do
        echo "  chain $hook { type filter hook $hook priority 0; policy accept;"
        for j in $(seq 1 "$i"); do
          [ "$hook" != output ] && echo "    iifname \"s$j\" jump site$j"
          [ "$hook" != input ] && echo "    oifname \"s$j\" jump site$j"
        done
        echo "  }"
      done
      echo "}"
    } | ip netns exec "$core" nft -f -
    printf '%s\t%s\n' "$core" 10.200.255.1 >"$state/core"
    echo "$latency" >"$state/latency"
    trap - ERR
    echo "netsim: network '$prefix' up: $i sites, $(echo "$links" | grep -c . || true) links shaped (bandwidth by htb)"
    if [ "$latency" = netem ]; then
      echo "netsim: latency by netem (half each link's round trip each way)"
    else
      echo "netsim: this kernel has no netem: link latency stays emulated in-process (meridian up --netns does it)"
    fi
    echo "netsim: a coordinator listens on 10.200.255.1 in $core; sites: $(cut -f1,3 "$state/sites" | tr '\t\n' '= ')"
    ;;
  down)
    need_root
    teardown
    echo "netsim: network '$prefix' down"
    ;;
  cut|loss|heal)
    need_root
    site=${args[0]:-}
    [ -n "$site" ] || die "$cmd: which site?"
    j=$(site_index "$site")
    rule=""
    case "$cmd" in
      cut) rule="drop" ;;
      loss)
        pct=${args[1]:-}
        [[ "$pct" =~ ^[0-9]+$ ]] && [ "$pct" -ge 1 ] && [ "$pct" -le 100 ] || die "loss: a percentage, 1 to 100"
        rule="numgen random mod 100 < $pct drop"
        ;;
    esac
    ip netns exec "$core" nft flush chain inet netsim "site$j"
    [ -z "$rule" ] || ip netns exec "$core" nft add rule inet netsim "site$j" $rule
    echo "netsim: $site: ${rule:-whole again}"
    ;;
  bytes)
    from=${args[0]:-}
    to=${args[1]:-}
    [ -n "$from" ] && [ -n "$to" ] || die "bytes: FROM and TO sites"
    ifrom=$(site_index "$from")
    ito=$(site_index "$to")
    tc -s -n "$core" class show dev "s$ito" classid "1:$((10 + ifrom))" |
      awk '/Sent/ {print $2; found=1} END {if (!found) exit 1}' || die "bytes: no link between $from and $to"
    ;;
  exec)
    where=${args[0]:-}
    [ -n "$where" ] && [ ${#rest[@]} -gt 0 ] || die "exec: SITE|core -- CMD..."
    if [ "$where" = core ]; then ns=$core; else ns=$(site_line "$where" | cut -f2); fi
    exec ip netns exec "$ns" "${rest[@]}"
    ;;
  show)
    [ -f "$state/sites" ] || die "no network '$prefix'"
    echo "router $(cut -f1 "$state/core") (coordinator address $(cut -f2 "$state/core")); latency: $(cat "$state/latency")"
    while IFS=$'\t' read -r name ns addr; do
      echo "site $name: namespace $ns, address $addr"
      j=${ns##*-s}
      tc -s -n "$core" class show dev "s$j" |
        awk -v names="$(cut -f1 "$state/sites" | paste -sd' ')" -v s="$name" '
          BEGIN {n = split(names, site, " ")}
          /^class/ {split($3, c, ":"); from = c[2] == 1 ? "the router and host" : site[c[2] - 10]; rate = $0}
          /Sent/ {sub(/.*rate /, "", rate); sub(/ .*/, "", rate)
                  print "  " from " -> " s ": " $2 " bytes" (from ~ /router/ ? "" : " (shaped at " rate ")")}'
    done <"$state/sites"
    ip netns exec "$core" nft list table inet netsim | grep -E "drop" | sed 's/^/  rule: /' || true
    ;;
  *) die "unknown command '$cmd' (up, down, cut, loss, heal, bytes, exec, show)" ;;
esac
