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
#   scripts/netsim.sh jitter SITE MS [--prefix P] each packet to or from SITE waits an
#                                                 extra 0 to MS ms (uniform; round trips
#                                                 vary by up to 2*MS)
#   scripts/netsim.sh heal SITE [--prefix P]      SITE's link whole again (no cut, loss or jitter)
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
# router's own (a coordinator in P-core loses a cut site too). Jitter is netem's where
# the kernel has it (each direction of the site's links: delay rtt/2 + MS/2, jitter
# MS/2, so uniform over [rtt/2, rtt/2 + MS]); where it does not, the router sends the
# site's packets (to and from other sites, the router and the host) through a TUN
# device, `jt`, that meridian-delayline (built beside meridian) reads, holds for a
# uniform 0 to MS ms without reordering a flow, and writes back: a user-space netem.
#
# State (read by `meridian up --netns P`): /run/meridian-netsim/P/
#   sites    one line per site: name, namespace, address (tab-separated)
#   core     the router's namespace and the coordinator's address
#   latency  "netem" or "in-process"
#   links    one line per link: site, site, round trip (us), bandwidth (bit/s)
#   bin      the meridian binary (meridian-delayline is beside it)
#   jitter   the delay line's rules (one line per jittered site), when it runs
set -euo pipefail

die() { echo "netsim: $*" >&2; exit 1; }

cmd=${1:-}
[ -n "$cmd" ] || die "usage: netsim.sh up|down|cut|loss|jitter|heal|bytes|exec|show ... (see the top of this script)"
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
  if [ -f "$state/delayline.pid" ]; then kill "$(cat "$state/delayline.pid")" 2>/dev/null || true; fi
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^${prefix}-(core|s[0-9]+)$" || true); do
    ip netns del "$ns"
  done
  ip link del "$prefix-h" 2>/dev/null || true
  rm -rf "$state"
}

# netem on the links of site index $1: each direction delay rtt/2, plus a uniform
# 0 to $2 us of jitter when $2 > 0.
netem_jitter() {
  local j=$1 jitter_us=$2 a b rtt_us bps ia ib from to class
  while IFS=$'\t' read -r a b rtt_us bps; do
    [ -n "$a" ] || continue
    ia=$(site_index "$a")
    ib=$(site_index "$b")
    [ "$ia" = "$j" ] || [ "$ib" = "$j" ] || continue
    for pair in "$ia $ib" "$ib $ia"; do
      read -r from to <<<"$pair"
      class=$((10 + from))
      if [ "$jitter_us" -gt 0 ]; then
        tc -n "$core" qdisc change dev "s$to" parent "1:$class" handle "$class:" netem \
          delay "$((rtt_us / 2 + jitter_us / 2))us" "$((jitter_us / 2))us" limit 100000
      else
        tc -n "$core" qdisc change dev "s$to" parent "1:$class" handle "$class:" netem delay "$((rtt_us / 2))us" \
          limit 100000
      fi
    done
  done <"$state/links"
}

# Starts the delay line in the router (once): the TUN device jt, policy routing that
# sends what a jittered site's rules (below) pick into it, and meridian-delayline.
delayline_start() {
  if [ -f "$state/delayline.pid" ] && kill -0 "$(cat "$state/delayline.pid")" 2>/dev/null; then return 0; fi
  local dl
  dl=$(dirname "$(cat "$state/bin")")/meridian-delayline
  [ -x "$dl" ] || die "jitter: this kernel has no netem, and $dl is not built (cmake --build --preset dev)"
  ip -n "$core" tuntap add dev jt mode tun
  ip -n "$core" link set jt up
  # What the line writes back keeps its source (a site's, or the router's own).
  ip netns exec "$core" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.jt.rp_filter=0 \
    net.ipv4.conf.jt.accept_local=1
  # Early demux would match a site's packet to the router's own socket before the
  # routing below sends it through the line, and forwarding drops such a packet.
  ip netns exec "$core" sysctl -qw net.ipv4.tcp_early_demux=0 net.ipv4.udp_early_demux=0
  ip -n "$core" route add default dev jt table 100
  # Back from the line: routed as usual. The local table moves below the sites'
  # rules, so that packets from a jittered site to the router go through the line too.
  ip -n "$core" rule add pref 10 iif jt lookup local
  ip -n "$core" rule add pref 11 iif jt lookup main
  ip -n "$core" rule add pref 1000 lookup local
  ip -n "$core" rule del pref 0 lookup local
  : >"$state/jitter"
  ip netns exec "$core" "$dl" --tun jt --rules "$state/jitter" --stats "$state/delayline.json" \
    >"$state/delayline.log" 2>&1 </dev/null &
  echo $! >"$state/delayline.pid"
  disown
  for _ in $(seq 1 50); do
    grep -q "delay line on jt" "$state/delayline.log" 2>/dev/null && return 0
    kill -0 "$(cat "$state/delayline.pid")" 2>/dev/null || break
    sleep 0.1
  done
  die "jitter: meridian-delayline did not start: $(tail -3 "$state/delayline.log")"
}

# Site index $1's line in the delay line's rules: "$2" (empty: none). The line reads
# the file again within 0.1 s of a change (a rename).
delayline_rule() {
  local j=$1 rule=$2
  { grep -v "^10\.200\.$j\.0/24 " "$state/jitter" || true; [ -z "$rule" ] || echo "$rule"; } >"$state/jitter.new"
  mv "$state/jitter.new" "$state/jitter"
  sleep 0.3
}

# Routes site index $1's packets through the line (on) or not (off).
delayline_route() {
  local j=$1 how=$2
  if [ "$how" = on ]; then
    ip -n "$core" rule show pref 100 | grep -q "iif s$j " && return 0
    # The router's own address on the site's link stays local: ARP asks for it.
    ip -n "$core" rule add pref 99 to "10.200.$j.1" lookup local
    ip -n "$core" rule add pref 100 iif "s$j" lookup 100
    ip -n "$core" rule add pref 101 to "10.200.$j.0/24" lookup 100
  else
    ip -n "$core" rule del pref 99 to "10.200.$j.1" lookup local 2>/dev/null || true
    ip -n "$core" rule del pref 100 iif "s$j" lookup 100 2>/dev/null || true
    ip -n "$core" rule del pref 101 to "10.200.$j.0/24" lookup 100 2>/dev/null || true
  fi
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
    echo "$links" >"$state/links"
    realpath "$meridian" >"$state/bin"
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
    if [ "$cmd" = heal ]; then  # and no jitter
      if [ "$(cat "$state/latency")" = netem ]; then
        netem_jitter "$j" 0
      elif [ -f "$state/jitter" ]; then
        delayline_route "$j" off
        delayline_rule "$j" ""
      fi
    fi
    echo "netsim: $site: ${rule:-whole again}"
    ;;
  jitter)
    need_root
    site=${args[0]:-}
    ms=${args[1]:-}
    [ -n "$site" ] || die "jitter: which site?"
    [[ "$ms" =~ ^[0-9]+$ ]] && [ "$ms" -ge 1 ] && [ "$ms" -le 10000 ] || die "jitter: milliseconds, 1 to 10000"
    j=$(site_index "$site")
    if [ "$(cat "$state/latency")" = netem ]; then
      netem_jitter "$j" $((ms * 1000))
      echo "netsim: $site: jitter 0 to $ms ms each way on its links to other sites (netem)"
    else
      delayline_start
      delayline_rule "$j" "10.200.$j.0/24 0ms ${ms}ms"
      delayline_route "$j" on
      echo "netsim: $site: jitter 0 to $ms ms each way on its packets (meridian-delayline: this kernel has no netem)"
    fi
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
    if [ -s "$state/jitter" ]; then
      sed 's/^/  jitter (delay line): /' "$state/jitter"
      [ -f "$state/delayline.json" ] && echo "  delay line: $(cat "$state/delayline.json")"
    fi
    ;;
  *) die "unknown command '$cmd' (up, down, cut, loss, jitter, heal, bytes, exec, show)" ;;
esac
