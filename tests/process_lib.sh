# Shared by the shell process tests (cli, serve, deploy, slurm, k8s...): results, a
# command's exit and error line, free ports, and stopping what a test started. Source it after making $tmp; add each background
# process's pid to `pids`; the test's EXIT trap calls stop_started.
fail=0
pids=()
# Each result says when it came, in seconds since the test began: a test that ran long
# shows where its time went.
test_began=${EPOCHREALTIME/./}
since_began() { local t=$((${EPOCHREALTIME/./} - test_began)); printf "%d.%d s" $((t / 1000000)) $((t / 100000 % 10)); }
bad() { echo "FAIL [$(since_began)] $*"; fail=1; }
ok() { echo "ok   [$(since_began)] $*"; }
# Runs a command (stdout to $tmp/out, stderr to $tmp/err) and checks its exit code and,
# when it fails, that it said one line holding `stderr_substring`.
check() {  # name, want_rc, stderr_substring, command...
  local name=$1 want=$2 needle=$3
  shift 3
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne "$want" ]; then
    bad "$name: exit $rc, want $want"; cat "$tmp/err"; return
  fi
  if [ -n "$needle" ] && ! grep -qF -- "$needle" "$tmp/err"; then
    bad "$name: stderr lacks '$needle':"; cat "$tmp/err"; return
  fi
  if [ "$want" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
    bad "$name: expected one error line, got:"; cat "$tmp/err"; return
  fi
  ok "$name"
}
# Runs COMMAND until it succeeds, for at most SECONDS of wall time (a count of tries is
# no bound: under TSan on a loaded machine one `meridian` call took seconds); fails
# when the time is up.
wait_until() {  # seconds, command...
  local until=$((${EPOCHREALTIME/./} + $1 * 1000000))
  shift
  while :; do
    "$@" && return 0
    ((${EPOCHREALTIME/./} < until)) || return 1
    sleep 0.1
  done
}
# A port nothing listens on, for a process to listen on later: drawn below this host's
# range for outgoing connections (as replica_port_base's), where no other test's
# connect() can take it meanwhile; a port the kernel hands out (bind to 0) is in that
# range, free at the moment it is printed and maybe not a second later.
free_port() {
  local low=32768 high
  read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null
  python3 -c '
import random, socket, sys
low = int(sys.argv[1])
for _ in range(1000):
    port = random.randrange(20000, max(low, 21000))
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    sys.exit("no free port below %d" % low)
' "$low"
}
# A base port for a service's replicas (they listen on BASE to BASE+SPAN), at random
# below this host's range of ports for outgoing connections: a connection from one of
# those, once closed, holds its port for up to 60 s (TIME_WAIT) and a replica on it
# cannot listen meanwhile (service_fallback's replica 2, on an even port in that
# range, the parity connect() takes first, answered 17 s after it started while the
# test's requests came and went, each a new connection).
replica_port_base() {  # span
  local low=32768 high room
  read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null
  room=$((low - 20000 - $1))
  [ "$room" -ge 1000 ] || room=1000
  echo $((20000 + RANDOM % room))
}
# Waits up to 30 s until something listens on 127.0.0.1:PORT (gRPC's socket is dual-stack:
# ss shows it as [::ffff:127.0.0.1]:PORT). A file a process writes
# on its way up (the coordinator's admin token) is not the sign that it listens: under
# TSan the token appeared a second before the port did.
wait_listening() {
  for _ in $(seq 1 300); do ss -ltn | grep -Eq "127\.0\.0\.1]?:$1 " && return 0; sleep 0.1; done
  return 1
}
# Starts a server (meridian replica, gateway) in the background, adds it to `pids`, and
# sets `port` to the one its first "listening on HOST:PORT" line names; exits the test
# when none comes within 10 s.
start_listening() {  # log, command...
  local log=$1
  shift
  "$@" >"$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    if grep -q "listening on" "$log"; then
      port=$(sed -n 's/.*listening on [0-9.]*:\([0-9]*\).*/\1/p' "$log" | head -1)
      return 0
    fi
    sleep 0.1
  done
  bad "no 'listening on' in $log:"; cat "$log"
  exit 1
}
# Checks that every thread of process PID blocks SIGINT and SIGTERM (bits 2 and 15 of
# /proc's SigBlk) or is waiting for them in sigwait (the kernel unblocks what a thread
# waits for while it waits: its wchan is do_sigtimedwait). A long-running command
# takes them in a thread of its own to stop gracefully; one delivered to a thread that
# did not block them ends the process at once with the default action (exit 143)
# instead. Prints the threads that neither block nor wait; fails when there are any,
# or no thread at all.
# The mask and the wait are read one after the other, and a thread that waits with a
# timeout in a loop (a gateway's main thread, between its ticks) may wake in between: its
# mask read while it waited (the waited signals unblocked) beside a wchan read after. So
# a thread is judged on up to 20 readings 10 ms apart, and passes on the first that
# shows it blocking or waiting; one that does neither never shows either.
termination_signals_blocked() {  # pid
  local task mask unblocked="" n=0 waiting=0 try state
  for task in /proc/"$1"/task/*; do
    state=unblocked
    for try in $(seq 20); do
      if [[ "$(cat "$task/wchan" 2>/dev/null)" == do_sigtimedwait* ]]; then
        state=waiting
        break
      fi
      mask=$(awk '/^SigBlk:/ {print $2}' "$task/status" 2>/dev/null)
      [ -n "$mask" ] || { state=gone; break; }
      (((16#$mask & 0x4002) == 0x4002)) && { state=blocked; break; }
      sleep 0.01
    done
    [ "$state" = gone ] && continue  # ended meanwhile
    n=$((n + 1))
    case $state in
      waiting) waiting=$((waiting + 1)) ;;
      unblocked) unblocked+="$(awk '/^Name:/ {print $2}' "$task/status")(SigBlk=$mask) " ;;
    esac
  done
  [ "$n" -gt 0 ] || { echo "no threads of pid $1"; return 1; }
  [ -z "$unblocked" ] || { echo "$unblocked"; return 1; }
  echo "$n threads, $waiting waiting for them"
}
# When ctest's timeout ends a test it kills the test's whole process group with
# SIGKILL: the EXIT trap does not run, and the cluster, replicas and gateways it
# started (daemons of their own sessions) would go on running and load the tests after
# it (a TSan cluster test timed out in CI and left its coordinator at a third of a
# core). `guard_cleanup CLEANUP` starts a guard that waits for this
# shell to end; if it ends without its trap having stopped the guard (stop_started
# does), the guard runs CLEANUP (the test's own trap function, as it was when the
# guard started), kills what the test started since, and removes $tmp (unless KEEP
# is set, as stop_started does). What the test started is what it ran (its
# environment holds MERIDIAN_TEST_TMP: the cluster's daemons, the servers and clients
# it started), its own subshells in the background (their command line is the
# test's: a loop of requests would otherwise go on for ever), and anything naming $tmp.
# The guard leads a process group of its own (set -m) and is left to init (the
# subshell that starts it ends at once): one in the test's group died with it.
guard=""
guard_cleanup() {  # function...
  local shell=$$
  export MERIDIAN_TEST_TMP=$tmp
  guard=$(set -m; _guard_body "$shell" "$@" </dev/null >/dev/null 2>&1 & echo $!)
}
_guard_body() {  # shell, function...
  local shell=$1
  shift
  {
    trap '' INT TERM HUP
    exec </dev/null >/dev/null 2>&1
    test_cmdline=$(tr '\0' '\1' </proc/$shell/cmdline)
    while kill -0 "$shell" 2>/dev/null; do sleep 1; done
    "$@"
    for d in /proc/[0-9]*; do
      p=${d#/proc/}
      [ "$p" != "$BASHPID" ] || continue
      if grep -qzxF -- "MERIDIAN_TEST_TMP=$tmp" "$d/environ" 2>/dev/null ||
        [ "$(tr '\0' '\1' <"$d/cmdline" 2>/dev/null)" = "$test_cmdline" ]; then
        kill -KILL "$p" 2>/dev/null
      fi
    done
    pkill -KILL -f -- "$tmp"
    [ -n "${KEEP:-}" ] || rm -rf "$tmp"
  }
}
# ctest's TIMEOUT kills a test with SIGKILL: its EXIT trap never prints what it would
# (the cluster's logs), and the output ends with the last check that passed, whatever
# hung after it (service_fallback timed out twice in CI with nothing to show why).
# `test_budget SECONDS` (SECONDS under the test's TIMEOUT, leaving room for the trap)
# makes the test fail at that point instead, naming how long it ran, and its EXIT trap
# prints what it has. The timer's output goes nowhere: ctest waits for every process
# holding the test's output to end.
test_budget() {  # seconds
  local shell=$$
  (
    exec </dev/null >/dev/null 2>&1
    trap 'kill "$timer" 2>/dev/null; exit 0' TERM
    sleep "$1" &
    timer=$!
    wait "$timer" && kill -USR1 "$shell"
  ) &
  pids+=($!)
  trap "bad \"ran past its budget of $1 s (it ends before ctest's timeout kills it, so that what it started and logged is shown)\"; exit 1" USR1
}
# Stops the processes in `pids` and removes $tmp, unless KEEP is set (then says where).
stop_started() {
  if [ -n "$guard" ]; then kill -KILL "$guard" 2>/dev/null; guard=""; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${KEEP:-}" ] || rm -rf "$tmp"; [ -z "${KEEP:-}" ] || echo "kept $tmp"
}
