// A regular file mapped read-only: its bytes as one view without reading them in
// first. The kernel pages them in as they are read and may drop them again, so a
// file of many GiB costs no more memory than the machine can spare.
//
// Thread-safety: data() may be read from any thread while the MappedFile lives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace meridian {

class MappedFile {
 public:
  // kNotFound when there is no `path`, kInvalidArgument when it is not a regular
  // file; kUnavailable when it cannot be opened or mapped.
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view data() const { return {static_cast<const char*>(addr_), size_}; }
  int64_t size() const { return static_cast<int64_t>(size_); }

 private:
  MappedFile(void* addr, size_t size) : addr_(addr), size_(size) {}
  void* addr_;  // null for an empty file
  size_t size_;
};

}  // namespace meridian
