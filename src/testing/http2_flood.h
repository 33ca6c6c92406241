// For a test acting as a hostile gRPC client: one HTTP/2 connection that opens
// `streams` calls of a method, each announcing a message of `announce` bytes, and
// sends their bodies as fast as the server's flow control lets it, never the last
// byte, so that no call's message ever arrives whole. What the server took in, and
// how it answered (headers, resets), is counted.
//
// The connection is the caller's, as an Io: non-blocking reads and writes that
// return -1 with errno EAGAIN when they would block (plain TCP, or TLS with ALPN
// "h2" over it).
//
// Thread-safety: none; one thread pumps it.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace meridian::testing {

struct Http2Io {
  std::function<long(char* data, size_t size)> read;         // 0: the peer closed
  std::function<long(const char* data, size_t size)> write;  // what it took
};

class Http2MessageFlood {
 public:
  Http2MessageFlood(Http2Io io, const std::string& path, int streams, uint32_t announce) : io_(std::move(io)) {
    out_ = std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + Frame(4, 0, 0, "");
    std::string headers;
    for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
             {":method", "POST"}, {":scheme", "https"}, {":path", path}, {":authority", "a"},
             {"content-type", "application/grpc"}, {"te", "trailers"}}) {
      // HPACK: a literal field, not indexed, its name a literal too (lengths < 127).
      headers += '\0';
      headers += static_cast<char>(name.size());
      headers += name;
      headers += static_cast<char>(value.size());
      headers += value;
    }
    for (int i = 0; i < streams; ++i) {
      const uint32_t id = 1 + 2 * static_cast<uint32_t>(i);
      out_ += Frame(1, 4, id, headers);  // END_HEADERS
      Stream& s = streams_[id];
      s.left = int64_t{announce} + 5;
      s.prefix = std::string(1, '\0') + BigEndian32(announce);  // not compressed; the length
    }
  }

  // Reads what the server sent and sends what it may now.
  void Pump() {
    if (closed_) return;
    char buf[1 << 16];
    for (;;) {
      const long n = io_.read(buf, sizeof(buf));
      if (n > 0) {
        in_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed_ = true;
      break;
    }
    Parse();
    while (!closed_ && Flush()) {
      bool more = false;
      for (auto& [id, s] : streams_) {
        const int64_t window = std::min(s.window + initial_window_, connection_window_);
        const int64_t n = std::min<int64_t>({window, s.left - 1, 16384});
        if (n <= 0) continue;
        std::string body = s.prefix.substr(0, static_cast<size_t>(n));
        s.prefix.erase(0, body.size());
        body.resize(static_cast<size_t>(n), 'x');
        out_ += Frame(0, 0, id, body);
        s.window -= n;
        connection_window_ -= n;
        s.left -= n;
        queued_body_ += n;
        more = true;
      }
      if (!more) break;
    }
  }

  int64_t body_bytes_sent() const { return sent_; }  // of the messages, taken by the connection
  int headers_received() const { return headers_; }   // answers (a refusal is headers alone)
  int resets_received() const { return resets_; }     // RST_STREAM
  bool closed() const { return closed_; }             // GOAWAY, or the connection ended

 private:
  struct Stream {
    int64_t left = 0;    // body bytes still to send (the last never is)
    int64_t window = 0;  // granted beyond the initial window
    std::string prefix;  // what of gRPC's 5-byte prefix is still to send
  };

  static std::string BigEndian32(uint32_t v) {
    return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
  }
  static uint32_t Read32(const std::string& s, size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(s[at + i]);
    return v;
  }
  static std::string Frame(int type, int flags, uint32_t stream, const std::string& payload) {
    std::string f = BigEndian32(static_cast<uint32_t>(payload.size())).substr(1);
    f += static_cast<char>(type);
    f += static_cast<char>(flags);
    f += BigEndian32(stream);
    return f + payload;
  }

  void Parse() {
    while (in_.size() >= 9) {
      const size_t length = Read32(in_, 0) >> 8;
      if (in_.size() < 9 + length) return;
      const int type = static_cast<unsigned char>(in_[3]);
      const int flags = static_cast<unsigned char>(in_[4]);
      const uint32_t id = Read32(in_, 5) & 0x7fffffff;
      const std::string payload = in_.substr(9, length);
      in_.erase(0, 9 + length);
      if (type == 4 && (flags & 1) == 0) {  // SETTINGS: the initial window; acknowledged
        for (size_t at = 0; at + 6 <= payload.size(); at += 6) {
          if ((static_cast<unsigned char>(payload[at]) << 8 | static_cast<unsigned char>(payload[at + 1])) == 4) {
            initial_window_ = Read32(payload, at + 2);
          }
        }
        out_ += Frame(4, 1, 0, "");
      } else if (type == 8 && payload.size() == 4) {  // WINDOW_UPDATE
        const int64_t more = Read32(payload, 0) & 0x7fffffff;
        if (id == 0) {
          connection_window_ += more;
        } else if (auto it = streams_.find(id); it != streams_.end()) {
          it->second.window += more;
        }
      } else if (type == 6 && (flags & 1) == 0) {  // PING
        out_ += Frame(6, 1, 0, payload);
      } else if (type == 1) {  // HEADERS
        ++headers_;
      } else if (type == 3) {  // RST_STREAM
        ++resets_;
        streams_.erase(id);
      } else if (type == 7) {  // GOAWAY
        closed_ = true;
      }
    }
  }

  // Sends what is queued; false while some of it waits.
  bool Flush() {
    while (!out_.empty()) {
      const long n = io_.write(out_.data(), out_.size());
      if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) closed_ = true;
        return false;
      }
      out_.erase(0, static_cast<size_t>(n));
    }
    sent_ += queued_body_;
    queued_body_ = 0;
    return true;
  }

  Http2Io io_;
  bool closed_ = false;
  std::string in_, out_;
  std::map<uint32_t, Stream> streams_;
  int64_t initial_window_ = 65'535;
  int64_t connection_window_ = 65'535;
  int64_t queued_body_ = 0;
  int64_t sent_ = 0;
  int headers_ = 0;
  int resets_ = 0;
};

}  // namespace meridian::testing
