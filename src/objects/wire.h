// The transfer protocol's frames and the checks every received frame passes before
// anything acts on it (docs/data-plane.md has the protocol). Kept apart from the
// sockets so that the decoders can be fuzzed (fuzz/).
//
// Thread-safety: pure functions and value types.
#pragma once

#include <bit>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "objects/object_id.h"

namespace meridian::objects::wire {

static_assert(std::endian::native == std::endian::little, "the transfer wire format is little-endian");

inline constexpr uint32_t kMagic = 0x5444524D;  // "MRDT"
inline constexpr uint16_t kVersion = 1;
inline constexpr uint16_t kOpStat = 1;
inline constexpr uint16_t kOpFetch = 2;
inline constexpr uint16_t kOpPut = 3;
// Several whole objects in one request: `length` ids of 16 bytes follow the site; the
// server answers each in turn as a fetch does (a response, then its chunks).
inline constexpr uint16_t kOpFetchBatch = 4;
inline constexpr uint64_t kMaxBatchObjects = 256;
// A ticket (objects/ticket.h) of `length` bytes follows the site; the server answers
// with a response: ok, or denied. What the ticket grants holds for the connection.
inline constexpr uint16_t kOpTicket = 5;
inline constexpr uint64_t kMaxTicketLength = 80 + 256 + 4096 * 16;  // security::kMaxTicketBytes
// kDenied: the peer's certificate is not a node's and no ticket on the connection
// allows the request (or its ticket was refused).
inline constexpr uint32_t kOk = 0, kNoObject = 1, kBadRequest = 2, kDamaged = 3, kDenied = 4;
inline constexpr uint64_t kMaxObjectBytes = uint64_t{64} << 30;  // larger announced sizes are refused
inline constexpr size_t kMaxSite = 256;

struct Request {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t op = 0;
  uint64_t id_high = 0;
  uint64_t id_low = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint16_t site_length = 0;
  uint8_t pad[6] = {};
};
static_assert(sizeof(Request) == 48);

struct Response {
  uint32_t magic = kMagic;
  uint32_t status = kOk;
  uint64_t size = 0;
};
static_assert(sizeof(Response) == 16);

struct ChunkHeader {
  uint64_t offset = 0;
  uint32_t length = 0;
  uint32_t pad = 0;
  uint64_t checksum = 0;
};
static_assert(sizeof(ChunkHeader) == 24);

// A request header as received (exactly sizeof(Request) bytes): our magic and version,
// a known op, a site name of at most kMaxSite bytes, for a put a size of at most
// kMaxObjectBytes, for a batch 1 to kMaxBatchObjects ids. kInvalidArgument names what
// is wrong.
StatusOr<Request> DecodeRequest(std::string_view bytes);
// The site a request names: printable ASCII, no spaces (it keys counters and logs).
Status CheckSite(std::string_view site);
// A response header (exactly sizeof(Response) bytes), with a size of at most
// kMaxObjectBytes; kDataLoss when the peer does not speak the protocol.
StatusOr<Response> DecodeResponse(std::string_view bytes);
// A chunk header (exactly sizeof(ChunkHeader) bytes) that is the chunk due: at `next`,
// `want` bytes long.
StatusOr<ChunkHeader> DecodeChunk(std::string_view bytes, uint64_t next, uint64_t want);

}  // namespace meridian::objects::wire
