#include "objects/link_clock.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <xxhash.h>

namespace meridian::objects {

// One cache line per link, laid out the same in every process that maps the file.
struct LinkClocks::Slot {
  std::atomic<uint64_t> key;           // hash of (from, to); 0: free
  std::atomic<int64_t> next_free_us;   // when the link is next free
  char pad[48];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the clocks are shared between processes");

namespace {
constexpr size_t kSlotBytes = 64;
constexpr size_t kTableBytes = LinkClocks::kSlots * kSlotBytes;
}  // namespace

StatusOr<std::unique_ptr<LinkClocks>> LinkClocks::Open(const std::string& path) {
  void* p = MAP_FAILED;
  if (path.empty()) {
    p = mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  } else {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return UnavailableError(fmt::format("cannot open the link clocks {}: {}", path, std::strerror(errno)));
    // Every process extends it to the same size; the new bytes read as zeros (free).
    if (ftruncate(fd, kTableBytes) != 0) {
      const int err = errno;
      close(fd);
      return UnavailableError(fmt::format("cannot size the link clocks {}: {}", path, std::strerror(err)));
    }
    p = mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
  }
  if (p == MAP_FAILED) return UnavailableError(fmt::format("cannot map the link clocks: {}", std::strerror(errno)));
  return std::unique_ptr<LinkClocks>(new LinkClocks(static_cast<Slot*>(p), !path.empty()));
}

LinkClocks::~LinkClocks() { munmap(slots_, kTableBytes); }

static_assert(sizeof(std::atomic<uint64_t>) * 2 + 48 == kSlotBytes);

int64_t LinkClocks::Book(std::string_view from, std::string_view to, int64_t bytes, int64_t bandwidth_bps,
                         int64_t now_us) {
  if (bandwidth_bps <= 0) return now_us;
  std::string pair;
  pair.reserve(from.size() + to.size() + 1);
  pair.append(from).push_back('\0');
  pair.append(to);
  const uint64_t key = std::max<uint64_t>(1, XXH3_64bits(pair.data(), pair.size()));
  const int64_t cost_us = static_cast<int64_t>(static_cast<__int128>(bytes) * 8 * 1'000'000 / bandwidth_bps);
  // Open addressing: the pair's slot, or the first free one after it. A full table
  // (more site pairs than slots) paces the extra pairs on the last slot probed.
  Slot* slot = nullptr;
  for (size_t i = 0; i < kSlots; ++i) {
    Slot& s = slots_[(key + i) % kSlots];
    uint64_t seen = s.key.load(std::memory_order_acquire);
    if (seen == 0 && s.key.compare_exchange_strong(seen, key, std::memory_order_acq_rel)) seen = key;
    slot = &s;
    if (seen == key) break;
  }
  int64_t free_at = slot->next_free_us.load(std::memory_order_acquire);
  int64_t done;
  do {
    done = std::max(now_us, free_at) + cost_us;
  } while (!slot->next_free_us.compare_exchange_weak(free_at, done, std::memory_order_acq_rel));
  return done;
}

}  // namespace meridian::objects
