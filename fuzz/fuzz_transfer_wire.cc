// The transfer protocol's frames as a hostile peer sends them: a request header as the
// server reads it, and a response and a chunk header as a fetch reads them. Whatever
// is accepted must be within the protocol's bounds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/status.h"
#include "objects/wire.h"

namespace wire = meridian::objects::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (bytes.size() >= sizeof(wire::Request)) {
    auto r = wire::DecodeRequest(bytes.substr(0, sizeof(wire::Request)));
    if (r.ok()) {
      MERIDIAN_CHECK_MSG(r->site_length <= wire::kMaxSite, "an oversized site accepted");
      MERIDIAN_CHECK_MSG(r->op != wire::kOpPut || r->length <= wire::kMaxObjectBytes, "an oversized put accepted");
      const std::string_view site = bytes.substr(sizeof(wire::Request), r->site_length);
      wire::CheckSite(site).IgnoreError();
    }
  }
  if (bytes.size() >= sizeof(wire::Response)) {
    auto r = wire::DecodeResponse(bytes.substr(0, sizeof(wire::Response)));
    if (r.ok()) MERIDIAN_CHECK_MSG(r->size <= wire::kMaxObjectBytes, "an oversized object accepted");
  }
  if (bytes.size() >= sizeof(wire::ChunkHeader) + 16) {
    uint64_t next = 0, want = 0;
    __builtin_memcpy(&next, bytes.data() + sizeof(wire::ChunkHeader), 8);
    __builtin_memcpy(&want, bytes.data() + sizeof(wire::ChunkHeader) + 8, 8);
    auto h = wire::DecodeChunk(bytes.substr(0, sizeof(wire::ChunkHeader)), next, want);
    if (h.ok()) MERIDIAN_CHECK_MSG(h->offset == next && h->length == want, "an unexpected chunk accepted");
  }
  wire::DecodeRequest(bytes).status().IgnoreError();  // any length
  return 0;
}
