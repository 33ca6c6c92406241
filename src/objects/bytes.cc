#include "objects/bytes.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace meridian::objects {
namespace {
constexpr size_t kHugePage = size_t{2} << 20;
}

std::shared_ptr<Bytes> Bytes::Allocate(size_t size) {
  void* p = nullptr;
  if (size >= kHugePage) {
    const size_t rounded = (size + kHugePage - 1) / kHugePage * kHugePage;
    if (posix_memalign(&p, kHugePage, rounded) != 0) throw std::bad_alloc();
    madvise(p, rounded, MADV_HUGEPAGE);  // a hint: without huge pages, plain pages
  } else {
    p = std::malloc(size == 0 ? 1 : size);
    if (p == nullptr) throw std::bad_alloc();
  }
  return std::shared_ptr<Bytes>(new Bytes(static_cast<char*>(p), size));
}

std::shared_ptr<Bytes> Bytes::TryAllocate(size_t size) noexcept {
  try {
    return Allocate(size);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

std::shared_ptr<Bytes> Bytes::Copy(std::string_view data) {
  std::shared_ptr<Bytes> b = Allocate(data.size());
  if (!data.empty()) std::memcpy(b->data(), data.data(), data.size());
  return b;
}

Bytes::~Bytes() { std::free(data_); }

}  // namespace meridian::objects
