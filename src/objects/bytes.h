// An object's bytes: one allocation, never zero-filled first (a transfer writes every
// byte of it), on transparent huge pages when large, so that filling 1 GiB costs 512
// page faults rather than 262,144.
//
// Thread-safety: immutable once shared as const.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>

namespace meridian::objects {

class Bytes {
 public:
  // Uninitialised bytes; the caller writes all of them before sharing. Throws
  // std::bad_alloc when the memory cannot be had: use it for sizes the process chose.
  static std::shared_ptr<Bytes> Allocate(size_t size);
  // The same for a size that came from outside (a peer's announcement): null when the
  // memory cannot be had, never an exception.
  static std::shared_ptr<Bytes> TryAllocate(size_t size) noexcept;
  static std::shared_ptr<Bytes> Copy(std::string_view data);
  ~Bytes();
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_, size_}; }

 private:
  Bytes(char* data, size_t size) : data_(data), size_(size) {}
  char* data_;
  size_t size_;
};

}  // namespace meridian::objects
