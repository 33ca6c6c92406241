#include "http/client.h"

#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/strings.h"

namespace meridian::http {
namespace {

bool HeaderIs(std::string_view line, std::string_view name, std::string_view* value) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(line[i])) != std::tolower(static_cast<unsigned char>(name[i]))) {
      return false;
    }
  }
  std::string_view v = line.substr(name.size() + 1);
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  *value = v;
  return true;
}

// Breaks a connection (shutdown(2) on its socket) if it is still in use at a deadline:
// a per-read timeout alone lets a server that sends a byte now and then hold its
// reader for as long as it likes. It holds a duplicate of the socket, so it never
// acts on a descriptor that has been closed and reused.
class Deadline {
 public:
  Deadline(int fd, int64_t timeout_us) : fd_(dup(fd)) {
    if (fd_ < 0) return;
    const auto at = std::chrono::steady_clock::now() + std::chrono::microseconds(timeout_us);
    thread_ = std::thread([this, at] {
      std::unique_lock lock(mu_);
      if (!cv_.wait_until(lock, at, [&] { return done_; })) {
        fired_ = true;
        shutdown(fd_, SHUT_RDWR);
      }
    });
  }
  ~Deadline() {
    if (thread_.joinable()) {
      {
        std::lock_guard lock(mu_);
        done_ = true;
      }
      cv_.notify_all();
      thread_.join();
    }
    if (fd_ >= 0) close(fd_);
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  bool fired() {
    std::lock_guard lock(mu_);
    return fired_;
  }

 private:
  const int fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;   // GUARDED_BY(mu_)
  bool fired_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace

StatusOr<Response> Get(ByteStream& stream, const std::string& host, const std::string& path, size_t max_body) {
  const std::string request =
      fmt::format("GET {} HTTP/1.1\r\nHost: {}\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n", path, host);
  MERIDIAN_RETURN_IF_ERROR(stream.WriteAll(request.data(), request.size()));
  // The head, a byte at a time: it is small, and nothing past it may be consumed.
  std::string head;
  while (head.size() < 4 || head.compare(head.size() - 4, 4, "\r\n\r\n") != 0) {
    if (head.size() >= kMaxHeaderBytes) {
      return DataLossError(fmt::format("{}: the answer's headers pass {} bytes", stream.peer(), kMaxHeaderBytes));
    }
    char c = 0;
    MERIDIAN_RETURN_IF_ERROR(stream.ReadExact(&c, 1));
    head += c;
  }
  std::string_view rest(head);
  const size_t eol = rest.find("\r\n");
  const std::string_view status_line = rest.substr(0, eol);
  rest.remove_prefix(eol + 2);
  Response out;
  int status = 0;
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12 ||
      std::from_chars(status_line.data() + 9, status_line.data() + 12, status).ec != std::errc() || status < 100 ||
      status > 599) {
    return DataLossError(fmt::format("{}: not an HTTP answer: {:?}", stream.peer(), status_line.substr(0, 80)));
  }
  out.status = status;
  out.content_type.clear();
  int64_t length = -1;
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 2);
    std::string_view value;
    if (HeaderIs(line, "Content-Length", &value)) {
      if (std::from_chars(value.data(), value.data() + value.size(), length).ec != std::errc() || length < 0) {
        return DataLossError(fmt::format("{}: a bad Content-Length {:?}", stream.peer(), value));
      }
    } else if (HeaderIs(line, "Content-Type", &value)) {
      out.content_type = std::string(value);
    } else if (HeaderIs(line, "Transfer-Encoding", &value)) {
      return DataLossError(fmt::format("{}: a body of Transfer-Encoding {:?}; expected a Content-Length", stream.peer(),
                                       value));
    }
  }
  if (length < 0) return DataLossError(fmt::format("{}: the answer has no Content-Length", stream.peer()));
  if (static_cast<uint64_t>(length) > max_body) {
    return DataLossError(fmt::format("{}: an answer of {} bytes, more than the {} allowed", stream.peer(), length,
                                     max_body));
  }
  out.body.resize(static_cast<size_t>(length));
  MERIDIAN_RETURN_IF_ERROR(stream.ReadExact(out.body.data(), out.body.size()));
  return out;
}

StatusOr<Response> GetUrl(const std::string& url, const security::TlsContext* tls, const std::string& identity,
                          const std::string& default_path, size_t max_body, int64_t timeout_us) {
  const bool https = url.rfind("https://", 0) == 0;
  if (!https && url.rfind("http://", 0) != 0) {
    return InvalidArgumentError(fmt::format("'{}': expected https://HOST:PORT/PATH (or http://)", url));
  }
  if (https != (tls != nullptr)) {
    return InvalidArgumentError(fmt::format("'{}' is {}: {}", url, https ? "https" : "http",
                                            https ? "TLS credentials are needed" : "TLS was asked for"));
  }
  const std::string rest = url.substr(url.find("://") + 3);
  const size_t slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? default_path : rest.substr(slash);
  const size_t colon = hostport.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      std::from_chars(hostport.data() + colon + 1, hostport.data() + hostport.size(), port).ec != std::errc() ||
      port < 1 || port > 65535) {
    return InvalidArgumentError(fmt::format("'{}': the address needs a port (HOST:PORT)", url));
  }
  std::string host = hostport.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  MERIDIAN_ASSIGN_OR_RETURN(std::unique_ptr<TcpStream> tcp, TcpStream::Connect(host, port, timeout_us));
  MERIDIAN_RETURN_IF_ERROR(tcp->SetTimeout(timeout_us));
  // The handshake, the request and the whole answer within timeout_us.
  Deadline deadline(tcp->fd(), timeout_us);
  StatusOr<Response> got = [&]() -> StatusOr<Response> {
    std::unique_ptr<ByteStream> stream;
    if (tls != nullptr) {
      StatusOr<std::unique_ptr<ByteStream>> connected = tls->Connect(std::move(tcp), identity);
      if (!connected.ok()) return connected.status().WithPrefix(url);
      stream = std::move(*connected);
    } else {
      stream = std::move(tcp);
    }
    return Get(*stream, hostport, path, max_body);
  }();
  if (!got.ok() && deadline.fired()) {
    return DeadlineExceededError(
        fmt::format("{}: no whole answer within {} ms ({})", url, timeout_us / 1000, got.status().message()));
  }
  return got;
}

}  // namespace meridian::http
