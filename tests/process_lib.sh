# Shared by the shell process tests (deploy, slurm, k8s): results, free ports, and
# stopping what a test started. Source it after making $tmp; add each background
# process's pid to `pids`; the test's EXIT trap calls stop_started.
fail=0
pids=()
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Stops the processes in `pids` and removes $tmp, unless KEEP is set (then says where).
stop_started() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "${KEEP:-}" ] || rm -rf "$tmp"; [ -z "${KEEP:-}" ] || echo "kept $tmp"
}
