// One HTTP/1.1 GET over a stream the caller connected (plain TCP, or TLS through
// security::TlsContext, which proves the server's identity its own way: a node's
// certificate names the node, not a host). What the coordinator uses to read its
// agents' /metrics for a scraper (coordinator/http_api.h).
//
// Bounds: the status line and headers at most kMaxHeaderBytes, the body at most the
// caller's `max_body` (and announced by Content-Length, as cpp-httplib's server does).
#pragma once

#include <string>

#include "common/net.h"
#include "common/status.h"
#include "http/server.h"
#include "security/tls.h"

namespace meridian::http {

inline constexpr size_t kMaxHeaderBytes = 16 << 10;

// Sends GET `path` with "Host: `host`" on `stream`, reads the answer (status, its
// Content-Type and body). Errors: kUnavailable (the stream failed), kDataLoss (not an
// HTTP answer, or none within the bounds).
StatusOr<Response> Get(ByteStream& stream, const std::string& host, const std::string& path, size_t max_body);

// GETs `url` ("https://HOST:PORT/PATH", or "http://..."; without a path,
// `default_path`) on a connection of its own: connecting within `timeout_us`, then the
// handshake, the request and the whole answer within `timeout_us` more (a server
// that sends its answer a byte at a time is cut off: kDeadlineExceeded). An https
// URL needs `tls`, and the server must prove the certificate of `identity`
// ("coordinator", "node:NAME": certificates name identities, not hosts); an http one
// takes none. Errors: kInvalidArgument (a malformed URL, or TLS that does not match its
// scheme), kUnauthenticated (another identity answered), and Get's.
StatusOr<Response> GetUrl(const std::string& url, const security::TlsContext* tls, const std::string& identity,
                          const std::string& default_path, size_t max_body, int64_t timeout_us);

}  // namespace meridian::http
