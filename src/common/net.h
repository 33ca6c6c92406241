// Plain TCP for the bulk data path (object transfers), where gRPC's message copies
// would cost more than the network: a listener and a connected stream with blocking,
// all-or-error reads and writes. IPv4 and IPv6 host names and literals.
//
// Thread-safety: a TcpStream is used by one thread at a time, except Shutdown, which
// any thread may call to break a blocked read or write. A TcpListener's Accept may
// run on one thread while another calls Shutdown.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "common/status.h"

namespace meridian {

// A connected, ordered byte stream: a TcpStream, or a TLS session over one
// (security/tls.h). The transfer protocol speaks through this.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Writes every byte of all buffers, or fails (the peer closed, a reset, Shutdown).
  virtual Status WriteAll(std::span<const iovec> buffers) = 0;
  Status WriteAll(const void* data, size_t size) {
    iovec one{const_cast<void*>(data), size};
    return WriteAll(std::span<const iovec>(&one, 1));
  }
  // Reads exactly `size` bytes; an orderly close before that is an error too.
  virtual Status ReadExact(void* data, size_t size) = 0;
  // Blocked reads and writes fail after this long without progress (0: never).
  virtual Status SetTimeout(int64_t timeout_us) = 0;
  // Breaks the connection both ways; a blocked ReadExact/WriteAll returns an error.
  virtual void Shutdown() = 0;
  virtual std::string peer() const = 0;
  // Who the peer proved to be (a TLS certificate's name); empty on plain TCP.
  virtual std::string identity() const { return {}; }
};

// A connected stream socket: TCP, or a local one (an abstract Unix socket, between
// processes of one host and network namespace).
class TcpStream final : public ByteStream {
 public:
  // Connects to host:port, giving up after timeout_us.
  static StatusOr<std::unique_ptr<TcpStream>> Connect(const std::string& host, int port, int64_t timeout_us);
  // Connects to the local listener `name` (ListenLocal); fails at once when none
  // listens there.
  static StatusOr<std::unique_ptr<TcpStream>> ConnectLocal(std::string_view name);
  explicit TcpStream(int fd);
  ~TcpStream();
  TcpStream(const TcpStream&) = delete;
  TcpStream& operator=(const TcpStream&) = delete;

  using ByteStream::WriteAll;
  Status WriteAll(std::span<const iovec> buffers) override;
  Status ReadExact(void* data, size_t size) override;
  Status SetTimeout(int64_t timeout_us) override;
  void Shutdown() override;
  std::string peer() const override { return peer_; }
  // The socket, for a TLS session to run over (security/tls.h); still owned here.
  int fd() const { return fd_; }

 private:
  int fd_;
  std::string peer_;
};

// "host:port" (or "[v6]:port") split; `what` names the address in errors
// ("transfer address", "rank 2's address").
StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address, std::string_view what);
// The same for an address to listen on, where port 0 asks for a free one.
StatusOr<std::pair<std::string, int>> SplitListenAddress(const std::string& address, std::string_view what);
// The host part of an advertised "host:port", leniently ("[::1]:7000" gives "::1",
// "h" gives "h"); for addresses already checked when they were registered.
std::string HostOfAddress(const std::string& address);

// `host`'s address (an IPv4 one where it has one) with `port`, as "a.b.c.d:port" or
// "[v6]:port".
StatusOr<std::string> ResolveNumeric(const std::string& host, int port);

class TcpListener {
 public:
  // Listens on host:port; port 0 picks a free one (see port()).
  static StatusOr<std::unique_ptr<TcpListener>> Listen(const std::string& host, int port);
  // Listens on the abstract Unix socket `name` (at most 100 bytes), reachable from this
  // host's network namespace only; port() is 0. Anyone there may connect: the caller
  // authenticates its peers.
  static StatusOr<std::unique_ptr<TcpListener>> ListenLocal(std::string_view name);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // Waits for the next connection; an error once Shutdown was called.
  StatusOr<std::unique_ptr<TcpStream>> Accept();
  void Shutdown();
  int port() const { return port_; }
  // Hands the listening socket to an event loop (workloads/serving's HTTP server),
  // which closes it; this listener then owns nothing.
  int ReleaseFd() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  TcpListener(int fd, int port) : fd_(fd), port_(port) {}
  int fd_;
  int port_;
};

// Sends `size` bytes (at least one, to carry them) on a Unix socket with the
// descriptors `fds` attached (SCM_RIGHTS), retrying on EINTR, without SIGPIPE. Returns
// sendmsg's result: the bytes sent (perhaps fewer than `size`), or -1 with errno set.
ssize_t SendWithDescriptors(int socket, const void* data, size_t size, std::span<const int> fds);

// Sends every byte of `data` on a connected socket, retrying on EINTR and partial
// sends, without SIGPIPE; false when the socket fails or the peer closed.
bool SendAll(int socket, std::string_view data);

// Writes every byte of `data` to a descriptor (a file, a pipe), retrying on EINTR and
// partial writes; false (errno set) when a write fails.
bool WriteAll(int fd, std::string_view data);

}  // namespace meridian
