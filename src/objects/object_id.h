// Content-derived object ids and chunk checksums. Objects are cut into chunks of
// kChunkBytes; each chunk has a 64-bit XXH3 checksum, and an object's id is the
// 128-bit XXH3 hash of its size and its chunks' checksums (a two-level hash, like a
// one-level Merkle tree). The same bytes have the same id on every node; a receiver
// that verified every chunk as it arrived gets the id from the checksums alone and
// compares it with the id it asked for, without a second pass over the bytes.
//
// Thread-safety: values; the functions are pure.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace meridian::objects {

inline constexpr int64_t kChunkBytes = 1 << 20;

struct ObjectId {
  uint64_t high = 0;
  uint64_t low = 0;
  friend auto operator<=>(const ObjectId&, const ObjectId&) = default;

  // 32 lowercase hex digits.
  std::string Hex() const;
  static StatusOr<ObjectId> Parse(std::string_view hex);
  static ObjectId Of(std::string_view data);
  // The id of an object of `size` bytes whose chunks have these checksums.
  static ObjectId FromChunks(int64_t size, const std::vector<uint64_t>& checksums);
};

uint64_t ChunkChecksum(std::string_view chunk);
// The checksum of every kChunkBytes-long piece of `data` (the last may be shorter).
std::vector<uint64_t> ChunkChecksums(std::string_view data);
inline int64_t ChunkCount(int64_t size) { return (size + kChunkBytes - 1) / kChunkBytes; }

}  // namespace meridian::objects
