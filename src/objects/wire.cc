#include "objects/wire.h"

#include <cstring>

#include <fmt/format.h>

namespace meridian::objects::wire {
namespace {

template <typename T>
StatusOr<T> Load(std::string_view bytes, std::string_view what) {
  if (bytes.size() != sizeof(T)) {
    return InvalidArgumentError(fmt::format("a {} is {} bytes, got {}", what, sizeof(T), bytes.size()));
  }
  T out;
  std::memcpy(&out, bytes.data(), sizeof(T));
  return out;
}

}  // namespace

StatusOr<Request> DecodeRequest(std::string_view bytes) {
  MERIDIAN_ASSIGN_OR_RETURN(Request r, Load<Request>(bytes, "request header"));
  if (r.magic != kMagic) return InvalidArgumentError("not Meridian's transfer protocol (bad magic)");
  if (r.version != kVersion) {
    return InvalidArgumentError(fmt::format("transfer protocol version {}, this side speaks {}", r.version, kVersion));
  }
  if (r.op != kOpStat && r.op != kOpFetch && r.op != kOpPut && r.op != kOpFetchBatch && r.op != kOpTicket) {
    return InvalidArgumentError(fmt::format("unknown op {}", r.op));
  }
  if (r.site_length > kMaxSite) {
    return InvalidArgumentError(fmt::format("a site name of {} bytes; at most {}", r.site_length, kMaxSite));
  }
  if (r.op == kOpPut && r.length > kMaxObjectBytes) {
    return InvalidArgumentError(fmt::format("a put of {} bytes; objects are at most {}", r.length, kMaxObjectBytes));
  }
  if (r.op == kOpFetchBatch && (r.length == 0 || r.length > kMaxBatchObjects)) {
    return InvalidArgumentError(fmt::format("a batch of {} objects; 1 to {}", r.length, kMaxBatchObjects));
  }
  if (r.op == kOpTicket && (r.length == 0 || r.length > kMaxTicketLength)) {
    return InvalidArgumentError(fmt::format("a ticket of {} bytes; 1 to {}", r.length, kMaxTicketLength));
  }
  return r;
}

Status CheckSite(std::string_view site) {
  for (char c : site) {
    if (c <= ' ' || c > '~') return InvalidArgumentError("a site name with a space or a byte that is not printable ASCII");
  }
  return OkStatus();
}

StatusOr<Response> DecodeResponse(std::string_view bytes) {
  MERIDIAN_ASSIGN_OR_RETURN(Response r, Load<Response>(bytes, "response header"));
  if (r.magic != kMagic) return DataLossError("the peer does not speak Meridian's transfer protocol");
  if (r.size > kMaxObjectBytes) {
    return DataLossError(fmt::format("the peer announces {} bytes; objects are at most {}", r.size, kMaxObjectBytes));
  }
  return r;
}

StatusOr<ChunkHeader> DecodeChunk(std::string_view bytes, uint64_t next, uint64_t want) {
  MERIDIAN_ASSIGN_OR_RETURN(ChunkHeader h, Load<ChunkHeader>(bytes, "chunk header"));
  if (h.offset != next || h.length != want) {
    return DataLossError(fmt::format("chunk {}+{} where {}+{} was due", h.offset, h.length, next, want));
  }
  return h;
}

}  // namespace meridian::objects::wire
