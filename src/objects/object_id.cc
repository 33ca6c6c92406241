#include "objects/object_id.h"

#include <xxhash.h>

#include <fmt/format.h>

namespace meridian::objects {

std::string ObjectId::Hex() const { return fmt::format("{:016x}{:016x}", high, low); }

StatusOr<ObjectId> ObjectId::Parse(std::string_view hex) {
  if (hex.size() != 32) {
    return InvalidArgumentError(fmt::format("object id '{}': expected 32 hex digits, got {}", hex, hex.size()));
  }
  ObjectId id;
  for (size_t i = 0; i < 32; ++i) {
    char c = hex[i];
    int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (v < 0) return InvalidArgumentError(fmt::format("object id '{}': '{}' is not a hex digit", hex, c));
    uint64_t& word = i < 16 ? id.high : id.low;
    word = (word << 4) | static_cast<uint64_t>(v);
  }
  return id;
}

ObjectId ObjectId::Of(std::string_view data) {
  return FromChunks(static_cast<int64_t>(data.size()), ChunkChecksums(data));
}

ObjectId ObjectId::FromChunks(int64_t size, const std::vector<uint64_t>& checksums) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  const uint64_t size_le = static_cast<uint64_t>(size);  // the platforms we build for are little-endian
  XXH3_128bits_update(state, &size_le, sizeof(size_le));
  XXH3_128bits_update(state, checksums.data(), checksums.size() * sizeof(uint64_t));
  XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return ObjectId{h.high64, h.low64};
}

uint64_t ChunkChecksum(std::string_view chunk) { return XXH3_64bits(chunk.data(), chunk.size()); }

std::vector<uint64_t> ChunkChecksums(std::string_view data) {
  std::vector<uint64_t> out;
  out.reserve(static_cast<size_t>(ChunkCount(static_cast<int64_t>(data.size()))));
  for (size_t off = 0; off < data.size(); off += kChunkBytes) out.push_back(ChunkChecksum(data.substr(off, kChunkBytes)));
  return out;
}

}  // namespace meridian::objects
