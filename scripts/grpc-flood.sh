#!/usr/bin/env bash
# Unauthenticated gRPC flood (not in CI): on a one-node local cluster, C TLS connections
# to the coordinator's API with no client certificate each open S calls, each
# announcing a 16 MB message, and send their bodies as fast as the server lets them,
# never the last byte. It runs once at AdminService.ListTokens and once at
# NodeService.Join (with no join token in its headers). Meanwhile `meridian status` is
# run every 2 s. Every call must be refused at its headers (its stream reset), the
# coordinator's resident memory must grow by less than 64 MB, and every status must
# answer. Before calls were looked at as their headers arrived, 40 such calls took a
# coordinator from 36 MB to 687 MB.
#   scripts/grpc-flood.sh [C] [S] [SECONDS]   (defaults 4, 40, 15; MERIDIAN_BIN=... for another build)
set -euo pipefail
cd "$(dirname "$0")/.."

connections="${1:-4}"
streams="${2:-40}"
seconds="${3:-15}"
bin="${MERIDIAN_BIN:-build/release/meridian}"
if [ ! -x "$bin" ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release
fi
dir=$(mktemp -d /tmp/meridian-flood-XXXXXX)  # mktemp fills in the Xs
chmod 711 "$dir"
trap '"$bin" down --dir "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$bin" up --dir "$dir" --fleet tests/fleets/one-node.yaml --gateways none >"$dir/up.out" 2>&1 ||
  { cat "$dir/up.out"; exit 1; }
address=$(cat "$dir/coordinator.addr")
pid=$(cat "$dir/pids/coordinator.pid")
rss() { awk '/^VmRSS/ {print int($2 / 1024)}' "/proc/$pid/status"; }
echo "coordinator $address (pid $pid): $connections connections x $streams calls x 16 MB, ${seconds}s per method"
verdict=PASS
for method in /meridian.v1.AdminService/ListTokens /meridian.v1.NodeService/Join; do
  before=$(rss)
  python3 - "${address%:*}" "${address##*:}" "$connections" "$streams" "$seconds" "$method" >"$dir/flood.out" <<'PY' &
import socket, ssl, struct, sys, time
host, port, conns, streams, seconds, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
announce = 16_000_000

def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload

def literal(name, value):  # HPACK: not indexed, a literal name (lengths < 127)
    return b"\x00" + bytes([len(name)]) + name.encode() + bytes([len(value)]) + value.encode()

headers = b"".join(literal(n, v) for n, v in ((":method", "POST"), (":scheme", "https"), (":path", path),
                                               (":authority", host), ("content-type", "application/grpc"),
                                               ("te", "trailers")))
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.set_alpn_protocols(["h2"])

class Connection:
    def __init__(self):
        self.s = ctx.wrap_socket(socket.create_connection((host, port)))
        self.buf, self.sent, self.answers, self.resets, self.closed = b"", 0, 0, 0, False
        self.conn_window, self.initial = 65535, 65535
        self.window, self.left = {}, {}
        self.s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
        for i in range(streams):
            self.s.sendall(frame(1, 4, 1 + 2 * i, headers))
            self.window[1 + 2 * i], self.left[1 + 2 * i] = 0, announce + 5

    def pump(self):
        self.s.setblocking(False)
        try:
            while True:
                data = self.s.recv(65536)
                if not data:
                    self.closed = True
                    break
                self.buf += data
        except (ssl.SSLWantReadError, BlockingIOError):
            pass
        except OSError:
            self.closed = True
        self.s.setblocking(True)
        while len(self.buf) >= 9:
            length, kind, flags = int.from_bytes(self.buf[:3], "big"), self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            if len(self.buf) < 9 + length:
                break
            payload, self.buf = self.buf[9:9 + length], self.buf[9 + length:]
            if kind == 4 and not flags & 1:
                for at in range(0, len(payload), 6):
                    ident, value = struct.unpack(">HI", payload[at:at + 6])
                    if ident == 4:
                        self.initial = value
                self.s.sendall(frame(4, 1, 0, b""))
            elif kind == 8:
                more = struct.unpack(">I", payload)[0] & 0x7FFFFFFF
                if stream == 0:
                    self.conn_window += more
                elif stream in self.window:
                    self.window[stream] += more
            elif kind == 6 and not flags & 1:
                self.s.sendall(frame(6, 1, 0, payload))
            elif kind == 1:
                self.answers += 1
            elif kind == 3:
                self.resets += 1
                self.window.pop(stream, None)
                self.left.pop(stream, None)
            elif kind == 7:
                self.closed = True
        for stream in list(self.left):
            n = min(self.window[stream] + self.initial, self.conn_window, self.left[stream] - 1, 16384)
            if n <= 0:
                continue
            body = (b"\x00" + struct.pack(">I", announce) if self.left[stream] == announce + 5 else b"") + b"x" * n
            self.s.sendall(frame(0, 0, stream, body[:n]))
            self.window[stream] -= n
            self.conn_window -= n
            self.left[stream] -= n
            self.sent += n

cs = [Connection() for _ in range(conns)]
end = time.time() + seconds
while time.time() < end:
    for c in cs:
        if not c.closed:
            c.pump()
    time.sleep(0.005)
print(sum(c.sent for c in cs) / 2**20, sum(c.answers for c in cs), sum(c.resets for c in cs),
      sum(c.closed for c in cs))
PY
  flood=$!
  worst=0
  for _ in $(seq 1 $((seconds / 2))); do
    sleep 2
    start=$(date +%s%N)
    if "$bin" status --dir "$dir" >/dev/null 2>&1; then
      ms=$((($(date +%s%N) - start) / 1000000))
      [ "$ms" -gt "$worst" ] && worst=$ms
    else
      echo "  meridian status failed during the flood"
      verdict=FAIL
    fi
  done
  wait "$flood"
  after=$(rss)
  read -r sent answers resets closed <"$dir/flood.out"
  calls=$((connections * streams))
  printf '%s: %.1f MiB of messages sent; %d of %d calls answered, %d reset; %d of %d connections closed; coordinator %d -> %d MB; slowest status %d ms\n' \
    "$method" "$sent" "$answers" "$calls" "$resets" "$closed" "$connections" "$before" "$after" "$worst"
  if [ "$resets" -ne "$calls" ] || [ $((after - before)) -ge 64 ]; then verdict=FAIL; fi
done
echo "$verdict"
[ "$verdict" = PASS ]
