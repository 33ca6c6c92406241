// POSIX sockets behind common/net.h.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/net.h"

namespace meridian {
namespace {

std::string Errno(std::string_view what) { return fmt::format("{}: {}", what, std::strerror(errno)); }

void Tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string Describe(const sockaddr* a) {
  if (a->sa_family == AF_UNIX) return "local";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  socklen_t len = a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(a, len, host, sizeof(host), port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0) return "?";
  return fmt::format("{}:{}", host, port);
}

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

Status Resolve(const std::string& host, int port, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out.list);
  if (rc != 0) return UnavailableError(fmt::format("cannot resolve {}: {}", host, gai_strerror(rc)));
  return OkStatus();
}

// The address of the abstract Unix socket `name`.
StatusOr<std::pair<sockaddr_un, socklen_t>> LocalAddress(std::string_view name) {
  sockaddr_un a{};
  if (name.empty() || name.size() > 100) {
    return InvalidArgumentError(fmt::format("a local socket's name has 1 to 100 bytes, not {}", name.size()));
  }
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  return std::make_pair(a, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size()));
}

}  // namespace

StatusOr<std::string> ResolveNumeric(const std::string& host, int port) {
  AddrInfo ai;
  MERIDIAN_RETURN_IF_ERROR(Resolve(host, port, false, ai));
  const addrinfo* a = ai.list;
  // An IPv4 address where the host has one: the first of the list otherwise.
  for (const addrinfo* p = ai.list; p != nullptr; p = p->ai_next) {
    if (p->ai_family == AF_INET) {
      a = p;
      break;
    }
  }
  char text[NI_MAXHOST];
  if (getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) {
    return UnavailableError("cannot resolve " + host);
  }
  return a->ai_family == AF_INET6 ? fmt::format("[{}]:{}", text, port) : fmt::format("{}:{}", text, port);
}

StatusOr<std::unique_ptr<TcpStream>> TcpStream::Connect(const std::string& host, int port, int64_t timeout_us) {
  AddrInfo ai;
  MERIDIAN_RETURN_IF_ERROR(Resolve(host, port, false, ai));
  std::string last = "no address";
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last = Errno("socket");
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int waited = poll(&p, 1, static_cast<int>(std::max<int64_t>(1, timeout_us / 1000)));
      int err = 0;
      socklen_t len = sizeof(err);
      if (waited == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        rc = 0;
      } else {
        errno = waited == 0 ? ETIMEDOUT : err;
      }
    }
    if (rc != 0) {
      last = Errno(fmt::format("connect to {}:{}", host, port));
      close(fd);
      continue;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    Tune(fd);
    return std::make_unique<TcpStream>(fd);
  }
  return UnavailableError(last);
}

StatusOr<std::unique_ptr<TcpStream>> TcpStream::ConnectLocal(std::string_view name) {
  MERIDIAN_ASSIGN_OR_RETURN(auto address, LocalAddress(name));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(Errno("socket"));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address.first), address.second) != 0) {
    Status s = UnavailableError(Errno(fmt::format("connect to local socket {}", name)));
    close(fd);
    return s;
  }
  return std::make_unique<TcpStream>(fd);
}

TcpStream::TcpStream(int fd) : fd_(fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  peer_ = getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 ? Describe(reinterpret_cast<sockaddr*>(&a)) : "?";
}

TcpStream::~TcpStream() { close(fd_); }

Status TcpStream::WriteAll(std::span<const iovec> buffers) {
  std::vector<iovec> iov(buffers.begin(), buffers.end());
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = &iov[first];
    msg.msg_iovlen = iov.size() - first;
    ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(Errno(fmt::format("write to {}", peer_)));
    }
    size_t left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return OkStatus();
}

Status TcpStream::ReadExact(void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = recv(fd_, p, size, MSG_WAITALL);
    if (n == 0) return UnavailableError(fmt::format("{} closed the connection", peer_));
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError(Errno(fmt::format("read from {}", peer_)));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status TcpStream::SetTimeout(int64_t timeout_us) {
  timeval tv{static_cast<time_t>(timeout_us / 1'000'000), static_cast<suseconds_t>(timeout_us % 1'000'000)};
  if (setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
      setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
    return InternalError(Errno("setsockopt timeout"));
  }
  return OkStatus();
}

void TcpStream::Shutdown() { shutdown(fd_, SHUT_RDWR); }

StatusOr<std::unique_ptr<TcpListener>> TcpListener::Listen(const std::string& host, int port) {
  AddrInfo ai;
  MERIDIAN_RETURN_IF_ERROR(Resolve(host, port, true, ai));
  std::string last = "no address";
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = Errno("socket");
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
      last = Errno(fmt::format("listen on {}:{}", host, port));
      close(fd);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    int actual = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                             : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    return std::unique_ptr<TcpListener>(new TcpListener(fd, actual));
  }
  return UnavailableError(last);
}

StatusOr<std::unique_ptr<TcpListener>> TcpListener::ListenLocal(std::string_view name) {
  MERIDIAN_ASSIGN_OR_RETURN(auto address, LocalAddress(name));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(Errno("socket"));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address.first), address.second) != 0 || listen(fd, 128) != 0) {
    Status s = UnavailableError(Errno(fmt::format("listen on local socket {}", name)));
    close(fd);
    return s;
  }
  return std::unique_ptr<TcpListener>(new TcpListener(fd, 0));
}

TcpListener::~TcpListener() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<std::unique_ptr<TcpStream>> TcpListener::Accept() {
  while (true) {
    int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      Tune(fd);
      return std::make_unique<TcpStream>(fd);
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return UnavailableError(Errno("accept"));
  }
}

void TcpListener::Shutdown() { shutdown(fd_, SHUT_RDWR); }

namespace {

StatusOr<std::pair<std::string, int>> SplitAddress(const std::string& address, std::string_view what, int min_port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgumentError(fmt::format("{} '{}': expected host:port", what, address));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  for (char c : address.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) return InvalidArgumentError(fmt::format("{} '{}': bad port", what, address));
    port = port * 10 + (c - '0');
  }
  if (port < min_port || port > 65535) return InvalidArgumentError(fmt::format("{} '{}': bad port", what, address));
  return std::make_pair(host, port);
}

}  // namespace

StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address, std::string_view what) {
  return SplitAddress(address, what, 1);
}

StatusOr<std::pair<std::string, int>> SplitListenAddress(const std::string& address, std::string_view what) {
  return SplitAddress(address, what, 0);
}

std::string HostOfAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

ssize_t SendWithDescriptors(int socket, const void* data, size_t size, std::span<const int> fds) {
  iovec iov{const_cast<void*>(data), size};
  std::vector<char> control(CMSG_SPACE(fds.size_bytes()));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(fds.size_bytes());
  std::memcpy(CMSG_DATA(c), fds.data(), fds.size_bytes());
  ssize_t n;
  do {
    n = sendmsg(socket, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool SendAll(int socket, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = send(socket, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace meridian
